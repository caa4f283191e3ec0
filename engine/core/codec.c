/*
** codec.c: a tool call's arguments and answer between Lua values and JSON text without
** a jansson tree (contracts in codec.h). The mapping is json.h's: the encoder follows
** tp__json_from_lua_ex's walk and tp__json_dumpsn's text (sorted keys, exact integers,
** numfmt.c's reals), the decoder tp__json_push of jansson's tree. Where either would say
** something other than "here is the value" (an error, a shape the schema decides), these
** functions decline and the tree path runs.
*/
#include <locale.h>
#include <stddef.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lauxlib.h"

#include "codec.h"
#include "json.h"
#include "numfmt.h"
#include "util.h"

int tp__codec_off;

/* ---- Lua -> text ------------------------------------------------------------------- */

#define ENC_DEPTH   32   /* deeper values (or a cycle) take the tree path */
#define ENC_MEMBERS 32   /* an object with more members takes the tree path */

#define ENC_INLINE 512  /* the text is built here, and copied out once, when it fits */

#define DEC_DEPTH 64
#define DEC_KEYS  64
#define ESC_MAX   256  /* a string with escapes longer than this takes the tree path */

typedef struct enc {
  lua_State *L;
  char *p;                 /* inline, or malloc'd once the text outgrew it */
  size_t len, cap;
  size_t bytes, cost;
  unsigned nodes;
  const void *array_mt, *object_mt;
  int mt_read;
  int top_object;          /* the value at the top is the arguments: an object ({} too) */
  /* what tp__codec_answer_counts would find in the text, in the order the containers
  ** open, while exact: the text is one tp__codec_answer_ok accepts as it is */
  int exact;
  int ncont;
  int counts[TP_CODEC_COUNTS];
  char inline_buf[ENC_INLINE];
} enc;

/* A container opens: its slot in counts (-1 once the text is not exact). */
static int open_count (enc *e) {
  if (!e->exact) return -1;
  if (e->ncont == TP_CODEC_COUNTS) { e->exact = 0; return -1; }
  return e->ncont++;  /* its count is written when the container is done */
}

static int put (enc *e, const char *s, size_t n) {
  if (e->cap - e->len < n) {
    size_t cap = tp__grow_cap(e->cap, e->len + n, 1, 128);
    char *p = cap == 0 ? NULL : e->p == e->inline_buf ? malloc(cap) : realloc(e->p, cap);
    if (p == NULL) return 0;
    if (e->p == e->inline_buf) memcpy(p, e->p, e->len);
    e->p = p;
    e->cap = cap;
  }
  memcpy(e->p + e->len, s, n);
  e->len += n;
  return 1;
}

static int putc1 (enc *e, char c) {
  if (e->len < e->cap) { e->p[e->len++] = c; return 1; }
  return put(e, &c, 1);
}

/* s as json.c's dump_string writes it. The text stays exact (tp__codec_answer_ok would
** take it) unless s is a key with escapes, or a string whose text has escapes and is
** longer than the decoder's buffer (ESC_MAX). */
static int put_string (enc *e, const char *s, size_t len, int key) {
  size_t run = 0, from = e->len;
  int escaped = 0;
  if (!putc1(e, '"')) return 0;
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c >= 0x20 && c != '"' && c != '\\') continue;
    if (!put(e, s + run, i - run)) return 0;
    run = i + 1;
    char esc[6];
    size_t n = tp__json_escape(c, esc);  /* \u00XX for other controls: decoded too */
    escaped = 1;
    if (!put(e, esc, n)) return 0;
  }
  if (!put(e, s + run, len - run) || !putc1(e, '"')) return 0;
  if (escaped && (key || e->len - from - 2 > ESC_MAX)) e->exact = 0;
  return 1;
}

/* Writes s quoted when it is all printable ASCII (no byte to escape or to check as
** UTF-8, no NUL) and fits the buffer: 1. Else writes nothing: 0, for the general path. */
static int put_ascii (enc *e, const char *s, size_t len) {
  if (e->cap - e->len < len + 2) return 0;
  char *o = e->p + e->len;
  o[0] = '"';
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c < 0x20 || c >= 0x7f || c == '"' || c == '\\') return 0;
    o[i + 1] = (char)c;
  }
  o[len + 1] = '"';
  e->len += len + 2;
  return 1;
}

static size_t int_width (lua_Integer i) {
  size_t n = i < 0 ? 2 : 1;
  lua_Unsigned u = i < 0 ? 0u - (lua_Unsigned)i : (lua_Unsigned)i;
  while (u >= 10) { u /= 10; n++; }
  return n;
}

/* A node counted: the walk polls and charges in batches past these, so the fast path
** stays below them (the one charge at its end is then what the walk makes). */
static int count (enc *e, size_t cost) {
  e->cost += cost;
  return ++e->nodes < TP_JSON_POLL_NODES - 1 && e->cost < TP_JSON_CHARGE_BATCH;
}

static int enc_value (enc *e, int idx, int depth);

typedef struct member {   /* 24 bytes: the sort moves them. The text stays far below 4 GiB:
                           ** count() stops the walk past TP_JSON_CHARGE_BATCH of cost */
  const char *k;
  uint32_t klen;
  uint32_t at, end;
  int16_t c0, c1;          /* its containers' slots in counts (read only while exact) */
} member;

static int member_cmp (const member *x, const member *y) {
  size_t n = x->klen < y->klen ? x->klen : y->klen;
  int c = memcmp(x->k, y->k, n);
  return c != 0 ? c : (x->klen > y->klen) - (x->klen < y->klen);
}

/* Writes the members of an object (n of them, at m[], each "key":value written in the
** order lua_next gave) in key order, as dump_value does, with commas; and their
** containers' counts in that order too (first: the slot of the first member's first). */
static int order_members (enc *e, member *m, int n, size_t start, int first) {
  int sorted = 1;
  for (int a = 1; a < n; a++) {  /* insertion sort by key, as dump_value sorts */
    member t = m[a];
    int z = a;
    for (; z > 0 && member_cmp(&m[z - 1], &t) > 0; z--) m[z] = m[z - 1];
    if (z != a) sorted = 0;
    m[z] = t;
  }
  if (sorted) return 1;
  size_t total = e->len - start;
  char small[512], *tmp = total <= sizeof small ? small : malloc(total);
  if (tmp == NULL) return 0;
  memcpy(tmp, e->p + start, total);
  size_t o = start;
  for (int j = 0; j < n; j++) {
    size_t piece = m[j].end - m[j].at;
    if (j) e->p[o++] = ',';
    memcpy(e->p + o, tmp + (m[j].at - start), piece);
    o += piece;
  }
  if (tmp != small) free(tmp);
  if (e->exact && e->ncont > first) {  /* the members' containers move with them */
    int saved[TP_CODEC_COUNTS], w = first;
    memcpy(saved, e->counts + first, (size_t)(e->ncont - first) * sizeof(int));
    for (int j = 0; j < n; j++)
      for (int i = m[j].c0; i < m[j].c1; i++) e->counts[w++] = saved[i - first];
  }
  return 1;
}

static int enc_table (enc *e, int t, int depth) {
  lua_State *L = e->L;
  if (depth >= ENC_DEPTH || !lua_checkstack(L, 4)) return 0;
  int tagged = 0;
  if (lua_getmetatable(L, t)) {
    if (!e->mt_read) {
      tp__json_tags(L, &e->array_mt, &e->object_mt);
      e->mt_read = 1;
    }
    const void *mt = lua_topointer(L, -1);
    lua_pop(L, 1);
    if (e->array_mt != NULL && mt == e->array_mt) tagged = 1;
    if (e->object_mt != NULL && mt == e->object_mt) tagged = -1;
  }
  lua_Unsigned n = lua_rawlen(L, t);
  member m[ENC_MEMBERS];
  int nm = 0, object = 0, slot = -1;
  lua_Unsigned items = 0;
  size_t start = e->len + 1;
  lua_pushnil(L);
  while (lua_next(L, t)) {
    int kt = lua_type(L, -2);
    if (kt == LUA_TSTRING && items == 0 && tagged <= 0) {
      size_t klen;
      const char *k = lua_tolstring(L, -2, &klen);
      const char *why;
      if (!object) {
        object = 1;
        e->bytes += 2;
        slot = open_count(e);
        if (!count(e, TP_JSON_COST_OBJECT) || !putc1(e, '{')) goto no;
      }
      if (nm == ENC_MEMBERS) goto no;
      e->bytes += klen + 4;
      if (!count(e, TP_JSON_COST_MEMBER + klen)) goto no;
      if (nm > 0 && !putc1(e, ',')) goto no;
      m[nm] = (member){ k, (uint32_t)klen, (uint32_t)e->len, 0, (int16_t)e->ncont, 0 };
      if (!put_ascii(e, k, klen) &&
          (tp__utf8_check((const unsigned char *)k, klen, &why) != klen ||
           memchr(k, '\0', klen) != NULL || !put_string(e, k, klen, 1))) goto no;
      if (!putc1(e, ':') || !enc_value(e, lua_gettop(L), depth + 1)) goto no;
      m[nm].c1 = (int16_t)e->ncont;
      m[nm++].end = (uint32_t)e->len;
    }
    else if (kt == LUA_TNUMBER && lua_isinteger(L, -2) && !object) {
      lua_Integer k = lua_tointeger(L, -2);
      if (k < 1 || (lua_Unsigned)k > n) goto no;
      items++;
    }
    else goto no;  /* mixed keys, other keys, a string key in a tagged array */
    lua_pop(L, 1);
  }
  if (object) {
    if (e->exact) e->counts[slot] = nm;
    return order_members(e, m, nm, start, slot + 1) && putc1(e, '}');
  }
  if (n == 0 && tagged <= 0 && depth == 0 && e->top_object) {
    /* the arguments' {}: an object whatever the schema says (the tree path keeps the
    ** top an object too), so there is nothing to decide; tools.x.y{} is common */
    e->bytes += 2;
    slot = open_count(e);
    if (e->exact) e->counts[slot] = 0;
    return count(e, TP_JSON_COST_OBJECT) && put(e, "{}", 2);
  }
  if (items != n || (n == 0 && tagged <= 0)) return 0;  /* holes; {} or [] by the schema */
  e->bytes += 2;
  slot = open_count(e);
  if (e->exact) e->counts[slot] = (int)n;
  if (!count(e, TP_JSON_COST_ARRAY) || !putc1(e, '[')) return 0;
  for (lua_Unsigned i = 1; i <= n; i++) {
    lua_rawgeti(L, t, (lua_Integer)i);
    e->bytes += 1;
    int ok = (i == 1 || putc1(e, ',')) && enc_value(e, lua_gettop(L), depth + 1);
    lua_pop(L, 1);
    if (!ok) return 0;
  }
  return putc1(e, ']');
no:
  lua_pop(L, 2);
  return 0;
}

static int enc_value (enc *e, int idx, int depth) {
  lua_State *L = e->L;
  switch (lua_type(L, idx)) {
    case LUA_TBOOLEAN: {
      int b = lua_toboolean(L, idx);
      e->bytes += b ? 4 : 5;
      return count(e, TP_JSON_COST_SCALAR) && (b ? put(e, "true", 4) : put(e, "false", 5));
    }
    case LUA_TNUMBER: {
      char tmp[TP_NUMFMT_MAX];
      if (!count(e, TP_JSON_COST_NUMBER)) return 0;
      if (lua_isinteger(L, idx)) {
        lua_Integer x = lua_tointeger(L, idx);
        lua_Unsigned u = x < 0 ? 0u - (lua_Unsigned)x : (lua_Unsigned)x;
        int k = (int)sizeof tmp;
        do { tmp[--k] = (char)('0' + u % 10); u /= 10; } while (u != 0);
        if (x < 0) tmp[--k] = '-';
        e->bytes += int_width(x);
        if (sizeof tmp - (size_t)k - (x < 0) > 18) e->exact = 0;  /* the decoder declines */
        return put(e, tmp + k, sizeof tmp - (size_t)k);
      }
      double d = (double)lua_tonumber(L, idx);
      if (!isfinite(d)) return 0;
      e->bytes += 24;
      return put(e, tmp, tp__fmt_json_real(d, tmp));
    }
    case LUA_TSTRING: {
      size_t len;
      const char *s = lua_tolstring(L, idx, &len);
      const char *why;
      e->bytes += len + 2;
      if (!count(e, TP_JSON_COST_STRING + len)) return 0;
      if (put_ascii(e, s, len)) return 1;
      return tp__utf8_check((const unsigned char *)s, len, &why) == len &&
             put_string(e, s, len, 0);
    }
    case LUA_TLIGHTUSERDATA:
      if (lua_touserdata(L, idx) != NULL) return 0;
      e->bytes += 4;
      return count(e, TP_JSON_COST_SCALAR) && put(e, "null", 4);
    case LUA_TTABLE:
      return enc_table(e, idx, depth);
    default:
      return 0;
  }
}

int tp__codec_encode (lua_State *L, int idx, size_t max_bytes, int arrays,
                      tp__codec_text *out) {
  enc e;
  memset(&e, 0, offsetof(enc, counts));
  e.L = L;
  e.p = e.inline_buf;
  e.cap = sizeof e.inline_buf;
  e.exact = 1;
  e.top_object = !arrays;
  idx = lua_absindex(L, idx);
  int top = lua_gettop(L);
  int ok = lua_type(L, idx) == LUA_TTABLE && enc_value(&e, idx, 0) && e.len > 0 &&
           (e.p[0] == '{' || (arrays && e.p[0] == '[')) &&
           (max_bytes == 0 || e.bytes <= max_bytes) && putc1(&e, '\0');
  lua_settop(L, top);
  /* the counts after the text, where keep_text and tp__call_args_text_push read them */
  size_t at = (e.len + sizeof(int) - 1) / sizeof(int) * sizeof(int);
  size_t block = e.exact ? at + (size_t)e.ncont * sizeof(int) : e.len;
  if (ok && e.p == e.inline_buf) {
    char *copy = malloc(block);
    if (copy != NULL) memcpy(copy, e.p, e.len);
    e.p = copy;
    ok = copy != NULL;
  }
  else if (ok && e.exact && block > e.cap) {
    char *p = realloc(e.p, block);
    if (p != NULL) e.p = p;
    else e.exact = 0;
  }
  if (!ok) {
    if (e.p != e.inline_buf) free(e.p);
    return 0;
  }
  out->text = e.p;
  out->len = e.len - 1;
  out->bytes = e.bytes;
  out->cost = e.cost;
  out->ncont = e.exact ? (size_t)e.ncont : 0;
  out->counts = NULL;
  if (e.exact) {
    int *counts = (int *)(void *)(e.p + at);
    for (int i = 0; i < e.ncont; i++) counts[i] = e.counts[i];  /* mostly one or two */
    out->counts = counts;
  }
  return 1;
}

/* ---- the plain schema on the arguments' text ------------------------------------------
** The text is the encoder's own: compact, keys sorted, strings escaped only where
** dump_string escapes, integers exact, reals with '.' or an exponent. */

/* The end of the value at p (a string, a number, a literal, or a container skipped
** whole). */
static const char *skip_value (const char *p, const char *end) {
  int depth = 0;
  do {
    char ch = *p;
    if (ch == '"') {
      for (p++; p < end && *p != '"'; p++) if (*p == '\\') p++;
      p++;
    }
    else if (ch == '{' || ch == '[') { depth++; p++; }
    else if (ch == '}' || ch == ']') { depth--; p++; }
    else if (depth == 0) {  /* a number or a literal */
      while (p < end && *p != ',' && *p != '}' && *p != ']') p++;
    }
    else p++;
  } while (depth > 0 && p < end);
  return p;
}

/* 1 when the value at p..q surely passes property pr's schema. */
static int text_prop_ok (const char *p, const char *q, const tp_schema_simple_prop *pr) {
  if (pr->types == 0 && !pr->has_min && !pr->has_max && pr->min_len < 0 && pr->max_len < 0)
    return 1;
  switch (*p) {
    case 't': case 'f': return pr->types == 0 || (pr->types & TP_ST_BOOL);
    case 'n': return pr->types == 0 || (pr->types & TP_ST_NULL);
    case '"': {
      if (pr->types && !(pr->types & TP_ST_STR)) return 0;
      if (pr->min_len < 0 && pr->max_len < 0) return 1;
      size_t cp = 0;
      for (const char *r = p + 1; r < q - 1; r++) {
        if (*r == '\\') { r += r[1] == 'u' ? 5 : 1; cp++; }
        else cp += ((unsigned char)*r & 0xC0) != 0x80;
      }
      return (pr->min_len < 0 || cp >= (size_t)pr->min_len) &&
             (pr->max_len < 0 || cp <= (size_t)pr->max_len);
    }
    case '{': case '[': return pr->types == 0 && pr->min_len < 0 && pr->max_len < 0;
    default: {  /* a number: an integer of at most 19 digits (the encoder's), or a real */
      int neg = *p == '-', real = 0;
      uint64_t u = 0;
      for (const char *r = p + neg; r < q; r++) {  /* one pass: digits, or '.', 'e', ... */
        unsigned d = (unsigned)(*r - '0');
        if (d < 10) u = u * 10 + d;
        else real = 1;
      }
      if (real)  /* an integral real is an integer to the validator: bounds are left to it */
        return (pr->types == 0 || (pr->types & TP_ST_NUM)) && !pr->has_min && !pr->has_max;
      if (pr->types && !(pr->types & (TP_ST_INT | TP_ST_NUM))) return 0;
      if (q - p - neg > 19 || u > (uint64_t)INT64_MAX + neg) return 0;
      long long x = neg ? (long long)(0 - u) : (long long)u;
      return (!pr->has_min || x >= pr->min) && (!pr->has_max || x <= pr->max);
    }
  }
}

int tp__codec_simple_ok (const char *text, size_t len, const tp_schema_simple *sh) {
  if (sh == NULL || sh->nprops > 64 || len < 2 || text[0] != '{') return 0;
  const char *p = text + 1, *end = text + len;
  uint64_t seen = 0;
  size_t required = 0, from = 0;  /* keys come sorted: a schema listing its properties in
                                  ** that order finds each at the first try from here */
  if (*p == '}') return sh->nrequired == 0;
  for (;;) {
    const char *k = p + 1, *ke = k;
    while (ke < end && *ke != '"' && *ke != '\\') ke++;
    if (ke >= end || *ke != '"') return 0;  /* an escaped key: left to the validator */
    size_t klen = (size_t)(ke - k);
    const char *v = ke + 2, *ve = skip_value(v, end);  /* past '":' */
    const tp_schema_simple_prop *pr = NULL;
    size_t i = from;
    for (size_t n = 0; n < sh->nprops; n++, i = i + 1 == sh->nprops ? 0 : i + 1)
      if (sh->props[i].len == klen && memcmp(sh->props[i].name, k, klen) == 0) {
        pr = &sh->props[i];
        from = i + 1 == sh->nprops ? 0 : i + 1;
        break;
      }
    if (pr == NULL) { if (sh->closed) return 0; }
    else {
      if (!text_prop_ok(v, ve, pr)) return 0;
      if (pr->required) required++;  /* keys are unique: each counted once */
      seen |= (uint64_t)1 << i;
    }
    if (ve >= end) return 0;
    if (*ve == '}') break;
    p = ve + 1;
  }
  (void)seen;
  return required == sh->nrequired;
}

/* ---- text -> Lua --------------------------------------------------------------------- */

static locale_t c_locale (void) {
  static locale_t loc;
  if (loc == (locale_t)0) loc = newlocale(LC_ALL_MASK, "C", (locale_t)0);
  return loc;
}

static const char *skip_ws (const char *p, const char *end) {
  while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) p++;
  return p;
}

/* The code point of the \uXXXX at p ('\\'), or -1 when it is not 4 hex digits. */
static long hex4 (const char *p, const char *end) {
  if (end - p < 6) return -1;
  long v = 0;
  for (int i = 2; i < 6; i++) {
    char c = p[i];
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
          : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

/* The \u escape at p: its length (6, or 12 for a surrogate pair), its code point in *cp;
** 0 when jansson would refuse it (a lone or reversed surrogate, not hex). \u0000 is
** taken: the tree path loads with JSON_ALLOW_NUL. */
static int u_escape (const char *p, const char *end, long *cp) {
  long hi = hex4(p, end);
  if (hi < 0 || (hi >= 0xDC00 && hi <= 0xDFFF)) return 0;
  if (hi < 0xD800 || hi > 0xDBFF) { *cp = hi; return 6; }
  if (end - p < 12 || p[6] != '\\' || p[7] != 'u') return 0;
  long lo = hex4(p + 6, end);
  if (lo < 0xDC00 || lo > 0xDFFF) return 0;
  *cp = 0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00);
  return 12;
}

/* A string at p ('"'): its end past the closing quote, or NULL when the fast path
** declines it (an escape jansson refuses, control bytes, invalid UTF-8, unterminated).
** *plain: no escapes at all. */
static const char *scan_string (const char *p, const char *end, int *plain) {
  const char *s = ++p;
  *plain = 1;
  while (p < end) {
    unsigned char c = (unsigned char)*p;
    if (c == '"') {
      const char *why;
      size_t n = (size_t)(p - s);
      if (!*plain && n > ESC_MAX) return NULL;
      if (tp__utf8_check((const unsigned char *)s, n, &why) != n) return NULL;
      return p + 1;
    }
    if (c < 0x20) return NULL;
    if (c == '\\') {
      if (p + 1 >= end) return NULL;
      char x = p[1];
      *plain = 0;
      if (x == 'u') {
        long cp;
        int n = u_escape(p, end, &cp);
        if (n == 0) return NULL;
        p += n;
        continue;
      }
      if (!(x == '"' || x == '\\' || x == '/' || x == 'b' || x == 'f' || x == 'n' ||
            x == 'r' || x == 't')) return NULL;
      p += 2;
      continue;
    }
    p++;
  }
  return NULL;
}

/* A number at p: its end, *real set when it has a fraction or an exponent; NULL when
** declined (not JSON's grammar, more than 18 integer digits, a real out of range). */
static const char *scan_number (const char *p, const char *end, int *real) {
  const char *s = p;
  *real = 0;
  if (p < end && *p == '-') p++;
  if (p >= end || *p < '0' || *p > '9') return NULL;
  if (*p == '0') p++;
  else while (p < end && *p >= '0' && *p <= '9') p++;
  if (p < end && *p == '.') {
    *real = 1;
    if (++p >= end || *p < '0' || *p > '9') return NULL;
    while (p < end && *p >= '0' && *p <= '9') p++;
  }
  if (p < end && (*p == 'e' || *p == 'E')) {
    *real = 1;
    p++;
    if (p < end && (*p == '+' || *p == '-')) p++;
    if (p >= end || *p < '0' || *p > '9') return NULL;
    while (p < end && *p >= '0' && *p <= '9') p++;
  }
  if (!*real) return (size_t)(p - s) - (*s == '-') <= 18 ? p : NULL;
  char tmp[64];
  size_t n = (size_t)(p - s);
  if (n >= sizeof tmp || c_locale() == (locale_t)0) return NULL;
  memcpy(tmp, s, n);
  tmp[n] = '\0';
  double d = strtod_l(tmp, NULL, c_locale());
  return isfinite(d) ? p : NULL;
}

typedef struct span { const char *k; size_t n; } span;

typedef struct chk { const char *end; size_t ncont; } chk;

static const char *chk_value (chk *c, const char *p, int depth);

static const char *chk_container (chk *c, const char *p, int depth) {
  char close = *p == '{' ? '}' : ']';
  int object = *p == '{';
  span keys[DEC_KEYS];
  int nk = 0;
  if (depth >= DEC_DEPTH) return NULL;
  c->ncont++;
  p = skip_ws(p + 1, c->end);
  if (p < c->end && *p == close) return p + 1;
  for (;;) {
    if (object) {
      int plain;
      if (p >= c->end || *p != '"' || nk == DEC_KEYS) return NULL;
      const char *q = scan_string(p, c->end, &plain);
      if (q == NULL || !plain) return NULL;
      span k = { p + 1, (size_t)(q - p - 2) };
      for (int i = 0; i < nk; i++)  /* jansson refuses duplicate keys: it says so */
        if (keys[i].n == k.n && memcmp(keys[i].k, k.k, k.n) == 0) return NULL;
      keys[nk++] = k;
      p = skip_ws(q, c->end);
      if (p >= c->end || *p != ':') return NULL;
      p = skip_ws(p + 1, c->end);
    }
    p = chk_value(c, p, depth + 1);
    if (p == NULL) return NULL;
    p = skip_ws(p, c->end);
    if (p >= c->end) return NULL;
    if (*p == close) return p + 1;
    if (*p != ',') return NULL;
    p = skip_ws(p + 1, c->end);
  }
}

static const char *chk_value (chk *c, const char *p, int depth) {
  if (p >= c->end) return NULL;
  switch (*p) {
    case '{': case '[': return chk_container(c, p, depth);
    case '"': { int plain; return scan_string(p, c->end, &plain); }
    case 't': return c->end - p >= 4 && memcmp(p, "true", 4) == 0 ? p + 4 : NULL;
    case 'f': return c->end - p >= 5 && memcmp(p, "false", 5) == 0 ? p + 5 : NULL;
    case 'n': return c->end - p >= 4 && memcmp(p, "null", 4) == 0 ? p + 4 : NULL;
    default: { int real; return scan_number(p, c->end, &real); }
  }
}

size_t tp__codec_answer_ok (const char *s, size_t len) {
  chk c = { s + len, 0 };
  const char *p = skip_ws(s, c.end);
  if (p >= c.end || (*p != '{' && *p != '[')) return 0;
  p = chk_value(&c, p, 0);
  if (p == NULL || skip_ws(p, c.end) != c.end) return 0;
  return c.ncont;
}

typedef struct dec {
  lua_State *L;
  const char *end;
  const int *counts; /* items or members of each container, in the order they open */
  size_t next;
  int amt, has_amt;  /* the slot of the array metatable; it holds it */
  int omt;           /* the slot of the metatable of every object, or 0 */
} dec;

/* The sizes of the containers, in the order they open: what jansson's tree tells
** tp__json_push, so the tables are made the same size. */
void tp__codec_answer_counts (const char *p, size_t len, int *counts) {
  const char *end = p + len;
  size_t stack[DEC_DEPTH + 1], sp = 0, next = 0;
  while (p < end) {
    char ch = *p;
    if (ch == '"') {
      for (p++; *p != '"'; p++) if (*p == '\\') p++;
      p++;
      continue;
    }
    if (ch == '{' || ch == '[') {
      const char *q = skip_ws(p + 1, end);
      stack[sp++] = next;
      counts[next++] = *q == '}' || *q == ']' ? 0 : 1;
    }
    else if (ch == '}' || ch == ']') sp--;
    else if (ch == ',') counts[stack[sp - 1]]++;
    p++;
  }
}

static const char *push_string (dec *d, const char *p) {
  const char *s = p + 1, *q = s;
  int escaped = 0;
  while (*q != '"') { if (*q == '\\') { escaped = 1; q++; } q++; }
  if (!escaped) { lua_pushlstring(d->L, s, (size_t)(q - s)); return q + 1; }
  char buf[ESC_MAX];  /* pushed from C memory as jansson's string is: the same Lua allocations;
                      ** what an escape stands for is never longer than the escape */
  size_t n = 0;
  for (const char *r = s; r < q; r++) {
    char ch = *r;
    if (ch == '\\' && r[1] == 'u') {  /* checked by scan_string: to UTF-8 */
      long cp = 0;
      int len = u_escape(r, q, &cp);
      r += len - 1;
      if (cp < 0x80) buf[n++] = (char)cp;
      else if (cp < 0x800) {
        buf[n++] = (char)(0xC0 | (cp >> 6));
        buf[n++] = (char)(0x80 | (cp & 0x3F));
      }
      else if (cp < 0x10000) {
        buf[n++] = (char)(0xE0 | (cp >> 12));
        buf[n++] = (char)(0x80 | ((cp >> 6) & 0x3F));
        buf[n++] = (char)(0x80 | (cp & 0x3F));
      }
      else {
        buf[n++] = (char)(0xF0 | (cp >> 18));
        buf[n++] = (char)(0x80 | ((cp >> 12) & 0x3F));
        buf[n++] = (char)(0x80 | ((cp >> 6) & 0x3F));
        buf[n++] = (char)(0x80 | (cp & 0x3F));
      }
      continue;
    }
    if (ch == '\\') {
      ch = *++r;
      ch = ch == 'b' ? '\b' : ch == 'f' ? '\f' : ch == 'n' ? '\n' : ch == 'r' ? '\r' :
           ch == 't' ? '\t' : ch;
    }
    buf[n++] = ch;
  }
  lua_pushlstring(d->L, buf, n);
  return q + 1;
}

static const char *dec_value (dec *d, const char *p);

static const char *dec_container (dec *d, const char *p) {
  lua_State *L = d->L;
  int n = d->counts[d->next++];
  luaL_checkstack(L, 3, "JSON value too deep");
  if (*p == '[') {
    lua_createtable(L, n, 0);
    p = skip_ws(p + 1, d->end);
    for (int i = 1; i <= n; i++) {
      p = skip_ws(dec_value(d, p), d->end);
      lua_rawseti(L, -2, i);
      p = skip_ws(p + 1, d->end);  /* past ',' or ']' */
    }
    if (n == 0) p = skip_ws(p + 1, d->end);
    if (!d->has_amt) {  /* fetched at the first array: a text without arrays never needs it */
      tp__json_push_array_mt(L);
      lua_replace(L, d->amt);
      d->has_amt = 1;
    }
    lua_pushvalue(L, d->amt);
    lua_setmetatable(L, -2);
    return p;
  }
  lua_createtable(L, 0, n);
  p = skip_ws(p + 1, d->end);
  for (int i = 0; i < n; i++) {
    p = push_string(d, p);
    p = skip_ws(skip_ws(p, d->end) + 1, d->end);  /* past ':' */
    p = skip_ws(dec_value(d, p), d->end);
    lua_rawset(L, -3);
    p = skip_ws(p + 1, d->end);  /* past ',' or '}' */
  }
  if (n == 0) p = skip_ws(p + 1, d->end);
  if (d->omt) {
    lua_pushvalue(L, d->omt);
    lua_setmetatable(L, -2);
  }
  else if (n == 0) {
    tp__json_push_object_mt(L);
    lua_setmetatable(L, -2);
  }
  return p;
}

static const char *dec_value (dec *d, const char *p) {
  lua_State *L = d->L;
  switch (*p) {
    case '{': case '[': return dec_container(d, p);
    case '"': return push_string(d, p);
    case 't': lua_pushboolean(L, 1); return p + 4;
    case 'f': lua_pushboolean(L, 0); return p + 5;
    case 'n': tp__json_push_null(L); return p + 4;
    default: {
      int real;
      const char *q = scan_number(p, d->end, &real);
      if (real) {
        char tmp[64];
        memcpy(tmp, p, (size_t)(q - p));
        tmp[q - p] = '\0';
        lua_pushnumber(L, (lua_Number)strtod_l(tmp, NULL, c_locale()));
      }
      else {
        const char *r = p;
        int neg = *r == '-';
        lua_Unsigned u = 0;
        for (r += neg; r < q; r++) u = u * 10 + (lua_Unsigned)(*r - '0');
        lua_pushinteger(L, neg ? (lua_Integer)(0u - u) : (lua_Integer)u);
      }
      return q;
    }
  }
}

void tp__codec_push (lua_State *L, const char *s, size_t len, const int *counts, int omt) {
  const char *end = s + len;
  luaL_checkstack(L, 5, "JSON value too deep");
  int base = lua_gettop(L);
  dec d = { L, end, counts, 0, 0, 0, 0 };
  if (omt != 0) {
    if (lua_type(L, omt) == LUA_TTABLE) d.omt = omt;
  }
  else if (tp__json_push_objects_mt(L)) d.omt = lua_gettop(L);
  lua_pushnil(L);
  d.amt = lua_gettop(L);
  dec_value(&d, skip_ws(s, end));
  lua_replace(L, base + 1);  /* the value, over the slots this push made */
  lua_settop(L, base + 1);
}
