/*
** ui.c: the server's side of the operator page (see ui.h). What a run did comes from the
** engine (tp_run_timeline: when each call started, waited for a person and ended); what
** a paused run waits on comes from the paused result its client got, so the page offers
** exactly the calls, and the bindings, that resume_run would take.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "tidepool.h"
#include "tidepool_server.h"
#include "approve.h"
#include "options.h"
#include "ui.h"

#define UI_EXCERPT_MAX 600  /* bytes of a run's result or error message kept */

typedef struct tp__mcp_uirun {
  json_t *j;                /* {serial, run, principal, session, tool, finished, ok, ...} */
} uirun;

struct tp__mcp_ui {
  uirun runs[TP__MCP_UI_RUNS_MAX];
  size_t next, n;           /* the ring: runs[next] is the next to be written */
};

tp__mcp_ui *tp__mcp_ui_new (void) { return calloc(1, sizeof(tp__mcp_ui)); }

void tp__mcp_ui_free (tp__mcp_ui *u) {
  if (u == NULL) return;
  for (size_t i = 0; i < TP__MCP_UI_RUNS_MAX; i++) json_decref(u->runs[i].j);
  free(u);
}

/* The error code an envelope starts with ({"ok":false,"error":{"code":"..."), or NULL. */
static json_t *envelope_code (const char *env) {
  static const char pre[] = "{\"ok\":false,\"error\":{\"code\":\"";
  if (env == NULL || strncmp(env, pre, sizeof pre - 1) != 0) return NULL;
  const char *c = env + sizeof pre - 1, *e = strchr(c, '"');
  if (e == NULL || e - c > 64) return NULL;
  return json_stringn(c, (size_t)(e - c));
}

char *tp__mcp_ui_summary (tp_run *run, const char *env) {
  size_t n = 0;
  char *tl = tp_run_timeline(run, &n);
  json_t *j = tl ? tp_json_parse(tl, n, NULL, 0) : NULL;
  tp_free(tl);
  if (j == NULL) j = json_object();
  if (j == NULL) return NULL;
  int ok = tp_run_ok(run);
  json_object_set_new(j, "ok", json_boolean(ok));
  json_t *code = ok ? NULL : envelope_code(env);
  if (!ok) json_object_set_new(j, "code",
                               code ? code : json_string(env ? "error" : "limit.memory"));
  /* the result or the error's message, cut to UI_EXCERPT_MAX bytes, for a glance */
  json_t *e = env ? tp_json_parse(env, strlen(env), NULL, 0) : NULL;
  json_t *what = ok ? json_object_get(e, "result")
                    : json_object_get(json_object_get(e, "error"), "message");
  char *t = what ? (json_is_string(what) ? strdup(json_string_value(what))
                                         : tp_json_text(what, NULL)) : NULL;
  if (t && strlen(t) > UI_EXCERPT_MAX) {
    size_t cut = UI_EXCERPT_MAX;
    while (cut > 0 && ((unsigned char)t[cut] & 0xC0) == 0x80) cut--;  /* a UTF-8 boundary */
    strcpy(t + cut, "...[cut]");
  }
  if (t) json_object_set_new(j, ok ? "result" : "message", json_string(t));
  free(t);
  json_decref(e);
  char *text = tp_json_text(j, NULL);
  json_decref(j);
  return text;
}

void tp__mcp_ui_done (tp__mcp_ui *u, req *q) {
  json_t *sum = q->ui_summary ? tp_json_parse(q->ui_summary, strlen(q->ui_summary), NULL, 0)
                              : NULL;
  free(q->ui_summary);
  q->ui_summary = NULL;
  if (sum == NULL) return;  /* not a run (a restore that never ran), or out of memory */
  const char *sid = q->sess ? q->sess->id : NULL;
  json_object_set_new(sum, "serial", json_integer((json_int_t)q->serial));
  json_object_set_new(sum, "run", json_string(q->run_id));
  json_object_set_new(sum, "principal", json_string(q->principal ? q->principal : ""));
  json_object_set_new(sum, "session", sid ? json_string(sid) : json_null());
  json_object_set_new(sum, "tool", json_string(q->tool ? q->tool : q->s->o.name));
  json_object_set_new(sum, "finished", json_integer(tp__mcp_wall_ms()));
  json_object_set_new(sum, "cancelled", json_boolean(q->state == TP__MCP_RQ_CANCELLED));
  uirun *slot = &u->runs[u->next];
  json_decref(slot->j);
  slot->j = sum;
  u->next = (u->next + 1) % TP__MCP_UI_RUNS_MAX;
  if (u->n < TP__MCP_UI_RUNS_MAX) u->n++;
}

/* The pending calls of a 2026-07-28 input_required result: the bindings from its
** requestState (sealed by this server for the run's principal: opened with the same
** secret), the tool, arguments and reason from the question asked for each
** (tp__mcp_approve_elicit_params' message). NULL when it cannot be read. */
static json_t *input_required_pending (const req *q, const json_t *result) {
  json_t *rs = json_object_get(result, "requestState");
  json_t *inputs = json_object_get(result, "inputRequests");
  int code;
  char why[300];
  json_t *st = json_is_string(rs) ? tp__mcp_approve_open(json_string_value(rs),
    json_string_length(rs), q->principal ? q->principal : "", &code, why, sizeof why) : NULL;
  json_t *out = st ? json_array() : NULL;
  size_t i;
  json_t *c;
  json_array_foreach(json_object_get(st, "calls"), i, c) {
    json_int_t seq = json_integer_value(json_object_get(c, "seq"));
    char key[40];
    snprintf(key, sizeof key, "approve-%lld", (long long)seq);
    const char *m = json_string_value(json_object_get(json_object_get(
      json_object_get(inputs, key), "params"), "message"));
    static const char pre[] = "A script wants to call tools.", mid[] = ". Approve this call? (";
    const char *with = m && strncmp(m, pre, sizeof pre - 1) == 0 ? strstr(m, " with ") : NULL;
    const char *ask = NULL;
    for (const char *p = with ? strstr(with, mid) : NULL; p; p = strstr(p + 1, mid)) ask = p;
    if (ask == NULL) continue;  /* not a question of this server's: not offered */
    json_t *e = json_pack("{s:I, s:s%, s:o, s:s%, s:O}", "seq", seq, "tool", m + sizeof pre - 1,
      (size_t)(with - m - (sizeof pre - 1)), "args", json_null(), "reason",
      ask + sizeof mid - 1, strlen(ask + sizeof mid - 1) - 1, "binding",
      json_object_get(c, "binding"));
    if (e) json_object_set_new(e, "args_text", json_stringn(with + 6, (size_t)(ask - with - 6)));
    json_array_append_new(out, e);
  }
  json_decref(st);
  return out;
}

void tp__mcp_ui_parked (req *q, const char *line, size_t len) {
  json_t *msg = tp_json_parse(line, len, NULL, 0);
  json_t *sc = json_object_get(json_object_get(msg, "result"), "structuredContent");
  json_t *pending = json_object_get(sc, "pending");
  const char *rt = json_string_value(json_object_get(json_object_get(msg, "result"),
                                                     "resultType"));
  if (rt && strcmp(rt, "input_required") == 0) {
    json_decref(q->ui_pending);
    q->ui_pending = input_required_pending(q, json_object_get(msg, "result"));
  }
  else if (json_is_array(pending)) {
    json_decref(q->ui_pending);
    q->ui_pending = json_is_array(pending) ? json_incref(pending) : NULL;
  }  /* else a refusal of a resume (a bad decision): the run waits on the same calls */
  json_decref(msg);
}

/* A pending call as the page shows it: its arguments as JSON text, cut to 2,000 bytes. */
static json_t *page_pending (const json_t *p) {
  json_t *e = json_deep_copy(p);
  if (e == NULL) return NULL;
  json_object_del(e, "binding");  /* the page posts seq; the server finds the binding */
  const char *shown = json_string_value(json_object_get(p, "args_text"));  /* as asked */
  char *args = shown ? strdup(shown) : tp_json_text(json_object_get(p, "args"), NULL);
  if (args && strlen(args) > 2000) strcpy(args + 1990, "...[cut]");
  json_object_set_new(e, "args", json_string(args ? args : "null"));
  free(args);
  return e;
}

json_t *tp__mcp_ui_snapshot (server *s) {
  tp__mcp_ui *u = s->ui;
  json_t *runs = json_array(), *paused = json_array();
  json_t *root = runs && paused ? json_pack("{s:o, s:o}", "runs", runs, "paused", paused) : NULL;
  if (root == NULL) { json_decref(runs); json_decref(paused); return NULL; }
  for (size_t k = 1; u && k <= u->n; k++) {
    uirun *r = &u->runs[(u->next + TP__MCP_UI_RUNS_MAX - k) % TP__MCP_UI_RUNS_MAX];
    if (r->j) json_array_append(runs, r->j);
  }
  size_t npaused = 0;
  for (req *q = s->parked; q; q = q->next) {
    npaused++;
    json_t *pend = json_array();
    size_t i;
    json_t *p;
    json_array_foreach(q->ui_pending, i, p) json_array_append_new(pend, page_pending(p));
    const char *sid = q->sess ? q->sess->id : NULL;
    json_array_append_new(paused, json_pack("{s:s, s:I, s:s, s:o, s:s, s:o, s:b}",
      "run", q->run_id, "serial", (json_int_t)q->serial, "principal",
      q->principal ? q->principal : "", "session", sid ? json_string(sid) : json_null(),
      "tool", q->tool ? q->tool : s->o.name, "pending", pend, "decidable",
      q->ui_pending != NULL));
  }
  json_object_set_new(root, "running", json_integer((json_int_t)s->nrunning));
  json_object_set_new(root, "waiting", json_integer((json_int_t)s->nwaiting));
  json_object_set_new(root, "sessions", json_integer((json_int_t)s->nsessions));
  json_object_set_new(root, "workers", json_integer((json_int_t)s->nworkers));
  /* the call journal (--audit's file, or --state's own): what runs did before a crash */
  char *jpath = s->o.audit ? NULL : tp__options_journal_path(s->o.state);
  const char *journal = s->o.audit ? s->o.audit : jpath;
  if (journal) json_object_set_new(root, "journal", json_string(journal));
  free(jpath);
  return root;
}

/* One line of the --audit log: {"event": "operator_decision", time, run, seq, tool,
** approve, principal (the operator), run_principal}. Never an argument's value. */
static void audit (server *s, const req *q, long long seq, const char *tool, int approve,
                   const char *operator_name) {
  if (s->audit_fd < 0) return;
  char when[64];
  tp__mcp_iso_time(when, sizeof when);
  json_t *line = json_pack("{s:s, s:s, s:s, s:I, s:s, s:b, s:s, s:o}", "event",
    "operator_decision", "time", when, "run", q->run_id, "seq", (json_int_t)seq,
    "tool", tool ? tool : "?",
    "approve", approve, "principal", operator_name, "run_principal",
    q->principal ? json_string(q->principal) : json_null());
  size_t n;
  char *text = line ? tp_json_text(line, &n) : NULL;
  if (text) {
    text[n] = '\n';  /* tp_json_text's NUL: n + 1 bytes, one write(2) on O_APPEND */
    ssize_t wr = write(s->audit_fd, text, n + 1);
    (void)wr;
  }
  free(text);
  json_decref(line);
}

int tp__mcp_ui_decision (server *s, req *q, const char *run, long long seq, int approve,
                         const char *note, const char *operator_name, json_t **args,
                         char *why, size_t whylen) {
  *args = NULL;
  if (q == NULL) {
    snprintf(why, whylen, "there is no paused run \"%.60s\" here: it was decided, it ended, "
             "or it waits on another server", run);
    return 404;
  }
  if (q->ui_pending == NULL) {
    snprintf(why, whylen, "run %s waits on calls this page cannot read: decide it in its "
             "client", run);
    return 409;
  }
  size_t i;
  json_t *p, *found = NULL;
  json_array_foreach(q->ui_pending, i, p) {
    if (json_integer_value(json_object_get(p, "seq")) == seq &&
        json_object_get(p, "kind") == NULL)  /* an approval, not a caller tool's call */
      found = p;
  }
  if (found == NULL) {
    snprintf(why, whylen, "run %s does not wait for a decision on call %lld", run, seq);
    return 404;
  }
  json_t *d = json_pack("{s:I, s:b, s:O}", "seq", (json_int_t)seq, "approve", approve,
                        "binding", json_object_get(found, "binding"));
  if (d && note && *note) json_object_set_new(d, "note", json_string(note));
  *args = d ? json_pack("{s:s, s:[o]}", "run", run, "decisions", d) : NULL;
  if (*args == NULL) {
    snprintf(why, whylen, "out of memory");
    return 500;
  }
  audit(s, q, seq, json_string_value(json_object_get(found, "tool")), approve, operator_name);
  return 0;
}
