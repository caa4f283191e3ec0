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
/* tp_engine_add_tool: a C tool, or one the embedding program completes (no handler). */
int tp__tool_add_def(tp_engine *e, const tp_tool_def *def);
void tp__engine_free_tools(tp_engine *e);
/* Removes every tool of a reloadable provider (plugins: their handlers are released)
** so the plugin directories can be loaded again (mcp.c, when a directory changes).
** Only while no run is alive, since calls point at their tools. Returns how many. */
size_t tp__engine_drop_plugin_tools(tp_engine *e);
/* Makes the annotations of the tools that have none yet (registry.c). */
void tp__tools_annotate(tp_engine *e);
/* tools.search from a script: the ranked tools as JSON text [{name, score,
** description}...] (malloc'd), or NULL when out of memory. Runs no Lua. */
char *tp__tool_search(const tp_engine *e, const char *query);
/* The closest tool names to a wrong one ("tools.a, tools.b"), or "" in buf. */
void tp__tool_suggest(const tp_engine *e, const char *name, char *buf, size_t len);

#endif
