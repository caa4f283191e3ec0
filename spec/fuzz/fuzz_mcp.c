/*
** fuzz_mcp.c: the MCP server's line parser and dispatcher (engine/front/mcp/), whole: JSON-RPC
** parsing, batches, initialize and version negotiation, tools/list, logging/setLevel,
** cancellation, session ids, tools/call with the script run to its end on an inline
** worker engine (small limits, the test tools test.echo and test.sleep, exposed), and
** the response building that cuts oversized results.
**
** Input: lines of text, split at '\n'; each goes to a fresh server (one per input, so a
** finding replays alone) through tp__mcp_main_fuzz_line. Asserted for every line the server
** writes:
** - it is shorter than 10 MiB and holds no '\n';
** - it is JSON: an object, or a non-empty array of objects (a batch's answers);
** - each object has "jsonrpc": "2.0" and exactly one of "result", "error" (with an
**   integer code and a string message) or "method" (a notification);
** - a tools/call result's structuredContent, when present with "ok", is an object whose
**   "ok" is a boolean, with an error code when ok is false.
** A crash, a sanitizer report or a leak is a finding too (the server is freed each time).
*/
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "mcp/mcp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond, ...) do { \
    if (!(cond)) { \
      fprintf(stderr, "fuzz_mcp: invariant failed: %s: ", #cond); \
      fprintf(stderr, __VA_ARGS__); \
      fputc('\n', stderr); \
      abort(); \
    } \
  } while (0)

static void check_message (const json_t *m, const char *line) {
  CHECK(json_is_object(m), "a message that is not an object: %.200s", line);
  CHECK(json_is_string(json_object_get(m, "jsonrpc")) &&
        strcmp(json_string_value(json_object_get(m, "jsonrpc")), "2.0") == 0,
        "no \"jsonrpc\": \"2.0\": %.200s", line);
  int has_result = json_object_get(m, "result") != NULL;
  int has_error = json_object_get(m, "error") != NULL;
  int has_method = json_object_get(m, "method") != NULL;
  CHECK(has_result + has_error + has_method == 1, "not one of result, error, method: %.200s",
        line);
  if (has_error) {
    const json_t *e = json_object_get(m, "error");
    CHECK(json_is_integer(json_object_get(e, "code")) &&
          json_is_string(json_object_get(e, "message")), "a malformed error: %.200s", line);
  }
  if (has_result) {
    const json_t *sc = json_object_get(json_object_get(m, "result"), "structuredContent");
    const json_t *ok = json_object_get(sc, "ok");
    if (ok != NULL) {
      CHECK(json_is_boolean(ok), "ok is not a boolean: %.200s", line);
      if (json_is_false(ok))
        CHECK(json_is_string(json_object_get(json_object_get(sc, "error"), "code")),
              "a failed run without an error code: %.200s", line);
    }
  }
}

static void sink (void *ud, const char *line, size_t len) {
  (void)ud;
  CHECK(len < (10u << 20), "a line of %zu bytes", len);
  CHECK(memchr(line, '\n', len) == NULL, "a newline inside a line: %.200s", line);
  json_error_t err;
  json_t *j = json_loadb(line, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &err);
  CHECK(j != NULL, "not JSON (%s): %.200s", err.text, line);
  if (json_is_array(j)) {
    CHECK(json_array_size(j) > 0, "an empty array: %.200s", line);
    size_t i;
    json_t *m;
    json_array_foreach(j, i, m) check_message(m, line);
  }
  else check_message(j, line);
  json_decref(j);
}

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size) {
  if (size > (1u << 20)) return 0;  /* the 16 MiB line cap is not what is fuzzed here */
  tp__mcp_fuzz *f = tp__mcp_main_fuzz_new(sink, NULL);
  if (f == NULL) return 0;
  const char *p = (const char *)data, *end = p + size;
  int lines = 0;
  while (p < end && lines++ < 32) {  /* each line may run a script: keep inputs quick */
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
    tp__mcp_main_fuzz_line(f, p, n);
    p += n + (nl != NULL);
  }
  tp__mcp_main_fuzz_free(f);
  return 0;
}
