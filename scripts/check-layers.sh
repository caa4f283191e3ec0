#!/bin/sh
# The layers of DESIGN.md section 2, checked on the sources and on the objects:
#   front (engine/front) -> host (engine/host) -> core (engine/core, sandbox/) ->
#   lib (engine/lib); engine/include/tidepool.h is the public API, open to every layer.
# (a) includes: no file of engine/ includes a header of a higher layer;
# (b) calls: every undefined symbol of a layer's objects (nm) is defined by an object of
#     the same or a lower layer, or outside the engine (libc, Lua, jansson, pcre2); only
#     host and front objects may reference libuv, luv or lpeg (uv_*, luv_*, luaopen_*).
# (c) the front end's floors (DESIGN.md section 9c): inside engine/front, each file has a
#     floor (front_floor below) and calls (nm: the symbols its object uses that another
#     front object defines) and includes (a header named after a .c file) go to lower
#     floors only, so no two files of engine/front call each other in a circle; the
#     protocol thread (server) and the workers (worker) never call each other at all.
# (d) the core's and the host's floors (docs/measurements.md, "the source layout"): inside
#     engine/core and engine/host each file has a floor (core_floor, host_floor below) and
#     its object calls (nm) only files of a strictly lower floor of its layer, so no two
#     files of a layer call each other in a circle; a file without a floor fails. Where a
#     low file must reach a higher one at run time it is handed a function pointer (as
#     calls.c gets replay.c's through the replay state). Includes are not held to the
#     floors inside these two layers: run.h, sandbox.h, engine.h and the like declare the
#     types every file of their layer shares. No exceptions.
# Each offence is printed with its file and the header or symbol. Prints TAP lines and
# "# N passed, M failed"; exit status 1 when a check failed.
#
#   scripts/check-layers.sh [ENGINE_DIR [OBJ_DIR]]   (default: engine build/obj)
#   scripts/check-layers.sh --self-test              checks that a doctored copy fails
set -u
passed=0
failed=0
ok()     { passed=$((passed + 1)); echo "ok - $1"; }
not_ok() { failed=$((failed + 1)); echo "not ok - $1"; }

rank() {  # the layer's rank: lib 0, core 1, host 2, front 3, public API -1
  case "$1" in
    lib) echo 0 ;; core|sandbox) echo 1 ;; host) echo 2 ;; front) echo 3 ;; *) echo -1 ;;
  esac
}

if [ "${1:-}" = "--self-test" ]; then
  self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  obj=${BUILD:-build}/obj
  cp -r engine "$tmp/engine"
  mkdir -p "$tmp/obj"
  cp "$obj"/*.o "$tmp/obj/"
  # an upward include in the core, and a core object that calls the host and libuv
  printf '#include "engine.h"\n' >>"$tmp/engine/core/normalize.c"
  printf 'int tp__host_open(void *e);\nint uv_now(void *l);\n%s\n' \
    'int tp__doctored(void *e) { return tp__host_open(e) + uv_now(e); }' \
    | ${CC:-cc} -c -x c - -o "$tmp/obj/normalize.o"
  # a leaf of the MCP server (view.c) that calls up into the protocol thread, and an
  # upward include in a leaf (era.c)
  mkdir -p "$tmp/obj/mcp"
  cp "$obj"/mcp/*.o "$tmp/obj/mcp/"
  printf '#include "server.h"\n' >>"$tmp/engine/front/mcp/era.c"
  printf 'void tp__mcp_server_run(void *s);\n%s\n' \
    'void tp__doctored_view(void *s) { tp__mcp_server_run(s); }' \
    | ${CC:-cc} -c -x c - -o "$tmp/obj/mcp/doctored.o"
  ld -r -o "$tmp/obj/mcp/view.o" "$obj/mcp/view.o" "$tmp/obj/mcp/doctored.o"
  rm -f "$tmp/obj/mcp/doctored.o"
  # a low file of the core (verdict.c) that calls up into run.c, and a low file of the
  # host (base.c) that calls back into host.c, a file above it
  printf 'void *tp__run_new(void *e, void *sb, const char *s, unsigned long n);\n%s\n' \
    'void *tp__doctored_verdict(void *e) { return tp__run_new(e, 0, "", 0); }' \
    | ${CC:-cc} -c -x c - -o "$tmp/doctored_core.o"
  ld -r -o "$tmp/obj/verdict.o" "$obj/verdict.o" "$tmp/doctored_core.o"
  printf 'void tp__host_close(void *e);\n%s\n' \
    'void tp__doctored_base(void *e) { tp__host_close(e); }' \
    | ${CC:-cc} -c -x c - -o "$tmp/doctored_host.o"
  ld -r -o "$tmp/obj/base.o" "$obj/base.o" "$tmp/doctored_host.o"
  # the circle host.c and the providers once made: a provider that calls back up into
  # host.c (which registers its tools), and one provider that calls the other sideways
  printf 'int tp__host_open(void *e);\n%s\n' \
    'int tp__doctored_upstream(void *e) { return tp__host_open(e); }' \
    | ${CC:-cc} -c -x c - -o "$tmp/doctored_up.o"
  ld -r -o "$tmp/obj/provider_upstream.o" "$obj/provider_upstream.o" "$tmp/doctored_up.o"
  printf 'int tp__upstream_set_alias(void *e, const char *n, const char *a);\n%s\n' \
    'int tp__doctored_lua(void *e) { return tp__upstream_set_alias(e, "a", "b"); }' \
    | ${CC:-cc} -c -x c - -o "$tmp/doctored_lua.o"
  ld -r -o "$tmp/obj/provider_lua.o" "$obj/provider_lua.o" "$tmp/doctored_lua.o"
  out=$(sh "$self" "$tmp/engine" "$tmp/obj" 2>&1)
  rc=$?
  if [ $rc -ne 0 ]; then ok "self-test: a doctored copy fails the check"
  else not_ok "self-test: a doctored copy fails the check (exit $rc)"; fi
  for want in 'engine/core/normalize.c includes "engine.h" of layer host' \
              'normalize.o (core) uses tp__host_open, defined in host.o (host)' \
              'normalize.o (core) uses uv_now (libuv' \
              'front: mcp/view.o (floor 0) calls mcp/server.o (floor 5): tp__mcp_server_run' \
              'front: engine/front/mcp/era.c (floor 0) includes "server.h" (floor 5)' \
              'core: verdict.o (floor 1) calls run.o (floor 7): tp__run_new' \
              'host: base.o (floor 0) calls host.o (floor 11): tp__host_close' \
              'host: provider_upstream.o (floor 10) calls host.o (floor 11): tp__host_open' \
              'host: provider_lua.o (floor 10) calls provider_upstream.o (floor 10): tp__upstream_set_alias'; do
    if printf '%s\n' "$out" | grep -qF "$want"; then ok "self-test: reports: $want"
    else not_ok "self-test: reports: $want"; printf '%s\n' "$out" | sed 's/^/#   /'; fi
  done
  echo "# $passed passed, $failed failed"
  [ $failed -eq 0 ]
  exit $?
fi

src=${1:-engine}
obj=${2:-${BUILD:-build}/obj}

# ---- (a) includes --------------------------------------------------------------------
where() {  # the layer holding header $1, or "" (system, Lua, jansson) or "api"
  for l in lib core host front; do
    [ -f "$src/$l/$1" ] && { echo "$l"; return; }
  done
  [ -f "$src/include/$1" ] && { echo api; return; }
  [ -f "sandbox/$1" ] && { echo sandbox; return; }
  echo ""
}
bad=0
for l in lib core host front; do
  for f in "$src/$l"/*.c "$src/$l"/*.h; do
    [ -f "$f" ] || continue
    for h in $(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f"); do
      hl=$(where "$h")
      [ -n "$hl" ] || continue
      if [ "$(rank "$hl")" -gt "$(rank "$l")" ]; then
        echo "#   engine/$l/$(basename "$f") includes \"$h\" of layer $hl"
        bad=$((bad + 1))
      fi
    done
  done
done
if [ $bad -eq 0 ]; then ok "includes: no file includes a header of a higher layer"
else not_ok "includes: $bad upward includes"; fi

# ---- (b) calls -------------------------------------------------------------------------
layer_of() {  # the layer of object $1 (its source's folder); embedded.o is the host's
  b=$(basename "$1" .o)
  [ "$b" = embedded ] && { echo host; return; }
  for l in lib core host front; do
    [ -f "$src/$l/$b.c" ] && { echo "$l"; return; }
  done
  echo ""
}
syms=$(mktemp)
trap 'rm -f "$syms"' EXIT
nobj=0
for o in "$obj"/*.o; do
  l=$(layer_of "$o")
  [ -n "$l" ] || continue
  nobj=$((nobj + 1))
  b=$(basename "$o")
  nm -P -g --defined-only "$o" 2>/dev/null | awk -v o="$b" -v l="$l" '{ print "D", $1, o, l }'
  nm -P -u "$o" 2>/dev/null | awk -v o="$b" -v l="$l" '{ print "U", $1, o, l }'
done >"$syms"
bad=$(awk '
  function rank(l) { return l == "lib" ? 0 : l == "core" ? 1 : l == "host" ? 2 : 3 }
  $1 == "D" && !($2 in def) { def[$2] = $3; dlayer[$2] = $4; next }
  $1 == "U" { n++; us[n] = $2; uo[n] = $3; ul[n] = $4 }
  END {
    bad = 0
    for (i = 1; i <= n; i++) {
      s = us[i]
      if (s in def) {
        if (rank(dlayer[s]) > rank(ul[i])) {
          printf "#   %s (%s) uses %s, defined in %s (%s)\n", uo[i], ul[i], s, def[s], dlayer[s]
          bad++
        }
      }
      else if (rank(ul[i]) < 2 && (s ~ /^uv_/ || s ~ /^luv_/ || s == "luaopen_luv" || s == "luaopen_lpeg")) {
        printf "#   %s (%s) uses %s (libuv, luv or lpeg: host and front only)\n", uo[i], ul[i], s
        bad++
      }
    }
    print bad
  }' "$syms")
printf '%s\n' "$bad" | sed '$d'
bad=$(printf '%s\n' "$bad" | tail -n 1)
if [ $nobj -eq 0 ]; then not_ok "calls: no objects of engine/ in $obj (build first)"
elif [ $bad -eq 0 ]; then ok "calls: $nobj objects call only their own layer or lower ones"
else not_ok "calls: $bad upward or forbidden references"; fi


# ---- (c) engine/front's floors -------------------------------------------------------------
front_floor() {  # the floor of front file $1 (its name without .c/.o), or "" when it has none
  case "$1" in
    cli|luamod) echo 10 ;;                  # the commands; the Lua module
    mcp/main) echo 9 ;;                    # options -> config -> server + one transport
    mcp/stdio|mcp/http) echo 8 ;;          # the transports (fill transport.h)
    mcp/ui_http) echo 7 ;;                 # the operator page (--ui), under http.c
    mcp/auth) echo 6 ;;                    # the HTTP transport's authenticator
    mcp/server) echo 5 ;;                  # the protocol thread
    mcp/session) echo 4 ;;                 # its table of sessions
    mcp/reply) echo 3 ;;                   # what the protocol thread writes
    mcp/worker) echo 2 ;;                  # a worker thread
    mcp/pause|mcp/ui) echo 1 ;;           # a paused run; what the operator page knows
    mcp/mail|mcp/view|mcp/approve|mcp/era|options|caller_pipe|audit_show) echo 0 ;;  # leaves
    *) echo "" ;;
  esac
}
fsyms=$(mktemp)
trap 'rm -f "$syms" "$fsyms"' EXIT
nfront=0
nofloor=0
for c in "$src"/front/*.c "$src"/front/mcp/*.c; do
  [ -f "$c" ] || continue
  case "$c" in */mcp/*) o="$obj/mcp/$(basename "$c" .c).o" ;; *) o="$obj/$(basename "$c" .c).o" ;; esac
  [ -f "$o" ] || continue
  case "$o" in */mcp/*) f=mcp/$(basename "$o" .o) ;; *) f=$(basename "$o" .o) ;; esac
  fl=$(front_floor "$f")
  if [ -z "$fl" ]; then
    echo "#   front: $f.o has no floor: give it one in scripts/check-layers.sh (front_floor)" >&2
    nofloor=$((nofloor + 1)); continue
  fi
  nfront=$((nfront + 1))
  nm -P -g --defined-only "$o" 2>/dev/null | awk -v f="$f" -v l="$fl" '{ print "D", $1, f, l }'
  nm -P -u "$o" 2>/dev/null | awk -v f="$f" -v l="$fl" '{ print "U", $1, f, l }'
done >"$fsyms"
bad=$(awk '
  $1 == "D" { def[$2] = $3; dfl[$2] = $4; next }
  $1 == "U" { n++; us[n] = $2; uf[n] = $3; ul[n] = $4 }
  END {
    bad = 0
    for (i = 1; i <= n; i++) {
      s = us[i]
      if (!(s in def) || def[s] == uf[i]) continue
      apart = (uf[i] == "mcp/server" && def[s] == "mcp/worker") || \
              (uf[i] == "mcp/worker" && def[s] == "mcp/server")
      if (dfl[s] + 0 >= ul[i] + 0 || apart) {
        printf "#   front: %s.o (floor %d) calls %s.o (floor %d): %s%s\n", uf[i], ul[i], def[s], \
               dfl[s], s, apart ? " (server and worker talk by mail only)" : ""
        bad++
      }
    }
    print bad
  }' "$fsyms")
printf '%s\n' "$bad" | sed '$d'
bad=$(printf '%s\n' "$bad" | tail -n 1)
bad=$((bad + nofloor))
for f in "$src"/front/*.c "$src"/front/*.h "$src"/front/mcp/*.c "$src"/front/mcp/*.h; do
  [ -f "$f" ] || continue
  rel=${f#"$src"/front/}
  me=$(front_floor "${rel%.[ch]}")
  [ -n "$me" ] || continue
  dir=$(dirname "$rel"); [ "$dir" = . ] && dir="" || dir="$dir/"
  for h in $(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f"); do
    case "$h" in */*) hf=${h%.h} ;; *) hf=$dir${h%.h}; [ -f "$src/front/$dir$h" ] || hf=${h%.h} ;; esac
    [ "$hf" = mcp/mcp ] && hf=mcp/main     # mcp.h is main.c's
    [ "$hf" = "${rel%.[ch]}" ] && continue
    hl=$(front_floor "$hf")
    [ -n "$hl" ] || continue
    if [ "$hl" -ge "$me" ] || { [ "${rel%.[ch]}" = mcp/server ] && [ "$hf" = mcp/worker ]; } ||
       { [ "${rel%.[ch]}" = mcp/worker ] && [ "$hf" = mcp/server ]; }; then
      echo "#   front: engine/front/$rel (floor $me) includes \"$h\" (floor $hl)"
      bad=$((bad + 1))
    fi
  done
done
if [ $nfront -eq 0 ]; then not_ok "front floors: no objects of engine/front in $obj (build first)"
elif [ $bad -eq 0 ]; then ok "front floors: $nfront files of engine/front call and include lower floors only"
else not_ok "front floors: $bad calls or includes that go up, or files without a floor"; fi

# ---- (d) engine/core's and engine/host's floors ---------------------------------------
core_floor() {  # the floor of core file $1 (its name without .c/.o), or "" when it has none
  case "$1" in
    session) echo 8 ;;                     # sessions: runs over one kept sandbox
    run) echo 7 ;;                         # a run: start, step, finish, the envelope
    precheck) echo 6 ;;                    # the pre-run check of a script
    sandbox) echo 5 ;;                     # building a sandbox state (its allowlist)
    namespace) echo 4 ;;                   # the tools table and parallel, in the sandbox
    replay) echo 3 ;;                      # durable runs: the call log, seeds, clocks
    calls|warnings) echo 2 ;;              # a run's tool calls; the envelope's warnings
    verdict) echo 1 ;;                     # verdicts, the hook, the host budget
    codec|codes|limits|normalize|strerror|timeline|watchdog) echo 0 ;;  # leaves
    *) echo "" ;;
  esac
}
host_floor() {  # the floor of host file $1, or "" when it has none
  case "$1" in
    engine) echo 15 ;;                     # the public tp_engine_* API
    admit) echo 14 ;;                      # a new call: lookup, policy, schema, dispatch
    provider_caller) echo 13 ;;            # caller tools
    host_load) echo 12 ;;                  # plugin files, upstream MCP servers (into H)
    host) echo 11 ;;                       # H opened and closed, E, the annotations
    provider_lua|provider_upstream) echo 10 ;;  # Lua plugin and upstream tools
    host_handler) echo 9 ;;                # a Lua handler's call (both providers')
    host_call) echo 8 ;;                   # a call's box, E's box functions, timed resume
    registry) echo 7 ;;                    # the tools: lookup, search, suggestions
    callers|config|driver) echo 6 ;;       # who may call a tool; the config; the driver
    kvstore|policy|runstore|session_claim) echo 5 ;;  # kv tools; the policy; kept runs
    store_conn) echo 4 ;;                  # an engine's connection to its store
    store_timed) echo 3 ;;                 # store operations timed into the metrics
    http|journal|metrics|store_open) echo 2 ;;  # egress; the journal, /metrics; opener
    host_state|trace|store_memory|store_redis|store_sqlite) echo 1 ;;  # H's basics; spans
    base|fs|handles|proc|provider_c|store) echo 0 ;;  # leaves: errors, log, accessors
    *) echo "" ;;
  esac
}
layer_floors() {  # $1: core or host; $2: its floor function
  lsyms=$(mktemp)
  n=0
  nofl=0
  for c in "$src/$1"/*.c; do
    [ -f "$c" ] || continue
    f=$(basename "$c" .c)
    o="$obj/$f.o"
    [ -f "$o" ] || continue
    fl=$($2 "$f")
    if [ -z "$fl" ]; then
      echo "#   $1: $f.o has no floor: give it one in scripts/check-layers.sh ($2)"
      nofl=$((nofl + 1)); continue
    fi
    n=$((n + 1))
    nm -P -g --defined-only "$o" 2>/dev/null | awk -v f="$f" -v l="$fl" '{ print "D", $1, f, l }'
    nm -P -u "$o" 2>/dev/null | awk -v f="$f" -v l="$fl" '{ print "U", $1, f, l }'
  done >"$lsyms.in"
  grep '^#' "$lsyms.in" || true
  bad=$(grep -v '^#' "$lsyms.in" | awk -v layer="$1" '
    $1 == "D" { def[$2] = $3; dfl[$2] = $4; next }
    $1 == "U" { n++; us[n] = $2; uf[n] = $3; ul[n] = $4 }
    END {
      bad = 0
      for (i = 1; i <= n; i++) {
        s = us[i]
        if (!(s in def) || def[s] == uf[i]) continue
        if (dfl[s] + 0 < ul[i] + 0) continue
        printf "#   %s: %s.o (floor %d) calls %s.o (floor %d): %s\n", layer, uf[i], ul[i], \
               def[s], dfl[s], s
        bad++
      }
      print bad
    }')
  rm -f "$lsyms" "$lsyms.in"
  printf '%s\n' "$bad" | sed '$d'
  nbad=$(($(printf '%s\n' "$bad" | tail -n 1) + nofl))
  if [ $n -eq 0 ]; then not_ok "$1 floors: no objects of engine/$1 in $obj (build first)"
  elif [ $nbad -eq 0 ]; then ok "$1 floors: $n files of engine/$1 call lower floors only"
  else not_ok "$1 floors: $nbad calls that go up or sideways, or files without a floor"; fi
}
layer_floors core core_floor
layer_floors host host_floor

echo "# $passed passed, $failed failed"
[ $failed -eq 0 ]
