/*
** sandbox.c: the Lua state a script runs in. Its allocator enforces the memory cap,
** its library is exactly sandbox/allowlist.h, its hook enforces the verdicts of the
** limits, and its coroutine library lets tool requests and time slices pass through a
** script's own coroutines to the host.
*/
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lauxlib.h"
#include "lualib.h"

#include "lstate.h"   /* hookcount: how much of its count-hook period a thread has run */

#include "internal.h"
#include "json.h"
#include "allowlist.h"

_Static_assert(LUA_EXTRASPACE == sizeof(void *), "lua_patch.h assumes one pointer");

#define POLL_EVERY 4096      /* C loops check the verdict this often */
#define METER_STEPS 4096     /* pattern steps between checks */

char tp__readonly_key;        /* marks the metatable of a read-only table */
static char ids_key;         /* registry: weak table object -> display number */
static char thread_key;      /* registry: the script's thread T */

/* ---- allocator ---------------------------------------------------------------------- */

/*
** The cap. Lua's core answers a refused allocation with an emergency collection and
** one retry of the same request, with no growing allocation and no Lua code in between;
** a first refusal that the collection rescues is not a failure. Any other refusal
** reaches the script as a memory error it could catch: the retry refused too, a
** refusal Lua does not retry (a luaL_Buffer growing in string.rep, table.concat,
** string.format...), or one made while the collector cannot run. So a refusal is the
** verdict limit.memory unless the very next growing request is its retry and succeeds:
** a different request while one is pending, the retry refused, or the next instruction
** of the script (the count-1 hook set here) with one still pending, all kill the run.
*/
#if defined(__SANITIZE_ADDRESS__)
#define ARENA_ON 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)  /* clang before 16 has only this spelling */
#define ARENA_ON 0
#endif
#endif
#ifndef ARENA_ON
#define ARENA_ON 1
#endif
#define ARENA_CHUNK (16 * 1024)

static void *arena_get (tp_arena *a, size_t n) {
  size_t cls = (n + 15) >> 4, sz = cls << 4;
  void *p = a->free_[cls];
  if (p != NULL) {
    a->free_[cls] = *(void **)p;
    return p;
  }
  if ((size_t)(a->end - a->cur) < sz) {
    char *c = malloc(ARENA_CHUNK);
    if (c == NULL) return NULL;
    *(void **)c = a->chunks;
    a->chunks = c;
    a->cur = c + 16;  /* blocks stay 16-byte aligned */
    a->end = c + ARENA_CHUNK;
  }
  p = a->cur;
  a->cur += sz;
  return p;
}

static void arena_put (tp_arena *a, void *p, size_t n) {
  size_t cls = (n + 15) >> 4;
  *(void **)p = a->free_[cls];
  a->free_[cls] = p;
}

static void arena_free_all (tp_arena *a) {
  for (void *c = a->chunks, *next; c != NULL; c = next) {
    next = *(void **)c;
    free(c);
  }
  memset(a, 0, sizeof *a);
}

static int is_small (size_t n) { return ARENA_ON && n <= TP_ARENA_SMALL; }

/* free/realloc of a block of osize bytes (0 when ptr is NULL) by size class. */
static void block_free (tp_arena *a, void *ptr, size_t osize) {
  if (ptr == NULL) return;
  if (is_small(osize)) arena_put(a, ptr, osize);
  else free(ptr);
}

static void *block_realloc (tp_arena *a, void *ptr, size_t osize, size_t nsize) {
  if (ptr != NULL && !is_small(osize) && !is_small(nsize)) return realloc(ptr, nsize);
  if (ptr != NULL && is_small(osize) && is_small(nsize) &&
      (osize + 15) >> 4 == (nsize + 15) >> 4)
    return ptr;  /* same size class */
  void *p = is_small(nsize) ? arena_get(a, nsize) : malloc(nsize);
  if (p == NULL) {
    if (ptr != NULL && nsize < osize && is_small(osize)) return ptr;  /* a shrink holds */
    return NULL;
  }
  if (ptr != NULL) {
    memcpy(p, ptr, osize < nsize ? osize : nsize);
    block_free(a, ptr, osize);
  }
  return p;
}

static void *sb_alloc (void *ud, void *ptr, size_t osize, size_t nsize) {
  tp_sandbox *sb = ud;
  if (ptr == NULL) osize = 0;  /* osize is a type tag when ptr is NULL */
  if (nsize == 0) {
    block_free(&sb->arena, ptr, osize);
    sb->mem_used -= osize;
    return NULL;
  }
  int retry = sb->fail_armed && sb->fail_ptr == ptr && sb->fail_osize == osize &&
              sb->fail_nsize == nsize;
  if (nsize > osize && sb->fail_armed && !retry)
    tp__sandbox_kill(sb, TP_KILL_MEMORY);  /* the pending refusal was not retried */
  if (nsize > osize && sb->mem_cap && sb->mem_used - osize + nsize > sb->mem_cap) {
    if (retry) tp__sandbox_kill(sb, TP_KILL_MEMORY);
    sb->fail_armed = 1;
    sb->fail_ptr = ptr; sb->fail_osize = osize; sb->fail_nsize = nsize;
    lua_State *r = atomic_load(&sb->running);
    if (r) lua_sethook(r, tp__sandbox_hook, LUA_MASKCOUNT, 1);  /* still pending? */
    return NULL;
  }
  void *p = block_realloc(&sb->arena, ptr, osize, nsize);
  if (p == NULL) {  /* the host itself is out of memory: same verdict */
    tp__sandbox_kill(sb, TP_KILL_MEMORY);
    return NULL;
  }
  if (nsize > osize) sb->fail_armed = 0;
  sb->mem_used = sb->mem_used - osize + nsize;
  if (sb->mem_used > sb->mem_peak) sb->mem_peak = sb->mem_used;
  return p;
}

/* ---- the host budget ------------------------------------------------------------ */

int tp__host_charge (tp_sandbox *sb, size_t n) {
  if (sb->host_cap && (n > sb->host_cap || sb->host_used > sb->host_cap - n)) {
    if (atomic_load(&sb->kill) == TP_KILL_NONE)
      snprintf(sb->kill_note, sizeof sb->kill_note, "the host memory built for the script "
               "(JSON, results, logs, call records) passed its budget of %zu bytes",
               sb->host_cap);
    tp__sandbox_kill(sb, TP_KILL_MEMORY);
    return -1;
  }
  sb->host_used += n;
  if (sb->host_used > sb->host_peak) sb->host_peak = sb->host_used;
  return 0;
}

void tp__host_refund (tp_sandbox *sb, size_t n) {
  sb->host_used = n < sb->host_used ? sb->host_used - n : 0;
}

/* ---- verdicts and the hook -------------------------------------------------------- */

tp_sandbox *tp__sandbox_of (lua_State *L) {
  tp_meter *m = *(tp_meter **)lua_getextraspace(L);
  return (tp_sandbox *)m;  /* meter is the first member */
}

void tp__sandbox_kill (tp_sandbox *sb, tp_kill why) {
  int expected = TP_KILL_NONE;
  atomic_compare_exchange_strong(&sb->kill, &expected, (int)why);
  lua_State *r = atomic_load(&sb->running);
  if (r) lua_sethook(r, tp__sandbox_hook, LUA_MASKCOUNT, 1);
}

void tp__sandbox_check (lua_State *L, tp_sandbox *sb) {
  int why = atomic_load(&sb->kill);
  if (why != TP_KILL_NONE) {
    char msg[256];
    lua_sethook(L, tp__sandbox_hook, LUA_MASKCOUNT, 1);
    tp__kill_message(sb, (tp_kill)why, msg, sizeof msg);
    luaL_error(L, "%s", msg);
  }
}

/* The count hook period a thread needs when nothing is pending: up to the next
** instruction boundary (limit or step budget), 0 when nothing counts. */
static int hook_period (const tp_sandbox *sb) {
  uint64_t next = UINT64_MAX;
  if (sb->instr_limit) next = sb->instr_limit + 1;
  if (sb->instr_step_end && sb->instr_step_end < next) next = sb->instr_step_end;
  if (next == UINT64_MAX) return 0;
  uint64_t left = next > sb->instr_used ? next - sb->instr_used : 1;
  return left > 100000 ? 100000 : (int)left;
}

/* Sets co's count hook to the period it needs now. A thread that yielded from the hook
** carries CIST_HOOKYIELD, and Lua then swallows the next count event whatever the
** period: every other step of an instruction budget ran twice its budget, uncounted.
** The mark only keeps a count-1 hook from running twice on one instruction, which our
** hook tolerates, so it is dropped here. */
void tp__sandbox_sethook (tp_sandbox *sb, lua_State *co) {
  int period = hook_period(sb);
  co->ci->callstatus &= ~CIST_HOOKYIELD;
  if (period) lua_sethook(co, tp__sandbox_hook, LUA_MASKCOUNT, period);
  else lua_sethook(co, NULL, 0, 0);
}

/*
** Charges the instructions co has run since its count hook last fired or was set. A
** coroutine that returns or yields inside a period would otherwise run them free: a
** loop of short coroutines escaped the instruction limit. Not after a hook yield (the
** hook charged the period, and Lua leaves hookcount at 1).
*/
void tp__sandbox_charge (tp_sandbox *sb, lua_State *co) {
  if (!(sb->instr_limit || sb->instr_step_end) || sb->hook_yielded) return;
  if (co->hook != tp__sandbox_hook || !(co->hookmask & LUA_MASKCOUNT)) return;
  sb->instr_used += (uint64_t)(co->basehookcount - co->hookcount);
  co->hookcount = co->basehookcount;
  if (sb->instr_limit && sb->instr_used > sb->instr_limit)
    tp__sandbox_kill(sb, TP_KILL_INSTRUCTIONS);
}

void tp__sandbox_hook (lua_State *L, lua_Debug *ar) {
  tp_sandbox *sb = tp__sandbox_of(L);
  (void)ar;
  if (sb == NULL) return;
  if (sb->instr_limit || sb->instr_step_end)
    sb->instr_used += (uint64_t)lua_gethookcount(L);
  if (sb->instr_limit && sb->instr_used > sb->instr_limit)
    tp__sandbox_kill(sb, TP_KILL_INSTRUCTIONS);
  if (sb->fail_armed) tp__sandbox_kill(sb, TP_KILL_MEMORY);  /* see sb_alloc */
  tp__sandbox_check(L, sb);  /* raises on a verdict */
  if (sb->instr_step_end && sb->instr_used >= sb->instr_step_end)
    atomic_store(&sb->slice_over, 1);
  if (atomic_load(&sb->slice_over)) {
    if (lua_isyieldable(L) && !sb->in_host) {
      atomic_store(&sb->slice_over, 0);
      sb->instr_step_end = 0;
      sb->hook_yielded = 1;
      tp__sandbox_sethook(sb, L);
      lua_yield(L, 0);
      return;
    }
    lua_sethook(L, tp__sandbox_hook, LUA_MASKCOUNT, 64);  /* try again soon */
    return;
  }
  tp__sandbox_sethook(sb, L);
}

/* The pattern meter: every METER_STEPS steps of the matcher, charge them as
** instructions and look at the verdict. */
static void meter_refill (lua_State *L, tp_meter *m) {
  tp_sandbox *sb = (tp_sandbox *)m;
  m->countdown = METER_STEPS;
  if (sb->instr_limit) {
    sb->instr_used += METER_STEPS;
    if (sb->instr_used > sb->instr_limit) tp__sandbox_kill(sb, TP_KILL_INSTRUCTIONS);
  }
  tp__sandbox_check(L, sb);
}

/* Polls the verdict from a C loop every POLL_EVERY iterations. */
static void poll (lua_State *L, tp_sandbox *sb, lua_Integer i) {
  if ((i & (POLL_EVERY - 1)) == 0) {
    if (sb->instr_limit) {
      sb->instr_used += POLL_EVERY / 16;
      if (sb->instr_used > sb->instr_limit) tp__sandbox_kill(sb, TP_KILL_INSTRUCTIONS);
    }
    tp__sandbox_check(L, sb);
  }
}

/* ---- the interrupt signal ------------------------------------------------------------
** The watchdog thread cannot touch a running Lua state safely; it sends this signal to
** the run's thread, whose handler sets the hook exactly as lua.c does on Ctrl-C. SIGURG
** is ignored by default, so a stray one harms nothing; a previous handler is chained.
*/
#ifndef TP_SIGNAL
#define TP_SIGNAL SIGURG
#endif
static __thread tp_sandbox *active __attribute__((tls_model("initial-exec")));
static struct sigaction old_action;
static pthread_once_t signal_once = PTHREAD_ONCE_INIT;
static int signal_ok;

static void on_signal (int sig, siginfo_t *info, void *uc) {
  tp_sandbox *sb = active;
  if (sb != NULL) {
    if (atomic_load(&sb->kill) != TP_KILL_NONE || atomic_load(&sb->slice_over)) {
      lua_State *r = atomic_load(&sb->running);
      if (r) lua_sethook(r, tp__sandbox_hook, LUA_MASKCOUNT, 1);
    }
    return;
  }
  if (old_action.sa_flags & SA_SIGINFO) {
    if (old_action.sa_sigaction) old_action.sa_sigaction(sig, info, uc);
  }
  else if (old_action.sa_handler != SIG_DFL && old_action.sa_handler != SIG_IGN &&
           old_action.sa_handler != NULL)
    old_action.sa_handler(sig);
}

static void signal_setup (void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_signal;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  signal_ok = sigaction(TP_SIGNAL, &sa, &old_action) == 0;
}

int tp__signal_install (void) {
  pthread_once(&signal_once, signal_setup);
  return signal_ok ? 0 : -1;
}

void tp__signal_interrupt (pthread_t thread) {
  pthread_kill(thread, TP_SIGNAL);
}

void tp__sandbox_enter (tp_sandbox *sb) { active = sb; }
void tp__sandbox_leave (void) { active = NULL; }

/* ---- values shown to the script without addresses ---------------------------------- */

/* Pushes the display form of the value at idx: what tostring gives, with a per-run
** number in place of an address ("table: #3"). Runs __tostring (script code). */
static const char *show (lua_State *L, int idx, size_t *len) {
  idx = lua_absindex(L, idx);
  if (luaL_callmeta(L, idx, "__tostring")) {
    if (!lua_isstring(L, -1)) luaL_error(L, "'__tostring' must return a string");
    return lua_tolstring(L, -1, len);
  }
  switch (lua_type(L, idx)) {
    case LUA_TNUMBER: case LUA_TSTRING: case LUA_TBOOLEAN: case LUA_TNIL:
      return luaL_tolstring(L, idx, len);
    case LUA_TLIGHTUSERDATA:
      if (lua_touserdata(L, idx) == NULL) { lua_pushliteral(L, "null"); break; }
      lua_pushliteral(L, "userdata");
      break;
    default: {
      const char *kind = luaL_typename(L, idx);
      if (luaL_getmetafield(L, idx, "__name") != LUA_TNIL) {
        if (lua_type(L, -1) == LUA_TSTRING) kind = lua_tostring(L, -1);
        lua_pop(L, 1);  /* still referenced by the metatable */
      }
      lua_rawgetp(L, LUA_REGISTRYINDEX, &ids_key);
      lua_pushvalue(L, idx);
      lua_rawget(L, -2);
      lua_Integer id = lua_tointeger(L, -1);
      lua_pop(L, 1);
      if (id == 0) {
        lua_pushinteger(L, 0);
        lua_rawget(L, -2);  /* counter lives at key 0 */
        id = lua_tointeger(L, -1) + 1;
        lua_pop(L, 1);
        lua_pushinteger(L, 0); lua_pushinteger(L, id); lua_rawset(L, -3);
        lua_pushvalue(L, idx); lua_pushinteger(L, id); lua_rawset(L, -3);
      }
      lua_pop(L, 1);
      lua_pushfstring(L, "%s: #%I", kind, (LUAI_UACINT)id);
    }
  }
  return lua_tolstring(L, -1, len);
}

static int sb_tostring (lua_State *L) {
  luaL_checkany(L, 1);
  show(L, 1, NULL);
  return 1;
}

/* Appends bytes to the logs, replacing invalid UTF-8 by U+FFFD so the envelope stays
** valid JSON; the output cap ends the run with limit.output. */
static void log_line (lua_State *L, tp_sandbox *sb, const char *s, size_t len) {
  size_t room = sb->out_cap ? (sb->out_used < sb->out_cap ? sb->out_cap - sb->out_used : 0)
                            : len;
  int over = len > room;
  size_t take = over ? room : len;
  char note[96];
  snprintf(note, sizeof note, "...[output truncated: the %zu-byte output limit was reached]",
           sb->out_cap);
  json_t *str = tp_json_string_lossy(s, take, over ? note : NULL);
  if (str == NULL || json_array_append_new(sb->logs, str) != 0) {
    tp__sandbox_kill(sb, TP_KILL_MEMORY);
    tp__sandbox_check(L, sb);
  }
  sb->out_used += take;
  if (over) {
    sb->out_truncated = 1;
    tp__sandbox_kill(sb, TP_KILL_OUTPUT);
    tp__sandbox_check(L, sb);
  }
}

static int sb_print (lua_State *L) {
  tp_sandbox *sb = tp__sandbox_of(L);
  int n = lua_gettop(L);
  luaL_Buffer b;
  tp__sandbox_check(L, sb);
  lua_checkstack(L, 4);
  luaL_buffinit(L, &b);
  for (int i = 1; i <= n; i++) {
    if (i > 1) luaL_addchar(&b, '\t');
    show(L, i, NULL);
    luaL_addvalue(&b);
  }
  luaL_pushresult(&b);
  size_t len;
  const char *s = lua_tolstring(L, -1, &len);
  log_line(L, sb, s, len);
  return 0;
}

static int sb_warn (lua_State *L) {
  luaL_checkstring(L, 1);
  return 0;
}

/* ---- wrapped base functions ------------------------------------------------------- */

static lua_CFunction orig_load, orig_setmetatable, orig_rawset, orig_xpcall, orig_format, orig_rep,
                     orig_find, orig_sort;

static int sb_load (lua_State *L) {
  tp_sandbox *sb = tp__sandbox_of(L);
  size_t len;
  if (lua_type(L, 1) == LUA_TSTRING) {
    lua_tolstring(L, 1, &len);
    if (sb->limits.source && len > sb->limits.source) {
      luaL_pushfail(L);
      lua_pushfstring(L, "chunk of %I bytes is over the %I-byte source limit",
                      (LUAI_UACINT)len, (LUAI_UACINT)sb->limits.source);
      return 2;
    }
  }
  const char *mode = luaL_optstring(L, 3, "t");
  if (strchr(mode, 'b') != NULL) {
    luaL_pushfail(L);
    lua_pushliteral(L, "attempt to load a binary chunk (the sandbox loads text only)");
    return 2;
  }
  lua_settop(L, lua_gettop(L) < 4 ? 3 : 4);
  lua_pushliteral(L, "t");
  lua_replace(L, 3);
  return orig_load(L);
}

static int sb_setmetatable (lua_State *L) {
  if (lua_type(L, 2) == LUA_TTABLE) {
    lua_pushliteral(L, "__gc");
    if (lua_rawget(L, 2) != LUA_TNIL)
      return luaL_error(L, "__gc metamethods are not allowed in the sandbox "
                           "(finalizers would run outside the limits); use a to-be-closed "
                           "variable (local x <close>) to clean up");
    lua_pop(L, 1);
  }
  return orig_setmetatable(L);
}

static int is_readonly (lua_State *L, int idx) {
  int r = 0;
  if (lua_getmetatable(L, idx)) {
    r = lua_rawgetp(L, -1, &tp__readonly_key) != LUA_TNIL;
    lua_pop(L, 2);
  }
  return r;
}

/*
** xpcall: a limit's verdict is raised from inside the count hook, where Lua calls the
** message handler before unwinding, with hooks still off. A script's handler run there
** could loop for ever, out of reach of every limit. So once there is a verdict the
** handler is skipped and the error object passes through unchanged.
*/
static int xpcall_handler (lua_State *L) {  /* upvalue 1: the script's handler */
  tp_sandbox *sb = tp__sandbox_of(L);
  if (atomic_load(&sb->kill) != TP_KILL_NONE) return 1;
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, lua_gettop(L) - 1, 1);
  return 1;
}

static int sb_xpcall (lua_State *L) {
  luaL_checktype(L, 2, LUA_TFUNCTION);
  lua_pushvalue(L, 2);
  lua_pushcclosure(L, xpcall_handler, 1);
  lua_replace(L, 2);
  return orig_xpcall(L);
}

static int sb_rawset (lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  if (is_readonly(L, 1))
    return luaL_error(L, "library tables are read-only in the sandbox");
  return orig_rawset(L);
}

static int sb_collectgarbage (lua_State *L) {
  const char *opt = luaL_optstring(L, 1, "collect");
  if (strcmp(opt, "count") != 0)
    return luaL_error(L, "collectgarbage(\"%s\") is not available in the sandbox; "
                         "only collectgarbage(\"count\") is", opt);
  int kb = lua_gc(L, LUA_GCCOUNT), b = lua_gc(L, LUA_GCCOUNTB);
  lua_pushnumber(L, (lua_Number)kb + (lua_Number)b / 1024);
  return 1;
}

/* ---- wrapped string functions --------------------------------------------------- */

/* string.format: %p is refused and %s shows tables without addresses. Arguments are
** converted in place, then Lua's own format does the rest. */
static int sb_format (lua_State *L) {
  size_t flen;
  const char *f = luaL_checklstring(L, 1, &flen);
  const char *end = f + flen;
  int arg = 1;
  while (f < end) {
    if (*f++ != '%') continue;
    if (f < end && *f == '%') { f++; continue; }
    arg++;
    while (f < end && strchr("-+ #0123456789.", *f) != NULL) f++;
    if (f >= end) break;
    if (*f == 'p')
      return luaL_error(L, "bad argument #%d to 'format' ('%%p' shows memory addresses, "
                           "which the sandbox hides)", arg);
    if (*f == 's' && arg <= lua_gettop(L)) {
      int t = lua_type(L, arg);
      if (t != LUA_TSTRING && t != LUA_TNUMBER) {
        show(L, arg, NULL);
        lua_replace(L, arg);
      }
    }
    f++;
  }
  return orig_format(L);
}

static int sb_rep (lua_State *L) {
  size_t l, lsep = 0;
  luaL_checklstring(L, 1, &l);
  lua_Integer n = luaL_checkinteger(L, 2);
  luaL_optlstring(L, 3, "", &lsep);
  if (n > 0 && l == 0 && (lsep == 0 || n == 1)) {
    lua_pushliteral(L, "");
    return 1;
  }
  return orig_rep(L);
}

static int has_specials (const char *p, size_t lp) {
  for (size_t i = 0; i < lp; i++)
    if (strchr("^$*+?.([%-", p[i]) != NULL && p[i] != '\0') return 1;
  return 0;
}

/* string.find: plain searches (and patterns without specials, which Lua searches the
** same way) use memmem, linear in time; patterns go to Lua's metered matcher. */
static int sb_find (lua_State *L) {
  size_t ls, lp;
  const char *s = luaL_checklstring(L, 1, &ls);
  const char *p = luaL_checklstring(L, 2, &lp);
  lua_Integer init = luaL_optinteger(L, 3, 1);
  if (!(lua_toboolean(L, 4) || !has_specials(p, lp)))
    return orig_find(L);
  if (init > 0) init--;
  else if (init == 0) init = 0;
  else if (init < -(lua_Integer)ls) init = 0;
  else init = (lua_Integer)ls + init;
  if ((size_t)init > ls) { luaL_pushfail(L); return 1; }
  const char *hit = memmem(s + init, ls - (size_t)init, p, lp);
  if (hit == NULL) { luaL_pushfail(L); return 1; }
  lua_pushinteger(L, (hit - s) + 1);
  lua_pushinteger(L, (lua_Integer)((size_t)(hit - s) + lp));
  return 2;
}

/* ---- wrapped table functions: the same results, stoppable ------------------------ */

static void check_table (lua_State *L, int arg, int need_write) {
  if (lua_type(L, arg) == LUA_TTABLE) return;
  int ok = 0;
  if (lua_getmetatable(L, arg)) {
    lua_pushliteral(L, "__index");
    ok = lua_rawget(L, -2) != LUA_TNIL;
    lua_pop(L, 1);
    if (ok && need_write) {
      lua_pushliteral(L, "__newindex");
      ok = lua_rawget(L, -2) != LUA_TNIL;
      lua_pop(L, 1);
    }
    lua_pop(L, 1);
  }
  if (!ok) luaL_checktype(L, arg, LUA_TTABLE);
}

static int sb_concat (lua_State *L) {
  tp_sandbox *sb = tp__sandbox_of(L);
  luaL_Buffer b;
  size_t lsep;
  check_table(L, 1, 0);
  const char *sep = luaL_optlstring(L, 2, "", &lsep);
  lua_Integer i = luaL_optinteger(L, 3, 1);
  lua_Integer last = luaL_opt(L, luaL_checkinteger, 4, luaL_len(L, 1));
  luaL_buffinit(L, &b);
  for (lua_Integer k = 0; i <= last; i++, k++) {
    poll(L, sb, k);
    lua_geti(L, 1, i);
    if (!lua_isstring(L, -1))
      return luaL_error(L, "invalid value (at index %I) in table for 'concat'",
                        (LUAI_UACINT)i);
    luaL_addvalue(&b);
    if (i == last) break;
    if (lsep) luaL_addlstring(&b, sep, lsep);
  }
  luaL_pushresult(&b);
  return 1;
}

static int sb_move (lua_State *L) {
  tp_sandbox *sb = tp__sandbox_of(L);
  lua_Integer f = luaL_checkinteger(L, 2);
  lua_Integer e = luaL_checkinteger(L, 3);
  lua_Integer t = luaL_checkinteger(L, 4);
  int tt = !lua_isnoneornil(L, 5) ? 5 : 1;
  check_table(L, 1, 0);
  check_table(L, tt, 1);
  if (e >= f) {
    luaL_argcheck(L, f > 0 || e < LUA_MAXINTEGER + f, 3, "too many elements to move");
    lua_Integer n = e - f + 1;
    luaL_argcheck(L, t <= LUA_MAXINTEGER - n + 1, 4, "destination wrap around");
    if (t > e || t <= f || (tt != 1 && !lua_compare(L, 1, tt, LUA_OPEQ))) {
      for (lua_Integer i = 0; i < n; i++) {
        poll(L, sb, i);
        lua_geti(L, 1, f + i);
        lua_seti(L, tt, t + i);
      }
    }
    else {
      for (lua_Integer i = n - 1; i >= 0; i--) {
        poll(L, sb, i);
        lua_geti(L, 1, f + i);
        lua_seti(L, tt, t + i);
      }
    }
  }
  lua_pushvalue(L, tt);
  return 1;
}

/* Heap sort for the cases Lua's sort cannot be stopped in: the default order or an
** order function written in C. With an order function in Lua, the hook runs inside it
** and Lua's own (faster) sort is used. */
static int sort_less (lua_State *L, int a, int b) {  /* a, b: absolute stack indexes */
  if (lua_isnil(L, 2)) return lua_compare(L, a, b, LUA_OPLT);
  lua_pushvalue(L, 2);
  lua_pushvalue(L, a);
  lua_pushvalue(L, b);
  lua_call(L, 2, 1);
  int r = lua_toboolean(L, -1);
  lua_pop(L, 1);
  return r;
}

static void sift (lua_State *L, tp_sandbox *sb, lua_Integer root, lua_Integer n,
                  lua_Integer *steps) {
  /* slots: element i lives at t[i]; a copy of the root travels down */
  for (;;) {
    lua_Integer child = 2 * root;
    if (child > n) break;
    poll(L, sb, ++*steps);
    lua_geti(L, 1, child);                       /* c */
    if (child < n) {
      lua_geti(L, 1, child + 1);                 /* c c+1 */
      int top = lua_gettop(L);
      if (sort_less(L, top - 1, top)) { lua_remove(L, -2); child++; }
      else lua_pop(L, 1);
    }
    lua_geti(L, 1, root);                        /* c r */
    int top = lua_gettop(L);
    if (!sort_less(L, top, top - 1)) { lua_pop(L, 2); break; }
    lua_seti(L, 1, child);                       /* t[child] = r; c */
    lua_seti(L, 1, root);                        /* t[root] = c */
    root = child;
  }
}

static int sb_sort (lua_State *L) {
  tp_sandbox *sb = tp__sandbox_of(L);
  check_table(L, 1, 1);
  lua_Integer n = luaL_len(L, 1);
  if (!lua_isnoneornil(L, 2)) luaL_checktype(L, 2, LUA_TFUNCTION);
  if (n > 1 && n < 1024) return orig_sort(L);
  if (lua_type(L, 2) == LUA_TFUNCTION && !lua_iscfunction(L, 2)) return orig_sort(L);
  luaL_argcheck(L, n < INT32_MAX, 1, "array too big");
  lua_settop(L, 2);
  luaL_checkstack(L, 8, "sort");
  lua_Integer steps = 0;
  for (lua_Integer i = n / 2; i >= 1; i--) sift(L, sb, i, n, &steps);
  for (lua_Integer last = n; last > 1; last--) {
    lua_geti(L, 1, 1);
    lua_geti(L, 1, last);
    lua_seti(L, 1, 1);
    lua_seti(L, 1, last);
    sift(L, sb, 1, last - 1, &steps);
  }
  return 0;
}

/* ---- coroutines: tool requests and time slices pass through ------------------------
** A script coroutine that yields because of the host (a time slice ended in the hook,
** or a tool call yielded a request tagged with tp__request_tag) makes its resumer
** yield the same way, up to the script's thread T and so to tp_run_step. When the host
** resumes T, the continuations below resume the coroutine again. The script never sees
** these yields.
*/
char tp__request_tag;

enum { MODE_RESUME, MODE_WRAP };

static lua_State *co_of (lua_State *L, int mode) {
  return mode == MODE_WRAP ? lua_tothread(L, lua_upvalueindex(1)) : lua_tothread(L, 1);
}

static int do_resume (lua_State *L, lua_State *co, int narg, int mode);

static int resume_k (lua_State *L, int status, lua_KContext ctx) {
  int mode = (int)ctx;
  lua_State *co = co_of(L, mode);
  int base = mode == MODE_WRAP ? 0 : 1;
  int narg = lua_gettop(L) - base;  /* what the host resumed us with */
  (void)status;
  if (!lua_checkstack(co, narg)) return luaL_error(L, "too many results to resume");
  lua_xmove(L, co, narg);
  return do_resume(L, co, narg, mode);
}

static int do_resume (lua_State *L, lua_State *co, int narg, int mode) {
  tp_sandbox *sb = tp__sandbox_of(L);
  int nres, status;
  for (;;) {
    if (sb->instr_limit || sb->instr_step_end)
      tp__sandbox_sethook(sb, co);  /* a period counted from now, not from its creation */
    atomic_store(&sb->running, co);
    if (atomic_load(&sb->kill) != TP_KILL_NONE || atomic_load(&sb->slice_over))
      lua_sethook(co, tp__sandbox_hook, LUA_MASKCOUNT, 1);  /* what the signal would do */
    status = lua_resume(co, L, narg, &nres);
    atomic_store(&sb->running, L);
    tp__sandbox_charge(sb, co);
    tp__sandbox_check(L, sb);
    if (status != LUA_YIELD) break;
    if (sb->hook_yielded) {      /* a time slice ended inside co */
      if (lua_isyieldable(L)) return lua_yieldk(L, 0, (lua_KContext)mode, resume_k);
      sb->hook_yielded = 0;      /* cannot pass it up: keep running */
      narg = 0;
      continue;
    }
    if (nres > 0 && lua_touserdata(co, -nres) == &tp__request_tag &&
        lua_type(co, -nres) == LUA_TLIGHTUSERDATA) {
      if (!lua_isyieldable(L)) {
        lua_pop(co, nres);
        return luaL_error(L, "%s", TP_MSG_CANNOT_WAIT);
      }
      if (!lua_checkstack(L, nres)) return luaL_error(L, "too many values in a tool request");
      lua_xmove(co, L, nres);
      return lua_yieldk(L, nres, (lua_KContext)mode, resume_k);
    }
    break;  /* the script's own yield */
  }
  if (status == LUA_OK || status == LUA_YIELD) {
    if (!lua_checkstack(L, nres + 1)) {
      lua_pop(co, nres);
      return luaL_error(L, "too many results to resume");
    }
    if (mode == MODE_RESUME) lua_pushboolean(L, 1);
    lua_xmove(co, L, nres);
    return nres + (mode == MODE_RESUME);
  }
  lua_xmove(co, L, 1);  /* the error object */
  if (mode == MODE_RESUME) {
    lua_pushboolean(L, 0);
    lua_insert(L, -2);
    return 2;
  }
  atomic_store(&sb->running, co);
  lua_closethread(co, L);   /* runs pending __close handlers, as Lua's wrap does */
  atomic_store(&sb->running, L);
  tp__sandbox_check(L, sb);
  lua_settop(co, 0);
  return lua_error(L);
}

static int co_status_ok (lua_State *L, lua_State *co) {  /* suspended? */
  if (L == co) return 0;
  switch (lua_status(co)) {
    case LUA_YIELD: return 1;
    case LUA_OK: {
      lua_Debug ar;
      if (lua_getstack(co, 0, &ar)) return 0;  /* normal: it resumed another */
      return lua_gettop(co) > 0;
    }
    default: return 0;
  }
}

static int sb_co_resume (lua_State *L) {
  lua_State *co = lua_tothread(L, 1);
  luaL_argexpected(L, co, 1, "coroutine");
  int narg = lua_gettop(L) - 1;
  if (!co_status_ok(L, co)) {
    lua_pushboolean(L, 0);
    if (lua_status(co) == LUA_OK && lua_gettop(co) == 0) lua_pushliteral(L, "cannot resume dead coroutine");
    else lua_pushliteral(L, "cannot resume non-suspended coroutine");
    return 2;
  }
  if (!lua_checkstack(co, narg)) {
    lua_pushboolean(L, 0);
    lua_pushliteral(L, "too many arguments to resume");
    return 2;
  }
  lua_xmove(L, co, narg);
  return do_resume(L, co, narg, MODE_RESUME);
}

static int wrap_call (lua_State *L) {
  lua_State *co = co_of(L, MODE_WRAP);
  int narg = lua_gettop(L);
  if (!co_status_ok(L, co)) {
    if (lua_status(co) == LUA_OK && lua_gettop(co) == 0)
      return luaL_error(L, "cannot resume dead coroutine");
    return luaL_error(L, "cannot resume non-suspended coroutine");
  }
  if (!lua_checkstack(co, narg)) return luaL_error(L, "too many arguments to resume");
  lua_xmove(L, co, narg);
  return do_resume(L, co, narg, MODE_WRAP);
}

static int sb_co_wrap (lua_State *L) {
  luaL_checktype(L, 1, LUA_TFUNCTION);
  lua_State *co = lua_newthread(L);
  lua_pushvalue(L, 1);
  lua_xmove(L, co, 1);
  lua_pushcclosure(L, wrap_call, 1);
  return 1;
}

static int sb_co_yield (lua_State *L) {
  tp_sandbox *sb = tp__sandbox_of(L);
  if (L == sb->T) return luaL_error(L, "attempt to yield from outside a coroutine");
  return lua_yield(L, lua_gettop(L));
}

static int sb_co_close (lua_State *L) {
  tp_sandbox *sb = tp__sandbox_of(L);
  lua_State *co = lua_tothread(L, 1);
  luaL_argexpected(L, co, 1, "coroutine");
  int st = lua_status(co);
  int dead_or_suspended = (st != LUA_OK && st != LUA_YIELD) ||
                          (st == LUA_OK && lua_gettop(co) == 0) || co_status_ok(L, co);
  if (!dead_or_suspended || co == L)
    return luaL_error(L, "cannot close a %s coroutine", co == L ? "running" : "normal");
  atomic_store(&sb->running, co);
  int status = lua_closethread(co, L);
  atomic_store(&sb->running, L);
  tp__sandbox_check(L, sb);
  if (status == LUA_OK) { lua_pushboolean(L, 1); return 1; }
  lua_pushboolean(L, 0);
  lua_xmove(co, L, 1);
  return 2;
}

static int sb_co_running (lua_State *L) {
  tp_sandbox *sb = tp__sandbox_of(L);
  lua_pushthread(L);
  lua_pushboolean(L, L == sb->T);
  return 2;
}

static int sb_co_isyieldable (lua_State *L) {
  tp_sandbox *sb = tp__sandbox_of(L);
  lua_State *co = lua_isnone(L, 1) ? L : lua_tothread(L, 1);
  luaL_argexpected(L, co, 1, "coroutine");
  lua_pushboolean(L, co != sb->T && lua_isyieldable(co));
  return 1;
}

/* ---- building the state ------------------------------------------------------------ */

typedef struct wrapper { const char *lib, *name; lua_CFunction fn; } wrapper;

static const wrapper wrappers[] = {
  { "_G", "print", sb_print },           { "_G", "tostring", sb_tostring },
  { "_G", "load", sb_load },             { "_G", "setmetatable", sb_setmetatable },
  { "_G", "rawset", sb_rawset },         { "_G", "collectgarbage", sb_collectgarbage },
  { "_G", "warn", sb_warn },             { "_G", "xpcall", sb_xpcall },
  { "string", "find", sb_find },         { "string", "format", sb_format },
  { "string", "rep", sb_rep },
  { "table", "concat", sb_concat },      { "table", "move", sb_move },
  { "table", "sort", sb_sort },
  { "coroutine", "resume", sb_co_resume }, { "coroutine", "wrap", sb_co_wrap },
  { "coroutine", "yield", sb_co_yield },   { "coroutine", "close", sb_co_close },
  { "coroutine", "running", sb_co_running },
  { "coroutine", "isyieldable", sb_co_isyieldable },
};

static lua_CFunction find_wrapper (const char *lib, const char *name) {
  for (size_t i = 0; i < sizeof wrappers / sizeof wrappers[0]; i++)
    if (strcmp(wrappers[i].lib, lib) == 0 && strcmp(wrappers[i].name, name) == 0)
      return wrappers[i].fn;
  return NULL;
}

/* The originals that wrappers call into; the same in every state, so read once. */
static pthread_once_t originals_once = PTHREAD_ONCE_INIT;
static int gc_aggressive;  /* TP_GC_AGGRESSIVE=1: collect all the time (test reruns) */

static lua_CFunction field_fn (lua_State *L, const char *lib, const char *name) {
  if (strcmp(lib, "_G") == 0) lua_pushglobaltable(L);
  else lua_getglobal(L, lib);
  lua_getfield(L, -1, name);
  lua_CFunction f = lua_tocfunction(L, -1);
  lua_pop(L, 2);
  return f;
}

typedef struct lib { const char *name; lua_CFunction open; } lib;
static const lib libs[] = {
  { "_G", luaopen_base }, { "string", luaopen_string }, { "table", luaopen_table },
  { "math", luaopen_math }, { "utf8", luaopen_utf8 }, { "coroutine", luaopen_coroutine },
  { "os", luaopen_os },
};
#define NLIBS (sizeof libs / sizeof libs[0])

/*
** What open_sandbox puts in each library table, read once from a plain state so that a
** sandbox does not open Lua's libraries only to copy a part of them (that was half the
** cost of a cold run). Lua's library functions are light C functions whose pointers are
** the same in every state, and the constants (math.pi, utf8.charpattern, _VERSION) are
** plain values. A value that is neither (math.random and math.randomseed share a
** per-state generator as an upvalue) is taken from its library, opened in the sandbox
** as before; only such libraries are opened.
*/
enum { V_NONE, V_CFUNC, V_INT, V_NUM, V_STR, V_FROM_LIB };
typedef struct slot {
  int lib, kind;           /* index in libs[]; V_* */
  lua_CFunction fn;        /* V_CFUNC; NULL for a WRAP entry without a wrapper */
  lua_Integer i;
  lua_Number n;
  char s[64];              /* V_STR, slen bytes (utf8.charpattern holds a NUL) */
  size_t slen;
} slot;
static slot slots[TP_ALLOWLIST_LEN];
static int lib_open[NLIBS], lib_size[NLIBS];

static void plan_slots (lua_State *L) {
  for (size_t k = 0; k < TP_ALLOWLIST_LEN; k++) {
    const tp_allow *a = &tp_allowlist[k];
    slot *sl = &slots[k];
    sl->lib = -1;
    sl->kind = V_NONE;
    if (a->name == NULL || (a->kind != TP_KEEP && a->kind != TP_WRAP)) continue;
    for (size_t i = 0; i < NLIBS; i++)
      if (strcmp(a->lib, libs[i].name) == 0) sl->lib = (int)i;
    if (sl->lib < 0) continue;
    lib_size[sl->lib]++;
    if (a->kind == TP_WRAP) {
      sl->kind = V_CFUNC;
      sl->fn = find_wrapper(a->lib, a->name);
      continue;
    }
    if (strcmp(a->lib, "_G") == 0) lua_pushglobaltable(L);
    else lua_getglobal(L, a->lib);
    lua_getfield(L, -1, a->name);
    size_t len;
    switch (lua_type(L, -1)) {
      case LUA_TNIL: sl->kind = V_NONE; lib_size[sl->lib]--; break;
      case LUA_TNUMBER:
        if (lua_isinteger(L, -1)) { sl->kind = V_INT; sl->i = lua_tointeger(L, -1); }
        else { sl->kind = V_NUM; sl->n = lua_tonumber(L, -1); }
        break;
      case LUA_TSTRING:
        lua_tolstring(L, -1, &len);
        if (len <= sizeof sl->s) {
          sl->kind = V_STR;
          sl->slen = len;
          memcpy(sl->s, lua_tostring(L, -1), len);
          break;
        }
        sl->kind = V_FROM_LIB;
        break;
      case LUA_TFUNCTION:
        if (lua_iscfunction(L, -1) && lua_getupvalue(L, -1, 1) == NULL) {
          sl->kind = V_CFUNC;
          sl->fn = lua_tocfunction(L, -1);
          break;
        }
        sl->kind = V_FROM_LIB;
        break;
      default: sl->kind = V_FROM_LIB; break;
    }
    lua_settop(L, 0);
    if (sl->kind == V_FROM_LIB) lib_open[sl->lib] = 1;
  }
}

static void originals_setup (void) {
  lua_State *L = luaL_newstate();
  if (L == NULL) abort();  /* at startup, with the host out of memory: nothing to do */
  luaL_openlibs(L);
  orig_load = field_fn(L, "_G", "load");
  orig_setmetatable = field_fn(L, "_G", "setmetatable");
  orig_rawset = field_fn(L, "_G", "rawset");
  orig_xpcall = field_fn(L, "_G", "xpcall");
  orig_format = field_fn(L, "string", "format");
  orig_rep = field_fn(L, "string", "rep");
  orig_find = field_fn(L, "string", "find");
  orig_sort = field_fn(L, "table", "sort");
  plan_slots(L);
  lua_close(L);
  const char *g = getenv("TP_GC_AGGRESSIVE");
  gc_aggressive = g != NULL && *g != '\0' && strcmp(g, "0") != 0;
}

static int readonly_newindex (lua_State *L) {
  return luaL_error(L, "library tables are read-only in the sandbox "
                       "(copy what you need into a local table)");
}

static int readonly_next (lua_State *L) {  /* upvalue 1: the real table */
  lua_settop(L, 2);
  if (lua_next(L, lua_upvalueindex(1))) return 2;
  lua_pushnil(L);
  return 1;
}

static int readonly_pairs (lua_State *L) {
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_pushcclosure(L, readonly_next, 1);
  lua_pushvalue(L, 1);
  lua_pushnil(L);
  return 3;
}

/* Replaces the table on top with a read-only proxy of it. */
static void make_readonly (lua_State *L) {
  lua_newtable(L);                      /* real proxy */
  lua_createtable(L, 0, 5);             /* real proxy mt */
  lua_pushvalue(L, -3);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, readonly_newindex);
  lua_setfield(L, -2, "__newindex");
  lua_pushvalue(L, -3);
  lua_pushcclosure(L, readonly_pairs, 1);
  lua_setfield(L, -2, "__pairs");
  lua_pushboolean(L, 0);
  lua_setfield(L, -2, "__metatable");
  lua_pushboolean(L, 1);
  lua_rawsetp(L, -2, &tp__readonly_key);
  lua_setmetatable(L, -2);              /* real proxy */
  lua_remove(L, -2);
}


/* Opens the allowed libraries into the fresh state. Runs in protected mode. */
static int open_sandbox (lua_State *L) {
  /* a fresh state holds only what is built here, so collecting now would find nothing */
  lua_gc(L, LUA_GCSTOP);
  /* the libraries that values must be taken from (see plan_slots) */
  for (size_t i = 0; i < NLIBS; i++) {
    if (!lib_open[i]) continue;
    luaL_requiref(L, libs[i].name, libs[i].open, 1);
    lua_pop(L, 1);
  }
  lua_pushglobaltable(L);
  int G = lua_gettop(L);
  /* the new globals, filled from the allowlist */
  lua_createtable(L, 0, lib_size[0] + (int)NLIBS + 2);
  int NG = lua_gettop(L);
  for (size_t i = 0; i < NLIBS; i++) {
    const char *name = libs[i].name;
    int is_base = i == 0;
    int src = 0;
    if (lib_open[i]) {
      if (is_base) src = G;
      else { lua_getfield(L, G, name); src = lua_gettop(L); }
    }
    int dst;
    if (is_base) dst = NG;
    else { lua_createtable(L, 0, lib_size[i]); dst = lua_gettop(L); }
    for (size_t k = 0; k < TP_ALLOWLIST_LEN; k++) {
      const slot *sl = &slots[k];
      if (sl->lib != (int)i || sl->kind == V_NONE) continue;
      const tp_allow *a = &tp_allowlist[k];
      switch (sl->kind) {
        case V_CFUNC:
          if (sl->fn == NULL) return luaL_error(L, "allowlist: no wrapper for %s.%s", name, a->name);
          lua_pushcfunction(L, sl->fn);
          break;
        case V_INT: lua_pushinteger(L, sl->i); break;
        case V_NUM: lua_pushnumber(L, sl->n); break;
        case V_STR: lua_pushlstring(L, sl->s, sl->slen); break;
        default: lua_getfield(L, src, a->name); break;
      }
      lua_setfield(L, dst, a->name);
    }
    if (!is_base) {
      if (strcmp(name, "string") == 0) {  /* methods on strings use the filtered table */
        lua_pushliteral(L, "");
        lua_createtable(L, 0, 2);
        lua_pushvalue(L, dst);
        lua_setfield(L, -2, "__index");
        lua_pushboolean(L, 0);
        lua_setfield(L, -2, "__metatable");
        lua_setmetatable(L, -2);
        lua_pop(L, 1);
      }
      make_readonly(L);
      lua_setfield(L, NG, name);
      if (src) lua_pop(L, 1);
    }
  }
  tp_json_open(L);
  make_readonly(L);
  lua_setfield(L, NG, "json");
  tp_json_set_decode_cap(L, tp__sandbox_of(L)->mem_cap / 16);
  lua_pushvalue(L, NG);
  tp__tools_open(L);  /* tools, parallel */
  lua_pop(L, 1);
  lua_pushvalue(L, NG);
  lua_setfield(L, NG, "_G");
  /* swap the globals: the registry's global table becomes the filtered one */
  lua_pushvalue(L, NG);
  lua_rawseti(L, LUA_REGISTRYINDEX, LUA_RIDX_GLOBALS);
  /* drop what luaL_requiref left in package.loaded */
  lua_pushnil(L);
  lua_setfield(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
  /* display numbers for tostring */
  lua_newtable(L);
  lua_createtable(L, 0, 1);
  lua_pushliteral(L, "k");
  lua_setfield(L, -2, "__mode");
  lua_setmetatable(L, -2);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &ids_key);
  /* the script's thread, anchored in the registry */
  tp__sandbox_of(L)->T = lua_newthread(L);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &thread_key);
  lua_gc(L, LUA_GCRESTART);
  return 0;
}

tp_sandbox *tp__sandbox_create (const tp_limits *limits) {
  tp_sandbox *sb = calloc(1, sizeof *sb);
  if (sb == NULL) return NULL;
  pthread_once(&originals_once, originals_setup);
  sb->limits = *limits;
  sb->mem_cap = limits->memory;
  sb->out_cap = limits->output;
  sb->host_cap = limits->memory;
  sb->instr_limit = limits->instructions;
  sb->meter.countdown = METER_STEPS;
  sb->meter.refill = meter_refill;
  sb->logs = json_array();
  if (sb->logs == NULL) { free(sb); return NULL; }
  lua_State *L = lua_newstate(sb_alloc, sb);
  if (L == NULL) { arena_free_all(&sb->arena); json_decref(sb->logs); free(sb); return NULL; }
  *(tp_meter **)lua_getextraspace(L) = &sb->meter;
  sb->L = L;
  atomic_store(&sb->running, L);
  lua_setwarnf(L, NULL, NULL);
  if (gc_aggressive) lua_gc(L, LUA_GCINC, 0, 1000, 0);  /* no pause, big steps */
  lua_pushcfunction(L, open_sandbox);
  if (lua_pcall(L, 0, 0, 0) != LUA_OK) goto fail;  /* out of memory, or below the cap */
  return sb;
fail:
  lua_close(L);
  arena_free_all(&sb->arena);
  json_decref(sb->logs);
  free(sb);
  return NULL;
}

void tp__sandbox_destroy (tp_sandbox *sb) {
  if (sb == NULL) return;
  atomic_store(&sb->running, NULL);
  if (sb->L) lua_close(sb->L);
  arena_free_all(&sb->arena);
  json_decref(sb->logs);
  free(sb);
}

/* A new script thread for the next run of a session; the old one is let go. */
static int new_thread (lua_State *L) {
  tp__sandbox_of(L)->T = lua_newthread(L);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &thread_key);
  return 0;
}

int tp__sandbox_reset (tp_sandbox *sb) {
  json_t *logs = json_array();
  if (logs == NULL) return -1;
  atomic_store(&sb->kill, TP_KILL_NONE);
  atomic_store(&sb->slice_over, 0);
  sb->hook_yielded = 0;
  sb->fail_armed = 0;
  sb->kill_note[0] = '\0';
  lua_sethook(sb->L, NULL, 0, 0);
  lua_pushcfunction(sb->L, new_thread);
  if (lua_pcall(sb->L, 0, 0, 0) != LUA_OK) {
    lua_pop(sb->L, 1);
    json_decref(logs);
    return -1;
  }
  json_decref(sb->logs);
  sb->logs = logs;
  sb->out_used = 0;
  sb->out_truncated = 0;
  sb->instr_used = 0;
  sb->instr_step_end = 0;
  sb->mem_peak = sb->mem_used;
  sb->meter.countdown = METER_STEPS;
  atomic_store(&sb->running, sb->L);
  return 0;
}

/* Host code's lines (a tool's ctx.log): invalid UTF-8 becomes U+FFFD byte by byte (the
** text comes from trusted code, so being exact matters less than never failing). */
void tp__sandbox_log_host (tp_sandbox *sb, const char *s, size_t len) {
  if (sb == NULL || sb->out_truncated) return;
  size_t room = sb->out_cap ? (sb->out_used < sb->out_cap ? sb->out_cap - sb->out_used : 0)
                            : len;
  int over = len > room;
  size_t take = over ? room : len;
  while (over && take > 0 && ((unsigned char)s[take] & 0xc0) == 0x80) take--;
  json_t *str = tp_json_string_lossy(s, take, NULL);
  if (str != NULL && json_array_append_new(sb->logs, str) == 0) sb->out_used += take;
  if (over) {
    char note[96];
    snprintf(note, sizeof note, "...[output truncated: the %zu-byte output limit was reached]",
             sb->out_cap);
    json_array_append_new(sb->logs, json_string(note));
    sb->out_truncated = 1;
  }
}
