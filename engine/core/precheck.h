/*
** precheck.h: the pre-run check (precheck.c). When a script compiles, before anything of
** it runs, its compiled chunk is read for lines that would surely fail: a global that is
** nil there, called or indexed; a library function Lua never had; a tool path that names
** no tool, or a literal table of arguments the tool's schema refuses. Each is a finding
** at its line; the run then ends with the first as its error, all of them listed.
*/
#ifndef tidepool_precheck_h
#define tidepool_precheck_h

#include "run.h"

#define TP_FINDINGS_MAX 16
#define TP_FINDING_MSG 700

typedef struct tp_finding {
  int line;
  const char *code;        /* "runtime", "tool.unknown", "tool.invalid_input" */
  const char *hint;        /* NULL: the code's own */
  char msg[TP_FINDING_MSG];
} tp_finding;

typedef struct tp_findings {
  tp_finding f[TP_FINDINGS_MAX];
  int n;                   /* kept, sorted by line */
  int more;                /* found past TP_FINDINGS_MAX, not kept */
} tp_findings;

/* Checks the chunk compiled on top of r's script thread (nothing runs). Returns the
** number of findings kept in out; 0 also when the check could not be made (out of
** memory), which never stops a run. */
int tp__precheck(tp_run *r, tp_findings *out);
/* 0 when the chunk on top of r's script thread has nothing the check reads (no global,
** no upvalue, no function inside: `return 1`), so that tp__precheck would find nothing;
** 1 otherwise. A few instructions of the chunk looked at. */
int tp__precheck_needed(const tp_run *r);

/* How Lua does what a function of another language did (string.split, table.join,
** s:trim()...): the advice, or NULL. lib is "string", "table", "math", "os" for a
** library field, NULL for a method called with ':'. */
const char *tp__lua_way(const char *lib, const char *name);

#endif
