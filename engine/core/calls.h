/*
** calls.h: the life of a tool call as the core keeps it (calls.c): its record, its
** outcome, what the run holds of it and what it costs the run's host budget. The
** script's side (namespace.c) starts calls; the host resolves, admits and runs them
** through the core's functions below, and is told through tp__host_hooks (run.h).
*/
#ifndef tidepool_calls_h
#define tidepool_calls_h

#include <stdint.h>
#include <stddef.h>
#include <jansson.h>

#include "tidepool.h"
#include "run.h"
#include "schema.h"
#include "json.h"

struct tp_schema;

/* What the core knows of the tool a call was bound to (tp__call_bind); the host's
** registry entry begins with it. */
enum {
  TP__TOOL_TREE_ARGS = 1,  /* the handler takes the argument tree: no JSON text is made */
  TP__TOOL_EXTERNAL = 2    /* no handler: the embedding program completes its calls
                           ** (tp_run_pending) */
};
typedef struct tp__tool_face {
  const char *name;
  const struct tp_schema *in_schema;   /* arguments are checked against it */
  const struct tp_schema *out_schema;  /* results are checked against it, or NULL */
  uint64_t timeout_us;                 /* 0: the run's tool_timeout alone */
  unsigned flags;                      /* TP__TOOL_* */
} tp__tool_face;

/* DECIDING: the host has not admitted it yet (a policy may hold it there). */
enum { CALL_DECIDING, CALL_QUEUED, CALL_RUNNING, CALL_DONE };

struct tp_call {
  tp_run *run;             /* NULL once the run let go of it */
  uint64_t id;
  const tp__tool_face *tool; /* NULL: not bound (unknown tool) */
  char *name;
  json_t *args;
  char *args_text;         /* lazily made by tp_call_args */
  int state;               /* CALL_* */
  int handler_owns;        /* the handler (or a policy's hold) has not let go of it yet */
  int held;                /* a policy holds it (tp__call_hold) until tp_call_decide */
  const json_t *kept_objects[TP_JSON_KEPT_MAX]; /* empty objects of its arguments that
                           ** were JSON objects (decoded from {}): never made [] */
  int nkept_objects;       /* -1: more than the list holds (then all may become []) */
  int empty_objects;       /* its arguments hold an empty table sent as {} (the host
                           ** looks at the schema only then: host/admit.c) */
  int cancelled, consumed;
  unsigned char logged;    /* its first entry is in the run's log: the second follows */
  unsigned char replay_gate; /* answered from a replayed log: held back from the script
                           ** until its turn in the log's order (replay.c) */
  int ok;
  json_t *result;          /* when ok */
  char *code, *message;    /* when not ok */
  int64_t retry_after_ms;  /* tool.rate_limited: when to try again (the error object's
                           ** retry_after_ms); 0: not said */
  int line;
  uint64_t start_ns, end_ns, deadline_ns; /* end_ns: 0 until it ends, unless its provider
                           ** set it just before it completes it (provider_lua.c) */
  uint64_t hold_start_ns, hold_end_ns; /* a policy's hold: when it began and was decided */
  uint64_t timeout_us;     /* what deadline_ns was set from, for the timeout's message */
  int timeout_own;         /* 1: the tool's own timeout_ms, 0: the tool_timeout limit */
  size_t bytes_in, bytes_out;
  size_t args_cost, result_cost;  /* parts of `charged` held by the args and result trees */
  int host_ref;            /* the provider's handle of the call (host.c: its record's
                           ** registry reference), or LUA_NOREF */
  size_t charged;          /* what the run's host budget holds for this record */
  char args_sha256[65];    /* tp__call_args_sha256's, once made; "" before */
  /* The codec's fast path (codec.c): arguments that came as text, with no tree made. */
  unsigned char args_fast; /* args is made only when asked (tp__call_args_tree), from the
                           ** script's table while live_L is set, else from fast_text or
                           ** args_text; args_cost holds the tree's cost all the same */
  lua_State *live_L;       /* while the script's call runs (ns_call): the arguments are
                           ** the table at live_idx there */
  int live_idx;
  char *fast_text;         /* the arguments' text standing in for the tree (not charged:
                           ** args_cost is), until a handler's text or the handler has it */
  size_t fast_len;
  const int *fast_counts;  /* in fast_text's block: its containers' sizes, as
                           ** tp__codec_answer_counts finds them (tp__codec_text.counts),
                           ** or NULL; fast_ncont of them */
  size_t fast_ncont;
  char *result_text;       /* an answer kept as checked text (no tree; result is NULL):
                           ** result_counts its containers' sizes (tp__codec_push) */
  const int *result_counts;
  size_t result_len;
  char name_in[32];        /* name, when it fits: no block of its own */
};

/* c's argument tree, made now from what the codec's fast path kept when it has none
** (then charged already, as args_cost). NULL when c has no arguments or the host is out
** of memory (the run's memory verdict recorded). */
json_t *tp__call_args_tree(tp_call *c);

/* The SHA-256 (hex) of the JSON text of c's arguments (tp_json_text's form), made at the
** first ask and kept: the policy's decisions and the run's call log hash a call once.
** NULL when c has no arguments or the host is out of memory. */
const char *tp__call_args_sha256(tp_call *c);

/* The length of s[0..len) cut to at most max bytes, backed off to a UTF-8 boundary. */
size_t tp__cut_utf8(const char *s, size_t len, size_t max);

/* ---- what the host does with a new call (tp__host_hooks.call) ---------------------- */

/* Binds c to tool t (t outlives the call) and counts it against tool_calls_per_tool.
** Returns 0, or -1 when c failed (limit.tool_calls, the verdict recorded). */
int  tp__call_bind(tp_call *c, const tp__tool_face *t);
/* Fails c with the run's verdict: `what` (e.g. "the arguments") were not checked. */
void tp__call_fail_stopped(tp_call *c, const char *what);
/* Checks c's arguments against its tool's input schema and admits it (it runs now, or
** once the run's in-flight cap allows), or fails it with tool.invalid_input. c is bound
** to a tool and has arguments. */
void tp__call_check_admit(tp_call *c);
/* The host's policy holds c: it stays undecided (its script waits) and owned by the hold
** until tp_call_decide; nothing else of it runs meanwhile. */
void tp__call_hold(tp_call *c);
/* Fails c with tool.denied; reason (may be NULL or "") goes into the message. */
void tp__call_deny(tp_call *c, const char *reason);
/* Fails c (not yet handed to a handler) with a formatted message, cut to TP_MSG_MAX.
** Pass text from elsewhere with "%.*s" and a precision of TP_MSG_MAX + 1. */
/* Fails c with tool.timeout: "tools.x timed out after 30s (the tool_timeout limit, ...)". */
void tp__call_timed_out(tp_call *c);
void tp__call_failf(tp_call *c, const char *code, const char *fmt, ...)
  __attribute__((format(printf, 3, 4)));

/* ---- outcomes ------------------------------------------------------------------------ */

void tp__call_finish(tp_call *c, int ok, json_t *result, const char *code, const char *msg);
/* Completes a handler's call with a result tree (stolen), checked like tp_call_complete. */
int tp__call_complete_tree(tp_call *c, json_t *result);
/* The same for a tree whose cost (tp__json_tree_cost) its maker charged to the run's host
** budget already: c takes over the charge, refunded when the tree is freed. */
int tp__call_complete_charged(tp_call *c, json_t *result, size_t cost);
/* A Lua handler's result made into the codec's text (tp__call_lua_answer), charged to the
** run's host budget, for tp__call_complete_answer. */
typedef struct tp__call_answer {
  char *text;
  size_t len, ncont, cost;
  int counted;   /* the containers' sizes lie in text's block already (tp__codec_text) */
} tp__call_answer;
/* The value at idx of L (a Lua handler's result, in any state) through the codec, with no
** tree: 1 with *a filled, or 0 when the codec declines it (nothing done: the caller
** takes the tree path, which gives the messages). Runs nothing and changes nothing of c. */
int tp__call_lua_answer(tp_call *c, lua_State *L, int idx, tp__call_answer *a);
/* Completes the handler's call c with a (taken): as tp__call_complete_tree. */
void tp__call_complete_answer(tp_call *c, tp__call_answer *a);
/* The arguments of c as the codec's text when it has no tree (*counts: what
** tp__codec_push needs, room for 64), else NULL: push them with tp__codec_push. */
const char *tp__call_args_text_push(tp_call *c, size_t *len, int counts[64]);
/* Completes c, answered from a replayed log, with result (stolen; charged here). */
void tp__call_complete_logged(tp_call *c, json_t *result);
/* Run r's call id, or NULL when it has none (let go, or never made). */
tp_call *tp__run_find_call(tp_run *r, uint64_t id);
/* Ends the handler's (or hold's) ownership of c: queued calls may start, and c is freed
** when its run let go of it too. */
void tp__call_handler_done(tp_call *c);

/* ---- what the run holds ------------------------------------------------------------ */

/* The envelope's "calls" (see calls.c), written into buf (cap bytes) when it surely fits
** there, else malloc'd (NULL when out of memory): the caller frees what is not buf.
** TP_CALLS_TEXT_STACK bytes hold a few calls' records. */
#define TP_CALLS_TEXT_STACK 4096
char *tp__run_calls_text_in(tp_run *r, size_t *len, char *buf, size_t cap);
void tp__run_cancel_calls(tp_run *r);
/* The run lets go of every call it holds (at its destruction); handlers that still own
** a call keep it until they complete it. */
void tp__run_free_calls(tp_run *r);
/* Advances r->active_from past done calls; returns it. */
size_t tp__run_active_from(tp_run *r);
/* A new call of r named name[0..nlen) at the script's line: counted against tool_calls
** (past it the record fails with limit.tool_calls and the verdict is recorded). NULL
** when the host is out of memory, the verdict recorded. */
tp_call *tp__call_attempt(tp_run *r, const char *name, size_t nlen, int line);
/* The script has taken c's outcome (or never will). */
void tp__call_taken(tp_run *r, tp_call *c);
/* Starts c (from tp__call_attempt) with args (stolen; NULL: they could not be read):
** the host decides on it (tp__host_hooks.call). exact: c->name is the whole name the
** script used (not cut, no NUL byte); else the call fails with tool.unknown. */
void tp__call_start(tp_run *r, tp_call *c, size_t nlen, int exact, json_t *args);
/* The completion of call id, if any: 1 done (or gone), 0 still running; a call whose
** timeout passed fails with tool.timeout here. */
int tp__call_ready(tp_run *r, uint64_t id);
/* Pushes the result (returns 1) or the error object (returns 0) of a ready call onto L
** and forgets it. omt: as tp__codec_push's (0: looked up). */
int tp__call_consume(tp_run *r, uint64_t id, lua_State *L, int omt);
/* The error object a script gets: {code=, message=, tool=} with a tostring. */
void tp__push_error_object(lua_State *L, const char *code, const char *msg, const char *tool);

/* A call of r completed or a deadline passed: tells the host when it drives r (the
** engine's wake hook; calls.c, under run.c, so that completing a call can wake). */
void tp__run_wake(tp_run *r);

/* Whether s looks like JSON text of an object or an array ({...} or [...], blanks
** around): a string a script may take for a table. */
int tp__json_text_like(const char *s, size_t n);

/* Remembers that tool (a tool's name) returned the string s, which looks like JSON text,
** so that an error where the script uses it as a table names the tool. */
void tp__run_note_json_text(tp_run *r, const char *tool, const char *s, size_t n);
/* The FNV-1a hash of s under which tp__run_note_json_text remembers it. */
uint64_t tp__json_text_hash(const char *s, size_t n);

/* The words a logged call fails with when its result is over TP_LOG_VALUE_MAX as JSON
** (replay.h's tp__replay_end returned 1). */
void tp__replay_too_large(tp_call *c, char *buf, size_t len);

#endif
