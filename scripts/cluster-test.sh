#!/bin/sh
# make test-cluster: Redis and three `tidepool mcp --http` servers sharing it (--state
# redis://...) on 127.0.0.1, driven by spec/mcp/cluster.mjs with the MCP SDK client:
# 1,000 runs spread over the three, a rate limit shared exactly, session.moved, one server
# killed mid-run. Prints "# N passed, M failed" (read by scripts/run-tests.sh).
# What it needs, checked first, each missing piece said by name:
#   redis-server (scripts/deps.sh installs it), node, the SDK in spec/mcp/node_modules
#   (installed here when missing), and a tidepool whose `mcp` has --http and --state.
BUILD=${BUILD:-build}
TP="$BUILD/tidepool"
need=""
command -v redis-server >/dev/null 2>&1 || need="$need redis-server (sh scripts/deps.sh installs it);"
command -v node >/dev/null 2>&1 || need="$need node;"
[ -x "$TP" ] || need="$need $TP (make);"
if [ -x "$TP" ]; then
  help=$("$TP" mcp --help 2>&1)
  echo "$help" | grep -q -- '--http' ||
    need="$need tidepool mcp --http (the Streamable HTTP transport);"
  echo "$help" | grep -q -- '--state' ||
    need="$need tidepool mcp --state redis://... (the shared state store);"
fi
if [ -n "$need" ]; then
  echo "cluster: not run: needs$need"
  echo "# 0 passed, 1 failed"
  exit 1
fi
if [ ! -d spec/mcp/node_modules/@modelcontextprotocol/sdk ]; then
  npm install --prefix spec/mcp --no-audit --no-fund >/dev/null 2>&1 ||
    { echo "cluster: npm install of spec/mcp/package.json failed (no network?)";
      echo "# 0 passed, 1 failed"; exit 1; }
fi
BUILD="$BUILD" timeout 600 node spec/mcp/cluster.mjs
