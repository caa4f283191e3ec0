/*
** store_timed.c: an engine's connection to its state store, timed. It wraps the
** backend's connection (store.h's ops, each forwarded) so that every operation's
** latency and failure reach /metrics (metrics.c: tidepool_store_duration_seconds,
** tidepool_store_errors_total) whatever backend, and whoever asks: the kv module, paused
** runs and their call logs, session claims, the policy's rate buckets.
**
** The answer goes to the caller's callback unchanged; the wrapper only notes the time
** from the call to the answer and whether it was TP_STORE_ERROR or TP_STORE_CLOSED.
*/
#include <stdlib.h>

#include "util.h"
#include "engine.h"
#include "store_int.h"
#include "trace.h"

typedef struct timed_conn {
  tp_store_conn base;          /* ops: the forwarders below; store: the inner one's */
  tp_store_conn *inner;
  tp_engine *e;
} timed_conn;

typedef struct pending {
  tp_store_cb cb;
  void *ud;
  tp_engine *e;
  uint64_t t0;
  int op;
} pending;

static void answered (void *ud, const tp_store_reply *reply) {
  pending *p = ud;
  tp__metrics_store(p->e, p->op, tp__now_ns() - p->t0,
                    reply->status == TP_STORE_ERROR || reply->status == TP_STORE_CLOSED);
  if (p->cb) p->cb(p->ud, reply);
  free(p);
}

/* The pending record for op, or NULL (out of memory: the call then goes untimed). */
static pending *timing (tp_store_conn *c, int op, tp_store_cb cb, void *ud) {
  pending *p = malloc(sizeof *p);
  if (p == NULL) return NULL;
  p->cb = cb;
  p->ud = ud;
  p->e = ((timed_conn *)(void *)c)->e;
  p->op = op;
  p->t0 = tp__now_ns();
  return p;
}

#define INNER(c) (((timed_conn *)(void *)(c))->inner)
/* Calls the inner op with the same arguments, timed when a record could be made. */
#define FORWARD(op, name, c, cb, ud, ...) do { \
    pending *p_ = timing(c, op, cb, ud); \
    if (p_) INNER(c)->ops->name(INNER(c), __VA_ARGS__, answered, p_); \
    else INNER(c)->ops->name(INNER(c), __VA_ARGS__, cb, ud); \
  } while (0)

static void kv_get (tp_store_conn *c, const char *k, size_t kl, tp_store_cb cb, void *ud) {
  FORWARD(TP_STORE_OP_KV_GET, kv_get, c, cb, ud, k, kl);
}
static void kv_set (tp_store_conn *c, const char *k, size_t kl, const char *v, size_t vl,
                    tp_store_cb cb, void *ud) {
  FORWARD(TP_STORE_OP_KV_SET, kv_set, c, cb, ud, k, kl, v, vl);
}
static void kv_del (tp_store_conn *c, const char *k, size_t kl, tp_store_cb cb, void *ud) {
  FORWARD(TP_STORE_OP_KV_DEL, kv_del, c, cb, ud, k, kl);
}
static void kv_list (tp_store_conn *c, const char *prefix, size_t pl, const char *after,
                     size_t al, size_t limit, tp_store_cb cb, void *ud) {
  FORWARD(TP_STORE_OP_KV_LIST, kv_list, c, cb, ud, prefix, pl, after, al, limit);
}
static void bucket_take (tp_store_conn *c, const char *k, size_t kl, double capacity,
                         double per_second, int64_t now_ms, tp_store_cb cb, void *ud) {
  FORWARD(TP_STORE_OP_BUCKET_TAKE, bucket_take, c, cb, ud, k, kl, capacity, per_second,
          now_ms);
}
static void run_put (tp_store_conn *c, const char *run, const char *rec, size_t rl,
                     int64_t ttl_ms, tp_store_cb cb, void *ud) {
  FORWARD(TP_STORE_OP_RUN_PUT, run_put, c, cb, ud, run, rec, rl, ttl_ms);
}
static void run_get (tp_store_conn *c, const char *run, tp_store_cb cb, void *ud) {
  FORWARD(TP_STORE_OP_RUN_GET, run_get, c, cb, ud, run);
}
static void run_del (tp_store_conn *c, const char *run, tp_store_cb cb, void *ud) {
  FORWARD(TP_STORE_OP_RUN_DEL, run_del, c, cb, ud, run);
}
static void log_put (tp_store_conn *c, const char *run, int64_t seq, int phase,
                     const char *entry, size_t el, tp_store_cb cb, void *ud) {
  FORWARD(TP_STORE_OP_LOG_PUT, log_put, c, cb, ud, run, seq, phase, entry, el);
}
static void log_read (tp_store_conn *c, const char *run, tp_store_cb cb, void *ud) {
  FORWARD(TP_STORE_OP_LOG_READ, log_read, c, cb, ud, run);
}
static void session_claim (tp_store_conn *c, const char *session, const char *owner,
                           int64_t ttl_ms, int mode, tp_store_cb cb, void *ud) {
  FORWARD(TP_STORE_OP_SESSION_CLAIM, session_claim, c, cb, ud, session, owner, ttl_ms, mode);
}
static void session_release (tp_store_conn *c, const char *session, const char *owner,
                             tp_store_cb cb, void *ud) {
  FORWARD(TP_STORE_OP_SESSION_RELEASE, session_release, c, cb, ud, session, owner);
}

static void timed_close (tp_store_conn *c) {
  timed_conn *t = (timed_conn *)(void *)c;
  tp__store_close(t->inner);  /* answers what is outstanding (CLOSED), through answered */
  free(t);                    /* tp__store_close then drops base.store's reference */
}

static const tp_store_ops timed_ops = {
  .kind = "timed", .close = timed_close,
  .kv_get = kv_get, .kv_set = kv_set, .kv_del = kv_del, .kv_list = kv_list,
  .bucket_take = bucket_take, .run_put = run_put, .run_get = run_get, .run_del = run_del,
  .log_put = log_put, .log_read = log_read, .session_claim = session_claim,
  .session_release = session_release,
};

tp_store_conn *tp__store_timed (tp_engine *e, tp_store_conn *inner) {
  timed_conn *t = malloc(sizeof *t);
  if (t == NULL) return NULL;
  t->base.ops = &timed_ops;
  t->base.store = inner->store;
  tp__store_ref(inner->store);
  t->inner = inner;
  t->e = e;
  return &t->base;
}
