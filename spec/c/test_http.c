/*
** test_http.c: the engine's HTTP (engine/host/http.c) as tp_engine_destroy leaves it: no
** libuv handle left open and (under valgrind) nothing leaked, whether the requests were
** answered (their connection kept alive in curl's cache), cut short by the run's time
** limit, or started by a plugin outside any call and never answered. The servers are
** threads of this test on 127.0.0.1: one answers every request on a kept-alive
** connection, one accepts and never answers. The policy and the Lua API are tested
** end to end by spec/http/http.mjs.
*/
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tp_test.h"
#include "tidepool.h"

static int answer_port, silent_port;

static int listen_on (int *port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
  socklen_t len = sizeof a;
  if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 64) != 0 ||
      getsockname(fd, (struct sockaddr *)&a, &len) != 0) return -1;
  *port = ntohs(a.sin_port);
  return fd;
}

/* The answering server: one thread, poll(2) over the listening socket, its connections
** and a pipe that stops it. Each request (headers up to a blank line) gets "hi", and the
** connection is kept alive. */
#define MAX_CONNS 32
static int stop_pipe[2];

static void *answering (void *arg) {
  struct pollfd fds[MAX_CONNS + 2];
  char bufs[MAX_CONNS][4096];
  size_t have[MAX_CONNS];
  int n = 0;
  fds[0] = (struct pollfd){ .fd = (int)(intptr_t)arg, .events = POLLIN };
  fds[1] = (struct pollfd){ .fd = stop_pipe[0], .events = POLLIN };
  for (;;) {
    if (poll(fds, (nfds_t)(n + 2), -1) < 0) continue;
    if (fds[1].revents) break;
    if (fds[0].revents & POLLIN) {
      int c = accept(fds[0].fd, NULL, NULL);
      if (c >= 0 && n < MAX_CONNS) {
        fds[n + 2] = (struct pollfd){ .fd = c, .events = POLLIN };
        have[n++] = 0;
      } else if (c >= 0) {
        close(c);
      }
    }
    for (int i = 0; i < n; i++) {
      if (!fds[i + 2].revents) continue;
      char *b = bufs[i];
      ssize_t got = read(fds[i + 2].fd, b + have[i], sizeof bufs[i] - 1 - have[i]);
      if (got <= 0) {  /* closed: the last connection takes its place */
        close(fds[i + 2].fd);
        fds[i + 2] = fds[n + 1];
        memcpy(bufs[i], bufs[n - 1], have[n - 1]);
        have[i] = have[n - 1];
        n--;
        i--;
        continue;
      }
      have[i] += (size_t)got;
      b[have[i]] = '\0';
      char *end;
      while ((end = strstr(b, "\r\n\r\n")) != NULL) {
        static const char resp[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n"
                                   "Content-Type: text/plain\r\n\r\nhi";
        if (write(fds[i + 2].fd, resp, sizeof resp - 1) < 0) break;
        size_t used = (size_t)(end + 4 - b);
        memmove(b, b + used, have[i] - used + 1);
        have[i] -= used;
      }
    }
  }
  for (int i = 0; i < n; i++) close(fds[i + 2].fd);
  return NULL;
}

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
  int a = listen_on(&answer_port), s = listen_on(&silent_port);
  pthread_t t;
  if (a < 0 || s < 0 || pipe(stop_pipe) != 0 ||
      pthread_create(&t, NULL, answering, (void *)(intptr_t)a) != 0) {
    perror("test_http: servers");
    return 1;
  }
  RUN(answered_requests_leave_no_handle_open_at_destroy);
  RUN(a_request_cut_by_the_run_time_limit_leaves_nothing_behind);
  RUN(a_plugin_request_outside_any_call_is_cancelled_at_destroy);
  RUN(an_engine_without_http_requests_is_unaffected);
  if (write(stop_pipe[1], "x", 1) == 1) pthread_join(t, NULL);
  close(a);
  close(s);
  close(stop_pipe[0]);
  close(stop_pipe[1]);
  return tp_test_end();
}
