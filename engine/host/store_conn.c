/*
** store_conn.c: an engine's connection to its state store, made at the first need
** (tp__engine_store_conn, store_int.h): apart from engine.c, the public API at the top of
** the host's floors, because the files that keep state (kvstore.c, runstore.c, policy.c)
** sit below it.
*/
#include "engine.h"
#include "store_int.h"

tp_store_conn *tp__engine_store_conn (tp_engine *e) {
  if (e->store_conn != NULL) return e->store_conn;
  if (e->store == NULL && (e->store = tp__store_memory_new()) == NULL) {
    tp__engine_set_error(e, "out of memory");
    return NULL;
  }
  char err[512];
  tp_store_conn *c = tp__store_connect(e->store, e->loop, err, sizeof err);
  if (c == NULL) {
    tp__engine_set_error(e, "the state store (%s) cannot be reached: %s",
                         tp__store_kind(e->store), err);
    return NULL;
  }
  /* every operation timed for /metrics (store_timed.c) */
  if ((e->store_conn = tp__store_timed(e, c)) == NULL) {
    tp__store_close(c);
    tp__engine_set_error(e, "out of memory");
  }
  return e->store_conn;
}
