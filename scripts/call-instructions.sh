#!/bin/sh
# Instructions a tool call costs, counted by callgrind (independent of the machine's
# load): a run of N calls of bench_tools' C tool and of its Lua plugin tool, minus the
# same loop calling an empty function, divided by N.
#   scripts/call-instructions.sh [N]     (N: 2000; BUILD: build)
# Prints "c_call_instructions: X" and "lua_call_instructions: Y".
BUILD=${BUILD:-build}
N=${1:-2000}
bin=$BUILD/bench/call_instructions
make -s "$bin" >/dev/null || exit 1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
count() {
  valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.$1" "$bin" "$1" "$N" 2>&1 |
    sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}
none=$(count none) c=$(count c) lua=$(count lua)
[ -n "$none" ] && [ -n "$c" ] && [ -n "$lua" ] ||
  { echo "call-instructions: callgrind failed" >&2; exit 1; }
echo "c_call_instructions: $(( (c - none) / N ))"
echo "lua_call_instructions: $(( (lua - none) / N ))"
