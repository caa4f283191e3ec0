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

/* The policy's reason, as much of it as a message keeps. */
#define REASON_MAX 512

/* ---- empty tables where the schema wants an array ----------------------------------
** An empty Lua table has no keys to tell an array from an object, and is sent as {}. In
** tool arguments the tool's input schema says which it is: where it expects an array
** (and not an object), an empty object becomes []. Only the schema's plain structure is
** followed (properties, additionalProperties, items, prefixItems, allOf, local $ref), to
** a bounded depth and a bounded number of schema visits per call (EMPTY_WORK: a schema
** of nested allOf can double the work at each level), after which the rest is left as
** it is and validation says what is wrong.
*/
#define EMPTY_DEPTH 64
#define EMPTY_WORK 20000

static const json_t *schema_deref (const json_t *s, const json_t *root, int *hops) {
  while (json_is_object(s) && (*hops)++ < EMPTY_DEPTH) {
    const char *ref = json_string_value(json_object_get(s, "$ref"));
    if (ref == NULL || ref[0] != '#') return s;
    const json_t *node = root;
    const char *p = ref + 1;
    while (*p == '/' && node != NULL) {
      char part[128];
      size_t n = 0;
      for (p++; *p && *p != '/' && n < sizeof part - 1; p++) {
        if (p[0] == '~' && p[1] == '1') { part[n++] = '/'; p++; }
        else if (p[0] == '~' && p[1] == '0') { part[n++] = '~'; p++; }
        else part[n++] = *p;
      }
      part[n] = '\0';
      node = json_is_array(node) ? json_array_get(node, strtoul(part, NULL, 10))
                                 : json_object_get(node, part);
    }
    if (node == NULL || node == s) return s;
    s = node;
  }
  return s;
}

static int wants_array (const json_t *s, const json_t *root, int depth, long *work) {
  int hops = 0;
  if (--*work <= 0) return 0;
  s = schema_deref(s, root, &hops);
  if (!json_is_object(s) || depth > EMPTY_DEPTH) return 0;
  const json_t *t = json_object_get(s, "type");
  if (json_is_string(t)) return strcmp(json_string_value(t), "array") == 0;
  if (json_is_array(t)) {
    int arr = 0, obj = 0;
    size_t i;
    const json_t *one;
    json_array_foreach(t, i, one) {
      const char *n = json_string_value(one);
      if (n && strcmp(n, "array") == 0) arr = 1;
      if (n && strcmp(n, "object") == 0) obj = 1;
    }
    return arr && !obj;
  }
  const json_t *all = json_object_get(s, "allOf");
  size_t i;
  const json_t *one;
  json_array_foreach(all, i, one)
    if (wants_array(one, root, depth + 1, work)) return 1;
  return 0;
}

static void empty_arrays (json_t *v, const json_t *s, const json_t *root, int depth,
                          long *work);

/* The replacement of child (of schema sub): an empty array, or NULL after walking it. */
static json_t *empty_child (json_t *child, const json_t *sub, const json_t *root, int depth,
                            long *work) {
  if (sub == NULL) return NULL;
  if (json_is_object(child) && json_object_size(child) == 0) {
    if (wants_array(sub, root, depth, work)) return json_array();
    return NULL;
  }
  if (json_is_object(child) || json_is_array(child))
    empty_arrays(child, sub, root, depth + 1, work);
  return NULL;
}

static void empty_arrays (json_t *v, const json_t *s, const json_t *root, int depth,
                          long *work) {
  int hops = 0;
  if (--*work <= 0) return;
  s = schema_deref(s, root, &hops);
  if (!json_is_object(s) || depth > EMPTY_DEPTH) return;
  size_t i;
  const json_t *one;
  json_array_foreach(json_object_get(s, "allOf"), i, one)
    empty_arrays(v, one, root, depth + 1, work);
  if (json_is_object(v)) {
    const json_t *props = json_object_get(s, "properties");
    const json_t *extra = json_object_get(s, "additionalProperties");
    const char *key;
    json_t *child;
    void *iter = json_object_iter(v);
    while (iter) {
      key = json_object_iter_key(iter);
      child = json_object_iter_value(iter);
      const json_t *sub = json_object_get(props, key);
      json_t *rep = empty_child(child, sub ? sub : json_is_object(extra) ? extra : NULL,
                                root, depth, work);
      if (rep) json_object_iter_set_new(v, iter, rep);
      iter = json_object_iter_next(v, iter);
    }
  }
  else if (json_is_array(v)) {
    const json_t *prefix = json_object_get(s, "prefixItems");
    const json_t *items = json_object_get(s, "items");
    json_t *child;
    json_array_foreach(v, i, child) {
      const json_t *sub = i < json_array_size(prefix) ? json_array_get(prefix, i)
                        : json_is_object(items) ? items : NULL;
      json_t *rep = empty_child(child, sub, root, depth, work);
      if (rep) json_array_set_new(v, i, rep);
    }
  }
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
  if (c->empty_objects && t->input != NULL) {  /* before the policy sees the arguments
                                               ** and their text is made */
    long work = EMPTY_WORK;
    empty_arrays(c->args, t->input, t->input, 0, &work);
  }
  if (e->pol != NULL && !tp__policy_decide(e, c, (tp_tool *)t)) return;
  tp__admit_after_policy(e, c);
}

/* What follows the config's policy: the embedding program's, then the schema check. */
void tp__admit_after_policy (tp_engine *e, tp_call *c) {
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
  if (t == NULL || t->lua_api == NULL) return NULL;
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
  (void)sb;
  return tp__tool_search(ud, query);
}

const tp__host_hooks tp__engine_hooks = {
  on_call, on_dispatch, on_cancel, tp__driver_wake, tp__driver_run_gone,
  tool_count, tool_name, describe, search
};
