/*
** sched_instructions.c: bench_sched's concurrent phase (10,000 runs of
** `local r = tools.bench.later{} return r.ok`, each waiting on an async C tool, from the
** first tp_run_start to the last done callback, destroy included) for counting its
** instructions under callgrind (scripts/sched-instructions.sh), which do not depend on
** the machine's load as concurrent_10k_ms does. One round warms the engine up (its chunk
** and sandbox pools), then `counted` runs the phase once more; the loop waits in
** tp_engine_poll(e, 1), so waiting costs no instructions.
** usage: sched_instructions [NRUNS]
*/
#include <uv.h>

#include "bench.h"
#include "bench_later.h"
#include "engine.h"

static int done, failed;


static void on_done (tp_run *r, void *ud) {
  (void)ud;
  const char *env = tp_run_envelope(r);
  if (env == NULL || strncmp(env, "{\"ok\":true", 10) != 0) failed++;
  done++;
  tp_run_destroy(r);
}

static void phase (tp_engine *e, tp_run **rv, int n) {
  for (int i = 0; i < n; i++)
    if (tp_run_start(rv[i], on_done, NULL) != TP_OK) failed++;
  while (done < n) tp_engine_poll(e, 1);
}

/* The two rounds' phases, apart for --toggle-collect (noipa: not folded into one). */
__attribute__((noipa)) static void warm (tp_engine *e, tp_run **rv, int n) { phase(e, rv, n); }
__attribute__((noipa)) static void counted (tp_engine *e, tp_run **rv, int n) { phase(e, rv, n); }

int main (int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 10000;
  if (n < 1) n = 1;
  tp_engine *e = tp_engine_create();
  tp_run **rv = malloc((size_t)n * sizeof *rv);
  if (e == NULL || rv == NULL) return 1;
  tp_tool_def def = { .name = "bench.later", .description = "Answers after 50 ms.",
                      .handler = bench_later, .ud = tp__engine_loop(e) };
  if (tp_engine_add_tool(e, &def) != TP_OK) return 1;
  for (int round = 0; round < 2; round++) {
    done = failed = 0;
    for (int i = 0; i < n; i++)
      if ((rv[i] = tp_run_create(e, bench_later_script, sizeof bench_later_script - 1, NULL)) == NULL) return 1;
    if (round == 0) warm(e, rv, n);
    else counted(e, rv, n);
    if (failed) {
      fprintf(stderr, "sched_instructions: %d runs failed\n", failed);
      return 1;
    }
  }
  tp_engine_destroy(e);
  free(rv);
  return 0;
}
