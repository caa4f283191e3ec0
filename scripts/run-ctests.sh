#!/bin/sh
# Runs the C tests (build/tests/test_*), each file in its own process under a timeout,
# and prints one line per file, then "# N passed, M failed" (read by run-tests.sh).
#   sh scripts/run-ctests.sh                       every file
#   sh scripts/run-ctests.sh test_api:cancel       the tests of test_api whose name
#                                                  contains "cancel"
#   sh scripts/run-ctests.sh test_api:cancel,session test_host
# (make test-c T='test_api:cancel test_host' does the same after building them.)
# A file that crashes, is killed, or outlives TP_TEST_TIMEOUT seconds (default 600) is
# named with the test it was in, counted as a failure, and the others still run; so is
# one that exits non-zero with all its tests passed (LeakSanitizer at exit, under
# `make sanitize`). Exit status is non-zero when anything failed.
BUILD=${BUILD:-build}
TIMEOUT=${TP_TEST_TIMEOUT:-600}
# test_alloc_fail fails a fixed sample of the allocation points of its scenarios (with its
# own leak check per point), the same number on any machine; TP_ALLOC_FAIL_FULL=1 fails
# every one (make test-alloc-full, which make sanitize runs too).
passed=0
failed=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT

run_file() {  # $1 the test binary, then its name filters
  t=$1; shift
  name=$(basename "$t")
  t0=$(date +%s)
  timeout -k 10 "$TIMEOUT" "$t" "$@" >"$log" 2>&1
  rc=$?
  secs=$(($(date +%s) - t0))
  grep -E '^(not ok|#   )' "$log" | head -n 40
  line=$(grep -E '^# [0-9]+ passed, [0-9]+ failed' "$log" | tail -n 1)
  if [ -n "$line" ]; then
    p=$(echo "$line" | sed -E 's/^# ([0-9]+) passed.*/\1/')
    f=$(echo "$line" | sed -E 's/.* ([0-9]+) failed.*/\1/')
  else  # it died: what it printed before counts, and the death is a failure
    p=$(grep -cE '^ok - ' "$log")
    f=$(grep -cE '^not ok - ' "$log")
    grep -qE '^not ok - .* \(signal [0-9]+' "$log" || f=$((f + 1))
    case $rc in
      124) echo "$name: timed out after ${TIMEOUT}s" ;;
      12[5-9]|1[3-9][0-9]|2[0-9][0-9])
        echo "$name: killed by signal $((rc > 128 ? rc - 128 : rc))" ;;
      *) echo "$name: exited with status $rc before its summary line (crashed?)" ;;
    esac
    tail -n 30 "$log"
  fi
  if [ -n "$line" ] && [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
    echo "$name: all its tests passed but it exited with status $rc:"
    tail -n 30 "$log"; f=1
  fi
  passed=$((passed + p))
  failed=$((failed + f))
  echo "$name: $p passed, $f failed ($secs s)"
}

if [ $# -eq 0 ]; then
  for t in "$BUILD"/tests/test_*; do
    [ -x "$t" ] && run_file "$t"
  done
else
  for spec in "$@"; do
    file=${spec%%:*}
    case $file in test_*) ;; *) file="test_$file" ;; esac
    t="$BUILD/tests/$file"
    if [ ! -x "$t" ]; then echo "$file: no such C test ($t is not built)"; failed=$((failed + 1)); continue; fi
    case $spec in
      *:*) # shellcheck disable=SC2046
           run_file "$t" $(echo "${spec#*:}" | tr ',' ' ') ;;
      *)   run_file "$t" ;;
    esac
  done
fi
echo "# $passed passed, $failed failed"
[ "$failed" -eq 0 ]
