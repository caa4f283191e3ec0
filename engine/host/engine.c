/*
** engine.c: the engine object, every public tp_engine_* function: creating and
** destroying it, its tools, workspace, policy and descriptions, polling its loop, and
** the synchronous runs (tp_engine_run, tp_engine_check).
*/
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "engine.h"
#include "registry.h"
#include "host.h"
#include "policy.h"
#include "trace.h"
#include "store_int.h"

const char *tp_version (void) { return TP_VERSION; }

tp_engine *tp_engine_create (void) {
  tp_engine *e = calloc(1, sizeof *e);
  if (e == NULL) return NULL;
  e->loop = malloc(sizeof *e->loop);
  if (e->loop == NULL || uv_loop_init(e->loop) != 0) { free(e->loop); free(e); return NULL; }
  e->after_policy = tp__admit_after_policy;
  if (tp__core_init(&e->core, &tp__engine_hooks, e) != 0) {
    uv_loop_close(e->loop);
    free(e->loop);
    free(e);
    return NULL;
  }
  return e;
}

void tp_engine_destroy (tp_engine *e) {
  if (e == NULL) return;
  while (e->core.runs) tp_run_destroy(e->core.runs);
  tp__step_timer_stop();  /* the thread that steps the runs most likely destroys it */
  tp__host_upstream_stop(e);  /* upstream MCP servers exit before handles are counted */
  tp__http_close(e);      /* requests of the host state outside calls, and the multi */
  tp__store_close(e->store_conn);  /* answers what is outstanding while the host state and
                                   ** held calls can still take it */
  e->store_conn = NULL;
  tp__trace_close(e);     /* what is queued leaves, within a bounded time */
  tp__metrics_free(e);
  tp__engine_count_open_handles(e);  /* leftovers, closed below; the tests fail on them */
  tp__host_close(e);
  tp__driver_close(e);
  tp__engine_free_tools(e);
  tp__core_close(&e->core);
  tp__config_free(e);
  tp__policy_free(e);
  tp__store_unref(e->store);
  free(e->workspace);
  free(e->error);
  free(e);
}

int tp_engine_poll (tp_engine *e, int block) {
  if (e == NULL) return 0;
  return uv_run(e->loop, block ? UV_RUN_ONCE : UV_RUN_NOWAIT);
}

int tp_engine_run_with (tp_engine *e, const char *source, size_t len, const tp_run_opts *opts,
                        char **envelope, int *script_ok) {
  if (envelope) *envelope = NULL;
  tp_run_opts o;
  memset(&o, 0, sizeof o);
  if (opts != NULL) {  /* a caller's older, smaller struct: the rest stays unset */
    if (opts->size < offsetof(tp_run_opts, check_only)) return TP_EINVAL;
    memcpy(&o, opts, opts->size < sizeof o ? opts->size : sizeof o);
  }
  const tp_limits *limits = o.limits;
  if (e == NULL || source == NULL || envelope == NULL) return TP_EINVAL;
  /* the upstream MCP servers' tools, unless a plugin load started them already: only for
  ** a script that names tools (the servers take a while to start), within the run's
  ** time; a check needs them too, to tell a tool name that is wrong */
  if (memmem(source, len, "tools", 5) != NULL) {
    uint64_t within = e->start_within_us;
    if (within == 0 && limits != NULL) e->start_within_us = limits->wall_us;
    tp__host_upstream(e, NULL, NULL);
    e->start_within_us = within;
  }
  tp_run *r = tp_run_create(e, source, len, limits);
  if (r == NULL) return TP_ENOMEM;
  int rc = TP_OK;
  if (o.has_seed) rc = tp_run_set_seed(r, o.seed);
  if (rc == TP_OK && o.has_clock) rc = tp_run_set_fixed_clock(r, o.clock_epoch, o.clock_step_us);
  if (rc == TP_OK && o.traceparent) tp_run_set_traceparent(r, o.traceparent);  /* a bad one
                                  ** leaves the run a trace of its own, as W3C asks */
  if (rc != TP_OK) { tp_run_destroy(r); return rc; }
  if (o.check_only && r->compiled) tp__run_finish_unstarted(r);
  for (;;) {
    rc = tp_run_step(r, 0, 0);
    if (rc == TP_YIELD) continue;
    if (rc != TP_WAIT) break;
    tp__driver_wait(r);
  }
  if (!tp_run_done(r)) { tp_run_destroy(r); return rc < 0 ? rc : TP_ESTATE; }
  if (r->envelope == NULL) { tp_run_destroy(r); return TP_ENOMEM; }  /* out of memory */
  *envelope = r->envelope;
  r->envelope = NULL;
  if (script_ok) *script_ok = r->ok;
  tp_run_destroy(r);
  return TP_OK;
}

int tp_engine_run (tp_engine *e, const char *source, size_t len, const tp_limits *limits,
                   char **envelope, int *script_ok) {
  tp_run_opts o = TP_RUN_OPTS_INIT;
  o.limits = limits;
  return tp_engine_run_with(e, source, len, &o, envelope, script_ok);
}

int tp_engine_check (tp_engine *e, const char *source, size_t len, const tp_limits *limits,
                     char **envelope, int *script_ok) {
  tp_run_opts o = TP_RUN_OPTS_INIT;
  o.limits = limits;
  o.check_only = 1;
  return tp_engine_run_with(e, source, len, &o, envelope, script_ok);
}

void tp_engine_on_tools_changed (tp_engine *e, tp_engine_tools_cb cb, void *ud) {
  if (e == NULL) return;
  e->tools_changed = cb;
  e->tools_changed_ud = cb ? ud : NULL;
}

void tp_tool_def_init (tp_tool_def *def) {
  if (def != NULL) memset(def, 0, sizeof *def);
}

/* A C tool (or one the embedder completes) registered and annotated: above registry.c,
** since annotating runs describe.lua in the host state (host.c). */
int tp__tool_add_def (tp_engine *e, const tp_tool_def *def) {
  json_t *in, *out;
  if (tp__tool_parse_schemas(e, def, &in, &out) != TP_OK) return TP_EINVAL;
  const tp__provider *prov = def->handler ? &tp__c_provider : &tp__external_provider;
  void *pdata = def->handler ? tp__c_tool_new(def->handler, def->ud) : NULL;
  int rc = def->handler && pdata == NULL ? TP_ENOMEM
                                         : tp__tool_add(e, def, in, out, prov, pdata, NULL);
  if (rc != TP_OK) free(pdata);
  if (rc == TP_OK) tp__tools_annotate(e);
  json_decref(in);
  json_decref(out);
  return rc;
}

int tp_engine_add_tool (tp_engine *e, const tp_tool_def *def) {
  if (e == NULL || def == NULL) return TP_EINVAL;
  return tp__tool_add_def(e, def);
}

int tp_engine_load_tools (tp_engine *e, const char *dir) {
  if (e == NULL || dir == NULL) return TP_EINVAL;
  return tp__host_load_dir(e, dir, NULL, NULL);
}

int tp_engine_set_workspace (tp_engine *e, const char *dir) {
  if (e == NULL || dir == NULL) return TP_EINVAL;
  free(e->workspace);
  e->workspace = strdup(dir);
  return e->workspace ? TP_OK : TP_ENOMEM;
}

int tp_engine_set_workspace_max (tp_engine *e, uint64_t bytes) {
  if (e == NULL) return TP_EINVAL;
  e->workspace_max = bytes;
  e->workspace_max_set = 1;
  return TP_OK;
}

static char *describe_as (tp_engine *e, const char *format, const tp_tool *const *x, size_t nx) {
  if (e == NULL || format == NULL) return NULL;
  /* the text: "lua" (tools in full) or a mode ("compact", "auto", "fit", "grouped",
  ** "counts"); the run_lua tool: "json", "json+MODE", "json+session", "json+session+MODE" */
  static const char *const modes[] = { "compact", "auto", "fit", "grouped", "counts", NULL };
  if (strcmp(format, "lua") == 0) return tp__host_describe_extra(e, format, NULL, x, nx);
  for (int i = 0; modes[i]; i++) if (strcmp(format, modes[i]) == 0)
    return tp__host_describe_extra(e, format, NULL, x, nx);
  if (strncmp(format, "json", 4) != 0) return NULL;
  const char *rest = format + 4, *session = NULL;
  if (strncmp(rest, "+session", 8) == 0) { session = "session"; rest += 8; }
  if (*rest == '\0') return tp__host_describe_extra(e, "json", session, x, nx);
  if (*rest != '+') return NULL;
  for (int i = 0; modes[i]; i++) if (strcmp(rest + 1, modes[i]) == 0) {
    char what[32];
    snprintf(what, sizeof what, "json+%s", modes[i]);
    return tp__host_describe_extra(e, what, session, x, nx);
  }
  return NULL;
}

char *tp_engine_describe (tp_engine *e, const char *format) {
  return describe_as(e, format, NULL, 0);
}

char *tp_engine_describe_caller (tp_engine *e, const char *format, const char *decls,
                                 size_t len) {
  if (e == NULL || format == NULL) return NULL;
  if (decls == NULL) return describe_as(e, format, NULL, 0);
  struct tp__tool_set *set = NULL;
  if (tp__caller_set_json(e, &set, decls, len) != TP_OK) return NULL;
  const tp_tool *const *x = NULL;
  size_t nx = tp__caller_set_tools(set, &x);
  char *text = describe_as(e, format, x, nx);
  tp__caller_set_free(set);
  return text;
}

int tp_engine_set_policy (tp_engine *e, tp_policy_fn fn, void *ud) {
  if (e == NULL) return TP_EINVAL;
  e->policy = fn;
  e->policy_ud = ud;
  return TP_OK;
}

/* ---- tools one by one, unloading, the loop, the shared store ------------------------- */

int tp_engine_load_tools_cb (tp_engine *e, const char *dir, tp_problem_cb problem,
                             void *ud) {
  return tp__host_load_dir(e, dir, problem, ud);
}

int tp_engine_unload_tools (tp_engine *e) {
  if (e == NULL) return TP_EINVAL;
  if (e->core.runs != NULL) return TP_ESTATE;
  size_t n = tp__engine_drop_plugin_tools(e);
  return n > INT32_MAX ? INT32_MAX : (int)n;
}

int tp_engine_start_servers (tp_engine *e, tp_problem_cb problem, void *ud) {
  if (e == NULL) return TP_EINVAL;
  return tp__host_upstream(e, problem, ud);
}

int tp_engine_set_start_timeout (tp_engine *e, uint64_t us) {
  if (e == NULL) return TP_EINVAL;
  e->start_within_us = us;
  return TP_OK;
}

size_t tp_engine_tool_count (const tp_engine *e) { return e ? e->ntools : 0; }

int tp_engine_tool_info (const tp_engine *e, size_t i, tp_tool_info *info) {
  if (e == NULL || info == NULL || i >= e->ntools) return TP_EINVAL;
  const tp_tool *t = e->tools[i];
  memset(info, 0, sizeof *info);
  info->name = t->name;
  info->description = t->description ? t->description : "";
  info->origin = t->origin;
  info->timeout_us = t->face.timeout_us;
  return TP_OK;
}

int tp_engine_tool_schema (const tp_engine *e, size_t i, int output, char **json) {
  if (json != NULL) *json = NULL;
  if (e == NULL || json == NULL || i >= e->ntools) return TP_EINVAL;
  const json_t *s = output ? e->tools[i]->output : e->tools[i]->input;
  if (s == NULL) return TP_OK;
  *json = tp__json_dumps(s);
  return *json ? TP_OK : TP_ENOMEM;
}

void *tp_engine_loop (tp_engine *e) { return tp__engine_loop(e); }


int tp_engine_set_store (tp_engine *e, tp_store *s) {
  if (e == NULL || s == NULL) return TP_EINVAL;
  if (e->H != NULL || e->store_conn != NULL) return TP_ESTATE;
  tp__store_ref(s);
  tp__store_unref(e->store);
  e->store = s;
  return TP_OK;
}
