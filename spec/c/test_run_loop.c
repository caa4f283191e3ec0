/*
** test_run_loop.c: many runs of every kind of ending, one engine per round, each outcome
** checked. It is an ordinary C test, and scripts/valgrind.sh runs it under valgrind
** (leaks, uninitialised reads, the watchdog thread and its interrupt signal), so every
** path that frees a run is taken many times: success, runtime and syntax errors, each
** limit, time slices, cancel, and destroying a run that never finished.
** TP_LOOP_ROUNDS sets the number of rounds (default 14: about 200 runs).
*/
#include <stdlib.h>

#include "tidepool.h"
#include "tp_test.h"

static int rounds = 14;

typedef struct scase {
  const char *name, *src;
  const char *expect;  /* "ok" or the error code */
  size_t memory;       /* 0: default */
  uint64_t instructions, cpu_us, wall_us;
  size_t output;
  int set_output;
} scase;

static const scase cases[] = {
  { "ok_value", "return {a = 1, b = {1, 2, 3}, c = 'x'}", "ok", 0, 0, 0, 0, 0, 0 },
  { "ok_logs", "for i = 1, 10 do print(i, {}) end return 'done'", "ok", 0, 0, 0, 0, 0, 0 },
  { "ok_coroutines", "local co = coroutine.wrap(function(a) local b = coroutine.yield(a + 1) "
    "return b * 2 end) local x = co(1) return co(x)", "ok", 0, 0, 0, 0, 0, 0 },
  { "ok_patterns", "local n = 0 for w in ('a b c d'):gmatch('%a') do n = n + 1 end "
    "return (('x'):rep(50)):gsub('x', 'y'), n", "ok", 0, 0, 0, 0, 0, 0 },
  { "runtime_error", "local t = {} error('boom')", "runtime", 0, 0, 0, 0, 0, 0 },
  { "runtime_nil_index", "local t = nil return t.x", "runtime", 0, 0, 0, 0, 0, 0 },
  { "runtime_error_table", "error({message = 'table error'})", "runtime", 0, 0, 0, 0, 0, 0 },
  { "syntax_error", "return +", "syntax", 0, 0, 0, 0, 0, 0 },
  { "memory_limit", "local t = {} for i = 1, 1e8 do t[i] = ('x'):rep(64) .. i end",
    "limit.memory", 1u << 20, 0, 0, 0, 0, 0 },
  { "memory_limit_pcall", "local ok = pcall(function() local s = 'x' "
    "while true do s = s .. s end end) return ok", "limit.memory", 1u << 20, 0, 0, 0, 0, 0 },
  { "cpu_limit", "while true do end", "limit.cpu", 0, 0, 20000, 0, 0, 0 },
  { "wall_limit", "local x = 0 while true do x = x + 1 end", "limit.time", 0, 0, 0, 20000, 0, 0 },
  { "instruction_limit_pcall", "while true do pcall(function() while true do end end) end",
    "limit.instructions", 0, 100000, 0, 0, 0, 0 },
  { "instruction_limit_pattern", "return (('a'):rep(40)):find(('a*'):rep(40) .. 'b')",
    "limit.instructions", 0, 200000, 0, 0, 0, 0 },
  { "output_limit", "for i = 1, 1e6 do print(('x'):rep(100)) end", "limit.output",
    0, 0, 0, 0, 1000, 1 },
};
#define NCASES (sizeof cases / sizeof cases[0])

/* "ok" when the envelope says ok, else the error's code; static buffer. */
static const char *outcome (const char *env) {
  static char code[64];
  if (env == NULL) return "(no envelope)";
  if (strncmp(env, "{\"ok\":true", 10) == 0) return "ok";
  const char *c = strstr(env, "\"code\":\"");
  if (c == NULL) return "(no code)";
  c += 8;
  size_t n = 0;
  while (c[n] && c[n] != '"' && n < sizeof code - 1) n++;
  memcpy(code, c, n);
  code[n] = '\0';
  return code;
}

static void run_case (tp_engine *e, const scase *c) {
  tp_limits l;
  tp_limits_init(&l);
  if (c->memory) l.memory = c->memory;
  if (c->instructions) l.instructions = c->instructions;
  if (c->cpu_us) l.cpu_us = c->cpu_us;
  if (c->wall_us) { l.wall_us = c->wall_us; l.cpu_us = 0; }
  if (c->set_output) l.output = c->output;
  char *env = NULL;
  int ok = -1;
  int rc = tp_engine_run(e, c->src, strlen(c->src), &l, &env, &ok);
  CHECK_INT(rc, TP_OK);
  if (strcmp(outcome(env), c->expect) != 0)
    TP_FAIL_AT("%s: outcome %s, expected %s: %s", c->name, outcome(env), c->expect,
               env ? env : "(null)");
  CHECK_INT(ok, strcmp(c->expect, "ok") == 0);
  tp_free(env);
}

TEST(every_kind_of_ending_many_times_over_fresh_engines) {
  for (int r = 0; r < rounds; r++) {
    tp_engine *e = tp_engine_create();
    CHECK(e != NULL);
    if (e == NULL) return;
    for (size_t i = 0; i < NCASES; i++) run_case(e, &cases[i]);
    tp_engine_destroy(e);
  }
}

TEST(time_slices_then_cancel_then_destroy) {
  tp_engine *e = tp_engine_create();
  for (int r = 0; r < rounds; r++) {
    const char *src = "local n = 0 while true do n = n + 1 end";
    tp_run *run = tp_run_create(e, src, strlen(src), NULL);
    CHECK(run != NULL);
    if (run == NULL) break;
    CHECK_INT(tp_run_step(run, 1000, 0), TP_YIELD);      /* a 1 ms slice */
    CHECK_INT(tp_run_step(run, 0, 50000), TP_YIELD);     /* 50000 instructions */
    CHECK(!tp_run_done(run));
    tp_run_cancel(run);
    CHECK(tp_run_done(run));
    CHECK_STR(outcome(tp_run_envelope(run)), "cancelled");
    CHECK_INT(tp_run_step(run, 0, 0), TP_ESTATE);
    tp_run_destroy(run);
  }
  tp_engine_destroy(e);
}

TEST(runs_destroyed_unfinished_or_left_to_the_engine) {
  for (int r = 0; r < rounds; r++) {
    tp_engine *e = tp_engine_create();
    const char *src = "local t = {} for i = 1, 1e9 do t[i % 100] = {i} end";
    tp_run *never = tp_run_create(e, src, strlen(src), NULL);       /* never stepped */
    tp_run *sliced = tp_run_create(e, src, strlen(src), NULL);      /* mid-run */
    tp_run *left = tp_run_create(e, src, strlen(src), NULL);        /* engine frees it */
    CHECK(never != NULL && sliced != NULL && left != NULL);
    CHECK_INT(tp_run_step(sliced, 0, 20000), TP_YIELD);
    CHECK_INT(tp_run_step(left, 0, 20000), TP_YIELD);
    tp_run_destroy(never);
    tp_run_destroy(sliced);
    tp_engine_destroy(e);
  }
}

TEST(check_compiles_without_running) {
  tp_engine *e = tp_engine_create();
  for (int r = 0; r < rounds; r++) {
    char *env = NULL;
    int ok = -1;
    CHECK_INT(tp_engine_check(e, "while true do end", 17, NULL, &env, &ok), TP_OK);
    CHECK_STR(outcome(env), "ok");
    tp_free(env);
    CHECK_INT(tp_engine_check(e, "x = = 1", 7, NULL, &env, &ok), TP_OK);
    CHECK_STR(outcome(env), "syntax");
    CHECK_INT(ok, 0);
    tp_free(env);
  }
  tp_engine_destroy(e);
}

int main (int argc, char **argv) {
  tp_test_args(argc, argv);
  const char *n = getenv("TP_LOOP_ROUNDS");
  if (n != NULL && atoi(n) > 0) rounds = atoi(n);
  RUN(every_kind_of_ending_many_times_over_fresh_engines);
  RUN(time_slices_then_cancel_then_destroy);
  RUN(runs_destroyed_unfinished_or_left_to_the_engine);
  RUN(check_compiles_without_running);
  return tp_test_end();
}
