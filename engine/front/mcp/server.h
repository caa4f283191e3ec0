/*
** server.h: the protocol thread of `tidepool mcp` (server.c): JSON-RPC, eras, sessions,
** the request queue. main.c makes it, gives it one transport (transport.h) and runs it.
** Not installed, not API.
*/
#ifndef tidepool_mcp_server_h
#define tidepool_mcp_server_h

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "tidepool.h"
#include "approve.h"
#include "transport.h"

/* What `tidepool mcp` was asked for (main.c reads it from the command line and the
** config); the server keeps a copy, whose pointers stay main.c's. */
typedef struct tp__mcp_options {
  tp_limits lim;
  const char *http_listen;  /* --http, or NULL */
  const char **dirs;        /* --tools, in order */
  size_t ndirs;
  int builtin, expose, test_tools;
  int describe;             /* --describe: 0 auto (the first that fits in 2,048 characters),
                            ** 1 full, 2 compact */
  const char *workspace, *name;
  const char *audit;        /* --audit FILE, or NULL */
  const char *state;        /* --state (or the config's "state"), or NULL: memory */
  const char *advertise;    /* --advertise URL: the owner's name of the sessions it holds */
  const char *config_path;  /* --config FILE, or NULL */
  char *config;             /* its text */
  size_t config_len;
  char *config_dir;         /* its folder, absolute: relative paths in it start there */
  char **config_owned;      /* the file's tools and workspace, copied (NULL-terminated) */
  const char **limit_opts;  /* the limit options given, field and value pairs, applied
                            ** over the file's limits */
  size_t nlimit_opts;
  uint64_t workspace_max;   /* --workspace-max, when workspace_max_set */
  int workspace_max_set;
  uint64_t session_idle_us;
  unsigned max_sessions, workers;
  int workers_set;          /* --workers given (else 1 when the config has MCP servers) */
  uint64_t pause_ttl_us;    /* --pause-ttl */
  uint64_t lease_us;        /* --lease: how long this server's claims outlive its silence */
  const char *secret_file;  /* --secret-file, or NULL (a random secret) */
  int asks;                 /* the config's policy has an "ask" rule: approvals are on */
  char policy_hash[TP__MCP_APPROVE_HASH_LEN];  /* of the config's policy (durable runs) */
} tp__mcp_options;

/* A request line; a longer one is answered -32600 (the transport skips it). */
#define TP__MCP_SERVER_LINE_IN_MAX (16u << 20)

typedef struct tp__mcp_server tp__mcp_server;

/* A server with options o, the state store kv (taken), its name as the holder of
** sessions owner (taken; NULL without --state) and the --audit file audit_fd (-1: none);
** its entries for a transport into *entries. NULL when out of memory. */
tp__mcp_server *tp__mcp_server_new(const tp__mcp_options *o, tp_store *kv, char *owner,
                                   int audit_fd, tp__mcp_entries *entries);
/* The protocol thread's loop, for the transport. */
uv_loop_t *tp__mcp_server_loop(tp__mcp_server *s);
/* Gives s its transport (copied): the server reaches it only through t. */
void tp__mcp_server_attach(tp__mcp_server *s, const tp__mcp_transport *t);
/* Starts the workers and serves until the server stops; the exit status. */
int tp__mcp_server_run(tp__mcp_server *s);
/* Stops what runs, joins the workers, frees the transport and s (NULL: nothing). */
void tp__mcp_server_free(tp__mcp_server *s);

/* For the fuzz target: a server whose one worker runs in the calling thread, writing to
** t; tp__mcp_server_fuzz_line handles one line and everything it starts. */
tp__mcp_server *tp__mcp_server_fuzz_new(const tp__mcp_options *o, const tp__mcp_transport *t);
void tp__mcp_server_fuzz_line(tp__mcp_server *s, const char *line, size_t len);

#endif
