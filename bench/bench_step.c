/*
** bench_step.c: time-budgeted steps (tp_run_step with budget_us), the game-loop figures
** of `make bench`, printed as "name: value unit".
**
**   step_overshoot_us  the p99 of (the wall time of tp_run_step - its budget) over steps
**                      of 50 us of a CPU-bound script (an endless loop), one run;
**                      step_overshoot_p50_us its median (and p90), which preemption on
**                      a loaded machine moves far less
**   step_overshoot_floor_us  the p99 of the same for a bare C loop that reads the clock
**                      every ~0.1 us until 50 us have passed, one after each step (so
**                      both see the same machine): what the machine itself adds. Above
**                      it, the engine's own share (entry, the ticks' ~1 us reads, exit)
**   frame_500_ms       the longest frame when 500 runs of CPU-bound scripts are each
**                      stepped once per frame with an equal share of a 16 ms frame
**                      (32 us each); a frame is the wall time of its 500 steps
**   step_cpu_tax       the thread's CPU time for a fixed amount of work (a loop of 3e7
**                      additions) done in steps of 50 us, over the same work done in
**                      one unbounded step; the median of 5 pairs (target <= 1.2)
**
** Runs use the default limits except a wall and CPU limit of 120 s, so that no run ends
** during the measurement. On a VM the p99 has a floor of its own (step_overshoot_floor_us):
** the vCPU stops for 20-60 us about 1000-3000 times a second (no context switch in the
** guest, no guest interrupt: the host's), and a stop that straddles a slice's end
** overshoots it by what is left of the stop, whatever ends the slice. usage: bench_step
** [scale], scale 1 by default (the numbers of steps and frames are multiplied by it).
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tidepool.h"
#include "bench.h"

#define NRUNS 500
#define FRAME_US 16000

static const char spin[] = "local x = 0 while true do x = x + 1 end";

static void die (const char *what) {
  fprintf(stderr, "bench_step: %s\n", what);
  exit(1);
}

static tp_run *spinner (tp_engine *e) {
  tp_limits lim;
  tp_limits_init(&lim);
  lim.wall_us = lim.cpu_us = 120u * 1000000u;
  tp_run *r = tp_run_create(e, spin, strlen(spin), &lim);
  if (r == NULL) die("tp_run_create failed");
  return r;
}

static void step (tp_run *r, uint64_t budget_us) {
  if (tp_run_step(r, budget_us, 0) != TP_YIELD) die("a step did not yield");
}

static double overshoot_p50, overshoot_p90, overshoot_floor;

/* A slice of budget_us of a bare C loop: what a step would overshoot with no engine. */
static double bare_slice (double budget_us) {
  volatile unsigned long x = 0;
  double t0 = bench_now_us(), end = t0 + budget_us;
  for (;;) {
    for (int j = 0; j < 30; j++) x++;
    if (bench_now_us() >= end) break;
  }
  return bench_now_us() - t0 - budget_us;
}

static double step_overshoot (tp_engine *e, int scale) {
  int n = 5000 * scale;
  double *d = malloc((size_t)n * sizeof *d), *b = malloc((size_t)n * sizeof *b);
  if (d == NULL || b == NULL) die("out of memory");
  tp_run *r = spinner(e);
  for (int i = 0; i < 50; i++) step(r, 50);  /* warm up */
  for (int i = 0; i < n; i++) {
    double t0 = bench_now_us();
    step(r, 50);
    d[i] = bench_now_us() - t0 - 50;
    b[i] = bare_slice(50);
  }
  tp_run_destroy(r);
  qsort(d, (size_t)n, sizeof *d, bench_cmp_double);
  qsort(b, (size_t)n, sizeof *b, bench_cmp_double);
  double p99 = d[(size_t)((double)n * 0.99)];
  overshoot_p50 = d[n / 2];
  overshoot_p90 = d[(size_t)((double)n * 0.9)];
  overshoot_floor = b[(size_t)((double)n * 0.99)];
  free(d);
  free(b);
  return p99;
}

static double frame_500 (tp_engine *e, int scale) {
  tp_run **rv = malloc(NRUNS * sizeof *rv);
  if (rv == NULL) die("out of memory");
  for (int i = 0; i < NRUNS; i++) rv[i] = spinner(e);
  for (int i = 0; i < NRUNS; i++) step(rv[i], FRAME_US / NRUNS);  /* first steps */
  double worst = 0;
  for (int f = 0; f < 30 * scale; f++) {
    double t0 = bench_now_us();
    for (int i = 0; i < NRUNS; i++) step(rv[i], FRAME_US / NRUNS);
    double t = bench_now_us() - t0;
    if (t > worst) worst = t;
  }
  for (int i = 0; i < NRUNS; i++) tp_run_destroy(rv[i]);
  free(rv);
  return worst / 1000;
}

static double thread_cpu_us (void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

/* CPU time of the fixed work, stepped with budget_us (0: unbounded). */
static double work_cpu (tp_engine *e, uint64_t budget_us) {
  static const char work[] = "local x = 0 for i = 1, 3e7 do x = x + i end return x";
  tp_limits lim;
  tp_limits_init(&lim);
  lim.wall_us = lim.cpu_us = 120u * 1000000u;
  tp_run *r = tp_run_create(e, work, strlen(work), &lim);
  if (r == NULL) die("tp_run_create failed");
  double t0 = thread_cpu_us();
  int rc;
  while ((rc = tp_run_step(r, budget_us, 0)) == TP_YIELD) {}
  double t = thread_cpu_us() - t0;
  if (rc != TP_DONE) die("the work did not finish");
  tp_run_destroy(r);
  return t;
}

static double step_cpu_tax (tp_engine *e, int scale) {
  enum { N = 5 };
  double q[N * 4];
  int n = N * scale > N * 4 ? N * 4 : N * scale;
  for (int i = 0; i < n; i++) {
    double whole = work_cpu(e, 0), stepped = work_cpu(e, 50);
    q[i] = stepped / whole;
  }
  return median(q, n);
}

int main (int argc, char **argv) {
  int scale = argc > 1 ? atoi(argv[1]) : 1;
  if (scale < 1) scale = 1;
  tp_engine *e = tp_engine_create();
  if (e == NULL) die("tp_engine_create failed");
  printf("step_overshoot_us: %.1f us\n", step_overshoot(e, scale));
  printf("step_overshoot_p50_us: %.1f us (p90 %.1f)\n", overshoot_p50, overshoot_p90);
  printf("step_overshoot_floor_us: %.1f us (a bare C loop's p99, between the steps)\n",
         overshoot_floor);
  fflush(stdout);
  printf("frame_500_ms: %.1f ms\n", frame_500(e, scale));
  fflush(stdout);
  printf("step_cpu_tax: %.2f x\n", step_cpu_tax(e, scale));
  tp_engine_destroy(e);
  return 0;
}
