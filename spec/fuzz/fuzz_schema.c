/*
** fuzz_schema.c: the JSON Schema compiler and validator (engine/lib/schema.c).
**
** Input: one flag byte (bit 0: default dialect draft-07 instead of 2020-12, bit 1:
** formats asserted), then the schema's JSON text, a NUL byte, and the instance's JSON
** text. Without a NUL the schema validates itself. Asserted:
** - compile either gives a schema or fails with a message (never empty, never a crash);
** - validate returns 1 (no errors) or 0 (at least one error), never -1 (out of memory
**   cannot happen here); with and without an error list it gives the same answer, and
**   twice the same errors;
** - every error is well formed: an instance path starting with "$", a keyword and a
**   message, all non-empty, and no error listed twice in a row.
** Slow cases show up as libFuzzer timeouts (-timeout in scripts/fuzz.sh).
*/
#include <string.h>

#include "json.h"
#include "schema.h"
#include "fuzz.h"

static void check_errors (const tp_schema_errors *errs) {
  for (size_t i = 0; i < errs->count; i++) {
    const tp_schema_error *e = &errs->items[i];
    FUZZ_CHECK(e->path != NULL && e->path[0] == '$', "error %zu: bad path", i);
    FUZZ_CHECK(e->keyword != NULL && e->keyword[0] != '\0', "error %zu: no keyword", i);
    FUZZ_CHECK(e->message != NULL && e->message[0] != '\0', "error %zu: no message", i);
    if (i > 0) {
      const tp_schema_error *p = &errs->items[i - 1];
      FUZZ_CHECK(strcmp(p->path, e->path) != 0 || strcmp(p->keyword, e->keyword) != 0 ||
                 strcmp(p->message, e->message) != 0,
                 "error listed twice: %s %s %s", e->path, e->keyword, e->message);
    }
  }
}

static int same_errors (const tp_schema_errors *a, const tp_schema_errors *b) {
  if (a->count != b->count) return 0;
  for (size_t i = 0; i < a->count; i++)
    if (strcmp(a->items[i].path, b->items[i].path) != 0 ||
        strcmp(a->items[i].keyword, b->items[i].keyword) != 0 ||
        strcmp(a->items[i].message, b->items[i].message) != 0) return 0;
  return 1;
}

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  unsigned flags = data[0];
  const char *text = (const char *)data + 1;
  size_t len = size - 1;
  const char *nul = memchr(text, '\0', len);
  size_t slen = nul ? (size_t)(nul - text) : len;
  json_t *doc = tp__json_loads(text, slen, NULL);
  if (doc == NULL) return 0;
  json_t *inst = nul ? tp__json_loads(nul + 1, len - slen - 1, NULL) : json_incref(doc);
  if (inst == NULL) { json_decref(doc); return 0; }

  char err[512];
  err[0] = '\0';
  tp_dialect dialect = (flags & 1) ? TP_DIALECT_DRAFT7 : TP_DIALECT_2020_12;
  tp_schema *s = tp__schema_compile(doc, dialect, NULL, (flags & 2) != 0, err, sizeof err);
  if (s == NULL) {
    FUZZ_CHECK(err[0] != '\0', "compile failed without a message");
  }
  else {
    tp_schema_errors e1, e2;
    memset(&e1, 0, sizeof e1);
    memset(&e2, 0, sizeof e2);
    int fast = tp__schema_validate(s, inst, NULL);
    int full = tp__schema_validate(s, inst, &e1);
    int again = tp__schema_validate(s, inst, &e2);
    FUZZ_CHECK(full == 0 || full == 1, "validate returned %d", full);
    FUZZ_CHECK(fast == full, "fast (%d) and full (%d) validation disagree", fast, full);
    FUZZ_CHECK(full == 1 ? e1.count == 0 : e1.count > 0, "valid=%d with %zu errors",
               full, e1.count);
    FUZZ_CHECK(again == full && same_errors(&e1, &e2), "two validations differ");
    check_errors(&e1);
    tp__schema_errors_clear(&e1);
    tp__schema_errors_clear(&e2);
    tp__schema_free(s);
  }
  json_decref(inst);
  json_decref(doc);
  return 0;
}
