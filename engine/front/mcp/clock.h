/*
** clock.h: the front end's clocks, one copy for every file of engine/front/mcp (the front
** sees the public API only, so not engine/lib/util.h). Inline, with no .c of its own:
** every floor may include it and none calls another for the time.
*/
#ifndef tidepool_mcp_clock_h
#define tidepool_mcp_clock_h

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

/* CLOCK_MONOTONIC in nanoseconds: durations, timeouts. */
static inline uint64_t tp__mcp_mono_ns (void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Unix time in milliseconds: what is stored or shown as a date. */
static inline int64_t tp__mcp_wall_ms (void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Now as an audit line's time, "2026-11-23T01:02:03.456Z" ("" if the date cannot be
** had); len at least 25. */
static inline void tp__mcp_iso_time (char *when, size_t len) {
  struct timespec ts;
  struct tm tm;
  when[0] = '\0';
  clock_gettime(CLOCK_REALTIME, &ts);
  if (gmtime_r(&ts.tv_sec, &tm))
    snprintf(when, len, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", tm.tm_year + 1900,
             tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
             ts.tv_nsec / 1000000);
}

#endif
