/*
** mcp_durable.h: the parts of durable paused runs (`tidepool mcp --state`) that need no
** server thread: the hash of the config's policy a paused run is tied to, and the run's
** limits as JSON and back. Not installed, not API; pure functions of their arguments.
*/
#ifndef tidepool_mcp_durable_h
#define tidepool_mcp_durable_h

#include <stddef.h>

#include <jansson.h>

#include "tidepool.h"

/* SHA-256 hex, NUL included. */
#define TP__DUR_HASH_LEN 65
/* How long past its expiry a stored run is kept, so that resume_run can say it expired
** rather than that it never was. */
#define TP__DUR_GRACE_MS (3600 * 1000)

/* The SHA-256 (hex, into out) of the config's "policy" section as the engine writes JSON
** (sorted keys, no spaces), or of "null" when there is no config or no policy. */
void tp__dur_policy_hash(const char *config, size_t len, char *out);

/* The limits as {field: integer} (the tp_limits member names). New reference or NULL. */
json_t *tp__dur_limits_json(const tp_limits *l);

/* Reads what tp__dur_limits_json made into *l (which starts from the defaults; unknown
** fields are skipped). 0, or -1 when a value is not one the limit takes. */
int tp__dur_limits_read(const json_t *j, tp_limits *l);

#endif
