/*
** calls.c: the life of a tool call as the core keeps it: its record, its outcome, what
** the run holds of it and what that costs the run's host budget, and the C API of
** calls (tp_call_*). The script's side starts calls (namespace.c); the host resolves,
** admits and runs them (host/admit.c), and is told through tp__host_hooks.
*/
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"
#include "lauxlib.h"

#include "calls.h"
#include "codec.h"
#include "digest.h"
#include "replay.h"
#include "json.h"
#include "schema.h"

void tp__run_set_call_hook (tp_run *r, void (*hook)(tp_run *r, const char *tool, int done,
                            void *ud), void *ud) {
  r->call_hook = hook;
  r->call_hook_ud = ud;
}

/* ---- calls ------------------------------------------------------------------------ */

/* What a malloc'd block of n bytes costs the host: glibc's header, 16-byte rounding and
** its smallest chunk. Call records are charged to the run's host budget at this price. */
static size_t block_cost (size_t n) {
  size_t c = (n + 8 + 15) & ~(size_t)15;
  return c < 32 ? 32 : c;
}

/* Charges n bytes of c's record to its run's host budget. Past the budget the verdict
** limit.memory is recorded and nothing is charged: the record stays (it is small), and
** the run ends at its next check. */
static void charge (tp_call *c, size_t n) {
  if (c->run != NULL && tp__host_charge(c->run->sb, n) == 0) c->charged += n;
}

/* Gives back what a freed part of c's record (n bytes) was charged, never more than c
** holds of the budget. */
static void give_back (tp_call *c, size_t n) {
  if (n > c->charged) n = c->charged;
  if (c->run != NULL) tp__host_refund(c->run->sb, n);
  c->charged -= n;
}

size_t tp__cut_utf8 (const char *s, size_t len, size_t max) {
  if (len <= max) return len;
  size_t n = max;
  for (int k = 0; k < 3 && n > 0 && ((unsigned char)s[n] & 0xc0) == 0x80; k++) n--;
  return n;
}

/* A copy of msg, cut to max bytes with TP_MSG_CUT at the end when it is longer; reads
** at most max + 1 bytes of msg. NULL when out of memory. */
static char *dup_cut (const char *msg, size_t max) {
  size_t len = strnlen(msg, max + 1);
  size_t take = tp__cut_utf8(msg, len, max), mark = take < len ? strlen(TP_MSG_CUT) : 0;
  char *m = malloc(take + mark + 1);
  if (m == NULL) return NULL;
  memcpy(m, msg, take);
  memcpy(m + take, TP_MSG_CUT, mark);
  m[take + mark] = '\0';
  return m;
}

/* Frees a call once both its run and its handler are done with it. */
static void call_release (tp_call *c) {
  if (c->run != NULL || c->handler_owns) return;
  json_decref(c->args);
  json_decref(c->result);
  free(c->args_text);
  free(c->fast_text);
  free(c->result_text);
  if (c->name != c->name_in) free(c->name);
  free(c->code);
  free(c->message);
  free(c);
}

#define CODE_MAX 64  /* codes are short identifiers: tool.invalid_input */

/* Lets go of the argument tree (tree) and text (text) and gives back what they were
** charged to the run's host budget. */
static void args_release (tp_call *c, int tree, int text) {
  if (tree && (c->args != NULL || c->args_fast)) {
    json_decref(c->args);
    c->args = NULL;
    free(c->fast_text);
    c->fast_text = NULL;
    c->fast_counts = NULL;
    c->args_fast = 0;
    give_back(c, c->args_cost);
    c->args_cost = 0;
  }
  if (text && c->args_text != NULL) {
    give_back(c, block_cost(strlen(c->args_text) + 1));
    free(c->args_text);
    c->args_text = NULL;
  }
}

/* Lets go of a result tree and gives back its charge. */
static void result_release (tp_call *c) {
  json_decref(c->result);
  c->result = NULL;
  free(c->result_text);
  c->result_text = NULL;
  give_back(c, c->result_cost);
  c->result_cost = 0;
}

/* Records the outcome (results are checked by the caller) and starts queued calls. The
** message is cut to TP_MSG_MAX bytes; code and message are charged to the run. */
void tp__call_finish (tp_call *c, int ok, json_t *result, const char *code, const char *msg) {
  if (c->state == CALL_DONE) { json_decref(result); return; }
  tp_run *r = c->run;
  if (c->logged && r != NULL) {  /* its second entry in the run's log */
    if (r->rp->on_end(r, c, ok, result, code, msg)) {  /* too large to log */
      char buf[TP_MSG_MAX];
      json_decref(result);
      give_back(c, c->result_cost);
      c->result_cost = 0;
      tp__replay_too_large(c, buf, sizeof buf);
      tp__call_finish(c, 0, NULL, "tool.failed", buf);  /* logs this instead */
      return;
    }
    c->logged = 0;
  }
  int was_running = c->state == CALL_RUNNING;
  if (!was_running && !c->handler_owns) args_release(c, 1, 1);  /* no handler will read them */
  c->state = CALL_DONE;
  if (c->end_ns == 0) c->end_ns = tp__now_ns();  /* else its provider read the clock then */
  c->ok = ok;
  c->result = ok ? (result ? result : json_null()) : NULL;
  if (!ok) {
    json_decref(result);
    c->code = dup_cut(code ? code : "tool.failed", CODE_MAX);
    c->message = dup_cut(msg ? msg : "the tool failed", TP_MSG_MAX);
    if (c->code) charge(c, block_cost(strlen(c->code) + 1));
    if (c->message) charge(c, block_cost(strlen(c->message) + 1));
  }
  if (r != NULL && was_running && r->in_flight > 0) r->in_flight--;
  if (r != NULL && !c->consumed) r->ready_count++;
  if (r != NULL && r->call_hook) r->call_hook(r, c->name, 1, r->call_hook_ud);
  if (r != NULL && r->traced) tp__hook(r, trace_call, c);
  if (r != NULL) tp__run_wake(r);
}

/* Fails c with a formatted message; the buffer cuts what is longer (dup_cut cuts
** again to TP_MSG_MAX, marked). Pass text from elsewhere with "%.*s" and a precision of
** TP_MSG_MAX + 1, so that a huge string is not read to its end. */
void tp__call_failf (tp_call *c, const char *code, const char *fmt, ...) {
  char buf[TP_MSG_MAX + 512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  tp__call_finish(c, 0, NULL, code, buf);
}

/* Joins up to the first 8 schema errors into one message ("; and N more"). */
static void schema_message (char *buf, size_t len, const tp_schema_errors *errs) {
  tp__schema_errors_text(errs, 8, buf, len);
}

/* The same for a script's arguments: messages about null say how Lua writes it, JSON's
** null (json.null) first and nil to leave a field out. */
static void args_message (char *buf, size_t len, tp_schema_errors *errs) {
  static const char got_null[] = ", got null";
  for (size_t i = 0; i < errs->count; i++) {
    tp_schema_error *e = &errs->items[i];
    size_t ml = strlen(e->message), gl = sizeof got_null - 1;
    const char *add = NULL;
    if (strcmp(e->keyword, "type") == 0 && ml >= gl && strcmp(e->message + ml - gl, got_null) == 0)
      add = " (json.null): give a value of that type, or nil to leave the field out";
    if (add == NULL) continue;
    size_t al = strlen(add);
    char *m = malloc(ml + al + 1);
    if (m == NULL) continue;
    memcpy(m, e->message, ml);
    memcpy(m + ml, add, al + 1);
    free(e->message);
    e->message = m;
  }
  tp__schema_errors_text(errs, 8, buf, len);
}

/* Validation runs for the script (its arguments, its tools' results), so it polls the
** run's verdict as it goes: it stops once the run has a verdict (the step's timer records
** limit.time and limit.cpu while a step runs) or its wall deadline has passed (a result
** may be checked while the script waits). */
static int validation_stop (void *ud) {
  tp_run *r = ud;
  if (atomic_load(&r->sb->kill) != TP_KILL_NONE) return 1;
  return r->deadline_ns && tp__now_ns() >= r->deadline_ns;
}

/* Validates v against s for run r: 1 valid, 0 invalid (errs), -1 out of memory, -2
** stopped; then the run has a verdict (limit.time recorded if it had none). */
static int validate_for (tp_run *r, const tp_schema *s, const json_t *v,
                         tp_schema_errors *errs) {
  tp_schema_bounds b = { TP_SCHEMA_MAX_ERRORS, validation_stop, r };
  int rc = tp__schema_validate_bounded(s, v, errs, &b);
  if (rc == -2) tp__sandbox_kill(r->sb, TP_KILL_TIME);  /* kept if it had one */
  return rc;
}

/* The error of a call whose validation was stopped by the run's verdict. */
void tp__call_fail_stopped (tp_call *c, const char *what) {
  tp_sandbox *sb = c->run->sb;
  tp_kill why = (tp_kill)atomic_load(&sb->kill);
  char msg[TP_KILL_NOTE_MAX];
  tp__kill_message(sb, why, msg, sizeof msg);
  tp__call_failf(c, tp__kill_code(why), "tools.%s: %s were not checked: %s", c->name, what,
                msg);
}

/* Fails c with tool.timeout, naming the limit that ran out and where it was set. */
void tp__call_timed_out (tp_call *c) {
  char after[32];
  tp_format_value(TP_UNIT_DURATION, c->timeout_us, after, sizeof after);
  tp__call_failf(c, "tool.timeout", "tools.%s timed out after %s (%s)", c->name, after,
                 c->timeout_own ? "the tool's own timeout_ms" : "the tool_timeout limit, "
                 "--tool-timeout");
}

static int call_deadline_passed (tp_call *c, uint64_t now) {
  return c->deadline_ns && now >= c->deadline_ns;
}

/* Hands a call to its handler through the host (or leaves it for tp_run_pending). Its
** timeout counts from now: the call's start when it was not queued. The argument tree
** is not needed once the handler has it (C handlers read the text, a handler that takes
** the tree converts it at once). */
static void dispatch (tp_run *r, tp_call *c, int was_queued) {
  const tp__tool_face *t = c->tool;
  const tp_limits *l = &r->sb->limits;
  c->state = CALL_RUNNING;
  r->in_flight++;
  uint64_t now = was_queued ? tp__now_ns() : c->start_ns;
  uint64_t tmo = l->tool_timeout_us;
  c->timeout_own = 0;
  if (t->timeout_us && (tmo == 0 || t->timeout_us < tmo)) {
    tmo = t->timeout_us;
    c->timeout_own = 1;
  }
  c->timeout_us = tmo;
  c->deadline_ns = tmo ? now + tmo * 1000u : 0;
  int external = (t->flags & TP__TOOL_EXTERNAL) != 0;
  if (!external) {
    c->handler_owns = 1;
    tp__hook(r, dispatch, c);
  }
  /* else: the embedding program completes it (tp_run_pending) */
  int handled = !c->handler_owns && !external;
  if (c->args_text != NULL || handled || (t->flags & TP__TOOL_TREE_ARGS))
    args_release(c, 1, 0);
}

size_t tp__run_active_from (tp_run *r) {
  while (r->active_from < r->ncallv && (r->callv[r->active_from] == NULL ||
                                        r->callv[r->active_from]->state == CALL_DONE))
    r->active_from++;
  return r->active_from;
}

static void start_queued (tp_run *r) {
  uint32_t cap = r->sb->limits.tool_in_flight;
  for (size_t i = tp__run_active_from(r); i < r->ncallv; i++) {
    tp_call *c = r->callv[i];
    if (cap && r->in_flight >= cap) break;
    if (c != NULL && c->state == CALL_QUEUED && !c->cancelled) dispatch(r, c, 1);
  }
}

/* Counts a call of tool t; returns the count so far. */
static uint32_t count_per_tool (tp_run *r, const tp__tool_face *t) {
  for (size_t i = 0; i < r->nper_tool; i++)
    if (r->per_tool[i].tool == t) return ++r->per_tool[i].n;
  void *np = realloc(r->per_tool, (r->nper_tool + 1) * sizeof *r->per_tool);
  if (np == NULL) return UINT32_MAX;
  r->per_tool = np;
  r->per_tool[r->nper_tool].tool = t;
  r->per_tool[r->nper_tool].n = 1;
  return r->per_tool[r->nper_tool++].n;
}

/* ---- the calls a run holds ----------------------------------------------------------
** callv/callid hold, by increasing id, the calls listed in the envelope and the later
** calls not yet let go. A later call is let go once it is done and the script has taken
** it (or at the end of the run): its outcome goes into r->summary, its slot becomes a
** hole, and the holes are squeezed out when they are half the array. So the host keeps
** what the envelope lists, the calls in progress and a fixed set of counters, however
** many calls a run makes (tool_calls = 0 included). The arrays are charged to the host
** budget by capacity (16 bytes a slot).
*/
#define SLOT_COST (sizeof(tp_call *) + sizeof(uint64_t))

static int is_listed (const tp_call *c) { return c->id <= TP_CALLS_LISTED; }

/* The index of call id in callv, or -1. */
static long call_index (const tp_run *r, uint64_t id) {
  size_t lo = 0, hi = r->ncallv;
  /* a script's call is mostly its newest one, looked up three times while it is made and
  ** taken: the last slot first, before the search over the listed calls and the holes */
  if (hi > 0 && r->callid[hi - 1] == id) return r->callv[hi - 1] != NULL ? (long)(hi - 1) : -1;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (r->callid[mid] < id) lo = mid + 1;
    else hi = mid;
  }
  return lo < r->ncallv && r->callid[lo] == id && r->callv[lo] != NULL ? (long)lo : -1;
}

static tp_call *find_call (tp_run *r, uint64_t id) {
  long i = call_index(r, id);
  return i < 0 ? NULL : r->callv[i];
}

/* Adds c's outcome to the summary of the calls past the listed ones. */
static void summary_add (tp_run *r, const tp_call *c) {
  tp_calls_summary *s = &r->summary;
  s->calls++;
  if (!(c->state == CALL_DONE && c->ok)) s->failed++;
  const char *name = c->name ? c->name : "?";
  for (size_t i = 0; i < s->ntools; i++)
    if (strcmp(s->by_tool[i].name, name) == 0) { s->by_tool[i].n++; return; }
  char *copy = s->ntools < TP_CALLS_BY_TOOL ? strdup(name) : NULL;
  if (copy != NULL && tp__host_charge(r->sb, block_cost(strlen(copy) + 1)) != 0) {
    free(copy);  /* past the budget: the verdict is recorded, the count kept */
    copy = NULL;
  }
  if (copy == NULL) { s->other++; return; }
  s->by_tool[s->ntools].name = copy;
  s->by_tool[s->ntools++].n = 1;
}

/* The run lets go of callv[i] (done): its outcome is counted when it is past the listed
** calls, its charge given back, and it is freed unless a handler still owns it. */
static void let_go (tp_run *r, size_t i) {
  tp_call *c = r->callv[i];
  if (!is_listed(c)) summary_add(r, c);
  give_back(c, c->charged);
  r->callv[i] = NULL;
  r->nholes++;
  c->run = NULL;
  call_release(c);
}

/* Squeezes the holes out of callv once they are half of it (amortized O(1) a call). */
static void squeeze (tp_run *r) {
  if (r->nholes < 32 || r->nholes * 2 < r->ncallv) return;
  size_t o = 0;
  for (size_t i = 0; i < r->ncallv; i++) {
    if (r->callv[i] == NULL) continue;
    r->callv[o] = r->callv[i];
    r->callid[o++] = r->callid[i];
  }
  r->ncallv = o;
  r->nholes = 0;
  r->active_from = 0;
}

/* The script has taken c's outcome (or will never get it): what only the script needed
** goes, and a call past the listed ones is let go once done. */
void tp__call_taken (tp_run *r, tp_call *c) {
  if (!c->consumed && c->state == CALL_DONE && r->ready_count > 0) r->ready_count--;
  c->consumed = 1;
  if (c->state != CALL_DONE) return;
  result_release(c);  /* only its size stays, for the envelope */
  if (is_listed(c)) return;  /* its message stays too: the envelope's record shows it */
  long i = call_index(r, c->id);
  if (i < 0) return;
  let_go(r, (size_t)i);
  squeeze(r);
}

/*
** The one door of every tool call a script makes, whatever becomes of it: counts the
** attempt against tool_calls and makes its record. Every later refusal (where Lua cannot
** wait, arguments that are not a table or not JSON, an unknown tool, a schema) happens
** after this, so no call escapes the count. Past the limit the record fails with
** limit.tool_calls and the verdict is recorded (the caller raises it). The host copies
** at most TP_TOOL_NAME_MAX bytes of the name (NUL bytes become '?'). NULL when the host
** is out of memory, with the verdict recorded.
*/
tp_call *tp__call_attempt (tp_run *r, const char *name, size_t nlen, int line) {
  tp_sandbox *sb = r->sb;
  const tp_limits *l = &sb->limits;
  r->ncalls++;
  tp_call *c = calloc(1, sizeof *c);
  size_t take = tp__cut_utf8(name, nlen, TP_TOOL_NAME_MAX);
  char *copy = c == NULL ? NULL : take < sizeof c->name_in ? c->name_in : malloc(take + 1);
  if (copy != NULL && r->ncallv == r->capcallv) {
    size_t ncap = tp__grow_cap(r->capcallv, r->ncallv + 1, sizeof(tp_call *) + sizeof(uint64_t), 16);
    tp_call **nv = NULL;
    uint64_t *ni = NULL;
    if (ncap != 0 && tp__host_charge(sb, (ncap - r->capcallv) * SLOT_COST) == 0) {
      if (r->callv == NULL && ncap <= TP_RUN_CALLS_INLINE) {  /* the run's own slots */
        nv = r->callv = r->callv_in;
        ni = r->callid = r->callid_in;
        r->capcallv = ncap;
      }
      else if (r->callv == r->callv_in) {  /* out of them: to the heap */
        nv = malloc(ncap * sizeof *nv);
        ni = nv ? malloc(ncap * sizeof *ni) : NULL;
        if (ni != NULL) {
          memcpy(nv, r->callv_in, r->ncallv * sizeof *nv);
          memcpy(ni, r->callid_in, r->ncallv * sizeof *ni);
          r->callv = nv;
          r->callid = ni;
          r->capcallv = ncap;
        }
        else {
          free(nv);
          tp__host_refund(sb, (ncap - r->capcallv) * SLOT_COST);
        }
      }
      else {
        nv = realloc(r->callv, ncap * sizeof *nv);
        if (nv != NULL) r->callv = nv;
        ni = nv ? realloc(r->callid, ncap * sizeof *ni) : NULL;
        if (ni != NULL) { r->callid = ni; r->capcallv = ncap; }
        else tp__host_refund(sb, (ncap - r->capcallv) * SLOT_COST);
      }
    }
    if (ni == NULL) {
      if (copy != c->name_in) free(copy);
      copy = NULL;
    }
  }
  if (copy == NULL) {
    free(c);
    tp__sandbox_kill(sb, TP_KILL_MEMORY);
    return NULL;
  }
  for (size_t i = 0; i < take; i++) copy[i] = name[i] ? name[i] : '?';
  copy[take] = '\0';
  c->run = r;
  c->id = ++r->next_call_id;
  c->name = copy;
  c->line = line;
  c->host_ref = LUA_NOREF;
  c->start_ns = tp__now_ns();
  r->callid[r->ncallv] = c->id;
  r->callv[r->ncallv++] = c;
  charge(c, block_cost(sizeof *c) + block_cost(take + 1));
  if (r->call_hook) r->call_hook(r, c->name, 0, r->call_hook_ud);
  if (l->tool_calls && r->ncalls > l->tool_calls) {
    char same[300] = "";
    if (r->same_calls >= 3)
      snprintf(same, sizeof same, "; the last %u calls were all tools.%s with the same "
               "arguments: the loop does not advance (pass on the next page's cursor, or "
               "stop when an answer repeats)", (unsigned)r->same_calls, r->same_tool);
    tp__sandbox_kill_note(sb, TP_KILL_TOOL_CALLS, "the script made more than its limit of "
                          "%u tool calls%s", (unsigned)l->tool_calls, same);
    tp__call_failf(c, "limit.tool_calls", "the script made more than its limit of %u tool "
                  "calls%s", (unsigned)l->tool_calls, same);
  }
  return c;
}

/* Starts call c, counted by tp__call_attempt, with args (stolen: the tree, or NULL).
** nlen: the length of the name the script used; exact: it is all in c->name (not cut,
** no NUL byte), else the name is not looked up. The host resolves the rest
** (tp__host_hooks.call). The call may be complete on return. */
/* A hash of a JSON value, the same for equal values whatever the order of object keys.
** Bounded: *budget nodes and string bytes at most (a call's arguments may be megabytes);
** past it *budget is negative and the hash means nothing. */
static uint64_t json_hash (const json_t *v, int depth, long *budget) {
  uint64_t h = 1469598103934665603u ^ (uint64_t)json_typeof(v);
  const unsigned char *s = NULL;
  size_t n = 0;
  if (--*budget < 0) return 0;
  switch (json_typeof(v)) {
    case JSON_STRING:
      s = (const unsigned char *)json_string_value(v);
      n = json_string_length(v);
      break;
    case JSON_INTEGER: h ^= (uint64_t)json_integer_value(v); h *= 1099511628211u; break;
    case JSON_REAL: { double d = json_real_value(v); uint64_t b; memcpy(&b, &d, 8); h ^= b; break; }
    case JSON_ARRAY: {
      size_t i;
      const json_t *x;
      if (depth < 16) json_array_foreach(v, i, x) {
        h = (h ^ json_hash(x, depth + 1, budget)) * 1099511628211u;
        if (*budget < 0) return 0;
      }
      break;
    }
    case JSON_OBJECT: {
      const char *k;
      const json_t *x;
      uint64_t sum = 0;
      if (depth < 16) json_object_foreach((json_t *)v, k, x) {
        uint64_t kh = 1469598103934665603u;
        for (const char *p = k; *p; p++) kh = (kh ^ (unsigned char)*p) * 1099511628211u;
        sum += (kh ^ json_hash(x, depth + 1, budget)) * 0x9e3779b97f4a7c15u;
        if (*budget < 0) return 0;
      }
      h ^= sum;
      break;
    }
    default: break;
  }
  *budget -= (long)(n / 8);
  for (size_t i = 0; i < n && *budget >= 0; i++) h = (h ^ s[i]) * 1099511628211u;
  return h;
}

/* Counts the calls in a row that are the same tool with the same arguments. */
/* Mixes n bytes at s into h eight at a time: count_same only tells calls apart, and a
** byte at a time was a fifth of a plain call's own instructions. */
static uint64_t mix_bytes (uint64_t h, const char *s, size_t n) {
  uint64_t w;
  for (; n >= 8; s += 8, n -= 8) {
    memcpy(&w, s, 8);
    h = (h ^ w) * 0x9e3779b97f4a7c15u;
    h ^= h >> 29;
  }
  w = n;  /* the tail, with its length: "a" and "a\0" differ */
  memcpy((char *)&w + 1, s, n);
  h = (h ^ w) * 0x9e3779b97f4a7c15u;
  return h ^ (h >> 29);
}

static void count_same (tp_run *r, const char *name, size_t nl, const json_t *args,
                        const char *text, size_t len) {
  long budget = 4096;
  uint64_t h = 0;
  if (text != NULL) {  /* the codec's text: canonical (sorted keys), so equal values match */
    if (len > 32768) budget = -1;
    else h = mix_bytes(1469598103934665603u, text, len);
  }
  else h = json_hash(args ? args : json_null(), 0, &budget);
  if (budget < 0) { r->same_calls = 0; return; }  /* too large to tell cheaply */
  h = mix_bytes(h, name, nl);
  if (r->same_calls > 0 && h == r->same_hash) { r->same_calls++; return; }
  r->same_hash = h;
  r->same_calls = 1;
  if (nl >= sizeof r->same_tool) nl = sizeof r->same_tool - 1;  /* as snprintf cut it */
  memcpy(r->same_tool, name, nl);
  r->same_tool[nl] = '\0';
}

void tp__call_start (tp_run *r, tp_call *c, size_t nlen, int exact, json_t *args) {
  const char *name = c->name;
  c->args = args;
  count_same(r, name, strlen(name), args, c->args_fast ? c->fast_text : NULL, c->fast_len);
  if (exact) {
    if (r->rp != NULL && r->rp->on_call(r, c)) return;  /* answered from a log */
    tp__hook(r, call, c);
    if (r->rp != NULL) r->rp->starting = NULL;
    return;
  }
  tp__call_bind(c, NULL);
  if (nlen > TP_TOOL_NAME_MAX)
    tp__call_failf(c, "tool.unknown", "there is no tool tools.%s...: that name is %zu bytes "
                   "long, and tool names are at most 128 bytes (tools.list() lists the tools "
                   "there are)", name, nlen);
  else
    tp__call_failf(c, "tool.unknown", "there is no tool tools.%s: a tool name has no NUL "
                   "bytes (tools.list() lists the tools there are)", name);
}

/* A handler that takes the tree (TP__TOOL_TREE_ARGS) gets it as it is, so its call
** makes no JSON text, only measures it (bytes_in) when the envelope lists the call; the
** others get the text tp_call_args returns (NULL when out of memory: made later). */
int tp__call_bind (tp_call *c, const tp__tool_face *t) {
  tp_run *r = c->run;
  tp_sandbox *sb = r->sb;
  const tp_limits *l = &sb->limits;
  c->tool = t;
  size_t bytes_in = 0;
  char *args_text = NULL;
  if (c->args == NULL && c->args_fast) {  /* the codec's text: no tree to measure or dump */
    if (t != NULL && (t->flags & TP__TOOL_TREE_ARGS)) bytes_in = is_listed(c) ? c->fast_len : 0;
    else {  /* the handler's text: charged as a text, and no longer the tree's stand-in */
      args_text = c->fast_text;
      bytes_in = c->fast_len;
      c->fast_text = NULL;
      c->fast_counts = NULL;
    }
  }
  else if (c->args != NULL && t != NULL && (t->flags & TP__TOOL_TREE_ARGS)) {
    if (is_listed(c)) bytes_in = tp__json_dump_len(c->args);
  }
  else if (c->args != NULL)
    args_text = tp__json_dumpsn(c->args, &bytes_in);
  c->args_text = args_text;
  c->bytes_in = bytes_in;
  if (args_text) charge(c, block_cost(bytes_in + 1));
  if (t != NULL && l->tool_calls_per_tool &&
      count_per_tool(r, t) > l->tool_calls_per_tool) {
    tp__sandbox_kill_note(sb, TP_KILL_TOOL_CALLS, "the script called tools.%.128s more "
                          "than its limit of %u calls of one tool", c->name,
                          (unsigned)l->tool_calls_per_tool);
    tp__call_failf(c, "limit.tool_calls", "the script called tools.%s more than its limit "
                   "of %u calls of one tool", c->name, (unsigned)l->tool_calls_per_tool);
    return -1;
  }
  return 0;
}

static void admit (tp_call *c) {
  tp_run *r = c->run;
  const tp_limits *l = &r->sb->limits;
  c->state = CALL_QUEUED;
  if (!l->tool_in_flight || r->in_flight < l->tool_in_flight) dispatch(r, c, 0);
}

/* The fast check stays well under the validator's first poll of the run's verdict
** (POLL_WORK units of work), so skipping the validator skips no poll. */
#define FAST_CHECK_COST (16u << 10)

void tp__call_check_admit (tp_call *c) {
  const char *name = c->name;
  tp_schema_errors errs = { 0 };
  const char *text = c->fast_text ? c->fast_text : c->args_text;
  size_t tlen = c->fast_text ? c->fast_len : c->bytes_in;
  if (c->args == NULL && c->args_fast && text != NULL && c->args_cost < FAST_CHECK_COST &&
      tp__codec_simple_ok(text, tlen, tp__schema_simple(c->tool->in_schema))) {
    admit(c);  /* surely valid: the validator would find nothing */
    return;
  }
  const json_t *args = tp__call_args_tree(c);
  int v = args == NULL ? -1 : validate_for(c->run, c->tool->in_schema, args, &errs);
  if (v == -2) {
    tp__call_fail_stopped(c, "the arguments");
    return;
  }
  if (v != 1) {
    char msg[3000];
    if (v == 0) args_message(msg, sizeof msg, &errs);
    else snprintf(msg, sizeof msg, "the arguments could not be checked (out of memory)");
    tp__schema_errors_clear(&errs);
    tp__call_failf(c, "tool.invalid_input", "tools.%s: invalid arguments: %s "
                   "(tools.describe(\"%s\") shows what it takes)", name, msg, name);
    return;
  }
  admit(c);
}

void tp__call_hold (tp_call *c) {
  c->held = 1;
  c->handler_owns = 1;
  c->hold_start_ns = tp__now_ns();
}

void tp__call_deny (tp_call *c, const char *reason) {
  tp__call_failf(c, "tool.denied", "tools.%s was denied by the host's policy: %.*s", c->name,
                 TP_MSG_MAX + 1, reason && *reason ? reason : "no reason given");
}

int tp_call_decide (tp_call *c, int verdict, const char *reason) {
  if (c == NULL || (verdict != TP_POLICY_ALLOW && verdict != TP_POLICY_DENY)) return TP_EINVAL;
  if (!c->held) return TP_ESTATE;
  c->held = 0;
  c->hold_end_ns = tp__now_ns();
  if (c->state != CALL_DECIDING || c->cancelled || c->run == NULL) {
    tp__call_handler_done(c);  /* the run ended meanwhile: the hold lets go of it */
    return TP_ESTATE;
  }
  c->handler_owns = 0;
  if (verdict == TP_POLICY_DENY) tp__call_deny(c, reason);
  else tp__call_check_admit(c);
  return TP_OK;
}

int tp__call_ready (tp_run *r, uint64_t id) {
  tp_call *c = find_call(r, id);
  if (c == NULL) return 1;
  if (c->state != CALL_DONE && call_deadline_passed(c, tp__now_ns())) {
    c->cancelled = 1;
    if (c->handler_owns) tp__hook(r, cancel, c);
    tp__call_timed_out(c);
    start_queued(r);
  }
  return c->state == CALL_DONE;
}

/* The error object a script gets: {code=, message=, tool=} with a tostring. */
void tp__push_error_object (lua_State *L, const char *code, const char *msg,
                               const char *tool) {
  lua_createtable(L, 0, 3);
  lua_pushstring(L, code);
  lua_setfield(L, -2, "code");
  lua_pushstring(L, msg);
  lua_setfield(L, -2, "message");
  lua_pushstring(L, tool);
  lua_setfield(L, -2, "tool");
  if (luaL_getmetatable(L, "tidepool.error") == LUA_TTABLE) lua_setmetatable(L, -2);
  else lua_pop(L, 1);
}

int tp__call_consume (tp_run *r, uint64_t id, lua_State *L, int omt) {
  tp_call *c = find_call(r, id);
  if (c == NULL || c->consumed) {
    tp__push_error_object(L, "tool.failed", "the call's result was lost", "?");
    return 0;
  }
  int ok = c->ok;
  if (c->state == CALL_DONE && r->ready_count > 0) r->ready_count--;
  c->consumed = 1;  /* before anything may raise: the script cannot ask again */
  if (ok && c->result_text != NULL)  /* may raise: c still owns the text */
    tp__codec_push(L, c->result_text, c->result_len, c->result_counts, omt);
  else if (ok) {
    if (json_is_string(c->result) &&
        tp__json_text_like(json_string_value(c->result), json_string_length(c->result)))
      tp__run_note_json_text(r, c->name, json_string_value(c->result),
                             json_string_length(c->result));
    tp__json_push(L, c->result, 0);  /* may raise: c still owns the tree */
  }
  else {
    tp__push_error_object(L, c->code ? c->code : "tool.failed",
                          c->message ? c->message : "the tool failed", c->name);
    if (c->retry_after_ms > 0) {
      lua_pushinteger(L, c->retry_after_ms);
      lua_setfield(L, -2, "retry_after_ms");
    }
  }
  tp__call_taken(r, c);  /* may free c */
  return ok;
}

/* ---- the C API of calls ----------------------------------------------------------- */

const char *tp_call_tool (const tp_call *c) { return c ? c->name : NULL; }
uint64_t tp_call_id (const tp_call *c) { return c ? c->id : 0; }
tp_run *tp_call_run (const tp_call *c) { return c ? c->run : NULL; }
int tp_call_cancelled (const tp_call *c) { return c == NULL || c->cancelled || c->run == NULL; }

int tp_call_progress (tp_call *c, const char *text) {
  if (c == NULL || text == NULL) return TP_EINVAL;
  tp_run *r = c->run;
  if (c->state == CALL_DONE || c->cancelled || r == NULL || r->progress_hook == NULL)
    return TP_OK;
  r->progress_hook(r, c->name, text, r->progress_hook_ud);
  return TP_OK;
}

json_t *tp__call_args_tree (tp_call *c) {
  if (c->args != NULL || !c->args_fast) return c->args;
  if (c->live_L != NULL) {  /* the walk the tree path makes; its cost is charged already */
    tp_json_opts o;
    memset(&o, 0, sizeof o);
    o.max_bytes = c->run ? c->run->sb->limits.tool_bytes : 0;
    c->args = tp__json_from_lua_ex(c->live_L, c->live_idx, &o, NULL);
  }
  else {
    const char *text = c->fast_text ? c->fast_text : c->args_text;
    if (text != NULL) c->args = tp__json_loads(text, strlen(text), NULL);
  }
  if (c->args == NULL && c->run != NULL) tp__sandbox_kill(c->run->sb, TP_KILL_MEMORY);
  return c->args;
}

const char *tp__call_args_sha256 (tp_call *c) {
  if (c->args_sha256[0]) return c->args_sha256;
  if (c->args == NULL && !c->args_fast) return NULL;
  const char *known = c->args_text ? c->args_text : c->args == NULL ? c->fast_text : NULL;
  if (known != NULL) {
    tp__sha256_hex(known, strlen(known), c->args_sha256);
    return c->args_sha256;
  }
  if (tp__call_args_tree(c) == NULL) return NULL;
  size_t len;
  char *text = tp__json_dumpsn(c->args, &len);
  if (text == NULL) return NULL;
  tp__sha256_hex(text, len, c->args_sha256);
  free(text);
  return c->args_sha256;
}

const char *tp_call_args (tp_call *c) {
  if (c == NULL) return NULL;
  /* the codec's text is what the tree's would be (tp__call_args_sha256 hashes either), but
  ** it lives only until the handler has it: a copy, charged as the tree's text is */
  if (c->args_text == NULL && c->args == NULL && c->args_fast && c->fast_text != NULL) {
    c->args_text = strdup(c->fast_text);
    if (c->args_text) charge(c, block_cost(strlen(c->args_text) + 1));
    return c->args_text;
  }
  if (c->args_text == NULL && c->args == NULL && c->args_fast) tp__call_args_tree(c);
  if (c->args_text == NULL && c->args != NULL) {
    c->args_text = tp__json_dumps(c->args);
    if (c->args_text) charge(c, block_cost(strlen(c->args_text) + 1));
  }
  return c->args_text;
}

/* Checks a result and records it; used by C handlers and host.c alike. */
/* text_len: the size of the JSON text the result came from, or 0 to measure it. cost:
** what the tree was charged to the run's host budget already (charged 1), or charged 0
** to charge it here (a refusal ends the run with limit.memory); refunded when the tree
** is freed. */
static int complete (tp_call *c, json_t *result, size_t text_len, size_t cost, int charged) {
  tp_sandbox *sb = c->run ? c->run->sb : NULL;
  if (c->state == CALL_DONE || c->cancelled || c->run == NULL) {
    json_decref(result);
    if (sb) tp__host_refund(sb, cost);
    return TP_ESTATE;
  }
  if (!charged) {
    cost = tp__json_tree_cost(result);  /* O(nodes), capped by tool_bytes of text */
    if (tp__host_charge(sb, cost) != 0) {
      json_decref(result);
      if (atomic_load(&sb->kill) == TP_KILL_MEMORY)  /* this charge's verdict: its words */
        snprintf(sb->kill_note, sizeof sb->kill_note, "tools.%.60s returned a result that "
                 "needs more host memory than the memory limit allows; ask it for less",
                 c->name);
      tp__call_failf(c, "tool.failed", "tools.%s returned a result that needs more host "
                    "memory than the run's memory limit allows", c->name);
      return TP_OK;
    }
  }
  c->result_cost = cost;
  c->charged += cost;
  const tp_limits *l = &c->run->sb->limits;
  size_t n = text_len ? text_len : tp__json_dump_len(result);  /* O(nodes), no text made */
  c->bytes_out = n;
  if (l->tool_bytes && n > l->tool_bytes) {
    json_decref(result);
    give_back(c, c->result_cost);
    c->result_cost = 0;
    tp__call_failf(c, "tool.invalid_output", "tools.%s returned %zu bytes of JSON, over the "
                  "%zu-byte limit of a tool result", c->name, n, l->tool_bytes);
    return TP_OK;
  }
  if (c->tool->out_schema) {
    tp_schema_errors errs = { 0 };
    int v = validate_for(c->run, c->tool->out_schema, result, &errs);
    if (v == -2) {
      json_decref(result);
      tp__call_fail_stopped(c, "the results");
      return TP_OK;
    }
    if (v != 1) {
      char msg[3000];
      if (v == 0) schema_message(msg, sizeof msg, &errs);
      else snprintf(msg, sizeof msg, "out of memory");
      tp__schema_errors_clear(&errs);
      json_decref(result);
      give_back(c, c->result_cost);
      c->result_cost = 0;
      tp__call_failf(c, "tool.invalid_output", "tools.%s returned a result that does not "
                    "match its output schema: %s (a fault of the tool, not the script)",
                    c->name, msg);
      return TP_OK;
    }
  }
  tp__call_finish(c, 1, result, NULL, NULL);
  return TP_OK;
}

void tp__call_complete_logged (tp_call *c, json_t *result) {
  size_t cost = tp__json_tree_cost(result);
  if (tp__host_charge(c->run->sb, cost) != 0) {
    json_decref(result);
    tp__call_failf(c, "tool.failed", "tools.%s's logged result needs more host memory than "
                   "the run's memory limit allows", c->name);
    return;
  }
  c->result_cost = cost;
  c->charged += cost;
  tp__call_finish(c, 1, result, NULL, NULL);
}

tp_call *tp__run_find_call (tp_run *r, uint64_t id) { return find_call(r, id); }

void tp__call_handler_done (tp_call *c) {
  c->handler_owns = 0;
  args_release(c, 0, 1);  /* tp_call_args is valid until the call is completed */
  tp_run *r = c->run;
  if (r != NULL) start_queued(r);
  call_release(c);
}

int tp__call_complete_tree (tp_call *c, json_t *result) {
  if (c == NULL) { json_decref(result); return TP_EINVAL; }
  int rc = complete(c, result, 0, 0, 0);
  tp__call_handler_done(c);
  return rc;
}

int tp__call_complete_charged (tp_call *c, json_t *result, size_t cost) {
  if (c == NULL) { json_decref(result); return TP_EINVAL; }
  int rc = complete(c, result, 0, cost, 1);
  tp__call_handler_done(c);
  return rc;
}

/* Keeps text (malloc'd, taken: freed here when not kept) as c's result, checked by
** tp__codec_answer_ok (which gave ncont), with cost charged already: 1, or 0 when it is
** not kept (then nothing changed and text is freed; the cost is the caller's to refund).
** counted: the block holds the containers' sizes already, after the text (made by
** tp__codec_encode, or by tp_call_complete in place). */
static int keep_text (tp_call *c, char *text, size_t len, size_t ncont, size_t cost,
                      int counted) {
  size_t at = (len + 1 + sizeof(int) - 1) / sizeof(int) * sizeof(int);
  char *block = counted ? text
              : ncont > 0 && ncont < (1u << 20) ? realloc(text, at + ncont * sizeof(int)) : NULL;
  if (block == NULL) { free(text); return 0; }
  block[len] = '\0';
  if (!counted) tp__codec_answer_counts(block, len, (int *)(void *)(block + at));
  c->result_text = block;
  c->result_counts = (const int *)(void *)(block + at);
  c->result_len = len;
  c->result_cost = cost;
  c->charged += cost;
  c->bytes_out = len;
  tp__call_finish(c, 1, NULL, NULL, NULL);
  tp__call_handler_done(c);
  return 1;
}

int tp__call_lua_answer (tp_call *c, lua_State *L, int idx, tp__call_answer *a) {
  if (c == NULL || c->state == CALL_DONE || c->cancelled || c->run == NULL || tp__codec_off ||
      c->run->rp != NULL || c->tool == NULL || c->tool->out_schema != NULL) return 0;
  tp_sandbox *sb = c->run->sb;
  size_t max = sb->limits.tool_bytes;
  tp__codec_text ct;
  if (!tp__codec_encode(L, idx, max, 1, &ct)) return 0;
  size_t ncont = ct.counts != NULL ? ct.ncont : 0;  /* counted while encoding */
  if ((max && ct.len > max) ||
      (ncont == 0 && (ncont = tp__codec_answer_ok(ct.text, ct.len)) == 0) ||
      (sb->host_cap && (ct.cost > sb->host_cap || sb->host_used > sb->host_cap - ct.cost))) {
    free(ct.text);  /* the tree path says what is wrong, in its words */
    return 0;
  }
  tp__host_charge(sb, ct.cost);  /* what the walk charges for the tree, in one charge */
  a->text = ct.text;
  a->len = ct.len;
  a->ncont = ncont;
  a->cost = ct.cost;
  a->counted = ct.counts != NULL;
  return 1;
}

void tp__call_complete_answer (tp_call *c, tp__call_answer *a) {
  if (c->state == CALL_DONE || c->cancelled || c->run == NULL ||
      !keep_text(c, a->text, a->len, a->ncont, a->cost, a->counted)) {  /* kept nothing */
    if (c->run != NULL) tp__host_refund(c->run->sb, a->cost);
    if (c->state == CALL_DONE || c->cancelled || c->run == NULL) free(a->text);  /* not kept */
    else tp__call_failf(c, "tool.failed", "tools.%s: the host ran out of memory while "
                        "keeping the result", c->name);
    tp__call_handler_done(c);
  }
}

const char *tp__call_args_text_push (tp_call *c, size_t *len, int counts[64]) {
  if (c->args != NULL || !c->args_fast) return NULL;
  if (c->fast_text != NULL && c->fast_counts != NULL && c->fast_ncont <= 64) {
    memcpy(counts, c->fast_counts, c->fast_ncont * sizeof(int));  /* the encoder's count */
    *len = c->fast_len;
    return c->fast_text;
  }
  const char *text = c->fast_text ? c->fast_text : c->args_text;
  size_t n = text ? strlen(text) : 0;
  size_t ncont = text ? tp__codec_answer_ok(text, n) : 0;
  if (ncont == 0 || ncont > 64) return NULL;
  tp__codec_answer_counts(text, n, counts);
  *len = n;
  return text;
}

int tp_call_complete (tp_call *c, const char *result_json, size_t len) {
  if (c == NULL || result_json == NULL) return TP_EINVAL;
  if (c->state == CALL_DONE && !c->handler_owns) return TP_ESTATE;
  if (len == 0) len = strlen(result_json);
  tp_json_err jerr;
  int live = c->state != CALL_DONE && !c->cancelled && c->run;
  /* the tree's cost, estimated from the text and charged before jansson builds it */
  size_t cost = live ? tp__json_text_cost(result_json, len) : 0;
  if (live && tp__host_charge(c->run->sb, cost) != 0) {
    if (atomic_load(&c->run->sb->kill) == TP_KILL_MEMORY)  /* this charge's verdict */
      snprintf(c->run->sb->kill_note, sizeof c->run->sb->kill_note, "tools.%.60s returned "
               "%zu bytes of JSON, which need more host memory than the memory limit "
               "allows; ask it for less", c->name, len);
    tp__call_failf(c, "tool.failed", "tools.%s returned %zu bytes of JSON, which need more "
                  "host memory than the run's memory limit allows", c->name, len);
    tp__call_handler_done(c);
    return TP_OK;
  }
  const tp_limits *l = live ? &c->run->sb->limits : NULL;
  size_t ncont;
  if (live && !tp__codec_off && c->run->rp == NULL && c->tool->out_schema == NULL &&
      !(l->tool_bytes && len > l->tool_bytes) &&
      (ncont = tp__codec_answer_ok(result_json, len)) > 0 && ncont < (1u << 20)) {
    /* kept as text, with its containers' sizes, until the script takes it: what
    ** complete() does with jansson's tree, without the tree (the same cost charged) */
    size_t at = (len + 1 + sizeof(int) - 1) / sizeof(int) * sizeof(int);
    char *copy = malloc(at + ncont * sizeof(int));
    if (copy != NULL) {
      memcpy(copy, result_json, len);
      copy[len] = '\0';
      tp__codec_answer_counts(copy, len, (int *)(void *)(copy + at));
      if (keep_text(c, copy, len, ncont, cost, 1)) return TP_OK;
    }
  }
  /* polled: parsing up to tool_bytes of text stops when the run has a verdict */
  json_t *v = tp__json_loads_polled(result_json, len,
                                   live ? tp__sandbox_budget(c->run->sb) : NULL, &jerr);
  int rc;
  if (v == NULL) {
    if (live) {
      tp__host_refund(c->run->sb, cost);
      tp__call_failf(c, "tool.invalid_output", "tools.%s returned text that is not JSON: %s",
                    c->name, jerr.message);
    }
    rc = TP_OK;
  }
  else rc = complete(c, v, len, cost, 1);
  tp__call_handler_done(c);
  return rc;
}

/* What a handler's failure with code says after the tool's name: the message matches the
** code ("tools.fs.write was denied: ..."), never "failed" for a refusal. */
static const char *fail_verb (const char *code) {
  static const struct { const char *code, *verb; } verbs[] = {
    { "tool.denied", "was denied" }, { "tool.rate_limited", "was rate-limited" },
    { "tool.timeout", "timed out" }, { "tool.unavailable", "is unavailable" },
    { "tool.invalid_input", "refused its arguments" },
    { "tool.invalid_output", "returned an invalid result" }, { "tool.unknown", "is unknown" },
  };
  for (size_t i = 0; i < sizeof verbs / sizeof verbs[0]; i++)
    if (strcmp(code, verbs[i].code) == 0) return verbs[i].verb;
  return "failed";
}

int tp_call_fail (tp_call *c, const char *code, const char *message) {
  if (c == NULL) return TP_EINVAL;
  if (c->state == CALL_DONE && !c->handler_owns) return TP_ESTATE;
  if (code == NULL || strncmp(code, "tool.", 5) != 0) code = "tool.failed";
  int rc = TP_ESTATE;
  if (c->state != CALL_DONE && !c->cancelled && c->run) {
    if (strcmp(code, "tool.timeout") == 0 && (message == NULL || *message == '\0'))
      tp__call_timed_out(c);  /* the handler saw its deadline pass: say which limit */
    else
      tp__call_failf(c, code, "tools.%s %s: %.*s", c->name, fail_verb(code), TP_MSG_MAX + 1,
                     message ? message : "no reason given");
    rc = TP_OK;
  }
  tp__call_handler_done(c);
  return rc;
}


/* Appends s as a JSON string, at most TP_TOOL_NAME_MAX bytes of it; bytes that are not
** printable ASCII become '?' (tool names and codes are ASCII identifiers; only a
** script's misspelt name can hold anything else). Writes at most 2 + 2 * 256 bytes. */
static void put_name (char *out, size_t *o, const char *s) {
  out[(*o)++] = '"';
  for (size_t i = 0; s[i] != '\0' && i < TP_TOOL_NAME_MAX; i++) {
    unsigned char ch = (unsigned char)s[i];
    if (ch == '"' || ch == '\\') { out[(*o)++] = '\\'; out[(*o)++] = (char)ch; }
    else out[(*o)++] = ch >= 0x20 && ch < 0x7f ? (char)ch : '?';
  }
  out[(*o)++] = '"';
}
#define NAME_ROOM (2 + 2 * TP_TOOL_NAME_MAX)

/* Appends s (valid UTF-8, at most TP_MSG_MAX bytes: a call's message) as a JSON string.
** Writes at most MSG_ROOM bytes. */
static void put_text (char *out, size_t *o, const char *s) {
  out[(*o)++] = '"';
  for (size_t i = 0; s[i] != '\0' && i < TP_MSG_MAX; i++) {
    unsigned char ch = (unsigned char)s[i];
    if (ch == '"' || ch == '\\') { out[(*o)++] = '\\'; out[(*o)++] = (char)ch; }
    else if (ch == '\n') { out[(*o)++] = '\\'; out[(*o)++] = 'n'; }
    else if (ch < 0x20 || ch == 0x7f) {
      out[(*o)++] = '\\'; out[(*o)++] = 'u'; out[(*o)++] = '0'; out[(*o)++] = '0';
      out[(*o)++] = tp__hex_digit(ch >> 4); out[(*o)++] = tp__hex_digit(ch);
    }
    else out[(*o)++] = (char)ch;
  }
  out[(*o)++] = '"';
}
#define MSG_ROOM (2 + 6 * TP_MSG_MAX)

static void put_lit (char *out, size_t *o, const char *lit) {
  size_t n = strlen(lit);
  memcpy(out + *o, lit, n);
  *o += n;
}

/* Decimal digits of v; at least min_digits of them (zero-padded). */
static void put_uint (char *out, size_t *o, uint64_t v, int min_digits) {
  char tmp[24];
  int n = 0;
  do { tmp[n++] = (char)('0' + v % 10); v /= 10; } while (v != 0 || n < min_digits);
  while (n > 0) out[(*o)++] = tmp[--n];
}

/* One record: {"tool":..,"ok":..,["error":..,"message":..,]"ms":..,"bytes_in":..,
** "bytes_out":..[,"line":..]}; a failed record's room is RECORD_ROOM + MSG_ROOM + 16. */
#define RECORD_ROOM (160 + 2 * NAME_ROOM)
static void put_record (char *out, size_t *o, const tp_call *c) {
  uint64_t end = c->state == CALL_DONE ? c->end_ns : tp__now_ns();
  uint64_t us = (end - c->start_ns) / 1000;
  int ok = c->state == CALL_DONE && c->ok;
  put_lit(out, o, "{\"tool\":");
  put_name(out, o, c->name ? c->name : "?");
  put_lit(out, o, ok ? ",\"ok\":true" : ",\"ok\":false,\"error\":");
  if (!ok) put_name(out, o, c->state == CALL_DONE && c->code ? c->code : "cancelled");
  if (!ok && c->state == CALL_DONE && c->message) {
    put_lit(out, o, ",\"message\":");
    put_text(out, o, c->message);
  }
  put_lit(out, o, ",\"ms\":");
  put_uint(out, o, us / 1000, 1);
  out[(*o)++] = '.';
  put_uint(out, o, us % 1000, 3);
  put_lit(out, o, ",\"bytes_in\":");
  put_uint(out, o, c->bytes_in, 1);
  put_lit(out, o, ",\"bytes_out\":");
  put_uint(out, o, c->bytes_out, 1);
  if (c->line > 0) {
    put_lit(out, o, ",\"line\":");
    put_uint(out, o, (uint64_t)c->line, 1);
  }
  out[(*o)++] = '}';
}

/* The summary record of the calls past the listed ones (see TP_CALLS_LISTED). */
#define SUMMARY_ROOM (120 + (TP_CALLS_BY_TOOL + 1) * (NAME_ROOM + 24))
static void put_summary (char *out, size_t *o, const tp_calls_summary *s) {
  put_lit(out, o, "{\"summary\":true,\"calls\":");
  put_uint(out, o, s->calls, 1);
  put_lit(out, o, ",\"failed\":");
  put_uint(out, o, s->failed, 1);
  put_lit(out, o, ",\"by_tool\":{");
  for (size_t i = 0; i < s->ntools; i++) {
    if (i > 0) out[(*o)++] = ',';
    put_name(out, o, s->by_tool[i].name);
    out[(*o)++] = ':';
    put_uint(out, o, s->by_tool[i].n, 1);
  }
  if (s->other) {
    put_lit(out, o, s->ntools ? ",\"other\":" : "\"other\":");
    put_uint(out, o, s->other, 1);
  }
  put_lit(out, o, "}}");
}

/* The envelope's "calls" as JSON text, made by the host so a script cannot forge it: a
** record for each of the first TP_CALLS_LISTED calls, including calls that failed, were
** refused or were cut short, then a summary record of the later ones when there were
** any. Called once, when the run has ended (its calls are all done): the later calls
** still held are counted into the summary and let go. Written directly, with no
** formatting calls; at most 100 records, so it takes microseconds. NULL when out of
** memory; *len gets the length. */
char *tp__run_calls_text_in (tp_run *r, size_t *len, char *buf, size_t bufcap) {
  size_t listed = 0, o = 0, msgroom = 0;
  for (size_t i = 0; i < r->ncallv; i++) {
    if (r->callv[i] != NULL && !is_listed(r->callv[i])) let_go(r, i);
    listed += r->callv[i] != NULL;
    if (r->callv[i] != NULL && r->callv[i]->message) msgroom += MSG_ROOM + 16;
  }
  /* sized from what is there: a buffer for every record a run may list is over 128 KiB,
  ** which glibc gives back to the system at each free (a brk pair a run, 2x a cold run) */
  size_t cap = 3 + listed * (RECORD_ROOM + 1) + (r->summary.calls > 0 ? SUMMARY_ROOM : 0) +
               msgroom;
  char *out = cap <= bufcap ? buf : malloc(cap);
  if (out == NULL) return NULL;
  out[o++] = '[';
  for (size_t i = 0; i < r->ncallv; i++) {
    const tp_call *c = r->callv[i];
    if (c == NULL) continue;
    if (o > 1) out[o++] = ',';
    put_record(out, &o, c);
  }
  if (r->summary.calls > 0) {
    if (o > 1) out[o++] = ',';
    put_summary(out, &o, &r->summary);
  }
  out[o++] = ']';
  out[o] = '\0';
  *len = o;
  return out;
}

/* The run ends: calls still running are cancelled (their handlers are told, and their
** late completions ignored). */
void tp__run_cancel_calls (tp_run *r) {
  /* all first, so a handler told to stop cannot start a queued call of this run */
  for (size_t i = 0; i < r->ncallv; i++)
    if (r->callv[i] != NULL && r->callv[i]->state != CALL_DONE) r->callv[i]->cancelled = 1;
  for (size_t i = 0; i < r->ncallv; i++) {
    tp_call *c = r->callv[i];
    if (c != NULL && c->state != CALL_DONE) {
      c->cancelled = 1;
      if (c->handler_owns) tp__hook(r, cancel, c);
      if (c->state != CALL_DONE)
        tp__call_finish(c, 0, NULL, "cancelled", "the run ended before the call completed");
    }
  }
}

void tp__run_free_calls (tp_run *r) {
  for (size_t i = 0; i < r->ncallv; i++) {
    tp_call *c = r->callv[i];
    if (c == NULL) continue;
    give_back(c, c->charged);
    c->run = NULL;
    call_release(c);
  }
  tp__host_refund(r->sb, r->capcallv * SLOT_COST);
  for (size_t i = 0; i < r->summary.ntools; i++) {
    tp__host_refund(r->sb, block_cost(strlen(r->summary.by_tool[i].name) + 1));
    free(r->summary.by_tool[i].name);
  }
  if (r->callv != r->callv_in) {
    free(r->callv);
    free(r->callid);
  }
  r->callv = NULL;
  r->callid = NULL;
  r->ncallv = r->capcallv = r->nholes = r->active_from = 0;
  memset(&r->summary, 0, sizeof r->summary);
}

/* ---- JSON text used as a table (the hint is run.c's json_text_hint) ------------------ */

uint64_t tp__json_text_hash (const char *s, size_t n) {
  uint64_t h = 1469598103934665603ull;  /* FNV-1a */
  for (size_t i = 0; i < n; i++) { h ^= (unsigned char)s[i]; h *= 1099511628211ull; }
  return h;
}

int tp__json_text_like (const char *s, size_t n) {
  size_t a = 0, b = n;
  while (a < b && strchr(" \t\r\n", s[a]) && s[a]) a++;
  while (b > a && strchr(" \t\r\n", s[b - 1]) && s[b - 1]) b--;
  return b - a >= 2 && ((s[a] == '{' && s[b - 1] == '}') || (s[a] == '[' && s[b - 1] == ']'));
}

void tp__run_note_json_text (tp_run *r, const char *tool, const char *s, size_t n) {
  if (r == NULL || tool == NULL) return;
  if (r->json_texts == NULL &&
      (r->json_texts = malloc(TP_JSON_TEXTS_MAX * sizeof *r->json_texts)) == NULL) return;
  int i = r->njson_texts < TP_JSON_TEXTS_MAX ? r->njson_texts++
        : (int)(tp__json_text_hash(s, n) % TP_JSON_TEXTS_MAX);
  r->json_texts[i].hash = tp__json_text_hash(s, n);
  r->json_texts[i].len = n;
  snprintf(r->json_texts[i].tool, sizeof r->json_texts[i].tool, "%s", tool);
}

/* ---- waking the host ------------------------------------------------------------------ */

void tp__run_wake (tp_run *r) {
  if (r == NULL || !r->async) return;
  r->waiting = r->waiting ? 2 : 0;  /* 2: look again */
  tp__hook(r, wake, r);
}

/* ---- a result too large for a run's log (replay.c) ------------------------------------ */

void tp__replay_too_large (tp_call *c, char *buf, size_t len) {
  snprintf(buf, len, "tools.%s returned %zu bytes of JSON: a run whose calls are logged "
           "keeps each result whole in its log, at most %u bytes (1 MiB), and never cuts "
           "one. Ask the tool for less (a page, a filter, a summary), or have the data "
           "written to a file and pass its path instead of the data", c->name,
           c->bytes_out, TP_LOG_VALUE_MAX);
}
