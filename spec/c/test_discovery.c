/*
** test_discovery.c: a script's discovery (tools.list, tools.describe, tools.search)
** reads what the host made when the tools were registered: no Lua runs in the host
** state while the script asks: a hook there counts every Lua call, and the state's
** memory, which any Lua work there changes, stays exactly the same.
*/
#include <stdlib.h>
#include <string.h>

#include "lua.h"
#include "engine.h"
#include "tp_test.h"

static int host_calls;
static void count_calls (lua_State *L, lua_Debug *ar) {
  (void)L;
  (void)ar;
  host_calls++;
}

static void noop (tp_call *c, void *ud) {
  (void)ud;
  tp_call_complete(c, "{}", 0);
}

static tp_engine *engine_with_tools (void) {
  tp_engine *e = tp_engine_create();
  tp_tool_def a = { .name = "math.add", .description = "Adds two integers.",
    .input_schema = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},"
    "\"b\":{\"type\":\"integer\"}},\"required\":[\"a\",\"b\"]}", .handler = noop };
  tp_tool_def w = { .name = "weather.current",
                    .description = "Current weather for a city; math-free.", .handler = noop };
  CHECK_INT(tp_engine_add_tool(e, &a), TP_OK);
  CHECK_INT(tp_engine_add_tool(e, &w), TP_OK);
  return e;
}

static char *run (tp_engine *e, const char *src) {
  char *env = NULL;
  CHECK_INT(tp_engine_run(e, src, strlen(src), NULL, &env, NULL), TP_OK);
  return env;
}

TEST(describe_and_search_run_no_lua_in_the_host_state) {
  tp_engine *e = engine_with_tools();
  CHECK(e->H != NULL);  /* opened at registration, to make the annotations */
  host_calls = 0;
  lua_sethook(e->H, count_calls, LUA_MASKCALL | LUA_MASKCOUNT, 1);
  int kb = lua_gc(e->H, LUA_GCCOUNT), b = lua_gc(e->H, LUA_GCCOUNTB);
  char *env = run(e, "local s = tools.search('math') "
                     "return {list = tools.list(), d = tools.describe('math.add'), "
                     "first = s[1].name, second = s[2].name, score = s[1].score, n = #s}");
  CHECK_INT(lua_gc(e->H, LUA_GCCOUNT), kb);
  CHECK_INT(lua_gc(e->H, LUA_GCCOUNTB), b);
  lua_sethook(e->H, NULL, 0, 0);
  CHECK_INT(host_calls, 0);
  CHECK_HAS(env, "\"list\":[\"math.add\",\"weather.current\"]");
  CHECK_HAS(env, "\"d\":\"math.add{a: integer, b: integer} -- Adds two integers.\\n\"");
  CHECK_HAS(env, "\"first\":\"math.add\"");       /* the name counts 3, the description 1 */
  CHECK_HAS(env, "\"score\":3");
  CHECK_HAS(env, "\"second\":\"weather.current\"");
  CHECK_HAS(env, "\"n\":2");
  tp_free(env);
  tp_engine_destroy(e);
}

TEST(a_search_without_words_lists_every_tool_and_a_miss_lists_none) {
  tp_engine *e = engine_with_tools();
  char *env = run(e, "return {#tools.search(''), #tools.search('zebra'), "
                     "tools.search('!!')[2].name}");
  CHECK_HAS(env, "\"result\":[2,0,\"weather.current\"]");
  tp_free(env);
  tp_engine_destroy(e);
}

TEST(describe_of_an_unknown_tool_is_an_error_for_the_script) {
  tp_engine *e = engine_with_tools();
  char *env = run(e, "return tools.describe('math.ad')");
  CHECK_HAS(env, "tools.describe: there is no tool math.ad (tools.list() lists them)");
  tp_free(env);
  tp_engine_destroy(e);
}

int main (int argc, char **argv) {
  tp_test_args(argc, argv);
  RUN(describe_and_search_run_no_lua_in_the_host_state);
  RUN(a_search_without_words_lists_every_tool_and_a_miss_lists_none);
  RUN(describe_of_an_unknown_tool_is_an_error_for_the_script);
  return tp_test_end();
}
