/*
** test_callers.c: who may call a tool, through the C API: the config's tool_settings
** (callers: script, direct), tp_engine_tool_callers, and a run that stands for the
** model's direct call (tp_run_set_caller), refused or admitted at each tool.
*/
#include <stdlib.h>
#include <string.h>

#include "tidepool.h"
#include "tp_test.h"

static int handled;
static void answer (tp_call *c, void *ud) {
  (void)ud;
  handled++;
  tp_call_complete(c, "{\"ok\":true}", 0);
}

/* a.both, a.direct, a.script (sorted by name), under tool_settings that say so. */
static tp_engine *engine_with_tools (void) {
  tp_engine *e = tp_engine_create();
  const char *cfg = "{\"tool_settings\": {\"a.direct\": {\"callers\": [\"direct\"]}, "
                    "\"a.script\": {\"callers\": [\"script\"]}}}";
  CHECK_INT(tp_engine_configure(e, cfg, strlen(cfg)), TP_OK);
  const char *names[] = { "a.script", "a.direct", "a.both" };
  for (int i = 0; i < 3; i++) {
    tp_tool_def d = { 0 };
    d.name = names[i];
    d.handler = answer;
    CHECK_INT(tp_engine_add_tool(e, &d), TP_OK);
  }
  return e;
}

/* Runs src to its end, as a direct call when direct; returns the envelope (malloc'd). */
static char *run_as (tp_engine *e, const char *src, int direct) {
  tp_run *r = tp_run_create(e, src, strlen(src), NULL);
  CHECK(r != NULL);
  if (r == NULL) return NULL;
  if (direct) CHECK_INT(tp_run_set_caller(r, TP_CALLER_DIRECT), TP_OK);
  int rc;
  while ((rc = tp_run_step(r, 0, 0)) != TP_DONE) {
    if (rc < 0) break;
    tp_engine_poll(e, rc == TP_WAIT);
  }
  char *env = tp_run_envelope(r) ? strdup(tp_run_envelope(r)) : NULL;
  tp_run_destroy(r);
  return env;
}

TEST(tool_callers_reads_the_config_and_both_when_nothing_says) {
  tp_engine *e = engine_with_tools();
  CHECK_INT(tp_engine_tool_callers(e, 0), TP_CALLER_SCRIPT | TP_CALLER_DIRECT);  /* a.both */
  CHECK_INT(tp_engine_tool_callers(e, 1), TP_CALLER_DIRECT);                     /* a.direct */
  CHECK_INT(tp_engine_tool_callers(e, 2), TP_CALLER_SCRIPT);                     /* a.script */
  CHECK_INT(tp_engine_tool_callers(e, 3), 0);
  CHECK_INT(tp_engine_tool_callers(NULL, 0), 0);
  tp_engine_destroy(e);
}

TEST(set_caller_takes_only_the_two_callers) {
  tp_engine *e = engine_with_tools();
  tp_run *r = tp_run_create(e, "return 1", 8, NULL);
  CHECK_INT(tp_run_set_caller(r, 0), TP_EINVAL);
  CHECK_INT(tp_run_set_caller(r, TP_CALLER_SCRIPT | TP_CALLER_DIRECT), TP_EINVAL);
  CHECK_INT(tp_run_set_caller(NULL, TP_CALLER_DIRECT), TP_EINVAL);
  CHECK_INT(tp_run_set_caller(r, TP_CALLER_SCRIPT), TP_OK);
  tp_run_destroy(r);
  tp_engine_destroy(e);
}

TEST(a_script_run_calls_script_tools_and_is_refused_a_direct_one) {
  tp_engine *e = engine_with_tools();
  handled = 0;
  char *env = run_as(e, "return {tools.a.script{}.ok, tools.a.both{}.ok}", 0);
  CHECK_HAS(env, "\"ok\":true,\"result\":[true,true]");
  free(env);
  env = run_as(e, "return tools.a.direct{}", 0);
  CHECK_HAS(env, "\"code\":\"tool.denied\"");
  CHECK_HAS(env, "tools.a.direct may only be called directly, not from a script (the "
                 "config's tool_settings give it callers [\\\"direct\\\"])");
  free(env);
  CHECK_INT(handled, 2);  /* the refused call ran nothing */
  tp_engine_destroy(e);
}

TEST(a_direct_run_calls_direct_tools_and_is_refused_a_script_one) {
  tp_engine *e = engine_with_tools();
  handled = 0;
  char *env = run_as(e, "return {tools.a.direct{}.ok, tools.a.both{}.ok}", 1);
  CHECK_HAS(env, "\"ok\":true,\"result\":[true,true]");
  free(env);
  env = run_as(e, "return tools.a.script{}", 1);
  CHECK_HAS(env, "\"code\":\"tool.denied\"");
  CHECK_HAS(env, "tools.a.script may only be called from a script, not directly (the "
                 "config's tool_settings give it callers [\\\"script\\\"]): call "
                 "tools.a.script{...} in a run_lua script");
  free(env);
  CHECK_INT(handled, 2);
  tp_engine_destroy(e);
}

TEST(without_tool_settings_every_tool_takes_both_callers) {
  tp_engine *e = tp_engine_create();
  tp_tool_def d = { 0 };
  d.name = "a.any";
  d.handler = answer;
  CHECK_INT(tp_engine_add_tool(e, &d), TP_OK);
  CHECK_INT(tp_engine_tool_callers(e, 0), TP_CALLER_SCRIPT | TP_CALLER_DIRECT);
  char *env = run_as(e, "return tools.a.any{}.ok", 1);
  CHECK_HAS(env, "\"ok\":true,\"result\":true");
  free(env);
  tp_engine_destroy(e);
}

int main (int argc, char **argv) {
  tp_test_args(argc, argv);
  RUN(tool_callers_reads_the_config_and_both_when_nothing_says);
  RUN(set_caller_takes_only_the_two_callers);
  RUN(a_script_run_calls_script_tools_and_is_refused_a_direct_one);
  RUN(a_direct_run_calls_direct_tools_and_is_refused_a_script_one);
  RUN(without_tool_settings_every_tool_takes_both_callers);
  return tp_test_end();
}
