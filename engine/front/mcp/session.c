/*
** session.c: the protocol thread's table of sessions (see state.h): made for a call,
** found by principal and id, dropped (least recently used, idle, over memory, moved) and
** remembered why for the next call of the same id; the worker with the least work.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <uv.h>

#include "clock.h"
#include "tidepool.h"
#include "state.h"
#include "mail.h"
#include "reply.h"
#include "session.h"


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
void tp__mcp_session_drop (server *s, session *ss, const char *why) {
  if (why) {
    remember_drop(s, ss, why);
    /* over HTTP a log line goes to the request being handled, maybe another principal's:
    ** the operator's standard error only */
    void *origin = s->origin;
    s->origin = NULL;
    tp__mcp_reply_log(s, L_INFO, "session %s dropped: %s", ss->id, why);
    s->origin = origin;
  }
  if (ss->prev) ss->prev->next = ss->next;
  else s->sessions = ss->next;
  if (ss->next) ss->next->prev = ss->prev;
  s->nsessions--;
  ss->w->nsess--;
  mail *m = s->done ? NULL : tp__mcp_mail_new(M_DROP);  /* its worker destroys the sandbox */
  if (m) {
    m->n = ss->num;
    tp__mcp_mail_post(&ss->w->mb, m);
  }
  else if (!s->done)
    fprintf(stderr, "tidepool mcp: out of memory: a message to a worker was lost\n");
  free(ss->id);
  free(ss->principal);
  free(ss);
}

static session *session_find (server *s, const char *who, const char *id, size_t len) {
  for (session *ss = s->sessions; ss; ss = ss->next)
    if (sess_is(ss, who, id, len)) return ss;
  return NULL;
}

void tp__mcp_session_sweep (uv_timer_t *t) {
  server *s = t->data;
  uint64_t now = tp__mcp_mono_ns(), idle = s->o.session_idle_us * 1000u;
  char why[160];
  for (session *ss = s->sessions, *next; ss; ss = next) {
    next = ss->next;
    if (!ss->busy && idle && now - ss->last_used_ns > idle) {
      snprintf(why, sizeof why, "it was idle longer than the idle limit of %.3g s",
               (double)s->o.session_idle_us / 1e6);
      tp__mcp_session_drop(s, ss, why);
    }
  }
}

/* The worker with the least work, counting sessions when with_sessions; ties go round. */
worker *tp__mcp_session_least_loaded (server *s, int with_sessions) {
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

/* The session for a call, made if needed. NULL with *err (code) and msg set when the call
** cannot have it. info gets the "session" field of the result. */
session *tp__mcp_session_for (server *s, const char *who, const char *id, size_t idlen,
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
    tp__mcp_session_drop(s, lru, msg);
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
  ss->w = tp__mcp_session_least_loaded(s, 1);
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
