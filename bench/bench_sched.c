/*
** bench_sched.c: the async driver under many runs (issue 8, a scheduler that scales),
** printed as "name: value unit".
**
**   concurrent_10k_ms   10,000 runs started at once with tp_run_start, each calling an
**                       async C tool that completes after 50 ms (a uv timer on the
**                       engine's loop), until the last run has finished: from the first
**                       tp_run_start to the last done callback
**   poll_max_ms         the longest single tp_engine_poll(e, 0) of that time (the loop
**                       is polled without blocking, so this is work, not waiting)
**   create_10k_ms       the tp_run_create of those 10,000 runs, before they start
**   concurrent_10k_cpu_ms  the process's CPU time during concurrent_10k_ms, less that of
**                       polls with nothing to do (waiting for the timers): the work
**                       itself, a figure that a loaded machine disturbs less
**   *_first_ms          the same three for the engine's first round
**   concurrent_10k_sharded_ms  engine-per-thread sharding: the same 10,000 runs split
**                       over two threads, each with its own engine (5,000 runs each, created
**                       before a barrier), from the barrier to the later thread's last done
**                       callback; the median of rounds after each engine's first
**
** Medians of several rounds on one engine, after its first round (reported apart). usage: bench_sched [scale], scale 1 by default (rounds are multiplied by it).
*/
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "tidepool.h"
#include "engine.h"
#include "bench.h"
#include "bench_later.h"

#define NRUNS 10000
static void die (const char *what) {
  fprintf(stderr, "bench_sched: %s\n", what);
  exit(1);
}


static int done, failed;

static void on_done (tp_run *r, void *ud) {
  (void)ud;
  const char *env = tp_run_envelope(r);
  if (env == NULL || strncmp(env, "{\"ok\":true", 10) != 0) {
    if (failed++ == 0) fprintf(stderr, "bench_sched: a run failed: %.300s\n", env ? env : "");
  }
  done++;
  tp_run_destroy(r);
}

/* One round: creates NRUNS runs, then starts them all; returns the time from the first
** start to the last done callback in ms, the longest poll through *poll_ms and the time
** the creation took through *create_ms. */
static double cpu_us (void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static double round_10k (tp_engine *e, double *poll_ms, double *create_ms, double *busy_ms) {
  static tp_run *rv[NRUNS];
  done = failed = 0;
  double c0 = bench_now_us();
  for (int i = 0; i < NRUNS; i++)
    if ((rv[i] = tp_run_create(e, bench_later_script, sizeof bench_later_script - 1, NULL)) == NULL)
      die("tp_run_create failed");
  double t0 = bench_now_us(), u0 = cpu_us();
  *create_ms = (t0 - c0) / 1000;
  for (int i = 0; i < NRUNS; i++)
    if (tp_run_start(rv[i], on_done, NULL) != TP_OK) die("tp_run_start failed");
  double worst = 0, idle = 0;
  while (done < NRUNS) {
    double p0 = bench_now_us(), q0 = cpu_us();
    int pending = tp_engine_poll(e, 0);
    double p = bench_now_us() - p0;
    if (p > worst) worst = p;
    if (pending && p < 5) idle += cpu_us() - q0;  /* a poll with nothing to do */
  }
  double t = bench_now_us() - t0;
  *busy_ms = (cpu_us() - u0 - idle) / 1000;
  if (failed) die("runs failed");
  *poll_ms = worst / 1000;
  return t / 1000;
}

/* ---- engine-per-thread sharding --------------------------------------------------- */

typedef struct shard {
  tp_engine *e;
  int n, done, failed;
  tp_run **rv;
} shard;

static pthread_barrier_t start_line;

static void shard_done (tp_run *r, void *ud) {
  shard *sh = ud;
  const char *env = tp_run_envelope(r);
  if (env == NULL || strncmp(env, "{\"ok\":true", 10) != 0) sh->failed++;
  sh->done++;
  tp_run_destroy(r);
}

static void *shard_round (void *ud) {
  shard *sh = ud;
  sh->done = sh->failed = 0;
  for (int i = 0; i < sh->n; i++)
    if ((sh->rv[i] = tp_run_create(sh->e, bench_later_script, sizeof bench_later_script - 1, NULL)) == NULL)
      die("tp_run_create failed");
  pthread_barrier_wait(&start_line);
  for (int i = 0; i < sh->n; i++)
    if (tp_run_start(sh->rv[i], shard_done, sh) != TP_OK) die("tp_run_start failed");
  while (sh->done < sh->n) tp_engine_poll(sh->e, 0);
  return NULL;
}

/* One round of NRUNS runs over nshards engines, one thread each; ms from the barrier. */
static double sharded_round (shard *shv, int nshards) {
  pthread_t th[8];
  pthread_barrier_init(&start_line, NULL, (unsigned)nshards + 1);
  for (int i = 0; i < nshards; i++)
    if (pthread_create(&th[i], NULL, shard_round, &shv[i]) != 0) die("pthread_create failed");
  pthread_barrier_wait(&start_line);
  double t0 = bench_now_us();
  for (int i = 0; i < nshards; i++) pthread_join(th[i], NULL);
  double t = bench_now_us() - t0;
  pthread_barrier_destroy(&start_line);
  for (int i = 0; i < nshards; i++) if (shv[i].failed) die("runs failed");
  return t / 1000;
}

static double sharded (int rounds) {
  enum { NSHARDS = 2 };
  shard shv[NSHARDS];
  for (int i = 0; i < NSHARDS; i++) {
    shv[i].e = tp_engine_create();
    shv[i].n = NRUNS / NSHARDS;
    shv[i].rv = malloc((size_t)shv[i].n * sizeof *shv[i].rv);
    if (shv[i].e == NULL || shv[i].rv == NULL) die("out of memory");
    tp_tool_def def = { .name = "bench.later", .description = "Answers after 50 ms.",
                        .handler = bench_later,
                        .ud = tp__engine_loop(shv[i].e) };
    if (tp_engine_add_tool(shv[i].e, &def) != TP_OK) die(tp_engine_error(shv[i].e));
  }
  double *t = malloc((size_t)rounds * sizeof *t);
  if (t == NULL) die("out of memory");
  sharded_round(shv, NSHARDS);  /* each engine's first round */
  for (int i = 0; i < rounds; i++) t[i] = sharded_round(shv, NSHARDS);
  double m = median(t, rounds);
  free(t);
  for (int i = 0; i < NSHARDS; i++) {
    tp_engine_destroy(shv[i].e);
    free(shv[i].rv);
  }
  return m;
}

int main (int argc, char **argv) {
  int scale = argc > 1 ? atoi(argv[1]) : 1;
  if (scale < 1) scale = 1;
  tp_engine *e = tp_engine_create();
  if (e == NULL) die("tp_engine_create failed");
  tp_tool_def def = { .name = "bench.later", .description = "Answers after 50 ms.",
                      .handler = bench_later,
                      .ud = tp__engine_loop(e) };
  if (tp_engine_add_tool(e, &def) != TP_OK) die(tp_engine_error(e));
  enum { ROUNDS = 5 };
  int n = ROUNDS * scale;
  double *t = malloc((size_t)n * sizeof *t), *p = malloc((size_t)n * sizeof *p);
  double *c = malloc((size_t)n * sizeof *c), *b = malloc((size_t)n * sizeof *b);
  if (t == NULL || p == NULL || c == NULL || b == NULL) die("out of memory");
  double first_poll, first_create, first_busy;
  double first = round_10k(e, &first_poll, &first_create, &first_busy);
  for (int i = 0; i < n; i++) t[i] = round_10k(e, &p[i], &c[i], &b[i]);
  printf("concurrent_10k_ms: %.1f ms\n", median(t, n));
  printf("poll_max_ms: %.1f ms\n", median(p, n));
  printf("create_10k_ms: %.1f ms\n", median(c, n));
  printf("concurrent_10k_cpu_ms: %.1f ms\n", median(b, n));
  printf("concurrent_10k_first_ms: %.1f ms\n", first);
  printf("poll_max_first_ms: %.1f ms\n", first_poll);
  printf("create_10k_first_ms: %.1f ms\n", first_create);
  free(t); free(p); free(c); free(b);
  tp_engine_destroy(e);
  printf("concurrent_10k_sharded_ms: %.1f ms\n", sharded(n));
  return 0;
}
