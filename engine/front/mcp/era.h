/*
** era.h: the protocol eras of `tidepool mcp` (era.c). Not installed, not API.
**
** MCP 2025-06-18 and 2025-11-25 (and the older versions a client may ask for) open with
** an initialize handshake, whose version and capabilities hold for the connection. MCP
** 2026-07-28 has no handshake and no protocol session: every request names its version,
** the client's capabilities and the client in params._meta, under the keys below;
** server/discover replaces the handshake, and subscriptions/listen replaces unsolicited
** list-changed notifications. One server speaks both: a request is of the 2026 era when
** its _meta carries the envelope, and of the era of the handshake otherwise.
*/
#ifndef tidepool_mcp_era_h
#define tidepool_mcp_era_h

#include <stddef.h>

#include <jansson.h>

#include "tidepool_server.h"  /* TP_MCP_MODERN_VERSION, tp_mcp_version */

#define TP_MCP_META_VERSION      "io.modelcontextprotocol/protocolVersion"
#define TP_MCP_META_CAPABILITIES "io.modelcontextprotocol/clientCapabilities"
#define TP_MCP_META_CLIENT_INFO  "io.modelcontextprotocol/clientInfo"
#define TP_MCP_META_LOG_LEVEL    "io.modelcontextprotocol/logLevel"
#define TP_MCP_META_SERVER_INFO  "io.modelcontextprotocol/serverInfo"
#define TP_MCP_META_SUBSCRIPTION "io.modelcontextprotocol/subscriptionId"

/* UnsupportedProtocolVersionError of 2026-07-28 (data: supported, requested) */
#define TP_MCP_UNSUPPORTED_VERSION (-32022)

/* What a request says of its era. The pointers borrow from the request's params. */
typedef struct tp__mcp_era_req {
  const char *version;        /* the version its _meta names (a 2026-era one) */
  const json_t *caps;         /* _meta's clientCapabilities (an object), or NULL */
  const json_t *client_info;  /* _meta's clientInfo, or NULL */
  const char *log_level;      /* _meta's logLevel, or NULL */
} tp__mcp_era_req;

/* Is the request of method with params (an object or NULL) of the 2026 era, and with
** which client capabilities? Returns 0 for a request of the handshake's era (no 2026
** envelope in params._meta: served as before), 1 for a 2026-era request (r filled), and
** -1 when the request names no version the server speaks, or carries a 2026 envelope
** without its version, or is a 2026-only method (server/discover, subscriptions/listen)
** without one: then *error gets the JSON-RPC error object to answer with (code -32022,
** data {supported, requested}), or stays NULL when out of memory. The HTTP front end may
** call it too: its Mcp-Protocol-Version header must then agree with r->version. */
int tp__mcp_era_of(const char *method, const json_t *params, tp__mcp_era_req *r,
                   json_t **error);

/* Every version the server speaks, latest first (the 2026 era's and the handshake's). */
json_t *tp__mcp_era_supported(void);
/* Whether v (may be NULL) is one of them. */
int tp__mcp_era_known(const char *v);
/* The version initialize answers a client that asks for want (may be NULL): want when
** it is a handshake version, else the latest handshake version. */
const char *tp__mcp_era_handshake(const char *want);
/* Whether a connection that negotiated v (NULL: none yet) may send JSON-RPC batches
** (removed in 2025-06-18). */
int tp__mcp_era_batches(const char *v);
/* Whether a client of version v asks for elicitation with a form "mode" (2025-11-25 on). */
int tp__mcp_era_elicit_mode(const char *v);
/* The versions, latest first, as "2026-07-28, 2025-11-25, ..." into buf[len]. */
void tp__mcp_era_list(char *buf, size_t len);

/* The instructions of initialize and server/discover (the same text), for the script
** tool named tool, into buf[len]. */
void tp__mcp_era_instructions(char *buf, size_t len, const char *tool);

/* The server's capabilities ({"tools": {"listChanged": true}, "logging": {}}) and its
** serverInfo, the same in every era. New references. */
json_t *tp__mcp_era_capabilities(void);
json_t *tp__mcp_era_server_info(void);

/* The server/discover result for the script tool named tool. */
json_t *tp__mcp_era_discover(const char *tool);

/* Makes result (an object, stolen and returned; NULL is taken as {}) a 2026-era result:
** resultType "complete", the serverInfo in _meta; with cacheable, the cache fields the
** 2026 tools/list result needs (ttlMs 0, cacheScope "private": the list changes when
** plugins reload, and subscriptions/listen says when). */
json_t *tp__mcp_era_result(json_t *result, int cacheable);

/* Bytes tp__mcp_era_stamp adds to a response line at most. */
#define TP_MCP_ERA_STAMP_ROOM 64
/* Makes the response line *line (*len bytes, malloc'ed: {"id":...,"jsonrpc":"2.0",
** "result":{...}}, as the workers build a tools/call's) a 2026-era one: resultType
** "complete" first in the result. A line whose result starts with a "resultType" of its
** own (input_required) is kept as it is. A line of another shape, or no memory, leaves it
** as is and returns -1; 0 otherwise. */
int tp__mcp_era_stamp(char **line, size_t *len);

/* ---- subscriptions/listen ---------------------------------------------------------- */
/* The open subscriptions of one server (stdio: one client). */
typedef struct tp__mcp_era_listen tp__mcp_era_listen;
tp__mcp_era_listen *tp__mcp_era_listen_new(void);
void tp__mcp_era_listen_free(tp__mcp_era_listen *l);
/* Opens a subscription for request id (copied) with params' notifications filter. Returns
** the notifications/subscriptions/acknowledged message to send (the filter's part the
** server honors: toolsListChanged), or NULL with *error (an error object: -32602 for a
** bad filter or an id in use, -32603 out of memory). */
json_t *tp__mcp_era_listen_open(tp__mcp_era_listen *l, const json_t *id, const json_t *params,
                            json_t **error);
/* Closes the subscription of request id (notifications/cancelled); 1 when there was one. */
int tp__mcp_era_listen_cancel(tp__mcp_era_listen *l, const json_t *id);
size_t tp__mcp_era_listen_count(const tp__mcp_era_listen *l);
/* The tools' list changed: the notifications to send, one per subscription that asked for
** it (with its subscriptionId in _meta), as a new array (empty: none). */
json_t *tp__mcp_era_listen_tools_changed(tp__mcp_era_listen *l);

#endif
