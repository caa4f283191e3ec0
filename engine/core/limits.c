/*
** limits.c: the limits table (see limits_table.h), tp_limits_init, the one parser of sizes,
** counts and durations every front end uses, and the words of a run's verdicts.
*/
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "limits_table.h"
#include "sandbox.h"

#define F(m) offsetof(tp_limits, m), sizeof(((tp_limits *)0)->m)
#define KiB (UINT64_C(1) << 10)
#define MiB (UINT64_C(1) << 20)
#define SEC UINT64_C(1000000)

static const char busy_hint[] = "Look for a loop that never ends, or do less work in one "
  "run (fewer items, a cheaper method).";
static const char calls_hint[] = "Make fewer tool calls: use a tool that returns many items "
  "at once, or stop the loop earlier.";


const tp__limit tp__limits[] = {
  { "memory", F(memory), TP__UNIT_BYTES, 64 * MiB,
    "--memory", "--memory", "memory",
    "memory of the script's Lua state",
    TP_KILL_MEMORY, "limit.memory", "the script used more than its memory limit of %s",
    "Keep less data alive at once: process items in a loop instead of collecting them "
    "all, and avoid building huge strings or tables.", 1 },
  { "instructions", F(instructions), TP__UNIT_COUNT, 0,
    "--instructions", "--instructions", "instructions",
    "VM instructions, costing about 2x speed",
    TP_KILL_INSTRUCTIONS, "limit.instructions",
    "the script ran more than its limit of %s instructions", busy_hint, 0 },
  { "cpu_us", F(cpu_us), TP__UNIT_DURATION, 10 * SEC,
    "--cpu", "--cpu", "cpu",
    "CPU time of the run",
    TP_KILL_CPU, "limit.cpu", "the script used more than its CPU time limit of %s",
    busy_hint, 0 },
  { "wall_us", F(wall_us), TP__UNIT_DURATION, 10 * SEC,
    "--timeout", "--timeout", "timeout",
    "wall-clock time from the start",
    TP_KILL_TIME, "limit.time", "the script ran longer than its time limit of %s",
    busy_hint, 0 },
  { "output", F(output), TP__UNIT_BYTES, 1 * MiB,
    "--max-output", "--max-output", "max_output",
    "bytes printed",
    TP_KILL_OUTPUT, "limit.output", "the script printed more than its output limit of %s",
    "Print less: return the data as the script's result, or print a summary instead of "
    "every item.", 0 },
  { "source", F(source), TP__UNIT_BYTES, 1 * MiB,
    "--max-source", "--max-source", "max_source",
    "bytes of the script",
    TP_KILL_NONE, "limit.source", NULL,
    "Write a shorter script: loop over data instead of spelling it out.", 0 },
  { "result", F(result), TP__UNIT_BYTES, 4 * MiB,
    "--max-result", "--max-result", "max_result",
    "bytes of the result as JSON",
    TP_KILL_RESULT, "limit.result",
    "the script's result is larger than its result limit of %s",
    "Return less: a summary, the first items, or only the fields that are needed.", 1 },
  { "tool_calls", F(tool_calls), TP__UNIT_COUNT, 1000,
    "--tool-calls", "--tool-calls", "tool_calls",
    "tool calls per run",
    TP_KILL_TOOL_CALLS, "limit.tool_calls",
    "the script made more tool calls than its limit allows", calls_hint, 1 },
  { "tool_calls_per_tool", F(tool_calls_per_tool), TP__UNIT_COUNT, 0,
    "--tool-calls-per-tool", "--tool-calls-per-tool", "tool_calls_per_tool",
    "calls of any one tool per run",
    TP_KILL_TOOL_CALLS, "limit.tool_calls", NULL, calls_hint, 1 },
  { "tool_in_flight", F(tool_in_flight), TP__UNIT_COUNT, 32,
    "--tool-in-flight", "--tool-in-flight", "tool_in_flight",
    "calls running at once (more wait)",
    TP_KILL_NONE, NULL, NULL, NULL, 0 },
  { "tool_bytes", F(tool_bytes), TP__UNIT_BYTES, 4 * MiB,
    "--tool-bytes", "--tool-bytes", "tool_bytes",
    "JSON bytes of a call's args, or its result",
    TP_KILL_NONE, NULL, NULL, NULL, 0 },
  { "tool_timeout_us", F(tool_timeout_us), TP__UNIT_DURATION, 30 * SEC,
    "--tool-timeout", "--tool-timeout", "tool_timeout",
    "a call's deadline (the tool's, if shorter)",
    TP_KILL_NONE, NULL, NULL, NULL, 0 },
  { "fs_bytes", F(fs_bytes), TP__UNIT_BYTES, 64 * MiB,
    "--fs-quota", "--fs-quota", "fs_quota",
    "bytes the fs.* tools may write in a run",
    TP_KILL_NONE, NULL, NULL, NULL, 0 },
};

const size_t tp__limits_count = sizeof tp__limits / sizeof tp__limits[0];

void tp_limits_init (tp_limits *l) {
  if (l == NULL) return;
  memset(l, 0, sizeof *l);
  for (size_t i = 0; i < tp__limits_count; i++) tp__limit_set(l, &tp__limits[i], tp__limits[i].def);
}

const tp__limit *tp__limit_field (size_t offset) {
  for (size_t i = 0; i < tp__limits_count; i++)
    if (tp__limits[i].offset == offset) return &tp__limits[i];
  return NULL;
}

uint64_t tp__limit_max (const tp__limit *li) {
  if (li->size == 4) return UINT32_MAX;
  if (li->unit == TP__UNIT_DURATION) return TP__DURATION_MAX;
  return li->size == 8 ? UINT64_MAX : (uint64_t)SIZE_MAX;
}

uint64_t tp__limit_get (const tp_limits *l, const tp__limit *li) {
  const char *p = (const char *)l + li->offset;
  if (li->size == 4) { uint32_t v; memcpy(&v, p, 4); return v; }
  uint64_t v;
  memcpy(&v, p, 8);
  return v;
}

void tp__limit_set (tp_limits *l, const tp__limit *li, uint64_t v) {
  char *p = (char *)l + li->offset;
  if (li->size == 4) { uint32_t w = (uint32_t)v; memcpy(p, &w, 4); }
  else memcpy(p, &v, 8);
}

/* ---- the parser ---------------------------------------------------------------------- */

static int ieq (const char *a, const char *b) { return strcasecmp(a, b) == 0; }

/* Leading decimal digits of *s into *n, advancing *s; TP__PARSE_RANGE past UINT64_MAX. */
static int digits (const char **s, uint64_t *n) {
  const char *p = *s;
  uint64_t v = 0;
  if (*p < '0' || *p > '9') return TP__PARSE_BAD;
  for (; *p >= '0' && *p <= '9'; p++) {
    unsigned d = (unsigned)(*p - '0');
    if (v > (UINT64_MAX - d) / 10) return TP__PARSE_RANGE;
    v = v * 10 + d;
  }
  *s = p;
  *n = v;
  return 0;
}

static int parse_bytes (const char *s, uint64_t max, uint64_t *out) {
  uint64_t n, mul = 1;
  int rc = digits(&s, &n);
  if (rc != 0) return rc;
  if (*s == 'k' || *s == 'K') mul = KiB;
  else if (*s == 'm' || *s == 'M') mul = MiB;
  else if (*s == 'g' || *s == 'G') mul = UINT64_C(1) << 30;
  if (mul != 1) {
    s++;
    if (ieq(s, "b") || ieq(s, "ib")) s += strlen(s);
  }
  if (*s != '\0') return TP__PARSE_BAD;
  if (n > max / mul) return TP__PARSE_RANGE;
  *out = n * mul;
  return 0;
}

static int parse_count (const char *s, uint64_t max, uint64_t *out) {
  uint64_t n;
  int rc = digits(&s, &n);
  if (rc != 0) return rc;
  if (*s != '\0') return TP__PARSE_BAD;
  if (n > max) return TP__PARSE_RANGE;
  *out = n;
  return 0;
}

/* A decimal number (digits, a fraction, an exponent: no sign, hex, inf or nan, which
** strtod alone would take) followed by a unit. */
static int parse_duration (const char *s, uint64_t max, uint64_t *out) {
  const char *p = s;
  size_t nd = strspn(p, "0123456789");
  p += nd;
  if (*p == '.') { size_t f = strspn(p + 1, "0123456789"); nd += f; p += 1 + f; }
  if (nd == 0) return TP__PARSE_BAD;
  if ((*p == 'e' || *p == 'E') && p[1 + (p[1] == '+' || p[1] == '-')] >= '0' &&
      p[1 + (p[1] == '+' || p[1] == '-')] <= '9') {
    p += 1 + (p[1] == '+' || p[1] == '-');
    p += strspn(p, "0123456789");
  }
  double mul;
  if (*p == '\0' || strcmp(p, "s") == 0) mul = 1e6;
  else if (strcmp(p, "ms") == 0) mul = 1e3;
  else if (strcmp(p, "us") == 0) mul = 1;
  else if (strcmp(p, "m") == 0 || strcmp(p, "min") == 0) mul = 60e6;
  else return TP__PARSE_BAD;
  double v = strtod(s, NULL);  /* 1e400 is HUGE_VAL, 1e-400 is 0 or tiny: both fine below */
  double us = v * mul;
  if (!(us <= (double)max)) return TP__PARSE_RANGE;  /* also inf */
  *out = (uint64_t)(us + 0.5);
  if (*out > max) *out = max;
  return 0;
}

int tp__parse_value (tp__unit unit, const char *text, uint64_t max, uint64_t *out) {
  if (text == NULL) return TP__PARSE_BAD;
  if (text[0] == '-' && ((text[1] >= '0' && text[1] <= '9') || text[1] == '.'))
    return TP__PARSE_NEGATIVE;
  switch (unit) {
    case TP__UNIT_BYTES: return parse_bytes(text, max, out);
    case TP__UNIT_COUNT: return parse_count(text, max, out);
    case TP__UNIT_DURATION: return parse_duration(text, max, out);
  }
  return TP__PARSE_BAD;
}

int tp__parse_seconds (double s, uint64_t max, uint64_t *out) {
  if (s != s) return TP__PARSE_BAD;
  if (s < 0) return TP__PARSE_NEGATIVE;
  double us = s * 1e6;
  if (!(us <= (double)max)) return TP__PARSE_RANGE;
  *out = (uint64_t)(us + 0.5);
  if (*out > max) *out = max;
  return 0;
}

void tp__parse_why (tp__unit unit, const char *noun, int rc, const char *text, uint64_t max,
                    char *buf, size_t len) {
  const char *what = unit == TP__UNIT_BYTES ? "size" : unit == TP__UNIT_DURATION ? "duration"
                   : noun ? noun : "count";
  if (rc == TP__PARSE_NEGATIVE)
    snprintf(buf, len, "bad %s '%s' (it cannot be negative; 0 means no limit)", what, text);
  else if (rc == TP__PARSE_RANGE) {
    char m[48];
    tp__limit_words(unit, max, m, sizeof m);
    snprintf(buf, len, "bad %s '%s' (too large: at most %s)", what, text, m);
  }
  else if (unit == TP__UNIT_BYTES)
    snprintf(buf, len, "bad size '%s' (use bytes or a suffix: 512K, 64M, 1G)", text);
  else if (unit == TP__UNIT_DURATION)
    snprintf(buf, len, "bad duration '%s' (use 500ms, 2s, 1m)", text);
  else snprintf(buf, len, "bad %s '%s' (use a whole number)", what, text);
}

void tp__limit_why (const tp__limit *li, int rc, const char *text, char *buf, size_t len) {
  const char *noun = strcmp(li->field, "instructions") == 0 ? "instruction count" : NULL;
  tp__parse_why(li->unit, noun, rc, text, tp__limit_max(li), buf, len);
}

/* ---- words ------------------------------------------------------------------------- */

void tp__limit_words (tp__unit unit, uint64_t v, char *buf, size_t len) {
  unsigned long long n = (unsigned long long)v;
  if (unit == TP__UNIT_BYTES) {
    if (n >= MiB && n % MiB == 0) snprintf(buf, len, "%llu MiB", n >> 20);
    else if (n >= KiB && n % KiB == 0) snprintf(buf, len, "%llu KiB", n >> 10);
    else snprintf(buf, len, "%llu bytes", n);
  }
  else if (unit == TP__UNIT_DURATION) {
    if (n % SEC == 0) snprintf(buf, len, "%llu s", n / SEC);
    else if (n % 1000 == 0) snprintf(buf, len, "%llu ms", n / 1000);
    else snprintf(buf, len, "%llu us", n);
  }
  else snprintf(buf, len, "%llu", n);
}

void tp__limit_short (tp__unit unit, uint64_t v, char *buf, size_t len) {
  unsigned long long n = (unsigned long long)v;
  if (n == 0) snprintf(buf, len, "none");
  else if (unit == TP__UNIT_BYTES) {
    if (n % (1ull << 30) == 0) snprintf(buf, len, "%lluG", n >> 30);
    else if (n % MiB == 0) snprintf(buf, len, "%lluM", n >> 20);
    else if (n % KiB == 0) snprintf(buf, len, "%lluK", n >> 10);
    else snprintf(buf, len, "%llu", n);
  }
  else if (unit == TP__UNIT_DURATION) {
    if (n % (60 * SEC) == 0 && n >= 600 * SEC) snprintf(buf, len, "%llum", n / (60 * SEC));
    else if (n % SEC == 0) snprintf(buf, len, "%llus", n / SEC);
    else if (n % 1000 == 0) snprintf(buf, len, "%llums", n / 1000);
    else snprintf(buf, len, "%lluus", n);
  }
  else snprintf(buf, len, "%llu", n);
}

/* ---- verdicts ------------------------------------------------------------------------ */

/* The limit entry that words verdict why: the first one whose kill it is. */
static const tp__limit *verdict_limit (tp_kill why) {
  if (why == TP_KILL_NONE) return NULL;
  for (size_t i = 0; i < tp__limits_count; i++)
    if (tp__limits[i].kill == (int)why) return &tp__limits[i];
  return NULL;
}

const char *tp__kill_code (tp_kill why) {
  const tp__limit *li = verdict_limit(why);
  if (li) return li->code;
  if (why == TP_KILL_DIVERGENCE) return "replay.divergence";
  return why == TP_KILL_CANCELLED ? "cancelled" : "runtime";
}

const char *tp__kill_hint (tp_kill why) {
  const tp__limit *li = verdict_limit(why);
  if (li) return li->hint;
  return why == TP_KILL_CANCELLED ? "The host stopped the run; run it again if needed." : NULL;
}

void tp__kill_message (const tp_sandbox *sb, tp_kill why, char *buf, size_t len) {
  const tp__limit *li = verdict_limit(why);
  if (li == NULL && why == TP_KILL_DIVERGENCE) {
    snprintf(buf, len, "%s", sb->kill_note[0] ? sb->kill_note : "the replay diverged from its log");
    return;
  }
  if (li == NULL) {
    snprintf(buf, len, "%s", why == TP_KILL_CANCELLED ? "the run was cancelled by the host"
                                                        : "stopped");
    return;
  }
  if (li->noted && sb->kill_note[0]) { snprintf(buf, len, "%s", sb->kill_note); return; }
  char n[48];
  tp__limit_words(li->unit, tp__limit_get(&sb->limits, li), n, sizeof n);
  const char *at = strstr(li->message, "%s");
  if (at) snprintf(buf, len, "%.*s%s%s", (int)(at - li->message), li->message, n, at + 2);
  else snprintf(buf, len, "%s", li->message);
}

/* ---- the table as tidepool.h shows it (tp_limit_*, tp_limits_set, tp_parse_value) ------ */

_Static_assert((int)TP_UNIT_BYTES == (int)TP__UNIT_BYTES &&
               (int)TP_UNIT_COUNT == (int)TP__UNIT_COUNT &&
               (int)TP_UNIT_DURATION == (int)TP__UNIT_DURATION,
               "tp_unit and tp__unit must agree: values cross between them by a cast");

#define LIMITS_MAX 64
static tp_limit_info infos[LIMITS_MAX];
static size_t ninfos;
static pthread_once_t infos_once = PTHREAD_ONCE_INIT;

static void infos_init (void) {
  for (size_t i = 0; i < tp__limits_count && i < LIMITS_MAX; i++) {
    const tp__limit *li = &tp__limits[i];
    infos[i] = (tp_limit_info){
      .field = li->field, .unit = (tp_unit)li->unit, .def = li->def, .max = tp__limit_max(li),
      .flag = li->flag, .mcp = li->mcp, .option = li->option, .help = li->help,
      .code = li->code, .message = li->message, .hint = li->hint };
  }
  ninfos = tp__limits_count < LIMITS_MAX ? tp__limits_count : LIMITS_MAX;
}

size_t tp_limit_count (void) {
  pthread_once(&infos_once, infos_init);
  return ninfos;
}

const tp_limit_info *tp_limit_at (size_t i) {
  return i < tp_limit_count() ? &infos[i] : NULL;
}

/* The table's entry of a public entry. */
static const tp__limit *entry_of (const tp_limit_info *li) {
  return &tp__limits[li - infos];
}

const tp_limit_info *tp_limit_find (const char *name) {
  if (name == NULL) return NULL;
  size_t n = tp_limit_count();
  for (size_t i = 0; i < n; i++) {
    const tp_limit_info *li = &infos[i];
    if (strcmp(li->field, name) == 0 || strcmp(li->flag, name) == 0 ||
        strcmp(li->option, name) == 0 || (li->mcp && strcmp(li->mcp, name) == 0)) return li;
  }
  return NULL;
}

uint64_t tp_limits_get (const tp_limits *l, const tp_limit_info *li) {
  if (l == NULL || li == NULL) return 0;
  return tp__limit_get(l, entry_of(li));
}

/* The entry called name, or NULL with err saying so. */
static const tp__limit *named (tp_limits *l, const char *name, char *err, size_t errlen) {
  const tp_limit_info *li = tp_limit_find(name);
  if (l != NULL && li != NULL) return entry_of(li);
  if (err != NULL && errlen > 0) {
    if (l == NULL) snprintf(err, errlen, "no limits to set (NULL)");
    else snprintf(err, errlen, "unknown limit '%s'", name ? name : "(null)");
  }
  return NULL;
}

int tp_limits_set (tp_limits *l, const char *name, const char *text, char *err,
                   size_t errlen) {
  const tp__limit *li = named(l, name, err, errlen);
  if (li == NULL) return TP_EINVAL;
  uint64_t v;
  int rc = tp__parse_value(li->unit, text, tp__limit_max(li), &v);
  if (rc != 0) {
    if (err != NULL && errlen > 0) tp__limit_why(li, rc, text ? text : "(null)", err, errlen);
    return TP_EINVAL;
  }
  tp__limit_set(l, li, v);
  return TP_OK;
}

int tp_limits_set_number (tp_limits *l, const char *name, double v, char *err,
                          size_t errlen) {
  const tp__limit *li = named(l, name, err, errlen);
  if (li == NULL) return TP_EINVAL;
  uint64_t max = tp__limit_max(li), out = 0;
  int rc;
  if (li->unit == TP__UNIT_DURATION) rc = tp__parse_seconds(v, max, &out);
  else if (v != v) rc = TP__PARSE_BAD;
  else if (v < 0) rc = TP__PARSE_NEGATIVE;
  else if (!(v < 18446744073709551616.0) || (uint64_t)v > max) rc = TP__PARSE_RANGE;
  else if (v != floor(v)) rc = TP__PARSE_BAD;
  else { rc = 0; out = (uint64_t)v; }
  if (rc != 0) {
    char text[64];
    snprintf(text, sizeof text, "%.14g", v);  /* as Lua's tostring */
    if (err != NULL && errlen > 0) tp__limit_why(li, rc, text, err, errlen);
    return TP_EINVAL;
  }
  tp__limit_set(l, li, out);
  return TP_OK;
}

int tp_parse_value (tp_unit unit, const char *text, uint64_t max, uint64_t *out,
                    const char *noun, char *err, size_t errlen) {
  if (unit != TP_UNIT_BYTES && unit != TP_UNIT_COUNT && unit != TP_UNIT_DURATION) {
    if (err != NULL && errlen > 0) snprintf(err, errlen, "unknown unit %d", (int)unit);
    return TP_EINVAL;
  }
  if (unit == TP_UNIT_DURATION && max > TP__DURATION_MAX) max = TP__DURATION_MAX;
  uint64_t v;
  int rc = tp__parse_value((tp__unit)unit, text, max, &v);
  if (rc != 0) {
    if (err != NULL && errlen > 0)
      tp__parse_why((tp__unit)unit, noun, rc, text ? text : "(null)", max, err, errlen);
    return TP_EINVAL;
  }
  if (out) *out = v;
  return TP_OK;
}

void tp_format_value (tp_unit unit, uint64_t v, char *buf, size_t len) {
  if (buf == NULL || len == 0) return;
  tp__limit_short((tp__unit)unit, v, buf, len);
}
