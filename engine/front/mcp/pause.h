/*
** pause.h: a paused run of a worker (pause.c): held calls (approvals, caller tools),
** elicitation, the durable record, restore; and the job's one transition function. Runs
** on the worker's thread. Not installed, not API.
*/
#ifndef tidepool_mcp_pause_h
#define tidepool_mcp_pause_h

#include "state.h"

void tp__mcp_pause_job_to(job *q, tp__mcp_job_state st);
void tp__mcp_pause_resume(worker *w, mail *m);
void tp__mcp_pause_dur_load(worker *w, job *q);
void tp__mcp_pause_apx_end(worker *w, job *q, int quiet, const char *why);
void tp__mcp_pause_on_approval(tp_call *c, const char *reason, void *ud);
void tp__mcp_pause_elicit_answer(worker *w, const char *text, size_t len);
void tp__mcp_pause_done(worker *w, job *q, int ended_parked);
void tp__mcp_pause_dur_begin(worker *w, job *q, tp_run *run);
void tp__mcp_pause_dur_end(worker *w, job *q);

/* A caller tool's call (tp_caller_call_cb) and its cancellation: the call is held and
** travels to the caller (live) or the run pauses for resume_run (paused). */
void tp__mcp_pause_caller_call(tp_call *c, void *ud);
void tp__mcp_pause_caller_cancel(tp_call *c, void *ud);

#endif
