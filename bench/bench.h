/* bench.h: what every benchmark of bench/ shares: a monotonic clock and the median. */
#ifndef tidepool_bench_h
#define tidepool_bench_h

#include <stdlib.h>
#include <time.h>

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

#endif
