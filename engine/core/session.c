/*
** session.c: a session is a sandbox that keeps its globals from one run to the next
** (tp_session_*). Core.
*/
#include <stdlib.h>

#include "run.h"

tp_session *tp_session_create (tp_engine *e, const tp_limits *limits) {
  if (e == NULL) return NULL;
  tp_limits lim;
  if (limits) lim = *limits;
  else tp_limits_init(&lim);
  tp_session *s = calloc(1, sizeof *s);
  if (s == NULL) return NULL;
  s->e = e;
  s->sb = tp__sandbox_create(&lim);
  if (s->sb == NULL) { free(s); return NULL; }
  return s;
}

tp_run *tp_session_run (tp_session *s, const char *source, size_t len) {
  if (s == NULL || source == NULL || s->busy != NULL) return NULL;
  if (tp__sandbox_reset(s->sb) != 0) return NULL;
  tp_run *r = tp__run_new(s->e, s->sb, source, len);
  if (r == NULL) return NULL;
  r->session = s;
  s->busy = r;
  if (s->own_tools) tp__run_recheck(r);  /* its tools were not known to the first check */
  return r;
}

size_t tp_session_memory (const tp_session *s) { return s ? s->sb->mem_used : 0; }

void tp_session_destroy (tp_session *s) {
  if (s == NULL) return;
  if (s->busy) tp_run_destroy(s->busy);
  const tp_core *k = tp__core(s->e);
  if (k->hooks->session_gone) k->hooks->session_gone(k->ud, s);
  tp__sandbox_destroy(s->sb);
  free(s);
}

