/*
** base.c: the small utilities every file of the host uses, kept at the bottom of the
** host's floors (engine.c, the public API, sits at the top and calls everything): an
** engine's last error and its logger (tp_engine_error, tp_engine_on_log), tp_free, and
** accessors: the engine's loop, a section of its config, the driver's record of a run.
*/
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"

void tp_free (void *p) { free(p); }

void tp__engine_set_error (tp_engine *e, const char *fmt, ...) {
  char buf[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  free(e->error);
  e->error = strdup(buf);
}

void tp_log_stderr (void *ud, tp_log_level level, const char *source, const char *message) {
  (void)ud; (void)level; (void)source;
  fprintf(stderr, "%s\n", message);
}

void tp_engine_on_log (tp_engine *e, tp_engine_log_cb cb, void *ud) {
  if (e == NULL) return;
  e->log = cb;
  e->log_ud = cb ? ud : NULL;
}

void tp__engine_log (const tp_engine *e, tp_log_level level, const char *source,
                     const char *fmt, ...) {
  char buf[4096];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (e != NULL && e->log != NULL) e->log(e->log_ud, level, source, buf);
  else tp_log_stderr(NULL, level, source, buf);
}

const char *tp_engine_error (const tp_engine *e) {
  return e != NULL && e->error != NULL ? e->error : "";
}

/* ---- accessors ------------------------------------------------------------------- */

/* The engine's libuv loop, for host.c, the MCP server and tests (not public API). */
void *tp__engine_loop (tp_engine *e) { return e ? e->loop : NULL; }

const json_t *tp__config_section (const tp_engine *e, const char *name) {
  return e->config ? json_object_get(e->config, name) : NULL;
}

/* What the driver keeps for r, made at the first need in the run's host_space (so it
** never fails: NULL is not returned any more, though callers still handle it). */
tp__drv_run *tp__driver_of (tp_run *r) {
  tp__drv_run *d = r->host_data;
  if (d == NULL) {
    d = (tp__drv_run *)(void *)r->host_space;
    memset(d, 0, sizeof *d);
    d->r = r;
    r->host_data = d;
  }
  return d;
}
