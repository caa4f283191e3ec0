/*
** provider_lua.c: the provider of Lua plugin tools (provider.h). Each tool's pdata is its
** handler in the host state H; a call runs it in a record's coroutine (host_handler.c,
** which the upstream tools' provider shares). host.c's E.add_tool registers the tools.
*/
#include <stdlib.h>

#include "registry.h"
#include "host_int.h"

void *tp__lua_tool_new (int ref) {
  tp__lua_tool *lt = malloc(sizeof *lt);
  if (lt != NULL) lt->ref = ref;
  return lt;
}

static void lua_destroy (void *pdata) {
  free(pdata);
}

const tp__provider tp__lua_provider = {
  "lua", TP__TOOL_TREE_ARGS, 1, tp__lua_dispatch, tp__lua_cancel, tp__lua_release,
  tp__lua_describe, NULL, lua_destroy
};
