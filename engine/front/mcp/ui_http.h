/*
** ui_http.h: the operator page of `tidepool mcp --http --ui` (ui_http.c): /ui and its
** script and style sheet, sign-in, Approve and Deny. http.c routes the requests here;
** what the page shows comes from the server's ui_state entry (ui.c), decisions go to its
** ui_decide entry. Not installed, not API.
*/
#ifndef tidepool_mcp_ui_http_h
#define tidepool_mcp_ui_http_h

#include <stddef.h>
#include <stdint.h>

#include <microhttpd.h>

#include "transport.h"

/* A form post's body past this is refused (413). */
#define TP__MCP_UI_BODY_MAX 16384

struct tp__mcp_auth;
typedef struct tp__mcp_ui_http tp__mcp_ui_http;

/* The page of the server behind ent; auth the "auth" section's authenticator (NULL:
** none, then loopback clients only), classes the transport's responses by class (1xx to
** 5xx, counted here too). NULL when out of memory. */
tp__mcp_ui_http *tp__mcp_ui_http_new(const tp__mcp_entries *ent, struct tp__mcp_auth *auth,
                                     uint64_t *classes);
void tp__mcp_ui_http_free(tp__mcp_ui_http *u);

/* Whether url is the page's: /ui or under /ui/. */
int tp__mcp_ui_http_match(const char *url);

/* One request for the page; client is the peer's address (or the one a trusted proxy
** named). body (len bytes) is a POST's whole body, too_big when it went past
** TP__MCP_UI_BODY_MAX. */
typedef struct tp__mcp_ui_req {
  struct MHD_Connection *c;
  const char *method, *url, *client;
  const char *body;
  size_t len;
  int too_big;
} tp__mcp_ui_req;

/* Whether the request must be answered after its body (a POST): http.c reads it, then
** calls tp__mcp_ui_http_answer with it. */
int tp__mcp_ui_http_wants_body(const char *method);

/* Queues the answer of rq. */
enum MHD_Result tp__mcp_ui_http_answer(tp__mcp_ui_http *u, const tp__mcp_ui_req *rq);

#endif
