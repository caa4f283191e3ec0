/*
** test_replay.c: runs that replay exactly (tidepool.h, "durable and deterministic runs").
** A run with tool calls, parallel, math.random and the clock is recorded through
** tp_run_on_log, then its log is replayed into a fresh engine whose tools fail if they
** are called: the result is the same, parallel branches resume in the recorded order.
** A changed argument or tool at a seq ends the run with replay.divergence naming the
** seq; a log cut short lets the rest of the calls go to the tools; a result over 1 MiB
** fails its call with advice when the run is logged; two deterministic runs give the
** same envelope byte for byte, but for timings.
*/
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <openssl/evp.h>

#include "tidepool.h"
#include "tp_test.h"

/* ---- the log as the callback tells it, one entry a line ------------------------------ */

typedef struct logbuf { char *text; size_t len, cap; int entries, fail_phase0; } logbuf;

static int on_log (tp_run *r, const char *entry, size_t len, void *ud) {
  logbuf *b = ud;
  (void)r;
  CHECK(strlen(entry) == len);
  CHECK(memchr(entry, '\n', len) == NULL);
  if (b->fail_phase0 && strstr(entry, "\"phase\":0")) return -1;
  if (b->len + len + 2 > b->cap) {
    b->cap = (b->len + len + 2) * 2;
    b->text = realloc(b->text, b->cap);
  }
  memcpy(b->text + b->len, entry, len);
  b->len += len;
  b->text[b->len++] = '\n';
  b->text[b->len] = '\0';
  b->entries++;
  return 0;
}

/* The n-th line (from 0) of b, or NULL; caller frees. */
static char *log_line (const logbuf *b, int n) {
  const char *p = b->text;
  for (int i = 0; p && i < n; i++) {
    p = strchr(p, '\n');
    if (p) p++;
  }
  if (p == NULL || *p == '\0') return NULL;
  size_t len = strcspn(p, "\n");
  char *s = malloc(len + 1);
  memcpy(s, p, len);
  s[len] = '\0';
  return s;
}

/* The first len bytes of b's lines up to and including the first line that contains
** needle (a log cut there). */
static size_t cut_after (const logbuf *b, const char *needle) {
  const char *at = strstr(b->text, needle);
  if (at == NULL) return 0;
  const char *nl = strchr(at, '\n');
  return (size_t)(nl - b->text) + 1;
}

static void sha256_hex (const char *s, char out[65]) {
  unsigned char md[32];
  unsigned int n = 0;
  EVP_Digest(s, strlen(s), md, &n, EVP_sha256(), NULL);
  for (int i = 0; i < 32; i++) sprintf(out + 2 * i, "%02x", md[i]);
}

/* A field of a JSON text by a dotted path, as text (strings bare); caller frees. */
static char *field (const char *text, const char *path) {
  json_error_t err;
  json_t *root = text ? json_loads(text, 0, &err) : NULL, *v = root;
  char key[64];
  for (const char *p = path; v && *p; ) {
    size_t n = strcspn(p, ".");
    snprintf(key, sizeof key, "%.*s", (int)n, p);
    v = json_object_get(v, key);
    p += n + (p[n] == '.');
  }
  char *out = NULL;
  if (v && json_is_string(v)) out = strdup(json_string_value(v));
  else if (v) out = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT | JSON_SORT_KEYS);
  json_decref(root);
  return out;
}

#define CHECK_FIELD(text, path, expected) do { \
    char *tp_f_ = field((text), (path)); \
    CHECK_STR(tp_f_, (expected)); \
    free(tp_f_); \
  } while (0)

/* ---- tools ---------------------------------------------------------------------------- */

static int echo_calls, fail_calls;

/* t.echo: returns its arguments. */
static void echo_fn (tp_call *c, void *ud) {
  (void)ud;
  echo_calls++;
  tp_call_complete(c, tp_call_args(c), 0);
}

/* What every tool of the replaying engine does: it must not be called. */
static void fail_fn (tp_call *c, void *ud) {
  (void)ud;
  fail_calls++;
  tp_call_fail(c, "tool.failed", "called during a replay");
}

static char *big_text;
static void big_fn (tp_call *c, void *ud) {
  (void)ud;
  tp_call_complete(c, big_text, 0);
}

/* An engine with t.echo, t.other (echo too) and t.slow (completed by the test), or,
** replaying, the same names failing when called. */
static tp_engine *engine_with_tools (int replaying) {
  tp_engine *e = tp_engine_create();
  tp_tool_def echo = { .name = "t.echo", .handler = replaying ? fail_fn : echo_fn };
  tp_tool_def other = { .name = "t.other", .handler = replaying ? fail_fn : echo_fn };
  tp_tool_def slow = { .name = "t.slow", .handler = replaying ? fail_fn : NULL };
  tp_tool_def big = { .name = "t.big", .handler = big_fn };
  CHECK_INT(tp_engine_add_tool(e, &echo), TP_OK);
  CHECK_INT(tp_engine_add_tool(e, &other), TP_OK);
  CHECK_INT(tp_engine_add_tool(e, &slow), TP_OK);
  CHECK_INT(tp_engine_add_tool(e, &big), TP_OK);
  return e;
}

/* Steps r to its end; between steps the newest pending t.slow call is completed (so they
** complete in reverse order of their start), with {"v": its k}. */
static void drive (tp_run *r) {
  int rc, guard = 0;
  while ((rc = tp_run_step(r, 0, 0)) != TP_DONE && guard++ < 1000) {
    CHECK(rc == TP_WAIT || rc == TP_YIELD);
    tp_call *calls[8];
    size_t n = tp_run_pending(r, calls, 8);
    if (n > 0) {
      tp_call *c = calls[n - 1];
      char *k = field(tp_call_args(c), "k");
      char res[64];
      snprintf(res, sizeof res, "{\"v\":\"%s\"}", k ? k : "?");
      free(k);
      CHECK_INT(tp_call_complete(c, res, 0), TP_OK);
    }
  }
  CHECK_INT(rc, TP_DONE);
}

/* Runs src in e (seed and fixed clock when seeded), its log told to log (may be NULL),
** replaying replay[0..rlen) when not NULL; returns the envelope (caller frees). */
static char *run (tp_engine *e, const char *src, int seeded, logbuf *log, const char *replay,
                  size_t rlen) {
  tp_run *r = tp_run_create(e, src, strlen(src), NULL);
  CHECK(r != NULL);
  if (seeded) {
    CHECK_INT(tp_run_set_seed(r, 7), TP_OK);
    CHECK_INT(tp_run_set_fixed_clock(r, 1700000000, 250000), TP_OK);
  }
  if (log) CHECK_INT(tp_run_on_log(r, on_log, log), TP_OK);
  if (replay) {
    char err[200];
    CHECK_INT(tp_run_replay(r, replay, rlen, err, sizeof err), TP_OK);
    CHECK_STR(err, "");
  }
  drive(r);
  char *env = strdup(tp_run_envelope(r));
  tp_run_destroy(r);
  return env;
}

static const char parallel_src[] =
  "local seen = {}\n"
  "local a = tools.t.echo{n = math.random(1000000), s = 'x'}\n"
  "local t0 = os.time()\n"
  "local x, y = parallel(\n"
  "  function() local r = tools.t.slow{k = 'x'} seen[#seen + 1] = 'x'\n"
  "             local s = tools.t.echo{n = 2} return r.v .. s.n end,\n"
  "  function() local r = tools.t.slow{k = 'y'} seen[#seen + 1] = 'y'\n"
  "             return r.v .. os.clock() end)\n"
  "return {a = a.n, t = t0, x = x, y = y, seen = table.concat(seen, ','),\n"
  "        r2 = math.random(1000000), d = os.date('!%Y-%m-%d')}\n";

/* ---- the tests ------------------------------------------------------------------------ */

TEST(a_recorded_run_replays_to_the_same_result_without_calling_a_tool) {
  tp_engine *e = engine_with_tools(0);
  logbuf log = { 0 };
  echo_calls = 0;
  char *env = run(e, parallel_src, 1, &log, NULL, 0);
  CHECK_FIELD(env, "ok", "true");
  CHECK_FIELD(env, "result.seen", "y,x");  /* t.slow y completed first */
  CHECK_FIELD(env, "result.t", "1700000000");
  CHECK_FIELD(env, "result.y", "y0.25");   /* the second clock read: 1 step of 0.25 s */
  CHECK_FIELD(env, "result.x", "x2");
  CHECK_FIELD(env, "result.d", "2023-11-14");
  CHECK_INT(echo_calls, 2);
  /* seed, 4 calls (2 entries each), 3 clock reads, 2 orders */
  CHECK_INT(log.entries, 1 + 8 + 3 + 2);
  char *first = log_line(&log, 0);
  CHECK_STR(first, "{\"seed\":7,\"type\":\"seed\"}");
  free(first);
  char hash[65], want[200];
  sha256_hex("{\"n\":2}", hash);
  snprintf(want, sizeof want, "{\"args_hash\":\"%s\",\"phase\":0,\"seq\":4,\"tool\":\"t.echo\","
           "\"type\":\"call\"}", hash);
  CHECK_HAS(log.text, want);
  CHECK_HAS(log.text, "{\"ok\":true,\"phase\":1,\"result\":{\"n\":2},\"seq\":4,\"sync\":true,"
                      "\"type\":\"call\"}");
  CHECK_HAS(log.text, "{\"ok\":true,\"phase\":1,\"result\":{\"v\":\"y\"},\"seq\":3,"
                      "\"sync\":false,\"type\":\"call\"}");
  CHECK_HAS(log.text, "{\"seq\":3,\"type\":\"order\"}\n{\"clock\":\"cpu\",\"n\":2,\"type\":"
                      "\"clock\",\"value\":0.25}\n");
  CHECK_HAS(log.text, "\"seq\":2,\"sync\":false,\"type\":\"call\"}\n{\"seq\":2,\"type\":\"order\"}");
  /* replayed into an engine whose tools fail, without a seed or a clock of its own */
  tp_engine *e2 = engine_with_tools(1);
  fail_calls = 0;
  logbuf told = { 0 };
  char *env2 = run(e2, parallel_src, 0, &told, log.text, log.len);
  CHECK_INT(fail_calls, 0);
  CHECK_FIELD(env2, "ok", "true");
  char *r1 = field(env, "result"), *r2 = field(env2, "result");
  CHECK_STR(r2, r1);
  CHECK_INT(told.entries, 0);  /* everything was in the log */
  /* the log as a JSON array replays the same */
  size_t n = 0;
  char *arr = malloc(log.len + 8);
  arr[n++] = '[';
  for (size_t i = 0; i < log.len; i++) arr[n++] = log.text[i] == '\n' && i + 1 < log.len ? ','
                                                  : log.text[i] == '\n' ? ']' : log.text[i];
  arr[n] = '\0';
  char *env3 = run(e2, parallel_src, 0, NULL, arr, n);
  char *r3 = field(env3, "result");
  CHECK_STR(r3, r1);
  CHECK_INT(fail_calls, 0);
  free(arr); free(r1); free(r2); free(r3); free(env); free(env2); free(env3);
  free(log.text); free(told.text);
  tp_engine_destroy(e);
  tp_engine_destroy(e2);
}

static void on_done (tp_run *r, void *ud) {
  (void)r;
  *(int *)ud = 1;
}

TEST(a_replay_driven_by_the_engines_loop_gives_the_same_result) {
  tp_engine *e = engine_with_tools(0), *e2 = engine_with_tools(1);
  logbuf log = { 0 };
  char *env = run(e, parallel_src, 1, &log, NULL, 0);
  tp_run *r = tp_run_create(e2, parallel_src, strlen(parallel_src), NULL);
  char err[200];
  CHECK_INT(tp_run_replay(r, log.text, log.len, err, sizeof err), TP_OK);
  int done = 0, guard = 0;
  fail_calls = 0;
  CHECK_INT(tp_run_start(r, on_done, &done), TP_OK);
  while (!done && guard++ < 10000) tp_engine_poll(e2, 0);
  CHECK_INT(done, 1);
  CHECK_INT(fail_calls, 0);
  char *r1 = field(env, "result"), *r2 = field(tp_run_envelope(r), "result");
  CHECK_STR(r2, r1);
  CHECK_FIELD(tp_run_envelope(r), "result.seen", "y,x");
  free(r1); free(r2); free(env); free(log.text);
  tp_run_destroy(r);
  tp_engine_destroy(e);
  tp_engine_destroy(e2);
}

TEST(the_args_hash_is_of_the_canonical_json_sorted_keys_no_spaces_exact_integers) {
  tp_engine *e = engine_with_tools(0);
  logbuf log = { 0 };
  const char *src = "return tools.t.echo{z = {b = 1, a = 9007199254740993}, a = 'é', m = 1.5}";
  char *env = run(e, src, 0, &log, NULL, 0);
  CHECK_FIELD(env, "ok", "true");
  char hash[65], want[120];
  sha256_hex("{\"a\":\"é\",\"m\":1.5,\"z\":{\"a\":9007199254740993,\"b\":1}}", hash);
  snprintf(want, sizeof want, "\"args_hash\":\"%s\"", hash);
  CHECK_HAS(log.text, want);
  free(env); free(log.text);
  tp_engine_destroy(e);
}

static void keep_decision_hash (tp_run *r, const tp_decision *d, void *ud) {
  (void)r;
  snprintf(ud, 65, "%s", d->args_sha256);
}

/* A call is hashed once for both (tp__call_args_sha256): the policy's decision and the
** log name the same hash, that of the canonical text. */
TEST(the_policy_decision_and_the_call_log_carry_the_same_args_hash) {
  tp_engine *e = engine_with_tools(0);
  const char cfg[] = "{\"policy\":{\"rules\":[{\"tools\":\"t.*\",\"effect\":\"allow\"}]}}";
  CHECK_INT(tp_engine_configure(e, cfg, strlen(cfg)), TP_OK);
  char decided[65] = "";
  CHECK_INT(tp_engine_on_decision(e, keep_decision_hash, decided), TP_OK);
  logbuf log = { 0 };
  char *env = run(e, "return tools.t.echo{b = 2, a = {1, 2}}", 0, &log, NULL, 0);
  CHECK_FIELD(env, "ok", "true");
  char hash[65], want[120];
  sha256_hex("{\"a\":[1,2],\"b\":2}", hash);
  CHECK_STR(decided, hash);
  snprintf(want, sizeof want, "\"args_hash\":\"%s\"", hash);
  CHECK_HAS(log.text, want);
  free(env); free(log.text);
  tp_engine_destroy(e);
}

/* Records "echo{n=1}; echo{n=2}" and replays src against that log; returns the envelope. */
static char *replay_changed (const char *src, char *hash1_out) {
  tp_engine *e = engine_with_tools(0), *e2 = engine_with_tools(1);
  logbuf log = { 0 };
  const char *rec = "tools.t.echo{n = 1} tools.t.echo{n = 2} return 'done'";
  char *env = run(e, rec, 0, &log, NULL, 0);
  CHECK_FIELD(env, "ok", "true");
  char *line = log_line(&log, 3);  /* seed, call 1 (two entries), call 2's phase 0 */
  char *h = field(line, "args_hash");
  snprintf(hash1_out, 65, "%s", h ? h : "");
  free(h); free(line);
  fail_calls = 0;
  char *env2 = run(e2, src, 0, NULL, log.text, log.len);
  CHECK_INT(fail_calls, 0);
  free(env); free(log.text);
  tp_engine_destroy(e);
  tp_engine_destroy(e2);
  return env2;
}

TEST(changed_arguments_end_the_replay_with_divergence_at_that_seq) {
  char logged[65], now[65], want[400];
  char *env = replay_changed("tools.t.echo{n = 1} local ok = pcall(tools.t.echo, {n = 3}) "
                             "return 'caught'", logged);
  sha256_hex("{\"n\":3}", now);
  CHECK_FIELD(env, "ok", "false");
  CHECK_FIELD(env, "error.code", "replay.divergence");  /* pcall cannot catch it */
  snprintf(want, sizeof want, "the replay diverged from its log at call 2: the log has "
           "tools.t.echo with arguments hash %s, and the script called tools.t.echo with "
           "other arguments: hash %s", logged, now);
  CHECK_HAS(env, want);
  CHECK_HAS(env, "The script or its inputs changed since the run was logged");
  CHECK_HAS(env, "\"hint\":");
  free(env);
}

TEST(a_changed_tool_ends_the_replay_with_divergence_naming_both_tools) {
  char logged[65], now[65], want[400];
  char *env = replay_changed("tools.t.echo{n = 1} tools.t.other{n = 2} return 'x'", logged);
  sha256_hex("{\"n\":2}", now);
  CHECK_FIELD(env, "error.code", "replay.divergence");
  snprintf(want, sizeof want, "at call 2: the log has tools.t.echo with arguments hash %s, "
           "and the script called tools.t.other with arguments hash %s", logged, now);
  CHECK_HAS(env, want);
  CHECK_FIELD(env, "error.line", "1");
  free(env);
}

TEST(a_log_cut_short_answers_what_it_has_and_the_rest_calls_the_tools) {
  tp_engine *e = engine_with_tools(0);
  logbuf log = { 0 };
  const char *src = "local a = tools.t.echo{n = 1} local b = tools.t.echo{n = 2} "
                    "local c = tools.t.echo{n = 3} return a.n + b.n + c.n";
  echo_calls = 0;
  char *env = run(e, src, 0, &log, NULL, 0);
  CHECK_FIELD(env, "result", "6");
  CHECK_INT(echo_calls, 3);
  /* the log up to call 1's end, and call 2's start (held, say, for an approval) */
  size_t cut = cut_after(&log, "\"phase\":0,\"seq\":2");
  CHECK(cut > 0);
  echo_calls = 0;
  logbuf told = { 0 };
  char *env2 = run(e, src, 0, &told, log.text, cut);
  CHECK_FIELD(env2, "result", "6");
  CHECK_INT(echo_calls, 2);  /* calls 2 and 3 */
  /* told only what the log did not have: call 2's end, call 3 */
  CHECK_INT(told.entries, 3);
  char *l0 = log_line(&told, 0);
  CHECK_FIELD(l0, "seq", "2");
  CHECK_FIELD(l0, "phase", "1");
  free(l0);
  /* a log kept without its seed entry: the replay tells the seed it drew */
  char *seedless = strchr(log.text, '\n') + 1;
  logbuf told2 = { 0 };
  char *env3 = run(e, src, 0, &told2, seedless, cut - (size_t)(seedless - log.text));
  CHECK_FIELD(env3, "result", "6");
  CHECK_INT(told2.entries, 4);
  CHECK_HAS(told2.text, "\"type\":\"seed\"}\n{");
  free(env3); free(told2.text);
  free(env); free(env2); free(log.text); free(told.text);
  tp_engine_destroy(e);
}

TEST(a_result_over_1_mib_fails_its_call_with_advice_when_the_run_is_logged) {
  tp_engine *e = engine_with_tools(0);
  size_t n = (1u << 20) + 10;
  big_text = malloc(n + 3);
  big_text[0] = '"';
  memset(big_text + 1, 'a', n);
  big_text[n + 1] = '"';
  big_text[n + 2] = '\0';
  const char *src = "local ok, err = pcall(tools.t.big, {}) return ok and #err or err.code .. "
                    "': ' .. err.message";
  logbuf log = { 0 };
  char *env = run(e, src, 0, &log, NULL, 0);
  CHECK_HAS(env, "tool.failed: tools.t.big returned 1048588 bytes of JSON: a run whose "
                 "calls are logged keeps each result whole in its log, at most 1048576 bytes");
  CHECK_HAS(env, "pass its path instead of the data");
  CHECK(log.len < 4096);  /* nothing of it was logged, nor cut */
  CHECK_HAS(log.text, "\"error\":{\"code\":\"tool.failed\"");
  char *env2 = run(e, src, 0, NULL, NULL, 0);  /* not logged: it goes through */
  CHECK_FIELD(env2, "result", "1048586");
  free(env); free(env2); free(log.text); free(big_text);
  tp_engine_destroy(e);
}

TEST(a_log_callback_that_fails_a_start_entry_keeps_the_call_from_being_made) {
  tp_engine *e = engine_with_tools(0);
  logbuf log = { 0 };
  log.fail_phase0 = 1;
  echo_calls = 0;
  char *env = run(e, "local ok, err = pcall(tools.t.echo, {n = 1}) return err.code", 0, &log,
                  NULL, 0);
  CHECK_FIELD(env, "result", "tool.failed");
  CHECK_HAS(env, "the run's call log could not be written");
  CHECK_INT(echo_calls, 0);
  free(env); free(log.text);
  tp_engine_destroy(e);
}

/* Removes the timings ("ms", "cpu_ms", "wall_ms" and their values) from an envelope. */
static void strip_timings (char *s) {
  static const char *keys[] = { "\"ms\":", "\"cpu_ms\":", "\"wall_ms\":" };
  for (size_t k = 0; k < 3; k++)
    for (char *p = strstr(s, keys[k]); p; p = strstr(p, keys[k])) {
      char *v = p + strlen(keys[k]);
      size_t n = strspn(v, "0123456789.e-");
      memmove(v, v + n, strlen(v + n) + 1);
      p = v;
    }
}

TEST(two_seeded_runs_with_a_fixed_clock_give_the_same_envelope_byte_for_byte) {
  tp_engine *e = engine_with_tools(0);
  const char *src = "local t = {} for i = 1, 5 do t[i] = math.random(1 << 40) end\n"
                    "math.randomseed() t[6] = math.random(100)\n"
                    "local k = {} for name in pairs({alpha = 1, beta = 2, gamma = 3, delta = 4,"
                    " epsilon = 5, zeta = 6}) do k[#k + 1] = name end\n"
                    "print(os.date('!%H:%M:%S'), os.clock())\n"
                    "return {r = t, now = os.time(), k = table.concat(k, ','),"
                    " c = tools.t.echo{n = t[1]}.n == t[1]}";
  char *a = run(e, src, 1, NULL, NULL, 0), *b = run(e, src, 1, NULL, NULL, 0);
  CHECK_FIELD(a, "ok", "true");
  CHECK_HAS(a, "\"logs\":[\"22:13:20\\t0.25\"]");
  CHECK_FIELD(a, "result.now", "1700000000");  /* the third read: 0.5 s after the epoch */
  char *ra = field(a, "result.r");
  strip_timings(a);
  strip_timings(b);
  CHECK_STR(a, b);
  /* another seed draws other numbers */
  tp_run *r = tp_run_create(e, src, strlen(src), NULL);
  CHECK_INT(tp_run_set_seed(r, 8), TP_OK);
  CHECK_INT(tp_run_set_fixed_clock(r, 1700000000, 250000), TP_OK);
  drive(r);
  char *c = field(tp_run_envelope(r), "result.r");
  CHECK(c && ra && strcmp(c, ra) != 0);
  free(c); free(ra);
  tp_run_destroy(r);
  free(a); free(b);
  tp_engine_destroy(e);
}

static double game_clock (tp_run *r, int which, void *ud) {
  (void)r;
  int *reads = ud;
  (*reads)++;
  return which == TP_CLOCK_TIME ? 86400.75 : 0.125;
}

TEST(a_caller_clock_answers_os_time_os_clock_and_os_date) {
  tp_engine *e = engine_with_tools(0);
  const char *src = "return {os.time(), os.clock(), os.date('!%Y-%m-%d %H:%M'), "
                    "os.time({year = 2000, month = 1, day = 1, hour = 12})}";
  tp_run *r = tp_run_create(e, src, strlen(src), NULL);
  int reads = 0;
  CHECK_INT(tp_run_set_clock(r, game_clock, &reads), TP_OK);
  drive(r);
  char *res = field(tp_run_envelope(r), "result");
  CHECK(res != NULL && strncmp(res, "[86400,0.125,\"1970-01-02 00:00\",", 32) == 0);
  CHECK_INT(reads, 3);  /* os.time with a table reads no clock */
  free(res);
  tp_run_destroy(r);
  tp_engine_destroy(e);
}

TEST(the_setters_refuse_null_a_started_run_and_a_bad_log) {
  tp_engine *e = engine_with_tools(0);
  CHECK_INT(tp_run_set_seed(NULL, 1), TP_EINVAL);
  CHECK_INT(tp_run_set_fixed_clock(NULL, 0, 0), TP_EINVAL);
  CHECK_INT(tp_run_on_log(NULL, on_log, NULL), TP_EINVAL);
  CHECK_INT(tp_run_replay(NULL, "[]", 2, NULL, 0), TP_EINVAL);
  tp_run *r = tp_run_create(e, "return 1", 8, NULL);
  CHECK_INT(tp_run_set_clock(r, NULL, NULL), TP_EINVAL);
  char err[200];
  const char *bad = "{\"type\":\"call\",\"seq\":1,\"phase\":1,\"ok\":true}";
  CHECK_INT(tp_run_replay(r, bad, strlen(bad), err, sizeof err), TP_EINVAL);
  CHECK_STR(err, "entry 1: call 1 ends before it starts (no phase 0 entry before it)");
  CHECK_INT(tp_run_replay(r, "{\"type\":\"call\"\n", 15, err, sizeof err), TP_EINVAL);
  CHECK_HAS(err, "line 1 of the log is not a JSON entry");
  CHECK_INT(tp_run_replay(r, "[{\"type\":\"nap\"}]", 16, err, sizeof err), TP_EINVAL);
  CHECK_STR(err, "entry 1: unknown type \"nap\"");
  CHECK_INT(tp_run_step(r, 0, 0), TP_DONE);
  CHECK_FIELD(tp_run_envelope(r), "result", "1");  /* the bad logs left it as it was */
  CHECK_INT(tp_run_set_seed(r, 1), TP_ESTATE);
  CHECK_INT(tp_run_replay(r, "[]", 2, err, sizeof err), TP_ESTATE);
  tp_run_destroy(r);
  tp_engine_destroy(e);
}

TEST(a_clock_read_of_the_other_kind_is_a_divergence) {
  tp_engine *e = engine_with_tools(0);
  logbuf log = { 0 };
  char *env = run(e, "return os.time()", 1, &log, NULL, 0);
  CHECK_FIELD(env, "result", "1700000000");
  char *env2 = run(e, "return os.clock()", 0, NULL, log.text, log.len);
  CHECK_FIELD(env2, "error.code", "replay.divergence");
  CHECK_HAS(env2, "at clock read 1: the log has a read of os.time, and the script read "
                  "os.clock");
  free(env); free(env2); free(log.text);
  tp_engine_destroy(e);
}

TEST(a_session_reads_the_clock_once_a_read_over_several_deterministic_runs) {
  tp_engine *e = engine_with_tools(0);
  tp_session *s = tp_session_create(e, NULL);
  for (int i = 0; i < 3; i++) {
    const char *src = "return {os.time(), os.clock(), math.random(1000)}";
    tp_run *r = tp_session_run(s, src, strlen(src));
    logbuf log = { 0 };
    CHECK_INT(tp_run_set_seed(r, 3), TP_OK);
    CHECK_INT(tp_run_on_log(r, on_log, &log), TP_OK);
    drive(r);
    CHECK_INT(log.entries, 3);  /* the seed, two clock reads */
    char *res = field(tp_run_envelope(r), "result.2");
    CHECK(res == NULL);  /* an array: compare the whole */
    free(res);
    res = field(tp_run_envelope(r), "result");
    static char first[200];
    if (i == 0) snprintf(first, sizeof first, "%s", res ? res : "");
    else {
      char *a = strchr(first, ','), *b = res ? strchr(res, ',') : NULL;
      CHECK(a && b && strcmp(strrchr(a, ','), strrchr(b, ',')) == 0);  /* same random */
    }
    free(res);
    free(log.text);
    tp_run_destroy(r);
  }
  const char *sys = "return os.time() > 1700000000";  /* none of it: the system's clock */
  tp_run *r = tp_session_run(s, sys, strlen(sys));
  drive(r);
  CHECK_FIELD(tp_run_envelope(r), "result", "true");
  tp_run_destroy(r);
  tp_session_destroy(s);
  tp_engine_destroy(e);
}

TEST(a_run_without_any_of_it_logs_nothing_and_reads_the_system_clock) {
  tp_engine *e = engine_with_tools(0);
  char *env = run(e, "return os.time() > 1700000000 and os.clock() >= 0", 0, NULL, NULL, 0);
  CHECK_FIELD(env, "result", "true");
  free(env);
  tp_engine_destroy(e);
}

int main (int argc, char **argv) {
  tp_test_args(argc, argv);
  RUN(a_recorded_run_replays_to_the_same_result_without_calling_a_tool);
  RUN(a_replay_driven_by_the_engines_loop_gives_the_same_result);
  RUN(the_args_hash_is_of_the_canonical_json_sorted_keys_no_spaces_exact_integers);
  RUN(the_policy_decision_and_the_call_log_carry_the_same_args_hash);
  RUN(changed_arguments_end_the_replay_with_divergence_at_that_seq);
  RUN(a_changed_tool_ends_the_replay_with_divergence_naming_both_tools);
  RUN(a_log_cut_short_answers_what_it_has_and_the_rest_calls_the_tools);
  RUN(a_result_over_1_mib_fails_its_call_with_advice_when_the_run_is_logged);
  RUN(a_log_callback_that_fails_a_start_entry_keeps_the_call_from_being_made);
  RUN(two_seeded_runs_with_a_fixed_clock_give_the_same_envelope_byte_for_byte);
  RUN(a_caller_clock_answers_os_time_os_clock_and_os_date);
  RUN(the_setters_refuse_null_a_started_run_and_a_bad_log);
  RUN(a_clock_read_of_the_other_kind_is_a_divergence);
  RUN(a_session_reads_the_clock_once_a_read_over_several_deterministic_runs);
  RUN(a_run_without_any_of_it_logs_nothing_and_reads_the_system_clock);
  return tp_test_end();
}
