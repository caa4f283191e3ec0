/*
** provider_upstream.c: the tools of upstream MCP servers (the config's mcpServers), run by
** lua/upstream.lua in the host state (host.c). Their handlers are Lua functions, called as
** a plugin's are (host_handler.c), but they belong to the config, not to a plugin
** directory, so a reload of the plugins keeps them; and a tool may have other names that
** reach it (the server's raw names: "memory.create-entities"), never listed. The servers
** themselves are started and stopped by host_load.c.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lauxlib.h"

#include "registry.h"
#include "host.h"
#include "host_int.h"

/* An upstream tool's pdata: its handler (first, as host_handler.c reads it) and its
** aliases. */
typedef struct upstream_tool {
  tp__lua_tool lua;
  char **aliases;
  size_t naliases;
} upstream_tool;

#define ALIAS_MAX 8

void *tp__upstream_tool_new (int ref) {
  upstream_tool *ut = calloc(1, sizeof *ut);
  if (ut != NULL) ut->lua.ref = ref;
  return ut;
}

int tp__upstream_set_alias (tp_engine *e, const char *name, const char *alias) {
  const tp_tool *t = tp__tool_find(e, name);
  if (t == NULL || strcmp(t->name, name) != 0 || t->prov != &tp__upstream_provider) {
    tp__engine_set_error(e, "tool %s: no such upstream tool", name);
    return TP_EINVAL;
  }
  upstream_tool *ut = t->pdata;
  if (alias == NULL || *alias == '\0' || strlen(alias) > 128 || ut->naliases >= ALIAS_MAX) {
    tp__engine_set_error(e, "tool %s: a bad alias, or more than %d", name, ALIAS_MAX);
    return TP_EINVAL;
  }
  const tp_tool *other = tp__tool_find(e, alias);
  if (other != NULL && other != t) {
    tp__engine_set_error(e, "tool %s: its alias %s is the name of tool %s", name, alias,
                         other->name);
    return TP_EINVAL;
  }
  if (other == t) return TP_OK;  /* its name, or an alias it has */
  char **list = realloc(ut->aliases, (ut->naliases + 1) * sizeof *list);
  if (list == NULL) return TP_ENOMEM;
  ut->aliases = list;
  if ((list[ut->naliases] = strdup(alias)) == NULL) return TP_ENOMEM;
  ut->naliases++;
  e->has_aliases = 1;
  return TP_OK;
}

static int upstream_answers (const tp_tool *t, const char *name) {
  const upstream_tool *ut = t->pdata;
  for (size_t k = 0; k < ut->naliases; k++)
    if (strcmp(ut->aliases[k], name) == 0) return 1;
  return 0;
}

static void upstream_destroy (void *pdata) {
  upstream_tool *ut = pdata;
  for (size_t k = 0; k < ut->naliases; k++) free(ut->aliases[k]);
  free(ut->aliases);
  free(ut);
}

const tp__provider tp__upstream_provider = {
  "upstream", TP__TOOL_TREE_ARGS, 0, tp__lua_dispatch, tp__lua_cancel, tp__lua_release,
  tp__lua_describe, upstream_answers, upstream_destroy
};
