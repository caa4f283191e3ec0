/*
** internal.h: what the engine's C files share. Not installed; the public API is
** include/tidepool.h.
**
** A run owns one sandbox: a Lua state with a capped allocator and only the allowlisted
** library (sandbox/allowlist.h). The script runs in a thread T of that state, resumed
** by tp_run_step. Stopping a script that is busy in Lua is done the way lua.c handles
** Ctrl-C: a count hook of 1 is set on the running thread, and the hook raises. The hook
** is set from the run's own thread: by the allocator, print, the pattern meter, or the
** handler of a signal that the engine's watchdog thread sends when a deadline passes.
** The verdict (which limit) lives in the sandbox, never in the error object, and the
** hook keeps raising until the script is out of Lua code, so pcall cannot swallow it.
*/
#ifndef tidepool_internal_h
#define tidepool_internal_h

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stddef.h>
#include <jansson.h>

#include "lua.h"
#include "lua_patch.h"
#include "tidepool.h"

/* Why a run was stopped. Order matters only for the names table in run.c. */
typedef enum tp_kill {
  TP_KILL_NONE = 0,
  TP_KILL_MEMORY,
  TP_KILL_INSTRUCTIONS,
  TP_KILL_CPU,
  TP_KILL_TIME,
  TP_KILL_OUTPUT,
  TP_KILL_CANCELLED,
  TP_KILL__COUNT
} tp_kill;

/* ---- watchdog: one thread per engine that wakes at the earliest deadline ---------- */

typedef struct tp_watch tp_watch;
struct tp_watch {
  tp_watch *prev, *next;  /* in the watchdog's list while armed */
  uint64_t wake_ns;       /* CLOCK_MONOTONIC time of the next check */
  /* Called by the watchdog thread with its lock held when wake_ns has passed. Returns
  ** the next wake time, or 0 to disarm. */
  uint64_t (*fire)(tp_watch *w, uint64_t now_ns);
};

typedef struct tp_watchdog {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  pthread_t thread;
  tp_watch head;          /* sentinel of a circular list */
  uint64_t sleeping_until;/* what the thread waits for now; 0 = indefinitely */
  int started, stopping;
} tp_watchdog;

int  tp__watchdog_init(tp_watchdog *wd);
void tp__watchdog_close(tp_watchdog *wd);
int  tp__watch_arm(tp_watchdog *wd, tp_watch *w, uint64_t wake_ns);
void tp__watch_disarm(tp_watchdog *wd, tp_watch *w);
uint64_t tp__now_ns(void);       /* CLOCK_MONOTONIC */
uint64_t tp__thread_cpu_ns(void);/* CLOCK_THREAD_CPUTIME_ID of the calling thread */

/* ---- sandbox ------------------------------------------------------------------------ */

typedef struct tp_sandbox {
  tp_meter meter;          /* pattern-matcher steps; the state's extra space points here */
  lua_State *L;            /* main thread: host-side work (reading results, messages) */
  lua_State *T;            /* the script's thread */
  lua_State *_Atomic running; /* the thread executing Lua now (T or a script coroutine) */

  /* memory */
  size_t mem_used, mem_peak, mem_cap;
  const void *fail_ptr;    /* the last refused request, to tell a retry after the */
  size_t fail_osize, fail_nsize; /* emergency collection from a fresh request */
  int fail_armed;

  /* verdicts */
  atomic_int kill;         /* tp_kill; first one wins */
  atomic_int slice_over;   /* the step's budget ended: yield at the next chance */
  int hook_yielded;        /* T or a coroutine yielded from the hook (a time slice) */
  int in_host;             /* host code is running Lua (reading results): no slicing */

  /* instructions: counted only when a limit or a step budget asks for it */
  uint64_t instr_used;     /* completed periods of the count hook */
  uint64_t instr_limit;    /* 0 = none */
  uint64_t instr_step_end; /* instr_used value at which the step's budget ends; 0 = none */
  int hook_period;         /* the count hook's period on T, 0 = no count hook */

  /* output */
  json_t *logs;            /* array of strings */
  size_t out_used, out_cap;
  int out_truncated;

  /* limits, kept for messages */
  tp_limits limits;
} tp_sandbox;

/* Creates the sandbox state with the allowlisted library. Returns NULL when out of
** memory (host or cap). */
tp_sandbox *tp__sandbox_create(const tp_limits *limits);
void tp__sandbox_destroy(tp_sandbox *sb);

/* The sandbox of a sandbox state (any of its threads), or NULL for other states. */
tp_sandbox *tp__sandbox_of(lua_State *L);

/* Records the first verdict and arms the stopping hook on the running thread. Callable
** from the run's thread only (a signal handler counts). */
void tp__sandbox_kill(tp_sandbox *sb, tp_kill why);

/* The hook that enforces verdicts, counts instructions and ends time slices. */
void tp__sandbox_hook(lua_State *L, lua_Debug *ar);

/* Sets the instruction hook (or none) on thread co according to sb's counters. */
void tp__sandbox_sethook(tp_sandbox *sb, lua_State *co);

/* Raises the kill verdict as a Lua error if there is one; otherwise returns. */
void tp__sandbox_check(lua_State *L, tp_sandbox *sb);

/* The message of a verdict, for the script's error and the envelope. */
const char *tp__kill_code(tp_kill why);
void tp__kill_message(const tp_sandbox *sb, tp_kill why, char *buf, size_t len);

/* Marks the thread's active sandbox for the interrupt signal (NULL to clear). */
void tp__sandbox_enter(tp_sandbox *sb);
void tp__sandbox_leave(void);
int  tp__signal_install(void);
void tp__signal_interrupt(pthread_t thread);

/* ---- source normalization (normalize.c) ------------------------------------------ */

/* What models send: strips a markdown fence (and prose around it) and a #! line.
** Returns a pointer into src and the length through *len; never allocates. */
const char *tp__normalize(const char *src, size_t *len);

/* ---- runs (run.c) ---------------------------------------------------------------- */

struct tp_engine {
  tp_watchdog wd;
  tp_run *runs;            /* live runs, for destroy */
};

#endif
