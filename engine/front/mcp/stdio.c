/*
** stdio.c: `tidepool mcp` on standard input and output, one JSON-RPC message a line
** (see transport.h). Everything runs on the protocol thread's loop.
*/
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <uv.h>

#include "tidepool.h"
#include "transport.h"

struct tp__mcp_stdio {
  tp__mcp_entries ent;
  uv_loop_t *loop;
  int out;                  /* the protocol's fd (a duplicate of the original fd 1) */
  pthread_mutex_t out_mu;   /* one line at a time: workers write too (emit_any) */
  int out_broken;           /* under out_mu */
  int out_stopped;          /* under out_mu: emit_any drops lines */
  size_t line_max;          /* a longer line is skipped (the server answers -32600) */
  int in_file;              /* read with uv_fs_read (a file, /dev/null...) */
  union { uv_pipe_t pipe; uv_tty_t tty; } in;
  int in_open;
  uv_fs_t fsreq;
  char fsbuf[1 << 16];
  char *line;
  size_t len, cap;
  int skipping;             /* the line is over line_max: drop it up to its '\n' */
  char *stash;              /* input read but not handled while paused */
  size_t stash_len;
  int paused, reading, eof, stopped;
  int freed, pending;       /* freed: once the pending handle and read are done */
};

/* ---- output ------------------------------------------------------------------------ */

static void write_all (tp__mcp_stdio *st, const char *p, size_t n) {
  while (n > 0 && !st->out_broken) {
    ssize_t w = write(st->out, p, n);
    if (w > 0) { p += w; n -= (size_t)w; continue; }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      struct pollfd pfd = { st->out, POLLOUT, 0 };
      poll(&pfd, 1, 1000);
      continue;
    }
    st->out_broken = 1;  /* the client is gone; standard input will close too */
    fprintf(stderr, "tidepool mcp: cannot write to standard output: %s\n", strerror(errno));
  }
}

static void emit_line (tp__mcp_stdio *st, const char *text, size_t len) {
  char *buf = malloc(len + 1);
  pthread_mutex_lock(&st->out_mu);
  if (buf == NULL) { write_all(st, text, len); write_all(st, "\n", 1); }
  else {
    memcpy(buf, text, len);
    buf[len] = '\n';
    write_all(st, buf, len + 1);
  }
  pthread_mutex_unlock(&st->out_mu);
  free(buf);
}

static void stdio_emit (void *ud, void *origin, const char *text, size_t len, int final) {
  (void)origin;
  (void)final;
  emit_line(ud, text, len);
}

static void stdio_emit_any (void *ud, const char *text, size_t len) {
  tp__mcp_stdio *st = ud;
  pthread_mutex_lock(&st->out_mu);
  int stopped = st->out_stopped;
  pthread_mutex_unlock(&st->out_mu);
  if (!stopped) emit_line(st, text, len);
}

/* ---- input ------------------------------------------------------------------------- */

static void stop_reading (tp__mcp_stdio *st) {
  if (!st->reading || st->in_file) return;  /* a file read in flight ends in fs_read_cb */
  st->reading = 0;
  uv_read_stop((uv_stream_t *)&st->in);
}

static void start_reading(tp__mcp_stdio *st);

/* Splits input into lines and hands them to the server; keeps the rest when reading
** pauses. */
static void feed (tp__mcp_stdio *st, const char *p, size_t n) {
  while (n > 0) {
    if (st->paused || st->stopped) {
      char *sh = realloc(st->stash, st->stash_len + n);
      if (sh == NULL) return;  /* out of memory: the input is lost */
      memcpy(sh + st->stash_len, p, n);
      st->stash = sh;
      st->stash_len += n;
      return;
    }
    const char *nl = memchr(p, '\n', n);
    size_t seg = nl ? (size_t)(nl - p) : n;
    if (!st->skipping) {
      if (st->len + seg > st->line_max) {
        st->skipping = 1;
        free(st->line);
        st->line = NULL;
        st->len = st->cap = 0;
      }
      else if (seg > 0) {
        if (st->len + seg + 1 > st->cap) {
          size_t ncap = st->cap ? st->cap : 4096;
          while (ncap < st->len + seg + 1) ncap *= 2;
          char *nb = realloc(st->line, ncap);
          if (nb == NULL) { st->skipping = 1; st->len = 0; }
          else { st->line = nb; st->cap = ncap; }
        }
        if (!st->skipping) { memcpy(st->line + st->len, p, seg); st->len += seg; }
      }
    }
    p += seg;
    n -= seg;
    if (nl == NULL) break;
    p++;
    n--;
    if (st->skipping) {
      st->skipping = 0;
      st->ent.line(st->ent.s, NULL, 0);
    }
    else {
      size_t len = st->len;
      st->len = 0;
      st->ent.line(st->ent.s, st->line, len);
    }
    if (st->len == 0 && st->cap > (1u << 20)) {  /* give a huge line's buffer back */
      free(st->line);
      st->line = NULL;
      st->cap = 0;
    }
  }
}

static void on_eof (tp__mcp_stdio *st) {
  st->eof = 1;
  if (st->skipping) {
    st->skipping = 0;
    st->ent.line(st->ent.s, NULL, 0);
  }
  else if (st->len > 0) {  /* a last line without '\n' */
    size_t len = st->len;
    st->len = 0;
    st->ent.line(st->ent.s, st->line, len);
  }
  st->ent.eof(st->ent.s);
}

static void stdio_release (tp__mcp_stdio *st) {
  if (--st->pending > 0) return;
  pthread_mutex_destroy(&st->out_mu);
  free(st->line);
  free(st->stash);
  free(st);
}

static void alloc_cb (uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  (void)suggested;
  tp__mcp_stdio *st = h->data;
  buf->base = st->fsbuf;
  buf->len = sizeof st->fsbuf;
}

static void read_cb (uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
  tp__mcp_stdio *st = s->data;
  if (n > 0) feed(st, buf->base, (size_t)n);
  else if (n < 0) {
    if (n != UV_EOF) fprintf(stderr, "tidepool mcp: reading standard input: %s\n",
                             uv_strerror((int)n));
    stop_reading(st);
    on_eof(st);
  }
}

static void fs_read_cb (uv_fs_t *r) {
  tp__mcp_stdio *st = r->data;
  ssize_t n = r->result;
  uv_fs_req_cleanup(r);
  st->reading = 0;
  if (st->freed) { stdio_release(st); return; }
  if (n > 0) {
    feed(st, st->fsbuf, (size_t)n);
    if (!st->paused && !st->stopped) start_reading(st);
  }
  else {
    if (n < 0) fprintf(stderr, "tidepool mcp: reading standard input: %s\n", uv_strerror((int)n));
    on_eof(st);
  }
}

static void start_reading (tp__mcp_stdio *st) {
  if (st->reading || st->stopped || st->eof) return;
  st->reading = 1;
  if (st->in_file) {
    uv_buf_t buf = uv_buf_init(st->fsbuf, sizeof st->fsbuf);
    st->fsreq.data = st;
    if (uv_fs_read(st->loop, &st->fsreq, 0, &buf, 1, -1, fs_read_cb) != 0) {
      st->reading = 0;
      on_eof(st);
    }
  }
  else if (uv_read_start((uv_stream_t *)&st->in, alloc_cb, read_cb) != 0) {
    st->reading = 0;
    on_eof(st);
  }
}

static void stdio_pause (void *ud) {
  tp__mcp_stdio *st = ud;
  if (st->paused) return;
  st->paused = 1;
  stop_reading(st);
}

static void stdio_resume (void *ud) {
  tp__mcp_stdio *st = ud;
  if (!st->paused || st->stopped) return;
  st->paused = 0;
  char *sh = st->stash;
  size_t n = st->stash_len;
  st->stash = NULL;
  st->stash_len = 0;
  if (sh) feed(st, sh, n);
  free(sh);
  if (!st->paused) start_reading(st);
}

static void stdio_serve (void *ud, size_t ntools, unsigned nworkers) {
  tp__mcp_stdio *st = ud;
  fprintf(stderr, "tidepool mcp %s: serving on standard input/output (%zu tool%s, %u "
            "worker%s)\n", tp_version(), ntools, ntools == 1 ? "" : "s", nworkers,
            nworkers == 1 ? "" : "s");
  start_reading(st);
}

static void stdio_stop (void *ud) {
  tp__mcp_stdio *st = ud;
  st->stopped = 1;
  stop_reading(st);
  pthread_mutex_lock(&st->out_mu);
  st->out_stopped = 1;
  pthread_mutex_unlock(&st->out_mu);
}

static void in_closed (uv_handle_t *h) { stdio_release(h->data); }

static void stdio_free (void *ud) {
  tp__mcp_stdio *st = ud;
  if (st == NULL) return;
  stdio_stop(st);
  st->freed = 1;
  st->pending = 1;                     /* this call's */
  if (st->in_open) { st->pending++; uv_close((uv_handle_t *)&st->in, in_closed); }
  if (st->in_file && st->reading) { st->pending++; uv_cancel((uv_req_t *)&st->fsreq); }
  stdio_release(st);
}

static int open_input (tp__mcp_stdio *st) {
  uv_handle_type t = uv_guess_handle(0);
  int rc = -1;
  if (t == UV_NAMED_PIPE || t == UV_TCP) {
    rc = uv_pipe_init(st->loop, &st->in.pipe, 0);
    if (rc == 0) {
      st->in_open = 1;
      rc = uv_pipe_open(&st->in.pipe, 0);
    }
  }
  else if (t == UV_TTY) {
    rc = uv_tty_init(st->loop, &st->in.tty, 0, 1);
    if (rc == 0) st->in_open = 1;
  }
  if (rc != 0) st->in_file = 1;  /* a file, /dev/null, or something libuv cannot poll */
  st->in.pipe.data = st;
  return 0;
}

tp__mcp_stdio *tp__mcp_stdio_new (const tp__mcp_entries *ent, void *loop, int out,
                                  size_t line_max) {
  tp__mcp_stdio *st = calloc(1, sizeof *st);
  if (st == NULL) return NULL;
  if (pthread_mutex_init(&st->out_mu, NULL) != 0) { free(st); return NULL; }
  st->ent = *ent;
  st->loop = loop;
  st->out = out;
  st->line_max = line_max;
  open_input(st);
  return st;
}

void tp__mcp_stdio_transport (tp__mcp_stdio *st, tp__mcp_transport *t) {
  memset(t, 0, sizeof *t);
  t->ud = st;
  t->emit = stdio_emit;
  t->emit_any = stdio_emit_any;
  t->pause = stdio_pause;
  t->resume = stdio_resume;
  t->serve = stdio_serve;
  t->stop = stdio_stop;
  t->free = stdio_free;
  t->defer_after_progress = 1;
}
