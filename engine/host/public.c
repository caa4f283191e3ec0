/*
** public.c: the public functions that a front end needs beyond running scripts (see
** tidepool.h): the limits table and its parser, a run's ok flag and call events, the
** engine's tools one by one, unloading plugin tools, load problems one by one, the
** engine's loop and a kv store shared by engines. Each is a thin layer over an internal
** function or field; this file is the only one of them that reads the engine's structs.
** (To be spread over one file per object, as the rest of the API.)
*/
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "registry.h"
#include "host.h"
#include "run.h"
#include "calls.h"
#include "sandbox.h"
#include "limits_table.h"

/* ---- limits ---------------------------------------------------------------------------- */

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

/* ---- runs --------------------------------------------------------------------------- */

int tp_run_ok (const tp_run *r) { return tp_run_done(r) && r->ok; }

void tp_run_on_call (tp_run *r, tp_call_event_cb cb, void *ud) {
  if (r != NULL) tp__run_set_call_hook(r, cb, cb ? ud : NULL);
}

/* ---- tools -------------------------------------------------------------------------- */

int tp_engine_load_tools_cb (tp_engine *e, const char *dir, tp_problem_cb problem,
                             void *ud) {
  return tp__host_load_dir(e, dir, problem, ud);
}

int tp_engine_unload_tools (tp_engine *e) {
  if (e == NULL) return TP_EINVAL;
  if (e->core.runs != NULL) return TP_ESTATE;
  size_t n = tp__engine_drop_plugin_tools(e);
  return n > INT32_MAX ? INT32_MAX : (int)n;
}

size_t tp_engine_tool_count (const tp_engine *e) { return e ? e->ntools : 0; }

int tp_engine_tool_info (const tp_engine *e, size_t i, tp_tool_info *info) {
  if (e == NULL || info == NULL || i >= e->ntools) return TP_EINVAL;
  const tp_tool *t = e->tools[i];
  info->name = t->name;
  info->description = t->description ? t->description : "";
  info->origin = t->origin;
  info->timeout_us = t->face.timeout_us;
  return TP_OK;
}

int tp_engine_tool_schema (const tp_engine *e, size_t i, int output, char **json) {
  if (json != NULL) *json = NULL;
  if (e == NULL || json == NULL || i >= e->ntools) return TP_EINVAL;
  const json_t *s = output ? e->tools[i]->output : e->tools[i]->input;
  if (s == NULL) return TP_OK;
  *json = tp_json_dumps(s);
  return *json ? TP_OK : TP_ENOMEM;
}

/* ---- the loop and the shared store ------------------------------------------------------- */

void *tp_engine_loop (tp_engine *e) { return tp__engine_loop(e); }

tp_store *tp_store_create (void) { return (tp_store *)tp__kvstore_new(); }

void tp_store_destroy (tp_store *s) {
  if (s != NULL) tp__kvstore_unref((tp_kvstore *)s);
}

int tp_engine_set_store (tp_engine *e, tp_store *s) {
  if (e == NULL || s == NULL) return TP_EINVAL;
  if (e->H != NULL) return TP_ESTATE;
  e->kv = (tp_kvstore *)s;
  return TP_OK;
}
