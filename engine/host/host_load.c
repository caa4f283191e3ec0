/*
** host_load.c: what fills the host state H with tools: the plugin files of a tools
** directory (host.lua's load_file) and the upstream MCP servers of the config
** (lua/upstream.lua), started at the first plugin load, description or script that names
** tools, and stopped before the engine goes; and the descriptions for the engine's
** callers, which wait for those servers' tools. Above host.c (H, E and the
** annotations) and the providers, which it reaches only through H.
*/
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "util.h"
#include "lauxlib.h"

#include "registry.h"
#include "host.h"
#include "host_int.h"

/* ---- plugins ------------------------------------------------------------------------ */

static int cmp_str (const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Appends one problem line to a growing buffer. -1 when out of memory. */
static int add_problem (char **buf, size_t *len, const char *line) {
  size_t n = strlen(line);
  char *nb = realloc(*buf, *len + n + 2);
  if (nb == NULL) return -1;
  *buf = nb;
  if (*len) (*buf)[(*len)++] = '\n';
  memcpy(*buf + *len, line, n);
  *len += n;
  (*buf)[*len] = '\0';
  return 0;
}

/* The problems of the upstream servers' start go with the plugin problems of the load. */
typedef struct upstream_problems {
  char **buf;
  size_t *len;
  void (*problem)(const char *, void *);
  void *ud;
  int nomem;
} upstream_problems;

static void upstream_problem (const char *line, void *ud) {
  upstream_problems *up = ud;
  if (add_problem(up->buf, up->len, line) != 0) up->nomem = 1;
  else if (up->problem) up->problem(line, up->ud);
}

/* load_file_p(dir, dlen, name): host.lua's load_file of "dir/name", the C strings given
** as light userdata, so that making the path (which may raise) is protected. */
static int load_file_p (lua_State *H) {
  const char *dir = lua_touserdata(H, 1), *name = lua_touserdata(H, 3);
  size_t dlen = (size_t)lua_tointeger(H, 2);
  lua_settop(H, 0);
  lua_rawgeti(H, LUA_REGISTRYINDEX, tp__host_get(H)->rt);
  lua_getfield(H, -1, "load_file");
  lua_pushfstring(H, "%s/%s", lua_pushlstring(H, dir, dlen), name);
  lua_remove(H, -2);
  lua_call(H, 1, 2);
  return 2;
}

int tp__host_load_dir (tp_engine *e, const char *dir,
                       void (*problem)(const char *, void *), void *ud) {
  if (e == NULL || dir == NULL) return TP_EINVAL;
  DIR *d = opendir(dir);
  if (d == NULL) {
    tp__engine_set_error(e, "cannot read the tools directory %s: %s", dir, strerror(errno));
    return TP_EINVAL;
  }
  char **names = NULL;
  size_t n = 0, cap = 0;
  struct dirent *de;
  int rc = TP_OK;
  while ((de = readdir(d)) != NULL) {
    size_t len = strlen(de->d_name);
    if (de->d_name[0] == '.' || len < 5 || strcmp(de->d_name + len - 4, ".lua") != 0) continue;
    if (tp__grow(&names, &cap, n + 1, sizeof *names, 16) != 0) { rc = TP_ENOMEM; break; }
    if ((names[n] = strdup(de->d_name)) == NULL) { rc = TP_ENOMEM; break; }
    n++;
  }
  closedir(d);
  if (rc == TP_OK && (rc = tp__host_open(e)) == TP_OK && n > 1)
    qsort(names, n, sizeof *names, cmp_str);
  char *problems = NULL;
  size_t plen = 0;
  if (rc == TP_OK) {
    upstream_problems up = { &problems, &plen, problem, ud, 0 };
    tp__host_upstream(e, upstream_problem, &up);
    if (up.nomem) rc = TP_ENOMEM;
  }
  int added = 0;
  size_t dlen = strlen(dir);
  while (dlen > 1 && dir[dlen - 1] == '/') dlen--;
  for (size_t i = 0; rc == TP_OK && i < n; i++) {
    lua_State *H = e->H;
    int top = lua_gettop(H);
    lua_pushcfunction(H, load_file_p);
    lua_pushlightuserdata(H, (void *)dir);
    lua_pushinteger(H, (lua_Integer)dlen);
    lua_pushlightuserdata(H, names[i]);
    if (tp__host_pcall(H, 3, 2) != LUA_OK) {
      if (add_problem(&problems, &plen, tp__host_error_text(H, -1)) != 0) rc = TP_ENOMEM;
      else if (problem) problem(tp__host_error_text(H, -1), ud);
    }
    else {
      added += (int)lua_tointeger(H, -2);
      lua_Integer np = (lua_Integer)lua_rawlen(H, -1);
      for (lua_Integer k = 1; k <= np; k++) {
        lua_rawgeti(H, -1, k);
        if (lua_type(H, -1) == LUA_TSTRING) {
          if (add_problem(&problems, &plen, lua_tostring(H, -1)) != 0) rc = TP_ENOMEM;
          else if (problem) problem(lua_tostring(H, -1), ud);
        }
        lua_pop(H, 1);
      }
    }
    lua_settop(H, top);
  }
  for (size_t i = 0; i < n; i++) free(names[i]);
  free(names);
  if (rc != TP_OK) {
    free(problems);
    if (rc == TP_ENOMEM && e->error == NULL) tp__engine_set_error(e, "out of memory");
    return rc;
  }
  free(e->error);
  e->error = problems;  /* NULL reads as "" */
  tp__tools_annotate(e);
  return added;
}

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

/* ---- describing the tools to the engine's callers ----------------------------------- */

char *tp__host_describe (tp_engine *e, const char *format, const char *arg) {
  tp__host_upstream(e, NULL, NULL);  /* the upstream servers' tools are described too */
  return tp__host_describe_now(e, format, arg, NULL, 0);
}

char *tp__host_describe_extra (tp_engine *e, const char *format, const char *arg,
                               const tp_tool *const *extra, size_t nextra) {
  tp__host_upstream(e, NULL, NULL);
  return tp__host_describe_now(e, format, arg, extra, nextra);
}
