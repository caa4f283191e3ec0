/*
** internal.h: what the engine's C files share. Not installed; the public API is
** include/tidepool.h.
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
#include "json.h"

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

/* Small blocks of a sandbox state come from its own chunks, with a free list per size
** class: a state makes and drops hundreds of them per run, and malloc/free of each was
** a third of a cold run. Off under AddressSanitizer, so it sees every block. */
#define TP_ARENA_CLASSES 16             /* 16 to 256 bytes, in steps of 16 */
#define TP_ARENA_SMALL (TP_ARENA_CLASSES * 16)
typedef struct tp_arena {
  char *cur, *end;                      /* the free tail of the newest chunk */
  void *chunks;                         /* linked through their first word */
  void *free_[TP_ARENA_CLASSES + 1];
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
  int in_host;             /* host code is running Lua (reading results): no slicing */

  /* instructions: counted only when a limit or a step budget asks for it */
  uint64_t instr_used;     /* completed periods of the count hook */
  uint64_t instr_limit;    /* 0 = none */
  uint64_t instr_step_end; /* instr_used value at which the step's budget ends; 0 = none */
  int hook_period;         /* the count hook's period on T, 0 = no count hook */
  /* the step's end, CLOCK_MONOTONIC, once it is near (0 = not yet or none): the count
  ** hook then reads the clock every TP_POLL_PERIOD instructions and ends the slice
  ** itself, since a timer signal comes tens of microseconds late (a VM's floor here). */
  _Atomic uint64_t poll_end_ns;

  /* host memory built on the run's behalf (tp__host_charge) */
  size_t host_used, host_peak, host_cap;
  tp_json_budget json_budget;  /* the same budget for json.c's converters */

  /* output */
  json_t *logs;            /* array of strings */
  size_t logs_host;        /* what the logs hold of the host budget */
  size_t out_used, out_cap;
  int out_truncated;

  /* limits, kept for messages */
  tp_limits limits;
  char kill_note[200];     /* the verdict's own words, when more precise than the code's */
  struct tp_run *run;      /* owner, for tool calls */
} tp_sandbox;

/* Creates the sandbox state with the allowlisted library. Returns NULL when out of
** memory (host or cap). */
tp_sandbox *tp__sandbox_create(const tp_limits *limits);
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
tp_sandbox *tp__sandbox_of(lua_State *L);

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
** scheduled. The last TP_POLL_LEAD_NS of a step are the hook's (poll_end_ns). While a
** verdict is pending the timer fires again every 2 ms (the script may be in host code,
** or its hook replaced), until the step ends. */
#define TP_POLL_PERIOD 128          /* instructions between reads of the clock */
#define TP_POLL_LEAD_NS 200000u     /* the hook reads the clock from this before the end */
typedef struct tp_step_clock {
  tp_sandbox *sb;
  uint64_t poll_at_ns;     /* CLOCK_MONOTONIC: when the hook starts reading the clock
                           ** (sets sb->poll_end_ns); 0 = done or from the start */
  uint64_t deadline_ns;    /* CLOCK_MONOTONIC: limit.time; 0 = none */
  uint64_t step_end_ns;    /* CLOCK_MONOTONIC: the step's budget; 0 = none */
  uint64_t cpu_end_ns;     /* CLOCK_THREAD_CPUTIME_ID of this thread: limit.cpu; 0 = none */
  uint64_t start_ns, cpu_start_ns; /* the step's start on both clocks */
  uint64_t wake_ns;        /* when the timer is armed to fire */
  struct tp_step_clock *prev; /* the step this one is nested in, on this thread */
} tp_step_clock;

/* Arms this thread's timer for c (filled in but for wake_ns and prev). Returns -1 when
** the timer cannot be created (the caller falls back to the watchdog). */
int  tp__step_timer_arm(tp_step_clock *c);
/* Disarms c (armed on this thread) and re-arms the step it was nested in, if any. After
** it returns, the handler no longer touches c. */
void tp__step_timer_disarm(tp_step_clock *c);
/* Stops this thread's timer when no step is armed (it is left armed between steps). */
void tp__step_timer_stop(void);

/* A plugin handler's coroutine that host.c resumes on this thread: once expired is set
** (its call's deadline passed; the watchdog then signals the thread), the signal handler
** sets hook on co with a count of 1, so a handler busy in Lua stops. Installs t (NULL:
** none) and returns the previous one, for nesting. */
typedef struct tp_host_target {
  lua_State *co;
  atomic_int expired;
  lua_Hook hook;
} tp_host_target;
tp_host_target *tp__signal_host_target(tp_host_target *t);

/* ---- source normalization (normalize.c) ------------------------------------------ */

/* What models send: the body of the first markdown fence (prose around it dropped), or
** else the text without a leading #! line. Returns a pointer into src and the length
** through *len; never allocates. run.c uses it only for text that does not compile. */
const char *tp__normalize(const char *src, size_t *len);
/* The body of the first fence (```, ~~~) and its length through *len, or NULL when src
** has none; *open_line (may be NULL) is the 1-based line of the opening fence. */
const char *tp__normalize_fence(const char *src, size_t *len, int *open_line);
/* src without a leading "#!" line (its newline kept, so line numbers hold). */
const char *tp__normalize_shebang(const char *src, size_t *len);

/* ---- runs (run.c) ---------------------------------------------------------------- */

/* A registered tool. */
typedef struct tp_tool {
  char *name, *description, *origin;  /* origin: "file.lua:12" for plugins, or NULL */
  json_t *input, *output;             /* the schema documents, for describe */
  struct tp_schema *in_schema, *out_schema;
  tp_tool_fn fn;                      /* C handler, or NULL */
  void *ud;
  int lua_ref;                        /* handler in the host state, or LUA_NOREF */
  uint64_t timeout_us;
} tp_tool;

struct tp_engine {
  tp_watchdog wd;
  tp_run *runs;            /* live runs, for destroy */
  tp_tool **tools;         /* sorted by name */
  size_t ntools, captools;
  char *error;             /* tp_engine_error */
  struct uv_loop_s *loop;
  lua_State *H;            /* the host Lua state (host.c), or NULL until needed */
  struct uv_idle_s *idle;  /* steps the runs started with tp_run_start */
  int idle_on;
  uint64_t round;          /* the idle driver's round (run.c, idle_cb) */
  uint64_t slice_us;       /* time slice of a started run; default 5 ms */
  uint64_t run_ids;        /* the last run id given out */
  char *workspace;
  uint64_t workspace_max;  /* tp_engine_set_workspace_max, when workspace_max_set */
  int workspace_max_set;
  char *remotes_dir;       /* for $ref in tool schemas; NULL */
  struct tp_kvstore *kv;   /* the kv tools' store when shared with other engines
                           ** (borrowed: outlives e), or NULL: the host state has its own */
};

/* ---- tools (tools.c) --------------------------------------------------------------- */

/* What a script is told when it calls a tool where Lua cannot yield. */
#define TP_MSG_CANNOT_WAIT "a tool was called where Lua cannot wait for it: inside a " \
  "function that C code called (a gsub or table.sort callback, an xpcall message handler, " \
  "a metamethod run by a library function such as tostring); call it outside that " \
  "callback and pass the result in"

extern char tp__request_tag;  /* first value of a yield that is a host request */
extern char tp__readonly_key; /* in a metatable: rawset refuses the table */

const tp_tool *tp__tool_find(const tp_engine *e, const char *name);
void tp__engine_set_error(tp_engine *e, const char *fmt, ...);
void tp__engine_free_tools(tp_engine *e);
/* Opens tools, parallel into the sandbox's new globals table on top of L. */
void tp__tools_open(lua_State *L);
/* Adds a tool whose handler is a Lua function in the host state (host.c). */
int tp__engine_add_lua_tool(tp_engine *e, const tp_tool_def *def, const json_t *in,
                            const json_t *out, int lua_ref, const char *origin);

/* Calls as the run sees them (run.c) */
typedef struct tp_run_calls tp_run_calls;
struct tp_run *tp__sandbox_run(tp_sandbox *sb);
void tp__sandbox_set_run(tp_sandbox *sb, struct tp_run *r);
/* The completion of call id, if any: 1 done (ok/result or code/message set, to be
** freed by tp__call_consume), 0 still running. */
int tp__call_ready(struct tp_run *r, uint64_t id);
/* Pushes the result (returns 1) or the error object (returns 0) of a ready call onto L
** and forgets it. */
int tp__call_consume(struct tp_run *r, uint64_t id, lua_State *L);

/* host.c: the host Lua state */
int  tp__host_open(tp_engine *e);
void tp__host_close(tp_engine *e);

/* handles.c. Counts the handles of e's loop that are neither closing nor the engine's
** own: what a program or a plugin left open, which tp_engine_destroy then closes.
** Call it once every run is destroyed (their calls' handles are closing then) and
** before the host state is closed. Returns how many. */
size_t tp__engine_count_open_handles(tp_engine *e);
/* The number counted over the process's life, and through *what (may be NULL) the types
** of the last engine's ("timer (active), ..."); for the C tests (spec/c/tp_test.h). */
size_t tp__engine_open_handles(const char **what);
void tp__host_dispatch(tp_engine *e, tp_call *c, const tp_tool *t, const json_t *args);
void tp__host_cancel(tp_engine *e, tp_call *c);
/* Discovery for a script: sb is the run's sandbox (its verdict stops the work), or NULL
** for the engine's own callers. */
char *tp__host_describe(tp_engine *e, tp_sandbox *sb, const char *format, const char *tool);
char *tp__host_search(tp_engine *e, tp_sandbox *sb, const char *query);

/* kvstore.c: the store of the kv.* tools, shareable between engines (and threads). */
typedef struct tp_kvstore tp_kvstore;
tp_kvstore *tp__kvstore_new(void);            /* one reference; NULL when out of memory */
void tp__kvstore_ref(tp_kvstore *kv);
void tp__kvstore_unref(tp_kvstore *kv);       /* frees it with the last reference */
/* require("tidepool.kv") in the host state; upvalue 1: the shared store (light
** userdata) or nil for a store of the state's own. */
int tp__kvstore_open(lua_State *L);

/* fs.c: pushes the table of workspace-confined file functions (host state only). */
int tp__open_fs(lua_State *L);

/* ---- runs and calls ---------------------------------------------------------------- */

/* The envelope's "calls" lists the first TP_CALLS_LISTED calls of a run one record each;
** when there were more, one summary record follows, counting the calls after them:
** {"summary":true,"calls":N,"failed":F,"by_tool":{"kv.get":N,...,"other":N}}, with at
** most TP_CALLS_BY_TOOL names in by_tool (later names count under "other"). The run
** keeps only these counters for such calls, so its host memory does not grow with the
** number of calls it makes. */
#define TP_CALLS_LISTED 100
#define TP_CALLS_BY_TOOL 20
/* The longest tool name the host copies out of a script (tool names are at most 128
** bytes; a longer one is cut to this many bytes, and the call is tool.unknown). */
#define TP_TOOL_NAME_MAX 256
/* Messages the host keeps for a script (of failed calls, in error objects and the
** envelope) are cut to TP_MSG_MAX bytes, on a UTF-8 boundary, ending in TP_MSG_CUT. */
#define TP_MSG_MAX 2048
#define TP_MSG_CUT "...[cut]"

typedef struct tp_calls_summary {
  uint64_t calls, failed;  /* calls counted here; those that did not end ok */
  uint64_t other;          /* calls of tools past the first TP_CALLS_BY_TOOL names */
  size_t ntools;
  struct { char *name; uint64_t n; } by_tool[TP_CALLS_BY_TOOL];
} tp_calls_summary;

/* The length of s[0..len) cut to at most max bytes, backed off to a UTF-8 boundary. */
size_t tp__cut_utf8(const char *s, size_t len, size_t max);

enum { ST_READY, ST_STARTED, ST_DONE };

struct tp_run {
  tp_engine *e;
  uint64_t id;             /* unique within the engine, from 1 */
  tp_run *prev, *next;     /* the engine's live runs */
  tp_sandbox *sb;
  char *src;               /* normalized source, for the "source" line of errors */
  size_t srclen;
  int state;
  int nargs;               /* values to resume the thread with */
  tp_watch watch;          /* the fallback when the thread's timer is unavailable */
  tp_step_clock clock;     /* the step's deadlines, for the thread's timer */
  int timed;               /* the step runs under clock (0: under watch) */
  pthread_t thread;        /* of the current step */
  clockid_t cpu_clock;
  uint64_t start_ns, deadline_ns, step_end_ns;
  uint64_t compile_ns;     /* wall time the compile took, charged to the first step */
  uint64_t cpu_used_ns, step_cpu0;
  int compiled;            /* 0: pending_error is the syntax error */
  /* tool calls (tools.c). The run holds the calls listed in the envelope (the first
  ** TP_CALLS_LISTED) and the later calls the script has not taken yet; a later call is
  ** let go, its outcome folded into `summary`, once it is done and taken. */
  tp_call **callv;         /* the calls held, by increasing id; NULL where let go */
  uint64_t *callid;        /* callid[i]: the id of callv[i], kept where callv[i] is NULL */
  size_t ncallv, capcallv, nholes;
  size_t active_from;      /* callv[i] for i below this are all done or let go */
  uint32_t ready_count;    /* done calls the script has not taken yet */
  struct { const void *tool; uint32_t n; } *per_tool;  /* calls per tool, when limited */
  size_t nper_tool;
  uint64_t next_call_id;
  uint64_t ncalls;         /* every call attempt, the count limit.tool_calls checks */
  uint32_t in_flight;
  tp_calls_summary summary;/* the calls past the listed ones that were let go */
  int waiting;             /* the script is blocked on calls */
  struct uv_timer_s *timer;/* deadlines while the script waits (host loop) */
  json_t *pending_error;   /* an error decided before the run started */
  char *envelope;
  size_t envelope_cost;    /* what the envelope was charged to the host budget */
  int ok;
  /* driven by the engine's loop (tp_run_start) */
  tp_run_done_cb done_cb;
  void *done_ud;
  int async, reported;
  uint64_t round;          /* the engine's round in which the driver last stepped it */
  struct tp_session *session; /* the run borrows the session's sandbox */
  uint64_t fs_used;        /* bytes charged to limits.fs_bytes (host.c, E.fs_charge) */
  uint64_t blocked_ns;     /* time plugin handlers held the thread past 100 ms (host.c) */
  char blocked_hint[300];  /* the hint of a time limit those blocks explain, or "" */
  /* tp__run_set_call_hook: told when a tool call of the run starts and ends */
  void (*call_hook)(struct tp_run *r, const char *tool, int done, void *ud);
  void *call_hook_ud;
};

struct tp_session {
  tp_engine *e;
  tp_sandbox *sb;
  tp_run *busy;            /* the run using the sandbox now */
  uint64_t runs;
};

/* The async driver (run.c): a call of r completed or a deadline passed. */
void tp__run_wake(tp_run *r);
void *tp__engine_loop(tp_engine *e);  /* the uv_loop_t */

/* Sets a hook told when each tool call of r starts (done 0) and completes (done 1),
** for progress reports (mcp.c). It is called from inside steps and completions, so
** it must not touch the run or the engine. NULL clears it. */
void tp__run_set_call_hook(tp_run *r, void (*hook)(tp_run *r, const char *tool,
                           int done, void *ud), void *ud);

/* Removes every plugin tool (handler in the host state: lua_ref, released here) so
** the plugin directories can be loaded again (mcp.c, when a directory changes). Only
** while no run is alive, since calls point at their tools. Returns how many. */
size_t tp__engine_drop_plugin_tools(tp_engine *e);

enum { CALL_QUEUED, CALL_RUNNING, CALL_DONE };

struct tp_call {
  tp_run *run;             /* NULL once the run let go of it */
  tp_engine *e;
  uint64_t id;
  const tp_tool *tool;     /* NULL: unknown tool */
  char *name;
  json_t *args;
  char *args_text;         /* lazily made by tp_call_args */
  int state;               /* CALL_* */
  int handler_owns;        /* the handler has not completed it yet */
  int cancelled, consumed;
  int ok;
  json_t *result;          /* when ok */
  char *code, *message;    /* when not ok */
  int line;
  uint64_t start_ns, end_ns, deadline_ns;
  size_t bytes_in, bytes_out;
  size_t args_cost, result_cost;  /* parts of `charged` held by the args and result trees */
  int host_ref;            /* host.c: the handler's coroutine, or LUA_NOREF */
  size_t charged;          /* what the run's host budget holds for this record */
};

void tp__call_finish(tp_call *c, int ok, json_t *result, const char *code, const char *msg);
/* Completes a handler's call with a result tree (stolen), checked like tp_call_complete. */
int tp__call_complete_tree(tp_call *c, json_t *result);
char *tp__run_calls_text(tp_run *r, size_t *len);
void tp__run_cancel_calls(tp_run *r);
/* The run lets go of every call it holds (at its destruction); handlers that still own
** a call keep it until they complete it. */
void tp__run_free_calls(tp_run *r);
void tp__call_release(tp_call *c);
tp_call *tp__call_find(tp_run *r, uint64_t id);
/* Advances r->active_from past done calls; returns it. */
size_t tp__run_active_from(tp_run *r);

#endif
