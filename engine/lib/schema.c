/*
** schema.c: the JSON Schema validator. Compilation turns a schema document into a graph
** of nodes (one per schema object, keywords held as typed fields and arrays); "$ref"s are
** collected while compiling and resolved afterwards against a registry of resources
** ($id), anchors and JSON pointers, loading remote documents from remotes_dir only.
** Validation walks the node graph; it allocates only to report errors, to track
** annotations for unevaluated* and to build propertyNames strings.
*/
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "util.h"
#include "schema.h"

/* Validation recursion cap: several schema levels may apply at one instance level. */
#define VDEPTH (4 * TP_SCHEMA_MAX_DEPTH)
#define DEFAULT_BASE "tidepool://local/root.json"
#define REMOTE_PREFIX "http://localhost:1234/"

enum { T_NULL = 1, T_BOOL = 2, T_INT = 4, T_NUM = 8, T_STR = 16, T_ARR = 32, T_OBJ = 64 };

typedef struct node node;
typedef struct resource resource;

typedef struct { const char *name; node *n; } named;
typedef struct { pcre2_code *re; const char *src; node *n; } patnode;
typedef struct { const char *name; const char **req; size_t n; } depreq;

/* A schema resource: the document root or a subschema with an "$id". */
struct resource {
  char *uri;            /* absolute, without fragment */
  json_t *root;         /* JSON of the resource root (in a document the schema owns) */
  node *node;           /* compiled root */
  int dialect;
  int novalid;          /* its metaschema leaves out the validation vocabulary */
  named *dyn;           /* $dynamicAnchor name -> node */
  size_t ndyn;
  resource *next;
};

/* One compiled schema (object or boolean). Absent keywords are NULL / 0 / -1. */
struct node {
  signed char boolv;    /* -1 object schema, 0 false, 1 true */
  unsigned char fmt_assert, unique, has_max_contains;
  unsigned types;       /* T_* mask; 0 when "type" is absent */
  const resource *res;
  const json_t *multipleOf, *maximum, *minimum, *xmax, *xmin, *enum_, *const_;
  long long maxLength, minLength, maxItems, minItems, maxProps, minProps;
  long long minContains, maxContains;
  pcre2_code *pattern;
  const char *pattern_src, *format;
  node **prefix;        /* prefixItems, or draft-07 array-form items */
  size_t nprefix;
  const char *prefix_kw;
  node *items;          /* items after the prefix (draft-07: additionalItems after an array) */
  const char *items_kw;
  node *contains;
  named *props;         /* sorted by name */
  size_t nprops;
  patnode *pprops;
  size_t npprops;
  node *addprops, *propnames;
  const char **required;
  size_t nrequired;
  depreq *depreq;
  size_t ndepreq;
  named *depschemas;
  size_t ndepschemas;
  const char *depreq_kw, *depschema_kw;  /* draft-07: both "dependencies" */
  node **allOf, **anyOf, **oneOf;
  size_t nall, nany, none;
  node *not_, *if_, *then_, *else_;
  node *ref, *dynref;
  const char *dyn_name; /* set when the $dynamicRef resolves dynamically */
  node *uneval_props, *uneval_items;
  node *next_alloc;
};

typedef struct mcache {
  atomic_flag busy;
  pcre2_match_data *md;
} mcache;

struct tp_schema {
  node *root;
  int dialect;
  node *nodes;
  resource *resources;
  json_t **docs;
  size_t ndocs;
  pcre2_match_context *mctx;
  mcache *mc;
  int npatterns;
  tp_schema_simple *simple;  /* the root's plain shape, or NULL */
};

/* ---- small utilities ------------------------------------------------------------- */

static char *xstrndup (const char *s, size_t n) {
  char *r = malloc(n + 1);
  if (r) { memcpy(r, s, n); r[n] = 0; }
  return r;
}

static char *xstrdup (const char *s) { return xstrndup(s, strlen(s)); }


/* string-keyed open-addressing map (compile time only) */
typedef struct { char *key; void *val; } slot;
typedef struct { slot *v; size_t n, cap; } map;

static size_t hstr (const char *s) {
  size_t h = 1469598103934665603u;
  while (*s) h = (h ^ (unsigned char)*s++) * 1099511628211u;
  return h;
}

static void *map_get (const map *m, const char *k) {
  if (!m->cap) return NULL;
  for (size_t i = hstr(k) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
    if (!m->v[i].key) return NULL;
    if (strcmp(m->v[i].key, k) == 0) return m->v[i].val;
  }
}

/* keeps the first value put under a key; -1 out of memory */
static int map_put (map *m, const char *k, void *val) {
  if ((m->n + 1) * 2 > m->cap) {
    size_t nc = tp__grow_cap(m->cap, m->cap + 1, sizeof(slot), 64);
    slot *nv = nc ? calloc(nc, sizeof *nv) : NULL;
    if (!nv) return -1;
    for (size_t i = 0; i < m->cap; i++) {
      if (!m->v[i].key) continue;
      size_t j = hstr(m->v[i].key) & (nc - 1);
      while (nv[j].key) j = (j + 1) & (nc - 1);
      nv[j] = m->v[i];
    }
    free(m->v);
    m->v = nv;
    m->cap = nc;
  }
  size_t i = hstr(k) & (m->cap - 1);
  for (; m->v[i].key; i = (i + 1) & (m->cap - 1))
    if (strcmp(m->v[i].key, k) == 0) return 0;
  if (!(m->v[i].key = xstrdup(k))) return -1;
  m->v[i].val = val;
  m->n++;
  return 0;
}

static void map_free (map *m) {
  for (size_t i = 0; i < m->cap; i++) free(m->v[i].key);
  free(m->v);
  memset(m, 0, sizeof *m);
}

static void ptrkey (char *buf, size_t n, const void *p) { snprintf(buf, n, "%p", p); }

/* ---- URIs (RFC 3986 reference resolution) ------------------------------------------ */

typedef struct {
  const char *scheme, *auth, *path, *query, *frag;
  size_t sl, al, pl, ql, fl;
  int has_scheme, has_auth, has_query, has_frag;
} uparts;

static void uparse (const char *u, uparts *p) {
  memset(p, 0, sizeof *p);
  const char *s = u;
  const char *c = s;
  while (*c && *c != ':' && *c != '/' && *c != '?' && *c != '#') c++;
  if (*c == ':' && c > s) {
    p->has_scheme = 1;
    p->scheme = s;
    p->sl = (size_t)(c - s);
    s = c + 1;
  }
  if (s[0] == '/' && s[1] == '/') {
    s += 2;
    p->has_auth = 1;
    p->auth = s;
    while (*s && *s != '/' && *s != '?' && *s != '#') s++;
    p->al = (size_t)(s - p->auth);
  }
  p->path = s;
  while (*s && *s != '?' && *s != '#') s++;
  p->pl = (size_t)(s - p->path);
  if (*s == '?') {
    p->has_query = 1;
    p->query = ++s;
    while (*s && *s != '#') s++;
    p->ql = (size_t)(s - p->query);
  }
  if (*s == '#') {
    p->has_frag = 1;
    p->frag = s + 1;
    p->fl = strlen(p->frag);
  }
}

/* RFC 3986 5.2.4, in place (the output never overtakes the input) */
static void remove_dots (char *path) {
  char *in = path, *out = path;
  while (*in) {
    if (strncmp(in, "../", 3) == 0) in += 3;
    else if (strncmp(in, "./", 2) == 0) in += 2;
    else if (strncmp(in, "/./", 3) == 0) in += 2;
    else if (strcmp(in, "/.") == 0) { in[1] = '/'; in += 1; in[1] = 0; }
    else if (strncmp(in, "/../", 4) == 0 || strcmp(in, "/..") == 0) {
      if (in[3] == 0) { in[2] = '/'; in += 2; in[1] = 0; }
      else in += 3;
      while (out > path && *--out != '/') {}
    } else if (strcmp(in, ".") == 0 || strcmp(in, "..") == 0) {
      break;
    } else {
      do { *out++ = *in++; } while (*in && *in != '/');
    }
  }
  *out = 0;
}

/* resolve ref against base; NULL out of memory. An empty trailing fragment is dropped. */
static char *uresolve (const char *base, const char *ref) {
  uparts b, r;
  uparse(base, &b);
  uparse(ref, &r);
  size_t cap = strlen(base) + strlen(ref) + 8;
  char *path = malloc(cap), *out = malloc(cap);
  if (!path || !out) { free(path); free(out); return NULL; }
  const uparts *sch = r.has_scheme ? &r : &b;
  const uparts *auth, *query;
  if (r.has_scheme || r.has_auth) {
    auth = &r;
    query = &r;
    memcpy(path, r.path, r.pl);
    path[r.pl] = 0;
  } else {
    auth = &b;
    if (r.pl == 0) {
      memcpy(path, b.path, b.pl);
      path[b.pl] = 0;
      query = r.has_query ? &r : &b;
    } else {
      query = &r;
      if (r.path[0] == '/') {
        memcpy(path, r.path, r.pl);
        path[r.pl] = 0;
      } else {
        size_t keep = 0;
        if (b.has_auth && b.pl == 0) {
          path[0] = '/';
          keep = 1;
        } else {
          for (size_t i = b.pl; i > 0; i--)
            if (b.path[i - 1] == '/') { keep = i; break; }
          memcpy(path, b.path, keep);
        }
        memcpy(path + keep, r.path, r.pl);
        path[keep + r.pl] = 0;
      }
    }
  }
  remove_dots(path);
  size_t n = 0;
  if (sch->has_scheme) { memcpy(out, sch->scheme, sch->sl); n = sch->sl; out[n++] = ':'; }
  if (auth->has_auth) { out[n++] = '/'; out[n++] = '/'; memcpy(out + n, auth->auth, auth->al); n += auth->al; }
  size_t plen = strlen(path);
  memcpy(out + n, path, plen);
  n += plen;
  if (query->has_query) { out[n++] = '?'; memcpy(out + n, query->query, query->ql); n += query->ql; }
  if (r.has_frag && r.fl) { out[n++] = '#'; memcpy(out + n, r.frag, r.fl); n += r.fl; }
  out[n] = 0;
  free(path);
  return out;
}

static int hexv (char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* percent-decode in place */
static void pdecode (char *s) {
  char *o = s;
  for (; *s; s++) {
    if (*s == '%' && hexv(s[1]) >= 0 && hexv(s[2]) >= 0) {
      *o++ = (char)(hexv(s[1]) * 16 + hexv(s[2]));
      s += 2;
    } else {
      *o++ = *s;
    }
  }
  *o = 0;
}

/* ---- compilation ------------------------------------------------------------------- */

typedef struct pending { node *n; char *uri; char *loc; int dynamic; } pending;

typedef struct cc {
  tp_schema *s;
  char *err;
  size_t errlen;
  int failed;
  char loc[512];
  size_t loclen;
  const char *remotes_dir;
  int formats_assert;
  int novalid;
  int depth;
  map res;              /* uri -> resource */
  map anchors;          /* uri#name -> node */
  map ptrs;             /* json_t* -> node */
  pending *refs;
  size_t nrefs, crefs;
} cc;

static void cerr (cc *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void cerr (cc *c, const char *fmt, ...) {
  if (c->failed) return;
  c->failed = 1;
  if (!c->err || !c->errlen) return;
  char msg[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (c->loclen > 160)  /* keep the message: shorten the location from its start */
    snprintf(c->err, c->errlen, "at #...%s: %s", c->loc + c->loclen - 157, msg);
  else
    snprintf(c->err, c->errlen, "at #%s: %s", c->loc, msg);
}

static void oom (cc *c) { cerr(c, "out of memory"); }

/* push a JSON-pointer segment onto the schema location; returns the old length */
static size_t lpush (cc *c, const char *seg) {
  size_t old = c->loclen;
  size_t n = c->loclen;
  if (n + 2 < sizeof c->loc) c->loc[n++] = '/';
  for (; *seg && n + 3 < sizeof c->loc; seg++) {
    if (*seg == '~') { c->loc[n++] = '~'; c->loc[n++] = '0'; }
    else if (*seg == '/') { c->loc[n++] = '~'; c->loc[n++] = '1'; }
    else c->loc[n++] = *seg;
  }
  c->loc[n] = 0;
  c->loclen = n;
  return old;
}

static size_t lpushi (cc *c, size_t i) {
  char b[32];
  snprintf(b, sizeof b, "%zu", i);
  return lpush(c, b);
}

static void lpop (cc *c, size_t old) { c->loclen = old; c->loc[old] = 0; }

static resource *new_resource (cc *c, const char *uri, json_t *root, int dialect) {
  resource *r = calloc(1, sizeof *r);
  if (!r || !(r->uri = xstrdup(uri))) { free(r); oom(c); return NULL; }
  r->root = root;
  r->dialect = dialect;
  r->next = c->s->resources;
  c->s->resources = r;
  if (map_put(&c->res, uri, r) < 0) { oom(c); return NULL; }
  return r;
}

static json_t *fetch_doc (const char *remotes_dir, const char *uri);

/* 0 when "$schema" names a metaschema whose $vocabulary leaves out validation */
static int vocab_validation (const cc *c, const json_t *js) {
  const char *sc = json_string_value(json_object_get(js, "$schema"));
  if (!sc || strstr(sc, "json-schema.org/")) return 1;
  char *u = xstrdup(sc);
  if (!u) return 1;
  char *h = strchr(u, '#');
  if (h) *h = 0;
  json_t *meta = fetch_doc(c->remotes_dir, u);
  free(u);
  json_t *voc = json_object_get(meta, "$vocabulary");
  int r = !json_is_object(voc) || json_object_get(voc, "https://json-schema.org/draft/2020-12/vocab/validation");
  json_decref(meta);
  return r;
}

static int dialect_of (const json_t *js, int dflt) {
  const char *sc = json_string_value(json_object_get(js, "$schema"));
  if (!sc) return dflt;
  if (strstr(sc, "json-schema.org/draft-07/") || strstr(sc, "json-schema.org/draft-06/") ||
      strstr(sc, "json-schema.org/draft-04/"))
    return TP_DIALECT_DRAFT7;
  if (strstr(sc, "json-schema.org/draft/2020-12/") || strstr(sc, "json-schema.org/draft/2019-09/"))
    return TP_DIALECT_2020_12;
  return dflt;
}

static node *compile (cc *c, json_t *js, resource *res, int dialect, int is_root);

static node *new_node (cc *c, const resource *res) {
  node *n = calloc(1, sizeof *n);
  if (!n) { oom(c); return NULL; }
  n->boolv = -1;
  n->res = res;
  n->maxLength = n->minLength = n->maxItems = n->minItems = -1;
  n->maxProps = n->minProps = n->minContains = n->maxContains = -1;
  n->next_alloc = c->s->nodes;
  c->s->nodes = n;
  return n;
}

/* a subschema under key (and index idx >= 0 inside an array value) */
static node *sub (cc *c, json_t *js, const char *key, resource *res, int dialect) {
  size_t old = lpush(c, key);
  node *n = compile(c, js, res, dialect, 0);
  lpop(c, old);
  return n;
}

/* a validation-vocabulary keyword, NULL when that vocabulary is off */
static json_t *vget (const cc *c, json_t *js, const char *key) {
  return c->novalid ? NULL : json_object_get(js, key);
}

static int get_count (cc *c, json_t *js, const char *key, long long *out) {
  json_t *v = vget(c, js, key);
  if (!v) return 0;
  size_t old = lpush(c, key);
  long long r = -1;
  if (json_is_integer(v) && json_integer_value(v) >= 0) {
    r = json_integer_value(v);
  } else if (json_is_real(v)) {
    double d = json_real_value(v);
    if (d >= 0 && d == floor(d) && d < 9.2e18) r = (long long)d;
  }
  if (r < 0) cerr(c, "expected a non-negative integer");
  lpop(c, old);
  *out = r;
  return r < 0 ? -1 : 0;
}

static const json_t *get_number (cc *c, json_t *js, const char *key) {
  json_t *v = vget(c, js, key);
  if (!v) return NULL;
  if (!json_is_number(v)) {
    size_t old = lpush(c, key);
    cerr(c, "expected a number");
    lpop(c, old);
    return NULL;
  }
  return v;
}

static node **sub_array (cc *c, json_t *js, const char *key, resource *res, int dialect, size_t *count) {
  json_t *a = json_object_get(js, key);
  *count = 0;
  if (!a) return NULL;
  size_t old = lpush(c, key);
  node **v = NULL;
  if (!json_is_array(a) || json_array_size(a) == 0) {
    cerr(c, "expected a non-empty array of schemas");
  } else if (!(v = calloc(json_array_size(a), sizeof *v))) {
    oom(c);
  } else {
    for (size_t i = 0; i < json_array_size(a) && !c->failed; i++) {
      size_t o2 = lpushi(c, i);
      v[i] = compile(c, json_array_get(a, i), res, dialect, 0);
      lpop(c, o2);
    }
    *count = json_array_size(a);
  }
  lpop(c, old);
  return v;
}

static int add_ref (cc *c, node *n, resource *res, const char *ref, int dynamic) {
  if (tp__grow(&c->refs, &c->crefs, c->nrefs + 1, sizeof *c->refs, 8) < 0) { oom(c); return -1; }
  pending *p = &c->refs[c->nrefs];
  p->n = n;
  p->dynamic = dynamic;
  p->uri = uresolve(res->uri, ref);
  p->loc = xstrdup(c->loc);
  if (!p->uri || !p->loc) { free(p->uri); free(p->loc); oom(c); return -1; }
  c->nrefs++;
  return 0;
}

static int add_anchor (cc *c, resource *res, const char *name, node *n) {
  size_t ul = strlen(res->uri), nl = strlen(name);
  char *k = malloc(ul + nl + 2);
  if (!k) { oom(c); return -1; }
  memcpy(k, res->uri, ul);
  k[ul] = '#';
  memcpy(k + ul + 1, name, nl + 1);
  int r = map_put(&c->anchors, k, n);
  free(k);
  if (r < 0) oom(c);
  return r;
}

static int name_cmp (const void *a, const void *b) {
  return strcmp(((const named *)a)->name, ((const named *)b)->name);
}

/*
** ECMA-262 writes Unicode properties with long names (\p{Letter}, \p{Script=Greek});
** PCRE2 before 10.43 knows only the short ones. Rewrite those escapes; the result is
** malloc'd (NULL out of memory) and *outlen set.
*/
static char *ecma_props (const char *src, size_t len, size_t *outlen) {
  static const char *const gc[][2] = {
    {"Letter", "L"}, {"Cased_Letter", "L&"}, {"Uppercase_Letter", "Lu"}, {"Lowercase_Letter", "Ll"},
    {"Titlecase_Letter", "Lt"}, {"Modifier_Letter", "Lm"}, {"Other_Letter", "Lo"}, {"Mark", "M"},
    {"Nonspacing_Mark", "Mn"}, {"Spacing_Mark", "Mc"}, {"Enclosing_Mark", "Me"}, {"Number", "N"},
    {"Decimal_Number", "Nd"}, {"digit", "Nd"}, {"Letter_Number", "Nl"}, {"Other_Number", "No"},
    {"Punctuation", "P"}, {"Connector_Punctuation", "Pc"}, {"Dash_Punctuation", "Pd"},
    {"Open_Punctuation", "Ps"}, {"Close_Punctuation", "Pe"}, {"Initial_Punctuation", "Pi"},
    {"Final_Punctuation", "Pf"}, {"Other_Punctuation", "Po"}, {"Symbol", "S"}, {"Math_Symbol", "Sm"},
    {"Currency_Symbol", "Sc"}, {"Modifier_Symbol", "Sk"}, {"Other_Symbol", "So"}, {"Separator", "Z"},
    {"Space_Separator", "Zs"}, {"Line_Separator", "Zl"}, {"Paragraph_Separator", "Zp"}, {"Other", "C"},
    {"Control", "Cc"}, {"Format", "Cf"}, {"Surrogate", "Cs"}, {"Private_Use", "Co"}, {"Unassigned", "Cn"},
  };
  char *out = malloc(len + 1), *o = out;
  if (!out) return NULL;
  for (size_t i = 0; i < len; i++) {
    if (src[i] != '\\' || i + 1 >= len) { *o++ = src[i]; continue; }
    char e = src[i + 1];
    const char *close = (e == 'p' || e == 'P') && i + 2 < len && src[i + 2] == '{'
                        ? memchr(src + i + 3, '}', len - i - 3) : NULL;
    if (!close) { *o++ = src[i++]; *o++ = src[i]; continue; }
    const char *name = src + i + 3;
    size_t nl = (size_t)(close - name);
    const char *eq = memchr(name, '=', nl);
    if (eq) { nl -= (size_t)(eq + 1 - name); name = eq + 1; }
    const char *repl = NULL;
    for (size_t k = 0; k < sizeof gc / sizeof gc[0] && !repl; k++)
      if (strlen(gc[k][0]) == nl && memcmp(gc[k][0], name, nl) == 0) repl = gc[k][1];
    *o++ = '\\';
    *o++ = e;
    *o++ = '{';
    if (repl) { memcpy(o, repl, strlen(repl)); o += strlen(repl); }
    else { memcpy(o, name, nl); o += nl; }
    *o++ = '}';
    i = (size_t)(close - src);
  }
  *outlen = (size_t)(o - out);
  return out;
}

static pcre2_code *compile_re (cc *c, const char *src, size_t len) {
  int code;
  PCRE2_SIZE off;
  pcre2_compile_context *cctx = pcre2_compile_context_create(NULL);
  if (!cctx) { oom(c); return NULL; }
  size_t tl;
  char *t = ecma_props(src, len, &tl);
  if (!t) { pcre2_compile_context_free(cctx); oom(c); return NULL; }
  pcre2_set_compile_extra_options(cctx, PCRE2_EXTRA_ALT_BSUX);
  pcre2_code *re = pcre2_compile((PCRE2_SPTR)t, tl,
                                 PCRE2_UTF | PCRE2_DOLLAR_ENDONLY | PCRE2_ALT_BSUX, &code, &off, cctx);
  pcre2_compile_context_free(cctx);
  free(t);
  if (!re) {
    PCRE2_UCHAR msg[200];
    pcre2_get_error_message(code, msg, sizeof msg);
    cerr(c, "invalid regular expression \"%s\": %s at offset %zu", src, (const char *)msg, (size_t)off);
    return NULL;
  }
  c->s->npatterns++;
  return re;
}

static const char *strings_array (cc *c, json_t *a, const char ***out, size_t *count) {
  *count = 0;
  *out = NULL;
  if (!json_is_array(a)) return "expected an array of strings";
  size_t n = json_array_size(a);
  if (n == 0) return NULL;
  const char **v = calloc(n, sizeof *v);
  if (!v) { oom(c); return NULL; }
  for (size_t i = 0; i < n; i++) {
    v[i] = json_string_value(json_array_get(a, i));
    if (!v[i]) { free(v); return "expected an array of strings"; }
  }
  *out = v;
  *count = n;
  return NULL;
}

static const char *const type_names[] = {"null", "boolean", "integer", "number", "string", "array", "object"};
static const unsigned type_bits[] = {T_NULL, T_BOOL, T_INT, T_NUM | T_INT, T_STR, T_ARR, T_OBJ};

static unsigned type_bit (const char *s) {
  for (size_t i = 0; i < 7; i++)
    if (s && strcmp(s, type_names[i]) == 0) return type_bits[i];
  return 0;
}

static void compile_type (cc *c, node *n, json_t *t) {
  size_t old = lpush(c, "type");
  if (json_is_string(t)) {
    if (!(n->types = type_bit(json_string_value(t))))
      cerr(c, "unknown type \"%s\" (expected null, boolean, integer, number, string, array or object)",
           json_string_value(t));
  } else if (json_is_array(t) && json_array_size(t) > 0) {
    for (size_t i = 0; i < json_array_size(t); i++) {
      unsigned b = type_bit(json_string_value(json_array_get(t, i)));
      if (!b) { cerr(c, "expected type names, got an invalid entry at index %zu", i); break; }
      n->types |= b;
    }
  } else {
    cerr(c, "expected a type name or a non-empty array of type names");
  }
  lpop(c, old);
}

static void compile_object_kws (cc *c, node *n, json_t *js, resource *res, int d) {
  json_t *v;
  const char *k;
  if ((v = json_object_get(js, "properties"))) {
    size_t old = lpush(c, "properties");
    if (!json_is_object(v)) cerr(c, "expected an object of schemas");
    else if (json_object_size(v) && !(n->props = calloc(json_object_size(v), sizeof *n->props))) oom(c);
    else {
      json_t *sv;
      json_object_foreach(v, k, sv) {
        if (c->failed) break;
        n->props[n->nprops].name = k;
        n->props[n->nprops++].n = sub(c, sv, k, res, d);
      }
      if (n->nprops) qsort(n->props, n->nprops, sizeof *n->props, name_cmp);
    }
    lpop(c, old);
  }
  if ((v = json_object_get(js, "patternProperties"))) {
    size_t old = lpush(c, "patternProperties");
    if (!json_is_object(v)) cerr(c, "expected an object of schemas");
    else if (json_object_size(v) && !(n->pprops = calloc(json_object_size(v), sizeof *n->pprops))) oom(c);
    else {
      json_t *sv;
      json_object_foreach(v, k, sv) {
        if (c->failed) break;
        size_t o2 = lpush(c, k);
        patnode *p = &n->pprops[n->npprops];
        p->src = k;
        p->re = compile_re(c, k, strlen(k));
        if (p->re) n->npprops++;
        if (!c->failed) p->n = compile(c, sv, res, d, 0);
        lpop(c, o2);
      }
    }
    lpop(c, old);
  }
  if ((v = json_object_get(js, "additionalProperties"))) n->addprops = sub(c, v, "additionalProperties", res, d);
  if ((v = json_object_get(js, "propertyNames"))) n->propnames = sub(c, v, "propertyNames", res, d);
  if ((v = vget(c, js, "required"))) {
    size_t old = lpush(c, "required");
    const char *e = strings_array(c, v, &n->required, &n->nrequired);
    if (e) cerr(c, "%s", e);
    lpop(c, old);
  }
  get_count(c, js, "maxProperties", &n->maxProps);
  get_count(c, js, "minProperties", &n->minProps);

  /* dependentRequired + dependentSchemas (2020-12), dependencies (draft-07) */
  const char *kws[2] = {"dependentRequired", "dependentSchemas"};
  int nk = 2;
  if (d == TP_DIALECT_DRAFT7) { kws[0] = "dependencies"; nk = 1; }
  for (int ki = 0; ki < nk && !c->failed; ki++) {
    if (!(v = ki == 0 && d != TP_DIALECT_DRAFT7 ? vget(c, js, kws[ki]) : json_object_get(js, kws[ki]))) continue;
    size_t old = lpush(c, kws[ki]);
    size_t cnt = json_is_object(v) ? json_object_size(v) : 0;
    if (!json_is_object(v)) { cerr(c, "expected an object"); lpop(c, old); continue; }
    if (ki == 0) n->depreq_kw = kws[0];
    if (ki == 1 || d == TP_DIALECT_DRAFT7) n->depschema_kw = kws[ki];
    if (cnt && (ki == 0 && !(n->depreq = calloc(cnt, sizeof *n->depreq)))) { oom(c); lpop(c, old); continue; }
    if (cnt && (ki == 1 || d == TP_DIALECT_DRAFT7) && !(n->depschemas = calloc(cnt, sizeof *n->depschemas))) {
      oom(c);
      lpop(c, old);
      continue;
    }
    json_t *sv;
    json_object_foreach(v, k, sv) {
      if (c->failed) break;
      int want_array = ki == 0 && (d != TP_DIALECT_DRAFT7 || json_is_array(sv));
      if (want_array) {
        size_t o2 = lpush(c, k);
        depreq *dr = &n->depreq[n->ndepreq];
        const char *e = strings_array(c, sv, &dr->req, &dr->n);
        if (e) cerr(c, "%s", e);
        dr->name = k;
        if (!c->failed) n->ndepreq++;
        lpop(c, o2);
      } else {
        n->depschemas[n->ndepschemas].name = k;
        n->depschemas[n->ndepschemas++].n = sub(c, sv, k, res, d);
      }
    }
    lpop(c, old);
  }
}

static void compile_array_kws (cc *c, node *n, json_t *js, resource *res, int d) {
  json_t *v = json_object_get(js, "items");
  json_t *pi = d == TP_DIALECT_2020_12 ? json_object_get(js, "prefixItems") : NULL;
  if (pi) {
    n->prefix = sub_array(c, js, "prefixItems", res, d, &n->nprefix);
    n->prefix_kw = "prefixItems";
    if (v) { n->items = sub(c, v, "items", res, d); n->items_kw = "items"; }
  } else if (v && json_is_array(v)) {
    /* draft-07 array form (also accepted from 2019-09 schemas under 2020-12) */
    size_t old = lpush(c, "items");
    n->prefix_kw = "items";
    if (json_array_size(v) && !(n->prefix = calloc(json_array_size(v), sizeof *n->prefix))) oom(c);
    for (size_t i = 0; i < json_array_size(v) && !c->failed; i++) {
      size_t o2 = lpushi(c, i);
      n->prefix[n->nprefix++] = compile(c, json_array_get(v, i), res, d, 0);
      lpop(c, o2);
    }
    lpop(c, old);
    json_t *ai = json_object_get(js, "additionalItems");
    if (ai) { n->items = sub(c, ai, "additionalItems", res, d); n->items_kw = "additionalItems"; }
  } else if (v) {
    n->items = sub(c, v, "items", res, d);
    n->items_kw = "items";
  }
  if ((v = json_object_get(js, "contains"))) {
    n->contains = sub(c, v, "contains", res, d);
    if (d == TP_DIALECT_2020_12) {
      get_count(c, js, "minContains", &n->minContains);
      if (get_count(c, js, "maxContains", &n->maxContains) == 0 && n->maxContains >= 0)
        n->has_max_contains = 1;
    }
    if (n->minContains < 0) n->minContains = 1;
  }
  get_count(c, js, "maxItems", &n->maxItems);
  get_count(c, js, "minItems", &n->minItems);
  if ((v = vget(c, js, "uniqueItems"))) {
    if (!json_is_boolean(v)) {
      size_t old = lpush(c, "uniqueItems");
      cerr(c, "expected a boolean");
      lpop(c, old);
    }
    n->unique = json_is_true(v);
  }
}

static void compile_defs (cc *c, json_t *js, resource *res, int d) {
  const char *keys[2] = {"$defs", "definitions"};
  for (int i = 0; i < 2 && !c->failed; i++) {
    json_t *v = json_object_get(js, keys[i]), *sv;
    const char *k;
    if (!v) continue;
    size_t old = lpush(c, keys[i]);
    if (!json_is_object(v)) cerr(c, "expected an object of schemas");
    else json_object_foreach(v, k, sv) {
      if (c->failed) break;
      sub(c, sv, k, res, d);
    }
    lpop(c, old);
  }
}

/*
** Compile one schema. res is the enclosing resource; a subschema with "$id" opens a new
** one. is_root marks the root of a document (res then describes it).
*/
static node *compile (cc *c, json_t *js, resource *res, int dialect, int is_root) {
  if (c->failed) return NULL;
  if (json_is_boolean(js)) {
    node *n = new_node(c, res);
    if (n) n->boolv = json_is_true(js);
    if (n && is_root) { res->node = n; res->root = js; }
    return n;
  }
  if (!json_is_object(js)) { cerr(c, "expected a schema (an object or a boolean)"); return NULL; }
  if (c->depth >= TP_SCHEMA_MAX_DEPTH) { cerr(c, "schema nested too deeply"); return NULL; }
  char pk[32];
  ptrkey(pk, sizeof pk, js);
  node *n = map_get(&c->ptrs, pk);
  if (n) return n;

  json_t *v;
  int d = dialect;
  json_t *ref = json_object_get(js, "$ref");
  int ref_only = d == TP_DIALECT_DRAFT7 && ref;
  const char *id = json_string_value(json_object_get(js, "$id"));
  if (json_object_get(js, "$id") && !id) { size_t o = lpush(c, "$id"); cerr(c, "expected a string"); lpop(c, o); return NULL; }
  if (id && !ref_only && !(d == TP_DIALECT_DRAFT7 && id[0] == '#')) {
    d = dialect_of(js, d);
    char *u = uresolve(res->uri, id);
    if (!u) { oom(c); return NULL; }
    char *hash = strchr(u, '#');
    if (hash) *hash = 0;
    resource *nr = map_get(&c->res, u);
    if (!nr || nr->root != js) nr = new_resource(c, u, js, d);
    free(u);
    if (!nr) return NULL;
    nr->novalid = res->novalid || !vocab_validation(c, js);
    if (is_root) { res->node = NULL; res->root = js; }
    res = nr;
    is_root = 1;
  } else if (is_root) {
    d = dialect_of(js, d);
    res->dialect = d;
    res->novalid = !vocab_validation(c, js);
  }
  if (!(n = new_node(c, res))) return NULL;
  if (map_put(&c->ptrs, pk, n) < 0) { oom(c); return NULL; }
  if (is_root) { res->node = n; res->root = js; }
  /* the document root's retrieval resource also points at the node */
  if (is_root && res->node == n) {
    for (resource *r = c->s->resources; r; r = r->next)
      if (r->root == js && !r->node) r->node = n;
  }
  c->depth++;

  if (d == TP_DIALECT_DRAFT7 && id && id[0] == '#' && !ref_only) add_anchor(c, res, id + 1, n);
  if (d == TP_DIALECT_2020_12) {
    if ((v = json_object_get(js, "$anchor"))) {
      if (!json_is_string(v)) { size_t o = lpush(c, "$anchor"); cerr(c, "expected a string"); lpop(c, o); }
      else add_anchor(c, res, json_string_value(v), n);
    }
    if ((v = json_object_get(js, "$dynamicAnchor"))) {
      if (!json_is_string(v)) { size_t o = lpush(c, "$dynamicAnchor"); cerr(c, "expected a string"); lpop(c, o); }
      else {
        add_anchor(c, res, json_string_value(v), n);
        named *nd = realloc(res->dyn, (res->ndyn + 1) * sizeof *nd);
        if (!nd) oom(c);
        else { res->dyn = nd; nd[res->ndyn].name = json_string_value(v); nd[res->ndyn++].n = n; }
      }
    }
  }
  compile_defs(c, js, res, d);
  if (ref) {
    if (!json_is_string(ref)) { size_t o = lpush(c, "$ref"); cerr(c, "expected a string"); lpop(c, o); }
    else { size_t o = lpush(c, "$ref"); add_ref(c, n, res, json_string_value(ref), 0); lpop(c, o); }
  }
  if (ref_only) { c->depth--; return n; }
  if (d == TP_DIALECT_2020_12 && (v = json_object_get(js, "$dynamicRef"))) {
    size_t o = lpush(c, "$dynamicRef");
    if (!json_is_string(v)) cerr(c, "expected a string");
    else add_ref(c, n, res, json_string_value(v), 1);
    lpop(c, o);
  }

  int saved_novalid = c->novalid;
  c->novalid = res->novalid;
  if ((v = vget(c, js, "type"))) compile_type(c, n, v);
  if ((v = vget(c, js, "enum"))) {
    if (!json_is_array(v)) { size_t o = lpush(c, "enum"); cerr(c, "expected an array"); lpop(c, o); }
    n->enum_ = v;
  }
  n->const_ = vget(c, js, "const");
  if ((n->multipleOf = get_number(c, js, "multipleOf")) &&
      (json_is_integer(n->multipleOf) ? json_integer_value(n->multipleOf) <= 0 : json_real_value(n->multipleOf) <= 0)) {
    size_t o = lpush(c, "multipleOf");
    cerr(c, "expected a number greater than 0");
    lpop(c, o);
  }
  n->maximum = get_number(c, js, "maximum");
  n->minimum = get_number(c, js, "minimum");
  json_t *xm = vget(c, js, "exclusiveMaximum"), *xn = vget(c, js, "exclusiveMinimum");
  if (d == TP_DIALECT_DRAFT7 && json_is_boolean(xm)) {  /* draft-04 form */
    if (json_is_true(xm)) { n->xmax = n->maximum; n->maximum = NULL; }
  } else {
    n->xmax = get_number(c, js, "exclusiveMaximum");
  }
  if (d == TP_DIALECT_DRAFT7 && json_is_boolean(xn)) {
    if (json_is_true(xn)) { n->xmin = n->minimum; n->minimum = NULL; }
  } else {
    n->xmin = get_number(c, js, "exclusiveMinimum");
  }
  get_count(c, js, "maxLength", &n->maxLength);
  get_count(c, js, "minLength", &n->minLength);
  if ((v = vget(c, js, "pattern"))) {
    size_t o = lpush(c, "pattern");
    if (!json_is_string(v)) cerr(c, "expected a string (a regular expression)");
    else {
      n->pattern_src = json_string_value(v);
      n->pattern = compile_re(c, n->pattern_src, json_string_length(v));
    }
    lpop(c, o);
  }
  if ((v = json_object_get(js, "format"))) {
    if (!json_is_string(v)) { size_t o = lpush(c, "format"); cerr(c, "expected a string"); lpop(c, o); }
    else {
      n->format = json_string_value(v);
      n->fmt_assert = c->formats_assert && tp__schema_format_check(n->format, "", 0) >= 0;
    }
  }
  compile_array_kws(c, n, js, res, d);
  compile_object_kws(c, n, js, res, d);
  c->novalid = saved_novalid;
  n->allOf = sub_array(c, js, "allOf", res, d, &n->nall);
  n->anyOf = sub_array(c, js, "anyOf", res, d, &n->nany);
  n->oneOf = sub_array(c, js, "oneOf", res, d, &n->none);
  if ((v = json_object_get(js, "not"))) n->not_ = sub(c, v, "not", res, d);
  /* then/else are compiled without an if too: they may hold an $id or anchor */
  if ((v = json_object_get(js, "if"))) n->if_ = sub(c, v, "if", res, d);
  if ((v = json_object_get(js, "then"))) n->then_ = sub(c, v, "then", res, d);
  if ((v = json_object_get(js, "else"))) n->else_ = sub(c, v, "else", res, d);
  if (d == TP_DIALECT_2020_12) {
    if ((v = json_object_get(js, "unevaluatedProperties"))) n->uneval_props = sub(c, v, "unevaluatedProperties", res, d);
    if ((v = json_object_get(js, "unevaluatedItems"))) n->uneval_items = sub(c, v, "unevaluatedItems", res, d);
  }
  c->depth--;
  return n;
}


/*
** Compact metaschemas of our own for the two dialects, enough for "$ref" to the official
** metaschema URIs to check the shape of a schema (the official ones split the 2020-12
** metaschema into vocabularies; these describe the same keywords in one document).
*/
#define META_COMMON \
  "\"$id\":{\"type\":\"string\"},\"$schema\":{\"type\":\"string\"},\"$ref\":{\"type\":\"string\"}," \
  "\"$comment\":{\"type\":\"string\"},\"title\":{\"type\":\"string\"},\"description\":{\"type\":\"string\"}," \
  "\"type\":{\"anyOf\":[{\"$ref\":\"#/definitions/simpleTypes\"},{\"type\":\"array\"," \
  "\"items\":{\"$ref\":\"#/definitions/simpleTypes\"},\"minItems\":1,\"uniqueItems\":true}]}," \
  "\"enum\":{\"type\":\"array\"},\"multipleOf\":{\"type\":\"number\",\"exclusiveMinimum\":0}," \
  "\"maximum\":{\"type\":\"number\"},\"minimum\":{\"type\":\"number\"}," \
  "\"exclusiveMaximum\":{\"type\":\"number\"},\"exclusiveMinimum\":{\"type\":\"number\"}," \
  "\"maxLength\":{\"$ref\":\"#/definitions/count\"},\"minLength\":{\"$ref\":\"#/definitions/count\"}," \
  "\"maxItems\":{\"$ref\":\"#/definitions/count\"},\"minItems\":{\"$ref\":\"#/definitions/count\"}," \
  "\"maxProperties\":{\"$ref\":\"#/definitions/count\"},\"minProperties\":{\"$ref\":\"#/definitions/count\"}," \
  "\"pattern\":{\"type\":\"string\"},\"format\":{\"type\":\"string\"},\"uniqueItems\":{\"type\":\"boolean\"}," \
  "\"required\":{\"$ref\":\"#/definitions/strings\"},"
#define META_DEFS \
  "\"count\":{\"type\":\"integer\",\"minimum\":0}," \
  "\"strings\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"uniqueItems\":true}," \
  "\"simpleTypes\":{\"enum\":[\"array\",\"boolean\",\"integer\",\"null\",\"number\",\"object\",\"string\"]},"

static const char meta_2020[] =
  "{\"$schema\":\"https://json-schema.org/draft/2020-12/schema\","
  "\"$id\":\"https://json-schema.org/draft/2020-12/schema\",\"$dynamicAnchor\":\"meta\","
  "\"type\":[\"object\",\"boolean\"],\"properties\":{" META_COMMON
  "\"$anchor\":{\"type\":\"string\"},\"$dynamicRef\":{\"type\":\"string\"},\"$dynamicAnchor\":{\"type\":\"string\"},"
  "\"$defs\":{\"$ref\":\"#/definitions/schemaMap\"},\"definitions\":{\"$ref\":\"#/definitions/schemaMap\"},"
  "\"properties\":{\"$ref\":\"#/definitions/schemaMap\"},\"patternProperties\":{\"$ref\":\"#/definitions/schemaMap\"},"
  "\"dependentSchemas\":{\"$ref\":\"#/definitions/schemaMap\"},"
  "\"dependentRequired\":{\"type\":\"object\",\"additionalProperties\":{\"$ref\":\"#/definitions/strings\"}},"
  "\"maxContains\":{\"$ref\":\"#/definitions/count\"},\"minContains\":{\"$ref\":\"#/definitions/count\"},"
  "\"prefixItems\":{\"$ref\":\"#/definitions/schemas\"},\"allOf\":{\"$ref\":\"#/definitions/schemas\"},"
  "\"anyOf\":{\"$ref\":\"#/definitions/schemas\"},\"oneOf\":{\"$ref\":\"#/definitions/schemas\"},"
  "\"items\":{\"$dynamicRef\":\"#meta\"},\"contains\":{\"$dynamicRef\":\"#meta\"},"
  "\"additionalProperties\":{\"$dynamicRef\":\"#meta\"},\"propertyNames\":{\"$dynamicRef\":\"#meta\"},"
  "\"not\":{\"$dynamicRef\":\"#meta\"},\"if\":{\"$dynamicRef\":\"#meta\"},\"then\":{\"$dynamicRef\":\"#meta\"},"
  "\"else\":{\"$dynamicRef\":\"#meta\"},\"unevaluatedItems\":{\"$dynamicRef\":\"#meta\"},"
  "\"unevaluatedProperties\":{\"$dynamicRef\":\"#meta\"}},"
  "\"definitions\":{" META_DEFS
  "\"schemaMap\":{\"type\":\"object\",\"additionalProperties\":{\"$dynamicRef\":\"#meta\"}},"
  "\"schemas\":{\"type\":\"array\",\"minItems\":1,\"items\":{\"$dynamicRef\":\"#meta\"}}}}";

static const char meta_draft7[] =
  "{\"$schema\":\"http://json-schema.org/draft-07/schema#\",\"$id\":\"http://json-schema.org/draft-07/schema#\","
  "\"type\":[\"object\",\"boolean\"],\"properties\":{" META_COMMON
  "\"definitions\":{\"$ref\":\"#/definitions/schemaMap\"},"
  "\"properties\":{\"$ref\":\"#/definitions/schemaMap\"},\"patternProperties\":{\"$ref\":\"#/definitions/schemaMap\"},"
  "\"dependencies\":{\"type\":\"object\",\"additionalProperties\":{\"anyOf\":[{\"$ref\":\"#\"},"
  "{\"$ref\":\"#/definitions/strings\"}]}},"
  "\"allOf\":{\"$ref\":\"#/definitions/schemas\"},\"anyOf\":{\"$ref\":\"#/definitions/schemas\"},"
  "\"oneOf\":{\"$ref\":\"#/definitions/schemas\"},"
  "\"items\":{\"anyOf\":[{\"$ref\":\"#\"},{\"$ref\":\"#/definitions/schemas\"}]},"
  "\"additionalItems\":{\"$ref\":\"#\"},\"contains\":{\"$ref\":\"#\"},"
  "\"additionalProperties\":{\"$ref\":\"#\"},\"propertyNames\":{\"$ref\":\"#\"},\"not\":{\"$ref\":\"#\"},"
  "\"if\":{\"$ref\":\"#\"},\"then\":{\"$ref\":\"#\"},\"else\":{\"$ref\":\"#\"}},"
  "\"definitions\":{" META_DEFS
  "\"schemaMap\":{\"type\":\"object\",\"additionalProperties\":{\"$ref\":\"#\"}},"
  "\"schemas\":{\"type\":\"array\",\"minItems\":1,\"items\":{\"$ref\":\"#\"}}}}";

#define META_2020_URI "https://json-schema.org/draft/2020-12/schema"
#define META_DRAFT7_URI "http://json-schema.org/draft-07/schema"

/* a remote document by URL: the metaschemas, else under remotes_dir only, never the network */
static json_t *fetch_doc (const char *remotes_dir, const char *uri) {
  if (strcmp(uri, META_2020_URI) == 0) return json_loads(meta_2020, 0, NULL);
  if (strcmp(uri, META_DRAFT7_URI) == 0) return json_loads(meta_draft7, 0, NULL);
  if (!remotes_dir || strncmp(uri, REMOTE_PREFIX, strlen(REMOTE_PREFIX)) != 0) return NULL;
  const char *rel = uri + strlen(REMOTE_PREFIX);
  if (strstr(rel, "..") || strchr(rel, '?') || rel[0] == '/' || !rel[0]) return NULL;
  size_t n = strlen(remotes_dir) + strlen(rel) + 2;
  char *path = malloc(n);
  if (!path) return NULL;
  snprintf(path, n, "%s/%s", remotes_dir, rel);
  json_t *doc = json_load_file(path, JSON_ALLOW_NUL, NULL);
  free(path);
  return doc;
}

static resource *load_remote (cc *c, const char *uri, int dialect) {
  json_t *doc = fetch_doc(c->remotes_dir, uri);
  if (!doc) return NULL;
  json_t **docs = realloc(c->s->docs, (c->s->ndocs + 1) * sizeof *docs);
  if (!docs) { json_decref(doc); oom(c); return NULL; }
  c->s->docs = docs;
  docs[c->s->ndocs++] = doc;
  resource *r = new_resource(c, uri, doc, dialect);
  if (!r) return NULL;
  char saved[sizeof c->loc];
  memcpy(saved, c->loc, sizeof saved);
  size_t savedlen = c->loclen;
  c->loclen = 0;
  c->loc[0] = 0;
  int sdepth = c->depth;
  c->depth = 0;
  compile(c, doc, r, dialect, 1);
  c->depth = sdepth;
  if (!c->failed) { memcpy(c->loc, saved, sizeof saved); c->loclen = savedlen; }
  return c->failed ? NULL : r;
}

/* the node a resolved absolute URI names, compiling JSON-pointer targets as needed */
static node *lookup (cc *c, const char *uri, int dialect) {
  char *base = xstrdup(uri);
  if (!base) { oom(c); return NULL; }
  char *frag = strchr(base, '#');
  if (frag) *frag++ = 0;
  node *found = NULL;
  resource *r = map_get(&c->res, base);
  if (!r) r = load_remote(c, base, dialect);
  if (r && (!frag || !*frag)) {
    found = r->node;
  } else if (r && frag[0] == '/') {
    pdecode(frag);
    json_t *cur = r->root;
    char *seg = frag + 1;
    for (;;) {
      char *end = strchr(seg, '/');
      if (end) *end = 0;
      char *o = seg;
      for (char *p = seg; *p; p++) {
        if (p[0] == '~' && p[1] == '0') { *o++ = '~'; p++; }
        else if (p[0] == '~' && p[1] == '1') { *o++ = '/'; p++; }
        else *o++ = *p;
      }
      *o = 0;
      if (json_is_object(cur)) cur = json_object_get(cur, seg);
      else if (json_is_array(cur)) {
        char *e;
        unsigned long idx = strtoul(seg, &e, 10);
        cur = *seg && !*e ? json_array_get(cur, idx) : NULL;
      } else cur = NULL;
      if (!cur || !end) break;
      seg = end + 1;
    }
    if (cur) {
      char pk[32];
      ptrkey(pk, sizeof pk, cur);
      if (!(found = map_get(&c->ptrs, pk))) {
        int sdepth = c->depth;
        c->depth = 0;
        found = compile(c, cur, r, r->dialect, 0);
        c->depth = sdepth;
      }
    }
  } else if (r) {
    size_t bl = strlen(base);
    base[bl] = '#';  /* frag follows in the same buffer */
    found = map_get(&c->anchors, base);
  }
  free(base);
  return found;
}

static int resolve_refs (cc *c) {
  for (size_t i = 0; i < c->nrefs && !c->failed; i++) {
    pending *p = &c->refs[i];
    node *t = lookup(c, p->uri, p->n->res ? p->n->res->dialect : TP_DIALECT_2020_12);
    if (c->failed) break;
    p = &c->refs[i];  /* lookup may have grown the array */
    if (!t) {
      snprintf(c->loc, sizeof c->loc, "%s", p->loc);
      cerr(c, "cannot resolve %s \"%s\"%s", p->dynamic ? "$dynamicRef" : "$ref", p->uri,
           strncmp(p->uri, REMOTE_PREFIX, strlen(REMOTE_PREFIX)) == 0 && !c->remotes_dir
           ? " (remote references are disabled)" : "");
      break;
    }
    if (!p->dynamic) { p->n->ref = t; continue; }
    p->n->dynref = t;
    /* dynamic only when the fragment is an anchor that the static target declares dynamic */
    const char *frag = strchr(p->uri, '#');
    if (frag && frag[1] && frag[1] != '/' && t->res) {
      for (size_t k = 0; k < t->res->ndyn; k++)
        if (strcmp(t->res->dyn[k].name, frag + 1) == 0 && t->res->dyn[k].n == t) {
          p->n->dyn_name = t->res->dyn[k].name;
          break;
        }
    }
  }
  return c->failed ? -1 : 0;
}

static void free_node (node *n) {
  free(n->prefix);
  free(n->props);
  for (size_t i = 0; i < n->npprops; i++) pcre2_code_free(n->pprops[i].re);
  free(n->pprops);
  free(n->required);
  for (size_t i = 0; i < n->ndepreq; i++) free(n->depreq[i].req);
  free(n->depreq);
  free(n->depschemas);
  free(n->allOf);
  free(n->anyOf);
  free(n->oneOf);
  pcre2_code_free(n->pattern);
  free(n);
}

void tp__schema_free (tp_schema *s) {
  if (!s) return;
  for (node *n = s->nodes, *next; n; n = next) { next = n->next_alloc; free_node(n); }
  for (resource *r = s->resources, *next; r; r = next) {
    next = r->next;
    free(r->uri);
    free(r->dyn);
    free(r);
  }
  for (size_t i = 0; i < s->ndocs; i++) json_decref(s->docs[i]);
  free(s->docs);
  pcre2_match_context_free(s->mctx);
  if (s->mc) { pcre2_match_data_free(s->mc->md); free(s->mc); }
  if (s->simple) free(s->simple->props);
  free(s->simple);
  free(s);
}

/* A node with none of the keywords a plain shape leaves out (see tp_schema_simple). */
static int plain_node (const node *n) {
  return n->boolv == -1 && !n->fmt_assert && !n->unique && !n->has_max_contains &&
         !n->multipleOf && !n->xmax && !n->xmin && !n->enum_ && !n->const_ &&
         n->maxItems < 0 && n->minItems < 0 && n->maxProps < 0 && n->minProps < 0 &&
         n->minContains < 0 && n->maxContains < 0 && !n->pattern && !n->format &&
         !n->prefix && !n->items && !n->contains && !n->npprops && !n->propnames &&
         !n->ndepreq && !n->ndepschemas && !n->nall && !n->nany && !n->none && !n->not_ &&
         !n->if_ && !n->then_ && !n->else_ && !n->ref && !n->dynref && !n->uneval_props &&
         !n->uneval_items && !n->res->novalid;
}

/* An integer bound (a JSON integer, or a real of integral value within int64) in *out. */
static int int_bound (const json_t *b, long long *out) {
  if (json_is_integer(b)) { *out = json_integer_value(b); return 1; }
  return 0;
}

/* The root's plain shape, or NULL (not one, or out of memory: then nothing is lost). */
static tp_schema_simple *make_simple (const node *n) {
  if (n == NULL || !plain_node(n) || n->types != T_OBJ || n->nprops > 64 || n->maxLength >= 0 ||
      n->minLength >= 0 || n->maximum || n->minimum) return NULL;
  if (n->addprops && n->addprops->boolv == -1) return NULL;
  tp_schema_simple *sh = calloc(1, sizeof *sh);
  if (sh == NULL) return NULL;
  sh->props = calloc(n->nprops ? n->nprops : 1, sizeof *sh->props);
  if (sh->props == NULL) { free(sh); return NULL; }
  sh->nprops = n->nprops;
  sh->closed = n->addprops && n->addprops->boolv == 0;
  for (size_t i = 0; i < n->nprops; i++) {
    const node *p = n->props[i].n;
    tp_schema_simple_prop *q = &sh->props[i];
    q->name = n->props[i].name;
    q->len = strlen(q->name);
    if (p == NULL || !(p->boolv == 1 || plain_node(p)) || p->addprops || p->nprops ||
        p->nrequired || (p->types & (T_ARR | T_OBJ))) goto no;
    if (p->boolv == 1) { q->min_len = q->max_len = -1; continue; }
    q->types = (p->types & T_NULL ? TP_ST_NULL : 0) | (p->types & T_BOOL ? TP_ST_BOOL : 0) |
               (p->types & T_INT ? TP_ST_INT : 0) | (p->types & T_NUM ? TP_ST_NUM : 0) |
               (p->types & T_STR ? TP_ST_STR : 0);
    q->min_len = p->minLength;
    q->max_len = p->maxLength;
    if (p->minimum && !(q->has_min = int_bound(p->minimum, &q->min))) goto no;
    if (p->maximum && !(q->has_max = int_bound(p->maximum, &q->max))) goto no;
  }
  for (size_t i = 0; i < n->nrequired; i++) {
    tp_schema_simple_prop *q = NULL;
    for (size_t j = 0; j < sh->nprops && q == NULL; j++)
      if (strcmp(sh->props[j].name, n->required[i]) == 0) q = &sh->props[j];
    if (q == NULL) goto no;  /* required but not described: left to the validator */
    if (!q->required) sh->nrequired++;
    q->required = 1;
  }
  return sh;
no:
  free(sh->props);
  free(sh);
  return NULL;
}

const tp_schema_simple *tp__schema_simple (const tp_schema *s) {
  return s ? s->simple : NULL;
}

tp_schema *tp__schema_compile (const json_t *schema, tp_dialect default_dialect,
                              const char *remotes_dir, int formats_assert,
                              char *err, size_t errlen) {
  cc c;
  memset(&c, 0, sizeof c);
  c.err = err;
  c.errlen = errlen;
  c.remotes_dir = remotes_dir;
  c.formats_assert = formats_assert;
  if (err && errlen) err[0] = 0;
  if (!schema) { cerr(&c, "schema is NULL"); return NULL; }
  if (default_dialect != TP_DIALECT_2020_12 && default_dialect != TP_DIALECT_DRAFT7) {
    cerr(&c, "unknown dialect %d", (int)default_dialect);
    return NULL;
  }
  tp_schema *s = calloc(1, sizeof *s);
  json_t *copy = json_deep_copy(schema);
  if (!s || !copy || !(s->docs = malloc(sizeof *s->docs)) || !(s->mc = calloc(1, sizeof *s->mc))) {
    json_decref(copy);
    tp__schema_free(s);
    cerr(&c, "out of memory");
    return NULL;
  }
  atomic_flag_clear(&s->mc->busy);
  s->docs[s->ndocs++] = copy;
  c.s = s;
  int d = dialect_of(copy, default_dialect);
  resource *r = new_resource(&c, DEFAULT_BASE, copy, d);
  if (r) s->root = compile(&c, copy, r, d, 1);
  if (!c.failed) resolve_refs(&c);
  if (!c.failed && s->npatterns) {
    s->mctx = pcre2_match_context_create(NULL);
    s->mc->md = pcre2_match_data_create(1, NULL);
    if (!s->mctx || !s->mc->md) oom(&c);
    else {
      pcre2_set_match_limit(s->mctx, 1000000);
      pcre2_set_depth_limit(s->mctx, 10000);
      pcre2_set_heap_limit(s->mctx, 20000);
    }
  }
  s->dialect = d;
  map_free(&c.res);
  map_free(&c.anchors);
  map_free(&c.ptrs);
  for (size_t i = 0; i < c.nrefs; i++) { free(c.refs[i].uri); free(c.refs[i].loc); }
  free(c.refs);
  if (c.failed || !s->root) {
    if (!c.failed) cerr(&c, "cannot compile the schema");
    tp__schema_free(s);
    return NULL;
  }
  s->simple = make_simple(s->root);
  return s;
}

tp_dialect tp__schema_dialect (const tp_schema *s) {
  return s && s->dialect == TP_DIALECT_DRAFT7 ? TP_DIALECT_DRAFT7 : TP_DIALECT_2020_12;
}

/* ---- validation -------------------------------------------------------------------- */

/*
** Time. Validation runs on a script's behalf (tool arguments, tool results), so it must
** not outlast the run's limits. For a given schema it is O(n log n) in the instance at
** worst: every keyword is linear in what it looks at, annotation sets are hashed,
** uniqueItems sorts items by a hash. And it polls bounds->stop as it goes: every node
** visited and every byte scanned is counted as work (spend), and every POLL_WORK units,
** about 0.1 ms here, the caller is asked whether to stop. Work that is not counted is
** bounded by the schema (const, enum: the size of the schema's value) or by the
** instance's size under the tool_bytes cap (hashing one item for uniqueItems: 4 MiB of
** JSON in ~10 ms). Patterns run under PCRE2's match and depth limits.
*/
#define POLL_WORK 4096
#define KEY_SHOWN 64          /* bytes of a property name that a message or path shows */

/* A per-process random seed for the hashes the instance's contents reach (property
** names, uniqueItems), so that no instance can be built to collide. */
static _Atomic uint64_t hash_seed;

static uint64_t mix64 (uint64_t h) {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ULL;
  h ^= h >> 33;
  return h;
}

static uint64_t seed (void) {
  uint64_t v = atomic_load(&hash_seed);
  if (v != 0) return v;
  if (getrandom(&v, sizeof v, GRND_NONBLOCK) != (ssize_t)sizeof v)
    v = mix64((uint64_t)time(NULL) ^ (uint64_t)(uintptr_t)&v);
  v |= 1;
  uint64_t zero = 0;
  if (!atomic_compare_exchange_strong(&hash_seed, &zero, v)) v = zero;
  return v;
}

/* annotations of one instance, for unevaluatedProperties / unevaluatedItems */
typedef struct ev {
  const char **props;   /* a set of property names: open addressing, cp slots (2^k) */
  size_t np, cp;
  unsigned char *items;
  size_t ni;
  int allp, alli;
} ev;

typedef struct seg { const char *key; size_t idx; } seg;

typedef struct vctx {
  const tp_schema *s;
  tp_schema_errors *errs;       /* NULL: stop at the first failure */
  size_t keep_until;            /* errs keeps errors while count is below this */
  tp_schema_errors *top;        /* the caller's list, and its first error of this call */
  size_t top_from;
  uint64_t *seen;               /* hashes of the errors counted past the cap (emit) */
  size_t nseen, cseen;
  pcre2_match_data *md;
  int depth, plen, nscope, nrefs;
  uint64_t seed;
  uint64_t work, poll_at;       /* see spend */
  const tp_schema_bounds *bounds;
  int stopped;
  seg path[TP_SCHEMA_MAX_DEPTH + 1];
  const resource *scope[VDEPTH + 1];
  struct { const node *n; const json_t *inst; } refs[VDEPTH + 1];
} vctx;

/* Counts n units of work; every POLL_WORK units asks bounds->stop. -1: stop now (the
** caller unwinds as after an allocation failure; x->stopped tells them apart). */
static int spend (vctx *x, uint64_t n) {
  x->work += n;
  if (x->work < x->poll_at) return 0;
  x->poll_at = x->work + POLL_WORK;
  if (x->stopped) return -1;
  if (x->bounds && x->bounds->stop && x->bounds->stop(x->bounds->ud)) {
    x->stopped = 1;
    return -1;
  }
  return 0;
}

static size_t khash (const vctx *x, const char *k) { return (size_t)mix64(hstr(k) ^ x->seed); }

static int mark_prop (const vctx *x, ev *e, const char *k) {
  uint64_t sd = x->seed;
  if (!e || e->allp) return 0;
  if ((e->np + 1) * 2 > e->cp) {
    size_t nc = tp__grow_cap(e->cp, e->cp + 1, sizeof(char *), 16);
    const char **nv = nc ? calloc(nc, sizeof *nv) : NULL;
    if (!nv) return -1;
    for (size_t i = 0; i < e->cp; i++) {
      if (!e->props[i]) continue;
      size_t j = (size_t)mix64(hstr(e->props[i]) ^ sd) & (nc - 1);
      while (nv[j]) j = (j + 1) & (nc - 1);
      nv[j] = e->props[i];
    }
    free(e->props);
    e->props = nv;
    e->cp = nc;
  }
  for (size_t i = (size_t)mix64(hstr(k) ^ sd) & (e->cp - 1);; i = (i + 1) & (e->cp - 1)) {
    if (!e->props[i]) { e->props[i] = k; e->np++; return 0; }
    if (e->props[i] == k || strcmp(e->props[i], k) == 0) return 0;
  }
}

static int prop_marked (const vctx *x, const ev *e, const char *k) {
  if (e->allp) return 1;
  if (!e->cp) return 0;
  for (size_t i = khash(x, k) & (e->cp - 1);; i = (i + 1) & (e->cp - 1)) {
    if (!e->props[i]) return 0;
    if (e->props[i] == k || strcmp(e->props[i], k) == 0) return 1;
  }
}

static int mark_item (ev *e, size_t i, size_t n) {
  if (!e || e->alli) return 0;
  if (!e->items) {
    if (!(e->items = calloc(n ? n : 1, 1))) return -1;
    e->ni = n;
  }
  if (i < e->ni) e->items[i] = 1;
  return 0;
}

static int ev_merge (const vctx *x, ev *dst, const ev *src) {
  if (!dst) return 0;
  if (src->allp) dst->allp = 1;
  if (src->alli) dst->alli = 1;
  for (size_t i = 0; i < src->cp; i++)
    if (src->props[i] && mark_prop(x, dst, src->props[i]) < 0) return -1;
  for (size_t i = 0; i < src->ni; i++)
    if (src->items[i] && mark_item(dst, i, src->ni) < 0) return -1;
  return 0;
}

static void ev_free (ev *e) { free(e->props); free(e->items); }

static unsigned itype (const json_t *v) {
  switch (json_typeof(v)) {
    case JSON_NULL: return T_NULL;
    case JSON_TRUE: case JSON_FALSE: return T_BOOL;
    case JSON_INTEGER: return T_INT;
    case JSON_REAL: {
      double d = json_real_value(v);
      return d == floor(d) && isfinite(d) ? (T_NUM | T_INT) : T_NUM;
    }
    case JSON_STRING: return T_STR;
    case JSON_ARRAY: return T_ARR;
    default: return T_OBJ;
  }
}

static const char *tname (const json_t *v) {
  switch (json_typeof(v)) {
    case JSON_NULL: return "null";
    case JSON_TRUE: case JSON_FALSE: return "boolean";
    case JSON_INTEGER: return "integer";
    case JSON_REAL: return "number";
    case JSON_STRING: return "string";
    case JSON_ARRAY: return "array";
    default: return "object";
  }
}

/* -1, 0, 1 as a <, =, > b; exact for integers, and for integer against real */
static int numcmp (const json_t *a, const json_t *b) {
  if (json_is_integer(a) && json_is_integer(b)) {
    json_int_t x = json_integer_value(a), y = json_integer_value(b);
    return x < y ? -1 : x > y;
  }
  if (json_is_integer(a) || json_is_integer(b)) {
    int flip = json_is_integer(b);
    json_int_t i = json_integer_value(flip ? b : a);
    double d = json_real_value(flip ? a : b);
    int r;
    if (d >= 9223372036854775808.0) r = -1;
    else if (d < -9223372036854775808.0) r = 1;
    else {
      double f = floor(d);
      json_int_t fi = (json_int_t)f;
      if (i < fi) r = -1;
      else if (i > fi) r = 1;
      else r = d > f ? -1 : 0;
    }
    return flip ? -r : r;
  }
  double x = json_real_value(a), y = json_real_value(b);
  return x < y ? -1 : x > y;
}

/* JSON equality with 1 == 1.0 */
static int jeq (const json_t *a, const json_t *b) {
  if (json_is_number(a) && json_is_number(b)) return numcmp(a, b) == 0;
  if (json_typeof(a) != json_typeof(b)) return 0;
  switch (json_typeof(a)) {
    case JSON_STRING:
      return json_string_length(a) == json_string_length(b) &&
             memcmp(json_string_value(a), json_string_value(b), json_string_length(a)) == 0;
    case JSON_ARRAY: {
      size_t n = json_array_size(a);
      if (n != json_array_size(b)) return 0;
      for (size_t i = 0; i < n; i++)
        if (!jeq(json_array_get(a, i), json_array_get(b, i))) return 0;
      return 1;
    }
    case JSON_OBJECT: {
      if (json_object_size(a) != json_object_size(b)) return 0;
      const char *k;
      json_t *v;
      json_object_foreach((json_t *)a, k, v) {
        json_t *w = json_object_get(b, k);
        if (!w || !jeq(v, w)) return 0;
      }
      return 1;
    }
    default:
      return 1;
  }
}

/* a short rendering of a value for messages */
static void render (const json_t *v, char *buf, size_t cap, int full) {
  if (json_is_string(v)) {
    const char *s = json_string_value(v);
    size_t n = json_string_length(v), o = 0;
    buf[o++] = '"';
    for (size_t i = 0; i < n && o + 8 < cap; i++) {
      unsigned char ch = (unsigned char)s[i];
      if (i >= 60 && (ch & 0xC0) != 0x80) { memcpy(buf + o, "...", 3); o += 3; break; }
      if (ch == '"' || ch == '\\') { buf[o++] = '\\'; buf[o++] = (char)ch; }
      else if (ch < 32) o += (size_t)snprintf(buf + o, cap - o, "\\u%04x", ch);
      else buf[o++] = (char)ch;
    }
    buf[o++] = '"';
    buf[o] = 0;
    return;
  }
  if ((json_is_array(v) || json_is_object(v)) && !full) {
    snprintf(buf, cap, "%s", json_is_array(v) ? "an array" : "an object");
    return;
  }
  char *d = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY | JSON_SORT_KEYS | JSON_REAL_PRECISION(15));
  if (!d) { snprintf(buf, cap, "%s", tname(v)); return; }
  if (strlen(d) > 80 && cap > 84) { memcpy(d + 77, "...", 4); }
  snprintf(buf, cap, "%s", d);
  free(d);
}

static int is_ident (const char *k) {
  if (!((*k >= 'a' && *k <= 'z') || (*k >= 'A' && *k <= 'Z') || *k == '_' || *k == '$')) return 0;
  for (k++; *k; k++)
    if (!((*k >= 'a' && *k <= 'z') || (*k >= 'A' && *k <= 'Z') || (*k >= '0' && *k <= '9') ||
          *k == '_' || *k == '$'))
      return 0;
  return 1;
}

/* How many bytes of property name k a message or a path shows: all of it up to
** KEY_SHOWN bytes, else KEY_SHOWN cut back to a character boundary (then "..." follows,
** see KARG): a 4 MiB name must not become a 4 MiB message. */
static int kshown (const char *k) {
  size_t n = strnlen(k, KEY_SHOWN + 1);
  if (n <= KEY_SHOWN) return (int)n;
  n = KEY_SHOWN;
  while (n > 0 && ((unsigned char)k[n] & 0xC0) == 0x80) n--;
  return (int)n;
}
#define KFMT "%.*s%s"
#define KARG(k) kshown(k), (k), (strnlen((k), KEY_SHOWN + 1) > KEY_SHOWN ? "..." : "")

/* "$", "$.a[2]", "$[\"odd key\"]" */
static char *path_string (const vctx *x) {
  size_t cap = 2;
  for (int i = 0; i < x->plen; i++)
    cap += x->path[i].key ? (size_t)kshown(x->path[i].key) * 6 + 9 : 24;
  char *p = malloc(cap), *o = p;
  if (!p) return NULL;
  *o++ = '$';
  for (int i = 0; i < x->plen; i++) {
    const char *k = x->path[i].key;
    if (!k) { o += sprintf(o, "[%zu]", x->path[i].idx); continue; }
    size_t n = (size_t)kshown(k);
    int cut = k[n] != '\0';
    if (!cut && is_ident(k)) { *o++ = '.'; memcpy(o, k, n); o += n; continue; }
    *o++ = '[';
    *o++ = '"';
    for (const char *e = k + n; k < e; k++) {
      unsigned char ch = (unsigned char)*k;
      if (ch == '"' || ch == '\\') { *o++ = '\\'; *o++ = (char)ch; }
      else if (ch < 32) o += sprintf(o, "\\u%04x", ch);
      else *o++ = (char)ch;
    }
    if (cut) { memcpy(o, "...", 3); o += 3; }
    *o++ = '"';
    *o++ = ']';
  }
  *o = 0;
  return p;
}

static int emit (vctx *x, const char *kw, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* 64-bit hash of an error, for counting distinct ones past the cap */
static uint64_t err_hash (const vctx *x, const char *path, const char *kw, const char *msg) {
  uint64_t h = x->seed;
  for (const char *p = path; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211u;
  h = mix64(h ^ 1);
  for (const char *p = kw; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211u;
  h = mix64(h ^ 2);
  for (const char *p = msg; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211u;
  return mix64(h) | 1;  /* 0 marks an empty slot */
}

/* Records an error. The top-level list keeps the first keep_until distinct ones; past
** them an error is only counted in errs->more, once per distinct error up to SEEN_MAX of
** them (a schema that applies one subschema twice reports each failure twice), then
** every time. Sub-lists (anyOf branches, propertyNames) keep what their caller shows. */
#define SEEN_MAX 65536
static int emit (vctx *x, const char *kw, const char *fmt, ...) {
  tp_schema_errors *e = x->errs;
  if (!e) return 0;
  if (e != x->top && e->count >= x->keep_until) return 0;
  if (e == x->top && e->count >= x->keep_until && x->nseen >= SEEN_MAX) {
    e->more++;
    return 0;
  }
  if (spend(x, 8) < 0) return -1;
  char *msg = NULL, *path = path_string(x);
  va_list ap;
  va_start(ap, fmt);
  int r = vasprintf(&msg, fmt, ap);
  va_end(ap);
  if (r < 0) msg = NULL;
  if (!path || !msg) { free(path); free(msg); return -1; }
  int dup = 0;
  for (size_t i = x->top_from; e == x->top && i < e->count && !dup; i++)
    dup = strcmp(e->items[i].message, msg) == 0 && strcmp(e->items[i].path, path) == 0 &&
          strcmp(e->items[i].keyword, kw) == 0;
  if (!dup && e == x->top && e->count >= x->keep_until) {
    if ((x->nseen + 1) * 2 > x->cseen) {
      size_t nc = tp__grow_cap(x->cseen, x->cseen + 1, sizeof(uint64_t), 1024);
      uint64_t *nv = nc ? calloc(nc, sizeof *nv) : NULL;
      if (!nv) { free(path); free(msg); return -1; }
      for (size_t i = 0; i < x->cseen; i++) {
        if (!x->seen[i]) continue;
        size_t j = (size_t)x->seen[i] & (nc - 1);
        while (nv[j]) j = (j + 1) & (nc - 1);
        nv[j] = x->seen[i];
      }
      free(x->seen);
      x->seen = nv;
      x->cseen = nc;
    }
    uint64_t h = err_hash(x, path, kw, msg);
    size_t i = (size_t)h & (x->cseen - 1);
    while (x->seen[i] && x->seen[i] != h) i = (i + 1) & (x->cseen - 1);
    if (!x->seen[i]) { x->seen[i] = h; x->nseen++; e->more++; }
    free(path);
    free(msg);
    return 0;
  }
  if (dup || tp__grow(&e->items, &e->cap, e->count + 1, sizeof *e->items, 8) < 0) {
    free(path);
    free(msg);
    return dup ? 0 : -1;
  }
  tp_schema_error *it = &e->items[e->count];
  it->path = path;
  it->message = msg;
  it->keyword = xstrdup(kw);
  if (!it->keyword) { free(path); free(msg); return -1; }
  e->count++;
  return 0;
}

static int pmatch (vctx *x, const pcre2_code *re, const char *s, size_t n) {
  int rc = pcre2_match(re, (PCRE2_SPTR)s, n, 0, 0, x->md, x->s->mctx);
  if (rc >= 0) return 1;
  if (rc == PCRE2_ERROR_NOMATCH) return 0;
  return -2;  /* a match limit: too much backtracking */
}

static size_t ulen (const char *s, size_t n) {
  size_t c = 0;
  for (size_t i = 0; i < n; i++) c += ((unsigned char)s[i] & 0xC0) != 0x80;
  return c;
}

static int v_node (vctx *x, const node *n, const json_t *inst, ev *e, const char *via);

#define FAIL(...) do { ok = 0; if (!x->errs) goto done; \
    if (emit(x, __VA_ARGS__) < 0) { ok = -1; goto done; } } while (0)
#define CHECK_SUB(call) do { int r_ = (call); if (r_ < 0) { ok = -1; goto done; } \
    if (r_ == 0) { ok = 0; if (!x->errs) goto done; } } while (0)
#define OOM_IF(cond) do { if (cond) { ok = -1; goto done; } } while (0)

static int push_key (vctx *x, const char *k) {
  if (x->plen >= TP_SCHEMA_MAX_DEPTH) return -1;
  x->path[x->plen].key = k;
  x->path[x->plen++].idx = 0;
  return 0;
}

static int push_idx (vctx *x, size_t i) {
  if (x->plen >= TP_SCHEMA_MAX_DEPTH) return -1;
  x->path[x->plen].key = NULL;
  x->path[x->plen++].idx = i;
  return 0;
}

/* validate a child instance (a property value or an item) */
static int v_child (vctx *x, const node *n, const json_t *inst, const char *key, size_t idx, const char *via) {
  if ((key ? push_key(x, key) : push_idx(x, idx)) < 0) {
    if (!x->errs) return 0;
    return emit(x, via, "value nested too deeply (more than %d levels)", TP_SCHEMA_MAX_DEPTH) < 0 ? -1 : 0;
  }
  int r = v_node(x, n, inst, NULL, via);
  x->plen--;
  return r;
}

/* the message for a false schema reached through keyword via */
static int emit_false (vctx *x, const char *via) {
  const seg *last = x->plen ? &x->path[x->plen - 1] : NULL;
  const char *kw = via ? via : "false";
  if (last && last->key && via && (strcmp(via, "additionalProperties") == 0 ||
                                   strcmp(via, "unevaluatedProperties") == 0 ||
                                   strcmp(via, "properties") == 0 || strcmp(via, "patternProperties") == 0))
    return emit(x, kw, "property \"" KFMT "\" is not allowed", KARG(last->key));
  if (last && !last->key && via && (strcmp(via, "items") == 0 || strcmp(via, "additionalItems") == 0 ||
                                    strcmp(via, "unevaluatedItems") == 0 || strcmp(via, "prefixItems") == 0))
    return emit(x, kw, "item %zu is not allowed", last->idx);
  return emit(x, kw, "no value is allowed here (the schema is false)");
}

/* a summary of the failed branches of anyOf/oneOf: the first error of each */
static int emit_branches (vctx *x, const char *kw, const char *head, const tp_schema_errors *sub,
                          const size_t *starts, size_t nb) {
  size_t cap = 1200, o = 0;
  char *m = malloc(cap);
  if (!m) return -1;
  o += (size_t)snprintf(m, cap, "%s", head);
  char *here = path_string(x);
  if (!here) { free(m); return -1; }
  for (size_t b = 0; b < nb && o + 40 < cap; b++) {
    size_t s = starts[b], end = b + 1 < nb ? starts[b + 1] : sub->count;
    if (s >= end) continue;
    const tp_schema_error *e = &sub->items[s];
    if (strcmp(e->path, here) == 0)
      o += (size_t)snprintf(m + o, cap - o, "%s[%zu] %s", b ? "; " : " ", b, e->message);
    else
      o += (size_t)snprintf(m + o, cap - o, "%s[%zu] at %s: %s", b ? "; " : " ", b, e->path, e->message);
    if (o >= cap) { o = cap - 1; memcpy(m + cap - 4, "...", 4); }
  }
  free(here);
  int r = emit(x, kw, "%s", m);
  free(m);
  return r;
}

static int v_anyof (vctx *x, const node *const *v, size_t nv, const json_t *inst, ev *le, int one) {
  tp_schema_errors sub = {0}, *saved = x->errs;
  size_t starts[64], nstart = 0;
  int matched = 0, first = -1, second = -1, ok = 1;
  size_t keep = x->keep_until;
  for (size_t i = 0; i < nv; i++) {
    ev be = {0};
    if (nstart < 64) starts[nstart++] = sub.count;
    x->errs = saved ? &sub : NULL;
    x->keep_until = sub.count + 1;  /* the message shows each branch's first error */
    int r = v_node(x, v[i], inst, le ? &be : NULL, one ? "oneOf" : "anyOf");
    x->errs = saved;
    x->keep_until = keep;
    if (r < 0) { ev_free(&be); ok = -1; goto done; }
    if (r) {
      matched++;
      if (first < 0) first = (int)i; else if (second < 0) second = (int)i;
      if (ev_merge(x, le, &be) < 0) { ev_free(&be); ok = -1; goto done; }
    }
    ev_free(&be);
    if (r && !one && !le) break;
    if (one && matched > 1 && !saved) break;
  }
  if (!one && matched == 0) {
    ok = 0;
    if (saved && emit_branches(x, "anyOf", "expected a value matching at least one schema of anyOf, none matched:",
                               &sub, starts, nstart) < 0)
      ok = -1;
  } else if (one && matched == 0) {
    ok = 0;
    if (saved && emit_branches(x, "oneOf", "expected a value matching exactly one schema of oneOf, none matched:",
                               &sub, starts, nstart) < 0)
      ok = -1;
  } else if (one && matched > 1) {
    ok = 0;
    if (saved && emit(x, "oneOf", "expected a value matching exactly one schema of oneOf, but it matches "
                      "%d of them (at least schemas %d and %d)", matched, first, second) < 0)
      ok = -1;
  }
done:
  tp__schema_errors_clear(&sub);
  return ok;
}

static int v_string (vctx *x, const node *n, const json_t *inst) {
  int ok = 1;
  char vb[160];
  const char *s = json_string_value(inst);
  size_t len = json_string_length(inst);
  if ((n->maxLength >= 0 || n->minLength >= 0 || n->pattern || n->fmt_assert) &&
      spend(x, len / 64) < 0) { ok = -1; goto done; }
  if (n->maxLength >= 0 || n->minLength >= 0) {
    size_t cl = ulen(s, len);
    if (n->maxLength >= 0 && cl > (size_t)n->maxLength)
      FAIL("maxLength", "expected at most %lld character%s, got %zu", n->maxLength, n->maxLength == 1 ? "" : "s", cl);
    if (n->minLength >= 0 && cl < (size_t)n->minLength)
      FAIL("minLength", "expected at least %lld character%s, got %zu", n->minLength, n->minLength == 1 ? "" : "s", cl);
  }
  if (n->pattern) {
    int r = pmatch(x, n->pattern, s, len);
    if (r == -2) { render(inst, vb, sizeof vb, 0); FAIL("pattern", "pattern /%s/ is too expensive to match against %s", n->pattern_src, vb); }
    else if (!r) { render(inst, vb, sizeof vb, 0); FAIL("pattern", "expected a string matching /%s/, got %s", n->pattern_src, vb); }
  }
  if (n->fmt_assert && tp__schema_format_check(n->format, s, len) == 0) {
    render(inst, vb, sizeof vb, 0);
    FAIL("format", "expected a valid %s, got %s", n->format, vb);
  }
done:
  return ok;
}

static int v_number (vctx *x, const node *n, const json_t *inst) {
  int ok = 1;
  char vb[160], lb[160];
  if (n->multipleOf) {
    int mult;
    if (json_is_integer(inst) && json_is_integer(n->multipleOf)) {
      mult = json_integer_value(inst) % json_integer_value(n->multipleOf) == 0;
    } else {
      double a = json_number_value(inst), m = json_number_value(n->multipleOf), q = a / m;
      mult = isfinite(q) && fabs(q - nearbyint(q)) <= 8 * DBL_EPSILON * fmax(1.0, fabs(q));
    }
    if (!mult) { render(inst, vb, sizeof vb, 0); render(n->multipleOf, lb, sizeof lb, 0); FAIL("multipleOf", "expected a multiple of %s, got %s", lb, vb); }
  }
  if (n->maximum && numcmp(inst, n->maximum) > 0) { render(inst, vb, sizeof vb, 0); render(n->maximum, lb, sizeof lb, 0); FAIL("maximum", "expected at most %s, got %s", lb, vb); }
  if (n->xmax && numcmp(inst, n->xmax) >= 0) { render(inst, vb, sizeof vb, 0); render(n->xmax, lb, sizeof lb, 0); FAIL("exclusiveMaximum", "expected less than %s, got %s", lb, vb); }
  if (n->minimum && numcmp(inst, n->minimum) < 0) { render(inst, vb, sizeof vb, 0); render(n->minimum, lb, sizeof lb, 0); FAIL("minimum", "expected at least %s, got %s", lb, vb); }
  if (n->xmin && numcmp(inst, n->xmin) <= 0) { render(inst, vb, sizeof vb, 0); render(n->xmin, lb, sizeof lb, 0); FAIL("exclusiveMinimum", "expected greater than %s, got %s", lb, vb); }
done:
  return ok;
}

/* A hash of v that values equal under jeq share (1 and 1.0 alike, objects whatever the
** order of their keys). Below 64 levels a value hashes by its type only. *work counts
** the nodes hashed. */
static uint64_t jhash (const json_t *v, uint64_t sd, int depth, uint64_t *work) {
  ++*work;
  json_int_t iv;
  switch (json_typeof(v)) {
    case JSON_NULL: return mix64(sd ^ 1);
    case JSON_TRUE: return mix64(sd ^ 2);
    case JSON_FALSE: return mix64(sd ^ 3);
    case JSON_INTEGER:
      iv = json_integer_value(v);
    integer:
      return mix64(sd ^ 4 ^ mix64((uint64_t)iv));
    case JSON_REAL: {
      double d = json_real_value(v);
      if (d == floor(d) && d >= -9223372036854775808.0 && d < 9223372036854775808.0) {
        iv = (json_int_t)d;
        goto integer;
      }
      uint64_t bits;
      memcpy(&bits, &d, sizeof bits);
      return mix64(sd ^ 5 ^ mix64(bits));
    }
    case JSON_STRING: {
      const unsigned char *p = (const unsigned char *)json_string_value(v);
      size_t n = json_string_length(v);
      uint64_t h = sd ^ 6 ^ n;
      *work += n / 64;
      for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211u;
      return mix64(h);
    }
    case JSON_ARRAY: {
      size_t n = json_array_size(v);
      uint64_t h = mix64(sd ^ 7 ^ n);
      if (depth >= 64) return h;
      for (size_t i = 0; i < n; i++) h = mix64(h ^ jhash(json_array_get(v, i), sd, depth + 1, work));
      return h;
    }
    default: {
      size_t n = json_object_size(v);
      uint64_t h = mix64(sd ^ 8 ^ n), sum = 0;
      if (depth >= 64) return h;
      const char *k;
      json_t *m;
      json_object_foreach((json_t *)v, k, m) {  /* order-free: a sum over the members */
        uint64_t kh = mix64(hstr(k) ^ sd);
        sum += mix64(kh ^ (jhash(m, sd, depth + 1, work) * 31));
      }
      return mix64(h ^ sum);
    }
  }
}

typedef struct { uint64_t h; size_t i; } hitem;  /* i: index + 1; 0 = empty slot */

/*
** uniqueItems: the first equal pair of items (the smallest i, then the smallest j) in
** *pi < *pj; returns 1 when there is one, 0 when all items differ, -1 out of memory or
** stopped. Each item goes, in order, into a hash table keyed by jhash, holding the first
** item of each distinct value: an item is compared only with the items of equal hash
** there, one comparison unless the (seeded, 64-bit) hash collides. O(n) plus the size of
** the items, polled per item, where comparing every pair was O(n^2) (20 k items took
** 4.7 s here, 100 k would take two minutes).
*/
static int first_duplicate (vctx *x, const json_t *arr, size_t n, size_t *pi, size_t *pj) {
  if (n <= 8) {  /* small: pairwise is cheaper */
    for (size_t i = 0; i < n; i++)
      for (size_t j = i + 1; j < n; j++)
        if (jeq(json_array_get(arr, i), json_array_get(arr, j))) { *pi = i; *pj = j; return 1; }
    return 0;
  }
  size_t cap = 16;
  while (cap < 2 * n) cap *= 2;
  hitem *t = calloc(cap, sizeof *t);
  unsigned char *paired = calloc(n, 1);  /* the first item of a value has its pair */
  if (!t || !paired) { free(t); free(paired); return -1; }
  int found = 0, rc = 0;
  *pi = *pj = 0;
  for (size_t j = 0; j < n; j++) {
    const json_t *item = json_array_get(arr, j);
    uint64_t w = 1, h = jhash(item, x->seed, 0, &w);
    size_t k = (size_t)h & (cap - 1);
    for (; t[k].i; k = (k + 1) & (cap - 1)) {
      w++;
      if (t[k].h != h || !jeq(json_array_get(arr, t[k].i - 1), item)) continue;
      size_t i = t[k].i - 1;
      if (!paired[i]) {  /* j is the second item of this value */
        paired[i] = 1;
        if (!found || i < *pi) { *pi = i; *pj = j; found = 1; }
        if (!x->errs) goto out;
      }
      break;
    }
    if (!t[k].i) { t[k].h = h; t[k].i = j + 1; }
    if (spend(x, w) < 0) { rc = -1; goto out; }
  }
out:
  free(t);
  free(paired);
  return rc < 0 ? -1 : found;
}

static int v_array (vctx *x, const node *n, const json_t *inst, ev *le) {
  int ok = 1;
  size_t sz = json_array_size(inst);
  if (n->maxItems >= 0 && sz > (size_t)n->maxItems)
    FAIL("maxItems", "expected at most %lld item%s, got %zu", n->maxItems, n->maxItems == 1 ? "" : "s", sz);
  if (n->minItems >= 0 && sz < (size_t)n->minItems)
    FAIL("minItems", "expected at least %lld item%s, got %zu", n->minItems, n->minItems == 1 ? "" : "s", sz);
  for (size_t i = 0; i < n->nprefix && i < sz; i++) {
    CHECK_SUB(v_child(x, n->prefix[i], json_array_get(inst, i), NULL, i, n->prefix_kw));
    OOM_IF(mark_item(le, i, sz) < 0);
  }
  if (n->items) {
    for (size_t i = n->nprefix; i < sz; i++)
      CHECK_SUB(v_child(x, n->items, json_array_get(inst, i), NULL, i, n->items_kw));
    if (le && sz > n->nprefix) le->alli = 1;
  }
  if (n->contains) {
    size_t count = 0;
    tp_schema_errors *saved = x->errs;
    x->errs = NULL;
    for (size_t i = 0; i < sz; i++) {
      int r = v_child(x, n->contains, json_array_get(inst, i), NULL, i, "contains");
      if (r < 0) { x->errs = saved; ok = -1; goto done; }
      if (r) {
        count++;
        if (mark_item(le, i, sz) < 0) { x->errs = saved; ok = -1; goto done; }
        if (!le && !n->has_max_contains && count >= (size_t)n->minContains) break;
      }
    }
    x->errs = saved;
    if (count < (size_t)n->minContains) {
      if (n->minContains == 1) FAIL("contains", "expected at least one item matching the \"contains\" schema, found none");
      else FAIL("minContains", "expected at least %lld items matching the \"contains\" schema, found %zu", n->minContains, count);
    }
    if (n->has_max_contains && count > (size_t)n->maxContains)
      FAIL("maxContains", "expected at most %lld item%s matching the \"contains\" schema, found %zu",
           n->maxContains, n->maxContains == 1 ? "" : "s", count);
  }
  if (n->unique && sz > 1) {
    size_t i = 0, j = 0;
    int r = first_duplicate(x, inst, sz, &i, &j);
    OOM_IF(r < 0);
    if (r) FAIL("uniqueItems", "expected unique items, but items %zu and %zu are equal", i, j);
  }
done:
  return ok;
}

static const node *find_prop (const node *n, const char *k) {
  size_t lo = 0, hi = n->nprops;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    int c = strcmp(k, n->props[mid].name);
    if (c == 0) return n->props[mid].n;
    if (c < 0) hi = mid; else lo = mid + 1;
  }
  return NULL;
}

static int v_object (vctx *x, const node *n, const json_t *inst, ev *le) {
  int ok = 1;
  size_t sz = json_object_size(inst);
  json_t *obj = (json_t *)inst, *v;
  const char *k;
  if (n->maxProps >= 0 && sz > (size_t)n->maxProps)
    FAIL("maxProperties", "expected at most %lld propert%s, got %zu", n->maxProps, n->maxProps == 1 ? "y" : "ies", sz);
  if (n->minProps >= 0 && sz < (size_t)n->minProps)
    FAIL("minProperties", "expected at least %lld propert%s, got %zu", n->minProps, n->minProps == 1 ? "y" : "ies", sz);
  for (size_t i = 0; i < n->nrequired; i++)
    if (!json_object_get(inst, n->required[i])) FAIL("required", "missing required property \"%s\"", n->required[i]);
  for (size_t i = 0; i < n->ndepreq; i++) {
    if (!json_object_get(inst, n->depreq[i].name)) continue;
    for (size_t j = 0; j < n->depreq[i].n; j++)
      if (!json_object_get(inst, n->depreq[i].req[j]))
        FAIL(n->depreq_kw, "missing property \"%s\", required when \"%s\" is present", n->depreq[i].req[j], n->depreq[i].name);
  }
  /* one pass over the instance's keys when they all need looking at anyway */
  int one_pass = n->npprops || n->addprops || n->propnames;
  if (!one_pass) {
    for (size_t i = 0; i < n->nprops; i++) {
      if (!(v = json_object_get(inst, n->props[i].name))) continue;
      CHECK_SUB(v_child(x, n->props[i].n, v, n->props[i].name, 0, "properties"));
      OOM_IF(mark_prop(x, le, n->props[i].name) < 0);
    }
  } else {
    json_object_foreach(obj, k, v) {
      const node *pn = n->nprops ? find_prop(n, k) : NULL;
      int hit = pn != NULL;
      if (pn) {
        CHECK_SUB(v_child(x, pn, v, k, 0, "properties"));
        OOM_IF(mark_prop(x, le, k) < 0);
      }
      for (size_t i = 0; i < n->npprops; i++) {
        int r = pmatch(x, n->pprops[i].re, k, strlen(k));
        if (r == -2) FAIL("patternProperties", "pattern /%s/ is too expensive to match against property \"" KFMT "\"", n->pprops[i].src, KARG(k));
        if (r != 1) continue;
        hit = 1;
        CHECK_SUB(v_child(x, n->pprops[i].n, v, k, 0, "patternProperties"));
        OOM_IF(mark_prop(x, le, k) < 0);
      }
      if (!hit && n->addprops) {
        if (n->addprops->boolv == 0) {
          ok = 0;
          if (!x->errs) goto done;
          OOM_IF(push_key(x, k) < 0);
          char allowed[300];
          size_t o = 0;
          allowed[0] = 0;
          for (size_t i = 0; i < n->nprops && o + 40 < sizeof allowed; i++)
            o += (size_t)snprintf(allowed + o, sizeof allowed - o, "%s\"%s\"", i ? ", " : "", n->props[i].name);
          int r = n->nprops ? emit(x, "additionalProperties", "unexpected property \"" KFMT "\" (allowed: %s%s)", KARG(k), allowed,
                                   o + 40 >= sizeof allowed ? ", ..." : "")
                            : emit(x, "additionalProperties", "unexpected property \"" KFMT "\"", KARG(k));
          x->plen--;
          OOM_IF(r < 0);
        } else {
          CHECK_SUB(v_child(x, n->addprops, v, k, 0, "additionalProperties"));
        }
        OOM_IF(mark_prop(x, le, k) < 0);
      }
      if (n->propnames) {
        json_t *ks = json_string_nocheck(k);
        OOM_IF(!ks);
        tp_schema_errors sub = {0}, *saved = x->errs;
        size_t keep = x->keep_until;
        x->errs = saved ? &sub : NULL;
        x->keep_until = 1;  /* the message shows the first */
        int r = v_node(x, n->propnames, ks, NULL, "propertyNames");
        x->errs = saved;
        x->keep_until = keep;
        json_decref(ks);
        if (r < 0) { tp__schema_errors_clear(&sub); ok = -1; goto done; }
        if (r == 0) {
          ok = 0;
          if (saved) {
            r = emit(x, "propertyNames", "invalid property name \"" KFMT "\": %s", KARG(k),
                     sub.count ? sub.items[0].message : "not allowed");
            tp__schema_errors_clear(&sub);
            OOM_IF(r < 0);
          } else goto done;
        }
        tp__schema_errors_clear(&sub);
      }
    }
  }
  for (size_t i = 0; i < n->ndepschemas; i++)
    if (json_object_get(inst, n->depschemas[i].name))
      CHECK_SUB(v_node(x, n->depschemas[i].n, inst, le, n->depschema_kw));
done:
  return ok;
}

static int follow (vctx *x, const node *t, const json_t *inst, ev *le, const char *kw) {
  for (int i = 0; i < x->nrefs; i++)
    if (x->refs[i].n == t && x->refs[i].inst == inst) {
      if (!x->errs) return 0;
      return emit(x, kw, "infinite recursion: the schema refers to itself without consuming the value") < 0 ? -1 : 0;
    }
  if (x->nrefs >= VDEPTH) {
    if (!x->errs) return 0;
    return emit(x, kw, "schema references nested too deeply") < 0 ? -1 : 0;
  }
  x->refs[x->nrefs].n = t;
  x->refs[x->nrefs++].inst = inst;
  int r = v_node(x, t, inst, le, kw);
  x->nrefs--;
  return r;
}

/* Validate inst against n. Returns 1 valid, 0 invalid, -1 out of memory. e (may be NULL)
   collects the annotations unevaluated* needs; via names the keyword that applied n. */
static int v_node (vctx *x, const node *n, const json_t *inst, ev *e, const char *via) {
  if (n->boolv >= 0) {
    if (n->boolv) return 1;
    if (!x->errs) return 0;
    return emit_false(x, via) < 0 ? -1 : 0;
  }
  if (x->depth >= VDEPTH) {
    if (!x->errs) return 0;
    return emit(x, via ? via : "$ref", "schema recursion too deep (more than %d levels)", VDEPTH) < 0 ? -1 : 0;
  }
  if (spend(x, 1) < 0) return -1;
  x->depth++;
  int pushed = 0;
  if (x->nscope == 0 || x->scope[x->nscope - 1] != n->res) {
    x->scope[x->nscope++] = n->res;
    pushed = 1;
  }
  ev local = {0}, *le = e;
  if (n->uneval_props || n->uneval_items) le = &local;
  int ok = 1;
  char vb[160], lb[300];
  unsigned t = itype(inst);

  if (n->ref) CHECK_SUB(follow(x, n->ref, inst, le, "$ref"));
  if (n->dynref) {
    const node *target = n->dynref;
    if (n->dyn_name) {
      for (int i = 0; i < x->nscope; i++) {
        const resource *r = x->scope[i];
        for (size_t k = 0; k < r->ndyn; k++)
          if (strcmp(r->dyn[k].name, n->dyn_name) == 0) { target = r->dyn[k].n; goto found; }
      }
    found:;
    }
    CHECK_SUB(follow(x, target, inst, le, "$dynamicRef"));
  }
  if (n->types && !(n->types & t)) {
    size_t o = 0;
    for (size_t i = 0; i < 7; i++) {
      if (i == 2 && (n->types & T_NUM)) continue;
      if ((n->types & type_bits[i]) == type_bits[i])
        o += (size_t)snprintf(lb + o, sizeof lb - o, "%s%s", o ? " or " : "", type_names[i]);
    }
    render(inst, vb, sizeof vb, 0);
    if (json_is_array(inst) || json_is_object(inst) || json_is_null(inst)) FAIL("type", "expected %s, got %s", lb, tname(inst));
    else FAIL("type", "expected %s, got %s %s", lb, tname(inst), vb);
  }
  if (n->const_ && !jeq(inst, n->const_)) {
    render(n->const_, lb, sizeof lb, 1);
    render(inst, vb, sizeof vb, 0);
    FAIL("const", "expected %s, got %s", lb, vb);
  }
  if (n->enum_) {
    size_t ne = json_array_size(n->enum_), i;
    for (i = 0; i < ne; i++)
      if (jeq(inst, json_array_get(n->enum_, i))) break;
    if (i == ne && x->errs) {
      size_t o = 0;
      lb[0] = 0;
      for (i = 0; i < ne && o + 60 < sizeof lb; i++) {
        render(json_array_get(n->enum_, i), vb, sizeof vb, 1);
        o += (size_t)snprintf(lb + o, sizeof lb - o, "%s%s", i ? ", " : "", vb);
      }
      if (i < ne) snprintf(lb + o, sizeof lb - o, ", ... (%zu values)", ne);
      render(inst, vb, sizeof vb, 0);
      FAIL("enum", "expected one of %s; got %s", lb, vb);
    } else if (i == ne) {
      FAIL("enum", "not in enum");
    }
  }
  if (t & T_STR) CHECK_SUB(v_string(x, n, inst));
  else if (t & T_NUM || t & T_INT) CHECK_SUB(v_number(x, n, inst));
  else if (t & T_ARR) CHECK_SUB(v_array(x, n, inst, le));
  else if (t & T_OBJ) CHECK_SUB(v_object(x, n, inst, le));

  for (size_t i = 0; i < n->nall; i++) CHECK_SUB(v_node(x, n->allOf[i], inst, le, "allOf"));
  if (n->nany) CHECK_SUB(v_anyof(x, (const node *const *)n->anyOf, n->nany, inst, le, 0));
  if (n->none) CHECK_SUB(v_anyof(x, (const node *const *)n->oneOf, n->none, inst, le, 1));
  if (n->not_) {
    tp_schema_errors *saved = x->errs;
    x->errs = NULL;
    int r = v_node(x, n->not_, inst, NULL, "not");
    x->errs = saved;
    if (r < 0) { ok = -1; goto done; }
    if (r) FAIL("not", "expected a value that does not match the \"not\" schema");
  }
  if (n->if_) {
    ev ie = {0};
    tp_schema_errors *saved = x->errs;
    x->errs = NULL;
    int r = v_node(x, n->if_, inst, le ? &ie : NULL, "if");
    x->errs = saved;
    if (r > 0 && ev_merge(x, le, &ie) < 0) r = -1;
    ev_free(&ie);
    if (r < 0) { ok = -1; goto done; }
    if (r && n->then_) CHECK_SUB(v_node(x, n->then_, inst, le, "then"));
    if (!r && n->else_) CHECK_SUB(v_node(x, n->else_, inst, le, "else"));
  }
  if (n->uneval_items && (t & T_ARR) && !local.alli) {
    size_t sz = json_array_size(inst);
    for (size_t i = 0; i < sz; i++) {
      if (local.items && i < local.ni && local.items[i]) continue;
      CHECK_SUB(v_child(x, n->uneval_items, json_array_get(inst, i), NULL, i, "unevaluatedItems"));
    }
    local.alli = 1;
  }
  if (n->uneval_props && (t & T_OBJ) && !local.allp) {
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)inst, k, v) {
      if (prop_marked(x, &local, k)) continue;
      if (n->uneval_props->boolv == 0) {
        ok = 0;
        if (!x->errs) goto done;
        OOM_IF(push_key(x, k) < 0);
        int r = emit(x, "unevaluatedProperties", "unexpected property \"" KFMT "\"", KARG(k));
        x->plen--;
        OOM_IF(r < 0);
      } else {
        CHECK_SUB(v_child(x, n->uneval_props, v, k, 0, "unevaluatedProperties"));
      }
    }
    local.allp = 1;
  }
done:
  if (le == &local) {
    if (ok > 0 && e && ev_merge(x, e, &local) < 0) ok = -1;
    ev_free(&local);
  }
  if (pushed) x->nscope--;
  x->depth--;
  return ok;
}

/* natural order: digit runs compare by value, so "$[2]" sorts before "$[10]" */
static int natcmp (const char *a, const char *b) {
  while (*a && *b) {
    if (*a >= '0' && *a <= '9' && *b >= '0' && *b <= '9') {
      const char *ea = a, *eb = b;
      while (*ea >= '0' && *ea <= '9') ea++;
      while (*eb >= '0' && *eb <= '9') eb++;
      if (ea - a != eb - b) return ea - a < eb - b ? -1 : 1;
      int c = strncmp(a, b, (size_t)(ea - a));
      if (c) return c;
      a = ea;
      b = eb;
      continue;
    }
    if (*a != *b) return (unsigned char)*a < (unsigned char)*b ? -1 : 1;
    a++;
    b++;
  }
  return *a ? 1 : *b ? -1 : 0;
}

static int errcmp (const void *pa, const void *pb) {
  const tp_schema_error *a = pa, *b = pb;
  int c = natcmp(a->path, b->path);
  if (!c) c = strcmp(a->keyword, b->keyword);
  if (!c) c = strcmp(a->message, b->message);
  return c;
}

static void sort_errors (tp_schema_errors *e, size_t from) {
  if (e->count - from < 2) return;
  qsort(e->items + from, e->count - from, sizeof *e->items, errcmp);
  size_t o = from + 1;
  for (size_t i = from + 1; i < e->count; i++) {
    if (errcmp(&e->items[i], &e->items[o - 1]) == 0) {
      free(e->items[i].path);
      free(e->items[i].keyword);
      free(e->items[i].message);
    } else {
      e->items[o++] = e->items[i];
    }
  }
  e->count = o;
}

int tp__schema_validate_bounded (const tp_schema *s, const json_t *instance,
                                tp_schema_errors *errs, const tp_schema_bounds *b) {
  if (!s || !instance || !s->root) return -1;
  vctx *x, xs;
  x = &xs;
  x->s = s;
  x->errs = errs;
  x->depth = x->plen = x->nscope = x->nrefs = 0;
  x->md = NULL;
  x->seed = seed();
  x->work = 0;
  x->poll_at = POLL_WORK;
  x->bounds = b;
  x->stopped = 0;
  size_t max = b && b->max_errors ? b->max_errors : TP_SCHEMA_MAX_ERRORS;
  size_t from = errs ? errs->count : 0, more0 = errs ? errs->more : 0;
  x->keep_until = from + max;
  x->top = errs;
  x->top_from = from;
  x->seen = NULL;
  x->nseen = x->cseen = 0;
  int own_md = 0;
  if (s->npatterns) {
    if (!atomic_flag_test_and_set(&s->mc->busy)) {
      x->md = s->mc->md;
    } else {
      if (!(x->md = pcre2_match_data_create(1, NULL))) return -1;
      own_md = 1;
    }
  }
  int r = v_node(x, s->root, instance, NULL, NULL);
  free(x->seen);
  if (own_md) pcre2_match_data_free(x->md);
  else if (x->md) atomic_flag_clear(&s->mc->busy);
  if (x->stopped) r = -2;
  if (errs) {
    if (r == 0) sort_errors(errs, from);
    else if (r < 0) {
      for (size_t i = from; i < errs->count; i++) {
        free(errs->items[i].path);
        free(errs->items[i].keyword);
        free(errs->items[i].message);
      }
      errs->count = from;
      errs->more = more0;
    }
    else errs->more = more0;
  }
  return r;
}

int tp__schema_validate (const tp_schema *s, const json_t *instance, tp_schema_errors *errs) {
  return tp__schema_validate_bounded(s, instance, errs, NULL);
}

void tp__schema_errors_text (const tp_schema_errors *errs, size_t max_shown, char *buf,
                            size_t len) {
  if (buf == NULL || len == 0) return;
  buf[0] = '\0';
  if (errs == NULL) return;
  size_t o = 0, shown = 0;
  for (size_t i = 0; i < errs->count && i < max_shown && o < len; i++, shown++) {
    int n = snprintf(buf + o, len - o, "%s%s: %s", i ? "; " : "", errs->items[i].path,
                     errs->items[i].message);
    if (n < 0) break;
    o += (size_t)n;
  }
  size_t rest = errs->count - shown + errs->more;
  if (rest && o < len) {
    int n = snprintf(buf + o, len - o, "; and %zu more", rest);
    if (n > 0) o += (size_t)n;
  }
  if (o >= len && len > 4) memcpy(buf + len - 4, "...", 4);
}

void tp__schema_errors_clear (tp_schema_errors *errs) {
  if (!errs) return;
  for (size_t i = 0; i < errs->count; i++) {
    free(errs->items[i].path);
    free(errs->items[i].keyword);
    free(errs->items[i].message);
  }
  free(errs->items);
  errs->items = NULL;
  errs->count = errs->cap = errs->more = 0;
}

/* ---- empty tables where the schema wants an array (schema.h) ----------------------- */

#define EMPTY_DEPTH 64
#define EMPTY_WORK 20000

typedef struct empty_walk {
  const json_t *root;
  long work;
  int (*keep)(const json_t *o, void *ud);
  void *ud;
} empty_walk;

const json_t *tp__schema_deref (const json_t *s, const json_t *root, int *hops) {
  while (json_is_object(s) && (*hops)++ < EMPTY_DEPTH) {
    const char *ref = json_string_value(json_object_get(s, "$ref"));
    if (ref == NULL || ref[0] != '#') return s;
    const json_t *at = root;
    const char *p = ref + 1;
    while (*p == '/' && at != NULL) {
      char part[128];
      size_t n = 0;
      for (p++; *p && *p != '/' && n < sizeof part - 1; p++) {
        if (p[0] == '~' && p[1] == '1') { part[n++] = '/'; p++; }
        else if (p[0] == '~' && p[1] == '0') { part[n++] = '~'; p++; }
        else part[n++] = *p;
      }
      part[n] = '\0';
      at = json_is_array(at) ? json_array_get(at, strtoul(part, NULL, 10))
                             : json_object_get(at, part);
    }
    if (at == NULL || at == s) return s;
    s = at;
  }
  return s;
}

static int empty_wants_array (const json_t *s, empty_walk *w, int depth) {
  int hops = 0;
  if (--w->work <= 0) return 0;
  s = tp__schema_deref(s, w->root, &hops);
  if (!json_is_object(s) || depth > EMPTY_DEPTH) return 0;
  const json_t *t = json_object_get(s, "type");
  if (json_is_string(t)) return strcmp(json_string_value(t), "array") == 0;
  if (json_is_array(t)) {
    int arr = 0, obj = 0;
    size_t i;
    const json_t *one;
    json_array_foreach(t, i, one) {
      const char *n = json_string_value(one);
      if (n && strcmp(n, "array") == 0) arr = 1;
      if (n && strcmp(n, "object") == 0) obj = 1;
    }
    return arr && !obj;
  }
  size_t i;
  const json_t *one;
  json_array_foreach(json_object_get(s, "allOf"), i, one)
    if (empty_wants_array(one, w, depth + 1)) return 1;
  return 0;
}

static void empty_walk_value (json_t *v, const json_t *s, empty_walk *w, int depth);

/* The replacement of v (of schema sub): an empty array, or NULL after walking it. */
static json_t *empty_replace (json_t *v, const json_t *sub, empty_walk *w, int depth) {
  if (sub == NULL) return NULL;
  if (json_is_object(v) && json_object_size(v) == 0) {
    if (w->keep != NULL && w->keep(v, w->ud)) return NULL;
    return empty_wants_array(sub, w, depth) ? json_array() : NULL;
  }
  if (json_is_object(v) || json_is_array(v)) empty_walk_value(v, sub, w, depth + 1);
  return NULL;
}

static void empty_walk_value (json_t *v, const json_t *s, empty_walk *w, int depth) {
  int hops = 0;
  if (--w->work <= 0) return;
  s = tp__schema_deref(s, w->root, &hops);
  if (!json_is_object(s) || depth > EMPTY_DEPTH) return;
  size_t i;
  const json_t *one;
  json_array_foreach(json_object_get(s, "allOf"), i, one)
    empty_walk_value(v, one, w, depth + 1);
  if (json_is_object(v)) {
    const json_t *props = json_object_get(s, "properties");
    const json_t *extra = json_object_get(s, "additionalProperties");
    void *iter = json_object_iter(v);
    while (iter) {
      json_t *child = json_object_iter_value(iter);
      const json_t *sub = json_object_get(props, json_object_iter_key(iter));
      json_t *rep = empty_replace(child, sub ? sub : json_is_object(extra) ? extra : NULL,
                                  w, depth);
      if (rep) json_object_iter_set_new(v, iter, rep);
      iter = json_object_iter_next(v, iter);
    }
  }
  else if (json_is_array(v)) {
    const json_t *prefix = json_object_get(s, "prefixItems");
    const json_t *items = json_object_get(s, "items");
    json_t *child;
    json_array_foreach(v, i, child) {
      const json_t *sub = i < json_array_size(prefix) ? json_array_get(prefix, i)
                        : json_is_object(items) ? items : NULL;
      json_t *rep = empty_replace(child, sub, w, depth);
      if (rep) json_array_set_new(v, i, rep);
    }
  }
}

json_t *tp__schema_empty_arrays (json_t *v, const json_t *schema,
                                 int (*keep)(const json_t *o, void *ud), void *ud) {
  empty_walk w = { schema, EMPTY_WORK, keep, ud };
  return empty_replace(v, schema, &w, 0);
}
