/*
** registry.c: the engine's tools, sorted by name: adding them (C tools here, Lua plugin
** tools through host.c), finding them, suggesting near names, dropping plugin tools.
*/
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lauxlib.h"

#include "util.h"
#include "registry.h"
#include "json.h"
#include "schema.h"
#include "host.h"



static int cmp_name (const void *key, const void *elem) {
  return strcmp(key, (*(tp_tool *const *)elem)->name);
}

/* A name that is not a tool's may be an alias: a scan, only on that path (a miss). */
const tp_tool *tp__tool_find (const tp_engine *e, const char *name) {
  if (e->ntools == 0) return NULL;
  tp_tool **t = bsearch(name, e->tools, e->ntools, sizeof *e->tools, cmp_name);
  if (t) return *t;
  if (!e->has_aliases) return NULL;  /* no walk: adding 10,000 tools stays linear */
  for (size_t i = 0; i < e->ntools; i++) {
    const tp_tool *x = e->tools[i];
    if (x->prov->answers && x->prov->answers(x, name)) return x;
  }
  return NULL;
}

/* A tool name: segments of [A-Za-z_][A-Za-z0-9_]* joined by dots. list, describe and
** search are names too: a script reaches such a tool with a table of arguments
** (tools.search{...}), while tools.search("words") stays discovery (namespace.c). */
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
  return NULL;
}

void tp__tool_free (tp_engine *e, tp_tool *t) {
  if (t == NULL) return;
  if (t->pdata != NULL) {  /* NULL: none, or still its maker's (a failed tp__tool_add) */
    if (t->prov->release) t->prov->release(e, t);
    if (t->prov->destroy) t->prov->destroy(t->pdata);
  }
  free(t->name);
  free(t->lua_api);
  free(t->seen);
  free(t->description);
  free(t->origin);
  json_decref(t->input);
  json_decref(t->output);
  tp__schema_free(t->in_schema);
  tp__schema_free(t->out_schema);
  free(t);
}

void tp__engine_free_tools (tp_engine *e) {
  for (size_t i = 0; i < e->ntools; i++) tp__tool_free(e, e->tools[i]);
  free(e->tools);
  e->tools = NULL;
  e->ntools = e->captools = 0;
}

static tp_schema *compile_schema (tp_engine *e, const json_t *doc, const char *tool,
                                  const char *which, int formats) {
  char err[512];
  tp_schema *s = tp__schema_compile(doc, TP_DIALECT_2020_12, NULL, formats,
                                   err, sizeof err);
  if (s == NULL) tp__engine_set_error(e, "tool %s: bad %s schema: %s", tool, which, err);
  return s;
}

tp_tool *tp__tool_make (tp_engine *e, const tp_tool_def *def, const json_t *in,
                        const json_t *out, const tp__provider *prov, void *pdata,
                        const char *origin, int *rc) {
  const char *why = bad_name(def->name);
  *rc = TP_EINVAL;
  if (why) {
    tp__engine_set_error(e, "tool \"%s\": bad name: %s", def->name ? def->name : "", why);
    return NULL;
  }
  if (in && !json_is_object(in) && !json_is_boolean(in)) {
    tp__engine_set_error(e, "tool %s: the input schema must be an object", def->name);
    return NULL;
  }
  *rc = TP_ENOMEM;
  tp_tool *t = calloc(1, sizeof *t);
  if (t == NULL) return NULL;
  t->name = strdup(def->name);
  t->description = strdup(def->description ? def->description : "");
  t->origin = origin ? strdup(origin) : NULL;
  t->prov = prov;
  t->face.timeout_us = def->timeout_us;
  t->input = in ? json_deep_copy(in) : json_pack("{s:s}", "type", "object");
  t->output = out ? json_deep_copy(out) : NULL;
  if (t->name == NULL || t->description == NULL || t->input == NULL || (out && !t->output)) {
    tp__tool_free(e, t);
    return NULL;
  }
  *rc = TP_EINVAL;
  t->in_schema = compile_schema(e, t->input, t->name, "input", 1);
  if (t->in_schema == NULL) { tp__tool_free(e, t); return NULL; }
  if (t->output) {
    t->out_schema = compile_schema(e, t->output, t->name, "output", 0);
    if (t->out_schema == NULL) { tp__tool_free(e, t); return NULL; }
  }
  t->face.name = t->name;
  t->face.in_schema = t->in_schema;
  t->face.out_schema = t->out_schema;
  t->face.flags = prov->flags;
  t->pdata = pdata;
  t->serial = ++e->tool_serial;
  *rc = TP_OK;
  return t;
}

/* Adds a tool; schemas are given as trees (borrowed). */
int tp__tool_add (tp_engine *e, const tp_tool_def *def, const json_t *in, const json_t *out,
                  const tp__provider *prov, void *pdata, const char *origin) {
  if (def->name && tp__tool_find(e, def->name)) {
    tp__engine_set_error(e, "tool %s: a tool of that name is registered already", def->name);
    return TP_EINVAL;
  }
  int rc;
  tp_tool *t = tp__tool_make(e, def, in, out, prov, pdata, origin, &rc);
  if (t == NULL) return rc;
  if (tp__tools_insert(&e->tools, &e->ntools, &e->captools, t, 16) != 0) {
    t->pdata = NULL;  /* still the caller's */
    tp__tool_free(e, t);
    return TP_ENOMEM;
  }
  return TP_OK;
}

int tp__tools_insert (tp_tool ***tools, size_t *n, size_t *cap, tp_tool *t, size_t first) {
  if (tp__grow(tools, cap, *n + 1, sizeof **tools, first) != 0) return -1;
  tp_tool **a = *tools;
  size_t i = *n;
  while (i > 0 && strcmp(a[i - 1]->name, t->name) > 0) {
    a[i] = a[i - 1];
    i--;
  }
  a[i] = t;
  (*n)++;
  return 0;
}

static json_t *parse_schema (tp_engine *e, const char *text, const char *tool,
                             const char *which, int *bad) {
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

int tp__tool_parse_schemas (tp_engine *e, const tp_tool_def *def, json_t **in, json_t **out) {
  int bad;
  const char *name = def->name ? def->name : "";
  *out = NULL;
  *in = parse_schema(e, def->input_schema, name, "input", &bad);
  if (bad) return TP_EINVAL;
  *out = parse_schema(e, def->output_schema, name, "output", &bad);
  if (bad) { json_decref(*in); *in = NULL; return TP_EINVAL; }
  return TP_OK;
}

size_t tp__engine_drop_plugin_tools (tp_engine *e) {
  size_t kept = 0, dropped = 0;
  for (size_t i = 0; i < e->ntools; i++) {
    tp_tool *t = e->tools[i];
    if (!t->prov->reloadable) { e->tools[kept++] = t; continue; }
    tp__tool_free(e, t);
    dropped++;
  }
  e->ntools = kept;  /* the order stays sorted */
  return dropped;
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

void tp__tool_suggest (const tp_engine *e, const char *name, char *buf, size_t len) {
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


/* ---- what tools.describe tells a script: host.c (tp__tools_annotate) ------------- */

/* ---- search: tools.search from a script, over the registry's data ------------------
** The tools ranked by the query's words (the first SEARCH_WORDS distinct runs of ASCII
** letters, digits and '_', lowercased): each occurrence in the lowercased name counts
** NAME_WEIGHT, each in the description 1. Tools that match nothing are left out, unless
** the query has no words, which lists every tool. Ties go by name. At most
** SEARCH_RESULTS tools, descriptions cut at SEARCH_DESCRIPTION bytes (on a character
** boundary, "..." added). The same ranking as describe.lua's search, made in C so that
** a script's search never enters the host Lua state.
*/
#define SEARCH_WORDS 16
#define SEARCH_RESULTS 50
#define SEARCH_DESCRIPTION 1000
#define NAME_WEIGHT 3

static int word_char (unsigned char ch) {
  return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
         ch == '_';
}

static char *lower_dup (const char *s) {
  char *d = strdup(s);
  for (char *p = d; p && *p; p++) if (*p >= 'A' && *p <= 'Z') *p = (char)(*p - 'A' + 'a');
  return d;
}

/* Occurrences of w in s, not overlapping. */
static uint64_t occurrences (const char *s, const char *w) {
  uint64_t n = 0;
  size_t wl = strlen(w);
  for (const char *p = strstr(s, w); p != NULL; p = strstr(p + wl, w)) n++;
  return n;
}

typedef struct hit { const tp_tool *t; uint64_t score; } hit;

static int cmp_hit (const void *a, const void *b) {
  const hit *x = a, *y = b;
  if (x->score != y->score) return x->score > y->score ? -1 : 1;
  return strcmp(x->t->name, y->t->name);
}

char *tp__tool_search (const tp_engine *e, const char *query) {
  return tp__tool_search_with(e, NULL, 0, query);
}

char *tp__tool_search_with (const tp_engine *e, const tp_tool *const *extra, size_t nextra,
                            const char *query) {
  char *words[SEARCH_WORDS];
  size_t nwords = 0;
  char *q = lower_dup(query);
  size_t all = e->ntools + nextra;
  hit *hits = malloc((all ? all : 1) * sizeof *hits);
  json_t *out = json_array();
  char *text = NULL;
  if (q == NULL || hits == NULL || out == NULL) goto done;
  for (char *p = q; *p && nwords < SEARCH_WORDS;) {
    while (*p && !word_char((unsigned char)*p)) p++;
    char *w = p;
    while (*p && word_char((unsigned char)*p)) p++;
    if (p == w) break;
    if (*p) *p++ = '\0';
    size_t k = 0;
    while (k < nwords && strcmp(words[k], w) != 0) k++;
    if (k == nwords) words[nwords++] = w;
  }
  size_t nhits = 0;
  for (size_t i = 0; i < all; i++) {
    const tp_tool *t = i < e->ntools ? e->tools[i] : extra[i - e->ntools];
    uint64_t score = 0;
    if (!(tp__tool_callers(e, t) & TP_CALLER_SCRIPT)) continue;  /* called directly only */
    if (nwords > 0) {
      char *name = lower_dup(t->name), *desc = lower_dup(t->description);
      if (name == NULL || desc == NULL) { free(name); free(desc); goto done; }
      for (size_t k = 0; k < nwords; k++)
        score += NAME_WEIGHT * occurrences(name, words[k]) + occurrences(desc, words[k]);
      free(name);
      free(desc);
    }
    if (score > 0 || nwords == 0) hits[nhits++] = (hit){ t, score };
  }
  qsort(hits, nhits, sizeof *hits, cmp_hit);
  for (size_t i = 0; i < nhits && i < SEARCH_RESULTS; i++) {
    const char *d = hits[i].t->description;
    size_t len = strlen(d), take = len;
    if (len > SEARCH_DESCRIPTION) {
      take = SEARCH_DESCRIPTION;
      while (take > 0 && ((unsigned char)d[take] & 0xc0) == 0x80) take--;
    }
    json_t *desc = tp__json_string_lossy(d, take, take < len ? "..." : NULL);
    json_t *o = json_pack("{s:s, s:I, s:o}", "name", hits[i].t->name, "score",
                          (json_int_t)hits[i].score, "description",
                          desc ? desc : json_string(""));
    if (o == NULL || json_array_append_new(out, o) != 0) goto done;
  }
  text = json_dumps(out, JSON_COMPACT);
done:
  free(q);
  free(hits);
  json_decref(out);
  return text;
}
