/*
** admit.c: what the host does when the core tells it something (tp__engine_hooks):
** a script's new call is resolved in the registry, passes the policy, has its arguments
** checked and is admitted; an admitted call goes to its tool's provider; discovery is
** answered from the registry.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "registry.h"
#include "host.h"

/* The policy's reason, as much of it as a message keeps. */
#define REASON_MAX 512

/*
** A new call of a script (tp__host_hooks.call): an unknown name fails with tool.unknown
** and the nearest names; arguments that could not be read fail; then the policy, if the
** engine has one, allows, denies (tool.denied, with its reason) or holds the call
** (tp_call_decide ends the hold); an allowed call has its arguments checked against the
** tool's input schema and is admitted. Without a policy this costs one pointer test.
*/
static void on_call (void *ud, tp_call *c) {
  tp_engine *e = ud;
  const tp_tool *t = tp__tool_find(e, c->name);
  if (tp__call_bind(c, t ? &t->face : NULL) != 0) return;  /* limit.tool_calls */
  if (t == NULL) {
    char near[400];
    tp__tool_suggest(e, c->name, near, sizeof near);
    if (near[0])
      tp__call_failf(c, "tool.unknown", "there is no tool tools.%s; did you mean %s? "
                     "(tools.list() lists them all)", c->name, near);
    else
      tp__call_failf(c, "tool.unknown", "there is no tool tools.%s (tools.list() lists "
                     "the tools there are)", c->name);
    return;
  }
  if (c->args == NULL) {
    tp__call_failf(c, "tool.invalid_input", "tools.%s: the arguments could not be read",
                   c->name);
    return;
  }
  if (e->policy != NULL) {
    char reason[REASON_MAX];
    reason[0] = '\0';
    int v = e->policy(c, e->policy_ud, reason, sizeof reason);
    reason[sizeof reason - 1] = '\0';
    if (v == TP_POLICY_HOLD) { tp__call_hold(c); return; }
    if (v != TP_POLICY_ALLOW) {  /* a verdict the policy should not give counts as a no */
      tp__call_deny(c, reason);
      return;
    }
  }
  tp__call_check_admit(c);
}

static void on_dispatch (void *ud, tp_call *c) {
  const tp_tool *t = (const tp_tool *)c->tool;
  t->prov->dispatch(ud, t, c);
}

static void on_cancel (void *ud, tp_call *c) {
  const tp_tool *t = (const tp_tool *)c->tool;
  if (c->held || t == NULL || t->prov->cancel == NULL) return;  /* a hold is decided later */
  t->prov->cancel(ud, t, c);
}

static size_t tool_count (void *ud) { return ((tp_engine *)ud)->ntools; }

static const char *tool_name (void *ud, size_t i) { return ((tp_engine *)ud)->tools[i]->name; }

/* Discovery from a script reads what registration made: no Lua runs for it. */
static char *describe (void *ud, tp_sandbox *sb, const char *tool, int *known) {
  (void)sb;
  const tp_tool *t = tp__tool_find(ud, tool);
  *known = t != NULL;
  return t != NULL && t->lua_api != NULL ? strdup(t->lua_api) : NULL;
}

static char *search (void *ud, tp_sandbox *sb, const char *query) {
  (void)sb;
  return tp__tool_search(ud, query);
}

const tp__host_hooks tp__engine_hooks = {
  on_call, on_dispatch, on_cancel, tp__driver_wake, tp__driver_run_gone,
  tool_count, tool_name, describe, search
};
