/*
** audit_show.h: `tidepool audit show` (audit_show.c), reading tp_engine_audit_calls' file.
*/
#ifndef tidepool_audit_show_h
#define tidepool_audit_show_h

/* argv after "audit": {"show", FILE, [RUN], [--json]}. Returns the exit status. */
int tp__audit_main(int argc, char **argv);

#endif
