/*
** test_policy.c: the policy hook of every tool call (tp_engine_set_policy). It sees a
** call before its arguments are checked; it can allow it, deny it (the script gets
** tool.denied with the policy's reason) or hold it: the script waits, no handler runs,
** until tp_call_decide allows or denies it. Held calls whose run ends before the
** decision are let go by the decision, with no leak (valgrind and ASan runs see it).
*/
#include <stdlib.h>
#include <string.h>

#include "tidepool.h"
#include "tp_test.h"

/* A C tool that answers {"n": <calls so far>}. */
static int handled;
static void answer (tp_call *c, void *ud) {
  (void)ud;
  char out[32];
  snprintf(out, sizeof out, "{\"n\":%d}", ++handled);
  tp_call_complete(c, out, 0);
}

/* What the policy saw and decided. */
typedef struct seen {
  int calls;
  tp_call *held;
  char held_args[64];
  char tools[256];
} seen;

/* Denies tools named *.secret, holds tools named *.ask, allows the rest. */
static int policy (tp_call *c, void *ud, char *reason, size_t len) {
  seen *s = ud;
  const char *tool = tp_call_tool(c);
  s->calls++;
  strncat(s->tools, tool, sizeof s->tools - strlen(s->tools) - 2);
  strcat(s->tools, ";");
  if (strstr(tool, ".secret")) {
    snprintf(reason, len, "secrets are not for scripts");
    return TP_POLICY_DENY;
  }
  if (strstr(tool, ".ask")) {
    s->held = c;
    snprintf(s->held_args, sizeof s->held_args, "%s", tp_call_args(c));
    return TP_POLICY_HOLD;
  }
  return TP_POLICY_ALLOW;
}

static tp_engine *engine_with_tools (seen *s) {
  tp_engine *e = tp_engine_create();
  const char *names[] = { "a.ok", "a.secret", "a.ask" };
  for (int i = 0; i < 3; i++) {
    tp_tool_def d = { 0 };
    d.name = names[i];
    d.description = "test tool";
    d.input_schema = "{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"integer\"}}}";
    d.handler = answer;
    CHECK_INT(tp_engine_add_tool(e, &d), TP_OK);
  }
  if (s != NULL) CHECK_INT(tp_engine_set_policy(e, policy, s), TP_OK);
  return e;
}

/* Steps r until it waits or finishes; returns the last status. */
static int step_until_wait (tp_run *r) {
  int rc;
  while ((rc = tp_run_step(r, 0, 0)) == TP_YIELD) {}
  return rc;
}

TEST(deny_fails_the_call_with_tool_denied_and_the_reason) {
  seen s = { 0 };
  handled = 0;
  tp_engine *e = engine_with_tools(&s);
  char *env = NULL;
  int ok = -1;
  const char *src = "local ok, err = pcall(tools.a.secret, {x = 1}) "
                    "return {ok = ok, code = err.code, msg = err.message, n = tools.a.ok{}.n}";
  CHECK_INT(tp_engine_run(e, src, strlen(src), NULL, &env, &ok), TP_OK);
  CHECK_INT(ok, 1);
  CHECK_HAS(env, "\"code\":\"tool.denied\"");
  CHECK_HAS(env, "tools.a.secret was denied by the host's policy: secrets are not for scripts");
  CHECK_HAS(env, "\"n\":1");          /* the denied call never reached its handler */
  CHECK_INT(handled, 1);
  CHECK_INT(s.calls, 2);
  CHECK_STR(s.tools, "a.secret;a.ok;");
  CHECK_HAS(env, "\"tool\":\"a.secret\",\"ok\":false,\"error\":\"tool.denied\"");
  tp_free(env);
  tp_engine_destroy(e);
}

TEST(policy_runs_before_the_schema_check) {
  seen s = { 0 };
  tp_engine *e = engine_with_tools(&s);
  char *env = NULL;
  const char *src = "local ok, err = pcall(tools.a.secret, {x = 'not an integer'}) return err.code";
  CHECK_INT(tp_engine_run(e, src, strlen(src), NULL, &env, NULL), TP_OK);
  CHECK_HAS(env, "\"result\":\"tool.denied\"");  /* not tool.invalid_input */
  CHECK_INT(s.calls, 1);
  tp_free(env);
  tp_engine_destroy(e);
}

TEST(hold_keeps_the_script_waiting_until_allowed) {
  seen s = { 0 };
  handled = 0;
  tp_engine *e = engine_with_tools(&s);
  const char *src = "local r = tools.a.ask{x = 7} return {n = r.n, after = tools.a.ok{}.n}";
  tp_run *r = tp_run_create(e, src, strlen(src), NULL);
  CHECK(r != NULL);
  CHECK_INT(step_until_wait(r), TP_WAIT);
  CHECK(s.held != NULL);
  CHECK_STR(s.held_args, "{\"x\":7}");
  CHECK_INT(handled, 0);                 /* no handler ran while it is held */
  tp_call *pending[4];
  CHECK_INT(tp_run_pending(r, pending, 4), 0);  /* a hold is not the embedder's to complete */
  CHECK_INT(step_until_wait(r), TP_WAIT);       /* still waiting: nothing was decided */
  CHECK_INT(tp_call_decide(s.held, TP_POLICY_ALLOW, NULL), TP_OK);
  CHECK_INT(handled, 1);
  CHECK_INT(step_until_wait(r), TP_DONE);
  CHECK_HAS(tp_run_envelope(r), "\"result\":{\"after\":2,\"n\":1}");
  CHECK_INT(tp_call_decide(NULL, TP_POLICY_ALLOW, NULL), TP_EINVAL);
  tp_run_destroy(r);
  tp_engine_destroy(e);
}

TEST(hold_then_deny) {
  seen s = { 0 };
  handled = 0;
  tp_engine *e = engine_with_tools(&s);
  const char *src = "local ok, err = pcall(tools.a.ask, {}) return err.code .. ': ' .. err.message";
  tp_run *r = tp_run_create(e, src, strlen(src), NULL);
  CHECK_INT(step_until_wait(r), TP_WAIT);
  tp_call *held = s.held;
  CHECK_INT(tp_call_decide(held, TP_POLICY_DENY, "the operator said no"), TP_OK);
  CHECK_INT(tp_call_decide(held, TP_POLICY_ALLOW, NULL), TP_ESTATE);  /* decided once */
  CHECK_INT(step_until_wait(r), TP_DONE);
  CHECK_HAS(tp_run_envelope(r), "tool.denied: tools.a.ask was denied by the host's policy: "
                                "the operator said no");
  CHECK_INT(handled, 0);
  tp_run_destroy(r);
  tp_engine_destroy(e);
}

TEST(a_held_call_whose_run_ended_is_let_go_by_the_decision) {
  seen s = { 0 };
  handled = 0;
  tp_engine *e = engine_with_tools(&s);
  const char *src = "return tools.a.ask{}";
  tp_run *r = tp_run_create(e, src, strlen(src), NULL);
  CHECK_INT(step_until_wait(r), TP_WAIT);
  tp_run_cancel(r);
  CHECK_HAS(tp_run_envelope(r), "\"code\":\"cancelled\"");
  tp_run_destroy(r);                        /* the hold still owns the call */
  CHECK_INT(tp_call_decide(s.held, TP_POLICY_ALLOW, NULL), TP_ESTATE);  /* frees it */
  CHECK_INT(handled, 0);
  tp_engine_destroy(e);
}

TEST(no_policy_allows_every_call) {
  handled = 0;
  tp_engine *e = engine_with_tools(NULL);
  char *env = NULL;
  const char *src = "return tools.a.secret{}.n + tools.a.ask{}.n";
  CHECK_INT(tp_engine_run(e, src, strlen(src), NULL, &env, NULL), TP_OK);
  CHECK_HAS(env, "\"result\":3");
  CHECK_INT(tp_engine_set_policy(e, NULL, NULL), TP_OK);
  CHECK_INT(tp_engine_set_policy(NULL, policy, NULL), TP_EINVAL);
  tp_free(env);
  tp_engine_destroy(e);
}

int main (int argc, char **argv) {
  tp_test_args(argc, argv);
  RUN(deny_fails_the_call_with_tool_denied_and_the_reason);
  RUN(policy_runs_before_the_schema_check);
  RUN(hold_keeps_the_script_waiting_until_allowed);
  RUN(hold_then_deny);
  RUN(a_held_call_whose_run_ended_is_let_go_by_the_decision);
  RUN(no_policy_allows_every_call);
  return tp_test_end();
}
