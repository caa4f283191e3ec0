/*
** host.h: the engine's host Lua state and what runs in it (host.c, host_load.c, fs.c,
** kvstore.c, proc.c, http.c).
*/
#ifndef tidepool_host_h
#define tidepool_host_h

#include "lua.h"
#include "tidepool.h"

/* host.c: opens e's host state (once; TP_OK when it is open) and closes it, after
** tp__host_upstream_stop (tp_engine_destroy). */
int  tp__host_open(tp_engine *e);
void tp__host_close(tp_engine *e);
/* handles.c. Counts the handles of e's loop that are neither closing nor the engine's
** own: what a program or a plugin left open, which tp_engine_destroy then closes.
** Call it once every run is destroyed (their calls' handles are closing then) and
** before the host state is closed. Returns how many. */
size_t tp__engine_count_open_handles(tp_engine *e);
/* The number counted over the process's life, and through *what (may be NULL) the types
** of the last engine's ("timer (active), ..."); for the C tests (spec/c/tp_test.h). */
size_t tp__engine_open_handles(const char **what);
/* host_load.c. Loads the plugin files of dir (tp_engine_load_tools), telling problem
** (may be NULL) each problem as it is met. */
int  tp__host_load_dir(tp_engine *e, const char *dir, void (*problem)(const char *, void *),
                       void *ud);
/* Starts the upstream MCP servers of e's config (mcpServers) once, and waits until each
** has listed its tools (registered as tools.<server>.<tool>) or failed; problem (may be
** NULL: stderr) is told each server or tool refused. Runs the engine's loop: never from
** one of its callbacks. TP_OK when there is nothing to start. */
int  tp__host_upstream(tp_engine *e, void (*problem)(const char *, void *), void *ud);
/* Whether every tool e will have is registered: no mcpServers, or they were started
** (tp__host_upstream). The pre-run check calls a name unknown only then. */
int  tp__host_tools_settled(const tp_engine *e);
/* Stops them: stdin closed, then SIGTERM, then SIGKILL; runs the loop until they are
** gone (tp_engine_destroy, before the handles are counted). */
void tp__host_upstream_stop(tp_engine *e);
/* Discovery: describe.lua over the registry, for the engine's callers (never for a
** script), once the upstream servers were started (their tools are described too).
** format "lua" or "compact": the preamble and every tool in full or one line each;
** "json" or "json+compact": the run_lua tool (arg non-NULL adds the session argument).
** NULL on failure (tp_engine_error). */
struct tp_tool;
char *tp__host_describe(tp_engine *e, const char *format, const char *arg);
/* tp__host_describe over the engine's tools and nextra more (caller tools). */
char *tp__host_describe_extra(tp_engine *e, const char *format, const char *arg,
                              const struct tp_tool *const *extra, size_t nextra);
/* host.c. Tool's annotations (LuaCATS), made when it is registered; NULL on failure. */
char *tp__host_tool_api(tp_engine *e, const char *tool);
/* The same for a tool outside the registry (a run's caller tool). */
char *tp__host_tool_api_of(tp_engine *e, const struct tp_tool *t);
/* Asks e's state store for the shape of tool name's last result that an engine kept
** there (E.seen: another worker, another process with the same --state, before a
** restart), unless the tool has one of its own by then. It arrives at once from a memory
** or SQLite store, later from Redis; a store that fails loses only the hint. */
void tp__host_seen_load(tp_engine *e, const char *name);

/* kvstore.c: require("tidepool.kv") in the host state (upvalue 1: the engine, light
** userdata): the kv.* tools' way to the engine's state store (store.h). */
int tp__kvstore_open(lua_State *L);

/* http.c: require("tidepool.http") in the host state (upvalue 1: the engine, light
** userdata); tp__http_close cancels every request and closes the multi handle and its
** loop handles (tp_engine_destroy, before the open handles are counted). */
int  tp__http_open(lua_State *L);
void tp__http_close(tp_engine *e);
/* host_state.c: calls the function under nargs arguments on top of H (the host state's main
** thread) as luv's callbacks are called: an error goes to the call that owns the
** function (ctx), else to stderr. Pops them; returns the Lua status. */
int  tp__host_callback(lua_State *H, int nargs);

/* fs.c: pushes the table of workspace-confined file functions (host state only). */
int tp__open_fs(lua_State *L);

/* proc.c: pushes the table of helpers of the proc.run tool (host state only). */
int tp__open_proc(lua_State *L);

/* Makes t's annotations (t outside the registry: a caller tool). host.c. */
void tp__tool_annotate_one(tp_engine *e, struct tp_tool *t);
/* Makes the annotations of the tools that have none yet (host.c: describe.lua in H). */
void tp__tools_annotate(tp_engine *e);

#endif
