/*
** run.c: a script as a resumable object, and its result envelope.
**
** tp_run_create normalizes and compiles; tp_run_step resumes the script's thread under
** its thread's step timer until it finishes, its step budget ends, or it waits on the host; the
** envelope is built once, when the run finishes. The verdict of a limit is read from the
** sandbox, never from the error object.
*/
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"
#include "tidepool_server.h"
#include "lauxlib.h"
#include "lobject.h"   /* return_line reads the compiled chunk */
#include "lopcodes.h"
#include "lstate.h"
#include "ldebug.h"

#include "run.h"
#include "calls.h"
#include "replay.h"
#include "normalize.h"
#include "precheck.h"
#include "json.h"
#include "numfmt.h"
#include "limits_table.h"

#define SOURCE_LINE_MAX 200

int tp__core_init (tp_core *k, const tp__host_hooks *hooks, void *ud) {
  k->runs = NULL;
  k->run_ids = 0;
  k->hooks = hooks;
  k->ud = ud;
  k->chunks.chunks = NULL;
  k->chunks.n = 0;
  k->chunks.max = TP_CORE_CHUNKS;
  k->chunks.idle = NULL;
  k->chunks.sandboxes = 0;
  k->chunks.sandboxes_max = TP_CORE_SANDBOXES;
  return tp__watchdog_init(&k->wd);
}

void tp__core_close (tp_core *k) {
  while (k->runs) tp_run_destroy(k->runs);
  tp__arena_pool_drain(&k->chunks);
  tp__watchdog_close(&k->wd);
}

/* ---- the envelope ---------------------------------------------------------------------- */

/* The text of line n of the source, trimmed and capped, as a JSON string (or NULL). */
static json_t *source_line (const tp_run *r, int n) {
  if (n <= 0 || r->src == NULL) return NULL;
  const char *p = r->src, *end = r->src + r->srclen;
  for (int i = 1; i < n && p < end; i++) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    if (nl == NULL) return NULL;
    p = nl + 1;
  }
  const char *e = memchr(p, '\n', (size_t)(end - p));
  if (e == NULL) e = end;
  while (p < e && (*p == ' ' || *p == '\t')) p++;
  while (e > p && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r')) e--;
  size_t len = (size_t)(e - p);
  if (len > SOURCE_LINE_MAX) len = SOURCE_LINE_MAX;
  while (len > 0 && ((unsigned char)p[len] & 0xc0) == 0x80 && (size_t)(e - p) > len) len--;
  return json_stringn(p, len);  /* NULL on invalid UTF-8: the field is left out */
}

/* "script:7: msg" -> line 7, msg. Leaves other messages alone. */
static const char *strip_position (const char *msg, int *line) {
  const char *pre = "script:";
  if (strncmp(msg, pre, strlen(pre)) != 0) return msg;
  const char *p = msg + strlen(pre);
  int n = 0;
  while (*p >= '0' && *p <= '9') n = n * 10 + (*p++ - '0');
  if (*p != ':' || n == 0) return msg;
  if (*line <= 0) *line = n;
  p++;
  if (*p == ' ') p++;
  return p;
}

/* A message as a JSON string, invalid UTF-8 replaced, cut to TP_MSG_MAX bytes (marked). */
static json_t *safe_string (const char *s, size_t len) {
  size_t take = tp__cut_utf8(s, len, TP_MSG_MAX);
  json_t *j = tp__json_string_lossy(s, take, take < len ? TP_MSG_CUT : NULL);
  return j ? j : json_string("(message lost: out of memory)");
}

/* The text of line n of the source, untrimmed, into buf ("" when there is none). */
static const char *line_text (const tp_run *r, int n, char *buf, size_t len) {
  buf[0] = '\0';
  if (n <= 0 || r->src == NULL) return buf;
  const char *p = r->src, *end = r->src + r->srclen;
  for (int i = 1; i < n && p < end; i++) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    if (nl == NULL) return buf;
    p = nl + 1;
  }
  const char *e = memchr(p, '\n', (size_t)(end - p));
  size_t n2 = (size_t)((e ? e : end) - p);
  if (n2 >= len) n2 = len - 1;
  memcpy(buf, p, n2);
  buf[n2] = '\0';
  return buf;
}

/* Whether line starts (after blanks) with the word w. */
static int starts_with_word (const char *line, const char *w) {
  while (*line == ' ' || *line == '\t') line++;
  size_t n = strlen(w);
  return strncmp(line, w, n) == 0 && !(isalnum((unsigned char)line[n]) || line[n] == '_');
}

/*
** Hints by cause. A hint says how to fix the mistake a message most likely comes from,
** for a model that writes JavaScript or Python habits into Lua: a message is matched by
** its needle (and, where the message alone cannot tell the cause, by the text of the
** line), most specific first.
*/
#define HINT_LUA "Scripts are Lua 5.4, not JavaScript or Python: write it the way the message says."
#define HINT_NULL "json.null is JSON's null: it is truthy and not nil; test it with `v == json.null`."
#define HINT_METHOD "Call methods with `:` (s:upper(), obj:method()): it passes the value " \
  "itself as the first argument (self); a `.` call does not."

static const struct { const char *needle, *hint; } runtime_hints[] = {
  { "is not Lua:", HINT_LUA },
  { "json.null", HINT_NULL },
  { "is not defined: if it is a Python f-string", HINT_LUA },
  { "`self` is only set", HINT_METHOD },
  { "(local 'self')", HINT_METHOD },
  { "got no value)", HINT_METHOD },
  { "to 'format' (number has no integer representation)", "%d needs a whole number: use %s, "
    "%.2f, or %d with math.floor(x)." },
  { "number has no integer representation", "That argument must be a whole number: round "
    "it with math.floor(x)." },
  { "a 'string' with", "Arithmetic works on numbers only: join strings with `..` "
    "(\"a\" .. 1); use tonumber(s) only when the string holds a number." },
  { "with a 'string'", "Arithmetic works on numbers only: join strings with `..` "
    "(\"a\" .. 1); use tonumber(s) only when the string holds a number." },
  { "arithmetic on a string value", "Arithmetic works on numbers only: join strings with `..` "
    "(\"a\" .. 1); use tonumber(s) only when the string holds a number." },
  { "attempt to index a nil value", "A value is nil where a table was expected: check the "
    "variable's name and print what the tool or expression actually returned." },
  { "attempt to call a nil value (method", "That method does not exist: strings have "
    "s:upper(), s:sub(i, j), s:find(p)...; a table has only the functions you put in it." },
  { "attempt to call a nil value", "That function does not exist in the sandbox: check its "
    "name; io, require, debug and os.execute are not available." },
  { "attempt to perform arithmetic on a nil value", "A value used in arithmetic is nil: "
    "check the variable's name and print what the tool or expression returned." },
  { "attempt to perform arithmetic", "A value used in arithmetic is not a number: check "
    "what it holds (print it); tonumber(s) converts a string that holds a number." },
  { "attempt to concatenate", "Only strings and numbers can be joined with '..': convert "
    "other values with tostring() or json.encode()." },
  { "attempt to compare", "Only two numbers or two strings can be compared with < or >." },
  { "attempt to yield from outside a coroutine", "coroutine.yield only works inside a "
    "coroutine made with coroutine.create or coroutine.wrap." },
};

#define HINT_UNWRAPPED "tidepool hands over a tool's result already unwrapped: JSON " \
  "text is a table already, other text a string; there is no r.content[1].text: read the " \
  "fields directly (print(json.encode(r)) shows them)."

/* The name quoted in a message's "(method 'x')" or "(field 'x')", into buf. */
static const char *quoted_name (const char *msg, const char *kind, char *buf, size_t len) {
  const char *p = strstr(msg, kind);
  if (p == NULL) return NULL;
  p += strlen(kind);
  size_t n = 0;
  while (p[n] && p[n] != '\'' && n < len - 1) { buf[n] = p[n]; n++; }
  buf[n] = '\0';
  return p[n] == '\'' ? buf : NULL;
}

/* The hint of a runtime error message; line is the text of its line ("" when unknown). */
static const char *runtime_hint (const char *msg, const char *line, char *buf, size_t len) {
  /* `x = a // note`: Lua reads // as floor division by the global `note` */
  if (strstr(msg, "arithmetic on a nil value (global") && strstr(line, "//"))
    return "`//` is floor division in Lua, not a comment: comments start with `--`.";
  /* functions Lua never had: s:trim(), arr:append(x), string.split */
  char name[64];
  if (strstr(msg, "attempt to call a nil value")) {
    const char *way = NULL;
    int method = 0;
    if (quoted_name(msg, "(method '", name, sizeof name)) {
      way = tp__lua_way(NULL, name);
      method = 1;
    }
    else if (quoted_name(msg, "(field '", name, sizeof name)) {
      static const char *const libs[] = { "string", "table", "math", "os" };
      for (size_t i = 0; i < 4 && way == NULL; i++) way = tp__lua_way(libs[i], name);
      if (way == NULL) way = tp__lua_way(NULL, name);
    }
    if (way) {
      snprintf(buf, len, "Lua has no %s%s%s: %s.", method ? ":" : "", name,
               method ? "()" : "", way);
      return buf;
    }
  }
  if (strstr(msg, "nil value") && (strstr(line, ".content[") || strstr(msg, "(field 'content')")))
    return HINT_UNWRAPPED;
  if (strstr(msg, "nil value") && strstr(line, "[0]"))
    return "Lua arrays start at 1: the first item is t[1], and t[0] is nil; loop with "
           "for i = 1, #t do (or for i, v in ipairs(t) do).";
  if (strstr(msg, "call a table value (for iterator"))
    return "A for loop walks a table through an iterator: for k, v in pairs(t) do (every "
           "key) or for i, v in ipairs(t) do (items 1..n), not for k, v in t do.";
  if (strstr(msg, "invalid order function for sorting"))
    return "A sort comparator returns a boolean, true when a goes first: table.sort(t, "
           "function(a, b) return a < b end); a - b is a number, and every number is true in Lua.";
  for (size_t i = 0; i < sizeof runtime_hints / sizeof runtime_hints[0]; i++)
    if (strstr(msg, runtime_hints[i].needle)) return runtime_hints[i].hint;
  return NULL;
}

/* The hint of a syntax error, keyed on the token Lua stopped at ("near 'x'") and the
** text of the line; the generic one when no class fits. */
/* Whether text has word w (not inside a longer name). */
static int has_word (const char *text, const char *w) {
  size_t n = strlen(w);
  for (const char *p = strstr(text, w); p; p = strstr(p + 1, w)) {
    int before = p > text && (isalnum((unsigned char)p[-1]) || p[-1] == '_');
    int after = isalnum((unsigned char)p[n]) || p[n] == '_';
    if (!before && !after) return 1;
  }
  return 0;
}

/* The first line of r's source that has `else if` (two words), or 0. */
static int else_if_line (const tp_run *r) {
  const char *p = r->src, *end = r->src + r->srclen;
  for (int n = 1; p < end; n++) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    const char *e = nl ? nl : end;
    for (const char *q = p; q + 7 <= e; q++) {
      if (memcmp(q, "else", 4) != 0 || (q > p && (isalnum((unsigned char)q[-1]) || q[-1] == '_')))
        continue;
      const char *t = q + 4;
      if (t < e && *t != ' ' && *t != '\t') continue;
      while (t < e && (*t == ' ' || *t == '\t')) t++;
      if (e - t >= 2 && t[0] == 'i' && t[1] == 'f' &&
          (t + 2 == e || !(isalnum((unsigned char)t[2]) || t[2] == '_')))
        return n;
    }
    if (nl == NULL) break;
    p = nl + 1;
  }
  return 0;
}

static const char *syntax_hint (const tp_run *r, const char *msg, const char *line,
                                const char *prev, char *buf, size_t buflen) {
  const char *near = strstr(msg, "near '");
  char tok[16] = "";
  if (near) {
    near += 6;
    size_t n = 0;
    while (near[n] && near[n] != '\'' && n < sizeof tok - 1) { tok[n] = near[n]; n++; }
    tok[n] = '\0';
  }
  /* `else if` opens a second if, whose missing end Lua finds only at the end of the text */
  int el = strstr(msg, "'end' expected") ? else_if_line(r) : 0;
  if (el) {
    snprintf(buf, buflen, "Line %d has `else if`: Lua writes elseif as one word (if a then "
             "... elseif b then ... else ... end); `else if` opens a second if that needs "
             "its own end. Write elseif there rather than adding an end.", el);
    return buf;
  }
  if (has_word(line, "continue"))
    return "Lua has no continue: put a label before the loop's end and jump to it "
           "(if skip then goto continue end ... ::continue:: end), or wrap the rest of "
           "the body in if not skip then ... end.";
  if (strcmp(tok, "?") == 0 && strstr(line, "??"))
    return "Lua has no ??: write a or b (b when a is nil or false).";
  if (strcmp(tok, "?") == 0 && (strstr(line, "?.") || strstr(line, "?[")))
    return "Lua has no ?.: write a and a.b (nil when a is nil).";
  if (strcmp(tok, "?") == 0)
    return "Lua has no ? : operator: write cond and a or b (when a is never false or nil), "
           "or an if statement.";
  if (strcmp(tok, "//") == 0 || starts_with_word(line, "//") || strstr(line, "/*"))
    return "Comments start with `--` in Lua (and --[[ ... ]] for a block); `//` is floor division.";
  if (strstr(line, "=>"))
    return "Lua has no arrow functions: write function(x) return x * 2 end.";
  if (strstr(line, ".then") || (strcmp(tok, "then") == 0 && strstr(msg, "<name> expected")))
    return "Tool calls return their result directly: no .then and no await; "
           "write local r = tools.x.y{...}.";
  if (starts_with_word(line, "def"))
    return "Lua functions are written function name(a, b) ... end (no def, no colon).";
  if (starts_with_word(line, "try") || strstr(line, "catch") || starts_with_word(prev, "try") ||
      starts_with_word(line, "except"))
    return "Lua has no try/catch: local ok, err = pcall(function() ... end).";
  if (starts_with_word(line, "const") || starts_with_word(line, "let") ||
      starts_with_word(line, "var"))
    return "Declare variables with local: local x = 1 (no const, let or var).";
  if (strstr(line, "!=") || strcmp(tok, "!") == 0)
    return "Lua writes not-equal as ~= and negation as not: if a ~= b then, if not ok then.";
  if (strstr(line, "&&") || strstr(line, "||") || strcmp(tok, "&") == 0 || strcmp(tok, "|") == 0)
    return "Lua writes && as and, || as or, ! as not.";
  if (strstr(line, "===")) return "Lua compares with == and ~= (there is no ===).";
  if (strstr(line, "+=") || strstr(line, "-=") || strstr(line, "*=") || strstr(line, "/=") ||
      strstr(line, "..=") || strstr(line, "++"))
    return "Lua has no += or ++: write x = x + 1 (and s = s .. \"more\").";
  if (strcmp(tok, "`") == 0)
    return "Lua has no template strings: use string.format(\"%s is %d\", name, n) or join with ..";
  if (strstr(msg, "'then' expected") || strstr(msg, "'do' expected"))
    return "Blocks are if c then ... end, for i = 1, n do ... end, while c do ... end "
           "(no colon, no braces).";
  /* key: value in a table: a word or a quoted key followed by ':' and a blank */
  for (const char *p = strchr(line, ':'); p; p = strchr(p + 1, ':'))
    if (p > line && (isalnum((unsigned char)p[-1]) || p[-1] == '_' || p[-1] == '"' ||
                     p[-1] == '\'') && (p[1] == ' ' || p[1] == '\t'))
      return "Table fields use =: {key = value, [\"odd key\"] = 1}, not {key: value}; "
             "json.decode(text) reads JSON.";
  if (strcmp(tok, "{") == 0 || strcmp(tok, "}") == 0 ||
      (strstr(line, "{") && strstr(msg, "'end' expected")))
    return "Lua blocks are not in braces: function f(x) ... end, if c then ... end; "
           "braces make tables only.";
  return "Fix the syntax on that line. Scripts are Lua 5.4: ~= for not-equal, .. to join "
         "strings, -- for comments, local for variables, end closes function/if/for/while.";
}

/* The hint of a tool's error code: how to fix the call. pcall is for failures the
** script expects and can go on without. */
static const char *tool_hint (const char *code) {
  static const struct { const char *code, *hint; } hints[] = {
    { "tool.invalid_input", "Fix the arguments: the message gives the JSON path of the "
      "wrong value and what was expected; tools.describe(name) shows the schema." },
    { "tool.unknown", "Check the tool's name with tools.list() or tools.search(\"words\")." },
    { "tool.invalid_output", "The tool returned data that breaks its own output schema, "
      "which the script cannot fix: use pcall if the script can go on without it." },
    { "tool.failed", "The tool failed: the message says why. Change what it names, or use "
      "pcall(tools.x.y, args) when the script can go on without that result." },
    { "tool.timeout", "The tool did not answer in time: ask it for less work, or use pcall "
      "when the script can go on without that result." },
    { "tool.denied", "The policy refuses this call: retrying will not help; use another "
      "tool or return what you have." },
    { "tool.unavailable", "The tool's server is down or restarting: retry later in the "
      "run, or use pcall when the script can go on without that result." },
    { "tool.rate_limited", "Too many calls of this tool too fast: wait retry_after_ms "
      "before calling it again, or do with fewer calls." },
    { "replay.divergence", "The run was resumed by replaying its log, and the script (or "
      "what it read: a tool's result, the clock, math.random) no longer makes the calls "
      "it made then: run the script afresh, or resume it unchanged." },
  };
  for (size_t i = 0; i < sizeof hints / sizeof hints[0]; i++)
    if (strcmp(code, hints[i].code) == 0) return hints[i].hint;
  return NULL;
}

/* pcall(tools.x.y{...}) on line: the tool runs before pcall does, so its error is not
** caught. The hint shows both forms side by side, into buf; NULL when line has none. */
static const char *pcall_call_hint (const char *line, char *buf, size_t len) {
  const char *p = strstr(line, "pcall(tools.");
  if (p == NULL) return NULL;
  p += 12;
  size_t n = 0;
  while (isalnum((unsigned char)p[n]) || p[n] == '_' || p[n] == '.') n++;
  const char *q = p + n;
  while (*q == ' ') q++;
  if (n == 0 || n > 128 || (*q != '{' && *q != '(')) return NULL;
  snprintf(buf, len, "pcall(tools.%.*s{...}) calls the tool first, before pcall runs, so its "
           "error is not caught. Give pcall the function and its arguments apart: write "
           "local ok, r = pcall(tools.%.*s, {...}), not pcall(tools.%.*s{...}).",
           (int)n, p, (int)n, p, (int)n, p);
  return buf;
}

/* The hint of a verdict: the limits table's, or the code's own (replay.divergence). */
static const char *kill_hint (tp_kill why) {
  const char *h = tp__kill_hint(why);
  return h ? h : tool_hint(tp__kill_code(why));
}

/* NULL when the host is out of memory, with the verdict limit.memory recorded (finish
** then makes the envelope of the verdict, or none). */
static json_t *make_error (const tp_run *r, const char *code, const char *msg, size_t len,
                           int line, const char *hint) {
  json_t *err = json_object();
  if (err == NULL || json_object_set_new(err, "code", json_string(code)) != 0 ||
      json_object_set_new(err, "message", safe_string(msg, len)) != 0) {
    json_decref(err);
    if (r->sb) tp__sandbox_kill(r->sb, TP_KILL_MEMORY);
    return NULL;
  }
  if (line > 0) {  /* the rest is left out when the host is out of memory */
    json_object_set_new(err, "line", json_integer(line));
    json_t *src = source_line(r, line);
    if (src && json_string_length(src) > 0) json_object_set_new(err, "source", src);
    else json_decref(src);  /* an empty line (the end of the text) says nothing */
  }
  if (hint) json_object_set_new(err, "hint", json_string(hint));
  return err;
}

/* The line of the script where thread co stopped: the innermost frame in the script. */
static int error_line (lua_State *co) {
  lua_Debug ar;
  for (int level = 0; lua_getstack(co, level, &ar); level++) {
    if (!lua_getinfo(co, "Sl", &ar)) break;
    if (ar.currentline > 0 && strcmp(ar.source, "=script") == 0) return ar.currentline;
  }
  return 0;
}

/* Pushes the field key of the table on top of co (nil when it has none) and returns its
** type, like lua_rawget, without making key a Lua string: this runs outside any
** protected call, where an allocation that fails would abort the process, and a key the
** script never used is not interned yet. Error objects are small tables. */
static int rawget_noalloc (lua_State *co, const char *key) {
  size_t klen = strlen(key);
  int t = lua_gettop(co);
  lua_pushnil(co);
  while (lua_next(co, t)) {
    size_t len;
    if (lua_type(co, -2) == LUA_TSTRING) {
      const char *k = lua_tolstring(co, -2, &len);
      if (len == klen && memcmp(k, key, len) == 0) {
        lua_remove(co, -2);  /* the key: the value stays */
        return lua_type(co, -1);
      }
    }
    lua_pop(co, 1);
  }
  lua_pushnil(co);
  return LUA_TNIL;
}

/* ---- JSON text used as a table --------------------------------------------------------- */

/* Pushes the variable name (len n) visible in the frame ar of co: a local (the innermost
** of that name), an upvalue of the frame's function, or a global; 0 (nothing pushed) when
** there is none. Pushes no new strings: runs outside any protected call. */
static int push_variable (lua_State *co, lua_Debug *ar, const char *name, size_t n) {
  int found = 0;
  const char *ln;
  for (int i = 1; (ln = lua_getlocal(co, ar, i)) != NULL; i++) {
    if (strlen(ln) == n && memcmp(ln, name, n) == 0) {
      if (found) lua_remove(co, -2);
      found = 1;
    }
    else lua_pop(co, 1);
  }
  if (found) return 1;
  if (!lua_getinfo(co, "f", ar)) return 0;
  int f = lua_gettop(co);
  for (int i = 1; (ln = lua_getupvalue(co, f, i)) != NULL; i++) {
    if (strlen(ln) == n && memcmp(ln, name, n) == 0) { lua_remove(co, f); return 1; }
    lua_pop(co, 1);
  }
  lua_pop(co, 1);
  lua_rawgeti(co, LUA_REGISTRYINDEX, LUA_RIDX_GLOBALS);
  if (lua_type(co, -1) == LUA_TTABLE) {
    char key[64];
    if (n >= sizeof key) { lua_pop(co, 1); return 0; }
    memcpy(key, name, n);
    key[n] = '\0';
    if (rawget_noalloc(co, key) != LUA_TNIL) { lua_remove(co, -2); return 1; }
    lua_pop(co, 1);
  }
  lua_pop(co, 1);
  return 0;
}

/*
** The hint of an error where the script used a string holding JSON text as a table
** (r.items on such a string is nil; r.x = 1, pairs(r) fail): in the text of the failing
** line, a path a.b.c whose value, read in the failing frame with raw access, is such a
** string followed by .field or [ (or, when the message says a string was used, the path
** itself). Names the tool that returned the text when it is one of the last results.
*/
static const char *json_text_hint (tp_run *r, lua_State *co, const char *msg, int line,
                                   const char *text, char *buf, size_t len) {
  int strmsg = strstr(msg, "a string value") != NULL || strstr(msg, "got string)") != NULL;
  if (!strmsg && !strstr(msg, "a nil value") && !strstr(msg, "got nil)")) return NULL;
  lua_Debug ar;
  int level = 0, found = 0;
  for (; lua_getstack(co, level, &ar); level++) {
    if (!lua_getinfo(co, "Sl", &ar)) return NULL;
    if (strcmp(ar.source, "=script") == 0 && ar.currentline == line) { found = 1; break; }
  }
  if (!found || !lua_checkstack(co, 8)) return NULL;
  int top = lua_gettop(co);
  const char *hint = NULL;
  for (const char *p = text; *p && hint == NULL; p++) {
    if (!(isalpha((unsigned char)*p) || *p == '_')) continue;
    if (p > text && (isalnum((unsigned char)p[-1]) || p[-1] == '_' || p[-1] == '.' ||
                     p[-1] == ':' || p[-1] == '"' || p[-1] == '\'')) continue;
    const char *q = p;
    while (isalnum((unsigned char)*q) || *q == '_') q++;
    if (!push_variable(co, &ar, p, (size_t)(q - p))) { p = q - 1; continue; }
    for (;;) {  /* the value of p..q on top of co */
      size_t sl;
      const char *s = lua_type(co, -1) == LUA_TSTRING ? lua_tolstring(co, -1, &sl) : NULL;
      const char *f = q + 1, *fe = f;
      if (*q == '.') while (isalnum((unsigned char)*fe) || *fe == '_') fe++;
      if (s != NULL && tp__json_text_like(s, sl) &&
          ((*q == '.' && fe > f) || *q == '[' || strmsg)) {
        const char *tool = NULL;
        uint64_t h = tp__json_text_hash(s, sl);
        for (int i = 0; r->json_texts && i < r->njson_texts && i < TP_JSON_TEXTS_MAX; i++)
          if (r->json_texts[i].hash == h && r->json_texts[i].len == sl)
            tool = r->json_texts[i].tool;
        int vn = (int)(q - p) < 60 ? (int)(q - p) : 60;
        char then[96] = "";
        if (*q == '.' && fe > f && fe - f < 60)
          snprintf(then, sizeof then, ", then use t.%.*s", (int)(fe - f), f);
        snprintf(buf, len, "`%.*s` is a string holding JSON text%s%s%s, not a table: decode "
                 "it first: local t = json.decode(%.*s)%s.", vn, p,
                 tool ? " (the result of tools." : "", tool ? tool : "", tool ? ")" : "",
                 vn, p, then);
        hint = buf;
        break;
      }
      if (*q != '.' || fe == f || lua_type(co, -1) != LUA_TTABLE || fe - f >= 64) break;
      char key[64];
      memcpy(key, f, (size_t)(fe - f));
      key[fe - f] = '\0';
      rawget_noalloc(co, key);
      lua_remove(co, -2);
      q = fe;
    }
    lua_settop(co, top);
    p = q - 1;
  }
  lua_settop(co, top);
  return hint;
}

/* Reads the error object on top of co, with raw access only. */
static json_t *error_from_thread (tp_run *r, lua_State *co, int status) {
  tp_sandbox *sb = r->sb;
  int line = error_line(co);
  int why = atomic_load(&sb->kill);
  if (why != TP_KILL_NONE) {
    char msg[TP_KILL_NOTE_MAX];
    tp__kill_message(sb, (tp_kill)why, msg, sizeof msg);
    const char *hint = kill_hint((tp_kill)why);
    /* Plugin handlers that held the thread for half the limit or more explain it. */
    uint64_t lim_us = why == TP_KILL_TIME ? sb->limits.wall_us :
                      why == TP_KILL_CPU ? sb->limits.cpu_us : 0;
    if (lim_us && r->blocked_hint[0] && r->blocked_ns * 2 >= lim_us * 1000u)
      hint = r->blocked_hint;
    return make_error(r, tp__kill_code((tp_kill)why), msg, strlen(msg), line, hint);
  }
  const char *msg = NULL, *code = "runtime";
  size_t len = 0;
  lua_Integer retry_ms = 0;  /* tool.rate_limited's retry_after_ms */
  char buf[96];
  if (status == LUA_ERRMEM) {
    msg = "not enough memory";
  }
  else if (lua_type(co, -1) == LUA_TSTRING) {
    msg = lua_tolstring(co, -1, &len);
  }
  else if (lua_type(co, -1) == LUA_TTABLE) {
    if (rawget_noalloc(co, "message") == LUA_TSTRING) msg = lua_tolstring(co, -1, &len);
    lua_pop(co, 1);  /* the string stays alive in the table */
    if (msg == NULL) msg = "(error object is a table value without a string 'message' field)";
    if (rawget_noalloc(co, "code") == LUA_TSTRING) {
      const char *c = lua_tostring(co, -1);
      if (strncmp(c, "tool.", 5) == 0 && strlen(c) < 32) {
        static const char *const codes[] = { "tool.unknown", "tool.invalid_input",
          "tool.invalid_output", "tool.failed", "tool.timeout", "tool.denied",
          "tool.unavailable", "tool.rate_limited" };
        for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++)
          if (strcmp(c, codes[i]) == 0) code = codes[i];
      }
    }
    lua_pop(co, 1);
    if (rawget_noalloc(co, "retry_after_ms") == LUA_TNUMBER && lua_isinteger(co, -1))
      retry_ms = lua_tointeger(co, -1);
    lua_pop(co, 1);
  }
  else {
    snprintf(buf, sizeof buf, "(error object is a %s value)", luaL_typename(co, -1));
    msg = buf;
  }
  if (len == 0) len = strlen(msg);
  const char *m = strip_position(msg, &line);
  len -= (size_t)(m - msg);
  char ltext[SOURCE_LINE_MAX + 1], hbuf[400];
  const char *hint = strcmp(code, "runtime") != 0
                   ? (pcall_call_hint(line_text(r, line, ltext, sizeof ltext), hbuf, sizeof hbuf)
                      ? hbuf : tool_hint(code))
                   : runtime_hint(m, line_text(r, line, ltext, sizeof ltext), hbuf,
                                  sizeof hbuf);
  char jbuf[300];
  const char *jhint = strcmp(code, "runtime") == 0 && line > 0 &&
                      lua_type(co, -1) == LUA_TSTRING
                    ? json_text_hint(r, co, m, line, ltext, jbuf, sizeof jbuf) : NULL;
  if (jhint) hint = jhint;
  json_t *err = make_error(r, code, m, len, line, hint);
  if (err && retry_ms > 0 && strcmp(code, "tool.rate_limited") == 0)
    json_object_set_new(err, "retry_after_ms", json_integer(retry_ms));
  return err;
}

static json_t *stats (const tp_run *r, uint64_t wall) {
  const tp_sandbox *sb = r->sb;
  json_t *s = json_object();
  if (s == NULL) return NULL;
  if (sb->instr_limit) json_object_set_new(s, "instructions", json_integer((json_int_t)sb->instr_used));
  /* milliseconds to the microsecond, so they print short */
  json_object_set_new(s, "cpu_ms", json_real((double)(r->cpu_used_ns / 1000) / 1e3));
  json_object_set_new(s, "wall_ms", json_real((double)(wall / 1000) / 1e3));
  if (r->wait_ns)  /* of wall_ms: before the run began (upstream servers starting) */
    json_object_set_new(s, "wait_ms", json_real((double)(r->wait_ns / 1000) / 1e3));
  json_object_set_new(s, "memory_peak", json_integer((json_int_t)sb->mem_peak));
  return s;
}

/* Appends the decimal digits of x to out at *o. */
static void put_int (char *out, size_t *o, long long x) {
  char tmp[24];
  unsigned long long u = x < 0 ? 0ull - (unsigned long long)x : (unsigned long long)x;
  int n = (int)sizeof tmp;
  do { tmp[--n] = (char)('0' + u % 10); u /= 10; } while (u != 0);
  if (x < 0) tmp[--n] = '-';
  memcpy(out + *o, tmp + n, sizeof tmp - (size_t)n);
  *o += sizeof tmp - (size_t)n;
}

static void put_field (char *out, size_t *o, const char *key) {
  size_t n = strlen(key);
  memcpy(out + *o, key, n);
  *o += n;
}

/* A time in ns as the stats give it: milliseconds to the microsecond, a JSON real. */
static void put_ms (char *out, size_t *o, uint64_t ns) {
  *o += tp__fmt_json_milli(ns / 1000, out + *o);
}

/* The text of stats(r, wall), as the dump of that object would write it (keys sorted),
** without the tree: into out (STATS_ROOM bytes); returns its length. */
#define STATS_ROOM (96 + 2 * 24 + 3 * TP_NUMFMT_MAX)
static size_t stats_text (const tp_run *r, uint64_t wall, char *out) {
  const tp_sandbox *sb = r->sb;
  size_t o = 0;
  put_field(out, &o, "{\"cpu_ms\":");
  put_ms(out, &o, r->cpu_used_ns);
  if (sb->instr_limit) {
    put_field(out, &o, ",\"instructions\":");
    put_int(out, &o, (long long)sb->instr_used);
  }
  put_field(out, &o, ",\"memory_peak\":");
  put_int(out, &o, (long long)sb->mem_peak);
  if (r->wait_ns) {
    put_field(out, &o, ",\"wait_ms\":");
    put_ms(out, &o, r->wait_ns);
  }
  put_field(out, &o, ",\"wall_ms\":");
  put_ms(out, &o, wall);
  out[o++] = '}';
  out[o] = '\0';
  return o;
}

/* The envelope's pieces, in their order: "key":<JSON text>. */
enum { P_OK, P_VALUE, P_WARN, P_LOGS, P_CALLS, P_STATS, P__COUNT };  /* P_WARN: when any */
/* text is NULL when the piece is lost (out of memory); own is what to free, if any */
typedef struct piece {
  const char *key;
  size_t klen;
  const char *text;
  size_t len;
  char *own;
} piece;

static size_t envelope_size (const piece *p) {
  size_t n = 2;  /* {} */
  for (int i = 0; i < P__COUNT; i++)
    if (p[i].key) n += p[i].klen + p[i].len + 4;  /* ,"k": */
  return n;
}

/* A piece's text from a tree (NULL: the piece is lost, which fails the envelope). */
static void piece_of (piece *p, const char *key, const json_t *v) {
  p->key = key;
  p->klen = strlen(key);
  p->text = p->own = tp__json_dumpsn(v, &p->len);
}

/* A piece of constant text, or of text the piece does not own. */
static void piece_lit (piece *p, const char *key, const char *text, size_t len) {
  *p = (piece){ key, strlen(key), text, len, NULL };
}

static void piece_free (piece *p) {
  free(p->own);
  p->own = NULL;
  p->text = NULL;
}

/*
** Builds the envelope from the result's JSON text (stolen; NULL for null) or from error
** (stolen). Keys come in a fixed order, "ok" first, so a person or a model reads the
** verdict before the data. The envelope is made in one allocation of its exact size,
** charged to the run's host budget; when an ok envelope does not fit, the run ends with
** limit.memory instead and the result is left out, while logs and calls stay (each is
** bounded by its own cap, and side effects must be reported). Bounded in time by size
** caps: every piece is capped (result, output, calls), and joining them is a copy.
** The pieces of a plain run are written without trees or allocations of their own (the
** verdict and null as constants, no logs as [], the stats and a few calls' records in
** buffers on the stack): the envelope was a quarter of a run waiting on one tool call.
*/
static void finish (tp_run *r, char *result_text, size_t result_len, json_t *error) {
  tp_sandbox *sb = r->sb;
  piece p[P__COUNT];
  char stats_buf[STATS_ROOM], calls_buf[TP_CALLS_TEXT_STACK];
  int lost = 0;  /* an error whose object the host could not make (make_error) */
  if (error == NULL && result_text == NULL && sb != NULL) {
    int why = atomic_load(&sb->kill);
    if (why != TP_KILL_NONE) {
      char msg[TP_KILL_NOTE_MAX];
      tp__kill_message(sb, (tp_kill)why, msg, sizeof msg);
      error = make_error(r, tp__kill_code((tp_kill)why), msg, strlen(msg), 0,
                         kill_hint((tp_kill)why));
      lost = error == NULL;
    }
  }
  r->state = ST_DONE;
  tp__run_cancel_calls(r);
  memset(p, 0, sizeof p);
  size_t clen = 0;
  char *calls = tp__run_calls_text_in(r, &clen, calls_buf, sizeof calls_buf);
  piece_lit(&p[P_CALLS], "calls", calls, clen);
  if (calls != calls_buf) p[P_CALLS].own = calls;
  uint64_t wall = sb ? (r->start_ns ? tp__now_ns() - r->start_ns : 0) + r->wait_ns : 0;
  json_t *st = NULL;  /* the tree, for a traced run's span */
  if (r->traced) st = sb ? stats(r, wall) : json_object();
  if (sb != NULL) piece_lit(&p[P_STATS], "stats", stats_buf, stats_text(r, wall, stats_buf));
  else piece_lit(&p[P_STATS], "stats", "{}", 2);
  if (json_array_size(r->warnings) > 0) piece_of(&p[P_WARN], "warnings", r->warnings);
  if (sb == NULL || json_array_size(sb->logs) == 0) piece_lit(&p[P_LOGS], "logs", "[]", 2);
  else piece_of(&p[P_LOGS], "logs", sb->logs);
  for (int pass = 0; pass < 2; pass++) {
    r->ok = error == NULL && !lost;
    if (r->ok) piece_lit(&p[P_OK], "ok", "true", 4);
    else piece_lit(&p[P_OK], "ok", "false", 5);
    if (lost) piece_lit(&p[P_VALUE], "error", NULL, 0);  /* no envelope: out of memory */
    else if (error != NULL) piece_of(&p[P_VALUE], "error", error);
    else if (result_text != NULL) {
      piece_lit(&p[P_VALUE], "result", result_text, result_len);
      p[P_VALUE].own = result_text;
    }
    else piece_lit(&p[P_VALUE], "result", "null", 4);
    result_text = NULL;  /* owned by the piece now */
    size_t need = envelope_size(p);
    if (sb == NULL) break;
    if (error != NULL) {  /* charged when it fits: an error envelope keeps its own verdict */
      if ((sb->host_cap == 0 || (need <= sb->host_cap && sb->host_used <= sb->host_cap - need))
          && tp__host_charge(sb, need) == 0)
        r->envelope_cost = need;
      break;
    }
    if (tp__host_charge(sb, need) == 0) { r->envelope_cost = need; break; }
    /* an ok envelope past the budget: the verdict is limit.memory now */
    piece_free(&p[P_VALUE]);
    char msg[TP_KILL_NOTE_MAX];
    tp__kill_message(sb, TP_KILL_MEMORY, msg, sizeof msg);
    error = make_error(r, "limit.memory", msg, strlen(msg), 0, tp__kill_hint(TP_KILL_MEMORY));
  }
  size_t total = envelope_size(p), len = 0;
  char *buf = malloc(total + 1);
  for (int i = 0; i < P__COUNT && buf != NULL; i++) {
    if (p[i].key == NULL) continue;  /* a piece left out (no warnings) */
    if (p[i].text == NULL) { free(buf); buf = NULL; break; }
    buf[len++] = i ? ',' : '{';
    buf[len++] = '"';
    memcpy(buf + len, p[i].key, p[i].klen);
    len += p[i].klen;
    buf[len++] = '"';
    buf[len++] = ':';
    memcpy(buf + len, p[i].text, p[i].len);
    len += p[i].len;
  }
  if (buf != NULL) {
    buf[len++] = '}';
    buf[len] = '\0';
  }
  for (int i = 0; i < P__COUNT; i++) free(p[i].own);
  if (r->traced) {
    const char *code = r->ok ? NULL : json_string_value(json_object_get(error, "code"));
    tp__hook(r, trace_run, r, r->ok ? NULL : code ? code : "limit.memory", st);
  }
  json_decref(st);
  json_decref(error);
  r->envelope = buf;  /* NULL when the host is out of memory: tp_run_envelope says so */
}

/*
** The script returned nres values on top of T: the result is nil, the value, or an
** array of them. All the values share one result cap (limits.result, JSON text) and the
** run's host budget (the trees at their cost in host memory, then the text): past the
** cap the run ends with limit.result, past the budget with limit.memory, as soon as the
** conversion passes it. Bounded in time by the run's verdict: the step's timer stays armed
** while this runs (tp_run_step), and the walk and the dump poll the verdict every few
** thousand nodes, so a deadline passing here ends the run with limit.time.
*/
static void finish_ok (tp_run *r, int nres) {
  tp_sandbox *sb = r->sb;
  lua_State *T = sb->T;
  const tp_json_budget *budget = tp__sandbox_budget(sb);
  tp_json_err jerr;
  tp_json_opts o;
  json_t *result;
  size_t cap = sb->limits.result;
  /* Nothing, or a boolean (`return r.ok`): the text is a constant. The host budget is
  ** charged as the walk and the dump below would charge it, the walk's scalar given back
  ** before the envelope and the dump's first buffer held while it is made, whenever both
  ** fit; at the budget's edge, or with a verdict already in, the way below runs. */
  int lit = nres == 0 ? 0 : nres == 1 && lua_type(T, -1) == LUA_TBOOLEAN
            ? (lua_toboolean(T, -1) ? 1 : 2) : -1;
  if (lit >= 0 && (cap == 0 || cap >= 5) && atomic_load(&sb->kill) == TP_KILL_NONE) {
    static const char *const words[] = { "null", "true", "false" };
    size_t n = strlen(words[lit]), walk_cost = lit ? TP_JSON_COST_SCALAR : 0;
    size_t text_cost = tp__grow_cap(0, n, 1, 256);  /* tp__json_dumps_charged's buffer */
    char *text = sb->host_cap == 0 || (sb->host_used <= sb->host_cap &&
                 walk_cost + text_cost <= sb->host_cap - sb->host_used)
                 ? malloc(n + 1) : NULL;
    if (text != NULL) {
      memcpy(text, words[lit], n + 1);
      tp__host_charge(sb, text_cost);
      finish(r, text, n, NULL);
      tp__host_refund(sb, text_cost);
      return;
    }
  }
  memset(&jerr, 0, sizeof jerr);
  memset(&o, 0, sizeof o);
  o.max_bytes = cap;
  o.budget = budget;
  if (nres == 0) result = json_null();
  else if (nres == 1) result = tp__json_from_lua_ex(T, -1, &o, &jerr);
  else {
    result = json_array();
    o.bytes = 2;  /* [] */
    for (int i = nres; result != NULL && i >= 1; i--) {
      if (i % TP_JSON_POLL_NODES == 0 && atomic_load(&sb->kill) != TP_KILL_NONE) {
        json_decref(result);  /* each walk polls only from its 4096th node */
        result = NULL;
        break;
      }
      json_t *v = tp__json_from_lua_ex(T, -i, &o, &jerr);
      if (v == NULL || json_array_append_new(result, v) != 0) {
        json_decref(result);
        result = NULL;
        break;
      }
      o.bytes++;  /* , */
    }
  }
  if (result == NULL) {
    if (o.cost) budget->refund(budget->ud, o.cost);  /* values converted before the failure */
    int why = atomic_load(&sb->kill);
    if (why == TP_KILL_NONE && o.over_bytes) {
      char cs[48];
      tp__limit_words(TP__UNIT_BYTES, cap, cs, sizeof cs);
      tp__sandbox_kill_note(sb, TP_KILL_RESULT, "the script's return value is larger than "
                            "its result limit of %s of JSON (at %.60s)", cs, jerr.path);
      why = atomic_load(&sb->kill);
    }
    else if (why == TP_KILL_MEMORY && o.over_budget) {
      char ms[48];
      tp__limit_words(TP__UNIT_BYTES, sb->limits.memory, ms, sizeof ms);
      snprintf(sb->kill_note, sizeof sb->kill_note, "the script's result as JSON needs more "
               "host memory than its memory limit of %.16s (at %.40s); a table "
               "that appears several times is copied each time", ms, jerr.path);
    }
    if (why != TP_KILL_NONE) {
      char msg[TP_KILL_NOTE_MAX];
      tp__kill_message(sb, (tp_kill)why, msg, sizeof msg);
      finish(r, NULL, 0, make_error(r, tp__kill_code((tp_kill)why), msg, strlen(msg), 0,
                                    kill_hint((tp_kill)why)));
      return;
    }
    char msg[700];
    int has_path = jerr.path[0] && strstr(jerr.message, jerr.path) == NULL;
    snprintf(msg, sizeof msg, "the script's return value cannot be sent as JSON: %s%s%s",
             jerr.message, has_path ? " (at " : "", has_path ? jerr.path : "");
    if (has_path) strncat(msg, ")", sizeof msg - strlen(msg) - 1);
    finish(r, NULL, 0, make_error(r, "runtime", msg, strlen(msg), r->return_line,
      "Return plain data: tables of strings, numbers, booleans and json.null, "
      "with either array items or string keys."));
    return;
  }
  size_t n = 0, text_cost = 0;
  int refused = 0;
  char *text = tp__json_dumps_charged(result, budget, &n, &text_cost, &refused);
  json_decref(result);
  if (o.cost) budget->refund(budget->ud, o.cost);
  if (text != NULL && cap && n > cap) {  /* escapes made the text longer than counted */
    char cs[48];
    tp__limit_words(TP__UNIT_BYTES, cap, cs, sizeof cs);
    free(text);
    text = NULL;
    budget->refund(budget->ud, text_cost);
    text_cost = 0;
    tp__sandbox_kill_note(sb, TP_KILL_RESULT, "the script's result is %zu bytes of JSON, "
                          "over its result limit of %s", n, cs);
  }
  int why = atomic_load(&sb->kill);
  if (text == NULL && why == TP_KILL_NONE) why = TP_KILL_MEMORY;  /* the host's own malloc */
  if (why != TP_KILL_NONE) {
    char msg[TP_KILL_NOTE_MAX];
    free(text);
    if (text != NULL) budget->refund(budget->ud, text_cost);
    tp__kill_message(sb, (tp_kill)why, msg, sizeof msg);
    finish(r, NULL, 0, make_error(r, tp__kill_code((tp_kill)why), msg, strlen(msg), 0,
                                  kill_hint((tp_kill)why)));
    return;
  }
  finish(r, text, n, NULL);
  budget->refund(budget->ud, text_cost);  /* the text is in the envelope, charged there */
}

/* ---- compile ------------------------------------------------------------------------- */

/* The line of the top-level `return` of the chunk on top of T, when all its explicit
** returns are on one line (the usual script ends in one); 0 otherwise. The last
** instruction is the return the parser adds at the end of every chunk. Returns of
** nested functions are in their own prototypes and do not count. */
static int return_line (lua_State *T) {
  const TValue *o = s2v(T->top.p - 1);
  if (!ttisLclosure(o)) return 0;
  const Proto *p = clLvalue(o)->p;
  int line = 0;
  for (int pc = 0; pc < p->sizecode - 1; pc++) {
    OpCode op = GET_OPCODE(p->code[pc]);
    if (op == OP_RETURN || op == OP_RETURN0 || op == OP_RETURN1) {
      int l = luaG_getfuncline(p, pc);
      if (line != 0 && l != line) return 0;
      line = l;
    }
  }
  return line;
}

/* The error of a script that the pre-run check stopped: its first finding, marked
** "precheck" (nothing ran), and all of them under "findings" when there are more. */
static json_t *findings_error (tp_run *r, const tp_findings *fs) {
  json_t *first = NULL, *all = fs->n > 1 ? json_array() : NULL;
  for (int i = 0; i < fs->n; i++) {
    const tp_finding *f = &fs->f[i];
    char ltext[SOURCE_LINE_MAX + 1], hbuf[400];
    const char *hint = f->hint ? f->hint : strcmp(f->code, "runtime") == 0
                       ? runtime_hint(f->msg, line_text(r, f->line, ltext, sizeof ltext), hbuf,
                                      sizeof hbuf)
                       : tool_hint(f->code);
    json_t *e = make_error(r, f->code, f->msg, strlen(f->msg), f->line, hint);
    if (e == NULL) break;
    if (all) json_array_append_new(all, json_copy(e));  /* flat: a shallow copy */
    if (i == 0) first = e;
    else json_decref(e);
  }
  if (first == NULL) { json_decref(all); return NULL; }
  json_object_set_new(first, "precheck", json_true());
  if (all) {
    if (fs->more) json_object_set_new(first, "findings_more", json_integer(fs->more));
    json_object_set_new(first, "findings", all);
  }
  return first;
}

typedef struct reader_state { const char *parts[2]; size_t lens[2]; int i; } reader_state;

static const char *two_part_reader (lua_State *L, void *ud, size_t *size) {
  reader_state *rs = ud;
  (void)L;
  while (rs->i < 2) {
    int i = rs->i++;
    if (rs->lens[i]) { *size = rs->lens[i]; return rs->parts[i]; }
  }
  *size = 0;
  return NULL;
}

/* Loads src onto T as "return <src>" when that compiles (a lone expression), else as
** it is. LUA_OK, or the status with the error message on top; the stack below is kept.
** Lua's parser is quadratic on some texts (1 MiB of `x or x or ...` took 60 s), so the
** text is fed in pieces that poll the verdict and the deadline (tp__sandbox_load). */
/* Whether the first token of src (after blanks and comments) is a keyword that starts
** a statement and never an expression: then "return " .. src cannot compile, and is not
** tried (it was a second parse of most scripts). */
static int starts_with_statement (const char *p, size_t len) {
  static const char *const kw[] = { "return", "local", "for", "if", "while", "repeat",
                                    "do", "goto", "break" };
  const char *end = p + len;
  for (;;) {
    while (p < end && (*p == ' ' || (*p >= '\t' && *p <= '\r'))) p++;
    if (end - p < 2 || p[0] != '-' || p[1] != '-') break;
    p += 2;
    const char *q = p;
    if (q < end && *q == '[') {  /* a long comment: --[==[ ... ]==] */
      q++;
      size_t level = 0;
      while (q < end && *q == '=') { q++; level++; }
      if (q < end && *q == '[') {
        for (q++; q < end; q++) {
          if (*q != ']' || (size_t)(end - q) < level + 2 || q[level + 1] != ']') continue;
          size_t k = 1;
          while (k <= level && q[k] == '=') k++;
          if (k == level + 1) break;
        }
        if (q >= end) return 0;  /* unclosed: let the parser say so */
        p = q + level + 2;
        continue;
      }
    }
    while (p < end && *p != '\n') p++;
  }
  size_t n = 0;
  while (p + n < end && (isalnum((unsigned char)p[n]) || p[n] == '_')) n++;
  for (size_t i = 0; i < sizeof kw / sizeof kw[0]; i++)
    if (strlen(kw[i]) == n && memcmp(p, kw[i], n) == 0) return 1;
  return 0;
}

static int load_text (tp_run *r, const char *src, size_t len, uint64_t deadline) {
  lua_State *T = r->sb->T;
  int base = lua_gettop(T);
  if (starts_with_statement(src, len)) {
    reader_state whole = { { src, NULL }, { len, 0 }, 0 };
    return tp__sandbox_load(r->sb, T, two_part_reader, &whole, "=script", deadline);
  }
  reader_state rs = { { "return ", src }, { 7, len }, 0 };
  int status = tp__sandbox_load(r->sb, T, two_part_reader, &rs, "=script", deadline);
  if (status == LUA_OK || atomic_load(&r->sb->kill) != TP_KILL_NONE) return status;
  lua_settop(T, base);
  reader_state whole = { { src, NULL }, { len, 0 }, 0 };
  return tp__sandbox_load(r->sb, T, two_part_reader, &whole, "=script", deadline);
}

/* Compiles r->src onto T. Text that does not compile as a whole, fails at or before
** the opening line of a markdown fence (prose, or the fence itself) is taken to be a
** model's reply: the fence's body is compiled instead and becomes r->src, whether it
** compiles or not (its error is the one to show). Text that fails after the fence line
** is Lua holding a fence (in a string or a comment) and is never cut: its own error is
** shown, so nothing but the text as written can run. Returns nonzero on success;
** otherwise the syntax error is the run's pending error. At most two parses of text
** within the source limit, under the run's time limit (wall or CPU, the shorter) from
** now; the time they took is charged to the run's clocks at the first step. */
static int compile (tp_run *r) {
  lua_State *T = r->sb->T;
  const tp_limits *l = &r->sb->limits;
  uint64_t t0 = tp__now_ns(), limit_us = l->wall_us;
  if (l->cpu_us && (limit_us == 0 || l->cpu_us < limit_us)) limit_us = l->cpu_us;
  uint64_t deadline = limit_us ? t0 + limit_us * 1000u : 0;
  int status = load_text(r, r->src, r->srclen, deadline);
  if (status != LUA_OK) {
    size_t blen = r->srclen;
    int fence_line = 0, raw_line = 0;
    const char *body = NULL;
    if (status == LUA_ERRSYNTAX && atomic_load(&r->sb->kill) == TP_KILL_NONE)
      body = tp__normalize_fence(r->src, &blen, &fence_line);
    if (body != NULL && lua_tostring(T, -1) != NULL)
      strip_position(lua_tostring(T, -1), &raw_line);
    if (body != NULL && raw_line <= fence_line) {
      body = tp__normalize_shebang(body, &blen);
      memmove(r->src, body, blen);
      r->src[blen] = '\0';
      r->srclen = blen;
      lua_settop(T, 0);
      status = load_text(r, r->src, r->srclen, deadline);
    }
  }
  r->compile_ns = tp__now_ns() - t0;
  r->cpu_used_ns += r->compile_ns;
  if (status == LUA_OK) {
    r->return_line = return_line(T);
    tp_findings *fs = tp__precheck_needed(r) ? malloc(sizeof *fs) : NULL;
    int found = fs != NULL && tp__precheck(r, fs) > 0;
    uint64_t checked = tp__now_ns() - t0 - r->compile_ns;  /* charged like the compile */
    r->compile_ns += checked;
    r->cpu_used_ns += checked;
    if (found) {
      r->prechecked_out = 1;
      r->pending_error = findings_error(r, fs);
      free(fs);
      lua_settop(T, 0);
      return 0;
    }
    free(fs);
    return 1;
  }
  if (atomic_load(&r->sb->kill) != TP_KILL_NONE || status == LUA_ERRMEM) {
    r->pending_error = error_from_thread(r, T, status);
    return 0;
  }
  size_t len;
  const char *msg = lua_tolstring(T, -1, &len);
  int line = 0;
  const char *m = msg ? strip_position(msg, &line) : "syntax error";
  char ltext[SOURCE_LINE_MAX + 1], ptext[SOURCE_LINE_MAX + 1], hbuf[300];
  r->pending_error = make_error(r, "syntax", m, strlen(m), line,
                                syntax_hint(r, m, line_text(r, line, ltext, sizeof ltext),
                                            line_text(r, line - 1, ptext, sizeof ptext),
                                            hbuf, sizeof hbuf));
  lua_settop(T, 0);
  return 0;
}

/* ---- runs ---------------------------------------------------------------------------- */

static uint64_t run_fire (tp_watch *w, uint64_t now) {
  tp_run *r = (tp_run *)((char *)w - offsetof(tp_run, watch));
  tp_sandbox *sb = r->sb;
  const tp_limits *l = &sb->limits;
  int expected = TP_KILL_NONE;
  if (r->deadline_ns && now >= r->deadline_ns) {
    atomic_compare_exchange_strong(&sb->kill, &expected, TP_KILL_TIME);
    tp__signal_interrupt(r->thread);
    return now + 5000000;  /* again in 5 ms, in case the first signal came too early */
  }
  uint64_t next = r->deadline_ns;
  if (l->cpu_us) {
    uint64_t cpu = tp__clock_ns(r->cpu_clock);
    uint64_t used = r->cpu_used_ns + (cpu > r->step_cpu0 ? cpu - r->step_cpu0 : 0);
    uint64_t limit = l->cpu_us * 1000u;
    if (used >= limit) {
      atomic_compare_exchange_strong(&sb->kill, &expected, TP_KILL_CPU);
      tp__signal_interrupt(r->thread);
      return now + 5000000;
    }
    uint64_t at = now + (limit - used);
    if (next == 0 || at < next) next = at;
  }
  if (r->step_end_ns) {
    if (now >= r->step_end_ns) {
      atomic_store(&sb->slice_over, 1);
      tp__signal_interrupt(r->thread);
      r->step_end_ns = now + 2000000;  /* repeat while the script cannot yield */
    }
    if (next == 0 || r->step_end_ns < next) next = r->step_end_ns;
  }
  return next;
}

/* Makes a run of source in sandbox sb (created for it, or a session's). */
tp_run *tp__run_new (tp_engine *e, tp_sandbox *sb, const char *source, size_t len) {
  tp_core *k = tp__core(e);
  tp_run *r = calloc(1, sizeof *r);
  if (r == NULL) return NULL;
  r->e = e;
  r->traced = tp__core(e)->tracing;
  __atomic_store_n(&k->runs_made, k->runs_made + 1, __ATOMIC_RELAXED);
  r->id = ++k->run_ids;
  r->sb = sb;
  size_t nlen = len;
  const char *src = tp__normalize_shebang(source, &nlen);  /* fences: see compile */
  r->src = malloc(nlen + 1);
  if (r->src == NULL) { free(r); return NULL; }
  memcpy(r->src, src, nlen);
  r->src[nlen] = '\0';
  r->srclen = nlen;
  r->watch.fire = run_fire;
  sb->run = r;
  if (sb->limits.source && nlen > sb->limits.source) {
    char msg[160], n[48];
    tp__limit_words(TP__UNIT_BYTES, sb->limits.source, n, sizeof n);
    snprintf(msg, sizeof msg, "the script is %zu bytes, over its source limit of %s", nlen, n);
    const tp__limit *li = tp__limit_field(offsetof(tp_limits, source));
    r->pending_error = make_error(r, li->code, msg, strlen(msg), 0, li->hint);
  }
  else r->compiled = compile(r);
  r->next = k->runs;
  if (k->runs) k->runs->prev = r;
  k->runs = r;
  return r;
}

int tp__run_reseed (tp_run *r, unsigned int seed) {
  if (r->session != NULL || !r->compiled || r->state != ST_READY) return 0;
  tp_sandbox *old = r->sb;
  tp_lua_seed_next = seed;
  tp_lua_seed_next_set = 1;
  tp_sandbox *sb = tp__sandbox_create_in(&old->limits, &tp__core(r->e)->chunks);
  tp_lua_seed_next_set = 0;
  if (sb == NULL) return -1;
  sb->run = r;
  r->sb = sb;
  old->run = NULL;
  tp__sandbox_destroy(old);
  r->cpu_used_ns -= r->compile_ns < r->cpu_used_ns ? r->compile_ns : r->cpu_used_ns;
  r->compiled = compile(r);
  return 0;
}

void tp__run_recheck (tp_run *r) {
  if (r->state != ST_READY || r->compiled || !r->prechecked_out) return;
  json_decref(r->pending_error);
  r->pending_error = NULL;
  r->prechecked_out = 0;
  r->cpu_used_ns -= r->compile_ns < r->cpu_used_ns ? r->compile_ns : r->cpu_used_ns;
  r->compiled = compile(r);
}

tp_run *tp_run_create (tp_engine *e, const char *source, size_t len, const tp_limits *limits) {
  if (e == NULL || source == NULL) return NULL;
  tp_limits lim;
  if (limits) lim = *limits;
  else tp_limits_init(&lim);
  tp_sandbox *sb = tp__sandbox_create_in(&lim, &tp__core(e)->chunks);
  int cap_too_small = 0;
  if (sb == NULL && lim.memory) {  /* fits without the cap? then the cap is what failed */
    tp_limits uncapped = lim;
    uncapped.memory = 0;
    sb = tp__sandbox_create_in(&uncapped, &tp__core(e)->chunks);
    cap_too_small = sb != NULL;
  }
  if (sb == NULL) return NULL;
  tp_run *r = tp__run_new(e, sb, source, len);
  if (r == NULL) { tp__sandbox_destroy(sb); return NULL; }
  r->wait_ns = tp__core(e)->wait_ns;
  tp__core(e)->wait_ns = 0;
  if (cap_too_small) {  /* the run ends at its first step with limit.memory */
    char msg[200], n[48];
    tp__limit_words(TP__UNIT_BYTES, lim.memory, n, sizeof n);
    snprintf(msg, sizeof msg, "the memory limit of %s is less than a fresh sandbox needs "
             "(%zu bytes)", n, sb->mem_used);
    sb->limits.memory = lim.memory;
    lua_settop(sb->T, 0);
    json_decref(r->pending_error);
    r->compiled = 0;
    r->pending_error = make_error(r, "limit.memory", msg, strlen(msg), 0,
                                  tp__kill_hint(TP_KILL_MEMORY));
  }
  return r;
}

int tp_run_done (const tp_run *r) { return r != NULL && r->state == ST_DONE; }

/* While the clock is held the deadline is 0 (no wall limit: nothing arms a timer for it);
** restarting it moves the deadline it had by the time held. */
int tp_run_hold_wall (tp_run *r, int hold) {
  if (r == NULL) return TP_EINVAL;
  if (r->state != ST_STARTED) return TP_ESTATE;
  uint64_t now = tp__now_ns();
  if (hold && r->hold_since_ns == 0) {
    r->hold_since_ns = now ? now : 1;
    r->held_deadline_ns = r->deadline_ns;
    r->deadline_ns = 0;
  }
  else if (!hold && r->hold_since_ns != 0) {
    if (r->held_deadline_ns) r->deadline_ns = r->held_deadline_ns + (now - r->hold_since_ns);
    r->hold_since_ns = 0;
    r->held_deadline_ns = 0;
  }
  return TP_OK;
}

const char *tp_run_envelope (const tp_run *r) {
  if (r == NULL || r->state != ST_DONE) return NULL;
  return r->envelope ? r->envelope : "{\"ok\":false,\"error\":{\"code\":\"limit.memory\","
    "\"message\":\"the host ran out of memory while building the envelope\"}}";
}

void tp_run_cancel (tp_run *r) {
  if (r == NULL || r->state == ST_DONE) return;
  int expected = TP_KILL_NONE;
  atomic_compare_exchange_strong(&r->sb->kill, &expected, TP_KILL_CANCELLED);
  int why = atomic_load(&r->sb->kill);
  char msg[TP_KILL_NOTE_MAX];
  tp__kill_message(r->sb, (tp_kill)why, msg, sizeof msg);
  int line = r->state == ST_STARTED ? error_line(r->sb->T) : 0;
  finish(r, NULL, 0, make_error(r, tp__kill_code((tp_kill)why), msg, strlen(msg), line,
                             kill_hint((tp_kill)why)));
  if (r->async) tp__hook(r, wake, r);  /* the driver reports it */
}

/* The thread's CPU clock (CLOCK_THREAD_CPUTIME_ID) around a step. Reading it is a system
** call, 1-3 us on this VM: a fifth of the step of a script that runs up to its next tool
** call, and as much as a step of a game loop may overshoot. The thread's CPU clock
** grows no faster than the wall clock, so a step reads it only when its last reading on
** this thread is CPU_SEEN_NS old or more; otherwise it starts from that reading plus the
** wall time since, which is at least the clock's value (the CPU limit's timer then fires
** late by the time the thread was off the CPU in between, at most CPU_SEEN_NS). A step
** shorter than CPU_SHORT_NS is charged its wall time, which is at least the CPU it used
** (over by the time it was off the CPU); a longer one reads the clock at its end. */
#define CPU_SEEN_NS 200000u
#define CPU_SHORT_NS 100000u
static __thread uint64_t cpu_seen_ns, cpu_seen_at;
static uint64_t step_cpu (uint64_t now) {
  if (cpu_seen_at && now - cpu_seen_at < CPU_SEEN_NS) return cpu_seen_ns + (now - cpu_seen_at);
  cpu_seen_ns = tp__thread_cpu_ns();
  cpu_seen_at = now;
  return cpu_seen_ns;
}

/* The clock at the end of a step that started at start_ns with cpu0 and ended at now. */
static uint64_t step_cpu_end (uint64_t cpu0, uint64_t start_ns, uint64_t now) {
  if (now - start_ns < CPU_SHORT_NS) return cpu0 + (now - start_ns);
  cpu_seen_ns = tp__thread_cpu_ns();
  cpu_seen_at = now;
  return cpu_seen_ns > cpu0 ? cpu_seen_ns : cpu0;  /* cpu0 may be ahead: see above */
}

/* What the end of a time-sliced step costs on this thread, from the script's yield to
** the return (mostly reading the CPU clock), as a moving average: the slice ends that
** much before the budget, at most a quarter of it, so that the call as a whole keeps
** to its budget. */
static __thread uint64_t exit_ns;

/* Ends the step's timing: the thread's timer, or the watch when the step fell back on
** the watchdog. On the stepping thread only. */
static void step_disarm (tp_run *r) {
  if (r->timed) {
    tp__step_timer_disarm(&r->clock);
    r->timed = 0;
  }
  else tp__watch_disarm(&tp__core(r->e)->wd, &r->watch);
}

int tp_run_step (tp_run *r, uint64_t budget_us, uint64_t budget_instructions) {
  if (r == NULL) return TP_EINVAL;
  if (r->state == ST_DONE) return TP_ESTATE;
  if (r->state == ST_READY && r->rp != NULL && !r->rp->began)
    tp__replay_begin(r, tp__run_reseed);  /* may make the sandbox again; failing: limit.memory */
  tp_sandbox *sb = r->sb;
  if (!r->compiled) {
    json_t *err = r->pending_error;
    r->pending_error = NULL;
    finish(r, NULL, 0, err);
    return TP_DONE;
  }
  uint64_t now = tp__now_ns();
  if (r->state == ST_READY) {
    r->state = ST_STARTED;
    r->start_ns = now;
    if (sb->limits.wall_us) {
      uint64_t wall = sb->limits.wall_us * 1000u;
      uint64_t spent = r->compile_ns + r->wait_ns;
      r->deadline_ns = now + wall - (spent < wall ? spent : wall);
    }
  }
  if (atomic_load(&sb->kill) == TP_KILL_NONE && r->deadline_ns && now >= r->deadline_ns)
    atomic_store(&sb->kill, TP_KILL_TIME);
  if (atomic_load(&sb->kill) != TP_KILL_NONE) {
    tp_run_cancel(r);  /* finishes with the recorded verdict */
    return TP_DONE;
  }
  if (r->waiting) {  /* resume only when a call completed or timed out */
    int ready = 0;
    ready = r->ready_count > 0;
    for (size_t i = tp__run_active_from(r); i < r->ncallv && !ready; i++)
      if (r->callv[i] && tp__call_ready(r, r->callv[i]->id) && !r->callv[i]->consumed)
        ready = 1;
    if (!ready) return TP_WAIT;
    r->waiting = 0;
  }
  if (tp__signal_install() != 0) return TP_ESTATE;

  /* the step's budgets, ended by this thread's timer (the watchdog when the thread
  ** cannot have one) */
  r->step_end_ns = budget_us ? now + budget_us * 1000u : 0;
  sb->instr_step_end = budget_instructions ? sb->instr_used + budget_instructions : 0;
  atomic_store(&sb->slice_over, 0);
  sb->hook_yielded = 0;
  r->thread = pthread_self();
  r->step_cpu0 = step_cpu(now);
  uint64_t cpu_left = 0;
  if (sb->limits.cpu_us) {
    uint64_t limit = sb->limits.cpu_us * 1000u;
    cpu_left = limit - (r->cpu_used_ns < limit ? r->cpu_used_ns : limit);
  }
  /* A short budget is ended by the VM's ticks reading the clock from the start; a longer
  ** one from TP_POLL_LEAD_NS before its end, when the timer hands the end to them. */
  uint64_t end_ns = 0;
  if (r->step_end_ns) {
    uint64_t quarter = budget_us * 250u;
    end_ns = r->step_end_ns - (exit_ns < quarter ? exit_ns : quarter);
  }
  int poll_now = end_ns && budget_us * 1000u <= TP_POLL_LEAD_NS;
  tp__sandbox_poll(sb, poll_now ? end_ns : 0);
  int timed = r->deadline_ns || r->step_end_ns || sb->limits.cpu_us;
  r->timed = 0;
  if (timed) {
    tp_step_clock *c = &r->clock;
    c->sb = sb;
    c->start_ns = now;
    c->cpu_start_ns = r->step_cpu0;
    c->poll_at_ns = end_ns && !poll_now ? end_ns - TP_POLL_LEAD_NS : 0;
    c->deadline_ns = r->deadline_ns;
    c->step_end_ns = end_ns;
    c->cpu_end_ns = sb->limits.cpu_us ? r->step_cpu0 + (cpu_left ? cpu_left : 1) : 0;
    r->timed = tp__step_timer_arm(c) == 0;
  }
  if (timed && !r->timed) {
    uint64_t wake = r->deadline_ns;
    if (r->step_end_ns && (wake == 0 || r->step_end_ns < wake)) wake = r->step_end_ns;
    if (sb->limits.cpu_us && (wake == 0 || now + cpu_left < wake)) wake = now + cpu_left;
    pthread_getcpuclockid(r->thread, &r->cpu_clock);
    if (tp__watch_arm(&tp__core(r->e)->wd, &r->watch, wake) != 0) return TP_ENOMEM;
  }

  lua_State *T = sb->T;
  tp__sandbox_sethook(sb, T);
  int nres = 0;
  atomic_store(&sb->running, T);
  tp__sandbox_enter(sb);   /* after running: sets the hook if the timer came first */
  int status = lua_resume(T, NULL, r->nargs, &nres);
  uint64_t back_ns = tp__now_ns();
  tp__sandbox_leave();
  atomic_store(&sb->running, sb->L);
  tp__sandbox_poll(sb, 0);
  /* The timer (or watch) stays armed until the envelope is built: a deadline (or the
  ** CPU limit) passing while host code converts the result sets the verdict, which the
  ** converters poll. Under the watchdog, the CPU used so far moves into cpu_used_ns
  ** under its lock, since run_fire reads both fields. */
  uint64_t cpu_now = step_cpu_end(r->step_cpu0, now, back_ns);
  int locked = timed && !r->timed;
  if (locked) pthread_mutex_lock(&tp__core(r->e)->wd.mu);
  r->cpu_used_ns += cpu_now - r->step_cpu0;
  r->step_cpu0 = cpu_now;
  if (locked) pthread_mutex_unlock(&tp__core(r->e)->wd.mu);
  r->nargs = 0;
  tp__sandbox_charge(sb, T);
  if (sb->fail_armed) tp__sandbox_kill(sb, TP_KILL_MEMORY);  /* a refusal ended it */
  if (status == LUA_YIELD && timed) step_disarm(r);

  if (status == LUA_YIELD) {
    if (sb->hook_yielded) {
      sb->hook_yielded = 0;
      if (r->step_end_ns) exit_ns = (exit_ns * 7 + (tp__now_ns() - back_ns)) / 8;
      return TP_YIELD;
    }
    if (nres >= 1 && lua_type(T, -nres) == LUA_TLIGHTUSERDATA &&
        lua_touserdata(T, -nres) == &tp__request_tag) {
      lua_pop(T, nres);
      r->waiting = 1;
      if (r->rp != NULL && r->rp->held) {  /* replayed answers wait for their turn: */
        r->rp->held = 0;                   /* they are there, so step again */
        r->waiting = 2;                    /* and look again */
        return TP_YIELD;
      }
      return TP_WAIT;
    }
    lua_pop(T, nres);
    const char *m = "the script yielded to the host outside a tool call";
    finish(r, NULL, 0, make_error(r, "runtime", m, strlen(m), error_line(T), NULL));
    return TP_DONE;
  }
  if (status == LUA_OK && atomic_load(&sb->kill) == TP_KILL_NONE) finish_ok(r, nres);
  else finish(r, NULL, 0, error_from_thread(r, T, status));
  if (timed) step_disarm(r);
  return TP_DONE;
}

void tp_run_destroy (tp_run *r) {
  if (r == NULL) return;
  tp_core *k = tp__core(r->e);
  if (r->prev) r->prev->next = r->next;
  else k->runs = r->next;
  if (r->next) r->next->prev = r->prev;
  r->async = 0;                  /* cancelling its calls below wakes it no more */
  if (r->timed) step_disarm(r);  /* destroyed from inside its own step (a tool) */
  tp__watch_disarm(&k->wd, &r->watch);
  if (r->state != ST_DONE) tp__run_cancel_calls(r);
  tp__run_free_calls(r);
  free(r->per_tool);
  if (k->hooks->run_gone) k->hooks->run_gone(k->ud, r);
  if (r->session) {
    r->session->busy = NULL;
    r->sb->run = NULL;
    tp__host_refund(r->sb, r->envelope_cost);  /* the session's sandbox outlives it */
  }
  else tp__sandbox_destroy(r->sb);
  json_decref(r->pending_error);
  json_decref(r->warnings);
  free(r->json_texts);
  tp__replay_free(r->rp);
  free(r->src);
  free(r->envelope);
  free(r);
}

/* ---- driven by the host ------------------------------------------------------------- */

int tp_run_start (tp_run *r, tp_run_done_cb done, void *ud) {
  if (r == NULL) return TP_EINVAL;
  if (r->async || r->reported) return TP_ESTATE;
  r->done_cb = done;
  r->done_ud = ud;
  r->async = 1;
  return tp__hook(r, wake, r);
}

void tp__run_finish_unstarted (tp_run *r) {
  lua_settop(r->sb->T, 0);
  r->start_ns = tp__now_ns();
  finish(r, NULL, 0, NULL);
}

size_t tp_run_pending (tp_run *r, tp_call **calls, size_t max) {
  size_t n = 0;
  if (r == NULL || calls == NULL) return 0;
  for (size_t i = tp__run_active_from(r); i < r->ncallv && n < max; i++) {
    tp_call *c = r->callv[i];
    if (c != NULL && c->state == CALL_RUNNING && c->tool &&
        (c->tool->flags & TP__TOOL_EXTERNAL))
      calls[n++] = c;
  }
  return n;
}

int tp_run_ok (const tp_run *r) { return tp_run_done(r) && r->ok; }

void tp_run_on_call (tp_run *r, tp_call_event_cb cb, void *ud) {
  if (r != NULL) tp__run_set_call_hook(r, cb, cb ? ud : NULL);
}

void tp_run_on_progress (tp_run *r, tp_call_progress_cb cb, void *ud) {
  if (r == NULL) return;
  r->progress_hook = cb;
  r->progress_hook_ud = cb ? ud : NULL;
}
