/*
** store_sqlite.c: the SQLite backend of the state store (store.h), the embedded durable
** default (tp_store_open("DIR"): DIR/tidepool.db; "sqlite:PATH": that file). Each
** connection (one per engine, so per loop and thread) has an sqlite3 connection of its
** own, opened with SQLITE_OPEN_NOMUTEX, and answers before the operation returns.
**
** Durability: WAL mode with synchronous=NORMAL. A transaction is written to the WAL file
** (write(2)) before COMMIT returns, so what was acknowledged survives the death of the
** process, kill -9 included: the pages are the kernel's then. NORMAL leaves out the
** fsync of each commit (FULL's), which only a crash of the machine itself (power, kernel)
** would need: such a crash may lose the last commits, never the database's consistency.
** A busy timeout (5 s) lets processes that share the file wait for each other's locks.
**
** A full disk (or a file-size limit) fails the one write that met it, and the store comes
** back as soon as there is room again. The WAL is bounded: it is checkpointed every
** WAL_PAGES pages and cut back to WAL_KEEP bytes after each checkpoint (SQLite's default
** lets it grow to 4 MB and never shrinks it, so on a small disk the WAL itself kept every
** later write out, across restarts). A write that failed for room (SQLITE_FULL, or an
** I/O error writing) checkpoints with TRUNCATE, which moves what the WAL holds into the
** database and gives its space back; when even that finds no room, the next write tries
** again.
**
** One transaction per operation; the ones that read before they write (kv_set with the
** byte count, bucket_take, session_claim) take the write lock first (BEGIN IMMEDIATE),
** so two processes never both take the last token. The schema's version is PRAGMA
** user_version (SCHEMA below): a newer database is refused, an older one migrated.
*/
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "store_int.h"

#define SCHEMA 1
#define BUSY_MS 5000
#define WAL_PAGES 128            /* auto-checkpoint: about 512 KB of 4 KB pages */
#define WAL_KEEP (512 * 1024)    /* bytes the WAL file is cut back to after one */

typedef struct sstore {
  tp__store_head head;
  char *path;
} sstore;

enum { Q_KV_GET, Q_KV_OLD, Q_KV_SET, Q_KV_DEL, Q_KV_LIST, Q_USED_GET, Q_USED_SET,
       Q_B_GET, Q_B_SET, Q_RUN_PUT, Q_RUN_GET, Q_RUN_DEL, Q_LOG_DEL, Q_LOG_PUT, Q_LOG_READ,
       Q_S_GET, Q_S_SET, Q_S_DEL, Q_BEGIN, Q_BEGIN_W, Q_COMMIT, Q_ROLLBACK, NQ };

static const char *const sql[NQ] = {
  "SELECT v FROM kv WHERE k = ?1",
  "SELECT length(k) + length(v) FROM kv WHERE k = ?1",
  "INSERT OR REPLACE INTO kv (k, v) VALUES (?1, ?2)",
  "DELETE FROM kv WHERE k = ?1 RETURNING length(k) + length(v)",
  "SELECT k FROM kv WHERE k >= ?1 AND (?2 IS NULL OR k < ?2) AND (?3 IS NULL OR k > ?3) "
    "ORDER BY k LIMIT ?4",
  "SELECT v FROM meta WHERE k = 'kv_bytes'",
  "INSERT OR REPLACE INTO meta (k, v) VALUES ('kv_bytes', ?1)",
  "SELECT tokens, t_ms FROM buckets WHERE k = ?1",
  "INSERT OR REPLACE INTO buckets (k, tokens, t_ms) VALUES (?1, ?2, ?3)",
  "INSERT OR REPLACE INTO runs (id, rec, expires) VALUES (?1, ?2, ?3)",
  "SELECT rec, expires FROM runs WHERE id = ?1",
  "DELETE FROM runs WHERE id = ?1",
  "DELETE FROM calllog WHERE run = ?1",
  "INSERT OR REPLACE INTO calllog (run, seq, phase, entry) VALUES (?1, ?2, ?3, ?4)",
  "SELECT entry FROM calllog WHERE run = ?1 ORDER BY seq, phase",
  "SELECT owner, expires FROM sessions WHERE id = ?1",
  "INSERT OR REPLACE INTO sessions (id, owner, expires) VALUES (?1, ?2, ?3)",
  "DELETE FROM sessions WHERE id = ?1 AND owner = ?2",
  "BEGIN", "BEGIN IMMEDIATE", "COMMIT", "ROLLBACK"
};

typedef struct sconn {
  tp_store_conn base;
  sqlite3 *db;
  sqlite3_stmt *q[NQ];
  char err[512];
} sconn;

/* ---- opening ----------------------------------------------------------------------- */

static const char schema_v1[] =
  "CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v INTEGER NOT NULL);"
  "CREATE TABLE IF NOT EXISTS kv (k BLOB PRIMARY KEY, v BLOB NOT NULL) WITHOUT ROWID;"
  "CREATE TABLE IF NOT EXISTS buckets (k BLOB PRIMARY KEY, tokens REAL NOT NULL,"
  "  t_ms INTEGER NOT NULL) WITHOUT ROWID;"
  "CREATE TABLE IF NOT EXISTS runs (id TEXT PRIMARY KEY, rec BLOB NOT NULL,"
  "  expires INTEGER NOT NULL);"
  "CREATE TABLE IF NOT EXISTS calllog (run TEXT NOT NULL, seq INTEGER NOT NULL,"
  "  phase INTEGER NOT NULL, entry BLOB NOT NULL, PRIMARY KEY (run, seq, phase))"
  "  WITHOUT ROWID;"
  "CREATE TABLE IF NOT EXISTS sessions (id TEXT PRIMARY KEY, owner TEXT NOT NULL,"
  "  expires INTEGER NOT NULL);"
  "INSERT OR IGNORE INTO meta (k, v) VALUES ('kv_bytes', 0);";

static void set_err (char *err, size_t errlen, const char *fmt, ...)
  __attribute__((format(printf, 3, 4)));
static void set_err (char *err, size_t errlen, const char *fmt, ...) {
  if (err == NULL || errlen == 0) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
}

/* Opens path with the connection's settings; NULL with err. */
static sqlite3 *open_db (const char *path, char *err, size_t errlen) {
  sqlite3 *db = NULL;
  int rc = sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
                           SQLITE_OPEN_NOMUTEX, NULL);
  if (rc != SQLITE_OK) {
    set_err(err, errlen, "%s: cannot open the state database: %s", path,
            db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
    sqlite3_close(db);
    return NULL;
  }
  sqlite3_busy_timeout(db, BUSY_MS);
  char *msg = NULL;
  char pragmas[200];
  snprintf(pragmas, sizeof pragmas, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; "
           "PRAGMA wal_autocheckpoint=%d; PRAGMA journal_size_limit=%d;", WAL_PAGES, WAL_KEEP);
  if (sqlite3_exec(db, pragmas, NULL, NULL, &msg) != SQLITE_OK) {
    set_err(err, errlen, "%s: cannot set up the state database: %s", path,
            msg ? msg : sqlite3_errmsg(db));
    sqlite3_free(msg);
    sqlite3_close(db);
    return NULL;
  }
  return db;
}

static int user_version (sqlite3 *db) {
  sqlite3_stmt *st;
  int v = -1;
  if (sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &st, NULL) != SQLITE_OK) return -1;
  if (sqlite3_step(st) == SQLITE_ROW) v = sqlite3_column_int(st, 0);
  sqlite3_finalize(st);
  return v;
}

/* Makes or migrates the schema, in one write transaction. -1 with err. */
static int setup_schema (sqlite3 *db, const char *path, char *err, size_t errlen) {
  char *msg = NULL;
  if (sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, &msg) != SQLITE_OK) goto fail;
  int v = user_version(db);
  if (v < 0) goto fail;
  if (v > SCHEMA) {
    char what[160];
    snprintf(what, sizeof what, "schema %d; this one reads up to %d", v, SCHEMA);
    set_err(err, errlen, "%s: written by a newer tidepool (%s): use that version, or "
            "another state directory", path, what);
    sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
    return -1;
  }
  /* version 0: new (or not ours, if it has other tables: IF NOT EXISTS keeps those) */
  if (v < 1 && sqlite3_exec(db, schema_v1, NULL, NULL, &msg) != SQLITE_OK) goto fail;
  /* a version 2 migrates here: if (v < 2) ALTER TABLE ... */
  char pragma[64];
  snprintf(pragma, sizeof pragma, "PRAGMA user_version = %d", SCHEMA);
  if (v < SCHEMA && sqlite3_exec(db, pragma, NULL, NULL, &msg) != SQLITE_OK) goto fail;
  if (sqlite3_exec(db, "COMMIT", NULL, NULL, &msg) != SQLITE_OK) goto fail;
  return 0;
fail:
  set_err(err, errlen, "%s: cannot set up the state database: %s", path,
          msg ? msg : sqlite3_errmsg(db));
  sqlite3_free(msg);
  sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
  return -1;
}

static void s_close (tp_store_conn *sc) {
  sconn *c = (sconn *)sc;
  for (int i = 0; i < NQ; i++) sqlite3_finalize(c->q[i]);
  sqlite3_close(c->db);
  free(c);
}

static tp_store_conn *s_connect (tp_store *st, void *loop, char *err, size_t errlen) {
  (void)loop;
  sstore *s = (sstore *)(void *)st;
  sconn *c = calloc(1, sizeof *c);
  if (c == NULL) { set_err(err, errlen, "out of memory"); return NULL; }
  if ((c->db = open_db(s->path, err, errlen)) == NULL) { free(c); return NULL; }
  for (int i = 0; i < NQ; i++) {
    if (sqlite3_prepare_v3(c->db, sql[i], -1, SQLITE_PREPARE_PERSISTENT, &c->q[i], NULL)
        != SQLITE_OK) {
      set_err(err, errlen, "%s: the state database does not have tidepool's tables: %s",
              s->path, sqlite3_errmsg(c->db));
      s_close(&c->base);
      return NULL;
    }
  }
  return &c->base;
}

static void s_destroy (tp_store *st) {
  sstore *s = (sstore *)(void *)st;
  free(s->path);
  free(s);
}

/* ---- running statements -------------------------------------------------------------- */

static sqlite3_stmt *q (sconn *c, int i) {
  sqlite3_stmt *st = c->q[i];
  sqlite3_reset(st);
  sqlite3_clear_bindings(st);
  return st;
}

/* Runs st (bound already) to its first row or its end; 0, or -1 on failure. */
static int step1 (sqlite3_stmt *st) {
  int rc = sqlite3_step(st);
  sqlite3_reset(st);
  return rc == SQLITE_DONE || rc == SQLITE_ROW ? 0 : -1;
}

/* Runs statement i, which has no parameters. */
static int exec1 (sconn *c, int i) { return step1(q(c, i)); }

static int begin (sconn *c, int write) { return exec1(c, write ? Q_BEGIN_W : Q_BEGIN); }

/* A failure for want of room: the disk or filesystem is full, or a write went past a
** file-size limit (EFBIG comes back as an I/O error on write or truncate). */
static int out_of_room (int xrc) {
  return (xrc & 0xff) == SQLITE_FULL || xrc == SQLITE_IOERR_WRITE ||
         xrc == SQLITE_IOERR_TRUNCATE || xrc == SQLITE_IOERR_FSYNC;
}

/* Answers TP_STORE_ERROR with SQLite's message (after a rollback). A failure for room
** gives the WAL's space back, so that the store recovers once there is room again. */
static void fail (sconn *c, tp_store_cb cb, void *ud, const char *what) {
  int xrc = sqlite3_extended_errcode(c->db);
  snprintf(c->err, sizeof c->err, "the state database failed to %s: %s%s", what,
           sqlite3_errmsg(c->db), out_of_room(xrc) ? " (the disk is full or a file-size "
           "limit was reached: free space, and the next write is tried again)" : "");
  if (!sqlite3_get_autocommit(c->db)) exec1(c, Q_ROLLBACK);
  if (out_of_room(xrc))
    sqlite3_wal_checkpoint_v2(c->db, NULL, SQLITE_CHECKPOINT_TRUNCATE, NULL, NULL);
  tp_store_reply r = { TP_STORE_ERROR, NULL, 0, 0, c->err };
  cb(ud, &r);
}

static void reply (tp_store_cb cb, void *ud, int status, const char *val, size_t len,
                   int64_t num) {
  tp_store_reply r = { status, val, len, num, NULL };
  cb(ud, &r);
}

static void bind_blob (sqlite3_stmt *st, int i, const char *p, size_t n) {
  sqlite3_bind_blob64(st, i, n ? p : "", (sqlite3_uint64)n, SQLITE_STATIC);
}

static void bind_text (sqlite3_stmt *st, int i, const char *s) {
  sqlite3_bind_text(st, i, s, -1, SQLITE_STATIC);
}

static int commit (sconn *c) { return exec1(c, Q_COMMIT); }

/* ---- kv -------------------------------------------------------------------------------- */

static void s_kv_get (tp_store_conn *sc, const char *k, size_t kl, tp_store_cb cb, void *ud) {
  sconn *c = (sconn *)sc;
  sqlite3_stmt *st = q(c, Q_KV_GET);
  bind_blob(st, 1, k, kl);
  int rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) {
    const char *v = sqlite3_column_blob(st, 0);
    size_t n = (size_t)sqlite3_column_bytes(st, 0);
    reply(cb, ud, TP_STORE_OK, v ? v : "", n, 0);
  }
  else if (rc == SQLITE_DONE) reply(cb, ud, TP_STORE_NOTFOUND, NULL, 0, 0);
  else fail(c, cb, ud, "read a key");
  sqlite3_reset(st);
}

static int64_t kv_used (sconn *c, int *bad) {
  sqlite3_stmt *st = q(c, Q_USED_GET);
  int64_t used = 0;
  int rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) used = sqlite3_column_int64(st, 0);
  else if (rc != SQLITE_DONE) *bad = 1;
  sqlite3_reset(st);
  return used;
}

static int set_used (sconn *c, int64_t used) {
  sqlite3_stmt *st = q(c, Q_USED_SET);
  sqlite3_bind_int64(st, 1, used);
  return step1(st) == 0 ? 0 : -1;
}

static void s_kv_set (tp_store_conn *sc, const char *k, size_t kl, const char *v, size_t vl,
                      tp_store_cb cb, void *ud) {
  sconn *c = (sconn *)sc;
  if (vl > TP_STORE_MAX_VALUE) { reply(cb, ud, TP_STORE_TOO_BIG, NULL, 0, 0); return; }
  if (begin(c, 1) != 0) { fail(c, cb, ud, "begin a write"); return; }
  int bad = 0;
  int64_t used = kv_used(c, &bad), old = 0;
  sqlite3_stmt *st = q(c, Q_KV_OLD);
  bind_blob(st, 1, k, kl);
  int rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) old = sqlite3_column_int64(st, 0);
  else if (rc != SQLITE_DONE) bad = 1;
  sqlite3_reset(st);
  if (bad) { fail(c, cb, ud, "read the kv's size"); return; }
  int64_t after = used - old + (int64_t)(kl + vl);
  if (after > (int64_t)TP_STORE_KV_CAP) {
    exec1(c, Q_ROLLBACK);
    reply(cb, ud, TP_STORE_TOO_BIG, NULL, 0, after);
    return;
  }
  st = q(c, Q_KV_SET);
  bind_blob(st, 1, k, kl);
  bind_blob(st, 2, v, vl);
  if (step1(st) != 0 || set_used(c, after) != 0 || commit(c) != 0) {
    fail(c, cb, ud, "write a key");
    return;
  }
  reply(cb, ud, TP_STORE_OK, NULL, 0, after);
}

static void s_kv_del (tp_store_conn *sc, const char *k, size_t kl, tp_store_cb cb, void *ud) {
  sconn *c = (sconn *)sc;
  if (begin(c, 1) != 0) { fail(c, cb, ud, "begin a write"); return; }
  int bad = 0;
  int64_t used = kv_used(c, &bad), gone = -1;
  sqlite3_stmt *st = q(c, Q_KV_DEL);
  bind_blob(st, 1, k, kl);
  int rc = bad ? SQLITE_ERROR : sqlite3_step(st);
  if (rc == SQLITE_ROW) { gone = sqlite3_column_int64(st, 0); rc = sqlite3_step(st); }
  sqlite3_reset(st);
  if (rc != SQLITE_DONE) { fail(c, cb, ud, "delete a key"); return; }
  if (gone >= 0) used -= gone;
  if ((gone >= 0 && set_used(c, used) != 0) || commit(c) != 0) {
    fail(c, cb, ud, "delete a key");
    return;
  }
  reply(cb, ud, gone >= 0 ? TP_STORE_OK : TP_STORE_NOTFOUND, NULL, 0, used);
}

/* The least key above every key that starts with p (p with its last byte below 0xff
** raised, the 0xff bytes after it cut); 0 when there is none (p empty or all 0xff). */
static size_t successor (const char *p, size_t pl, char *out) {
  while (pl > 0 && (unsigned char)p[pl - 1] == 0xff) pl--;
  if (pl == 0) return 0;
  memcpy(out, p, pl);
  out[pl - 1] = (char)((unsigned char)out[pl - 1] + 1);
  return pl;
}

static void s_kv_list (tp_store_conn *sc, const char *prefix, size_t pl, const char *after,
                       size_t al, size_t limit, tp_store_cb cb, void *ud) {
  sconn *c = (sconn *)sc;
  char *hi = malloc(pl ? pl : 1), *buf = NULL;
  size_t n = 0, cap = 0, count = 0;
  if (hi == NULL) { reply(cb, ud, TP_STORE_ERROR, NULL, 0, 0); return; }
  size_t hl = successor(prefix, pl, hi);
  if (begin(c, 0) != 0) { free(hi); fail(c, cb, ud, "begin a read"); return; }
  sqlite3_stmt *st = q(c, Q_KV_LIST);
  bind_blob(st, 1, prefix, pl);
  if (hl) bind_blob(st, 2, hi, hl);
  if (after) bind_blob(st, 3, after, al);
  sqlite3_bind_int64(st, 4, (sqlite3_int64)(limit > INT64_MAX ? INT64_MAX : limit));
  int rc, bad = tp__store_append(&buf, &n, &cap, "[", 1);
  while (!bad && (rc = sqlite3_step(st)) == SQLITE_ROW) {
    const char *k = sqlite3_column_blob(st, 0);
    size_t kl = (size_t)sqlite3_column_bytes(st, 0);
    if ((count && tp__store_append(&buf, &n, &cap, ",", 1) != 0) ||
        tp__store_json_str(&buf, &n, &cap, k ? k : "", kl) != 0) bad = 1;
    count++;
  }
  sqlite3_reset(st);
  free(hi);
  if (!bad && rc != SQLITE_DONE) { free(buf); fail(c, cb, ud, "list keys"); return; }
  commit(c);
  if (bad || tp__store_append(&buf, &n, &cap, "]", 1) != 0) {
    free(buf);
    tp_store_reply r = { TP_STORE_ERROR, NULL, 0, 0, "out of memory" };
    cb(ud, &r);
    return;
  }
  reply(cb, ud, TP_STORE_OK, buf, n, (int64_t)count);
  free(buf);
}

/* ---- buckets ----------------------------------------------------------------------------- */

static void s_bucket_take (tp_store_conn *sc, const char *k, size_t kl, double capacity,
                           double per_second, int64_t now_ms, tp_store_cb cb, void *ud) {
  sconn *c = (sconn *)sc;
  if (begin(c, 1) != 0) { fail(c, cb, ud, "begin a write"); return; }
  sqlite3_stmt *st = q(c, Q_B_GET);
  bind_blob(st, 1, k, kl);
  double tokens = 0;
  int64_t t = 0;
  int rc = sqlite3_step(st), fresh = rc != SQLITE_ROW;
  if (rc == SQLITE_ROW) { tokens = sqlite3_column_double(st, 0); t = sqlite3_column_int64(st, 1); }
  sqlite3_reset(st);
  if (rc != SQLITE_ROW && rc != SQLITE_DONE) { fail(c, cb, ud, "read a rate bucket"); return; }
  int64_t wait = tp__bucket_step(&tokens, &t, fresh, capacity, per_second, now_ms);
  st = q(c, Q_B_SET);
  bind_blob(st, 1, k, kl);
  sqlite3_bind_double(st, 2, tokens);
  sqlite3_bind_int64(st, 3, t);
  if (step1(st) != 0 || commit(c) != 0) { fail(c, cb, ud, "write a rate bucket"); return; }
  reply(cb, ud, TP_STORE_OK, NULL, 0, wait);
}

/* ---- runs and logs -------------------------------------------------------------------------- */

static void s_run_put (tp_store_conn *sc, const char *run, const char *rec, size_t rl,
                       int64_t ttl_ms, tp_store_cb cb, void *ud) {
  sconn *c = (sconn *)sc;
  if (rl > TP_STORE_MAX_VALUE) { reply(cb, ud, TP_STORE_TOO_BIG, NULL, 0, 0); return; }
  sqlite3_stmt *st = q(c, Q_RUN_PUT);
  bind_text(st, 1, run);
  bind_blob(st, 2, rec, rl);
  sqlite3_bind_int64(st, 3, ttl_ms > 0 ? tp__store_now_ms() + ttl_ms : 0);
  if (step1(st) != 0) { fail(c, cb, ud, "write a run"); return; }
  reply(cb, ud, TP_STORE_OK, NULL, 0, 0);
}

static int del_run (sconn *c, const char *run, int *had) {
  sqlite3_stmt *st = q(c, Q_RUN_DEL);
  bind_text(st, 1, run);
  if (step1(st) != 0) return -1;
  *had = sqlite3_changes(c->db) > 0;
  st = q(c, Q_LOG_DEL);
  bind_text(st, 1, run);
  if (step1(st) != 0) return -1;
  if (sqlite3_changes(c->db) > 0) *had = 1;
  return 0;
}

static void s_run_get (tp_store_conn *sc, const char *run, tp_store_cb cb, void *ud) {
  sconn *c = (sconn *)sc;
  sqlite3_stmt *st = q(c, Q_RUN_GET);
  bind_text(st, 1, run);
  int rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) {
    int64_t exp = sqlite3_column_int64(st, 1);
    if (exp == 0 || exp > tp__store_now_ms()) {
      const char *v = sqlite3_column_blob(st, 0);
      reply(cb, ud, TP_STORE_OK, v ? v : "", (size_t)sqlite3_column_bytes(st, 0), 0);
      sqlite3_reset(st);
      return;
    }
    sqlite3_reset(st);
    int had;  /* expired: it goes, with its log */
    if (begin(c, 1) == 0 && del_run(c, run, &had) == 0) commit(c);
    else if (!sqlite3_get_autocommit(c->db)) exec1(c, Q_ROLLBACK);
    reply(cb, ud, TP_STORE_NOTFOUND, NULL, 0, 0);
    return;
  }
  sqlite3_reset(st);
  if (rc == SQLITE_DONE) reply(cb, ud, TP_STORE_NOTFOUND, NULL, 0, 0);
  else fail(c, cb, ud, "read a run");
}

static void s_run_del (tp_store_conn *sc, const char *run, tp_store_cb cb, void *ud) {
  sconn *c = (sconn *)sc;
  int had = 0;
  if (begin(c, 1) != 0 || del_run(c, run, &had) != 0 || commit(c) != 0) {
    fail(c, cb, ud, "delete a run");
    return;
  }
  reply(cb, ud, had ? TP_STORE_OK : TP_STORE_NOTFOUND, NULL, 0, 0);
}

static void s_log_put (tp_store_conn *sc, const char *run, int64_t seq, int phase,
                       const char *entry, size_t el, tp_store_cb cb, void *ud) {
  sconn *c = (sconn *)sc;
  if (el > TP_STORE_MAX_VALUE) { reply(cb, ud, TP_STORE_TOO_BIG, NULL, 0, 0); return; }
  sqlite3_stmt *st = q(c, Q_LOG_PUT);
  bind_text(st, 1, run);
  sqlite3_bind_int64(st, 2, seq);
  sqlite3_bind_int(st, 3, phase);
  bind_blob(st, 4, entry, el);
  if (step1(st) != 0) { fail(c, cb, ud, "write a call log entry"); return; }
  reply(cb, ud, TP_STORE_OK, NULL, 0, 0);
}

static void s_log_read (tp_store_conn *sc, const char *run, tp_store_cb cb, void *ud) {
  sconn *c = (sconn *)sc;
  char *buf = NULL;
  size_t n = 0, cap = 0, count = 0;
  if (begin(c, 0) != 0) { fail(c, cb, ud, "begin a read"); return; }
  sqlite3_stmt *st = q(c, Q_LOG_READ);
  bind_text(st, 1, run);
  int rc, bad = tp__store_append(&buf, &n, &cap, "[", 1);
  while (!bad && (rc = sqlite3_step(st)) == SQLITE_ROW) {
    const char *e = sqlite3_column_blob(st, 0);
    if ((count && tp__store_append(&buf, &n, &cap, ",", 1) != 0) ||
        tp__store_append(&buf, &n, &cap, e ? e : "", (size_t)sqlite3_column_bytes(st, 0)))
      bad = 1;
    count++;
  }
  sqlite3_reset(st);
  if (!bad && rc != SQLITE_DONE) { free(buf); fail(c, cb, ud, "read a call log"); return; }
  commit(c);
  if (bad || tp__store_append(&buf, &n, &cap, "]", 1) != 0) {
    free(buf);
    tp_store_reply r = { TP_STORE_ERROR, NULL, 0, 0, "out of memory" };
    cb(ud, &r);
    return;
  }
  if (count == 0) reply(cb, ud, TP_STORE_NOTFOUND, NULL, 0, 0);
  else reply(cb, ud, TP_STORE_OK, buf, n, (int64_t)count);
  free(buf);
}

/* ---- sessions ---------------------------------------------------------------------------- */

/* Whether the lease of holder is there (inside the claim's transaction): 1, 0, or -1
** when it could not be read. */
static int lease_alive (sconn *c, const char *holder, int64_t now) {
  size_t pl = strlen(TP_STORE_LEASE_PREFIX), hl = strlen(holder);
  char *k = malloc(pl + hl + 1);
  if (k == NULL) return -1;
  memcpy(k, TP_STORE_LEASE_PREFIX, pl);
  memcpy(k + pl, holder, hl + 1);
  sqlite3_stmt *st = q(c, Q_S_GET);
  bind_text(st, 1, k);
  int rc = sqlite3_step(st), alive = 0;
  if (rc == SQLITE_ROW) {
    int64_t exp = sqlite3_column_int64(st, 1);
    alive = exp == 0 || exp > now;
  }
  else if (rc != SQLITE_DONE) alive = -1;
  sqlite3_reset(st);
  free(k);
  return alive;
}

static void s_session_claim (tp_store_conn *sc, const char *session, const char *owner,
                             int64_t ttl_ms, int mode, tp_store_cb cb, void *ud) {
  sconn *c = (sconn *)sc;
  int64_t now = tp__store_now_ms();
  char *took = NULL;  /* the holder whose lease lapsed, taken over */
  size_t tl = 0;
  if (begin(c, 1) != 0) { fail(c, cb, ud, "begin a write"); return; }
  sqlite3_stmt *st = q(c, Q_S_GET);
  bind_text(st, 1, session);
  int rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) {
    const char *holder = (const char *)sqlite3_column_text(st, 0);
    int64_t exp = sqlite3_column_int64(st, 1);
    if ((exp == 0 || exp > now) && holder && strcmp(holder, owner) != 0) {
      size_t hl = (size_t)sqlite3_column_bytes(st, 0);
      char *copy = malloc(hl + 1);
      if (copy) memcpy(copy, holder, hl + 1);
      sqlite3_reset(st);
      int alive = copy == NULL || mode == 0 ? 1 : lease_alive(c, copy, now);
      if (alive < 0) { free(copy); fail(c, cb, ud, "read a lease"); return; }
      if (copy == NULL || alive || mode == TP_STORE_PROBE) {
        exec1(c, Q_ROLLBACK);
        if (copy == NULL) {
          tp_store_reply r = { TP_STORE_ERROR, NULL, 0, 0, "out of memory" };
          cb(ud, &r);
          return;
        }
        reply(cb, ud, TP_STORE_CONFLICT, copy, hl, !alive);
        free(copy);
        return;
      }
      took = copy;
      tl = hl;
    }
  }
  sqlite3_reset(st);
  if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
    free(took);
    fail(c, cb, ud, "read a session");
    return;
  }
  st = q(c, Q_S_SET);
  bind_text(st, 1, session);
  bind_text(st, 2, owner);
  sqlite3_bind_int64(st, 3, ttl_ms > 0 ? now + ttl_ms : 0);
  if (step1(st) != 0 || commit(c) != 0) {
    free(took);
    fail(c, cb, ud, "claim a session");
    return;
  }
  if (took) reply(cb, ud, TP_STORE_OK, took, tl, 1);
  else reply(cb, ud, TP_STORE_OK, owner, strlen(owner), 0);
  free(took);
}

static void s_session_release (tp_store_conn *sc, const char *session, const char *owner,
                               tp_store_cb cb, void *ud) {
  sconn *c = (sconn *)sc;
  sqlite3_stmt *st = q(c, Q_S_DEL);
  bind_text(st, 1, session);
  bind_text(st, 2, owner);
  if (step1(st) != 0) { fail(c, cb, ud, "release a session"); return; }
  reply(cb, ud, sqlite3_changes(c->db) > 0 ? TP_STORE_OK : TP_STORE_NOTFOUND, NULL, 0, 0);
}

/* ---- the store ---------------------------------------------------------------------------- */

static const tp_store_ops sqlite_ops = {
  "sqlite", s_connect, s_close, s_destroy, s_kv_get, s_kv_set, s_kv_del, s_kv_list,
  s_bucket_take, s_run_put, s_run_get, s_run_del, s_log_put, s_log_read, s_session_claim,
  s_session_release
};

/* where: a directory (the database is where/tidepool.db) or "sqlite:PATH". The schema is
** made or checked here, once, so that a connection only opens. */
tp_store *tp__store_sqlite_open (const char *where, char *err, size_t errlen) {
  sstore *s = calloc(1, sizeof *s);
  if (s == NULL) { set_err(err, errlen, "out of memory"); return NULL; }
  if (strncmp(where, "sqlite:", 7) == 0) s->path = strdup(where + 7);
  else {
    size_t n = strlen(where) + sizeof "/tidepool.db";
    if ((s->path = malloc(n)) != NULL) snprintf(s->path, n, "%s/tidepool.db", where);
  }
  if (s->path == NULL) { free(s); set_err(err, errlen, "out of memory"); return NULL; }
  sqlite3 *db = open_db(s->path, err, errlen);
  if (db == NULL || setup_schema(db, s->path, err, errlen) != 0) {
    sqlite3_close(db);
    s_destroy((tp_store *)(void *)s);
    return NULL;
  }
  sqlite3_close(db);
  s->head.ops = &sqlite_ops;
  s->head.refs = 1;
  return (tp_store *)(void *)s;
}
