#!/bin/sh
# The Python SDK's tests (sdk/python/tests) with Debian's python3-pytest: a venv in
# $BUILD/sdk-python/venv that sees the system's packages (pytest, pip), the SDK installed
# into it by `pip install --no-index ./sdk/python` (no network: the build backend is the
# package's own), then pytest against $BUILD/tidepool. Ends with "# N passed, M failed".
set -u
BUILD=${BUILD:-build}
root=$(cd "$(dirname "$0")/../.." && pwd)
venv="$root/$BUILD/sdk-python/venv"
py=/usr/bin/python3
[ -x "$py" ] || py=python3
if ! "$py" -c 'import pytest' 2>/dev/null; then
  echo "not ok 1 - python3-pytest is not installed (scripts/deps.sh)"; echo "# 0 passed, 1 failed"; exit 1
fi
rm -rf "$venv"
# --without-pip: the venv's python runs Debian's pip from the system's packages, which
# installs into the venv (seconds, where ensurepip takes half a minute)
if ! "$py" -m venv --without-pip --system-site-packages "$venv" >/dev/null 2>&1 ||
   ! "$venv/bin/python" -m pip install -q --no-index --disable-pip-version-check \
       "$root/sdk/python" 2>&1; then
  echo "not ok 1 - pip install --no-index ./sdk/python into a venv failed"; echo "# 0 passed, 1 failed"; exit 1
fi
# the installed package, not the source tree, is what the tests import
out=$(cd "$root/$BUILD" && TIDEPOOL_BIN="$root/$BUILD/tidepool" BUILD="$BUILD" \
  "$venv/bin/python" -m pytest -q -p no:cacheprovider --tb=native -rA "$root/sdk/python/tests" 2>&1)
rc=$?
echo "$out" | grep -E '^(PASSED|FAILED|ERROR) ' | awk '{ s = ($1 == "PASSED") ? "ok" : "not ok"; $1 = ""; print s " -" $0 }'
echo "$out" | grep -vE '^(PASSED|FAILED|ERROR) ' | grep -E 'Error|error|assert' | head -n 40 | sed 's/^/#   /'
p=$(echo "$out" | grep -cE '^PASSED ')
f=$(echo "$out" | grep -cE '^(FAILED|ERROR) ')
if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; echo "$out" | tail -n 20; fi
echo "# $p passed, $f failed"
[ "$f" -eq 0 ]
