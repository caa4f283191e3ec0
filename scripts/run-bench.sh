#!/bin/sh
# `make bench`: the figures of issues 2 and 3, as "name: value unit" lines, medians
# unless a figure says otherwise.
#   build/bench/bench_engine   cold runs and CPU overhead, in process (see its header)
#   build/bench/bench_cli      whole `tidepool run` processes
#   bench/mcp_call.mjs         mcp_call_ms: a tools/call round trip to `tidepool mcp`
#                              over stdio, from a client in another process (node)
#   bench/mcp_ping_while_stuck.mjs  mcp_ping_while_stuck_ms: a ping round trip while
#                              another session's script is stuck in long C work
#   bench/sdk_node.mjs         caller_tool_call_us, sdk_run_ms_node: a caller tool call's round
#                              trip from a script through the Node SDK (sdk/node), and a
#                              trivial run, the process already started
#   bench/sdk_python.py        caller_tool_call_us_python, sdk_run_ms_python: the same through
#                              the Python SDK (sdk/python)
#   build/bench/bench_mcp_http http_call_ms, http_calls_per_s: tools/call of `return 1` to
#                              `tidepool mcp --http` from a libcurl client in another
#                              process, keep-alive; one at a time, and 16 in flight
#   build/bench/bench_cluster  cluster_calls_per_s, cluster_one_calls_per_s: a kv.set script
#                              over HTTP, 16 in flight, to three `tidepool mcp --http --state
#                              redis://` servers and to one (Redis started there)
#   build/bench/bench_tools    tool calls (see its header)
#   build/bench/bench_http     http_fetch_us, http_parallel_100_ms: tools.http.fetch against
#                              a server on 127.0.0.1 (see its header)
#   build/bench/bench_step     step_overshoot_us, frame_500_ms, step_cpu_tax: time-budgeted steps of
#                              CPU-bound scripts (see its header); step_overshoot_floor_us
#                              beside the overshoot: a bare C loop's p99 in the same run
#   bench/describe/run.sh      describe_tokens_ratio: the tokens of the description of 13
#                              tools, tidepool / Cloudflare's codemode; describe_builtin_chars,
#                              describe_56_chars: run_lua's description with the built-in
#                              tools and with four common servers' 56 (see its header)
#   build/bench/bench_sched    concurrent_10k_ms, poll_max_ms: 10,000 started runs each
#                              waiting 50 ms on an async C tool (see its header)
#   bench/js_peers.mjs         js_*: tidepool against JavaScript sandboxes (node:vm,
#                              quickjs-emscripten, isolated-vm, the `run` package of
#                              @ai-sdk/code-mode) and a Node MCP server on the official SDK,
#                              side by side in one sitting (see its header); reported, no
#                              target. Its npm packages (bench/js_peers/package.json, pinned)
#                              are installed into $BUILD/js-peers on first use
#   build/tests/test_hostile   host_rss_ratio: the peak RSS of the worst hostile script
#                              (spec/c/test_hostile.c, --memory 16M) divided by --memory
# Targets (checked here, reported as "target_...: met|missed"): cold_run_us <= 10,
# cold_over_bare <= 0.25, warm_run_us <= 2, session_kib <= 16, session_rss_kib <= 20,
# precheck_us <= cold_run_us,
# cpu_overhead_time <= 1.10, cli_run_ms <= 5, host_rss_ratio <= 4, tool_call_us <= 1,
# lua_tool_call_us <= 1.5,
# policy_call_us <= 0.5, trace_call_us <= 0.3,
# mcp_ping_while_stuck_ms <= 50, http_call_ms <= 0.5, step_overshoot_us <= 30, frame_500_ms <= 17,
# describe_tokens_ratio <= 0.75, describe_tokens_o200k_ratio <= 0.75, describe_builtin_chars
# <= 2048, describe_56_chars <= 2048, concurrent_10k_ms <= 120, caller_tool_call_us <= 100,
# caller_tool_call_us_python <= 150. BENCH_SCALE=N
# repeats N times as much.
# Exit status is non-zero only when a benchmark could not run, not when a target is missed.
BUILD=${BUILD:-build}
SCALE=${BENCH_SCALE:-1}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
status=0

"$BUILD/bench/bench_engine" "$SCALE" | tee -a "$out" || status=1
"$BUILD/bench/bench_cli" "$BUILD/tidepool" $((200 * SCALE)) | tee -a "$out" || status=1
if command -v node >/dev/null 2>&1; then
  node bench/mcp_call.mjs "$BUILD/tidepool" $((200 * SCALE)) | tee -a "$out" || status=1
  node bench/mcp_ping_while_stuck.mjs "$BUILD/tidepool" $((200 * SCALE)) | tee -a "$out" || status=1
  node bench/sdk_node.mjs "$BUILD/tidepool" $((200 * SCALE)) | tee -a "$out" || status=1
else
  echo "mcp_call_ms: not measured (node is not installed)"; status=1
  echo "mcp_ping_while_stuck_ms: not measured (node is not installed)"
fi
if command -v python3 >/dev/null 2>&1; then
  PYTHONPATH=sdk/python/src python3 bench/sdk_python.py "$BUILD/tidepool" $((200 * SCALE)) |
    tee -a "$out" || status=1
else
  echo "caller_tool_call_us_python: not measured (python3 is not installed)"; status=1
fi
"$BUILD/bench/bench_mcp_http" "$BUILD/tidepool" "$SCALE" | tee -a "$out" || status=1
if command -v redis-server >/dev/null 2>&1; then
  "$BUILD/bench/bench_cluster" "$BUILD/tidepool" "$SCALE" | tee -a "$out" || status=1
else
  echo "cluster_calls_per_s: not measured (redis-server is not installed)"
fi
"$BUILD/bench/bench_tools" tools "$SCALE" | tee -a "$out" || status=1
"$BUILD/bench/bench_http" tools "$SCALE" | tee -a "$out" || status=1
"$BUILD/bench/bench_step" "$SCALE" | tee -a "$out" || status=1
BUILD="$BUILD" sh bench/describe/run.sh | tee -a "$out" || status=1
"$BUILD/bench/bench_sched" "$SCALE" | tee -a "$out" || status=1
js_peers() {
  command -v npm >/dev/null 2>&1 ||
    { echo "js_cold_ratio: not measured (npm is not installed)"; return; }
  d="$BUILD/js-peers"
  if ! cmp -s bench/js_peers/package.json "$d/package.json.installed"; then
    # isolated-vm is a native addon: npm builds it with node-gyp (a few minutes of CPU)
    mkdir -p "$d" && cp bench/js_peers/package.json "$d/package.json" &&
      (cd "$d" && npm install --no-audit --no-fund --no-package-lock >npm.log 2>&1) &&
      cp bench/js_peers/package.json "$d/package.json.installed" ||
      { echo "js_cold_ratio: not measured (npm install of bench/js_peers/package.json failed, see $d/npm.log)"
        return; }
  fi
  node bench/js_peers.mjs "$BUILD" $((200 * SCALE)) 3 | tee -a "$out" || status=1
}
if command -v node >/dev/null 2>&1; then js_peers
else echo "js_cold_ratio: not measured (node is not installed)"; fi
"$BUILD/tests/test_hostile" --bench | grep '^host_rss_ratio:' | tee -a "$out"
grep -q '^host_rss_ratio:' "$out" || { echo "host_rss_ratio: not measured"; status=1; }

target() {  # $1 name, $2 max
  v=$(sed -n "s/^$1: \([0-9.]*\) .*/\1/p" "$out")
  [ -n "$v" ] || { echo "target_$1: not measured"; return; }
  if awk -v v="$v" -v m="$2" 'BEGIN { exit !(v <= m) }'; then echo "target_$1: met (<= $2)"
  else echo "target_$1: missed (<= $2)"; fi
}
target cold_run_us 10
target cold_over_bare 0.25
target warm_run_us 2
target session_kib 16
target session_rss_kib 20
# the pre-run check is part of every run's compile: it must cost less than a cold run
cold=$(sed -n "s/^cold_run_us: \([0-9.]*\) .*/\1/p" "$out")
[ -n "$cold" ] && target precheck_us "$cold"
target cpu_overhead_time 1.10
target cli_run_ms 5
target tool_call_us 1
target lua_tool_call_us 1.5
target policy_call_us 0.5
target trace_call_us 0.3
target ten_calls_run_us 60
target parallel_10x50ms_ms 70
target host_rss_ratio 4
target mcp_ping_while_stuck_ms 50
target http_call_ms 0.5
target step_overshoot_us 30
target step_cpu_tax 1.2
target frame_500_ms 17
target describe_tokens_ratio 0.75
target describe_tokens_o200k_ratio 0.75
target describe_builtin_chars 2048
target describe_56_chars 2048
target concurrent_10k_ms 120
target caller_tool_call_us 100
target caller_tool_call_us_python 150
exit $status
