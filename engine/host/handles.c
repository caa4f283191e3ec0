/*
** handles.c: the libuv handles an engine's loop still holds when it is destroyed.
**
** tp_engine_destroy closes every handle left on the loop, so a program or a plugin that
** forgot one does not make the loop's close fail. Such a handle is still a bug (a timer
** a plugin started and never closed keeps its callback and memory for the engine's life),
** so the handles found open are also counted here, as luv's test runner fails a test
** that leaves one: the C tests' harness (spec/c/tp_test.h) reads the count after each
** test. Production behaviour is only the closing.
*/
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <uv.h>

#include "engine.h"
#include "host.h"

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static size_t open_total;     /* over the process's life */
static char open_last[160];   /* the types of the last engine's open handles */

typedef struct walk { const void *own[2]; size_t n; char what[160]; } walk;  /* own: the engine's */

static void count_one (uv_handle_t *h, void *arg) {
  walk *w = arg;
  if (uv_is_closing(h) || (const void *)h == w->own[0] || (const void *)h == w->own[1]) return;
  w->n++;
  size_t len = strlen(w->what);
  if (len + 24 < sizeof w->what)
    snprintf(w->what + len, sizeof w->what - len, "%s%s%s", len ? ", " : "",
             uv_handle_type_name(uv_handle_get_type(h)), uv_is_active(h) ? " (active)" : "");
}

size_t tp__engine_count_open_handles (tp_engine *e) {
  walk w = { .own = { e->idle, e->far_timer }, .n = 0, .what = "" };
  uv_walk(e->loop, count_one, &w);
  if (w.n == 0) return 0;
  pthread_mutex_lock(&mu);
  open_total += w.n;
  memcpy(open_last, w.what, sizeof open_last);
  pthread_mutex_unlock(&mu);
  return w.n;
}

size_t tp__engine_open_handles (const char **what) {
  pthread_mutex_lock(&mu);
  size_t n = open_total;
  if (what) *what = open_last;
  pthread_mutex_unlock(&mu);
  return n;
}
