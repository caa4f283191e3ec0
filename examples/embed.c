/*
** embed.c: the C API in a few lines (docs/c-api.md's example). A tool written in C, a
** script that calls it, the envelope printed.
**   cc embed.c $(pkg-config --cflags --libs tidepool) -o embed   (after make install)
*/
#include <stdio.h>
#include <string.h>
#include <tidepool.h>

static void add (tp_call *call, void *ud) {        /* a tool written in C */
  (void)ud;
  int a = 0, b = 0;
  sscanf(tp_call_args(call), "{\"a\":%d,\"b\":%d}", &a, &b);
  char out[64];
  snprintf(out, sizeof out, "{\"sum\":%d}", a + b);
  tp_call_complete(call, out, 0);                  /* now, or later from the loop */
}

int main (void) {
  tp_engine *e = tp_engine_create();
  tp_tool_def def = { .name = "math.add", .description = "Adds two integers.",
    .input_schema = "{\"type\":\"object\",\"required\":[\"a\",\"b\"],\"properties\":"
                    "{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"integer\"}}}",
    .handler = add };
  tp_engine_add_tool(e, &def);

  tp_limits lim;
  tp_limits_init(&lim);
  lim.memory = 8 << 20;
  const char *src = "return tools.math.add{a = 2, b = 3}.sum";
  char *envelope;
  int ok;
  tp_engine_run(e, src, strlen(src), &lim, &envelope, &ok);
  puts(envelope);                                  /* {"ok":true,"result":5,...} */
  tp_free(envelope);
  tp_engine_destroy(e);
  return ok ? 0 : 1;
}
