/*
** test_json.c: the Lua <-> JSON bridge (engine/lib/json.c). Round trips of every value kind,
** every encode error with its exact JSON path, metamethods that must not run, cycles and
** caps, invalid UTF-8, decode errors, and NULL inputs.
*/
#include <malloc.h>
#include <math.h>
#include <stdlib.h>

#include "lua.h"
#include "lauxlib.h"
#include "lualib.h"

#include "json.h"
#include "tp_test.h"

static lua_State *new_state (void) {
  lua_State *L = luaL_newstate();
  luaL_openlibs(L);
  tp__json_open(L);
  lua_setglobal(L, "json");
  return L;
}

/* Runs a chunk; its first result is left on the stack. Returns an error text or NULL. */
static const char *run (lua_State *L, const char *code) {
  static char msg[512];
  if (luaL_loadstring(L, code) != LUA_OK || lua_pcall(L, 0, 1, 0) != LUA_OK) {
    snprintf(msg, sizeof msg, "%s", lua_tostring(L, -1));
    lua_pop(L, 1);
    return msg;
  }
  return NULL;
}

/* Evaluates `expr` and converts it with tp__json_from_lua; the JSON text or NULL (err). */
static char out[4096];
static tp_json_err err;

static const char *enc_ex (lua_State *L, const char *expr, int max_depth, size_t max_bytes) {
  char code[2048];
  snprintf(code, sizeof code, "return %s", expr);
  memset(&err, 0, sizeof err);
  const char *e = run(L, code);
  if (e != NULL) { snprintf(out, sizeof out, "LUA ERROR: %s", e); return out; }
  int top = lua_gettop(L);
  json_t *v = tp__json_from_lua(L, -1, max_depth, max_bytes, &err);
  if (lua_gettop(L) != top) { snprintf(out, sizeof out, "STACK CHANGED"); return out; }
  lua_pop(L, 1);
  if (v == NULL) return NULL;
  char *s = tp__json_dumps(v);
  json_decref(v);
  snprintf(out, sizeof out, "%s", s);
  free(s);
  return out;
}

static const char *enc (lua_State *L, const char *expr) {
  return enc_ex(L, expr, 0, 0);
}

/* Runs Lua code that returns a string (or raises); the string or "ERR: msg". */
static const char *lua_str (lua_State *L, const char *code) {
  const char *e = run(L, code);
  if (e != NULL) { snprintf(out, sizeof out, "ERR: %s", e); return out; }
  size_t len;
  const char *s = lua_tolstring(L, -1, &len);
  snprintf(out, sizeof out, "%s", s ? s : "(not a string)");
  lua_pop(L, 1);
  return out;
}

/* ---- Lua -> JSON, values ---------------------------------------------------------------- */

TEST(encodes_scalars_exactly) {
  lua_State *L = new_state();
  CHECK_STR(enc(L, "nil"), "null");
  CHECK_STR(enc(L, "json.null"), "null");
  CHECK_STR(enc(L, "true"), "true");
  CHECK_STR(enc(L, "false"), "false");
  CHECK_STR(enc(L, "math.maxinteger"), "9223372036854775807");
  CHECK_STR(enc(L, "math.mininteger"), "-9223372036854775808");
  CHECK_STR(enc(L, "(1 << 53) + 1"), "9007199254740993");
  CHECK_STR(enc(L, "1"), "1");
  CHECK_STR(enc(L, "1.0"), "1.0");
  CHECK_STR(enc(L, "-0.0"), "-0.0");
  CHECK_STR(enc(L, "-3.0"), "-3.0");
  CHECK_STR(enc(L, "2^53"), "9007199254740992.0");
  CHECK_STR(enc(L, "1e20"), "1e+20");
  CHECK_STR(enc(L, "2^53 - 1"), "9007199254740991.0");
  CHECK_STR(enc(L, "-2.5"), "-2.5");
  CHECK_STR(enc(L, "0.1"), "0.1");
  CHECK_STR(enc(L, "1/3"), "0.3333333333333333");
  CHECK_STR(enc(L, "1e300"), "1e+300");
  CHECK_STR(enc(L, "2^63"), "9.223372036854776e+18");
  CHECK_STR(enc(L, "5e-324"), "5e-324");  /* the shortest that reads back */
  CHECK_STR(enc(L, "'he said \"hi\"\\n\\t\\\\'"), "\"he said \\\"hi\\\"\\n\\t\\\\\"");
  CHECK_STR(enc(L, "'a\\0b\\1'"), "\"a\\u0000b\\u0001\"");
  CHECK_STR(enc(L, "'caf\\u{e9} \\u{1F600}'"), "\"caf\xc3\xa9 \xf0\x9f\x98\x80\"");
  lua_close(L);
}

TEST(encodes_tables_arrays_and_objects) {
  lua_State *L = new_state();
  CHECK_STR(enc(L, "{}"), "{}");
  CHECK_STR(enc(L, "json.array()"), "[]");
  CHECK_STR(enc(L, "json.array({1, 2})"), "[1,2]");
  CHECK_STR(enc(L, "{1, 2.5, 'x', true, json.null}"), "[1,2.5,\"x\",true,null]");
  CHECK_STR(enc(L, "{b = 1, a = 2, c = {}}"), "{\"a\":2,\"b\":1,\"c\":{}}");
  CHECK_STR(enc(L, "{z = {y = {1, {x = json.array()}}}}"), "{\"z\":{\"y\":[1,{\"x\":[]}]}}");
  CHECK_STR(enc(L, "{['odd key'] = 1, [''] = 2}"), "{\"\":2,\"odd key\":1}");
  CHECK_STR(enc(L, "{[1.0] = 'a', [2] = 'b'}"), "[\"a\",\"b\"]");  /* 1.0 is key 1 */
  /* the same table twice is not a cycle */
  CHECK_STR(enc(L, "(function() local s = {1} return {s, s, {s}} end)()"), "[[1],[1],[[1]]]");
  lua_close(L);
}

TEST(big_array_round_trips) {
  lua_State *L = new_state();
  CHECK_STR(lua_str(L,
    "local t = {} for i = 1, 100000 do t[i] = i * 3 end "
    "local s = json.encode(t) local u = json.decode(s) "
    "for i = 1, 100000 do assert(u[i] == i * 3 and math.type(u[i]) == 'integer') end "
    "assert(#u == 100000) return json.encode(u) == s and 'same' or 'differs'"), "same");
  lua_close(L);
}

/* ---- round trips through the sandbox library -------------------------------------------- */

TEST(round_trips_every_kind_through_json_encode_and_decode) {
  lua_State *L = new_state();
  static const char *texts[] = {
    "null", "true", "false", "0", "-1", "9223372036854775807", "-9223372036854775808",
    "9007199254740993", "1.0", "-0.0", "0.1", "1e+300", "2.5e-08", "\"\"", "\"a\\u0000b\"",
    "\"\xe2\x82\xac\"", "[]", "{}", "[[]]", "[{}]", "{\"a\":[]}", "{\"a\":{}}",
    "[1,2.0,\"x\",null,true,false,[],{}]", "{\"a\":{\"b\":[1,{\"c\":null}]},\"d\":\"e\"}",
  };
  for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
    lua_getglobal(L, "json");
    lua_getfield(L, -1, "decode");
    lua_pushstring(L, texts[i]);
    if (lua_pcall(L, 1, 1, 0) != LUA_OK) {
      TP_FAIL_AT("decode %s: %s", texts[i], lua_tostring(L, -1));
      lua_pop(L, 2);
      continue;
    }
    lua_getfield(L, -2, "encode");
    lua_insert(L, -2);
    if (lua_pcall(L, 1, 1, 0) != LUA_OK) {
      TP_FAIL_AT("encode %s: %s", texts[i], lua_tostring(L, -1));
      lua_pop(L, 2);
      continue;
    }
    CHECK_STR(lua_tostring(L, -1), texts[i]);
    lua_pop(L, 2);
  }
  CHECK_INT(lua_gettop(L), 0);
  lua_close(L);
}

TEST(decode_gives_exact_lua_types) {
  lua_State *L = new_state();
  CHECK_STR(lua_str(L, "return math.type(json.decode('1'))"), "integer");
  CHECK_STR(lua_str(L, "return math.type(json.decode('1.0'))"), "float");
  CHECK_STR(lua_str(L, "return math.type(json.decode('1e2'))"), "float");
  CHECK_STR(lua_str(L, "return tostring(json.decode('9223372036854775807') == math.maxinteger)"), "true");
  CHECK_STR(lua_str(L, "return tostring(json.decode('-9223372036854775808') == math.mininteger)"), "true");
  CHECK_STR(lua_str(L, "return tostring(1/json.decode('-0.0'))"), "-inf");
  CHECK_STR(lua_str(L, "return tostring(#json.decode('\"a\\\\u0000b\"'))"), "3");
  CHECK_STR(lua_str(L, "return tostring(json.decode('null') == json.null)"), "true");
  CHECK_STR(lua_str(L, "return tostring(json.decode('[null]')[1] == json.null)"), "true");
  CHECK_STR(lua_str(L, "return getmetatable(json.decode('[]'))"), "json.array");
  /* {} is tagged json.object, so it stays an object when sent back (issue 19) */
  CHECK_STR(lua_str(L, "return tostring(getmetatable(json.decode('{}')))"), "json.object");
  CHECK_STR(lua_str(L, "return tostring(getmetatable(json.decode('{\"a\":1}')))"), "nil");
  CHECK_STR(lua_str(L, "return json.encode(json.decode('{\"o\":{}}').o)"), "{}");
  CHECK_STR(lua_str(L, "return json.decode(' {\"k\" : [1, 2] } ').k[2] == 2 and 'y' or 'n'"), "y");
  lua_close(L);
}

/* ---- Lua -> JSON errors, each with its exact path -------------------------------------- */

#define CHECK_ERR(L, expr, want_path, part) do { \
    CHECK(enc(L, expr) == NULL); \
    CHECK_STR(err.path, want_path); \
    CHECK_HAS(err.message, part); \
  } while (0)

TEST(rejects_nan_and_infinities_with_paths) {
  lua_State *L = new_state();
  CHECK_ERR(L, "0/0", "$", "NaN cannot be represented in JSON (at $)");
  CHECK_ERR(L, "{a = {b = 0/0}}", "$.a.b", "NaN cannot be represented in JSON (at $.a.b); use json.null");
  CHECK_ERR(L, "{items = {1, 2, math.huge}}", "$.items[2]", "inf cannot be represented");
  CHECK_ERR(L, "{['odd key'] = -math.huge}", "$[\"odd key\"]", "-inf cannot be represented in JSON (at $[\"odd key\"])");
  CHECK_ERR(L, "{x = {{}, {y = {0/0}}}}", "$.x[1].y[0]", "NaN");
  CHECK_ERR(L, "{['a\"b'] = 0/0}", "$[\"a\\\"b\"]", "NaN");
  CHECK_ERR(L, "{['1a'] = 0/0}", "$[\"1a\"]", "NaN");
  CHECK_ERR(L, "{_ok9 = 0/0}", "$._ok9", "NaN");
  lua_close(L);
}

TEST(rejects_tables_that_are_neither_arrays_nor_objects) {
  lua_State *L = new_state();
  CHECK_ERR(L, "{1, nil, 3}", "$", "sparse array at $: t[3] is set but t[2] is nil");
  CHECK_HAS(err.message, "json.null");
  CHECK_ERR(L, "{x = {[1] = 1, [5] = 5}}", "$.x", "t[5] is set but t[2] is nil");
  CHECK_ERR(L, "{[2] = 'b'}", "$", "t[2] is set but t[1] is nil");
  CHECK_ERR(L, "{1, 2, x = 3}", "$", "mixes array items (keys 1..n) with the string key \"x\"");
  CHECK_ERR(L, "{a = {[1.5] = 1}}", "$.a", "the float key 1.5");
  CHECK_ERR(L, "{[true] = 1}", "$", "the boolean key true");
  CHECK_ERR(L, "{[{}] = 1}", "$", "a table key");
  CHECK_ERR(L, "{[0] = 'zero'}", "$", "the integer key 0, but arrays use keys 1..n");
  CHECK_ERR(L, "{[-3] = 'neg'}", "$", "the integer key -3");
  CHECK_ERR(L, "json.array({1, 2, n = 2})", "$", "(tagged with json.array) has the string key \"n\"");
  CHECK_ERR(L, "(function() local a = json.array() a[2] = 1 return {list = a} end)()",
            "$.list", "t[2] is set but t[1] is nil");
  /* a string key first, then an integer key: hash order decides which is seen first */
  const char *r = enc(L, "{k = 1, [1] = 2}");
  CHECK(r == NULL);
  CHECK_STR(err.path, "$");
  CHECK_HAS(err.message, "mixes");
  lua_close(L);
}

TEST(rejects_functions_threads_and_userdata) {
  lua_State *L = new_state();
  CHECK_ERR(L, "{f = print}", "$.f", "cannot convert a function at $.f to JSON");
  CHECK_ERR(L, "{co = coroutine.create(print)}", "$.co", "coroutine (thread)");
  CHECK_ERR(L, "{list = {io.stdout}}", "$.list[0]", "userdata");
  static int x;
  lua_pushlightuserdata(L, &x);
  CHECK(tp__json_from_lua(L, -1, 0, 0, &err) == NULL);
  CHECK_STR(err.path, "$");
  CHECK_HAS(err.message, "light userdata");
  lua_pop(L, 1);
  lua_close(L);
}

TEST(reports_cycles_with_the_path_of_the_repeat) {
  lua_State *L = new_state();
  CHECK_ERR(L, "(function() local t = {a = {}} t.a.b = t return t end)()", "$.a.b",
            "cycle at $.a.b: the table contains itself");
  CHECK_ERR(L, "(function() local t = {} t[1] = t return t end)()", "$[0]", "cycle at $[0]");
  lua_close(L);
}

TEST(caps_nesting_depth) {
  lua_State *L = new_state();
  CHECK_STR(enc_ex(L, "{a = {b = {}}}", 3, 0), "{\"a\":{\"b\":{}}}");
  CHECK(enc_ex(L, "{a = {b = {c = {}}}}", 3, 0) == NULL);
  CHECK_STR(err.path, "$.a.b.c");
  CHECK_HAS(err.message, "nesting deeper than 3 levels at $.a.b.c");
  /* the default cap, and a cap far above the hard maximum */
  CHECK(enc(L, "(function() local t = {} for i = 1, 200 do t = {t} end return t end)()") == NULL);
  CHECK_HAS(err.message, "nesting deeper than 128 levels");
  CHECK(enc_ex(L, "(function() local t = {} for i = 1, 100000 do t = {t} end return t end)()",
               1 << 30, 0) == NULL);
  CHECK_HAS(err.message, "nesting deeper than 512 levels");
  CHECK_HAS(err.path, "...");
  CHECK(strlen(err.path) < sizeof err.path);
  CHECK_STR(lua_str(L, "local t = {} for i = 1, 200 do t = {t} end "
                       "local ok, e = pcall(json.encode, t) return e"),
            "json.encode: nesting deeper than 128 levels at $[0][0][0][0][0][0][0][0][0][0]"
            "[0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0]...; flatten the data "
            "(JSON values are capped at 128 nested arrays/objects)");
  lua_close(L);
}

TEST(caps_output_size) {
  lua_State *L = new_state();
  CHECK_STR(enc_ex(L, "{s = string.rep('x', 10)}", 0, 100), "{\"s\":\"xxxxxxxxxx\"}");
  CHECK(enc_ex(L, "{s = string.rep('x', 100)}", 0, 50) == NULL);
  CHECK_STR(err.path, "$.s");
  CHECK_HAS(err.message, "larger than the 50-byte cap (max_bytes)");
  /* a table referenced many times expands exponentially: the cap stops it */
  CHECK(enc_ex(L, "(function() local t = {1} for i = 1, 60 do t = {t, t} end return t end)()",
               0, 1 << 20) == NULL);
  CHECK_HAS(err.message, "1048576-byte cap");
  CHECK_STR(lua_str(L, "local t = {1} for i = 1, 60 do t = {t, t} end "
                       "local ok, e = pcall(json.encode, t) return e"), out);
  CHECK_HAS(out, "json.encode: the JSON is larger than the 16777216-byte cap");
  lua_close(L);
}

TEST(rejects_invalid_utf8_of_every_kind) {
  lua_State *L = new_state();
  CHECK_ERR(L, "{s = 'ab\\xC0\\xAF'}", "$.s", "byte 2: overlong encoding");
  CHECK_ERR(L, "{s = '\\xE0\\x80\\xAF'}", "$.s", "byte 0: overlong encoding");
  CHECK_ERR(L, "{s = '\\xF0\\x8F\\xBF\\xBF'}", "$.s", "overlong encoding");
  CHECK_ERR(L, "{s = 'x\\xED\\xA0\\x80'}", "$.s", "byte 1: UTF-16 surrogate");
  CHECK_ERR(L, "{s = '\\xF4\\x90\\x80\\x80'}", "$.s", "code point above U+10FFFF");
  CHECK_ERR(L, "{s = '\\xF5\\x80\\x80\\x80'}", "$.s", "never appears in UTF-8");
  CHECK_ERR(L, "{s = '\\xFF'}", "$.s", "never appears in UTF-8");
  CHECK_ERR(L, "{s = '\\x80'}", "$.s", "unexpected continuation byte");
  CHECK_ERR(L, "{s = 'ab\\xE2\\x82'}", "$.s", "invalid UTF-8 in the string at $.s (byte 2: truncated");
  CHECK_ERR(L, "{s = 'abcdefghijk\\xC3A'}", "$.s", "byte 11: incomplete");
  CHECK_ERR(L, "{['k\\xFF'] = 1}", "$[\"k\\xff\"]", "invalid UTF-8 in the object key");
  CHECK_ERR(L, "{['a\\0b'] = 1}", "$[\"a\\u0000b\"]", "contains a NUL byte");
  /* the largest valid code points of each length pass */
  CHECK(enc(L, "'\\x7F\\xDF\\xBF\\xEF\\xBF\\xBF\\xF4\\x8F\\xBF\\xBF\\xED\\x9F\\xBF'") != NULL);
  lua_close(L);
}

TEST(long_and_odd_keys_are_escaped_and_truncated_in_paths) {
  lua_State *L = new_state();
  CHECK_ERR(L, "{[string.rep('k', 100)] = 0/0}", "$[\"kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk...\"]", "NaN");
  CHECK_ERR(L, "{['new\\nline'] = 0/0}", "$[\"new\\u000aline\"]", "NaN");
  CHECK_ERR(L, "{['caf\\u{e9}'] = 0/0}", "$[\"caf\xc3\xa9\"]", "NaN");
  lua_close(L);
}

/* ---- no metamethod runs ---------------------------------------------------------------- */

TEST(never_runs_metamethods) {
  lua_State *L = new_state();
  const char *setup =
    "flag = nil "
    "local function hit() flag = true return 5 end "
    "mt = { __index = hit, __newindex = hit, __pairs = function() flag = true "
    "  return next, {}, nil end, __len = hit, __tostring = hit, __name = 'x', "
    "  __eq = hit, __lt = hit, __le = hit, __concat = hit, __call = hit, __close = hit } "
    "arr = setmetatable({1, 2}, mt) "
    "obj = setmetatable({a = 1}, mt) "
    "nested = {inner = arr, o = obj} "
    "getmetatable('').__index = hit "
    "return true";
  CHECK(run(L, setup) == NULL);
  lua_pop(L, 1);
  CHECK_STR(enc(L, "arr"), "[1,2]");
  CHECK_STR(enc(L, "obj"), "{\"a\":1}");
  CHECK_STR(enc(L, "nested"), "{\"inner\":[1,2],\"o\":{\"a\":1}}");
  CHECK_STR(enc(L, "setmetatable({}, mt)"), "{}");
  CHECK(enc(L, "setmetatable({1, nil, 3}, mt)") == NULL);
  CHECK(enc(L, "{f = setmetatable({}, {__index = function() flag = true end}), x = 0/0}") == NULL);
  CHECK_STR(lua_str(L, "return json.encode(nested)"), "{\"inner\":[1,2],\"o\":{\"a\":1}}");
  lua_getglobal(L, "flag");
  CHECK(lua_isnil(L, -1));
  lua_pop(L, 1);
  lua_close(L);
}

/* ---- json.array and the protected metatable -------------------------------------------- */

TEST(array_metatable_is_protected) {
  lua_State *L = new_state();
  CHECK_STR(lua_str(L, "return getmetatable(json.array())"), "json.array");
  CHECK_STR(lua_str(L, "local ok, e = pcall(setmetatable, json.array(), nil) return e"),
            "cannot change a protected metatable");
  CHECK_STR(lua_str(L, "local t = {1} return tostring(json.array(t) == t)"), "true");
  CHECK_STR(lua_str(L, "local t = json.array({}) return tostring(json.array(t) == t)"), "true");
  CHECK_STR(lua_str(L, "local ok, e = pcall(json.array, setmetatable({}, {})) return e"),
            "json.array: the table already has a metatable; pass a plain table or copy the "
            "items into a new one");
  CHECK_HAS(lua_str(L, "local ok, e = pcall(json.array, 5) return e"), "table expected");
  /* from C: the tag is seen, plain tables are not arrays */
  CHECK(run(L, "return json.array()") == NULL);
  CHECK(tp__json_is_array(L, -1));
  lua_pop(L, 1);
  CHECK(run(L, "return {}") == NULL);
  CHECK(!tp__json_is_array(L, -1));
  lua_pop(L, 1);
  lua_close(L);
}

/* ---- decode errors --------------------------------------------------------------------- */

TEST(decode_errors_name_what_and_where) {
  lua_State *L = new_state();
#define DEC_ERR(text, part) \
  CHECK_HAS(lua_str(L, "local ok, e = pcall(json.decode, " text ") return e"), part)
  DEC_ERR("'{'", "json.decode: ");
  DEC_ERR("'{'", "at line 1 column");
  DEC_ERR("'[1,\\n2,]'", "at line 2 column 3");
  DEC_ERR("''", "json.decode: ");
  DEC_ERR("'[1] x'", "end of file expected");
  DEC_ERR("'\"\\xFF\"'", "unable to decode byte 0xff");
  DEC_ERR("'\"\\xED\\xA0\\x80\"'", "json.decode: ");
  DEC_ERR("'\"\\\\ud800\"'", "invalid Unicode");
  DEC_ERR("'{\"a\":1,\"a\":2}'", "duplicate object key");
  DEC_ERR("'18446744073709551616'", "integers must fit in 64 bits");
  DEC_ERR("'-9223372036854775809'", "integers must fit in 64 bits");
  DEC_ERR("'1e400'", "outside the range of a double");
  DEC_ERR("'{\"a\\\\u0000b\":1}'", "json.decode: ");
  DEC_ERR("'NaN'", "json.decode: ");
  DEC_ERR("nil", "json.decode: expected a string of JSON text, got nil");
  DEC_ERR("5", "got number");
  DEC_ERR("string.rep('[', 200) .. string.rep(']', 200)", "json.decode: nesting deeper than 128 levels");
  DEC_ERR("' ' .. string.rep(' ', 16 * 1024 * 1024)", "over the 16777216-byte cap");
#undef DEC_ERR
  /* messages stay valid UTF-8 even when jansson quotes the bad bytes */
  const char *m = lua_str(L, "local ok, e = pcall(json.decode, '[\"\\xC3\\x28\"]') return e");
  for (const unsigned char *p = (const unsigned char *)m; *p; p++) CHECK(*p < 0x80);
  lua_close(L);
}

TEST(json_encode_errors_are_prefixed) {
  lua_State *L = new_state();
  CHECK_STR(lua_str(L, "local ok, e = pcall(json.encode, {a = {b = 0/0}}) return e"),
            "json.encode: NaN cannot be represented in JSON (at $.a.b); use json.null, or a "
            "string such as \"NaN\"");
  CHECK_STR(lua_str(L, "local t = {a = {}} t.a.b = t local ok, e = pcall(json.encode, t) return e"),
            "json.encode: cycle at $.a.b: the table contains itself; copy the data instead of "
            "storing a reference to an enclosing table");
  CHECK_HAS(lua_str(L, "local ok, e = pcall(json.encode) return e"), "value expected");
  CHECK_STR(lua_str(L, "return json.encode(nil)"), "null");
  lua_close(L);
}

/* ---- the C API --------------------------------------------------------------------------- */

TEST(push_and_dumps_from_c) {
  lua_State *L = luaL_newstate();  /* no json library opened: push creates the metatable */
  json_t *o = json_object();
  json_object_setn_new(o, "k\0z", 3, json_integer(7));
  json_object_set_new(o, "list", json_pack("[i,f,s,n,b]", 1, 2.0, "x", 0));
  json_object_set_new(o, "empty", json_array());
  tp__json_push(L, o, 0);
  CHECK_INT(lua_gettop(L), 1);
  lua_pushlstring(L, "k\0z", 3);
  CHECK_INT(lua_rawget(L, -2), LUA_TNUMBER);
  CHECK_INT(lua_tointeger(L, -1), 7);
  lua_pop(L, 1);
  lua_getfield(L, -1, "empty");
  CHECK(tp__json_is_array(L, -1));
  lua_pop(L, 1);
  tp_json_err e;
  json_t *back = tp__json_from_lua(L, -1, 0, 0, &e);
  CHECK(back == NULL);  /* the NUL key cannot go back */
  CHECK_HAS(e.message, "NUL byte");
  lua_pop(L, 1);
  json_decref(o);

  json_t *v = json_pack("{s:[i,f,f],s:s}", "b", 3, 1.0, -0.0, "a", "t\"x");
  char *s = tp__json_dumps(v);
  CHECK_STR(s, "{\"a\":\"t\\\"x\",\"b\":[3,1.0,-0.0]}");
  free(s);
  tp__json_push(L, v, 0);
  json_t *again = tp__json_from_lua(L, -1, 0, 0, NULL);
  CHECK(again != NULL && json_equal(again, v));
  s = tp__json_dumps(again);
  CHECK_STR(s, "{\"a\":\"t\\\"x\",\"b\":[3,1.0,-0.0]}");
  free(s);
  json_decref(again);
  json_decref(v);
  lua_pop(L, 1);

  /* an object with more than 16 keys sorts through the heap path */
  v = json_object();
  for (int i = 20; i >= 0; i--) {
    char k[16];
    snprintf(k, sizeof k, "k%02d", i);
    json_object_set_new(v, k, json_integer(i));
  }
  s = tp__json_dumps(v);
  CHECK(s != NULL && strncmp(s, "{\"k00\":0,\"k01\":1,", 17) == 0);
  free(s);
  json_decref(v);
  lua_close(L);
}

static int push_deep (lua_State *L) {
  json_t *v = lua_touserdata(L, 1);
  tp__json_push(L, v, 3);
  return 1;
}

TEST(push_raises_past_its_depth_cap) {
  lua_State *L = luaL_newstate();
  json_t *ok = json_loads("[[[1]]]", 0, NULL), *deep = json_loads("[[[[1]]]]", 0, NULL);
  lua_pushcfunction(L, push_deep);
  lua_pushlightuserdata(L, ok);
  CHECK_INT(lua_pcall(L, 1, 1, 0), LUA_OK);
  lua_pop(L, 1);
  lua_pushcfunction(L, push_deep);
  lua_pushlightuserdata(L, deep);
  CHECK_INT(lua_pcall(L, 1, 1, 0), LUA_ERRRUN);
  CHECK_STR(lua_tostring(L, -1), "json: nesting deeper than 3 levels");
  lua_pop(L, 1);
  json_decref(ok);
  json_decref(deep);
  lua_close(L);
}

TEST(null_inputs_are_handled) {
  tp_json_err e;
  CHECK(tp__json_from_lua(NULL, 1, 0, 0, &e) == NULL);
  CHECK_HAS(e.message, "no Lua state");
  CHECK(tp__json_from_lua(NULL, 1, 0, 0, NULL) == NULL);
  char *s = tp__json_dumps(NULL);
  CHECK_STR(s, "null");
  free(s);
  CHECK(tp__json_loads(NULL, 0, &e) == NULL);
  CHECK_HAS(e.message, "NULL");
  CHECK(tp__json_loads(NULL, 0, NULL) == NULL);
  json_t *v = tp__json_loads("[1,", 3, &e);
  CHECK(v == NULL);
  CHECK_HAS(e.message, "at line 1 column");
  v = tp__json_loads("\"a\\u0000\"", 9, &e);
  CHECK(v != NULL && json_string_length(v) == 2);
  json_decref(v);
  lua_State *L = luaL_newstate();
  tp__json_push(L, NULL, 0);
  CHECK(lua_type(L, -1) == LUA_TLIGHTUSERDATA && lua_touserdata(L, -1) == NULL);
  /* an index with no value is nil: null; the stack is untouched */
  v = tp__json_from_lua(L, 5, 0, 0, NULL);
  CHECK(json_is_null(v));
  json_decref(v);
  CHECK_INT(lua_gettop(L), 1);
  lua_close(L);
}

/* ---- memory errors: OOM stepping ------------------------------------------------------ */

typedef struct limiter { size_t used, limit; } limiter;

static void *limited_alloc (void *ud, void *ptr, size_t osize, size_t nsize) {
  limiter *l = ud;
  size_t old = ptr ? osize : 0;
  if (nsize == 0) { free(ptr); l->used -= old; return NULL; }
  if (nsize > old && l->used + (nsize - old) > l->limit) return NULL;
  void *p = realloc(ptr, nsize);
  if (p == NULL) return NULL;
  l->used = l->used - old + nsize;
  return p;
}

/*
** Raises the memory limit step by step until decode + encode succeed: every failure on
** the way must be a clean memory error, and (under valgrind/ASan) nothing may leak, which
** proves the decode tree is owned by something collectable while it is being pushed.
*/
TEST(memory_errors_are_clean_at_every_step) {
  const char *code =
    "local s = '{\"a\":[1,2.5,{\"b\":\"xyz\",\"c\":[[],{}]}],\"d\":\"' .. "
    "string.rep('q', 300) .. '\",\"e\":[' .. string.rep('7,', 200) .. '8]}' "
    "local v = json.decode(s) "
    "local t = json.encode(v) "
    "assert(#t == #s - 1 or #t > 0) return t";
  int failures = 0, succeeded = 0;
  for (size_t extra = 0; extra < 200000 && !succeeded; extra += 64 + extra / 16) {
    limiter lim = { 0, (size_t)-1 };
    lua_State *L = lua_newstate(limited_alloc, &lim);
    luaL_openlibs(L);
    tp__json_open(L);
    lua_setglobal(L, "json");
    CHECK(luaL_loadstring(L, code) == LUA_OK);
    lua_gc(L, LUA_GCCOLLECT);
    lim.limit = lim.used + extra;
    int rc = lua_pcall(L, 0, 1, 0);
    if (rc == LUA_OK) succeeded = 1;
    else {
      failures++;
      if (rc != LUA_ERRMEM) {
        const char *m = lua_tostring(L, -1);
        if (m == NULL || strstr(m, "not enough memory") == NULL) {
          TP_FAIL_AT("step %zu: %s", extra, m ? m : "(no message)");
          extra = 200000;
        }
      }
    }
    lim.limit = (size_t)-1;
    lua_close(L);
  }
  CHECK(succeeded);
  CHECK(failures > 10);
}


/* ---- the host budget ----------------------------------------------------------------- */

/* A budget for tests: a cap, what is charged now, its peak, and a stop flag. */
typedef struct tbudget { size_t cap, used, peak, calls; int stop; } tbudget;
static int tb_charge (void *ud, size_t n) {
  tbudget *b = ud;
  b->calls++;
  if (b->used + n > b->cap) return -1;
  b->used += n;
  if (b->used > b->peak) b->peak = b->used;
  return 0;
}
static void tb_refund (void *ud, size_t n) { tbudget *b = ud; b->used -= n; }
static int tb_stopped (void *ud) { return ((tbudget *)ud)->stop; }

static json_t *enc_budget (lua_State *L, const char *expr, tbudget *tb, tp_json_opts *o) {
  char code[512];
  static tp_json_budget jb;
  jb = (tp_json_budget){ tb_charge, tb_refund, tb_stopped, NULL, tb };
  snprintf(code, sizeof code, "return %s", expr);
  const char *e = run(L, code);
  if (e != NULL) { printf("#   %s\n", e); return NULL; }
  memset(o, 0, sizeof *o);
  o->budget = &jb;
  memset(&err, 0, sizeof err);
  json_t *v = tp__json_from_lua_ex(L, -1, o, &err);
  lua_pop(L, 1);
  return v;
}

TEST(a_dag_is_charged_each_time_it_is_expanded_and_stops_at_the_budget) {
  lua_State *L = new_state();
  tbudget tb = { 1u << 20, 0, 0, 0, 0 };
  tp_json_opts o;
  json_t *v = enc_budget(L, "(function() local t = {} for _ = 1, 40 do t = {t, t} end "
                         "return t end)()", &tb, &o);
  CHECK(v == NULL);
  CHECK_INT(o.over_budget, 1);
  CHECK_INT(o.cost, 0);
  CHECK_INT(tb.used, 0);  /* what was charged is refunded with the tree */
  CHECK(tb.peak <= (1u << 20));
  CHECK(tb.peak > (1u << 20) - TP_JSON_CHARGE_BATCH);
  CHECK_HAS(err.message, "needs more host memory than the run's memory limit allows");
  lua_close(L);
}

TEST(a_small_value_costs_one_charge_at_its_cost) {
  lua_State *L = new_state();
  tbudget tb = { 1u << 20, 0, 0, 0, 0 };
  tp_json_opts o;
  json_t *v = enc_budget(L, "{ id = 1, name = 'abc', flag = true, list = {1.5, json.null} }",
                         &tb, &o);
  CHECK(v != NULL);
  size_t want = TP_JSON_COST_OBJECT + 4 * TP_JSON_COST_MEMBER + 2 + 4 + 4 + 4 /* keys */
    + TP_JSON_COST_NUMBER + TP_JSON_COST_STRING + 3 + TP_JSON_COST_SCALAR
    + TP_JSON_COST_ARRAY + TP_JSON_COST_NUMBER + TP_JSON_COST_SCALAR;
  CHECK_INT(o.cost, want);
  CHECK_INT(tb.used, want);
  CHECK_INT(tb.calls, 1);
  CHECK_INT(tp__json_tree_cost(v), want);
  json_decref(v);
  lua_close(L);
}

TEST(the_walk_stops_when_the_verdict_is_set) {
  lua_State *L = new_state();
  tbudget tb = { SIZE_MAX / 2, 0, 0, 0, 1 };
  tp_json_opts o;
  json_t *v = enc_budget(L, "(function() local t = {} for i = 1, 10000 do t[i] = i end "
                         "return t end)()", &tb, &o);
  CHECK(v == NULL);
  CHECK_INT(o.stopped, 1);
  CHECK_INT(tb.used, 0);
  CHECK_HAS(err.message, "the run has ended");
  lua_close(L);
}

TEST(several_values_share_one_text_cap) {
  lua_State *L = new_state();
  tp_json_opts o;
  memset(&o, 0, sizeof o);
  o.max_bytes = 20;
  lua_pushstring(L, "0123456789");  /* 12 bytes of JSON each */
  json_t *a = tp__json_from_lua_ex(L, -1, &o, &err);
  CHECK(a != NULL);
  CHECK_INT(o.bytes, 12);
  json_t *b = tp__json_from_lua_ex(L, -1, &o, &err);
  CHECK(b == NULL);
  CHECK_INT(o.over_bytes, 1);
  json_decref(a);
  lua_close(L);
}

TEST(decode_cost_is_estimated_from_the_text) {
  char text[300];
  /* 1 array, 40 numbers: short texts are bounded without a scan, longer ones counted */
  size_t n = 0;
  text[n++] = '[';
  for (int i = 0; i < 40; i++) n += (size_t)sprintf(text + n, "%s%d", i ? "," : "", i * 7);
  text[n++] = ']';
  CHECK_INT(tp__json_text_cost(text, n), TP_JSON_COST_ARRAY + 40 * TP_JSON_COST_NUMBER);
  CHECK_INT(tp__json_text_cost("[1]", 3), 3 * TP_JSON_COST_OBJECT);
  /* an escaped quote does not end a string; keys count as strings */
  const char *s = "{\"a\\\"b\":[true,false,null,\"x\\\\\"],\"pad\":\"................................\"}";
  CHECK_INT(tp__json_text_cost(s, strlen(s)), TP_JSON_COST_OBJECT + 3 * TP_JSON_COST_SCALAR
            + TP_JSON_COST_ARRAY + 4 * TP_JSON_COST_STRING + 4 + 3 + 3 + 32);
  /* nesting past jansson's cap is not counted: parsing stops there */
  static char deep[20000];
  memset(deep, '[', sizeof deep);
  CHECK_INT(tp__json_text_cost(deep, sizeof deep), 2048 * (size_t)TP_JSON_COST_ARRAY);
}

/* The figures in json.h are not below what jansson really allocates. */
TEST(cost_figures_cover_what_jansson_allocates) {
#if defined(__SANITIZE_ADDRESS__)
  printf("#   skipped under AddressSanitizer: malloc is not glibc's\n");
#else
  const char *texts[] = { "[0,1,2,3,4,5,6,7,8,9]", "[\"\",\"abcdefghijklmnopqrstuvwxyz\"]",
    "[{},{},{\"k1\":1,\"k2\":[]},[],[[]],null,true,1.5]", "{\"a\":{\"b\":{\"c\":\"d\"}}}" };
  for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
    /* 2000 copies in an array, so the figures are measured over many nodes */
    size_t len = strlen(texts[i]), n = 0;
    char *big = malloc(2000 * (len + 1) + 2);
    big[n++] = '[';
    for (int k = 0; k < 2000; k++) { if (k) big[n++] = ','; memcpy(big + n, texts[i], len); n += len; }
    big[n++] = ']';
    struct mallinfo2 m0 = mallinfo2();
    json_t *v = tp__json_loads(big, n, NULL);
    struct mallinfo2 m1 = mallinfo2();
    size_t real = m1.uordblks - m0.uordblks, est = tp__json_text_cost(big, n);
    CHECK(v != NULL);
    if (est < real || tp__json_tree_cost(v) < real || est > 3 * real)
      TP_FAIL_AT("%s: estimate %zu (tree %zu), jansson allocated %zu", texts[i], est,
                 tp__json_tree_cost(v), real);
    json_decref(v);
    free(big);
  }
#endif
}

TEST(json_encode_and_decode_charge_the_budget_and_refund_it) {
  lua_State *L = new_state();
  tbudget tb = { 1u << 20, 0, 0, 0, 0 };
  tp_json_budget jb = { tb_charge, tb_refund, tb_stopped, NULL, &tb };
  tp__json_set_budget(L, &jb);
  CHECK_STR(lua_str(L, "local t = {} for i = 1, 1000 do t[i] = i end "
                    "local s = json.encode(t) return #json.decode(s) .. ''"), "1000");
  CHECK_INT(tb.used, 0);
  CHECK(tb.peak >= 1000 * TP_JSON_COST_NUMBER);
  CHECK_HAS(lua_str(L, "local t = {} for _ = 1, 40 do t = {t, t} end return json.encode(t)"),
            "json.encode: the JSON built from this value needs more host memory than the "
            "run's memory limit allows (exceeded at $[0][0][0][0][0][0][0][0]");
  CHECK_INT(tb.used, 0);
  CHECK_HAS(lua_str(L, "return json.decode('[' .. ('0,'):rep(30000) .. '0]')"),
            ":1: json.decode: decoding 60003 bytes of JSON text would take about 1440192 "
            "bytes of host memory, more than the run's memory limit allows; decode smaller "
            "pieces");
  CHECK_INT(tb.used, 0);
  tb.stop = 1;  /* polled at each batch of charges and every 4096 values */
  CHECK_HAS(lua_str(L, "local t = {} for i = 1, 5000 do t[i] = {} end "
                    "return #json.decode(json.encode(t))"),
            ":1: json.encode: the conversion to JSON was stopped at $[");
  CHECK_INT(tb.used, 0);
  lua_close(L);
}


TEST(decode_of_long_text_is_polled_and_stops_with_the_verdict) {
  tbudget tb = { SIZE_MAX / 2, 0, 0, 0, 0 };
  tp_json_budget jb = { tb_charge, tb_refund, tb_stopped, NULL, &tb };
  size_t n = 0;
  char *text = malloc(300000);
  text[n++] = '[';
  for (int i = 0; i < 100000; i++) { memcpy(text + n, "1,", 2); n += 2; }
  text[n++] = '1';
  text[n++] = ']';
  tp_json_err e1, e2;
  json_t *v = tp__json_loads_polled(text, n, &jb, &e1);
  CHECK(v != NULL && json_array_size(v) == 100001);
  json_decref(v);
  text[n - 1] = 'x';  /* the same error, at the same place, as the one-piece parse */
  CHECK(tp__json_loads_polled(text, n, &jb, &e1) == NULL);
  CHECK(tp__json_loads(text, n, &e2) == NULL);
  CHECK_STR(e1.message, e2.message);
  CHECK_HAS(e1.message, "column 200003");
  text[n - 1] = ']';
  tb.stop = 1;
  CHECK(tp__json_loads_polled(text, n, &jb, &e1) == NULL);
  CHECK_STR(e1.message, "stopped: the run has ended (a limit)");
  free(text);
}

/* tp__json_dump_len gives tp__json_dumpsn's length without making the text: bytes_in and
** bytes_out of Lua tool calls come from it. Strings longer than its scratch buffer,
** escapes, reals and nesting all count. */
TEST(dump_len_is_the_length_of_the_dumped_text) {
  char big[1000];
  memset(big, 'x', sizeof big - 1);
  big[sizeof big - 1] = '\0';
  big[10] = '"';
  big[500] = '\n';
  const char *texts[] = { "{}", "[]", "null", "true", "-12345678901234", "0.1",
    "{\"a\":[1,2.5,{\"b\":\"q\\\"\\u0001\"}],\"c\":false}", NULL };
  for (int i = 0; texts[i]; i++) {
    json_t *v = json_loads(texts[i], JSON_DECODE_ANY, NULL);
    CHECK(v != NULL);
    size_t n = 0;
    char *t = tp__json_dumpsn(v, &n);
    CHECK(t != NULL);
    CHECK_INT((long long)tp__json_dump_len(v), (long long)n);
    free(t);
    json_decref(v);
  }
  json_t *o = json_pack("{s:s, s:[s, s]}", "long", big, "list", big, "short");
  size_t n = 0;
  char *t = tp__json_dumpsn(o, &n);
  CHECK(n > 2000);
  CHECK_INT((long long)tp__json_dump_len(o), (long long)n);
  free(t);
  json_decref(o);
  CHECK_INT((long long)tp__json_dump_len(NULL), 4);
}

int main (int argc, char **argv) {
  tp_test_args(argc, argv);
  RUN(encodes_scalars_exactly);
  RUN(encodes_tables_arrays_and_objects);
  RUN(big_array_round_trips);
  RUN(round_trips_every_kind_through_json_encode_and_decode);
  RUN(decode_gives_exact_lua_types);
  RUN(rejects_nan_and_infinities_with_paths);
  RUN(rejects_tables_that_are_neither_arrays_nor_objects);
  RUN(rejects_functions_threads_and_userdata);
  RUN(reports_cycles_with_the_path_of_the_repeat);
  RUN(caps_nesting_depth);
  RUN(caps_output_size);
  RUN(rejects_invalid_utf8_of_every_kind);
  RUN(long_and_odd_keys_are_escaped_and_truncated_in_paths);
  RUN(never_runs_metamethods);
  RUN(array_metatable_is_protected);
  RUN(decode_errors_name_what_and_where);
  RUN(json_encode_errors_are_prefixed);
  RUN(push_and_dumps_from_c);
  RUN(push_raises_past_its_depth_cap);
  RUN(null_inputs_are_handled);
  RUN(memory_errors_are_clean_at_every_step);
  RUN(a_dag_is_charged_each_time_it_is_expanded_and_stops_at_the_budget);
  RUN(a_small_value_costs_one_charge_at_its_cost);
  RUN(the_walk_stops_when_the_verdict_is_set);
  RUN(several_values_share_one_text_cap);
  RUN(decode_cost_is_estimated_from_the_text);
  RUN(cost_figures_cover_what_jansson_allocates);
  RUN(json_encode_and_decode_charge_the_budget_and_refund_it);
  RUN(decode_of_long_text_is_polled_and_stops_with_the_verdict);
  RUN(dump_len_is_the_length_of_the_dumped_text);
  return tp_test_end();
}
