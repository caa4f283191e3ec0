/*
** main.c: `tidepool mcp`: its options, its config, then one server (server.c) and one
** transport (stdio.c, or http.c with --http), joined by transport.h's tables.
*/
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "tidepool.h"
#include "options.h"
#include "mcp.h"
#include "approve.h"
#include "transport.h"
#include "http.h"
#include "server.h"
#include "worker.h"

/* A worker's life, for the server (which never calls worker.c by name). */
static const tp__mcp_worker_ops worker_ops = {
  tp__mcp_worker_open, tp__mcp_worker_load, tp__mcp_worker_close, tp__mcp_worker_main
};

#define WORKERS_MAX   64
#define LEASE_DEFAULT_US (15ull * 1000000u)

typedef tp__mcp_options options;

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
  "  --otlp URL           send a span per run (its calls, approval waits and what they\n"
  "                       cause as children) over OTLP/HTTP JSON to URL; a run's parent\n"
  "                       is params._meta.traceparent (default: the config's telemetry)\n"
  "  --trace-file FILE    append the same spans to FILE as JSON lines\n"
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


static unsigned default_workers (void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  if (n < 1) n = 1;
  if (n > WORKERS_MAX) n = WORKERS_MAX;
  return (unsigned)n;
}

/* This server's name as the holder of sessions in a shared store: --advertise, else the
** URL of --http (a wildcard address as this host's name), else "pid N on HOST". */
static char *owner_name (const options *o, const char *listen) {
  char host[256] = "localhost", buf[600];
  gethostname(host, sizeof host - 1);
  host[sizeof host - 1] = '\0';
  const char *l = listen;
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

/* Frees what o owns; again does nothing (tp__mcp_main frees them on every return). */
static void options_free (options *o) {
  for (size_t i = 0; o->config_owned && o->config_owned[i]; i++) free(o->config_owned[i]);
  free(o->config_owned);
  free(o->dirs);
  free(o->limit_opts);
  free(o->config);
  free(o->config_dir);
  o->config_owned = NULL;
  o->dirs = NULL;
  o->limit_opts = NULL;
  o->config = NULL;
  o->config_dir = NULL;
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

static int mcp_main (options *o, int argc, char **argv);

int tp__mcp_main (int argc, char **argv) {
  options opts = { 0 };
  int rc = mcp_main(&opts, argc, argv);
  options_free(&opts);  /* a usage error returns before the server takes them */
  return rc;
}

static int mcp_main (options *o, int argc, char **argv) {
  tp__mcp_http_opts http = { 0 };
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
    if (strcmp(a, "--ui") == 0) { http.ui = o->ui = 1; continue; }  /* http.c's help */
    if (a[0] != '-') return tp__options_usage_error("tidepool mcp takes no file ('%s')", a);
    char name[64];
    const char *name_end = tp__options_option_name(a, name, sizeof name);
    if (name_end == NULL) return tp__options_usage_error("unknown option '%s'", a);
    if (tp__mcp_http_is_option(name)) {  /* --http and its limits (mcp_http.c) */
      const char *hv = *name_end == '=' ? name_end + 1 : i + 1 < argc ? argv[++i] : NULL;
      char hwhy[256];
      if (hv == NULL) return tp__options_usage_error("option '%s' needs a value", a);
      if (tp__mcp_http_option(&http, name, hv, hwhy, sizeof hwhy) != 0)
        return tp__options_usage_error("%s", hwhy);
      continue;
    }
    static const char *const with_value[] = { "--tools", "--workspace", "--name",
      "--session-idle", "--max-sessions", "--workers", "--workspace-max", "--describe",
      "--audit", "--config", "--pause-ttl", "--secret-file", "--state", "--advertise",
      "--lease", "--otlp", "--trace-file" };
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
    else if (strcmp(name, "--otlp") == 0) {
      if (strncmp(val, "http://", 7) != 0 && strncmp(val, "https://", 8) != 0)
        return tp__options_usage_error("--otlp: '%s' is not an http(s) URL (e.g. "
                                       "http://127.0.0.1:4318)", val);
      o->otlp = val;
    }
    else if (strcmp(name, "--trace-file") == 0) o->trace_file = val;
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
        return tp__options_usage_error("--name: '%s' is not a tool name (letters, digits, _ - .)",
                                       val);
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
    if (tp__mcp_http_check(&http, o->config, o->config_len, why, sizeof why) != 0)
      return tp__options_usage_error("%s", why);
    if (o->ui && !tp__mcp_http_wanted(&http, o->config, o->config_len))
      return tp__options_usage_error("%s", "--ui serves the operator page over HTTP: give "
                                     "--http ADDR:PORT too (the page is at /ui)");
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

  o->http_listen = http.listen;

  /* The protocol keeps the real standard output; fd 1 becomes standard error. */
  signal(SIGPIPE, SIG_IGN);
  fflush(stdout);
  int out = fcntl(1, F_DUPFD_CLOEXEC, 3);
  if (out < 0 || dup2(2, 1) < 0) {
    fprintf(stderr, "tidepool mcp: cannot set up standard output: %s\n", strerror(errno));
    return 1;
  }
  tp_store *kv = NULL;
  char *owner = NULL;
  if (o->state) {  /* one store for every worker's engine */
    char why[512];
    if ((kv = tp_store_open(o->state, why, sizeof why)) == NULL) {
      fprintf(stderr, "tidepool: --state: %s\n", why);
      options_free(o);
      close(out);
      return TP_EXIT_USAGE;  /* as in tidepool run */
    }
    owner = owner_name(o, http.listen);
  }
  int audit_fd = -1;
  if (o->audit) {
    audit_fd = open(o->audit, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (audit_fd < 0) {
      fprintf(stderr, "tidepool: --audit: cannot open %s: %s\n", o->audit, strerror(errno));
      tp_store_destroy(kv);
      free(owner);
      options_free(o);
      close(out);
      return TP_EXIT_USAGE;
    }
  }
  /* --state without --audit: the call journal goes with the state (tidepool audit show
  ** --state reads it), so what runs did survives a crash wherever their state does */
  int journal_fd = -1;
  char *jpath = audit_fd < 0 ? tp__options_journal_path(o->state) : NULL;
  if (jpath) {
    journal_fd = open(jpath, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (journal_fd < 0)
      fprintf(stderr, "tidepool: warning: --state: the call journal %s cannot be opened (%s): "
              "runs are not journaled; give --audit FILE\n", jpath, strerror(errno));
    free(jpath);
  }
  tp__mcp_entries ent;
  tp__mcp_server *s = tp__mcp_server_new(o, &worker_ops, kv, owner, audit_fd, journal_fd,
                                         &ent);
  if (s == NULL) {
    fprintf(stderr, "tidepool mcp: out of memory\n");
    return 1;
  }
  tp__mcp_transport t;
  if (tp__mcp_http_wanted(&http, o->config, o->config_len)) {
    tp__mcp_http *h = tp__mcp_http_new(&ent, tp__mcp_server_loop(s), &http, o->config,
                                       o->config_len, o->config_dir);
    if (h == NULL) {
      tp__mcp_server_free(s);
      if (audit_fd >= 0) close(audit_fd);
      if (journal_fd >= 0) close(journal_fd);
      options_free(o);
      close(out);
      return 1;
    }
    tp__mcp_http_transport(h, &t);
  }
  else {
    tp__mcp_stdio *st = tp__mcp_stdio_new(&ent, tp__mcp_server_loop(s), out,
                                          TP__MCP_SERVER_LINE_IN_MAX);
    if (st == NULL) {
      fprintf(stderr, "tidepool mcp: out of memory\n");
      return 1;
    }
    tp__mcp_stdio_transport(st, &t);
  }
  tp__mcp_server_attach(s, &t);
  int status = tp__mcp_server_run(s);
  tp__mcp_server_free(s);
  if (audit_fd >= 0) close(audit_fd);
  if (journal_fd >= 0) close(journal_fd);
  options_free(o);
  close(out);
  return status;
}

/* ---- fuzzing: a server in the calling thread, its lines to a sink (mcp.h) ------------ */

typedef struct tp__mcp_fuzz_sink { void (*fn)(void *ud, const char *line,
                                              size_t len); void *ud; } fuzz_sink;
struct tp__mcp_fuzz { tp__mcp_server *s; fuzz_sink sink; };

static void sink_emit (void *ud, void *origin, const char *line, size_t len, int final) {
  (void)origin;
  (void)final;
  fuzz_sink *k = ud;
  k->fn(k->ud, line, len);
}
static void sink_serve (void *ud, size_t ntools, unsigned nworkers) {
  (void)ud; (void)ntools; (void)nworkers;
}
static void sink_nothing (void *ud) { (void)ud; }

tp__mcp_fuzz *tp__mcp_main_fuzz_new (void (*sink)(void *ud, const char *line, size_t len),
                                    void *ud) {
  tp__mcp_fuzz *f = calloc(1, sizeof *f);
  if (f == NULL) return NULL;
  f->sink.fn = sink;
  f->sink.ud = ud;
  options o = { 0 };
  tp_limits_init(&o.lim);
  o.lim.memory = 4u << 20;
  o.lim.instructions = 200000;
  o.lim.wall_us = 200000;
  o.lim.cpu_us = 200000;
  o.name = "run_lua";
  o.max_sessions = 4;
  o.workers = 1;
  o.test_tools = 1;
  o.expose = 1;
  o.pause_ttl_us = TP__MCP_APPROVE_TTL_DEFAULT_US;
  o.lease_us = LEASE_DEFAULT_US;
  tp__mcp_transport t = { 0 };
  t.ud = &f->sink;
  t.emit = sink_emit;
  t.serve = sink_serve;
  t.stop = sink_nothing;
  t.free = sink_nothing;
  if ((f->s = tp__mcp_server_fuzz_new(&o, &worker_ops, &t)) == NULL) { free(f); return NULL; }
  return f;
}

void tp__mcp_main_fuzz_line (tp__mcp_fuzz *f, const char *line, size_t len) {
  char *copy = malloc(len + 1);  /* exactly len bytes and a NUL: ASan sees any overread */
  if (copy == NULL) return;
  memcpy(copy, line, len);
  copy[len] = '\0';
  tp__mcp_server_fuzz_line(f->s, copy, len);
  free(copy);
}

void tp__mcp_main_fuzz_free (tp__mcp_fuzz *f) {
  if (f == NULL) return;
  tp__mcp_server_free(f->s);
  free(f);
}
