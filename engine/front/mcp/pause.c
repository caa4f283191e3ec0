/*
** pause.c: a run that waits for an outside answer (see pause.h): a held call (an
** approval decision, an elicitation's answer), its paused record, durable runs (--state)
** and their restore.
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

typedef struct tp__mcp_pend {
  struct tp__mcp_pend *next;
  tp_call *c;
  uint64_t seq;
  char *tool, *args, *reason;
  char binding[TP__MCP_APPROVE_BINDING_LEN];
  char eid[64];             /* its elicitation (or tidepool/callTool) request's id, or "" */
  int call;                 /* a caller tool's call, held for the client's answer (its
                            ** result), not for a person's approval */
  char *line;               /* a live call of a stored run: its tidepool/callTool request,
                            ** sent once a save whose record has it is done (live_send) */
  size_t line_len;
  int rec;                  /* in a record of the run: 0 in none yet, 1 in the save under
                            ** way's, 2 in a save that is done */
  json_t *answer;           /* the client's answer, applied once the record says "running" */
} pend;

typedef struct tp__mcp_apx {
  job *q;                   /* NULL once its run ended (the timer is closing) */
  uv_timer_t t;             /* parks the run, then ends it at --pause-ttl */
  pend *pending;            /* held calls, by seq */
  char run_id[TP__MCP_APPROVE_RUN_ID_MAX];
} apx;

/* The one way a job's state changes, as curl's multi.c has multistate(): a paused run's
** wall clock is held exactly while its job is PARKED (M_PARK went, M_RESUME not applied). */
void tp__mcp_pause_job_to (job *q, tp__mcp_job_state st) {
  if (q->state == st) return;
  if (q->run && (q->state == TP__MCP_JOB_PARKED) != (st == TP__MCP_JOB_PARKED))
    tp_run_hold_wall(q->run, st == TP__MCP_JOB_PARKED);
  q->state = st;
}

static int dur_bad (const job *q) {
  return q->dur == TP__MCP_DUR_BAD || q->dur == TP__MCP_DUR_BAD_SAVED;
}

static int dur_stored (const job *q) {
  return q->dur == TP__MCP_DUR_SAVED || q->dur == TP__MCP_DUR_BAD_SAVED;
}

static void pend_free (pend *p) {
  free(p->line);
  json_decref(p->answer);
  free(p->tool);
  free(p->args);
  free(p->reason);
  free(p);
}

/* Whether a holds a call that only resume_run can answer: an approval not being asked
** by elicitation, or a caller tool's call in paused mode (a live one is asked already). */
static int waits_on_resume (const apx *a) {
  for (const pend *p = a->pending; p; p = p->next)
    if (p->eid[0] == '\0') return 1;
  return 0;
}

static void pend_unlink (apx *a, pend *p) {
  for (pend **pp = &a->pending; *pp; pp = &(*pp)->next)
    if (*pp == p) { *pp = p->next; return; }
}

/* p's binding, made when first needed: a live caller tool's call is answered by its
** request's id and needs none unless its run pauses with it pending (an HMAC costs
** microseconds a call). "" (matching nothing) when out of memory. */
static const char *pend_binding (const apx *a, pend *p) {
  if (p->binding[0] == '\0' && a->q != NULL)
    tp__mcp_approve_binding(a->run_id, p->seq, p->tool, p->args, a->q->principal, p->binding);
  return p->binding;
}

static void apx_closed (uv_handle_t *h) { free(h->data); }

static apx *apx_get (worker *w, job *q) {
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
void tp__mcp_pause_apx_end (worker *w, job *q, int quiet, const char *why) {
  apx *a = q->ax;
  if (a == NULL) return;
  q->ax = NULL;
  while (a->pending) {
    pend *p = a->pending;
    a->pending = p->next;
    if (p->eid[0] && p->line == NULL && !quiet)  /* sent: withdrawn */
      tp__mcp_mail_line(q, tp__mcp_mail_notification("notifications/cancelled",
                                                     json_pack("{s:s, s:s}", "requestId",
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
typedef struct tp__mcp_dsave dsave;
static void dur_note(json_t *view, const job *q);
static void dur_next(worker *w, job *q);
static void live_send(worker *w, job *q);
static void dur_decide(worker *w, job *q);
static void dur_forget(worker *w, job *q);

/* The response of a parked run: its pending calls as a paused result, or for a 2026-07-28
** request as an input_required result whose requestState seals the run and the bindings.
** brief leaves the arguments out (when they would not fit the line). NULL when out of
** memory. */
static char *paused_line (worker *w, job *q, int brief, size_t *outlen) {
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
                            args ? args : json_string(at), "binding", pend_binding(a, p)));
      calls_held++;
      continue;
    }
    json_t *e = tp__mcp_approve_pending_entry(p->seq, p->tool, brief ? "\"(too large to show)\"" :
                                      p->args, p->reason, pend_binding(a, p));
    json_array_append_new(pending, e);
    char key[40];
    snprintf(key, sizeof key, "approve-%llu", (unsigned long long)p->seq);
    json_object_set_new(inputs, key, json_pack("{s:s, s:o}", "method", "elicitation/create",
      "params", tp__mcp_approve_elicit_params(p->tool, brief ? "(too large to show)" : p->args,
                                      p->reason, 1)));
    json_array_append_new(calls, json_pack("{s:I, s:s}", "seq", (json_int_t)p->seq,
                                           "binding", pend_binding(a, p)));
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
    if (view && (q->dnote || dur_bad(q))) dur_note(view, q);
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

/* Whether a restored run holds again every call its record was paused at (calls held in
** different steps come back in different steps of the replay). */
static int replayed_all (const job *q) {
  size_t i;
  json_t *e;
  json_array_foreach(q->dpending, i, e) {
    json_int_t seq = json_integer_value(json_object_get(e, "seq"));
    const pend *p = q->ax->pending;
    while (p && (json_int_t)p->seq != seq) p = p->next;
    if (p == NULL) return 0;
  }
  return 1;
}

static void ttl_cb (uv_timer_t *t) {
  apx *a = t->data;
  job *q = a->q;
  if (q == NULL || q->state != TP__MCP_JOB_PARKED) return;
  char ttl[32], why[300];
  tp__mcp_approve_format_ttl(q->w->s->o.pause_ttl_us, ttl, sizeof ttl);
  snprintf(why, sizeof why, "no decision came within the server's --pause-ttl (%s): the run "
           "was ended", ttl);
  tp__mcp_pause_apx_end(q->w, q, 0, why);
  tp_run_cancel(q->run);  /* run_done follows; q may be gone after this */
}

/* Answers q's request with line (consumed; NULL: the paused result) and keeps its run
** here, its wall clock held; a paused result starts the --pause-ttl clock again. A paused
** result of a run kept in the store is sent once a save begun after this is done (dpark:
** dur_next saves, then parks). */
static void park_now(worker *w, job *q, char *line, size_t len);
static void park (worker *w, job *q, char *line, size_t len) {
  if (line == NULL && q->dur != TP__MCP_DUR_OFF) {  /* the store first */
    if (q->dpark == 0) q->dpark = 1;
    dur_next(w, q);
    return;
  }
  park_now(w, q, line, len);
}

static void park_now (worker *w, job *q, char *line, size_t len) {
  int paused = line == NULL;
  if (paused) line = paused_line(w, q, 0, &len);
  mail *m = tp__mcp_mail_new(M_PARK);
  if (line == NULL || m == NULL) {
    free(line);
    free(m);
    tp__mcp_mail_log(w, L_ERROR, "out of memory: a run that waits for an approval was ended");
    tp_run_cancel(q->run);
    return;
  }
  if (q->run_id[0] == '\0') memcpy(q->run_id, q->ax->run_id, sizeof q->run_id);
  tp__mcp_pause_job_to(q, TP__MCP_JOB_PARKED);
  if (paused) {
    uint64_t ms = (w->s->o.pause_ttl_us + 999) / 1000;
    uv_timer_start(&q->ax->t, ttl_cb, ms ? ms : 1, 0);
  }
  m->w = w;
  m->q = q->rq;
  m->text = line;
  m->len = len;
  memcpy(m->run_id, q->run_id, sizeof m->run_id);
  if (q->tool_from_store && q->tool) m->tool = strdup(q->tool);  /* the protocol's is NULL */
  tp__mcp_mail_post(&w->s->mb, m);
}

static void park_cb (uv_timer_t *t) {
  apx *a = t->data;
  job *q = a->q;
  if (q == NULL || q->state != TP__MCP_JOB_RUNNING || q->run == NULL) return;
  if (!waits_on_resume(a)) { dur_next(q->w, q); return; }  /* live calls of a stored run */
  if (q->restore) {  /* replayed to its held calls: every one the record has */
    if (replayed_all(q)) dur_decide(q->w, q);
    return;
  }
  park(q->w, q, NULL, 0);
}

static void elicit_send (worker *w, job *q, apx *a, pend *p) {
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
  tp__mcp_mail_line(q, m);
}

/* tp_engine_on_approval's callback: a call of one of this worker's runs is held. */
void tp__mcp_pause_on_approval (tp_call *c, const char *reason, void *ud) {
  worker *w = ud;
  tp_run *r = tp_call_run(c);
  job *q = w->running;
  while (q && q->run != r) q = q->wnext;
  apx *a = q && q->state != TP__MCP_JOB_CANCELLED ? apx_get(w, q) : NULL;
  pend *p = a ? calloc(1, sizeof *p) : NULL;
  if (p) {
    p->tool = strdup(tp_call_tool(c));
    p->args = strdup(tp_call_args(c));
    p->reason = strdup(reason);
  }
  if (p == NULL || p->tool == NULL || p->args == NULL || p->reason == NULL) {
    if (p) pend_free(p);
    tp_call_deny(c, q == NULL || q->state == TP__MCP_JOB_CANCELLED
                    ? "the request that ran the script was cancelled"
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
  else if (q->state != TP__MCP_JOB_PARKED)
    uv_timer_start(&a->t, park_cb, 0, 0);  /* once the step is over */
}

/* ---- caller tools (worker side; docs/caller-tools.md) ------------------------------------
** A call of a run's caller tool is held as an approval is: a pend of the run's apx, with
** its binding. Live, the question is a tidepool/callTool request to the client (ids
** TP__MCP_CALL_PREFIX "<worker>-<n>", routed back here as M_ANSWER, as an elicitation's
** answer); paused, the run parks and resume_run's results answer it. The call's timeout
** and the run's end let go of it (tp__mcp_pause_caller_cancel, apx_end). */

static job *job_of_call (worker *w, tp_call *c) {
  tp_run *r = tp_call_run(c);
  job *q = w->running;
  while (q && q->run != r) q = q->wnext;
  return q;
}

/* tp_run_declare_caller_tools's handler: the call passed the policy and its schema. */
void tp__mcp_pause_caller_call (tp_call *c, void *ud) {
  worker *w = ud;
  job *q = job_of_call(w, c);
  apx *a = q && q->state != TP__MCP_JOB_CANCELLED ? apx_get(w, q) : NULL;
  pend *p = a ? calloc(1, sizeof *p) : NULL;
  if (p) {
    p->tool = strdup(tp_call_tool(c));
    p->args = strdup(tp_call_args(c));
    p->reason = strdup("");
  }
  if (p == NULL || p->tool == NULL || p->args == NULL || p->reason == NULL) {
    if (p) pend_free(p);
    tp_call_fail(c, "tool.unavailable", q == NULL || q->state == TP__MCP_JOB_CANCELLED
                 ? "the request that ran the script was cancelled"
                 : "the server could not hand the call to the client (out of memory)");
    return;
  }
  p->c = c;
  p->call = 1;
  p->seq = tp_call_id(c);  /* its binding: pend_binding, when first needed */
  pend **tail = &a->pending;
  while (*tail) tail = &(*tail)->next;
  *tail = p;
  if (!q->callers_live) {  /* paused: the run parks once its step is over */
    if (q->state != TP__MCP_JOB_PARKED) uv_timer_start(&a->t, park_cb, 0, 0);
    return;
  }
  snprintf(p->eid, sizeof p->eid, TP__MCP_CALL_PREFIX "%u-%llu", w->index,
           (unsigned long long)++w->elicits);
  json_t *args = tp_json_parse(p->args, strlen(p->args), NULL, 0);
  json_t *m = args ? json_pack("{s:s, s:s, s:s, s:{s:s, s:O, s:I, s:s, s:o}}", "jsonrpc",
                               "2.0", "id", p->eid, "method", "tidepool/callTool", "params",
                               "run", a->run_id, "request", q->id, "id", (json_int_t)p->seq,
                               "tool", p->tool, "args", args) : NULL;
  /* a run kept in the store (--state): the request goes once the store has the run paused
  ** at this call, with the binding resume_run takes for it after a restart */
  int keep = q->dur != TP__MCP_DUR_OFF && !dur_bad(q);
  if (m && keep && (json_object_set_new(json_object_get(m, "params"), "binding",
                                        json_string(pend_binding(a, p))) != 0 ||
                    (p->line = tp_json_text(m, &p->line_len)) == NULL)) {
    json_decref(m);
    m = NULL;
  }
  if (m == NULL) {
    pend_unlink(a, p);
    pend_free(p);
    tp_call_fail(c, "tool.unavailable", "the server could not hand the call to the client "
                 "(out of memory)");
    return;
  }
  if (!keep) { tp__mcp_mail_line_now(q, m); return; }
  json_decref(m);
  if (q->state != TP__MCP_JOB_PARKED)  /* saved once the step is over */
    uv_timer_start(&a->t, park_cb, 0, 0);
  else dur_next(w, q);  /* a branch of a parked run (its timer is the --pause-ttl's) */
}

/* A call cut short (its timeout, the run's end) while the client has it: withdrawn. */
void tp__mcp_pause_caller_cancel (tp_call *c, void *ud) {
  worker *w = ud;
  job *q = job_of_call(w, c);
  for (pend *p = q && q->ax ? q->ax->pending : NULL; p; p = p->next) {
    if (p->c != c) continue;
    if (p->eid[0] && p->line == NULL)
      tp__mcp_mail_line(q, tp__mcp_mail_notification("notifications/cancelled",
                                                     json_pack("{s:s, s:s}", "requestId",
            p->eid, "reason", "the call timed out or its run ended")));
    pend_unlink(q->ax, p);
    pend_free(p);
    tp_call_fail(c, NULL, "cancelled");  /* lets go of it: the run has its outcome */
    return;
  }
}

/* Applies m, the client's response to tidepool/callTool, to p's call; p goes. */
static void caller_answered (job *q, pend *p, json_t *m) {
  json_t *res = json_object_get(m, "result");
  const char *em = json_string_value(json_object_get(json_object_get(m, "error"), "message"));
  tp_call *c = p->c;
  pend_unlink(q->ax, p);
  if (res) tp_call_answer_tree(c, res);
  else {
    json_t *e = json_pack("{s:{s:s}}", "error", "message", em ? em : "the client "
                          "answered tidepool/callTool with an error");
    if (e == NULL || tp_call_answer_tree(c, e) == TP_EINVAL) tp_call_fail(c, NULL, "?");
    json_decref(e);
  }
  pend_free(p);
}

/* Job serial's run, if it still runs here. */
static job *job_by_serial (worker *w, uint64_t serial) {
  job *q = w->stopping ? NULL : w->running;
  while (q && q->serial != serial) q = q->wnext;
  return q && q->ax != NULL && q->run != NULL ? q : NULL;
}

typedef struct lmark { worker *w; uint64_t serial; } lmark;

/* The client's answers that waited apply (ok), or their calls fail with why. */
static void answers_apply (job *q, int ok, const char *why) {
  char msg[600];
  snprintf(msg, sizeof msg, "the state store failed to mark run %s as running (%.300s): the "
           "client's answer was not applied, so that a restart cannot replay the run past it; "
           "the call may be made again", q->run_id, why ? why : "closed");
  for (pend *p = q->ax ? q->ax->pending : NULL, *next; p; p = next) {
    next = p->next;
    if (p->answer == NULL) continue;
    if (ok) { caller_answered(q, p, p->answer); continue; }
    tp_call *c = p->c;
    pend_unlink(q->ax, p);
    pend_free(p);
    tp_call_fail(c, "tool.unavailable", msg);
  }
}

/* The "running" mark of q's record is done (ok) or failed (why): the answers that waited
** for it apply; else their calls fail: applied with the store still saying "paused at
** these calls", a restart could replay the run past them, making its later calls twice.
** Then the next write, if one waits. */
static void live_settle (worker *w, job *q, int ok, const char *why) {
  q->dmark = ok ? TP__MCP_DMARK_RUNNING : TP__MCP_DMARK_PAUSED;
  if (q->dpark == 2) q->dpark = 1;  /* the record changed since that save began */
  answers_apply(q, ok, why);
  dur_next(w, q);
}

static void live_marked (void *ud, int status, const char *val, size_t len, const char *err) {
  (void)val; (void)len;
  lmark *k = ud;
  worker *w = k->w;
  job *q = job_by_serial(w, k->serial);
  free(k);
  if (q != NULL) live_settle(w, q, status == TP_STORED_OK, err);
}

/* The record that says q's stored run is "running" here (before a decision or an answer
** applies), as JSON text, or NULL when out of memory. */
static char *running_record (worker *w, const job *q, size_t *n) {
  json_t *rec = json_pack("{s:s, s:s, s:s, s:i}", "run", q->run_id, "state", "running",
                          "by", w->s->owner ? w->s->owner : "", "v", 1);
  if (rec && q->principal) json_object_set_new(rec, "principal", json_string(q->principal));
  char *text = rec ? tp_json_text(rec, n) : NULL;
  json_decref(rec);
  return text;
}

/* A stored run's first answer since it was saved: its record says "running" (as for an
** approval's decisions, mark_then_decide) before any answer applies (dur_next). */
static void live_mark (worker *w, job *q) {
  size_t n;
  char *text = running_record(w, q, &n);
  lmark *k = text ? malloc(sizeof *k) : NULL;
  if (k == NULL) {
    free(text);
    live_settle(w, q, 0, "out of memory");
    return;
  }
  *k = (lmark){ w, q->serial };
  q->dmark = TP__MCP_DMARK_MARKING;
  uint64_t ttl = w->s->o.pause_ttl_us / 1000u + TP__MCP_APPROVE_GRACE_MS;
  if (tp_engine_run_put(w->e, q->run_id, text, n, ttl, live_marked, k) != TP_OK)
    live_marked(k, TP_STORED_ERROR, NULL, 0, tp_engine_error(w->e));
  free(text);
}

/* Whether the client's answers to q's live calls wait for its record to say "running":
** the store has (or is being given) the run paused at them. */
static int answers_wait (const job *q) {
  return q->dmark != TP__MCP_DMARK_RUNNING && !dur_bad(q) &&
         (q->dur == TP__MCP_DUR_SAVED || q->dsave != NULL);
}

/* M_ANSWER: the client's response to an elicitation (the whole message as text). */
void tp__mcp_pause_elicit_answer (worker *w, const char *text, size_t len) {
  json_t *m = tp_json_parse(text, len, NULL, 0);
  const char *id = json_string_value(json_object_get(m, "id"));
  for (job *q = w->running; q && id; q = q->wnext) {
    for (pend *p = q->ax ? q->ax->pending : NULL; p; p = p->next) {
      if (strcmp(p->eid, id) != 0) continue;
      if (p->call) {  /* tidepool/callTool's answer: {result} or {error}, or an error */
        if (p->line == NULL && p->answer == NULL) {
          if (answers_wait(q)) {  /* the store has the run paused at it */
            p->answer = m;
            dur_next(w, q);
            return;
          }
          caller_answered(q, p, m);
        }
        json_decref(m);
        return;
      }
      json_t *res = json_object_get(m, "result");
      const char *em = json_string_value(json_object_get(json_object_get(m, "error"), "message"));
      int ok;
      char note[2300];
      tp__mcp_approve_elicit_answer(json_is_object(res) ? res : NULL, em ? em : "an error", &ok,
                                    note,
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
    if (!tp__mcp_approve_binding_eq(pend_binding(a, p), json_string_value(bind),
                                    json_string_length(bind))) {
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
    if (!tp__mcp_approve_binding_eq(pend_binding(a, p), json_string_value(bind),
                                    json_string_length(bind))) {
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
static void decide (worker *w, job *q, json_t *args);

/* Exactly once. With --state, servers that share a store could each resume one paused
** run: this one from memory, another restored from the store. Whoever resumes a run first
** claims it in the store (atomically across processes); the others refuse it. The key
** begins with a control character, which no session id has. Only a server whose name
** outlives its process claims runs (--http or --advertise): a claim lasts as long as a run
** may stay paused, and a stdio server's name (its pid) would keep its own restart from
** restoring the runs it resumed before it stopped.
**
** The steps of a tp__mcp_pause_resume, each of which the store may fail: claim the run;
** (restored) read its record and log; mark its record "running" (naming this server); apply the
** decisions, whose approved calls run. A claim the store did not answer is never taken
** for won: the resume is refused with state.unavailable, nothing runs, and the same
** resume_run sent again goes through once the store answers. A run held by a server
** whose lease lapsed (it died, or lost the store: --lease) is run.interrupted when its
** record says "running" (its calls may have been made), and is taken over when the record
** is still the pause this server holds (nothing was decided there). */
#define RUN_CLAIMS(s) ((s)->owner != NULL && ((s)->o.advertise || (s)->o.http_listen))
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
typedef struct tp__mcp_rclaim {
  worker *w;
  uint64_t serial;
  json_t *args;
  int64_t log_entries;
} rclaim;

static job *rclaim_req (rclaim *c) {
  worker *w = c->w;
  if (w->stopping) return NULL;
  job *q = w->running;
  while (q && q->serial != c->serial) q = q->wnext;
  return q && q->ax != NULL && q->run != NULL ? q : NULL;
}

static void rclaim_free (rclaim *c) {
  json_decref(c->args);
  free(c);
}

static const char holder_or_unknown[] = "(unnamed)";

/* A restored run whose decisions were refused waits here until its expiry (a run paused
** here has its --pause-ttl timer running already). */
static void keep_till_expiry (job *q) {
  if (q->ax && q->state == TP__MCP_JOB_PARKED && q->dexp_ms &&
      !uv_is_active((uv_handle_t *)&q->ax->t)) {
    int64_t left = q->dexp_ms - tp__mcp_wall_ms();
    uv_timer_start(&q->ax->t, ttl_cb, left > 0 ? (uint64_t)left : 1, 0);
  }
}

/* Refuses the resume of q, whose run stays here waiting for decisions. */
static void refuse_resume (worker *w, job *q, const char *code, const char *msg) {
  size_t n;
  char *line = tp__mcp_view_refusal(q->id, code, msg, NULL, q->budget, &n);
  if (line) park(w, q, line, n);
  keep_till_expiry(q);
}

static void marked (void *ud, int status, const char *val, size_t len, const char *err) {
  (void)val; (void)len;
  rclaim *c = ud;
  job *q = rclaim_req(c);
  if (q != NULL) {
    q->dmark = status == TP_STORED_OK ? TP__MCP_DMARK_RUNNING : TP__MCP_DMARK_PAUSED;
    if (q->dpark == 2) q->dpark = 1;
    if (status == TP_STORED_OK) decide(c->w, q, c->args);
    else {
      char msg[800];
      store_down_msg(q->run_id, "mark the run as running", err, msg, sizeof msg);
      refuse_resume(c->w, q, "state.unavailable", msg);
    }
    if (rclaim_req(c) == q) dur_next(c->w, q);  /* what waited for the mark */
  }
  rclaim_free(c);
}

/* The decisions are checked; then, for a run kept in the store, its record says "running"
** (so that neither a restart nor another server replays it to its approved calls again)
** before they apply. Takes c. */
static void mark_then_decide (worker *w, job *q, rclaim *c) {
  char msg[700];
  if (check_decisions(q->ax, c->args, msg, sizeof msg) != NULL || !dur_stored(q)) {
    decide(w, q, c->args);  /* refuses bad decisions; the run stays paused */
    keep_till_expiry(q);
    rclaim_free(c);
    return;
  }
  if (q->dsave || q->dmark == TP__MCP_DMARK_MARKING) {  /* after the write under way */
    if (q->dresume) rclaim_free(q->dresume);
    q->dresume = c;
    return;
  }
  q->dmark = TP__MCP_DMARK_MARKING;
  size_t n;
  char *text = running_record(w, q, &n);
  uint64_t ttl = w->s->o.pause_ttl_us / 1000u + TP__MCP_APPROVE_GRACE_MS;
  if (text == NULL || tp_engine_run_put(w->e, q->run_id, text, n, ttl, marked, c) != TP_OK)
    marked(c, TP_STORED_ERROR, NULL, 0, text ? tp_engine_error(w->e) : "out of memory");
  free(text);
}

static void resume_claimed (void *ud, int outcome, const char *holder, const char *err);

/* A run held by a server whose lease lapsed: its record says what happened there. */
static void resume_probed (void *ud, int status, const char *val, size_t len, const char *err) {
  rclaim *c = ud;
  job *q = rclaim_req(c);
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
  else if ((status == TP_STORED_NOTFOUND && !dur_stored(q)) ||
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
  job *q = rclaim_req(c);
  if (q == NULL || q->state != TP__MCP_JOB_PARKED) { rclaim_free(c); return; }
  worker *w = c->w;
  char msg[800];
  switch (outcome) {
  case TP_CLAIM_WON: case TP_CLAIM_TAKEN:
    if (outcome == TP_CLAIM_TAKEN)
      tp__mcp_mail_log(w, L_INFO, "run %s: taken over from %s, whose lease lapsed", q->run_id,
                       holder);
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

void tp__mcp_pause_resume (worker *w, mail *m) {
  uint64_t serial = m->n;
  const char *text = m->text;
  size_t len = m->len;
  json_t *id = m->id;
  size_t budget = m->budget;
  int era26 = m->era26, live = m->live;
  m->id = NULL;
  job *q = w->running;
  while (q && q->serial != serial) q = q->wnext;
  if (q == NULL || q->state != TP__MCP_JOB_PARKED || q->ax == NULL) {
    json_decref(id);
    return;  /* ended: req_done answers */
  }
  /* the resuming request's: the run answers it from here on */
  json_decref(q->id);
  q->id = id;
  q->budget = budget;
  q->era26 = era26;
  q->callers_live = live;
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
static void decide (worker *w, job *q, json_t *args) {
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
  if (waits_on_resume(a)) { park(w, q, NULL, 0); return; }  /* undecided: paused again */
  tp__mcp_pause_job_to(q, TP__MCP_JOB_RUNNING);
}

/* Gives q back to the protocol thread (M_DONE) with its outcome: its response line (NULL:
** none), whether its session goes, and ended_parked (its run ended while paused). */
void tp__mcp_pause_done (worker *w, job *q, int ended_parked) {
  mail *m = &q->m;
  m->kind = M_DONE;
  m->q = q->rq;
  m->jb = q;
  m->w = w;
  m->text = q->line;
  m->len = q->line_len;
  q->line = NULL;
  m->drop = q->drop;
  m->ended_parked = ended_parked;
  m->progressed = q->progress > 0;
  memcpy(m->run_id, q->run_id, sizeof m->run_id);
  if (q->tool_from_store && q->tool) m->tool = strdup(q->tool);  /* the protocol's is NULL */
  tp__mcp_pause_job_to(q, TP__MCP_JOB_DONE);
  tp__mcp_mail_post(&w->s->mb, m);
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
static void dur_note (json_t *view, const job *q) {
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
  job *q = ud;
  if (dur_bad(q)) return 0;  /* not kept any more: the run goes on in memory */
  if (len > TP_STORED_MAX) {
    q->dur = dur_stored(q) ? TP__MCP_DUR_BAD_SAVED : TP__MCP_DUR_BAD;
    snprintf(q->dwhy, sizeof q->dwhy, "a call's result is over 1 MiB: have the tool write "
             "large data to a file and pass its path, to keep runs restartable");
    return 0;
  }
  if (q->dn == q->dcap) {
    size_t cap = q->dcap ? q->dcap * 2 : 16;
    struct tp__mcp_dent *d = realloc(q->dents, cap * sizeof *d);
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
  q->dur = dur_stored(q) ? TP__MCP_DUR_BAD_SAVED : TP__MCP_DUR_BAD;
  snprintf(q->dwhy, sizeof q->dwhy, "the server ran out of memory for its call log");
  return 0;
}

/* A new run outside a session keeps its log for the store; a session's cannot. */
void tp__mcp_pause_dur_begin (worker *w, job *q, tp_run *run) {
  if (q->sess_num) {
    q->dnote = "This run is in a session: it does not survive a restart of the server (the "
               "session's globals live in this process).";
    return;
  }
  q->dlim = q->has_lim ? q->lim : w->s->o.lim;
  if (tp_run_on_log(run, dlog_cb, q) == TP_OK) q->dur = TP__MCP_DUR_KEPT;
}

struct tp__mcp_dsave {
  worker *w;
  job *q;                   /* NULL once its run ended */
  size_t left, upto;        /* answers to come; log entries written when all came */
  int stage, failed;        /* 0: the log's entries, 1: the record */
  char *rec;                /* the record, made when the save began (with the log up to upto) */
  size_t rec_len;
  char why[300];
};

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
static char *dur_record (worker *w, job *q, size_t *len) {
  const options *o = &w->s->o;
  json_t *pending = json_array();
  for (pend *p = q->ax ? q->ax->pending : NULL; p; p = p->next) {
    json_t *e = tp__mcp_approve_pending_entry(p->seq, p->tool, p->args, p->reason,
                                              pend_binding(q->ax, p));
    if (e && p->call) json_object_set_new(e, "kind", json_string("call"));
    json_array_append_new(pending, e);
  }
  json_int_t seed = 0;
  json_t *first = q->dbase == 0 && q->dn ? tp_json_parse(q->dents[0].p, q->dents[0].n,
                                                         NULL, 0) : NULL;
  if (json_is_integer(json_object_get(first, "seed")))
    seed = json_integer_value(json_object_get(first, "seed"));
  json_decref(first);
  int64_t now = tp__mcp_wall_ms();
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

/* The next stage of a save: the record after the log; then what waited for it (dur_next). */
static void dsave_step (dsave *d) {
  job *q = d->q;
  worker *w = d->w;
  if (q == NULL) { free(d->rec); free(d); return; }  /* the run ended meanwhile */
  if (d->stage == 0 && !d->failed) {
    d->stage = 1;
    uint64_t ttl = w->s->o.pause_ttl_us / 1000u + TP__MCP_APPROVE_GRACE_MS;
    d->left = 1;
    if (tp_engine_run_put(w->e, q->run_id, d->rec, d->rec_len, ttl, dsave_cb, d) != TP_OK)
      dsave_cb(d, TP_STORED_ERROR, NULL, 0, tp_engine_error(w->e));
    return;
  }
  q->dsave = NULL;
  q->dmark = TP__MCP_DMARK_PAUSED;  /* the record says paused at its calls */
  if (d->failed) {
    snprintf(q->dwhy, sizeof q->dwhy, "%s", d->why);
    q->dur = dur_stored(q) ? TP__MCP_DUR_BAD_SAVED : TP__MCP_DUR_BAD;
  }
  else {
    q->dput = d->upto;
    /* the log went bad during the save (dlog_cb): the record just written goes too */
    q->dur = dur_bad(q) ? TP__MCP_DUR_BAD_SAVED : TP__MCP_DUR_SAVED;
    for (pend *p = q->ax ? q->ax->pending : NULL; p; p = p->next)
      if (p->rec == 1) p->rec = 2;
  }
  free(d->rec);
  free(d);
  live_send(w, q);
  dur_next(w, q);
}

/* Sends the requests of q's live calls that a done save has (all of them when the run is
** not kept any more). */
static void live_send (worker *w, job *q) {
  (void)w;
  for (pend *p = q->ax ? q->ax->pending : NULL; p; p = p->next) {
    if (p->line == NULL || (p->rec != 2 && !dur_bad(q))) continue;
    char *line = p->line;
    p->line = NULL;
    tp__mcp_mail_text_now(q, line, p->line_len);
  }
}

/* Writes q's log (what is not in the store yet), then its record as it is now (its
** pending calls, the log up to here): what dur_next asks for. */
static void dur_save (worker *w, job *q) {
  dsave *d = calloc(1, sizeof *d);
  if (d) d->rec = dur_record(w, q, &d->rec_len);
  if (d == NULL || d->rec == NULL) {  /* the run waits here only */
    free(d);
    snprintf(q->dwhy, sizeof q->dwhy, "the server ran out of memory");
    q->dur = dur_stored(q) ? TP__MCP_DUR_BAD_SAVED : TP__MCP_DUR_BAD;
    dur_next(w, q);
    return;
  }
  for (pend *p = q->ax->pending; p; p = p->next)
    if (p->rec == 0) p->rec = 1;
  if (q->dpark) q->dpark = 2;
  d->w = w;
  d->q = q;
  d->upto = q->dn;
  d->left = 1;  /* this function's own, so that answers at once do not finish it early */
  q->dsave = d;
  q->dmark = TP__MCP_DMARK_SAVING;
  for (size_t i = q->dput; i < q->dn && !d->failed; i++) {
    d->left++;
    if (tp_engine_log_put(w->e, q->run_id, q->dbase + i, q->dents[i].p, q->dents[i].n,
                          dsave_cb, d) != TP_OK)
      dsave_cb(d, TP_STORED_ERROR, NULL, 0, tp_engine_error(w->e));
  }
  dsave_cb(d, TP_STORED_OK, NULL, 0, NULL);
}

/* The one place that starts a write of q's stored record, and only when none is under way
** (the store keeps them in the order they are sent, and each one's outcome moves dmark):
** - a resume's "running" mark that waited for the write before it (dresume);
** - the "running" mark the client's answers wait for (or, the record saying "running"
**   or the run not kept, the answers apply);
** - a save, when a live call is in no record yet, or the paused result waits for a save
**   begun after it was asked (dpark 1), or a call came since that one began;
** - that save done, the paused result.
** So a live call's request goes (live_send) only once a save whose record has it is done,
** and no answer applies while a save of the record that still holds its call is under
** way. A run not kept any more (BAD) sends its calls and its paused result at once. */
static void dur_next (worker *w, job *q) {
  apx *a = q->ax;
  if (a == NULL || q->dur == TP__MCP_DUR_OFF || q->dsave || q->dmark == TP__MCP_DMARK_MARKING)
    return;
  if (q->run_id[0] == '\0')  /* the store's key (read by the protocol thread after M_PARK) */
    memcpy(q->run_id, a->run_id, sizeof q->run_id);
  if (q->dresume) {
    rclaim *c = q->dresume;
    q->dresume = NULL;
    mark_then_decide(w, q, c);
    return;
  }
  int answered = 0, unsaved = 0;
  for (pend *p = a->pending; p; p = p->next) {
    if (p->answer) answered = 1;
    if (p->rec == 0 && (p->line || q->dpark)) unsaved = 1;
  }
  if (answered) {
    if (answers_wait(q)) { live_mark(w, q); return; }
    answers_apply(q, 1, NULL);  /* the record says "running", or there is none to mind */
  }
  if (dur_bad(q)) {
    dur_forget(w, q);
    live_send(w, q);
  }
  else if (unsaved || q->dpark == 1) {
    dur_save(w, q);
    return;
  }
  if (q->dpark == 0) return;
  q->dpark = 0;
  if (waits_on_resume(a)) park_now(w, q, NULL, 0);
  else tp__mcp_pause_job_to(q, TP__MCP_JOB_RUNNING);  /* what it waited on went meanwhile */
}

/* q's run is not kept any more (BAD): an earlier pause's record of it, now out of date,
** goes: a restart must not replay to a call decided since. */
static void dur_forget (worker *w, job *q) {
  if (dur_stored(q) && q->run_id[0]) tp_engine_run_del(w->e, q->run_id, NULL, NULL);
  q->dur = TP__MCP_DUR_BAD;
}

/* q's run ended: its stored record and log go (not when the server stops: they are what a
** restart resumes). */
void tp__mcp_pause_dur_end (worker *w, job *q) {
  if (q->dsave) { q->dsave->q = NULL; q->dsave = NULL; }
  if (q->dresume) { rclaim_free(q->dresume); q->dresume = NULL; }
  q->dpark = 0;
  q->dmark = TP__MCP_DMARK_PAUSED;
  if (dur_stored(q) && !w->stopping && q->run_id[0])
    tp_engine_run_del(w->e, q->run_id, NULL, NULL);
  q->dur = TP__MCP_DUR_OFF;
}

static void dur_refuse (worker *w, job *q, const char *code, const char *msg) {
  q->line = tp__mcp_view_refusal(q->id, code, msg, NULL, q->budget, &q->line_len);
  tp__mcp_pause_done(w, q, 0);
}

/* A restored run replayed to its held call(s): the decisions it was resumed with apply
** (its record marked "running" first). */
static void dur_decide (worker *w, job *q) {
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
** (RESTORE_PROBE, then RESTORE_TAKEOVER from a holder whose lease lapsed before the record
** said "running") and read the record again, now this server's to resume
** (RESTORE_CLAIMED): the job's state says the step. */

static void dur_load_claimed(void *ud, int outcome, const char *holder, const char *err);

/* Lets the claim of a restore go when it failed before its record said "running" (nothing
** of it ran): any server may resume the run then. */
static void dur_unclaim (worker *w, job *q) {
  if (q->state != TP__MCP_JOB_RESTORE_CLAIMED) return;
  char key[TP__MCP_APPROVE_RUN_ID_MAX + 8];
  run_claim_key(q->run_id, key, sizeof key);
  tp_engine_release_session(w->e, key, w->s->owner);
}

static void dur_got_record (void *ud, int status, const char *val, size_t len,
                            const char *err) {
  job *q = ud;
  worker *w = q->w;
  char msg[800];
  if (w->stopping) return;
  json_t *rec = status == TP_STORED_OK ? tp_json_parse(val, len, NULL, 0) : NULL;
  if (rec && !tp__mcp_approve_same_principal(json_string_value(json_object_get(rec, "principal")),
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
  if (q->state == TP__MCP_JOB_RESTORE_READ && RUN_CLAIMS(w->s)) {  /* claim it: run_claim_key */
    char key[TP__MCP_APPROVE_RUN_ID_MAX + 8];
    run_claim_key(q->run_id, key, sizeof key);
    json_decref(rec);
    q->drunning = running;
    tp__mcp_pause_job_to(q, TP__MCP_JOB_RESTORE_PROBE);
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
  else if (json_integer_value(exp) <= tp__mcp_wall_ms()) {
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
      q->tool_from_store = 1;
      q->mcp_name = strdup(mcp);
      json_t *a = json_object_get(rec, "args");
      q->args = json_is_object(a) ? json_incref(a) : json_object();
    }
    q->dexp_ms = json_integer_value(exp);
    json_t *pending = json_object_get(rec, "pending");
    json_decref(q->dpending);
    q->dpending = json_is_array(pending) ? json_incref(pending) : NULL;
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

/* A call that was running, not held, when the run was last saved (another branch of the
** script went on while it waited): the log has it asked (phase 0) and not answered, and the
** record does not hold it. A replay would make it again, and it may have been made. Its
** seq (with *tool), or 0 when there is none; -1 when out of memory. */
static json_int_t dur_in_flight (json_t *log, json_t *pending, const char **tool) {
  json_int_t *open = NULL, found = 0;
  const char **names = NULL;
  size_t n = 0, cap = 0, i;
  json_t *e;
  json_array_foreach(log, i, e) {  /* the calls asked and not answered, in one pass */
    const char *type = json_string_value(json_object_get(e, "type"));
    if (type == NULL || strcmp(type, "call") != 0) continue;
    json_int_t seq = json_integer_value(json_object_get(e, "seq"));
    if (json_integer_value(json_object_get(e, "phase")) != 0) {
      for (size_t k = 0; k < n; k++)
        if (open[k] == seq) { open[k] = open[--n]; names[k] = names[n]; break; }
      continue;
    }
    if (n == cap) {
      cap = cap ? cap * 2 : 16;
      json_int_t *o = realloc(open, cap * sizeof *o);
      if (o) open = o;
      const char **m = o ? realloc(names, cap * sizeof *m) : NULL;
      if (m) names = m;
      if (o == NULL || m == NULL) { found = -1; goto out; }
    }
    open[n] = seq;
    names[n++] = json_string_value(json_object_get(e, "tool"));
  }
  for (size_t k = 0; k < n && found == 0; k++) {
    size_t j;
    json_array_foreach(pending, j, e)
      if (json_integer_value(json_object_get(e, "seq")) == open[k]) break;
    if (j == json_array_size(pending)) { found = open[k]; *tool = names[k] ? names[k] : "?"; }
  }
out:
  free(open);
  free(names);
  return found;
}

static void dur_got_log (void *ud, int status, const char *val, size_t len, const char *err) {
  job *q = ud;
  worker *w = q->w;
  char msg[700], why[400] = "";
  if (w->stopping) return;
  json_t *log = status == TP_STORED_OK ? tp_json_parse(val, len, NULL, 0) : NULL;
  const char *tool = NULL;
  json_int_t ran = log ? dur_in_flight(log, q->dpending, &tool) : 0;
  if (ran > 0) {
    snprintf(msg, sizeof msg, "run %s cannot be resumed: its call %lld (tools.%.100s) was "
             "running in another branch of the script when the run was last saved, so it may "
             "have been made, and a replay would make it again. Check what it did, then run "
             "the script again if needed", q->run_id, (long long)ran, tool);
    json_decref(log);
    dur_refuse(w, q, "run.interrupted", msg);
    return;
  }
  tp_run *run = log && ran == 0 ? tp_run_create(w->e, q->code, q->codelen, &q->dlim) : NULL;
  if (run && q->callers &&
      tp_run_declare_caller_tools(run, q->callers, 0, tp__mcp_pause_caller_call,
                                  tp__mcp_pause_caller_cancel, w) != TP_OK)
    snprintf(why, sizeof why, "its caller tools cannot be declared again: %.300s",
             tp_engine_error(w->e));
  else if (run && tp_run_replay(run, val, len, why, sizeof why) == TP_OK &&
      tp_run_on_log(run, dlog_cb, q) == TP_OK) {
    q->dbase = json_array_size(log);
    q->dur = TP__MCP_DUR_SAVED;
    json_decref(log);
    w->begin(w, q, run);
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

/* M_RUN of a restore: the record first (read again once claimed). */
void tp__mcp_pause_dur_load (worker *w, job *q) {
  if (q->state == TP__MCP_JOB_NEW) tp__mcp_pause_job_to(q, TP__MCP_JOB_RESTORE_READ);
  if (tp_engine_run_get(w->e, q->run_id, dur_got_record, q) != TP_OK)
    dur_got_record(q, TP_STORED_ERROR, NULL, 0, tp_engine_error(w->e));
}

static void dur_load_claimed (void *ud, int outcome, const char *holder, const char *err) {
  job *q = ud;
  worker *w = q->w;
  char msg[800];
  if (w->stopping) return;  /* the protocol thread frees the request after the join */
  switch (outcome) {
  case TP_CLAIM_WON: case TP_CLAIM_TAKEN:
    if (outcome == TP_CLAIM_TAKEN)
      tp__mcp_mail_log(w, L_INFO, "run %s: taken over from %s, whose lease lapsed", q->run_id,
                       holder);
    tp__mcp_pause_job_to(q, TP__MCP_JOB_RESTORE_CLAIMED);
    tp__mcp_pause_dur_load(w, q);
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
    tp__mcp_pause_job_to(q, TP__MCP_JOB_RESTORE_TAKEOVER);
    if (tp_engine_claim_lease(w->e, key, w->s->owner, RUN_CLAIM_TTL_MS(&w->s->o),
                              TP_CLAIM_TAKEOVER, dur_load_claimed, q) != TP_OK)
      dur_load_claimed(q, TP_CLAIM_FAILED, NULL, tp_engine_error(w->e));
    return;
  default:
    store_down_msg(q->run_id, "claim the run for this server", err, msg, sizeof msg);
    dur_refuse(w, q, "state.unavailable", msg);
  }
}

