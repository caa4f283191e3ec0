/*
** run.h: runs and sessions (run.c, session.c), and how the core tells the host about
** them. Core: a run is a resumable object; the host that drives it registers the
** callbacks of tp__host_hooks, and the core calls nothing else above it.
*/
#ifndef tidepool_run_h
#define tidepool_run_h

#include <pthread.h>
#include <stdint.h>
#include <time.h>
#include <jansson.h>

#include "tidepool.h"
#include "watchdog.h"
#include "sandbox.h"

/*
** What the core tells the host, through the callbacks the host registers in its
** tp_core (tp__core_init). ud is tp_core.ud. Each is called on the thread that steps
** or completes the run, never while the core holds a lock.
*/
typedef struct tp__host_hooks {
  /* A script made call c: counted, its name copied (c->name), its arguments read
  ** (c->args, or NULL when they could not be). The host resolves the tool
  ** (tp__call_bind), decides whether it may run, checks the arguments, then admits it
  ** (tp__call_admit) or fails it (tp__call_failf); or it holds it, and decides later.
  ** c may be complete when this returns. */
  void (*call)(void *ud, tp_call *c);
  /* Admitted call c has its turn (the run's in-flight cap allows it): hand it to its
  ** tool's handler, which owns it (c->handler_owns) until it completes or fails it. */
  void (*dispatch)(void *ud, tp_call *c);
  /* c was cut short (its timeout, the run's end) while its handler owns it. */
  void (*cancel)(void *ud, tp_call *c);
  /* Run r, started with tp_run_start, may go on: a call completed, it was cancelled,
  ** or it was just started. Returns TP_OK, or TP_ENOMEM when the host cannot drive it. */
  int (*wake)(void *ud, tp_run *r);
  /* r is being destroyed: the host lets go of what it keeps for r (r->host_data). */
  void (*run_gone)(void *ud, tp_run *r);
  /* Discovery from a script: the tools' names, sorted (index i of n); one tool's
  ** description as Lua annotations (malloc'd; *known 0 when there is no such tool);
  ** a search as JSON text [{name, score, description}...] (malloc'd). sb is the asking
  ** run's sandbox. NULL when out of memory. The host answers from data it keeps: these
  ** run no Lua of the host's. */
  size_t (*tool_count)(void *ud, const struct tp_run *r);
  const char *(*tool_name)(void *ud, const struct tp_run *r, size_t i);  /* NULL: scripts
                                                 ** do not see tool i */
  char *(*describe)(void *ud, tp_sandbox *sb, const char *tool, int *known);
  char *(*search)(void *ud, tp_sandbox *sb, const char *query);
  /* The pre-run check (precheck.c) of a call written out in the script, tools.a.b(...):
  ** tool is its dotted name; when its one argument is a literal table, literal is 1,
  ** keys its constant field names (sure[i]: field i surely holds a value that is not
  ** nil) and closed says the table has no other fields. Writes msg and returns the code
  ** of a call that would surely fail ("tool.unknown", "tool.invalid_input"), or NULL
  ** when it would not or cannot be told (tools still to come). May be NULL. */
  const char *(*precheck_call)(void *ud, const struct tp_run *r, const char *tool,
                               const char *const *keys,
                               const unsigned char *sure, size_t nkeys, int literal,
                               int closed, char *msg, size_t len);
  /* The named fields tool takes, as a Lua table for a message ("{path = ..., n = ...}"),
  ** into buf ("" when unknown). May be NULL. */
  void (*args_example)(void *ud, const struct tp_run *r, const char *tool, char *buf,
                       size_t len);
  /* Session s is being destroyed: the host lets go of what it keeps for s (its caller
  ** tools). May be NULL. */
  void (*session_gone)(void *ud, struct tp_session *s);
  /* Only for a traced run (tp_run.traced): call c ended (c->end_ns); run r ended with
  ** code (NULL: ok) and its stats. */
  void (*trace_call)(void *ud, tp_call *c);
  void (*trace_run)(void *ud, tp_run *r, const char *code, const json_t *stats);
} tp__host_hooks;

/* The part of an engine that the core owns. struct tp_engine (host/engine.h) begins
** with it, so the core reaches it from a tp_engine * with tp__core(e) and reaches
** nothing else of the engine. */
typedef struct tp_core {
  tp_watchdog wd;
  tp_run *runs;            /* live runs, newest first */
  uint64_t run_ids;        /* the last run id given out */
  const tp__host_hooks *hooks;
  void *ud;                /* the hooks' first argument */
  tp_arena_pool chunks;    /* sandbox chunks of the engine's runs (not sessions') */
  uint64_t wait_ns;        /* what the host waited for on behalf of the next run (upstream
                           ** servers starting): the next tp_run_create takes it */
  int tracing;             /* the host records spans: each new run is traced */
  uint64_t runs_made;      /* runs made so far (read by other threads: metrics) */
} tp_core;

/* The sandbox chunks (16 KiB) an engine keeps from its closed runs for its next ones: a
** run makes a few, so a steady server reuses them, and a burst of runs that ends leaves
** at most 16 MiB behind. */
#define TP_JSON_TEXTS_MAX 8  /* tool results remembered as JSON text (run.c) */
#define TP_CORE_CHUNKS 1024
#define TP_CORE_SANDBOXES 4  /* pooled sandboxes per engine (sandbox.h), each with a copy */

#define TP_RUN_HOST_SPACE 192  /* bytes of tp_run.host_space */
#define TP_RUN_CALLS_INLINE 16 /* call slots a run holds in its own allocation */

#define tp__core(e) ((tp_core *)(void *)(e))
/* Tells the host through callback fn of run r's engine: tp__hook(r, wake, r). */
#define tp__hook(r, fn, ...) (tp__core((r)->e)->hooks->fn(tp__core((r)->e)->ud, __VA_ARGS__))

/* 0, or -1 when the watchdog cannot be set up. */
int  tp__core_init(tp_core *k, const tp__host_hooks *hooks, void *ud);
/* Destroys the runs still alive, then the watchdog; frees the chunks kept. */
void tp__core_close(tp_core *k);

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

enum { ST_READY, ST_STARTED, ST_DONE };

struct tp_run {
  tp_engine *e;            /* opaque here: the core's part of it is tp__core(e) */
  uint64_t id;             /* unique within the engine, from 1 */
  tp_run *prev, *next;     /* the engine's live runs */
  tp_sandbox *sb;
  char *src;               /* normalized source, for the "source" line of errors */
  size_t srclen;
  int state;
  int traced;              /* the host is told its calls' and its own end (tp_core.tracing) */
  int nargs;               /* values to resume the thread with */
  tp_watch watch;          /* the fallback when the thread's timer is unavailable */
  tp_step_clock clock;     /* the step's deadlines, for the thread's timer */
  int timed;               /* the step runs under clock (0: under watch) */
  pthread_t thread;        /* of the current step */
  clockid_t cpu_clock;
  uint64_t start_ns, deadline_ns, step_end_ns;
  uint64_t hold_since_ns;  /* tp_run_hold_wall: when its clock stopped (0: it runs) */
  uint64_t held_deadline_ns; /* deadline_ns while the clock is stopped */
  uint64_t compile_ns;     /* wall time the compile took, charged to the first step */
  uint64_t wait_ns;        /* what the caller waited before the run was made (tp_core's
                           ** wait_ns): counted in wall_ms and against its time limit */
  uint64_t cpu_used_ns, step_cpu0;
  int compiled;            /* 0: pending_error is the syntax error */
  int return_line;         /* the line of the script's one top-level return, or 0 */
  /* tool calls (calls.c). The run holds the calls listed in the envelope (the first
  ** TP_CALLS_LISTED) and the later calls the script has not taken yet; a later call is
  ** let go, its outcome folded into `summary`, once it is done and taken. */
  tp_call **callv;         /* the calls held, by increasing id; NULL where let go */
  uint64_t *callid;        /* callid[i]: the id of callv[i], kept where callv[i] is NULL */
  size_t ncallv, capcallv, nholes;
  /* the first TP_RUN_CALLS_INLINE slots of callv and callid, in the run's allocation */
  tp_call *callv_in[TP_RUN_CALLS_INLINE];
  uint64_t callid_in[TP_RUN_CALLS_INLINE];
  size_t active_from;      /* callv[i] for i below this are all done or let go */
  uint32_t ready_count;    /* done calls the script has not taken yet */
  struct { const void *tool; uint32_t n; } *per_tool;  /* calls per tool, when limited */
  size_t nper_tool;
  uint64_t next_call_id;
  uint64_t ncalls;         /* every call attempt, the count limit.tool_calls checks */
  uint32_t in_flight;
  tp_calls_summary summary;/* the calls past the listed ones that were let go */
  int waiting;             /* the script is blocked on calls (2: look again) */
  void *host_data;         /* what the host keeps for the run (its driver's queue links
                           ** and timer), in host_space when it fits */
  /* room for host_data, in the run's own allocation: a record made and freed apart was
  ** two of the driver's mallocs and frees a run of many at once */
  _Alignas(16) unsigned char host_space[TP_RUN_HOST_SPACE];
  json_t *pending_error;   /* an error decided before the run started */
  char *envelope;
  size_t envelope_cost;    /* what the envelope was charged to the host budget */
  int ok;
  /* driven by the engine's loop (tp_run_start) */
  tp_run_done_cb done_cb;
  void *done_ud;
  int async, reported;
  struct tp_session *session; /* the run borrows the session's sandbox */
  uint64_t fs_used;        /* bytes charged to limits.fs_bytes (host.c, E.fs_charge) */
  uint64_t blocked_ns;     /* time plugin handlers held the thread past 100 ms (host.c) */
  char blocked_hint[300];  /* the hint of a time limit those blocks explain, or "" */
  /* tp__run_set_call_hook: told when a tool call of the run starts and ends */
  void (*call_hook)(struct tp_run *r, const char *tool, int done, void *ud);
  void *call_hook_ud;
  /* tp_run_on_progress: told a call's progress reports (tp_call_progress) */
  void (*progress_hook)(struct tp_run *r, const char *tool, const char *text, void *ud);
  void *progress_hook_ud;
  struct tp_replay *rp;    /* seed, clock, log, replay (replay.c); NULL: none of them */
  /* the calls started last that were all the same tool with the same arguments: a loop
  ** that does not advance, named when limit.tool_calls ends it (calls.c) */
  json_t *warnings;        /* the envelope's warnings (warnings.c), or NULL */
  /* the last tool results that were strings holding JSON text (calls.c), so that an
  ** error where the script used one as a table names the tool (run.c: json_text_hint) */
  struct tp_json_text { uint64_t hash; size_t len; char tool[64]; } *json_texts;  /* or NULL:
                           ** made at the first (TP_JSON_TEXTS_MAX of them) */
  int njson_texts;
  uint64_t same_hash;
  uint32_t same_calls;
  char same_tool[64];
  int prechecked_out;      /* the pre-run check stopped it (pending_error is its finding,
                           ** or NULL out of memory): tp__run_recheck may look again */
  struct tp__tool_set *own_tools; /* the run's caller tools (host/provider_caller.c), or
                           ** NULL; the host frees them when the run is gone */
};

struct tp_session {
  tp_engine *e;            /* opaque here: the core's part of it is tp__core(e) */
  tp_sandbox *sb;
  tp_run *busy;            /* the run using the sandbox now */
  struct tp__tool_set *own_tools; /* caller tools of all its runs (provider_caller.c) */
};

/* Makes a run of source in sandbox sb (created for it, or a session's); compiles it. */
tp_run *tp__run_new(tp_engine *e, tp_sandbox *sb, const char *source, size_t len);
/* Makes r's sandbox again, its string hashes seeded with seed, and compiles r's source
** in it (a replayable run: replay.c). Only before r's first step, and not in a session.
** 0, or -1 when out of memory (r keeps its sandbox). */
int tp__run_reseed(tp_run *r, unsigned int seed);
/* The pre-run check of r again, now that it has tools of its own (a caller tool was
** declared, or it joined a session that has some): a finding that named a tool it did
** not know then is dropped if the tool is known now. Only before r's first step. */
void tp__run_recheck(tp_run *r);
/* Ends a compiled run that has not started as a check (tp_engine_check): ok, no result. */
void tp__run_finish_unstarted(tp_run *r);

/* Sets a hook told when each tool call of r starts (done 0) and completes (done 1),
** for progress reports (mcp.c). It is called from inside steps and completions, so
** it must not touch the run or the engine. NULL clears it. */
void tp__run_set_call_hook(tp_run *r, void (*hook)(tp_run *r, const char *tool,
                           int done, void *ud), void *ud);

#endif
