/*
** test_metrics.c: the engine's metrics (tp_engine_metrics_on, tp_metrics_text): runs by
** outcome, limits hit, tool calls by tool and outcome, policy decisions, the duration
** histograms, summed over two engines as the MCP server's workers are; the text passes
** `promtool check metrics` (Debian's prometheus package, scripts/deps.sh); and counting
** nothing on an engine that did not turn metrics on.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tidepool_server.h"
#include "tp_test.h"

static void echo (tp_call *c, void *ud) {
  (void)ud;
  tp_call_complete(c, "{\"ok\":true}", 11);
}

static void fail (tp_call *c, void *ud) {
  (void)ud;
  tp_call_fail(c, "tool.failed", "it failed");
}

static tp_engine *engine (int metrics) {
  tp_engine *e = tp_engine_create();
  tp_tool_def ok = { .name = "t.echo", .description = "answers",
                     .input_schema = "{\"type\":\"object\"}", .handler = echo };
  tp_tool_def bad = { .name = "t.fail", .description = "fails",
                      .input_schema = "{\"type\":\"object\"}", .handler = fail };
  const char *cfg = "{\"policy\":{\"rules\":[{\"tools\":\"t.echo\",\"effect\":\"allow\"},"
                    "{\"tools\":\"t.fail\",\"effect\":\"allow\"}],\"default\":\"deny\"}}";
  if (e == NULL || tp_engine_add_tool(e, &ok) != TP_OK || tp_engine_add_tool(e, &bad) != TP_OK ||
      tp_engine_configure(e, cfg, strlen(cfg)) != TP_OK ||
      (metrics && tp_engine_metrics_on(e) != TP_OK)) {
    fprintf(stderr, "test_metrics: setup failed\n");
    exit(1);
  }
  return e;
}

static void run (tp_engine *e, const char *src, const tp_limits *lim) {
  char *env = NULL;
  int ok = 0;
  tp_engine_run(e, src, strlen(src), lim, &env, &ok);
  tp_free(env);
}

TEST(counts_are_summed_over_engines_and_read_as_prometheus_text) {
  tp_engine *a = engine(1), *b = engine(1);
  tp_limits lim;
  tp_limits_init(&lim);
  run(a, "tools.t.echo{} tools.t.echo{} return 1", &lim);
  run(b, "tools.t.echo{} pcall(tools.t.fail, {}) pcall(tools.kv.nope, {}) return 1", &lim);
  run(b, "error('boom')", &lim);
  lim.tool_calls = 1;
  run(a, "tools.t.echo{} tools.t.echo{}", &lim);  /* limit.tool_calls */
  tp_engine *es[] = { a, b };
  size_t len = 0;
  char *text = tp_metrics_text(es, 2, &len);
  CHECK(text != NULL);
  CHECK_INT(len, strlen(text));
  CHECK_HAS(text, "tidepool_runs_total{outcome=\"ok\"} 2\n");
  CHECK_HAS(text, "tidepool_runs_total{outcome=\"runtime\"} 1\n");
  CHECK_HAS(text, "tidepool_runs_total{outcome=\"limit.tool_calls\"} 1\n");
  CHECK_HAS(text, "tidepool_limits_hit_total{limit=\"tool_calls\"} 1\n");
  CHECK_HAS(text, "tidepool_limits_hit_total{limit=\"memory\"} 0\n");
  CHECK_HAS(text, "tidepool_tool_calls_total{tool=\"t.echo\",outcome=\"ok\"} 4\n");
  CHECK_HAS(text, "tidepool_tool_calls_total{tool=\"t.fail\",outcome=\"tool.failed\"} 1\n");
  CHECK_HAS(text, "tidepool_tool_calls_total{tool=\"kv.nope\",outcome=\"tool.unknown\"} 1\n");
  CHECK_HAS(text, "tidepool_tool_calls_total{tool=\"t.echo\",outcome=\"limit.tool_calls\"} 1\n");
  CHECK_HAS(text, "tidepool_policy_decisions_total{effect=\"allow\"} 5\n");
  CHECK_HAS(text, "tidepool_runs_in_flight 0\n");
  CHECK_HAS(text, "tidepool_run_duration_seconds_count 4\n");
  CHECK_HAS(text, "tidepool_run_duration_seconds_bucket{le=\"+Inf\"} 4\n");
  CHECK_HAS(text, "tidepool_tool_call_duration_seconds_count 7\n");
  CHECK_HAS(text, "tidepool_spans_dropped_total 0\n");

  /* promtool, as Prometheus's own checker reads it */
  char path[64];
  snprintf(path, sizeof path, "/tmp/tp_test_metrics_%ld.prom", (long)getpid());
  FILE *f = fopen(path, "w");
  CHECK(f != NULL);
  if (f) { fputs(text, f); fclose(f); }
  char cmd[200];
  snprintf(cmd, sizeof cmd, "promtool check metrics < %s > %s.out 2>&1", path, path);
  int st = system(cmd);
  if (st != 0) {
    char out[4096] = "";
    snprintf(cmd, sizeof cmd, "%s.out", path);
    FILE *o = fopen(cmd, "r");
    if (o) { out[fread(out, 1, sizeof out - 1, o)] = '\0'; fclose(o); }
    TP_FAIL_AT("promtool check metrics failed (status %d; is Debian's prometheus "
               "installed? scripts/deps.sh installs it): %s", st, out);
  }
  unlink(path);
  snprintf(cmd, sizeof cmd, "%s.out", path);
  unlink(cmd);
  tp_free(text);
  tp_engine_destroy(a);
  tp_engine_destroy(b);
}

TEST(an_engine_without_metrics_counts_nothing) {
  tp_engine *a = engine(0);
  tp_limits lim;
  tp_limits_init(&lim);
  run(a, "tools.t.echo{} return 1", &lim);
  tp_engine *es[] = { a };
  char *text = tp_metrics_text(es, 1, NULL);
  CHECK(text != NULL);
  CHECK_HAS(text, "tidepool_runs_total{outcome=\"ok\"} 0\n");
  CHECK(strstr(text, "tidepool_tool_calls_total{") == NULL);
  tp_free(text);
  tp_engine_destroy(a);
}

TEST(a_tool_name_with_quotes_is_escaped_in_its_label) {
  tp_engine *a = engine(1);
  tp_limits lim;
  tp_limits_init(&lim);
  run(a, "pcall(tools['we\"ird'], {}) return 1", &lim);
  tp_engine *es[] = { a };
  char *text = tp_metrics_text(es, 1, NULL);
  CHECK_HAS(text, "tidepool_tool_calls_total{tool=\"we\\\"ird\",outcome=\"tool.unknown\"} 1\n");
  tp_free(text);
  tp_engine_destroy(a);
}

static void stored (void *ud, int status, const char *val, size_t len, const char *err) {
  (void)val; (void)len; (void)err;
  int *st = ud;
  *st = status;
}

/* Every operation on the state store is timed (tidepool_store_duration_seconds); a
** "not found" is an answer, not an error (tidepool_store_errors_total counts the failures
** of a backend: test_store_redis kills its Redis under an engine for that). */
TEST(state_store_operations_are_timed_and_their_errors_counted) {
  tp_engine *e = engine(1);
  int st = -1;
  CHECK_INT(tp_engine_run_put(e, "r1", "{}", 2, 0, stored, &st), TP_OK);
  while (st == -1 && tp_engine_poll(e, 1) >= 0) {}
  CHECK_INT(st, TP_STORED_OK);
  st = -1;
  CHECK_INT(tp_engine_run_get(e, "r-none", stored, &st), TP_OK);
  while (st == -1 && tp_engine_poll(e, 1) >= 0) {}
  CHECK_INT(st, TP_STORED_NOTFOUND);  /* an answer, not an error */
  tp_engine *es[] = { e };
  char *text = tp_metrics_text(es, 1, NULL);
  CHECK(text != NULL);
  CHECK_HAS(text, "# TYPE tidepool_store_duration_seconds histogram\n");
  CHECK_HAS(text, "tidepool_store_duration_seconds_count 2\n");
  CHECK_HAS(text, "tidepool_store_errors_total{op=\"run_put\"} 0\n");
  CHECK_HAS(text, "tidepool_store_errors_total{op=\"run_get\"} 0\n");
  tp_free(text);
  tp_engine_destroy(e);
}

int main (int argc, char **argv) {
  tp_test_args(argc, argv);
  RUN(counts_are_summed_over_engines_and_read_as_prometheus_text);
  RUN(an_engine_without_metrics_counts_nothing);
  RUN(a_tool_name_with_quotes_is_escaped_in_its_label);
  RUN(state_store_operations_are_timed_and_their_errors_counted);
  return tp_test_end();
}
