/*
** watchdog.h: the clocks, and one thread per engine that wakes at the earliest armed
** deadline (watchdog.c). Core; knows no event loop.
*/
#ifndef tidepool_watchdog_h
#define tidepool_watchdog_h

#include "util.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

typedef struct tp_watch tp_watch;
struct tp_watch {
  tp_watch *prev, *next;  /* in the watchdog's list while armed */
  uint64_t wake_ns;       /* CLOCK_MONOTONIC time of the next check */
  /* wake_ns as the watch's owner may read it without the lock: 0 while not armed. The
  ** watchdog writes it under its lock with wake_ns; a fire function may write it too,
  ** before it looks at what its owner publishes (see host.c's resume watch). */
  _Atomic uint64_t wake_seen;
  /* Called by the watchdog thread with its lock held when wake_ns has passed. Returns
  ** the next wake time, or 0 to disarm. */
  uint64_t (*fire)(tp_watch *w, uint64_t now_ns);
};

typedef struct tp_watchdog {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  pthread_t thread;
  tp_watch head;          /* sentinel of a circular list */
  uint64_t sleeping_until;/* what the thread waits for now; 0 = indefinitely */
  int started, stopping;
} tp_watchdog;

int  tp__watchdog_init(tp_watchdog *wd);
void tp__watchdog_close(tp_watchdog *wd);
int  tp__watch_arm(tp_watchdog *wd, tp_watch *w, uint64_t wake_ns);
void tp__watch_disarm(tp_watchdog *wd, tp_watch *w);
/* the clocks (tp__now_ns, tp__thread_cpu_ns) are util.h's */

#endif
