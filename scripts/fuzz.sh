#!/bin/sh
# Runs the libFuzzer targets built by `make fuzz-build`, one after the other.
#   sh scripts/fuzz.sh SECONDS [fuzz_name...]     (default: every $FUZZ_BUILD/fuzz_*)
# Environment: FUZZ_BUILD (build/fuzz), FUZZ_ARGS (more libFuzzer flags), FUZZ_FRESH=1
# (start from the seeds only and keep nothing: what `make test` does).
# Each target starts from its seeds, spec/fuzz/corpus/<name>/ (read only), and from what
# earlier runs found, $FUZZ_BUILD/corpus/<name>/, where new inputs go. A crash, sanitizer
# report, leak, timeout (-timeout), oversized allocation (-malloc_limit_mb) or failed
# invariant saves the input in $FUZZ_BUILD/artifacts/<name>/ and fails the target; the
# log is $FUZZ_BUILD/logs/<name>.log. Prints a line per target, then "# N passed, M failed".
# Exit status is non-zero when a target failed.
SECONDS_EACH=${1:-60}
[ $# -gt 0 ] && shift
FUZZ_BUILD=${FUZZ_BUILD:-build/fuzz}
FUZZ_ARGS=${FUZZ_ARGS:-}
targets="$*"
if [ -z "$targets" ]; then
  for f in "$FUZZ_BUILD"/fuzz_*; do
    [ -x "$f" ] && targets="$targets $(basename "$f")"
  done
fi
passed=0
failed=0
mkdir -p "$FUZZ_BUILD/logs"
for t in $targets; do
  name=${t#fuzz_}
  bin="$FUZZ_BUILD/$t"
  log="$FUZZ_BUILD/logs/$name.log"
  if [ ! -x "$bin" ]; then
    echo "$t: not built ($bin)"; failed=$((failed + 1)); continue
  fi
  if [ "${FUZZ_FRESH:-0}" = 1 ]; then
    corpus="$FUZZ_BUILD/corpus-fresh/$name"; rm -rf "$corpus"
  else
    corpus="$FUZZ_BUILD/corpus/$name"
  fi
  arts="$FUZZ_BUILD/artifacts/$name"
  mkdir -p "$corpus" "$arts"
  seeds=
  [ -d "spec/fuzz/corpus/$name" ] && seeds="spec/fuzz/corpus/$name"
  dict=
  [ -f "spec/fuzz/$name.dict" ] && dict="-dict=spec/fuzz/$name.dict"
  # Per input: 10 s at most; one host allocation of 64 MiB or more is a finding (no run
  # here has a limit that allows one); the process stays under 2 GiB.
  # shellcheck disable=SC2086
  "$bin" -max_total_time="$SECONDS_EACH" -timeout=10 -malloc_limit_mb=64 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$arts/" $dict $FUZZ_ARGS "$corpus" $seeds \
    >"$log" 2>&1
  rc=$?
  runs=$(grep -E '^Done [0-9]+ runs' "$log" | tail -n 1 | sed -E 's/^Done ([0-9]+) runs in ([0-9]+).*/\1 \2/')
  if [ $rc -eq 0 ] && [ -n "$runs" ]; then
    n=${runs% *}; s=${runs#* }
    [ "$s" -gt 0 ] || s=1
    echo "$t: ok, $n runs in $s s ($((n / s))/s)"
    passed=$((passed + 1))
  else
    echo "$t: FAILED (exit $rc), log $log, input in $arts/"
    grep -E 'ERROR|invariant failed|SUMMARY|runtime error|Test unit written' "$log" | head -n 8
    failed=$((failed + 1))
  fi
  [ "${FUZZ_FRESH:-0}" = 1 ] && rm -rf "$corpus"
done
echo "# $passed passed, $failed failed"
[ "$failed" -eq 0 ]
