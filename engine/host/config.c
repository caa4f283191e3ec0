/*
** config.c: the config file (tp_engine_configure*, tp_config_check, tp_engine_config_*).
** The file is one JSON object of sections, checked against engine/host/config.schema.json
** (embedded in the library) by the engine's own validator, then its limit values by the
** limits table's parser and its paths on disk. Every problem becomes one line
** "config: <JSON pointer>: <what was expected, what was found, a hint>", all of them, not
** only the first. The engine keeps the checked object with its relative paths made
** absolute; each source of tools reads its own section (tp__config_section in C, the
** plugin loader's load_opts.config in Lua: lua/host.lua), and the front ends read limits,
** tools and workspace through the tp_engine_config_* functions.
*/
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "util.h"
#include "embedded.h"
#include "engine.h"
#include "policy.h"
#include "trace.h"
#include "schema.h"

#define SCHEMA_FILE "engine/host/config.schema.json"
#define CONFIG_MAX (16u << 20)  /* bytes of a config file (tp_json_parse's own cap) */
#define NEST_MAX 64             /* levels of nesting a config may have */
#define ERRORS_MAX 64           /* schema errors reported; the rest are counted */
#define EXAMPLE_MAX 100         /* bytes of an example a hint shows */

/* ---- the problems found, one line each ------------------------------------------- */

typedef struct problems {
  char **lines;     /* "<pointer>: what", or "what" for the whole text */
  size_t n, cap;
  size_t more;      /* problems found past those listed */
  char *buf;        /* joined by finish(): "config: ...\nconfig: ..." */
  int oom;
} problems;

static void add (problems *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add (problems *p, const char *fmt, ...) {
  if (p->oom) return;
  char *line = NULL;
  va_list ap;
  va_start(ap, fmt);
  int n = vasprintf(&line, fmt, ap);
  va_end(ap);
  if (n < 0) { p->oom = 1; return; }
  for (size_t i = 0; i < p->n; i++)  /* the schema and a value's parser may both see it */
    if (strcmp(p->lines[i], line) == 0) { free(line); return; }
  if (tp__grow(&p->lines, &p->cap, p->n + 1, sizeof *p->lines, 16) != 0) {
    free(line);
    p->oom = 1;
    return;
  }
  p->lines[p->n++] = line;
}

/* Orders two lines by their pointers (up to ": "), a parent before its members and array
** indexes by number ("/a/2" before "/a/10"); 0 for the same pointer. */
static int ptrcmp (const char *a, const char *b) {
  const char *ea = strstr(a, ": "), *eb = strstr(b, ": ");
  if (ea == NULL) ea = a + strlen(a);
  if (eb == NULL) eb = b + strlen(b);
  while (a < ea && b < eb) {
    if (*a >= '0' && *a <= '9' && *b >= '0' && *b <= '9') {
      size_t la = strspn(a, "0123456789"), lb = strspn(b, "0123456789");
      if (la != lb) return la < lb ? -1 : 1;
      int c = strncmp(a, b, la);
      if (c) return c;
      a += la;
      b += lb;
      continue;
    }
    if (*a != *b) return (unsigned char)*a < (unsigned char)*b ? -1 : 1;
    a++;
    b++;
  }
  return a < ea ? 1 : b < eb ? -1 : 0;
}

/* Sorts the lines by their pointers and joins them into p->buf; frees the lines. */
static void finish (problems *p) {
  if (!p->oom && p->n > 1) {
    for (size_t i = 1; i < p->n; i++)  /* stable; at most ERRORS_MAX + a few lines */
      for (size_t j = i; j > 0 && ptrcmp(p->lines[j - 1], p->lines[j]) > 0; j--) {
        char *t = p->lines[j];
        p->lines[j] = p->lines[j - 1];
        p->lines[j - 1] = t;
      }
  }
  size_t len = 1;
  for (size_t i = 0; i < p->n; i++) len += strlen(p->lines[i]) + 9;
  if (p->more) len += 64;
  if (!p->oom && (p->buf = malloc(len)) != NULL) {
    size_t o = 0;
    p->buf[0] = '\0';
    for (size_t i = 0; i < p->n; i++)
      o += (size_t)sprintf(p->buf + o, "%sconfig: %s", i ? "\n" : "", p->lines[i]);
    if (p->more) sprintf(p->buf + o, "\nconfig: and %zu more problems past these", p->more);
  }
  else p->oom = 1;
  for (size_t i = 0; i < p->n; i++) free(p->lines[i]);
  free(p->lines);
  p->lines = NULL;
}

/* ---- JSON pointers and the validator's paths ---------------------------------------- */

typedef struct seg { char *key; size_t idx; } seg;  /* key NULL: an array index */

typedef struct segs {
  seg s[TP_SCHEMA_MAX_DEPTH + 1];
  int n;
} segs;

static void segs_free (segs *g) {
  for (int i = 0; i < g->n; i++) free(g->s[i].key);
  g->n = 0;
}

/* Reads the validator's path ("$", "$.a[2][\"odd key\"]") into g. 0, or -1 when it is
** not one (g then holds what was read) or out of memory. */
static int parse_path (const char *p, segs *g) {
  g->n = 0;
  if (*p++ != '$') return -1;
  while (*p && g->n <= TP_SCHEMA_MAX_DEPTH) {
    seg *s = &g->s[g->n];
    if (*p == '.') {
      size_t n = strcspn(++p, ".[");
      if ((s->key = strndup(p, n)) == NULL) return -1;
      s->idx = 0;
      p += n;
    }
    else if (p[0] == '[' && p[1] == '"') {
      char *k = malloc(strlen(p) + 1), *o = k;
      if (k == NULL) return -1;
      for (p += 2; *p && *p != '"'; p++) {
        if (*p == '\\' && p[1] == 'u') {
          unsigned c = 0;
          if (sscanf(p + 2, "%4x", &c) != 1) { free(k); return -1; }
          *o++ = (char)c;
          p += 5;
        }
        else if (*p == '\\' && p[1]) *o++ = *++p;
        else *o++ = *p;
      }
      *o = '\0';
      s->key = k;
      s->idx = 0;
      if (p[0] != '"' || p[1] != ']') { free(k); return -1; }
      p += 2;
    }
    else if (*p == '[') {
      char *end;
      s->key = NULL;
      s->idx = strtoul(p + 1, &end, 10);
      if (*end != ']') return -1;
      p = end + 1;
    }
    else return -1;
    g->n++;
  }
  return *p ? -1 : 0;
}

/* Appends key to the JSON pointer in buf[len] (at *o): "/" then the key with ~ as ~0
** and / as ~1, control characters as \uXXXX. */
static void ptr_add (char *buf, size_t len, size_t *o, const char *key) {
  if (*o + 2 >= len) return;
  buf[(*o)++] = '/';
  for (const unsigned char *k = (const unsigned char *)key; *k && *o + 8 < len; k++) {
    if (*k == '~') *o += (size_t)snprintf(buf + *o, len - *o, "~0");
    else if (*k == '/') *o += (size_t)snprintf(buf + *o, len - *o, "~1");
    else if (*k < 32 || *k == 127) *o += (size_t)snprintf(buf + *o, len - *o, "\\u%04x", *k);
    else buf[(*o)++] = (char)*k;
  }
  buf[*o] = '\0';
}

static void ptr_of (const segs *g, int upto, char *buf, size_t len) {
  size_t o = 0;
  buf[0] = '\0';
  for (int i = 0; i < upto; i++) {
    char ix[24];
    snprintf(ix, sizeof ix, "%zu", g->s[i].idx);
    ptr_add(buf, len, &o, g->s[i].key ? g->s[i].key : ix);
  }
  if (o == 0) snprintf(buf, len, "/");
}

/* ---- the schema, as a document to read ---------------------------------------------- */

/* node with its local "$ref" followed ("#/$defs/name"); NULL stays NULL. */
static const json_t *deref (const json_t *root, const json_t *node) {
  for (int hops = 0; node && hops < 8; hops++) {
    const char *ref = json_string_value(json_object_get(node, "$ref"));
    if (ref == NULL || strncmp(ref, "#/$defs/", 8) != 0) return node;
    node = json_object_get(json_object_get(root, "$defs"), ref + 8);
  }
  return node;
}

/* The member name of node (properties, then those of its then/else branches), or NULL. */
static const json_t *prop (const json_t *node, const char *name) {
  const char *where[] = { NULL, "then", "else" };
  for (size_t i = 0; i < 3; i++) {
    const json_t *n = where[i] ? json_object_get(node, where[i]) : node;
    const json_t *v = json_object_get(json_object_get(n, "properties"), name);
    if (v) return v;
  }
  return NULL;
}

/* The subschema of node for segment s (the schema the value there is checked against). */
static const json_t *child (const json_t *root, const json_t *node, const seg *s) {
  node = deref(root, node);
  if (node == NULL) return NULL;
  if (s->key == NULL) return deref(root, json_object_get(node, "items"));
  const json_t *v = prop(node, s->key);
  if (v) return v;
  v = json_object_get(node, "additionalProperties");
  return json_is_object(v) ? v : NULL;
}

static const json_t *schema_at (const json_t *root, const segs *g, int upto) {
  const json_t *n = root;
  for (int i = 0; i < upto && n; i++) n = child(root, n, &g->s[i]);
  return n;
}

static const json_t *value_at (const json_t *v, const segs *g, int upto) {
  for (int i = 0; i < upto && v; i++)
    v = g->s[i].key ? json_object_get(v, g->s[i].key) : json_array_get(v, g->s[i].idx);
  return v;
}

/* "a string" / "strings" for a type name. */
static const char *type_noun (const char *t, int plural) {
  static const char *const names[][3] = {
    { "string", "a string", "strings" }, { "integer", "an integer", "integers" },
    { "number", "a number", "numbers" }, { "boolean", "true or false", "booleans" },
    { "object", "an object", "objects" }, { "array", "an array", "arrays" },
    { "null", "null", "nulls" } };
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (strcmp(t, names[i][0]) == 0) return names[i][1 + plural];
  return t;
}

/* What a value of schema node must be, in words: "an array of strings", "an object of
** strings", "an integer or a string". */
static void expected (const json_t *root, const json_t *node, int plural, char *buf,
                      size_t len, int depth) {
  node = deref(root, node);
  const json_t *type = json_object_get(node, "type");
  buf[0] = '\0';
  size_t o = 0, nt = json_is_array(type) ? json_array_size(type) : type ? 1 : 0;
  for (size_t i = 0; i < nt && o < len; i++) {
    const char *t = json_string_value(json_is_array(type) ? json_array_get(type, i) : type);
    if (t == NULL) continue;
    o += (size_t)snprintf(buf + o, len - o, "%s%s", i ? " or " : "", type_noun(t, plural));
    const json_t *items = json_object_get(node, "items");
    const json_t *add_p = json_object_get(node, "additionalProperties");
    char sub[96];
    if (depth < 2 && strcmp(t, "array") == 0 && items) {
      expected(root, items, 1, sub, sizeof sub, depth + 1);
      if (*sub && o < len) o += (size_t)snprintf(buf + o, len - o, " of %s", sub);
    }
    else if (depth < 2 && strcmp(t, "object") == 0 && json_is_object(add_p) &&
             json_object_get(node, "properties") == NULL) {
      expected(root, add_p, 1, sub, sizeof sub, depth + 1);
      if (*sub && o < len) o += (size_t)snprintf(buf + o, len - o, " of %s", sub);
    }
  }
  if (nt == 0) snprintf(buf, len, "a value");
}

/* The value v in words: "a string", "an integer (5)", "true". */
static void found (const json_t *v, char *buf, size_t len) {
  switch (json_typeof(v)) {
  case JSON_OBJECT: snprintf(buf, len, "an object"); break;
  case JSON_ARRAY: snprintf(buf, len, "an array"); break;
  case JSON_STRING: snprintf(buf, len, "a string"); break;
  case JSON_INTEGER: snprintf(buf, len, "an integer (%" JSON_INTEGER_FORMAT ")", json_integer_value(v)); break;
  case JSON_REAL: snprintf(buf, len, "a number (%.17g)", json_real_value(v)); break;
  case JSON_TRUE: snprintf(buf, len, "true"); break;
  case JSON_FALSE: snprintf(buf, len, "false"); break;
  default: snprintf(buf, len, "null"); break;
  }
}

/* key as a JSON string in buf ("\"a\\nb\""), so that a message stays one line whatever
** the key holds; past 80 bytes cut (at a character) with "...". Keys come from the
** validator's paths, which show at most 64 bytes of a key (then "..."). */
static void quoted (const char *key, char *buf, size_t len) {
  size_t n = strnlen(key, 81), o = 0;
  int cut = n > 80;
  if (cut) {
    n = 80;
    while (n > 0 && ((unsigned char)key[n] & 0xC0) == 0x80) n--;
  }
  if (len < 16) { if (len) buf[0] = '\0'; return; }
  buf[o++] = '"';
  for (size_t i = 0; i < n && o + 10 < len; i++) {
    unsigned char c = (unsigned char)key[i];
    if (c == '"' || c == '\\') { buf[o++] = '\\'; buf[o++] = (char)c; }
    else if (c < 32 || c == 127) o += (size_t)snprintf(buf + o, len - o, "\\u%04x", c);
    else buf[o++] = (char)c;
  }
  snprintf(buf + o, len - o, "%s\"", cut ? "..." : "");
}

/* "; for example "args": ["-y","x"]" from the first example of node (or of what its
** $ref names), or "" when it has none short enough. key NULL: an array item. */
static void example (const json_t *root, const json_t *node, const char *key, char *buf,
                     size_t len) {
  buf[0] = '\0';
  const json_t *ex = json_array_get(json_object_get(node, "examples"), 0);
  if (ex == NULL) ex = json_array_get(json_object_get(deref(root, node), "examples"), 0);
  if (ex == NULL) return;
  size_t n;
  char *text = tp_json_text(ex, &n);
  if (text == NULL) return;
  if (n <= EXAMPLE_MAX) {
    char k[80 * 6];
    if (key) quoted(key, k, sizeof k);
    if (key) snprintf(buf, len, "; for example %s: %s", k, text);
    else snprintf(buf, len, "; for example %s", text);
  }
  tp_free(text);
}

/* How close a and b are (edit distance, case folded), at most 9. */
static int distance (const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  if (la > 40 || lb > 40) return 9;
  int d[41][41];
  for (size_t i = 0; i <= la; i++) d[i][0] = (int)i;
  for (size_t j = 0; j <= lb; j++) d[0][j] = (int)j;
  for (size_t i = 1; i <= la; i++)
    for (size_t j = 1; j <= lb; j++) {
      int ca = a[i - 1], cb = b[j - 1];
      if (ca >= 'A' && ca <= 'Z') ca += 32;
      if (cb >= 'A' && cb <= 'Z') cb += 32;
      int best = d[i - 1][j - 1] + (ca != cb);
      if (d[i - 1][j] + 1 < best) best = d[i - 1][j] + 1;
      if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;
      d[i][j] = best;
    }
  return d[la][lb] > 9 ? 9 : d[la][lb];
}

/* The line for key, which node (the schema of its parent, at depth: 0 the top, parent
** the parent's pointer) does not list: 'unknown section "polcy" (did you mean "policy"?);
** the sections are: limits, ...'. where is the key's own pointer. */
static void unknown_key (problems *p, const json_t *node, const char *parent,
                         const char *where, const char *key, int depth) {
  const char *kind = depth == 0 ? "section" : strcmp(parent, "/limits") == 0 ? "limit" : "field";
  char list[600], guess[96] = "";
  size_t o = 0;
  int best = 3;
  list[0] = '\0';
  const char *branches[] = { NULL, "then", "else" };
  for (size_t b = 0; b < 3; b++) {
    const json_t *n = branches[b] ? json_object_get(node, branches[b]) : node;
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)json_object_get(n, "properties"), k, v) {
      if (strcmp(k, "$schema") == 0) continue;
      if (o < sizeof list) o += (size_t)snprintf(list + o, sizeof list - o, "%s%s", o ? ", " : "", k);
      int d = distance(key, k);
      if (d < best && (size_t)d * 3 <= strlen(k)) {
        best = d;
        snprintf(guess, sizeof guess, " (did you mean \"%s\"?)", k);
      }
    }
  }
  if (strcmp(kind, "limit") == 0) {  /* a limit under its C field or flag name: "wall_us" */
    char us[80];
    snprintf(us, sizeof us, "%.64s_us", key);
    const tp_limit_info *li = tp_limit_find(key);
    if (li == NULL) li = tp_limit_find(us);
    if (li) snprintf(guess, sizeof guess, " (did you mean \"%s\"?)", li->option);
  }
  char k[80 * 6];
  quoted(key, k, sizeof k);
  add(p, "%s: unknown %s %s%s; the %ss are: %s", where, kind, k, guess, kind, list);
}

/* One error of the validator as a line of p. */
/* The unit of a schema node that is $defs/size, count or duration, else -1. */
static int unit_of (const json_t *root, const json_t *node) {
  const json_t *defs = json_object_get(root, "$defs");
  if (node == json_object_get(defs, "size")) return TP_UNIT_BYTES;
  if (node == json_object_get(defs, "count")) return TP_UNIT_COUNT;
  if (node == json_object_get(defs, "duration")) return TP_UNIT_DURATION;
  return -1;
}

static void explain (problems *p, const json_t *root, const json_t *cfg,
                     const tp_schema_error *err) {
  segs g;
  char where[512], msg[1400], ex[EXAMPLE_MAX + 600];
  if (parse_path(err->path, &g) != 0) {  /* not expected: the validator's own text */
    segs_free(&g);
    add(p, "%s: %s", err->path, err->message);
    return;
  }
  ptr_of(&g, g.n, where, sizeof where);
  const json_t *node = deref(root, schema_at(root, &g, g.n));
  const json_t *v = value_at(cfg, &g, g.n);
  const char *key = g.n && g.s[g.n - 1].key ? g.s[g.n - 1].key : NULL;
  const char *kw = err->keyword;
  if (strcmp(kw, "additionalProperties") == 0 && key && g.n >= 1 &&
      prop(deref(root, schema_at(root, &g, g.n - 1)), key) == NULL) {
    char parent[512];
    ptr_of(&g, g.n - 1, parent, sizeof parent);
    unknown_key(p, deref(root, schema_at(root, &g, g.n - 1)), parent, where, key, g.n - 1);
    segs_free(&g);
    return;
  }
  if (strcmp(kw, "type") == 0 && node && v) {
    char exp[200], got[96];
    expected(root, node, 0, exp, sizeof exp, 0);
    found(v, got, sizeof got);
    example(root, schema_at(root, &g, g.n), key, ex, sizeof ex);
    snprintf(msg, sizeof msg, "expected %s, got %s%s", exp, got, ex);
  }
  else if (strcmp(kw, "required") == 0 && node) {
    const char *q = strchr(err->message, '"'), *q2 = q ? strrchr(q + 1, '"') : NULL;
    char name[96] = "";
    if (q && q2 && q2 > q) snprintf(name, sizeof name, "%.*s", (int)(q2 - q - 1), q + 1);
    const json_t *els = json_object_get(node, "else");
    const char *why = NULL;
    if (json_object_get(els, "required")) why = json_string_value(json_object_get(els, "description"));
    const json_t *pn = prop(node, name);
    if (why == NULL) why = json_string_value(json_object_get(pn, "description"));
    example(root, pn, name, ex, sizeof ex);
    snprintf(msg, sizeof msg, "missing \"%s\"%s%s%s", name, why ? " (" : "", why ? why : "",
             why ? ")" : "");
    if (!why || !json_object_get(els, "required")) strncat(msg, ex, sizeof msg - strlen(msg) - 1);
  }
  else if (strcmp(kw, "pattern") == 0 && node && json_is_string(v) &&
           unit_of(root, node) >= 0) {  /* a SIZE, COUNT or DURATION: the parser's words */
    char why[256];
    uint64_t out;
    if (tp_parse_value((tp_unit)unit_of(root, node), json_string_value(v), UINT64_MAX, &out,
                       NULL, why, sizeof why) == TP_OK)
      snprintf(why, sizeof why, "%s", err->message);
    snprintf(msg, sizeof msg, "%s", why);
  }
  else if (strcmp(kw, "not") == 0 && node) {
    const char *why = json_string_value(json_object_get(json_object_get(node, "then"), "description"));
    snprintf(msg, sizeof msg, "%s", why ? why : err->message);
  }
  else {
    example(root, schema_at(root, &g, g.n), key, ex, sizeof ex);
    snprintf(msg, sizeof msg, "%s%s", err->message, ex);
  }
  add(p, "%s: %s", where, msg);
  segs_free(&g);
}

/* ---- checks past the schema: nesting, limit values, paths ----------------------------- */

/* The first place v nests deeper than NEST_MAX, as problems. 1 when it does. */
static int too_deep (problems *p, const json_t *v, int depth, char *where, size_t len, size_t o) {
  if (!json_is_object(v) && !json_is_array(v)) return 0;
  if (depth >= NEST_MAX) {
    add(p, "%s: nested too deeply (more than %d levels); a config needs few levels: "
        "keep deep data out of it", where, NEST_MAX);
    return 1;
  }
  if (json_is_array(v)) {
    size_t i;
    json_t *it;
    json_array_foreach(v, i, it) {
      char ix[24];
      size_t at = o;
      snprintf(ix, sizeof ix, "%zu", i);
      ptr_add(where, len, &at, ix);
      int r = too_deep(p, it, depth + 1, where, len, at);
      where[o] = '\0';
      if (r) return 1;
    }
    return 0;
  }
  const char *k;
  json_t *it;
  json_object_foreach((json_t *)v, k, it) {
    size_t at = o;
    ptr_add(where, len, &at, k);
    int r = too_deep(p, it, depth + 1, where, len, at);
    where[o] = '\0';
    if (r) return 1;
  }
  return 0;
}

/* The text a limit value stands for: integers as decimal text (in the limit's unit: a
** bare number of a duration is seconds), strings as they are. NULL for other values. */
static const char *value_text (const json_t *v, char *buf, size_t len) {
  if (json_is_string(v)) return json_string_value(v);
  if (json_is_integer(v)) {
    snprintf(buf, len, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
    return buf;
  }
  return NULL;
}

/* Sets the limits of section lim (checked) in *l; with p, reports bad values. */
static void apply_limits (const json_t *lim, tp_limits *l, problems *p) {
  const char *k;
  json_t *v;
  json_object_foreach((json_t *)lim, k, v) {
    const tp_limit_info *li = tp_limit_find(k);
    if (li == NULL || strcmp(li->option, k) != 0) continue;  /* the schema's error */
    char why[256], num[32];
    const char *text = value_text(v, num, sizeof num);
    int rc = TP_OK;
    if (text) rc = tp_limits_set(l, k, text, why, sizeof why);
    else if (json_is_real(v) && (li->unit == TP_UNIT_DURATION || p == NULL))
      rc = tp_limits_set_number(l, k, json_real_value(v), why, sizeof why);
    else continue;  /* the schema's error: a size or count must be an integer */
    if (rc != TP_OK) {
      if (p) add(p, "/limits/%s: %s", k, why);
      continue;
    }
    if (p && strcmp(li->field, "memory") == 0 && l->memory < 16 * 1024)
      add(p, "/limits/memory: %s is too small (at least 16K)", text ? text : "the value");
    if (p && strcmp(li->field, "source") == 0 && l->source == 0)
      add(p, "/limits/max_source: 0 is refused here (a script needs a size cap); give a size "
          "such as \"1M\"");
  }
}

/* base/rel, or rel when it is absolute or base is NULL. NULL when out of memory. */
static char *resolve (const char *base, const char *rel) {
  if (rel[0] == '/' || base == NULL) return strdup(rel);
  char *out = NULL;
  if (asprintf(&out, "%s%s%s", base, base[strlen(base) - 1] == '/' ? "" : "/", rel) < 0)
    return NULL;
  return out;
}

/* The string at *slot resolved against base (replaced in the tree); with dir, reports
** it when it is not a directory. 0, or -1 out of memory. */
static int fix_path (json_t *parent, const char *key, size_t idx, const char *base,
                     int dir, const char *where, problems *p) {
  json_t *v = key ? json_object_get(parent, key) : json_array_get(parent, idx);
  const char *s = json_string_value(v);
  if (s == NULL || json_string_length(v) == 0) return 0;  /* the schema's error */
  if (strlen(s) != json_string_length(v)) {
    add(p, "%s: a path cannot hold a NUL character (\\u0000)", where);
    return 0;
  }
  char *abs = resolve(base, s);
  if (abs == NULL) return -1;
  struct stat st;
  if (dir && (stat(abs, &st) != 0 || !S_ISDIR(st.st_mode))) {
    int err = errno;
    if (strcmp(abs, s) == 0)
      add(p, "%s: \"%s\" is not a directory%s%s", where, s, stat(abs, &st) == 0 ? "" : ": ",
          stat(abs, &st) == 0 ? "" : strerror(err));
    else
      add(p, "%s: \"%s\" is not a directory (looked for %s; relative paths are relative to "
          "the config file's folder)", where, s, abs);
  }
  json_t *nv = json_string(abs);
  free(abs);
  if (nv == NULL) return -1;
  int rc = key ? json_object_set_new(parent, key, nv) : json_array_set_new(parent, idx, nv);
  return rc == 0 ? 0 : -1;
}

static int fix_cwds (json_t *cfg, const char *base, problems *p) {
  const char *name;
  json_t *srv;
  json_object_foreach(json_object_get(cfg, "mcpServers"), name, srv)
    if (json_is_object(srv) && fix_path(srv, "cwd", 0, base, 0, "", p) < 0) return -1;
  return 0;
}

/* "state": a directory, or sqlite:PATH, relative to base; a URL stays as it is. */
static int fix_state (json_t *cfg, const char *base, problems *p) {
  const char *s = json_string_value(json_object_get(cfg, "state"));
  if (s == NULL || base == NULL || strstr(s, "://") != NULL || strcmp(s, "memory:") == 0)
    return 0;
  if (strncmp(s, "sqlite:", 7) != 0) return fix_path(cfg, "state", 0, base, 0, "/state", p);
  json_t *tmp = json_pack("{ss}", "p", s + 7);
  if (tmp == NULL || fix_path(tmp, "p", 0, base, 0, "/state", p) < 0) {
    json_decref(tmp);
    return -1;
  }
  const char *abs = json_string_value(json_object_get(tmp, "p"));
  size_t n = abs ? strlen(abs) + 8 : 0;
  char *full = abs ? malloc(n) : NULL;
  if (full) snprintf(full, n, "sqlite:%s", abs);
  int rc = full && json_object_set_new(cfg, "state", json_string(full)) == 0 ? 0 : -1;
  free(full);
  json_decref(tmp);
  return rc;
}

static int fix_paths (json_t *cfg, const char *base, problems *p) {
  json_t *tools = json_object_get(cfg, "tools"), *ws = json_object_get(cfg, "workspace");
  if (fix_state(cfg, base, p) < 0) return -1;
  for (size_t i = 0; json_is_array(tools) && i < json_array_size(tools); i++) {
    char where[40];
    snprintf(where, sizeof where, "/tools/%zu", i);
    if (fix_path(tools, NULL, i, base, 1, where, p) < 0) return -1;
  }
  if (json_is_string(ws))  /* replaced there: ws is not to be read again */
    return fix_path(cfg, "workspace", 0, base, 1, "/workspace", p) < 0 ? -1 : fix_cwds(cfg, base, p);
  if (json_is_object(ws) && fix_path(ws, "dir", 0, base, 1, "/workspace/dir", p) < 0)
    return -1;
  if (json_is_object(ws) && json_object_get(ws, "max")) {
    char why[256], num[32];
    const char *text = value_text(json_object_get(ws, "max"), num, sizeof num);
    uint64_t max;
    if (text && tp_parse_value(TP_UNIT_BYTES, text, UINT64_MAX, &max, NULL, why,
                               sizeof why) != TP_OK)
      add(p, "/workspace/max: %s", why);
  }
  return fix_cwds(cfg, base, p);
}

/* ---- what only this machine can tell ------------------------------------------------
** A config can be well formed and still ask for what the machine lacks: a variable
** "env:NAME" that is not set, a program that is not installed. Those are not errors of
** the file (the same file works where they exist), so they do not stop tp_engine_configure;
** they are kept as warnings (tp_engine_config_warnings), which `tidepool config check`
** and `--strict` turn into a refusal. One line each: "<JSON pointer>: what". */

/* The pointer of the keys (NULL-terminated; an index is written as its digits). */
static void ptr_keys (char *buf, size_t len, const char *const *keys) {
  size_t o = 0;
  buf[0] = '\0';
  for (; *keys; keys++) ptr_add(buf, len, &o, *keys);
}

/* "env:NAME" values of a string map whose NAME is not set. */
static void env_refs (problems *p, const json_t *map, const char *k0, const char *k1,
                      const char *k2) {
  const char *key;
  json_t *v;
  json_object_foreach((json_t *)map, key, v) {
    const char *s = json_string_value(v);
    if (s == NULL || strncmp(s, "env:", 4) != 0 || getenv(s + 4) != NULL) continue;
    const char *keys[] = { k0, k1, k2, key, NULL };
    char where[512];
    ptr_keys(where, sizeof where, keys);
    add(p, "%s: the environment variable %s is not set (the value \"%s\" reads it); set "
        "it, or write the value itself", where, s + 4, s);
  }
}

/* 1 when the program name (no slash: looked up in PATH; else the path, relative to cwd
** when given) can be executed. */
static int program_found (const char *name, const char *cwd) {
  char buf[4096];
  if (strchr(name, '/')) {
    if (name[0] != '/' && cwd) snprintf(buf, sizeof buf, "%s/%s", cwd, name);
    else snprintf(buf, sizeof buf, "%s", name);
    return access(buf, X_OK) == 0;
  }
  const char *path = getenv("PATH");
  if (path == NULL) path = "/usr/local/bin:/usr/bin:/bin";
  while (*path) {
    size_t n = strcspn(path, ":");
    struct stat st;
    snprintf(buf, sizeof buf, "%.*s/%s", (int)(n ? n : 1), n ? path : ".", name);
    if (stat(buf, &st) == 0 && S_ISREG(st.st_mode) && access(buf, X_OK) == 0) return 1;
    path += n + (path[n] == ':');
  }
  return 0;
}

static void machine_problems (const json_t *cfg, problems *p) {
  const char *name;
  json_t *srv;
  json_object_foreach(json_object_get(cfg, "mcpServers"), name, srv) {
    if (json_is_true(json_object_get(srv, "disabled"))) continue;
    const char *cmd = json_string_value(json_object_get(srv, "command"));
    const char *cwd = json_string_value(json_object_get(srv, "cwd"));
    if (cmd && *cmd && !program_found(cmd, cwd)) {
      const char *keys[] = { "mcpServers", name, "command", NULL };
      char where[512];
      ptr_keys(where, sizeof where, keys);
      add(p, "%s: \"%s\" is not found%s; install it, or give its absolute path", where, cmd,
          strchr(cmd, '/') ? "" : " in PATH");
    }
    struct stat st;
    if (cwd && (stat(cwd, &st) != 0 || !S_ISDIR(st.st_mode))) {
      const char *keys[] = { "mcpServers", name, "cwd", NULL };
      char where[512];
      ptr_keys(where, sizeof where, keys);
      add(p, "%s: \"%s\" is not a directory", where, cwd);
    }
    env_refs(p, json_object_get(srv, "env"), "mcpServers", name, "env");
    env_refs(p, json_object_get(srv, "headers"), "mcpServers", name, "headers");
  }
  json_object_foreach(json_object_get(json_object_get(cfg, "http"), "inject"), name, srv)
    env_refs(p, srv, "http", "inject", name);
  size_t i;
  json_t *c;
  json_array_foreach(json_object_get(cfg, "commands"), i, c) {
    char ix[24];
    snprintf(ix, sizeof ix, "%zu", i);
    const char *argv0 = json_string_value(json_object_get(c, "argv0"));
    if (argv0 && *argv0 && !program_found(argv0, NULL)) {
      const char *keys[] = { "commands", ix, "argv0", NULL };
      char where[512];
      ptr_keys(where, sizeof where, keys);
      add(p, "%s: \"%s\" is not found%s (proc.run will answer not_found for it); install "
          "it, or remove the entry", where, argv0, strchr(argv0, '/') ? "" : " in PATH");
    }
    env_refs(p, json_object_get(c, "env"), "commands", ix, "env");
  }
}

/* ---- the whole check -------------------------------------------------------------- */

/* Checks the config text; relative paths resolve against base (NULL: as they are). On
** success *out (when not NULL) is the checked object with absolute paths, and warn (when
** not NULL) has what the machine lacks. TP_OK, or TP_EINVAL / TP_ENOMEM with the
** problems in p. */
static int check_text (const char *json, size_t len, const char *base, json_t **out,
                       problems *p, problems *warn) {
  char why[256];
  if (out) *out = NULL;
  json_t *cfg = tp_json_parse(json, len, why, sizeof why);
  if (cfg == NULL) {
    if (strcmp(why, "out of memory") == 0) { p->oom = 1; return TP_ENOMEM; }  /* exactly: a text may say it */
    add(p, "not valid JSON: %s", why);
    return TP_EINVAL;
  }
  if (!json_is_object(cfg)) {
    char got[96];
    found(cfg, got, sizeof got);
    add(p, "expected a JSON object of sections at the top, got %s; for example "
        "{\"limits\": {\"timeout\": \"5s\"}, \"tools\": [\"plugins\"]}", got);
    json_decref(cfg);
    return TP_EINVAL;
  }
  char where[1024] = "";
  if (too_deep(p, cfg, 0, where, sizeof where, 0)) {
    json_decref(cfg);
    return p->oom ? TP_ENOMEM : TP_EINVAL;
  }
  const tp_embedded *file = tp__embedded_find(SCHEMA_FILE);
  json_t *root = file ? tp_json_parse(file->data, file->len, why, sizeof why) : NULL;
  tp_schema *schema = root ? tp__schema_compile(root, TP_DIALECT_2020_12, NULL, 0, why,
                                                sizeof why) : NULL;
  if (schema == NULL) {  /* the embedded schema always compiles, short of memory */
    json_decref(root);
    json_decref(cfg);
    p->oom = 1;
    return TP_ENOMEM;
  }
  tp_schema_errors errs = {0};
  tp_schema_bounds bounds = { .max_errors = ERRORS_MAX };
  int valid = tp__schema_validate_bounded(schema, cfg, &errs, &bounds);
  for (size_t i = 0; valid == 0 && i < errs.count; i++) explain(p, root, cfg, &errs.items[i]);
  p->more = errs.more;
  tp__schema_errors_clear(&errs);
  tp__schema_free(schema);
  json_decref(root);
  if (valid < 0) p->oom = 1;
  tp_limits scratch;
  tp_limits_init(&scratch);
  if (json_is_object(json_object_get(cfg, "limits")))
    apply_limits(json_object_get(cfg, "limits"), &scratch, p);
  if (!p->oom && fix_paths(cfg, base, p) < 0) p->oom = 1;
  if (!p->oom && p->n == 0 && json_object_get(cfg, "policy")) {
    char perr[600];
    int prc = tp__policy_check(json_object_get(cfg, "policy"), perr, sizeof perr);
    if (prc == TP_ENOMEM) p->oom = 1;
    else if (prc != TP_OK) add(p, "%s", perr);
  }
  if (p->oom || p->n) {
    json_decref(cfg);
    return p->oom ? TP_ENOMEM : TP_EINVAL;
  }
  if (warn) machine_problems(cfg, warn);
  if (out) *out = cfg;
  else json_decref(cfg);
  return TP_OK;
}

/* check_text, with the problems joined into p->buf when it fails. */
static int check (const char *json, size_t len, const char *base, json_t **out, problems *p,
                  problems *warn) {
  int rc = check_text(json, len, base, out, p, warn);
  if (rc != TP_OK) finish(p);  /* else there are none */
  else if (warn && warn->n) finish(warn);
  return rc;
}

/* The folder of path, absolute ("/cwd/dir" for "dir/x.json"), or NULL out of memory. */
static char *folder_of (const char *path) {
  const char *slash = strrchr(path, '/');
  char *dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
  if (dir == NULL || dir[0] == '/') return dir;
  char *cwd = getcwd(NULL, 0), *abs = NULL;
  if (cwd == NULL) return dir;  /* the process's folder is gone: paths stay relative */
  int n = strcmp(dir, ".") == 0 ? asprintf(&abs, "%s", cwd) : asprintf(&abs, "%s/%s", cwd, dir);
  free(cwd);
  free(dir);
  return n < 0 ? NULL : abs;
}

static int set_problems (tp_engine *e, problems *p, int rc) {
  free(e->error);
  if (p->oom) {
    free(p->buf);
    e->error = strdup("config: out of memory");
    return TP_ENOMEM;
  }
  e->error = p->buf;
  return rc;
}

int tp_engine_configure_dir (tp_engine *e, const char *json, size_t len, const char *dir) {
  if (e == NULL || json == NULL) return TP_EINVAL;
  problems p = {0}, warn = {0};
  json_t *cfg;
  int rc = check(json, len, dir, &cfg, &p, &warn);
  if (rc != TP_OK) return set_problems(e, &p, rc);
  free(p.buf);
  if (warn.oom) {
    free(warn.buf);
    json_decref(cfg);
    return set_problems(e, &warn, TP_ENOMEM);
  }
  rc = tp__policy_load(e, json_object_get(cfg, "policy"));
  if (rc != TP_OK) {  /* the error says which rule, field and column */
    free(warn.buf);
    json_decref(cfg);
    return rc;
  }
  rc = tp__trace_configure(e, json_object_get(cfg, "telemetry"));
  if (rc != TP_OK) {
    free(warn.buf);
    json_decref(cfg);
    return rc;
  }
  json_decref(e->config);
  e->config = cfg;
  free(e->config_warnings);
  e->config_warnings = warn.buf;
  return TP_OK;
}

int tp_engine_configure (tp_engine *e, const char *json, size_t len) {
  return tp_engine_configure_dir(e, json, len, NULL);
}

/* The text of the file path (at most CONFIG_MAX bytes), or NULL with errno set. */
static char *read_file (const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) return NULL;
  size_t cap = 4096, n = 0;
  char *buf = malloc(cap);
  int err = buf ? 0 : ENOMEM;
  while (buf) {
    if (n == cap) {
      if (cap > CONFIG_MAX) { err = EFBIG; break; }  /* a byte past the cap was read */
      size_t nc = tp__grow_cap(cap, cap + 1, 1, 0);
      if (nc > CONFIG_MAX) nc = CONFIG_MAX + 1;
      char *nb = realloc(buf, nc);
      if (nb == NULL) { err = ENOMEM; break; }
      buf = nb;
      cap = nc;
    }
    errno = 0;
    size_t got = fread(buf + n, 1, cap - n, f);
    n += got;
    if (got == 0) {
      if (ferror(f)) err = errno ? errno : EIO;
      break;
    }
  }
  fclose(f);
  if (err) {
    free(buf);
    errno = err;
    return NULL;
  }
  if (buf) *len = n;
  return buf;
}

int tp_engine_configure_file (tp_engine *e, const char *path) {
  if (e == NULL || path == NULL) return TP_EINVAL;
  size_t len = 0;
  char *text = read_file(path, &len);
  if (text == NULL) {
    int err = errno;
    if (err == EFBIG)
      tp__engine_set_error(e, "config: cannot read: the file is larger than %u MiB", CONFIG_MAX >> 20);
    else tp__engine_set_error(e, "config: cannot read: %s", strerror(err));
    return err == ENOMEM ? TP_ENOMEM : TP_EINVAL;
  }
  char *dir = folder_of(path);
  int rc = dir ? tp_engine_configure_dir(e, text, len, dir) : TP_ENOMEM;
  if (dir == NULL) tp__engine_set_error(e, "config: out of memory");
  free(dir);
  free(text);
  return rc;
}

int tp_config_check (const char *json, size_t len, const char *dir, char *err, size_t errlen) {
  if (err && errlen) err[0] = '\0';
  if (json == NULL) {
    if (err && errlen) snprintf(err, errlen, "config: no text (NULL)");
    return TP_EINVAL;
  }
  problems p = {0};
  int rc = check(json, len, dir, NULL, &p, NULL);
  if (err && errlen && rc != TP_OK)
    snprintf(err, errlen, "%s", p.oom ? "config: out of memory" : p.buf ? p.buf : "");
  free(p.buf);
  return rc;
}

/* ---- what the front ends read --------------------------------------------------------- */

const char *tp_config_schema (void) {
  const tp_embedded *file = tp__embedded_find(SCHEMA_FILE);
  return file ? file->data : "";
}

int tp_engine_config_limits (const tp_engine *e, tp_limits *l) {
  if (e == NULL || l == NULL) return TP_EINVAL;
  const json_t *lim = tp__config_section(e, "limits");
  if (json_is_object(lim)) apply_limits(lim, l, NULL);
  return TP_OK;
}

const char *tp_engine_config_tools (const tp_engine *e, size_t i) {
  if (e == NULL) return NULL;
  return json_string_value(json_array_get(tp__config_section(e, "tools"), i));
}

const char *tp_engine_config_workspace (const tp_engine *e, uint64_t *max) {
  if (max) *max = UINT64_MAX;
  if (e == NULL) return NULL;
  const json_t *ws = tp__config_section(e, "workspace");
  if (json_is_string(ws)) return json_string_value(ws);
  if (!json_is_object(ws)) return NULL;
  char num[32];
  const char *text = value_text(json_object_get(ws, "max"), num, sizeof num);
  uint64_t m;
  if (max && text && tp_parse_value(TP_UNIT_BYTES, text, UINT64_MAX, &m, NULL, NULL, 0) == TP_OK)
    *max = m;
  return json_string_value(json_object_get(ws, "dir"));
}

const char *tp_engine_config_state (const tp_engine *e) {
  return e ? json_string_value(tp__config_section(e, "state")) : NULL;
}

const char *tp_engine_config_warnings (const tp_engine *e) {
  return e ? e->config_warnings : NULL;
}

void tp__config_free (tp_engine *e) {
  json_decref(e->config);
  e->config = NULL;
  free(e->config_warnings);
  e->config_warnings = NULL;
}
