/*
** test_http.c: the engine's HTTP (engine/host/http.c) as tp_engine_destroy leaves it: no
** libuv handle left open and (under valgrind) nothing leaked, whether the requests were
** answered (their connection kept alive in curl's cache), cut short by the run's time
** limit, or started by a plugin outside any call and never answered. The servers are
** threads of this test on 127.0.0.1: one answers every request on a kept-alive
** connection, one accepts and never answers. The policy and the Lua API are tested
** end to end by spec/http/http.mjs.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tp_test.h"
#include "tidepool.h"
#include "http_server.h"

static int answer_port, silent_port;
static test_server answer;

static tp_engine *engine (void) {
  tp_engine *e = tp_engine_create();
  static const char cfg[] =
    "{\"http\": {\"allow\": [\"127.0.0.1\"], \"allow_private\": [\"127.0.0.0/8\"]}}";
  CHECK_INT(tp_engine_configure(e, cfg, sizeof cfg - 1), TP_OK);
  CHECK(tp_engine_load_tools(e, "tools") > 0);
  return e;
}

static char *run (tp_engine *e, const char *src, uint64_t wall_us) {
  tp_limits lim;
  tp_limits_init(&lim);
  if (wall_us) lim.wall_us = wall_us;
  char *env = NULL;
  int ok = 0;
  CHECK_INT(tp_engine_run(e, src, strlen(src), &lim, &env, &ok), TP_OK);
  return env;
}

TEST(answered_requests_leave_no_handle_open_at_destroy) {
  tp_engine *e = engine();
  char src[512];
  snprintf(src, sizeof src, "local a = tools.http.fetch{url = 'http://127.0.0.1:%d/a'}\n"
           "local b = tools.http.fetch{url = 'http://127.0.0.1:%d/b'}\n"
           "return a.body .. b.body .. a.status", answer_port, answer_port);
  char *env = run(e, src, 0);
  CHECK_HAS(env, "\"ok\":true,\"result\":\"hihi200\"");
  tp_free(env);
  tp_engine_destroy(e);  /* the kept-alive connection is still in curl's cache */
}

TEST(a_request_cut_by_the_run_time_limit_leaves_nothing_behind) {
  tp_engine *e = engine();
  char src[256];
  snprintf(src, sizeof src, "return tools.http.fetch{url = 'http://127.0.0.1:%d/'}",
           silent_port);
  char *env = run(e, src, 500000);
  CHECK_HAS(env, "\"code\":\"limit.time\"");
  tp_free(env);
  /* the engine serves another run after that */
  snprintf(src, sizeof src, "return tools.http.fetch{url = 'http://127.0.0.1:%d/'}.body",
           answer_port);
  env = run(e, src, 0);
  CHECK_HAS(env, "\"ok\":true,\"result\":\"hi\"");
  tp_free(env);
  tp_engine_destroy(e);
}

TEST(a_plugin_request_outside_any_call_is_cancelled_at_destroy) {
  char url[64];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/", silent_port);
  setenv("TP_HTTP_TEST_URL", url, 1);
  tp_engine *e = engine();
  CHECK_INT(tp_engine_load_tools(e, "spec/fixtures/http_load"), 0);
  for (int i = 0; i < 20; i++) tp_engine_poll(e, 0);  /* let it connect */
  tp_engine_destroy(e);
  unsetenv("TP_HTTP_TEST_URL");
}

TEST(an_engine_without_http_requests_is_unaffected) {
  tp_engine *e = tp_engine_create();
  char *env = NULL;
  int ok = 0;
  CHECK_INT(tp_engine_run(e, "return 1", 8, NULL, &env, &ok), TP_OK);
  CHECK_HAS(env, "\"result\":1");
  tp_free(env);
  tp_engine_destroy(e);
}

int main (int argc, char **argv) {
  tp_test_args(argc, argv);
  int s = test_listen(&silent_port);  /* accepts (the kernel does), never answers */
  if (s < 0 || test_server_start(&answer, &answer_port) != 0) {
    perror("test_http: servers");
    return 1;
  }
  RUN(answered_requests_leave_no_handle_open_at_destroy);
  RUN(a_request_cut_by_the_run_time_limit_leaves_nothing_behind);
  RUN(a_plugin_request_outside_any_call_is_cancelled_at_destroy);
  RUN(an_engine_without_http_requests_is_unaffected);
  test_server_stop(&answer);
  close(s);
  return tp_test_end();
}
