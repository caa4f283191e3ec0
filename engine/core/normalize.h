/*
** normalize.h: what models send, made into a script (normalize.c). Never allocates.
*/
#ifndef tidepool_normalize_h
#define tidepool_normalize_h

#include <stddef.h>

/* What models send: the body of the first markdown fence (prose around it dropped), or
** else the text without a leading #! line. Returns a pointer into src and the length
** through *len; never allocates. run.c uses it only for text that does not compile. */
const char *tp__normalize(const char *src, size_t *len);
/* The body of the first fence (```, ~~~) and its length through *len, or NULL when src
** has none; *open_line (may be NULL) is the 1-based line of the opening fence. */
const char *tp__normalize_fence(const char *src, size_t *len, int *open_line);
/* src without a leading "#!" line (its newline kept, so line numbers hold). */
const char *tp__normalize_shebang(const char *src, size_t *len);

#endif
