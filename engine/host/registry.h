/*
** registry.h: the engine's tools (registry.c), sorted by name. The core sees a tool only
** as its face (core/calls.h), which each entry begins with.
*/
#ifndef tidepool_registry_h
#define tidepool_registry_h

#include <stdint.h>
#include <jansson.h>

#include "tidepool.h"
#include "calls.h"
#include "engine.h"
#include "provider.h"
#include "schema.h"

typedef struct tp_tool {
  tp__tool_face face;                 /* first: name, schemas, timeout, flags */
  char *name, *description, *origin;  /* origin: "file.lua:12" for plugins, or NULL */
  json_t *input, *output;             /* the schema documents, for describe */
  tp_schema *in_schema, *out_schema;
  const tp__provider *prov;
  void *pdata;                        /* the provider's own data about it (provider.h):
                                      ** only the provider reads it; its destroy frees it */
  uint64_t serial;                    /* unique in the engine, never reused: the key of
                                      ** what others keep about it (policy.c) */
  char *lua_api;                      /* its description as Lua annotations, made once
                                      ** (tp__tools_annotate) */
  int api_tried;
  char *seen;                         /* the shape of its last result, for a tool with no
                                      ** output schema (an MCP server's: E.seen), or NULL */
} tp_tool;

/* The tool of that name, or else the one that answers to it (an alias, provider.h);
** NULL when none. */
const tp_tool *tp__tool_find(const tp_engine *e, const char *name);
/* Adds a tool of provider prov; schemas are given as trees (borrowed). pdata: the
** provider's, the tool's once this returns TP_OK; the caller's still on failure. */
int tp__tool_add(tp_engine *e, const tp_tool_def *def, const json_t *in, const json_t *out,
                 const tp__provider *prov, void *pdata, const char *origin);
/* provider_c.c: a C tool's pdata (malloc'd; NULL when out of memory). */
void *tp__c_tool_new(tp_tool_fn fn, void *ud);
/* A tool of provider prov, not yet in any registry (tp__tool_add puts it in the engine's;
** provider_caller.c keeps a run's own), holding pdata once made. NULL with *rc
** TP_EINVAL (tp_engine_error says why) or TP_ENOMEM; pdata is then still the caller's. */
tp_tool *tp__tool_make(tp_engine *e, const tp_tool_def *def, const json_t *in,
                       const json_t *out, const tp__provider *prov, void *pdata,
                       const char *origin, int *rc);
/* Frees t and, through its provider (release, destroy), its pdata. e may be NULL for a
** tool of a provider whose release does not need it. */
void tp__tool_free(tp_engine *e, tp_tool *t);
/* Puts t into the name-sorted array *tools of *n (growing it, *cap, first: tp__grow).
** 0, or -1 when out of memory (t then not in it). */
int tp__tools_insert(tp_tool ***tools, size_t *n, size_t *cap, tp_tool *t, size_t first);
/* def's input and output schemas' JSON text as trees in *in and *out (NULL for no text):
** TP_OK, or TP_EINVAL when one is not JSON (the engine's error then says why; nothing is
** kept). */
int tp__tool_parse_schemas(tp_engine *e, const tp_tool_def *def, json_t **in, json_t **out);
/* tp__tool_search over the engine's tools and nextra more. */
char *tp__tool_search_with(const tp_engine *e, const tp_tool *const *extra, size_t nextra,
                           const char *query);
/* ---- caller tools (provider_caller.c): a run's and its session's own tools ---------- */
/* The tool a call of r named name reaches: r's caller tools, its session's, then the
** engine's. r may be NULL. */
const tp_tool *tp__tool_find_for(const tp_engine *e, const tp_run *r, const char *name);
/* How many caller tools r sees, and tool i of them (NULL: one its own tools shadow). */
size_t tp__caller_count(const tp_run *r);
const tp_tool *tp__caller_at(const tp_run *r, size_t i);
/* tools.search over the engine's tools and r's caller tools. */
char *tp__caller_search(const tp_engine *e, const tp_run *r, const char *query);
void tp__caller_run_gone(tp_run *r);
/* A set of caller tools made from declarations (paused: no handler), for describing them;
** TP_OK or the error of tp_run_declare_caller_tools. */
struct tp__tool_set;
int tp__caller_set_json(tp_engine *e, struct tp__tool_set **set, const char *json, size_t len);
size_t tp__caller_set_tools(const struct tp__tool_set *set, const tp_tool *const **tools);
void tp__caller_set_free(struct tp__tool_set *set);
void tp__caller_session_gone(void *ud, tp_session *s);
/* tp_engine_add_tool: a C tool, or one the embedding program completes (no handler). */
int tp__tool_add_def(tp_engine *e, const tp_tool_def *def);
void tp__engine_free_tools(tp_engine *e);
/* Removes every tool of a reloadable provider (plugins: their handlers are released)
** so the plugin directories can be loaded again (mcp.c, when a directory changes).
** Only while no run is alive, since calls point at their tools. Returns how many. */
size_t tp__engine_drop_plugin_tools(tp_engine *e);
/* tools.search from a script: the ranked tools as JSON text [{name, score,
** description}...] (malloc'd), or NULL when out of memory. Runs no Lua. */
char *tp__tool_search(const tp_engine *e, const char *query);
/* The closest tool names to a wrong one ("tools.a, tools.b"), or "" in buf. */
void tp__tool_suggest(const tp_engine *e, const char *name, char *buf, size_t len);

#endif
