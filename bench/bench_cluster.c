/*
** bench_cluster: `tidepool mcp --http --state redis://...` servers sharing one Redis, from a
** libcurl client in another process (this one), 16 tools/calls in flight on keep-alive
** connections, each call a script that writes one kv key (a Redis round trip):
**   cluster_calls_per_s   the calls completed per second, spread over three servers
**   cluster_one_calls_per_s  the same against one server of the same kind, side by side
** Everything runs on this machine (the servers, Redis and the client share its cores), so
** the ratio says what the shared store costs more than what three machines would give.
** redis-server is started here on a free port (no persistence, a temporary directory).
**   build/bench/bench_cluster build/tidepool [scale]
*/
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <curl/curl.h>

#include "bench.h"

enum { INFLIGHT = 16, SERVERS = 3 };

typedef struct buf { char *p; size_t len; } buf;

static size_t on_body (char *d, size_t size, size_t n, void *ud) {
  buf *b = ud;
  size_t k = size * n;
  char *np = realloc(b->p, b->len + k + 1);
  if (np == NULL) return 0;
  memcpy(np + b->len, d, k);
  b->len += k;
  np[b->len] = '\0';
  b->p = np;
  return k;
}

static char session[SERVERS][64];
static int cur;
static size_t on_header (char *d, size_t size, size_t n, void *ud) {
  (void)ud;
  size_t k = size * n;
  if (k > 16 && strncasecmp(d, "mcp-session-id:", 15) == 0) {
    const char *v = d + 15;
    while (*v == ' ') v++;
    size_t l = strcspn(v, "\r\n");
    if (l < sizeof session[0]) { memcpy(session[cur], v, l); session[cur][l] = '\0'; }
  }
  return k;
}

static const char call_body[] = "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\",\"params\":"
  "{\"name\":\"run_lua\",\"arguments\":{\"code\":\"tools.kv.set{key = 'bench', value = 1} "
  "return 1\"}}}";

static int free_port (void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
  socklen_t al = sizeof a;
  if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
      getsockname(fd, (struct sockaddr *)&a, &al) != 0) { if (fd >= 0) close(fd); return -1; }
  close(fd);
  return ntohs(a.sin_port);
}

/* tidepool mcp --http on a port the kernel picks, --state state: its port, or 0. */
static int start_server (const char *bin, const char *state, pid_t *pid, int quiet) {
  int fds[2];
  if (pipe(fds) != 0) return 0;
  *pid = fork();
  if (*pid == 0) {
    dup2(fds[1], 2);
    close(fds[0]);
    close(fds[1]);
    execl(bin, bin, "mcp", "--http", "127.0.0.1:0", "--state", state, (char *)NULL);
    _exit(127);
  }
  close(fds[1]);
  char line[4096];
  size_t got = 0;
  int port = 0;
  while (port == 0 && got + 1 < sizeof line) {
    ssize_t r = read(fds[0], line + got, sizeof line - 1 - got);
    if (r <= 0) break;
    got += (size_t)r;
    line[got] = '\0';
    const char *m = strstr(line, "serving on http://127.0.0.1:");
    if (m) port = atoi(m + strlen("serving on http://127.0.0.1:"));
  }
  if (port == 0 && !quiet)
    fprintf(stderr, "bench_cluster: %s did not serve: %s\n", bin, got ? line : "");
  close(fds[0]);   /* its later lines go nowhere: it ignores SIGPIPE */
  return port;
}

static CURL *easy (const char *url, struct curl_slist *hdrs, buf *b, const char *body) {
  CURL *c = curl_easy_init();
  curl_easy_setopt(c, CURLOPT_URL, url);
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
  curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, b);
  curl_easy_setopt(c, CURLOPT_TCP_NODELAY, 1L);
  return c;
}

/* An MCP session on url (initialize): its headers for the calls, or NULL. */
static struct curl_slist *open_session (const char *url, int k) {
  buf b = { 0 };
  struct curl_slist *h0 = curl_slist_append(NULL, "Content-Type: application/json");
  h0 = curl_slist_append(h0, "Accept: application/json, text/event-stream");
  CURL *c = easy(url, h0, &b, "{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":"
                 "{\"protocolVersion\":\"2025-11-25\",\"capabilities\":{},\"clientInfo\":"
                 "{\"name\":\"bench\",\"version\":\"1\"}}}");
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
  cur = k;
  CURLcode rc = curl_easy_perform(c);
  curl_easy_cleanup(c);
  curl_slist_free_all(h0);
  free(b.p);
  if (rc != CURLE_OK || !session[k][0]) return NULL;
  char sh[100];
  snprintf(sh, sizeof sh, "Mcp-Session-Id: %.63s", session[k]);
  struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
  h = curl_slist_append(h, "Accept: application/json, text/event-stream");
  return curl_slist_append(h, sh);
}

/* total calls, 16 in flight, spread over the first n servers: calls per second (-1: a
** call failed). */
static double measure (char urls[][100], struct curl_slist **hdrs, int n, int total) {
  CURLM *multi = curl_multi_init();
  CURL *hs[INFLIGHT];
  buf bs[INFLIGHT];
  memset(bs, 0, sizeof bs);
  int started = 0, done = 0, failed = 0;
  for (int k = 0; k < INFLIGHT; k++) {
    hs[k] = easy(urls[k % n], hdrs[k % n], &bs[k], call_body);
    curl_easy_setopt(hs[k], CURLOPT_PRIVATE, (void *)&bs[k]);
    curl_multi_add_handle(multi, hs[k]);
    started++;
  }
  double t0 = bench_now_us();
  while (done < total) {
    int running;
    curl_multi_perform(multi, &running);
    CURLMsg *m;
    int left;
    while ((m = curl_multi_info_read(multi, &left)) != NULL) {
      if (m->msg != CURLMSG_DONE) continue;
      long status = 0;
      buf *bb;
      curl_easy_getinfo(m->easy_handle, CURLINFO_RESPONSE_CODE, &status);
      curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&bb);
      int bad = m->data.result != CURLE_OK || status != 200 || bb->p == NULL ||
                strstr(bb->p, "\"ok\":true") == NULL;
      if (bad && failed++ == 0) fprintf(stderr, "bench_cluster: %.300s\n", bb->p ? bb->p : "");
      done++;
      curl_multi_remove_handle(multi, m->easy_handle);
      if (started < total) {
        bb->len = 0;
        curl_multi_add_handle(multi, m->easy_handle);
        started++;
      }
    }
    if (done < total) curl_multi_poll(multi, NULL, 0, 100, NULL);
  }
  double secs = (bench_now_us() - t0) / 1e6;
  for (int k = 0; k < INFLIGHT; k++) { curl_easy_cleanup(hs[k]); free(bs[k].p); }
  curl_multi_cleanup(multi);
  return failed ? -1 : done / secs;
}

int main (int argc, char **argv) {
  const char *bin = argc > 1 ? argv[1] : "build/tidepool";
  int scale = argc > 2 ? atoi(argv[2]) : 1;
  if (scale < 1) scale = 1;
  char dir[] = "/tmp/tp-bench-cluster-XXXXXX";
  if (mkdtemp(dir) == NULL) { perror("bench_cluster: mkdtemp"); return 1; }
  int rport = free_port();
  char rps[16], state[128];
  snprintf(rps, sizeof rps, "%d", rport);
  snprintf(state, sizeof state, "redis://127.0.0.1:%d/0?prefix=bench:", rport);
  pid_t redis = fork();
  if (redis == 0) {
    int null = open("/dev/null", O_WRONLY);
    dup2(null, 1);
    execlp("redis-server", "redis-server", "--port", rps, "--bind", "127.0.0.1", "--save",
           "", "--appendonly", "no", "--dir", dir, (char *)NULL);
    _exit(127);
  }
  pid_t pids[SERVERS] = { 0 };
  char urls[SERVERS][100];
  struct curl_slist *hdrs[SERVERS] = { 0 };
  int ok = 1;
  curl_global_init(CURL_GLOBAL_DEFAULT);
  for (int k = 0; ok && k < SERVERS; k++) {
    int port = 0;
    for (int tries = 0; port == 0 && tries < 50; tries++) {   /* redis may still be starting */
      port = start_server(bin, state, &pids[k], tries < 49);
      if (port == 0) { waitpid(pids[k], NULL, 0); pids[k] = 0; usleep(100000); }
    }
    snprintf(urls[k], sizeof urls[k], "http://127.0.0.1:%d/mcp", port);
    ok = port != 0 && (hdrs[k] = open_session(urls[k], k)) != NULL;
  }
  if (!ok) {
    printf("cluster_calls_per_s: not measured (a server did not start: is redis-server "
           "installed?)\n");
  }
  else {
    int total = 4000 * scale;
    measure(urls, hdrs, 1, 200);                       /* warm-up */
    double one = measure(urls, hdrs, 1, total);
    double three = measure(urls, hdrs, SERVERS, total);
    if (one < 0 || three < 0) { printf("cluster_calls_per_s: not measured (calls failed)\n"); ok = 0; }
    else {
      printf("cluster_one_calls_per_s: %.0f calls/s (one server, --state redis, 16 in flight, "
             "a kv.set each)\n", one);
      printf("cluster_calls_per_s: %.0f calls/s (three servers and Redis on this machine, 16 "
             "in flight spread over them; %.2f x one server)\n", three, three / one);
    }
  }
  for (int k = 0; k < SERVERS; k++) {
    curl_slist_free_all(hdrs[k]);
    if (pids[k] > 0) { kill(pids[k], SIGTERM); waitpid(pids[k], NULL, 0); }
  }
  kill(redis, SIGTERM);
  waitpid(redis, NULL, 0);
  curl_global_cleanup();
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) fprintf(stderr, "bench_cluster: could not remove %s\n", dir);
  return ok ? 0 : 1;
}
