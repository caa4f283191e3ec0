/*
** mcp_http.h: `tidepool mcp --http`, the Streamable HTTP transport (mcp_http.c) of the MCP
** server (mcp.c). Not installed, not API.
**
** mcp.c keeps the protocol; mcp_http.c turns each POST into one message handed to
** tp__mcp_handle with the request as its origin, and gets back through tp__mcp_http_emit
** every line mcp.c writes for that message: its response (final) and the notifications
** of its run. Both sides run on the protocol thread's loop.
*/
#ifndef tidepool_mcp_http_h
#define tidepool_mcp_http_h

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>
#include <uv.h>

struct server;
typedef struct tp__mcp_http tp__mcp_http;

/* The command line's --http options; fields left 0 come from the config's "server"
** section, else from the defaults. */
typedef struct tp__mcp_http_opts {
  const char *listen;       /* --http: "PORT", "ADDR:PORT" or "[ADDR6]:PORT" */
  uint64_t max_body, max_header, max_streams, max_connections;
  uint64_t idle_us, request_us, keepalive_us, grace_us;
  unsigned given;           /* bit k: the k-th limit above was given (a 0 included) */
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

/* Binds the address (not serving yet: tp__mcp_http_serve) for server s on loop. NULL with
** the reason on standard error when the config's section is wrong or the address cannot
** be bound. */
tp__mcp_http *tp__mcp_http_new(struct server *s, uv_loop_t *loop, const tp__mcp_http_opts *o,
                               const char *config, size_t config_len, const char *config_dir);
/* Starts accepting connections; says so on standard error. */
void tp__mcp_http_serve(tp__mcp_http *h, size_t ntools, unsigned nworkers);
/* Closes every connection and the listening socket; h (may be NULL) is gone after. */
void tp__mcp_http_free(tp__mcp_http *h);

/* From mcp.c, about origin (an HTTP request): a line written for it (final: its
** response; else a notification), a request of mcp.c that keeps it (until release). */
void tp__mcp_http_emit(void *origin, const char *text, size_t len, int final);
void tp__mcp_http_hold(void *origin);
/* Who sent origin (with the config's "auth"): 1 with principal and scopes (borrowed, valid
** during the call), or 0 when no one was checked. */
int tp__mcp_http_principal(void *origin, const char **principal, const char **scopes);
void tp__mcp_http_release(void *origin);
/* Whether origin's answer is an SSE stream, which can carry requests of the server (an
** elicitation) before the response; a JSON answer carries the response alone. */
int tp__mcp_http_streams(void *origin);

/* In mcp.c, for mcp_http.c: handles message msg (borrowed) of origin; cancels the run of
** origin's request (no response); stops the server (once no request is left). */
void tp__mcp_handle(struct server *s, void *origin, json_t *msg);
void tp__mcp_cancel_origin(struct server *s, void *origin);
void tp__mcp_stop(struct server *s);

#endif
