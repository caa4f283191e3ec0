/*
** namespace.c: what the script sees of tools: the `tools` namespace, discovery
** (tools.list, tools.describe, tools.search: namespaces whose call is discovery, so tools
** may share their names) and `parallel`.
**
** A call, seen from the script: tools.a.b{...} copies the arguments out as JSON and
** starts the call on the host at once (unknown names, bad arguments, limits and handlers
** that answer straight away complete it there); if it is not complete, the script's
** thread yields [tp__request_tag, id] and the host resumes it once any call completes;
** the continuation then takes the result if its call is done, or yields again. The
** yield passes through the script's own coroutines (sandbox.c) and through parallel.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lauxlib.h"
#include "lobject.h"
#include "lstate.h"
#include "ldebug.h"

#include "calls.h"
#include "codec.h"
#include "replay.h"
#include "json.h"

/* ---- what the script sees --------------------------------------------------------- */

static char ns_key;  /* namespace proxies: [ns_key] = the dotted prefix ("" at the root) */

/* The line of the script's innermost frame below the running C function, or 0: what
** lua_getstack and lua_getinfo(L, "Sl") say, read off the frames directly, since "S"
** formats the source's short name on every call (a fifth of a call's own instructions). */
static int current_line (lua_State *L) {
  for (CallInfo *ci = L->ci->previous; ci != NULL && ci != &L->base_ci; ci = ci->previous) {
    if (!isLua(ci)) continue;
    const Proto *p = ci_func(ci)->p;
    const TString *src = p->source;
    if (src == NULL || tsslen(src) != sizeof "=script" - 1 ||
        memcmp(getstr(src), "=script", sizeof "=script" - 1) != 0) continue;
    int line = luaG_getfuncline(p, pcRel(ci->u.l.savedpc, p));
    if (line > 0) return line;
  }
  return 0;
}

/* The dotted name of a namespace proxy at idx (its length in *len), or NULL. */
static const char *ns_prefix (lua_State *L, int idx, size_t *len) {
  if (lua_type(L, idx) != LUA_TTABLE) return NULL;
  lua_rawgetp(L, idx, &ns_key);
  const char *p = lua_tolstring(L, -1, len);  /* kept alive by the table */
  lua_pop(L, 1);
  return p;
}

static void push_namespace (lua_State *L, int name, int mt);

/* Fails a call that is refused before it starts; the script gets the error directly. */
static void call_refuse (tp_run *r, tp_call *c, const char *code, const char *msg) {
  tp__call_finish(c, 0, NULL, code, msg);
  tp__call_taken(r, c);
}

static int tool_k (lua_State *L, int status, lua_KContext ctx);
static int tools_list (lua_State *L);
static int tools_describe (lua_State *L);
static int tools_search (lua_State *L);

/* tools.list, tools.describe and tools.search are namespaces like any other (so a plugin
** tool may be named search, list.all or describe.x), whose call is discovery unless a
** table of arguments goes to a tool of exactly that name: tools.search("words") searches,
** tools.search{q = "x"} calls a tool named search when one is loaded. */
static lua_CFunction discovery_of (const char *prefix, size_t len) {
  if (len == 4 && memcmp(prefix, "list", 4) == 0) return tools_list;
  if (len == 8 && memcmp(prefix, "describe", 8) == 0) return tools_describe;
  if (len == 6 && memcmp(prefix, "search", 6) == 0) return tools_search;
  return NULL;
}

static int tool_loaded (lua_State *L, const char *name) {
  tp_sandbox *sb = tp__sandbox_of(L);
  const tp_core *k = tp__core(sb->run->e);
  for (size_t i = 0, n = k->hooks->tool_count(k->ud, sb->run); i < n; i++) {
    const char *one = k->hooks->tool_name(k->ud, sb->run, i);
    if (one && strcmp(one, name) == 0) return 1;
  }
  return 0;
}

static const char cannot_wait[] = TP_MSG_CANNOT_WAIT;

/* Delivers the call's result, or yields until it is ready. */
static int await_call (lua_State *L, uint64_t id, int first) {
  tp_sandbox *sb = tp__sandbox_of(L);
  tp__sandbox_check(L, sb);
  /* a replayed call waits, in a parallel branch or a coroutine, as its logged one did */
  if (!tp__call_ready(sb->run, id) ||
      (first && sb->run->rp && L != sb->T && !tp__replay_may_take(sb->run, id, 1))) {
    if (!lua_isyieldable(L)) return luaL_error(L, "%s", cannot_wait);
    lua_pushlightuserdata(L, &tp__request_tag);
    lua_pushinteger(L, (lua_Integer)id);
    return lua_yieldk(L, 2, (lua_KContext)id, tool_k);
  }
  /* ns_call's upvalue: the objects' tag, found once (tp__tools_open), not at each call */
  if (tp__call_consume(sb->run, id, L, lua_upvalueindex(1))) return 1;
  tp__sandbox_check(L, sb);  /* limit.tool_calls is a verdict, not an error object */
  return lua_error(L);
}

static int tool_k (lua_State *L, int status, lua_KContext ctx) {
  (void)status;
  lua_settop(L, 0);
  return await_call(L, (uint64_t)ctx, 0);
}

/* Refuses call c before it starts with an error object the script gets at once. The
** object is made first: refusing a call past the listed ones lets go of it. */
static int refuse_with_object (lua_State *L, tp_run *r, tp_call *c, const char *msg) {
  tp__push_error_object(L, "tool.invalid_input", msg, c->name);
  call_refuse(r, c, "tool.invalid_input", msg);
  return lua_error(L);
}

/* __call of a namespace: tools.a.b(args). Every call of a tool is counted first
** (call_attempt), then refused or started. */
/* The codec's fast path (codec.c): the arguments at 2 as text, with no tree, charged
** to the run's host budget as the tree would be (one charge: the walk charges in batches
** past what the codec takes). 0: the tree path must run (it gives the messages). */
static int fast_args (lua_State *L, tp_sandbox *sb, tp_call *c) {
  tp__codec_text ct;
  if (!tp__codec_encode(L, 2, sb->limits.tool_bytes, 0, &ct)) return 0;
  if (sb->host_cap && (ct.cost > sb->host_cap || sb->host_used > sb->host_cap - ct.cost)) {
    free(ct.text);  /* refused: the walk is refused too, and says where */
    return 0;
  }
  tp__host_charge(sb, ct.cost);
  c->args_cost = ct.cost;
  c->charged += ct.cost;
  c->args_fast = 1;
  c->fast_text = ct.text;
  c->fast_len = ct.len;
  c->fast_counts = ct.counts;
  c->fast_ncont = ct.ncont;
  c->live_L = L;
  c->live_idx = 2;
  return 1;
}

static int ns_call (lua_State *L) {
  tp_sandbox *sb = tp__sandbox_of(L);
  tp_run *r = sb->run;
  size_t nlen = 0;
  const char *prefix = ns_prefix(L, 1, &nlen);
  lua_CFunction discovery = prefix ? discovery_of(prefix, nlen) : NULL;
  if (discovery && !(lua_type(L, 2) == LUA_TTABLE && tool_loaded(L, prefix))) {
    lua_remove(L, 1);
    return discovery(L);
  }
  tp__sandbox_check(L, sb);
  if (prefix == NULL || nlen == 0)
    return luaL_error(L, "tools is a namespace: call a tool, e.g. tools.fs.read{path = \"a\"}");
  int exact = nlen <= TP_TOOL_NAME_MAX && memchr(prefix, '\0', nlen) == NULL;
  tp_call *c = tp__call_attempt(r, prefix, nlen, current_line(L));
  int limited = c != NULL && c->state == CALL_DONE;  /* limit.tool_calls */
  if (limited) tp__call_taken(r, c);  /* the script never gets it: the verdict ends the run */
  tp__sandbox_check(L, sb);       /* limit.tool_calls, or the host out of memory */
  if (c == NULL || limited) return luaL_error(L, "the call was refused");  /* not reached */
  const char *name = c->name;  /* the host's copy, at most TP_TOOL_NAME_MAX bytes */
  if (!lua_isyieldable(L)) {  /* refused before it starts: no side effect behind an error */
    call_refuse(r, c, "runtime", cannot_wait);
    return luaL_error(L, "%s", cannot_wait);
  }
  json_t *args = NULL;
  int t = lua_type(L, 2);
  char msg[1200];
  tp_json_opts o;  /* the tree is charged to the run's host budget as it is built */
  memset(&o, 0, sizeof o);
  o.max_bytes = sb->limits.tool_bytes;
  o.budget = tp__sandbox_budget(sb);
  if (t == LUA_TNONE || t == LUA_TNIL) args = json_object();
  else if (t == LUA_TTABLE && ns_prefix(L, 2, NULL) != NULL) {
    snprintf(msg, sizeof msg, "tools.%s: called with ':' — call it with a dot: tools.%s{...}",
             name, name);
    call_refuse(r, c, "runtime", msg);
    lua_settop(L, 0);
    lua_pushstring(L, msg);
    return lua_error(L);
  }
  else if (t == LUA_TTABLE && r->rp == NULL && !tp__codec_off && fast_args(L, sb, c)) {
    uint64_t id = c->id;
    tp__call_start(r, c, nlen, exact, NULL);
    tp_call *still = tp__run_find_call(r, id);
    if (still != NULL) still->live_L = NULL;  /* the table is the script's again */
    lua_settop(L, 0);
    return await_call(L, id, 1);
  }
  else if (t == LUA_TTABLE) {
    tp_json_err jerr;
    args = tp__json_from_lua_ex(L, 2, &o, &jerr);
    if (args != NULL && !json_is_object(args)) tp__host_refund(sb, o.cost);
    if (args == NULL || !json_is_object(args)) {
      if (args == NULL)
        snprintf(msg, sizeof msg, "tools.%s: the arguments cannot be sent as JSON: %s", name,
                 jerr.message);
      else
        snprintf(msg, sizeof msg, "tools.%s: the arguments must be a table of named fields, "
                 "e.g. tools.%s{key = value}, not a list", name, name);
      json_decref(args);
      return refuse_with_object(L, r, c, msg);
    }
  }
  else {  /* positional arguments: name the tool's own fields */
    char ex[300] = "";
    const tp_core *k = tp__core(r->e);
    if (k->hooks->args_example) k->hooks->args_example(k->ud, r, name, ex, sizeof ex);
    if (ex[0])
      snprintf(msg, sizeof msg, "tools.%s: the arguments must be a table of named fields, "
               "not a %s: tools.%s%s", name, luaL_typename(L, 2), name, ex);
    else
      snprintf(msg, sizeof msg, "tools.%s: the arguments must be a table of named fields, "
               "e.g. tools.%s{key = value}, not a %s", name, name, luaL_typename(L, 2));
    return refuse_with_object(L, r, c, msg);
  }
  uint64_t id = c->id;
  /* the tree stays charged (o.cost, by the walker) until the call lets go of it
  ** (args_release); the text, when one is made, is charged by call_start */
  c->args_cost = o.cost;
  c->charged += o.cost;
  c->empty_objects = o.empty_objects;
  c->nkept_objects = o.nkept;
  if (o.nkept > 0) memcpy(c->kept_objects, o.kept, (size_t)o.nkept * sizeof o.kept[0]);
  tp__call_start(r, c, nlen, exact, args);
  lua_settop(L, 0);
  return await_call(L, id, 1);
}

/* tools.a.b: a namespace named "a.b", made in the sandbox (the script's memory). The
** name is not limited here; the host copies at most TP_TOOL_NAME_MAX bytes of it when
** it is called. Each namespace is made once per run: the parent keeps it (a raw field),
** so the next tools.a.b finds it without calling this. The dotted name is put together
** on the C stack when it is short (a tool name is at most 128 bytes), and the metatable
** is this closure's upvalue: resolving a path was a tenth of a run calling one tool. */
static int ns_index (lua_State *L) {
  size_t plen, klen;
  const char *prefix = ns_prefix(L, 1, &plen);
  if (prefix == NULL || lua_type(L, 2) != LUA_TSTRING) return 0;
  const char *key = lua_tolstring(L, 2, &klen);
  char name[TP_TOOL_NAME_MAX];
  if (plen < sizeof name && klen < sizeof name - plen - 1) {
    memcpy(name, prefix, plen);
    size_t n = plen;
    if (plen > 0) name[n++] = '.';
    memcpy(name + n, key, klen);
    lua_pushlstring(L, name, n + klen);
  }
  else {
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    luaL_addlstring(&b, prefix, plen);
    if (plen > 0) luaL_addchar(&b, '.');
    luaL_addlstring(&b, key, klen);
    luaL_pushresult(&b);
  }
  push_namespace(L, -1, lua_upvalueindex(1));
  lua_pushvalue(L, 2);
  lua_pushvalue(L, -2);
  lua_rawset(L, 1);  /* cache */
  return 1;
}

static int ns_newindex (lua_State *L) {
  return luaL_error(L, "the tools namespace is read-only");
}

static int ns_tostring (lua_State *L) {
  const char *p = ns_prefix(L, 1, NULL);
  lua_pushfstring(L, "tools%s%s", p && *p ? "." : "", p ? p : "");
  return 1;
}

/* Pushes a namespace proxy whose dotted name is the string at index name, with the
** metatable at index mt. Room for two fields: the name, and the first namespace made
** under it (ns_index keeps it there), so that one does not grow the table. */
static void push_namespace (lua_State *L, int name, int mt) {
  name = lua_absindex(L, name);
  mt = lua_absindex(L, mt);
  lua_createtable(L, 0, 2);
  lua_pushvalue(L, name);
  lua_rawsetp(L, -2, &ns_key);
  lua_pushvalue(L, mt);
  lua_setmetatable(L, -2);
}

static int tools_list (lua_State *L) {
  tp_sandbox *sb = tp__sandbox_of(L);
  const tp_core *k = tp__core(sb->run->e);
  size_t n = k->hooks->tool_count(k->ud, sb->run);
  lua_createtable(L, n < INT32_MAX ? (int)n : 0, 0);
  lua_Integer at = 0;
  for (size_t i = 0; i < n; i++) {
    const char *one = k->hooks->tool_name(k->ud, sb->run, i);
    if (one == NULL) continue;  /* a tool scripts may not call */
    lua_pushstring(L, one);
    lua_rawseti(L, -2, ++at);
  }
  tp__json_push_array_mt(L);
  lua_setmetatable(L, -2);
  return 1;
}

/*
** Discovery inside a script: describe.lua runs in the host state for the run, polling
** its verdict (host.c), on capped inputs: a tool name is at most 128 bytes (longer ones
** name no tool), a query at most DISCOVERY_QUERY_MAX bytes, of which describe.lua reads
** 16 words and returns at most 50 tools. What the host builds for the answer is charged
** to the run's host budget while it lives.
*/
#define DISCOVERY_QUERY_MAX 1024
#define DISCOVERY_NODE_COST 128   /* host bytes of a JSON node of a search result */

static int tools_describe (lua_State *L) {
  tp_sandbox *sb = tp__sandbox_of(L);
  size_t len;
  const char *name = luaL_checklstring(L, 1, &len);
  const tp_core *k = tp__core(sb->run->e);
  int known = 0;
  char *text = len > 128 || strlen(name) != len ? NULL
               : k->hooks->describe(k->ud, sb, name, &known);
  if (!known)
    return luaL_error(L, "tools.describe: there is no tool %s%s (tools.list() lists them)",
                      len > 128 ? lua_pushlstring(L, name, 64) : name, len > 128 ? "..." : "");
  tp__sandbox_check(L, sb);  /* a verdict stopped it */
  if (text == NULL) return luaL_error(L, "tools.describe: no description available");
  size_t n = strlen(text) + 1;
  if (tp__host_charge(sb, n) != 0) {
    free(text);
    tp__sandbox_check(L, sb);  /* limit.memory */
  }
  lua_pushlstring(L, text, n - 1);
  free(text);
  tp__host_refund(sb, n);
  return 1;
}

static int tools_search (lua_State *L) {
  tp_sandbox *sb = tp__sandbox_of(L);
  size_t qlen;
  const char *q = luaL_checklstring(L, 1, &qlen);
  if (qlen > DISCOVERY_QUERY_MAX)
    return luaL_error(L, "tools.search: the query is %I bytes, over the limit of %d: search "
                      "with a few words", (LUAI_UACINT)qlen, DISCOVERY_QUERY_MAX);
  json_t **slot = tp__json_box(L);  /* owns the tree while pushing it may raise */
  const tp_core *k = tp__core(sb->run->e);
  char *json = k->hooks->search(k->ud, sb, q);
  tp__sandbox_check(L, sb);  /* a verdict stopped it */
  size_t len = json ? strlen(json) : 0, cost = 0;
  if (json != NULL) {
    /* the text, and the tree made of it: about 4 nodes a result, one per 40 bytes */
    cost = len + 1 + (len / 40 + 1) * DISCOVERY_NODE_COST;
    if (tp__host_charge(sb, cost) != 0) {
      free(json);
      tp__sandbox_check(L, sb);  /* limit.memory */
    }
  }
  tp_json_err jerr;
  *slot = json ? tp__json_loads(json, len, &jerr) : NULL;
  free(json);
  if (*slot == NULL) { tp__host_refund(sb, cost); lua_newtable(L); return 1; }
  tp__json_push(L, *slot, 0);
  json_decref(*slot);
  *slot = NULL;
  tp__host_refund(sb, cost);
  return 1;
}

static int error_tostring (lua_State *L) {
  lua_pushliteral(L, "code");
  lua_rawget(L, 1);
  lua_pushliteral(L, "message");
  lua_rawget(L, 1);
  lua_pushfstring(L, "%s: %s", lua_tostring(L, -2) ? lua_tostring(L, -2) : "error",
                  lua_tostring(L, -1) ? lua_tostring(L, -1) : "");
  return 1;
}

/* ---- parallel --------------------------------------------------------------------------
** parallel(f1, ..., fn) runs each function as its own coroutine and resumes whichever
** can go on; their tool calls are all pending at once. It returns the first value of
** each function, in order. When some fail, it still waits for all (so no branch is left
** half-done with its side effects unknown), then raises the error of the first failing
** function in argument order, with field index = its position.
**
** Stack while it runs: 1..n the functions, then P (threads), W (what each waits for:
** an id, true = anything, false = done), R (results), E (errors).
*/
static int parallel_k (lua_State *L, int status, lua_KContext ctx);

static int parallel_pass (lua_State *L, int n) {
  tp_sandbox *sb = tp__sandbox_of(L);
  int P = n + 1, W = n + 2, R = n + 3, E = n + 4;
  lua_settop(L, E);
  int pending, resumed, held;
again:
  pending = resumed = held = 0;
  for (int i = 1; i <= n; i++) {
    lua_rawgeti(L, W, i);
    int done = lua_type(L, -1) == LUA_TBOOLEAN && !lua_toboolean(L, -1);
    int any = lua_type(L, -1) == LUA_TBOOLEAN && lua_toboolean(L, -1);
    uint64_t id = lua_isinteger(L, -1) ? (uint64_t)lua_tointeger(L, -1) : 0;
    lua_pop(L, 1);
    if (done) continue;
    if (!any && id && !tp__call_ready(sb->run, id)) { pending = 1; continue; }
    if (!any && id && sb->run->rp && !tp__replay_may_take(sb->run, id, 0)) {
      pending = held = 1;  /* a replayed call waits for its turn in the log's order */
      continue;
    }
    resumed = 1;
    lua_rawgeti(L, P, i);
    lua_State *co = lua_tothread(L, -1);
    lua_pop(L, 1);
    int nres;
    for (;;) {
      atomic_store(&sb->running, co);
      int st = lua_resume(co, L, 0, &nres);
      atomic_store(&sb->running, L);
      tp__sandbox_charge(sb, co);  /* the instructions of its unfinished hook period */
      tp__sandbox_check(L, sb);
      if (st == LUA_YIELD && sb->hook_yielded) {
        if (lua_isyieldable(L)) {  /* a time slice ended inside the branch */
          lua_pushboolean(L, 1);
          lua_rawseti(L, W, i);
          return lua_yieldk(L, 0, (lua_KContext)n, parallel_k);
        }
        sb->hook_yielded = 0;
        continue;
      }
      if (st == LUA_YIELD && nres >= 1 && lua_type(co, -nres) == LUA_TLIGHTUSERDATA &&
          lua_touserdata(co, -nres) == &tp__request_tag) {
        if (nres >= 2 && lua_isinteger(co, -nres + 1)) lua_pushinteger(L, lua_tointeger(co, -nres + 1));
        else lua_pushboolean(L, 1);
        lua_rawseti(L, W, i);
        lua_pop(co, nres);
        pending = 1;
      }
      else if (st == LUA_YIELD) {
        lua_pop(co, nres);
        lua_pushliteral(L, "coroutine.yield was called directly in a parallel branch "
                           "(yield only inside your own coroutines)");
        lua_rawseti(L, E, i);
        lua_pushboolean(L, 0);
        lua_rawseti(L, W, i);
      }
      else if (st == LUA_OK) {
        if (nres > 0) {  /* the first of its nres results */
          lua_pop(co, nres - 1);
          lua_xmove(co, L, 1);
          lua_rawseti(L, R, i);
          lua_settop(co, 0);
        }
        lua_pushboolean(L, 0);
        lua_rawseti(L, W, i);
      }
      else {
        lua_xmove(co, L, 1);
        lua_rawseti(L, E, i);
        lua_pushboolean(L, 0);
        lua_rawseti(L, W, i);
      }
      break;
    }
  }
  if (pending && held && !resumed) {  /* the log's order cannot be kept: the script changed */
    tp__replay_ungate(sb->run);
    goto again;
  }
  if (pending) {
    if (!lua_isyieldable(L))
      return luaL_error(L, "parallel was called where Lua cannot wait (inside a metamethod "
                           "or a callback of gsub/sort)");
    lua_pushlightuserdata(L, &tp__request_tag);
    return lua_yieldk(L, 1, (lua_KContext)n, parallel_k);
  }
  for (int i = 1; i <= n; i++) {
    if (lua_rawgeti(L, E, i) != LUA_TNIL) {
      if (lua_type(L, -1) == LUA_TTABLE) {
        lua_pushinteger(L, i);
        lua_setfield(L, -2, "index");
      }
      return lua_error(L);
    }
    lua_pop(L, 1);
  }
  luaL_checkstack(L, n, "too many results of parallel");
  for (int i = 1; i <= n; i++) lua_rawgeti(L, R, i);
  return n;
}

static int parallel_k (lua_State *L, int status, lua_KContext ctx) {
  (void)status;
  return parallel_pass(L, (int)ctx);
}

static int sb_parallel (lua_State *L) {
  int n = lua_gettop(L);
  if (n > 1000) return luaL_error(L, "parallel: at most 1000 functions");
  for (int i = 1; i <= n; i++) luaL_checktype(L, i, LUA_TFUNCTION);
  luaL_checkstack(L, 8, "parallel");
  lua_createtable(L, n, 0);  /* P */
  for (int i = 1; i <= n; i++) {
    lua_State *co = lua_newthread(L);
    lua_pushvalue(L, i);
    lua_xmove(L, co, 1);
    lua_rawseti(L, n + 1, i);
  }
  lua_createtable(L, n, 0);  /* W: all start as "anything" */
  for (int i = 1; i <= n; i++) { lua_pushboolean(L, 1); lua_rawseti(L, -2, i); }
  lua_createtable(L, n, 0);  /* R */
  lua_createtable(L, n, 0);  /* E */
  return parallel_pass(L, n);
}

void tp__tools_open (lua_State *L) {
  int G = lua_gettop(L);
  if (luaL_newmetatable(L, "tidepool.ns")) {
    lua_pushvalue(L, -1);
    lua_pushcclosure(L, ns_index, 1);  /* the metatable of the namespaces it makes */
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, ns_newindex);
    lua_setfield(L, -2, "__newindex");
    if (!tp__json_push_objects_mt(L)) lua_pushnil(L);  /* tagged before the tools open */
    lua_pushcclosure(L, ns_call, 1);
    lua_setfield(L, -2, "__call");
    lua_pushcfunction(L, ns_tostring);
    lua_setfield(L, -2, "__tostring");
    lua_pushboolean(L, 0);
    lua_setfield(L, -2, "__metatable");
    lua_pushboolean(L, 1);
    lua_rawsetp(L, -2, &tp__readonly_key);  /* rawset refuses namespaces */
  }
  lua_pop(L, 1);
  if (luaL_newmetatable(L, "tidepool.error")) {
    lua_pushcfunction(L, error_tostring);
    lua_setfield(L, -2, "__tostring");
    lua_pushliteral(L, "tool error");
    lua_setfield(L, -2, "__metatable");
  }
  lua_pop(L, 1);
  luaL_getmetatable(L, "tidepool.ns");
  lua_pushliteral(L, "");
  push_namespace(L, -1, -2);
  lua_setfield(L, G, "tools");  /* tools.list, .describe, .search: see discovery_of */
  lua_pop(L, 2);
  lua_pushcfunction(L, sb_parallel);
  lua_setfield(L, G, "parallel");
}
