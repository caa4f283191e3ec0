/*
** test_host.c: the host Lua state and plugin tools through the C API (engine/host/host.c).
** Run from the repository's root (the fixtures are spec/fixtures/plugins/...).
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "tp_test.h"
#include "tidepool.h"
#include "watchdog.h"
#include "engine.h"
#include "calls.h"

#define GOOD "spec/fixtures/plugins/good"
#define BROKEN "spec/fixtures/plugins/broken"
#define REUSE "spec/fixtures/plugins/reuse"
#define LEAKY "spec/fixtures/plugins/leaky"

typedef struct finish_log { int done; uint64_t at_ns; } finish_log;

static void on_done (tp_run *r, void *ud) {
  (void)r;
  finish_log *f = ud;
  f->done = 1;
  f->at_ns = tp__now_ns();
}

static int count_lines (const char *s) {
  int n = *s ? 1 : 0;
  for (; *s; s++) n += *s == '\n';
  return n;
}

TEST(load_tools_counts_the_tools_added_and_lists_each_problem) {
  tp_engine *e = tp_engine_create();
  CHECK_INT(tp_engine_load_tools(e, GOOD), 12);
  CHECK_STR(tp_engine_error(e), "");
  CHECK_INT(tp_engine_load_tools(e, BROKEN), 3);
  CHECK_INT(count_lines(tp_engine_error(e)), 9);
  CHECK_HAS(tp_engine_error(e), "b_syntax.lua:3:");
  CHECK(tp_engine_load_tools(e, "spec/fixtures/plugins/none") < 0);
  CHECK_HAS(tp_engine_error(e), "cannot read the tools directory");
  CHECK_INT(tp_engine_load_tools(e, GOOD), 0);  /* every name is taken now */
  CHECK_INT(count_lines(tp_engine_error(e)), 12);
  tp_engine_destroy(e);
}

TEST(the_loop_stays_free_while_a_handler_waits) {
  tp_engine *e = tp_engine_create();
  CHECK_INT(tp_engine_load_tools(e, GOOD), 12);
  const char *slow = "return tools.test.nap{ms = 300}.ms";
  const char *fast = "local s = 0 for i = 1, 100000 do s = s + i end "
                     "return {s, tools.test.echo{x = 1}.x, tools.test.nap{ms = 20}.ms}";
  tp_run *a = tp_run_create(e, slow, strlen(slow), NULL);
  tp_run *b = tp_run_create(e, fast, strlen(fast), NULL);
  finish_log fa = { 0, 0 }, fb = { 0, 0 };
  uint64_t t0 = tp__now_ns();
  CHECK_INT(tp_run_start(a, on_done, &fa), TP_OK);
  CHECK_INT(tp_run_start(b, on_done, &fb), TP_OK);
  while ((!fa.done || !fb.done) && tp__now_ns() - t0 < 5000000000u) tp_engine_poll(e, 1);
  CHECK(fa.done && fb.done);
  CHECK(fb.at_ns < fa.at_ns);
  CHECK((fa.at_ns - t0) / 1000000 >= 290);
  CHECK_HAS(tp_run_envelope(a), "\"result\":300");
  CHECK_HAS(tp_run_envelope(b), "\"result\":[5000050000,1,20]");
  tp_run_destroy(a);
  tp_run_destroy(b);
  tp_engine_destroy(e);
}

TEST(a_run_destroyed_while_its_handler_sleeps_leaves_nothing_behind) {
  tp_engine *e = tp_engine_create();
  CHECK_INT(tp_engine_load_tools(e, GOOD), 12);
  const char *src = "return tools.test.hang{}";
  tp_run *r = tp_run_create(e, src, strlen(src), NULL);
  finish_log f = { 0, 0 };
  CHECK_INT(tp_run_start(r, on_done, &f), TP_OK);
  for (int i = 0; i < 5; i++) tp_engine_poll(e, 0);
  CHECK(!f.done);
  tp_run_destroy(r);            /* the handler is mid-sleep: cancelled, timer closed */
  uint64_t t0 = tp__now_ns();
  while (tp__now_ns() - t0 < 400000000u) {
    if (!tp_engine_poll(e, 0)) break;  /* nothing pending: the timer is gone */
  }
  CHECK(tp__now_ns() - t0 < 200000000u);
  /* the engine still works */
  char *env = NULL;
  int ok = 0;
  const char *again = "return tools.test.echo{v = 2}.v";
  CHECK_INT(tp_engine_run(e, again, strlen(again), NULL, &env, &ok), TP_OK);
  CHECK(ok);
  CHECK_HAS(env, "\"result\":2");
  tp_free(env);
  tp_engine_destroy(e);
}

TEST(an_engine_destroyed_with_handlers_waiting_closes_cleanly) {
  tp_engine *e = tp_engine_create();
  CHECK_INT(tp_engine_load_tools(e, GOOD), 12);
  const char *src = "return parallel(function() return tools.test.nap{ms = 500} end, "
                    "function() return tools.test.never{} end)";
  tp_run *r = tp_run_create(e, src, strlen(src), NULL);
  CHECK_INT(tp_run_start(r, NULL, NULL), TP_OK);
  for (int i = 0; i < 5; i++) tp_engine_poll(e, 0);
  tp_engine_destroy(e);         /* destroys r too */
}

TEST(a_handler_can_complete_while_the_script_is_stepped_by_hand) {
  tp_engine *e = tp_engine_create();
  CHECK_INT(tp_engine_load_tools(e, GOOD), 12);
  const char *src = "local r = tools.test.nap{ms = 10} return r.ms + 1";
  tp_run *r = tp_run_create(e, src, strlen(src), NULL);
  int rc = tp_run_step(r, 0, 0);
  CHECK_INT(rc, TP_WAIT);
  uint64_t t0 = tp__now_ns();
  while (rc == TP_WAIT && tp__now_ns() - t0 < 2000000000u) {
    tp_engine_poll(e, 1);
    rc = tp_run_step(r, 0, 0);
  }
  CHECK_INT(rc, TP_DONE);
  CHECK_HAS(tp_run_envelope(r), "\"result\":11");
  tp_run_destroy(r);
  tp_engine_destroy(e);
}

/* Reused handler records (lua/host.lua's pool) under the sanitizers and valgrind: many
** calls that return, raise, yield on their own or leave a timer, a run destroyed with a
** record in use, and an engine destroyed with records in the pool. */
TEST(pooled_handler_records_leak_nothing_through_errors_cancels_and_engine_destroy) {
  tp_engine *e = tp_engine_create();
  CHECK_INT(tp_engine_load_tools(e, REUSE), 10);
  const char *src =
    "local n = 0\n"
    "for i = 1, 300 do\n"
    "  local p = tools.reuse.probe{dirty = i % 3 == 0, strip = i % 7 == 0}\n"
    "  if p.call_id ~= n + 1 or p.mine ~= nil then error('leaked at ' .. i) end\n"
    "  n = n + 1\n"
    "  if i % 50 == 0 then\n"
    "    local ok1 = pcall(tools.reuse.fail, {})\n"
    "    local ok2 = pcall(tools.reuse.yield, {})\n"
    "    if ok1 or ok2 then error('not failed') end\n"
    "    n = n + 2\n"
    "  end\n"
    "end\n"
    "tools.reuse.leave_timer{ms = 1}\n"
    "return tools.reuse.nap{ms = 30}.after.call_id";
  char *env = NULL;
  int ok = 0;
  tp_limits lim;
  tp_limits_init(&lim);
  lim.tool_calls = 0;
  CHECK_INT(tp_engine_run(e, src, strlen(src), &lim, &env, &ok), TP_OK);
  CHECK(ok);
  CHECK_HAS(env, "\"result\":314");
  tp_free(env);
  const char *hang = "tools.reuse.probe{} return tools.reuse.nap{ms = 5000}";
  tp_run *r = tp_run_create(e, hang, strlen(hang), NULL);
  CHECK_INT(tp_run_start(r, NULL, NULL), TP_OK);
  for (int i = 0; i < 5; i++) tp_engine_poll(e, 0);
  tp_run_destroy(r);            /* its record is cancelled, never pooled */
  tp_engine_destroy(e);         /* the pool goes with the host state */
}

/* luv's test runner fails a test that leaves a handle open; so does tp_test.h's RUN,
** from what tp_engine_destroy counts. These tests leave handles on purpose and check
** the count, then tell RUN to expect them. */
TEST(handles_a_plugin_leaves_open_are_counted_and_closed_at_destroy) {
  const char *what = NULL;
  size_t before = tp__engine_open_handles(NULL);
  tp_engine *e = tp_engine_create();
  CHECK_INT(tp_engine_load_tools(e, LEAKY), 1);
  char *env = NULL;
  int ok = 0;
  const char *src = "return tools.leaky.start_timer{}.started";
  CHECK_INT(tp_engine_run(e, src, strlen(src), NULL, &env, &ok), TP_OK);
  CHECK_INT(ok, 1);
  CHECK_HAS(env, "\"result\":true");
  tp_free(env);
  tp_engine_destroy(e);  /* a timer from the plugin's load, one from the call */
  CHECK_INT(tp__engine_open_handles(&what) - before, 2);
  CHECK_STR(what, "timer (active), timer (active)");
  TP_EXPECT_OPEN_HANDLES(2);
}

TEST(a_handle_the_program_leaves_on_the_engines_loop_is_counted) {
  static uv_timer_t t;  /* closed by tp_engine_destroy, so it must outlive e */
  const char *what = NULL;
  size_t before = tp__engine_open_handles(NULL);
  tp_engine *e = tp_engine_create();
  CHECK_INT(uv_timer_init(tp_engine_loop(e), &t), 0);
  tp_engine_destroy(e);
  CHECK_INT(tp__engine_open_handles(&what) - before, 1);
  CHECK_STR(what, "timer");
  TP_EXPECT_OPEN_HANDLES(1);
}

TEST(a_plugin_that_tracks_its_handles_leaves_none_open) {
  size_t before = tp__engine_open_handles(NULL);
  tp_engine *e = tp_engine_create();
  CHECK_INT(tp_engine_load_tools(e, GOOD), 12);
  char *env = NULL;
  const char *src = "return {tools.test.nap{ms = 5}.ms, tools.test.await{}.b}";
  CHECK_INT(tp_engine_run(e, src, strlen(src), NULL, &env, NULL), TP_OK);
  CHECK_HAS(env, "\"ok\":true");
  tp_free(env);
  tp_engine_destroy(e);
  CHECK_INT(tp__engine_open_handles(NULL) - before, 0);
}

/* A Lua plugin's result is charged to the run's host budget while it is converted, and
** its call keeps that charge (no output schema) or recharges the shaped tree (test.empty
** has one): whatever path, a session's budget is back where it was once the run is gone,
** results taken, refused (test.bad_result) or left unread. */
TEST(lua_plugin_results_give_back_their_host_budget) {
  tp_engine *e = tp_engine_create();
  CHECK_INT(tp_engine_load_tools(e, GOOD), 12);
  tp_session *s = tp_session_create(e, NULL);
  const char *src =
    "local big = string.rep('x', 500)\n"
    "for i = 1, 100 do\n"
    "  local r = tools.test.echo{s = big, n = i}\n"
    "  assert(r.n == i and #r.s == 500)\n"
    "  assert(#tools.test.empty{}.items == 0)\n"
    "  assert(not pcall(tools.test.bad_result, {}))\n"
    "  tools.test.echo{left = 'unread'}\n"
    "end\n"
    "return 1";
  tp_run *r = tp_session_run(s, src, strlen(src));
  CHECK_INT(tp__host_charge(s->sb, 100000), 0);  /* so that a refund of too much shows */
  size_t host0 = s->sb->host_used;
  CHECK_INT(tp_run_step(r, 0, 0), TP_DONE);
  CHECK(s->sb->host_used > host0);  /* the calls' records, until the run goes */
  CHECK_HAS(tp_run_envelope(r), "\"ok\":true");
  tp_run_destroy(r);
  CHECK_INT(s->sb->host_used, host0);
  tp_session_destroy(s);
  tp_engine_destroy(e);
}

typedef struct log_seen {
  int n;
  char lines[4][200];
  tp_log_level levels[4];
  char sources[4][16];
} log_seen;

static void keep_log (void *ud, tp_log_level level, const char *source, const char *msg) {
  log_seen *l = ud;
  if (l->n < 4) {
    snprintf(l->lines[l->n], sizeof l->lines[0], "%s", msg);
    snprintf(l->sources[l->n], sizeof l->sources[0], "%s", source);
    l->levels[l->n] = level;
  }
  l->n++;
}

TEST(a_plugins_print_goes_to_the_engines_logger_at_load_and_in_a_call) {
  tp_engine *e = tp_engine_create();
  log_seen l;
  memset(&l, 0, sizeof l);
  tp_engine_on_log(e, keep_log, &l);
  CHECK_INT(tp_engine_load_tools(e, "spec/fixtures/plugins/printer"), 2);
  CHECK_INT(l.n, 1);
  CHECK_STR(l.lines[0], "printer loaded\t1");
  CHECK_STR(l.sources[0], "plugin");
  CHECK_INT(l.levels[0], TP_LOG_INFO);
  const char *src = "return tools.printer.say{text = 'hi'}.said";
  char *env = NULL;
  CHECK_INT(tp_engine_run(e, src, strlen(src), NULL, &env, NULL), TP_OK);
  CHECK_HAS(env, "\"result\":\"hi\"");
  free(env);
  CHECK_INT(l.n, 2);
  CHECK_STR(l.lines[1], "say:\thi");
  tp_engine_on_log(e, NULL, NULL);  /* the default again: stderr, nothing kept here */
  env = NULL;
  CHECK_INT(tp_engine_run(e, src, strlen(src), NULL, &env, NULL), TP_OK);
  free(env);
  CHECK_INT(l.n, 2);
  tp_engine_destroy(e);
}

TEST(a_handlers_empty_table_is_an_array_where_its_output_schema_wants_one_through_ref) {
  tp_engine *e = tp_engine_create();
  tp_engine_on_log(e, keep_log, &(log_seen){ 0 });
  CHECK_INT(tp_engine_load_tools(e, "spec/fixtures/plugins/printer"), 2);
  const char *src = "return tools.printer.empty{}";
  char *env = NULL;
  CHECK_INT(tp_engine_run(e, src, strlen(src), NULL, &env, NULL), TP_OK);
  CHECK_HAS(env, "\"result\":{\"list\":[],\"more\":[]}");
  free(env);
  tp_engine_destroy(e);
}

int main (int argc, char **argv) {
  tp_test_args(argc, argv);
  RUN(load_tools_counts_the_tools_added_and_lists_each_problem);
  RUN(the_loop_stays_free_while_a_handler_waits);
  RUN(a_run_destroyed_while_its_handler_sleeps_leaves_nothing_behind);
  RUN(an_engine_destroyed_with_handlers_waiting_closes_cleanly);
  RUN(a_handler_can_complete_while_the_script_is_stepped_by_hand);
  RUN(pooled_handler_records_leak_nothing_through_errors_cancels_and_engine_destroy);
  RUN(handles_a_plugin_leaves_open_are_counted_and_closed_at_destroy);
  RUN(a_handle_the_program_leaves_on_the_engines_loop_is_counted);
  RUN(a_plugin_that_tracks_its_handles_leaves_none_open);
  RUN(lua_plugin_results_give_back_their_host_budget);
  RUN(a_plugins_print_goes_to_the_engines_logger_at_load_and_in_a_call);
  RUN(a_handlers_empty_table_is_an_array_where_its_output_schema_wants_one_through_ref);
  return tp_test_end();
}
