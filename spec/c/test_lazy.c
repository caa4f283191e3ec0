/*
** test_lazy.c: a session's sandbox builds each library when a script first touches it
** (sandbox.c, "libraries built when first touched"). Nothing of that may show: the same
** scripts give the same envelopes through a lazily built session and through one built
** in full (tp__sandbox_full), first touch or not, times and memory figures aside; and
** nothing one session or run does (to every library, metatable and upvalue a script can
** reach) is visible to another session, nor to a pooled run.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "sandbox.h"
#include "tp_test.h"
#include "fingerprint.h"

/* Blanks what differs between two equal runs: the times; the memory figures (a lazy
** sandbox holds less); and the instruction counts, which the engine's loop makes
** depend on where its time slices end (a busy machine ends them elsewhere), as test_pool.c
** shows for runs without a loop. Returns a malloc'd copy. */
static char *blank (const char *env) {
  char *out = malloc(strlen(env) + 1);
  if (out == NULL) return NULL;
  static const char *const keys[] = { "\"cpu_ms\":", "\"wall_ms\":", "\"ms\":",
                                      "\"memory_peak\":", "\"instructions\":" };
  size_t nkeys = sizeof keys / sizeof keys[0];
  const char *p = env;
  char *o = out;
  while (*p) {
    size_t k = 0, n = 0;
    for (; k < nkeys; k++)
      if (strncmp(p, keys[k], n = strlen(keys[k])) == 0) break;
    if (k == nkeys) { *o++ = *p++; continue; }
    memcpy(o, p, n);
    o += n;
    p += n;
    *o++ = '0';
    while (*p && *p != ',' && *p != '}') p++;
  }
  *o = '\0';
  return out;
}

static tp_limits limits (void) {
  tp_limits lim;
  tp_limits_init(&lim);
  lim.memory = 8u << 20;
  lim.instructions = 1000000;  /* ends the endless loops: not the clocks, which a slow */
  lim.cpu_us = 600000000u;     /* machine or valgrind would make end them elsewhere */
  lim.wall_us = 600000000u;
  lim.output = 4096;
  return lim;
}

/* Fails, showing where a and b part. */
static void differ (size_t i, const char *when, const char *a, const char *b) {
  size_t at = 0;
  while (a[at] && a[at] == b[at]) at++;
  size_t from = at > 200 ? at - 200 : 0;
  TP_FAIL_AT("script %zu, %s: at %zu: lazy ...%.400s\nfull ...%.400s", i, when, at, a + from,
             b + from);
}

static void done (tp_run *r, void *ud) { (void)r; *(int *)ud = 1; }

/* Runs src in session s (NULL: a pooled run, with the sessions' limits) to its end (tool
** calls included); returns the envelope with
** the times and memory figures blanked (malloc'd), or NULL. */
static char *session_run (tp_engine *e, tp_session *s, const char *src) {
  tp_limits lim = limits();
  tp_run *r = s ? tp_session_run(s, src, strlen(src)) : tp_run_create(e, src, strlen(src), &lim);
  if (r == NULL) return NULL;
  int finished = 0;
  if (tp_run_start(r, done, &finished) != TP_OK) { tp_run_destroy(r); return NULL; }
  while (!finished) tp_engine_poll(e, 1);
  const char *env = tp_run_envelope(r);
  char *out = env ? blank(env) : NULL;
  tp_run_destroy(r);
  return out;
}

static tp_session *session (tp_engine *e, int full) {
  tp_limits lim = limits();
  tp__sandbox_full = full;
  tp_session *s = tp_session_create(e, &lim);
  tp__sandbox_full = 0;
  return s;
}

/* Returns ud (a JSON text) as its result. */
static void returns (tp_call *c, void *ud) { tp_call_complete(c, ud, 0); }
/* Fails with a message of its own. */
static void fails (tp_call *c, void *ud) { (void)ud; tp_call_fail(c, NULL, "no such city"); }

static tp_engine *engine (void) {
  tp_engine *e = tp_engine_create();
  if (e == NULL) return NULL;
  tp_tool_def get = { "weather.get", "the weather", "{\"type\":\"object\",\"properties\":"
                      "{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"]}", NULL,
                      returns, (void *)"{\"temp\":21.5,\"sky\":null,\"tags\":[],\"at\":{}}", 0 };
  tp_tool_def bad = { "weather.fail", "fails", NULL, NULL, fails, NULL, 0 };
  if (tp_engine_add_tool(e, &get) != TP_OK || tp_engine_add_tool(e, &bad) != TP_OK) {
    tp_engine_destroy(e);
    return NULL;
  }
  return e;
}

/* Every library, first touched in each way a script can touch it: a field read, a
** method call, pairs, a write, getmetatable, rawset, an error that names a library
** function; json and its null; tool results (which carry JSON metatables); limits. */
static const char *const corpus[] = {
  "return 1",
  "return string.upper('abc'), string.format('%5.2f|%q|%s', 3.14159, 'a\\n', {})",
  "return ('abc'):upper(), ('x'):rep(3, ','), ('%d'):format(7), #('abc'):reverse()",
  "return ('hello world'):find('o w', 1, true), ('a1b2'):gsub('%d', '#'), ('k=v'):match('(%w+)=(%w+)')",
  "local t = {} for w in ('a b c'):gmatch('%a') do t[#t + 1] = w end return t",
  "return '10' + 1, '3' * '4', 2 ^ '3', -'2', '7' // 2, '7' % '4'",
  "return ('x'):bad_method()",
  "return ('x').nothing, ('x').len == string.len",
  "local mt = getmetatable('') return type(mt), rawequal(mt.__index, string), mt.__add ~= nil",
  "getmetatable('').__index = {}",
  "getmetatable('').__add = nil",
  "return getmetatable(string), getmetatable(math), getmetatable(json), getmetatable(tools)",
  "local ks = {} for k in pairs(string) do ks[#ks + 1] = k end table.sort(ks) return ks",
  "local ks = {} for k, v in pairs(math) do ks[#ks + 1] = k .. ':' .. type(v) end table.sort(ks) return ks",
  "local n = 0 for k in pairs(_G) do n = n + 1 end return n, #_G, rawlen(string), next(table)",
  "local ks = {} for k, v in pairs(_G) do ks[#ks + 1] = k .. ':' .. type(v) end table.sort(ks) return ks",
  "string.upper = nil",
  "rawset(table, 'x', 1)",
  "setmetatable(os, {})",
  "return rawget(math, 'pi'), rawget(_G, 'math') == math, #math, #utf8",
  "return string.rep()",
  "return ('x'):rep()",
  "return math.floor('a')",
  "return table.concat({1, {}, 3})",
  "return utf8.char(72, 228, 8364), utf8.len('h\\xc3\\xa4'), utf8.codepoint('A'), utf8.charpattern",
  "local t = {} for p, c in utf8.codes('ab') do t[#t + 1] = p .. '=' .. c end return t",
  "return utf8.len('\\xff')",
  "return math.pi, math.huge, -math.huge, math.maxinteger, math.mininteger, math.type(1), math.type(1.0), math.ult(1, 2)",
  "math.randomseed(7) return math.random(1, 1000000), math.random(), math.random(3)",
  "return math.tointeger(3.0), math.fmod(7, 3), math.abs(-2), math.max(1, 5, 3), math.sqrt(16)",
  "local t = {5, 1, 4} table.sort(t) table.insert(t, 9) table.remove(t, 1) return t, table.unpack({1, 2}), select('#', table.pack(1, nil, 3))",
  "return table.move({1, 2, 3}, 1, 3, 2)",
  "table.sort({3, 2, 1}, function(a, b) return a - b end)",
  "local co = coroutine.create(function(a) local b = coroutine.yield(a + 1) return b * 2 end)\n"
  "local _, x = coroutine.resume(co, 1) local _, y = coroutine.resume(co, 5)\n"
  "return x, y, coroutine.status(co), coroutine.isyieldable(), select(2, coroutine.running())",
  "local f = coroutine.wrap(function() coroutine.yield(1) error('in co') end) f() f()",
  "return coroutine.yield(1)",
  "return os.time{ year = 2020, month = 1, day = 1, hour = 0 }, os.date('!%Y-%m-%d', 0), type(os.clock()), os.difftime(5, 2)",
  "return os.getenv('HOME')",
  "return os.date('%Ez')",
  "return json.encode({ a = { 1, 2.5, 'x' }, b = json.null, c = json.array({}) })",
  "return json.decode('{\"a\":[1,2,{\"b\":null}],\"c\":1.5e300}')",
  "return json.decode('{\"a\":1,\"a\":2}')",
  "return json.null.x",
  "return json.null + 1",
  "return tostring(json.null), type(json.null), json.null == json.null",
  "local d = json.decode('{\"k\":{}}') return #d.k",
  "local d = json.decode('[1,2]') return d.length",
  "return json.nothing, json.encode(1/0)",
  "json.x = 1",
  "local w = tools.weather.get{ city = 'Paris' } return w, w.sky == json.null, #w.at, getmetatable(w.tags)",
  "local w = tools.weather.get{ city = 'Paris' } return w.sky.x",
  "local w = tools.weather.get{ city = 'Paris' } return json.encode(w)",
  "return tools.weather.get{ town = 'Paris' }",
  "local ok, err = pcall(tools.weather.fail, {}) return ok, err.code, tostring(err)",
  "return tools.nope.nothing{}",
  "return select('#', tools.list()), tools.describe('weather.get') ~= nil",
  "local a, b = parallel(function() return tools.weather.get{ city = 'A' }.temp end,\n"
  "                      function() return tools.weather.get{ city = 'B' }.temp end) return a + b",
  "print('hello', 1, nil, true, {}, print, string) print(('x'):rep(3)) return tostring(math), tostring(json)",
  "for i = 1, 1000 do print(('y'):rep(20)) end",
  "local t = {} while true do t[#t + 1] = ('z'):rep(1000) .. #t end",
  "while true do end",
  "local s = string.rep('a', 1e9) return #s",
  "error('boom')",
  "error({ code = 'x' })",
  "local x = = 1",
  "return undefined_thing.field",
  "return null",
  "return string.split('a,b', ',')",
  "return math.round(1.5)",
  "return table.push({}, 1)",
  "return collectgarbage('count') > 0, collectgarbage('step'), collectgarbage('isrunning')",
  "return load('return string.len(...)')('abc'), load('x =')",
  "return pcall(string.rep), select(2, pcall(error, { code = 1 })).code",
  "local t = setmetatable({}, { __index = string }) return t.upper('q'), t.nothing",
  "local t = setmetatable({}, { __index = function(_, k) return k end }) return t.x, tostring(t)",
  "return setmetatable({}, { __gc = print })",
  "return ipairs({ a = 1 })",
  "x_global = string; return x_global.lower('A')",
  "```lua\nreturn 7\n```",
  "return _VERSION, _G._G == _G, _ENV == _G, type(print), type(warn), warn('x')",
};

/* Each script in a fresh session of each kind (so the script's touch is the first), and
** all of them one after the other in one session of each kind (each library touched
** already, and what the scripts left in globals carried along): the same envelopes. */
TEST(lazy_and_full_sessions_give_the_same_envelopes) {
  tp_engine *e = engine();
  CHECK(e != NULL);
  if (e == NULL) return;
  tp_session *lazy_all = session(e, 0), *full_all = session(e, 1);
  CHECK(lazy_all != NULL && full_all != NULL);
  for (size_t i = 0; i < sizeof corpus / sizeof corpus[0]; i++) {
    tp_session *lazy = session(e, 0), *full = session(e, 1);
    CHECK(lazy != NULL && full != NULL);
    char *a = session_run(e, lazy, corpus[i]), *b = session_run(e, full, corpus[i]);
    CHECK(a != NULL && b != NULL);
    if (a && b && strcmp(a, b) != 0)
      differ(i, "first touch", a, b);
    free(a);
    free(b);
    a = session_run(e, lazy_all, corpus[i]);
    b = session_run(e, full_all, corpus[i]);
    CHECK(a != NULL && b != NULL);
    if (a && b && strcmp(a, b) != 0)
      differ(i, "in sequence", a, b);
    free(a);
    free(b);
    tp_session_destroy(lazy);
    tp_session_destroy(full);
  }
  tp_session_destroy(lazy_all);
  tp_session_destroy(full_all);
  tp_engine_destroy(e);
}

/* A lazy session holds less until its script touches the libraries; touching them
** builds them (the memory grows), once. */
TEST(a_session_builds_a_library_when_first_touched) {
  tp_engine *e = engine();
  CHECK(e != NULL);
  if (e == NULL) return;
  tp_session *lazy = session(e, 0), *full = session(e, 1);
  CHECK(lazy != NULL && full != NULL);
  size_t m0 = tp_session_memory(lazy), mf = tp_session_memory(full);
  CHECK(m0 + 4096 < mf);
  free(session_run(e, lazy, "return 1"));
  size_t m1 = tp_session_memory(lazy);
  static const char touch[] = "collectgarbage() local _ = string.len, table.insert, math.abs, utf8.char, "
                              "coroutine.create, os.time, json.null, getmetatable('').__add";
  free(session_run(e, lazy, touch));
  size_t m2 = tp_session_memory(lazy);
  CHECK(m2 > m1 + 4096);
  free(session_run(e, lazy, touch));
  size_t m3 = tp_session_memory(lazy);
  CHECK(m3 < m2 + 1024);  /* built once: the second touch only compiles and runs */
  tp_session_destroy(lazy);
  tp_session_destroy(full);
  tp_engine_destroy(e);
}

/* What a script can see (as in test_pool.c): every global, library field and metatable,
** the string metatable, what library functions keep between calls (math.random's
** generator, json.encode's buffer, tostring's display numbers, the collector's mode). */
static const char fingerprint[] =
  TP_FINGERPRINT_START
  "add('gcmode ' .. tostring(collectgarbage('isrunning')))\n"
  "add('_ENV==_G ' .. tostring(rawequal(_ENV, _G)))\n"
  "return table.concat(out, '\\n')\n";

/* Changes all it can, and leaves things behind: globals, library tables (refused, but
** tried), the globals' metatable, the string metatable, math.random's seed, json's
** buffer, tostring's numbers, the collector's mode, a suspended coroutine. */
static const char dirty[] =
  "x_global = 1\n"
  "for _, lib in ipairs({ string, table, math, utf8, coroutine, os, json, tools }) do\n"
  "  pcall(function() lib.upper = 1 end)\n"
  "  pcall(rawset, lib, 'extra', 1)\n"
  "  pcall(setmetatable, lib, {})\n"
  "end\n"
  "pcall(function() getmetatable('').__index = {} end)\n"
  "pcall(function() getmetatable('').__add = nil end)\n"
  "pcall(rawset, getmetatable(''), '__index', {})\n"
  "setmetatable(_G, { __index = function() return 42 end })\n"
  "math.randomseed(42)\n"
  "for i = 1, 10 do tostring({}) end\n"
  "json.encode({ string.rep('x', 100000) })\n"
  "collectgarbage('stop')\n"
  "local co = coroutine.create(function() coroutine.yield() end)\n"
  "coroutine.resume(co)\n"
  "keep = { co, string.rep('y', 50000) }\n"
  "print = nil; json = nil; tools = nil; string = nil; _G.math = nil\n"
  "return 1\n";

/* Sessions are apart: what one session's runs did (touching and changing every library)
** shows neither in a session made before it nor in one made after, whether lazy or
** full; nor in a pooled run of the same engine. And a lazy session's fingerprint is a
** full one's. */
TEST(nothing_of_a_session_is_visible_to_another) {
  tp_engine *e = engine();
  CHECK(e != NULL);
  if (e == NULL) return;
  tp_session *before = session(e, 0), *full = session(e, 1);
  char *want = session_run(e, before, fingerprint);
  CHECK(want != NULL && strstr(want, "\"ok\":true") != NULL);
  CHECK(want && strstr(want, "_G.string=table") != NULL);  /* it reads what it says */
  CHECK(want && strstr(want, "random ") != NULL);
  tp_session_destroy(before);
  before = session(e, 0);
  char *got = session_run(e, full, fingerprint);
  if (want && got) CHECK_STR(got, want);
  free(got);
  tp_session_destroy(full);

  tp_session *a = session(e, 0);
  for (int round = 0; round < 2; round++) {  /* a lazy session, then a full one, dirty */
    char *d = session_run(e, a, dirty);
    CHECK(d != NULL && strstr(d, "\"ok\":true") != NULL);
    free(d);
    d = session_run(e, a, "return x_global, rawget(_G, 'print') == nil, undefined_name");
    CHECK(d != NULL && strstr(d, "\"result\":[1,true,42]") != NULL);  /* it did, there */
    free(d);
    tp_session *after = session(e, round);
    got = session_run(e, before, fingerprint);
    if (want && got) CHECK_STR(got, want);
    free(got);
    got = session_run(e, after, fingerprint);
    if (want && got) CHECK_STR(got, want);
    free(got);
    tp_session_destroy(after);
    tp_session_destroy(before);
    before = session(e, 0);
    tp_session_destroy(a);
    a = session(e, 1);
  }
  /* a pooled run of the engine after all that */
  char *pooled = session_run(e, NULL, fingerprint);
  CHECK(pooled != NULL);
  if (want && pooled) CHECK_STR(pooled, want);
  free(pooled);
  free(want);
  tp_session_destroy(a);
  tp_session_destroy(before);
  tp_engine_destroy(e);
}

/* Between runs of one session, the libraries stay as built: a library built by one run
** is the same object in the next (a global holding it stays rawequal), and one the
** script removed from the globals is still built when the pre-run check reads it. */
TEST(a_session_keeps_its_libraries_from_run_to_run) {
  tp_engine *e = engine();
  CHECK(e != NULL);
  if (e == NULL) return;
  tp_session *s = session(e, 0);
  char *r = session_run(e, s, "m = math; return 1");
  CHECK(r != NULL && strstr(r, "\"ok\":true") != NULL);
  free(r);
  r = session_run(e, s, "return rawequal(m, math), m.floor(2.5), math.abs(-1)");
  CHECK(r != NULL && strstr(r, "\"result\":[true,2,1]") != NULL);
  free(r);
  r = session_run(e, s, "s = string; string = nil; return s.upper('a')");
  CHECK(r != NULL && strstr(r, "\"result\":\"A\"") != NULL);
  free(r);
  /* the pre-run check reads s's library: a misspelt function is found before any run */
  r = session_run(e, s, "local x = 1\nreturn s.uper('a')");
  CHECK(r != NULL && strstr(r, "\"precheck\":true") != NULL);
  free(r);
  tp_session_destroy(s);
  /* and in a fresh session, the check builds a library the script names */
  s = session(e, 0);
  size_t m0 = tp_session_memory(s);
  r = session_run(e, s, "return string.uper('a')");
  CHECK(r != NULL && strstr(r, "\"precheck\":true") != NULL);
  CHECK(r != NULL && strstr(r, "string.upper") != NULL);  /* did you mean */
  free(r);
  CHECK(tp_session_memory(s) > m0);
  tp_session_destroy(s);
  tp_engine_destroy(e);
}

/* A session's next run reuses the script's thread when nothing can tell (its run
** returned, the script never held it): one that held it (coroutine.running) sees it
** apart from its own, finished with its results on its stack (so "suspended", as Lua
** calls such a thread), as with a new thread every run; after an error, a yield
** left pending or an open upvalue, the next run runs as usual. */
TEST(a_session_run_cannot_tell_its_thread_from_a_new_one) {
  tp_engine *e = engine();
  CHECK(e != NULL);
  if (e == NULL) return;
  tp_session *s = session(e, 0);
  static const char *const steps[][2] = {
    { "t1 = coroutine.running() return coroutine.status(t1)", "\"result\":\"running\"" },
    { "return coroutine.status(t1), rawequal(t1, coroutine.running()), coroutine.resume(t1)",
      "\"result\":[\"suspended\",false,false,\"attempt to call a string value\"]" },
    { "return 1", "\"result\":1" },
    { "error('x')", "\"ok\":false" },
    { "local x = 1 f = function() return x end return f()", "\"result\":1" },
    { "local c <close> = setmetatable({}, { __close = function() closed = true end }) return 2",
      "\"result\":2" },
    { "return closed, f(), select(2, coroutine.running())", "\"result\":[true,1,true]" },
    { "while true do end", "limit.instructions" },
    { "t2 = coroutine.running() return t2 ~= t1", "\"result\":true" },
    { "return coroutine.status(t2), coroutine.isyieldable(), coroutine.yield == nil",
      "\"result\":[\"suspended\",false,false]" },
  };
  for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
    char *r = session_run(e, s, steps[i][0]);
    CHECK(r != NULL);
    if (r && strstr(r, steps[i][1]) == NULL)
      TP_FAIL_AT("step %zu: %s, expected %s", i, r, steps[i][1]);
    free(r);
  }
  tp_session_destroy(s);
  tp_engine_destroy(e);
}

int main (int argc, char **argv) {
  tp_test_args(argc, argv);
  RUN(lazy_and_full_sessions_give_the_same_envelopes);
  RUN(a_session_builds_a_library_when_first_touched);
  RUN(nothing_of_a_session_is_visible_to_another);
  RUN(a_session_keeps_its_libraries_from_run_to_run);
  RUN(a_session_run_cannot_tell_its_thread_from_a_new_one);
  return tp_test_end();
}
