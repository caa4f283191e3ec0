/*
** json.c: the value bridge between Lua 5.4 and JSON, on jansson. Contracts in json.h.
**
** Lua -> JSON is one recursive walk with raw access only (lua_next, lua_rawgeti,
** lua_rawlen, lua_getmetatable), a fixed-size path and ancestor stack in C memory, and no
** Lua allocation, so it cannot raise. The JSON path of a bad value is only turned into
** text when an error is reported.
*/
#include <locale.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"
#include "lua.h"
#include "lauxlib.h"

#include "tidepool.h"
#include "json.h"
#include "numfmt.h"

static void push_null(lua_State *L);

/* Registry keys: addresses of private statics. */
static const char array_mt_key = 0;
static const char object_mt_key = 0;
static const char all_objects_key = 0;  /* the object metatable, when every object gets it */
static const char box_mt_key = 0;
static const char decode_cap_key = 0;  /* registry: json.decode's input cap in this state */
static const char budget_key = 0;      /* registry: the tp_json_budget of this state */

/* ---- small text builder that truncates instead of overflowing ------------------------- */

typedef struct sbuf { char *p; size_t cap, len; int cut; } sbuf;

static void sb_init (sbuf *b, char *p, size_t cap) {
  b->p = p; b->cap = cap; b->len = 0; b->cut = 0;
  p[0] = '\0';
}

static void sb_putn (sbuf *b, const char *s, size_t n) {
  size_t room = b->cap - 1 - b->len;
  if (n > room) { n = room; b->cut = 1; }
  memcpy(b->p + b->len, s, n);
  b->len += n;
  b->p[b->len] = '\0';
}

static void sb_puts (sbuf *b, const char *s) { sb_putn(b, s, strlen(s)); }

static void sb_putc (sbuf *b, char c) { sb_putn(b, &c, 1); }

/* Marks a truncated text with "..." at its end. */
static void sb_finish (sbuf *b) {
  if (b->cut && b->cap >= 4) {
    size_t at = b->len >= 3 ? b->len - 3 : 0;
    while (at > 0 && ((unsigned char)b->p[at] & 0xC0) == 0x80) at--;  /* whole chars */
    memcpy(b->p + at, "...", 4);
    b->len = at + 3;
  }
}

/* ---- UTF-8 ----------------------------------------------------------------------------- */

/*
** Returns len when s is valid UTF-8 (no overlongs, no surrogates, nothing past U+10FFFF),
** else the offset of the first bad sequence, with *why saying what is wrong.
*/
size_t tp__utf8_check (const unsigned char *s, size_t len, const char **why) {
  size_t i = 0;
  while (i < len) {
    while (i + 8 <= len) {  /* ASCII runs, 8 bytes at a time */
      uint64_t x;
      memcpy(&x, s + i, 8);
      if (x & UINT64_C(0x8080808080808080)) break;
      i += 8;
    }
    if (i >= len) break;
    unsigned c = s[i];
    if (c < 0x80) { i++; continue; }
    unsigned lo = 0x80, hi = 0xBF;
    size_t n;
    if (c < 0xC0) { *why = "unexpected continuation byte"; return i; }
    else if (c < 0xC2) { *why = "overlong encoding"; return i; }
    else if (c < 0xE0) n = 1;
    else if (c < 0xF0) { n = 2; if (c == 0xE0) lo = 0xA0; else if (c == 0xED) hi = 0x9F; }
    else if (c < 0xF5) { n = 3; if (c == 0xF0) lo = 0x90; else if (c == 0xF4) hi = 0x8F; }
    else { *why = "byte that never appears in UTF-8"; return i; }
    if (len - i <= n) { *why = "truncated multi-byte sequence"; return i; }
    unsigned c1 = s[i + 1];
    if (c1 < lo || c1 > hi) {
      if (c1 >= 0x80 && c1 <= 0xBF)
        *why = (c == 0xED) ? "UTF-16 surrogate (U+D800..U+DFFF)"
             : (c == 0xF4) ? "code point above U+10FFFF" : "overlong encoding";
      else
        *why = "incomplete multi-byte sequence";
      return i;
    }
    for (size_t k = 2; k <= n; k++)
      if ((s[i + k] & 0xC0) != 0x80) { *why = "incomplete multi-byte sequence"; return i; }
    i += n + 1;
  }
  return len;
}

/* ---- the Lua -> JSON walk -------------------------------------------------------------- */

typedef struct seg { const char *key; size_t len; lua_Integer idx; } seg;  /* key NULL: idx */

typedef struct walker {
  lua_State *L;
  tp_json_err *err;
  int max_depth, depth;           /* depth = tables entered = path segments */
  size_t max_bytes, bytes;
  const tp_json_budget *budget;   /* NULL: costs are counted, not charged */
  size_t pending, charged;        /* host cost not charged yet; charged so far */
  unsigned nodes;                 /* values converted, for polling budget->stopped */
  int over_bytes, over_budget, stopped;
  int empty_objects;              /* an untagged empty table became {} */
  const json_t *kept[TP_JSON_KEPT_MAX]; /* tagged empty objects */
  int nkept;
  const void *array_mt;           /* NULL when the state has no array metatable yet */
  const void *object_mt;          /* the same for empty objects decoded from JSON */
  int array_mt_read;              /* array_mt was read (at the first table with a
                                  ** metatable) */
  const void *tables[TP_JSON_HARD_MAX_DEPTH + 1];  /* ancestors, for cycles */
  seg path[TP_JSON_HARD_MAX_DEPTH + 1];
} walker;

static int is_ident (const char *k, size_t len) {
  if (len == 0 || !((k[0] >= 'a' && k[0] <= 'z') || (k[0] >= 'A' && k[0] <= 'Z') || k[0] == '_'))
    return 0;
  for (size_t i = 1; i < len; i++) {
    char c = k[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'))
      return 0;
  }
  return 1;
}

/* A key as a quoted, escaped string of at most about 48 source bytes. */
static void put_quoted (sbuf *b, const char *k, size_t len) {
  const char *why;
  int valid = tp__utf8_check((const unsigned char *)k, len, &why) == len;
  size_t n = len > 48 ? 48 : len;
  if (valid) while (n > 0 && n < len && ((unsigned char)k[n] & 0xC0) == 0x80) n--;
  sb_putc(b, '"');
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)k[i];
    char tmp[8];
    if (c == '"' || c == '\\') { sb_putc(b, '\\'); sb_putc(b, (char)c); }
    else if (c < 0x20 || c == 0x7F || (c >= 0x80 && !valid)) {
      snprintf(tmp, sizeof tmp, c >= 0x80 ? "\\x%02x" : "\\u%04x", c);
      sb_puts(b, tmp);
    }
    else sb_putc(b, (char)c);
  }
  if (n < len) sb_puts(b, "...");
  sb_putc(b, '"');
}

static void format_path (const walker *w, int nseg, char *out, size_t cap) {
  sbuf b;
  sb_init(&b, out, cap);
  sb_putc(&b, '$');
  for (int i = 0; i < nseg; i++) {
    const seg *s = &w->path[i];
    char one[128];
    sbuf p;
    sb_init(&p, one, sizeof one);
    if (s->key == NULL) {
      char tmp[32];
      snprintf(tmp, sizeof tmp, "[%lld]", (long long)s->idx - 1);
      sb_puts(&p, tmp);
    }
    else if (is_ident(s->key, s->len) && s->len <= 48) {
      sb_putc(&p, '.');
      sb_putn(&p, s->key, s->len);
    }
    else {
      sb_putc(&p, '[');
      put_quoted(&p, s->key, s->len);
      sb_putc(&p, ']');
    }
    if (b.len + p.len + 4 > b.cap) {  /* whole segments only, then "..." */
      sb_puts(&b, "...");
      break;
    }
    sb_putn(&b, one, p.len);
  }
}

/* Short path text for messages; the full one goes to err->path. */
#define SHORT_PATH 96

/* The path of the value being converted (depth segments): fills err->path, returns buf. */
static const char *here (walker *w, int depth, char *buf) {
  format_path(w, depth, buf, SHORT_PATH);
  if (w->err != NULL) format_path(w, depth, w->err->path, sizeof w->err->path);
  return buf;
}

/* Records the error message; the path was set by here(). */
__attribute__((format(printf, 2, 3)))
static void fail (walker *w, const char *fmt, ...) {
  tp_json_err *e = w->err;
  if (e == NULL) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->message, sizeof e->message, fmt, ap);
  va_end(ap);
}

/* Counts n bytes of output against max_bytes; 0 (with the error set) when over. */
static int charge (walker *w, size_t n) {
  w->bytes += n;
  if (w->max_bytes != 0 && w->bytes > w->max_bytes) {
    char path[SHORT_PATH];
    w->over_bytes = 1;
    here(w, w->depth, path);
    if (w->err) {
      snprintf(w->err->message, sizeof w->err->message,
               "the JSON is larger than the %zu-byte cap (max_bytes), exceeded at %s; "
               "return less data: select the fields you need, truncate long strings, "
               "or paginate", w->max_bytes, path);
    }
    return 0;
  }
  return 1;
}

/* Charges the host cost counted so far to the budget; 0 (with the error set) when it is
** refused. */
static int flush (walker *w) {
  if (w->budget == NULL || w->pending == 0) return 1;
  if (w->budget->charge(w->budget->ud, w->pending) != 0) {
    char path[SHORT_PATH], note[200];
    w->over_budget = 1;
    here(w, w->depth, path);
    snprintf(note, sizeof note, "a value converted to JSON needs more host memory than the "
             "memory limit allows (at %.40s); a table that appears several times is copied "
             "each time", path);
    if (w->budget->note) w->budget->note(w->budget->ud, note);
    fail(w, "the JSON built from this value needs more host memory than the run's memory "
         "limit allows (exceeded at %s; a table that appears several times is copied each "
         "time); send less data, or send a table once and refer to it by a key", path);
    return 0;
  }
  w->charged += w->pending;
  w->pending = 0;
  return 1;
}

/* Counts one value of host cost `cost`: charged in batches, and every
** TP_JSON_POLL_NODES values the run's verdict is polled. 0 (error set) to stop. This is
** how the walk is bounded in time: by the verdict (a deadline), not by a size cap. */
static int spend_slow (walker *w) {
  w->nodes = TP_JSON_POLL_NODES;
  if (w->budget->stopped != NULL && w->budget->stopped(w->budget->ud)) {
    char path[SHORT_PATH];
    w->stopped = 1;
    here(w, w->depth, path);
    fail(w, "the conversion to JSON was stopped at %s: the run has ended (a limit)", path);
    return 0;
  }
  return w->pending < TP_JSON_CHARGE_BATCH || flush(w);
}

static inline int spend (walker *w, size_t cost) {
  w->pending += cost;
  if (w->budget == NULL || (--w->nodes != 0 && w->pending < TP_JSON_CHARGE_BATCH)) return 1;
  return spend_slow(w);
}

static void host_oom(const tp_json_budget *b);

static json_t *oom (walker *w) {
  char path[SHORT_PATH];
  host_oom(w->budget);
  here(w, w->depth, path);
  fail(w, "out of memory while building JSON at %s", path);
  return NULL;
}

static size_t int_width (lua_Integer i) {
  size_t n = i < 0 ? 2 : 1;
  lua_Unsigned u = i < 0 ? 0u - (lua_Unsigned)i : (lua_Unsigned)i;
  while (u >= 10) { u /= 10; n++; }
  return n;
}

static json_t *walk (walker *w, int idx);

/* Describes a non-string, non-array key for an error message. */
static void describe_key (lua_State *L, int k, char *out, size_t cap) {
  switch (lua_type(L, k)) {
    case LUA_TNUMBER:
      if (lua_isinteger(L, k)) snprintf(out, cap, "the integer key %lld", (long long)lua_tointeger(L, k));
      else {
        char num[TP_NUMFMT_MAX];
        tp__fmt_double((double)lua_tonumber(L, k), num);
        snprintf(out, cap, "the float key %s", num);
      }
      break;
    case LUA_TBOOLEAN:
      snprintf(out, cap, "the boolean key %s", lua_toboolean(L, k) ? "true" : "false");
      break;
    default:
      snprintf(out, cap, "a %s key", lua_typename(L, lua_type(L, k)));
      break;
  }
}

/* First i >= 1 with t[i] == nil (raw). */
static lua_Integer first_hole (lua_State *L, int t) {
  lua_Integer i = 1;
  for (;; i++) {
    int nil = lua_rawgeti(L, t, i) == LUA_TNIL;
    lua_pop(L, 1);
    if (nil) return i;
  }
}

static json_t *sparse_error (walker *w, int t, lua_Integer key) {
  char path[SHORT_PATH];
  lua_Integer hole = first_hole(w->L, t);
  here(w, w->depth, path);
  fail(w, "sparse array at %s: t[%lld] is set but t[%lld] is nil, and JSON arrays "
       "cannot have holes; put json.null in the holes, or use string keys for an object",
       path, (long long)key, (long long)hole);
  return NULL;
}

static json_t *walk_table (walker *w, int t) {
  lua_State *L = w->L;
  char path[SHORT_PATH];
  const void *self = lua_topointer(L, t);
  for (int i = 0; i < w->depth; i++) {
    if (w->tables[i] == self) {
      here(w, w->depth, path);
      fail(w, "cycle at %s: the table contains itself; copy the data instead of "
           "storing a reference to an enclosing table", path);
      return NULL;
    }
  }
  if (w->depth >= w->max_depth) {
    here(w, w->depth, path);
    fail(w, "nesting deeper than %d levels at %s; flatten the data (JSON values are "
         "capped at %d nested arrays/objects)", w->max_depth, path, w->max_depth);
    return NULL;
  }
  if (!lua_checkstack(L, 4)) {
    here(w, w->depth, path);
    fail(w, "out of Lua stack space while converting %s to JSON", path);
    return NULL;
  }
  int tagged = 0;
  if (lua_getmetatable(L, t)) {
    if (!w->array_mt_read) {
      lua_rawgetp(L, LUA_REGISTRYINDEX, &array_mt_key);
      w->array_mt = lua_topointer(L, -1);  /* NULL unless a table */
      lua_rawgetp(L, LUA_REGISTRYINDEX, &object_mt_key);
      w->object_mt = lua_topointer(L, -1);
      w->array_mt_read = 1;
      lua_pop(L, 2);
    }
    tagged = w->array_mt != NULL && lua_topointer(L, -1) == w->array_mt;
    if (w->object_mt != NULL && lua_topointer(L, -1) == w->object_mt) tagged = -1;
    lua_pop(L, 1);
  }
  lua_Unsigned n = lua_rawlen(L, t);
  w->tables[w->depth] = self;

  /* One lua_next pass: the first key decides array (integer) or object (string). */
  json_t *obj = NULL;
  lua_Unsigned count = 0;
  const char *first_str = NULL;
  size_t first_len = 0;
  int top = lua_gettop(L);
  lua_pushnil(L);
  while (lua_next(L, t)) {
    int kt = lua_type(L, -2);
    if (kt == LUA_TSTRING && count == 0 && tagged <= 0) {
      size_t klen;
      const char *k = lua_tolstring(L, -2, &klen);  /* a string: no conversion */
      const char *why;
      if (obj == NULL) {
        obj = json_object();
        if (obj == NULL) { lua_settop(L, top); return oom(w); }
        first_str = k; first_len = klen;
        if (!charge(w, 2) || !spend(w, TP_JSON_COST_OBJECT)) goto fail;
      }
      w->path[w->depth] = (seg){ k, klen, 0 };
      size_t bad = tp__utf8_check((const unsigned char *)k, klen, &why);
      if (bad != klen) {
        here(w, w->depth + 1, path);
        fail(w, "invalid UTF-8 in the object key at %s (byte %zu: %s); keys must be "
             "UTF-8 text: rename the key", path, bad, why);
        goto fail;
      }
      if (memchr(k, '\0', klen) != NULL) {
        here(w, w->depth + 1, path);
        fail(w, "the object key at %s contains a NUL byte, which JSON object keys "
             "cannot carry here; remove the \\0 from the key", path);
        goto fail;
      }
      if (!charge(w, klen + 4) || !spend(w, TP_JSON_COST_MEMBER + klen)) goto fail;
      w->depth++;
      json_t *child = walk(w, lua_gettop(L));
      w->depth--;
      if (child == NULL) goto fail;
      if (json_object_setn_new_nocheck(obj, k, klen, child) != 0) {
        oom(w);
        goto fail;
      }
    }
    else if (kt == LUA_TNUMBER && lua_isinteger(L, -2) && obj == NULL) {
      lua_Integer k = lua_tointeger(L, -2);
      if (k < 1) {
        here(w, w->depth, path);
        fail(w, "the table at %s has the integer key %lld, but arrays use keys 1..n; "
             "shift the items to start at 1, or use string keys for an object",
             path, (long long)k);
        goto fail;
      }
      if ((lua_Unsigned)k > n) { lua_settop(L, top); return sparse_error(w, t, k); }
      count++;
    }
    else {
      char kdesc[96];
      here(w, w->depth, path);
      if (kt == LUA_TSTRING) {
        sbuf b; char q[80];
        size_t klen;
        const char *k = lua_tolstring(L, -2, &klen);
        sb_init(&b, q, sizeof q);
        put_quoted(&b, k, klen);
        sb_finish(&b);
        if (tagged > 0)
          fail(w, "the array at %s (tagged with json.array) has the string key %s; "
               "arrays take only keys 1..n: remove the key, or build a plain table for "
               "an object", path, q);
        else
          fail(w, "the table at %s mixes array items (keys 1..n) with the string key "
               "%s; use only string keys (an object) or only keys 1..n (an array)",
               path, q);
      }
      else if (kt == LUA_TNUMBER && lua_isinteger(L, -2)) {
        sbuf b; char q[80];
        sb_init(&b, q, sizeof q);
        put_quoted(&b, first_str, first_len);
        sb_finish(&b);
        fail(w, "the table at %s mixes string keys (such as %s) with the integer key "
             "%lld; use only string keys (an object, e.g. t[tostring(k)]) or only keys "
             "1..n (an array)", path, q, (long long)lua_tointeger(L, -2));
      }
      else {
        describe_key(L, lua_absindex(L, -2), kdesc, sizeof kdesc);
        fail(w, "the table at %s has %s; JSON object keys must be strings and array "
             "keys 1..n: convert the key with tostring(k), or restructure the data",
             path, kdesc);
      }
      goto fail;
    }
    lua_pop(L, 1);
  }
  if (obj != NULL) return obj;

  /* An array: keys were integers in 1..n, all distinct, so count == n means no holes. */
  if (count != n) return sparse_error(w, t, (lua_Integer)n);
  if (n == 0 && tagged <= 0) {  /* untagged: ambiguous; tagged json.object: an object */
    if (!charge(w, 2) || !spend(w, TP_JSON_COST_OBJECT)) return NULL;
    obj = json_object();
    if (obj == NULL) return oom(w);
    if (tagged == 0) w->empty_objects = 1;
    else if (w->nkept >= 0 && w->nkept < TP_JSON_KEPT_MAX) w->kept[w->nkept++] = obj;
    else w->nkept = -1;
    return obj;
  }
  json_t *arr = json_array();
  if (arr == NULL) return oom(w);
  if (!charge(w, 2) || !spend(w, TP_JSON_COST_ARRAY)) { json_decref(arr); return NULL; }
  for (lua_Unsigned i = 1; i <= n; i++) {
    lua_rawgeti(L, t, (lua_Integer)i);
    w->path[w->depth] = (seg){ NULL, 0, (lua_Integer)i };
    w->depth++;
    json_t *child = charge(w, 1) ? walk(w, lua_gettop(L)) : NULL;
    w->depth--;
    lua_pop(L, 1);
    if (child == NULL) { json_decref(arr); return NULL; }
    if (json_array_append_new(arr, child) != 0) { json_decref(arr); return oom(w); }
  }
  return arr;

fail:
  lua_settop(L, top);
  json_decref(obj);
  return NULL;
}

static json_t *walk (walker *w, int idx) {
  lua_State *L = w->L;
  char path[SHORT_PATH];
  json_t *v;
  switch (lua_type(L, idx)) {
    case LUA_TNIL:
    case LUA_TNONE:
      if (!charge(w, 4) || !spend(w, TP_JSON_COST_SCALAR)) return NULL;
      return json_null();
    case LUA_TBOOLEAN: {
      int b = lua_toboolean(L, idx);
      if (!charge(w, b ? 4 : 5) || !spend(w, TP_JSON_COST_SCALAR)) return NULL;
      return b ? json_true() : json_false();
    }
    case LUA_TNUMBER:
      if (lua_isinteger(L, idx)) {
        lua_Integer i = lua_tointeger(L, idx);
        if (!charge(w, int_width(i)) || !spend(w, TP_JSON_COST_NUMBER)) return NULL;
        v = json_integer((json_int_t)i);
      }
      else {
        double d = (double)lua_tonumber(L, idx);
        if (!isfinite(d)) {
          here(w, w->depth, path);
          if (isnan(d))
            fail(w, "NaN cannot be represented in JSON (at %s); use json.null, or a "
                 "string such as \"NaN\"", path);
          else
            fail(w, "%s cannot be represented in JSON (at %s); use json.null, a finite "
                 "number such as math.maxinteger, or a string", d > 0 ? "inf" : "-inf", path);
          return NULL;
        }
        if (!charge(w, 24) || !spend(w, TP_JSON_COST_NUMBER)) return NULL;
        v = json_real(d);
      }
      return v ? v : oom(w);
    case LUA_TSTRING: {
      size_t len;
      const char *s = lua_tolstring(L, idx, &len);  /* a string: no conversion */
      const char *why;
      size_t bad = tp__utf8_check((const unsigned char *)s, len, &why);
      if (bad != len) {
        here(w, w->depth, path);
        fail(w, "invalid UTF-8 in the string at %s (byte %zu: %s); JSON strings must "
             "be UTF-8 text: encode binary data first, e.g. as hex", path, bad, why);
        return NULL;
      }
      if (!charge(w, len + 2) || !spend(w, TP_JSON_COST_STRING + len)) return NULL;
      v = json_stringn_nocheck(s, len);
      return v ? v : oom(w);
    }
    case LUA_TTABLE:
      return walk_table(w, idx);
    case LUA_TLIGHTUSERDATA:
      if (lua_touserdata(L, idx) == NULL) {
        if (!charge(w, 4) || !spend(w, TP_JSON_COST_SCALAR)) return NULL;
        return json_null();
      }
      here(w, w->depth, path);
      fail(w, "cannot convert a light userdata at %s to JSON; JSON has only null, "
           "booleans, numbers, strings, arrays and objects: remove the value", path);
      return NULL;
    case LUA_TFUNCTION:
      here(w, w->depth, path);
      fail(w, "cannot convert a function at %s to JSON; JSON has only null, booleans, "
           "numbers, strings, arrays and objects: remove the field, or store the result "
           "of calling the function", path);
      return NULL;
    case LUA_TTHREAD:
      here(w, w->depth, path);
      fail(w, "cannot convert a coroutine (thread) at %s to JSON; JSON has only null, "
           "booleans, numbers, strings, arrays and objects: remove the value", path);
      return NULL;
    default:
      here(w, w->depth, path);
      fail(w, "cannot convert a userdata at %s to JSON; JSON has only null, booleans, "
           "numbers, strings, arrays and objects: convert it to plain data first", path);
      return NULL;
  }
}

json_t *tp__json_from_lua_ex (lua_State *L, int idx, tp_json_opts *o, tp_json_err *err) {
  walker w;
  if (err != NULL) { err->path[0] = '\0'; err->message[0] = '\0'; }
  o->over_bytes = o->over_budget = o->stopped = 0;
  if (L == NULL) {
    if (err) { strcpy(err->path, "$"); strcpy(err->message, "no Lua state"); }
    return NULL;
  }
  idx = lua_absindex(L, idx);
  int top = lua_gettop(L);
  w.L = L;
  w.err = err;
  w.max_depth = o->max_depth <= 0 ? TP_JSON_MAX_DEPTH
              : o->max_depth > TP_JSON_HARD_MAX_DEPTH ? TP_JSON_HARD_MAX_DEPTH : o->max_depth;
  w.depth = 0;
  w.max_bytes = o->max_bytes;
  w.bytes = o->bytes;
  w.budget = o->budget;
  w.pending = w.charged = 0;
  w.nodes = TP_JSON_POLL_NODES;  /* counts down to the next poll */
  w.over_bytes = w.over_budget = w.stopped = w.empty_objects = 0;
  w.nkept = 0;
  w.object_mt = NULL;
  w.array_mt = NULL;  /* read at the first table with a metatable */
  w.array_mt_read = 0;
  json_t *v = walk(&w, idx);
  if (v != NULL && !flush(&w)) {
    json_decref(v);
    v = NULL;
  }
  if (v == NULL && w.charged && w.budget != NULL) {
    w.budget->refund(w.budget->ud, w.charged);
    w.charged = 0;
  }
  lua_settop(L, top);
  o->bytes = w.bytes;
  o->cost += w.charged;
  o->over_bytes = w.over_bytes;
  o->over_budget = w.over_budget;
  o->stopped = w.stopped;
  o->empty_objects = w.empty_objects;
  o->nkept = w.nkept;
  if (w.nkept > 0) memcpy(o->kept, w.kept, (size_t)w.nkept * sizeof w.kept[0]);
  return v;
}

json_t *tp__json_from_lua (lua_State *L, int idx, int max_depth, size_t max_bytes,
                          tp_json_err *err) {
  tp_json_opts o;
  memset(&o, 0, sizeof o);
  o.max_depth = max_depth;
  o.max_bytes = max_bytes;
  return tp__json_from_lua_ex(L, idx, &o, err);
}

/* ---- host cost of trees and texts ----------------------------------------------------- */

#define JANSSON_MAX_DEPTH 2048  /* jansson's JSON_PARSER_MAX_DEPTH: parsing stops past it */

size_t tp__json_text_cost (const char *s, size_t n) {
  size_t cost = 0, i = 0;
  int depth = 0;
  if (n <= 64) return n * TP_JSON_COST_OBJECT;  /* a bound of no node per byte costs more */
  while (i < n) {
    unsigned char c = (unsigned char)s[i];
    if (c == '"') {  /* a string or a key: its decoded length is at most its text's */
      size_t j = i + 1;
      for (;;) {
        const char *q = memchr(s + j, '"', n - j);
        if (q == NULL) { j = n; break; }
        j = (size_t)(q - s);
        size_t bs = 0;  /* an even run of backslashes before it: the closing quote */
        while (bs < j - i - 1 && s[j - 1 - bs] == '\\') bs++;
        if (bs % 2 == 0) break;
        j++;
      }
      cost += TP_JSON_COST_STRING + (j - i - 1);
      i = j + 1;
      continue;
    }
    if (c == '[' || c == '{') {
      if (++depth > JANSSON_MAX_DEPTH) break;
      cost += c == '[' ? TP_JSON_COST_ARRAY : TP_JSON_COST_OBJECT;
    }
    else if (c == ']' || c == '}') depth--;
    else if (c == '-' || (c >= '0' && c <= '9')) {
      cost += TP_JSON_COST_NUMBER;
      while (i + 1 < n && (s[i + 1] == '.' || s[i + 1] == 'e' || s[i + 1] == 'E' ||
             s[i + 1] == '+' || s[i + 1] == '-' || (s[i + 1] >= '0' && s[i + 1] <= '9'))) i++;
    }
    else if (c >= 'a' && c <= 'z') {  /* true, false, null (or a syntax error) */
      cost += TP_JSON_COST_SCALAR;
      while (i + 1 < n && s[i + 1] >= 'a' && s[i + 1] <= 'z') i++;
    }
    i++;
  }
  return cost;
}

size_t tp__json_tree_cost (const json_t *v) {
  if (v == NULL) return 0;
  switch (json_typeof(v)) {
    case JSON_INTEGER: case JSON_REAL: return TP_JSON_COST_NUMBER;
    case JSON_STRING: return TP_JSON_COST_STRING + json_string_length(v);
    case JSON_ARRAY: {
      size_t c = TP_JSON_COST_ARRAY, n = json_array_size(v);
      for (size_t i = 0; i < n; i++) c += tp__json_tree_cost(json_array_get(v, i));
      return c;
    }
    case JSON_OBJECT: {
      size_t c = TP_JSON_COST_OBJECT, klen;
      const char *key;
      json_t *child;
      json_object_keylen_foreach((json_t *)v, key, klen, child)
        c += TP_JSON_COST_MEMBER + klen + tp__json_tree_cost(child);
      return c;
    }
    default: return TP_JSON_COST_SCALAR;
  }
}

/* ---- JSON -> Lua --------------------------------------------------------------------- */

static void push_object_mt (lua_State *L) {
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &object_mt_key) == LUA_TTABLE) return;
  lua_pop(L, 1);
  lua_createtable(L, 0, 1);
  lua_pushliteral(L, TP_JSON_OBJECT_TAG);
  lua_setfield(L, -2, "__metatable");
  lua_pushvalue(L, -1);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &object_mt_key);
}

void tp__json_tag_objects (lua_State *L, lua_CFunction len) {
  push_object_mt(L);
  if (len != NULL) {
    lua_pushcfunction(L, len);
    lua_setfield(L, -2, "__len");
  }
  lua_rawsetp(L, LUA_REGISTRYINDEX, &all_objects_key);
}

void tp__json_tag_arrays (lua_State *L, lua_CFunction index) {
  tp__json_push_array_mt(L);
  lua_pushcfunction(L, index);
  lua_setfield(L, -2, "__index");
  lua_pop(L, 1);
}

int tp__json_is_object (lua_State *L, int idx) {
  int r = 0;
  idx = lua_absindex(L, idx);
  if (lua_type(L, idx) != LUA_TTABLE || !lua_checkstack(L, 2)) return 0;
  if (lua_getmetatable(L, idx)) {
    lua_rawgetp(L, LUA_REGISTRYINDEX, &object_mt_key);
    r = lua_rawequal(L, -1, -2);
    lua_pop(L, 2);
  }
  return r;
}

void tp__json_push_array_mt (lua_State *L) {
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &array_mt_key) == LUA_TTABLE) return;
  lua_pop(L, 1);
  lua_createtable(L, 0, 1);
  lua_pushliteral(L, TP_JSON_ARRAY_TAG);
  lua_setfield(L, -2, "__metatable");  /* getmetatable/setmetatable cannot reach it */
  lua_pushvalue(L, -1);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &array_mt_key);
}

int tp__json_is_array (lua_State *L, int idx) {
  int r = 0;
  idx = lua_absindex(L, idx);
  if (lua_type(L, idx) != LUA_TTABLE || !lua_checkstack(L, 2)) return 0;
  if (lua_getmetatable(L, idx)) {
    lua_rawgetp(L, LUA_REGISTRYINDEX, &array_mt_key);
    r = lua_rawequal(L, -1, -2);
    lua_pop(L, 2);
  }
  return r;
}

void tp__json_tags (lua_State *L, const void **array_mt, const void **object_mt) {
  lua_rawgetp(L, LUA_REGISTRYINDEX, &array_mt_key);
  *array_mt = lua_topointer(L, -1);  /* NULL unless a table */
  lua_rawgetp(L, LUA_REGISTRYINDEX, &object_mt_key);
  *object_mt = lua_topointer(L, -1);
  lua_pop(L, 2);
}

int tp__json_push_objects_mt (lua_State *L) {
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &all_objects_key) == LUA_TTABLE) return 1;
  lua_pop(L, 1);
  return 0;
}

void tp__json_push_object_mt (lua_State *L) { push_object_mt(L); }

void tp__json_push_null (lua_State *L) { push_null(L); }

/* What a push needs besides the value. */
typedef struct pusher {
  int max_depth, mt;         /* mt: absolute index of the array metatable's slot */
  int has_mt;                /* the slot holds it (fetched at the first array) */
  int omt;                   /* absolute index of the object metatable, when every object
                             ** is tagged (tp__json_tag_objects); 0: only empty ones */
  const char *prefix;        /* of error messages */
  const tp_json_budget *b;   /* polled every TP_JSON_POLL_NODES containers, or NULL */
  unsigned nodes;
} pusher;

/* Raises "<prefix>nesting deeper...", a memory error, or "<prefix>stopped" when the
** budget's owner has a verdict. Bounded in time by that poll (the verdict of a deadline),
** and in size by the tree, which was charged before it was built. */
static void push_value (lua_State *L, pusher *p, const json_t *v, int depth) {
  switch (json_typeof(v)) {
    case JSON_NULL: push_null(L); return;
    case JSON_TRUE: lua_pushboolean(L, 1); return;
    case JSON_FALSE: lua_pushboolean(L, 0); return;
    case JSON_INTEGER: lua_pushinteger(L, (lua_Integer)json_integer_value(v)); return;
    case JSON_REAL: lua_pushnumber(L, (lua_Number)json_real_value(v)); return;
    case JSON_STRING:
      lua_pushlstring(L, json_string_value(v), json_string_length(v));
      return;
    default: break;
  }
  if (depth >= p->max_depth)
    luaL_error(L, "%snesting deeper than %d levels", p->prefix, p->max_depth);
  luaL_checkstack(L, 3, "JSON value too deep");
  if (p->b != NULL && p->b->stopped != NULL && ++p->nodes % TP_JSON_POLL_NODES == 0 &&
      p->b->stopped(p->b->ud))
    luaL_error(L, "%sstopped: the run has ended (a limit)", p->prefix);
  if (json_is_array(v)) {
    size_t n = json_array_size(v);
    if (!p->has_mt) {
      tp__json_push_array_mt(L);
      lua_replace(L, p->mt);
      p->has_mt = 1;
    }
    lua_createtable(L, n > INT32_MAX ? INT32_MAX : (int)n, 0);
    for (size_t i = 0; i < n; i++) {
      push_value(L, p, json_array_get(v, i), depth + 1);
      lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    lua_pushvalue(L, p->mt);
    lua_setmetatable(L, -2);
  }
  else {
    const char *key;
    size_t klen;
    json_t *child;
    size_t n = json_object_size(v);
    lua_createtable(L, 0, n > INT32_MAX ? INT32_MAX : (int)n);
    json_object_keylen_foreach((json_t *)v, key, klen, child) {
      lua_pushlstring(L, key, klen);
      push_value(L, p, child, depth + 1);
      lua_rawset(L, -3);
    }
    if (p->omt) {  /* every object tagged (a sandbox: #t of an object warns) */
      lua_pushvalue(L, p->omt);
      lua_setmetatable(L, -2);
    }
    else if (n == 0) {  /* {}: tagged, so it stays an object when sent back */
      push_object_mt(L);
      lua_setmetatable(L, -2);
    }
  }
}

static void push_with_prefix (lua_State *L, const json_t *v, int max_depth, const char *prefix,
                              const tp_json_budget *b) {
  pusher p = { max_depth <= 0 ? TP_JSON_MAX_DEPTH : max_depth, 0, 0, 0, prefix, b, 0 };
  if (v == NULL) { push_null(L); return; }
  if (json_is_array(v) || json_is_object(v)) {
    luaL_checkstack(L, 5, "JSON value too deep");
    if (lua_rawgetp(L, LUA_REGISTRYINDEX, &all_objects_key) == LUA_TTABLE)
      p.omt = lua_gettop(L);
    lua_pushnil(L);  /* the array metatable's slot: a tree without arrays never needs it */
    p.mt = lua_gettop(L);
    push_value(L, &p, v, 0);
    lua_replace(L, p.mt);
    lua_replace(L, -2);  /* the object metatable's slot (or nil) */
  }
  else push_value(L, &p, v, 0);
}

void tp__json_push (lua_State *L, const json_t *v, int max_depth) {
  push_with_prefix(L, v, max_depth, "json: ", NULL);
}

/* ---- JSON text ------------------------------------------------------------------------- */

/* A growing text buffer. With a budget, each growth is charged before it is made
** (charged: what this buffer charged, for the refund) and the verdict is polled every
** TP_JSON_POLL_NODES containers; a refusal or a verdict is reported as oom, with
** refused or stopped set. */
typedef struct dbuf {
  char *p;
  size_t len, cap;
  int oom;
  const tp_json_budget *budget;
  size_t charged;
  unsigned nodes;
  int refused, stopped;
  size_t counted;  /* count_only: bytes counted and dropped from p before len */
  int count_only;  /* measure: p is a fixed scratch buffer whose bytes are only counted */
} dbuf;

static int db_grow (dbuf *b, size_t need) {
  if (b->oom) return 0;
  if (b->cap - b->len >= need) return 1;
  if (b->count_only) {  /* count what the scratch holds and start it over */
    b->counted += b->len;
    b->len = 0;
    if (need <= b->cap) return 1;
    b->counted += need;  /* too long for the scratch: counted, not written */
    return 0;
  }
  size_t cap = need <= SIZE_MAX - b->len ? tp__grow_cap(b->cap, b->len + need, 1, 256) : 0;
  if (cap == 0) { b->oom = 1; return 0; }
  if (b->budget != NULL) {
    if (b->budget->charge(b->budget->ud, cap - b->cap) != 0) {
      b->oom = b->refused = 1;
      return 0;
    }
    b->charged += cap - b->cap;
  }
  char *p = realloc(b->p, cap);
  if (p == NULL) { b->oom = 1; return 0; }
  b->p = p; b->cap = cap;
  return 1;
}

/* Polls the verdict every TP_JSON_POLL_NODES containers; 0 when stopped. */
static int db_poll (dbuf *b) {
  if (b->budget == NULL || b->budget->stopped == NULL ||
      ++b->nodes % TP_JSON_POLL_NODES != 0 || !b->budget->stopped(b->budget->ud)) return 1;
  b->oom = b->stopped = 1;
  return 0;
}

static void db_put (dbuf *b, const char *s, size_t n) {
  if (!db_grow(b, n)) return;
  memcpy(b->p + b->len, s, n);
  b->len += n;
}

static void db_putc (dbuf *b, char c) {
  if (b->len < b->cap || db_grow(b, 1)) b->p[b->len++] = c;
}

static void dump_string (dbuf *b, const char *s, size_t len) {
  size_t run = 0;
  db_putc(b, '"');
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c >= 0x20 && c != '"' && c != '\\') continue;
    db_put(b, s + run, i - run);
    run = i + 1;
    char esc[6];
    db_put(b, esc, tp__json_escape(c, esc));
  }
  db_put(b, s + run, len - run);
  db_putc(b, '"');
}

/* The shortest text that reads back to d, always a JSON real (numfmt.c). */
static void dump_real (dbuf *b, double d) {
  char tmp[TP_NUMFMT_MAX];
  db_put(b, tmp, tp__fmt_json_real(d, tmp));
}

typedef struct kv { const char *k; size_t len; json_t *v; } kv;

static int kv_cmp (const void *a, const void *b) {
  const kv *x = a, *y = b;
  size_t n = x->len < y->len ? x->len : y->len;
  int c = memcmp(x->k, y->k, n);
  if (c != 0) return c;
  return (x->len > y->len) - (x->len < y->len);
}

static void dump_value (dbuf *b, const json_t *v) {
  char tmp[32];
  switch (json_typeof(v)) {
    case JSON_NULL: db_put(b, "null", 4); return;
    case JSON_TRUE: db_put(b, "true", 4); return;
    case JSON_FALSE: db_put(b, "false", 5); return;
    case JSON_INTEGER: {  /* by hand: snprintf was a tenth of a small tool call */
      json_int_t x = json_integer_value(v);
      unsigned long long u = x < 0 ? 0ull - (unsigned long long)x : (unsigned long long)x;
      int n = (int)sizeof tmp;
      do { tmp[--n] = (char)('0' + u % 10); u /= 10; } while (u != 0);
      if (x < 0) tmp[--n] = '-';
      db_put(b, tmp + n, sizeof tmp - (size_t)n);
      return;
    }
    case JSON_REAL: dump_real(b, json_real_value(v)); return;
    case JSON_STRING: dump_string(b, json_string_value(v), json_string_length(v)); return;
    case JSON_ARRAY: {
      size_t n = json_array_size(v);
      if (!db_poll(b)) return;
      db_putc(b, '[');
      for (size_t i = 0; i < n && !b->oom; i++) {
        if (i) db_putc(b, ',');
        dump_value(b, json_array_get(v, i));
      }
      db_putc(b, ']');
      return;
    }
    case JSON_OBJECT: {
      kv small[16], *items = small;
      size_t n = json_object_size(v), i = 0;
      const char *key;
      size_t klen;
      json_t *child;
      if (!db_poll(b)) return;
      if (n > 16 && (items = malloc(n * sizeof *items)) == NULL) { b->oom = 1; return; }
      json_object_keylen_foreach((json_t *)v, key, klen, child) {
        if (i < n) items[i++] = (kv){ key, klen, child };
      }
      if (i <= 16) {  /* insertion sort: qsort's setup outweighs a handful of keys */
        for (size_t a = 1; a < i; a++) {
          kv t = items[a];
          size_t z = a;
          for (; z > 0 && kv_cmp(&items[z - 1], &t) > 0; z--) items[z] = items[z - 1];
          items[z] = t;
        }
      }
      else qsort(items, i, sizeof *items, kv_cmp);
      db_putc(b, '{');
      for (size_t j = 0; j < i && !b->oom; j++) {
        if (j) db_putc(b, ',');
        dump_string(b, items[j].k, items[j].len);
        db_putc(b, ':');
        dump_value(b, items[j].v);
      }
      db_putc(b, '}');
      if (items != small) free(items);
      return;
    }
  }
}

/* Dumps into b (which may hold a reusable buffer); 0 when out of memory. */
static int dump_into (dbuf *b, const json_t *v) {
  b->len = 0;
  b->oom = 0;
  if (v == NULL) db_put(b, "null", 4);
  else dump_value(b, v);
  db_putc(b, '\0');
  if (b->oom) return 0;
  b->len--;
  return 1;
}

size_t tp__json_dump_len (const json_t *v) {
  char scratch[256];
  dbuf b;
  memset(&b, 0, sizeof b);
  b.p = scratch;
  b.cap = sizeof scratch;
  b.count_only = 1;
  if (v == NULL) return 4;
  dump_value(&b, v);
  return b.counted + b.len;
}

char *tp__json_dumpsn (const json_t *v, size_t *len) {
  dbuf b = { NULL, 0, 0, 0, NULL, 0, 0, 0, 0, 0, 0 };
  if (!dump_into(&b, v)) { free(b.p); return NULL; }
  if (len) *len = b.len;
  return b.p;
}

char *tp__json_dumps_charged (const json_t *v, const tp_json_budget *budget, size_t *len,
                             size_t *charged, int *refused) {
  dbuf b = { NULL, 0, 0, 0, budget, 0, 0, 0, 0, 0, 0 };
  *charged = 0;
  if (refused) *refused = 0;
  if (!dump_into(&b, v)) {
    free(b.p);
    if (b.charged) budget->refund(budget->ud, b.charged);
    if (refused) *refused = b.refused ? 1 : b.stopped ? 2 : 0;
    return NULL;
  }
  if (len) *len = b.len;
  *charged = b.charged;
  return b.p;
}

size_t tp_number_text (double d, char *buf, size_t len) {
  char tmp[TP_NUMFMT_MAX];
  size_t n = tp__fmt_double(d, tmp);
  if (len > 0) {
    size_t k = n < len - 1 ? n : len - 1;
    memcpy(buf, tmp, k);
    buf[k] = '\0';
  }
  return n;
}

char *tp_json_text (const json_t *v, size_t *len) {
  return tp__json_dumpsn(v, len);
}

json_t *tp_json_parse (const char *text, size_t len, char *why, size_t whylen) {
  tp_json_err err;
  json_t *v = tp__json_loads(text, len, &err);
  if (v == NULL && why != NULL && whylen > 0) snprintf(why, whylen, "%s", err.message);
  return v;
}

char *tp__json_dumps (const json_t *v) {
  return tp__json_dumpsn(v, NULL);
}

/* jansson's message, made valid UTF-8 (its "near '...'" may quote raw bytes) and clearer. */
/* jansson out of memory: it says so, or (when its reader cannot start) leaves the error
** as it was initialized, with no text and no code (which is then not to be read). */
static int loads_oom (const json_error_t *je) {
  return je->text[0] == '\0' || json_error_code(je) == json_error_out_of_memory;
}

static void loads_message (const json_error_t *je, char *out, size_t cap) {
  char text[JSON_ERROR_TEXT_LENGTH + 1];
  if (loads_oom(je)) { snprintf(out, cap, "out of memory"); return; }
  const char *why;
  size_t len = strnlen(je->text, JSON_ERROR_TEXT_LENGTH);
  memcpy(text, je->text, len);
  text[len] = '\0';
  if (tp__utf8_check((const unsigned char *)text, len, &why) != len)
    for (size_t i = 0; i < len; i++) if ((unsigned char)text[i] >= 0x80) text[i] = '?';
  const char *hint = "";
  if (strstr(text, "too big") != NULL)
    hint = " (integers must fit in 64 bits; send larger numbers as strings)";
  else if (strstr(text, "real number overflow") != NULL)
    hint = " (the number is outside the range of a double)";
  else if (strstr(text, "duplicate object key") != NULL)
    hint = " (each key may appear once in an object)";
  else if (strstr(text, "NUL byte in object key") != NULL)
    hint = " (object keys cannot contain \\u0000)";
  snprintf(out, cap, "%s%s at line %d column %d", text, hint, je->line, je->column);
}

/* Feeds jansson the text in pieces, polling the run's verdict between them: parsing stops
** (an error) once the run has one. */
typedef struct feed { const char *p; size_t left; const tp_json_budget *b; int stopped; } feed;

#define FEED_PIECE (64u << 10)  /* jansson parses this in well under a millisecond */

static size_t feed_piece (void *buf, size_t cap, void *ud) {
  feed *f = ud;
  if (f->b->stopped(f->b->ud)) { f->stopped = 1; return (size_t)-1; }
  size_t n = f->left < cap ? f->left : cap;
  if (n > FEED_PIECE) n = FEED_PIECE;
  memcpy(buf, f->p, n);
  f->p += n;
  f->left -= n;
  return n;
}

/* The host itself is out of memory (not the run's budget): the owner records its memory
** verdict (tp_json_budget's note with NULL). */
static void host_oom (const tp_json_budget *b) {
  if (b != NULL && b->note != NULL) b->note(b->ud, NULL);
}

static json_t *loads_plain (const char *text, size_t len, tp_json_err *err, int *oom) {
  json_error_t je;
  if (err) { strcpy(err->path, "$"); err->message[0] = '\0'; }
  if (text == NULL) {
    if (err) strcpy(err->message, "no input text (NULL)");
    return NULL;
  }
  if (len > TP_JSON_DECODE_MAX_BYTES) {
    if (err) snprintf(err->message, sizeof err->message,
                      "input is %zu bytes, over the %u-byte cap; decode smaller pieces",
                      len, (unsigned)TP_JSON_DECODE_MAX_BYTES);
    return NULL;
  }
  /* jansson reports a failed allocation inside its lexer as a syntax error: a text it
  ** refuses is parsed once more, so a passing shortage does not pass for bad JSON */
  json_t *v = NULL;
  for (int attempt = 0; attempt < 2 && v == NULL; attempt++)
    v = json_loadb(text, len, JSON_DECODE_ANY | JSON_ALLOW_NUL | JSON_REJECT_DUPLICATES, &je);
  if (v == NULL && err) loads_message(&je, err->message, sizeof err->message);
  if (v == NULL && oom) *oom = loads_oom(&je);
  return v;
}

json_t *tp__json_loads_polled (const char *text, size_t len, const tp_json_budget *b,
                              tp_json_err *err) {
  int oom = 0;
  if (b == NULL || b->stopped == NULL || text == NULL || len <= FEED_PIECE ||
      len > TP_JSON_DECODE_MAX_BYTES) {
    json_t *v = loads_plain(text, len, err, &oom);
    if (oom) host_oom(b);
    return v;
  }
  json_error_t je;
  feed f = { text, len, b, 0 };
  if (err) { strcpy(err->path, "$"); err->message[0] = '\0'; }
  json_t *v = NULL;
  for (int attempt = 0; attempt < 2 && v == NULL && !f.stopped; attempt++) {  /* as above */
    f.p = text;
    f.left = len;
    v = json_load_callback(feed_piece, &f, JSON_DECODE_ANY | JSON_ALLOW_NUL |
                           JSON_REJECT_DUPLICATES, &je);
  }
  if (v == NULL && err) {
    if (f.stopped) snprintf(err->message, sizeof err->message, "stopped: the run has ended "
                            "(a limit)");
    else loads_message(&je, err->message, sizeof err->message);
  }
  if (v == NULL && !f.stopped && loads_oom(&je)) host_oom(b);
  return v;
}

json_t *tp__json_loads (const char *text, size_t len, tp_json_err *err) {
  return loads_plain(text, len, err, NULL);
}

/* ---- lossy strings for messages and logs ----------------------------------------------- */

json_t *tp__json_string_lossy (const char *s, size_t len, const char *suffix) {
  size_t slen = suffix ? strlen(suffix) : 0;
  if (len > (SIZE_MAX - slen - 1) / 3) return NULL;
  char *out = malloc(len * 3 + slen + 1);
  if (out == NULL) return NULL;
  size_t o = 0, i = 0;
  while (i < len) {
    const char *why;
    size_t good = tp__utf8_check((const unsigned char *)s + i, len - i, &why);
    memcpy(out + o, s + i, good);
    o += good;
    i += good;
    if (i < len) {  /* one bad byte becomes U+FFFD, then go on after it */
      memcpy(out + o, "\xef\xbf\xbd", 3);
      o += 3;
      i++;
    }
  }
  if (slen) { memcpy(out + o, suffix, slen); o += slen; }
  json_t *j = json_stringn_nocheck(out, o);
  free(out);
  return j;
}

/* ---- the sandbox library ---------------------------------------------------------------- */

/*
** A box owns C memory while Lua code that may raise runs: a decode tree while it is being
** pushed, encode's reusable output buffer. Its __gc frees what it holds, so nothing leaks
** when a memory error unwinds past the C function.
*/
typedef struct box {
  json_t *tree;
  char *buf;
  size_t cap;
  const tp_json_budget *budget;  /* the tree's cost is refunded here when it is freed */
  size_t cost;
} box;

/* Frees the tree a box holds and refunds its cost. */
static void box_release (box *b) {
  json_decref(b->tree);
  b->tree = NULL;
  if (b->cost && b->budget) b->budget->refund(b->budget->ud, b->cost);
  b->cost = 0;
}

static int box_gc (lua_State *L) {
  box *b = lua_touserdata(L, 1);
  if (b != NULL) {
    box_release(b);
    free(b->buf);
    b->buf = NULL;
    b->cap = 0;
  }
  return 0;
}

static box *new_box (lua_State *L, int mt) {
  box *b = lua_newuserdatauv(L, sizeof *b, 0);
  b->tree = NULL; b->buf = NULL; b->cap = 0; b->budget = NULL; b->cost = 0;
  lua_pushvalue(L, mt);
  lua_setmetatable(L, -2);
  return b;
}

/* The budget of this state (tp__json_set_budget), or NULL. */
static const tp_json_budget *get_budget (lua_State *L) {
  const tp_json_budget *b = NULL;
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &budget_key) == LUA_TLIGHTUSERDATA)
    b = lua_touserdata(L, -1);
  lua_pop(L, 1);
  return b;
}

/*
** json.encode(v): upvalue 1 is the box holding the reusable output buffer. The tree and
** the text are charged to the state's budget while they exist: the walk and the dump
** poll the run's verdict as they go (bounded in time by it) and stop at the budget
** (bounded in size). The buffer kept between calls (at most 1 MiB) is not charged.
*/
static int l_encode (lua_State *L) {
  tp_json_err err;
  tp_json_opts o;
  luaL_checkany(L, 1);
  memset(&o, 0, sizeof o);
  o.max_depth = TP_JSON_MAX_DEPTH;
  o.max_bytes = TP_JSON_ENCODE_MAX_BYTES;
  o.budget = get_budget(L);
  json_t *v = tp__json_from_lua_ex(L, 1, &o, &err);
  if (v == NULL) return luaL_error(L, "json.encode: %s", err.message);
  box *bx = lua_touserdata(L, lua_upvalueindex(1));
  dbuf b = { bx->buf, 0, bx->cap, 0, o.budget, 0, 0, 0, 0, 0, 0 };
  int ok = dump_into(&b, v);
  json_decref(v);
  if (o.cost) o.budget->refund(o.budget->ud, o.cost);
  if (b.charged) o.budget->refund(o.budget->ud, b.charged);
  bx->buf = b.p;  /* the box owns the buffer before anything can raise */
  bx->cap = b.cap;
  if (!ok) {
    if (b.refused) {
      const char *m = "json.encode: the JSON text needs more host memory than the run's "
                      "memory limit allows; encode less data at once";
      if (o.budget->note) o.budget->note(o.budget->ud, m);
      return luaL_error(L, "%s", m);
    }
    if (b.stopped) return luaL_error(L, "json.encode: stopped: the run has ended (a limit)");
    host_oom(o.budget);
    return luaL_error(L, "json.encode: out of memory");
  }
  lua_pushlstring(L, b.p, b.len);
  if (bx->cap > (1u << 20)) {  /* do not keep a large buffer around */
    free(bx->buf);
    bx->buf = NULL;
    bx->cap = 0;
  }
  return 1;
}

/*
** json.decode(s): upvalue 1 is the box metatable. jansson builds the whole tree before it
** is pushed into Lua, so its cost is estimated from the text first (one O(n) pass) and
** charged before parsing, and refunded when the tree is freed. Bounded in time by the
** verdict: jansson is fed the text in 64 KiB pieces and the verdict is polled between them
** (jansson takes 10 to 150 ms a MiB here, by content), and the push into Lua polls it too.
** Freeing the tree is not polled: it is bounded by the budget (~70 ms for a 64 MiB one).
*/
static int l_decode (lua_State *L) {
  tp_json_err err;
  size_t len;
  if (lua_type(L, 1) != LUA_TSTRING)
    return luaL_error(L, "json.decode: expected a string of JSON text, got %s",
                      luaL_typename(L, 1));
  const char *s = lua_tolstring(L, 1, &len);
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &decode_cap_key) == LUA_TNUMBER) {
    lua_Integer cap = lua_tointeger(L, -1);
    if (cap > 0 && len > (size_t)cap)
      return luaL_error(L, "json.decode: the text is %I bytes, over the %I bytes this sandbox "
                        "decodes at once (1/16 of its memory limit); decode smaller pieces "
                        "or raise the memory limit", (LUAI_UACINT)len, (LUAI_UACINT)cap);
  }
  lua_pop(L, 1);
  const tp_json_budget *budget = get_budget(L);
  box *bx = new_box(L, lua_upvalueindex(1));
  if (budget != NULL) {
    size_t cost = tp__json_text_cost(s, len);
    if (budget->charge(budget->ud, cost) != 0) {
      char m[200];
      snprintf(m, sizeof m, "json.decode: decoding %zu bytes of JSON text would take about "
               "%zu bytes of host memory, more than the run's memory limit allows; decode "
               "smaller pieces", len, cost);
      if (budget->note) budget->note(budget->ud, m);
      return luaL_error(L, "%s", m);
    }
    bx->budget = budget;  /* from here on, the box refunds it (box_gc) */
    bx->cost = cost;
  }
  json_t *v = tp__json_loads_polled(s, len, budget, &err);
  if (v != NULL) {
    bx->tree = v;
    push_with_prefix(L, v, TP_JSON_MAX_DEPTH, "json.decode: ", budget);  /* may raise */
    lua_insert(L, -2);  /* the value below the box */
  }
  box_release(bx);  /* frees the tree and refunds it now, not at the next collection */
  lua_pop(L, 1);
  if (v == NULL) return luaL_error(L, "json.decode: %s", err.message);
  return 1;
}

/* json.array(t?): tags t (or a new table) as a JSON array and returns it. */
static int l_array (lua_State *L) {
  if (lua_isnoneornil(L, 1)) { lua_settop(L, 0); lua_newtable(L); }
  else luaL_checktype(L, 1, LUA_TTABLE);
  lua_settop(L, 1);
  tp__json_push_array_mt(L);
  if (lua_getmetatable(L, 1)) {
    if (!lua_rawequal(L, -1, -2))
      return luaL_error(L, "json.array: the table already has a metatable; pass a plain "
                        "table or copy the items into a new one");
    lua_pop(L, 2);
    return 1;
  }
  lua_setmetatable(L, 1);
  return 1;
}

/* Pushes the box metatable, creating it in the registry if missing. */
static void push_box_mt (lua_State *L) {
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &box_mt_key) != LUA_TTABLE) {
    lua_pop(L, 1);
    lua_createtable(L, 0, 2);
    lua_pushcfunction(L, box_gc);
    lua_setfield(L, -2, "__gc");
    lua_pushliteral(L, "tidepool.json.box");
    lua_setfield(L, -2, "__metatable");
    lua_pushvalue(L, -1);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &box_mt_key);
  }
}

void tp__json_set_budget (lua_State *L, const tp_json_budget *b) {
  if (b == NULL) lua_pushnil(L);
  else lua_pushlightuserdata(L, (void *)b);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &budget_key);
}

void tp__json_set_decode_cap (lua_State *L, size_t bytes) {
  lua_pushinteger(L, (lua_Integer)bytes);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &decode_cap_key);
}

json_t **tp__json_box (lua_State *L) {
  push_box_mt(L);
  box *bx = new_box(L, lua_gettop(L));
  lua_remove(L, -2);
  return &bx->tree;
}

/* ---- json.null in messages ------------------------------------------------------------
** Lua would call json.null "a userdata value" in its errors, which tells a model nothing.
** The metatable below, shared by every light userdata of the state, names it instead:
** each operation a JSON null cannot do raises a message that says json.null, at the
** script's line (luaL_error's level 1 is the code that used the value). __name makes
** argument errors say "got json.null". Equality stays raw: v == json.null.
*/
#define NULL_WHAT "json.null (JSON null)"

static const char *null_key (lua_State *L, int idx) {
  if (lua_type(L, idx) == LUA_TSTRING) return lua_pushfstring(L, "'%s'", lua_tostring(L, idx));
  if (lua_type(L, idx) == LUA_TNUMBER) return lua_pushfstring(L, "%s", lua_tostring(L, idx));
  return luaL_typename(L, idx);
}

static int null_index (lua_State *L) {
  return luaL_error(L, "attempt to index " NULL_WHAT " with key %s", null_key(L, 2));
}
static int null_newindex (lua_State *L) {
  return luaL_error(L, "attempt to set key %s of " NULL_WHAT, null_key(L, 2));
}
static int null_arith (lua_State *L) {
  return luaL_error(L, "attempt to perform arithmetic on " NULL_WHAT);
}
static int null_concat (lua_State *L) {
  return luaL_error(L, "attempt to concatenate " NULL_WHAT);
}
static int null_len (lua_State *L) {
  return luaL_error(L, "attempt to get length of " NULL_WHAT);
}
static int null_call (lua_State *L) {
  return luaL_error(L, "attempt to call " NULL_WHAT);
}
static const char *null_typename (lua_State *L, int idx) {
  return lua_type(L, idx) == LUA_TLIGHTUSERDATA && lua_touserdata(L, idx) == NULL
         ? "json.null" : luaL_typename(L, idx);
}
static int null_compare (lua_State *L) {
  return luaL_error(L, "attempt to compare %s with %s", null_typename(L, 1), null_typename(L, 2));
}
static int null_tostring (lua_State *L) {
  lua_pushliteral(L, "null");
  return 1;
}

static char null_lazy_key;  /* registry: build the metatable when the first null is pushed */

void tp__json_null_meta_lazy (lua_State *L) {
  lua_pushboolean(L, 1);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &null_lazy_key);
}

/* Pushes json.null; in a state that asked for it (tp__json_null_meta_lazy), the first one
** pushed gets its metatable built. May raise (memory). */
static void push_null (lua_State *L) {
  luaL_checkstack(L, 2, NULL);
  lua_pushlightuserdata(L, NULL);
  if (lua_getmetatable(L, -1)) { lua_pop(L, 1); return; }
  int lazy = lua_rawgetp(L, LUA_REGISTRYINDEX, &null_lazy_key) != LUA_TNIL;
  lua_pop(L, 1);
  if (lazy) tp__json_null_meta(L);
}

void tp__json_null_meta (lua_State *L) {
  static const char *const arith[] = { "__add", "__sub", "__mul", "__div", "__mod", "__pow",
    "__unm", "__idiv", "__band", "__bor", "__bxor", "__shl", "__shr", "__bnot" };
  luaL_checkstack(L, 3, NULL);
  lua_pushlightuserdata(L, NULL);
  lua_createtable(L, 0, 24);
  for (size_t i = 0; i < sizeof arith / sizeof arith[0]; i++) {
    lua_pushcfunction(L, null_arith);
    lua_setfield(L, -2, arith[i]);
  }
  static const luaL_Reg fns[] = {
    { "__index", null_index }, { "__newindex", null_newindex }, { "__concat", null_concat },
    { "__len", null_len }, { "__call", null_call }, { "__lt", null_compare },
    { "__le", null_compare }, { "__tostring", null_tostring }, { NULL, NULL } };
  luaL_setfuncs(L, fns, 0);
  lua_pushliteral(L, "json.null");
  lua_setfield(L, -2, "__name");
  lua_pushliteral(L, "json.null");
  lua_setfield(L, -2, "__metatable");
  lua_setmetatable(L, -2);
  lua_pop(L, 1);
}

int tp__json_open (lua_State *L) {
  luaL_checkstack(L, 6, NULL);
  tp__json_push_array_mt(L);
  lua_pop(L, 1);
  push_box_mt(L);
  int mt = lua_gettop(L);
  lua_createtable(L, 0, 4);
  new_box(L, mt);
  lua_pushcclosure(L, l_encode, 1);
  lua_setfield(L, -2, "encode");
  lua_pushvalue(L, mt);
  lua_pushcclosure(L, l_decode, 1);
  lua_setfield(L, -2, "decode");
  lua_pushcfunction(L, l_array);
  lua_setfield(L, -2, "array");
  lua_pushlightuserdata(L, NULL);
  lua_setfield(L, -2, "null");
  lua_remove(L, mt);
  return 1;
}
