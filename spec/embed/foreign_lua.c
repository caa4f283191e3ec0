/*
** foreign_lua.c: a program that uses Debian's own Lua 5.4 (bookworm's 5.4.4, unpatched)
** and embeds tidepool, the way a game server with Lua scripting would. It is linked
** several ways by the Makefile (Debian's liblua5.4 ahead of libtidepool.so, after it,
** with libtidepool.a, and with both static libraries); each must prove that tidepool's
** sandboxes and host state run on tidepool's private, patched Lua 5.4.7 while the
** program's own lua_* calls reach Debian's.
**
** The attack it stops: on bookworm's Lua a backtracking pattern cannot be interrupted
** (the matcher is one long C call), so a sandbox that ended up on it ran for more than
** ten minutes under a 1 s limit. On tidepool's Lua the matcher is step-counted and the
** run stops with limit.time.
**   argv[1]: the tools directory of spec/embed (a plugin using luv and lpeg)
**   argv[2]: optional, a part of the file name lua_newstate must come from
**            ("liblua5.4.so" when the program links Debian's shared library)
*/
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <lua.h>
#include <lauxlib.h>
#include <lualib.h>

#include "tidepool.h"
#include "tp_test.h"

static const char *tools_dir = "spec/embed/tools";
static const char *lua_from = NULL;

static double now_s (void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The program's own Lua is Debian's: built against its 5.4.4 headers, and working. */
TEST(the_program_lua_is_debians_5_4_4) {
  CHECK_STR(LUA_RELEASE, "Lua 5.4.4");
  lua_State *L = luaL_newstate();
  CHECK(L != NULL);
  if (L == NULL) return;
  luaL_openlibs(L);
  CHECK_INT(luaL_dostring(L, "return ('x'):rep(3) .. _VERSION"), LUA_OK);
  CHECK_STR(lua_tostring(L, -1), "xxxLua 5.4");
  lua_close(L);
}

/* When the program links Debian's shared liblua5.4, its lua_* come from that file. */
TEST(the_program_lua_symbols_come_from_debians_library) {
  Dl_info info;
  CHECK(dladdr((void *)lua_newstate, &info) != 0);
  if (lua_from) CHECK_HAS(info.dli_fname, lua_from);
}

/* The attack: a backtracking pattern under a 1 s limit. */
TEST(backtracking_pattern_stops_at_time_limit_on_tidepools_lua) {
  tp_engine *e = tp_engine_create();
  CHECK(e != NULL);
  if (e == NULL) return;
  tp_limits lim;
  tp_limits_init(&lim);
  lim.wall_us = 1000000;
  lim.cpu_us = 0;
  const char *src = "return ('a'):rep(3e4):find('.-.-.-.-.-b')";
  char *env = NULL;
  int ok = -1;
  double t0 = now_s();
  CHECK_INT(tp_engine_run(e, src, strlen(src), &lim, &env, &ok), TP_OK);
  double took = now_s() - t0;
  CHECK_INT(ok, 0);
  CHECK_HAS(env, "\"code\":\"limit.time\"");
  CHECK(took < 30.0);  /* generous: the limit is 1 s; unpatched Lua takes > 10 min */
  tp_free(env);
  tp_engine_destroy(e);
}

/* The host state's luv (a timer) and lpeg run on tidepool's Lua too. */
TEST(plugin_using_luv_and_lpeg_works_beside_a_foreign_lua) {
  tp_engine *e = tp_engine_create();
  CHECK(e != NULL);
  if (e == NULL) return;
  CHECK_INT(tp_engine_load_tools(e, tools_dir), 2);
  CHECK_STR(tp_engine_error(e), "");
  const char *src = "return tools.probe.number{text = '1234abc', ms = 5}.n";
  char *env = NULL;
  int ok = -1;
  CHECK_INT(tp_engine_run(e, src, strlen(src), NULL, &env, &ok), TP_OK);
  CHECK_INT(ok, 1);
  CHECK_HAS(env, "\"ok\":true,\"result\":1234,");
  tp_free(env);
  tp_engine_destroy(e);
}

/* The attack: a plugin loads a Lua C module. It would bind to the program's Lua (here
** Debian's) and run on tidepool's state: the host state of the library loads none. */
TEST(plugin_cannot_load_a_c_module_that_would_bind_to_the_program_lua) {
  tp_engine *e = tp_engine_create();
  CHECK(e != NULL);
  if (e == NULL) return;
  CHECK_INT(tp_engine_load_tools(e, tools_dir), 2);
  const char *src = "local r = tools.probe.cmodule{name = 'lfs'} return {r.loaded, r.why}";
  char *env = NULL;
  int ok = -1;
  CHECK_INT(tp_engine_run(e, src, strlen(src), NULL, &env, &ok), TP_OK);
  CHECK_INT(ok, 1);
  CHECK_HAS(env, "\"result\":[false,\"module 'lfs' not found:");
  CHECK_HAS(env, "no C module 'lfs': this engine's Lua is private to the tidepool library");
  tp_free(env);
  tp_engine_destroy(e);
}

int main (int argc, char **argv) {
  if (argc > 1) tools_dir = argv[1];
  if (argc > 2) lua_from = argv[2];
  RUN(the_program_lua_is_debians_5_4_4);
  RUN(the_program_lua_symbols_come_from_debians_library);
  RUN(plugin_using_luv_and_lpeg_works_beside_a_foreign_lua);
  RUN(plugin_cannot_load_a_c_module_that_would_bind_to_the_program_lua);
  RUN(backtracking_pattern_stops_at_time_limit_on_tidepools_lua);
  return tp_test_end();
}
