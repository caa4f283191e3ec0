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
# Prints "c_call_instructions: X" and "lua_call_instructions: Y".
BUILD=${BUILD:-build}
N=${1:-10000}
bin=$BUILD/bench/call_instructions
make -s "$bin" >/dev/null || exit 1
norand=""
setarch "$(uname -m)" -R true 2>/dev/null && norand="setarch $(uname -m) -R"
count() {
  $norand valgrind --tool=callgrind --toggle-collect=ns_call --callgrind-out-file=/dev/null \
    "$bin" "$1" "$N" 2>&1 | sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}
c=$(count c) lua=$(count lua)
[ -n "$c" ] && [ -n "$lua" ] || { echo "call-instructions: callgrind failed" >&2; exit 1; }
echo "c_call_instructions: $(( c / N ))"
echo "lua_call_instructions: $(( lua / N ))"
