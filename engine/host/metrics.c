/*
** metrics.c: counters and histograms of an engine (tp_engine_metrics_on) and their
** Prometheus text over several engines (tp_metrics_text): the MCP server runs one engine
** per worker thread, and /metrics sums them.
**
** Each engine's figures have one writer, the engine's thread: increments are relaxed
** atomic loads and stores (plain moves on x86-64, no lock), and the reader (another
** thread, rendering) sees each counter whole. Tools are counted in a table of fixed
** size made at the first count, never moved: a slot's name is published last (release),
** so a reader takes a slot whose name it sees (acquire) as complete. Past the table's
** size, tools count under tool="(other)".
*/
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "calls.h"
#include "trace.h"

#define TOOLS_MAX 512
#define NAME_MAX_ 128
#define UPS_MAX 64                /* upstream servers counted (the config's mcpServers) */
#define NBUCKETS 12
static const double bucket_s[NBUCKETS] = {
  0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60
};
enum { EFF_ALLOW, EFF_DENY, EFF_ASK, EFF_RATE, EFF_N };
static const char *const effects[EFF_N] = { "allow", "deny", "ask", "rate_limited" };

typedef struct hist { uint64_t b[NBUCKETS + 1], count, sum_us; } hist;

/* An upstream MCP server of this engine's (lua/upstream.lua): one copy per engine. */
typedef struct up_ctr {
  const char *name;            /* published last; NULL: the slot is free */
  uint64_t up;                 /* 1 while ready */
  uint64_t restarts;           /* stopped after it had listed its tools, to restart */
} up_ctr;

typedef struct tool_ctr {
  const char *name;            /* published last; NULL: the slot is free */
  uint64_t *by_code;           /* [ncodes + 1]: ok, then each error code */
} tool_ctr;

struct tp__metrics {
  size_t ncodes;               /* tp_code_count() */
  uint64_t *runs_by_code;      /* [ncodes + 1]: ok, then each error code */
  uint64_t runs_before;        /* tp_core.runs_made when counting began */
  uint64_t runs_ended;
  uint64_t policy[EFF_N];
  hist run_h, call_h;
  tool_ctr *tools;             /* TOOLS_MAX slots (open addressing by name) */
  uint64_t *other_by_code;     /* tools past the table */
  char names[TOOLS_MAX][NAME_MAX_];
  up_ctr ups[UPS_MAX];
  hist store_h;                /* state store operations, call to answer */
  uint64_t store_errors[TP_STORE_OP_N];
  char up_names[UPS_MAX][NAME_MAX_];
};

typedef struct tp__metrics metrics;

static inline void inc (uint64_t *p, uint64_t by) {
  __atomic_store_n(p, __atomic_load_n(p, __ATOMIC_RELAXED) + by, __ATOMIC_RELAXED);
}
static inline uint64_t rd (const uint64_t *p) { return __atomic_load_n(p, __ATOMIC_RELAXED); }

int tp_engine_metrics_on (tp_engine *e) {
  if (e == NULL) return TP_EINVAL;
  if (e->metrics) return TP_OK;
  metrics *m = calloc(1, sizeof *m);
  if (m == NULL) return TP_ENOMEM;
  m->ncodes = tp_code_count();
  m->runs_by_code = calloc(m->ncodes + 1, sizeof *m->runs_by_code);
  m->other_by_code = calloc(m->ncodes + 1, sizeof *m->other_by_code);
  m->tools = calloc(TOOLS_MAX, sizeof *m->tools);
  uint64_t *codes = calloc((size_t)TOOLS_MAX * (m->ncodes + 1), sizeof *codes);
  if (!m->runs_by_code || !m->other_by_code || !m->tools || !codes) {
    free(m->runs_by_code); free(m->other_by_code); free(m->tools); free(codes); free(m);
    return TP_ENOMEM;
  }
  for (size_t i = 0; i < TOOLS_MAX; i++) m->tools[i].by_code = codes + i * (m->ncodes + 1);
  m->runs_before = e->core.runs_made;
  e->metrics = m;
  tp__trace_update(e);
  return TP_OK;
}

void tp__metrics_free (tp_engine *e) {
  metrics *m = e->metrics;
  if (m == NULL) return;
  free(m->tools[0].by_code);
  free(m->tools);
  free(m->runs_by_code);
  free(m->other_by_code);
  free(m);
  e->metrics = NULL;
}

/* 0 for NULL ("ok"), else 1 + the code's index; an unknown code counts as tool.failed. */
static size_t code_index (const metrics *m, const char *code) {
  if (code == NULL) return 0;
  size_t failed = 0;
  for (size_t i = 0; i < m->ncodes; i++) {
    const char *c = tp_code_at(i)->code;
    if (strcmp(c, code) == 0) return i + 1;
    if (strcmp(c, "tool.failed") == 0) failed = i + 1;
  }
  return failed;
}

static void observe (hist *h, uint64_t ns) {
  double s = (double)ns / 1e9;
  size_t i = 0;
  while (i < NBUCKETS && s > bucket_s[i]) i++;
  inc(&h->b[i], 1);
  inc(&h->count, 1);
  inc(&h->sum_us, ns / 1000);
}

static uint64_t *tool_slot (metrics *m, const char *name) {
  uint64_t h = 1469598103934665603ULL;
  for (const char *p = name; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ULL;
  for (size_t k = 0; k < TOOLS_MAX; k++) {
    tool_ctr *t = &m->tools[(h + k) % TOOLS_MAX];
    const char *n = __atomic_load_n(&t->name, __ATOMIC_ACQUIRE);
    if (n == NULL) {  /* the owner thread alone inserts */
      size_t i = (size_t)(t - m->tools);
      snprintf(m->names[i], NAME_MAX_, "%s", name);
      __atomic_store_n(&t->name, m->names[i], __ATOMIC_RELEASE);
      return t->by_code;
    }
    if (strncmp(n, name, NAME_MAX_ - 1) == 0) return t->by_code;
    if (k > 16) break;  /* a long probe: count it under (other) */
  }
  return m->other_by_code;
}

void tp__metrics_call (tp_engine *e, const tp_call *c) {
  metrics *m = e->metrics;
  if (m == NULL) return;
  inc(&tool_slot(m, c->name ? c->name : "")[code_index(m, c->ok ? NULL : c->code)], 1);
  observe(&m->call_h, c->end_ns - c->start_ns);
}

void tp__metrics_run (tp_engine *e, tp_run *r, const char *code) {
  metrics *m = e->metrics;
  if (m == NULL) return;
  inc(&m->runs_by_code[code_index(m, code)], 1);
  inc(&m->runs_ended, 1);
  observe(&m->run_h, r->start_ns ? tp__now_ns() - r->start_ns : 0);
}


void tp__metrics_upstream (tp_engine *e, const char *server, int up, int restarted) {
  metrics *m = e->metrics;
  if (m == NULL || server == NULL) return;
  for (size_t i = 0; i < UPS_MAX; i++) {
    up_ctr *u = &m->ups[i];
    const char *n = __atomic_load_n(&u->name, __ATOMIC_ACQUIRE);
    if (n == NULL) {  /* the owner thread alone inserts */
      snprintf(m->up_names[i], NAME_MAX_, "%s", server);
      __atomic_store_n(&u->name, m->up_names[i], __ATOMIC_RELEASE);
    }
    else if (strncmp(n, server, NAME_MAX_ - 1) != 0) continue;
    __atomic_store_n(&u->up, (uint64_t)(up != 0), __ATOMIC_RELAXED);
    if (restarted) inc(&u->restarts, 1);
    return;
  }
}

static const char *const store_ops[TP_STORE_OP_N] = {
  "kv_get", "kv_set", "kv_del", "kv_list", "bucket_take", "run_put", "run_get", "run_del",
  "log_put", "log_read", "session_claim", "session_release"
};

void tp__metrics_store (tp_engine *e, int op, uint64_t ns, int failed) {
  metrics *m = e->metrics;
  if (m == NULL || op < 0 || op >= TP_STORE_OP_N) return;
  observe(&m->store_h, ns);
  if (failed) inc(&m->store_errors[op], 1);
}

void tp__metrics_policy (tp_engine *e, const char *effect) {
  metrics *m = e->metrics;
  if (m == NULL) return;
  for (int i = 0; i < EFF_N; i++)
    if (strcmp(effect, effects[i]) == 0) { inc(&m->policy[i], 1); return; }
}

/* ---- the text ------------------------------------------------------------------------ */

typedef struct { char *p; size_t len, cap; int oom; } out;

static void say (out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say (out *o, const char *fmt, ...) {
  if (o->oom) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(o->p ? o->p + o->len : NULL, o->p ? o->cap - o->len : 0, fmt, ap);
    va_end(ap);
    if (n < 0) { o->oom = 1; return; }
    if (o->p && o->len + (size_t)n < o->cap) { o->len += (size_t)n; return; }
    size_t nc = (o->cap ? o->cap * 2 : 8192) + (size_t)n;
    char *np = realloc(o->p, nc);
    if (np == NULL) { o->oom = 1; return; }
    o->p = np;
    o->cap = nc;
  }
}

/* A label value: \, " and newlines escaped, as the text format asks. */
static void label (char *buf, size_t len, const char *s) {
  size_t o = 0;
  for (; *s && o + 3 < len; s++) {
    if (*s == '\\' || *s == '"') { buf[o++] = '\\'; buf[o++] = *s; }
    else if (*s == '\n') { buf[o++] = '\\'; buf[o++] = 'n'; }
    else buf[o++] = *s;
  }
  buf[o] = '\0';
}

static const char *code_name (size_t i) { return i == 0 ? "ok" : tp_code_at(i - 1)->code; }

static void histogram (out *o, const char *name, const char *help, tp_engine *const *es,
                       size_t n, size_t off) {
  say(o, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
  uint64_t cum = 0, count = 0, sum = 0;
  for (size_t i = 0; i <= NBUCKETS; i++) {
    for (size_t k = 0; k < n; k++)
      if (es[k] && es[k]->metrics) cum += rd(&((hist *)((char *)es[k]->metrics + off))->b[i]);
    if (i < NBUCKETS) say(o, "%s_bucket{le=\"%g\"} %llu\n", name, bucket_s[i],
                          (unsigned long long)cum);
    else say(o, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)cum);
  }
  for (size_t k = 0; k < n; k++) {
    if (es[k] == NULL || es[k]->metrics == NULL) continue;
    hist *h = (hist *)((char *)es[k]->metrics + off);
    count += rd(&h->count);
    sum += rd(&h->sum_us);
  }
  say(o, "%s_sum %.6f\n%s_count %llu\n", name, (double)sum / 1e6, name,
      (unsigned long long)count);
}

/* The sum over the engines of server's field at off (up or restarts). */
static uint64_t up_sum (tp_engine *const *es, size_t n, const char *server, size_t off) {
  uint64_t v = 0;
  for (size_t k = 0; k < n; k++) {
    metrics *m = es[k] ? es[k]->metrics : NULL;
    for (size_t i = 0; m && i < UPS_MAX; i++) {
      const char *un = __atomic_load_n(&m->ups[i].name, __ATOMIC_ACQUIRE);
      if (un && strcmp(un, server) == 0) {
        v += rd((const uint64_t *)((const char *)&m->ups[i] + off));
        break;
      }
    }
  }
  return v;
}

/* tidepool_upstream_up and _restarts_total, a line per server (each once, in the order
** the engines first saw them). Every engine (an MCP worker) runs its own copy. */
static void upstream_series (out *o, tp_engine *const *es, size_t n) {
  for (int pass = 0; pass < 2; pass++) {
    if (pass == 0)
      say(o, "# HELP tidepool_upstream_up Copies of the upstream MCP server that are ready "
          "(one per worker; 0: down on every worker).\n# TYPE tidepool_upstream_up gauge\n");
    else
      say(o, "# HELP tidepool_upstream_restarts_total Times a copy of the upstream MCP server "
          "stopped after it had come up, to be restarted.\n"
          "# TYPE tidepool_upstream_restarts_total counter\n");
    for (size_t k = 0; k < n; k++) {
      metrics *m = es[k] ? es[k]->metrics : NULL;
      for (size_t i = 0; m && i < UPS_MAX; i++) {
        const char *name = __atomic_load_n(&m->ups[i].name, __ATOMIC_ACQUIRE);
        if (name == NULL) break;  /* slots fill in order */
        int seen = 0;  /* listed already under an earlier engine */
        for (size_t j = 0; j < k && !seen; j++) {
          metrics *pm = es[j] ? es[j]->metrics : NULL;
          for (size_t u = 0; pm && u < UPS_MAX && !seen; u++) {
            const char *pn = __atomic_load_n(&pm->ups[u].name, __ATOMIC_ACQUIRE);
            if (pn == NULL) break;
            seen = strcmp(pn, name) == 0;
          }
        }
        if (seen) continue;
        char lab[NAME_MAX_ * 2 + 4];
        label(lab, sizeof lab, name);
        if (pass == 0)
          say(o, "tidepool_upstream_up{server=\"%s\"} %llu\n", lab,
              (unsigned long long)up_sum(es, n, name, offsetof(up_ctr, up)));
        else
          say(o, "tidepool_upstream_restarts_total{server=\"%s\"} %llu\n", lab,
              (unsigned long long)up_sum(es, n, name, offsetof(up_ctr, restarts)));
      }
    }
  }
}

char *tp_metrics_text (tp_engine *const *es, size_t n, size_t *len) {
  out o = {0};
  size_t ncodes = tp_code_count();
  say(&o, "# HELP tidepool_runs_total Runs ended, by outcome (ok or the error code).\n"
      "# TYPE tidepool_runs_total counter\n");
  for (size_t c = 0; c <= ncodes; c++) {
    uint64_t v = 0;
    for (size_t k = 0; k < n; k++)
      if (es[k] && es[k]->metrics) v += rd(&es[k]->metrics->runs_by_code[c]);
    say(&o, "tidepool_runs_total{outcome=\"%s\"} %llu\n", code_name(c), (unsigned long long)v);
  }
  say(&o, "# HELP tidepool_limits_hit_total Runs ended by a limit, by limit.\n"
      "# TYPE tidepool_limits_hit_total counter\n");
  for (size_t c = 1; c <= ncodes; c++) {
    const char *code = code_name(c);
    if (strncmp(code, "limit.", 6) != 0) continue;
    uint64_t v = 0;
    for (size_t k = 0; k < n; k++)
      if (es[k] && es[k]->metrics) v += rd(&es[k]->metrics->runs_by_code[c]);
    say(&o, "tidepool_limits_hit_total{limit=\"%s\"} %llu\n", code + 6, (unsigned long long)v);
  }
  uint64_t started = 0, ended = 0, dropped = 0;
  for (size_t k = 0; k < n; k++) {
    if (es[k] == NULL) continue;
    dropped += tp_engine_spans_dropped(es[k]);
    if (es[k]->metrics == NULL) continue;
    started += __atomic_load_n(&es[k]->core.runs_made, __ATOMIC_RELAXED) -
               rd(&es[k]->metrics->runs_before);
    ended += rd(&es[k]->metrics->runs_ended);
  }
  say(&o, "# HELP tidepool_runs_in_flight Runs started and not ended.\n"
      "# TYPE tidepool_runs_in_flight gauge\ntidepool_runs_in_flight %llu\n",
      (unsigned long long)(started > ended ? started - ended : 0));
  say(&o, "# HELP tidepool_tool_calls_total Tool calls ended, by tool and outcome.\n"
      "# TYPE tidepool_tool_calls_total counter\n");
  for (size_t k = 0; k < n; k++) {  /* a tool's lines per engine would repeat: summed */
    if (es[k] == NULL || es[k]->metrics == NULL) continue;
    metrics *m = es[k]->metrics;
    for (size_t t = 0; t < TOOLS_MAX; t++) {
      const char *name = __atomic_load_n(&m->tools[t].name, __ATOMIC_ACQUIRE);
      if (name == NULL) continue;
      int seen = 0;  /* counted already under an earlier engine */
      for (size_t j = 0; j < k && !seen; j++) {
        metrics *pm = es[j] ? es[j]->metrics : NULL;
        for (size_t u = 0; pm && u < TOOLS_MAX && !seen; u++) {
          const char *pn = __atomic_load_n(&pm->tools[u].name, __ATOMIC_ACQUIRE);
          seen = pn && strcmp(pn, name) == 0;
        }
      }
      if (seen) continue;
      char lab[NAME_MAX_ * 2 + 4];
      label(lab, sizeof lab, name);
      for (size_t c = 0; c <= ncodes; c++) {
        uint64_t v = 0;
        for (size_t j = k; j < n; j++) {
          metrics *jm = es[j] ? es[j]->metrics : NULL;
          for (size_t u = 0; jm && u < TOOLS_MAX; u++) {
            const char *jn = __atomic_load_n(&jm->tools[u].name, __ATOMIC_ACQUIRE);
            if (jn && strcmp(jn, name) == 0) { v += rd(&jm->tools[u].by_code[c]); break; }
          }
        }
        if (v) say(&o, "tidepool_tool_calls_total{tool=\"%s\",outcome=\"%s\"} %llu\n", lab,
                   code_name(c), (unsigned long long)v);
      }
    }
  }
  for (size_t c = 0; c <= ncodes; c++) {
    uint64_t v = 0;
    for (size_t k = 0; k < n; k++)
      if (es[k] && es[k]->metrics) v += rd(&es[k]->metrics->other_by_code[c]);
    if (v) say(&o, "tidepool_tool_calls_total{tool=\"(other)\",outcome=\"%s\"} %llu\n",
               code_name(c), (unsigned long long)v);
  }
  say(&o, "# HELP tidepool_policy_decisions_total Decisions of the config's policy, by "
      "effect.\n# TYPE tidepool_policy_decisions_total counter\n");
  for (int i = 0; i < EFF_N; i++) {
    uint64_t v = 0;
    for (size_t k = 0; k < n; k++)
      if (es[k] && es[k]->metrics) v += rd(&es[k]->metrics->policy[i]);
    say(&o, "tidepool_policy_decisions_total{effect=\"%s\"} %llu\n", effects[i],
        (unsigned long long)v);
  }
  histogram(&o, "tidepool_run_duration_seconds", "Wall time of runs, start to end.", es, n,
            offsetof(metrics, run_h));
  histogram(&o, "tidepool_tool_call_duration_seconds", "Wall time of tool calls.", es, n,
            offsetof(metrics, call_h));
  upstream_series(&o, es, n);
  histogram(&o, "tidepool_store_duration_seconds", "State store operations (kv, paused "
            "runs, call logs, session claims, rate buckets), call to answer.", es, n,
            offsetof(metrics, store_h));
  say(&o, "# HELP tidepool_store_errors_total State store operations that failed (the "
      "backend's error, or the connection closed), by operation.\n"
      "# TYPE tidepool_store_errors_total counter\n");
  for (int op = 0; op < TP_STORE_OP_N; op++) {
    uint64_t v = 0;
    for (size_t k = 0; k < n; k++)
      if (es[k] && es[k]->metrics) v += rd(&es[k]->metrics->store_errors[op]);
    say(&o, "tidepool_store_errors_total{op=\"%s\"} %llu\n", store_ops[op],
        (unsigned long long)v);
  }
  say(&o, "# HELP tidepool_spans_dropped_total Spans dropped: the export queue was full or "
      "an export failed.\n# TYPE tidepool_spans_dropped_total counter\n"
      "tidepool_spans_dropped_total %llu\n", (unsigned long long)dropped);
  if (o.oom) { free(o.p); return NULL; }
  if (len) *len = o.len;
  return o.p;
}
