/*
** server.c: the protocol thread of `tidepool mcp`, a Model Context Protocol server (the
** threads and the request record: state.h).
**
** One JSON-RPC 2.0 message per line in, one per line out. Standard output carries
** protocol messages only: at startup the protocol gets a private duplicate of fd 1 and
** fd 1 itself is pointed at standard error, so nothing a plugin or the engine prints can
** reach the client. Logs go to standard error (and, at the client's logging level, as
** notifications/message).
**
** With --http (http.c) the protocol thread serves Streamable HTTP instead of standard
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

#include "clock.h"
#include "tidepool.h"
#include "options.h"
#include "approve.h"
#include "server.h"
#include "mail.h"
#include "reply.h"
#include "era.h"
#include "view.h"
#include "ui.h"
#include "session.h"

static void stop_if_drained(server *s);

/* ---- requests (protocol thread) --------------------------------------------------------- */

static void start_waiting(server *s);
static void maybe_reload(server *s);
static void resume_input(server *s);
static void batch_unref(server *s, batch *b);
static void resume_state(server *s, batch *b, json_t *id, json_t *params);
static void resume_call(server *s, batch *b, json_t *id, json_t *args);

static void post_worker (worker *w, int kind, uint64_t n) {
  mail *m = tp__mcp_mail_new(kind);
  if (m == NULL) {
    fprintf(stderr, "tidepool mcp: out of memory: a message to a worker was lost\n");
    return;
  }
  m->n = n;
  tp__mcp_mail_post(&w->mb, m);
}

/* Frees a job: the protocol thread's before M_RUN, after M_DONE, and once the workers
** are joined. */
static void job_free (job *jb) {
  if (jb == NULL) return;
  json_decref(jb->id);
  json_decref(jb->token);
  json_decref(jb->sess_info);
  free(jb->code);
  free(jb->traceparent);
  free(jb->principal);
  free(jb->scopes);
  free(jb->tool);
  free(jb->mcp_name);
  free(jb->callers);
  json_decref(jb->args);
  json_decref(jb->seen);
  free(jb->line);
  for (size_t i = 0; i < jb->dn; i++) free(jb->dents[i].p);
  free(jb->dents);
  json_decref(jb->restore);
  json_decref(jb->dpending);
  free(jb->m.text);
  free(jb->m.summary);
  free(jb->m.tool);
  free(jb);
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

/* Whether a request in state st has its job on a worker (in s->reqs, counted running). */
static int on_worker (tp__mcp_req_state st) {
  return st == TP__MCP_RQ_RUNNING || st == TP__MCP_RQ_RESUMED || st == TP__MCP_RQ_CANCELLED;
}

/* The one way a request's state changes: it leaves the list of its state (and the counts
** of running and waiting requests) and joins the new one's. */
static void req_to (server *s, req *q, tp__mcp_req_state st) {
  tp__mcp_req_state was = q->state;
  q->state = st;
  if (on_worker(was) && on_worker(st)) return;  /* the same list */
  switch (was) {
  case TP__MCP_RQ_WAITING:
    if (q == s->waiting_tail) s->waiting_tail = q->prev;
    list_remove(&s->waiting, q);
    s->nwaiting--;
    break;
  case TP__MCP_RQ_RUNNING: case TP__MCP_RQ_RESUMED: case TP__MCP_RQ_CANCELLED:
    list_remove(&s->reqs, q);
    s->nrunning--;
    q->w->load--;
    break;
  case TP__MCP_RQ_PARKED: list_remove(&s->parked, q); break;
  case TP__MCP_RQ_DEFERRED: list_remove(&s->deferred, q); break;
  default: break;
  }
  switch (st) {
  case TP__MCP_RQ_WAITING:  /* in order, at the tail */
    q->prev = s->waiting_tail;
    q->next = NULL;
    if (s->waiting_tail) s->waiting_tail->next = q;
    else s->waiting = q;
    s->waiting_tail = q;
    s->nwaiting++;
    break;
  case TP__MCP_RQ_RUNNING: case TP__MCP_RQ_RESUMED: case TP__MCP_RQ_CANCELLED:
    list_push(&s->reqs, q);
    s->nrunning++;
    q->w->load++;
    break;
  case TP__MCP_RQ_PARKED: list_push(&s->parked, q); break;
  case TP__MCP_RQ_DEFERRED: list_push(&s->deferred, q); break;
  default: break;
  }
}

/* A new request and its job, for the message being handled (its origin held). */
static req *req_new (server *s, batch *b, json_t *id) {
  req *q = calloc(1, sizeof *q);
  job *jb = q ? calloc(1, sizeof *jb) : NULL;
  if (jb == NULL) { free(q); return NULL; }
  q->s = s;
  q->jb = jb;
  jb->rq = q;
  jb->serial = q->serial = ++s->serial;
  if ((q->origin = s->origin) != NULL) s->t.hold(q->origin);
  q->id = json_deep_copy(id);
  jb->id = json_deep_copy(id);
  jb->budget = q->budget = b ? BATCH_CALL_MAX : LINE_OUT_MAX;
  if ((q->modern = s->modern_req)) jb->budget = q->budget -= TP_MCP_ERA_STAMP_ROOM;
  return q;
}

static void req_free (server *s, req *q) {
  req_to(s, q, TP__MCP_RQ_GONE);
  if (q->origin) s->t.release(q->origin);
  json_decref(q->id);
  free(q->principal);
  free(q->tool);
  free(q->line);
  free(q->ui_summary);
  json_decref(q->ui_pending);
  job_free(q->jb);
  batch *b = q->b;
  free(q);
  if (b) batch_unref(s, b);
}

/* A response line of a request, into its batch or out. */
static void respond_text (server *s, batch *b, json_t *id, const char *line, size_t len) {
  if (b == NULL) { tp__mcp_reply_write(s, line, len); return; }
  json_t *j = tp_json_parse(line, len, NULL, 0);  /* at most BATCH_CALL_MAX bytes */
  if (j) tp__mcp_reply_batch_add(b, j);
  else tp__mcp_reply_error(s, b, id, -32603, "out of memory: the result was lost");
}

static void deferred_closed (uv_handle_t *h) {
  req *q = h->data;
  req_free(q->s, q);
}

/* Sends a deferred response and frees its request. */
static void defer_flush (server *s, req *q) {
  req_to(s, q, TP__MCP_RQ_GONE);
  s->origin = q->origin;
  if (q->line) tp__mcp_reply_write(s, q->line, q->line_len);
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

/* A worker finished request q (M_DONE, m): the job is the protocol thread's again; its
** outcome is in m, which goes with the job. */
static void req_done (server *s, mail *m) {
  req *q = m->q;
  q->line = m->text;
  q->line_len = m->len;
  m->text = NULL;
  q->ui_summary = m->summary;
  m->summary = NULL;
  if (q->tool == NULL && m->tool) { q->tool = m->tool; m->tool = NULL; }  /* restored */
  int drop = m->drop, ended_parked = m->ended_parked, progressed = m->progressed;
  job_free(q->jb);  /* and m with it */
  q->jb = NULL;
  if (s->ui) tp__mcp_ui_done(s->ui, q);  /* the operator page's recent runs */
  if (q->state == TP__MCP_RQ_PARKED)  /* ended at --pause-ttl while parked: nobody waits */
    req_to(s, q, TP__MCP_RQ_CANCELLED);
  else if (ended_parked && q->state != TP__MCP_RQ_CANCELLED && !s->done) {  /* resumed as
                                                                         ** it ended */
    free(q->line);
    char msg[300];
    snprintf(msg, sizeof msg, "run %s ended before the decisions came: it waited longer than "
             "the server's --pause-ttl; run the script again", q->run_id);
    q->line = tp__mcp_view_refusal(q->id, "run.unknown", msg, NULL, q->budget, &q->line_len);
  }
  int cancelled = q->state == TP__MCP_RQ_CANCELLED;
  req_to(s, q, TP__MCP_RQ_NEW);  /* in no list until it is deferred or freed */
  session *ss = q->sess;
  if (ss != NULL) {
    ss->busy = 0;
    ss->last_used_ns = tp__mcp_mono_ns();
    if (drop != TP__MCP_DROP_NONE)
      tp__mcp_session_drop(s, ss, drop == TP__MCP_DROP_MOVED
                          ? "another server holds it (session.moved)"
                          : "its script went over the session's memory limit");
  }
  tp__mcp_reply_log(s, L_DEBUG, "request %llu %s", (unsigned long long)q->serial,
          cancelled ? "cancelled" : "finished");
  if (cancelled || s->done) { free(q->line); q->line = NULL; }
  if (q->line && q->tool) tp__mcp_view_drop_structured(&q->line, &q->line_len);
  if (q->line && q->modern) tp__mcp_era_stamp(&q->line, &q->line_len);
  if (q->line != NULL && progressed && q->b == NULL && s->t.defer_after_progress &&
      !q->origin && uv_timer_init(s->loop, &q->defer) == 0) {
    /* The reference client handles notifications a tick after the response that arrives
    ** in the same read, and drops progress for a request already answered: send the
    ** response a moment after the last progress tp__mcp_mail_notification, long enough for a client
    ** on a loaded machine to have read them first (5 ms was not, at a load of 7 on 2
    ** cores). Only requests with a progressToken wait. */
    q->defer.data = q;
    req_to(s, q, TP__MCP_RQ_DEFERRED);
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

/* Hands q's job to its worker (M_RUN): the worker's until M_DONE. */
static void start_req (server *s, req *q) {
  job *jb = q->jb;
  req_to(s, q, q->restore ? TP__MCP_RQ_RESUMED : TP__MCP_RQ_RUNNING);
  jb->w = q->w;
  jb->m.kind = M_RUN;
  jb->m.q = q;
  jb->m.jb = jb;
  tp__mcp_mail_post(&q->w->mb, &jb->m);
}

static void start_waiting (server *s) {
  while (s->waiting && s->nrunning < RUNS_MAX && !s->done) start_req(s, s->waiting);
}

static void enqueue (server *s, req *q) {
  if (s->nrunning < RUNS_MAX && s->waiting == NULL) start_req(s, q);
  else req_to(s, q, TP__MCP_RQ_WAITING);
}

/* A refusal of a call (isError result, an envelope with code), into b or out. */
static void refuse_call (server *s, batch *b, json_t *id, const char *code, const char *text,
                         const json_t *sess_info) {
  size_t len;
  char *line = tp__mcp_view_refusal(id, code, text, sess_info, b ? BATCH_CALL_MAX : LINE_OUT_MAX,
                                &len);
  if (line && s->modern_req) tp__mcp_era_stamp(&line, &len);
  if (line) respond_text(s, b, id, line, len);
  else tp__mcp_reply_error(s, b, id, -32603, "out of memory");
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
  job *jb = q->jb;
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
  int can_live = !jb->era26 && (q->origin == NULL || s->t.streams(q->origin));
  if (m && strcmp(m, "live") == 0 && !can_live) {
    snprintf(why, len, "mode \"live\" needs requests from the server to reach the client: "
             "%s; use mode \"paused\" (resume_run)", jb->era26 ? "a 2026-07-28 request has "
             "none" : "this HTTP request does not accept text/event-stream");
    return 0;
  }
  q->callers_live = m ? strcmp(m, "live") == 0 : can_live && s->client_callers;
  jb->callers_live = q->callers_live;
  jb->callers_session = json_is_true(sess);
  jb->era26 = 0;  /* held calls come out as a paused result, resumed with resume_run */
  size_t n;
  jb->callers = tp_json_text(tools, &n);
  if (jb->callers == NULL) { snprintf(why, len, "out of memory"); return 0; }
  return 1;
}

static void tools_call (server *s, batch *b, json_t *id, json_t *params) {
  json_t *jname = json_object_get(params, "name");
  json_t *args = json_object_get(params, "arguments");
  if (!json_is_string(jname)) {
    tp__mcp_reply_error(s, b, id, -32602,
                        "Invalid params: tools/call needs params.name (a string)");
    return;
  }
  if (args != NULL && !json_is_object(args) && !json_is_null(args)) {
    tp__mcp_reply_error(s, b, id, -32602, "Invalid params: params.arguments must be an object");
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
    tp__mcp_reply_error(s, b, id, -32602, "Unknown tool: %.200s (tools/list lists the tools)",
                        name);
    return;
  }
  req *q = req_new(s, b, id);
  if (q == NULL) { tp__mcp_reply_error(s, b, id, -32603, "out of memory"); return; }
  job *jb = q->jb;
  const char *who, *scopes;
  if (q->origin && s->t.principal(q->origin, &who, &scopes)) {
    q->principal = strdup(who);
    jb->principal = strdup(who);
    jb->scopes = strdup(scopes);
  }
  json_t *meta = json_object_get(params, "_meta");
  json_t *token = json_is_object(meta) ? json_object_get(meta, "progressToken") : NULL;
  if ((json_is_string(token) && json_string_length(token) <= 256) || json_is_integer(token))
    jb->token = json_deep_copy(token);
  /* W3C trace context (MCP 2026-07-28 carries it in _meta): the run's parent span; the
  ** worker checks its form (tp_run_set_traceparent), a wrong one leaves a trace of its own */
  json_t *tp = json_is_object(meta) ? json_object_get(meta, "traceparent") : NULL;
  if (json_is_string(tp) && json_string_length(tp) < 64)
    jb->traceparent = strdup(json_string_value(tp));
  else if (q->origin && s->t.traceparent && s->t.traceparent(q->origin))  /* the HTTP header */
    jb->traceparent = strdup(s->t.traceparent(q->origin));
  jb->era26 = q->modern;    /* a 2026-07-28 request asks with input_required */
  jb->elicit = jb->era26 ? 0 : s->client_elicit;
  /* over HTTP an elicitation/create can only ride on an SSE stream: a request answered with
  ** JSON is paused instead (resume_run) */
  if (q->origin && !s->t.streams(q->origin)) jb->elicit = 0;
  if (is_run) {
    json_t *code = json_object_get(args, "code");
    json_t *sid = json_object_get(args, "session");
    const char *bad = NULL;
    char why[300];
    if (!json_is_string(code))
      bad = code ? "arguments.code must be a string: the Lua script"
                 : "arguments.code is missing: pass the Lua script as {\"code\": \"...\"}";
    else if (sid != NULL && !json_is_null(sid))
      bad = tp__mcp_view_bad_session_id(sid, SESSION_ID_MAX, why, sizeof why);
    if (bad) {
      refuse_call(s, b, id, "tool.invalid_input", bad, NULL);
      req_free(s, q);
      return;
    }
    json_t *ct = json_is_object(meta) ? json_object_get(meta, "tidepool/callerTools") : NULL;
    /* a session's caller tools, declared by an earlier run, reach the client as it can */
    q->callers_live = s->client_callers && !jb->era26 &&
                      (q->origin == NULL || s->t.streams(q->origin));
    jb->callers_live = q->callers_live;
    if (ct != NULL && !caller_tools_meta(s, q, ct, why, sizeof why)) {
      tp__mcp_reply_error(s, b, id, -32602, "Invalid params: _meta[\"tidepool/callerTools\"]: %s",
                          why);
      req_free(s, q);
      return;
    }
    json_t *lm = json_is_object(meta) ? json_object_get(meta, "tidepool/limits") : NULL;
    if (lm != NULL && ((sid != NULL && !json_is_null(sid))
                       ? (snprintf(why, sizeof why, "a run in a session has the session's "
                                   "limits: leave them out, or the session"), 1)
                       : !(jb->has_lim = tp__options_limits_json(&s->o.lim, lm, &jb->lim,
                                                                 why, sizeof why)))) {
      tp__mcp_reply_error(s, b, id, -32602, "Invalid params: _meta[\"tidepool/limits\"]: %s",
                          why);
      req_free(s, q);
      return;
    }
    jb->codelen = json_string_length(code);
    jb->code = malloc(jb->codelen + 1);
    if (jb->code) memcpy(jb->code, json_string_value(code), jb->codelen + 1);
    if (json_is_string(sid)) {
      const char *err = NULL;
      char text[600];
      q->sess = tp__mcp_session_for(s, q->principal ? q->principal : "", json_string_value(sid),
                            json_string_length(sid), &jb->sess_info, &err, text, sizeof text);
      if (q->sess == NULL) {
        refuse_call(s, b, id, err, text, NULL);
        req_free(s, q);
        return;
      }
      q->sess->busy = 1;
      q->sess->last_used_ns = tp__mcp_mono_ns();
      jb->sess_num = q->sess->num;
      q->w = q->sess->w;
    }
  }
  else {
    q->tool = strdup(real);
    jb->tool = strdup(real);
    jb->mcp_name = strdup(name);
    jb->args = json_is_object(args) ? json_deep_copy(args) : json_object();
    json_t *empty = json_object();
    jb->code = exposed_script(real, json_is_object(args) ? args : empty, &jb->codelen);
    json_decref(empty);
  }
  if (jb->code == NULL || (jb->tool && (q->tool == NULL || jb->mcp_name == NULL ||
                                        jb->args == NULL))) {
    if (q->sess) q->sess->busy = 0;
    tp__mcp_reply_error(s, b, id, -32603, "out of memory");
    req_free(s, q);
    return;
  }
  if (q->w == NULL) q->w = tp__mcp_session_least_loaded(s, 0);
  if (b) { q->b = b; b->refs++; }
  enqueue(s, q);
}

static void cancel_request (server *s, json_t *rid) {
  if (rid == NULL) return;
  for (req *q = s->reqs; q; q = q->next) {
    if (!json_equal(q->id, rid) || q->state == TP__MCP_RQ_CANCELLED) continue;
    req_to(s, q, TP__MCP_RQ_CANCELLED);  /* no response; req_done frees it at M_DONE */
    post_worker(q->w, M_CANCEL, q->serial);
    tp__mcp_reply_log(s, L_DEBUG, "request %llu cancelled: its run stops",
                      (unsigned long long)q->serial);
    return;
  }
  for (req *q = s->waiting; q; q = q->next) {
    if (!json_equal(q->id, rid)) continue;
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
  if (s->done || !on_worker(q->state) || q->state == TP__MCP_RQ_CANCELLED)
    return;  /* cancelled: M_DONE follows */
  memcpy(q->run_id, m->run_id, sizeof q->run_id);
  if (q->tool == NULL && m->tool) { q->tool = m->tool; m->tool = NULL; }  /* restored */
  if (s->ui) tp__mcp_ui_parked(q, m->text, m->len);  /* its pending calls, for the page */
  s->origin = q->origin;  /* over HTTP, the answer ends the request that came */
  respond_text(s, q->b, q->id, m->text, m->len);
  s->origin = NULL;
  if (q->origin) {  /* the resuming request brings its own */
    s->t.release(q->origin);
    q->origin = NULL;
  }
  if (q->b) {
    batch *b = q->b;
    q->b = NULL;
    batch_unref(s, b);
  }
  req_to(s, q, TP__MCP_RQ_PARKED);
  tp__mcp_reply_log(s, L_DEBUG, "request %llu answered: run %s waits for decisions",
          (unsigned long long)q->serial, q->run_id);
  start_waiting(s);
  resume_input(s);
}

/* A resume_run for a run no request here holds, with --state: a request that restores it
** from the store on a worker (pause.c) and applies args there. 0 when run_id cannot be
** one (the caller refuses it), 1 when handled. */
static int restore_req (server *s, batch *b, json_t *id, const char *run_id, json_t *args,
                        int era26) {
  /* approvals' paused runs, and caller tools' (which need no policy) */
  if (run_id[0] == '\0' || strlen(run_id) >= TP__MCP_APPROVE_RUN_ID_MAX) return 0;
  if (strchr(run_id, ':') != NULL) return 0;  /* the store's other records ("tool-shape:") */
  req *q = req_new(s, b, id);
  if (q == NULL || (q->jb->restore = json_deep_copy(args)) == NULL) {
    if (q) req_free(s, q);
    tp__mcp_reply_error(s, b, id, -32603, "out of memory");
    return 1;
  }
  job *jb = q->jb;
  const char *who, *scopes;  /* the caller: the run's record must name the same principal */
  if (q->origin && s->t.principal(q->origin, &who, &scopes)) {
    q->principal = strdup(who);
    jb->principal = strdup(who);
  }
  jb->era26 = era26;
  q->restore = 1;
  snprintf(q->run_id, sizeof q->run_id, "%s", run_id);
  memcpy(jb->run_id, q->run_id, sizeof jb->run_id);
  q->w = tp__mcp_session_least_loaded(s, 0);
  if (b) { q->b = b; b->refs++; }
  tp__mcp_reply_log(s, L_DEBUG, "request %llu: run %s is restored from the state store",
          (unsigned long long)q->serial, run_id);
  enqueue(s, q);
  return 1;
}

/* Hands decisions (args: resume_run's arguments, copied) to the parked run run_id, whose
** request now answers id; or refuses the call. An operator (the --ui page, operator not
** NULL, no origin) decides any principal's run; its run's result then goes to no one. */
static void resume_run_req (server *s, batch *b, json_t *id, const char *run_id, json_t *args,
                            int era26, const char *operator_name) {
  /* The caller, in every era: another principal's run is not found here, and the answer
  ** says nothing of it (the same as for an id no run has). */
  const char *who = NULL, *scopes;
  if (s->origin && !s->t.principal(s->origin, &who, &scopes)) who = NULL;
  req *q = s->parked;
  while (q && (strcmp(q->run_id, run_id) != 0 ||
               (!operator_name && !tp__mcp_approve_same_principal(q->principal, who))))
    q = q->next;
  if (q == NULL) {
    char msg[500];
    for (req *r = s->reqs; r; r = r->next)
      if (r->state == TP__MCP_RQ_RESUMED && strcmp(r->run_id, run_id) == 0 &&
          tp__mcp_approve_same_principal(r->principal, who)) {
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
  mail *m = text ? tp__mcp_mail_new(M_RESUME) : NULL;
  json_t *newid = m ? json_deep_copy(id) : NULL;
  if (m) m->id = json_deep_copy(id);
  if (newid == NULL || m->id == NULL) {
    free(text);
    json_decref(newid);
    tp__mcp_mail_free(m);
    tp__mcp_reply_error(s, b, id, -32603, "out of memory");
    return;
  }
  req_to(s, q, TP__MCP_RQ_RESUMED);
  json_decref(q->id);
  q->id = newid;
  q->b = b;
  if (b) b->refs++;
  q->budget = b ? BATCH_CALL_MAX : LINE_OUT_MAX;
  if ((q->modern = s->modern_req)) q->budget -= TP_MCP_ERA_STAMP_ROOM;
  if ((q->origin = s->origin) != NULL) s->t.hold(q->origin);  /* answers it */
  /* caller tools' calls from here on go live only where requests can reach the client */
  if (q->callers_live && (era26 || operator_name || (q->origin && !s->t.streams(q->origin))))
    q->callers_live = 0;
  /* the job answers the resuming request from here on: it learns so by mail */
  m->n = q->serial;
  m->text = text;
  m->len = n;
  m->budget = q->budget;
  m->era26 = era26;
  m->live = q->callers_live;
  tp__mcp_mail_post(&q->w->mb, m);
}

static void resume_call (server *s, batch *b, json_t *id, json_t *args) {
  json_t *run = json_object_get(args, "run");
  if (!json_is_string(run) || strlen(json_string_value(run)) != json_string_length(run)) {
    refuse_call(s, b, id, "tool.invalid_input", "arguments.run must be the run id of a "
                "paused result (a string), and arguments.decisions its decisions", NULL);
    return;
  }
  resume_run_req(s, b, id, json_string_value(run), args, 0, NULL);
}

/* A 2026-07-28 retry: params.requestState (sealed by paused_line) names the run and the
** bindings of its calls; params.inputResponses answers the inputRequests by key. */
static void resume_state (server *s, batch *b, json_t *id, json_t *params) {
  json_t *rs = json_object_get(params, "requestState");
  json_t *resp = json_object_get(params, "inputResponses");
  if (!json_is_string(rs)) {
    tp__mcp_reply_error(s, b, id, -32602, "Invalid params: requestState must be the string of the "
               "input_required result, sent back unchanged");
    return;
  }
  if (resp != NULL && !json_is_object(resp)) {
    tp__mcp_reply_error(s, b, id, -32602,
                        "Invalid params: inputResponses must be an object with an "
               "answer for each key of the input_required result's inputRequests");
    return;
  }
  int code;
  char why[500];
  const char *who = "", *scopes = NULL;  /* the caller over HTTP with auth, else no one */
  if (s->origin && !s->t.principal(s->origin, &who, &scopes)) who = "";
  json_t *st = tp__mcp_approve_open(json_string_value(rs), json_string_length(rs), who, &code, why,
                            sizeof why);
  if (st == NULL) {
    tp__mcp_reply_error(s, b, id, code, "%s", why);
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
    tp__mcp_reply_error(s, b, id, -32602, "Invalid params: inputResponses answers none of the "
               "inputRequests of this requestState: answer each of their keys "
               "(approve-<seq>) with the elicitation's result");
  }
  else {
    json_t *args = json_pack("{s:s, s:O}", "run", run, "decisions", ds);
    if (args) resume_run_req(s, b, id, run, args, 1, NULL);
    else tp__mcp_reply_error(s, b, id, -32603, "out of memory");
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
  mail *m = text ? tp__mcp_mail_new(M_ANSWER) : NULL;
  if (m == NULL) { free(text); return; }
  m->text = text;
  m->len = n;
  tp__mcp_mail_post(&s->workers[k].mb, m);
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


static void tools_reported (server *s, mail *m) {
  /* the worker's own JSON, as large as the plugins' schemas and descriptions make it */
  json_t *j = m->text ? json_loads(m->text, 0, NULL) : NULL;
  json_t *list = json_object_get(j, "list"), *names = json_object_get(j, "names");
  if (!json_is_object(list) || !json_is_object(names)) {
    tp__mcp_reply_log(s, L_ERROR, "out of memory: the tool list was not updated");
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
      tp__mcp_reply_log(s, L_INFO, "plugin tools reloaded: %zu tools", s->ntools);
      if (s->initialized) tp__mcp_reply_notify(s, "notifications/tools/list_changed", NULL);
      json_t *notes = tp__mcp_era_listen_tools_changed(s->listen), *note;
      size_t k;
      json_array_foreach(notes, k, note) tp__mcp_reply_msg(s, NULL, json_incref(note));
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
  s->t.serve(s->t.ud, s->ntools, s->nworkers);
}

static void server_mail (void *data) {
  server *s = data;
  for (mail *m = tp__mcp_mail_take_all(&s->mb), *next; m; m = next) {
    next = m->next;
    switch (m->kind) {
    case M_DONE: req_done(s, m); continue;  /* frees the job with its message */
    case M_LINE:
      if (s->done) break;
      s->origin = m->q ? m->q->origin : NULL;  /* the request is alive until its M_DONE */
      s->noting++;
      tp__mcp_reply_write(s, m->text, m->len);
      s->noting--;
      s->origin = NULL;
      break;
    case M_LOG: tp__mcp_reply_log_from(s, m->level, m->logger, m->text); break;
    case M_READY: ready(s, m); break;
    case M_PARK: park_req(s, m); break;
    case M_TOOLS:  /* re-list every worker's tools, then notifications/tools/list_changed */
      s->reload_pending = 1;
      maybe_reload(s);
      break;
    }
    tp__mcp_mail_free(m);
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
    tp__mcp_reply_error(s, b, id, -32600,
                        "Invalid Request: a " TP_MCP_MODERN_VERSION " request must "
               "not be part of a batch: send each message on a line of its own");
    return;
  }
  if (strcmp(method, "server/discover") == 0)
    tp__mcp_reply_result(s, b, id, tp__mcp_era_discover(s->o.name));
  else if (strcmp(method, "tools/list") == 0)
    tp__mcp_reply_result(s, b, id, tp__mcp_era_result(s->tools ? json_deep_copy(s->tools)
                                             : json_pack("{s:[]}", "tools"), 1));
  else if (strcmp(method, "tools/call") == 0) {
    s->modern_req = 1;
    if (params == NULL) tp__mcp_reply_error(s, b, id, -32602,
                                            "Invalid params: tools/call needs params");
    else tools_call(s, b, id, params);
    s->modern_req = 0;
  }
  else if (strcmp(method, "subscriptions/listen") == 0) {
    json_t *err = NULL, *ack = tp__mcp_era_listen_open(s->listen, id, params, &err);
    if (ack) tp__mcp_reply_msg(s, NULL,
                               ack);  /* the stream stays open: no response until it ends */
    else if (err) tp__mcp_reply_msg(s, NULL, json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id",
                                                       id,
                                              "error", err));
    else tp__mcp_reply_error(s, b, id, -32603, "out of memory");
  }
  else if (strcmp(method, "ping") == 0) tp__mcp_reply_result(s, b, id, tp__mcp_era_result(NULL, 0));
  else tp__mcp_reply_error(s, b, id, -32601, "Method not found: %.200s (in protocol version "
                  TP_MCP_MODERN_VERSION " this server answers server/discover, tools/list, "
                  "tools/call, subscriptions/listen and ping)", method);
}

static void handle_request (server *s, batch *b, json_t *id, const char *method, json_t *params) {
  if (params != NULL && !json_is_object(params)) {
    tp__mcp_reply_error(s, b, id, -32602, "Invalid params: %.100s takes an object", method);
    return;
  }
  tp__mcp_era_req era;
  json_t *era_error = NULL;
  int era_of = tp__mcp_era_of(method, params, &era, &era_error);
  if (era_of < 0) {
    if (era_error) tp__mcp_reply_msg(s, b, json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0",
                                                     "id", id, "error", era_error));
    else tp__mcp_reply_error(s, b, id, -32603, "out of memory");
    return;
  }
  if (era_of > 0) { handle_modern(s, b, id, method, params); return; }
  if (strcmp(method, "initialize") == 0) {
    if (b != NULL) {
      tp__mcp_reply_error(s, b, id, -32600,
                          "Invalid Request: initialize must not be part of a batch");
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
    tp__mcp_reply_result(s, b, id, res);
    size_t i;
    json_t *w;
    json_array_foreach(s->early, i, w) {
      int level = (int)json_integer_value(json_object_get(w, "level"));
      json_t *data = json_copy(json_object_get(w, "text"));
      const char *logger = json_string_value(json_object_get(w, "logger"));
      if (level >= s->level && data)
        tp__mcp_reply_notify(s, "notifications/message", json_pack("{s:s, s:s, s:o}", "level",
               levels[level], "logger", logger ? logger : "tidepool", "data", data));
      else json_decref(data);
    }
    json_decref(s->early);
    s->early = NULL;
  }
  else if (strcmp(method, "ping") == 0) tp__mcp_reply_result(s, b, id, NULL);
  else if (strcmp(method, "tools/list") == 0)
    tp__mcp_reply_result(s, b, id, s->tools ? json_deep_copy(s->tools)
                                            : json_pack("{s:[]}", "tools"));
  else if (strcmp(method, "tools/call") == 0) {
    if (params == NULL) tp__mcp_reply_error(s, b, id, -32602,
                                            "Invalid params: tools/call needs params");
    else tools_call(s, b, id, params);
  }
  else if (strcmp(method, "logging/setLevel") == 0) {
    const char *lv = json_string_value(json_object_get(params, "level"));
    int n = lv ? level_of(lv) : -1;
    if (n < 0) {
      tp__mcp_reply_error(s, b, id, -32602, "Invalid params: level must be one of debug, info, "
                 "notice, warning, error, critical, alert, emergency");
      return;
    }
    s->level = n;
    tp__mcp_reply_result(s, b, id, NULL);
  }
  else tp__mcp_reply_error(s, b, id, -32601, "Method not found: %.200s", method);
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
    tp__mcp_reply_error(s, b, NULL, -32600, "Invalid Request: a message must be a JSON object");
    return;
  }
  json_t *id = json_object_get(msg, "id");
  json_t *jr = json_object_get(msg, "jsonrpc");
  json_t *method = json_object_get(msg, "method");
  json_t *params = json_object_get(msg, "params");
  if (id != NULL && !json_is_string(id) && !json_is_integer(id)) {
    tp__mcp_reply_error(s, b, NULL, -32600, "Invalid Request: id must be a string or an integer");
    return;
  }
  if (json_is_string(id) && json_string_length(id) > ID_MAX - 2) {  /* echoed in the answer */
    tp__mcp_reply_error(s, b, NULL, -32600, "Invalid Request: the id is %zu bytes long; an id may "
               "have at most %d", json_string_length(id), ID_MAX - 2);
    return;
  }
  if (!json_is_string(jr) || strcmp(json_string_value(jr), "2.0") != 0) {
    tp__mcp_reply_error(s, b, id, -32600, "Invalid Request: \"jsonrpc\" must be \"2.0\"");
    return;
  }
  if (method == NULL) {
    if (id != NULL && (json_object_get(msg, "result") || json_object_get(msg, "error"))) {
      client_response(s, msg, id);  /* to an elicitation; responses are not answered */
      return;
    }
    tp__mcp_reply_error(s, b, id, -32600, "Invalid Request: \"method\" is missing");
    return;
  }
  if (!json_is_string(method) || strlen(json_string_value(method)) != json_string_length(method)) {
    tp__mcp_reply_error(s, b, id, -32600,
                        "Invalid Request: \"method\" must be a string without NUL");
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
  if (json_array_size(b->responses) > 0 && !s->done) tp__mcp_reply_msg(s, NULL, b->responses);
  else json_decref(b->responses);
  free(b);
}

static void handle_batch (server *s, json_t *msg) {
  size_t n = json_array_size(msg);
  if (n == 0) {
    tp__mcp_reply_error(s, NULL, NULL, -32600, "Invalid Request: an empty batch");
    return;
  }
  if (!tp__mcp_era_batches(s->version)) {
    if (s->version)
      tp__mcp_reply_error(s, NULL, NULL, -32600,
                          "Invalid Request: JSON-RPC batches are not supported: "
                 "batching was removed from MCP in protocol version 2025-06-18, and this "
                 "connection uses %s. Send each message on a line of its own", s->version);
    else
      tp__mcp_reply_error(s, NULL, NULL, -32600,
                          "Invalid Request: JSON-RPC batches are not supported: "
                 "batching was removed from MCP in protocol version 2025-06-18, and no version "
                 "was negotiated yet (initialize first). Send each message on a line of its own");
    return;
  }
  if (n > BATCH_MAX) {
    tp__mcp_reply_error(s, NULL, NULL, -32600,
                        "Invalid Request: a batch holds at most %d messages; "
               "this one has %zu. Send fewer at once", BATCH_MAX, n);
    return;
  }
  batch *b = calloc(1, sizeof *b);
  if (b == NULL || (b->responses = json_array()) == NULL) {
    free(b);
    tp__mcp_reply_error(s, NULL, NULL, -32603, "out of memory");
    return;
  }
  b->refs = 1;
  b->bytes = 2;
  size_t k;
  json_t *m;
  json_array_foreach(msg, k, m) handle_message(s, b, m);
  batch_unref(s, b);
}

static void handle_line (server *s, const char *line, size_t len) {
  while (len > 0 && (line[len - 1] == '\r' || line[len - 1] == ' ' || line[len - 1] == '\t'))
    len--;
  size_t i = 0;
  while (i < len && (line[i] == ' ' || line[i] == '\t')) i++;
  if (i == len) return;  /* blank lines are skipped */
  char why[300];
  json_t *msg = tp_json_parse(line + i, len - i, why, sizeof why);
  if (msg == NULL) {
    tp__mcp_reply_error(s, NULL, NULL, -32700, "Parse error: %.400s", why);
    return;
  }
  if (json_is_array(msg)) handle_batch(s, msg);
  else handle_message(s, NULL, msg);
  json_decref(msg);
}

static void shutdown_server(server *s);

/* ---- the server's entries, handed to its transport (transport.h) ------------------------ */

static void entry_handle (void *ud, void *origin, json_t *msg) {
  server *s = ud;
  s->origin = origin;
  handle_message(s, NULL, msg);
  s->origin = NULL;
}

/* Cancels the request that came in origin, as notifications/cancelled does, without a
** response; one still waiting is dropped. */
static void entry_cancel (void *ud, void *origin) {
  server *s = ud;
  for (req *q = s->reqs; q; q = q->next)
    if (q->origin == origin && q->state != TP__MCP_RQ_CANCELLED) {
      req_to(s, q, TP__MCP_RQ_CANCELLED);
      post_worker(q->w, M_CANCEL, q->serial);
      return;
    }
  for (req *q = s->waiting; q; q = q->next)
    if (q->origin == origin) {
      if (q->sess) q->sess->busy = 0;
      req_free(s, q);
      return;
    }
}

static void entry_stop (void *ud) {
  shutdown_server(ud);
}

/* A line of standard input (NULL: one over LINE_IN_MAX, skipped); past WAITING_MAX
** waiting requests the transport stops reading until some finish (resume_input). */
static void entry_line (void *ud, const char *text, size_t len) {
  server *s = ud;
  if (text == NULL)
    tp__mcp_reply_error(s, NULL, NULL, -32600,
                        "Invalid Request: the line is longer than the %u MiB "
               "a message may have; it was skipped", LINE_IN_MAX >> 20);
  else handle_line(s, text, len);
  if (s->nwaiting > WAITING_MAX && s->t.pause) s->t.pause(s->t.ud);
}

static void resume_input (server *s) {
  if (s->nwaiting > WAITING_MAX / 2 || s->done || !s->has_t || !s->t.resume) return;
  s->t.resume(s->t.ud);
}

/* ---- input ----------------------------------------------------------------------------- */




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
  if (s->eof && !s->done && drained(s)) shutdown_server(s);
}

static void drain_cb (uv_timer_t *t) {
  server *s = t->data;
  char msg[300];
  snprintf(msg, sizeof msg, "the call was cancelled: standard input closed, and it did not "
           "finish within the %.0f s that followed", (double)uv_timer_get_repeat(t) / 1000.0);
  for (req *q = s->reqs; q; q = q->next) {
    if (q->state == TP__MCP_RQ_CANCELLED) continue;
    size_t n;
    char *line = tp__mcp_view_refusal(q->id, "cancelled", msg, NULL, q->budget, &n);
    if (line) respond_text(s, q->b, q->id, line, n);
    free(line);
    req_to(s, q, TP__MCP_RQ_CANCELLED);
  }
  shutdown_server(s);
}

static void entry_eof (void *ud) {
  server *s = ud;
  s->eof = 1;
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








/* ---- life ------------------------------------------------------------------------------ */

/* Stops serving: no more input; every run is cancelled without a response (the workers
** do it on their threads, M_STOP); waiting requests are dropped. */
static void shutdown_server (server *s) {
  if (s->done) return;
  s->done = 1;
  if (s->has_t) s->t.stop(s->t.ud);
  while (s->waiting) req_free(s, s->waiting);
  while (s->deferred) defer_flush(s, s->deferred);
}

static int server_init (server *s) {
  s->loop = &s->loop_storage;
  s->audit_fd = -1;
  s->journal_fd = -1;
  if (uv_loop_init(s->loop) != 0) return -1;
  s->level = L_INFO;
  if (tp__mcp_mail_box_init(&s->mb, s->loop, server_mail, s) != 0) return -1;
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
    else if (!w->threaded) s->wops.close(w);
  }
  /* the workers are gone: what they sent and every request are ours */
  for (mail *m = tp__mcp_mail_take_all(&s->mb), *next; m; m = next) {
    next = m->next;
    tp__mcp_mail_free(m);
  }
  while (s->reqs) req_free(s, s->reqs);
  while (s->parked) req_free(s, s->parked);
  while (s->sessions) tp__mcp_session_drop(s, s->sessions, NULL);
  for (size_t i = 0; i < s->nwatch; i++) uv_close((uv_handle_t *)&s->watch[i], NULL);
  if (s->nwatch || s->watch) {
    uv_close((uv_handle_t *)&s->reload_timer, NULL);
    uv_close((uv_handle_t *)&s->sweep, NULL);
  }
  if (s->drain_on) uv_close((uv_handle_t *)&s->drain, NULL);
  tp__mcp_mail_box_close(&s->mb);
  if (s->has_t) s->t.free(s->t.ud);  /* after every request: they hold its origins */
  s->has_t = 0;
  uv_run(s->loop, UV_RUN_DEFAULT);
  uv_loop_close(s->loop);
  tp__mcp_mail_box_destroy(&s->mb);
  tp_store_destroy(s->kv);
  free(s->owner);
  json_decref(s->tools);
  json_decref(s->tool_names);
  json_decref(s->early);
  tp__mcp_era_listen_free(s->listen);
  free(s->workers);
  free(s->watch);
  free(s->builtin_dir);
  for (size_t k = 0; k < DROPPED_MAX; k++) {
    free(s->dropped_id[k]);
    free(s->dropped_why[k]);
    free(s->dropped_who[k]);
  }
}






/* ---- for main.c (server.h) ------------------------------------------------------------ */

/* /metrics (http.c's route): tp_metrics_text reads the workers' engines from this thread
** without locking them (tidepool.h says it may), then the server's own series. */
static char *entry_metrics (void *sv, size_t *len) {
  server *s = sv;
  tp_engine *es[64];
  size_t n = 0;
  for (unsigned i = 0; i < s->nworkers && n < sizeof es / sizeof es[0]; i++)
    if (s->workers[i].ready && s->workers[i].e && !s->done) es[n++] = s->workers[i].e;
  size_t elen = 0;
  char *text = tp_metrics_text(es, n, &elen);
  if (text == NULL) return NULL;
  size_t parked = 0;
  for (req *q = s->parked; q; q = q->next) parked++;
  char own[1200];
  int k = snprintf(own, sizeof own,
    "# HELP tidepool_mcp_sessions Sessions the server holds.\n"
    "# TYPE tidepool_mcp_sessions gauge\n"
    "tidepool_mcp_sessions %zu\n"
    "# HELP tidepool_mcp_paused_runs Runs answered \"paused\" that wait for decisions or "
    "caller tools.\n"
    "# TYPE tidepool_mcp_paused_runs gauge\n"
    "tidepool_mcp_paused_runs %zu\n"
    "# HELP tidepool_mcp_requests_running Tool calls whose runs are on a worker now.\n"
    "# TYPE tidepool_mcp_requests_running gauge\n"
    "tidepool_mcp_requests_running %zu\n"
    "# HELP tidepool_mcp_requests_waiting Tool calls queued for a worker.\n"
    "# TYPE tidepool_mcp_requests_waiting gauge\n"
    "tidepool_mcp_requests_waiting %zu\n",
    s->nsessions, parked, s->nrunning, s->nwaiting);
  char *all = k > 0 && (size_t)k < sizeof own ? malloc(elen + (size_t)k + 1) : NULL;
  if (all == NULL) { tp_free(text); return NULL; }
  memcpy(all, text, elen);
  memcpy(all + elen, own, (size_t)k + 1);
  tp_free(text);
  *len = elen + (size_t)k;
  return all;
}

/* The operator page's snapshot (ui.c), and its decisions: resume_run's arguments made
** from the paused result's pending call, handed to the run as resume_run hands them. */
static json_t *entry_ui_state (void *sv) { return tp__mcp_ui_snapshot(sv); }
static int entry_ui_decide (void *sv, const char *run, long long seq, int approve,
                            const char *note, const char *operator_name, char *why,
                            size_t whylen) {
  server *s = sv;
  req *q = s->parked;
  while (q && strcmp(q->run_id, run) != 0) q = q->next;
  json_t *args = NULL;
  int st = tp__mcp_ui_decision(s, q, run, seq, approve, note, operator_name, &args, why, whylen);
  if (st != 0) return st;
  json_t *id = json_null();
  void *was = s->origin;
  s->origin = NULL;  /* the run's result goes to no one: the page shows it */
  resume_run_req(s, NULL, id, run, args, 0, operator_name);
  s->origin = was;
  json_decref(args);
  return 0;
}

static void entries_of (server *s, tp__mcp_entries *e) {
  memset(e, 0, sizeof *e);
  e->s = s;
  e->handle = entry_handle;
  e->line = entry_line;
  e->cancel = entry_cancel;
  e->eof = entry_eof;
  e->stop = entry_stop;
  e->metrics = entry_metrics;
  if (s->o.ui) {
    e->ui_state = entry_ui_state;
    e->ui_decide = entry_ui_decide;
  }
}

tp__mcp_server *tp__mcp_server_new (const tp__mcp_options *o, const tp__mcp_worker_ops *wops,
                                    tp_store *kv, char *owner, int audit_fd, int journal_fd,
                                    tp__mcp_entries *entries) {
  server *s = calloc(1, sizeof *s);
  if (s == NULL) { tp_store_destroy(kv); free(owner); return NULL; }
  s->o = *o;
  s->wops = *wops;
  s->kv = kv;
  s->owner = owner;
  if (server_init(s) != 0) return NULL;  /* the process ends: nothing to give back */
  s->audit_fd = audit_fd;
  s->journal_fd = journal_fd;
  if (o->ui && (s->ui = tp__mcp_ui_new()) == NULL) return NULL;  /* as server_init */
  if (o->builtin) {
    char buf[4200];
    s->builtin_dir = strdup(tp__options_builtin_tools_dir(buf, sizeof buf));
  }
  s->watch = calloc(o->ndirs + 1, sizeof *s->watch);
  for (size_t i = 0; s->watch && i < o->ndirs; i++) {
    uv_fs_event_init(s->loop, &s->watch[i]);
    s->watch[i].data = s;
    if (uv_fs_event_start(&s->watch[i], fs_event_cb, o->dirs[i], 0) != 0)
      tp__mcp_reply_log(s, L_WARNING, "cannot watch %s: changes will not reload its tools",
                        o->dirs[i]);
    s->nwatch++;
  }
  uv_timer_init(s->loop, &s->reload_timer);
  s->reload_timer.data = s;
  uv_timer_init(s->loop, &s->sweep);
  s->sweep.data = s;
  uint64_t every = s->o.session_idle_us / 4000;  /* ms */
  if (every < 10) every = 10;
  if (every > 1000) every = 1000;
  if (s->o.session_idle_us) uv_timer_start(&s->sweep, tp__mcp_session_sweep, every, every);
  entries_of(s, entries);
  return s;
}

uv_loop_t *tp__mcp_server_loop (tp__mcp_server *s) { return s->loop; }

void tp__mcp_server_attach (tp__mcp_server *s, const tp__mcp_transport *t) {
  s->t = *t;
  s->has_t = 1;
}

int tp__mcp_server_run (tp__mcp_server *s) {
  /* the workers load the plugin directories; reading starts once all have (ready) */
  for (unsigned k = 0; k < s->nworkers; k++) {
    worker *w = &s->workers[k];
    w->threaded = 1;
    if (pthread_create(&w->thread, NULL, s->wops.main, w) != 0) {
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
  return s->start_failed ? 1 : 0;
}

void tp__mcp_server_free (tp__mcp_server *s) {
  if (s == NULL) return;
  server_close(s);
  tp__mcp_ui_free(s->ui);
  free(s);
}

/* ---- fuzzing ------------------------------------------------------------------------------
** A server in the calling thread: one worker without a thread of its own (its engine's
** loop is run here), no plugin directories; output goes to the transport t. Each line is
** handled with everything it starts, until nothing is left. */

tp__mcp_server *tp__mcp_server_fuzz_new (const tp__mcp_options *o, const tp__mcp_worker_ops *wops,
                                         const tp__mcp_transport *t) {
  server *s = calloc(1, sizeof *s);
  if (s == NULL) return NULL;
  s->o = *o;
  s->wops = *wops;
  s->quiet = 1;
  s->t = *t;
  s->has_t = 1;
  if (server_init(s) != 0 || s->wops.open(&s->workers[0]) != 0) {
    s->nworkers = 0;
    server_close(s);
    free(s);
    return NULL;
  }
  s->wops.load(&s->workers[0]);
  uv_run(s->loop, UV_RUN_NOWAIT);
  return s;
}

void tp__mcp_server_fuzz_line (tp__mcp_server *s, const char *line, size_t len) {
  handle_line(s, line, len);
  worker *w = &s->workers[0];
  while (s->nrunning > 0 || s->nwaiting > 0 || !tp__mcp_mail_box_empty(&w->mb) ||
         !tp__mcp_mail_box_empty(&s->mb)) {
    uv_run(w->loop, s->nrunning > 0 ? UV_RUN_ONCE : UV_RUN_NOWAIT);
    uv_run(s->loop, UV_RUN_NOWAIT);
  }
}
