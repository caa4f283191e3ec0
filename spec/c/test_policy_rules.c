/*
** test_policy_rules.c: the config's policy section through the C API. Rules are loaded
** with tp_engine_configure and decide on every call before the embedding program's
** policy hook and before the arguments are checked. Rate buckets run on a fake clock
** (tp__policy_set_clock), never on sleeps; decisions reach tp_engine_on_decision with a
** SHA-256 of the arguments and never their values.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tidepool.h"
#include <jansson.h>

#include "tp_test.h"
#include "digest.h"
#include "util.h"

/* policy.c: the buckets' clock (internal, for tests). */
void tp__policy_set_clock(tp_engine *e, uint64_t (*now_ns)(void *ud), void *ud);

static int handled;
static void answer (tp_call *c, void *ud) {
  (void)ud;
  handled++;
  tp_call_complete(c, "{\"ok\":true}", 0);
}

static tp_engine *engine (const char *config) {
  tp_engine *e = tp_engine_create();
  const char *names[] = { "pay.send", "pay.refund", "github.issues.create",
                          "github.repos.get", "github.repos.tags.list", "fs.read", "fs.readdir",
                          "fs.write", "github" };
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    tp_tool_def d = { 0 };
    d.name = names[i];
    d.description = "test tool";
    d.input_schema = "{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"integer\"}}}";
    d.handler = answer;
    CHECK_INT(tp_engine_add_tool(e, &d), TP_OK);
  }
  if (config) {
    CHECK_INT(tp_engine_configure(e, config, strlen(config)), TP_OK);
    CHECK_STR(tp_engine_error(e), "");
  }
  return e;
}

/* The envelope's result of src (a string kept in a static buffer). */
static const char *result (tp_engine *e, const char *src) {
  static char buf[4096];
  char *env = NULL;
  CHECK_INT(tp_engine_run(e, src, strlen(src), NULL, &env, NULL), TP_OK);
  const char *r = env ? strstr(env, "\"result\":") : NULL;
  snprintf(buf, sizeof buf, "%s", r ? r + 9 : env ? env : "(none)");
  char *end = strstr(buf, ",\"logs\":");
  if (end) *end = '\0';
  tp_free(env);
  return buf;
}

/* A script that calls tool with args and returns "ok" or the error code. */
static const char *outcome (tp_engine *e, const char *tool, const char *args) {
  char src[512];
  snprintf(src, sizeof src, "local ok, err = pcall(tools.%s, %s) "
           "return ok and 'ok' or err.code", tool, args);
  return result(e, src);
}

TEST(glob_star_matches_one_part_and_double_star_any_number) {
  tp_engine *e = engine("{\"policy\":{\"rules\":["
    "{\"tools\":\"github.*.create\",\"effect\":\"allow\"},"
    "{\"tools\":\"fs.read*\",\"effect\":\"allow\"},"
    "{\"tools\":\"pay.**\",\"effect\":\"allow\"}]}}");
  CHECK_STR(outcome(e, "github.issues.create", "{}"), "\"ok\"");
  CHECK_STR(outcome(e, "github.repos.get", "{}"), "\"tool.denied\"");
  CHECK_STR(outcome(e, "github.repos.tags.list", "{}"), "\"tool.denied\"");
  CHECK_STR(outcome(e, "fs.read", "{}"), "\"ok\"");
  CHECK_STR(outcome(e, "fs.readdir", "{}"), "\"ok\"");
  CHECK_STR(outcome(e, "fs.write", "{}"), "\"tool.denied\"");
  CHECK_STR(outcome(e, "pay.refund", "{}"), "\"ok\"");
  tp_engine_destroy(e);
  e = engine("{\"policy\":{\"rules\":[{\"tools\":\"github.**\",\"effect\":\"allow\"},"
             "{\"tools\":\"**.list\",\"effect\":\"deny\"}]}}");
  CHECK_STR(outcome(e, "github.repos.tags.list", "{}"), "\"tool.denied\"");
  CHECK_STR(outcome(e, "github.repos.get", "{}"), "\"ok\"");
  CHECK_STR(outcome(e, "github", "{}"), "\"ok\"");  /* ** matches no part too */
  CHECK_STR(outcome(e, "pay.send", "{}"), "\"tool.denied\"");
  tp_engine_destroy(e);
}

TEST(deny_beats_ask_beats_allow_and_the_default_decides_the_rest) {
  tp_engine *e = engine("{\"policy\":{\"rules\":["
    "{\"tools\":\"**\",\"effect\":\"allow\"},"
    "{\"tools\":\"github.**\",\"effect\":\"ask\",\"reason\":\"writes need a person\"},"
    "{\"tools\":\"github.repos.*\",\"effect\":\"deny\",\"reason\":\"no repos\"}]}}");
  CHECK_STR(outcome(e, "pay.send", "{}"), "\"ok\"");
  const char *r = result(e, "local ok, err = pcall(tools.github.issues.create, {}) "
                            "return err.message");
  CHECK_STR(r, "\"tools.github.issues.create was denied by the host's policy: writes need a "
               "person (policy rule 1 asks a person to approve this call, and this host has "
               "no one to ask: it is denied)\"");
  r = result(e, "local ok, err = pcall(tools.github.repos.get, {}) return err.message");
  CHECK_STR(r, "\"tools.github.repos.get was denied by the host's policy: no repos (policy "
               "rule 2 denies tools.github.repos.get)\"");
  tp_engine_destroy(e);
  /* a policy section denies what no rule allows; "default": "allow" allows it */
  e = engine("{\"policy\":{\"rules\":[{\"tools\":\"fs.*\",\"effect\":\"allow\"}]}}");
  r = result(e, "local ok, err = pcall(tools.pay.send, {}) return err.message");
  CHECK_STR(r, "\"tools.pay.send was denied by the host's policy: no policy rule allows "
               "tools.pay.send, and the policy's default is deny\"");
  tp_engine_destroy(e);
  e = engine("{\"policy\":{\"default\":\"allow\",\"rules\":[{\"tools\":\"fs.*\",\"effect\":"
             "\"deny\"}]}}");
  CHECK_STR(outcome(e, "pay.send", "{}"), "\"ok\"");
  CHECK_STR(outcome(e, "fs.read", "{}"), "\"tool.denied\"");
  tp_engine_destroy(e);
  e = engine("{\"limits\":{}}");  /* no policy section: every call is allowed */
  CHECK_STR(outcome(e, "pay.send", "{}"), "\"ok\"");
  tp_engine_destroy(e);
}

TEST(an_allow_rule_whose_condition_fails_denies_naming_the_clause_and_the_value) {
  handled = 0;
  tp_engine *e = engine("{\"policy\":{\"default\":\"allow\",\"rules\":[{\"tools\":"
    "\"pay.send\",\"effect\":\"allow\",\"reason\":\"payments over 10000 need a person\","
    "\"where\":\"amount <= 10000 and currency in {'EUR', 'USD'}\"}]}}");
  CHECK_STR(outcome(e, "pay.send", "{amount = 10000, currency = 'EUR'}"), "\"ok\"");
  CHECK_INT(handled, 1);
  const char *r = result(e, "local ok, err = pcall(tools.pay.send, {amount = 25000, "
                            "currency = 'EUR'}) return err.message");
  CHECK_STR(r, "\"tools.pay.send was denied by the host's policy: payments over 10000 need a "
               "person (policy rule 0 allows tools.pay.send only when `amount <= 10000 and "
               "currency in {'EUR', 'USD'}`; `amount <= 10000` does not hold: amount is "
               "25000)\"");
  r = result(e, "local ok, err = pcall(tools.pay.send, {amount = 1, currency = 'GBP'}) "
                "return err.message");
  CHECK_HAS(r, "`currency in {'EUR', 'USD'}` does not hold: currency is \\\"GBP\\\")");
  r = result(e, "local ok, err = pcall(tools.pay.send, {currency = 'EUR'}) return err.message");
  CHECK_HAS(r, "`amount <= 10000` cannot be checked: amount is missing)");
  r = result(e, "local ok, err = pcall(tools.pay.send, {amount = '5', currency = 'EUR'}) "
                "return err.message");
  CHECK_HAS(r, "`amount <= 10000` cannot be checked: amount is \\\"5\\\", a string, and this "
               "clause takes a number (a string never compares to a number))");
  CHECK_INT(handled, 1);  /* no denied call reached the tool */
  tp_engine_destroy(e);
}

static int hook_calls;
static int hook (tp_call *c, void *ud, char *reason, size_t len) {
  (void)c; (void)ud;
  hook_calls++;
  snprintf(reason, len, "the embedder says no");
  return TP_POLICY_DENY;
}

TEST(policy_decides_before_the_schema_and_before_the_embedders_hook) {
  tp_engine *e = engine("{\"policy\":{\"rules\":[{\"tools\":\"fs.read\",\"effect\":"
                        "\"deny\"},{\"tools\":\"pay.send\",\"effect\":\"allow\"}]}}");
  /* x must be an integer: the denial comes first */
  CHECK_STR(outcome(e, "fs.read", "{x = 'text'}"), "\"tool.denied\"");
  CHECK_STR(outcome(e, "pay.send", "{x = 'text'}"), "\"tool.invalid_input\"");
  hook_calls = 0;
  CHECK_INT(tp_engine_set_policy(e, hook, NULL), TP_OK);
  CHECK_HAS(result(e, "local ok, err = pcall(tools.fs.read, {}) return err.message"),
            "policy: policy rule 0 denies tools.fs.read\"");
  CHECK_INT(hook_calls, 0);  /* the config's denial is final */
  CHECK_HAS(result(e, "local ok, err = pcall(tools.pay.send, {}) return err.message"),
            "the embedder says no");
  CHECK_INT(hook_calls, 1);  /* what the config allows, the embedder still decides */
  tp_engine_destroy(e);
}

TEST(max_calls_counts_per_run) {
  handled = 0;
  tp_engine *e = engine("{\"policy\":{\"rules\":[{\"tools\":\"github.**\",\"effect\":"
                        "\"allow\",\"max_calls\":2},{\"tools\":\"fs.write\",\"effect\":"
                        "\"allow\",\"max_calls\":0}]}}");
  const char *src = "local r = {} for i = 1, 3 do local ok, err = pcall(tools.github.repos.get, "
                    "{}) r[i] = ok and 'ok' or err.message end return r";
  CHECK_STR(result(e, src), "[\"ok\",\"ok\",\"tools.github.repos.get was denied by the host's "
            "policy: policy rule 0 allows 2 calls of github.** per run, and this run has made "
            "them all\"]");
  /* the next run counts afresh; the count is the rule's, over every tool it covers */
  CHECK_STR(result(e, "local a = pcall(tools.github.repos.get, {}) "
                      "local b = pcall(tools.github.issues.create, {}) "
                      "local c = pcall(tools.github.repos.get, {}) return {a, b, c}"),
            "[true,true,false]");
  CHECK_STR(outcome(e, "fs.write", "{}"), "\"tool.denied\"");
  CHECK_INT(handled, 4);
  tp_engine_destroy(e);
}

static uint64_t fake_ns;
static uint64_t fake_clock (void *ud) { (void)ud; return fake_ns; }

TEST(a_bucket_refills_at_its_rate_on_the_fake_clock) {
  tp_engine *e = engine("{\"policy\":{\"rules\":[{\"tools\":\"pay.send\",\"effect\":"
    "\"allow\",\"rate\":{\"capacity\":2,\"per_second\":1,\"key\":\"global\"}}]}}");
  fake_ns = 1000000000ull;
  tp__policy_set_clock(e, fake_clock, NULL);
  const char *src = "local r = {} for i = 1, 3 do local ok, err = pcall(tools.pay.send, {}) "
                    "r[i] = ok and 'ok' or err.code .. ' ' .. err.retry_after_ms end return r";
  CHECK_STR(result(e, src), "[\"ok\",\"ok\",\"tool.rate_limited 1000\"]");
  fake_ns += 400000000ull;  /* 0.4 s: 0.4 token */
  CHECK_STR(result(e, "local ok, err = pcall(tools.pay.send, {}) return err.retry_after_ms"),
            "600");
  fake_ns += 600000000ull;  /* a whole token */
  CHECK_STR(outcome(e, "pay.send", "{}"), "\"ok\"");
  CHECK_STR(outcome(e, "pay.send", "{}"), "\"tool.rate_limited\"");
  fake_ns += 60000000000ull;  /* a minute: full again, never past capacity */
  CHECK_STR(result(e, src), "[\"ok\",\"ok\",\"tool.rate_limited 1000\"]");
  /* the error of an uncaught limit has retry_after_ms too */
  char *env = NULL;
  const char *s2 = "return tools.pay.send{}";
  CHECK_INT(tp_engine_run(e, s2, strlen(s2), NULL, &env, NULL), TP_OK);
  CHECK_HAS(env, "\"code\":\"tool.rate_limited\"");
  CHECK_HAS(env, "\"retry_after_ms\":1000");
  CHECK_HAS(env, "retry after 1000 ms");
  tp_free(env);
  tp_engine_destroy(e);
}

TEST(buckets_are_kept_per_run_session_and_principal) {
  tp_engine *e = engine("{\"policy\":{\"rules\":["
    "{\"tools\":\"pay.send\",\"effect\":\"allow\",\"rate\":{\"capacity\":1,\"per_second\":1,"
    "\"key\":\"run\"}},"
    "{\"tools\":\"pay.refund\",\"effect\":\"allow\",\"rate\":{\"capacity\":1,\"per_second\":1,"
    "\"key\":\"session\"}},"
    "{\"tools\":\"fs.read\",\"effect\":\"allow\",\"rate\":{\"capacity\":1,\"per_second\":1,"
    "\"key\":\"principal\"}}]}}");
  fake_ns = 5000000000ull;
  tp__policy_set_clock(e, fake_clock, NULL);
  /* run: each run has its own bucket */
  CHECK_STR(outcome(e, "pay.send", "{}"), "\"ok\"");
  CHECK_STR(outcome(e, "pay.send", "{}"), "\"ok\"");
  CHECK_STR(result(e, "local a = pcall(tools.pay.send, {}) local b = pcall(tools.pay.send, {}) "
                      "return {a, b}"), "[true,false]");
  /* session: runs of one session share one; a run outside a session is its own session */
  tp_session *s = tp_session_create(e, NULL);
  const char *src = "local ok, err = pcall(tools.pay.refund, {}) return ok or err.code";
  const char *want[] = { "\"result\":true", "\"result\":\"tool.rate_limited\"" };
  for (int i = 0; i < 2; i++) {
    tp_run *r = tp_session_run(s, src, strlen(src));
    while (tp_run_step(r, 0, 0) != TP_DONE) tp_engine_poll(e, 0);
    CHECK_HAS(tp_run_envelope(r), want[i]);
    tp_run_destroy(r);
  }
  CHECK_STR(outcome(e, "pay.refund", "{}"), "\"ok\"");
  tp_session_destroy(s);
  /* principal: the engine's, or a run's own */
  CHECK_INT(tp_engine_set_principal(e, "alice", NULL), TP_OK);
  CHECK_STR(outcome(e, "fs.read", "{}"), "\"ok\"");
  CHECK_STR(outcome(e, "fs.read", "{}"), "\"tool.rate_limited\"");
  src = "local ok, err = pcall(tools.fs.read, {}) return ok or err.code";
  tp_run *r = tp_run_create(e, src, strlen(src), NULL);
  CHECK_INT(tp_run_set_principal(r, "bob", NULL), TP_OK);
  while (tp_run_step(r, 0, 0) != TP_DONE) tp_engine_poll(e, 0);
  CHECK_HAS(tp_run_envelope(r), "\"result\":true");
  tp_run_destroy(r);
  tp_engine_destroy(e);
}

TEST(requires_denies_a_caller_without_the_scopes) {
  tp_engine *e = engine("{\"policy\":{\"rules\":[{\"tools\":\"pay.*\",\"effect\":\"allow\","
    "\"requires\":[\"payments:write\",\"payments:read\"]}]}}");
  const char *r = result(e, "local ok, err = pcall(tools.pay.send, {}) return err.message");
  CHECK_STR(r, "\"tools.pay.send was denied by the host's policy: policy rule 0 requires the "
               "scope payments:write, which this caller does not hold\"");
  CHECK_INT(tp_engine_set_principal(e, "alice", "payments:write"), TP_OK);
  r = result(e, "local ok, err = pcall(tools.pay.send, {}) return err.message");
  CHECK_STR(r, "\"tools.pay.send was denied by the host's policy: policy rule 0 requires the "
               "scope payments:read, which the caller alice does not hold\"");
  CHECK_INT(tp_engine_set_principal(e, "alice", "payments:read, payments:write"), TP_OK);
  CHECK_STR(outcome(e, "pay.send", "{}"), "\"ok\"");
  const char *src = "return (pcall(tools.pay.send, {}))";
  tp_run *run = tp_run_create(e, src, strlen(src), NULL);
  CHECK_INT(tp_run_set_principal(run, "mallory", "payments:read"), TP_OK);
  while (tp_run_step(run, 0, 0) != TP_DONE) tp_engine_poll(e, 0);
  CHECK_HAS(tp_run_envelope(run), "\"result\":false");  /* its own scopes, not the engine's */
  tp_run_destroy(run);
  CHECK_INT(tp_engine_set_principal(NULL, "x", NULL), TP_EINVAL);
  CHECK_INT(tp_run_set_principal(NULL, "x", NULL), TP_EINVAL);
  tp_engine_destroy(e);
}

TEST(load_errors_name_the_rule_the_field_and_the_column) {
  static const struct { const char *config, *error; } cases[] = {
    { "{\"policy\":{\"rules\":[{\"tools\":\"a\",\"effect\":\"allow\"},{\"tools\":\"a\","
      "\"effect\":\"allow\"},{\"tools\":\"a\",\"effect\":\"allow\"},{\"tools\":\"a\","
      "\"effect\":\"deny\",\"where\":\"amount <= \"}]}}",
      "config: policy.rules[3].where: column 11: expected a value after '<='" },
    { "{\"policy\":{\"rules\":[{\"tools\":\"a\",\"effect\":\"allow\",\"where\":"
      "\"a == 1 and b = 2\"}]}}",
      "config: policy.rules[0].where: column 15: use == to compare ('=' alone is not an "
      "operator)" },
    { "{\"policy\":{\"rules\":[{\"tools\":\"a\",\"effect\":\"allow\",\"where\":"
      "\"name:matches('^a')\"}]}}",
      "config: policy.rules[0].where: column 6: matches needs \"regex\": true in the rule "
      "(regular expressions are opt-in)" },
    { "{\"policy\":{\"rules\":[{\"tools\":\"a\",\"effect\":\"allow\",\"where\":"
      "\"(a or b\"}]}}",
      "config: policy.rules[0].where: column 8: expected ')'" },
    { "{\"policy\":{\"rules\":[{\"tools\":\"a\",\"effect\":\"maybe\"}]}}",
      "config: /policy/rules/0/effect: expected one of \"allow\", \"deny\", \"ask\"; got "
      "\"maybe\"" },
    { "{\"policy\":{\"rules\":[{\"tools\":\"a/b\",\"effect\":\"deny\"}]}}",
      "config: policy.rules[0].tools: '/' cannot be in a tool glob (names have letters, "
      "digits, '_' and '.'; '*' matches one part, '**' any number)" },
    { "{\"policy\":{\"rules\":[{\"tools\":\"a\",\"effect\":\"allow\",\"rate\":{\"capacity\":"
      "5,\"per_second\":1,\"key\":\"user\"}}]}}",
      "config: /policy/rules/0/rate/key: expected one of \"run\", \"session\", \"principal\", "
      "\"global\"; got \"user\"" },
    { "{\"policy\":{\"default\":\"maybe\"}}",
      "config: /policy/default: expected one of \"allow\", \"deny\"; got \"maybe\"" },
    { "{\"policy\":{\"rules\":[{\"tools\":\"a\",\"effect\":\"allow\",\"wher\":\"x\"}]}}",
      "config: /policy/rules/0/wher: unknown field \"wher\" (did you mean \"where\"?); the "
      "fields are: tools, effect, where, regex, max_calls, rate, requires, reason, "
      "description" },
  };
  tp_engine *e = engine("{\"policy\":{\"rules\":[{\"tools\":\"fs.read\",\"effect\":\"allow\"}]}}");
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    CHECK_INT(tp_engine_configure(e, cases[i].config, strlen(cases[i].config)), TP_EINVAL);
    CHECK_STR(tp_engine_error(e), cases[i].error);
  }
  /* the policy before the bad configs still holds */
  CHECK_STR(outcome(e, "fs.read", "{}"), "\"ok\"");
  CHECK_STR(outcome(e, "pay.send", "{}"), "\"tool.denied\"");
  /* a new good config replaces it, and the tools' rule lists follow */
  const char *c2 = "{\"policy\":{\"rules\":[{\"tools\":\"pay.send\",\"effect\":\"allow\"}]}}";
  CHECK_INT(tp_engine_configure(e, c2, strlen(c2)), TP_OK);
  CHECK_STR(outcome(e, "fs.read", "{}"), "\"tool.denied\"");
  CHECK_STR(outcome(e, "pay.send", "{}"), "\"ok\"");
  tp_engine_destroy(e);
}

typedef struct decisions {
  int n;
  char lines[8][400];
} decisions;

static void on_decision (tp_run *r, const tp_decision *d, void *ud) {
  decisions *ds = ud;
  (void)r;
  if (ds->n < 8)
    snprintf(ds->lines[ds->n], sizeof ds->lines[0], "run=%llu seq=%llu tool=%s principal=%s "
             "rule=%d effect=%s clause=%s args=%s", (unsigned long long)d->run,
             (unsigned long long)d->seq, d->tool, d->principal, d->rule, d->effect,
             d->clause, d->args_sha256);
  ds->n++;
}

TEST(every_decision_reaches_the_callback_with_a_hash_of_the_arguments) {
  decisions ds = { 0 };
  tp_engine *e = engine("{\"policy\":{\"rules\":["
    "{\"tools\":\"pay.send\",\"effect\":\"allow\",\"where\":\"amount < 10\"},"
    "{\"tools\":\"fs.*\",\"effect\":\"allow\",\"requires\":[\"fs\"]},"
    "{\"tools\":\"github.**\",\"effect\":\"ask\"}]}}");
  CHECK_INT(tp_engine_on_decision(e, on_decision, &ds), TP_OK);
  CHECK_INT(tp_engine_set_principal(e, "alice", NULL), TP_OK);
  const char *x90 = "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
                    "xxxxxxxxxxxxxxxxx";
  char src[600];
  snprintf(src, sizeof src, "pcall(tools.pay.send, {amount = 5}) "
           "pcall(tools.pay.send, {amount = 50}) pcall(tools.fs.read, {s = '%s'}) "
           "pcall(tools.github.repos.get, {s = '%.49s'}) pcall(tools.time.now, {})", x90, x90);
  result(e, src);
  CHECK_INT(ds.n, 4);  /* time.now is no tool here: tool.unknown is not the policy's */
  CHECK_STR(ds.lines[0], "run=1 seq=1 tool=pay.send principal=alice rule=0 effect=allow "
            "clause=amount < 10 args=7e84cbf0f7a7c92c037058665d66152f8eb8580ab2534e52c877bccc"
            "eb9cc7bf");
  CHECK_HAS(ds.lines[1], "run=1 seq=2 tool=pay.send principal=alice rule=0 effect=deny "
            "clause=amount < 10 args=");
  CHECK_STR(ds.lines[2], "run=1 seq=3 tool=fs.read principal=alice rule=1 effect=deny "
            "clause=requires args=2f1d792e3e9ca229c8f203ddb7b1285020672bb3cb9207fcca694b46d4f5"
            "d9e4");
  CHECK_STR(ds.lines[3], "run=1 seq=4 tool=github.repos.get principal=alice rule=2 effect=ask "
            "clause= args=a716da8c4dd6510d2b3e7477ac36659e5452d5ece8eef5523b8441b7b5202bf8");
  CHECK_INT(tp_engine_on_decision(e, NULL, NULL), TP_OK);
  CHECK_INT(tp_engine_on_decision(NULL, on_decision, NULL), TP_EINVAL);
  tp_engine_destroy(e);
}

/* The policy part of engine/host/config.schema.json ($defs policy and policyRule, taken
** out as a schema of its own) compiles under tidepool's own validator and says yes and
** no where the loader does (it is registered as the input schema of a tool, and configs
** are passed as that tool's arguments). A glob's characters are left to the loader,
** whose message explains them. */
TEST(the_policy_schema_agrees_with_the_loader) {
  json_error_t jerr;
  json_t *all = json_load_file("engine/host/config.schema.json", 0, &jerr);
  CHECK(all != NULL);
  if (all == NULL) return;
  json_t *defs = json_object_get(all, "$defs");
  json_t *part = json_deep_copy(json_object_get(defs, "policy"));
  CHECK(part != NULL);
  if (part == NULL) { json_decref(all); return; }
  json_object_set_new(part, "$defs", json_pack("{sO}", "policyRule",
                                               json_object_get(defs, "policyRule")));
  char *schema = json_dumps(part, JSON_COMPACT);
  json_decref(part);
  json_decref(all);
  tp_engine *e = tp_engine_create();
  tp_tool_def d = { 0 };
  d.name = "check.policy";
  d.input_schema = schema;
  d.handler = answer;
  CHECK_INT(tp_engine_add_tool(e, &d), TP_OK);
  static const struct { const char *policy; int ok; } cases[] = {
    { "{default = 'allow', rules = {{tools = 'github.**', effect = 'allow', where = 'x > 1', "
      "max_calls = 5, rate = {capacity = 10, per_second = 0.5, key = 'principal'}, "
      "requires = {'gh'}, reason = 'r', regex = false}}}", 1 },
    { "{rules = {{tools = 'a', effect = 'maybe'}}}", 0 },
    { "{rules = {{tools = 'a', effect = 'allow', wher = 'x'}}}", 0 },
    { "{rules = {{tools = 'a', effect = 'allow', max_calls = -1}}}", 0 },
    { "{rules = {{tools = 'a', effect = 'allow', rate = {capacity = 0, per_second = 1}}}}", 0 },
    { "{rules = {{tools = 'a', effect = 'allow', rate = {capacity = 1, per_second = 1, "
      "key = 'user'}}}}", 0 },
    { "{default = 'maybe'}", 0 },
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char src[600], config[700];
    snprintf(src, sizeof src, "local ok, err = pcall(tools.check.policy, %s) "
             "return ok and 'ok' or err.code", cases[i].policy);
    CHECK_STR(result(e, src), cases[i].ok ? "\"ok\"" : "\"tool.invalid_input\"");
    /* the loader agrees: the same policy as a config section */
    snprintf(src, sizeof src, "return json.encode(%s)", cases[i].policy);
    const char *text = result(e, src);
    char *inner = strdup(text + 1);  /* the JSON string's contents, unescaped below */
    size_t k = 0;
    for (size_t j = 0; inner[j] && inner[j + 1]; j++) {
      if (inner[j] == '\\') j++;
      inner[k++] = inner[j];
    }
    inner[k] = '\0';
    snprintf(config, sizeof config, "{\"policy\":%s}", inner);
    free(inner);
    tp_engine *e2 = tp_engine_create();
    CHECK_INT(tp_engine_configure(e2, config, strlen(config)), cases[i].ok ? TP_OK : TP_EINVAL);
    tp_engine_destroy(e2);
  }
  tp_engine_destroy(e);
  free(schema);
}

/* The hash the decisions carry: SHA-256 of known texts; a context used for one hash
** gives the next the digest a fresh one gives (libcrypto's SHA-256 functions and the
** EVP context each thread keeps agree at every length around the block edges, in any
** order); and the hex is two lower-case digits a byte. */
TEST(the_arguments_hash_is_the_same_fresh_and_reused) {
  char h[65], g[65];
  tp__sha256_hex("", 0, h);
  CHECK_STR(h, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  tp__sha256_hex("abc", 3, h);
  CHECK_STR(h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  tp__sha256_hex_evp("abc", 3, g);
  CHECK_STR(g, h);
  const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  tp__sha256_hex(two, strlen(two), h);
  CHECK_STR(h, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  static char text[1100];
  for (size_t i = 0; i < sizeof text; i++) text[i] = (char)(i * 131 + 7);
  int differ = 0;
  for (size_t n = 0; n <= sizeof text; n += n < 200 ? 1 : 97) {
    tp__sha256_hex(text, n, h);
    tp__sha256_hex_evp(text, n, g);
    differ += strcmp(h, g) != 0;
    tp__sha256_hex_evp(text, n, g);  /* the kept context again, right after itself */
    differ += strcmp(h, g) != 0;
    tp__sha256_hex(text, n, g);
    differ += strcmp(h, g) != 0;
  }
  CHECK_INT(differ, 0);
  unsigned char all[256];
  char hex[513], want[513];
  for (int i = 0; i < 256; i++) {
    all[i] = (unsigned char)i;
    snprintf(want + 2 * i, 3, "%02x", i);
  }
  tp__hex(all, sizeof all, hex);
  CHECK_STR(hex, want);
}

int main (int argc, char **argv) {
  tp_test_args(argc, argv);
  RUN(glob_star_matches_one_part_and_double_star_any_number);
  RUN(deny_beats_ask_beats_allow_and_the_default_decides_the_rest);
  RUN(an_allow_rule_whose_condition_fails_denies_naming_the_clause_and_the_value);
  RUN(policy_decides_before_the_schema_and_before_the_embedders_hook);
  RUN(max_calls_counts_per_run);
  RUN(a_bucket_refills_at_its_rate_on_the_fake_clock);
  RUN(buckets_are_kept_per_run_session_and_principal);
  RUN(requires_denies_a_caller_without_the_scopes);
  RUN(load_errors_name_the_rule_the_field_and_the_column);
  RUN(every_decision_reaches_the_callback_with_a_hash_of_the_arguments);
  RUN(the_arguments_hash_is_the_same_fresh_and_reused);
  RUN(the_policy_schema_agrees_with_the_loader);
  return tp_test_end();
}
