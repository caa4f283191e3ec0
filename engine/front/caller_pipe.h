/*
** caller_pipe.h: tidepool run's caller tools answered by a command (caller_pipe.c).
*/
#ifndef tidepool_caller_pipe_h
#define tidepool_caller_pipe_h

#include <stddef.h>

#include "tidepool.h"

/* Runs src with the caller tools of decls (the protocol's declarations, JSON text) whose
** calls `sh -c cmd` answers as JSON lines; the envelope in *envelope (malloc'd) and the
** script's success in *ok. TP_OK when an envelope was made; TP_EINVAL for declarations
** the engine refused (said on standard error); TP_ENOMEM. */
int tp__caller_pipe_run(tp_engine *e, const char *src, size_t len, const tp_limits *lim,
                            const char *decls, size_t dlen, const char *cmd, char **envelope,
                            int *ok);

#endif
