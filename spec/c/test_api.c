/*
** test_api.c: the public C API of engine/include/tidepool.h. Every function called with
** NULL; the run object's life (create, step, done, envelope, destroy); stepping with
** time and instruction budgets, also through script coroutines and pcall; cancel
** between steps; the wall limit counted from the first step; an engine destroyed with
** live runs; and many runs in a loop (for valgrind).
*/
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

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

/* ---- the limits table and its parser ------------------------------------------------- */

TEST(limit_table_lists_every_field_in_struct_order) {
  static const char *const fields[] = { "memory", "instructions", "cpu_us", "wall_us",
    "output", "source", "result", "tool_calls", "tool_calls_per_tool", "tool_in_flight",
    "tool_bytes", "tool_timeout_us", "fs_bytes" };
  size_t n = sizeof fields / sizeof fields[0];
  CHECK_INT(tp_limit_count(), n);
  for (size_t i = 0; i < n && i < tp_limit_count(); i++) CHECK_STR(tp_limit_at(i)->field, fields[i]);
  CHECK(tp_limit_at(n) == NULL);
  CHECK(tp_limit_at(SIZE_MAX) == NULL);
  const tp_limit_info *t = tp_limit_at(3);
  CHECK_STR(t->flag, "--timeout");
  CHECK_STR(t->mcp, "--timeout");
  CHECK_STR(t->option, "timeout");
  CHECK_INT(t->unit, TP_UNIT_DURATION);
  CHECK(t->def == 10000000u);
  CHECK(t->max == UINT64_C(1000000000000000));
  CHECK_STR(t->code, "limit.time");
  CHECK_STR(t->message, "the script ran longer than its time limit of %s");
  CHECK(t->hint != NULL && strstr(t->hint, "loop that never ends") != NULL);
  CHECK_STR(t->help, "wall-clock time from the start");
  const tp_limit_info *c = tp_limit_at(7);
  CHECK_STR(c->field, "tool_calls");
  CHECK_INT(c->unit, TP_UNIT_COUNT);
  CHECK(c->max == UINT32_MAX);
  CHECK(c->def == 1000);
  const tp_limit_info *f = tp_limit_at(9);  /* fails nothing: no code, message or hint */
  CHECK_STR(f->field, "tool_in_flight");
  CHECK(f->code == NULL && f->message == NULL && f->hint == NULL);
}

/* ---- the error code table ------------------------------------------------------------ */

static int code_listed (const char *code) {
  for (size_t i = 0; i < tp_code_count(); i++)
    if (strcmp(tp_code_at(i)->code, code) == 0) return 1;
  return 0;
}

TEST(code_table_holds_every_limit_code_once_each_with_a_meaning) {
  CHECK(tp_code_count() >= 21);
  CHECK(tp_code_at(tp_code_count()) == NULL);
  CHECK(tp_code_at(SIZE_MAX) == NULL);
  CHECK_STR(tp_code_at(0)->code, "syntax");
  for (size_t i = 0; i < tp_code_count(); i++) {
    const tp_code_info *c = tp_code_at(i);
    CHECK(c->meaning != NULL && c->meaning[0] != '\0');
    for (size_t j = i + 1; j < tp_code_count(); j++) CHECK(strcmp(c->code, tp_code_at(j)->code) != 0);
  }
  for (size_t i = 0; i < tp_limit_count(); i++) {
    const tp_limit_info *li = tp_limit_at(i);
    if (li->code && !code_listed(li->code)) {
      fprintf(stderr, "  the limit %s's code %s is not in the code table\n", li->field, li->code);
      CHECK(0);
    }
  }
}

TEST(code_table_holds_the_codes_runs_end_with) {
  tp_engine *e = tp_engine_create();
  static const char *const srcs[] = {
    "return (", "error('boom')", "while true do end", "local t = {} for i = 1, 1e7 do t[i] = i end",
    "for i = 1, 1e5 do print(('x'):rep(100)) end", "return ('x'):rep(1e6)", "return tools.nope{}",
    "local s = 0 for i = 1, 1e9 do s = s + i end",
  };
  tp_limits l;
  tp_limits_init(&l);
  l.memory = 1 << 20;
  l.wall_us = 300000;
  l.output = 4096;
  l.result = 1024;
  l.instructions = 100000;
  for (size_t k = 0; k < sizeof srcs / sizeof srcs[0]; k++) {
    char *env = NULL;
    CHECK_INT(tp_engine_run(e, srcs[k], strlen(srcs[k]), &l, &env, NULL), TP_OK);
    char *code = field(env, "error.code");
    CHECK(code != NULL);
    if (code && !code_listed(code)) {
      fprintf(stderr, "  '%s' ended with %s, which the code table lacks\n", srcs[k], code);
      CHECK(0);
    }
    free(code);
    tp_free(env);
  }
  tp_engine_destroy(e);
}

TEST(limit_defaults_match_limits_init) {
  tp_limits l;
  tp_limits_init(&l);
  for (size_t i = 0; i < tp_limit_count(); i++)
    CHECK(tp_limits_get(&l, tp_limit_at(i)) == tp_limit_at(i)->def);
  CHECK(tp_limits_get(NULL, tp_limit_at(0)) == 0);
  CHECK(tp_limits_get(&l, NULL) == 0);
}

TEST(limit_find_takes_field_flag_and_lua_option) {
  CHECK(tp_limit_find("wall_us") == tp_limit_at(3));
  CHECK(tp_limit_find("--timeout") == tp_limit_at(3));
  CHECK(tp_limit_find("timeout") == tp_limit_at(3));
  CHECK(tp_limit_find("--fs-quota") == tp_limit_at(12));
  CHECK(tp_limit_find("fs_quota") == tp_limit_at(12));
  CHECK(tp_limit_find("fs_bytes") == tp_limit_at(12));
  CHECK(tp_limit_find("Timeout") == NULL);
  CHECK(tp_limit_find("--wall_us") == NULL);
  CHECK(tp_limit_find("") == NULL);
  CHECK(tp_limit_find(NULL) == NULL);
}

TEST(every_name_of_every_limit_finds_that_limit_alone) {
  for (size_t i = 0; i < tp_limit_count(); i++) {
    const tp_limit_info *li = tp_limit_at(i);
    CHECK(tp_limit_find(li->field) == li);
    CHECK(tp_limit_find(li->flag) == li);
    CHECK(tp_limit_find(li->option) == li);
    CHECK(li->mcp == NULL || tp_limit_find(li->mcp) == li);
    CHECK(strncmp(li->flag, "--", 2) == 0 && strncmp(li->option, "--", 2) != 0);
    CHECK(li->help != NULL && li->help[0] != '\0');
    CHECK(li->def <= li->max);
  }
}

TEST(limits_set_parses_each_unit) {
  tp_limits l;
  tp_limits_init(&l);
  char err[200] = "untouched";
  CHECK_INT(tp_limits_set(&l, "--memory", "32M", err, sizeof err), TP_OK);
  CHECK(l.memory == 32u << 20);
  CHECK_STR(err, "untouched");
  CHECK_INT(tp_limits_set(&l, "timeout", "1.5s", err, sizeof err), TP_OK);
  CHECK(l.wall_us == 1500000);
  CHECK_INT(tp_limits_set(&l, "cpu_us", "250ms", NULL, 0), TP_OK);
  CHECK(l.cpu_us == 250000);
  CHECK_INT(tp_limits_set(&l, "tool_calls", "4294967295", NULL, 0), TP_OK);
  CHECK(l.tool_calls == UINT32_MAX);
  CHECK_INT(tp_limits_set(&l, "--tool-timeout", "2m", NULL, 0), TP_OK);
  CHECK(l.tool_timeout_us == 120000000);
  CHECK_INT(tp_limits_set(&l, "max_output", "0", NULL, 0), TP_OK);
  CHECK(l.output == 0);
}

TEST(limits_set_refuses_bad_names_and_values_and_leaves_l_alone) {
  tp_limits l, before;
  tp_limits_init(&l);
  before = l;
  char err[200];
  CHECK_INT(tp_limits_set(&l, "walltime", "1s", err, sizeof err), TP_EINVAL);
  CHECK_STR(err, "unknown limit 'walltime'");
  CHECK_INT(tp_limits_set(&l, NULL, "1s", err, sizeof err), TP_EINVAL);
  CHECK_STR(err, "unknown limit '(null)'");
  CHECK_INT(tp_limits_set(&l, "memory", "12Q", err, sizeof err), TP_EINVAL);
  CHECK_STR(err, "bad size '12Q' (use bytes or a suffix: 512K, 64M, 1G)");
  CHECK_INT(tp_limits_set(&l, "tool_calls", "-2", err, sizeof err), TP_EINVAL);
  CHECK_STR(err, "bad count '-2' (it cannot be negative; 0 means no limit)");
  CHECK_INT(tp_limits_set(&l, "tool_calls", "4294967296", err, sizeof err), TP_EINVAL);
  CHECK_STR(err, "bad count '4294967296' (too large: at most 4294967295)");
  CHECK_INT(tp_limits_set(&l, "instructions", "1e3", err, sizeof err), TP_EINVAL);
  CHECK_STR(err, "bad instruction count '1e3' (use a whole number)");
  CHECK_INT(tp_limits_set(&l, "memory", "99999999999999999999G", err, sizeof err), TP_EINVAL);
  CHECK_STR(err, "bad size '99999999999999999999G' (too large: at most 18446744073709551615 bytes)");
  CHECK_INT(tp_limits_set(&l, "memory", "17179869184G", err, sizeof err), TP_EINVAL);
  CHECK_STR(err, "bad size '17179869184G' (too large: at most 18446744073709551615 bytes)");
  CHECK_INT(tp_limits_set(&l, "timeout", "1e400s", err, sizeof err), TP_EINVAL);
  CHECK_STR(err, "bad duration '1e400s' (too large: at most 1000000000 s)");
  CHECK_INT(tp_limits_set(&l, "timeout", "nan", err, sizeof err), TP_EINVAL);
  CHECK_STR(err, "bad duration 'nan' (use 500ms, 2s, 1m)");
  CHECK_INT(tp_limits_set(&l, "timeout", NULL, err, sizeof err), TP_EINVAL);
  CHECK_STR(err, "bad duration '(null)' (use 500ms, 2s, 1m)");
  CHECK_INT(tp_limits_set(&l, "timeout", "2s", err, 8), TP_OK);  /* err untouched */
  before.wall_us = 2000000;
  CHECK(memcmp(&l, &before, sizeof l) == 0);
  CHECK_INT(tp_limits_set(NULL, "timeout", "2s", err, sizeof err), TP_EINVAL);
  CHECK_STR(err, "no limits to set (NULL)");
  CHECK_INT(tp_limits_set(&l, "memory", "12Q", err, 9), TP_EINVAL);  /* cut, terminated */
  CHECK_STR(err, "bad size");
}

TEST(limits_set_number_takes_seconds_and_whole_numbers) {
  tp_limits l;
  tp_limits_init(&l);
  char err[200];
  CHECK_INT(tp_limits_set_number(&l, "timeout", 0.25, err, sizeof err), TP_OK);
  CHECK(l.wall_us == 250000);
  CHECK_INT(tp_limits_set_number(&l, "memory", 65536, err, sizeof err), TP_OK);
  CHECK(l.memory == 65536);
  CHECK_INT(tp_limits_set_number(&l, "memory", 1.5, err, sizeof err), TP_EINVAL);
  CHECK_STR(err, "bad size '1.5' (use bytes or a suffix: 512K, 64M, 1G)");
  CHECK_INT(tp_limits_set_number(&l, "tool_calls", -1, err, sizeof err), TP_EINVAL);
  CHECK_STR(err, "bad count '-1' (it cannot be negative; 0 means no limit)");
  CHECK_INT(tp_limits_set_number(&l, "tool_calls", 4294967296.0, err, sizeof err), TP_EINVAL);
  CHECK_STR(err, "bad count '4294967296' (too large: at most 4294967295)");
  CHECK_INT(tp_limits_set_number(&l, "memory", 1e30, err, sizeof err), TP_EINVAL);
  CHECK_STR(err, "bad size '1e+30' (too large: at most 18446744073709551615 bytes)");
  CHECK_INT(tp_limits_set_number(&l, "timeout", 1e300, err, sizeof err), TP_EINVAL);
  CHECK_STR(err, "bad duration '1e+300' (too large: at most 1000000000 s)");
  CHECK_INT(tp_limits_set_number(&l, "timeout", -0.5, err, sizeof err), TP_EINVAL);
  CHECK_STR(err, "bad duration '-0.5' (it cannot be negative; 0 means no limit)");
  CHECK_INT(tp_limits_set_number(&l, "nope", 1, err, sizeof err), TP_EINVAL);
  CHECK_STR(err, "unknown limit 'nope'");
  CHECK(l.wall_us == 250000 && l.memory == 65536 && l.tool_calls == 1000);
}

TEST(parse_value_and_format_value) {
  uint64_t v = 7;
  char err[200];
  CHECK_INT(tp_parse_value(TP_UNIT_BYTES, "1GiB", UINT64_MAX, &v, NULL, err, sizeof err), TP_OK);
  CHECK(v == UINT64_C(1) << 30);
  CHECK_INT(tp_parse_value(TP_UNIT_DURATION, "90", UINT64_MAX, &v, NULL, err, sizeof err), TP_OK);
  CHECK(v == 90000000);
  CHECK_INT(tp_parse_value(TP_UNIT_COUNT, "101", 100, &v, "session count", err, sizeof err),
            TP_EINVAL);
  CHECK_STR(err, "bad session count '101' (too large: at most 100)");
  CHECK(v == 90000000);
  CHECK_INT(tp_parse_value(TP_UNIT_COUNT, "18446744073709551616", UINT64_MAX, &v, NULL, err,
                           sizeof err), TP_EINVAL);
  CHECK_STR(err, "bad count '18446744073709551616' (too large: at most 18446744073709551615)");
  CHECK_INT(tp_parse_value((tp_unit)9, "1", 10, &v, NULL, err, sizeof err), TP_EINVAL);
  CHECK_STR(err, "unknown unit 9");
  char buf[32];
  tp_format_value(TP_UNIT_BYTES, UINT64_C(64) << 20, buf, sizeof buf);
  CHECK_STR(buf, "64M");
  tp_format_value(TP_UNIT_DURATION, 600000000, buf, sizeof buf);
  CHECK_STR(buf, "10m");
  tp_format_value(TP_UNIT_DURATION, 1500, buf, sizeof buf);
  CHECK_STR(buf, "1500us");
  tp_format_value(TP_UNIT_COUNT, 0, buf, sizeof buf);
  CHECK_STR(buf, "none");
  tp_format_value(TP_UNIT_BYTES, 1536, buf, 3);
  CHECK_STR(buf, "15");
}

/* ---- runs: ok and call events --------------------------------------------------------- */

static void answer_fn (tp_call *c, void *ud) {
  (void)ud;
  tp_call_complete(c, "42", 0);
}

typedef struct events { char log[512]; int n; } events;

static void on_call (tp_run *r, const char *tool, int done, void *ud) {
  events *ev = ud;
  size_t len = strlen(ev->log);
  snprintf(ev->log + len, sizeof ev->log - len, "%s%s:%s", len ? " " : "", done ? "end" : "start",
           tool);
  ev->n++;
  (void)r;
}

TEST(run_ok_is_set_only_when_done_and_succeeded) {
  tp_engine *e = tp_engine_create();
  tp_run *r = tp_run_create(e, "return 1", 8, NULL);
  CHECK_INT(tp_run_ok(r), 0);
  CHECK_INT(tp_run_step(r, 0, 0), TP_DONE);
  CHECK_INT(tp_run_ok(r), 1);
  tp_run_destroy(r);
  r = tp_run_create(e, "error('x')", 10, NULL);
  CHECK_INT(tp_run_step(r, 0, 0), TP_DONE);
  CHECK_INT(tp_run_ok(r), 0);
  tp_run_destroy(r);
  r = tp_run_create(e, "return +", 8, NULL);
  CHECK_INT(tp_run_step(r, 0, 0), TP_DONE);
  CHECK_INT(tp_run_ok(r), 0);
  tp_run_destroy(r);
  CHECK_INT(tp_run_ok(NULL), 0);
  tp_engine_destroy(e);
}

TEST(call_events_come_in_order_once_per_start_and_end) {
  tp_engine *e = tp_engine_create();
  tp_tool_def a = { .name = "t.answer", .description = "Answers 42.", .handler = answer_fn };
  tp_tool_def p = { .name = "t.pending", .description = "Completed by the program." };
  CHECK_INT(tp_engine_add_tool(e, &a), TP_OK);
  CHECK_INT(tp_engine_add_tool(e, &p), TP_OK);
  const char *src = "local x = tools.t.answer{} local ok = pcall(tools.t.nosuch, {}) "
                    "return x + tools.t.pending{}";
  tp_run *r = tp_run_create(e, src, strlen(src), NULL);
  events ev = { "", 0 }, other = { "", 0 };
  tp_run_on_call(r, on_call, &other);
  tp_run_on_call(r, on_call, &ev);  /* replaces the first */
  CHECK_INT(tp_run_step(r, 0, 0), TP_WAIT);
  CHECK_STR(ev.log, "start:t.answer end:t.answer start:t.nosuch end:t.nosuch start:t.pending");
  tp_call *calls[4];
  CHECK_INT(tp_run_pending(r, calls, 4), 1);
  CHECK_INT(tp_call_complete(calls[0], "1", 0), TP_OK);
  CHECK_INT(tp_run_step(r, 0, 0), TP_DONE);
  CHECK_STR(ev.log, "start:t.answer end:t.answer start:t.nosuch end:t.nosuch start:t.pending "
                    "end:t.pending");
  CHECK_INT(ev.n, 6);
  CHECK_INT(other.n, 0);
  CHECK_INT(tp_run_ok(r), 1);
  CHECK_HAS(tp_run_envelope(r), "\"result\":43");
  tp_run_destroy(r);
  r = tp_run_create(e, src, strlen(src), NULL);  /* cleared: no events */
  tp_run_on_call(r, on_call, &other);
  tp_run_on_call(r, NULL, &other);
  CHECK_INT(tp_run_step(r, 0, 0), TP_WAIT);
  CHECK_INT(other.n, 0);
  tp_run_destroy(r);
  tp_run_on_call(NULL, on_call, &ev);
  tp_engine_destroy(e);
}

/* The envelope is written piece by piece without trees (run.c): each piece must be the
** engine's own JSON form of its value (tp_json_text: keys sorted, shortest reals), in the
** envelope's fixed order. Parsing the envelope and writing each piece again gives back
** the same text, for plain runs, logs, warnings, errors and instruction counts (the
** calls' records keep their own order and are taken as they are). */
static void check_envelope_form (const char *env) {
  static const char *const order[] = { "ok", "result", "error", "warnings", "logs", "calls",
                                       "stats" };
  char why[256] = "";
  struct json_t *v = env ? tp_json_parse(env, strlen(env), why, sizeof why) : NULL;
  CHECK(v != NULL);
  if (v == NULL) return;
  char expected[8192];
  size_t o = 0;
  int keys = 0;
  for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) {
    json_t *piece = json_object_get((json_t *)v, order[i]);
    if (piece == NULL) continue;
    char *t = NULL;
    if (strcmp(order[i], "calls") == 0) {  /* records in their own order (calls.c): as is */
      const char *a = strstr(env, ",\"calls\":"), *b = strstr(env, ",\"stats\":");
      CHECK(a != NULL && b != NULL && a < b);
      if (a != NULL && b != NULL && a < b) t = strndup(a + 9, (size_t)(b - a - 9));
    }
    else t = tp_json_text(piece, NULL);
    CHECK(t != NULL);
    o += (size_t)snprintf(expected + o, sizeof expected - o, "%s\"%s\":%s", keys ? "," : "{",
                          order[i], t ? t : "");
    tp_free(t);
    keys++;
  }
  snprintf(expected + o, sizeof expected - o, "}");
  CHECK_INT(keys, json_object_size((json_t *)v));
  CHECK_STR(env, expected);
  json_decref((json_t *)v);
}

TEST(envelope_pieces_are_the_engines_json_form) {
  tp_engine *e = tp_engine_create();
  tp_tool_def a = { .name = "t.answer", .description = "Answers 42.", .handler = answer_fn };
  CHECK_INT(tp_engine_add_tool(e, &a), TP_OK);
  static const char *const scripts[] = {
    "return 1",
    "return",
    "return nil",
    "return {x = 1.5, y = {1, 2, 3}, s = 'a\\tb'}",
    "print('one') print('two\\n', 2.5) return 'x'",
    "local n = 0 for i = 1, 20000 do n = n + i end return n",
    "error('boom')",
    "error({code = 'mine', message = 'a table'})",
    "return tools.t.answer{} + tools.t.answer{n = 1}",
    "local ok = pcall(tools.t.nosuch, {}) return ok",
    "local x = tools.t.answer{} error('after a call')",
    "local t = {a = 1} for _, v in ipairs(t) do end return t.length",
    "return true", "return false", "return 1 == 2",  /* finish_ok's constant texts */
    "local r = tools.t.answer{} return r ~= nil", "return true, false",
  };
  tp_limits lim;
  tp_limits_init(&lim);
  for (int counted = 0; counted < 2; counted++) {
    lim.instructions = counted ? 10000000 : 0;  /* stats.instructions when there is a limit */
    for (size_t i = 0; i < sizeof scripts / sizeof scripts[0]; i++) {
      char *env = NULL;
      int ok = 0;
      CHECK_INT(tp_engine_run(e, scripts[i], strlen(scripts[i]), &lim, &env, &ok), TP_OK);
      check_envelope_form(env);
      CHECK_HAS(env, "\"stats\":{\"cpu_ms\":");
      if (counted) CHECK_HAS(env, ",\"instructions\":");
      else CHECK(env == NULL || strstr(env, "\"instructions\"") == NULL);
      tp_free(env);
    }
  }
  tp_engine_destroy(e);
}

/* A run holds its first 16 calls in its own allocation and moves them to the heap past
** that (calls.c): calls on both sides of the move keep their order and their answers, in
** a run driven by the engine's loop (whose record of the run lives in the run too). */
static void count_done (tp_run *r, void *ud) {
  (void)r;
  (*(int *)ud)++;
}

TEST(calls_past_the_runs_own_slots_keep_their_order_and_answers) {
  tp_engine *e = tp_engine_create();
  tp_tool_def a = { .name = "t.answer", .description = "Answers 42.", .handler = answer_fn };
  CHECK_INT(tp_engine_add_tool(e, &a), TP_OK);
  for (int n = 15; n <= 40; n += 25) {
    char src[200];
    snprintf(src, sizeof src, "local s = 0 for i = 1, %d do s = s + tools.t.answer{i = i} "
             "end local ok = pcall(tools.t.nosuch, {}) return s", n);
    tp_run *r = tp_run_create(e, src, strlen(src), NULL);
    int done = 0;
    CHECK_INT(tp_run_start(r, count_done, &done), TP_OK);
    while (!done) tp_engine_poll(e, 0);
    const char *env = tp_run_envelope(r);
    char want[40];
    snprintf(want, sizeof want, "\"result\":%d", 42 * n);
    CHECK_HAS(env, want);
    int records = 0;
    for (const char *p = env; (p = strstr(p, "{\"tool\":\"t.answer\",\"ok\":true")) != NULL; p++)
      records++;
    CHECK_INT(records, n);
    CHECK_HAS(env, "{\"tool\":\"t.nosuch\",\"ok\":false,\"error\":\"tool.unknown\"");
    CHECK(strstr(env, "\"tool\":\"t.nosuch\"") > strstr(env, "\"tool\":\"t.answer\""));
    check_envelope_form(env);
    tp_run_destroy(r);
  }
  tp_engine_destroy(e);
}

/* ---- tools: one by one, problems, unload and reload ------------------------------------ */

/* A fresh directory under /tmp (dir holds at least 64 bytes). */
static void make_dir (char *dir) {
  strcpy(dir, "/tmp/tp_api_XXXXXX");
  CHECK(mkdtemp(dir) != NULL);
}

static void write_file (const char *dir, const char *name, const char *text) {
  char path[256];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "w");
  CHECK(f != NULL);
  if (f) { fputs(text, f); fclose(f); }
}

static void remove_file (const char *dir, const char *name) {
  char path[256];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  unlink(path);
}

typedef struct problems { char text[4][300]; int n; } problems;

static void on_problem (const char *problem, void *ud) {
  problems *p = ud;
  if (p->n < 4) snprintf(p->text[p->n], sizeof p->text[0], "%s", problem);
  p->n++;
}

/* tp_tool_def and tp_tool_info end in reserved_ room (tidepool.h): tp_tool_def_init zeroes
** a definition whatever it held, and tp_tool_info is written whole, its room zero. */
TEST(tool_structs_keep_room_for_fields_to_come) {
  tp_tool_def d;
  memset(&d, 0xab, sizeof d);
  tp_tool_def_init(&d);
  CHECK(d.name == NULL && d.description == NULL && d.input_schema == NULL);
  CHECK(d.output_schema == NULL && d.handler == NULL && d.ud == NULL && d.timeout_us == 0);
  for (size_t i = 0; i < sizeof d.reserved_ / sizeof d.reserved_[0]; i++)
    CHECK_INT(d.reserved_[i], 0);
  d.name = "t.grow";
  d.handler = answer_fn;
  tp_engine *e = tp_engine_create();
  CHECK_INT(tp_engine_add_tool(e, &d), TP_OK);
  tp_tool_info ti;
  memset(&ti, 0xab, sizeof ti);
  CHECK_INT(tp_engine_tool_info(e, 0, &ti), TP_OK);
  CHECK_STR(ti.name, "t.grow");
  CHECK_STR(ti.description, "");
  CHECK(ti.origin == NULL);
  CHECK_INT(ti.timeout_us, 0);
  for (size_t i = 0; i < sizeof ti.reserved_ / sizeof ti.reserved_[0]; i++)
    CHECK_INT(ti.reserved_[i], 0);
  tp_engine_destroy(e);
}

TEST(tools_are_listed_one_by_one_sorted_with_their_schemas) {
  tp_engine *e = tp_engine_create();
  CHECK_INT(tp_engine_tool_count(e), 0);
  tp_tool_def b = { .name = "b.tool", .input_schema = "{\"type\":\"object\",\"required\":[\"x\"]}",
                    .output_schema = "{\"type\":\"number\"}", .handler = answer_fn,
                    .timeout_us = 2500 };
  tp_tool_def a = { .name = "a.tool", .description = "First.", .handler = answer_fn };
  CHECK_INT(tp_engine_add_tool(e, &b), TP_OK);
  CHECK_INT(tp_engine_add_tool(e, &a), TP_OK);
  CHECK_INT(tp_engine_tool_count(e), 2);
  tp_tool_info ti;
  CHECK_INT(tp_engine_tool_info(e, 0, &ti), TP_OK);
  CHECK_STR(ti.name, "a.tool");
  CHECK_STR(ti.description, "First.");
  CHECK(ti.origin == NULL);
  CHECK(ti.timeout_us == 0);
  CHECK_INT(tp_engine_tool_info(e, 1, &ti), TP_OK);
  CHECK_STR(ti.name, "b.tool");
  CHECK_STR(ti.description, "");
  CHECK(ti.timeout_us == 2500);
  ti.name = "kept";
  CHECK_INT(tp_engine_tool_info(e, 2, &ti), TP_EINVAL);
  CHECK_STR(ti.name, "kept");
  CHECK_INT(tp_engine_tool_info(e, 0, NULL), TP_EINVAL);
  CHECK_INT(tp_engine_tool_info(NULL, 0, &ti), TP_EINVAL);
  char *json = (char *)"sentinel";
  CHECK_INT(tp_engine_tool_schema(e, 1, 0, &json), TP_OK);
  CHECK_STR(json, "{\"required\":[\"x\"],\"type\":\"object\"}");
  tp_free(json);
  CHECK_INT(tp_engine_tool_schema(e, 1, 1, &json), TP_OK);
  CHECK_STR(json, "{\"type\":\"number\"}");
  tp_free(json);
  CHECK_INT(tp_engine_tool_schema(e, 0, 0, &json), TP_OK);
  CHECK_STR(json, "{\"type\":\"object\"}");
  tp_free(json);
  json = (char *)"sentinel";
  CHECK_INT(tp_engine_tool_schema(e, 0, 1, &json), TP_OK);
  CHECK(json == NULL);
  json = (char *)"sentinel";
  CHECK_INT(tp_engine_tool_schema(e, 2, 0, &json), TP_EINVAL);
  CHECK(json == NULL);
  CHECK_INT(tp_engine_tool_schema(e, 0, 0, NULL), TP_EINVAL);
  CHECK_INT(tp_engine_tool_count(NULL), 0);
  tp_engine_destroy(e);
}

TEST(load_problems_come_one_by_one_in_file_order) {
  char dir[64];
  make_dir(dir);
  write_file(dir, "a_ok.lua", "return { name = 'p.one', description = 'One.', "
             "handler = function() return 1 end }\n");
  write_file(dir, "b_syntax.lua", "return {\n");
  write_file(dir, "c_two.lua", "error('two\\nlines')\n");
  tp_engine *e = tp_engine_create();
  problems p = { .n = 0 };
  CHECK_INT(tp_engine_load_tools_cb(e, dir, on_problem, &p), 1);
  CHECK_INT(p.n, 2);
  char want[300];
  snprintf(want, sizeof want, "%s/b_syntax.lua:2: unexpected symbol near <eof>", dir);
  CHECK_STR(p.text[0], want);
  snprintf(want, sizeof want, "%s/c_two.lua:1: two\nlines", dir);  /* one problem */
  CHECK_STR(p.text[1], want);
  CHECK_INT(tp_engine_tool_count(e), 1);
  /* a directory that cannot be read: a negative code, no problem calls */
  p.n = 0;
  CHECK_INT(tp_engine_load_tools_cb(e, "/nonexistent/tp", on_problem, &p), TP_EINVAL);
  CHECK_INT(p.n, 0);
  CHECK_HAS(tp_engine_error(e), "cannot read the tools directory /nonexistent/tp");
  /* no callback: problems stay in tp_engine_error as before */
  tp_engine *e2 = tp_engine_create();
  CHECK_INT(tp_engine_load_tools_cb(e2, dir, NULL, NULL), 1);
  CHECK_HAS(tp_engine_error(e2), "b_syntax.lua:2:");
  tp_engine_destroy(e2);
  tp_engine_destroy(e);
  remove_file(dir, "a_ok.lua");
  remove_file(dir, "b_syntax.lua");
  remove_file(dir, "c_two.lua");
  rmdir(dir);
}

TEST(unload_then_load_picks_up_a_changed_plugin_dir) {
  char dir[64];
  make_dir(dir);
  write_file(dir, "p.lua", "return { name = 'p.v', description = 'Version 1.', "
             "handler = function() return 1 end }\n");
  tp_engine *e = tp_engine_create();
  tp_tool_def c = { .name = "c.kept", .description = "A C tool.", .handler = answer_fn };
  CHECK_INT(tp_engine_add_tool(e, &c), TP_OK);
  CHECK_INT(tp_engine_load_tools(e, dir), 1);
  tp_tool_info ti;
  CHECK_INT(tp_engine_tool_count(e), 2);
  CHECK_INT(tp_engine_tool_info(e, 1, &ti), TP_OK);
  CHECK_STR(ti.name, "p.v");
  char origin[128];
  snprintf(origin, sizeof origin, "%s/p.lua:1", dir);
  CHECK_STR(ti.origin, origin);
  /* a live run holds its tools: nothing is removed */
  tp_run *r = tp_run_create(e, "return tools.p.v{}", 18, NULL);
  CHECK_INT(tp_engine_unload_tools(e), TP_ESTATE);
  CHECK_INT(tp_engine_tool_count(e), 2);
  CHECK_INT(tp_run_step(r, 0, 0), TP_DONE);
  CHECK_HAS(tp_run_envelope(r), "\"result\":1");
  tp_run_destroy(r);
  /* the file changes: a reload sees the new version, and a new tool */
  write_file(dir, "p.lua", "return { { name = 'p.v', description = 'Version 2.', "
             "handler = function() return 2 end }, { name = 'p.w', description = 'New.', "
             "handler = function() return 3 end } }\n");
  CHECK_INT(tp_engine_unload_tools(e), 1);
  CHECK_INT(tp_engine_tool_count(e), 1);
  CHECK_INT(tp_engine_tool_info(e, 0, &ti), TP_OK);
  CHECK_STR(ti.name, "c.kept");
  CHECK_INT(tp_engine_load_tools(e, dir), 2);
  CHECK_STR(tp_engine_error(e), "");
  CHECK_INT(tp_engine_tool_count(e), 3);
  CHECK_INT(tp_engine_tool_info(e, 1, &ti), TP_OK);
  CHECK_STR(ti.description, "Version 2.");
  char *env = NULL;
  CHECK_INT(tp_engine_run(e, "return tools.p.v{} * 10 + tools.p.w{}", 37, NULL, &env, NULL), TP_OK);
  CHECK_HAS(env, "\"result\":23");
  tp_free(env);
  CHECK_INT(tp_engine_unload_tools(e), 2);
  CHECK_INT(tp_engine_unload_tools(e), 0);
  CHECK_INT(tp_engine_unload_tools(NULL), TP_EINVAL);
  tp_engine_destroy(e);
  remove_file(dir, "p.lua");
  rmdir(dir);
}

/* ---- the loop and the shared store ------------------------------------------------------ */

TEST(engine_loop_is_the_engines_own) {
  tp_engine *a = tp_engine_create(), *b = tp_engine_create();
  CHECK(tp_engine_loop(a) != NULL);
  CHECK(tp_engine_loop(a) == tp_engine_loop(a));
  CHECK(tp_engine_loop(a) != tp_engine_loop(b));
  CHECK(tp_engine_loop(NULL) == NULL);
  tp_engine_destroy(a);
  tp_engine_destroy(b);
}

/* The built-in kv tools (tools/kv.lua), from the source tree. */
static int load_kv (tp_engine *e) {
  const char *env = getenv("TIDEPOOL_TOOLS_DIR");
  return tp_engine_load_tools(e, env && *env ? env : "tools");
}

TEST(engines_sharing_a_store_see_each_others_keys) {
  tp_store *s = tp_store_create();
  CHECK(s != NULL);
  tp_engine *a = tp_engine_create(), *b = tp_engine_create(), *c = tp_engine_create();
  CHECK_INT(tp_engine_set_store(a, s), TP_OK);
  CHECK_INT(tp_engine_set_store(b, s), TP_OK);
  CHECK(load_kv(a) > 0 && load_kv(b) > 0 && load_kv(c) > 0);
  CHECK_INT(tp_engine_set_store(c, s), TP_ESTATE);  /* its host state has started */
  char *env = NULL;
  const char *put = "tools.kv.set{key = 'k', value = 'from a'} return true";
  CHECK_INT(tp_engine_run(a, put, strlen(put), NULL, &env, NULL), TP_OK);
  CHECK_HAS(env, "\"ok\":true");
  tp_free(env);
  const char *get = "return tools.kv.get{key = 'k'}";
  CHECK_INT(tp_engine_run(b, get, strlen(get), NULL, &env, NULL), TP_OK);
  CHECK_HAS(env, "from a");
  tp_free(env);
  CHECK_INT(tp_engine_run(c, get, strlen(get), NULL, &env, NULL), TP_OK);  /* its own */
  CHECK(env != NULL && strstr(env, "from a") == NULL);
  tp_free(env);
  CHECK_INT(tp_engine_set_store(NULL, s), TP_EINVAL);
  CHECK_INT(tp_engine_set_store(a, NULL), TP_EINVAL);
  tp_engine_destroy(a);
  tp_engine_destroy(b);
  tp_engine_destroy(c);
  tp_store_destroy(s);
  tp_store_destroy(NULL);
}

TEST(json_text_writes_the_engines_form_and_parse_reads_as_the_engine_does) {
  char why[256] = "";
  const char in[] = "{\"b\":[1,2.5,1e300,-0.0,\"\\u0000x\"],\"a\":{\"z\":null,\"y\":true}}";
  struct json_t *v = tp_json_parse(in, sizeof in - 1, why, sizeof why);
  CHECK(v != NULL);
  size_t n = 0;
  char *t = tp_json_text(v, &n);
  CHECK_STR(t, "{\"a\":{\"y\":true,\"z\":null},\"b\":[1,2.5,1e+300,-0.0,\"\\u0000x\"]}");
  CHECK_INT(n, t ? strlen(t) : 0);
  tp_free(t);
  json_decref((json_t *)v);
  t = tp_json_text(NULL, NULL);
  CHECK_STR(t, "null");
  tp_free(t);
  CHECK(tp_json_parse("{\"a\":1,\"a\":2}", 13, why, sizeof why) == NULL);
  CHECK(strstr(why, "duplicate object key") != NULL);
  CHECK(strstr(why, "(each key may appear once in an object)") != NULL);
  CHECK(strstr(why, "at line 1 column") != NULL);
  CHECK(tp_json_parse("[1,", 3, NULL, 0) == NULL);
}

TEST(run_with_options_seeds_fixes_the_clock_checks_and_refuses_a_struct_too_small) {
  tp_engine *e = tp_engine_create();
  const char *src = "return {math.random(1000000), os.time()}";
  tp_run_opts o = TP_RUN_OPTS_INIT;
  o.has_seed = 1;
  o.seed = 42;
  o.has_clock = 1;
  o.clock_epoch = 1700000000;
  o.clock_step_us = 1000;
  char *a = NULL, *b = NULL;
  int ok = 0;
  CHECK_INT(tp_engine_run_with(e, src, strlen(src), &o, &a, &ok), TP_OK);
  CHECK_INT(ok, 1);
  CHECK_INT(tp_engine_run_with(e, src, strlen(src), &o, &b, NULL), TP_OK);
  json_t *ja = json_loads(a, 0, NULL), *jb = json_loads(b, 0, NULL);
  CHECK(ja != NULL && jb != NULL);
  CHECK(json_equal(json_object_get(ja, "result"), json_object_get(jb, "result")));
  CHECK_INT(json_integer_value(json_array_get(json_object_get(ja, "result"), 1)), 1700000000);
  json_decref(ja);
  json_decref(jb);
  tp_free(a);
  tp_free(b);
  tp_run_opts check = TP_RUN_OPTS_INIT;
  check.check_only = 1;
  CHECK_INT(tp_engine_run_with(e, "error('never runs')", 19, &check, &a, &ok), TP_OK);
  CHECK_HAS(a, "\"result\":null");
  tp_free(a);
  /* a caller built with only the first two fields: the rest is unset */
  tp_run_opts old = TP_RUN_OPTS_INIT;
  old.size = offsetof(tp_run_opts, check_only);
  old.check_only = 1;  /* past its size: not read */
  CHECK_INT(tp_engine_run_with(e, "return 7", 8, &old, &a, &ok), TP_OK);
  CHECK_HAS(a, "\"result\":7");
  tp_free(a);
  old.size = sizeof(size_t);
  CHECK_INT(tp_engine_run_with(e, "return 7", 8, &old, &a, &ok), TP_EINVAL);
  CHECK(a == NULL);
  CHECK_INT(tp_engine_run_with(e, "return 8", 8, NULL, &a, &ok), TP_OK);
  CHECK_HAS(a, "\"result\":8");
  tp_free(a);
  tp_engine_destroy(e);
}

int main (int argc, char **argv) {
  tp_test_args(argc, argv);
  RUN(json_text_writes_the_engines_form_and_parse_reads_as_the_engine_does);
  RUN(every_public_function_accepts_null_without_crashing);
  RUN(run_with_options_seeds_fixes_the_clock_checks_and_refuses_a_struct_too_small);
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
  RUN(limit_table_lists_every_field_in_struct_order);
  RUN(limit_defaults_match_limits_init);
  RUN(code_table_holds_every_limit_code_once_each_with_a_meaning);
  RUN(code_table_holds_the_codes_runs_end_with);
  RUN(limit_find_takes_field_flag_and_lua_option);
  RUN(every_name_of_every_limit_finds_that_limit_alone);
  RUN(limits_set_parses_each_unit);
  RUN(limits_set_refuses_bad_names_and_values_and_leaves_l_alone);
  RUN(limits_set_number_takes_seconds_and_whole_numbers);
  RUN(parse_value_and_format_value);
  RUN(run_ok_is_set_only_when_done_and_succeeded);
  RUN(call_events_come_in_order_once_per_start_and_end);
  RUN(envelope_pieces_are_the_engines_json_form);
  RUN(calls_past_the_runs_own_slots_keep_their_order_and_answers);
  RUN(tool_structs_keep_room_for_fields_to_come);
  RUN(tools_are_listed_one_by_one_sorted_with_their_schemas);
  RUN(load_problems_come_one_by_one_in_file_order);
  RUN(unload_then_load_picks_up_a_changed_plugin_dir);
  RUN(engine_loop_is_the_engines_own);
  RUN(engines_sharing_a_store_see_each_others_keys);
  return tp_test_end();
}
