/*
** mail.c: the mailboxes between the protocol thread and the workers (see mail.h).
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
#include "state.h"
#include "mail.h"

/* ---- mailboxes ----------------------------------------------------------------------- */

int tp__mcp_mail_box_init (mailbox *mb, uv_loop_t *loop, uv_async_cb cb, void *data) {
  if (pthread_mutex_init(&mb->mu, NULL) != 0) return -1;
  if (uv_async_init(loop, &mb->async, cb) != 0) { pthread_mutex_destroy(&mb->mu); return -1; }
  mb->async.data = data;
  mb->head = mb->tail = NULL;
  mb->inited = 1;
  return 0;
}

/* Appends m and wakes the receiver's loop. Callable from any thread while the
** receiver's async handle is open. */
void tp__mcp_mail_post (mailbox *mb, mail *m) {
  m->next = NULL;
  pthread_mutex_lock(&mb->mu);
  if (mb->tail) mb->tail->next = m;
  else mb->head = m;
  mb->tail = m;
  pthread_mutex_unlock(&mb->mu);
  uv_async_send(&mb->async);
}

/* Takes every message posted so far, in order. */
mail *tp__mcp_mail_take_all (mailbox *mb) {
  pthread_mutex_lock(&mb->mu);
  mail *m = mb->head;
  mb->head = mb->tail = NULL;
  pthread_mutex_unlock(&mb->mu);
  return m;
}

int tp__mcp_mail_box_empty (mailbox *mb) {
  pthread_mutex_lock(&mb->mu);
  int empty = mb->head == NULL;
  pthread_mutex_unlock(&mb->mu);
  return empty;
}

mail *tp__mcp_mail_new (int kind) {
  mail *m = calloc(1, sizeof *m);
  if (m) m->kind = kind;
  return m;
}

/* Frees a message that is not a request's own (M_RUN, M_DONE). */
void tp__mcp_mail_free (mail *m) {
  if (m == NULL || m->kind == M_RUN || m->kind == M_DONE) return;
  free(m->text);
  free(m->logger);
  free(m->summary);
  free(m->tool);
  json_decref(m->id);
  free(m);
}

json_t *tp__mcp_mail_notification (const char *method, json_t *params) {
  return json_pack("{s:s, s:s, s:o}", "jsonrpc", "2.0", "method", method,
                   "params", params ? params : json_object());
}
/* ---- messages from a worker ------------------------------------------------------------ */

/* Posts msg (stolen), a notification of request q, as a line for the protocol thread. */
void tp__mcp_mail_line (job *q, json_t *j) {
  worker *w = q->w;
  if (j == NULL) return;
  size_t len;
  char *text = tp_json_text(j, &len);
  json_decref(j);
  mail *m = text ? tp__mcp_mail_new(M_LINE) : NULL;
  if (m == NULL) {
    free(text);
    fprintf(stderr, "tidepool mcp: out of memory (a tp__mcp_mail_notification)\n");
    return;
  }
  m->w = w;
  m->q = q->rq;
  m->text = text;
  m->len = len;
  tp__mcp_mail_post(&w->s->mb, m);
}

void tp__mcp_mail_log (worker *w, int level, const char *fmt, ...) {
  char text[1000];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  mail *m = tp__mcp_mail_new(M_LOG);
  if (m == NULL || (m->text = strdup(text)) == NULL) { free(m); return; }
  m->w = w;
  m->level = level;
  tp__mcp_mail_post(&w->s->mb, m);
}

