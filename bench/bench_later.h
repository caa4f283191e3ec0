/* bench_later.h: the async C tool of concurrent_10k, shared by bench_sched.c (its wall
** figures) and sched_instructions.c (its instruction count): bench.later completes after
** BENCH_LATER_MS on the engine's loop (ud: that uv_loop_t), from a uv timer. */
#ifndef tidepool_bench_later_h
#define tidepool_bench_later_h

#include <stdlib.h>

#include <uv.h>

#include "tidepool.h"

#define BENCH_LATER_MS 50

static const char bench_later_script[] = "local r = tools.bench.later{} return r.ok";

static inline void bench_later_closed (uv_handle_t *h) { free(h); }

static inline void bench_later_fired (uv_timer_t *t) {
  tp_call_complete(t->data, "{\"ok\":true}", 11);
  uv_close((uv_handle_t *)t, bench_later_closed);
}

static inline void bench_later (tp_call *c, void *ud) {
  uv_timer_t *t = malloc(sizeof *t);
  if (t == NULL || uv_timer_init(ud, t) != 0) {
    free(t);
    tp_call_fail(c, "tool.failed", "out of memory");
    return;
  }
  t->data = c;
  uv_timer_start(t, bench_later_fired, BENCH_LATER_MS, 0);
}

#endif
