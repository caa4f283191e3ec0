/*
** util.c: the shared helpers of util.h.
*/
#include <stdlib.h>
#include <string.h>

#include "util.h"

uint64_t tp__clock_ns (clockid_t id) {
  struct timespec ts;
  if (clock_gettime(id, &ts) != 0) return 0;
  return (uint64_t)ts.tv_sec * TP_NS_PER_S + (uint64_t)ts.tv_nsec;
}

uint64_t tp__now_ns (void) { return tp__clock_ns(CLOCK_MONOTONIC); }
uint64_t tp__now_coarse_ns (void) { return tp__clock_ns(CLOCK_MONOTONIC_COARSE); }
uint64_t tp__thread_cpu_ns (void) { return tp__clock_ns(CLOCK_THREAD_CPUTIME_ID); }

int64_t tp__wall_ms (void) {
  return (int64_t)(tp__clock_ns(CLOCK_REALTIME) / TP_NS_PER_MS);
}

size_t tp__grow_cap (size_t cap, size_t need, size_t size, size_t first) {
  if (size == 0 || need > SIZE_MAX / size) return 0;
  if (need <= cap) return cap;
  size_t nc = cap ? cap : (first ? first : 1);
  while (nc < need) {
    if (nc > SIZE_MAX / 2) { nc = need; break; }
    nc *= 2;
  }
  if (nc > SIZE_MAX / size) nc = need;  /* the doubling overflows; need itself does not */
  return nc;
}

int tp__grow (void *p, size_t *cap, size_t need, size_t size, size_t first) {
  void **pp = p;
  if (need <= *cap) return 0;
  size_t nc = tp__grow_cap(*cap, need, size, first);
  if (nc == 0) return -1;
  void *np = realloc(*pp, nc * size);
  if (np == NULL) return -1;
  *pp = np;
  *cap = nc;
  return 0;
}

int tp__buf_reserve (tp__buf *b, size_t n) {
  if (n > SIZE_MAX - 1 - b->len) return -1;
  return tp__grow(&b->data, &b->cap, b->len + n + 1, 1, 256);
}

int tp__buf_add (tp__buf *b, const void *p, size_t n) {
  if (tp__buf_reserve(b, n) != 0) return -1;
  if (n) memcpy(b->data + b->len, p, n);
  b->len += n;
  b->data[b->len] = '\0';
  return 0;
}

void tp__buf_free (tp__buf *b) {
  free(b->data);
  b->data = NULL;
  b->len = b->cap = 0;
}

void tp__hex (const void *p, size_t n, char *out) {
  const unsigned char *s = p;
  for (size_t i = 0; i < n; i++) {
    out[2 * i] = tp__hex_digit(s[i] >> 4);
    out[2 * i + 1] = tp__hex_digit(s[i]);
  }
  out[2 * n] = '\0';
}
