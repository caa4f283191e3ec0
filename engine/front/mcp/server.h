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
#include "state.h"


typedef struct tp__mcp_server tp__mcp_server;

/* A server with options o, the state store kv (taken), its name as the holder of
** sessions owner (taken; NULL without --state) and the --audit file audit_fd (-1: none);
** its entries for a transport into *entries. NULL when out of memory. */
tp__mcp_server *tp__mcp_server_new(const tp__mcp_options *o, const tp__mcp_worker_ops *wops,
                                   tp_store *kv, char *owner, int audit_fd, int journal_fd,
                                   tp__mcp_entries *entries);
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
tp__mcp_server *tp__mcp_server_fuzz_new(const tp__mcp_options *o, const tp__mcp_worker_ops *wops,
                                        const tp__mcp_transport *t);
void tp__mcp_server_fuzz_line(tp__mcp_server *s, const char *line, size_t len);

#endif
