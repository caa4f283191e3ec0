/*
** provider.h: a source of tools is a method table. The registry holds each tool with its
** provider; a call reaches its handler only through the table, so a new source of tools
** (upstream MCP servers, HTTP, a process backend) is a new file that fills one in.
** Providers here: C handlers (provider_c.c: tp_engine_add_tool), calls the embedding
** program completes (provider_c.c: a tool without a handler), Lua plugins (host.c), the
** tools of upstream MCP servers (host.c with lua/upstream.lua), caller tools declared on
** a run or a session (provider_caller.c).
*/
#ifndef tidepool_provider_h
#define tidepool_provider_h

#include "tidepool.h"

struct tp_tool;

typedef struct tp__provider {
  const char *kind;        /* "c", "external", "lua", "upstream": for messages */
  unsigned flags;          /* TP__TOOL_* (core/calls.h) its tools get */
  int reloadable;          /* its tools go with tp__engine_drop_plugin_tools */
  /* Starts call c of tool t; c is the handler's until it completes or fails it
  ** (tp_call_complete, tp_call_fail), maybe before this returns. NULL: never called
  ** (TP__TOOL_EXTERNAL). */
  void (*dispatch)(tp_engine *e, const struct tp_tool *t, tp_call *c);
  /* c was cut short (timeout, the run's end) while its handler owns it: stop its work;
  ** the handler's ownership ends with its completion, now or later. NULL: the handler
  ** polls tp_call_cancelled. */
  void (*cancel)(tp_engine *e, const struct tp_tool *t, tp_call *c);
  /* t leaves the registry: let go of what the provider keeps for it. NULL: nothing. */
  void (*release)(tp_engine *e, struct tp_tool *t);
  /* Where t comes from, for messages: "tools/x.lua:12", "a C handler". */
  const char *(*describe)(const struct tp_tool *t);
} tp__provider;

extern const tp__provider tp__c_provider, tp__external_provider, tp__lua_provider,
  tp__upstream_provider, tp__caller_provider, tp__caller_paused_provider;

#endif
