/*
** audit_show.h: `tidepool audit show` (audit_show.c), reading tp_engine_audit_calls' file.
*/
#ifndef tidepool_audit_show_h
#define tidepool_audit_show_h

/* argv after "audit": {"show", FILE | --state LOCATION, [RUN], [--json]}; journal_of
** gives the journal file of a state location (tp__options_journal_path: the caller's, so
** this leaf calls nothing of its floor). Returns the exit status. */
int tp__audit_main(int argc, char **argv, char *(*journal_of)(const char *state));

/* The runs of the journal file with no end recorded (the process died, or they still
** run), the latest first, at most max: [{run, started, calls: [{seq, tool, line, state
** ("made", "failed", "refused", "held", "in flight"), code}]}]. NULL when the file cannot
** be read or out of memory. For the operator page. */
struct json_t;
struct json_t *tp__audit_unfinished(const char *file, size_t max);

#endif
