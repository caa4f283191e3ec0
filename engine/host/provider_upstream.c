/*
** provider_upstream.c: the tools of upstream MCP servers (the config's mcpServers), run by
** lua/upstream.lua in the host state (host.c). Their handlers are Lua functions, called as
** a plugin's are (provider_lua.c), but they belong to the config, not to a plugin
** directory, so a reload of the plugins keeps them; and a tool may have other names that
** reach it (the server's raw names: "memory.create-entities"), never listed.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "lauxlib.h"

#include "registry.h"
#include "host.h"
#include "host_int.h"

/* An upstream tool's pdata: its handler (first, as provider_lua.c reads it) and its
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

/* ---- upstream MCP servers (lua/upstream.lua through host.lua) ----------------------
** Their tools must be in the registry before a script or a description needs them, so
** the servers start at the first plugin load or description of an engine whose config
** has mcpServers: this runs the engine's loop until every server has listed its tools or
** failed (upstream.lua bounds that with its own timers). Not from inside a callback of
** the loop: libuv's loop is not reentrant. */

static void wake_loop (uv_timer_t *t) { (void)t; }  /* uv_run returns after it */
static void free_timer (uv_handle_t *t) { free(t); }

/* Runs the engine's loop while host.lua's rt[name]() is true, and until deadline_ns
** (tp__now_ns; 0: none). 1 when it stopped at the deadline. */
static int loop_while_until (tp_engine *e, const char *name, uint64_t deadline_ns) {
  lua_State *H = e->H;
  uv_timer_t *t = NULL;
  if (deadline_ns) {
    uint64_t now = tp__now_ns();
    if ((t = malloc(sizeof *t)) != NULL && uv_timer_init(e->loop, t) == 0) {
      uv_update_time(e->loop);
      uint64_t ms = now < deadline_ns ? (deadline_ns - now + 999999) / 1000000 : 0;
      uv_timer_start(t, wake_loop, ms, 0);
      uv_unref((uv_handle_t *)t);  /* wakes the loop; keeps nothing alive */
    }
    else { free(t); t = NULL; }
  }
  int late = 0;
  for (;;) {
    int top = lua_gettop(H);
    int more = tp__host_rt_call(H, name, 0, 1) == LUA_OK && lua_toboolean(H, -1);
    lua_settop(H, top);
    if (more && deadline_ns && tp__now_ns() >= deadline_ns) { late = 1; break; }
    if (!more || uv_run(e->loop, UV_RUN_ONCE) == 0) {
      if (more) {  /* nothing active left to wait for: one last look */
        more = tp__host_rt_call(H, name, 0, 1) == LUA_OK && lua_toboolean(H, -1);
        lua_settop(H, top);
      }
      if (!more) break;
    }
  }
  if (t) {
    uv_close((uv_handle_t *)t, free_timer);
    uv_run(e->loop, UV_RUN_NOWAIT);  /* its close callback */
  }
  return late;
}

/* Runs the engine's loop while host.lua's rt[name]() is true. */
static void loop_while (tp_engine *e, const char *name) {
  loop_while_until(e, name, 0);
}

int tp__host_upstream (tp_engine *e, void (*problem)(const char *, void *), void *ud) {
  const json_t *servers = tp__config_section(e, "mcpServers");
  if (!json_is_object(servers) || json_object_size(servers) == 0) return TP_OK;
  int rc = tp__host_open(e);
  if (rc != TP_OK) return rc;
  tp__host *h = e->host_state;
  if (h->upstream) return TP_OK;
  h->upstream = 1;
  lua_State *H = e->H;
  int top = lua_gettop(H);
  if (tp__host_rt_call(H, "upstream_start", 0, 0) != LUA_OK) {
    tp__engine_set_error(e, "mcpServers: %s", tp__host_error_text(H, -1));
    if (problem) problem(tp_engine_error(e), ud);
    lua_settop(H, top);
    return TP_EINVAL;
  }
  uint64_t t0 = tp__now_ns(), within = e->start_within_us;
  if (within == 0) {  /* no caller bounds it: each server's start_wait_ms (upstream.lua) */
    loop_while(e, "upstream_pending_start");
    if (tp__host_rt_call(H, "upstream_late_start", 0, 0) != LUA_OK) lua_pop(H, 1);
  }
  else if (loop_while_until(e, "upstream_pending", t0 + within * 1000u)) {
    lua_pushinteger(H, (lua_Integer)(within / 1000));
    if (tp__host_rt_call(H, "upstream_late", 1, 0) != LUA_OK) lua_pop(H, 1);
  }
  if (within) tp__core(e)->wait_ns += tp__now_ns() - t0;  /* the next run's (tidepool.h) */
  if (tp__host_rt_call(H, "upstream_problems", 0, 1) == LUA_OK && lua_type(H, -1) == LUA_TTABLE) {
    lua_Integer n = (lua_Integer)lua_rawlen(H, -1);
    for (lua_Integer k = 1; k <= n; k++) {
      lua_rawgeti(H, -1, k);
      const char *p = lua_tostring(H, -1);
      if (p && problem) problem(p, ud);
      else if (p) tp__engine_log(e, TP_LOG_WARN, "upstream", "tidepool: warning: %s", p);
      lua_pop(H, 1);
    }
  }
  lua_settop(H, top);
  tp__tools_annotate(e);
  uv_update_time(e->loop);
  return TP_OK;
}

int tp__host_tools_settled (const tp_engine *e) {
  const json_t *servers = tp__config_section(e, "mcpServers");
  if (!json_is_object(servers) || json_object_size(servers) == 0) return 1;
  const tp__host *h = e->host_state;
  if (h == NULL || !h->upstream || e->H == NULL) return 0;
  /* started is not enough: a server still starting (or not ready within the run's time,
  ** or failed) may bring tools yet, so its names are not known */
  int top = lua_gettop(e->H);
  int all = tp__host_rt_call(e->H, "upstream_all_listed", 0, 1) == LUA_OK && lua_toboolean(e->H, -1);
  lua_settop(e->H, top);
  return all;
}

void tp__host_upstream_stop (tp_engine *e) {
  if (e->H == NULL) return;
  tp__host *h = e->host_state;
  if (!h->upstream) return;
  h->upstream = 0;
  int top = lua_gettop(e->H);
  if (tp__host_rt_call(e->H, "upstream_stop", 0, 0) == LUA_OK) loop_while(e, "upstream_stopping");
  lua_settop(e->H, top);
}
