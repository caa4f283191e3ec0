/*
** store.h: the state store, one interface with three backends: memory (tp_store_create,
** the kv tools' store of one process, kvstore.c), SQLite (tp_store_open("DIR"), the
** embedded durable default, store_sqlite.c) and Redis (tp_store_open("redis://H:P/N"),
** shared by several processes, store_redis.c). It holds:
**   kv            the kv.* tools' keys (values: JSON text);
**   buckets       the policy's rate-limit token buckets, taken atomically;
**   runs          paused runs (a JSON record: script, limits, policy hash, seed, pending
**                 calls, ...) with an expiry, and each run's call log; also, under the
**                 ids "tool-shape:<tool>", the shape of a tool's last result (host.c:
**                 E.seen), which no paused run's id can be;
**   sessions      which process owns a session (its globals live there).
**
** A tp_store (public name, tidepool.h) is what was opened: shared by every engine of a
** process, reference counted and thread-safe. Each engine talks to it through a
** connection of its own on its own loop (tp__store_connect), so that no backend ever
** blocks a loop it does not own, and Redis can use hiredis's libuv adapter.
**
** Every operation is asynchronous. It calls cb exactly once, on the connection's loop:
** later, or before it returns when the answer is at hand (SQLite, memory; callers must
** allow both). Closing a connection answers what is outstanding with TP_STORE_CLOSED.
** A reply's strings are borrowed until cb returns. An operation that cannot even be
** started (out of memory) answers TP_STORE_ERROR at once. Keys and values are byte
** strings; values over TP_STORE_MAX_VALUE are refused (TP_STORE_TOO_BIG), never cut.
*/
#ifndef tidepool_store_h
#define tidepool_store_h

#include <stddef.h>
#include <stdint.h>

#include "tidepool.h"

#define TP_STORE_MAX_VALUE ((size_t)1 << 20)   /* 1 MiB: one value, one log entry */
#define TP_STORE_LEASE_PREFIX "\x1flive:"      /* a lease: its holder's claim of this + name */
enum { TP_STORE_TAKEOVER = 1, TP_STORE_PROBE = 2 };   /* session_claim's modes */
#define TP_STORE_KV_CAP ((size_t)16 << 20)     /* 16 MiB: the kv's keys plus values, all
                                               ** entries together (kv_set: TOO_BIG) */

enum {
  TP_STORE_OK = 0,
  TP_STORE_NOTFOUND,   /* get of a missing key, run or log */
  TP_STORE_TOO_BIG,    /* a value over TP_STORE_MAX_VALUE, or over the store's byte cap */
  TP_STORE_CONFLICT,   /* session_claim: another owner holds it (reply.val names it) */
  TP_STORE_ERROR,      /* the backend failed: reply.err says how (for a person) */
  TP_STORE_CLOSED      /* the connection closed before the answer came */
};

typedef struct tp_store_reply {
  int status;
  const char *val;     /* kv_get: the value; kv_list: a JSON array of keys; run_get: the
                       ** record; log_read: a JSON array of the entries in seq order;
                       ** session_claim: the owner (ours on OK, theirs on CONFLICT) */
  size_t len;
  int64_t num;         /* bucket_take: 0 taken, else the ms until a token is there;
                       ** kv_set/kv_del: bytes the kv holds now (kv_set refused over
                       ** TP_STORE_KV_CAP: the bytes it would have held); kv_list,
                       ** log_read: how many; run_list: unused */
  const char *err;     /* TP_STORE_ERROR: what failed */
} tp_store_reply;

typedef void (*tp_store_cb)(void *ud, const tp_store_reply *reply);

typedef struct tp_store_conn tp_store_conn;

/* What a backend implements. A connection is the backend's own struct whose first
** member is a tp_store_conn (so the generic part can find the ops). */
typedef struct tp_store_ops {
  const char *kind;                          /* "memory", "sqlite", "redis" */
  tp_store_conn *(*connect)(tp_store *s, void *uv_loop, char *err, size_t errlen);
  void (*close)(tp_store_conn *c);           /* answers what is outstanding: CLOSED */
  void (*destroy)(tp_store *s);              /* the last reference went */

  void (*kv_get)(tp_store_conn *c, const char *k, size_t kl, tp_store_cb cb, void *ud);
  void (*kv_set)(tp_store_conn *c, const char *k, size_t kl, const char *v, size_t vl,
                 tp_store_cb cb, void *ud);
  void (*kv_del)(tp_store_conn *c, const char *k, size_t kl, tp_store_cb cb, void *ud);
  /* keys starting with prefix, in byte order, after `after` (NULL: from the first), at
  ** most limit of them */
  void (*kv_list)(tp_store_conn *c, const char *prefix, size_t pl, const char *after,
                  size_t al, size_t limit, tp_store_cb cb, void *ud);

  /* Takes one token of the bucket key (capacity tokens, refilled at per_second, full
  ** when first seen) as at now_ms, atomically across every process of the store. */
  void (*bucket_take)(tp_store_conn *c, const char *k, size_t kl, double capacity,
                      double per_second, int64_t now_ms, tp_store_cb cb, void *ud);

  /* Paused runs: put replaces the record, which expires ttl_ms after (0: never). */
  void (*run_put)(tp_store_conn *c, const char *run, const char *rec, size_t rl,
                  int64_t ttl_ms, tp_store_cb cb, void *ud);
  void (*run_get)(tp_store_conn *c, const char *run, tp_store_cb cb, void *ud);
  void (*run_del)(tp_store_conn *c, const char *run, tp_store_cb cb, void *ud); /* + log */
  /* The call log of a run: entry is JSON text; (seq, phase) is its key, phase 0 for the
  ** entry written before the call, 1 for the one after (it replaces nothing else). */
  void (*log_put)(tp_store_conn *c, const char *run, int64_t seq, int phase,
                  const char *entry, size_t el, tp_store_cb cb, void *ud);
  void (*log_read)(tp_store_conn *c, const char *run, tp_store_cb cb, void *ud);

  /* Sessions: claim makes owner the holder of session for ttl_ms unless another holds
  ** it (CONFLICT, val: the holder); claiming again extends it. release lets it go (only
  ** when owner holds it). A process's lease is its claim of TP_STORE_LEASE_PREFIX + its
  ** name, renewed while it lives; mode says what a claim does about a holder whose lease
  ** is gone (it died, or lost the store): 0 nothing (CONFLICT as for any holder),
  ** TP_STORE_TAKEOVER takes the claim from it (OK, num 1, val: that holder),
  ** TP_STORE_PROBE leaves it (CONFLICT, num 1). num is 0 otherwise. */
  void (*session_claim)(tp_store_conn *c, const char *session, const char *owner,
                        int64_t ttl_ms, int mode, tp_store_cb cb, void *ud);
  void (*session_release)(tp_store_conn *c, const char *session, const char *owner,
                          tp_store_cb cb, void *ud);
} tp_store_ops;

struct tp_store_conn { const tp_store_ops *ops; tp_store *store; };

/* store.c: the generic part. A backend's tp_store begins with this header. */
typedef struct tp__store_head { const tp_store_ops *ops; int refs; /* atomic */ } tp__store_head;

void tp__store_ref(tp_store *s);
void tp__store_unref(tp_store *s);
const char *tp__store_kind(const tp_store *s);
/* A connection of s on loop (a uv_loop_t *); NULL with err filled. */
tp_store_conn *tp__store_connect(tp_store *s, void *uv_loop, char *err, size_t errlen);
void tp__store_close(tp_store_conn *c);

/* The backends' openers (tp_store_open dispatches on the location). */
tp_store *tp__store_sqlite_open(const char *dir, char *err, size_t errlen);
tp_store *tp__store_redis_open(const char *url, char *err, size_t errlen);

#endif
