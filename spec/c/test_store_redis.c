/*
** test_store_redis.c: the Redis backend of the state store (engine/host/store_redis.c)
** against a real redis-server this test starts on a free 127.0.0.1 port (no persistence,
** in a temporary directory, stopped at the end). Every operation of store.h with its
** exact answers; a bucket shared by two connections on two threads gives out exactly its
** capacity; expiry of runs and sessions (ttl >= 0.5 s); values over TP_STORE_MAX_VALUE
** refused both ways; Redis down at open, killed under outstanding operations, then back.
*/
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>
#include <hiredis/hiredis.h>

#include "tp_test.h"
#include "tidepool.h"
#include "tidepool_server.h"
#include "store_int.h"

/* ---- the server ---------------------------------------------------------------------- */

static int port;
static pid_t server = -1;
static char dir[64];
static char sock_path[128];

static int free_port (void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
  socklen_t al = sizeof a;
  if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
      getsockname(fd, (struct sockaddr *)&a, &al) != 0) { if (fd >= 0) close(fd); return -1; }
  close(fd);
  return ntohs(a.sin_port);
}

static void sleep_ms (int ms) {
  struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
  nanosleep(&ts, NULL);
}

/* redis-server on port, in dir: 0 once it answers PING (within 10 s), else -1 */
static int server_start (void) {
  char portstr[16];
  snprintf(portstr, sizeof portstr, "%d", port);
  server = fork();
  if (server < 0) return -1;
  if (server == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);  /* the server dies with the test, however it ends */
    char logf[128];
    snprintf(logf, sizeof logf, "%s/redis.log", dir);
    execlp("redis-server", "redis-server", "--port", portstr, "--bind", "127.0.0.1",
           "--save", "", "--appendonly", "no", "--dir", dir, "--logfile", logf,
           "--unixsocket", sock_path, "--unixsocketperm", "700", (char *)NULL);
    _exit(127);
  }
  for (int i = 0; i < 200; i++) {
    int st;
    if (waitpid(server, &st, WNOHANG) == server) { server = -1; return -1; }
    redisContext *rc = redisConnect("127.0.0.1", port);
    if (rc && !rc->err) {
      redisReply *r = redisCommand(rc, "PING");
      int ok = r && r->type == REDIS_REPLY_STATUS;
      freeReplyObject(r);
      redisFree(rc);
      if (ok) return 0;
    }
    else redisFree(rc);
    sleep_ms(50);
  }
  return -1;
}

static void server_stop (int sig) {
  if (server <= 0) return;
  kill(server, sig);
  waitpid(server, NULL, 0);
  server = -1;
}

/* One blocking command on the server, for what the store never does itself. */
static redisReply *direct (const char *fmt, ...) {
  redisContext *rc = redisConnect("127.0.0.1", port);
  if (rc == NULL || rc->err) { redisFree(rc); return NULL; }
  va_list ap;
  va_start(ap, fmt);
  redisReply *r = redisvCommand(rc, fmt, ap);
  va_end(ap);
  redisFree(rc);
  return r;
}

/* ---- the store, one operation at a time ----------------------------------------------- */

typedef struct answer {
  int done, status;
  char *val;
  size_t len;
  int64_t num;
  char err[700];
} answer;

static void on_answer (void *ud, const tp_store_reply *r) {
  answer *a = ud;
  a->done++;
  a->status = r->status;
  free(a->val);
  a->val = NULL;
  a->len = r->len;
  if (r->val) {
    a->val = malloc(r->len + 1);
    memcpy(a->val, r->val, r->len);
    a->val[r->len] = '\0';
  }
  a->num = r->num;
  snprintf(a->err, sizeof a->err, "%s", r->err ? r->err : "");
}

static void on_timeout (uv_timer_t *t) { *(int *)t->data = 1; }

/* Runs loop until a is answered, at most 10 s. */
static void wait_for (uv_loop_t *loop, answer *a) {
  uv_timer_t t;
  int late = 0;
  uv_timer_init(loop, &t);
  t.data = &late;
  uv_timer_start(&t, on_timeout, 10000, 0);
  while (!a->done && !late) uv_run(loop, UV_RUN_ONCE);
  uv_close((uv_handle_t *)&t, NULL);
  uv_run(loop, UV_RUN_NOWAIT);
  if (late) TP_FAIL_AT("no answer within 10 s");
}

typedef struct fixture {
  uv_loop_t loop;
  tp_store *s;
  const tp_store_ops *ops;
  tp_store_conn *c;
} fixture;

static void url_of (char *buf, size_t n, const char *prefix, const char *extra) {
  snprintf(buf, n, "redis://127.0.0.1:%d/0?prefix=%s%s", port, prefix, extra ? extra : "");
}

static int setup (fixture *f, const char *prefix, const char *extra) {
  char url[300], err[300];
  url_of(url, sizeof url, prefix, extra);
  uv_loop_init(&f->loop);
  f->c = NULL;
  f->s = tp_store_open(url, err, sizeof err);
  if (f->s == NULL) { TP_FAIL_AT("open %s: %s", url, err); return -1; }
  f->ops = ((tp__store_head *)f->s)->ops;
  CHECK_STR(tp__store_kind(f->s), "redis");
  CHECK_INT(tp__store_shared(f->s), 1);
  f->c = tp__store_connect(f->s, &f->loop, err, sizeof err);
  if (f->c == NULL) { TP_FAIL_AT("connect: %s", err); return -1; }
  return 0;
}

static void teardown (fixture *f) {
  if (f->c) tp__store_close(f->c);
  uv_run(&f->loop, UV_RUN_DEFAULT);     /* the socket's handle closes */
  tp_store_destroy(f->s);
  CHECK_INT(uv_loop_close(&f->loop), 0);
}

static void reset (answer *a) { free(a->val); memset(a, 0, sizeof *a); }

#define OP(f, a, call) do { reset(&(a)); f.ops->call; wait_for(&f.loop, &(a)); } while (0)

/* ---- tests ------------------------------------------------------------------------------ */

TEST(kv_values_round_trip_with_exact_byte_accounting) {
  fixture f;
  answer a = { 0 };
  if (setup(&f, "t1:", NULL) == 0) {
    OP(f, a, kv_get(f.c, "k", 1, on_answer, &a));
    CHECK_INT(a.status, TP_STORE_NOTFOUND);
    OP(f, a, kv_set(f.c, "k", 1, "\"v1\"", 4, on_answer, &a));
    CHECK_INT(a.status, TP_STORE_OK);
    CHECK_INT(a.num, 5);
    OP(f, a, kv_set(f.c, "key2", 4, "[1,2,3]", 7, on_answer, &a));
    CHECK_INT(a.num, 16);
    OP(f, a, kv_set(f.c, "k", 1, "\"longer\"", 8, on_answer, &a));   /* replaces: +4 */
    CHECK_INT(a.status, TP_STORE_OK);
    CHECK_INT(a.num, 20);
    OP(f, a, kv_get(f.c, "k", 1, on_answer, &a));
    CHECK_INT(a.status, TP_STORE_OK);
    CHECK_STR(a.val, "\"longer\"");
    CHECK_INT(a.len, 8);
    /* keys and values are bytes: a NUL inside each */
    OP(f, a, kv_set(f.c, "a\0b", 3, "x\0y", 3, on_answer, &a));
    CHECK_INT(a.num, 26);
    OP(f, a, kv_get(f.c, "a\0b", 3, on_answer, &a));
    CHECK_INT(a.len, 3);
    CHECK(a.val && memcmp(a.val, "x\0y", 3) == 0);
    OP(f, a, kv_del(f.c, "key2", 4, on_answer, &a));
    CHECK_INT(a.status, TP_STORE_OK);
    CHECK_INT(a.num, 15);
    OP(f, a, kv_del(f.c, "key2", 4, on_answer, &a));
    CHECK_INT(a.status, TP_STORE_NOTFOUND);
    CHECK_INT(a.num, 15);
    OP(f, a, kv_get(f.c, "key2", 4, on_answer, &a));
    CHECK_INT(a.status, TP_STORE_NOTFOUND);
    /* the prefix keeps stores apart: t1b: sees none of t1:'s keys */
    fixture g;
    if (setup(&g, "t1b:", NULL) == 0) {
      OP(g, a, kv_get(g.c, "k", 1, on_answer, &a));
      CHECK_INT(a.status, TP_STORE_NOTFOUND);
    }
    teardown(&g);
  }
  reset(&a);
  teardown(&f);
}

TEST(kv_list_gives_keys_by_prefix_in_byte_order_after_a_cursor) {
  fixture f;
  answer a = { 0 };
  if (setup(&f, "t2:", NULL) == 0) {
    const char *keys[] = { "b1", "a3", "a1", "a\xff", "a2", "c" };
    for (int i = 0; i < 6; i++) {
      OP(f, a, kv_set(f.c, keys[i], strlen(keys[i]), "1", 1, on_answer, &a));
      CHECK_INT(a.status, TP_STORE_OK);
    }
    OP(f, a, kv_list(f.c, "a", 1, NULL, 0, 100, on_answer, &a));
    CHECK_INT(a.status, TP_STORE_OK);
    CHECK_STR(a.val, "[\"a1\",\"a2\",\"a3\",\"a\xff\"]");   /* bytes as they are */
    OP(f, a, kv_list(f.c, "a", 1, "a1", 2, 2, on_answer, &a));
    CHECK_STR(a.val, "[\"a2\",\"a3\"]");
    OP(f, a, kv_list(f.c, "", 0, "a\xff", 2, 10, on_answer, &a));
    CHECK_STR(a.val, "[\"b1\",\"c\"]");
    OP(f, a, kv_list(f.c, "", 0, NULL, 0, 2, on_answer, &a));
    CHECK_STR(a.val, "[\"a1\",\"a2\"]");
    OP(f, a, kv_list(f.c, "b", 1, "a9", 2, 10, on_answer, &a));   /* a cursor before it */
    CHECK_STR(a.val, "[\"b1\"]");
    OP(f, a, kv_list(f.c, "z", 1, NULL, 0, 10, on_answer, &a));
    CHECK_STR(a.val, "[]");
    OP(f, a, kv_del(f.c, "a2", 2, on_answer, &a));
    OP(f, a, kv_list(f.c, "a", 1, NULL, 0, 100, on_answer, &a));
    CHECK_STR(a.val, "[\"a1\",\"a3\",\"a\xff\"]");
    OP(f, a, kv_set(f.c, "q\"\\\n", 4, "1", 1, on_answer, &a));
    OP(f, a, kv_list(f.c, "q", 1, NULL, 0, 10, on_answer, &a));
    CHECK_STR(a.val, "[\"q\\\"\\\\\\u000a\"]");
  }
  reset(&a);
  teardown(&f);
}

/* test_store.c's conformance cases of kv and buckets, with their exact answers (its
** expiry cases use a fake clock, which Redis does not read: the ttl tests below use real
** time instead). */
TEST(the_conformance_cases_of_kv_and_buckets_give_the_same_answers) {
  fixture f;
  answer a = { 0 };
  if (setup(&f, "conf:", NULL) == 0) {
    tp_store_conn *c = f.c;
    const tp_store_ops *o = f.ops;
    OP(f, a, kv_set(c, "a", 1, "1", 1, on_answer, &a));
    CHECK_INT(a.num, 2);
    OP(f, a, kv_set(c, "a", 1, "22", 2, on_answer, &a));
    CHECK_INT(a.num, 3);
    OP(f, a, kv_set(c, "b\0z", 3, "x\0y", 3, on_answer, &a));
    CHECK_INT(a.num, 9);
    OP(f, a, kv_get(c, "b", 1, on_answer, &a));
    CHECK_INT(a.status, TP_STORE_NOTFOUND);
    OP(f, a, kv_set(c, "ab", 2, "\"q\"", 3, on_answer, &a));
    OP(f, a, kv_set(c, "ac", 2, "0", 1, on_answer, &a));
    OP(f, a, kv_set(c, "a\"\\", 3, "0", 1, on_answer, &a));
    CHECK_INT(a.num, 21);
    OP(f, a, kv_list(c, "", 0, NULL, 0, 100, on_answer, &a));
    CHECK_STR(a.val, "[\"a\",\"a\\\"\\\\\",\"ab\",\"ac\",\"b\\u0000z\"]");
    CHECK_INT(a.num, 5);
    OP(f, a, kv_list(c, "a", 1, NULL, 0, 2, on_answer, &a));
    CHECK_STR(a.val, "[\"a\",\"a\\\"\\\\\"]");
    OP(f, a, kv_list(c, "a", 1, "ab", 2, 10, on_answer, &a));
    CHECK_STR(a.val, "[\"ac\"]");
    OP(f, a, kv_list(c, "\xff", 1, NULL, 0, 10, on_answer, &a));
    CHECK_STR(a.val, "[]");
    OP(f, a, kv_del(c, "ab", 2, on_answer, &a));
    CHECK_INT(a.num, 16);
    char *big = malloc(TP_STORE_MAX_VALUE + 1);
    memset(big, 'v', TP_STORE_MAX_VALUE + 1);
    int i, last = TP_STORE_OK;
    char key[16];
    for (i = 0; i < 20 && last == TP_STORE_OK; i++) {
      snprintf(key, sizeof key, "fill%02d", i);
      OP(f, a, kv_set(c, key, 6, big, TP_STORE_MAX_VALUE, on_answer, &a));
      last = a.status;
    }
    CHECK_INT(i, 16);   /* the 16th 1 MiB value is over TP_STORE_KV_CAP */
    CHECK_INT(last, TP_STORE_TOO_BIG);
    CHECK_INT(a.num, 16 + 16 * (6 + (int64_t)TP_STORE_MAX_VALUE));
    for (int j = 0; j < 15; j++) {
      snprintf(key, sizeof key, "fill%02d", j);
      OP(f, a, kv_del(c, key, 6, on_answer, &a));
    }
    CHECK_INT(a.num, 16);
    free(big);
    int64_t t = 1000000;
    static const struct { const char *k; int64_t at, want; } takes[] = {
      { "r:1", 0, 0 }, { "r:1", 0, 0 }, { "r:1", 0, 1000 }, { "r:2", 0, 0 },
      { "r:1", 400, 600 }, { "r:1", 1000, 0 }, { "r:1", 1000, 1000 },
      { "r:1", 60000, 0 }, { "r:1", 60000, 0 }, { "r:1", 60000, 1000 } };
    for (size_t k = 0; k < sizeof takes / sizeof takes[0]; k++) {
      OP(f, a, bucket_take(c, takes[k].k, 3, 2, 1, t + takes[k].at, on_answer, &a));
      CHECK_INT(a.status, TP_STORE_OK);
      CHECK_INT(a.num, takes[k].want);
    }
    (void)o;
  }
  reset(&a);
  teardown(&f);
}

TEST(kv_over_its_byte_cap_or_a_value_over_1_mib_is_too_big) {
  fixture f;
  answer a = { 0 };
  if (setup(&f, "t3:", "&kv_max_bytes=100") == 0) {
    char v[61];
    memset(v, 'x', 60);
    v[60] = '\0';
    OP(f, a, kv_set(f.c, "one", 3, v, 60, on_answer, &a));
    CHECK_INT(a.status, TP_STORE_OK);
    CHECK_INT(a.num, 63);
    OP(f, a, kv_set(f.c, "two", 3, v, 60, on_answer, &a));
    CHECK_INT(a.status, TP_STORE_TOO_BIG);
    CHECK_INT(a.num, 126);
    CHECK_HAS(a.err, "over its cap of 100");
    OP(f, a, kv_get(f.c, "two", 3, on_answer, &a));
    CHECK_INT(a.status, TP_STORE_NOTFOUND);
    OP(f, a, kv_set(f.c, "one", 3, v, 30, on_answer, &a));     /* a smaller value fits */
    CHECK_INT(a.num, 33);
    size_t big = TP_STORE_MAX_VALUE + 1;
    char *b = malloc(big);
    memset(b, 'y', big);
    OP(f, a, kv_set(f.c, "big", 3, b, big, on_answer, &a));
    CHECK_INT(a.status, TP_STORE_TOO_BIG);
    OP(f, a, run_put(f.c, "r", b, big, 0, on_answer, &a));
    CHECK_INT(a.status, TP_STORE_TOO_BIG);
    OP(f, a, log_put(f.c, "r", 1, 0, b, big, on_answer, &a));
    CHECK_INT(a.status, TP_STORE_TOO_BIG);
    /* a value over the limit that something else put there is refused on the way back */
    redisReply *r = direct("SET %s %b", "t3:kv:huge", b, big);
    CHECK(r != NULL && r->type == REDIS_REPLY_STATUS);
    freeReplyObject(r);
    OP(f, a, kv_get(f.c, "huge", 4, on_answer, &a));
    CHECK_INT(a.status, TP_STORE_TOO_BIG);
    CHECK(a.val == NULL);
    free(b);
  }
  reset(&a);
  teardown(&f);
}

TEST(bucket_take_refills_and_says_when_the_next_token_comes) {
  fixture f;
  answer a = { 0 };
  if (setup(&f, "t4:", NULL) == 0) {
    OP(f, a, bucket_take(f.c, "b", 1, 2, 10, 1000, on_answer, &a));
    CHECK_INT(a.status, TP_STORE_OK);
    CHECK_INT(a.num, 0);
    OP(f, a, bucket_take(f.c, "b", 1, 2, 10, 1000, on_answer, &a));
    CHECK_INT(a.num, 0);
    OP(f, a, bucket_take(f.c, "b", 1, 2, 10, 1000, on_answer, &a));
    CHECK_INT(a.num, 100);             /* 10 per second: one in 100 ms */
    OP(f, a, bucket_take(f.c, "b", 1, 2, 10, 1050, on_answer, &a));
    CHECK_INT(a.num, 50);
    OP(f, a, bucket_take(f.c, "b", 1, 2, 10, 1100, on_answer, &a));
    CHECK_INT(a.num, 0);
    OP(f, a, bucket_take(f.c, "b", 1, 2, 10, 900, on_answer, &a));  /* a clock behind */
    CHECK_INT(a.num, 100);
    OP(f, a, bucket_take(f.c, "b", 1, 2, 10, 100000, on_answer, &a)); /* full, not over */
    OP(f, a, bucket_take(f.c, "b", 1, 2, 10, 100000, on_answer, &a));
    CHECK_INT(a.num, 0);
    OP(f, a, bucket_take(f.c, "b", 1, 2, 10, 100000, on_answer, &a));
    CHECK_INT(a.num, 100);
    OP(f, a, bucket_take(f.c, "b", 1, 2, 0, 1000, on_answer, &a));
    CHECK_INT(a.status, TP_STORE_ERROR);
    CHECK_HAS(a.err, "per_second above 0");
    /* the bucket expires once it would be full again: no key is left behind for ever */
    redisReply *r = direct("PTTL t4:bucket:b");
    CHECK(r != NULL && r->type == REDIS_REPLY_INTEGER && r->integer > 0 &&
          r->integer <= 1200);
    freeReplyObject(r);
  }
  reset(&a);
  teardown(&f);
}

/* Two threads, each with a loop and a connection, take 150 tokens at once each from one
** bucket of 100 that refills one token in 30 years: exactly 100 are given out. */
enum { TAKES = 150, CAPACITY = 100 };

static pthread_barrier_t start_line;

typedef struct taker {
  tp_store *s;
  int taken, refused, failed, answered;
} taker;

static void on_take (void *ud, const tp_store_reply *r) {
  taker *t = ud;
  t->answered++;
  if (r->status != TP_STORE_OK) t->failed++;
  else if (r->num == 0) t->taken++;
  else t->refused++;
}

static void *take_thread (void *p) {
  taker *t = p;
  uv_loop_t loop;
  char err[300];
  uv_loop_init(&loop);
  const tp_store_ops *ops = ((tp__store_head *)t->s)->ops;
  tp_store_conn *c = tp__store_connect(t->s, &loop, err, sizeof err);
  pthread_barrier_wait(&start_line);
  if (c != NULL) {
    for (int i = 0; i < TAKES; i++)
      ops->bucket_take(c, "shared", 6, CAPACITY, 1e-9, 5000, on_take, t);
    while (t->answered < TAKES) uv_run(&loop, UV_RUN_ONCE);
    tp__store_close(c);
  }
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_loop_close(&loop);
  return NULL;
}

TEST(a_bucket_shared_by_two_threads_gives_out_exactly_its_capacity) {
  char url[300], err[300];
  url_of(url, sizeof url, "t5:", NULL);
  tp_store *s = tp_store_open(url, err, sizeof err);
  if (s == NULL) { TP_FAIL_AT("open: %s", err); return; }
  taker t[2] = { { s, 0, 0, 0, 0 }, { s, 0, 0, 0, 0 } };
  pthread_t th[2];
  pthread_barrier_init(&start_line, NULL, 2);
  for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, take_thread, &t[i]);
  for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
  CHECK_INT(t[0].failed + t[1].failed, 0);
  CHECK_INT(t[0].taken + t[1].taken, CAPACITY);
  CHECK_INT(t[0].refused + t[1].refused, 2 * TAKES - CAPACITY);
  pthread_barrier_destroy(&start_line);
  tp_store_destroy(s);
}

TEST(runs_and_their_call_log_in_seq_order) {
  fixture f;
  answer a = { 0 };
  if (setup(&f, "t6:", NULL) == 0) {
    OP(f, a, run_get(f.c, "r1", on_answer, &a));
    CHECK_INT(a.status, TP_STORE_NOTFOUND);
    OP(f, a, log_read(f.c, "r1", on_answer, &a));
    CHECK_INT(a.status, TP_STORE_NOTFOUND);
    OP(f, a, run_put(f.c, "r1", "{\"script\":\"return 1\"}", 21, 0, on_answer, &a));
    CHECK_INT(a.status, TP_STORE_OK);
    OP(f, a, run_get(f.c, "r1", on_answer, &a));
    CHECK_INT(a.status, TP_STORE_OK);
    CHECK_STR(a.val, "{\"script\":\"return 1\"}");
    OP(f, a, run_put(f.c, "r1", "{\"v\":2}", 7, 0, on_answer, &a));
    OP(f, a, run_get(f.c, "r1", on_answer, &a));
    CHECK_STR(a.val, "{\"v\":2}");
    /* written out of order; seq 10 sorts after seq 2 (numbers, not text) */
    OP(f, a, log_put(f.c, "r1", 10, 0, "{\"e\":100}", 9, on_answer, &a));
    CHECK_INT(a.status, TP_STORE_OK);
    OP(f, a, log_put(f.c, "r1", 2, 1, "{\"e\":21}", 8, on_answer, &a));
    OP(f, a, log_put(f.c, "r1", 2, 0, "{\"e\":20}", 8, on_answer, &a));
    OP(f, a, log_put(f.c, "r1", 1, 0, "{\"e\":\"old\"}", 11, on_answer, &a));
    OP(f, a, log_put(f.c, "r1", 1, 0, "{\"e\":10}", 8, on_answer, &a));  /* replaces */
    OP(f, a, log_read(f.c, "r1", on_answer, &a));
    CHECK_INT(a.status, TP_STORE_OK);
    CHECK_STR(a.val, "[{\"e\":10},{\"e\":20},{\"e\":21},{\"e\":100}]");
    OP(f, a, log_put(f.c, "r1", 3, 2, "{}", 2, on_answer, &a));
    CHECK_INT(a.status, TP_STORE_ERROR);
    CHECK_HAS(a.err, "phase 0 or 1");
    OP(f, a, run_del(f.c, "r1", on_answer, &a));
    CHECK_INT(a.status, TP_STORE_OK);
    OP(f, a, run_get(f.c, "r1", on_answer, &a));
    CHECK_INT(a.status, TP_STORE_NOTFOUND);
    OP(f, a, log_read(f.c, "r1", on_answer, &a));
    CHECK_INT(a.status, TP_STORE_NOTFOUND);
    OP(f, a, run_del(f.c, "r1", on_answer, &a));
    CHECK_INT(a.status, TP_STORE_NOTFOUND);
  }
  reset(&a);
  teardown(&f);
}

TEST(a_run_and_its_log_expire_after_the_ttl) {
  fixture f;
  answer a = { 0 };
  if (setup(&f, "t7:", NULL) == 0) {
    OP(f, a, log_put(f.c, "short", 1, 0, "{}", 2, on_answer, &a));
    OP(f, a, run_put(f.c, "short", "{}", 2, 500, on_answer, &a));
    CHECK_INT(a.status, TP_STORE_OK);
    OP(f, a, log_put(f.c, "short", 1, 1, "{}", 2, on_answer, &a));
    OP(f, a, run_put(f.c, "kept", "{}", 2, 0, on_answer, &a));
    OP(f, a, log_put(f.c, "kept", 1, 0, "{}", 2, on_answer, &a));
    OP(f, a, run_get(f.c, "short", on_answer, &a));
    CHECK_INT(a.status, TP_STORE_OK);
    sleep_ms(800);
    OP(f, a, run_get(f.c, "short", on_answer, &a));
    CHECK_INT(a.status, TP_STORE_NOTFOUND);
    OP(f, a, log_read(f.c, "short", on_answer, &a));
    CHECK_INT(a.status, TP_STORE_NOTFOUND);
    OP(f, a, run_get(f.c, "kept", on_answer, &a));
    CHECK_INT(a.status, TP_STORE_OK);
    OP(f, a, log_read(f.c, "kept", on_answer, &a));
    CHECK_STR(a.val, "[{}]");
  }
  reset(&a);
  teardown(&f);
}

TEST(sessions_are_claimed_by_one_owner_extended_and_released) {
  fixture f;
  answer a = { 0 };
  if (setup(&f, "t8:", NULL) == 0) {
    OP(f, a, session_claim(f.c, "s1", "srv-a", 60000, 0, on_answer, &a));
    CHECK_INT(a.status, TP_STORE_OK);
    CHECK_STR(a.val, "srv-a");
    OP(f, a, session_claim(f.c, "s1", "srv-b", 60000, 0, on_answer, &a));
    CHECK_INT(a.status, TP_STORE_CONFLICT);
    CHECK_STR(a.val, "srv-a");
    OP(f, a, session_claim(f.c, "s1", "srv-a", 500, 0, on_answer, &a));  /* extends (shorter) */
    CHECK_INT(a.status, TP_STORE_OK);
    OP(f, a, session_release(f.c, "s1", "srv-b", on_answer, &a));   /* not b's to let go */
    CHECK_INT(a.status, TP_STORE_NOTFOUND);
    OP(f, a, session_claim(f.c, "s1", "srv-b", 60000, 0, on_answer, &a));
    CHECK_INT(a.status, TP_STORE_CONFLICT);
    sleep_ms(800);                                                    /* expired */
    OP(f, a, session_claim(f.c, "s1", "srv-b", 60000, 0, on_answer, &a));
    CHECK_INT(a.status, TP_STORE_OK);
    CHECK_STR(a.val, "srv-b");
    OP(f, a, session_release(f.c, "s1", "srv-b", on_answer, &a));
    CHECK_INT(a.status, TP_STORE_OK);
    OP(f, a, session_release(f.c, "s1", "srv-b", on_answer, &a));
    CHECK_INT(a.status, TP_STORE_NOTFOUND);
    OP(f, a, session_claim(f.c, "s1", "srv-a", 0, 0, on_answer, &a));     /* no expiry */
    CHECK_INT(a.status, TP_STORE_OK);
    redisReply *r = direct("PTTL t8:session:s1");
    CHECK(r != NULL && r->type == REDIS_REPLY_INTEGER);
    if (r) CHECK_INT(r->integer, -1);
    freeReplyObject(r);
  }
  reset(&a);
  teardown(&f);
}

/* Leases in Redis: the claim script reads the holder's lease (P session:\x1flive:NAME). */
TEST(a_claim_whose_holder_lease_lapsed_is_taken_over_or_reported) {
  fixture f;
  answer a = { 0 };
  if (setup(&f, "t12:", NULL) == 0) {
    OP(f, a, session_claim(f.c, TP_STORE_LEASE_PREFIX "srv-a", "srv-a", 300, 0, on_answer, &a));
    CHECK_INT(a.status, TP_STORE_OK);
    OP(f, a, session_claim(f.c, TP_STORE_LEASE_PREFIX "srv-b", "srv-b", 60000, 0, on_answer, &a));
    CHECK_INT(a.status, TP_STORE_OK);
    OP(f, a, session_claim(f.c, "s1", "srv-a", 60000, 0, on_answer, &a));
    CHECK_INT(a.status, TP_STORE_OK);
    OP(f, a, session_claim(f.c, "s1", "srv-b", 60000, TP_STORE_TAKEOVER, on_answer, &a));
    CHECK_INT(a.status, TP_STORE_CONFLICT);  /* a's lease holds */
    CHECK_INT(a.num, 0);
    CHECK_STR(a.val, "srv-a");
    sleep_ms(800);                            /* a's lease lapsed; its claim of s1 did not */
    OP(f, a, session_claim(f.c, "s1", "srv-b", 60000, 0, on_answer, &a));
    CHECK_INT(a.status, TP_STORE_CONFLICT);
    CHECK_INT(a.num, 0);
    OP(f, a, session_claim(f.c, "s1", "srv-b", 60000, TP_STORE_PROBE, on_answer, &a));
    CHECK_INT(a.status, TP_STORE_CONFLICT);
    CHECK_INT(a.num, 1);
    CHECK_STR(a.val, "srv-a");
    OP(f, a, session_claim(f.c, "s1", "srv-b", 60000, TP_STORE_TAKEOVER, on_answer, &a));
    CHECK_INT(a.status, TP_STORE_OK);
    CHECK_INT(a.num, 1);
    CHECK_STR(a.val, "srv-a");
    OP(f, a, session_claim(f.c, "s1", "srv-a", 60000, TP_STORE_TAKEOVER, on_answer, &a));
    CHECK_INT(a.status, TP_STORE_CONFLICT);  /* b's, and b's lease holds */
    CHECK_STR(a.val, "srv-b");
    redisReply *r = direct("GET t12:session:s1");
    CHECK(r != NULL && r->type == REDIS_REPLY_STRING);
    if (r && r->type == REDIS_REPLY_STRING) CHECK_STR(r->str, "srv-b");
    freeReplyObject(r);
  }
  reset(&a);
  teardown(&f);
}

TEST(open_names_the_url_when_redis_is_down_or_the_url_is_wrong) {
  char url[200], err[300];
  int dead = free_port();
  snprintf(url, sizeof url, "redis://127.0.0.1:%d/3", dead);
  CHECK(tp__store_redis_open(url, err, sizeof err) == NULL);
  snprintf(url, sizeof url, "cannot reach redis at redis://127.0.0.1:%d/3: ", dead);
  CHECK_HAS(err, url);
  CHECK_HAS(err, "refused");
  CHECK(tp__store_redis_open("redis://127.0.0.1:99999/0", err, sizeof err) == NULL);
  CHECK_HAS(err, "the port must be a number from 1 to 65535");
  CHECK(tp__store_redis_open("redis://127.0.0.1:6379/x", err, sizeof err) == NULL);
  CHECK_HAS(err, "the database after '/' must be a number");
  CHECK(tp__store_redis_open("redis://127.0.0.1/0?colour=red", err, sizeof err) == NULL);
  CHECK_HAS(err, "unknown or bad option \"colour=red\"");
  CHECK(tp__store_redis_open("rediss://127.0.0.1/", err, sizeof err) == NULL);
  CHECK_HAS(err, "TLS to redis (rediss://) is not in this build");
  CHECK(tp__store_redis_open("http://127.0.0.1/", err, sizeof err) == NULL);
  CHECK_HAS(err, "is not a redis URL");
}

TEST(a_password_and_a_unix_socket) {
  redisReply *r = direct("CONFIG SET requirepass s3cr3t");
  CHECK(r != NULL && r->type == REDIS_REPLY_STATUS);
  freeReplyObject(r);
  char url[300], err[300];
  snprintf(url, sizeof url, "redis://:wrong@127.0.0.1:%d/0", port);
  CHECK(tp__store_redis_open(url, err, sizeof err) == NULL);
  CHECK_HAS(err, "refused AUTH");
  CHECK_HAS(err, "redis://:***@127.0.0.1");
  CHECK(strstr(err, "wrong") == NULL);
  fixture f = { 0 };
  answer a = { 0 };
  uv_loop_init(&f.loop);
  char u2[300];
  snprintf(u2, sizeof u2, "redis+unix://:s3cr3t@%s?db=2&prefix=t9:", sock_path);
  snprintf(url, sizeof url, "redis://%s?db=2", sock_path);    /* the same socket, no AUTH */
  CHECK(tp__store_redis_open(url, err, sizeof err) == NULL);
  CHECK_HAS(err, "redis+unix://");
  CHECK_HAS(err, "refused SELECT");
  f.s = tp__store_redis_open(u2, err, sizeof err);
  if (f.s == NULL) TP_FAIL_AT("open %s: %s", u2, err);
  else {
    f.ops = ((tp__store_head *)f.s)->ops;
    f.c = tp__store_connect(f.s, &f.loop, err, sizeof err);
    OP(f, a, kv_set(f.c, "k", 1, "1", 1, on_answer, &a));
    CHECK_INT(a.status, TP_STORE_OK);
    OP(f, a, kv_get(f.c, "k", 1, on_answer, &a));
    CHECK_STR(a.val, "1");
  }
  reset(&a);
  teardown(&f);
  redisContext *rc = redisConnect("127.0.0.1", port);
  r = redisCommand(rc, "AUTH s3cr3t");
  freeReplyObject(r);
  r = redisCommand(rc, "SELECT 2");             /* it went to db 2, not 0 */
  freeReplyObject(r);
  r = redisCommand(rc, "GET t9:kv:k");
  CHECK(r != NULL && r->type == REDIS_REPLY_STRING);
  freeReplyObject(r);
  r = redisCommand(rc, "CONFIG SET requirepass %s", "");
  CHECK(r != NULL && r->type == REDIS_REPLY_STATUS);
  freeReplyObject(r);
  redisFree(rc);
}

TEST(close_answers_what_is_outstanding_closed) {
  fixture f;
  answer a = { 0 }, b = { 0 };
  if (setup(&f, "t10:", NULL) == 0) {
    f.ops->kv_set(f.c, "k", 1, "1", 1, on_answer, &a);
    f.ops->kv_get(f.c, "k", 1, on_answer, &b);
    tp__store_close(f.c);
    f.c = NULL;
    CHECK_INT(a.done, 1);
    CHECK_INT(a.status, TP_STORE_CLOSED);
    CHECK_INT(b.done, 1);
    CHECK_INT(b.status, TP_STORE_CLOSED);
  }
  reset(&a);
  reset(&b);
  teardown(&f);
}

/* Redis stopped (SIGSTOP): with timeout_ms=500 the op answers ERROR instead of waiting
** for ever, and once Redis runs again the next op reconnects. */
TEST(a_redis_that_stops_answering_is_dropped_after_the_timeout) {
  fixture f;
  answer a = { 0 };
  if (setup(&f, "t12:", "&timeout_ms=500") == 0) {
    OP(f, a, kv_set(f.c, "k", 1, "1", 1, on_answer, &a));
    CHECK_INT(a.status, TP_STORE_OK);
    kill(server, SIGSTOP);
    uint64_t t0 = uv_hrtime();
    OP(f, a, kv_get(f.c, "k", 1, on_answer, &a));
    double waited = (double)(uv_hrtime() - t0) / 1e9;
    kill(server, SIGCONT);
    CHECK_INT(a.status, TP_STORE_ERROR);
    CHECK_HAS(a.err, "did not answer within 500 ms");
    CHECK(waited >= 0.5 && waited < 5);
    OP(f, a, kv_get(f.c, "k", 1, on_answer, &a));
    CHECK_INT(a.status, TP_STORE_OK);
    CHECK_STR(a.val, "1");
  }
  reset(&a);
  teardown(&f);
}

/* Redis killed under an outstanding operation, then started again on the same port. */
TEST(a_lost_connection_answers_error_then_reconnects_when_redis_is_back) {
  fixture f;
  answer a = { 0 };
  if (setup(&f, "t11:", NULL) == 0) {
    OP(f, a, kv_set(f.c, "k", 1, "1", 1, on_answer, &a));
    CHECK_INT(a.status, TP_STORE_OK);
    kill(server, SIGSTOP);                      /* the next operation stays unanswered */
    reset(&a);
    f.ops->kv_get(f.c, "k", 1, on_answer, &a);
    uv_run(&f.loop, UV_RUN_NOWAIT);
    CHECK_INT(a.done, 0);
    server_stop(SIGKILL);
    wait_for(&f.loop, &a);
    CHECK_INT(a.status, TP_STORE_ERROR);
    char want[120];
    snprintf(want, sizeof want, "lost the connection to redis at redis://127.0.0.1:%d/0",
             port);
    CHECK_HAS(a.err, want);
    /* down: every operation answers ERROR, at once or when the connect fails */
    OP(f, a, kv_get(f.c, "k", 1, on_answer, &a));
    CHECK_INT(a.status, TP_STORE_ERROR);
    CHECK_HAS(a.err, "redis at redis://127.0.0.1:");
    OP(f, a, kv_get(f.c, "k", 1, on_answer, &a));
    CHECK_INT(a.status, TP_STORE_ERROR);
    CHECK_HAS(a.err, "is unreachable");
    if (server_start() != 0) { TP_FAIL_AT("redis-server did not start again"); }
    /* back: within the backoff (at most 2 s), an operation succeeds; kv_set runs a
    ** script, which the new connection loaded into the new (empty) server */
    int ok = 0;
    for (int i = 0; i < 50 && !ok; i++) {
      OP(f, a, kv_set(f.c, "k", 1, "22", 2, on_answer, &a));
      ok = a.status == TP_STORE_OK;
      if (!ok) sleep_ms(100);
    }
    CHECK(ok);
    CHECK_INT(a.num, 3);
    OP(f, a, kv_get(f.c, "k", 1, on_answer, &a));
    CHECK_STR(a.val, "22");
  }
  reset(&a);
  teardown(&f);
}

/* The kv.* tools of an engine on a Redis store: what one engine's script writes, an engine
** on another store opened on the same Redis (another process, in effect) reads. */
TEST(kv_tools_of_engines_on_two_stores_of_one_redis_share_keys) {
  char url[300], err[300];
  url_of(url, sizeof url, "eng:", NULL);
  tp_store *s1 = tp_store_open(url, err, sizeof err), *s2 = tp_store_open(url, err, sizeof err);
  CHECK(s1 != NULL && s2 != NULL);
  if (s1 == NULL || s2 == NULL) { tp_store_destroy(s1); tp_store_destroy(s2); return; }
  tp_engine *e1 = tp_engine_create(), *e2 = tp_engine_create();
  CHECK_INT(tp_engine_set_store(e1, s1), TP_OK);
  CHECK_INT(tp_engine_set_store(e2, s2), TP_OK);
  tp_store_destroy(s1);
  tp_store_destroy(s2);
  CHECK(tp_engine_load_tools(e1, "tools") > 0);
  CHECK(tp_engine_load_tools(e2, "tools") > 0);
  const char *w = "local a = tools.kv.set{key = 'shared', value = {n = 7}}\n"
                  "return {a.bytes, a.used}";
  char *env = NULL;
  CHECK_INT(tp_engine_run(e1, w, strlen(w), NULL, &env, NULL), TP_OK);
  CHECK_HAS(env, "\"result\":[7,13]");   /* {"n":7}; "shared" + it */
  tp_free(env);
  const char *r = "local g = tools.kv.get{key = 'shared'}\n"
                  "local l = tools.kv.list{prefix = 'sh'}\n"
                  "local d = tools.kv.delete{key = 'shared'}\n"
                  "return {g.value.n, l.keys[1], d.deleted, tools.kv.get{key = 'shared'}.found}";
  env = NULL;
  CHECK_INT(tp_engine_run(e2, r, strlen(r), NULL, &env, NULL), TP_OK);
  CHECK_HAS(env, "\"result\":[7,\"shared\",true,false]");
  tp_free(env);
  tp_engine_destroy(e1);
  tp_engine_destroy(e2);
}

typedef struct claim_seen { int got; char holder[64], err[300]; } claim_seen;

static void on_claim (void *ud, const char *holder, const char *err) {
  claim_seen *c = ud;
  c->got++;
  snprintf(c->holder, sizeof c->holder, "%s", holder ? holder : "");
  snprintf(c->err, sizeof c->err, "%s", err ? err : "");
}

static void claim_wait (tp_engine *e, claim_seen *c) {
  for (int i = 0; i < 1000 && c->got == 0; i++) tp_engine_poll(e, 1);
  CHECK_INT(c->got, 1);
}

/* tp_engine_claim_session: two engines on two stores of one Redis (two servers, in
** effect) agree on who holds a session. */
TEST(engines_on_two_stores_agree_on_who_holds_a_session) {
  char url[300], err[300];
  url_of(url, sizeof url, "claim:", NULL);
  tp_store *s1 = tp_store_open(url, err, sizeof err), *s2 = tp_store_open(url, err, sizeof err);
  CHECK(s1 != NULL && s2 != NULL);
  if (s1 == NULL || s2 == NULL) { tp_store_destroy(s1); tp_store_destroy(s2); return; }
  tp_engine *a = tp_engine_create(), *b = tp_engine_create();
  tp_engine_set_store(a, s1);
  tp_engine_set_store(b, s2);
  tp_store_destroy(s1);
  tp_store_destroy(s2);
  claim_seen c = { 0 };
  CHECK_INT(tp_engine_claim_session(a, "s1", "http://a:1/mcp", 60000, on_claim, &c), TP_OK);
  claim_wait(a, &c);
  CHECK_STR(c.holder, "");
  CHECK_STR(c.err, "");
  memset(&c, 0, sizeof c);
  CHECK_INT(tp_engine_claim_session(b, "s1", "http://b:2/mcp", 60000, on_claim, &c), TP_OK);
  claim_wait(b, &c);
  CHECK_STR(c.holder, "http://a:1/mcp");
  memset(&c, 0, sizeof c);
  CHECK_INT(tp_engine_claim_session(b, "s2", "http://b:2/mcp", 60000, on_claim, &c), TP_OK);
  claim_wait(b, &c);
  CHECK_STR(c.holder, "");                       /* another session: b's */
  CHECK_INT(tp_engine_release_session(b, "s1", "http://b:2/mcp"), TP_OK);  /* not b's */
  CHECK_INT(tp_engine_release_session(a, "s1", "http://a:1/mcp"), TP_OK);
  memset(&c, 0, sizeof c);                       /* a's next answer comes after its release */
  CHECK_INT(tp_engine_claim_session(a, "s3", "http://a:1/mcp", 60000, on_claim, &c), TP_OK);
  claim_wait(a, &c);
  memset(&c, 0, sizeof c);
  CHECK_INT(tp_engine_claim_session(b, "s1", "http://b:2/mcp", 60000, on_claim, &c), TP_OK);
  claim_wait(b, &c);
  CHECK_STR(c.holder, "");                       /* released by a: b's now */
  CHECK_INT(tp_engine_claim_session(a, NULL, "x", 1, on_claim, &c), TP_EINVAL);
  CHECK_INT(tp_engine_claim_session(a, "s", "x", -1, on_claim, &c), TP_EINVAL);
  tp_engine_destroy(a);
  tp_engine_destroy(b);
}

static void stored (void *ud, int status, const char *val, size_t len, const char *err) {
  (void)val; (void)len; (void)err;
  *(int *)ud = status;
}

/* /metrics of an engine whose Redis dies: the failed operation is counted by operation
** (tidepool_store_errors_total) and timed with the others. Redis is started again. */
TEST(an_engines_store_errors_are_counted_in_its_metrics) {
  char url[300], err[300];
  url_of(url, sizeof url, "met:", NULL);
  tp_store *s = tp_store_open(url, err, sizeof err);
  CHECK(s != NULL);
  if (s == NULL) return;
  tp_engine *e = tp_engine_create();
  CHECK_INT(tp_engine_set_store(e, s), TP_OK);
  tp_store_destroy(s);
  CHECK_INT(tp_engine_metrics_on(e), TP_OK);
  int st = -1;
  CHECK_INT(tp_engine_run_put(e, "r1", "{}", 2, 0, stored, &st), TP_OK);
  while (st == -1 && tp_engine_poll(e, 1) >= 0) {}
  CHECK_INT(st, TP_STORED_OK);
  server_stop(SIGKILL);
  st = -1;
  CHECK_INT(tp_engine_run_get(e, "r1", stored, &st), TP_OK);
  while (st == -1 && tp_engine_poll(e, 1) >= 0) {}
  CHECK_INT(st, TP_STORED_ERROR);
  tp_engine *es[] = { e };
  char *text = tp_metrics_text(es, 1, NULL);
  CHECK(text != NULL);
  if (text) {
    CHECK_HAS(text, "tidepool_store_errors_total{op=\"run_put\"} 0\n");
    CHECK_HAS(text, "tidepool_store_errors_total{op=\"run_get\"} 1\n");
    CHECK_HAS(text, "tidepool_store_duration_seconds_count 2\n");
  }
  tp_free(text);
  tp_engine_destroy(e);
  if (server_start() != 0) { TP_FAIL_AT("redis-server did not start again"); }
}

int main (int argc, char **argv) {
  tp_test_args(argc, argv);
  if (!tp_t_list) {
    snprintf(dir, sizeof dir, "/tmp/tp-redis-XXXXXX");
    if (mkdtemp(dir) == NULL) { printf("not ok - mkdtemp: %s\n", strerror(errno)); return 1; }
    snprintf(sock_path, sizeof sock_path, "%s/redis.sock", dir);
    port = free_port();
    if (server_start() != 0) {
      printf("not ok - redis-server did not start on 127.0.0.1:%d (is it installed? "
             "scripts/deps.sh installs it)\n# 0 passed, 1 failed\n", port);
      return 1;
    }
  }
  RUN(kv_values_round_trip_with_exact_byte_accounting);
  RUN(kv_list_gives_keys_by_prefix_in_byte_order_after_a_cursor);
  RUN(the_conformance_cases_of_kv_and_buckets_give_the_same_answers);
  RUN(kv_over_its_byte_cap_or_a_value_over_1_mib_is_too_big);
  RUN(bucket_take_refills_and_says_when_the_next_token_comes);
  RUN(a_bucket_shared_by_two_threads_gives_out_exactly_its_capacity);
  RUN(runs_and_their_call_log_in_seq_order);
  RUN(a_run_and_its_log_expire_after_the_ttl);
  RUN(sessions_are_claimed_by_one_owner_extended_and_released);
  RUN(a_claim_whose_holder_lease_lapsed_is_taken_over_or_reported);
  RUN(open_names_the_url_when_redis_is_down_or_the_url_is_wrong);
  RUN(a_password_and_a_unix_socket);
  RUN(close_answers_what_is_outstanding_closed);
  RUN(kv_tools_of_engines_on_two_stores_of_one_redis_share_keys);
  RUN(engines_on_two_stores_agree_on_who_holds_a_session);
  RUN(a_redis_that_stops_answering_is_dropped_after_the_timeout);
  RUN(a_lost_connection_answers_error_then_reconnects_when_redis_is_back);
  RUN(an_engines_store_errors_are_counted_in_its_metrics);
  if (!tp_t_list) {
    server_stop(SIGTERM);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) printf("# could not remove %s\n", dir);
  }
  return tp_test_end();
}
