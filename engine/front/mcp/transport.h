/*
** transport.h: what a transport of `tidepool mcp` (stdio.c, http.c) fills in, and the
** server's entries (server.c) handed to it. Not installed, not API.
**
** The server reaches a transport only through its tp__mcp_transport; a transport reaches
** the server only through the tp__mcp_entries main.c gives it. An origin is where one
** message came from (an HTTP request; NULL on standard input): what the server writes
** while handling it, and later for its run, goes back to it. Everything runs on the
** protocol thread's loop.
*/
#ifndef tidepool_mcp_transport_h
#define tidepool_mcp_transport_h

#include <stddef.h>

#include <jansson.h>

typedef struct tp__mcp_transport {
  void *ud;                 /* the transport's own */
  /* Writes a line for origin: final, the response of its message; else a notification
  ** or a request of the server. A transport of origins drops a line for origin NULL. */
  void (*emit)(void *ud, void *origin, const char *line, size_t len, int final);
  /* A transport of one origin (standard input and output) may also write a line from any
  ** thread, at once (NULL: lines go through the protocol thread's emit). A worker sends
  ** its caller tools' calls this way, a thread hop shorter (docs/caller-tools.md); the
  ** line is dropped once the transport stopped. */
  void (*emit_any)(void *ud, const char *line, size_t len);
  /* A request of the server keeps origin alive (hold) until it is done (release). */
  void (*hold)(void *origin);
  void (*release)(void *origin);
  /* Who sent origin: 1 with principal and scopes (borrowed, valid during the call), or 0
  ** when no one was checked. */
  int (*principal)(void *origin, const char **principal, const char **scopes);
  /* The W3C traceparent origin's request carried outside the message (an HTTP header),
  ** borrowed; NULL for none. May be NULL. */
  const char *(*traceparent)(void *origin);
  /* Whether origin's answer can carry requests of the server (an elicitation) before
  ** its response. */
  int (*streams)(void *origin);
  /* Too much waits: stop taking messages (pause) until resume. May be NULL. */
  void (*pause)(void *ud);
  void (*resume)(void *ud);
  /* The workers are ready: start taking messages (the server's tools and workers, for
  ** the line that says so). */
  void (*serve)(void *ud, size_t ntools, unsigned nworkers);
  /* No more messages: stop taking them (idempotent). */
  void (*stop)(void *ud);
  /* Frees the transport, once no request holds an origin. */
  void (*free)(void *ud);
  /* Hold a response a moment after progress notifications (the reference stdio client
  ** drops progress that arrives after the response). */
  int defer_after_progress;
} tp__mcp_transport;

typedef struct tp__mcp_entries {
  void *s;                  /* the server */
  /* Handles message msg (borrowed) of origin. */
  void (*handle)(void *s, void *origin, json_t *msg);
  /* Handles a line of JSON-RPC text (a message or a batch; NULL: a line over the cap,
  ** skipped), of the transport's one origin (NULL). */
  void (*line)(void *s, const char *text, size_t len);
  /* Cancels the run of origin's request (no response). */
  void (*cancel)(void *s, void *origin);
  /* Input ended: answer what is in flight, then stop. */
  void (*eof)(void *s);
  /* Stops the server now (a signal). */
  void (*stop)(void *s);
  /* The workers' engine metrics summed and the server's own series, as Prometheus text
  ** (malloc'd, *len its length); NULL when out of memory. */
  char *(*metrics)(void *s, size_t *len);
  /* --ui (NULL without): what the operator page shows, as JSON (ui.c's snapshot: recent
  ** runs, paused runs and their pending calls, sessions); new reference, NULL when out
  ** of memory. */
  json_t *(*ui_state)(void *s);
  /* --ui: an operator's decision on call seq of paused run run, through resume_run's
  ** path, audited with operator as its principal. 0, or an HTTP status (404: no such
  ** paused run or call, 409: not decidable here, 500) with why set. */
  int (*ui_decide)(void *s, const char *run, long long seq, int approve, const char *note,
                   const char *operator_name, char *why, size_t whylen);
} tp__mcp_entries;

/* ---- the standard input and output transport (stdio.c) ------------------------------- */
typedef struct tp__mcp_stdio tp__mcp_stdio;
/* Standard input on loop (a uv_loop_t), each line (at most line_max bytes; a longer one
** is skipped) handed to ent's line entry; lines written to fd out. Reading starts with
** the transport's serve. NULL when out of memory. */
tp__mcp_stdio *tp__mcp_stdio_new(const tp__mcp_entries *ent, void *loop, int out,
                                 size_t line_max);
/* Fills t with st's transport. */
void tp__mcp_stdio_transport(tp__mcp_stdio *st, tp__mcp_transport *t);

#endif
