/*
** driver.c: the engine's libuv driver. Started runs (tp_run_start) are stepped by an
** idle handle of the engine's loop; a run waiting on calls sleeps on a uv timer at its
** nearest deadline; a synchronous run (tp_engine_run) turns the loop until its calls
** move. The core tells the driver through tp__host_hooks.wake and .run_gone.
*/
#include <stdlib.h>

#include <uv.h>

#include "engine.h"
#include "calls.h"

static void idle_start(tp_engine *e);

static void wake_cb (uv_timer_t *t) { (void)t; }

/* Runs the engine's loop until something may have changed for r: a call completed, a
** call's or the run's deadline passed. Calls nobody will complete (tools without a
** handler, in a synchronous run) fail at once. */
void tp__driver_wait (tp_run *r) {
  uint64_t now = tp__now_ns(), next = r->deadline_ns;
  for (size_t i = tp__run_active_from(r); i < r->ncallv; i++) {
    tp_call *c = r->callv[i];
    if (c == NULL || c->state != CALL_RUNNING) continue;
    if (c->tool && (c->tool->flags & TP__TOOL_EXTERNAL)) {
      tp_call_fail(c, "tool.failed", "this tool has no handler here: it is completed by "
                   "the program that embeds tidepool, which did not run it step by step");
      return;
    }
    if (c->deadline_ns && (next == 0 || c->deadline_ns < next)) next = c->deadline_ns;
  }
  uv_timer_t *timer = r->host_data;
  if (timer == NULL) {
    r->host_data = timer = malloc(sizeof *timer);
    if (timer == NULL || uv_timer_init(r->e->loop, timer) != 0) {
      free(timer);
      r->host_data = NULL;
      tp_run_cancel(r);
      return;
    }
  }
  if (next) {
    uint64_t ms = next > now ? (next - now + 999999) / 1000000 : 0;
    uv_timer_start(timer, wake_cb, ms, 0);
  }
  uv_run(r->e->loop, UV_RUN_ONCE);
  uv_timer_stop(timer);
}

/* ---- the async driver -------------------------------------------------------------------
** Started runs are stepped by an idle handle of the engine's loop, a time slice each in
** turn. A run whose script waits on calls is skipped until tp__run_wake (a call
** completed, or its deadline timer fired); when every started run waits, the idle
** handle stops, so a server whose scripts all wait on tools uses no CPU.
*/
static void report_done (tp_run *r) {
  if (r->reported) return;
  r->reported = 1;
  r->async = 0;
  if (r->host_data) uv_timer_stop(r->host_data);
  if (r->done_cb) r->done_cb(r, r->done_ud);  /* may destroy r */
}

static void idle_cb (uv_idle_t *h);

static void idle_start (tp_engine *e) {
  if (e->idle_on) return;
  if (e->idle == NULL) {
    e->idle = malloc(sizeof *e->idle);
    if (e->idle == NULL || uv_idle_init(e->loop, e->idle) != 0) {
      free(e->idle);
      e->idle = NULL;
      return;
    }
    e->idle->data = e;
  }
  uv_idle_start(e->idle, idle_cb);
  e->idle_on = 1;
}

static void deadline_cb (uv_timer_t *t) { tp__run_wake(t->data); }

/* Arms r's timer at its nearest deadline while it waits. */
static void arm_deadline (tp_run *r) {
  uint64_t now = tp__now_ns(), next = r->deadline_ns;
  for (size_t i = tp__run_active_from(r); i < r->ncallv; i++) {
    tp_call *c = r->callv[i];
    if (c != NULL && c->state == CALL_RUNNING && c->deadline_ns && (next == 0 || c->deadline_ns < next))
      next = c->deadline_ns;
  }
  if (next == 0) return;
  uv_timer_t *timer = r->host_data;
  if (timer == NULL) {
    r->host_data = timer = malloc(sizeof *timer);
    if (timer == NULL || uv_timer_init(r->e->loop, timer) != 0) {
      free(timer);
      r->host_data = NULL;
      /* without it nothing may ever wake the run (a handler that failed out of memory
      ** before it could say so): it ends now */
      tp__sandbox_kill(r->sb, TP_KILL_MEMORY);
      tp_run_cancel(r);
      return;
    }
  }
  timer->data = r;
  uv_timer_start(timer, deadline_cb, next > now ? (next - now + 999999) / 1000000 : 0, 0);
}

/* tp__host_hooks.wake: r (started) may go on; the driver steps it at its turn. */
int tp__driver_wake (void *ud, tp_run *r) {
  tp_engine *e = ud;
  (void)r;
  idle_start(e);
  return e->idle_on ? TP_OK : TP_ENOMEM;
}

/* tp__host_hooks.run_gone: the run's timer goes with it. */
void tp__driver_run_gone (void *ud, tp_run *r) {
  (void)ud;
  if (r->host_data) uv_close((uv_handle_t *)r->host_data, (uv_close_cb)free);
  r->host_data = NULL;
}

/* One call steps the started runs in rounds: each run not yet stepped in this round
** gets a slice, until the calls' slices add up to one slice; the rest of the round is
** for the next call. So one tp_engine_poll does bounded work (about two slices at most)
** however many runs are busy, and the loop's I/O and timers run in between. */
static void idle_cb (uv_idle_t *h) {
  tp_engine *e = h->data;
  uint64_t slice = e->slice_us ? e->slice_us : 5000, t0 = tp__now_ns();
  int busy = 0, full = 0;
  for (tp_run *r = e->core.runs, *next; r != NULL; r = next) {
    next = r->next;
    if (!r->async) continue;
    if (r->state == ST_DONE) { report_done(r); continue; }
    if (r->waiting == 1 || r->round == e->round) continue;
    if (tp__now_ns() - t0 >= slice * 1000u) { full = 1; break; }
    r->round = e->round;
    if (r->waiting == 2) r->waiting = 1;
    int rc = tp_run_step(r, slice, 0);
    if (rc == TP_DONE || r->state == ST_DONE) report_done(r);
    else if (rc == TP_YIELD) busy = 1;
    else if (rc == TP_WAIT) arm_deadline(r);
    else { tp_run_cancel(r); report_done(r); }
  }
  if (full) busy = 1;
  else e->round++;  /* every run had its turn: the next call starts a new round */
  if (!busy) {
    for (tp_run *r = e->core.runs; r != NULL; r = r->next)
      if (r->async && (r->waiting != 1 || r->state == ST_DONE)) busy = 1;
  }
  if (!busy) {
    uv_idle_stop(h);
    e->idle_on = 0;
  }
}

static void close_handle (uv_handle_t *h, void *arg) {
  (void)arg;
  if (!uv_is_closing(h)) uv_close(h, NULL);
}

/* Closes the idle handle, the runs' timers and what else is left on the loop, then the
** loop (tp_engine_destroy, once the runs and the host state are gone). */
void tp__driver_close (tp_engine *e) {
  if (e->idle) uv_close((uv_handle_t *)e->idle, (uv_close_cb)free);
  uv_run(e->loop, UV_RUN_NOWAIT);   /* close callbacks of the runs' timers */
  uv_walk(e->loop, close_handle, NULL);
  uv_run(e->loop, UV_RUN_DEFAULT);
  uv_loop_close(e->loop);
  free(e->loop);
}

/* The engine's libuv loop, for host.c, the MCP server and tests (not public API). */
void *tp__engine_loop (tp_engine *e) { return e ? e->loop : NULL; }
