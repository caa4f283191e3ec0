/*
** registry.c: the engine's tools, sorted by name: adding them (C tools here, Lua plugin
** tools through host.c), finding them, suggesting near names, dropping plugin tools.
*/
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lauxlib.h"

#include "registry.h"
#include "json.h"
#include "schema.h"



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
  free(t->lua_api);
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
  tp_schema *s = tp_schema_compile(doc, TP_DIALECT_2020_12, NULL, formats,
                                   err, sizeof err);
  if (s == NULL) tp__engine_set_error(e, "tool %s: bad %s schema: %s", tool, which, err);
  return s;
}

/* Adds a tool; schemas are given as trees (borrowed). */
int tp__tool_add (tp_engine *e, const tp_tool_def *def, const json_t *in, const json_t *out,
                  const tp__provider *prov, int lua_ref, const char *origin) {
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
  t->prov = prov;
  t->face.timeout_us = def->timeout_us;
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
  t->face.name = t->name;
  t->face.in_schema = t->in_schema;
  t->face.out_schema = t->out_schema;
  t->face.flags = prov->flags;
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

int tp__tool_add_def (tp_engine *e, const tp_tool_def *def) {
  int bad;
  const char *name = def->name ? def->name : "";
  json_t *in = parse_schema(e, def->input_schema, name, "input", &bad);
  if (bad) return TP_EINVAL;
  json_t *out = parse_schema(e, def->output_schema, name, "output", &bad);
  if (bad) { json_decref(in); return TP_EINVAL; }
  const tp__provider *prov = def->handler ? &tp__c_provider : &tp__external_provider;
  int rc = tp__tool_add(e, def, in, out, prov, LUA_NOREF, NULL);
  json_decref(in);
  json_decref(out);
  return rc;
}


size_t tp__engine_drop_plugin_tools (tp_engine *e) {
  size_t kept = 0, dropped = 0;
  for (size_t i = 0; i < e->ntools; i++) {
    tp_tool *t = e->tools[i];
    if (!t->prov->reloadable) { e->tools[kept++] = t; continue; }
    if (t->prov->release) t->prov->release(e, t);
    free_tool(t);
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

