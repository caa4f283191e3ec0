/*
** http_server.h: a minimal HTTP/1.1 server on 127.0.0.1 for spec/c/test_http.c and
** bench/bench_http.c. One thread, poll(2) over the listening socket, its connections and
** a pipe that stops it. Each request (headers up to a blank line; no body) gets "hi" and
** the connection is kept alive.
*/
#ifndef tidepool_http_server_h
#define tidepool_http_server_h

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define TEST_SERVER_CONNS 160

typedef struct test_server {
  int fd, stop[2];
  pthread_t thread;
  struct pollfd fds[TEST_SERVER_CONNS + 2];
  char bufs[TEST_SERVER_CONNS][2048];
  size_t have[TEST_SERVER_CONNS];
  int n;
} test_server;

/* A listening socket on 127.0.0.1 and its port; -1 on failure. */
static inline int test_listen (int *port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
  socklen_t len = sizeof a;
  if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 256) != 0 ||
      getsockname(fd, (struct sockaddr *)&a, &len) != 0) return -1;
  *port = ntohs(a.sin_port);
  return fd;
}

static inline void test_server_drop (test_server *s, int i) {  /* the last takes its place */
  close(s->fds[i + 2].fd);
  s->fds[i + 2] = s->fds[s->n + 1];
  memcpy(s->bufs[i], s->bufs[s->n - 1], s->have[s->n - 1] + 1);
  s->have[i] = s->have[s->n - 1];
  s->n--;
}

static inline void *test_server_loop (void *arg) {
  test_server *s = arg;
  static const char resp[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n"
                             "Content-Type: text/plain\r\n\r\nhi";
  for (;;) {
    if (poll(s->fds, (nfds_t)(s->n + 2), -1) < 0) continue;
    if (s->fds[1].revents) break;
    if (s->fds[0].revents & POLLIN) {
      int c = accept(s->fds[0].fd, NULL, NULL);
      if (c >= 0 && s->n < TEST_SERVER_CONNS) {
        s->fds[s->n + 2] = (struct pollfd){ .fd = c, .events = POLLIN };
        s->have[s->n++] = 0;
      } else if (c >= 0) {
        close(c);
      }
    }
    for (int i = 0; i < s->n; i++) {
      if (!s->fds[i + 2].revents) continue;
      char *b = s->bufs[i];
      ssize_t got = read(s->fds[i + 2].fd, b + s->have[i], sizeof s->bufs[i] - 1 - s->have[i]);
      if (got <= 0) { test_server_drop(s, i--); continue; }
      s->have[i] += (size_t)got;
      b[s->have[i]] = '\0';
      char *end;
      while ((end = strstr(b, "\r\n\r\n")) != NULL) {
        if (write(s->fds[i + 2].fd, resp, sizeof resp - 1) < 0) break;
        size_t used = (size_t)(end + 4 - b);
        memmove(b, b + used, s->have[i] - used + 1);
        s->have[i] -= used;
      }
      if (s->have[i] == sizeof s->bufs[i] - 1) test_server_drop(s, i--);  /* too long */
    }
  }
  for (int i = 0; i < s->n; i++) close(s->fds[i + 2].fd);
  return NULL;
}

/* Starts s on 127.0.0.1; its port in *port. 0, or -1. */
static inline int test_server_start (test_server *s, int *port) {
  memset(s, 0, sizeof *s);
  if ((s->fd = test_listen(port)) < 0 || pipe(s->stop) != 0) return -1;
  s->fds[0] = (struct pollfd){ .fd = s->fd, .events = POLLIN };
  s->fds[1] = (struct pollfd){ .fd = s->stop[0], .events = POLLIN };
  return pthread_create(&s->thread, NULL, test_server_loop, s) == 0 ? 0 : -1;
}

static inline void test_server_stop (test_server *s) {
  if (write(s->stop[1], "x", 1) == 1) pthread_join(s->thread, NULL);
  close(s->fd);
  close(s->stop[0]);
  close(s->stop[1]);
}

#endif
