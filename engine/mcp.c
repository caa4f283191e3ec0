/*
** mcp.c: `tidepool mcp`, a Model Context Protocol server on standard input and output.
**
** One JSON-RPC 2.0 message (or batch) per line in, one per line out, on the engine's own
** libuv loop. Standard output carries protocol messages only: at startup the protocol
** gets a private duplicate of fd 1 and fd 1 itself is pointed at standard error, so
** nothing a plugin or the engine prints can reach the client. Logs go to standard error
** (and, at the client's logging level, as notifications/message).
**
** Requests are served concurrently: tools/call makes a run and hands it to the engine's
** driver (tp_run_start); its response goes out when the run finishes, while ping,
** tools/list and other scripts are answered in between. At most RUNS_MAX scripts run at
** once; more wait in order, and past WAITING_MAX waiting ones the server stops reading
** standard input until some finish (a flood costs memory only up to that point).
**
** Sessions: a call with a session id runs in that session's sandbox, so globals stay.
** At most --max-sessions exist; a new one evicts the least recently used idle session,
** or, when every session is busy, the call is refused (isError, code session.full).
** A session idle longer than --session-idle, or whose run hit limit.memory, is dropped;
** the model learns it from the "session" field of the next result with that id.
**
** Results: the envelope as structuredContent and the same JSON as a text block. A
** response line stays under the 10 MiB line limit of the reference client: past it the
** result and logs are cut (with a marker) and the envelope says so in "truncated".
**
** Standard input closing ends the server: every run is cancelled (without responses:
** nobody is left to read them), sessions and the engine are destroyed, exit status 0.
*/
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>
#include <uv.h>

#include "internal.h"
#include "json.h"
#include "mcp.h"

#define LINE_IN_MAX   (16u << 20)   /* a request line; longer ones are answered -32600 */
#define LINE_OUT_MAX  (10u << 20)   /* a response line (the reference client's limit) */
#define RUNS_MAX      64            /* scripts running at once */
#define WAITING_MAX   256           /* waiting scripts before reading pauses */
#define DROPPED_MAX   64            /* dropped session ids remembered, with why */
#define SESSION_ID_MAX 200

static const char *const versions[] = { "2025-11-25", "2025-06-18" };  /* latest first */

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
  "  --tools DIR          load the plugin tools of DIR (repeatable); DIR is watched and\n"
  "                       reloaded when it changes (notifications/tools/list_changed)\n"
  "  --no-builtin-tools   do not load the built-in tools\n"
  "  --workspace DIR      the directory the fs.* tools may use\n"
  "  --workspace-max SIZE how much the fs.* tools may grow it (default 1G)\n"
  "  --name NAME          the name of the script tool (default run_lua)\n"
  "  --expose-tools       also list every loaded tool as an MCP tool of its own\n"
  "  --session-idle DURATION  drop a session idle this long (default 10m)\n"
  "  --max-sessions N     sessions kept at once (default 16)\n"
  "  --memory SIZE --instructions N --cpu DURATION --timeout DURATION\n"
  "  --max-output SIZE --max-result SIZE --max-source SIZE --fs-quota SIZE\n"
  "                       limits of each script, as for tidepool run (a session's\n"
  "                       memory limit holds for the whole session)\n";

/* ---- state ------------------------------------------------------------------------- */

typedef struct options {
  tp_limits lim;
  const char **dirs;        /* --tools, in order */
  size_t ndirs;
  int builtin, expose, test_tools;
  const char *workspace, *name;
  uint64_t workspace_max;   /* --workspace-max, when workspace_max_set */
  int workspace_max_set;
  uint64_t session_idle_us;
  unsigned max_sessions;
} options;

typedef struct server server;
typedef struct session session;

/* The responses of one batch; sent as one array once no request of it is running. */
typedef struct batch {
  json_t *responses;
  int refs;
} batch;

struct session {
  session *prev, *next;
  char *id;
  tp_session *ts;
  int busy;
  uint64_t last_used_ns;
};

typedef struct req {
  struct req *prev, *next;  /* s->reqs (running) or s->waiting */
  server *s;
  json_t *id;
  batch *b;
  tp_run *run;              /* NULL while waiting */
  char *code;
  size_t codelen;
  char *tool;               /* the exposed tool called, or NULL for run_lua */
  session *sess;
  json_t *sess_info;        /* the "session" field of the result */
  json_t *token;            /* progressToken, or NULL */
  uint64_t progress;
  uint64_t serial;          /* for logs */
  int cancelled;
  uv_timer_t defer;         /* holds the response back after progress notifications */
  char *line;               /* the deferred response */
  size_t line_len;
} req;

struct server {
  tp_engine *e;
  uv_loop_t *loop;
  options o;
  int out;                  /* the protocol's fd (a duplicate of the original fd 1) */
  int out_broken;
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
  /* requests */
  req *reqs, *waiting, *waiting_tail;
  size_t nrunning, nwaiting;
  req *deferred;            /* answered, waiting for their defer timer */
  uint64_t serial;
  int initialized, level;
  /* sessions */
  session *sessions;
  size_t nsessions;
  char *dropped_id[DROPPED_MAX], *dropped_why[DROPPED_MAX];
  size_t dropped_next;
  uv_timer_t sweep;
  /* plugin directories */
  char *builtin_dir;
  uv_fs_event_t *watch;
  size_t nwatch;
  uv_timer_t reload_timer;
  int reload_pending;
  char *desc;               /* run_lua's description, cached */
};

static void log_msg(server *s, int level, const char *fmt, ...)
  __attribute__((format(printf, 3, 4)));

/* ---- output -------------------------------------------------------------------------- */

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

static void write_line (server *s, const char *text, size_t len) {
  char *buf = malloc(len + 1);
  if (buf == NULL) { write_all(s, text, len); write_all(s, "\n", 1); return; }
  memcpy(buf, text, len);
  buf[len] = '\n';
  write_all(s, buf, len + 1);
  free(buf);
}

/* Sends msg (stolen): into the batch b, or as a line of its own. */
static void send_msg (server *s, batch *b, json_t *msg) {
  if (msg == NULL) return;
  if (b != NULL) { json_array_append_new(b->responses, msg); return; }
  size_t len;
  char *text = tp_json_dumpsn(msg, &len);
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
  char msg[600];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  json_t *m = json_string(msg);
  if (m == NULL) m = json_string("error (message not valid UTF-8)");
  send_msg(s, b, json_pack("{s:s, s:o, s:{s:i, s:o}}", "jsonrpc", "2.0", "id", id_or_null(id),
                           "error", "code", code, "message", m));
}

static void notify (server *s, const char *method, json_t *params) {
  send_msg(s, NULL, json_pack("{s:s, s:s, s:o}", "jsonrpc", "2.0", "method", method,
                              "params", params ? params : json_object()));
}

static void log_msg (server *s, int level, const char *fmt, ...) {
  char msg[1000];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (level >= L_INFO || level >= s->level)
    fprintf(stderr, "tidepool mcp: %s: %s\n", levels[level], msg);
  if (!s->initialized || level < s->level) return;
  json_t *data = json_string(msg);
  if (data == NULL) return;
  notify(s, "notifications/message",
         json_pack("{s:s, s:s, s:o}", "level", levels[level], "logger", "tidepool", "data", data));
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
      "cancelled, session.*\"},"
      "\"message\":{\"type\":\"string\"},\"line\":{\"type\":\"integer\"},"
      "\"source\":{\"type\":\"string\"},\"hint\":{\"type\":\"string\"}},"
      "\"required\":[\"code\",\"message\"]},"
    "\"logs\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"description\":"
      "\"what the script printed\"},"
    "\"calls\":{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":{"
      "\"tool\":{\"type\":\"string\"},\"ok\":{\"type\":\"boolean\"},\"error\":{\"type\":"
      "\"string\"},\"ms\":{\"type\":\"number\"},\"line\":{\"type\":\"integer\"}}},"
      "\"description\":\"every tool call the script made, in order\"},"
    "\"stats\":{\"type\":\"object\",\"properties\":{\"cpu_ms\":{\"type\":\"number\"},"
      "\"wall_ms\":{\"type\":\"number\"},\"memory_peak\":{\"type\":\"integer\"},"
      "\"instructions\":{\"type\":\"integer\"}}},"
    "\"session\":{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"string\"},"
      "\"state\":{\"type\":\"string\",\"enum\":[\"new\",\"continued\",\"dropped\"]},"
      "\"message\":{\"type\":\"string\"}},\"description\":\"with a session id: whether "
      "the globals of earlier calls were there, and why not\"},"
    "\"truncated\":{\"type\":\"object\",\"description\":\"present when the result or logs "
      "were cut to fit a message\"}},"
    "\"required\":[\"ok\"]}", 0, &jerr);
  return s;
}

/* run_lua's description: the engine's generated one, or a plain fallback. */
static const char *run_lua_description (server *s) {
  if (s->desc) return s->desc;
  char *d = tp_engine_describe(s->e, "json");
  if (d != NULL && *d) {
    json_t *j = json_loads(d, 0, NULL);
    json_t *text = json_is_object(j) ? json_object_get(j, "description") : NULL;
    if (json_is_string(text)) s->desc = strdup(json_string_value(text));
    else if (j == NULL) s->desc = strdup(d);  /* plain text */
    json_decref(j);
  }
  free(d);
  if (s->desc) return s->desc;
  size_t cap = 4096, len;
  char *buf = malloc(cap);
  if (buf == NULL) return "Run a Lua 5.4 script in a sandbox.";
  len = (size_t)snprintf(buf, cap,
    "Run a Lua 5.4 script in a sandbox and get its result as JSON. Write one script "
    "instead of many tool calls: call tools as functions, e.g. local r = tools.name{arg = 1} "
    "(the call waits for the result; a failed call raises an error object with .code and "
    ".message, catch it with pcall). parallel(f1, f2, ...) runs functions at once and "
    "returns their results. print() goes to logs; json.encode, json.decode and json.null "
    "are available; tools.list() and tools.describe(name) show the tools. Return the value "
    "you want back. Pass the same `session` id in later calls to keep global variables.\n"
    "Tools:");
  for (size_t i = 0; i < s->e->ntools; i++) {
    const tp_tool *t = s->e->tools[i];
    size_t need = len + strlen(t->name) + strlen(t->description) + 16;
    if (need > cap) {
      char *nb = realloc(buf, need * 2);
      if (nb == NULL) break;
      buf = nb;
      cap = need * 2;
    }
    len += (size_t)snprintf(buf + len, cap - len, "\n- tools.%s: %s", t->name, t->description);
  }
  if (s->e->ntools == 0 && len + 8 < cap) len += (size_t)snprintf(buf + len, cap - len, " (none)");
  s->desc = buf;
  return s->desc;
}

static json_t *tool_list (server *s) {
  json_t *tools = json_array();
  json_t *input = json_pack(
    "{s:s, s:{s:{s:s, s:s}, s:{s:s, s:s}}, s:[s], s:b}", "type", "object", "properties",
    "code", "type", "string", "description", "The Lua script. Its return value is the result.",
    "session", "type", "string", "description", "Optional. Calls with the same id share "
    "global variables (a session), so a script can build on an earlier one.",
    "required", "code", "additionalProperties", 0);
  json_t *desc = json_string(run_lua_description(s));
  json_array_append_new(tools, json_pack("{s:s, s:s, s:o, s:o, s:o}", "name", s->o.name,
    "title", "Run a Lua script", "description", desc ? desc : json_string(""),
    "inputSchema", input, "outputSchema", envelope_schema()));
  if (s->o.expose) {
    for (size_t i = 0; i < s->e->ntools; i++) {
      const tp_tool *t = s->e->tools[i];
      if (strcmp(t->name, s->o.name) == 0) continue;
      json_t *in = json_is_object(t->input) ? json_deep_copy(t->input) : json_object();
      strip_dialect(in, 0);
      if (json_object_get(in, "type") == NULL) json_object_set_new(in, "type", json_string("object"));
      json_array_append_new(tools, json_pack("{s:s, s:s, s:o}", "name", t->name,
                                             "description", t->description, "inputSchema", in));
    }
  }
  return json_pack("{s:o}", "tools", tools);
}

/* ---- sessions ------------------------------------------------------------------------ */

static void remember_drop (server *s, const char *id, const char *why) {
  size_t k = s->dropped_next++ % DROPPED_MAX;
  free(s->dropped_id[k]);
  free(s->dropped_why[k]);
  s->dropped_id[k] = strdup(id);
  s->dropped_why[k] = strdup(why);
}

static const char *dropped_why (server *s, const char *id) {
  const char *why = NULL;
  for (size_t k = 0; k < DROPPED_MAX; k++)  /* the latest wins: scan all */
    if (s->dropped_id[k] && strcmp(s->dropped_id[k], id) == 0) why = s->dropped_why[k];
  return why;
}

static void forget_drop (server *s, const char *id) {
  for (size_t k = 0; k < DROPPED_MAX; k++)
    if (s->dropped_id[k] && strcmp(s->dropped_id[k], id) == 0) {
      free(s->dropped_id[k]);
      free(s->dropped_why[k]);
      s->dropped_id[k] = s->dropped_why[k] = NULL;
    }
}

static void session_drop (server *s, session *ss, const char *why) {
  if (why) {
    remember_drop(s, ss->id, why);
    log_msg(s, L_INFO, "session %s dropped: %s", ss->id, why);
  }
  if (ss->prev) ss->prev->next = ss->next;
  else s->sessions = ss->next;
  if (ss->next) ss->next->prev = ss->prev;
  s->nsessions--;
  tp_session_destroy(ss->ts);
  free(ss->id);
  free(ss);
}

static session *session_find (server *s, const char *id) {
  for (session *ss = s->sessions; ss; ss = ss->next)
    if (strcmp(ss->id, id) == 0) return ss;
  return NULL;
}

static void sweep_cb (uv_timer_t *t) {
  server *s = t->data;
  uint64_t now = tp__now_ns(), idle = s->o.session_idle_us * 1000u;
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

/* The session for a call, made if needed. NULL with *err (code) and msg set when the call
** cannot have it. info gets the "session" field of the result. */
static session *session_for (server *s, const char *id, json_t **info, const char **err,
                             char *msg, size_t msglen) {
  session *ss = session_find(s, id);
  if (ss != NULL) {
    if (ss->busy) {
      *err = "session.busy";
      snprintf(msg, msglen, "session \"%s\" is running another script; a session runs one "
               "script at a time: wait for that call's result, or use another session id", id);
      return NULL;
    }
    *info = json_pack("{s:s, s:s}", "id", id, "state", "continued");
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
  if (ss == NULL || (ss->id = strdup(id)) == NULL ||
      (ss->ts = tp_session_create(s->e, &s->o.lim)) == NULL) {
    if (ss) free(ss->id);
    free(ss);
    *err = "limit.memory";
    snprintf(msg, msglen, "the server is out of memory: no new session can be made");
    return NULL;
  }
  ss->next = s->sessions;
  if (s->sessions) s->sessions->prev = ss;
  s->sessions = ss;
  s->nsessions++;
  const char *why = dropped_why(s, id);
  if (why) {
    char m[500];
    snprintf(m, sizeof m, "session \"%s\" was dropped earlier because %s: this call started "
             "it afresh, and the globals of earlier calls are gone", id, why);
    *info = json_pack("{s:s, s:s, s:s}", "id", id, "state", "new", "message", m);
    forget_drop(s, id);
  }
  else *info = json_pack("{s:s, s:s}", "id", id, "state", "new");
  return ss;
}

/* ---- tool results ---------------------------------------------------------------------- */

static void batch_unref (server *s, batch *b);

/* Appends bytes to a growing buffer; -1 when out of memory. */
typedef struct sbuf { char *p; size_t len, cap; int oom; } sbuf;
static void sb_put (sbuf *b, const char *s, size_t n) {
  if (b->oom) return;
  if (b->len + n + 1 > b->cap) {
    size_t ncap = (b->len + n + 1) * 2;
    char *np = realloc(b->p, ncap);
    if (np == NULL) { b->oom = 1; return; }
    b->p = np;
    b->cap = ncap;
  }
  memcpy(b->p + b->len, s, n);
  b->len += n;
  b->p[b->len] = '\0';
}
static void sb_str (sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }
static void sb_json (sbuf *b, const json_t *v) {
  size_t n;
  char *t = tp_json_dumpsn(v, &n);
  if (t == NULL) { b->oom = 1; return; }
  sb_put(b, t, n);
  free(t);
}
/* text as a JSON string (text is valid UTF-8: it came out of a JSON encoder) */
static void sb_quoted (sbuf *b, const char *s, size_t n) {
  static const char hex[] = "0123456789abcdef";
  sb_put(b, "\"", 1);
  size_t run = 0;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c >= 0x20 && c != '"' && c != '\\') { run++; continue; }
    sb_put(b, s + i - run, run);
    run = 0;
    if (c == '"') sb_put(b, "\\\"", 2);
    else if (c == '\\') sb_put(b, "\\\\", 2);
    else if (c == '\n') sb_put(b, "\\n", 2);
    else {
      char u[6] = { '\\', 'u', '0', '0', hex[c >> 4], hex[c & 15] };
      sb_put(b, u, 6);
    }
  }
  sb_put(b, s + n - run, run);
  sb_put(b, "\"", 1);
}

/* Cuts the envelope's result and logs so the response fits LINE_OUT_MAX. Returns new
** envelope text (caller frees), or NULL when out of memory. */
static char *truncate_envelope (const char *env, size_t len, size_t budget) {
  json_t *j = tp_json_loads(env, len, NULL);
  if (j == NULL) return NULL;
  json_t *note = json_object();
  json_t *result = json_object_get(j, "result");
  if (result != NULL) {
    size_t n;
    char *text = tp_json_dumpsn(result, &n);
    if (text && n > budget / 2) {
      size_t keep = budget / 2;
      while (keep > 0 && ((unsigned char)text[keep] & 0xc0) == 0x80) keep--;
      char marker[200];
      snprintf(marker, sizeof marker, " ...[truncated by tidepool: the result is %zu bytes "
               "of JSON; this string holds its first %zu]", n, keep);
      text[keep] = '\0';
      sbuf b = { 0 };
      sb_put(&b, text, keep);
      sb_str(&b, marker);
      json_t *cut = b.oom ? NULL : json_stringn(b.p, b.len);
      free(b.p);
      if (cut) {
        json_object_set_new(j, "result", cut);
        json_object_set_new(note, "result_bytes", json_integer((json_int_t)n));
      }
    }
    free(text);
  }
  json_t *logs = json_object_get(j, "logs");
  if (json_is_array(logs)) {
    size_t used = 0, i, keep = json_array_size(logs);
    json_t *v;
    json_array_foreach(logs, i, v) {
      used += json_string_length(v) + 4;
      if (used > budget / 4) { keep = i; break; }
    }
    size_t dropped = json_array_size(logs) - keep;
    if (dropped > 0) {
      while (json_array_size(logs) > keep) json_array_remove(logs, keep);
      char marker[200];
      snprintf(marker, sizeof marker, "...[truncated by tidepool: %zu more log lines left "
               "out to fit the message size limit]", dropped);
      json_array_append_new(logs, json_string(marker));
      json_object_set_new(note, "logs_dropped", json_integer((json_int_t)dropped));
    }
  }
  json_t *calls = json_object_get(j, "calls");
  if (json_is_array(calls) && json_array_size(calls) > 2000) {
    size_t dropped = json_array_size(calls) - 2000;
    while (json_array_size(calls) > 2000) json_array_remove(calls, 2000);
    json_object_set_new(note, "calls_dropped", json_integer((json_int_t)dropped));
  }
  json_object_set_new(note, "message", json_string("The result was too large for one MCP "
    "message (10 MiB) and was cut. Return less data: a summary, a count, or the first items."));
  json_object_set_new(j, "truncated", note);
  char *out = tp_json_dumps(j);
  json_decref(j);
  return out;
}

/* The tools/call response of a run_lua call: envelope (compact JSON, ending in '}') as
** structuredContent and text, plus the session field. Caller frees. */
static char *call_response (const json_t *id, const char *env, size_t len, int ok,
                            const json_t *sess_info, size_t *outlen) {
  char *owned = NULL;
  if (sess_info != NULL && len > 0 && env[len - 1] == '}') {
    sbuf e = { 0 };
    sb_put(&e, env, len - 1);
    sb_str(&e, ",\"session\":");
    sb_json(&e, sess_info);
    sb_str(&e, "}");
    if (!e.oom) { owned = e.p; env = owned; len = e.len; }
    else free(e.p);
  }
  for (int attempt = 0; attempt < 3; attempt++) {
    sbuf b = { 0 };
    sb_str(&b, "{\"id\":");
    sb_json(&b, id);
    sb_str(&b, ",\"jsonrpc\":\"2.0\",\"result\":{\"content\":[{\"type\":\"text\",\"text\":");
    sb_quoted(&b, env, len);
    sb_str(&b, "}],\"isError\":");
    sb_str(&b, ok ? "false" : "true");
    sb_str(&b, ",\"structuredContent\":");
    sb_put(&b, env, len);
    sb_str(&b, "}}");
    if (b.oom) { free(b.p); break; }
    if (b.len < LINE_OUT_MAX - 1024 || attempt == 2) {
      free(owned);
      *outlen = b.len;
      return b.p;
    }
    free(b.p);
    /* too large: the text block is at most 2x the envelope, so aim at a third */
    size_t budget = (LINE_OUT_MAX - 65536) / (attempt == 0 ? 3 : 6);
    char *cut = truncate_envelope(env, len, budget);
    if (cut == NULL) break;
    free(owned);
    owned = cut;
    env = cut;
    len = strlen(cut);
  }
  free(owned);
  return NULL;
}

/* An envelope for a call refused before any script ran. */
static char *refusal_envelope (const char *code, const char *msg) {
  json_t *env = json_pack("{s:b, s:{s:s, s:s}, s:[], s:[]}", "ok", 0, "error", "code", code,
                          "message", msg, "logs", "calls");
  char *t = env ? tp_json_dumps(env) : NULL;
  json_decref(env);
  return t;
}

static void respond_text (server *s, batch *b, const char *line, size_t len) {
  if (b == NULL) { write_line(s, line, len); return; }
  json_t *j = tp_json_loads(line, len, NULL);
  if (j) json_array_append_new(b->responses, j);
}

static void refuse_call (server *s, batch *b, json_t *id, const char *code, const char *msg,
                         const json_t *sess_info) {
  char *env = refusal_envelope(code, msg);
  if (env == NULL) { send_error(s, b, id, -32603, "out of memory"); return; }
  size_t len;
  char *line = call_response(id, env, strlen(env), 0, sess_info, &len);
  free(env);
  if (line) respond_text(s, b, line, len);
  else send_error(s, b, id, -32603, "out of memory");
  free(line);
}

/* The response of an exposed tool: the tool's result itself. */
static char *exposed_response (const json_t *id, const char *env, size_t len, int ok,
                               size_t *outlen) {
  if (!ok) return call_response(id, env, len, 0, NULL, outlen);
  json_t *j = tp_json_loads(env, len, NULL);
  json_t *result = j ? json_object_get(j, "result") : NULL;
  if (result == NULL) { json_decref(j); return call_response(id, env, len, 1, NULL, outlen); }
  size_t n;
  char *text = tp_json_dumpsn(result, &n);
  sbuf b = { 0 };
  sb_str(&b, "{\"id\":");
  sb_json(&b, id);
  sb_str(&b, ",\"jsonrpc\":\"2.0\",\"result\":{\"content\":[{\"type\":\"text\",\"text\":");
  if (text) sb_quoted(&b, text, n);
  else sb_str(&b, "\"\"");
  sb_str(&b, "}],\"isError\":false");
  if (json_is_object(result) && text) {
    sb_str(&b, ",\"structuredContent\":");
    sb_put(&b, text, n);
  }
  sb_str(&b, "}}");
  free(text);
  json_decref(j);
  if (b.oom || b.len >= LINE_OUT_MAX - 1024) {
    free(b.p);
    return call_response(id, env, len, 1, NULL, outlen);  /* truncated envelope */
  }
  *outlen = b.len;
  return b.p;
}

/* ---- runs ----------------------------------------------------------------------------- */

static void start_waiting(server *s);
static void maybe_reload(server *s);
static void resume_input(server *s);

static void req_free (server *s, req *q) {
  json_decref(q->id);
  json_decref(q->token);
  json_decref(q->sess_info);
  free(q->code);
  free(q->tool);
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

static void progress_hook (tp_run *r, const char *tool, int done, void *ud) {
  (void)r;
  req *q = ud;
  if (q->cancelled || q->token == NULL) return;
  char msg[200];
  snprintf(msg, sizeof msg, "tools.%.150s %s", tool ? tool : "?", done ? "returned" : "called");
  notify(q->s, "notifications/progress",
         json_pack("{s:O, s:I, s:s}", "progressToken", q->token, "progress",
                   (json_int_t)++q->progress, "message", msg));
}

static void deferred_closed (uv_handle_t *h) {
  req *q = h->data;
  req_free(q->s, q);
}

/* Sends a deferred response and frees its request. */
static void defer_flush (server *s, req *q) {
  list_remove(&s->deferred, q);
  write_line(s, q->line, q->line_len);
  free(q->line);
  q->line = NULL;
  uv_close((uv_handle_t *)&q->defer, deferred_closed);
}

static void defer_cb (uv_timer_t *t) {
  req *q = t->data;
  defer_flush(q->s, q);
}

static void run_done (tp_run *run, void *ud) {
  req *q = ud;
  server *s = q->s;
  tp__run_set_call_hook(run, NULL, NULL);
  list_remove(&s->reqs, q);
  s->nrunning--;
  const char *env = tp_run_envelope(run);
  size_t len = env ? strlen(env) : 0;
  int ok = env && strncmp(env, "{\"ok\":true", 10) == 0;
  session *ss = q->sess;
  int drop = 0;
  if (ss != NULL) {
    ss->busy = 0;
    ss->last_used_ns = tp__now_ns();
    static const char mem[] = "{\"ok\":false,\"error\":{\"code\":\"limit.memory\"";
    if (!ok && env && strncmp(env, mem, sizeof mem - 1) == 0) {
      drop = 1;
      json_decref(q->sess_info);
      q->sess_info = json_pack("{s:s, s:s, s:s}", "id", ss->id, "state", "dropped",
        "message", "the session was dropped because the script went over the session's "
        "memory limit: its globals are gone, and the next call with this id starts afresh");
    }
  }
  char *line = NULL;
  size_t n = 0;
  if (!q->cancelled && env != NULL) {
    line = q->tool ? exposed_response(q->id, env, len, ok, &n)
                   : call_response(q->id, env, len, ok, q->sess_info, &n);
    if (line == NULL) send_error(s, q->b, q->id, -32603, "out of memory building the result");
  }
  log_msg(s, L_DEBUG, "request %llu %s", (unsigned long long)q->serial,
          q->cancelled ? "cancelled" : ok ? "succeeded" : "failed");
  tp_run_destroy(run);
  if (drop) session_drop(s, ss, "its script went over the session's memory limit");
  if (line != NULL && q->progress > 0 && q->b == NULL &&
      uv_timer_init(s->loop, &q->defer) == 0) {
    /* The reference client handles notifications a tick after the response that arrives
    ** in the same read, and drops progress for a request already answered: send the
    ** response a moment after the last progress notification. */
    q->line = line;
    q->line_len = n;
    q->defer.data = q;
    q->next = s->deferred;
    if (s->deferred) s->deferred->prev = q;
    s->deferred = q;
    uv_timer_start(&q->defer, defer_cb, 5, 0);
  }
  else {
    if (line) respond_text(s, q->b, line, n);
    free(line);
    req_free(s, q);
  }
  start_waiting(s);
  maybe_reload(s);
  resume_input(s);
}

static void start_req (server *s, req *q) {
  tp_run *run = q->sess ? tp_session_run(q->sess->ts, q->code, q->codelen)
                        : tp_run_create(s->e, q->code, q->codelen, &s->o.lim);
  if (run == NULL) {
    if (q->sess) q->sess->busy = 0;
    refuse_call(s, q->b, q->id, "limit.memory", "the server is out of memory", q->sess_info);
    req_free(s, q);
    return;
  }
  q->run = run;
  q->next = s->reqs;
  if (s->reqs) s->reqs->prev = q;
  s->reqs = q;
  s->nrunning++;
  if (q->token) tp__run_set_call_hook(run, progress_hook, q);
  if (q->token)
    notify(s, "notifications/progress",
           json_pack("{s:O, s:I, s:s}", "progressToken", q->token, "progress",
                     (json_int_t)++q->progress, "message", "script started"));
  if (tp_run_start(run, run_done, q) != TP_OK) {
    tp_run_cancel(run);
    run_done(run, q);
  }
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
  if (s->waiting_tail) s->waiting_tail->next = q;
  else s->waiting = q;
  s->waiting_tail = q;
  s->nwaiting++;
}

/* 'return tools["a"]["b"](json.decode("ARGS"))': an exposed tool's call as a script (the
** name's parts may be Lua keywords, so they are indexed as strings). */
static char *exposed_script (const char *name, const json_t *args, size_t *len) {
  size_t n;
  char *text = tp_json_dumpsn(args, &n);
  if (text == NULL) return NULL;
  sbuf b = { 0 };
  sb_str(&b, "return tools[\"");
  for (const char *p = name; *p; p++) {
    if (*p == '.') sb_str(&b, "\"][\"");
    else sb_put(&b, p, 1);
  }
  sb_str(&b, "\"](json.decode(\"");
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)text[i];
    char esc[8];
    if (c == '"' || c == '\\' || c < 0x20 || c == 0x7f) {
      snprintf(esc, sizeof esc, "\\%03u", c);
      sb_str(&b, esc);
    }
    else sb_put(&b, (const char *)&text[i], 1);
  }
  sb_str(&b, "\"))");
  free(text);
  if (b.oom) { free(b.p); return NULL; }
  *len = b.len;
  return b.p;
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
  const char *name = json_string_value(jname);
  int is_run = strcmp(name, s->o.name) == 0;
  if (!is_run && !(s->o.expose && tp__tool_find(s->e, name))) {
    send_error(s, b, id, -32602, "Unknown tool: %.200s (tools/list lists the tools)", name);
    return;
  }
  req *q = calloc(1, sizeof *q);
  if (q == NULL) { send_error(s, b, id, -32603, "out of memory"); return; }
  q->s = s;
  q->serial = ++s->serial;
  q->id = json_deep_copy(id);
  json_t *meta = json_object_get(params, "_meta");
  json_t *token = json_is_object(meta) ? json_object_get(meta, "progressToken") : NULL;
  if (json_is_string(token) || json_is_integer(token)) q->token = json_deep_copy(token);
  if (is_run) {
    json_t *code = json_object_get(args, "code");
    json_t *sid = json_object_get(args, "session");
    const char *bad = NULL;
    if (!json_is_string(code))
      bad = code ? "arguments.code must be a string: the Lua script"
                 : "arguments.code is missing: pass the Lua script as {\"code\": \"...\"}";
    else if (sid != NULL && !json_is_null(sid) &&
             (!json_is_string(sid) || json_string_length(sid) == 0 ||
              json_string_length(sid) > SESSION_ID_MAX))
      bad = "arguments.session must be a non-empty string of at most 200 bytes, or left out";
    if (bad) {
      refuse_call(s, b, id, "tool.invalid_input", bad, NULL);
      req_free(s, q);
      return;
    }
    q->codelen = json_string_length(code);
    q->code = malloc(q->codelen + 1);
    if (q->code) memcpy(q->code, json_string_value(code), q->codelen + 1);
    if (json_is_string(sid)) {
      const char *err = NULL;
      char msg[400];
      q->sess = session_for(s, json_string_value(sid), &q->sess_info, &err, msg, sizeof msg);
      if (q->sess == NULL) {
        refuse_call(s, b, id, err, msg, NULL);
        req_free(s, q);
        return;
      }
      q->sess->busy = 1;
      q->sess->last_used_ns = tp__now_ns();
    }
  }
  else {
    q->tool = strdup(name);
    json_t *empty = json_object();
    q->code = exposed_script(name, json_is_object(args) ? args : empty, &q->codelen);
    json_decref(empty);
  }
  if (q->code == NULL) {
    if (q->sess) q->sess->busy = 0;
    send_error(s, b, id, -32603, "out of memory");
    req_free(s, q);
    return;
  }
  if (b) { q->b = b; b->refs++; }
  enqueue(s, q);
}

static void cancel_request (server *s, json_t *rid) {
  if (rid == NULL) return;
  for (req *q = s->reqs; q; q = q->next) {
    if (!json_equal(q->id, rid) || q->cancelled) continue;
    q->cancelled = 1;  /* no response; run_done frees it when the driver reports */
    tp_run_cancel(q->run);
    log_msg(s, L_DEBUG, "request %llu cancelled: its run stopped", (unsigned long long)q->serial);
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

/* ---- plugin directories ------------------------------------------------------------- */

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

static void load_dir (server *s, const char *dir, int quiet_if_empty) {
  if (quiet_if_empty && !has_lua_files(dir)) return;
  int n = tp_engine_load_tools(s->e, dir);
  const char *err = tp_engine_error(s->e);
  if (n < 0) log_msg(s, L_WARNING, "tools from %s not loaded: %s", dir, err);
  else if (err && *err) log_msg(s, L_WARNING, "tools from %s: %s", dir, err);
}

static void load_all (server *s) {
  if (s->builtin_dir) load_dir(s, s->builtin_dir, 1);
  for (size_t i = 0; i < s->o.ndirs; i++) load_dir(s, s->o.dirs[i], 0);
  free(s->desc);
  s->desc = NULL;
}

/* Tools are replaced only while no script runs (calls point at their tools). */
static void maybe_reload (server *s) {
  if (!s->reload_pending || s->nrunning > 0 || s->done) return;
  s->reload_pending = 0;
  size_t before = s->e->ntools;
  tp__engine_drop_plugin_tools(s->e);
  load_all(s);
  log_msg(s, L_INFO, "plugin tools reloaded: %zu tools (%zu before)", s->e->ntools, before);
  if (s->initialized) notify(s, "notifications/tools/list_changed", NULL);
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

/* ---- test tools (--test-tools, for the test suites and the benchmark) --------------------
** test.echo returns its arguments; test.sleep{ms=} completes after ms milliseconds on the
** engine's loop, or at once with an error once its run is cancelled. */

typedef struct sleeper {
  uv_timer_t t;
  tp_call *c;
  struct sleeper *next;
  int ms;
} sleeper;
static sleeper *sleepers;

static void echo_fn (tp_call *c, void *ud) {
  (void)ud;
  tp_call_complete(c, tp_call_args(c), 0);
}

static void sleeper_closed (uv_handle_t *h) { free(h->data); }

static void sleeper_unlink (sleeper *z) {
  for (sleeper **p = &sleepers; *p; p = &(*p)->next)
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
    char out[64];
    snprintf(out, sizeof out, "{\"slept\":true}");
    tp_call_complete(z->c, out, 0);
  }
  uv_timer_stop(t);
  sleeper_unlink(z);
  uv_close((uv_handle_t *)t, sleeper_closed);
}

static void sleep_fn (tp_call *c, void *ud) {
  tp_engine *e = ud;
  json_t *args = json_loads(tp_call_args(c), 0, NULL);
  json_int_t ms = json_integer_value(json_object_get(args, "ms"));
  json_decref(args);
  sleeper *z = calloc(1, sizeof *z);
  if (z == NULL) { tp_call_fail(c, "tool.failed", "out of memory"); return; }
  z->c = c;
  z->ms = (int)ms;
  z->t.data = z;
  uv_timer_init(tp__engine_loop(e), &z->t);
  uv_timer_start(&z->t, sleep_tick, 10, 10);  /* polls for cancellation every 10 ms */
  z->next = sleepers;
  sleepers = z;
}

static void sleepers_stop (void) {
  while (sleepers) {
    sleeper *z = sleepers;
    sleepers = z->next;
    uv_timer_stop(&z->t);
    tp_call_fail(z->c, "tool.failed", "the server is stopping");
    uv_close((uv_handle_t *)&z->t, sleeper_closed);
  }
}

static int add_test_tools (tp_engine *e) {
  tp_tool_def echo = { "test.echo", "Returns its arguments.", NULL, NULL, echo_fn, NULL, 0 };
  tp_tool_def slp = { "test.sleep", "Waits ms milliseconds, then returns {slept = true}.",
    "{\"type\":\"object\",\"properties\":{\"ms\":{\"type\":\"integer\",\"minimum\":0,"
    "\"maximum\":60000}},\"required\":[\"ms\"]}",
    "{\"type\":\"object\",\"properties\":{\"slept\":{\"type\":\"boolean\"}}}", sleep_fn, e, 0 };
  if (tp_engine_add_tool(e, &echo) != TP_OK || tp_engine_add_tool(e, &slp) != TP_OK) return -1;
  return 0;
}

/* ---- messages -------------------------------------------------------------------------- */

static int level_of (const char *name) {
  for (int i = 0; i < (int)(sizeof levels / sizeof levels[0]); i++)
    if (strcmp(levels[i], name) == 0) return i;
  return -1;
}

static void handle_request (server *s, batch *b, json_t *id, const char *method, json_t *params) {
  if (params != NULL && !json_is_object(params)) {
    send_error(s, b, id, -32602, "Invalid params: %s takes an object", method);
    return;
  }
  if (strcmp(method, "initialize") == 0) {
    json_t *v = json_object_get(params, "protocolVersion");
    const char *want = json_string_value(v), *use = versions[0];
    for (size_t i = 0; want && i < sizeof versions / sizeof versions[0]; i++)
      if (strcmp(want, versions[i]) == 0) use = versions[i];
    char instructions[300];
    snprintf(instructions, sizeof instructions, "Call the %s tool with one Lua script that "
             "calls the tools it needs (tools.name{...}) and returns only the data you need; "
             "its description lists the tools.", s->o.name);
    s->initialized = 1;
    send_result(s, b, id, json_pack(
      "{s:s, s:{s:{s:b}, s:{}}, s:{s:s, s:s, s:s}, s:s}", "protocolVersion", use,
      "capabilities", "tools", "listChanged", 1, "logging",
      "serverInfo", "name", "tidepool", "title", "tidepool (code mode: sandboxed Lua)",
      "version", tp_version(),
      "instructions", instructions));
  }
  else if (strcmp(method, "ping") == 0) send_result(s, b, id, NULL);
  else if (strcmp(method, "tools/list") == 0) send_result(s, b, id, tool_list(s));
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
  if (!json_is_string(jr) || strcmp(json_string_value(jr), "2.0") != 0) {
    send_error(s, b, id, -32600, "Invalid Request: \"jsonrpc\" must be \"2.0\"");
    return;
  }
  if (method == NULL) {
    if (id != NULL && (json_object_get(msg, "result") || json_object_get(msg, "error")))
      return;  /* a response; this server sends no requests, so it answers none */
    send_error(s, b, id, -32600, "Invalid Request: \"method\" is missing");
    return;
  }
  if (!json_is_string(method)) {
    send_error(s, b, id, -32600, "Invalid Request: \"method\" must be a string");
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

static void handle_line (server *s, char *line, size_t len) {
  while (len > 0 && (line[len - 1] == '\r' || line[len - 1] == ' ' || line[len - 1] == '\t'))
    len--;
  size_t i = 0;
  while (i < len && (line[i] == ' ' || line[i] == '\t')) i++;
  if (i == len) return;  /* blank lines are skipped */
  tp_json_err jerr;
  json_t *msg = tp_json_loads(line + i, len - i, &jerr);
  if (msg == NULL) {
    send_error(s, NULL, NULL, -32700, "Parse error: %s", jerr.message);
    return;
  }
  if (json_is_array(msg)) {
    if (json_array_size(msg) == 0) {
      send_error(s, NULL, NULL, -32600, "Invalid Request: an empty batch");
      json_decref(msg);
      return;
    }
    batch *b = calloc(1, sizeof *b);
    if (b == NULL || (b->responses = json_array()) == NULL) {
      free(b);
      send_error(s, NULL, NULL, -32603, "out of memory");
      json_decref(msg);
      return;
    }
    b->refs = 1;
    size_t k;
    json_t *m;
    json_array_foreach(msg, k, m) handle_message(s, b, m);
    batch_unref(s, b);
  }
  else handle_message(s, NULL, msg);
  json_decref(msg);
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
  shutdown_server(s);
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

static void shutdown_server (server *s) {
  if (s->done) return;
  s->done = 1;
  stop_reading(s);
  while (s->reqs) {
    req *q = s->reqs;
    list_remove(&s->reqs, q);
    s->nrunning--;
    q->cancelled = 1;
    tp__run_set_call_hook(q->run, NULL, NULL);
    tp_run_cancel(q->run);
    if (q->sess) q->sess->busy = 0;
    tp_run_destroy(q->run);
    req_free(s, q);
  }
  while (s->waiting) {
    req *q = s->waiting;
    list_remove(&s->waiting, q);
    req_free(s, q);
  }
  s->waiting_tail = NULL;
  s->nwaiting = 0;
  while (s->deferred) defer_flush(s, s->deferred);
  while (s->sessions) session_drop(s, s->sessions, NULL);
  sleepers_stop();
}

int tp__mcp_main (int argc, char **argv) {
  static server srv;
  server *s = &srv;
  options *o = &s->o;
  tp_limits_init(&o->lim);
  o->builtin = 1;
  o->name = "run_lua";
  o->session_idle_us = 600u * 1000000u;
  o->max_sessions = 16;
  o->dirs = calloc((size_t)argc + 1, sizeof *o->dirs);
  if (o->dirs == NULL) return 1;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) { fputs(usage_text, stdout); return 0; }
    if (strcmp(a, "--no-builtin-tools") == 0) { o->builtin = 0; continue; }
    if (strcmp(a, "--expose-tools") == 0) { o->expose = 1; continue; }
    if (strcmp(a, "--test-tools") == 0) { o->test_tools = 1; continue; }
    if (a[0] != '-') return tp__cli_usage_error("tidepool mcp takes no file ('%s')", a);
    char name[64];
    const char *name_end = tp__cli_option_name(a, name, sizeof name);
    if (name_end == NULL) return tp__cli_usage_error("unknown option '%s'", a);
    static const char *const with_value[] = { "--tools", "--workspace", "--name",
      "--session-idle", "--max-sessions", "--memory", "--instructions", "--cpu", "--timeout",
      "--max-output", "--max-result", "--max-source", "--fs-quota", "--workspace-max" };
    int known = 0;
    for (size_t k = 0; k < sizeof with_value / sizeof with_value[0]; k++)
      known |= strcmp(name, with_value[k]) == 0;
    if (!known) return tp__cli_usage_error("unknown option '%s'", a);
    const char *val = *name_end == '=' ? name_end + 1 : i + 1 < argc ? argv[++i] : NULL;
    if (val == NULL) return tp__cli_usage_error("option '%s' needs a value", a);
    const char *why = NULL;
    int lo = tp__cli_limit_option(name, val, &o->lim, &why);
    if (lo < 0) return tp__cli_usage_error(why, val);
    if (lo > 0) continue;
    if (strcmp(name, "--tools") == 0) {
      struct stat st;
      if (stat(val, &st) != 0 || !S_ISDIR(st.st_mode))
        return tp__cli_usage_error("--tools: '%s' is not a directory", val);
      o->dirs[o->ndirs++] = val;
    }
    else if (strcmp(name, "--workspace") == 0) {
      struct stat st;
      if (stat(val, &st) != 0 || !S_ISDIR(st.st_mode))
        return tp__cli_usage_error("--workspace: '%s' is not a directory", val);
      o->workspace = val;
    }
    else if (strcmp(name, "--workspace-max") == 0) {
      if (tp__cli_parse_size(val, &o->workspace_max) != 0)
        return tp__cli_usage_error("bad size '%s' (use bytes or a suffix: 512K, 64M, 1G)", val);
      o->workspace_max_set = 1;
    }
    else if (strcmp(name, "--name") == 0) {
      size_t n = strlen(val);
      if (n == 0 || n > 64 || strspn(val, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                     "0123456789_-.") != n)
        return tp__cli_usage_error("--name: '%s' is not a tool name (letters, digits, _ - .)", val);
      o->name = val;
    }
    else if (strcmp(name, "--session-idle") == 0) {
      if (tp__cli_parse_duration(val, &o->session_idle_us) != 0)
        return tp__cli_usage_error("bad duration '%s' (use 500ms, 2s, 10m)", val);
    }
    else if (strcmp(name, "--max-sessions") == 0) {
      char *end;
      errno = 0;
      unsigned long n = strtoul(val, &end, 10);
      if (errno || *end || end == val || *val == '-' || n > 100000)
        return tp__cli_usage_error("bad session count '%s'", val);
      o->max_sessions = (unsigned)n;
    }
    else return tp__cli_usage_error("unknown option '%s'", a);
  }
  if (o->lim.memory && o->lim.memory < 16 * 1024)
    return tp__cli_usage_error("--memory is too small (at least 16K)%s", "");

  /* The protocol keeps the real standard output; fd 1 becomes standard error. */
  signal(SIGPIPE, SIG_IGN);
  fflush(stdout);
  s->out = fcntl(1, F_DUPFD_CLOEXEC, 3);
  if (s->out < 0 || dup2(2, 1) < 0) {
    fprintf(stderr, "tidepool mcp: cannot set up standard output: %s\n", strerror(errno));
    return 1;
  }
  s->level = L_INFO;
  s->e = tp_engine_create();
  if (s->e == NULL) { fprintf(stderr, "tidepool mcp: out of memory\n"); return 1; }
  s->loop = tp__engine_loop(s->e);
  if (o->workspace_max_set) tp_engine_set_workspace_max(s->e, o->workspace_max);
  if (o->workspace && tp_engine_set_workspace(s->e, o->workspace) != TP_OK)
    log_msg(s, L_WARNING, "--workspace %s: %s", o->workspace, tp_engine_error(s->e));
  if (o->test_tools && add_test_tools(s->e) != 0)
    log_msg(s, L_WARNING, "test tools: %s", tp_engine_error(s->e));
  if (o->builtin) {
    char buf[4200];
    s->builtin_dir = strdup(tp__cli_builtin_tools_dir(buf, sizeof buf));
  }
  load_all(s);
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
  open_input(s);
  fprintf(stderr, "tidepool mcp %s: serving on standard input/output (%zu tools)\n",
          tp_version(), s->e->ntools);
  start_reading(s);

  while (!s->done) {
    if (uv_run(s->loop, UV_RUN_ONCE) == 0 && !s->done) shutdown_server(s);
  }

  /* close our handles, then the engine */
  for (size_t i = 0; i < s->nwatch; i++) uv_close((uv_handle_t *)&s->watch[i], NULL);
  uv_close((uv_handle_t *)&s->reload_timer, NULL);
  uv_close((uv_handle_t *)&s->sweep, NULL);
  if (s->in_open) uv_close((uv_handle_t *)&s->in, NULL);
  if (s->in_file && s->reading) uv_cancel((uv_req_t *)&s->fsreq);
  uv_run(s->loop, UV_RUN_NOWAIT);
  tp_engine_destroy(s->e);
  free(s->watch);
  free(s->line);
  free(s->stash);
  free(s->desc);
  free(s->builtin_dir);
  for (size_t k = 0; k < DROPPED_MAX; k++) { free(s->dropped_id[k]); free(s->dropped_why[k]); }
  free(o->dirs);
  close(s->out);
  return 0;
}
