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
  sc->ops->session_claim(sc, session, owner, ttl_ms, claimed, c);
  return TP_OK;
}

static void released (void *ud, const tp_store_reply *r) { (void)ud; (void)r; }

int tp_engine_release_session (tp_engine *e, const char *session, const char *owner) {
  if (e == NULL || session == NULL || owner == NULL) return TP_EINVAL;
  tp_store_conn *sc = tp__engine_store_conn(e);
  if (sc == NULL) return TP_ESTATE;
  sc->ops->session_release(sc, session, owner, released, NULL);
  return TP_OK;
}
