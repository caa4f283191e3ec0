/*
** session_claim.c: which process holds a session, for servers that share a state store
** (tidepool mcp --state redis://...): a session's globals live in one process, and the
** others answer its calls with session.moved naming that one. The claim is the store's
** (store.h, session_claim / session_release, on the engine's own connection), so it is
** atomic across processes; it expires after its ttl unless claimed again.
*/
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "tidepool_server.h"
#include "store_int.h"

typedef struct claim { tp_claim_fn fn; void *ud; } claim;

#define HOLDER_MAX 512   /* bytes of a holder's name handed on */

static void claimed (void *ud, const tp_store_reply *r) {
  claim c = *(claim *)ud;
  free(ud);
  if (r->status == TP_STORE_OK) { c.fn(c.ud, NULL, NULL); return; }
  if (r->status == TP_STORE_CONFLICT) {
    char holder[HOLDER_MAX + 1];
    size_t n = r->val ? (r->len < HOLDER_MAX ? r->len : HOLDER_MAX) : 0;
    if (n) memcpy(holder, r->val, n);
    holder[n] = '\0';
    c.fn(c.ud, n ? holder : "(unnamed)", NULL);
    return;
  }
  c.fn(c.ud, NULL, r->err ? r->err : r->status == TP_STORE_CLOSED
                   ? "the engine's store connection closed" : "the state store failed");
}

int tp_engine_claim_session (tp_engine *e, const char *session, const char *owner,
                             int64_t ttl_ms, tp_claim_fn fn, void *ud) {
  if (e == NULL || session == NULL || owner == NULL || fn == NULL || ttl_ms < 0)
    return TP_EINVAL;
  tp_store_conn *sc = tp__engine_store_conn(e);
  if (sc == NULL) return TP_ESTATE;
  claim *c = malloc(sizeof *c);
  if (c == NULL) return TP_ENOMEM;
  c->fn = fn;
  c->ud = ud;
  sc->ops->session_claim(sc, session, owner, ttl_ms, 0, claimed, c);
  return TP_OK;
}

/* ---- claims with leases -------------------------------------------------------------- */

typedef struct lclaim { tp_lease_fn fn; void *ud; } lclaim;

static void lease_claimed (void *ud, const tp_store_reply *r) {
  lclaim c = *(lclaim *)ud;
  free(ud);
  char holder[HOLDER_MAX + 1];
  size_t n = r->val ? (r->len < HOLDER_MAX ? r->len : HOLDER_MAX) : 0;
  if (n) memcpy(holder, r->val, n);
  holder[n] = '\0';
  const char *h = n ? holder : "(unnamed)";
  if (r->status == TP_STORE_OK) c.fn(c.ud, r->num ? TP_CLAIM_TAKEN : TP_CLAIM_WON,
                                     r->num ? h : NULL, NULL);
  else if (r->status == TP_STORE_CONFLICT) c.fn(c.ud, r->num ? TP_CLAIM_DEAD : TP_CLAIM_HELD,
                                                h, NULL);
  else c.fn(c.ud, TP_CLAIM_FAILED, NULL, r->err ? r->err : r->status == TP_STORE_CLOSED
            ? "the engine's store connection closed" : "the state store failed");
}

static int lease_op (tp_engine *e, const char *key, const char *owner, int64_t ttl_ms,
                     int mode, tp_lease_fn fn, void *ud) {
  if (e == NULL || key == NULL || owner == NULL || fn == NULL || ttl_ms < 0) return TP_EINVAL;
  tp_store_conn *sc = tp__engine_store_conn(e);
  if (sc == NULL) return TP_ESTATE;
  lclaim *c = malloc(sizeof *c);
  if (c == NULL) return TP_ENOMEM;
  c->fn = fn;
  c->ud = ud;
  sc->ops->session_claim(sc, key, owner, ttl_ms, mode, lease_claimed, c);
  return TP_OK;
}

int tp_engine_claim_lease (tp_engine *e, const char *key, const char *owner, int64_t ttl_ms,
                           int flags, tp_lease_fn fn, void *ud) {
  int mode = flags == TP_CLAIM_TAKEOVER ? TP_STORE_TAKEOVER
           : flags == TP_CLAIM_PROBE ? TP_STORE_PROBE : -1;
  if (mode < 0) return TP_EINVAL;
  return lease_op(e, key, owner, ttl_ms, mode, fn, ud);
}

/* A lease is its holder's claim of TP_STORE_LEASE_PREFIX + its name. */
static char *lease_key (const char *owner) {
  if (owner == NULL) return NULL;
  size_t pl = strlen(TP_STORE_LEASE_PREFIX), ol = strlen(owner);
  char *k = malloc(pl + ol + 1);
  if (k) { memcpy(k, TP_STORE_LEASE_PREFIX, pl); memcpy(k + pl, owner, ol + 1); }
  return k;
}

int tp_engine_renew_lease (tp_engine *e, const char *owner, int64_t ttl_ms, tp_lease_fn fn,
                           void *ud) {
  if (owner == NULL || ttl_ms <= 0) return TP_EINVAL;
  char *k = lease_key(owner);
  if (k == NULL) return TP_ENOMEM;
  int rc = lease_op(e, k, owner, ttl_ms, 0, fn, ud);
  free(k);
  return rc;
}

int tp_engine_end_lease (tp_engine *e, const char *owner) {
  if (e == NULL || owner == NULL) return TP_EINVAL;
  char *k = lease_key(owner);
  if (k == NULL) return TP_ENOMEM;
  int rc = tp_engine_release_session(e, k, owner);
  free(k);
  return rc;
}

static void released (void *ud, const tp_store_reply *r) { (void)ud; (void)r; }

int tp_engine_release_session (tp_engine *e, const char *session, const char *owner) {
  if (e == NULL || session == NULL || owner == NULL) return TP_EINVAL;
  tp_store_conn *sc = tp__engine_store_conn(e);
  if (sc == NULL) return TP_ESTATE;
  sc->ops->session_release(sc, session, owner, released, NULL);
  return TP_OK;
}
