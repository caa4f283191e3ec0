/*
** codec.h: a tool call's arguments and answer between Lua values and JSON text, with no
** jansson tree (codec.c). Each function here does only what it can do exactly as the
** tree path of json.h does (the same text, the same Lua values, the same costs charged)
** and says so by its return value; anything else (an error to report, an empty table,
** a value past the fast path's small caps) is left to the tree path, which gives the
** messages. So the two paths cannot differ in what a script sees.
*/
#ifndef tidepool_codec_h
#define tidepool_codec_h

#include <stddef.h>
#include "lua.h"
#include "schema.h"

/* Nonzero: every call takes the tree path (for the differential tests, which run the same
** scripts both ways; never set in production). */
extern int tp__codec_off;

/* The most containers whose sizes tp__codec_encode records (TP_CODEC_COUNTS). */
#define TP_CODEC_COUNTS 64

/* The arguments' text made by tp__codec_encode. */
typedef struct tp__codec_text {
  char *text;      /* malloc'd, NUL-terminated: tp__json_dumpsn's text of the tree */
  size_t len;
  size_t bytes;    /* what tp__json_from_lua_ex counts against max_bytes */
  size_t cost;     /* what it charges the host budget for the tree (tp__json_tree_cost) */
  /* When not NULL, the text is one tp__codec_answer_ok takes, and counts what
  ** tp__codec_answer_counts would write for it (ncont of them, what tp__codec_answer_ok
  ** would return): they lie in text's block, after the NUL, at the next multiple of
  ** sizeof(int) (where keep_text in calls.c puts them), and go with it. */
  const int *counts;
  size_t ncont;
} tp__codec_text;

/*
** The table at idx (an object; an array too when arrays is set) as JSON text, byte for
** byte the text tp__json_dumpsn makes of tp__json_from_lua_ex's tree. Returns 1, or 0
** (nothing allocated) when the tree path must run: an array at the top (unless arrays),
** an empty table anywhere but at the top without arrays (its shape depends on the
** schema; the arguments' {} is an object), anything the walk would
** refuse, a text over max_bytes (0: none), more than a batch of host cost or of nodes
** (the walk would charge or poll midway), nesting past 32 levels. Raw access only; never
** raises. While it writes, it counts the items of each container, so that a text it made
** need not be scanned again to be pushed (out->counts).
*/
int tp__codec_encode(lua_State *L, int idx, size_t max_bytes, int arrays, tp__codec_text *out);

/*
** 1 when the arguments' text (tp__codec_encode's) surely passes the plain schema sh:
** tp__schema_validate would find no error in their tree. 0 when they may not (an error,
** or a case the check leaves to the validator). Reads only the text.
*/
int tp__codec_simple_ok(const char *text, size_t len, const tp_schema_simple *sh);

/*
** Checks a tool's answer: returns the number of arrays and objects in it (>= 1) when
** tp__codec_push will push exactly what tp__json_push pushes of jansson's tree of it (an
** object or an array at the top, no \u escapes, no duplicate keys, integers of at most
** 18 digits, finite reals, at most 64 levels and 64 keys an object), else 0: jansson
** decides, and gives the message when the text is not JSON.
*/
size_t tp__codec_answer_ok(const char *s, size_t len);

/* The items or members of each array and object of a checked answer, in the order they
** open (counts holds what tp__codec_answer_ok returned): tp__codec_push sizes its tables
** with them, as tp__json_push does from the tree. */
void tp__codec_answer_counts(const char *s, size_t len, int *counts);

/*
** Pushes the value of the checked answer s onto L, tagged as tp__json_push tags it. May
** raise (memory), like tp__json_push; allocates nothing outside L. omt: the index of a
** slot (an upvalue, say) holding what tp__json_push_objects_mt would push, or nil when
** objects are not all tagged in L; 0 to look it up in the registry instead (a lookup by
** pointer, about a tenth of a small answer's push).
*/
void tp__codec_push(lua_State *L, const char *s, size_t len, const int *counts, int omt);

#endif
