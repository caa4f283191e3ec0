/*
** json.h: the value bridge between Lua 5.4 and JSON (jansson trees and JSON text).
**
** Every value that crosses the sandbox boundary (tool arguments, tool results, the
** script's return value) goes through here. The Lua side is read with raw access only,
** so no metamethod of a script ever runs in host code. See DESIGN.md section 8.
**
** Mapping:
**   nil (top level), json.null  <-> null        booleans <-> true/false
**   Lua integer                 <-> JSON integer (exact int64)
**   Lua float                   <-> JSON real (1.0 stays "1.0", -0.0 stays "-0.0")
**   string (UTF-8, NUL allowed) <-> string
**   table tagged json.array / keys exactly 1..n <-> array;  decoded arrays are tagged
**   table with string keys, or an untagged empty table <-> object
*/
#ifndef tidepool_json_h
#define tidepool_json_h

#include <stddef.h>
#include <jansson.h>
#include "lua.h"

typedef struct tp_json_err {
  char path[256];     /* JSON path of the bad value: $, $.a.b, $.items[2], $["odd key"] */
  char message[320];  /* complete sentence for a model: what, where (the path), and a hint */
} tp_json_err;

#define TP_JSON_MAX_DEPTH        128          /* default nesting cap */
#define TP_JSON_HARD_MAX_DEPTH   512          /* any larger max_depth is clamped to this */
#define TP_JSON_DECODE_MAX_BYTES (16u << 20)  /* json.decode / tp__json_loads input cap */
#define TP_JSON_ENCODE_MAX_BYTES (16u << 20)  /* json.encode output cap (max_bytes) */

/* The value of json.array's __metatable field: getmetatable(arr) returns it. */
#define TP_JSON_ARRAY_TAG "json.array"

/*
** What a tree costs in host memory, in bytes, by node kind: jansson 2.14 on glibc x86-64,
** measured with mallinfo2() before and after building 100,000 nodes of each kind (the
** figures in parentheses), rounded up. A value's cost includes its slot in an array
** (8 bytes, and the table's power-of-two growth: 10.5 measured for a null).
**   null, true, false   (10.5)            16: shared singletons, only the slot
**   integer, real       (42.5)            48: a 24-byte node, a 32-byte chunk
**   string              (90.5 + len)      96 + length: a 32-byte node and a copy
**   array               (138.5 empty)     144: the node and its first 8-slot table
**   object              (234.5 empty)     240: the node and its hash table
**   object member       (~100 - 16, key "k1234")  80 + key length, plus the value's cost
** The JSON text of such a tree is 2 to 3 bytes a node: a tree costs 5 to 80 times its
** text, so it is charged by node, never by text size.
*/
#define TP_JSON_COST_SCALAR   16
#define TP_JSON_COST_NUMBER   48
#define TP_JSON_COST_STRING   96
#define TP_JSON_COST_ARRAY   144
#define TP_JSON_COST_OBJECT  240
#define TP_JSON_COST_MEMBER   80

/*
** A host budget the converters charge what they build to (in a sandbox: the run's,
** tp__host_charge). charge returns 0, or -1 when n bytes do not fit: the converter stops
** and lets go of what it built (and refunds it). stopped returns nonzero when the run
** has a verdict (a deadline passed, the run was cancelled): the converter stops too. The
** walks charge in batches (every TP_JSON_CHARGE_BATCH bytes and at their end) and ask
** stopped every TP_JSON_POLL_NODES nodes, so a small value costs one call. After a
** refused charge, note (may be NULL) gets one sentence under 200 bytes saying what needed
** the memory and what to do instead, for the owner's verdict. note(ud, NULL) says the
** host itself ran out of memory while converting (an allocation failed): the owner
** records its memory verdict, as for its own allocator.
*/
typedef struct tp_json_budget {
  int  (*charge)(void *ud, size_t n);
  void (*refund)(void *ud, size_t n);
  int  (*stopped)(void *ud);
  void (*note)(void *ud, const char *what);
  void *ud;
} tp_json_budget;

#define TP_JSON_CHARGE_BATCH (64u << 10)
#define TP_JSON_POLL_NODES   4096

/* An empty object decoded from JSON ({}) gets this metatable tag, as arrays get
** TP_JSON_ARRAY_TAG: sent back, it stays an object, where an untagged empty Lua table is
** ambiguous (sent as [] where the schema wants an array). */
#define TP_JSON_OBJECT_TAG "json.object"
#define TP_JSON_KEPT_MAX 8

/* Options and outcome of tp__json_from_lua_ex. Zero it, then set what is needed. */
typedef struct tp_json_opts {
  int max_depth;                 /* as tp__json_from_lua */
  size_t max_bytes;              /* cap on the JSON text of all the values converted with
                                 ** these options together (a multi-value return) */
  const tp_json_budget *budget;  /* NULL: nothing charged, nothing polled */
  size_t bytes;                  /* in/out: text counted so far against max_bytes */
  size_t cost;                   /* in/out: host bytes charged for the trees returned
                                 ** (refund them when the trees are freed) */
  int over_bytes;                /* out: failed because max_bytes was passed */
  int over_budget;               /* out: failed because the budget refused a charge */
  int stopped;                   /* out: failed because budget->stopped said so */
  int empty_objects;             /* out: an empty table without the array tag became {}
                                 ** (where a schema wants an array, [] was meant) */
  const json_t *kept[TP_JSON_KEPT_MAX]; /* out: empty objects that were JSON objects (a
                                 ** table decoded from {}): they stay {} */
  int nkept;                     /* how many; -1: more than TP_JSON_KEPT_MAX */
} tp_json_opts;

/* tp__json_from_lua with a budget, and a text cap shared by several calls. On failure
** nothing stays charged. */
json_t *tp__json_from_lua_ex(lua_State *L, int idx, tp_json_opts *o, tp_json_err *err);

/*
** An upper estimate of what decoding text costs in host memory (the tree jansson builds,
** by the figures above), from one pass over the text that counts value starts outside
** strings. Nesting past jansson's own depth cap (2048) is not counted: parsing stops
** there. O(len), about 1 ms per MB here.
*/
size_t tp__json_text_cost(const char *text, size_t len);

/* What tree v costs in host memory, by the figures above. O(nodes). */
size_t tp__json_tree_cost(const json_t *v);

/*
** Lua -> JSON. Converts the value at idx to a new jansson tree (caller owns it:
** json_decref). Reads with raw access only and never raises, so it may be called outside
** protected mode; on failure returns NULL with err filled (err may be NULL). The Lua stack
** is left as it was. max_depth: table nesting cap (0 = TP_JSON_MAX_DEPTH, clamped to
** TP_JSON_HARD_MAX_DEPTH). max_bytes: cap on the size of the JSON text, 0 = none; the size
** is counted as string and key bytes + quotes, exact integer widths, 24 per real and the
** punctuation (escape expansion is not counted). For untrusted values use
** tp__json_from_lua_ex with a budget: the tree lives in C memory, outside the state's
** allocator, costs 5 to 80 times its text, and a table referenced many times (a DAG, not
** a cycle) expands exponentially.
*/
json_t *tp__json_from_lua(lua_State *L, int idx, int max_depth, size_t max_bytes,
                         tp_json_err *err);

/*
** JSON -> Lua. Pushes v as a Lua value (NULL pushes json.null). Arrays get the array
** metatable (created if missing). May raise Lua errors (memory, depth over max_depth,
** 0 = TP_JSON_MAX_DEPTH): call it where an error is caught, and keep v owned by something
** that is freed if it raises.
*/
void tp__json_push(lua_State *L, const json_t *v, int max_depth);

/*
** A JSON string of s where every byte that is not part of valid UTF-8 becomes U+FFFD,
** then suffix (ASCII, may be NULL): for logs and messages, which must always become
** valid JSON. NULL when out of memory.
*/
json_t *tp__json_string_lossy(const char *s, size_t len, const char *suffix);

/* Caps the text json.decode accepts in this state (0: only TP_JSON_DECODE_MAX_BYTES). May
** raise (memory). */
void tp__json_set_decode_cap(lua_State *L, size_t bytes);

/* The budget json.encode and json.decode charge in this state (b must outlive it; NULL:
** none). Their trees and text are charged while they exist and refunded after; a charge
** refused, or a verdict seen while converting, raises (the verdict stays in the budget's
** owner). May raise (memory). */
void tp__json_set_budget(lua_State *L, const tp_json_budget *b);

/*
** Pushes a box (a userdata whose __gc frees the tree it holds) and returns its slot. Get
** the box first, then store a tree there before calling anything that may raise (such as
** tp__json_push), so the tree is freed whatever happens; clear the slot when done. May
** raise, but only before anything is owned.
*/
json_t **tp__json_box(lua_State *L);

/*
** Opens the sandbox's json library: pushes a table with encode, decode, null and array,
** and creates the array metatable if missing. Returns 1.
**   json.encode(v)  -> compact text, sorted keys; raises "json.encode: <message>"
**   json.decode(s)  -> value; raises "json.decode: <what> at line L column C".
**                      Duplicate object keys are refused; integers outside int64 and
**                      numbers outside the double range are refused.
**   json.null       -> the null sentinel (a light userdata NULL)
**   json.array(t?)  -> t (or a new table) tagged as a JSON array
*/
int tp__json_open(lua_State *L);

/* Gives every light userdata of the state (json.null is the only one a sandbox script can
** reach) a metatable whose operations raise errors that name json.null, and whose
** __name is "json.null". Only for the sandbox state: it is shared by all light userdata
** of a state. May raise (memory). */
void tp__json_null_meta(lua_State *L);
/* The same, built only when needed: at the first null that tp__json_push pushes in this
** state (the owner builds it too when a script reads json.null). Building it costs a
** few microseconds, a sixth of a cold run, so a sandbox that never sees a null does
** not pay for it. May raise (memory). */
void tp__json_null_meta_lazy(lua_State *L);
/* From now on every object tp__json_push and json.decode push in this state gets the
** object metatable (TP_JSON_OBJECT_TAG), not only empty ones, and the metatable's __len is
** len (NULL: none): the sandbox warns when a script takes #t of a JSON object. One
** lua_setmetatable per object. May raise (memory). */
void tp__json_tag_objects(lua_State *L, lua_CFunction len);

/* Sets the array metatable's __index to index (created if missing): called only for a key
** a decoded array lacks; the sandbox warns at t.length there. May raise (memory). */
void tp__json_tag_arrays(lua_State *L, lua_CFunction index);

/* 1 if the value at idx is a table tagged with the object metatable (raw check). */
int tp__json_is_object(lua_State *L, int idx);

/* Pushes the array metatable (creating it in the registry if missing). May raise. */
void tp__json_push_array_mt(lua_State *L);

/* 1 if the value at idx is a table tagged with the array metatable (raw check). */
int tp__json_is_array(lua_State *L, int idx);

/*
** JSON text -> tree with the decoder's rules (any top-level value, NUL allowed in strings,
** duplicate keys refused, UTF-8 checked, TP_JSON_DECODE_MAX_BYTES). NULL on failure with
** err->message "<what> at line L column C" (err may be NULL). Caller owns the tree.
*/
json_t *tp__json_loads(const char *text, size_t len, tp_json_err *err);

/* tp__json_loads that polls budget->stopped between 64 KiB pieces of the text and stops
** (NULL, err->message "stopped: ...") once it is set. Shorter texts, or no budget:
** tp__json_loads. */
json_t *tp__json_loads_polled(const char *text, size_t len, const tp_json_budget *b,
                             tp_json_err *err);

/*
** Tree -> JSON text: compact, keys sorted bytewise, integers exact, reals in the shortest
** form that reads back to the same double (always with '.' or an exponent, so a real stays
** a real). NUL-terminated; *len (if not NULL) gets the length. NULL when out of memory.
** The caller frees with free().
*/
char *tp__json_dumps(const json_t *v);
char *tp__json_dumpsn(const json_t *v, size_t *len);

/* The length of tp__json_dumpsn's text for v, measured without writing it (no allocation). */
size_t tp__json_dump_len(const json_t *v);

/* tp__json_dumpsn with the text's buffer charged to budget as it grows (*charged: what to
** refund when the text is freed) and the verdict polled as it goes. NULL when out of
** memory, or with *refused (if not NULL) 1 when the budget refused, 2 when stopped; then
** nothing stays charged. */
char *tp__json_dumps_charged(const json_t *v, const tp_json_budget *budget, size_t *len,
                            size_t *charged, int *refused);

/* ---- for a codec that reads and writes Lua values without a tree (core/codec.c) ---- */

/* Returns len when s[0..len) is valid UTF-8 (no overlongs, no surrogates, nothing past
** U+10FFFF), else the offset of the first bad sequence, with *why saying what is wrong:
** the check every string and key crossing the boundary gets. */
size_t tp__utf8_check(const unsigned char *s, size_t len, const char **why);
/* The identities of the array and the object metatables of L (NULL when not made yet),
** as lua_topointer gives them: what tp__json_from_lua compares a table's metatable to. */
void tp__json_tags(lua_State *L, const void **array_mt, const void **object_mt);
/* Pushes the metatable every pushed object gets (tp__json_tag_objects) and returns 1, or
** pushes nothing and returns 0 when objects are not all tagged in L. */
int tp__json_push_objects_mt(lua_State *L);
/* Pushes the object metatable (TP_JSON_OBJECT_TAG), creating it if missing. May raise. */
void tp__json_push_object_mt(lua_State *L);
/* Pushes json.null as tp__json_push does (the lazy metatable built at the first). May
** raise (memory). */
void tp__json_push_null(lua_State *L);

#endif
