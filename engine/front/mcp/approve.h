/*
** approve.h: what `tidepool mcp` needs to ask a person about a call that a policy
** rule holds ("effect": "ask"), apart from the server's threads: the server secret and
** what is derived from it (decision bindings, sealed requestState), the texts a client
** and a model read (the elicitation, the paused result, resume_run's definition), and
** the parsing of what comes back. Not installed, not API. Pure functions of their
** arguments and of the secret, which is set once before the workers start.
*/
#ifndef tidepool_mcp_approve_h
#define tidepool_mcp_approve_h

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "tidepool.h"

/* The default --pause-ttl: a paused run waits this long for its decisions. */
#define TP__MCP_APPROVE_TTL_DEFAULT_US (24ull * 3600u * 1000000u)
/* A run id: "<worker>-<32 hex digits>", NUL included. */
#define TP__MCP_APPROVE_RUN_ID_MAX 48
/* A binding: HMAC-SHA256 in hex, NUL included. */
#define TP__MCP_APPROVE_BINDING_LEN 65
/* The id prefix of the elicitation requests the server sends. */
#define TP__MCP_APPROVE_ELICIT_PREFIX "tidepool-approve-"

/* Sets the server secret: the contents of file (at least 32 bytes; several servers that
** share the file accept each other's bindings and requestStates), or 32 random bytes when
** file is NULL. 0, or -1 with why (for a person). */
int tp__mcp_approve_secret_init(const char *file, char *why, size_t whylen);

/* --pause-ttl's value: a duration as the limits take it ("500ms", "30s", "10m") or in
** hours ("24h"), into *us. 0, or -1 with why. */
int tp__mcp_approve_parse_ttl(const char *text, uint64_t *us, char *why, size_t whylen);

/* A --pause-ttl value as the option takes it ("24h", "500ms"). */
void tp__mcp_approve_format_ttl(uint64_t us, char *buf, size_t len);

/* A new run id for worker w into out[TP__MCP_APPROVE_RUN_ID_MAX]. */
void tp__mcp_approve_run_id(unsigned w, char *out);

/* The binding of a decision on call seq of run run_id: HMAC-SHA256 under the secret of
** run_id, seq, tool, the SHA-256 of args (the call's arguments as the engine writes
** JSON) and the principal whose run it is (NULL or "": the local one, without auth), as
** hex into out[TP__MCP_APPROVE_BINDING_LEN]. A binding holds only for the principal it was issued
** to, as a requestState does. */
void tp__mcp_approve_binding(const char *run_id, uint64_t seq, const char *tool, const char *args,
                     const char *principal, char *out);
/* Nonzero when given (any string, compared in constant time) is want. */
int tp__mcp_approve_binding_eq(const char *want, const char *given, size_t given_len);

/* Whether a config's text has a policy rule with "effect": "ask" (resume_run is listed
** then). */
int tp__mcp_approve_config_asks(const char *config, size_t len);

/* The params of an elicitation/create (form mode, with "mode" when with_mode) asking to
** approve a call of tool with args (JSON text, cut to a readable size) for reason. New
** reference, NULL when out of memory. */
json_t *tp__mcp_approve_elicit_params(const char *tool, const char *args, const char *reason,
                              int with_mode);

/* Reads an elicitation's answer (an ElicitResult, or NULL for a JSON-RPC error whose
** message is errmsg): *approve, and a reason for the script when it is not approved
** (note gets the person's note or what happened). */
void tp__mcp_approve_elicit_answer(const json_t *result, const char *errmsg, int *approve,
                           char *note, size_t notelen);

/* One pending call as the model reads it: {seq, tool, args, reason, binding} (args parsed
** back from its text). New reference, NULL when out of memory. */
json_t *tp__mcp_approve_pending_entry(uint64_t seq, const char *tool, const char *args,
                              const char *reason, const char *binding);

/* The model's view of a paused run: {"ok": false, "status": "paused", "run", "pending",
** "calls", "message"} (pending and calls stolen). New reference, NULL when out of
** memory. */
json_t *tp__mcp_approve_paused_view(const char *run_id, json_t *pending, json_t *calls,
                            const char *resume_tool, uint64_t ttl_us);

/* resume_run's entry of tools/list. New reference. */
json_t *tp__mcp_approve_resume_tool(const char *name);

/* Seals state (an object) for principal ("" for none) as a requestState: base64url of
** nonce, AES-256-GCM ciphertext and tag under a key derived from the secret; it expires
** ttl_us from now. Caller frees; NULL when out of memory. */
char *tp__mcp_approve_seal(const json_t *state, const char *principal, uint64_t ttl_us);
/* Opens a requestState sealed for principal: the state object (new reference), or NULL
** with *code set to a JSON-RPC error code and why to a message for the client. */
json_t *tp__mcp_approve_open(const char *text, size_t len, const char *principal, int *code,
                     char *why, size_t whylen);

/* ---- durable paused runs (`tidepool mcp --state`): the hash of the config's policy a
** paused run is tied to, and the run's limits as JSON and back. -------------------- */
/* SHA-256 hex, NUL included. */
#define TP__MCP_APPROVE_HASH_LEN 65
/* How long past its expiry a stored run is kept, so that resume_run can say it expired
** rather than that it never was. */
#define TP__MCP_APPROVE_GRACE_MS (3600 * 1000)

/* The SHA-256 (hex, into out) of the config's "policy" section as the engine writes JSON
** (sorted keys, no spaces), or of "null" when there is no config or no policy. */
void tp__mcp_approve_policy_hash(const char *config, size_t len, char *out);

/* The limits as {field: integer} (the tp_limits member names). New reference or NULL. */
json_t *tp__mcp_approve_limits_json(const tp_limits *l);

/* Reads what tp__mcp_approve_limits_json made into *l (which starts from the defaults; unknown
** fields are skipped). 0, or -1 when a value is not one the limit takes. */
int tp__mcp_approve_limits_read(const json_t *j, tp_limits *l);

#endif
