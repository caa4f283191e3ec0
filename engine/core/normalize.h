/*
** normalize.h: what models send, made into a script (normalize.c). Never allocates: each
** function returns a span of its input, its length through *len. run.c drops a leading
** #! line of every script, and takes the body of the first markdown fence (prose around
** it dropped, then its own #! line) only of a text that does not compile.
*/
#ifndef tidepool_normalize_h
#define tidepool_normalize_h

#include <stddef.h>

/* The body of the first fence (```, ~~~) and its length through *len, or NULL when src
** has none; *open_line (may be NULL) is the 1-based line of the opening fence. */
const char *tp__normalize_fence(const char *src, size_t *len, int *open_line);
/* src without a leading "#!" line (its newline kept, so line numbers hold). */
const char *tp__normalize_shebang(const char *src, size_t *len);

#endif
