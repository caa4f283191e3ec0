/*
** bench_tools.c: the tool-call figures of `make bench` (issue 3), "name: value unit".
**
**   tool_call_us         one call of a trivial C tool with a three-field input schema,
**                        in process: (a run making N calls - the same run making none) / N
**   lua_tool_call_us     the same for a Lua plugin tool (bench/plugins/echo.lua) with the
**                        same schema: its handler returns {ok = true} at once
**   ten_calls_run_us     a fresh run making ten such calls, run create to destroy
**   parallel_10x50ms_ms  ten parallel calls of time.sleep{ms = 50} (a Lua plugin tool that
**                        waits on a luv timer), the whole run
**   kv_set_us            one tools.kv.set{key, value} (a small table) on an engine with the
**                        memory store, and kv_set_sqlite_us the same with --state's SQLite
**                        store (a commit each, WAL, synchronous=NORMAL): (a run of N sets -
**                        the same loop without calls) / N, the two side by side
**   trace_call_us        what tracing adds to a call of that C tool: (a run of 1000 calls on
**                        an engine writing spans to a trace file (/dev/null) - the same
**                        run on an engine without tracing) / 1000. The spans are encoded
**                        and written on the engine's loop after the run (a batch of 512
**                        leaves at once, so some of it falls inside the run and counts);
**                        trace_export_span_us is that encoding and writing, per span,
**                        timed on its own (the loop turns that drain the queue)
**   policy_call_us       what a config policy of 50 rules with conditions adds to a call of
**                        that C tool (policy_config below: 6 rules match it, one with a rate
**                        bucket), with a decision callback (an audit log: every decision,
**                        with its arguments' hash): (the run of N calls on an engine with
**                        the policy - the same run on an engine without) / N
**
** Medians. The runs of tool_call_us and lua_tool_call_us alternate in one loop so noise
** falls on all.
** usage: bench_tools TOOLS_DIR [scale [PLUGINS_DIR]]   (PLUGINS_DIR: bench/plugins)
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tidepool.h"
#include "bench.h"

#define CALLS 20000

static void echo (tp_call *c, void *ud) {
  (void)ud;
  tp_call_complete(c, "{\"ok\":true}", 11);
}

static const char schema[] =
  "{\"type\":\"object\",\"required\":[\"id\",\"name\"],\"additionalProperties\":false,"
  "\"properties\":{\"id\":{\"type\":\"integer\",\"minimum\":0},"
  "\"name\":{\"type\":\"string\",\"minLength\":1},\"flag\":{\"type\":\"boolean\"}}}";

/* 50 rules: 44 for other tools (never evaluated for bench.echo: each tool keeps the list
** of the rules whose glob matches it), 6 that match bench.echo and are evaluated on
** every call. */
static char *policy_config (void) {
  size_t cap = 64 * 1024, n = 0;
  char *b = malloc(cap);
  if (b == NULL) return NULL;
  n += (size_t)snprintf(b + n, cap - n, "{\"policy\":{\"default\":\"deny\",\"rules\":[");
  for (int i = 0; i < 44; i++)
    n += (size_t)snprintf(b + n, cap - n, "{\"tools\":\"svc%d.**\",\"effect\":\"%s\","
                          "\"where\":\"amount <= %d and currency in {'EUR', 'USD'} and not "
                          "draft\",\"max_calls\":100},", i, i % 3 ? "allow" : "deny", i * 100);
  n += (size_t)snprintf(b + n, cap - n,
    "{\"tools\":\"bench.*\",\"effect\":\"allow\",\"where\":\"id >= 0 and "
    "name:starts_with('x') and #name <= 64\"},"
    "{\"tools\":\"bench.echo\",\"effect\":\"deny\",\"where\":\"flag == false and "
    "id > 1000000000\"},"
    "{\"tools\":\"**\",\"effect\":\"allow\",\"where\":\"not exists(admin) or admin "
    "== false\"},"
    "{\"tools\":\"bench.**\",\"effect\":\"ask\",\"where\":\"name in {'danger', "
    "'rm', 'drop'}\"},"
    "{\"tools\":\"bench.echo\",\"effect\":\"allow\",\"where\":\"id ~= -1 or name "
    "ends_with 'z'\"},"
    "{\"tools\":\"bench.echo\",\"effect\":\"allow\",\"rate\":{\"capacity\":1e9,"
    "\"per_second\":1e9,\"key\":\"global\"}}]}}");
  return b;
}

/* The audit log of the policy engine: what an audit log does with a decision (its
** fields, the arguments' hash among them, read), without the writing. */
static size_t audited;
static void audit (tp_run *r, const tp_decision *d, void *ud) {
  (void)r;
  *(size_t *)ud += strlen(d->args_sha256) + strlen(d->effect) + (size_t)d->seq;
}

/* Runs src to completion; returns wall microseconds, or -1 when the script failed. */
static tp_limits lim;

static double timed_run (tp_engine *e, const char *src) {
  return bench_timed_run("bench_tools", e, src, &lim);
}

/* kv_set_us and kv_set_sqlite_us. */
static int kv_set_figures (const char *tools_dir, int scale) {
  char dir[] = "/tmp/tp_bench_state_XXXXXX", err[512] = "";
  if (mkdtemp(dir) == NULL) { perror("bench_tools: mkdtemp"); return 1; }
  tp_store *mem = tp_store_create(), *sql = tp_store_open(dir, err, sizeof err);
  tp_engine *em = tp_engine_create(), *es = tp_engine_create();
  if (mem == NULL || sql == NULL || em == NULL || es == NULL ||
      tp_engine_set_store(em, mem) != TP_OK || tp_engine_set_store(es, sql) != TP_OK ||
      tp_engine_load_tools(em, tools_dir) < 1 || tp_engine_load_tools(es, tools_dir) < 1) {
    fprintf(stderr, "bench_tools: cannot set up the kv engines: %s\n", err);
    return 1;
  }
  enum { SETS = 2000, REPS = 9 };
  char with[300], without[300];
  snprintf(with, sizeof with, "local f = tools.kv.set for i = 1, %d do "
           "f{key = 'k' .. (i %% 100), value = {n = i, s = 'x'}} end", SETS);
  snprintf(without, sizeof without, "local f = function() end for i = 1, %d do "
           "f{key = 'k' .. (i %% 100), value = {n = i, s = 'x'}} end", SETS);
  double pm[REPS * 4], ps[REPS * 4];
  int reps = REPS * scale > REPS * 4 ? REPS * 4 : REPS * scale;
  for (int i = 0; i < reps; i++) {
    double m = timed_run(em, with), q = timed_run(es, with), b = timed_run(em, without);
    if (m < 0 || q < 0 || b < 0) return 1;
    pm[i] = (m - b) / SETS;
    ps[i] = (q - b) / SETS;
  }
  printf("kv_set_us: %.3f us\n", median(pm, reps));
  printf("kv_set_sqlite_us: %.3f us\n", median(ps, reps));
  tp_engine_destroy(em);
  tp_engine_destroy(es);
  tp_store_destroy(mem);
  tp_store_destroy(sql);
  char cmd[200];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  return system(cmd) == 0 ? 0 : 1;
}

int main (int argc, char **argv) {
  const char *tools_dir = argc > 1 ? argv[1] : "tools";
  int scale = argc > 2 ? atoi(argv[2]) : 1;
  if (scale < 1) scale = 1;
  tp_limits_init(&lim);
  lim.tool_calls = 0;  /* the loop of tool_call_us makes CALLS calls */
  tp_engine *e = tp_engine_create();
  tp_tool_def def = { .name = "bench.echo", .description = "Answers at once.",
                      .input_schema = schema, .handler = echo };
  if (e == NULL || tp_engine_add_tool(e, &def) != TP_OK) {
    fprintf(stderr, "bench_tools: cannot register the tool: %s\n", tp_engine_error(e));
    return 1;
  }
  if (tp_engine_load_tools(e, tools_dir) < 0) {
    fprintf(stderr, "bench_tools: cannot load %s: %s\n", tools_dir, tp_engine_error(e));
    return 1;
  }
  const char *plugins_dir = argc > 3 ? argv[3] : "bench/plugins";
  if (tp_engine_load_tools(e, plugins_dir) < 1) {
    fprintf(stderr, "bench_tools: cannot load %s: %s\n", plugins_dir, tp_engine_error(e));
    return 1;
  }

  char with[256], with_lua[256], without[256];
  snprintf(with, sizeof with, "local f = tools.bench.echo for i = 1, %d do "
           "f{id = i, name = \"x\", flag = true} end", CALLS);
  snprintf(with_lua, sizeof with_lua, "local f = tools.bench.lua_echo for i = 1, %d do "
           "f{id = i, name = \"x\", flag = true} end", CALLS);
  snprintf(without, sizeof without, "local f = function() end for i = 1, %d do "
           "f{id = i, name = \"x\", flag = true} end", CALLS);
  enum { REPS = 15 };
  double per[REPS * 4], per_lua[REPS * 4];
  int reps = REPS * scale > REPS * 4 ? REPS * 4 : REPS * scale;
  for (int i = 0; i < reps; i++) {
    double a = timed_run(e, with), l = timed_run(e, with_lua), b = timed_run(e, without);
    if (a < 0 || l < 0 || b < 0) return 1;
    per[i] = (a - b) / CALLS;
    per_lua[i] = (l - b) / CALLS;
  }
  printf("tool_call_us: %.3f us\n", median(per, reps));
  printf("lua_tool_call_us: %.3f us\n", median(per_lua, reps));

  /* the same C tool on an engine with the policy, side by side with the one without */
  tp_engine *pe = tp_engine_create();
  char *config = policy_config();
  if (pe == NULL || config == NULL || tp_engine_add_tool(pe, &def) != TP_OK ||
      tp_engine_configure(pe, config, strlen(config)) != TP_OK ||
      tp_engine_on_decision(pe, audit, &audited) != TP_OK ||
      tp_engine_load_tools(pe, tools_dir) < 0 ||       /* the same tools as e: the same */
      tp_engine_load_tools(pe, plugins_dir) < 1) {     /* lookups by name */
    fprintf(stderr, "bench_tools: cannot set up the policy engine: %s\n", tp_engine_error(pe));
    return 1;
  }
  free(config);
  double per_pol[REPS * 4];
  for (int i = 0; i < reps; i++) {
    double a = timed_run(e, with), p = timed_run(pe, with);
    if (a < 0 || p < 0) return 1;
    per_pol[i] = (p - a) / CALLS;
  }
  printf("policy_call_us: %.3f us\n", median(per_pol, reps));
  tp_engine_destroy(pe);

  /* tracing on (spans to /dev/null) against off, side by side */
  tp_engine *te = tp_engine_create();
  if (te == NULL || tp_engine_add_tool(te, &def) != TP_OK ||
      tp_engine_load_tools(te, tools_dir) < 0 || tp_engine_load_tools(te, plugins_dir) < 1 ||
      tp_engine_trace_file(te, "/dev/null") != TP_OK) {
    fprintf(stderr, "bench_tools: cannot set up the tracing engine: %s\n", tp_engine_error(te));
    return 1;
  }
  enum { TCALLS = 1000 };
  char with_t[256];
  snprintf(with_t, sizeof with_t, "local f = tools.bench.echo for i = 1, %d do "
           "f{id = i, name = \"x\", flag = true} end", TCALLS);
  double per_tr[REPS * 4], per_exp[REPS * 4];
  for (int i = 0; i < reps; i++) {
    double a = timed_run(e, with_t), t = timed_run(te, with_t);
    if (a < 0 || t < 0) return 1;
    per_tr[i] = (t - a) / TCALLS;
    double t0 = bench_now_us();   /* the rest of the batch: encoded and written */
    uint64_t spans = tp_engine_spans_exported(te);
    while (tp_engine_spans_exported(te) - spans < 1 && bench_now_us() - t0 < 2e6)
      tp_engine_poll(te, 1);
    per_exp[i] = (bench_now_us() - t0) / (double)(tp_engine_spans_exported(te) - spans);
  }
  printf("trace_call_us: %.3f us\n", median(per_tr, reps));
  printf("trace_export_span_us: %.3f us\n", median(per_exp, reps));
  if (tp_engine_spans_dropped(te) != 0) {
    fprintf(stderr, "bench_tools: %llu spans dropped\n",
            (unsigned long long)tp_engine_spans_dropped(te));
    return 1;
  }
  tp_engine_destroy(te);

  const char ten[] = "for i = 1, 10 do tools.bench.echo{id = i, name = \"x\", flag = true} end";
  enum { TEN = 2001 };
  static double t10[TEN];
  for (int i = 0; i < TEN; i++)
    if ((t10[i] = timed_run(e, ten)) < 0) return 1;
  printf("ten_calls_run_us: %.2f us\n", median(t10, TEN));

  const char par[] =
    "local f = {} for i = 1, 10 do f[i] = function() return tools.time.sleep{ms = 50} end end\n"
    "return parallel(table.unpack(f))";
  enum { PAR = 7 };
  double tp[PAR];
  for (int i = 0; i < PAR; i++) {
    if ((tp[i] = timed_run(e, par)) < 0) return 1;
    tp[i] /= 1000;
  }
  printf("parallel_10x50ms_ms: %.2f ms\n", median(tp, PAR));
  tp_engine_destroy(e);
  return kv_set_figures(tools_dir, scale);
}
