/*
** test_tools.c: tools registered from C (tidepool.h): synchronous and asynchronous
** completion, late completion, custom failure codes, registration errors, handler-less
** tools completed frame by frame, and sessions. No plugin directory: C tools only, so
** scripts/valgrind.sh runs it whole.
*/
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "tp_test.h"
#include "tidepool.h"
#include "engine.h"
#include "calls.h"

/* ---- handlers ------------------------------------------------------------------------- */

/* Completes at once with {"sum": a + b}. */
static void add_sync (tp_call *c, void *ud) {
  (void)ud;
  const char *args = tp_call_args(c);
  long long a = 0, b = 0;
  const char *pa = strstr(args, "\"a\":"), *pb = strstr(args, "\"b\":");
  if (pa) a = strtoll(pa + 4, NULL, 10);
  if (pb) b = strtoll(pb + 4, NULL, 10);
  char out[64];
  snprintf(out, sizeof out, "{\"sum\":%lld}", a + b);
  tp_call_complete(c, out, 0);
}

/* Completes from a uv timer on the engine's loop, after ud's milliseconds. */
typedef struct later { uv_timer_t t; tp_call *call; int rc; } later;

static void later_closed (uv_handle_t *h) { free(h); }

static void later_fire (uv_timer_t *t) {
  later *l = (later *)t;
  char out[64];
  snprintf(out, sizeof out, "{\"id\":%llu}", (unsigned long long)tp_call_id(l->call));
  tp_call_complete(l->call, out, 0);
  uv_close((uv_handle_t *)t, later_closed);
}

static void async_timer (tp_call *c, void *ud) {
  later *l = calloc(1, sizeof *l);
  l->call = c;
  uv_timer_init((uv_loop_t *)tp__engine_loop(c->run->e), &l->t);
  uv_timer_start(&l->t, later_fire, (uint64_t)(uintptr_t)ud, 0);
}

/* Keeps the call for the test to complete (or fail) later. */
typedef struct kept { tp_call *calls[16]; int n; } kept;

static void keep (tp_call *c, void *ud) {
  kept *k = ud;
  if (k->n < 16) k->calls[k->n++] = c;
}

/* Fails with the code and message in its arguments' "code" and "msg" fields. */
static void fail_with (tp_call *c, void *ud) {
  (void)ud;
  const char *args = tp_call_args(c);
  char code[64] = "", msg[64] = "";
  const char *p = strstr(args, "\"code\":\"");
  if (p) sscanf(p + 8, "%63[^\"]", code);
  p = strstr(args, "\"msg\":\"");
  if (p) sscanf(p + 7, "%63[^\"]", msg);
  tp_call_fail(c, code[0] ? code : NULL, msg[0] ? msg : NULL);
}

/* Returns ud (a JSON text) as its result. */
static void returns (tp_call *c, void *ud) { tp_call_complete(c, ud, 0); }

/* ---- helpers -------------------------------------------------------------------------- */

static int add (tp_engine *e, const char *name, const char *in, const char *out,
                tp_tool_fn fn, void *ud, uint64_t timeout_us) {
  tp_tool_def d = { .name = name, .description = "a test tool", .input_schema = in,
                    .output_schema = out, .handler = fn, .ud = ud, .timeout_us = timeout_us };
  return tp_engine_add_tool(e, &d);
}

/* Runs src synchronously; returns the envelope (caller frees). */
static char *run (tp_engine *e, const char *src, const tp_limits *lim) {
  char *env = NULL;
  int ok = 0;
  if (tp_engine_run(e, src, strlen(src), lim, &env, &ok) != TP_OK) return NULL;
  return env;
}

#define ADD_SCHEMA "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}," \
                   "\"b\":{\"type\":\"integer\"}},\"required\":[\"a\",\"b\"]}"

static tp_engine *engine_with_add (void) {
  tp_engine *e = tp_engine_create();
  add(e, "math.add", ADD_SCHEMA, "{\"type\":\"object\",\"required\":[\"sum\"]}", add_sync,
      NULL, 0);
  return e;
}

/* ---- tests ---------------------------------------------------------------------------- */

TEST(a_c_tool_completing_synchronously_returns_its_result) {
  tp_engine *e = engine_with_add();
  char *env = run(e, "return tools.math.add{a = 40, b = 2}.sum", NULL);
  CHECK_HAS(env, "\"ok\":true");
  CHECK_HAS(env, "\"result\":42");
  CHECK_HAS(env, "\"calls\":[{\"tool\":\"math.add\",\"ok\":true,");
  CHECK_HAS(env, "\"bytes_in\":14,\"bytes_out\":10,\"line\":1}");
  tp_free(env);
  env = run(e, "local ok, e = pcall(tools.math.add, {a = 1}) return e.message", NULL);
  CHECK_HAS(env, "\"result\":\"tools.math.add: invalid arguments: $: missing required "
                 "property \\\"b\\\"");
  tp_free(env);
  tp_engine_destroy(e);
}

TEST(a_c_tool_completing_from_a_uv_timer_on_the_engine_loop) {
  tp_engine *e = tp_engine_create();
  CHECK_INT(add(e, "slow.id", NULL, NULL, async_timer, (void *)(uintptr_t)500, 0), TP_OK);
  uint64_t t0 = tp__now_ns();
  char *env = run(e, "local a, b = parallel(function() return tools.slow.id{}.id end, "
                     "function() return tools.slow.id{}.id end) return {a, b}", NULL);
  uint64_t ms = (tp__now_ns() - t0) / 1000000;
  CHECK_HAS(env, "\"ok\":true");
  CHECK_HAS(env, "\"result\":[1,2]");
  /* both timers ran at once: one after the other would take 1000 ms; the margin is for a
  ** loaded machine and valgrind */
  CHECK(ms >= 499 && ms < 950);
  tp_free(env);
  tp_engine_destroy(e);
}

static void on_done (tp_run *r, void *ud) { (void)r; *(int *)ud = 1; }

TEST(a_started_run_with_async_c_tools_finishes_through_engine_poll) {
  tp_engine *e = tp_engine_create();
  add(e, "slow.id", NULL, NULL, async_timer, (void *)(uintptr_t)5, 0);
  const char *src = "local s = 0 for i = 1, 3 do s = s + tools.slow.id{}.id end return s";
  tp_run *r = tp_run_create(e, src, strlen(src), NULL);
  int done = 0;
  CHECK_INT(tp_run_start(r, on_done, &done), TP_OK);
  uint64_t t0 = tp__now_ns();
  while (!done && tp__now_ns() - t0 < 2000000000u) tp_engine_poll(e, 1);
  CHECK(done);
  CHECK_HAS(tp_run_envelope(r), "\"result\":6");
  tp_run_destroy(r);
  tp_engine_destroy(e);
}

TEST(a_late_completion_after_a_timeout_returns_estate_and_frees_the_call) {
  tp_engine *e = tp_engine_create();
  kept k = { { 0 }, 0 };
  CHECK_INT(add(e, "slow.never", NULL, NULL, keep, &k, 20000), TP_OK);  /* 20 ms */
  char *env = run(e, "local ok, e = pcall(tools.slow.never, {}) "
                     "local ok2, e2 = pcall(tools.slow.never, {}) return {e.code, e2.code}",
                  NULL);
  CHECK_HAS(env, "\"result\":[\"tool.timeout\",\"tool.timeout\"]");
  CHECK_HAS(env, "\"error\":\"tool.timeout\"");
  tp_free(env);
  CHECK_INT(k.n, 2);
  CHECK(tp_call_cancelled(k.calls[0]));
  /* the run is gone: the calls stay valid until their handler completes them */
  CHECK_STR(tp_call_tool(k.calls[0]), "slow.never");
  CHECK_INT(tp_call_complete(k.calls[0], "{\"late\":true}", 0), TP_ESTATE);
  CHECK_INT(tp_call_fail(k.calls[1], "tool.failed", "too late"), TP_ESTATE);
  tp_engine_destroy(e);
}

TEST(a_late_completion_while_the_run_is_alive_is_ignored) {
  tp_engine *e = tp_engine_create();
  kept k = { { 0 }, 0 };
  add(e, "slow.never", NULL, NULL, keep, &k, 10000);  /* 10 ms */
  add(e, "math.add", ADD_SCHEMA, NULL, add_sync, NULL, 0);
  const char *src = "local ok, e = pcall(tools.slow.never, {}) "
                    "return {e.code, tools.math.add{a = 1, b = 1}.sum}";
  tp_run *r = tp_run_create(e, src, strlen(src), NULL);
  int rc = tp_run_step(r, 0, 0);
  CHECK_INT(rc, TP_WAIT);
  uint64_t t0 = tp__now_ns();
  while (rc == TP_WAIT && tp__now_ns() - t0 < 2000000000u) {
    tp_engine_poll(e, 1);
    rc = tp_run_step(r, 0, 0);
  }
  CHECK_INT(rc, TP_DONE);
  CHECK_HAS(tp_run_envelope(r), "\"result\":[\"tool.timeout\",2]");
  CHECK_INT(k.n, 1);
  CHECK_INT(tp_call_complete(k.calls[0], "{}", 0), TP_ESTATE);  /* run alive, call done */
  tp_run_destroy(r);
  tp_engine_destroy(e);
}

TEST(tp_call_fail_with_a_custom_tool_code_reaches_the_script) {
  tp_engine *e = tp_engine_create();
  add(e, "svc.act", NULL, NULL, fail_with, NULL, 0);
  char *env = run(e, "local ok, e = pcall(tools.svc.act, {code = 'tool.rate_limited', "
                     "msg = 'slow down'}) return {e.code, e.message, e.tool, tostring(e)}",
                  NULL);
  CHECK_HAS(env, "\"result\":[\"tool.rate_limited\",\"tools.svc.act was rate-limited: slow down\","
                 "\"svc.act\",\"tool.rate_limited: tools.svc.act was rate-limited: slow down\"]");
  tp_free(env);
  /* not a tool.* code, or none: tool.failed; no message: a default one */
  env = run(e, "local _, a = pcall(tools.svc.act, {code = 'limit.memory', msg = 'x'}) "
               "local _, b = pcall(tools.svc.act, {}) return {a.code, b.code, b.message}", NULL);
  CHECK_HAS(env, "\"result\":[\"tool.failed\",\"tool.failed\",\"tools.svc.act failed: "
                 "no reason given\"]");
  tp_free(env);
  env = run(e, "local x = 1\nreturn tools.svc.act{code = 'tool.denied', msg = 'no'}", NULL);
  CHECK_HAS(env, "\"code\":\"tool.denied\"");
  CHECK_HAS(env, "\"line\":2");
  tp_free(env);
  tp_engine_destroy(e);
}

TEST(a_c_result_that_is_not_json_or_breaks_the_output_schema_is_invalid_output) {
  tp_engine *e = tp_engine_create();
  static char not_json[] = "{not json", array[] = "[1]",
              long_string[] = "\"0123456789012345678901234567890123456789\"";
  add(e, "bad.text", NULL, NULL, returns, not_json, 0);
  add(e, "bad.shape", NULL, "{\"type\":\"object\",\"required\":[\"n\"]}", returns, array, 0);
  add(e, "big.one", NULL, NULL, returns, long_string, 0);
  tp_limits lim;
  tp_limits_init(&lim);
  lim.tool_bytes = 32;
  char *env = run(e, "local _, a = pcall(tools.bad.text, {}) "
                     "local _, b = pcall(tools.bad.shape, {}) "
                     "local _, c = pcall(tools.big.one, {}) "
                     "return {a.code, b.code, c.code, b.message, c.message}", &lim);
  CHECK_HAS(env, "\"result\":[\"tool.invalid_output\",\"tool.invalid_output\","
                 "\"tool.invalid_output\",\"tools.bad.shape returned a result that does not "
                 "match its output schema: $: expected object, got array");
  CHECK_HAS(env, "tools.big.one returned 42 bytes of JSON, over the 32-byte limit of a "
                 "tool result");
  tp_free(env);
  tp_engine_destroy(e);
}

TEST(registration_errors_say_why_in_tp_engine_error) {
  tp_engine *e = tp_engine_create();
  CHECK_INT(add(e, "1abc", NULL, NULL, add_sync, NULL, 0), TP_EINVAL);
  CHECK_STR(tp_engine_error(e), "tool \"1abc\": bad name: each dotted part must start with a "
                                "letter or '_'");
  CHECK_INT(add(e, "a..b", NULL, NULL, add_sync, NULL, 0), TP_EINVAL);
  CHECK_HAS(tp_engine_error(e), "bad name");
  CHECK_INT(add(e, "a-b", NULL, NULL, add_sync, NULL, 0), TP_EINVAL);
  CHECK_STR(tp_engine_error(e), "tool \"a-b\": bad name: only letters, digits, '_' and '.' "
                                "are allowed");
  CHECK_INT(add(e, "", NULL, NULL, add_sync, NULL, 0), TP_EINVAL);
  CHECK_STR(tp_engine_error(e), "tool \"\": bad name: the name is empty");
  CHECK_INT(add(e, "list.all", NULL, NULL, add_sync, NULL, 0), TP_OK);  /* not reserved */
  CHECK_INT(add(e, "ok.one", NULL, NULL, add_sync, NULL, 0), TP_OK);
  CHECK_INT(add(e, "ok.one", NULL, NULL, add_sync, NULL, 0), TP_EINVAL);
  CHECK_STR(tp_engine_error(e), "tool ok.one: a tool of that name is registered already");
  CHECK_INT(add(e, "ok.two", "{\"type\":", NULL, add_sync, NULL, 0), TP_EINVAL);
  CHECK_HAS(tp_engine_error(e), "tool ok.two: the input schema is not JSON: ");
  CHECK_INT(add(e, "ok.two", NULL, "{]", add_sync, NULL, 0), TP_EINVAL);
  CHECK_HAS(tp_engine_error(e), "tool ok.two: the output schema is not JSON: ");
  CHECK_INT(add(e, "ok.two", "{\"type\":\"object\",\"properties\":{\"s\":{\"pattern\":\"(\"}}}",
                NULL, add_sync, NULL, 0), TP_EINVAL);
  CHECK_HAS(tp_engine_error(e), "tool ok.two: bad input schema: ");
  CHECK_INT(add(e, "ok.two", NULL, "{\"type\":5}", add_sync, NULL, 0), TP_EINVAL);
  CHECK_HAS(tp_engine_error(e), "tool ok.two: bad output schema: ");
  CHECK_INT(add(e, "ok.two", "[1]", NULL, add_sync, NULL, 0), TP_EINVAL);
  CHECK_STR(tp_engine_error(e), "tool ok.two: the input schema must be an object");
  /* none of the failures registered anything */
  char *env = run(e, "return tools.list()", NULL);
  CHECK_HAS(env, "\"result\":[\"list.all\",\"ok.one\"]");
  tp_free(env);
  tp_engine_destroy(e);
}

TEST(handlerless_tools_are_completed_frame_by_frame_with_run_pending) {
  tp_engine *e = tp_engine_create();
  CHECK_INT(add(e, "game.move", "{\"type\":\"object\",\"required\":[\"to\"]}", NULL, NULL, NULL,
                0), TP_OK);
  const char *src =
    "local a, b, c = parallel(function() return tools.game.move{to = 'a'}.at end,\n"
    "  function() return tools.game.move{to = 'b'}.at end,\n"
    "  function() return tools.game.move{to = 'c'}.at end)\n"
    "return {a, b, c, tools.game.move{to = 'd'}.at}";
  tp_run *r = tp_run_create(e, src, strlen(src), NULL);
  tp_call *pend[8];
  CHECK_INT(tp_run_pending(r, pend, 8), 0);
  CHECK_INT(tp_run_step(r, 1000, 0), TP_WAIT);
  CHECK_INT(tp_run_pending(r, pend, 8), 3);        /* all three at once */
  CHECK_INT(tp_run_pending(r, pend, 2), 2);        /* at most max */
  tp_run_pending(r, pend, 8);
  CHECK_STR(tp_call_tool(pend[0]), "game.move");
  CHECK_STR(tp_call_args(pend[0]), "{\"to\":\"a\"}");
  CHECK_STR(tp_call_args(pend[2]), "{\"to\":\"c\"}");
  CHECK_INT(tp_call_id(pend[0]), 1);
  CHECK_INT(tp_call_id(pend[2]), 3);
  CHECK(!tp_call_cancelled(pend[0]));
  /* one completion per frame, out of order */
  CHECK_INT(tp_call_complete(pend[1], "{\"at\":\"B\"}", 0), TP_OK);
  CHECK_INT(tp_call_complete(pend[1], "{\"at\":\"again\"}", 0), TP_ESTATE);
  CHECK_INT(tp_run_step(r, 1000, 0), TP_WAIT);
  CHECK_INT(tp_run_pending(r, pend, 8), 2);
  CHECK_STR(tp_call_args(pend[0]), "{\"to\":\"a\"}");
  CHECK_INT(tp_call_complete(pend[0], "{\"at\":\"A\"}", 0), TP_OK);
  CHECK_INT(tp_run_step(r, 1000, 0), TP_WAIT);
  CHECK_INT(tp_run_pending(r, pend, 8), 1);
  CHECK_INT(tp_call_complete(pend[0], "{\"at\":\"C\"}", 0), TP_OK);
  CHECK_INT(tp_run_step(r, 1000, 0), TP_WAIT);     /* now the fourth call */
  CHECK_INT(tp_run_pending(r, pend, 8), 1);
  CHECK_STR(tp_call_args(pend[0]), "{\"to\":\"d\"}");
  CHECK_INT(tp_call_id(pend[0]), 4);
  CHECK_INT(tp_call_fail(pend[0], "tool.denied", "blocked"), TP_OK);
  CHECK_INT(tp_run_step(r, 1000, 0), TP_DONE);
  CHECK_HAS(tp_run_envelope(r), "\"code\":\"tool.denied\"");
  CHECK_HAS(tp_run_envelope(r), "\"line\":4");
  CHECK_INT(tp_run_step(r, 1000, 0), TP_ESTATE);
  tp_run_destroy(r);
  tp_engine_destroy(e);
}

TEST(pending_calls_of_a_cancelled_run_are_listed_cancelled_and_refuse_completion) {
  tp_engine *e = tp_engine_create();
  add(e, "game.wait", NULL, NULL, NULL, NULL, 0);
  const char *src = "return tools.game.wait{}";
  tp_run *r = tp_run_create(e, src, strlen(src), NULL);
  CHECK_INT(tp_run_step(r, 0, 0), TP_WAIT);
  tp_call *pend[2];
  CHECK_INT(tp_run_pending(r, pend, 2), 1);
  tp_run_cancel(r);
  CHECK(tp_run_done(r));
  CHECK_HAS(tp_run_envelope(r), "\"code\":\"cancelled\"");
  CHECK_HAS(tp_run_envelope(r), "\"calls\":[{\"tool\":\"game.wait\",\"ok\":false,"
                                "\"error\":\"cancelled\"");
  CHECK_INT(tp_run_pending(r, pend, 2), 0);
  CHECK(tp_call_cancelled(pend[0]));
  CHECK_INT(tp_call_complete(pend[0], "{}", 0), TP_ESTATE);
  tp_run_destroy(r);
  tp_engine_destroy(e);
}

TEST(a_session_keeps_globals_and_refuses_a_second_live_run) {
  tp_engine *e = tp_engine_create();
  add(e, "math.add", ADD_SCHEMA, NULL, add_sync, NULL, 0);
  tp_session *s = tp_session_create(e, NULL);
  CHECK(s != NULL);
  const char *one = "total = tools.math.add{a = 2, b = 3}.sum return total";
  tp_run *r = tp_session_run(s, one, strlen(one));
  CHECK(r != NULL);
  CHECK(tp_session_run(s, one, strlen(one)) == NULL);   /* r is alive */
  CHECK_INT(tp_run_step(r, 0, 0), TP_DONE);
  CHECK(tp_session_run(s, one, strlen(one)) == NULL);   /* done but not destroyed */
  CHECK_HAS(tp_run_envelope(r), "\"result\":5");
  tp_run_destroy(r);
  const char *two = "return tools.math.add{a = total, b = 10}.sum";
  r = tp_session_run(s, two, strlen(two));
  CHECK(r != NULL);
  CHECK_INT(tp_run_step(r, 0, 0), TP_DONE);
  CHECK_HAS(tp_run_envelope(r), "\"result\":15");
  CHECK_HAS(tp_run_envelope(r), "\"calls\":[{\"tool\":\"math.add\",\"ok\":true");
  tp_run_destroy(r);
  CHECK(tp_session_memory(s) > 0);
  tp_session_destroy(s);
  tp_engine_destroy(e);
}

TEST(a_session_run_waiting_on_a_handlerless_tool) {
  tp_engine *e = tp_engine_create();
  add(e, "game.ask", NULL, NULL, NULL, NULL, 0);
  tp_session *s = tp_session_create(e, NULL);
  const char *src = "answer = tools.game.ask{q = 'x'}.a return answer";
  tp_run *r = tp_session_run(s, src, strlen(src));
  CHECK_INT(tp_run_step(r, 0, 0), TP_WAIT);
  tp_call *c;
  CHECK_INT(tp_run_pending(r, &c, 1), 1);
  CHECK_INT(tp_call_complete(c, "{\"a\":7}", 0), TP_OK);
  CHECK_INT(tp_run_step(r, 0, 0), TP_DONE);
  tp_run_destroy(r);
  const char *again = "return answer * 6";
  r = tp_session_run(s, again, strlen(again));
  CHECK_INT(tp_run_step(r, 0, 0), TP_DONE);
  CHECK_HAS(tp_run_envelope(r), "\"result\":42");
  tp_run_destroy(r);
  tp_session_destroy(s);
  tp_engine_destroy(e);
}

/* 300 calls of a handlerless tool, 30 at a time in a parallel, completed by the embedder
** in reverse order (every 7th one failed): the run lets go of the calls past the listed
** ones as the script takes them, out of order, and the envelope ends with their exact
** summary. A session's host budget is back where it was once the run is gone. */
TEST(calls_completed_out_of_order_past_the_listed_ones_end_in_an_exact_summary) {
  tp_engine *e = tp_engine_create();
  add(e, "game.ask", NULL, NULL, NULL, NULL, 0);
  tp_session *s = tp_session_create(e, NULL);
  const char *src =
    "local n = 0\n"
    "for round = 1, 10 do\n"
    "  local fs = {}\n"
    "  for i = 1, 30 do fs[i] = function()\n"
    "    local ok, r = pcall(tools.game.ask, {i = i}) if ok then n = n + r.a end end end\n"
    "  parallel(table.unpack(fs))\n"
    "end\n"
    "return n";
  tp_run *r = tp_session_run(s, src, strlen(src));
  size_t host0 = s->sb->host_used;
  int done = 0, failed = 0, failed_late = 0, sum = 0, rc;
  while ((rc = tp_run_step(r, 0, 0)) == TP_WAIT) {
    tp_call *pend[64];
    size_t n = tp_run_pending(r, pend, 64);
    CHECK_INT(n, 30);
    if (n != 30) break;
    for (size_t k = n; k-- > 0;) {
      done++;
      if (done % 7 == 0) {
        CHECK_INT(tp_call_fail(pend[k], "tool.denied", "no"), TP_OK);
        failed++;
        failed_late += done > 100;
      }
      else {
        CHECK_INT(tp_call_complete(pend[k], "{\"a\":1}", 0), TP_OK);
        sum++;
      }
    }
  }
  CHECK_INT(rc, TP_DONE);
  CHECK_INT(done, 300);
  const char *env = tp_run_envelope(r);
  char want[160];
  snprintf(want, sizeof want, "\"result\":%d,", sum);
  CHECK_HAS(env, want);
  snprintf(want, sizeof want, ",{\"summary\":true,\"calls\":200,\"failed\":%d,"
           "\"by_tool\":{\"game.ask\":200}}],", failed_late);
  CHECK_HAS(env, want);
  CHECK_INT(failed - failed_late, 14);  /* the 100 listed: 7, 14, ..., 98 */
  tp_run_destroy(r);
  CHECK_INT(s->sb->host_used, host0);
  tp_session_destroy(s);
  tp_engine_destroy(e);
}

/* What a session's run charged to the host budget (its logs, its call records) is given
** back: the calls when the run is destroyed, the logs when the next run starts. */
/* The first verdict keeps its words: a later limit (a tool-call limit after a memory
** kill) neither takes over the code nor rewrites the message. */
TEST(a_later_verdict_does_not_rewrite_the_first_ones_message) {
  tp_limits l;
  tp_limits_init(&l);
  tp_sandbox *sb = tp__sandbox_create(&l);
  CHECK(sb != NULL);
  if (sb == NULL) return;
  CHECK_INT(tp__sandbox_kill_note(sb, TP_KILL_MEMORY, "first: %d", 1), 1);
  CHECK_INT(tp__sandbox_kill_note(sb, TP_KILL_TOOL_CALLS, "second: %d", 2), 0);
  CHECK_INT(atomic_load(&sb->kill), TP_KILL_MEMORY);
  char msg[256];
  tp__kill_message(sb, TP_KILL_MEMORY, msg, sizeof msg);
  CHECK_STR(msg, "first: 1");
  tp__sandbox_destroy(sb);
}

TEST(a_session_gives_back_the_host_budget_of_its_logs_and_calls) {
  tp_engine *e = engine_with_add();
  tp_session *s = tp_session_create(e, NULL);
  const char *src = "for i = 1, 300 do print(i) tools.math.add{a = i, b = 1} end return 1";
  tp_run *r = tp_session_run(s, src, strlen(src));
  size_t host0 = s->sb->host_used;
  CHECK_INT(tp_run_step(r, 0, 0), TP_DONE);
  CHECK(s->sb->host_used > host0 + 300 * 96);  /* 300 log entries at least */
  tp_run_destroy(r);
  const char *again = "return 2";
  r = tp_session_run(s, again, strlen(again));
  CHECK_INT(s->sb->host_used, host0);
  CHECK_INT(tp_run_step(r, 0, 0), TP_DONE);
  tp_run_destroy(r);
  tp_session_destroy(s);
  tp_engine_destroy(e);
}

int main (int argc, char **argv) {
  tp_test_args(argc, argv);
  RUN(a_c_tool_completing_synchronously_returns_its_result);
  RUN(a_c_tool_completing_from_a_uv_timer_on_the_engine_loop);
  RUN(a_started_run_with_async_c_tools_finishes_through_engine_poll);
  RUN(a_late_completion_after_a_timeout_returns_estate_and_frees_the_call);
  RUN(a_late_completion_while_the_run_is_alive_is_ignored);
  RUN(tp_call_fail_with_a_custom_tool_code_reaches_the_script);
  RUN(a_c_result_that_is_not_json_or_breaks_the_output_schema_is_invalid_output);
  RUN(registration_errors_say_why_in_tp_engine_error);
  RUN(handlerless_tools_are_completed_frame_by_frame_with_run_pending);
  RUN(pending_calls_of_a_cancelled_run_are_listed_cancelled_and_refuse_completion);
  RUN(a_session_keeps_globals_and_refuses_a_second_live_run);
  RUN(a_session_run_waiting_on_a_handlerless_tool);
  RUN(calls_completed_out_of_order_past_the_listed_ones_end_in_an_exact_summary);
  RUN(a_session_gives_back_the_host_budget_of_its_logs_and_calls);
  RUN(a_later_verdict_does_not_rewrite_the_first_ones_message);
  return tp_test_end();
}
