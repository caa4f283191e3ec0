/*
** luamod.c: the Lua module `tidepool`, for any Lua 5.4 host (this build's build/lua/lua,
** Debian's lua5.4, a server that embeds Lua). This file alone talks to the host, only
** through the host's own Lua C API (its lua_* references stay undefined in tidepool.so
** and bind to the host's at load time); the engine it drives runs on the library's
** private Lua 5.4.7, linked in with its symbols made local. The two meet only as C
** values: the envelope crosses as JSON text. So this file calls no function of the
** engine's Lua side, only tidepool.h and jansson, and uses no Lua API newer than 5.4.0.
**
**   local tidepool = require "tidepool"
**   local env = tidepool.run(source [, options])   -- the envelope as a Lua table
**   local env = tidepool.check(source [, options]) -- compile only
**   tidepool.version                               -- "0.1.0"
**
** options: every limit of the limits table (tp_limit_at in tidepool.h) by its Lua name: memory, instructions,
** cpu, timeout, max_output, max_source, max_result, tool_calls, tool_calls_per_tool,
** tool_in_flight, tool_bytes, tool_timeout, fs_quota. Sizes and counts are non-negative
** integers or strings ("64M", "512K", "1G"); durations are seconds as numbers, or strings
** ("500ms", "2s", "1m"). A value of 0 means no limit. Unknown option names are an error,
** so a typo is not a silently ignored limit. JSON null in the envelope is tidepool.null.
**
** Tools: `tools` (a list of plugin directories) and `builtin_tools` (the built-in tools/
** directory, as `tidepool run` loads it; default true, false leaves it out) pick an
** engine: one per distinct set, made on first use
** and kept as long as the module, so state such as the kv store lasts across runs.
** Plugin load problems come back in the envelope table's `warnings` (a list of
** "file:line: why" lines) on every run of that engine. `workspace` (a directory: offers
** the fs.* tools, confined to it) and `workspace_max` (bytes the fs.* tools may grow it
** by; default 1G) are part of the engine's choice too. So is `config`: a config file's
** path, or its JSON text when it starts with "{" (relative paths in it are then relative
** to the current directory): its limits are the defaults of the options, its plugin
** directories load after the built-in ones and before `tools`, its workspace serves when
** there is no `workspace` option, and its mcpServers, http, commands and policy reach the
** engine's sources of tools. A bad config raises an error listing every problem, one a
** line, each with its JSON path. `state` (a directory, sqlite:PATH or a Redis URL; else
** the config's state) keeps the engine's kv keys and rate buckets in a durable store
** (tp_store_open), shared with every process that opens the same one.
**
** Determinism (tidepool.h, "durable and deterministic runs"): `deterministic = true`
** seeds math.random with `seed` (an integer; default 0) and gives the run a clock that
** starts at `clock` (seconds since the epoch, an integer; default 0) and moves `clock_step`
** seconds at each read of os.time, os.clock or os.date (default 0.001). `seed` or `clock`
** alone sets that part only. Two runs with the same options, script and tools' results
** return the same envelope but for its timings.
*/
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>

#include <jansson.h>

#include "lauxlib.h"
#include "tidepool.h"

#define ENGINE_KEY "tidepool.engine"
#define TREE_KEY "tidepool.envelope"  /* a box whose __gc frees a parsed envelope */
#define ENVELOPE_MAX_DEPTH 128        /* as the engine's own pushes of JSON into Lua */
#define LOG_KEY "tidepool.on_log"     /* the function tidepool.on_log set, in the registry */

/* The Lua state inside tidepool.run or .check on this thread, where the logger calls the
** function tidepool.on_log set; NULL outside them (messages then go to stderr). */
static _Thread_local lua_State *log_L;

/* Every engine's logger (tp_engine_on_log): fn(level, source, message) when
** tidepool.on_log set one, else stderr. An error in fn is dropped: a logger cannot fail
** the run. */
static void lua_logger (void *ud, tp_log_level level, const char *source, const char *msg) {
  (void)ud;
  lua_State *L = log_L;
  if (L == NULL || !lua_checkstack(L, 5)) { tp_log_stderr(NULL, level, source, msg); return; }
  if (lua_getfield(L, LUA_REGISTRYINDEX, LOG_KEY) != LUA_TFUNCTION) {
    lua_pop(L, 1);
    tp_log_stderr(NULL, level, source, msg);
    return;
  }
  lua_pushstring(L, level == TP_LOG_ERROR ? "error" : level == TP_LOG_WARN ? "warn"
                    : level == TP_LOG_INFO ? "info" : "debug");
  lua_pushstring(L, source);
  lua_pushstring(L, msg);
  if (lua_pcall(L, 3, 0, 0) != LUA_OK) lua_pop(L, 1);
}

/* tidepool.on_log(fn | nil): fn(level, source, message) receives what the engines say
** outside a run's result (a plugin's print, an upstream server's stderr: tidepool.h's
** logger) during tidepool.run and .check; nil: they go to stderr again. */
static int l_on_log (lua_State *L) {
  if (!lua_isnil(L, 1)) luaL_checktype(L, 1, LUA_TFUNCTION);
  lua_settop(L, 1);
  lua_setfield(L, LUA_REGISTRYINDEX, LOG_KEY);
  return 0;
}
#define ARRAY_MT_KEY "tidepool.json.array"  /* registry: the metatable of arrays, whose */
#define JSON_ARRAY_TAG "json.array"         /* __metatable is json.decode's tag */

/* The only symbol tidepool.so exports (the build compiles with -fvisibility=hidden). */
__attribute__((visibility("default"))) int luaopen_tidepool(lua_State *L);

typedef struct engine_box { tp_engine *e; } engine_box;

static tp_engine *get_engine (lua_State *L) {
  engine_box *b = luaL_checkudata(L, lua_upvalueindex(1), ENGINE_KEY);
  if (b->e == NULL) luaL_error(L, "tidepool: the engine is closed");
  return b->e;
}

static int engine_gc (lua_State *L) {
  engine_box *b = luaL_checkudata(L, 1, ENGINE_KEY);
  tp_engine_destroy(b->e);
  b->e = NULL;
  return 0;
}

/* Sets limit `field` of *lim (or, with field NULL, *out in bytes) from the value at the top
** of the stack, as option name: an integer (bytes, a count) or a number of seconds (a
** duration), or text the limits parser takes ("64M", "500ms"). Raises a message that
** names the option when it is neither, or out of range. */
static void opt_value (lua_State *L, const char *name, tp_unit unit, const char *field,
                       tp_limits *lim, uint64_t *out) {
  char why[256], num[64];
  int rc;
  if (lua_type(L, -1) == LUA_TNUMBER) {
    lua_Number n = lua_tonumber(L, -1);
    if (unit == TP_UNIT_DURATION) {  /* seconds; an integer as text, so that a message */
      if (n != n || n < 0)           /* quotes it in full */
        luaL_error(L, "tidepool: option '%s' must be >= 0 seconds", name);
      snprintf(num, sizeof num, "%lld", (long long)lua_tointeger(L, -1));
      rc = field == NULL ? TP_EINVAL
         : lua_isinteger(L, -1) ? tp_limits_set(lim, field, num, why, sizeof why)
         : tp_limits_set_number(lim, field, (double)n, why, sizeof why);
    }
    else {
      if (!lua_isinteger(L, -1) || lua_tointeger(L, -1) < 0)
        luaL_error(L, "tidepool: option '%s' must be a non-negative integer", name);
      snprintf(num, sizeof num, "%lld", (long long)lua_tointeger(L, -1));
      rc = field ? tp_limits_set(lim, field, num, why, sizeof why)
                 : tp_parse_value(unit, num, UINT64_MAX, out, NULL, why, sizeof why);
    }
  }
  else {
    const char *text = lua_tostring(L, -1);
    if (text == NULL) luaL_error(L, "tidepool: option '%s' must be a number or a string", name);
    rc = field ? tp_limits_set(lim, field, text, why, sizeof why)
               : tp_parse_value(unit, text, UINT64_MAX, out, NULL, why, sizeof why);
  }
  if (rc != TP_OK) luaL_error(L, "tidepool: option '%s': %s", name, why);
}

/* Sets the limit of the options table's key k (the value at the top of the stack);
** returns 0 when k names no limit. */
static int opt_limit (lua_State *L, const char *k, tp_limits *lim) {
  for (size_t i = 0, n = tp_limit_count(); i < n; i++) {
    const tp_limit_info *li = tp_limit_at(i);
    if (strcmp(li->option, k) != 0) continue;
    opt_value(L, k, li->unit, li->field, lim, NULL);
    return 1;
  }
  return 0;
}

/* Options that pick the engine (pick_engine) or the form of the answer (json) rather
** than set a limit. */
static const char *const engine_options[] = { "tools", "builtin_tools", "workspace",
                                              "workspace_max", "json", "config", "state",
                                              "deterministic", "seed", "clock",
                                              "clock_step", "caller_tools" };

/* The limits of the options at idx over those of e's config, over the defaults. */
static void read_options (lua_State *L, int idx, tp_limits *lim, tp_engine *e) {
  tp_limits_init(lim);
  tp_engine_config_limits(e, lim);
  if (lua_isnoneornil(L, idx)) return;
  luaL_checktype(L, idx, LUA_TTABLE);
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    const char *k = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : "?";
    int known = opt_limit(L, k, lim);
    for (size_t i = 0; !known && i < sizeof engine_options / sizeof engine_options[0]; i++)
      known = strcmp(k, engine_options[i]) == 0;
    if (!known) {  /* the message lists every option, from the table */
      luaL_Buffer b;
      luaL_buffinit(L, &b);
      for (size_t i = 0, n = tp_limit_count(); i < n; i++) {
        luaL_addstring(&b, tp_limit_at(i)->option);
        luaL_addstring(&b, ", ");
      }
      for (size_t i = 0; i < sizeof engine_options / sizeof engine_options[0]; i++) {
        luaL_addstring(&b, engine_options[i]);
        if (i + 1 < sizeof engine_options / sizeof engine_options[0]) luaL_addstring(&b, ", ");
      }
      luaL_pushresult(&b);
      luaL_error(L, "tidepool: unknown option '%s' (%s)", k, lua_tostring(L, -1));
    }
    lua_pop(L, 1);
  }
}

/* The built-in tools: $TIDEPOOL_TOOLS_DIR, else tools/ of the source tree this module
** was built in (build/lua/tidepool.so -> ../../tools, build/sanitize/lua -> ../../../tools,
** found by its time.lua), else the installed copy. */
static void push_builtin_dir (lua_State *L) {
  const char *env = getenv("TIDEPOOL_TOOLS_DIR");
  if (env && *env) { lua_pushstring(L, env); return; }
  Dl_info info;
  if (dladdr((void *)luaopen_tidepool, &info) && info.dli_fname) {
    const char *slash = strrchr(info.dli_fname, '/');
    static const char *const ups[] = { "/../../tools", "/../../../tools" };
    for (size_t i = 0; slash && i < sizeof ups / sizeof ups[0]; i++) {
      lua_pushlstring(L, info.dli_fname, (size_t)(slash - info.dli_fname));
      lua_pushstring(L, ups[i]);
      lua_concat(L, 2);
      lua_pushfstring(L, "%s/time.lua", lua_tostring(L, -1));
      struct stat st;
      int found = stat(lua_tostring(L, -1), &st) == 0;
      lua_pop(L, 1);
      if (found) return;
      lua_pop(L, 1);
    }
  }
  lua_pushstring(L, TP_DATADIR "/tools");
}

/* The engine for the options' tools, builtin_tools, workspace and workspace_max (cached
** in upvalue 2 by the list of directories and the workspace); pushes its load warnings
** (a table) or nil. */
static tp_engine *pick_engine (lua_State *L, int idx) {
  int builtin = 1, ndirs = 0, has_max = 0;  /* the built-in tools, as `tidepool run` */
  uint64_t ws_max = 0;
  const char *ws = NULL, *cfg = NULL, *state = NULL;
  luaL_Buffer key;
  if (lua_istable(L, idx)) {
    if (lua_getfield(L, idx, "builtin_tools") != LUA_TNIL) builtin = lua_toboolean(L, -1);
    lua_pop(L, 1);
    if (lua_getfield(L, idx, "workspace_max") != LUA_TNIL) {
      opt_value(L, "workspace_max", TP_UNIT_BYTES, NULL, NULL, &ws_max);
      has_max = 1;
    }
    lua_pop(L, 1);
    if (lua_getfield(L, idx, "workspace") != LUA_TNIL) {
      if (lua_type(L, -1) != LUA_TSTRING)
        luaL_error(L, "tidepool: option 'workspace' must be a directory name");
      ws = lua_tostring(L, -1);
    }
    lua_pop(L, 1);  /* ws stays alive in the options table */
    if (lua_getfield(L, idx, "config") != LUA_TNIL) {
      if (lua_type(L, -1) != LUA_TSTRING)
        luaL_error(L, "tidepool: option 'config' must be a config file's path or its JSON text");
      cfg = lua_tostring(L, -1);
    }
    lua_pop(L, 1);  /* so does cfg */
    if (lua_getfield(L, idx, "state") != LUA_TNIL) {
      if (lua_type(L, -1) != LUA_TSTRING)
        luaL_error(L, "tidepool: option 'state' must be a directory name (or sqlite:PATH, "
                   "redis://HOST:PORT/DB)");
      state = lua_tostring(L, -1);
    }
    lua_pop(L, 1);  /* so does state */
  }
  lua_newtable(L);  /* dirs */
  int dirs = lua_gettop(L);
  if (builtin) { push_builtin_dir(L); lua_rawseti(L, dirs, ++ndirs); }
  if (lua_istable(L, idx) && lua_getfield(L, idx, "tools") != LUA_TNIL) {
    if (!lua_istable(L, -1))
      luaL_error(L, "tidepool: option 'tools' must be a list of directory names");
    for (lua_Integer i = 1; lua_rawgeti(L, -1, i) != LUA_TNIL; i++) {
      if (lua_type(L, -1) != LUA_TSTRING)
        luaL_error(L, "tidepool: option 'tools' must be a list of directory names");
      lua_rawseti(L, dirs, ++ndirs);
    }
  }
  lua_settop(L, dirs);
  if (ndirs == 0 && ws == NULL && cfg == NULL && state == NULL) {
    lua_pop(L, 1);
    lua_pushnil(L);
    return get_engine(L);
  }
  luaL_buffinit(L, &key);
  for (int i = 1; i <= ndirs; i++) {
    lua_rawgeti(L, dirs, i);
    luaL_addvalue(&key);
    luaL_addchar(&key, '\n');
  }
  if (ws) {
    lua_pushfstring(L, "\1workspace=%s\n", ws);
    luaL_addvalue(&key);
  }
  if (has_max) {
    lua_pushfstring(L, "\1workspace_max=%I\n", (LUAI_UACINT)ws_max);
    luaL_addvalue(&key);
  }
  if (cfg) {
    lua_pushfstring(L, "\1config=%s\n", cfg);
    luaL_addvalue(&key);
  }
  if (state) {
    lua_pushfstring(L, "\1state=%s\n", state);
    luaL_addvalue(&key);
  }
  luaL_pushresult(&key);
  int keyi = lua_gettop(L);
  lua_pushvalue(L, keyi);
  if (lua_rawget(L, lua_upvalueindex(2)) == LUA_TTABLE) {  /* {box, warnings} */
    lua_rawgeti(L, -1, 1);
    engine_box *b = lua_touserdata(L, -1);
    lua_rawgeti(L, -2, 2);
    lua_replace(L, dirs);
    lua_settop(L, dirs);
    if (b->e == NULL) luaL_error(L, "tidepool: the engine is closed");
    return b->e;
  }
  lua_pop(L, 1);
  lua_createtable(L, 2, 0);
  engine_box *b = lua_newuserdatauv(L, sizeof *b, 0);
  b->e = NULL;
  luaL_setmetatable(L, ENGINE_KEY);
  lua_rawseti(L, -2, 1);
  b->e = tp_engine_create();
  if (b->e == NULL) luaL_error(L, "tidepool: cannot create an engine (out of memory)");
  tp_engine_on_log(b->e, lua_logger, NULL);
  if (cfg) {  /* a path, or the text itself */
    const char *c = cfg + strspn(cfg, " \t\r\n");
    int rc = *c == '{' ? tp_engine_configure(b->e, cfg, strlen(cfg))
                       : tp_engine_configure_file(b->e, cfg);
    if (rc != TP_OK) luaL_error(L, "tidepool: option 'config': %s", tp_engine_error(b->e));
    uint64_t max;
    const char *cws = tp_engine_config_workspace(b->e, &max);
    if (ws == NULL && cws) {
      ws = cws;
      if (!has_max && max != UINT64_MAX) { has_max = 1; ws_max = max; }
    }
  }
  if (state == NULL && cfg) state = tp_engine_config_state(b->e);
  if (state) {
    char why[512];
    tp_store *st = tp_store_open(state, why, sizeof why);
    if (st == NULL) luaL_error(L, "tidepool: option 'state': %s", why);
    int rc = tp_engine_set_store(b->e, st);
    tp_store_destroy(st);  /* the engine keeps its own reference */
    if (rc != TP_OK) luaL_error(L, "tidepool: cannot use the state store (out of memory)");
  }
  if (has_max) tp_engine_set_workspace_max(b->e, ws_max);
  if (ws && tp_engine_set_workspace(b->e, ws) != TP_OK)
    luaL_error(L, "tidepool: cannot set the workspace (out of memory)");
  lua_newtable(L);  /* warnings */
  int nw = 0;
  /* the built-in tools, the config's plugin directories, then the option's */
  size_t ncfg = 0;
  while (tp_engine_config_tools(b->e, ncfg)) ncfg++;
  for (int i = 1; i <= ndirs + (int)ncfg; i++) {
    int at = i - (builtin ? 1 : 0);  /* 1..ncfg: a directory of the config */
    if (at >= 1 && at <= (int)ncfg) lua_pushstring(L, tp_engine_config_tools(b->e, (size_t)at - 1));
    else lua_rawgeti(L, dirs, at > (int)ncfg ? i - (int)ncfg : i);
    const char *dir = lua_tostring(L, -1);
    int n = tp_engine_load_tools(b->e, dir);
    const char *err = tp_engine_error(b->e);
    lua_pop(L, 1);
    if (n < 0 || *err) {  /* one warning per line */
      const char *p = err;
      while (*p) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        lua_pushlstring(L, p, len);
        lua_rawseti(L, -2, ++nw);
        p += len + (nl != NULL);
      }
    }
  }
  if (nw == 0) { lua_pop(L, 1); lua_pushboolean(L, 0); }
  lua_rawseti(L, -2, 2);
  lua_pushvalue(L, keyi);
  lua_pushvalue(L, -2);
  lua_rawset(L, lua_upvalueindex(2));
  lua_rawgeti(L, -1, 2);
  lua_replace(L, dirs);
  lua_settop(L, dirs);
  return b->e;
}

/* ---- the envelope, built in the host's state ----------------------------------------- */

typedef struct tree_box { json_t *tree; } tree_box;

static int tree_gc (lua_State *L) {
  tree_box *b = luaL_checkudata(L, 1, TREE_KEY);
  json_decref(b->tree);
  b->tree = NULL;
  return 0;
}

/* Pushes v; arrays get the metatable at index mt. Raises on nesting deeper than
** ENVELOPE_MAX_DEPTH or out of memory: the tree is owned by a box, so nothing leaks.
** Bounded by the envelope's size, which the run's result and log limits cap. */
static void push_json (lua_State *L, const json_t *v, int depth, int mt) {
  switch (json_typeof(v)) {
    case JSON_NULL: lua_pushlightuserdata(L, NULL); return;
    case JSON_TRUE: lua_pushboolean(L, 1); return;
    case JSON_FALSE: lua_pushboolean(L, 0); return;
    case JSON_INTEGER: lua_pushinteger(L, (lua_Integer)json_integer_value(v)); return;
    case JSON_REAL: lua_pushnumber(L, (lua_Number)json_real_value(v)); return;
    case JSON_STRING: lua_pushlstring(L, json_string_value(v), json_string_length(v)); return;
    default: break;
  }
  if (depth >= ENVELOPE_MAX_DEPTH)
    luaL_error(L, "tidepool: the envelope nests deeper than %d levels", ENVELOPE_MAX_DEPTH);
  luaL_checkstack(L, 3, "tidepool: envelope too deep");
  if (json_is_array(v)) {
    size_t n = json_array_size(v);
    lua_createtable(L, n > INT32_MAX ? INT32_MAX : (int)n, 0);
    for (size_t i = 0; i < n; i++) {
      push_json(L, json_array_get(v, i), depth + 1, mt);
      lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    lua_pushvalue(L, mt);
    lua_setmetatable(L, -2);
    return;
  }
  const char *key;
  size_t klen;
  json_t *child;
  size_t n = json_object_size(v);
  lua_createtable(L, 0, n > INT32_MAX ? INT32_MAX : (int)n);
  json_object_keylen_foreach((json_t *)v, key, klen, child) {
    lua_pushlstring(L, key, klen);
    push_json(L, child, depth + 1, mt);
    lua_rawset(L, -3);
  }
}

/* Pushes an empty box for a tree; may raise, so call it before owning anything. */
static tree_box *push_tree_box (lua_State *L) {
  tree_box *b = lua_newuserdatauv(L, sizeof *b, 0);
  b->tree = NULL;
  luaL_setmetatable(L, TREE_KEY);
  return b;
}

/* Parses the envelope (the caller's, freed here without raising first) into the box on
** top of the stack, and replaces the box with the envelope as a table. */
static void push_envelope (lua_State *L, tree_box *b, char *envelope) {
  json_error_t je;
  b->tree = json_loads(envelope, JSON_ALLOW_NUL | JSON_REJECT_DUPLICATES, &je);
  tp_free(envelope);
  if (b->tree == NULL) luaL_error(L, "tidepool: bad envelope: %s", je.text);
  lua_getfield(L, LUA_REGISTRYINDEX, ARRAY_MT_KEY);
  push_json(L, b->tree, 0, lua_gettop(L));
  json_decref(b->tree);
  b->tree = NULL;
  lua_replace(L, -3);  /* the envelope where the box was */
  lua_pop(L, 1);
}

/* The determinism options of the table at idx: 1 when the run needs them (then *seed,
** *epoch, *step_us and *has_* are set), 0 when there are none. Raises on a bad value. */
typedef struct det_opts {
  int has_seed, has_clock;
  uint64_t seed;
  int64_t epoch;
  uint64_t step_us;
} det_opts;

static int read_determinism (lua_State *L, int idx, det_opts *d) {
  memset(d, 0, sizeof *d);
  d->step_us = 1000;
  if (!lua_istable(L, idx)) return 0;
  lua_getfield(L, idx, "deterministic");
  int det = lua_toboolean(L, -1);
  if (!lua_isnil(L, -1) && !lua_isboolean(L, -1))
    luaL_error(L, "tidepool: option 'deterministic' must be true or false");
  lua_pop(L, 1);
  d->has_seed = d->has_clock = det;
  if (lua_getfield(L, idx, "seed") != LUA_TNIL) {
    if (!lua_isinteger(L, -1)) luaL_error(L, "tidepool: option 'seed' must be an integer");
    d->seed = (uint64_t)lua_tointeger(L, -1);
    d->has_seed = 1;
  }
  lua_pop(L, 1);
  if (lua_getfield(L, idx, "clock") != LUA_TNIL) {
    if (!lua_isinteger(L, -1))
      luaL_error(L, "tidepool: option 'clock' must be an integer: seconds since the epoch, "
                 "e.g. 1700000000");
    d->epoch = (int64_t)lua_tointeger(L, -1);
    d->has_clock = 1;
  }
  lua_pop(L, 1);
  if (lua_getfield(L, idx, "clock_step") != LUA_TNIL) {
    lua_Number s = lua_tonumber(L, -1);
    if (!lua_isnumber(L, -1) || !(s >= 0) || s > 86400)
      luaL_error(L, "tidepool: option 'clock_step' must be seconds from 0 to 86400, "
                 "e.g. 0.001");
    d->step_us = (uint64_t)(s * 1e6 + 0.5);
    d->has_clock = 1;
  }
  lua_pop(L, 1);
  return d->has_seed || d->has_clock;
}

static void run_done (tp_run *r, void *ud) {
  (void)r;
  *(int *)ud = 1;
}

/* ---- caller tools: Lua functions of the host as tools of one run ----------------------
** caller_tools = { weather = { description = "...", input = {schema}, output = {schema},
** timeout = 5, handler = function(args) return {temp_c = 21} end }, ... } (or a list of
** such tables with a name each). The handler runs in the host's state, synchronously,
** when the script calls tools.weather{...} and its arguments passed the policy and the
** input schema: it gets them as a table and returns the result (a table, string, number,
** boolean, or nil for JSON null). error("text") fails the call with tool.failed and that
** text; error({code = "tool.denied", message = "..."}) with that tool.* code. */

#define LUA_JSON_MAX_DEPTH 64

/* The Lua value at idx as JSON (NULL with *why set when it cannot be: a function, a
** cycle, a key that is neither a string nor a sequence index, nesting too deep). Arrays:
** tables tagged by the module's array metatable, or non-empty sequences 1..n. */
static json_t *lua_to_json (lua_State *L, int idx, int depth, const char **why) {
  idx = lua_absindex(L, idx);
  switch (lua_type(L, idx)) {
    case LUA_TNIL: return json_null();
    case LUA_TBOOLEAN: return json_boolean(lua_toboolean(L, idx));
    case LUA_TNUMBER:
      if (lua_isinteger(L, idx)) return json_integer((json_int_t)lua_tointeger(L, idx));
      else {
        lua_Number n = lua_tonumber(L, idx);
        if (n != n || n - n != 0) { *why = "a NaN or infinite number"; return NULL; }
        return json_real((double)n);
      }
    case LUA_TSTRING: {
      size_t len;
      const char *s = lua_tolstring(L, idx, &len);
      json_t *v = json_stringn(s, len);
      if (v == NULL) *why = "a string that is not UTF-8";
      return v;
    }
    case LUA_TLIGHTUSERDATA:
      if (lua_touserdata(L, idx) == NULL) return json_null();  /* tidepool.null */
      /* fall through */
    default:
      if (lua_type(L, idx) != LUA_TTABLE) { *why = "a value JSON cannot hold (a function?)"; return NULL; }
  }
  if (depth >= LUA_JSON_MAX_DEPTH) { *why = "tables nested too deep (a cycle?)"; return NULL; }
  if (!lua_checkstack(L, 4)) { *why = "tables nested too deep"; return NULL; }
  int tagged = 0;
  if (lua_getmetatable(L, idx)) {
    lua_getfield(L, LUA_REGISTRYINDEX, ARRAY_MT_KEY);
    tagged = lua_rawequal(L, -1, -2);
    lua_pop(L, 2);
  }
  lua_Integer n = (lua_Integer)lua_rawlen(L, idx);
  size_t count = 0;
  lua_pushnil(L);
  while (lua_next(L, idx)) { count++; lua_pop(L, 1); }
  if (tagged || (n > 0 && (size_t)n == count)) {
    json_t *a = json_array();
    for (lua_Integer i = 1; a && i <= n; i++) {
      lua_rawgeti(L, idx, i);
      json_t *v = lua_to_json(L, -1, depth + 1, why);
      lua_pop(L, 1);
      if (v == NULL || json_array_append_new(a, v) != 0) { json_decref(a); return NULL; }
    }
    return a;
  }
  json_t *o = json_object();
  lua_pushnil(L);
  while (o && lua_next(L, idx)) {
    if (lua_type(L, -2) != LUA_TSTRING) {
      *why = "a table with keys that are not strings (and not a sequence 1..n)";
      lua_pop(L, 2);
      json_decref(o);
      return NULL;
    }
    json_t *v = lua_to_json(L, -1, depth + 1, why);
    size_t klen;
    const char *k = lua_tolstring(L, -2, &klen);
    if (v == NULL || json_object_setn_new(o, k, klen, v) != 0) {
      lua_pop(L, 2);
      json_decref(o);
      return NULL;
    }
    lua_pop(L, 1);
  }
  return o;
}

typedef struct lcaller {
  lua_State *L;
  int handlers;   /* stack index of a table: name -> {handler, timeout in ms or nil} */
  uint64_t tool_timeout_us;  /* the run's tool_timeout_us: a tool without its own timeout */
} lcaller;

/* A handler past its call's timeout: a count hook on the host's state, set for the
** handler's call (the host program's own hook put back after it), raises tool.timeout.
** It stops Lua code; a handler blocked inside a C function (a sleep, a socket) is stopped
** when it comes back to Lua. */
typedef struct hdeadline { struct timespec at; double secs; } hdeadline;
static const char deadline_key = 0;  /* registry: light userdata of the call's hdeadline */

static void deadline_hook (lua_State *L, lua_Debug *ar) {
  (void)ar;
  lua_rawgetp(L, LUA_REGISTRYINDEX, &deadline_key);
  hdeadline *d = lua_touserdata(L, -1);
  lua_pop(L, 1);
  if (d == NULL) return;
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  if (now.tv_sec < d->at.tv_sec || (now.tv_sec == d->at.tv_sec && now.tv_nsec < d->at.tv_nsec))
    return;
  lua_rawsetp(L, LUA_REGISTRYINDEX, &deadline_key);  /* (a nil below the top: once) */
  lua_createtable(L, 0, 2);
  lua_pushliteral(L, "tool.timeout");
  lua_setfield(L, -2, "code");
  lua_pushfstring(L, "the host's handler ran past its timeout of %f s", d->secs);
  lua_setfield(L, -2, "message");
  lua_error(L);
}

/* One call of a handler, run protected (handler_p): the arguments in, the result's JSON
** text out, or why it cannot be JSON. */
typedef struct hcall {
  json_t *args;
  char *result;
  const char *bad;
} hcall;

/* handler_p(handler, hcall): pushes the arguments, calls the handler, converts its result
** (everything that may raise, inside the protected call). */
static int handler_p (lua_State *L) {
  hcall *h = lua_touserdata(L, 2);
  lua_settop(L, 1);
  lua_getfield(L, LUA_REGISTRYINDEX, ARRAY_MT_KEY);
  push_json(L, h->args, 0, 2);
  lua_remove(L, 2);
  lua_call(L, 1, 1);
  json_t *v = lua_to_json(L, -1, 0, &h->bad);
  if (v == NULL) return 0;
  h->result = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
  json_decref(v);
  if (h->result == NULL) h->bad = "a value too large for memory";
  return 0;
}

/* A call of a caller tool: the handler, protected; its result or error completes it. */
static void lua_caller_call (tp_call *c, void *ud) {
  lcaller *lc = ud;
  lua_State *L = lc->L;
  int top = lua_gettop(L);
  const char *args = tp_call_args(c);
  hcall h = { args ? json_loads(args, JSON_ALLOW_NUL, NULL) : NULL, NULL, NULL };
  if (h.args == NULL || !lua_checkstack(L, 8)) {
    json_decref(h.args);
    tp_call_fail(c, NULL, "the arguments could not be handed to the host's handler");
    return;
  }
  lua_pushcfunction(L, handler_p);
  lua_getfield(L, lc->handlers, tp_call_tool(c));  /* a plain table of the module's */
  lua_rawgeti(L, -1, 2);
  lua_Integer ms = lua_isinteger(L, -1) ? lua_tointeger(L, -1) : 0;
  lua_pop(L, 1);
  lua_rawgeti(L, -1, 1);
  lua_remove(L, -2);
  lua_pushlightuserdata(L, &h);
  uint64_t us = ms > 0 ? (uint64_t)ms * 1000u : lc->tool_timeout_us;
  hdeadline dl;
  clock_gettime(CLOCK_MONOTONIC, &dl.at);
  dl.secs = (double)us / 1e6;
  dl.at.tv_sec += (time_t)(us / 1000000u);
  dl.at.tv_nsec += (long)(us % 1000000u) * 1000L;
  if (dl.at.tv_nsec >= 1000000000L) { dl.at.tv_sec++; dl.at.tv_nsec -= 1000000000L; }
  lua_Hook old = lua_gethook(L);
  int old_mask = lua_gethookmask(L), old_count = lua_gethookcount(L);
  if (us) {
    lua_pushlightuserdata(L, &dl);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &deadline_key);
    lua_sethook(L, deadline_hook, LUA_MASKCOUNT, 1000);
  }
  int st = lua_pcall(L, 2, 0, 0);
  if (us) {
    lua_sethook(L, old, old_mask, old_count);
    lua_pushnil(L);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &deadline_key);
  }
  json_decref(h.args);
  if (st == LUA_OK && h.result) tp_call_complete(c, h.result, strlen(h.result));
  else if (st == LUA_OK) {
    char msg[200];
    snprintf(msg, sizeof msg, "the host's handler returned %s, which JSON cannot hold",
             h.bad ? h.bad : "a value");
    tp_call_fail(c, NULL, msg);
  }
  else if (lua_istable(L, -1)) {  /* error({code = ..., message = ...}) */
    lua_pushliteral(L, "code");
    lua_rawget(L, -2);
    lua_pushliteral(L, "message");
    lua_rawget(L, -3);
    const char *code = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : NULL;
    const char *msg = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
    tp_call_fail(c, code, msg ? msg : "the host's handler raised an error");
  }
  else {
    const char *msg = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
    tp_call_fail(c, NULL, msg ? msg : "the host's handler raised an error");
  }
  free(h.result);
  lua_settop(L, top);
}

/* Reads the caller_tools option of the table at opts into declarations (JSON text,
** malloc'd) and a handlers table pushed on the stack (name -> function). NULL when there
** is no such option (nothing pushed). Raises on a bad declaration. */
static char *read_caller_tools (lua_State *L, int opts) {
  if (!lua_istable(L, opts)) return NULL;
  if (lua_getfield(L, opts, "caller_tools") == LUA_TNIL) { lua_pop(L, 1); return NULL; }
  int ct = lua_gettop(L);
  if (!lua_istable(L, ct))
    luaL_error(L, "tidepool: option 'caller_tools' must be a table: name = {handler = "
               "function(args) ... end, description = ..., input = {schema}, output = {schema}}");
  lua_newtable(L);
  int handlers = lua_gettop(L);
  json_t *decls = json_array();
  tree_box *keep = lua_newuserdatauv(L, sizeof *keep, 0);  /* frees decls on a raise */
  keep->tree = decls;
  luaL_setmetatable(L, TREE_KEY);
  lua_pushnil(L);
  while (lua_next(L, ct)) {
    const char *name = NULL;
    if (lua_type(L, -2) == LUA_TSTRING) name = lua_tostring(L, -2);
    if (!lua_istable(L, -1))
      luaL_error(L, "tidepool: caller_tools.%s must be a table {handler = function(args) ... "
                 "end, ...}", name ? name : "?");
    if (lua_getfield(L, -1, "name") == LUA_TSTRING) name = lua_tostring(L, -1);
    lua_pop(L, 1);  /* the string stays alive in the tool's table */
    if (name == NULL)
      luaL_error(L, "tidepool: caller_tools: a tool in a list needs a name = \"...\"");
    if (lua_getfield(L, -1, "handler") != LUA_TFUNCTION)
      luaL_error(L, "tidepool: caller_tools.%s.handler must be a function(args)", name);
    lua_createtable(L, 2, 0);  /* handlers[name] = {handler, timeout in ms or nil} */
    lua_insert(L, -2);
    lua_rawseti(L, -2, 1);
    lua_setfield(L, handlers, name);
    json_t *d = json_pack("{s:s}", "name", name);
    if (d == NULL || json_array_append_new(decls, d) != 0)
      luaL_error(L, "tidepool: not enough memory");
    if (lua_getfield(L, -1, "description") == LUA_TSTRING)
      json_object_set_new(d, "description", json_string(lua_tostring(L, -1)));
    lua_pop(L, 1);
    static const char *const fields[][2] = { { "input", "inputSchema" },
                                             { "output", "outputSchema" } };
    for (int i = 0; i < 2; i++) {
      if (lua_getfield(L, -1, fields[i][0]) != LUA_TNIL) {
        const char *why = "?";
        json_t *s = lua_type(L, -1) == LUA_TSTRING
                    ? json_loads(lua_tostring(L, -1), 0, NULL) : lua_to_json(L, -1, 0, &why);
        if (s == NULL || !json_is_object(s)) {
          json_decref(s);
          luaL_error(L, "tidepool: caller_tools.%s.%s must be a JSON Schema (a table, or its "
                     "JSON text)", name, fields[i][0]);
        }
        json_object_set_new(d, fields[i][1], s);
      }
      lua_pop(L, 1);
    }
    if (lua_getfield(L, -1, "timeout") != LUA_TNIL) {
      lua_Number t = lua_tonumber(L, -1);
      if (!lua_isnumber(L, -1) || !(t > 0) || t > 86400)
        luaL_error(L, "tidepool: caller_tools.%s.timeout must be seconds, more than 0", name);
      json_int_t ms = (json_int_t)(t * 1000 + 0.5);
      json_object_set_new(d, "timeoutMs", json_integer(ms > 0 ? ms : 1));
      lua_getfield(L, handlers, name);
      lua_pushinteger(L, (lua_Integer)(ms > 0 ? ms : 1));
      lua_rawseti(L, -2, 2);
      lua_pop(L, 1);
    }
    lua_pop(L, 2);
  }
  char *text = json_dumps(decls, JSON_COMPACT);
  json_decref(decls);
  keep->tree = NULL;
  lua_pop(L, 1);     /* the box */
  lua_remove(L, ct); /* the handlers table stays on top */
  if (text == NULL) luaL_error(L, "tidepool: not enough memory");
  return text;
}

/* tp_engine_run with caller tools (and maybe a seed and a clock): the run driven by e's
** loop, its caller tools answered by lc's handlers. */
static int run_with_callers (lua_State *L, tp_engine *e, const char *src, size_t len,
                             const tp_limits *lim, const det_opts *d, char *decls,
                             lcaller *lc, char **envelope) {
  *envelope = NULL;
  tp_engine_start_servers(e, NULL, NULL);
  tp_run *r = tp_run_create(e, src, len, lim);
  if (r == NULL) { free(decls); return TP_ENOMEM; }
  int rc = tp_run_declare_caller_tools(r, decls, 0, lua_caller_call, NULL, lc), done = 0;
  free(decls);
  if (rc != TP_OK) {
    tp_run_destroy(r);
    return luaL_error(L, "tidepool: caller_tools: %s", tp_engine_error(e));
  }
  if (d->has_seed) rc = tp_run_set_seed(r, d->seed);
  if (rc == TP_OK && d->has_clock) rc = tp_run_set_fixed_clock(r, d->epoch, d->step_us);
  if (rc == TP_OK) rc = tp_run_start(r, run_done, &done);
  while (rc == TP_OK && !done) tp_engine_poll(e, 1);
  const char *env = rc == TP_OK ? tp_run_envelope(r) : NULL;
  if (env != NULL) {
    *envelope = strdup(env);
    if (*envelope == NULL) rc = TP_ENOMEM;
  }
  else if (rc == TP_OK) rc = TP_ESTATE;
  tp_run_destroy(r);
  return rc;
}

static int run_or_check (lua_State *L, int check) {
  lua_settop(L, 2);  /* no options: a nil at 2, not the warnings pick_engine pushes */
  tp_engine *e = pick_engine(L, 2);
  int warnings = lua_gettop(L);
  size_t len;
  const char *src = luaL_checklstring(L, 1, &len);
  tp_limits lim;
  read_options(L, 2, &lim, e);
  luaL_checkstack(L, 8, NULL);
  det_opts det;
  int determined = read_determinism(L, 2, &det) && !check;
  char *decls = check ? NULL : read_caller_tools(L, 2);
  lcaller lc = { L, lua_gettop(L), lim.tool_timeout_us };
  tree_box *box = push_tree_box(L);
  char *envelope = NULL;
  tp_run_opts ro = TP_RUN_OPTS_INIT;
  ro.limits = &lim;
  ro.check_only = check;
  ro.has_seed = determined && det.has_seed;
  ro.seed = det.seed;
  ro.has_clock = determined && det.has_clock;
  ro.clock_epoch = det.epoch;
  ro.clock_step_us = det.step_us;
  int rc = decls ? run_with_callers(L, e, src, len, &lim, &det, decls, &lc, &envelope)
         : tp_engine_run_with(e, src, len, &ro, &envelope, NULL);
  if (rc != TP_OK) return luaL_error(L, "tidepool: the engine failed (%d)", rc);
  int as_text = 0;
  if (lua_istable(L, 2)) {
    lua_getfield(L, 2, "json");
    as_text = lua_toboolean(L, -1);
    lua_pop(L, 1);  /* cannot raise: a plain table's field, no memory needed */
  }
  if (as_text) {  /* json = true: the envelope's text, and the warnings (or nil) second */
    box->tree = json_stringn_nocheck(envelope, strlen(envelope));  /* freed by the box */
    tp_free(envelope);
    if (box->tree == NULL) return luaL_error(L, "tidepool: not enough memory");
    lua_pushlstring(L, json_string_value(box->tree), json_string_length(box->tree));
    json_decref(box->tree);
    box->tree = NULL;
    if (lua_istable(L, warnings)) lua_pushvalue(L, warnings);
    else lua_pushnil(L);  /* no warnings: nil, whichever engine ran */
    return 2;
  }
  push_envelope(L, box, envelope);
  if (lua_istable(L, warnings)) {  /* the tools' load warnings, after the run's own */
    if (lua_getfield(L, -1, "warnings") == LUA_TTABLE) {
      lua_Integer n = (lua_Integer)lua_rawlen(L, -1);
      for (lua_Integer i = 1; i <= (lua_Integer)lua_rawlen(L, warnings); i++) {
        lua_rawgeti(L, warnings, i);
        lua_rawseti(L, -2, ++n);
      }
      lua_pop(L, 1);
    }
    else {
      lua_pop(L, 1);
      lua_pushvalue(L, warnings);
      lua_setfield(L, -2, "warnings");
    }
  }
  return 1;
}

static int run_p (lua_State *L) { return run_or_check(L, 0); }
static int check_p (lua_State *L) { return run_or_check(L, 1); }

/* Calls f protected with the logger's Lua state set to L, and unset again on every path
** (an error is raised again after). */
static int with_logger (lua_State *L, lua_CFunction f) {
  lua_State *prev = log_L;
  log_L = L;
  lua_pushvalue(L, lua_upvalueindex(1));  /* f's upvalues: run_or_check's */
  lua_pushvalue(L, lua_upvalueindex(2));
  lua_pushcclosure(L, f, 2);
  lua_insert(L, 1);
  int st = lua_pcall(L, lua_gettop(L) - 1, LUA_MULTRET, 0);
  log_L = prev;
  if (st != LUA_OK) return lua_error(L);
  return lua_gettop(L);
}

static int l_run (lua_State *L) { return with_logger(L, run_p); }
static int l_check (lua_State *L) { return with_logger(L, check_p); }

int luaopen_tidepool (lua_State *L) {
  lua_newtable(L);
  engine_box *b = lua_newuserdatauv(L, sizeof *b, 0);
  b->e = NULL;
  if (luaL_newmetatable(L, ENGINE_KEY)) {
    lua_pushcfunction(L, engine_gc);
    lua_setfield(L, -2, "__gc");
  }
  lua_setmetatable(L, -2);
  if (luaL_newmetatable(L, TREE_KEY)) {
    lua_pushcfunction(L, tree_gc);
    lua_setfield(L, -2, "__gc");
  }
  if (lua_getfield(L, LUA_REGISTRYINDEX, ARRAY_MT_KEY) != LUA_TTABLE) {
    lua_pop(L, 1);
    lua_createtable(L, 0, 1);  /* no __name: tostring(arr) stays "table: 0x..." */
    lua_pushliteral(L, JSON_ARRAY_TAG);
    lua_setfield(L, -2, "__metatable");  /* getmetatable(arr) answers the tag */
    lua_pushvalue(L, -1);
    lua_setfield(L, LUA_REGISTRYINDEX, ARRAY_MT_KEY);
  }
  lua_pop(L, 2);
  b->e = tp_engine_create();
  if (b->e == NULL) return luaL_error(L, "tidepool: cannot create an engine (out of memory)");
  tp_engine_on_log(b->e, lua_logger, NULL);
  lua_newtable(L);  /* engines by tool directories */
  lua_pushvalue(L, -2);
  lua_pushvalue(L, -2);
  lua_pushcclosure(L, l_run, 2);
  lua_setfield(L, -4, "run");
  lua_pushcclosure(L, l_check, 2);
  lua_setfield(L, -2, "check");
  lua_pushcfunction(L, l_on_log);
  lua_setfield(L, -2, "on_log");
  lua_pushstring(L, tp_version());
  lua_setfield(L, -2, "version");
  lua_pushlightuserdata(L, NULL);
  lua_setfield(L, -2, "null");
  return 1;
}
