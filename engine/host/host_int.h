/*
** host_int.h: what the files of the host Lua state share, from the bottom up:
** host_state.c (H's record, references, pcall, the luv callback runner), host_call.c (a
** call's box, E's functions on it, the timed resume), host_handler.c (a Lua handler's
** call, for the two providers below), provider_lua.c and provider_upstream.c (the Lua
** plugin and upstream tools' providers), host.c (opens and closes H, builds E, makes the
** annotations), host_load.c (plugin files, the upstream MCP servers). Each calls only the
** ones before it. Not for other files.
*/
#ifndef tidepool_host_int_h
#define tidepool_host_int_h

#include <stdint.h>
#include <jansson.h>

#include "lua.h"
#include "lauxlib.h"
#include "tidepool.h"
#include "registry.h"
#include "watchdog.h"

#define CALLBOX "tidepool.callbox"
#define TP_WORKSPACE_MAX_DEFAULT ((uint64_t)1 << 30)

/* A call's record as C sees it (see the header); its user value 1 is the record. */
typedef struct tp__callbox {
  tp_call *c;          /* the call, while bound; NULL once completed or cancelled */
  lua_State *co;       /* the record's coroutine */
  int ref;             /* the box in the registry, while bound or pooled; else LUA_NOREF */
  int claimed;         /* something of the call may outlive it (E.claim): not reused */
  size_t held;         /* what the call holds of its run's host budget (E.charge, E.decode):
                       ** refunded when the box lets go of the call */
} tp__callbox;

/* Idle records, at most POOL_MAX of them (the most calls seen at once, bounded). */
#define POOL_MAX 64

/* What host.c keeps about H, in a userdata under &host_key in H's registry (and at
** e->host_state). H's extra space must stay NULL: the patched pattern matcher reads it
** (lua_patch.h). */
typedef struct tp__host {
  tp_engine *e;
  int rt;      /* host.lua's table */
  int resumed; /* host.lua's M.resumed */
  int nrefs;   /* registry references taken (tp__host_take_ref) and not yet released */
  char *ws;    /* the workspace host.lua was last told (rt.set_workspace), or NULL */
  uint64_t ws_max;
  int ws_told; /* host.lua was told at least once */
  int npool;
  tp__callbox *pool[POOL_MAX];
  int upstream;  /* lua/upstream.lua was started (tp__host_upstream) */
  uint64_t resume_end_ns;  /* when the last resume of a handler (tp__host_resume_timed)
                           ** gave the thread back: a call that returned at once ends then */
  /* The time-limit watch of handlers' resumes, armed at the first and kept: a resume
  ** publishes its deadline in resume_deadline (the innermost one; 0: none) and takes the
  ** watchdog's lock only when the watch would wake after it (host_call.c). */
  tp_watch watch;
  _Atomic uint64_t resume_deadline;
  _Atomic(pthread_t) resume_thread;
} tp__host;

/* The key a record's coroutine must be resumed with (host_handler.c), and what it yields
** when its handler returned (E.DONE): light userdata no Lua code can make. */
extern const char tp__host_run_key, tp__host_done_key;
/* A handler's arguments as host_dispatch hands them to its coroutine: the codec's text
** (with its containers' sizes) when the call has no tree, else the tree. */
typedef struct tp__host_args {
  const json_t *tree;
  const char *text;
  size_t len;
  const int *counts;
} tp__host_args;

/* host_state.c: H's record lives in its registry under &tp__host_key (host.c sets it);
** drop_ref unrefs *ref (counted in nrefs) and sets it to LUA_NOREF; cb_pcall is the luv
** callback runner host.c gives luv_set_callback. */
extern const char tp__host_key;
void tp__host_drop_ref(lua_State *H, int *ref);
int  tp__host_cb_pcall(lua_State *L, int nargs, int nresults, int flags);
tp__host *tp__host_get(lua_State *H);
/* luaL_ref of the value on top, counted (a debug build asserts none is left at close). */
int  tp__host_take_ref(lua_State *H);
/* lua_pcall with a message handler; the error (if any) is left on top, as a string when
** possible. */
int  tp__host_pcall(lua_State *H, int nargs, int nres);
/* The message of the error object at idx (a string, or a table's message field). */
const char *tp__host_error_text(lua_State *H, int idx);
/* Calls host.lua's rt[name] with the nargs values on top; leaves nres results. */
int  tp__host_rt_call(lua_State *H, const char *name, int nargs, int nres);

/* host_call.c */
/* E's functions on a call's box (complete, resume, new_box, charge, decode, body, ...):
** host.c sets them into E, each with CALLBOX's metatable as its upvalue 1. */
extern const luaL_Reg tp__host_call_fns[];
/* Sets up h's resume watch (h->watch), not armed yet: when H opens. */
void tp__host_watch_init(tp__host *h);
/* Lets go of b's call: the box is emptied and c->host_ref cleared. keep: the box's
** reference stays (the record goes back to the pool); else it is dropped, and the record
** lives on only as long as Lua code can reach it. */
void tp__host_unbind(lua_State *H, tp__host *h, tp__callbox *b, int keep);
/* The tree of call c's result from the handler's value at idx of L: converted under the
** run's host budget and its tool_bytes, shaped by the tool's output schema. NULL when it
** cannot be sent as JSON; then msg says why. Raises nothing. *cost: what the tree is
** charged to the run's host budget, or NOT_CHARGED (completing it charges it). */
json_t *tp__host_result_tree(tp_call *c, lua_State *L, int idx, char *msg, size_t msglen,
                             size_t *cost);
#define NOT_CHARGED SIZE_MAX
/* lua_resume of call c's handler coroutine co (nargs values pushed on it), timed and
** stopped at c's deadline. *held: the nanoseconds it held the thread; *late: c's deadline
** had passed when it stopped. c may be NULL (a call that is over). */
int  tp__host_resume_timed(lua_State *from, tp_engine *e, tp_call *c, lua_State *co,
                           int nargs, int *nres, uint64_t *held, int *late);
/* After a resume that ran out of memory: the call fails here (host.lua may not manage). */
void tp__host_fail_errmem(lua_State *H, tp__host *h, tp__callbox *b);
/* Moves the first two of the nres values a resume left on co (or its error object, st
** an error) to L as ok, value, result, and pops the rest. L has room for 3 values. */
void tp__host_move_outcome(lua_State *co, lua_State *L, int st, int nres);

/* host_handler.c: a Lua tool's pdata (provider.h): its handler in H's registry. An
** upstream tool's pdata begins with one. The four entries the Lua and the upstream
** providers' tables share. */
typedef struct tp__lua_tool {
  int ref;             /* the handler, or LUA_NOREF once released */
} tp__lua_tool;
void tp__lua_dispatch(tp_engine *e, const tp_tool *t, tp_call *c);
void tp__lua_cancel(tp_engine *e, const tp_tool *t, tp_call *c);
void tp__lua_release(tp_engine *e, tp_tool *t);
const char *tp__lua_describe(const tp_tool *t);

/* provider_lua.c: the pdata of a Lua plugin tool whose handler is ref (NULL when out of
** memory). */
void *tp__lua_tool_new(int ref);

/* provider_upstream.c: the pdata of an upstream tool whose handler is ref (NULL when out
** of memory), and another name for it (any characters, at most 128 bytes, at most 8):
** TP_OK, TP_EINVAL (no such upstream tool, a bad alias, or one that names another tool)
** or TP_ENOMEM. */
void *tp__upstream_tool_new(int ref);
int  tp__upstream_set_alias(tp_engine *e, const char *name, const char *alias);

/* host.c: describe.lua's text of format over e's tools and nextra more (caller tools), as
** tp__host_describe_extra (host.h) gives it, without starting the upstream servers. */
char *tp__host_describe_now(tp_engine *e, const char *format, const char *arg,
                            const tp_tool *const *extra, size_t nextra);

#endif
