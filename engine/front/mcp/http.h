/*
** http.h: `tidepool mcp --http`, the Streamable HTTP transport (http.c) of the MCP
** server (server.c). Not installed, not API.
**
** server.c keeps the protocol; http.c turns each POST into one message handed to the
** server's handle entry with the request as its origin, and gets back through its
** transport's emit every line the server writes for that message: its response (final)
** and the notifications of its run. Both sides run on the protocol thread's loop.
**
** HTTP is libmicrohttpd's (Debian's libmicrohttpd12): a maintained HTTP/1.1 server that
** can run without threads of its own on an epoll descriptor we watch, so the protocol
** thread's libuv loop drives it (a uv_poll on MHD's epoll descriptor, a uv_timer from
** MHD_get_timeout, MHD_run on each) and server.c's protocol code sees every request on its
** own thread, with no locks. We parse no HTTP here.
**
** One POST carries one JSON-RPC message (a batch is refused). Its answer:
**   a request: its response, as application/json; or as a text/event-stream (SSE) when
**     the client accepts one and the request is a tools/call with a progressToken (the
**     only requests whose runs send notifications: progress), the notifications first
**     and the response last, then the stream ends;
**   a notification or a response: 202 Accepted, no body.
** A response that comes later (a script's run) holds its connection suspended
** (MHD_suspend_connection) until server.c emits it; an SSE stream's body comes from a
** content reader that suspends the connection while it has nothing to send.
**
** Eras. 2025-era clients (MCP-Protocol-Version absent or before 2026-07-28) get a
** session: initialize's response carries Mcp-Session-Id, every later POST must carry it
** (400 without, 404 when unknown or ended), DELETE ends it; GET is 405 (no server-sent
** stream). 2026-07-28 clients have no session: POST only, Mcp-Method must match the
** body's method and Mcp-Name its params.name (tools/call, resources/read, prompts/get),
** else 400 (-32020); and a connection closed before its response cancels the run.
**
** Guards: Host and Origin are checked against the allowed lists (default: the localhost
** forms of the bound address; 403 otherwise); bodies past max_body are 413, request
** headers past max_header 431 (MHD's memory limit); a client has at most max_streams
** tools/call requests waiting for their responses (429 past it), where a client is a
** principal with auth and an address without (the address X-Forwarded-For names, when
** the direct peer is one of server.trusted_proxies); past max_connections open
** connections, a new one is answered 503 with Retry-After at its first request (MHD
** accepts OVERFLOW_CONNS more for that, and those that send nothing are shut down
** after a second) instead of waiting unseen in the listen queue; a connection idle for
** idle_timeout is closed by MHD, and one that has not sent a whole request within
** request_timeout of opening or of its last response (slowloris) is shut down here. SSE
** streams get a comment every keepalive.
**
** SIGTERM and SIGINT stop accepting (MHD_quiesce_daemon), let the requests in flight
** finish for shutdown_grace, cancel the rest, then the server exits with status 0.
*/
#ifndef tidepool_mcp_http_h
#define tidepool_mcp_http_h

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>
#include <uv.h>

#include "transport.h"

typedef struct tp__mcp_http tp__mcp_http;

/* The command line's --http options; fields left 0 come from the config's "server"
** section, else from the defaults. */
typedef struct tp__mcp_http_opts {
  const char *listen;       /* --http: "PORT", "ADDR:PORT" or "[ADDR6]:PORT" */
  uint64_t max_body, max_header, max_streams, max_connections;
  uint64_t idle_us, request_us, keepalive_us, grace_us;
  unsigned given;           /* bit k: the k-th limit above was given (a 0 included) */
  int ui;                   /* --ui: serve the operator page at /ui (ui_http.c) */
} tp__mcp_http_opts;

/* Is name (without "=value") an option of the HTTP transport? */
int tp__mcp_http_is_option(const char *name);
/* Takes option name's value val into o. 0, or -1 with why (for a person) set. */
int tp__mcp_http_option(tp__mcp_http_opts *o, const char *name, const char *val, char *why,
                        size_t whylen);
/* Prints the --help lines of the HTTP options to f. */
void tp__mcp_http_help(FILE *f);
/* Whether to serve HTTP: --http given, or the config's server.http set. */
int tp__mcp_http_wanted(const tp__mcp_http_opts *o, const char *config, size_t len);
/* 0 when the address to listen on (--http, else the config's server.http, else none) is
** well formed; -1 with why naming the flag or the config's path: a usage error. */
int tp__mcp_http_check(const tp__mcp_http_opts *o, const char *config, size_t len, char *why,
                       size_t whylen);

/* Binds the address (not serving yet: the transport's serve) for the server behind ent,
** on loop. NULL with the reason on standard error when the config's section is wrong or
** the address cannot be bound. */
tp__mcp_http *tp__mcp_http_new(const tp__mcp_entries *ent, uv_loop_t *loop,
                               const tp__mcp_http_opts *o, const char *config,
                               size_t config_len, const char *config_dir);
/* Fills t with h's transport (transport.h): serve starts accepting connections (and says
** so on standard error), free closes every connection and the listening socket. */
void tp__mcp_http_transport(tp__mcp_http *h, tp__mcp_transport *t);

#endif
