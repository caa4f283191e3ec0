/*
** pause.h: a paused run of a worker (pause.c): held calls (approvals; later caller tools), elicitation, the durable record, restore. Runs on the worker's thread. Not installed, not API.
*/
#ifndef tidepool_mcp_pause_h
#define tidepool_mcp_pause_h

#include "state.h"

void tp__mcp_pause_resume(worker *w, uint64_t serial, const char *text, size_t len);
void tp__mcp_pause_dur_load(worker *w, req *q);
void tp__mcp_pause_apx_end(worker *w, req *q, int quiet, const char *why);
void tp__mcp_pause_on_approval(tp_call *c, const char *reason, void *ud);
void tp__mcp_pause_elicit_answer(worker *w, const char *text, size_t len);
void tp__mcp_pause_done(worker *w, req *q);
void tp__mcp_pause_dur_begin(worker *w, req *q, tp_run *run);
void tp__mcp_pause_dur_end(worker *w, req *q);

/* A caller tool's call (tp_caller_call_cb) and its cancellation: the call is held and
** travels to the caller (live) or the run pauses for resume_run (paused). */
void tp__mcp_pause_caller_call(tp_call *c, void *ud);
void tp__mcp_pause_caller_cancel(tp_call *c, void *ud);

#endif
