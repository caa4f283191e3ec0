/*
** ui.h: what the operator page of `tidepool mcp --http --ui` knows of the server (ui.c):
** the recent runs (a bounded ring), the paused runs with their pending calls, and the
** operator's decisions made into resume_run's arguments. The worker writes a run's
** summary (tp__mcp_ui_summary) before M_DONE; everything else runs on the protocol
** thread. The page itself (HTML, sign-in, CSRF) is ui_http.c's. Not installed, not API.
*/
#ifndef tidepool_mcp_ui_h
#define tidepool_mcp_ui_h

#include <jansson.h>

#include "state.h"

/* Recent runs kept for the page (the oldest goes first). */
#define TP__MCP_UI_RUNS_MAX 50

typedef struct tp__mcp_ui tp__mcp_ui;

/* NULL when out of memory. */
tp__mcp_ui *tp__mcp_ui_new(void);
void tp__mcp_ui_free(tp__mcp_ui *u);

/* The worker: run's outcome, duration and calls' timeline as JSON text {ok, code, ms,
** calls: [...]} (tp_run_timeline's calls), from its envelope env; NULL when out of
** memory (the page then lists the run without them). */
char *tp__mcp_ui_summary(tp_run *run, const char *env);

/* The protocol thread: request q's run finished (M_DONE): it becomes the newest of u's
** recent runs (its summary taken). */
void tp__mcp_ui_done(tp__mcp_ui *u, req *q);

/* The protocol thread: q was answered with line, a paused result: its pending calls are
** kept on q for the page (none for a 2026-07-28 input_required result, whose bindings
** are sealed for the client). */
void tp__mcp_ui_parked(req *q, const char *line, size_t len);

/* The page's snapshot: {runs: [newest first], paused: [...], running, waiting, sessions,
** workers}. New reference, NULL when out of memory. */
json_t *tp__mcp_ui_snapshot(server *s);

/* An operator's decision on call seq of q (the parked run run, NULL when none is) into
** resume_run's arguments *args (new reference), and its line in the audit log with
** operator_name as the principal. 0, or an HTTP status with why set. */
int tp__mcp_ui_decision(server *s, req *q, const char *run, long long seq, int approve,
                        const char *note, const char *operator_name, json_t **args,
                        char *why, size_t whylen);

#endif
