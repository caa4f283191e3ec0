/*
** test_policy_text.c: the config policy decides a call on its arguments' JSON text (the
** codec's, with no tree made) exactly as it decides on the jansson tree. Every policy of
** a matrix of conditions (every clause form, each as an allow, a deny and an ask rule)
** decides every argument value of a list of edge cases (nested objects, arrays, unicode
** and escapes, -0, 1.0, 2^53, the integer limits, missing paths, wrong types, a 100 kB
** string) three ways: on the text, on the tree (tp__policy_text_off) and with the codec
** off (tp__codec_off: the tree of the script's table, as before the codec). The script's
** outcome (the error code and message) and every decision the callback sees (rule,
** effect, clause, the arguments' hash) must be the same byte for byte.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tidepool.h"
#include <jansson.h>

#include "tp_test.h"
#include "calls.h"
#include "codec.h"
#include "policy.h"

/* What one way of deciding gave, over a run: the decisions, then the script's outcome. */
typedef struct trace { char *buf; size_t len, cap; } trace;

static void put (trace *t, const char *s) {
  size_t n = strlen(s);
  if (t->len + n + 1 > t->cap) {
    t->cap = (t->len + n + 1) * 2;
    t->buf = realloc(t->buf, t->cap);
  }
  memcpy(t->buf + t->len, s, n + 1);
  t->len += n;
}

static void on_decision (tp_run *r, const tp_decision *d, void *ud) {
  (void)r;
  char line[1400];
  snprintf(line, sizeof line, "decision rule=%d effect=%s clause=%s args=%s\n", d->rule,
           d->effect, d->clause, d->args_sha256);
  put(ud, line);
}

static int calls, treeless;  /* allowed calls, and those of them with no tree made */
static void answer (tp_call *c, void *ud) {
  (void)ud;
  calls++;
  treeless += c->args == NULL && c->args_fast;
  tp_call_complete(c, "{\"ok\":true}", 0);
}

/* Every clause form, on every kind of path. */
static const char *const conditions[] = {
  "a == 1", "a ~= 1", "a < 10", "a <= -1", "a > 0.5", "a >= 1e300", "a == 1.0", "a == -0",
  "a == 0", "a > 9007199254740992", "a == 9223372036854775807",
  "a == -9223372036854775808", "a < -9223372036854775807", "a == 'x'", "a < 'm'",
  "a >= ''", "a == true", "a == false", "a == null", "a ~= null", "a", "not a",
  "a in {1, 'x', true, null}", "a in {'EUR', 'USD'}", "a in {2.5, -0}", "#a <= 3",
  "#a == 0", "#a > 1", "a:starts_with('a')", "a:ends_with('c')", "a starts_with ''",
  "a:contains('\xc3\xa9')", "a:contains('')", "a:contains(2)", "a:contains('b')",
  "a:contains(null)", "a:contains(true)", "a:matches('^[a-z]+$')", "a:matches('\\\\d')",
  "exists(a)", "a exists", "not exists(a) or a == false", "exists(o.y.z)", "o.x > 3",
  "o.y.z == 'deep'", "o.y.z:starts_with('de')", "#o <= 2", "#o.y == 1", "arr[1] == 1",
  "arr[2] == 'b'", "arr[3] ~= null", "arr[1].k == 1", "#arr >= 2", "arr:contains(2)",
  "o['we\"ird'] == 1", "o['k\\n'] == 'v'", "o['\xc3\xa9t\xc3\xa9'] == 'summer'",
  "s == 'a\"b\\\\c'", "s == 'line\\nbreak'", "s:contains('\\t')", "#s == 2",
  "s:ends_with('\xf0\x9f\x98\x80')", "s < 'zz'", "big:starts_with('zzz')", "#big > 99999",
  "(a == 1 or b == 2) and not (s == 'q')", "a == 1 and b == 2 or c", "not (a and b)",
  "x == 1 and (y == 2 or z == 3)",
};

/* Argument values: the script's table constructors. */
static const char *const args[] = {
  "{}", "{b = 1}", "{a = 1}", "{a = 2}", "{a = -1}", "{a = 0}", "{a = -0.0}", "{a = 0.0}",
  "{a = 1.0}", "{a = 0.5}", "{a = 0.1 + 0.2}", "{a = 2^53}", "{a = 2^53 + 1}",
  "{a = 9007199254740993}", "{a = math.maxinteger}", "{a = math.mininteger}",
  "{a = 1e300}", "{a = 1e400}", "{a = -1e400}", "{a = 0/0}", "{a = 5e-324}", "{a = 'x'}",
  "{a = ''}", "{a = 'abc'}", "{a = 'a1c'}", "{a = 'ABC'}", "{a = 'm'}", "{a = '1'}",
  "{a = 'EUR'}", "{a = '\xc3\xa9t\xc3\xa9'}", "{a = '\\u{1F600}'}", "{a = 'a\\0b'}",
  "{a = '\\1\\31\\127'}", "{a = 'q\"uo\\\\te'}", "{a = '\\xff'}", "{a = true}",
  "{a = false}", "{a = json.null}", "{a = {1, 2, 3}}", "{a = {'b', 'c'}}",
  "{a = {1, {2}, {x = 2}}}", "{a = {k = 1}}", "{a = {}}", "{a = {true, json.null}}",
  "{a = {b = {c = {d = {e = 1}}}}}",
  "{o = {x = 5, y = {z = 'deep'}}}", "{o = {x = '5', y = {z = 'DEEP'}}}",
  "{o = {x = 2, y = 'z'}}", "{o = {['we\"ird'] = 1, ['k\\n'] = 'v'}}",
  "{o = {['\xc3\xa9t\xc3\xa9'] = 'summer'}}", "{o = 'no'}", "{o = {1, 2}}",
  "{arr = {1, 'b', 3}}", "{arr = {1}}", "{arr = {{k = 1}, 2}}", "{arr = {'1', 'b'}}",
  "{arr = {k = 1}}", "{arr = 'abc'}",
  "{s = 'a\"b\\\\c'}", "{s = 'line\\nbreak'}", "{s = 'tab\\there'}", "{s = '\xc3\xa9\xc3\xa9'}",
  "{s = 'x\\u{1F600}'}", "{s = 'a\\0'}", "{s = 'q'}",
  "{big = string.rep('z', 100000)}", "{big = string.rep('\\n', 100001)}",
  "{a = 1, b = 2, c = true, s = 'q'}", "{a = 1, b = 3, c = false}", "{a = 'x', b = 2}",
  "{x = 1, y = 2, z = 3}", "{x = 1, y = '2', z = 3}", "{x = 1}",
  "{a = 1, b = 2, c = 3, d = 4, e = 5, f = 6, g = 7, h = 8, i = 9, j = 10}",
};

static tp_engine *policy_engine (const char *effect, const char *where, trace *t) {
  json_t *rule = json_pack("{s:s, s:s, s:s, s:b}", "tools", "t.x", "effect", effect,
                           "where", where, "regex", 1);
  json_t *cfg = json_pack("{s:{s:s, s:[o]}}", "policy", "default",
                          strcmp(effect, "allow") == 0 ? "deny" : "allow", "rules", rule);
  char *text = json_dumps(cfg, 0);
  json_decref(cfg);
  tp_engine *e = tp_engine_create();
  tp_tool_def d = { .name = "t.x", .description = "test tool", .handler = answer };
  CHECK_INT(tp_engine_add_tool(e, &d), TP_OK);
  CHECK_INT(tp_engine_configure(e, text, strlen(text)), TP_OK);
  CHECK_STR(tp_engine_error(e), "");
  CHECK_INT(tp_engine_on_decision(e, on_decision, t), TP_OK);
  free(text);
  return e;
}

/* Runs src on e and appends its outcome to t. */
static void outcome (tp_engine *e, const char *src, trace *t) {
  char *env = NULL;
  CHECK_INT(tp_engine_run(e, src, strlen(src), NULL, &env, NULL), TP_OK);
  const char *r = env ? strstr(env, "\"result\":") : NULL;
  char *cut = r ? strstr(r, ",\"logs\":") : NULL;
  if (cut) *cut = '\0';
  put(t, r ? r : env ? env : "(none)");
  put(t, "\n");
  tp_free(env);
}

TEST(the_text_and_the_tree_decide_every_policy_and_argument_alike) {
  static const char *const effects[] = { "allow", "deny", "ask" };
  size_t nc = sizeof conditions / sizeof conditions[0], na = sizeof args / sizeof args[0];
  int differ = 0, text_calls = 0, text_treeless = 0, tree_treeless = 0;
  char src[512];
  for (size_t ef = 0; ef < 3; ef++)
    for (size_t ci = 0; ci < nc; ci++) {
      trace ways[3] = { { 0 } };
      tp_engine *e = policy_engine(effects[ef], conditions[ci], &ways[0]);
      for (int w = 0; w < 3; w++) {
        tp_engine_on_decision(e, on_decision, &ways[w]);
        tp__policy_text_off = w == 1;
        tp__codec_off = w == 2;
        for (size_t ai = 0; ai < na; ai++) {
          snprintf(src, sizeof src, "local ok, err = pcall(tools.t.x, %s) "
                   "return ok and 'ok' or err.code .. ': ' .. err.message", args[ai]);
          calls = treeless = 0;
          outcome(e, src, &ways[w]);
          if (w == 0) { text_calls += calls; text_treeless += treeless; }
          if (w == 1) tree_treeless += treeless;
        }
      }
      tp__policy_text_off = tp__codec_off = 0;
      for (int w = 1; w < 3; w++)
        if (strcmp(ways[0].buf, ways[w].buf) != 0 && differ++ < 3) {
          fprintf(stderr, "%s where `%s`, %s differs from the text:\n--- text\n%s--- %s\n"
                  "%s", effects[ef], conditions[ci], w == 1 ? "the tree" : "codec off",
                  ways[0].buf, w == 1 ? "tree" : "codec off", ways[w].buf);
        }
      for (int w = 0; w < 3; w++) free(ways[w].buf);
      tp_engine_destroy(e);
    }
  CHECK_INT(differ, 0);
  /* the text way made no tree for most allowed calls (a message's value, or a string of
  ** the text it declines, makes one), and the tree way made one for each */
  CHECK(text_calls > 1000);
  CHECK(text_treeless > text_calls * 9 / 10);
  CHECK_INT(tree_treeless, 0);
}

/* The bench's kind of call: a policy of several rules that all hold decides on the text
** alone, and the audit log still gets the hash of the arguments' text. */
TEST(an_allowed_call_makes_no_tree_and_its_hash_is_the_texts) {
  trace t = { 0 };
  tp_engine *e = tp_engine_create();
  tp_tool_def d = { .name = "t.x", .description = "test tool", .handler = answer };
  CHECK_INT(tp_engine_add_tool(e, &d), TP_OK);
  const char *cfg = "{\"policy\":{\"default\":\"deny\",\"rules\":["
    "{\"tools\":\"t.*\",\"effect\":\"allow\",\"where\":\"id >= 0 and name:starts_with('x') "
    "and #name <= 64\"},"
    "{\"tools\":\"t.x\",\"effect\":\"deny\",\"where\":\"flag == false and id > 1000000000\"},"
    "{\"tools\":\"**\",\"effect\":\"allow\",\"where\":\"not exists(admin) or admin == false\"},"
    "{\"tools\":\"t.**\",\"effect\":\"ask\",\"where\":\"name in {'danger', 'rm', 'drop'}\"}]}}";
  CHECK_INT(tp_engine_configure(e, cfg, strlen(cfg)), TP_OK);
  CHECK_INT(tp_engine_on_decision(e, on_decision, &t), TP_OK);
  calls = treeless = 0;
  outcome(e, "return tools.t.x{id = 7, name = 'x\\ty', flag = true}.ok", &t);
  CHECK_INT(calls, 1);
  CHECK_INT(treeless, 1);
  CHECK_STR(t.buf, "decision rule=0 effect=allow clause=id >= 0 and name:starts_with('x') "
                   "and #name <= 64 args=c9c4cc31bcd2faa7f4b842becb292602873b5f0c245e4f272"
                   "8ef3b164f2f9fae\n\"result\":true\n");  /* sha256 of {"flag":true,"id":7,"name":"x\\ty"} */
  free(t.buf);
  tp_engine_destroy(e);
}

int main (int argc, char **argv) {
  tp_test_args(argc, argv);
  RUN(the_text_and_the_tree_decide_every_policy_and_argument_alike);
  RUN(an_allowed_call_makes_no_tree_and_its_hash_is_the_texts);
  return tp_test_end();
}
