/*
** journal.c: what a run did, even after a crash (tp_engine_audit_calls). Each call's start,
** its hold for a person, and its end (the outcome code) are appended to a file as one JSON
** line each, with one write(2) on a descriptor opened O_APPEND, at the moment they happen:
** the start before the tool runs, the end before the script (and so the caller) sees the
** result. A process that dies (kill -9) leaves in the file every call that started, and
** which of them never ended. `tidepool audit show` reads it back.
**
** A line: {"ts":"2026-11-28T04:01:02.345Z","ev":E,"run":R,"seq":N,...}, where R is the run's
** id in traces (its span id, 16 hex digits: unique across processes) and E is
**   "call"  seq, tool, line          a call started (after its name was resolved)
**   "held"  seq, tool                the policy holds it for a person's decision
**   "end"   seq, tool, ok, code, ms  it ended (code: "ok" or the error code)
**   "run"   ok, code, calls, ms      the run ended
** Never an argument's value (the policy's audit has their hash).
*/
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine.h"
#include "calls.h"
#include "trace.h"

int tp_engine_audit_calls (tp_engine *e, int fd) {
  if (e == NULL) return TP_EINVAL;
  e->audit_fd = fd;
  e->audit_on = fd >= 0;
  tp__trace_update(e);
  return TP_OK;
}

/* name with the characters JSON needs escaped replaced ('?'): tool names a script made up */
static void plain (char *out, size_t len, const char *s) {
  size_t o = 0;
  for (; s && *s && o + 1 < len; s++)
    out[o++] = (*s == '"' || *s == '\\' || (unsigned char)*s < 0x20) ? '?' : *s;
  out[o] = '\0';
}

static void put_line (tp_engine *e, tp_run *r, const char *ev, const char *rest) {
  struct timespec ts;
  struct tm tm;
  char when[40], key[17] = "", line[800];
  clock_gettime(CLOCK_REALTIME, &ts);
  gmtime_r(&ts.tv_sec, &tm);
  strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
  tp__trace_run_key(e, r, key);
  int n = snprintf(line, sizeof line, "{\"ts\":\"%s.%03ldZ\",\"ev\":\"%s\",\"run\":\"%s\",%s}\n",
                   when, ts.tv_nsec / 1000000, ev, key, rest);
  if (n <= 0 || (size_t)n >= sizeof line) return;
  ssize_t w = write(e->audit_fd, line, (size_t)n);
  (void)w;  /* a full disk loses the line; the run goes on */
}

void tp__journal_call (tp_engine *e, tp_call *c, const char *ev) {
  if (!e->audit_on || c->run == NULL) return;
  char tool[300], rest[600];
  plain(tool, sizeof tool, c->name);
  snprintf(rest, sizeof rest, "\"seq\":%llu,\"tool\":\"%s\",\"line\":%d",
           (unsigned long long)c->id, tool, c->line);
  put_line(e, c->run, ev, rest);
}

void tp__journal_end (tp_engine *e, tp_call *c) {
  if (!e->audit_on || c->run == NULL) return;
  char tool[300], code[64], rest[600];
  plain(tool, sizeof tool, c->name);
  plain(code, sizeof code, c->ok ? "ok" : c->code ? c->code : "tool.failed");
  snprintf(rest, sizeof rest, "\"seq\":%llu,\"tool\":\"%s\",\"ok\":%s,\"code\":\"%s\","
           "\"ms\":%.3f", (unsigned long long)c->id, tool, c->ok ? "true" : "false", code,
           (double)(c->end_ns - c->start_ns) / 1e6);
  put_line(e, c->run, "end", rest);
}

void tp__journal_run (tp_engine *e, tp_run *r, const char *code) {
  if (!e->audit_on) return;
  char rest[300], cd[64];
  plain(cd, sizeof cd, code ? code : "ok");
  uint64_t now = tp__now_ns();
  snprintf(rest, sizeof rest, "\"ok\":%s,\"code\":\"%s\",\"calls\":%llu,\"ms\":%.3f",
           code ? "false" : "true", cd, (unsigned long long)r->ncalls,
           r->start_ns ? (double)(now - r->start_ns) / 1e6 : 0.0);
  put_line(e, r, "run", rest);
}
