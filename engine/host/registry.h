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
  tp_tool_fn fn;                      /* the C provider's handler */
  void *ud;
  int lua_ref;                        /* the Lua provider's handler in the host state,
                                      ** or LUA_NOREF */
  char **aliases;                     /* other names that reach it (an upstream MCP
                                      ** tool's raw names: "memory.create-entities",
                                      ** "my-files.read_file"): found by tp__tool_find,
                                      ** never listed */
  size_t naliases;
  char *lua_api;                      /* its description as Lua annotations, made once
                                      ** (tp__tools_annotate) */
  int api_tried;
  char *seen;                         /* the shape of its last result, for a tool with no
                                      ** output schema (an MCP server's: E.seen), or NULL */
  uint64_t pol_gen;                   /* the policy its rule list was made for (policy.c) */
  uint32_t *pol_rules, pol_n, pol_nc; /* the indexes of the policy rules that match it,
                                      ** then of those that count calls (policy.c) */
  uint64_t pol_keys;                  /* the argument keys their conditions read */
} tp_tool;

/* The tool of that name, or else the one with that alias; NULL when none. */
const tp_tool *tp__tool_find(const tp_engine *e, const char *name);
/* Gives tool name one more alias (any characters, at most 128 bytes; at most 8 of them):
** TP_OK, TP_EINVAL (no such tool, a bad alias, or one that names another tool) or
** TP_ENOMEM. */
int tp__tool_set_alias(tp_engine *e, const char *name, const char *alias);
/* Adds a tool of provider prov; schemas are given as trees (borrowed). */
int tp__tool_add(tp_engine *e, const tp_tool_def *def, const json_t *in, const json_t *out,
                 const tp__provider *prov, int lua_ref, const char *origin);
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
