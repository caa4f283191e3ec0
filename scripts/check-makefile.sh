#!/bin/sh
# The Makefile reads nothing of the installed system while it is parsed, so that the
# first `make run` on a fresh machine works: what it needs of the system (pkg-config's
# flags, Debian's archives) comes from $(BUILD)/config.mk, which a rule writes after
# scripts/deps.sh has installed the packages (scripts/config.sh). Checks:
#   - the Makefile never calls make's shell function (a recipe uses the shell itself);
#   - goals that build nothing (print-version, clean -n) neither install packages nor
#     write the configuration.
# Prints TAP lines and "# N passed, M failed" (read by scripts/run-tests.sh).
MAKEFILE=${1:-Makefile}
passed=0
failed=0
ok() { passed=$((passed + 1)); echo "ok - $1"; }
bad() { failed=$((failed + 1)); echo "not ok - $1"; shift; for l in "$@"; do echo "#   $l"; done; }

hits=$(grep -n '\$(shell' "$MAKEFILE")
if [ -z "$hits" ]; then ok "the Makefile calls no \$(shell ...) at parse time"
else bad "the Makefile calls \$(shell ...): compute the value in scripts/config.sh"; echo "$hits" | sed "s/^/#   /"; fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
dir=$(dirname "$MAKEFILE")
v=$(env -u MAKEFLAGS -u MFLAGS make -s --no-print-directory -C "$dir" BUILD="$tmp/b" print-version 2>&1)
if [ -n "$v" ] && [ ! -e "$tmp/b" ]; then ok "make print-version ($v) reads and installs nothing"
else bad "make print-version wrote $tmp/b (deps or config): $v" "$(ls -A "$tmp/b" 2>/dev/null)"; fi
env -u MAKEFLAGS -u MFLAGS make -n -s --no-print-directory -C "$dir" BUILD="$tmp/c" clean >/dev/null 2>&1
if [ ! -e "$tmp/c" ]; then ok "make -n clean reads and installs nothing"
else bad "make -n clean wrote $tmp/c" "$(ls -A "$tmp/c")"; fi

echo "# $passed passed, $failed failed"
[ "$failed" -eq 0 ]
