/*
** allowlist.h: everything a script can reach, in one place. engine/core/sandbox.c builds each
** sandbox from this table and from nothing else: a name that is not listed here is not
** in the sandbox. Every exclusion carries its reason.
**
** kind:
**   KEEP     the function of Lua's own library, unchanged
**   WRAP     our replacement (engine/core/sandbox.c), named after what it guards
**   DROP     excluded; reason says why
**   OURS     not Lua's: tidepool's own (json, tools, parallel), opened in engine/
** A library whose entries are all DROP (io, package, debug) is not opened at all.
*/

#define TP_KEEP 0
#define TP_WRAP 1
#define TP_DROP 2
#define TP_OURS 3

typedef struct tp_allow {
  const char *lib;     /* "_G" for base functions */
  const char *name;
  int kind;
  const char *reason;  /* why dropped or wrapped */
} tp_allow;

static const tp_allow tp_allowlist[] = {
  /* base */
  { "_G", "assert",         TP_KEEP, NULL },
  { "_G", "error",          TP_KEEP, NULL },
  { "_G", "getmetatable",   TP_KEEP, NULL },
  { "_G", "ipairs",         TP_KEEP, NULL },
  { "_G", "next",           TP_KEEP, NULL },
  { "_G", "pairs",          TP_KEEP, NULL },
  { "_G", "pcall",          TP_KEEP, NULL },
  { "_G", "rawequal",       TP_KEEP, NULL },
  { "_G", "rawget",         TP_KEEP, NULL },
  { "_G", "rawlen",         TP_KEEP, NULL },
  { "_G", "select",         TP_KEEP, NULL },
  { "_G", "tonumber",       TP_KEEP, NULL },
  { "_G", "type",           TP_KEEP, NULL },
  { "_G", "_VERSION",       TP_KEEP, NULL },
  { "_G", "print",          TP_WRAP, "goes to the envelope's logs, counted against the output limit" },
  { "_G", "tostring",       TP_WRAP, "shows no memory addresses (they defeat ASLR)" },
  { "_G", "load",           TP_WRAP, "text only (binary chunks can crash the VM), size-capped" },
  { "_G", "setmetatable",   TP_WRAP, "refuses __gc: finalizers run with hooks off, outside the limits" },
  { "_G", "rawset",         TP_WRAP, "refuses the read-only library tables" },
  { "_G", "collectgarbage", TP_WRAP, "Lua's options and answers; stop, restart and the tuning options leave the collector as the engine set it" },
  { "_G", "xpcall",         TP_WRAP, "its handler is skipped after a kill (it would run with hooks off)" },
  { "_G", "warn",           TP_WRAP, "a no-op: Lua's warn writes to the host's stderr" },
  { "_G", "dofile",         TP_DROP, "reads files of the host" },
  { "_G", "loadfile",       TP_DROP, "reads files of the host" },
  { "_G", "require",        TP_DROP, "loads modules and C libraries from the host" },
  { "_G", "json",           TP_OURS, "encode, decode, null, array (engine/lib/json.c)" },
  { "_G", "tools",          TP_OURS, "the tool namespace (engine/core/tools.c)" },
  { "_G", "parallel",       TP_OURS, "runs functions side by side (engine/core/tools.c)" },
  /* string */
  { "string", "byte",     TP_KEEP, NULL },
  { "string", "char",     TP_KEEP, NULL },
  { "string", "gmatch",   TP_KEEP, NULL },  /* pattern steps metered: engine/core/lua_patch.h */
  { "string", "gsub",     TP_KEEP, NULL },
  { "string", "len",      TP_KEEP, NULL },
  { "string", "lower",    TP_KEEP, NULL },
  { "string", "match",    TP_KEEP, NULL },
  { "string", "reverse",  TP_KEEP, NULL },
  { "string", "sub",      TP_KEEP, NULL },
  { "string", "upper",    TP_KEEP, NULL },
  { "string", "pack",     TP_KEEP, NULL },
  { "string", "packsize", TP_KEEP, NULL },
  { "string", "unpack",   TP_KEEP, NULL },
  { "string", "find",     TP_WRAP, "plain search in linear time (Lua's is quadratic at worst)" },
  { "string", "format",   TP_WRAP, "no %p, %s of a table shows no address; stoppable: a long format is one long C call" },
  { "string", "rep",      TP_WRAP, "string.rep('', 1e18) would loop in C for ever; a result over the memory limit is limit.memory" },
  { "string", "dump",     TP_DROP, "makes bytecode, which load refuses anyway; leaks upvalue layout" },
  /* table */
  { "table", "insert",  TP_KEEP, NULL },
  { "table", "pack",    TP_KEEP, NULL },
  { "table", "remove",  TP_KEEP, NULL },
  { "table", "unpack",  TP_KEEP, NULL },
  { "table", "concat",  TP_WRAP, "stoppable: a huge range with an __index in C runs long in C" },
  { "table", "move",    TP_WRAP, "stoppable: table.move({}, 1, 2^40, 2) runs long in C" },
  { "table", "sort",    TP_WRAP, "stoppable: a sort of millions of values runs long in C" },
  /* math: pure functions */
  { "math", "abs", TP_KEEP, NULL },   { "math", "ceil", TP_KEEP, NULL },
  { "math", "cos", TP_KEEP, NULL },   { "math", "deg", TP_KEEP, NULL },
  { "math", "exp", TP_KEEP, NULL },   { "math", "floor", TP_KEEP, NULL },
  { "math", "fmod", TP_KEEP, NULL },  { "math", "huge", TP_KEEP, NULL },
  { "math", "log", TP_KEEP, NULL },   { "math", "max", TP_KEEP, NULL },
  { "math", "maxinteger", TP_KEEP, NULL }, { "math", "min", TP_KEEP, NULL },
  { "math", "mininteger", TP_KEEP, NULL }, { "math", "modf", TP_KEEP, NULL },
  { "math", "pi", TP_KEEP, NULL },    { "math", "rad", TP_KEEP, NULL },
  { "math", "random", TP_KEEP, NULL },{ "math", "randomseed", TP_KEEP, NULL },
  { "math", "sin", TP_KEEP, NULL },   { "math", "sqrt", TP_KEEP, NULL },
  { "math", "tan", TP_KEEP, NULL },   { "math", "tointeger", TP_KEEP, NULL },
  { "math", "type", TP_KEEP, NULL },  { "math", "ult", TP_KEEP, NULL },
  { "math", "atan", TP_KEEP, NULL },  { "math", "asin", TP_KEEP, NULL },
  { "math", "acos", TP_KEEP, NULL },
  /* utf8 */
  { "utf8", "char", TP_KEEP, NULL },  { "utf8", "charpattern", TP_KEEP, NULL },
  { "utf8", "codes", TP_KEEP, NULL }, { "utf8", "codepoint", TP_KEEP, NULL },
  { "utf8", "offset", TP_KEEP, NULL },
  { "utf8", "len", TP_WRAP, "stoppable: 64 MiB of text is one long C call" },
  /* coroutine: wrapped so the host's tool requests and time slices pass through */
  { "coroutine", "create",      TP_KEEP, NULL },
  { "coroutine", "status",      TP_KEEP, NULL },
  { "coroutine", "resume",      TP_WRAP, "passes tool calls and time slices up to the host" },
  { "coroutine", "wrap",        TP_WRAP, "passes tool calls and time slices up to the host" },
  { "coroutine", "yield",       TP_WRAP, "a yield outside any coroutine is an error, not a host request" },
  { "coroutine", "close",       TP_WRAP, "__close handlers it runs stay under the limits" },
  { "coroutine", "running",     TP_WRAP, "the script's thread counts as the main one" },
  { "coroutine", "isyieldable", TP_WRAP, "false in the script's own thread" },
  /* os: the clock only */
  { "os", "time",      TP_KEEP, NULL },
  { "os", "clock",     TP_KEEP, NULL },
  { "os", "date",      TP_WRAP, "stoppable: a long format is one long C call (a strftime per conversion)" },
  { "os", "difftime",  TP_KEEP, NULL },
  { "os", "execute",   TP_DROP, "runs host commands" },
  { "os", "exit",      TP_DROP, "ends the host process" },
  { "os", "getenv",    TP_DROP, "reads the host's environment (secrets)" },
  { "os", "remove",    TP_DROP, "deletes host files" },
  { "os", "rename",    TP_DROP, "moves host files" },
  { "os", "setlocale", TP_DROP, "changes the host process's locale" },
  { "os", "tmpname",   TP_DROP, "creates host files" },
  /* whole libraries */
  { "io",      NULL, TP_DROP, "host files and processes" },
  { "package", NULL, TP_DROP, "loads modules and C libraries from the host" },
  { "debug",   NULL, TP_DROP, "reads and changes anything, including other functions' locals" },
};

#define TP_ALLOWLIST_LEN (sizeof(tp_allowlist) / sizeof(tp_allowlist[0]))
