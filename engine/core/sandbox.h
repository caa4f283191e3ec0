/*
** sandbox.h: a sandbox state, its limits, verdicts and signals (sandbox.c, limits.c). Core:
** it knows no event loop, no host Lua state and no tool registry.
**
** A run owns one sandbox: a Lua state with a capped allocator and only the allowlisted
** library (sandbox/allowlist.h). The script runs in a thread T of that state, resumed
** by tp_run_step. Stopping a script that is busy in Lua is done the way lua.c handles
** Ctrl-C: a count hook of 1 is set on the running thread, and the hook raises. The hook
** is set from the run's own thread: by the allocator, print, the pattern meter, or the
** handler of a signal that the stepping thread's own timer sends when a deadline passes
** (the engine's watchdog thread sends it for plugin handlers' deadlines).
** The verdict (which limit) lives in the sandbox, never in the error object, and the
** hook keeps raising until the script is out of Lua code, so pcall cannot swallow it.
*/
#ifndef tidepool_sandbox_h
#define tidepool_sandbox_h

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stddef.h>
#include <jansson.h>

#include <limits.h>

#include "lua.h"
#include "lua_patch.h"
#include "tidepool.h"
#include "json.h"
#include "watchdog.h"

/* Why a run was stopped. The limits table (limits.c) gives each its words. */
typedef enum tp_kill {
  TP_KILL_NONE = 0,
  TP_KILL_MEMORY,
  TP_KILL_INSTRUCTIONS,
  TP_KILL_CPU,
  TP_KILL_TIME,
  TP_KILL_OUTPUT,
  TP_KILL_CANCELLED,
  TP_KILL_TOOL_CALLS,
  TP_KILL_RESULT,
  TP_KILL_DIVERGENCE,      /* replay.divergence: a replayed run left its log (replay.c) */
  TP_KILL__COUNT
} tp_kill;

/* The longest words of a verdict (a divergence names two tools and two hashes). */
#define TP_KILL_NOTE_MAX 640

/* ---- sandbox ------------------------------------------------------------------------ */

/* Small blocks of a sandbox state come from its own chunks, with a free list per size
** class: a state makes and drops hundreds of them per run, and malloc/free of each was
** a third of a cold run. Off under AddressSanitizer, so it sees every block. */
#define TP_ARENA_CLASSES 16             /* 16 to 256 bytes, in steps of 16 */
#define TP_ARENA_SMALL (TP_ARENA_CLASSES * 16)
/* Chunks of closed sandboxes kept for the next ones (an engine's runs: tp_core.chunks),
** so that creating a run reuses memory that is mapped already instead of fresh pages;
** at most max chunks, linked through their first word. One thread at a time, as the
** engine. */
typedef struct tp_arena_pool {
  void *chunks;
  size_t n, max;
  /* Sandboxes kept for the next runs, each reset to the moment it was built (see
  ** tp__sandbox_create_in): at most sandboxes_max of them exist at once, idle or not. */
  struct tp_sandbox *idle;
  size_t sandboxes, sandboxes_max;
} tp_arena_pool;
void tp__arena_pool_drain(tp_arena_pool *p);  /* frees what it holds, sandboxes first */

typedef struct tp_arena {
  char *cur, *end;                      /* the free tail of the newest chunk */
  void *chunks;                         /* linked through their first word */
  void *free_[TP_ARENA_CLASSES + 1];
  tp_arena_pool *pool;                  /* where chunks come from and go back, or NULL */
  struct tp_big *big;                   /* the larger blocks, malloc'd, in a list */
} tp_arena;

typedef struct tp_sandbox {
  tp_meter meter;          /* pattern-matcher steps; the state's extra space points here */
  lua_State *L;            /* main thread: host-side work (reading results, messages) */
  lua_State *T;            /* the script's thread */
  lua_State *_Atomic running; /* the thread executing Lua now (T or a script coroutine) */

  /* memory */
  tp_arena arena;
  size_t mem_used, mem_peak, mem_cap;
  const void *fail_ptr;    /* the last refused request, to tell a retry after the */
  size_t fail_osize, fail_nsize; /* emergency collection from a fresh request */
  int fail_armed;

  /* verdicts */
  atomic_int kill;         /* tp_kill; first one wins */
  atomic_int slice_over;   /* the step's budget ended: yield at the next chance */
  int hook_yielded;        /* T or a coroutine yielded from the hook (a time slice) */

  /* instructions: counted only when a limit or a step budget asks for it */
  uint64_t instr_used;     /* completed periods of the count hook */
  uint64_t instr_limit;    /* 0 = none */
  uint64_t instr_step_end; /* instr_used value at which the step's budget ends; 0 = none */
  /* the step's end, CLOCK_MONOTONIC, once it is near (0 = not yet or none): the VM's
  ** ticks (lua_patch.h) then read the clock every tick_period ticks and end the slice,
  ** since a timer signal comes 40-60 us late here (a VM's floor), while a count hook
  ** would make Lua trap on every instruction (2-2.7x the CPU). */
  _Atomic uint64_t poll_end_ns;
  long tick_period;        /* ticks between reads of the clock, kept near TP_TICK_NS */
  uint64_t tick_last_ns;   /* the last read of the clock by a tick; 0 = none yet */

  /* host memory built on the run's behalf (tp__host_charge) */
  size_t host_used, host_cap;
  tp_json_budget json_budget;  /* the same budget for json.c's converters */

  /* output */
  json_t *logs;            /* array of strings */
  size_t logs_host;        /* what the logs hold of the host budget */
  size_t out_used, out_cap;
  int out_truncated;

  /* limits, kept for messages */
  tp_limits limits;
  char kill_note[TP_KILL_NOTE_MAX]; /* the verdict's own words, when more precise than
                           ** the code's */
  struct tp_run *run;      /* owner, for tool calls */

  int t_seen;              /* a script got T as a value (coroutine.running): a session's
                           ** next run gets a new thread, not T again (tp__sandbox_reset) */
  struct tp_snap *snap;    /* a pool's sandbox: its state as built, or NULL */
  struct tp_sandbox *next_idle;
  /* sandbox.c's tp__sandbox_loaded, for the files under sandbox.c (replay.c) */
  int (*loaded)(lua_State *L, const char *name);
} tp_sandbox;

/* Creates the sandbox state with the allowlisted library, each library built when a
** script first touches it (a session's: see tp__sandbox_full). Returns NULL when out of
** memory (host or cap). */
tp_sandbox *tp__sandbox_create(const tp_limits *limits);
/* The same with its chunks taken from and given back to pool (NULL: none), which must
** outlive the sandbox. A pool also keeps sandboxes: tp__sandbox_destroy puts a pool's
** sandbox back exactly as it was built (every byte of its state), and this hands it
** out again, which costs a copy of its memory instead of building it. A pool's sandbox
** is built in full. */
tp_sandbox *tp__sandbox_create_in(const tp_limits *limits, tp_arena_pool *pool);
void tp__sandbox_destroy(tp_sandbox *sb);
/* Readies a session's sandbox for its next run: a new script thread, empty logs,
** counters and verdicts cleared; globals stay. 0, or -1 when out of memory. */
int tp__sandbox_reset(tp_sandbox *sb);

/* The host budget. What the host builds because of a script (JSON trees, text, the
** envelope, logs, call records, messages) is charged here at what it costs in host
** memory, against a cap tied to the run's memory limit (host_cap; 0 = none). A charge
** past the cap records the limit.memory verdict and returns -1: the caller stops
** building and lets go of what it built. Refunds give back what was charged. */
int  tp__host_charge(tp_sandbox *sb, size_t n);
void tp__host_refund(tp_sandbox *sb, size_t n);
/* The host budget as json.c's converters take it (charge, refund, and stopped: the run
** has a verdict). */
#define tp__sandbox_budget(sb) (&(sb)->json_budget)

/* Appends a line that host code (a tool's ctx.log) writes to the run's logs, within the
** output cap: past it the line is cut, marked once, and later lines are dropped. Never
** raises and does not stop the run. */
void tp__sandbox_log_host(tp_sandbox *sb, const char *s, size_t len);

/* lua_load of text ("t" mode) that feeds the parser a few bytes at a time and polls
** between pieces: once sb has a verdict, or deadline_ns (CLOCK_MONOTONIC; 0 = none)
** passes (the verdict limit.time is then recorded), it stops with the verdict's
** message as the error. Lua's parser is quadratic on some texts (see sb_load). */
int tp__sandbox_load(tp_sandbox *sb, lua_State *L, lua_Reader reader, void *ud,
                     const char *name, uint64_t deadline_ns);

/* The sandbox of a sandbox state (any of its threads), or NULL for other states. */
static inline tp_sandbox *tp__sandbox_of (lua_State *L) {
  tp_meter *m = *(tp_meter **)lua_getextraspace(L);
  return (tp_sandbox *)m;  /* meter is the first member */
}

/* Records the first verdict and arms the stopping hook on the running thread. Callable
** from the run's thread only (a signal handler counts). */
void tp__sandbox_kill(tp_sandbox *sb, tp_kill why);

/* The hook that enforces verdicts, counts instructions and ends time slices. */
void tp__sandbox_hook(lua_State *L, lua_Debug *ar);

/* Sets the instruction hook (or none) on thread co according to sb's counters. */
void tp__sandbox_sethook(tp_sandbox *sb, lua_State *co);
void tp__sandbox_charge(tp_sandbox *sb, lua_State *co);  /* the part of a hook period co ran */

/* Records why as the first verdict, in its own words (the message of the run's error),
** and arms the stopping hook like tp__sandbox_kill. Returns 0, leaving the note alone,
** when another verdict came first. */
int tp__sandbox_kill_note(tp_sandbox *sb, tp_kill why, const char *fmt, ...)
  __attribute__((format(printf, 3, 4)));

/* Raises the kill verdict as a Lua error if there is one; otherwise returns. */
void tp__sandbox_check(lua_State *L, tp_sandbox *sb);

/* The code, message and hint of a verdict, for the script's error and the envelope;
** worded by the limits table (limits.c). The hint may be NULL. */
const char *tp__kill_code(tp_kill why);
void tp__kill_message(const tp_sandbox *sb, tp_kill why, char *buf, size_t len);
const char *tp__kill_hint(tp_kill why);

/* Marks the thread's active sandbox for the interrupt signal (NULL to clear). Entering
** sets the stopping hook at once when sb already has a verdict or its slice is over, so
** a signal that came before the entry is not lost. */
void tp__sandbox_enter(tp_sandbox *sb);
void tp__sandbox_leave(void);
int  tp__signal_install(void);
void tp__signal_interrupt(pthread_t thread);

/* The clocks of a step, read by the interrupt signal's handler on the stepping thread.
** A per-thread POSIX timer (CLOCK_MONOTONIC, delivered to this thread only) fires at the
** earliest of them; the handler records the verdict (limit.time, limit.cpu) or ends the
** slice, and sets the hook, so the step's end does not wait for another thread to be
** scheduled. The last TP_POLL_LEAD_NS of a step are the VM ticks' (poll_end_ns). While a
** verdict is pending the timer fires again every 2 ms (the script may be in host code,
** or its hook replaced), until the step ends. */
#define TP_POLL_LEAD_NS 200000u     /* the ticks read the clock from this before the end */
#define TP_STEP_LATE_NS 500000u     /* a step handed to the ticks and still running this
                                    ** long after its end is ended by the timer */
typedef struct tp_step_clock {
  tp_sandbox *sb;
  uint64_t poll_at_ns;     /* CLOCK_MONOTONIC: when the hook starts reading the clock
                           ** (sets sb->poll_end_ns); 0 = done or from the start */
  uint64_t deadline_ns;    /* CLOCK_MONOTONIC: limit.time; 0 = none */
  uint64_t step_end_ns;    /* CLOCK_MONOTONIC: the step's budget; 0 = none */
  uint64_t cpu_end_ns;     /* CLOCK_THREAD_CPUTIME_ID of this thread: limit.cpu; 0 = none */
  uint64_t start_ns, cpu_start_ns; /* the step's start on both clocks */
  uint64_t wake_ns;        /* when the timer is armed to fire */
  int handed;              /* the timer handed the step's end to the ticks: it fires again
                           ** TP_STEP_LATE_NS after the end should the ticks miss it */
  struct tp_step_clock *prev; /* the step this one is nested in, on this thread */
} tp_step_clock;

/* Sets the end of the step that the VM's ticks read the clock for (0: none), from
** now. On the sandbox's own thread only. */
void tp__sandbox_poll(tp_sandbox *sb, uint64_t end_ns);

/* Arms this thread's timer for c (filled in but for wake_ns and prev). Returns -1 when
** the timer cannot be created (the caller falls back to the watchdog). */
int  tp__step_timer_arm(tp_step_clock *c);
/* Disarms c (armed on this thread) and re-arms the step it was nested in, if any. After
** it returns, the handler no longer touches c. */
void tp__step_timer_disarm(tp_step_clock *c);
/* Stops this thread's timer when no step is armed (it is left armed between steps). */
void tp__step_timer_stop(void);

/* A plugin handler's coroutine that host.c resumes on this thread: when the thread is
** signalled (the watchdog does so once the innermost resume's deadline passed) and
** deadline_ns has passed, the signal handler sets expired and sets hook on co with a
** count of 1, so a handler busy in Lua stops. Installs t (NULL: none) and returns the
** previous one, for nesting. */
typedef struct tp_host_target {
  lua_State *co;
  atomic_int expired;
  lua_Hook hook;
  uint64_t deadline_ns;
} tp_host_target;
tp_host_target *tp__signal_host_target(tp_host_target *t);

/* ---- what the script's side of tools shares with the sandbox (namespace.c) ---------- */

/* What a script is told when it calls a tool where Lua cannot yield. */
#define TP_MSG_CANNOT_WAIT "a tool was called where Lua cannot wait for it: inside a " \
  "function that C code called (a gsub or table.sort callback, an xpcall message handler, " \
  "a metamethod run by a library function such as tostring); call it outside that " \
  "callback and pass the result in"

extern char tp__request_tag;  /* first value of a yield that is a host request */
extern char tp__readonly_key; /* in a metatable: rawset refuses the table */

/* The pre-run check (precheck.c) reads what the globals' __index knows: the message
** of a foreign name (`null`, `await`...) or NULL, and whether f is that __index. */
const char *tp__sandbox_foreign_say(const char *name);
int tp__sandbox_globals_index_is_ours(lua_CFunction f);

/* Libraries built when first touched (sandbox.c): a session's sandbox builds each library
** (string, table, math, utf8, coroutine, os, json, getmetatable("")'s copy) the first
** time it is read through; a pool's is built in full. tp__sandbox_full set (tests only)
** builds every sandbox in full, to compare. */
extern int tp__sandbox_full;
/* The real table behind the read-only library proxy on top of L, built if it was still
** waiting, pushed: 1; or 0, nothing pushed, for any other value and for json (its
** __index is a function). May raise (memory). */
int tp__sandbox_library(lua_State *L);
/* Pushes the registry's LOADED[name] of a sandbox state, the library built first if it
** was still waiting; returns its type. May raise (memory). */
int tp__sandbox_loaded(lua_State *L, const char *name);

/* Opens tools, parallel into the sandbox's new globals table on top of L. */
void tp__tools_open(lua_State *L);

/* ---- verdict.c: the count hook and the VM's ticks (sandbox.c sets them up) ---- */
#define METER_STEPS 4096       /* pattern steps between checks */
#define TICK_OFF (LONG_MAX / 2)  /* a meter's tickdown while no time slice is polled */
/* Sets co's count hook to period (see verdict.c). */
/* Arms the VM's ticks when a time slice is polled (poll_end_ns), else turns them off. */
void tp__sandbox_tick_arm(tp_sandbox *sb);
void tp__sandbox_count_hook(lua_State *co, int period);
/* tp_meter's tick and refill (lua_patch.h) of every sandbox. */
void tp__sandbox_meter_tick(lua_State *L, tp_meter *m);
void tp__sandbox_meter_refill(lua_State *L, tp_meter *m);

#endif
