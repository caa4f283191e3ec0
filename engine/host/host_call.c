/*
** host_call.c: a call of a tool whose handler runs in the host state H, as C sees it.
** A call's record (host.lua: its coroutine, ctx, box and handles) is seen from C through
** its box, a userdata whose user value is the record: the call while bound, the
** coroutine, and a registry reference to the box held while the record is bound to a
** call or idle in the pool. Here: binding and letting go of a call, E's functions on a
** box (tp__host_call_fns: complete, resume, charge, decode, ctx's fields...), the body of
** a record's coroutine, the timed resume of a handler under its call's deadline, and the
** handler's value made into the call's result. The Lua and upstream providers
** (host_handler.c) and host.c, which puts these functions into E, sit above; nothing
** here opens H or loads tools.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>

#include "util.h"
#include "lauxlib.h"

#include "registry.h"
#include "host.h"
#include "host_int.h"
#include "json.h"
#include "schema.h"
#include "codec.h"
#include "trace.h"

/* ---- a call's box, and E's functions on it ---------------------------------------- */

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
  if (deadline == 0) {  /* no order needed: a watch that reads the old one signals in vain */
    atomic_store_explicit(&h->resume_deadline, 0, memory_order_release);
    return;
  }
  atomic_store(&h->resume_deadline, deadline);
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
    pthread_t self = pthread_self();  /* the same thread, as a rule: no locked write */
    if (!pthread_equal(atomic_load_explicit(&h->resume_thread, memory_order_relaxed), self))
      atomic_store(&h->resume_thread, self);
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
** referenced (host_handler.c references it when it binds it). */
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

/* Sets up h's resume watch, not armed yet (host.c's open_p). */
void tp__host_watch_init (tp__host *h) {
  memset(&h->watch, 0, sizeof h->watch);
  h->watch.fire = host_watch_fire;
  atomic_init(&h->watch.wake_seen, 0);
  atomic_init(&h->resume_deadline, 0);
  atomic_init(&h->resume_thread, pthread_self());
}

/* ---- a record's coroutine ------------------------------------------------------------
** body(RUN, handler, args) runs one handler per resume: resumed by host_handler.c with
** tp__host_run_key, the handler and the arguments (a tp__host_args, valid during that
** resume), it makes the arguments' table, calls handler(args, ctx), wipes what the
** handler left in ctx (fields, even rawset ones; a metatable it changed) and yields DONE,
** result. Its frame holds nothing of a call once it yielded. Upvalues: ctx and ctx's metatable. */
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

/* E's functions on a call's box (check_box: each has CALLBOX's metatable as upvalue 1). */
const luaL_Reg tp__host_call_fns[] = {
  { "complete", e_complete }, { "log", e_log }, { "progress", e_progress },
  { "deadline_ms", e_deadline_ms }, { "fs_quota", e_fs_quota }, { "resume", e_resume },
  { "fs_charge", e_fs_charge }, { "new_box", e_new_box }, { "claim", e_claim },
  { "traceparent", e_traceparent }, { "field", e_field }, { "body", e_body },
  { "charge", e_charge }, { "decode", e_decode }, { NULL, NULL } };
