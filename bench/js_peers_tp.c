/*
** js_peers_tp.c: tidepool's side of bench/js_peers.mjs, which compares it with JavaScript
** sandboxes in one sitting. bench/js_peers.mjs starts this program once and, round after
** round (alternating with the JavaScript peers), writes a line "cold N" or "tools N" on
** its stdin; the answer is one line of N wall times in microseconds, one per run:
**
**   cold   a fresh sandbox running `return 1 + 1`, through the C API on one engine:
**          tp_run_create (a new sandbox from the source text), tp_run_step to the end,
**          tp_run_envelope (the result, as the envelope's JSON text), tp_run_destroy
**   tools  the same for a script that calls a C tool ten times and returns the sum:
**            local s = 0
**            for i = 1, 10 do s = s + tools.add{a = i, b = 1}.sum end
**            return s
**          add has an input schema (a and b numbers, both required) that every call is
**          checked against; its handler reads a and b from the arguments' JSON text and
**          answers {"sum": a + b} at once
**
**   cold_fresh, tools_fresh   the same on a second engine whose pool of sandboxes is
**          off (sandboxes_max 0): every run builds its sandbox from nothing and frees it.
**          An engine keeps up to four sandboxes of finished runs, put back byte for byte
**          as they were built (docs/measurements.md, "Pooled sandboxes"); this is the
**          cost without that
**
** Each run's envelope must say ok with the expected value (2, 65), or the program stops
** with it on stderr and exit status 1. "quit" or the end of stdin ends the program.
** usage: js_peers_tp   (no arguments; a line "ready" tells the tool is registered)
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tidepool.h"
#include "engine.h"
#include "bench.h"

static const char cold_src[] = "return 1 + 1";
static const char tools_src[] =
  "local s = 0\n"
  "for i = 1, 10 do s = s + tools.add{a = i, b = 1}.sum end\n"
  "return s\n";

static const char add_schema[] =
  "{\"type\":\"object\",\"required\":[\"a\",\"b\"],"
  "\"properties\":{\"a\":{\"type\":\"number\"},\"b\":{\"type\":\"number\"}}}";

/* The number after "key": in the arguments' JSON text (the schema made sure it is one). */
static double arg_number (const char *args, const char *key) {
  const char *p = strstr(args, key);
  if (p == NULL) return 0;
  p = strchr(p + strlen(key), ':');
  return p ? strtod(p + 1, NULL) : 0;
}

static void add (tp_call *c, void *ud) {
  (void)ud;
  const char *args = tp_call_args(c);
  char out[64];
  double s = arg_number(args, "\"a\"") + arg_number(args, "\"b\"");
  int n = snprintf(out, sizeof out, "{\"sum\":%.17g}", s);
  tp_call_complete(c, out, (size_t)n);
}

/* One run from source text to envelope, sandbox created and destroyed; microseconds. */
static double one_run (tp_engine *e, const char *src, const char *want) {
  double t0 = bench_now_us();
  tp_run *r = tp_run_create(e, src, strlen(src), NULL);
  if (r == NULL) { fprintf(stderr, "js_peers_tp: tp_run_create failed\n"); exit(1); }
  int rc;
  while ((rc = tp_run_step(r, 0, 0)) == TP_YIELD) {}
  const char *env = tp_run_envelope(r);
  int good = rc == TP_DONE && env != NULL && strncmp(env, want, strlen(want)) == 0;
  if (!good) {
    fprintf(stderr, "js_peers_tp: expected an envelope starting %s, got %.400s\n", want,
            env ? env : "(none)");
    exit(1);
  }
  tp_run_destroy(r);
  return bench_now_us() - t0;
}

static tp_engine *engine (void) {
  tp_engine *e = tp_engine_create();
  tp_tool_def def;
  tp_tool_def_init(&def);
  def.name = "add";
  def.description = "Adds a and b.";
  def.input_schema = add_schema;
  def.handler = add;
  if (e == NULL || tp_engine_add_tool(e, &def) != TP_OK) {
    fprintf(stderr, "js_peers_tp: cannot register the tool: %s\n", e ? tp_engine_error(e) : "");
    exit(1);
  }
  return e;
}

int main (void) {
  tp_engine *pooled = engine(), *fresh = engine();
  fresh->core.chunks.sandboxes_max = 0;
  printf("ready\n");
  fflush(stdout);
  char line[64], what[16];
  int n;
  while (fgets(line, sizeof line, stdin) != NULL) {
    if (sscanf(line, "%15s %d", what, &n) != 2 || n < 1 || n > 1000000) break;
    int tools = strncmp(what, "tools", 5) == 0;
    tp_engine *e = strstr(what, "_fresh") ? fresh : pooled;
    if (!tools && strncmp(what, "cold", 4) != 0) break;
    for (int i = 0; i < n; i++)
      printf(i ? " %.3f" : "%.3f", tools ? one_run(e, tools_src, "{\"ok\":true,\"result\":65")
                                         : one_run(e, cold_src, "{\"ok\":true,\"result\":2"));
    printf("\n");
    fflush(stdout);
  }
  tp_engine_destroy(pooled);
  tp_engine_destroy(fresh);
  return 0;
}
