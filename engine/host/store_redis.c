/*
** store_redis.c: the Redis backend of the state store (store.h), for several processes
** that share one state: `tidepool mcp --state redis://HOST:PORT/N`.
**
** Opening checks, with one blocking connection, that Redis answers (AUTH and SELECT
** included) and loads the backend's Lua scripts; a Redis that is down at open is an
** error naming the URL. After that, each tp_store_conn is one asynchronous hiredis
** connection on its own loop (the libuv adapter), so no operation blocks a loop.
**
** Keys, all under the store's prefix P ("tidepool:" unless the URL says ?prefix=):
**   P kv:<key>       a kv value             P kvidx   the kv keys (a sorted set, for list)
**   P kvbytes        bytes of keys + values the kv holds (kept by the kv scripts)
**   P bucket:<key>   a rate bucket (hash t = tokens, ts = ms), expiring once full again
**   P run:<id>       a paused run's record  P log:<id>  its call log (hash "seq:phase")
**   P session:<id>   the owner of a session (or of a run, or a server's lease: store.h),
**                    expiring after the claim's ttl
** Every operation that reads then writes is one Lua script (EVALSHA), so it is atomic
** across processes: a rate limit is exact however many servers take from it.
**
** Connection loss: the operations outstanding answer TP_STORE_ERROR naming the URL and
** what failed (a Redis that answers nothing for timeout_ms, 5 s unless the URL says, is
** a loss too); the next operation reconnects (at once after a loss, then with a backoff
** of 50 ms doubling to 2 s while Redis stays unreachable; operations in the backoff
** answer TP_STORE_ERROR at once). Scripts are loaded again on every connection, so a
** Redis that restarted empty works again.
**
** Ops reach the answer through hiredis's callback. An op never points at its connection:
** a callback finds the connection through ac->data, which is NULL once the connection
** was closed or lost, and REDIS_FREEING on the context tells a close (TP_STORE_CLOSED)
** from a loss (TP_STORE_ERROR).
*/
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include <hiredis/hiredis.h>
#include <hiredis/async.h>
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wcast-align"
#pragma GCC diagnostic ignored "-Wshadow"
#pragma GCC diagnostic ignored "-Wmissing-prototypes"
#include <hiredis/adapters/libuv.h>
#pragma GCC diagnostic pop

#include "store_int.h"

#define BACKOFF_MIN  50                   /* ms */
#define BACKOFF_MAX  2000
#define OPEN_TIMEOUT 3                    /* s, the blocking check at open */
#define OP_TIMEOUT   5000                 /* ms without any reply while ops wait */
#define TTL_MAX      10000000000000LL     /* ms (317 years): Redis refuses far larger */

/* ---- the scripts ----------------------------------------------------------------------
** Numbers arrive as strings and are converted in the script; strings are compared only
** for equality (Redis sets LC_COLLATE from its environment, so < on strings may not be
** byte order). */
enum { S_KV_SET, S_KV_DEL, S_BUCKET, S_RUN_PUT, S_LOG_PUT, S_CLAIM, S_RELEASE, S_N };

static const char *const scripts[S_N] = {
  /* KEYS value, index, bytes; ARGV key, value, cap -> {1, used} | {0, would-be used} */
  [S_KV_SET] =
    "local kl, vl = #ARGV[1], #ARGV[2]\n"
    "local used = tonumber(redis.call('GET', KEYS[3]) or '0')\n"
    "local had = redis.call('EXISTS', KEYS[1]) == 1\n"
    "local after = used + kl + vl\n"
    "if had then after = after - kl - redis.call('STRLEN', KEYS[1]) end\n"
    "if after > tonumber(ARGV[3]) then return {0, after} end\n"
    "redis.call('SET', KEYS[1], ARGV[2])\n"
    "if not had then redis.call('ZADD', KEYS[2], 0, ARGV[1]) end\n"
    "redis.call('SET', KEYS[3], after)\n"
    "return {1, after}\n",
  /* KEYS value, index, bytes; ARGV key -> {1, used} | {0, used} (was not set) */
  [S_KV_DEL] =
    "local used = tonumber(redis.call('GET', KEYS[3]) or '0')\n"
    "if redis.call('EXISTS', KEYS[1]) == 0 then return {0, used} end\n"
    "used = used - #ARGV[1] - redis.call('STRLEN', KEYS[1])\n"
    "redis.call('DEL', KEYS[1])\n"
    "redis.call('ZREM', KEYS[2], ARGV[1])\n"
    "redis.call('SET', KEYS[3], used)\n"
    "return {1, used}\n",
  /* KEYS bucket; ARGV capacity, per_second, now_ms -> 0 taken | ms until a token.
  ** The rule and the order of the arithmetic are tp__bucket_step's (store.c), so every
  ** backend gives the same answers; tokens are kept with 17 digits (exact). A clock
  ** behind the bucket's (another process's) refills nothing. */
  [S_BUCKET] =
    "local cap, rate, now = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])\n"
    "local b = redis.call('HMGET', KEYS[1], 't', 'ts')\n"
    "local tokens, ts = tonumber(b[1]), tonumber(b[2])\n"
    "if tokens == nil or ts == nil then tokens, ts = cap, now end\n"
    "if now > ts then\n"
    "  tokens = math.min(cap, tokens + (now - ts) / 1000 * rate)\n"
    "  ts = now\n"
    "end\n"
    "local wait = 0\n"
    "if tokens >= 1 then tokens = tokens - 1\n"
    "else wait = math.min(1e15, math.max(1, math.ceil((1 - tokens) / rate * 1000))) end\n"
    "redis.call('HSET', KEYS[1], 't', string.format('%.17g', tokens), 'ts',\n"
    "           string.format('%d', ts))\n"
    "local full = math.min(1e13, math.ceil((cap - tokens) / rate * 1000) + 1000)\n"
    "redis.call('PEXPIRE', KEYS[1], string.format('%d', full))\n"
    "return wait\n",
  /* KEYS run, log; ARGV record, ttl_ms (0: never) -> 1. The log expires with its run. */
  [S_RUN_PUT] =
    "if tonumber(ARGV[2]) > 0 then\n"
    "  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])\n"
    "  redis.call('PEXPIRE', KEYS[2], ARGV[2])\n"
    "else\n"
    "  redis.call('SET', KEYS[1], ARGV[1])\n"
    "  redis.call('PERSIST', KEYS[2])\n"
    "end\n"
    "return 1\n",
  /* KEYS log, run; ARGV field, entry -> 1 */
  [S_LOG_PUT] =
    "redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])\n"
    "local ttl = redis.call('PTTL', KEYS[2])\n"
    "if ttl > 0 then redis.call('PEXPIRE', KEYS[1], ttl) end\n"
    "return 1\n",
  /* KEYS session; ARGV owner, ttl_ms (0: never), mode, the key prefix of leases ->
  ** {1, owner, 0} | {1, holder, 1} taken from a holder whose lease lapsed (mode 1) |
  ** {0, holder, 0} | {0, holder, 1} held by one whose lease lapsed (mode 2). A holder's
  ** lease is the key prefix .. its name (a lease is a claim of that key by the holder,
  ** store.h); standalone Redis lets a script read a key it was not given. */
  [S_CLAIM] =
    "local ttl, mode = tonumber(ARGV[2]), tonumber(ARGV[3])\n"
    "local cur = redis.call('GET', KEYS[1])\n"
    "local took = 0\n"
    "if cur and cur ~= ARGV[1] then\n"
    "  if mode == 0 or redis.call('EXISTS', ARGV[4] .. cur) == 1 then return {0, cur, 0} end\n"
    "  if mode == 2 then return {0, cur, 1} end\n"
    "  took = 1\n"
    "end\n"
    "if ttl > 0 then redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])\n"
    "else redis.call('SET', KEYS[1], ARGV[1]) end\n"
    "if took == 1 then return {1, cur, 1} end\n"
    "return {1, ARGV[1], 0}\n",
  /* KEYS session; ARGV owner -> 1 released | 0 owner does not hold it: compare-and-delete */
  [S_RELEASE] =
    "if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end\n"
    "redis.call('DEL', KEYS[1])\n"
    "return 1\n",
};

/* ---- the store and its connections ---------------------------------------------------- */

typedef struct rstore {
  tp__store_head head;
  char *host;              /* NULL for a unix socket */
  int port;
  char *path;              /* the unix socket */
  char *password;          /* NULL: no AUTH */
  int db;
  char *prefix;
  size_t plen;
  char *shown;             /* the URL as messages name it: the password left out */
  size_t kv_cap;
  int64_t timeout_ms;      /* a connection that answers nothing this long is dropped */
  char sha[S_N][41];
} rstore;

typedef struct rconn {
  tp_store_conn base;
  rstore *s;
  uv_loop_t *loop;
  redisAsyncContext *ac;   /* NULL: not connected (the next op connects) */
  int connected;           /* ac finished connecting */
  uint64_t next_try;       /* ms (uv_hrtime): no connecting before */
  uint64_t backoff;        /* ms */
  uint64_t wait;           /* ensure failed: ms until the next try (0: none planned) */
  size_t pending;          /* commands sent on ac and not answered yet */
  uint64_t progress;       /* ms: the last reply, or when pending left 0 */
  uv_timer_t watch;        /* drops ac when pending waits past the timeout */
  char last_err[256];
} rconn;

/* ac->data of a context dropped for its silence: its ops answer TP_STORE_ERROR. */
static char silent_mark;

enum { K_KV_GET, K_KV_SET, K_KV_DEL, K_KV_LIST, K_BUCKET, K_RUN_PUT, K_RUN_GET, K_RUN_DEL,
       K_LOG_PUT, K_LOG_READ, K_CLAIM, K_RELEASE };

typedef struct rop {
  rstore *s;
  int kind;
  tp_store_cb cb;
  void *ud;
  char *prefix;            /* K_KV_LIST: the prefix asked for (filtering the range) */
  size_t pl;
} rop;

static const tp_store_ops redis_ops;

static uint64_t now_ms (void) { return uv_hrtime() / 1000000u; }

static void answer (tp_store_cb cb, void *ud, int status, const char *val, size_t len,
                    int64_t num, const char *err) {
  tp_store_reply r = { status, val, len, num, err };
  cb(ud, &r);
}

static void answer_err (tp_store_cb cb, void *ud, const char *fmt, ...)
  __attribute__((format(printf, 3, 4)));
static void answer_err (tp_store_cb cb, void *ud, const char *fmt, ...) {
  char msg[600];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  answer(cb, ud, TP_STORE_ERROR, NULL, 0, 0, msg);
}

static void op_free (rop *op) {
  free(op->prefix);
  free(op);
}

/* The connection is gone (lost, or never made): ops that follow reconnect, after the
** backoff when it had not even connected. */
static void conn_lost (rconn *c, const char *why) {
  if (c->ac != NULL) c->ac->data = NULL;
  c->ac = NULL;
  c->pending = 0;
  uv_timer_stop(&c->watch);
  snprintf(c->last_err, sizeof c->last_err, "%s", why && *why ? why : "closed by the server");
  uint64_t now = now_ms();
  if (c->connected) { c->backoff = BACKOFF_MIN; c->next_try = now; }
  else {
    c->next_try = now + c->backoff;
    c->backoff = c->backoff * 2 > BACKOFF_MAX ? BACKOFF_MAX : c->backoff * 2;
  }
  c->connected = 0;
}

/* The connection of a context's callback; NULL once it was closed, lost or dropped. */
static rconn *conn_of (const redisAsyncContext *ac) {
  return ac->data == &silent_mark ? NULL : ac->data;
}

/* A reply came on ac: the connection made progress. */
static void replied (const redisAsyncContext *ac) {
  rconn *c = conn_of(ac);
  if (c == NULL) return;
  if (c->pending) c->pending--;
  c->progress = now_ms();
  if (c->pending == 0) uv_timer_stop(&c->watch);
}

/* Every second while commands wait: none answered for the store's timeout drops the
** context (its ops answer TP_STORE_ERROR); the next op connects afresh. */
static void on_watch (uv_timer_t *t) {
  rconn *c = t->data;
  if (c->ac == NULL || c->pending == 0) { uv_timer_stop(t); return; }
  if (now_ms() - c->progress < (uint64_t)c->s->timeout_ms) return;
  redisAsyncContext *ac = c->ac;
  char why[120];
  snprintf(why, sizeof why, "no reply in %lld ms", (long long)c->s->timeout_ms);
  conn_lost(c, why);
  ac->data = &silent_mark;
  redisAsyncFree(ac);
}

/* A command was sent on c->ac. */
static void sent (rconn *c) {
  if (c->pending++ == 0) {
    c->progress = now_ms();
    uv_timer_start(&c->watch, on_watch, 1000, 1000);
  }
}

static void on_connect (const redisAsyncContext *ac, int status) {
  rconn *c = conn_of(ac);
  if (c == NULL) return;
  if (status == REDIS_OK) { c->connected = 1; c->backoff = BACKOFF_MIN; }
  else conn_lost(c, ac->errstr);
}

static void on_disconnect (const redisAsyncContext *ac, int status) {
  rconn *c = conn_of(ac);
  if (c != NULL) conn_lost(c, status == REDIS_OK ? "closed" : ac->errstr);
}

/* AUTH, SELECT and SCRIPT LOAD of a new connection: an error shows in the replies of the
** ops that follow them (NOAUTH, NOSCRIPT), which name it. */
static void on_setup (redisAsyncContext *ac, void *reply, void *ud) {
  (void)ud;
  if (reply != NULL) replied(ac);
}

static int send_setup (rconn *c, redisAsyncContext *ac) {
  const rstore *s = c->s;
  int ok = REDIS_OK;
  if (s->password != NULL) {
    const char *argv[] = { "AUTH", s->password };
    ok |= redisAsyncCommandArgv(ac, on_setup, NULL, 2, argv, NULL);
    if (ok == REDIS_OK) sent(c);
  }
  if (s->db != 0) {
    char db[16];
    snprintf(db, sizeof db, "%d", s->db);
    const char *argv[] = { "SELECT", db };
    ok |= redisAsyncCommandArgv(ac, on_setup, NULL, 2, argv, NULL);
    if (ok == REDIS_OK) sent(c);
  }
  for (int i = 0; i < S_N; i++) {
    const char *argv[] = { "SCRIPT", "LOAD", scripts[i] };
    ok |= redisAsyncCommandArgv(ac, on_setup, NULL, 3, argv, NULL);
    if (ok == REDIS_OK) sent(c);
  }
  return ok;
}

/* hiredis 0.14's libuv adapter (Debian bookworm's) returns from its poll callback when
** libuv reports an error, and libuv reports a connection reset (EPOLLERR) as one: the
** loss would never reach hiredis and the ops would wait for ever. These hooks replace
** the adapter's four (its attach and cleanup stay): on an error they hand hiredis the
** events it waits for, so it reads, sees the error and answers the ops. (hiredis 1.0's
** adapter does the same.) */
static void poll_cb (uv_poll_t *h, int status, int events) {
  redisLibuvEvents *p = h->data;
  int ev = status != 0 ? p->events : events;
  if (p->context != NULL && (ev & UV_READABLE)) redisAsyncHandleRead(p->context);
  if (p->context != NULL && (ev & UV_WRITABLE)) redisAsyncHandleWrite(p->context);
}

static void poll_set (redisLibuvEvents *p, int add, int ev) {
  p->events = add ? p->events | ev : p->events & ~ev;
  if (p->events) uv_poll_start(&p->handle, p->events, poll_cb);
  else uv_poll_stop(&p->handle);
}

static void ev_add_read (void *p) { poll_set(p, 1, UV_READABLE); }
static void ev_del_read (void *p) { poll_set(p, 0, UV_READABLE); }
static void ev_add_write (void *p) { poll_set(p, 1, UV_WRITABLE); }
static void ev_del_write (void *p) { poll_set(p, 0, UV_WRITABLE); }

/* A connection to talk on: 0, or -1 with c->last_err saying why there is none now. */
static int ensure (rconn *c) {
  if (c->ac != NULL) return 0;
  uint64_t now = now_ms();
  if (now < c->next_try) { c->wait = c->next_try - now; return -1; }
  c->wait = 0;
  redisAsyncContext *ac = c->s->host ? redisAsyncConnect(c->s->host, c->s->port)
                                     : redisAsyncConnectUnix(c->s->path);
  if (ac == NULL) { snprintf(c->last_err, sizeof c->last_err, "out of memory"); return -1; }
  if (ac->err) {
    char why[sizeof c->last_err];
    snprintf(why, sizeof why, "%s", ac->errstr);
    redisAsyncFree(ac);
    c->connected = 0;
    conn_lost(c, why);
    return -1;
  }
  if (redisLibuvAttach(ac, c->loop) != REDIS_OK) {
    ac->ev.cleanup = NULL;        /* the adapter set it before failing */
    redisAsyncFree(ac);
    snprintf(c->last_err, sizeof c->last_err, "could not watch its socket on the loop");
    return -1;
  }
  ac->ev.addRead = ev_add_read;
  ac->ev.delRead = ev_del_read;
  ac->ev.addWrite = ev_add_write;
  ac->ev.delWrite = ev_del_write;
  ac->data = c;
  redisAsyncSetConnectCallback(ac, on_connect);
  redisAsyncSetDisconnectCallback(ac, on_disconnect);
  c->ac = ac;
  c->connected = 0;
  if (send_setup(c, ac) != REDIS_OK) {
    c->ac = NULL;
    ac->data = NULL;
    c->pending = 0;
    uv_timer_stop(&c->watch);
    redisAsyncFree(ac);
    snprintf(c->last_err, sizeof c->last_err, "out of memory");
    return -1;
  }
  return 0;
}

/* ---- replies ----------------------------------------------------------------------- */

static int cmp_i64 (const void *a, const void *b) {
  const int64_t *x = a, *y = b;
  return (x[0] > y[0]) - (x[0] < y[0]);
}

/* HGETALL of a log -> "[e1,e2,...]" in (seq, phase) order. */
static void reply_log (rop *op, const redisReply *r) {
  size_t n = r->elements / 2;
  if (n == 0) { answer(op->cb, op->ud, TP_STORE_NOTFOUND, NULL, 0, 0, NULL); return; }
  int64_t *ord = malloc(n * 2 * sizeof *ord);   /* pairs: seq * 2 + phase, index */
  if (ord == NULL) { answer_err(op->cb, op->ud, "out of memory reading a run's log"); return; }
  size_t total = 2;
  for (size_t i = 0; i < n; i++) {
    const redisReply *f = r->element[2 * i], *v = r->element[2 * i + 1];
    long long seq = 0;
    int phase = 0;
    if (f->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING ||
        sscanf(f->str, "%lld:%d", &seq, &phase) != 2) {
      free(ord);
      answer_err(op->cb, op->ud, "the log in redis at %s has an entry that is not "
                 "\"seq:phase\"", op->s->shown);
      return;
    }
    if (v->len > TP_STORE_MAX_VALUE) {
      free(ord);
      answer(op->cb, op->ud, TP_STORE_TOO_BIG, NULL, 0, 0, "a log entry over the store's "
             "limit of 1 MiB");
      return;
    }
    ord[2 * i] = (int64_t)seq * 2 + (phase ? 1 : 0);
    ord[2 * i + 1] = (int64_t)i;
    total += v->len + 1;
  }
  qsort(ord, n, 2 * sizeof *ord, cmp_i64);
  char *buf = malloc(total);
  if (buf == NULL) {
    free(ord);
    answer_err(op->cb, op->ud, "out of memory reading a run's log");
    return;
  }
  size_t len = 0;
  buf[len++] = '[';
  for (size_t i = 0; i < n; i++) {
    const redisReply *v = r->element[2 * ord[2 * i + 1] + 1];
    if (i) buf[len++] = ',';
    memcpy(buf + len, v->str, v->len);
    len += v->len;
  }
  buf[len++] = ']';
  free(ord);
  answer(op->cb, op->ud, TP_STORE_OK, buf, len, 0, NULL);
  free(buf);
}

/* ZRANGEBYLEX from the cursor -> a JSON array of the keys that start with the prefix
** (escaped as every backend does: tp__store_json_str); num: how many. */
static void reply_list (rop *op, const redisReply *r) {
  char *buf = NULL;
  size_t len = 0, cap = 0, count = 0;
  int bad = tp__store_append(&buf, &len, &cap, "[", 1);
  for (size_t i = 0; !bad && i < r->elements; i++) {
    const redisReply *k = r->element[i];
    if (k->type != REDIS_REPLY_STRING) continue;
    if (k->len < op->pl || memcmp(k->str, op->prefix, op->pl) != 0) break;
    if ((count++ && tp__store_append(&buf, &len, &cap, ",", 1) != 0) ||
        tp__store_json_str(&buf, &len, &cap, k->str, k->len) != 0) bad = 1;
  }
  if (bad || tp__store_append(&buf, &len, &cap, "]", 1) != 0) {
    free(buf);
    answer_err(op->cb, op->ud, "out of memory listing kv keys");
    return;
  }
  answer(op->cb, op->ud, TP_STORE_OK, buf, len, (int64_t)count, NULL);
  free(buf);
}

/* A two-element array {flag, value} of the scripts. */
static int pair (const redisReply *r, long long *flag, const redisReply **second) {
  if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
      r->element[0]->type != REDIS_REPLY_INTEGER) return 0;
  *flag = r->element[0]->integer;
  *second = r->element[1];
  return 1;
}

static void on_reply (redisAsyncContext *ac, void *reply, void *ud) {
  rop *op = ud;
  const redisReply *r = reply;
  if (r == NULL) {
    if (ac->data == &silent_mark)
      answer_err(op->cb, op->ud, "redis at %s did not answer within %lld ms: the connection "
                 "was dropped (the next operation reconnects)", op->s->shown,
                 (long long)op->s->timeout_ms);
    else if (ac->c.flags & REDIS_FREEING)
      answer(op->cb, op->ud, TP_STORE_CLOSED, NULL, 0, 0, "the store connection was closed");
    else {
      rconn *c = ac->data;
      const char *why = ac->errstr[0] ? ac->errstr : "closed by the server";
      if (c != NULL) conn_lost(c, why);
      answer_err(op->cb, op->ud, "lost the connection to redis at %s: %s (the next "
                 "operation reconnects)", op->s->shown, why);
    }
    op_free(op);
    return;
  }
  replied(ac);
  if (r->type == REDIS_REPLY_ERROR) {
    rconn *c = conn_of(ac);
    if (c != NULL && strncmp(r->str, "NOSCRIPT", 8) == 0) send_setup(c, ac);
    answer_err(op->cb, op->ud, "redis at %s answered: %.400s", op->s->shown, r->str);
    op_free(op);
    return;
  }
  long long flag = 0;
  const redisReply *v = NULL;
  switch (op->kind) {
    case K_KV_GET: case K_RUN_GET:
      if (r->type == REDIS_REPLY_NIL) answer(op->cb, op->ud, TP_STORE_NOTFOUND, NULL, 0, 0, NULL);
      else if (r->type != REDIS_REPLY_STRING) goto odd;
      else if (r->len > TP_STORE_MAX_VALUE)
        answer(op->cb, op->ud, TP_STORE_TOO_BIG, NULL, 0, 0, "the value in redis is over "
               "the store's limit of 1 MiB");
      else answer(op->cb, op->ud, TP_STORE_OK, r->str, r->len, 0, NULL);
      break;
    case K_KV_SET:
      if (!pair(r, &flag, &v) || v->type != REDIS_REPLY_INTEGER) goto odd;
      if (flag) answer(op->cb, op->ud, TP_STORE_OK, NULL, 0, v->integer, NULL);
      else {
        char msg[200];
        snprintf(msg, sizeof msg, "the kv would hold %lld bytes of keys and values, over its "
                 "cap of %zu: delete keys first", v->integer, op->s->kv_cap);
        answer(op->cb, op->ud, TP_STORE_TOO_BIG, NULL, 0, v->integer, msg);
      }
      break;
    case K_KV_DEL:
      if (!pair(r, &flag, &v) || v->type != REDIS_REPLY_INTEGER) goto odd;
      answer(op->cb, op->ud, flag ? TP_STORE_OK : TP_STORE_NOTFOUND, NULL, 0, v->integer, NULL);
      break;
    case K_KV_LIST:
      if (r->type != REDIS_REPLY_ARRAY) goto odd;
      reply_list(op, r);
      break;
    case K_BUCKET:
      if (r->type != REDIS_REPLY_INTEGER) goto odd;
      answer(op->cb, op->ud, TP_STORE_OK, NULL, 0, r->integer, NULL);
      break;
    case K_RUN_PUT: case K_LOG_PUT:
      answer(op->cb, op->ud, TP_STORE_OK, NULL, 0, 0, NULL);
      break;
    case K_RUN_DEL:
      if (r->type != REDIS_REPLY_INTEGER) goto odd;
      answer(op->cb, op->ud, r->integer > 0 ? TP_STORE_OK : TP_STORE_NOTFOUND, NULL, 0, 0, NULL);
      break;
    case K_LOG_READ:
      if (r->type != REDIS_REPLY_ARRAY) goto odd;
      reply_log(op, r);
      break;
    case K_CLAIM:
      if (r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
          r->element[0]->type != REDIS_REPLY_INTEGER || r->element[1]->type != REDIS_REPLY_STRING ||
          r->element[2]->type != REDIS_REPLY_INTEGER) goto odd;
      v = r->element[1];
      answer(op->cb, op->ud, r->element[0]->integer ? TP_STORE_OK : TP_STORE_CONFLICT, v->str,
             v->len, r->element[2]->integer, NULL);
      break;
    case K_RELEASE:
      if (r->type != REDIS_REPLY_INTEGER) goto odd;
      answer(op->cb, op->ud, r->integer > 0 ? TP_STORE_OK : TP_STORE_NOTFOUND, NULL, 0, 0, NULL);
      break;
    default:
    odd:
      answer_err(op->cb, op->ud, "redis at %s gave a reply of an unexpected type (%d)",
                 op->s->shown, r->type);
  }
  op_free(op);
}

/* ---- sending ------------------------------------------------------------------------- */

/* Sends argv for op on c; answers at once when it cannot. Takes op. */
static void send_op (rconn *c, rop *op, int argc, const char **argv, const size_t *lens) {
  if (ensure(c) != 0) {
    if (c->wait)
      answer_err(op->cb, op->ud, "redis at %s is unreachable: %s (the next try is in %llu "
                 "ms)", c->s->shown, c->last_err, (unsigned long long)c->wait);
    else
      answer_err(op->cb, op->ud, "redis at %s is unreachable: %s", c->s->shown, c->last_err);
    op_free(op);
    return;
  }
  if (redisAsyncCommandArgv(c->ac, on_reply, op, argc, argv, lens) != REDIS_OK) {
    answer_err(op->cb, op->ud, "redis at %s: the command could not be queued (out of "
               "memory, or the connection is closing)", c->s->shown);
    op_free(op);
    return;
  }
  sent(c);
}

static rop *new_op (rconn *c, int kind, tp_store_cb cb, void *ud) {
  rop *op = calloc(1, sizeof *op);
  if (op == NULL) { answer_err(cb, ud, "out of memory"); return NULL; }
  op->s = c->s;
  op->kind = kind;
  op->cb = cb;
  op->ud = ud;
  return op;
}

/* P<space><name>: a key of the store. NULL when out of memory (then *len is 0). */
static char *key_of (const rstore *s, const char *space, const char *name, size_t nl,
                     size_t *len) {
  size_t sl = strlen(space);
  char *k = malloc(s->plen + sl + nl + 1);
  *len = 0;
  if (k == NULL) return NULL;
  memcpy(k, s->prefix, s->plen);
  memcpy(k + s->plen, space, sl);
  if (nl) memcpy(k + s->plen + sl, name, nl);
  *len = s->plen + sl + nl;
  k[*len] = '\0';
  return k;
}

/* EVALSHA of script i with nk keys (k, kl) and na args (a, al). */
static void eval (rconn *c, rop *op, int i, int nk, char **k, size_t *kl, int na,
                  const char **a, const size_t *al) {
  const char *argv[12];
  size_t lens[12];
  char nkeys[8];
  snprintf(nkeys, sizeof nkeys, "%d", nk);
  int n = 0;
  argv[n] = "EVALSHA"; lens[n++] = 7;
  argv[n] = c->s->sha[i]; lens[n++] = 40;
  argv[n] = nkeys; lens[n++] = strlen(nkeys);
  for (int j = 0; j < nk; j++) { argv[n] = k[j]; lens[n++] = kl[j]; }
  for (int j = 0; j < na; j++) { argv[n] = a[j]; lens[n++] = al[j]; }
  send_op(c, op, n, argv, lens);
}

static int keys_ok (char **k, int n, rop *op) {
  for (int i = 0; i < n; i++)
    if (k[i] == NULL) {
      answer_err(op->cb, op->ud, "out of memory");
      op_free(op);
      return 0;
    }
  return 1;
}

static void free_keys (char **k, int n) {
  for (int i = 0; i < n; i++) free(k[i]);
}

static void r_kv_get (tp_store_conn *base, const char *key, size_t kl, tp_store_cb cb,
                      void *ud) {
  rconn *c = (rconn *)base;
  rop *op = new_op(c, K_KV_GET, cb, ud);
  if (op == NULL) return;
  size_t len;
  char *k = key_of(c->s, "kv:", key, kl, &len);
  if (keys_ok(&k, 1, op)) {
    const char *argv[] = { "GET", k };
    size_t lens[] = { 3, len };
    send_op(c, op, 2, argv, lens);
  }
  free(k);
}

static void r_kv_set (tp_store_conn *base, const char *key, size_t kl, const char *v,
                      size_t vl, tp_store_cb cb, void *ud) {
  rconn *c = (rconn *)base;
  if (vl > TP_STORE_MAX_VALUE) {
    answer(cb, ud, TP_STORE_TOO_BIG, NULL, 0, 0, "the value is over the store's limit of "
           "1 MiB");
    return;
  }
  rop *op = new_op(c, K_KV_SET, cb, ud);
  if (op == NULL) return;
  char *k[3];
  size_t l[3];
  k[0] = key_of(c->s, "kv:", key, kl, &l[0]);
  k[1] = key_of(c->s, "kvidx", NULL, 0, &l[1]);
  k[2] = key_of(c->s, "kvbytes", NULL, 0, &l[2]);
  if (keys_ok(k, 3, op)) {
    char cap[24];
    snprintf(cap, sizeof cap, "%zu", c->s->kv_cap);
    const char *a[] = { key, v ? v : "", cap };
    size_t al[] = { kl, vl, strlen(cap) };
    eval(c, op, S_KV_SET, 3, k, l, 3, a, al);
  }
  free_keys(k, 3);
}

static void r_kv_del (tp_store_conn *base, const char *key, size_t kl, tp_store_cb cb,
                      void *ud) {
  rconn *c = (rconn *)base;
  rop *op = new_op(c, K_KV_DEL, cb, ud);
  if (op == NULL) return;
  char *k[3];
  size_t l[3];
  k[0] = key_of(c->s, "kv:", key, kl, &l[0]);
  k[1] = key_of(c->s, "kvidx", NULL, 0, &l[1]);
  k[2] = key_of(c->s, "kvbytes", NULL, 0, &l[2]);
  if (keys_ok(k, 3, op)) {
    const char *a[] = { key };
    size_t al[] = { kl };
    eval(c, op, S_KV_DEL, 3, k, l, 1, a, al);
  }
  free_keys(k, 3);
}

static int bytes_cmp (const char *a, size_t al, const char *b, size_t bl) {
  int d = memcmp(a, b, al < bl ? al : bl);
  return d ? d : (al > bl) - (al < bl);
}

/* ZRANGEBYLEX index (after-or-[prefix (prefix-successor LIMIT 0 limit */
static void r_kv_list (tp_store_conn *base, const char *prefix, size_t pl, const char *after,
                       size_t al, size_t limit, tp_store_cb cb, void *ud) {
  rconn *c = (rconn *)base;
  rop *op = new_op(c, K_KV_LIST, cb, ud);
  if (op == NULL) return;
  if (limit == 0) {
    answer(cb, ud, TP_STORE_OK, "[]", 2, 0, NULL);   /* none asked for */
    op_free(op);
    return;
  }
  size_t il;
  char *idx = key_of(c->s, "kvidx", NULL, 0, &il);
  char *lo = NULL, *hi = NULL;
  op->prefix = malloc(pl + 1);
  int from_after = after != NULL && bytes_cmp(after, al, prefix, pl) >= 0;
  size_t lol = 1 + (from_after ? al : pl), hil = 1 + pl;
  lo = malloc(lol);
  hi = malloc(hil);
  if (idx == NULL || lo == NULL || hi == NULL || op->prefix == NULL) {
    answer_err(cb, ud, "out of memory");
    op_free(op);
  }
  else {
    if (pl) memcpy(op->prefix, prefix, pl);
    op->pl = pl;
    lo[0] = from_after ? '(' : '[';
    if (lol > 1) memcpy(lo + 1, from_after ? after : prefix, lol - 1);
    /* the first string past every key with the prefix: the prefix with its last byte
    ** below 0xff raised by one and what follows it cut; none ("+") for "" or all 0xff */
    size_t n = pl;
    while (n > 0 && (unsigned char)prefix[n - 1] == 0xff) n--;
    if (n == 0) { hi[0] = '+'; hil = 1; }
    else {
      hi[0] = '(';
      memcpy(hi + 1, prefix, n);
      hi[n] = (char)((unsigned char)hi[n] + 1);
      hil = n + 1;
    }
    char lim[24];
    snprintf(lim, sizeof lim, "%zu", limit);
    const char *argv[] = { "ZRANGEBYLEX", idx, lo, hi, "LIMIT", "0", lim };
    size_t lens[] = { 11, il, lol, hil, 5, 1, strlen(lim) };
    send_op(c, op, 7, argv, lens);
  }
  free(idx);
  free(lo);
  free(hi);
}

static void r_bucket_take (tp_store_conn *base, const char *key, size_t kl, double capacity,
                           double per_second, int64_t now, tp_store_cb cb, void *ud) {
  rconn *c = (rconn *)base;
  if (!(capacity >= 1 && capacity <= 1e15) || !(per_second > 0 && per_second <= 1e15)) {
    answer_err(cb, ud, "bucket_take: capacity must be from 1 and per_second above 0 "
               "(got %g and %g)", capacity, per_second);
    return;
  }
  rop *op = new_op(c, K_BUCKET, cb, ud);
  if (op == NULL) return;
  size_t l;
  char *k = key_of(c->s, "bucket:", key, kl, &l);
  if (keys_ok(&k, 1, op)) {
    char a0[32], a1[32], a2[24];
    snprintf(a0, sizeof a0, "%.17g", capacity);
    snprintf(a1, sizeof a1, "%.17g", per_second);
    snprintf(a2, sizeof a2, "%lld", (long long)now);
    const char *a[] = { a0, a1, a2 };
    size_t al[] = { strlen(a0), strlen(a1), strlen(a2) };
    eval(c, op, S_BUCKET, 1, &k, &l, 3, a, al);
  }
  free(k);
}

static void r_run_put (tp_store_conn *base, const char *run, const char *rec, size_t rl,
                       int64_t ttl_ms, tp_store_cb cb, void *ud) {
  rconn *c = (rconn *)base;
  if (rl > TP_STORE_MAX_VALUE) {
    answer(cb, ud, TP_STORE_TOO_BIG, NULL, 0, 0, "the run's record is over the store's "
           "limit of 1 MiB");
    return;
  }
  rop *op = new_op(c, K_RUN_PUT, cb, ud);
  if (op == NULL) return;
  char *k[2];
  size_t l[2];
  k[0] = key_of(c->s, "run:", run, strlen(run), &l[0]);
  k[1] = key_of(c->s, "log:", run, strlen(run), &l[1]);
  if (keys_ok(k, 2, op)) {
    char ttl[24];
    snprintf(ttl, sizeof ttl, "%lld", (long long)(ttl_ms <= 0 ? 0 : ttl_ms < TTL_MAX ? ttl_ms
                                                  : TTL_MAX));
    const char *a[] = { rec ? rec : "", ttl };
    size_t al[] = { rl, strlen(ttl) };
    eval(c, op, S_RUN_PUT, 2, k, l, 2, a, al);
  }
  free_keys(k, 2);
}

static void r_run_get (tp_store_conn *base, const char *run, tp_store_cb cb, void *ud) {
  rconn *c = (rconn *)base;
  rop *op = new_op(c, K_RUN_GET, cb, ud);
  if (op == NULL) return;
  size_t len;
  char *k = key_of(c->s, "run:", run, strlen(run), &len);
  if (keys_ok(&k, 1, op)) {
    const char *argv[] = { "GET", k };
    size_t lens[] = { 3, len };
    send_op(c, op, 2, argv, lens);
  }
  free(k);
}

static void r_run_del (tp_store_conn *base, const char *run, tp_store_cb cb, void *ud) {
  rconn *c = (rconn *)base;
  rop *op = new_op(c, K_RUN_DEL, cb, ud);
  if (op == NULL) return;
  char *k[2];
  size_t l[2];
  k[0] = key_of(c->s, "run:", run, strlen(run), &l[0]);
  k[1] = key_of(c->s, "log:", run, strlen(run), &l[1]);
  if (keys_ok(k, 2, op)) {
    const char *argv[] = { "DEL", k[0], k[1] };
    size_t lens[] = { 3, l[0], l[1] };
    send_op(c, op, 3, argv, lens);
  }
  free_keys(k, 2);
}

static void r_log_put (tp_store_conn *base, const char *run, int64_t seq, int phase,
                       const char *entry, size_t el, tp_store_cb cb, void *ud) {
  rconn *c = (rconn *)base;
  if (el > TP_STORE_MAX_VALUE) {
    answer(cb, ud, TP_STORE_TOO_BIG, NULL, 0, 0, "the log entry is over the store's limit "
           "of 1 MiB");
    return;
  }
  if (seq < 0 || (phase != 0 && phase != 1)) {
    answer_err(cb, ud, "log_put: seq must be from 0 and phase 0 or 1 (got %lld and %d)",
               (long long)seq, phase);
    return;
  }
  rop *op = new_op(c, K_LOG_PUT, cb, ud);
  if (op == NULL) return;
  char *k[2];
  size_t l[2];
  k[0] = key_of(c->s, "log:", run, strlen(run), &l[0]);
  k[1] = key_of(c->s, "run:", run, strlen(run), &l[1]);
  if (keys_ok(k, 2, op)) {
    char f[32];
    snprintf(f, sizeof f, "%lld:%d", (long long)seq, phase);
    const char *a[] = { f, entry ? entry : "" };
    size_t al[] = { strlen(f), el };
    eval(c, op, S_LOG_PUT, 2, k, l, 2, a, al);
  }
  free_keys(k, 2);
}

static void r_log_read (tp_store_conn *base, const char *run, tp_store_cb cb, void *ud) {
  rconn *c = (rconn *)base;
  rop *op = new_op(c, K_LOG_READ, cb, ud);
  if (op == NULL) return;
  size_t len;
  char *k = key_of(c->s, "log:", run, strlen(run), &len);
  if (keys_ok(&k, 1, op)) {
    const char *argv[] = { "HGETALL", k };
    size_t lens[] = { 7, len };
    send_op(c, op, 2, argv, lens);
  }
  free(k);
}

static void r_session_claim (tp_store_conn *base, const char *session, const char *owner,
                             int64_t ttl_ms, int mode, tp_store_cb cb, void *ud) {
  rconn *c = (rconn *)base;
  rop *op = new_op(c, K_CLAIM, cb, ud);
  if (op == NULL) return;
  size_t l, ll;
  char *k = key_of(c->s, "session:", session, strlen(session), &l);
  char *lp = key_of(c->s, "session:", TP_STORE_LEASE_PREFIX, strlen(TP_STORE_LEASE_PREFIX), &ll);
  if (lp == NULL) { free(k); k = NULL; }
  if (keys_ok(&k, 1, op)) {
    char ttl[24], m[4];
    snprintf(ttl, sizeof ttl, "%lld", (long long)(ttl_ms <= 0 ? 0 : ttl_ms < TTL_MAX ? ttl_ms
                                                  : TTL_MAX));
    snprintf(m, sizeof m, "%d", mode);
    const char *a[] = { owner, ttl, m, lp };
    size_t al[] = { strlen(owner), strlen(ttl), strlen(m), ll };
    eval(c, op, S_CLAIM, 1, &k, &l, 4, a, al);
  }
  free(k);
  free(lp);
}

static void r_session_release (tp_store_conn *base, const char *session, const char *owner,
                               tp_store_cb cb, void *ud) {
  rconn *c = (rconn *)base;
  rop *op = new_op(c, K_RELEASE, cb, ud);
  if (op == NULL) return;
  size_t l;
  char *k = key_of(c->s, "session:", session, strlen(session), &l);
  if (keys_ok(&k, 1, op)) {
    const char *a[] = { owner };
    size_t al[] = { strlen(owner) };
    eval(c, op, S_RELEASE, 1, &k, &l, 1, a, al);
  }
  free(k);
}

/* ---- connections ----------------------------------------------------------------------- */

static tp_store_conn *r_connect (tp_store *st, void *loop, char *err, size_t errlen) {
  rstore *s = (rstore *)st;
  rconn *c = calloc(1, sizeof *c);
  if (c == NULL) {
    snprintf(err, errlen, "out of memory connecting to redis at %s", s->shown);
    return NULL;
  }
  c->base.ops = &redis_ops;
  c->base.store = st;
  c->s = s;
  c->loop = loop;
  c->backoff = BACKOFF_MIN;
  if (uv_timer_init(loop, &c->watch) != 0) {
    snprintf(err, errlen, "could not make a timer on the loop for redis at %s", s->shown);
    free(c);
    return NULL;
  }
  c->watch.data = c;
  uv_unref((uv_handle_t *)&c->watch);   /* the ops keep the loop alive, not the watch */
  /* connecting waits for the first op: a connection no engine uses costs nothing */
  return &c->base;
}

static void watch_closed (uv_handle_t *h) { free(h->data); }

/* Frees the context (answering its ops TP_STORE_CLOSED, now or, from inside one of its
** callbacks, when that returns); the loop closes the socket's handle and the watch, which
** frees c, later. */
static void r_close (tp_store_conn *base) {
  rconn *c = (rconn *)base;
  if (c == NULL) return;
  redisAsyncContext *ac = c->ac;
  if (ac != NULL) {
    ac->data = NULL;
    c->ac = NULL;
    redisAsyncFree(ac);
  }
  uv_close((uv_handle_t *)&c->watch, watch_closed);
}

static void store_free (rstore *s) {
  if (s == NULL) return;
  free(s->host);
  free(s->path);
  free(s->password);
  free(s->prefix);
  free(s->shown);
  free(s);
}

static void r_destroy (tp_store *st) { store_free((rstore *)st); }

static const tp_store_ops redis_ops = {
  "redis", r_connect, r_close, r_destroy,
  r_kv_get, r_kv_set, r_kv_del, r_kv_list,
  r_bucket_take,
  r_run_put, r_run_get, r_run_del, r_log_put, r_log_read,
  r_session_claim, r_session_release,
};

/* ---- opening ------------------------------------------------------------------------- */

static char *dupn (const char *s, size_t n) {
  char *d = malloc(n + 1);
  if (d) { memcpy(d, s, n); d[n] = '\0'; }
  return d;
}

/* %XX in a URL part; -1 on a bad escape */
static int unescape (char *s) {
  char *o = s;
  for (const char *p = s; *p; p++) {
    if (*p != '%') { *o++ = *p; continue; }
    char hx[3] = { p[1], p[1] ? p[2] : '\0', '\0' };
    char *end;
    long v = strtol(hx, &end, 16);
    if (end != hx + 2 || v == 0) return -1;
    *o++ = (char)v;
    p += 2;
  }
  *o = '\0';
  return 0;
}

static int parse_int (const char *s, size_t n, long lo, long hi, long *out) {
  char buf[24];
  if (n == 0 || n >= sizeof buf) return -1;
  memcpy(buf, s, n);
  buf[n] = '\0';
  char *end;
  errno = 0;
  long v = strtol(buf, &end, 10);
  if (errno || *end || v < lo || v > hi) return -1;
  *out = v;
  return 0;
}

/* redis://[[user]:password@]host[:port][/db][?prefix=P&kv_max_bytes=N]
** redis:///path/to/socket[?db=N&prefix=P&kv_max_bytes=N] (also redis+unix://, which may
** take :password@ before the path)
** -> s's fields; 0, or -1 with err saying what is wrong. */
static int parse_url (rstore *s, const char *url, char *err, size_t errlen) {
  const char *p;
  int unix_sock = 0;
  if (strncmp(url, "redis:///", 9) == 0) { p = url + 8; unix_sock = 1; }
  else if (strncmp(url, "redis://", 8) == 0) p = url + 8;
  else if (strncmp(url, "redis+unix://", 13) == 0) { p = url + 13; unix_sock = 1; }
  else if (strncmp(url, "rediss://", 9) == 0) {
    snprintf(err, errlen, "%.200s: TLS to redis (rediss://) is not in this build (hiredis "
             "0.14): use redis:// on a private network, or a TLS tunnel to it", url);
    return -1;
  }
  else {
    snprintf(err, errlen, "\"%.200s\" is not a redis URL: expected redis://HOST:PORT/DB or "
             "redis+unix:///PATH", url);
    return -1;
  }
  const char *q = strchr(p, '?');
  size_t mainl = q ? (size_t)(q - p) : strlen(p);
  const char *at = memchr(p, '@', mainl);
  if (at != NULL) {
    const char *colon = memchr(p, ':', (size_t)(at - p));
    if (colon == NULL) {
      snprintf(err, errlen, "%.200s: expected :PASSWORD@ (or USER:PASSWORD@) before the "
               "host", url);
      return -1;
    }
    s->password = dupn(colon + 1, (size_t)(at - colon - 1));
    if (s->password == NULL) goto oom;
    if (unescape(s->password) != 0) {
      snprintf(err, errlen, "redis URL: a bad %%-escape in the password");
      return -1;
    }
    mainl -= (size_t)(at + 1 - p);
    p = at + 1;
  }
  long v;
  if (unix_sock) {
    if (mainl == 0 || p[0] != '/') {
      snprintf(err, errlen, "%.200s: expected the socket's absolute path after "
               "redis+unix://", url);
      return -1;
    }
    if ((s->path = dupn(p, mainl)) == NULL) goto oom;
  }
  else {
    const char *slash = memchr(p, '/', mainl);
    size_t hl = slash ? (size_t)(slash - p) : mainl;
    const char *hp = p, *colon = NULL;
    size_t hostl = hl;
    if (hl > 0 && p[0] == '[') {                   /* [::1]:6379 */
      const char *close = memchr(p, ']', hl);
      if (close == NULL) { snprintf(err, errlen, "%.200s: no ']' after '['", url); return -1; }
      hp = p + 1;
      hostl = (size_t)(close - hp);
      if (close + 1 < p + hl) colon = close + 1;
    }
    else {
      colon = memchr(p, ':', hl);
      if (colon) hostl = (size_t)(colon - p);
    }
    if (hostl == 0) {
      snprintf(err, errlen, "%.200s: expected a host after redis://", url);
      return -1;
    }
    if ((s->host = dupn(hp, hostl)) == NULL) goto oom;
    s->port = 6379;
    if (colon != NULL) {
      if (*colon != ':' || parse_int(colon + 1, (size_t)(p + hl - colon - 1), 1, 65535, &v)) {
        snprintf(err, errlen, "%.200s: the port must be a number from 1 to 65535", url);
        return -1;
      }
      s->port = (int)v;
    }
    if (slash != NULL && (size_t)(slash - p) + 1 < mainl) {
      if (parse_int(slash + 1, mainl - (size_t)(slash - p) - 1, 0, 1000000, &v)) {
        snprintf(err, errlen, "%.200s: the database after '/' must be a number (0, 1, ...)",
                 url);
        return -1;
      }
      s->db = (int)v;
    }
  }
  s->kv_cap = TP_STORE_KV_CAP;
  s->timeout_ms = OP_TIMEOUT;
  for (const char *o = q ? q + 1 : NULL; o != NULL && *o; ) {
    const char *amp = strchr(o, '&');
    size_t ol = amp ? (size_t)(amp - o) : strlen(o);
    const char *eq = memchr(o, '=', ol);
    size_t nl = eq ? (size_t)(eq - o) : ol;
    const char *val = eq ? eq + 1 : o + ol;
    size_t vl = eq ? ol - nl - 1 : 0;
    if (nl == 6 && memcmp(o, "prefix", 6) == 0) {
      free(s->prefix);
      if ((s->prefix = dupn(val, vl)) == NULL) goto oom;
      if (unescape(s->prefix) != 0) {
        snprintf(err, errlen, "redis URL: a bad %%-escape in prefix");
        return -1;
      }
    }
    else if (nl == 2 && memcmp(o, "db", 2) == 0 && !parse_int(val, vl, 0, 1000000, &v))
      s->db = (int)v;
    else if (nl == 12 && memcmp(o, "kv_max_bytes", 12) == 0 &&
             !parse_int(val, vl, 1, LONG_MAX, &v))
      s->kv_cap = (size_t)v;
    else if (nl == 10 && memcmp(o, "timeout_ms", 10) == 0 &&
             !parse_int(val, vl, 100, 3600000, &v))
      s->timeout_ms = v;
    else {
      snprintf(err, errlen, "%.200s: unknown or bad option \"%.*s\" (known: prefix=P, db=N, "
               "kv_max_bytes=N, timeout_ms=N from 100)", url, (int)(ol > 60 ? 60 : ol), o);
      return -1;
    }
    o = amp ? amp + 1 : NULL;
  }
  if (s->prefix == NULL && (s->prefix = dupn("tidepool:", 9)) == NULL) goto oom;
  s->plen = strlen(s->prefix);
  /* the URL as messages show it: no password */
  char shown[600];
  if (s->host)
    snprintf(shown, sizeof shown, "redis://%s%s%s%s:%d/%d", s->password ? ":***@" : "",
             strchr(s->host, ':') ? "[" : "", s->host, strchr(s->host, ':') ? "]" : "",
             s->port, s->db);
  else
    snprintf(shown, sizeof shown, "redis+unix://%s%.500s?db=%d", s->password ? ":***@" : "",
             s->path, s->db);
  if ((s->shown = dupn(shown, strlen(shown))) == NULL) goto oom;
  return 0;
oom:
  snprintf(err, errlen, "out of memory opening the redis store");
  return -1;
}

/* One blocking command for the check at open; NULL with err filled. */
static redisReply *sync_cmd (redisContext *rc, const rstore *s, int argc, const char **argv,
                             char *err, size_t errlen) {
  redisReply *r = redisCommandArgv(rc, argc, argv, NULL);
  if (r == NULL) {
    snprintf(err, errlen, "redis at %s did not answer %s: %s", s->shown, argv[0],
             rc->errstr[0] ? rc->errstr : "no reply");
    return NULL;
  }
  if (r->type == REDIS_REPLY_ERROR) {
    snprintf(err, errlen, "redis at %s refused %s: %.300s", s->shown, argv[0], r->str);
    freeReplyObject(r);
    return NULL;
  }
  return r;
}

tp_store *tp__store_redis_open (const char *url, char *err, size_t errlen) {
  if (err && errlen) err[0] = '\0';
  char dummy[1];
  if (err == NULL || errlen == 0) { err = dummy; errlen = sizeof dummy; }
  if (url == NULL) { snprintf(err, errlen, "no redis URL given"); return NULL; }
  rstore *s = calloc(1, sizeof *s);
  if (s == NULL) { snprintf(err, errlen, "out of memory opening the redis store"); return NULL; }
  s->head.ops = &redis_ops;
  s->head.refs = 1;
  if (parse_url(s, url, err, errlen) != 0) { store_free(s); return NULL; }
  struct timeval tv = { OPEN_TIMEOUT, 0 };
  redisContext *rc = s->host ? redisConnectWithTimeout(s->host, s->port, tv)
                             : redisConnectUnixWithTimeout(s->path, tv);
  if (rc == NULL || rc->err) {
    snprintf(err, errlen, "cannot reach redis at %s: %s", s->shown,
             rc ? rc->errstr : "out of memory");
    redisFree(rc);
    store_free(s);
    return NULL;
  }
  redisSetTimeout(rc, tv);
  redisReply *r = NULL;
  int ok = 1;
  if (s->password) {
    const char *argv[] = { "AUTH", s->password };
    ok = (r = sync_cmd(rc, s, 2, argv, err, errlen)) != NULL;
    freeReplyObject(r);
  }
  if (ok) {
    char db[16];
    snprintf(db, sizeof db, "%d", s->db);
    const char *argv[] = { "SELECT", db };
    ok = (r = sync_cmd(rc, s, 2, argv, err, errlen)) != NULL;
    freeReplyObject(r);
  }
  for (int i = 0; ok && i < S_N; i++) {
    const char *argv[] = { "SCRIPT", "LOAD", scripts[i] };
    ok = (r = sync_cmd(rc, s, 3, argv, err, errlen)) != NULL;
    if (ok && (r->type != REDIS_REPLY_STRING || r->len != 40)) {
      snprintf(err, errlen, "redis at %s gave no SHA1 for a script", s->shown);
      ok = 0;
    }
    if (ok) memcpy(s->sha[i], r->str, 41);
    freeReplyObject(r);
  }
  redisFree(rc);
  if (!ok) { store_free(s); return NULL; }
  return (tp_store *)s;
}
