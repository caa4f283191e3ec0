#!/bin/sh
# `make valgrind`: memory errors and leaks under valgrind, in a loop of runs and in the CLI.
#   build/tests/test_run_loop   ~200 runs of every kind of ending (spec/c/test_run_loop.c)
#   build/tests/test_tools      C tools: async, late completion, handler-less, sessions
#   build/tests/test_http       HTTP requests on curl's multi handle, closed with the engine
#   build/tests/test_alloc_fail every 5th allocation failed, alone and with all after it,
#                               in the scenarios without the host Lua state
#   build/tidepool run          a few scripts as whole processes (ok, errors, limits, stdin)
#   build/tidepool mcp          two workers and sessions; the 2026-07-28 era
# A definite or indirect leak, or any memory error, fails (still-reachable memory, such as
# the watchdog thread's stack of an engine that is alive at exit, does not). valgrind's
# own error status is 97, so it cannot be mistaken for a script's failure (status 1).
# Prints "# N passed, M failed" like the C tests; exit status non-zero on any failure.
BUILD=${BUILD:-build}
# --child-silent-after-fork: a process libuv forks to start a program (an upstream MCP
# server, a proc.run command) that fails its exec exits with the parent's heap copied,
# which valgrind would report as lost in that child.
VG="valgrind -q --leak-check=full --errors-for-leak-kinds=definite,indirect --error-exitcode=97 --child-silent-after-fork=yes"
passed=0
failed=0
log=$(mktemp)
script=$(mktemp)
trap 'rm -f "$log" "$script"' EXIT

check() {  # $1 name, $2 expected exit status, rest: the command
  name=$1 want=$2
  shift 2
  $VG "$@" >"$log" 2>&1
  rc=$?
  if [ "$rc" -eq "$want" ] && ! grep -q '^==[0-9]*==' "$log"; then
    passed=$((passed + 1)); echo "ok - $name"
  else
    failed=$((failed + 1)); echo "not ok - $name (exit $rc, expected $want)"
    grep -E '^==[0-9]+==|^not ok|^#   ' "$log" | head -n 40
  fi
}

if ! command -v valgrind >/dev/null 2>&1; then
  echo "valgrind: not installed"; echo "# 0 passed, 1 failed"; exit 1
fi

check "run loop (spec/c/test_run_loop.c)" 0 "$BUILD/tests/test_run_loop"
check "C tools (spec/c/test_tools.c)" 0 "$BUILD/tests/test_tools"
check "HTTP requests answered, cut short, left at destroy (spec/c/test_http.c)" 0 \
  "$BUILD/tests/test_http"
export TP_ALLOC_FAIL_STRIDE=5
check "allocation failures (spec/c/test_alloc_fail.c, every 5th point)" 0 \
  "$BUILD/tests/test_alloc_fail" injection engine_create table c_tool json_encode schema session
unset TP_ALLOC_FAIL_STRIDE

cli() {  # $1 name, $2 expected status, $3 script, rest: options
  name=$1 want=$2
  printf '%s\n' "$3" >"$script"
  shift 3
  check "cli: $name" "$want" "$BUILD/tidepool" run "$@" "$script"
}
cli "ok" 0 'print("hi") return {1, 2, {a = "b"}}'
cli "ok --json" 0 'return "x"' --json
cli "runtime error" 1 'error("boom")'
cli "syntax error" 1 'return +' --json
cli "memory limit" 1 'local t = {} for i = 1, 1e8 do t[i] = i end' --memory 1M
cli "cpu limit" 1 'while true do end' --cpu 50ms
cli "wall limit" 1 'while true do end' --timeout 50ms --cpu 0
cli "instruction limit" 1 'while true do end' --instructions 100000
cli "output limit" 1 'for i = 1, 1e5 do print(i) end' --max-output 1K
check "cli: check" 0 "$BUILD/tidepool" check "$script"
printf 'return 1 + 1\n' >"$script"
check "cli: stdin" 0 "$BUILD/tidepool" run - <"$script"
# The config file: its checks (spec/c/test_config.c), then good and bad files through
# tidepool config check, run --config and mcp --config.
check "config (spec/c/test_config.c)" 0 "$BUILD/tests/test_config"
cfgdir=$(mktemp -d)
mkdir "$cfgdir/plugins"
printf '%s\n' 'return { name = "vg.hi", handler = function() return "hi" end }' >"$cfgdir/plugins/hi.lua"
printf '%s\n' '{"limits": {"timeout": "2s", "memory": "16M"}, "tools": ["plugins"],' \
  '"workspace": {"dir": "plugins", "max": "1M"}, "mcpServers": {"m": {"command": "x"}},' \
  '"http": {"allow": ["a.com", {"host": "b.com"}]}, "commands": [{"argv0": "git"}]}' >"$cfgdir/good.json"
printf '%s\n' '{"polcy": 1, "limits": {"memory": "1Q", "wall": 1}, "tools": ["none"],' \
  '"mcpServers": {"m": {"args": "x"}}, "commands": [{}]}' >"$cfgdir/bad.json"
check "cli: config check, good and bad" 2 "$BUILD/tidepool" config check "$cfgdir/good.json" \
  "$cfgdir/bad.json"
printf '%s\n' 'return tools.vg.hi{}' >"$script"
check "cli: run --config" 0 "$BUILD/tidepool" run --timeout 5s --config "$cfgdir/good.json" "$script"
check "cli: run --config, a bad file" 2 "$BUILD/tidepool" run --config "$cfgdir/bad.json" "$script"
check "mcp: --config, a bad file" 2 "$BUILD/tidepool" mcp --config "$cfgdir/bad.json" </dev/null
rm -rf "$cfgdir"

# The MCP server with two worker threads: a session kept across calls, kv shared, a busy
# session, a memory kill on a worker, a refused batch; standard input's end stops it.
cat >"$script" <<'LINES'
{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"vg","version":"1"}}}
{"jsonrpc":"2.0","method":"notifications/initialized"}
{"jsonrpc":"2.0","id":2,"method":"tools/list"}
{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"run_lua","arguments":{"code":"tools.kv.set{key='a', value=1} x = 5 return tools.kv.get{key='a'}","session":"s1"}}}
{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"run_lua","arguments":{"code":"return x","session":"s1"}}}
{"jsonrpc":"2.0","id":5,"method":"ping"}
{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"run_lua","arguments":{"code":"local t = {} for i = 1, 1e8 do t[i] = i end"}}}
[{"jsonrpc":"2.0","id":7,"method":"ping"}]
LINES
check "mcp: two workers, sessions, a memory kill, a batch" 0 \
  "$BUILD/tidepool" mcp --memory 8M --workers 2 <"$script"

# The 2026-07-28 era on the same server: discover, version errors, calls with the
# per-request _meta (the resultType splice, a session, a refusal), listen and its cancel.
M='"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}'
cat >"$script" <<LINES
{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{$M}}
{"jsonrpc":"2.0","id":2,"method":"server/discover"}
{"jsonrpc":"2.0","id":3,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2099-01-01"}}}
{"jsonrpc":"2.0","id":"L","method":"subscriptions/listen","params":{$M,"notifications":{"toolsListChanged":true}}}
{"jsonrpc":"2.0","id":"L","method":"subscriptions/listen","params":{$M,"notifications":{"toolsListChanged":true}}}
{"jsonrpc":"2.0","id":4,"method":"tools/list","params":{$M}}
{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{$M,"name":"run_lua","arguments":{"code":"x = 5 return x","session":"s1"}}}
{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{$M,"name":"run_lua","arguments":{"session":"s1"}}}
{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"L"}}
{"jsonrpc":"2.0","id":"M","method":"subscriptions/listen","params":{$M,"notifications":{"toolsListChanged":true}}}
LINES
check "mcp: the 2026-07-28 era, a subscription left open" 0 \
  "$BUILD/tidepool" mcp --workers 1 <"$script"

echo "# $passed passed, $failed failed"
[ "$failed" -eq 0 ]
