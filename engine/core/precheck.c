/*
** precheck.c: the pre-run check. A model's script often makes real calls (creates an
** issue, charges a card) and then dies on a typo three lines later; so when a script
** compiles, before any of it runs, its compiled chunk is read for lines that would
** surely fail, and the run ends there with every such line listed.
**
** What is read: Lua's bytecode already names every global read and written
** (GETTABUP/SETTABUP on the chunk's _ENV upvalue) and every constant field path
** (GETFIELD chains). A finding needs a value that is surely nil, then surely used as a
** table or a function: from the load of the value, every instruction up to its use
** must run in a straight line (forward jumps that land before the use, as in argument
** expressions, are fine), writing no register at or below the value's. Reads that
** cannot fail (`if jit then`, `x == nil`) are never findings.
**
** No false positives: a global the script assigns anywhere counts as defined; a global
** already in the sandbox (a session's, from an earlier run) is defined; and global
** checks are off for a script that reaches its globals dynamically (_ENV as a value,
** _G other than _G.name, load: the text it loads may assign globals), or whose globals
** table has another __index than the sandbox's. Tool names are checked only where the
** host says its tools are all known.
**
** Cost: one pass over the instructions to collect assigned names, one to check; a
** table lookup per global read, by the name's interned string (no API call); each
** library's real table found once a check. A 50-line script takes about 1.3 us (make
** bench: precheck_us), under a cold run of a trivial script.
*/
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lauxlib.h"
#include "lobject.h"
#include "lopcodes.h"
#include "lstate.h"
#include "ldebug.h"
#include "lgc.h"
#include "ltable.h"

#include "precheck.h"
#include "sandbox.h"
#include "allowlist.h"
#include "warnings.h"

#define SCAN_MAX 2048       /* instructions looked at from a load to its use */
#define NAMES_MAX 512       /* names the script assigns; past it, global checks are off */
#define DEPTH_MAX 64        /* nested functions followed */
#define KEYS_MAX 64         /* fields of a literal table of arguments */
#define MAXREG 256
#define WORK_MAX 2000000    /* instructions looked at in all (a few ms at most); past it
                            ** the check stops, and global checks are off */

/* ---- how Lua does it -------------------------------------------------------------- */

static const struct { const char *lib, *name, *way; } lua_ways[] = {
  { "string", "split", "split with gmatch: for part in s:gmatch(\"[^,]+\") do ... end" },
  { "string", "trim", "trim with s:match(\"^%s*(.-)%s*$\")" },
  { "string", "strip", "trim with s:match(\"^%s*(.-)%s*$\")" },
  { "string", "startswith", "test a prefix with s:sub(1, #prefix) == prefix" },
  { "string", "startsWith", "test a prefix with s:sub(1, #prefix) == prefix" },
  { "string", "endswith", "test a suffix with suffix == \"\" or s:sub(-#suffix) == suffix" },
  { "string", "endsWith", "test a suffix with suffix == \"\" or s:sub(-#suffix) == suffix" },
  { "string", "includes", "search with s:find(text, 1, true) (true: plain text, no pattern)" },
  { "string", "contains", "search with s:find(text, 1, true) (true: plain text, no pattern)" },
  { "string", "replace", "replace with s:gsub(pattern, replacement) (escape magic characters "
    "such as . - + with %)" },
  { "string", "replaceAll", "replace with s:gsub(pattern, replacement)" },
  { "string", "toUpperCase", "use s:upper()" },
  { "string", "toLowerCase", "use s:lower()" },
  { "string", "indexOf", "use s:find(text, 1, true), which returns the start and end" },
  { "string", "substring", "use s:sub(i, j) (1-based, j inclusive)" },
  { "string", "substr", "use s:sub(i, j) (1-based, j inclusive)" },
  { "string", "join", "join with table.concat(list, sep)" },
  { "string", "length", "use #s for a string's length" },
  { "table", "join", "join with table.concat(list, sep)" },
  { "table", "map", "write a loop: local out = {} for i, v in ipairs(t) do out[i] = f(v) end" },
  { "table", "filter", "write a loop: local out = {} for _, v in ipairs(t) do if keep(v) then "
    "out[#out + 1] = v end end" },
  { "table", "reduce", "write a loop: local acc = init for _, v in ipairs(t) do "
    "acc = f(acc, v) end" },
  { "table", "foreach", "write a loop: for i, v in ipairs(t) do ... end" },
  { "table", "forEach", "write a loop: for i, v in ipairs(t) do ... end" },
  { "table", "push", "append with table.insert(t, v) or t[#t + 1] = v" },
  { "table", "append", "append with table.insert(t, v) or t[#t + 1] = v" },
  { "table", "add", "append with table.insert(t, v) or t[#t + 1] = v" },
  { "table", "pop", "take the last item with table.remove(t)" },
  { "table", "length", "use #t for the length of an array" },
  { "table", "len", "use #t for the length of an array" },
  { "table", "size", "use #t for an array; count a map's keys with a pairs loop" },
  { "table", "count", "use #t for an array; count a map's keys with a pairs loop" },
  { "table", "keys", "write a loop: local ks = {} for k in pairs(t) do ks[#ks + 1] = k end" },
  { "table", "values", "write a loop: local vs = {} for _, v in pairs(t) do vs[#vs + 1] = v end" },
  { "table", "contains", "write a loop: for _, v in ipairs(t) do if v == x then ... end end" },
  { "table", "includes", "write a loop: for _, v in ipairs(t) do if v == x then ... end end" },
  { "table", "indexOf", "write a loop: for i, v in ipairs(t) do if v == x then ... end end" },
  { "table", "slice", "use table.move(t, i, j, 1, {}) or a loop" },
  { "table", "reverse", "write a loop: for i = #t, 1, -1 do ... end" },
  { "table", "copy", "write a loop: local c = {} for k, v in pairs(t) do c[k] = v end" },
  { "table", "getn", "use #t for the length of an array" },
  { "math", "round", "round with math.floor(x + 0.5)" },
  { "math", "trunc", "use math.tointeger(x) or (x >= 0 and math.floor(x) or math.ceil(x))" },
  { "math", "pow", "use x ^ y" },
  { "math", "sum", "write a loop: local s = 0 for _, v in ipairs(t) do s = s + v end" },
  { "math", "isnan", "test with x ~= x" },
  { "os", "getenv", "the sandbox has no environment: pass values in the script" },
  { "os", "execute", "the sandbox runs no commands: use a tool (tools.list())" },
  { "os", "now", "use os.time() (seconds) or os.clock()" },
  /* methods called with ':' (arr:append(x), s:trim()) */
  { NULL, "split", "split a string with gmatch: for part in s:gmatch(\"[^,]+\") do ... end" },
  { NULL, "trim", "trim a string with s:match(\"^%s*(.-)%s*$\")" },
  { NULL, "strip", "trim a string with s:match(\"^%s*(.-)%s*$\")" },
  { NULL, "append", "append to an array with table.insert(t, v) or t[#t + 1] = v" },
  { NULL, "push", "append to an array with table.insert(t, v) or t[#t + 1] = v" },
  { NULL, "join", "join an array with table.concat(t, sep)" },
  { NULL, "map", "write a loop: local out = {} for i, v in ipairs(t) do out[i] = f(v) end" },
  { NULL, "filter", "write a loop: for _, v in ipairs(t) do if keep(v) then out[#out + 1] = v "
    "end end" },
  { NULL, "forEach", "write a loop: for i, v in ipairs(t) do ... end" },
  { NULL, "startswith", "test a prefix with s:sub(1, #prefix) == prefix" },
  { NULL, "startsWith", "test a prefix with s:sub(1, #prefix) == prefix" },
  { NULL, "endswith", "test a suffix with s:sub(-#suffix) == suffix" },
  { NULL, "endsWith", "test a suffix with s:sub(-#suffix) == suffix" },
  { NULL, "includes", "search a string with s:find(text, 1, true); an array with a loop" },
  { NULL, "contains", "search a string with s:find(text, 1, true); an array with a loop" },
  { NULL, "replace", "replace with s:gsub(pattern, replacement)" },
  { NULL, "toUpperCase", "use s:upper()" },
  { NULL, "toLowerCase", "use s:lower()" },
  { NULL, "indexOf", "use s:find(text, 1, true) for a string; a loop for an array" },
  { NULL, "substring", "use s:sub(i, j) (1-based, j inclusive)" },
  { NULL, "keys", "write a loop: for k, v in pairs(t) do ... end" },
  { NULL, "length", "use #t (or #s)" },
  { NULL, "pop", "take the last item with table.remove(t)" },
};

const char *tp__lua_way (const char *lib, const char *name) {
  for (size_t i = 0; i < sizeof lua_ways / sizeof lua_ways[0]; i++) {
    if (strcmp(lua_ways[i].name, name) != 0) continue;
    if ((lib == NULL) != (lua_ways[i].lib == NULL)) continue;
    if (lib == NULL || strcmp(lib, lua_ways[i].lib) == 0) return lua_ways[i].way;
  }
  return NULL;
}

/* ---- the walk --------------------------------------------------------------------- */

typedef struct pcx {
  tp_run *r;
  lua_State *L;
  int G;                        /* the globals table, on L */
  int globals;                  /* global checks on */
  const TString *assigned[NAMES_MAX];
  size_t nassigned;
  const TString *probed[NAMES_MAX];  /* globals also read where nil is fine (`if T then`) */
  size_t nprobed;
  const Proto *chain[DEPTH_MAX];/* the function being checked and those around it */
  int closure_pc[DEPTH_MAX];    /* where chain[i] makes chain[i + 1] */
  int depth;
  tp_findings *out;
  int kv_get;                   /* the script calls tools.kv.get */
  int nil_tests[4], nnil;       /* lines that test x.value against nil */
  Table *gt;                    /* the globals table, read without the API (hot) */
  const TString *s_load, *s_G, *s_tools, *s_length, *s_value;  /* interned, anchored on L
                                ** below G: names compared by address */
  struct { const TString *name; Table *real; } lib[8];  /* libraries met: their real
                                ** tables (NULL: none), found once a check */
  int nlib;
} pcx;

static const char *kstr (const Proto *p, int k) {
  if (k < 0 || k >= p->sizek || !ttisshrstring(&p->k[k])) return NULL;
  return getstr(tsvalue(&p->k[k]));
}

static const TString *kts (const Proto *p, int k) {
  if (k < 0 || k >= p->sizek || !ttisshrstring(&p->k[k])) return NULL;
  return tsvalue(&p->k[k]);
}

static int in_list (const TString *const *list, size_t n, const TString *ts) {
  for (size_t i = 0; i < n; i++)
    if (list[i] == ts) return 1;
  return 0;
}

static int is_assigned (const pcx *x, const TString *ts) {
  for (size_t i = 0; i < x->nassigned; i++)
    if (x->assigned[i] == ts) return 1;  /* short strings are interned */
  return 0;
}

static void assign (pcx *x, const TString *ts) {
  if (ts == NULL) { x->globals = 0; return; }
  if (is_assigned(x, ts)) return;
  if (x->nassigned == NAMES_MAX) { x->globals = 0; return; }
  x->assigned[x->nassigned++] = ts;
}

static __thread long work;  /* what is left of WORK_MAX, for the check on this thread */

/* Whether instruction i may skip to another place (and where: *to), or stops the walk. */
enum { GO_ON, GO_JUMP, GO_STOP };
static int flow (const Instruction *code, int pc, int *to) {
  Instruction i = code[pc];
  OpCode op = GET_OPCODE(i);
  switch (op) {
    case OP_JMP: *to = pc + 1 + GETARG_sJ(i); return GO_JUMP;
    case OP_LFALSESKIP: *to = pc + 2; return GO_JUMP;
    case OP_EQ: case OP_LT: case OP_LE: case OP_EQK: case OP_EQI: case OP_LTI: case OP_LEI:
    case OP_GTI: case OP_GEI: case OP_TEST: case OP_TESTSET:
      *to = pc + 2;
      return GO_JUMP;
    case OP_RETURN: case OP_RETURN0: case OP_RETURN1: case OP_TAILCALL: case OP_FORLOOP:
    case OP_FORPREP: case OP_TFORPREP: case OP_TFORCALL: case OP_TFORLOOP: case OP_CLOSE:
    case OP_TBC: case OP_SETUPVAL: case OP_SETTABUP: case OP_VARARGPREP:
      return GO_STOP;
    default: return GO_ON;
  }
}

/* The lowest register instruction i writes, or MAXREG when it writes none. */
static int writes_from (Instruction i) {
  OpCode op = GET_OPCODE(i);
  if (!testAMode(op)) return MAXREG;
  return GETARG_A(i);
}

enum { USE_NONE, USE_INDEX, USE_CALL };

/* Register reg was just loaded at pc. The pc of the first instruction that surely runs
** next and uses reg as a table (index, set) or a function (call), with *how; -1 when
** there is none or it cannot be told. */
static int use_of (const Proto *p, int pc, int reg, int *how) {
  int reach = 0;  /* the farthest forward jump seen */
  int end = p->sizecode;
  if (end > pc + SCAN_MAX) end = pc + SCAN_MAX;
  for (int i = pc + 1; i < end; i++) {
    if (--work < 0) return -1;
    Instruction in = p->code[i];
    OpCode op = GET_OPCODE(in);
    int use = USE_NONE;
    switch (op) {
      case OP_GETFIELD: case OP_GETTABLE: case OP_GETI: case OP_SELF:
        if (GETARG_B(in) == reg) use = USE_INDEX;
        break;
      case OP_SETFIELD: case OP_SETTABLE: case OP_SETI:
        if (GETARG_A(in) == reg) use = USE_INDEX;
        break;
      case OP_CALL: case OP_TAILCALL:
        if (GETARG_A(in) == reg) use = USE_CALL;
        break;
      default: break;
    }
    if (use != USE_NONE) {
      if (reach > i) return -1;
      *how = use;
      return i;
    }
    int to = 0;
    int f = flow(p->code, i, &to);
    if (f == GO_STOP) return -1;
    if (f == GO_JUMP) {
      if (to <= i) return -1;   /* a loop */
      if (to > reach) reach = to;
    }
    if (writes_from(in) <= reg) return -1;
  }
  return -1;
}

static int line_of (const Proto *p, int pc) {
  return luaG_getfuncline((Proto *)p, pc);
}

static void add (pcx *x, int line, const char *code, const char *hint, const char *fmt, ...)
  __attribute__((format(printf, 5, 6)));
static void add (pcx *x, int line, const char *code, const char *hint, const char *fmt, ...) {
  tp_findings *o = x->out;
  char msg[TP_FINDING_MSG];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  for (int i = 0; i < o->n; i++)
    if (o->f[i].line == line && strcmp(o->f[i].msg, msg) == 0) return;
  if (o->n == TP_FINDINGS_MAX) { o->more++; return; }
  int at = o->n;  /* sorted by line, in the order found within a line */
  while (at > 0 && o->f[at - 1].line > line) at--;
  memmove(&o->f[at + 1], &o->f[at], (size_t)(o->n - at) * sizeof o->f[0]);
  o->n++;
  tp_finding *f = &o->f[at];
  f->line = line;
  f->code = code;
  f->hint = hint;
  memcpy(f->msg, msg, sizeof msg);
}

/* Levenshtein distance of a and b, capped at 9. */
static int distance (const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  if (la > 40 || lb > 40) return 9;
  if ((la > lb ? la - lb : lb - la) > 3) return 9;
  int row[41];
  for (size_t j = 0; j <= lb; j++) row[j] = (int)j;
  for (size_t i = 1; i <= la; i++) {
    int diag = row[0];
    row[0] = (int)i;
    for (size_t j = 1; j <= lb; j++) {
      int up = row[j];
      int ca = a[i - 1], cb = b[j - 1];
      int cost = ca == cb ? 0 : (ca | 32) == (cb | 32) ? 0 : 1;
      int v = diag + cost;
      if (row[j] + 1 < v) v = row[j] + 1;
      if (row[j - 1] + 1 < v) v = row[j - 1] + 1;
      row[j] = v;
      diag = up;
    }
  }
  return row[lb] > 9 ? 9 : row[lb];
}

typedef struct near { const char *best; int dist; } near;

static void consider (near *n, const char *name, const char *cand) {
  if (cand == NULL || strcmp(name, cand) == 0 || cand[0] == '_') return;
  int d = distance(name, cand);
  int ok = strlen(name) <= 4 ? d <= 1 : d <= 2;
  if (ok && d < n->dist) { n->best = cand; n->dist = d; }
}

/* The nearest name to name among the table at idx's string keys. */
static void consider_table (lua_State *L, int idx, near *n, const char *name) {
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    lua_pop(L, 1);
    if (lua_type(L, -1) == LUA_TSTRING) consider(n, name, lua_tostring(L, -1));
  }
}

/* The local named ts that a function around the use (or its own function, after pc)
** declares later: its line, or 0. */
static int local_later (const pcx *x, const TString *ts, int pc) {
  for (int d = x->depth; d >= 0; d--) {
    const Proto *p = x->chain[d];
    int after = d == x->depth ? pc : x->closure_pc[d];
    for (int v = 0; v < p->sizelocvars; v++) {
      const LocVar *lv = &p->locvars[v];
      if (lv->varname == ts && lv->startpc > after) {
        int at = lv->startpc < p->sizecode ? lv->startpc : p->sizecode - 1;
        if (at > 0 && GET_OPCODE(p->code[at - 1]) == OP_CLOSURE) at--;
        return line_of(p, at);
      }
    }
  }
  return 0;
}

#define HINT_NAME "Nothing ran: the script was checked before running. Fix the name: Lua " \
  "has only its standard library (string, table, math, utf8, coroutine, os.time/clock/date) " \
  "and tidepool's json, tools and parallel."
#define HINT_WAY "Nothing ran: the script was checked before running. Lua's standard " \
  "library is small: write it the Lua way the message shows."
#define HINT_LATER "Nothing ran: the script was checked before running. A local is " \
  "visible only below the line that declares it: define functions before the code " \
  "that calls them."

/* Why the sandbox leaves out lib.name (lib "_G" for a global; name NULL for a whole
** library), or NULL when it is not one of Lua's that the sandbox drops. */
static const char *dropped (const char *lib, const char *name) {
  for (size_t i = 0; i < tp__allowlist_len; i++) {
    const tp_allow *a = &tp__allowlist[i];
    if (a->kind != TP_DROP || strcmp(a->lib, lib) != 0) continue;
    if (name == NULL ? a->name == NULL : a->name != NULL && strcmp(a->name, name) == 0)
      return a->reason;
  }
  return NULL;
}

#define HINT_DROPPED "Nothing ran: the script was checked before running. The sandbox " \
  "has no files, modules or host access: do it with a tool (tools.list(), tools.search)."

/* A global the sandbox does not hold and the script never assigns, surely used. */
static void undefined_global (pcx *x, const Proto *p, int pc, const TString *ts, int usepc,
                              int how) {
  const char *name = getstr(ts);
  int line = line_of(p, usepc);
  const char *say = tp__sandbox_foreign_say(name);
  if (say) {  /* the message the globals' __index raises at run time, at the read */
    add(x, line_of(p, pc), "runtime", NULL, "%s", say);
    return;
  }
  const char *why = dropped("_G", name);
  if (why == NULL) why = dropped(name, NULL);
  if (why) {
    add(x, line, "runtime", HINT_DROPPED, "`%s` is not available in the sandbox (%s)",
        name, why);
    return;
  }
  int later = local_later(x, ts, pc);
  if (later) {
    add(x, line, "runtime", HINT_LATER, "`%s` is %s on line %d before its `local` on line %d "
        "is declared, so it is a global here, and nil: move the local (function) %s above "
        "line %d, or declare `local %s` first and assign it later", name,
        how == USE_CALL ? "called" : "indexed", line, later, name, line, name);
    return;
  }
  near n = { NULL, 9 };
  consider_table(x->L, x->G, &n, name);
  for (size_t i = 0; i < x->nassigned; i++) consider(&n, name, getstr(x->assigned[i]));
  for (int d = x->depth; d >= 0; d--)
    for (int v = 0; v < x->chain[d]->sizelocvars; v++) {
      const TString *vn = x->chain[d]->locvars[v].varname;
      if (vn) consider(&n, name, getstr(vn));
    }
  const char *what = how == USE_CALL ? "calling it" : "indexing it";
  if (n.best)
    add(x, line, "runtime", HINT_NAME, "`%s` is not defined (the sandbox has no global `%s` "
        "and the script never assigns one), so %s fails; did you mean `%s`?", name, name,
        what, n.best);
  else
    add(x, line, "runtime", HINT_NAME, "`%s` is not defined (the sandbox has no global `%s` "
        "and the script never assigns one), so %s fails", name, name, what);
}

/* The real table behind the read-only library `name` whose proxy is v, or NULL; a
** library a session has not built yet is built (sandbox.c). Found once a check: a
** 50-line script names string or table a dozen times. */
static Table *library_table (pcx *x, const TString *name, const TValue *v) {
  for (int i = 0; i < x->nlib; i++)
    if (x->lib[i].name == name) return x->lib[i].real;
  lua_State *L = x->L;
  setobj2s(L, L->top.p, v);
  L->top.p++;
  Table *real = tp__sandbox_library(L) ? hvalue(s2v(L->top.p - 1)) : NULL;
  lua_settop(L, x->G);
  if (x->nlib < (int)(sizeof x->lib / sizeof x->lib[0])) {
    x->lib[x->nlib].name = name;  /* reachable from the globals, as real is from name's */
    x->lib[x->nlib++].real = real;  /* proxy: both outlive the check */
  }
  return real;
}

/* lib.<field> at pc+1, lib being the library v (a table) named name. */
static void library_field (pcx *x, const Proto *p, int pc, const TString *name,
                           const TValue *v) {
  if (pc + 1 >= p->sizecode) return;
  Instruction in = p->code[pc + 1];
  if (GET_OPCODE(in) != OP_GETFIELD || GETARG_B(in) != GETARG_A(p->code[pc])) return;
  const TString *fts = kts(p, GETARG_C(in));
  if (fts == NULL) return;
  Table *rt = library_table(x, name, v);
  if (rt == NULL) return;
  if (!ttisnil(luaH_getshortstr(rt, (TString *)fts))) return;
  int how = 0;
  if (use_of(p, pc + 1, GETARG_A(in), &how) < 0) return;
  const char *lib = getstr(name), *field = getstr(fts);
  lua_State *L = x->L;
  sethvalue2s(L, L->top.p, rt);
  L->top.p++;
  int real = lua_gettop(L);
  int line = line_of(p, pc + 1);
  const char *way = tp__lua_way(lib, field), *why = dropped(lib, field);
  near n = { NULL, 9 };
  if (way == NULL) consider_table(L, real, &n, field);
  if (why && way == NULL)
    add(x, line, "runtime", HINT_DROPPED, "%s.%s is not available in the sandbox (%s)",
        lib, field, why);
  else if (way)
    add(x, line, "runtime", HINT_WAY, "%s.%s does not exist in Lua: %s", lib, field, way);
  else if (n.best)
    add(x, line, "runtime", HINT_NAME, "%s.%s does not exist in Lua; did you mean %s.%s?",
        lib, field, lib, n.best);
  else
    add(x, line, "runtime", HINT_NAME, "%s.%s does not exist in Lua (the sandbox's %s "
        "library has no such function)", lib, field, lib);
  lua_settop(L, x->G);
}

/* tools.a.b(...) from pc: the tool's name, and its literal table of arguments. */
static void tool_path (pcx *x, const Proto *p, int pc) {
  const tp_core *k = tp__core(x->r->e);
  if (k->hooks->precheck_call == NULL) return;
  char name[TP_TOOL_NAME_MAX + 1];
  size_t nlen = 0;
  int reg = GETARG_A(p->code[pc]), j = pc + 1;
  for (; j < p->sizecode; j++) {
    Instruction in = p->code[j];
    const char *seg = GET_OPCODE(in) == OP_GETFIELD && GETARG_B(in) == reg
                      ? kstr(p, GETARG_C(in)) : NULL;
    if (seg == NULL) break;
    size_t sl = strlen(seg);
    if (nlen + sl + 2 > sizeof name) return;
    if (nlen) name[nlen++] = '.';
    memcpy(name + nlen, seg, sl);
    nlen += sl;
    reg = GETARG_A(in);
  }
  if (nlen == 0) return;
  name[nlen] = '\0';
  /* the first letter first: most calls are none of these */
  if (name[0] == 'k' && strcmp(name, "kv.get") == 0) x->kv_get = 1;
  if ((name[0] == 'l' && strcmp(name, "list") == 0) ||
      (name[0] == 'd' && strcmp(name, "describe") == 0) ||
      (name[0] == 's' && strcmp(name, "search") == 0))
    return;  /* discovery */
  int how = 0, callpc = use_of(p, j - 1, reg, &how);
  if (callpc < 0 || how != USE_CALL) return;  /* CALL, or TAILCALL in `return tools.x{}` */
  /* one literal table as the argument: NEWTABLE reg+1 right after the path */
  const char *keys[KEYS_MAX];
  unsigned char sure[KEYS_MAX];
  size_t nkeys = 0;
  int literal = 0, closed = 1, t = reg + 1;
  if (GETARG_B(p->code[callpc]) == 2 && j < callpc && GET_OPCODE(p->code[j]) == OP_NEWTABLE &&
      GETARG_A(p->code[j]) == t) {
    literal = 1;
    unsigned char nonnil[MAXREG];
    unsigned char target[SCAN_MAX];
    int from = j + 2;  /* NEWTABLE is followed by EXTRAARG */
    memset(nonnil, 0, sizeof nonnil);
    /* read below only from `from` up to the call */
    memset(target, 0, callpc - from < SCAN_MAX ? (size_t)(callpc > from ? callpc - from : 0)
                                               : sizeof target);
    for (int i = from; i < callpc && i - from < SCAN_MAX; i++) {
      Instruction in = p->code[i];
      OpCode op = GET_OPCODE(in);
      int a = GETARG_A(in);
      if (target[i - from]) memset(nonnil, 0, sizeof nonnil);  /* paths meet */
      if ((op == OP_SETFIELD) && a == t) {
        const char *key = kstr(p, GETARG_B(in));
        int c = GETARG_C(in);
        int present = 1, nn;
        if (GETARG_k(in)) nn = present = c < p->sizek && !ttisnil(&p->k[c]);
        else nn = nonnil[c];
        if (key == NULL || nkeys == KEYS_MAX) { closed = 0; continue; }
        if (!present) continue;  /* {k = nil}: not sent */
        keys[nkeys] = key;
        sure[nkeys++] = (unsigned char)nn;
        continue;
      }
      if ((op == OP_SETTABLE || op == OP_SETI || op == OP_SETLIST) && a == t) {
        closed = 0;
        continue;
      }
      int to = 0;
      if (flow(p->code, i, &to) == GO_JUMP) {
        memset(nonnil, 0, sizeof nonnil);
        if (to - from < SCAN_MAX && to > i) target[to - from] = 1;
        if (op != OP_TESTSET && op != OP_LFALSESKIP) continue;
      }
      if (!testAMode(op)) continue;
      if (a == t) { literal = 0; break; }  /* something else in its place */
      switch (op) {
        case OP_LOADI: case OP_LOADF: case OP_LOADKX: case OP_LOADFALSE: case OP_LOADTRUE:
        case OP_NEWTABLE: case OP_CLOSURE: case OP_NOT:
          nonnil[a] = 1;
          break;
        case OP_LOADK: {
          int kb = GETARG_Bx(in);
          nonnil[a] = kb < p->sizek && !ttisnil(&p->k[kb]);
          break;
        }
        case OP_MOVE: nonnil[a] = nonnil[GETARG_B(in)]; break;
        case OP_CALL: case OP_VARARG: case OP_LOADNIL: case OP_SELF: case OP_CONCAT:
          for (int r = a; r < MAXREG; r++) nonnil[r] = 0;
          break;
        default: nonnil[a] = 0; break;
      }
    }
  }
  char msg[TP_FINDING_MSG - 16];
  msg[0] = '\0';
  const char *code = k->hooks->precheck_call(k->ud, x->r, name, keys, sure, literal ? nkeys : 0,
                                             literal, literal && closed, msg, sizeof msg);
  if (code) add(x, line_of(p, callpc), code, NULL, "%s", msg);
}

/* Which upvalues of child (made by p) are the chunk's _ENV, from env, p's. */
static void child_env (const Proto *p, const Proto *child, const unsigned char *env,
                       unsigned char *cenv) {
  (void)p;
  for (int u = 0; u < child->sizeupvalues; u++) {
    const Upvaldesc *d = &child->upvalues[u];
    cenv[u] = !d->instack && env[d->idx];
  }
}

/* Whether register reg is a temporary at pc+1 (not a local variable's register). */
static int is_temp (const Proto *p, int pc, int reg) {
  int active = 0;
  for (int v = 0; v < p->sizelocvars; v++)
    if (p->locvars[v].startpc <= pc + 1 && pc + 1 < p->locvars[v].endpc) active++;
  return reg >= active;
}

/* Pass 1: the names the script assigns, and whether it reaches its globals dynamically. */
static void collect (pcx *x, const Proto *p, const unsigned char *env, int depth) {
  if (depth >= DEPTH_MAX) { x->globals = 0; return; }
  for (int pc = 0; pc < p->sizecode; pc++) {
    Instruction in = p->code[pc];
    switch (GET_OPCODE(in)) {
      case OP_GETUPVAL: case OP_SETUPVAL:
        if (env[GETARG_B(in)]) x->globals = 0;  /* _ENV as a value */
        break;
      case OP_SETTABUP:
        if (env[GETARG_A(in)]) assign(x, kts(p, GETARG_B(in)));
        break;
      case OP_GETTABUP: {
        if (!env[GETARG_B(in)]) break;
        const TString *n = kts(p, GETARG_C(in));
        if (n == NULL || n == x->s_load) { x->globals = 0; break; }
        if (n != x->s_G) {
          /* a read that may see nil without failing: the script tests for it (a guard
          ** such as `if not T then return end`), so its other reads are not findings */
          int how = 0;
          const TString *ts = kts(p, GETARG_C(in));
          if (use_of(p, pc, GETARG_A(in), &how) < 0 && !in_list(x->probed, x->nprobed, ts)) {
            if (x->nprobed == NAMES_MAX) x->globals = 0;
            else x->probed[x->nprobed++] = ts;
          }
          break;
        }
        int how = 0, u = is_temp(p, pc, GETARG_A(in)) ? use_of(p, pc, GETARG_A(in), &how) : -1;
        Instruction ui = u >= 0 ? p->code[u] : 0;
        if (u >= 0 && GET_OPCODE(ui) == OP_GETFIELD && GETARG_B(ui) == GETARG_A(in)) break;
        if (u >= 0 && GET_OPCODE(ui) == OP_SETFIELD && GETARG_A(ui) == GETARG_A(in)) {
          assign(x, kts(p, GETARG_B(ui)));
          break;
        }
        x->globals = 0;  /* _G passed around, or _G[k] */
        break;
      }
      case OP_CLOSURE: {
        const Proto *c = p->p[GETARG_Bx(in)];
        unsigned char cenv[MAXREG];
        child_env(p, c, env, cenv);
        collect(x, c, cenv, depth + 1);
        break;
      }
      default: break;
    }
  }
}

/* function(a, b) return a - b end: a JavaScript sort comparator. Lua's table.sort
** wants a boolean, and every number is true. */
static void js_comparator (pcx *x, const Proto *c) {
  if (c->numparams != 2 || c->is_vararg || c->sizecode < 3) return;
  Instruction sub = c->code[0], ret = c->code[2];
  if (GET_OPCODE(sub) != OP_SUB || GET_OPCODE(c->code[1]) != OP_MMBIN) return;
  int b = GETARG_B(sub), cc = GETARG_C(sub);
  if (!((b == 0 && cc == 1) || (b == 1 && cc == 0))) return;
  if (!((GET_OPCODE(ret) == OP_RETURN1 && GETARG_A(ret) == GETARG_A(sub)) ||
        (GET_OPCODE(ret) == OP_RETURN && GETARG_A(ret) == GETARG_A(sub) && GETARG_B(ret) == 2)))
    return;
  tp__run_warn(x->r, c->linedefined, "a function(a, b) that returns %s is a JavaScript "
               "sort comparator: Lua's table.sort wants a boolean (and every number is "
               "true): return %s", b == 0 ? "a - b" : "b - a", b == 0 ? "a < b" : "a > b");
}

/* Pass 2: the reads of globals that would surely fail, and the tool calls. */
static void check (pcx *x, const Proto *p, const unsigned char *env) {
  for (int pc = 0; pc < p->sizecode; pc++) {
    Instruction in = p->code[pc];
    OpCode op = GET_OPCODE(in);
    if (op == OP_CLOSURE && x->depth + 1 < DEPTH_MAX) {
      const Proto *c = p->p[GETARG_Bx(in)];
      js_comparator(x, c);
      unsigned char cenv[MAXREG];
      child_env(p, c, env, cenv);
      x->closure_pc[x->depth] = pc;
      x->chain[++x->depth] = c;
      check(x, c, cenv);
      x->depth--;
      continue;
    }
    if (op == OP_GETFIELD) {  /* t.length: legal, and nil unless the table has one */
      const TString *f = kts(p, GETARG_C(in));
      if (f && f == x->s_length)
        tp__run_warn(x->r, line_of(p, pc), TP_WARN_LENGTH_STATIC ": Lua's length of an "
                     "array or a string is #t");
      /* r.value == nil (or ~= nil): kv.get answers json.null, not nil, for a missing key */
      if (f && f == x->s_value && pc + 1 < p->sizecode && x->nnil < 4) {
        Instruction nx = p->code[pc + 1];
        int kb = GETARG_B(nx);
        if (GET_OPCODE(nx) == OP_EQK && GETARG_A(nx) == GETARG_A(in) && kb < p->sizek &&
            ttisnil(&p->k[kb]))
          x->nil_tests[x->nnil++] = line_of(p, pc);
      }
      continue;
    }
    if (op == OP_CLOSURE) continue;
    if (op != OP_GETTABUP || !env[GETARG_B(in)]) continue;
    const TString *ts = kts(p, GETARG_C(in));
    if (ts == NULL || is_assigned(x, ts)) continue;
    int probed = in_list(x->probed, x->nprobed, ts);
    const TValue *v = luaH_getshortstr(x->gt, (TString *)ts);
    if (ttisnil(v)) {
      int how = 0, u = x->globals && !probed ? use_of(p, pc, GETARG_A(in), &how) : -1;
      if (u >= 0) undefined_global(x, p, pc, ts, u, how);
      continue;
    }
    if (ts == x->s_tools) { if (x->globals) tool_path(x, p, pc); }
    else if (x->globals && ttistable(v)) library_field(x, p, pc, ts, v);
  }
}

typedef struct pcall_ud { pcx *x; const Proto *main; } pcall_ud;

static int precheck_protected (lua_State *L) {
  pcall_ud *u = lua_touserdata(L, 1);
  pcx *x = u->x;
  x->L = L;
  lua_pushliteral(L, "load");  /* anchored below G for the whole check */
  x->s_load = tsvalue(s2v(L->top.p - 1));
  lua_pushliteral(L, "_G");
  x->s_G = tsvalue(s2v(L->top.p - 1));
  lua_pushliteral(L, "tools");
  x->s_tools = tsvalue(s2v(L->top.p - 1));
  lua_pushliteral(L, "length");
  x->s_length = tsvalue(s2v(L->top.p - 1));
  lua_pushliteral(L, "value");
  x->s_value = tsvalue(s2v(L->top.p - 1));
  lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_GLOBALS);
  x->G = lua_gettop(L);
  x->gt = hvalue(s2v(L->top.p - 1));
  x->globals = 1;
  if (lua_getmetatable(L, x->G)) {  /* a session's script may have set its own */
    lua_pushliteral(L, "__index");
    lua_rawget(L, -2);
    if (!lua_iscfunction(L, -1) || !tp__sandbox_globals_index_is_ours(lua_tocfunction(L, -1)))
      x->globals = 0;
    lua_settop(L, x->G);
  }
  else x->globals = 0;
  unsigned char env[MAXREG];
  memset(env, 0, sizeof env);
  const Proto *p = u->main;
  for (int i = 0; i < p->sizeupvalues; i++) {
    const TString *n = p->upvalues[i].name;
    env[i] = n != NULL && strcmp(getstr(n), "_ENV") == 0;
  }
  work = WORK_MAX;
  collect(x, p, env, 0);
  if (work < 0) x->globals = 0;  /* the guards may not all be known */
  x->depth = 0;
  x->chain[0] = p;
  check(x, p, env);
  if (x->kv_get)
    for (int i = 0; i < x->nnil; i++)
      tp__run_warn(x->r, x->nil_tests[i], "tools.kv.get answers value = json.null, not nil, "
                   "for a key that is not set, so r.value == nil is never true there: test "
                   "r.found (or r.value == json.null)");
  return 0;
}

int tp__precheck_needed (const tp_run *r) {
  lua_State *T = r->sb->T;
  if (lua_gettop(T) < 1) return 0;
  const TValue *o = s2v(T->top.p - 1);
  if (!ttisLclosure(o)) return 0;
  const Proto *p = clLvalue(o)->p;
  if (p->sizep > 0) return 1;  /* functions inside: the full check */
  for (int pc = 0; pc < p->sizecode; pc++)
    switch (GET_OPCODE(p->code[pc])) {
      case OP_GETTABUP: case OP_SETTABUP: case OP_GETUPVAL: case OP_SETUPVAL: return 1;
      default: break;
    }
  return 0;
}

int tp__precheck (tp_run *r, tp_findings *out) {
  out->n = 0;
  out->more = 0;
  lua_State *T = r->sb->T, *L = r->sb->L;
  if (lua_gettop(T) < 1) return 0;
  const TValue *o = s2v(T->top.p - 1);
  if (!ttisLclosure(o)) return 0;
  /* 9 KiB of lists, read only up to their counts: zeroing them (calloc) was a third of
  ** a warm run of a trivial script */
  pcx *x = malloc(sizeof *x);
  if (x == NULL) return 0;
  x->L = NULL;
  x->G = x->globals = x->depth = x->kv_get = x->nnil = x->nlib = 0;
  x->nassigned = x->nprobed = 0;
  x->r = r;
  x->out = out;
  pcall_ud u = { x, clLvalue(o)->p };
  int top = lua_gettop(L);
  if (!lua_checkstack(L, 8)) { free(x); return 0; }
  lua_pushcfunction(L, precheck_protected);
  lua_pushlightuserdata(L, &u);
  if (lua_pcall(L, 1, 0, 0) != LUA_OK) out->n = 0;  /* out of memory: no check */
  lua_settop(L, top);
  free(x);
  return out->n;
}
