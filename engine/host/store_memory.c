/*
** store_memory.c: the memory backend of the state store (store.h), what tp_store_create
** makes: kv, buckets, runs (with their expiry), call logs and sessions of one process,
** shared by its engines (one per worker thread in `tidepool mcp`) under one mutex.
**
** Each table is an array of entries sorted by key (bytes, memcmp order), so get/set/del
** are a binary search and list is a range scan. The kv's byte cap (TP_STORE_KV_CAP,
** keys plus values) bounds the work of every step: a set or delete moves at most one
** pointer per entry. A call log entry's key is the run, a NUL, the seq (8 bytes, big
** endian, offset so that signed order is byte order) and the phase, so a run's log is one
** range in seq order.
**
** Answers are given before the operation returns, after the lock is let go (a callback
** may call the store again). A value is copied out under the lock and handed to cb from
** that copy. With the test hook tp__store_memory_defer, answers wait for the next turn
** of the connection's loop instead, as a remote store's do.
*/
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "util.h"
#include "store_int.h"

typedef struct ment {
  size_t kl, vl;
  char *v;                 /* vl bytes (NULL when vl is 0) */
  double tokens;           /* buckets */
  int64_t a;               /* buckets: when tokens was brought up to date; runs and
                           ** sessions: when it expires (0: never) */
  char k[];
} ment;

typedef struct mtab {
  ment **v;                /* sorted by key */
  size_t n, cap;
} mtab;

typedef struct mstore {
  tp__store_head head;
  pthread_mutex_t mu;
  mtab kv, buckets, runs, logs, sessions;
  size_t used;             /* bytes of the kv's keys plus values */
  int defer;               /* test hook: answers on the next loop turn */
} mstore;

typedef struct mreply {
  struct mreply *next;
  tp_store_cb cb;
  void *ud;
  tp_store_reply r;        /* r.val: owned copy */
} mreply;

typedef struct mconn {
  tp_store_conn base;
  uv_loop_t *loop;
  uv_idle_t *idle;         /* deferred answers (made at the first): an idle handle, so
                           ** that a loop turn that has them does not sleep in poll */
  mreply *head, *tail;
} mconn;

#define M(c) ((mstore *)(void *)(c)->store)

/* ---- tables ------------------------------------------------------------------------- */

static int key_cmp (const char *a, size_t alen, const char *b, size_t blen) {
  int c = memcmp(a, b, alen < blen ? alen : blen);
  return c ? c : (alen > blen) - (alen < blen);
}

/* The index of key, or where it would go (*found 0). */
static size_t find (const mtab *t, const char *key, size_t kl, int *found) {
  size_t lo = 0, hi = t->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int c = key_cmp(t->v[mid]->k, t->v[mid]->kl, key, kl);
    if (c == 0) { *found = 1; return mid; }
    if (c < 0) lo = mid + 1;
    else hi = mid;
  }
  *found = 0;
  return lo;
}

static void ment_free (ment *m) {
  if (m) { free(m->v); free(m); }
}

/* A new entry of key (no value); NULL when out of memory. Made before the lock. */
static ment *ment_new (const char *key, size_t kl) {
  ment *m = malloc(sizeof *m + (kl ? kl : 1));
  if (m == NULL) return NULL;
  memset(m, 0, sizeof *m);
  m->kl = kl;
  memcpy(m->k, key, kl);
  return m;
}

/* Puts m at index i (found: in place of the entry there, which is returned to be freed
** after the lock). -1 when the array cannot grow. */
static int put_at (mtab *t, size_t i, int found, ment *m, ment **old) {
  *old = NULL;
  if (found) { *old = t->v[i]; t->v[i] = m; return 0; }
  if (tp__grow(&t->v, &t->cap, t->n + 1, sizeof *t->v, 16) != 0) return -1;
  memmove(t->v + i + 1, t->v + i, (t->n - i) * sizeof *t->v);
  t->v[i] = m;
  t->n++;
  return 0;
}

static ment *remove_at (mtab *t, size_t i) {
  ment *m = t->v[i];
  memmove(t->v + i, t->v + i + 1, (t->n - i - 1) * sizeof *t->v);
  t->n--;
  return m;
}

static void tab_free (mtab *t) {
  for (size_t i = 0; i < t->n; i++) ment_free(t->v[i]);
  free(t->v);
  memset(t, 0, sizeof *t);
}

static char *dup_bytes (const char *s, size_t n) {
  char *d = malloc(n ? n : 1);
  if (d && n) memcpy(d, s, n);
  return d;
}

/* ---- answers -------------------------------------------------------------------------- */

static void on_idle (uv_idle_t *t) {
  mconn *c = t->data;
  uv_idle_stop(t);
  mreply *q = c->head;
  c->head = c->tail = NULL;
  while (q) {
    mreply *next = q->next;
    q->cb(q->ud, &q->r);
    free((char *)q->r.val);
    free(q);
    q = next;
  }
}

/* Answers cb: at once, or (deferred) on the next loop turn with a copy of val. */
static void answer (mconn *c, tp_store_cb cb, void *ud, int status, const char *val,
                    size_t len, int64_t num, const char *err) {
  tp_store_reply r = { status, val, len, num, err };
  if (!M(&c->base)->defer || c->loop == NULL) { cb(ud, &r); return; }
  mreply *q = calloc(1, sizeof *q);
  char *copy = val ? dup_bytes(val, len) : NULL;
  if (c->idle == NULL && q != NULL) {
    c->idle = malloc(sizeof *c->idle);
    if (c->idle == NULL || uv_idle_init(c->loop, c->idle) != 0) {
      free(c->idle);
      c->idle = NULL;
    }
    else c->idle->data = c;
  }
  if (q == NULL || (val && copy == NULL) || c->idle == NULL) {
    free(q);
    free(copy);
    tp_store_reply oom = { TP_STORE_ERROR, NULL, 0, 0, "out of memory" };
    cb(ud, &oom);
    return;
  }
  q->cb = cb;
  q->ud = ud;
  q->r = r;
  q->r.val = copy;           /* r.err: this file's texts are static */
  if (c->tail) c->tail->next = q;
  else c->head = q;
  c->tail = q;
  uv_idle_start(c->idle, on_idle);
}

static void oom (mconn *c, tp_store_cb cb, void *ud) {
  answer(c, cb, ud, TP_STORE_ERROR, NULL, 0, 0, "out of memory");
}

/* ---- kv --------------------------------------------------------------------------------- */

static void m_kv_get (tp_store_conn *sc, const char *k, size_t kl, tp_store_cb cb, void *ud) {
  mconn *c = (mconn *)sc;
  mstore *s = M(sc);
  char *copy = NULL;
  size_t len = 0;
  int found, ok = 1;
  pthread_mutex_lock(&s->mu);
  size_t i = find(&s->kv, k, kl, &found);
  if (found) {
    len = s->kv.v[i]->vl;
    if ((copy = dup_bytes(s->kv.v[i]->v, len)) == NULL) ok = 0;
  }
  pthread_mutex_unlock(&s->mu);
  if (!ok) { oom(c, cb, ud); return; }
  if (!found) answer(c, cb, ud, TP_STORE_NOTFOUND, NULL, 0, 0, NULL);
  else answer(c, cb, ud, TP_STORE_OK, copy, len, 0, NULL);
  free(copy);
}

static void m_kv_set (tp_store_conn *sc, const char *k, size_t kl, const char *v, size_t vl,
                      tp_store_cb cb, void *ud) {
  mconn *c = (mconn *)sc;
  mstore *s = M(sc);
  if (vl > TP_STORE_MAX_VALUE) {
    answer(c, cb, ud, TP_STORE_TOO_BIG, NULL, 0, 0, NULL);
    return;
  }
  ment *m = ment_new(k, kl), *old = NULL;
  char *text = m ? dup_bytes(v, vl) : NULL;
  if (text == NULL) { ment_free(m); oom(c, cb, ud); return; }
  m->v = text;
  m->vl = vl;
  int found, status = TP_STORE_OK;
  pthread_mutex_lock(&s->mu);
  size_t i = find(&s->kv, k, kl, &found);
  size_t after = s->used - (found ? kl + s->kv.v[i]->vl : 0) + kl + vl;
  if (after > TP_STORE_KV_CAP) status = TP_STORE_TOO_BIG;
  else if (put_at(&s->kv, i, found, m, &old) != 0) status = TP_STORE_ERROR;
  else { s->used = after; m = NULL; }
  size_t used = s->used;
  pthread_mutex_unlock(&s->mu);
  ment_free(m);
  ment_free(old);
  if (status == TP_STORE_ERROR) oom(c, cb, ud);
  else answer(c, cb, ud, status, NULL, 0, (int64_t)(status == TP_STORE_OK ? used : after),
              NULL);
}

static void m_kv_del (tp_store_conn *sc, const char *k, size_t kl, tp_store_cb cb, void *ud) {
  mconn *c = (mconn *)sc;
  mstore *s = M(sc);
  int found;
  ment *old = NULL;
  pthread_mutex_lock(&s->mu);
  size_t i = find(&s->kv, k, kl, &found);
  if (found) {
    old = remove_at(&s->kv, i);
    s->used -= old->kl + old->vl;
  }
  size_t used = s->used;
  pthread_mutex_unlock(&s->mu);
  ment_free(old);
  answer(c, cb, ud, found ? TP_STORE_OK : TP_STORE_NOTFOUND, NULL, 0, (int64_t)used, NULL);
}

static void m_kv_list (tp_store_conn *sc, const char *prefix, size_t pl, const char *after,
                       size_t al, size_t limit, tp_store_cb cb, void *ud) {
  mconn *c = (mconn *)sc;
  mstore *s = M(sc);
  char *buf = NULL;
  size_t n = 0, cap = 0, count = 0;
  int found, bad = tp__store_append(&buf, &n, &cap, "[", 1);
  pthread_mutex_lock(&s->mu);
  size_t i = find(&s->kv, prefix, pl, &found);
  if (after) {
    size_t j = find(&s->kv, after, al, &found);
    if (found) j++;
    if (j > i) i = j;
  }
  for (; !bad && i < s->kv.n && count < limit; i++) {
    const ment *m = s->kv.v[i];
    if (m->kl < pl || memcmp(m->k, prefix, pl) != 0) break;
    if ((count && tp__store_append(&buf, &n, &cap, ",", 1) != 0) ||
        tp__store_json_str(&buf, &n, &cap, m->k, m->kl) != 0) bad = 1;
    count++;
  }
  pthread_mutex_unlock(&s->mu);
  if (bad || tp__store_append(&buf, &n, &cap, "]", 1) != 0) { free(buf); oom(c, cb, ud); return; }
  answer(c, cb, ud, TP_STORE_OK, buf, n, (int64_t)count, NULL);
  free(buf);
}

/* ---- buckets ---------------------------------------------------------------------------- */

static void m_bucket_take (tp_store_conn *sc, const char *k, size_t kl, double capacity,
                           double per_second, int64_t now_ms, tp_store_cb cb, void *ud) {
  mconn *c = (mconn *)sc;
  mstore *s = M(sc);
  ment *m = ment_new(k, kl), *old = NULL;
  if (m == NULL) { oom(c, cb, ud); return; }
  int found, bad = 0;
  int64_t wait = 0;
  pthread_mutex_lock(&s->mu);
  size_t i = find(&s->buckets, k, kl, &found);
  if (found) {
    ment *b = s->buckets.v[i];
    wait = tp__bucket_step(&b->tokens, &b->a, 0, capacity, per_second, now_ms);
  }
  else {
    wait = tp__bucket_step(&m->tokens, &m->a, 1, capacity, per_second, now_ms);
    if (put_at(&s->buckets, i, 0, m, &old) != 0) bad = 1;
    else m = NULL;
  }
  pthread_mutex_unlock(&s->mu);
  ment_free(m);
  if (bad) oom(c, cb, ud);
  else answer(c, cb, ud, TP_STORE_OK, NULL, 0, wait, NULL);
}

/* ---- runs and their logs ---------------------------------------------------------------- */

/* The live entry of key in t (an expired one is removed, into *gone); NULL when none. */
static ment *live (mtab *t, const char *k, size_t kl, int64_t now, size_t *at, int *found,
                   ment **gone) {
  *gone = NULL;
  size_t i = find(t, k, kl, found);
  *at = i;
  if (!*found) return NULL;
  if (t->v[i]->a != 0 && t->v[i]->a <= now) {
    *gone = remove_at(t, i);
    *found = 0;
    return NULL;
  }
  return t->v[i];
}

static int64_t expiry (int64_t ttl_ms, int64_t now) { return ttl_ms > 0 ? now + ttl_ms : 0; }

static void m_run_put (tp_store_conn *sc, const char *run, const char *rec, size_t rl,
                       int64_t ttl_ms, tp_store_cb cb, void *ud) {
  mconn *c = (mconn *)sc;
  mstore *s = M(sc);
  if (rl > TP_STORE_MAX_VALUE) { answer(c, cb, ud, TP_STORE_TOO_BIG, NULL, 0, 0, NULL); return; }
  size_t kl = strlen(run);
  ment *m = ment_new(run, kl), *old = NULL;
  char *text = m ? dup_bytes(rec, rl) : NULL;
  if (text == NULL) { ment_free(m); oom(c, cb, ud); return; }
  m->v = text;
  m->vl = rl;
  m->a = expiry(ttl_ms, tp__store_now_ms());
  int found, bad = 0;
  pthread_mutex_lock(&s->mu);
  size_t i = find(&s->runs, run, kl, &found);
  if (put_at(&s->runs, i, found, m, &old) != 0) bad = 1;
  else m = NULL;
  pthread_mutex_unlock(&s->mu);
  ment_free(m);
  ment_free(old);
  if (bad) oom(c, cb, ud);
  else answer(c, cb, ud, TP_STORE_OK, NULL, 0, 0, NULL);
}

static void m_run_get (tp_store_conn *sc, const char *run, tp_store_cb cb, void *ud) {
  mconn *c = (mconn *)sc;
  mstore *s = M(sc);
  size_t at, len = 0;
  int found, bad = 0;
  ment *gone;
  char *copy = NULL;
  pthread_mutex_lock(&s->mu);
  ment *m = live(&s->runs, run, strlen(run), tp__store_now_ms(), &at, &found, &gone);
  if (m && (copy = dup_bytes(m->v, len = m->vl)) == NULL) bad = 1;
  pthread_mutex_unlock(&s->mu);
  ment_free(gone);
  if (bad) oom(c, cb, ud);
  else if (m == NULL) answer(c, cb, ud, TP_STORE_NOTFOUND, NULL, 0, 0, NULL);
  else answer(c, cb, ud, TP_STORE_OK, copy, len, 0, NULL);
  free(copy);
}

/* A log key: run, NUL, seq (big endian, sign bit flipped), phase; *kl its length. */
static char *log_key (const char *run, int64_t seq, int phase, size_t *kl) {
  size_t rl = strlen(run);
  char *k = malloc(rl + 10);
  if (k == NULL) return NULL;
  memcpy(k, run, rl + 1);
  uint64_t u = (uint64_t)seq ^ (1ull << 63);
  for (int i = 0; i < 8; i++) k[rl + 1 + i] = (char)(u >> (56 - 8 * i));
  k[rl + 9] = (char)phase;
  *kl = rl + 10;
  return k;
}

static void m_run_del (tp_store_conn *sc, const char *run, tp_store_cb cb, void *ud) {
  mconn *c = (mconn *)sc;
  mstore *s = M(sc);
  size_t rl = strlen(run);
  int found, had = 0;
  ment *old = NULL;
  pthread_mutex_lock(&s->mu);
  size_t i = find(&s->runs, run, rl, &found);
  if (found) { old = remove_at(&s->runs, i); had = 1; }
  /* its log: keys run + NUL + ..., one range */
  size_t lo = find(&s->logs, run, rl + 1, &found), hi = lo;
  while (hi < s->logs.n && s->logs.v[hi]->kl > rl &&
         memcmp(s->logs.v[hi]->k, run, rl + 1) == 0) {
    ment_free(s->logs.v[hi]);
    hi++;
  }
  if (hi > lo) {
    had = 1;
    memmove(s->logs.v + lo, s->logs.v + hi, (s->logs.n - hi) * sizeof *s->logs.v);
    s->logs.n -= hi - lo;
  }
  pthread_mutex_unlock(&s->mu);
  ment_free(old);
  answer(c, cb, ud, had ? TP_STORE_OK : TP_STORE_NOTFOUND, NULL, 0, 0, NULL);
}

static void m_log_put (tp_store_conn *sc, const char *run, int64_t seq, int phase,
                       const char *entry, size_t el, tp_store_cb cb, void *ud) {
  mconn *c = (mconn *)sc;
  mstore *s = M(sc);
  if (el > TP_STORE_MAX_VALUE) { answer(c, cb, ud, TP_STORE_TOO_BIG, NULL, 0, 0, NULL); return; }
  size_t kl;
  char *key = log_key(run, seq, phase, &kl);
  ment *m = key ? ment_new(key, kl) : NULL, *old = NULL;
  char *text = m ? dup_bytes(entry, el) : NULL;
  free(key);
  if (text == NULL) { ment_free(m); oom(c, cb, ud); return; }
  m->v = text;
  m->vl = el;
  int found, bad = 0;
  pthread_mutex_lock(&s->mu);
  size_t i = find(&s->logs, m->k, m->kl, &found);
  if (put_at(&s->logs, i, found, m, &old) != 0) bad = 1;
  else m = NULL;
  pthread_mutex_unlock(&s->mu);
  ment_free(m);
  ment_free(old);
  if (bad) oom(c, cb, ud);
  else answer(c, cb, ud, TP_STORE_OK, NULL, 0, 0, NULL);
}

static void m_log_read (tp_store_conn *sc, const char *run, tp_store_cb cb, void *ud) {
  mconn *c = (mconn *)sc;
  mstore *s = M(sc);
  size_t rl = strlen(run), n = 0, cap = 0, count = 0;
  char *buf = NULL;
  int found, bad = tp__store_append(&buf, &n, &cap, "[", 1);
  pthread_mutex_lock(&s->mu);
  for (size_t i = find(&s->logs, run, rl + 1, &found); !bad && i < s->logs.n; i++) {
    const ment *m = s->logs.v[i];
    if (m->kl <= rl || memcmp(m->k, run, rl + 1) != 0) break;
    if ((count && tp__store_append(&buf, &n, &cap, ",", 1) != 0) ||
        tp__store_append(&buf, &n, &cap, m->v, m->vl) != 0) bad = 1;
    count++;
  }
  pthread_mutex_unlock(&s->mu);
  if (bad || tp__store_append(&buf, &n, &cap, "]", 1) != 0) { free(buf); oom(c, cb, ud); return; }
  if (count == 0) answer(c, cb, ud, TP_STORE_NOTFOUND, NULL, 0, 0, NULL);
  else answer(c, cb, ud, TP_STORE_OK, buf, n, (int64_t)count, NULL);
  free(buf);
}

/* ---- sessions ------------------------------------------------------------------------------ */

/* Whether the lease of the holder name (nl bytes) is there; called with s->mu held. It
** removes nothing (an index into the table is kept across it). Out of memory: alive. */
static int lease_alive (mtab *t, const char *name, size_t nl, int64_t now) {
  size_t pl = strlen(TP_STORE_LEASE_PREFIX);
  char *k = malloc(pl + nl + 1);
  if (k == NULL) return 1;
  memcpy(k, TP_STORE_LEASE_PREFIX, pl);
  memcpy(k + pl, name, nl);
  int found;
  size_t i = find(t, k, pl + nl, &found);
  free(k);
  return found && (t->v[i]->a == 0 || t->v[i]->a > now);
}

static void m_session_claim (tp_store_conn *sc, const char *session, const char *owner,
                             int64_t ttl_ms, int mode, tp_store_cb cb, void *ud) {
  mconn *c = (mconn *)sc;
  mstore *s = M(sc);
  size_t kl = strlen(session), ol = strlen(owner), at;
  int64_t now = tp__store_now_ms();
  ment *m = ment_new(session, kl), *old = NULL, *gone;
  char *text = m ? dup_bytes(owner, ol) : NULL;
  if (text == NULL) { ment_free(m); oom(c, cb, ud); return; }
  m->v = text;
  m->vl = ol;
  m->a = expiry(ttl_ms, now);
  char *holder = NULL;
  size_t hl = 0;
  int found, status = TP_STORE_OK, dead = 0;
  pthread_mutex_lock(&s->mu);
  ment *cur = live(&s->sessions, session, kl, now, &at, &found, &gone);
  if (cur && (cur->vl != ol || memcmp(cur->v, owner, ol) != 0)) {
    dead = mode != 0 && !lease_alive(&s->sessions, cur->v, cur->vl, now);
    if (!dead || mode == TP_STORE_PROBE) status = TP_STORE_CONFLICT;
    if ((holder = dup_bytes(cur->v, hl = cur->vl)) == NULL) status = TP_STORE_ERROR;
  }
  if (status == TP_STORE_OK) {
    if (put_at(&s->sessions, at, found, m, &old) != 0) status = TP_STORE_ERROR;
    else m = NULL;
  }
  pthread_mutex_unlock(&s->mu);
  ment_free(m);
  ment_free(old);
  ment_free(gone);
  if (status == TP_STORE_ERROR) oom(c, cb, ud);
  else if (status == TP_STORE_CONFLICT || dead) answer(c, cb, ud, status, holder, hl, dead, NULL);
  else answer(c, cb, ud, status, owner, ol, 0, NULL);
  free(holder);
}

static void m_session_release (tp_store_conn *sc, const char *session, const char *owner,
                               tp_store_cb cb, void *ud) {
  mconn *c = (mconn *)sc;
  mstore *s = M(sc);
  size_t kl = strlen(session), ol = strlen(owner), at;
  int found, status = TP_STORE_NOTFOUND;
  ment *gone, *old = NULL;
  pthread_mutex_lock(&s->mu);
  ment *cur = live(&s->sessions, session, kl, tp__store_now_ms(), &at, &found, &gone);
  if (cur && cur->vl == ol && memcmp(cur->v, owner, ol) == 0) {
    old = remove_at(&s->sessions, at);
    status = TP_STORE_OK;
  }
  pthread_mutex_unlock(&s->mu);
  ment_free(old);
  ment_free(gone);
  answer(c, cb, ud, status, NULL, 0, 0, NULL);
}

/* ---- the store and its connections --------------------------------------------------------- */

static tp_store_conn *m_connect (tp_store *st, void *loop, char *err, size_t errlen) {
  (void)st;
  mconn *c = calloc(1, sizeof *c);
  if (c == NULL) {
    if (err && errlen) { strncpy(err, "out of memory", errlen - 1); err[errlen - 1] = '\0'; }
    return NULL;
  }
  c->loop = loop;
  return &c->base;
}

static void free_handle (uv_handle_t *h) { free(h); }

static void m_close (tp_store_conn *sc) {
  mconn *c = (mconn *)sc;
  mreply *q = c->head;
  c->head = c->tail = NULL;
  while (q) {
    mreply *next = q->next;
    tp_store_reply r = { TP_STORE_CLOSED, NULL, 0, 0, "the store's connection closed" };
    q->cb(q->ud, &r);
    free((char *)q->r.val);
    free(q);
    q = next;
  }
  if (c->idle) uv_close((uv_handle_t *)c->idle, free_handle);
  free(c);
}

static void m_destroy (tp_store *st) {
  mstore *s = (mstore *)(void *)st;
  tab_free(&s->kv);
  tab_free(&s->buckets);
  tab_free(&s->runs);
  tab_free(&s->logs);
  tab_free(&s->sessions);
  pthread_mutex_destroy(&s->mu);
  free(s);
}

static const tp_store_ops memory_ops = {
  "memory", m_connect, m_close, m_destroy, m_kv_get, m_kv_set, m_kv_del, m_kv_list,
  m_bucket_take, m_run_put, m_run_get, m_run_del, m_log_put, m_log_read, m_session_claim,
  m_session_release
};

tp_store *tp__store_memory_new (void) {
  mstore *s = calloc(1, sizeof *s);
  if (s == NULL) return NULL;
  if (pthread_mutex_init(&s->mu, NULL) != 0) { free(s); return NULL; }
  s->head.ops = &memory_ops;
  s->head.refs = 1;
  return (tp_store *)(void *)s;
}

void tp__store_memory_defer (tp_store *st, int on) {
  if (((tp__store_head *)(void *)st)->ops == &memory_ops) ((mstore *)(void *)st)->defer = on;
}

int tp__store_shared (const tp_store *st) {
  const tp__store_head *h = (const tp__store_head *)(const void *)st;
  if (h->ops != &memory_ops) return 1;
  return ((const mstore *)(const void *)st)->defer;
}

/* ---- the public handle (tidepool.h) --------------------------------------------------------- */

tp_store *tp_store_create (void) { return tp__store_memory_new(); }

void tp_store_destroy (tp_store *s) { tp__store_unref(s); }
