/*
** session.h: the protocol thread's sessions (session.c), for server.c. Not installed, not
** API.
*/
#ifndef tidepool_mcp_session_h
#define tidepool_mcp_session_h

#include "state.h"

/* Forgets session ss, not busy (why: logged and remembered for its id; NULL: neither);
** its worker destroys the sandbox (M_DROP). */
void tp__mcp_session_drop(server *s, session *ss, const char *why);
/* The session for a call, made if needed. NULL with *err (code) and msg set when the call
** cannot have it. info gets the "session" field of the result. */
session *tp__mcp_session_for(server *s, const char *who, const char *id, size_t idlen,
                             json_t **info, const char **err, char *msg, size_t msglen);
/* The worker with the least work, counting sessions when with_sessions; ties go round. */
worker *tp__mcp_session_least_loaded(server *s, int with_sessions);
/* The sweep timer's callback: drops the sessions idle longer than --session-idle. */
void tp__mcp_session_sweep(uv_timer_t *t);

#endif
