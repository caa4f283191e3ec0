/*
** worker.c: a worker of `tidepool mcp` (see worker.h and server.c's opening comment): one
** thread with its own engine, its runs time-sliced on that engine's driver.
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

#include "clock.h"
#include "tidepool.h"
#include "options.h"
#include "state.h"
#include "mail.h"
#include "pause.h"
#include "worker.h"
#include "ui.h"

static void worker_begin(worker *w, job *q, tp_run *run);

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
      tp__mcp_mail_log(w, L_WARNING, "--expose-tools: tool %s is listed as %s: %s was taken",
                       t->name,
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

/* ---- test tools (--test-tools, for the test suites and the benchmark) --------------------
** test.echo returns its arguments; test.sleep{ms=} completes after ms milliseconds on the
** worker's loop, or at once with an error once its run is cancelled. */

struct tp__mcp_sleeper {
  uv_timer_t t;
  tp_call *c;
  worker *w;
  struct tp__mcp_sleeper *next;
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
  tp_tool_def echo = { .name = "test.echo", .description = "Returns its arguments.",
                       .handler = echo_fn };
  tp_tool_def slp = {
    .name = "test.sleep",
    .description = "Waits ms milliseconds, then returns {slept = true}.",
    .input_schema = "{\"type\":\"object\",\"properties\":{\"ms\":{\"type\":\"integer\","
                    "\"minimum\":0,\"maximum\":60000}},\"required\":[\"ms\"]}",
    .output_schema = "{\"type\":\"object\",\"properties\":{\"slept\":{\"type\":\"boolean\"}}}",
    .handler = sleep_fn, .ud = w };
  if (tp_engine_add_tool(w->e, &echo) != TP_OK || tp_engine_add_tool(w->e, &slp) != TP_OK)
    return -1;
  return 0;
}

/* ---- the worker side ------------------------------------------------------------------- */

static void wreq_remove (worker *w, job *q) {
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
  job *q = ud;
  if (!done && tool && (q->w->s->o.asks || q->callers)) {  /* a paused result's "calls" */
    if (q->seen == NULL) q->seen = json_object();
    json_int_t had = json_integer_value(json_object_get(q->seen, tool));
    json_object_set_new(q->seen, tool, json_integer(had + 1));
  }
  if (q->state == TP__MCP_JOB_CANCELLED || q->token == NULL) return;
  char text[200];
  snprintf(text, sizeof text, "tools.%.150s %s", tool ? tool : "?", done ? "returned" : "called");
  tp__mcp_mail_line(q, tp__mcp_mail_notification("notifications/progress",
        json_pack("{s:O, s:I, s:s}", "progressToken", q->token, "progress",
                  (json_int_t)++q->progress, "message", text)));
}

/* A tool's own progress report (ctx.progress; proc.run's output lines), as a progress
** notification "tools.<tool>: <text>" (text cut at 500 bytes). */
static void progress_text_hook (tp_run *r, const char *tool, const char *text, void *ud) {
  (void)r;
  job *q = ud;
  if (q->state == TP__MCP_JOB_CANCELLED || q->token == NULL) return;
  char msg[680];
  snprintf(msg, sizeof msg, "tools.%.150s: %.500s", tool ? tool : "?", text);
  json_t *m = json_string(msg);
  if (m == NULL) m = json_string("tools: (a progress report that is not UTF-8)");
  tp__mcp_mail_line(q, tp__mcp_mail_notification("notifications/progress",
        json_pack("{s:O, s:I, s:o}", "progressToken", q->token, "progress",
                  (json_int_t)++q->progress, "message", m)));
}

/* One line of the audit log (--audit): when, the session, the tool called (run_lua or an
** exposed tool), ok, the error's code, and the envelope's full calls record and stats.
** One write(2) of the whole line to a file opened O_APPEND, so the workers' lines never
** interleave. */

/* Writes line (consumed) to the audit log as one write(2). */
static void audit_line (worker *w, json_t *line) {
  size_t n;
  char *text = line ? tp_json_text(line, &n) : NULL;
  if (text) {
    text[n] = '\n';  /* tp_json_text's NUL: the buffer holds n + 1 bytes */
    ssize_t wr = write(w->s->audit_fd, text, n + 1);
    if (wr != (ssize_t)(n + 1)) tp__mcp_mail_log(w, L_WARNING,
                                                 "--audit: could not write the audit log");
  }
  free(text);
  json_decref(line);
}

/* One line of the audit log per decision of the config's policy (tp_engine_on_decision):
** {"event": "decision", time, session, worker, run, seq, tool, principal, rule (null for
** the default), effect, clause, args_sha256}. The arguments' values are never written. */
/* tp_engine_on_tools_changed: an upstream server's tools came late or changed; the
** protocol thread re-lists every worker's tools and tells the clients (M_TOOLS). */
static void tools_changed (void *ud) {
  worker *w = ud;
  mail *m = tp__mcp_mail_new(M_TOOLS);
  if (m == NULL) return;  /* out of memory: the clients hear of it at the next reload */
  m->w = w;
  tp__mcp_mail_post(&w->s->mb, m);
}

static void audit_decision (tp_run *r, const tp_decision *d, void *ud) {
  worker *w = ud;
  const job *q = w->running;
  while (q && q->run != r) q = q->wnext;
  json_t *sid = q && q->sess_info ? json_object_get(q->sess_info, "id") : NULL;
  char when[80];
  tp__mcp_iso_time(when, sizeof when);
  json_t *line = json_pack("{s:s, s:s, s:O, s:I, s:I, s:I, s:s, s:s, s:o, s:s, s:s, s:s}",
    "event", "decision", "time", when, "session", sid ? sid : json_null(),
    "worker", (json_int_t)w->index, "run", (json_int_t)d->run, "seq", (json_int_t)d->seq,
    "tool", d->tool, "principal", d->principal,
    "rule", d->rule >= 0 ? json_integer(d->rule) : json_null(), "effect", d->effect,
    "clause", d->clause, "args_sha256", d->args_sha256);
  audit_line(w, line);
}

static void audit_write (worker *w, const job *q, const char *env, size_t len) {
  server *s = w->s;
  if (s->audit_fd < 0 || env == NULL) return;
  json_t *j = tp__mcp_view_parse(env, len);
  char when[80];
  tp__mcp_iso_time(when, sizeof when);
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
  job *q = ud;
  worker *w = q->w;
  tp_run_on_call(run, NULL, NULL);
  tp_run_on_progress(run, NULL, NULL);
  wreq_remove(w, q);
  tp__mcp_pause_apx_end(w, q, 0, "the run ended before a person decided");
  tp__mcp_pause_dur_end(w, q);
  int ended_parked = q->state == TP__MCP_JOB_PARKED;
  if (ended_parked) tp__mcp_pause_job_to(q, TP__MCP_JOB_CANCELLED);  /* nobody waits for
                                                                    ** its result */
  const char *env = tp_run_envelope(run);
  size_t len = env ? strlen(env) : 0;
  int ok = tp_run_ok(run);
  if (q->sess_num) {
    static const char mem[] = "{\"ok\":false,\"error\":{\"code\":\"limit.memory\"";
    if (!ok && env && strncmp(env, mem, sizeof mem - 1) == 0) {
      q->drop = TP__MCP_DROP_MEMORY;
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
  if (w->s->o.ui) q->m.summary = tp__mcp_ui_summary(run, env);  /* the operator page's */
  if (q->state != TP__MCP_JOB_CANCELLED) {
    if (env == NULL) q->line = tp__mcp_view_minimal(q->id, 0, "limit.memory", &q->line_len);
    else q->line = q->tool ? tp__mcp_view_exposed(q->id, env, len, ok, q->tool, q->mcp_name,
                                                  q->args, q->budget, &q->line_len)
                           : tp__mcp_view_call(q->id, env, len, ok, q->sess_info, q->budget,
                                           &q->line_len);
  }
  tp_run_destroy(run);
  q->run = NULL;
  if (q->drop != TP__MCP_DROP_NONE) wsess_drop(w, q->sess_num);
  tp__mcp_pause_done(w, q, ended_parked);
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
static void worker_run (worker *w, job *q);
static void session_claimed (void *ud, int outcome, const char *holder, const char *err) {
  job *q = ud;
  worker *w = q->w;
  if (w->stopping) return;  /* the protocol thread frees the request after the join */
  json_t *sid = json_object_get(q->sess_info, "id");
  const char *id = json_string_value(sid) ? json_string_value(sid) : "";
  char msg[1400];
  if (outcome == TP_CLAIM_FAILED)
    tp__mcp_mail_log(w, L_WARNING, "the session's claim in the state store failed (%s): run here",
                     err);
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
  q->drop = TP__MCP_DROP_MOVED;
  q->line = tp__mcp_view_refusal(q->id, "session.moved", msg, q->sess_info, q->budget,
                             &q->line_len);
  tp__mcp_pause_done(w, q, 0);
}

/* Caller tools the engine refused (a bad declaration, a name it has a tool of). */
static void callers_refused (worker *w, job *q) {
  char msg[900];
  snprintf(msg, sizeof msg, "_meta[\"tidepool/callerTools\"]: %s", tp_engine_error(w->e));
  q->line = tp__mcp_view_refusal(q->id, "tool.invalid_input", msg, q->sess_info, q->budget,
                             &q->line_len);
  tp__mcp_pause_done(w, q, 0);
}

static void worker_run (worker *w, job *q) {
  tp_run *run = NULL;
  if (q->restore) { tp__mcp_pause_dur_load(w,
                                           q); return; }  /* a paused run of an earlier process */
  const tp_limits *lim = q->has_lim ? &q->lim : &w->s->o.lim;
  if (q->sess_num && w->s->owner && q->state == TP__MCP_JOB_NEW) {
    tp__mcp_pause_job_to(q, TP__MCP_JOB_CLAIMING);
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
      if (tp_session_declare_caller_tools((*p)->ts, q->callers, 0, tp__mcp_pause_caller_call,
                                          tp__mcp_pause_caller_cancel,
                                          w) != TP_OK) {
        callers_refused(w, q);
        return;
      }
    }
    if (*p) run = tp_session_run((*p)->ts, q->code, q->codelen);
  }
  else run = tp_run_create(w->e, q->code, q->codelen, lim);
  if (run && q->callers && !(q->callers_session && q->sess_num) &&
      tp_run_declare_caller_tools(run, q->callers, 0, tp__mcp_pause_caller_call,
                                  tp__mcp_pause_caller_cancel, w) != TP_OK) {
    tp_run_destroy(run);
    callers_refused(w, q);
    return;
  }
  if (run == NULL) {
    q->line = tp__mcp_view_refusal(q->id, "limit.memory", "the server is out of memory: the "
                               "script could not start", q->sess_info, q->budget, &q->line_len);
    tp__mcp_pause_done(w, q, 0);
    return;
  }
  /* a run that may pause (approvals, or caller tools: answered by resume_run, or live,
  ** whose calls a restart turns into a paused run's) is kept in the store while paused */
  if (w->s->o.state && (w->s->o.asks || q->callers))
    tp__mcp_pause_dur_begin(w, q, run);
  worker_begin(w, q, run);
}

/* Starts q's run (new, or made from the store). */
static void worker_begin (worker *w, job *q, tp_run *run) {
  q->run = run;
  tp__mcp_pause_job_to(q, TP__MCP_JOB_RUNNING);
  if (q->principal && q->scopes) tp_run_set_principal(run, q->principal, q->scopes);
  if (q->traceparent) tp_run_set_traceparent(run, q->traceparent);  /* a wrong one: own trace */
  tp_run_trace_attr(run, "tidepool.principal", q->principal ? q->principal : "");
  json_t *tsid = q->sess_info ? json_object_get(q->sess_info, "id") : NULL;
  if (json_is_string(tsid)) tp_run_trace_attr(run, "tidepool.session", json_string_value(tsid));
  if (q->tool) tp_run_set_caller(run, TP_CALLER_DIRECT);  /* an exposed tool's call */
  q->wnext = w->running;
  if (w->running) w->running->wprev = q;
  w->running = q;
  if (w->s->o.asks || q->callers) tp_run_on_call(run, progress_hook, q);  /* counts calls */
  if (q->token) {
    tp_run_on_call(run, progress_hook, q);
    tp_run_on_progress(run, progress_text_hook, q);
    tp__mcp_mail_line(q, tp__mcp_mail_notification("notifications/progress",
          json_pack("{s:O, s:I, s:s}", "progressToken", q->token, "progress",
                    (json_int_t)++q->progress, "message", "script started")));
  }
  if (tp_run_start(run, run_done, q) != TP_OK) {
    tp_run_cancel(run);
    run_done(run, q);
  }
}

typedef struct tp__mcp_load_ctx { worker *w; const char *dir; } load_ctx;

/* A plugin refused: one warning each (notifications/message and standard error). */
static void load_problem (const char *problem, void *ud) {
  load_ctx *lc = ud;
  tp__mcp_mail_log(lc->w, L_WARNING, "tools from %s: refused: %s", lc->dir, problem);
}

static void load_dir (worker *w, const char *dir, int quiet_if_empty) {
  if (quiet_if_empty && !has_lua_files(dir)) return;
  load_ctx lc = { w, dir };
  /* every worker loads the same files: one reports */
  int n = tp_engine_load_tools_cb(w->e, dir, w->index == 0 ? load_problem : NULL, &lc);
  if (w->index == 0 && n < 0)
    tp__mcp_mail_log(w, L_WARNING, "tools from %s not loaded: %s", dir, tp_engine_error(w->e));
}

/* Loads the plugin directories and tells the protocol thread (M_READY). */
void tp__mcp_worker_load (worker *w) {
  server *s = w->s;
  load_ctx lc = { w, "mcpServers" };  /* each worker's engine has the servers of its own */
  tp_engine_start_servers(w->e, w->index == 0 ? load_problem : NULL, &lc);
  if (s->builtin_dir) load_dir(w, s->builtin_dir, 1);
  for (size_t i = 0; i < s->o.ndirs; i++) load_dir(w, s->o.dirs[i], 0);
  free(w->desc);
  w->desc = NULL;
  mail *m = tp__mcp_mail_new(M_READY);
  if (m == NULL) { fprintf(stderr, "tidepool mcp: out of memory\n"); return; }
  m->w = w;
  if (w->index == 0) {
    if (run_lua_description(w) == NULL) {
      const char *err = tp_engine_error(w->e);
      tp__mcp_mail_log(w, L_ERROR, "run_lua's description could not be made: %s",
           *err ? err : "out of memory");
      m->fail = 2;
    }
    m->text = tools_report(w);
    m->len = tp_engine_tool_count(w->e);
  }
  tp__mcp_mail_post(&s->mb, m);
}

/* Stops everything of the worker: its runs without responses, its sandboxes. The
** protocol thread frees the requests after joining the worker. */
static void worker_stop (worker *w) {
  w->stopping = 1;
  uv_stop(w->loop);  /* tp__mcp_worker_main's uv_run returns */
  while (w->running) {
    job *q = w->running;
    wreq_remove(w, q);
    tp_run_on_call(q->run, NULL, NULL);
    tp_run_cancel(q->run);
    tp__mcp_pause_apx_end(w, q, 1, "the server is stopping");
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
  tp__mcp_mail_box_close(&w->mb);
}

static void worker_mail (void *data) {
  worker *w = data;
  for (mail *m = tp__mcp_mail_take_all(&w->mb), *next; m; m = next) {
    next = m->next;
    if (w->stopping) { tp__mcp_mail_free(m); continue; }
    switch (m->kind) {
    case M_RUN: worker_run(w, m->jb); continue;  /* m is the job's: it may be gone */
    case M_CANCEL:
      for (job *q = w->running; q; q = q->wnext)
        if (q->serial == m->n) {
          tp__mcp_pause_job_to(q, TP__MCP_JOB_CANCELLED);  /* run_done sends no line */
          tp_run_cancel(q->run);
          break;
        }
      break;
    case M_DROP: wsess_drop(w, m->n); break;
    case M_RESUME: tp__mcp_pause_resume(w, m); break;
    case M_ANSWER: tp__mcp_pause_elicit_answer(w, m->text, m->len); break;
    case M_RELOAD:
      tp_engine_unload_tools(w->e);  /* TP_ESTATE while runs are alive */
      tp__mcp_worker_load(w);
      break;
    case M_STOP: worker_stop(w); break;
    }
    tp__mcp_mail_free(m);
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
      tp__mcp_mail_log(w, L_WARNING,
                       "the server's lease could not be renewed in the state store (%s): "
           "once it lapses (--lease), other servers take over its sessions", err);
    w->lease_failing = 1;
    uv_timer_start(&w->lease, lease_cb, 500, 0);
    return;
  }
  if (outcome == TP_CLAIM_HELD && !w->lease_failing)
    tp__mcp_mail_log(w, L_ERROR,
                     "another process holds the lease of this server's name (%s): give each "
         "server its own --advertise", holder);
  if (w->lease_failing && outcome == TP_CLAIM_WON)
    tp__mcp_mail_log(w, L_INFO, "the server's lease is renewed again");
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

/* The worker engine's logger (tp_engine_on_log), on the worker's thread: each message goes
** to the protocol thread by mail (M_LOG, its source as the logger), which prints it and
** sends it to the client as notifications/message at the client's level. */
static void worker_log (void *ud, tp_log_level level, const char *source, const char *message) {
  worker *w = ud;
  int l = level <= TP_LOG_ERROR ? L_ERROR : level == TP_LOG_WARN ? L_WARNING
        : level == TP_LOG_DEBUG ? L_DEBUG : L_INFO;
  mail *m = tp__mcp_mail_new(M_LOG);
  if (m == NULL || (m->text = strdup(message)) == NULL ||
      (source && (m->logger = strdup(source)) == NULL)) {
    tp__mcp_mail_free(m);
    tp_log_stderr(NULL, level, source, message);  /* out of memory: said at least here */
    return;
  }
  m->w = w;
  m->level = l;
  tp__mcp_mail_post(&w->s->mb, m);
}

/* Makes the worker's engine; on its own thread when threaded. 0, or -1. */
int tp__mcp_worker_open (worker *w) {
  w->begin = worker_begin;
  server *s = w->s;
  w->e = tp_engine_create();
  if (w->e == NULL) return -1;
  tp_engine_on_log(w->e, worker_log, w);
  tp_engine_metrics_on(w->e);  /* /metrics sums the workers' (server.c, tp_metrics_text) */
  tp_engine_set_store(w->e, s->kv);  /* before anything starts its host state */
  if (s->o.config && tp_engine_configure_dir(w->e, s->o.config, s->o.config_len,
                                             s->o.config_dir) != TP_OK) {
    if (w->index == 0)  /* checked before the workers started: out of memory */
      tp__options_config_problems(stderr, "tidepool: ", s->o.config_path, tp_engine_error(w->e));
    tp_engine_destroy(w->e);
    w->e = NULL;
    return -1;
  }
  tp_engine_on_tools_changed(w->e, tools_changed, w);
  if (s->audit_fd >= 0) {
    tp_engine_on_decision(w->e, audit_decision, w);
    tp_engine_audit_calls(w->e, s->audit_fd);  /* the call journal: tidepool audit show */
  }
  else if (s->journal_fd >= 0)  /* --state's own journal (main.c) */
    tp_engine_audit_calls(w->e, s->journal_fd);
  /* --otlp and --trace-file over the config's telemetry section (checked in main.c) */
  if (s->o.otlp && tp_engine_trace_otlp(w->e, s->o.otlp) != TP_OK && w->index == 0)
    tp__mcp_mail_log(w, L_WARNING, "--otlp %s: %s", s->o.otlp, tp_engine_error(w->e));
  if (s->o.trace_file && tp_engine_trace_file(w->e, s->o.trace_file) != TP_OK && w->index == 0)
    tp__mcp_mail_log(w, L_WARNING, "--trace-file %s: %s", s->o.trace_file, tp_engine_error(w->e));
  if (s->o.asks) tp_engine_on_approval(w->e, tp__mcp_pause_on_approval, w);
  w->loop = tp_engine_loop(w->e);
  if (tp__mcp_mail_box_init(&w->mb, w->loop, worker_mail, w) != 0) {
    tp_engine_destroy(w->e);
    w->e = NULL;
    return -1;
  }
  if (s->o.workspace_max_set) tp_engine_set_workspace_max(w->e, s->o.workspace_max);
  if (s->o.workspace && tp_engine_set_workspace(w->e, s->o.workspace) != TP_OK && w->index == 0)
    tp__mcp_mail_log(w, L_WARNING, "--workspace %s: %s", s->o.workspace, tp_engine_error(w->e));
  if (s->o.test_tools && add_test_tools(w) != 0 && w->index == 0)
    tp__mcp_mail_log(w, L_WARNING, "test tools: %s", tp_engine_error(w->e));
  if (w->index == 0 && s->owner && uv_timer_init(w->loop, &w->lease) == 0) {
    w->lease.data = w;
    w->lease_on = 1;
    lease_cb(&w->lease);
  }
  return 0;
}

void tp__mcp_worker_close (worker *w) {
  if (w->e == NULL) return;
  if (!w->stopping) worker_stop(w);
  tp_engine_destroy(w->e);  /* runs the loop until the mailbox's handle is closed */
  w->e = NULL;
  free(w->desc);
  w->desc = NULL;
  tp__mcp_mail_box_destroy(&w->mb);
}

void *tp__mcp_worker_main (void *arg) {
  worker *w = arg;
  if (tp__mcp_worker_open(w) != 0) {
    mail *m = tp__mcp_mail_new(M_READY);
    if (m) { m->w = w; m->fail = 1; tp__mcp_mail_post(&w->s->mb, m); }
    return NULL;
  }
  tp__mcp_worker_load(w);
  /* UV_RUN_DEFAULT, not a loop of UV_RUN_ONCE: libuv decides whether a ONCE turn may
  ** block before its idle phase, so a turn that steps a ready run (the driver's idle
  ** handle) ends with a poll that cannot block, and the next turn polls again: a system
  ** call more for every tool call's answer */
  while (!w->stopping) uv_run(w->loop, UV_RUN_DEFAULT);
  tp__mcp_worker_close(w);
  return NULL;
}

