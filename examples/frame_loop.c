/*
** frame_loop.c: a game or edge server stepping a script from its own loop. The script
** moves a unit with a tool that has no handler: the server completes those calls itself,
** one frame later, and gives the script at most 2 ms of each 16 ms frame.
**   cc frame_loop.c $(pkg-config --cflags --libs tidepool) -o frame_loop
*/
#include <stdio.h>
#include <string.h>
#include <tidepool.h>

static const char script[] =
  "local pos = 0\n"
  "for step = 1, 3 do\n"
  "  pos = tools.unit.move{ dx = step }.x   -- answered by the server, a frame later\n"
  "end\n"
  "local n = 0 for i = 1, 2e6 do n = n + i end  -- long work: spread over several frames\n"
  "return { x = pos, sum = n }\n";

int main (void) {
  tp_engine *e = tp_engine_create();
  tp_tool_def move = { .name = "unit.move", .description = "Moves the unit by dx.",
    .input_schema = "{\"type\":\"object\",\"required\":[\"dx\"],"
                    "\"properties\":{\"dx\":{\"type\":\"integer\"}}}" };  /* no handler */
  tp_engine_add_tool(e, &move);

  tp_run *r = tp_run_create(e, script, strlen(script), NULL);
  int x = 0, frame = 0, rc;
  tp_call *pending[8];
  size_t npending = 0;
  do {
    frame++;
    for (size_t i = 0; i < npending; i++) {  /* last frame's requests, answered now */
      int dx = 0;
      sscanf(tp_call_args(pending[i]), "{\"dx\":%d}", &dx);
      x += dx;
      char out[32];
      snprintf(out, sizeof out, "{\"x\":%d}", x);
      tp_call_complete(pending[i], out, 0);
    }
    rc = tp_run_step(r, 2000 /* us of this frame */, 0);
    npending = rc == TP_WAIT ? tp_run_pending(r, pending, 8) : 0;
    /* ... the rest of the frame: physics, network, rendering ... */
  } while (rc != TP_DONE && frame < 10000);
  printf("frames: %d\n%s\n", frame, tp_run_envelope(r));
  int ok = strstr(tp_run_envelope(r), "\"ok\":true") != NULL;
  tp_run_destroy(r);
  tp_engine_destroy(e);
  return ok ? 0 : 1;
}
