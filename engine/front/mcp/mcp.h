/*
** mcp.h: the little of the MCP server (engine/front/mcp/) that cli.c and the fuzz
** target call. Not installed, not API.
*/
#ifndef tidepool_mcp_h
#define tidepool_mcp_h

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#include "tidepool.h"

/* `tidepool mcp [options]`: argv holds the options only. Serves the Model Context
** Protocol on standard input and output until standard input closes; returns the exit
** status (0, or TP_EXIT_USAGE for a bad option). */
int tp__mcp_main(int argc, char **argv);

/* For the fuzz target (spec/fuzz/fuzz_mcp.c): a server in the calling thread, with one
** worker engine run inline (test tools, small limits, no plugin directories), whose
** output lines go to sink instead of standard output. tp__mcp_main_fuzz_line handles one
** input line and everything it starts until nothing is left. One at a time per thread. */
typedef struct tp__mcp_fuzz tp__mcp_fuzz;
tp__mcp_fuzz *tp__mcp_main_fuzz_new(void (*sink)(void *ud, const char *line, size_t len), void *ud);
void tp__mcp_main_fuzz_line(tp__mcp_fuzz *f, const char *line, size_t len);
void tp__mcp_main_fuzz_free(tp__mcp_fuzz *f);

#endif
