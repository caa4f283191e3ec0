/*
** store_int.h: what the store's own files share (store.c, store_memory.c,
** store_sqlite.c, kvstore.c, policy.c) beyond the backends' interface in store.h.
*/
#ifndef tidepool_store_int_h
#define tidepool_store_int_h

#include <stddef.h>
#include <stdint.h>

#include "tidepool.h"
#include "store.h"

/* store_timed.c: e's connection inner (whose reference it takes over), every operation
** timed into e's metrics; closing it closes inner. NULL when out of memory. */
tp_store_conn *tp__store_timed(tp_engine *e, tp_store_conn *inner);

/* The clock of expiries (runs, sessions): Unix time in ms. A test sets a fake one with
** tp__store_set_clock (NULL puts the real one back); process-wide. */
int64_t tp__store_now_ms(void);
void tp__store_set_clock(int64_t (*now_ms)(void));

/* The token bucket of bucket_take, one rule for every backend: a fresh bucket (fresh
** nonzero) starts full at now; tokens come back at per_second, up to capacity. Takes one
** token and returns 0, or returns the ms until one is there (>= 1). */
int64_t tp__bucket_step(double *tokens, int64_t *t_ms, int fresh, double capacity,
                        double per_second, int64_t now_ms);

/* Appends s[0..len) as a JSON string (quoted, escaped; bytes >= 0x80 as they are) to
** *buf (malloc'd, *n used of *cap). -1 when out of memory. */
int tp__store_json_str(char **buf, size_t *n, size_t *cap, const char *s, size_t len);
/* Appends raw bytes. -1 when out of memory. */
int tp__store_append(char **buf, size_t *n, size_t *cap, const char *s, size_t len);

/* store_memory.c: the memory backend (tp_store_create). */
tp_store *tp__store_memory_new(void);
/* Test hook: a memory store whose answers come on the next turn of the connection's
** loop, as a remote store's would, and whose buckets the policy uses (as it uses a
** durable store's). */
void tp__store_memory_defer(tp_store *s, int on);
/* Whether s is shared beyond this process (SQLite, Redis) or asks to be treated so (the
** hook above): the policy keeps its rate buckets there. */
int tp__store_shared(const tp_store *s);

/* engine.c: e's connection to its store (tp_engine_set_store's, else a memory store of
** its own), made on e's loop at the first need; NULL with tp_engine_error set. */
struct tp_engine;
tp_store_conn *tp__engine_store_conn(struct tp_engine *e);

#endif
