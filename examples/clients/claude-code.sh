#!/bin/sh
# Claude Code: tidepool's MCP server for every project of this user (--scope user), over
# stdio; the built-in tools come with the install. `claude mcp list` shows it.
claude mcp add --scope user tidepool -- tidepool mcp --timeout 30s --memory 128M
