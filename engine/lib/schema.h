/*
** schema.h: the JSON Schema validator (internal API). Compiles a schema once into keyword
** arrays, then validates jansson trees against it without re-reading the schema.
** Dialects: 2020-12 (the default, what MCP uses) and draft-07, chosen by "$schema".
** Never touches the network: remote "$ref"s resolve only under remotes_dir.
*/
#ifndef tidepool_schema_h
#define tidepool_schema_h

#include <stddef.h>
#include <jansson.h>

typedef struct tp_schema tp_schema;

typedef enum { TP_DIALECT_2020_12 = 0, TP_DIALECT_DRAFT7 = 1 } tp_dialect;

/* One validation error. All three strings are owned by the error list. */
typedef struct tp_schema_error {
  char *path;     /* instance location: "$", "$.items[2].name", "$[\"odd key\"]" (0-based) */
  char *keyword;  /* the failing keyword: "type", "required", "pattern", ... */
  char *message;  /* written for a model to act on: "expected string, got integer 5" */
} tp_schema_error;

/* Zero-initialise before first use; tp__schema_errors_clear() frees and resets it. */
typedef struct tp_schema_errors {
  tp_schema_error *items;
  size_t count;
  size_t cap;     /* private */
  size_t more;    /* errors found past the cap (tp_schema_bounds.max_errors), not kept */
} tp_schema_errors;

/* Errors a validation keeps by default; the rest are only counted (errs->more). */
#define TP_SCHEMA_MAX_ERRORS 20

/* Bounds of one validation (tp__schema_validate_bounded). */
typedef struct tp_schema_bounds {
  size_t max_errors;        /* errors kept; 0 = TP_SCHEMA_MAX_ERRORS */
  int (*stop)(void *ud);    /* polled as validation goes, about every 0.1 ms of work;
                            ** nonzero stops it. NULL: never stopped */
  void *ud;
} tp_schema_bounds;

/* Depth cap for every recursive walk: schema nesting, instance nesting and $ref chains. */
#define TP_SCHEMA_MAX_DEPTH 128

/*
** Compile a schema. `schema` is borrowed (a deep copy is kept). The dialect comes from
** "$schema" when present, else default_dialect. remotes_dir is a directory served as
** http://localhost:1234/ for "$ref" (the test suite's remotes/), or NULL for no remote
** references at all. formats_assert nonzero makes "format" an assertion, zero an
** annotation. On error returns NULL and writes a message naming the schema location
** ("at #/properties/city/minLength: expected a non-negative integer") into err[errlen]
** (err may be NULL).
*/
tp_schema *tp__schema_compile(const json_t *schema, tp_dialect default_dialect,
                             const char *remotes_dir, int formats_assert,
                             char *err, size_t errlen);

/*
** Validate an instance. Returns 1 when valid, 0 when invalid (the errors are appended to
** errs when errs != NULL, deduplicated and sorted by path: the first
** TP_SCHEMA_MAX_ERRORS of them, the rest counted in errs->more), -1 on internal failure (out
** of memory, or a NULL schema or instance). Thread-safe: one compiled schema may
** validate on several threads at once. Does not allocate on the valid path for schemas
** without propertyNames, unevaluated* or concurrent use of patterns.
*/
int tp__schema_validate(const tp_schema *s, const json_t *instance, tp_schema_errors *errs);

/*
** tp__schema_validate under bounds (NULL: the defaults). Validation takes O(n log n) in
** the instance at worst for a given schema (uniqueItems sorts by a hash of each item),
** and the first b->max_errors errors are kept (sorted by path), the rest counted in
** errs->more. Returns as tp__schema_validate, or -2 when b->stop asked it to stop (no
** errors are added then).
*/
int tp__schema_validate_bounded(const tp_schema *s, const json_t *instance,
                               tp_schema_errors *errs, const tp_schema_bounds *b);

/* The errors as one line for a message: "path: message; path: message; and N more",
** at most max_shown of them, N counting the rest (errs->more included); cut to fit
** buf[len] with "..." at the end. */
void tp__schema_errors_text(const tp_schema_errors *errs, size_t max_shown, char *buf,
                           size_t len);

/* The dialect the root schema was compiled as; TP_DIALECT_2020_12 for NULL. */
tp_dialect tp__schema_dialect(const tp_schema *s);

/* Frees the items of errs and zeroes it; NULL-safe. */
void tp__schema_errors_clear(tp_schema_errors *errs);

/* NULL-safe. */
void tp__schema_free(tp_schema *s);

/* An empty Lua table has no keys to tell an array from an object, and is sent as {}.
** Where schema expects an array (and not an object) at a place in v, an empty object
** there becomes []: the one rule for a tool's arguments (admit.c) and a Lua handler's
** result (host.c). Only the schema's plain structure is followed (properties,
** additionalProperties, items, prefixItems, allOf, $refs local to schema), to a bounded
** depth and a bounded number of schema visits (a schema of nested allOf can double the
** work at each level), after which the rest is left as it is and validation says what is
** wrong. keep(o, ud), when not NULL, keeps an empty object o as one (it was written {}).
** Returns what to put in place of v itself (a new []) or NULL. */
/* s with its local $ref ("#/...") followed in root, as long as it is one (*hops counts
** them, at most 64 in all); s itself when its $ref resolves to nothing. */
const json_t *tp__schema_deref(const json_t *s, const json_t *root, int *hops);
json_t *tp__schema_empty_arrays(json_t *v, const json_t *schema,
                                int (*keep)(const json_t *o, void *ud), void *ud);

/*
** Format checkers (used when formats_assert is on). Return 1 when s (of n bytes) is a
** valid value of the named format, 0 when not, -1 when the format is unknown (which the
** validator treats as valid).
*/
int tp__schema_format_check(const char *format, const char *s, size_t n);

/*
** A plain shape some input schemas have: an object whose named properties each take a
** scalar (by "type") with at most integer minimum/maximum and minLength/maxLength, with
** "required" names among them and additionalProperties true, false or absent. The core
** checks a script's arguments against it directly on the Lua value (core/codec.c), and
** only when that check passes: anything it fails, or cannot tell, goes to
** tp__schema_validate, so the errors a script sees come from the one validator. Types are
** TP_ST_* bits (a property with no "type" takes any value).
*/
enum { TP_ST_NULL = 1, TP_ST_BOOL = 2, TP_ST_INT = 4, TP_ST_NUM = 8, TP_ST_STR = 16,
       TP_ST_ARR = 32, TP_ST_OBJ = 64 };
typedef struct tp_schema_simple_prop {
  const char *name;
  size_t len;
  unsigned types;               /* 0: any value */
  int required;
  int has_min, has_max;
  long long min, max;           /* inclusive integer bounds of numbers */
  long long min_len, max_len;   /* of strings, in code points; -1: none */
} tp_schema_simple_prop;
typedef struct tp_schema_simple {
  size_t nprops, nrequired;
  int closed;                   /* additionalProperties false */
  tp_schema_simple_prop *props;
} tp_schema_simple;

/* s's plain shape, or NULL when its root is not one (made when s was compiled). */
const tp_schema_simple *tp__schema_simple(const tp_schema *s);

#endif
