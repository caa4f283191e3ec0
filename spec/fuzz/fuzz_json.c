/*
** fuzz_json.c: the JSON codec (engine/lib/json.c) in both directions.
**
** The input is JSON text (any bytes). Asserted:
** - tp__json_loads either fails with a message "<what> at line L column C" or gives a
**   tree whose dump (tp__json_dumpsn) reads back to an equal tree that dumps to the same
**   bytes: the dump is canonical and loses nothing;
** - the tree pushed into Lua (tp__json_push) and read back (tp__json_from_lua) is equal to
**   it and dumps to the same bytes, and the Lua stack is as it was;
** - the sandbox's json.decode accepts exactly what tp__json_loads accepts, and
**   json.encode of what it made is that same canonical text;
** - tp__json_from_lua under a byte cap of half the text's size, when it refuses, says why
**   and where (a message and a path starting with "$").
** The Lua state is a plain one with the json library, as the engine opens it, new for
** each input.
*/
#include <string.h>

#include "lua.h"
#include "lauxlib.h"

#include "json.h"
#include "fuzz.h"

/* A fresh state per input: what one input allocates is freed before the next, so
** libFuzzer's leak check (run when mallocs and frees of an input differ) stays quiet
** and every input starts alike. */
static lua_State *L;

static void open_state (void) {
  L = luaL_newstate();
  if (L == NULL) abort();
  tp__json_open(L);
  lua_setglobal(L, "json");
}

/* [-0, +1] pushes the tree (light userdata 1) as a Lua value; may raise. */
static int push_tree (lua_State *l) {
  tp__json_push(l, (const json_t *)lua_touserdata(l, 1), TP_JSON_HARD_MAX_DEPTH);
  return 1;
}

/* The canonical text of v; aborts when the dumper runs out of memory (it cannot, here). */
static char *dump (const json_t *v, size_t *len) {
  char *s = tp__json_dumpsn(v, len);
  FUZZ_CHECK(s != NULL, "tp__json_dumpsn returned NULL");
  FUZZ_CHECK(strlen(s) == *len || memchr(s, '\0', *len) != NULL, "length disagrees");
  return s;
}

/* tree -> Lua (tp__json_push) -> tree (tp__json_from_lua): the same value, the same text. */
static void tree_through_lua (const json_t *tree, const char *canon, size_t canon_len) {
  lua_pushcfunction(L, push_tree);
  lua_pushlightuserdata(L, (void *)tree);
  if (lua_pcall(L, 1, 1, 0) == LUA_OK) {
    tp_json_err err;
    json_t *back = tp__json_from_lua(L, 1, TP_JSON_HARD_MAX_DEPTH, 0, &err);
    FUZZ_CHECK(lua_gettop(L) == 1, "tp__json_from_lua changed the stack");
    FUZZ_CHECK(back != NULL, "a pushed tree did not convert back: %s at %s",
               err.message, err.path);
    FUZZ_CHECK(json_equal((json_t *)tree, back), "Lua round trip changed the value");
    size_t n;
    char *s = dump(back, &n);
    FUZZ_CHECK(n == canon_len && memcmp(s, canon, n) == 0,
               "Lua round trip changed the text: %s vs %s", s, canon);
    free(s);
    json_decref(back);
    /* Under a cap of half the text's size: a refusal says why and where. */
    if (canon_len > 4) {
      json_t *capped = tp__json_from_lua(L, 1, TP_JSON_HARD_MAX_DEPTH, canon_len / 2, &err);
      if (capped == NULL) {
        FUZZ_CHECK(err.message[0] != '\0' && err.path[0] == '$', "capped: no message");
      }
      json_decref(capped);
    }
  }
  else {  /* only depth or memory may refuse a tree that loads accepted */
    const char *m = lua_tostring(L, -1);
    FUZZ_CHECK(m != NULL, "push raised a non-string error");
  }
}

/* Lua direction: the tree through Lua, and json.decode/json.encode on the same text. */
static void through_lua (const uint8_t *data, size_t size, const json_t *tree,
                         const char *canon, size_t canon_len) {
  lua_settop(L, 0);
  if (tree != NULL) tree_through_lua(tree, canon, canon_len);
  lua_settop(L, 0);

  /* The sandbox's json.decode / json.encode agree with the C codec. */
  lua_getglobal(L, "json");
  lua_getfield(L, -1, "decode");
  lua_pushlstring(L, (const char *)data, size);
  int dec = lua_pcall(L, 1, 1, 0);
  if (tree != NULL && dec != LUA_OK) {
    const char *m = lua_tostring(L, -1);
    FUZZ_CHECK(m != NULL && (strstr(m, "deep") || strstr(m, "depth") || strstr(m, "memory")
                             || strstr(m, "nest")),
               "json.decode refused what tp__json_loads accepted: %s", m ? m : "?");
  }
  if (tree == NULL) FUZZ_CHECK(dec != LUA_OK, "json.decode accepted what tp__json_loads refused");
  if (dec == LUA_OK) {
    lua_getfield(L, 1, "encode");
    lua_insert(L, -2);
    if (lua_pcall(L, 1, 1, 0) == LUA_OK) {
      size_t n;
      const char *s = lua_tolstring(L, -1, &n);
      FUZZ_CHECK(s != NULL && n == canon_len && memcmp(s, canon, n) == 0,
                 "json.encode(json.decode(x)) differs from the canonical dump");
    }
  }
  lua_settop(L, 0);
}

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size) {
  tp_json_err err;
  memset(&err, 0, sizeof err);
  json_t *tree = tp__json_loads((const char *)data, size, &err);
  open_state();
  if (tree == NULL) {
    FUZZ_CHECK(strstr(err.message, " at line ") && strstr(err.message, " column "),
               "a decode error without its position: '%s'", err.message);
    through_lua(data, size, NULL, NULL, 0);
    lua_close(L);
    return 0;
  }
  size_t n1, n2;
  char *s1 = dump(tree, &n1);
  json_t *again = tp__json_loads(s1, n1, &err);
  FUZZ_CHECK(again != NULL, "the dump does not load: %s: %s", err.message, s1);
  FUZZ_CHECK(json_equal(tree, again), "dump/load changed the value: %s", s1);
  char *s2 = dump(again, &n2);
  FUZZ_CHECK(n1 == n2 && memcmp(s1, s2, n1) == 0, "the dump is not canonical: %s / %s",
             s1, s2);
  through_lua(data, size, tree, s1, n1);
  free(s2);
  free(s1);
  json_decref(again);
  json_decref(tree);
  lua_close(L);
  return 0;
}
