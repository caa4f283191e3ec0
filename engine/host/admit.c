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
#include "policy.h"
#include "schema.h"
#include "trace.h"

/* The policy's reason, as much of it as a message keeps. */
#define REASON_MAX 512

/* The call whose arguments are shaped (tp__schema_empty_arrays): its empty objects that
** were JSON objects (a table decoded from {}) stay objects. */
static int kept_object (const json_t *v, void *ud) {
  const tp_call *c = ud;
  for (int i = 0; i < c->nkept_objects; i++)
    if (c->kept_objects[i] == v) return 1;
  return 0;
}

/*
** A new call of a script (tp__host_hooks.call): an unknown name fails with tool.unknown
** and the nearest names; arguments that could not be read fail; then the policy, if the
** engine has one, allows, denies (tool.denied, with its reason) or holds the call
** (tp_call_decide ends the hold); an allowed call has its arguments checked against the
** tool's input schema and is admitted. The config's policy (policy.c) decides first, then
** the embedding program's. Without a policy this costs two pointer tests.
*/
static void on_call (void *ud, tp_call *c) {
  tp_engine *e = ud;
  if (e->audit_on && c->run && c->run->traced) tp__journal_call(e, c, "call");
  const tp_tool *t = tp__tool_find_for(e, c->run, c->name);
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
  if (c->args == NULL && !c->args_fast) {
    tp__call_failf(c, "tool.invalid_input", "tools.%s: the arguments could not be read",
                   c->name);
    return;
  }
  if (!tp__callers_admit(e, c, t)) return;  /* tool_settings: a script, or directly */
  if (c->empty_objects && t->input != NULL) {  /* before the policy sees the arguments
                                               ** and their text is made */
    json_t *rep = tp__schema_empty_arrays(c->args, t->input, kept_object, c);
    if (rep != NULL) json_decref(rep);  /* the arguments are an object: stay one */
    c->args_sha256[0] = '\0';  /* the arguments may have changed: hash them again */
  }
  if (e->pol != NULL) {
    uint64_t t0 = c->run && c->run->traced ? tp__now_ns() : 0;
    int go = tp__policy_decide(e, c, (tp_tool *)t);
    if (t0) {  /* a span for each decision of a policy the config has */
      const char *effect;
      int rule = tp__policy_last(e, &effect);
      if (rule != -2 && (effect != NULL || go)) {
        tp__trace_policy(e, c, t0, effect ? effect : "allow", rule);
        if (e->metrics) tp__metrics_policy(e, effect ? effect : "allow");
      }
    }
    if (c->held && e->audit_on) tp__journal_call(e, c, "held");
    if (!go) return;
  }
  tp__admit_after_policy(e, c);
}

/* What follows the config's policy: the embedding program's, then the schema check. */
void tp__admit_after_policy (tp_engine *e, tp_call *c) {
  if (e->policy != NULL) {
    char reason[REASON_MAX];
    reason[0] = '\0';
    int v = e->policy(c, e->policy_ud, reason, sizeof reason);
    reason[sizeof reason - 1] = '\0';
    if (v == TP_POLICY_HOLD) {
      tp__call_hold(c);
      if (e->audit_on) tp__journal_call(e, c, "held");
      return;
    }
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

/* The engine's tools, then the run's caller tools (provider_caller.c). */
static size_t tool_count (void *ud, const tp_run *r) {
  return ((tp_engine *)ud)->ntools + tp__caller_count(r);
}

/* NULL for a tool scripts may not call (tool_settings): tools.list leaves it out. */
static const char *tool_name (void *ud, const tp_run *r, size_t i) {
  const tp_engine *e = ud;
  const tp_tool *t = i < e->ntools ? e->tools[i] : tp__caller_at(r, i - e->ntools);
  return t && tp__tool_callers(e, t) & TP_CALLER_SCRIPT ? t->name : NULL;
}

static void run_gone (void *ud, tp_run *r) {
  tp__driver_run_gone(ud, r);
  tp__caller_run_gone(r);
}

/* Discovery from a script reads what registration made: no Lua runs for it. */
static char *describe (void *ud, tp_sandbox *sb, const char *tool, int *known) {
  const tp_tool *t = tp__tool_find_for(ud, sb->run, tool);
  *known = t != NULL;
  if (t != NULL && !(tp__tool_callers(ud, t) & TP_CALLER_SCRIPT)) {
    char text[400];
    snprintf(text, sizeof text, "-- tools.%.128s may only be called directly, not from a "
             "script (the config's tool_settings)\n", t->name);
    return strdup(text);
  }
  if (t == NULL || t->lua_api == NULL) return NULL;
  if (t->seen == NULL && t->output == NULL && t->prov == &tp__upstream_provider)
    tp__host_seen_load(ud, t->name);  /* another worker's call, kept in the store */
  if (t->seen == NULL) return strdup(t->lua_api);
  /* a tool with no result type that has answered: what it gave back last time */
  static const char said[] = "-- its last result here was ";
  size_t a = strlen(t->lua_api), b = strlen(t->seen);
  char *s = malloc(a + sizeof said + b + 2);
  if (s == NULL) return NULL;
  memcpy(s, t->lua_api, a);
  memcpy(s + a, said, sizeof said - 1);
  memcpy(s + a + sizeof said - 1, t->seen, b);
  memcpy(s + a + sizeof said - 1 + b, "\n", 2);
  return s;
}

static char *search (void *ud, tp_sandbox *sb, const char *query) {
  return tp__caller_search(ud, sb->run, query);
}

/* ---- the pre-run check --------------------------------------------------------------
** A call written out in the script (precheck.c) fails surely when its tool is unknown
** once every tool is registered, or when its literal table of arguments has a field the
** schema's additionalProperties false forbids (the field surely holds a value), or lacks
** one of its required fields while nothing else could add it. Only the top level of the
** input schema (after a local $ref) is read; patternProperties turns the first check off.
*/

static int cmp_str (const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* "$.key", or $["odd key"] as the validator writes it. */
static void key_path (const char *key, char *buf, size_t len) {
  int plain = key[0] != '\0' && !(key[0] >= '0' && key[0] <= '9');
  for (const char *p = key; *p && plain; p++)
    plain = *p == '_' || (*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'z') ||
            (*p >= 'A' && *p <= 'Z');
  if (plain) snprintf(buf, len, "$.%s", key);
  else snprintf(buf, len, "$[\"%s\"]", key);
}

/* 1 when the schema has a plain shape (schema.h, made at compile) and the call surely
** passes the checks below: a call with no finding, the common case, then reads no JSON.
** 0 when it cannot tell; the checks below then decide, and write the message. */
static int plain_clean (const tp_schema_simple *sh, const char *const *keys,
                        const unsigned char *sure, size_t nkeys, int closed) {
  if (sh == NULL) return 0;
  for (size_t i = 0; i < sh->nprops; i++) {
    const tp_schema_simple_prop *q = &sh->props[i];
    if (!closed || !q->required) continue;
    size_t k = 0;
    while (k < nkeys && strcmp(keys[k], q->name) != 0) k++;
    if (k == nkeys) return 0;  /* a required field missing */
  }
  if (!sh->closed) return 1;
  for (size_t k = 0; k < nkeys; k++) {
    if (!sure[k]) continue;
    size_t i = 0, kl = strlen(keys[k]);
    while (i < sh->nprops &&
           !(sh->props[i].len == kl && memcmp(sh->props[i].name, keys[k], kl) == 0)) i++;
    if (i == sh->nprops) return 0;  /* a field the schema forbids */
  }
  return 1;
}

static const char *precheck_call (void *ud, const tp_run *r, const char *tool,
                                  const char *const *keys, const unsigned char *sure,
                                  size_t nkeys, int literal, int closed, char *msg,
                                  size_t len) {
  tp_engine *e = ud;
  const tp_tool *t = tp__tool_find_for(e, r, tool);
  if (t == NULL) {
    if (!tp__host_tools_settled(e)) return NULL;
    char near[400];
    tp__tool_suggest(e, tool, near, sizeof near);
    if (near[0])
      snprintf(msg, len, "there is no tool tools.%s; did you mean %s? (tools.list() lists "
               "them all)", tool, near);
    else
      snprintf(msg, len, "there is no tool tools.%s (tools.list() lists the tools there "
               "are)", tool);
    return "tool.unknown";
  }
  if (!literal || t->input == NULL) return NULL;
  if (plain_clean(tp__schema_simple(t->in_schema), keys, sure, nkeys, closed)) return NULL;
  int hops = 0;
  const json_t *s = tp__schema_deref(t->input, t->input, &hops);
  if (!json_is_object(s)) return NULL;
  const json_t *type = json_object_get(s, "type");
  if (type != NULL && !(json_is_string(type) && strcmp(json_string_value(type), "object") == 0))
    return NULL;
  char errs[1200], path[160];
  size_t o = 0;
  errs[0] = '\0';
  const json_t *req = json_object_get(s, "required");
  size_t i;
  const json_t *one;
  if (closed) json_array_foreach(req, i, one) {
    const char *name = json_string_value(one);
    int has = 0;
    for (size_t k = 0; name && k < nkeys && !has; k++) has = strcmp(keys[k], name) == 0;
    if (name && !has && o < sizeof errs - 1)
      o += (size_t)snprintf(errs + o, sizeof errs - o, "%s$: missing required property "
                            "\"%s\"", o ? "; " : "", name);
  }
  const json_t *props = json_object_get(s, "properties");
  if (json_is_false(json_object_get(s, "additionalProperties")) &&
      json_object_get(s, "patternProperties") == NULL) {
    size_t k = 0;
    while (k < nkeys && (!sure[k] || json_object_get(props, keys[k]) != NULL)) k++;
    char allowed[300];  /* sorted, as the validator lists them; made only when needed */
    allowed[0] = '\0';
    if (k < nkeys) {
      size_t a = 0, np = 0;
      const char *pk, *names[64];
      const json_t *pv;
      json_object_foreach((json_t *)props, pk, pv) if (np < 64) names[np++] = pk;
      qsort(names, np, sizeof names[0], cmp_str);
      for (size_t q = 0; q < np; q++) {
        if (a + 40 >= sizeof allowed) {
          snprintf(allowed + a, sizeof allowed - a, ", ...");
          break;
        }
        a += (size_t)snprintf(allowed + a, sizeof allowed - a, "%s\"%s\"", a ? ", " : "",
                              names[q]);
      }
    }
    for (; k < nkeys; k++) {
      if (!sure[k] || json_object_get(props, keys[k]) != NULL || o >= sizeof errs - 1) continue;
      key_path(keys[k], path, sizeof path);
      if (allowed[0])
        o += (size_t)snprintf(errs + o, sizeof errs - o, "%s%s: unexpected property \"%s\" "
                              "(allowed: %s)", o ? "; " : "", path, keys[k], allowed);
      else
        o += (size_t)snprintf(errs + o, sizeof errs - o, "%s%s: unexpected property \"%s\"",
                              o ? "; " : "", path, keys[k]);
    }
  }
  if (o == 0) return NULL;
  snprintf(msg, len, "tools.%s: invalid arguments: %s (tools.describe(\"%s\") shows what it "
           "takes)", tool, errs, tool);
  return "tool.invalid_input";
}

/* {path = "...", n = 1}: the tool's fields, required first, at most 4. */
static void args_example (void *ud, const tp_run *r, const char *tool, char *buf,
                          size_t len) {
  buf[0] = '\0';
  const tp_tool *t = tp__tool_find_for(ud, r, tool);
  if (t == NULL || t->input == NULL || len < 8) return;
  int hops = 0;
  const json_t *s = tp__schema_deref(t->input, t->input, &hops);
  const json_t *props = json_object_get(s, "properties");
  if (!json_is_object(props) || json_object_size(props) == 0) return;
  const json_t *req = json_object_get(s, "required");
  size_t o = 0, n = 0;
  o += (size_t)snprintf(buf, len, "{");
  const char *names[64], *k;
  const json_t *sub;
  size_t nn = 0;
  json_object_foreach((json_t *)props, k, sub) if (nn < 64) names[nn++] = k;
  qsort(names, nn, sizeof names[0], cmp_str);  /* the same text every time */
  for (int pass = 0; pass < 2; pass++) {
    for (size_t q = 0; q < nn; q++) {
      k = names[q];
      sub = json_object_get(props, k);
      int is_req = 0;
      size_t i;
      const json_t *one;
      json_array_foreach(req, i, one)
        if (json_is_string(one) && strcmp(json_string_value(one), k) == 0) is_req = 1;
      if (is_req != (pass == 0) || n == 4 || o + 48 >= len) continue;
      int h2 = 0;
      const json_t *ps = tp__schema_deref(sub, t->input, &h2);
      const char *ty = json_string_value(json_object_get(ps, "type"));
      const char *v = ty == NULL ? "..." : strcmp(ty, "string") == 0 ? "\"...\""
                    : strcmp(ty, "integer") == 0 || strcmp(ty, "number") == 0 ? "1"
                    : strcmp(ty, "boolean") == 0 ? "true"
                    : strcmp(ty, "array") == 0 || strcmp(ty, "object") == 0 ? "{...}" : "...";
      o += (size_t)snprintf(buf + o, len - o, "%s%s = %s", n ? ", " : "", k, v);
      n++;
    }
  }
  if (n == 0 || o + 2 >= len) { buf[0] = '\0'; return; }
  snprintf(buf + o, len - o, "}");
}

const tp__host_hooks tp__engine_hooks = {
  on_call, on_dispatch, on_cancel, tp__driver_wake, run_gone,
  tool_count, tool_name, describe, search, precheck_call, args_example,
  tp__caller_session_gone, tp__trace_call_end, tp__trace_run_end
};
