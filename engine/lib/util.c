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

/* Two hex digits a byte, from a table of the 256 pairs (a digest is hex at every call
** the policy decides on). */
static const char hex_pairs[513] =
  "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
  "202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f"
  "404142434445464748494a4b4c4d4e4f505152535455565758595a5b5c5d5e5f"
  "606162636465666768696a6b6c6d6e6f707172737475767778797a7b7c7d7e7f"
  "808182838485868788898a8b8c8d8e8f909192939495969798999a9b9c9d9e9f"
  "a0a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3b4b5b6b7b8b9babbbcbdbebf"
  "c0c1c2c3c4c5c6c7c8c9cacbcccdcecfd0d1d2d3d4d5d6d7d8d9dadbdcdddedf"
  "e0e1e2e3e4e5e6e7e8e9eaebecedeeeff0f1f2f3f4f5f6f7f8f9fafbfcfdfeff";

void tp__hex (const void *p, size_t n, char *out) {
  const unsigned char *s = p;
  for (size_t i = 0; i < n; i++) memcpy(out + 2 * i, hex_pairs + 2 * s[i], 2);
  out[2 * n] = '\0';
}
