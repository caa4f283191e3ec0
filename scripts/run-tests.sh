#!/bin/sh
# Runs every test suite and prints one closing line "N passed, N failed".
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
#                  spec/mcp/tenants.mjs (two principals' sessions and runs kept apart),
#                  spec/mcp/exposed.mjs (every --expose-tools failure through the SDK),
#                  spec/mcp/approve.mjs and approve_sdk.mjs (approvals: paused runs,
#                  elicitation, input_required), spec/mcp/durable.mjs (paused runs that
#                  survive kill -9 with --state),
#                  spec/mcp/era.mjs (2026-07-28 beside 2025: SDK 2.x client in each mode),
#                  spec/mcp/era_http.mjs (the same over Streamable HTTP),
#                  spec/upstream/upstream.mjs (upstream MCP servers from npm as tools)
#   HTTP           spec/http/http.mjs (local HTTP/HTTPS servers, tidepool run --config)
#   cluster        scripts/cluster-test.sh: redis-server and three tidepool mcp --http sharing
#                  it (spec/mcp/cluster.mjs), when redis-server is installed
#   lint           luacheck over the Lua sources (examples/ included)
#   valgrind       scripts/valgrind.sh (a loop of runs and the CLI, no leak and no memory
#                  error), one counted test, when valgrind is installed; about a minute
#   fuzz           each libFuzzer target of spec/fuzz for FUZZ_TEST_SECONDS (5) from its
#                  seeds, one counted test per target (scripts/fuzz.sh)
#   packaging      make deb: lintian without errors, and the unpacked package works
# Exit status is non-zero when anything failed or a suite could not run.
BUILD=${BUILD:-build}
LUA="$BUILD/lua/lua"
export LUA_CPATH="$BUILD/lua/?.so;;"
export LUA_PATH="./?.lua;./?/init.lua;;"
passed=0
failed=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT

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
  echo "$1: $p passed, $f failed"
}

# Each C test file in its own process under a timeout; a crash, a kill or a timeout is
# named and counted as a failure, and the other files still run (scripts/run-ctests.sh).
BUILD="$BUILD" sh scripts/run-ctests.sh >"$log" 2>&1
grep -vE '^# [0-9]+ passed' "$log"
add_counts "C tests"

run_busted() {  # $1 label, $2 the interpreter (default: this build's)
  timeout 900 "${2:-$LUA}" /usr/bin/busted -o TAP spec examples/plugin >"$log" 2>&1
  rc=$?
  p=$(grep -cE '^ok [0-9]+' "$log")
  f=$(grep -cE '^not ok [0-9]+' "$log")
  grep -A8 -E '^not ok' "$log" | head -n 80
  if ! grep -qE '^1\.\.[0-9]+' "$log"; then
    echo "$1: busted did not finish (exit $rc)"; tail -n 20 "$log"; f=$((f + 1))
  fi
  passed=$((passed + p))
  failed=$((failed + f))
  echo "$1: $p passed, $f failed"
}
if ls spec/*_spec.lua >/dev/null 2>&1; then
  run_busted "busted"
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
sh scripts/check-exports.sh >"$log" 2>&1
grep -E '^(not ok|#   )' "$log" | head -n 40
add_counts "exports"
for how in so_first so_last static static_both; do
  t="$BUILD/embed/foreign_lua_$how"
  from=liblua5.4.so
  [ "$how" = static_both ] && from="foreign_lua_$how"
  if [ ! -x "$t" ]; then echo "embed $how: $t was not built"; failed=$((failed + 1)); continue; fi
  timeout 300 "$t" spec/embed/tools "$from" >"$log" 2>&1
  grep -E '^(not ok|#   )' "$log" | head -n 20
  add_counts "embed, Debian's Lua and libtidepool ($how)"
done

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
run_node() {  # $1 label, $2 script
  BUILD="$BUILD" timeout 300 node "$2" >"$log" 2>&1
  grep -A3 -E '^not ok' "$log" | head -n 40
  add_counts "$1"
}
if ! command -v node >/dev/null 2>&1; then
  echo "mcp, upstream, http: node is not installed: 5 suites not run"; failed=$((failed + 5))
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
    run_node "mcp approvals (SDK client, elicitation)" spec/mcp/approve_sdk.mjs
    run_node "mcp over Streamable HTTP (SDK client, raw requests)" spec/mcp/http.mjs
    run_node "mcp tenants (two principals over HTTP, tokens and JWTs)" spec/mcp/tenants.mjs
    run_node "mcp --expose-tools failures (SDK client)" spec/mcp/exposed.mjs
  else
    echo "mcp e2e, approvals, HTTP, tenants and exposed tools (SDK client): not run, the SDK is not installed: counted as 5 failures"
    failed=$((failed + 5))
  fi
  run_node "mcp raw protocol" spec/mcp/raw.mjs
  # requests piped in: every one is answered after standard input closes
  run_node "mcp end of input (raw)" spec/mcp/eof.mjs
  # approvals: paused runs and resume_run, elicitation, input_required (raw lines)
  run_node "mcp approvals (raw)" spec/mcp/approve.mjs
  # durable paused runs (--state): kill -9, restart, resume by replay (raw lines)
  run_node "mcp durable runs (raw)" spec/mcp/durable.mjs
  if [ -d spec/mcp/node_modules/@modelcontextprotocol/client ]; then
    run_node "mcp eras (SDK 2.x client, 2026-07-28)" spec/mcp/era.mjs
    run_node "mcp eras over HTTP (SDK 2.x client)" spec/mcp/era_http.mjs
  else
    echo "mcp eras: not run, @modelcontextprotocol/client is not installed: counted as 2 failures"
    failed=$((failed + 2))
  fi
  # Upstream MCP servers as tools.<server>.*: the npm servers and spec/upstream's own
  run_node "upstream MCP servers" spec/upstream/upstream.mjs
  # HTTP (engine/host/http.c): its own servers on 127.0.0.1, a test CA made with openssl
  run_node "http (egress policy, http.fetch, ctx.http)" spec/http/http.mjs
  # Redis and three tidepool mcp --http sharing it (make test-cluster), when redis-server
  # is installed (scripts/deps.sh installs it)
  if command -v redis-server >/dev/null 2>&1; then
    BUILD="$BUILD" sh scripts/cluster-test.sh >"$log" 2>&1
    grep -A3 -E '^(not ok|cluster:)' "$log" | head -n 40
    add_counts "cluster (redis, three servers)"
  else
    echo "cluster (redis, three servers): not run, redis-server is not installed"
  fi
fi

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
  if BUILD=$BUILD timeout 600 sh scripts/valgrind.sh >"$log" 2>&1; then
    passed=$((passed + 1)); echo "valgrind: ok"
  else
    failed=$((failed + 1)); grep -vE '^ok - ' "$log" | tail -n 40; echo "valgrind: failed"
  fi
fi

# Fuzzing: every libFuzzer target (spec/fuzz/fuzz_*.c) for a few seconds from its seeds
# only (spec/fuzz/corpus/<name>/), so that a regression on a kept input, or a finding that
# comes quickly, fails the suite; `make fuzz` runs them for longer. One count per target.
# Needs clang and its libFuzzer runtime (scripts/deps.sh installs them): without them
# every target counts as a failure. Not under `make sanitize`: the targets are ASan+UBSan
# builds already.
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
      sh scripts/fuzz.sh "${FUZZ_TEST_SECONDS:-5}" $fuzz_targets >"$log" 2>&1
    grep -vE '^# [0-9]+ passed' "$log"
    add_counts "fuzz"
  fi
fi

# make install into a temporary root, then build docs/c-api.md's C example against the
# installed header and libraries, as a user of the library would.
# (Only for the plain build: the sanitize build's objects carry other flags.)
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
   grep -q '^Libs: -L${libdir} -ltidepool' "$inst/usr/lib/pkgconfig/tidepool.pc"; then
  passed=$((passed + 1)); echo "install + examples/embed.c, frame_loop.c: ok"
else
  failed=$((failed + 1)); tail -n 20 "$log"; echo "install + examples/embed.c, frame_loop.c: failed"
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
  BUILD="$BUILD" timeout 120 node spec/embed/lighttpd.mjs >"$log" 2>&1
  grep -A3 -E '^not ok' "$log" | head -n 40
  add_counts "lighttpd (mod_magnet)"
fi

# make deb: the package builds and lintian reports no error (packaging/deb.sh stops
# otherwise); dpkg installs it into a temporary root (a dpkg database of its own, where
# its dependencies are not installed: the system's serve); there its tidepool runs a
# script with the package's tools, its Lua module loads into Debian's lua5.4, and its man
# page documents every flag that --help lists. (Only for the plain build.)
debroot=$(mktemp -d)
if [ "$BUILD" != build ]; then
  echo "make deb: skipped in $BUILD"
elif make -s deb BUILD="$BUILD" >"$log" 2>&1 && grep -q '^deb.sh: lintian: no errors' "$log" &&
     deb=$(ls "$BUILD"/tidepool_*.deb) &&
     mkdir -p "$debroot/var/lib/dpkg/info" "$debroot/var/lib/dpkg/updates" &&
     : >"$debroot/var/lib/dpkg/status" &&
     dpkg --root="$debroot" --force-depends --force-not-root --force-script-chrootless \
       --no-triggers --log=/dev/null -i "$deb" >>"$log" 2>&1 &&
     dpkg --root="$debroot" -s tidepool 2>>"$log" | grep -q '^Status: install ok installed'; then
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
  if [ "$deb_ok" = 1 ]; then
    passed=$((passed + 1)); echo "make deb: lintian clean; installed by dpkg into a temporary root, it works: ok"
  else
    failed=$((failed + 1)); tail -n 20 "$log"; echo "make deb: the installed package: failed"
  fi
else
  failed=$((failed + 1)); tail -n 30 "$log"; echo "make deb: failed"
fi
rm -rf "$debroot"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
