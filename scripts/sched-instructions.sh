#!/bin/sh
# Instructions a run costs in bench_sched's concurrent phase (concurrent_10k_ms: start,
# one async C tool call, the envelope, the done callback, destroy), counted by callgrind
# (independent of the machine's load) over bench/sched_instructions.c's second round of
# N runs, divided by N. Address randomization is off (setarch -R) so tables hash alike.
#   scripts/sched-instructions.sh [N]     (N: 10000; BUILD: build)
# Prints "sched_run_instructions: X".
BUILD=${BUILD:-build}
N=${1:-10000}
bin=$BUILD/bench/sched_instructions
make -s "$bin" >/dev/null || exit 1
norand=""
setarch "$(uname -m)" -R true 2>/dev/null && norand="setarch $(uname -m) -R"
n=$($norand valgrind --tool=callgrind --toggle-collect=counted --callgrind-out-file=/dev/null \
  "$bin" "$N" 2>&1 | sed -n 's/.*Collected : \([0-9]*\).*/\1/p')
[ -n "$n" ] || { echo "sched-instructions: callgrind failed" >&2; exit 1; }
echo "sched_run_instructions: $(( n / N ))"
