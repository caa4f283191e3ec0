/*
** call_instructions.c: one run of N calls of bench_tools' tools, for counting
** instructions a call under callgrind (scripts/call-instructions.sh), which do not
** depend on the machine's load as bench_tools' wall figures do.
** usage: call_instructions c|lua|none N [PLUGINS_DIR]
**   c     N calls of bench_tools' C tool bench.echo (its three-field input schema)
**   lua   N calls of the Lua plugin bench.lua_echo (bench/plugins/echo.lua)
**   none  the same loop calling an empty function: what the others are counted against
*/
#include "bench.h"

static void echo (tp_call *c, void *ud) {
  (void)ud;
  tp_call_complete(c, "{\"ok\":true}", 11);
}

static const char schema[] =
  "{\"type\":\"object\",\"required\":[\"id\",\"name\"],\"additionalProperties\":false,"
  "\"properties\":{\"id\":{\"type\":\"integer\",\"minimum\":0},"
  "\"name\":{\"type\":\"string\",\"minLength\":1},\"flag\":{\"type\":\"boolean\"}}}";

int main (int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: call_instructions c|lua|none N [PLUGINS_DIR]\n");
    return 2;
  }
  const char *mode = argv[1];
  int n = atoi(argv[2]);
  tp_limits lim;
  tp_limits_init(&lim);
  lim.tool_calls = 0;
  tp_engine *e = tp_engine_create();
  tp_tool_def def = { .name = "bench.echo", .description = "Answers at once.",
                      .input_schema = schema, .handler = echo };
  if (e == NULL || tp_engine_add_tool(e, &def) != TP_OK ||
      tp_engine_load_tools(e, argc > 3 ? argv[3] : "bench/plugins") < 1) {
    fprintf(stderr, "call_instructions: cannot set up the engine\n");
    return 1;
  }
  const char *f = strcmp(mode, "c") == 0 ? "tools.bench.echo"
                : strcmp(mode, "lua") == 0 ? "tools.bench.lua_echo" : "function() end";
  char src[256];
  snprintf(src, sizeof src, "local f = %s for i = 1, %d do "
           "f{id = i, name = \"x\", flag = true} end", f, n);
  int rc = bench_timed_run("call_instructions", e, src, &lim) < 0;
  tp_engine_destroy(e);
  return rc;
}
