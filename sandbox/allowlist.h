/*
** allowlist.h: everything a script can reach, in one place. engine/core/sandbox.c builds each
** sandbox from this table and from nothing else: a name that is not listed here is not
** in the sandbox. Every exclusion carries its reason, every replacement its function.
**
** kind:
**   KEEP     the function of Lua's own library, unchanged (fn NULL)
**   WRAP     our replacement, fn, defined in engine/core/sandbox.c, named after what it guards
**   DROP     excluded; reason says why (fn NULL)
**   OURS     not Lua's: tidepool's own (json, tools, parallel); fn NULL, reason says where
**            it is opened
** A library whose entries are all DROP (io, package, debug) is not opened at all.
**
** Each WRAP entry names its function, so a wrapper that is missing or misspelt is a
** compile error, and the sandbox holds what the entry names (sandbox.c reads fn, it has no
** other list). The table is defined where the wrappers are visible: sandbox.c defines
** TP_ALLOWLIST_TABLE and includes this header after them. Other files include it for the
** type and read the table as tp__allowlist: spec/c/test_allowlist.c checks that no WRAP
** entry is NULL and that a sandbox holds, under each name, what its entry says.
*/
#ifndef tidepool_allowlist_h
#define tidepool_allowlist_h

#include <stddef.h>

#include "lua.h"

#define TP_KEEP 0
#define TP_WRAP 1
#define TP_DROP 2
#define TP_OURS 3

typedef struct tp_allow {
  const char *lib;     /* "_G" for base functions */
  const char *name;    /* NULL: the whole library */
  int kind;
  lua_CFunction fn;    /* WRAP: what the sandbox holds under lib.name; else NULL */
  const char *reason;  /* why dropped or wrapped, or where an OURS name is opened */
} tp_allow;

extern const tp_allow tp__allowlist[];
extern const size_t tp__allowlist_len;

#endif

#ifdef TP_ALLOWLIST_TABLE
#ifndef tidepool_allowlist_table
#define tidepool_allowlist_table

const tp_allow tp__allowlist[] = {
  /* base */
  { "_G", "assert",         TP_KEEP, NULL, NULL },
  { "_G", "error",          TP_KEEP, NULL, NULL },
  { "_G", "getmetatable",   TP_KEEP, NULL, NULL },
  { "_G", "ipairs",         TP_WRAP, tp__sb_ipairs, "Lua's, and a warning in the envelope when it walks a table of string keys (engine/core/warnings.c)" },
  { "_G", "next",           TP_KEEP, NULL, NULL },
  { "_G", "pairs",          TP_KEEP, NULL, NULL },
  { "_G", "pcall",          TP_KEEP, NULL, NULL },
  { "_G", "rawequal",       TP_KEEP, NULL, NULL },
  { "_G", "rawget",         TP_KEEP, NULL, NULL },
  { "_G", "rawlen",         TP_KEEP, NULL, NULL },
  { "_G", "select",         TP_KEEP, NULL, NULL },
  { "_G", "tonumber",       TP_KEEP, NULL, NULL },
  { "_G", "type",           TP_KEEP, NULL, NULL },
  { "_G", "_VERSION",       TP_KEEP, NULL, NULL },
  { "_G", "print",          TP_WRAP, sb_print, "goes to the envelope's logs, counted against the output limit" },
  { "_G", "tostring",       TP_WRAP, sb_tostring, "shows no memory addresses (they defeat ASLR)" },
  { "_G", "load",           TP_WRAP, sb_load, "text only (binary chunks can crash the VM), size-capped" },
  { "_G", "setmetatable",   TP_WRAP, sb_setmetatable, "refuses __gc: finalizers run with hooks off, outside the limits" },
  { "_G", "rawset",         TP_WRAP, sb_rawset, "refuses the read-only library tables" },
  { "_G", "collectgarbage", TP_WRAP, sb_collectgarbage, "Lua's options and answers; stop, restart and the tuning options leave the collector as the engine set it" },
  { "_G", "xpcall",         TP_WRAP, sb_xpcall, "its handler is skipped after a kill (it would run with hooks off)" },
  { "_G", "warn",           TP_WRAP, sb_warn, "a no-op: Lua's warn writes to the host's stderr" },
  { "_G", "dofile",         TP_DROP, NULL, "reads files of the host" },
  { "_G", "loadfile",       TP_DROP, NULL, "reads files of the host" },
  { "_G", "require",        TP_DROP, NULL, "loads modules and C libraries from the host" },
  { "_G", "json",           TP_OURS, NULL, "encode, decode, null, array: engine/lib/json.c, set up by open_sandbox" },
  { "_G", "tools",          TP_OURS, NULL, "the tool namespace: tp__tools_open, engine/core/namespace.c" },
  { "_G", "parallel",       TP_OURS, NULL, "runs functions side by side: tp__tools_open, engine/core/namespace.c" },
  /* string */
  { "string", "byte",     TP_KEEP, NULL, NULL },
  { "string", "char",     TP_KEEP, NULL, NULL },
  { "string", "gmatch",   TP_KEEP, NULL, NULL },  /* pattern steps metered: engine/core/lua_patch.h */
  { "string", "gsub",     TP_KEEP, NULL, NULL },
  { "string", "len",      TP_KEEP, NULL, NULL },
  { "string", "lower",    TP_KEEP, NULL, NULL },
  { "string", "match",    TP_KEEP, NULL, NULL },
  { "string", "reverse",  TP_KEEP, NULL, NULL },
  { "string", "sub",      TP_KEEP, NULL, NULL },
  { "string", "upper",    TP_KEEP, NULL, NULL },
  { "string", "pack",     TP_KEEP, NULL, NULL },
  { "string", "packsize", TP_KEEP, NULL, NULL },
  { "string", "unpack",   TP_KEEP, NULL, NULL },
  { "string", "find",     TP_WRAP, sb_find, "plain search in linear time (Lua's is quadratic at worst)" },
  { "string", "format",   TP_WRAP, sb_format, "no %p, %s of a table shows no address; stoppable: a long format is one long C call" },
  { "string", "rep",      TP_WRAP, sb_rep, "string.rep('', 1e18) would loop in C for ever; a result over the memory limit is limit.memory" },
  { "string", "dump",     TP_DROP, NULL, "makes bytecode, which load refuses anyway; leaks upvalue layout" },
  /* table */
  { "table", "insert",  TP_KEEP, NULL, NULL },
  { "table", "pack",    TP_KEEP, NULL, NULL },
  { "table", "remove",  TP_KEEP, NULL, NULL },
  { "table", "unpack",  TP_KEEP, NULL, NULL },
  { "table", "concat",  TP_WRAP, sb_concat, "stoppable: a huge range with an __index in C runs long in C" },
  { "table", "move",    TP_WRAP, sb_move, "stoppable: table.move({}, 1, 2^40, 2) runs long in C" },
  { "table", "sort",    TP_WRAP, sb_sort, "stoppable: a sort of millions of values runs long in C" },
  /* math: pure functions */
  { "math", "abs", TP_KEEP, NULL, NULL },
  { "math", "ceil", TP_KEEP, NULL, NULL },
  { "math", "cos", TP_KEEP, NULL, NULL },
  { "math", "deg", TP_KEEP, NULL, NULL },
  { "math", "exp", TP_KEEP, NULL, NULL },
  { "math", "floor", TP_KEEP, NULL, NULL },
  { "math", "fmod", TP_KEEP, NULL, NULL },
  { "math", "huge", TP_KEEP, NULL, NULL },
  { "math", "log", TP_KEEP, NULL, NULL },
  { "math", "max", TP_KEEP, NULL, NULL },
  { "math", "maxinteger", TP_KEEP, NULL, NULL },
  { "math", "min", TP_KEEP, NULL, NULL },
  { "math", "mininteger", TP_KEEP, NULL, NULL },
  { "math", "modf", TP_KEEP, NULL, NULL },
  { "math", "pi", TP_KEEP, NULL, NULL },
  { "math", "rad", TP_KEEP, NULL, NULL },
  { "math", "random", TP_KEEP, NULL, NULL },
  { "math", "randomseed", TP_KEEP, NULL, NULL },
  { "math", "sin", TP_KEEP, NULL, NULL },
  { "math", "sqrt", TP_KEEP, NULL, NULL },
  { "math", "tan", TP_KEEP, NULL, NULL },
  { "math", "tointeger", TP_KEEP, NULL, NULL },
  { "math", "type", TP_KEEP, NULL, NULL },
  { "math", "ult", TP_KEEP, NULL, NULL },
  { "math", "atan", TP_KEEP, NULL, NULL },
  { "math", "asin", TP_KEEP, NULL, NULL },
  { "math", "acos", TP_KEEP, NULL, NULL },
  /* utf8 */
  { "utf8", "char", TP_KEEP, NULL, NULL },
  { "utf8", "charpattern", TP_KEEP, NULL, NULL },
  { "utf8", "codes", TP_KEEP, NULL, NULL },
  { "utf8", "codepoint", TP_KEEP, NULL, NULL },
  { "utf8", "offset", TP_KEEP, NULL, NULL },
  { "utf8", "len", TP_WRAP, sb_utf8len, "stoppable: 64 MiB of text is one long C call" },
  /* coroutine: wrapped so the host's tool requests and time slices pass through */
  { "coroutine", "create",      TP_KEEP, NULL, NULL },
  { "coroutine", "status",      TP_KEEP, NULL, NULL },
  { "coroutine", "resume",      TP_WRAP, sb_co_resume, "passes tool calls and time slices up to the host" },
  { "coroutine", "wrap",        TP_WRAP, sb_co_wrap, "passes tool calls and time slices up to the host" },
  { "coroutine", "yield",       TP_WRAP, sb_co_yield, "a yield outside any coroutine is an error, not a host request" },
  { "coroutine", "close",       TP_WRAP, sb_co_close, "__close handlers it runs stay under the limits" },
  { "coroutine", "running",     TP_WRAP, sb_co_running, "the script's thread counts as the main one" },
  { "coroutine", "isyieldable", TP_WRAP, sb_co_isyieldable, "false in the script's own thread" },
  /* os: the clock only */
  { "os", "time",      TP_KEEP, NULL, NULL },
  { "os", "clock",     TP_KEEP, NULL, NULL },
  { "os", "date",      TP_WRAP, sb_date, "stoppable: a long format is one long C call (a strftime per conversion)" },
  { "os", "difftime",  TP_KEEP, NULL, NULL },
  { "os", "execute",   TP_DROP, NULL, "runs host commands" },
  { "os", "exit",      TP_DROP, NULL, "ends the host process" },
  { "os", "getenv",    TP_DROP, NULL, "reads the host's environment (secrets)" },
  { "os", "remove",    TP_DROP, NULL, "deletes host files" },
  { "os", "rename",    TP_DROP, NULL, "moves host files" },
  { "os", "setlocale", TP_DROP, NULL, "changes the host process's locale" },
  { "os", "tmpname",   TP_DROP, NULL, "creates host files" },
  /* whole libraries */
  { "io",      NULL, TP_DROP, NULL, "host files and processes" },
  { "package", NULL, TP_DROP, NULL, "loads modules and C libraries from the host" },
  { "debug",   NULL, TP_DROP, NULL, "reads and changes anything, including other functions' locals" },
};

const size_t tp__allowlist_len = sizeof tp__allowlist / sizeof tp__allowlist[0];
#define TP_ALLOWLIST_LEN (sizeof tp__allowlist / sizeof tp__allowlist[0])

#endif
#endif
