/*
** host_state.c: the basics of the engine's host Lua state H (host.c opens it): its record
** in H's registry, references, a pcall that keeps error tables, a call of host.lua's
** runtime table, and the luv callback runner. Under every other file that touches H
** (host_int.h lists them bottom up), and under http.c and kvstore.c.
*/
#include <stdio.h>

#include "lauxlib.h"

#include "host.h"
#include "host_int.h"

const char tp__host_key = 0;

const char tp__host_run_key = 0, tp__host_done_key = 0;

tp__host *tp__host_get (lua_State *H) {
  lua_rawgetp(H, LUA_REGISTRYINDEX, &tp__host_key);
  tp__host *h = lua_touserdata(H, -1);
  lua_pop(H, 1);
  return h;
}

int tp__host_take_ref (lua_State *H) {
  int ref = luaL_ref(H, LUA_REGISTRYINDEX);
  if (ref != LUA_REFNIL && ref != LUA_NOREF) tp__host_get(H)->nrefs++;
  return ref;
}

void tp__host_drop_ref (lua_State *H, int *ref) {
  if (*ref == LUA_NOREF || *ref == LUA_REFNIL) { *ref = LUA_NOREF; return; }
  luaL_unref(H, LUA_REGISTRYINDEX, *ref);
  tp__host_get(H)->nrefs--;
  *ref = LUA_NOREF;
}

/* Message handler: keeps strings and error tables as they are; anything else becomes
** a string. */
static int msgh (lua_State *L) {
  int t = lua_type(L, 1);
  if (t != LUA_TSTRING && t != LUA_TTABLE)
    lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
  return 1;
}

/* lua_pcall with msgh; the error (if any) is left on top, as a string when possible. */
int tp__host_pcall (lua_State *H, int nargs, int nres) {
  int base = lua_gettop(H) - nargs;
  lua_pushcfunction(H, msgh);
  lua_insert(H, base);
  int st = lua_pcall(H, nargs, nres, base);
  lua_remove(H, base);
  return st;
}

const char *tp__host_error_text (lua_State *H, int idx) {
  if (lua_type(H, idx) == LUA_TTABLE) {
    lua_getfield(H, idx, "message");
    const char *m = lua_tostring(H, -1);
    lua_pop(H, 1);  /* still referenced by the table */
    if (m) return m;
  }
  const char *s = lua_tostring(H, idx);
  return s ? s : "unknown error";
}

/* ---- the luv callback runner --------------------------------------------------------
** luv calls this with the callback and its nargs arguments on top of H. It must leave
** the results (returning their count) or, on error, nothing (returning -status), and
** never exit the process. An error goes to the call that owns the callback when
** host.lua knows it (callbacks made by ctx), else to stderr; stdout is the program's. */
int tp__host_cb_pcall (lua_State *L, int nargs, int nresults, int flags) {
  (void)flags;
  int fn = lua_gettop(L) - nargs;
  lua_pushvalue(L, fn);            /* a copy of the callback, to find its owner */
  lua_insert(L, fn);
  lua_pushcfunction(L, msgh);
  lua_insert(L, fn + 1);           /* copy, msgh, callback, args */
  int st = lua_pcall(L, nargs, nresults, fn + 1);
  if (st == LUA_OK) {
    lua_remove(L, fn + 1);
    lua_remove(L, fn);
    return nresults == LUA_MULTRET ? lua_gettop(L) - fn + 1 : nresults;
  }
  /* stack: copy, msgh, error */
  tp__host *h = tp__host_get(L);
  int routed = 0;
  if (h != NULL && h->rt != LUA_NOREF && lua_checkstack(L, 6)) {
    lua_rawgeti(L, LUA_REGISTRYINDEX, h->rt);
    lua_getfield(L, -1, "callback_error");
    lua_remove(L, -2);
    lua_pushvalue(L, fn);
    lua_pushstring(L, tp__host_error_text(L, fn + 2));
    if (lua_pcall(L, 2, 1, 0) == LUA_OK) routed = lua_toboolean(L, -1);
    lua_pop(L, 1);
  }
  if (!routed)
    tp__engine_log(h ? h->e : NULL, TP_LOG_ERROR, "host",
                   "tidepool: error in a luv callback of the host state: %s",
                   tp__host_error_text(L, fn + 2));
  lua_settop(L, fn - 1);
  return -st;
}

int tp__host_callback (lua_State *H, int nargs) {
  int st = tp__host_cb_pcall(H, nargs, 0, 0);
  return st < 0 ? -st : LUA_OK;
}

/* Calls host.lua's rt[name] with the nargs values on top; leaves nres results. */
int tp__host_rt_call (lua_State *H, const char *name, int nargs, int nres) {
  tp__host *h = tp__host_get(H);
  lua_rawgeti(H, LUA_REGISTRYINDEX, h->rt);
  lua_getfield(H, -1, name);
  lua_remove(H, -2);
  lua_insert(H, -1 - nargs);
  return tp__host_pcall(H, nargs, nres);
}
