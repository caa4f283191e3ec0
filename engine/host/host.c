/*
** host.c: the engine's host Lua state H (trusted, one per engine, opened on first need):
** plugin tools written in Lua, their handlers run as coroutines, luv on the engine's
** loop, lpeg, and the runtime lua/host.lua, which does the Lua side of all this. Here H
** is opened (its allocator, its libraries, E: what host.lua may call) and closed, E's
** functions about the engine and its tools live (E.add_tool registers a tool with the Lua
** or the upstream provider), and describe.lua makes the tools' annotations.
**
** Around it: host_state.c (H's record, references, pcall, the luv callback runner) and
** host_call.c (a call's box, E's functions on it, the timed resume) below, with the
** providers (host_handler.c runs a Lua handler's call for provider_lua.c and
** provider_upstream.c); host_load.c above (plugin files, upstream MCP servers).
**
** Registry references of boxes and of the runtime are counted; a debug build asserts
** none is left when H closes. A tool's handler reference belongs to its provider's data
** (provider_lua.c) and goes with it.
*/
#include <assert.h>
#include <dlfcn.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "util.h"
#include "tidepool_server.h"
#include "lauxlib.h"
#include "lualib.h"

#include "registry.h"
#include "host.h"
#include "host_int.h"
#include "json.h"
#include "embedded.h"
#include "trace.h"

/* luv and lpeg come from Debian (shared in the CLI and tests, the static liblua5.4-luv.a
** and liblua5.4-lpeg.a inside the public library and the Lua module); their headers would
** drag in a second set of Lua headers, so the few entry points are declared here with
** the signatures of luv.h and lua-lpeg.h. */
typedef int (*tp_luv_pcall)(lua_State *L, int nargs, int nresults, int flags);
void luv_set_loop(lua_State *L, uv_loop_t *loop);
void luv_set_callback(lua_State *L, tp_luv_pcall pcall);
int luaopen_luv(lua_State *L);
int luaopen_lpeg(lua_State *L);

/* Debian's static luv is compiled for executables (-fPIE): it reads libc's stderr
** PC-relative, which a shared library cannot resolve. The public library's build renames
** that reference to this variable (the Makefile's luv-lib.o), set before luv can run. */
extern FILE *tp__luv_stderr;
FILE *tp__luv_stderr;


/* ---- schemas and results given as Lua tables ----------------------------------------- */

static int in_list (const char *k, const char *const *list) {
  for (; *list; list++) if (strcmp(k, *list) == 0) return 1;
  return 0;
}

/* An empty Lua table converts to {}; where a schema keyword takes an array (required,
** enum, type, allOf, ...) it is [] instead. Walks subschemas only, never into data
** (const, default, examples' items). */
static void fix_schema (json_t *s, int depth) {
  static const char *const arrays[] = { "required", "enum", "type", "allOf", "anyOf",
    "oneOf", "prefixItems", "examples", NULL };
  static const char *const one[] = { "items", "additionalProperties", "not", "if", "then",
    "else", "contains", "propertyNames", "unevaluatedItems", "unevaluatedProperties",
    "additionalItems", "contentSchema", NULL };
  static const char *const maps[] = { "properties", "patternProperties", "$defs",
    "definitions", "dependentSchemas", NULL };
  static const char *const lists[] = { "allOf", "anyOf", "oneOf", "prefixItems", "items",
    NULL };
  const char *k;
  json_t *v;
  if (!json_is_object(s) || depth > TP_JSON_MAX_DEPTH) return;
  json_object_foreach(s, k, v) {
    if (in_list(k, arrays) && json_is_object(v) && json_object_size(v) == 0) {
      json_object_set_new(s, k, json_array());
      continue;
    }
    if (in_list(k, one)) fix_schema(v, depth + 1);
    if (in_list(k, maps) && json_is_object(v)) {
      const char *k2;
      json_t *v2;
      json_object_foreach(v, k2, v2) fix_schema(v2, depth + 1);
    }
    if (in_list(k, lists) && json_is_array(v)) {
      size_t i;
      json_t *v2;
      json_array_foreach(v, i, v2) fix_schema(v2, depth + 1);
    }
    if (strcmp(k, "dependentRequired") == 0 && json_is_object(v)) {
      const char *k2;
      json_t *v2;
      json_object_foreach(v, k2, v2)
        if (json_is_object(v2) && json_object_size(v2) == 0)
          json_object_set_new(v, k2, json_array());
    }
  }
}

/* ---- E.add_tool: Lua plugin and upstream tools --------------------------------------- */

static json_t *schema_arg (lua_State *H, const char *field, const char *tool, int *bad,
                           char *err, size_t errlen) {
  json_t *doc = NULL;
  *bad = 0;
  lua_getfield(H, 1, field);
  if (lua_type(H, -1) == LUA_TSTRING) {
    size_t len;
    const char *text = lua_tolstring(H, -1, &len);
    json_error_t jerr;
    doc = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (doc == NULL) {
      snprintf(err, errlen, "tool %s: the %s schema is not JSON: %s at line %d column %d",
               tool, field, jerr.text, jerr.line, jerr.column);
      *bad = 1;
    }
  }
  else if (lua_type(H, -1) == LUA_TTABLE) {
    tp_json_err jerr;
    doc = tp__json_from_lua(H, -1, 0, 0, &jerr);
    if (doc == NULL) {
      snprintf(err, errlen, "tool %s: the %s schema cannot be read as JSON: %s", tool, field,
               jerr.message);
      *bad = 1;
    }
    else fix_schema(doc, 0);
  }
  lua_pop(H, 1);
  return doc;
}

/* E.add_tool{name=, description=, input=, output=, handler=, timeout_ms=, origin=,
** alias=, upstream=} -> true | nil, message. Fields are checked by host.lua (upstream.lua
** for upstream tools: upstream = true, their own provider, kept across plugin reloads;
** alias, another name that reaches the tool, or a list of up to 8 of them); schemas are
** JSON text or tables. */
static int add_tool (lua_State *H) {
  tp__host *h = tp__host_get(H);
  luaL_checktype(H, 1, LUA_TTABLE);
  lua_getfield(H, 1, "name");
  const char *name = luaL_checkstring(H, -1);
  lua_getfield(H, 1, "description");
  const char *desc = lua_tostring(H, -1);
  lua_getfield(H, 1, "origin");
  const char *origin = lua_tostring(H, -1);
  lua_getfield(H, 1, "timeout_ms");
  lua_Number tmo = lua_tonumber(H, -1);
  lua_pop(H, 1);
  lua_getfield(H, 1, "alias");  /* a string, or a list of them; kept on the stack */
  int alias_at = lua_gettop(H);
  lua_getfield(H, 1, "upstream");
  const tp__provider *prov = lua_toboolean(H, -1) ? &tp__upstream_provider : &tp__lua_provider;
  lua_pop(H, 1);
  char err[1024];
  const tp_tool *old = tp__tool_find(h->e, name);
  if (old != NULL) {
    luaL_pushfail(H);
    if (old->origin)  /* a plugin's: the provider says where */
      lua_pushfstring(H, "tool %s is defined already (at %s)", name, old->prov->describe(old));
    else
      lua_pushfstring(H, "tool %s is registered already", name);
    return 2;
  }
  int bad;
  json_t *in = schema_arg(H, "input", name, &bad, err, sizeof err);
  if (bad) { luaL_pushfail(H); lua_pushstring(H, err); return 2; }
  json_t *out = schema_arg(H, "output", name, &bad, err, sizeof err);
  if (bad) { json_decref(in); luaL_pushfail(H); lua_pushstring(H, err); return 2; }
  lua_getfield(H, 1, "handler");
  luaL_checktype(H, -1, LUA_TFUNCTION);
  int ref = luaL_ref(H, LUA_REGISTRYINDEX);
  void *pdata = prov == &tp__upstream_provider ? tp__upstream_tool_new(ref)
                                               : tp__lua_tool_new(ref);
  if (pdata == NULL) {
    luaL_unref(H, LUA_REGISTRYINDEX, ref);
    json_decref(in);
    json_decref(out);
    luaL_pushfail(H);
    lua_pushstring(H, "out of memory");
    return 2;
  }
  tp_tool_def def = { 0 };
  def.name = name;
  def.description = desc;
  def.timeout_us = tmo > 0 ? (uint64_t)(tmo * 1000.0) : 0;
  int rc = tp__tool_add(h->e, &def, in, out, prov, pdata, origin);
  json_decref(in);
  json_decref(out);
  if (rc != TP_OK) {  /* the pdata is still ours */
    luaL_unref(H, LUA_REGISTRYINDEX, ref);
    free(pdata);
    luaL_pushfail(H);
    lua_pushstring(H, rc == TP_ENOMEM ? "out of memory" : tp_engine_error(h->e));
    return 2;
  }
  int nalias = lua_istable(H, alias_at) ? (int)luaL_len(H, alias_at) : 1;
  for (int k = 1; k <= nalias && nalias <= 8; k++) {
    if (lua_istable(H, alias_at)) lua_rawgeti(H, alias_at, k);
    else lua_pushvalue(H, alias_at);
    const char *alias = lua_tostring(H, -1);
    if (alias != NULL && strcmp(alias, name) != 0 &&
        (rc = tp__upstream_set_alias(h->e, name, alias)) != TP_OK) {
      luaL_pushfail(H);  /* the tool stays, reachable by its name */
      lua_pushstring(H, rc == TP_ENOMEM ? "out of memory" : tp_engine_error(h->e));
      return 2;
    }
    lua_pop(H, 1);
  }
  lua_pushboolean(H, 1);
  return 1;
}

/* ---- E: what host.lua may call about the engine and its tools ------------------------ */

/* E.emit(level, source, text): a message for the engine's logger (tp_engine_on_log);
** level "error", "warn", "info" or "debug". */
static int e_emit (lua_State *H) {
  static const char *const names[] = { "error", "warn", "info", "debug", NULL };
  static const tp_log_level levels[] = { TP_LOG_ERROR, TP_LOG_WARN, TP_LOG_INFO, TP_LOG_DEBUG };
  tp_log_level level = levels[luaL_checkoption(H, 1, NULL, names)];
  const char *source = luaL_checkstring(H, 2);
  const char *text = luaL_checkstring(H, 3);
  tp__engine_log(tp__host_get(H)->e, level, source, "%s", text);
  return 0;
}

/* E.peek_id(text) -> the "id" member of the JSON object that text begins with (an integer,
** or a string without escapes) when it comes whole within text; else nothing. One pass
** over the text and no tree: it tells whose a long message is before it is all read or
** decoded (upstream.lua). */
static int e_peek_id (lua_State *H) {
  size_t n;
  const char *s = luaL_checklstring(H, 1, &n);
  size_t i = 0;
  while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r' || s[i] == '\n')) i++;
  if (i >= n || s[i] != '{') return 0;
  i++;
  int depth = 1, key = 1;  /* key: a string here at depth 1 is a member's name */
  while (i < n) {
    char ch = s[i];
    if (ch == '"') {
      size_t from = ++i;
      while (i < n && s[i] != '"') i += s[i] == '\\' ? 2 : 1;
      if (i >= n) return 0;
      size_t to = i++;
      if (depth != 1 || !key) continue;
      key = 0;
      if (to - from != 2 || memcmp(s + from, "id", 2) != 0) continue;
      while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r' || s[i] == '\n')) i++;
      if (i >= n || s[i] != ':') return 0;
      i++;
      while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r' || s[i] == '\n')) i++;
      if (i >= n) return 0;
      if (s[i] == '"') {
        size_t a = ++i;
        while (i < n && s[i] != '"' && s[i] != '\\') i++;
        if (i >= n || s[i] != '"') return 0;
        lua_pushlstring(H, s + a, i - a);
        return 1;
      }
      size_t j = i + (s[i] == '-');
      size_t d0 = j;
      while (j < n && j - d0 < 19 && s[j] >= '0' && s[j] <= '9') j++;
      if (j == d0 || j >= n) return 0;
      if (s[j] != ',' && s[j] != '}' && s[j] != ' ' && s[j] != '\t' && s[j] != '\r' &&
          s[j] != '\n')
        return 0;
      char num[24];
      memcpy(num, s + i, j - i);
      num[j - i] = '\0';
      lua_pushinteger(H, (lua_Integer)strtoll(num, NULL, 10));
      return 1;
    }
    if (ch == '{' || ch == '[') depth++;
    else if (ch == '}' || ch == ']') { if (--depth == 0) return 0; }
    else if (ch == ',' && depth == 1) key = 1;
    i++;
  }
  return 0;
}

/* E.workspace_max() -> the engine's cap on the workspace's growth in bytes (0: none). */
static int e_workspace_max (lua_State *H) {
  const tp_engine *e = tp__host_get(H)->e;
  uint64_t m = e->workspace_max_set ? e->workspace_max : TP_WORKSPACE_MAX_DEFAULT;
  lua_pushinteger(H, (lua_Integer)(m > (uint64_t)LUA_MAXINTEGER ? LUA_MAXINTEGER : m));
  return 1;
}

/* E.workspace() -> the engine's workspace directory, or nil (plugins ask at load time:
** tools/fs.lua offers nothing without one). */
static int e_workspace (lua_State *H) {
  const tp_engine *e = tp__host_get(H)->e;
  if (e->workspace == NULL) return 0;
  lua_pushstring(H, e->workspace);
  return 1;
}

/* E.config(name) -> the JSON text of section name of the engine's config, or nil
** (host.lua decodes it for the plugin loader's load_opts.config). */
static int e_config (lua_State *H) {
  const tp_engine *e = tp__host_get(H)->e;
  const json_t *v = tp__config_section(e, luaL_checkstring(H, 1));
  if (v == NULL) return 0;
  size_t len;
  char *text = tp_json_text(v, &len);
  if (text == NULL) return luaL_error(H, "not enough memory");
  lua_pushlstring(H, text, len);
  tp_free(text);
  return 1;
}

/* E.annotate(): makes the annotations of tools added since the last time (upstream.lua,
** after adding a server's tools outside a plugin load). */
static int e_annotate (lua_State *H) {
  tp__tools_annotate(tp__host_get(H)->e);
  return 0;
}

/* E.span(parent, name, start_ns, ok, code, server): a span ending now under the span of
** traceparent parent (a call's), kind client: the upstream MCP request a call made.
** E.span_start() is the clock it counts from. Nothing when tracing is off. */
static int e_span_start (lua_State *H) {
  lua_pushinteger(H, (lua_Integer)tp__now_ns());
  return 1;
}

static int e_span (lua_State *H) {
  const char *parent = luaL_checkstring(H, 1), *name = luaL_checkstring(H, 2);
  uint64_t start = (uint64_t)luaL_checkinteger(H, 3);
  int ok = lua_toboolean(H, 4);
  const char *code = luaL_optstring(H, 5, NULL), *server = luaL_optstring(H, 6, NULL);
  json_t *a = server ? json_pack("{s:s,s:s}", "rpc.system", "mcp", "server.address", server)
                     : NULL;
  tp__trace_child(tp__host_get(H)->e, parent, name, 3, start, ok, code, a);
  json_decref(a);
  return 0;
}

/* E.seen(name, shape): the shape of the last result of tool name (a tool with no output
** schema), which tools.describe shows after its call; at most SEEN_MAX bytes. A new shape
** is also kept in the engine's state store (as the record of the run id "tool-shape:"
** name, expiring after SEEN_TTL_MS), so that the other engines of the store (workers,
** other processes with the same --state, a restart) show it too: E.seen_load reads it. */
#define SEEN_MAX 600
#define SEEN_KEY "tool-shape:"
#define SEEN_TTL_MS (30ull * 24 * 3600 * 1000)
static int e_seen (lua_State *H) {
  const char *name = luaL_checkstring(H, 1);
  size_t len;
  const char *shape = luaL_checklstring(H, 2, &len);
  tp_engine *e = tp__host_get(H)->e;
  tp_tool *t = (tp_tool *)tp__tool_find(e, name);
  if (t == NULL || t->output != NULL || len > SEEN_MAX) return 0;
  if (t->seen && strcmp(t->seen, shape) == 0) return 0;
  char *copy = strdup(shape);
  if (copy == NULL) return 0;  /* only the hint is lost */
  free(t->seen);
  t->seen = copy;
  char key[sizeof SEEN_KEY + 256];
  if (strlen(t->name) < 256) {  /* best effort: a store that fails loses only the hint */
    snprintf(key, sizeof key, SEEN_KEY "%s", t->name);
    tp_engine_run_put(e, key, copy, len, SEEN_TTL_MS, NULL, NULL);
  }
  return 0;
}

typedef struct seen_load { tp_engine *e; char name[]; } seen_load;

/* The store's answer to E.seen_load: the shape, unless the tool has seen one of its own
** since (or is gone, or got an output schema). Nothing of e is touched unless it answered:
** a connection closed at tp_engine_destroy answers CLOSED. */
static void seen_loaded (void *ud, int status, const char *val, size_t len, const char *err) {
  (void)err;
  seen_load *sl = ud;
  if (status == TP_STORED_OK && val != NULL && len > 0 && len <= SEEN_MAX &&
      memchr(val, '\0', len) == NULL) {
    tp_tool *t = (tp_tool *)tp__tool_find(sl->e, sl->name);
    if (t != NULL && t->output == NULL && t->seen == NULL) t->seen = strndup(val, len);
  }
  free(sl);
}

void tp__host_seen_load (tp_engine *e, const char *name) {
  size_t n = strlen(name);
  if (n >= 256) return;
  char key[sizeof SEEN_KEY + 256];
  snprintf(key, sizeof key, SEEN_KEY "%s", name);
  seen_load *sl = malloc(sizeof *sl + n + 1);
  if (sl == NULL) return;
  sl->e = e;
  memcpy(sl->name, name, n + 1);
  if (tp_engine_run_get(e, key, seen_loaded, sl) != TP_OK) free(sl);
}

/* E.seen_load(name): tp__host_seen_load, when upstream.lua registers a tool. */
static int e_seen_load (lua_State *H) {
  tp__host_seen_load(tp__host_get(H)->e, luaL_checkstring(H, 1));
  return 0;
}

/* E.tools_changed(): an upstream server's tools came late or changed (upstream.lua). */
static int e_tools_changed (lua_State *H) {
  tp_engine *e = tp__host_get(H)->e;
  if (e->tools_changed) e->tools_changed(e->tools_changed_ud);
  return 0;
}

/* E.upstream_state(server, up, restarted): /metrics' tidepool_upstream_* series. */
static int e_upstream_state (lua_State *H) {
  tp__metrics_upstream(tp__host_get(H)->e, luaL_checkstring(H, 1), lua_toboolean(H, 2),
                       lua_toboolean(H, 3));
  return 0;
}

/* require("tidepool.upstream"): lua/upstream.lua, given E (upvalue 1). */
static int open_upstream (lua_State *H) {
  const tp_embedded *src = tp__embedded_find("lua/upstream.lua");
  if (src == NULL) return luaL_error(H, "lua/upstream.lua is not embedded in this build");
  if (luaL_loadbufferx(H, src->data, src->len, "=lua/upstream.lua", "t") != LUA_OK)
    return lua_error(H);
  lua_pushvalue(H, lua_upvalueindex(1));
  lua_call(H, 1, 1);
  return 1;
}

/* E.mcp_versions: the library's list of protocol versions (tp_mcp_version), latest
** first, as {version =, modern =, client =} for upstream.lua, which offers and accepts
** from it. */
static void push_mcp_versions (lua_State *H) {
  const char *v;
  unsigned f;
  lua_newtable(H);
  for (size_t i = 0; (v = tp_mcp_version(i, &f)) != NULL; i++) {
    lua_createtable(H, 0, 3);
    lua_pushstring(H, v);
    lua_setfield(H, -2, "version");
    lua_pushboolean(H, (f & TP_MCP_V_MODERN) != 0);
    lua_setfield(H, -2, "modern");
    lua_pushboolean(H, (f & TP_MCP_V_CLIENT) != 0);
    lua_setfield(H, -2, "client");
    lua_rawseti(H, -2, (lua_Integer)i + 1);
  }
}

/* ---- H's allocator ------------------------------------------------------------------
** Every tool call makes a few small blocks in H (the arguments' table and its slots, the
** handler's result) that the collector frees in batches: glibc's per-thread cache holds
** 7 blocks of a size, so most of those frees and the next allocations took its slow
** paths. H keeps its own lists of freed small blocks, by size, up to HEAP_CACHE bytes in
** all. A block is filed by its usable size (malloc_usable_size), never by the size Lua
** says it has, so blocks from luaL_newstate's allocator (before this one was set) and
** blocks glibc made larger than asked go to the right list or back to free(). Resizes
** are plain realloc. Under AddressSanitizer nothing is kept, so it still sees every
** use after free in H. */
#define HEAP_CLASSES 16                 /* usable sizes 24, 40, ..., 264: 16k + 8 */
#define HEAP_SMALL   (16 * HEAP_CLASSES + 8)
#define HEAP_CACHE   ((size_t)256 << 10)

typedef struct host_heap {
  void *free[HEAP_CLASSES + 1];         /* by k: blocks of 16k + 8 usable bytes */
  size_t cached;                        /* bytes on the lists */
  tp_engine *e;                         /* for a plugin's warn() (host_warn) */
  char warn[512];                       /* a warning's pieces so far, cut at 511 bytes */
  size_t nwarn;
} host_heap;

/* A plugin's warn("...") goes to the engine's log as a warning from "plugin", never to
** stderr (luaL_newstate's warning function prints there once a plugin says "@on"): the
** library never prints. Control messages ("@on", "@off") mean nothing here. */
static void host_warn (void *ud, const char *msg, int tocont) {
  host_heap *hp = ud;
  if (hp->nwarn == 0 && !tocont && msg[0] == '@') return;
  size_t n = strlen(msg), room = sizeof hp->warn - 1 - hp->nwarn;
  if (n > room) n = room;
  memcpy(hp->warn + hp->nwarn, msg, n);
  hp->nwarn += n;
  if (tocont) return;
  hp->warn[hp->nwarn] = '\0';
  hp->nwarn = 0;
  tp__engine_log(hp->e, TP_LOG_WARN, "plugin", "%s", hp->warn);
}

static void *host_alloc (void *ud, void *ptr, size_t osize, size_t nsize) {
  (void)osize;  /* the type of a new object when ptr is NULL; unused otherwise here */
  host_heap *hp = ud;
  if (nsize == 0) {
    if (ptr == NULL) return NULL;
#if !defined(__SANITIZE_ADDRESS__)
    size_t u = malloc_usable_size(ptr);
    if (u >= 24 && u <= HEAP_SMALL && (u & 15) == 8 && hp->cached + u <= HEAP_CACHE) {
      *(void **)ptr = hp->free[u >> 4];
      hp->free[u >> 4] = ptr;
      hp->cached += u;
      return NULL;
    }
#endif
    free(ptr);
    return NULL;
  }
  if (ptr != NULL) return realloc(ptr, nsize);
  if (nsize > HEAP_SMALL) return malloc(nsize);
  size_t k = nsize <= 24 ? 1 : (nsize - 8 + 15) >> 4;
  void *p = hp->free[k];
  if (p != NULL) {  /* list k holds blocks of exactly 16k + 8 usable bytes */
    hp->free[k] = *(void **)p;
    hp->cached -= 16 * k + 8;
    return p;
  }
  return malloc(16 * k + 8);
}

static void host_heap_free (host_heap *hp) {
  for (size_t k = 1; k <= HEAP_CLASSES; k++)
    while (hp->free[k] != NULL) {
      void *p = hp->free[k];
      hp->free[k] = *(void **)p;
      free(p);
    }
  free(hp);
}

/* ---- opening and closing H ------------------------------------------------------ */

/* A Lua C module binds to the lua_* of the process's global scope. libtidepool.so and
** the Lua module keep their Lua private, and the program may have another Lua or none:
** there a C module would run on the wrong Lua or not load, so the host state loads none
** and require says why. Where this engine's Lua is the global one (the CLI, programs
** linked with its objects), C modules load as usual. */
static int c_modules_bind_here (void) {
  return dlsym(RTLD_DEFAULT, "lua_newstate") == (void *)lua_newstate;
}

/* package.searchers[3] when C modules cannot load: a line for require's message. */
static int no_c_searcher (lua_State *H) {
  lua_pushfstring(H, "\n\tno C module '%s': this engine's Lua is private to the tidepool "
                  "library, so Lua C modules cannot load here; plugins have luv, lpeg and "
                  "Lua modules", luaL_checkstring(H, 1));
  return 1;
}

static int open_p (lua_State *H) {
  tp_engine *e = lua_touserdata(H, 1);
  tp__host *h = lua_newuserdatauv(H, sizeof *h, 0);
  h->e = e;
  h->rt = LUA_NOREF;
  h->resumed = LUA_NOREF;
  h->nrefs = 0;
  h->npool = 0;
  h->ws = NULL;
  h->ws_max = 0;
  h->ws_told = 0;
  h->upstream = 0;
  h->resume_end_ns = 0;
  tp__host_watch_init(h);
  lua_rawsetp(H, LUA_REGISTRYINDEX, &tp__host_key);
  tp__luv_stderr = stderr;
  luaL_openlibs(H);
  lua_gc(H, LUA_GCGEN, 0, 0);
  if (!c_modules_bind_here()) {
    lua_getglobal(H, LUA_LOADLIBNAME);
    lua_getfield(H, -1, "searchers");
    lua_pushcfunction(H, no_c_searcher);
    lua_rawseti(H, -2, 3);
    lua_pushnil(H);
    lua_rawseti(H, -2, 4);  /* the all-in-one loader */
    lua_pop(H, 1);
    lua_pushnil(H);
    lua_setfield(H, -2, "loadlib");
    lua_pop(H, 1);
  }
  luv_set_loop(H, e->loop);
  luv_set_callback(H, tp__host_cb_pcall);
  luaL_requiref(H, "luv", luaopen_luv, 0);
  luaL_requiref(H, "lpeg", luaopen_lpeg, 0);
  luaL_requiref(H, "json", tp__json_open, 1);  /* also a global: plugins use json.array */
  luaL_getsubtable(H, LUA_REGISTRYINDEX, LUA_PRELOAD_TABLE);
  lua_pushcfunction(H, tp__open_fs);         /* require("tidepool.fs"): tools/fs.lua */
  lua_setfield(H, -2, "tidepool.fs");
  lua_pushcfunction(H, tp__open_proc);       /* require("tidepool.proc"): tools/proc.lua */
  lua_setfield(H, -2, "tidepool.proc");
  lua_pushlightuserdata(H, e);
  lua_pushcclosure(H, tp__kvstore_open, 1);  /* require("tidepool.kv"): tools/kv.lua */
  lua_setfield(H, -2, "tidepool.kv");
  lua_pushlightuserdata(H, e);
  lua_pushcclosure(H, tp__http_open, 1);     /* require("tidepool.http"): http.c */
  lua_setfield(H, -2, "tidepool.http");
  lua_pop(H, 1);
  lua_settop(H, 1);
  luaL_newmetatable(H, CALLBOX);
  lua_pushliteral(H, "tidepool call");
  lua_setfield(H, -2, "__metatable");
  lua_pop(H, 1);
  const tp_embedded *src = tp__embedded_find("lua/host.lua");
  if (src == NULL) return luaL_error(H, "lua/host.lua is not embedded in this build");
  if (luaL_loadbufferx(H, src->data, src->len, "=lua/host.lua", "t") != LUA_OK)
    return lua_error(H);
  static const luaL_Reg fns[] = {
    { "add_tool", add_tool }, { "emit", e_emit }, { "workspace_max", e_workspace_max },
    { "workspace", e_workspace }, { "config", e_config }, { "annotate", e_annotate },
    { "seen", e_seen }, { "span", e_span }, { "span_start", e_span_start },
    { "seen_load", e_seen_load }, { "upstream_state", e_upstream_state },
    { "tools_changed", e_tools_changed }, { "peek_id", e_peek_id }, { NULL, NULL } };
  lua_createtable(H, 0, 32);    /* E: these and host_call.c's tp__host_call_fns */
  luaL_getmetatable(H, CALLBOX);
  luaL_setfuncs(H, fns, 1);     /* upvalue 1 of each: for check_box */
  luaL_getmetatable(H, CALLBOX);
  luaL_setfuncs(H, tp__host_call_fns, 1);
  lua_pushlightuserdata(H, (void *)&tp__host_done_key);
  lua_setfield(H, -2, "DONE");
  push_mcp_versions(H);
  lua_setfield(H, -2, "mcp_versions");
  luaL_getsubtable(H, LUA_REGISTRYINDEX, LUA_PRELOAD_TABLE);
  lua_pushvalue(H, -2);
  lua_pushcclosure(H, open_upstream, 1);
  lua_setfield(H, -2, "tidepool.upstream");
  lua_pop(H, 1);
  lua_call(H, 1, 1);
  luaL_checktype(H, -1, LUA_TTABLE);
  lua_getfield(H, -1, "resumed");
  luaL_checktype(H, -1, LUA_TFUNCTION);
  h->resumed = tp__host_take_ref(H);
  h->rt = tp__host_take_ref(H);
  return 0;
}

int tp__host_open (tp_engine *e) {
  if (e->H != NULL) return TP_OK;
  host_heap *hp = calloc(1, sizeof *hp);
  lua_State *H = hp != NULL ? luaL_newstate() : NULL;
  if (H == NULL) {
    free(hp);
    return TP_ENOMEM;
  }
  lua_setallocf(H, host_alloc, hp);
  hp->e = e;
  lua_setwarnf(H, host_warn, hp);
  *(void **)lua_getextraspace(H) = NULL;  /* no pattern meter here (lua_patch.h) */
  lua_pushcfunction(H, open_p);
  lua_pushlightuserdata(H, e);
  if (tp__host_pcall(H, 1, 0) != LUA_OK) {
    tp__engine_set_error(e, "the host Lua state cannot start: %s", tp__host_error_text(H, -1));
    lua_close(H);
    host_heap_free(hp);
    /* luv may have started nothing yet; anything it did start is closed by the engine */
    return TP_ENOMEM;
  }
  e->H = H;
  e->host_state = tp__host_get(H);
  return TP_OK;
}

/* luv's data of a handle (luv/lhandle.h and luv/luv.h of lua-luv-dev 1.44; luv.h itself
** cannot be included beside this Lua's headers): the fields read here. */
typedef struct luv_ctx_head { uv_loop_t *loop; lua_State *L; } luv_ctx_head;
typedef struct luv_handle_data {
  int ref;                 /* the handle's userdata in the registry, while it is open */
  int callbacks[2];
  luv_ctx_head *ctx;
  void *extra;
  void (*extra_gc)(void *);
} luv_handle_data;

/* What luv's own close callback does, less calling the script's close callback. */
static void luv_closed (uv_handle_t *handle) {
  luv_handle_data *d = handle->data;
  if (d == NULL) return;
  lua_State *H = d->ctx->L;
  luaL_unref(H, LUA_REGISTRYINDEX, d->ref);
  luaL_unref(H, LUA_REGISTRYINDEX, d->callbacks[0]);
  luaL_unref(H, LUA_REGISTRYINDEX, d->callbacks[1]);
  if (d->extra_gc) d->extra_gc(d->extra);
  free(d);
  handle->data = NULL;
}

/* Closes from C every luv handle of H still open: luv keeps each in the registry until
** it is closed, and registry.uv_handle holds the metatables of handles. This allocates
** nothing, so it works when host.lua's shutdown could not (out of memory: a Lua call may
** need a new frame). A handle left open would be closed by luv's __gc inside lua_close,
** and its close callback would then run on a closed state. */
static void close_luv_handles (lua_State *H) {
  if (lua_getfield(H, LUA_REGISTRYINDEX, "uv_handle") != LUA_TTABLE) { lua_pop(H, 1); return; }
  int kinds = lua_gettop(H);
  lua_pushnil(H);
  while (lua_next(H, LUA_REGISTRYINDEX)) {
    if (lua_type(H, -1) == LUA_TUSERDATA && lua_getmetatable(H, -1)) {
      int is_handle = lua_rawget(H, kinds) != LUA_TNIL;
      lua_pop(H, 1);
      uv_handle_t **u = lua_touserdata(H, -1);
      if (is_handle && *u != NULL && !uv_is_closing(*u)) uv_close(*u, luv_closed);
    }
    lua_pop(H, 1);
  }
  lua_pop(H, 1);
}


void tp__host_close (tp_engine *e) {
  lua_State *H = e->H;
  if (H == NULL) return;
  assert(!tp__host_get(H)->upstream && "host.c: tp__host_upstream_stop first");
  if (tp__host_rt_call(H, "shutdown", 0, 0) != LUA_OK) lua_pop(H, 1);  /* closes luv handles */
  close_luv_handles(H);  /* those shutdown could not close */
  uv_run(e->loop, UV_RUN_NOWAIT);  /* their close callbacks, while H still exists */
  for (size_t i = 0; i < e->ntools; i++)  /* the tools outlive H, without handlers */
    if (e->tools[i]->prov->release) e->tools[i]->prov->release(e, e->tools[i]);
  tp__host *h = tp__host_get(H);
  tp__watch_disarm(&e->core.wd, &h->watch);  /* the watchdog outlives H: it lets go of h */
  while (h->npool > 0) tp__host_unbind(H, h, h->pool[--h->npool], 0);
  tp__host_drop_ref(H, &h->resumed);
  tp__host_drop_ref(H, &h->rt);
  free(h->ws);
  h->ws = NULL;
  assert(h->nrefs == 0 && "host.c: registry references leaked");
  void *hp;
  lua_getallocf(H, &hp);
  lua_close(H);
  host_heap_free(hp);
  e->H = NULL;
  e->host_state = NULL;
}

/* ---- describe and search: lua/describe.lua over the registry ------------------------ */

/* lua/describe.lua, loaded once into H and kept in the registry. */
static char describe_key;

static void push_describe (lua_State *H) {
  if (lua_rawgetp(H, LUA_REGISTRYINDEX, &describe_key) == LUA_TTABLE) return;
  lua_pop(H, 1);
  const tp_embedded *src = tp__embedded_find("lua/describe.lua");
  if (src == NULL) luaL_error(H, "lua/describe.lua is not embedded in this build");
  if (luaL_loadbufferx(H, src->data, src->len, "=lua/describe.lua", "t") != LUA_OK)
    lua_error(H);
  lua_call(H, 0, 1);
  luaL_checktype(H, -1, LUA_TTABLE);
  lua_pushvalue(H, -1);
  lua_rawsetp(H, LUA_REGISTRYINDEX, &describe_key);
}

/* Records in the table at index order the key order of every object of v, whose Lua
** copy is at index idx: order[copy] = {keys in v's order}. jansson keeps an object's
** keys in insertion order, so for a schema parsed from JSON text this is the order its
** author wrote; describe.lua shows fields in it. */
static void push_order (lua_State *H, const json_t *v, int idx, int order, int depth) {
  if (depth > 64 || lua_type(H, idx) != LUA_TTABLE) return;
  luaL_checkstack(H, 4, NULL);
  if (json_is_object(v)) {
    const char *key;
    json_t *child;
    int n = 0;
    lua_pushvalue(H, idx);
    lua_createtable(H, (int)json_object_size(v), 0);
    json_object_foreach((json_t *)v, key, child) {
      lua_pushstring(H, key);
      lua_rawseti(H, -2, ++n);
    }
    lua_rawset(H, order);
    json_object_foreach((json_t *)v, key, child) {
      if (!json_is_object(child) && !json_is_array(child)) continue;
      lua_pushstring(H, key);
      lua_rawget(H, idx);
      push_order(H, child, lua_gettop(H), order, depth + 1);
      lua_pop(H, 1);
    }
  }
  else if (json_is_array(v)) {
    size_t i;
    json_t *child;
    json_array_foreach(v, i, child) {
      if (!json_is_object(child) && !json_is_array(child)) continue;
      lua_rawgeti(H, idx, (lua_Integer)i + 1);
      push_order(H, child, lua_gettop(H), order, depth + 1);
      lua_pop(H, 1);
    }
  }
}

/* Pushes the tools as describe.lua reads them: {name, description, input, output,
** order}, one tool when only is not NULL; without the schemas for a search, which reads
** names and descriptions only. order (the key order of the schemas' objects) is given
** for tools whose schemas came as JSON text; a Lua plugin's tables have no order. */
/* Tools described beside the engine's (tp__host_describe_extra: caller tools), for the
** describe_call under way on this thread. */
static _Thread_local const tp_tool *const *extra_tools;
static _Thread_local size_t nextra_tools;

static void push_tool_list (lua_State *H, const tp_engine *e, const char *only,
                            int schemas, const tp_tool *given) {
  /* one tool: found by name, not by a walk over them all (annotating each of 10,000
  ** upstream tools would be quadratic) */
  const tp_tool *one = only ? tp__tool_find(e, only) : NULL;
  if (one && strcmp(one->name, only) != 0) one = NULL;  /* an alias: not this tool's name */
  if (only == NULL && given != NULL) { one = given; only = given->name; }
  size_t from = 0, to = only ? 0 : e->ntools + nextra_tools;
  const tp_tool *const *list = (const tp_tool *const *)e->tools;
  if (one) { list = &one; to = 1; }
  lua_createtable(H, (int)(to - from), 0);
  int n = 0;
  for (size_t i = from; i < to; i++) {
    const tp_tool *t = one || i < e->ntools ? list[i] : extra_tools[i - e->ntools];
    if (!only && !(tp__tool_callers(e, t) & TP_CALLER_SCRIPT)) continue;  /* direct only */
    lua_createtable(H, 0, 4);
    lua_pushstring(H, t->name);
    lua_setfield(H, -2, "name");
    lua_pushstring(H, t->description);
    lua_setfield(H, -2, "description");
    if (!schemas) { lua_rawseti(H, -2, ++n); continue; }
    lua_pushstring(H, t->prov->kind);  /* "upstream": an MCP server's tool */
    lua_setfield(H, -2, "kind");
    int tool = lua_gettop(H), order = 0;
    if (t->origin == NULL) {
      lua_newtable(H);
      order = lua_gettop(H);
    }
    tp__json_push(H, t->input, 0);
    if (order) push_order(H, t->input, lua_gettop(H), order, 0);
    lua_setfield(H, tool, "input");
    if (t->output) {
      tp__json_push(H, t->output, 0);
      if (order) push_order(H, t->output, lua_gettop(H), order, 0);
      lua_setfield(H, tool, "output");
    }
    if (order) lua_setfield(H, tool, "order");
    lua_rawseti(H, -2, ++n);
  }
}

/* Replaces the value on top of H by its JSON text (an empty table becomes []). */
static int push_text_p (lua_State *H) {
  lua_pushstring(H, lua_touserdata(H, 1));
  return 1;
}

static void to_json_text (lua_State *H) {
  tp_json_err jerr;
  json_t *v = tp__json_from_lua(H, -1, 0, 0, &jerr);
  if (v == NULL) luaL_error(H, "describe: %s", jerr.message);
  if (json_is_object(v) && json_object_size(v) == 0) {
    json_decref(v);
    v = json_array();
  }
  char *text = tp__json_dumps(v);
  json_decref(v);
  if (text == NULL) luaL_error(H, "not enough memory");
  lua_pop(H, 1);
  /* H has no cap: only the host itself could run out here, and then text is freed too */
  lua_pushcfunction(H, push_text_p);
  lua_pushlightuserdata(H, text);
  int st = lua_pcall(H, 1, 1, 0);
  free(text);
  if (st != LUA_OK) lua_error(H);
}

/* The mode of describe.lua a format names: its last "+"-separated word when that is one
** of describe.lua's modes, "full" otherwise ("lua", "json", "json+session"). */
static const char *format_mode (const char *what) {
  static const char *const modes[] = { "compact", "auto", "fit", "grouped", "counts", NULL };
  const char *last = strrchr(what, '+');
  last = last ? last + 1 : what;
  for (int i = 0; modes[i]; i++) if (strcmp(last, modes[i]) == 0) return modes[i];
  return "full";
}

/* describe_p(e, what, arg): what "lua" (preamble and the tools in full), a mode of
** describe.lua ("compact", "auto", "fit", "grouped", "counts"), "tool" (one tool's API,
** arg names it), "json" or "json+MODE" (the run_lua tool; arg non-nil adds the session
** argument), or "search" (arg is the query). Returns a string. */
static int describe_p (lua_State *H) {
  const tp_engine *e = lua_touserdata(H, 1);
  const char *what = lua_touserdata(H, 2);  /* C strings: pushing them could raise */
  const char *arg = lua_touserdata(H, 3);
  push_describe(H);
  int M = lua_gettop(H);
  if (strcmp(what, "search") == 0) {
    lua_getfield(H, M, "search");
    push_tool_list(H, e, NULL, 0, NULL);
    lua_pushstring(H, arg ? arg : "");
    lua_call(H, 2, 1);
    to_json_text(H);
    return 1;
  }
  const char *mode = format_mode(what);
  if (strncmp(what, "json", 4) == 0) {
    lua_getfield(H, M, "run_lua_tool");
    push_tool_list(H, e, NULL, 1, NULL);
    lua_createtable(H, 0, 2);
    lua_pushboolean(H, arg != NULL);
    lua_setfield(H, -2, "session");
    lua_pushstring(H, mode);
    lua_setfield(H, -2, "mode");
    lua_call(H, 2, 1);
    to_json_text(H);
    return 1;
  }
  if (strcmp(what, "tool*") == 0) {  /* one tool outside the registry: arg is it */
    lua_getfield(H, M, "lua_api");
    push_tool_list(H, e, NULL, 1, (const tp_tool *)(const void *)arg);
    lua_call(H, 1, 1);
    return 1;
  }
  if (strcmp(what, "tool") == 0) {  /* one tool */
    lua_getfield(H, M, "lua_api");
    push_tool_list(H, e, arg, 1, NULL);
    lua_call(H, 1, 1);
    return 1;
  }
  lua_getfield(H, M, "describe");
  push_tool_list(H, e, NULL, 1, NULL);
  lua_pushstring(H, mode);
  lua_call(H, 2, 1);
  return 1;
}

/* The work of one tool's annotations made at its registration is capped: a schema of
** megabytes would otherwise hold every engine that loads it for seconds. Past the cap
** the tool gets a short text instead (registry.c). */
#define TOOL_API_BUDGET 5000000    /* instructions of describe.lua (about 25 ms here) */
#define TOOL_API_HOOK 10000
static __thread uint64_t api_left;

static void api_hook (lua_State *H, lua_Debug *ar) {
  (void)ar;
  if (api_left <= TOOL_API_HOOK) luaL_error(H, "the tool's schema is too large to annotate");
  api_left -= TOOL_API_HOOK;
}

/* Runs describe_p in H. report: a failure is the engine's error (tp_engine_error);
** else it is left out (a tool's text made at its registration, under TOOL_API_BUDGET).
** NULL on failure. Scripts never come here: their discovery reads the texts made at
** registration (registry.c). */
static char *describe_call (tp_engine *e, const char *what, const char *arg, int report) {
  if (tp__host_open(e) != TP_OK) return NULL;
  lua_State *H = e->H;
  int top = lua_gettop(H);
  lua_Hook old_hook = lua_gethook(H);
  int old_mask = lua_gethookmask(H), old_count = lua_gethookcount(H);
  if (!report) {
    api_left = TOOL_API_BUDGET;
    lua_sethook(H, api_hook, LUA_MASKCOUNT, TOOL_API_HOOK);
  }
  lua_pushcfunction(H, describe_p);
  lua_pushlightuserdata(H, e);
  lua_pushlightuserdata(H, (void *)what);  /* nothing that allocates outside tp__host_pcall */
  lua_pushlightuserdata(H, (void *)arg);
  char *out = NULL;
  if (tp__host_pcall(H, 3, 1) == LUA_OK) {
    size_t len;
    const char *s = lua_tolstring(H, -1, &len);
    if (s && (out = malloc(len + 1)) != NULL) memcpy(out, s, len + 1);
  }
  else if (report) tp__engine_set_error(e, "describe: %s", tp__host_error_text(H, -1));
  if (!report) lua_sethook(H, old_hook, old_mask, old_count);
  lua_settop(H, top);
  return out;
}

char *tp__host_describe_now (tp_engine *e, const char *format, const char *arg,
                             const tp_tool *const *extra, size_t nextra) {
  extra_tools = extra;
  nextra_tools = nextra;
  char *text = describe_call(e, format, arg, 1);
  extra_tools = NULL;
  nextra_tools = 0;
  return text;
}

char *tp__host_tool_api_of (tp_engine *e, const tp_tool *t) {
  char *text = describe_call(e, "tool*", (const char *)(const void *)t, 0);
  uv_update_time(e->loop);  /* as tp__host_tool_api */
  return text;
}

char *tp__host_tool_api (tp_engine *e, const char *tool) {
  char *text = describe_call(e, "tool", tool, 0);
  /* the loop's cached time is as old as this work (the host state may have just been
  ** opened): a handler's uv timer started from it later would fire that much early */
  uv_update_time(e->loop);
  return text;
}

/* ---- what tools.describe tells a script --------------------------------------------
** Each tool's annotations are made once, when it is registered (after a C tool's
** tp_engine_add_tool, after a plugin directory's load), by describe.lua in the host
** state under a cap on its work; so a script's tools.describe reads data and runs no
** Lua. A tool whose annotations cannot be made (past the cap, or the host state out of
** memory) gets a short text saying so, made here. (Here, in host.c, above registry.c:
** making them runs describe.lua in the host state.)
*/
static char *short_api (const tp_tool *t) {
  const char *d = t->description;
  size_t dl = strcspn(d, "\r\n");
  if (dl > 200) dl = 200;
  size_t n = strlen(t->name) + dl + 160;
  char *s = malloc(n);
  if (s == NULL) return NULL;
  snprintf(s, n, "%s%.*s%s---@param args table (its schema is too large to annotate)\n"
           "---@return any\nfunction tools.%s(args) end\n", dl ? "---" : "", (int)dl, d,
           dl ? "\n" : "", t->name);
  return s;
}

void tp__tools_annotate (tp_engine *e) {
  for (size_t i = 0; i < e->ntools; i++) {
    tp_tool *t = e->tools[i];
    if (t->lua_api != NULL || t->api_tried) continue;
    t->api_tried = 1;
    t->lua_api = tp__host_tool_api(e, t->name);
    if (t->lua_api == NULL) t->lua_api = short_api(t);
  }
}

void tp__tool_annotate_one (tp_engine *e, tp_tool *t) {
  if (t->lua_api != NULL || t->api_tried) return;
  t->api_tried = 1;
  t->lua_api = tp__host_tool_api_of(e, t);
  if (t->lua_api == NULL) t->lua_api = short_api(t);
}
