/*
** test_codec.c: the codec between Lua values and JSON text without a tree
** (engine/core/codec.c), against the tree path it stands in for (engine/lib/json.c and
** jansson). Differential: the same values and texts, edge cases and seeded random ones,
** through both; where the codec takes a value it must give the same text, cost and text
** count; where it takes an answer it must push the same Lua values (types, float bits,
** tags, key order); whatever it declines, the tree path handles. Then whole runs through
** an engine with the codec on and off give the same envelopes (results, errors, calls).
*/
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "lua.h"
#include "lauxlib.h"
#include "lualib.h"

#include "json.h"
#include "schema.h"
#include "codec.h"
#include "tidepool.h"
#include "tp_test.h"

static lua_State *new_state (void) {
  lua_State *L = luaL_newstate();
  luaL_openlibs(L);
  tp__json_open(L);
  lua_setglobal(L, "json");
  return L;
}

static int eval (lua_State *L, const char *code) {
  if (luaL_loadstring(L, code) != LUA_OK || lua_pcall(L, 0, 1, 0) != LUA_OK) {
    printf("#   lua: %s\n", lua_tostring(L, -1));
    lua_pop(L, 1);
    return 0;
  }
  return 1;
}

static size_t charged;
static int count_charge (void *ud, size_t n) { (void)ud; charged += n; return 0; }
static void count_refund (void *ud, size_t n) { (void)ud; charged -= n; }

/* The containers' sizes the encoder counted as it wrote (ct->counts) are there exactly
** when the decoder's own check takes the text with at most TP_CODEC_COUNTS containers,
** and are what that check and tp__codec_answer_counts find. */
static size_t counted_texts;
static void check_counts (const tp__codec_text *ct, const char *what) {
  size_t ncont = tp__codec_answer_ok(ct->text, ct->len);
  int want = ncont > 0 && ncont <= TP_CODEC_COUNTS;
  if ((ct->counts != NULL) != want) {
    TP_FAIL_AT("%s: counts %s, the check gives %zu containers for %s", what,
               ct->counts ? "given" : "not given", ncont, ct->text);
    return;
  }
  if (!want) return;
  counted_texts++;
  if (ct->ncont != ncont) TP_FAIL_AT("%s: %zu containers counted, %zu found", what, ct->ncont, ncont);
  int found[TP_CODEC_COUNTS];
  tp__codec_answer_counts(ct->text, ct->len, found);
  for (size_t i = 0; i < ncont && i < ct->ncont; i++)
    if (found[i] != ct->counts[i])
      TP_FAIL_AT("%s: container %zu counted %d, found %d in %s", what, i, ct->counts[i],
                 found[i], ct->text);
}

/* The value on top through both encoders: returns 1 when the codec took it (and checks it
** agrees), 0 when it declined (then the tree path must either fail or meet an empty table
** or a top-level array). Pops the value. */
static int enc_both (lua_State *L, const char *what) {
  tp_json_budget b = { count_charge, count_refund, NULL, NULL, NULL };
  tp_json_opts o;
  tp_json_err err;
  memset(&o, 0, sizeof o);
  o.budget = &b;
  charged = 0;
  json_t *tree = tp__json_from_lua_ex(L, -1, &o, &err);
  char *old = tree ? tp__json_dumpsn(tree, NULL) : NULL;
  tp__codec_text ct;
  int top = lua_gettop(L);
  int took = tp__codec_encode(L, -1, 0, 0, &ct);
  if (lua_gettop(L) != top) TP_FAIL_AT("%s: the codec changed the stack", what);
  if (took) {
    if (old == NULL || strcmp(old, ct.text) != 0)
      TP_FAIL_AT("%s: codec text %s, tree text %s", what, ct.text, old ? old : err.message);
    if (ct.len != strlen(ct.text)) TP_FAIL_AT("%s: length %zu", what, ct.len);
    if (ct.cost != o.cost) TP_FAIL_AT("%s: cost %zu, tree %zu", what, ct.cost, o.cost);
    if (ct.bytes != o.bytes) TP_FAIL_AT("%s: bytes %zu, tree %zu", what, ct.bytes, o.bytes);
    if (tree && ct.cost != tp__json_tree_cost(tree))
      TP_FAIL_AT("%s: cost %zu, tree_cost %zu", what, ct.cost, tp__json_tree_cost(tree));
    check_counts(&ct, what);
    free(ct.text);
  }
  free(old);
  json_decref(tree);
  lua_pop(L, 1);
  return took;
}

static int enc_expr (lua_State *L, const char *expr) {
  char code[4096];
  snprintf(code, sizeof code, "return %s", expr);
  if (!eval(L, code)) { TP_FAIL_AT("cannot evaluate %s", expr); return -1; }
  return enc_both(L, expr);
}

TEST(the_codec_writes_the_tree_paths_text_for_plain_values) {
  lua_State *L = new_state();
  static const char *const fast[] = {
    "{id = 1, name = 'x', flag = true}",
    "{a = 1.0, b = -0.0, c = 0.1, d = 1e300, e = 5e-324, f = 2^53, g = -2^63}",
    "{big = math.maxinteger, small = math.mininteger, z = 0, n = -7}",
    "{s = 'caf\\u{e9} \\u{1F600} \\0 nul', q = '\"quoted\" \\\\ back\\n\\t\\r\\b\\f\\1\\31'}",
    "{['odd key'] = 1, ['k\"q'] = 2, ['\\u{e9}'] = 3, [''] = 4}",
    "{list = {1, 2, 3}, nested = {a = {b = {c = {d = {}}}}}}",
    "{tagged = json.array({}), t2 = json.array({1, 'a', false}), n = json.null}",
    "{z = 1, y = 2, x = 3, w = 4, v = 5, u = 6, t = 7, s = 8, r = 9, q = 10}",
    "{b = 1, ba = 2, ab = 3, a = 4, ['a\\0'] = nil, aa = 5}",
    "setmetatable({k = 1}, {__index = function() error('ran') end, __pairs = error})",
    /* the arguments' own {}: an object whatever the schema (the tree path keeps it one) */
    "{}", "setmetatable({}, json.object)", "setmetatable({}, {__index = error})",
  };
  int took = 0;
  for (size_t i = 0; i < sizeof fast / sizeof fast[0]; i++) {
    int t = enc_expr(L, fast[i]);
    if (t == 0 && i != 5) TP_FAIL_AT("declined %s", fast[i]);
    took += t == 1;
  }
  CHECK(took >= 12);  /* the one with {} inside declines: {} or [] is the schema's call */
  lua_close(L);
}

TEST(the_codec_declines_what_the_tree_path_reports_or_shapes) {
  lua_State *L = new_state();
  static const char *const declined[] = {
    "json.array({})", "{1, 2}", "{a = {}}", "{a = setmetatable({}, json.object)}", "{a = 0/0}", "{a = math.huge}", "{a = -math.huge}",
    "{a = '\\xff'}", "{['\\xff'] = 1}", "{['a\\0b'] = 1}", "{a = print}",
    "{a = coroutine.create(print)}", "{[1] = 1, a = 2}", "{a = 2, [1] = 1}",
    "{a = {[2] = 1}}", "{a = {[0] = 1}}", "{[true] = 1}", "{[1.5] = 1}",
    "(function() local t = {} t.self = t return t end)()",
    "(function() local t = {} for i = 1, 40 do t = {t = t} end return t end)()",
    "(function() local t = {} for i = 1, 40 do t['k' .. i] = i end return t end)()",
    "(function() local t = json.array({}) rawset(t, 'x', 1) return {a = t} end)()",
    "{a = io.stdout}", "{a = string.rep('x', 70000)}",
  };
  for (size_t i = 0; i < sizeof declined / sizeof declined[0]; i++)
    if (enc_expr(L, declined[i]) != 0) TP_FAIL_AT("took %s", declined[i]);
  lua_close(L);
}

/* A seeded generator of Lua values in the sandbox's shapes. */
static const char gen_lua[] =
  "local seed = ...\n"
  "local function rnd(n) seed = (seed * 1103515245 + 12345) % 2147483648 return seed % n end\n"
  "local strs = {'', 'a', 'x y', 'caf\\u{e9}', '\\u{1F600}', 'q\"\\\\', 'nl\\n', '\\0', "
  "  'k1', 'k2', 'k10', 'K', '_', '\\u{7ff}\\u{800}', 'ctl\\1\\31\\127'}\n"
  "local nums = {0, 1, -1, 1.0, -0.0, 0.5, 1e300, -1e-300, 5e-324, 2^53, 2^53 + 1.0, "
  "  math.maxinteger, math.mininteger, 123456789012345678, 0.1 + 0.2, 1/3, 100.0}\n"
  "local keys = {'', 'a', 'x y', 'caf\\u{e9}', 'q\"\\\\', 'nl\\n', 'k1', 'k10', 'K', '_'}\n"
  "local function value(d)\n"
  "  local k = rnd(d > 4 and 6 or 9)\n"
  "  if k == 0 then return strs[rnd(#strs) + 1]\n"
  "  elseif k == 1 then return nums[rnd(#nums) + 1]\n"
  "  elseif k == 2 then return rnd(2) == 0\n"
  "  elseif k == 3 then return json.null\n"
  "  elseif k == 4 then return rnd(2000000) - 1000000\n"
  "  elseif k == 5 then return rnd(1000) / 7\n"
  "  elseif k == 6 or k == 7 then local t = {} for i = 1, rnd(5) + 1 do "
  "    t[keys[rnd(#keys) + 1] .. rnd(3)] = value(d + 1) end return t\n"
  "  else local t = json.array({}) for i = 1, rnd(4) do t[i] = value(d + 1) end return t end\n"
  "end\n"
  "local t = {} for i = 1, rnd(6) + 1 do t[keys[rnd(#keys) + 1] .. i] = value(1) end\n"
  "return t\n";

TEST(random_values_give_the_same_text_cost_and_count_both_ways) {
  lua_State *L = new_state();
  int took = 0;
  for (int seed = 1; seed <= 3000; seed++) {
    if (luaL_loadstring(L, gen_lua) != LUA_OK) { TP_FAIL_AT("%s", lua_tostring(L, -1)); break; }
    lua_pushinteger(L, seed);
    if (lua_pcall(L, 1, 1, 0) != LUA_OK) { TP_FAIL_AT("%s", lua_tostring(L, -1)); break; }
    char what[32];
    snprintf(what, sizeof what, "seed %d", seed);
    took += enc_both(L, what);
  }
  CHECK(took > 2500);  /* the generator makes no empty tables: nearly all are taken */
  CHECK(counted_texts > 500);  /* and many of them need no scan to be pushed */
  lua_close(L);
}

/* Deep equality of the values at a and b: types exact (integer or float, float bits),
** metatables the same, keys met in the same order by lua_next (the same table layout). */
static int same_value (lua_State *L, int a, int b, int depth) {
  a = lua_absindex(L, a);
  b = lua_absindex(L, b);
  if (lua_type(L, a) != lua_type(L, b)) return 0;
  switch (lua_type(L, a)) {
    case LUA_TNUMBER: {
      if (lua_isinteger(L, a) != lua_isinteger(L, b)) return 0;
      if (lua_isinteger(L, a)) return lua_tointeger(L, a) == lua_tointeger(L, b);
      double x = lua_tonumber(L, a), y = lua_tonumber(L, b);
      return memcmp(&x, &y, sizeof x) == 0;
    }
    case LUA_TSTRING: {
      size_t n, m;
      const char *x = lua_tolstring(L, a, &n), *y = lua_tolstring(L, b, &m);
      return n == m && memcmp(x, y, n) == 0;
    }
    case LUA_TTABLE: {
      if (depth > 200 || !lua_checkstack(L, 8)) return 0;
      int ma = lua_getmetatable(L, a), mb = lua_getmetatable(L, b);
      int same_mt = ma == mb && (!ma || lua_rawequal(L, -1, -2));
      lua_pop(L, ma + mb);
      if (!same_mt || lua_rawlen(L, a) != lua_rawlen(L, b)) return 0;
      lua_pushnil(L);
      lua_pushnil(L);                       /* ka kb */
      for (;;) {
        lua_pushvalue(L, -2);
        if (!lua_next(L, a)) {              /* ka kb */
          int more = lua_next(L, b);        /* ka [kb' vb] */
          lua_pop(L, more ? 3 : 1);
          return !more;
        }                                   /* ka kb ka' va */
        lua_pushvalue(L, -3);
        if (!lua_next(L, b)) { lua_pop(L, 4); return 0; }  /* ka kb ka' va kb' vb */
        int ok = same_value(L, -4, -2, depth + 1) && same_value(L, -3, -1, depth + 1);
        lua_pop(L, 1);                      /* ka kb ka' va kb' */
        lua_replace(L, -4);                 /* ka kb' ka' va */
        lua_pop(L, 1);                      /* ka kb' ka' */
        lua_replace(L, -3);                 /* ka' kb' */
        if (!ok) { lua_pop(L, 2); return 0; }
      }
    }
    default:
      return lua_rawequal(L, a, b);
  }
}

/* Pushes the tree path's value of text s (jansson, then tp__json_push); 0 on a parse
** error. */
static int push_tree (lua_State *L, const char *s, size_t len) {
  json_t *v = tp__json_loads(s, len, NULL);
  if (v == NULL) return 0;
  tp__json_push(L, v, 0);
  json_decref(v);
  return 1;
}

static int push_codec (lua_State *L, const char *s, size_t len) {
  size_t n = tp__codec_answer_ok(s, len);
  if (n == 0) return 0;
  int *counts = malloc(n * sizeof *counts);
  tp__codec_answer_counts(s, len, counts);
  tp__codec_push(L, s, len, counts, 0);
  free(counts);
  return 1;
}

/* Text s through both decoders; returns 1 when the codec took it. A text the codec takes
** must be one jansson takes, with the same value. */
static int dec_both (lua_State *L, const char *s, size_t len, const char *what) {
  int top = lua_gettop(L);
  int tree = push_tree(L, s, len);
  int took = push_codec(L, s, len);
  if (took && !tree) TP_FAIL_AT("%s: the codec took text jansson refuses: %.*s", what,
                                (int)(len > 200 ? 200 : len), s);
  else if (took && !same_value(L, -1, -2, 0))
    TP_FAIL_AT("%s: the values differ for %.*s", what, (int)(len > 200 ? 200 : len), s);
  lua_settop(L, top);
  return took;
}

static const char *const answers[] = {
  "{\"ok\":true}", "[]", "{}", " {\"a\" : [1, 2.5, -0.0, -0, 1e2, 1E-2, 0.1] } \n",
  "{\"s\":\"caf\xc3\xa9 \xf0\x9f\x98\x80\",\"e\":\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"}",
  "{\"n\":null,\"t\":true,\"f\":false,\"o\":{},\"a\":[[],[{}]]}",
  "{\"big\":999999999999999999,\"neg\":-999999999999999999,\"r\":1.7976931348623157e308}",
  "{\"tiny\":4.9e-324,\"under\":1e-400,\"x\":123456789.125}",
  "[1,\"two\",{\"three\":3},[4],null,false]",
  "{\"z\":1,\"y\":2,\"x\":3,\"w\":4,\"v\":5,\"u\":6,\"t\":7,\"s\":8,\"r\":9,\"q\":10,\"p\":11}",
  "\t[\r\n1\r\n]\t",
  /* \u escapes, as Python's json.dumps writes every non-ASCII character */
  "{\"a\":\"\\u0041\",\"e\":\"caf\\u00e9\",\"E\":\"\\u00E9\\u00c9\",\"w\":\"\\u07ff\\u0800\\uffff\"}",
  "{\"pair\":\"\\ud83d\\ude00\",\"max\":\"\\udbff\\udfff\",\"min\":\"\\ud800\\udc00\"}",
  "[\"\\u0000\",\"a\\u0000b\",\"\\u0001\\u001f\\n\\u007f\",\"\\\"\\u005c\\/\"]",
  "{\"mixed\":\"\\t\\u00e9\u00e9\\ud83d\\ude00x\",\"k\":[\"\\u2028\\u2029\"]}",
};

TEST(answers_push_the_same_values_as_jansson) {
  lua_State *L = new_state();
  for (size_t i = 0; i < sizeof answers / sizeof answers[0]; i++)
    if (!dec_both(L, answers[i], strlen(answers[i]), "answer"))
      TP_FAIL_AT("declined %s", answers[i]);
  /* declined: not JSON, or what the tree path says or decides */
  static const char *const declined[] = {
    "", "1", "\"s\"", "null", "{\"a\":1,\"a\":2}", "{\"\\u0041\":1}", "{\"\\u0000\":1}",
    "[\"\\ud83d\"]", "[\"\\ude00\"]", "[\"\\ud83d\\u0041\"]", "[\"\\ude00\\ud83d\"]",
    "[\"\\ud83dx\"]", "[\"\\u00g1\"]", "[\"\\u12\"]", "[\"\\u\"]", "[\"\\U0041\"]",
    "{\"a\":1}x", "{\"a\":01}", "{\"a\":1.}", "{\"a\":.5}", "{\"a\":1e}", "{\"a\":+1}",
    "{\"a\":9223372036854775807}", "{\"a\":1e400}", "{\"a\":-1e400}", "{\"a\":\"\x01\"}",
    "{\"a\":\"\xff\"}", "{\"a\":\"\xed\xa0\x80\"}", "{\"a\":\"\xc0\xaf\"}", "[1,]", "{,}",
    "{\"a\" 1}", "{a:1}", "[tru]", "[nul]", "[1 2]", "{\"a\":1", "[", "{\"a\":[}",
    "[\"\\x\"]", "[NaN]", "[Infinity]", "{\"a\":1}\0",
  };
  for (size_t i = 0; i < sizeof declined / sizeof declined[0]; i++) {
    size_t len = strlen(declined[i]) + (strcmp(declined[i], "{\"a\":1}") == 0);
    if (dec_both(L, declined[i], len, "declined")) TP_FAIL_AT("took %s", declined[i]);
  }
  char deep[300];  /* past the codec's 64 levels: jansson's tree and its push decide */
  memset(deep, '[', 100);
  memset(deep + 100, ']', 100);
  if (dec_both(L, deep, 200, "deep")) TP_FAIL_AT("took 100 levels");
  CHECK(dec_both(L, deep + 40, 120, "60 deep") == 1);
  lua_close(L);
}

TEST(random_answers_and_their_mutations_push_the_same_values) {
  lua_State *L = new_state();
  int took = 0, mutated_taken = 0;
  uint32_t r = 12345;
  for (int seed = 1; seed <= 2000; seed++) {
    if (luaL_loadstring(L, gen_lua) != LUA_OK) { TP_FAIL_AT("%s", lua_tostring(L, -1)); break; }
    lua_pushinteger(L, seed);
    if (lua_pcall(L, 1, 1, 0) != LUA_OK) { TP_FAIL_AT("%s", lua_tostring(L, -1)); break; }
    json_t *v = tp__json_from_lua(L, -1, 0, 0, NULL);
    lua_pop(L, 1);
    size_t len;
    char *text = v ? tp__json_dumpsn(v, &len) : NULL;
    json_decref(v);
    if (text == NULL) { TP_FAIL_AT("seed %d: no text", seed); continue; }
    took += dec_both(L, text, len, "random");
    for (int m = 0; m < 8; m++) {  /* a byte changed, dropped or cut: never a wrong value */
      char *t = malloc(len + 1);
      memcpy(t, text, len + 1);
      size_t tl = len;
      r = r * 1664525u + 1013904223u;
      size_t at = (r >> 8) % len;
      static const char bytes[] = "{}[],:\"\\ 0123456789.eE+-ntfalsru\x80\xc3\xff";
      switch (r % 3) {
        case 0: t[at] = bytes[(r >> 16) % (sizeof bytes - 1)]; break;
        case 1: memmove(t + at, t + at + 1, len - at); tl--; break;
        default: tl = at; break;
      }
      mutated_taken += dec_both(L, t, tl, "mutated");
      free(t);
    }
    free(text);
  }
  printf("#   %d of 2000 answers taken, %d mutated ones\n", took, mutated_taken);
  CHECK(took > 530);  /* 516 before \\u escapes in values were taken; keys with escapes
                       ** still take the tree path */
  CHECK(mutated_taken > 0);  /* some mutations are still JSON (a digit for a digit) */
  lua_close(L);
}

static const char bench_schema[] =
  "{\"type\":\"object\",\"required\":[\"id\",\"name\"],\"additionalProperties\":false,"
  "\"properties\":{\"id\":{\"type\":\"integer\",\"minimum\":0},"
  "\"name\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":3},\"flag\":{\"type\":\"boolean\"},"
  "\"n\":{\"type\":\"number\",\"maximum\":10},\"any\":{},"
  "\"nul\":{\"type\":[\"null\",\"string\"]}}}";

TEST(the_plain_schema_check_passes_only_what_the_validator_passes) {
  lua_State *L = new_state();
  json_t *sj = json_loads(bench_schema, 0, NULL);
  tp_schema *sc = tp__schema_compile(sj, TP_DIALECT_2020_12, NULL, 0, NULL, 0);
  json_decref(sj);
  const tp_schema_simple *sh = tp__schema_simple(sc);
  CHECK(sh != NULL);
  static const char *const args[] = {
    "{id = 1, name = 'x'}", "{id = 0, name = 'abc', flag = false}", "{id = -1, name = 'x'}",
    "{id = 1}", "{name = 'x'}", "{id = 1, name = ''}", "{id = 1, name = 'abcd'}",
    "{id = 1, name = '\\u{e9}\\u{e9}\\u{e9}'}", "{id = 1, name = '\\n\\1\"'}",
    "{id = 1.0, name = 'x'}", "{id = 1.5, name = 'x'}", "{id = '1', name = 'x'}",
    "{id = 1, name = 'x', other = 1}", "{id = 1, name = 'x', n = 10}",
    "{id = 1, name = 'x', n = 10.5}", "{id = 1, name = 'x', n = 11}",
    "{id = 1, name = 'x', n = 3.25}", "{id = 1, name = 'x', any = {a = {1, 2}}}",
    "{id = 1, name = 'x', nul = json.null}", "{id = 1, name = 'x', nul = 'x'}",
    "{id = 1, name = 'x', nul = 1}", "{id = math.maxinteger, name = 'x'}",
    "{id = math.mininteger, name = 'x'}", "{id = 1, name = 'x', flag = json.null}",
  };
  int passed = 0;
  for (size_t i = 0; i < sizeof args / sizeof args[0]; i++) {
    char code[300];
    snprintf(code, sizeof code, "return %s", args[i]);
    if (!eval(L, code)) { TP_FAIL_AT("cannot evaluate %s", args[i]); continue; }
    tp__codec_text ct;
    if (!tp__codec_encode(L, -1, 0, 0, &ct)) {
      TP_FAIL_AT("declined %s", args[i]);
      lua_pop(L, 1);
      continue;
    }
    json_t *tree = tp__json_from_lua(L, -1, 0, 0, NULL);
    lua_pop(L, 1);
    int fast = tp__codec_simple_ok(ct.text, ct.len, sh);
    int valid = tp__schema_validate(sc, tree, NULL);
    if (fast && valid != 1) TP_FAIL_AT("passed %s, which the validator refuses", args[i]);
    passed += fast;
    json_decref(tree);
    free(ct.text);
  }
  CHECK_INT(passed, 9);  /* the others are invalid, or reals the validator must judge */
  tp__schema_free(sc);
  lua_close(L);
}

/* ---- whole runs, the codec on and off ------------------------------------------------- */

static void echo_args (tp_call *c, void *ud) {
  (void)ud;
  tp_call_complete(c, tp_call_args(c), 0);
}

static void answer (tp_call *c, void *ud) {
  (void)ud;
  json_t *a = json_loads(tp_call_args(c), 0, NULL);
  const char *text = json_string_value(json_object_get(a, "text"));
  tp_call_complete(c, text ? text : "null", 0);
  json_decref(a);
}

/* The envelope with what differs from run to run taken out (times, stats). */
static char *stable (const char *env) {
  json_t *v = json_loads(env, JSON_ALLOW_NUL, NULL);
  if (v == NULL) return strdup(env);
  json_object_del(v, "stats");
  json_t *calls = json_object_get(v, "calls"), *c;
  size_t i;
  json_array_foreach(calls, i, c) json_object_del(c, "ms");
  char *s = json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
  json_decref(v);
  return s;
}

static char *run_env (tp_engine *e, const char *src, size_t memory) {
  tp_limits lim;
  tp_limits_init(&lim);
  if (memory) lim.memory = memory;
  char *env = NULL;
  int ok = 0;
  tp_engine_run(e, src, strlen(src), &lim, &env, &ok);
  char *s = stable(env ? env : "(none)");
  tp_free(env);
  return s;
}

TEST(runs_give_the_same_envelopes_with_the_codec_on_and_off) {
  tp_engine *e = tp_engine_create();
  tp_tool_def d1 = { .name = "t.echo", .description = "Echoes.", .handler = echo_args };
  tp_tool_def d2 = { .name = "t.checked", .description = "Checks.", .input_schema = bench_schema,
                     .handler = echo_args };
  tp_tool_def d3 = { .name = "t.answer", .description = "Answers text.", .handler = answer };
  CHECK(tp_engine_add_tool(e, &d1) == TP_OK);
  CHECK(tp_engine_add_tool(e, &d2) == TP_OK);
  CHECK(tp_engine_add_tool(e, &d3) == TP_OK);
  static const struct { const char *src; size_t memory; } runs[] = {
    { "return tools.t.echo{a = 1, b = 'x', c = {1.0, -0.0, json.null, true}}", 0 },
    { "local r = tools.t.echo{s = 'caf\\u{e9}\\0\\n', n = math.mininteger, f = 0.1}\n"
      "return {r.s, r.n, r.f, math.type(r.n), math.type(r.f)}", 0 },
    { "return tools.t.echo{a = {}, b = json.array({}), c = {x = {}}}", 0 },
    { "return tools.t.echo{a = 0/0}", 0 },
    { "return tools.t.echo{a = '\\xff'}", 0 },
    { "local t = {} t.t = t return tools.t.echo{t = t}", 0 },
    { "local t = {} for i = 1, 200 do t = {t} end return tools.t.echo{t = t}", 0 },
    { "return tools.t.echo({1, 2})", 0 },
    { "return tools.t.echo{}", 0 },
    { "return tools.t.echo(setmetatable({}, json.object))", 0 },
    { "return tools.t.echo(json.array({}))", 0 },
    { "return tools.t.checked{}", 0 },
    { "return tools.t.checked{id = 1, name = 'x'}", 0 },
    { "return tools.t.checked{id = -1, name = ''}", 0 },
    { "return tools.t.checked{id = 1.5, name = 'abcd', other = 1}", 0 },
    { "return tools.t.checked{name = json.null}", 0 },
    { "return tools.t.checked{id = 1, name = 'x', nul = json.null, any = {1, {}}}", 0 },
    { "return tools.t.answer{text = '{\"a\":[1,2.5,-0.0,{}],\"b\":null}'}", 0 },
    { "local r = tools.t.answer{text = '[{}, []]'} return {getmetatable(r[1]), #r[2]}", 0 },
    { "return tools.t.answer{text = '{\"a\":1,\"a\":2}'}", 0 },
    { "return tools.t.answer{text = '{\"a\":'}", 0 },
    { "return tools.t.answer{text = '{\"a\":99999999999999999999}'}", 0 },
    { "return tools.t.answer{text = '\"{\\\\\"x\\\\\":1}\"'}", 0 },
    { "local n = 0 for k in pairs(tools.t.answer{text = '{\"z\":1,\"a\":2,\"m\":3,\"b\":4}'}) "
      "do n = n + 1 end return n", 0 },
    /* an array: where the walk stops must not hang on the order of a hash (each state
    ** seeds its string hashes) */
    { "local s = string.rep('x', 40000) local t = {} for i = 1, 20 do t[i] = s end\n"
      "return #tools.t.echo{t = t}", 256 * 1024 },
    { "local t = {} for i = 1, 3000 do t[i] = {i} end return #tools.t.echo{t = t}",
      192 * 1024 },
    { "local s = string.rep('y', 5000) local r for i = 1, 50 do r = tools.t.echo{s = s} end "
      "return #r.s", 160 * 1024 },
    { "for i = 1, 5 do tools.t.echo{same = 1} end return tools.t.answer{text = '[1]'}", 0 },
  };
  for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
    tp__codec_off = 0;
    char *on = run_env(e, runs[i].src, runs[i].memory);
    tp__codec_off = 1;
    char *off = run_env(e, runs[i].src, runs[i].memory);
    tp__codec_off = 0;
    if (strcmp(on, off) != 0)
      TP_FAIL_AT("run %zu differs:\n#     on:  %.600s\n#     off: %.600s", i, on, off);
    free(on);
    free(off);
  }
  tp_engine_destroy(e);
}

int main (int argc, char **argv) {
  tp_test_args(argc, argv);
  RUN(the_codec_writes_the_tree_paths_text_for_plain_values);
  RUN(the_codec_declines_what_the_tree_path_reports_or_shapes);
  RUN(random_values_give_the_same_text_cost_and_count_both_ways);
  RUN(answers_push_the_same_values_as_jansson);
  RUN(random_answers_and_their_mutations_push_the_same_values);
  RUN(the_plain_schema_check_passes_only_what_the_validator_passes);
  RUN(runs_give_the_same_envelopes_with_the_codec_on_and_off);
  return tp_test_end();
}
