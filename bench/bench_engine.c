/*
** bench_engine.c: the in-process figures of `make bench`, printed as "name: value unit".
**
**   cold_run_us                a trivial script through the C API, run create to destroy
**                              (create, step, read the envelope, destroy), one engine
**   bare_state_us              luaL_newstate + luaL_openlibs + load + pcall + lua_close on
**                              the same Lua build, for comparison
**   cold_over_bare             cold_run_us / bare_state_us, the median of the per-pair
**                              ratios (target <= 0.25)
**   warm_run_us                a trivial script in an existing session, source text to
**                              envelope (tp_session_run, step, envelope, destroy the run)
**   session_kib                what a fresh session's sandbox holds: Lua-accounted memory
**                              (tp_session_memory), and the process's RSS growth per
**                              session over 2000 sessions (session_rss_kib)
**   cpu_overhead_time          fib(27) in the sandbox under the default cpu/wall limits, as
**                              a ratio to the same script in a bare state of the same Lua
**   cpu_overhead_instructions  the same with an instruction limit of 1e9
**   precheck_us                the pre-run check (engine/core/precheck.c) of a 50-line
**                              script that calls tools, on its compiled chunk; part of
**                              every run's compile, so it must stay well under cold_run_us
**
** Every figure is a median. Two figures that are compared are measured alternately in
** one loop (a, b, a, b, ...), so that machine noise falls on both alike; a ratio is the
** median of the per-pair ratios. usage: bench_engine [scale], scale 1 by default (the
** repetition counts are multiplied by it).
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lauxlib.h"
#include "lualib.h"

#include "tidepool.h"
#include "precheck.h"
#include "bench.h"

static const char trivial[] = "return 1";
static const char fib[] =
  "local function fib(n) if n < 2 then return n end return fib(n-1) + fib(n-2) end\n"
  "return fib(27)\n";

/* The process's resident set in KiB (/proc/self/statm), or 0. */
static long bench_rss_kib (void) {
  FILE *f = fopen("/proc/self/statm", "r");
  long pages = 0, rss = 0;
  if (f == NULL) return 0;
  if (fscanf(f, "%ld %ld", &pages, &rss) != 2) rss = 0;
  fclose(f);
  return rss * 4;
}
/* 50 lines a model would write: tool calls, loops, string work, a local function. */
static const char fifty[] =
  "local owner, repo = \"acme\", \"widgets\"\n"
  "local function label_of(issue)\n"
  "  local title = string.lower(issue.title or \"\")\n"
  "  if title:find(\"crash\", 1, true) then return \"bug\" end\n"
  "  if title:find(\"add\", 1, true) then return \"feature\" end\n"
  "  return \"triage\"\n"
  "end\n"
  "local function summarize(list)\n"
  "  local counts = {}\n"
  "  for _, item in ipairs(list) do\n"
  "    local l = label_of(item)\n"
  "    counts[l] = (counts[l] or 0) + 1\n"
  "  end\n"
  "  return counts\n"
  "end\n"
  "local seen = tools.kv.get{key = owner .. \"/\" .. repo}\n"
  "local issues = {}\n"
  "for i = 1, 20 do\n"
  "  issues[#issues + 1] = { title = string.format(\"issue %d: add thing\", i), n = i }\n"
  "end\n"
  "local counts = summarize(issues)\n"
  "local lines = {}\n"
  "for k, v in pairs(counts) do\n"
  "  lines[#lines + 1] = string.format(\"%s=%d\", k, v)\n"
  "end\n"
  "table.sort(lines)\n"
  "local text = table.concat(lines, \", \")\n"
  "tools.kv.set{key = \"summary\", value = text}\n"
  "local total = 0\n"
  "for _, it in ipairs(issues) do total = total + it.n end\n"
  "local avg = total / #issues\n"
  "local ok, err = pcall(tools.kv.get, {key = \"missing\"})\n"
  "if not ok then print(\"lookup failed: \" .. tostring(err)) end\n"
  "local words = {}\n"
  "for w in text:gmatch(\"%a+\") do words[#words + 1] = w:upper() end\n"
  "local now = os.time()\n"
  "local stamp = os.date(\"!%Y-%m-%d\", now)\n"
  "local record = json.encode({ counts = counts, avg = avg, at = stamp })\n"
  "tools.kv.set{key = \"record\", value = record}\n"
  "local back = json.decode(record)\n"
  "local max = math.max(table.unpack({ 1, 5, 3 }))\n"
  "local parts = {}\n"
  "for i = 1, math.min(3, #words) do parts[i] = words[i] end\n"
  "local head = table.concat(parts, \" \")\n"
  "local r = tools.kv.get{key = \"record\"}\n"
  "if r.found and r.value ~= json.null then print(\"stored\") end\n"
  "local result = { text = text, avg = avg, max = max, head = head }\n"
  "result.seen = seen.found\n"
  "result.when = back.at\n"
  "return result\n";

static void die (const char *what) {
  fprintf(stderr, "bench_engine: %s\n", what);
  exit(1);
}

/* One sandboxed run through the resumable API; checks the envelope says ok. */
static void sandbox_run (tp_engine *e, const char *src, const tp_limits *lim) {
  tp_run *r = tp_run_create(e, src, strlen(src), lim);
  if (r == NULL) die("tp_run_create failed");
  int rc;
  while ((rc = tp_run_step(r, 0, 0)) == TP_YIELD) {}
  const char *env = tp_run_envelope(r);
  if (rc != TP_DONE || env == NULL || strncmp(env, "{\"ok\":true", 10) != 0)
    die(env ? env : "the run did not finish");
  tp_run_destroy(r);
}

/* The same script in a plain state of the same Lua build. */
static void bare_run (const char *src) {
  lua_State *L = luaL_newstate();
  if (L == NULL) die("luaL_newstate failed");
  luaL_openlibs(L);
  if (luaL_loadstring(L, src) != LUA_OK || lua_pcall(L, 0, 1, 0) != LUA_OK)
    die(lua_tostring(L, -1));
  lua_close(L);
}

/* Prints the medians of a and b run alternately n times, and of the ratios b/a. */
static void side_by_side (int n, const char *src, tp_engine *e, const tp_limits *lim,
                          double *bare_ms, double *sb_ms, double *ratio) {
  double *a = malloc(sizeof(double) * (size_t)n), *b = malloc(sizeof(double) * (size_t)n);
  double *q = malloc(sizeof(double) * (size_t)n);
  if (a == NULL || b == NULL || q == NULL) die("out of memory");
  bare_run(src);             /* warm up caches and the allocator */
  sandbox_run(e, src, lim);
  for (int i = 0; i < n; i++) {
    double t0 = bench_now_us();
    if (i % 2 == 0) {        /* alternate the order too: neither always goes first */
      bare_run(src);
      double t1 = bench_now_us();
      sandbox_run(e, src, lim);
      double t2 = bench_now_us();
      a[i] = t1 - t0; b[i] = t2 - t1;
    }
    else {
      sandbox_run(e, src, lim);
      double t1 = bench_now_us();
      bare_run(src);
      double t2 = bench_now_us();
      b[i] = t1 - t0; a[i] = t2 - t1;
    }
    q[i] = b[i] / a[i];
  }
  *ratio = median(q, n);
  *bare_ms = median(a, n) / 1e3;
  *sb_ms = median(b, n) / 1e3;
  free(a); free(b); free(q);
}

int main (int argc, char **argv) {
  int scale = argc > 1 ? atoi(argv[1]) : 1;
  if (scale < 1) scale = 1;
  tp_engine *e = tp_engine_create();
  if (e == NULL) die("tp_engine_create failed");

  /* cold runs: a fresh sandbox per run, against a bare state, alternately */
  int n = 4000 * scale;
  double *cold = malloc(sizeof(double) * (size_t)n), *bare = malloc(sizeof(double) * (size_t)n);
  double *eng = malloc(sizeof(double) * (size_t)n), *rat = malloc(sizeof(double) * (size_t)n);
  if (cold == NULL || bare == NULL || eng == NULL || rat == NULL) die("out of memory");
  for (int i = 0; i < 200; i++) { sandbox_run(e, trivial, NULL); bare_run(trivial); }
  for (int i = 0; i < n; i++) {
    double t0 = bench_now_us();
    sandbox_run(e, trivial, NULL);
    double t1 = bench_now_us();
    bare_run(trivial);
    double t2 = bench_now_us();
    char *env = NULL;
    int ok = 0;
    if (tp_engine_run(e, trivial, sizeof trivial - 1, NULL, &env, &ok) != TP_OK || !ok)
      die("tp_engine_run failed");
    tp_free(env);
    double t3 = bench_now_us();
    cold[i] = t1 - t0; bare[i] = t2 - t1; eng[i] = t3 - t2;
    rat[i] = cold[i] / bare[i];
  }
  printf("cold_run_us: %.1f us\n", median(cold, n));
  printf("cold_engine_run_us: %.1f us\n", median(eng, n));
  printf("bare_state_us: %.1f us\n", median(bare, n));
  printf("cold_over_bare: %.3f x\n", median(rat, n));

  /* warm runs: a trivial script in one session, source to envelope */
  tp_session *s = tp_session_create(e, NULL);
  if (s == NULL) die("tp_session_create failed");
  for (int i = 0; i < n; i++) {
    double t0 = bench_now_us();
    tp_run *r = tp_session_run(s, trivial, sizeof trivial - 1);
    if (r == NULL) die("tp_session_run failed");
    int rc;
    while ((rc = tp_run_step(r, 0, 0)) == TP_YIELD) {}
    const char *env = tp_run_envelope(r);
    if (rc != TP_DONE || env == NULL || strncmp(env, "{\"ok\":true", 10) != 0) die("warm run");
    tp_run_destroy(r);
    cold[i] = bench_now_us() - t0;
  }
  printf("warm_run_us: %.2f us\n", median(cold, n));
  tp_session_destroy(s);
  free(cold); free(bare); free(eng); free(rat);

  /* memory per session */
  {
    enum { NS = 2000 };
    tp_session **ss = malloc(sizeof *ss * NS);
    if (ss == NULL) die("out of memory");
    long rss0 = bench_rss_kib();
    size_t lua = 0;
    for (int i = 0; i < NS; i++) {
      if ((ss[i] = tp_session_create(e, NULL)) == NULL) die("tp_session_create failed");
      lua += tp_session_memory(ss[i]);
    }
    long rss1 = bench_rss_kib();
    printf("session_kib: %.1f KiB\n", (double)lua / NS / 1024);
    printf("session_rss_kib: %.1f KiB\n", (double)(rss1 - rss0) / NS);
    for (int i = 0; i < NS; i++) tp_session_destroy(ss[i]);
    free(ss);
  }

  /* the pre-run check alone, on the compiled 50-line script (tools known to it) */
  {
    tp_engine *pe = tp_engine_create();
    if (pe == NULL || tp_engine_load_tools(pe, "tools") < 0) die("loading tools/ failed");
    tp_run *r = tp_run_create(pe, fifty, sizeof fifty - 1, NULL);
    if (r == NULL) die("tp_run_create failed");
    tp_findings *fs = malloc(sizeof *fs);
    if (fs == NULL) die("out of memory");
    if (tp__precheck(r, fs) != 0) die(fs->f[0].msg);  /* the script is clean */
    int np = 2000 * scale;
    double *pt = malloc(sizeof(double) * (size_t)np);
    if (pt == NULL) die("out of memory");
    for (int i = 0; i < np; i++) {
      double t0 = bench_now_us();
      tp__precheck(r, fs);
      pt[i] = bench_now_us() - t0;
    }
    printf("precheck_us: %.1f us\n", median(pt, np));
    free(pt);
    free(fs);
    tp_run_destroy(r);
    tp_engine_destroy(pe);
  }

  /* CPU-bound: fib(27), default limits (cpu and wall, no count hook) */
  double bare_ms, sb_ms, ratio;
  side_by_side(15 * scale, fib, e, NULL, &bare_ms, &sb_ms, &ratio);
  printf("fib27_bare_ms: %.2f ms\n", bare_ms);
  printf("fib27_sandbox_ms: %.2f ms\n", sb_ms);
  printf("cpu_overhead_time: %.3f x\n", ratio);

  tp_limits lim;
  tp_limits_init(&lim);
  lim.instructions = 1000000000u;
  side_by_side(9 * scale, fib, e, &lim, &bare_ms, &sb_ms, &ratio);
  printf("fib27_sandbox_instructions_ms: %.2f ms\n", sb_ms);
  printf("cpu_overhead_instructions: %.3f x\n", ratio);

  tp_engine_destroy(e);
  return 0;
}
