/*
** host.c: the engine's host Lua state H (trusted, one per engine, opened on first need):
** plugin tools written in Lua, their handlers run as coroutines, luv on the engine's
** loop, lpeg, and the runtime lua/host.lua, which does the Lua side of all this.
**
** A call's record (host.lua: its coroutine, ctx, box and handles) is seen from C through
** its box, a userdata whose user value is the record: the call while bound, the
** coroutine, and a registry reference to the box held while the record is bound to a
** call or idle in the pool.
**
** The life of a Lua tool call (provider_lua.c):
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
**                       through the callback runner below (never exits). Such a record
**                       is not reused: its box is unbound and its reference dropped.
**   it is cut short     host_cancel (call timeout, run finished or destroyed): the box
**                       is emptied, the call's luv handles closed, its coroutine closed
**                       (lua_closethread), and the handler's ownership of the call ends.
**
** Registry references of boxes and of the runtime are counted; a debug build asserts
** none is left when H closes. A tool's handler reference belongs to its provider's data
** (provider_lua.c) and goes with it. The upstream MCP servers (lua/upstream.lua) run in H
** too: provider_upstream.c starts and stops them.
*/
#include <assert.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "util.h"
#include "tidepool_server.h"
#include "lauxlib.h"
#include "lualib.h"

#include "registry.h"
#include "host.h"
#include "host_int.h"
#include "json.h"
#include "schema.h"
#include "embedded.h"
#include "codec.h"
#include "trace.h"

/* luv and lpeg come from Debian (shared in the CLI and tests, the static liblua5.4-luv.a
** and liblua5.4-lpeg.a inside the public library and the Lua module); their headers would
** drag in a second set of Lua headers, so the few entry points are declared here with
** the signatures of luv.h and lua-lpeg.h. */
typedef int (*tp_luv_pcall)(lua_State *L, int nargs, int nresults, int flags);
void luv_set_loop(lua_State *L, uv_loop_t *loop);
void luv_set_callback(lua_State *L, tp_luv_pcall pcall);
int luaopen_luv(lua_State *L);
int luaopen_lpeg(lua_State *L);

/* Debian's static luv is compiled for executables (-fPIE): it reads libc's stderr
** PC-relative, which a shared library cannot resolve. The public library's build renames
** that reference to this variable (the Makefile's luv-lib.o), set before luv can run. */
extern FILE *tp__luv_stderr;
FILE *tp__luv_stderr;

/* The host state's basics (its record, references, pcall, the luv callback runner):
** host_state.c, under the providers that use them. */

/* ---- schemas and results given as Lua tables ----------------------------------------- */

static int in_list (const char *k, const char *const *list) {
  for (; *list; list++) if (strcmp(k, *list) == 0) return 1;
  return 0;
}

/* An empty Lua table converts to {}; where a schema keyword takes an array (required,
** enum, type, allOf, ...) it is [] instead. Walks subschemas only, never into data
** (const, default, examples' items). */
void tp__host_fix_schema (json_t *s, int depth) {
  static const char *const arrays[] = { "required", "enum", "type", "allOf", "anyOf",
    "oneOf", "prefixItems", "examples", NULL };
  static const char *const one[] = { "items", "additionalProperties", "not", "if", "then",
    "else", "contains", "propertyNames", "unevaluatedItems", "unevaluatedProperties",
    "additionalItems", "contentSchema", NULL };
  static const char *const maps[] = { "properties", "patternProperties", "$defs",
    "definitions", "dependentSchemas", NULL };
  static const char *const lists[] = { "allOf", "anyOf", "oneOf", "prefixItems", "items",
    NULL };
  const char *k;
  json_t *v;
  if (!json_is_object(s) || depth > TP_JSON_MAX_DEPTH) return;
  json_object_foreach(s, k, v) {
    if (in_list(k, arrays) && json_is_object(v) && json_object_size(v) == 0) {
      json_object_set_new(s, k, json_array());
      continue;
    }
    if (in_list(k, one)) tp__host_fix_schema(v, depth + 1);
    if (in_list(k, maps) && json_is_object(v)) {
      const char *k2;
      json_t *v2;
      json_object_foreach(v, k2, v2) tp__host_fix_schema(v2, depth + 1);
    }
    if (in_list(k, lists) && json_is_array(v)) {
      size_t i;
      json_t *v2;
      json_array_foreach(v, i, v2) tp__host_fix_schema(v2, depth + 1);
    }
    if (strcmp(k, "dependentRequired") == 0 && json_is_object(v)) {
      const char *k2;
      json_t *v2;
      json_object_foreach(v, k2, v2)
        if (json_is_object(v2) && json_object_size(v2) == 0)
          json_object_set_new(v, k2, json_array());
    }
  }
}

/* ---- E: what host.lua may call ---------------------------------------------------- */

/* The call box at idx. E's functions have CALLBOX's metatable as their upvalue 1: one
** pointer comparison per call instead of luaL_checkudata's registry lookup by name. */
static tp__callbox *check_box (lua_State *L, int idx) {
  tp__callbox *b = lua_touserdata(L, idx);
  if (b == NULL || !lua_getmetatable(L, idx) || !lua_rawequal(L, -1, lua_upvalueindex(1)))
    luaL_typeerror(L, idx, CALLBOX);
  lua_pop(L, 1);
  return b;
}


/* Lets go of b's call: the box is emptied and c->host_ref cleared. keep: the box's
** reference stays (the record goes back to the pool); else it is dropped, and the record
** lives on only as long as Lua code can reach it. */
void tp__host_unbind (lua_State *H, tp__host *h, tp__callbox *b, int keep) {
  if (b->held && b->c != NULL && b->c->run != NULL) {
    const tp_json_budget *bg = tp__sandbox_budget(b->c->run->sb);
    bg->refund(bg->ud, b->held);
  }
  b->held = 0;
  if (b->c != NULL) b->c->host_ref = LUA_NOREF;
  b->c = NULL;
  if (!keep && b->ref != LUA_NOREF) {
    luaL_unref(H, LUA_REGISTRYINDEX, b->ref);
    h->nrefs--;
    b->ref = LUA_NOREF;
  }
}

/* Completes c with the handler's value at idx of L (see tp__host_result_tree). */
static void complete_with (tp_call *c, lua_State *L, int idx) {
  tp__call_answer a;
  if (tp__call_lua_answer(c, L, idx, &a)) {  /* no tree: the codec's text */
    tp__call_complete_answer(c, &a);
    return;
  }
  char msg[800];
  size_t cost;
  json_t *v = tp__host_result_tree(c, L, idx, msg, sizeof msg, &cost);
  if (v == NULL) tp_call_fail(c, "tool.invalid_output", msg);
  else if (cost == NOT_CHARGED) tp__call_complete_tree(c, v);
  else tp__call_complete_charged(c, v, cost);
}

/* *cost: what the tree is charged to the run's host budget (the conversion's charge, kept
** when there is no output schema to shape it), or NOT_CHARGED (complete() charges it). */
json_t *tp__host_result_tree (tp_call *c, lua_State *L, int idx, char *msg, size_t msglen,
                            size_t *cost) {
  tp_json_opts o;
  memset(&o, 0, sizeof o);
  o.max_bytes = c->run ? c->run->sb->limits.tool_bytes : 0;
  o.budget = c->run ? tp__sandbox_budget(c->run->sb) : NULL;
  tp_json_err jerr;
  *cost = NOT_CHARGED;
  if (lua_isnoneornil(L, idx)) return json_null();
  json_t *v = tp__json_from_lua_ex(L, idx, &o, &jerr);
  if (v == NULL) {
    snprintf(msg, msglen, "the handler's result cannot be sent as JSON: %s%s%s%s",
             jerr.message, jerr.path[0] ? " (at " : "", jerr.path, jerr.path[0] ? ")" : "");
    return NULL;
  }
  const json_t *out = c->tool ? ((const tp_tool *)c->tool)->output : NULL;
  if (out == NULL) {  /* the tree as converted: its charge is its cost */
    *cost = o.cost;
    return v;
  }
  if (o.cost) o.budget->refund(o.budget->ud, o.cost);
  json_t *n = tp__schema_empty_arrays(v, out, NULL, NULL);
  if (n) { json_decref(v); v = n; }
  return v;
}

/* E.complete(box, ok, value [, code]) -> true when the call took the outcome. ok: value
** is the result; not ok: value is the message, code a tool.* code (tool.failed). */
static int e_complete (lua_State *H) {
  tp__callbox *b = check_box(H, 1);
  tp_call *c = b->c;
  if (c == NULL) { lua_pushboolean(H, 0); return 1; }
  int ok = lua_toboolean(H, 2);
  tp__host_unbind(H, tp__host_get(H), b, 0);  /* the record lets go of the call */
  if (ok) complete_with(c, H, 3);
  else {
    const char *code = luaL_optstring(H, 4, "tool.failed");
    tp_call_fail(c, code, luaL_optstring(H, 3, "the handler failed"));
  }
  lua_pushboolean(H, 1);
  return 1;
}

/* E.progress(box, text): a progress report of the box's call (tp_call_progress). */
static int e_progress (lua_State *H) {
  tp__callbox *b = check_box(H, 1);
  const char *s = luaL_checkstring(H, 2);
  if (b->c) tp_call_progress(b->c, s);
  return 0;
}

/* E.log(box, text): a line in the run's logs. */
static int e_log (lua_State *H) {
  tp__callbox *b = check_box(H, 1);
  size_t len;
  const char *s = luaL_checklstring(H, 2, &len);
  if (b->c && b->c->run && b->c->run->sb) tp__sandbox_log_host(b->c->run->sb, s, len);
  return 0;
}

/* E.emit(level, source, text): a message for the engine's logger (tp_engine_on_log);
** level "error", "warn", "info" or "debug". */
static int e_emit (lua_State *H) {
  static const char *const names[] = { "error", "warn", "info", "debug", NULL };
  static const tp_log_level levels[] = { TP_LOG_ERROR, TP_LOG_WARN, TP_LOG_INFO, TP_LOG_DEBUG };
  tp_log_level level = levels[luaL_checkoption(H, 1, NULL, names)];
  const char *source = luaL_checkstring(H, 2);
  const char *text = luaL_checkstring(H, 3);
  tp__engine_log(tp__host_get(H)->e, level, source, "%s", text);
  return 0;
}

/* ---- resuming a handler: its time on the thread is its call's ------------------------
** A handler that sleeps or waits in C, or loops in Lua, holds the engine's thread: no
** other run, call or timer moves meanwhile. E.resume times each resume, and host.lua
** ends the call with tool.timeout when the call's deadline passed by the end of one.
** A handler busy in Lua is stopped at the deadline: the host's watch on the engine's
** watchdog signals the thread, and the signal handler sets a count-1 hook on the handler's
** coroutine that raises, at every instruction, so the handler's own pcall cannot keep
** it going. A handler blocked in C cannot be interrupted; it is charged when it comes
** back. A resume of BLOCK_NOTE_NS or more is also noted on the run, so that a time
** limit it explains gets a hint about blocking handlers, not about endless loops.
**
** The watch is armed once and kept, not armed and disarmed around each resume (two
** lock pairs, a sixth of a Lua tool call's time). A resume publishes its deadline in
** h->resume_deadline, the innermost resume's (a nested one's replaces its caller's until
** it returns), and takes the watchdog's lock only when the watch would wake after that
** deadline (watch.wake_seen, 0 when not armed). When the watch wakes it reads the
** deadline: none, and it disarms; a later one, and it sleeps until then; one that has
** passed, and it signals the thread, again every 100 ms (each signal makes a handler's
** blocking poll or select return EINTR). The signal handler stops the resume only when
** its own target's deadline has passed, so a signal meant for an earlier resume is
** harmless. A caller's deadline is watched again once its nested resume returns. */
#define BLOCK_NOTE_NS ((uint64_t)100 * 1000000)
#define RESIGNAL_NS ((uint64_t)100 * 1000000)

/* Called by the watchdog with its lock held. It writes wake_seen before it reads the
** deadline again: a resume that published an earlier deadline meanwhile either sees this
** wake_seen (later than its deadline, so it arms the watch itself, under the lock) or
** is seen here. */
static uint64_t host_watch_fire (tp_watch *w, uint64_t now) {
  tp__host *h = (tp__host *)(void *)((char *)w - offsetof(tp__host, watch));
  for (;;) {
    uint64_t d = atomic_load(&h->resume_deadline);
    uint64_t next = d == 0 ? 0 : d > now ? d : now + RESIGNAL_NS;
    if (d != 0 && d <= now) tp__signal_interrupt(atomic_load(&h->resume_thread));
    atomic_store(&w->wake_seen, next);
    if (atomic_load(&h->resume_deadline) == d) return next;
  }
}

/* Publishes deadline (0: none) as the innermost resume's; arms the watch when it would
** wake later than that. */
static void watch_deadline (tp_engine *e, tp__host *h, uint64_t deadline) {
  atomic_store(&h->resume_deadline, deadline);
  if (deadline == 0) return;
  uint64_t seen = atomic_load(&h->watch.wake_seen);
  if ((seen == 0 || seen > deadline) && tp__signal_install() == 0)
    (void)tp__watch_arm(&e->core.wd, &h->watch, deadline);  /* fails: the handler runs on */
}

static void stop_hook (lua_State *L, lua_Debug *ar) {
  (void)ar;
  luaL_error(L, "stopped: the handler ran past its call's time limit");
}

static void note_block (tp_run *r, const char *tool, uint64_t held) {
  r->blocked_ns += held;
  snprintf(r->blocked_hint, sizeof r->blocked_hint, "tools.%s held the engine for %.1f s "
           "without waiting: its plugin handler blocks (sleeps or reads in C, or loops in "
           "Lua) instead of waiting with ctx.sleep, ctx.await or luv. Call it less or with "
           "less work, and report the tool to its author.", tool, (double)held / 1e9);
}

/* lua_resume of call c's handler coroutine co (nargs values pushed on it), timed and
** stopped at c's deadline (see above). *held: the nanoseconds it held the thread; *late:
** c's deadline had passed when it stopped. c may be NULL (a call that is over). */
int tp__host_resume_timed (lua_State *from, tp_engine *e, tp_call *c, lua_State *co, int nargs,
                         int *nres, uint64_t *held, int *late) {
  tp_run *r = c ? c->run : NULL;
  uint64_t deadline = c ? c->deadline_ns : 0;
  tp__host *h = e->host_state;
  tp_host_target target, *prev = NULL;
  uint64_t outer = 0;
  if (deadline) {
    target.co = co;
    atomic_init(&target.expired, 0);
    target.hook = stop_hook;
    target.deadline_ns = deadline;
    prev = tp__signal_host_target(&target);  /* before the deadline is published */
    outer = atomic_load(&h->resume_deadline);
    atomic_store(&h->resume_thread, pthread_self());
    watch_deadline(e, h, deadline);
  }
  uint64_t t0 = tp__now_ns();
  int st = lua_resume(co, from, nargs, nres);
  uint64_t t1 = tp__now_ns();
  if (deadline) {
    tp__signal_host_target(prev);           /* a late signal no longer reaches co */
    watch_deadline(e, h, outer);            /* the caller's, if nested */
    if (atomic_load(&target.expired)) lua_sethook(co, NULL, 0, 0);
  }
  *held = t1 - t0;
  *late = deadline != 0 && t1 >= deadline;
  if (h != NULL) h->resume_end_ns = t1;
  if (r != NULL && *held >= BLOCK_NOTE_NS) note_block(r, c->name, *held);
  return st;
}

/* After a resume that ran out of memory: host.lua may not manage to report it, out of
** memory too, so the call fails here, or it would wait for its deadline (and a run
** without one, for ever). */
void tp__host_fail_errmem (lua_State *H, tp__host *h, tp__callbox *b) {
  tp_call *c = b->c;
  if (c == NULL) return;
  tp__host_unbind(H, h, b, 0);
  tp_call_fail(c, "tool.failed", "the host ran out of memory while the handler ran");
}

/* Moves the first two of the nres values a resume left on co (or its error object, st
** an error) to L as ok, value, result, and pops the rest. L has room for 3 values. */
void tp__host_move_outcome (lua_State *co, lua_State *L, int st, int nres) {
  if (st == LUA_OK || st == LUA_YIELD) {
    lua_pushboolean(L, 1);
    if (nres > 2) lua_pop(co, nres - 2);
    if (nres >= 2) lua_xmove(co, L, 2);
    else if (nres == 1) { lua_xmove(co, L, 1); lua_pushnil(L); }
    else { lua_pushnil(L); lua_pushnil(L); }
  }
  else {
    lua_pushboolean(L, 0);
    lua_xmove(co, L, 1);
    lua_pushnil(L);
  }
}

/* E.resume(box, co, ...) -> ok, value, result, held_ms, late
** coroutine.resume of a call's handler coroutine: ok and its first two results (or its
** error), the milliseconds it held the thread, and whether the call's deadline had
** passed when it stopped. */
static int e_resume (lua_State *L) {
  tp__callbox *b = check_box(L, 1);
  lua_State *co = lua_tothread(L, 2);
  luaL_argcheck(L, co != NULL && co != L, 2, "a handler coroutine expected");
  int nargs = lua_gettop(L) - 2;
  if (!lua_checkstack(co, nargs + 1) || !lua_checkstack(L, 6))
    return luaL_error(L, "too many arguments to resume");
  tp__host *h = tp__host_get(L);
  lua_xmove(L, co, nargs);
  int nres = 0, late;
  uint64_t held;
  int st = tp__host_resume_timed(L, h->e, b->c, co, nargs, &nres, &held, &late);
  lua_settop(L, 2);
  if (st == LUA_ERRMEM) tp__host_fail_errmem(L, h, b);
  tp__host_move_outcome(co, L, st, nres);
  lua_pushnumber(L, (lua_Number)held / 1e6);
  lua_pushboolean(L, late);
  return 5;
}

/* E.new_box(rec, co) -> the box of a new record rec whose coroutine is co: empty, not
** referenced (host.c references it when it binds it). */
static int e_new_box (lua_State *H) {
  luaL_checktype(H, 1, LUA_TTABLE);
  lua_State *co = lua_tothread(H, 2);
  luaL_argcheck(H, co != NULL && co != H, 2, "a coroutine expected");
  tp__callbox *b = lua_newuserdatauv(H, sizeof *b, 1);
  b->c = NULL;
  b->co = co;
  b->ref = LUA_NOREF;
  b->claimed = 0;
  b->held = 0;
  lua_pushvalue(H, 1);
  lua_setiuservalue(H, -2, 1);
  luaL_setmetatable(H, CALLBOX);
  return 1;
}

/* E.claim(box): something of the box's call may outlive it (a function handed to luv, a
** handle tracked, a wait): its record is not reused. */
static int e_claim (lua_State *H) {
  check_box(H, 1)->claimed = 1;
  return 0;
}

/* E.field(box, k) -> ctx's per-call field k (run_id, call_id, tool, deadline_ms) of the
** box's call; nil for another k, or when the box is empty. */
static int e_field (lua_State *H) {
  tp__callbox *b = check_box(H, 1);
  const char *k = lua_tostring(H, 2);
  tp_call *c = b->c;
  if (c == NULL || k == NULL) return 0;
  if (strcmp(k, "run_id") == 0) lua_pushinteger(H, c->run ? (lua_Integer)c->run->id : 0);
  else if (strcmp(k, "call_id") == 0) lua_pushinteger(H, (lua_Integer)c->id);
  else if (strcmp(k, "tool") == 0) lua_pushstring(H, c->name);
  else if (strcmp(k, "tool_bytes") == 0 || strcmp(k, "memory") == 0) {
    if (c->run == NULL) return 0;
    const tp_limits *l = &c->run->sb->limits;
    size_t v = k[0] == 't' ? l->tool_bytes : l->memory;
    if (v == 0) return 0;
    lua_pushinteger(H, v > (size_t)LUA_MAXINTEGER ? LUA_MAXINTEGER : (lua_Integer)v);
  }
  else if (strcmp(k, "deadline_ms") == 0) {
    if (c->deadline_ns == 0) return 0;
    uint64_t now = tp__now_ns();
    uint64_t left = c->deadline_ns > now ? c->deadline_ns - now : 0;
    lua_pushnumber(H, (lua_Number)(left / 1000) / 1e3);
  }
  else return 0;
  return 1;
}

/* Charges n bytes to the run of b's call, held until the box lets go of the call. 0, or
** -1 when the run cannot hold them (its verdict is then limit.memory, told by what). */
static int hold (tp__callbox *b, size_t n, const char *what) {
  if (b->c == NULL || b->c->run == NULL) return -1;
  const tp_json_budget *bg = tp__sandbox_budget(b->c->run->sb);
  if (bg->charge(bg->ud, n) != 0) {
    if (bg->note) bg->note(bg->ud, what);
    return -1;
  }
  b->held += n;
  return 0;
}

/* E.charge(box, n) -> true | nil, message: n more bytes that the handler keeps for its call
** (an HTTP body as it arrives), charged to the run's host budget until the call ends. */
static int e_charge (lua_State *H) {
  tp__callbox *b = check_box(H, 1);
  lua_Integer n = luaL_checkinteger(H, 2);
  luaL_argcheck(H, n >= 0, 2, "bytes >= 0 expected");
  char m[200];
  snprintf(m, sizeof m, "a tool's data (%s) came to more than the run's memory limit "
           "allows", b->c ? b->c->name : "its call");
  if (hold(b, (size_t)n, m) == 0) { lua_pushboolean(H, 1); return 1; }
  lua_pushnil(H);
  lua_pushstring(H, b->c ? m : "the call is over");
  return 2;
}

/* E.decode(box, text) -> value: json.decode of text under the budget of the run of box's
** call: the tree as it is built, and the Lua value, held until the call ends (its cost
** estimated from the text, tp__json_text_cost). Raises when the run cannot hold it (its
** verdict is then limit.memory) or the text is not JSON. */
static int e_decode (lua_State *H) {
  tp__callbox *b = check_box(H, 1);
  size_t len;
  const char *s = luaL_checklstring(H, 2, &len);
  if (b->c == NULL || b->c->run == NULL) return luaL_error(H, "the call is over");
  size_t cost = tp__json_text_cost(s, len);
  char m[240];
  snprintf(m, sizeof m, "the answer to %s (%zu bytes of JSON) would take about %zu bytes "
           "of memory once decoded, more than the run's memory limit allows", b->c->name,
           len, cost);
  if (hold(b, cost, m) != 0) {
    lua_pushstring(H, m);
    return lua_error(H);
  }
  const tp_json_budget *bg = tp__sandbox_budget(b->c->run->sb);
  lua_getfield(H, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
  lua_getfield(H, -1, "json");
  lua_getfield(H, -1, "decode");
  lua_pushvalue(H, 2);
  tp__json_set_budget(H, bg);
  int st = lua_pcall(H, 1, 1, 0);
  tp__json_set_budget(H, NULL);
  if (st != LUA_OK) return lua_error(H);
  return 1;
}

/* E.peek_id(text) -> the "id" member of the JSON object that text begins with (an integer,
** or a string without escapes) when it comes whole within text; else nothing. One pass
** over the text and no tree: it tells whose a long message is before it is all read or
** decoded (upstream.lua). */
static int e_peek_id (lua_State *H) {
  size_t n;
  const char *s = luaL_checklstring(H, 1, &n);
  size_t i = 0;
  while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r' || s[i] == '\n')) i++;
  if (i >= n || s[i] != '{') return 0;
  i++;
  int depth = 1, key = 1;  /* key: a string here at depth 1 is a member's name */
  while (i < n) {
    char ch = s[i];
    if (ch == '"') {
      size_t from = ++i;
      while (i < n && s[i] != '"') i += s[i] == '\\' ? 2 : 1;
      if (i >= n) return 0;
      size_t to = i++;
      if (depth != 1 || !key) continue;
      key = 0;
      if (to - from != 2 || memcmp(s + from, "id", 2) != 0) continue;
      while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r' || s[i] == '\n')) i++;
      if (i >= n || s[i] != ':') return 0;
      i++;
      while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r' || s[i] == '\n')) i++;
      if (i >= n) return 0;
      if (s[i] == '"') {
        size_t a = ++i;
        while (i < n && s[i] != '"' && s[i] != '\\') i++;
        if (i >= n || s[i] != '"') return 0;
        lua_pushlstring(H, s + a, i - a);
        return 1;
      }
      size_t j = i + (s[i] == '-');
      size_t d0 = j;
      while (j < n && j - d0 < 19 && s[j] >= '0' && s[j] <= '9') j++;
      if (j == d0 || j >= n) return 0;
      if (s[j] != ',' && s[j] != '}' && s[j] != ' ' && s[j] != '\t' && s[j] != '\r' &&
          s[j] != '\n')
        return 0;
      char num[24];
      memcpy(num, s + i, j - i);
      num[j - i] = '\0';
      lua_pushinteger(H, (lua_Integer)strtoll(num, NULL, 10));
      return 1;
    }
    if (ch == '{' || ch == '[') depth++;
    else if (ch == '}' || ch == ']') { if (--depth == 0) return 0; }
    else if (ch == ',' && depth == 1) key = 1;
    i++;
  }
  return 0;
}

/* ---- a record's coroutine ------------------------------------------------------------
** body(RUN, handler, args) runs one handler per resume: resumed by host.c with tp__host_run_key,
** the handler and the arguments (a tp__host_args, valid during that resume), it makes
** the arguments' table, calls handler(args, ctx), wipes what the handler left in ctx
** (fields, even rawset ones; a metatable it changed) and yields DONE, result. Its frame
** holds nothing of a call once it yielded. Upvalues: ctx and ctx's metatable. */
enum { K_RESUMED, K_RETURNED };

static int body_k (lua_State *L, int status, lua_KContext k);

static int body_start (lua_State *L) {
  if (lua_gettop(L) != 3 || lua_type(L, 1) != LUA_TLIGHTUSERDATA ||
      lua_touserdata(L, 1) != &tp__host_run_key)
    return luaL_error(L, "a tool handler's coroutine was resumed from outside the engine");
  const tp__host_args *args = lua_touserdata(L, 3);
  lua_settop(L, 2);
  lua_pushlightuserdata(L, (void *)&tp__host_done_key);
  lua_replace(L, 1);                        /* DONE, handler */
  if (args->text != NULL)                   /* the codec's text, when no tree was made */
    tp__codec_push(L, args->text, args->len, args->counts, lua_upvalueindex(3));
  else tp__json_push(L, args->tree, 0);     /* the tree as a table: no JSON text */
  lua_pushvalue(L, lua_upvalueindex(1));    /* ctx */
  lua_callk(L, 2, 1, K_RETURNED, body_k);
  return body_k(L, LUA_OK, K_RETURNED);
}

static int body_k (lua_State *L, int status, lua_KContext k) {
  (void)status;
  if (k == K_RESUMED) return body_start(L);
  /* stack: DONE, the handler's result */
  int ctx = lua_upvalueindex(1), mt = lua_upvalueindex(2);
  lua_pushnil(L);
  if (lua_next(L, ctx)) {                   /* the handler wrote into ctx */
    lua_pop(L, 2);
    lua_pushnil(L);
    while (lua_next(L, ctx)) {              /* clearing fields while traversing is allowed */
      lua_pop(L, 1);
      lua_pushvalue(L, -1);
      lua_pushnil(L);
      lua_rawset(L, ctx);
    }
  }
  if (!lua_getmetatable(L, ctx)) lua_pushnil(L);
  if (!lua_rawequal(L, -1, mt)) {
    lua_pushvalue(L, mt);
    lua_setmetatable(L, ctx);
  }
  lua_settop(L, 2);
  return lua_yieldk(L, 2, K_RESUMED, body_k);
}

/* E.body(ctx, mt) -> body with its upvalues, the function of a new record's coroutine:
** ctx, mt, and the objects' tag, which body_start's push of the arguments then does not
** look up in the registry at every call. */
static int e_body (lua_State *H) {
  luaL_checktype(H, 1, LUA_TTABLE);
  luaL_checktype(H, 2, LUA_TTABLE);
  lua_settop(H, 2);
  if (!tp__json_push_objects_mt(H)) lua_pushnil(H);
  lua_pushcclosure(H, body_start, 3);
  return 1;
}

/* E.deadline_ms(box) -> milliseconds left before the call times out, or nil. */
static int e_deadline_ms (lua_State *H) {
  tp__callbox *b = check_box(H, 1);
  if (b->c == NULL || b->c->deadline_ns == 0) return 0;
  uint64_t now = tp__now_ns();
  uint64_t left = b->c->deadline_ns > now ? b->c->deadline_ns - now : 0;
  lua_pushnumber(H, (lua_Number)(left / 1000) / 1e3);
  return 1;
}

/* E.fs_quota(box) -> left, quota: the bytes the call's run may still write through the
** fs tools, and its whole quota; nothing when the run has no quota. A call that is over
** (box emptied) has 0 left. */
static int e_fs_quota (lua_State *H) {
  tp__callbox *b = check_box(H, 1);
  if (b->c == NULL || b->c->run == NULL) {
    lua_pushinteger(H, 0);
    lua_pushinteger(H, 0);
    return 2;
  }
  const tp_run *r = b->c->run;
  uint64_t q = r->sb->limits.fs_bytes;
  if (q == 0) return 0;
  uint64_t left = r->fs_used < q ? q - r->fs_used : 0;
  lua_pushinteger(H, (lua_Integer)(left > (uint64_t)LUA_MAXINTEGER ? LUA_MAXINTEGER : left));
  lua_pushinteger(H, (lua_Integer)(q > (uint64_t)LUA_MAXINTEGER ? LUA_MAXINTEGER : q));
  return 2;
}

/* E.fs_charge(box, bytes): counts bytes written by the call against its run's quota. */
static int e_fs_charge (lua_State *H) {
  tp__callbox *b = check_box(H, 1);
  lua_Integer n = luaL_checkinteger(H, 2);
  if (n > 0 && b->c != NULL && b->c->run != NULL) {
    tp_run *r = b->c->run;
    r->fs_used = (uint64_t)n > UINT64_MAX - r->fs_used ? UINT64_MAX : r->fs_used + (uint64_t)n;
  }
  return 0;
}

/* E.workspace_max() -> the engine's cap on the workspace's growth in bytes (0: none). */
static int e_workspace_max (lua_State *H) {
  const tp_engine *e = tp__host_get(H)->e;
  uint64_t m = e->workspace_max_set ? e->workspace_max : TP_WORKSPACE_MAX_DEFAULT;
  lua_pushinteger(H, (lua_Integer)(m > (uint64_t)LUA_MAXINTEGER ? LUA_MAXINTEGER : m));
  return 1;
}

/* E.workspace() -> the engine's workspace directory, or nil (plugins ask at load time:
** tools/fs.lua offers nothing without one). */
static int e_workspace (lua_State *H) {
  const tp_engine *e = tp__host_get(H)->e;
  if (e->workspace == NULL) return 0;
  lua_pushstring(H, e->workspace);
  return 1;
}

/* E.config(name) -> the JSON text of section name of the engine's config, or nil
** (host.lua decodes it for the plugin loader's load_opts.config). */
static int e_config (lua_State *H) {
  const tp_engine *e = tp__host_get(H)->e;
  const json_t *v = tp__config_section(e, luaL_checkstring(H, 1));
  if (v == NULL) return 0;
  size_t len;
  char *text = tp_json_text(v, &len);
  if (text == NULL) return luaL_error(H, "not enough memory");
  lua_pushlstring(H, text, len);
  tp_free(text);
  return 1;
}

/* E.annotate(): makes the annotations of tools added since the last time (upstream.lua,
** after adding a server's tools outside a plugin load). */
static int e_annotate (lua_State *H) {
  tp__tools_annotate(tp__host_get(H)->e);
  return 0;
}

/* E.traceparent(box): the W3C traceparent of the box's call span, for the work the call
** causes (an HTTP fetch, an upstream request) to name as its parent; nil when the run is
** not traced or the config keeps context in (telemetry.propagate false). */
static int e_traceparent (lua_State *H) {
  tp__callbox *b = check_box(H, 1);
  char tp[TP__TRACEPARENT_LEN + 1];
  if (b->c == NULL || !tp__trace_call_parent(tp__host_get(H)->e, b->c, tp)) return 0;
  lua_pushstring(H, tp);
  return 1;
}

/* E.span(parent, name, start_ns, ok, code, server): a span ending now under the span of
** traceparent parent (a call's), kind client: the upstream MCP request a call made.
** E.span_start() is the clock it counts from. Nothing when tracing is off. */
static int e_span_start (lua_State *H) {
  lua_pushinteger(H, (lua_Integer)tp__now_ns());
  return 1;
}

static int e_span (lua_State *H) {
  const char *parent = luaL_checkstring(H, 1), *name = luaL_checkstring(H, 2);
  uint64_t start = (uint64_t)luaL_checkinteger(H, 3);
  int ok = lua_toboolean(H, 4);
  const char *code = luaL_optstring(H, 5, NULL), *server = luaL_optstring(H, 6, NULL);
  json_t *a = server ? json_pack("{s:s,s:s}", "rpc.system", "mcp", "server.address", server)
                     : NULL;
  tp__trace_child(tp__host_get(H)->e, parent, name, 3, start, ok, code, a);
  json_decref(a);
  return 0;
}

/* E.seen(name, shape): the shape of the last result of tool name (a tool with no output
** schema), which tools.describe shows after its call; at most SEEN_MAX bytes. A new shape
** is also kept in the engine's state store (as the record of the run id "tool-shape:"
** name, expiring after SEEN_TTL_MS), so that the other engines of the store (workers,
** other processes with the same --state, a restart) show it too: E.seen_load reads it. */
#define SEEN_MAX 600
#define SEEN_KEY "tool-shape:"
#define SEEN_TTL_MS (30ull * 24 * 3600 * 1000)
static int e_seen (lua_State *H) {
  const char *name = luaL_checkstring(H, 1);
  size_t len;
  const char *shape = luaL_checklstring(H, 2, &len);
  tp_engine *e = tp__host_get(H)->e;
  tp_tool *t = (tp_tool *)tp__tool_find(e, name);
  if (t == NULL || t->output != NULL || len > SEEN_MAX) return 0;
  if (t->seen && strcmp(t->seen, shape) == 0) return 0;
  char *copy = strdup(shape);
  if (copy == NULL) return 0;  /* only the hint is lost */
  free(t->seen);
  t->seen = copy;
  char key[sizeof SEEN_KEY + 256];
  if (strlen(t->name) < 256) {  /* best effort: a store that fails loses only the hint */
    snprintf(key, sizeof key, SEEN_KEY "%s", t->name);
    tp_engine_run_put(e, key, copy, len, SEEN_TTL_MS, NULL, NULL);
  }
  return 0;
}

typedef struct seen_load { tp_engine *e; char name[]; } seen_load;

/* The store's answer to E.seen_load: the shape, unless the tool has seen one of its own
** since (or is gone, or got an output schema). Nothing of e is touched unless it answered:
** a connection closed at tp_engine_destroy answers CLOSED. */
static void seen_loaded (void *ud, int status, const char *val, size_t len, const char *err) {
  (void)err;
  seen_load *sl = ud;
  if (status == TP_STORED_OK && val != NULL && len > 0 && len <= SEEN_MAX &&
      memchr(val, '\0', len) == NULL) {
    tp_tool *t = (tp_tool *)tp__tool_find(sl->e, sl->name);
    if (t != NULL && t->output == NULL && t->seen == NULL) t->seen = strndup(val, len);
  }
  free(sl);
}

void tp__host_seen_load (tp_engine *e, const char *name) {
  size_t n = strlen(name);
  if (n >= 256) return;
  char key[sizeof SEEN_KEY + 256];
  snprintf(key, sizeof key, SEEN_KEY "%s", name);
  seen_load *sl = malloc(sizeof *sl + n + 1);
  if (sl == NULL) return;
  sl->e = e;
  memcpy(sl->name, name, n + 1);
  if (tp_engine_run_get(e, key, seen_loaded, sl) != TP_OK) free(sl);
}

/* E.seen_load(name): tp__host_seen_load, when upstream.lua registers a tool. */
static int e_seen_load (lua_State *H) {
  tp__host_seen_load(tp__host_get(H)->e, luaL_checkstring(H, 1));
  return 0;
}

/* E.tools_changed(): an upstream server's tools came late or changed (upstream.lua). */
static int e_tools_changed (lua_State *H) {
  tp_engine *e = tp__host_get(H)->e;
  if (e->tools_changed) e->tools_changed(e->tools_changed_ud);
  return 0;
}

/* E.upstream_state(server, up, restarted): /metrics' tidepool_upstream_* series. */
static int e_upstream_state (lua_State *H) {
  tp__metrics_upstream(tp__host_get(H)->e, luaL_checkstring(H, 1), lua_toboolean(H, 2),
                       lua_toboolean(H, 3));
  return 0;
}

/* require("tidepool.upstream"): lua/upstream.lua, given E (upvalue 1). */
static int open_upstream (lua_State *H) {
  const tp_embedded *src = tp__embedded_find("lua/upstream.lua");
  if (src == NULL) return luaL_error(H, "lua/upstream.lua is not embedded in this build");
  if (luaL_loadbufferx(H, src->data, src->len, "=lua/upstream.lua", "t") != LUA_OK)
    return lua_error(H);
  lua_pushvalue(H, lua_upvalueindex(1));
  lua_call(H, 1, 1);
  return 1;
}

/* E.mcp_versions: the library's list of protocol versions (tp_mcp_version), latest
** first, as {version =, modern =, client =} for upstream.lua, which offers and accepts
** from it. */
static void push_mcp_versions (lua_State *H) {
  const char *v;
  unsigned f;
  lua_newtable(H);
  for (size_t i = 0; (v = tp_mcp_version(i, &f)) != NULL; i++) {
    lua_createtable(H, 0, 3);
    lua_pushstring(H, v);
    lua_setfield(H, -2, "version");
    lua_pushboolean(H, (f & TP_MCP_V_MODERN) != 0);
    lua_setfield(H, -2, "modern");
    lua_pushboolean(H, (f & TP_MCP_V_CLIENT) != 0);
    lua_setfield(H, -2, "client");
    lua_rawseti(H, -2, (lua_Integer)i + 1);
  }
}

/* ---- H's allocator ------------------------------------------------------------------
** Every tool call makes a few small blocks in H (the arguments' table and its slots, the
** handler's result) that the collector frees in batches: glibc's per-thread cache holds
** 7 blocks of a size, so most of those frees and the next allocations took its slow
** paths. H keeps its own lists of freed small blocks, by size, up to HEAP_CACHE bytes in
** all. A block is filed by its usable size (malloc_usable_size), never by the size Lua
** says it has, so blocks from luaL_newstate's allocator (before this one was set) and
** blocks glibc made larger than asked go to the right list or back to free(). Resizes
** are plain realloc. Under AddressSanitizer nothing is kept, so it still sees every
** use after free in H. */
#define HEAP_CLASSES 16                 /* usable sizes 24, 40, ..., 264: 16k + 8 */
#define HEAP_SMALL   (16 * HEAP_CLASSES + 8)
#define HEAP_CACHE   ((size_t)256 << 10)

typedef struct host_heap {
  void *free[HEAP_CLASSES + 1];         /* by k: blocks of 16k + 8 usable bytes */
  size_t cached;                        /* bytes on the lists */
  tp_engine *e;                         /* for a plugin's warn() (host_warn) */
  char warn[512];                       /* a warning's pieces so far, cut at 511 bytes */
  size_t nwarn;
} host_heap;

/* A plugin's warn("...") goes to the engine's log as a warning from "plugin", never to
** stderr (luaL_newstate's warning function prints there once a plugin says "@on"): the
** library never prints. Control messages ("@on", "@off") mean nothing here. */
static void host_warn (void *ud, const char *msg, int tocont) {
  host_heap *hp = ud;
  if (hp->nwarn == 0 && !tocont && msg[0] == '@') return;
  size_t n = strlen(msg), room = sizeof hp->warn - 1 - hp->nwarn;
  if (n > room) n = room;
  memcpy(hp->warn + hp->nwarn, msg, n);
  hp->nwarn += n;
  if (tocont) return;
  hp->warn[hp->nwarn] = '\0';
  hp->nwarn = 0;
  tp__engine_log(hp->e, TP_LOG_WARN, "plugin", "%s", hp->warn);
}

static void *host_alloc (void *ud, void *ptr, size_t osize, size_t nsize) {
  (void)osize;  /* the type of a new object when ptr is NULL; unused otherwise here */
  host_heap *hp = ud;
  if (nsize == 0) {
    if (ptr == NULL) return NULL;
#if !defined(__SANITIZE_ADDRESS__)
    size_t u = malloc_usable_size(ptr);
    if (u >= 24 && u <= HEAP_SMALL && (u & 15) == 8 && hp->cached + u <= HEAP_CACHE) {
      *(void **)ptr = hp->free[u >> 4];
      hp->free[u >> 4] = ptr;
      hp->cached += u;
      return NULL;
    }
#endif
    free(ptr);
    return NULL;
  }
  if (ptr != NULL) return realloc(ptr, nsize);
  if (nsize > HEAP_SMALL) return malloc(nsize);
  size_t k = nsize <= 24 ? 1 : (nsize - 8 + 15) >> 4;
  void *p = hp->free[k];
  if (p != NULL) {  /* list k holds blocks of exactly 16k + 8 usable bytes */
    hp->free[k] = *(void **)p;
    hp->cached -= 16 * k + 8;
    return p;
  }
  return malloc(16 * k + 8);
}

static void host_heap_free (host_heap *hp) {
  for (size_t k = 1; k <= HEAP_CLASSES; k++)
    while (hp->free[k] != NULL) {
      void *p = hp->free[k];
      hp->free[k] = *(void **)p;
      free(p);
    }
  free(hp);
}

/* ---- opening and closing H ------------------------------------------------------ */

/* A Lua C module binds to the lua_* of the process's global scope. libtidepool.so and
** the Lua module keep their Lua private, and the program may have another Lua or none:
** there a C module would run on the wrong Lua or not load, so the host state loads none
** and require says why. Where this engine's Lua is the global one (the CLI, programs
** linked with its objects), C modules load as usual. */
static int c_modules_bind_here (void) {
  return dlsym(RTLD_DEFAULT, "lua_newstate") == (void *)lua_newstate;
}

/* package.searchers[3] when C modules cannot load: a line for require's message. */
static int no_c_searcher (lua_State *H) {
  lua_pushfstring(H, "\n\tno C module '%s': this engine's Lua is private to the tidepool "
                  "library, so Lua C modules cannot load here; plugins have luv, lpeg and "
                  "Lua modules", luaL_checkstring(H, 1));
  return 1;
}

static int open_p (lua_State *H) {
  tp_engine *e = lua_touserdata(H, 1);
  tp__host *h = lua_newuserdatauv(H, sizeof *h, 0);
  h->e = e;
  h->rt = LUA_NOREF;
  h->resumed = LUA_NOREF;
  h->nrefs = 0;
  h->npool = 0;
  h->ws = NULL;
  h->ws_max = 0;
  h->ws_told = 0;
  h->upstream = 0;
  h->resume_end_ns = 0;
  memset(&h->watch, 0, sizeof h->watch);
  h->watch.fire = host_watch_fire;
  atomic_init(&h->watch.wake_seen, 0);
  atomic_init(&h->resume_deadline, 0);
  atomic_init(&h->resume_thread, pthread_self());
  lua_rawsetp(H, LUA_REGISTRYINDEX, &tp__host_key);
  tp__luv_stderr = stderr;
  luaL_openlibs(H);
  lua_gc(H, LUA_GCGEN, 0, 0);
  if (!c_modules_bind_here()) {
    lua_getglobal(H, LUA_LOADLIBNAME);
    lua_getfield(H, -1, "searchers");
    lua_pushcfunction(H, no_c_searcher);
    lua_rawseti(H, -2, 3);
    lua_pushnil(H);
    lua_rawseti(H, -2, 4);  /* the all-in-one loader */
    lua_pop(H, 1);
    lua_pushnil(H);
    lua_setfield(H, -2, "loadlib");
    lua_pop(H, 1);
  }
  luv_set_loop(H, e->loop);
  luv_set_callback(H, tp__host_cb_pcall);
  luaL_requiref(H, "luv", luaopen_luv, 0);
  luaL_requiref(H, "lpeg", luaopen_lpeg, 0);
  luaL_requiref(H, "json", tp__json_open, 1);  /* also a global: plugins use json.array */
  luaL_getsubtable(H, LUA_REGISTRYINDEX, LUA_PRELOAD_TABLE);
  lua_pushcfunction(H, tp__open_fs);         /* require("tidepool.fs"): tools/fs.lua */
  lua_setfield(H, -2, "tidepool.fs");
  lua_pushcfunction(H, tp__open_proc);       /* require("tidepool.proc"): tools/proc.lua */
  lua_setfield(H, -2, "tidepool.proc");
  lua_pushlightuserdata(H, e);
  lua_pushcclosure(H, tp__kvstore_open, 1);  /* require("tidepool.kv"): tools/kv.lua */
  lua_setfield(H, -2, "tidepool.kv");
  lua_pushlightuserdata(H, e);
  lua_pushcclosure(H, tp__http_open, 1);     /* require("tidepool.http"): http.c */
  lua_setfield(H, -2, "tidepool.http");
  lua_pop(H, 1);
  lua_settop(H, 1);
  luaL_newmetatable(H, CALLBOX);
  lua_pushliteral(H, "tidepool call");
  lua_setfield(H, -2, "__metatable");
  lua_pop(H, 1);
  const tp_embedded *src = tp__embedded_find("lua/host.lua");
  if (src == NULL) return luaL_error(H, "lua/host.lua is not embedded in this build");
  if (luaL_loadbufferx(H, src->data, src->len, "=lua/host.lua", "t") != LUA_OK)
    return lua_error(H);
  static const luaL_Reg fns[] = {
    { "add_tool", tp__lua_add_tool }, { "complete", e_complete }, { "log", e_log },
    { "emit", e_emit },
    { "progress", e_progress },
    { "deadline_ms", e_deadline_ms }, { "fs_quota", e_fs_quota }, { "resume", e_resume },
    { "fs_charge", e_fs_charge }, { "workspace_max", e_workspace_max },
    { "workspace", e_workspace }, { "config", e_config }, { "new_box", e_new_box },
    { "claim", e_claim }, { "annotate", e_annotate }, { "seen", e_seen },
    { "traceparent", e_traceparent }, { "span", e_span }, { "span_start", e_span_start },
    { "seen_load", e_seen_load }, { "upstream_state", e_upstream_state },
    { "tools_changed", e_tools_changed },
    { "field", e_field }, { "body", e_body }, { "charge", e_charge },
    { "decode", e_decode }, { "peek_id", e_peek_id }, { NULL, NULL } };
  luaL_newlibtable(H, fns);
  luaL_getmetatable(H, CALLBOX);
  luaL_setfuncs(H, fns, 1);     /* upvalue 1 of each: for check_box */
  lua_pushlightuserdata(H, (void *)&tp__host_done_key);
  lua_setfield(H, -2, "DONE");
  push_mcp_versions(H);
  lua_setfield(H, -2, "mcp_versions");
  luaL_getsubtable(H, LUA_REGISTRYINDEX, LUA_PRELOAD_TABLE);
  lua_pushvalue(H, -2);
  lua_pushcclosure(H, open_upstream, 1);
  lua_setfield(H, -2, "tidepool.upstream");
  lua_pop(H, 1);
  lua_call(H, 1, 1);
  luaL_checktype(H, -1, LUA_TTABLE);
  lua_getfield(H, -1, "resumed");
  luaL_checktype(H, -1, LUA_TFUNCTION);
  h->resumed = tp__host_take_ref(H);
  h->rt = tp__host_take_ref(H);
  return 0;
}

int tp__host_open (tp_engine *e) {
  if (e->H != NULL) return TP_OK;
  host_heap *hp = calloc(1, sizeof *hp);
  lua_State *H = hp != NULL ? luaL_newstate() : NULL;
  if (H == NULL) {
    free(hp);
    return TP_ENOMEM;
  }
  lua_setallocf(H, host_alloc, hp);
  hp->e = e;
  lua_setwarnf(H, host_warn, hp);
  *(void **)lua_getextraspace(H) = NULL;  /* no pattern meter here (lua_patch.h) */
  lua_pushcfunction(H, open_p);
  lua_pushlightuserdata(H, e);
  if (tp__host_pcall(H, 1, 0) != LUA_OK) {
    tp__engine_set_error(e, "the host Lua state cannot start: %s", tp__host_error_text(H, -1));
    lua_close(H);
    host_heap_free(hp);
    /* luv may have started nothing yet; anything it did start is closed by the engine */
    return TP_ENOMEM;
  }
  e->H = H;
  e->host_state = tp__host_get(H);
  return TP_OK;
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

/* luv's data of a handle (luv/lhandle.h and luv/luv.h of lua-luv-dev 1.44; luv.h itself
** cannot be included beside this Lua's headers): the fields read here. */
typedef struct luv_ctx_head { uv_loop_t *loop; lua_State *L; } luv_ctx_head;
typedef struct luv_handle_data {
  int ref;                 /* the handle's userdata in the registry, while it is open */
  int callbacks[2];
  luv_ctx_head *ctx;
  void *extra;
  void (*extra_gc)(void *);
} luv_handle_data;

/* What luv's own close callback does, less calling the script's close callback. */
static void luv_closed (uv_handle_t *handle) {
  luv_handle_data *d = handle->data;
  if (d == NULL) return;
  lua_State *H = d->ctx->L;
  luaL_unref(H, LUA_REGISTRYINDEX, d->ref);
  luaL_unref(H, LUA_REGISTRYINDEX, d->callbacks[0]);
  luaL_unref(H, LUA_REGISTRYINDEX, d->callbacks[1]);
  if (d->extra_gc) d->extra_gc(d->extra);
  free(d);
  handle->data = NULL;
}

/* Closes from C every luv handle of H still open: luv keeps each in the registry until
** it is closed, and registry.uv_handle holds the metatables of handles. This allocates
** nothing, so it works when host.lua's shutdown could not (out of memory: a Lua call may
** need a new frame). A handle left open would be closed by luv's __gc inside lua_close,
** and its close callback would then run on a closed state. */
static void close_luv_handles (lua_State *H) {
  if (lua_getfield(H, LUA_REGISTRYINDEX, "uv_handle") != LUA_TTABLE) { lua_pop(H, 1); return; }
  int kinds = lua_gettop(H);
  lua_pushnil(H);
  while (lua_next(H, LUA_REGISTRYINDEX)) {
    if (lua_type(H, -1) == LUA_TUSERDATA && lua_getmetatable(H, -1)) {
      int is_handle = lua_rawget(H, kinds) != LUA_TNIL;
      lua_pop(H, 1);
      uv_handle_t **u = lua_touserdata(H, -1);
      if (is_handle && *u != NULL && !uv_is_closing(*u)) uv_close(*u, luv_closed);
    }
    lua_pop(H, 1);
  }
  lua_pop(H, 1);
}


void tp__host_close (tp_engine *e) {
  lua_State *H = e->H;
  if (H == NULL) return;
  tp__host_upstream_stop(e);
  if (tp__host_rt_call(H, "shutdown", 0, 0) != LUA_OK) lua_pop(H, 1);  /* closes luv handles */
  close_luv_handles(H);  /* those shutdown could not close */
  uv_run(e->loop, UV_RUN_NOWAIT);  /* their close callbacks, while H still exists */
  for (size_t i = 0; i < e->ntools; i++)  /* the tools outlive H, without handlers */
    if (e->tools[i]->prov->release) e->tools[i]->prov->release(e, e->tools[i]);
  tp__host *h = tp__host_get(H);
  tp__watch_disarm(&e->core.wd, &h->watch);  /* the watchdog outlives H: it lets go of h */
  while (h->npool > 0) tp__host_unbind(H, h, h->pool[--h->npool], 0);
  tp__host_drop_ref(H, &h->resumed);
  tp__host_drop_ref(H, &h->rt);
  free(h->ws);
  h->ws = NULL;
  assert(h->nrefs == 0 && "host.c: registry references leaked");
  void *hp;
  lua_getallocf(H, &hp);
  lua_close(H);
  host_heap_free(hp);
  e->H = NULL;
  e->host_state = NULL;
}

/* ---- plugins ------------------------------------------------------------------------ */

static int cmp_str (const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Appends one problem line to a growing buffer. -1 when out of memory. */
static int add_problem (char **buf, size_t *len, const char *line) {
  size_t n = strlen(line);
  char *nb = realloc(*buf, *len + n + 2);
  if (nb == NULL) return -1;
  *buf = nb;
  if (*len) (*buf)[(*len)++] = '\n';
  memcpy(*buf + *len, line, n);
  *len += n;
  (*buf)[*len] = '\0';
  return 0;
}

/* The problems of the upstream servers' start go with the plugin problems of the load. */
typedef struct upstream_problems {
  char **buf;
  size_t *len;
  void (*problem)(const char *, void *);
  void *ud;
  int nomem;
} upstream_problems;

static void upstream_problem (const char *line, void *ud) {
  upstream_problems *up = ud;
  if (add_problem(up->buf, up->len, line) != 0) up->nomem = 1;
  else if (up->problem) up->problem(line, up->ud);
}

/* load_file_p(dir, dlen, name): host.lua's load_file of "dir/name", the C strings given
** as light userdata, so that making the path (which may raise) is protected. */
static int load_file_p (lua_State *H) {
  const char *dir = lua_touserdata(H, 1), *name = lua_touserdata(H, 3);
  size_t dlen = (size_t)lua_tointeger(H, 2);
  lua_settop(H, 0);
  lua_rawgeti(H, LUA_REGISTRYINDEX, tp__host_get(H)->rt);
  lua_getfield(H, -1, "load_file");
  lua_pushfstring(H, "%s/%s", lua_pushlstring(H, dir, dlen), name);
  lua_remove(H, -2);
  lua_call(H, 1, 2);
  return 2;
}

int tp__host_load_dir (tp_engine *e, const char *dir,
                       void (*problem)(const char *, void *), void *ud) {
  if (e == NULL || dir == NULL) return TP_EINVAL;
  DIR *d = opendir(dir);
  if (d == NULL) {
    tp__engine_set_error(e, "cannot read the tools directory %s: %s", dir, strerror(errno));
    return TP_EINVAL;
  }
  char **names = NULL;
  size_t n = 0, cap = 0;
  struct dirent *de;
  int rc = TP_OK;
  while ((de = readdir(d)) != NULL) {
    size_t len = strlen(de->d_name);
    if (de->d_name[0] == '.' || len < 5 || strcmp(de->d_name + len - 4, ".lua") != 0) continue;
    if (tp__grow(&names, &cap, n + 1, sizeof *names, 16) != 0) { rc = TP_ENOMEM; break; }
    if ((names[n] = strdup(de->d_name)) == NULL) { rc = TP_ENOMEM; break; }
    n++;
  }
  closedir(d);
  if (rc == TP_OK && (rc = tp__host_open(e)) == TP_OK && n > 1)
    qsort(names, n, sizeof *names, cmp_str);
  char *problems = NULL;
  size_t plen = 0;
  if (rc == TP_OK) {
    upstream_problems up = { &problems, &plen, problem, ud, 0 };
    tp__host_upstream(e, upstream_problem, &up);
    if (up.nomem) rc = TP_ENOMEM;
  }
  int added = 0;
  size_t dlen = strlen(dir);
  while (dlen > 1 && dir[dlen - 1] == '/') dlen--;
  for (size_t i = 0; rc == TP_OK && i < n; i++) {
    lua_State *H = e->H;
    int top = lua_gettop(H);
    lua_pushcfunction(H, load_file_p);
    lua_pushlightuserdata(H, (void *)dir);
    lua_pushinteger(H, (lua_Integer)dlen);
    lua_pushlightuserdata(H, names[i]);
    if (tp__host_pcall(H, 3, 2) != LUA_OK) {
      if (add_problem(&problems, &plen, tp__host_error_text(H, -1)) != 0) rc = TP_ENOMEM;
      else if (problem) problem(tp__host_error_text(H, -1), ud);
    }
    else {
      added += (int)lua_tointeger(H, -2);
      lua_Integer np = (lua_Integer)lua_rawlen(H, -1);
      for (lua_Integer k = 1; k <= np; k++) {
        lua_rawgeti(H, -1, k);
        if (lua_type(H, -1) == LUA_TSTRING) {
          if (add_problem(&problems, &plen, lua_tostring(H, -1)) != 0) rc = TP_ENOMEM;
          else if (problem) problem(lua_tostring(H, -1), ud);
        }
        lua_pop(H, 1);
      }
    }
    lua_settop(H, top);
  }
  for (size_t i = 0; i < n; i++) free(names[i]);
  free(names);
  if (rc != TP_OK) {
    free(problems);
    if (rc == TP_ENOMEM && e->error == NULL) tp__engine_set_error(e, "out of memory");
    return rc;
  }
  free(e->error);
  e->error = problems;  /* NULL reads as "" */
  tp__tools_annotate(e);
  return added;
}

/* ---- describe and search: lua/describe.lua over the registry ------------------------ */

/* lua/describe.lua, loaded once into H and kept in the registry. */
static char describe_key;

static void push_describe (lua_State *H) {
  if (lua_rawgetp(H, LUA_REGISTRYINDEX, &describe_key) == LUA_TTABLE) return;
  lua_pop(H, 1);
  const tp_embedded *src = tp__embedded_find("lua/describe.lua");
  if (src == NULL) luaL_error(H, "lua/describe.lua is not embedded in this build");
  if (luaL_loadbufferx(H, src->data, src->len, "=lua/describe.lua", "t") != LUA_OK)
    lua_error(H);
  lua_call(H, 0, 1);
  luaL_checktype(H, -1, LUA_TTABLE);
  lua_pushvalue(H, -1);
  lua_rawsetp(H, LUA_REGISTRYINDEX, &describe_key);
}

/* Records in the table at index order the key order of every object of v, whose Lua
** copy is at index idx: order[copy] = {keys in v's order}. jansson keeps an object's
** keys in insertion order, so for a schema parsed from JSON text this is the order its
** author wrote; describe.lua shows fields in it. */
static void push_order (lua_State *H, const json_t *v, int idx, int order, int depth) {
  if (depth > 64 || lua_type(H, idx) != LUA_TTABLE) return;
  luaL_checkstack(H, 4, NULL);
  if (json_is_object(v)) {
    const char *key;
    json_t *child;
    int n = 0;
    lua_pushvalue(H, idx);
    lua_createtable(H, (int)json_object_size(v), 0);
    json_object_foreach((json_t *)v, key, child) {
      lua_pushstring(H, key);
      lua_rawseti(H, -2, ++n);
    }
    lua_rawset(H, order);
    json_object_foreach((json_t *)v, key, child) {
      if (!json_is_object(child) && !json_is_array(child)) continue;
      lua_pushstring(H, key);
      lua_rawget(H, idx);
      push_order(H, child, lua_gettop(H), order, depth + 1);
      lua_pop(H, 1);
    }
  }
  else if (json_is_array(v)) {
    size_t i;
    json_t *child;
    json_array_foreach(v, i, child) {
      if (!json_is_object(child) && !json_is_array(child)) continue;
      lua_rawgeti(H, idx, (lua_Integer)i + 1);
      push_order(H, child, lua_gettop(H), order, depth + 1);
      lua_pop(H, 1);
    }
  }
}

/* Pushes the tools as describe.lua reads them: {name, description, input, output,
** order}, one tool when only is not NULL; without the schemas for a search, which reads
** names and descriptions only. order (the key order of the schemas' objects) is given
** for tools whose schemas came as JSON text; a Lua plugin's tables have no order. */
/* Tools described beside the engine's (tp__host_describe_extra: caller tools), for the
** describe_call under way on this thread. */
static _Thread_local const tp_tool *const *extra_tools;
static _Thread_local size_t nextra_tools;

static void push_tool_list (lua_State *H, const tp_engine *e, const char *only,
                            int schemas, const tp_tool *given) {
  /* one tool: found by name, not by a walk over them all (annotating each of 10,000
  ** upstream tools would be quadratic) */
  const tp_tool *one = only ? tp__tool_find(e, only) : NULL;
  if (one && strcmp(one->name, only) != 0) one = NULL;  /* an alias: not this tool's name */
  if (only == NULL && given != NULL) { one = given; only = given->name; }
  size_t from = 0, to = only ? 0 : e->ntools + nextra_tools;
  const tp_tool *const *list = (const tp_tool *const *)e->tools;
  if (one) { list = &one; to = 1; }
  lua_createtable(H, (int)(to - from), 0);
  int n = 0;
  for (size_t i = from; i < to; i++) {
    const tp_tool *t = one || i < e->ntools ? list[i] : extra_tools[i - e->ntools];
    if (!only && !(tp__tool_callers(e, t) & TP_CALLER_SCRIPT)) continue;  /* direct only */
    lua_createtable(H, 0, 4);
    lua_pushstring(H, t->name);
    lua_setfield(H, -2, "name");
    lua_pushstring(H, t->description);
    lua_setfield(H, -2, "description");
    if (!schemas) { lua_rawseti(H, -2, ++n); continue; }
    lua_pushstring(H, t->prov->kind);  /* "upstream": an MCP server's tool */
    lua_setfield(H, -2, "kind");
    int tool = lua_gettop(H), order = 0;
    if (t->origin == NULL) {
      lua_newtable(H);
      order = lua_gettop(H);
    }
    tp__json_push(H, t->input, 0);
    if (order) push_order(H, t->input, lua_gettop(H), order, 0);
    lua_setfield(H, tool, "input");
    if (t->output) {
      tp__json_push(H, t->output, 0);
      if (order) push_order(H, t->output, lua_gettop(H), order, 0);
      lua_setfield(H, tool, "output");
    }
    if (order) lua_setfield(H, tool, "order");
    lua_rawseti(H, -2, ++n);
  }
}

/* Replaces the value on top of H by its JSON text (an empty table becomes []). */
static int push_text_p (lua_State *H) {
  lua_pushstring(H, lua_touserdata(H, 1));
  return 1;
}

static void to_json_text (lua_State *H) {
  tp_json_err jerr;
  json_t *v = tp__json_from_lua(H, -1, 0, 0, &jerr);
  if (v == NULL) luaL_error(H, "describe: %s", jerr.message);
  if (json_is_object(v) && json_object_size(v) == 0) {
    json_decref(v);
    v = json_array();
  }
  char *text = tp__json_dumps(v);
  json_decref(v);
  if (text == NULL) luaL_error(H, "not enough memory");
  lua_pop(H, 1);
  /* H has no cap: only the host itself could run out here, and then text is freed too */
  lua_pushcfunction(H, push_text_p);
  lua_pushlightuserdata(H, text);
  int st = lua_pcall(H, 1, 1, 0);
  free(text);
  if (st != LUA_OK) lua_error(H);
}

/* The mode of describe.lua a format names: its last "+"-separated word when that is one
** of describe.lua's modes, "full" otherwise ("lua", "json", "json+session"). */
static const char *format_mode (const char *what) {
  static const char *const modes[] = { "compact", "auto", "fit", "grouped", "counts", NULL };
  const char *last = strrchr(what, '+');
  last = last ? last + 1 : what;
  for (int i = 0; modes[i]; i++) if (strcmp(last, modes[i]) == 0) return modes[i];
  return "full";
}

/* describe_p(e, what, arg): what "lua" (preamble and the tools in full), a mode of
** describe.lua ("compact", "auto", "fit", "grouped", "counts"), "tool" (one tool's API,
** arg names it), "json" or "json+MODE" (the run_lua tool; arg non-nil adds the session
** argument), or "search" (arg is the query). Returns a string. */
static int describe_p (lua_State *H) {
  const tp_engine *e = lua_touserdata(H, 1);
  const char *what = lua_touserdata(H, 2);  /* C strings: pushing them could raise */
  const char *arg = lua_touserdata(H, 3);
  push_describe(H);
  int M = lua_gettop(H);
  if (strcmp(what, "search") == 0) {
    lua_getfield(H, M, "search");
    push_tool_list(H, e, NULL, 0, NULL);
    lua_pushstring(H, arg ? arg : "");
    lua_call(H, 2, 1);
    to_json_text(H);
    return 1;
  }
  const char *mode = format_mode(what);
  if (strncmp(what, "json", 4) == 0) {
    lua_getfield(H, M, "run_lua_tool");
    push_tool_list(H, e, NULL, 1, NULL);
    lua_createtable(H, 0, 2);
    lua_pushboolean(H, arg != NULL);
    lua_setfield(H, -2, "session");
    lua_pushstring(H, mode);
    lua_setfield(H, -2, "mode");
    lua_call(H, 2, 1);
    to_json_text(H);
    return 1;
  }
  if (strcmp(what, "tool*") == 0) {  /* one tool outside the registry: arg is it */
    lua_getfield(H, M, "lua_api");
    push_tool_list(H, e, NULL, 1, (const tp_tool *)(const void *)arg);
    lua_call(H, 1, 1);
    return 1;
  }
  if (strcmp(what, "tool") == 0) {  /* one tool */
    lua_getfield(H, M, "lua_api");
    push_tool_list(H, e, arg, 1, NULL);
    lua_call(H, 1, 1);
    return 1;
  }
  lua_getfield(H, M, "describe");
  push_tool_list(H, e, NULL, 1, NULL);
  lua_pushstring(H, mode);
  lua_call(H, 2, 1);
  return 1;
}

/* The work of one tool's annotations made at its registration is capped: a schema of
** megabytes would otherwise hold every engine that loads it for seconds. Past the cap
** the tool gets a short text instead (registry.c). */
#define TOOL_API_BUDGET 5000000    /* instructions of describe.lua (about 25 ms here) */
#define TOOL_API_HOOK 10000
static __thread uint64_t api_left;

static void api_hook (lua_State *H, lua_Debug *ar) {
  (void)ar;
  if (api_left <= TOOL_API_HOOK) luaL_error(H, "the tool's schema is too large to annotate");
  api_left -= TOOL_API_HOOK;
}

/* Runs describe_p in H. report: a failure is the engine's error (tp_engine_error);
** else it is left out (a tool's text made at its registration, under TOOL_API_BUDGET).
** NULL on failure. Scripts never come here: their discovery reads the texts made at
** registration (registry.c). */
static char *describe_call (tp_engine *e, const char *what, const char *arg, int report) {
  if (tp__host_open(e) != TP_OK) return NULL;
  lua_State *H = e->H;
  int top = lua_gettop(H);
  lua_Hook old_hook = lua_gethook(H);
  int old_mask = lua_gethookmask(H), old_count = lua_gethookcount(H);
  if (!report) {
    api_left = TOOL_API_BUDGET;
    lua_sethook(H, api_hook, LUA_MASKCOUNT, TOOL_API_HOOK);
  }
  lua_pushcfunction(H, describe_p);
  lua_pushlightuserdata(H, e);
  lua_pushlightuserdata(H, (void *)what);  /* nothing that allocates outside tp__host_pcall */
  lua_pushlightuserdata(H, (void *)arg);
  char *out = NULL;
  if (tp__host_pcall(H, 3, 1) == LUA_OK) {
    size_t len;
    const char *s = lua_tolstring(H, -1, &len);
    if (s && (out = malloc(len + 1)) != NULL) memcpy(out, s, len + 1);
  }
  else if (report) tp__engine_set_error(e, "describe: %s", tp__host_error_text(H, -1));
  if (!report) lua_sethook(H, old_hook, old_mask, old_count);
  lua_settop(H, top);
  return out;
}

char *tp__host_describe (tp_engine *e, const char *format, const char *arg) {
  tp__host_upstream(e, NULL, NULL);  /* the upstream servers' tools are described too */
  return describe_call(e, format, arg, 1);
}

char *tp__host_describe_extra (tp_engine *e, const char *format, const char *arg,
                               const tp_tool *const *extra, size_t nextra) {
  tp__host_upstream(e, NULL, NULL);
  extra_tools = extra;
  nextra_tools = nextra;
  char *text = describe_call(e, format, arg, 1);
  extra_tools = NULL;
  nextra_tools = 0;
  return text;
}

char *tp__host_tool_api_of (tp_engine *e, const tp_tool *t) {
  char *text = describe_call(e, "tool*", (const char *)(const void *)t, 0);
  uv_update_time(e->loop);  /* as tp__host_tool_api */
  return text;
}

char *tp__host_tool_api (tp_engine *e, const char *tool) {
  char *text = describe_call(e, "tool", tool, 0);
  /* the loop's cached time is as old as this work (the host state may have just been
  ** opened): a handler's uv timer started from it later would fire that much early */
  uv_update_time(e->loop);
  return text;
}

/* ---- what tools.describe tells a script --------------------------------------------
** Each tool's annotations are made once, when it is registered (after a C tool's
** tp_engine_add_tool, after a plugin directory's load), by describe.lua in the host
** state under a cap on its work; so a script's tools.describe reads data and runs no
** Lua. A tool whose annotations cannot be made (past the cap, or the host state out of
** memory) gets a short text saying so, made here. (Here, in host.c, above registry.c:
** making them runs describe.lua in the host state.)
*/
static char *short_api (const tp_tool *t) {
  const char *d = t->description;
  size_t dl = strcspn(d, "\r\n");
  if (dl > 200) dl = 200;
  size_t n = strlen(t->name) + dl + 160;
  char *s = malloc(n);
  if (s == NULL) return NULL;
  snprintf(s, n, "%s%.*s%s---@param args table (its schema is too large to annotate)\n"
           "---@return any\nfunction tools.%s(args) end\n", dl ? "---" : "", (int)dl, d,
           dl ? "\n" : "", t->name);
  return s;
}

void tp__tools_annotate (tp_engine *e) {
  for (size_t i = 0; i < e->ntools; i++) {
    tp_tool *t = e->tools[i];
    if (t->lua_api != NULL || t->api_tried) continue;
    t->api_tried = 1;
    t->lua_api = tp__host_tool_api(e, t->name);
    if (t->lua_api == NULL) t->lua_api = short_api(t);
  }
}

void tp__tool_annotate_one (tp_engine *e, tp_tool *t) {
  if (t->lua_api != NULL || t->api_tried) return;
  t->api_tried = 1;
  t->lua_api = tp__host_tool_api_of(e, t);
  if (t->lua_api == NULL) t->lua_api = short_api(t);
}

