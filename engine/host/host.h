/*
** host.h: the engine's host Lua state and what runs in it (host.c, fs.c, kvstore.c).
*/
#ifndef tidepool_host_h
#define tidepool_host_h

#include "lua.h"
#include "tidepool.h"
#include "sandbox.h"

int  tp__host_open(tp_engine *e);
void tp__host_close(tp_engine *e);
/* Loads the plugin files of dir (tp_engine_load_tools). */
int  tp__host_load_dir(tp_engine *e, const char *dir);
/* Discovery: describe.lua over the registry. sb is a run's sandbox (its verdict stops
** the work), or NULL for the engine's own callers. */
char *tp__host_describe(tp_engine *e, tp_sandbox *sb, const char *format, const char *tool);
char *tp__host_search(tp_engine *e, tp_sandbox *sb, const char *query);

/* kvstore.c: the store of the kv.* tools, shareable between engines (and threads). */
typedef struct tp_kvstore tp_kvstore;
tp_kvstore *tp__kvstore_new(void);            /* one reference; NULL when out of memory */
void tp__kvstore_ref(tp_kvstore *kv);
void tp__kvstore_unref(tp_kvstore *kv);       /* frees it with the last reference */
/* require("tidepool.kv") in the host state; upvalue 1: the shared store (light
** userdata) or nil for a store of the state's own. */
int tp__kvstore_open(lua_State *L);

/* fs.c: pushes the table of workspace-confined file functions (host state only). */
int tp__open_fs(lua_State *L);

#endif
