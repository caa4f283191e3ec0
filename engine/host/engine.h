/*
** engine.h: the engine as the host layer keeps it (engine.c, driver.c, registry.c,
** admit.c, host.c). The core's part of it comes first (tp_core, core/run.h); the core
** reaches nothing else.
*/
#ifndef tidepool_engine_h
#define tidepool_engine_h

#include <stdint.h>
#include <stddef.h>

#include "lua.h"
#include "tidepool.h"
#include "run.h"

struct tp_tool;
struct tp_store_conn;

/* What the driver keeps for a run (r->host_data, driver.c): its place in the engine's
** ready queue and far list, and its deadline timer, made when first needed. */
typedef struct tp__drv_run {
  tp_run *r;
  struct uv_timer_s *timer;
  struct tp__drv_run *ready_prev, *ready_next; /* in the ready queue, when queued */
  int queued;
  struct tp__drv_run *far_prev, *far_next;     /* in the far list, when in_far */
  int in_far;
  uint64_t far_ns;         /* the deadline it waits for there */
  void *policy;            /* what the policy keeps for the run (policy.c), or NULL */
  int direct;              /* tp_run_set_caller(r, TP_CALLER_DIRECT): the run stands for the
                           ** model's direct call (callers.c) */
  /* its trace (trace.c): ids made at the first need, a parent from tp_run_set_traceparent */
  unsigned char trace_id[16];
  int has_trace;
  uint64_t span_id, parent_id;
  struct json_t *attrs;    /* tp_run_trace_attr: more attributes of its span, or NULL */
} tp__drv_run;

struct tp_engine {
  tp_core core;            /* first: see tp__core */
  struct tp_tool **tools;  /* sorted by name (registry.c) */
  size_t ntools, captools;
  uint64_t tool_serial;    /* the last tool's serial (registry.h) */
  int has_aliases;         /* a tool was given an alias (provider_upstream.c): a name not
                           ** found is then looked for among them (registry.c) */
  char *error;             /* tp_engine_error */
  tp_engine_log_cb log;           /* tp_engine_on_log; NULL: tp_log_stderr */
  void *log_ud;
  tp_engine_tools_cb tools_changed; /* tp_engine_on_tools_changed, or NULL */
  void *tools_changed_ud;
  struct uv_loop_s *loop;
  lua_State *H;            /* the host Lua state (host.c), or NULL until needed */
  void *host_state;        /* host.c's own data about H, while H is open */
  uint64_t start_within_us; /* tp_engine_set_start_timeout; 0: no bound */
  struct uv_idle_s *idle;  /* steps the runs started with tp_run_start */
  int idle_on;
  tp__drv_run *ready, *ready_tail; /* started runs that can take a step, oldest first */
  tp__drv_run *far;        /* waiting runs whose deadline is far off (driver.c) */
  struct uv_timer_s *far_timer;
  uint64_t slice_us;       /* time slice of a started run; 0: 5 ms */
  char *workspace;
  uint64_t workspace_max;  /* tp_engine_set_workspace_max, when workspace_max_set */
  int workspace_max_set;
  tp_store *store;         /* the state store (kv, rate buckets; store.h): one reference,
                           ** tp_engine_set_store's or a memory store made at the first
                           ** need; NULL until then */
  struct tp_store_conn *store_conn; /* e's connection to it, on e's loop (engine.c) */
  struct json_t *config;   /* tp_engine_configure: the config object, or NULL (config.c) */
  char *config_warnings;   /* what the machine lacks for it (config.c), or NULL */
  struct tp_http *http;    /* http.c's multi handle and requests, made on first use */
  tp_policy_fn policy;     /* tp_engine_set_policy; NULL allows every call */
  void *policy_ud;
  /* admit.c's tp__admit_after_policy, set by tp_engine_create: policy.c (under admit.c)
  ** admits a call it decided later, after its store answered, through it */
  void (*after_policy)(struct tp_engine *e, tp_call *c);
  struct tp__policy *pol;  /* the config's policy, principal, buckets (policy.c), or NULL */
  struct tp__tracer *tracer; /* spans and their export (trace.c), or NULL */
  int audit_fd, audit_on;  /* tp_engine_audit_calls (journal.c) */
  struct tp__metrics *metrics; /* tp_engine_metrics_on (metrics.c), or NULL */
};

/* Hands a message to e's logger (tp_engine_on_log); e may be NULL (then the default). */
void tp__engine_log(const tp_engine *e, tp_log_level level, const char *source,
                    const char *fmt, ...)
  __attribute__((format(printf, 4, 5)));
void tp__engine_set_error(tp_engine *e, const char *fmt, ...)
  __attribute__((format(printf, 2, 3)));
void *tp__engine_loop(tp_engine *e);  /* the uv_loop_t */

/* config.c: the section name of e's config (tp_engine_configure), or NULL (borrowed). */
const struct json_t *tp__config_section(const tp_engine *e, const char *name);
void tp__config_free(tp_engine *e);

/* callers.c: who may call tool t (TP_CALLER_SCRIPT | TP_CALLER_DIRECT), from the config's
** tool_settings; both without them. */
struct tp_call;
int tp__tool_callers(const tp_engine *e, const struct tp_tool *t);
/* Whether call c's caller (its run's: a script, or the model directly) may call tool t: 1,
** or 0 when c has been failed with tool.denied saying who may. */
int tp__callers_admit(tp_engine *e, struct tp_call *c, const struct tp_tool *t);

/* driver.c: the libuv driver of started runs, and the synchronous wait. */
extern const tp__host_hooks tp__engine_hooks;  /* admit.c: what the core tells the host */
int  tp__driver_wake(void *ud, tp_run *r);     /* tp__host_hooks.wake */
void tp__driver_run_gone(void *ud, tp_run *r); /* tp__host_hooks.run_gone */
/* Runs the engine's loop until something may have changed for r (a synchronous run). */
void tp__driver_wait(tp_run *r);
/* Closes the driver's handles and the loop (tp_engine_destroy). */
void tp__driver_close(tp_engine *e);
/* What the driver keeps for r (r->host_data), made at the first need in the run's own
** room for it (tp_run.host_space). */
tp__drv_run *tp__driver_of(tp_run *r);

#endif
