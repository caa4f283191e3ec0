/*
** provider_lua.c: the provider of Lua plugin tools (provider.h). Each tool's pdata is its
** handler in the host state H (host.c); a call runs it in a record's coroutine, as the
** life of a call in host.c's header says: dispatch, the common return all in C, the hand
** over to host.lua's M.resumed, and cancel.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lauxlib.h"

#include "registry.h"
#include "host.h"
#include "host_int.h"
#include "json.h"

static void *lua_tool_new (int ref) {
  tp__lua_tool *lt = malloc(sizeof *lt);
  if (lt != NULL) lt->ref = ref;
  return lt;
}

/* ---- E.add_tool: Lua plugin and upstream tools --------------------------------------- */

static json_t *schema_arg (lua_State *H, const char *field, const char *tool, int *bad,
                           char *err, size_t errlen) {
  json_t *doc = NULL;
  *bad = 0;
  lua_getfield(H, 1, field);
  if (lua_type(H, -1) == LUA_TSTRING) {
    size_t len;
    const char *text = lua_tolstring(H, -1, &len);
    json_error_t jerr;
    doc = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (doc == NULL) {
      snprintf(err, errlen, "tool %s: the %s schema is not JSON: %s at line %d column %d",
               tool, field, jerr.text, jerr.line, jerr.column);
      *bad = 1;
    }
  }
  else if (lua_type(H, -1) == LUA_TTABLE) {
    tp_json_err jerr;
    doc = tp__json_from_lua(H, -1, 0, 0, &jerr);
    if (doc == NULL) {
      snprintf(err, errlen, "tool %s: the %s schema cannot be read as JSON: %s", tool, field,
               jerr.message);
      *bad = 1;
    }
    else tp__host_fix_schema(doc, 0);
  }
  lua_pop(H, 1);
  return doc;
}

/* E.add_tool{name=, description=, input=, output=, handler=, timeout_ms=, origin=,
** alias=, upstream=} -> true | nil, message. Fields are checked by host.lua (upstream.lua
** for upstream tools: upstream = true, their own provider, kept across plugin reloads;
** alias, another name that reaches the tool, or a list of up to 8 of them); schemas are
** JSON text or tables. */
int tp__lua_add_tool (lua_State *H) {
  tp__host *h = tp__host_get(H);
  luaL_checktype(H, 1, LUA_TTABLE);
  lua_getfield(H, 1, "name");
  const char *name = luaL_checkstring(H, -1);
  lua_getfield(H, 1, "description");
  const char *desc = lua_tostring(H, -1);
  lua_getfield(H, 1, "origin");
  const char *origin = lua_tostring(H, -1);
  lua_getfield(H, 1, "timeout_ms");
  lua_Number tmo = lua_tonumber(H, -1);
  lua_pop(H, 1);
  lua_getfield(H, 1, "alias");  /* a string, or a list of them; kept on the stack */
  int alias_at = lua_gettop(H);
  lua_getfield(H, 1, "upstream");
  const tp__provider *prov = lua_toboolean(H, -1) ? &tp__upstream_provider : &tp__lua_provider;
  lua_pop(H, 1);
  char err[1024];
  const tp_tool *old = tp__tool_find(h->e, name);
  if (old != NULL) {
    luaL_pushfail(H);
    if (old->origin)  /* a plugin's: the provider says where */
      lua_pushfstring(H, "tool %s is defined already (at %s)", name, old->prov->describe(old));
    else
      lua_pushfstring(H, "tool %s is registered already", name);
    return 2;
  }
  int bad;
  json_t *in = schema_arg(H, "input", name, &bad, err, sizeof err);
  if (bad) { luaL_pushfail(H); lua_pushstring(H, err); return 2; }
  json_t *out = schema_arg(H, "output", name, &bad, err, sizeof err);
  if (bad) { json_decref(in); luaL_pushfail(H); lua_pushstring(H, err); return 2; }
  lua_getfield(H, 1, "handler");
  luaL_checktype(H, -1, LUA_TFUNCTION);
  int ref = luaL_ref(H, LUA_REGISTRYINDEX);
  void *pdata = prov == &tp__upstream_provider ? tp__upstream_tool_new(ref) : lua_tool_new(ref);
  if (pdata == NULL) {
    luaL_unref(H, LUA_REGISTRYINDEX, ref);
    json_decref(in);
    json_decref(out);
    luaL_pushfail(H);
    lua_pushstring(H, "out of memory");
    return 2;
  }
  tp_tool_def def = { 0 };
  def.name = name;
  def.description = desc;
  def.timeout_us = tmo > 0 ? (uint64_t)(tmo * 1000.0) : 0;
  int rc = tp__tool_add(h->e, &def, in, out, prov, pdata, origin);
  json_decref(in);
  json_decref(out);
  if (rc != TP_OK) {  /* the pdata is still ours */
    luaL_unref(H, LUA_REGISTRYINDEX, ref);
    free(pdata);
    luaL_pushfail(H);
    lua_pushstring(H, rc == TP_ENOMEM ? "out of memory" : tp_engine_error(h->e));
    return 2;
  }
  int nalias = lua_istable(H, alias_at) ? (int)luaL_len(H, alias_at) : 1;
  for (int k = 1; k <= nalias && nalias <= 8; k++) {
    if (lua_istable(H, alias_at)) lua_rawgeti(H, alias_at, k);
    else lua_pushvalue(H, alias_at);
    const char *alias = lua_tostring(H, -1);
    if (alias != NULL && strcmp(alias, name) != 0 &&
        (rc = tp__upstream_set_alias(h->e, name, alias)) != TP_OK) {
      luaL_pushfail(H);  /* the tool stays, reachable by its name */
      lua_pushstring(H, rc == TP_ENOMEM ? "out of memory" : tp_engine_error(h->e));
      return 2;
    }
    lua_pop(H, 1);
  }
  lua_pushboolean(H, 1);
  return 1;
}

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
  if (e->H == NULL && tp__host_open(e) != TP_OK) {
    tp_call_fail(c, "tool.failed", "the host Lua state cannot start");
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


/* ---- the provider of Lua plugin tools ---------------------------------------------- */

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

static void lua_destroy (void *pdata) {
  free(pdata);
}

const char *tp__lua_describe (const tp_tool *t) {
  return t->origin ? t->origin : "a Lua plugin";
}

const tp__provider tp__lua_provider = {
  "lua", TP__TOOL_TREE_ARGS, 1, tp__lua_dispatch, tp__lua_cancel, tp__lua_release,
  tp__lua_describe, NULL, lua_destroy
};
