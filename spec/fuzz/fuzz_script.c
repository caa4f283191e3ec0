/*
** fuzz_script.c: scripts made from the fuzzer's bytes, run under tight limits through
** the public C API, against the host's invariants.
**
** The bytes drive a small Lua grammar (statements, expressions, tool calls, pcall,
** coroutines, parallel, the string, table, math, utf8, os and json libraries, loops, load,
** sort with comparators, metatables, and the host-side attacks of issue 7), so that
** nearly every input compiles and runs: every function is vararg, so '...' is valid
** anywhere, and most statements run in a pcall of their own. The first byte picks how
** the run is driven: tp_engine_run; a session running the script twice (the
** second run sees the globals the first left); or tp_run_create + tp_run_step with small
** time and instruction budgets (a game server's frame loop). Tools registered in C: echo
** (returns its arguments), fail (tool.failed), typed (input and output schemas) and
** bad (completes with text that is not JSON).
**
** Asserted for every run (limits: memory 4 MiB, cpu and wall 200 ms, 5M instructions,
** 64 KiB output, 256 KiB result, 200 tool calls):
** - no crash, sanitizer report or leak (ASan, UBSan, LeakSanitizer);
** - time: the run ends within its time limit + TP_FUZZ_SLACK_MS (default 1000: this is an
**   ASan build on a shared machine; what is measured is reported at exit);
** - memory: the process's peak RSS during the run (VmHWM, reset before each run through
**   /proc/self/clear_refs) exceeds its RSS at the start by at most 2 x (4 x memory +
**   64 MiB), the issue's bound doubled for ASan's redzones and shadow, + TP_FUZZ_RSS_SLACK_MB
**   (default 64); scripts/fuzz.sh also sets -malloc_limit_mb so that one host allocation
**   of 64 MiB or more is a finding at once, and -rss_limit_mb for the whole process;
** - one envelope: JSON, an object with a boolean "ok" equal to script_ok, "result" when
**   ok, else "error" with a "code" of the code table (tp_code_at) and a non-empty "message".
** With TP_FUZZ_PRINT=1 in the environment, each generated script is printed first and
** its outcome after (to see what the grammar makes: `build/fuzz/fuzz_script FILE`).
*/
#include <stdarg.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include <jansson.h>

#include "tidepool.h"
#include "fuzz.h"

#define MEMORY      (4u << 20)
#define TIME_US     200000u
#define MAX_SCRIPT  (64u << 10)

static tp_engine *engine;
static tp_limits limits;
static long slack_ms = 1000, rss_slack_mb = 64;
static long worst_late_ms;    /* the most a run ended after its time limit */
static long worst_rss_kb;     /* the most a run raised the RSS peak above its start */
static int print_scripts;

/* ---- tools ----------------------------------------------------------------------------- */

static void tool_echo (tp_call *c, void *ud) {
  (void)ud;
  const char *args = tp_call_args(c);
  if (args == NULL || tp_call_complete(c, args, 0) != TP_OK)
    tp_call_fail(c, NULL, "echo: could not return its arguments");
}

static void tool_fail (tp_call *c, void *ud) {
  (void)ud;
  tp_call_fail(c, "tool.failed", "fail: this tool always fails; do not call it again");
}

static void tool_bad (tp_call *c, void *ud) {
  (void)ud;
  if (tp_call_complete(c, "{\"unterminated\": [1, 2", 0) != TP_OK)
    tp_call_fail(c, NULL, "bad: returned text that is not JSON");
}

static void add_tool (const char *name, tp_tool_fn fn, const char *in, const char *out) {
  tp_tool_def d;
  memset(&d, 0, sizeof d);
  d.name = name;
  d.description = "a tool of the script fuzzer";
  d.input_schema = in;
  d.output_schema = out;
  d.handler = fn;
  d.timeout_us = 100000;
  if (tp_engine_add_tool(engine, &d) != TP_OK) {
    fprintf(stderr, "fuzz_script: add_tool %s: %s\n", name, tp_engine_error(engine));
    abort();
  }
}

/* A field of /proc/self/status in KiB ("VmRSS", "VmHWM"); -1 when unreadable. */
static long status_kb (const char *field) {
  FILE *f = fopen("/proc/self/status", "r");
  if (f == NULL) return -1;
  char line[256];
  long v = -1;
  size_t n = strlen(field);
  while (fgets(line, sizeof line, f))
    if (strncmp(line, field, n) == 0 && line[n] == ':') { v = atol(line + n + 1); break; }
  fclose(f);
  return v;
}

/* Resets the process's peak RSS (VmHWM) to its RSS now; 0, or -1 when Linux refuses. */
static int reset_peak (void) {
  FILE *f = fopen("/proc/self/clear_refs", "w");
  if (f == NULL) return -1;
  int ok = fputs("5", f) >= 0;
  return (fclose(f) == 0 && ok) ? 0 : -1;
}

static long peak_rss_kb (void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss;
}

static void report_at_exit (void) {
  fprintf(stderr, "fuzz_script: worst run: ended %ld ms after its time limit, raised the "
          "RSS by %ld MiB; peak RSS %ld MiB\n", worst_late_ms, worst_rss_kb / 1024,
          peak_rss_kb() / 1024);
}

/* ASan's quarantine keeps freed blocks resident (256 MiB by default): small, so that
** what one run frees does not count as what it holds. ASAN_OPTIONS still wins. */
const char *__asan_default_options (void);
const char *__asan_default_options (void) { return "quarantine_size_mb=16"; }

int LLVMFuzzerInitialize (int *argc, char ***argv) {
  (void)argc; (void)argv;
  const char *v;
  if ((v = getenv("TP_FUZZ_SLACK_MS")) != NULL) slack_ms = atol(v);
  if ((v = getenv("TP_FUZZ_RSS_SLACK_MB")) != NULL) rss_slack_mb = atol(v);
  print_scripts = (v = getenv("TP_FUZZ_PRINT")) != NULL && v[0] == '1';
  engine = tp_engine_create();
  if (engine == NULL) abort();
  add_tool("echo", tool_echo, NULL, NULL);
  add_tool("fail", tool_fail, NULL, NULL);
  add_tool("bad", tool_bad, NULL, NULL);
  add_tool("typed", tool_echo,
           "{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\",\"maximum\":100},"
           "\"s\":{\"type\":\"string\",\"maxLength\":8}},\"required\":[\"n\"],"
           "\"additionalProperties\":false}",
           "{\"type\":\"object\",\"required\":[\"n\"]}");
  tp_limits_init(&limits);
  limits.memory = MEMORY;
  limits.cpu_us = TIME_US;
  limits.wall_us = TIME_US;
  limits.instructions = 5000000;
  limits.output = 64u << 10;
  limits.result = 256u << 10;
  limits.tool_calls = 200;
  limits.tool_bytes = 256u << 10;
  limits.tool_timeout_us = 100000;
  atexit(report_at_exit);
  return 0;
}

/* ---- the generator ----------------------------------------------------------------------- */

typedef struct gen {
  const uint8_t *p, *end;
  char *out;
  size_t len;
  int depth;     /* of nested expressions and blocks */
  int loops;     /* loops around the current point (for break) */
  int fns;       /* functions around the current point (for return, yield) */
} gen;

/* The next byte mod n (0 once the input is used up, which ends the script quickly). */
static unsigned pick (gen *g, unsigned n) {
  if (g->p >= g->end || n == 0) return 0;
  return *g->p++ % n;
}

static int more (const gen *g) { return g->p < g->end && g->len < MAX_SCRIPT - 4096; }

__attribute__((format(printf, 2, 3)))
static void emit (gen *g, const char *fmt, ...) {
  if (g->len >= MAX_SCRIPT - 1) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(g->out + g->len, MAX_SCRIPT - g->len, fmt, ap);
  va_end(ap);
  if (n > 0) g->len += (size_t)n < MAX_SCRIPT - g->len ? (size_t)n : MAX_SCRIPT - 1 - g->len;
}

static const char *const VARS[] = { "a", "b", "c", "d", "t", "s", "n", "f" };
static const char *const INTS[] = {
  "0", "1", "-1", "2", "3", "7", "10", "100", "255", "1000", "65536", "1e6", "2^31",
  "2^53", "math.maxinteger", "math.mininteger", "0x7fffffff", "-0", "1e308", "2^63",
};
static const char *const FLOATS[] = {
  "0.5", "-0.0", "1/0", "-1/0", "0/0", "3.14", "1e-300", "2.5e10", "math.pi", "math.huge",
};
static const char *const STRS[] = {
  "''", "'a'", "'abc'", "'%d'", "'%s %q'", "'10'", "'3.5'", "'0x10'", "'\\0'", "'\\xff\\xfe'",
  "'\\u{10FFFF}'", "'é'", "'%a+'", "'(.-)'", "'[%w_]+'", "'%f[%w]'", "'%b()'", "'x*'",
  "'line\\nline'", "'{\"k\":[1,2,{\"z\":null}]}'", "'[1,2,3]'", "'\"'", "'true'", "'nil'",
  "'%5.2f'", "'%-20s|'", "'%x'", "'%c'", "'%i'", "'%g'", "'%99d'", "'.'", "'^'", "'$'",
};
static const char *const PATTERNS[] = {
  "'a'", "'.'", "'%a+'", "'(.)(.)'", "'(.-)x'", "'[^a]*'", "'%d+'", "'^%s*(.-)%s*$'",
  "'()'", "'%f[%w]%w+'", "'%b()'", "'(a*)*b'", "'.-.-.-.-.-$'", "'[%z]'", "'%1'", "'['",
  "'(()'", "'%'", "'a-b'",
};
static const char *const UNOPS[] = { "- ", "not ", "#", "~ " };  /* "--" opens a comment */
static const char *const BINOPS[] = {
  "+", "-", "*", "/", "//", "%", "^", "..", "==", "~=", "<", "<=", ">", ">=", "and", "or",
  "&", "|", "~", "<<", ">>",
};

static void expr (gen *g);
static void block (gen *g, int max);

/* A block that is a function's body: no loop around it for break. */
static void fn_block (gen *g, int max) {
  int loops = g->loops;
  g->loops = 0;
  g->fns++;
  block(g, max);
  g->fns--;
  g->loops = loops;
}

static void var (gen *g) { emit(g, "%s", VARS[pick(g, 8)]); }

static void table_ctor (gen *g) {
  emit(g, "{");
  unsigned n = pick(g, 5);
  for (unsigned i = 0; i < n; i++) {
    if (i) emit(g, ", ");
    switch (pick(g, 3)) {
      case 0: expr(g); break;
      case 1: emit(g, "%s = ", VARS[pick(g, 8)]); expr(g); break;
      default: emit(g, "["); expr(g); emit(g, "] = "); expr(g); break;
    }
  }
  emit(g, "}");
}

/* An argument table for a tool: mostly what typed accepts, sometimes not. */
static void tool_args (gen *g) {
  switch (pick(g, 4)) {
    case 0: emit(g, "{n = %u}", pick(g, 120)); break;
    case 1: emit(g, "{n = %u, s = ", pick(g, 5)); expr(g); emit(g, "}"); break;
    case 2: emit(g, "{}"); break;
    default: table_ctor(g); break;
  }
}

static void tool_call (gen *g) {
  static const char *const TOOLS[] = { "echo", "fail", "typed", "bad", "nope", "echo" };
  const char *t = TOOLS[pick(g, 6)];
  switch (pick(g, 4)) {
    case 0: emit(g, "tools.%s(", t); tool_args(g); emit(g, ")"); break;
    case 1: emit(g, "select(2, pcall(tools.%s, ", t); tool_args(g); emit(g, "))"); break;
    case 2: emit(g, "tools.%s{v = ", t); expr(g); emit(g, "}"); break;
    default:
      emit(g, "parallel(function(...) return tools.%s(", t); tool_args(g);
      emit(g, ") end, function(...) return tools.echo{x = "); expr(g); emit(g, "} end)");
      break;
  }
}

static void call_expr (gen *g) {
  switch (pick(g, 34)) {
    case 0: emit(g, "tostring("); expr(g); emit(g, ")"); break;
    case 1: emit(g, "tonumber("); expr(g); emit(g, ")"); break;
    case 2: emit(g, "type("); expr(g); emit(g, ")"); break;
    case 3: emit(g, "string.rep("); expr(g); emit(g, ", %s)", INTS[pick(g, 20)]); break;
    case 4: emit(g, "string.sub("); expr(g); emit(g, ", "); expr(g); emit(g, ")"); break;
    case 5: emit(g, "string.format(%s, ", STRS[pick(g, 34)]); expr(g); emit(g, ")"); break;
    case 6: emit(g, "string.find("); expr(g); emit(g, ", %s)", PATTERNS[pick(g, 19)]); break;
    case 7: emit(g, "string.gsub("); expr(g); emit(g, ", %s, ", PATTERNS[pick(g, 19)]);
            expr(g); emit(g, ")"); break;
    case 8: emit(g, "string.match("); expr(g); emit(g, ", %s)", PATTERNS[pick(g, 19)]); break;
    case 9: emit(g, "string.byte("); expr(g); emit(g, ", 1, -1)"); break;
    case 10: emit(g, "string.char(%u, %u)", pick(g, 256), pick(g, 256)); break;
    case 11: emit(g, "table.concat("); expr(g); emit(g, ", "); expr(g); emit(g, ")"); break;
    case 12: emit(g, "select('#', "); expr(g); emit(g, ", "); expr(g); emit(g, ")"); break;
    case 13: emit(g, "math.floor("); expr(g); emit(g, ")"); break;
    case 14: emit(g, "math.max("); expr(g); emit(g, ", "); expr(g); emit(g, ")"); break;
    case 15: emit(g, "json.encode("); expr(g); emit(g, ")"); break;
    case 16: emit(g, "json.decode("); expr(g); emit(g, ")"); break;
    case 17: emit(g, "utf8.char(%s)", INTS[pick(g, 20)]); break;
    case 18: emit(g, "utf8.len("); expr(g); emit(g, ")"); break;
    case 19: emit(g, "pcall(function(...) return "); expr(g); emit(g, " end)"); break;
    case 20: tool_call(g); break;
    case 21: emit(g, "f("); expr(g); emit(g, ")"); break;
    case 22: emit(g, "coroutine.wrap(function(x, ...) coroutine.yield(x) return "); expr(g);
             emit(g, " end)("); expr(g); emit(g, ")"); break;
    case 23: emit(g, "select(2, coroutine.resume(coroutine.create(function(...) "); fn_block(g, 2);
             emit(g, " return "); expr(g); emit(g, " end)))"); break;
    case 24: emit(g, "load("); expr(g); emit(g, ")"); break;
    case 25: emit(g, "load('return ' .. tostring("); expr(g); emit(g, "))()"); break;
    case 26: emit(g, "rawlen("); expr(g); emit(g, ")"); break;
    case 27: emit(g, "setmetatable({}, {__index = function(_, k, ...) return "); expr(g);
             emit(g, " end, __len = function(...) return %s end})", INTS[pick(g, 20)]); break;
    case 28: emit(g, "next("); expr(g); emit(g, ")"); break;
    case 29: emit(g, "table.unpack("); expr(g); emit(g, ")"); break;
    case 30: emit(g, "string.upper("); expr(g); emit(g, ")"); break;
    case 31: emit(g, "os.time()"); break;
    case 32: emit(g, "os.date(%s)", STRS[pick(g, 34)]); break;
    default: emit(g, "collectgarbage(%s)",
                  (const char *[]){ "'count'", "'collect'", "'step'", "'isrunning'",
                                    "'incremental'", "'generational'", "'stop'", "'restart'",
                                    "'bogus'" }[pick(g, 9)]); break;
  }
}

static void expr (gen *g) {
  if (g->depth > 6 || !more(g)) { var(g); return; }
  g->depth++;
  switch (pick(g, 16)) {
    case 0: case 1: var(g); break;
    case 2: emit(g, "%s", INTS[pick(g, 20)]); break;
    case 3: emit(g, "%s", FLOATS[pick(g, 10)]); break;
    case 4: emit(g, "%s", STRS[pick(g, 34)]); break;
    case 5: emit(g, "%s", (const char *[]){ "nil", "true", "false", "json.null", "{}",
                                           "json.array{}", "..." }[pick(g, 7)]); break;
    case 6: case 7: emit(g, "("); expr(g); emit(g, " %s ", BINOPS[pick(g, 21)]); expr(g);
            emit(g, ")"); break;
    case 8: emit(g, "(%s", UNOPS[pick(g, 4)]); expr(g); emit(g, ")"); break;
    case 9: table_ctor(g); break;
    case 10: case 11: case 12: call_expr(g); break;
    case 13: emit(g, "t["); expr(g); emit(g, "]"); break;
    case 14: emit(g, "function(...) "); fn_block(g, 2); emit(g, " return ");
             expr(g); emit(g, " end"); break;
    default: var(g); emit(g, ".%s", VARS[pick(g, 8)]); break;
  }
  g->depth--;
}

static void stmt (gen *g) {
  if (g->depth > 6) { emit(g, "a = b\n"); return; }
  g->depth++;
  switch (pick(g, 28)) {
    case 0: case 1: case 2: var(g); emit(g, " = "); expr(g); emit(g, "\n"); break;
    case 3: emit(g, "t["); expr(g); emit(g, "] = "); expr(g); emit(g, "\n"); break;
    case 4: emit(g, "if "); expr(g); emit(g, " then\n"); block(g, 3); emit(g, "else\n");
            block(g, 2); emit(g, "end\n"); break;
    case 5: emit(g, "for i = 1, %s do\n", INTS[pick(g, 20)]); g->loops++; block(g, 3);
            g->loops--; emit(g, "end\n"); break;
    case 6: emit(g, "for k, v in pairs("); expr(g); emit(g, ") do\n"); g->loops++;
            block(g, 2); g->loops--; emit(g, "end\n"); break;
    case 7: emit(g, "while "); expr(g); emit(g, " do\n"); g->loops++; block(g, 3);
            g->loops--; emit(g, "break end\n"); break;
    case 8: case 9: emit(g, "pcall(function(...)\n"); fn_block(g, 4);
            emit(g, "end)\n"); break;
    case 10: emit(g, "print("); expr(g); emit(g, ")\n"); break;
    case 11: case 12: emit(g, "%s = ", VARS[pick(g, 4)]); tool_call(g); emit(g, "\n"); break;
    case 13: emit(g, "do local co = coroutine.create(function(x, ...)\n"); fn_block(g, 3);
             emit(g, "coroutine.yield("); expr(g); emit(g, ")\n"); fn_block(g, 2);
             emit(g, "end)\nfor _ = 1, %u do a = select(2, coroutine.resume(co, b)) end end\n",
                  pick(g, 4) + 1); break;
    case 14: emit(g, "if "); expr(g); emit(g, " then error("); expr(g); emit(g, ") end\n"); break;
    case 15: emit(g, "table.insert(t, "); expr(g); emit(g, ")\n"); break;
    case 16: emit(g, "table.sort(t, function(x, y, ...) "); fn_block(g, 1);
             emit(g, " return tostring(x) < tostring(y) end)\n"); break;
    case 17: emit(g, "s = s .. tostring("); expr(g); emit(g, ")\n"); break;
    case 18: emit(g, "f = function(...) "); fn_block(g, 2);
             emit(g, " return "); expr(g); emit(g, " end\n"); break;
    case 19: emit(g, "for w in string.gmatch(tostring("); expr(g); emit(g, "), %s) do ",
                  PATTERNS[pick(g, 19)]); g->loops++; block(g, 1); g->loops--;
             emit(g, " end\n"); break;
    case 20: if (g->loops) emit(g, "break\n"); else emit(g, "n = n + 1\n"); break;
    case 21: /* heavy: a loop that a limit must stop */
      emit(g, "%s\n", (const char *[]){
        "while true do end",
        "local x = {} for i = 1, 1e7 do x[i] = i end",
        "local x = 'x' for i = 1, 40 do x = x .. x end",
        "for i = 1, 1e6 do print(i) end",
        "for i = 1, 1e5 do tools.echo{i = i} end",
        "local x = {} for i = 1, 2e4 do x = {x, x} end t = x",
        "while true do pcall(error, 'x') end",
        "local function r() return r() + 1 end r()",
        "string.rep('x', 1e9)",
        "for i = 1, 1e6 do s = s .. 'x' end",
        "local x = {} for i = 1, 22 do x = {x, x} end d = json.encode(x)",
        "local x = {} for i = 1, 22 do x = {x, x} end t = x",
        "local x = {} for i = 1, 22 do x = {x, x} end a = tools.echo{x = x}",
        "local x = {} for i = 1, 22 do x = {x, x} end error(x)",
        "local x = {} for i = 1, 5e4 do x[i] = {i} end t = x",
        "local x = {} for i = 1, 1e5 do x[i] = tools.echo end pcall(tools.echo, x)",
        "for i = 1, 1e5 do pcall(tools.nope) end",
        "for i = 1, 1e5 do print() end",
        "table.sort(t, function(x, y) for i = 1, 1e5 do end return tostring(x) < tostring(y) end)",
        "local x = {} for i = 1, 1000 do x[i] = i % 7 end table.sort(x, function(p, q) "
          "for i = 1, 1e4 do end return p < q end)",
      }[pick(g, 20)]);
      break;
    case 22: emit(g, "setmetatable(t, {__index = function(_, k, ...) return "); expr(g);
             emit(g, " end, __eq = function(...) return true end, __concat = function(...) "
                  "return 'c' end})\n"); break;
    case 23: emit(g, "d = json.decode(json.encode("); expr(g); emit(g, "))\n"); break;
    case 24: emit(g, "do local ok, e = pcall(tools.%s, ", (const char *[]){ "echo", "fail",
                  "typed", "bad", "nope" }[pick(g, 5)]); tool_args(g);
             emit(g, ")\nif not ok then c = e.code end end\n"); break;
    case 25: if (g->fns) { emit(g, "do return "); expr(g); emit(g, " end\n"); }
             else emit(g, "n = #t\n"); break;
    case 26: emit(g, "d = {parallel("); tool_call(g); emit(g, ")}\n"); break;
    default: emit(g, "t[#t + 1] = "); expr(g); emit(g, "\n"); break;
  }
  g->depth--;
}

static void block (gen *g, int max) {
  unsigned n = pick(g, (unsigned)max + 1);
  for (unsigned i = 0; i < n && more(g); i++) stmt(g);
}

/* The script of the bytes at g->p..end: a prelude, statements while bytes last, then a
** return of some value. */
static void script (gen *g) {
  emit(g, "local a, b, c, d = 1, 'two', {3}, nil\nlocal t = {1, 2, 'x', k = 'v'}\n"
          "local s, n = 'abc', 5\nlocal f = function(...) return ... end\n");
  /* Most statements in a pcall of their own: a runtime error does not end the script. */
  while (more(g) && g->len < MAX_SCRIPT / 2) {
    if (pick(g, 4) == 0) { stmt(g); continue; }
    emit(g, "pcall(function(...)\n");
    g->fns++;
    stmt(g);
    g->fns--;
    emit(g, "end)\n");
  }
  emit(g, "return ");
  switch (pick(g, 6)) {
    case 0: emit(g, "t"); break;
    case 1: expr(g); break;
    case 2: emit(g, "a, b, c, d, t, s, n"); break;
    case 3: emit(g, "{a = a, b = b, c = c, d = d, t = t}"); break;
    case 4: emit(g, "tostring(a), tostring(b), type(c), n, #s"); break;
    default: emit(g, "pcall(json.decode, json.encode(t))"); break;
  }
  emit(g, "\n");
}

/* ---- the invariants -------------------------------------------------------------------- */

static uint64_t now_us (void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static void check_envelope (const char *env, int script_ok, const char *src) {
  json_error_t je;
  FUZZ_CHECK(env != NULL, "no envelope");
  json_t *j = json_loads(env, JSON_ALLOW_NUL, &je);
  FUZZ_CHECK(j != NULL && json_is_object(j), "the envelope is not a JSON object (%s): %.300s",
             je.text, env);
  json_t *ok = json_object_get(j, "ok");
  FUZZ_CHECK(json_is_boolean(ok), "no boolean ok: %.300s", env);
  FUZZ_CHECK(json_is_true(ok) == (script_ok == 1), "ok is not script_ok: %.300s", env);
  if (json_is_true(ok)) {
    FUZZ_CHECK(json_object_get(j, "result") != NULL, "ok without result: %.300s", env);
    if (print_scripts) fprintf(stderr, "outcome: ok\n");
  }
  else {
    json_t *e = json_object_get(j, "error");
    const char *code = json_string_value(json_object_get(e, "code"));
    const char *msg = json_string_value(json_object_get(e, "message"));
    int known = 0;
    for (size_t i = 0; code && i < tp_code_count(); i++)
      known |= strcmp(code, tp_code_at(i)->code) == 0;
    FUZZ_CHECK(known, "error code not in the code table (tp_code_at): %.300s", env);
    FUZZ_CHECK(msg != NULL && msg[0] != '\0', "error without a message: %.300s", env);
    /* A syntax error means the generator wrote bad Lua: worth knowing, not a finding. */
    if (!strcmp(code, "syntax") && print_scripts) fprintf(stderr, "syntax: %s\n%s\n", msg, src);
    if (print_scripts) fprintf(stderr, "outcome: %s: %.120s\n", code, msg);
  }
  json_decref(j);
}

/* Steps r to its end with these budgets (0: none); returns a copy of its envelope (the
** caller frees it) and its ok in *ok. */
static char *step_to_end (tp_run *r, uint64_t budget_us, uint64_t budget_in, uint64_t t0,
                          int *ok) {
  int rc;
  while ((rc = tp_run_step(r, budget_us, budget_in)) == TP_YIELD || rc == TP_WAIT) {
    if (rc == TP_WAIT) tp_engine_poll(engine, 1);
    FUZZ_CHECK(now_us() - t0 < (2 * TIME_US + (uint64_t)slack_ms * 1000) * 4,
               "the run steps past four times its limit + slack");
  }
  FUZZ_CHECK(rc == TP_DONE, "tp_run_step returned %d", rc);
  const char *e = tp_run_envelope(r);
  FUZZ_CHECK(e != NULL, "no envelope after TP_DONE");
  char *env = malloc(strlen(e) + 1);
  FUZZ_CHECK(env != NULL, "out of memory");
  strcpy(env, e);
  json_t *j = json_loads(e, JSON_ALLOW_NUL, NULL);
  *ok = j && json_is_true(json_object_get(j, "ok"));
  json_decref(j);
  return env;
}

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size) {
  static char buf[MAX_SCRIPT];
  if (size < 1) return 0;
  unsigned mode = data[0];
  gen g = { data + 1, data + size, buf, 0, 0, 0, 0 };
  buf[0] = '\0';
  script(&g);
  if (print_scripts) fprintf(stderr, "---- script (mode %u)\n%s\n", mode & 3, buf);
  int peak_reset = reset_peak() == 0;
  long rss0 = peak_reset ? status_kb("VmRSS") : peak_rss_kb();

  char *env = NULL, *env2 = NULL;
  int ok = -1, ok2 = -1, nruns = 1;
  uint64_t t0 = now_us();
  switch (mode & 3) {
    case 0: case 1: {
      int rc = tp_engine_run(engine, buf, g.len, &limits, &env, &ok);
      FUZZ_CHECK(rc == TP_OK, "tp_engine_run returned %d", rc);
      break;
    }
    case 2: {  /* a session: the script twice, the second run sees what the first left */
      tp_session *ss = tp_session_create(engine, &limits);
      FUZZ_CHECK(ss != NULL, "tp_session_create returned NULL");
      tp_run *r = tp_session_run(ss, buf, g.len);
      FUZZ_CHECK(r != NULL, "tp_session_run returned NULL");
      env = step_to_end(r, 0, 0, t0, &ok);
      tp_run_destroy(r);
      r = tp_session_run(ss, buf, g.len);
      FUZZ_CHECK(r != NULL, "tp_session_run returned NULL for the second run");
      env2 = step_to_end(r, 0, 0, t0, &ok2);
      tp_run_destroy(r);
      tp_session_destroy(ss);
      nruns = 2;
      break;
    }
    default: {  /* a frame loop: small steps, the limits hold across them */
      tp_run *r = tp_run_create(engine, buf, g.len, &limits);
      FUZZ_CHECK(r != NULL, "tp_run_create returned NULL");
      env = step_to_end(r, 500 + (mode >> 2) * 40, (mode & 4) ? 20000 : 0, t0, &ok);
      tp_run_destroy(r);
      break;
    }
  }
  uint64_t took_ms = (now_us() - t0) / 1000;
  long late = (long)took_ms - nruns * (long)(TIME_US / 1000);
  if (late > worst_late_ms) worst_late_ms = late;
  FUZZ_CHECK(late <= slack_ms, "%d run(s) took %llu ms, limit %u ms each + %ld ms slack",
             nruns, (unsigned long long)took_ms, TIME_US / 1000, slack_ms);
  long peak = peak_reset ? status_kb("VmHWM") : peak_rss_kb();
  long grew = peak - rss0, bound_kb = 2 * (4 * (long)(MEMORY >> 10) + 64 * 1024) + rss_slack_mb * 1024;
  if (grew > worst_rss_kb) worst_rss_kb = grew;
  FUZZ_CHECK(grew <= bound_kb, "the run raised the peak RSS by %ld MiB (from %ld MiB), over "
             "the bound of %ld MiB", grew / 1024, rss0 / 1024, bound_kb / 1024);
  check_envelope(env, ok, buf);
  free(env);
  if (env2) { check_envelope(env2, ok2, buf); free(env2); }
  return 0;
}
