/*
** kvstore.c: require("tidepool.kv") in the host state, the kv.* tools' way to the engine's
** state store (store.h: tp_engine_set_store's store, else a memory store of the
** engine's own). Each function starts one operation on the engine's connection and
** returns its answer as (status, value, num, err), status one of "ok", "notfound",
** "too_big", "conflict", "error", "closed"; when the backend answers later (Redis), it
** returns a request instead, whose req:wait(cb) calls cb(status, value, num, err) once
** the answer comes, on the engine's loop (tools/kv.lua waits for it with ctx.await).
**
**   get(key)                       value: the text
**   set(key, text)                 num: bytes the kv holds now (too_big: would hold)
**   delete(key)                    "ok" or "notfound"
**   list(prefix, limit [, after])  value: a JSON array of keys; num: how many
**
** An answer given at once is copied before anything Lua runs (a backend's strings are
** borrowed during its callback, and nothing may raise through a backend's frames); one
** given later reaches Lua through tp__host_callback (protected, errors to the call that
** waits, as luv's callbacks do).
*/
#include <stdlib.h>
#include <string.h>

#include "lauxlib.h"
#include "lua.h"

#include "engine.h"
#include "host.h"
#include "store_int.h"

#define REQ_MT "tidepool.kv.request"

typedef struct kmod { tp_engine *e; lua_State *H; } kmod;

typedef struct kpend {
  lua_State *H;            /* the host state's main thread */
  int later;               /* the op returned before its answer: Lua holds a request */
  int answered;
  int ref_cb, ref_req;     /* while later: the callback (from req:wait) and the request */
  struct kpend **req;      /* the request's pointer to this, cleared when it is answered */
  int status;
  char *val, *err;
  size_t len;
  int64_t num;
  int oom;
} kpend;

static const char *const status_names[] = { "ok", "notfound", "too_big", "conflict", "error",
                                             "closed" };

static void push_answer (lua_State *L, const kpend *p) {
  lua_pushstring(L, p->oom ? "error" : status_names[p->status]);
  if (p->val) lua_pushlstring(L, p->val, p->len);
  else lua_pushnil(L);
  lua_pushinteger(L, (lua_Integer)p->num);
  if (p->oom) lua_pushliteral(L, "out of memory");
  else if (p->err) lua_pushstring(L, p->err);
  else lua_pushnil(L);
}

static void pend_free (kpend *p) {
  free(p->val);
  free(p->err);
  free(p);
}

/* Under tp__host_callback: calls the request's callback with the answer. */
static int deliver (lua_State *L) {
  kpend *p = lua_touserdata(L, 1);
  lua_rawgeti(L, LUA_REGISTRYINDEX, p->ref_cb);
  push_answer(L, p);
  lua_call(L, 4, 0);
  return 0;
}

static void on_reply (void *ud, const tp_store_reply *r) {
  kpend *p = ud;
  p->answered = 1;
  p->status = r->status >= TP_STORE_OK && r->status <= TP_STORE_CLOSED ? r->status
                                                                        : TP_STORE_ERROR;
  p->num = r->num;
  if (r->val && (p->val = malloc(r->len ? r->len : 1)) == NULL) p->oom = 1;
  else if (r->val) { memcpy(p->val, r->val, r->len); p->len = r->len; }
  if (r->err && (p->err = strdup(r->err)) == NULL) p->oom = 1;
  if (!p->later) return;  /* the op's caller reads it */
  lua_State *H = p->H;
  if (p->req) *p->req = NULL;
  if (p->ref_cb != LUA_NOREF && lua_checkstack(H, 3)) {
    lua_pushcfunction(H, deliver);
    lua_pushlightuserdata(H, p);
    tp__host_callback(H, 1);
  }
  luaL_unref(H, LUA_REGISTRYINDEX, p->ref_cb);
  luaL_unref(H, LUA_REGISTRYINDEX, p->ref_req);
  pend_free(p);
}

/* req:wait(cb) */
static int req_wait (lua_State *L) {
  kpend **pp = luaL_checkudata(L, 1, REQ_MT);
  luaL_checktype(L, 2, LUA_TFUNCTION);
  kpend *p = *pp;
  if (p == NULL || p->ref_cb != LUA_NOREF)
    return luaL_error(L, "this kv request was answered or waited on already");
  lua_settop(L, 2);
  p->ref_cb = luaL_ref(L, LUA_REGISTRYINDEX);
  return 0;
}

static int push_protected (lua_State *L) {
  push_answer(L, lua_touserdata(L, 1));
  return 4;
}

/* The answer of the op just started with p: at once (4 values), or a request. An answer
** at hand is pushed under a protected call, so that p is freed whatever happens. */
static int finish (lua_State *L, kpend *p) {
  if (p->answered) {
    if (!lua_checkstack(L, 6)) {
      pend_free(p);
      return luaL_error(L, "the kv store is out of memory");
    }
    lua_pushcfunction(L, push_protected);
    lua_pushlightuserdata(L, p);
    int st = lua_pcall(L, 1, 4, 0);
    pend_free(p);
    if (st != LUA_OK) return lua_error(L);  /* its error object is on top */
    return 4;
  }
  /* from here p is the backend's until it answers: if this raises, the answer frees it */
  p->later = 1;
  kpend **pp = lua_newuserdatauv(L, sizeof *pp, 0);
  *pp = NULL;
  luaL_setmetatable(L, REQ_MT);
  lua_pushvalue(L, -1);
  p->ref_req = luaL_ref(L, LUA_REGISTRYINDEX);
  *pp = p;
  p->req = pp;
  return 1;
}

/* A new pending answer and the connection, or raises. */
static kpend *start (lua_State *L, tp_store_conn **conn) {
  kmod *m = lua_touserdata(L, lua_upvalueindex(1));
  *conn = tp__engine_store_conn(m->e);
  if (*conn == NULL)
    return luaL_error(L, "the kv store cannot be reached: %s", tp_engine_error(m->e)), NULL;
  kpend *p = calloc(1, sizeof *p);
  if (p == NULL) return luaL_error(L, "the kv store is out of memory"), NULL;
  p->H = m->H;
  p->ref_cb = p->ref_req = LUA_NOREF;
  return p;
}

static int kv_get (lua_State *L) {
  size_t kl;
  const char *k = luaL_checklstring(L, 1, &kl);
  tp_store_conn *c;
  kpend *p = start(L, &c);
  c->ops->kv_get(c, k, kl, on_reply, p);
  return finish(L, p);
}

static int kv_set (lua_State *L) {
  size_t kl, vl;
  const char *k = luaL_checklstring(L, 1, &kl);
  const char *v = luaL_checklstring(L, 2, &vl);
  tp_store_conn *c;
  kpend *p = start(L, &c);
  c->ops->kv_set(c, k, kl, v, vl, on_reply, p);
  return finish(L, p);
}

static int kv_delete (lua_State *L) {
  size_t kl;
  const char *k = luaL_checklstring(L, 1, &kl);
  tp_store_conn *c;
  kpend *p = start(L, &c);
  c->ops->kv_del(c, k, kl, on_reply, p);
  return finish(L, p);
}

static int kv_list (lua_State *L) {
  size_t pl, al = 0;
  const char *prefix = luaL_optlstring(L, 1, "", &pl);
  lua_Integer limit = luaL_optinteger(L, 2, 1000);
  const char *after = luaL_optlstring(L, 3, NULL, &al);
  if (limit < 1) limit = 1;
  if (limit > 100000) limit = 100000;
  tp_store_conn *c;
  kpend *p = start(L, &c);
  c->ops->kv_list(c, prefix, pl, after, al, (size_t)limit, on_reply, p);
  return finish(L, p);
}

/* require("tidepool.kv") in the host state; upvalue 1: the engine (light userdata). */
int tp__kvstore_open (lua_State *L) {
  tp_engine *e = lua_touserdata(L, lua_upvalueindex(1));
  if (luaL_newmetatable(L, REQ_MT)) {
    lua_createtable(L, 0, 1);
    lua_pushcfunction(L, req_wait);
    lua_setfield(L, -2, "wait");
    lua_setfield(L, -2, "__index");
  }
  lua_pop(L, 1);
  kmod *m = lua_newuserdatauv(L, sizeof *m, 0);
  m->e = e;
  lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_MAINTHREAD);
  m->H = lua_tothread(L, -1);
  lua_pop(L, 1);
  static const luaL_Reg fns[] = {
    { "get", kv_get }, { "set", kv_set }, { "delete", kv_delete }, { "list", kv_list },
    { NULL, NULL } };
  lua_createtable(L, 0, 6);
  lua_pushvalue(L, -2);
  luaL_setfuncs(L, fns, 1);
  lua_pushinteger(L, (lua_Integer)TP_STORE_MAX_VALUE);
  lua_setfield(L, -2, "MAX_VALUE");
  lua_pushinteger(L, (lua_Integer)TP_STORE_KV_CAP);
  lua_setfield(L, -2, "CAP");
  return 1;
}
