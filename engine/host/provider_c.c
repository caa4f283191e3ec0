/*
** provider_c.c: tools registered from C (tp_engine_add_tool). With a handler, a call is
** handed to it; without one, the embedding program completes the call itself
** (tp_run_pending), so the core never hands it over.
*/
#include <stdlib.h>

#include "registry.h"

/* A C tool's pdata. */
typedef struct c_tool {
  tp_tool_fn fn;
  void *ud;
} c_tool;

void *tp__c_tool_new (tp_tool_fn fn, void *ud) {
  c_tool *ct = malloc(sizeof *ct);
  if (ct != NULL) { ct->fn = fn; ct->ud = ud; }
  return ct;
}

static void c_dispatch (tp_engine *e, const tp_tool *t, tp_call *c) {
  (void)e;
  const c_tool *ct = t->pdata;
  ct->fn(c, ct->ud);
}

static void c_destroy (void *pdata) {
  free(pdata);
}

static const char *c_describe (const tp_tool *t) {
  (void)t;
  return "a C handler";
}

static const char *external_describe (const tp_tool *t) {
  (void)t;
  return "the program that embeds tidepool";
}

const tp__provider tp__c_provider = {
  "c", 0, 0, c_dispatch, NULL, NULL, c_describe, NULL, c_destroy
};

const tp__provider tp__external_provider = {
  "external", TP__TOOL_EXTERNAL, 0, NULL, NULL, NULL, external_describe, NULL, NULL
};
