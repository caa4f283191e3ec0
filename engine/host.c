/*
** host.c: the engine's host Lua state (trusted): plugin tools written in Lua, their
** handlers run as coroutines, luv on the engine's loop, describe and search.
** (Placeholder until the host state lands: no Lua plugins yet.)
*/
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

int tp__host_open (tp_engine *e) { (void)e; return 0; }
void tp__host_close (tp_engine *e) { (void)e; }

void tp__host_dispatch (tp_engine *e, tp_call *c, const tp_tool *t, const json_t *args) {
  (void)e; (void)t; (void)args;
  tp_call_fail(c, "tool.failed", "Lua plugin tools are not available in this build");
}

void tp__host_cancel (tp_engine *e, tp_call *c) { (void)e; (void)c; }

char *tp__host_describe (tp_engine *e, const char *format, const char *tool) {
  (void)format;
  const tp_tool *t = tp__tool_find(e, tool);
  if (t == NULL) return NULL;
  size_t n = strlen(t->name) + strlen(t->description) + 32;
  char *s = malloc(n);
  if (s) snprintf(s, n, "tools.%s: %s", t->name, t->description);
  return s;
}

char *tp__host_search (tp_engine *e, const char *query) {
  (void)e; (void)query;
  return strdup("[]");
}

int tp_engine_load_tools (tp_engine *e, const char *dir) {
  if (e == NULL || dir == NULL) return TP_EINVAL;
  tp__engine_set_error(e, "Lua plugin tools are not available in this build");
  return TP_EINVAL;
}

int tp_engine_set_workspace (tp_engine *e, const char *dir) {
  if (e == NULL || dir == NULL) return TP_EINVAL;
  free(e->workspace);
  e->workspace = strdup(dir);
  return e->workspace ? TP_OK : TP_ENOMEM;
}

char *tp_engine_describe (tp_engine *e, const char *format) {
  if (e == NULL || format == NULL) return NULL;
  return strdup("");
}
