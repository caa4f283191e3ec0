/*
** test_pool.c: an engine's pooled sandboxes (sandbox.h). A pooled sandbox is put back
** byte for byte as it was built, so that nothing of one run reaches the next: a script
** that changes every library, metatable and upvalue it can reach (and one killed at each
** limit) leaves nothing that the next run can see, which reads all of them; and the
** same scripts give the same envelopes through a pooled sandbox, used before, as through
** a fresh one (times aside), memory figures included.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "tp_test.h"
#include "fingerprint.h"

/* Under AddressSanitizer the sandbox has no arena, and so no pool: the pool's own checks
** expect none, and the rest compares fresh sandboxes with fresh ones. */
#if defined(__SANITIZE_ADDRESS__)
#define POOL_ON 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define POOL_ON 0
#endif
#endif
#ifndef POOL_ON
#define POOL_ON 1
#endif

/* What a script can see: every global and library field (type and value), every
** metatable getmetatable shows, the string metatable's fields, what the library
** functions keep between calls (math.random's generator, json.encode's buffer, tostring's
** display numbers, the collector's tuning), and the memory in use. */
static const char fingerprint[] =
  TP_FINGERPRINT_START
  "add('gc ' .. tostring(collectgarbage('count')))\n"
  "add('_ENV==_G ' .. tostring(rawequal(_ENV, _G)))\n"
  "return table.concat(out, '\\n')\n";

/* Changes what it can, and leaves things behind: globals, library tables (refused, but
** tried), the globals' metatable, math.random's seed, json.encode's buffer, tostring's
** numbers, the collector's mode, a suspended coroutine, a long string. */
static const char dirty[] =
  "x_global = 1\n"
  "for _, lib in ipairs({ string, table, math, utf8, coroutine, os, json, tools }) do\n"
  "  pcall(function() lib.upper = 1 end)\n"
  "  pcall(rawset, lib, 'extra', 1)\n"
  "  pcall(setmetatable, lib, {})\n"
  "end\n"
  "pcall(function() getmetatable('').__index = {} end)\n"
  "pcall(function() getmetatable('').__add = nil end)\n"
  "setmetatable(_G, { __index = function() return 42 end })\n"
  "math.randomseed(42)\n"
  "for i = 1, 10 do tostring({}) end\n"
  "json.encode({ string.rep('x', 100000) })\n"
  "collectgarbage('generational')\n"
  "local co = coroutine.create(function() coroutine.yield() end)\n"
  "coroutine.resume(co)\n"
  "keep = { co, string.rep('y', 50000) }\n"
  "print = nil; json = nil; tools = nil; string = nil; _G.math = nil\n"
  "return 1\n";

/* Runs src on e; returns the envelope with the times blanked (malloc'd). */
static char *run_on (tp_engine *e, const char *src, const tp_limits *lim) {
  char *env = NULL;
  int ok = 0;
  if (tp_engine_run(e, src, strlen(src), lim, &env, &ok) != TP_OK || env == NULL) {
    tp_free(env);
    return NULL;
  }
  char *out = malloc(strlen(env) + 1);
  if (out == NULL) { tp_free(env); return NULL; }
  static const char *const keys[] = { "\"cpu_ms\":", "\"wall_ms\":", "\"ms\":" };
  const char *p = env;
  char *o = out;
  while (*p) {
    size_t k = 0, n = 0;
    for (; k < sizeof keys / sizeof keys[0]; k++)
      if (strncmp(p, keys[k], n = strlen(keys[k])) == 0) break;
    if (k == sizeof keys / sizeof keys[0]) { *o++ = *p++; continue; }
    memcpy(o, p, n);
    o += n;
    p += n;
    *o++ = '0';
    while (*p && *p != ',' && *p != '}') p++;
  }
  *o = '\0';
  tp_free(env);
  return out;
}

static tp_engine *engine_without_pool (void) {
  tp_engine *e = tp_engine_create();
  if (e) e->core.chunks.sandboxes_max = 0;
  return e;
}

TEST(a_run_leaves_nothing_that_the_next_one_on_its_sandbox_can_see) {
  tp_engine *fresh = engine_without_pool(), *pooled = tp_engine_create();
  CHECK(fresh != NULL && pooled != NULL);
  char *want = run_on(fresh, fingerprint, NULL);
  CHECK(want != NULL && strstr(want, "\"ok\":true") != NULL);
  CHECK(strstr(want, "_G.string=table") != NULL);   /* the fingerprint reads what it says */
  CHECK(strstr(want, "random ") != NULL);
  char *d = run_on(pooled, dirty, NULL);
  CHECK(d != NULL && strstr(d, "\"ok\":true") != NULL);
  free(d);
  CHECK_INT(pooled->core.chunks.sandboxes, POOL_ON);
  CHECK((pooled->core.chunks.idle != NULL) == POOL_ON);  /* the dirty run's sandbox, back */
  tp_sandbox *sb = pooled->core.chunks.idle;
  char *got = run_on(pooled, fingerprint, NULL);
  CHECK(pooled->core.chunks.idle == sb);             /* it ran there, and came back */
  CHECK(got != NULL);
  if (want && got) CHECK_STR(got, want);
  free(got);
  /* and after runs that each limit killed in the middle of their work */
  static const char *const killers[] = {
    "local t = {} for i = 1, 1e9 do t[i] = string.rep('z', 100) .. i end",   /* memory */
    "local s = 0 while true do s = s + 1 end",                             /* instructions */
    "local t = setmetatable({}, { __index = function(t, k) return k end }) "
    "x_global = t; local co = coroutine.wrap(function() while true do coroutine.yield(t.x) end end) "
    "co() error({ code = 'mine' })",                                         /* an error */
  };
  tp_limits lim;
  tp_limits_init(&lim);
  lim.memory = 1u << 20;
  lim.instructions = 2000000;
  for (size_t i = 0; i < sizeof killers / sizeof killers[0]; i++) {
    char *k = run_on(pooled, killers[i], &lim);
    CHECK(k != NULL && strstr(k, "\"ok\":false") != NULL);
    free(k);
    got = run_on(pooled, fingerprint, NULL);
    CHECK(got != NULL);
    if (want && got) CHECK_STR(got, want);
    free(got);
  }
  CHECK(pooled->core.chunks.idle == sb);
  free(want);
  tp_engine_destroy(fresh);
  tp_engine_destroy(pooled);
}

/* The differential: the same scripts, each through a sandbox that a dirty run used just
** before and through a fresh one, give the same envelope, memory_peak and instruction
** counts included (only times differ). */
TEST(pooled_and_fresh_sandboxes_give_the_same_envelopes) {
  static const char *const scripts[] = {
    "return 1",
    "return 1 + 1",
    "return { a = 1, b = { 1, 2, 3 }, c = 'x', d = 2.5, e = json.null, f = {} }",
    "print('hello', 1, nil, true) print(('x'):rep(3)) return #_G",
    "local n = 0 for k in pairs(_G) do n = n + 1 end return n",
    "local ks = {} for k in pairs(string) do ks[#ks + 1] = k end table.sort(ks) return ks",
    "local t = {} for i = 1, 10000 do t[i] = tostring(i) end return #table.concat(t)",
    "return collectgarbage('count') > 0, tostring({}), tostring({})",
    "local co = coroutine.wrap(function(a) local b = coroutine.yield(a + 1) return b * 2 end)\n"
    "return { co(1), co(5) }",
    "return json.decode('{\"a\":[1,2,{\"b\":null}],\"c\":1.5e300}')",
    "error('boom')",
    "error({ code = 'x' })",
    "local x = = 1",
    "return undefined_thing.field",
    "return null",
    "string.upper = nil",
    "getmetatable('').__index = {}",
    "local s = string.rep('a', 1e7) return #s",
    "local t = {} while true do t[#t + 1] = {} end",
    "while true do end",
    "return math.pi, math.huge, -math.huge, math.maxinteger, 0.1 + 0.2, 1e21, -0.0, 5e-324",
    "return os.time{ year = 2020, month = 1, day = 1, hour = 0 }, utf8.char(72, 228, 8364)",
    "return select('#', tools.list())",
    "```lua\nreturn 7\n```",
    "-- a comment\nreturn 'after a comment'",
    "--[[ long\ncomment ]] local x = 3 return x",
    "x = 5\nreturn x",
  };
  tp_engine *fresh = engine_without_pool(), *pooled = tp_engine_create();
  CHECK(fresh != NULL && pooled != NULL);
  tp_limits lim;
  tp_limits_init(&lim);
  lim.memory = 4u << 20;
  lim.instructions = 5000000;
  for (size_t i = 0; i < sizeof scripts / sizeof scripts[0]; i++) {
    free(run_on(pooled, dirty, NULL));
    char *a = run_on(fresh, scripts[i], &lim), *b = run_on(pooled, scripts[i], &lim);
    CHECK(a != NULL && b != NULL);
    if (a && b && strcmp(a, b) != 0)
      TP_FAIL_AT("script %zu: fresh %.300s pooled %.300s", i, a, b);
    free(a);
    free(b);
  }
  CHECK_INT(pooled->core.chunks.sandboxes, POOL_ON);
  tp_engine_destroy(fresh);
  tp_engine_destroy(pooled);
}

/* A memory limit below what a fresh sandbox needs is refused the same way either way. */
TEST(a_memory_limit_below_a_fresh_sandbox_is_refused_alike) {
  tp_engine *fresh = engine_without_pool(), *pooled = tp_engine_create();
  free(run_on(pooled, "return 1", NULL));
  CHECK((pooled->core.chunks.idle != NULL) == POOL_ON);
  tp_limits lim;
  tp_limits_init(&lim);
  lim.memory = 4096;
  char *a = run_on(fresh, "return 1", &lim), *b = run_on(pooled, "return 1", &lim);
  CHECK(a != NULL && b != NULL);
  if (a && b) {
    CHECK(strstr(a, "limit.memory") != NULL);
    CHECK_STR(b, a);
  }
  free(a);
  free(b);
  tp_engine_destroy(fresh);
  tp_engine_destroy(pooled);
}

/* Runs alive at once beyond the pool's size get sandboxes of their own; the pool keeps
** at most its size, and an engine destroyed with runs alive lets go of everything. */
TEST(the_pool_holds_at_most_its_size) {
  tp_engine *e = tp_engine_create();
  tp_run *r[TP_CORE_SANDBOXES + 3];
  for (size_t i = 0; i < sizeof r / sizeof r[0]; i++) {
    r[i] = tp_run_create(e, "return 1", 8, NULL);
    CHECK(r[i] != NULL);
  }
  CHECK_INT(e->core.chunks.sandboxes, POOL_ON ? TP_CORE_SANDBOXES : 0);
  for (size_t i = 0; i < sizeof r / sizeof r[0]; i += 2) {
    CHECK_INT(tp_run_step(r[i], 0, 0), TP_DONE);
    tp_run_destroy(r[i]);
  }
  CHECK_INT(e->core.chunks.sandboxes, POOL_ON ? TP_CORE_SANDBOXES : 0);
  tp_engine_destroy(e);  /* the odd ones still alive */
}

int main (void) {
  RUN(a_run_leaves_nothing_that_the_next_one_on_its_sandbox_can_see);
  RUN(pooled_and_fresh_sandboxes_give_the_same_envelopes);
  RUN(a_memory_limit_below_a_fresh_sandbox_is_refused_alike);
  RUN(the_pool_holds_at_most_its_size);
  return tp_test_end();
}
