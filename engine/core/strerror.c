/*
** strerror.c: the words and the names of the status codes of tidepool.h (tp_strerror,
** tp_err_name), both from the one table TP_ERRNO_MAP.
*/
#include "tidepool.h"
#include "tidepool_server.h"

/* The values are ABI: a change here is a change of libtidepool.so.0's contract. */
_Static_assert(TP_OK == 0 && TP_DONE == 0 && TP_YIELD == 1 && TP_WAIT == 2 &&
               TP_EINVAL == -1 && TP_ENOMEM == -2 && TP_ESTATE == -3,
               "status code values are part of the ABI");
_Static_assert(TP_STORED_OK == 0 && TP_STORED_NOTFOUND == 1 && TP_STORED_TOO_BIG == 2 &&
               TP_STORED_ERROR == 4 && TP_STORED_CLOSED == 5,
               "store status values are part of the ABI");
_Static_assert(TP_POLICY_ALLOW == 0 && TP_POLICY_DENY == 1 && TP_POLICY_HOLD == 2,
               "policy verdict values are part of the ABI");

/* Every row of the store and policy maps names a defined, non-negative code. */
#define TP_CHECK_ROW(n, t) _Static_assert(TP_##n >= 0, "TP_" #n " is a status of its own");
TP_STORED_MAP(TP_CHECK_ROW)
TP_POLICY_MAP(TP_CHECK_ROW)
#undef TP_CHECK_ROW

const char *tp_strerror (int code) {
  switch (code) {
#define TP_TEXT_ROW(n, t) case TP_##n: return t;
    TP_ERRNO_MAP(TP_TEXT_ROW)
#undef TP_TEXT_ROW
  }
  return "unknown status";
}

const char *tp_err_name (int code) {
  switch (code) {
#define TP_NAME_ROW(n, t) case TP_##n: return "TP_" #n;
    TP_ERRNO_MAP(TP_NAME_ROW)
#undef TP_NAME_ROW
  }
  return "TP_UNKNOWN";
}
