/*
** policy.h: the config file's "policy" section (policy.c): rules over tool names with
** conditions on the arguments, call counts, rate buckets and scopes, compiled when the
** config is loaded and applied to every call before its arguments are checked.
*/
#ifndef tidepool_policy_h
#define tidepool_policy_h

#include <stdint.h>
#include <jansson.h>

#include "engine.h"

struct tp_tool;

/* Compiles section (the config's "policy" value, or NULL when the config has none) and
** makes it e's policy, replacing the one before (its counters and buckets start afresh).
** TP_OK; TP_EINVAL with tp_engine_error saying which rule, field and column is wrong
** ("policy.rules[3].where: column 14: expected a value after '<='"), e's policy left as
** it was; TP_ENOMEM. */
int tp__policy_load(tp_engine *e, const json_t *section);

/* Compiles section as tp__policy_load does, for a check alone (tp_config_check): TP_OK,
** or TP_EINVAL / TP_ENOMEM with err set to what tp__policy_load would say, without
** "config: ". */
int tp__policy_check(const json_t *section, char *err, size_t errlen);

/* Decides on call c of tool t (admit.c, before its arguments are checked): 1 when it may
** go on, 0 when c has been failed (tool.denied, tool.rate_limited) or held for approval
** (an ask rule: tp_engine_on_approval's callback was told, and may have decided it
** already) or for the state store's rate buckets (admitted or failed when it answers).
** Without a policy this is one pointer test. */
int tp__policy_decide(tp_engine *e, tp_call *c, struct tp_tool *t);
/* The effect and rule of the last decision of e's config policy (for its span): the rule,
** and *effect NULL when it said nothing (the call was allowed, by no rule); -2 when e's
** config has no policy. */
int tp__policy_last(const tp_engine *e, const char **effect);
/* admit.c: the rest of a call's admission once the config's policy allowed it (the
** embedding program's policy, the schema check); for a call the policy held while its
** rate buckets in the state store answered. */
void tp__admit_after_policy(tp_engine *e, tp_call *c);

/* What the policy keeps for a run (tp__drv_run.policy), freed when the run goes. */
void tp__policy_run_free(void *pr);

/* Whether dotted name matches glob: `*` one part (or, inside a part, any run of characters
** but a dot), `**` any number of parts (tool_settings share the policy's globs). */
int tp__glob_match(const char *glob, const char *name);

/* Frees e's policy, principal and buckets (tp_engine_destroy). */
void tp__policy_free(tp_engine *e);

/* The clock of the rate buckets, in nanoseconds (CLOCK_MONOTONIC by default; NULL puts
** it back): the C tests drive buckets with a fake clock instead of sleeping. */
void tp__policy_set_clock(tp_engine *e, uint64_t (*now_ns)(void *ud), void *ud);

/* Nonzero: conditions are evaluated on the arguments' tree even when the codec kept them
** as text (for the differential test, which decides the same calls both ways; never set
** in production). */
extern int tp__policy_text_off;

#endif
