/*
** test_progress.c: progress reports of tool calls (tp_call_progress, ctx.progress in a
** Lua plugin) reach the run's tp_run_on_progress callback, in order, with the tool's
** name, only while the call works, and only to the callback set last.
*/
#include <stdlib.h>
#include <sys/stat.h>

#include "tidepool.h"
#include "tp_test.h"

typedef struct reports { char log[1024]; int n; } reports;

static void on_progress (tp_run *r, const char *tool, const char *text, void *ud) {
  reports *rp = ud;
  size_t len = strlen(rp->log);
  snprintf(rp->log + len, sizeof rp->log - len, "%s%s=%s", len ? "|" : "", tool, text);
  rp->n++;
  (void)r;
}

static void done_cb (tp_run *r, void *ud) {
  (void)r;
  *(int *)ud = 1;
}

TEST(a_c_tools_reports_reach_the_callback_while_the_call_works_and_not_after) {
  tp_engine *e = tp_engine_create();
  tp_tool_def p = { .name = "t.slow", .description = "Completed by the program." };
  CHECK_INT(tp_engine_add_tool(e, &p), TP_OK);
  const char *src = "return tools.t.slow{}";
  tp_run *r = tp_run_create(e, src, strlen(src), NULL);
  reports rp = { "", 0 }, other = { "", 0 };
  tp_run_on_progress(r, on_progress, &other);
  tp_run_on_progress(r, on_progress, &rp);  /* replaces the first */
  CHECK_INT(tp_run_step(r, 0, 0), TP_WAIT);
  tp_call *calls[2];
  CHECK_INT(tp_run_pending(r, calls, 2), 1);
  CHECK_INT(tp_call_progress(calls[0], "half way"), TP_OK);
  CHECK_INT(tp_call_progress(calls[0], ""), TP_OK);
  CHECK_INT(tp_call_progress(calls[0], NULL), TP_EINVAL);
  CHECK_INT(tp_call_complete(calls[0], "1", 0), TP_OK);
  CHECK_INT(tp_run_step(r, 0, 0), TP_DONE);
  CHECK_STR(rp.log, "t.slow=half way|t.slow=");
  CHECK_INT(rp.n, 2);
  CHECK_INT(other.n, 0);
  tp_run_destroy(r);
  /* cleared: nothing is told */
  r = tp_run_create(e, src, strlen(src), NULL);
  tp_run_on_progress(r, on_progress, &other);
  tp_run_on_progress(r, NULL, &other);
  CHECK_INT(tp_run_step(r, 0, 0), TP_WAIT);
  CHECK_INT(tp_run_pending(r, calls, 2), 1);
  CHECK_INT(tp_call_progress(calls[0], "nobody listens"), TP_OK);
  CHECK_INT(other.n, 0);
  tp_run_destroy(r);
  tp_run_on_progress(NULL, on_progress, &rp);
  CHECK_INT(tp_call_progress(NULL, "x"), TP_EINVAL);
  tp_engine_destroy(e);
}

TEST(ctx_progress_of_a_lua_plugin_reaches_the_callback_as_message_and_numbers) {
  char dir[64] = "/tmp/tp_progress_XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  char path[128];
  snprintf(path, sizeof path, "%s/p.lua", dir);
  FILE *f = fopen(path, "w");
  CHECK(f != NULL);
  if (f == NULL) return;
  fputs("return { name = 'p.work', handler = function(args, ctx)\n"
        "  ctx.progress('step', 1)\n"
        "  ctx.sleep(5)\n"
        "  ctx.progress('step', 2, 3)\n"
        "  ctx.progress(nil, 3, 3)\n"
        "  ctx.progress('last line')\n"
        "  return 'done'\n"
        "end }\n", f);
  fclose(f);
  tp_engine *e = tp_engine_create();
  CHECK_INT(tp_engine_load_tools(e, dir), 1);
  const char *src = "return tools.p.work{}";
  tp_run *r = tp_run_create(e, src, strlen(src), NULL);
  reports rp = { "", 0 };
  tp_run_on_progress(r, on_progress, &rp);
  int done = 0;
  CHECK_INT(tp_run_start(r, done_cb, &done), TP_OK);
  for (int i = 0; i < 1000 && !done; i++) tp_engine_poll(e, 1);
  CHECK_INT(done, 1);
  CHECK_INT(tp_run_ok(r), 1);
  CHECK_STR(rp.log, "p.work=step (1)|p.work=step (2/3)|p.work=3/3|p.work=last line");
  tp_run_destroy(r);
  tp_engine_destroy(e);
  unlink(path);
  rmdir(dir);
}

int main (int argc, char **argv) {
  tp_test_args(argc, argv);
  RUN(a_c_tools_reports_reach_the_callback_while_the_call_works_and_not_after);
  RUN(ctx_progress_of_a_lua_plugin_reaches_the_callback_as_message_and_numbers);
  return tp_test_end();
}
