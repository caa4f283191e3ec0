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
#define TP_JSON_DECODE_MAX_BYTES (16u << 20)  /* json.decode / tp_json_loads input cap */
#define TP_JSON_ENCODE_MAX_BYTES (16u << 20)  /* json.encode output cap (max_bytes) */

/* The value of json.array's __metatable field: getmetatable(arr) returns it. */
#define TP_JSON_ARRAY_TAG "json.array"

/*
** Lua -> JSON. Converts the value at idx to a new jansson tree (caller owns it:
** json_decref). Reads with raw access only and never raises, so it may be called outside
** protected mode; on failure returns NULL with err filled (err may be NULL). The Lua stack
** is left as it was. max_depth: table nesting cap (0 = TP_JSON_MAX_DEPTH, clamped to
** TP_JSON_HARD_MAX_DEPTH). max_bytes: cap on the size of the JSON text, 0 = none; the size
** is counted as string and key bytes + quotes, exact integer widths, 24 per real and the
** punctuation (escape expansion is not counted). Always pass a cap for untrusted values:
** the tree lives in C memory, outside the state's allocator, and a table referenced many
** times (a DAG, not a cycle) expands exponentially.
*/
json_t *tp_json_from_lua(lua_State *L, int idx, int max_depth, size_t max_bytes,
                         tp_json_err *err);

/*
** JSON -> Lua. Pushes v as a Lua value (NULL pushes json.null). Arrays get the array
** metatable (created if missing). May raise Lua errors (memory, depth over max_depth,
** 0 = TP_JSON_MAX_DEPTH): call it where an error is caught, and keep v owned by something
** that is freed if it raises.
*/
void tp_json_push(lua_State *L, const json_t *v, int max_depth);

/*
** A JSON string of s where every byte that is not part of valid UTF-8 becomes U+FFFD,
** then suffix (ASCII, may be NULL): for logs and messages, which must always become
** valid JSON. NULL when out of memory.
*/
json_t *tp_json_string_lossy(const char *s, size_t len, const char *suffix);

/* Caps the text json.decode accepts in this state (0: only TP_JSON_DECODE_MAX_BYTES). May
** raise (memory). */
void tp_json_set_decode_cap(lua_State *L, size_t bytes);

/*
** Pushes a box (a userdata whose __gc frees the tree it holds) and returns its slot. Get
** the box first, then store a tree there before calling anything that may raise (such as
** tp_json_push), so the tree is freed whatever happens; clear the slot when done. May
** raise, but only before anything is owned.
*/
json_t **tp_json_box(lua_State *L);

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
int tp_json_open(lua_State *L);

/* Pushes the array metatable (creating it in the registry if missing). May raise. */
void tp_json_push_array_mt(lua_State *L);

/* 1 if the value at idx is a table tagged with the array metatable (raw check). */
int tp_json_is_array(lua_State *L, int idx);

/*
** JSON text -> tree with the decoder's rules (any top-level value, NUL allowed in strings,
** duplicate keys refused, UTF-8 checked, TP_JSON_DECODE_MAX_BYTES). NULL on failure with
** err->message "<what> at line L column C" (err may be NULL). Caller owns the tree.
*/
json_t *tp_json_loads(const char *text, size_t len, tp_json_err *err);

/*
** Tree -> JSON text: compact, keys sorted bytewise, integers exact, reals in the shortest
** form that reads back to the same double (always with '.' or an exponent, so a real stays
** a real). NUL-terminated; *len (if not NULL) gets the length. NULL when out of memory.
** The caller frees with free().
*/
char *tp_json_dumps(const json_t *v);
char *tp_json_dumpsn(const json_t *v, size_t *len);

#endif
