/*
** timeline.c: when each listed call of a run started, waited for a person and ended
** (tp_run_timeline, tidepool_server.h), for an operator's waterfall of the run. Read from
** the call records the run keeps for its envelope; nothing is recorded for it.
*/
#include <stdlib.h>

#include "tidepool_server.h"
#include "util.h"
#include "calls.h"
#include "json.h"

/* ns after the run's start in milliseconds to the microsecond (0 before it). */
static json_t *ms_after (uint64_t t, uint64_t start) {
  uint64_t us = t > start ? (t - start) / 1000 : 0;
  return json_real((double)us / 1e3);
}

char *tp_run_timeline (const tp_run *r, size_t *len) {
  if (r == NULL || r->start_ns == 0) return NULL;
  uint64_t now = tp__now_ns(), start = r->start_ns;
  json_t *calls = json_array();
  json_t *root = calls ? json_pack("{s:o, s:o}", "ms", ms_after(now, start), "calls", calls)
                       : NULL;
  if (root == NULL) { json_decref(calls); return NULL; }
  for (size_t i = 0; i < r->ncallv; i++) {
    const tp_call *c = r->callv[i];
    if (c == NULL || c->start_ns == 0) continue;
    int done = c->state == CALL_DONE;
    uint64_t end = done && c->end_ns ? c->end_ns : now;
    json_t *e = json_pack("{s:I, s:s, s:o, s:o, s:b}", "seq", (json_int_t)c->id,
                          "tool", c->name ? c->name : "?", "at", ms_after(c->start_ns, start),
                          "end", ms_after(end, start), "ok", done && c->ok);
    if (e == NULL) goto oom;
    if (!done && r->state != ST_DONE)  /* under way (or held) */
      json_object_set_new(e, "running", json_true());
    else if (!(done && c->ok))  /* as the envelope's record says it */
      json_object_set_new(e, "code", json_string(done && c->code ? c->code : "cancelled"));
    if (c->hold_start_ns) {
      json_object_set_new(e, "held_at", ms_after(c->hold_start_ns, start));
      json_object_set_new(e, "held_end", ms_after(c->hold_end_ns ? c->hold_end_ns : now, start));
    }
    if (json_array_append_new(calls, e) != 0) goto oom;
  }
  char *text = tp__json_dumpsn(root, len);
  json_decref(root);
  return text;
oom:
  json_decref(root);
  return NULL;
}
