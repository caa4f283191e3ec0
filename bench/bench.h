/* bench.h: what every benchmark of bench/ shares: a monotonic clock, the median, and a
** timed run of a script. */
#ifndef tidepool_bench_h
#define tidepool_bench_h

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tidepool.h"

/* CLOCK_MONOTONIC in microseconds. */
static inline double bench_now_us (void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int bench_cmp_double (const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The median of v[0..n-1] (sorts v). */
static inline double median (double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Runs src to completion on e under lim; returns wall microseconds, or -1 (with the
** envelope on stderr, after who) when the script failed. */
static inline double bench_timed_run (const char *who, tp_engine *e, const char *src,
                                      const tp_limits *lim) {
  char *env = NULL;
  int ok = 0;
  double t0 = bench_now_us();
  int rc = tp_engine_run(e, src, strlen(src), lim, &env, &ok);
  double t = bench_now_us() - t0;
  if (rc != TP_OK || !ok) {
    fprintf(stderr, "%s: the script failed: %.400s\n", who, env ? env : "(no envelope)");
    tp_free(env);
    return -1;
  }
  tp_free(env);
  return t;
}

#endif
