/*
** mcpver.c: the one list of the MCP protocol versions tidepool speaks (tp_mcp_version in
** tidepool_server.h). Adding a version is one line here: the server's initialize, its
** HTTP MCP-Protocol-Version check, error.data.supported and server/discover
** (engine/front/mcp/era.c), and what tidepool offers and accepts from upstream servers
** (lua/upstream.lua, through the host's E.mcp_versions) all read this table.
*/
#include <stddef.h>

#include "tidepool_server.h"

#define MODERN  TP_MCP_V_MODERN
#define BATCHES TP_MCP_V_BATCHES
#define MODE    TP_MCP_V_ELICIT_MODE
#define CLIENT  TP_MCP_V_CLIENT

static const struct { const char *version; unsigned flags; } versions[] = {
  { TP_MCP_MODERN_VERSION, MODERN | MODE | CLIENT },
  { "2025-11-25",          MODE | CLIENT },
  { "2025-06-18",          CLIENT },              /* batching was removed here */
  { "2025-03-26",          BATCHES | CLIENT },
  { "2024-11-05",          BATCHES },             /* served, not accepted upstream */
};

const char *tp_mcp_version (size_t i, unsigned *flags) {
  if (i >= sizeof versions / sizeof versions[0]) return NULL;
  if (flags) *flags = versions[i].flags;
  return versions[i].version;
}
