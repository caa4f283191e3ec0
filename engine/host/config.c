/*
** config.c: tp_engine_configure. The config is one JSON object of sections; the engine
** keeps it, and each source of tools reads its own section (tp__config_section in C, the
** plugin loader's load_opts.config in Lua: lua/host.lua).
*/
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "engine.h"
#include "policy.h"

int tp_engine_configure (tp_engine *e, const char *json, size_t len) {
  if (e == NULL || json == NULL) return TP_EINVAL;
  char why[256];
  json_t *v = tp_json_parse(json, len, why, sizeof why);
  if (v == NULL) {
    tp__engine_set_error(e, "config: %s", why);
    return strstr(why, "memory") ? TP_ENOMEM : TP_EINVAL;
  }
  if (!json_is_object(v)) {
    json_decref(v);
    tp__engine_set_error(e, "config: expected a JSON object of sections at the top");
    return TP_EINVAL;
  }
  int rc = tp__policy_load(e, json_object_get(v, "policy"));
  if (rc != TP_OK) {  /* the error says which rule, field and column */
    json_decref(v);
    return rc;
  }
  json_decref(e->config);
  e->config = v;
  return TP_OK;
}

const json_t *tp__config_section (const tp_engine *e, const char *name) {
  return e->config ? json_object_get(e->config, name) : NULL;
}

void tp__config_free (tp_engine *e) {
  json_decref(e->config);
  e->config = NULL;
}
