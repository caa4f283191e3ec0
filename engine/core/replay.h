/*
** replay.h: runs that can be replayed exactly (replay.c). Core: a run given a seed, a
** clock, a log callback or a log to replay (tidepool.h, "durable and deterministic
** runs") gets a tp_replay; a run without one pays one pointer test at each tool call
** and nothing else.
**
** The log is a list of entries, JSON objects in the engine's form, each with a "type":
**   {"seed":7,"type":"seed"}                                     the run's seed
**   {"clock":"time","n":1,"type":"clock","value":1700000000}     the n-th clock read
**   {"args_hash":"<sha256 hex>","phase":0,"seq":3,"tool":"kv.get","type":"call"}
**   {"ok":true,"phase":1,"result":...,"seq":3,"sync":false,"type":"call"}
**   {"error":{"code":...,"message":...},"ok":false,"phase":1,"seq":3,"sync":true,...}
**   {"seq":5,"type":"order"}     parallel resumed the branch waiting on call 5
** "sync" says the call was complete before the script could wait on it (a handler that
** answered at once): a replayed call that was not is held back from the script until
** the point where the recorded run took it, so parallel branches interleave as they did.
*/
#ifndef tidepool_replay_h
#define tidepool_replay_h

#include <stdint.h>
#include <jansson.h>

#include "tidepool.h"
#include "run.h"

/* A call of the log replayed. */
typedef struct tp__rcall {
  uint64_t seq;
  char *tool;
  char hash[65];
  int has_end, ok, sync;
  json_t *result;          /* ok */
  char *code, *message;    /* not ok */
  int64_t retry_after_ms;
} tp__rcall;

typedef struct tp_replay {
  /* the seed */
  int has_seed;
  uint64_t seed;
  uint64_t reseeds;        /* math.randomseed() calls without arguments */
  /* the clock: 0 the system's, 1 fixed (epoch + step per read), 2 the caller's */
  int clock_kind;
  int64_t epoch;
  uint64_t step_us;
  tp_clock_fn clock_fn;
  void *clock_ud;
  uint64_t reads;          /* clock reads so far (replayed ones included) */
  /* recording */
  tp_log_cb log_cb;
  void *log_ud;
  tp_call *starting;       /* the call being started: it completes "sync" */
  /* replaying */
  int replaying;           /* a log was given */
  int seed_logged;         /* it has the seed */
  tp__rcall *calls;        /* by seq */
  size_t ncalls;
  uint64_t last_seq;       /* the highest seq of the log's calls */
  struct { int cpu; json_t *value; } *clocks;
  size_t nclocks, clock_at;
  uint64_t *order;
  size_t norder, order_at;
  int gating;              /* replayed calls wait for their turn in the order */
  int held;                /* a replayed call, complete, was held back in this step */
  int began;
  /* replay.c's tp__replay_call and tp__replay_end, set when the state is made: calls.c
  ** (under replay.c) reaches the log through them, never by name. */
  int (*on_call)(tp_run *r, tp_call *c);
  int (*on_end)(tp_run *r, tp_call *c, int ok, const json_t *result, const char *code,
                const char *msg);
} tp_replay;

/* r's replay state, made on first use (TP_ENOMEM when out of memory). */
int  tp__replay_get(tp_run *r, tp_replay **out);
void tp__replay_free(tp_replay *rp);
/* At r's first step: seeds math.random, puts the run's clock into os.time, os.clock and
** os.date, and logs the seed. reseed is run.c's tp__run_reseed, passed down (replay.c
** sits under run.c). 0, or -1 with the verdict recorded (out of memory). */
int  tp__replay_begin(tp_run *r, int (*reseed)(tp_run *r, unsigned int seed));
/* Before the host sees call c (arguments read, name exact): answers it from the log
** (returns 1: c is complete), ends the run with replay.divergence (returns 1), or logs
** its first entry and returns 0 (the host goes on with it). */
int  tp__replay_call(tp_run *r, tp_call *c);
/* c, logged, completes with this outcome: its second entry. Returns 1 when the result
** is too large for the log (over TP_LOG_VALUE_MAX as JSON): the caller fails the call
** with tp__replay_too_large's words (calls.c) instead, which logs that. */
int  tp__replay_end(tp_run *r, tp_call *c, int ok, const json_t *result, const char *code,
                    const char *msg);
/* Whether the script may take call id now, where a parallel branch or a coroutine of
** the script would wait for it (first: its first look, right after the call started;
** else a pass of parallel over its branches). Logs the order of live calls. */
int  tp__replay_may_take(tp_run *r, uint64_t id, int first);
/* Nothing could go on in a pass of parallel because of the log's order (the script
** changed): replayed calls stop waiting for their turn. */
void tp__replay_ungate(tp_run *r);

#endif
