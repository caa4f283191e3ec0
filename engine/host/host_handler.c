/*
** host_handler.c: the calls of a tool whose handler is a Lua function in the host state H:
** the Lua plugin tools' (provider_lua.c) and the upstream MCP servers' tools'
** (provider_upstream.c), whose providers both dispatch, cancel, release and describe
** through these. A tool's pdata begins with a tp__lua_tool, its handler's reference.
**
** The life of a Lua tool call:
**   host_dispatch       takes an idle record from the pool (host.lua makes a new one when
**                       there is none), binds it (the box gets the call, c->host_ref the
**                       box's reference) and resumes its coroutine with the handler and
**                       the argument tree: body() makes the arguments' Lua table from the
**                       tree inside the coroutine (no JSON text, no pcall of its own) and
**                       calls the handler with the record's ctx.
**   it returns at once  the common case, all in C: body wipes what the handler wrote into
**                       ctx and yields DONE, result; the result is converted straight from
**                       the coroutine's stack, the record goes back to the pool and the
**                       call is completed (tp__call_complete_tree: schema checks).
**   anything else       (an error, a wait, a timeout, a record that handed luv a function)
**                       goes to host.lua's M.resumed, which ends the call through
**                       E.complete(box, ok, value) or leaves it waiting: ctx.sleep /
**                       ctx.await yield the coroutine and a luv callback resumes it later,
**                       through the callback runner (host_state.c; never exits). Such a
**                       record is not reused: its box is unbound and its reference dropped.
**   it is cut short     host_cancel (call timeout, run finished or destroyed): the box
**                       is emptied, the call's luv handles closed, its coroutine closed
**                       (lua_closethread), and the handler's ownership of the call ends.
** The box, the body and the timed resume are host_call.c's.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lauxlib.h"

#include "registry.h"
#include "host.h"
#include "host_int.h"
#include "json.h"

/* ---- calls ------------------------------------------------------------------------ */

/* Tells host.lua the engine's workspace when it differs from what it was told last
** (tp_engine_set_workspace may be called at any time); ctx.workspace shows it. */
static void tell_workspace (lua_State *H, tp__host *h, const tp_engine *e) {
  uint64_t m = e->workspace_max_set ? e->workspace_max : TP_WORKSPACE_MAX_DEFAULT;
  int same = h->ws_told && h->ws_max == m &&
             (e->workspace == NULL ? h->ws == NULL
                                   : h->ws != NULL && strcmp(h->ws, e->workspace) == 0);
  if (same) return;
  char *copy = NULL;
  if (e->workspace != NULL && (copy = strdup(e->workspace)) == NULL)
    luaL_error(H, "not enough memory");
  lua_rawgeti(H, LUA_REGISTRYINDEX, h->rt);
  lua_getfield(H, -1, "set_workspace");
  lua_remove(H, -2);
  if (e->workspace) lua_pushstring(H, e->workspace);
  else lua_pushnil(H);
  lua_pushinteger(H, (lua_Integer)(m > (uint64_t)LUA_MAXINTEGER ? LUA_MAXINTEGER : m));
  lua_call(H, 2, 0);  /* cannot raise after the copy is taken: a plain assignment */
  free(h->ws);
  h->ws = copy;
  h->ws_max = m;
  h->ws_told = 1;
}

/* The workspace host.lua was told (tell_workspace) is still the engine's. */
static int workspace_told (const tp__host *h, const tp_engine *e) {
  uint64_t m = e->workspace_max_set ? e->workspace_max : TP_WORKSPACE_MAX_DEFAULT;
  return h->ws_told && h->ws_max == m &&
         (e->workspace == NULL ? h->ws == NULL
                               : h->ws != NULL && strcmp(h->ws, e->workspace) == 0);
}

/* prepare_p(h, new): the part of a dispatch that runs Lua, protected: tells host.lua the
** workspace when it changed, and with new makes a record (host.lua's new_record) and
** references its box, which it returns as light userdata. */
static int prepare_p (lua_State *H) {
  tp__host *h = lua_touserdata(H, 1);
  int fresh = lua_toboolean(H, 2);
  lua_settop(H, 0);
  if (!workspace_told(h, h->e)) tell_workspace(H, h, h->e);
  if (!fresh) return 0;
  lua_rawgeti(H, LUA_REGISTRYINDEX, h->rt);
  lua_getfield(H, -1, "new_record");
  lua_call(H, 0, 1);
  tp__callbox *b = luaL_testudata(H, -1, CALLBOX);
  if (b == NULL) return luaL_error(H, "host.lua's new_record returned no call box");
  b->ref = tp__host_take_ref(H);
  lua_pushlightuserdata(H, b);
  return 1;
}

/* An idle record for a call: from the pool when it has one whose coroutine is still
** waiting for its next call with no debug hook left on it (the others are let go), else
** a new one. NULL when host.lua failed; msg says why. */
static tp__callbox *take_record (lua_State *H, tp__host *h, char *msg, size_t msglen) {
  tp__callbox *b = NULL;
  while (h->npool > 0 && b == NULL) {
    b = h->pool[--h->npool];
    if (lua_status(b->co) != LUA_YIELD || lua_gettop(b->co) != 0 || lua_gethook(b->co) != NULL) {
      tp__host_unbind(H, h, b, 0);
      b = NULL;
    }
  }
  if (b != NULL && workspace_told(h, h->e)) return b;
  int top = lua_gettop(H);
  lua_pushcfunction(H, prepare_p);
  lua_pushlightuserdata(H, h);
  lua_pushboolean(H, b == NULL);
  if (tp__host_pcall(H, 2, 1) != LUA_OK) {
    snprintf(msg, msglen, "the host could not start the handler: %s", tp__host_error_text(H, -1));
    if (b != NULL) h->pool[h->npool++] = b;  /* it came from there: there is room */
    b = NULL;
  }
  else if (b == NULL) b = lua_touserdata(H, -1);
  lua_settop(H, top);
  return b;
}

/* Hands a resume of box b's coroutine that did not end in a plain return (an error, a
** wait, a timeout, a claimed record) to host.lua's M.resumed, which ends the call or
** leaves it waiting. The box is at index bi of H. */
static void hand_over (lua_State *H, tp__host *h, tp__callbox *b, int bi, int st, int nres,
                       uint64_t held, int late) {
  lua_State *co = b->co;
  int top = lua_gettop(H);
  if (st == LUA_ERRMEM) tp__host_fail_errmem(H, h, b);
  lua_rawgeti(H, LUA_REGISTRYINDEX, h->resumed);
  lua_getiuservalue(H, bi, 1);                   /* the record */
  tp__host_move_outcome(co, H, st, nres);
  lua_pushnumber(H, (lua_Number)held / 1e6);
  lua_pushboolean(H, late);
  if (tp__host_pcall(H, 6, 0) != LUA_OK && b->c != NULL) {
    tp_call *c = b->c;
    char msg[600];
    snprintf(msg, sizeof msg, "the host could not end the handler's call: %s",
             tp__host_error_text(H, -1));
    tp__host_unbind(H, h, b, 0);
    tp_call_fail(c, "tool.failed", msg);
  }
  lua_settop(H, top);
}

static void host_dispatch (tp_engine *e, tp_call *c, const tp_tool *t) {
  if (e->H == NULL) {  /* its tools outlive H only once the engine is being destroyed */
    tp_call_fail(c, "tool.failed", "the host Lua state is closed");
    return;
  }
  lua_State *H = e->H;
  tp__host *h = e->host_state;
  char msg[800];
  tp__callbox *b = take_record(H, h, msg, sizeof msg);
  if (b == NULL) {
    tp_call_fail(c, "tool.failed", msg);
    return;
  }
  lua_State *co = b->co;
  int top = lua_gettop(H);
  if (!lua_checkstack(H, 12) || !lua_checkstack(co, 3)) {
    tp__host_unbind(H, h, b, 0);
    tp_call_fail(c, "tool.failed", "the host could not start the handler: out of memory");
    return;
  }
  lua_rawgeti(H, LUA_REGISTRYINDEX, b->ref);  /* anchors the record while it runs */
  b->c = c;
  b->claimed = 0;
  c->host_ref = b->ref;
  lua_pushlightuserdata(co, (void *)&tp__host_run_key);
  lua_rawgeti(co, LUA_REGISTRYINDEX, ((const tp__lua_tool *)t->pdata)->ref);
  int counts[64];
  tp__host_args args = { NULL, NULL, 0, counts };
  args.text = tp__call_args_text_push(c, &args.len, counts);
  if (args.text == NULL) args.tree = tp__call_args_tree(c);  /* made now if the codec made none */
  lua_pushlightuserdata(co, &args);
  int nres = 0, late;
  uint64_t held;
  int st = tp__host_resume_timed(H, e, c, co, 3, &nres, &held, &late);
  if (st == LUA_YIELD && nres == 2 && lua_touserdata(co, -2) == &tp__host_done_key && !late &&
      b->c == c && !b->claimed) {
    /* returned at once: the result is taken from the coroutine's stack, the record goes
    ** back to the pool, then the call completes (which may start another call) */
    size_t cost;
    int keep = h->npool < POOL_MAX;
    tp__call_answer a;
    if (tp__call_lua_answer(c, co, -1, &a)) {  /* no tree: the codec's text */
      c->end_ns = h->resume_end_ns;  /* it ended with the resume (it is not over yet) */
      lua_pop(co, 2);
      tp__host_unbind(H, h, b, keep);
      if (keep) h->pool[h->npool++] = b;
      tp__call_complete_answer(c, &a);
      lua_settop(H, top);
      return;
    }
    json_t *v = tp__host_result_tree(c, co, -1, msg, sizeof msg, &cost);
    lua_pop(co, 2);
    tp__host_unbind(H, h, b, keep);
    if (keep) h->pool[h->npool++] = b;
    if (v == NULL) tp_call_fail(c, "tool.invalid_output", msg);
    else if (cost == NOT_CHARGED) tp__call_complete_tree(c, v);
    else tp__call_complete_charged(c, v, cost);
  }
  else hand_over(H, h, b, top + 1, st, nres, held, late);
  lua_settop(H, top);
}

static void host_cancel (tp_engine *e, tp_call *c) {
  lua_State *H = e->H;
  if (H == NULL || c->host_ref == LUA_NOREF || !lua_checkstack(H, 4)) return;
  tp__host *h = e->host_state;
  int top = lua_gettop(H);
  lua_rawgeti(H, LUA_REGISTRYINDEX, c->host_ref);  /* the box, kept on the stack */
  tp__callbox *b = lua_touserdata(H, -1);
  lua_State *co = b->co;
  tp__host_unbind(H, h, b, 0);           /* the box is empty before any Lua runs */
  lua_getiuservalue(H, top + 1, 1);
  if (tp__host_rt_call(H, "cancel", 1, 0) != LUA_OK)  /* closes the call's luv handles */
    tp__engine_log(e, TP_LOG_ERROR, "host", "tidepool: cancelling tools.%s: %s", c->name,
                   tp__host_error_text(H, -1));
  if (lua_status(co) == LUA_YIELD) {
    if (lua_closethread(co, H) != LUA_OK)  /* its pending to-be-closed variables ran */
      tp__engine_log(e, TP_LOG_ERROR, "host", "tidepool: closing tools.%s: %s", c->name,
                     tp__host_error_text(co, -1));
  }
  lua_settop(H, top);
  if (c->handler_owns && c->cancelled)
    tp_call_fail(c, "tool.timeout", "cancelled");  /* ends the handler's ownership only */
}

/* ---- what the two providers' tables name ------------------------------------------ */

void tp__lua_dispatch (tp_engine *e, const tp_tool *t, tp_call *c) {
  host_dispatch(e, c, t);
}

void tp__lua_cancel (tp_engine *e, const tp_tool *t, tp_call *c) {
  (void)t;
  host_cancel(e, c);
}

/* The handler's reference goes (H may be gone already: then it went with it). Called
** again when the tool leaves the registry after H closed: nothing left then. */
void tp__lua_release (tp_engine *e, tp_tool *t) {
  tp__lua_tool *lt = t->pdata;
  if (e != NULL && e->H != NULL && lt->ref != LUA_NOREF)
    luaL_unref(e->H, LUA_REGISTRYINDEX, lt->ref);
  lt->ref = LUA_NOREF;
}

const char *tp__lua_describe (const tp_tool *t) {
  return t->origin ? t->origin : "a Lua plugin";
}
