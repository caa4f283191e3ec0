/*
** normalize.c: what models send is not always a bare script. A reply often wraps the
** code in a markdown fence, with a sentence before it ("Here is the script:") and
** sometimes after. The code inside the first fence is then the script. A leading "#!"
** line is dropped, as lua.c does for files.
**
** Fences are stripped only from text that does not compile as Lua as a whole (run.c
** compiles the text first and asks for the fence's body only on a syntax error), so a
** valid script holding a fence in a string ([[ ```lua ... ``` ]]) runs as written: what
** a reviewer approves is what runs. Every function here is one linear pass and never
** allocates.
*/
#include <string.h>

#include "normalize.h"

/* Start of the line after p (or end). */
static const char *next_line (const char *p, const char *end) {
  const char *nl = memchr(p, '\n', (size_t)(end - p));
  return nl ? nl + 1 : end;
}

/* Nonzero when the line at p opens or closes a fence: optional indentation, then ```
** or ~~~. */
static int is_fence (const char *p, const char *end, char *ch) {
  while (p < end && (*p == ' ' || *p == '\t')) p++;
  if (end - p >= 3 && (p[0] == '`' || p[0] == '~') && p[1] == p[0] && p[2] == p[0]) {
    *ch = p[0];
    return 1;
  }
  return 0;
}

const char *tp__normalize_fence (const char *src, size_t *len, int *open_line) {
  const char *end = src + *len;
  int n = 1;
  for (const char *line = src; line < end; line = next_line(line, end), n++) {
    char ch;
    if (!is_fence(line, end, &ch)) continue;
    const char *body = next_line(line, end), *p = body;
    for (; p < end; p = next_line(p, end)) {
      char ch2;
      if (is_fence(p, end, &ch2) && ch2 == ch) break;
    }
    if (open_line) *open_line = n;
    *len = (size_t)(p - body);
    return body;
  }
  return NULL;
}

const char *tp__normalize_shebang (const char *src, size_t *len) {
  const char *end = src + *len;
  if (*len >= 2 && src[0] == '#' && src[1] == '!') {
    const char *p = next_line(src, end);
    if (p > src && p[-1] == '\n') p--;  /* keep the newline so line numbers hold */
    *len = (size_t)(end - p);
    return p;
  }
  return src;
}
