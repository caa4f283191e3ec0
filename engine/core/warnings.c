/*
** warnings.c: advice for silent wrong answers. Some mistakes are legal Lua and stay
** legal (t.length, ipairs over an object, a sort comparator that returns a - b): the run
** goes on, and the envelope carries a "warnings" list, each {line, message}, that the
** model reads with its result. The pre-run check adds what it sees in the code
** (precheck.c); the sandbox adds what it sees while the script runs (ipairs here).
*/
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "lauxlib.h"

#include "run.h"
#include "warnings.h"

void tp__run_warn (tp_run *r, int line, const char *fmt, ...) {
  if (r == NULL) return;
  char msg[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (r->warnings == NULL && (r->warnings = json_array()) == NULL) return;
  size_t i;
  json_t *w;
  json_array_foreach(r->warnings, i, w)
    if (json_integer_value(json_object_get(w, "line")) == line &&
        strcmp(json_string_value(json_object_get(w, "message")), msg) == 0)
      return;
  if (json_array_size(r->warnings) >= TP_WARNINGS_MAX) return;
  w = json_object();
  if (w == NULL) return;
  if (line > 0) json_object_set_new(w, "line", json_integer(line));
  json_object_set_new(w, "message", json_string(msg));
  if (json_object_get(w, "message") == NULL) { json_decref(w); return; }  /* bad UTF-8 */
  json_array_append_new(r->warnings, w);
}

void tp__run_unwarn (tp_run *r, int line, const char *prefix) {
  if (r == NULL || r->warnings == NULL) return;
  size_t plen = strlen(prefix);
  for (size_t i = json_array_size(r->warnings); i-- > 0; ) {
    json_t *w = json_array_get(r->warnings, i);
    const char *m = json_string_value(json_object_get(w, "message"));
    if (json_integer_value(json_object_get(w, "line")) == line && m != NULL &&
        strncmp(m, prefix, plen) == 0)
      json_array_remove(r->warnings, i);
  }
}

/* The line of the script that called the C function running on L. */
static int caller_line (lua_State *L) {
  lua_Debug ar;
  for (int level = 1; lua_getstack(L, level, &ar); level++) {
    if (!lua_getinfo(L, "Sl", &ar)) break;
    if (ar.currentline > 0 && strcmp(ar.source, "=script") == 0) return ar.currentline;
  }
  return 0;
}

static int ipairs_next (lua_State *L) {
  lua_Integer i = luaL_checkinteger(L, 2);
  i = (lua_Integer)((lua_Unsigned)i + 1u);
  lua_pushinteger(L, i);
  return lua_geti(L, 1, i) == LUA_TNIL ? 1 : 2;
}

/* ipairs, as Lua's; over a table without item 1 whose first key is a string (an object,
** such as a tool's result), it warns that the loop visits nothing. */
int tp__sb_ipairs (lua_State *L) {
  luaL_checkany(L, 1);
  if (lua_type(L, 1) == LUA_TTABLE) {
    int empty1 = lua_rawgeti(L, 1, 1) == LUA_TNIL;
    lua_pop(L, 1);
    if (empty1) {
      lua_pushnil(L);
      if (lua_next(L, 1)) {
        int strkey = lua_type(L, -2) == LUA_TSTRING;
        lua_pop(L, 2);
        tp_sandbox *sb = tp__sandbox_of(L);
        if (strkey && sb != NULL && sb->run != NULL)
          tp__run_warn(sb->run, caller_line(L), "ipairs over a table with string keys (an "
                       "object) visits nothing: ipairs walks items 1..n; use pairs(t) for "
                       "its keys and values");
      }
    }
  }
  lua_pushcfunction(L, ipairs_next);
  lua_pushvalue(L, 1);
  lua_pushinteger(L, 0);
  return 3;
}

void tp__warn_table_text (lua_State *L, int idx) {
  if (luaL_getmetafield(L, idx, "__tostring") != LUA_TNIL) { lua_pop(L, 1); return; }
  tp_sandbox *sb = tp__sandbox_of(L);
  if (sb != NULL && sb->run != NULL)
    tp__run_warn(sb->run, caller_line(L), "string.format's %%s of a table shows only "
                 "\"table: N\", not what it holds: use json.encode(t) to show its contents");
}

/* __len of the JSON object tag (json.c, tp__json_tag_objects): #t of a table decoded from
** a JSON object is 0 when it has no items 1..n, whatever keys it holds. That is the
** raw length, as without the metamethod; when the object has keys, it also warns. */
int tp__sb_objlen (lua_State *L) {
  lua_Unsigned n = lua_rawlen(L, 1);
  if (n == 0 && lua_type(L, 1) == LUA_TTABLE) {
    lua_pushnil(L);
    if (lua_next(L, 1)) {
      lua_pop(L, 2);
      tp_sandbox *sb = tp__sandbox_of(L);
      if (sb != NULL && sb->run != NULL)
        tp__run_warn(sb->run, caller_line(L), "#t is 0 here because t came from a JSON "
                     "object (a tool's result or json.decode): it has keys, not a list of "
                     "items; walk it with for k, v in pairs(t) do ... end, and test for "
                     "empty with next(t) == nil");
    }
  }
  lua_pushinteger(L, (lua_Integer)n);
  return 1;
}

/* __index of the JSON array tag (json.c, tp__json_tag_arrays): a key a list lacks reads
** nil, as without it; t.length (JavaScript's) also warns, at the line that read it, in
** place of the pre-run check's guess at that line (precheck.c), which did not know what t
** would be. Called only when the key is missing: reading items costs nothing more. */
int tp__sb_arrindex (lua_State *L) {
  size_t n;
  const char *k = lua_type(L, 2) == LUA_TSTRING ? lua_tolstring(L, 2, &n) : NULL;
  if (k != NULL && n == 6 && memcmp(k, "length", 6) == 0) {
    tp_sandbox *sb = tp__sandbox_of(L);
    if (sb != NULL && sb->run != NULL) {
      int line = caller_line(L);
      tp__run_unwarn(sb->run, line, TP_WARN_LENGTH_STATIC);
      tp__run_warn(sb->run, line, "t.length is nil: t is a list from JSON (a tool's result "
                   "or json.decode) and Lua lists have no length field; the number of items "
                   "is #t (for i = 1, #t do ... end)");
    }
  }
  lua_pushnil(L);
  return 1;
}
