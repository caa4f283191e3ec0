#!/bin/sh
# Install the Debian packages tidepool needs, only those that are missing.
# Runs apt-get as root, or through sudo; prints nothing when all are present.
# libcurl4-openssl-dev: HTTP for scripts and plugins (engine/host/http.c, on the engine's
# libuv loop; its headers at build time, libcurl.so.4 opened on first use); libseccomp-dev: the system call filter of proc.run's children.
# libsqlite3-dev: the durable state store (--state DIR); libhiredis-dev and redis-server:
# the shared one (--state redis://...; tests start their own redis-server on 127.0.0.1);
# libmicrohttpd-dev: the HTTP server of `tidepool mcp --http`, driven by our libuv loop;
# libssl-dev (libcrypto): JWT signatures, HMAC of approvals, sealed requestState;
# openssl: the command, which makes test keys and certificates.
# prometheus: its promtool checks the text of tidepool's metrics (spec/c/test_metrics.c).
# sqlite3: the command, with which spec/seen_state_spec.lua writes records into a state
# database that tidepool itself never would (too long, a NUL byte).
# chromium: the operator page's tests run in it, headless (spec/ui/operator.mjs, through
# puppeteer-core from npm).
# liblua5.4-dev and lua5.4 are Debian's own Lua 5.4.4, never used by tidepool itself: the
# embedding tests link it ahead of libtidepool and load the Lua module into its
# interpreter, to prove tidepool's sandboxes still run on its private, patched 5.4.7.
# FUZZ_PKGS build the fuzz targets (make fuzz, and briefly make test): clang and
# libclang-rt-dev, its sanitizer and libFuzzer runtimes (libclang_rt.fuzzer). They are
# wanted, not required: when they cannot be installed this says so and succeeds, and
# make test counts the fuzz targets as failures.
# lighttpd and lighttpd-modules-lua (its mod_magnet, on Debian's liblua5.4) and curl run
# the module inside a real Lua 5.4 server (spec/embed/lighttpd_test.sh).
# python3, python3-pip and python3-pytest: the Python SDK's tests (spec/sdk/python.sh
# pip-installs sdk/python into a venv, offline, and runs pytest there). Their install
# does not start a server where no init system runs (a container); on a machine with one,
# Debian enables and starts lighttpd on port 80, as for any install of it.
#   sh scripts/deps.sh deb   only what `make deb` needs besides the build: lintian, heavy
#                            (about 130 packages), so the first `make` stays quick
#   sh scripts/deps.sh fresh only what `make test-fresh` needs: mmdebstrap
set -eu
PKGS="build-essential pkg-config dpkg-dev ca-certificates debian-archive-keyring
libjansson-dev libpcre2-dev libuv1-dev lua-luv-dev lua-lpeg-dev lua-busted lua-check
libcurl4-openssl-dev libseccomp-dev libsqlite3-dev libhiredis-dev libmicrohttpd-dev libssl-dev
redis-server openssl
liblua5.4-dev lua5.4 valgrind nodejs npm lighttpd lighttpd-modules-lua curl prometheus
python3 python3-pip python3-pytest chromium sqlite3"
FUZZ_PKGS="clang libclang-rt-dev"
case ${1:-} in
  deb) PKGS="lintian"; FUZZ_PKGS= ;;
  fresh) PKGS="mmdebstrap"; FUZZ_PKGS= ;;
esac
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
missing=
for p in $PKGS; do installed "$p" || missing="$missing $p"; done
fuzz_missing=
for p in $FUZZ_PKGS; do installed "$p" || fuzz_missing="$fuzz_missing $p"; done
[ -z "$missing" ] && [ -z "$fuzz_missing" ] && exit 0
# nodejs and npm may come from another repository already; skip them if commands exist.
if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then
  missing=$(echo "$missing" | tr ' ' '\n' | grep -vx -e nodejs -e npm | tr '\n' ' ')
fi
[ -z "$(echo "$missing" | tr -d ' ')" ] && [ -z "$fuzz_missing" ] && exit 0
if [ "$(id -u)" = 0 ]; then SUDO=; elif command -v sudo >/dev/null 2>&1; then SUDO=sudo; else
  if [ -z "$(echo "$missing" | tr -d ' ')" ]; then
    echo "deps.sh: missing$fuzz_missing (for the fuzz targets); run as root or install sudo" >&2
    exit 0
  fi
  echo "deps.sh: missing packages:$missing$fuzz_missing; run as root or install sudo" >&2; exit 1
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q >&2 || true
if [ -n "$(echo "$missing" | tr -d ' ')" ]; then
  echo "deps.sh: installing$missing" >&2
  # shellcheck disable=SC2086
  $SUDO apt-get install -y -q --no-install-recommends $missing >&2
fi
if [ -n "$fuzz_missing" ]; then
  echo "deps.sh: installing$fuzz_missing (for the fuzz targets)" >&2
  # shellcheck disable=SC2086
  $SUDO apt-get install -y -q --no-install-recommends $fuzz_missing >&2 ||
    echo "deps.sh: could not install$fuzz_missing: make fuzz will not build" >&2
fi
