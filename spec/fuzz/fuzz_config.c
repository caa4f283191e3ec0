/*
** fuzz_config.c: the config file's check (engine/host/config.c: the embedded schema, the
** messages written from its errors, the limit values, the paths).
**
** The input is a config file's text (any bytes). Asserted:
** - tp_config_check returns TP_OK with an empty message, or TP_EINVAL with one problem a
**   line, each starting "config: " and, past the whole-text problems (not JSON, not an
**   object), with a JSON pointer ("config: /...: "), but for the count of those past
**   the cap ("config: and N more problems past these");
** - its verdict and message are the same twice (nothing depends on state left behind).
** Relative paths resolve against a folder that does not exist, so a directory is never
** found, whatever the text names.
*/
#include <string.h>

#include "tidepool.h"
#include "fuzz.h"

#define BASE "/nonexistent-tidepool-fuzz"

static char a[1 << 16], b[1 << 16];

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size) {
  const char *text = (const char *)data;
  int ra = tp_config_check(text, size, BASE, a, sizeof a);
  int rb = tp_config_check(text, size, BASE, b, sizeof b);
  FUZZ_CHECK(ra == TP_OK || ra == TP_EINVAL, "status %d", ra);
  FUZZ_CHECK(ra == rb && strcmp(a, b) == 0, "two checks differ: %d %d\n%s\n--\n%s", ra, rb, a, b);
  if (ra == TP_OK) {
    FUZZ_CHECK(a[0] == '\0', "ok with a message: %s", a);
    return 0;
  }
  int whole = strncmp(a, "config: not valid JSON: ", 24) == 0 ||
              strncmp(a, "config: expected a JSON object", 30) == 0;
  for (const char *line = a; *line; ) {
    size_t n = strcspn(line, "\n");
    FUZZ_CHECK(strncmp(line, "config: ", 8) == 0, "a line without config: %.*s", (int)n, line);
    FUZZ_CHECK(whole || line[8] == '/' || strncmp(line, "config: and ", 12) == 0,
               "a line without a JSON pointer: %.*s", (int)n, line);
    FUZZ_CHECK(n > 10, "an empty problem: %.*s", (int)n, line);
    line += n + (line[n] == '\n');
  }
  return 0;
}
