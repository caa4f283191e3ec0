/*
** replay.c: runs that replay exactly (tidepool.h, "durable and deterministic runs"):
** the run's seed and clock, its call log, and answering a replayed run's calls and clock
** reads from a log. See replay.h for the entries.
*/
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>


#include "util.h"
#include "lauxlib.h"

#include "calls.h"
#include "digest.h"
#include "json.h"
#include "replay.h"

static uint64_t splitmix (uint64_t *x) {
  uint64_t z = (*x += UINT64_C(0x9e3779b97f4a7c15));
  z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
  z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
  return z ^ (z >> 31);
}

int tp__replay_get (tp_run *r, tp_replay **out) {
  if (r->rp == NULL) {
    r->rp = calloc(1, sizeof *r->rp);
    if (r->rp == NULL) return TP_ENOMEM;
    r->rp->gating = 1;
    r->rp->on_call = tp__replay_call;
    r->rp->on_end = tp__replay_end;
  }
  *out = r->rp;
  return TP_OK;
}

void tp__replay_free (tp_replay *rp) {
  if (rp == NULL) return;
  for (size_t i = 0; i < rp->ncalls; i++) {
    free(rp->calls[i].tool);
    json_decref(rp->calls[i].result);
    free(rp->calls[i].code);
    free(rp->calls[i].message);
  }
  free(rp->calls);
  for (size_t i = 0; i < rp->nclocks; i++) json_decref(rp->clocks[i].value);
  free(rp->clocks);
  free(rp->order);
  free(rp);
}

/* ---- the public setters ------------------------------------------------------------ */

static int settable (tp_run *r, tp_replay **rp) {
  if (r == NULL) return TP_EINVAL;
  if (r->state != ST_READY) return TP_ESTATE;
  return tp__replay_get(r, rp);
}

int tp_run_set_seed (tp_run *r, uint64_t seed) {
  tp_replay *rp;
  int rc = settable(r, &rp);
  if (rc != TP_OK) return rc;
  rp->has_seed = 1;
  rp->seed = seed;
  return TP_OK;
}

int tp_run_set_clock (tp_run *r, tp_clock_fn fn, void *ud) {
  tp_replay *rp;
  if (fn == NULL) return TP_EINVAL;
  int rc = settable(r, &rp);
  if (rc != TP_OK) return rc;
  rp->clock_kind = 2;
  rp->clock_fn = fn;
  rp->clock_ud = ud;
  return TP_OK;
}

int tp_run_set_fixed_clock (tp_run *r, int64_t epoch, uint64_t step_us) {
  tp_replay *rp;
  int rc = settable(r, &rp);
  if (rc != TP_OK) return rc;
  rp->clock_kind = 1;
  rp->epoch = epoch;
  rp->step_us = step_us;
  return TP_OK;
}

int tp_run_on_log (tp_run *r, tp_log_cb cb, void *ud) {
  tp_replay *rp;
  int rc = settable(r, &rp);
  if (rc != TP_OK) return rc;
  rp->log_cb = cb;
  rp->log_ud = cb ? ud : NULL;
  return TP_OK;
}

/* ---- entries ----------------------------------------------------------------------- */

/* Tells the log callback entry o (stolen; NULL: it could not be made). Returns 0, or
** -1 when cb refused it; 0 without a callback. An entry the host cannot make (out of
** memory) would leave a hole in the log that a replay reads wrong, so the run ends then
** with limit.memory (-2). */
static int emit (tp_run *r, json_t *o) {
  tp_replay *rp = r->rp;
  if (rp->log_cb == NULL) { json_decref(o); return 0; }
  size_t len = 0;
  char *text = o ? tp__json_dumpsn(o, &len) : NULL;
  json_decref(o);
  if (text == NULL) {
    tp__sandbox_kill(r->sb, TP_KILL_MEMORY);
    return -2;
  }
  int rc = rp->log_cb(r, text, len, rp->log_ud);
  free(text);
  return rc != 0 ? -1 : 0;
}

/* s as a JSON string, its bytes that are not UTF-8 made '?' (a script's misspelt tool
** name, a C tool's message); NULL when out of memory. */
static json_t *str (const char *s) {
  json_t *v = json_string(s);
  if (v != NULL || s == NULL) return v;
  char *copy = strdup(s);
  if (copy == NULL) return NULL;
  for (unsigned char *p = (unsigned char *)copy; *p; p++) if (*p >= 0x80) *p = '?';
  v = json_string(copy);
  free(copy);
  return v;
}

/* ---- reading a log ----------------------------------------------------------------- */

static int seq_cmp (const void *a, const void *b) {
  uint64_t x = ((const tp__rcall *)a)->seq, y = ((const tp__rcall *)b)->seq;
  return x < y ? -1 : x > y;
}

static tp__rcall *find_rcall (tp_replay *rp, uint64_t seq) {
  size_t lo = 0, hi = rp->ncalls;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (rp->calls[mid].seq < seq) lo = mid + 1;
    else hi = mid;
  }
  return lo < rp->ncalls && rp->calls[lo].seq == seq ? &rp->calls[lo] : NULL;
}

#define BAD(...) do { snprintf(err, errlen, __VA_ARGS__); return TP_EINVAL; } while (0)

static int get_seq (const json_t *e, uint64_t *seq) {
  const json_t *s = json_object_get(e, "seq");
  if (!json_is_integer(s) || json_integer_value(s) < 1) return -1;
  *seq = (uint64_t)json_integer_value(s);
  return 0;
}

/* Takes entry i of the log into rp. */
static int take_entry (tp_replay *rp, const json_t *e, size_t i, char *err, size_t errlen) {
  const char *type = json_string_value(json_object_get(e, "type"));
  if (!json_is_object(e) || type == NULL)
    BAD("entry %zu is not an object with a \"type\"", i + 1);
  if (strcmp(type, "seed") == 0) {
    const json_t *s = json_object_get(e, "seed");
    if (!json_is_integer(s)) BAD("entry %zu: \"seed\" is not an integer", i + 1);
    rp->has_seed = rp->seed_logged = 1;
    rp->seed = (uint64_t)json_integer_value(s);
    return TP_OK;
  }
  if (strcmp(type, "clock") == 0) {
    const char *k = json_string_value(json_object_get(e, "clock"));
    const json_t *v = json_object_get(e, "value"), *n = json_object_get(e, "n");
    if (k == NULL || (strcmp(k, "time") != 0 && strcmp(k, "cpu") != 0) || !json_is_number(v))
      BAD("entry %zu: a clock entry has \"clock\" (\"time\" or \"cpu\") and a number "
          "\"value\"", i + 1);
    if (!json_is_integer(n) || json_integer_value(n) != (json_int_t)rp->nclocks + 1)
      BAD("entry %zu: clock read %lld follows read %zu (reads are numbered from 1, in "
          "order)", i + 1, json_is_integer(n) ? (long long)json_integer_value(n) : 0LL,
          rp->nclocks);
    rp->clocks[rp->nclocks].cpu = strcmp(k, "cpu") == 0;
    rp->clocks[rp->nclocks++].value = json_incref((json_t *)v);
    return TP_OK;
  }
  uint64_t seq;
  if (strcmp(type, "order") == 0) {
    if (get_seq(e, &seq) != 0) BAD("entry %zu: \"seq\" is not a positive integer", i + 1);
    rp->order[rp->norder++] = seq;
    return TP_OK;
  }
  if (strcmp(type, "call") != 0) BAD("entry %zu: unknown type \"%.40s\"", i + 1, type);
  if (get_seq(e, &seq) != 0) BAD("entry %zu: \"seq\" is not a positive integer", i + 1);
  const json_t *ph = json_object_get(e, "phase");
  json_int_t phase = json_is_integer(ph) ? json_integer_value(ph) : -1;
  tp__rcall *c = find_rcall(rp, seq);
  if (phase == 0) {
    const char *tool = json_string_value(json_object_get(e, "tool"));
    const char *h = json_string_value(json_object_get(e, "args_hash"));
    if (tool == NULL || h == NULL || strlen(h) != 64)
      BAD("entry %zu: a call's phase 0 has \"tool\" and a 64-digit \"args_hash\"", i + 1);
    if (c != NULL) BAD("entry %zu: call %llu is logged twice", i + 1, (unsigned long long)seq);
    if (rp->ncalls && rp->calls[rp->ncalls - 1].seq > seq)
      BAD("entry %zu: call %llu comes after call %llu (calls are logged in order)", i + 1,
          (unsigned long long)seq, (unsigned long long)rp->calls[rp->ncalls - 1].seq);
    c = &rp->calls[rp->ncalls++];
    memset(c, 0, sizeof *c);
    c->seq = seq;
    memcpy(c->hash, h, 65);
    c->tool = strdup(tool);
    if (c->tool == NULL) return TP_ENOMEM;
    if (seq > rp->last_seq) rp->last_seq = seq;
    return TP_OK;
  }
  if (phase != 1) BAD("entry %zu: \"phase\" is 0 or 1", i + 1);
  if (c == NULL)
    BAD("entry %zu: call %llu ends before it starts (no phase 0 entry before it)", i + 1,
        (unsigned long long)seq);
  if (c->has_end) BAD("entry %zu: call %llu ends twice", i + 1, (unsigned long long)seq);
  const json_t *ok = json_object_get(e, "ok");
  if (!json_is_boolean(ok)) BAD("entry %zu: a call's phase 1 has \"ok\"", i + 1);
  c->ok = json_is_true(ok);
  c->sync = json_is_true(json_object_get(e, "sync"));
  if (c->ok) {
    json_t *res = json_object_get(e, "result");
    c->result = json_incref(res ? res : json_null());
  }
  else {
    const json_t *er = json_object_get(e, "error");
    const char *code = json_string_value(json_object_get(er, "code"));
    const char *msg = json_string_value(json_object_get(er, "message"));
    if (code == NULL || msg == NULL)
      BAD("entry %zu: a failed call's phase 1 has \"error\": {\"code\", \"message\"}", i + 1);
    c->code = strdup(code);
    c->message = strdup(msg);
    if (c->code == NULL || c->message == NULL) return TP_ENOMEM;
    const json_t *ra = json_object_get(er, "retry_after_ms");
    if (json_is_integer(ra)) c->retry_after_ms = json_integer_value(ra);
  }
  c->has_end = 1;
  return TP_OK;
}

/* The entries of text: a JSON array, or objects one a line. A new array (caller's). */
static json_t *read_entries (const char *text, size_t len, char *err, size_t errlen) {
  size_t i = 0;
  while (i < len && (text[i] == ' ' || text[i] == '\n' || text[i] == '\r' || text[i] == '\t'))
    i++;
  tp_json_err jerr;
  if (i < len && text[i] == '[') {
    json_t *a = tp__json_loads(text, len, &jerr);
    if (a == NULL) snprintf(err, errlen, "the log is not JSON: %s", jerr.message);
    else if (!json_is_array(a)) { json_decref(a); a = NULL; }
    return a;
  }
  json_t *a = json_array();
  size_t line = 0;
  for (size_t p = 0; a != NULL && p < len; ) {
    const char *nl = memchr(text + p, '\n', len - p);
    size_t end = nl ? (size_t)(nl - text) : len;
    line++;
    size_t q = p;
    while (q < end && (text[q] == ' ' || text[q] == '\r' || text[q] == '\t')) q++;
    if (q < end) {
      json_t *e = tp__json_loads(text + q, end - q, &jerr);
      if (e == NULL || json_array_append_new(a, e) != 0) {
        snprintf(err, errlen, "line %zu of the log is not a JSON entry: %s", line,
                 e ? "out of memory" : jerr.message);
        json_decref(a);
        return NULL;
      }
    }
    p = end + 1;
  }
  return a;
}

int tp_run_replay (tp_run *r, const char *log, size_t len, char *err, size_t errlen) {
  char dummy[1];
  if (err == NULL || errlen == 0) { err = dummy; errlen = sizeof dummy; }
  err[0] = '\0';
  if (log == NULL) return TP_EINVAL;
  tp_replay *rp;
  int rc = settable(r, &rp);
  if (rc != TP_OK) return rc;
  if (rp->replaying) { snprintf(err, errlen, "the run has a log to replay already"); return TP_ESTATE; }
  json_t *a = read_entries(log, len, err, errlen);
  if (a == NULL) {
    if (err[0] == '\0') snprintf(err, errlen, "the log is neither a JSON array of entries "
                                 "nor entries one a line");
    return TP_EINVAL;
  }
  size_t n = json_array_size(a);
  rp->calls = calloc(n + 1, sizeof *rp->calls);
  rp->clocks = calloc(n + 1, sizeof *rp->clocks);
  rp->order = calloc(n + 1, sizeof *rp->order);
  if (rp->calls == NULL || rp->clocks == NULL || rp->order == NULL) rc = TP_ENOMEM;
  for (size_t i = 0; i < n && rc == TP_OK; i++)
    rc = take_entry(rp, json_array_get(a, i), i, err, errlen);
  json_decref(a);
  if (rc == TP_OK) {
    qsort(rp->calls, rp->ncalls, sizeof *rp->calls, seq_cmp);
    rp->replaying = 1;
    return TP_OK;
  }
  /* leave r as it was before: no log */
  tp__replay_free(rp);
  r->rp = NULL;
  return rc;
}

/* ---- the clock and the seed in the sandbox ----------------------------------------- */

static void diverge (tp_run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void diverge (tp_run *r, const char *fmt, ...) {
  char buf[TP_KILL_NOTE_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  tp__sandbox_kill_note(r->sb, TP_KILL_DIVERGENCE, "%s", buf);
}

/* Pushes the value of a clock read (cpu: os.clock's, else os.time's); orig is the stack
** index of the library's own function, for the system's clock. Raises on divergence. */
static void clock_read (lua_State *L, tp_run *r, int cpu, int orig) {
  tp_replay *rp = r->rp;
  uint64_t k = rp->reads++;
  if (rp->clock_at < rp->nclocks) {
    json_t *v = rp->clocks[rp->clock_at].value;
    if (rp->clocks[rp->clock_at].cpu != cpu) {
      diverge(r, "the replay diverged from its log at clock read %llu: the log has a read "
              "of %s, and the script read %s. The script or its inputs changed since the "
              "run was logged: run it afresh instead of resuming it",
              (unsigned long long)k + 1, cpu ? "os.time" : "os.clock",
              cpu ? "os.clock" : "os.time");
      tp__sandbox_check(L, r->sb);
    }
    rp->clock_at++;
    if (json_is_integer(v)) lua_pushinteger(L, (lua_Integer)json_integer_value(v));
    else lua_pushnumber(L, (lua_Number)json_number_value(v));
    return;
  }
  if (rp->clock_kind == 1) {
    double s = (double)(k * rp->step_us) / 1e6;
    if (cpu) lua_pushnumber(L, s);
    else lua_pushinteger(L, (lua_Integer)(rp->epoch + (int64_t)(k * rp->step_us / 1000000u)));
  }
  else if (rp->clock_kind == 2) {
    double s = rp->clock_fn(r, cpu ? TP_CLOCK_CPU : TP_CLOCK_TIME, rp->clock_ud);
    if (cpu) lua_pushnumber(L, s);
    else lua_pushinteger(L, s >= -9.2e18 && s <= 9.2e18 ? (lua_Integer)s - (s < (lua_Integer)s)
                                                      : 0);
  }
  else {
    lua_pushvalue(L, orig);
    lua_call(L, 0, 1);
  }
  if (rp->log_cb) {
    json_t *v = lua_isinteger(L, -1) ? json_integer((json_int_t)lua_tointeger(L, -1))
                                     : json_real((double)lua_tonumber(L, -1));
    if (emit(r, v ? json_pack("{s:s,s:I,s:s,s:o}", "type", "clock", "n", (json_int_t)k + 1,
                              "clock", cpu ? "cpu" : "time", "value", v) : NULL) == -2)
      tp__sandbox_check(L, r->sb);  /* limit.memory */
  }
}

static tp_run *replayed_run (lua_State *L) {
  tp_sandbox *sb = tp__sandbox_of(L);
  return sb && sb->run && sb->run->rp && sb->run->rp->began ? sb->run : NULL;
}

/* Calls the library's own function (upvalue 1) with the arguments as they are. */
static int call_orig (lua_State *L) {
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
  return lua_gettop(L);
}

static int rp_time (lua_State *L) {  /* os.time; upvalue 1: Lua's */
  tp_run *r = replayed_run(L);
  if (r == NULL || !lua_isnoneornil(L, 1)) return call_orig(L);
  lua_settop(L, 0);
  clock_read(L, r, 0, lua_upvalueindex(1));
  return 1;
}

static int rp_clock (lua_State *L) {  /* os.clock; upvalue 1: Lua's */
  tp_run *r = replayed_run(L);
  if (r == NULL) return call_orig(L);
  lua_settop(L, 0);
  clock_read(L, r, 1, lua_upvalueindex(1));
  return 1;
}

static int rp_date (lua_State *L) {  /* os.date; upvalue 1: the sandbox's, 2: os.time */
  tp_run *r = replayed_run(L);
  if (r == NULL || !lua_isnoneornil(L, 2)) return call_orig(L);
  lua_settop(L, 1);
  clock_read(L, r, 0, lua_upvalueindex(2));
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, 2, 1);
  return 1;
}

static int rp_randomseed (lua_State *L) {  /* math.randomseed; upvalue 1: Lua's */
  tp_run *r = replayed_run(L);
  if (r == NULL || !lua_isnone(L, 1)) return call_orig(L);
  uint64_t x = r->rp->seed ^ (++r->rp->reseeds * UINT64_C(0x2545f4914f6cdd1d));
  lua_settop(L, 0);
  lua_pushinteger(L, (lua_Integer)splitmix(&x));
  return call_orig(L);
}

/* In protected mode on the sandbox's main thread: light userdata 1 is the run. A
** session's sandbox keeps the wrappers from its first such run: they read the clock of
** the run that uses the sandbox, if it has a tp_replay, and are Lua's own otherwise. */
static int patch_sandbox (lua_State *L) {
  tp_run *r = lua_touserdata(L, 1);
  tp__sandbox_of(L)->loaded(L, "os");  /* a session may not have built it yet */
  int os = lua_gettop(L);
  lua_getfield(L, os, "time");
  if (lua_tocfunction(L, -1) == rp_time) goto math;  /* wrapped already */
  lua_pushvalue(L, -1);
  lua_pushcclosure(L, rp_time, 1);
  lua_setfield(L, os, "time");           /* Lua's os.time stays on the stack */
  int orig_time = lua_gettop(L);
  lua_getfield(L, os, "clock");
  lua_pushcclosure(L, rp_clock, 1);
  lua_setfield(L, os, "clock");
  lua_getfield(L, os, "date");
  lua_pushvalue(L, orig_time);
  lua_pushcclosure(L, rp_date, 2);
  lua_setfield(L, os, "date");
math:
  tp__sandbox_of(L)->loaded(L, "math");
  int math = lua_gettop(L);
  lua_getfield(L, math, "randomseed");
  int wrapped = lua_tocfunction(L, -1) == rp_randomseed;
  if (wrapped) lua_getupvalue(L, -1, 1);  /* Lua's */
  else lua_pushvalue(L, -1);
  lua_pushinteger(L, (lua_Integer)r->rp->seed);
  lua_pushinteger(L, 0);
  lua_call(L, 2, 0);                     /* seeds math.random */
  if (!wrapped) {
    lua_pushcclosure(L, rp_randomseed, 1);
    lua_setfield(L, math, "randomseed");
  }
  return 0;
}

int tp__replay_begin (tp_run *r, int (*reseed)(tp_run *r, unsigned int seed)) {
  tp_replay *rp = r->rp;
  if (!rp->has_seed) {  /* drawn, and logged when there is a log */
    uint64_t s = 0;
    if (getrandom(&s, sizeof s, GRND_NONBLOCK) != (ssize_t)sizeof s) {
      s = tp__clock_ns(CLOCK_REALTIME) ^ tp__now_ns() << 20 ^ (uint64_t)(uintptr_t)r;
    }
    rp->seed = s;
    rp->has_seed = 1;
  }
  uint64_t x = rp->seed ^ UINT64_C(0x5851f42d4c957f2d);
  if (reseed(r, (unsigned int)splitmix(&x)) != 0) {
    tp__sandbox_kill(r->sb, TP_KILL_MEMORY);
    return -1;
  }
  lua_State *L = r->sb->L;
  lua_pushcfunction(L, patch_sandbox);
  lua_pushlightuserdata(L, r);
  if (lua_pcall(L, 1, 0, 0) != LUA_OK) {
    lua_pop(L, 1);
    tp__sandbox_kill(r->sb, TP_KILL_MEMORY);
    return -1;
  }
  rp->began = 1;
  if (rp->log_cb && !rp->seed_logged)  /* a log without one gets the seed drawn */
    emit(r, json_pack("{s:s,s:I}", "type", "seed", "seed", (json_int_t)rp->seed));
  return 0;
}

/* ---- calls --------------------------------------------------------------------------- */

int tp__replay_call (tp_run *r, tp_call *c) {
  tp_replay *rp = r->rp;
  if (rp->log_cb == NULL && !rp->replaying) return 0;
  char hash[65];
  /* no arguments at all: "null". The codec's text (a call with no tree) is hashed as the
  ** tree's text would be; today a run with a replay never takes the codec's path */
  if (c->args == NULL && !c->args_fast) tp__sha256_hex("null", 4, hash);
  else {
    const char *h = tp__call_args_sha256(c);
    if (h == NULL) {
      tp__call_failf(c, "tool.failed", "the call was not made: the host ran out of memory "
                     "while logging it");
      return 1;
    }
    memcpy(hash, h, sizeof hash);
  }
  tp__rcall *lc = rp->replaying ? find_rcall(rp, c->id) : NULL;
  if (lc != NULL && (strcmp(lc->tool, c->name) != 0 || strcmp(lc->hash, hash) != 0)) {
    int same = strcmp(lc->tool, c->name) == 0;
    diverge(r, "the replay diverged from its log at call %llu: the log has tools.%.128s "
            "with arguments hash %s, and the script called tools.%.128s with %s%s. The "
            "script or its inputs changed since the run was logged: run it afresh instead "
            "of resuming it", (unsigned long long)c->id, lc->tool, lc->hash, c->name,
            same ? "other arguments: hash " : "arguments hash ", hash);
    tp__call_failf(c, "replay.divergence", "%s", r->sb->kill_note);
    return 1;
  }
  if (lc == NULL && rp->replaying && c->id < rp->last_seq) {
    diverge(r, "the replay diverged from its log at call %llu: the log has no call %llu "
            "(that call of the logged run never reached a tool), and the script called "
            "tools.%.128s with arguments hash %s. The script or its inputs changed since "
            "the run was logged: run it afresh instead of resuming it",
            (unsigned long long)c->id, (unsigned long long)c->id, c->name, hash);
    tp__call_failf(c, "replay.divergence", "%s", r->sb->kill_note);
    return 1;
  }
  if (lc != NULL && lc->has_end) {  /* answered from the log */
    c->bytes_in = c->args ? tp__json_dump_len(c->args) : 0;
    if (!lc->sync) c->replay_gate = 1;
    if (!lc->ok) {
      c->retry_after_ms = lc->retry_after_ms;
      tp__call_finish(c, 0, NULL, lc->code, lc->message);
      return 1;
    }
    c->bytes_out = tp__json_dump_len(lc->result);
    tp__call_complete_logged(c, json_incref(lc->result));
    return 1;
  }
  if (lc == NULL && rp->log_cb) {  /* a new call: its first entry */
    int rc = emit(r, json_pack("{s:s,s:I,s:i,s:o,s:s}", "type", "call", "seq",
                               (json_int_t)c->id, "phase", 0, "tool", str(c->name),
                               "args_hash", hash));
    if (rc == -2) {
      tp__call_fail_stopped(c, "the arguments");
      return 1;
    }
    if (rc != 0) {
      tp__call_failf(c, "tool.failed", "tools.%s was not made: the run's call log could "
                     "not be written (the host's store failed), and a durable run makes no "
                     "call it cannot log; try again later", c->name);
      return 1;
    }
  }
  c->logged = rp->log_cb != NULL;
  rp->starting = c;
  return 0;
}

int tp__replay_end (tp_run *r, tp_call *c, int ok, const json_t *result, const char *code,
                    const char *msg) {
  tp_replay *rp = r->rp;
  if (ok && result != NULL) {
    size_t n = tp__json_dump_len(result);
    if (n > TP_LOG_VALUE_MAX) {
      c->bytes_out = n;
      return 1;
    }
  }
  json_t *o, *e = NULL;
  int sync = rp->starting == c;
  if (ok)
    o = json_pack("{s:s,s:I,s:i,s:b,s:b,s:O}", "type", "call", "seq", (json_int_t)c->id,
                  "phase", 1, "ok", 1, "sync", sync,
                  "result", result ? (json_t *)result : json_null());
  else {
    code = code ? code : "tool.failed";
    msg = msg ? msg : "the tool failed";
    e = c->retry_after_ms > 0
        ? json_pack("{s:o,s:o,s:I}", "code", str(code), "message", str(msg),
                    "retry_after_ms", (json_int_t)c->retry_after_ms)
        : json_pack("{s:o,s:o}", "code", str(code), "message", str(msg));
    o = e ? json_pack("{s:s,s:I,s:i,s:b,s:b,s:o}", "type", "call", "seq", (json_int_t)c->id,
                      "phase", 1, "ok", 0, "sync", sync, "error", e) : NULL;
  }
  emit(r, o);  /* out of memory: the run ends with limit.memory */
  return 0;
}

int tp__replay_may_take (tp_run *r, uint64_t id, int first) {
  tp_replay *rp = r->rp;
  tp_call *c = tp__run_find_call(r, id);
  if (first) {
    int take = c == NULL || !c->replay_gate || !rp->gating;
    rp->held |= !take;
    return take;
  }
  if (rp->order_at < rp->norder && rp->order[rp->order_at] == id) {
    rp->order_at++;
    if (c) c->replay_gate = 0;
    return 1;
  }
  if (c != NULL && c->replay_gate && rp->gating) {
    rp->held = 1;
    return 0;
  }
  if (rp->log_cb && (c == NULL || !c->replay_gate))
    emit(r, json_pack("{s:s,s:I}", "type", "order", "seq", (json_int_t)id));
  return 1;
}

void tp__replay_ungate (tp_run *r) {
  r->rp->gating = 0;
}
