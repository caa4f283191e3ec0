#!/bin/sh
# Install the Debian packages tidepool needs, only those that are missing.
# Runs apt-get as root, or through sudo; prints nothing when all are present.
set -eu
PKGS="build-essential pkg-config dpkg-dev ca-certificates debian-archive-keyring
libjansson-dev libpcre2-dev libuv1-dev lua-luv-dev lua-lpeg-dev lua-busted lua-check
valgrind nodejs npm"
missing=
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
# nodejs and npm may come from another repository already; skip them if commands exist.
if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then
  missing=$(echo "$missing" | tr ' ' '\n' | grep -vx -e nodejs -e npm | tr '\n' ' ')
  [ -z "$(echo "$missing" | tr -d ' ')" ] && exit 0
fi
if [ "$(id -u)" = 0 ]; then SUDO=; elif command -v sudo >/dev/null 2>&1; then SUDO=sudo; else
  echo "deps.sh: missing packages:$missing; run as root or install sudo" >&2; exit 1
fi
echo "deps.sh: installing$missing" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q >&2 || true
# shellcheck disable=SC2086
$SUDO apt-get install -y -q --no-install-recommends $missing >&2
