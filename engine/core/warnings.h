/*
** warnings.h: the envelope's "warnings", advice about legal Lua that most likely gives a
** wrong answer (warnings.c).
*/
#ifndef tidepool_warnings_h
#define tidepool_warnings_h

#include "lua.h"
#include "run.h"

#define TP_WARNINGS_MAX 10

/* Adds {line, message} to r's warnings (once each; at most TP_WARNINGS_MAX). */
void tp__run_warn(tp_run *r, int line, const char *fmt, ...)
  __attribute__((format(printf, 3, 4)));

/* Removes r's warnings at line whose message starts with prefix. */
void tp__run_unwarn(tp_run *r, int line, const char *prefix);

/* The start of the pre-run check's t.length warning (precheck.c), which a run's own
** finding at that line replaces (tp__sb_arrindex). */
#define TP_WARN_LENGTH_STATIC "t.length is nil unless the table has a field named length"

/* __index of tables decoded from JSON arrays: nil, with a warning for t.length. */
int tp__sb_arrindex(lua_State *L);

/* string.format's %s of the table at idx (without __tostring): warns that it shows no
** contents (json.encode does). */
void tp__warn_table_text(lua_State *L, int idx);

/* __len of tables decoded from JSON objects: their raw length, with a warning when the
** object has keys (#t of an object is always 0). */
int tp__sb_objlen(lua_State *L);

/* The sandbox's ipairs (sandbox/allowlist.h). */
int tp__sb_ipairs(lua_State *L);

#endif
