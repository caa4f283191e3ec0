/*
** tidepool.h: the whole public C API of tidepool, a code-mode execution engine for
** agents. A model writes one Lua script; tidepool runs it in a fresh, stripped Lua 5.4
** state under hard limits and returns a JSON result envelope:
**
**   {"ok":true,"result":...,"logs":[...],"calls":[...],"stats":{...}}
**   {"ok":false,"error":{"code":"limit.memory","message":...,"line":7,...},...}
**
** Conventions:
** - Objects are opaque and come in create/destroy pairs; destroy(NULL) is a no-op.
** - Functions that can fail return an int: TP_OK (0) or a negative TP_E* code, and never
**   call back into the caller after returning an error.
** - Strings returned as `const char *` belong to the object they came from and stay valid
**   until that object is destroyed or the call's comment says otherwise. Strings returned
**   as `char *` belong to the caller, who frees them with tp_free().
** - An engine and its runs are used from one thread at a time (the engine's own watchdog
**   thread is internal). Separate engines are independent.
** - The library exports the functions marked TP_EXTERN and nothing else. Its own copy of
**   Lua (5.4.7, with a pattern matcher that limits can stop) and the luv and lpeg of its
**   host state are private to it: a program that links another Lua (Debian's liblua5.4,
**   LuaJIT) keeps its own, ahead of libtidepool or after it, and tidepool's sandboxes
**   still run on tidepool's Lua. For the same reason the host state of an embedded
**   engine loads no Lua C modules (they would bind to the program's Lua, if any).
*/
#ifndef TIDEPOOL_H
#define TIDEPOOL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* TP_EXTERN marks the public functions. The library is compiled with -fvisibility=hidden,
** so these are the only symbols libtidepool.so exports; libtidepool.a holds one object
** whose only global symbols are these. Define TP_EXTERN before including this header to
** add attributes of your own (it must keep the default visibility). */
#ifndef TP_EXTERN
# if defined(__GNUC__) || defined(__clang__)
#  define TP_EXTERN extern __attribute__((visibility("default")))
# else
#  define TP_EXTERN extern
# endif
#endif

#define TP_VERSION_MAJOR 0
#define TP_VERSION_MINOR 1
#define TP_VERSION_PATCH 0

/* Status codes. */
#define TP_OK        0   /* success */
#define TP_DONE      0   /* tp_run_step: the run has finished (see tp_run_envelope) */
#define TP_YIELD     1   /* tp_run_step: the step's budget ran out; step again */
#define TP_WAIT      2   /* tp_run_step: the script waits on pending requests */
#define TP_EINVAL  (-1)  /* a NULL or invalid argument */
#define TP_ENOMEM  (-2)  /* the host ran out of memory */
#define TP_ESTATE  (-3)  /* the call does not fit the object's state (e.g. step after done) */

/* The meaning of a status code, for a person: "invalid argument" for TP_EINVAL, ...;
** "unknown status" for a code that is none of the above. Static string. */
TP_EXTERN const char *tp_strerror(int code);

typedef struct tp_engine tp_engine;
typedef struct tp_run tp_run;

/*
** Limits of one run. tp_limits_init() fills in the defaults below; a field set to 0
** afterwards means "no limit" (memory and source keep a hard floor of sanity: 0 is
** refused for them). Sizes are bytes, durations microseconds.
*/
typedef struct tp_limits {
  size_t   memory;        /* bytes of the run's Lua state; default 64 MiB */
  uint64_t instructions;  /* VM instructions; default 0 (off: a count hook costs ~2x) */
  uint64_t cpu_us;        /* CPU time of the run; default 10 s */
  uint64_t wall_us;       /* wall-clock time from the first step; default 10 s */
  size_t   output;        /* bytes printed (logs); default 1 MiB */
  size_t   source;        /* bytes of script source; default 1 MiB */
  size_t   result;        /* bytes of the JSON result; default 4 MiB */
  uint32_t tool_calls;    /* tool calls per run; default 1000 */
  uint32_t tool_calls_per_tool; /* calls of any one tool per run; default 0 (none) */
  uint32_t tool_in_flight;/* calls running at once; more wait their turn; default 32 */
  size_t   tool_bytes;    /* JSON bytes of one call's arguments, and of its result; 4 MiB */
  uint64_t tool_timeout_us; /* a call's own deadline (the tool's, if shorter); 30 s */
  uint64_t fs_bytes;      /* bytes the fs.* tools may write in one run (a write counts
                          ** at least 4 KiB, a new directory 4 KiB); default 64 MiB */
} tp_limits;

/* Fills *l with the defaults. */
TP_EXTERN void tp_limits_init(tp_limits *l);

/* The library's version, "MAJOR.MINOR.PATCH". Static string. */
TP_EXTERN const char *tp_version(void);

/* Frees a string the library returned as `char *`. NULL is a no-op. */
TP_EXTERN void tp_free(void *p);

/* ---- engine ---------------------------------------------------------------------- */

/* Creates an engine. Returns NULL when out of memory. */
TP_EXTERN tp_engine *tp_engine_create(void);

/* Destroys the engine. Every run created from it must have been destroyed first;
** runs still alive are destroyed here. NULL is a no-op. */
TP_EXTERN void tp_engine_destroy(tp_engine *e);

/*
** Runs a script to completion synchronously and returns its envelope as a JSON string
** in *envelope (caller frees with tp_free). limits may be NULL for the defaults. The
** return value is TP_OK when an envelope was produced, whether the script succeeded or
** failed (read "ok" in the envelope, or *script_ok when not NULL); negative on a host
** error (then *envelope is NULL).
*/
TP_EXTERN int tp_engine_run(tp_engine *e, const char *source, size_t len,
                            const tp_limits *limits, char **envelope, int *script_ok);

/* Compiles a script without running it; the envelope is that of tp_engine_run with
** "result": null on success, or the syntax error. Same ownership and return values. */
TP_EXTERN int tp_engine_check(tp_engine *e, const char *source, size_t len,
                              const tp_limits *limits, char **envelope, int *script_ok);

/* ---- runs: a script as a resumable object ------------------------------------------
**
** tp_run_create normalizes and compiles the source in a fresh sandbox; nothing runs
** yet. tp_run_step runs it until it finishes (TP_DONE), its budget runs out (TP_YIELD),
** or it waits on pending requests (TP_WAIT). A game server calls tp_run_step once per
** frame with a small budget; the run's own limits (wall, cpu, memory, ...) hold across
** steps, and wall time counts from the first step. A compile error is not a create
** error: the run is created and its first step returns TP_DONE with the syntax error
** in the envelope.
*/

/* Creates a run. limits may be NULL (defaults). Returns NULL when out of memory or when
** e or source is NULL. */
TP_EXTERN tp_run *tp_run_create(tp_engine *e, const char *source, size_t len,
                                const tp_limits *limits);

/* Runs for at most budget_us microseconds of wall time and budget_instructions VM
** instructions (0 = no budget of that kind). Returns TP_DONE, TP_YIELD, TP_WAIT, or a
** negative code (TP_ESTATE after TP_DONE, TP_EINVAL for NULL). */
TP_EXTERN int tp_run_step(tp_run *r, uint64_t budget_us, uint64_t budget_instructions);

/* ---- the interrupt signal ------------------------------------------------------------
**
** A script busy in Lua is stopped (a time or CPU limit, the end of a step's budget) by a
** signal sent to the thread that steps it: the library installs a handler for SIGURG
** (with SA_RESTART, chaining a handler installed before it for signals not meant for a
** sandbox) at the first step of a run, and puts the previous action back when it is
** unloaded. A timed step arms a POSIX timer of its own thread (timer_create with
** SIGEV_THREAD_ID on CLOCK_MONOTONIC, one per thread that steps runs, deleted when the
** thread exits), so the step ends on time whatever other threads do; the last 200 us of
** a step are ended by the VM's count hook reading the clock. While a limit's verdict
** waits for the script, the signal repeats every 2 ms. The timer stays armed between
** steps (one system call less per step): a thread that stops stepping gets at most one
** more signal, at the earliest deadline of the runs it stepped, unless it destroys the
** engine. Plugin handlers' deadlines are signalled by one helper thread per engine. The
** signal must not be blocked in a thread that steps runs, or a script that loops is
** stopped only by its instruction limit. System calls it interrupts are restarted
** (EINTR only where the system never restarts, e.g. poll with a timeout).
*/

/* Picks the signal the library uses instead of SIGURG (e.g. SIGRTMIN + n when the
** program uses SIGURG itself). Process-wide; call it before the first step of any run.
** TP_OK, TP_EINVAL for a signal that cannot be caught, TP_ESTATE once the handler is
** installed for another signal. */
TP_EXTERN int tp_set_signal(int signo);
/* The signal the library uses (or will use). */
TP_EXTERN int tp_get_signal(void);

/* Stops the run: its envelope becomes the error "cancelled". A finished run is left as
** it is. Safe to call between steps. NULL is a no-op. */
TP_EXTERN void tp_run_cancel(tp_run *r);

/* Nonzero once the run has finished. */
TP_EXTERN int tp_run_done(const tp_run *r);

/* The envelope of a finished run, as compact JSON; NULL before the run is done. Owned
** by the run. */
TP_EXTERN const char *tp_run_envelope(const tp_run *r);

/* Destroys the run (finished or not). NULL is a no-op. */
TP_EXTERN void tp_run_destroy(tp_run *r);

/* Hands the run to the engine's loop: tp_engine_poll (or the loop of tp_engine_run)
** steps it in time slices, round-robin with the other started runs, while its tool
** calls wait without blocking anyone; done is called once, when the run has finished
** (tp_run_envelope is ready), and may destroy the run. */
typedef void (*tp_run_done_cb)(tp_run *r, void *ud);
TP_EXTERN int tp_run_start(tp_run *r, tp_run_done_cb done, void *ud);

/* ---- sessions: globals kept from one run to the next --------------------------------
** A session owns one sandbox; its runs execute in it one at a time, so a script can use
** what an earlier one left in globals. Its memory limit holds for the whole session. */
typedef struct tp_session tp_session;

/* Creates a session with these limits (NULL: defaults). NULL when out of memory. */
TP_EXTERN tp_session *tp_session_create(tp_engine *e, const tp_limits *limits);

/* A run in the session (the session's limits apply). NULL when another run of the
** session is not yet destroyed, or out of memory. */
TP_EXTERN tp_run *tp_session_run(tp_session *s, const char *source, size_t len);

/* Bytes the session's sandbox holds now. */
TP_EXTERN size_t tp_session_memory(const tp_session *s);

/* Destroys the session (and its run, if any). NULL is a no-op. */
TP_EXTERN void tp_session_destroy(tp_session *s);

/* ---- tools ---------------------------------------------------------------------------
**
** A script calls tools.weather.current{city = "Paris"}: the call yields the script to
** the host, the arguments are checked against the tool's input schema, the handler
** runs, the result is checked against the output schema, and the script goes on with
** it (or gets an error object with a stable code: tool.unknown, tool.invalid_input,
** tool.invalid_output, tool.failed, tool.timeout, tool.denied, limit.tool_calls).
**
** A tool registered with a handler is called by the engine as soon as the script asks;
** the handler completes the call then or later (from the engine's thread), exactly
** once, with tp_call_complete or tp_call_fail, even after tp_call_cancelled() turned
** true. A tool registered without a handler leaves its calls pending: the embedding
** program lists them with tp_run_pending after a step returned TP_WAIT, and completes
** them when it likes (a game server, frame by frame). The tp_call stays valid until it
** has been completed and its run has been destroyed, or, for a call after a run's first
** 100, until it has been completed and the script has taken its outcome: a run does not
** keep every call it makes. Complete a call once, and do not use it afterwards.
*/

typedef struct tp_call tp_call;
typedef void (*tp_tool_fn)(tp_call *call, void *ud);

typedef struct tp_tool_def {
  const char *name;           /* dotted: "weather.current" becomes tools.weather.current */
  const char *description;    /* what the model reads; may be NULL */
  const char *input_schema;   /* JSON Schema text (2020-12 or draft-07); NULL: any object */
  const char *output_schema;  /* JSON Schema text; NULL: anything */
  tp_tool_fn handler;         /* NULL: completed by the embedding program (tp_run_pending) */
  void *ud;                   /* passed to handler */
  uint64_t timeout_us;        /* 0: the run's tool_timeout_us */
} tp_tool_def;

/* Registers a tool (strings are copied, schemas compiled once). TP_EINVAL on a bad
** name, a duplicate, or a schema that does not compile: tp_engine_error says why. */
TP_EXTERN int tp_engine_add_tool(tp_engine *e, const tp_tool_def *def);

/* Loads every *.lua plugin of a directory into the engine's host Lua state. Returns the
** number of tools added, or a negative code when the directory cannot be read. A broken
** plugin is skipped and reported (file:line: why) in tp_engine_error, which lists every
** problem of the last call, one per line; the other plugins still load. */
TP_EXTERN int tp_engine_load_tools(tp_engine *e, const char *dir);

/* Confines the fs.* built-in tools to this directory (and offers them). */
TP_EXTERN int tp_engine_set_workspace(tp_engine *e, const char *dir);

/* Caps how many bytes the fs.* tools may add to the workspace, net, over what it held
** when first used in this process (shared by every engine of the process using that
** directory); default 1 GiB, 0 = no cap. Takes effect for workspaces opened after it. */
TP_EXTERN int tp_engine_set_workspace_max(tp_engine *e, uint64_t bytes);

/* The message of the last failed call on e, or "" (owned by e). */
TP_EXTERN const char *tp_engine_error(const tp_engine *e);

/* The tools as the model reads them: LuaCATS annotations with a preamble that explains
** the sandbox (format "lua"), or a run_lua tool definition as JSON (format "json").
** Caller frees with tp_free. NULL for an unknown format or out of memory. */
TP_EXTERN char *tp_engine_describe(tp_engine *e, const char *format);

/* Runs the engine's event loop: once without waiting (block 0) or until something
** happened (block 1). Tool handlers that wait (timers, files, processes) and call
** deadlines progress only while the loop runs. Returns nonzero while work is pending. */
TP_EXTERN int tp_engine_poll(tp_engine *e, int block);

/* The calls of r that wait for the embedding program (tools without handler), at most
** max of them, oldest first; returns how many. */
TP_EXTERN size_t tp_run_pending(tp_run *r, tp_call **calls, size_t max);

/* "weather.current"; owned by c */
TP_EXTERN const char *tp_call_tool(const tp_call *c);
/* The arguments as JSON text; owned by c, valid until the call is completed. */
TP_EXTERN const char *tp_call_args(tp_call *c);
/* Unique within its run, from 1. */
TP_EXTERN uint64_t tp_call_id(const tp_call *c);
/* Nonzero once the run ended or the call timed out. */
TP_EXTERN int tp_call_cancelled(const tp_call *c);

/* Completes the call with its result as JSON text (len may be 0 for NUL-terminated).
** TP_ESTATE if it was completed already. */
TP_EXTERN int tp_call_complete(tp_call *c, const char *result_json, size_t len);

/* Fails the call. code: "tool.failed" when NULL, or another tool.* code; message for
** the model (what went wrong, what to do). TP_ESTATE if completed already. */
TP_EXTERN int tp_call_fail(tp_call *c, const char *code, const char *message);

/* ---- policy: every tool call passes it before its arguments are checked ------------
** fn sees each call a script makes to a registered tool (tp_call_tool, tp_call_args) and
** returns TP_POLICY_ALLOW, TP_POLICY_DENY (the call fails with code "tool.denied", and
** the reason fn wrote into reason[0..len) is in its message), or TP_POLICY_HOLD: the
** call stays pending, its script waiting, until tp_call_decide(call, TP_POLICY_ALLOW or
** TP_POLICY_DENY, reason) is called once for it, from the engine's thread. A held call
** whose run ended meanwhile must still be decided (tp_call_decide then returns
** TP_ESTATE and lets go of it). fn NULL: every call is allowed (the default). */
#define TP_POLICY_ALLOW 0
#define TP_POLICY_DENY  1
#define TP_POLICY_HOLD  2
typedef int (*tp_policy_fn)(tp_call *call, void *ud, char *reason, size_t len);
TP_EXTERN int tp_engine_set_policy(tp_engine *e, tp_policy_fn fn, void *ud);
TP_EXTERN int tp_call_decide(tp_call *call, int verdict, const char *reason);

#ifdef __cplusplus
}
#endif

#endif
