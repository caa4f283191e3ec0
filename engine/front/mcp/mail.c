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
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <uv.h>

#include "tidepool.h"
#include "state.h"
#include "mail.h"

/* ---- mailboxes ----------------------------------------------------------------------- */

static void box_readable (uv_poll_t *h, int status, int events) {
  (void)status;
  (void)events;
  mailbox *mb = h->data;
  uint64_t n;
  while (read(mb->fd, &n, sizeof n) < 0 && errno == EINTR) {}  /* EAGAIN: nothing more */
  mb->cb(mb->data);
}

/* The mailbox whose mail cb (data) takes on loop. 0, or -1 (nothing to undo). */
int tp__mcp_mail_box_init (mailbox *mb, uv_loop_t *loop, void (*cb)(void *data), void *data) {
  mb->fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (mb->fd < 0) return -1;
  if (pthread_mutex_init(&mb->mu, NULL) != 0) { close(mb->fd); mb->fd = -1; return -1; }
  if (uv_poll_init(loop, &mb->poll, mb->fd) != 0) {
    pthread_mutex_destroy(&mb->mu);
    close(mb->fd);
    mb->fd = -1;
    return -1;
  }
  mb->poll.data = mb;
  mb->cb = cb;
  mb->data = data;
  if (uv_poll_start(&mb->poll, UV_READABLE, box_readable) != 0) {
    uv_close((uv_handle_t *)&mb->poll, NULL);
    pthread_mutex_destroy(&mb->mu);
    close(mb->fd);
    mb->fd = -1;
    return -1;
  }
  mb->head = mb->tail = NULL;
  mb->inited = 1;
  return 0;
}

/* Stops the receiver's loop watching mb (its handle closes with the loop's next turn);
** posting stays safe until tp__mcp_mail_box_destroy. */
void tp__mcp_mail_box_close (mailbox *mb) {
  if (mb->inited && !uv_is_closing((uv_handle_t *)&mb->poll))
    uv_close((uv_handle_t *)&mb->poll, NULL);
}

/* Frees what mb holds but its mail, once its handle is closed and no one posts. */
void tp__mcp_mail_box_destroy (mailbox *mb) {
  if (!mb->inited) return;
  mb->inited = 0;
  pthread_mutex_destroy(&mb->mu);
  close(mb->fd);
  mb->fd = -1;
}

/* Appends m and wakes the receiver's loop (only when the list was empty: a receiver takes
** all that is there). Callable from any thread until the mailbox is destroyed. */
void tp__mcp_mail_post (mailbox *mb, mail *m) {
  m->next = NULL;
  pthread_mutex_lock(&mb->mu);
  int wake = mb->head == NULL;
  if (mb->tail) mb->tail->next = m;
  else mb->head = m;
  mb->tail = m;
  pthread_mutex_unlock(&mb->mu);
  if (wake) {
    uint64_t one = 1;
    while (write(mb->fd, &one, sizeof one) < 0 && errno == EINTR) {}
  }
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

/* Sends j (stolen), a request of request q's run to the client: written at once from this
** thread where the transport can (emit_any: standard output), else as tp__mcp_mail_line. */
void tp__mcp_mail_line_now (job *q, json_t *j) {
  const tp__mcp_transport *t = &q->w->s->t;
  if (j == NULL) return;
  if (t->emit_any == NULL) { tp__mcp_mail_line(q, j); return; }
  size_t len;
  char *text = tp_json_text(j, &len);
  if (text == NULL || len >= LINE_OUT_MAX) {  /* the protocol thread reports it */
    free(text);
    tp__mcp_mail_line(q, j);
    return;
  }
  json_decref(j);
  t->emit_any(t->ud, text, len);
  free(text);
}

/* Sends text (len bytes, taken) as tp__mcp_mail_line_now does. */
void tp__mcp_mail_text_now (job *q, char *text, size_t len) {
  const tp__mcp_transport *t = &q->w->s->t;
  if (t->emit_any != NULL && len < LINE_OUT_MAX) {
    t->emit_any(t->ud, text, len);
    free(text);
    return;
  }
  mail *m = tp__mcp_mail_new(M_LINE);
  if (m == NULL) {
    free(text);
    fprintf(stderr, "tidepool mcp: out of memory (a caller tool's call)\n");
    return;
  }
  m->w = q->w;
  m->q = q->rq;
  m->text = text;
  m->len = len;
  tp__mcp_mail_post(&q->w->s->mb, m);
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

