/*
** strerror.c: the words of the status codes of tidepool.h (tp_strerror), one table in
** the order of the codes.
*/
#include "tidepool.h"

static const struct { int code; const char *text; } statuses[] = {
  { TP_OK,     "success (or, from tp_run_step, the run has finished)" },
  { TP_YIELD,  "the step's budget ran out; step again" },
  { TP_WAIT,   "the script waits on pending requests" },
  { TP_EINVAL, "invalid argument" },
  { TP_ENOMEM, "out of memory" },
  { TP_ESTATE, "the call does not fit the object's state" },
};

const char *tp_strerror (int code) {
  for (size_t i = 0; i < sizeof statuses / sizeof statuses[0]; i++)
    if (statuses[i].code == code) return statuses[i].text;
  return "unknown status";
}
