/*
** driver.c: the engine's libuv driver. Started runs (tp_run_start) are stepped by an
** idle handle of the engine's loop, from its ready queue; a run waiting on calls sleeps
** on a uv timer at its nearest deadline, or in the engine's far list while that deadline
** is more than a second off; a synchronous run (tp_engine_run) turns the loop until its calls
** move. The core tells the driver through tp__host_hooks.wake and .run_gone.
*/
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "engine.h"
#include "calls.h"
#include "policy.h"

static void idle_start(tp_engine *e);

_Static_assert(sizeof(tp__drv_run) <= TP_RUN_HOST_SPACE, "the driver's record fits in the "
               "room a run keeps for it");
_Static_assert(_Alignof(tp__drv_run) <= 16, "and its alignment");

/* d's deadline timer, made at the first need; NULL when it cannot be. */
static uv_timer_t *drv_timer (tp__drv_run *d) {
  if (d->timer == NULL) {
    uv_timer_t *t = malloc(sizeof *t);
    if (t == NULL || uv_timer_init(d->r->e->loop, t) != 0) { free(t); return NULL; }
    d->timer = t;
  }
  return d->timer;
}

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
  tp__drv_run *d = tp__driver_of(r);
  uv_timer_t *timer = d ? drv_timer(d) : NULL;
  if (timer == NULL) {
    tp_run_cancel(r);
    return;
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
** turn. Runs that can take a step wait in the engine's ready queue (oldest first): a run
** is queued when it is started, when tp__run_wake says a call of it completed or a
** deadline passed, when it is cancelled, and again at the back after a step that used up
** its slice. A run whose script waits on calls is not queued, so the driver never looks
** at it; when the queue is empty the idle handle stops, and a server whose scripts all
** wait on tools uses no CPU.
*/
static void far_remove(tp__drv_run *d);

static void report_done (tp_run *r) {
  if (r->reported) return;
  r->reported = 1;
  r->async = 0;
  tp__drv_run *d = r->host_data;
  if (d) far_remove(d);
  if (d && d->timer) uv_timer_stop(d->timer);
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

/* Queues d at the back of the ready queue (once) and makes sure the driver runs. */
static void ready_push (tp__drv_run *d) {
  tp_engine *e = d->r->e;
  if (!d->queued) {
    d->queued = 1;
    d->ready_next = NULL;
    d->ready_prev = e->ready_tail;
    if (e->ready_tail) e->ready_tail->ready_next = d;
    else e->ready = d;
    e->ready_tail = d;
  }
  idle_start(e);
}

static void ready_remove (tp__drv_run *d) {
  if (!d->queued) return;
  tp_engine *e = d->r->e;
  if (d->ready_prev) d->ready_prev->ready_next = d->ready_next;
  else e->ready = d->ready_next;
  if (d->ready_next) d->ready_next->ready_prev = d->ready_prev;
  else e->ready_tail = d->ready_prev;
  d->ready_prev = d->ready_next = NULL;
  d->queued = 0;
}

static void deadline_cb (uv_timer_t *t) { tp__run_wake(t->data); }

/* A waiting run's deadline more than FAR_NS off waits in the engine's far list instead
** of a timer of its own: a server's runs wait on tools far less than their wall limit,
** and each timer cost a removal from libuv's timer heap (a cache miss per level) when
** the run went on, an eighth of the driver's time with 10,000 runs. One engine timer
** looks at the list every FAR_NS / 2 and gives a run its own timer once its deadline is
** nearer than FAR_NS, so deadlines keep their precision. */
#define FAR_NS 1000000000u

static void far_remove (tp__drv_run *d) {
  if (!d->in_far) return;
  tp_engine *e = d->r->e;
  if (d->far_prev) d->far_prev->far_next = d->far_next;
  else e->far = d->far_next;
  if (d->far_next) d->far_next->far_prev = d->far_prev;
  d->far_prev = d->far_next = NULL;
  d->in_far = 0;
  if (e->far == NULL) uv_timer_stop(e->far_timer);  /* nothing left to keep the loop */
}

static void arm_deadline(tp_run *r);

static void far_cb (uv_timer_t *t) {
  tp_engine *e = t->data;
  uint64_t now = tp__now_ns();
  for (tp__drv_run *d = e->far, *next; d != NULL; d = next) {
    next = d->far_next;
    if (d->far_ns - now <= FAR_NS || d->far_ns < now) {
      far_remove(d);
      arm_deadline(d->r);
    }
  }
}

/* Puts d in the far list; 0, or -1 when the engine's timer cannot be made. */
static int far_add (tp__drv_run *d, uint64_t deadline) {
  tp_engine *e = d->r->e;
  if (e->far_timer == NULL) {
    e->far_timer = malloc(sizeof *e->far_timer);
    if (e->far_timer == NULL || uv_timer_init(e->loop, e->far_timer) != 0) {
      free(e->far_timer);
      e->far_timer = NULL;
      return -1;
    }
    e->far_timer->data = e;
  }
  if (!uv_is_active((uv_handle_t *)e->far_timer))
    uv_timer_start(e->far_timer, far_cb, FAR_NS / 2000000, FAR_NS / 2000000);
  d->far_ns = deadline;
  d->far_prev = NULL;
  d->far_next = e->far;
  if (e->far) e->far->far_prev = d;
  e->far = d;
  d->in_far = 1;
  return 0;
}

/* Arms r's timer at its nearest deadline while it waits (or the far list's). */
static void arm_deadline (tp_run *r) {
  uint64_t now = tp__now_ns(), next = r->deadline_ns;
  for (size_t i = tp__run_active_from(r); i < r->ncallv; i++) {
    tp_call *c = r->callv[i];
    if (c != NULL && c->state == CALL_RUNNING && c->deadline_ns && (next == 0 || c->deadline_ns < next))
      next = c->deadline_ns;
  }
  if (next == 0) return;
  tp__drv_run *d = tp__driver_of(r);
  if (d != NULL && next > now && next - now > FAR_NS && far_add(d, next) == 0) return;
  uv_timer_t *timer = d ? drv_timer(d) : NULL;
  if (timer == NULL) {
    /* without it nothing may ever wake the run (a handler that failed out of memory
    ** before it could say so): it ends now */
    tp__sandbox_kill(r->sb, TP_KILL_MEMORY);
    tp_run_cancel(r);
    return;
  }
  timer->data = r;
  uv_timer_start(timer, deadline_cb, next > now ? (next - now + 999999) / 1000000 : 0, 0);
}

/* tp__host_hooks.wake: r (started) may go on: it leaves the far list and is queued, and
** the driver steps it at its turn. */
int tp__driver_wake (void *ud, tp_run *r) {
  tp_engine *e = ud;
  tp__drv_run *d = tp__driver_of(r);
  if (d == NULL) return TP_ENOMEM;
  far_remove(d);
  ready_push(d);
  return e->idle_on ? TP_OK : TP_ENOMEM;
}

/* tp__host_hooks.run_gone: the run leaves the queue and the far list, and its timer
** goes with it. */
void tp__driver_run_gone (void *ud, tp_run *r) {
  (void)ud;
  tp__drv_run *d = r->host_data;
  if (d == NULL) return;
  ready_remove(d);
  far_remove(d);
  if (d->timer) uv_close((uv_handle_t *)d->timer, (uv_close_cb)free);
  tp__policy_run_free(d->policy);
  json_decref(d->attrs);
  r->host_data = NULL;  /* d is in the run's host_space: it goes with the run */
}

/* One call takes runs from the front of the ready queue and steps each for a slice,
** until the calls' slices add up to one slice; a run that used its slice up goes to the
** back. So one tp_engine_poll does bounded work (about two slices at most) however many
** runs there are, busy or waiting, and the loop's I/O and timers run in between. */
static void idle_cb (uv_idle_t *h) {
  tp_engine *e = h->data;
  uint64_t slice = e->slice_us ? e->slice_us : 5000, t0 = tp__now_ns();
  tp__drv_run *last = e->ready_tail;  /* runs queued during this call wait for the next */
  for (tp__drv_run *d; (d = e->ready) != NULL; ) {
    ready_remove(d);
    int more = d != last;
    tp_run *r = d->r;
    if (r->async && r->state == ST_DONE) report_done(r);  /* may destroy r */
    else if (r->async && r->waiting != 1) {
      if (r->waiting == 2) r->waiting = 1;
      int rc = tp_run_step(r, slice, 0);
      if (rc == TP_DONE || r->state == ST_DONE) report_done(r);
      else if (rc == TP_YIELD) ready_push(d);
      else if (rc == TP_WAIT) arm_deadline(r);
      else { tp_run_cancel(r); report_done(r); }
    }
    if (!more || tp__now_ns() - t0 >= slice * 1000u) break;
  }
  if (e->ready == NULL) {
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
  if (e->far_timer) uv_close((uv_handle_t *)e->far_timer, (uv_close_cb)free);
  uv_run(e->loop, UV_RUN_NOWAIT);   /* close callbacks of the runs' timers */
  uv_walk(e->loop, close_handle, NULL);
  uv_run(e->loop, UV_RUN_DEFAULT);
  uv_loop_close(e->loop);
  free(e->loop);
}

