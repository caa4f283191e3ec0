/*
** watchdog.c: one thread per engine that sleeps until the earliest armed deadline and
** calls that watch's fire function. It serves the deadlines of plugin handlers (host.c),
** which run on the loop's thread outside any step, and the steps of a thread that could
** not create its own timer (run.c; see tp__step_timer_arm): a step's end must not wait
** for this thread to be scheduled, so steps use their thread's timer whenever they can.
** The thread is started by the first arm, so an engine that never arms never starts it. Arming only signals the thread when the new deadline
** is earlier than the one it sleeps towards, so most runs cost a lock and no wakeup.
*/
#include <errno.h>
#include <time.h>

#include "watchdog.h"

static void *watch_loop (void *arg) {
  tp_watchdog *wd = arg;
  pthread_mutex_lock(&wd->mu);
  while (!wd->stopping) {
    uint64_t now = tp__now_ns(), next = 0;
    for (tp_watch *w = wd->head.next, *nx; w != &wd->head; w = nx) {
      nx = w->next;
      if (w->wake_ns <= now) {
        w->wake_ns = w->fire(w, now);
        atomic_store(&w->wake_seen, w->wake_ns);
        if (w->wake_ns == 0) {  /* disarm */
          w->prev->next = w->next;
          w->next->prev = w->prev;
          w->next = w->prev = NULL;
          continue;
        }
      }
      if (next == 0 || w->wake_ns < next) next = w->wake_ns;
    }
    wd->sleeping_until = next;
    if (next == 0) pthread_cond_wait(&wd->cv, &wd->mu);
    else {
      struct timespec ts = { (time_t)(next / 1000000000u), (long)(next % 1000000000u) };
      pthread_cond_timedwait(&wd->cv, &wd->mu, &ts);
    }
  }
  pthread_mutex_unlock(&wd->mu);
  return NULL;
}

int tp__watchdog_init (tp_watchdog *wd) {
  pthread_condattr_t ca;
  if (pthread_mutex_init(&wd->mu, NULL) != 0) return -1;
  if (pthread_condattr_init(&ca) != 0) goto fail_mu;
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  if (pthread_cond_init(&wd->cv, &ca) != 0) { pthread_condattr_destroy(&ca); goto fail_mu; }
  pthread_condattr_destroy(&ca);
  wd->head.next = wd->head.prev = &wd->head;
  wd->started = wd->stopping = 0;
  wd->sleeping_until = 0;
  return 0;
fail_mu:
  pthread_mutex_destroy(&wd->mu);
  return -1;
}

void tp__watchdog_close (tp_watchdog *wd) {
  pthread_mutex_lock(&wd->mu);
  wd->stopping = 1;
  pthread_cond_signal(&wd->cv);
  pthread_mutex_unlock(&wd->mu);
  if (wd->started) pthread_join(wd->thread, NULL);
  pthread_cond_destroy(&wd->cv);
  pthread_mutex_destroy(&wd->mu);
}

int tp__watch_arm (tp_watchdog *wd, tp_watch *w, uint64_t wake_ns) {
  int rc = 0;
  pthread_mutex_lock(&wd->mu);
  if (!wd->started) {
    if (pthread_create(&wd->thread, NULL, watch_loop, wd) != 0) rc = -1;
    else wd->started = 1;
  }
  if (rc == 0) {
    w->wake_ns = wake_ns;
    atomic_store(&w->wake_seen, wake_ns);
    if (w->next == NULL) {
      w->next = &wd->head;
      w->prev = wd->head.prev;
      wd->head.prev->next = w;
      wd->head.prev = w;
    }
    if (wd->sleeping_until == 0 || wake_ns < wd->sleeping_until) {
      wd->sleeping_until = wake_ns;
      pthread_cond_signal(&wd->cv);
    }
  }
  pthread_mutex_unlock(&wd->mu);
  return rc;
}

void tp__watch_disarm (tp_watchdog *wd, tp_watch *w) {
  pthread_mutex_lock(&wd->mu);
  if (w->next != NULL) {
    w->prev->next = w->next;
    w->next->prev = w->prev;
    w->next = w->prev = NULL;
  }
  atomic_store(&w->wake_seen, 0);
  pthread_mutex_unlock(&wd->mu);
}
