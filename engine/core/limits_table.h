/*
** limits_table.h: the limits of a run as data. One table (limits.c) says, for every field of
** tp_limits, its unit, its default, how each front end names it (the option of
** `tidepool run` and `tidepool mcp`, the option of the Lua module), its help line, and
** the code, message and hint of the error when it stops a run. tp_limits_init, the
** run's verdict messages and the public view of the table (tp_limit_at, tp_limit_find,
** tp_limits_set in tidepool.h, limits.c), from which the three front ends parse and
** document every limit, all read it, so a limit added to tp_limits is added here and
** nowhere else.
**
** This header needs only tidepool.h. Not installed, not API.
** (Not limits.h: engine/ is on the include path, and that name is the C library's.)
*/
#ifndef tidepool_limits_table_h
#define tidepool_limits_table_h

#include <stddef.h>
#include <stdint.h>

#include "tidepool.h"

typedef enum tp__unit {
  TP__UNIT_BYTES,     /* "64M", "512K", "1G", "1MiB", "100" */
  TP__UNIT_COUNT,     /* a whole number */
  TP__UNIT_DURATION   /* microseconds; text "500ms", "2s", "1.5s", "1m", "250us", "3" (s) */
} tp__unit;

typedef struct tp__limit {
  const char *field;    /* the tp_limits member, "wall_us" */
  size_t offset;        /* of the member in tp_limits */
  size_t size;          /* of the member: 4 (uint32_t) or 8 (uint64_t, size_t on LP64) */
  tp__unit unit;
  uint64_t def;         /* what tp_limits_init sets */
  const char *flag;     /* option of `tidepool run`, "--timeout" */
  const char *mcp;      /* option of `tidepool mcp` (NULL: not offered there) */
  const char *option;   /* option of the Lua module's run and check, "timeout" */
  const char *help;     /* the --help line after the flag, without the default */
  int kill;             /* the tp_kill verdict when it stops a run; 0 (TP_KILL_NONE) when
                        ** it fails a call or a request instead */
  const char *code;     /* the error code it gives, "limit.time"; NULL: none of its own */
  const char *message;  /* the verdict's message; "%s" stands for the limit in words
                        ** (tp__limit_words); NULL when the code's message is written
                        ** where the limit is checked */
  const char *hint;     /* what the script should do instead; NULL: none */
  int noted;            /* 1: the words written where the limit was passed (the
                        ** sandbox's kill note) replace message */
} tp__limit;

/* The table, in the order of tp_limits' fields; tp__limits_count entries. */
extern const tp__limit tp__limits[];
extern const size_t tp__limits_count;

/* The entry of the tp_limits member at offset (offsetof(tp_limits, source)); NULL when
** none is there. */
const tp__limit *tp__limit_field(size_t offset);

/* Durations stop at 10^15 us (31 years): a double holds every such integer exactly, and
** nanoseconds added to a monotonic clock stay far from overflow. */
#define TP__DURATION_MAX UINT64_C(1000000000000000)

/* The largest value the member of li holds: UINT32_MAX for 4 bytes, for durations
** TP__DURATION_MAX, else UINT64_MAX (SIZE_MAX for a 4-byte size_t). */
uint64_t tp__limit_max(const tp__limit *li);

uint64_t tp__limit_get(const tp_limits *l, const tp__limit *li);
/* Sets the member; v must be at most tp__limit_max(li). */
void tp__limit_set(tp_limits *l, const tp__limit *li, uint64_t v);

/* Results of the parsers: 0, or one of these. */
#define TP__PARSE_BAD      (-1)  /* not a value of the unit */
#define TP__PARSE_NEGATIVE (-2)  /* a negative value */
#define TP__PARSE_RANGE    (-3)  /* larger than max, or than uint64_t holds */

/* Parses text (the whole string) as a value of unit no larger than max into *out: bytes,
** a count, or microseconds. Overflow anywhere (digits, suffix multiplication, the
** exponent of a duration) is TP__PARSE_RANGE, never a wrapped value. */
int tp__parse_value(tp__unit unit, const char *text, uint64_t max, uint64_t *out);

/* A duration given as seconds (the Lua module's numbers) -> microseconds, same results
** (NaN is TP__PARSE_BAD). */
int tp__parse_seconds(double s, uint64_t max, uint64_t *out);

/* What a parser's result rc for text means, for a person: "bad size '12Q' (use bytes
** or a suffix: 512K, 64M, 1G)". noun names a count ("instruction count"; NULL: "count"). */
void tp__parse_why(tp__unit unit, const char *noun, int rc, const char *text, uint64_t max,
                   char *buf, size_t len);

/* The message of a parse error for limit li (its own noun for counts). */
void tp__limit_why(const tp__limit *li, int rc, const char *text, char *buf, size_t len);

/* A value in words, as messages give it: "64 MiB", "1536 bytes", "10 s", "250 ms", "7". */
void tp__limit_words(tp__unit unit, uint64_t v, char *buf, size_t len);

/* A value as an option would take it, for help texts: "64M", "10s", "1000", or "none"
** for 0. */
void tp__limit_short(tp__unit unit, uint64_t v, char *buf, size_t len);

#endif
