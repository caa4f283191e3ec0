/*
** fuzz_normalize.c: the source normalizer (engine/core/normalize.c) and the compile of what it
** gives.
**
** Input: what a model might send (prose, fences, #! lines, Lua). Asserted:
** - normalizing as run.c does (tp__normalize_shebang, then tp__normalize_fence and the
**   fence body's own #! line) gives a span inside the input (it never allocates or
**   copies), and normalizing that span again stays inside it;
** - a text without a fence or a #! line comes back whole;
** - tp_engine_check (normalize + compile in a fresh sandbox) returns one envelope that is
**   JSON with "ok", and when not ok an error whose code is syntax, limit.source or
**   limit.memory, with a message.
*/
#include <string.h>

#include <jansson.h>

#include "tidepool.h"
#include "normalize.h"
#include "fuzz.h"

static tp_engine *engine;
static tp_limits limits;

int LLVMFuzzerInitialize (int *argc, char ***argv) {
  (void)argc; (void)argv;
  engine = tp_engine_create();
  if (engine == NULL) abort();
  tp_limits_init(&limits);
  limits.memory = 8u << 20;
  limits.cpu_us = limits.wall_us = 2000000;
  return 0;
}

/* What run.c makes of a text that does not compile: the text without a #! line, then
** the body of its first fence, if it has one, without a #! line. */
static const char *normalize (const char *src, size_t *len) {
  const char *s = tp__normalize_shebang(src, len);
  size_t n = *len;
  const char *body = tp__normalize_fence(s, &n, NULL);
  if (body == NULL) return s;
  *len = n;
  return tp__normalize_shebang(body, len);
}

static int has_fence_or_shebang (const char *s, size_t n) {
  if (n >= 2 && s[0] == '#' && s[1] == '!') return 1;
  for (size_t i = 0; i + 2 < n; i++)
    if ((s[i] == '`' || s[i] == '~') && s[i + 1] == s[i] && s[i + 2] == s[i]) return 1;
  return 0;
}

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size) {
  const char *src = (const char *)data;
  size_t len = size;
  const char *out = normalize(src, &len);
  FUZZ_CHECK(out >= src && out <= src + size, "span starts outside the input");
  FUZZ_CHECK(len <= size && (size_t)(out - src) <= size - len, "span ends outside the input");
  if (!has_fence_or_shebang(src, size))
    FUZZ_CHECK(out == src && len == size, "a plain text was changed");
  size_t len2 = len;
  const char *out2 = normalize(out, &len2);
  FUZZ_CHECK(out2 >= out && len2 <= len && (size_t)(out2 - out) <= len - len2,
             "second pass outside the first span");

  char *env = NULL;
  int ok = -1;
  int rc = tp_engine_check(engine, src, size, &limits, &env, &ok);
  FUZZ_CHECK(rc == TP_OK && env != NULL, "tp_engine_check returned %d", rc);
  json_error_t je;
  json_t *j = json_loads(env, JSON_ALLOW_NUL, &je);
  FUZZ_CHECK(j != NULL && json_is_object(j), "the envelope is not a JSON object: %s", env);
  json_t *jok = json_object_get(j, "ok");
  FUZZ_CHECK(json_is_boolean(jok) && json_is_true(jok) == (ok == 1), "ok disagrees: %s", env);
  if (!ok) {
    const char *code = json_string_value(json_object_get(json_object_get(j, "error"), "code"));
    const char *msg = json_string_value(json_object_get(json_object_get(j, "error"), "message"));
    /* a compile error, or a finding of the pre-run check (marked "precheck": a line that
    ** would surely fail, found before anything ran) */
    int precheck = json_is_true(json_object_get(json_object_get(j, "error"), "precheck"));
    FUZZ_CHECK(code && (!strcmp(code, "syntax") || !strcmp(code, "limit.source") ||
                        !strcmp(code, "limit.memory") ||
                        (precheck && (!strcmp(code, "runtime") || !strcmp(code, "tool.unknown") ||
                                      !strcmp(code, "tool.invalid_input")))),
               "unexpected code: %s", env);
    FUZZ_CHECK(msg && msg[0], "error without a message: %s", env);
  }
  json_decref(j);
  tp_free(env);
  return 0;
}
