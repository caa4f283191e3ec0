/*
** policy.c: the config's "policy" section. A rule names tools with a glob over dotted
** names ("github.**"), has an effect (allow, deny, ask), and may add a condition on the
** arguments ("where", parsed by lua/policy.lua with LPeg when the config is loaded and
** compiled here into an array of nodes), scopes the caller must hold, a count of calls
** per run and a token bucket. Every rule whose glob matches a call's tool applies;
** deny beats ask beats allow, and "default" decides when no rule matches.
**
** What a rule does with its condition:
** - allow: the call is allowed when the condition holds, and denied (naming the clause
**   that failed and the argument's value) when it does not;
** - deny and ask: the rule applies when the condition holds.
** A clause whose path is missing, or whose value has another type than the clause
** compares with, can be neither true nor false: it is "unknown", and `not`, `and`, `or`
** treat unknown as Kleene's logic does (false and unknown is false, true or unknown is
** true). A condition that ends unknown fails closed: an allow rule denies, a deny or ask
** rule applies.
**
** The cost per call is what the per-tool cache leaves: the indexes of the rules whose
** glob matches are kept on the tool (made at its first call after the policy changed),
** and conditions are evaluated without allocating (P->sbuf, kept, decodes strings with
** escapes): on the arguments' JSON text when the codec kept them as text (no tree is made
** for a decision), else on the jansson tree.
** Decisions reach a callback (tp_engine_on_decision) for audit logs. A call that an ask
** rule applies to is held (tp__call_hold) and handed to tp_engine_on_approval's callback;
** tp_call_approve / tp_call_deny end the hold (tp_call_decide). Without that callback it
** is denied.
**
** Rate buckets keyed by principal or globally live in the engine's state store when that
** store is shared beyond the process (SQLite, Redis: tp__store_shared), keyed
** "rate:<rule>:<key kind>:<principal>", so that every process of the store takes from
** one bucket; buckets per run and per session stay here (those are this process's
** objects). Such a call is decided after the store answered: at once (SQLite), or later
** (Redis), the call held meanwhile as an ask holds it, then allowed or failed with
** tool.rate_limited. The in-memory buckets are checked and taken first, so a call the
** store refuses has still used its tokens of those.
*/
#define PCRE2_CODE_UNIT_WIDTH 8

#include <locale.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>
#include <pcre2.h>

#include "util.h"
#include "lua.h"
#include "lauxlib.h"
#include "lualib.h"

#include "digest.h"
#include "embedded.h"
#include "engine.h"
#include "policy.h"
#include "registry.h"
#include "store_int.h"

int luaopen_lpeg(lua_State *L);

int tp__policy_text_off;

#define WHERE_MAX 4096     /* bytes of one condition */
#define DEPTH_MAX 64       /* nesting of a condition */
#define RULES_MAX 10000

enum { EF_ALLOW, EF_ASK, EF_DENY };
enum { K_RUN, K_SESSION, K_PRINCIPAL, K_GLOBAL };
enum { N_AND, N_OR, N_NOT, N_CMP, N_IN, N_STARTS, N_ENDS, N_CONTAINS, N_MATCHES, N_EXISTS,
       N_TRUTH };
enum { OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE };
enum { LT_STR, LT_NUM, LT_BOOL, LT_NULL };
enum { R_FALSE = 0, R_TRUE = 1, R_UNKNOWN = 2,
       R_TREE = 3 };   /* the text cannot say: ask the tree (conditions on the text) */

static const char *const effect_names[] = { "allow", "ask", "deny" };
static const char *const key_names[] = { "run", "session", "principal", "global" };
static const char *const op_names[] = { "==", "~=", "<", "<=", ">", ">=" };

typedef struct plit {
  uint8_t t, isint, b;
  int64_t i;
  double d;
  uint32_t s, len;         /* a string: pool[s..s+len) */
} plit;

typedef struct pstep {
  int64_t index;           /* >= 0: an array index (from 0); -1: a key, pool[key..+klen) */
  uint32_t key, klen;
} pstep;

typedef struct pnode {
  uint8_t kind, op, len;
  uint32_t a, n;           /* and/or/not: kids[a..a+n); in: lits[a..a+n) */
  uint32_t path, npath;    /* steps[path..path+npath) */
  uint32_t lit;            /* lits[lit] */
  uint32_t text, textlen;  /* the clause's source, pool[text..+textlen) */
  uint32_t key0;           /* the policy's number of its path's first key, plus 1 (0: the
                           ** path starts with an index): calls look each key up once */
  pcre2_code *re;
} pnode;

typedef struct prule {
  char *glob, *reason, *where;
  int effect;
  int regex;
  uint32_t root;           /* nodes[root], when nnodes > 0 */
  pnode *nodes;
  uint32_t nnodes;
  uint32_t *kids;
  uint32_t nkids;
  pstep *steps;
  uint32_t nsteps;
  plit *lits;
  uint32_t nlits;
  char *pool;
  uint32_t npool;
  size_t capnodes, capkids, capsteps, caplits, cappool;
  int64_t max_calls;       /* calls allowed per run; -1: no count */
  int rate;                /* has a bucket */
  double capacity, per_second;
  int rate_key;
  char **requires;
  size_t nrequires;
} prule;

typedef struct bucket {
  double tokens;
  uint64_t t_ns;           /* when tokens was last brought up to date */
} bucket;

/* A bucket kept by session, principal or globally (a run's are in its pol_run). */
typedef struct bentry {
  uint32_t rule;
  uint8_t kind, used;
  uint64_t id;             /* the session (or run, for runs outside one), the principal's
                           ** hash, or 0 */
  char *principal;
  bucket b;
} bentry;

typedef struct caller {
  char *principal;
  char **scopes;
  size_t nscopes;
} caller;

/* What the policy keeps about a tool (tool_rules), in its table by the tool's serial: the
** rules whose glob matches it, rules[0..n) in the policy's order, then the allow rules
** among them that count calls or keep a bucket, rules[n..n + nc); made again when the
** policy changes. */
typedef struct tcache {
  uint64_t serial;         /* the tool's (registry.h); 0: a free slot */
  uint64_t gen;            /* the policy they were made for */
  uint32_t *rules, n, nc;
  uint64_t keys;           /* the argument keys their conditions read */
} tcache;

struct tp__policy {
  int active;              /* the config has a policy section */
  int default_deny;
  prule *rules;
  size_t nrules;
  uint64_t gen;            /* changes with each policy: the tools' caches compare it */
  pcre2_match_data *md;
  pcre2_match_context *mctx;
  char **keys;             /* the first keys of the conditions' paths, each once */
  uint32_t nkeys;
  size_t *keylen;
  const json_t **memo;     /* memo[k]: the argument keys[k] of the call being decided, */
  uint64_t *memo_at;       /* looked up when memo_at[k] == stamp */
  uint64_t stamp;          /* counts decisions */
  const char **tmemo;      /* the same for the arguments' text: where the value of */
  uint64_t *tmemo_at;      /* keys[k] begins in it */
  char *sbuf;              /* a string of the text with escapes, decoded */
  size_t sbufcap;
  bentry *tab;             /* open addressing; ntab a power of 2 */
  size_t ntab, used;
  tcache *tools;           /* per tool: open addressing by serial; ntools a power of 2 */
  size_t ntools, tools_used;
  caller who;              /* tp_engine_set_principal */
  tp_decision_cb on_decision;
  void *decision_ud;
  tp_approval_cb on_approval;  /* tp_engine_on_approval: who is asked about an ask rule's
                               ** call; NULL: such calls are denied */
  void *approval_ud;
  uint64_t (*now)(void *);
  void *now_ud;
  const char *last_effect; /* the last decision's (tp__policy_last), or NULL */
  int last_rule;
};

static void tools_clear(struct tp__policy *P);

/* What the policy keeps for a run. */
typedef struct pol_run {
  uint64_t gen;            /* the policy counts and buckets were made for */
  uint64_t *counts;        /* calls allowed per rule (max_calls) */
  bucket *buckets;         /* per rule, for "key": "run" */
  uint8_t *bucket_set;
  caller who;
  int who_set;             /* tp_run_set_principal was called */
} pol_run;

/* ---- small things ------------------------------------------------------------------ */

/* The buckets' clock: CLOCK_MONOTONIC_COARSE, a few milliseconds fine, read in a few ns
** where CLOCK_MONOTONIC costs tens in a VM (kvm-clock: 43 ns here), on every call. */
static uint64_t mono_ns (void *ud) {
  (void)ud;
  return tp__now_coarse_ns();
}

static void caller_free (caller *w) {
  free(w->principal);
  for (size_t i = 0; i < w->nscopes; i++) free(w->scopes[i]);
  free(w->scopes);
  memset(w, 0, sizeof *w);
}

/* Sets w from a principal (NULL: none) and scopes separated by spaces or commas. */
static int caller_set (caller *w, const char *principal, const char *scopes) {
  caller n = { 0 };
  if (principal && (n.principal = strdup(principal)) == NULL) return TP_ENOMEM;
  for (const char *p = scopes; p && *p;) {
    while (*p == ' ' || *p == ',' || *p == '\t') p++;
    size_t len = strcspn(p, " ,\t");
    if (len == 0) break;
    char **ns = realloc(n.scopes, (n.nscopes + 1) * sizeof *ns);
    if (ns == NULL) { caller_free(&n); return TP_ENOMEM; }
    n.scopes = ns;
    if ((ns[n.nscopes] = strndup(p, len)) == NULL) { caller_free(&n); return TP_ENOMEM; }
    n.nscopes++;
    p += len;
  }
  caller_free(w);
  *w = n;
  return TP_OK;
}

static void rule_free (prule *ru) {
  free(ru->glob);
  free(ru->reason);
  free(ru->where);
  for (uint32_t i = 0; i < ru->nnodes; i++) pcre2_code_free(ru->nodes[i].re);
  free(ru->nodes);
  free(ru->kids);
  free(ru->steps);
  free(ru->lits);
  free(ru->pool);
  for (size_t i = 0; i < ru->nrequires; i++) free(ru->requires[i]);
  free(ru->requires);
}

static void rules_free (prule *rules, size_t n) {
  for (size_t i = 0; i < n; i++) rule_free(&rules[i]);
  free(rules);
}

static void keys_free (char **keys, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) free(keys[i]);
  free(keys);
}

static void table_free (struct tp__policy *P) {
  for (size_t i = 0; i < P->ntab; i++) free(P->tab[i].principal);
  free(P->tab);
  P->tab = NULL;
  P->ntab = P->used = 0;
}

static struct tp__policy *policy_of (tp_engine *e) {
  if (e->pol == NULL) {
    e->pol = calloc(1, sizeof *e->pol);
    if (e->pol == NULL) return NULL;
    e->pol->now = mono_ns;
  }
  return e->pol;
}

void tp__policy_free (tp_engine *e) {
  struct tp__policy *P = e->pol;
  if (P == NULL) return;
  rules_free(P->rules, P->nrules);
  table_free(P);
  tools_clear(P);
  free(P->tools);
  keys_free(P->keys, P->nkeys);
  free(P->keylen);
  free(P->memo);
  free(P->memo_at);
  free(P->tmemo);
  free(P->tmemo_at);
  free(P->sbuf);
  caller_free(&P->who);
  pcre2_match_data_free(P->md);
  pcre2_match_context_free(P->mctx);
  free(P);
  e->pol = NULL;
}

void tp__policy_run_free (void *p) {
  pol_run *pr = p;
  if (pr == NULL) return;
  free(pr->counts);
  free(pr->buckets);
  free(pr->bucket_set);
  caller_free(&pr->who);
  free(pr);
}

void tp__policy_set_clock (tp_engine *e, uint64_t (*now_ns)(void *), void *ud) {
  struct tp__policy *P = policy_of(e);
  if (P == NULL) return;
  P->now = now_ns ? now_ns : mono_ns;
  P->now_ud = now_ns ? ud : NULL;
}

static pol_run *run_state (tp_run *r) {
  tp__drv_run *d = tp__driver_of(r);
  if (d == NULL) return NULL;
  if (d->policy == NULL) d->policy = calloc(1, sizeof(pol_run));
  return d->policy;
}

/* ---- the public API: who calls, and the decisions --------------------------------- */

int tp_engine_set_principal (tp_engine *e, const char *principal, const char *scopes) {
  if (e == NULL) return TP_EINVAL;
  struct tp__policy *P = policy_of(e);
  return P ? caller_set(&P->who, principal, scopes) : TP_ENOMEM;
}

int tp_run_set_principal (tp_run *r, const char *principal, const char *scopes) {
  if (r == NULL) return TP_EINVAL;
  pol_run *pr = run_state(r);
  if (pr == NULL) return TP_ENOMEM;
  int rc = caller_set(&pr->who, principal, scopes);
  if (rc == TP_OK) pr->who_set = 1;
  return rc;
}

int tp_engine_on_approval (tp_engine *e, tp_approval_cb cb, void *ud) {
  if (e == NULL) return TP_EINVAL;
  struct tp__policy *P = policy_of(e);
  if (P == NULL) return TP_ENOMEM;
  P->on_approval = cb;
  P->approval_ud = ud;
  return TP_OK;
}

int tp_call_approve (tp_call *c) {
  return tp_call_decide(c, TP_POLICY_ALLOW, NULL);
}

int tp_call_deny (tp_call *c, const char *reason) {
  return tp_call_decide(c, TP_POLICY_DENY, reason && *reason ? reason :
                        "the person asked to approve it declined");
}

int tp_engine_on_decision (tp_engine *e, tp_decision_cb cb, void *ud) {
  if (e == NULL) return TP_EINVAL;
  struct tp__policy *P = policy_of(e);
  if (P == NULL) return TP_ENOMEM;
  P->on_decision = cb;
  P->decision_ud = ud;
  return TP_OK;
}

/* ---- globs over dotted names -------------------------------------------------------
** A glob's parts are separated by dots: `*` matches one part, `**` any number of parts
** (none included), and `*` inside a part any run of characters but a dot ("fs.read*"). */

static int glob_part (const char *p, size_t plen, const char *s, size_t slen) {
  if (plen == 0) return slen == 0;
  if (*p == '*') {
    for (size_t k = 0; k <= slen; k++)
      if (glob_part(p + 1, plen - 1, s + k, slen - k)) return 1;
    return 0;
  }
  return slen > 0 && *p == *s && glob_part(p + 1, plen - 1, s + 1, slen - 1);
}

static int glob_match (const char *p, const char *s) {
  if (strcmp(p, "**") == 0) return 1;
  if (strncmp(p, "**.", 3) == 0) {
    for (const char *t = s;; t++) {  /* the rest may start at any part of s */
      if ((t == s || t[-1] == '.') && glob_match(p + 3, t)) return 1;
      if (*t == '\0') return 0;
    }
  }
  size_t plen = strcspn(p, "."), slen = strcspn(s, ".");
  if (!glob_part(p, plen, s, slen)) return 0;
  if (p[plen] == '\0') return s[slen] == '\0';
  if (strcmp(p + plen, ".**") == 0) return 1;  /* a.** matches a and everything under it */
  if (s[slen] == '\0') return 0;
  return glob_match(p + plen + 1, s + slen + 1);
}

int tp__glob_match (const char *glob, const char *name) {
  return glob_match(glob, name);
}

/* ---- compiling the config ---------------------------------------------------------- */

typedef struct loader {
  tp_engine *e;
  lua_State *L;
  int short_of_memory;     /* an allocation of L failed: whatever L said may be its echo */
  char err[512];
} loader;

/* The parser state's allocator: realloc's, noting failures. Under memory pressure LPeg
** can end a match as if the text did not parse; a syntax error from a state that ran
** short of memory is reported as what it is. */
static void *parser_alloc (void *ud, void *p, size_t osize, size_t nsize) {
  (void)osize;
  if (nsize == 0) { free(p); return NULL; }
  void *np = realloc(p, nsize);
  if (np == NULL) ((loader *)ud)->short_of_memory = 1;
  return np;
}

static int lerr (loader *ld, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int lerr (loader *ld, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(ld->err, sizeof ld->err, fmt, ap);
  va_end(ap);
  return TP_EINVAL;
}

static int pool_add (prule *ru, const char *s, size_t len, uint32_t *off) {
  if (len > UINT32_MAX / 2 || tp__grow(&ru->pool, &ru->cappool,
                                       (size_t)ru->npool + len + 1, 1, 8) != 0)
    return TP_ENOMEM;
  memcpy(ru->pool + ru->npool, s, len);
  ru->pool[ru->npool + len] = '\0';
  *off = ru->npool;
  ru->npool += (uint32_t)len + 1;
  return TP_OK;
}

/* The literal {t=, v=} at the top of L into ru->lits; its index in *out. */
static int build_lit (prule *ru, lua_State *L, uint32_t *out) {
  if (tp__grow(&ru->lits, &ru->caplits, (size_t)ru->nlits + 1, sizeof(plit), 8) != 0)
    return TP_ENOMEM;
  plit l = { 0 };
  lua_getfield(L, -1, "t");
  const char *t = lua_tostring(L, -1);
  lua_getfield(L, -2, "v");
  if (strcmp(t, "string") == 0) {
    size_t len;
    const char *s = lua_tolstring(L, -1, &len);
    l.t = LT_STR;
    l.len = (uint32_t)len;
    if (pool_add(ru, s, len, &l.s) != TP_OK) { lua_pop(L, 2); return TP_ENOMEM; }
  }
  else if (strcmp(t, "number") == 0) {
    l.t = LT_NUM;
    l.isint = lua_isinteger(L, -1);
    l.i = l.isint ? lua_tointeger(L, -1) : 0;
    l.d = lua_tonumber(L, -1);
  }
  else if (strcmp(t, "boolean") == 0) {
    l.t = LT_BOOL;
    l.b = (uint8_t)lua_toboolean(L, -1);
  }
  else l.t = LT_NULL;
  lua_pop(L, 2);
  ru->lits[ru->nlits] = l;
  *out = ru->nlits++;
  return TP_OK;
}

/* The node at the top of L (a table from lua/policy.lua) into ru; its index in *out. */
static int build_node (loader *ld, prule *ru, int depth, uint32_t *out) {
  lua_State *L = ld->L;
  if (depth > DEPTH_MAX) return TP_EINVAL;
  if (!lua_checkstack(L, 8)) return TP_ENOMEM;
  pnode n = { 0 };
  lua_getfield(L, -1, "k");
  const char *k = lua_tostring(L, -1);
  static const char *const kinds[] = { "and", "or", "not", "cmp", "in", "starts_with",
    "ends_with", "contains", "matches", "exists", "truth" };
  n.kind = 255;
  for (uint8_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
    if (k && strcmp(k, kinds[i]) == 0) n.kind = i;
  lua_pop(L, 1);
  if (n.kind == 255) return TP_EINVAL;
  lua_getfield(L, -1, "text");
  size_t tlen = 0;
  const char *text = lua_tolstring(L, -1, &tlen);
  int rc = pool_add(ru, text ? text : "", text ? tlen : 0, &n.text);
  n.textlen = (uint32_t)tlen;
  lua_pop(L, 1);
  if (rc != TP_OK) return rc;
  if (n.kind <= N_NOT) {
    uint32_t cnt = (uint32_t)lua_rawlen(L, -1);
    uint32_t *tmp = calloc(cnt ? cnt : 1, sizeof *tmp);
    if (tmp == NULL) return TP_ENOMEM;
    for (uint32_t i = 0; i < cnt && rc == TP_OK; i++) {
      lua_rawgeti(L, -1, (lua_Integer)i + 1);
      rc = build_node(ld, ru, depth + 1, &tmp[i]);
      lua_pop(L, 1);
    }
    if (rc == TP_OK && tp__grow(&ru->kids, &ru->capkids, (size_t)ru->nkids + cnt,
                                sizeof(uint32_t), 8) != 0)
      rc = TP_ENOMEM;
    if (rc == TP_OK) {
      memcpy(ru->kids + ru->nkids, tmp, cnt * sizeof *tmp);
      n.a = ru->nkids;
      n.n = cnt;
      ru->nkids += cnt;
    }
    free(tmp);
    if (rc != TP_OK) return rc;
  }
  else {
    lua_getfield(L, -1, "path");
    uint32_t np = (uint32_t)lua_rawlen(L, -1);
    if (tp__grow(&ru->steps, &ru->capsteps, (size_t)ru->nsteps + np, sizeof(pstep), 8) != 0) {
      lua_pop(L, 1);
      return TP_ENOMEM;
    }
    n.path = ru->nsteps;
    n.npath = np;
    for (uint32_t i = 0; i < np && rc == TP_OK; i++) {
      pstep st = { -1, 0, 0 };
      lua_rawgeti(L, -1, (lua_Integer)i + 1);
      if (lua_isinteger(L, -1)) st.index = lua_tointeger(L, -1) - 1;
      else {
        size_t len;
        const char *s = lua_tolstring(L, -1, &len);
        rc = pool_add(ru, s, len, &st.key);
        st.klen = (uint32_t)len;
      }
      lua_pop(L, 1);
      ru->steps[ru->nsteps++] = st;
    }
    lua_pop(L, 1);
    if (rc != TP_OK) return rc;
    lua_getfield(L, -1, "op");
    const char *op = lua_tostring(L, -1);
    for (uint8_t i = 0; op && i < 6; i++)
      if (strcmp(op, op_names[i]) == 0) n.op = i;
    lua_pop(L, 1);
    lua_getfield(L, -1, "len");
    n.len = (uint8_t)lua_toboolean(L, -1);
    lua_pop(L, 1);
    if (lua_getfield(L, -1, "lit") == LUA_TTABLE) rc = build_lit(ru, L, &n.lit);
    lua_pop(L, 1);
    if (rc != TP_OK) return rc;
    if (lua_getfield(L, -1, "set") == LUA_TTABLE) {
      uint32_t cnt = (uint32_t)lua_rawlen(L, -1);
      n.a = ru->nlits;
      n.n = cnt;
      for (uint32_t i = 0; i < cnt && rc == TP_OK; i++) {
        uint32_t idx;
        lua_rawgeti(L, -1, (lua_Integer)i + 1);
        rc = build_lit(ru, L, &idx);  /* consecutive: nothing else adds literals meanwhile */
        lua_pop(L, 1);
      }
    }
    lua_pop(L, 1);
    if (rc != TP_OK) return rc;
    if (n.kind == N_MATCHES) {
      const plit *l = &ru->lits[n.lit];
      int code;
      PCRE2_SIZE off;
      n.re = pcre2_compile((PCRE2_SPTR)(ru->pool + l->s), l->len, PCRE2_UTF, &code, &off,
                           NULL);
      if (n.re == NULL) {
        PCRE2_UCHAR msg[200];
        pcre2_get_error_message(code, msg, sizeof msg);
        return lerr(ld, "the pattern of '%.*s' is not a regular expression: %s at offset "
                    "%zu", (int)n.textlen, ru->pool + n.text, (const char *)msg, (size_t)off);
      }
    }
  }
  if (tp__grow(&ru->nodes, &ru->capnodes, (size_t)ru->nnodes + 1, sizeof(pnode), 8) != 0) {
    pcre2_code_free(n.re);
    return TP_ENOMEM;
  }
  ru->nodes[ru->nnodes] = n;
  *out = ru->nnodes++;
  return TP_OK;
}

/* Opens the private state that parses conditions: trusted, with lpeg and
** lua/policy.lua; keeps the module's compile function in the registry. */
static int open_parser (lua_State *L) {
  luaL_openlibs(L);
  luaL_requiref(L, "lpeg", luaopen_lpeg, 0);
  lua_pop(L, 1);
  const tp_embedded *src = tp__embedded_find("lua/policy.lua");
  if (src == NULL) return luaL_error(L, "lua/policy.lua is not embedded in this build");
  if (luaL_loadbufferx(L, src->data, src->len, "=lua/policy.lua", "t") != LUA_OK)
    return lua_error(L);
  lua_call(L, 0, 1);
  lua_getfield(L, -1, "compile");
  lua_setfield(L, LUA_REGISTRYINDEX, "tidepool.policy.compile");
  return 0;
}

/* compile(text, regex) in protected mode: pushing the text may run out of memory. */
static int compile_p (lua_State *L) {
  const char *text = lua_touserdata(L, 1);
  size_t len = (size_t)lua_tointeger(L, 2);
  int regex = lua_toboolean(L, 3);
  lua_settop(L, 0);
  lua_getfield(L, LUA_REGISTRYINDEX, "tidepool.policy.compile");
  lua_pushlstring(L, text, len);
  lua_pushboolean(L, regex);
  lua_call(L, 2, 3);
  return 3;
}

/* rules[i].where: text -> ru's nodes. */
static int compile_where (loader *ld, prule *ru, size_t i, const char *text, size_t len) {
  lua_State *L = ld->L;
  if (len > WHERE_MAX)
    return lerr(ld, "policy.rules[%zu].where: the condition is %zu bytes long; at most %d",
                i, len, WHERE_MAX);
  lua_settop(L, 0);
  lua_pushcfunction(L, compile_p);
  lua_pushlightuserdata(L, (void *)text);
  lua_pushinteger(L, (lua_Integer)len);
  lua_pushboolean(L, ru->regex);
  if (lua_pcall(L, 3, 3, 0) != LUA_OK) {
    int rc = lerr(ld, "policy.rules[%zu].where: %s", i, lua_tostring(L, -1));
    lua_settop(L, 0);
    return strstr(ld->err, "memory") || ld->short_of_memory ? TP_ENOMEM : rc;
  }
  if (ld->short_of_memory) {
    lua_settop(L, 0);
    return TP_ENOMEM;
  }
  if (!lua_istable(L, -3)) {
    int rc = lerr(ld, "policy.rules[%zu].where: column %d: %s", i,
                  (int)lua_tointeger(L, -2), lua_tostring(L, -1));
    lua_settop(L, 0);
    return rc;
  }
  lua_pop(L, 2);
  /* reading the tree allocates nothing: its keys are constants of lua/policy.lua */
  int rc = build_node(ld, ru, 0, &ru->root);
  lua_settop(L, 0);
  if (rc == TP_EINVAL && ld->err[0] == '\0')
    return lerr(ld, "policy.rules[%zu].where: the condition is nested too deeply (at most "
                "%d levels)", i, DEPTH_MAX);
  if (rc == TP_EINVAL) {
    char why[sizeof ld->err];
    snprintf(why, sizeof why, "%s", ld->err);
    return lerr(ld, "policy.rules[%zu].where: %s", i, why);
  }
  return rc;
}

static int known_key (const char *k, const char *const *keys) {
  for (; *keys; keys++) if (strcmp(k, *keys) == 0) return 1;
  return 0;
}

/* A positive number (integer or real) at v; -1 when it is none. */
static double positive (const json_t *v) {
  if (!json_is_number(v)) return -1;
  double d = json_number_value(v);
  return d > 0 && isfinite(d) ? d : -1;
}

static int load_rule (loader *ld, prule *ru, size_t i, const json_t *r) {
  static const char *const keys[] = { "tools", "effect", "where", "max_calls", "rate",
    "requires", "reason", "regex", "description", NULL };
  if (!json_is_object(r))
    return lerr(ld, "policy.rules[%zu]: expected an object {\"tools\": \"glob\", \"effect\": "
                "\"allow\"|\"deny\"|\"ask\", ...}", i);
  const char *k;
  const json_t *v;
  json_object_foreach((json_t *)r, k, v)
    if (!known_key(k, keys))
      return lerr(ld, "policy.rules[%zu]: unknown field \"%s\" (a rule has tools, effect, "
                  "where, regex, max_calls, rate, requires, reason)", i, k);
  const char *tools = json_string_value(json_object_get(r, "tools"));
  if (tools == NULL || tools[0] == '\0')
    return lerr(ld, "policy.rules[%zu].tools: expected a glob over tool names, such as "
                "\"github.**\" or \"fs.read\"", i);
  for (const char *p = tools; *p; p++)
    if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
          *p == '_' || *p == '.' || *p == '*'))
      return lerr(ld, "policy.rules[%zu].tools: '%c' cannot be in a tool glob (names have "
                  "letters, digits, '_' and '.'; '*' matches one part, '**' any number)",
                  i, *p);
  const char *eff = json_string_value(json_object_get(r, "effect"));
  ru->effect = -1;
  for (int e = 0; eff && e < 3; e++)
    if (strcmp(eff, effect_names[e]) == 0) ru->effect = e;
  if (ru->effect < 0)
    return lerr(ld, "policy.rules[%zu].effect: expected \"allow\", \"deny\" or \"ask\"", i);
  if ((ru->glob = strdup(tools)) == NULL) return TP_ENOMEM;
  v = json_object_get(r, "regex");
  if (v && !json_is_boolean(v))
    return lerr(ld, "policy.rules[%zu].regex: expected true or false", i);
  ru->regex = json_is_true(v);
  v = json_object_get(r, "reason");
  if (v && !json_is_string(v))
    return lerr(ld, "policy.rules[%zu].reason: expected a string", i);
  if (v && (ru->reason = strdup(json_string_value(v))) == NULL) return TP_ENOMEM;
  v = json_object_get(r, "max_calls");
  if (v && (!json_is_integer(v) || json_integer_value(v) < 0))
    return lerr(ld, "policy.rules[%zu].max_calls: expected a whole number of calls per run "
                "(0 or more)", i);
  ru->max_calls = v ? (int64_t)json_integer_value(v) : -1;
  v = json_object_get(r, "requires");
  if (v) {
    if (!json_is_array(v))
      return lerr(ld, "policy.rules[%zu].requires: expected an array of scope names", i);
    size_t n = json_array_size(v);
    if (n && (ru->requires = calloc(n, sizeof *ru->requires)) == NULL) return TP_ENOMEM;
    for (size_t j = 0; j < n; j++) {
      const char *s = json_string_value(json_array_get(v, j));
      if (s == NULL || s[0] == '\0')
        return lerr(ld, "policy.rules[%zu].requires[%zu]: expected a scope name", i, j);
      if ((ru->requires[j] = strdup(s)) == NULL) return TP_ENOMEM;
      ru->nrequires = j + 1;
    }
  }
  v = json_object_get(r, "rate");
  if (v) {
    static const char *const rkeys[] = { "capacity", "per_second", "key", NULL };
    if (!json_is_object(v))
      return lerr(ld, "policy.rules[%zu].rate: expected {\"capacity\": n, \"per_second\": "
                  "n, \"key\": \"run\"|\"session\"|\"principal\"|\"global\"}", i);
    json_object_foreach((json_t *)v, k, v)
      if (!known_key(k, rkeys))
        return lerr(ld, "policy.rules[%zu].rate: unknown field \"%s\" (capacity, per_second, "
                    "key)", i, k);
    v = json_object_get(r, "rate");
    ru->rate = 1;
    ru->capacity = positive(json_object_get(v, "capacity"));
    ru->per_second = positive(json_object_get(v, "per_second"));
    if (ru->capacity < 1 || ru->capacity > 1e9)
      return lerr(ld, "policy.rules[%zu].rate.capacity: expected a number of calls from 1 "
                  "to 1e9 (the bucket's size)", i);
    if (ru->per_second <= 0 || ru->per_second > 1e9)
      return lerr(ld, "policy.rules[%zu].rate.per_second: expected a positive number (the "
                  "calls the bucket regains per second; 0.5 is one every 2 s)", i);
    const char *key = json_string_value(json_object_get(v, "key"));
    ru->rate_key = key ? -1 : K_SESSION;
    for (int j = 0; key && j < 4; j++)
      if (strcmp(key, key_names[j]) == 0) ru->rate_key = j;
    if (ru->rate_key < 0)
      return lerr(ld, "policy.rules[%zu].rate.key: expected \"run\", \"session\", "
                  "\"principal\" or \"global\"", i);
  }
  v = json_object_get(r, "where");
  if (v) {
    if (!json_is_string(v))
      return lerr(ld, "policy.rules[%zu].where: expected a condition as a string, such as "
                  "\"amount <= 10000 and currency in {'EUR', 'USD'}\"", i);
    if ((ru->where = strdup(json_string_value(v))) == NULL) return TP_ENOMEM;
    if (ld->L == NULL) {
      lua_State *L = lua_newstate(parser_alloc, ld);
      if (L == NULL) return TP_ENOMEM;
      *(void **)lua_getextraspace(L) = NULL;  /* no pattern meter here (lua_patch.h) */
      ld->L = L;
      lua_pushcfunction(L, open_parser);
      if (lua_pcall(L, 0, 0, 0) != LUA_OK) {
        int rc = lerr(ld, "policy: the condition parser cannot start: %s", lua_tostring(L, -1));
        return strstr(ld->err, "memory") || ld->short_of_memory ? TP_ENOMEM : rc;
      }
    }
    return compile_where(ld, ru, i, json_string_value(v), json_string_length(v));
  }
  return TP_OK;
}

static int load (loader *ld, const json_t *sec, prule **rules, size_t *nrules, int *deny) {
  if (!json_is_object(sec))
    return lerr(ld, "policy: expected an object {\"default\": \"allow\"|\"deny\", \"rules\": "
                "[...]}");
  const char *k;
  const json_t *v;
  json_object_foreach((json_t *)sec, k, v)
    if (strcmp(k, "default") != 0 && strcmp(k, "rules") != 0 && strcmp(k, "description") != 0)
      return lerr(ld, "policy: unknown field \"%s\" (the section has default and rules)", k);
  v = json_object_get(sec, "default");
  *deny = 1;  /* a policy section denies what no rule allows, unless it says otherwise */
  if (v) {
    const char *d = json_string_value(v);
    if (d == NULL || (strcmp(d, "allow") != 0 && strcmp(d, "deny") != 0))
      return lerr(ld, "policy.default: expected \"allow\" or \"deny\"");
    *deny = strcmp(d, "deny") == 0;
  }
  v = json_object_get(sec, "rules");
  if (v && !json_is_array(v))
    return lerr(ld, "policy.rules: expected an array of rules");
  size_t n = json_array_size(v);
  if (n > RULES_MAX) return lerr(ld, "policy.rules: %zu rules; at most %d", n, RULES_MAX);
  if (n && (*rules = calloc(n, sizeof **rules)) == NULL) return TP_ENOMEM;
  for (size_t i = 0; i < n; i++) {
    *nrules = i + 1;
    int rc = load_rule(ld, &(*rules)[i], i, json_array_get(v, i));
    if (rc != TP_OK) return rc;
  }
  return TP_OK;
}

/* Numbers the first keys of the paths of every rule's conditions (pnode.key0), the same
** key the same number; *keys gets them. */
static int number_keys (prule *rules, size_t nrules, char ***keys, uint32_t *nkeys) {
  for (size_t r = 0; r < nrules; r++) {
    prule *ru = &rules[r];
    for (uint32_t i = 0; i < ru->nnodes; i++) {
      pnode *n = &ru->nodes[i];
      if (n->kind <= N_NOT || n->npath == 0 || ru->steps[n->path].index >= 0) continue;
      const pstep *st = &ru->steps[n->path];
      const char *key = ru->pool + st->key;
      if (memchr(key, '\0', st->klen)) continue;  /* keys are compared as C strings here */
      uint32_t k = 0;
      while (k < *nkeys && !(strlen((*keys)[k]) == st->klen &&
                             memcmp((*keys)[k], key, st->klen) == 0))
        k++;
      if (k == *nkeys) {
        char **nk = realloc(*keys, (*nkeys + 1) * sizeof *nk);
        if (nk == NULL) return TP_ENOMEM;
        *keys = nk;
        if ((nk[k] = strndup(key, st->klen)) == NULL) return TP_ENOMEM;
        (*nkeys)++;
      }
      n->key0 = k + 1;
    }
  }
  return TP_OK;
}

int tp__policy_load (tp_engine *e, const json_t *section) {
  loader ld = { e, NULL, 0, "" };
  prule *rules = NULL;
  size_t nrules = 0;
  int deny = 0;
  struct tp__policy *P = policy_of(e);
  if (P == NULL) return TP_ENOMEM;
  char **keys = NULL;
  uint32_t nkeys = 0;
  const json_t **memo = NULL;
  uint64_t *memo_at = NULL, *tmemo_at = NULL;
  const char **tmemo = NULL;
  size_t *keylen = NULL;
  int rc = section ? load(&ld, section, &rules, &nrules, &deny) : TP_OK;
  if (ld.L) lua_close(ld.L);
  if (rc == TP_OK) rc = number_keys(rules, nrules, &keys, &nkeys);
  if (rc == TP_OK && nkeys && ((memo = calloc(nkeys, sizeof *memo)) == NULL ||
                               (memo_at = calloc(nkeys, sizeof *memo_at)) == NULL ||
                               (keylen = calloc(nkeys, sizeof *keylen)) == NULL ||
                               (tmemo = calloc(nkeys, sizeof *tmemo)) == NULL ||
                               (tmemo_at = calloc(nkeys, sizeof *tmemo_at)) == NULL))
    rc = TP_ENOMEM;
  for (uint32_t k = 0; rc == TP_OK && k < nkeys; k++) keylen[k] = strlen(keys[k]);
  if (rc == TP_OK && section && P->md == NULL) {
    P->md = pcre2_match_data_create(1, NULL);
    P->mctx = pcre2_match_context_create(NULL);
    if (P->md == NULL || P->mctx == NULL) rc = TP_ENOMEM;
    else pcre2_set_match_limit(P->mctx, 100000);  /* a call's share: about a millisecond */
  }
  if (rc != TP_OK) {
    rules_free(rules, nrules);
    keys_free(keys, nkeys);
    free(memo);
    free(memo_at);
    free(tmemo);
    free(tmemo_at);
    free(keylen);
    if (rc == TP_ENOMEM) tp__engine_set_error(e, "config: out of memory reading the policy");
    else tp__engine_set_error(e, "config: %s", ld.err);
    return rc;
  }
  rules_free(P->rules, P->nrules);
  table_free(P);
  tools_clear(P);  /* made again for the new rules, as tools are called */
  keys_free(P->keys, P->nkeys);
  free(P->keylen);
  free(P->memo);
  free(P->memo_at);
  free(P->tmemo);
  free(P->tmemo_at);
  P->keylen = keylen;
  P->keys = keys;
  P->nkeys = nkeys;
  P->memo = memo;
  P->memo_at = memo_at;
  P->tmemo = tmemo;
  P->tmemo_at = tmemo_at;
  P->stamp = 0;
  P->rules = rules;
  P->nrules = nrules;
  P->default_deny = deny;
  P->active = section != NULL;
  P->gen++;
  return TP_OK;
}

int tp__policy_check (const json_t *section, char *err, size_t errlen) {
  loader ld = { NULL, NULL, 0, "" };
  prule *rules = NULL;
  size_t nrules = 0;
  int deny = 0;
  int rc = section ? load(&ld, section, &rules, &nrules, &deny) : TP_OK;
  if (ld.L) lua_close(ld.L);
  rules_free(rules, nrules);
  if (rc != TP_OK && err && errlen)
    snprintf(err, errlen, "%s", rc == TP_ENOMEM ? "out of memory reading the policy" : ld.err);
  return rc;
}

/* ---- evaluating conditions ---------------------------------------------------------- */

/* The argument at n's path in v (the call's arguments), or NULL. */
static const json_t *resolve (struct tp__policy *P, const prule *ru, const pnode *n,
                              const json_t *v) {
  uint32_t i = 0;
  if (n->key0) {
    uint32_t k = n->key0 - 1;
    if (P->memo_at[k] != P->stamp) {
      const pstep *st = &ru->steps[n->path];
      P->memo[k] = json_is_object(v) ? json_object_getn(v, ru->pool + st->key, st->klen) : NULL;
      P->memo_at[k] = P->stamp;
    }
    v = P->memo[k];
    i = 1;
  }
  for (; i < n->npath && v != NULL; i++) {
    const pstep *st = &ru->steps[n->path + i];
    if (st->index >= 0) v = json_is_array(v) ? json_array_get(v, (size_t)st->index) : NULL;
    else v = json_is_object(v) ? json_object_getn(v, ru->pool + st->key, st->klen) : NULL;
  }
  return v;
}

/* The literal's type class matches v's: strings with strings, numbers with numbers... */
static int same_type (const plit *l, const json_t *v) {
  switch (l->t) {
    case LT_STR: return json_is_string(v);
    case LT_NUM: return json_is_number(v);
    case LT_BOOL: return json_is_boolean(v);
    default: return json_is_null(v);
  }
}

/* v == l: R_TRUE, R_FALSE, or R_UNKNOWN when their types differ (null compares with
** anything: `x == null` asks whether x is null). */
static int equals (const prule *ru, const plit *l, const json_t *v) {
  if (l->t == LT_NULL) return json_is_null(v) ? R_TRUE : R_FALSE;
  if (!same_type(l, v)) return R_UNKNOWN;
  switch (l->t) {
    case LT_STR:
      return json_string_length(v) == l->len &&
             memcmp(json_string_value(v), ru->pool + l->s, l->len) == 0;
    case LT_NUM:
      if (l->isint && json_is_integer(v)) return json_integer_value(v) == l->i;
      return json_number_value(v) == l->d;
    default:
      return json_is_true(v) == l->b;
  }
}

/* <0, 0, >0 as v against l; *ok 0 when they do not compare (other types). */
static int order (const prule *ru, const plit *l, const json_t *v, int *ok) {
  *ok = 1;
  if (l->t == LT_NUM && json_is_number(v)) {
    if (l->isint && json_is_integer(v)) {
      json_int_t a = json_integer_value(v);
      return a < l->i ? -1 : a > l->i;
    }
    double a = json_number_value(v);
    return a < l->d ? -1 : a > l->d;
  }
  if (l->t == LT_STR && json_is_string(v)) {
    size_t a = json_string_length(v), b = l->len;
    int c = memcmp(json_string_value(v), ru->pool + l->s, a < b ? a : b);
    return c ? c : a < b ? -1 : a > b;
  }
  *ok = 0;
  return 0;
}

/* The length #v: characters of a string, items of an array, keys of an object; -1 for
** other values. */
static int64_t length_of (const json_t *v) {
  if (json_is_string(v)) {
    const unsigned char *s = (const unsigned char *)json_string_value(v);
    size_t n = json_string_length(v);
    int64_t chars = 0;
    for (size_t i = 0; i < n; i++) chars += (s[i] & 0xC0) != 0x80;
    return chars;
  }
  if (json_is_array(v)) return (int64_t)json_array_size(v);
  if (json_is_object(v)) return (int64_t)json_object_size(v);
  return -1;
}

/* Whether op holds of a comparison's outcome c (<0, 0, >0), the tree's and the text's. */
static int holds (int op, int c) {
  switch (op) {
    case OP_EQ: return c == 0;
    case OP_NE: return c != 0;
    case OP_LT: return c < 0;
    case OP_LE: return c <= 0;
    case OP_GT: return c > 0;
    default: return c >= 0;
  }
}

static int compare (const prule *ru, const pnode *n, const json_t *v) {
  const plit *l = &ru->lits[n->lit];
  if (n->len) {
    int64_t len = length_of(v);
    if (len < 0) return R_UNKNOWN;
    double a = (double)len;
    return holds(n->op, l->isint ? (len < l->i ? -1 : len > l->i) : (a < l->d ? -1 : a > l->d));
  }
  if (n->op == OP_EQ || n->op == OP_NE) {
    int r = equals(ru, l, v);
    if (r == R_UNKNOWN || n->op == OP_EQ) return r;
    return !r;
  }
  int ok;
  int c = order(ru, l, v, &ok);
  return ok ? holds(n->op, c) : R_UNKNOWN;
}

static int leaf (struct tp__policy *P, const prule *ru, const pnode *n,
                 const json_t *args) {
  const json_t *v = resolve(P, ru, n, args);
  if (n->kind == N_EXISTS) return v != NULL;
  if (v == NULL) return R_UNKNOWN;
  const plit *l = ru->lits ? &ru->lits[n->lit] : NULL;  /* none for truth and in */
  switch (n->kind) {
    case N_CMP: return compare(ru, n, v);
    case N_TRUTH: return json_is_boolean(v) ? json_is_true(v) : R_UNKNOWN;
    case N_IN: {
      int typed = 0;
      for (uint32_t i = 0; i < n->n; i++) {
        const plit *m = &ru->lits[n->a + i];
        int r = equals(ru, m, v);
        if (r == R_TRUE) return R_TRUE;
        if (m->t != LT_NULL && r != R_UNKNOWN) typed = 1;
      }
      return typed ? R_FALSE : R_UNKNOWN;
    }
    case N_STARTS: case N_ENDS: {
      if (!json_is_string(v)) return R_UNKNOWN;
      size_t len = json_string_length(v);
      if (len < l->len) return R_FALSE;
      const char *s = json_string_value(v) + (n->kind == N_ENDS ? len - l->len : 0);
      return memcmp(s, ru->pool + l->s, l->len) == 0;
    }
    case N_CONTAINS:
      if (json_is_string(v)) {
        if (l->t != LT_STR) return R_UNKNOWN;
        if (l->len == 0) return R_TRUE;
        return memmem(json_string_value(v), json_string_length(v), ru->pool + l->s,
                      l->len) != NULL;
      }
      if (json_is_array(v)) {
        size_t i;
        const json_t *item;
        json_array_foreach(v, i, item)
          if (equals(ru, l, item) == R_TRUE) return R_TRUE;
        return R_FALSE;
      }
      return R_UNKNOWN;
    case N_MATCHES: {
      if (!json_is_string(v)) return R_UNKNOWN;
      int rc = pcre2_match(n->re, (PCRE2_SPTR)json_string_value(v), json_string_length(v),
                           0, 0, P->md, P->mctx);
      if (rc >= 0) return R_TRUE;
      return rc == PCRE2_ERROR_NOMATCH ? R_FALSE : R_UNKNOWN;
    }
    default: return R_UNKNOWN;
  }
}

/* ---- conditions on the arguments' text -----------------------------------------------
** A call whose arguments the codec kept as text (codec.c: no tree made) is decided on
** that text: making the tree was most of a decision's cost. The text is the codec's
** (tp__codec_encode): compact JSON of a Lua table, its keys strings, unique and sorted,
** its strings valid UTF-8 escaped only where dump_string escapes, integers exact, reals
** with '.' or an exponent. A clause reads the value at its path as the tree path reads
** the node (tval), and gives what leaf() gives on the tree. A text not of that form, a
** number the reading would not give exactly, or no memory for a string with escapes
** makes the clause R_TREE: the rule is evaluated on the tree instead, so the two ways
** cannot differ. Messages describe values from the tree (value_text). */

/* Where a decision reads the arguments: text (text..end) or, when text is NULL, tree. */
typedef struct asrc {
  const json_t *tree;
  const char *text, *end;
} asrc;

/* A value of the text: its kind ('s' string, 'i' integer, 'r' real, 't' true, 'f' false,
** 'n' null, '[' an array, '{' an object), its first byte, and what it holds. */
typedef struct tval {
  char t;
  const char *p;
  const char *s;           /* a string's bytes (in the text, or decoded into P->sbuf) */
  size_t len;
  json_int_t i;
  double d;
} tval;

static locale_t c_locale (void) {
  static locale_t loc;
  if (loc == (locale_t)0) loc = newlocale(LC_ALL_MASK, "C", (locale_t)0);
  return loc;
}

/* Past the closing quote of the string at p ('"'), or NULL when it has none; *esc set
** when it has escapes. Short strings (most arguments a rule reads) byte by byte, the rest
** of a long one with memchr. */
static const char *tx_string_end (const char *p, const char *end, int *esc) {
  const char *q = p + 1, *stop = end - q > 64 ? q + 64 : end;
  *esc = 0;
  for (; q < stop; q++) {
    if (*q == '"') return q + 1;
    if (*q == '\\') { *esc = 1; q++; }
  }
  const char *from = q;  /* every byte before it is read (no escape pair cut in two) */
  for (;;) {
    if (q >= end) return NULL;
    const char *r = memchr(q, '"', (size_t)(end - q));
    if (r == NULL) return NULL;
    size_t bs = 0;  /* an odd number of backslashes before it escapes it */
    while (r - bs > q && r[-1 - (ptrdiff_t)bs] == '\\') bs++;
    q = r + 1;
    if (bs % 2 == 0) break;
  }
  if (!*esc && memchr(from, '\\', (size_t)(q - 1 - from)) != NULL) *esc = 1;
  return q;
}

/* Past the value at p, or NULL when the text is not as expected. */
static const char *tx_skip (const char *p, const char *end) {
  int depth = 0;
  do {
    if (p >= end) return NULL;
    char ch = *p;
    if (ch == '"') {
      int esc;
      if ((p = tx_string_end(p, end, &esc)) == NULL) return NULL;
    }
    else if (ch == '{' || ch == '[') { depth++; p++; }
    else if (ch == '}' || ch == ']') {
      if (--depth < 0) return NULL;
      p++;
    }
    else if (ch == ',' || ch == ':') {
      if (depth == 0) return NULL;
      p++;
    }
    else {  /* a number or a literal */
      const char *s = p;
      while (p < end && *p != ',' && *p != '}' && *p != ']' && *p != ':') p++;
      if (p == s) return NULL;
    }
  } while (depth > 0);
  return p;
}

static int hex4 (const char *p, unsigned *u) {
  *u = 0;
  for (int i = 0; i < 4; i++) {
    char h = p[i];
    unsigned d = h >= '0' && h <= '9' ? (unsigned)(h - '0') : h >= 'a' && h <= 'f'
               ? (unsigned)(h - 'a' + 10) : h >= 'A' && h <= 'F' ? (unsigned)(h - 'A' + 10)
               : 16u;
    if (d == 16) return 0;
    *u = *u << 4 | d;
  }
  return 1;
}

/* The bytes of the string at p ('"'): in the text when it has no escapes, else decoded
** (as jansson decodes them) into P->sbuf. *next: past it. 0 when the text is not as
** expected or there is no memory for the decoding. */
static int tx_str (struct tp__policy *P, const char *p, const char *end, const char **s,
                   size_t *len, const char **next) {
  int esc;
  const char *e = tx_string_end(p, end, &esc);
  if (e == NULL) return 0;
  *next = e;
  const char *a = p + 1, *b = e - 1;
  if (!esc) {
    *s = a;
    *len = (size_t)(b - a);
    return 1;
  }
  if (tp__grow(&P->sbuf, &P->sbufcap, (size_t)(b - a) + 1, 1, 256) != 0) return 0;
  char *o = P->sbuf;
  while (a < b) {
    if (*a != '\\') { *o++ = *a++; continue; }
    if (b - a < 2) return 0;
    char x = a[1];
    a += 2;
    switch (x) {
      case '"': *o++ = '"'; break;
      case '\\': *o++ = '\\'; break;
      case '/': *o++ = '/'; break;
      case 'b': *o++ = '\b'; break;
      case 'f': *o++ = '\f'; break;
      case 'n': *o++ = '\n'; break;
      case 'r': *o++ = '\r'; break;
      case 't': *o++ = '\t'; break;
      case 'u': {
        unsigned u, lo;
        if (b - a < 4 || !hex4(a, &u)) return 0;
        a += 4;
        if (u >= 0xDC00 && u <= 0xDFFF) return 0;  /* a lone low surrogate */
        if (u >= 0xD800 && u <= 0xDBFF) {
          if (b - a < 6 || a[0] != '\\' || a[1] != 'u' || !hex4(a + 2, &lo) ||
              lo < 0xDC00 || lo > 0xDFFF) return 0;
          a += 6;
          u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
        }
        if (u < 0x80) *o++ = (char)u;
        else if (u < 0x800) {
          *o++ = (char)(0xC0 | u >> 6);
          *o++ = (char)(0x80 | (u & 0x3F));
        }
        else if (u < 0x10000) {
          *o++ = (char)(0xE0 | u >> 12);
          *o++ = (char)(0x80 | (u >> 6 & 0x3F));
          *o++ = (char)(0x80 | (u & 0x3F));
        }
        else {
          *o++ = (char)(0xF0 | u >> 18);
          *o++ = (char)(0x80 | (u >> 12 & 0x3F));
          *o++ = (char)(0x80 | (u >> 6 & 0x3F));
          *o++ = (char)(0x80 | (u & 0x3F));
        }
        break;
      }
      default: return 0;
    }
  }
  *s = P->sbuf;
  *len = (size_t)(o - P->sbuf);
  return 1;
}

/* The number at p..end (JSON's grammar) as jansson reads it: an integer (no fraction or
** exponent; 'i') or a real ('r'). 0 when it is not one, or an integer past json_int_t
** (jansson refuses it). */
static char tx_num (const char *p, const char *end, json_int_t *i, double *d) {
  const char *s = p;
  int neg = p < end && *p == '-', real = 0;
  p += neg;
  if (p >= end || *p < '0' || *p > '9') return 0;
  if (*p == '0') p++;
  else while (p < end && *p >= '0' && *p <= '9') p++;
  const char *idig = s + neg, *iend = p;
  if (p < end && *p == '.') {
    real = 1;
    if (++p >= end || *p < '0' || *p > '9') return 0;
    while (p < end && *p >= '0' && *p <= '9') p++;
  }
  if (p < end && (*p == 'e' || *p == 'E')) {
    real = 1;
    if (++p < end && (*p == '+' || *p == '-')) p++;
    if (p >= end || *p < '0' || *p > '9') return 0;
    while (p < end && *p >= '0' && *p <= '9') p++;
  }
  if (p < end && *p != ',' && *p != '}' && *p != ']') return 0;
  if (!real) {
    uint64_t u = 0, lim = neg ? (uint64_t)1 << 63 : ((uint64_t)1 << 63) - 1;
    int wide = iend - idig > 18;  /* 18 digits cannot pass json_int_t */
    for (const char *q = idig; q < iend; q++) {
      unsigned dg = (unsigned)(*q - '0');
      if (wide && u > (lim - dg) / 10) return 0;
      u = u * 10 + dg;
    }
    *i = neg ? (json_int_t)(0 - u) : (json_int_t)u;
    return 'i';
  }
  char tmp[64];
  size_t n = (size_t)(p - s);
  if (n >= sizeof tmp || c_locale() == (locale_t)0) return 0;
  memcpy(tmp, s, n);
  tmp[n] = '\0';
  *d = strtod_l(tmp, NULL, c_locale());
  return isfinite(*d) ? 'r' : 0;  /* jansson refuses a real that overflows */
}

/* Reads the value at p into *v. 0 when the text is not as expected. */
static int tx_read (struct tp__policy *P, const char *p, const char *end, tval *v) {
  const char *next;
  v->p = p;
  if (p >= end) return 0;
  switch (*p) {
    case '"': v->t = 's'; return tx_str(P, p, end, &v->s, &v->len, &next);
    case '{': case '[': v->t = *p; return 1;
    case 't': v->t = 't'; return end - p >= 4 && memcmp(p, "true", 4) == 0;
    case 'f': v->t = 'f'; return end - p >= 5 && memcmp(p, "false", 5) == 0;
    case 'n': v->t = 'n'; return end - p >= 4 && memcmp(p, "null", 4) == 0;
    default: return (v->t = tx_num(p, end, &v->i, &v->d)) != 0;
  }
}

/* The value of key k in the object at p ('{'), or NULL when it has none; *bad set when
** the text is not as expected. */
static const char *tx_member (struct tp__policy *P, const char *p, const char *end,
                              const char *k, size_t klen, int *bad) {
  if (++p < end && *p == '}') return NULL;
  for (;;) {
    const char *ks, *next;
    size_t kl;
    if (p >= end || *p != '"' || !tx_str(P, p, end, &ks, &kl, &next) || next >= end ||
        *next != ':') break;
    if (kl == klen && memcmp(ks, k, klen) == 0) return next + 1;
    if ((p = tx_skip(next + 1, end)) == NULL || p >= end) break;
    if (*p == '}') return NULL;
    if (*p++ != ',') break;
  }
  *bad = 1;
  return NULL;
}

/* Item i (from 0) of the array at p ('['), or NULL when it has fewer; *bad as above. */
static const char *tx_item (const char *p, const char *end, int64_t i, int *bad) {
  if (++p < end && *p == ']') return NULL;
  for (;; i--) {
    if (i == 0) return p;
    if ((p = tx_skip(p, end)) == NULL || p >= end) break;
    if (*p == ']') return NULL;
    if (*p++ != ',') break;
  }
  *bad = 1;
  return NULL;
}

/* The items of the array or members of the object at p; -1 when the text is not as
** expected. */
static int64_t tx_count (const char *p, const char *end) {
  char close = *p == '{' ? '}' : ']';
  int64_t n = 0;
  if (++p < end && *p == close) return 0;
  for (;;) {
    if (close == '}') {
      int esc;
      const char *k = p < end && *p == '"' ? tx_string_end(p, end, &esc) : NULL;
      if (k == NULL || k >= end || *k != ':') return -1;
      p = k + 1;
    }
    if ((p = tx_skip(p, end)) == NULL || p >= end) return -1;
    n++;
    if (*p == close) return n;
    if (*p++ != ',') return -1;
  }
}

/* Looks up at once the first keys of t's conditions in the arguments' object (the text
** memo, as prefetch_keys for the tree). */
static void tx_prefetch (struct tp__policy *P, const tcache *t, const asrc *a) {
  uint64_t mask = t->keys;
  if (mask == 0) return;
  for (uint64_t m = mask; m; m &= m - 1) {
    int k = __builtin_ctzll(m);
    P->tmemo[k] = NULL;
    P->tmemo_at[k] = P->stamp;
  }
  const char *p = a->text, *end = a->end;
  if (p >= end || *p != '{' || (++p < end && *p == '}')) return;
  for (;;) {
    const char *ks, *next;
    size_t kl;
    if (p >= end || *p != '"' || !tx_str(P, p, end, &ks, &kl, &next) || next >= end ||
        *next != ':')
      break;
    for (uint64_t m = mask; m; m &= m - 1) {
      int k = __builtin_ctzll(m);
      if (P->keylen[k] == kl && memcmp(P->keys[k], ks, kl) == 0) {
        P->tmemo[k] = next + 1;
        break;
      }
    }
    if ((p = tx_skip(next + 1, end)) == NULL || p >= end) break;
    if (*p == '}') return;
    if (*p++ != ',') break;
  }
  for (uint64_t m = mask; m; m &= m - 1) P->tmemo_at[__builtin_ctzll(m)] = 0;  /* look up
                                                                ** again, and find it bad */
}

/* The value at n's path in the text, or NULL; *bad set when the text is not as
** expected. */
static const char *tx_resolve (struct tp__policy *P, const prule *ru, const pnode *n,
                               const asrc *a, int *bad) {
  const char *v = a->text, *end = a->end;
  uint32_t i = 0;
  if (n->key0) {
    uint32_t k = n->key0 - 1;
    if (P->tmemo_at[k] != P->stamp) {
      const pstep *st = &ru->steps[n->path];
      P->tmemo[k] = *v == '{' ? tx_member(P, v, end, ru->pool + st->key, st->klen, bad)
                              : NULL;
      if (*bad) return NULL;
      P->tmemo_at[k] = P->stamp;
    }
    v = P->tmemo[k];
    i = 1;
  }
  for (; i < n->npath && v != NULL && !*bad; i++) {
    const pstep *st = &ru->steps[n->path + i];
    if (st->index >= 0) v = *v == '[' ? tx_item(v, end, st->index, bad) : NULL;
    else v = *v == '{' ? tx_member(P, v, end, ru->pool + st->key, st->klen, bad) : NULL;
  }
  return *bad ? NULL : v;
}

/* equals() on a value of the text. */
static int tx_equals (const prule *ru, const plit *l, const tval *v) {
  switch (l->t) {
    case LT_NULL: return v->t == 'n' ? R_TRUE : R_FALSE;
    case LT_STR:
      if (v->t != 's') return R_UNKNOWN;
      return v->len == l->len && memcmp(v->s, ru->pool + l->s, l->len) == 0;
    case LT_NUM:
      if (v->t != 'i' && v->t != 'r') return R_UNKNOWN;
      if (l->isint && v->t == 'i') return v->i == l->i;
      return (v->t == 'i' ? (double)v->i : v->d) == l->d;
    default:
      if (v->t != 't' && v->t != 'f') return R_UNKNOWN;
      return (v->t == 't') == l->b;
  }
}

/* order() on a value of the text. */
static int tx_order (const prule *ru, const plit *l, const tval *v, int *ok) {
  *ok = 1;
  if (l->t == LT_NUM && (v->t == 'i' || v->t == 'r')) {
    if (l->isint && v->t == 'i') return v->i < l->i ? -1 : v->i > l->i;
    double a = v->t == 'i' ? (double)v->i : v->d;
    return a < l->d ? -1 : a > l->d;
  }
  if (l->t == LT_STR && v->t == 's') {
    size_t a = v->len, b = l->len;
    int c = memcmp(v->s, ru->pool + l->s, a < b ? a : b);
    return c ? c : a < b ? -1 : a > b;
  }
  *ok = 0;
  return 0;
}

/* length_of() on a value of the text; -1 for other values, -2 when the text is not as
** expected. */
static int64_t tx_length (const tval *v, const char *end) {
  if (v->t == 's') {
    int64_t chars = 0;
    for (size_t i = 0; i < v->len; i++) chars += ((unsigned char)v->s[i] & 0xC0) != 0x80;
    return chars;
  }
  if (v->t == '[' || v->t == '{') {
    int64_t n = tx_count(v->p, end);
    return n < 0 ? -2 : n;
  }
  return -1;
}

/* compare() on a value of the text. */
static int tx_compare (const prule *ru, const pnode *n, const tval *v, const char *end) {
  const plit *l = &ru->lits[n->lit];
  int c;
  if (n->len) {
    int64_t len = tx_length(v, end);
    if (len == -2) return R_TREE;
    if (len < 0) return R_UNKNOWN;
    double a = (double)len;
    c = l->isint ? (len < l->i ? -1 : len > l->i) : (a < l->d ? -1 : a > l->d);
  }
  else if (n->op == OP_EQ || n->op == OP_NE) {
    int r = tx_equals(ru, l, v);
    if (r == R_UNKNOWN || n->op == OP_EQ) return r;
    return !r;
  }
  else {
    int ok;
    c = tx_order(ru, l, v, &ok);
    if (!ok) return R_UNKNOWN;
  }
  return holds(n->op, c);
}

/* leaf() on the text. */
static int tx_leaf (struct tp__policy *P, const prule *ru, const pnode *n, const asrc *a) {
  int bad = 0;
  const char *at = tx_resolve(P, ru, n, a, &bad);
  if (bad) return R_TREE;
  if (n->kind == N_EXISTS) return at != NULL;
  if (at == NULL) return R_UNKNOWN;
  tval v;
  if (!tx_read(P, at, a->end, &v)) return R_TREE;
  const plit *l = ru->lits ? &ru->lits[n->lit] : NULL;  /* none for truth and in */
  switch (n->kind) {
    case N_CMP: return tx_compare(ru, n, &v, a->end);
    case N_TRUTH: return v.t == 't' ? R_TRUE : v.t == 'f' ? R_FALSE : R_UNKNOWN;
    case N_IN: {
      int typed = 0;
      for (uint32_t i = 0; i < n->n; i++) {
        const plit *m = &ru->lits[n->a + i];
        int r = tx_equals(ru, m, &v);
        if (r == R_TRUE) return R_TRUE;
        if (m->t != LT_NULL && r != R_UNKNOWN) typed = 1;
      }
      return typed ? R_FALSE : R_UNKNOWN;
    }
    case N_STARTS: case N_ENDS: {
      if (v.t != 's') return R_UNKNOWN;
      if (v.len < l->len) return R_FALSE;
      const char *s = v.s + (n->kind == N_ENDS ? v.len - l->len : 0);
      return memcmp(s, ru->pool + l->s, l->len) == 0;
    }
    case N_CONTAINS:
      if (v.t == 's') {
        if (l->t != LT_STR) return R_UNKNOWN;
        if (l->len == 0) return R_TRUE;
        return memmem(v.s, v.len, ru->pool + l->s, l->len) != NULL;
      }
      if (v.t == '[') {
        const char *p = at + 1, *end = a->end;
        if (p < end && *p == ']') return R_FALSE;
        for (;;) {
          tval item;
          if (!tx_read(P, p, end, &item)) return R_TREE;
          if (tx_equals(ru, l, &item) == R_TRUE) return R_TRUE;
          if ((p = tx_skip(p, end)) == NULL || p >= end) return R_TREE;
          if (*p == ']') return R_FALSE;
          if (*p++ != ',') return R_TREE;
        }
      }
      return R_UNKNOWN;
    case N_MATCHES: {
      if (v.t != 's') return R_UNKNOWN;
      int rc = pcre2_match(n->re, (PCRE2_SPTR)v.s, v.len, 0, 0, P->md, P->mctx);
      if (rc >= 0) return R_TRUE;
      return rc == PCRE2_ERROR_NOMATCH ? R_FALSE : R_UNKNOWN;
    }
    default: return R_UNKNOWN;
  }
}

/* The value of node ni: R_TRUE, R_FALSE or R_UNKNOWN (Kleene's logic); *culprit: the
** clause that made it so (a leaf, or the `not` or `or` node whose result it is). R_TREE
** (on the text only): evaluate it on the tree. */
static int eval (struct tp__policy *P, const prule *ru, uint32_t ni, const asrc *a,
                 uint32_t *culprit) {
  const pnode *n = &ru->nodes[ni];
  switch (n->kind) {
    case N_AND: {
      int res = R_TRUE;
      uint32_t unk = ni;
      for (uint32_t i = 0; i < n->n; i++) {
        uint32_t c;
        int r = eval(P, ru, ru->kids[n->a + i], a, &c);
        if (r == R_FALSE || r == R_TREE) { *culprit = c; return r; }
        if (r == R_UNKNOWN && res == R_TRUE) { res = R_UNKNOWN; unk = c; }
      }
      *culprit = unk;
      return res;
    }
    case N_OR: {
      int res = R_FALSE;
      uint32_t unk = ni;
      for (uint32_t i = 0; i < n->n; i++) {
        uint32_t c;
        int r = eval(P, ru, ru->kids[n->a + i], a, &c);
        if (r == R_TRUE || r == R_TREE) { *culprit = c; return r; }
        if (r == R_UNKNOWN && res == R_FALSE) { res = R_UNKNOWN; unk = c; }
      }
      *culprit = unk;
      return res;
    }
    case N_NOT: {
      uint32_t c;
      int r = eval(P, ru, ru->kids[n->a], a, &c);
      *culprit = r == R_UNKNOWN || r == R_TREE ? c : ni;
      return r == R_UNKNOWN || r == R_TREE ? r : !r;
    }
    default:
      *culprit = ni;
      return a->text ? tx_leaf(P, ru, n, a) : leaf(P, ru, n, a->tree);
  }
}

/* ---- messages ------------------------------------------------------------------------ */

static void path_text (const prule *ru, const pnode *n, char *buf, size_t len) {
  size_t o = 0;
  buf[0] = '\0';
  for (uint32_t i = 0; i < n->npath && o < len; i++) {
    const pstep *st = &ru->steps[n->path + i];
    const char *key = ru->pool + st->key;
    int plain = st->index < 0 && st->klen > 0 && strspn(key, "abcdefghijklmnopqrstuvwxyz"
                "ABCDEFGHIJKLMNOPQRSTUVWXYZ_0123456789") == st->klen &&
                !(key[0] >= '0' && key[0] <= '9');
    int w;
    if (st->index >= 0) w = snprintf(buf + o, len - o, "[%lld]", (long long)st->index + 1);
    else if (plain) w = snprintf(buf + o, len - o, "%s%s", i ? "." : "", key);
    else w = snprintf(buf + o, len - o, "[\"%.*s\"]", (int)st->klen, key);
    if (w < 0) break;
    o += (size_t)w;
  }
}

static const char *type_word (const json_t *v) {
  switch (json_typeof(v)) {
    case JSON_STRING: return "a string";
    case JSON_INTEGER: case JSON_REAL: return "a number";
    case JSON_TRUE: case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    case JSON_ARRAY: return "an array";
    default: return "an object";
  }
}

/* What the argument of clause ni is, for a message: "amount is 25000", "amount is
** missing", "amount is \"25000\" (a string: this clause compares numbers)". */
static void value_text (struct tp__policy *P, const prule *ru, uint32_t ni,
                        const json_t *args, char *buf, size_t len) {
  const pnode *n = &ru->nodes[ni];
  buf[0] = '\0';
  if (n->kind <= N_NOT) return;
  char path[200];
  path_text(ru, n, path, sizeof path);
  const json_t *v = resolve(P, ru, n, args);
  if (v == NULL) { snprintf(buf, len, "%s is missing", path); return; }
  size_t tlen = 0;
  char *text = tp_json_text(v, &tlen);
  const char *more = tlen > 120 ? "..." : "";
  int cut = tlen > 120 ? 120 : (int)tlen;
  const char *want = NULL;
  if (n->len) want = length_of(v) < 0 ? "a string, an array or an object" : NULL;
  else if (n->kind == N_TRUTH) want = json_is_boolean(v) ? NULL : "true or false";
  else if (n->kind == N_STARTS || n->kind == N_ENDS || n->kind == N_MATCHES)
    want = json_is_string(v) ? NULL : "a string";
  else if (n->kind == N_CONTAINS)
    want = json_is_string(v) || json_is_array(v) ? NULL : "a string or an array";
  else if (n->kind == N_CMP && ru->lits[n->lit].t != LT_NULL &&
           !same_type(&ru->lits[n->lit], v))
    want = ru->lits[n->lit].t == LT_STR ? "a string" : ru->lits[n->lit].t == LT_NUM
         ? "a number" : "true or false";
  int strnum = want && (json_is_string(v) || json_is_number(v)) &&
               (strcmp(want, "a string") == 0 || strcmp(want, "a number") == 0);
  if (want)
    snprintf(buf, len, "%s is %.*s%s, %s, and this clause takes %s%s", path, cut,
             text ? text : "?", more, type_word(v), want,
             strnum ? " (a string never compares to a number)" : "");
  else snprintf(buf, len, "%s is %.*s%s", path, cut, text ? text : "?", more);
  free(text);
}

/* ---- buckets ------------------------------------------------------------------------- */

static uint64_t str_hash (const char *s) {
  uint64_t h = 1469598103934665603u;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211u;
  return h;
}

static size_t slot_of (uint32_t rule, uint8_t kind, uint64_t id, size_t mask) {
  uint64_t h = id * 0x9E3779B97F4A7C15u ^ ((uint64_t)rule << 8 | kind);
  h ^= h >> 29;
  return (size_t)(h * 0xBF58476D1CE4E5B9u >> 17) & mask;
}

static void refill (const prule *ru, bucket *b, uint64_t now) {
  if (now > b->t_ns) {
    b->tokens += (double)(now - b->t_ns) * 1e-9 * ru->per_second;
    if (b->tokens > ru->capacity) b->tokens = ru->capacity;
  }
  b->t_ns = now;
}

/* Rebuilds the table twice as large, leaving out buckets that are full again (a full
** bucket is what a new one would be). -1 when out of memory. */
static int table_grow (struct tp__policy *P, uint64_t now) {
  size_t n = tp__grow_cap(P->ntab, P->ntab + 1, sizeof(bentry), 64);
  bentry *t = n ? calloc(n, sizeof *t) : NULL;
  if (t == NULL) return -1;
  size_t used = 0;
  for (size_t i = 0; i < P->ntab; i++) {
    bentry *b = &P->tab[i];
    if (!b->used) continue;
    refill(&P->rules[b->rule], &b->b, now);
    if (b->b.tokens >= P->rules[b->rule].capacity) { free(b->principal); continue; }
    size_t s = slot_of(b->rule, b->kind, b->id, n - 1);
    while (t[s].used) s = (s + 1) & (n - 1);
    t[s] = *b;
    used++;
  }
  free(P->tab);
  P->tab = t;
  P->ntab = n;
  P->used = used;
  return 0;
}

/* The bucket of rule k for this call; NULL when out of memory. */
static bucket *bucket_for (struct tp__policy *P, pol_run *pr, tp_call *c, uint32_t k,
                           const caller *who, uint64_t now) {
  const prule *ru = &P->rules[k];
  if (ru->rate_key == K_RUN) {
    if (pr->buckets == NULL) {
      pr->buckets = calloc(P->nrules, sizeof *pr->buckets);
      pr->bucket_set = calloc(P->nrules, 1);
      if (pr->buckets == NULL || pr->bucket_set == NULL) return NULL;
    }
    if (!pr->bucket_set[k]) {
      pr->bucket_set[k] = 1;
      pr->buckets[k].tokens = ru->capacity;
      pr->buckets[k].t_ns = now;
    }
    return &pr->buckets[k];
  }
  uint64_t id = 0;
  const char *principal = NULL;
  if (ru->rate_key == K_SESSION)
    id = c->run->session ? (uint64_t)(uintptr_t)c->run->session : c->run->id | 1ull << 63;
  else if (ru->rate_key == K_PRINCIPAL) {
    principal = who->principal ? who->principal : "";
    id = str_hash(principal);
  }
  if (P->ntab == 0 || (P->used + 1) * 2 > P->ntab) {
    if (table_grow(P, now) != 0) return NULL;
  }
  size_t mask = P->ntab - 1, s = slot_of(k, (uint8_t)ru->rate_key, id, mask);
  for (;; s = (s + 1) & mask) {
    bentry *b = &P->tab[s];
    if (!b->used) break;
    if (b->rule == k && b->kind == ru->rate_key && b->id == id &&
        (principal == NULL || strcmp(b->principal, principal) == 0))
      return &b->b;
  }
  bentry *b = &P->tab[s];
  if (principal && (b->principal = strdup(principal)) == NULL) return NULL;
  b->used = 1;
  b->rule = k;
  b->kind = (uint8_t)ru->rate_key;
  b->id = id;
  b->b.tokens = ru->capacity;
  b->b.t_ns = now;
  P->used++;
  return &b->b;
}

/* ---- deciding ------------------------------------------------------------------------ */

static void tell (struct tp__policy *P, tp_call *c, const caller *who, int rule,
                  const char *effect, const char *clause);

/* Fails c with tool.rate_limited: rule k's bucket has a token again in ms. */
static void rate_limited (struct tp__policy *P, tp_call *c, const caller *who, int k,
                          int64_t ms) {
  const prule *ru = &P->rules[k];
  if (ms < 1) ms = 1;
  char msg[1200];
  snprintf(msg, sizeof msg, "tools.%s is rate limited by the host's policy: %s%spolicy rule "
           "%d allows %g calls at once per %s, and %g more each second; retry after %lld "
           "ms", c->name, ru->reason ? ru->reason : "", ru->reason ? "; " : "", k,
           ru->capacity, key_names[ru->rate_key], ru->per_second, (long long)ms);
  tell(P, c, who, k, "rate_limited", "rate");
  tp__call_failf(c, "tool.rate_limited", "%s", msg);
  c->retry_after_ms = ms;
}

/* Tells the decision callback, if any. */
static void tell (struct tp__policy *P, tp_call *c, const caller *who, int rule,
                  const char *effect, const char *clause) {
  P->last_effect = effect;
  P->last_rule = rule;
  if (P->on_decision == NULL) return;
  const char *hash = tp__call_args_sha256(c);
  tp_decision d;
  d.run = c->run->id;
  d.seq = c->id;
  d.tool = c->name;
  d.principal = who->principal ? who->principal : "";
  d.rule = rule;
  d.effect = effect;
  d.clause = clause ? clause : "";
  d.args_sha256 = hash ? hash : "";
  P->on_decision(c->run, &d, P->decision_ud);
}

/* (the reason of rule k, or "") + " (" + what + ")" */
static void deny_with (struct tp__policy *P, tp_call *c, const caller *who, int k,
                       const char *effect, const char *clause, const char *fmt, ...)
  __attribute__((format(printf, 7, 8)));
static void deny_with (struct tp__policy *P, tp_call *c, const caller *who, int k,
                       const char *effect, const char *clause, const char *fmt, ...) {
  char what[1200], msg[1600];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  const char *reason = k >= 0 && P->rules[k].reason ? P->rules[k].reason : NULL;
  if (reason) snprintf(msg, sizeof msg, "%s (%s)", reason, what);
  else snprintf(msg, sizeof msg, "%s", what);
  tell(P, c, who, k, effect, clause);
  tp__call_deny(c, msg);
}

static int holds_scopes (const prule *ru, const caller *who, const char **missing) {
  for (size_t i = 0; i < ru->nrequires; i++) {
    size_t j = 0;
    while (j < who->nscopes && strcmp(who->scopes[j], ru->requires[i]) != 0) j++;
    if (j == who->nscopes) { *missing = ru->requires[i]; return 0; }
  }
  return 1;
}

static int counts (const prule *ru) {
  return ru->effect == EF_ALLOW && (ru->max_calls >= 0 || ru->rate);
}

/* Makes tc's rules for t (see tcache) under the current policy. */
static int cache_rules (struct tp__policy *P, const tp_tool *t, tcache *tc) {
  uint32_t *list = NULL;
  uint32_t n = 0, nc = 0;
  for (size_t k = 0; k < P->nrules; k++)
    if (glob_match(P->rules[k].glob, t->name)) { n++; nc += counts(&P->rules[k]); }
  if (n && (list = malloc((n + nc) * sizeof *list)) == NULL) return -1;
  uint32_t i = 0, j = n;
  for (size_t k = 0; k < P->nrules; k++)
    if (glob_match(P->rules[k].glob, t->name)) {
      list[i++] = (uint32_t)k;
      if (counts(&P->rules[k])) list[j++] = (uint32_t)k;
    }
  /* the first keys its rules' conditions read, when they are numbered below 64 */
  uint64_t mask = 0;
  for (uint32_t r = 0; r < n && mask != UINT64_MAX; r++) {
    const prule *ru = &P->rules[list[r]];
    for (uint32_t m = 0; m < ru->nnodes; m++) {
      uint32_t k0 = ru->nodes[m].key0;
      if (k0 == 0) continue;
      if (k0 > 64) { mask = UINT64_MAX; break; }
      mask |= 1ull << (k0 - 1);
    }
  }
  free(tc->rules);
  tc->rules = list;
  tc->n = n;
  tc->nc = nc;
  tc->keys = mask == UINT64_MAX ? 0 : mask;
  tc->gen = P->gen;
  return 0;
}

static void tools_clear (struct tp__policy *P) {
  for (size_t i = 0; i < P->ntools; i++) free(P->tools[i].rules);
  if (P->tools) memset(P->tools, 0, P->ntools * sizeof *P->tools);
  P->tools_used = 0;
}

static tcache *tools_slot (tcache *tab, size_t ntab, uint64_t serial) {
  size_t i = (size_t)serial & (ntab - 1);
  while (tab[i].serial != 0 && tab[i].serial != serial) i = (i + 1) & (ntab - 1);
  return &tab[i];
}

/* Room in the table for one more tool. Entries of tools gone from the registry (plugin
** reloads) are never looked up again: when they may be most of it, it starts empty. */
static int tools_room (tp_engine *e, struct tp__policy *P) {
  if ((P->tools_used + 1) * 2 <= P->ntools) return 0;
  if (P->tools_used > 2 * e->ntools + 8) {
    tools_clear(P);
    if ((P->tools_used + 1) * 2 <= P->ntools) return 0;
  }
  size_t n = tp__grow_cap(P->ntools, P->ntools + 1, sizeof(tcache), 16);
  tcache *tab = n ? calloc(n, sizeof *tab) : NULL;
  if (tab == NULL) return -1;
  for (size_t i = 0; i < P->ntools; i++)
    if (P->tools[i].serial != 0) *tools_slot(tab, n, P->tools[i].serial) = P->tools[i];
  free(P->tools);
  P->tools = tab;
  P->ntools = n;
  return 0;
}

/* What the policy keeps about t, made for the current policy; NULL when out of memory. */
static const tcache *tool_rules (tp_engine *e, struct tp__policy *P, const tp_tool *t) {
  tcache *tc = P->ntools ? tools_slot(P->tools, P->ntools, t->serial) : NULL;
  if (tc == NULL || tc->serial == 0) {
    if (tools_room(e, P) != 0) return NULL;
    tc = tools_slot(P->tools, P->ntools, t->serial);
    tc->serial = t->serial;
    tc->gen = P->gen - 1;
    P->tools_used++;
  }
  return tc->gen == P->gen || cache_rules(P, t, tc) == 0 ? tc : NULL;
}

/* Looks up at once the keys of a small argument object that t's conditions read: one
** walk over the object instead of a hash lookup per key (resolve finds them in the
** memo). Larger objects, and policies of many keys, are looked up key by key. */
static void prefetch_keys (struct tp__policy *P, const tcache *t, const json_t *args) {
  uint64_t mask = t->keys;
  if (mask == 0 || !json_is_object(args) || json_object_size(args) > 8) return;
  for (uint64_t m = mask; m; m &= m - 1) {
    int k = __builtin_ctzll(m);
    P->memo[k] = NULL;
    P->memo_at[k] = P->stamp;
  }
  for (void *it = json_object_iter((json_t *)args); it;
       it = json_object_iter_next((json_t *)args, it)) {
    const char *key = json_object_iter_key(it);
    size_t len = json_object_iter_key_len(it);
    for (uint64_t m = mask; m; m &= m - 1) {
      int k = __builtin_ctzll(m);
      if (P->keylen[k] == len && memcmp(P->keys[k], key, len) == 0) {
        P->memo[k] = json_object_iter_value(it);
        break;
      }
    }
  }
}

/* Where the decision of c reads its arguments (asrc): the text, when the codec kept them
** as text and made no tree, else the tree (made now if need be); their first keys looked
** up. */
static void args_open (struct tp__policy *P, const tcache *tc, tp_call *c, asrc *a) {
  const char *text = c->fast_text ? c->fast_text : c->args_text;
  size_t len = c->fast_text ? c->fast_len : c->bytes_in;
  a->tree = NULL;
  a->text = a->end = NULL;
  if (c->args == NULL && c->args_fast && text != NULL && len > 0 && !tp__policy_text_off) {
    a->text = text;
    a->end = text + len;
    tx_prefetch(P, tc, a);
    return;
  }
  a->tree = tp__call_args_tree(c);  /* made now when the codec made none */
  prefetch_keys(P, tc, a->tree);
}

/* The tree of c's arguments, for a rule the text cannot decide and for messages (from
** then on the decision reads the tree). */
static const json_t *args_tree (struct tp__policy *P, const tcache *tc, tp_call *c,
                                asrc *a) {
  if (a->text != NULL) {
    a->text = a->end = NULL;
    a->tree = tp__call_args_tree(c);
    prefetch_keys(P, tc, a->tree);
  }
  return a->tree;
}

static const char *clause_text (const prule *ru, uint32_t ni, char *buf, size_t len) {
  const pnode *n = &ru->nodes[ni];
  snprintf(buf, len, "%.*s", (int)n->textlen, ru->pool + n->text);
  return buf;
}

/* ---- buckets in the state store -------------------------------------------------- */

/* Whether rule ru's bucket goes to a shared store: the keys that name the same thing in
** every process (a principal, the whole policy). */
static int in_store (const prule *ru) {
  return ru->rate_key == K_PRINCIPAL || ru->rate_key == K_GLOBAL;
}

typedef struct spend spend;
typedef struct stake { spend *sp; uint32_t k; } stake;

/* A call waiting for the store's bucket_take answers, one per rate rule in the store. */
struct spend {
  tp_engine *e;
  tp_call *c;
  uint64_t gen;            /* the policy it was decided under */
  int allowed;             /* the allow rule that decided, for the decision callback */
  int starting;            /* the takes are being started: answers are counted only */
  uint32_t outstanding;
  int limited;             /* the rule whose bucket waits longest, or -1 */
  int64_t wait_ms;
  int failed;              /* a take failed: why */
  char why[300];
  stake takes[];
};

static const caller *who_of (struct tp__policy *P, tp_call *c) {
  pol_run *pr = c->run ? run_state(c->run) : NULL;
  return pr && pr->who_set ? &pr->who : &P->who;
}

/* The answers are in: 1 when c is allowed (later: it is admitted here), 0 when it failed. */
static int store_conclude (spend *sp, int later) {
  tp_call *c = sp->c;
  tp_engine *e = sp->e;
  struct tp__policy *P = e->pol;
  if (later) {
    c->held = 0;
    if (c->state != CALL_DECIDING || c->cancelled || c->run == NULL || P == NULL ||
        P->gen != sp->gen) {
      if (c->state == CALL_DECIDING && !c->cancelled && c->run != NULL) {
        c->handler_owns = 0;  /* the policy changed meanwhile: decided under the new one */
        tp__call_deny(c, "the policy changed while this call waited for its rate limit; "
                      "call it again");
      }
      else tp__call_handler_done(c);  /* its run ended meanwhile: the hold lets go of it */
      return 0;
    }
    c->handler_owns = 0;
  }
  const caller *who = who_of(P, c);
  if (sp->failed) {
    deny_with(P, c, who, sp->limited, "deny", "rate", "the policy's rate limit could not "
              "be kept: %s", sp->why);
    return 0;
  }
  if (sp->limited >= 0) {
    rate_limited(P, c, who, sp->limited, sp->wait_ms);
    return 0;
  }
  if (P->on_decision) tell(P, c, who, sp->allowed, "allow", P->rules[sp->allowed].where ?
                           P->rules[sp->allowed].where : "");
  if (later) e->after_policy(e, c);
  return 1;
}

static void on_take (void *ud, const tp_store_reply *r) {
  stake *tk = ud;
  spend *sp = tk->sp;
  if (r->status != TP_STORE_OK) {
    if (!sp->failed) {
      snprintf(sp->why, sizeof sp->why, "the state store %s",
               r->status == TP_STORE_CLOSED ? "closed before it answered"
               : r->err ? r->err : "failed");
      sp->limited = (int)tk->k;
    }
    sp->failed = 1;
  }
  else if (r->num > 0 && !sp->failed && (sp->limited < 0 || r->num > sp->wait_ms)) {
    sp->limited = (int)tk->k;
    sp->wait_ms = r->num;
  }
  if (--sp->outstanding > 0 || sp->starting) return;
  store_conclude(sp, 1);
  free(sp);
}

/* Takes a token of each of t's rate rules whose bucket is in the store (c has passed
** everything else). 1: allowed now; 0: failed, or held until the store answers. */
static int store_take (tp_engine *e, struct tp__policy *P, tp_call *c, const tcache *t,
                       const caller *who, int allowed) {
  tp_store_conn *conn = tp__engine_store_conn(e);
  spend *sp = conn ? calloc(1, sizeof *sp + t->nc * sizeof(stake)) : NULL;
  if (sp == NULL) {
    deny_with(P, c, who, allowed, "deny", "rate", "the policy's rate limit could not be "
              "kept: %s", conn ? "out of memory" : tp_engine_error(e));
    return 0;
  }
  sp->e = e;
  sp->c = c;
  sp->gen = P->gen;
  sp->allowed = allowed;
  sp->limited = -1;
  sp->starting = 1;
  int64_t now_ms = P->now == mono_ns ? tp__store_now_ms()
                                     : (int64_t)(P->now(P->now_ud) / 1000000u);
  const char *principal = who->principal ? who->principal : "";
  const uint32_t *cl = t->rules + t->n;
  uint32_t n = 0;
  for (uint32_t i = 0; i < t->nc; i++) {
    const prule *ru = &P->rules[cl[i]];
    if (!ru->rate || !in_store(ru)) continue;
    char key[600];
    int kl = snprintf(key, sizeof key, "rate:%u:%s:%s", cl[i], key_names[ru->rate_key],
                      ru->rate_key == K_PRINCIPAL ? principal : "");
    if (kl < 0 || (size_t)kl >= sizeof key) kl = (int)strlen(key);  /* a long principal: cut */
    sp->takes[n].sp = sp;
    sp->takes[n].k = cl[i];
    sp->outstanding++;
    conn->ops->bucket_take(conn, key, (size_t)kl, ru->capacity, ru->per_second, now_ms,
                           on_take, &sp->takes[n]);
    n++;
  }
  sp->starting = 0;
  if (sp->outstanding > 0) {  /* held until the last answer (on_take) */
    tp__call_hold(c);
    return 0;
  }
  int ok = store_conclude(sp, 0);
  free(sp);
  return ok;
}

int tp__policy_last (const tp_engine *e, const char **effect) {
  const struct tp__policy *P = e->pol;
  *effect = P && P->active ? P->last_effect : NULL;
  return P == NULL || !P->active ? -2 : *effect ? P->last_rule : -1;
}

int tp__policy_decide (tp_engine *e, tp_call *c, tp_tool *tool) {
  struct tp__policy *P = e->pol;
  if (P == NULL || !P->active) return 1;
  P->last_effect = NULL;
  pol_run *pr = run_state(c->run);
  const caller *who = pr && pr->who_set ? &pr->who : &P->who;
  const tcache *tc = pr ? tool_rules(e, P, tool) : NULL;
  if (tc == NULL) {
    deny_with(P, c, who, -1, "deny", "", "the policy could not be applied: out of memory");
    return 0;
  }
  int ask = -1, allowed = -1;  /* the first allow rule that holds */
  P->stamp++;  /* the memo of argument lookups starts empty */
  asrc a;
  args_open(P, tc, c, &a);
  char ctext[300], vtext[600];
  for (uint32_t i = 0; i < tc->n; i++) {
    uint32_t k = tc->rules[i];
    const prule *ru = &P->rules[k];
    const char *missing;
    if (ru->nrequires && !holds_scopes(ru, who, &missing)) {
      if (who->principal)
        deny_with(P, c, who, (int)k, "deny", "requires", "policy rule %u requires the scope "
                  "%s, which the caller %s does not hold", k, missing, who->principal);
      else
        deny_with(P, c, who, (int)k, "deny", "requires", "policy rule %u requires the scope "
                  "%s, which this caller does not hold", k, missing);
      return 0;
    }
    uint32_t cul = 0;
    int r = R_TRUE;
    if (ru->nnodes && (r = eval(P, ru, ru->root, &a, &cul)) == R_TREE) {
      args_tree(P, tc, c, &a);
      r = eval(P, ru, ru->root, &a, &cul);
    }
    if (ru->effect == EF_DENY && r != R_FALSE) {
      if (ru->nnodes == 0)
        deny_with(P, c, who, (int)k, "deny", "", "policy rule %u denies tools.%s", k,
                  c->name);
      else if (r == R_TRUE)
        deny_with(P, c, who, (int)k, "deny", clause_text(ru, ru->root, ctext, sizeof ctext),
                  "policy rule %u denies it when `%s`, and that holds", k, ru->where);
      else {
        value_text(P, ru, cul, args_tree(P, tc, c, &a), vtext, sizeof vtext);
        deny_with(P, c, who, (int)k, "deny", clause_text(ru, cul, ctext, sizeof ctext),
                  "policy rule %u denies it when `%s`, and `%s` cannot be checked: %s", k,
                  ru->where, ctext, vtext);
      }
      return 0;
    }
    if (ru->effect == EF_ASK && r != R_FALSE && ask < 0) ask = (int)k;
    if (ru->effect == EF_ALLOW) {
      if (r != R_TRUE) {
        value_text(P, ru, cul, args_tree(P, tc, c, &a), vtext, sizeof vtext);
        clause_text(ru, cul, ctext, sizeof ctext);
        deny_with(P, c, who, (int)k, "deny", ctext, "policy rule %u allows tools.%s only "
                  "when `%s`; `%s` %s%s%s", k, c->name, ru->where, ctext,
                  r == R_FALSE ? "does not hold" : "cannot be checked",
                  vtext[0] ? ": " : "", vtext);
        return 0;
      }
      if (allowed < 0) allowed = (int)k;
    }
  }
  if (ask >= 0) {
    const char *where = P->rules[ask].nnodes ? P->rules[ask].where : "";
    if (P->on_approval == NULL) {
      deny_with(P, c, who, ask, "ask", where, "policy rule %d asks a person to approve this "
                "call, and this host has no one to ask: it is denied", ask);
      return 0;
    }
    /* held until tp_call_approve or tp_call_deny; the callback may decide at once */
    char why[1200];
    const char *reason = P->rules[ask].reason;
    if (reason) snprintf(why, sizeof why, "%s (policy rule %d)", reason, ask);
    else snprintf(why, sizeof why, "policy rule %d asks a person to approve tools.%s", ask,
                  c->name);
    tell(P, c, who, ask, "ask", where);
    tp__call_hold(c);
    P->on_approval(c, why, P->approval_ud);
    return 0;
  }
  if (allowed < 0) {
    if (P->default_deny) {
      deny_with(P, c, who, -1, "deny", "", "no policy rule allows tools.%s, and the "
                "policy's default is deny", c->name);
      return 0;
    }
    tell(P, c, who, -1, "allow", "");
    return 1;
  }
  /* every allow rule agrees: their counts and buckets must have room */
  if (tc->nc == 0) {
    if (P->on_decision) tell(P, c, who, allowed, "allow", P->rules[allowed].where ?
                             P->rules[allowed].where : "");
    return 1;
  }
  if (pr->gen != P->gen) {
    free(pr->counts);
    free(pr->buckets);
    free(pr->bucket_set);
    pr->counts = NULL;
    pr->buckets = NULL;
    pr->bucket_set = NULL;
    pr->gen = P->gen;
  }
  uint64_t now = 0;
  double wait_s = 0;
  int limited = -1;
  int shared = -1;         /* whether e's store is shared: asked at the first rate rule
                           ** that could use it */
  uint32_t nstore = 0;     /* rate rules whose buckets are in the store */
  bucket *take[8];         /* the buckets to take a token from, when they are few */
  uint32_t ntake = 0;
  size_t ntab = P->ntab;   /* a table that grows meanwhile moves its buckets */
  const uint32_t *cl = tc->rules + tc->n;
  for (uint32_t i = 0; i < tc->nc; i++) {
    uint32_t k = cl[i];
    const prule *ru = &P->rules[k];
    if (ru->max_calls >= 0) {
      if (pr->counts == NULL && (pr->counts = calloc(P->nrules, sizeof *pr->counts)) == NULL) {
        deny_with(P, c, who, (int)k, "deny", "max_calls", "the policy could not count "
                  "calls: out of memory");
        return 0;
      }
      uint64_t max = (uint64_t)ru->max_calls;
      if (pr->counts[k] >= max) {
        deny_with(P, c, who, (int)k, "deny", "max_calls", "policy rule %u allows %llu "
                  "call%s of %s per run, and this run has made %s", k,
                  (unsigned long long)max, max == 1 ? "" : "s", ru->glob,
                  max == 1 ? "it" : "them all");
        return 0;
      }
    }
    if (ru->rate && in_store(ru) && shared < 0)
      shared = e->store != NULL && tp__store_shared(e->store);
    if (ru->rate && shared > 0 && in_store(ru)) nstore++;
    else if (ru->rate) {
      if (now == 0) now = P->now(P->now_ud);
      bucket *b = bucket_for(P, pr, c, k, who, now);
      if (b == NULL) {
        deny_with(P, c, who, (int)k, "deny", "rate", "the policy's rate limit could not "
                  "be kept: out of memory");
        return 0;
      }
      refill(ru, b, now);
      if (ntake < 8) take[ntake] = b;
      ntake++;
      if (b->tokens < 1) {
        double w = (1 - b->tokens) / ru->per_second;
        if (limited < 0 || w > wait_s) { limited = (int)k; wait_s = w; }
      }
    }
  }
  if (limited >= 0) {
    rate_limited(P, c, who, limited, (int64_t)ceil(wait_s * 1000));
    return 0;
  }
  int kept = ntake <= 8 && ntab == P->ntab;
  ntake = 0;
  for (uint32_t i = 0; i < tc->nc; i++) {
    uint32_t k = cl[i];
    const prule *ru = &P->rules[k];
    if (ru->max_calls >= 0) pr->counts[k]++;
    if (ru->rate && !(shared > 0 && in_store(ru)))
      (kept ? take[ntake++] : bucket_for(P, pr, c, k, who, now))->tokens -= 1;
  }
  if (nstore) return store_take(e, P, c, tc, who, allowed);
  if (P->on_decision) tell(P, c, who, allowed, "allow", P->rules[allowed].where ?
                           P->rules[allowed].where : "");
  return 1;
}
