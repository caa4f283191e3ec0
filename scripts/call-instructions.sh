#!/bin/sh
# Instructions a tool call costs, counted by callgrind (independent of the machine's
# load): the instructions inside the sandbox's tool-call function (namespace.c's ns_call:
# the arguments' text, policy, schema, dispatch, the handler, the result back into the
# script, and any collector step the call's allocations trigger) over a run of N calls of
# bench_tools' C tool and of its Lua plugin tool, divided by N. Counting only inside the
# call leaves out the script's loop and the timers of the run around it, which made the
# older "run minus an empty loop" count move by a few hundred from run to run; address
# randomization is off (setarch -R) so the tables hash alike on each run.
#   scripts/call-instructions.sh [N]     (N: 10000; BUILD: build)
# Prints "c_call_instructions: X" and "lua_call_instructions: Y", and each again less the
# collector's steps that fell inside the calls ("..._net"): where the collector's debt
# comes due (inside a call or in the script's loop) moves with any change to the heap, by
# up to 1k instructions a call, so two builds are compared by the net figures.
BUILD=${BUILD:-build}
N=${1:-10000}
bin=$BUILD/bench/call_instructions
make -s "$bin" >/dev/null || exit 1
norand=""
setarch "$(uname -m)" -R true 2>/dev/null && norand="setarch $(uname -m) -R"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
count() {
  $norand valgrind --tool=callgrind --toggle-collect=ns_call --callgrind-out-file="$out" \
    "$bin" "$1" "$N" >/dev/null 2>&1 || return 1
  total=$(callgrind_annotate "$out" 2>/dev/null | sed -n 's/^ *\([0-9,]*\) .*PROGRAM TOTALS.*/\1/p' | tr -d ,)
  gc=$(callgrind_annotate --inclusive=yes "$out" 2>/dev/null |
       awk '/lgc.c:luaC_step \[/ { gsub(",", "", $1); s += $1 } END { print s + 0 }')
  [ -n "$total" ] || return 1
  echo "$total $gc"
}
c=$(count c) && lua=$(count lua) || { echo "call-instructions: callgrind failed" >&2; exit 1; }
set -- $c $lua
echo "c_call_instructions: $(( $1 / N ))"
echo "lua_call_instructions: $(( $3 / N ))"
echo "c_call_instructions_net: $(( ($1 - $2) / N ))"
echo "lua_call_instructions_net: $(( ($3 - $4) / N ))"
