/*
** test_api.c: the public C API of engine/include/tidepool.h. Every function called with
** NULL; the run object's life (create, step, done, envelope, destroy); stepping with
** time and instruction budgets, also through script coroutines and pcall; cancel
** between steps; the wall limit counted from the first step; an engine destroyed with
** live runs; and many runs in a loop (for valgrind).
*/
#include <stdlib.h>
#include <time.h>

#include <jansson.h>

#include "tidepool.h"
#include "tp_test.h"

static void sleep_ms (long ms) {
  struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
  while (nanosleep(&ts, &ts) != 0) {}
}

/* A field of an envelope: "ok", "result", "error.code", ... as a new JSON text (or a
** plain string for strings); caller frees. NULL when absent. */
static char *field (const char *envelope, const char *path) {
  json_error_t err;
  json_t *env = envelope ? json_loads(envelope, 0, &err) : NULL;
  if (env == NULL) return NULL;
  json_t *v = env;
  char key[64];
  const char *p = path;
  while (v && *p) {
    size_t n = strcspn(p, ".");
    snprintf(key, sizeof key, "%.*s", (int)n, p);
    v = json_object_get(v, key);
    p += n + (p[n] == '.');
  }
  char *out = NULL;
  if (v && json_is_string(v)) out = strdup(json_string_value(v));
  else if (v) out = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
  json_decref(env);
  return out;
}

#define CHECK_FIELD(envelope, path, expected) do { \
    char *tp_f_ = field((envelope), (path)); \
    CHECK_STR(tp_f_, (expected)); \
    free(tp_f_); \
  } while (0)

/* Steps r to the end with the given budgets; returns how many TP_YIELDs it took. */
static int step_to_end (tp_run *r, uint64_t budget_us, uint64_t budget_instr) {
  int yields = 0, rc;
  while ((rc = tp_run_step(r, budget_us, budget_instr)) == TP_YIELD) yields++;
  CHECK_INT(rc, TP_DONE);
  return yields;
}

TEST(every_public_function_accepts_null_without_crashing) {
  char *env = (char *)"sentinel";
  int ok = 7;
  tp_limits_init(NULL);
  tp_free(NULL);
  CHECK_INT(tp_engine_set_workspace_max(NULL, 1), TP_EINVAL);
  tp_engine_destroy(NULL);
  CHECK_INT(tp_engine_run(NULL, "return 1", 8, NULL, &env, &ok), TP_EINVAL);
  CHECK(env == NULL);
  CHECK_INT(ok, 7);
  env = (char *)"sentinel";
  CHECK_INT(tp_engine_check(NULL, "return 1", 8, NULL, &env, NULL), TP_EINVAL);
  CHECK(env == NULL);
  CHECK(tp_run_create(NULL, "return 1", 8, NULL) == NULL);
  CHECK_INT(tp_run_step(NULL, 0, 0), TP_EINVAL);
  tp_run_cancel(NULL);
  CHECK_INT(tp_run_done(NULL), 0);
  CHECK(tp_run_envelope(NULL) == NULL);
  tp_run_destroy(NULL);
  CHECK(tp_run_start(NULL, NULL, NULL) < 0);
  CHECK(tp_session_create(NULL, NULL) == NULL);
  CHECK(tp_session_run(NULL, "return 1", 8) == NULL);
  CHECK_INT(tp_session_memory(NULL), 0);
  tp_session_destroy(NULL);
  CHECK_INT(tp_engine_add_tool(NULL, NULL), TP_EINVAL);
  CHECK(tp_engine_load_tools(NULL, NULL) < 0);
  CHECK(tp_engine_set_workspace(NULL, NULL) < 0);
  CHECK(tp_engine_error(NULL) != NULL);
  CHECK(tp_engine_describe(NULL, "lua") == NULL);
  CHECK_INT(tp_engine_poll(NULL, 0), 0);
  tp_call *calls[2];
  CHECK_INT(tp_run_pending(NULL, calls, 2), 0);
  CHECK(tp_call_tool(NULL) == NULL);
  CHECK(tp_call_args(NULL) == NULL);
  CHECK_INT(tp_call_id(NULL), 0);
  tp_call_cancelled(NULL);
  CHECK_INT(tp_call_complete(NULL, "1", 1), TP_EINVAL);
  CHECK_INT(tp_call_fail(NULL, NULL, "x"), TP_EINVAL);
}

TEST(null_source_or_envelope_pointer_is_refused) {
  tp_engine *e = tp_engine_create();
  char *env = (char *)"sentinel";
  CHECK_INT(tp_engine_run(e, NULL, 0, NULL, &env, NULL), TP_EINVAL);
  CHECK(env == NULL);
  CHECK_INT(tp_engine_run(e, "return 1", 8, NULL, NULL, NULL), TP_EINVAL);
  CHECK_INT(tp_engine_check(e, "return 1", 8, NULL, NULL, NULL), TP_EINVAL);
  CHECK(tp_run_create(e, NULL, 0, NULL) == NULL);
  CHECK(tp_engine_add_tool(e, NULL) == TP_EINVAL);
  CHECK(tp_engine_describe(e, NULL) == NULL);
  tp_engine_destroy(e);
}

TEST(limits_init_fills_the_documented_defaults) {
  tp_limits l;
  memset(&l, 0xff, sizeof l);
  tp_limits_init(&l);
  CHECK_INT(l.memory, 64u << 20);
  CHECK_INT(l.instructions, 0);
  CHECK_INT(l.cpu_us, 10000000);
  CHECK_INT(l.wall_us, 10000000);
  CHECK_INT(l.output, 1u << 20);
  CHECK_INT(l.source, 1u << 20);
  CHECK_INT(l.result, 4u << 20);
  CHECK_INT(l.fs_bytes, 64u << 20);
}

TEST(version_is_major_minor_patch) {
  char expect[32];
  snprintf(expect, sizeof expect, "%d.%d.%d", TP_VERSION_MAJOR, TP_VERSION_MINOR,
           TP_VERSION_PATCH);
  CHECK_STR(tp_version(), expect);
}

TEST(engine_run_returns_the_envelope_and_script_ok) {
  tp_engine *e = tp_engine_create();
  char *env = NULL;
  int ok = -1;
  const char *src = "print('hi') return {a = 1}";
  CHECK_INT(tp_engine_run(e, src, strlen(src), NULL, &env, &ok), TP_OK);
  CHECK_INT(ok, 1);
  CHECK_FIELD(env, "ok", "true");
  CHECK_FIELD(env, "result", "{\"a\":1}");
  CHECK_FIELD(env, "logs", "[\"hi\"]");
  CHECK(strchr(env, '\n') == NULL);
  tp_free(env);
  src = "error('boom')";
  CHECK_INT(tp_engine_run(e, src, strlen(src), NULL, &env, &ok), TP_OK);
  CHECK_INT(ok, 0);
  CHECK_FIELD(env, "error.code", "runtime");
  CHECK_FIELD(env, "error.message", "boom");
  tp_free(env);
  tp_engine_destroy(e);
}

TEST(engine_run_honours_len_not_the_terminator) {
  tp_engine *e = tp_engine_create();
  char *env = NULL;
  CHECK_INT(tp_engine_run(e, "return 12 + garbage", 9, NULL, &env, NULL), TP_OK);
  CHECK_FIELD(env, "result", "12");
  tp_free(env);
  tp_engine_destroy(e);
}

TEST(engine_check_compiles_without_running) {
  tp_engine *e = tp_engine_create();
  char *env = NULL;
  int ok = -1;
  const char *src = "print('ran') while true do end";
  CHECK_INT(tp_engine_check(e, src, strlen(src), NULL, &env, &ok), TP_OK);
  CHECK_INT(ok, 1);
  CHECK_FIELD(env, "ok", "true");
  CHECK_FIELD(env, "result", "null");
  CHECK_FIELD(env, "logs", "[]");
  tp_free(env);
  src = "local x = \nreturn = 1";
  CHECK_INT(tp_engine_check(e, src, strlen(src), NULL, &env, &ok), TP_OK);
  CHECK_INT(ok, 0);
  CHECK_FIELD(env, "error.code", "syntax");
  CHECK_FIELD(env, "error.line", "2");
  tp_free(env);
  tp_engine_destroy(e);
}

TEST(run_lifecycle_create_step_done_envelope_destroy) {
  tp_engine *e = tp_engine_create();
  tp_run *r = tp_run_create(e, "return 40 + 2", 13, NULL);
  CHECK(r != NULL);
  CHECK_INT(tp_run_done(r), 0);
  CHECK(tp_run_envelope(r) == NULL);
  CHECK_INT(tp_run_step(r, 0, 0), TP_DONE);
  CHECK_INT(tp_run_done(r), 1);
  CHECK_FIELD(tp_run_envelope(r), "result", "42");
  CHECK_INT(tp_run_step(r, 0, 0), TP_ESTATE);
  tp_run_cancel(r);  /* a finished run is left as it is */
  CHECK_FIELD(tp_run_envelope(r), "ok", "true");
  tp_run_destroy(r);
  tp_engine_destroy(e);
}

TEST(a_syntax_error_is_not_a_create_error) {
  tp_engine *e = tp_engine_create();
  tp_run *r = tp_run_create(e, "return +", 8, NULL);
  CHECK(r != NULL);
  CHECK_INT(tp_run_step(r, 0, 0), TP_DONE);
  CHECK_FIELD(tp_run_envelope(r), "error.code", "syntax");
  tp_run_destroy(r);
  tp_engine_destroy(e);
}

/* Busy for about 50 ms of CPU time, in the way each test says. */
#define BUSY "local t0 = os.clock() while os.clock() - t0 < 0.05 do end "

static void time_sliced (const char *src, const char *expect_result) {
  tp_engine *e = tp_engine_create();
  tp_run *r = tp_run_create(e, src, strlen(src), NULL);
  int yields = step_to_end(r, 2000, 0);
  CHECK(yields >= 3);
  CHECK_FIELD(tp_run_envelope(r), "ok", "true");
  CHECK_FIELD(tp_run_envelope(r), "result", expect_result);
  tp_run_destroy(r);
  tp_engine_destroy(e);
}

TEST(a_2ms_time_budget_yields_several_times_then_finishes) {
  time_sliced(BUSY "return 'done'", "done");
}

TEST(time_slices_pass_through_a_script_coroutine) {
  time_sliced("local f = coroutine.wrap(function(a) " BUSY " coroutine.yield(a + 1) "
              BUSY " return 'second' end) local x = f(1) return {x, f()}", "[2,\"second\"]");
}

TEST(time_slices_pass_through_coroutine_resume) {
  time_sliced("local co = coroutine.create(function() " BUSY " return 'in' end) "
              "return {coroutine.resume(co)}", "[true,\"in\"]");
}

TEST(time_slices_pass_through_pcall) {
  time_sliced("return {pcall(function() " BUSY " return 'p' end)}", "[true,\"p\"]");
}

TEST(time_slices_pass_through_xpcall) {
  time_sliced("return {xpcall(function() " BUSY " error('x', 0) end, "
              "function(m) return m .. '!' end)}", "[false,\"x!\"]");
}

TEST(an_instruction_budget_yields_then_finishes_with_the_result) {
  tp_engine *e = tp_engine_create();
  const char *src = "local n = 0 for i = 1, 100000 do n = n + i end return n";
  tp_run *r = tp_run_create(e, src, strlen(src), NULL);
  int yields = step_to_end(r, 0, 10000);
  CHECK_INT(yields, 20);  /* 200011 instructions in steps of 10000 */
  CHECK_FIELD(tp_run_envelope(r), "result", "5000050000");
  tp_run_destroy(r);
  tp_engine_destroy(e);
}

TEST(an_instruction_budget_holds_inside_a_script_coroutine) {
  tp_engine *e = tp_engine_create();
  const char *src = "return coroutine.wrap(function() local n = 0 "
                    "for i = 1, 100000 do n = n + i end return n end)()";
  tp_run *r = tp_run_create(e, src, strlen(src), NULL);
  CHECK_INT(step_to_end(r, 0, 10000), 20);
  CHECK_FIELD(tp_run_envelope(r), "result", "5000050000");
  tp_run_destroy(r);
  tp_engine_destroy(e);
}

TEST(cancel_between_steps_gives_cancelled) {
  tp_engine *e = tp_engine_create();
  const char *src = "print('started') while true do end";
  tp_run *r = tp_run_create(e, src, strlen(src), NULL);
  CHECK_INT(tp_run_step(r, 2000, 0), TP_YIELD);
  CHECK_INT(tp_run_step(r, 2000, 0), TP_YIELD);
  tp_run_cancel(r);
  CHECK_INT(tp_run_done(r), 1);
  CHECK_FIELD(tp_run_envelope(r), "error.code", "cancelled");
  CHECK_FIELD(tp_run_envelope(r), "error.message", "the run was cancelled by the host");
  CHECK_FIELD(tp_run_envelope(r), "logs", "[\"started\"]");
  CHECK_INT(tp_run_step(r, 2000, 0), TP_ESTATE);
  tp_run_destroy(r);
  tp_engine_destroy(e);
}

TEST(cancel_before_the_first_step_gives_cancelled) {
  tp_engine *e = tp_engine_create();
  tp_run *r = tp_run_create(e, "return 1", 8, NULL);
  tp_run_cancel(r);
  CHECK_FIELD(tp_run_envelope(r), "error.code", "cancelled");
  tp_run_destroy(r);
  tp_engine_destroy(e);
}

TEST(the_wall_limit_counts_from_the_first_step) {
  tp_engine *e = tp_engine_create();
  tp_limits l;
  tp_limits_init(&l);
  l.wall_us = 100000;
  tp_run *r = tp_run_create(e, "return 'late but fine'", 22, &l);
  sleep_ms(150);  /* before the first step: not counted */
  CHECK_INT(tp_run_step(r, 0, 0), TP_DONE);
  CHECK_FIELD(tp_run_envelope(r), "result", "late but fine");
  tp_run_destroy(r);

  const char *src = BUSY "return 'never'";
  r = tp_run_create(e, src, strlen(src), &l);
  CHECK_INT(tp_run_step(r, 2000, 0), TP_YIELD);
  sleep_ms(150);  /* between steps: counted */
  CHECK_INT(tp_run_step(r, 2000, 0), TP_DONE);
  CHECK_FIELD(tp_run_envelope(r), "error.code", "limit.time");
  tp_run_destroy(r);
  tp_engine_destroy(e);
}

TEST(the_cpu_limit_holds_across_steps) {
  tp_engine *e = tp_engine_create();
  tp_limits l;
  tp_limits_init(&l);
  l.cpu_us = 20000;
  const char *src = "while true do end";
  tp_run *r = tp_run_create(e, src, strlen(src), &l);
  int yields = step_to_end(r, 2000, 0);
  CHECK(yields >= 3);
  CHECK_FIELD(tp_run_envelope(r), "error.code", "limit.cpu");
  tp_run_destroy(r);
  tp_engine_destroy(e);
}

TEST(the_instruction_limit_holds_across_steps) {
  tp_engine *e = tp_engine_create();
  tp_limits l;
  tp_limits_init(&l);
  l.instructions = 50000;
  const char *src = "while true do end";
  tp_run *r = tp_run_create(e, src, strlen(src), &l);
  int yields = step_to_end(r, 0, 1000);
  CHECK(yields >= 40);
  CHECK_FIELD(tp_run_envelope(r), "error.code", "limit.instructions");
  CHECK_FIELD(tp_run_envelope(r), "stats.instructions", "50001");
  tp_run_destroy(r);
  tp_engine_destroy(e);
}

TEST(destroying_an_engine_with_live_runs) {
  tp_engine *e = tp_engine_create();
  const char *src = "while true do end";
  tp_run *a = tp_run_create(e, src, strlen(src), NULL);
  tp_run *b = tp_run_create(e, "return 1", 8, NULL);
  tp_run *c = tp_run_create(e, "return 2", 8, NULL);
  CHECK(a && b && c);
  CHECK_INT(tp_run_step(a, 1000, 0), TP_YIELD);
  CHECK_INT(tp_run_step(c, 0, 0), TP_DONE);
  tp_run_destroy(b);
  tp_engine_destroy(e);  /* destroys a and c */
}

TEST(two_engines_are_independent) {
  tp_engine *e1 = tp_engine_create(), *e2 = tp_engine_create();
  char *env = NULL;
  tp_engine_destroy(e1);
  CHECK_INT(tp_engine_run(e2, "return 'two'", 12, NULL, &env, NULL), TP_OK);
  CHECK_FIELD(env, "result", "two");
  tp_free(env);
  tp_engine_destroy(e2);
}

/* A run killed at the memory cap leaves its thread holding most of the cap (here a deep
** recursion's stack); the session's next run still gets a thread: the old one is let go
** before the new one is made, so the allocator's emergency collection can take it. */
TEST(a_session_runs_again_after_a_run_killed_at_the_memory_cap) {
  tp_engine *e = tp_engine_create();
  tp_limits l;
  tp_limits_init(&l);
  l.memory = 16u << 20;
  tp_session *s = tp_session_create(e, &l);
  const char *src = "local function r() return r() + 1 end return r()";
  for (int i = 0; i < 3; i++) {
    tp_run *r = tp_session_run(s, src, strlen(src));
    CHECK(r != NULL);
    if (r == NULL) break;
    CHECK_INT(tp_run_step(r, 0, 0), TP_DONE);
    CHECK_HAS(tp_run_envelope(r), "\"ok\":false");
    tp_run_destroy(r);
  }
  tp_run *r = tp_session_run(s, "return 7", 8);
  CHECK(r != NULL);
  if (r != NULL) {
    CHECK_INT(tp_run_step(r, 0, 0), TP_DONE);
    CHECK_HAS(tp_run_envelope(r), "\"result\":7");
    tp_run_destroy(r);
  }
  tp_session_destroy(s);
  tp_engine_destroy(e);
}

TEST(a_thousand_runs_in_a_loop) {
  tp_engine *e = tp_engine_create();
  const char *srcs[] = {
    "return {n = 1, s = ('x'):rep(100)}",
    "error('boom')",
    "return +",
    "local t = {} for i = 1, 1e6 do t[i] = i end",
    "local co = coroutine.wrap(function() coroutine.yield(1) end) co() return 1",
  };
  const char *codes[] = { NULL, "runtime", "syntax", "limit.memory", NULL };
  tp_limits l;
  tp_limits_init(&l);
  l.memory = 256 * 1024;
  int bad = 0;
  for (int i = 0; i < 1000; i++) {
    int k = i % 5;
    char *env = NULL;
    int ok = -1;
    if (tp_engine_run(e, srcs[k], strlen(srcs[k]), &l, &env, &ok) != TP_OK) { bad++; continue; }
    char *code = field(env, "error.code");
    if (codes[k] ? (code == NULL || strcmp(code, codes[k]) != 0) : ok != 1) bad++;
    free(code);
    tp_free(env);
  }
  CHECK_INT(bad, 0);
  tp_engine_destroy(e);
}

int main (int argc, char **argv) {
  tp_test_args(argc, argv);
  RUN(every_public_function_accepts_null_without_crashing);
  RUN(null_source_or_envelope_pointer_is_refused);
  RUN(limits_init_fills_the_documented_defaults);
  RUN(version_is_major_minor_patch);
  RUN(engine_run_returns_the_envelope_and_script_ok);
  RUN(engine_run_honours_len_not_the_terminator);
  RUN(engine_check_compiles_without_running);
  RUN(run_lifecycle_create_step_done_envelope_destroy);
  RUN(a_syntax_error_is_not_a_create_error);
  RUN(a_2ms_time_budget_yields_several_times_then_finishes);
  RUN(time_slices_pass_through_a_script_coroutine);
  RUN(time_slices_pass_through_coroutine_resume);
  RUN(time_slices_pass_through_pcall);
  RUN(time_slices_pass_through_xpcall);
  RUN(an_instruction_budget_yields_then_finishes_with_the_result);
  RUN(an_instruction_budget_holds_inside_a_script_coroutine);
  RUN(cancel_between_steps_gives_cancelled);
  RUN(cancel_before_the_first_step_gives_cancelled);
  RUN(the_wall_limit_counts_from_the_first_step);
  RUN(the_cpu_limit_holds_across_steps);
  RUN(the_instruction_limit_holds_across_steps);
  RUN(destroying_an_engine_with_live_runs);
  RUN(two_engines_are_independent);
  RUN(a_thousand_runs_in_a_loop);
  RUN(a_session_runs_again_after_a_run_killed_at_the_memory_cap);
  return tp_test_end();
}
