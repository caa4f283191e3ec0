/*
** worker.h: a worker of `tidepool mcp` (worker.c): its engine, loading, runs, progress,
** audit; its life, for main.c to hand to the server (tp__mcp_worker_ops). Not installed,
** not API.
*/
#ifndef tidepool_mcp_worker_h
#define tidepool_mcp_worker_h

#include "state.h"

void tp__mcp_worker_load(worker *w);
int tp__mcp_worker_open(worker *w);
void tp__mcp_worker_close(worker *w);
void *tp__mcp_worker_main(void *arg);

#endif
