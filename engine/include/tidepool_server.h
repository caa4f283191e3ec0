/*
** tidepool_server.h: the part of the C API that only a server needs (tidepool mcp uses
** it): session claims and leases across the processes of a shared store, paused runs
** kept in the state store, and holding a run's wall clock while a person decides.
** Programs that embed the engine need only tidepool.h; this header includes it. The same
** rules hold: TP_OK or a negative TP_E* code, the functions are exports of
** libtidepool.so.0, and values never change.
*/
#ifndef TIDEPOOL_SERVER_H
#define TIDEPOOL_SERVER_H

#include "tidepool.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The MCP protocol versions tidepool speaks, latest first: the i-th (from 0) and its
** TP_MCP_V_* flags in *flags (when flags is not NULL), or NULL past the last. The one
** list both the server (tidepool mcp) and the client of upstream servers read. */
#define TP_MCP_MODERN_VERSION "2026-07-28"  /* the 2026 era's: no handshake */
#define TP_MCP_V_MODERN      1u   /* of the 2026 era: the version travels in each _meta */
#define TP_MCP_V_BATCHES     2u   /* JSON-RPC batches are allowed */
#define TP_MCP_V_ELICIT_MODE 4u   /* elicitation requests carry "mode" */
#define TP_MCP_V_CLIENT      8u   /* accepted from an upstream server */
TP_EXTERN const char *tp_mcp_version(size_t i, unsigned *flags);

/* Stops (hold 1) and restarts (hold 0) the clock of r's wall-clock limit, for a run that
** waits on a person for longer than its limit should count (a paused approval): the time
** between the two calls is added to its deadline. Only a started run that is not done
** and is between steps; holding twice, or restarting a clock that is not held, is a
** no-op. TP_OK, TP_EINVAL (NULL), TP_ESTATE (not started, or done). */
TP_EXTERN int tp_run_hold_wall(tp_run *r, int hold);

/* What r's listed tool calls did when, for a waterfall (an operator's page): JSON text
** {"ms": <since r started>, "calls": [{"seq", "tool", "at", "end", "ok", "code" (when
** it ended not ok, as the envelope's record), "running" (true while it is under way or
** held), "held_at", "held_end" (while a policy held it for a person)}]}, times in
** milliseconds after r started (what has not ended ends now). Never an argument's
** value. Caller frees with tp_free; NULL for NULL r, a run not started, or out of
** memory. */
TP_EXTERN char *tp_run_timeline(const tp_run *r, size_t *len);

/* Session ownership, for servers that share a store (tidepool mcp --state redis://...):
** a session's globals live in one process, the one that holds its claim; another answers
** its calls with the error code session.moved, naming the holder.
** tp_engine_claim_session makes owner the holder of session for ttl_ms (0: until
** released) unless another holds it, or extends owner's claim, atomically across every
** process of the store; fn is called once, on e's loop (perhaps before this returns),
** with holder NULL and err NULL when owner holds it, holder naming the other owner
** (borrowed, valid during fn), or err saying how the store failed. TP_OK, TP_EINVAL (a
** NULL argument, ttl_ms < 0), TP_ENOMEM, TP_ESTATE (no store connection:
** tp_engine_error says why); fn is not called then. */
typedef void (*tp_claim_fn)(void *ud, const char *holder, const char *err);
TP_EXTERN int tp_engine_claim_session(tp_engine *e, const char *session, const char *owner,
                                      int64_t ttl_ms, tp_claim_fn fn, void *ud);
/* Lets owner's claim of session go (nothing when owner does not hold it); no answer. */
TP_EXTERN int tp_engine_release_session(tp_engine *e, const char *session, const char *owner);

/* Leases: a process that holds claims keeps a lease on its own name, renewed well within
** its ttl (tp_engine_renew_lease: a claim, fn as below; TP_EINVAL for ttl_ms <= 0); a
** holder whose lease lapsed died, or lost the store. tp_engine_end_lease lets it go at
** once (a process that stops). tp_engine_claim_lease claims key as
** tp_engine_claim_session does, and flags say what to do about a holder whose lease
** lapsed: TP_CLAIM_TAKEOVER takes the key from it (outcome TP_CLAIM_TAKEN, holder: its
** name), TP_CLAIM_PROBE leaves it and says so (TP_CLAIM_DEAD, holder: its name). fn's
** outcome otherwise: TP_CLAIM_WON (owner holds it; holder NULL), TP_CLAIM_HELD (holder, a
** live one, holds it), TP_CLAIM_FAILED (err: how the store failed; nothing is known of the
** claim). Same returns as tp_engine_claim_session. */
enum { TP_CLAIM_TAKEOVER = 1, TP_CLAIM_PROBE = 2 };
enum { TP_CLAIM_WON, TP_CLAIM_TAKEN, TP_CLAIM_HELD, TP_CLAIM_DEAD, TP_CLAIM_FAILED };
typedef void (*tp_lease_fn)(void *ud, int outcome, const char *holder, const char *err);
TP_EXTERN int tp_engine_claim_lease(tp_engine *e, const char *key, const char *owner,
                                    int64_t ttl_ms, int flags, tp_lease_fn fn, void *ud);
TP_EXTERN int tp_engine_renew_lease(tp_engine *e, const char *owner, int64_t ttl_ms,
                                    tp_lease_fn fn, void *ud);
TP_EXTERN int tp_engine_end_lease(tp_engine *e, const char *owner);

/* ---- paused runs in the state store -------------------------------------------------
** What a front end keeps of a paused run so that it survives a restart of the process
** (tidepool mcp --state): a record (the front end's own text) that expires ttl_ms after it
** is put (0: never), and the run's call log, tp_run_on_log's entries kept by their
** position pos (0, 1, ...; putting a position again replaces it). tp_engine_log_read
** answers a JSON array of the entries in position order, ready for tp_run_replay;
** tp_engine_run_del deletes the record and its log. They go through e's connection to its
** store (tp_engine_set_store's) on e's loop, asynchronously: done (may be NULL) is called
** exactly once on e's loop, later or before the function returns, with a status:
** TP_STORED_OK; TP_STORED_NOTFOUND (no such record, it expired, or no log);
** TP_STORED_TOO_BIG (a record or an entry over TP_STORED_MAX bytes: nothing is cut);
** TP_STORED_ERROR (err says what failed, for a person); TP_STORED_CLOSED (the engine was
** destroyed first). val, len: run_get's record, log_read's array (borrowed during done).
** The functions return TP_OK when done will be called, else TP_EINVAL (NULL or empty
** arguments), TP_ESTATE (the store cannot be reached: tp_engine_error says why) or
** TP_ENOMEM, and done is not called. Use from e's thread. */
#define TP_STORED_OK       0
#define TP_STORED_NOTFOUND 1
#define TP_STORED_TOO_BIG  2
#define TP_STORED_ERROR    4
#define TP_STORED_CLOSED   5
#define TP_STORED_MAX      ((size_t)1 << 20)
/* The store statuses in one table, XX(NAME, text), as TP_ERRNO_MAP (values fixed). */
#define TP_STORED_MAP(XX)                                                   \
  XX(STORED_OK,       "stored or read")                                    \
  XX(STORED_NOTFOUND, "no such record, it expired, or no log")             \
  XX(STORED_TOO_BIG,  "a record or an entry over TP_STORED_MAX bytes")     \
  XX(STORED_ERROR,    "the store failed")                                  \
  XX(STORED_CLOSED,   "the engine was destroyed first")
typedef void (*tp_stored_fn)(void *ud, int status, const char *val, size_t len,
                             const char *err);
TP_EXTERN int tp_engine_run_put(tp_engine *e, const char *run, const char *rec, size_t len,
                                uint64_t ttl_ms, tp_stored_fn done, void *ud);
TP_EXTERN int tp_engine_run_get(tp_engine *e, const char *run, tp_stored_fn done, void *ud);
TP_EXTERN int tp_engine_run_del(tp_engine *e, const char *run, tp_stored_fn done, void *ud);
TP_EXTERN int tp_engine_log_put(tp_engine *e, const char *run, uint64_t pos,
                                const char *entry, size_t len, tp_stored_fn done, void *ud);
TP_EXTERN int tp_engine_log_read(tp_engine *e, const char *run, tp_stored_fn done, void *ud);

#ifdef __cplusplus
}
#endif

#endif
