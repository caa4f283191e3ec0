/*
** tools.c: the tool registry, the life of a call, and what the script sees of tools:
** the `tools` namespace and `parallel`.
**
** A call, seen from the script: tools.a.b{...} copies the arguments out as JSON and
** starts the call on the host at once (unknown names, bad arguments, limits and handlers
** that answer straight away complete it there); if it is not complete, the script's
** thread yields [tp__request_tag, id] and the host resumes it once any call completes;
** the continuation then takes the result if its call is done, or yields again. The
** yield passes through the script's own coroutines (sandbox.c) and through parallel.
*/
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "lauxlib.h"

#include "internal.h"
#include "json.h"
#include "schema.h"

/* ---- registry --------------------------------------------------------------------- */

void tp__engine_set_error (tp_engine *e, const char *fmt, ...) {
  char buf[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  free(e->error);
  e->error = strdup(buf);
}

const char *tp_engine_error (const tp_engine *e) {
  return e != NULL && e->error != NULL ? e->error : "";
}

static int cmp_name (const void *key, const void *elem) {
  return strcmp(key, (*(tp_tool *const *)elem)->name);
}

const tp_tool *tp__tool_find (const tp_engine *e, const char *name) {
  if (e->ntools == 0) return NULL;
  tp_tool **t = bsearch(name, e->tools, e->ntools, sizeof *e->tools, cmp_name);
  return t ? *t : NULL;
}

/* A tool name: segments of [A-Za-z_][A-Za-z0-9_]* joined by dots, not a reserved word
** of the namespace (list, describe, search at the top). */
static const char *bad_name (const char *name) {
  if (name == NULL || *name == '\0') return "the name is empty";
  if (strlen(name) > 128) return "the name is longer than 128 characters";
  const char *p = name;
  for (;;) {
    if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || *p == '_'))
      return "each dotted part must start with a letter or '_'";
    while ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || *p == '_' ||
           (*p >= '0' && *p <= '9'))
      p++;
    if (*p == '\0') break;
    if (*p != '.') return "only letters, digits, '_' and '.' are allowed";
    p++;
  }
  size_t first = strcspn(name, ".");
  if ((first == 4 && strncmp(name, "list", 4) == 0) ||
      (first == 8 && strncmp(name, "describe", 8) == 0) ||
      (first == 6 && strncmp(name, "search", 6) == 0))
    return "list, describe and search are reserved by the tools namespace";
  return NULL;
}

static void free_tool (tp_tool *t) {
  if (t == NULL) return;
  free(t->name);
  free(t->description);
  free(t->origin);
  json_decref(t->input);
  json_decref(t->output);
  tp_schema_free(t->in_schema);
  tp_schema_free(t->out_schema);
  free(t);
}

void tp__engine_free_tools (tp_engine *e) {
  for (size_t i = 0; i < e->ntools; i++) free_tool(e->tools[i]);
  free(e->tools);
  e->tools = NULL;
  e->ntools = e->captools = 0;
}

static tp_schema *compile_schema (tp_engine *e, const json_t *doc, const char *tool,
                                  const char *which, int formats) {
  char err[512];
  tp_schema *s = tp_schema_compile(doc, TP_DIALECT_2020_12, e->remotes_dir, formats,
                                   err, sizeof err);
  if (s == NULL) tp__engine_set_error(e, "tool %s: bad %s schema: %s", tool, which, err);
  return s;
}

/* Adds a tool; schemas are given as trees (borrowed). */
static int add_tool (tp_engine *e, const tp_tool_def *def, const json_t *in, const json_t *out,
                     int lua_ref, const char *origin) {
  const char *why = bad_name(def->name);
  if (why) {
    tp__engine_set_error(e, "tool \"%s\": bad name: %s", def->name ? def->name : "", why);
    return TP_EINVAL;
  }
  if (tp__tool_find(e, def->name)) {
    tp__engine_set_error(e, "tool %s: a tool of that name is registered already", def->name);
    return TP_EINVAL;
  }
  if (in && !json_is_object(in) && !json_is_boolean(in)) {
    tp__engine_set_error(e, "tool %s: the input schema must be an object", def->name);
    return TP_EINVAL;
  }
  tp_tool *t = calloc(1, sizeof *t);
  if (t == NULL) return TP_ENOMEM;
  t->name = strdup(def->name);
  t->description = strdup(def->description ? def->description : "");
  t->origin = origin ? strdup(origin) : NULL;
  t->fn = def->handler;
  t->ud = def->ud;
  t->lua_ref = lua_ref;
  t->timeout_us = def->timeout_us;
  t->input = in ? json_deep_copy(in) : json_pack("{s:s}", "type", "object");
  t->output = out ? json_deep_copy(out) : NULL;
  if (t->name == NULL || t->description == NULL || t->input == NULL || (out && !t->output)) {
    free_tool(t);
    return TP_ENOMEM;
  }
  t->in_schema = compile_schema(e, t->input, t->name, "input", 1);
  if (t->in_schema == NULL) { free_tool(t); return TP_EINVAL; }
  if (t->output) {
    t->out_schema = compile_schema(e, t->output, t->name, "output", 0);
    if (t->out_schema == NULL) { free_tool(t); return TP_EINVAL; }
  }
  if (e->ntools == e->captools) {
    size_t ncap = e->captools ? e->captools * 2 : 16;
    tp_tool **nt = realloc(e->tools, ncap * sizeof *nt);
    if (nt == NULL) { free_tool(t); return TP_ENOMEM; }
    e->tools = nt;
    e->captools = ncap;
  }
  size_t i = e->ntools;
  while (i > 0 && strcmp(e->tools[i - 1]->name, t->name) > 0) {
    e->tools[i] = e->tools[i - 1];
    i--;
  }
  e->tools[i] = t;
  e->ntools++;
  return TP_OK;
}

static json_t *parse_schema (tp_engine *e, const char *text, const char *tool, const char *which,
                             int *bad) {
  *bad = 0;
  if (text == NULL) return NULL;
  json_error_t jerr;
  json_t *doc = json_loads(text, JSON_REJECT_DUPLICATES, &jerr);
  if (doc == NULL) {
    tp__engine_set_error(e, "tool %s: the %s schema is not JSON: %s at line %d column %d",
                         tool, which, jerr.text, jerr.line, jerr.column);
    *bad = 1;
  }
  return doc;
}

int tp_engine_add_tool (tp_engine *e, const tp_tool_def *def) {
  if (e == NULL || def == NULL) return TP_EINVAL;
  int bad;
  const char *name = def->name ? def->name : "";
  json_t *in = parse_schema(e, def->input_schema, name, "input", &bad);
  if (bad) return TP_EINVAL;
  json_t *out = parse_schema(e, def->output_schema, name, "output", &bad);
  if (bad) { json_decref(in); return TP_EINVAL; }
  int rc = add_tool(e, def, in, out, LUA_NOREF, NULL);
  json_decref(in);
  json_decref(out);
  return rc;
}

int tp__engine_add_lua_tool (tp_engine *e, const tp_tool_def *def, const json_t *in,
                             const json_t *out, int lua_ref, const char *origin) {
  return add_tool(e, def, in, out, lua_ref, origin);
}

size_t tp__engine_drop_plugin_tools (tp_engine *e) {
  size_t kept = 0, dropped = 0;
  for (size_t i = 0; i < e->ntools; i++) {
    tp_tool *t = e->tools[i];
    if (t->lua_ref == LUA_NOREF) { e->tools[kept++] = t; continue; }
    if (e->H != NULL) luaL_unref(e->H, LUA_REGISTRYINDEX, t->lua_ref);
    free_tool(t);
    dropped++;
  }
  e->ntools = kept;  /* the order stays sorted */
  return dropped;
}

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
void tp__call_release (tp_call *c) {
  if (c->run != NULL || c->handler_owns) return;
  json_decref(c->args);
  json_decref(c->result);
  free(c->args_text);
  free(c->name);
  free(c->code);
  free(c->message);
  free(c);
}

#define CODE_MAX 64  /* codes are short identifiers: tool.invalid_input */

/* Lets go of the argument tree (tree) and text (text) and gives back what they were
** charged to the run's host budget. */
static void args_release (tp_call *c, int tree, int text) {
  if (tree && c->args != NULL) {
    json_decref(c->args);
    c->args = NULL;
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
  give_back(c, c->result_cost);
  c->result_cost = 0;
}

/* Records the outcome (results are checked by the caller) and starts queued calls. The
** message is cut to TP_MSG_MAX bytes; code and message are charged to the run. */
void tp__call_finish (tp_call *c, int ok, json_t *result, const char *code, const char *msg) {
  if (c->state == CALL_DONE) { json_decref(result); return; }
  tp_run *r = c->run;
  int was_running = c->state == CALL_RUNNING;
  if (!was_running && !c->handler_owns) args_release(c, 1, 1);  /* no handler will read them */
  c->state = CALL_DONE;
  c->end_ns = tp__now_ns();
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
  if (r != NULL) tp__run_wake(r);
}

/* Fails c with a formatted message; the buffer cuts what is longer (dup_cut cuts
** again to TP_MSG_MAX, marked). Pass text from elsewhere with "%.*s" and a precision of
** TP_MSG_MAX + 1, so that a huge string is not read to its end. */
static void call_fail_now (tp_call *c, const char *code, const char *fmt, ...) {
  char buf[TP_MSG_MAX + 512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  tp__call_finish(c, 0, NULL, code, buf);
}

/* Joins up to the first 8 schema errors into one message ("; and N more"). */
static void schema_message (char *buf, size_t len, const tp_schema_errors *errs) {
  tp_schema_errors_text(errs, 8, buf, len);
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
  int rc = tp_schema_validate_bounded(s, v, errs, &b);
  if (rc == -2) tp__sandbox_kill(r->sb, TP_KILL_TIME);  /* kept if it had one */
  return rc;
}

/* The error of a call whose validation was stopped by the run's verdict. */
static void fail_stopped (tp_call *c, const char *what) {
  tp_sandbox *sb = c->run->sb;
  tp_kill why = (tp_kill)atomic_load(&sb->kill);
  char msg[256];
  tp__kill_message(sb, why, msg, sizeof msg);
  call_fail_now(c, tp__kill_code(why), "tools.%s: %s were not checked: %s", c->name, what,
                msg);
}

/* The closest tool names to a wrong one, for tool.unknown. */
#define SUGGEST_NAME_MAX 64       /* longer names (either side) are not compared */
#define SUGGEST_DIST_MAX 6        /* farther names are not suggested */
/* Cells of the edit-distance tables one suggestion may fill: about 1 ms here, whatever
** the number of tools (the run's verdict is not polled inside; this cap bounds it). */
#define SUGGEST_CELLS 1000000

static size_t edit_distance (const char *a, size_t la, const char *b, size_t lb) {
  size_t row[SUGGEST_NAME_MAX + 1];
  for (size_t j = 0; j <= lb; j++) row[j] = j;
  for (size_t i = 1; i <= la; i++) {
    size_t prev = row[0];
    row[0] = i;
    for (size_t j = 1; j <= lb; j++) {
      size_t cur = row[j];
      size_t best = prev + (a[i - 1] != b[j - 1]);
      if (row[j] + 1 < best) best = row[j] + 1;
      if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
      row[j] = best;
      prev = cur;
    }
  }
  return row[lb];
}

static void suggest (const tp_engine *e, const char *name, char *buf, size_t len) {
  const tp_tool *best[3] = { NULL, NULL, NULL };
  size_t dist[3] = { 99, 99, 99 };
  size_t la = strlen(name), cells = 0;
  buf[0] = '\0';
  if (la > SUGGEST_NAME_MAX) return;
  const char *ndot = strrchr(name, '.');
  for (size_t i = 0; i < e->ntools && cells < SUGGEST_CELLS; i++) {
    const char *tn = e->tools[i]->name;
    size_t lb = strlen(tn);
    if (lb > SUGGEST_NAME_MAX) continue;
    size_t d;
    /* the distance is at least the difference of the lengths */
    if ((la > lb ? la - lb : lb - la) > SUGGEST_DIST_MAX + 1) d = 99;
    else {
      d = edit_distance(name, la, tn, lb);
      cells += (la + 1) * (lb + 1);
    }
    const char *dot = strrchr(tn, '.');
    if (dot && ndot && strcmp(dot, ndot) == 0 && d > 1 && d < 99) d--;  /* same last part */
    if (strstr(tn, name) || strstr(name, tn)) d = d > 2 ? 2 : d;
    for (int k = 0; k < 3; k++) {
      if (d < dist[k]) {
        for (int m = 2; m > k; m--) { dist[m] = dist[m - 1]; best[m] = best[m - 1]; }
        dist[k] = d;
        best[k] = e->tools[i];
        break;
      }
    }
  }
  size_t o = 0;
  for (int k = 0; k < 3 && best[k] && dist[k] <= SUGGEST_DIST_MAX && o < len; k++) {
    int n = snprintf(buf + o, len - o, "%stools.%s", k ? ", " : "", best[k]->name);
    if (n < 0) break;
    o += (size_t)n;
  }
}

static int call_deadline_passed (tp_call *c, uint64_t now) {
  return c->deadline_ns && now >= c->deadline_ns;
}

/* Hands a call to its handler (or leaves it for tp_run_pending). Its timeout counts
** from now: the call's start when it was not queued. The argument tree is not needed
** once the handler has it (C handlers read the text, host.c converts it at once). */
static void dispatch (tp_run *r, tp_call *c, int was_queued) {
  const tp_tool *t = c->tool;
  const tp_limits *l = &r->sb->limits;
  c->state = CALL_RUNNING;
  r->in_flight++;
  uint64_t now = was_queued ? tp__now_ns() : c->start_ns;
  uint64_t tmo = l->tool_timeout_us;
  if (t->timeout_us && (tmo == 0 || t->timeout_us < tmo)) tmo = t->timeout_us;
  c->deadline_ns = tmo ? now + tmo * 1000u : 0;
  if (t->fn != NULL) {
    c->handler_owns = 1;
    t->fn(c, t->ud);
  }
  else if (t->lua_ref != LUA_NOREF) {
    c->handler_owns = 1;
    tp__host_dispatch(r->e, c, t, c->args);
  }
  /* else: the embedding program completes it (tp_run_pending) */
  int handled = !c->handler_owns && (t->fn != NULL || t->lua_ref != LUA_NOREF);
  if (c->args_text != NULL || handled || t->lua_ref != LUA_NOREF) args_release(c, 1, 0);
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
static uint32_t count_per_tool (tp_run *r, const tp_tool *t) {
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
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (r->callid[mid] < id) lo = mid + 1;
    else hi = mid;
  }
  return lo < r->ncallv && r->callid[lo] == id && r->callv[lo] != NULL ? (long)lo : -1;
}

tp_call *tp__call_find (tp_run *r, uint64_t id) {
  long i = call_index(r, id);
  return i < 0 ? NULL : r->callv[i];
}
#define find_call tp__call_find

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
  tp__call_release(c);
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
static void call_taken (tp_run *r, tp_call *c) {
  if (!c->consumed && c->state == CALL_DONE && r->ready_count > 0) r->ready_count--;
  c->consumed = 1;
  if (c->state != CALL_DONE) return;
  result_release(c);  /* only its size stays, for the envelope */
  if (is_listed(c)) {
    if (c->message) give_back(c, block_cost(strlen(c->message) + 1));
    free(c->message);
    c->message = NULL;
    return;
  }
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
static tp_call *call_attempt (tp_run *r, const char *name, size_t nlen, int line) {
  tp_sandbox *sb = r->sb;
  const tp_limits *l = &sb->limits;
  r->ncalls++;
  tp_call *c = calloc(1, sizeof *c);
  size_t take = tp__cut_utf8(name, nlen, TP_TOOL_NAME_MAX);
  char *copy = c ? malloc(take + 1) : NULL;
  if (copy != NULL && r->ncallv == r->capcallv) {
    size_t ncap = r->capcallv ? r->capcallv * 2 : 16;
    tp_call **nv = NULL;
    uint64_t *ni = NULL;
    if (tp__host_charge(sb, (ncap - r->capcallv) * SLOT_COST) == 0) {
      nv = realloc(r->callv, ncap * sizeof *nv);
      if (nv != NULL) r->callv = nv;
      ni = nv ? realloc(r->callid, ncap * sizeof *ni) : NULL;
      if (ni != NULL) { r->callid = ni; r->capcallv = ncap; }
      else tp__host_refund(sb, (ncap - r->capcallv) * SLOT_COST);
    }
    if (ni == NULL) { free(copy); copy = NULL; }
  }
  if (copy == NULL) {
    free(c);
    tp__sandbox_kill(sb, TP_KILL_MEMORY);
    return NULL;
  }
  for (size_t i = 0; i < take; i++) copy[i] = name[i] ? name[i] : '?';
  copy[take] = '\0';
  c->run = r;
  c->e = r->e;
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
    tp__sandbox_kill_note(sb, TP_KILL_TOOL_CALLS, "the script made more than its limit of "
                          "%u tool calls", (unsigned)l->tool_calls);
    call_fail_now(c, "limit.tool_calls", "the script made more than its limit of %u tool "
                  "calls", (unsigned)l->tool_calls);
  }
  return c;
}

/* Fails a call that is refused before it starts; the script gets the error directly. */
static void call_refuse (tp_run *r, tp_call *c, const char *code, const char *msg) {
  tp__call_finish(c, 0, NULL, code, msg);
  call_taken(r, c);
}

/* ---- empty tables where the schema wants an array ----------------------------------
** An empty Lua table has no keys to tell an array from an object, and is sent as {}. In
** tool arguments the tool's input schema says which it is: where it expects an array
** (and not an object), an empty object becomes []. Only the schema's plain structure is
** followed (properties, additionalProperties, items, prefixItems, allOf, local $ref), to
** a bounded depth and a bounded number of schema visits per call (EMPTY_WORK: a schema
** of nested allOf can double the work at each level), after which the rest is left as
** it is and validation says what is wrong.
*/
#define EMPTY_DEPTH 64
#define EMPTY_WORK 20000

static const json_t *schema_deref (const json_t *s, const json_t *root, int *hops) {
  while (json_is_object(s) && (*hops)++ < EMPTY_DEPTH) {
    const char *ref = json_string_value(json_object_get(s, "$ref"));
    if (ref == NULL || ref[0] != '#') return s;
    const json_t *node = root;
    const char *p = ref + 1;
    while (*p == '/' && node != NULL) {
      char part[128];
      size_t n = 0;
      for (p++; *p && *p != '/' && n < sizeof part - 1; p++) {
        if (p[0] == '~' && p[1] == '1') { part[n++] = '/'; p++; }
        else if (p[0] == '~' && p[1] == '0') { part[n++] = '~'; p++; }
        else part[n++] = *p;
      }
      part[n] = '\0';
      node = json_is_array(node) ? json_array_get(node, strtoul(part, NULL, 10))
                                 : json_object_get(node, part);
    }
    if (node == NULL || node == s) return s;
    s = node;
  }
  return s;
}

static int wants_array (const json_t *s, const json_t *root, int depth, long *work) {
  int hops = 0;
  if (--*work <= 0) return 0;
  s = schema_deref(s, root, &hops);
  if (!json_is_object(s) || depth > EMPTY_DEPTH) return 0;
  const json_t *t = json_object_get(s, "type");
  if (json_is_string(t)) return strcmp(json_string_value(t), "array") == 0;
  if (json_is_array(t)) {
    int arr = 0, obj = 0;
    size_t i;
    const json_t *one;
    json_array_foreach(t, i, one) {
      const char *n = json_string_value(one);
      if (n && strcmp(n, "array") == 0) arr = 1;
      if (n && strcmp(n, "object") == 0) obj = 1;
    }
    return arr && !obj;
  }
  const json_t *all = json_object_get(s, "allOf");
  size_t i;
  const json_t *one;
  json_array_foreach(all, i, one)
    if (wants_array(one, root, depth + 1, work)) return 1;
  return 0;
}

static void empty_arrays (json_t *v, const json_t *s, const json_t *root, int depth,
                          long *work);

/* The replacement of child (of schema sub): an empty array, or NULL after walking it. */
static json_t *empty_child (json_t *child, const json_t *sub, const json_t *root, int depth,
                            long *work) {
  if (sub == NULL) return NULL;
  if (json_is_object(child) && json_object_size(child) == 0) {
    if (wants_array(sub, root, depth, work)) return json_array();
    return NULL;
  }
  if (json_is_object(child) || json_is_array(child))
    empty_arrays(child, sub, root, depth + 1, work);
  return NULL;
}

static void empty_arrays (json_t *v, const json_t *s, const json_t *root, int depth,
                          long *work) {
  int hops = 0;
  if (--*work <= 0) return;
  s = schema_deref(s, root, &hops);
  if (!json_is_object(s) || depth > EMPTY_DEPTH) return;
  size_t i;
  const json_t *one;
  json_array_foreach(json_object_get(s, "allOf"), i, one)
    empty_arrays(v, one, root, depth + 1, work);
  if (json_is_object(v)) {
    const json_t *props = json_object_get(s, "properties");
    const json_t *extra = json_object_get(s, "additionalProperties");
    const char *key;
    json_t *child;
    void *iter = json_object_iter(v);
    while (iter) {
      key = json_object_iter_key(iter);
      child = json_object_iter_value(iter);
      const json_t *sub = json_object_get(props, key);
      json_t *rep = empty_child(child, sub ? sub : json_is_object(extra) ? extra : NULL,
                                root, depth, work);
      if (rep) json_object_iter_set_new(v, iter, rep);
      iter = json_object_iter_next(v, iter);
    }
  }
  else if (json_is_array(v)) {
    const json_t *prefix = json_object_get(s, "prefixItems");
    const json_t *items = json_object_get(s, "items");
    json_t *child;
    json_array_foreach(v, i, child) {
      const json_t *sub = i < json_array_size(prefix) ? json_array_get(prefix, i)
                        : json_is_object(items) ? items : NULL;
      json_t *rep = empty_child(child, sub, root, depth, work);
      if (rep) json_array_set_new(v, i, rep);
    }
  }
}

/* Starts call c, counted by call_attempt, with args (stolen: the tree, its JSON text or
** NULL, and the text's size). nlen: the length of the name the script used; exact: it is
** all in c->name (not cut, no NUL byte), else the name is not looked up. The call may be
** complete on return. */
static void call_start (tp_run *r, tp_call *c, size_t nlen, int exact, json_t *args) {
  tp_sandbox *sb = r->sb;
  const tp_limits *l = &sb->limits;
  const char *name = c->name;
  c->args = args;
  c->tool = exact ? tp__tool_find(r->e, name) : NULL;
  if (args != NULL && c->tool != NULL && c->tool->input != NULL) {
    long work = EMPTY_WORK;
    empty_arrays(args, c->tool->input, c->tool->input, 0, &work);  /* before the text */
  }
  /* A Lua handler gets the tree as a Lua table (host.c), so its call makes no JSON text,
  ** only measures it (bytes_in); the others get the text tp_call_args returns (NULL when
  ** out of memory: made later). */
  size_t bytes_in = 0;
  char *args_text = NULL;
  if (args != NULL && c->tool != NULL && c->tool->lua_ref != LUA_NOREF)
    bytes_in = tp_json_dump_len(args);
  else if (args != NULL)
    args_text = tp_json_dumpsn(args, &bytes_in);
  c->args_text = args_text;
  c->bytes_in = bytes_in;
  if (args_text) charge(c, block_cost(bytes_in + 1));
  if (c->tool == NULL) {
    char near[400];
    if (nlen > TP_TOOL_NAME_MAX)
      call_fail_now(c, "tool.unknown", "there is no tool tools.%s...: that name is %zu bytes "
                    "long, and tool names are at most 128 bytes (tools.list() lists the tools "
                    "there are)", name, nlen);
    else if (!exact)
      call_fail_now(c, "tool.unknown", "there is no tool tools.%s: a tool name has no NUL "
                    "bytes (tools.list() lists the tools there are)", name);
    else {
      suggest(r->e, name, near, sizeof near);
      if (near[0])
        call_fail_now(c, "tool.unknown", "there is no tool tools.%s; did you mean %s? "
                      "(tools.list() lists them all)", name, near);
      else
        call_fail_now(c, "tool.unknown", "there is no tool tools.%s (tools.list() lists "
                      "the tools there are)", name);
    }
    return;
  }
  if (l->tool_calls_per_tool) {
    if (count_per_tool(r, c->tool) > l->tool_calls_per_tool) {
      tp__sandbox_kill_note(sb, TP_KILL_TOOL_CALLS, "the script called tools.%.128s more "
                            "than its limit of %u calls of one tool", name,
                            (unsigned)l->tool_calls_per_tool);
      call_fail_now(c, "limit.tool_calls", "the script called tools.%s more than its limit "
                    "of %u calls of one tool", name, (unsigned)l->tool_calls_per_tool);
      return;
    }
  }
  if (args == NULL) {
    call_fail_now(c, "tool.invalid_input", "tools.%s: the arguments could not be read", name);
    return;
  }
  tp_schema_errors errs = { 0 };
  int v = validate_for(r, c->tool->in_schema, args, &errs);
  if (v == -2) {
    fail_stopped(c, "the arguments");
    return;
  }
  if (v != 1) {
    char msg[3000];
    if (v == 0) schema_message(msg, sizeof msg, &errs);
    else snprintf(msg, sizeof msg, "the arguments could not be checked (out of memory)");
    tp_schema_errors_clear(&errs);
    call_fail_now(c, "tool.invalid_input", "tools.%s: invalid arguments: %s "
                  "(tools.describe(\"%s\") shows what it takes)", name, msg, name);
    return;
  }
  c->state = CALL_QUEUED;
  if (!l->tool_in_flight || r->in_flight < l->tool_in_flight) dispatch(r, c, 0);
}

int tp__call_ready (tp_run *r, uint64_t id) {
  tp_call *c = find_call(r, id);
  if (c == NULL) return 1;
  if (c->state != CALL_DONE && call_deadline_passed(c, tp__now_ns())) {
    c->cancelled = 1;
    if (c->host_ref != LUA_NOREF) tp__host_cancel(r->e, c);
    call_fail_now(c, "tool.timeout", "tools.%s did not answer within its time limit", c->name);
    start_queued(r);
  }
  return c->state == CALL_DONE;
}

/* The error object a script gets: {code=, message=, tool=} with a tostring. */
static void push_error_object (lua_State *L, const char *code, const char *msg,
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

int tp__call_consume (tp_run *r, uint64_t id, lua_State *L) {
  tp_call *c = find_call(r, id);
  if (c == NULL || c->consumed) {
    push_error_object(L, "tool.failed", "the call's result was lost", "?");
    return 0;
  }
  int ok = c->ok;
  if (c->state == CALL_DONE && r->ready_count > 0) r->ready_count--;
  c->consumed = 1;  /* before anything may raise: the script cannot ask again */
  if (ok) tp_json_push(L, c->result, 0);  /* may raise: c still owns the tree */
  else push_error_object(L, c->code ? c->code : "tool.failed",
                         c->message ? c->message : "the tool failed", c->name);
  call_taken(r, c);  /* may free c */
  return ok;
}

/* ---- the C API of calls ----------------------------------------------------------- */

const char *tp_call_tool (const tp_call *c) { return c ? c->name : NULL; }
uint64_t tp_call_id (const tp_call *c) { return c ? c->id : 0; }
int tp_call_cancelled (const tp_call *c) { return c == NULL || c->cancelled || c->run == NULL; }

const char *tp_call_args (tp_call *c) {
  if (c == NULL) return NULL;
  if (c->args_text == NULL && c->args != NULL) {
    c->args_text = tp_json_dumps(c->args);
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
    cost = tp_json_tree_cost(result);  /* O(nodes), capped by tool_bytes of text */
    if (tp__host_charge(sb, cost) != 0) {
      json_decref(result);
      if (atomic_load(&sb->kill) == TP_KILL_MEMORY)  /* this charge's verdict: its words */
        snprintf(sb->kill_note, sizeof sb->kill_note, "tools.%.60s returned a result that "
                 "needs more host memory than the memory limit allows; ask it for less",
                 c->name);
      call_fail_now(c, "tool.failed", "tools.%s returned a result that needs more host "
                    "memory than the run's memory limit allows", c->name);
      return TP_OK;
    }
  }
  c->result_cost = cost;
  c->charged += cost;
  const tp_limits *l = &c->run->sb->limits;
  size_t n = text_len ? text_len : tp_json_dump_len(result);  /* O(nodes), no text made */
  c->bytes_out = n;
  if (l->tool_bytes && n > l->tool_bytes) {
    json_decref(result);
    give_back(c, c->result_cost);
    c->result_cost = 0;
    call_fail_now(c, "tool.invalid_output", "tools.%s returned %zu bytes of JSON, over the "
                  "%zu-byte limit of a tool result", c->name, n, l->tool_bytes);
    return TP_OK;
  }
  if (c->tool->out_schema) {
    tp_schema_errors errs = { 0 };
    int v = validate_for(c->run, c->tool->out_schema, result, &errs);
    if (v == -2) {
      json_decref(result);
      fail_stopped(c, "the results");
      return TP_OK;
    }
    if (v != 1) {
      char msg[3000];
      if (v == 0) schema_message(msg, sizeof msg, &errs);
      else snprintf(msg, sizeof msg, "out of memory");
      tp_schema_errors_clear(&errs);
      json_decref(result);
      give_back(c, c->result_cost);
      c->result_cost = 0;
      call_fail_now(c, "tool.invalid_output", "tools.%s returned a result that does not "
                    "match its output schema: %s (a fault of the tool, not the script)",
                    c->name, msg);
      return TP_OK;
    }
  }
  tp__call_finish(c, 1, result, NULL, NULL);
  return TP_OK;
}

static void handler_done (tp_call *c) {
  c->handler_owns = 0;
  args_release(c, 0, 1);  /* tp_call_args is valid until the call is completed */
  tp_run *r = c->run;
  if (r != NULL) start_queued(r);
  tp__call_release(c);
}

int tp__call_complete_tree (tp_call *c, json_t *result);
int tp__call_complete_tree (tp_call *c, json_t *result) {
  if (c == NULL) { json_decref(result); return TP_EINVAL; }
  int rc = complete(c, result, 0, 0, 0);
  handler_done(c);
  return rc;
}

int tp_call_complete (tp_call *c, const char *result_json, size_t len) {
  if (c == NULL || result_json == NULL) return TP_EINVAL;
  if (c->state == CALL_DONE && !c->handler_owns) return TP_ESTATE;
  if (len == 0) len = strlen(result_json);
  tp_json_err jerr;
  int live = c->state != CALL_DONE && !c->cancelled && c->run;
  /* the tree's cost, estimated from the text and charged before jansson builds it */
  size_t cost = live ? tp_json_text_cost(result_json, len) : 0;
  if (live && tp__host_charge(c->run->sb, cost) != 0) {
    if (atomic_load(&c->run->sb->kill) == TP_KILL_MEMORY)  /* this charge's verdict */
      snprintf(c->run->sb->kill_note, sizeof c->run->sb->kill_note, "tools.%.60s returned "
               "%zu bytes of JSON, which need more host memory than the memory limit "
               "allows; ask it for less", c->name, len);
    call_fail_now(c, "tool.failed", "tools.%s returned %zu bytes of JSON, which need more "
                  "host memory than the run's memory limit allows", c->name, len);
    handler_done(c);
    return TP_OK;
  }
  /* polled: parsing up to tool_bytes of text stops when the run has a verdict */
  json_t *v = tp_json_loads_polled(result_json, len,
                                   live ? tp__sandbox_budget(c->run->sb) : NULL, &jerr);
  int rc;
  if (v == NULL) {
    if (live) {
      tp__host_refund(c->run->sb, cost);
      call_fail_now(c, "tool.invalid_output", "tools.%s returned text that is not JSON: %s",
                    c->name, jerr.message);
    }
    rc = TP_OK;
  }
  else rc = complete(c, v, len, cost, 1);
  handler_done(c);
  return rc;
}

int tp_call_fail (tp_call *c, const char *code, const char *message) {
  if (c == NULL) return TP_EINVAL;
  if (c->state == CALL_DONE && !c->handler_owns) return TP_ESTATE;
  if (code == NULL || strncmp(code, "tool.", 5) != 0) code = "tool.failed";
  int rc = TP_ESTATE;
  if (c->state != CALL_DONE && !c->cancelled && c->run) {
    call_fail_now(c, code, "tools.%s failed: %.*s", c->name, TP_MSG_MAX + 1,
                  message ? message : "no reason given");
    rc = TP_OK;
  }
  handler_done(c);
  return rc;
}

size_t tp_run_pending (tp_run *r, tp_call **calls, size_t max) {
  size_t n = 0;
  if (r == NULL || calls == NULL) return 0;
  for (size_t i = tp__run_active_from(r); i < r->ncallv && n < max; i++) {
    tp_call *c = r->callv[i];
    if (c != NULL && c->state == CALL_RUNNING && c->tool && c->tool->fn == NULL &&
        c->tool->lua_ref == LUA_NOREF)
      calls[n++] = c;
  }
  return n;
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

/* One record: {"tool":..,"ok":..,["error":..,]"ms":..,"bytes_in":..,"bytes_out":..[,"line":..]} */
#define RECORD_ROOM (160 + 2 * NAME_ROOM)
static void put_record (char *out, size_t *o, const tp_call *c) {
  uint64_t end = c->state == CALL_DONE ? c->end_ns : tp__now_ns();
  uint64_t us = (end - c->start_ns) / 1000;
  int ok = c->state == CALL_DONE && c->ok;
  put_lit(out, o, "{\"tool\":");
  put_name(out, o, c->name ? c->name : "?");
  put_lit(out, o, ok ? ",\"ok\":true" : ",\"ok\":false,\"error\":");
  if (!ok) put_name(out, o, c->state == CALL_DONE && c->code ? c->code : "cancelled");
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
char *tp__run_calls_text (tp_run *r, size_t *len) {
  size_t listed = 0, o = 0;
  for (size_t i = 0; i < r->ncallv; i++) {
    if (r->callv[i] != NULL && !is_listed(r->callv[i])) let_go(r, i);
    listed += r->callv[i] != NULL;
  }
  /* sized from what is there: a buffer for every record a run may list is over 128 KiB,
  ** which glibc gives back to the system at each free (a brk pair a run, 2x a cold run) */
  size_t cap = 3 + listed * (RECORD_ROOM + 1) + (r->summary.calls > 0 ? SUMMARY_ROOM : 0);
  char *out = malloc(cap);
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
      if (c->host_ref != LUA_NOREF) tp__host_cancel(r->e, c);
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
    tp__call_release(c);
  }
  tp__host_refund(r->sb, r->capcallv * SLOT_COST);
  for (size_t i = 0; i < r->summary.ntools; i++) {
    tp__host_refund(r->sb, block_cost(strlen(r->summary.by_tool[i].name) + 1));
    free(r->summary.by_tool[i].name);
  }
  free(r->callv);
  free(r->callid);
  r->callv = NULL;
  r->callid = NULL;
  r->ncallv = r->capcallv = r->nholes = r->active_from = 0;
  memset(&r->summary, 0, sizeof r->summary);
}

/* ---- what the script sees --------------------------------------------------------- */

static char ns_key;  /* namespace proxies: [ns_key] = the dotted prefix ("" at the root) */

static int current_line (lua_State *L) {
  lua_Debug ar;
  for (int level = 1; lua_getstack(L, level, &ar); level++) {
    if (!lua_getinfo(L, "Sl", &ar)) break;
    if (ar.currentline > 0 && strcmp(ar.source, "=script") == 0) return ar.currentline;
  }
  return 0;
}

/* The dotted name of a namespace proxy at idx (its length in *len), or NULL. */
static const char *ns_prefix (lua_State *L, int idx, size_t *len) {
  if (lua_type(L, idx) != LUA_TTABLE) return NULL;
  lua_rawgetp(L, idx, &ns_key);
  const char *p = lua_tolstring(L, -1, len);  /* kept alive by the table */
  lua_pop(L, 1);
  return p;
}

static void push_namespace (lua_State *L, const char *prefix, size_t len);

static int tool_k (lua_State *L, int status, lua_KContext ctx);

static const char cannot_wait[] = TP_MSG_CANNOT_WAIT;

/* Delivers the call's result, or yields until it is ready. */
static int await_call (lua_State *L, uint64_t id) {
  tp_sandbox *sb = tp__sandbox_of(L);
  tp__sandbox_check(L, sb);
  if (!tp__call_ready(sb->run, id)) {
    if (!lua_isyieldable(L)) return luaL_error(L, "%s", cannot_wait);
    lua_pushlightuserdata(L, &tp__request_tag);
    lua_pushinteger(L, (lua_Integer)id);
    return lua_yieldk(L, 2, (lua_KContext)id, tool_k);
  }
  if (tp__call_consume(sb->run, id, L)) return 1;
  tp__sandbox_check(L, sb);  /* limit.tool_calls is a verdict, not an error object */
  return lua_error(L);
}

static int tool_k (lua_State *L, int status, lua_KContext ctx) {
  (void)status;
  lua_settop(L, 0);
  return await_call(L, (uint64_t)ctx);
}

/* Refuses call c before it starts with an error object the script gets at once. The
** object is made first: refusing a call past the listed ones lets go of it. */
static int refuse_with_object (lua_State *L, tp_run *r, tp_call *c, const char *msg) {
  push_error_object(L, "tool.invalid_input", msg, c->name);
  call_refuse(r, c, "tool.invalid_input", msg);
  return lua_error(L);
}

/* __call of a namespace: tools.a.b(args). Every call of a tool is counted first
** (call_attempt), then refused or started. */
static int ns_call (lua_State *L) {
  tp_sandbox *sb = tp__sandbox_of(L);
  tp_run *r = sb->run;
  size_t nlen = 0;
  const char *prefix = ns_prefix(L, 1, &nlen);
  tp__sandbox_check(L, sb);
  if (prefix == NULL || nlen == 0)
    return luaL_error(L, "tools is a namespace: call a tool, e.g. tools.fs.read{path = \"a\"}");
  int exact = nlen <= TP_TOOL_NAME_MAX && memchr(prefix, '\0', nlen) == NULL;
  tp_call *c = call_attempt(r, prefix, nlen, current_line(L));
  int limited = c != NULL && c->state == CALL_DONE;  /* limit.tool_calls */
  if (limited) call_taken(r, c);  /* the script never gets it: the verdict ends the run */
  tp__sandbox_check(L, sb);       /* limit.tool_calls, or the host out of memory */
  if (c == NULL || limited) return luaL_error(L, "the call was refused");  /* not reached */
  const char *name = c->name;  /* the host's copy, at most TP_TOOL_NAME_MAX bytes */
  if (!lua_isyieldable(L)) {  /* refused before it starts: no side effect behind an error */
    call_refuse(r, c, "runtime", cannot_wait);
    return luaL_error(L, "%s", cannot_wait);
  }
  json_t *args = NULL;
  int t = lua_type(L, 2);
  char msg[1200];
  tp_json_opts o;  /* the tree is charged to the run's host budget as it is built */
  memset(&o, 0, sizeof o);
  o.max_bytes = sb->limits.tool_bytes;
  o.budget = tp__sandbox_budget(sb);
  if (t == LUA_TNONE || t == LUA_TNIL) args = json_object();
  else if (t == LUA_TTABLE && ns_prefix(L, 2, NULL) != NULL) {
    snprintf(msg, sizeof msg, "tools.%s: called with ':' — call it with a dot: tools.%s{...}",
             name, name);
    call_refuse(r, c, "runtime", msg);
    lua_settop(L, 0);
    lua_pushstring(L, msg);
    return lua_error(L);
  }
  else if (t == LUA_TTABLE) {
    tp_json_err jerr;
    args = tp_json_from_lua_ex(L, 2, &o, &jerr);
    if (args != NULL && !json_is_object(args)) tp__host_refund(sb, o.cost);
    if (args == NULL || !json_is_object(args)) {
      if (args == NULL)
        snprintf(msg, sizeof msg, "tools.%s: the arguments cannot be sent as JSON: %s", name,
                 jerr.message);
      else
        snprintf(msg, sizeof msg, "tools.%s: the arguments must be a table of named fields, "
                 "e.g. tools.%s{key = value}, not a list", name, name);
      json_decref(args);
      return refuse_with_object(L, r, c, msg);
    }
  }
  else {
    snprintf(msg, sizeof msg, "tools.%s: the arguments must be a table of named fields, "
             "e.g. tools.%s{key = value}, not a %s", name, name, luaL_typename(L, 2));
    return refuse_with_object(L, r, c, msg);
  }
  uint64_t id = c->id;
  /* the tree stays charged (o.cost, by the walker) until the call lets go of it
  ** (args_release); the text, when one is made, is charged by call_start */
  c->args_cost = o.cost;
  c->charged += o.cost;
  call_start(r, c, nlen, exact, args);
  lua_settop(L, 0);
  return await_call(L, id);
}

/* tools.a.b: a namespace named "a.b", made in the sandbox (the script's memory). The
** name is not limited here; the host copies at most TP_TOOL_NAME_MAX bytes of it when
** it is called. */
static int ns_index (lua_State *L) {
  size_t plen, klen;
  const char *prefix = ns_prefix(L, 1, &plen);
  if (prefix == NULL || lua_type(L, 2) != LUA_TSTRING) return 0;
  const char *key = lua_tolstring(L, 2, &klen);
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  luaL_addlstring(&b, prefix, plen);
  if (plen > 0) luaL_addchar(&b, '.');
  luaL_addlstring(&b, key, klen);
  luaL_pushresult(&b);
  size_t flen;
  const char *full = lua_tolstring(L, -1, &flen);
  push_namespace(L, full, flen);
  lua_pushvalue(L, 2);
  lua_pushvalue(L, -2);
  lua_rawset(L, 1);  /* cache */
  return 1;
}

static int ns_newindex (lua_State *L) {
  return luaL_error(L, "the tools namespace is read-only");
}

static int ns_tostring (lua_State *L) {
  const char *p = ns_prefix(L, 1, NULL);
  lua_pushfstring(L, "tools%s%s", p && *p ? "." : "", p ? p : "");
  return 1;
}

static void push_namespace (lua_State *L, const char *prefix, size_t len) {
  lua_createtable(L, 0, 1);
  lua_pushlstring(L, prefix, len);
  lua_rawsetp(L, -2, &ns_key);
  luaL_getmetatable(L, "tidepool.ns");
  lua_setmetatable(L, -2);
}

static int tools_list (lua_State *L) {
  tp_sandbox *sb = tp__sandbox_of(L);
  tp_engine *e = sb->run->e;
  lua_createtable(L, (int)e->ntools, 0);
  for (size_t i = 0; i < e->ntools; i++) {
    lua_pushstring(L, e->tools[i]->name);
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
  tp_json_push_array_mt(L);
  lua_setmetatable(L, -2);
  return 1;
}

/*
** Discovery inside a script: describe.lua runs in the host state for the run, polling
** its verdict (host.c), on capped inputs: a tool name is at most 128 bytes (longer ones
** name no tool), a query at most DISCOVERY_QUERY_MAX bytes, of which describe.lua reads
** 16 words and returns at most 50 tools. What the host builds for the answer is charged
** to the run's host budget while it lives.
*/
#define DISCOVERY_QUERY_MAX 1024
#define DISCOVERY_NODE_COST 128   /* host bytes of a JSON node of a search result */

static int tools_describe (lua_State *L) {
  tp_sandbox *sb = tp__sandbox_of(L);
  size_t len;
  const char *name = luaL_checklstring(L, 1, &len);
  if (len > 128 || strlen(name) != len || tp__tool_find(sb->run->e, name) == NULL)
    return luaL_error(L, "tools.describe: there is no tool %s%s (tools.list() lists them)",
                      len > 128 ? lua_pushlstring(L, name, 64) : name, len > 128 ? "..." : "");
  char *text = tp__host_describe(sb->run->e, sb, "lua", name);
  tp__sandbox_check(L, sb);  /* a verdict stopped it */
  if (text == NULL) return luaL_error(L, "tools.describe: no description available");
  size_t n = strlen(text) + 1;
  if (tp__host_charge(sb, n) != 0) {
    free(text);
    tp__sandbox_check(L, sb);  /* limit.memory */
  }
  lua_pushlstring(L, text, n - 1);
  free(text);
  tp__host_refund(sb, n);
  return 1;
}

static int tools_search (lua_State *L) {
  tp_sandbox *sb = tp__sandbox_of(L);
  size_t qlen;
  const char *q = luaL_checklstring(L, 1, &qlen);
  if (qlen > DISCOVERY_QUERY_MAX)
    return luaL_error(L, "tools.search: the query is %I bytes, over the limit of %d: search "
                      "with a few words", (LUAI_UACINT)qlen, DISCOVERY_QUERY_MAX);
  json_t **slot = tp_json_box(L);  /* owns the tree while pushing it may raise */
  char *json = tp__host_search(sb->run->e, sb, q);
  tp__sandbox_check(L, sb);  /* a verdict stopped it */
  size_t len = json ? strlen(json) : 0, cost = 0;
  if (json != NULL) {
    /* the text, and the tree made of it: about 4 nodes a result, one per 40 bytes */
    cost = len + 1 + (len / 40 + 1) * DISCOVERY_NODE_COST;
    if (tp__host_charge(sb, cost) != 0) {
      free(json);
      tp__sandbox_check(L, sb);  /* limit.memory */
    }
  }
  tp_json_err jerr;
  *slot = json ? tp_json_loads(json, len, &jerr) : NULL;
  free(json);
  if (*slot == NULL) { tp__host_refund(sb, cost); lua_newtable(L); return 1; }
  tp_json_push(L, *slot, 0);
  json_decref(*slot);
  *slot = NULL;
  tp__host_refund(sb, cost);
  return 1;
}

static int error_tostring (lua_State *L) {
  lua_pushliteral(L, "code");
  lua_rawget(L, 1);
  lua_pushliteral(L, "message");
  lua_rawget(L, 1);
  lua_pushfstring(L, "%s: %s", lua_tostring(L, -2) ? lua_tostring(L, -2) : "error",
                  lua_tostring(L, -1) ? lua_tostring(L, -1) : "");
  return 1;
}

/* ---- parallel --------------------------------------------------------------------------
** parallel(f1, ..., fn) runs each function as its own coroutine and resumes whichever
** can go on; their tool calls are all pending at once. It returns the first value of
** each function, in order. When some fail, it still waits for all (so no branch is left
** half-done with its side effects unknown), then raises the error of the first failing
** function in argument order, with field index = its position.
**
** Stack while it runs: 1..n the functions, then P (threads), W (what each waits for:
** an id, true = anything, false = done), R (results), E (errors).
*/
static int parallel_k (lua_State *L, int status, lua_KContext ctx);

static int parallel_pass (lua_State *L, int n) {
  tp_sandbox *sb = tp__sandbox_of(L);
  int P = n + 1, W = n + 2, R = n + 3, E = n + 4;
  lua_settop(L, E);
  int pending = 0;
  for (int i = 1; i <= n; i++) {
    lua_rawgeti(L, W, i);
    int done = lua_type(L, -1) == LUA_TBOOLEAN && !lua_toboolean(L, -1);
    int any = lua_type(L, -1) == LUA_TBOOLEAN && lua_toboolean(L, -1);
    uint64_t id = lua_isinteger(L, -1) ? (uint64_t)lua_tointeger(L, -1) : 0;
    lua_pop(L, 1);
    if (done) continue;
    if (!any && id && !tp__call_ready(sb->run, id)) { pending = 1; continue; }
    lua_rawgeti(L, P, i);
    lua_State *co = lua_tothread(L, -1);
    lua_pop(L, 1);
    int nres;
    for (;;) {
      atomic_store(&sb->running, co);
      int st = lua_resume(co, L, 0, &nres);
      atomic_store(&sb->running, L);
      tp__sandbox_charge(sb, co);  /* the instructions of its unfinished hook period */
      tp__sandbox_check(L, sb);
      if (st == LUA_YIELD && sb->hook_yielded) {
        if (lua_isyieldable(L)) {  /* a time slice ended inside the branch */
          lua_pushboolean(L, 1);
          lua_rawseti(L, W, i);
          return lua_yieldk(L, 0, (lua_KContext)n, parallel_k);
        }
        sb->hook_yielded = 0;
        continue;
      }
      if (st == LUA_YIELD && nres >= 1 && lua_type(co, -nres) == LUA_TLIGHTUSERDATA &&
          lua_touserdata(co, -nres) == &tp__request_tag) {
        if (nres >= 2 && lua_isinteger(co, -nres + 1)) lua_pushinteger(L, lua_tointeger(co, -nres + 1));
        else lua_pushboolean(L, 1);
        lua_rawseti(L, W, i);
        lua_pop(co, nres);
        pending = 1;
      }
      else if (st == LUA_YIELD) {
        lua_pop(co, nres);
        lua_pushliteral(L, "coroutine.yield was called directly in a parallel branch "
                           "(yield only inside your own coroutines)");
        lua_rawseti(L, E, i);
        lua_pushboolean(L, 0);
        lua_rawseti(L, W, i);
      }
      else if (st == LUA_OK) {
        if (nres > 0) {  /* the first of its nres results */
          lua_pop(co, nres - 1);
          lua_xmove(co, L, 1);
          lua_rawseti(L, R, i);
          lua_settop(co, 0);
        }
        lua_pushboolean(L, 0);
        lua_rawseti(L, W, i);
      }
      else {
        lua_xmove(co, L, 1);
        lua_rawseti(L, E, i);
        lua_pushboolean(L, 0);
        lua_rawseti(L, W, i);
      }
      break;
    }
  }
  if (pending) {
    if (!lua_isyieldable(L))
      return luaL_error(L, "parallel was called where Lua cannot wait (inside a metamethod "
                           "or a callback of gsub/sort)");
    lua_pushlightuserdata(L, &tp__request_tag);
    return lua_yieldk(L, 1, (lua_KContext)n, parallel_k);
  }
  for (int i = 1; i <= n; i++) {
    if (lua_rawgeti(L, E, i) != LUA_TNIL) {
      if (lua_type(L, -1) == LUA_TTABLE) {
        lua_pushinteger(L, i);
        lua_setfield(L, -2, "index");
      }
      return lua_error(L);
    }
    lua_pop(L, 1);
  }
  luaL_checkstack(L, n, "too many results of parallel");
  for (int i = 1; i <= n; i++) lua_rawgeti(L, R, i);
  return n;
}

static int parallel_k (lua_State *L, int status, lua_KContext ctx) {
  (void)status;
  return parallel_pass(L, (int)ctx);
}

static int sb_parallel (lua_State *L) {
  int n = lua_gettop(L);
  if (n > 1000) return luaL_error(L, "parallel: at most 1000 functions");
  for (int i = 1; i <= n; i++) luaL_checktype(L, i, LUA_TFUNCTION);
  luaL_checkstack(L, 8, "parallel");
  lua_createtable(L, n, 0);  /* P */
  for (int i = 1; i <= n; i++) {
    lua_State *co = lua_newthread(L);
    lua_pushvalue(L, i);
    lua_xmove(L, co, 1);
    lua_rawseti(L, n + 1, i);
  }
  lua_createtable(L, n, 0);  /* W: all start as "anything" */
  for (int i = 1; i <= n; i++) { lua_pushboolean(L, 1); lua_rawseti(L, -2, i); }
  lua_createtable(L, n, 0);  /* R */
  lua_createtable(L, n, 0);  /* E */
  return parallel_pass(L, n);
}

void tp__tools_open (lua_State *L) {
  int G = lua_gettop(L);
  if (luaL_newmetatable(L, "tidepool.ns")) {
    lua_pushcfunction(L, ns_index);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, ns_newindex);
    lua_setfield(L, -2, "__newindex");
    lua_pushcfunction(L, ns_call);
    lua_setfield(L, -2, "__call");
    lua_pushcfunction(L, ns_tostring);
    lua_setfield(L, -2, "__tostring");
    lua_pushboolean(L, 0);
    lua_setfield(L, -2, "__metatable");
    lua_pushboolean(L, 1);
    lua_rawsetp(L, -2, &tp__readonly_key);  /* rawset refuses namespaces */
  }
  lua_pop(L, 1);
  if (luaL_newmetatable(L, "tidepool.error")) {
    lua_pushcfunction(L, error_tostring);
    lua_setfield(L, -2, "__tostring");
    lua_pushliteral(L, "tool error");
    lua_setfield(L, -2, "__metatable");
  }
  lua_pop(L, 1);
  push_namespace(L, "", 0);
  lua_pushliteral(L, "list");
  lua_pushcfunction(L, tools_list);
  lua_rawset(L, -3);
  lua_pushliteral(L, "describe");
  lua_pushcfunction(L, tools_describe);
  lua_rawset(L, -3);
  lua_pushliteral(L, "search");
  lua_pushcfunction(L, tools_search);
  lua_rawset(L, -3);
  lua_setfield(L, G, "tools");
  lua_pushcfunction(L, sb_parallel);
  lua_setfield(L, G, "parallel");
}
