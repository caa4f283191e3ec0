/*
** bench_mcp_http: `tidepool mcp --http` from a client in another process (this one, with
** libcurl), over keep-alive connections, a 2025-11-25 session, JSON responses.
**   http_call_ms      the median round trip of a tools/call of `return 1`, one at a time
**   http_calls_per_s  such calls completed per second with 16 in flight (16 connections)
** The server is build/tidepool (argv[1]) started here on 127.0.0.1 at a port the kernel
** picks, read from its "serving on" line.
**   build/bench/bench_mcp_http build/tidepool [scale]
*/
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <curl/curl.h>

#include "bench.h"

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

static char session[64];
static size_t on_header (char *d, size_t size, size_t n, void *ud) {
  (void)ud;
  size_t k = size * n;
  if (k > 16 && strncasecmp(d, "mcp-session-id:", 15) == 0) {
    const char *v = d + 15;
    while (*v == ' ') v++;
    size_t l = strcspn(v, "\r\n");
    if (l < sizeof session) { memcpy(session, v, l); session[l] = '\0'; }
  }
  return k;
}

static const char call_body[] = "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\",\"params\":"
  "{\"name\":\"run_lua\",\"arguments\":{\"code\":\"return 1\"}}}";

/* An easy handle posting to url with the session's headers; its body goes to b. */
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

static long post (CURL *c, buf *b) {
  b->len = 0;
  if (curl_easy_perform(c) != CURLE_OK) return -1;
  long status = 0;
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
  return status;
}

int main (int argc, char **argv) {
  const char *bin = argc > 1 ? argv[1] : "build/tidepool";
  int scale = argc > 2 ? atoi(argv[2]) : 1;
  if (scale < 1) scale = 1;
  int fds[2];
  if (pipe(fds) != 0) { perror("bench_mcp_http: pipe"); return 1; }
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 2);
    close(fds[0]);
    close(fds[1]);
    execl(bin, bin, "mcp", "--no-builtin-tools", "--http", "127.0.0.1:0", (char *)NULL);
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
  if (port == 0) {
    fprintf(stderr, "bench_mcp_http: %s did not serve: %s\n", bin, got ? line : "(nothing)");
    return 1;
  }
  char url[100];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/mcp", port);
  curl_global_init(CURL_GLOBAL_DEFAULT);

  buf b = { 0 };
  struct curl_slist *h0 = curl_slist_append(NULL, "Content-Type: application/json");
  h0 = curl_slist_append(h0, "Accept: application/json, text/event-stream");
  CURL *c = easy(url, h0, &b, "{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":"
                 "{\"protocolVersion\":\"2025-11-25\",\"capabilities\":{},\"clientInfo\":"
                 "{\"name\":\"bench\",\"version\":\"1\"}}}");
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
  if (post(c, &b) != 200 || !*session) {
    fprintf(stderr, "bench_mcp_http: initialize failed: %s\n", b.p ? b.p : "");
    return 1;
  }
  char sh[100];
  snprintf(sh, sizeof sh, "Mcp-Session-Id: %s", session);
  struct curl_slist *hdrs = curl_slist_append(NULL, "Content-Type: application/json");
  hdrs = curl_slist_append(hdrs, "Accept: application/json, text/event-stream");
  hdrs = curl_slist_append(hdrs, sh);
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, NULL);
  curl_easy_setopt(c, CURLOPT_POSTFIELDS, call_body);
  for (int i = 0; i < 50; i++) post(c, &b);  /* warm-up */
  if (post(c, &b) != 200 || strstr(b.p, "\"ok\":true") == NULL) {
    fprintf(stderr, "bench_mcp_http: unexpected answer: %s\n", b.p ? b.p : "");
    return 1;
  }
  int n = 400 * scale;
  double *ms = malloc((size_t)n * sizeof *ms);
  for (int i = 0; i < n; i++) {
    double t0 = bench_now_us();
    post(c, &b);
    ms[i] = (bench_now_us() - t0) / 1000;
  }
  double med = median(ms, n);
  printf("http_call_ms: %.3f ms (median of %d, one at a time, keep-alive; p90 %.3f ms)\n",
         med, n, ms[n * 9 / 10]);
  fflush(stdout);

  enum { INFLIGHT = 16 };
  CURLM *multi = curl_multi_init();
  CURL *hs[INFLIGHT];
  buf bs[INFLIGHT];
  memset(bs, 0, sizeof bs);
  int total = 8000 * scale, started = 0, done = 0, failed = 0;
  for (int k = 0; k < INFLIGHT; k++) {
    hs[k] = easy(url, hdrs, &bs[k], call_body);
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
      curl_easy_getinfo(m->easy_handle, CURLINFO_RESPONSE_CODE, &status);
      failed += m->data.result != CURLE_OK || status != 200;
      done++;
      curl_multi_remove_handle(multi, m->easy_handle);
      if (started < total) {
        buf *bb;
        curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&bb);
        bb->len = 0;
        curl_multi_add_handle(multi, m->easy_handle);
        started++;
      }
    }
    if (done < total) curl_multi_poll(multi, NULL, 0, 100, NULL);
  }
  double secs = (bench_now_us() - t0) / 1e6;
  printf("http_calls_per_s: %.0f calls/s (%d calls, 16 in flight on keep-alive connections%s)\n",
         done / secs, done, failed ? ", some failed" : "");
  for (int k = 0; k < INFLIGHT; k++) { curl_easy_cleanup(hs[k]); free(bs[k].p); }
  curl_multi_cleanup(multi);
  curl_easy_cleanup(c);
  curl_slist_free_all(h0);
  curl_slist_free_all(hdrs);
  free(b.p);
  free(ms);
  curl_global_cleanup();
  kill(pid, SIGTERM);
  int st = 0;
  waitpid(pid, &st, 0);
  close(fds[0]);
  return failed ? 1 : 0;
}
