/*
** mcp.h: what the command-line front ends share (cli.c, mcp.c). Not installed, not API.
*/
#ifndef tidepool_mcp_h
#define tidepool_mcp_h

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

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
int tp__cli_limit_option(const char *name, const char *val, tp_limits *lim, int mcp,
                         char *why, size_t whylen);

/* Prints the --help lines of every limit (of `tidepool mcp` when mcp) to f, each with its
** default from defaults (NULL: the limits table's). */
void tp__cli_limits_help(FILE *f, int mcp, const tp_limits *defaults);

/* The built-in tools' directory: $TIDEPOOL_TOOLS_DIR, else the source tree's tools/ when
** the binary runs from a build directory, else TP_DATADIR/tools. May return buf. */
const char *tp__cli_builtin_tools_dir(char *buf, size_t len);

/* Prints "tidepool: msg" (msg may hold one %s, replaced by arg) and the help hint to
** standard error; returns TP_EXIT_USAGE. */
int tp__cli_usage_error(const char *msg, const char *arg);
/* The text of a --config file (free it), or NULL with a message on stderr. */
char *tp__cli_read_config(const char *path, size_t *len);
/* Prints the problems of a config (tp_engine_error's lines, "config: /path: what") to f
** as "<prefix><path>: /path: what", one a line. */
void tp__cli_config_problems(FILE *f, const char *prefix, const char *path,
                             const char *problems);
/* The folder of a config file's path, absolute (relative paths in it are relative to
** it); free it. NULL when out of memory. */
char *tp__cli_config_dir(const char *path);

/* Copies the option name of arg ("--memory=64M" -> "--memory") into name[len]; returns
** where the name ends in arg (at '=' or the end), or NULL when the name is too long. */
const char *tp__cli_option_name(const char *arg, char *name, size_t len);

/* `tidepool mcp [options]`: argv holds the options only. Serves the Model Context
** Protocol on standard input and output until standard input closes; returns the exit
** status (0, or TP_EXIT_USAGE for a bad option). */
int tp__mcp_main(int argc, char **argv);

/* The result made for a model out of an envelope's text (the engine's): ok, result or
** error, logs, "calls" (how many calls of each tool), "failed_calls" (each failed or refused
** call: tool, line, code, message; times: n for n equal failures) when any; no call
** records or stats. The text (compact
** JSON) is the caller's to free; NULL when env is not an envelope or out of memory. */
char *tp__mcp_model_view(const char *env, size_t len, size_t *outlen);

/* For the fuzz target (spec/fuzz/fuzz_mcp.c): a server in the calling thread, with one
** worker engine run inline (test tools, small limits, no plugin directories), whose
** output lines go to sink instead of standard output. tp__mcp_fuzz_line handles one
** input line and everything it starts until nothing is left. One at a time per thread. */
typedef struct tp__mcp_fuzz tp__mcp_fuzz;
tp__mcp_fuzz *tp__mcp_fuzz_new(void (*sink)(void *ud, const char *line, size_t len), void *ud);
void tp__mcp_fuzz_line(tp__mcp_fuzz *f, const char *line, size_t len);
void tp__mcp_fuzz_free(tp__mcp_fuzz *f);

#endif
