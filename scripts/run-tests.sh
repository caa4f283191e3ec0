#!/bin/sh
# Runs every test suite and prints one closing line "N passed, N failed".
#   sh scripts/run-tests.sh          every suite, in two lanes side by side (make test)
#   sh scripts/run-tests.sh --fast   the C tests and busted, once, side by side (make test-fast)
#   C tests        build/tests/test_*, each in its own process (scripts/run-ctests.sh)
#   busted specs   spec/*_spec.lua and examples/plugin (a plugin's own test) on this
#                  build's Lua, then again with an aggressive GC,
#                  then on Debian's lua5.4 interpreter (5.4.4), whose C API alone the
#                  module uses while its sandboxes run on its private Lua 5.4.7
#   layers         scripts/check-layers.sh: no upward include or call (and its self-test)
#   embedding      what the library exports (scripts/check-exports.sh), and a program
#                  linking Debian's liblua5.4 with libtidepool four ways (spec/embed), and
#                  the module inside Debian's lighttpd (mod_magnet, spec/embed/lighttpd.mjs)
#   MCP            spec/mcp/e2e.mjs (official SDK client), spec/mcp/raw.mjs (raw lines),
#                  spec/mcp/callers.mjs (tool_settings callers: direct or script),
#                  spec/mcp/seen.mjs (a result's shape shared by the workers),
#                  spec/mcp/tenants.mjs (two principals' sessions and runs kept apart),
#                  spec/mcp/exposed.mjs (every --expose-tools failure through the SDK),
#                  spec/mcp/caller_tools.mjs (caller tools: live over stdio and HTTP, paused),
#                  spec/mcp/wire.mjs (engine logs as notifications/message, traceparent, audit),
#                  spec/mcp/approve.mjs and approve_sdk.mjs (approvals: paused runs,
#                  elicitation, input_required), spec/mcp/durable.mjs (paused runs that
#                  survive kill -9 with --state),
#                  spec/ui/operator.mjs (the --ui operator page in headless chromium),
#                  spec/mcp/era.mjs (2026-07-28 beside 2025: SDK 2.x client in each mode),
#                  spec/mcp/era_http.mjs (the same over Streamable HTTP),
#                  spec/upstream/upstream.mjs (upstream MCP servers from npm as tools),
#                  spec/upstream/hostile.mjs (hostile MCP and HTTP servers: memory, time),
#                  spec/upstream/start_wait.mjs (a server silent at start: start_wait_ms)
#   SDKs           spec/sdk/node_sdk.mjs (sdk/node), spec/sdk/ai_sdk.mjs (the AI SDK 6 and 7
#                  with ai/test's mock model; npm packages and Node 22 from npm),
#                  spec/sdk/python.sh (sdk/python: pip install offline, pytest)
#   HTTP           spec/http/http.mjs (local HTTP/HTTPS servers, tidepool run --config)
#   cluster        scripts/cluster-test.sh: redis-server and three tidepool mcp --http sharing
#                  it (spec/mcp/cluster.mjs), when redis-server is installed
#   lint           luacheck over the Lua sources (examples/ included)
#   valgrind       scripts/valgrind.sh (a loop of runs and the CLI, no leak and no memory
#                  error), one counted test, when valgrind is installed; about a minute
#   fuzz           each libFuzzer target of spec/fuzz for FUZZ_TEST_SECONDS (5) from its
#                  seeds, one counted test per target (scripts/fuzz.sh)
#   packaging      make deb: lintian without errors, and the unpacked package works
#   makefile       scripts/check-makefile.sh: nothing read of the system at parse time
#   clients        examples/clients/: each configuration parses and starts tidepool mcp
# No suite leaves a process behind: each runs in a session of its own with TP_TEST_SUITE
# set to a mark of its own; a process of that session, or carrying that mark, still alive
# once the suite ended (a server a spec started, reparented to init) fails the suite, is
# named, and is killed by its PID.
# Exit status is non-zero when anything failed or a suite could not run.
BUILD=${BUILD:-build}
export BUILD
LUA="$BUILD/lua/lua"
export LUA_CPATH="$BUILD/lua/?.so;;"
export LUA_PATH="./?.lua;./?/init.lua;;"
passed=0
failed=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT
exec 3>&1  # the runner's own messages, also while a suite's output goes to $log

# The processes alive of session $1 or carrying the mark $2, but this shell (zombies have
# no environment and are left out).
suite_procs() {
  { grep -lzx "TP_TEST_SUITE=$2" /proc/[0-9]*/environ 2>/dev/null | cut -d/ -f3
    cat /proc/[0-9]*/stat 2>/dev/null |
      awk -v sid="$1" '{ pid = $1; sub(/^.*\) /, ""); if ($4 == sid && $1 != "Z") print pid }'
  } | grep -vx "$$" | sort -u
}
suite_seq=0
suite_pid=
# Ctrl-C or a kill stops the suite that runs (its session does not get the terminal's
# signals) and what it started.
trap 'if [ -n "$suite_pid" ]; then kill -TERM -- "-$suite_pid" 2>/dev/null; fi; exit 130' INT TERM HUP
# suite LABEL COMMAND...: runs COMMAND as one suite, in a session of its own, and returns
# its exit status; a process it leaves alive is a failure of the suite (counted here).
suite() {
  label=$1; shift
  suite_seq=$((suite_seq + 1))
  mark="$$-$suite_seq"
  suite_t0=$(date +%s)
  TP_TEST_SUITE=$mark setsid -w "$@" &
  suite_pid=$!
  wait "$suite_pid"
  rc=$?
  left=$(suite_procs "$suite_pid" "$mark")
  tries=0
  while [ -n "$left" ] && [ "$tries" -lt 20 ]; do  # what is being killed may take a moment
    sleep 0.1; tries=$((tries + 1)); left=$(suite_procs "$suite_pid" "$mark")
  done
  suite_pid=
  suite_secs=$(($(date +%s) - suite_t0))
  if [ -n "$left" ]; then
    echo "$label: left $(echo "$left" | wc -l) process(es) running: a failure; killed:" >&3
    for p in $left; do
      echo "  $p: $(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null)" >&3
      kill -KILL "$p" 2>/dev/null
    done
    failed=$((failed + 1))
  fi
  return "$rc"
}

add_counts() {  # $1 suite name; reads "# N passed, M failed" from $log
  line=$(grep -E '^# [0-9]+ passed, [0-9]+ failed' "$log" | tail -n 1)
  if [ -z "$line" ]; then
    echo "$1: no summary line (crashed?)"
    failed=$((failed + 1))
    return
  fi
  p=$(echo "$line" | sed -E 's/^# ([0-9]+) passed.*/\1/')
  f=$(echo "$line" | sed -E 's/.* ([0-9]+) failed.*/\1/')
  passed=$((passed + p))
  failed=$((failed + f))
  echo "$1: $p passed, $f failed${suite_secs:+ (${suite_secs} s)}"
  suite_secs=
}

# make test-fast: the C tests and busted at the same time (two runs of this script, one
# suite each, --fast-c and --fast-busted), each suite's output kept apart and printed
# whole once both ended, then the sum. On 2 cores the wall time is the longer of the two
# (busted), not their sum. Each run still fails a suite that leaves a process behind.
if [ "${1:-}" = --fast ]; then
  out_c=$(mktemp); out_b=$(mktemp)
  trap 'rm -f "$log" "$out_c" "$out_b"' EXIT
  out_b2=$(mktemp)
  trap 'rm -f "$log" "$out_c" "$out_b" "$out_b2"' EXIT
  sh "$0" --fast-c >"$out_c" 2>&1 &
  pid_c=$!
  # busted in two halves: the specs spend much of their time waiting on the servers and
  # commands they start, so two busted and the C tests fill 2 cores (FAST_HEAVY: the
  # slowest specs, about half of busted's time, which go to the second half alone;
  # measured with `time busted spec/x_spec.lua` per file)
  heavy=$(for f in ${FAST_HEAVY:-spec/proc_spec.lua spec/config_spec.lua spec/limits_spec.lua \
                               spec/time_limits_spec.lua}; do [ -e "$f" ] && echo "$f"; done)
  heavy=$(echo $heavy)
  light=$(for f in spec/*_spec.lua examples/plugin; do
            case " $heavy " in *" $f "*) ;; *) echo "$f" ;; esac; done)
  BUSTED_FILES=$(echo $light) sh "$0" --fast-busted >"$out_b" 2>&1 &
  pid_b=$!
  BUSTED_FILES="$heavy" sh "$0" --fast-busted >"$out_b2" 2>&1 &
  pid_b2=$!
  trap 'kill -TERM "$pid_c" "$pid_b" "$pid_b2" 2>/dev/null; wait; exit 130' INT TERM HUP
  wait "$pid_c"; rc_c=$?
  wait "$pid_b"; rc_b=$?
  wait "$pid_b2"; [ $? -eq 0 ] || rc_b=1
  for out in "$out_c" "$out_b" "$out_b2"; do
    grep -vE '^[0-9]+ passed, [0-9]+ failed \(make test-fast' "$out"
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed \(make test-fast' "$out" | tail -n 1)
    if [ -z "$line" ]; then echo "a part of make test-fast did not finish"; failed=$((failed + 1))
    else
      passed=$((passed + $(echo "$line" | sed -E 's/^([0-9]+) passed.*/\1/')))
      failed=$((failed + $(echo "$line" | sed -E 's/^[0-9]+ passed, ([0-9]+) failed.*/\1/')))
    fi
  done
  [ "$rc_c" -eq 0 ] && [ "$rc_b" -eq 0 ] || [ "$failed" -gt 0 ] || failed=1
  echo "$passed passed, $failed failed (make test-fast: the C tests and busted, once)"
  [ "$failed" -eq 0 ]; exit
fi

# make test: the suites in two lanes side by side (two runs of this script, TP_LANE=1 and
# TP_LANE=2), each printing its suites' lines as they end, then the sum. Lane 1 is the C
# tests, busted three times, the embedding checks, luacheck and valgrind (mostly CPU); lane
# 2 the node, SDK and cluster suites, fuzz, install, lighttpd and make deb (mostly waiting
# on servers, npm and dpkg; every make it runs is in this lane, one after the other). On 2
# cores that takes about 60% of the time of one after the other. TEST_LANES=1 runs them
# in one lane, in order. A suite still fails for a process left behind: each lane's
# marks are its own.
in_lane() { [ -z "${TP_LANE:-}" ] || [ "$TP_LANE" = "$1" ]; }
if [ -z "${1:-}" ] && [ -z "${TP_LANE:-}" ] && [ "${TEST_LANES:-2}" != 1 ]; then
  tot1=$(mktemp); tot2=$(mktemp)
  trap 'rm -f "$log" "$tot1" "$tot2"' EXIT
  TP_LANE=1 TP_LANE_TOTALS=$tot1 sh "$0" &
  pid1=$!
  # lane 2's make install and make deb relink build/tidepool, which lane 1's suites run:
  # they wait for lane 1 to end (its totals written, or its process gone)
  TP_LANE=2 TP_LANE_TOTALS=$tot2 TP_LANE1_TOTALS=$tot1 TP_LANE1_PID=$pid1 sh "$0" &
  pid2=$!
  trap 'kill -TERM "$pid1" "$pid2" 2>/dev/null; wait; exit 130' INT TERM HUP
  wait "$pid1"
  wait "$pid2"
  for n in 1 2; do
    eval "tot=\$tot$n"
    read -r p f <"$tot" 2>/dev/null || p=
    if [ -z "$p" ]; then echo "lane $n of make test did not finish"; failed=$((failed + 1))
    else passed=$((passed + p)); failed=$((failed + f)); fi
  done
  echo "$passed passed, $failed failed"
  [ "$failed" -eq 0 ]; exit
fi

# Each C test file in its own process under a timeout; a crash, a kill or a timeout is
# named and counted as a failure, and the other files still run (scripts/run-ctests.sh).
if [ "${1:-}" != --fast-busted ] && in_lane 1; then
  BUILD="$BUILD" suite "C tests" sh scripts/run-ctests.sh >"$log" 2>&1
  grep -vE '^# [0-9]+ passed' "$log"
  add_counts "C tests"
fi
if [ "${1:-}" = --fast-c ]; then
  echo "$passed passed, $failed failed (make test-fast: the C tests)"
  [ "$failed" -eq 0 ]; exit
fi

run_busted() {  # $1 label, $2 the interpreter (default: this build's)
  # shellcheck disable=SC2086
  suite "$1" timeout 900 "${2:-$LUA}" /usr/bin/busted -o TAP ${BUSTED_FILES:-spec examples/plugin} \
    >"$log" 2>&1
  rc=$?
  p=$(grep -cE '^ok [0-9]+' "$log")
  f=$(grep -cE '^not ok [0-9]+' "$log")
  grep -A8 -E '^not ok' "$log" | head -n 80
  if ! grep -qE '^1\.\.[0-9]+' "$log"; then
    echo "$1: busted did not finish (exit $rc)"; tail -n 20 "$log"; f=$((f + 1))
  fi
  passed=$((passed + p))
  failed=$((failed + f))
  echo "$1: $p passed, $f failed${suite_secs:+ (${suite_secs} s)}"
  suite_secs=
}
if in_lane 1 && ls spec/*_spec.lua >/dev/null 2>&1; then
  run_busted "busted"
  if [ "${1:-}" = --fast-busted ]; then
    echo "$passed passed, $failed failed (make test-fast: busted)"
    [ "$failed" -eq 0 ]; exit
  fi
  TP_GC_AGGRESSIVE=1 run_busted "busted (aggressive GC)"
  # Not under `make sanitize`: an ASan-built module cannot load into an interpreter
  # without the ASan runtime.
  if [ -n "${SANITIZE:-}" ]; then
    :
  elif command -v lua5.4 >/dev/null 2>&1; then
    run_busted "busted (Debian's lua5.4)" lua5.4
  else
    echo "busted (Debian's lua5.4): lua5.4 is not installed (scripts/deps.sh): a failure"
    failed=$((failed + 1))
  fi
fi

# Embedding: the library exports only tp_*, and a program that links Debian's Lua 5.4.4
# (ahead of libtidepool.so, after it, with libtidepool.a, both static) still runs its
# sandboxes on tidepool's Lua: a backtracking pattern stops at a 1 s limit.
if in_lane 1; then  # embedding, the Makefile, layers
  sh scripts/check-exports.sh >"$log" 2>&1
  grep -E '^(not ok|#   )' "$log" | head -n 40
  add_counts "exports"
  for how in so_first so_last static static_both; do
    t="$BUILD/embed/foreign_lua_$how"
    from=liblua5.4.so
    [ "$how" = static_both ] && from="foreign_lua_$how"
    if [ ! -x "$t" ]; then echo "embed $how: $t was not built"; failed=$((failed + 1)); continue; fi
    suite "embed $how" timeout 300 "$t" spec/embed/tools "$from" >"$log" 2>&1
    grep -E '^(not ok|#   )' "$log" | head -n 20
    add_counts "embed, Debian's Lua and libtidepool ($how)"
  done

  # The Makefile reads nothing of the system at parse time (scripts/config.sh does, after
  # scripts/deps.sh), so the first `make run` on a fresh machine works.
  sh scripts/check-makefile.sh >"$log" 2>&1
  grep -E '^(not ok|#   )' "$log" | head -n 20
  add_counts "makefile (nothing read at parse time)"

  # Layers (DESIGN.md section 2): no file includes a header, and no object calls a
  # function, of a higher layer; the core uses no libuv. The self-test proves the check
  # fails on a doctored copy.
  BUILD="$BUILD" sh scripts/check-layers.sh engine "$BUILD/obj" >"$log" 2>&1
  grep -E '^(not ok|#   )' "$log" | head -n 40
  add_counts "layers"
  BUILD="$BUILD" sh scripts/check-layers.sh --self-test >"$log" 2>&1
  grep -E '^(not ok|#   )' "$log" | head -n 40
  add_counts "layers (self-test)"

  # MCP server: end-to-end with the official TypeScript SDK client (installed into
  # spec/mcp/node_modules on first use), and raw protocol tests (plain node).
fi
if in_lane 2; then  # node suites, the SDKs, the cluster
  run_node() {  # $1 label, $2 script
    BUILD="$BUILD" suite "$1" timeout 300 node "$2" >"$log" 2>&1
    grep -A3 -E '^not ok' "$log" | head -n 40
    add_counts "$1"
  }
  if ! command -v node >/dev/null 2>&1; then
    echo "mcp, upstream, http, trace: node is not installed: 6 suites not run"; failed=$((failed + 6))
  else
    # every package of spec/mcp/package.json (the SDKs 1.x and 2.x with its core, and the
    # servers spec/upstream runs)
    missing=0
    for pkg in sdk client core server-memory server-filesystem server-everything; do
      [ -d "spec/mcp/node_modules/@modelcontextprotocol/$pkg" ] || missing=1
    done
    if [ "$missing" = 1 ]; then
      npm install --prefix spec/mcp --no-audit --no-fund >"$log" 2>&1 ||
        { tail -n 5 "$log"; echo "mcp: npm install of spec/mcp/package.json failed (no network?)"; }
    fi
    if [ -d spec/mcp/node_modules/@modelcontextprotocol/sdk ]; then
      run_node "mcp e2e (SDK client)" spec/mcp/e2e.mjs
      run_node "mcp callers: direct or script (SDK client)" spec/mcp/callers.mjs
      run_node "mcp shapes last seen, shared by workers (SDK client)" spec/mcp/seen.mjs
      run_node "mcp approvals (SDK client, elicitation)" spec/mcp/approve_sdk.mjs
      run_node "mcp over Streamable HTTP (SDK client, raw requests)" spec/mcp/http.mjs
      run_node "mcp tenants (two principals over HTTP, tokens and JWTs)" spec/mcp/tenants.mjs
      run_node "mcp --expose-tools failures (SDK client)" spec/mcp/exposed.mjs
      run_node "mcp caller tools (raw lines on stdio; SDK client over HTTP)" spec/mcp/caller_tools.mjs
    else
      echo "mcp e2e, callers, seen, approvals, HTTP, tenants, exposed tools and caller tools (SDK client): not run, the SDK is not installed: counted as 8 failures"
      failed=$((failed + 8))
    fi
    run_node "mcp raw protocol" spec/mcp/raw.mjs
    run_node "mcp wired to the engine: logs, traces, the audit journal" spec/mcp/wire.mjs
    # examples/clients/: Claude Desktop, Claude Code, Cursor, VS Code start tidepool mcp
    run_node "client configurations (examples/clients)" spec/mcp/clients.mjs
    # requests piped in: every one is answered after standard input closes
    run_node "mcp end of input (raw)" spec/mcp/eof.mjs
    # approvals: paused runs and resume_run, elicitation, input_required (raw lines)
    run_node "mcp approvals (raw)" spec/mcp/approve.mjs
    # durable paused runs (--state): kill -9, restart, resume by replay (raw lines)
    run_node "mcp durable runs (raw)" spec/mcp/durable.mjs
    # the operator page (--ui) in Debian's chromium, driven by puppeteer-core (spec/ui's
    # package.json, installed into spec/ui/node_modules on first use)
    if [ ! -d spec/ui/node_modules/puppeteer-core ]; then
      npm install --prefix spec/ui --no-audit --no-fund >"$log" 2>&1 ||
        { tail -n 5 "$log"; echo "ui: npm install of spec/ui/package.json failed (no network?)"; }
    fi
    run_node "operator page in a real browser (chromium, puppeteer-core)" spec/ui/operator.mjs
    if [ -d spec/mcp/node_modules/@modelcontextprotocol/client ]; then
      run_node "mcp eras (SDK 2.x client, 2026-07-28)" spec/mcp/era.mjs
      run_node "mcp eras over HTTP (SDK 2.x client)" spec/mcp/era_http.mjs
    else
      echo "mcp eras: not run, @modelcontextprotocol/client is not installed: counted as 2 failures"
      failed=$((failed + 2))
    fi
    # Upstream MCP servers as tools.<server>.*: the npm servers and spec/upstream's own
    run_node "upstream MCP servers" spec/upstream/upstream.mjs
    # hostile upstream data and HTTP bodies: outcomes, time, peak RSS (issue 19)
    run_node "hostile upstream and HTTP servers (memory, time)" spec/upstream/hostile.mjs
    # a server that does not answer at start holds mcp and describe up for start_wait_ms only
    run_node "upstream servers slow to start (start_wait_ms)" spec/upstream/start_wait.mjs
    # The Node SDK (sdk/node): its own tests, then generateText with the AI SDK's mock
    # model, ai 6 on this Node and ai 7 on Node 22 (from npm when this Node is older);
    # packages installed into $BUILD/sdk-node on first use (spec/sdk/install.sh)
    if BUILD="$BUILD" sh spec/sdk/install.sh >"$log" 2>&1; then
      run_node "sdk/node (caller tools, zod, abort, crash, missing binary)" spec/sdk/node_sdk.mjs
      node18=$(ls "$BUILD"/sdk-node/node18/node_modules/node-linux-*/bin/node 2>/dev/null | head -n 1)
      if [ -n "$node18" ]; then  # this machine's Node is not 18: the SDK on bookworm's too
        BUILD="$BUILD" suite "sdk/node on Node 18" timeout 300 "$node18" spec/sdk/node_sdk.mjs >"$log" 2>&1
        grep -A3 -E '^not ok' "$log" | head -n 40
        add_counts "sdk/node on Node 18 (bookworm's)"
      fi
      export AI_DIR=ai6
      run_node "sdk/node with ai 6 (createCodeTool, generateText, mock model)" spec/sdk/ai_sdk.mjs
      node22=node
      if [ "$(node -p 'process.versions.node.split(".")[0]')" -lt 22 ]; then
        node22=$(ls "$BUILD"/sdk-node/ai7/node_modules/node-linux-*/bin/node 2>/dev/null | head -n 1)
      fi
      AI_DIR=ai7 BUILD="$BUILD" suite "sdk/node with ai 7" timeout 300 "$node22" spec/sdk/ai_sdk.mjs >"$log" 2>&1
      grep -A3 -E '^not ok' "$log" | head -n 40
      add_counts "sdk/node with ai 7 (codeModeTool, experimental_toolCallers; Node 22)"
      unset AI_DIR
    else
      tail -n 5 "$log"
      echo "sdk/node: npm install of ai, zod or Node 22 failed (no network?): 3 suites not run, counted as failures"
      failed=$((failed + 3))
    fi
    # HTTP (engine/host/http.c): its own servers on 127.0.0.1, a test CA made with openssl
    run_node "http (egress policy, http.fetch, ctx.http)" spec/http/http.mjs
    # OpenTelemetry traces (engine/host/trace.c): an OTLP receiver of its own on 127.0.0.1
    run_node "traces and the audit journal (OTLP export, context, kill -9)" spec/trace/trace.mjs
    # Redis and three tidepool mcp --http sharing it (make test-cluster), when redis-server
    # is installed (scripts/deps.sh installs it)
    if command -v redis-server >/dev/null 2>&1; then
      BUILD="$BUILD" suite cluster sh scripts/cluster-test.sh >"$log" 2>&1
      grep -A3 -E '^(not ok|cluster:)' "$log" | head -n 40
      add_counts "cluster (redis, three servers)"
    else
      echo "cluster (redis, three servers): not run, redis-server is not installed"
    fi
  fi

  # The Python SDK (sdk/python): pip-installed offline into a venv, pytest (python3-pytest)
  BUILD="$BUILD" suite "sdk/python" timeout 300 sh spec/sdk/python.sh >"$log" 2>&1
  grep -A3 -E '^not ok' "$log" | head -n 40
  add_counts "sdk/python (pytest: caller tools, arun, schemas from hints, crash)"
fi

if in_lane 1; then  # luacheck, valgrind
  if command -v luacheck >/dev/null 2>&1; then
    if luacheck --no-color -q sandbox lua tools spec scripts examples >"$log" 2>&1; then
      passed=$((passed + 1)); echo "luacheck: ok"
    else
      failed=$((failed + 1)); cat "$log" | tail -n 30; echo "luacheck: failed"
    fi
  fi

  # Not under `make sanitize` (SANITIZE set): valgrind cannot run ASan binaries. There the
  # sanitizers do the checking; LeakSanitizer stays on for the C tests and for busted too,
  # since build/sanitize/lua/lua closes its state at exit (no suppressions needed so far),
  # and no LD_PRELOAD is needed: that interpreter is itself linked with the ASan runtime.
  if [ -z "${SANITIZE:-}" ] && command -v valgrind >/dev/null 2>&1 &&
     [ -x "$BUILD/tests/test_run_loop" ]; then
    # about a minute on an idle 2-core machine; ten times that and more at a load of 15
    if BUILD=$BUILD suite valgrind timeout 1800 sh scripts/valgrind.sh >"$log" 2>&1; then
      passed=$((passed + 1)); echo "valgrind: ok"
    else
      rc=$?
      failed=$((failed + 1)); grep -vE '^ok - ' "$log" | tail -n 40
      if [ "$rc" -eq 124 ]; then echo "valgrind: did not finish in 1800 s (timeout): failed"
      else echo "valgrind: failed (exit $rc)"; fi
    fi
  fi

  # Fuzzing: every libFuzzer target (spec/fuzz/fuzz_*.c) for a few seconds from its seeds
  # only (spec/fuzz/corpus/<name>/), so that a regression on a kept input, or a finding that
  # comes quickly, fails the suite; `make fuzz` runs them for longer. One count per target.
  # Needs clang and its libFuzzer runtime (scripts/deps.sh installs them): without them
  # every target counts as a failure. Not under `make sanitize`: the targets are ASan+UBSan
  # builds already.
fi
if in_lane 2; then  # fuzz
  if [ -z "${SANITIZE:-}" ]; then
    fuzz_targets=$(for f in spec/fuzz/fuzz_*.c; do [ -f "$f" ] && basename "$f" .c; done)
    nfuzz=$(echo "$fuzz_targets" | grep -c .)
    if ! command -v "${FUZZ_CC:-clang}" >/dev/null 2>&1; then
      echo "fuzz: ${FUZZ_CC:-clang} is not installed: $nfuzz targets not run, counted as failures"
      failed=$((failed + nfuzz))
    elif ! env -u MAKEFLAGS -u MFLAGS make -s -j2 BUILD="$BUILD" fuzz-build >"$log" 2>&1; then
      tail -n 20 "$log"
      echo "fuzz: the targets did not build (clang's libFuzzer runtime missing?): $nfuzz failures"
      failed=$((failed + nfuzz))
    else
      # A fixed seed: the same mutations every run, so make test fails on a regression, not
      # on a new finding that chance brought this time (make fuzz explores at random).
      # shellcheck disable=SC2086
      FUZZ_BUILD="$BUILD/fuzz" FUZZ_FRESH=1 FUZZ_ARGS="-seed=1 ${FUZZ_ARGS:-}" \
        suite fuzz sh scripts/fuzz.sh "${FUZZ_TEST_SECONDS:-5}" $fuzz_targets >"$log" 2>&1
      grep -vE '^# [0-9]+ passed' "$log"
      add_counts "fuzz"
    fi
  fi

  # make install into a temporary root, then build docs/c-api.md's C example against the
  # installed header and libraries, as a user of the library would.
  # (Only for the plain build: the sanitize build's objects carry other flags.)
fi
if [ -n "${TP_LANE1_PID:-}" ]; then  # lane 2: lane 1 must be over first (see above)
  while [ ! -s "$TP_LANE1_TOTALS" ] && kill -0 "$TP_LANE1_PID" 2>/dev/null; do sleep 1; done
fi
if in_lane 2; then  # install, lighttpd, make deb
  inst=$(mktemp -d)
  if [ "$BUILD" != build ]; then
    echo "install + examples/embed.c: skipped in $BUILD"
  elif make -s install DESTDIR="$inst" PREFIX=/usr BUILD="$BUILD" >"$log" 2>&1 &&
     cc -o "$inst/embed" examples/embed.c -I"$inst/usr/include" -L"$inst/usr/lib" \
        -Wl,-rpath,"$inst/usr/lib" -ltidepool >>"$log" 2>&1 &&
     "$inst/embed" | grep -q '"ok":true,"result":5,' &&
     cc -o "$inst/frame_loop" examples/frame_loop.c -I"$inst/usr/include" -L"$inst/usr/lib" \
        -Wl,-rpath,"$inst/usr/lib" -ltidepool >>"$log" 2>&1 &&
     "$inst/frame_loop" | grep -q '"result":{"sum":2000001000000,"x":6}' &&
     printf '%s\n' '#include <stdio.h>' '#include <tidepool_server.h>' \
       'int main (void) { tp_engine *e = tp_engine_create();' \
       '  printf("%s %s %d\n", tp_err_name(tp_engine_release_session(e, NULL, NULL)),' \
       '         tp_err_name(-99), TP_STORED_CLOSED); tp_engine_destroy(e); return 0; }' \
       > "$inst/server.c" &&
     cc -Wall -Werror -o "$inst/server" "$inst/server.c" -I"$inst/usr/include" -L"$inst/usr/lib" \
        -Wl,-rpath,"$inst/usr/lib" -ltidepool >>"$log" 2>&1 &&
     [ "$("$inst/server")" = "TP_EINVAL TP_UNKNOWN 5" ] &&
     grep -q '^Libs: -L${libdir} -ltidepool' "$inst/usr/lib/pkgconfig/tidepool.pc"; then
    passed=$((passed + 1)); echo "install + examples/embed.c, frame_loop.c, tidepool_server.h: ok"
  else
    failed=$((failed + 1)); tail -n 20 "$log"; echo "install + examples/embed.c, frame_loop.c, tidepool_server.h: failed"
  fi
  rm -rf "$inst"

  # make install PREFIX=DIR after the plain build above: the installed CLI and Lua module
  # find the built-in tools under DIR (not /usr/local), and pkg-config points into DIR.
  pfx=$(mktemp -d)
  mod_ok=1
  if [ "$BUILD" != build ]; then
    echo "install PREFIX=...: skipped in $BUILD"
  elif make -s install PREFIX="$pfx" BUILD="$BUILD" >"$log" 2>&1 &&
     echo 'return tools.time.now{}.unix_ms > 0' |
       env -u TIDEPOOL_TOOLS_DIR "$pfx/bin/tidepool" run --json - 2>>"$log" |
       grep -q '"ok":true,"result":true,' &&
     PKG_CONFIG_PATH="$pfx/lib/pkgconfig" pkg-config --cflags --libs tidepool |
       grep -- "-I$pfx/include " | grep -q -- "-L$pfx/lib -ltidepool" &&
     cc -o "$pfx/embed" examples/embed.c $(PKG_CONFIG_PATH="$pfx/lib/pkgconfig" \
        pkg-config --cflags --libs tidepool) -Wl,-rpath,"$pfx/lib" >>"$log" 2>&1 &&
     "$pfx/embed" | grep -q '"ok":true,"result":5,'; then
    if command -v lua5.4 >/dev/null 2>&1; then
      env -u TIDEPOOL_TOOLS_DIR LUA_CPATH="$pfx/lib/lua/5.4/?.so" lua5.4 -e '
        local env = require("tidepool").run("return tools.time.now{}.unix_ms > 0",
                                            { builtin_tools = true })
        assert(env.ok and env.result == true and not env.warnings, env.error and env.error.message)
      ' >>"$log" 2>&1 || mod_ok=0
    fi
    if [ "$mod_ok" = 1 ]; then
      passed=$((passed + 1)); echo "install PREFIX=DIR: tools and pkg-config under DIR: ok"
    else
      failed=$((failed + 1)); tail -n 20 "$log"
      echo "install PREFIX=DIR: the Lua module does not find its tools under DIR: failed"
    fi
  else
    failed=$((failed + 1)); tail -n 20 "$log"; echo "install PREFIX=DIR: failed"
  fi
  rm -rf "$pfx"

  # The Lua module inside a real Lua 5.4 server: Debian's lighttpd, whose mod_magnet runs on
  # Debian's liblua5.4 (5.4.4), serves examples/lighttpd/ on 127.0.0.1 (spec/embed/lighttpd.mjs).
  # Not under `make sanitize`: an ASan-built module cannot load into lighttpd.
  if [ -n "${SANITIZE:-}" ]; then
    echo "lighttpd (mod_magnet): skipped under the sanitizers"
  elif ! command -v lighttpd >/dev/null 2>&1 || [ ! -f /usr/lib/lighttpd/mod_magnet.so ] ||
       ! command -v node >/dev/null 2>&1; then
    echo "lighttpd (mod_magnet): lighttpd, lighttpd-modules-lua or node is not installed" \
      "(scripts/deps.sh): a failure"
    failed=$((failed + 1))
  else
    BUILD="$BUILD" suite lighttpd timeout 120 node spec/embed/lighttpd.mjs >"$log" 2>&1
    grep -A3 -E '^not ok' "$log" | head -n 40
    add_counts "lighttpd (mod_magnet)"
  fi

  # make deb: the three packages build and lintian reports no error (packaging/deb.sh stops
  # otherwise); dpkg installs them into a temporary root (a dpkg database of its own, where
  # their dependencies are not installed: the system's serve); there tidepool runs a script
  # with the package's tools, the Lua module loads into Debian's lua5.4, the man page
  # documents every flag --help lists, tidepool's Depends has libseccomp2 (tidepool-confine),
  # the systemd unit is installed and not enabled, and examples/embed.c builds with
  # `pkg-config --cflags --libs tidepool` (tidepool.pc requires no other package) and with
  # --static against libtidepool.a, and runs. (Only for the plain build.)
  debroot=$(mktemp -d)
  deb_installed() {
    for p in "$@"; do
      dpkg --root="$debroot" -s "$p" 2>>"$log" | grep -q '^Status: install ok installed' || return 1
    done
  }
  # shellcheck disable=SC2086
  if [ "$BUILD" != build ]; then
    echo "make deb: skipped in $BUILD"
  elif make -s deb BUILD="$BUILD" >"$log" 2>&1 && grep -q '^deb.sh: lintian: no errors' "$log" &&
       debs=$(ls "$BUILD"/tidepool_*.deb "$BUILD"/libtidepool0_*.deb "$BUILD"/libtidepool-dev_*.deb) &&
       mkdir -p "$debroot/var/lib/dpkg/info" "$debroot/var/lib/dpkg/updates" &&
       : >"$debroot/var/lib/dpkg/status" &&
       dpkg --root="$debroot" --force-depends --force-not-root --force-script-chrootless \
         --no-triggers --log=/dev/null -i $debs >>"$log" 2>&1 &&
       deb_installed tidepool libtidepool0 libtidepool-dev; then
    ma=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
    tools="$debroot/usr/share/tidepool/tools"
    deb_ok=1
    echo 'tools.kv.set{key = "k", value = 41}; return tools.kv.get{key = "k"}.value + 1' |
      TIDEPOOL_TOOLS_DIR="$tools" "$debroot/usr/bin/tidepool" run --json - 2>>"$log" |
      grep -q '^{"ok":true,"result":42,' || { deb_ok=0; echo "the packaged tidepool run failed"; }
    TIDEPOOL_TOOLS_DIR="$tools" LUA_CPATH_5_4="$debroot/usr/lib/$ma/lua/5.4/?.so" lua5.4 -e '
      local env = require("tidepool").run("return tools.time.now{}.unix_ms > 0",
                                          { builtin_tools = true, timeout = "2s" })
      assert(env.ok and env.result == true and not env.warnings, env.error and env.error.message)
    ' >>"$log" 2>&1 || { deb_ok=0; echo "the packaged Lua module failed in lua5.4"; }
    for flag in $("$debroot/usr/bin/tidepool" --help | grep -oE -- '--[a-z][a-z-]*' | sort -u); do
      zcat "$debroot/usr/share/man/man1/tidepool.1.gz" | grep -qF -- "$(echo "$flag" |
        sed 's/-/\\-/g')" || { deb_ok=0; echo "the man page lacks $flag"; }
    done
    dpkg-deb -f "$BUILD"/tidepool_*.deb Depends | grep -q 'libseccomp2' ||
      { deb_ok=0; echo "tidepool's Depends lacks libseccomp2: $(dpkg-deb -f "$BUILD"/tidepool_*.deb Depends)"; }
    unit="$debroot/lib/systemd/system/tidepool.service"
    { [ -f "$unit" ] && grep -q '^ExecStart=/usr/bin/tidepool mcp ' "$unit"; } ||
      { deb_ok=0; echo "the systemd unit is not installed, or does not start /usr/bin/tidepool mcp"; }
    # the service's cgroup is delegated (tidepool-confine's pids groups, docs/state.md), and
    # systemd reads the unit without a word (its program: the packaged one)
    grep -q '^Delegate=pids$' "$unit" ||
      { deb_ok=0; echo "the systemd unit does not delegate pids (Delegate=pids)"; }
    if command -v systemd-analyze >/dev/null 2>&1; then
      mkdir -p "$debroot/unit-check"
      sed "s|/usr/bin/tidepool|$debroot/usr/bin/tidepool|" "$unit" \
        >"$debroot/unit-check/tidepool.service"
      said=$(systemd-analyze verify --man=no "$debroot/unit-check/tidepool.service" 2>&1)
      [ -z "$said" ] || { deb_ok=0; echo "systemd-analyze verify on the unit: $said"; }
    fi
    if ls "$debroot"/etc/systemd/system/*/tidepool.service >/dev/null 2>&1; then
      deb_ok=0; echo "the systemd unit is enabled by the package"
    fi
    pc() {
      PKG_CONFIG_SYSROOT_DIR="$debroot" PKG_CONFIG_LIBDIR="$debroot/usr/lib/$ma/pkgconfig" \
        PKG_CONFIG_ALLOW_SYSTEM_CFLAGS=1 PKG_CONFIG_ALLOW_SYSTEM_LIBS=1 pkg-config "$@"
    }
    [ -z "$(pc --print-requires --print-requires-private tidepool 2>&1)" ] ||
      { deb_ok=0; echo "tidepool.pc requires other packages: $(pc --print-requires-private tidepool 2>&1)"; }
    # shellcheck disable=SC2046
    { cc -o "$debroot/embed" examples/embed.c $(pc --cflags --libs tidepool) \
        -Wl,-rpath,"$debroot/usr/lib/$ma" >>"$log" 2>&1 &&
      "$debroot/embed" | grep -q '"ok":true,"result":5,'; } ||
      { deb_ok=0; echo "examples/embed.c with pkg-config --cflags --libs tidepool failed"; }
    # shellcheck disable=SC2046
    { cc -o "$debroot/embed-static" examples/embed.c $(pc --cflags tidepool) \
        $(pc --static --libs tidepool | sed 's/-ltidepool\b/-l:libtidepool.a/') >>"$log" 2>&1 &&
      ! readelf -d "$debroot/embed-static" | grep -q 'libtidepool' &&
      "$debroot/embed-static" | grep -q '"ok":true,"result":5,'; } ||
      { deb_ok=0; echo "examples/embed.c linked with libtidepool.a (pkg-config --static) failed"; }
    if [ "$deb_ok" = 1 ]; then
      passed=$((passed + 1)); echo "make deb: lintian clean; the three packages installed by dpkg into a temporary root work: ok"
    else
      failed=$((failed + 1)); tail -n 20 "$log"; echo "make deb: the installed packages: failed"
    fi
  else
    failed=$((failed + 1)); tail -n 30 "$log"; echo "make deb: failed"
  fi
  rm -rf "$debroot"
fi

if [ -n "${TP_LANE_TOTALS:-}" ]; then  # a lane of make test: the sum is printed once
  echo "$passed $failed" >"$TP_LANE_TOTALS"
else
  echo "$passed passed, $failed failed"
fi
[ "$failed" -eq 0 ]
