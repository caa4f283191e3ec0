/*
** test_store.c: the state store (engine/host/store.h). One conformance suite runs against
** each backend (memory, SQLite): every operation, TOO_BIG, NOTFOUND, expiry under a fake
** clock, session conflicts, and two connections of one store in two threads that see
** each other's writes and share a bucket's tokens exactly. Then what is the SQLite
** backend's alone (a reopened store keeps its keys, a newer schema is refused), the
** memory backend's deferred answers (the test hook that stands for Redis) and
** tp_store_open's locations.
*/
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <sqlite3.h>
#include <uv.h>

#include "tp_test.h"
#include "tidepool.h"
#include "store_int.h"
#include "policy.h"

/* store_redis.c may be out of this build (store.c calls it through a weak symbol too) */
tp_store *tp__store_redis_open(const char *url, char *err, size_t errlen) __attribute__((weak));

/* ---- answers ---------------------------------------------------------------------- */

typedef struct ans {
  int got, status;
  char val[4096];
  size_t len;
  int64_t num;
  char err[256];
} ans;

static void on_ans (void *ud, const tp_store_reply *r) {
  ans *a = ud;
  a->got++;
  a->status = r->status;
  a->len = r->len;
  a->val[0] = '\0';
  if (r->val) {
    size_t n = r->len < sizeof a->val - 1 ? r->len : sizeof a->val - 1;
    memcpy(a->val, r->val, n);
    a->val[n] = '\0';
  }
  a->num = r->num;
  snprintf(a->err, sizeof a->err, "%s", r->err ? r->err : "");
}

/* Waits for the answer (a deferred one comes on a later loop turn). */
static void settle (uv_loop_t *loop, ans *a) {
  for (int i = 0; i < 100 && a->got == 0; i++) uv_run(loop, UV_RUN_ONCE);
}

#define OP(loop, a, call) do { memset(&(a), 0, sizeof (a)); call; settle(loop, &(a)); \
    CHECK_INT((a).got, 1); } while (0)

static int64_t fake_now = 1700000000000;
static int64_t fake_clock (void) { return fake_now; }

static char tmpdir[256];

static void make_tmp (void) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/tp_store_XXXXXX");
  if (mkdtemp(tmpdir) == NULL) tmpdir[0] = '\0';
}

static void rm_tmp (void) {
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  if (tmpdir[0] && system(cmd) != 0) printf("#   could not remove %s\n", tmpdir);
}

/* ---- the conformance suite ------------------------------------------------------- */

static void kv_ops (tp_store *s, uv_loop_t *loop) {
  char err[256] = "";
  tp_store_conn *c = tp__store_connect(s, loop, err, sizeof err);
  CHECK(c != NULL);
  if (c == NULL) { printf("#   %s\n", err); return; }
  const tp_store_ops *o = c->ops;
  ans a;
  OP(loop, a, o->kv_get(c, "a", 1, on_ans, &a));
  CHECK_INT(a.status, TP_STORE_NOTFOUND);
  OP(loop, a, o->kv_set(c, "a", 1, "1", 1, on_ans, &a));
  CHECK_INT(a.status, TP_STORE_OK);
  CHECK_STR(a.err, "");
  CHECK_INT(a.num, 2);
  OP(loop, a, o->kv_get(c, "a", 1, on_ans, &a));
  CHECK_INT(a.status, TP_STORE_OK);
  CHECK_STR(a.val, "1");
  OP(loop, a, o->kv_set(c, "a", 1, "22", 2, on_ans, &a));
  CHECK_INT(a.num, 3);
  /* bytes, NULs included, in keys and values */
  OP(loop, a, o->kv_set(c, "b\0z", 3, "x\0y", 3, on_ans, &a));
  CHECK_INT(a.status, TP_STORE_OK);
  CHECK_INT(a.num, 9);
  OP(loop, a, o->kv_get(c, "b\0z", 3, on_ans, &a));
  CHECK_INT(a.len, 3);
  CHECK(memcmp(a.val, "x\0y", 3) == 0);
  OP(loop, a, o->kv_get(c, "b", 1, on_ans, &a));
  CHECK_INT(a.status, TP_STORE_NOTFOUND);
  OP(loop, a, o->kv_set(c, "ab", 2, "\"q\"", 3, on_ans, &a));
  OP(loop, a, o->kv_set(c, "ac", 2, "0", 1, on_ans, &a));
  OP(loop, a, o->kv_set(c, "a\"\\", 3, "0", 1, on_ans, &a));
  CHECK_INT(a.num, 21);
  OP(loop, a, o->kv_list(c, "", 0, NULL, 0, 100, on_ans, &a));
  CHECK_INT(a.status, TP_STORE_OK);
  CHECK_STR(a.val, "[\"a\",\"a\\\"\\\\\",\"ab\",\"ac\",\"b\\u0000z\"]");
  CHECK_INT(a.num, 5);
  OP(loop, a, o->kv_list(c, "a", 1, NULL, 0, 2, on_ans, &a));
  CHECK_STR(a.val, "[\"a\",\"a\\\"\\\\\"]");
  OP(loop, a, o->kv_list(c, "a", 1, "ab", 2, 10, on_ans, &a));
  CHECK_STR(a.val, "[\"ac\"]");
  OP(loop, a, o->kv_list(c, "zz", 2, NULL, 0, 10, on_ans, &a));
  CHECK_INT(a.status, TP_STORE_OK);
  CHECK_STR(a.val, "[]");
  OP(loop, a, o->kv_list(c, "\xff", 1, NULL, 0, 10, on_ans, &a));
  CHECK_STR(a.val, "[]");
  OP(loop, a, o->kv_del(c, "ab", 2, on_ans, &a));
  CHECK_INT(a.status, TP_STORE_OK);
  CHECK_INT(a.num, 16);
  OP(loop, a, o->kv_del(c, "ab", 2, on_ans, &a));
  CHECK_INT(a.status, TP_STORE_NOTFOUND);
  CHECK_INT(a.num, 16);
  /* one value: at most TP_STORE_MAX_VALUE */
  char *big = malloc(TP_STORE_MAX_VALUE + 1);
  memset(big, 'v', TP_STORE_MAX_VALUE + 1);
  OP(loop, a, o->kv_set(c, "big", 3, big, TP_STORE_MAX_VALUE + 1, on_ans, &a));
  CHECK_INT(a.status, TP_STORE_TOO_BIG);
  OP(loop, a, o->kv_get(c, "big", 3, on_ans, &a));
  CHECK_INT(a.status, TP_STORE_NOTFOUND);
  /* the kv: at most TP_STORE_KV_CAP bytes; num says what it would have held */
  int i, last = TP_STORE_OK;
  char key[16];
  for (i = 0; i < 20 && last == TP_STORE_OK; i++) {
    snprintf(key, sizeof key, "fill%02d", i);
    OP(loop, a, o->kv_set(c, key, 6, big, TP_STORE_MAX_VALUE, on_ans, &a));
    last = a.status;
  }
  CHECK_INT(i, 16);  /* 16 + 15 * (6 + 1 MiB) fit in 16 MiB; the 16th does not */
  CHECK_INT(last, TP_STORE_TOO_BIG);
  CHECK_INT(a.num, 16 + 16 * (6 + (int64_t)TP_STORE_MAX_VALUE));
  for (int j = 0; j < 15; j++) {
    snprintf(key, sizeof key, "fill%02d", j);
    OP(loop, a, o->kv_del(c, key, 6, on_ans, &a));
    CHECK_INT(a.status, TP_STORE_OK);
  }
  CHECK_INT(a.num, 16);
  free(big);
  tp__store_close(c);
}

static void bucket_ops (tp_store *s, uv_loop_t *loop) {
  tp_store_conn *c = tp__store_connect(s, loop, NULL, 0);
  CHECK(c != NULL);
  if (c == NULL) return;
  const tp_store_ops *o = c->ops;
  ans a;
  int64_t t = 1000000;
  OP(loop, a, o->bucket_take(c, "r:1", 3, 2, 1, t, on_ans, &a));
  CHECK_INT(a.status, TP_STORE_OK);
  CHECK_INT(a.num, 0);
  OP(loop, a, o->bucket_take(c, "r:1", 3, 2, 1, t, on_ans, &a));
  CHECK_INT(a.num, 0);
  OP(loop, a, o->bucket_take(c, "r:1", 3, 2, 1, t, on_ans, &a));
  CHECK_INT(a.num, 1000);  /* empty: one token a second */
  OP(loop, a, o->bucket_take(c, "r:2", 3, 2, 1, t, on_ans, &a));
  CHECK_INT(a.num, 0);     /* another key, another bucket */
  OP(loop, a, o->bucket_take(c, "r:1", 3, 2, 1, t + 400, on_ans, &a));
  CHECK_INT(a.num, 600);
  OP(loop, a, o->bucket_take(c, "r:1", 3, 2, 1, t + 1000, on_ans, &a));
  CHECK_INT(a.num, 0);
  OP(loop, a, o->bucket_take(c, "r:1", 3, 2, 1, t + 1000, on_ans, &a));
  CHECK_INT(a.num, 1000);
  OP(loop, a, o->bucket_take(c, "r:1", 3, 2, 1, t + 60000, on_ans, &a));
  CHECK_INT(a.num, 0);     /* refilled to capacity, not past it */
  OP(loop, a, o->bucket_take(c, "r:1", 3, 2, 1, t + 60000, on_ans, &a));
  CHECK_INT(a.num, 0);
  OP(loop, a, o->bucket_take(c, "r:1", 3, 2, 1, t + 60000, on_ans, &a));
  CHECK_INT(a.num, 1000);
  tp__store_close(c);
}

static void run_ops (tp_store *s, uv_loop_t *loop) {
  tp_store_conn *c = tp__store_connect(s, loop, NULL, 0);
  CHECK(c != NULL);
  if (c == NULL) return;
  const tp_store_ops *o = c->ops;
  ans a;
  tp__store_set_clock(fake_clock);
  int64_t t0 = fake_now;
  OP(loop, a, o->run_get(c, "r1", on_ans, &a));
  CHECK_INT(a.status, TP_STORE_NOTFOUND);
  OP(loop, a, o->run_put(c, "r1", "{\"v\":1}", 7, 1000, on_ans, &a));
  CHECK_INT(a.status, TP_STORE_OK);
  OP(loop, a, o->run_put(c, "r2", "{}", 2, 0, on_ans, &a));
  OP(loop, a, o->run_get(c, "r1", on_ans, &a));
  CHECK_INT(a.status, TP_STORE_OK);
  CHECK_STR(a.val, "{\"v\":1}");
  OP(loop, a, o->run_put(c, "r1", "{\"v\":2}", 7, 1000, on_ans, &a));  /* replaces */
  OP(loop, a, o->log_put(c, "r1", 2, 0, "{\"s\":20}", 8, on_ans, &a));
  OP(loop, a, o->log_put(c, "r1", 1, 1, "{\"s\":11}", 8, on_ans, &a));
  OP(loop, a, o->log_put(c, "r1", 1, 0, "{\"s\":10}", 8, on_ans, &a));
  OP(loop, a, o->log_put(c, "r1", 1, 0, "{\"s\":10.5}", 10, on_ans, &a));  /* (seq, phase) */
  OP(loop, a, o->log_put(c, "r10", 1, 0, "{\"other\":1}", 11, on_ans, &a));
  CHECK_INT(a.status, TP_STORE_OK);
  OP(loop, a, o->log_read(c, "r1", on_ans, &a));
  CHECK_INT(a.status, TP_STORE_OK);
  CHECK_STR(a.val, "[{\"s\":10.5},{\"s\":11},{\"s\":20}]");
  OP(loop, a, o->log_read(c, "r3", on_ans, &a));
  CHECK_INT(a.status, TP_STORE_NOTFOUND);
  char *big = malloc(TP_STORE_MAX_VALUE + 1);
  memset(big, '1', TP_STORE_MAX_VALUE + 1);
  OP(loop, a, o->log_put(c, "r1", 3, 0, big, TP_STORE_MAX_VALUE + 1, on_ans, &a));
  CHECK_INT(a.status, TP_STORE_TOO_BIG);
  OP(loop, a, o->run_put(c, "r4", big, TP_STORE_MAX_VALUE + 1, 0, on_ans, &a));
  CHECK_INT(a.status, TP_STORE_TOO_BIG);
  free(big);
  fake_now = t0 + 999;
  OP(loop, a, o->run_get(c, "r1", on_ans, &a));
  CHECK_INT(a.status, TP_STORE_OK);
  CHECK_STR(a.val, "{\"v\":2}");
  fake_now = t0 + 1000;
  OP(loop, a, o->run_get(c, "r1", on_ans, &a));
  CHECK_INT(a.status, TP_STORE_NOTFOUND);  /* expired */
  fake_now = t0 + 100000000;
  OP(loop, a, o->run_get(c, "r2", on_ans, &a));
  CHECK_INT(a.status, TP_STORE_OK);        /* ttl 0: never */
  OP(loop, a, o->run_del(c, "r2", on_ans, &a));
  CHECK_INT(a.status, TP_STORE_OK);
  OP(loop, a, o->run_get(c, "r2", on_ans, &a));
  CHECK_INT(a.status, TP_STORE_NOTFOUND);
  OP(loop, a, o->run_del(c, "r10", on_ans, &a));  /* its log alone */
  CHECK_INT(a.status, TP_STORE_OK);
  OP(loop, a, o->log_read(c, "r10", on_ans, &a));
  CHECK_INT(a.status, TP_STORE_NOTFOUND);
  OP(loop, a, o->run_del(c, "r10", on_ans, &a));
  CHECK_INT(a.status, TP_STORE_NOTFOUND);
  fake_now = t0;
  tp__store_set_clock(NULL);
  tp__store_close(c);
}

static void session_ops (tp_store *s, uv_loop_t *loop) {
  tp_store_conn *c = tp__store_connect(s, loop, NULL, 0);
  CHECK(c != NULL);
  if (c == NULL) return;
  const tp_store_ops *o = c->ops;
  ans a;
  tp__store_set_clock(fake_clock);
  int64_t t0 = fake_now;
  OP(loop, a, o->session_claim(c, "s1", "proc-a", 1000, 0, on_ans, &a));
  CHECK_INT(a.status, TP_STORE_OK);
  CHECK_STR(a.val, "proc-a");
  OP(loop, a, o->session_claim(c, "s1", "proc-b", 1000, 0, on_ans, &a));
  CHECK_INT(a.status, TP_STORE_CONFLICT);
  CHECK_STR(a.val, "proc-a");
  fake_now = t0 + 900;
  OP(loop, a, o->session_claim(c, "s1", "proc-a", 1000, 0, on_ans, &a));  /* extends */
  CHECK_INT(a.status, TP_STORE_OK);
  fake_now = t0 + 1500;
  OP(loop, a, o->session_claim(c, "s1", "proc-b", 1000, 0, on_ans, &a));
  CHECK_INT(a.status, TP_STORE_CONFLICT);  /* held until t0 + 1900 */
  OP(loop, a, o->session_release(c, "s1", "proc-b", on_ans, &a));
  CHECK_INT(a.status, TP_STORE_NOTFOUND);  /* not b's to let go */
  OP(loop, a, o->session_release(c, "s1", "proc-a", on_ans, &a));
  CHECK_INT(a.status, TP_STORE_OK);
  OP(loop, a, o->session_claim(c, "s1", "proc-b", 1000, 0, on_ans, &a));
  CHECK_INT(a.status, TP_STORE_OK);
  fake_now = t0 + 2500;
  OP(loop, a, o->session_claim(c, "s1", "proc-a", 0, 0, on_ans, &a));  /* b's expired */
  CHECK_INT(a.status, TP_STORE_OK);
  fake_now = t0 + 100000000;
  OP(loop, a, o->session_claim(c, "s1", "proc-b", 1000, 0, on_ans, &a));
  CHECK_INT(a.status, TP_STORE_CONFLICT);  /* ttl 0: held until released */
  fake_now = t0;
  tp__store_set_clock(NULL);
  tp__store_close(c);
}

/* Leases (store.h): a process's lease is its claim of TP_STORE_LEASE_PREFIX + its name. A
** claim held by a process whose lease lapsed (or never was) is taken over (TAKEOVER: OK,
** num 1, val: that holder) or reported (PROBE: CONFLICT, num 1); a live holder keeps it
** (num 0), and mode 0 never looks at leases. */
static void lease_ops (tp_store *s, uv_loop_t *loop) {
  tp_store_conn *c = tp__store_connect(s, loop, NULL, 0);
  CHECK(c != NULL);
  if (c == NULL) return;
  const tp_store_ops *o = c->ops;
  ans a;
  tp__store_set_clock(fake_clock);
  int64_t t0 = fake_now;
  OP(loop, a, o->session_claim(c, TP_STORE_LEASE_PREFIX "proc-a", "proc-a", 1000, 0, on_ans, &a));
  CHECK_INT(a.status, TP_STORE_OK);
  OP(loop, a, o->session_claim(c, TP_STORE_LEASE_PREFIX "proc-b", "proc-b", 5000, 0, on_ans, &a));
  CHECK_INT(a.status, TP_STORE_OK);
  OP(loop, a, o->session_claim(c, "s2", "proc-a", 60000, 0, on_ans, &a));
  CHECK_INT(a.status, TP_STORE_OK);
  OP(loop, a, o->session_claim(c, "s2", "proc-b", 60000, TP_STORE_PROBE, on_ans, &a));
  CHECK_INT(a.status, TP_STORE_CONFLICT);
  CHECK_INT(a.num, 0);                     /* a's lease holds */
  CHECK_STR(a.val, "proc-a");
  OP(loop, a, o->session_claim(c, "s2", "proc-b", 60000, TP_STORE_TAKEOVER, on_ans, &a));
  CHECK_INT(a.status, TP_STORE_CONFLICT);
  CHECK_INT(a.num, 0);
  fake_now = t0 + 1500;                    /* a's lease lapsed, its claim of s2 did not */
  OP(loop, a, o->session_claim(c, "s2", "proc-b", 60000, 0, on_ans, &a));
  CHECK_INT(a.status, TP_STORE_CONFLICT);
  CHECK_INT(a.num, 0);                     /* mode 0: as before leases */
  OP(loop, a, o->session_claim(c, "s2", "proc-b", 60000, TP_STORE_PROBE, on_ans, &a));
  CHECK_INT(a.status, TP_STORE_CONFLICT);
  CHECK_INT(a.num, 1);
  CHECK_STR(a.val, "proc-a");
  OP(loop, a, o->session_claim(c, "s2", "proc-b", 60000, TP_STORE_TAKEOVER, on_ans, &a));
  CHECK_INT(a.status, TP_STORE_OK);
  CHECK_INT(a.num, 1);
  CHECK_STR(a.val, "proc-a");              /* taken from a */
  OP(loop, a, o->session_claim(c, "s2", "proc-b", 60000, TP_STORE_TAKEOVER, on_ans, &a));
  CHECK_INT(a.status, TP_STORE_OK);
  CHECK_INT(a.num, 0);                     /* b's own now: extended */
  OP(loop, a, o->session_claim(c, "s2", "proc-a", 60000, TP_STORE_TAKEOVER, on_ans, &a));
  CHECK_INT(a.status, TP_STORE_CONFLICT);  /* b's lease holds */
  CHECK_STR(a.val, "proc-b");
  OP(loop, a, o->session_claim(c, "s3", "proc-c", 60000, 0, on_ans, &a));
  CHECK_INT(a.status, TP_STORE_OK);
  OP(loop, a, o->session_claim(c, "s3", "proc-a", 60000, TP_STORE_TAKEOVER, on_ans, &a));
  CHECK_INT(a.status, TP_STORE_OK);        /* c never had a lease */
  CHECK_INT(a.num, 1);
  CHECK_STR(a.val, "proc-c");
  fake_now = t0;
  tp__store_set_clock(NULL);
  tp__store_close(c);
}

/* Two threads, a connection each on a loop each. */
typedef struct worker { tp_store *s; int id, taken, saw; } worker;

static void *work (void *p) {
  worker *w = p;
  uv_loop_t loop;
  uv_loop_init(&loop);
  tp_store_conn *c = tp__store_connect(w->s, &loop, NULL, 0);
  if (c != NULL) {
    ans a;
    char key[32], val[32];
    for (int i = 0; i < 100; i++) {
      snprintf(key, sizeof key, "t%d-%03d", w->id, i);
      snprintf(val, sizeof val, "%d", i);
      memset(&a, 0, sizeof a);
      c->ops->kv_set(c, key, strlen(key), val, strlen(val), on_ans, &a);
      settle(&loop, &a);
      memset(&a, 0, sizeof a);
      c->ops->bucket_take(c, "shared", 6, 150, 1e-9, 5000, on_ans, &a);
      settle(&loop, &a);
      if (a.status == TP_STORE_OK && a.num == 0) w->taken++;
    }
    /* the other thread's keys, once it is done (spin on a key it writes last) */
    snprintf(key, sizeof key, "t%d-099", 1 - w->id);
    for (int tries = 0; tries < 20000; tries++) {
      memset(&a, 0, sizeof a);
      c->ops->kv_get(c, key, strlen(key), on_ans, &a);
      settle(&loop, &a);
      if (a.status == TP_STORE_OK) break;
      usleep(500);
    }
    memset(&a, 0, sizeof a);
    snprintf(key, sizeof key, "t%d-", 1 - w->id);
    c->ops->kv_list(c, key, strlen(key), NULL, 0, 1000, on_ans, &a);
    settle(&loop, &a);
    w->saw = (int)a.num;
    tp__store_close(c);
  }
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_loop_close(&loop);
  return NULL;
}

static void two_threads (tp_store *s) {
  worker w[2] = { { s, 0, 0, 0 }, { s, 1, 0, 0 } };
  pthread_t th[2];
  for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, work, &w[i]);
  for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
  CHECK_INT(w[0].saw, 100);
  CHECK_INT(w[1].saw, 100);
  CHECK_INT(w[0].taken + w[1].taken, 150);  /* not one token more, not one less */
}

static void conformance (tp_store *s) {
  uv_loop_t loop;
  uv_loop_init(&loop);
  kv_ops(s, &loop);
  bucket_ops(s, &loop);
  run_ops(s, &loop);
  session_ops(s, &loop);
  lease_ops(s, &loop);
  two_threads(s);
  uv_run(&loop, UV_RUN_DEFAULT);
  CHECK_INT(uv_loop_close(&loop), 0);
}

TEST(memory_store_passes_the_conformance_suite) {
  tp_store *s = tp_store_create();
  CHECK_STR(tp__store_kind(s), "memory");
  CHECK_INT(tp__store_shared(s), 0);
  conformance(s);
  tp_store_destroy(s);
}

TEST(memory_store_with_deferred_answers_passes_the_conformance_suite) {
  tp_store *s = tp_store_create();
  tp__store_memory_defer(s, 1);
  CHECK_INT(tp__store_shared(s), 1);
  conformance(s);
  tp_store_destroy(s);
}

TEST(sqlite_store_passes_the_conformance_suite) {
  make_tmp();
  char err[512] = "";
  tp_store *s = tp_store_open(tmpdir, err, sizeof err);
  CHECK(s != NULL);
  if (s == NULL) { printf("#   %s\n", err); rm_tmp(); return; }
  CHECK_STR(tp__store_kind(s), "sqlite");
  CHECK_INT(tp__store_shared(s), 1);
  conformance(s);
  tp_store_destroy(s);
  rm_tmp();
}

/* ---- what one backend does alone -------------------------------------------------- */

TEST(deferred_answers_come_on_a_later_loop_turn_and_closing_answers_closed) {
  tp_store *s = tp_store_create();
  tp__store_memory_defer(s, 1);
  uv_loop_t loop;
  uv_loop_init(&loop);
  tp_store_conn *c = tp__store_connect(s, &loop, NULL, 0);
  ans a, b;
  memset(&a, 0, sizeof a);
  c->ops->kv_set(c, "k", 1, "v", 1, on_ans, &a);
  CHECK_INT(a.got, 0);  /* not before the operation returned */
  uv_run(&loop, UV_RUN_ONCE);
  CHECK_INT(a.got, 1);
  CHECK_INT(a.status, TP_STORE_OK);
  memset(&b, 0, sizeof b);
  c->ops->kv_get(c, "k", 1, on_ans, &b);
  CHECK_INT(b.got, 0);
  tp__store_close(c);   /* outstanding: answered CLOSED, once */
  CHECK_INT(b.got, 1);
  CHECK_INT(b.status, TP_STORE_CLOSED);
  uv_run(&loop, UV_RUN_DEFAULT);
  CHECK_INT(b.got, 1);
  CHECK_INT(uv_loop_close(&loop), 0);
  tp_store_destroy(s);
}

TEST(sqlite_store_keeps_keys_across_a_reopen) {
  make_tmp();
  char err[512] = "";
  uv_loop_t loop;
  uv_loop_init(&loop);
  tp_store *s = tp_store_open(tmpdir, err, sizeof err);
  tp_store_conn *c = s ? tp__store_connect(s, &loop, err, sizeof err) : NULL;
  CHECK(c != NULL);
  ans a;
  if (c) {
    OP(&loop, a, c->ops->kv_set(c, "kept", 4, "[1,2]", 5, on_ans, &a));
    OP(&loop, a, c->ops->bucket_take(c, "b", 1, 1, 0.001, 5000, on_ans, &a));
    CHECK_INT(a.num, 0);
    tp__store_close(c);
  }
  tp_store_destroy(s);
  char path[400];
  snprintf(path, sizeof path, "sqlite:%s/tidepool.db", tmpdir);
  s = tp_store_open(path, err, sizeof err);
  c = s ? tp__store_connect(s, &loop, err, sizeof err) : NULL;
  CHECK(c != NULL);
  if (c) {
    OP(&loop, a, c->ops->kv_get(c, "kept", 4, on_ans, &a));
    CHECK_STR(a.val, "[1,2]");
    OP(&loop, a, c->ops->kv_set(c, "more", 4, "1", 1, on_ans, &a));
    CHECK_INT(a.num, 14);  /* the byte count was kept too */
    OP(&loop, a, c->ops->bucket_take(c, "b", 1, 1, 0.001, 5000, on_ans, &a));
    CHECK_INT(a.num, 1000000);  /* its one token was taken before */
    tp__store_close(c);
  }
  tp_store_destroy(s);
  uv_loop_close(&loop);
  rm_tmp();
}

TEST(sqlite_store_refuses_a_database_of_a_newer_schema) {
  make_tmp();
  char err[512] = "", path[400];
  tp_store *s = tp_store_open(tmpdir, err, sizeof err);
  CHECK(s != NULL);
  tp_store_destroy(s);
  snprintf(path, sizeof path, "%s/tidepool.db", tmpdir);
  sqlite3 *db;
  CHECK_INT(sqlite3_open(path, &db), SQLITE_OK);
  CHECK_INT(sqlite3_exec(db, "PRAGMA user_version = 7", NULL, NULL, NULL), SQLITE_OK);
  sqlite3_close(db);
  s = tp_store_open(tmpdir, err, sizeof err);
  CHECK(s == NULL);
  char want[600];
  snprintf(want, sizeof want, "%s: written by a newer tidepool (schema 7; this one reads up "
           "to 1): use that version, or another state directory", path);
  CHECK_STR(err, want);
  rm_tmp();
}

TEST(store_open_names_what_is_wrong_with_a_location) {
  make_tmp();
  char err[512] = "", where[400];
  CHECK(tp_store_open("", err, sizeof err) == NULL);
  CHECK_STR(err, "no state location given (a directory, sqlite:PATH or redis://HOST:PORT/DB)");
  snprintf(where, sizeof where, "%s/file", tmpdir);
  FILE *f = fopen(where, "w");
  if (f) fclose(f);
  CHECK(tp_store_open(where, err, sizeof err) == NULL);
  char want[600];
  snprintf(want, sizeof want, "%s: not a directory (give a directory for the state, or "
           "sqlite:PATH for a database file)", where);
  CHECK_STR(err, want);
  snprintf(where, sizeof where, "%s/no/such", tmpdir);
  CHECK(tp_store_open(where, err, sizeof err) == NULL);
  snprintf(want, sizeof want, "%s: cannot make the state directory: No such file or "
           "directory", where);
  CHECK_STR(err, want);
  snprintf(where, sizeof where, "%s/new", tmpdir);  /* made when missing */
  tp_store *s = tp_store_open(where, err, sizeof err);
  CHECK(s != NULL);
  tp_store_destroy(s);
  struct stat st;
  snprintf(where, sizeof where, "%s/new/tidepool.db", tmpdir);
  CHECK_INT(stat(where, &st), 0);
  s = tp_store_open("memory:", err, sizeof err);
  CHECK_STR(s ? tp__store_kind(s) : "", "memory");
  tp_store_destroy(s);
  tp_store *(*volatile redis_open)(const char *, char *, size_t) = tp__store_redis_open;
  if (redis_open == NULL) {
    CHECK(tp_store_open("redis://127.0.0.1:1/0", err, sizeof err) == NULL);
    CHECK_STR(err, "redis://127.0.0.1:1/0: redis support is not in this build (use a "
              "directory for an SQLite state instead)");
  }
  tp_store_destroy(NULL);
  rm_tmp();
}

/* ---- engines on a store ------------------------------------------------------------- */

static int load_kv (tp_engine *e) {
  const char *env = getenv("TIDEPOOL_TOOLS_DIR");
  return tp_engine_load_tools(e, env && *env ? env : "tools");
}

/* kv.* through an engine whose store answers later: the handler waits (ctx.await). */
TEST(kv_tools_wait_for_a_store_that_answers_later) {
  tp_store *s = tp_store_create();
  tp__store_memory_defer(s, 1);
  tp_engine *e = tp_engine_create();
  CHECK_INT(tp_engine_set_store(e, s), TP_OK);
  tp_store_destroy(s);  /* e keeps its own reference */
  CHECK(load_kv(e) > 0);
  const char *src =
    "local a = tools.kv.set{key = 'k', value = {1, 'two'}}\n"
    "local b = tools.kv.get{key = 'k'}\n"
    "local c = tools.kv.get{key = 'nope'}\n"
    "tools.kv.set{key = 'k2', value = true}\n"
    "local l = tools.kv.list{prefix = 'k', limit = 1}\n"
    "local d = tools.kv.delete{key = 'k'}\n"
    "local d2 = tools.kv.delete{key = 'k'}\n"
    "return {a.bytes, a.used, b.value[2], c.found, l.keys[1], l.truncated, d.deleted, d2.deleted}";
  char *env = NULL;
  CHECK_INT(tp_engine_run(e, src, strlen(src), NULL, &env, NULL), TP_OK);
  CHECK_HAS(env, "\"result\":[9,10,\"two\",false,\"k\",true,true,false]");
  tp_free(env);
  tp_engine_destroy(e);
}


/* ---- the policy's rate buckets in a shared store ------------------------------------ */

static int tool_runs;
static int program_policy_saw;

static void pay (tp_call *c, void *ud) {
  (void)ud;
  tool_runs++;
  tp_call_complete(c, "{\"paid\":true}", 0);
}

static int program_policy (tp_call *c, void *ud, char *reason, size_t len) {
  (void)c; (void)ud; (void)reason; (void)len;
  program_policy_saw++;
  return TP_POLICY_ALLOW;
}

/* An engine on s with a tool pay.send and a policy: 2 calls at once globally, one more
** every 1000 s; a fake policy clock so that nothing refills meanwhile. */
static uint64_t policy_now_ns = 5000000000000ull;
static uint64_t policy_clock (void *ud) { (void)ud; return policy_now_ns; }

static tp_engine *rate_engine (tp_store *s, const char *key) {
  tp_engine *e = tp_engine_create();
  CHECK_INT(tp_engine_set_store(e, s), TP_OK);
  tp_tool_def d = { 0 };
  d.name = "pay.send";
  d.handler = pay;
  CHECK_INT(tp_engine_add_tool(e, &d), TP_OK);
  char cfg[400];
  snprintf(cfg, sizeof cfg, "{\"policy\": {\"default\": \"allow\", \"rules\": [{\"tools\": "
           "\"pay.*\", \"effect\": \"allow\", \"rate\": {\"capacity\": 2, \"per_second\": "
           "0.001, \"key\": \"%s\"}}]}}", key);
  CHECK_INT(tp_engine_configure(e, cfg, strlen(cfg)), TP_OK);
  tp__policy_set_clock(e, policy_clock, NULL);
  CHECK_INT(tp_engine_set_policy(e, program_policy, NULL), TP_OK);
  tp_engine_set_principal(e, "alice", NULL);
  return e;
}

static const char three_calls[] =
  "local out = {}\n"
  "for i = 1, 3 do\n"
  "  local ok, err = pcall(tools.pay.send, {})\n"
  "  out[i] = ok and 'paid' or (err.code .. ' ' .. tostring(err.retry_after_ms))\n"
  "end\n"
  "return out";

static void rate_limits_through (tp_store *s, const char *key) {
  tool_runs = program_policy_saw = 0;
  tp_engine *a = rate_engine(s, key), *b = rate_engine(s, key);
  char *env = NULL;
  CHECK_INT(tp_engine_run(a, three_calls, sizeof three_calls - 1, NULL, &env, NULL), TP_OK);
  CHECK_HAS(env, "\"result\":[\"paid\",\"paid\",\"tool.rate_limited 1000000\"]");
  CHECK_HAS(env, "policy rule 0 allows 2 calls at once per ");
  tp_free(env);
  /* another engine of the store: the same bucket, empty */
  CHECK_INT(tp_engine_run(b, three_calls, sizeof three_calls - 1, NULL, &env, NULL), TP_OK);
  CHECK_HAS(env, "\"result\":[\"tool.rate_limited 1000000\",\"tool.rate_limited 1000000\","
            "\"tool.rate_limited 1000000\"]");
  tp_free(env);
  CHECK_INT(tool_runs, 2);
  CHECK_INT(program_policy_saw, 2);  /* the program's policy still sees the allowed calls */
  policy_now_ns += 1000000000000ull;   /* 1000 s: one token back */
  CHECK_INT(tp_engine_run(b, three_calls, sizeof three_calls - 1, NULL, &env, NULL), TP_OK);
  CHECK_HAS(env, "\"result\":[\"paid\",\"tool.rate_limited 1000000\",");
  tp_free(env);
  tp_engine_destroy(a);
  tp_engine_destroy(b);
}

TEST(rate_buckets_in_a_store_that_answers_later_hold_the_call_then_decide) {
  tp_store *s = tp_store_create();
  tp__store_memory_defer(s, 1);
  rate_limits_through(s, "global");
  rate_limits_through(s, "principal");  /* another rule key: a bucket of its own */
  tp_store_destroy(s);
}

TEST(rate_buckets_in_an_sqlite_store_are_shared_by_its_engines) {
  make_tmp();
  tp_store *s = tp_store_open(tmpdir, NULL, 0);
  CHECK(s != NULL);
  if (s) rate_limits_through(s, "principal");
  tp_store_destroy(s);
  rm_tmp();
}

/* A run ended while its call waited for the store: the answer lets go of the call. */
TEST(a_call_held_for_the_store_is_let_go_when_its_run_ends_first) {
  tool_runs = 0;
  tp_store *s = tp_store_create();
  tp__store_memory_defer(s, 1);
  tp_engine *e = rate_engine(s, "global");
  const char *src = "return tools.pay.send{}";
  tp_run *r = tp_run_create(e, src, strlen(src), NULL);
  int rc;
  while ((rc = tp_run_step(r, 0, 0)) == TP_YIELD) {}
  CHECK_INT(rc, TP_WAIT);   /* held: the store has not answered */
  tp_run_destroy(r);        /* the answer comes after: nothing runs, nothing leaks */
  tp_engine_poll(e, 0);
  CHECK_INT(tool_runs, 0);
  tp_engine_destroy(e);
  tp_store_destroy(s);
}

static off_t file_size (const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0 ? sb.st_size : -1;
}

/* Writes 2 KB values under keys k<from>.. until one fails or n are written; the number
** written. *last is the failing answer. */
static int fill_kv (uv_loop_t *loop, tp_store_conn *c, int from, int n, ans *last) {
  static char v[2048];
  memset(v, 'v', sizeof v);
  for (int i = 0; i < n; i++) {
    char k[32];
    int kl = snprintf(k, sizeof k, "k%d", from + i);
    memset(last, 0, sizeof *last);
    c->ops->kv_set(c, k, (size_t)kl, v, sizeof v, on_ans, last);
    settle(loop, last);
    if (last->status != TP_STORE_OK) return i;
  }
  return n;
}

/* A full disk is one write's error: the WAL stays bounded (SQLite's default let it grow
** to 4 MB and never shrank it, so it kept every later write out, restarts included), a
** write after space is freed succeeds, and so does a reopen. On a 4 MB tmpfs (root). */
TEST(sqlite_store_on_a_full_disk_fails_one_write_and_recovers_when_space_is_freed) {
  if (geteuid() != 0) { printf("#   needs root (mount -t tmpfs): not run\n"); return; }
  make_tmp();
  if (mount("tmpfs", tmpdir, "tmpfs", 0, "size=4m") != 0) {
    TP_FAIL_AT("mount tmpfs on %s: %s", tmpdir, strerror(errno));
    rm_tmp();
    return;
  }
  char err[512] = "", filler[400], wal[400];
  snprintf(filler, sizeof filler, "%s/filler", tmpdir);
  snprintf(wal, sizeof wal, "%s/tidepool.db-wal", tmpdir);
  uv_loop_t loop;
  uv_loop_init(&loop);
  tp_store *s = tp_store_open(tmpdir, err, sizeof err);
  tp_store_conn *c = s ? tp__store_connect(s, &loop, err, sizeof err) : NULL;
  CHECK(c != NULL);
  if (c) {
    /* with room: 600 writes of 2 KB (1.2 MB of data, far more through the WAL) keep the
    ** WAL under a megabyte */
    ans a;
    CHECK_INT(fill_kv(&loop, c, 0, 600, &a), 600);
    off_t w = file_size(wal);
    CHECK(w >= 0 && w <= 1024 * 1024);
    /* the rest of the disk taken by another file, but for about 300 KB */
    int fd = open(filler, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    static char block[64 * 1024];
    for (;;) {
      ssize_t wr = write(fd, block, sizeof block);
      if (wr <= 0) break;
    }
    close(fd);
    CHECK_INT(truncate(filler, file_size(filler) - 300 * 1024), 0);
    int n = fill_kv(&loop, c, 1000, 100000, &a);
    CHECK(n > 0 && n < 100000);
    CHECK_INT(a.status, TP_STORE_ERROR);
    CHECK_HAS(a.err, "the state database failed to ");
    CHECK_HAS(a.err, "(the disk is full or a file-size limit was reached: free space, and "
              "the next write is tried again)");
    /* still full: still refused, and reads still answer */
    CHECK_INT(fill_kv(&loop, c, 200000, 1, &a), 0);
    OP(&loop, a, c->ops->kv_get(c, "k1000", 5, on_ans, &a));
    CHECK_INT(a.status, TP_STORE_OK);
    /* space freed: the next write succeeds, with no reopen */
    CHECK_INT(unlink(filler), 0);
    CHECK_INT(fill_kv(&loop, c, 300000, 10, &a), 10);
    tp__store_close(c);
    tp_store_destroy(s);
    /* and after a restart too, with every acknowledged write there */
    s = tp_store_open(tmpdir, err, sizeof err);
    c = s ? tp__store_connect(s, &loop, err, sizeof err) : NULL;
    CHECK(c != NULL);
    if (c) {
      CHECK_INT(fill_kv(&loop, c, 400000, 10, &a), 10);
      char k[32];
      snprintf(k, sizeof k, "k%d", 1000 + n - 1);
      OP(&loop, a, c->ops->kv_get(c, k, strlen(k), on_ans, &a));
      CHECK_INT(a.status, TP_STORE_OK);
      CHECK_INT(a.len, 2048);
      tp__store_close(c);
    }
  }
  tp_store_destroy(s);
  uv_loop_close(&loop);
  if (umount(tmpdir) != 0) TP_FAIL_AT("umount %s: %s", tmpdir, strerror(errno));
  rm_tmp();
}

/* Past a file-size limit (RLIMIT_FSIZE) with SIGXFSZ ignored, as the command does, a
** write is refused with the same message, and the process lives on. */
TEST(sqlite_store_past_a_file_size_limit_refuses_the_write_and_lives) {
  make_tmp();
  char err[512] = "";
  uv_loop_t loop;
  uv_loop_init(&loop);
  tp_store *s = tp_store_open(tmpdir, err, sizeof err);
  tp_store_conn *c = s ? tp__store_connect(s, &loop, err, sizeof err) : NULL;
  CHECK(c != NULL);
  struct rlimit old, lim;
  getrlimit(RLIMIT_FSIZE, &old);
  void (*was)(int) = signal(SIGXFSZ, SIG_IGN);
  lim.rlim_cur = 200 * 1024;
  lim.rlim_max = old.rlim_max;
  CHECK_INT(setrlimit(RLIMIT_FSIZE, &lim), 0);
  if (c) {
    ans a;
    int n = fill_kv(&loop, c, 0, 100000, &a);
    CHECK(n > 0 && n < 100000);
    CHECK_INT(a.status, TP_STORE_ERROR);
    CHECK_HAS(a.err, "(the disk is full or a file-size limit was reached");
  }
  setrlimit(RLIMIT_FSIZE, &old);
  signal(SIGXFSZ, was);
  if (c) {
    ans a;
    CHECK_INT(fill_kv(&loop, c, 500000, 5, &a), 5);  /* the limit lifted: writes again */
    tp__store_close(c);
  }
  tp_store_destroy(s);
  uv_loop_close(&loop);
  rm_tmp();
}

int main (int argc, char **argv) {
  tp_test_args(argc, argv);
  RUN(memory_store_passes_the_conformance_suite);
  RUN(memory_store_with_deferred_answers_passes_the_conformance_suite);
  RUN(sqlite_store_passes_the_conformance_suite);
  RUN(deferred_answers_come_on_a_later_loop_turn_and_closing_answers_closed);
  RUN(sqlite_store_keeps_keys_across_a_reopen);
  RUN(sqlite_store_refuses_a_database_of_a_newer_schema);
  RUN(store_open_names_what_is_wrong_with_a_location);
  RUN(kv_tools_wait_for_a_store_that_answers_later);
  RUN(rate_buckets_in_a_store_that_answers_later_hold_the_call_then_decide);
  RUN(rate_buckets_in_an_sqlite_store_are_shared_by_its_engines);
  RUN(a_call_held_for_the_store_is_let_go_when_its_run_ends_first);
  RUN(sqlite_store_on_a_full_disk_fails_one_write_and_recovers_when_space_is_freed);
  RUN(sqlite_store_past_a_file_size_limit_refuses_the_write_and_lives);
  return tp_test_end();
}
