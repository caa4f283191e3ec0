/*
** http.h: `tidepool mcp --http`, the Streamable HTTP transport (http.c) of the MCP
** server (server.c). Not installed, not API.
**
** server.c keeps the protocol; http.c turns each POST into one message handed to the
** server's handle entry with the request as its origin, and gets back through its
** transport's emit every line the server writes for that message: its response (final)
** and the notifications of its run. Both sides run on the protocol thread's loop.
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
