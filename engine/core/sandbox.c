/*
** sandbox.c: the Lua state a script runs in. Its allocator enforces the memory cap,
** its library is exactly sandbox/allowlist.h, its hook enforces the verdicts of the
** limits, and its coroutine library lets tool requests and time slices pass through a
** script's own coroutines to the host.
*/
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdarg.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "lauxlib.h"
#include "lualib.h"

#include "lstate.h"   /* hookcount: how much of its count-hook period a thread has run */
#include "lgc.h"      /* isdead, for setuvalue (close_at_once) */

#include "sandbox.h"
#include "warnings.h"   /* tp__sb_ipairs, for the allowlist */
#include "json.h"

_Static_assert(LUA_EXTRASPACE == sizeof(void *), "lua_patch.h assumes one pointer");

#define POLL_EVERY 4096      /* C loops check the verdict this often */

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
    char *c;
    if (a->pool && a->pool->chunks) {
      c = a->pool->chunks;
      a->pool->chunks = *(void **)c;
      a->pool->n--;
    }
    else if ((c = malloc(ARENA_CHUNK)) == NULL) return NULL;
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

/* The larger blocks come from malloc. With the arena on, each has a header that links
** it into the arena's list, so that a sandbox can let go of all its memory at once
** without visiting its objects (tp__sandbox_destroy); 16 bytes keep the alignment. */
typedef struct tp_big { struct tp_big *prev, *next; } tp_big;
_Static_assert(sizeof(tp_big) == 16, "the header of a large block keeps 16-byte alignment");

static void big_link (tp_arena *a, tp_big *h) {
  h->prev = NULL;
  h->next = a->big;
  if (a->big) a->big->prev = h;
  a->big = h;
}

static void big_unlink (tp_arena *a, tp_big *h) {
  if (h->prev) h->prev->next = h->next;
  else a->big = h->next;
  if (h->next) h->next->prev = h->prev;
}

static void *big_alloc (tp_arena *a, size_t n) {
  if (!ARENA_ON) return malloc(n);
  tp_big *h = malloc(sizeof *h + n);
  if (h == NULL) return NULL;
  big_link(a, h);
  return h + 1;
}

/* A large block of a pool's sandbox as it was built (marked so by snap_take) is never
** freed or moved while the sandbox is in use: snap_restore writes its bytes back. */
static tp_big snap_mark;
#define IS_SNAP(h) ((h)->next == &snap_mark)

static void big_free (tp_arena *a, void *p) {
  if (!ARENA_ON) { free(p); return; }
  tp_big *h = (tp_big *)p - 1;
  if (IS_SNAP(h)) return;
  big_unlink(a, h);
  free(h);
}

static void *big_realloc (tp_arena *a, void *p, size_t osize, size_t n) {
  if (!ARENA_ON) return realloc(p, n);
  tp_big *h = (tp_big *)p - 1;
  if (IS_SNAP(h)) {
    void *q = big_alloc(a, n);
    if (q != NULL) memcpy(q, p, osize < n ? osize : n);
    return q;
  }
  big_unlink(a, h);
  tp_big *nh = realloc(h, sizeof *h + n);
  if (nh == NULL) { big_link(a, h); return NULL; }
  big_link(a, nh);
  return nh + 1;
}

static void big_free_all (tp_arena *a) {
  for (tp_big *h = a->big, *next; h != NULL; h = next) {
    next = h->next;
    free(h);
  }
  a->big = NULL;
}

/* Gives chunk c back to pool (NULL: none), or to malloc when the pool is full. */
static void chunk_put (tp_arena_pool *pool, void *c) {
  if (pool && pool->n < pool->max) {
    *(void **)c = pool->chunks;
    pool->chunks = c;
    pool->n++;
  }
  else free(c);
}

static void arena_free_all (tp_arena *a) {
  tp_arena_pool *pool = a->pool;
  for (void *c = a->chunks, *next; c != NULL; c = next) {
    next = *(void **)c;
    chunk_put(pool, c);
  }
  big_free_all(a);  /* none left after lua_close; all of them when it was skipped */
  memset(a, 0, sizeof *a);
  a->pool = pool;
}

static void sandbox_free (tp_sandbox *sb);

void tp__arena_pool_drain (tp_arena_pool *p) {
  while (p->idle) {
    tp_sandbox *sb = p->idle;
    p->idle = sb->next_idle;
    sandbox_free(sb);
  }
  for (void *c = p->chunks, *next; c != NULL; c = next) {
    next = *(void **)c;
    free(c);
  }
  p->chunks = NULL;
  p->n = 0;
}

static int is_small (size_t n) { return ARENA_ON && n <= TP_ARENA_SMALL; }

/* free/realloc of a block of osize bytes (0 when ptr is NULL) by size class. */
static void block_free (tp_arena *a, void *ptr, size_t osize) {
  if (ptr == NULL) return;
  if (is_small(osize)) arena_put(a, ptr, osize);
  else big_free(a, ptr);
}

static void *block_realloc (tp_arena *a, void *ptr, size_t osize, size_t nsize) {
  if (ptr != NULL && !is_small(osize) && !is_small(nsize)) return big_realloc(a, ptr, osize, nsize);
  if (ptr != NULL && is_small(osize) && is_small(nsize) &&
      (osize + 15) >> 4 == (nsize + 15) >> 4)
    return ptr;  /* same size class */
  void *p = is_small(nsize) ? arena_get(a, nsize) : big_alloc(a, nsize);
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

/* ---- the host budget (tp__host_charge: verdict.c) --------------------------------- */

static int budget_charge (void *ud, size_t n) { return tp__host_charge(ud, n); }
static void budget_refund (void *ud, size_t n) { tp__host_refund(ud, n); }
static int budget_stopped (void *ud) {
  return atomic_load(&((tp_sandbox *)ud)->kill) != TP_KILL_NONE;
}
/* A refused charge's own words replace the budget's generic note. NULL: the host is out
** of memory (an allocation failed), the same verdict as in sb_alloc. */
static void budget_note (void *ud, const char *what) {
  tp_sandbox *sb = ud;
  if (what == NULL) {
    tp__sandbox_kill_note(sb, TP_KILL_MEMORY, "the host ran out of memory while converting "
                          "the script's data to or from JSON");
    return;
  }
  if (atomic_load(&sb->kill) == TP_KILL_MEMORY)
    snprintf(sb->kill_note, sizeof sb->kill_note, "%s", what);
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
** No other thread may touch a running Lua state, so a limit is enforced by a signal to
** the run's own thread, whose handler sets the hook exactly as lua.c does on Ctrl-C.
** Two senders: the stepping thread's own timer (tp__step_timer_arm), which the kernel
** fires at that thread, and the engine's watchdog thread (plugin handlers' deadlines,
** and steps whose thread could not get a timer). The handler does only async-signal-safe
** work: lock-free atomics, clock_gettime, timer_settime, and lua_sethook (made for this,
** lua.c calls it from its SIGINT handler). SIGURG by default, ignored by default so a
** stray one harms nothing; tp_set_signal picks another before the first step. A handler
** that was installed before ours is chained for signals not meant for a sandbox.
*/
static int signo = SIGURG;
static int signal_state;      /* 0: not installed, 1: installed, -1: sigaction failed */
static atomic_int signal_done; /* signal_state is 1: the fast path of tp__signal_install */
static pthread_mutex_t signal_mu = PTHREAD_MUTEX_INITIALIZER;
static struct sigaction old_action;
static __thread tp_sandbox *volatile active __attribute__((tls_model("initial-exec")));

/* The plugin handler's coroutine running on this thread, if any (host.c). */
static __thread tp_host_target *volatile host_target __attribute__((tls_model("initial-exec")));

tp_host_target *tp__signal_host_target (tp_host_target *t) {
  tp_host_target *old = host_target;
  atomic_signal_fence(memory_order_seq_cst);  /* *t is complete before the handler sees it */
  host_target = t;
  atomic_signal_fence(memory_order_seq_cst);
  return old;
}

/* This thread's step timer: created at its first timed step, deleted when it exits. */
#define REFIRE_NS 2000000u  /* while a verdict waits for the script to stop */
static __thread timer_t thread_timer __attribute__((tls_model("initial-exec")));
static __thread int thread_timer_state __attribute__((tls_model("initial-exec")));
static __thread tp_step_clock *volatile armed __attribute__((tls_model("initial-exec")));
static __thread uint64_t timer_at __attribute__((tls_model("initial-exec"))); /* 0: stopped */
static __thread int timer_late __attribute__((tls_model("initial-exec"))); /* timer_at is a
                           ** step's TP_STEP_LATE_NS backstop: the next step arms anew */
static pthread_key_t timer_key;
static pthread_once_t timer_key_once = PTHREAD_ONCE_INIT;
static int timer_key_ok;

static void timer_key_dtor (void *p) {
  (void)p;  /* thread-local storage is still there while key destructors run */
  if (thread_timer_state == 1) timer_delete(thread_timer);
  thread_timer_state = 0;
}

static void timer_key_setup (void) {
  timer_key_ok = pthread_key_create(&timer_key, timer_key_dtor) == 0;
}

static int timer_get (void) {
  if (thread_timer_state == 0) {
    struct sigevent sev;
    pthread_once(&timer_key_once, timer_key_setup);
    memset(&sev, 0, sizeof sev);
    sev.sigev_notify = SIGEV_THREAD_ID;
    sev.sigev_signo = signo;
    sev._sigev_un._tid = (pid_t)syscall(SYS_gettid);
    if (!timer_key_ok || timer_create(CLOCK_MONOTONIC, &sev, &thread_timer) != 0)
      thread_timer_state = -1;  /* e.g. RLIMIT_SIGPENDING: the watchdog serves instead */
    else if (pthread_setspecific(timer_key, &thread_timer_state) != 0) {
      timer_delete(thread_timer);
      thread_timer_state = -1;
    }
    else thread_timer_state = 1;
  }
  return thread_timer_state == 1 ? 0 : -1;
}

/* Arms the thread's timer to fire once at at_ns (CLOCK_MONOTONIC); 0 stops it. */
static void timer_set (uint64_t at_ns) {
  struct itimerspec its;
  memset(&its, 0, sizeof its);
  its.it_value.tv_sec = (time_t)(at_ns / 1000000000u);
  its.it_value.tv_nsec = (long)(at_ns % 1000000000u);
  timer_at = at_ns;
  timer_late = 0;
  timer_settime(thread_timer, TIMER_ABSTIME, &its, NULL);
}

/* Arms the timer at at_ns unless it fires at or before then already: an early fire only
** makes the handler look again, and a step saves a system call (about 1 us here). */
static void timer_set_before (uint64_t at_ns) {
  if (at_ns && (timer_at == 0 || at_ns < timer_at)) timer_set(at_ns);
}

/* When c's next check is due, 0 for none, given the time and the thread's CPU clock: the earliest deadline, the time the hook takes
** over the step's end, the CPU limit reckoned as if the thread kept the CPU from now on
** (checked again when the time comes). The step's end itself is the hook's: the slice
** can end only where the hook runs anyway. */
static uint64_t clock_next (const tp_step_clock *c, uint64_t now, uint64_t cpu) {
  uint64_t next = c->deadline_ns;
  if (c->poll_at_ns && (next == 0 || c->poll_at_ns < next)) next = c->poll_at_ns;
  if (c->handed && c->step_end_ns) {  /* the backstop of a hand-over, then every REFIRE_NS */
    uint64_t at = c->step_end_ns + TP_STEP_LATE_NS;
    if (now >= at) at = now + REFIRE_NS;
    if (next == 0 || at < next) next = at;
  }
  if (c->cpu_end_ns) {
    uint64_t at = now + (c->cpu_end_ns > cpu ? c->cpu_end_ns - cpu : 0);
    if (next == 0 || at < next) next = at;
  }
  return next;
}

/* The timer fired for c: records what has passed, or hands the last stretch of the
** step to the hook (poll_end_ns). A hand-over can be lost (the VM clears the mark of the
** frame it runs by a hook mask it read before the signal came), so the timer comes back
** TP_STEP_LATE_NS after the step's end, and ends the step then if it still runs. While a verdict is pending the timer fires again every
** REFIRE_NS (the hook that raises it may have been replaced, or the script is in host
** code); otherwise it is re-armed at the next check (the CPU limit comes later when the
** thread was off the CPU). Returns 1 when the running thread needs its hook set now. */
static int clock_fire (tp_step_clock *c) {
  tp_sandbox *sb = c->sb;
  uint64_t now = tp__now_ns();
  int expected = TP_KILL_NONE, hook = 0;
  if (c->deadline_ns && now >= c->deadline_ns)
    atomic_compare_exchange_strong(&sb->kill, &expected, TP_KILL_TIME);
  else if (c->cpu_end_ns && tp__thread_cpu_ns() >= c->cpu_end_ns)
    atomic_compare_exchange_strong(&sb->kill, &expected, TP_KILL_CPU);
  if (c->step_end_ns && now >= c->step_end_ns) atomic_store(&sb->slice_over, 1);
  if (c->poll_at_ns && now >= c->poll_at_ns) {
    c->poll_at_ns = 0;
    c->handed = 1;
    atomic_store(&sb->poll_end_ns, c->step_end_ns);
    hook = 1;
  }
  if (atomic_load(&sb->kill) != TP_KILL_NONE) {
    timer_set(now + REFIRE_NS);
    return 1;
  }
  c->wake_ns = clock_next(c, now, c->cpu_end_ns ? tp__thread_cpu_ns() : 0);
  timer_set(c->wake_ns);
  timer_late = c->handed;
  return hook || atomic_load(&sb->slice_over);
}

static void set_stop_hook (tp_sandbox *sb, int always) {
  if (always || atomic_load(&sb->kill) != TP_KILL_NONE || atomic_load(&sb->slice_over)) {
    lua_State *r = atomic_load(&sb->running);
    if (r) tp__sandbox_count_hook(r, 1);
  }
}

static void on_signal (int sig, siginfo_t *info, void *uc) {
  int saved_errno = errno;
  tp_host_target *ht = host_target;
  tp_step_clock *c = armed;
  tp_sandbox *sb = active;
  if (ht != NULL && (atomic_load(&ht->expired) || tp__now_ns() >= ht->deadline_ns)) {
    atomic_store(&ht->expired, 1);  /* clock_gettime is async-signal-safe */
    lua_sethook(ht->co, ht->hook, LUA_MASKCOUNT, 1);
  }
  else {
    int hook = c != NULL && clock_fire(c);
    if (sb != NULL) set_stop_hook(sb, hook && c->sb == sb);
    else if (c == NULL) {
      /* the timer left armed by the last step (see tp__step_timer_disarm) stops here */
      if (info != NULL && info->si_code == SI_TIMER && thread_timer_state == 1 && timer_at)
        timer_set(0);
      if (old_action.sa_flags & SA_SIGINFO) {
        if (old_action.sa_sigaction) old_action.sa_sigaction(sig, info, uc);
      }
      else if (old_action.sa_handler != SIG_DFL && old_action.sa_handler != SIG_IGN &&
               old_action.sa_handler != NULL)
        old_action.sa_handler(sig);
    }
  }
  errno = saved_errno;
}

int tp_set_signal (int sig) {
  if (sig <= 0 || sig >= NSIG || sig == SIGKILL || sig == SIGSTOP) return TP_EINVAL;
  int rc = TP_OK;
  pthread_mutex_lock(&signal_mu);
  if (signal_state != 0 && sig != signo) rc = TP_ESTATE;
  else signo = sig;
  pthread_mutex_unlock(&signal_mu);
  return rc;
}

int tp_get_signal (void) {
  pthread_mutex_lock(&signal_mu);
  int sig = signo;
  pthread_mutex_unlock(&signal_mu);
  return sig;
}

int tp__signal_install (void) {
  if (atomic_load_explicit(&signal_done, memory_order_acquire)) return 0;
  pthread_mutex_lock(&signal_mu);
  if (signal_state == 0) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_signal;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    signal_state = sigaction(signo, &sa, &old_action) == 0 ? 1 : -1;
    if (signal_state == 1) atomic_store_explicit(&signal_done, 1, memory_order_release);
  }
  int rc = signal_state == 1 ? 0 : -1;
  pthread_mutex_unlock(&signal_mu);
  return rc;
}

void tp__signal_interrupt (pthread_t thread) {
  pthread_kill(thread, signo);
}

int tp__step_timer_arm (tp_step_clock *c) {
  if (timer_get() != 0) return -1;
  c->prev = armed;
  c->handed = 0;
  c->wake_ns = clock_next(c, c->start_ns, c->cpu_start_ns);
  atomic_signal_fence(memory_order_seq_cst);  /* c is complete before the handler sees it */
  armed = c;
  atomic_signal_fence(memory_order_seq_cst);
  /* a backstop left by the last step would fire early in this one: a system call now
  ** costs less than the signal */
  if (timer_late && c->wake_ns) {
    timer_late = 0;
    timer_set(c->wake_ns);
  }
  else timer_set_before(c->wake_ns);
  return 0;
}

/* The timer is left armed: the next step most likely needs it at the same time or
** later, and then needs no system call. Should it fire with no step armed, the handler
** stops it. */
void tp__step_timer_disarm (tp_step_clock *c) {
  tp_step_clock *prev = c->prev;
  atomic_signal_fence(memory_order_seq_cst);
  armed = prev;
  atomic_signal_fence(memory_order_seq_cst);
  if (prev) timer_set_before(prev->wake_ns ? prev->wake_ns : 0);
}

void tp__step_timer_stop (void) {
  if (thread_timer_state == 1 && armed == NULL && timer_at) timer_set(0);
}

/* When the library is unloaded (a Lua host closing its state dlcloses the module) or
** the process exits: nothing may call into its code afterwards. This thread's timer is
** deleted, the key's destructor dropped (other threads' timers then stay until the
** process ends; should one fire, it finds the signal's previous action) and the
** previous action put back. */
__attribute__((destructor)) static void signal_unload (void) {
  if (thread_timer_state == 1) timer_delete(thread_timer);
  thread_timer_state = 0;
  if (timer_key_ok) pthread_key_delete(timer_key);
  timer_key_ok = 0;
  atomic_store(&signal_done, 0);
  if (signal_state == 1) sigaction(signo, &old_action, NULL);
  signal_state = 0;
}

void tp__sandbox_enter (tp_sandbox *sb) {
  atomic_signal_fence(memory_order_seq_cst);
  active = sb;
  atomic_signal_fence(memory_order_seq_cst);
  /* A verdict, slice end or hand-over to the ticks that the timer recorded before now,
  ** when the handler had no sandbox to set the hook in, is not lost. */
  tp__sandbox_tick_arm(sb);
  set_stop_hook(sb, 0);
}

void tp__sandbox_leave (void) {
  atomic_signal_fence(memory_order_seq_cst);
  active = NULL;
  atomic_signal_fence(memory_order_seq_cst);
}

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
      if (lua_rawgetp(L, LUA_REGISTRYINDEX, &ids_key) != LUA_TTABLE) {
        lua_pop(L, 1);  /* made at the first value shown */
        lua_newtable(L);
        lua_createtable(L, 0, 1);
        lua_pushliteral(L, "k");
        lua_setfield(L, -2, "__mode");
        lua_setmetatable(L, -2);
        lua_pushvalue(L, -1);
        lua_rawsetp(L, LUA_REGISTRYINDEX, &ids_key);
      }
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

/*
** What a log entry costs. Against the output limit: its bytes, and at least LOG_MIN_BYTES,
** since even an empty entry (print() or print("")) is a string node in the host's logs
** array; a flood of empty prints ends with limit.output like any other. Against the
** host budget: what it takes in host memory, a jansson string (a 32-byte node and a
** copy of the text, each a malloc block) and its slot in the array (growing by
** doubling): LOG_NODE_COST bytes plus the text.
*/
#define LOG_MIN_BYTES 16
#define LOG_NODE_COST 96

static size_t log_cost (size_t len) { return len < LOG_MIN_BYTES ? LOG_MIN_BYTES : len; }

/* Appends str (stolen) to the logs, charged to the host budget; -1 past the budget (the
** verdict limit.memory is recorded) or when out of memory. */
static int log_append (tp_sandbox *sb, json_t *str) {
  if (str == NULL) return -1;
  size_t host = LOG_NODE_COST + json_string_length(str);
  if (tp__host_charge(sb, host) != 0) { json_decref(str); return -1; }
  if (json_array_append_new(sb->logs, str) != 0) { tp__host_refund(sb, host); return -1; }
  sb->logs_host += host;
  return 0;
}

/* Appends bytes to the logs, replacing invalid UTF-8 by U+FFFD so the envelope stays
** valid JSON; the output cap (each entry costing log_cost) ends the run with
** limit.output. O(len) host work, len capped by the output limit's room. */
static void log_line (lua_State *L, tp_sandbox *sb, const char *s, size_t len) {
  size_t room = sb->out_cap ? (sb->out_used < sb->out_cap ? sb->out_cap - sb->out_used : 0)
                            : SIZE_MAX;
  int over = log_cost(len) > room;
  size_t take = len < room ? len : room;
  char note[96];
  snprintf(note, sizeof note, "...[output truncated: the %zu-byte output limit was reached]",
           sb->out_cap);
  if (log_append(sb, tp__json_string_lossy(s, take, over ? note : NULL)) != 0) {
    tp__sandbox_kill(sb, TP_KILL_MEMORY);
    tp__sandbox_check(L, sb);
  }
  sb->out_used += over ? room : log_cost(len);
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

static lua_CFunction orig_setmetatable, orig_rawset, orig_xpcall, orig_format, orig_rep,
                     orig_find, orig_sort;

/* The arithmetic metamethods of Lua's string metatable (lstrlib.c), which coerce
** numeric strings: "10" + 1 == 11. The sandbox's string metatable keeps them. */
static const char *const string_arith[] = { "__add", "__sub", "__mul", "__mod", "__pow",
  "__div", "__idiv", "__unm" };
#define NSTRING_ARITH (sizeof string_arith / sizeof string_arith[0])
static lua_CFunction orig_string_arith[NSTRING_ARITH];

/*
** load. Lua's parser is not linear in its input: a chain of `x or x or ...` or of
** `elseif`s patches a jump list that grows with the chain, and 1 MiB of such text took
** 60 s to compile here. So the parser is fed LOAD_PIECE bytes at a time and the reader
** polls the run's verdict (and, for the script itself, a deadline) between pieces: the
** work between two polls is bounded by what 64 bytes of source can cost (~4 ms for a
** 1 MiB `or` chain). A reader function's pieces count against the source limit, like
** a string's length. Otherwise it is Lua's load: text only, same arguments, results
** and messages.
*/
#define LOAD_PIECE 64
#define LOAD_RESERVED 5   /* stack slot anchoring the reader function's last piece */

typedef struct load_poll {
  lua_Reader inner;
  void *inner_ud;
  const char *cur;
  size_t left;
  tp_sandbox *sb;
  uint64_t deadline_ns;
} load_poll;

static const char *poll_reader (lua_State *L, void *ud, size_t *size) {
  load_poll *lp = ud;
  if (lp->left == 0) {
    lp->cur = lp->inner(L, lp->inner_ud, &lp->left);
    if (lp->cur == NULL || lp->left == 0) { lp->left = 0; *size = 0; return NULL; }
  }
  if (lp->deadline_ns && tp__now_ns() >= lp->deadline_ns) {
    int expected = TP_KILL_NONE;
    atomic_compare_exchange_strong(&lp->sb->kill, &expected, TP_KILL_TIME);
  }
  tp__sandbox_check(L, lp->sb);  /* raises the verdict: lua_load returns it as an error */
  size_t n = lp->left < LOAD_PIECE ? lp->left : LOAD_PIECE;
  const char *p = lp->cur;
  lp->cur += n;
  lp->left -= n;
  *size = n;
  return p;
}

int tp__sandbox_load (tp_sandbox *sb, lua_State *L, lua_Reader reader, void *ud,
                      const char *name, uint64_t deadline_ns) {
  load_poll lp = { reader, ud, NULL, 0, sb, deadline_ns };
  return lua_load(L, poll_reader, &lp, name, "t");
}

typedef struct load_text { const char *s; size_t len; } load_text;

static const char *text_reader (lua_State *L, void *ud, size_t *size) {
  load_text *t = ud;
  (void)L;
  *size = t->len;
  t->len = 0;
  return *size ? t->s : NULL;
}

typedef struct load_fn { size_t total, cap; } load_fn;

static const char *function_reader (lua_State *L, void *ud, size_t *size) {
  load_fn *f = ud;
  luaL_checkstack(L, 2, "too many nested functions");
  lua_pushvalue(L, 1);
  lua_call(L, 0, 1);
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    *size = 0;
    return NULL;
  }
  if (!lua_isstring(L, -1)) luaL_error(L, "reader function must return a string");
  lua_replace(L, LOAD_RESERVED);
  const char *s = lua_tolstring(L, LOAD_RESERVED, size);
  f->total += *size;
  if (f->cap && f->total > f->cap) {  /* worded as for a string, without a position */
    lua_pushfstring(L, "chunk of more than %I bytes is over the %I-byte source limit",
                    (LUAI_UACINT)f->cap, (LUAI_UACINT)f->cap);
    lua_error(L);
  }
  return s;
}

static int sb_load (lua_State *L) {
  tp_sandbox *sb = tp__sandbox_of(L);
  size_t len;
  const char *s = lua_tolstring(L, 1, &len);
  if (s != NULL && sb->limits.source && len > sb->limits.source) {
    luaL_pushfail(L);
    lua_pushfstring(L, "chunk of %I bytes is over the %I-byte source limit",
                    (LUAI_UACINT)len, (LUAI_UACINT)sb->limits.source);
    return 2;
  }
  const char *mode = luaL_optstring(L, 3, "t");
  if (strchr(mode, 'b') != NULL) {
    luaL_pushfail(L);
    lua_pushliteral(L, "attempt to load a binary chunk (the sandbox loads text only)");
    return 2;
  }
  int env = !lua_isnone(L, 4) ? 4 : 0;
  int status;
  if (s != NULL) {
    const char *chunkname = luaL_optstring(L, 2, s);
    load_text t = { s, len };
    status = tp__sandbox_load(sb, L, text_reader, &t, chunkname, 0);
  }
  else {
    const char *chunkname = luaL_optstring(L, 2, "=(load)");
    luaL_checktype(L, 1, LUA_TFUNCTION);
    lua_settop(L, LOAD_RESERVED);
    load_fn f = { 0, sb->limits.source };
    status = tp__sandbox_load(sb, L, function_reader, &f, chunkname, 0);
  }
  if (status == LUA_OK) {
    if (env != 0) {
      lua_pushvalue(L, env);
      if (!lua_setupvalue(L, -2, 1)) lua_pop(L, 1);
    }
    return 1;
  }
  luaL_pushfail(L);
  lua_insert(L, -2);
  return 2;
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
  if (tp__json_is_object(L, 1)) {  /* a JSON object's tag (json.c) gives way, as none would */
    luaL_argexpected(L, lua_isnoneornil(L, 2) || lua_type(L, 2) == LUA_TTABLE, 2, "nil or table");
    lua_settop(L, 2);
    lua_setmetatable(L, 1);
    return 1;
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

/*
** collectgarbage: Lua 5.4.7's options and return values (lbaselib.c). "collect", "step"
** and "count" act on the sandbox state's own collector; their work is bounded by the
** heap, which the memory cap bounds, and no finalizer can run in it (setmetatable
** refuses __gc). "stop", "restart", "incremental", "generational", "setpause" and
** "setstepmul" answer what Lua would (0, the previous mode or value) and "isrunning"
** reports what the script asked for, but the collector itself keeps the engine's
** settings: with it stopped, a state at its cap fails allocations that Lua makes
** without an emergency collection (luaL_Buffer's box), so a script that only meant to
** go faster would end with limit.memory; and TP_GC_AGGRESSIVE test reruns rely on the
** engine's settings.
*/
static char gcstate_key;  /* registry: the nominal tuning a script asked for */
typedef struct gc_nominal { int stopped, generational, pause, stepmul; } gc_nominal;

static gc_nominal *gc_state (lua_State *L) {
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &gcstate_key) == LUA_TUSERDATA) {
    gc_nominal *g = lua_touserdata(L, -1);
    lua_pop(L, 1);
    return g;
  }
  lua_pop(L, 1);
  gc_nominal *g = lua_newuserdatauv(L, sizeof *g, 0);
  g->stopped = 0;
  g->generational = 0;
  g->pause = 200;     /* LUAI_GCPAUSE */
  g->stepmul = 100;   /* LUAI_GCMUL */
  lua_rawsetp(L, LUA_REGISTRYINDEX, &gcstate_key);
  return g;
}

static int sb_collectgarbage (lua_State *L) {
  static const char *const opts[] = { "stop", "restart", "collect", "count", "step",
    "setpause", "setstepmul", "isrunning", "generational", "incremental", NULL };
  int o = luaL_checkoption(L, 1, "collect", opts);
  switch (o) {
    case 3: {  /* count */
      int kb = lua_gc(L, LUA_GCCOUNT), b = lua_gc(L, LUA_GCCOUNTB);
      lua_pushnumber(L, (lua_Number)kb + (lua_Number)b / 1024);
      return 1;
    }
    case 4: {  /* step */
      int step = (int)luaL_optinteger(L, 2, 0);
      lua_pushboolean(L, lua_gc(L, LUA_GCSTEP, step));
      return 1;
    }
    case 5: case 6: {  /* setpause, setstepmul */
      int p = (int)luaL_optinteger(L, 2, 0);
      gc_nominal *g = gc_state(L);
      int *slot = o == 5 ? &g->pause : &g->stepmul;
      lua_pushinteger(L, *slot);
      *slot = p;  /* Lua stores p (a 0 means the default only to lua_gc's GCINC) */
      return 1;
    }
    case 7: lua_pushboolean(L, !gc_state(L)->stopped); return 1;  /* isrunning */
    case 8: case 9: {  /* generational, incremental */
      gc_nominal *g = gc_state(L);
      lua_pushstring(L, g->generational ? "generational" : "incremental");
      g->generational = o == 8;
      return 1;
    }
    case 2: lua_pushinteger(L, lua_gc(L, LUA_GCCOLLECT)); return 1;
    default:  /* stop, restart */
      gc_state(L)->stopped = o == 0;
      lua_pushinteger(L, 0);
      return 1;
  }
}

/* ---- wrapped string functions --------------------------------------------------- */

/*
** string.format: %p is refused and %s shows tables without addresses. Arguments are
** converted in place, then Lua's own format does the rest. A format is one C call, and
** a long one is long work: 12 M "%%" took 90 ms here, 200 k "%99.99f" 150 ms, and %q
** of an 8 MiB string 410 ms. So a format of more than FMT_PIECE bytes or FMT_PIECE_CONV
** conversions, or with a %q of a string over FMT_QUOTE_PIECE bytes, is formatted in
** pieces by Lua's format, polling the verdict between pieces (each piece well under a
** millisecond). The arguments are checked first, in order, so an error names the
** argument it names in Lua.
*/
#define FMT_PIECE 4096
#define FMT_PIECE_CONV 64
#define FMT_QUOTE_PIECE 65536

static lua_CFunction orig_date;

/* The end of the conversion spec that starts at f (just after '%'): flags, width and
** precision as Lua's getformat spans them; *conv is its conversion character, '\0' at
** the end of the text (Lua reports it). */
static const char *fmt_spec (const char *f, const char *end, char *conv) {
  while (f < end && *f != '\0' && strchr("-+#0 123456789.", *f) != NULL) f++;
  *conv = f < end ? *f : '\0';
  return f < end ? f + 1 : end;
}

/* Checks the arguments of every conversion the way Lua's format will, from the first
** one on, stopping at a conversion it does not know (Lua's format reports that). Polls
** the verdict every FMT_SCAN bytes. */
#define FMT_SCAN 65536
static void fmt_check_args (lua_State *L, tp_sandbox *sb, const char *f, const char *end,
                            int top) {
  int arg = 1;
  const char *next_poll = f + FMT_SCAN;
  while (f < end) {
    if (f >= next_poll) { tp__sandbox_check(L, sb); next_poll = f + FMT_SCAN; }
    if (*f++ != '%') continue;
    if (f < end && *f == '%') { f++; continue; }
    if (++arg > top) luaL_argerror(L, arg, "no value");  /* Lua looks at this first */
    char c;
    const char *spec = f;
    f = fmt_spec(f, end, &c);
    if (c == '\0' || strchr("cdiouxXaAfFeEgGqs", c) == NULL) return;
    switch (c) {
      case 's':
        if (f - spec > 1 && lua_type(L, arg) == LUA_TSTRING) {
          size_t l;
          const char *v = lua_tolstring(L, arg, &l);
          luaL_argcheck(L, l == strlen(v), arg, "string contains zeros");
        }
        break;
      case 'q': {
        int t = lua_type(L, arg);
        if (f - spec == 1 && t != LUA_TSTRING && t != LUA_TNUMBER && t != LUA_TNIL &&
            t != LUA_TBOOLEAN)
          luaL_argerror(L, arg, "value has no literal form");
        break;
      }
      case 'a': case 'A': case 'f': case 'F': case 'e': case 'E': case 'g': case 'G':
        luaL_checknumber(L, arg);
        break;
      default:
        luaL_checkinteger(L, arg);
        break;
    }
  }
}

/* Adds %q of the long string at arg to b, FMT_QUOTE_PIECE bytes at a time. A control
** character is written \ddd when a digit follows it, so a piece never ends between a
** control character and a digit. */
static void fmt_quote_long (lua_State *L, tp_sandbox *sb, luaL_Buffer *b, int arg) {
  size_t len;
  const char *s = lua_tolstring(L, arg, &len);
  luaL_addchar(b, '"');
  for (size_t k = 0; k < len; ) {
    size_t e = len - k > FMT_QUOTE_PIECE ? k + FMT_QUOTE_PIECE : len;
    if (e < len && s[e] >= '0' && s[e] <= '9' && iscntrl((unsigned char)s[e - 1])) e++;
    lua_pushcfunction(L, orig_format);
    lua_pushliteral(L, "%q");
    lua_pushlstring(L, s + k, e - k);
    lua_call(L, 2, 1);
    size_t ql;
    const char *q = lua_tolstring(L, -1, &ql);
    lua_pushlstring(L, q + 1, ql - 2);  /* without its quotes */
    lua_remove(L, -2);
    luaL_addvalue(b);
    k = e;
    tp__sandbox_check(L, sb);
  }
  luaL_addchar(b, '"');
}

static int fmt_pieces (lua_State *L, tp_sandbox *sb) {
  size_t flen;
  const char *f = lua_tolstring(L, 1, &flen), *end = f + flen;
  int top = lua_gettop(L), arg = 2;
  fmt_check_args(L, sb, f, end, top);
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  const char *p = f;
  while (p < end) {
    const char *q = p;
    int first = arg, nconv = 0;
    while (q < end && q - p < FMT_PIECE && nconv < FMT_PIECE_CONV) {
      if (*q != '%') { q++; continue; }
      if (q + 1 < end && q[1] == '%') { q += 2; continue; }
      char c;
      const char *after = fmt_spec(q + 1, end, &c);
      if (c == 'q' && after == q + 2 && arg <= top && lua_type(L, arg) == LUA_TSTRING &&
          lua_rawlen(L, arg) > FMT_QUOTE_PIECE) {
        if (q > p) break;  /* the text before it first */
        fmt_quote_long(L, sb, &b, arg);
        first = ++arg;
        p = q = after;
        continue;
      }
      q = after;
      nconv++;
      if (c != '\0' && strchr("cdiouxXaAfFeEgGqs", c) != NULL) arg++;
      else { q = end; break; }  /* Lua's format reports it */
    }
    if (q == p) continue;
    int nargs = arg - first;
    if (nargs > top - first + 1) nargs = top - first + 1;
    luaL_checkstack(L, nargs + 3, "too many arguments to format");
    lua_pushcfunction(L, orig_format);
    lua_pushlstring(L, p, (size_t)(q - p));
    for (int i = 0; i < nargs; i++) lua_pushvalue(L, first + i);
    lua_call(L, nargs + 1, 1);
    luaL_addvalue(&b);
    p = q;
    tp__sandbox_check(L, sb);
  }
  luaL_pushresult(&b);
  return 1;
}

static int sb_format (lua_State *L) {
  size_t flen;
  const char *f = luaL_checklstring(L, 1, &flen);
  const char *end = f + flen;
  int arg = 1, top = lua_gettop(L), pieces = flen > FMT_PIECE;
  const char *next_poll = f + FMT_SCAN;
  while (f < end) {
    if (f >= next_poll) { tp__sandbox_check(L, tp__sandbox_of(L)); next_poll = f + FMT_SCAN; }
    if (*f++ != '%') continue;
    if (f < end && *f == '%') { f++; continue; }
    arg++;
    char c;
    const char *spec = f;
    f = fmt_spec(f, end, &c);
    if (c == 'p')
      return luaL_error(L, "bad argument #%d to 'format' ('%%p' shows memory addresses, "
                           "which the sandbox hides)", arg);
    if (c == 's' && arg <= top) {
      int t = lua_type(L, arg);
      if (t != LUA_TSTRING && t != LUA_TNUMBER) {
        if (t == LUA_TTABLE) tp__warn_table_text(L, arg);
        show(L, arg, NULL);
        lua_replace(L, arg);
      }
    }
    if (c == 'q' && f - spec == 1 && arg <= top && lua_type(L, arg) == LUA_TSTRING &&
        lua_rawlen(L, arg) > FMT_QUOTE_PIECE)
      pieces = 1;
    if (arg > FMT_PIECE_CONV + 1) pieces = 1;
  }
  if (pieces) return fmt_pieces(L, tp__sandbox_of(L));
  return orig_format(L);
}

/* string.rep: string.rep('', 1e18) would loop in C for ever, so an empty result is made
** at once. A result larger than the whole memory limit can never be built: it ends the
** run with limit.memory at once, as an allocation past the cap would. Past Lua's own
** limit (a result of INT_MAX bytes or more) it is Lua's catchable "resulting string too
** large" first, as in Lua: that error does not depend on the memory limit. */

/*
** os.date: each conversion is a strftime, so a long format is one long C call (2 M
** conversions took 420 ms here). A format of more than DATE_PIECE bytes is formatted
** DATE_PIECE bytes at a time by Lua's os.date, every piece with the same time,
** polling the verdict between pieces. Conversions are checked as Lua checks them
** (C99's list), so a bad one gets Lua's message.
*/
#define DATE_PIECE 2048

static size_t date_conv_len (const char *c, size_t left) {  /* c: after '%'; 0 if bad */
  static const char one[] = "aAbBcCdDeFgGhHIjmMnprRStTuUVwWxXyYzZ%";
  static const char two[] = "EcECExEXEyEYOdOeOHOIOmOMOSOuOUOVOwOWOy";
  if (left >= 1 && c[0] != '\0' && strchr(one, c[0]) != NULL) return 1;
  for (const char *o = two; left >= 2 && *o; o += 2)
    if (o[0] == c[0] && o[1] == c[1]) return 2;
  return 0;
}

static int sb_date (lua_State *L) {
  tp_sandbox *sb = tp__sandbox_of(L);
  size_t flen;
  const char *f = luaL_optlstring(L, 1, "%c", &flen);
  if (flen <= DATE_PIECE) return orig_date(L);
  lua_Integer t = lua_isnoneornil(L, 2) ? (lua_Integer)time(NULL) : luaL_checkinteger(L, 2);
  const char *end = f + flen, *p = f;
  int utc = *p == '!';
  p += utc;
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  while (p < end) {
    if (!utc && *p == '!') { luaL_addchar(&b, '!'); p++; continue; }  /* not a prefix */
    const char *q = p;
    /* a piece never ends close to the end, so none is "*t" */
    while (q < end && (q - p < DATE_PIECE || end - q < 16)) {
      if (*q != '%') { q++; continue; }
      size_t n = date_conv_len(q + 1, (size_t)(end - q - 1));
      if (n == 0)
        return luaL_argerror(L, 1, lua_pushfstring(L, "invalid conversion specifier '%%%s'",
                                                   q + 1));
      q += 1 + n;
    }
    lua_pushcfunction(L, orig_date);
    if (utc) lua_pushliteral(L, "!");
    lua_pushlstring(L, p, (size_t)(q - p));
    if (utc) lua_concat(L, 2);
    lua_pushinteger(L, t);
    lua_call(L, 2, 1);
    luaL_addvalue(&b);
    p = q;
    tp__sandbox_check(L, sb);
  }
  luaL_pushresult(&b);
  return 1;
}

/*
** utf8.len is linear, but 64 MiB is one 150 ms C call. Over UTF8_PIECE bytes, Lua's
** utf8.len counts the text a piece at a time, polling the verdict between pieces. A
** piece ends just before a byte that is not a continuation byte: when the text before
** it decoded, a character starts there, so counts and the position of an invalid byte
** are Lua's. Nine continuation bytes in a row are invalid UTF-8 (Lua decodes at most
** five after a lead byte), and Lua's count stops at them.
*/
#define UTF8_PIECE (1 << 20)
static lua_CFunction orig_utf8len;

static int sb_utf8len (lua_State *L) {
  tp_sandbox *sb = tp__sandbox_of(L);
  size_t len;
  const char *s = luaL_checklstring(L, 1, &len);
  if (len <= UTF8_PIECE) return orig_utf8len(L);
  lua_Integer i = luaL_optinteger(L, 2, 1), j = luaL_optinteger(L, 3, -1);
  if (i < 0) i = 0u - (size_t)i > len ? 0 : (lua_Integer)len + i + 1;
  if (j < 0) j = 0u - (size_t)j > len ? 0 : (lua_Integer)len + j + 1;
  if (!(1 <= i && i - 1 <= (lua_Integer)len && j - 1 < (lua_Integer)len))
    return orig_utf8len(L);  /* its argument error */
  int lax = lua_toboolean(L, 4);
  lua_Integer n = 0;
  for (lua_Integer a = i; a <= j; ) {  /* 1-based, inclusive */
    lua_Integer b = j;
    if (j - a >= UTF8_PIECE) {
      b = a + UTF8_PIECE - 1;
      lua_Integer k = 0;
      while (k < 9 && ((unsigned char)s[b - k] & 0xC0) == 0x80) k++;  /* s[b - k]: byte b-k+1 */
      b = k < 9 ? b - k : j;
    }
    lua_pushcfunction(L, orig_utf8len);
    lua_pushvalue(L, 1);
    lua_pushinteger(L, a);
    lua_pushinteger(L, b);
    lua_pushboolean(L, lax);
    lua_call(L, 4, 2);
    if (lua_isnil(L, -2)) return 2;  /* fail, position */
    n += lua_tointeger(L, -2);
    lua_pop(L, 2);
    a = b + 1;
    tp__sandbox_check(L, sb);
  }
  lua_pushinteger(L, n);
  return 1;
}

static int sb_rep (lua_State *L) {
  tp_sandbox *sb = tp__sandbox_of(L);
  size_t l, lsep = 0;
  luaL_checklstring(L, 1, &l);
  lua_Integer n = luaL_checkinteger(L, 2);
  luaL_optlstring(L, 3, "", &lsep);
  if (n <= 0 || (l == 0 && (lsep == 0 || n == 1))) {
    lua_pushliteral(L, "");
    return 1;
  }
  if (l + lsep < l || l + lsep > (size_t)INT_MAX / (uint64_t)n)  /* Lua's own check */
    return luaL_error(L, "resulting string too large");
  /* l * n + lsep * (n - 1), saturating */
  uint64_t un = (uint64_t)n, total = UINT64_MAX;
  if ((l == 0 || un <= UINT64_MAX / l) && (lsep == 0 || un - 1 <= UINT64_MAX / lsep)) {
    uint64_t a = (uint64_t)l * un, b = (uint64_t)lsep * (un - 1);
    if (a <= UINT64_MAX - b) total = a + b;
  }
  if (sb->mem_cap && total > sb->mem_cap) {
    tp__sandbox_kill(sb, TP_KILL_MEMORY);
    tp__sandbox_check(L, sb);
  }
  return orig_rep(L);
}

static int has_specials (const char *p, size_t lp) {
  for (size_t i = 0; i < lp; i++)
    if (strchr("^$*+?.([%-", p[i]) != NULL && p[i] != '\0') return 1;
  return 0;
}

#define FIND_WINDOW (1 << 20)

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
  /* memmem is linear, but 64 MiB is one ~200 ms C call: the text is searched in
  ** windows of FIND_WINDOW starting places (at least the pattern's length, so the work
  ** stays linear), overlapping by the pattern's length, polling between windows */
  tp_sandbox *sb = tp__sandbox_of(L);
  const char *hit = NULL, *at = s + init, *end = s + ls;
  size_t win = lp > FIND_WINDOW ? lp : FIND_WINDOW;
  for (;;) {
    size_t left = (size_t)(end - at);
    if (lp > left) break;
    size_t n = left - lp + 1 > win ? win + lp - 1 : left;  /* win starting places */
    hit = memmem(at, n, p, lp);
    if (hit != NULL || n == left) break;
    at += win;
    tp__sandbox_check(L, sb);
  }
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
    if (!lua_isstring(L, -1))  /* Lua 5.4.7's message */
      return luaL_error(L, "invalid value (%s) at index %I in table for 'concat'",
                        luaL_typename(L, -1), (LUAI_UACINT)i);
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

/*
** table.sort. Lua's own sort runs when the order function is written in Lua (the hook
** runs inside it, so a verdict stops the sort at the next comparison), or when there
** are fewer than SORT_SMALL values, each a number, a string of at most
** SORT_SHORT_STRING bytes, or a value without a metatable that Lua cannot order at all
** (its first comparison raises Lua's own error, so mixed arrays fail as in Lua), in a
** plain table: about 10^4 cheap comparisons, well under 1 ms. Everything else (the default order over long strings, where one comparison of
** two 30 MiB strings takes ~3 ms and Lua's sort of 1000 of them took 17 s; an order
** function or __lt written in C; many values) goes to the heap sort below, which polls
** the run's verdict at every comparison.
*/
#define SORT_SMALL 1024
#define SORT_SHORT_STRING 256

static int sort_less (lua_State *L, tp_sandbox *sb, int a, int b) {  /* absolute indexes */
  if (atomic_load(&sb->kill) != TP_KILL_NONE) tp__sandbox_check(L, sb);
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
      if (sort_less(L, sb, top - 1, top)) { lua_remove(L, -2); child++; }
      else lua_pop(L, 1);
    }
    lua_geti(L, 1, root);                        /* c r */
    int top = lua_gettop(L);
    if (!sort_less(L, sb, top, top - 1)) { lua_pop(L, 2); break; }
    lua_seti(L, 1, child);                       /* t[child] = r; c */
    lua_seti(L, 1, root);                        /* t[root] = c */
    root = child;
  }
}

/* Whether Lua's sort of t (arg 1, n values, default order) is cheap; see above. */
static int cheap_default_sort (lua_State *L, lua_Integer n) {
  if (n >= SORT_SMALL || lua_type(L, 1) != LUA_TTABLE) return 0;
  if (lua_getmetatable(L, 1)) { lua_pop(L, 1); return 0; }
  int cheap = 1;
  for (lua_Integer i = 1; i <= n && cheap; i++) {
    int t = lua_rawgeti(L, 1, i);
    if (t == LUA_TSTRING) cheap = lua_rawlen(L, -1) <= SORT_SHORT_STRING;
    else if (t != LUA_TNUMBER && lua_getmetatable(L, -1)) { lua_pop(L, 1); cheap = 0; }
    lua_pop(L, 1);
  }
  return cheap;
}

static int sb_sort (lua_State *L) {
  tp_sandbox *sb = tp__sandbox_of(L);
  check_table(L, 1, 1);
  lua_Integer n = luaL_len(L, 1);
  if (!lua_isnoneornil(L, 2)) luaL_checktype(L, 2, LUA_TFUNCTION);
  if (n < 2) return 0;
  if (lua_type(L, 2) == LUA_TFUNCTION && !lua_iscfunction(L, 2)) return orig_sort(L);
  lua_settop(L, 2);
  if (lua_isnil(L, 2) && cheap_default_sort(L, n)) return orig_sort(L);
  luaL_argcheck(L, n < INT32_MAX, 1, "array too big");
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
/* tp__request_tag: verdict.c */

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
    if (sb->instr_limit || sb->instr_step_end || atomic_load(&sb->poll_end_ns))
      tp__sandbox_sethook(sb, co);  /* a period counted from now, not from its creation */
    atomic_store(&sb->running, co);
    tp__sandbox_tick_arm(sb);  /* a hand-over whose hook the signal set in L, before co ran */
    if (atomic_load(&sb->kill) != TP_KILL_NONE || atomic_load(&sb->slice_over))
      lua_sethook(co, tp__sandbox_hook, LUA_MASKCOUNT, 1);  /* what the signal would do */
    status = lua_resume(co, L, narg, &nres);
    atomic_store(&sb->running, L);
    tp__sandbox_tick_arm(sb);  /* one whose hook it set in co as co ended */
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

/* Why co cannot be resumed, in lua_resume's words: dead when it ended (returned, or
** raised an error), non-suspended when it is running or has resumed another. */
static const char *co_refusal (lua_State *co) {
  int st = lua_status(co);
  if (st != LUA_OK && st != LUA_YIELD) return "cannot resume dead coroutine";
  lua_Debug ar;
  if (st == LUA_OK && !lua_getstack(co, 0, &ar) && lua_gettop(co) == 0)
    return "cannot resume dead coroutine";
  return "cannot resume non-suspended coroutine";
}

static int sb_co_resume (lua_State *L) {
  lua_State *co = lua_tothread(L, 1);
  luaL_argexpected(L, co, 1, "thread");  /* lcorolib's words */
  int narg = lua_gettop(L) - 1;
  if (!co_status_ok(L, co)) {
    lua_pushboolean(L, 0);
    lua_pushstring(L, co_refusal(co));
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
  if (!co_status_ok(L, co)) return luaL_error(L, "%s", co_refusal(co));
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
  luaL_argexpected(L, co, 1, "thread");  /* lcorolib's words */
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
  if (L == sb->T) sb->t_seen = 1;
  lua_pushboolean(L, L == sb->T);
  return 2;
}

static int sb_co_isyieldable (lua_State *L) {
  tp_sandbox *sb = tp__sandbox_of(L);
  lua_State *co = lua_isnone(L, 1) ? L : lua_tothread(L, 1);
  luaL_argexpected(L, co, 1, "thread");  /* lcorolib's words */
  lua_pushboolean(L, co != sb->T && lua_isyieldable(co));
  return 1;
}

/* ---- building the state ------------------------------------------------------------ */

/* The table, defined here where the wrappers it names are visible: a WRAP entry whose
** function is missing or misspelt is a compile error. */
#define TP_ALLOWLIST_TABLE
#include "allowlist.h"

/* The originals that wrappers call into; the same in every state, so read once, from a
** state made for it: again at the next sandbox when the host was out of memory. */
static pthread_mutex_t originals_mu = PTHREAD_MUTEX_INITIALIZER;
static atomic_int originals_ready;
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
  memset(lib_open, 0, sizeof lib_open);  /* again after a try that ran out of memory */
  memset(lib_size, 0, sizeof lib_size);
  for (size_t k = 0; k < TP_ALLOWLIST_LEN; k++) {
    const tp_allow *a = &tp__allowlist[k];
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
      sl->fn = a->fn;
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

static int originals_p (lua_State *L) {
  luaL_openlibs(L);
  orig_setmetatable = field_fn(L, "_G", "setmetatable");
  orig_rawset = field_fn(L, "_G", "rawset");
  orig_xpcall = field_fn(L, "_G", "xpcall");
  orig_format = field_fn(L, "string", "format");
  orig_rep = field_fn(L, "string", "rep");
  orig_find = field_fn(L, "string", "find");
  orig_sort = field_fn(L, "table", "sort");
  lua_pushliteral(L, "");
  if (!lua_getmetatable(L, -1)) abort();  /* luaL_openlibs always sets it */
  for (size_t i = 0; i < NSTRING_ARITH; i++) {
    lua_getfield(L, -1, string_arith[i]);
    orig_string_arith[i] = lua_tocfunction(L, -1);
    if (orig_string_arith[i] == NULL) abort();  /* a Lua built without them */
    lua_pop(L, 1);
  }
  lua_pop(L, 2);

  orig_date = field_fn(L, "os", "date");
  orig_utf8len = field_fn(L, "utf8", "len");
  plan_slots(L);
  return 0;
}

/* 0 once the originals are read; -1 when the host is out of memory (tried again later). */
static int originals_setup (void) {
  if (atomic_load(&originals_ready)) return 0;
  pthread_mutex_lock(&originals_mu);
  if (!atomic_load(&originals_ready)) {
    lua_State *L = luaL_newstate();
    if (L != NULL) {
      lua_pushcfunction(L, originals_p);
      if (lua_pcall(L, 0, 0, 0) == LUA_OK) {
        const char *g = getenv("TP_GC_AGGRESSIVE");
        gc_aggressive = g != NULL && *g != '\0' && strcmp(g, "0") != 0;
        atomic_store(&originals_ready, 1);
      }
      lua_close(L);
    }
  }
  pthread_mutex_unlock(&originals_mu);
  return atomic_load(&originals_ready) ? 0 : -1;
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

/* Pushes the metatable that makes an empty table a read-only proxy of the table at real:
** reads and pairs reach real, writes raise, getmetatable answers false. */
static void push_readonly_mt (lua_State *L, int real) {
  real = lua_absindex(L, real);
  lua_createtable(L, 0, 5);
  lua_pushvalue(L, real);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, readonly_newindex);
  lua_setfield(L, -2, "__newindex");
  lua_pushvalue(L, real);
  lua_pushcclosure(L, readonly_pairs, 1);
  lua_setfield(L, -2, "__pairs");
  lua_pushboolean(L, 0);
  lua_setfield(L, -2, "__metatable");
  lua_pushboolean(L, 1);
  lua_rawsetp(L, -2, &tp__readonly_key);
}

/* ---- foreign names -----------------------------------------------------------------
** Models write JavaScript and Python words into Lua: `null`, `None`, `await`, `console`.
** Lua reads each as a nil global, so the error comes later and elsewhere, or never
** (`r.value == null` is silently true). The globals table's __index raises, at the line
** that reads it, a message that says what to write in Lua, for these names only. It runs
** only for names the globals table does not hold: a global the script assigns is read
** raw as usual, any other absent name is nil, and rawget, _ENV tables and a script's own
** metatable on _G keep Lua's meaning. Sorted by name (bsearch).
*/
static const struct foreign { const char *name, *say; } foreign_names[] = {
  { "Array", "`Array` is not Lua: arrays are tables ({1, 2, 3}); json.array(t) sends an empty one as []" },
  { "Date", "`Date` is not Lua: use os.time() for seconds since the epoch, os.date(fmt) to format" },
  { "FALSE", "`FALSE` is not Lua: use false" },
  { "False", "`False` is not Lua: use false" },
  { "Infinity", "`Infinity` is not Lua: use math.huge" },
  { "JSON", "`JSON` is not Lua: use json.encode(v) and json.decode(s)" },
  { "Math", "`Math` is not Lua: use math (lowercase): math.floor, math.max, math.random" },
  { "NULL", "`NULL` is not Lua: use nil (or json.null for a JSON null)" },
  { "NaN", "`NaN` is not Lua: 0/0 is NaN; test for it with v ~= v" },
  { "None", "`None` is not Lua: use nil (or json.null for a JSON null)" },
  { "Number", "`Number` is not Lua: use tonumber(s)" },
  { "Object", "`Object` is not Lua: walk a table's keys with for k, v in pairs(t) do ... end" },
  { "Promise", "`Promise` is not Lua: tool calls return their result directly; run several at once with parallel(f1, f2, ...)" },
  { "String", "`String` is not Lua: use tostring(v)" },
  { "TRUE", "`TRUE` is not Lua: use true" },
  { "True", "`True` is not Lua: use true" },
  { "async", "`async` is not Lua: functions need no async; tool calls return their result directly" },
  { "await", "`await` is not Lua: a tool call returns its result directly (local r = tools.x.y{...}); run several at once with parallel(f1, f2, ...)" },
  { "catch", "`catch` is not Lua: catch errors with local ok, err = pcall(function() ... end)" },
  { "console", "`console` is not Lua: use print(...) for logs" },
  { "elif", "`elif` is not Lua: use elseif" },
  { "enumerate", "`enumerate` is not Lua: use for i, v in ipairs(t) do ... end" },
  { "f", "`f` is not defined: if it is a Python f-string, Lua has none: use string.format(\"%s\", x) or join with .." },
  { "float", "`float` is not Lua: use tonumber(s)" },
  { "int", "`int` is not Lua: use math.floor(x), or math.tointeger(x) for an exact integer" },
  { "isinstance", "`isinstance` is not Lua: use type(v) == \"table\" (or \"string\", \"number\")" },
  { "len", "`len` is not Lua: use #t for the length of an array or a string" },
  { "null", "`null` is not Lua: use nil (or json.null for a JSON null)" },
  { "parseFloat", "`parseFloat` is not Lua: use tonumber(s)" },
  { "parseInt", "`parseInt` is not Lua: use tonumber(s) (math.floor for the integer part)" },
  { "printf", "`printf` is not Lua: use print(string.format(fmt, ...))" },
  { "range", "`range` is not Lua: use a numeric for: for i = 1, n do ... end" },
  { "self", "`self` is only set inside a function defined with `:` (function obj:name() ... end) and called with `:` (obj:name())" },
  { "str", "`str` is not Lua: use tostring(v)" },
  { "this", "`this` is not Lua: a function defined with `:` (function obj:name() ... end) gets its object as self" },
  { "try", "`try` is not Lua: catch errors with local ok, err = pcall(function() ... end)" },
  { "typeof", "`typeof` is not Lua: use type(v)" },
  { "undefined", "`undefined` is not Lua: use nil" },
};

static int foreign_cmp (const void *key, const void *elem) {
  return strcmp(key, ((const struct foreign *)elem)->name);
}

/* The script's message for a foreign name, or NULL (used by the globals' __index). */
static const char *foreign_say (const char *name) {
  const struct foreign *f = bsearch(name, foreign_names,
    sizeof foreign_names / sizeof foreign_names[0], sizeof foreign_names[0], foreign_cmp);
  return f ? f->say : NULL;
}

static int globals_index (lua_State *L) {
  if (lua_type(L, 2) == LUA_TSTRING) {
    const char *say = foreign_say(lua_tostring(L, 2));
    if (say) return luaL_error(L, "%s", say);
  }
  return 0;
}

/* For the pre-run check (precheck.c): a foreign name's message, and whether a globals
** table's __index is still the sandbox's own. */
const char *tp__sandbox_foreign_say (const char *name) { return foreign_say(name); }
int tp__sandbox_globals_index_is_ours (lua_CFunction f) { return f == globals_index; }

/* __index of the json library's read-only proxy (upvalue 1: the real table): reading
** json.null builds its metatable first, so every message about it names it. */
static int json_index (lua_State *L) {
  lua_pushvalue(L, 2);
  if (lua_rawget(L, lua_upvalueindex(1)) == LUA_TLIGHTUSERDATA) {
    if (lua_getmetatable(L, -1)) lua_pop(L, 1);
    else tp__json_null_meta(L);
  }
  return 1;
}

/* ---- libraries built when first touched -------------------------------------------
** A library the script sees (string, table, math, utf8, coroutine, os, json, and the
** copy of the string metatable that getmetatable("") answers) is an empty proxy table
** from the start, in the globals under its name as always, so pairs(_G), rawget and
** rawequal see what they would see in a sandbox built in full. Until a script (or the
** host) first reads through it, the proxy's metatable is a shared one whose __index and
** __pairs build the library: its real table, filled from the allowlist, entered in the
** registry's LOADED table (for error messages' names), and the proxy's own read-only
** metatable over it; then the read is done again through that. Writes raise as they do
** once it is built (no need to build for that), # is 0 and next() finds nothing either
** way. The string metatable's __index is the string proxy until the string library is
** built, then its real table. A session's sandbox is built so (most scripts touch a few
** libraries); a pool's sandbox is built in full once and copied (tp_snap). */
static char lazy_key;  /* registry: a table of the proxies, by lazy library number */
#define LZ_JSON ((int)NLIBS)       /* 1 .. NLIBS - 1: libs[i]; then json, then the */
#define LZ_SMT ((int)NLIBS + 1)    /* copy of the string metatable */
#define NLAZY LZ_SMT

int tp__sandbox_full;              /* tests: build every sandbox in full (see sandbox.h) */

static int lazy_index (lua_State *L);

/* The lazy library number of the proxy at idx, or 0. */
static int lazy_find (lua_State *L, int idx) {
  idx = lua_absindex(L, idx);
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &lazy_key) != LUA_TTABLE) { lua_pop(L, 1); return 0; }
  int found = 0;
  for (int i = 1; i <= NLAZY && !found; i++) {
    lua_rawgeti(L, -1, i);
    if (lua_rawequal(L, -1, idx)) found = i;
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
  return found;
}

/* Whether the read-only proxy at idx still waits for its library. */
static int lazy_pending (lua_State *L, int idx) {
  if (!lua_getmetatable(L, idx)) return 0;
  lua_pushliteral(L, "__index");
  lua_rawget(L, -2);
  int pending = lua_tocfunction(L, -1) == lazy_index;
  lua_pop(L, 2);
  return pending;
}

/* Builds lazy library i behind its proxy at idx (see above). May raise (memory). */
static void lazy_build (lua_State *L, int i, int proxy) {
  proxy = lua_absindex(L, proxy);
  int top = lua_gettop(L);
  luaL_checkstack(L, 8, NULL);
  if (i == LZ_JSON) {
    tp__json_open(L);
    push_readonly_mt(L, -1);
    lua_pushvalue(L, -2);  /* reading json.null builds its metatable first */
    lua_pushcclosure(L, json_index, 1);
    lua_setfield(L, -2, "__index");
    lua_setmetatable(L, proxy);
    lua_settop(L, top);
    return;
  }
  if (i == LZ_SMT) {  /* __index: the script's (read-only) string table, as rawequal as in
                      ** Lua; the arithmetic metamethods of the real one */
    lua_createtable(L, 0, (int)NSTRING_ARITH + 1);
    lua_rawgetp(L, LUA_REGISTRYINDEX, &lazy_key);
    lua_rawgeti(L, -1, 1);  /* libs[1] is string */
    lua_setfield(L, -3, "__index");
    lua_pop(L, 1);
    for (size_t m = 0; m < NSTRING_ARITH; m++) {
      lua_pushcfunction(L, orig_string_arith[m]);
      lua_setfield(L, -2, string_arith[m]);
    }
    push_readonly_mt(L, -1);
    lua_setmetatable(L, proxy);
    lua_settop(L, top);
    return;
  }
  const char *name = libs[i].name;
  int src = 0;
  if (lib_open[i]) {  /* a library whose values must be taken from it (see plan_slots) */
    if (i == 1) luaL_error(L, "allowlist: string would be opened again");  /* its metatable */
    lua_pushcfunction(L, libs[i].open);
    lua_call(L, 0, 1);
    src = lua_gettop(L);
  }
  lua_createtable(L, 0, lib_size[i]);
  int dst = lua_gettop(L);
  for (size_t k = 0; k < TP_ALLOWLIST_LEN; k++) {
    const slot *sl = &slots[k];
    if (sl->lib != i || sl->kind == V_NONE) continue;
    const tp_allow *a = &tp__allowlist[k];
    switch (sl->kind) {
      case V_CFUNC:
        if (sl->fn == NULL) luaL_error(L, "allowlist: no wrapper for %s.%s", name, a->name);
        lua_pushcfunction(L, sl->fn);
        break;
      case V_INT: lua_pushinteger(L, sl->i); break;
      case V_NUM: lua_pushnumber(L, sl->n); break;
      case V_STR: lua_pushlstring(L, sl->s, sl->slen); break;
      default: lua_getfield(L, src, a->name); break;
    }
    lua_setfield(L, dst, a->name);
  }
  if (i == 1) {  /* string methods: the real table from now on */
    lua_pushliteral(L, "");
    lua_getmetatable(L, -1);
    lua_pushvalue(L, dst);
    lua_setfield(L, -2, "__index");
    lua_pop(L, 2);
  }
  lua_getfield(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);  /* the real table, for error */
  lua_pushvalue(L, dst);                                 /* messages' names */
  lua_setfield(L, -2, name);
  lua_pop(L, 1);
  push_readonly_mt(L, dst);
  lua_setmetatable(L, proxy);
  lua_settop(L, top);
}

static int lazy_index (lua_State *L) {
  int i = lazy_find(L, 1);
  if (i == 0) return 0;
  lazy_build(L, i, 1);
  lua_settop(L, 2);
  lua_gettable(L, 1);
  return 1;
}

static int lazy_pairs (lua_State *L) {
  int i = lazy_find(L, 1);
  if (i == 0) return luaL_error(L, "not a library");
  lazy_build(L, i, 1);
  luaL_getmetafield(L, 1, "__pairs");
  lua_pushvalue(L, 1);
  lua_call(L, 1, 3);
  return 3;
}

int tp__sandbox_library (lua_State *L) {
  int idx = lua_gettop(L);
  if (lua_type(L, idx) != LUA_TTABLE || !lua_getmetatable(L, idx)) return 0;
  if (lua_rawgetp(L, -1, &tp__readonly_key) == LUA_TNIL) { lua_pop(L, 2); return 0; }
  lua_pop(L, 2);
  if (lazy_pending(L, idx)) {
    int i = lazy_find(L, idx);
    if (i == 0 || i == LZ_JSON) return 0;  /* json's __index is a function either way */
    lazy_build(L, i, idx);
  }
  lua_getmetatable(L, idx);
  lua_pushliteral(L, "__index");
  if (lua_rawget(L, -2) != LUA_TTABLE) { lua_pop(L, 2); return 0; }
  lua_remove(L, -2);
  return 1;
}

int tp__sandbox_loaded (lua_State *L, const char *name) {
  lua_getfield(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
  if (lua_getfield(L, -1, name) == LUA_TNIL) {
    lua_pop(L, 1);
    for (int i = 1; i < (int)NLIBS; i++) {
      if (strcmp(libs[i].name, name) != 0) continue;
      lua_rawgetp(L, LUA_REGISTRYINDEX, &lazy_key);
      lua_rawgeti(L, -1, i);
      lua_remove(L, -2);
      if (lua_type(L, -1) == LUA_TTABLE && lazy_pending(L, -1)) lazy_build(L, i, -1);
      lua_pop(L, 1);
      break;
    }
    lua_getfield(L, -1, name);
  }
  lua_remove(L, -2);
  return lua_type(L, -1);
}

/* Opens the allowed libraries into the fresh state, in full or lazily (see above). Runs
** in protected mode. */
static int open_sandbox (lua_State *L) {
  int lazy = lua_toboolean(L, 1);
  /* a fresh state holds only what is built here, so collecting now would find nothing */
  lua_gc(L, LUA_GCSTOP);
  /* base values that must be taken from Lua's base library (see plan_slots) */
  if (lib_open[0]) {
    luaL_requiref(L, libs[0].name, libs[0].open, 1);
    lua_pop(L, 1);
  }
  /* The registry's LOADED table: luaL_argerror names a function ("bad argument #1 to
  ** 'string.rep'") by finding it there, as in Lua. It holds the filtered libraries'
  ** real tables; the registry is out of the script's reach. */
  lua_createtable(L, 0, (int)NLIBS + 1);
  int loaded = lua_gettop(L);
  lua_pushglobaltable(L);
  int G = lua_gettop(L);
  /* the new globals, filled from the allowlist */
  lua_createtable(L, 0, lib_size[0] + (int)NLIBS + 2);
  int NG = lua_gettop(L);
  for (size_t k = 0; k < TP_ALLOWLIST_LEN; k++) {
    const slot *sl = &slots[k];
    if (sl->lib != 0 || sl->kind == V_NONE) continue;
    const tp_allow *a = &tp__allowlist[k];
    switch (sl->kind) {
      case V_CFUNC:
        if (sl->fn == NULL) return luaL_error(L, "allowlist: no wrapper for _G.%s", a->name);
        lua_pushcfunction(L, sl->fn);
        break;
      case V_INT: lua_pushinteger(L, sl->i); break;
      case V_NUM: lua_pushnumber(L, sl->n); break;
      case V_STR: lua_pushlstring(L, sl->s, sl->slen); break;
      default: lua_getfield(L, G, a->name); break;
    }
    lua_setfield(L, NG, a->name);
  }
  /* the libraries' proxies, waiting for their libraries */
  lua_createtable(L, 0, 5);
  int pending = lua_gettop(L);
  lua_pushcfunction(L, lazy_index);
  lua_setfield(L, pending, "__index");
  lua_pushcfunction(L, readonly_newindex);
  lua_setfield(L, pending, "__newindex");
  lua_pushcfunction(L, lazy_pairs);
  lua_setfield(L, pending, "__pairs");
  lua_pushboolean(L, 0);
  lua_setfield(L, pending, "__metatable");
  lua_pushboolean(L, 1);
  lua_rawsetp(L, pending, &tp__readonly_key);
  lua_createtable(L, NLAZY, 0);
  int proxies = lua_gettop(L);
  lua_pushvalue(L, proxies);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &lazy_key);
  for (int i = 1; i <= NLAZY; i++) {
    lua_createtable(L, 0, 0);
    lua_pushvalue(L, pending);
    lua_setmetatable(L, -2);
    lua_pushvalue(L, -1);
    lua_rawseti(L, proxies, i);
    if (i < (int)NLIBS) lua_setfield(L, NG, libs[i].name);
    else if (i == LZ_JSON) lua_setfield(L, NG, "json");
    else lua_pop(L, 1);
  }
  /* Lua's string metatable: methods through the string library, the arithmetic
  ** metamethods that coerce numeric strings ("10" + 1 == 11), and for getmetatable("")
  ** a read-only copy; the real one stays out of reach, so string methods cannot be
  ** changed. */
  lua_pushliteral(L, "");
  lua_createtable(L, 0, (int)NSTRING_ARITH + 2);
  lua_rawgeti(L, proxies, 1);
  lua_setfield(L, -2, "__index");
  for (size_t m = 0; m < NSTRING_ARITH; m++) {
    lua_pushcfunction(L, orig_string_arith[m]);
    lua_setfield(L, -2, string_arith[m]);
  }
  lua_rawgeti(L, proxies, LZ_SMT);
  lua_setfield(L, -2, "__metatable");
  lua_setmetatable(L, -2);
  lua_pop(L, 1);
  tp__json_tag_objects(L, tp__sb_objlen);  /* #t of a JSON object warns (warnings.c) */
  tp__json_tag_arrays(L, tp__sb_arrindex);  /* t.length of a JSON array warns */
  /* json.null's metatable is built when a null first reaches the script: a tool's
  ** result or json.decode (json.c), or the script reading json.null (json_index) */
  tp__json_null_meta_lazy(L);
  lua_pushvalue(L, loaded);
  lua_setfield(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
  if (!lazy)
    for (int i = 1; i <= NLAZY; i++) {
      lua_rawgeti(L, proxies, i);
      lazy_build(L, i, -1);
      lua_pop(L, 1);
    }
  lua_createtable(L, 0, 1);  /* the globals' metatable: foreign names */
  lua_pushcfunction(L, globals_index);
  lua_setfield(L, -2, "__index");
  lua_setmetatable(L, NG);
  tp__json_set_decode_cap(L, tp__sandbox_of(L)->mem_cap / 16);
  tp__json_set_budget(L, tp__sandbox_budget(tp__sandbox_of(L)));
  lua_pushvalue(L, NG);
  tp__tools_open(L);  /* tools, parallel */
  lua_pop(L, 1);
  lua_pushvalue(L, NG);
  lua_setfield(L, NG, "_G");
  /* swap the globals: the registry's global table becomes the filtered one */
  lua_pushvalue(L, NG);
  lua_rawseti(L, LUA_REGISTRYINDEX, LUA_RIDX_GLOBALS);
  /* what luaL_requiref left in package.loaded (unfiltered libraries) goes */
  lua_pushvalue(L, NG);
  lua_setfield(L, loaded, LUA_GNAME);
  /* the script's thread, anchored in the registry */
  tp__sandbox_of(L)->T = lua_newthread(L);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &thread_key);
  lua_gc(L, LUA_GCRESTART);
  lua_gc(L, LUA_GCCOLLECT);
  return 0;
}

tp_sandbox *tp__sandbox_create (const tp_limits *limits) {
  return tp__sandbox_create_in(limits, NULL);
}

static int pool_ready (tp_sandbox *sb, const tp_limits *limits);
static int snap_take (tp_sandbox *sb);

tp_sandbox *tp__sandbox_create_in (const tp_limits *limits, tp_arena_pool *pool) {
  if (originals_setup() != 0) return NULL;
  tp_sandbox *sb;
  int seeded = tp_lua_seed_next_set;
  if (pool && pool->idle && !seeded) {  /* a run that asks for a seed: fresh */
    sb = pool->idle;
    if (limits->memory && sb->mem_peak > limits->memory)
      return NULL;  /* where building it anew would have stopped */
    pool->idle = sb->next_idle;
    sb->next_idle = NULL;
    if (pool_ready(sb, limits) == 0) return sb;
    sandbox_free(sb);
    return NULL;
  }
  sb = calloc(1, sizeof *sb);
  if (sb == NULL) return NULL;
  sb->arena.pool = pool;
  sb->loaded = tp__sandbox_loaded;
  sb->limits = *limits;
  sb->mem_cap = limits->memory;
  sb->out_cap = limits->output;
  sb->host_cap = limits->memory;
  sb->json_budget = (tp_json_budget){ budget_charge, budget_refund, budget_stopped,
                                     budget_note, sb };
  sb->instr_limit = limits->instructions;
  sb->meter.countdown = METER_STEPS;
  sb->meter.refill = tp__sandbox_meter_refill;
  sb->meter.tickdown = TICK_OFF;
  sb->meter.tick = tp__sandbox_meter_tick;
  sb->tick_period = 16;
  sb->logs = json_array();
  if (sb->logs == NULL) { free(sb); return NULL; }
  lua_State *L = lua_newstate(sb_alloc, sb);
  if (L == NULL) { arena_free_all(&sb->arena); json_decref(sb->logs); free(sb); return NULL; }
  *(tp_meter **)lua_getextraspace(L) = &sb->meter;
  sb->L = L;
  atomic_store(&sb->running, L);
  lua_setwarnf(L, NULL, NULL);
  if (gc_aggressive) lua_gc(L, LUA_GCINC, 0, 1000, 0);  /* no pause, big steps */
  /* a pool's sandbox is copied as built: in full; a session's is built as it is used */
  int full = pool != NULL || tp__sandbox_full;
  lua_pushcfunction(L, open_sandbox);
  lua_pushboolean(L, !full);
  if (lua_pcall(L, 1, 0, 0) != LUA_OK) goto fail;  /* out of memory, or below the cap */
  if (pool && pool->sandboxes < pool->sandboxes_max && !seeded &&
      snap_take(sb) == 0)
    pool->sandboxes++;
  return sb;
fail:
  lua_close(L);
  arena_free_all(&sb->arena);
  json_decref(sb->logs);
  free(sb);
  return NULL;
}

/* Closes sb's state by letting go of all its memory at once, when that is what lua_close
** would come to: no object is waiting for its finalizer, the main thread has no
** to-be-closed variable or open upvalue, and every object with a finalizer is a userdata
** whose __gc is a C function (the json library's boxes, which free what they hold
** outside the state; a script cannot set __gc): those finalizers are called here, then
** the arena and the large blocks go. lua_close visits every object, and taking each
** string out of the string table (a cache miss each) made it half the cost of a run
** that waits on one tool call. Returns 0, having done nothing, when lua_close must do
** it. */
static int close_at_once (tp_sandbox *sb) {
  lua_State *L = sb->L;
  global_State *g = G(L);
  if (!ARENA_ON || g->tobefnz != NULL || L->openupval != NULL ||
      L->tbclist.p != L->stack.p || !lua_checkstack(L, 4))
    return 0;
  int n = 0;
  for (GCObject *o = g->finobj; o != NULL; o = o->next) {
    if (o->tt != LUA_VUSERDATA) return 0;
    n++;
  }
  if (n > 0) {
    lua_settop(L, 0);
    for (GCObject *o = g->finobj; o != NULL; o = o->next) {  /* the finalizers: C only */
      setuvalue(L, s2v(L->top.p), gco2u(o));
      L->top.p++;
      if (!lua_getmetatable(L, 1) || lua_getfield(L, 2, "__gc") != LUA_TFUNCTION ||
          lua_tocfunction(L, 3) == NULL) {
        lua_settop(L, 0);
        return 0;
      }
      lua_settop(L, 0);  /* the next object is looked at from index 1 again */
    }
    lua_settop(L, 0);
    for (GCObject *o = g->finobj; o != NULL; o = o->next) {
      setuvalue(L, s2v(L->top.p), gco2u(o));
      L->top.p++;
      lua_getmetatable(L, 1);
      lua_getfield(L, 2, "__gc");
      lua_pushvalue(L, 1);
      lua_pcall(L, 1, 0, 0);  /* errors are ignored, as lua_close does (warns) */
      lua_settop(L, 0);
    }
  }
  return 1;
}

/* ---- the pool ------------------------------------------------------------------------
** A pool's sandbox goes back, when its run is gone, to exactly what it was when built:
** the bytes of its chunks and large blocks as they were then, its allocator's lists and
** counts. Nothing a run did can reach the next one, since all of the state is that copy
** again (spec/c/test_pool.c changes every library, metatable and upvalue a script can
** reach, and checks); and the next run sees what a fresh sandbox would show it, down to
** the memory it reports. Only what lives outside the state is set again: the run's
** limits, and math.random's seed, taken from the clock and the state's address as Lua's
** math library does when it opens. While a run uses the sandbox, the large blocks it
** had when built are never freed nor moved (IS_SNAP): the copy is written back into
** them. It needs the arena, which knows every block; under AddressSanitizer there is no
** pool. */
typedef struct snap_big { tp_big *h; size_t n; } snap_big;
typedef struct tp_snap {
  tp_arena arena;          /* the allocator as built; its list of large blocks empty */
  size_t mem_used, mem_peak;
  lua_State *T;
  size_t nbig;
  snap_big *bigs;          /* the large blocks as built, header included */
  char *image;             /* the chunks' bytes in list order, then the large blocks' */
} tp_snap;

/* Keeps sb's state as it is now, for snap_restore; 0, or -1 when out of memory (then sb
** stays an ordinary sandbox). */
static int snap_take (tp_sandbox *sb) {
  tp_arena *a = &sb->arena;
  if (!ARENA_ON || a->chunks == NULL) return -1;
  size_t nbig = 0, bytes = 0;
  for (char *c = a->chunks; c != NULL; c = *(char **)c)
    bytes += c == a->chunks ? (size_t)(a->cur - c) : ARENA_CHUNK;
  for (tp_big *h = a->big; h != NULL; h = h->next) {
    nbig++;
    bytes += malloc_usable_size(h);
  }
  tp_snap *s = malloc(sizeof *s + nbig * sizeof(snap_big) + bytes);
  if (s == NULL) return -1;
  s->bigs = (snap_big *)(s + 1);
  s->image = (char *)(s->bigs + nbig);
  s->nbig = nbig;
  char *o = s->image;
  for (char *c = a->chunks; c != NULL; c = *(char **)c) {
    size_t n = c == a->chunks ? (size_t)(a->cur - c) : ARENA_CHUNK;
    memcpy(o, c, n);
    o += n;
  }
  size_t i = 0;
  for (tp_big *h = a->big, *next; h != NULL; h = next, i++) {
    next = h->next;
    h->prev = NULL;
    h->next = &snap_mark;  /* marked before the copy, so the copy keeps the mark */
    s->bigs[i] = (snap_big){ h, malloc_usable_size(h) };
    memcpy(o, h, s->bigs[i].n);
    o += s->bigs[i].n;
  }
  a->big = NULL;
  s->arena = *a;
  s->mem_used = sb->mem_used;
  s->mem_peak = sb->mem_peak;
  s->T = sb->T;
  sb->snap = s;
  return 0;
}

/* Puts sb's state back as snap_take kept it, after the finalizers of its userdata have
** let go of what they hold outside the state. -1, having changed nothing, when
** close_at_once cannot (then the sandbox is closed as usual). */
static int snap_restore (tp_sandbox *sb) {
  tp_snap *s = sb->snap;
  if (!close_at_once(sb)) return -1;
  tp_arena *a = &sb->arena;
  for (void *c = a->chunks, *next; c != s->arena.chunks; c = next) {
    next = *(void **)c;  /* the chunks taken since: the ones built with are the list's tail */
    chunk_put(a->pool, c);
  }
  big_free_all(a);
  const char *o = s->image;
  for (char *c = s->arena.chunks; c != NULL; c = *(char **)c) {
    size_t n = c == s->arena.chunks ? (size_t)(s->arena.cur - c) : ARENA_CHUNK;
    memcpy(c, o, n);
    o += n;
  }
  for (size_t i = 0; i < s->nbig; i++) {
    memcpy(s->bigs[i].h, o, s->bigs[i].n);
    o += s->bigs[i].n;
  }
  *a = s->arena;
  sb->mem_used = s->mem_used;
  sb->mem_peak = s->mem_peak;
  sb->T = s->T;
  return 0;
}

/* Sets what a restored state needs from outside: math.random's seed, and the limits'
** traces in the registry (as open_sandbox does). No allocation: the keys exist. */
static int ready_p (lua_State *L) {
  tp_sandbox *sb = tp__sandbox_of(L);
  tp__json_set_decode_cap(L, sb->mem_cap / 16);
  lua_getfield(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
  lua_getfield(L, -1, "math");
  lua_getfield(L, -1, "randomseed");
  lua_call(L, 0, 0);  /* no argument: the clock and the state's address, as when opened */
  return 0;
}

/* Readies a pool's restored sandbox for a run under limits (what tp__sandbox_create_in
** sets in a new one). 0, or -1. */
static int pool_ready (tp_sandbox *sb, const tp_limits *limits) {
  sb->limits = *limits;
  sb->mem_cap = limits->memory;
  sb->out_cap = limits->output;
  sb->host_cap = limits->memory;
  sb->instr_limit = limits->instructions;
  atomic_store(&sb->running, sb->L);
  lua_pushcfunction(sb->L, ready_p);
  if (lua_pcall(sb->L, 0, 0, 0) != LUA_OK) return -1;
  return 0;
}

/* What a sandbox's run leaves outside its state is cleared, as a new one has it. */
static void sandbox_clear (tp_sandbox *sb) {
  json_array_clear(sb->logs);
  atomic_store(&sb->kill, TP_KILL_NONE);
  atomic_store(&sb->slice_over, 0);
  atomic_store(&sb->poll_end_ns, 0);
  sb->hook_yielded = 0;
  sb->fail_armed = 0;
  sb->fail_ptr = NULL;
  sb->fail_osize = sb->fail_nsize = 0;
  sb->kill_note[0] = '\0';
  sb->logs_host = sb->out_used = 0;
  sb->out_truncated = 0;
  sb->host_used = 0;
  sb->instr_used = sb->instr_step_end = 0;
  sb->meter.countdown = METER_STEPS;
  sb->meter.tickdown = TICK_OFF;
  sb->run = NULL;
}

static void sandbox_free (tp_sandbox *sb) {
  atomic_store(&sb->running, NULL);
  if (sb->L && !close_at_once(sb)) lua_close(sb->L);
  arena_free_all(&sb->arena);
  if (sb->snap) {  /* its large blocks as built were kept out of the arena's list */
    for (size_t i = 0; i < sb->snap->nbig; i++) free(sb->snap->bigs[i].h);
    free(sb->snap);
    sb->arena.pool->sandboxes--;
  }
  json_decref(sb->logs);
  free(sb);
}

void tp__sandbox_destroy (tp_sandbox *sb) {
  if (sb == NULL) return;
  tp_arena_pool *pool = sb->arena.pool;
  atomic_store(&sb->running, NULL);
  if (sb->snap && snap_restore(sb) == 0) {
    sandbox_clear(sb);
    sb->next_idle = pool->idle;
    pool->idle = sb;
    return;
  }
  sandbox_free(sb);
}

/* A new script thread for the next run of a session; the old one is let go. */
/* The old thread is let go first: a run killed at the memory cap may have left it holding
** most of the cap (a deep recursion's stack), and only then can the allocator's emergency
** collection take it back for the new one. */
static int new_thread (lua_State *L) {
  lua_pushnil(L);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &thread_key);
  tp__sandbox_of(L)->T = lua_newthread(L);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &thread_key);
  return 0;
}

/* Whether the script's thread T can serve the next run as it is: its run returned (no
** error, nothing left open: a fresh thread's state but for its stack's size), and the
** script never held it as a value, so nothing can tell it from a new one. Making a new
** thread for every run was a third of the garbage of a warm run of a short script. */
static int thread_reusable (const tp_sandbox *sb) {
  lua_State *T = sb->T;
  return !sb->t_seen && T != NULL && lua_status(T) == LUA_OK && T->ci == &T->base_ci &&
         T->openupval == NULL && T->tbclist.p == T->stack.p && T->errfunc == 0;
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
  if (thread_reusable(sb)) {
    lua_settop(sb->T, 0);
    lua_sethook(sb->T, NULL, 0, 0);  /* as a new thread takes L's */
  }
  else {
    lua_pushcfunction(sb->L, new_thread);
    if (lua_pcall(sb->L, 0, 0, 0) != LUA_OK) {
      lua_pop(sb->L, 1);
      json_decref(logs);
      return -1;
    }
    sb->t_seen = 0;
  }
  json_decref(sb->logs);
  sb->logs = logs;
  tp__host_refund(sb, sb->logs_host);
  sb->logs_host = 0;
  sb->out_used = 0;
  sb->out_truncated = 0;
  sb->host_used = 0;  /* nothing a finished run built is still held */
  sb->instr_used = 0;
  sb->instr_step_end = 0;
  sb->mem_peak = sb->mem_used;
  sb->meter.countdown = METER_STEPS;
  sb->meter.tickdown = TICK_OFF;
  atomic_store(&sb->running, sb->L);
  return 0;
}

/* Host code's lines (a tool's ctx.log): charged like print's (log_cost against the
** output limit, the node against the host budget); invalid UTF-8 becomes U+FFFD byte by
** byte (the text comes from trusted code, so being exact matters less than never
** failing). Past the host budget the line is dropped and the verdict recorded. */
void tp__sandbox_log_host (tp_sandbox *sb, const char *s, size_t len) {
  if (sb == NULL || sb->out_truncated) return;
  size_t room = sb->out_cap ? (sb->out_used < sb->out_cap ? sb->out_cap - sb->out_used : 0)
                            : SIZE_MAX;
  int over = log_cost(len) > room;
  size_t take = len < room ? len : room;
  while (take < len && take > 0 && ((unsigned char)s[take] & 0xc0) == 0x80) take--;
  if ((!over || take > 0) && log_append(sb, tp__json_string_lossy(s, take, NULL)) != 0) return;
  sb->out_used += over ? room : log_cost(len);
  if (over) {
    char note[96];
    snprintf(note, sizeof note, "...[output truncated: the %zu-byte output limit was reached]",
             sb->out_cap);
    log_append(sb, json_string(note));
    sb->out_truncated = 1;
  }
}
