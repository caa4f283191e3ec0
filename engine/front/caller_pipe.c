/*
** caller_pipe.c: `tidepool run --caller-tools FILE --caller-cmd CMD` (docs/cli.md,
** docs/caller-tools.md). The run's caller tools are answered by a command the shell
** starts (sh -c CMD): each call goes to its standard input as one JSON line,
** {"id", "tool", "args", "timeoutMs"}, and each answer comes back from its standard output
** as one JSON line, {"id", "result"} or {"id", "error": {"message", "code"}}, in any
** order. The command's standard error is the program's. Everything runs on the engine's
** loop: the pipes are libuv handles, so a call waits without blocking the run's clocks.
*/
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <uv.h>

#include "caller_pipe.h"

#define LINE_MAX_BYTES ((size_t)16 << 20)  /* an answer line; longer ones are refused */
#define INFLIGHT_MAX 1024

typedef struct slot { uint64_t id; tp_call *c; } slot;

typedef struct pipe_ctx {
  tp_engine *e;
  uv_loop_t *loop;
  uv_process_t proc;
  uv_pipe_t in, out;        /* the command's standard input (we write), output (we read) */
  int spawned, exited, in_closed, out_closed, handles;
  int64_t status;
  slot calls[INFLIGHT_MAX];
  size_t ncalls;
  char *buf;                /* a partial answer line */
  size_t len, cap;
  int overlong;             /* skipping the rest of a line past LINE_MAX_BYTES */
  char gone[200];           /* why the command can answer no more, or "" */
} pipe_ctx;

static void warn (const char *what) {
  fprintf(stderr, "tidepool: --caller-cmd: %s\n", what);
}

static slot *find (pipe_ctx *p, uint64_t id) {
  for (size_t i = 0; i < p->ncalls; i++) if (p->calls[i].id == id) return &p->calls[i];
  return NULL;
}

static void drop (pipe_ctx *p, slot *s) {
  *s = p->calls[--p->ncalls];
}

/* The command will answer nothing more: every call it has fails. */
static void all_gone (pipe_ctx *p) {
  while (p->ncalls) {
    tp_call *c = p->calls[p->ncalls - 1].c;
    p->ncalls--;
    tp_call_fail(c, "tool.unavailable", p->gone);
  }
}

static void answer_line (pipe_ctx *p, const char *line, size_t n) {
  while (n && (line[n - 1] == '\r' || line[n - 1] == ' ')) n--;
  if (n == 0) return;
  char why[300];
  json_t *a = tp_json_parse(line, n, why, sizeof why);
  json_t *id = json_object_get(a, "id");
  if (a == NULL || !json_is_integer(id)) {
    warn(a == NULL ? "a line that is not JSON was ignored (each answer is one line: "
                           "{\"id\": N, \"result\": ...} or {\"id\": N, \"error\": {\"message\": "
                           "\"...\"}})"
                         : "an answer without an integer \"id\" was ignored");
    json_decref(a);
    return;
  }
  slot *s = find(p, (uint64_t)json_integer_value(id));
  if (s == NULL) {  /* a call that timed out or was answered already */
    json_decref(a);
    return;
  }
  tp_call *c = s->c;
  drop(p, s);
  tp_call_answer_tree(c, a);
  json_decref(a);
}

static void alloc_cb (uv_handle_t *h, size_t suggested, uv_buf_t *b) {
  (void)h;
  b->base = malloc(suggested);
  b->len = b->base ? suggested : 0;
}

static void closed_cb (uv_handle_t *h) {
  pipe_ctx *p = h->data;
  p->handles--;
}

static void read_cb (uv_stream_t *s, ssize_t nread, const uv_buf_t *b) {
  pipe_ctx *p = s->data;
  if (nread < 0) {
    free(b->base);
    if (!p->gone[0])
      snprintf(p->gone, sizeof p->gone, "the caller's command (--caller-cmd) closed its "
               "standard output before answering");
    all_gone(p);
    if (!p->out_closed) { p->out_closed = 1; uv_close((uv_handle_t *)s, closed_cb); }
    return;
  }
  for (ssize_t i = 0; i < nread; i++) {
    char ch = b->base[i];
    if (ch == '\n') {
      if (!p->overlong) answer_line(p, p->buf, p->len);
      p->overlong = 0;
      p->len = 0;
      continue;
    }
    if (p->overlong) continue;
    if (p->len + 1 >= p->cap) {
      size_t ncap = p->cap ? p->cap * 2 : 4096;
      if (ncap > LINE_MAX_BYTES + 1) {
        warn("an answer line over 16 MiB was ignored");
        p->overlong = 1;
        continue;
      }
      char *nb = realloc(p->buf, ncap);
      if (nb == NULL) { warn("out of memory: an answer line was ignored"); p->overlong = 1; continue; }
      p->buf = nb;
      p->cap = ncap;
    }
    p->buf[p->len++] = ch;
  }
  free(b->base);
}

static void exit_cb (uv_process_t *h, int64_t status, int sig) {
  pipe_ctx *p = h->data;
  p->exited = 1;
  p->status = sig ? 128 + sig : status;
  if (!p->gone[0]) {
    char st[32];
    snprintf(st, sizeof st, sig ? "signal %d" : "status %d", sig ? sig : (int)status);
    snprintf(p->gone, sizeof p->gone, "the caller's command (--caller-cmd) exited (%s) "
             "before answering", st);
  }
  uv_close((uv_handle_t *)h, closed_cb);
}

typedef struct wreq { uv_write_t w; char *text; } wreq;

static void write_cb (uv_write_t *w, int status) {
  (void)status;  /* a command gone: its exit fails the calls */
  wreq *r = (wreq *)w;
  free(r->text);
  free(r);
}

/* A call of a caller tool: a line to the command. */
static void on_call (tp_call *c, void *ud) {
  pipe_ctx *p = ud;
  if (p->gone[0] || p->in_closed) { tp_call_fail(c, "tool.unavailable", p->gone[0] ? p->gone
                                    : "the caller's command (--caller-cmd) is not running"); return; }
  if (p->ncalls == INFLIGHT_MAX) {
    tp_call_fail(c, "tool.unavailable", "more than 1024 calls wait on --caller-cmd");
    return;
  }
  const char *args = tp_call_args(c);
  json_t *a = args ? json_loads(args, JSON_DECODE_ANY, NULL) : NULL;
  json_t *line = a ? json_pack("{s:I, s:s, s:o}", "id", (json_int_t)tp_call_id(c), "tool",
                               tp_call_tool(c), "args", a) : NULL;
  char *text = line ? json_dumps(line, JSON_COMPACT) : NULL;
  json_decref(line);
  size_t n = text ? strlen(text) : 0;
  char *t2 = text ? realloc(text, n + 2) : NULL;
  wreq *r = t2 ? malloc(sizeof *r) : NULL;
  if (r == NULL) {
    free(t2 ? t2 : text);
    tp_call_fail(c, NULL, "out of memory");
    return;
  }
  t2[n] = '\n';
  t2[n + 1] = '\0';
  r->text = t2;
  uv_buf_t b = uv_buf_init(t2, (unsigned)(n + 1));
  if (uv_write(&r->w, (uv_stream_t *)&p->in, &b, 1, write_cb) != 0) {
    free(t2);
    free(r);
    tp_call_fail(c, "tool.unavailable", "the caller's command (--caller-cmd) cannot be "
                 "written to");
    return;
  }
  p->calls[p->ncalls].id = tp_call_id(c);
  p->calls[p->ncalls].c = c;
  p->ncalls++;
}

/* A call cut short (its timeout, the run's end): its answer, if it comes, is dropped. */
static void on_cancel (tp_call *c, void *ud) {
  pipe_ctx *p = ud;
  slot *s = find(p, tp_call_id(c));
  if (s == NULL || s->c != c) return;
  drop(p, s);
  tp_call_fail(c, NULL, "cancelled");  /* lets go of it: the run has its outcome */
}

static void run_done (tp_run *r, void *ud) {
  (void)r;
  *(int *)ud = 1;
}

static void kill_cb (uv_timer_t *t) {
  pipe_ctx *p = t->data;
  if (!p->exited) uv_process_kill(&p->proc, SIGKILL);
}

int tp__caller_pipe_run (tp_engine *e, const char *src, size_t len,
                             const tp_limits *lim, const char *decls, size_t dlen,
                             const char *cmd, char **envelope, int *ok) {
  *envelope = NULL;
  *ok = 0;
  pipe_ctx *p = calloc(1, sizeof *p);
  if (p == NULL) return TP_ENOMEM;
  p->e = e;
  p->loop = tp_engine_loop(e);
  tp_engine_start_servers(e, NULL, NULL);
  tp_run *r = tp_run_create(e, src, len, lim);
  if (r == NULL) { free(p); return TP_ENOMEM; }
  int rc = tp_run_declare_caller_tools(r, decls, dlen, cmd ? on_call : NULL, on_cancel, p);
  if (rc != TP_OK) {
    fprintf(stderr, "tidepool: --caller-tools: %s\n", tp_engine_error(e));
    tp_run_destroy(r);
    free(p);
    return TP_EINVAL;
  }
  if (cmd) {
    uv_pipe_init(p->loop, &p->in, 0);
    uv_pipe_init(p->loop, &p->out, 0);
    p->in.data = p->out.data = p->proc.data = p;
    p->handles = 2;
    char sh[] = "/bin/sh", dash_c[] = "-c";
    char *cmd_copy = strdup(cmd);
    char *argv[] = { sh, dash_c, cmd_copy, NULL };
    uv_stdio_container_t io[3];
    io[0].flags = UV_CREATE_PIPE | UV_READABLE_PIPE;
    io[0].data.stream = (uv_stream_t *)&p->in;
    io[1].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
    io[1].data.stream = (uv_stream_t *)&p->out;
    io[2].flags = UV_INHERIT_FD;
    io[2].data.fd = 2;
    uv_process_options_t po = { 0 };
    po.exit_cb = exit_cb;
    po.file = "/bin/sh";
    po.args = argv;
    po.stdio = io;
    po.stdio_count = 3;
    int sr = cmd_copy ? uv_spawn(p->loop, &p->proc, &po) : UV_ENOMEM;
    free(cmd_copy);
    if (sr != 0) {
      snprintf(p->gone, sizeof p->gone, "the caller's command (--caller-cmd) could not start: "
               "%s", uv_strerror(sr));
      uv_close((uv_handle_t *)&p->proc, NULL);
    }
    else {
      p->spawned = 1;
      p->handles++;
      uv_read_start((uv_stream_t *)&p->out, alloc_cb, read_cb);
    }
  }
  int done = 0;
  rc = tp_run_start(r, run_done, &done);
  while (rc == TP_OK && !done) tp_engine_poll(e, 1);
  const char *env = rc == TP_OK ? tp_run_envelope(r) : NULL;
  if (env != NULL && (*envelope = strdup(env)) == NULL) rc = TP_ENOMEM;
  else if (env == NULL && rc == TP_OK) rc = TP_ESTATE;
  *ok = tp_run_ok(r);
  tp_run_destroy(r);
  all_gone(p);
  if (cmd) {  /* EOF to the command; it has 2 s to exit, then SIGKILL */
    p->in_closed = 1;
    uv_close((uv_handle_t *)&p->in, closed_cb);
    if (!p->out_closed) {
      uv_read_stop((uv_stream_t *)&p->out);
      p->out_closed = 1;
      uv_close((uv_handle_t *)&p->out, closed_cb);
    }
    uv_timer_t t;
    uv_timer_init(p->loop, &t);
    t.data = p;
    if (p->spawned) uv_timer_start(&t, kill_cb, 2000, 0);
    while (p->handles > 0) uv_run(p->loop, UV_RUN_ONCE);
    uv_close((uv_handle_t *)&t, NULL);
    uv_run(p->loop, UV_RUN_NOWAIT);
  }
  free(p->buf);
  free(p);
  return rc;
}
