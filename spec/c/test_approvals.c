/*
** test_approvals.c: the config policy's "effect": "ask" holds a call for
** tp_engine_on_approval's callback; tp_call_approve runs it once with the arguments the
** script gave, tp_call_deny fails it with tool.denied and the reason, and without a
** callback it is denied. A run cancelled or destroyed while a call is held lets the
** decision free it (valgrind: make build/tests/test_approvals && valgrind
** --leak-check=full build/tests/test_approvals).
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "tidepool.h"
#include "tidepool_server.h"

#include "tp_test.h"

static int handled;
static char handled_args[256];
static void answer (tp_call *c, void *ud) {
  (void)ud;
  handled++;
  snprintf(handled_args, sizeof handled_args, "%s", tp_call_args(c));
  tp_call_complete(c, "{\"sent\":true}", 0);
}

/* What the approval callback saw; mode: 0 keeps the call, 1 approves at once, 2 denies
** at once. */
typedef struct asked {
  int n, mode;
  tp_call *call;
  char tool[64], args[256], reason[256];
} asked;

static void on_approval (tp_call *c, const char *reason, void *ud) {
  asked *a = ud;
  a->n++;
  a->call = c;
  snprintf(a->tool, sizeof a->tool, "%s", tp_call_tool(c));
  snprintf(a->args, sizeof a->args, "%s", tp_call_args(c));
  snprintf(a->reason, sizeof a->reason, "%s", reason);
  if (a->mode == 1) CHECK_INT(tp_call_approve(c), TP_OK);
  if (a->mode == 2) CHECK_INT(tp_call_deny(c, "not at night"), TP_OK);
}

#define POLICY "{\"policy\":{\"default\":\"allow\",\"rules\":[" \
  "{\"tools\":\"pay.*\",\"effect\":\"ask\",\"reason\":\"payments need a person\"}," \
  "{\"tools\":\"pay.send\",\"effect\":\"deny\",\"where\":\"amount > 1000\"}," \
  "{\"tools\":\"mail.send\",\"effect\":\"ask\"}]}}"

static tp_engine *engine (asked *a) {
  handled = 0;
  handled_args[0] = '\0';
  tp_engine *e = tp_engine_create();
  const char *names[] = { "pay.send", "mail.send", "time.now" };
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    tp_tool_def d = { 0 };
    d.name = names[i];
    d.description = "test tool";
    d.input_schema = "{\"type\":\"object\",\"properties\":{\"amount\":{\"type\":\"integer\"},"
                     "\"to\":{\"type\":\"string\"}}}";
    d.handler = answer;
    CHECK_INT(tp_engine_add_tool(e, &d), TP_OK);
  }
  CHECK_INT(tp_engine_configure(e, POLICY, strlen(POLICY)), TP_OK);
  if (a) CHECK_INT(tp_engine_on_approval(e, on_approval, a), TP_OK);
  return e;
}

static int step_until_wait (tp_run *r) {
  int rc;
  while ((rc = tp_run_step(r, 0, 0)) == TP_YIELD) {}
  return rc;
}

TEST(ask_holds_the_call_and_approve_runs_it_once_with_the_same_arguments) {
  asked a = { 0 };
  tp_engine *e = engine(&a);
  const char *src = "local r = tools.pay.send{amount = 250, to = 'bob'} "
                    "return {sent = r.sent, after = tools.time.now{}.sent}";
  tp_run *r = tp_run_create(e, src, strlen(src), NULL);
  CHECK(r != NULL);
  CHECK_INT(step_until_wait(r), TP_WAIT);
  CHECK_INT(a.n, 1);
  CHECK_STR(a.tool, "pay.send");
  CHECK_STR(a.args, "{\"amount\":250,\"to\":\"bob\"}");
  CHECK_STR(a.reason, "payments need a person (policy rule 0)");
  CHECK_INT(handled, 0);                        /* nothing of the tool ran while held */
  tp_call *pending[4];
  CHECK_INT(tp_run_pending(r, pending, 4), 0);  /* not the embedder's to complete */
  CHECK_INT(step_until_wait(r), TP_WAIT);       /* still waiting */
  CHECK_INT(handled, 0);
  CHECK_INT(tp_call_approve(a.call), TP_OK);
  CHECK_INT(handled, 1);
  CHECK_STR(handled_args, "{\"amount\":250,\"to\":\"bob\"}");
  CHECK_INT(tp_call_approve(a.call), TP_ESTATE);  /* decided once */
  CHECK_INT(step_until_wait(r), TP_DONE);
  CHECK_INT(handled, 2);                        /* the approved call, then time.now */
  CHECK_INT(a.n, 1);
  CHECK_HAS(tp_run_envelope(r), "\"result\":{\"after\":true,\"sent\":true}");
  tp_run_destroy(r);
  tp_engine_destroy(e);
}

TEST(deny_gives_the_script_tool_denied_with_the_reason) {
  asked a = { 0 };
  tp_engine *e = engine(&a);
  const char *src = "local ok, err = pcall(tools.pay.send, {amount = 5}) "
                    "return err.code .. ': ' .. err.message";
  tp_run *r = tp_run_create(e, src, strlen(src), NULL);
  CHECK_INT(step_until_wait(r), TP_WAIT);
  CHECK_INT(tp_call_deny(a.call, "the treasurer said no"), TP_OK);
  CHECK_INT(tp_call_deny(a.call, "again"), TP_ESTATE);
  CHECK_INT(step_until_wait(r), TP_DONE);
  CHECK_HAS(tp_run_envelope(r), "\"result\":\"tool.denied: tools.pay.send was denied by the "
                                "host's policy: the treasurer said no\"");
  CHECK_INT(handled, 0);
  tp_run_destroy(r);
  /* NULL reason: a default one */
  r = tp_run_create(e, src, strlen(src), NULL);
  CHECK_INT(step_until_wait(r), TP_WAIT);
  CHECK_INT(tp_call_deny(a.call, NULL), TP_OK);
  CHECK_INT(step_until_wait(r), TP_DONE);
  CHECK_HAS(tp_run_envelope(r), "\"result\":\"tool.denied: tools.pay.send was denied by the "
                                "host's policy: the person asked to approve it declined\"");
  CHECK_INT(handled, 0);
  CHECK_INT(tp_call_approve(NULL), TP_EINVAL);
  CHECK_INT(tp_call_deny(NULL, "x"), TP_EINVAL);
  tp_run_destroy(r);
  tp_engine_destroy(e);
}

TEST(the_callback_may_decide_at_once_in_a_synchronous_run) {
  asked a = { 0 };
  a.mode = 1;
  tp_engine *e = engine(&a);
  const char *src = "local r = tools.mail.send{to = 'ann'} return r.sent";
  char *env = NULL;
  int ok = 0;
  CHECK_INT(tp_engine_run(e, src, strlen(src), NULL, &env, &ok), TP_OK);
  CHECK_INT(ok, 1);
  CHECK_HAS(env, "\"result\":true");
  CHECK_INT(handled, 1);
  CHECK_STR(handled_args, "{\"to\":\"ann\"}");
  /* a rule without a reason: the reason says which rule asks */
  CHECK_STR(a.reason, "policy rule 2 asks a person to approve tools.mail.send");
  tp_free(env);
  a.mode = 2;
  const char *src2 = "local ok, err = pcall(tools.mail.send, {to = 'ann'}) return err.message";
  CHECK_INT(tp_engine_run(e, src2, strlen(src2), NULL, &env, &ok), TP_OK);
  CHECK_HAS(env, "\"result\":\"tools.mail.send was denied by the host's policy: not at "
                 "night\"");
  CHECK_INT(handled, 1);
  CHECK_INT(a.n, 2);
  tp_free(env);
  tp_engine_destroy(e);
}

TEST(deny_beats_ask_and_calls_no_rule_asks_about_are_not_held) {
  asked a = { 0 };
  tp_engine *e = engine(&a);
  const char *src = "local ok, err = pcall(tools.pay.send, {amount = 5000}) "
                    "return {err.code, tools.time.now{}.sent}";
  char *env = NULL;
  CHECK_INT(tp_engine_run(e, src, strlen(src), NULL, &env, NULL), TP_OK);
  CHECK_HAS(env, "\"result\":[\"tool.denied\",true]");
  CHECK_INT(a.n, 0);       /* denied without asking anyone */
  CHECK_INT(handled, 1);   /* time.now alone */
  tp_free(env);
  tp_engine_destroy(e);
}

TEST(without_a_callback_an_ask_call_is_denied) {
  tp_engine *e = engine(NULL);
  const char *src = "local ok, err = pcall(tools.pay.send, {amount = 5}) return err.message";
  char *env = NULL;
  CHECK_INT(tp_engine_run(e, src, strlen(src), NULL, &env, NULL), TP_OK);
  CHECK_HAS(env, "\"result\":\"tools.pay.send was denied by the host's policy: payments need "
                 "a person (policy rule 0 asks a person to approve this call, and this host "
                 "has no one to ask: it is denied)\"");
  CHECK_INT(handled, 0);
  tp_free(env);
  /* set, then cleared */
  asked a = { 0 };
  CHECK_INT(tp_engine_on_approval(e, on_approval, &a), TP_OK);
  CHECK_INT(tp_engine_on_approval(e, NULL, NULL), TP_OK);
  CHECK_INT(tp_engine_run(e, src, strlen(src), NULL, &env, NULL), TP_OK);
  CHECK_HAS(env, "this host has no one to ask: it is denied");
  CHECK_INT(a.n, 0);
  CHECK_INT(tp_engine_on_approval(NULL, on_approval, &a), TP_EINVAL);
  tp_free(env);
  tp_engine_destroy(e);
}

TEST(a_run_cancelled_or_destroyed_while_held_lets_the_decision_free_the_call) {
  asked a = { 0 };
  tp_engine *e = engine(&a);
  const char *src = "return tools.pay.send{amount = 1}";
  tp_run *r = tp_run_create(e, src, strlen(src), NULL);
  CHECK_INT(step_until_wait(r), TP_WAIT);
  tp_run_cancel(r);
  CHECK_HAS(tp_run_envelope(r), "\"code\":\"cancelled\"");
  tp_run_destroy(r);
  CHECK_INT(tp_call_approve(a.call), TP_ESTATE);  /* frees it */
  CHECK_INT(handled, 0);
  /* destroyed without a cancel, then denied */
  r = tp_run_create(e, src, strlen(src), NULL);
  CHECK_INT(step_until_wait(r), TP_WAIT);
  tp_run_destroy(r);
  CHECK_INT(tp_call_deny(a.call, "too late"), TP_ESTATE);
  CHECK_INT(handled, 0);
  /* cancelled, decided, then destroyed */
  r = tp_run_create(e, src, strlen(src), NULL);
  CHECK_INT(step_until_wait(r), TP_WAIT);
  tp_run_cancel(r);
  CHECK_INT(tp_call_approve(a.call), TP_ESTATE);
  CHECK_INT(handled, 0);
  tp_run_destroy(r);
  tp_engine_destroy(e);
}

static int ndecisions;
static char effects[128];
static void on_decision (tp_run *r, const tp_decision *d, void *ud) {
  (void)r; (void)ud;
  ndecisions++;
  size_t o = strlen(effects);
  snprintf(effects + o, sizeof effects - o, "%s:%d;", d->effect, d->rule);
}

TEST(the_audit_callback_sees_the_ask) {
  asked a = { 0 };
  a.mode = 1;
  tp_engine *e = engine(&a);
  ndecisions = 0;
  effects[0] = '\0';
  CHECK_INT(tp_engine_on_decision(e, on_decision, NULL), TP_OK);
  const char *src = "return tools.pay.send{amount = 1}.sent and tools.time.now{}.sent";
  char *env = NULL;
  CHECK_INT(tp_engine_run(e, src, strlen(src), NULL, &env, NULL), TP_OK);
  CHECK_HAS(env, "\"result\":true");
  CHECK_STR(effects, "ask:0;allow:-1;");
  tp_free(env);
  tp_engine_destroy(e);
}

/* A run held for a person (tidepool mcp's paused runs) does not spend its wall-clock
** limit meanwhile: tp_run_hold_wall stops the clock and credits the time held. The
** control run, held as long without it, ends with limit.time. */
TEST(hold_wall_credits_the_time_held_to_the_deadline) {
  asked a = { 0 };
  tp_engine *e = engine(&a);
  tp_limits lim;
  tp_limits_init(&lim);
  lim.wall_us = 500000;
  const char *src = "return tools.pay.send{amount = 7}.sent";
  for (int hold = 1; hold >= 0; hold--) {
    tp_run *r = tp_run_create(e, src, strlen(src), &lim);
    CHECK_INT(tp_run_hold_wall(r, 1), TP_ESTATE);  /* not started */
    CHECK_INT(step_until_wait(r), TP_WAIT);
    CHECK(tp_call_run(a.call) == r);
    if (hold) {
      CHECK_INT(tp_run_hold_wall(r, 1), TP_OK);
      CHECK_INT(tp_run_hold_wall(r, 1), TP_OK);    /* twice: a no-op */
    }
    struct timespec ts = { 0, 800 * 1000000L };
    while (nanosleep(&ts, &ts) != 0) {}  /* the library's signal may cut a sleep short */
    if (hold) {
      CHECK_INT(step_until_wait(r), TP_WAIT);      /* still held, not out of time */
      CHECK_INT(tp_run_hold_wall(r, 0), TP_OK);
      CHECK_INT(tp_call_approve(a.call), TP_OK);
      CHECK_INT(step_until_wait(r), TP_DONE);
      CHECK_HAS(tp_run_envelope(r), "\"ok\":true,\"result\":true");
      CHECK_INT(tp_run_hold_wall(r, 0), TP_ESTATE);  /* done */
    }
    else {
      CHECK_INT(step_until_wait(r), TP_DONE);
      CHECK_HAS(tp_run_envelope(r), "\"code\":\"limit.time\"");
      CHECK_INT(tp_call_approve(a.call), TP_ESTATE);  /* lets go of the held call */
    }
    tp_run_destroy(r);
  }
  CHECK(tp_call_run(NULL) == NULL);
  CHECK_INT(tp_run_hold_wall(NULL, 1), TP_EINVAL);
  tp_engine_destroy(e);
}

/* tp_run_timeline: each listed call's start and end after the run's start, the time the
** policy held it for a person, and its outcome; never an argument's value. */
TEST(the_timeline_shows_each_call_and_the_time_it_was_held) {
  asked a = { 0 };
  tp_engine *e = engine(&a);
  CHECK(tp_run_timeline(NULL, NULL) == NULL);
  const char *src = "local r = tools.pay.send{amount = 250, to = 'secret-bob'} "
                    "local ok = pcall(tools.mail.send, {to = 'x'}) return tools.time.now{}.sent";
  tp_run *r = tp_run_create(e, src, strlen(src), NULL);
  CHECK(r != NULL);
  CHECK(tp_run_timeline(r, NULL) == NULL);  /* not started */
  CHECK_INT(step_until_wait(r), TP_WAIT);
  struct timespec ts = { 0, 30 * 1000000 };  /* held 30 ms at least */
  nanosleep(&ts, NULL);
  size_t n = 0;
  char *mid = tp_run_timeline(r, &n);
  CHECK(mid != NULL && n == strlen(mid));
  CHECK_HAS(mid, "\"seq\":1,\"tool\":\"pay.send\"");
  CHECK_HAS(mid, "\"running\":true");  /* held still: not done yet */
  CHECK(strstr(mid, "\"code\"") == NULL);
  CHECK_HAS(mid, "\"held_at\":");
  tp_free(mid);
  CHECK_INT(tp_call_approve(a.call), TP_OK);
  CHECK_INT(step_until_wait(r), TP_WAIT);        /* mail.send is held */
  CHECK_INT(tp_call_deny(a.call, "no"), TP_OK);
  CHECK_INT(step_until_wait(r), TP_DONE);
  char *tl = tp_run_timeline(r, NULL);
  CHECK(tl != NULL);
  json_t *j = tp_json_parse(tl, strlen(tl), NULL, 0);
  json_t *calls = json_object_get(j, "calls");
  CHECK_INT((int)json_array_size(calls), 3);
  json_t *c0 = json_array_get(calls, 0), *c1 = json_array_get(calls, 1), *c2 = json_array_get(calls, 2);
  CHECK_STR(json_string_value(json_object_get(c0, "tool")), "pay.send");
  CHECK(json_is_true(json_object_get(c0, "ok")));
  double held = json_number_value(json_object_get(c0, "held_end")) -
                json_number_value(json_object_get(c0, "held_at"));
  CHECK(held >= 30.0);                           /* the wait for a person, in ms */
  CHECK(json_number_value(json_object_get(c0, "end")) >=
        json_number_value(json_object_get(c0, "held_end")));
  CHECK_STR(json_string_value(json_object_get(c1, "code")), "tool.denied");
  CHECK(json_object_get(c2, "held_at") == NULL);  /* time.now: not held */
  CHECK(json_number_value(json_object_get(c2, "at")) >= json_number_value(json_object_get(c1, "end")));
  CHECK(json_number_value(json_object_get(j, "ms")) >= json_number_value(json_object_get(c2, "end")));
  CHECK(strstr(tl, "secret-bob") == NULL);       /* never an argument's value */
  json_decref(j);
  tp_free(tl);
  tp_run_destroy(r);
  tp_engine_destroy(e);
}

int main (int argc, char **argv) {
  tp_test_args(argc, argv);
  RUN(ask_holds_the_call_and_approve_runs_it_once_with_the_same_arguments);
  RUN(deny_gives_the_script_tool_denied_with_the_reason);
  RUN(the_callback_may_decide_at_once_in_a_synchronous_run);
  RUN(deny_beats_ask_and_calls_no_rule_asks_about_are_not_held);
  RUN(without_a_callback_an_ask_call_is_denied);
  RUN(a_run_cancelled_or_destroyed_while_held_lets_the_decision_free_the_call);
  RUN(the_audit_callback_sees_the_ask);
  RUN(hold_wall_credits_the_time_held_to_the_deadline);
  RUN(the_timeline_shows_each_call_and_the_time_it_was_held);
  return tp_test_end();
}
