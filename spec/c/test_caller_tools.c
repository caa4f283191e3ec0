/*
** test_caller_tools.c: caller tools through the C API (docs/caller-tools.md): tools a
** run or a session declares, answered by a callback (live) or by the program through
** tp_run_pending (paused); tools like the others (schemas, discovery, policy, limits,
** the calls trace), and seen by no other run.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tidepool.h"
#include "tp_test.h"

#define WEATHER "[{\"name\": \"weather\", \"description\": \"Current weather for a city.\", " \
  "\"inputSchema\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, " \
  "\"required\": [\"city\"]}, \"outputSchema\": {\"type\": \"object\", \"properties\": " \
  "{\"temp_c\": {\"type\": \"number\"}}, \"required\": [\"temp_c\"]}}]"

/* What the caller's callback saw, and how it answers: mode 0 a result from the city,
** 1 fails with code/message, 2 keeps the call (answers later, or never), 3 a result that
** breaks the output schema. */
typedef struct caller {
  int n, mode, cancelled;
  tp_call *kept[8];
  char args[8][128];
  const char *code, *message;
} caller;

static void on_call (tp_call *c, void *ud) {
  caller *k = ud;
  if (k->n < 8) snprintf(k->args[k->n], sizeof k->args[0], "%s", tp_call_args(c));
  if (k->n < 8) k->kept[k->n] = c;
  k->n++;
  if (k->mode == 0) {
    const char *a = tp_call_args(c);
    CHECK_INT(tp_call_complete(c, strstr(a, "Oslo") ? "{\"temp_c\":-3}" : "{\"temp_c\":21}",
                               0), TP_OK);
  }
  else if (k->mode == 1) CHECK_INT(tp_call_fail(c, k->code, k->message), TP_OK);
  else if (k->mode == 3) CHECK_INT(tp_call_complete(c, "{\"temp\":\"warm\"}", 0), TP_OK);
}

static void on_cancel (tp_call *c, void *ud) {
  caller *k = ud;
  k->cancelled++;
  CHECK(tp_call_cancelled(c));
}

static char *run_to_end (tp_engine *e, tp_run *r) {
  int rc;
  while ((rc = tp_run_step(r, 0, 0)) != TP_DONE) {
    if (rc < 0) break;
    tp_engine_poll(e, rc == TP_WAIT);
  }
  char *env = tp_run_envelope(r) ? strdup(tp_run_envelope(r)) : NULL;
  tp_run_destroy(r);
  return env;
}

static char *run_with (tp_engine *e, const char *src, caller *k, const tp_limits *l) {
  tp_run *r = tp_run_create(e, src, strlen(src), l);
  CHECK(r != NULL);
  CHECK_INT(tp_run_declare_caller_tools(r, WEATHER, 0, on_call, on_cancel, k), TP_OK);
  return run_to_end(e, r);
}

TEST(a_live_caller_tool_answers_the_script_through_the_callback) {
  tp_engine *e = tp_engine_create();
  caller k = { 0 };
  char *env = run_with(e, "local a = tools.weather{city = 'Paris'} "
                          "local b = tools.weather{city = 'Oslo'} return {a.temp_c, b.temp_c}",
                       &k, NULL);
  CHECK_HAS(env, "\"ok\":true,\"result\":[21,-3]");
  CHECK_HAS(env, "\"calls\":[{\"tool\":\"weather\",\"ok\":true");
  CHECK_INT(k.n, 2);
  CHECK_STR(k.args[0], "{\"city\":\"Paris\"}");
  CHECK_STR(k.args[1], "{\"city\":\"Oslo\"}");
  free(env);
  tp_engine_destroy(e);
}

TEST(an_error_answer_reaches_the_script_with_the_callers_code_and_message) {
  tp_engine *e = tp_engine_create();
  caller k = { 0 };
  k.mode = 1;
  k.message = "no such city";
  char *env = run_with(e, "local ok, err = pcall(tools.weather, {city = 'Atlantis'}) "
                          "return err.code .. ' | ' .. err.message", &k, NULL);
  CHECK_HAS(env, "\"result\":\"tool.failed | tools.weather failed: no such city\"");
  free(env);
  k.n = 0;
  k.code = "tool.denied";
  k.message = "the user said no";
  env = run_with(e, "local ok, err = pcall(tools.weather, {city = 'Atlantis'}) "
                    "return err.code", &k, NULL);
  CHECK_HAS(env, "\"result\":\"tool.denied\"");
  free(env);
  tp_engine_destroy(e);
}

TEST(arguments_and_results_are_checked_against_the_declared_schemas) {
  tp_engine *e = tp_engine_create();
  caller k = { 0 };
  char *env = run_with(e, "local ok, err = pcall(tools.weather, {town = 'Paris'}) "
                          "return err.code .. ' | ' .. err.message", &k, NULL);
  CHECK_HAS(env, "\"result\":\"tool.invalid_input | tools.weather: invalid arguments:");
  CHECK_HAS(env, "city");
  CHECK_INT(k.n, 0);  /* the caller never saw it */
  free(env);
  k.mode = 3;
  env = run_with(e, "local ok, err = pcall(tools.weather, {city = 'Paris'}) return err.code",
                 &k, NULL);
  CHECK_HAS(env, "\"result\":\"tool.invalid_output\"");
  CHECK_INT(k.n, 1);
  free(env);
  tp_engine_destroy(e);
}

TEST(caller_tools_are_listed_described_and_searched_in_their_run_only) {
  tp_engine *e = tp_engine_create();
  tp_tool_def d = { 0 };
  d.name = "clock.now";
  d.description = "The time.";
  CHECK_INT(tp_engine_add_tool(e, &d), TP_OK);
  caller k = { 0 };
  char *env = run_with(e, "return {table.concat(tools.list(), ','), "
                          "tools.describe('weather'), tools.search('weather')[1].name}",
                       &k, NULL);
  CHECK_HAS(env, "\"result\":[\"clock.now,weather\",\"");
  CHECK_HAS(env, "Current weather for a city.");
  CHECK_HAS(env, "weather{city: string} -> {temp_c: number}");
  CHECK_HAS(env, "\"weather\"]");
  free(env);
  /* another run of the same engine knows nothing of it */
  const char *src = "return table.concat(tools.list(), ',')";
  tp_run *r = tp_run_create(e, src, strlen(src), NULL);
  env = run_to_end(e, r);
  CHECK_HAS(env, "\"result\":\"clock.now\"");
  free(env);
  src = "return tools.weather{city = 'x'}";
  r = tp_run_create(e, src, strlen(src), NULL);
  env = run_to_end(e, r);
  CHECK_HAS(env, "\"code\":\"tool.unknown\"");
  free(env);
  tp_engine_destroy(e);
}

TEST(a_call_written_out_is_not_unknown_once_the_tool_is_declared) {
  tp_engine *e = tp_engine_create();
  caller k = { 0 };
  /* the pre-run check at tp_run_create does not know the tool yet; the declaration
  ** checks again */
  char *env = run_with(e, "return tools.weather{city = 'Paris'}.temp_c", &k, NULL);
  CHECK_HAS(env, "\"ok\":true,\"result\":21");
  free(env);
  /* a field the schema requires is still missing, found before anything runs */
  env = run_with(e, "return tools.weather{}.temp_c", &k, NULL);
  CHECK_HAS(env, "\"code\":\"tool.invalid_input\"");
  CHECK_HAS(env, "\"precheck\":true");
  free(env);
  tp_engine_destroy(e);
}

TEST(paused_without_a_handler_the_calls_wait_in_tp_run_pending_together) {
  tp_engine *e = tp_engine_create();
  const char *src = "local a, b = parallel(function() return tools.weather{city = 'A'} end, "
                    "function() return tools.weather{city = 'B'} end) "
                    "return a.temp_c + b.temp_c";
  tp_run *r = tp_run_create(e, src, strlen(src), NULL);
  CHECK_INT(tp_run_declare_caller_tools(r, WEATHER, 0, NULL, NULL, NULL), TP_OK);
  int rc;
  while ((rc = tp_run_step(r, 0, 0)) == TP_YIELD) {}
  CHECK_INT(rc, TP_WAIT);
  tp_call *p[4];
  CHECK_INT(tp_run_pending(r, p, 4), 2);
  CHECK_STR(tp_call_tool(p[0]), "weather");
  CHECK_STR(tp_call_args(p[0]), "{\"city\":\"A\"}");
  CHECK_STR(tp_call_args(p[1]), "{\"city\":\"B\"}");
  CHECK_INT((int)tp_call_id(p[0]), 1);
  CHECK_INT((int)tp_call_id(p[1]), 2);
  CHECK_INT(tp_call_complete(p[1], "{\"temp_c\":2}", 0), TP_OK);
  CHECK_INT(tp_call_complete(p[0], "{\"temp_c\":40}", 0), TP_OK);
  while ((rc = tp_run_step(r, 0, 0)) == TP_YIELD) {}
  CHECK_INT(rc, TP_DONE);
  CHECK_HAS(tp_run_envelope(r), "\"ok\":true,\"result\":42");
  tp_run_destroy(r);
  tp_engine_destroy(e);
}

TEST(the_wait_counts_against_the_calls_timeout_and_the_caller_hears_of_it) {
  tp_engine *e = tp_engine_create();
  caller k = { 0 };
  k.mode = 2;
  const char *decl = "[{\"name\": \"slow\", \"timeoutMs\": 500}]";
  const char *src = "local ok, err = pcall(tools.slow, {}) return err.code";
  tp_run *r = tp_run_create(e, src, strlen(src), NULL);
  CHECK_INT(tp_run_declare_caller_tools(r, decl, 0, on_call, on_cancel, &k), TP_OK);
  char *env = run_to_end(e, r);
  CHECK_HAS(env, "\"result\":\"tool.timeout\"");
  CHECK_INT(k.n, 1);
  CHECK_INT(k.cancelled, 1);
  /* the caller answers late: the answer is dropped, the call let go */
  CHECK_INT(tp_call_complete(k.kept[0], "{}", 0), TP_ESTATE);
  free(env);
  tp_engine_destroy(e);
}

TEST(a_run_cancelled_while_the_caller_has_a_call_tells_the_caller) {
  tp_engine *e = tp_engine_create();
  caller k = { 0 };
  k.mode = 2;
  const char *src = "return tools.weather{city = 'Paris'}";
  tp_run *r = tp_run_create(e, src, strlen(src), NULL);
  CHECK_INT(tp_run_declare_caller_tools(r, WEATHER, 0, on_call, on_cancel, &k), TP_OK);
  int rc;
  while ((rc = tp_run_step(r, 0, 0)) == TP_YIELD) {}
  CHECK_INT(rc, TP_WAIT);
  CHECK_INT(k.n, 1);
  tp_run_cancel(r);
  CHECK_INT(k.cancelled, 1);
  CHECK(tp_run_done(r));
  CHECK_HAS(tp_run_envelope(r), "\"code\":\"cancelled\"");
  tp_run_destroy(r);
  CHECK_INT(tp_call_fail(k.kept[0], NULL, "late"), TP_ESTATE);  /* lets go of it */
  tp_engine_destroy(e);
}

TEST(declarations_are_refused_with_a_reason) {
  tp_engine *e = tp_engine_create();
  tp_tool_def d = { 0 };
  d.name = "clock.now";
  CHECK_INT(tp_engine_add_tool(e, &d), TP_OK);
  const char *src = "return 1";
  tp_run *r = tp_run_create(e, src, strlen(src), NULL);
  CHECK_INT(tp_run_declare_caller_tools(r, "[{\"name\": \"clock.now\"}]", 0, on_call, NULL,
                                        NULL), TP_EINVAL);
  CHECK_HAS(tp_engine_error(e), "caller tool clock.now: the server has a tool of that name");
  CHECK_INT(tp_run_declare_caller_tools(r, "[{\"name\": \"a\"}, {\"name\": \"a\"}]", 0,
                                        on_call, NULL, NULL), TP_EINVAL);
  CHECK_HAS(tp_engine_error(e), "caller tool a: declared twice");
  CHECK_INT(tp_run_declare_caller_tools(r, "[{\"name\": \"bad-name\"}]", 0, on_call, NULL,
                                        NULL), TP_EINVAL);
  CHECK_HAS(tp_engine_error(e), "bad name");
  CHECK_INT(tp_run_declare_caller_tools(r, "[{\"name\": \"x\", \"inputSchema\": "
                                        "{\"type\": 5}}]", 0, on_call, NULL, NULL), TP_EINVAL);
  CHECK_HAS(tp_engine_error(e), "tool x: bad input schema");
  CHECK_INT(tp_run_declare_caller_tools(r, "{\"tools\": 1}", 0, on_call, NULL, NULL),
            TP_EINVAL);
  CHECK_HAS(tp_engine_error(e), "must be an array");
  CHECK_INT(tp_run_declare_caller_tools(r, "[{\"name\": 1}]", 0, on_call, NULL, NULL),
            TP_EINVAL);
  CHECK_HAS(tp_engine_error(e), "tools[0] must be {name = <string>");
  CHECK_INT(tp_run_declare_caller_tools(r, "[{", 0, on_call, NULL, NULL), TP_EINVAL);
  CHECK_HAS(tp_engine_error(e), "not JSON");
  CHECK_INT(tp_run_declare_caller_tools(NULL, "[]", 0, NULL, NULL, NULL), TP_EINVAL);
  /* none of the refused batches left a tool behind */
  CHECK_INT(tp_run_declare_caller_tools(r, "{\"tools\": [{\"name\": \"a\"}]}", 0, on_call,
                                        NULL, NULL), TP_OK);
  CHECK_INT(tp_run_step(r, 0, 0), TP_DONE);
  CHECK_INT(tp_run_declare_caller_tools(r, "[{\"name\": \"b\"}]", 0, on_call, NULL, NULL),
            TP_ESTATE);
  d.name = "c";
  CHECK_INT(tp_run_add_caller_tool(r, &d), TP_ESTATE);
  tp_run_destroy(r);
  tp_engine_destroy(e);
}

static void add_handler (tp_call *c, void *ud) {
  (void)ud;
  char out[64];
  long long a = 0, b = 0;
  sscanf(tp_call_args(c), "{\"a\":%lld,\"b\":%lld}", &a, &b);
  snprintf(out, sizeof out, "%lld", a + b);
  tp_call_complete(c, out, 0);
}

TEST(a_session_declares_tools_for_each_of_its_runs) {
  tp_engine *e = tp_engine_create();
  tp_session *s = tp_session_create(e, NULL);
  tp_tool_def d = { 0 };
  d.name = "add";
  d.input_schema = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},"
                   "\"b\":{\"type\":\"integer\"}}}";
  d.handler = add_handler;
  CHECK_INT(tp_session_add_caller_tool(s, &d), TP_OK);
  CHECK_INT(tp_session_add_caller_tool(s, &d), TP_EINVAL);  /* twice */
  for (int i = 0; i < 2; i++) {
    const char *src = i == 0 ? "x = tools.add{a = 1, b = 2} return x"
                             : "return tools.add{a = x, b = 10}";
    tp_run *r = tp_session_run(s, src, strlen(src));
    CHECK(r != NULL);
    if (i == 0) CHECK_INT(tp_session_clear_caller_tools(s), TP_ESTATE);  /* busy */
    char *env = run_to_end(e, r);
    CHECK_HAS(env, i == 0 ? "\"result\":3" : "\"result\":13");
    free(env);
  }
  /* a run's own declaration of the same name goes before the session's */
  const char *src = "return tools.add{a = 1, b = 1}";
  tp_run *r = tp_session_run(s, src, strlen(src));
  caller k = { 0 };
  CHECK_INT(tp_run_declare_caller_tools(r, "[{\"name\": \"add\", \"outputSchema\": "
                                        "{\"type\": \"object\"}}]", 0, on_call, NULL, &k),
            TP_OK);
  char *env = run_to_end(e, r);
  CHECK_HAS(env, "\"result\":{\"temp_c\":21}");
  free(env);
  CHECK_INT(tp_session_clear_caller_tools(s), TP_OK);
  r = tp_session_run(s, src, strlen(src));
  env = run_to_end(e, r);
  CHECK_HAS(env, "\"code\":\"tool.unknown\"");
  free(env);
  tp_session_destroy(s);
  tp_engine_destroy(e);
}

static int approvals;
static void approve_later (tp_call *c, const char *reason, void *ud) {
  (void)reason;
  tp_call **slot = ud;
  approvals++;
  *slot = c;
}

TEST(the_policy_and_its_approvals_hold_a_caller_tool_before_the_caller_sees_it) {
  tp_engine *e = tp_engine_create();
  const char *cfg = "{\"policy\":{\"default\":\"allow\",\"rules\":["
                    "{\"tools\":\"weather\",\"effect\":\"deny\",\"where\":\"city == 'Moscow'\"},"
                    "{\"tools\":\"weather\",\"effect\":\"ask\",\"reason\":\"costs money\"}]}}";
  CHECK_INT(tp_engine_configure(e, cfg, strlen(cfg)), TP_OK);
  tp_call *held = NULL;
  CHECK_INT(tp_engine_on_approval(e, approve_later, &held), TP_OK);
  caller k = { 0 };
  char *env = run_with(e, "local ok, err = pcall(tools.weather, {city = 'Moscow'}) "
                          "return err.code", &k, NULL);
  CHECK_HAS(env, "\"result\":\"tool.denied\"");
  CHECK_INT(k.n, 0);
  free(env);
  const char *src = "return tools.weather{city = 'Paris'}.temp_c";
  tp_run *r = tp_run_create(e, src, strlen(src), NULL);
  CHECK_INT(tp_run_declare_caller_tools(r, WEATHER, 0, on_call, on_cancel, &k), TP_OK);
  int rc;
  while ((rc = tp_run_step(r, 0, 0)) == TP_YIELD) {}
  CHECK_INT(rc, TP_WAIT);
  CHECK_INT(approvals, 1);
  CHECK_INT(k.n, 0);             /* held: the caller has not seen it */
  CHECK_INT(tp_call_approve(held), TP_OK);
  CHECK_INT(k.n, 1);
  env = run_to_end(e, r);
  CHECK_HAS(env, "\"result\":21");
  free(env);
  tp_engine_destroy(e);
}

TEST(caller_tools_count_against_the_tool_call_limit) {
  tp_engine *e = tp_engine_create();
  caller k = { 0 };
  tp_limits l;
  tp_limits_init(&l);
  l.tool_calls = 2;
  char *env = run_with(e, "for i = 1, 3 do tools.weather{city = 'x'} end return 1", &k, &l);
  CHECK_HAS(env, "\"code\":\"limit.tool_calls\"");
  CHECK_INT(k.n, 2);
  free(env);
  tp_engine_destroy(e);
}

TEST(tp_call_answer_takes_the_protocols_answers_and_refuses_other_shapes) {
  tp_engine *e = tp_engine_create();
  const char *src = "local out = {} "
    "for i = 1, 6 do local ok, r = pcall(tools.weather, {city = 'c' .. i}) "
    "out[i] = ok and r.temp_c or (r.code .. ': ' .. r.message) end return out";
  tp_run *r = tp_run_create(e, src, strlen(src), NULL);
  CHECK_INT(tp_run_declare_caller_tools(r, WEATHER, 0, NULL, NULL, NULL), TP_OK);
  static const char *const answers[] = {
    "{\"result\": {\"temp_c\": 7}}",
    "{\"error\": {\"message\": \"closed\", \"code\": \"tool.unavailable\"}}",
    "{\"error\": {\"message\": \"odd\", \"code\": \"runtime\"}}",
    "{\"temp_c\": 7}",
    "[1, 2",
    "{\"result\": 1, \"error\": {\"message\": \"both\"}}",
  };
  static const int rcs[] = { TP_OK, TP_OK, TP_OK, TP_EINVAL, TP_EINVAL, TP_EINVAL };
  int rc;
  for (int i = 0; i < 6; i++) {
    while ((rc = tp_run_step(r, 0, 0)) == TP_YIELD) {}
    CHECK_INT(rc, TP_WAIT);
    tp_call *p[2];
    CHECK_INT(tp_run_pending(r, p, 2), 1);
    CHECK_INT(tp_call_answer(p[0], answers[i], 0), rcs[i]);
  }
  while ((rc = tp_run_step(r, 0, 0)) == TP_YIELD) {}
  CHECK_INT(rc, TP_DONE);
  const char *env = tp_run_envelope(r);
  CHECK_HAS(env, "\"result\":[7,\"tool.unavailable: tools.weather is unavailable: closed\","
                 "\"tool.failed: tools.weather failed: odd\",\"tool.failed: tools.weather "
                 "failed: the caller's answer is neither {\\\"result\\\": ...}");
  CHECK_HAS(env, "\"tool.failed: tools.weather failed: the caller's answer is not JSON: ");
  CHECK_INT(tp_call_answer(NULL, "{}", 0), TP_EINVAL);
  tp_run_destroy(r);
  tp_engine_destroy(e);
}

int main (int argc, char **argv) {
  tp_test_args(argc, argv);
  RUN(a_live_caller_tool_answers_the_script_through_the_callback);
  RUN(an_error_answer_reaches_the_script_with_the_callers_code_and_message);
  RUN(arguments_and_results_are_checked_against_the_declared_schemas);
  RUN(caller_tools_are_listed_described_and_searched_in_their_run_only);
  RUN(a_call_written_out_is_not_unknown_once_the_tool_is_declared);
  RUN(paused_without_a_handler_the_calls_wait_in_tp_run_pending_together);
  RUN(the_wait_counts_against_the_calls_timeout_and_the_caller_hears_of_it);
  RUN(a_run_cancelled_while_the_caller_has_a_call_tells_the_caller);
  RUN(declarations_are_refused_with_a_reason);
  RUN(a_session_declares_tools_for_each_of_its_runs);
  RUN(the_policy_and_its_approvals_hold_a_caller_tool_before_the_caller_sees_it);
  RUN(caller_tools_count_against_the_tool_call_limit);
  RUN(tp_call_answer_takes_the_protocols_answers_and_refuses_other_shapes);
  return tp_test_end();
}
