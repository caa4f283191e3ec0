/*
** state.h: the records both threads of `tidepool mcp` see (server.c, the protocol thread;
** worker.c and pause.c, the workers; mail.c between them): the options, the request in
** its two halves (req, the protocol thread's; job, its worker's), the worker, the server,
** and the mail that carries a job from one thread to the other. Not installed, not API.
**
** Threads. The protocol thread owns standard input and output, on a libuv loop of its
** own (a worker writes one kind of line itself: its caller tools' calls, through the
** transport's emit_any, one thread hop shorter): it parses every line, answers
** initialize, ping, tools/list and logging/setLevel itself, keeps the sessions' table,
** and never runs a script. Scripts run on a pool of worker threads (--workers, default
** one per core), each with its own engine (an engine is single-threaded; its host Lua
** state, luv loop, watchdog and sandboxes are its own).
** The two sides talk through mailboxes: a mutex-guarded list of messages plus an eventfd
** that wakes the receiving loop. A tools/call becomes a request that goes to
** a worker (M_RUN); the worker runs it on its engine's driver, time-sliced with its other
** runs, builds the response line (cutting it to size there, off the protocol thread) and
** sends it back (M_DONE); progress notifications come back the same way (M_LINE) and
** cancellation goes out the same way (M_CANCEL), so tp_run_cancel runs on the run's own
** thread. A request's job belongs to the worker between M_RUN and M_DONE: the protocol
** thread does not touch it then. At most RUNS_MAX scripts run at once; more
** wait in order, and past WAITING_MAX waiting ones the server stops reading standard
** input until some finish (a flood costs memory only up to that point).
**
** Sessions: a call with a session id runs in that session's sandbox, so globals stay. A
** session lives on one worker (chosen when it is made: the least loaded) and every call
** of it runs there. At most --max-sessions exist; a new one evicts the least recently
** used idle session, or, when every session is busy, the call is refused (isError, code
** session.full). A session idle longer than --session-idle, or whose run hit
** limit.memory, is dropped; the model learns it from the "session" field of the next
** result with that id. Session ids are 1 to SESSION_ID_MAX bytes without control
** characters, and matched byte for byte. A session is its principal's (over HTTP with
** auth; else the one local principal ""): the same id under two principals is two
** sessions, and nothing of one reaches the other. With --state, servers that share the
** store hold each session in one of them: the worker claims it in the store before a call
** runs (tp_engine_claim_lease, keyed by principal and id, ttl --session-idle, extended by
** every call), and a call for a session another server holds is refused with
** session.moved naming it (--advertise), until that server's lease lapses (--lease: worker
** 0 renews it); then the session is taken over, afresh, and the result says so.
**
** The kv.* tools of every worker share one store (engine/host/kvstore.c), so a key written by
** one call is read by the next whichever worker runs it.
**
** Results: what a model reads (tp__mcp_view_json: ok, result or error, logs, the calls counted
** by tool and each failed call in full) as structuredContent and the same JSON as a text
** block; the envelope's full calls record and stats go to the result's _meta (the
** client's, not the model's: MCP's Result._meta, under "tidepool/" keys) and, with
** --audit FILE, to one JSON line per run. A response line never exceeds LINE_OUT_MAX
** (the reference client's limit): past it _meta goes first, then the result and logs are
** cut, then the failed calls; ok and the error always stay, and the view says what was
** cut in "truncated".
**
** Batches (a JSON array of messages) were removed from MCP in 2025-06-18: they are refused
** (-32600) unless the connection negotiated an older version; then at most BATCH_MAX
** messages, and their responses together stay within LINE_OUT_MAX.
**
** Standard input closing ends the server: every run is cancelled (without responses:
** nobody is left to read them), the workers stop and are joined, exit status 0.
*/
#ifndef tidepool_mcp_state_h
#define tidepool_mcp_state_h

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>
#include <uv.h>

#include "tidepool.h"
#include "tidepool_server.h"
#include "approve.h"
#include "era.h"
#include "transport.h"
#include "view.h"

/* A request line; a longer one is answered -32600 (the transport skips it). */
#define TP__MCP_SERVER_LINE_IN_MAX (16u << 20)

/* What `tidepool mcp` was asked for (main.c reads it from the command line and the
** config); the server keeps a copy, whose pointers stay main.c's. */
typedef struct tp__mcp_options {
  tp_limits lim;
  const char *http_listen;  /* --http, or NULL */
  const char **dirs;        /* --tools, in order */
  size_t ndirs;
  int builtin, expose, test_tools;
  int describe;             /* --describe: 0 auto (the first that fits in 2,048 characters),
                            ** 1 full, 2 compact */
  const char *workspace, *name;
  const char *audit;        /* --audit FILE, or NULL */
  const char *otlp;         /* --otlp URL: spans over OTLP/HTTP, or NULL (the config's) */
  const char *trace_file;   /* --trace-file FILE: spans as JSON lines, or NULL */
  const char *state;        /* --state (or the config's "state"), or NULL: memory */
  const char *advertise;    /* --advertise URL: the owner's name of the sessions it holds */
  const char *config_path;  /* --config FILE, or NULL */
  char *config;             /* its text */
  size_t config_len;
  char *config_dir;         /* its folder, absolute: relative paths in it start there */
  char **config_owned;      /* the file's tools and workspace, copied (NULL-terminated) */
  const char **limit_opts;  /* the limit options given, field and value pairs, applied
                            ** over the file's limits */
  size_t nlimit_opts;
  uint64_t workspace_max;   /* --workspace-max, when workspace_max_set */
  int workspace_max_set;
  uint64_t session_idle_us;
  unsigned max_sessions, workers;
  int workers_set;          /* --workers given (else 1 when the config has MCP servers) */
  uint64_t pause_ttl_us;    /* --pause-ttl */
  uint64_t lease_us;        /* --lease: how long this server's claims outlive its silence */
  const char *secret_file;  /* --secret-file, or NULL (a random secret) */
  int asks;                 /* the config's policy has an "ask" rule: approvals are on */
  int ui;                   /* --ui: the operator page keeps recent runs (ui.c) */
  char policy_hash[TP__MCP_APPROVE_HASH_LEN];  /* of the config's policy (durable runs) */
} tp__mcp_options;
typedef tp__mcp_options options;

/* The id prefix of the tidepool/callTool requests a worker sends for caller tools (pause.c);
** the protocol thread routes their answers back by it. */
#define TP__MCP_CALL_PREFIX "tidepool-call-"

typedef struct tp__mcp_server server;
typedef struct tp__mcp_session session;
typedef struct tp__mcp_worker worker;
typedef struct tp__mcp_req req;

/* A worker's life, as main.c hands it to the server (worker.c's functions): the server
** starts and stops workers through it, and never calls worker.c by name. */
typedef struct tp__mcp_worker_ops {
  int (*open)(worker *w);
  void (*load)(worker *w);
  void (*close)(worker *w);
  void *(*main)(void *w);
} tp__mcp_worker_ops;

/* A request line; longer ones are answered -32600. The protocol thread parses each line
** itself, a step bounded by this cap, not by polling: dense JSON of 16 MiB (millions of
** small values) takes about a second of CPU, and only the client that sent it waits. What
** a script causes never runs here: responses are built and cut on the workers, and the
** protocol thread only writes them (and parses a batch member's, at most BATCH_CALL_MAX). */
#define LINE_IN_MAX   TP__MCP_SERVER_LINE_IN_MAX
#define LINE_OUT_MAX  (10u << 20)   /* a response line (the reference client's limit) */
#define RUNS_MAX      64            /* scripts running at once, all workers together */
#define WAITING_MAX   256           /* waiting scripts before reading pauses */
#define DROPPED_MAX   64            /* dropped session ids remembered, with why */
#define SESSION_ID_MAX 128          /* bytes */
#define ID_MAX        TP__MCP_VIEW_ID_MAX  /* a request id, as JSON text: it is echoed back */
#define BATCH_MAX     64            /* messages in a batch (versions before 2025-06-18) */
/* What one tools/call response of a batch may take, so that BATCH_MAX of them fit a line. */
#define BATCH_CALL_MAX ((LINE_OUT_MAX - 65536) / BATCH_MAX)


static const char *const levels[] = {
  "debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"
};
enum { L_DEBUG, L_INFO, L_NOTICE, L_WARNING, L_ERROR };




/* The responses of one batch; sent as one array once no request of it is running. */
typedef struct tp__mcp_batch {
  json_t *responses;
  size_t bytes;             /* of the responses' JSON text so far */
  int refs;
} batch;

/* The protocol thread's record of a session; its sandbox (a tp_session) lives on the
** worker, found there by number. */
struct tp__mcp_session {
  session *prev, *next;
  char *id;                 /* idlen bytes (no NUL inside: refused), NUL-terminated */
  size_t idlen;
  char *principal;          /* who made it ("" without auth: the one local principal);
                            ** only calls of that principal find it */
  uint64_t num;
  worker *w;
  int busy;
  uint64_t last_used_ns;
};

enum {
  M_RUN, M_CANCEL, M_DROP, M_RELOAD, M_STOP,   /* to a worker */
  M_READY, M_DONE, M_LINE, M_LOG,              /* to the protocol thread */
  M_RESUME, M_ANSWER,                          /* approvals: to a worker */
  M_PARK,                                      /* approvals: to the protocol thread */
  M_TOOLS                                      /* an engine's tools changed (late upstream) */
};

/* Why a job's session goes (M_DONE's drop). */
enum { TP__MCP_DROP_NONE, TP__MCP_DROP_MEMORY, TP__MCP_DROP_MOVED };

typedef struct tp__mcp_job job;

typedef struct tp__mcp_mail {
  struct tp__mcp_mail *next;
  int kind;
  worker *w;                /* the sender of a message to the protocol thread */
  req *q;                   /* M_DONE, M_LINE, M_PARK: the request (the worker only names it) */
  job *jb;                  /* M_RUN, M_DONE: the job, the request's worker half */
  uint64_t n;               /* M_CANCEL, M_RESUME: the request's serial; M_DROP: the
                            ** session's number */
  int level;                /* M_LOG */
  char *logger;             /* M_LOG: who speaks (the engine logger's source), or NULL */
  int fail;                 /* M_READY: the worker could not start */
  char *text;               /* M_LINE, M_LOG, M_PARK, M_RESUME; M_DONE: the response line
                            ** (NULL: none); M_READY: the tools' JSON (worker 0) */
  size_t len;
  /* M_DONE: the rest of the job's outcome */
  int drop;                 /* its session goes (TP__MCP_DROP_*) */
  int ended_parked;         /* its run ended while paused: nobody waits for its result */
  int progressed;           /* progress notifications went before the response */
  char *summary;            /* the operator page's summary of the run (--ui), or NULL */
  /* M_PARK, M_DONE: the run's id ("" before it had one), and the exposed tool it calls
  ** when a restore read it from the store (else NULL) */
  char run_id[TP__MCP_APPROVE_RUN_ID_MAX];
  char *tool;
  /* M_RESUME: what of the resuming request the run answers with */
  json_t *id;
  size_t budget;
  int era26, live;
} mail;

/* The receiver's wake-up is an eventfd watched by a uv_poll_t, written only when the list
** goes from empty to not empty: not a uv_async_t, whose receiver spins (997 pauses, then
** sched_yield, again) while a sender preempted inside uv_async_send holds it busy, which
** on two loaded cores cost a caller tool's round trip tens of microseconds. */
typedef struct tp__mcp_mailbox {
  pthread_mutex_t mu;
  mail *head, *tail;
  uv_poll_t poll;
  int fd;                   /* the eventfd; -1 once destroyed */
  void (*cb)(void *data);   /* on the receiver's loop, when mail may have come */
  void *data;
  int inited;
} mailbox;

/* A request, protocol side: its state is where it is (server.c's req_to moves it). */
typedef enum tp__mcp_req_state {
  TP__MCP_RQ_NEW,           /* being made */
  TP__MCP_RQ_WAITING,       /* in s->waiting: RUNS_MAX scripts run already */
  TP__MCP_RQ_RUNNING,       /* in s->reqs: its job is the worker's (M_RUN, M_RESUME) */
  TP__MCP_RQ_RESUMED,       /* as RUNNING, a paused run going on (resume_run, a restore) */
  TP__MCP_RQ_CANCELLED,     /* as RUNNING, but no response is wanted (M_CANCEL went) */
  TP__MCP_RQ_PARKED,        /* in s->parked: answered "paused" (M_PARK), its run waits */
  TP__MCP_RQ_DEFERRED,      /* in s->deferred: answered a moment after its progress */
  TP__MCP_RQ_GONE           /* in no list: being freed */
} tp__mcp_req_state;

/* A request, protocol side: written and read by the protocol thread only. Its worker half,
** the job, goes to the worker with M_RUN and comes back with M_DONE; between them this
** thread does not touch it, and what else crosses goes by mail. */
struct tp__mcp_req {
  req *prev, *next;         /* the list of its state */
  tp__mcp_req_state state;
  server *s;
  worker *w;
  job *jb;                  /* its worker half (see above) */
  json_t *id;
  batch *b;
  session *sess;
  void *origin;             /* the HTTP request it came in (http.c), or NULL: stdio */
  uint64_t serial;
  int restore;              /* it resumes a run from the store (RESUMED once it runs) */
  int modern;               /* a 2026-07-28 request: its result gets resultType */
  size_t budget;            /* the response line's size cap */
  char *tool;               /* the exposed tool called, or NULL for run_lua */
  char *principal;          /* who called over HTTP with auth, or NULL */
  int callers_live;         /* its caller tools' calls go to the client as requests */
  char run_id[TP__MCP_APPROVE_RUN_ID_MAX];  /* its run's id, from M_PARK (or a restore) */
  char *line;               /* the response, from M_DONE, while deferred */
  size_t line_len;
  uv_timer_t defer;         /* holds the response back after progress notifications */
  /* the operator page (--ui, ui.c): the run's summary and timeline (JSON text, from
  ** M_DONE), and the pending calls of its last paused result */
  char *ui_summary;
  json_t *ui_pending;
};

/* A job, the worker half of a request: made by the protocol thread with the request and
** the worker's from M_RUN to M_DONE (then the protocol thread frees it); written and read
** by the worker only in between. Its state is where its run is (tp__mcp_job_to). */
typedef enum tp__mcp_job_state {
  TP__MCP_JOB_NEW,          /* given (M_RUN) */
  TP__MCP_JOB_CLAIMING,     /* its session's claim is asked of the store (--state) */
  TP__MCP_JOB_RESTORE_READ, /* a restore reads the run's record from the store, */
  TP__MCP_JOB_RESTORE_PROBE,    /* probes the run's claim (servers sharing the store), */
  TP__MCP_JOB_RESTORE_TAKEOVER, /* takes it over from a holder whose lease lapsed, */
  TP__MCP_JOB_RESTORE_CLAIMED,  /* reads it again, claimed, and its call log */
  TP__MCP_JOB_RUNNING,      /* its run is on the engine (in w->running) */
  TP__MCP_JOB_PARKED,       /* answered "paused" (M_PARK): its run waits for M_RESUME */
  TP__MCP_JOB_CANCELLED,    /* its run ends without a response (M_CANCEL, --pause-ttl) */
  TP__MCP_JOB_DONE          /* M_DONE went: the protocol thread's again */
} tp__mcp_job_state;

/* A paused run's record in the state store (--state, pause.c): its own state. */
typedef enum tp__mcp_dur_state {
  TP__MCP_DUR_OFF,          /* not kept (a session's run, no --state): dnote says why */
  TP__MCP_DUR_KEPT,         /* its call log is kept; nothing in the store yet */
  TP__MCP_DUR_SAVED,        /* its log and record are in the store (up to dput) */
  TP__MCP_DUR_BAD,          /* not kept any more (dwhy): it waits in memory only */
  TP__MCP_DUR_BAD_SAVED     /* as BAD, with an earlier record in the store to delete */
} tp__mcp_dur_state;

/* A stored run's record: what the store says of it, or the one write of it under way
** (pause.c's dur_next starts each write, one at a time, and its end moves this on). A live
** caller call goes to the client once a save whose record has it is done; the client's
** answers apply once the record says "running". */
typedef enum tp__mcp_dmark {
  TP__MCP_DMARK_PAUSED,     /* paused at its calls (as saved), or nothing saved yet */
  TP__MCP_DMARK_SAVING,     /* a save (log, then the paused record) is under way: dsave */
  TP__MCP_DMARK_MARKING,    /* being marked "running": answers wait */
  TP__MCP_DMARK_RUNNING     /* "running": answers apply */
} tp__mcp_dmark;

struct tp__mcp_job {
  tp__mcp_job_state state;
  req *rq;                  /* its request: only named in mail, never read here */
  worker *w;
  uint64_t serial;
  mail m;                   /* M_RUN out, M_DONE back: never in two mailboxes at once */
  /* given with M_RUN (id, budget, era26 and callers_live again with each M_RESUME) */
  json_t *id;
  size_t budget;            /* the response line's size cap */
  char *code;
  size_t codelen;
  char *traceparent;        /* params._meta.traceparent: the run's parent span, or NULL */
  char *tool;               /* the exposed tool called, or NULL for run_lua */
  char *mcp_name;           /* its MCP name (fs_read for fs.read) */
  json_t *args;             /* its arguments, as the client sent them */
  uint64_t sess_num;        /* 0: no session */
  json_t *sess_info;        /* the "session" field of the result */
  json_t *token;            /* progressToken, or NULL */
  char *principal, *scopes; /* who called over HTTP with auth (the policy's), or NULL */
  int elicit;               /* ask with elicitation/create (2: with "mode") */
  int era26;                /* a 2026-07-28 request: ask with an input_required result */
  char *callers;            /* caller tools: the run's declarations (JSON text), or NULL */
  int callers_live;         /* their calls go to the client as tidepool/callTool requests
                            ** (else the run pauses for resume_run's results) */
  int callers_session;      /* the declarations are kept by the run's session */
  int has_lim;              /* _meta["tidepool/limits"]: lim is this run's (lower) limits */
  tp_limits lim;
  json_t *restore;          /* a restore: resume_run's arguments, until applied */
  json_t *dpending;         /* a restore: the record's pending calls, which its replay
                            ** holds again before the arguments apply */
  int tool_from_store;      /* a restore read tool from the run's record */
  char run_id[TP__MCP_APPROVE_RUN_ID_MAX];  /* a restore's run, or the first park's */
  /* the run */
  struct tp__mcp_apx *ax;           /* its held calls (approvals, caller tools), or NULL */
  json_t *seen;             /* calls made so far, by tool (for a paused result) */
  job *wprev, *wnext;       /* the worker's running jobs */
  tp_run *run;
  uint64_t progress;
  int drop;                 /* its session goes (TP__MCP_DROP_*) */
  char *line;               /* the response, or NULL (cancelled) */
  size_t line_len;
  /* durable runs (--state, not in a session): the call log as tp_run_on_log tells it,
  ** entries [0, dput) of it in the store at positions dbase + i */
  tp__mcp_dur_state dur;
  struct tp__mcp_dent { char *p; size_t n; } *dents;
  size_t dn, dcap, dput, dbase;
  int drunning;             /* a restore's record said "running" */
  tp__mcp_dmark dmark;      /* the stored record, or its write under way (dur_next) */
  struct tp__mcp_dsave *dsave;      /* the save under way (dmark SAVING), or NULL */
  struct tp__mcp_rclaim *dresume;   /* a resume's "running" mark waiting for the write
                                    ** under way (dur_next), or NULL */
  int dpark;                /* the paused result waits for a save: 1 asked, 2 a save begun
                            ** since is under way (dur_next) */
  const char *dnote;        /* why the paused run does not survive a restart, or NULL */
  char dwhy[300];
  tp_limits dlim;           /* the limits it runs with */
  int64_t dexp_ms;
};


typedef struct tp__mcp_sleeper sleeper;
typedef struct tp__mcp_wsess { struct tp__mcp_wsess *next; uint64_t num; tp_session *ts; } wsess;

struct tp__mcp_worker {
  server *s;
  void (*begin)(worker *w, job *q, tp_run *run);  /* starts a run (worker.c's) */
  unsigned index;
  pthread_t thread;
  int threaded, thread_started;
  mailbox mb;               /* its async is on the worker's loop */
  /* worker side */
  tp_engine *e;
  uv_loop_t *loop;
  job *running;
  wsess *sessions;
  sleeper *sleepers;
  char *desc;               /* run_lua's description, cached */
  int stopping;
  uv_timer_t lease;         /* worker 0 with --state: renews the server's lease */
  int lease_on, lease_failing;
  uint64_t elicits;         /* elicitation requests sent */
  /* protocol side */
  size_t load, nsess;
  int ready;                /* its first M_READY came: its mailbox is open */
};

struct tp__mcp_server {
  uv_loop_t loop_storage, *loop;  /* the protocol thread's */
  options o;
  tp__mcp_worker_ops wops;  /* a worker's life (worker.c's), given by main.c */
  int audit_fd;             /* --audit's file (O_APPEND), or -1 */
  int journal_fd;           /* without --audit, --state's call journal (O_APPEND), or -1 */
  int quiet;                /* no logs on standard error (fuzzing) */
  tp__mcp_transport t;      /* where messages come from and lines go (transport.h) */
  int has_t;
  char *owner;              /* with --state: its name as the holder of sessions, or NULL */
  void *origin;             /* where what is written now goes: an HTTP request, or NULL */
  int noting;               /* what is written now is a notification, not a response */
  mailbox mb;               /* from the workers; its async is on the protocol loop */
  worker *workers;
  unsigned nworkers, nready, nstarted, rr;
  int start_failed;
  tp_store *kv;             /* shared by the workers' engines */
  /* input */
  int eof, done;
  uv_timer_t drain;         /* after end of input: the bound on what is still running */
  int drain_on;
  /* requests */
  req *reqs, *waiting, *waiting_tail;
  size_t nrunning, nwaiting;
  req *deferred;            /* answered, waiting for their defer timer */
  uint64_t serial;
  int initialized, level;
  const char *version;      /* negotiated by initialize, or NULL */
  int client_elicit;        /* the client declared elicitation (2: with form "mode") */
  int client_callers;       /* the client declared tidepool/callerTools (its version) */
  req *parked;              /* requests answered "paused" whose runs wait (approvals) */
  int modern_req;           /* handling a 2026-07-28 request (mcp_era.h) */
  tp__mcp_era_listen *listen;   /* its subscriptions/listen streams */
  /* tools, as worker 0 last reported them */
  json_t *tools;            /* the tools/list result */
  json_t *tool_names;       /* MCP name -> tool name, every exposed tool */
  json_t *early;            /* warnings before initialize: [{level, text}], or NULL */
  size_t ntools;
  /* sessions */
  session *sessions;
  size_t nsessions;
  uint64_t session_nums;
  char *dropped_id[DROPPED_MAX], *dropped_why[DROPPED_MAX], *dropped_who[DROPPED_MAX];
  size_t dropped_len[DROPPED_MAX];
  size_t dropped_next;
  uv_timer_t sweep;
  /* plugin directories */
  char *builtin_dir;
  uv_fs_event_t *watch;
  size_t nwatch;
  uv_timer_t reload_timer;
  int reload_pending;
  unsigned reloading;       /* workers still reloading */
  struct tp__mcp_ui *ui;    /* --ui: recent runs for the operator page (ui.c), or NULL */
};


#endif
