/*
** util.h: the one leaf of shared helpers (util.c), as libuv's uv-common.h: clocks and time
** units, growing an array with overflow checks, a growable byte buffer, hex. Nothing else
** in the engine writes its own; every layer may include it.
*/
#ifndef tidepool_util_h
#define tidepool_util_h

#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* ---- clocks and time units ---------------------------------------------------------- */

#define TP_NS_PER_US UINT64_C(1000)
#define TP_NS_PER_MS UINT64_C(1000000)
#define TP_NS_PER_S  UINT64_C(1000000000)

/* The time of clock id in nanoseconds (0 when the clock cannot be read). */
uint64_t tp__clock_ns(clockid_t id);
/* CLOCK_MONOTONIC: deadlines and durations. */
uint64_t tp__now_ns(void);
/* CLOCK_MONOTONIC_COARSE: a few milliseconds fine, read in a few ns where CLOCK_MONOTONIC
** costs tens in a VM (kvm-clock); for clocks read on every call. */
uint64_t tp__now_coarse_ns(void);
/* CLOCK_THREAD_CPUTIME_ID: the calling thread's CPU time. */
uint64_t tp__thread_cpu_ns(void);
/* CLOCK_REALTIME in milliseconds since the epoch: wall time, for what outlives the process. */
int64_t  tp__wall_ms(void);

static inline uint64_t tp__ns_to_ms (uint64_t ns) { return ns / TP_NS_PER_MS; }
static inline uint64_t tp__ns_to_us (uint64_t ns) { return ns / TP_NS_PER_US; }
/* Saturating: a huge count of ms or µs is "never", not a wrapped small deadline. */
static inline uint64_t tp__ms_to_ns (uint64_t ms) {
  return ms > UINT64_MAX / TP_NS_PER_MS ? UINT64_MAX : ms * TP_NS_PER_MS;
}
static inline uint64_t tp__us_to_ns (uint64_t us) {
  return us > UINT64_MAX / TP_NS_PER_US ? UINT64_MAX : us * TP_NS_PER_US;
}

/* ---- growing ------------------------------------------------------------------------ */

/* The capacity to hold need elements of size bytes, doubling cap (first when cap is 0);
** cap itself when it holds them already. 0 when need elements of size would overflow
** size_t. */
size_t tp__grow_cap(size_t cap, size_t need, size_t size, size_t first);
/* Makes the array *p of *cap elements of size bytes hold at least need of them (see
** tp__grow_cap). 0, or -1 on overflow or out of memory (then *p and *cap are as they
** were). */
int tp__grow(void *p, size_t *cap, size_t need, size_t size, size_t first);

/* A growable byte buffer: data[0..len) written, data[len] a NUL once anything was
** added. Zero-initialised is empty. */
typedef struct tp__buf {
  char *data;
  size_t len, cap;
} tp__buf;

/* Room for n more bytes and a NUL: 0, or -1 (overflow, out of memory: b unchanged). */
int  tp__buf_reserve(tp__buf *b, size_t n);
/* Appends n bytes: 0, or -1 as tp__buf_reserve. */
int  tp__buf_add(tp__buf *b, const void *p, size_t n);
/* Frees the data; b is empty again. */
void tp__buf_free(tp__buf *b);

/* ---- hex ---------------------------------------------------------------------------- */

/* out: the n bytes of p as 2n lower-case hex digits and a NUL. */
void tp__hex(const void *p, size_t n, char *out);
/* The lower-case hex digit of v & 15. */
static inline char tp__hex_digit (unsigned v) { return "0123456789abcdef"[v & 15]; }

/* The JSON escape of byte c (a control byte, '"' or '\\') into esc: \" \\ \n \r \t \b \f,
** else \u00XX. Returns its length, 2 or 6. One writer of JSON strings' escapes for json.c's
** dump and the core's codec, which must write the same bytes. */
static inline size_t tp__json_escape (unsigned char c, char esc[6]) {
  esc[0] = '\\';
  switch (c) {
    case '"': esc[1] = '"'; return 2;
    case '\\': esc[1] = '\\'; return 2;
    case '\n': esc[1] = 'n'; return 2;
    case '\r': esc[1] = 'r'; return 2;
    case '\t': esc[1] = 't'; return 2;
    case '\b': esc[1] = 'b'; return 2;
    case '\f': esc[1] = 'f'; return 2;
    default:
      esc[1] = 'u'; esc[2] = '0'; esc[3] = '0';
      esc[4] = tp__hex_digit(c >> 4u); esc[5] = tp__hex_digit(c);
      return 6;
  }
}

#endif
