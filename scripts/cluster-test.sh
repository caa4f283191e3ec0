#!/bin/sh
# make test-cluster: Redis and three `tidepool mcp --http` servers sharing it (--state
# redis://...) on 127.0.0.1, driven by spec/mcp/cluster.mjs with the MCP SDK client:
# 1,000 runs spread over the three, a rate limit shared exactly, session.moved, one server
# killed mid-run; then spec/mcp/cluster_faults.mjs (exactly-once resumes under Redis
# faults, leases). Prints "# N passed, M failed" (read by scripts/run-tests.sh).
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
# spec/mcp/cluster_faults.mjs: Redis stopped or killed at each step of a resume (through a
# proxy that sees the commands), a dead server's runs and sessions. One closing line for both.
out=$(mktemp)
trap 'rm -f "$out"' EXIT
p=0; f=0
for suite in spec/mcp/cluster.mjs spec/mcp/cluster_faults.mjs; do
  BUILD="$BUILD" timeout 600 node "$suite" >"$out" 2>&1
  rc=$?
  grep -vE '^# [0-9]+ passed, [0-9]+ failed' "$out"
  line=$(grep -E '^# [0-9]+ passed, [0-9]+ failed' "$out" | tail -n 1)
  if [ -z "$line" ]; then echo "cluster: $suite ended (status $rc) without a count"; f=$((f + 1)); continue; fi
  p=$((p + $(echo "$line" | awk '{ print $2 }')))
  f=$((f + $(echo "$line" | awk '{ print $4 }')))
done
echo "# $p passed, $f failed"
[ "$f" -eq 0 ]
