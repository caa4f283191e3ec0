/*
** store.c: the generic part of the state store (store.h): references, connections, and
** what the backends share (the expiry clock, the token bucket rule, JSON text of
** replies). The public tp_store_open, which picks a backend, is store_open.c, above the
** backends that call this file.
*/
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "util.h"
#include "store_int.h"

#define HEAD(s) ((tp__store_head *)(void *)(s))

void tp__store_ref (tp_store *s) { __atomic_add_fetch(&HEAD(s)->refs, 1, __ATOMIC_RELAXED); }

void tp__store_unref (tp_store *s) {
  if (s == NULL) return;
  if (__atomic_sub_fetch(&HEAD(s)->refs, 1, __ATOMIC_ACQ_REL) == 0) HEAD(s)->ops->destroy(s);
}

const char *tp__store_kind (const tp_store *s) {
  return ((const tp__store_head *)(const void *)s)->ops->kind;
}

tp_store_conn *tp__store_connect (tp_store *s, void *uv_loop, char *err, size_t errlen) {
  tp_store_conn *c = HEAD(s)->ops->connect(s, uv_loop, err, errlen);
  if (c == NULL) return NULL;
  c->ops = HEAD(s)->ops;
  c->store = s;
  tp__store_ref(s);
  return c;
}

void tp__store_close (tp_store_conn *c) {
  if (c == NULL) return;
  tp_store *s = c->store;
  c->ops->close(c);
  tp__store_unref(s);
}

/* ---- shared by the backends --------------------------------------------------------- */

static int64_t (*store_clock)(void) = tp__wall_ms;

int64_t tp__store_now_ms (void) { return store_clock(); }

void tp__store_set_clock (int64_t (*now_ms)(void)) {
  store_clock = now_ms ? now_ms : tp__wall_ms;
}

int64_t tp__bucket_step (double *tokens, int64_t *t_ms, int fresh, double capacity,
                         double per_second, int64_t now_ms) {
  if (fresh) { *tokens = capacity; *t_ms = now_ms; }
  else if (now_ms > *t_ms) {
    *tokens += (double)(now_ms - *t_ms) / 1000.0 * per_second;
    if (*tokens > capacity) *tokens = capacity;
    *t_ms = now_ms;
  }
  if (*tokens >= 1) { *tokens -= 1; return 0; }
  double ms = ceil((1 - *tokens) / per_second * 1000.0);
  if (!(ms >= 1)) ms = 1;
  if (ms > 1e15) ms = 1e15;
  return (int64_t)ms;
}

int tp__store_append (char **buf, size_t *n, size_t *cap, const char *s, size_t len) {
  if (len > SIZE_MAX - 1 - *n || tp__grow(buf, cap, *n + len + 1, 1, 64) != 0) return -1;
  memcpy(*buf + *n, s, len);
  *n += len;
  (*buf)[*n] = '\0';
  return 0;
}

int tp__store_json_str (char **buf, size_t *n, size_t *cap, const char *s, size_t len) {
  if (tp__store_append(buf, n, cap, "\"", 1) != 0) return -1;
  size_t from = 0;
  for (size_t i = 0; i < len; i++) {
    unsigned char ch = (unsigned char)s[i];
    if (ch >= 0x20 && ch != '"' && ch != '\\') continue;
    char esc[8];
    int el = snprintf(esc, sizeof esc, ch == '"' ? "\\\"" : ch == '\\' ? "\\\\" : "\\u%04x",
                      ch);
    if (tp__store_append(buf, n, cap, s + from, i - from) != 0 ||
        tp__store_append(buf, n, cap, esc, (size_t)el) != 0) return -1;
    from = i + 1;
  }
  if (tp__store_append(buf, n, cap, s + from, len - from) != 0) return -1;
  return tp__store_append(buf, n, cap, "\"", 1);
}
