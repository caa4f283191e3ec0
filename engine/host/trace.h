/*
** trace.h: OpenTelemetry spans of runs and their calls (trace.c). A run is a span; its
** policy decisions, tool calls and approval waits are its children; what a call causes (an
** upstream MCP request, an HTTP fetch, a command) are grandchildren. Spans are made when
** they end, from the records the core keeps already, so tracing costs nothing per call
** when it is off (the core tests one flag: tp_core.tracing, copied to tp_run.traced).
** The ids of a run's children derive from the run's span id and the call's id, so no
** state is kept per call: a provider asks for the call's traceparent when it needs it.
*/
#ifndef tidepool_trace_h
#define tidepool_trace_h

#include <stdint.h>
#include <jansson.h>

#include "engine.h"

#define TP__TRACEPARENT_LEN 55  /* "00-<32 hex>-<16 hex>-01" */

/* core hooks (tp__host_hooks.trace_call, .trace_run) */
void tp__trace_call_end(void *ud, tp_call *c);
void tp__trace_run_end(void *ud, tp_run *r, const char *code, const json_t *stats);
/* The policy decided on c (effect "allow", "deny", "ask", "rate_limited"), deciding from
** start_ns (tp__now_ns) until now. Only when c's run is traced. */
void tp__trace_policy(tp_engine *e, tp_call *c, uint64_t start_ns, const char *effect,
                      int rule);
/* The traceparent of call c's span into out (TP__TRACEPARENT_LEN + 1 bytes): 1, or 0 when
** its run is not traced or the config turned propagation off. */
int tp__trace_call_parent(tp_engine *e, const tp_call *c, char *out);
/* A span that ends now under the span of traceparent parent (a call's): name, kind (1
** internal, 3 client), start (tp__now_ns), ok, a status message (NULL) and attributes
** (a JSON object of strings and integers, borrowed; NULL). Nothing when tracing is off. */
void tp__trace_child(tp_engine *e, const char *parent, const char *name, int kind,
                     uint64_t start_ns, int ok, const char *status, const json_t *attrs);
/* The config's "telemetry" section (NULL: none). TP_OK, TP_EINVAL, TP_ENOMEM. */
int tp__trace_configure(tp_engine *e, const json_t *sec);
/* Sets tp_core.tracing from what wants the runs' ends: spans, or the audit journal. */
void tp__trace_update(tp_engine *e);
/* Run r's id in traces and the audit journal: 16 hex digits into out (17 bytes). */
void tp__trace_run_key(tp_engine *e, tp_run *r, char *out);
/* journal.c: a call's start ("call") or hold ("held"), its end, the run's end. */
void tp__journal_call(tp_engine *e, tp_call *c, const char *ev);
void tp__journal_end(tp_engine *e, tp_call *c);
void tp__journal_run(tp_engine *e, tp_run *r, const char *code);
/* metrics.c: a call ended, a run ended, a policy decided; freed at engine destroy. */
void tp__metrics_call(tp_engine *e, const tp_call *c);
void tp__metrics_run(tp_engine *e, tp_run *r, const char *code);
void tp__metrics_policy(tp_engine *e, const char *effect);
/* An upstream server of e's is ready (up 1) or not; restarted: it stopped after it had
** come up, and restarts (lua/upstream.lua, through E.upstream_state). */
void tp__metrics_upstream(tp_engine *e, const char *server, int up, int restarted);
/* A state store operation (TP_STORE_OP_*) answered after ns; failed: TP_STORE_ERROR or
** TP_STORE_CLOSED (store_timed.c). */
enum {
  TP_STORE_OP_KV_GET, TP_STORE_OP_KV_SET, TP_STORE_OP_KV_DEL, TP_STORE_OP_KV_LIST,
  TP_STORE_OP_BUCKET_TAKE, TP_STORE_OP_RUN_PUT, TP_STORE_OP_RUN_GET, TP_STORE_OP_RUN_DEL,
  TP_STORE_OP_LOG_PUT, TP_STORE_OP_LOG_READ, TP_STORE_OP_SESSION_CLAIM,
  TP_STORE_OP_SESSION_RELEASE, TP_STORE_OP_N
};
void tp__metrics_store(tp_engine *e, int op, uint64_t ns, int failed);
void tp__metrics_free(tp_engine *e);
/* Exports what is queued within a bounded time, then frees the tracer (engine destroy). */
void tp__trace_close(tp_engine *e);

#endif
