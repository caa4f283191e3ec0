/*
** test_allowlist.c: the sandbox is built from sandbox/allowlist.h's pointers. Every WRAP
** entry names a function (and no other kind does), and a fresh sandbox holds, under each
** name, exactly what its entry says: the WRAP entry's function, Lua's own function or
** value for a KEEP entry, nothing for a DROP entry, tidepool's own for an OURS entry.
** Lua's originals are read from a plain state with every standard library open.
*/
#include <string.h>

#include "lauxlib.h"
#include "lualib.h"

#include "tidepool.h"
#include "sandbox.h"
#include "allowlist.h"
#include "tp_test.h"

static const char *kind_name (int kind) {
  switch (kind) {
    case TP_KEEP: return "KEEP";
    case TP_WRAP: return "WRAP";
    case TP_DROP: return "DROP";
    case TP_OURS: return "OURS";
    default: return "?";
  }
}

/* Pushes lib.name (lib "_G": the global name) as L's globals hold it, or nil. Raw reads,
** so that neither the globals' foreign-name __index nor a read-only proxy is in the way
** (a proxy's __index is its real table). */
static void push_entry (lua_State *L, const char *lib, const char *name) {
  lua_pushglobaltable(L);
  if (strcmp(lib, "_G") != 0) {
    lua_getfield(L, -1, lib);
    lua_remove(L, -2);
  }
  if (name == NULL) return;  /* the library itself */
  if (!lua_istable(L, -1)) { lua_pop(L, 1); lua_pushnil(L); return; }
  lua_getfield(L, -1, name);  /* through the proxy's __index (a table: no code runs) */
  lua_remove(L, -2);
}

/* The values on top of L and P are equal: numbers and strings, the only values (other
** than functions) that Lua's libraries hold and that can be compared across states. */
static int same_value (lua_State *L, lua_State *P) {
  int t = lua_type(L, -1);
  if (t != lua_type(P, -1)) return 0;
  if (t == LUA_TNUMBER) {
    if (lua_isinteger(L, -1) != lua_isinteger(P, -1)) return 0;
    return lua_isinteger(L, -1) ? lua_tointeger(L, -1) == lua_tointeger(P, -1)
                                : lua_tonumber(L, -1) == lua_tonumber(P, -1);
  }
  if (t == LUA_TSTRING) {
    size_t n, m;
    const char *s = lua_tolstring(L, -1, &n), *r = lua_tolstring(P, -1, &m);
    return n == m && memcmp(s, r, n) == 0;
  }
  return 0;
}

TEST(every_wrap_entry_names_a_function_and_no_other_kind_does) {
  CHECK(tp__allowlist_len > 0);
  size_t wraps = 0;
  for (size_t i = 0; i < tp__allowlist_len; i++) {
    const tp_allow *a = &tp__allowlist[i];
    const char *name = a->name ? a->name : "(library)";
    if (a->kind == TP_WRAP) {
      wraps++;
      if (a->fn == NULL) TP_FAIL_AT("WRAP %s.%s has no function", a->lib, name);
      if (a->reason == NULL || a->reason[0] == '\0')
        TP_FAIL_AT("WRAP %s.%s gives no reason", a->lib, name);
    }
    else if (a->fn != NULL)
      TP_FAIL_AT("%s %s.%s names a function", kind_name(a->kind), a->lib, name);
    if ((a->kind == TP_DROP || a->kind == TP_OURS) && (a->reason == NULL || !a->reason[0]))
      TP_FAIL_AT("%s %s.%s gives no reason", kind_name(a->kind), a->lib, name);
    if (a->kind < TP_KEEP || a->kind > TP_OURS)
      TP_FAIL_AT("%s.%s has kind %d", a->lib, name, a->kind);
  }
  CHECK_INT(wraps, 23);
}

/* Two WRAP entries with one function would be a copy-paste slip: each guards its own. */
TEST(no_two_wrap_entries_share_a_function) {
  for (size_t i = 0; i < tp__allowlist_len; i++)
    for (size_t j = 0; j < i; j++) {
      const tp_allow *a = &tp__allowlist[i], *b = &tp__allowlist[j];
      if (a->kind == TP_WRAP && b->kind == TP_WRAP && a->fn == b->fn)
        TP_FAIL_AT("%s.%s and %s.%s share a function", a->lib, a->name, b->lib, b->name);
    }
}

TEST(the_sandbox_holds_what_each_entry_says) {
  tp_limits lim;
  tp_limits_init(&lim);
  tp_sandbox *sb = tp__sandbox_create(&lim);
  lua_State *P = luaL_newstate();
  CHECK(sb != NULL && P != NULL);
  if (sb == NULL || P == NULL) { tp__sandbox_destroy(sb); if (P) lua_close(P); return; }
  luaL_openlibs(P);
  lua_State *L = sb->L;
  for (size_t i = 0; i < tp__allowlist_len; i++) {
    const tp_allow *a = &tp__allowlist[i];
    const char *name = a->name ? a->name : "(library)";
    push_entry(L, a->lib, a->name);
    push_entry(P, a->lib, a->name);
    int t = lua_type(L, -1);
    switch (a->kind) {
      case TP_WRAP: {
        lua_CFunction got = lua_tocfunction(L, -1);
        if (got != a->fn) TP_FAIL_AT("%s.%s is not its entry's wrapper", a->lib, name);
        if (got != NULL && got == lua_tocfunction(P, -1))
          TP_FAIL_AT("%s.%s is Lua's own function, not a wrapper", a->lib, name);
        break;
      }
      case TP_KEEP:
        if (t == LUA_TFUNCTION) {
          if (!lua_iscfunction(L, -1) || lua_tocfunction(L, -1) != lua_tocfunction(P, -1))
            TP_FAIL_AT("%s.%s is not Lua's own function", a->lib, name);
        }
        else if (!same_value(L, P))
          TP_FAIL_AT("%s.%s is a %s, not Lua's value", a->lib, name, lua_typename(L, t));
        break;
      case TP_DROP:
        if (t != LUA_TNIL) TP_FAIL_AT("DROP %s.%s is in the sandbox", a->lib, name);
        if (lua_isnil(P, -1)) TP_FAIL_AT("DROP %s.%s is not in Lua at all", a->lib, name);
        break;
      case TP_OURS:
        if (t == LUA_TNIL) TP_FAIL_AT("OURS %s.%s is missing", a->lib, name);
        if (!lua_isnil(P, -1)) TP_FAIL_AT("OURS %s.%s is Lua's own name", a->lib, name);
        break;
    }
    lua_pop(L, 1);
    lua_pop(P, 1);
  }
  lua_close(P);
  tp__sandbox_destroy(sb);
}

/* A sample of wrappers, through a script: each answers as the table's function does, where
** Lua's own would answer otherwise (an address, a format, a chunk's checks, a loop for
** ever, the script's thread seen as a coroutine, stdout). */
TEST(wrapped_functions_behave_as_their_wrappers) {
  tp_engine *e = tp_engine_create();
  CHECK(e != NULL);
  if (e == NULL) return;
  static const char src[] =
    "local t = {}\n"
    "t[1] = tostring({})\n"
    "t[2] = select(2, pcall(string.format, '%p', {}))\n"
    "t[3] = select(2, load('\\27Lua'))\n"
    "t[4] = string.rep('', 1e18)\n"
    "t[5] = coroutine.isyieldable()\n"
    "t[6] = select(2, coroutine.running())\n"
    "print('to the logs')\n"
    "return t";
  char *env = NULL;
  int ok = -1;
  CHECK_INT(tp_engine_run(e, src, sizeof src - 1, NULL, &env, &ok), TP_OK);
  CHECK_INT(ok, 1);
  CHECK_HAS(env, "\"result\":[\"table: #1\",\"bad argument #2 to 'format' ('%p' shows "
                 "memory addresses, which the sandbox hides)\",\"attempt to load a binary "
                 "chunk (mode is 't')\",\"\",false,true],\"logs\":[\"to the logs\"]");
  tp_free(env);
  tp_engine_destroy(e);
}

int main (int argc, char **argv) {
  tp_test_args(argc, argv);
  RUN(every_wrap_entry_names_a_function_and_no_other_kind_does);
  RUN(no_two_wrap_entries_share_a_function);
  RUN(the_sandbox_holds_what_each_entry_says);
  RUN(wrapped_functions_behave_as_their_wrappers);
  return tp_test_end();
}
