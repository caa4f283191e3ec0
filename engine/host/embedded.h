/* embedded.h: Lua files built into the library by scripts/embed.lua. */
#ifndef tidepool_embedded_h
#define tidepool_embedded_h
#include <stddef.h>

typedef struct tp_embedded {
  const char *name;  /* path in the source tree, e.g. "lua/host.lua" */
  const char *data;  /* NUL-terminated */
  size_t len;
} tp_embedded;

extern const tp_embedded tp__embedded[];  /* ends with a NULL name */

/* The entry for NAME, or NULL. */
const tp_embedded *tp__embedded_find(const char *name);

#endif
