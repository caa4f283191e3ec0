/*
** options.h: what cli.c and the MCP server (mcp/) share: the exit statuses, the limit
** options, --help lines, reading a config, the built-in tools folder, usage errors
** (options.c). Not installed, not API.
*/
#ifndef tidepool_options_h
#define tidepool_options_h

#include <stddef.h>
#include <stdio.h>

#include "tidepool.h"

/* The exit status of every tidepool command (run, check, describe, config, mcp), one rule:
**   0  TP_EXIT_OK       it did what was asked: the script succeeded, the files are good,
**                       the server stopped on end of input or a signal
**   1  TP_EXIT_FAILED   the script failed (syntax, runtime error, limit); or something
**                       failed at run time (out of memory, an address already in use)
**   2  TP_EXIT_USAGE    a usage error: an unknown option, a bad value (named with its
**                       flag: "--memory: bad size '12Q'"), a config file that is wrong
**                       (each problem with its JSON pointer), a FILE, --state or --audit
**                       that cannot be opened
**   3  TP_EXIT_REFUSED  --strict or `config check`: the config asks for what this machine
**                       lacks (an unset env: variable, a program not in PATH), or a plugin
**                       or upstream server cannot load
** A missing --tools directory is a warning everywhere (client configs carry placeholder
** paths), never a usage error. */
#define TP_EXIT_OK 0
#define TP_EXIT_FAILED 1
#define TP_EXIT_USAGE 2
#define TP_EXIT_REFUSED 3

/* The limit option name (without "=value") of `tidepool run` (mcp 0) or of
** `tidepool mcp` (mcp 1), as the limits table names them: sets the field of lim it stands
** for from val. Returns 1 when done, 0 when name is no limit option, -1 when val is bad
** (then why says so, for a person). */
int tp__options_limit_option(const char *name, const char *val, tp_limits *lim, int mcp,
                             char *why, size_t whylen);

/* Prints the --help lines of every limit (of `tidepool mcp` when mcp) to f, each with its
** default from defaults (NULL: the limits table's). */
void tp__options_limits_help(FILE *f, int mcp, const tp_limits *defaults);

/* The built-in tools' directory: $TIDEPOOL_TOOLS_DIR, else the source tree's tools/ when
** the binary runs from a build directory, else TP_DATADIR/tools. May return buf. */
const char *tp__options_builtin_tools_dir(char *buf, size_t len);

/* Prints "tidepool: msg" (msg may hold one %s, replaced by arg) and the help hint to
** standard error; returns TP_EXIT_USAGE. */
int tp__options_usage_error(const char *msg, const char *arg);
/* All of f (free it), at most 64 MiB; NULL with errno set (EFBIG past the cap). */
char *tp__options_read_all(FILE *f, size_t *len);
/* The text of a --config file (free it), or NULL with a message on stderr. */
char *tp__options_read_config(const char *path, size_t *len);
/* Prints the problems of a config (tp_engine_error's lines, "config: /path: what") to f
** as "<prefix><path>: /path: what", one a line. */
void tp__options_config_problems(FILE *f, const char *prefix, const char *path,
                                 const char *problems);
/* The folder of a config file's path, absolute (relative paths in it are relative to
** it); free it. NULL when out of memory. */
char *tp__options_config_dir(const char *path);
/* The call journal's file that goes with the state location state (--state) when no
** --audit is given: DIR/journal.jsonl, or PATH.journal.jsonl for sqlite:PATH; NULL for
** redis://, rediss:// and memory: (no file of theirs; give --audit) or out of memory.
** Free it. */
char *tp__options_journal_path(const char *state);

/* Copies the option name of arg ("--memory=64M" -> "--memory") into name[len]; returns
** where the name ends in arg (at '=' or the end), or NULL when the name is too long. */
const char *tp__options_option_name(const char *arg, char *name, size_t len);

/* Limits of one run from a JSON object by the Lua module's names ({"timeout": "2s",
** "memory": "16M", "tool_calls": 50}; numbers are bytes, counts, or seconds for
** durations), each at most base's: a client may lower limits, never raise them (MCP's
** _meta["tidepool/limits"]). 1 with *out set, or 0 with why set. */
struct json_t;
int tp__options_limits_json(const tp_limits *base, struct json_t *lm, tp_limits *out,
                            char *why, size_t len);

#endif
