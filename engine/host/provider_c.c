/*
** provider_c.c: tools registered from C (tp_engine_add_tool). With a handler, a call is
** handed to it; without one, the embedding program completes the call itself
** (tp_run_pending), so the core never hands it over.
*/
#include "registry.h"

static void c_dispatch (tp_engine *e, const tp_tool *t, tp_call *c) {
  (void)e;
  t->fn(c, t->ud);
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
  "c", 0, 0, c_dispatch, NULL, NULL, c_describe
};

const tp__provider tp__external_provider = {
  "external", TP__TOOL_EXTERNAL, 0, NULL, NULL, NULL, external_describe
};
