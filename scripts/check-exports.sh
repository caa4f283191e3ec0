#!/bin/sh
# What the public library and the Lua module export (run by scripts/run-tests.sh).
# Prints one "ok - ..." or "not ok - ..." line per check and "# N passed, M failed".
#   libtidepool.so and libtidepool.a: exactly the TP_EXTERN functions of tidepool.h and
#   tidepool_server.h
#   build/lua/tidepool.so: luaopen_tidepool, and nothing of the engine left for the host
BUILD=${BUILD:-build}
hdr="engine/include/tidepool.h engine/include/tidepool_server.h"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0
check() {  # $1 name; the check's status is $?
  if [ "$2" -eq 0 ]; then echo "ok - $1"; passed=$((passed + 1))
  else echo "not ok - $1"; failed=$((failed + 1)); fi
}
same() {  # $1 name, $2 expected file, $3 actual file
  if diff "$2" "$3" >"$tmp/diff"; then check "$1" 0
  else check "$1" 1; sed 's/^/#   /' "$tmp/diff" | head -n 20; fi
}

cat $hdr | grep -E '^TP_EXTERN ' | grep -oE 'tp_[a-z0-9_]+\(' | tr -d '(' | sort -u >"$tmp/api"
grep -nE '^[a-z][a-z0-9_ ]*[ *]tp_[a-z0-9_]+\(' $hdr >"$tmp/unmarked"
check "every function tidepool.h and tidepool_server.h declare is marked TP_EXTERN" "$(wc -l <"$tmp/unmarked")"
sed 's/^/#   /' "$tmp/unmarked"
check "tidepool.h declares the public API ($(wc -l <"$tmp/api") functions)" \
  "$([ "$(wc -l <"$tmp/api")" -gt 20 ]; echo $?)"

nm -D --defined-only "$BUILD/libtidepool.so" | awk '{ print $3 }' | sort -u >"$tmp/so"
same "libtidepool.so exports exactly the TP_EXTERN functions, none of Lua, luv or lpeg" \
  "$tmp/api" "$tmp/so"
nm -g --defined-only "$BUILD/libtidepool.a" | awk 'NF == 3 { print $3 }' | sort -u >"$tmp/a"
same "libtidepool.a has exactly the TP_EXTERN functions as global symbols" "$tmp/api" "$tmp/a"
nm -u "$BUILD/libtidepool.a" | awk '{ print $2 }' | grep -E '^(lua|luaL|luaopen|luv)_' >"$tmp/au"
check "libtidepool.a needs no Lua symbol from the program" "$(wc -l <"$tmp/au")"

echo luaopen_tidepool >"$tmp/mod_expected"
nm -D --defined-only "$BUILD/lua/tidepool.so" | awk '{ print $3 }' | sort -u >"$tmp/mod"
same "the Lua module exports luaopen_tidepool only" "$tmp/mod_expected" "$tmp/mod"
nm -D --undefined-only "$BUILD/lua/tidepool.so" | awk '{ print $2 }' |
  grep -E '^(tp_|luv_|luaopen_)' >"$tmp/modu"
check "the Lua module takes nothing but the Lua C API from its host" "$(wc -l <"$tmp/modu")"
sed 's/^/#   /' "$tmp/modu"

echo "# $passed passed, $failed failed"
[ "$failed" -eq 0 ]
