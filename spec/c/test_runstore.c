/*
** test_runstore.c: paused runs in the state store through the public API (tidepool.h,
** "paused runs in the state store"): a run's log, told by tp_run_on_log, is put entry by
** entry with a record into an SQLite store; another engine on the store opened again
** (as after a restart) reads them back and replays the run without calling its tool.
** Then the statuses: NOTFOUND, TOO_BIG (nothing cut), delete with the log, expiry under
** a fake clock, and the arguments refused before anything is called.
*/
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tidepool.h"
#include "tidepool_server.h"
#include "tp_test.h"

/* the store's clock of expiries (store_int.h; the test links the internal archive) */
void tp__store_set_clock(int64_t (*now_ms)(void));
static int64_t fake_now = 1700000000000;
static int64_t fake_clock (void) { return fake_now; }

typedef struct ans { int got, status; char *val; size_t len; char err[200]; } ans;

static void on_done (void *ud, int status, const char *val, size_t len, const char *err) {
  ans *a = ud;
  a->got++;
  a->status = status;
  free(a->val);
  a->val = NULL;
  a->len = len;
  if (val) {
    a->val = malloc(len + 1);
    memcpy(a->val, val, len);
    a->val[len] = '\0';
  }
  snprintf(a->err, sizeof a->err, "%s", err ? err : "");
}

/* Waits on e's loop until a has its answer (at once for SQLite). */
static void settle (tp_engine *e, ans *a) {
  for (int i = 0; i < 1000 && a->got == 0; i++) tp_engine_poll(e, 0);
}

static char tmpdir[256];

static void make_tmp (void) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/tp-runstore-XXXXXX");
  CHECK(mkdtemp(tmpdir) != NULL);
}

static void rm_tmp (void) {
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  CHECK(system(cmd) == 0);
}

static int calls;
static void count_tool (tp_call *c, void *ud) {
  (void)ud;
  calls++;
  char out[64];
  snprintf(out, sizeof out, "{\"n\":%d}", calls);
  tp_call_complete(c, out, strlen(out));
}

static tp_engine *engine_on (tp_store *s) {
  tp_engine *e = tp_engine_create();
  CHECK(tp_engine_set_store(e, s) == TP_OK);
  tp_tool_def d = { .name = "t.count", .handler = count_tool };
  CHECK(tp_engine_add_tool(e, &d) == TP_OK);
  return e;
}

typedef struct putter { tp_engine *e; const char *run; uint64_t pos; int failed; } putter;

/* tp_run_on_log's callback: each entry goes to the store at once, at the next position */
static int put_entry (tp_run *r, const char *entry, size_t len, void *ud) {
  (void)r;
  putter *p = ud;
  ans a = { 0 };
  if (tp_engine_log_put(p->e, p->run, p->pos++, entry, len, on_done, &a) != TP_OK) return 1;
  settle(p->e, &a);
  if (a.status != TP_STORED_OK) p->failed = 1;
  free(a.val);
  return a.status == TP_STORED_OK ? 0 : 1;
}

static const char script[] =
  "local a = tools.t.count{}\nlocal b = tools.t.count{}\n"
  "return {a = a.n, b = b.n, x = math.random(1000000)}";

static char *run_to_end (tp_engine *e, tp_run *r) {
  int rc;
  while ((rc = tp_run_step(r, 0, 0)) != TP_DONE) {
    if (rc < 0) return NULL;
    tp_engine_poll(e, rc == TP_WAIT);
  }
  const char *env = tp_run_envelope(r);
  return env ? strdup(env) : NULL;
}

TEST(a_logged_run_put_in_the_store_replays_from_it_after_the_store_is_opened_again) {
  make_tmp();
  char err[300];
  tp_store *s = tp_store_open(tmpdir, err, sizeof err);
  CHECK(s != NULL);
  tp_engine *e = engine_on(s);
  calls = 0;
  tp_run *r = tp_run_create(e, script, strlen(script), NULL);
  putter p = { e, "run-1", 0, 0 };
  CHECK(tp_run_on_log(r, put_entry, &p) == TP_OK);
  char *first = run_to_end(e, r);
  CHECK(first != NULL);
  CHECK_INT(calls, 2);
  CHECK_INT(p.failed, 0);
  CHECK(p.pos >= 5);  /* the seed, and two calls' start and end */
  ans a = { 0 };
  CHECK(tp_engine_run_put(e, "run-1", "{\"v\":1}", 7, 0, on_done, &a) == TP_OK);
  settle(e, &a);
  CHECK_INT(a.status, TP_STORED_OK);
  tp_run_destroy(r);
  tp_engine_destroy(e);
  tp_store_destroy(s);

  /* a restart: the store opened again, a new engine */
  s = tp_store_open(tmpdir, err, sizeof err);
  CHECK(s != NULL);
  e = engine_on(s);
  a.got = 0;
  CHECK(tp_engine_run_get(e, "run-1", on_done, &a) == TP_OK);
  settle(e, &a);
  CHECK_INT(a.got, 1);
  CHECK_INT(a.status, TP_STORED_OK);
  CHECK_STR(a.val, "{\"v\":1}");
  a.got = 0;
  CHECK(tp_engine_log_read(e, "run-1", on_done, &a) == TP_OK);
  settle(e, &a);
  CHECK_INT(a.status, TP_STORED_OK);
  CHECK(a.val != NULL && a.val[0] == '[');
  CHECK_HAS(a.val, "{\"seed\":");
  r = tp_run_create(e, script, strlen(script), NULL);
  CHECK(tp_run_replay(r, a.val, a.len, err, sizeof err) == TP_OK);
  calls = 100;
  char *again = run_to_end(e, r);
  CHECK_INT(calls, 100);  /* answered from the log */
  CHECK(again != NULL);
  if (first && again) {  /* the same result, draw included */
    const char *f = strstr(first, "\"result\":"), *g = strstr(again, "\"result\":");
    CHECK(f && g);
    if (f && g) CHECK_INT(strncmp(f, g, strcspn(f, "}") + 1), 0);
    CHECK_HAS(again, "\"a\":1,\"b\":2");
  }
  free(first);
  free(again);
  tp_run_destroy(r);
  /* deleting the run takes its log too */
  a.got = 0;
  CHECK(tp_engine_run_del(e, "run-1", on_done, &a) == TP_OK);
  settle(e, &a);
  CHECK_INT(a.status, TP_STORED_OK);
  a.got = 0;
  CHECK(tp_engine_log_read(e, "run-1", on_done, &a) == TP_OK);
  settle(e, &a);
  CHECK_INT(a.status, TP_STORED_NOTFOUND);
  a.got = 0;
  CHECK(tp_engine_run_get(e, "run-1", on_done, &a) == TP_OK);
  settle(e, &a);
  CHECK_INT(a.status, TP_STORED_NOTFOUND);
  free(a.val);
  tp_engine_destroy(e);
  tp_store_destroy(s);
  rm_tmp();
}

TEST(statuses_notfound_too_big_expiry_and_refused_arguments) {
  make_tmp();
  char err[300];
  tp_store *s = tp_store_open(tmpdir, err, sizeof err);
  tp_engine *e = engine_on(s);
  ans a = { 0 };
  CHECK(tp_engine_run_get(e, "nobody", on_done, &a) == TP_OK);
  settle(e, &a);
  CHECK_INT(a.got, 1);
  CHECK_INT(a.status, TP_STORED_NOTFOUND);
  CHECK(a.val == NULL);
  /* over 1 MiB: refused whole, nothing kept */
  size_t big = TP_STORED_MAX + 1;
  char *v = malloc(big);
  memset(v, 'x', big);
  a.got = 0;
  CHECK(tp_engine_run_put(e, "r", v, big, 0, on_done, &a) == TP_OK);
  settle(e, &a);
  CHECK_INT(a.status, TP_STORED_TOO_BIG);
  a.got = 0;
  CHECK(tp_engine_log_put(e, "r", 0, v, big, on_done, &a) == TP_OK);
  settle(e, &a);
  CHECK_INT(a.status, TP_STORED_TOO_BIG);
  a.got = 0;
  CHECK(tp_engine_run_get(e, "r", on_done, &a) == TP_OK);
  settle(e, &a);
  CHECK_INT(a.status, TP_STORED_NOTFOUND);
  free(v);
  /* a position put again replaces its entry */
  CHECK(tp_engine_log_put(e, "r", 0, "{\"a\":1}", 7, NULL, NULL) == TP_OK);
  CHECK(tp_engine_log_put(e, "r", 1, "{\"b\":2}", 7, NULL, NULL) == TP_OK);
  CHECK(tp_engine_log_put(e, "r", 0, "{\"c\":3}", 7, NULL, NULL) == TP_OK);
  a.got = 0;
  CHECK(tp_engine_log_read(e, "r", on_done, &a) == TP_OK);
  settle(e, &a);
  CHECK_STR(a.val, "[{\"c\":3},{\"b\":2}]");
  /* expiry, under the store's fake clock */
  tp__store_set_clock(fake_clock);
  a.got = 0;
  CHECK(tp_engine_run_put(e, "r", "{}", 2, 1000, on_done, &a) == TP_OK);
  settle(e, &a);
  CHECK_INT(a.status, TP_STORED_OK);
  fake_now += 999;
  a.got = 0;
  CHECK(tp_engine_run_get(e, "r", on_done, &a) == TP_OK);
  settle(e, &a);
  CHECK_INT(a.status, TP_STORED_OK);
  fake_now += 2;
  a.got = 0;
  CHECK(tp_engine_run_get(e, "r", on_done, &a) == TP_OK);
  settle(e, &a);
  CHECK_INT(a.status, TP_STORED_NOTFOUND);
  tp__store_set_clock(NULL);
  /* refused before anything: done is not called */
  a.got = 0;
  CHECK_INT(tp_engine_run_get(NULL, "r", on_done, &a), TP_EINVAL);
  CHECK_INT(tp_engine_run_get(e, "", on_done, &a), TP_EINVAL);
  CHECK_INT(tp_engine_run_get(e, NULL, on_done, &a), TP_EINVAL);
  CHECK_INT(tp_engine_run_put(e, "r", NULL, 0, 0, on_done, &a), TP_EINVAL);
  CHECK_INT(tp_engine_log_put(e, "r", 0, NULL, 0, on_done, &a), TP_EINVAL);
  CHECK_INT(tp_engine_log_put(e, "r", UINT64_MAX, "{}", 2, on_done, &a), TP_EINVAL);
  CHECK_INT(a.got, 0);
  free(a.val);
  tp_engine_destroy(e);
  tp_store_destroy(s);
  rm_tmp();
}

int main (int argc, char **argv) {
  tp_test_args(argc, argv);
  RUN(a_logged_run_put_in_the_store_replays_from_it_after_the_store_is_opened_again);
  RUN(statuses_notfound_too_big_expiry_and_refused_arguments);
  return tp_test_end();
}
