/*
** cli.c: the tidepool command. It only translates argv into the C API and the envelope
** into text. Exit statuses: the table in mcp.h (TP_EXIT_*), the same for every command;
** exit_statuses (below) says them in --help and the man page.
*/
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "tidepool.h"
#include "options.h"
#include "mcp/mcp.h"
#include "mcp/view.h"
#include "caller_pipe.h"
#include "audit_show.h"

#define EXIT_SCRIPT_FAILED TP_EXIT_FAILED
#define EXIT_USAGE TP_EXIT_USAGE
#define INPUT_MAX (64u << 20)  /* refuse to read more source than this */

static const char usage_head[] =
  "usage: tidepool run [options] FILE     run a Lua script (FILE - reads standard input)\n"
  "       tidepool check [options] FILE   compile and check, run nothing: syntax errors and\n"
  "                                       every line that would surely fail (names, tools)\n"
  "       tidepool describe [--config FILE] [--tools DIR]... [--no-builtin-tools]\n"
  "                [--workspace DIR] [--format lua|json] [--describe MODE]\n"
  "                                       what the model reads: the sandbox and the tools\n"
  "                                       as text (lua) or a run_lua tool (json); MODE full\n"
  "                                       (default), compact (one line a tool), grouped (a\n"
  "                                       namespace's names a line), counts, or auto (the\n"
  "                                       first that fits in 2,048 characters, as mcp)\n"
  "       tidepool mcp [options]          MCP server on stdio (tidepool mcp --help)\n"
  "       tidepool config check FILE...   check config files as run --strict does, but\n"
  "                                       starting no server: FILE: ok and a summary, or\n"
  "                                       every problem (exit 2: the file; 3: the machine)\n"
  "       tidepool config schema          print the config file's JSON Schema\n"
  "       tidepool audit show FILE [RUN]  a run's calls from an --audit file: made, failed,\n"
  "                                       refused, held, in flight when the process died\n"
  "       tidepool audit show --state DIR [RUN]  the same from --state's own journal\n"
  "                                       (DIR/journal.jsonl, written when no --audit)\n"
  "       tidepool --version | --help\n"
  "\n"
  "options:\n"
  "  --config FILE        read limits, tools, workspace, mcpServers, http, commands\n"
  "                       and policy from a JSON config file (relative paths in it are\n"
  "                       relative to its folder); options given here win over it, and\n"
  "                       --tools directories come after the file's\n"
  "  --json               print exactly one line: the result envelope as JSON\n"
  "  --for-model          print exactly one line: the result as tidepool mcp gives it to\n"
  "                       a model (ok, result or error, logs, calls counted by tool,\n"
  "                       failed_calls in full; no call records, no stats)\n"
  "  --strict             what config check refuses (a config this machine lacks\n"
  "                       something for, a plugin or server that cannot load) is an\n"
  "                       error (exit status 3, before anything runs), not a warning\n"
  "  --tools DIR          also load the plugin tools in DIR (repeatable)\n"
  "  --no-builtin-tools   leave out the built-in tools (time.*, kv.*, fs.*)\n"
  "  --workspace DIR      offer the fs.* tools, confined to DIR\n"
  "  --workspace-max SIZE how much the fs.* tools may grow the workspace, net, over\n"
  "                       what it held when first used (default 1G)\n"
  "  --principal NAME     who runs the script, for the config's policy (rate buckets\n"
  "                       per principal)\n"
  "  --scopes LIST        the scopes the caller holds, for the policy's \"requires\"\n"
  "                       (names separated by spaces or commas)\n"
  "  --approve MODE       the calls that a policy rule asks a person to approve: ask\n"
  "                       on the terminal (ask, the default; with no terminal they are\n"
  "                       denied), approve them all (all) or deny them all (none)\n"
  "  --state DIR          keep kv keys and rate buckets in DIR/tidepool.db (SQLite, made\n"
  "                       when missing), across runs and processes; also sqlite:PATH or\n"
  "                       redis://HOST:PORT/DB\n"
  "  --caller-tools FILE  tools of this run that a command answers (--caller-cmd): FILE\n"
  "                       holds their declarations, [{name, description, inputSchema,\n"
  "                       outputSchema, timeoutMs}] (docs/caller-tools.md)\n"
  "  --caller-cmd CMD     start sh -c CMD; each call of a caller tool goes to its input as\n"
  "                       a JSON line {id, tool, args}, each answer comes back from its\n"
  "                       output as a line {id, result} or {id, error: {message, code}}\n"
  "  --deterministic      the same envelope at every run (but for timings): math.random\n"
  "                       seeded (--seed, default 0), the clock starts at --clock and\n"
  "                       moves --clock-step at each read of os.time/os.clock/os.date\n"
  "  --seed N             seed math.random with the integer N\n"
  "  --clock EPOCH        the run's clock starts at EPOCH (seconds since 1970)\n"
  "  --clock-step DURATION  how far the clock moves at each read (default 1ms)\n"
  "  --audit FILE         append each tool call's start and end, and the run's end, to\n"
  "                       FILE as they happen (tidepool audit show FILE reads it, even\n"
  "                       after the process died)\n"
  "  --otlp URL           send OpenTelemetry spans of the run and its calls to this\n"
  "                       OTLP/HTTP collector (http://host:4318); see docs/operations.md\n"
  "  --trace-file FILE    append the same spans to FILE, one JSON object a line\n"
  "  --traceparent TP     the run's parent span, a W3C traceparent (default: the\n"
  "                       TRACEPARENT environment variable)\n"
  "\n"
  "limits (SIZE: 512K, 64M, 1G or bytes; DURATION: 500ms, 2s, 1m; N: a count):\n";

/* The exit statuses of the command, for --help and the man page (scripts/man.sh). */
static const struct { int status; const char *meaning; } exit_statuses[] = {
  { TP_EXIT_OK, "it did what was asked: the script succeeded, the files are good, the "
    "server stopped on end of input or a signal" },
  { TP_EXIT_FAILED, "the script failed (syntax, runtime error, limit); or something failed "
    "at run time (out of memory, an address already in use)" },
  { TP_EXIT_USAGE, "a usage error: an unknown option, a bad value (named with its flag), a "
    "config file that is wrong (each problem with its JSON path), a FILE, --state or "
    "--audit that cannot be opened" },
  { TP_EXIT_REFUSED, "--strict or config check: the config asks for what this machine lacks "
    "(an unset env: variable, a program not in PATH), or a plugin or upstream server "
    "cannot load" },
};
/* Prints "  TERM" and text wrapped at 86 columns, from column 24 on. */
static void help_entry (FILE *f, const char *term, const char *text) {
  int col = fprintf(f, "  %s", term);
  if (col > 22) { fputc('\n', f); col = 0; }
  fprintf(f, "%*s", 23 - col, "");
  col = 23;
  while (*text) {
    size_t w = strcspn(text, " ");
    if (col > 23 && col + 1 + (int)w > 86) { fprintf(f, "\n%23s", ""); col = 23; }
    else if (col > 23) { fputc(' ', f); col++; }
    fwrite(text, 1, w, f);
    col += (int)w;
    text += w;
    text += strspn(text, " ");
  }
  fputc('\n', f);
}

/* The error codes (tp_code_at) and the exit statuses, as --help's last sections. */
static void usage_tail (FILE *f) {
  fputs("\nA limit of 0 means no limit.\n\nerror codes (the envelope's error.code):\n", f);
  for (size_t i = 0; i < tp_code_count(); i++)
    help_entry(f, tp_code_at(i)->code, tp_code_at(i)->meaning);
  fputs("\nexit status (every command, mcp too):\n", f);
  for (size_t i = 0; i < sizeof exit_statuses / sizeof exit_statuses[0]; i++) {
    char s[8];
    snprintf(s, sizeof s, "%d", exit_statuses[i].status);
    help_entry(f, s, exit_statuses[i].meaning);
  }
}

static void usage (FILE *f) {
  fputs(usage_head, f);
  tp__options_limits_help(f, 0, NULL);
  usage_tail(f);
}

/* Configures e from the config file path (when not NULL); 0, or -1 with every problem on
** stderr, "tidepool: FILE: /json/path: what". */
static int configure (tp_engine *e, const char *path) {
  if (path == NULL || tp_engine_configure_file(e, path) == TP_OK) return 0;
  tp__options_config_problems(stderr, "tidepool: ", path, tp_engine_error(e));
  return -1;
}

/* A one-line account of a checked config: "3 sections (limits, tools, mcpServers),
** 2 MCP servers, 1 command, 4 http allow rules". */
static void config_summary (const char *text, size_t len) {
  json_t *cfg = tp_json_parse(text, len, NULL, 0);
  char names[512] = "";
  size_t o = 0, nsec = 0;
  const char *k;
  json_t *v;
  json_object_foreach(cfg, k, v) {
    if (strcmp(k, "$schema") == 0) continue;
    nsec++;
    if (o < sizeof names) o += (size_t)snprintf(names + o, sizeof names - o, "%s%s", o ? ", " : "", k);
  }
  size_t nsrv = json_object_size(json_object_get(cfg, "mcpServers"));
  size_t ncmd = json_array_size(json_object_get(cfg, "commands"));
  size_t nhttp = json_array_size(json_object_get(json_object_get(cfg, "http"), "allow"));
  size_t ntools = json_array_size(json_object_get(cfg, "tools"));
  printf("%zu section%s%s%s%s, %zu MCP server%s, %zu command%s, %zu http allow rule%s, "
         "%zu plugin director%s\n", nsec, nsec == 1 ? "" : "s", nsec ? " (" : "", names,
         nsec ? ")" : "", nsrv, nsrv == 1 ? "" : "s", ncmd, ncmd == 1 ? "" : "s", nhttp,
         nhttp == 1 ? "" : "s", ntools, ntools == 1 ? "y" : "ies");
  json_decref(cfg);
}

/* ---- load problems: the config's (what the machine lacks), the plugins', the servers' --
** `run` shows them as warnings; `run --strict` and `config check` refuse them (exit
** TP_EXIT_REFUSED), and say which kinds there were. A problem of the config names its
** JSON pointer after the file ("tidepool: c.json: /commands/0/argv0: ..."); a plugin that
** finds the same problem again (tools/proc.lua) is not shown twice. */
typedef struct load_report {
  const char *config;   /* the config file's path, or NULL */
  const char *prefix;   /* before each line: "tidepool: warning: ", "tidepool: " or "" */
  int config_n, plugin_n, server_n;
  char *seen[64];       /* the JSON pointers shown */
  int nseen;
} load_report;

/* The length of the JSON pointer that starts line (up to ": "), or 0: none, or a plugin
** file's "/path/x.lua:12: what". */
static size_t pointer_len (const char *line) {
  if (line[0] != '/') return 0;
  const char *e = strstr(line, ": ");
  if (e == NULL) return 0;
  const char *d = e;
  while (d > line && d[-1] >= '0' && d[-1] <= '9') d--;
  if (d < e && d > line && d[-1] == ':') return 0;  /* file:line */
  return (size_t)(e - line);
}

static int seen_pointer (load_report *rep, const char *line, size_t n) {
  for (int i = 0; i < rep->nseen; i++)
    if (strlen(rep->seen[i]) == n && memcmp(rep->seen[i], line, n) == 0) return 1;
  if (rep->nseen < 64 && (rep->seen[rep->nseen] = strndup(line, n)) != NULL) rep->nseen++;
  return 0;
}

/* One problem (maybe several lines) of a load. */
static void warn (const char *problem, void *ud) {
  load_report *rep = ud;
  int counted = 0;
  while (*problem) {
    int n = (int)strcspn(problem, "\n");
    const char *line = problem;
    problem += n + (problem[n] == '\n');
    if (strncmp(line, "config: ", 8) == 0) { line += 8; n -= 8; }
    size_t pl = pointer_len(line);
    if (pl && seen_pointer(rep, line, pl)) continue;
    if (!counted) {
      counted = 1;
      if (pl) rep->config_n++;
      else if (strncmp(line, "mcpServers", 10) == 0) rep->server_n++;
      else rep->plugin_n++;
    }
    fprintf(stderr, "%s%s%s%.*s\n", rep->prefix, pl && rep->config ? rep->config : "",
            pl && rep->config ? ": " : "", n, line);
  }
}

static int load_problems (const load_report *rep) {
  return rep->config_n + rep->plugin_n + rep->server_n;
}

static void load_report_free (load_report *rep) {
  for (int i = 0; i < rep->nseen; i++) free(rep->seen[i]);
  rep->nseen = 0;
}

/* The closing line of a refused load, "<who>: refused: what kinds of problem there were". */
static void refused (const char *who, const load_report *rep) {
  char parts[300] = "";
  size_t o = 0;
  if (rep->config_n)
    o += (size_t)snprintf(parts + o, sizeof parts - o, "%d problem%s of the config on this "
                          "machine", rep->config_n, rep->config_n == 1 ? "" : "s");
  if (rep->plugin_n && o < sizeof parts)
    o += (size_t)snprintf(parts + o, sizeof parts - o, "%s%d plugin problem%s", o ? ", " : "",
                          rep->plugin_n, rep->plugin_n == 1 ? "" : "s");
  if (rep->server_n && o < sizeof parts)
    snprintf(parts + o, sizeof parts - o, "%s%d upstream server problem%s", o ? ", " : "",
             rep->server_n, rep->server_n == 1 ? "" : "s");
  fprintf(stderr, "%s: refused: %s (above)\n", who, parts);
}

/* Shows what e's config lacks on this machine (tp_engine_config_warnings), one problem a
** line, through warn and rep; returns how many. */
static int config_lacks (tp_engine *e, load_report *rep) {
  int before = rep->config_n;
  for (const char *l = tp_engine_config_warnings(e); l && *l; ) {
    size_t n = strcspn(l, "\n");
    char *line = strndup(l, n);
    if (line) warn(line, rep);
    free(line);
    l += n + (l[n] == '\n');
  }
  return rep->config_n - before;
}

/* Loads the plugin directories (and, with servers, starts the config's mcpServers) after
** showing what e's config lacks on this machine; every problem goes through warn and rep.
** Under strict, a config that lacks something stops here: nothing is started for it.
** Returns how many problems there were. */
static int load_tools (tp_engine *e, int builtin, const char *const *dirs, int ndirs,
                       int servers, int strict, load_report *rep) {
  char buf[4200];
  if (config_lacks(e, rep) && strict) return load_problems(rep);
  if (servers) tp_engine_start_servers(e, warn, rep);  /* the config's mcpServers */
  for (int i = builtin ? -1 : 0; i < ndirs; i++) {
    const char *dir = i < 0 ? tp__options_builtin_tools_dir(buf, sizeof buf) : dirs[i];
    if (tp_engine_load_tools_cb(e, dir, warn, rep) < 0) warn(tp_engine_error(e), rep);
  }
  return load_problems(rep);
}

/* One file of `tidepool config check`: the checks of `run --strict` but for starting the
** servers (a server's program is looked for, not run). TP_EXIT_OK, TP_EXIT_USAGE (the file
** is wrong) or TP_EXIT_REFUSED (this machine lacks what it asks for, or a plugin of its
** tools directories cannot load). */
static int config_check_file (const char *path) {
  size_t len = 0;
  char *text = tp__options_read_config(path, &len);
  if (text == NULL) return TP_EXIT_USAGE;
  tp_engine *e = tp_engine_create();
  if (e == NULL) {
    fprintf(stderr, "tidepool: out of memory\n");
    free(text);
    return TP_EXIT_FAILED;
  }
  tp_engine_on_log(e, tp_log_stderr, NULL);
  char *dir = tp__options_config_dir(path);
  if (dir == NULL || tp_engine_configure_dir(e, text, len, dir) != TP_OK) {
    free(dir);
    fflush(stdout);
    tp__options_config_problems(stderr, "", path, tp_engine_error(e));
    tp_engine_destroy(e);
    free(text);
    return TP_EXIT_USAGE;
  }
  char prefix[600];
  snprintf(prefix, sizeof prefix, "%s: ", path);
  load_report rep = { NULL, prefix, 0, 0, 0, {0}, 0 };
  fflush(stdout);
  config_lacks(e, &rep);
  /* the plugins load as under --strict, but the servers are not started: the config's
  ** check above looked for their programs and variables, which is all that runs nothing */
  json_t *cfg = tp_json_parse(text, len, NULL, 0);
  char *rest = NULL;
  if (cfg && json_object_del(cfg, "mcpServers") == 0) rest = json_dumps(cfg, 0);
  json_decref(cfg);
  if (rest) tp_engine_configure_dir(e, rest, strlen(rest), dir);  /* checked above */
  free(rest);
  free(dir);
  const char *ws = tp_engine_config_workspace(e, NULL);
  if (ws) tp_engine_set_workspace(e, ws);
  const char *dirs[256];
  int ndirs = 0;
  for (size_t k = 0; ndirs < 256 && tp_engine_config_tools(e, k); k++)
    dirs[ndirs++] = tp_engine_config_tools(e, k);
  for (int i = -1; i < ndirs; i++) {
    char buf[4200];
    const char *d = i < 0 ? tp__options_builtin_tools_dir(buf, sizeof buf) : dirs[i];
    if (tp_engine_load_tools_cb(e, d, warn, &rep) < 0) warn(tp_engine_error(e), &rep);
  }
  int problems = load_problems(&rep);
  load_report_free(&rep);
  if (problems == 0) {
    printf("%s: ok: ", path);
    config_summary(text, len);
  }
  else refused(path, &rep);
  tp_engine_destroy(e);
  free(text);
  return problems ? TP_EXIT_REFUSED : TP_EXIT_OK;
}

/* tidepool config check FILE...: every file checked; the exit status is the worst one
** (TP_EXIT_USAGE over TP_EXIT_REFUSED over TP_EXIT_OK).
** tidepool config schema: the schema the files are checked against. */
static int config_main (int argc, char **argv) {
  if (argc == 1 && strcmp(argv[0], "schema") == 0) {
    fputs(tp_config_schema(), stdout);
    return 0;
  }
  if (argc < 1 || strcmp(argv[0], "check") != 0)
    return tp__options_usage_error("%s", argc < 1 ? "config needs a command: config check FILE..."
                               " or config schema"
                               : "unknown config command (use: config check FILE... or "
                               "config schema)");
  if (argc < 2) return tp__options_usage_error("%s", "config check needs a FILE");
  int worst = TP_EXIT_OK;
  for (int i = 1; i < argc; i++) {
    int rc = config_check_file(argv[i]);
    if (rc == TP_EXIT_FAILED) return rc;
    if (rc == TP_EXIT_USAGE || (rc == TP_EXIT_REFUSED && worst == TP_EXIT_OK)) worst = rc;
  }
  return worst;
}

static int cmp_keys (const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* v as jansson's JSON_INDENT(2) | JSON_SORT_KEYS would print it, with every real in the
** engine's shortest form (tp_number_text), as --json has it. */
static void put_json (FILE *f, json_t *v, int depth) {
  switch (json_typeof(v)) {
    case JSON_OBJECT: case JSON_ARRAY: {
      int obj = json_is_object(v);
      size_t n = obj ? json_object_size(v) : json_array_size(v);
      if (n == 0) { fputs(obj ? "{}" : "[]", f); return; }
      const char **keys = obj ? malloc(n * sizeof *keys) : NULL;
      if (obj && keys == NULL) { fputs("{}", f); return; }
      size_t i = 0;
      const char *k;
      json_t *c;
      if (obj) {
        json_object_foreach(v, k, c) keys[i++] = k;
        qsort(keys, n, sizeof *keys, cmp_keys);
      }
      fputc(obj ? '{' : '[', f);
      for (i = 0; i < n; i++) {
        fprintf(f, "%s\n%*s", i ? "," : "", 2 * (depth + 1), "");
        if (obj) {
          json_t *key = json_string(keys[i]);
          char *t = key ? json_dumps(key, JSON_ENCODE_ANY) : NULL;
          fprintf(f, "%s: ", t ? t : "\"\"");
          free(t);
          json_decref(key);
        }
        put_json(f, obj ? json_object_get(v, keys[i]) : json_array_get(v, i), depth + 1);
      }
      fprintf(f, "\n%*s%c", 2 * depth, "", obj ? '}' : ']');
      free(keys);
      return;
    }
    case JSON_REAL: {
      char num[32];
      tp_number_text(json_real_value(v), num, sizeof num);
      fputs(num, f);
      if (strpbrk(num, ".eni") == NULL) fputs(".0", f);  /* a real stays one: 3.0 */
      return;
    }
    default: {
      char *t = json_dumps(v, JSON_ENCODE_ANY);
      if (t) fputs(t, f);
      free(t);
      return;
    }
  }
}

/* Prints the envelope for a person: logs and result on stdout, an error on stderr. */
static void print_human (const char *envelope) {
  json_error_t jerr;
  json_t *env = json_loads(envelope, 0, &jerr);
  if (env == NULL) { puts(envelope); return; }
  json_t *logs = json_object_get(env, "logs");
  size_t i;
  json_t *v;
  json_array_foreach(logs, i, v) {
    fwrite(json_string_value(v), 1, json_string_length(v), stdout);
    fputc('\n', stdout);
  }
  json_array_foreach(json_object_get(env, "warnings"), i, v) {
    json_t *line = json_object_get(v, "line");
    fprintf(stderr, "warning");
    if (line) fprintf(stderr, " at line %lld", (long long)json_integer_value(line));
    fprintf(stderr, ": %s\n", json_string_value(json_object_get(v, "message")));
  }
  json_t *err = json_object_get(env, "error");
  if (err) {
    /* the pre-run check's findings, every one; else the one error */
    json_t *all = json_object_get(err, "findings"), *one;
    size_t n = json_is_array(all) ? json_array_size(all) : 1;
    for (size_t k = 0; k < n; k++) {
      one = json_is_array(all) ? json_array_get(all, k) : err;
      json_t *line = json_object_get(one, "line"), *src = json_object_get(one, "source");
      json_t *hint = json_object_get(one, "hint");
      fprintf(stderr, "error [%s]", json_string_value(json_object_get(one, "code")));
      if (line) fprintf(stderr, " at line %lld", (long long)json_integer_value(line));
      fprintf(stderr, ": %s\n", json_string_value(json_object_get(one, "message")));
      if (src) fprintf(stderr, "  %lld | %s\n", (long long)json_integer_value(line),
                       json_string_value(src));
      if (hint) fprintf(stderr, "  hint: %s\n", json_string_value(hint));
    }
    json_t *more = json_object_get(err, "findings_more");
    if (more) fprintf(stderr, "(and %lld more)\n", (long long)json_integer_value(more));
  }
  else {
    json_t *result = json_object_get(env, "result");
    if (result && !json_is_null(result)) {
      if (json_is_string(result)) {
        fwrite(json_string_value(result), 1, json_string_length(result), stdout);
        fputc('\n', stdout);
      }
      else {
        put_json(stdout, result, 0);
        fputc('\n', stdout);
      }
    }
  }
  /* a one-line account on stderr, so stdout stays the result alone */
  fflush(stdout);
  json_t *calls = json_object_get(env, "calls"), *st = json_object_get(env, "stats");
  size_t ncalls = 0, nfailed = 0;
  json_t *c;
  json_array_foreach(calls, i, c) {
    if (json_is_true(json_object_get(c, "summary"))) {  /* the calls past the listed ones */
      ncalls += (size_t)json_integer_value(json_object_get(c, "calls"));
      nfailed += (size_t)json_integer_value(json_object_get(c, "failed"));
    }
    else {
      ncalls++;
      nfailed += json_is_false(json_object_get(c, "ok"));
    }
  }
  char fails[48];
  snprintf(fails, sizeof fails, " (%zu failed)", nfailed);
  if (isatty(2) || ncalls > 0)
    fprintf(stderr, "-- %zu tool call%s%s, %.1f ms wall, %.1f ms cpu, %.1f KiB peak memory\n",
            ncalls, ncalls == 1 ? "" : "s",
            nfailed ? fails : "",
            json_number_value(json_object_get(st, "wall_ms")),
            json_number_value(json_object_get(st, "cpu_ms")),
            json_number_value(json_object_get(st, "memory_peak")) / 1024);
  json_decref(env);
}

/* ---- approvals: a call that a policy rule asks a person to approve ---------------------
** tidepool run asks on the terminal (/dev/tty: the script may come from standard input)
** and waits for the answer: the run is stopped meanwhile, its wall-clock limit going on.
** --approve all|none decides without asking; without a terminal the call is denied. */
enum { APPROVE_ASK, APPROVE_ALL, APPROVE_NONE };
#define PROMPT_ARGS_MAX 400  /* bytes of the arguments shown at the prompt */

/* --deterministic, --seed, --clock, --clock-step */
typedef struct det_opts {
  int has_seed, has_clock;
  uint64_t seed;
  int64_t epoch;
  uint64_t step_us;
  const char *traceparent;  /* --traceparent or $TRACEPARENT: the run's parent span */
} det_opts;

/* s with its control characters shown as '?' (a config's reason is not the terminal's). */
static void put_plain (FILE *f, const char *s, size_t n) {
  for (size_t i = 0; i < n && s[i]; i++)
    fputc((unsigned char)s[i] < 0x20 || s[i] == 0x7f ? '?' : s[i], f);
}

static void on_approval (tp_call *c, const char *reason, void *ud) {
  int mode = *(const int *)ud;
  char why[1600];
  if (mode == APPROVE_ALL) { tp_call_approve(c); return; }
  FILE *tty = mode == APPROVE_NONE ? NULL : fopen("/dev/tty", "r+");
  if (tty == NULL) {
    snprintf(why, sizeof why, "%s; %s", reason, mode == APPROVE_NONE ?
             "this run declines every call that needs a person's approval (--approve none)" :
             "there is no terminal to ask a person on, so it is denied");
    tp_call_deny(c, why);
    return;
  }
  const char *args = tp_call_args(c);
  if (args == NULL) {
    fclose(tty);
    snprintf(why, sizeof why, "%s; its arguments could not be shown to a person (out of "
             "memory), so it is denied", reason);
    tp_call_deny(c, why);
    return;
  }
  size_t n = strlen(args), cut = n;
  if (cut > PROMPT_ARGS_MAX) {
    cut = PROMPT_ARGS_MAX;
    while (cut > 0 && ((unsigned char)args[cut] & 0xC0) == 0x80) cut--;  /* UTF-8 */
  }
  fflush(stdout);
  fprintf(tty, "tidepool: the script calls tools.%s\n  arguments: ", tp_call_tool(c));
  put_plain(tty, args, cut);
  if (cut < n) fprintf(tty, "... (%zu bytes in all)", n);
  fputs("\n  reason: ", tty);
  put_plain(tty, reason, strlen(reason));
  fputs("\n  (the run's time limit, --timeout, keeps counting while you decide)"
        "\nallow this call? [y/N] ", tty);
  fflush(tty);
  char line[64];
  int yes = 0;
  if (fgets(line, sizeof line, tty) != NULL) {
    line[strcspn(line, "\r\n")] = '\0';
    yes = strcasecmp(line, "y") == 0 || strcasecmp(line, "yes") == 0;
  }
  fclose(tty);
  if (yes) { tp_call_approve(c); return; }
  snprintf(why, sizeof why, "%s; the person asked at the terminal declined it", reason);
  tp_call_deny(c, why);
}

int main (int argc, char **argv) {
  /* A write past a file-size limit (RLIMIT_FSIZE) fails with EFBIG, the one write's error
  ** (the state store says so), instead of SIGXFSZ ending the process and every client
  ** with it. proc.run's children get the default back (tidepool-confine). */
  signal(SIGXFSZ, SIG_IGN);
  if (argc < 2) { usage(stderr); return EXIT_USAGE; }
  const char *cmd = argv[1];
  if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
    usage(stdout);
    return 0;
  }
  if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "version") == 0) {
    printf("tidepool %s (Lua 5.4.7 from Debian trixie)\n", tp_version());
    return 0;
  }
  if (strcmp(cmd, "mcp") == 0) return tp__mcp_main(argc - 2, argv + 2);
  if (strcmp(cmd, "config") == 0) return config_main(argc - 2, argv + 2);
  if (strcmp(cmd, "audit") == 0)
    return tp__audit_main(argc - 2, argv + 2, tp__options_journal_path);
  int check = strcmp(cmd, "check") == 0, describe = strcmp(cmd, "describe") == 0;
  if (!check && !describe && strcmp(cmd, "run") != 0)
    return tp__options_usage_error("unknown command '%s'", cmd);
  const char *format = "lua";
  const char *describe_mode = NULL;  /* --describe: NULL for full */

  tp_limits lim;
  tp_limits_init(&lim);
  int json_out = 0, for_model = 0, strict = 0;
  int builtin_tools = 1, ntool_dirs = 0;
  const char *tool_dirs[64];
  const char *workspace = NULL, *config_path = NULL, *state = NULL;
  const char *principal = NULL, *scopes = NULL;  /* --principal, --scopes */
  int approve = APPROVE_ASK;                     /* --approve */
  const char *limit_opts[128];  /* the limit options given, as name and value pairs: they
                                ** are applied over the config file's limits */
  int nlimit_opts = 0;
  uint64_t workspace_max = 0;
  int workspace_max_set = 0;
  det_opts det = { 0, 0, 0, 0, 1000, NULL };  /* --deterministic, --seed, --clock,
                                              ** --clock-step; --traceparent */
  const char *otlp = NULL, *trace_file = NULL;  /* --otlp, --trace-file */
  const char *audit = NULL;                     /* --audit */
  det.traceparent = getenv("TRACEPARENT");
  const char *file = NULL;
  const char *caller_tools = NULL, *caller_cmd = NULL;  /* --caller-tools, --caller-cmd */
  for (int i = 2; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--json") == 0) { json_out = 1; continue; }
    if (strcmp(a, "--for-model") == 0) { for_model = 1; continue; }
    if (strcmp(a, "--strict") == 0) { strict = 1; continue; }
    if (strcmp(a, "--no-builtin-tools") == 0) { builtin_tools = 0; continue; }
    if (strcmp(a, "--tools") == 0 || strncmp(a, "--tools=", 8) == 0) {
      const char *dir = a[7] == '=' ? a + 8 : i + 1 < argc ? argv[++i] : NULL;
      if (dir == NULL || *dir == '\0' || ntool_dirs == 64) {
        fprintf(stderr, "tidepool: --tools needs a directory (at most 64 of them)\n");
        return EXIT_USAGE;
      }
      tool_dirs[ntool_dirs++] = dir;
      continue;
    }
    if (strcmp(a, "--workspace") == 0 || strncmp(a, "--workspace=", 12) == 0) {
      workspace = a[11] == '=' ? a + 12 : i + 1 < argc ? argv[++i] : NULL;
      struct stat st;
      if (workspace == NULL || *workspace == '\0')
        return tp__options_usage_error("%s", "--workspace needs a directory");
      if (stat(workspace, &st) != 0 || !S_ISDIR(st.st_mode))
        return tp__options_usage_error("--workspace '%s' is not a directory", workspace);
      continue;
    }
    if (strcmp(a, "--state") == 0 || strncmp(a, "--state=", 8) == 0) {
      state = a[7] == '=' ? a + 8 : i + 1 < argc ? argv[++i] : NULL;
      if (state == NULL || *state == '\0')
        return tp__options_usage_error("%s", "--state needs a directory (or sqlite:PATH, "
                                   "redis://HOST:PORT/DB)");
      continue;
    }
    if (strcmp(a, "--config") == 0 || strncmp(a, "--config=", 9) == 0) {
      config_path = a[8] == '=' ? a + 9 : i + 1 < argc ? argv[++i] : NULL;
      if (config_path == NULL || *config_path == '\0')
        return tp__options_usage_error("%s", "--config needs a file");
      continue;
    }
    if (strcmp(a, "--principal") == 0 || strncmp(a, "--principal=", 12) == 0 ||
        strcmp(a, "--scopes") == 0 || strncmp(a, "--scopes=", 9) == 0) {
      int is_p = a[3] == 'r';
      size_t n = is_p ? 11 : 8;
      const char *val = a[n] == '=' ? a + n + 1 : i + 1 < argc ? argv[++i] : NULL;
      if (val == NULL) return tp__options_usage_error("option '%s' needs a value", a);
      if (is_p) principal = val;
      else scopes = val;
      continue;
    }
    if (strcmp(a, "--approve") == 0 || strncmp(a, "--approve=", 10) == 0) {
      const char *val = a[9] == '=' ? a + 10 : i + 1 < argc ? argv[++i] : "";
      if (strcmp(val, "ask") == 0) approve = APPROVE_ASK;
      else if (strcmp(val, "all") == 0) approve = APPROVE_ALL;
      else if (strcmp(val, "none") == 0) approve = APPROVE_NONE;
      else return tp__options_usage_error("--approve '%s': use ask, all or none", val);
      continue;
    }
    if (strcmp(a, "--caller-tools") == 0 || strncmp(a, "--caller-tools=", 15) == 0 ||
        strcmp(a, "--caller-cmd") == 0 || strncmp(a, "--caller-cmd=", 13) == 0) {
      int is_tools = a[9] == 't';
      size_t n = is_tools ? 14 : 12;
      const char *val = a[n] == '=' ? a + n + 1 : i + 1 < argc ? argv[++i] : NULL;
      if (val == NULL || *val == '\0') return tp__options_usage_error("option '%s' needs a value", a);
      if (is_tools) caller_tools = val;
      else caller_cmd = val;
      continue;
    }
    if (strcmp(a, "--deterministic") == 0) { det.has_seed = det.has_clock = 1; continue; }
    if (strcmp(a, "--audit") == 0 || strncmp(a, "--audit=", 8) == 0) {
      audit = a[7] == '=' ? a + 8 : i + 1 < argc ? argv[++i] : NULL;
      if (audit == NULL || *audit == '\0') return tp__options_usage_error("%s", "--audit needs a file");
      continue;
    }
    if (strcmp(a, "--otlp") == 0 || strncmp(a, "--otlp=", 7) == 0 ||
        strcmp(a, "--trace-file") == 0 || strncmp(a, "--trace-file=", 13) == 0 ||
        strcmp(a, "--traceparent") == 0 || strncmp(a, "--traceparent=", 14) == 0) {
      size_t n = strcspn(a, "=");
      const char *val = a[n] == '=' ? a + n + 1 : i + 1 < argc ? argv[++i] : NULL;
      if (val == NULL || *val == '\0') return tp__options_usage_error("option '%s' needs a value", a);
      if (n == 6) otlp = val;
      else if (n == 12) trace_file = val;
      else det.traceparent = val;
      continue;
    }
    if (strcmp(a, "--seed") == 0 || strncmp(a, "--seed=", 7) == 0 ||
        strcmp(a, "--clock") == 0 || strncmp(a, "--clock=", 8) == 0 ||
        strcmp(a, "--clock-step") == 0 || strncmp(a, "--clock-step=", 13) == 0) {
      size_t n = strcspn(a, "=");
      const char *val = a[n] == '=' ? a + n + 1 : i + 1 < argc ? argv[++i] : NULL;
      if (val == NULL || *val == '\0') return tp__options_usage_error("option '%s' needs a value", a);
      char *end = NULL;
      errno = 0;
      if (n == 12) {  /* --clock-step */
        char why[256];
        if (tp_parse_value(TP_UNIT_DURATION, val, 86400000000u, &det.step_us, NULL, why,
                           sizeof why) != TP_OK)
          return tp__options_usage_error("--clock-step: %s", why);
        det.has_clock = 1;
        continue;
      }
      long long v = strtoll(val, &end, 10);
      if (errno != 0 || *end != '\0' || (n == 6 && v < 0))
        return tp__options_usage_error(n == 6 ? "--seed takes a whole number from 0 (e.g. --seed "
                                            "7), not '%s'"
                                          : "--clock takes whole seconds since 1970 (e.g. "
                                            "--clock 1700000000), not '%s'", val);
      if (n == 6) { det.seed = (uint64_t)v; det.has_seed = 1; }
      else { det.epoch = v; det.has_clock = 1; }
      continue;
    }
    if (strcmp(a, "--workspace-max") == 0 || strncmp(a, "--workspace-max=", 16) == 0) {
      const char *val = a[15] == '=' ? a + 16 : i + 1 < argc ? argv[++i] : NULL;
      if (val == NULL) return tp__options_usage_error("option '%s' needs a value", a);
      char why[256];
      if (tp_parse_value(TP_UNIT_BYTES, val, UINT64_MAX, &workspace_max, NULL, why,
                         sizeof why) != TP_OK)
        return tp__options_usage_error("--workspace-max: %s", why);
      workspace_max_set = 1;
      continue;
    }
    if (describe && (strcmp(a, "--format") == 0 || strncmp(a, "--format=", 9) == 0)) {
      format = a[8] == '=' ? a + 9 : i + 1 < argc ? argv[++i] : "";
      if (strcmp(format, "lua") != 0 && strcmp(format, "json") != 0)
        return tp__options_usage_error("--format '%s': use lua or json", format);
      continue;
    }
    if (describe && (strcmp(a, "--describe") == 0 || strncmp(a, "--describe=", 11) == 0)) {
      const char *mode = a[10] == '=' ? a + 11 : i + 1 < argc ? argv[++i] : "";
      if (strcmp(mode, "full") != 0 && strcmp(mode, "compact") != 0 &&
          strcmp(mode, "auto") != 0 && strcmp(mode, "grouped") != 0 &&
          strcmp(mode, "counts") != 0)
        return tp__options_usage_error("--describe '%s': use full, auto, compact, grouped or "
                                   "counts", mode);
      describe_mode = strcmp(mode, "full") == 0 ? NULL : mode;
      continue;
    }
    if (describe && (strcmp(a, "-") == 0 || a[0] != '-'))
      return tp__options_usage_error("describe takes no FILE ('%s')", a);
    if (strcmp(a, "-") == 0 || a[0] != '-') {
      if (file) return tp__options_usage_error("more than one FILE given ('%s')", a);
      file = a;
      continue;
    }
    if (strcmp(a, "--help") == 0) { usage(stdout); return 0; }
    char name[64];
    const char *end = tp__options_option_name(a, name, sizeof name);
    if (end == NULL) return tp__options_usage_error("unknown option '%s'", a);
    const char *val = *end == '=' ? end + 1 : i + 1 < argc ? argv[++i] : NULL;
    if (val == NULL) return tp__options_usage_error("option '%s' needs a value", a);
    char why[256];
    int lo = tp__options_limit_option(name, val, &lim, 0, why, sizeof why);
    if (lo < 0) return tp__options_usage_error("%s", why);
    if (lo == 0) return tp__options_usage_error("unknown option '%s'", a);
    if (nlimit_opts + 2 > (int)(sizeof limit_opts / sizeof limit_opts[0]))
      return tp__options_usage_error("%s", "too many limit options");
    limit_opts[nlimit_opts++] = tp_limit_find(name)->field;
    limit_opts[nlimit_opts++] = val;
  }
  /* The config file first; then the options, which win over it. */
  tp_engine *e = tp_engine_create();
  if (e == NULL) { fprintf(stderr, "tidepool: out of memory\n"); return 1; }
  tp_engine_on_log(e, tp_log_stderr, NULL);  /* the command line shows what engines say */
  if (configure(e, config_path) != 0) { tp_engine_destroy(e); return EXIT_USAGE; }
  int audit_fd = -1;
  if (audit && !check && !describe) {
    audit_fd = open(audit, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (audit_fd < 0) {
      fprintf(stderr, "tidepool: --audit: cannot open %s: %s\n", audit, strerror(errno));
      tp_engine_destroy(e);
      return EXIT_USAGE;
    }
    tp_engine_audit_calls(e, audit_fd);
  }
  if ((otlp && tp_engine_trace_otlp(e, otlp) != TP_OK) ||
      (trace_file && !check && !describe && tp_engine_trace_file(e, trace_file) != TP_OK)) {
    fprintf(stderr, "tidepool: %s: %s\n", otlp && !trace_file ? "--otlp" : "--otlp or "
            "--trace-file", tp_engine_error(e));
    tp_engine_destroy(e);
    return EXIT_USAGE;
  }
  if (config_path) {
    tp_limits_init(&lim);
    tp_engine_config_limits(e, &lim);
    for (int k = 0; k < nlimit_opts; k += 2)
      tp_limits_set(&lim, limit_opts[k], limit_opts[k + 1], NULL, 0);  /* checked above */
    uint64_t max;
    const char *ws = tp_engine_config_workspace(e, &max);
    if (workspace == NULL) workspace = ws;
    if (!workspace_max_set && max != UINT64_MAX) {
      workspace_max = max;
      workspace_max_set = 1;
    }
    if (state == NULL) state = tp_engine_config_state(e);
  }
  if (state && !check && !describe) {
    char why[512];
    tp_store *st = tp_store_open(state, why, sizeof why);
    if (st == NULL) {
      tp_engine_destroy(e);
      return tp__options_usage_error("--state: %s", why);
    }
    int set = tp_engine_set_store(e, st);
    tp_store_destroy(st);  /* e keeps its own reference */
    if (set != TP_OK) {
      tp_engine_destroy(e);
      fprintf(stderr, "tidepool: out of memory\n");
      return 1;
    }
    /* without --audit, the call journal goes with the state (tidepool audit show --state) */
    char *jpath = audit_fd < 0 ? tp__options_journal_path(state) : NULL;
    if (jpath) {
      audit_fd = open(jpath, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
      if (audit_fd < 0)
        fprintf(stderr, "tidepool: warning: --state: the call journal %s cannot be opened "
                "(%s): the run is not journaled; give --audit FILE\n", jpath, strerror(errno));
      else tp_engine_audit_calls(e, audit_fd);
      free(jpath);
    }
  }
  /* the plugin directories: the built-in ones, the config file's, then --tools */
  const char *dirs[64 + 256];
  int ndirs = 0;
  for (size_t k = 0; ndirs < 256 && tp_engine_config_tools(e, k); k++)
    dirs[ndirs++] = tp_engine_config_tools(e, k);
  for (int k = 0; k < ntool_dirs; k++) dirs[ndirs++] = tool_dirs[k];
  if (workspace_max_set) tp_engine_set_workspace_max(e, workspace_max);
  if ((workspace && tp_engine_set_workspace(e, workspace) != TP_OK) ||
      ((principal || scopes) && tp_engine_set_principal(e, principal, scopes) != TP_OK) ||
      tp_engine_on_approval(e, on_approval, &approve) != TP_OK) {
    tp_engine_destroy(e);
    fprintf(stderr, "tidepool: out of memory\n");
    return 1;
  }
  if (caller_cmd && caller_tools == NULL) {
    tp_engine_destroy(e);
    return tp__options_usage_error("%s", "--caller-cmd needs --caller-tools FILE, the tools it "
                               "answers");
  }
  char *decls = NULL;  /* --caller-tools: the file's text */
  size_t dlen = 0;
  if (caller_tools) {
    if (strcmp(caller_tools, "-") == 0 && file && strcmp(file, "-") == 0) {
      tp_engine_destroy(e);
      return tp__options_usage_error("%s", "--caller-tools - and FILE - cannot both read "
                                 "standard input");
    }
    FILE *df = strcmp(caller_tools, "-") == 0 ? stdin : fopen(caller_tools, "rb");
    decls = df ? tp__options_read_all(df, &dlen) : NULL;
    if (df && df != stdin) fclose(df);
    if (decls == NULL) {
      fprintf(stderr, "tidepool: cannot read --caller-tools '%s': %s\n", caller_tools,
              strerror(errno));
      tp_engine_destroy(e);
      return EXIT_USAGE;
    }
  }
  load_report rep = { config_path, strict ? "tidepool: " : "tidepool: warning: ",
                      0, 0, 0, {0}, 0 };
  if (describe) {
    int bad = load_tools(e, builtin_tools, dirs, ndirs, 1, strict, &rep) > 0 && strict;
    load_report_free(&rep);
    if (bad) {
      refused("tidepool: --strict", &rep);
      tp_engine_destroy(e);
      return TP_EXIT_REFUSED;
    }
    char fmt[32];
    if (describe_mode == NULL) snprintf(fmt, sizeof fmt, "%s", format);
    else if (strcmp(format, "json") == 0) snprintf(fmt, sizeof fmt, "json+%s", describe_mode);
    else snprintf(fmt, sizeof fmt, "%s", describe_mode);
    char *text = tp_engine_describe_caller(e, fmt, decls, dlen);
    free(decls);
    if (text == NULL) {
      fprintf(stderr, "tidepool: describe failed: %s\n", tp_engine_error(e));
      tp_engine_destroy(e);
      return 1;
    }
    fputs(text, stdout);
    if (*text && text[strlen(text) - 1] != '\n') fputc('\n', stdout);
    tp_free(text);
    tp_engine_destroy(e);
    return 0;
  }
  if (file == NULL) {
    free(decls);
    tp_engine_destroy(e);
    return tp__options_usage_error("%s", "no FILE given (use - for standard input)");
  }
  if (caller_tools && (check || caller_cmd == NULL)) {
    free(decls);
    tp_engine_destroy(e);
    return tp__options_usage_error("%s", check ? "check does not take --caller-tools (run and "
                               "describe do)" : "--caller-tools needs --caller-cmd CMD, the "
                               "command that answers the calls");
  }
  if (lim.memory && lim.memory < 16 * 1024) {
    tp_engine_destroy(e);
    free(decls);
    return tp__options_usage_error("--memory is too small (at least 16K)%s", "");
  }

  FILE *f = strcmp(file, "-") == 0 ? stdin : fopen(file, "rb");
  if (f == NULL) {
    free(decls);
    fprintf(stderr, "tidepool: cannot open '%s': %s\n", file, strerror(errno));
    tp_engine_destroy(e);
    return EXIT_USAGE;
  }
  size_t len = 0;
  char *src = tp__options_read_all(f, &len);
  int read_errno = errno;
  if (f != stdin) fclose(f);
  if (src == NULL) {
    free(decls);
    fprintf(stderr, "tidepool: cannot read '%s': %s\n", file, strerror(read_errno));
    tp_engine_destroy(e);
    return EXIT_USAGE;
  }
  /* Loading plugins starts the host Lua state and compiles every plugin file: about 3 ms,
  ** three quarters of a trivial run. A script whose text never says "tools" cannot reach
  ** the tools table (short of building the name from pieces), so it runs without them. */
  /* The run's time limit covers the servers' start, which comes before it: the engine
  ** waits for them at most that long and counts the wait in the run (stats.wait_ms). */
  if (!check) tp_engine_set_start_timeout(e, lim.wall_us);
  int bad = (strict || caller_tools || memmem(src, len, "tools", 5) != NULL) &&
            load_tools(e, builtin_tools, dirs, ndirs, 1, strict, &rep) > 0 && strict;
  load_report_free(&rep);
  if (bad) {
    refused("tidepool: --strict", &rep);
    free(src);
    free(decls);
    tp_engine_destroy(e);
    return TP_EXIT_REFUSED;
  }
  char *envelope = NULL;
  int ok = 0;
  tp_run_opts ro = TP_RUN_OPTS_INIT;
  ro.limits = &lim;
  ro.check_only = check;
  ro.has_seed = det.has_seed && !check;
  ro.seed = det.seed;
  ro.has_clock = det.has_clock && !check;
  ro.clock_epoch = det.epoch;
  ro.clock_step_us = det.step_us;
  ro.traceparent = det.traceparent;
  int rc = decls && !check ? tp__caller_pipe_run(e, src, len, &lim, decls, dlen, caller_cmd,
                                                 &envelope, &ok)
         : tp_engine_run_with(e, src, len, &ro, &envelope, &ok);
  free(src);
  free(decls);
  if (rc == TP_EINVAL && caller_tools) {  /* the declarations, said already */
    tp_engine_destroy(e);
    return EXIT_USAGE;
  }
  if (rc != TP_OK) {
    fprintf(stderr, "tidepool: the engine failed (%d)\n", rc);
    tp_engine_destroy(e);
    return 1;
  }
  char *view = NULL;
  if (for_model && !check) view = tp__mcp_view_model(envelope, strlen(envelope), NULL);
  if (view) puts(view);
  else if (json_out || for_model) puts(envelope);
  else if (check && ok) printf("%s: ok\n", strcmp(file, "-") == 0 ? "standard input" : file);
  else print_human(envelope);
  free(view);
  tp_free(envelope);
  tp_engine_destroy(e);
  return ok ? 0 : EXIT_SCRIPT_FAILED;
}
