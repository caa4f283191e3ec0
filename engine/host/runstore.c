/*
** runstore.c: paused runs in the state store for front ends (tidepool.h, "paused runs in
** the state store"): the runs and call logs of store.h through the engine's own
** connection, with a callback of the public API's shape. Each operation carries a small
** adapter (the caller's callback and its ud) that the store's answer frees.
*/
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "tidepool_server.h"
#include "store_int.h"

typedef struct adapter { tp_stored_fn done; void *ud; } adapter;

static void on_reply (void *ud, const tp_store_reply *r) {
  adapter *a = ud;
  int st = r->status >= TP_STORE_OK && r->status <= TP_STORE_CLOSED ? r->status
                                                                     : TP_STORE_ERROR;
  if (a->done) a->done(a->ud, st, r->val, r->val ? r->len : 0, r->err);
  free(a);
}

/* The connection and an adapter, or a status (nothing is called then). */
static int start (tp_engine *e, const char *run, tp_stored_fn done, void *ud,
                  tp_store_conn **c, adapter **a) {
  if (e == NULL || run == NULL || *run == '\0') return TP_EINVAL;
  if ((*c = tp__engine_store_conn(e)) == NULL) return TP_ESTATE;
  if ((*a = malloc(sizeof **a)) == NULL) return TP_ENOMEM;
  (*a)->done = done;
  (*a)->ud = ud;
  return TP_OK;
}

int tp_engine_run_put (tp_engine *e, const char *run, const char *rec, size_t len,
                       uint64_t ttl_ms, tp_stored_fn done, void *ud) {
  tp_store_conn *c;
  adapter *a;
  if (rec == NULL) return TP_EINVAL;
  int rc = start(e, run, done, ud, &c, &a);
  if (rc == TP_OK) c->ops->run_put(c, run, rec, len, (int64_t)ttl_ms, on_reply, a);
  return rc;
}

int tp_engine_run_get (tp_engine *e, const char *run, tp_stored_fn done, void *ud) {
  tp_store_conn *c;
  adapter *a;
  int rc = start(e, run, done, ud, &c, &a);
  if (rc == TP_OK) c->ops->run_get(c, run, on_reply, a);
  return rc;
}

int tp_engine_run_del (tp_engine *e, const char *run, tp_stored_fn done, void *ud) {
  tp_store_conn *c;
  adapter *a;
  int rc = start(e, run, done, ud, &c, &a);
  if (rc == TP_OK) c->ops->run_del(c, run, on_reply, a);
  return rc;
}

int tp_engine_log_put (tp_engine *e, const char *run, uint64_t pos, const char *entry,
                       size_t len, tp_stored_fn done, void *ud) {
  tp_store_conn *c;
  adapter *a;
  if (entry == NULL || pos > (uint64_t)INT64_MAX) return TP_EINVAL;
  int rc = start(e, run, done, ud, &c, &a);
  if (rc == TP_OK) c->ops->log_put(c, run, (int64_t)pos, 0, entry, len, on_reply, a);
  return rc;
}

int tp_engine_log_read (tp_engine *e, const char *run, tp_stored_fn done, void *ud) {
  tp_store_conn *c;
  adapter *a;
  int rc = start(e, run, done, ud, &c, &a);
  if (rc == TP_OK) c->ops->log_read(c, run, on_reply, a);
  return rc;
}

/* The public statuses are store.h's, number for number. */
_Static_assert(TP_STORED_OK == TP_STORE_OK && TP_STORED_NOTFOUND == TP_STORE_NOTFOUND &&
               TP_STORED_TOO_BIG == TP_STORE_TOO_BIG && TP_STORED_ERROR == TP_STORE_ERROR &&
               TP_STORED_CLOSED == TP_STORE_CLOSED && TP_STORED_MAX == TP_STORE_MAX_VALUE,
               "tidepool.h's TP_STORED_* match store.h");
