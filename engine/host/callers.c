/*
** callers.c: who may call a tool, a script or the model directly (the config's
** "tool_settings": {"<glob>": {"callers": ["script", "direct"]}}), as Anthropic's
** allowed_callers and OpenAI's caller setting say it. Every entry whose glob matches a
** tool applies, so a caller must be in each of them; a tool no entry matches is open to
** both. A run is a script's unless tp_run_set_caller made it a direct call (tidepool mcp
** --expose-tools runs the model's call of an exposed tool as a one-line script).
** Without tool_settings a call costs one lookup in the config object.
*/
#include <string.h>

#include <jansson.h>

#include "engine.h"
#include "registry.h"
#include "policy.h"

#define BOTH (TP_CALLER_SCRIPT | TP_CALLER_DIRECT)

static int caller_bit (const char *name) {
  if (name && strcmp(name, "script") == 0) return TP_CALLER_SCRIPT;
  if (name && strcmp(name, "direct") == 0) return TP_CALLER_DIRECT;
  return 0;
}

int tp__tool_callers (const tp_engine *e, const tp_tool *t) {
  const json_t *set = tp__config_section(e, "tool_settings");
  if (!json_is_object(set) || t == NULL) return BOTH;
  int mask = BOTH;
  const char *glob;
  const json_t *v;
  json_object_foreach((json_t *)set, glob, v) {
    const json_t *list = json_object_get(v, "callers");
    if (!json_is_array(list) || !tp__glob_match(glob, t->name)) continue;
    int allowed = 0;
    size_t i;
    const json_t *one;
    json_array_foreach(list, i, one) allowed |= caller_bit(json_string_value(one));
    mask &= allowed;
  }
  return mask;
}

int tp__callers_admit (tp_engine *e, tp_call *c, const tp_tool *t) {
  if (tp__config_section(e, "tool_settings") == NULL) return 1;
  const tp__drv_run *d = c->run ? c->run->host_data : NULL;
  int direct = d != NULL && d->direct;
  int mask = tp__tool_callers(e, t);
  if (mask & (direct ? TP_CALLER_DIRECT : TP_CALLER_SCRIPT)) return 1;
  if (direct && (mask & TP_CALLER_SCRIPT))
    tp__call_failf(c, "tool.denied", "tools.%s may only be called from a script, not "
                   "directly (the config's tool_settings give it callers [\"script\"]): "
                   "call tools.%s{...} in a run_lua script", t->name, t->name);
  else if (!direct && (mask & TP_CALLER_DIRECT))
    tp__call_failf(c, "tool.denied", "tools.%s may only be called directly, not from a "
                   "script (the config's tool_settings give it callers [\"direct\"]): call "
                   "it as a tool of its own, outside the script, and pass its result to the "
                   "script if the script needs it", t->name);
  else
    tp__call_failf(c, "tool.denied", "tools.%s may not be called at all: the config's "
                   "tool_settings leave it no callers", t->name);
  return 0;
}

int tp_run_set_caller (tp_run *r, int caller) {
  if (r == NULL || (caller != TP_CALLER_SCRIPT && caller != TP_CALLER_DIRECT))
    return TP_EINVAL;
  tp__drv_run *d = tp__driver_of(r);
  if (d == NULL) return TP_ENOMEM;
  d->direct = caller == TP_CALLER_DIRECT;
  return TP_OK;
}

int tp_engine_tool_callers (const tp_engine *e, size_t i) {
  if (e == NULL || i >= e->ntools) return 0;
  return tp__tool_callers(e, e->tools[i]);
}
