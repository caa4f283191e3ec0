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

/* Every status code above in one table, XX(NAME, text): NAME is the code's name without
** its TP_ prefix (TP_DONE is TP_OK's value, so it is not a row), text its meaning for a
** person. A new code is one #define above plus one row here, with a value never used
** before (the values are part of libtidepool.so.0's ABI and never change). As libuv's
** UV_ERRNO_MAP: #define XX(n, t) case TP_##n: ... TP_ERRNO_MAP(XX) #undef XX. */
#define TP_ERRNO_MAP(XX)                                                    \
  XX(OK,     "success (or, from tp_run_step, the run has finished)")      \
  XX(YIELD,  "the step's budget ran out; step again")                      \
  XX(WAIT,   "the script waits on pending requests")                       \
  XX(EINVAL, "invalid argument")                                           \
  XX(ENOMEM, "out of memory")                                              \
  XX(ESTATE, "the call does not fit the object's state")

/* The meaning of a status code, for a person: "invalid argument" for TP_EINVAL, ...;
** "unknown status" for a code that is none of the above. Static string. */
TP_EXTERN const char *tp_strerror(int code);
/* The name of a status code as written in C: "TP_EINVAL" for TP_EINVAL, "TP_OK" for 0;
** "TP_UNKNOWN" for a code that is none of the above. Static string. */
TP_EXTERN const char *tp_err_name(int code);

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
  uint64_t reserved_[8];  /* zero (tp_limits_init); room for limits to come: a new limit
                          ** is a uint64_t taken from here (reserved_[7]), so that
                          ** sizeof(tp_limits) and every offset stay those of
                          ** libtidepool.so.0. Never read or write it. */
} tp_limits;

/* Fills *l with the defaults. */
TP_EXTERN void tp_limits_init(tp_limits *l);

/* ---- the limits as data -------------------------------------------------------------
**
** Every field of tp_limits has one entry in a static table, in the order of the struct:
** its unit, default, largest value, the names the front ends give it (the option of
** `tidepool run` and of `tidepool mcp`, the option of the Lua module), a help line, and
** the error code, message and hint a script gets when the limit stops it. A front end
** parses and documents every limit from this table, so a limit added to tp_limits needs
** no front-end change. Text values are parsed by one parser (tp_parse_value) with
** overflow checks: sizes "64M", "512K", "1G", "1MiB", "100" (bytes); counts "1000";
** durations "500ms", "2s", "1.5s", "1m", "250us", "3" (seconds). A value of 0 means no
** limit. Everything here is static and thread-safe.
*/
typedef enum tp_unit {
  TP_UNIT_BYTES = 0,     /* bytes */
  TP_UNIT_COUNT = 1,     /* a whole number */
  TP_UNIT_DURATION = 2   /* microseconds */
} tp_unit;

typedef struct tp_limit_info {
  const char *field;     /* the tp_limits member, "wall_us" */
  tp_unit unit;
  uint64_t def;          /* what tp_limits_init sets */
  uint64_t max;          /* the largest value the member takes (UINT32_MAX for 32-bit
                         ** counts; 10^15 us for durations) */
  const char *flag;      /* option of `tidepool run`, "--timeout" */
  const char *mcp;       /* option of `tidepool mcp`, or NULL when not offered there */
  const char *option;    /* option of the Lua module's run and check, "timeout" */
  const char *help;      /* a help line without the default: "wall-clock time from the
                         ** start" */
  const char *code;      /* the error code when the limit stops a run or a call,
                         ** "limit.time"; NULL when it has none of its own */
  const char *message;   /* that error's message, "%s" standing for the limit in words;
                         ** NULL when it is written where the limit is checked */
  const char *hint;      /* what a script should do instead; NULL: none */
} tp_limit_info;

/* How many limits the table has (the fields of tp_limits). */
TP_EXTERN size_t tp_limit_count(void);

/* The entry i (0 to tp_limit_count() - 1), in the order of tp_limits' fields; NULL past
** the end. Static: valid for the life of the process. */
TP_EXTERN const tp_limit_info *tp_limit_at(size_t i);

/* The entry whose field, `tidepool run` flag, `tidepool mcp` flag or Lua option is name
** ("wall_us", "--timeout", "timeout"); NULL when none is (or name is NULL). */
TP_EXTERN const tp_limit_info *tp_limit_find(const char *name);

/* The value of the limit li in *l. */
TP_EXTERN uint64_t tp_limits_get(const tp_limits *l, const tp_limit_info *li);

/* Sets the limit called name (as tp_limit_find takes it) in *l from text, parsed by
** tp_parse_value in the limit's unit and range. TP_OK, or TP_EINVAL (l unchanged) with
** err (when not NULL, cut to errlen) saying why, for a person:
**   "unknown limit 'x'", "bad size '12Q' (use bytes or a suffix: 512K, 64M, 1G)",
**   "bad count '-2' (it cannot be negative; 0 means no limit)",
**   "bad count '4294967296' (too large: at most 4294967295)". */
TP_EXTERN int tp_limits_set(tp_limits *l, const char *name, const char *text, char *err,
                            size_t errlen);

/* Sets the limit called name from a number, as scripting languages pass them: seconds for
** a duration (1.5 is 1500000 us), the value itself for sizes and counts (which must then
** be whole). TP_OK, or TP_EINVAL (l unchanged) with err: "unknown limit 'x'",
** "bad duration '1e+300' (too large: at most 1000000000 s)" (the number as "%.14g"),
** "bad size '-1' (it cannot be negative; 0 means no limit)", "bad count '1.5' (use a
** whole number)"; NaN is a bad value. */
TP_EXTERN int tp_limits_set_number(tp_limits *l, const char *name, double v, char *err,
                                   size_t errlen);

/* The one parser of sizes, counts and durations (the whole text; no sign, no spaces).
** Stores the value (bytes, a count, microseconds) in *out and returns TP_OK, or returns
** TP_EINVAL with err (may be NULL) saying why, as tp_limits_set does; a value past max,
** or past what 64 bits hold anywhere in the computation, is "too large", never wrapped.
** noun names a count in the message ("instruction count"; NULL: "count"). */
TP_EXTERN int tp_parse_value(tp_unit unit, const char *text, uint64_t max, uint64_t *out,
                             const char *noun, char *err, size_t errlen);

/* A value as an option takes it, for help texts: "64M", "10s", "250ms", "1000", or
** "none" for 0. Writes at most len bytes, NUL included. */
TP_EXTERN void tp_format_value(tp_unit unit, uint64_t v, char *buf, size_t len);

/* The error codes of the envelope ("error": {"code": ...}), stable strings a script and a
** program compare against, each with what it means in a few words ("limit.time", "past
** --timeout"). tp_code_at(i) for i from 0 to tp_code_count() - 1, in the order the docs
** list them; NULL past the end. Static: valid for the life of the process. */
typedef struct tp_code_info {
  const char *code;
  const char *meaning;
} tp_code_info;

TP_EXTERN size_t tp_code_count(void);
TP_EXTERN const tp_code_info *tp_code_at(size_t i);

/* The library's version, "MAJOR.MINOR.PATCH". Static string. */
TP_EXTERN const char *tp_version(void);

/* Frees a string the library returned as `char *`. NULL is a no-op. */
TP_EXTERN void tp_free(void *p);

/* ---- JSON text, in the engine's form -------------------------------------------------
** The engine writes JSON in one form: compact, object keys sorted bytewise, integers
** exact, reals in the shortest form that reads back (always with '.' or an exponent).
** A program that quotes envelopes in messages of its own (tidepool mcp does) writes them
** with tp_json_text so they read alike everywhere. Trees are jansson's (a dependency of
** the library); tidepool.h does not include jansson.h. */
struct json_t;
/* v as JSON text (NUL-terminated; *len, if not NULL, its length; NULL v is "null"), or
** NULL when out of memory. Free with tp_free. */
TP_EXTERN char *tp_json_text(const struct json_t *v, size_t *len);
/* d in that shortest form, as a person reads it: "%.Pg" for the least precision P that
** reads back to d ("4.828032", "0.1", "1e+21", "3"), locale-independent. Writes at most
** len bytes with the NUL (32 always suffice); returns the text's full length. */
TP_EXTERN size_t tp_number_text(double d, char *buf, size_t len);
/* text as a jansson tree, read as the engine reads JSON: any value at the top, NUL allowed
** in strings, duplicate keys refused, UTF-8 checked, at most 16 MiB. NULL on failure with
** why (if not NULL) set to "<what> at line L column C", with a hint for a client. The
** caller owns the tree (json_decref). */
TP_EXTERN struct json_t *tp_json_parse(const char *text, size_t len, char *why,
                                       size_t whylen);

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

/* What tp_engine_run_with takes. size is sizeof(tp_run_opts) as the caller was compiled
** (TP_RUN_OPTS_INIT sets it): fields added later lie past it and are taken as unset, so
** a program built against this header keeps working with a newer library. */
typedef struct tp_run_opts {
  size_t size;
  const tp_limits *limits;  /* NULL: the defaults */
  int check_only;           /* compile only, as tp_engine_check */
  int has_seed;             /* math.random seeded with seed (tp_run_set_seed) */
  uint64_t seed;
  int has_clock;            /* a fixed clock (tp_run_set_fixed_clock) */
  int64_t clock_epoch;
  uint64_t clock_step_us;
  const char *traceparent;  /* the run's parent span, W3C (tp_run_set_traceparent), or NULL */
} tp_run_opts;
#define TP_RUN_OPTS_INIT { sizeof(tp_run_opts), NULL, 0, 0, 0, 0, 0, 0, NULL }

/* tp_engine_run with options (opts NULL: as tp_engine_run with the defaults): the one
** synchronous run, which tp_engine_run and tp_engine_check are. TP_EINVAL when opts->size
** is too small to hold its first two fields. */
TP_EXTERN int tp_engine_run_with(tp_engine *e, const char *source, size_t len,
                                 const tp_run_opts *opts, char **envelope, int *script_ok);

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
** a step are ended by the VM itself reading the clock (should the signal's hand-over to
** it be lost, the timer fires again 500 us after the step's end and ends the step then).
** While a limit's verdict waits for the script, the signal repeats every 2 ms. The timer
** stays armed between steps (one system call less per step): a thread that stops
** stepping gets at most one more signal, 500 us after its last step of over 200 us or at
** the earliest deadline of the runs it stepped, unless it destroys the engine. Plugin handlers' deadlines are signalled by one helper thread per engine. The
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

/* 1 when the run has finished and its script succeeded (the envelope's "ok" is true); 0
** when it failed, has not finished, or r is NULL. */
TP_EXTERN int tp_run_ok(const tp_run *r);

/* Destroys the run (finished or not). NULL is a no-op. */
TP_EXTERN void tp_run_destroy(tp_run *r);

/* Hands the run to the engine's loop: tp_engine_poll (or the loop of tp_engine_run)
** steps it in time slices, round-robin with the other started runs, while its tool
** calls wait without blocking anyone; done is called once, when the run has finished
** (tp_run_envelope is ready), and may destroy the run. */
typedef void (*tp_run_done_cb)(tp_run *r, void *ud);
TP_EXTERN int tp_run_start(tp_run *r, tp_run_done_cb done, void *ud);

/* Tells cb about each tool call of r: once when the script makes it (done 0, before the
** call is checked or dispatched, so an unknown tool or one past a limit is told too) and
** once when it completes (done 1: it returned, failed, timed out or was cancelled), in
** that order for each call; tool is the name the script used (owned by the call, valid
** during cb). For progress reports (a tool's own reports come through
** tp_run_on_progress). cb runs on the
** run's thread from inside tp_run_step, tp_engine_poll or a completion, so it must not
** step, cancel or destroy r, nor call into its engine; it may record and send. One
** callback per run: a new one replaces the old; NULL clears it. NULL r is a no-op. */
typedef void (*tp_call_event_cb)(tp_run *r, const char *tool, int done, void *ud);
TP_EXTERN void tp_run_on_call(tp_run *r, tp_call_event_cb cb, void *ud);

/* Tells cb the progress reports of r's tool calls while they work: a line of text from
** the call's handler (ctx.progress in a Lua plugin, tp_call_progress in C; proc.run sends
** its command's output lines). tool is the name the script used, text the report, both
** valid during cb. Same rules as tp_run_on_call's cb. One callback per run: a new one
** replaces the old; NULL clears it. NULL r is a no-op. */
typedef void (*tp_call_progress_cb)(tp_run *r, const char *tool, const char *text, void *ud);
TP_EXTERN void tp_run_on_progress(tp_run *r, tp_call_progress_cb cb, void *ud);

/* ---- durable and deterministic runs --------------------------------------------------
** A run can be made to replay exactly. Call these after tp_run_create and before its
** first step (TP_ESTATE after it; TP_EINVAL for NULL r). A run given none of them
** behaves as before, at no cost.
**
** Determinism. What a script reads that is not its source or its tools' results is
** math.random (and math.randomseed() without arguments) and the clock (os.time(),
** os.clock(), os.date() without a time). tp_run_set_seed seeds math.random with seed
** (math.randomseed() without arguments then reseeds from it too, the same way at every
** run). tp_run_set_clock makes os.time(), os.date() and os.clock() read fn instead of
** the system: fn(r, TP_CLOCK_TIME, ud) is seconds since the epoch (os.time floors it),
** fn(r, TP_CLOCK_CPU, ud) seconds of CPU time, called on the run's thread from inside a
** step (it must not call into r or its engine). tp_run_set_fixed_clock is a clock that
** stands still but for step_us at each read: the k-th read (from 0) is epoch +
** k * step_us / 10^6 seconds for os.time (whole seconds) and os.date, k * step_us / 10^6
** for os.clock. Two runs of one script with the same seed, clock, tools' results and
** limits return the same envelope, byte for byte, but for "ms", "cpu_ms" and "wall_ms"
** (os.date's local time follows the host's time zone: format with "!" for UTC). A seed,
** a clock, a log or a replay also fixes the seed of the run's string hashes, so pairs()
** walks a table in the same order every time (not in a session, whose state exists
** already).
**
** The call log. tp_run_on_log tells cb every entry of r's log as it happens, one JSON
** object in the engine's form (compact, sorted keys; valid during cb):
**   {"seed":7,"type":"seed"}                                 first: the seed (given, or
**                                                            drawn and told)
**   {"clock":"time","n":1,"type":"clock","value":1700000000}  each clock read: "time"
**                                                            (integer seconds) or "cpu"
**   {"args_hash":H,"phase":0,"seq":3,"tool":"kv.get","type":"call"}   before call 3 goes
**                                                            to the host (policy, tool)
**   {"ok":true,"phase":1,"result":R,"seq":3,"sync":false,"type":"call"}  after it; or
**   {"error":{"code":C,"message":M[,"retry_after_ms":N]},"ok":false,"phase":1,...}
**   {"seq":5,"type":"order"}                                 parallel resumed the branch
**                                                            that waited on call 5
** seq is tp_call_id; H is the SHA-256 (hex) of the arguments as JSON text in the engine's
** form (tp_json_text: sorted keys, no spaces, exact integers), as tp_decision's
** args_sha256. "sync": the call was complete before the script could wait on it. cb
** returns 0, or nonzero when it could not keep the entry: for a phase 0 entry the call is
** then not made and fails with tool.failed ("the run's call log could not be written");
** other entries go on. A result over TP_LOG_VALUE_MAX bytes of JSON is never cut: its
** call fails with tool.failed and advice (ask for less, or have it written to a file and
** pass its path), and that error is logged. cb runs on the run's thread from inside
** steps and completions: it must not step, cancel or destroy r, nor call into its engine.
** NULL clears it.
**
** Replay. tp_run_replay gives r a log (a JSON array of entries, or entries one a line, as
** cb got them; the caller keeps its text). The run starts from the beginning with the
** log's seed and answers its clock reads from the log's, in order; each call whose seq
** has a phase 1 entry is answered from it (its result, or its error) without the host:
** no policy, no tool. Calls complete in the logged order, so parallel branches
** interleave as they did. A call that differs from the log (another tool, or other
** arguments: another hash at that seq), or a clock read of the other kind, ends the run
** with the error replay.divergence (not catchable by pcall): its message names the seq,
** the logged tool and hash, and what the script did. A call with only a phase 0 entry (it
** was held for approval, or the process stopped while it ran) and the calls after the
** log go to the host as usual: that is how a paused run goes on. Where a replayed answer
** waits for its turn, tp_run_step returns TP_YIELD instead of TP_WAIT: step again. A log
** entry the host cannot make (out of memory) ends the run with limit.memory, so a log
** never has a hole a replay would read wrong. With a callback, cb is
** told only the entries that are not in the log given, so a store appends what cb tells
** to what it kept. TP_OK; TP_EINVAL for a log that cannot be read (err, when not NULL,
** says why, cut to errlen), TP_ENOMEM.
*/
#define TP_CLOCK_TIME 0
#define TP_CLOCK_CPU  1
#define TP_LOG_VALUE_MAX (1u << 20)
typedef double (*tp_clock_fn)(tp_run *r, int which, void *ud);
typedef int (*tp_log_cb)(tp_run *r, const char *entry, size_t len, void *ud);
TP_EXTERN int tp_run_set_seed(tp_run *r, uint64_t seed);
TP_EXTERN int tp_run_set_clock(tp_run *r, tp_clock_fn fn, void *ud);
TP_EXTERN int tp_run_set_fixed_clock(tp_run *r, int64_t epoch, uint64_t step_us);
TP_EXTERN int tp_run_on_log(tp_run *r, tp_log_cb cb, void *ud);
TP_EXTERN int tp_run_replay(tp_run *r, const char *log, size_t len, char *err,
                            size_t errlen);

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
** tool.invalid_output, tool.failed, tool.timeout, tool.denied, tool.unavailable (the
** tool's server is down), tool.rate_limited, limit.tool_calls; and for a replayed run
** replay.divergence: see "durable and deterministic runs").
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
  uint64_t reserved_[8];      /* zero: room for fields to come, so that sizeof(tp_tool_def)
                              ** and every offset stay those of this version. Set the fields
                              ** by name ({ .name = ..., .handler = ... }, the rest zero),
                              ** or call tp_tool_def_init first; never a positional list, and
                              ** never read or write reserved_. A new field is taken from its
                              ** end, and zero there means what the library did before. */
} tp_tool_def;

/* Zeroes *def: every field absent, reserved_ zero (as tp_limits_init does for limits). */
TP_EXTERN void tp_tool_def_init(tp_tool_def *def);

/* Registers a tool (strings are copied, schemas compiled once). TP_EINVAL on a bad
** name, a duplicate, or a schema that does not compile: tp_engine_error says why. */
TP_EXTERN int tp_engine_add_tool(tp_engine *e, const tp_tool_def *def);

/* ---- caller tools: a run's own tools, implemented by whoever started it -------------
** (docs/caller-tools.md) A caller tool is declared on one run (before its first step) or
** on a session (for each of its runs; a run's own declarations shadow its session's of
** the same name), never in the engine: other runs do not see it. The script calls it as
** any tool, tools.<name>{...}, and it is one: listed, described, searched, its arguments
** and result checked against its schemas, under the policy and its approvals, counted
** against the limits, in the calls trace and the audit log. A call reaches the caller:
** - live, with a handler: the handler gets the call once its arguments passed, and
**   completes it with tp_call_complete or tp_call_fail (code "tool.failed" or another
**   tool.* code, and the caller's message), now or later, from the engine's thread; the
**   wait counts against the call's timeout and the run's time limit;
** - paused, without a handler: the call waits in tp_run_pending (tp_run_step returns
**   TP_WAIT) until the program completes it.
** A name the engine has a tool of, or declared twice, is TP_EINVAL (tp_engine_error says
** why); TP_ESTATE for a run past its first step. Strings and schemas are copied. */
TP_EXTERN int tp_run_add_caller_tool(tp_run *r, const tp_tool_def *def);
TP_EXTERN int tp_session_add_caller_tool(tp_session *s, const tp_tool_def *def);
/* Declarations as JSON text, as the protocol writes them (len 0: NUL-terminated):
** [{"name", "description", "inputSchema", "outputSchema", "timeoutMs"}] or {"tools": [...]},
** at most 256 tools and 1 MiB; all or none are added. call is their handler (NULL:
** paused); cancel, when not NULL, is told of a call cut short (its timeout, the run's end)
** while call has it: the handler still completes it (the answer is then dropped). */
typedef void (*tp_call_cancel_fn)(tp_call *call, void *ud);
TP_EXTERN int tp_run_declare_caller_tools(tp_run *r, const char *json, size_t len,
                                          tp_tool_fn call, tp_call_cancel_fn cancel,
                                          void *ud);
TP_EXTERN int tp_session_declare_caller_tools(tp_session *s, const char *json, size_t len,
                                              tp_tool_fn call, tp_call_cancel_fn cancel,
                                              void *ud);
/* Completes call c with a caller's answer as the protocol writes it: {"result": <any>}, or
** {"error": {"message": "...", "code": "tool.denied"}} (code: tool.failed, the default,
** tool.denied, tool.timeout, tool.unavailable, tool.rate_limited or tool.invalid_input;
** another is read as tool.failed; the message is cut at 4,000 bytes). An answer of
** another shape, or text that is not JSON, fails the call with tool.failed saying so and
** returns TP_EINVAL. TP_ESTATE when c was completed already or its run let go of it (the
** answer is dropped; c is let go). Like tp_call_complete, once per call. The _tree form
** takes a parsed answer (borrowed). */
TP_EXTERN int tp_call_answer(tp_call *c, const char *answer, size_t len);
TP_EXTERN int tp_call_answer_tree(tp_call *c, struct json_t *answer);
/* tp_engine_describe over e's tools and the caller tools of decls (declarations as for
** tp_run_declare_caller_tools; NULL: none), as a run that declares them sees them: what a
** client shows the model for a run with its own tools. NULL for a bad format or bad
** declarations (tp_engine_error says why). */
TP_EXTERN char *tp_engine_describe_caller(tp_engine *e, const char *format,
                                          const char *decls, size_t len);
/* Forgets a session's caller tools. TP_ESTATE while a run of the session is alive. */
TP_EXTERN int tp_session_clear_caller_tools(tp_session *s);

/* Loads every *.lua plugin of a directory into the engine's host Lua state. Returns the
** number of tools added, or a negative code when the directory cannot be read. A broken
** plugin is skipped and reported (file:line: why) in tp_engine_error, which lists every
** problem of the last call, one per line; the other plugins still load. */
TP_EXTERN int tp_engine_load_tools(tp_engine *e, const char *dir);

/* tp_engine_load_tools that hands each problem of this directory to problem, one call per
** problem, in the order of the files (sorted by name), as they are met: "file:line: why"
** (a plugin's own error message may hold newlines: it is still one problem; the text is
** valid during the call). problem may be NULL. tp_engine_error still lists them all. The return value is tp_engine_load_tools's; when it is negative
** (the directory cannot be read, out of memory), tp_engine_error says why and problem is
** not called. problem must not call into e. */
typedef void (*tp_problem_cb)(const char *problem, void *ud);
TP_EXTERN int tp_engine_load_tools_cb(tp_engine *e, const char *dir, tp_problem_cb problem,
                                      void *ud);

/* Removes every plugin tool (those loaded by tp_engine_load_tools; tools added with
** tp_engine_add_tool stay), so that directories can be loaded again after their files
** changed: a reload is this, then tp_engine_load_tools for each directory. Returns how
** many were removed, or TP_ESTATE while a run of e is alive (its calls point at their
** tools; nothing is removed), TP_EINVAL for NULL. */
TP_EXTERN int tp_engine_unload_tools(tp_engine *e);

/* The tools of e, sorted by name: tp_engine_tool_count() of them, read one by one with
** tp_engine_tool_info(e, i, &info) for i from 0. The strings of info belong to e and stay
** valid until its tools change (add, load, unload) or e is destroyed. Use from e's
** thread. */
typedef struct tp_tool_info {
  const char *name;         /* "weather.current" */
  const char *description;  /* "" when it has none */
  const char *origin;       /* "dir/file.lua:12" for a plugin tool; NULL for a C tool */
  uint64_t timeout_us;      /* its own deadline; 0: the run's tool_timeout_us */
  uint64_t reserved_[8];    /* written zero by tp_engine_tool_info: room for fields to come,
                            ** so that sizeof(tp_tool_info) and every offset stay those of
                            ** this version (a new field is taken from its end) */
} tp_tool_info;
TP_EXTERN size_t tp_engine_tool_count(const tp_engine *e);
/* Fills every field of *info (reserved_ zero). TP_OK, or TP_EINVAL when i is past the end
** or an argument is NULL (info untouched). */
TP_EXTERN int tp_engine_tool_info(const tp_engine *e, size_t i, tp_tool_info *info);
/* The input schema (output 0) or output schema (output 1) of tool i as compact JSON text
** with sorted keys in *json (caller frees with tp_free). A tool registered without an
** input schema has {"type":"object"}; without an output schema, *json is NULL. TP_OK, TP_EINVAL (i past the end, NULL
** arguments), TP_ENOMEM. */
TP_EXTERN int tp_engine_tool_schema(const tp_engine *e, size_t i, int output, char **json);

/* ---- the config file ----------------------------------------------------------------
**
** One JSON object of sections (docs/config.md), checked against tidepool's JSON
** Schema, committed as engine/host/config.schema.json, built into the library and
** installed as DATADIR/config.schema.json: limits (by the Lua module's option names:
** "memory": "64M", "timeout": 2), tools (plugin directories), workspace ("dir" or
** {"dir", "max"}), mcpServers (Claude Desktop's shape), http, commands, policy, state
** (where kv and rate buckets are kept: tp_engine_config_state) and auth (who may call
** tidepool mcp --http; read by that front end). A section not listed is an error. Limit
** values are checked by tp_limits_set's parser,
** and the tools and workspace directories must exist. Relative paths (tools, workspace,
** mcpServers.*.cwd) are relative to the config's folder, and the engine keeps them
** absolute. The sources of tools (mcpServers, http, commands) read their sections from
** the engine when plugins load, so configure before tp_engine_load_tools. The engine
** applies nothing else itself: a front end reads limits, tools and workspace with the
** tp_engine_config_* functions and applies them under its own options (which win).
**
** A failed check returns TP_EINVAL and leaves the engine's config as it was;
** tp_engine_error (or err) lists every problem, one a line, each
**   "config: <JSON pointer>: <what was expected, what was found>[; for example ...]"
** e.g. "config: /mcpServers/memory/args: expected an array of strings, got a string; for
** example "args": ["-y","@modelcontextprotocol/server-memory"]", or
** "config: /polcy: unknown section "polcy" (did you mean "policy"?); the sections are: ...";
** problems of the whole text have no pointer ("config: not valid JSON: ... at line 3
** column 5"). TP_ENOMEM when out of memory.
*/

/* Configures e from a config's text; relative paths are relative to the folder dir (NULL:
** the current directory, and they stay relative). */
TP_EXTERN int tp_engine_configure_dir(tp_engine *e, const char *json, size_t len,
                                      const char *dir);
/* tp_engine_configure_dir(e, json, len, NULL). */
TP_EXTERN int tp_engine_configure(tp_engine *e, const char *json, size_t len);
/* Reads the config file path (at most 16 MiB) and configures e from it, relative paths
** relative to its folder. A file that cannot be read: TP_EINVAL, "config: cannot read:
** <why>". */
TP_EXTERN int tp_engine_configure_file(tp_engine *e, const char *path);

/* Checks a config's text without an engine, as tp_engine_configure_dir does (dir: the
** folder of relative paths; NULL: the current one). TP_OK, or TP_EINVAL / TP_ENOMEM with
** the problems in err (when not NULL: one a line, cut to errlen; "" on success). */
TP_EXTERN int tp_config_check(const char *json, size_t len, const char *dir, char *err,
                              size_t errlen);

/* The config file's JSON Schema (engine/host/config.schema.json, as built into the
** library), NUL-terminated. Static. */
TP_EXTERN const char *tp_config_schema(void);

/* What e's config asks for that this machine lacks, found when it was configured: a
** variable "env:NAME" that is not set, a program (mcpServers.*.command, commands[].argv0)
** not found in PATH, a server's cwd that is no directory. One line each,
** "config: <JSON pointer>: what", e.g. "config: /mcpServers/github/env/TOKEN: the
** environment variable GITHUB_TOKEN is not set ..."; NULL when there is none. They do not
** fail tp_engine_configure (the same file works where they exist); `tidepool config
** check` and `--strict` refuse them. Owned by e, valid until it is configured again. */
TP_EXTERN const char *tp_engine_config_warnings(const tp_engine *e);

/* Sets in *l the limits e's config gives; the others stay as they are (so a front end
** calls tp_limits_init, then this, then applies its own options). TP_OK, or TP_EINVAL
** for NULL. Without a config, *l is left as it is. */
TP_EXTERN int tp_engine_config_limits(const tp_engine *e, tp_limits *l);

/* The i-th plugin directory of e's config ("tools", absolute when the config came with a
** folder), or NULL past the end. Owned by e, valid until it is configured again. */
TP_EXTERN const char *tp_engine_config_tools(const tp_engine *e, size_t i);

/* The workspace directory of e's config, or NULL when it has none; *max (when max is not
** NULL) is set to its "max" in bytes (0: no cap), or UINT64_MAX when it gives none.
** Owned by e, valid until it is configured again. */
TP_EXTERN const char *tp_engine_config_workspace(const tp_engine *e, uint64_t *max);

/* The state store's location in e's config ("state": a directory or sqlite:PATH made
** absolute when the config came with a folder, or a URL), for tp_store_open; NULL when it
** gives none. Owned by e, valid until it is configured again. */
TP_EXTERN const char *tp_engine_config_state(const tp_engine *e);

/* Starts the upstream MCP servers of e's config (mcpServers; once) and waits until each
** has listed its tools, now tools.<server>.<tool>, or failed; problem (may be NULL) gets
** each server or tool refused, as tp_engine_load_tools_cb's does. tp_engine_load_tools,
** tp_engine_describe and tp_engine_run start them when they were not started; call this
** before tp_run_create/tp_run_start when none of those came first. It runs e's loop, so
** never from inside one of its callbacks. TP_OK (also when there is nothing to start). */
TP_EXTERN int tp_engine_start_servers(tp_engine *e, tp_problem_cb problem, void *ud);

/* Bounds that wait for a caller that starts the servers for its next run (tidepool run):
** the start (tp_engine_start_servers, or the plugin load or tp_engine_run that starts
** them) waits at most us microseconds (0, the default: until each server's own handshake
** timer, up to a minute). A server not ready by then is a problem ("not ready within
** ..."), goes on starting, and its tools come when it has listed them. The time waited
** belongs to the next run made on e (tp_engine_run, tp_run_create): its wall-clock limit
** counts it, its envelope's stats.wall_ms includes it and stats.wait_ms says how much of
** it went before the run began. Without a bound set, a start's wait belongs to no run
** (a server starting its workers), except within tp_engine_run, which bounds the start it
** makes itself by its run's time limit and counts it there. */
TP_EXTERN int tp_engine_set_start_timeout(tp_engine *e, uint64_t us);

/* Confines the fs.* built-in tools to this directory (and offers them). */
TP_EXTERN int tp_engine_set_workspace(tp_engine *e, const char *dir);

/* Caps how many bytes the fs.* tools may add to the workspace, net, over what it held
** when first used in this process (shared by every engine of the process using that
** directory); default 1 GiB, 0 = no cap. Takes effect for workspaces opened after it. */
TP_EXTERN int tp_engine_set_workspace_max(tp_engine *e, uint64_t bytes);

/* ---- traces (OpenTelemetry) ------------------------------------------------------------
** With an OTLP endpoint or a trace file set, every run made afterwards is a span; its policy
** decisions, tool calls and approval waits are its children, and what a call causes (an
** upstream MCP request, an HTTP fetch, a command) their children. Spans carry tool names
** (gen_ai.tool.name, gen_ai.operation.name = "execute_tool"), outcome codes, times and byte
** counts, never an argument's value nor a header. They are queued (at most 2048) and sent
** in batches from e's loop, at most one request at a time: a run never waits for them, a
** span that finds the queue full is dropped and counted, as are those of an export that
** failed. tp_engine_destroy gives what is queued at most a second to leave.
**
** tp_engine_trace_otlp: OTLP over HTTP with JSON bodies to url ("http://host:4318": the
** path /v1/traces is added when the URL has none); NULL turns it off. TP_EINVAL for a URL
** that is not http(s). tp_engine_trace_file: the same spans as JSON lines (one OTLP span
** object a line) appended to path; NULL turns it off. tp_engine_trace_propagate: whether
** context goes on (a traceparent in upstream MCP requests' _meta and in HTTP fetches'
** headers to allowed hosts); on by default. The config's "telemetry" section sets the
** same (otlp.endpoint, propagate, service_name).
**
** tp_run_set_traceparent: r's span becomes a child of the W3C traceparent given
** ("00-<32 hex>-<16 hex>-<2 hex>"), from an MCP request's _meta or an HTTP header; before
** r's first step. TP_EINVAL for text that is not one (r keeps a trace of its own).
** tp_run_traceparent: r's own span as a traceparent (buf of at least 56 bytes); TP_ESTATE
** when r is not traced. tp_run_trace_attr: one more string attribute on r's span
** (tidepool.principal, tidepool.session ...); copies both. */
TP_EXTERN int tp_engine_trace_otlp(tp_engine *e, const char *url);
TP_EXTERN int tp_engine_trace_file(tp_engine *e, const char *path);
TP_EXTERN int tp_engine_trace_propagate(tp_engine *e, int on);
TP_EXTERN uint64_t tp_engine_spans_dropped(const tp_engine *e);
TP_EXTERN uint64_t tp_engine_spans_exported(const tp_engine *e);
TP_EXTERN int tp_run_set_traceparent(tp_run *r, const char *traceparent);
TP_EXTERN int tp_run_traceparent(tp_run *r, char *buf, size_t len);
TP_EXTERN int tp_run_trace_attr(tp_run *r, const char *key, const char *value);

/* ---- the audit journal: what a run did, even after a crash ------------------------------
** With fd (opened O_APPEND, kept by the caller; -1 turns it off), every run made afterwards
** appends one JSON line per event, with one write(2) as it happens: a call's start (before
** its tool runs), its hold for a person, its end with the outcome code (before the script
** sees it), the run's end. A process killed mid-run leaves the calls that were in flight
** without an end. `tidepool audit show FILE [RUN]` reads it; docs/operations.md has the
** format. Never an argument's value. TP_OK, TP_EINVAL. */
TP_EXTERN int tp_engine_audit_calls(tp_engine *e, int fd);

/* ---- metrics ------------------------------------------------------------------------------
** tp_engine_metrics_on: e counts from now on its runs by outcome, its tool calls by tool
** and outcome, policy decisions by effect, and the durations of runs and calls
** (histograms). Counting costs a few relaxed stores per call, on e's thread. TP_OK,
** TP_ENOMEM. tp_metrics_text: the figures of engines es[0..n) summed, as Prometheus text
** (exposition format 0.0.4: tidepool_runs_total, tidepool_limits_hit_total,
** tidepool_runs_in_flight, tidepool_tool_calls_total, tidepool_policy_decisions_total,
** tidepool_run_duration_seconds, tidepool_tool_call_duration_seconds,
** tidepool_spans_dropped_total; docs/operations.md). It may be called from any thread
** while the engines run (a worker's engine is read, never locked); malloc'd (tp_free),
** *len its length when len is not NULL; NULL when out of memory. A front end appends its
** own series (sessions, paused runs, HTTP statuses) after it. */
TP_EXTERN int tp_engine_metrics_on(tp_engine *e);
TP_EXTERN char *tp_metrics_text(tp_engine *const *es, size_t n, size_t *len);

/* The message of the last failed call on e, or "" (owned by e). */
TP_EXTERN const char *tp_engine_error(const tp_engine *e);

/* ---- the logger --------------------------------------------------------------------
** What the engine has to say outside any call's result: a plugin's print, an upstream MCP
** server's stderr lines and log notifications, a server that stopped, a callback that
** failed with no call to fail. The library hands each message to the engine's logger and
** never writes anywhere itself; the embedding program decides where it shows. Levels are
** syslog's. source names who speaks: "host" (the host Lua state), "plugin" (a plugin's
** print), "http" (tidepool.http), "upstream" (an upstream MCP server or its supervision).
** message is one line without its newline, valid only during the call. The logger runs
** on the engine's thread, inside the engine: it must not call back into e. */
typedef enum tp_log_level {
  TP_LOG_ERROR = 3,
  TP_LOG_WARN = 4,
  TP_LOG_INFO = 6,
  TP_LOG_DEBUG = 7
} tp_log_level;
typedef void (*tp_engine_log_cb)(void *ud, tp_log_level level, const char *source,
                                 const char *message);
/* Sets e's logger; cb NULL restores the default, tp_log_stderr. */
TP_EXTERN void tp_engine_on_log(tp_engine *e, tp_engine_log_cb cb, void *ud);
/* Sets what is called (on e's thread, after the change) when e's tools changed other than
** by tp_engine_load_tools, tp_engine_add_tool or a reload: an upstream MCP server that
** answered after its start (start_wait_ms), or one whose tool list changed. A server then
** tells its clients (tidepool mcp: notifications/tools/list_changed). cb NULL: none. It
** must not call back into e. */
typedef void (*tp_engine_tools_cb)(void *ud);
TP_EXTERN void tp_engine_on_tools_changed(tp_engine *e, tp_engine_tools_cb cb, void *ud);
/* A logger that writes each message and a newline to stderr (ud unused): the default
** until front ends set their own, and what the command line uses. */
TP_EXTERN void tp_log_stderr(void *ud, tp_log_level level, const char *source,
                             const char *message);

/* The tools as the model reads them: a checklist of what differs from JavaScript and
** Python, then every tool as a Lua call with its fields and rules (format "lua"), one
** line a tool ("compact": required fields and result keys; a script reads a tool's
** details with tools.describe(name)), one line a namespace with its tools' names
** ("grouped") or their number ("counts"); "auto" is the first of full, compact, grouped
** and counts that fits in 2,048 characters (where Claude Code cuts a description), "fit"
** the same from compact on. Or a run_lua tool definition as JSON with one of these texts
** ("json" in full, "json+MODE"; "json+session" and "json+session+MODE" add the session
** argument). Caller frees with tp_free. NULL for an unknown format or out of memory. */
TP_EXTERN char *tp_engine_describe(tp_engine *e, const char *format);

/* Runs the engine's event loop: once without waiting (block 0) or until something
** happened (block 1). Tool handlers that wait (timers, files, processes) and call
** deadlines progress only while the loop runs. Returns nonzero while work is pending. */
TP_EXTERN int tp_engine_poll(tp_engine *e, int block);

/* The engine's libuv loop (a uv_loop_t *), for tool handlers written in C that wait on
** timers, sockets or processes: handles made on it are run by tp_engine_poll and by the
** loop of tp_engine_run. Owned by e; valid until tp_engine_destroy, which runs the loop
** until the handles the program closed are gone, so close yours before (or from a close
** callback). Use it from e's thread only. NULL for NULL e. */
TP_EXTERN void *tp_engine_loop(tp_engine *e);

/* ---- the state store: kv and rate buckets shared by engines -----------------------
** The built-in kv.* tools keep their keys, and the config policy's rate buckets theirs,
** in the engine's state store: by default a memory store of the engine's own. Engines
** that share a tp_store (for example one engine per worker thread) see one set of keys:
** a key one engine's script writes, another's reads. A store is thread-safe; each engine
** talks to it through a connection of its own on its loop.
*/
typedef struct tp_store tp_store;

/* An empty memory store: its keys live as long as it does. NULL when out of memory. */
TP_EXTERN tp_store *tp_store_create(void);

/* A durable store at where, opened for the engines of this process:
**   "DIR"           an SQLite database DIR/tidepool.db (DIR is made, mode 0700, when
**                   missing; its parent must exist), written in WAL mode, one transaction
**                   per operation: a write a tool acknowledged survives kill -9; several
**                   processes may share it;
**   "sqlite:PATH"   the SQLite database file PATH itself;
**   "redis://HOST:PORT/DB"  a Redis server, shared by several processes or machines
**                   (builds without Redis support say so in err);
**   "memory:"       a memory store, as tp_store_create.
** With a durable store, kv keys survive restarts and the policy's rate buckets are taken
** in the store, so processes that share it share their buckets. NULL with err (when not
** NULL, cut to errlen) saying why, for a person: "/x/state: cannot make the state
** directory: Permission denied", "/x/state/tidepool.db: written by a newer tidepool
** (schema 7; this one reads up to 1)", ... Let go of it with tp_store_destroy. */
TP_EXTERN tp_store *tp_store_open(const char *where, char *err, size_t errlen);

/* Lets go of the caller's store (the engines given it keep theirs until they are
** destroyed). NULL is a no-op. */
TP_EXTERN void tp_store_destroy(tp_store *s);

/* Makes e's kv.* tools and rate buckets use s (e takes a reference of its own). Call it
** before e loads any tools or runs any script: TP_ESTATE once e's host state has started
** or e has used its store. TP_EINVAL for NULL. */
TP_EXTERN int tp_engine_set_store(tp_engine *e, tp_store *s);

/* The calls of r that wait for the embedding program (tools without handler), at most
** max of them, oldest first; returns how many. */
TP_EXTERN size_t tp_run_pending(tp_run *r, tp_call **calls, size_t max);

/* "weather.current"; owned by c */
TP_EXTERN const char *tp_call_tool(const tp_call *c);
/* The arguments as JSON text; owned by c, valid until the call is completed. */
TP_EXTERN const char *tp_call_args(tp_call *c);
/* Unique within its run, from 1. */
TP_EXTERN uint64_t tp_call_id(const tp_call *c);
/* The run that made c, or NULL once the run let go of it (ended, destroyed). */
TP_EXTERN tp_run *tp_call_run(const tp_call *c);
/* Nonzero once the run ended or the call timed out. */
TP_EXTERN int tp_call_cancelled(const tp_call *c);

/* A progress report of c while it works (see tp_run_on_progress); dropped once the call
** is over or when its run has no progress callback. TP_EINVAL for NULL. */
TP_EXTERN int tp_call_progress(tp_call *c, const char *text);

/* Completes the call with its result as JSON text (len may be 0 for NUL-terminated).
** TP_ESTATE if it was completed already. */
TP_EXTERN int tp_call_complete(tp_call *c, const char *result_json, size_t len);

/* Fails the call. code: "tool.failed" when NULL, or another tool.* code; message for
** the model (what went wrong, what to do). "tool.timeout" with a NULL or empty message:
** the engine's own, naming the limit ("tools.x timed out after 30s (the tool_timeout
** limit, --tool-timeout)"). TP_ESTATE if completed already. */
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
/* The verdicts in one table, XX(NAME, text), as TP_ERRNO_MAP (values fixed). */
#define TP_POLICY_MAP(XX)                                                   \
  XX(POLICY_ALLOW, "the call goes on")                                     \
  XX(POLICY_DENY,  "the call fails with tool.denied")                      \
  XX(POLICY_HOLD,  "the call waits for tp_call_decide")
typedef int (*tp_policy_fn)(tp_call *call, void *ud, char *reason, size_t len);
TP_EXTERN int tp_engine_set_policy(tp_engine *e, tp_policy_fn fn, void *ud);
TP_EXTERN int tp_call_decide(tp_call *call, int verdict, const char *reason);

/* ---- the config's policy: who calls, and what was decided --------------------------
** A config with a "policy" section (tp_engine_configure; docs/policy.md) decides on
** every call of a registered tool before tp_engine_set_policy's fn and before the
** arguments are checked: allowed, tool.denied (the message names the rule, its reason,
** the clause that failed and the argument's value), or tool.rate_limited (the error
** object has retry_after_ms). Rules may require scopes of the caller, and rate buckets
** may be kept per principal: these say who the caller is.
**
** The principal (a name; NULL: none) and scopes (names separated by spaces or commas,
** "payments:write github:read"; NULL: none) of e's runs, unless a run has its own. The
** strings are copied. TP_OK, TP_EINVAL (NULL e), TP_ENOMEM. */
TP_EXTERN int tp_engine_set_principal(tp_engine *e, const char *principal,
                                      const char *scopes);
/* The same for run r alone (call it before its first step). */
TP_EXTERN int tp_run_set_principal(tp_run *r, const char *principal, const char *scopes);

/* ---- who calls: a script, or the model directly --------------------------------------
** The config's "tool_settings" may give a tool "callers" (docs/config.md): "script" (a
** script calls it, tools.x.y{...}), "direct" (the model calls it as a tool of its own:
** tidepool mcp --expose-tools), or both (the default). A run is a script's unless a front
** end that offers tools directly says otherwise with tp_run_set_caller(r,
** TP_CALLER_DIRECT) before its first step (its script then stands for the model's direct
** call). A call the tool's callers exclude fails with tool.denied, saying who may call
** it; tools.list, tools.describe, tools.search and tp_engine_describe leave out the
** tools a script may not call. */
#define TP_CALLER_SCRIPT 1
#define TP_CALLER_DIRECT 2
/* TP_OK, TP_EINVAL (NULL r, or caller not one of the two), TP_ENOMEM. */
TP_EXTERN int tp_run_set_caller(tp_run *r, int caller);
/* Who may call tool i (tp_engine_tool_info's order): TP_CALLER_SCRIPT, TP_CALLER_DIRECT
** or both, ORed; 0 when i is past the end. */
TP_EXTERN int tp_engine_tool_callers(const tp_engine *e, size_t i);

/* One decision of the config's policy, for an audit log. Its strings are valid during
** the callback only. */
typedef struct tp_decision {
  uint64_t run;            /* the run's id, unique within the engine */
  uint64_t seq;            /* the call's id within the run (tp_call_id) */
  const char *tool;        /* "payments.send" */
  const char *principal;   /* "" when the caller has none */
  int rule;                /* the deciding rule's index in policy.rules; -1: the default */
  const char *effect;      /* "allow", "deny", "ask" (held for tp_engine_on_approval's
                           ** callback, or denied when there is none) or "rate_limited" */
  const char *clause;      /* what decided: the where clause, "requires", "max_calls",
                           ** "rate", or "" */
  const char *args_sha256; /* SHA-256 (hex) of the arguments' JSON text in the engine's
                           ** form (tp_json_text): never the values themselves */
} tp_decision;
typedef void (*tp_decision_cb)(tp_run *r, const tp_decision *d, void *ud);
/* Tells cb about every decision the config's policy makes (none without a policy
** section), on the run's thread, from inside a step: cb must not step, cancel or
** destroy r nor call into e. NULL clears it. TP_OK, TP_EINVAL, TP_ENOMEM. */
TP_EXTERN int tp_engine_on_decision(tp_engine *e, tp_decision_cb cb, void *ud);

/* ---- approvals: the config policy's "effect": "ask" ---------------------------------
** A call that an "ask" rule matches (and no deny rule) is held as TP_POLICY_HOLD holds
** it: nothing of its tool runs, and its script waits (tp_run_step returns TP_WAIT,
** tp_engine_run keeps waiting) until it is decided, once, from the engine's thread:
** tp_call_approve checks its arguments against the tool's schema and runs it, as the
** script made it; tp_call_deny fails it with tool.denied and reason in its message
** (NULL: "the person asked to approve it declined"). Both are tp_call_decide, and take
** any held call; TP_OK, TP_ESTATE when it was decided already or its run ended meanwhile
** (the decision then lets go of it: every held call must be decided once, even after its
** run was cancelled or destroyed), TP_EINVAL for NULL.
**
** cb is called with the held call (tp_call_tool, tp_call_args, tp_call_id) and reason:
** the rule's "reason" and number, "writes need a person (policy rule 1)", or "policy rule
** 1 asks a person to approve tools.github.issues.create" when it has none; valid during
** cb only. cb runs on the engine's thread, from inside the step of the call: it may
** decide at once (a blocking prompt: the run, and its wall-clock limit, wait meanwhile)
** or keep the call and decide later; it must not step, cancel or destroy the run. An
** approved call is not shown to tp_engine_set_policy's fn, and takes nothing from the
** allow rules' max_calls and rate. Without cb (the default; NULL clears it) a call that
** needs approval is denied: "... (policy rule 1 asks a person to approve this call, and
** this host has no one to ask: it is denied)". TP_OK, TP_EINVAL (NULL e), TP_ENOMEM. */
typedef void (*tp_approval_cb)(tp_call *call, const char *reason, void *ud);
TP_EXTERN int tp_engine_on_approval(tp_engine *e, tp_approval_cb cb, void *ud);
TP_EXTERN int tp_call_approve(tp_call *call);
TP_EXTERN int tp_call_deny(tp_call *call, const char *reason);

/* Stored paused runs, session claims and leases, and tp_run_hold_wall (a server's
** plumbing, used by tidepool mcp) are in tidepool_server.h, which includes this header. */

#ifdef __cplusplus
}
#endif

#endif
