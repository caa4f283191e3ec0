/*
** bench_http.c: the HTTP figures of `make bench` (issue 10), "name: value unit".
**
**   http_fetch_us         one tools.http.fetch{url = ...} from a script to a server on
**                         127.0.0.1 (spec/c/http_server.h: a thread answering "hi" on a
**                         kept-alive connection): a run of 200 sequential fetches / 200
**   http_parallel_100_ms  one run whose parallel() makes 100 fetches at once (100 calls in
**                         flight, so 100 connections), the whole run
**   http_tool_call_us     the same run as http_fetch_us with time.now instead: the part
**                         of a fetch that is the tool call itself, for comparison
**
** Medians. usage: bench_http TOOLS_DIR [scale]
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tidepool.h"
#include "bench.h"
#include "../spec/c/http_server.h"

#define SEQ 200

static tp_limits lim;

static double timed_run (tp_engine *e, const char *src) {
  return bench_timed_run("bench_http", e, src, &lim);
}

int main (int argc, char **argv) {
  const char *tools_dir = argc > 1 ? argv[1] : "tools";
  int scale = argc > 2 ? atoi(argv[2]) : 1;
  if (scale < 1) scale = 1;
  static test_server srv;
  int port;
  if (test_server_start(&srv, &port) != 0) { perror("bench_http: server"); return 1; }
  tp_limits_init(&lim);
  lim.tool_in_flight = 100;
  tp_engine *e = tp_engine_create();
  static const char cfg[] =
    "{\"http\": {\"allow\": [\"127.0.0.1\"], \"allow_private\": [\"127.0.0.0/8\"]}}";
  if (e == NULL || tp_engine_configure(e, cfg, sizeof cfg - 1) != TP_OK ||
      tp_engine_load_tools(e, tools_dir) < 1) {
    fprintf(stderr, "bench_http: cannot set up the engine: %s\n", tp_engine_error(e));
    return 1;
  }
  char seq[256], calls[256], par[512];
  snprintf(seq, sizeof seq, "for i = 1, %d do "
           "assert(tools.http.fetch{url = 'http://127.0.0.1:%d/x'}.body == 'hi') end",
           SEQ, port);
  snprintf(calls, sizeof calls, "for i = 1, %d do tools.time.now{} end", SEQ);
  snprintf(par, sizeof par, "local f = {} for i = 1, 100 do f[i] = function() "
           "return tools.http.fetch{url = 'http://127.0.0.1:%d/p'}.status end end "
           "local r = {parallel(table.unpack(f))} assert(#r == 100 and r[100] == 200)", port);
  enum { REPS = 15 };
  double per[REPS * 4], per_call[REPS * 4], p100[REPS * 4];
  int reps = REPS * scale > REPS * 4 ? REPS * 4 : REPS * scale;
  for (int i = 0; i < reps; i++) {
    double a = timed_run(e, seq), c = timed_run(e, calls), p = timed_run(e, par);
    if (a < 0 || c < 0 || p < 0) return 1;
    per[i] = a / SEQ;
    per_call[i] = c / SEQ;
    p100[i] = p / 1000;
  }
  printf("http_fetch_us: %.1f us\n", median(per, reps));
  printf("http_tool_call_us: %.1f us\n", median(per_call, reps));
  printf("http_parallel_100_ms: %.2f ms\n", median(p100, reps));
  tp_engine_destroy(e);
  test_server_stop(&srv);
  return 0;
}
