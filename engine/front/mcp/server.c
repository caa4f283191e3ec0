/*
** mcp.c: `tidepool mcp`, a Model Context Protocol server on standard input and output.
**
** One JSON-RPC 2.0 message per line in, one per line out. Standard output carries
** protocol messages only: at startup the protocol gets a private duplicate of fd 1 and
** fd 1 itself is pointed at standard error, so nothing a plugin or the engine prints can
** reach the client. Logs go to standard error (and, at the client's logging level, as
** notifications/message).
**
** Threads. The protocol thread owns standard input and output, on a libuv loop of its
** own: it parses every line, answers initialize, ping, tools/list and logging/setLevel
** itself, keeps the sessions' table, and never runs a script. Scripts run on a pool of
** worker threads (--workers, default one per core), each with its own engine (an engine
** is single-threaded; its host Lua state, luv loop, watchdog and sandboxes are its own).
** The two sides talk through mailboxes: a mutex-guarded list of messages plus a
** uv_async_t that wakes the receiving loop. A tools/call becomes a request that goes to
** a worker (M_RUN); the worker runs it on its engine's driver, time-sliced with its other
** runs, builds the response line (cutting it to size there, off the protocol thread) and
** sends it back (M_DONE); progress notifications come back the same way (M_LINE) and
** cancellation goes out the same way (M_CANCEL), so tp_run_cancel runs on the run's own
** thread. A request belongs to the worker between M_RUN and M_DONE: the protocol thread
** does not touch its run-side fields then. At most RUNS_MAX scripts run at once; more
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
**
** With --http (mcp_http.c) the protocol thread serves Streamable HTTP instead of standard
** input: each POST is one message, and what is written for it (its response, its run's
** progress) goes back to that HTTP request, its origin (s->origin while it is handled,
** q->origin after); nothing goes to standard output.
*/
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <uv.h>

#include "tidepool.h"
#include "options.h"
#include "mcp.h"
#include "approve.h"
#include "http.h"
#include "era.h"
#include "view.h"

/* CLOCK_MONOTONIC in nanoseconds. */
static uint64_t now_ns (void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* A request line; longer ones are answered -32600. The protocol thread parses each line
** itself, a step bounded by this cap, not by polling: dense JSON of 16 MiB (millions of
** small values) takes about a second of CPU, and only the client that sent it waits. What
** a script causes never runs here: responses are built and cut on the workers, and the
** protocol thread only writes them (and parses a batch member's, at most BATCH_CALL_MAX). */
#define LINE_IN_MAX   (16u << 20)
#define LINE_OUT_MAX  (10u << 20)   /* a response line (the reference client's limit) */
#define RUNS_MAX      64            /* scripts running at once, all workers together */
#define WAITING_MAX   256           /* waiting scripts before reading pauses */
#define DROPPED_MAX   64            /* dropped session ids remembered, with why */
#define SESSION_ID_MAX 128          /* bytes */
#define ID_MAX        TP__MCP_VIEW_ID_MAX  /* a request id, as JSON text: it is echoed back */
#define BATCH_MAX     64            /* messages in a batch (versions before 2025-06-18) */
#define WORKERS_MAX   64
#define LEASE_DEFAULT_US (15ull * 1000000u)
/* What one tools/call response of a batch may take, so that BATCH_MAX of them fit a line. */
#define BATCH_CALL_MAX ((LINE_OUT_MAX - 65536) / BATCH_MAX)


static const char *const levels[] = {
  "debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"
};
enum { L_DEBUG, L_INFO, L_NOTICE, L_WARNING, L_ERROR };

static const char usage_text[] =
  "usage: tidepool mcp [options]\n"
  "\n"
  "Serves the Model Context Protocol on standard input and output: one tool, run_lua,\n"
  "runs a Lua script that calls the loaded tools. Exits when standard input closes.\n"
  "\n"
  "options:\n"
  "  --config FILE        read limits, tools, workspace, mcpServers, http, commands and\n"
  "                       policy from a JSON config file (tidepool config check FILE\n"
  "                       checks it); options given here win over it\n"
  "  --tools DIR          load the plugin tools of DIR (repeatable); DIR is watched and\n"
  "                       reloaded when it changes (notifications/tools/list_changed)\n"
  "  --no-builtin-tools   do not load the built-in tools\n"
  "  --workspace DIR      the directory the fs.* tools may use\n"
  "  --workspace-max SIZE how much the fs.* tools may grow it (default 1G)\n"
  "  --state DIR          keep kv keys, rate buckets and paused runs in DIR/tidepool.db\n"
  "                       (SQLite, made when missing) for every worker, across restarts\n"
  "                       (a paused run outside a session is resumed after a restart by\n"
  "                       replay; give the same --secret-file); also sqlite:PATH or\n"
  "                       redis://HOST:PORT/DB\n"
  "  --advertise URL      with --state: this server's address, as other servers name it\n"
  "                       when they answer session.moved for a session it holds\n"
  "                       (default: http://ADDR:PORT/mcp of --http)\n"
  "  --lease DURATION     with --state: this server renews a lease on its name (every\n"
  "                       third of DURATION, default 15s); once it lapses (the server\n"
  "                       died, or lost the store) others take over its sessions and\n"
  "                       paused runs\n"
  "  --name NAME          the name of the script tool (default run_lua)\n"
  "  --expose-tools       also list every loaded tool as an MCP tool of its own, named\n"
  "                       for every client (fs.read as fs_read; a taken name gets _2),\n"
  "                       but those whose tool_settings callers leave out \"direct\"\n"
  "  --audit FILE         append one JSON line per run to FILE: time, session, tool, ok,\n"
  "                       error code, and every call record and the stats (the model's\n"
  "                       result counts the calls by tool and lists the failed ones;\n"
  "                       the full record is also in the result's _meta)\n"
  "  --describe MODE      run_lua's description: full (every tool's fields and rules),\n"
  "                       auto (default: the first of full, one line a tool, a line a\n"
  "                       namespace, namespaces with counts that fits in 2,048\n"
  "                       characters, where Claude Code cuts), compact (the same from\n"
  "                       one line a tool on); scripts read the rest with\n"
  "                       tools.describe(name) and tools.search(words)\n"
  "  --session-idle DURATION  drop a session idle this long (default 10m)\n"
  "  --max-sessions N     sessions kept at once (default 16)\n"
  "  --pause-ttl DURATION how long a run paused for an approval waits for resume_run\n"
  "                       (default 24h; 500ms, 30s, 10m, 24h); then it ends, its held\n"
  "                       calls denied. The time paused does not count against --timeout\n"
  "  --secret-file FILE   the server secret (at least 32 bytes) that binds approvals and\n"
  "                       seals requestState; servers sharing it accept each other's\n"
  "                       (default: random at start)\n"
  "  --workers N          threads that run scripts, each with its own engine (default:\n"
  "                       one per core, at most 64; 1 when the config has MCP servers,\n"
  "                       since each worker runs its own copy of them); the protocol is\n"
  "                       answered on a thread of its own, so a busy script never\n"
  "                       delays it\n"
  "\n"
  "limits of each script, as for tidepool run (a session's memory limit holds for the\n"
  "whole session; SIZE: bytes or 512K, 64M, 1G; DURATION: 500ms, 2s, 1m; N: a count;\n"
  "--max-result is smaller here: about 25,000 tokens of typical JSON, the most Claude\n"
  "Code shows of a tool's result by default):\n";

/* tidepool mcp's default --max-result: Claude Code shows at most 25,000 tokens of a tool's
** result by default, and 80 KiB of typical JSON (API objects: keys, words, ids) is about
** 24,800 o200k tokens (3.3 bytes a token; JSON of bare numbers or ids takes ~2 bytes a
** token: such a result may still pass the client's limit). Past it the script gets
** limit.result with a hint to return less, not a result the client cuts. */
#define MCP_RESULT_MAX (80u * 1024u)

/* tidepool mcp's default limits, for the options and --help alike: the limits table's,
** but --max-result is MCP_RESULT_MAX. */
static void mcp_limits_init (tp_limits *l) {
  tp_limits_init(l);
  l->result = MCP_RESULT_MAX;
}

static void usage (FILE *f) {
  tp_limits defaults;
  mcp_limits_init(&defaults);
  fputs(usage_text, f);
  tp__options_limits_help(f, 1, &defaults);
  fputs("\nA limit of 0 means no limit.\n", f);
  tp__mcp_http_help(f);
}

/* ---- state ------------------------------------------------------------------------- */

typedef struct options {
  tp_limits lim;
  tp__mcp_http_opts http;   /* --http and its limits (mcp_http.c) */
  const char **dirs;        /* --tools, in order */
  size_t ndirs;
  int builtin, expose, test_tools;
  int describe;             /* --describe: 0 auto (the first that fits in 2,048 characters),
                            ** 1 full, 2 compact */
  const char *workspace, *name;
  const char *audit;        /* --audit FILE, or NULL */
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
  char policy_hash[TP__MCP_APPROVE_HASH_LEN];  /* of the config's policy (durable runs) */
} options;

typedef struct server server;
typedef struct session session;
typedef struct worker worker;
typedef struct req req;

/* The responses of one batch; sent as one array once no request of it is running. */
typedef struct batch {
  json_t *responses;
  size_t bytes;             /* of the responses' JSON text so far */
  int refs;
} batch;

/* The protocol thread's record of a session; its sandbox (a tp_session) lives on the
** worker, found there by number. */
struct session {
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
  M_PARK                                       /* approvals: to the protocol thread */
};

typedef struct mail {
  struct mail *next;
  int kind;
  worker *w;                /* the sender of a message to the protocol thread */
  req *q;                   /* M_RUN, M_DONE */
  uint64_t n;               /* M_CANCEL: the request's serial; M_DROP: the session's number */
  int level;                /* M_LOG */
  int fail;                 /* M_READY: the worker could not start */
  char *text;               /* M_LINE, M_LOG; M_READY: the tools' JSON (worker 0) */
  size_t len;
} mail;

typedef struct mailbox {
  pthread_mutex_t mu;
  mail *head, *tail;
  uv_async_t async;
  int inited;
} mailbox;

struct req {
  /* protocol side */
  req *prev, *next;         /* s->reqs (sent to a worker), s->waiting or s->deferred */
  server *s;
  worker *w;
  json_t *id;
  batch *b;
  session *sess;
  void *origin;             /* the HTTP request it came in (mcp_http.c), or NULL: stdio */
  uint64_t serial;
  int cancelled;            /* no response is wanted */
  uv_timer_t defer;         /* holds the response back after progress notifications */
  /* set before M_RUN, read by the worker */
  char *code;
  size_t codelen;
  char *tool;               /* the exposed tool called, or NULL for run_lua */
  char *mcp_name;           /* its MCP name (fs_read for fs.read) */
  json_t *args;             /* its arguments, as the client sent them */
  uint64_t sess_num;        /* 0: no session */
  json_t *token;            /* progressToken, or NULL */
  char *principal, *scopes; /* who called over HTTP with auth (the policy's), or NULL */
  int modern;               /* a 2026-07-28 request: its result gets resultType */
  size_t budget;            /* the response line's size cap */
  int elicit;               /* ask with elicitation/create (2: with "mode") */
  int era26;                /* a 2026-07-28 request: ask with an input_required result */
  char *callers;            /* caller tools: the run's declarations (JSON text), or NULL */
  int callers_live;         /* their calls go to the client as tidepool/callTool requests
                            ** (else the run pauses for resume_run's results) */
  int callers_session;      /* the declarations are kept by the run's session */
  /* approvals, protocol side: parked (answered "paused", in s->parked; M_PARK), resumed
  ** (by resume_run or a requestState: id, b and budget are the resuming request's) and
  ** run_id (written by the worker before its first M_PARK, read after it) */
  int parked, resumed;
  char run_id[TP__MCP_APPROVE_RUN_ID_MAX];
  /* worker side between M_RUN and M_DONE; read by the protocol thread after M_DONE */
  struct apx *ax;           /* its held calls (approvals), or NULL */
  int wparked, ended_parked;/* answered "paused" and waiting; ended while so */
  json_t *seen;             /* calls made so far, by tool (for a paused result) */
  req *wprev, *wnext;       /* the worker's running requests */
  tp_run *run;
  json_t *sess_info;        /* the "session" field of the result */
  uint64_t progress;
  int wcancelled, drop_session;
  int claimed;              /* its session's claim was asked of the store (--state) */
  int moved;                /* another server holds its session: dropped here */
  char *line;               /* the response, or NULL (cancelled) */
  size_t line_len;
  mail m;                   /* M_RUN out, M_DONE back: never in two mailboxes at once */
  /* durable runs (--state, not in a session): the call log as tp_run_on_log tells it,
  ** entries [0, dput) of it in the store at positions dbase + i; restore: a run resumed
  ** from the store (set by the protocol thread: resume_run's arguments, until applied) */
  struct dent { char *p; size_t n; } *dents;
  size_t dn, dcap, dput, dbase;
  int durable, dsaved, dbad, dsave_done;
  int dstage, drunning;     /* a restore's step (DUR_READ...), and its record said "running" */
  struct dsave *dsave;      /* a save under way */
  const char *dnote;        /* why the paused run does not survive a restart, or NULL */
  char dwhy[300];
  tp_limits dlim;           /* the limits it runs with */
  json_t *restore;
  int64_t dexp_ms;
};

typedef struct sleeper sleeper;
typedef struct wsess { struct wsess *next; uint64_t num; tp_session *ts; } wsess;

struct worker {
  server *s;
  unsigned index;
  pthread_t thread;
  int threaded, thread_started;
  mailbox mb;               /* its async is on the worker's loop */
  /* worker side */
  tp_engine *e;
  uv_loop_t *loop;
  req *running;
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

struct server {
  uv_loop_t loop_storage, *loop;  /* the protocol thread's */
  options o;
  int out;                  /* the protocol's fd (a duplicate of the original fd 1) */
  int audit_fd;             /* --audit's file (O_APPEND), or -1 */
  int out_broken;
  void (*sink)(void *ud, const char *line, size_t len);  /* instead of out (fuzzing) */
  void *sink_ud;
  int quiet;                /* no logs on standard error (fuzzing) */
  tp__mcp_http *http;       /* serving HTTP (mcp_http.c) instead of standard input */
  char *owner;              /* with --state: its name as the holder of sessions, or NULL */
  void *origin;             /* where what is written now goes: an HTTP request, or NULL */
  int noting;               /* what is written now is a notification, not a response */
  mailbox mb;               /* from the workers; its async is on the protocol loop */
  worker *workers;
  unsigned nworkers, nready, nstarted, rr;
  int start_failed;
  tp_store *kv;             /* shared by the workers' engines */
  /* input */
  int in_file;              /* read with uv_fs_read (a file, /dev/null...) */
  union { uv_pipe_t pipe; uv_tty_t tty; } in;
  int in_open;
  uv_fs_t fsreq;
  char fsbuf[1 << 16];
  char *line;
  size_t len, cap;
  int skipping;             /* the line is over LINE_IN_MAX: drop it up to its '\n' */
  char *stash;              /* input read but not handled while paused */
  size_t stash_len;
  int paused, reading, eof, done;
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
};

static void log_msg(server *s, int level, const char *fmt, ...)
  __attribute__((format(printf, 3, 4)));
static void stop_if_drained(server *s);

/* ---- mailboxes ----------------------------------------------------------------------- */

static int mailbox_init (mailbox *mb, uv_loop_t *loop, uv_async_cb cb, void *data) {
  if (pthread_mutex_init(&mb->mu, NULL) != 0) return -1;
  if (uv_async_init(loop, &mb->async, cb) != 0) { pthread_mutex_destroy(&mb->mu); return -1; }
  mb->async.data = data;
  mb->head = mb->tail = NULL;
  mb->inited = 1;
  return 0;
}

/* Appends m and wakes the receiver's loop. Callable from any thread while the
** receiver's async handle is open. */
static void post (mailbox *mb, mail *m) {
  m->next = NULL;
  pthread_mutex_lock(&mb->mu);
  if (mb->tail) mb->tail->next = m;
  else mb->head = m;
  mb->tail = m;
  pthread_mutex_unlock(&mb->mu);
  uv_async_send(&mb->async);
}

/* Takes every message posted so far, in order. */
static mail *take_all (mailbox *mb) {
  pthread_mutex_lock(&mb->mu);
  mail *m = mb->head;
  mb->head = mb->tail = NULL;
  pthread_mutex_unlock(&mb->mu);
  return m;
}

static int mailbox_empty (mailbox *mb) {
  pthread_mutex_lock(&mb->mu);
  int empty = mb->head == NULL;
  pthread_mutex_unlock(&mb->mu);
  return empty;
}

static mail *msg_new (int kind) {
  mail *m = calloc(1, sizeof *m);
  if (m) m->kind = kind;
  return m;
}

/* Frees a message that is not a request's own (M_RUN, M_DONE). */
static void msg_free (mail *m) {
  if (m == NULL || m->kind == M_RUN || m->kind == M_DONE) return;
  free(m->text);
  free(m);
}

/* ---- output (protocol thread) ---------------------------------------------------------- */

static void write_all (server *s, const char *p, size_t n) {
  while (n > 0 && !s->out_broken) {
    ssize_t w = write(s->out, p, n);
    if (w > 0) { p += w; n -= (size_t)w; continue; }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      struct pollfd pfd = { s->out, POLLOUT, 0 };
      poll(&pfd, 1, 1000);
      continue;
    }
    s->out_broken = 1;  /* the client is gone; standard input will close too */
    fprintf(stderr, "tidepool mcp: cannot write to standard output: %s\n", strerror(errno));
  }
}

/* Every line the server writes goes through here. Lines are built under LINE_OUT_MAX
** upstream; one that is not is a bug, never sent (the client would drop the stream). */
static void write_line (server *s, const char *text, size_t len) {
  if (len >= LINE_OUT_MAX) {
    fprintf(stderr, "tidepool mcp: internal error: a %zu-byte message was not sent (over "
            "the %u MiB line limit)\n", len, LINE_OUT_MAX >> 20);
    return;
  }
  if (s->http) {  /* over HTTP, to the request a message belongs to (none: dropped) */
    if (s->origin) tp__mcp_http_emit(s->origin, text, len, !s->noting);
    return;
  }
  if (s->sink) { s->sink(s->sink_ud, text, len); return; }
  char *buf = malloc(len + 1);
  if (buf == NULL) { write_all(s, text, len); write_all(s, "\n", 1); return; }
  memcpy(buf, text, len);
  buf[len] = '\n';
  write_all(s, buf, len + 1);
  free(buf);
}

static json_t *error_msg (json_t *id, int code, const char *text) {
  json_t *m = json_string(text);
  if (m == NULL) m = json_string("error (message not valid UTF-8)");
  return json_pack("{s:s, s:o, s:{s:i, s:o}}", "jsonrpc", "2.0",
                   "id", id ? json_deep_copy(id) : json_null(), "error", "code", code,
                   "message", m);
}

/* Adds a response to batch b (stolen), within the batch's share of the line. */
static void batch_add (batch *b, json_t *msg) {
  size_t n;
  char *text = tp_json_text(msg, &n);
  free(text);
  if (text != NULL && b->bytes + n + 1 < LINE_OUT_MAX - 4096) {
    b->bytes += n + 1;
    json_array_append_new(b->responses, msg);
    return;
  }
  json_t *id = json_object_get(msg, "id");
  json_t *err = error_msg(id, -32603, "the responses of this batch would pass the 10 MiB a "
                          "message may have: send this request on its own line");
  json_decref(msg);
  char *t = tp_json_text(err, &n);
  free(t);
  b->bytes += n + 1;
  json_array_append_new(b->responses, err);
}

/* Sends msg (stolen): into the batch b, or as a line of its own. */
static void send_msg (server *s, batch *b, json_t *msg) {
  if (msg == NULL) return;
  if (b != NULL) { batch_add(b, msg); return; }
  size_t len;
  char *text = tp_json_text(msg, &len);
  if (text != NULL && len >= LINE_OUT_MAX) {  /* a tools/list of huge exposed schemas */
    free(text);
    char why[200];
    snprintf(why, sizeof why, "the response would be %zu bytes, over the %u MiB a message "
             "may have", len, LINE_OUT_MAX >> 20);
    json_t *id = json_object_get(msg, "id");
    json_t *err = error_msg(json_is_null(id) ? NULL : id, -32603, why);
    json_decref(msg);
    msg = err;
    text = tp_json_text(msg, &len);
  }
  json_decref(msg);
  if (text == NULL) {
    fprintf(stderr, "tidepool mcp: out of memory writing a message\n");
    return;
  }
  write_line(s, text, len);
  free(text);
}

static json_t *id_or_null (json_t *id) { return id ? json_deep_copy(id) : json_null(); }

static void send_result (server *s, batch *b, json_t *id, json_t *result) {
  send_msg(s, b, json_pack("{s:s, s:o, s:o}", "jsonrpc", "2.0", "id", id_or_null(id),
                           "result", result ? result : json_object()));
}

static void send_error (server *s, batch *b, json_t *id, int code, const char *fmt, ...)
  __attribute__((format(printf, 5, 6)));
static void send_error (server *s, batch *b, json_t *id, int code, const char *fmt, ...) {
  char text[600];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  send_msg(s, b, error_msg(id, code, text));
}

static json_t *notification (const char *method, json_t *params) {
  return json_pack("{s:s, s:s, s:o}", "jsonrpc", "2.0", "method", method,
                   "params", params ? params : json_object());
}

static void notify (server *s, const char *method, json_t *params) {
  s->noting++;
  send_msg(s, NULL, notification(method, params));
  s->noting--;
}

/* Warnings logged before the client initialized (the plugins refused at startup) are kept,
** up to EARLY_MAX, and sent once it has: a client learns of every refused plugin. */
#define EARLY_MAX 100
static void log_text (server *s, int level, const char *text) {
  if (!s->quiet && (level >= L_INFO || level >= s->level))
    fprintf(stderr, "tidepool mcp: %s: %s\n", levels[level], text);
  if (!s->initialized && level >= L_WARNING) {
    if (s->early == NULL) s->early = json_array();
    if (json_array_size(s->early) < EARLY_MAX)
      json_array_append_new(s->early, json_pack("{s:i, s:s}", "level", level, "text", text));
  }
  if (!s->initialized || level < s->level) return;
  json_t *data = json_string(text);
  if (data == NULL) return;
  notify(s, "notifications/message",
         json_pack("{s:s, s:s, s:o}", "level", levels[level], "logger", "tidepool", "data", data));
}

static void log_msg (server *s, int level, const char *fmt, ...) {
  char text[1000];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  log_text(s, level, text);
}

/* ---- messages from a worker ------------------------------------------------------------ */

/* Posts msg (stolen), a notification of request q, as a line for the protocol thread. */
static void wsend (req *q, json_t *j) {
  worker *w = q->w;
  if (j == NULL) return;
  size_t len;
  char *text = tp_json_text(j, &len);
  json_decref(j);
  mail *m = text ? msg_new(M_LINE) : NULL;
  if (m == NULL) {
    free(text);
    fprintf(stderr, "tidepool mcp: out of memory (a notification)\n");
    return;
  }
  m->w = w;
  m->q = q;
  m->text = text;
  m->len = len;
  post(&w->s->mb, m);
}

static void wlog (worker *w, int level, const char *fmt, ...)
  __attribute__((format(printf, 3, 4)));
static void wlog (worker *w, int level, const char *fmt, ...) {
  char text[1000];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  mail *m = msg_new(M_LOG);
  if (m == NULL || (m->text = strdup(text)) == NULL) { free(m); return; }
  m->w = w;
  m->level = level;
  post(&w->s->mb, m);
}

/* ---- schemas and descriptions ---------------------------------------------------------- */

/* Removes every "$schema" keyword from a schema, in place (the reference client compiles
** published schemas as draft-07 and refuses other dialects). Property maps are walked
** for their schemas, but their keys are names, not keywords. */
static void strip_dialect (json_t *schema, int is_map) {
  const char *key;
  json_t *v;
  size_t i;
  if (json_is_object(schema)) {
    if (!is_map) json_object_del(schema, "$schema");
    json_object_foreach(schema, key, v) {
      int map = !is_map && (strcmp(key, "properties") == 0 || strcmp(key, "$defs") == 0 ||
                            strcmp(key, "definitions") == 0 ||
                            strcmp(key, "patternProperties") == 0 ||
                            strcmp(key, "dependentSchemas") == 0);
      if (!is_map && (strcmp(key, "const") == 0 || strcmp(key, "enum") == 0 ||
                      strcmp(key, "default") == 0 || strcmp(key, "examples") == 0))
        continue;  /* data, not schemas */
      strip_dialect(v, map);
    }
  }
  else if (json_is_array(schema)) {
    json_array_foreach(schema, i, v) strip_dialect(v, 0);
  }
}

static json_t *envelope_schema (void) {
  json_error_t jerr;
  json_t *s = json_loads(
    "{\"type\":\"object\",\"properties\":{"
    "\"ok\":{\"type\":\"boolean\",\"description\":\"true when the script returned normally\"},"
    "\"result\":{\"description\":\"the script's return value (nil is null; several values "
    "are an array)\"},"
    "\"error\":{\"type\":\"object\",\"properties\":{"
      "\"code\":{\"type\":\"string\",\"description\":\"syntax, runtime, limit.*, tool.*, "
      "cancelled, session.*, run.* and approval.* (resume_run)\"},"
      "\"message\":{\"type\":\"string\"},\"line\":{\"type\":\"integer\"},"
      "\"source\":{\"type\":\"string\"},\"hint\":{\"type\":\"string\"}},"
      "\"required\":[\"code\",\"message\"]},"
    "\"logs\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"description\":"
      "\"what the script printed\"},"
    "\"calls\":{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"},"
      "\"description\":\"how many times the script called each tool\"},"
    "\"failed_calls\":{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":{"
      "\"tool\":{\"type\":\"string\"},\"line\":{\"type\":\"integer\"},\"code\":{\"type\":"
      "\"string\"},\"message\":{\"type\":\"string\"},\"times\":{\"type\":\"integer\","
      "\"description\":\"how many calls failed the same way (when more than one)\"},"
      "\"same_as_error\":{\"type\":\"boolean\",\"description\":\"failed as the call in "
      "error did\"}},"
      "\"required\":[\"tool\"]},"
      "\"description\":\"each tool call that failed or was refused (caught or not), in "
      "order, but the one in error\"},"
    "\"failed_unlisted\":{\"type\":\"integer\",\"description\":\"more failed calls past "
      "the first 100 calls, counted only\"},"
    "\"session\":{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"string\"},"
      "\"state\":{\"type\":\"string\",\"enum\":[\"new\",\"continued\",\"dropped\"]},"
      "\"message\":{\"type\":\"string\"}},\"description\":\"with a session id: whether "
      "the globals of earlier calls were there, and why not\"},"
    "\"status\":{\"type\":\"string\",\"enum\":[\"paused\"],\"description\":\"paused: a "
      "policy rule asks a person to approve the calls in pending; nothing of them ran. Ask "
      "the user, then call resume_run with run and one decision a pending call\"},"
    "\"run\":{\"type\":\"string\",\"description\":\"the paused run, for resume_run\"},"
    "\"pending\":{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":{"
      "\"seq\":{\"type\":\"integer\"},\"tool\":{\"type\":\"string\"},\"args\":{},"
      "\"reason\":{\"type\":\"string\"},\"binding\":{\"type\":\"string\"}}},"
      "\"description\":\"the calls the paused run waits on\"},"
    "\"truncated\":{\"type\":\"object\",\"description\":\"present when the result or logs "
      "were cut to fit a message\"}},"
    "\"required\":[\"ok\"]}", 0, &jerr);
  return s;
}


/* run_lua's description (worker side), made when the tools load: --describe full gives
** every tool's fields and rules; auto (the default) the first of full, compact, grouped
** and counts that fits in 2,048 characters (Claude Code cuts a description there, and a
** model that reads a cut API invents the rest); compact the same from compact on. NULL
** when describe fails: the load reports it, and no other text stands in for it. */
static const char *run_lua_description (worker *w) {
  if (w->desc) return w->desc;
  int mode = w->s->o.describe;
  char *d = tp_engine_describe(w->e, mode == 1 ? "json" : mode == 2 ? "json+fit" : "json+auto");
  json_t *j = d ? json_loads(d, 0, NULL) : NULL;
  json_t *text = json_is_object(j) ? json_object_get(j, "description") : NULL;
  if (json_is_string(text)) w->desc = strdup(json_string_value(text));
  json_decref(j);
  tp_free(d);
  return w->desc;
}

/* The MCP name of exposed tool `name` into out[EXPOSED_NAME_MAX + 1]: every character
** outside [a-zA-Z0-9_-] becomes '_' (fs.read -> fs_read), cut to 64 bytes, the names
** every client accepts (Claude Desktop refuses the whole list over one name that does
** not match ^[a-zA-Z0-9_-]{1,64}$). A name taken already (by run_lua or an earlier
** tool, in `taken`) gets the first free suffix _2, _3, ... */
#define EXPOSED_NAME_MAX 64
static void exposed_name (const char *name, const json_t *taken, char *out) {
  size_t n = 0;
  for (const char *p = name; *p && n < EXPOSED_NAME_MAX; p++) {
    char c = *p;
    int okc = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-';
    out[n++] = okc ? c : '_';
  }
  if (n == 0) out[n++] = '_';
  out[n] = '\0';
  for (unsigned k = 2; json_object_get(taken, out) != NULL && k < 100000; k++) {
    char suffix[16];
    int sl = snprintf(suffix, sizeof suffix, "_%u", k);
    size_t keep = n + (size_t)sl > EXPOSED_NAME_MAX ? EXPOSED_NAME_MAX - (size_t)sl : n;
    memcpy(out + keep, suffix, (size_t)sl + 1);
  }
}

/* What the protocol thread needs of the loaded tools (worker side), as JSON text:
** {"list": <the tools/list result>, "names": {MCP name: tool name, for every exposed
** tool}}. A renamed tool whose name was taken is logged (worker 0 only: every worker
** loads the same tools). */
static char *tools_report (worker *w) {
  const options *o = &w->s->o;
  json_t *tools = json_array(), *names = json_object();
  json_t *input = json_pack(
    "{s:s, s:{s:{s:s, s:s}, s:{s:s, s:s}}, s:[s], s:b}", "type", "object", "properties",
    "code", "type", "string", "description", "The Lua script. Its return value is the result.",
    "session", "type", "string", "description", "Optional. Calls with the same id share "
    "global variables (a session), so a script can build on an earlier one. 1 to 128 "
    "bytes, no control characters.",
    "required", "code", "additionalProperties", 0);
  const char *dtext = run_lua_description(w);
  char failed[1024];
  if (dtext == NULL) {  /* said as it is, never an older or hand-made text */
    snprintf(failed, sizeof failed, "run_lua's description could not be made (%s). In a "
             "script, tools.list(), tools.describe(name) and tools.search(words) read the "
             "tools.", *tp_engine_error(w->e) ? tp_engine_error(w->e) : "out of memory");
    dtext = failed;
  }
  json_t *desc = json_string(dtext);
  json_array_append_new(tools, json_pack("{s:s, s:s, s:o, s:o, s:o}", "name", o->name,
    "title", "Run a Lua script", "description", desc ? desc : json_string(""),
    "inputSchema", input, "outputSchema", envelope_schema()));
  json_object_set_new(names, o->name, json_null());  /* taken, and not an exposed tool */
  if (o->asks) {  /* approvals: resume_run decides a paused run's calls */
    json_array_append_new(tools, tp__mcp_approve_resume_tool("resume_run"));
    json_object_set_new(names, "resume_run", json_null());
  }
  for (size_t i = 0, n = tp_engine_tool_count(w->e); o->expose && i < n; i++) {
    tp_tool_info ti, *t = &ti;
    tp_engine_tool_info(w->e, i, &ti);
    char mcp_name[EXPOSED_NAME_MAX + 1], plain[EXPOSED_NAME_MAX + 1];
    exposed_name(t->name, names, mcp_name);
    exposed_name(t->name, NULL, plain);
    if (strcmp(mcp_name, plain) != 0 && w->index == 0)
      wlog(w, L_WARNING, "--expose-tools: tool %s is listed as %s: %s was taken", t->name,
           mcp_name, plain);
    json_object_set_new(names, mcp_name, json_string(t->name));
    /* not listed when the config's tool_settings keep it for scripts: its name stays
    ** known, so a call of it is refused saying so (tool.denied), not "Unknown tool" */
    if (!(tp_engine_tool_callers(w->e, i) & TP_CALLER_DIRECT)) continue;
    char *schema = NULL;
    tp_engine_tool_schema(w->e, i, 0, &schema);
    json_t *in = schema ? json_loads(schema, JSON_ALLOW_NUL, NULL) : NULL;
    tp_free(schema);
    if (!json_is_object(in)) { json_decref(in); in = json_object(); }
    strip_dialect(in, 0);
    if (json_object_get(in, "type") == NULL) json_object_set_new(in, "type", json_string("object"));
    json_t *entry = json_pack("{s:s, s:s, s:s, s:o}", "name", mcp_name, "title", t->name,
                              "description", t->description, "inputSchema", in);
    /* an output schema is published when it describes an object: MCP's structuredContent
    ** is an object, and the result of any other shape goes back as text only */
    schema = NULL;
    tp_engine_tool_schema(w->e, i, 1, &schema);
    json_t *out = schema ? json_loads(schema, JSON_ALLOW_NUL, NULL) : NULL;
    tp_free(schema);
    const char *type = json_string_value(json_object_get(out, "type"));
    if (entry && json_is_object(out) && type && strcmp(type, "object") == 0) {
      strip_dialect(out, 0);
      json_object_set(entry, "outputSchema", out);
    }
    json_decref(out);
    json_array_append_new(tools, entry);
  }
  json_object_del(names, o->name);
  json_object_del(names, "resume_run");
  json_t *r = json_pack("{s:{s:o}, s:o}", "list", "tools", tools, "names", names);
  char *text = r ? tp_json_text(r, NULL) : NULL;
  json_decref(r);
  return text;
}

/* ---- sessions (protocol thread) ---------------------------------------------------------- */

static void post_worker (worker *w, int kind, uint64_t n);

static int id_is (const char *a, size_t alen, const char *b, size_t blen) {
  return a != NULL && alen == blen && memcmp(a, b, alen) == 0;
}

static char *memdup0 (const char *p, size_t n) {
  char *d = malloc(n + 1);
  if (d) { memcpy(d, p, n); d[n] = '\0'; }
  return d;
}

/* A session is one principal's: the same id under two principals is two sessions, and
** nothing of one (its globals, that it exists, why it was dropped, its paused run) reaches
** another. Without auth every caller is the one local principal, "". */
static int sess_is (const session *ss, const char *who, const char *id, size_t len) {
  return id_is(ss->id, ss->idlen, id, len) && strcmp(ss->principal, who) == 0;
}

static int same_principal (const char *a, const char *b) {
  return strcmp(a ? a : "", b ? b : "") == 0;
}

static void remember_drop (server *s, const session *ss, const char *why) {
  size_t k = s->dropped_next++ % DROPPED_MAX;
  free(s->dropped_id[k]);
  free(s->dropped_why[k]);
  free(s->dropped_who[k]);
  s->dropped_id[k] = memdup0(ss->id, ss->idlen);
  s->dropped_len[k] = ss->idlen;
  s->dropped_why[k] = strdup(why);
  s->dropped_who[k] = strdup(ss->principal);
}

static const char *dropped_why (server *s, const char *who, const char *id, size_t len) {
  const char *why = NULL;
  for (size_t k = 0; k < DROPPED_MAX; k++)  /* the latest wins: scan all */
    if (id_is(s->dropped_id[k], s->dropped_len[k], id, len) && s->dropped_who[k] &&
        strcmp(s->dropped_who[k], who) == 0) why = s->dropped_why[k];
  return why;
}

static void forget_drop (server *s, const char *who, const char *id, size_t len) {
  for (size_t k = 0; k < DROPPED_MAX; k++)
    if (id_is(s->dropped_id[k], s->dropped_len[k], id, len) && s->dropped_who[k] &&
        strcmp(s->dropped_who[k], who) == 0) {
      free(s->dropped_id[k]);
      free(s->dropped_why[k]);
      free(s->dropped_who[k]);
      s->dropped_id[k] = s->dropped_why[k] = s->dropped_who[k] = NULL;
    }
}

/* Forgets a session that is not busy; its worker destroys the sandbox. */
static void session_drop (server *s, session *ss, const char *why) {
  if (why) {
    remember_drop(s, ss, why);
    /* over HTTP a log line goes to the request being handled, maybe another principal's:
    ** the operator's standard error only */
    void *origin = s->origin;
    if (s->http) s->origin = NULL;
    log_msg(s, L_INFO, "session %s dropped: %s", ss->id, why);
    s->origin = origin;
  }
  if (ss->prev) ss->prev->next = ss->next;
  else s->sessions = ss->next;
  if (ss->next) ss->next->prev = ss->prev;
  s->nsessions--;
  ss->w->nsess--;
  if (!s->done) post_worker(ss->w, M_DROP, ss->num);
  free(ss->id);
  free(ss->principal);
  free(ss);
}

static session *session_find (server *s, const char *who, const char *id, size_t len) {
  for (session *ss = s->sessions; ss; ss = ss->next)
    if (sess_is(ss, who, id, len)) return ss;
  return NULL;
}

static void sweep_cb (uv_timer_t *t) {
  server *s = t->data;
  uint64_t now = now_ns(), idle = s->o.session_idle_us * 1000u;
  char why[160];
  for (session *ss = s->sessions, *next; ss; ss = next) {
    next = ss->next;
    if (!ss->busy && idle && now - ss->last_used_ns > idle) {
      snprintf(why, sizeof why, "it was idle longer than the idle limit of %.3g s",
               (double)s->o.session_idle_us / 1e6);
      session_drop(s, ss, why);
    }
  }
}

/* The worker with the least work, counting sessions when with_sessions; ties go round. */
static worker *least_loaded (server *s, int with_sessions) {
  worker *best = NULL;
  size_t best_load = 0;
  for (unsigned k = 0; k < s->nworkers; k++) {
    worker *w = &s->workers[(s->rr + k) % s->nworkers];
    size_t load = w->load + (with_sessions ? w->nsess : 0);
    if (best == NULL || load < best_load) { best = w; best_load = load; }
  }
  s->rr++;
  return best;
}

/* Why a session id cannot be used, or NULL. */
static const char *bad_session_id (const json_t *sid, char *buf, size_t len) {
  if (!json_is_string(sid))
    return "arguments.session must be a string (1 to 128 bytes), or left out";
  const unsigned char *p = (const unsigned char *)json_string_value(sid);
  size_t n = json_string_length(sid);
  if (n == 0) return "arguments.session must not be empty: pass a name such as \"main\", "
                     "or leave it out";
  if (n > SESSION_ID_MAX) {
    snprintf(buf, len, "arguments.session is %zu bytes long; a session id has at most %d "
             "bytes: use a short name such as \"main\"", n, SESSION_ID_MAX);
    return buf;
  }
  for (size_t i = 0; i < n; i++)
    if (p[i] < 0x20 || p[i] == 0x7f) {
      snprintf(buf, len, "arguments.session holds a control character (byte 0x%02x at "
               "offset %zu); a session id may not contain NUL or control characters: use "
               "letters, digits and punctuation", p[i], i);
      return buf;
    }
  return NULL;
}

/* The session for a call, made if needed. NULL with *err (code) and msg set when the call
** cannot have it. info gets the "session" field of the result. */
static session *session_for (server *s, const char *who, const char *id, size_t idlen,
                             json_t **info, const char **err, char *msg, size_t msglen) {
  session *ss = session_find(s, who, id, idlen);
  if (ss != NULL) {
    if (ss->busy) {
      *err = "session.busy";
      const req *p = s->parked;
      while (p && p->sess != ss) p = p->next;
      if (p)  /* approvals: its run waits for resume_run */
        snprintf(msg, msglen, "session \"%s\" has a paused run (%s) that waits for a person's "
                 "decisions: decide it with resume_run first, or use another session id", id,
                 p->run_id);
      else
        snprintf(msg, msglen, "session \"%s\" is running another script; a session runs one "
                 "script at a time: wait for that call's result, or use another session id", id);
      return NULL;
    }
    *info = json_pack("{s:s%, s:s}", "id", id, idlen, "state", "continued");
    return ss;
  }
  if (s->nsessions >= s->o.max_sessions) {
    session *lru = NULL;
    for (session *p = s->sessions; p; p = p->next)
      if (!p->busy && (lru == NULL || p->last_used_ns < lru->last_used_ns)) lru = p;
    if (lru == NULL) {
      *err = "session.full";
      snprintf(msg, msglen, "all %u sessions are running scripts; try again when one has "
               "finished, or call without a session", s->o.max_sessions);
      return NULL;
    }
    snprintf(msg, msglen, "it was the least recently used of the %u sessions the server "
             "keeps, and a new session needed its place", s->o.max_sessions);
    session_drop(s, lru, msg);
  }
  ss = calloc(1, sizeof *ss);
  if (ss == NULL || (ss->id = memdup0(id, idlen)) == NULL ||
      (ss->principal = strdup(who)) == NULL) {
    if (ss) free(ss->id);
    free(ss);
    *err = "limit.memory";
    snprintf(msg, msglen, "the server is out of memory: no new session can be made");
    return NULL;
  }
  ss->idlen = idlen;
  ss->num = ++s->session_nums;
  ss->w = least_loaded(s, 1);
  ss->w->nsess++;
  ss->next = s->sessions;
  if (s->sessions) s->sessions->prev = ss;
  s->sessions = ss;
  s->nsessions++;
  const char *why = dropped_why(s, who, id, idlen);
  if (why) {
    char m[500];
    snprintf(m, sizeof m, "session \"%s\" was dropped earlier because %s: this call started "
             "it afresh, and the globals of earlier calls are gone", id, why);
    *info = json_pack("{s:s%, s:s, s:s}", "id", id, idlen, "state", "new", "message", m);
    forget_drop(s, who, id, idlen);
  }
  else *info = json_pack("{s:s%, s:s}", "id", id, idlen, "state", "new");
  return ss;
}

static int has_lua_files (const char *dir) {
  DIR *d = opendir(dir);
  if (d == NULL) return 0;
  struct dirent *de;
  int found = 0;
  while (!found && (de = readdir(d)) != NULL) {
    size_t n = strlen(de->d_name);
    found = n > 4 && strcmp(de->d_name + n - 4, ".lua") == 0;
  }
  closedir(d);
  return found;
}
/* ---- test tools (--test-tools, for the test suites and the benchmark) --------------------
** test.echo returns its arguments; test.sleep{ms=} completes after ms milliseconds on the
** worker's loop, or at once with an error once its run is cancelled. */

struct sleeper {
  uv_timer_t t;
  tp_call *c;
  worker *w;
  struct sleeper *next;
  int ms;
};

static void echo_fn (tp_call *c, void *ud) {
  (void)ud;
  tp_call_complete(c, tp_call_args(c), 0);
}

static void sleeper_closed (uv_handle_t *h) { free(h->data); }

static void sleeper_unlink (sleeper *z) {
  for (sleeper **p = &z->w->sleepers; *p; p = &(*p)->next)
    if (*p == z) { *p = z->next; break; }
}

static void sleep_tick (uv_timer_t *t) {
  sleeper *z = t->data;
  if (tp_call_cancelled(z->c)) {
    tp_call_fail(z->c, "tool.failed", "cancelled");
  }
  else {
    z->ms -= 10;
    if (z->ms > 0) return;
    tp_call_complete(z->c, "{\"slept\":true}", 0);
  }
  uv_timer_stop(t);
  sleeper_unlink(z);
  uv_close((uv_handle_t *)t, sleeper_closed);
}

static void sleep_fn (tp_call *c, void *ud) {
  worker *w = ud;
  json_t *args = json_loads(tp_call_args(c), 0, NULL);
  json_int_t ms = json_integer_value(json_object_get(args, "ms"));
  json_decref(args);
  sleeper *z = calloc(1, sizeof *z);
  if (z == NULL) { tp_call_fail(c, "tool.failed", "out of memory"); return; }
  z->c = c;
  z->w = w;
  z->ms = (int)ms;
  z->t.data = z;
  uv_timer_init(w->loop, &z->t);
  uv_timer_start(&z->t, sleep_tick, 10, 10);  /* polls for cancellation every 10 ms */
  z->next = w->sleepers;
  w->sleepers = z;
}

static void sleepers_stop (worker *w) {
  while (w->sleepers) {
    sleeper *z = w->sleepers;
    w->sleepers = z->next;
    uv_timer_stop(&z->t);
    tp_call_fail(z->c, "tool.failed", "the server is stopping");
    uv_close((uv_handle_t *)&z->t, sleeper_closed);
  }
}

static int add_test_tools (worker *w) {
  tp_tool_def echo = { "test.echo", "Returns its arguments.", NULL, NULL, echo_fn, NULL, 0 };
  tp_tool_def slp = { "test.sleep", "Waits ms milliseconds, then returns {slept = true}.",
    "{\"type\":\"object\",\"properties\":{\"ms\":{\"type\":\"integer\",\"minimum\":0,"
    "\"maximum\":60000}},\"required\":[\"ms\"]}",
    "{\"type\":\"object\",\"properties\":{\"slept\":{\"type\":\"boolean\"}}}", sleep_fn, w, 0 };
  if (tp_engine_add_tool(w->e, &echo) != TP_OK || tp_engine_add_tool(w->e, &slp) != TP_OK)
    return -1;
  return 0;
}

/* ---- the worker side ------------------------------------------------------------------- */

static void wreq_remove (worker *w, req *q) {
  if (q->wprev) q->wprev->wnext = q->wnext;
  else w->running = q->wnext;
  if (q->wnext) q->wnext->wprev = q->wprev;
  q->wprev = q->wnext = NULL;
}

static wsess **wsess_find (worker *w, uint64_t num) {
  wsess **p = &w->sessions;
  while (*p && (*p)->num != num) p = &(*p)->next;
  return p;
}

static void wsess_drop (worker *w, uint64_t num) {
  wsess **p = wsess_find(w, num);
  wsess *ws = *p;
  if (ws == NULL) return;
  *p = ws->next;
  tp_session_destroy(ws->ts);
  free(ws);
}

static void progress_hook (tp_run *r, const char *tool, int done, void *ud) {
  (void)r;
  req *q = ud;
  if (!done && tool && (q->w->s->o.asks || q->callers)) {  /* a paused result's "calls" */
    if (q->seen == NULL) q->seen = json_object();
    json_int_t had = json_integer_value(json_object_get(q->seen, tool));
    json_object_set_new(q->seen, tool, json_integer(had + 1));
  }
  if (q->wcancelled || q->token == NULL) return;
  char text[200];
  snprintf(text, sizeof text, "tools.%.150s %s", tool ? tool : "?", done ? "returned" : "called");
  wsend(q, notification("notifications/progress",
        json_pack("{s:O, s:I, s:s}", "progressToken", q->token, "progress",
                  (json_int_t)++q->progress, "message", text)));
}

/* A tool's own progress report (ctx.progress; proc.run's output lines), as a progress
** notification "tools.<tool>: <text>" (text cut at 500 bytes). */
static void progress_text_hook (tp_run *r, const char *tool, const char *text, void *ud) {
  (void)r;
  req *q = ud;
  if (q->wcancelled || q->token == NULL) return;
  char msg[680];
  snprintf(msg, sizeof msg, "tools.%.150s: %.500s", tool ? tool : "?", text);
  json_t *m = json_string(msg);
  if (m == NULL) m = json_string("tools: (a progress report that is not UTF-8)");
  wsend(q, notification("notifications/progress",
        json_pack("{s:O, s:I, s:o}", "progressToken", q->token, "progress",
                  (json_int_t)++q->progress, "message", m)));
}

/* ---- approvals (worker side) --------------------------------------------------------
** A call that a policy rule holds ("effect": "ask") comes to on_approval on the worker of
** its run. The run's request (q) then asks in one of two ways:
** - elicit: an elicitation/create request goes to the client (ids TP__MCP_APPROVE_ELICIT_PREFIX
**   "<worker>-<n>", so the protocol thread routes the answer back here as M_ANSWER), and
**   the call is decided in the same tools/call; the run's wall-clock limit keeps counting,
**   so a client that never answers is bounded by it;
** - otherwise the run is parked: the request is answered with a paused result (or, for a
**   2026-07-28 request, an input_required result with a sealed requestState) as M_PARK,
**   the run stays here with its clock held (tp_run_hold_wall), and a later resume_run (or
**   retry with the requestState) comes as M_RESUME with the decisions; the request then
**   takes the resuming request's id. At --pause-ttl the run ends and its calls are denied.
** Every held call is decided once: by an answer, a decision, or apx_end when the run ends. */

typedef struct pend {
  struct pend *next;
  tp_call *c;
  uint64_t seq;
  char *tool, *args, *reason;
  char binding[TP__MCP_APPROVE_BINDING_LEN];
  char eid[64];             /* its elicitation (or tidepool/callTool) request's id, or "" */
  int call;                 /* a caller tool's call, held for the client's answer (its
                            ** result), not for a person's approval */
} pend;

typedef struct apx {
  req *q;                   /* NULL once its run ended (the timer is closing) */
  uv_timer_t t;             /* parks the run, then ends it at --pause-ttl */
  pend *pending;            /* held calls, by seq */
  char run_id[TP__MCP_APPROVE_RUN_ID_MAX];
} apx;

static void pend_free (pend *p) {
  free(p->tool);
  free(p->args);
  free(p->reason);
  free(p);
}

static void pend_unlink (apx *a, pend *p) {
  for (pend **pp = &a->pending; *pp; pp = &(*pp)->next)
    if (*pp == p) { *pp = p->next; return; }
}

static void apx_closed (uv_handle_t *h) { free(h->data); }

static apx *apx_get (worker *w, req *q) {
  if (q->ax) return q->ax;
  apx *a = calloc(1, sizeof *a);
  if (a == NULL || uv_timer_init(w->loop, &a->t) != 0) { free(a); return NULL; }
  a->t.data = a;
  a->q = q;
  if (q->restore) memcpy(a->run_id, q->run_id, sizeof a->run_id);  /* from the store */
  else tp__mcp_approve_run_id(w->index, a->run_id);
  q->ax = a;
  return a;
}

/* Decides every call still held (denied with why, and the elicitations withdrawn unless
** quiet) and lets go of the approvals of q, whose run ends. */
static void apx_end (worker *w, req *q, int quiet, const char *why) {
  apx *a = q->ax;
  if (a == NULL) return;
  q->ax = NULL;
  while (a->pending) {
    pend *p = a->pending;
    a->pending = p->next;
    if (p->eid[0] && !quiet)
      wsend(q, notification("notifications/cancelled", json_pack("{s:s, s:s}", "requestId",
            p->eid, "reason", p->call ? "the run ended before the call was answered"
                                      : "the run that asked ended before a person answered")));
    if (p->call) tp_call_fail(p->c, NULL, why);
    else tp_call_deny(p->c, why);
    pend_free(p);
  }
  a->q = NULL;
  uv_timer_stop(&a->t);
  uv_close((uv_handle_t *)&a->t, apx_closed);
}

/* durable runs (--state): below, after wdone */
typedef struct dsave dsave;
static void dur_note(json_t *view, const req *q);
static void dur_save(worker *w, req *q);
static void dur_decide(worker *w, req *q);
static void dur_forget(worker *w, req *q);
static void worker_begin(worker *w, req *q, tp_run *run);

/* The response of a parked run: its pending calls as a paused result, or for a 2026-07-28
** request as an input_required result whose requestState seals the run and the bindings.
** brief leaves the arguments out (when they would not fit the line). NULL when out of
** memory. */
static char *paused_line (worker *w, req *q, int brief, size_t *outlen) {
  apx *a = q->ax;
  const options *o = &w->s->o;
  json_t *pending = json_array(), *inputs = json_object(), *calls = json_array();
  int calls_held = 0;
  for (pend *p = a->pending; p; p = p->next) {
    if (p->call) {  /* a caller tool's call: the client runs it (docs/caller-tools.md) */
      const char *at = brief ? "\"(too large to show)\"" : p->args;
      json_t *args = tp_json_parse(at, strlen(at), NULL, 0);
      json_array_append_new(pending, json_pack("{s:s, s:I, s:s, s:o, s:s}", "kind", "call",
                            "id", (json_int_t)p->seq, "tool", p->tool, "args",
                            args ? args : json_string(at), "binding", p->binding));
      calls_held++;
      continue;
    }
    json_t *e = tp__mcp_approve_pending_entry(p->seq, p->tool, brief ? "\"(too large to show)\"" :
                                      p->args, p->reason, p->binding);
    json_array_append_new(pending, e);
    char key[40];
    snprintf(key, sizeof key, "approve-%llu", (unsigned long long)p->seq);
    json_object_set_new(inputs, key, json_pack("{s:s, s:o}", "method", "elicitation/create",
      "params", tp__mcp_approve_elicit_params(p->tool, brief ? "(too large to show)" : p->args,
                                      p->reason, 1)));
    json_array_append_new(calls, json_pack("{s:I, s:s}", "seq", (json_int_t)p->seq,
                                           "binding", p->binding));
  }
  char *line = NULL;
  if (q->era26) {
    json_t *st = json_pack("{s:s, s:o}", "run", a->run_id, "calls", calls);
    calls = NULL;
    char *sealed = st ? tp__mcp_approve_seal(st, q->principal ? q->principal : "", o->pause_ttl_us)
                      : NULL;
    json_decref(st);
    json_t *msg = sealed ? json_pack("{s:s, s:O, s:{s:s, s:O, s:s}}", "jsonrpc", "2.0", "id",
      q->id, "result", "resultType", "input_required", "inputRequests", inputs,
      "requestState", sealed) : NULL;
    free(sealed);
    line = msg ? tp_json_text(msg, outlen) : NULL;
    json_decref(msg);
  }
  else {
    json_t *view = tp__mcp_approve_paused_view(a->run_id, json_incref(pending),
                                       q->seen ? json_deep_copy(q->seen) : json_object(),
                                       "resume_run", o->pause_ttl_us);
    if (view && q->sess_info) json_object_set(view, "session", q->sess_info);
    if (view && calls_held)
      json_object_set_new(view, "message", json_string("The run is paused: it waits on the "
        "caller tools' calls in pending (and on any approvals listed there). Run each call, "
        "then call resume_run with {run, results: [{id, binding, result} or {id, binding, "
        "error: {message, code}}]}, one entry a call, id and binding copied from pending "
        "(and decisions for approvals). The run goes on from where it stopped."));
    if (view && (q->dnote || q->dbad)) dur_note(view, q);
    size_t n;
    char *text = view ? tp_json_text(view, &n) : NULL;
    json_decref(view);
    if (text) line = tp__mcp_view_wrap(q->id, text, n, 1, NULL, q->budget, outlen);
    free(text);
  }
  json_decref(pending);
  json_decref(inputs);
  json_decref(calls);
  if (line && *outlen >= q->budget) { free(line); line = NULL; }
  if (line == NULL && !brief) return paused_line(w, q, 1, outlen);
  return line;
}

static void ttl_cb (uv_timer_t *t) {
  apx *a = t->data;
  req *q = a->q;
  if (q == NULL || !q->wparked) return;
  char ttl[32], why[300];
  tp__mcp_approve_format_ttl(q->w->s->o.pause_ttl_us, ttl, sizeof ttl);
  snprintf(why, sizeof why, "no decision came within the server's --pause-ttl (%s): the run "
           "was ended", ttl);
  apx_end(q->w, q, 0, why);
  tp_run_cancel(q->run);  /* run_done follows; q may be gone after this */
}

/* Answers q's request with line (consumed; NULL: the paused result) and keeps its run
** here, its wall clock held; a paused result starts the --pause-ttl clock again. */
static void park (worker *w, req *q, char *line, size_t len) {
  int paused = line == NULL;
  if (paused && q->durable) {  /* what the client sees must be in the store first */
    if (q->dsave) { free(line); return; }  /* a save under way answers for it */
    if (!q->dsave_done) { dur_save(w, q); return; }
    q->dsave_done = 0;
  }
  if (paused) line = paused_line(w, q, 0, &len);
  mail *m = msg_new(M_PARK);
  if (line == NULL || m == NULL) {
    free(line);
    free(m);
    wlog(w, L_ERROR, "out of memory: a run that waits for an approval was ended");
    tp_run_cancel(q->run);
    return;
  }
  if (q->run_id[0] == '\0')  /* once, before the first M_PARK: the protocol thread reads it */
    memcpy(q->run_id, q->ax->run_id, sizeof q->run_id);
  q->wparked = 1;
  tp_run_hold_wall(q->run, 1);
  if (paused) {
    uint64_t ms = (w->s->o.pause_ttl_us + 999) / 1000;
    uv_timer_start(&q->ax->t, ttl_cb, ms ? ms : 1, 0);
  }
  m->w = w;
  m->q = q;
  m->text = line;
  m->len = len;
  post(&w->s->mb, m);
}

static void park_cb (uv_timer_t *t) {
  apx *a = t->data;
  req *q = a->q;
  if (q == NULL || q->wparked || a->pending == NULL || q->run == NULL || q->wcancelled) return;
  if (q->restore) { dur_decide(q->w, q); return; }  /* replayed to its held call */
  park(q->w, q, NULL, 0);
}

static void elicit_send (worker *w, req *q, apx *a, pend *p) {
  snprintf(p->eid, sizeof p->eid, TP__MCP_APPROVE_ELICIT_PREFIX "%u-%llu", w->index,
           (unsigned long long)++w->elicits);
  json_t *params = tp__mcp_approve_elicit_params(p->tool, p->args, p->reason, q->elicit == 2);
  json_t *m = params ? json_pack("{s:s, s:s, s:s, s:o}", "jsonrpc", "2.0", "id", p->eid,
                                 "method", "elicitation/create", "params", params) : NULL;
  if (m == NULL) {
    tp_call *c = p->c;
    pend_unlink(a, p);
    pend_free(p);
    tp_call_deny(c, "the server could not ask a person (out of memory)");
    return;
  }
  wsend(q, m);
}

/* tp_engine_on_approval's callback: a call of one of this worker's runs is held. */
static void on_approval (tp_call *c, const char *reason, void *ud) {
  worker *w = ud;
  tp_run *r = tp_call_run(c);
  req *q = w->running;
  while (q && q->run != r) q = q->wnext;
  apx *a = q && !q->wcancelled ? apx_get(w, q) : NULL;
  pend *p = a ? calloc(1, sizeof *p) : NULL;
  if (p) {
    p->tool = strdup(tp_call_tool(c));
    p->args = strdup(tp_call_args(c));
    p->reason = strdup(reason);
  }
  if (p == NULL || p->tool == NULL || p->args == NULL || p->reason == NULL) {
    if (p) pend_free(p);
    tp_call_deny(c, q == NULL || q->wcancelled ? "the request that ran the script was cancelled"
                                               : "the server could not ask a person (out of memory)");
    return;
  }
  p->c = c;
  p->seq = tp_call_id(c);
  tp__mcp_approve_binding(a->run_id, p->seq, p->tool, p->args, q->principal, p->binding);
  pend **tail = &a->pending;
  while (*tail) tail = &(*tail)->next;
  *tail = p;
  if (q->elicit) elicit_send(w, q, a, p);
  else if (!q->wparked) uv_timer_start(&a->t, park_cb, 0, 0);  /* once the step is over */
}

/* ---- caller tools (worker side; docs/caller-tools.md) ------------------------------------
** A call of a run's caller tool is held as an approval is: a pend of the run's apx, with
** its binding. Live, the question is a tidepool/callTool request to the client (ids
** TP__MCP_CALL_PREFIX "<worker>-<n>", routed back here as M_ANSWER, as an elicitation's
** answer); paused, the run parks and resume_run's results answer it. The call's timeout
** and the run's end let go of it (caller_cancel, apx_end). */
#define TP__MCP_CALL_PREFIX "tidepool-call-"

static req *req_of_call (worker *w, tp_call *c) {
  tp_run *r = tp_call_run(c);
  req *q = w->running;
  while (q && q->run != r) q = q->wnext;
  return q;
}

/* tp_run_declare_caller_tools's handler: the call passed the policy and its schema. */
static void caller_call (tp_call *c, void *ud) {
  worker *w = ud;
  req *q = req_of_call(w, c);
  apx *a = q && !q->wcancelled ? apx_get(w, q) : NULL;
  pend *p = a ? calloc(1, sizeof *p) : NULL;
  if (p) {
    p->tool = strdup(tp_call_tool(c));
    p->args = strdup(tp_call_args(c));
    p->reason = strdup("");
  }
  if (p == NULL || p->tool == NULL || p->args == NULL || p->reason == NULL) {
    if (p) pend_free(p);
    tp_call_fail(c, "tool.unavailable", q == NULL || q->wcancelled
                 ? "the request that ran the script was cancelled"
                 : "the server could not hand the call to the client (out of memory)");
    return;
  }
  p->c = c;
  p->call = 1;
  p->seq = tp_call_id(c);
  tp__mcp_approve_binding(a->run_id, p->seq, p->tool, p->args, q->principal, p->binding);
  pend **tail = &a->pending;
  while (*tail) tail = &(*tail)->next;
  *tail = p;
  if (!q->callers_live) {  /* paused: the run parks once its step is over */
    if (!q->wparked) uv_timer_start(&a->t, park_cb, 0, 0);
    return;
  }
  snprintf(p->eid, sizeof p->eid, TP__MCP_CALL_PREFIX "%u-%llu", w->index,
           (unsigned long long)++w->elicits);
  json_t *args = tp_json_parse(p->args, strlen(p->args), NULL, 0);
  json_t *m = args ? json_pack("{s:s, s:s, s:s, s:{s:s, s:O, s:I, s:s, s:o}}", "jsonrpc",
                               "2.0", "id", p->eid, "method", "tidepool/callTool", "params",
                               "run", a->run_id, "request", q->id, "id", (json_int_t)p->seq,
                               "tool", p->tool, "args", args) : NULL;
  if (m == NULL) {
    pend_unlink(a, p);
    pend_free(p);
    tp_call_fail(c, "tool.unavailable", "the server could not hand the call to the client "
                 "(out of memory)");
    return;
  }
  wsend(q, m);
}

/* A call cut short (its timeout, the run's end) while the client has it: withdrawn. */
static void caller_cancel (tp_call *c, void *ud) {
  worker *w = ud;
  req *q = req_of_call(w, c);
  for (pend *p = q && q->ax ? q->ax->pending : NULL; p; p = p->next) {
    if (p->c != c) continue;
    if (p->eid[0])
      wsend(q, notification("notifications/cancelled", json_pack("{s:s, s:s}", "requestId",
            p->eid, "reason", "the call timed out or its run ended")));
    pend_unlink(q->ax, p);
    pend_free(p);
    tp_call_fail(c, NULL, "cancelled");  /* lets go of it: the run has its outcome */
    return;
  }
}

/* M_ANSWER: the client's response to an elicitation (the whole message as text). */
static void elicit_answer (worker *w, const char *text, size_t len) {
  json_t *m = tp_json_parse(text, len, NULL, 0);
  const char *id = json_string_value(json_object_get(m, "id"));
  for (req *q = w->running; q && id; q = q->wnext) {
    for (pend *p = q->ax ? q->ax->pending : NULL; p; p = p->next) {
      if (strcmp(p->eid, id) != 0) continue;
      if (p->call) {  /* tidepool/callTool's answer: {result} or {error}, or an error */
        json_t *res = json_object_get(m, "result");
        const char *em = json_string_value(json_object_get(json_object_get(m, "error"),
                                                          "message"));
        tp_call *c = p->c;
        pend_unlink(q->ax, p);
        pend_free(p);
        if (res) tp_call_answer_tree(c, res);
        else {
          json_t *e = json_pack("{s:{s:s}}", "error", "message", em ? em : "the client "
                                "answered tidepool/callTool with an error");
          if (e == NULL || tp_call_answer_tree(c, e) == TP_EINVAL) tp_call_fail(c, NULL, "?");
          json_decref(e);
        }
        json_decref(m);
        return;
      }
      json_t *res = json_object_get(m, "result");
      const char *em = json_string_value(json_object_get(json_object_get(m, "error"), "message"));
      int ok;
      char note[2300];
      tp__mcp_approve_elicit_answer(json_is_object(res) ? res : NULL, em ? em : "an error", &ok, note,
                            sizeof note);
      tp_call *c = p->c;
      pend_unlink(q->ax, p);
      pend_free(p);
      if (ok) tp_call_approve(c);
      else tp_call_deny(c, note);
      json_decref(m);
      return;
    }
  }
  json_decref(m);  /* an answer for a run that ended: its call was denied then */
}

/* Why decisions (resume_run's arguments) cannot be applied to a's held calls: NULL, or
** the error's code with msg set. */
static const char *check_results (apx *a, json_t *args, char *msg, size_t len);
static const char *check_decisions (apx *a, json_t *args, char *msg, size_t len) {
  json_t *ds = json_object_get(args, "decisions");
  json_t *rs = json_object_get(args, "results");
  if (rs != NULL) {  /* caller tools' results, maybe with decisions */
    const char *bad = check_results(a, args, msg, len);
    if (bad || ds == NULL) return bad;
  }
  if (!json_is_array(ds) || json_array_size(ds) == 0) {
    snprintf(msg, len, "arguments.decisions must be a non-empty array of {seq, approve, "
             "binding, note}: one decision a pending call of the paused result");
    return "tool.invalid_input";
  }
  size_t i, k;
  json_t *d, *e;
  json_array_foreach(ds, i, d) {
    json_t *seq = json_object_get(d, "seq"), *ap = json_object_get(d, "approve");
    json_t *bind = json_object_get(d, "binding"), *note = json_object_get(d, "note");
    if (!json_is_object(d) || !json_is_integer(seq) || !json_is_boolean(ap) ||
        !json_is_string(bind) || (note && !json_is_string(note) && !json_is_null(note))) {
      snprintf(msg, len, "arguments.decisions[%zu] must be {seq = <integer>, approve = "
               "<boolean>, binding = <string>} with an optional note (a string), as the "
               "paused result's pending list gives seq and binding", i);
      return "tool.invalid_input";
    }
    json_array_foreach(ds, k, e) {
      if (k < i && json_equal(json_object_get(e, "seq"), seq)) {
        snprintf(msg, len, "arguments.decisions[%zu] decides seq %lld again (decisions[%zu] "
                 "did): one decision a call", i, (long long)json_integer_value(seq), k);
        return "tool.invalid_input";
      }
    }
    pend *p = a->pending;
    while (p && ((json_int_t)p->seq != json_integer_value(seq) || p->call)) p = p->next;
    if (p == NULL) {
      char list[200] = "";
      size_t n = 0;
      for (pend *x = a->pending; x && n + 24 < sizeof list; x = x->next)
        n += (size_t)snprintf(list + n, sizeof list - n, "%s%llu", n ? ", " : "",
                              (unsigned long long)x->seq);
      snprintf(msg, len, "arguments.decisions[%zu].seq %lld is not a call run %s waits on; "
               "it waits on seq %s (the paused result's pending list)", i,
               (long long)json_integer_value(seq), a->run_id, list);
      return "approval.not_pending";
    }
    const char *tool = json_string_value(json_object_get(d, "tool"));
    json_t *dargs = json_object_get(d, "args");
    char *dtext = dargs ? tp_json_text(dargs, NULL) : NULL;
    int args_differ = dargs && (dtext == NULL || strcmp(dtext, p->args) != 0);
    free(dtext);
    if ((tool && strcmp(tool, p->tool) != 0) || args_differ) {
      snprintf(msg, len, "arguments.decisions[%zu] names %s than call %llu of run %s holds: "
               "an approval covers only the call it was asked for, as the paused result "
               "lists it", i, args_differ ? "other arguments" : "another tool",
               (unsigned long long)p->seq, a->run_id);
      return "approval.binding";
    }
    if (!tp__mcp_approve_binding_eq(p->binding, json_string_value(bind), json_string_length(bind))) {
      snprintf(msg, len, "arguments.decisions[%zu].binding does not match call %llu of run "
               "%s: a binding holds only for the run, seq, tool and arguments it was issued "
               "for; copy it from that run's paused result", i, (unsigned long long)p->seq,
               a->run_id);
      return "approval.binding";
    }
  }
  return NULL;
}

/* Why results (resume_run's arguments.results: the caller tools' answers) cannot be
** applied to a's held calls: NULL, or the error's code with msg set. */
static const char *check_results (apx *a, json_t *args, char *msg, size_t len) {
  json_t *rs = json_object_get(args, "results");
  if (!json_is_array(rs) || json_array_size(rs) == 0) {
    snprintf(msg, len, "arguments.results must be a non-empty array of {id, binding, result} "
             "or {id, binding, error = {message, code}}: one entry a call of the paused "
             "result's pending list");
    return "tool.invalid_input";
  }
  size_t i, k;
  json_t *r, *e;
  json_array_foreach(rs, i, r) {
    json_t *id = json_object_get(r, "id"), *bind = json_object_get(r, "binding");
    json_t *res = json_object_get(r, "result"), *err = json_object_get(r, "error");
    if (!json_is_object(r) || !json_is_integer(id) || !json_is_string(bind) ||
        (res == NULL) == (err == NULL) ||
        (err && !json_is_string(json_object_get(err, "message")))) {
      snprintf(msg, len, "arguments.results[%zu] must be {id = <integer>, binding = <string>, "
               "result = <any>} or {id, binding, error = {message = <string>, code = "
               "<string>}}, id and binding as the paused result's pending list gives them", i);
      return "tool.invalid_input";
    }
    json_array_foreach(rs, k, e) {
      if (k < i && json_equal(json_object_get(e, "id"), id)) {
        snprintf(msg, len, "arguments.results[%zu] answers id %lld again (results[%zu] did): "
                 "one answer a call", i, (long long)json_integer_value(id), k);
        return "tool.invalid_input";
      }
    }
    pend *p = a->pending;
    while (p && ((json_int_t)p->seq != json_integer_value(id) || !p->call)) p = p->next;
    if (p == NULL) {
      char list[200] = "";
      size_t n = 0;
      for (pend *x = a->pending; x && n + 24 < sizeof list; x = x->next)
        if (x->call)
          n += (size_t)snprintf(list + n, sizeof list - n, "%s%llu", n ? ", " : "",
                                (unsigned long long)x->seq);
      snprintf(msg, len, "arguments.results[%zu].id %lld is not a call run %s waits on; it "
               "waits on id %s (the paused result's pending list)", i,
               (long long)json_integer_value(id), a->run_id, n ? list : "(none)");
      return "caller.not_pending";
    }
    if (!tp__mcp_approve_binding_eq(p->binding, json_string_value(bind), json_string_length(bind))) {
      snprintf(msg, len, "arguments.results[%zu].binding does not match call %llu of run %s: "
               "a binding holds only for the run, id, tool and arguments it was issued for; "
               "copy it from that run's paused result", i, (unsigned long long)p->seq,
               a->run_id);
      return "caller.binding";
    }
  }
  return NULL;
}

/* M_RESUME: decisions for the parked run of request serial (whose id is now the resuming
** request's). All or none apply: a bad decision answers with an error and the run stays
** parked. */
static void decide (worker *w, req *q, json_t *args);

/* Exactly once. With --state, servers that share a store could each resume one paused
** run: this one from memory, another restored from the store. Whoever resumes a run first
** claims it in the store (atomically across processes); the others refuse it. The key
** begins with a control character, which no session id has. Only a server whose name
** outlives its process claims runs (--http or --advertise): a claim lasts as long as a run
** may stay paused, and a stdio server's name (its pid) would keep its own restart from
** restoring the runs it resumed before it stopped.
**
** The steps of a resume, each of which the store may fail: claim the run; (restored) read
** its record and log; mark its record "running" (naming this server); apply the
** decisions, whose approved calls run. A claim the store did not answer is never taken
** for won: the resume is refused with state.unavailable, nothing runs, and the same
** resume_run sent again goes through once the store answers. A run held by a server
** whose lease lapsed (it died, or lost the store: --lease) is run.interrupted when its
** record says "running" (its calls may have been made), and is taken over when the record
** is still the pause this server holds (nothing was decided there). */
#define RUN_CLAIMS(s) ((s)->owner != NULL && ((s)->o.advertise || (s)->o.http.listen))
#define RUN_CLAIM_TTL_MS(o) ((int64_t)((o)->pause_ttl_us / 1000) + 3600000)
static void run_claim_key (const char *run_id, char *out, size_t len) {
  snprintf(out, len, "\x1frun:%s", run_id);
}
static void run_claim_msg (const char *run_id, const char *holder, char *msg, size_t len) {
  snprintf(msg, len, "run %s is not paused here: another tidepool server, %s, holds it: it "
           "resumed the run, and its result answers the call that resumed it there (if that "
           "call failed with state.unavailable, send it to %s again)", run_id, holder, holder);
}
static void run_interrupted_msg (const char *run_id, const char *holder, char *msg,
                                 size_t len) {
  if (holder)
    snprintf(msg, len, "run %s cannot be resumed: tidepool server %s resumed it and stopped "
             "(its lease lapsed) while the run went on, so the calls approved then may have "
             "been made. Check what they did, then run the script again if needed", run_id,
             holder);
  else
    snprintf(msg, len, "run %s cannot be resumed: it was resumed already and was running "
             "when its server stopped, so the calls approved then may have been made. Check "
             "what they did, then run the script again if needed", run_id);
}
static void store_down_msg (const char *run_id, const char *what, const char *err, char *msg,
                            size_t len) {
  snprintf(msg, len, "run %s was not resumed: the state store failed to %s (%.300s). A run "
           "goes on only once the store has it claimed for one server, so that no approved "
           "call is made twice; nothing of it ran. Send the same resume_run again (its "
           "decisions stay valid) once the store answers", run_id, what, err ? err : "closed");
}

/* A resume in flight on the worker: the request by serial (it may end meanwhile). */
typedef struct rclaim { worker *w; uint64_t serial; json_t *args; int64_t log_entries; } rclaim;

static req *rclaim_req (rclaim *c) {
  worker *w = c->w;
  if (w->stopping) return NULL;
  req *q = w->running;
  while (q && q->serial != c->serial) q = q->wnext;
  return q && q->ax != NULL && q->run != NULL ? q : NULL;
}

static void rclaim_free (rclaim *c) {
  json_decref(c->args);
  free(c);
}

static int64_t wall_ms(void);
static const char holder_or_unknown[] = "(unnamed)";

/* A restored run whose decisions were refused waits here until its expiry (a run paused
** here has its --pause-ttl timer running already). */
static void keep_till_expiry (req *q) {
  if (q->ax && q->wparked && q->dexp_ms && !uv_is_active((uv_handle_t *)&q->ax->t)) {
    int64_t left = q->dexp_ms - wall_ms();
    uv_timer_start(&q->ax->t, ttl_cb, left > 0 ? (uint64_t)left : 1, 0);
  }
}

/* Refuses the resume of q, whose run stays here waiting for decisions. */
static void refuse_resume (worker *w, req *q, const char *code, const char *msg) {
  size_t n;
  char *line = tp__mcp_view_refusal(q->id, code, msg, NULL, q->budget, &n);
  if (line) park(w, q, line, n);
  keep_till_expiry(q);
}

static void marked (void *ud, int status, const char *val, size_t len, const char *err) {
  (void)val; (void)len;
  rclaim *c = ud;
  req *q = rclaim_req(c);
  if (q != NULL) {
    if (status == TP_STORED_OK) decide(c->w, q, c->args);
    else {
      char msg[800];
      store_down_msg(q->run_id, "mark the run as running", err, msg, sizeof msg);
      refuse_resume(c->w, q, "state.unavailable", msg);
    }
  }
  rclaim_free(c);
}

/* The decisions are checked; then, for a run kept in the store, its record says "running"
** (so that neither a restart nor another server replays it to its approved calls again)
** before they apply. Takes c. */
static void mark_then_decide (worker *w, req *q, rclaim *c) {
  char msg[700];
  if (check_decisions(q->ax, c->args, msg, sizeof msg) != NULL || !q->dsaved) {
    decide(w, q, c->args);  /* refuses bad decisions; the run stays paused */
    keep_till_expiry(q);
    rclaim_free(c);
    return;
  }
  json_t *rec = json_pack("{s:s, s:s, s:s, s:i}", "run", q->run_id, "state", "running",
                          "by", w->s->owner ? w->s->owner : "", "v", 1);
  if (rec && q->principal) json_object_set_new(rec, "principal", json_string(q->principal));
  size_t n;
  char *text = rec ? tp_json_text(rec, &n) : NULL;
  json_decref(rec);
  uint64_t ttl = w->s->o.pause_ttl_us / 1000u + TP__MCP_APPROVE_GRACE_MS;
  if (text == NULL || tp_engine_run_put(w->e, q->run_id, text, n, ttl, marked, c) != TP_OK)
    marked(c, TP_STORED_ERROR, NULL, 0, text ? tp_engine_error(w->e) : "out of memory");
  free(text);
}

static void resume_claimed (void *ud, int outcome, const char *holder, const char *err);

/* A run held by a server whose lease lapsed: its record says what happened there. */
static void resume_probed (void *ud, int status, const char *val, size_t len, const char *err) {
  rclaim *c = ud;
  req *q = rclaim_req(c);
  if (q == NULL) { rclaim_free(c); return; }
  worker *w = c->w;
  char msg[800];
  json_t *rec = status == TP_STORED_OK ? tp_json_parse(val, len, NULL, 0) : NULL;
  const char *state = json_string_value(json_object_get(rec, "state"));
  const char *by = json_string_value(json_object_get(rec, "by"));
  json_t *le = json_object_get(rec, "log_entries");
  if (status != TP_STORED_OK && status != TP_STORED_NOTFOUND) {
    store_down_msg(q->run_id, "read the run's record", err, msg, sizeof msg);
    refuse_resume(w, q, "state.unavailable", msg);
  }
  else if (state && strcmp(state, "running") == 0) {
    run_interrupted_msg(q->run_id, by, msg, sizeof msg);
    refuse_resume(w, q, "run.interrupted", msg);
  }
  else if ((status == TP_STORED_NOTFOUND && !q->dsaved) ||
           (rec && json_is_integer(le) && json_integer_value(le) == c->log_entries)) {
    /* still the pause this server holds (or one no other server could restore): the
    ** holder that lapsed decided nothing of it */
    char key[TP__MCP_APPROVE_RUN_ID_MAX + 8];
    run_claim_key(q->run_id, key, sizeof key);
    json_decref(rec);
    if (tp_engine_claim_lease(w->e, key, w->s->owner, RUN_CLAIM_TTL_MS(&w->s->o),
                              TP_CLAIM_TAKEOVER, resume_claimed, c) != TP_OK)
      resume_claimed(c, TP_CLAIM_FAILED, NULL, tp_engine_error(w->e));
    return;
  }
  else {
    snprintf(msg, sizeof msg, "run %s is not paused here: tidepool server %s resumed it%s "
             "and then stopped (its lease lapsed)%s", q->run_id, by ? by : holder_or_unknown,
             status == TP_STORED_NOTFOUND ? ", the run finished there," : "",
             status == TP_STORED_NOTFOUND ? "" : "; the run was paused again there and its "
             "state is in the store: resume it through another server, with the decisions "
             "of its latest paused result");
    refuse_resume(w, q, "run.not_paused", msg);
  }
  json_decref(rec);
  rclaim_free(c);
}

static void resume_claimed (void *ud, int outcome, const char *holder, const char *err) {
  rclaim *c = ud;
  req *q = rclaim_req(c);
  if (q == NULL || !q->wparked) { rclaim_free(c); return; }
  worker *w = c->w;
  char msg[800];
  switch (outcome) {
  case TP_CLAIM_WON: case TP_CLAIM_TAKEN:
    if (outcome == TP_CLAIM_TAKEN)
      wlog(w, L_INFO, "run %s: taken over from %s, whose lease lapsed", q->run_id, holder);
    mark_then_decide(w, q, c);
    return;
  case TP_CLAIM_DEAD:
    if (tp_engine_run_get(w->e, q->run_id, resume_probed, c) != TP_OK)
      resume_probed(c, TP_STORED_ERROR, NULL, 0, tp_engine_error(w->e));
    return;
  case TP_CLAIM_HELD:
    run_claim_msg(q->run_id, holder, msg, sizeof msg);
    refuse_resume(w, q, "run.not_paused", msg);
    break;
  default:
    store_down_msg(q->run_id, "claim the run for this server", err, msg, sizeof msg);
    refuse_resume(w, q, "state.unavailable", msg);
  }
  rclaim_free(c);
}

static void resume (worker *w, uint64_t serial, const char *text, size_t len) {
  req *q = w->running;
  while (q && q->serial != serial) q = q->wnext;
  if (q == NULL || !q->wparked || q->ax == NULL) return;  /* ended: req_done answers */
  json_t *args = tp_json_parse(text, len, NULL, 0);
  rclaim *c = args ? calloc(1, sizeof *c) : NULL;
  if (c == NULL) {
    json_decref(args);
    refuse_resume(w, q, "limit.memory", "the server is out of memory: the run was not "
                  "resumed; send the same resume_run again");
    return;
  }
  *c = (rclaim){ w, serial, args, (int64_t)(q->dbase + q->dput) };
  if (!RUN_CLAIMS(w->s)) { mark_then_decide(w, q, c); return; }
  char key[TP__MCP_APPROVE_RUN_ID_MAX + 8];
  run_claim_key(q->run_id, key, sizeof key);
  if (tp_engine_claim_lease(w->e, key, w->s->owner, RUN_CLAIM_TTL_MS(&w->s->o),
                            TP_CLAIM_PROBE, resume_claimed, c) != TP_OK)
    resume_claimed(c, TP_CLAIM_FAILED, NULL, tp_engine_error(w->e));
}

/* Applies decisions (resume_run's arguments) to q's held calls. */
static void decide (worker *w, req *q, json_t *args) {
  apx *a = q->ax;
  char msg[700];
  const char *code = check_decisions(a, args, msg, sizeof msg);
  if (code) {
    size_t n;
    char *line = tp__mcp_view_refusal(q->id, code, msg, NULL, q->budget, &n);
    if (line) park(w, q, line, n);
    return;
  }
  size_t i;
  json_t *d;
  json_array_foreach(json_object_get(args, "results"), i, d) {  /* caller tools' answers */
    json_int_t seq = json_integer_value(json_object_get(d, "id"));
    pend *p = a->pending;
    while (p && ((json_int_t)p->seq != seq || !p->call)) p = p->next;
    if (p == NULL) continue;
    tp_call *c = p->c;
    pend_unlink(a, p);
    pend_free(p);
    tp_call_answer_tree(c, d);
  }
  json_array_foreach(json_object_get(args, "decisions"), i, d) {
    json_int_t seq = json_integer_value(json_object_get(d, "seq"));
    pend *p = a->pending;
    while (p && ((json_int_t)p->seq != seq || p->call)) p = p->next;
    if (p == NULL) continue;
    tp_call *c = p->c;
    pend_unlink(a, p);
    pend_free(p);
    const char *note = json_string_value(json_object_get(d, "note"));
    if (json_is_true(json_object_get(d, "approve"))) { tp_call_approve(c); continue; }
    char why[2300];
    if (note && *note) snprintf(why, sizeof why, "the person declined: %.2000s", note);
    else snprintf(why, sizeof why, "the person declined");
    tp_call_deny(c, why);
  }
  uv_timer_stop(&a->t);
  if (a->pending) { park(w, q, NULL, 0); return; }  /* undecided calls: paused again */
  q->wparked = 0;
  tp_run_hold_wall(q->run, 0);
}

static void wdone (worker *w, req *q) {
  q->m.kind = M_DONE;
  q->m.q = q;
  q->m.w = w;
  post(&w->s->mb, &q->m);
}

/* ---- durable runs (worker side) -----------------------------------------------------
** With --state (and an "ask" rule), a run outside a session keeps its call log
** (tp_run_on_log) in memory; when it pauses, the log and a record (script, limits, policy
** hash, seed, pending calls with their bindings, expiry, who ran it) go to the store
** before the paused result is sent, through the engine's connection (tidepool.h "paused
** runs in the state store"). The run ends: they are deleted. A resume_run for a run no
** process holds (after a restart) loads them, checks the expiry and the policy's hash,
** makes the run again with the log as its replay (tp_run_replay): the logged calls are
** answered from the log, the held call is held again by the policy (same seq, tool and
** arguments: the same binding), and the decisions apply as if the run had never left. */

/* Says in a paused result's message why its run does not survive a restart. */
static void dur_note (json_t *view, const req *q) {
  const char *m = json_string_value(json_object_get(view, "message"));
  char buf[1600];
  if (q->dnote) snprintf(buf, sizeof buf, "%s %s", m ? m : "", q->dnote);
  else snprintf(buf, sizeof buf, "%s It could not be kept in the state store (%s): it waits "
                "in this server process only and does not survive a restart.", m ? m : "",
                q->dwhy);
  json_object_set_new(view, "message", json_string(buf));
}

static int dlog_cb (tp_run *r, const char *entry, size_t len, void *ud) {
  (void)r;
  req *q = ud;
  if (q->dbad) return 0;  /* not kept any more: the run goes on in memory */
  if (len > TP_STORED_MAX) {
    q->dbad = 1;
    snprintf(q->dwhy, sizeof q->dwhy, "a call's result is over 1 MiB: have the tool write "
             "large data to a file and pass its path, to keep runs restartable");
    return 0;
  }
  if (q->dn == q->dcap) {
    size_t cap = q->dcap ? q->dcap * 2 : 16;
    struct dent *d = realloc(q->dents, cap * sizeof *d);
    if (d == NULL) goto oom;
    q->dents = d;
    q->dcap = cap;
  }
  char *p = malloc(len + 1);
  if (p == NULL) goto oom;
  memcpy(p, entry, len);
  p[len] = '\0';
  q->dents[q->dn].p = p;
  q->dents[q->dn].n = len;
  q->dn++;
  return 0;
oom:
  q->dbad = 1;
  snprintf(q->dwhy, sizeof q->dwhy, "the server ran out of memory for its call log");
  return 0;
}

/* A new run outside a session keeps its log for the store; a session's cannot. */
static void dur_begin (worker *w, req *q, tp_run *run) {
  if (q->sess_num) {
    q->dnote = "This run is in a session: it does not survive a restart of the server (the "
               "session's globals live in this process).";
    return;
  }
  q->dlim = w->s->o.lim;
  if (tp_run_on_log(run, dlog_cb, q) == TP_OK) q->durable = 1;
}

struct dsave {
  worker *w;
  req *q;                   /* NULL once its run ended */
  size_t left, upto;        /* answers to come; log entries written when all came */
  int stage, failed;        /* 0: the log's entries, 1: the record */
  char why[300];
};

static int64_t wall_ms (void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void dsave_step (dsave *d);

static void dsave_cb (void *ud, int status, const char *val, size_t len, const char *err) {
  (void)val; (void)len;
  dsave *d = ud;
  if (status != TP_STORED_OK && !d->failed) {
    d->failed = 1;
    if (status == TP_STORED_TOO_BIG)
      snprintf(d->why, sizeof d->why, "%s is over the store's 1 MiB a value: keep scripts "
               "and tool arguments small (write large data to a file and pass its path)",
               d->stage ? "its record (the script and the pending calls' arguments)"
                        : "an entry of its call log");
    else snprintf(d->why, sizeof d->why, "the state store failed: %.200s",
                  err ? err : "closed");
  }
  if (--d->left == 0) dsave_step(d);
}

/* The record of q's paused run as JSON text; NULL when out of memory. */
static char *dur_record (worker *w, req *q, size_t *len) {
  const options *o = &w->s->o;
  json_t *pending = json_array();
  for (pend *p = q->ax ? q->ax->pending : NULL; p; p = p->next) {
    json_t *e = tp__mcp_approve_pending_entry(p->seq, p->tool, p->args, p->reason, p->binding);
    if (e && p->call) json_object_set_new(e, "kind", json_string("call"));
    json_array_append_new(pending, e);
  }
  json_int_t seed = 0;
  json_t *first = q->dbase == 0 && q->dn ? tp_json_parse(q->dents[0].p, q->dents[0].n,
                                                         NULL, 0) : NULL;
  if (json_is_integer(json_object_get(first, "seed")))
    seed = json_integer_value(json_object_get(first, "seed"));
  json_decref(first);
  int64_t now = wall_ms();
  q->dexp_ms = now + (int64_t)(o->pause_ttl_us / 1000u);
  json_t *rec = json_pack("{s:i, s:s, s:s#, s:o, s:s, s:o, s:I, s:I, s:I}", "v", 1,
    "run", q->ax->run_id, "script", q->code ? q->code : "", q->codelen,
    "limits", tp__mcp_approve_limits_json(&q->dlim), "policy_sha256", o->policy_hash,
    "pending", pending, "created_ms", (json_int_t)now, "expires_ms", (json_int_t)q->dexp_ms,
    "log_entries", (json_int_t)(q->dbase + q->dn));
  if (rec && q->dbase == 0) json_object_set_new(rec, "seed", json_integer(seed));
  if (rec && q->principal) json_object_set_new(rec, "principal", json_string(q->principal));
  if (rec && q->scopes) json_object_set_new(rec, "scopes", json_string(q->scopes));
  if (rec && q->callers)  /* its caller tools, declared again when it is restored */
    json_object_set_new(rec, "caller_tools", json_string(q->callers));
  if (rec && q->tool) {
    json_object_set_new(rec, "tool", json_string(q->tool));
    json_object_set_new(rec, "mcp_name", json_string(q->mcp_name));
    json_object_set(rec, "args", q->args);
  }
  char *text = rec ? tp_json_text(rec, len) : NULL;
  json_decref(rec);
  return text;
}

/* The next stage of a save: the record after the log; then the paused result. */
static void dsave_step (dsave *d) {
  req *q = d->q;
  worker *w = d->w;
  if (q == NULL) { free(d); return; }  /* the run ended meanwhile */
  if (d->stage == 0 && !d->failed) {
    d->stage = 1;
    size_t n;
    char *rec = dur_record(w, q, &n);
    uint64_t ttl = w->s->o.pause_ttl_us / 1000u + TP__MCP_APPROVE_GRACE_MS;
    d->left = 1;
    if (rec == NULL || tp_engine_run_put(w->e, q->ax->run_id, rec, n, ttl, dsave_cb, d) != TP_OK)
      dsave_cb(d, TP_STORED_ERROR, NULL, 0, rec ? tp_engine_error(w->e) : "out of memory");
    free(rec);
    return;
  }
  q->dsave = NULL;
  if (d->failed) {
    snprintf(q->dwhy, sizeof q->dwhy, "%s", d->why);
    q->dbad = 1;
    dur_forget(w, q);
  }
  else {
    q->dput = d->upto;
    q->dsaved = 1;
  }
  free(d);
  q->dsave_done = 1;
  park(w, q, NULL, 0);
}

/* Writes q's log (what is not in the store yet) and its record, then parks it. */
static void dur_save (worker *w, req *q) {
  if (q->dbad) {  /* the log is not whole: the run waits here only */
    dur_forget(w, q);
    q->dsave_done = 1;
    park(w, q, NULL, 0);
    return;
  }
  dsave *d = calloc(1, sizeof *d);
  if (d == NULL) {
    q->dbad = 1;
    snprintf(q->dwhy, sizeof q->dwhy, "the server ran out of memory");
    q->dsave_done = 1;
    park(w, q, NULL, 0);
    return;
  }
  d->w = w;
  d->q = q;
  d->upto = q->dn;
  d->left = 1;  /* this function's own, so that answers at once do not finish it early */
  q->dsave = d;
  for (size_t i = q->dput; i < q->dn && !d->failed; i++) {
    d->left++;
    if (tp_engine_log_put(w->e, q->ax->run_id, q->dbase + i, q->dents[i].p, q->dents[i].n,
                          dsave_cb, d) != TP_OK)
      dsave_cb(d, TP_STORED_ERROR, NULL, 0, tp_engine_error(w->e));
  }
  dsave_cb(d, TP_STORED_OK, NULL, 0, NULL);
}

/* An earlier pause's record of q, now out of date, goes: a restart must not replay to a
** call decided since. */
static void dur_forget (worker *w, req *q) {
  if (q->dsaved && q->run_id[0]) tp_engine_run_del(w->e, q->run_id, NULL, NULL);
  q->dsaved = 0;
}

/* q's run ended: its stored record and log go (not when the server stops: they are what a
** restart resumes). */
static void dur_end (worker *w, req *q) {
  if (q->dsave) { q->dsave->q = NULL; q->dsave = NULL; }
  if (q->dsaved && !w->stopping && q->run_id[0])
    tp_engine_run_del(w->e, q->run_id, NULL, NULL);
  q->dsaved = 0;
}

static void dur_refuse (worker *w, req *q, const char *code, const char *msg) {
  q->line = tp__mcp_view_refusal(q->id, code, msg, NULL, q->budget, &q->line_len);
  wdone(w, q);
}

/* A restored run replayed to its held call(s): the decisions it was resumed with apply
** (its record marked "running" first). */
static void dur_decide (worker *w, req *q) {
  json_t *args = q->restore;
  q->restore = NULL;
  rclaim *c = calloc(1, sizeof *c);
  if (c == NULL) {
    json_decref(args);
    refuse_resume(w, q, "limit.memory", "the server is out of memory: the run was not "
                  "resumed; send the same resume_run again");
    return;
  }
  *c = (rclaim){ w, q->serial, args, 0 };
  mark_then_decide(w, q, c);
}

static void dur_got_log (void *ud, int status, const char *val, size_t len, const char *err);

/* The restore of a run (resume_run for a run no request here holds): read its record
** (for its principal: another principal's run is not found); with run claims, claim it
** (DUR_PROBE, then DUR_TAKEOVER from a holder whose lease lapsed before the record said
** "running") and read the record again, now this server's to resume (DUR_CLAIMED). */
enum { DUR_READ, DUR_PROBE, DUR_TAKEOVER, DUR_CLAIMED };

static void dur_load_claimed(void *ud, int outcome, const char *holder, const char *err);

/* Lets the claim of a restore go when it failed before its record said "running" (nothing
** of it ran): any server may resume the run then. */
static void dur_unclaim (worker *w, req *q) {
  if (q->dstage != DUR_CLAIMED) return;
  char key[TP__MCP_APPROVE_RUN_ID_MAX + 8];
  run_claim_key(q->run_id, key, sizeof key);
  tp_engine_release_session(w->e, key, w->s->owner);
}

static void dur_got_record (void *ud, int status, const char *val, size_t len,
                            const char *err) {
  req *q = ud;
  worker *w = q->w;
  char msg[800];
  if (w->stopping) return;
  json_t *rec = status == TP_STORED_OK ? tp_json_parse(val, len, NULL, 0) : NULL;
  if (rec && !same_principal(json_string_value(json_object_get(rec, "principal")),
                             q->principal)) {
    json_decref(rec);  /* another principal's: as if there were none */
    status = TP_STORED_NOTFOUND;
    rec = NULL;
  }
  if (status == TP_STORED_NOTFOUND) {
    snprintf(msg, sizeof msg, "there is no paused run \"%.60s\", here or in the state store: "
             "it finished, it was ended after waiting longer than the server's --pause-ttl, "
             "or the id is wrong (copy run from the paused result)", q->run_id);
    dur_unclaim(w, q);
    dur_refuse(w, q, "run.unknown", msg);
    return;
  }
  if (status != TP_STORED_OK) {
    store_down_msg(q->run_id, "read the run's record", err, msg, sizeof msg);
    dur_unclaim(w, q);
    dur_refuse(w, q, "state.unavailable", msg);
    return;
  }
  if (rec == NULL) {
    snprintf(msg, sizeof msg, "run %s could not be read from the state store: its record "
             "is not JSON", q->run_id);
    dur_unclaim(w, q);
    dur_refuse(w, q, "run.store_failed", msg);
    return;
  }
  const char *state = json_string_value(json_object_get(rec, "state"));
  int running = state && strcmp(state, "running") == 0;
  if (q->dstage == DUR_READ && RUN_CLAIMS(w->s)) {  /* now claim it: see run_claim_key */
    char key[TP__MCP_APPROVE_RUN_ID_MAX + 8];
    run_claim_key(q->run_id, key, sizeof key);
    json_decref(rec);
    q->drunning = running;
    q->dstage = DUR_PROBE;
    if (tp_engine_claim_lease(w->e, key, w->s->owner, RUN_CLAIM_TTL_MS(&w->s->o),
                              TP_CLAIM_PROBE, dur_load_claimed, q) != TP_OK)
      dur_load_claimed(q, TP_CLAIM_FAILED, NULL, tp_engine_error(w->e));
    return;
  }
  if (running) {
    run_interrupted_msg(q->run_id, NULL, msg, sizeof msg);
    json_decref(rec);
    dur_refuse(w, q, "run.interrupted", msg);
    return;
  }
  json_t *exp = json_object_get(rec, "expires_ms");
  const char *hash = json_string_value(json_object_get(rec, "policy_sha256"));
  const char *script = json_string_value(json_object_get(rec, "script"));
  if (!json_is_integer(exp) || hash == NULL || script == NULL ||
      (tp_limits_init(&q->dlim), tp__mcp_approve_limits_read(json_object_get(rec, "limits"),
                                                     &q->dlim)) != 0) {
    snprintf(msg, sizeof msg, "run %s's record in the state store is not one this server "
             "reads; run the script again", q->run_id);
    dur_refuse(w, q, "run.store_failed", msg);
  }
  else if (json_integer_value(exp) <= wall_ms()) {
    tp_engine_run_del(w->e, q->run_id, NULL, NULL);
    char ttl[32];
    tp__mcp_approve_format_ttl(w->s->o.pause_ttl_us, ttl, sizeof ttl);
    snprintf(msg, sizeof msg, "run %s expired: it waited for decisions longer than the "
             "--pause-ttl of the server that paused it, and was ended (its calls were not "
             "made); run the script again", q->run_id);
    dur_refuse(w, q, "run.expired", msg);
  }
  else if (strcmp(hash, w->s->o.policy_hash) != 0) {
    snprintf(msg, sizeof msg, "run %s was paused under another policy: the config's policy "
             "section changed since, so its replay cannot be trusted to decide as before. "
             "Run the script again (or restore the earlier policy to resume it)", q->run_id);
    dur_refuse(w, q, "run.policy_changed", msg);
  }
  else {
    free(q->code);
    q->codelen = strlen(script);
    q->code = strdup(script);
    const char *p = json_string_value(json_object_get(rec, "principal"));
    const char *sc = json_string_value(json_object_get(rec, "scopes"));
    free(q->principal);
    free(q->scopes);
    q->principal = p ? strdup(p) : NULL;
    q->scopes = sc ? strdup(sc) : NULL;
    const char *tool = json_string_value(json_object_get(rec, "tool"));
    const char *mcp = json_string_value(json_object_get(rec, "mcp_name"));
    if (tool && mcp) {
      q->tool = strdup(tool);
      q->mcp_name = strdup(mcp);
      json_t *a = json_object_get(rec, "args");
      q->args = json_is_object(a) ? json_incref(a) : json_object();
    }
    q->dexp_ms = json_integer_value(exp);
    const char *callers = json_string_value(json_object_get(rec, "caller_tools"));
    free(q->callers);
    q->callers = callers ? strdup(callers) : NULL;  /* answered by resume_run's results */
    q->callers_live = 0;
    json_decref(rec);
    if (q->code == NULL || (tool && mcp && (q->tool == NULL || q->mcp_name == NULL)) ||
        (callers && q->callers == NULL)) {
      dur_refuse(w, q, "limit.memory", "the server is out of memory: the run could not "
                 "be restored");
      return;
    }
    if (tp_engine_log_read(w->e, q->run_id, dur_got_log, q) != TP_OK)
      dur_got_log(q, TP_STORED_ERROR, NULL, 0, tp_engine_error(w->e));
    return;
  }
  dur_unclaim(w, q);
  json_decref(rec);
}

static void dur_got_log (void *ud, int status, const char *val, size_t len, const char *err) {
  req *q = ud;
  worker *w = q->w;
  char msg[700], why[400] = "";
  if (w->stopping) return;
  json_t *log = status == TP_STORED_OK ? tp_json_parse(val, len, NULL, 0) : NULL;
  tp_run *run = log ? tp_run_create(w->e, q->code, q->codelen, &q->dlim) : NULL;
  if (run && q->callers &&
      tp_run_declare_caller_tools(run, q->callers, 0, caller_call, caller_cancel, w) != TP_OK)
    snprintf(why, sizeof why, "its caller tools cannot be declared again: %.300s",
             tp_engine_error(w->e));
  else if (run && tp_run_replay(run, val, len, why, sizeof why) == TP_OK &&
      tp_run_on_log(run, dlog_cb, q) == TP_OK) {
    q->dbase = json_array_size(log);
    q->durable = q->dsaved = 1;
    json_decref(log);
    worker_begin(w, q, run);
    return;
  }
  tp_run_destroy(run);
  json_decref(log);
  dur_unclaim(w, q);
  if (status != TP_STORED_OK && status != TP_STORED_NOTFOUND) {
    store_down_msg(q->run_id, "read the run's call log", err, msg, sizeof msg);
    dur_refuse(w, q, "state.unavailable", msg);
    return;
  }
  snprintf(msg, sizeof msg, "run %s's call log could not be read from the state store: "
           "%.300s; run the script again", q->run_id,
           why[0] ? why : status == TP_STORED_NOTFOUND ? "it is missing" : "out of memory");
  dur_refuse(w, q, "run.store_failed", msg);
}

/* M_RUN of a restore: the record first. */
static void dur_load (worker *w, req *q) {
  if (tp_engine_run_get(w->e, q->run_id, dur_got_record, q) != TP_OK)
    dur_got_record(q, TP_STORED_ERROR, NULL, 0, tp_engine_error(w->e));
}

static void dur_load_claimed (void *ud, int outcome, const char *holder, const char *err) {
  req *q = ud;
  worker *w = q->w;
  char msg[800];
  if (w->stopping) return;  /* the protocol thread frees the request after the join */
  switch (outcome) {
  case TP_CLAIM_WON: case TP_CLAIM_TAKEN:
    if (outcome == TP_CLAIM_TAKEN)
      wlog(w, L_INFO, "run %s: taken over from %s, whose lease lapsed", q->run_id, holder);
    q->dstage = DUR_CLAIMED;
    dur_load(w, q);
    return;
  case TP_CLAIM_HELD:
    run_claim_msg(q->run_id, holder, msg, sizeof msg);
    dur_refuse(w, q, "run.not_paused", msg);
    return;
  case TP_CLAIM_DEAD:
    if (q->drunning) {
      run_interrupted_msg(q->run_id, holder, msg, sizeof msg);
      dur_refuse(w, q, "run.interrupted", msg);
      return;
    }
    /* the holder stopped before it marked the run "running": nothing was decided there */
    char key[TP__MCP_APPROVE_RUN_ID_MAX + 8];
    run_claim_key(q->run_id, key, sizeof key);
    q->dstage = DUR_TAKEOVER;
    if (tp_engine_claim_lease(w->e, key, w->s->owner, RUN_CLAIM_TTL_MS(&w->s->o),
                              TP_CLAIM_TAKEOVER, dur_load_claimed, q) != TP_OK)
      dur_load_claimed(q, TP_CLAIM_FAILED, NULL, tp_engine_error(w->e));
    return;
  default:
    store_down_msg(q->run_id, "claim the run for this server", err, msg, sizeof msg);
    dur_refuse(w, q, "state.unavailable", msg);
  }
}

/* One line of the audit log (--audit): when, the session, the tool called (run_lua or an
** exposed tool), ok, the error's code, and the envelope's full calls record and stats.
** One write(2) of the whole line to a file opened O_APPEND, so the workers' lines never
** interleave. */
/* The time of an audit line, "2026-11-23T01:02:03.456Z". */
static void audit_time (char *when, size_t len) {
  struct timespec ts;
  struct tm tm;
  when[0] = '\0';
  clock_gettime(CLOCK_REALTIME, &ts);
  if (gmtime_r(&ts.tv_sec, &tm))
    snprintf(when, len, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", tm.tm_year + 1900,
             tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000);
}

/* Writes line (consumed) to the audit log as one write(2). */
static void audit_line (worker *w, json_t *line) {
  size_t n;
  char *text = line ? tp_json_text(line, &n) : NULL;
  if (text) {
    text[n] = '\n';  /* tp_json_text's NUL: the buffer holds n + 1 bytes */
    ssize_t wr = write(w->s->audit_fd, text, n + 1);
    if (wr != (ssize_t)(n + 1)) wlog(w, L_WARNING, "--audit: could not write the audit log");
  }
  free(text);
  json_decref(line);
}

/* One line of the audit log per decision of the config's policy (tp_engine_on_decision):
** {"event": "decision", time, session, worker, run, seq, tool, principal, rule (null for
** the default), effect, clause, args_sha256}. The arguments' values are never written. */
static void audit_decision (tp_run *r, const tp_decision *d, void *ud) {
  worker *w = ud;
  const req *q = w->running;
  while (q && q->run != r) q = q->wnext;
  json_t *sid = q && q->sess_info ? json_object_get(q->sess_info, "id") : NULL;
  char when[80];
  audit_time(when, sizeof when);
  json_t *line = json_pack("{s:s, s:s, s:O, s:I, s:I, s:I, s:s, s:s, s:o, s:s, s:s, s:s}",
    "event", "decision", "time", when, "session", sid ? sid : json_null(),
    "worker", (json_int_t)w->index, "run", (json_int_t)d->run, "seq", (json_int_t)d->seq,
    "tool", d->tool, "principal", d->principal,
    "rule", d->rule >= 0 ? json_integer(d->rule) : json_null(), "effect", d->effect,
    "clause", d->clause, "args_sha256", d->args_sha256);
  audit_line(w, line);
}

static void audit_write (worker *w, const req *q, const char *env, size_t len) {
  server *s = w->s;
  if (s->audit_fd < 0 || env == NULL) return;
  json_t *j = tp__mcp_view_parse(env, len);
  char when[80];
  audit_time(when, sizeof when);
  json_t *sid = q->sess_info ? json_object_get(q->sess_info, "id") : NULL;
  json_t *err = json_object_get(j, "error");
  json_t *line = json_pack("{s:s, s:O, s:s, s:O}", "time", when, "session",
                           sid ? sid : json_null(), "tool", q->tool ? q->tool : s->o.name,
                           "ok", json_is_object(j) && json_is_true(json_object_get(j, "ok"))
                                 ? json_true() : json_false());
  if (line && json_is_object(err)) json_object_set(line, "error", json_object_get(err, "code"));
  if (line && q->principal) json_object_set_new(line, "principal", json_string(q->principal));
  json_t *calls = json_object_get(j, "calls"), *stats = json_object_get(j, "stats");
  if (line) json_object_set(line, "calls", calls ? calls : json_array());
  if (line && stats) json_object_set(line, "stats", stats);
  audit_line(w, line);
  json_decref(j);
}

static void run_done (tp_run *run, void *ud) {
  req *q = ud;
  worker *w = q->w;
  tp_run_on_call(run, NULL, NULL);
  tp_run_on_progress(run, NULL, NULL);
  wreq_remove(w, q);
  apx_end(w, q, 0, "the run ended before a person decided");
  dur_end(w, q);
  if (q->wparked) q->ended_parked = q->wcancelled = 1;  /* nobody waits for its result */
  const char *env = tp_run_envelope(run);
  size_t len = env ? strlen(env) : 0;
  int ok = tp_run_ok(run);
  if (q->sess_num) {
    static const char mem[] = "{\"ok\":false,\"error\":{\"code\":\"limit.memory\"";
    if (!ok && env && strncmp(env, mem, sizeof mem - 1) == 0) {
      q->drop_session = 1;
      json_t *sid = json_object_get(q->sess_info, "id");
      json_t *info = json_pack("{s:O, s:s, s:s}", "id", sid ? sid : json_null(),
        "state", "dropped", "message", "the session was dropped because the script went "
        "over the session's memory limit: its globals are gone, and the next call with "
        "this id starts afresh");
      json_decref(q->sess_info);
      q->sess_info = info;
    }
  }
  audit_write(w, q, env, len);
  if (!q->wcancelled) {
    if (env == NULL) q->line = tp__mcp_view_minimal(q->id, 0, "limit.memory", &q->line_len);
    else q->line = q->tool ? tp__mcp_view_exposed(q->id, env, len, ok, q->tool, q->mcp_name,
                                                  q->args, q->budget, &q->line_len)
                           : tp__mcp_view_call(q->id, env, len, ok, q->sess_info, q->budget,
                                           &q->line_len);
  }
  tp_run_destroy(run);
  q->run = NULL;
  if (q->drop_session) wsess_drop(w, q->sess_num);
  wdone(w, q);
}

/* The key of a session's claim in a shared store: the id itself for the local principal
** (as before principals), else "\x1esession:" LEN ":" PRINCIPAL ":" ID, which no id (no
** control characters) and no other principal's key can be. 0 when it does not fit. */
#define SESSION_KEY_MAX (SESSION_ID_MAX + 300)
static int session_key (const char *principal, const char *sid, char *out, size_t len) {
  int n = principal && *principal
        ? snprintf(out, len, "\x1esession:%zu:%s:%s", strlen(principal), principal, sid)
        : snprintf(out, len, "%s", sid);
  return n > 0 && (size_t)n < len;
}

/* The store's answer to the claim of q's session (--state: servers that share it hold
** each session in one of them): ours, run it; another's, session.moved naming it; the
** store failing, run it here (the session's globals are this server's meanwhile). */
static void worker_run (worker *w, req *q);
static void session_claimed (void *ud, int outcome, const char *holder, const char *err) {
  req *q = ud;
  worker *w = q->w;
  if (w->stopping) return;  /* the protocol thread frees the request after the join */
  json_t *sid = json_object_get(q->sess_info, "id");
  const char *id = json_string_value(sid) ? json_string_value(sid) : "";
  char msg[1400];
  if (outcome == TP_CLAIM_FAILED)
    wlog(w, L_WARNING, "the session's claim in the state store failed (%s): run here", err);
  if (outcome == TP_CLAIM_TAKEN) {  /* its holder died: the session starts afresh here */
    wsess_drop(w, q->sess_num);
    snprintf(msg, sizeof msg, "session \"%s\" was held by another tidepool server, %s, "
             "whose lease lapsed (it stopped, or lost the state store): this server took the "
             "session over, the globals it held there are gone, and this call started it "
             "afresh", id, holder);
    json_t *info = json_pack("{s:O, s:s, s:s}", "id", sid ? sid : json_null(), "state", "new",
                             "message", msg);
    if (info) { json_decref(q->sess_info); q->sess_info = info; }
  }
  if (outcome != TP_CLAIM_HELD) { worker_run(w, q); return; }
  snprintf(msg, sizeof msg, "session \"%s\" lives on another tidepool server, %s, which "
           "holds its globals: send this call there (a load balancer that routes by session "
           "does), or use another session id here; the claim lapses after --session-idle "
           "without calls, or once that server's lease lapses (--lease) if it stops", id,
           holder);
  q->moved = 1;
  q->drop_session = 1;
  q->line = tp__mcp_view_refusal(q->id, "session.moved", msg, q->sess_info, q->budget,
                             &q->line_len);
  wdone(w, q);
}

/* Caller tools the engine refused (a bad declaration, a name it has a tool of). */
static void callers_refused (worker *w, req *q) {
  char msg[900];
  snprintf(msg, sizeof msg, "_meta[\"tidepool/callerTools\"]: %s", tp_engine_error(w->e));
  q->line = tp__mcp_view_refusal(q->id, "tool.invalid_input", msg, q->sess_info, q->budget,
                             &q->line_len);
  wdone(w, q);
}

static void worker_run (worker *w, req *q) {
  tp_run *run = NULL;
  if (q->restore) { dur_load(w, q); return; }  /* a paused run of an earlier process */
  const tp_limits *lim = &w->s->o.lim;
  if (q->sess_num && w->s->owner && !q->claimed) {
    q->claimed = 1;
    const char *sid = json_string_value(json_object_get(q->sess_info, "id"));
    char key[SESSION_KEY_MAX];
    int64_t ttl = (int64_t)(w->s->o.session_idle_us / 1000);
    if (sid && session_key(q->principal, sid, key, sizeof key) &&
        tp_engine_claim_lease(w->e, key, w->s->owner, ttl, TP_CLAIM_TAKEOVER, session_claimed,
                              q) == TP_OK)
      return;
  }
  if (q->sess_num) {
    wsess **p = wsess_find(w, q->sess_num);
    if (*p == NULL && (*p = calloc(1, sizeof **p)) != NULL) {
      (*p)->num = q->sess_num;
      if (((*p)->ts = tp_session_create(w->e, lim)) == NULL) { free(*p); *p = NULL; }
    }
    if (*p && q->callers && q->callers_session) {  /* kept for the session's later runs */
      tp_session_clear_caller_tools((*p)->ts);
      if (tp_session_declare_caller_tools((*p)->ts, q->callers, 0, caller_call, caller_cancel,
                                          w) != TP_OK) {
        callers_refused(w, q);
        return;
      }
    }
    if (*p) run = tp_session_run((*p)->ts, q->code, q->codelen);
  }
  else run = tp_run_create(w->e, q->code, q->codelen, lim);
  if (run && q->callers && !(q->callers_session && q->sess_num) &&
      tp_run_declare_caller_tools(run, q->callers, 0, caller_call, caller_cancel, w) != TP_OK) {
    tp_run_destroy(run);
    callers_refused(w, q);
    return;
  }
  if (run == NULL) {
    q->line = tp__mcp_view_refusal(q->id, "limit.memory", "the server is out of memory: the "
                               "script could not start", q->sess_info, q->budget, &q->line_len);
    wdone(w, q);
    return;
  }
  /* a run that may pause (approvals, or caller tools answered by resume_run) is kept in
  ** the store while paused */
  if (w->s->o.state && (w->s->o.asks || (q->callers && !q->callers_live)))
    dur_begin(w, q, run);
  worker_begin(w, q, run);
}

/* Starts q's run (new, or made from the store). */
static void worker_begin (worker *w, req *q, tp_run *run) {
  q->run = run;
  if (q->principal && q->scopes) tp_run_set_principal(run, q->principal, q->scopes);
  if (q->tool) tp_run_set_caller(run, TP_CALLER_DIRECT);  /* an exposed tool's call */
  q->wnext = w->running;
  if (w->running) w->running->wprev = q;
  w->running = q;
  if (w->s->o.asks || q->callers) tp_run_on_call(run, progress_hook, q);  /* counts calls */
  if (q->token) {
    tp_run_on_call(run, progress_hook, q);
    tp_run_on_progress(run, progress_text_hook, q);
    wsend(q, notification("notifications/progress",
          json_pack("{s:O, s:I, s:s}", "progressToken", q->token, "progress",
                    (json_int_t)++q->progress, "message", "script started")));
  }
  if (tp_run_start(run, run_done, q) != TP_OK) {
    tp_run_cancel(run);
    run_done(run, q);
  }
}

typedef struct load_ctx { worker *w; const char *dir; } load_ctx;

/* A plugin refused: one warning each (notifications/message and standard error). */
static void load_problem (const char *problem, void *ud) {
  load_ctx *lc = ud;
  wlog(lc->w, L_WARNING, "tools from %s: refused: %s", lc->dir, problem);
}

static void load_dir (worker *w, const char *dir, int quiet_if_empty) {
  if (quiet_if_empty && !has_lua_files(dir)) return;
  load_ctx lc = { w, dir };
  /* every worker loads the same files: one reports */
  int n = tp_engine_load_tools_cb(w->e, dir, w->index == 0 ? load_problem : NULL, &lc);
  if (w->index == 0 && n < 0)
    wlog(w, L_WARNING, "tools from %s not loaded: %s", dir, tp_engine_error(w->e));
}

/* Loads the plugin directories and tells the protocol thread (M_READY). */
static void worker_load (worker *w) {
  server *s = w->s;
  load_ctx lc = { w, "mcpServers" };  /* each worker's engine has the servers of its own */
  tp_engine_start_servers(w->e, w->index == 0 ? load_problem : NULL, &lc);
  if (s->builtin_dir) load_dir(w, s->builtin_dir, 1);
  for (size_t i = 0; i < s->o.ndirs; i++) load_dir(w, s->o.dirs[i], 0);
  free(w->desc);
  w->desc = NULL;
  mail *m = msg_new(M_READY);
  if (m == NULL) { fprintf(stderr, "tidepool mcp: out of memory\n"); return; }
  m->w = w;
  if (w->index == 0) {
    if (run_lua_description(w) == NULL) {
      const char *err = tp_engine_error(w->e);
      wlog(w, L_ERROR, "run_lua's description could not be made: %s",
           *err ? err : "out of memory");
      m->fail = 2;
    }
    m->text = tools_report(w);
    m->len = tp_engine_tool_count(w->e);
  }
  post(&s->mb, m);
}

/* Stops everything of the worker: its runs without responses, its sandboxes. The
** protocol thread frees the requests after joining the worker. */
static void worker_stop (worker *w) {
  w->stopping = 1;
  while (w->running) {
    req *q = w->running;
    wreq_remove(w, q);
    tp_run_on_call(q->run, NULL, NULL);
    tp_run_cancel(q->run);
    apx_end(w, q, 1, "the server is stopping");
    tp_run_destroy(q->run);
    q->run = NULL;
  }
  sleepers_stop(w);
  while (w->sessions) wsess_drop(w, w->sessions->num);
  if (w->lease_on) {  /* others may take over at once */
    w->lease_on = 0;
    uv_close((uv_handle_t *)&w->lease, NULL);
    tp_engine_end_lease(w->e, w->s->owner);
  }
  uv_close((uv_handle_t *)&w->mb.async, NULL);
}

static void worker_mail (uv_async_t *a) {
  worker *w = a->data;
  for (mail *m = take_all(&w->mb), *next; m; m = next) {
    next = m->next;
    if (w->stopping) { msg_free(m); continue; }
    switch (m->kind) {
    case M_RUN: worker_run(w, m->q); continue;  /* m is the request's: it may be gone */
    case M_CANCEL:
      for (req *q = w->running; q; q = q->wnext)
        if (q->serial == m->n) {
          q->wcancelled = 1;  /* run_done sends no response line */
          tp_run_cancel(q->run);
          break;
        }
      break;
    case M_DROP: wsess_drop(w, m->n); break;
    case M_RESUME: resume(w, m->n, m->text, m->len); break;
    case M_ANSWER: elicit_answer(w, m->text, m->len); break;
    case M_RELOAD:
      tp_engine_unload_tools(w->e);  /* TP_ESTATE while runs are alive */
      worker_load(w);
      break;
    case M_STOP: worker_stop(w); break;
    }
    msg_free(m);
  }
}

/* The server's lease (--state): worker 0 renews it every third of --lease, and again
** half a second after a renewal the store did not answer. */
static void lease_cb (uv_timer_t *t);
static void lease_renewed (void *ud, int outcome, const char *holder, const char *err) {
  worker *w = ud;
  if (w->stopping) return;
  if (outcome == TP_CLAIM_FAILED) {
    if (!w->lease_failing)
      wlog(w, L_WARNING, "the server's lease could not be renewed in the state store (%s): "
           "once it lapses (--lease), other servers take over its sessions", err);
    w->lease_failing = 1;
    uv_timer_start(&w->lease, lease_cb, 500, 0);
    return;
  }
  if (outcome == TP_CLAIM_HELD && !w->lease_failing)
    wlog(w, L_ERROR, "another process holds the lease of this server's name (%s): give each "
         "server its own --advertise", holder);
  if (w->lease_failing && outcome == TP_CLAIM_WON)
    wlog(w, L_INFO, "the server's lease is renewed again");
  w->lease_failing = outcome != TP_CLAIM_WON;
  uint64_t every = w->s->o.lease_us / 3000u;
  uv_timer_start(&w->lease, lease_cb, every ? every : 1, 0);
}

static void lease_cb (uv_timer_t *t) {
  worker *w = t->data;
  int64_t ttl = (int64_t)(w->s->o.lease_us / 1000u);
  if (tp_engine_renew_lease(w->e, w->s->owner, ttl, lease_renewed, w) != TP_OK)
    lease_renewed(w, TP_CLAIM_FAILED, NULL, tp_engine_error(w->e));
}

/* Makes the worker's engine; on its own thread when threaded. 0, or -1. */
static int worker_open (worker *w) {
  server *s = w->s;
  w->e = tp_engine_create();
  if (w->e == NULL) return -1;
  tp_engine_set_store(w->e, s->kv);  /* before anything starts its host state */
  if (s->o.config && tp_engine_configure_dir(w->e, s->o.config, s->o.config_len,
                                             s->o.config_dir) != TP_OK) {
    if (w->index == 0)  /* checked before the workers started: out of memory */
      tp__options_config_problems(stderr, "tidepool: ", s->o.config_path, tp_engine_error(w->e));
    tp_engine_destroy(w->e);
    w->e = NULL;
    return -1;
  }
  if (s->audit_fd >= 0) tp_engine_on_decision(w->e, audit_decision, w);
  if (s->o.asks) tp_engine_on_approval(w->e, on_approval, w);
  w->loop = tp_engine_loop(w->e);
  if (mailbox_init(&w->mb, w->loop, worker_mail, w) != 0) {
    tp_engine_destroy(w->e);
    w->e = NULL;
    return -1;
  }
  if (s->o.workspace_max_set) tp_engine_set_workspace_max(w->e, s->o.workspace_max);
  if (s->o.workspace && tp_engine_set_workspace(w->e, s->o.workspace) != TP_OK && w->index == 0)
    wlog(w, L_WARNING, "--workspace %s: %s", s->o.workspace, tp_engine_error(w->e));
  if (s->o.test_tools && add_test_tools(w) != 0 && w->index == 0)
    wlog(w, L_WARNING, "test tools: %s", tp_engine_error(w->e));
  if (w->index == 0 && s->owner && uv_timer_init(w->loop, &w->lease) == 0) {
    w->lease.data = w;
    w->lease_on = 1;
    lease_cb(&w->lease);
  }
  return 0;
}

static void worker_close (worker *w) {
  if (w->e == NULL) return;
  if (!w->stopping) worker_stop(w);
  tp_engine_destroy(w->e);  /* runs the loop until the mailbox's handle is closed */
  w->e = NULL;
  free(w->desc);
  w->desc = NULL;
  pthread_mutex_destroy(&w->mb.mu);
}

static void *worker_main (void *arg) {
  worker *w = arg;
  if (worker_open(w) != 0) {
    mail *m = msg_new(M_READY);
    if (m) { m->w = w; m->fail = 1; post(&w->s->mb, m); }
    return NULL;
  }
  worker_load(w);
  while (!w->stopping) uv_run(w->loop, UV_RUN_ONCE);
  worker_close(w);
  return NULL;
}

/* ---- requests (protocol thread) --------------------------------------------------------- */

static void start_waiting(server *s);
static void maybe_reload(server *s);
static void resume_input(server *s);
static void batch_unref(server *s, batch *b);
static void resume_state(server *s, batch *b, json_t *id, json_t *params);
static void resume_call(server *s, batch *b, json_t *id, json_t *args);

static void post_worker (worker *w, int kind, uint64_t n) {
  mail *m = msg_new(kind);
  if (m == NULL) {
    fprintf(stderr, "tidepool mcp: out of memory: a message to a worker was lost\n");
    return;
  }
  m->n = n;
  post(&w->mb, m);
}

static void req_free (server *s, req *q) {
  if (q->origin) tp__mcp_http_release(q->origin);
  json_decref(q->id);
  json_decref(q->token);
  json_decref(q->sess_info);
  free(q->code);
  free(q->principal);
  free(q->scopes);
  free(q->tool);
  free(q->mcp_name);
  free(q->callers);
  json_decref(q->args);
  json_decref(q->seen);
  free(q->line);
  for (size_t i = 0; i < q->dn; i++) free(q->dents[i].p);
  free(q->dents);
  json_decref(q->restore);
  batch *b = q->b;
  free(q);
  if (b) batch_unref(s, b);
}

static void list_remove (req **head, req *q) {
  if (q->prev) q->prev->next = q->next;
  else *head = q->next;
  if (q->next) q->next->prev = q->prev;
  q->prev = q->next = NULL;
}

static void list_push (req **head, req *q) {
  q->prev = NULL;
  q->next = *head;
  if (*head) (*head)->prev = q;
  *head = q;
}

/* A response line of a request, into its batch or out. */
static void respond_text (server *s, batch *b, json_t *id, const char *line, size_t len) {
  if (b == NULL) { write_line(s, line, len); return; }
  json_t *j = tp_json_parse(line, len, NULL, 0);  /* at most BATCH_CALL_MAX bytes */
  if (j) batch_add(b, j);
  else send_error(s, b, id, -32603, "out of memory: the result was lost");
}

static void deferred_closed (uv_handle_t *h) {
  req *q = h->data;
  req_free(q->s, q);
}

/* Sends a deferred response and frees its request. */
static void defer_flush (server *s, req *q) {
  list_remove(&s->deferred, q);
  s->origin = q->origin;
  if (q->line) write_line(s, q->line, q->line_len);
  s->origin = NULL;
  free(q->line);
  q->line = NULL;
  uv_close((uv_handle_t *)&q->defer, deferred_closed);
}

static void defer_cb (uv_timer_t *t) {
  req *q = t->data;
  server *s = q->s;
  defer_flush(s, q);
  stop_if_drained(s);
}

/* An exposed tool's error result (isError) carries no structuredContent: that would have
** to match the tool's outputSchema, which a failure does not, and MCP clients check it
** (the TypeScript SDK's callTool throws -32602 and the error never arrives). Its text
** block holds the same JSON. */
static void drop_structured_on_error (char **line, size_t *len) {
  json_t *j = tp_json_parse(*line, *len, NULL, 0);
  json_t *res = json_object_get(j, "result");
  if (json_is_true(json_object_get(res, "isError")) &&
      json_object_get(res, "structuredContent") != NULL) {
    json_object_del(res, "structuredContent");
    size_t n;
    char *t = tp_json_text(j, &n);
    if (t) {
      free(*line);
      *line = t;
      *len = n;
    }
  }
  json_decref(j);
}

/* A worker finished request q (M_DONE): the request is the protocol thread's again. */
static void req_done (server *s, req *q) {
  if (q->parked) {  /* ended at --pause-ttl while parked: nobody waits for it */
    list_remove(&s->parked, q);
    q->parked = 0;
    q->cancelled = 1;
    list_push(&s->reqs, q);
    s->nrunning++;
    q->w->load++;
  }
  else if (q->ended_parked && !q->cancelled && !s->done) {  /* resumed as it ended */
    free(q->line);
    char msg[300];
    snprintf(msg, sizeof msg, "run %s ended before the decisions came: it waited longer than "
             "the server's --pause-ttl; run the script again", q->run_id);
    q->line = tp__mcp_view_refusal(q->id, "run.unknown", msg, NULL, q->budget, &q->line_len);
  }
  list_remove(&s->reqs, q);
  s->nrunning--;
  q->w->load--;
  session *ss = q->sess;
  if (ss != NULL) {
    ss->busy = 0;
    ss->last_used_ns = now_ns();
    if (q->drop_session)
      session_drop(s, ss, q->moved ? "another server holds it (session.moved)"
                                   : "its script went over the session's memory limit");
  }
  log_msg(s, L_DEBUG, "request %llu %s", (unsigned long long)q->serial,
          q->cancelled ? "cancelled" : "finished");
  if (q->cancelled || s->done) { free(q->line); q->line = NULL; }
  if (q->line && q->tool) drop_structured_on_error(&q->line, &q->line_len);
  if (q->line && q->modern) tp__mcp_era_stamp(&q->line, &q->line_len);
  if (q->line != NULL && q->progress > 0 && q->b == NULL && !s->sink && !q->origin &&
      uv_timer_init(s->loop, &q->defer) == 0) {
    /* The reference client handles notifications a tick after the response that arrives
    ** in the same read, and drops progress for a request already answered: send the
    ** response a moment after the last progress notification, long enough for a client
    ** on a loaded machine to have read them first (5 ms was not, at a load of 7 on 2
    ** cores). Only requests with a progressToken wait. */
    q->defer.data = q;
    list_push(&s->deferred, q);
    uv_timer_start(&q->defer, defer_cb, 20, 0);
  }
  else {
    s->origin = q->origin;
    if (q->line) respond_text(s, q->b, q->id, q->line, q->line_len);
    s->origin = NULL;
    req_free(s, q);
  }
  start_waiting(s);
  maybe_reload(s);
  resume_input(s);
  stop_if_drained(s);
}

static void start_req (server *s, req *q) {
  list_push(&s->reqs, q);
  s->nrunning++;
  q->w->load++;
  q->m.kind = M_RUN;
  q->m.q = q;
  post(&q->w->mb, &q->m);
}

static void start_waiting (server *s) {
  while (s->waiting && s->nrunning < RUNS_MAX && !s->done) {
    req *q = s->waiting;
    list_remove(&s->waiting, q);
    if (s->waiting == NULL) s->waiting_tail = NULL;
    s->nwaiting--;
    start_req(s, q);
  }
}

static void enqueue (server *s, req *q) {
  if (s->nrunning < RUNS_MAX && s->waiting == NULL) { start_req(s, q); return; }
  q->prev = s->waiting_tail;
  q->next = NULL;
  if (s->waiting_tail) s->waiting_tail->next = q;
  else s->waiting = q;
  s->waiting_tail = q;
  s->nwaiting++;
}

/* A refusal of a call (isError result, an envelope with code), into b or out. */
static void refuse_call (server *s, batch *b, json_t *id, const char *code, const char *text,
                         const json_t *sess_info) {
  size_t len;
  char *line = tp__mcp_view_refusal(id, code, text, sess_info, b ? BATCH_CALL_MAX : LINE_OUT_MAX,
                                &len);
  if (line && s->modern_req) tp__mcp_era_stamp(&line, &len);
  if (line) respond_text(s, b, id, line, len);
  else send_error(s, b, id, -32603, "out of memory");
  free(line);
}

/* 'return tools["a"]["b"](json.decode("ARGS"))': an exposed tool's call as a script (the
** name's parts may be Lua keywords, so they are indexed as strings). */
static char *exposed_script (const char *name, const json_t *args, size_t *len) {
  size_t n;
  char *text = tp_json_text(args, &n);
  if (text == NULL) return NULL;
  tp__mcp_view_buf b = { 0 };
  tp__mcp_view_str(&b, "return tools[\"");
  for (const char *p = name; *p; p++) {
    if (*p == '.') tp__mcp_view_str(&b, "\"][\"");
    else tp__mcp_view_put(&b, p, 1);
  }
  tp__mcp_view_str(&b, "\"](json.decode(\"");
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)text[i];
    char esc[8];
    if (c == '"' || c == '\\' || c < 0x20 || c == 0x7f) {
      snprintf(esc, sizeof esc, "\\%03u", c);
      tp__mcp_view_str(&b, esc);
    }
    else tp__mcp_view_put(&b, (const char *)&text[i], 1);
  }
  tp__mcp_view_str(&b, "\"))");
  free(text);
  if (b.oom) { free(b.p); return NULL; }
  *len = b.len;
  return b.p;
}

/* _meta["tidepool/callerTools"] of a run_lua call (docs/caller-tools.md): {version, mode,
** session, tools: [...]} or the bare array. The declarations are checked by the worker's
** engine; here their shape and the mode. 0 with why set when refused. */
static int caller_tools_meta (server *s, req *q, json_t *ct, char *why, size_t len) {
  json_t *tools = json_is_array(ct) ? ct : json_object_get(ct, "tools");
  json_t *v = json_is_object(ct) ? json_object_get(ct, "version") : NULL;
  json_t *mode = json_is_object(ct) ? json_object_get(ct, "mode") : NULL;
  json_t *sess = json_is_object(ct) ? json_object_get(ct, "session") : NULL;
  if (!json_is_array(tools)) {
    snprintf(why, len, "must be {version = 1, mode = \"live\" or \"paused\", tools = "
             "[{name, description, inputSchema, outputSchema, timeoutMs}]}");
    return 0;
  }
  if (v != NULL && !(json_is_integer(v) && json_integer_value(v) == 1)) {
    snprintf(why, len, "version must be 1 (the versions this server knows: [1])");
    return 0;
  }
  const char *m = json_string_value(mode);
  if (mode != NULL && (m == NULL || (strcmp(m, "live") != 0 && strcmp(m, "paused") != 0))) {
    snprintf(why, len, "mode must be \"live\" or \"paused\"");
    return 0;
  }
  if (sess != NULL && !json_is_boolean(sess)) {
    snprintf(why, len, "session must be true or false");
    return 0;
  }
  /* live needs a way to send the client requests: stdio, or this request's SSE stream */
  int can_live = !q->era26 && (q->origin == NULL || tp__mcp_http_streams(q->origin));
  if (m && strcmp(m, "live") == 0 && !can_live) {
    snprintf(why, len, "mode \"live\" needs requests from the server to reach the client: "
             "%s; use mode \"paused\" (resume_run)", q->era26 ? "a 2026-07-28 request has "
             "none" : "this HTTP request does not accept text/event-stream");
    return 0;
  }
  q->callers_live = m ? strcmp(m, "live") == 0 : can_live && s->client_callers;
  q->callers_session = json_is_true(sess);
  q->era26 = 0;  /* held calls come out as a paused result, resumed with resume_run */
  size_t n;
  q->callers = tp_json_text(tools, &n);
  if (q->callers == NULL) { snprintf(why, len, "out of memory"); return 0; }
  return 1;
}

static void tools_call (server *s, batch *b, json_t *id, json_t *params) {
  json_t *jname = json_object_get(params, "name");
  json_t *args = json_object_get(params, "arguments");
  if (!json_is_string(jname)) {
    send_error(s, b, id, -32602, "Invalid params: tools/call needs params.name (a string)");
    return;
  }
  if (args != NULL && !json_is_object(args) && !json_is_null(args)) {
    send_error(s, b, id, -32602, "Invalid params: params.arguments must be an object");
    return;
  }
  if (json_object_get(params, "requestState") != NULL) {  /* a 2026-07-28 retry */
    resume_state(s, b, id, params);
    return;
  }
  const char *name = json_string_value(jname);
  size_t namelen = json_string_length(jname);
  int is_run = strlen(name) == namelen && strcmp(name, s->o.name) == 0;
  const char *real = NULL;  /* the exposed tool's own name */
  if (!is_run && s->o.expose && strlen(name) == namelen && s->tool_names)
    real = json_string_value(json_object_get(s->tool_names, name));
  if (!is_run && real == NULL && strcmp(name, "resume_run") == 0) {  /* approvals, and
                                                     ** caller tools' results */
    resume_call(s, b, id, args);
    return;
  }
  if (!is_run && real == NULL) {
    send_error(s, b, id, -32602, "Unknown tool: %.200s (tools/list lists the tools)", name);
    return;
  }
  req *q = calloc(1, sizeof *q);
  if (q == NULL) { send_error(s, b, id, -32603, "out of memory"); return; }
  q->s = s;
  q->serial = ++s->serial;
  if ((q->origin = s->origin) != NULL) tp__mcp_http_hold(q->origin);
  const char *who, *scopes;
  if (q->origin && tp__mcp_http_principal(q->origin, &who, &scopes)) {
    q->principal = strdup(who);
    q->scopes = strdup(scopes);
  }
  q->id = json_deep_copy(id);
  q->budget = b ? BATCH_CALL_MAX : LINE_OUT_MAX;
  if ((q->modern = s->modern_req)) q->budget -= TP_MCP_ERA_STAMP_ROOM;
  json_t *meta = json_object_get(params, "_meta");
  json_t *token = json_is_object(meta) ? json_object_get(meta, "progressToken") : NULL;
  if ((json_is_string(token) && json_string_length(token) <= 256) || json_is_integer(token))
    q->token = json_deep_copy(token);
  q->era26 = q->modern;     /* a 2026-07-28 request asks with input_required */
  q->elicit = q->era26 ? 0 : s->client_elicit;
  /* over HTTP an elicitation/create can only ride on an SSE stream: a request answered with
  ** JSON is paused instead (resume_run) */
  if (q->origin && !tp__mcp_http_streams(q->origin)) q->elicit = 0;
  if (is_run) {
    json_t *code = json_object_get(args, "code");
    json_t *sid = json_object_get(args, "session");
    const char *bad = NULL;
    char why[300];
    if (!json_is_string(code))
      bad = code ? "arguments.code must be a string: the Lua script"
                 : "arguments.code is missing: pass the Lua script as {\"code\": \"...\"}";
    else if (sid != NULL && !json_is_null(sid)) bad = bad_session_id(sid, why, sizeof why);
    if (bad) {
      refuse_call(s, b, id, "tool.invalid_input", bad, NULL);
      req_free(s, q);
      return;
    }
    json_t *ct = json_is_object(meta) ? json_object_get(meta, "tidepool/callerTools") : NULL;
    /* a session's caller tools, declared by an earlier run, reach the client as it can */
    q->callers_live = s->client_callers && !q->era26 &&
                      (q->origin == NULL || tp__mcp_http_streams(q->origin));
    if (ct != NULL && !caller_tools_meta(s, q, ct, why, sizeof why)) {
      send_error(s, b, id, -32602, "Invalid params: _meta[\"tidepool/callerTools\"]: %s", why);
      req_free(s, q);
      return;
    }
    q->codelen = json_string_length(code);
    q->code = malloc(q->codelen + 1);
    if (q->code) memcpy(q->code, json_string_value(code), q->codelen + 1);
    if (json_is_string(sid)) {
      const char *err = NULL;
      char text[600];
      q->sess = session_for(s, q->principal ? q->principal : "", json_string_value(sid),
                            json_string_length(sid), &q->sess_info, &err, text, sizeof text);
      if (q->sess == NULL) {
        refuse_call(s, b, id, err, text, NULL);
        req_free(s, q);
        return;
      }
      q->sess->busy = 1;
      q->sess->last_used_ns = now_ns();
      q->sess_num = q->sess->num;
      q->w = q->sess->w;
    }
  }
  else {
    q->tool = strdup(real);
    q->mcp_name = strdup(name);
    q->args = json_is_object(args) ? json_deep_copy(args) : json_object();
    json_t *empty = json_object();
    q->code = exposed_script(real, json_is_object(args) ? args : empty, &q->codelen);
    json_decref(empty);
  }
  if (q->code == NULL || (q->tool && (q->mcp_name == NULL || q->args == NULL))) {
    if (q->sess) q->sess->busy = 0;
    send_error(s, b, id, -32603, "out of memory");
    req_free(s, q);
    return;
  }
  if (q->w == NULL) q->w = least_loaded(s, 0);
  if (b) { q->b = b; b->refs++; }
  enqueue(s, q);
}

static void cancel_request (server *s, json_t *rid) {
  if (rid == NULL) return;
  for (req *q = s->reqs; q; q = q->next) {
    if (!json_equal(q->id, rid) || q->cancelled) continue;
    q->cancelled = 1;  /* no response; req_done frees it when the worker reports */
    post_worker(q->w, M_CANCEL, q->serial);
    log_msg(s, L_DEBUG, "request %llu cancelled: its run stops", (unsigned long long)q->serial);
    return;
  }
  for (req *q = s->waiting; q; q = q->next) {
    if (!json_equal(q->id, rid)) continue;
    if (q == s->waiting_tail) s->waiting_tail = q->prev;
    list_remove(&s->waiting, q);
    s->nwaiting--;
    if (q->sess) q->sess->busy = 0;
    req_free(s, q);
    return;
  }
  /* unknown ids (finished, never sent) are ignored, as the specification asks */
}

/* ---- approvals (protocol thread) --------------------------------------------------- */

/* M_PARK: the worker answered q's request (a paused or input_required result, or an
** error about a resume) and keeps its run, waiting for decisions, in s->parked. */
static void park_req (server *s, mail *m) {
  req *q = m->q;
  if (s->done || q->cancelled || q->parked) return;  /* cancelled: M_DONE follows */
  s->origin = q->origin;  /* over HTTP, the answer ends the request that came */
  respond_text(s, q->b, q->id, m->text, m->len);
  s->origin = NULL;
  if (q->origin) {  /* the resuming request brings its own */
    tp__mcp_http_release(q->origin);
    q->origin = NULL;
  }
  if (q->b) {
    batch *b = q->b;
    q->b = NULL;
    batch_unref(s, b);
  }
  list_remove(&s->reqs, q);
  s->nrunning--;
  q->w->load--;
  q->parked = 1;
  list_push(&s->parked, q);
  log_msg(s, L_DEBUG, "request %llu answered: run %s waits for decisions",
          (unsigned long long)q->serial, q->run_id);
  start_waiting(s);
  resume_input(s);
}

/* A resume_run for a run no request here holds, with --state: a request that restores it
** from the store on a worker (dur_load) and applies args there. 0 when run_id cannot be
** one (the caller refuses it), 1 when handled. */
static int restore_req (server *s, batch *b, json_t *id, const char *run_id, json_t *args,
                        int era26) {
  /* approvals' paused runs, and caller tools' (which need no policy) */
  if (run_id[0] == '\0' || strlen(run_id) >= TP__MCP_APPROVE_RUN_ID_MAX) return 0;
  if (strchr(run_id, ':') != NULL) return 0;  /* the store's other records ("tool-shape:") */
  req *q = calloc(1, sizeof *q);
  if (q == NULL || (q->restore = json_deep_copy(args)) == NULL) {
    free(q);
    send_error(s, b, id, -32603, "out of memory");
    return 1;
  }
  q->s = s;
  q->serial = ++s->serial;
  if ((q->origin = s->origin) != NULL) tp__mcp_http_hold(q->origin);
  const char *who, *scopes;  /* the caller: the run's record must name the same principal */
  if (q->origin && tp__mcp_http_principal(q->origin, &who, &scopes)) q->principal = strdup(who);
  q->id = json_deep_copy(id);
  q->budget = b ? BATCH_CALL_MAX : LINE_OUT_MAX;
  if ((q->modern = s->modern_req)) q->budget -= TP_MCP_ERA_STAMP_ROOM;
  q->era26 = era26;
  q->resumed = 1;
  snprintf(q->run_id, sizeof q->run_id, "%s", run_id);
  q->w = least_loaded(s, 0);
  if (b) { q->b = b; b->refs++; }
  log_msg(s, L_DEBUG, "request %llu: run %s is restored from the state store",
          (unsigned long long)q->serial, run_id);
  enqueue(s, q);
  return 1;
}

/* Hands decisions (args: resume_run's arguments, copied) to the parked run run_id, whose
** request now answers id; or refuses the call. */
static void resume_run_req (server *s, batch *b, json_t *id, const char *run_id, json_t *args,
                            int era26) {
  /* The caller, in every era: another principal's run is not found here, and the answer
  ** says nothing of it (the same as for an id no run has). */
  const char *who = NULL, *scopes;
  if (s->origin && !tp__mcp_http_principal(s->origin, &who, &scopes)) who = NULL;
  req *q = s->parked;
  while (q && (strcmp(q->run_id, run_id) != 0 || !same_principal(q->principal, who)))
    q = q->next;
  if (q == NULL) {
    char msg[500];
    for (req *r = s->reqs; r; r = r->next)
      if (r->resumed && strcmp(r->run_id, run_id) == 0 && same_principal(r->principal, who)) {
        snprintf(msg, sizeof msg, "run %s is not paused: it is running with the decisions it "
                 "was given; its result answers the call that resumed it", run_id);
        refuse_call(s, b, id, "run.not_paused", msg, NULL);
        return;
      }
    if (s->o.state && restore_req(s, b, id, run_id, args, era26)) return;
    snprintf(msg, sizeof msg, "there is no paused run \"%.60s\": it finished, it was ended "
             "after waiting longer than the server's --pause-ttl, or the id is wrong (copy "
             "run from the paused result)", run_id);
    refuse_call(s, b, id, "run.unknown", msg, NULL);
    return;
  }
  size_t n;
  char *text = tp_json_text(args, &n);
  mail *m = text ? msg_new(M_RESUME) : NULL;
  if (m == NULL) {
    free(text);
    send_error(s, b, id, -32603, "out of memory");
    return;
  }
  list_remove(&s->parked, q);
  q->parked = 0;
  q->resumed = 1;
  json_decref(q->id);
  q->id = json_deep_copy(id);
  q->b = b;
  if (b) b->refs++;
  q->budget = b ? BATCH_CALL_MAX : LINE_OUT_MAX;
  if ((q->modern = s->modern_req)) q->budget -= TP_MCP_ERA_STAMP_ROOM;
  q->era26 = era26;
  if ((q->origin = s->origin) != NULL) tp__mcp_http_hold(q->origin);  /* answers it */
  list_push(&s->reqs, q);
  s->nrunning++;
  q->w->load++;
  m->n = q->serial;
  m->text = text;
  m->len = n;
  post(&q->w->mb, m);
}

static void resume_call (server *s, batch *b, json_t *id, json_t *args) {
  json_t *run = json_object_get(args, "run");
  if (!json_is_string(run) || strlen(json_string_value(run)) != json_string_length(run)) {
    refuse_call(s, b, id, "tool.invalid_input", "arguments.run must be the run id of a "
                "paused result (a string), and arguments.decisions its decisions", NULL);
    return;
  }
  resume_run_req(s, b, id, json_string_value(run), args, 0);
}

/* A 2026-07-28 retry: params.requestState (sealed by paused_line) names the run and the
** bindings of its calls; params.inputResponses answers the inputRequests by key. */
static void resume_state (server *s, batch *b, json_t *id, json_t *params) {
  json_t *rs = json_object_get(params, "requestState");
  json_t *resp = json_object_get(params, "inputResponses");
  if (!json_is_string(rs)) {
    send_error(s, b, id, -32602, "Invalid params: requestState must be the string of the "
               "input_required result, sent back unchanged");
    return;
  }
  if (resp != NULL && !json_is_object(resp)) {
    send_error(s, b, id, -32602, "Invalid params: inputResponses must be an object with an "
               "answer for each key of the input_required result's inputRequests");
    return;
  }
  int code;
  char why[500];
  const char *who = "", *scopes = NULL;  /* the caller over HTTP with auth, else no one */
  if (s->origin && !tp__mcp_http_principal(s->origin, &who, &scopes)) who = "";
  json_t *st = tp__mcp_approve_open(json_string_value(rs), json_string_length(rs), who, &code, why,
                            sizeof why);
  if (st == NULL) {
    send_error(s, b, id, code, "%s", why);
    return;
  }
  const char *run = json_string_value(json_object_get(st, "run"));
  json_t *ds = json_array();
  size_t i;
  json_t *c;
  json_array_foreach(json_object_get(st, "calls"), i, c) {
    char key[40];
    json_int_t seq = json_integer_value(json_object_get(c, "seq"));
    snprintf(key, sizeof key, "approve-%lld", (long long)seq);
    json_t *r = json_object_get(resp, key);
    if (r == NULL) continue;
    const char *action = json_string_value(json_object_get(r, "action"));
    json_t *content = json_object_get(r, "content");
    const char *note = json_string_value(json_object_get(content, "note"));
    int yes = action && strcmp(action, "accept") == 0 &&
              json_is_true(json_object_get(content, "approve"));
    if (!yes && (action == NULL || strcmp(action, "accept") != 0))
      note = action && strcmp(action, "decline") == 0 ? "(declined to answer)"
                                                       : "(dismissed the question)";
    json_t *d = json_pack("{s:I, s:b, s:O}", "seq", seq, "approve", yes, "binding",
                          json_object_get(c, "binding"));
    if (d && note) json_object_set_new(d, "note", json_string(note));
    json_array_append_new(ds, d);
  }
  if (run == NULL || json_array_size(ds) == 0) {
    send_error(s, b, id, -32602, "Invalid params: inputResponses answers none of the "
               "inputRequests of this requestState: answer each of their keys "
               "(approve-<seq>) with the elicitation's result");
  }
  else {
    json_t *args = json_pack("{s:s, s:O}", "run", run, "decisions", ds);
    if (args) resume_run_req(s, b, id, run, args, 1);
    else send_error(s, b, id, -32603, "out of memory");
    json_decref(args);
  }
  json_decref(ds);
  json_decref(st);
}

/* A response from the client: the answer to an elicitation goes to the worker whose run
** asked (its id says which); other responses are ignored. */
static void client_response (server *s, json_t *msg, json_t *id) {
  const char *sid = json_string_value(id);
  size_t pl = strlen(TP__MCP_APPROVE_ELICIT_PREFIX);
  if (sid && strncmp(sid, TP__MCP_CALL_PREFIX, strlen(TP__MCP_CALL_PREFIX)) == 0)
    pl = strlen(TP__MCP_CALL_PREFIX);  /* a caller tool's answer: the same way */
  else if (sid == NULL || strncmp(sid, TP__MCP_APPROVE_ELICIT_PREFIX, pl) != 0) return;
  char *end;
  unsigned long k = strtoul(sid + pl, &end, 10);
  if (end == sid + pl || *end != '-' || k >= s->nworkers || !s->workers[k].ready) return;
  size_t n;
  char *text = tp_json_text(msg, &n);
  mail *m = text ? msg_new(M_ANSWER) : NULL;
  if (m == NULL) { free(text); return; }
  m->text = text;
  m->len = n;
  post(&s->workers[k].mb, m);
}

/* ---- plugin directories ------------------------------------------------------------- */

/* Tools are replaced only while no script runs, paused ones included (calls point at
** their tools): every worker drops and loads them again, then reports (M_READY). */
static void maybe_reload (server *s) {
  if (!s->reload_pending || s->nrunning > 0 || s->parked || s->done || s->reloading ||
      s->nready < s->nworkers)
    return;
  s->reload_pending = 0;
  s->reloading = s->nworkers;
  for (unsigned k = 0; k < s->nworkers; k++) post_worker(&s->workers[k], M_RELOAD, 0);
}

static void reload_cb (uv_timer_t *t) {
  server *s = t->data;
  s->reload_pending = 1;
  maybe_reload(s);
}

static void fs_event_cb (uv_fs_event_t *h, const char *file, int events, int status) {
  (void)file; (void)events; (void)status;
  server *s = h->data;
  uv_timer_start(&s->reload_timer, reload_cb, 150, 0);  /* an editor writes in bursts */
}

/* ---- messages from the workers ------------------------------------------------------- */

static void start_reading(server *s);

static void tools_reported (server *s, mail *m) {
  /* the worker's own JSON, as large as the plugins' schemas and descriptions make it */
  json_t *j = m->text ? json_loads(m->text, 0, NULL) : NULL;
  json_t *list = json_object_get(j, "list"), *names = json_object_get(j, "names");
  if (!json_is_object(list) || !json_is_object(names)) {
    log_msg(s, L_ERROR, "out of memory: the tool list was not updated");
    json_decref(j);
    return;
  }
  json_decref(s->tools);
  json_decref(s->tool_names);
  s->tools = json_incref(list);
  s->tool_names = json_incref(names);
  s->ntools = m->len;
  json_decref(j);
}

static void ready (server *s, mail *m) {
  /* fail 2: run_lua's description could not be made (logged by the worker): a server
  ** starting stops; one reloading serves the tools with a description that says so */
  if (m->fail == 1 || (m->fail == 2 && !s->reloading)) s->start_failed = m->fail;
  else m->w->ready = 1;
  if (m->w->index == 0 && m->text) tools_reported(s, m);
  if (s->reloading) {
    if (--s->reloading == 0) {
      log_msg(s, L_INFO, "plugin tools reloaded: %zu tools", s->ntools);
      if (s->initialized) notify(s, "notifications/tools/list_changed", NULL);
      json_t *notes = tp__mcp_era_listen_tools_changed(s->listen), *note;
      size_t k;
      json_array_foreach(notes, k, note) send_msg(s, NULL, json_incref(note));
      json_decref(notes);
      maybe_reload(s);
    }
    return;
  }
  if (++s->nready < s->nworkers || s->done) return;
  if (s->start_failed == 2) {
    fprintf(stderr, "tidepool mcp: not started: run_lua's description could not be made "
            "(`tidepool describe` with the same options shows why)\n");
    s->done = 1;
    return;
  }
  if (s->start_failed) {
    fprintf(stderr, "tidepool mcp: a worker could not start (out of memory)\n");
    s->done = 1;
    return;
  }
  if (!s->quiet && !s->http)
    fprintf(stderr, "tidepool mcp %s: serving on standard input/output (%zu tool%s, %u "
            "worker%s)\n", tp_version(), s->ntools, s->ntools == 1 ? "" : "s", s->nworkers,
            s->nworkers == 1 ? "" : "s");
  if (s->http) tp__mcp_http_serve(s->http, s->ntools, s->nworkers);
  else if (!s->sink) start_reading(s);
}

static void server_mail (uv_async_t *a) {
  server *s = a->data;
  for (mail *m = take_all(&s->mb), *next; m; m = next) {
    next = m->next;
    switch (m->kind) {
    case M_DONE: req_done(s, m->q); continue;  /* frees the request with its message */
    case M_LINE:
      if (s->done) break;
      s->origin = m->q ? m->q->origin : NULL;  /* the request is alive until its M_DONE */
      s->noting++;
      write_line(s, m->text, m->len);
      s->noting--;
      s->origin = NULL;
      break;
    case M_LOG: log_text(s, m->level, m->text); break;
    case M_READY: ready(s, m); break;
    case M_PARK: park_req(s, m); break;
    }
    msg_free(m);
  }
}

/* ---- messages ------------------------------------------------------------------------ */

static int level_of (const char *name) {
  for (int i = 0; i < (int)(sizeof levels / sizeof levels[0]); i++)
    if (strcmp(levels[i], name) == 0) return i;
  return -1;
}

/* A request of the 2026-07-28 era (mcp_era.h): no handshake, no protocol session; its
** _meta named its version and the client's capabilities. */
static void handle_modern (server *s, batch *b, json_t *id, const char *method, json_t *params) {
  if (b != NULL) {
    send_error(s, b, id, -32600, "Invalid Request: a " TP_MCP_MODERN_VERSION " request must "
               "not be part of a batch: send each message on a line of its own");
    return;
  }
  if (strcmp(method, "server/discover") == 0)
    send_result(s, b, id, tp__mcp_era_discover(s->o.name));
  else if (strcmp(method, "tools/list") == 0)
    send_result(s, b, id, tp__mcp_era_result(s->tools ? json_deep_copy(s->tools)
                                             : json_pack("{s:[]}", "tools"), 1));
  else if (strcmp(method, "tools/call") == 0) {
    s->modern_req = 1;
    if (params == NULL) send_error(s, b, id, -32602, "Invalid params: tools/call needs params");
    else tools_call(s, b, id, params);
    s->modern_req = 0;
  }
  else if (strcmp(method, "subscriptions/listen") == 0) {
    json_t *err = NULL, *ack = tp__mcp_era_listen_open(s->listen, id, params, &err);
    if (ack) send_msg(s, NULL, ack);  /* the stream stays open: no response until it ends */
    else if (err) send_msg(s, NULL, json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id", id,
                                              "error", err));
    else send_error(s, b, id, -32603, "out of memory");
  }
  else if (strcmp(method, "ping") == 0) send_result(s, b, id, tp__mcp_era_result(NULL, 0));
  else send_error(s, b, id, -32601, "Method not found: %.200s (in protocol version "
                  TP_MCP_MODERN_VERSION " this server answers server/discover, tools/list, "
                  "tools/call, subscriptions/listen and ping)", method);
}

static void handle_request (server *s, batch *b, json_t *id, const char *method, json_t *params) {
  if (params != NULL && !json_is_object(params)) {
    send_error(s, b, id, -32602, "Invalid params: %.100s takes an object", method);
    return;
  }
  tp__mcp_era_req era;
  json_t *era_error = NULL;
  int era_of = tp__mcp_era_of(method, params, &era, &era_error);
  if (era_of < 0) {
    if (era_error) send_msg(s, b, json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0",
                                                     "id", id, "error", era_error));
    else send_error(s, b, id, -32603, "out of memory");
    return;
  }
  if (era_of > 0) { handle_modern(s, b, id, method, params); return; }
  if (strcmp(method, "initialize") == 0) {
    if (b != NULL) {
      send_error(s, b, id, -32600, "Invalid Request: initialize must not be part of a batch");
      return;
    }
    json_t *v = json_object_get(params, "protocolVersion");
    const char *use = tp__mcp_era_handshake(json_string_value(v));
    char instructions[300];
    tp__mcp_era_instructions(instructions, sizeof instructions, s->o.name);
    s->initialized = 1;
    s->version = use;
    json_t *elicit = json_object_get(json_object_get(params, "capabilities"), "elicitation");
    s->client_elicit = !json_is_object(elicit) ? 0 : tp__mcp_era_elicit_mode(use) ? 2 : 1;
    json_t *ct = json_object_get(json_object_get(json_object_get(params, "capabilities"),
                                                 "experimental"), "tidepool/callerTools");
    s->client_callers = json_is_object(ct) ? 1 : 0;  /* caller tools (docs/caller-tools.md) */
    json_t *res = json_pack(
      "{s:s, s:{s:{s:b}, s:{}}, s:{s:s, s:s, s:s}, s:s}", "protocolVersion", use,
      "capabilities", "tools", "listChanged", 1, "logging",
      "serverInfo", "name", "tidepool", "title", "tidepool (code mode: sandboxed Lua)",
      "version", tp_version(),
      "instructions", instructions);
    if (res && s->client_callers)  /* said to a client that declared it, to no other */
      json_object_set_new(json_object_get(res, "capabilities"), "experimental",
        json_pack("{s:{s:i, s:[i], s:[s, s]}}", "tidepool/callerTools", "version", 1,
                  "versions", 1, "modes", "live", "paused"));
    send_result(s, b, id, res);
    size_t i;
    json_t *w;
    json_array_foreach(s->early, i, w) {
      int level = (int)json_integer_value(json_object_get(w, "level"));
      json_t *data = json_copy(json_object_get(w, "text"));
      if (level >= s->level && data)
        notify(s, "notifications/message", json_pack("{s:s, s:s, s:o}", "level",
               levels[level], "logger", "tidepool", "data", data));
      else json_decref(data);
    }
    json_decref(s->early);
    s->early = NULL;
  }
  else if (strcmp(method, "ping") == 0) send_result(s, b, id, NULL);
  else if (strcmp(method, "tools/list") == 0)
    send_result(s, b, id, s->tools ? json_deep_copy(s->tools) : json_pack("{s:[]}", "tools"));
  else if (strcmp(method, "tools/call") == 0) {
    if (params == NULL) send_error(s, b, id, -32602, "Invalid params: tools/call needs params");
    else tools_call(s, b, id, params);
  }
  else if (strcmp(method, "logging/setLevel") == 0) {
    const char *lv = json_string_value(json_object_get(params, "level"));
    int n = lv ? level_of(lv) : -1;
    if (n < 0) {
      send_error(s, b, id, -32602, "Invalid params: level must be one of debug, info, "
                 "notice, warning, error, critical, alert, emergency");
      return;
    }
    s->level = n;
    send_result(s, b, id, NULL);
  }
  else send_error(s, b, id, -32601, "Method not found: %.200s", method);
}

static void handle_notification (server *s, const char *method, json_t *params) {
  if (strcmp(method, "notifications/initialized") == 0) s->initialized = 1;
  else if (strcmp(method, "notifications/cancelled") == 0) {
    json_t *rid = json_is_object(params) ? json_object_get(params, "requestId") : NULL;
    if (tp__mcp_era_listen_cancel(s->listen, rid)) return;  /* a subscriptions/listen stream */
    cancel_request(s, rid);
  }
  /* other notifications (progress, roots/list_changed, ...) need nothing from us */
}

static void handle_message (server *s, batch *b, json_t *msg) {
  if (!json_is_object(msg)) {
    send_error(s, b, NULL, -32600, "Invalid Request: a message must be a JSON object");
    return;
  }
  json_t *id = json_object_get(msg, "id");
  json_t *jr = json_object_get(msg, "jsonrpc");
  json_t *method = json_object_get(msg, "method");
  json_t *params = json_object_get(msg, "params");
  if (id != NULL && !json_is_string(id) && !json_is_integer(id)) {
    send_error(s, b, NULL, -32600, "Invalid Request: id must be a string or an integer");
    return;
  }
  if (json_is_string(id) && json_string_length(id) > ID_MAX - 2) {  /* echoed in the answer */
    send_error(s, b, NULL, -32600, "Invalid Request: the id is %zu bytes long; an id may "
               "have at most %d", json_string_length(id), ID_MAX - 2);
    return;
  }
  if (!json_is_string(jr) || strcmp(json_string_value(jr), "2.0") != 0) {
    send_error(s, b, id, -32600, "Invalid Request: \"jsonrpc\" must be \"2.0\"");
    return;
  }
  if (method == NULL) {
    if (id != NULL && (json_object_get(msg, "result") || json_object_get(msg, "error"))) {
      client_response(s, msg, id);  /* to an elicitation; responses are not answered */
      return;
    }
    send_error(s, b, id, -32600, "Invalid Request: \"method\" is missing");
    return;
  }
  if (!json_is_string(method) || strlen(json_string_value(method)) != json_string_length(method)) {
    send_error(s, b, id, -32600, "Invalid Request: \"method\" must be a string without NUL");
    return;
  }
  if (id == NULL) {
    handle_notification(s, json_string_value(method), params);
    return;
  }
  handle_request(s, b, id, json_string_value(method), params);
}

static void batch_unref (server *s, batch *b) {
  if (--b->refs > 0) return;
  if (json_array_size(b->responses) > 0 && !s->done) send_msg(s, NULL, b->responses);
  else json_decref(b->responses);
  free(b);
}

static void handle_batch (server *s, json_t *msg) {
  size_t n = json_array_size(msg);
  if (n == 0) {
    send_error(s, NULL, NULL, -32600, "Invalid Request: an empty batch");
    return;
  }
  if (!tp__mcp_era_batches(s->version)) {
    if (s->version)
      send_error(s, NULL, NULL, -32600, "Invalid Request: JSON-RPC batches are not supported: "
                 "batching was removed from MCP in protocol version 2025-06-18, and this "
                 "connection uses %s. Send each message on a line of its own", s->version);
    else
      send_error(s, NULL, NULL, -32600, "Invalid Request: JSON-RPC batches are not supported: "
                 "batching was removed from MCP in protocol version 2025-06-18, and no version "
                 "was negotiated yet (initialize first). Send each message on a line of its own");
    return;
  }
  if (n > BATCH_MAX) {
    send_error(s, NULL, NULL, -32600, "Invalid Request: a batch holds at most %d messages; "
               "this one has %zu. Send fewer at once", BATCH_MAX, n);
    return;
  }
  batch *b = calloc(1, sizeof *b);
  if (b == NULL || (b->responses = json_array()) == NULL) {
    free(b);
    send_error(s, NULL, NULL, -32603, "out of memory");
    return;
  }
  b->refs = 1;
  b->bytes = 2;
  size_t k;
  json_t *m;
  json_array_foreach(msg, k, m) handle_message(s, b, m);
  batch_unref(s, b);
}

static void handle_line (server *s, char *line, size_t len) {
  while (len > 0 && (line[len - 1] == '\r' || line[len - 1] == ' ' || line[len - 1] == '\t'))
    len--;
  size_t i = 0;
  while (i < len && (line[i] == ' ' || line[i] == '\t')) i++;
  if (i == len) return;  /* blank lines are skipped */
  char why[300];
  json_t *msg = tp_json_parse(line + i, len - i, why, sizeof why);
  if (msg == NULL) {
    send_error(s, NULL, NULL, -32700, "Parse error: %.400s", why);
    return;
  }
  if (json_is_array(msg)) handle_batch(s, msg);
  else handle_message(s, NULL, msg);
  json_decref(msg);
}

static void shutdown_server(server *s);

/* ---- the HTTP transport's entry points (mcp_http.c) ------------------------------------ */

void tp__mcp_handle (server *s, void *origin, json_t *msg) {
  s->origin = origin;
  handle_message(s, NULL, msg);
  s->origin = NULL;
}

/* Cancels the request that came in origin, as notifications/cancelled does, without a
** response; one still waiting is dropped. */
void tp__mcp_cancel_origin (server *s, void *origin) {
  for (req *q = s->reqs; q; q = q->next)
    if (q->origin == origin && !q->cancelled) {
      q->cancelled = 1;
      post_worker(q->w, M_CANCEL, q->serial);
      return;
    }
  for (req *q = s->waiting; q; q = q->next)
    if (q->origin == origin) {
      if (q == s->waiting_tail) s->waiting_tail = q->prev;
      list_remove(&s->waiting, q);
      s->nwaiting--;
      if (q->sess) q->sess->busy = 0;
      req_free(s, q);
      return;
    }
}

void tp__mcp_stop (server *s) {
  shutdown_server(s);
}

/* ---- input ----------------------------------------------------------------------------- */

static void stop_reading (server *s) {
  if (!s->reading || s->in_file) return;  /* a file read in flight ends in fs_read_cb */
  s->reading = 0;
  if (!s->in_file) uv_read_stop((uv_stream_t *)&s->in);
}

static void start_reading(server *s);

/* Splits input into lines and handles them; keeps the rest when reading pauses. */
static void feed (server *s, const char *p, size_t n) {
  while (n > 0) {
    if (s->paused || s->done) {
      char *st = realloc(s->stash, s->stash_len + n);
      if (st == NULL) return;  /* out of memory: the input is lost */
      memcpy(st + s->stash_len, p, n);
      s->stash = st;
      s->stash_len += n;
      return;
    }
    const char *nl = memchr(p, '\n', n);
    size_t seg = nl ? (size_t)(nl - p) : n;
    if (!s->skipping) {
      if (s->len + seg > LINE_IN_MAX) {
        s->skipping = 1;
        free(s->line);
        s->line = NULL;
        s->len = s->cap = 0;
      }
      else if (seg > 0) {
        if (s->len + seg + 1 > s->cap) {
          size_t ncap = s->cap ? s->cap : 4096;
          while (ncap < s->len + seg + 1) ncap *= 2;
          char *nb = realloc(s->line, ncap);
          if (nb == NULL) { s->skipping = 1; s->len = 0; }
          else { s->line = nb; s->cap = ncap; }
        }
        if (!s->skipping) { memcpy(s->line + s->len, p, seg); s->len += seg; }
      }
    }
    p += seg;
    n -= seg;
    if (nl == NULL) break;
    p++;
    n--;
    if (s->skipping) {
      s->skipping = 0;
      send_error(s, NULL, NULL, -32600, "Invalid Request: the line is longer than the %u MiB "
                 "a message may have; it was skipped", LINE_IN_MAX >> 20);
    }
    else {
      size_t len = s->len;
      s->len = 0;
      handle_line(s, s->line, len);
    }
    if (s->len == 0 && s->cap > (1u << 20)) {  /* give a huge line's buffer back */
      free(s->line);
      s->line = NULL;
      s->cap = 0;
    }
    if (!s->paused && s->nwaiting > WAITING_MAX) {
      s->paused = 1;
      stop_reading(s);
    }
  }
}

static void shutdown_server(server *s);

/* Standard input closed: what was read is still answered, as the SDKs' stdio servers do.
** The server stops once every request in flight, waiting or deferred has its response,
** or when the drain's bound passes (the run's --timeout and 2 s more; 30 s when runs have
** no time limit): then each request still running is answered "cancelled". */
#define DRAIN_SLACK_MS 2000
#define DRAIN_UNBOUNDED_MS 30000

static int drained (const server *s) {
  return s->reqs == NULL && s->waiting == NULL && s->deferred == NULL;
}

/* Stops the server when input has ended and nothing is left to answer. */
static void stop_if_drained (server *s) {
  if (s->eof && !s->done && !s->http && drained(s)) shutdown_server(s);
}

static void drain_cb (uv_timer_t *t) {
  server *s = t->data;
  char msg[300];
  snprintf(msg, sizeof msg, "the call was cancelled: standard input closed, and it did not "
           "finish within the %.0f s that followed", (double)uv_timer_get_repeat(t) / 1000.0);
  for (req *q = s->reqs; q; q = q->next) {
    if (q->cancelled) continue;
    size_t n;
    char *line = tp__mcp_view_refusal(q->id, "cancelled", msg, NULL, q->budget, &n);
    if (line) respond_text(s, q->b, q->id, line, n);
    free(line);
    q->cancelled = 1;
  }
  shutdown_server(s);
}

static void on_eof (server *s) {
  s->eof = 1;
  if (s->skipping) {
    s->skipping = 0;
    send_error(s, NULL, NULL, -32600, "Invalid Request: the line is longer than the %u MiB "
               "a message may have; it was skipped", LINE_IN_MAX >> 20);
  }
  else if (s->len > 0) {  /* a last line without '\n' */
    size_t len = s->len;
    s->len = 0;
    handle_line(s, s->line, len);
  }
  if (drained(s) || s->done) { shutdown_server(s); return; }
  uint64_t bound = s->o.lim.wall_us ? s->o.lim.wall_us / 1000 + DRAIN_SLACK_MS
                                       : DRAIN_UNBOUNDED_MS;
  if (!s->drain_on && uv_timer_init(s->loop, &s->drain) == 0) {
    s->drain_on = 1;
    s->drain.data = s;
    uv_timer_start(&s->drain, drain_cb, bound, bound);  /* repeat: the bound, for its text */
  }
  else if (!s->drain_on) shutdown_server(s);
}

static void alloc_cb (uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  (void)suggested;
  server *s = h->data;
  buf->base = s->fsbuf;
  buf->len = sizeof s->fsbuf;
}

static void read_cb (uv_stream_t *st, ssize_t n, const uv_buf_t *buf) {
  server *s = st->data;
  if (n > 0) feed(s, buf->base, (size_t)n);
  else if (n < 0) {
    if (n != UV_EOF) fprintf(stderr, "tidepool mcp: reading standard input: %s\n", uv_strerror((int)n));
    stop_reading(s);
    on_eof(s);
  }
}

static void fs_read_cb (uv_fs_t *r) {
  server *s = r->data;
  ssize_t n = r->result;
  uv_fs_req_cleanup(r);
  s->reading = 0;
  if (n > 0) {
    feed(s, s->fsbuf, (size_t)n);
    if (!s->paused && !s->done) start_reading(s);
  }
  else {
    if (n < 0) fprintf(stderr, "tidepool mcp: reading standard input: %s\n", uv_strerror((int)n));
    on_eof(s);
  }
}

static void start_reading (server *s) {
  if (s->reading || s->done || s->eof) return;
  s->reading = 1;
  if (s->in_file) {
    uv_buf_t buf = uv_buf_init(s->fsbuf, sizeof s->fsbuf);
    s->fsreq.data = s;
    if (uv_fs_read(s->loop, &s->fsreq, 0, &buf, 1, -1, fs_read_cb) != 0) {
      s->reading = 0;
      on_eof(s);
    }
  }
  else if (uv_read_start((uv_stream_t *)&s->in, alloc_cb, read_cb) != 0) {
    s->reading = 0;
    on_eof(s);
  }
}

static void resume_input (server *s) {
  if (!s->paused || s->nwaiting > WAITING_MAX / 2 || s->done) return;
  s->paused = 0;
  char *st = s->stash;
  size_t n = s->stash_len;
  s->stash = NULL;
  s->stash_len = 0;
  if (st) feed(s, st, n);
  free(st);
  if (!s->paused) start_reading(s);
}

static int open_input (server *s) {
  uv_handle_type t = uv_guess_handle(0);
  int rc = -1;
  if (t == UV_NAMED_PIPE || t == UV_TCP) {
    rc = uv_pipe_init(s->loop, &s->in.pipe, 0);
    if (rc == 0) {
      s->in_open = 1;
      rc = uv_pipe_open(&s->in.pipe, 0);
    }
  }
  else if (t == UV_TTY) {
    rc = uv_tty_init(s->loop, &s->in.tty, 0, 1);
    if (rc == 0) s->in_open = 1;
  }
  if (rc != 0) s->in_file = 1;  /* a file, /dev/null, or something libuv cannot poll */
  s->in.pipe.data = s;
  return 0;
}

/* ---- life ------------------------------------------------------------------------------ */

/* Stops serving: no more input; every run is cancelled without a response (the workers
** do it on their threads, M_STOP); waiting requests are dropped. */
static void shutdown_server (server *s) {
  if (s->done) return;
  s->done = 1;
  stop_reading(s);
  while (s->waiting) {
    req *q = s->waiting;
    list_remove(&s->waiting, q);
    req_free(s, q);
  }
  s->waiting_tail = NULL;
  s->nwaiting = 0;
  while (s->deferred) defer_flush(s, s->deferred);
}

static int server_init (server *s) {
  s->loop = &s->loop_storage;
  s->audit_fd = -1;
  if (uv_loop_init(s->loop) != 0) return -1;
  s->level = L_INFO;
  if (mailbox_init(&s->mb, s->loop, server_mail, s) != 0) return -1;
  if ((s->listen = tp__mcp_era_listen_new()) == NULL) return -1;
  if (s->kv == NULL) s->kv = tp_store_create();  /* else --state's, opened already */
  s->workers = calloc(s->o.workers, sizeof *s->workers);
  if (s->kv == NULL || s->workers == NULL) return -1;
  s->nworkers = s->o.workers;
  for (unsigned k = 0; k < s->nworkers; k++) {
    s->workers[k].s = s;
    s->workers[k].index = k;
  }
  return 0;
}

/* Stops the workers (M_STOP, then join) and frees what the protocol thread holds. */
static void server_close (server *s) {
  shutdown_server(s);
  while (s->nready < s->nstarted) uv_run(s->loop, UV_RUN_ONCE);  /* every mailbox is open */
  for (unsigned k = 0; k < s->nworkers; k++) {
    worker *w = &s->workers[k];
    if (w->threaded && w->thread_started) {
      if (w->ready) post_worker(w, M_STOP, 0);
      pthread_join(w->thread, NULL);
    }
    else if (!w->threaded) worker_close(w);
  }
  /* the workers are gone: what they sent and every request are ours */
  for (mail *m = take_all(&s->mb), *next; m; m = next) {
    next = m->next;
    msg_free(m);
  }
  while (s->reqs) {
    req *q = s->reqs;
    list_remove(&s->reqs, q);
    req_free(s, q);
  }
  while (s->parked) {
    req *q = s->parked;
    list_remove(&s->parked, q);
    req_free(s, q);
  }
  while (s->sessions) session_drop(s, s->sessions, NULL);
  for (size_t i = 0; i < s->nwatch; i++) uv_close((uv_handle_t *)&s->watch[i], NULL);
  if (s->nwatch || s->watch) {
    uv_close((uv_handle_t *)&s->reload_timer, NULL);
    uv_close((uv_handle_t *)&s->sweep, NULL);
  }
  if (s->in_open) uv_close((uv_handle_t *)&s->in, NULL);
  if (s->drain_on) uv_close((uv_handle_t *)&s->drain, NULL);
  if (s->in_file && s->reading) uv_cancel((uv_req_t *)&s->fsreq);
  if (s->mb.inited) uv_close((uv_handle_t *)&s->mb.async, NULL);
  tp__mcp_http_free(s->http);  /* after every request: they hold its connections */
  s->http = NULL;
  uv_run(s->loop, UV_RUN_DEFAULT);
  uv_loop_close(s->loop);
  if (s->mb.inited) pthread_mutex_destroy(&s->mb.mu);
  tp_store_destroy(s->kv);
  free(s->owner);
  json_decref(s->tools);
  json_decref(s->tool_names);
  json_decref(s->early);
  tp__mcp_era_listen_free(s->listen);
  free(s->workers);
  free(s->watch);
  free(s->line);
  free(s->stash);
  free(s->builtin_dir);
  for (size_t k = 0; k < DROPPED_MAX; k++) {
    free(s->dropped_id[k]);
    free(s->dropped_why[k]);
    free(s->dropped_who[k]);
  }
}

static unsigned default_workers (void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  if (n < 1) n = 1;
  if (n > WORKERS_MAX) n = WORKERS_MAX;
  return (unsigned)n;
}

/* This server's name as the holder of sessions in a shared store: --advertise, else the
** URL of --http (a wildcard address as this host's name), else "pid N on HOST". */
static char *owner_name (const options *o) {
  char host[256] = "localhost", buf[600];
  gethostname(host, sizeof host - 1);
  host[sizeof host - 1] = '\0';
  const char *l = o->http.listen;
  if (o->advertise) snprintf(buf, sizeof buf, "%s", o->advertise);
  else if (l && strchr(l, ':') == NULL) snprintf(buf, sizeof buf, "http://127.0.0.1:%s/mcp", l);
  else if (l) {
    const char *colon = strrchr(l, ':');
    int n = (int)(colon - l);
    int any = (n == 7 && strncmp(l, "0.0.0.0", 7) == 0) || (n == 4 && strncmp(l, "[::]", 4) == 0);
    snprintf(buf, sizeof buf, "http://%.*s%s/mcp", any ? (int)strlen(host) : n, any ? host : l,
             colon);
  }
  else snprintf(buf, sizeof buf, "pid %ld on %s", (long)getpid(), host);
  return strdup(buf);
}

static void options_free (options *o) {
  for (size_t i = 0; o->config_owned && o->config_owned[i]; i++) free(o->config_owned[i]);
  free(o->config_owned);
  free(o->dirs);
  free(o->limit_opts);
  free(o->config);
  free(o->config_dir);
}

/* Checks the --config file and takes its limits, tools and workspace under the options
** (which win: a limit option over the file's, --tools directories after the file's, and
** --workspace and --workspace-max over its workspace). 0, or -1 with every problem on
** stderr. */
static int apply_config (options *o) {
  tp_engine *e = tp_engine_create();
  if (e == NULL) { fprintf(stderr, "tidepool mcp: out of memory\n"); return -1; }
  if (tp_engine_configure_dir(e, o->config, o->config_len, o->config_dir) != TP_OK) {
    tp__options_config_problems(stderr, "tidepool: ", o->config_path, tp_engine_error(e));
    tp_engine_destroy(e);
    return -1;
  }
  if (tp_engine_config_warnings(e))  /* what this machine lacks: tidepool config check */
    tp__options_config_problems(stderr, "tidepool: warning: ", o->config_path,
                            tp_engine_config_warnings(e));
  mcp_limits_init(&o->lim);
  tp_engine_config_limits(e, &o->lim);
  for (size_t k = 0; k < o->nlimit_opts; k += 2)
    tp_limits_set(&o->lim, o->limit_opts[k], o->limit_opts[k + 1], NULL, 0);  /* checked */
  size_t nfile = 0;
  while (tp_engine_config_tools(e, nfile)) nfile++;
  uint64_t max;
  const char *ws = tp_engine_config_workspace(e, &max);
  const char **dirs = calloc(nfile + o->ndirs + 1, sizeof *dirs);
  o->config_owned = calloc(nfile + 3, sizeof *o->config_owned);
  int oom = dirs == NULL || o->config_owned == NULL;
  for (size_t k = 0; !oom && k < nfile; k++)
    oom = (dirs[k] = o->config_owned[k] = strdup(tp_engine_config_tools(e, k))) == NULL;
  if (!oom && ws && o->workspace == NULL) {
    oom = (o->workspace = o->config_owned[nfile] = strdup(ws)) == NULL;
    if (!o->workspace_max_set && max != UINT64_MAX) {
      o->workspace_max = max;
      o->workspace_max_set = 1;
    }
  }
  const char *st = tp_engine_config_state(e);
  for (size_t k = nfile; !oom && st && o->state == NULL; k++)
    if (o->config_owned[k] == NULL) oom = (o->state = o->config_owned[k] = strdup(st)) == NULL;
  tp_engine_destroy(e);
  if (oom) {
    free(dirs);
    fprintf(stderr, "tidepool mcp: out of memory\n");
    return -1;
  }
  /* Each worker's engine runs its own copy of every upstream server: a server that keeps
  ** state in memory (server-memory) would show each worker a different one. So a config
  ** with servers runs one worker unless --workers says otherwise. */
  json_t *cfg = tp_json_parse(o->config, o->config_len, NULL, 0);
  const char *name;
  json_t *srv;
  int servers = 0;
  json_object_foreach(json_object_get(cfg, "mcpServers"), name, srv)
    servers += !json_is_true(json_object_get(srv, "disabled"));
  json_decref(cfg);
  if (servers && !o->workers_set) o->workers = 1;
  for (size_t k = 0; k < o->ndirs; k++) dirs[nfile + k] = o->dirs[k];
  free(o->dirs);
  o->dirs = dirs;
  o->ndirs += nfile;
  return 0;
}

int tp__mcp_main (int argc, char **argv) {
  static server srv;  /* large (its input buffer); one per process */
  server *s = &srv;
  options *o = &s->o;
  mcp_limits_init(&o->lim);
  o->builtin = 1;
  o->name = "run_lua";
  o->session_idle_us = 600u * 1000000u;
  o->max_sessions = 16;
  o->workers = default_workers();
  o->pause_ttl_us = TP__MCP_APPROVE_TTL_DEFAULT_US;
  o->lease_us = LEASE_DEFAULT_US;
  o->dirs = calloc((size_t)argc + 1, sizeof *o->dirs);
  o->limit_opts = calloc((size_t)argc * 2 + 2, sizeof *o->limit_opts);
  if (o->dirs == NULL || o->limit_opts == NULL) return 1;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) { usage(stdout); return 0; }
    if (strcmp(a, "--no-builtin-tools") == 0) { o->builtin = 0; continue; }
    if (strcmp(a, "--expose-tools") == 0) { o->expose = 1; continue; }
    if (strcmp(a, "--test-tools") == 0) { o->test_tools = 1; continue; }
    if (a[0] != '-') return tp__options_usage_error("tidepool mcp takes no file ('%s')", a);
    char name[64];
    const char *name_end = tp__options_option_name(a, name, sizeof name);
    if (name_end == NULL) return tp__options_usage_error("unknown option '%s'", a);
    if (tp__mcp_http_is_option(name)) {  /* --http and its limits (mcp_http.c) */
      const char *hv = *name_end == '=' ? name_end + 1 : i + 1 < argc ? argv[++i] : NULL;
      char hwhy[256];
      if (hv == NULL) return tp__options_usage_error("option '%s' needs a value", a);
      if (tp__mcp_http_option(&o->http, name, hv, hwhy, sizeof hwhy) != 0)
        return tp__options_usage_error("%s", hwhy);
      continue;
    }
    static const char *const with_value[] = { "--tools", "--workspace", "--name",
      "--session-idle", "--max-sessions", "--workers", "--workspace-max", "--describe",
      "--audit", "--config", "--pause-ttl", "--secret-file", "--state", "--advertise",
      "--lease" };
    const tp_limit_info *li = tp_limit_find(name);
    int known = li != NULL && li->mcp != NULL && strcmp(li->mcp, name) == 0;
    for (size_t k = 0; k < sizeof with_value / sizeof with_value[0]; k++)
      known |= strcmp(name, with_value[k]) == 0;
    if (!known) return tp__options_usage_error("unknown option '%s'", a);
    const char *val = *name_end == '=' ? name_end + 1 : i + 1 < argc ? argv[++i] : NULL;
    if (val == NULL) return tp__options_usage_error("option '%s' needs a value", a);
    char why[256];
    int lo = tp__options_limit_option(name, val, &o->lim, 1, why, sizeof why);
    if (lo < 0) return tp__options_usage_error("%s", why);
    if (lo > 0) {
      o->limit_opts[o->nlimit_opts++] = li->field;
      o->limit_opts[o->nlimit_opts++] = val;
      continue;
    }
    if (strcmp(name, "--tools") == 0) {  /* missing: a warning, as in tidepool run */
      struct stat st;
      if (stat(val, &st) != 0 || !S_ISDIR(st.st_mode))
        fprintf(stderr, "tidepool: warning: --tools: '%s' is not a directory: no tools from "
                "it\n", val);
      else o->dirs[o->ndirs++] = val;
    }
    else if (strcmp(name, "--workspace") == 0) {
      struct stat st;
      if (stat(val, &st) != 0 || !S_ISDIR(st.st_mode))
        return tp__options_usage_error("--workspace: '%s' is not a directory", val);
      o->workspace = val;
    }
    else if (strcmp(name, "--audit") == 0) o->audit = val;
    else if (strcmp(name, "--secret-file") == 0) o->secret_file = val;
    else if (strcmp(name, "--pause-ttl") == 0) {
      if (tp__mcp_approve_parse_ttl(val, &o->pause_ttl_us, why, sizeof why) != 0)
        return tp__options_usage_error("%s", why);
    }
    else if (strcmp(name, "--state") == 0) o->state = val;
    else if (strcmp(name, "--lease") == 0) {
      if (tp_parse_value(TP_UNIT_DURATION, val, 3600ull * 1000000u, &o->lease_us, NULL, why,
                         sizeof why) != TP_OK || o->lease_us < 300000u)
        return tp__options_usage_error("--lease: bad duration '%s' (300ms to 1h, e.g. 15s)", val);
    }
    else if (strcmp(name, "--advertise") == 0) o->advertise = val;
    else if (strcmp(name, "--config") == 0) {
      free(o->config);
      free(o->config_dir);
      if ((o->config = tp__options_read_config(val, &o->config_len)) == NULL) return TP_EXIT_USAGE;
      if ((o->config_dir = tp__options_config_dir(val)) == NULL) return TP_EXIT_FAILED;
      o->config_path = val;
    }
    else if (strcmp(name, "--describe") == 0) {
      if (strcmp(val, "auto") == 0) o->describe = 0;
      else if (strcmp(val, "full") == 0) o->describe = 1;
      else if (strcmp(val, "compact") == 0) o->describe = 2;
      else return tp__options_usage_error("--describe '%s': use auto, full or compact", val);
    }
    else if (strcmp(name, "--workspace-max") == 0) {
      if (tp_parse_value(TP_UNIT_BYTES, val, UINT64_MAX, &o->workspace_max, NULL, why,
                         sizeof why) != TP_OK)
        return tp__options_usage_error("--workspace-max: %s", why);
      o->workspace_max_set = 1;
    }
    else if (strcmp(name, "--name") == 0) {
      size_t n = strlen(val);
      if (n == 0 || n > 64 || strspn(val, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                     "0123456789_-.") != n)
        return tp__options_usage_error("--name: '%s' is not a tool name (letters, digits, _ - .)", val);
      o->name = val;
    }
    else if (strcmp(name, "--session-idle") == 0) {
      if (tp_parse_value(TP_UNIT_DURATION, val, UINT64_MAX, &o->session_idle_us, NULL, why,
                         sizeof why) != TP_OK)
        return tp__options_usage_error("--session-idle: %s", why);
    }
    else if (strcmp(name, "--max-sessions") == 0) {
      uint64_t n;
      if (tp_parse_value(TP_UNIT_COUNT, val, 100000, &n, NULL, NULL, 0) != TP_OK)
        return tp__options_usage_error("--max-sessions: bad count '%s' (0 to 100000)", val);
      o->max_sessions = (unsigned)n;
    }
    else if (strcmp(name, "--workers") == 0) {
      uint64_t n;
      if (tp_parse_value(TP_UNIT_COUNT, val, WORKERS_MAX, &n, NULL, NULL, 0) != TP_OK || n < 1)
        return tp__options_usage_error("--workers: bad count '%s' (1 to 64)", val);
      o->workers = (unsigned)n;
      o->workers_set = 1;
    }
    else return tp__options_usage_error("unknown option '%s'", a);
  }
  if (o->config && apply_config(o) != 0) return TP_EXIT_USAGE;
  {
    char why[300];
    if (tp__mcp_http_check(&o->http, o->config, o->config_len, why, sizeof why) != 0)
      return tp__options_usage_error("%s", why);
  }
  o->asks = tp__mcp_approve_config_asks(o->config, o->config_len);
  tp__mcp_approve_policy_hash(o->config, o->config_len, o->policy_hash);
  {
    char why[300];
    if (tp__mcp_approve_secret_init(o->secret_file, why, sizeof why) != 0)
      return tp__options_usage_error("%s", why);
  }
  if (o->lim.memory && o->lim.memory < 16 * 1024)
    return tp__options_usage_error("--memory is too small (at least 16K)%s", "");

  /* The protocol keeps the real standard output; fd 1 becomes standard error. */
  signal(SIGPIPE, SIG_IGN);
  fflush(stdout);
  s->out = fcntl(1, F_DUPFD_CLOEXEC, 3);
  if (s->out < 0 || dup2(2, 1) < 0) {
    fprintf(stderr, "tidepool mcp: cannot set up standard output: %s\n", strerror(errno));
    return 1;
  }
  if (o->state) {  /* one store for every worker's engine */
    char why[512];
    if ((s->kv = tp_store_open(o->state, why, sizeof why)) == NULL) {
      fprintf(stderr, "tidepool: --state: %s\n", why);
      options_free(o);
      close(s->out);
      return TP_EXIT_USAGE;  /* as in tidepool run */
    }
    s->owner = owner_name(o);
  }
  if (server_init(s) != 0) {
    fprintf(stderr, "tidepool mcp: out of memory\n");
    return 1;
  }
  if (tp__mcp_http_wanted(&o->http, o->config, o->config_len) &&
      (s->http = tp__mcp_http_new(s, s->loop, &o->http, o->config, o->config_len,
                                  o->config_dir)) == NULL) {
    server_close(s);
    options_free(o);
    close(s->out);
    return 1;
  }
  if (o->audit) {
    s->audit_fd = open(o->audit, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (s->audit_fd < 0) {
      fprintf(stderr, "tidepool: --audit: cannot open %s: %s\n", o->audit, strerror(errno));
      server_close(s);
      options_free(o);
      close(s->out);
      return TP_EXIT_USAGE;
    }
  }
  if (o->builtin) {
    char buf[4200];
    s->builtin_dir = strdup(tp__options_builtin_tools_dir(buf, sizeof buf));
  }
  s->watch = calloc(o->ndirs + 1, sizeof *s->watch);
  for (size_t i = 0; s->watch && i < o->ndirs; i++) {
    uv_fs_event_init(s->loop, &s->watch[i]);
    s->watch[i].data = s;
    if (uv_fs_event_start(&s->watch[i], fs_event_cb, o->dirs[i], 0) != 0)
      log_msg(s, L_WARNING, "cannot watch %s: changes will not reload its tools", o->dirs[i]);
    s->nwatch++;
  }
  uv_timer_init(s->loop, &s->reload_timer);
  s->reload_timer.data = s;
  uv_timer_init(s->loop, &s->sweep);
  s->sweep.data = s;
  uint64_t every = s->o.session_idle_us / 4000;  /* ms */
  if (every < 10) every = 10;
  if (every > 1000) every = 1000;
  if (s->o.session_idle_us) uv_timer_start(&s->sweep, sweep_cb, every, every);
  if (!s->http) open_input(s);
  /* the workers load the plugin directories; reading starts once all have (ready) */
  for (unsigned k = 0; k < s->nworkers; k++) {
    worker *w = &s->workers[k];
    w->threaded = 1;
    if (pthread_create(&w->thread, NULL, worker_main, w) != 0) {
      fprintf(stderr, "tidepool mcp: cannot start a worker thread: %s\n", strerror(errno));
      s->done = 1;
      break;
    }
    w->thread_started = 1;
    s->nstarted++;
  }
  while (!s->done) {
    if (uv_run(s->loop, UV_RUN_ONCE) == 0 && !s->done) shutdown_server(s);
  }
  int status = s->start_failed ? 1 : 0;
  server_close(s);
  if (s->audit_fd >= 0) close(s->audit_fd);
  options_free(o);
  close(s->out);
  return status;
}

/* ---- fuzzing ------------------------------------------------------------------------------
** A server in the calling thread: one worker without a thread of its own (its engine's
** loop is run here), the test tools, no plugin directories, small limits; output goes to
** a sink. Each line is handled with everything it starts, until nothing is left. */

tp__mcp_fuzz *tp__mcp_fuzz_new (void (*sink)(void *ud, const char *line, size_t len), void *ud) {
  server *s = calloc(1, sizeof *s);
  if (s == NULL) return NULL;
  options *o = &s->o;
  tp_limits_init(&o->lim);
  o->lim.memory = 4u << 20;
  o->lim.instructions = 200000;
  o->lim.wall_us = 200000;
  o->lim.cpu_us = 200000;
  o->name = "run_lua";
  o->max_sessions = 4;
  o->workers = 1;
  o->test_tools = 1;
  o->expose = 1;
  o->pause_ttl_us = TP__MCP_APPROVE_TTL_DEFAULT_US;
  o->lease_us = LEASE_DEFAULT_US;
  s->sink = sink;
  s->sink_ud = ud;
  s->quiet = 1;
  s->out = -1;
  if (server_init(s) != 0 || worker_open(&s->workers[0]) != 0) {
    s->nworkers = 0;
    server_close(s);
    free(s);
    return NULL;
  }
  worker_load(&s->workers[0]);
  uv_run(s->loop, UV_RUN_NOWAIT);
  return (tp__mcp_fuzz *)s;
}

void tp__mcp_fuzz_line (tp__mcp_fuzz *f, const char *line, size_t len) {
  server *s = (server *)f;
  char *copy = malloc(len + 1);
  if (copy == NULL) return;
  memcpy(copy, line, len);
  copy[len] = '\0';
  handle_line(s, copy, len);
  free(copy);
  worker *w = &s->workers[0];
  while (s->nrunning > 0 || s->nwaiting > 0 || !mailbox_empty(&w->mb) ||
         !mailbox_empty(&s->mb)) {
    uv_run(w->loop, s->nrunning > 0 ? UV_RUN_ONCE : UV_RUN_NOWAIT);
    uv_run(s->loop, UV_RUN_NOWAIT);
  }
}

void tp__mcp_fuzz_free (tp__mcp_fuzz *f) {
  server *s = (server *)f;
  if (s == NULL) return;
  server_close(s);
  free(s);
}
