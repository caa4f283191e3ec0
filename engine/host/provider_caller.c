/*
** provider_caller.c: caller tools, the tools whose implementation stays with whoever
** started the run (docs/caller-tools.md). They are declared on a run or a session, not
** registered in the engine: each run and session keeps its own set here, found before
** the engine's registry (tp__tool_find_for). Otherwise they are tools like the others:
** the same tp_tool, the same admission (policy, approvals, schemas, limits), the same
** call records; only their dispatch differs.
** - with a handler (live): the call is handed to it, and it answers with tp_call_complete
**   or tp_call_fail, now or later; a cancel function, when given, hears of a call cut
**   short (its timeout, the run's end) while it waits;
** - without one (paused): the call waits in tp_run_pending for the embedding program,
**   as a tool registered without a handler.
*/
#include <stdlib.h>
#include <string.h>

#include "lauxlib.h"
#include "util.h"
#include "registry.h"
#include "host.h"

#define CALLER_TOOLS_MAX 256             /* declarations of one run or session */
#define CALLER_JSON_MAX ((size_t)1 << 20)  /* their JSON text */

/* A run's or a session's caller tools, sorted by name. */
typedef struct tp__tool_set {
  tp_tool **tools;
  size_t n, cap;
} tp__tool_set;

/* A caller tool's pdata (provider.h): its handler, its cancel function and what they
** get. */
typedef struct caller_ud {
  tp_tool_fn call;
  void (*cancel)(tp_call *c, void *ud);
  void *ud;
} caller_ud;

static void caller_dispatch (tp_engine *e, const tp_tool *t, tp_call *c) {
  (void)e;
  const caller_ud *cu = t->pdata;
  cu->call(c, cu->ud);
}

static void caller_cancel (tp_engine *e, const tp_tool *t, tp_call *c) {
  (void)e;
  const caller_ud *cu = t->pdata;
  if (cu->cancel) cu->cancel(c, cu->ud);
}

static void caller_destroy (void *pdata) {
  free(pdata);
}

static const char *caller_describe (const tp_tool *t) {
  (void)t;
  return "the caller (a caller tool)";
}

const tp__provider tp__caller_provider = {
  "caller", 0, 0, caller_dispatch, caller_cancel, NULL, caller_describe, NULL, caller_destroy
};

/* Without a handler: completed by the embedding program, like tp__external_provider. */
const tp__provider tp__caller_paused_provider = {
  "caller", TP__TOOL_EXTERNAL, 0, NULL, NULL, NULL, caller_describe, NULL, caller_destroy
};

static void set_free (tp__tool_set *s) {
  if (s == NULL) return;
  for (size_t i = 0; i < s->n; i++) tp__tool_free(NULL, s->tools[i]);
  free(s->tools);
  free(s);
}

static const tp_tool *set_find (const tp__tool_set *s, const char *name) {
  if (s == NULL) return NULL;
  size_t lo = 0, hi = s->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int d = strcmp(name, s->tools[mid]->name);
    if (d == 0) return s->tools[mid];
    if (d < 0) hi = mid;
    else lo = mid + 1;
  }
  return NULL;
}

/* Adds a caller tool to *sp (made when NULL). cancel may be NULL. */
static int set_add (tp_engine *e, tp__tool_set **sp, const tp_tool_def *def, const json_t *in,
                    const json_t *out, void (*cancel)(tp_call *, void *)) {
  tp__tool_set *s = *sp;
  const char *name = def->name ? def->name : "";
  if (set_find(s, name)) {
    tp__engine_set_error(e, "caller tool %s: declared twice", name);
    return TP_EINVAL;
  }
  if (tp__tool_find(e, name)) {
    tp__engine_set_error(e, "caller tool %s: the server has a tool of that name already "
                         "(tools.describe(\"%s\") shows it): give the caller tool another "
                         "name", name, name);
    return TP_EINVAL;
  }
  if (s && s->n >= CALLER_TOOLS_MAX) {
    tp__engine_set_error(e, "caller tool %s: more than %d caller tools", name,
                         CALLER_TOOLS_MAX);
    return TP_EINVAL;
  }
  caller_ud *cu = calloc(1, sizeof *cu);
  if (cu == NULL) return TP_ENOMEM;
  cu->call = def->handler;
  cu->cancel = cancel;
  cu->ud = def->ud;
  int rc;
  tp_tool *t = tp__tool_make(e, def, in, out, def->handler ? &tp__caller_provider
                             : &tp__caller_paused_provider, cu, NULL, &rc);
  if (t == NULL) { free(cu); return rc; }
  if (s == NULL && (s = *sp = calloc(1, sizeof *s)) == NULL) {
    tp__tool_free(e, t);
    return TP_ENOMEM;
  }
  if (tp__tools_insert(&s->tools, &s->n, &s->cap, t, 8) != 0) {
    tp__tool_free(e, t);
    return TP_ENOMEM;
  }
  tp__tool_annotate_one(e, t);
  return TP_OK;
}

static int add_def (tp_engine *e, tp__tool_set **sp, const tp_tool_def *def,
                    void (*cancel)(tp_call *, void *)) {
  json_t *in, *out;
  if (tp__tool_parse_schemas(e, def, &in, &out) != TP_OK) return TP_EINVAL;
  int rc = set_add(e, sp, def, in, out, cancel);
  json_decref(in);
  json_decref(out);
  return rc;
}

/* Declarations as the protocol writes them: [{name, description, inputSchema,
** outputSchema, timeoutMs}], or {tools: [...]}. All or none are added. */
static int add_json (tp_engine *e, tp__tool_set **sp, const char *json, size_t len,
                     tp_tool_fn call, void (*cancel)(tp_call *, void *), void *ud) {
  if (len == 0 && json) len = strlen(json);
  if (json == NULL || len > CALLER_JSON_MAX) {
    tp__engine_set_error(e, "caller tools: the declarations are %s", json ? "over 1 MiB"
                         : "missing");
    return TP_EINVAL;
  }
  char why[300];
  json_t *doc = tp_json_parse(json, len, why, sizeof why);
  if (doc == NULL) {
    tp__engine_set_error(e, "caller tools: the declarations are not JSON: %s", why);
    return TP_EINVAL;
  }
  json_t *list = json_is_object(doc) ? json_object_get(doc, "tools") : doc;
  if (!json_is_array(list)) {
    json_decref(doc);
    tp__engine_set_error(e, "caller tools: the declarations must be an array of {name, "
                         "description, inputSchema, outputSchema, timeoutMs}, or {tools: "
                         "[...]}");
    return TP_EINVAL;
  }
  tp__tool_set *fresh = NULL;  /* checked in full before any is added */
  int rc = TP_OK;
  size_t i;
  json_t *one;
  json_array_foreach(list, i, one) {
    json_t *name = json_object_get(one, "name"), *desc = json_object_get(one, "description");
    json_t *in = json_object_get(one, "inputSchema"), *out = json_object_get(one, "outputSchema");
    json_t *tmo = json_object_get(one, "timeoutMs");
    if (!json_is_object(one) || !json_is_string(name) || (desc && !json_is_string(desc)) ||
        (in && !json_is_object(in)) || (out && !json_is_object(out)) ||
        (tmo && (!json_is_integer(tmo) || json_integer_value(tmo) < 1 ||
                 json_integer_value(tmo) > (json_int_t)(UINT64_MAX / 1000000)))) {
      tp__engine_set_error(e, "caller tools: tools[%zu] must be {name = <string>, description "
                           "= <string>, inputSchema = <object>, outputSchema = <object>, "
                           "timeoutMs = <positive integer>} (only name is required)", i);
      rc = TP_EINVAL;
      break;
    }
    tp_tool_def d = { .name = json_string_value(name),
                      .description = desc ? json_string_value(desc) : NULL, .handler = call,
                      .ud = ud, .timeout_us = tmo ? (uint64_t)json_integer_value(tmo) * 1000u : 0 };
    if (set_find(*sp, d.name)) {
      tp__engine_set_error(e, "caller tool %s: declared already", d.name);
      rc = TP_EINVAL;
      break;
    }
    if ((rc = set_add(e, &fresh, &d, in, out, cancel)) != TP_OK) break;
  }
  json_decref(doc);
  if (rc == TP_OK && fresh && (*sp == NULL || (*sp)->n + fresh->n > CALLER_TOOLS_MAX)) {
    if (*sp == NULL) { *sp = fresh; return TP_OK; }
    tp__engine_set_error(e, "caller tools: more than %d", CALLER_TOOLS_MAX);
    rc = TP_EINVAL;
  }
  if (rc == TP_OK && fresh) {  /* move them over, in order */
    tp__tool_set *s = *sp;
    if (s->cap < s->n + fresh->n) {
      tp_tool **nt = realloc(s->tools, (s->n + fresh->n) * sizeof *nt);
      if (nt == NULL) { set_free(fresh); return TP_ENOMEM; }
      s->tools = nt;
      s->cap = s->n + fresh->n;
    }
    for (size_t k = 0; k < fresh->n; k++) {
      tp_tool *t = fresh->tools[k];
      size_t j = s->n;
      while (j > 0 && strcmp(s->tools[j - 1]->name, t->name) > 0) {
        s->tools[j] = s->tools[j - 1];
        j--;
      }
      s->tools[j] = t;
      s->n++;
    }
    fresh->n = 0;
  }
  set_free(fresh);
  return rc;
}

/* ---- the API ----------------------------------------------------------------------- */

static int run_ready (tp_run *r) {
  if (r->state != ST_READY) {
    tp__engine_set_error(r->e, "caller tools are declared before the run's first step");
    return 0;
  }
  return 1;
}

int tp_run_add_caller_tool (tp_run *r, const tp_tool_def *def) {
  if (r == NULL || def == NULL) return TP_EINVAL;
  if (!run_ready(r)) return TP_ESTATE;
  int rc = add_def(r->e, &r->own_tools, def, NULL);
  if (rc == TP_OK) tp__run_recheck(r);
  return rc;
}

int tp_run_declare_caller_tools (tp_run *r, const char *json, size_t len, tp_tool_fn call,
                                 tp_call_cancel_fn cancel, void *ud) {
  if (r == NULL) return TP_EINVAL;
  if (!run_ready(r)) return TP_ESTATE;
  int rc = add_json(r->e, &r->own_tools, json, len, call, cancel, ud);
  if (rc == TP_OK) tp__run_recheck(r);
  return rc;
}

int tp_session_add_caller_tool (tp_session *s, const tp_tool_def *def) {
  if (s == NULL || def == NULL) return TP_EINVAL;
  return add_def(s->e, &s->own_tools, def, NULL);
}

int tp_session_declare_caller_tools (tp_session *s, const char *json, size_t len,
                                     tp_tool_fn call, tp_call_cancel_fn cancel, void *ud) {
  if (s == NULL) return TP_EINVAL;
  return add_json(s->e, &s->own_tools, json, len, call, cancel, ud);
}

int tp_session_clear_caller_tools (tp_session *s) {
  if (s == NULL) return TP_EINVAL;
  if (s->busy) return TP_ESTATE;
  set_free(s->own_tools);
  s->own_tools = NULL;
  return TP_OK;
}

/* ---- what the rest of the host asks --------------------------------------------------- */

static const tp__tool_set *session_set (const tp_run *r) {
  return r && r->session ? r->session->own_tools : NULL;
}

const tp_tool *tp__tool_find_for (const tp_engine *e, const tp_run *r, const char *name) {
  const tp_tool *t = r ? set_find(r->own_tools, name) : NULL;
  if (t == NULL) t = set_find(session_set(r), name);
  return t ? t : tp__tool_find(e, name);
}

size_t tp__caller_count (const tp_run *r) {
  size_t n = r && r->own_tools ? r->own_tools->n : 0;
  const tp__tool_set *ss = session_set(r);
  return n + (ss ? ss->n : 0);
}

/* Tool i of r's caller tools (its own, then its session's that it does not shadow); NULL
** for a shadowed one. */
const tp_tool *tp__caller_at (const tp_run *r, size_t i) {
  size_t n = r && r->own_tools ? r->own_tools->n : 0;
  if (i < n) return r->own_tools->tools[i];
  const tp__tool_set *ss = session_set(r);
  if (ss == NULL || i - n >= ss->n) return NULL;
  const tp_tool *t = ss->tools[i - n];
  return set_find(r->own_tools, t->name) ? NULL : t;
}

char *tp__caller_search (const tp_engine *e, const tp_run *r, const char *query) {
  size_t n = tp__caller_count(r), k = 0;
  if (n == 0) return tp__tool_search(e, query);
  const tp_tool **extra = malloc(n * sizeof *extra);
  if (extra == NULL) return NULL;
  for (size_t i = 0; i < n; i++) {
    const tp_tool *t = tp__caller_at(r, i);
    if (t) extra[k++] = t;
  }
  char *text = tp__tool_search_with(e, extra, k, query);
  free(extra);
  return text;
}

int tp__caller_set_json (tp_engine *e, tp__tool_set **set, const char *json, size_t len) {
  return add_json(e, set, json, len, NULL, NULL, NULL);
}

size_t tp__caller_set_tools (const tp__tool_set *set, const tp_tool *const **tools) {
  *tools = set ? (const tp_tool *const *)set->tools : NULL;
  return set ? set->n : 0;
}

void tp__caller_set_free (tp__tool_set *set) { set_free(set); }

void tp__caller_run_gone (tp_run *r) {
  set_free(r->own_tools);
  r->own_tools = NULL;
}

void tp__caller_session_gone (void *ud, tp_session *s) {
  (void)ud;
  set_free(s->own_tools);
  s->own_tools = NULL;
}

/* ---- answers as the protocol writes them ------------------------------------------------ */

/* The codes a caller may give; another is read as tool.failed. */
static const char *const caller_codes[] = { "tool.failed", "tool.denied", "tool.timeout",
  "tool.unavailable", "tool.rate_limited", "tool.invalid_input" };

#define CALLER_MESSAGE_MAX 4000

int tp_call_answer (tp_call *c, const char *answer, size_t len) {
  if (c == NULL || answer == NULL) return TP_EINVAL;
  if (len == 0) len = strlen(answer);
  char why[300];
  json_t *a = tp_json_parse(answer, len, why, sizeof why);
  int rc = tp_call_answer_tree(c, a);
  if (a == NULL) {
    char msg[400];
    snprintf(msg, sizeof msg, "the caller's answer is not JSON: %s", why);
    tp_call_fail(c, NULL, msg);
    return TP_EINVAL;
  }
  json_decref(a);
  return rc;
}

int tp_call_answer_tree (tp_call *c, struct json_t *a) {
  if (c == NULL || a == NULL) return TP_EINVAL;
  json_t *res = json_object_get(a, "result"), *err = json_object_get(a, "error");
  if (json_is_object(a) && res != NULL && err == NULL)
    return tp__call_complete_tree(c, json_incref(res));
  const char *msg = json_string_value(json_object_get(err, "message"));
  if (!json_is_object(a) || !json_is_object(err) || msg == NULL || res != NULL) {
    tp_call_fail(c, NULL, "the caller's answer is neither {\"result\": ...} nor {\"error\": "
                 "{\"message\": \"...\"}} (a fault of the caller, not the script)");
    return TP_EINVAL;
  }
  const char *code = json_string_value(json_object_get(err, "code")), *use = "tool.failed";
  for (size_t i = 0; code && i < sizeof caller_codes / sizeof caller_codes[0]; i++)
    if (strcmp(code, caller_codes[i]) == 0) use = caller_codes[i];
  size_t n = strlen(msg);
  char cut[CALLER_MESSAGE_MAX + 8];
  if (n > CALLER_MESSAGE_MAX) {
    n = CALLER_MESSAGE_MAX;
    while (n > 0 && ((unsigned char)msg[n] & 0xC0) == 0x80) n--;
    memcpy(cut, msg, n);
    memcpy(cut + n, "...", 4);
    msg = cut;
  }
  return tp_call_fail(c, use, *msg ? msg : "the caller gave no reason") == TP_OK
         ? TP_OK : TP_ESTATE;
}
