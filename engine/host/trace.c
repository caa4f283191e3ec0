/*
** trace.c: OpenTelemetry spans (trace.h) and their export: OTLP over HTTP, JSON
** (tp_engine_trace_otlp, the config's telemetry.otlp.endpoint) through libcurl on the
** engine's loop, and JSON lines in a file (tp_engine_trace_file).
**
** A span is recorded as a fixed-size record in a bounded ring when it ends (no JSON, no
** allocation on the call's path); a batch timer on the engine's loop turns the ring into
** one OTLP request and the file's lines. One request is in flight at a time; while it
** is, spans keep going into the ring, and when the ring is full a new span is dropped and
** counted (tp_engine_spans_dropped), as are the spans of a request that failed. Nothing
** here ever waits for the collector, but tp_engine_destroy, which gives what is queued at
** most CLOSE_WAIT_MS to leave.
**
** What spans carry: names, ids, times, codes, counts. Never an argument's value, a result,
** a URL's path or query, or a header (an injected secret lives in headers).
*/
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include <jansson.h>
#include <uv.h>

#include "curl_dl.h"
#include "engine.h"
#include "calls.h"
#include "trace.h"

#define RING_MAX 2048          /* spans queued, at most */
#define BATCH_SPANS 512        /* a batch this large leaves at once */
#define BATCH_MS 500           /* else the first span queued leaves within this */
#define PUMP_MS 5              /* libcurl is stepped this often while a request is out */
#define EXPORT_TIMEOUT_MS 5000 /* one export request, at most */
#define CLOSE_WAIT_MS 1000     /* what tp_engine_destroy gives the last export */
#define NAME_MAX_ 96

enum { SP_RUN = 1, SP_CALL, SP_POLICY, SP_APPROVAL, SP_CHILD };

typedef struct span {
  uint8_t kind, ok, otel_kind, has_parent;
  uint8_t trace_id[16];
  uint64_t id, parent;
  uint64_t start_ns, end_ns;     /* CLOCK_MONOTONIC */
  char name[NAME_MAX_];          /* the tool, or the child span's name */
  char code[40];                 /* an outcome code, or "" */
  int64_t n[6];                  /* numbers, by kind (see encode) */
  char *extra;                   /* attributes as OTLP JSON text ("{...},{...}"), or NULL */
} span;

struct tp__tracer {
  char *url;                     /* OTLP endpoint, or NULL */
  FILE *file;                    /* --trace-file, or NULL */
  int propagate;                 /* pass context on to upstream servers and HTTP hosts */
  char service[64];
  int64_t wall_off_ns;           /* CLOCK_REALTIME - CLOCK_MONOTONIC */
  uint64_t rng[2];
  span *ring;                    /* RING_MAX records, made at the first span */
  size_t head, count;
  uint64_t dropped, exported;
  uv_loop_t *loop;
  uv_timer_t *timer;             /* batch timer; also steps libcurl while a request is out */
  int timer_on;
  CURLM *multi;
  CURL *easy;                    /* the request out, or NULL */
  char *body;                    /* its body */
  size_t body_spans;             /* how many spans it carries */
  struct curl_slist *headers;
};

typedef struct tp__tracer tracer;

/* ---- ids --------------------------------------------------------------------------- */

static uint64_t mix (uint64_t z) {  /* splitmix64's finalizer */
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

static uint64_t rnd (tracer *t) {  /* xorshift128+ */
  uint64_t s1 = t->rng[0];
  const uint64_t s0 = t->rng[1];
  t->rng[0] = s0;
  s1 ^= s1 << 23;
  t->rng[1] = s1 ^ s0 ^ (s1 >> 17) ^ (s0 >> 26);
  uint64_t v = t->rng[1] + s0;
  return v ? v : 1;
}

/* The id of a run's child: the run's span id and the call's id, hashed; kind tells the
** call's span from its policy decision and its approval wait. Never 0. */
static uint64_t child_id (uint64_t run_span, uint64_t call_id, int kind) {
  uint64_t v = mix(run_span ^ mix(call_id * 4 + (uint64_t)kind));
  return v ? v : 1;
}

static int hexval (int c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

static int parse_hex (const char *s, uint8_t *out, size_t n) {
  int any = 0;
  for (size_t i = 0; i < n; i++) {
    int a = hexval(s[2 * i]), b = hexval(s[2 * i + 1]);
    if (a < 0 || b < 0) return -1;
    out[i] = (uint8_t)(a << 4 | b);
    any |= out[i];
  }
  return any ? 0 : -1;  /* all zeros is invalid */
}

/* A W3C traceparent "00-<trace id>-<parent id>-<flags>": 0, or -1 when it is not one. */
static int parse_traceparent (const char *s, uint8_t trace_id[16], uint64_t *parent) {
  uint8_t p[8];
  if (s == NULL || strlen(s) < TP__TRACEPARENT_LEN) return -1;
  if (hexval(s[0]) < 0 || hexval(s[1]) < 0 || (s[0] == 'f' && s[1] == 'f')) return -1;
  if (s[2] != '-' || s[35] != '-' || s[52] != '-') return -1;
  if (hexval(s[53]) < 0 || hexval(s[54]) < 0) return -1;
  if (s[0] == '0' && s[1] == '0' && s[55] != '\0') return -1;  /* version 00 is exact */
  if (parse_hex(s + 3, trace_id, 16) != 0 || parse_hex(s + 36, p, 8) != 0) return -1;
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v = v << 8 | p[i];
  *parent = v;
  return 0;
}

static void hex (char *out, const uint8_t *b, size_t n) {
  static const char d[] = "0123456789abcdef";
  for (size_t i = 0; i < n; i++) { out[2 * i] = d[b[i] >> 4]; out[2 * i + 1] = d[b[i] & 15]; }
  out[2 * n] = '\0';
}

static void hex64 (char *out, uint64_t v) {
  uint8_t b[8];
  for (int i = 7; i >= 0; i--) { b[i] = (uint8_t)v; v >>= 8; }
  hex(out, b, 8);
}

static void make_traceparent (char *out, const uint8_t trace_id[16], uint64_t span_id) {
  memcpy(out, "00-", 3);
  hex(out + 3, trace_id, 16);
  out[35] = '-';
  hex64(out + 36, span_id);
  memcpy(out + 52, "-01", 4);
}

/* ---- the tracer -------------------------------------------------------------------- */

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init (void) { curl_global_init(CURL_GLOBAL_DEFAULT); }

static tracer *tracer_of (tp_engine *e) {
  if (e->tracer != NULL) return e->tracer;
  tracer *t = calloc(1, sizeof *t);
  if (t == NULL) return NULL;
  struct timespec rt, mt;
  clock_gettime(CLOCK_REALTIME, &rt);
  clock_gettime(CLOCK_MONOTONIC, &mt);
  t->wall_off_ns = ((int64_t)rt.tv_sec - (int64_t)mt.tv_sec) * 1000000000LL +
                   ((int64_t)rt.tv_nsec - (int64_t)mt.tv_nsec);
  if (getrandom(t->rng, sizeof t->rng, 0) != (ssize_t)sizeof t->rng) {
    t->rng[0] = (uint64_t)rt.tv_nsec ^ (uint64_t)(uintptr_t)t;
    t->rng[1] = mix((uint64_t)rt.tv_sec ^ (uint64_t)mt.tv_nsec);
  }
  t->rng[0] |= 1;
  t->propagate = 1;
  snprintf(t->service, sizeof t->service, "tidepool");
  t->loop = tp__engine_loop(e);
  e->tracer = t;
  return t;
}

/* Whether spans are being made (an endpoint or a file). */
static int exporting (const tracer *t) { return t != NULL && (t->url || t->file); }

void tp__trace_update (tp_engine *e) {
  e->core.tracing = exporting(e->tracer) || e->audit_on || e->metrics != NULL;
}
#define set_tracing tp__trace_update

int tp_engine_trace_otlp (tp_engine *e, const char *url) {
  if (e == NULL) return TP_EINVAL;
  if (url != NULL && strncmp(url, "http://", 7) != 0 && strncmp(url, "https://", 8) != 0) {
    tp__engine_set_error(e, "the OTLP endpoint must be an http:// or https:// URL, not "
                         "\"%.200s\"", url);
    return TP_EINVAL;
  }
  tracer *t = tracer_of(e);
  if (t == NULL) return TP_ENOMEM;
  char *u = NULL;
  if (url != NULL) {
    size_t n = strlen(url);  /* the traces path is added when the URL has no path */
    const char *path = strchr(strstr(url, "//") + 2, '/');
    u = malloc(n + sizeof "/v1/traces");
    if (u == NULL) return TP_ENOMEM;
    memcpy(u, url, n + 1);
    if (path == NULL || strcmp(path, "/") == 0) {
      if (n && u[n - 1] == '/') u[--n] = '\0';
      memcpy(u + n, "/v1/traces", sizeof "/v1/traces");
    }
  }
  free(t->url);
  t->url = u;
  set_tracing(e);
  return TP_OK;
}

int tp_engine_trace_file (tp_engine *e, const char *path) {
  if (e == NULL) return TP_EINVAL;
  tracer *t = tracer_of(e);
  if (t == NULL) return TP_ENOMEM;
  FILE *f = NULL;
  if (path != NULL) {
    f = fopen(path, "ae");
    if (f == NULL) {
      tp__engine_set_error(e, "cannot open the trace file %.300s", path);
      return TP_EINVAL;
    }
  }
  if (t->file) fclose(t->file);
  t->file = f;
  set_tracing(e);
  return TP_OK;
}

int tp_engine_trace_propagate (tp_engine *e, int on) {
  if (e == NULL) return TP_EINVAL;
  tracer *t = tracer_of(e);
  if (t == NULL) return TP_ENOMEM;
  t->propagate = on != 0;
  return TP_OK;
}

uint64_t tp_engine_spans_dropped (const tp_engine *e) {
  return e && e->tracer ? e->tracer->dropped : 0;
}

uint64_t tp_engine_spans_exported (const tp_engine *e) {
  return e && e->tracer ? e->tracer->exported : 0;
}

/* The config's "telemetry" section: {"otlp": {"endpoint": URL}, "propagate": bool,
** "service_name": NAME}; options given later (tp_engine_trace_otlp) win. */
int tp__trace_configure (tp_engine *e, const json_t *sec) {
  if (sec == NULL) return TP_OK;
  const char *url = json_string_value(json_object_get(json_object_get(sec, "otlp"),
                                                      "endpoint"));
  const json_t *prop = json_object_get(sec, "propagate");
  const char *svc = json_string_value(json_object_get(sec, "service_name"));
  if (url == NULL && prop == NULL && svc == NULL) return TP_OK;
  tracer *t = tracer_of(e);
  if (t == NULL) return TP_ENOMEM;
  if (prop != NULL) t->propagate = json_is_true(prop);
  if (svc != NULL) snprintf(t->service, sizeof t->service, "%s", svc);
  return url ? tp_engine_trace_otlp(e, url) : TP_OK;
}

/* ---- a run's ids --------------------------------------------------------------------- */

/* The run's trace ids, made at the first need. NULL when out of memory. */
static tp__drv_run *run_ids (tracer *t, tp_run *r) {
  tp__drv_run *d = tp__driver_of(r);
  if (d == NULL) return NULL;
  if (d->span_id == 0) {
    if (!d->has_trace) {
      uint64_t a = rnd(t), b = rnd(t);
      for (int i = 0; i < 8; i++) {
        d->trace_id[i] = (uint8_t)(a >> (56 - 8 * i));
        d->trace_id[8 + i] = (uint8_t)(b >> (56 - 8 * i));
      }
      d->has_trace = 1;
    }
    d->span_id = rnd(t);
  }
  return d;
}

void tp__trace_run_key (tp_engine *e, tp_run *r, char *out) {
  tracer *t = tracer_of(e);
  tp__drv_run *d = t ? run_ids(t, r) : NULL;
  if (d) hex64(out, d->span_id);
  else snprintf(out, 17, "%016llx", (unsigned long long)r->id);
}

int tp_run_set_traceparent (tp_run *r, const char *traceparent) {
  if (r == NULL) return TP_EINVAL;
  uint8_t id[16];
  uint64_t parent;
  if (traceparent == NULL || parse_traceparent(traceparent, id, &parent) != 0)
    return TP_EINVAL;  /* the run keeps a trace of its own */
  tp__drv_run *d = tp__driver_of(r);
  if (d == NULL) return TP_ENOMEM;
  memcpy(d->trace_id, id, 16);
  d->has_trace = 1;
  d->parent_id = parent;
  return TP_OK;
}

int tp_run_traceparent (tp_run *r, char *buf, size_t len) {
  if (r == NULL || buf == NULL || len < TP__TRACEPARENT_LEN + 1) return TP_EINVAL;
  tracer *t = r->e->tracer;
  if (!exporting(t) || !r->traced) return TP_ESTATE;
  tp__drv_run *d = run_ids(t, r);
  if (d == NULL) return TP_ENOMEM;
  make_traceparent(buf, d->trace_id, d->span_id);
  return TP_OK;
}

int tp__trace_call_parent (tp_engine *e, const tp_call *c, char *out) {
  tracer *t = e->tracer;
  if (!exporting(t) || !t->propagate || c->run == NULL || !c->run->traced) return 0;
  tp__drv_run *d = run_ids(t, c->run);
  if (d == NULL) return 0;
  make_traceparent(out, d->trace_id, child_id(d->span_id, c->id, SP_CALL));
  return 1;
}

/* ---- recording ----------------------------------------------------------------------- */

static void arm (tracer *t, uint64_t ms);

/* A record to fill in the ring, or NULL when it is full (the span is dropped, counted). */
static span *slot (tracer *t) {
  if (t->ring == NULL) {
    t->ring = calloc(RING_MAX, sizeof *t->ring);
    if (t->ring == NULL) { t->dropped++; return NULL; }
  }
  if (t->count == RING_MAX) { t->dropped++; return NULL; }
  span *s = &t->ring[(t->head + t->count++) % RING_MAX];
  s->extra = NULL;
  s->code[0] = '\0';
  s->has_parent = 1;
  s->otel_kind = 1;
  if (t->count == BATCH_SPANS && t->easy == NULL) arm(t, 0);  /* a full batch leaves */
  else if (!t->timer_on) arm(t, BATCH_MS);
  return s;
}

static void copy_name (char *dst, size_t len, const char *src) {
  size_t n = src ? strnlen(src, len - 1) : 0;
  memcpy(dst, src ? src : "", n);
  dst[n] = '\0';
}

void tp__trace_call_end (void *ud, tp_call *c) {
  tp_engine *e = ud;
  tracer *t = e->tracer;
  tp_run *r = c->run;
  if (r == NULL) return;
  if (!exporting(t)) return;
  tp__drv_run *d = run_ids(t, r);
  span *s = d ? slot(t) : NULL;
  if (s == NULL) return;
  s->kind = SP_CALL;
  s->ok = (uint8_t)c->ok;
  memcpy(s->trace_id, d->trace_id, 16);
  s->id = child_id(d->span_id, c->id, SP_CALL);
  s->parent = d->span_id;
  s->start_ns = c->start_ns;
  s->end_ns = c->end_ns;
  copy_name(s->name, sizeof s->name, c->name);
  if (!c->ok) copy_name(s->code, sizeof s->code, c->code);
  s->n[0] = (int64_t)c->id;
  s->n[1] = c->line;
  s->n[2] = (int64_t)c->bytes_in;
  s->n[3] = (int64_t)c->bytes_out;
  if (c->hold_start_ns && c->hold_end_ns >= c->hold_start_ns) {  /* waited for a person */
    span *w = slot(t);
    if (w == NULL) return;
    w->kind = SP_APPROVAL;
    w->ok = c->hold_end_ns != 0;
    memcpy(w->trace_id, d->trace_id, 16);
    w->id = child_id(d->span_id, c->id, SP_APPROVAL);
    w->parent = d->span_id;
    w->start_ns = c->hold_start_ns;
    w->end_ns = c->hold_end_ns;
    copy_name(w->name, sizeof w->name, c->name);
    w->n[0] = (int64_t)c->id;
  }
}

void tp__trace_policy (tp_engine *e, tp_call *c, uint64_t start_ns, const char *effect,
                       int rule) {
  tracer *t = e->tracer;
  if (!exporting(t) || c->run == NULL) return;
  tp__drv_run *d = run_ids(t, c->run);
  span *s = d ? slot(t) : NULL;
  if (s == NULL) return;
  s->kind = SP_POLICY;
  s->ok = 1;
  memcpy(s->trace_id, d->trace_id, 16);
  s->id = child_id(d->span_id, c->id, SP_POLICY);
  s->parent = d->span_id;
  s->start_ns = start_ns;
  s->end_ns = tp__now_ns();
  copy_name(s->name, sizeof s->name, c->name);
  copy_name(s->code, sizeof s->code, effect);
  s->n[0] = (int64_t)c->id;
  s->n[1] = rule;
}

/* OTLP JSON text of s: "..." with JSON escapes, for names and codes that may hold
** anything a script wrote. */
static void esc (char *out, size_t len, const char *s) {
  size_t o = 0;
  for (; *s && o + 7 < len; s++) {
    unsigned char ch = (unsigned char)*s;
    if (ch == '"' || ch == '\\') { out[o++] = '\\'; out[o++] = (char)ch; }
    else if (ch < 0x20) o += (size_t)snprintf(out + o, len - o, "\\u%04x", ch);
    else out[o++] = (char)ch;
  }
  out[o] = '\0';
}

static int extra_str (char **buf, size_t *len, size_t *cap, const char *key,
                      const char *val) {
  char v[512];
  esc(v, sizeof v, val);
  size_t need = strlen(key) + strlen(v) + 64;
  if (*len + need >= *cap) {
    size_t nc = (*cap ? *cap * 2 : 512) + need;
    char *nb = realloc(*buf, nc);
    if (nb == NULL) return -1;
    *buf = nb;
    *cap = nc;
  }
  *len += (size_t)snprintf(*buf + *len, *cap - *len, "%s{\"key\":\"%s\",\"value\":"
                           "{\"stringValue\":\"%s\"}}", *len ? "," : "", key, v);
  return 0;
}

static int extra_int (char **buf, size_t *len, size_t *cap, const char *key, int64_t val) {
  size_t need = strlen(key) + 80;
  if (*len + need >= *cap) {
    size_t nc = (*cap ? *cap * 2 : 512) + need;
    char *nb = realloc(*buf, nc);
    if (nb == NULL) return -1;
    *buf = nb;
    *cap = nc;
  }
  *len += (size_t)snprintf(*buf + *len, *cap - *len, "%s{\"key\":\"%s\",\"value\":"
                           "{\"intValue\":\"%" PRId64 "\"}}", *len ? "," : "", key, val);
  return 0;
}

/* attrs: a JSON object of strings, integers and booleans, as OTLP attributes text. */
static char *attrs_text (const json_t *attrs) {
  char *buf = NULL;
  size_t len = 0, cap = 0;
  const char *k;
  json_t *v;
  json_object_foreach((json_t *)attrs, k, v) {
    int rc = 0;
    if (json_is_string(v)) rc = extra_str(&buf, &len, &cap, k, json_string_value(v));
    else if (json_is_integer(v)) rc = extra_int(&buf, &len, &cap, k, json_integer_value(v));
    else if (json_is_boolean(v)) rc = extra_str(&buf, &len, &cap, k, json_is_true(v) ?
                                                "true" : "false");
    if (rc != 0) { free(buf); return NULL; }
  }
  return buf;
}

void tp__trace_run_end (void *ud, tp_run *r, const char *code, const json_t *stats) {
  tp_engine *e = ud;
  tracer *t = e->tracer;
  if (!exporting(t)) return;
  tp__drv_run *d = run_ids(t, r);
  span *s = d ? slot(t) : NULL;
  if (s == NULL) return;
  s->kind = SP_RUN;
  s->ok = code == NULL;
  memcpy(s->trace_id, d->trace_id, 16);
  s->id = d->span_id;
  s->parent = d->parent_id;
  s->has_parent = d->parent_id != 0;
  s->start_ns = r->start_ns ? r->start_ns : tp__now_ns();
  s->end_ns = tp__now_ns();
  snprintf(s->name, sizeof s->name, "tidepool.run");
  copy_name(s->code, sizeof s->code, code);
  char *buf = NULL;
  size_t len = 0, cap = 0;
  int rc = extra_int(&buf, &len, &cap, "tidepool.run.id", (int64_t)r->id);
  static const char *const nums[] = { "instructions", "memory_peak", "wall_ms", "cpu_ms" };
  for (size_t i = 0; rc == 0 && i < sizeof nums / sizeof nums[0]; i++) {
    const json_t *v = json_object_get(stats, nums[i]);
    char key[64];
    snprintf(key, sizeof key, "tidepool.run.%s", nums[i]);
    if (json_is_integer(v)) rc = extra_int(&buf, &len, &cap, key, json_integer_value(v));
    else if (json_is_real(v)) rc = extra_int(&buf, &len, &cap, key,
                                             (int64_t)(json_real_value(v) + 0.5));
  }
  s->n[0] = (int64_t)r->ncalls;
  size_t bin = 0, bout = 0;
  for (size_t i = 0; i < r->ncallv; i++)
    if (r->callv[i]) { bin += r->callv[i]->bytes_in; bout += r->callv[i]->bytes_out; }
  if (rc == 0) rc = extra_int(&buf, &len, &cap, "tidepool.run.bytes_in", (int64_t)bin);
  if (rc == 0) rc = extra_int(&buf, &len, &cap, "tidepool.run.bytes_out", (int64_t)bout);
  if (rc == 0 && d->attrs != NULL) {  /* principal, session, limits (tp_run_trace_attr) */
    char *more = attrs_text(d->attrs);
    if (more) {
      size_t ml = strlen(more);
      char *nb = realloc(buf, len + ml + 2);
      if (nb) { buf = nb; buf[len++] = ','; memcpy(buf + len, more, ml + 1); len += ml; }
      free(more);
    }
  }
  s->extra = rc == 0 ? buf : (free(buf), NULL);
}

int tp_run_trace_attr (tp_run *r, const char *key, const char *value) {
  if (r == NULL || key == NULL || value == NULL) return TP_EINVAL;
  tp__drv_run *d = tp__driver_of(r);
  if (d == NULL) return TP_ENOMEM;
  if (d->attrs == NULL && (d->attrs = json_object()) == NULL) return TP_ENOMEM;
  return json_object_set_new(d->attrs, key, json_string(value)) == 0 ? TP_OK : TP_ENOMEM;
}

void tp__trace_child (tp_engine *e, const char *parent, const char *name, int kind,
                      uint64_t start_ns, int ok, const char *status, const json_t *attrs) {
  tracer *t = e->tracer;
  uint8_t id[16];
  uint64_t pid;
  if (!exporting(t) || parse_traceparent(parent, id, &pid) != 0) return;
  span *s = slot(t);
  if (s == NULL) return;
  s->kind = SP_CHILD;
  s->ok = (uint8_t)(ok != 0);
  s->otel_kind = (uint8_t)kind;
  memcpy(s->trace_id, id, 16);
  s->id = rnd(t);
  s->parent = pid;
  s->start_ns = start_ns;
  s->end_ns = tp__now_ns();
  copy_name(s->name, sizeof s->name, name);
  copy_name(s->code, sizeof s->code, status);
  s->extra = attrs ? attrs_text(attrs) : NULL;
}

/* ---- encoding -------------------------------------------------------------------------- */

typedef struct { char *p; size_t len, cap; int oom; } sbuf;

static void put (sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put (sbuf *b, const char *fmt, ...) {
  if (b->oom) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? b->cap - b->len : 0, fmt, ap);
    va_end(ap);
    if (n < 0) { b->oom = 1; return; }
    if (b->p && b->len + (size_t)n < b->cap) { b->len += (size_t)n; return; }
    size_t nc = (b->cap ? b->cap * 2 : 4096) + (size_t)n;
    char *np = realloc(b->p, nc);
    if (np == NULL) { b->oom = 1; return; }
    b->p = np;
    b->cap = nc;
  }
}

/* Appends n bytes of p (no formatting: encode runs once per span on the loop). */
static void app (sbuf *b, const char *p, size_t n) {
  if (b->oom) return;
  if (b->len + n + 1 > b->cap) {
    size_t nc = (b->cap ? b->cap * 2 : 4096) + n;
    char *np = realloc(b->p, nc);
    if (np == NULL) { b->oom = 1; return; }
    b->p = np;
    b->cap = nc;
  }
  memcpy(b->p + b->len, p, n);
  b->len += n;
  b->p[b->len] = '\0';
}

#define APP(b, lit) app((b), lit, sizeof lit - 1)
static void app_s (sbuf *b, const char *s) { app(b, s, strlen(s)); }

static void app_u (sbuf *b, uint64_t v) {
  char d[24];
  int i = sizeof d;
  do { d[--i] = (char)('0' + v % 10); v /= 10; } while (v);
  app(b, d + i, sizeof d - (size_t)i);
}

static void app_i (sbuf *b, int64_t v) {
  if (v < 0) { APP(b, "-"); app_u(b, (uint64_t)0 - (uint64_t)v); }
  else app_u(b, (uint64_t)v);
}

static void attr_s (sbuf *b, const char *k, const char *v, int comma) {
  if (comma) APP(b, ",");
  APP(b, "{\"key\":\"");
  app_s(b, k);
  APP(b, "\",\"value\":{\"stringValue\":\"");
  app_s(b, v);
  APP(b, "\"}}");
}

static void attr_i (sbuf *b, const char *k, int64_t v, int comma) {
  if (comma) APP(b, ",");
  APP(b, "{\"key\":\"");
  app_s(b, k);
  APP(b, "\",\"value\":{\"intValue\":\"");
  app_i(b, v);
  APP(b, "\"}}");
}

/* One span as an OTLP JSON object. */
static void encode (tracer *t, sbuf *b, const span *s) {
  char id[33], code[128], tool[NAME_MAX_ * 6 + 8];
  esc(code, sizeof code, s->code);
  esc(tool, sizeof tool, s->name);
  APP(b, "{\"traceId\":\"");
  hex(id, s->trace_id, 16);
  app(b, id, 32);
  APP(b, "\",\"spanId\":\"");
  hex64(id, s->id);
  app(b, id, 16);
  if (s->has_parent) {
    APP(b, "\",\"parentSpanId\":\"");
    hex64(id, s->parent);
    app(b, id, 16);
  }
  APP(b, "\",\"name\":\"");
  switch (s->kind) {
    case SP_CALL: APP(b, "execute_tool "); break;
    case SP_POLICY: APP(b, "policy "); break;
    case SP_APPROVAL: APP(b, "approval "); break;
    default: break;
  }
  app_s(b, tool);
  APP(b, "\",\"kind\":");
  app_u(b, s->kind == SP_RUN ? 2 : s->otel_kind);
  APP(b, ",\"startTimeUnixNano\":\"");
  app_u(b, (uint64_t)((int64_t)s->start_ns + t->wall_off_ns));
  APP(b, "\",\"endTimeUnixNano\":\"");
  app_u(b, (uint64_t)((int64_t)s->end_ns + t->wall_off_ns));
  APP(b, "\",\"attributes\":[");
  int any = 1;
  switch (s->kind) {
    case SP_RUN:
      attr_s(b, "tidepool.outcome", s->ok ? "ok" : code, 0);
      attr_i(b, "tidepool.run.calls", s->n[0], 1);
      break;
    case SP_CALL:
      attr_s(b, "gen_ai.operation.name", "execute_tool", 0);
      attr_s(b, "gen_ai.tool.name", tool, 1);
      attr_i(b, "tidepool.call.id", s->n[0], 1);
      attr_i(b, "tidepool.call.line", s->n[1], 1);
      attr_i(b, "tidepool.call.bytes_in", s->n[2], 1);
      attr_i(b, "tidepool.call.bytes_out", s->n[3], 1);
      attr_s(b, "tidepool.outcome", s->ok ? "ok" : code, 1);
      if (!s->ok) attr_s(b, "error.type", code, 1);
      break;
    case SP_POLICY:
      attr_s(b, "gen_ai.tool.name", tool, 0);
      attr_s(b, "tidepool.policy.effect", code, 1);
      attr_i(b, "tidepool.policy.rule", s->n[1], 1);
      attr_i(b, "tidepool.call.id", s->n[0], 1);
      break;
    case SP_APPROVAL:
      attr_s(b, "gen_ai.tool.name", tool, 0);
      attr_i(b, "tidepool.call.id", s->n[0], 1);
      break;
    default:
      any = !s->ok && code[0];
      if (any) attr_s(b, "error.type", code, 0);
      break;
  }
  if (s->extra) {
    if (any) APP(b, ",");
    app_s(b, s->extra);
  }
  if (s->ok) APP(b, "],\"status\":{\"code\":1}}");
  else {
    APP(b, "],\"status\":{\"code\":2,\"message\":\"");
    app_s(b, code);
    APP(b, "\"}}");
  }
}

/* ---- export ------------------------------------------------------------------------------ */

static void on_timer (uv_timer_t *h);

static void arm (tracer *t, uint64_t ms) {
  if (t->timer == NULL) {
    t->timer = malloc(sizeof *t->timer);
    if (t->timer == NULL || uv_timer_init(t->loop, t->timer) != 0) {
      free(t->timer);
      t->timer = NULL;
      return;
    }
    t->timer->data = t;  /* referenced: a program that polls its engine's loop sends
                         ** the spans too (tp_engine_run returns when its run is done) */
  }
  uv_timer_start(t->timer, on_timer, ms, 0);
  t->timer_on = 1;
}

static size_t on_reply (char *p, size_t size, size_t n, void *ud) {
  (void)p; (void)ud;
  return size * n;  /* the collector's answer is not kept */
}

/* Takes the queued spans: lines to the file, one request to the endpoint (when none is
** out). Returns how many spans are left in the ring. */
static void take (tracer *t) {
  if (t->count == 0) return;
  if (t->url != NULL && t->easy != NULL) return;  /* one at a time: the ring waits */
  sbuf body = {0};
  char svc[200];
  esc(svc, sizeof svc, t->service);
  if (t->url) put(&body, "{\"resourceSpans\":[{\"resource\":{\"attributes\":[{\"key\":"
                  "\"service.name\",\"value\":{\"stringValue\":\"%s\"}}]},\"scopeSpans\":"
                  "[{\"scope\":{\"name\":\"tidepool\",\"version\":\"%s\"},\"spans\":[",
                  svc, TP_VERSION);
  size_t n = t->count;
  for (size_t i = 0; i < n; i++) {
    span *s = &t->ring[(t->head + i) % RING_MAX];
    if (t->file) {
      sbuf line = {0};
      encode(t, &line, s);
      if (!line.oom) { fwrite(line.p, 1, line.len, t->file); fputc('\n', t->file); }
      free(line.p);
    }
    if (t->url) {
      if (i) put(&body, ",");
      encode(t, &body, s);
    }
    free(s->extra);
    s->extra = NULL;
  }
  t->head = (t->head + n) % RING_MAX;
  t->count = 0;
  if (t->file) fflush(t->file);
  if (t->url == NULL) {  /* the file alone: written is exported */
    if (t->file) t->exported += n;
    else t->dropped += n;
    free(body.p);
    return;
  }
  put(&body, "]}]}]}");
  if (body.oom) { t->dropped += n; free(body.p); return; }
  if (tp__curl_load(NULL, 0) != 0) { t->dropped += n; free(body.p); return; }
  pthread_once(&curl_once, curl_init);
  if (t->multi == NULL) t->multi = curl_multi_init();
  if (t->headers == NULL)
    t->headers = curl_slist_append(NULL, "Content-Type: application/json");
  CURL *c = t->multi && t->headers ? curl_easy_init() : NULL;
  if (c == NULL) { t->dropped += n; free(body.p); return; }
  curl_easy_setopt(c, CURLOPT_URL, t->url);
  curl_easy_setopt(c, CURLOPT_POSTFIELDS, body.p);
  curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body.len);
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, t->headers);
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)EXPORT_TIMEOUT_MS);
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, 2000L);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_reply);
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  if (curl_multi_add_handle(t->multi, c) != CURLM_OK) {
    curl_easy_cleanup(c);
    t->dropped += n;
    free(body.p);
    return;
  }
  t->easy = c;
  t->body = body.p;
  t->body_spans = n;
}

/* Steps the request out; 1 while it is still out. */
static int step (tracer *t) {
  if (t->easy == NULL) return 0;
  int running = 0, left;
  curl_multi_perform(t->multi, &running);
  CURLMsg *m;
  while ((m = curl_multi_info_read(t->multi, &left)) != NULL) {
    if (m->msg != CURLMSG_DONE || m->easy_handle != t->easy) continue;
    long status = 0;
    curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &status);
    if (m->data.result == CURLE_OK && status >= 200 && status < 300)
      t->exported += t->body_spans;
    else t->dropped += t->body_spans;
    curl_multi_remove_handle(t->multi, t->easy);
    curl_easy_cleanup(t->easy);
    t->easy = NULL;
    free(t->body);
    t->body = NULL;
    t->body_spans = 0;
    return 0;
  }
  return 1;
}

static void on_timer (uv_timer_t *h) {
  tracer *t = h->data;
  t->timer_on = 0;
  step(t);
  if (t->easy == NULL) take(t);
  if (t->easy != NULL) arm(t, PUMP_MS);
  else if (t->count) arm(t, BATCH_MS);
}

static void free_handle (uv_handle_t *h) { free(h); }

void tp__trace_close (tp_engine *e) {
  tracer *t = e->tracer;
  if (t == NULL) return;
  uint64_t until = tp__now_ns() + (uint64_t)CLOSE_WAIT_MS * 1000000u;
  for (;;) {  /* what is queued leaves now, within CLOSE_WAIT_MS */
    if (!step(t)) {
      if (t->count == 0 || t->ring == NULL) break;
      take(t);
      if (t->easy == NULL) break;
    }
    if (tp__now_ns() >= until) break;
    curl_multi_poll(t->multi, NULL, 0, 20, NULL);
  }
  if (t->easy) {
    t->dropped += t->body_spans;
    curl_multi_remove_handle(t->multi, t->easy);
    curl_easy_cleanup(t->easy);
    free(t->body);
  }
  if (t->ring) {
    t->dropped += t->count;
    for (size_t i = 0; i < t->count; i++) free(t->ring[(t->head + i) % RING_MAX].extra);
  }
  if (t->multi) curl_multi_cleanup(t->multi);
  if (t->headers) curl_slist_free_all(t->headers);
  if (t->timer) uv_close((uv_handle_t *)t->timer, free_handle);
  if (t->file) fclose(t->file);
  free(t->ring);
  free(t->url);
  free(t);
  e->tracer = NULL;
  tp__trace_update(e);
}
