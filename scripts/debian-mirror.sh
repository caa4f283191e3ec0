#!/bin/sh
# Prints the URI of a Debian archive this machine's apt already uses, so that no mirror
# host is written in the project: scripts/fetch-lua.sh (Lua's source) and
# scripts/test-fresh.sh (a fresh bookworm root) fetch from where apt does.
#   sh scripts/debian-mirror.sh            the main archive (a URI ending in /debian)
#   sh scripts/debian-mirror.sh security   the security archive (/debian-security)
# Reads the deb822 files (/etc/apt/sources.list.d/*.sources), then the one-line ones.
# Exits 1, saying so, when none is configured.
set -eu
case ${1:-main} in
  main) want='debian' ;;
  security) want='debian-security' ;;
  *) echo "usage: debian-mirror.sh [main|security]" >&2; exit 2 ;;
esac
uri=
for f in /etc/apt/sources.list.d/*.sources; do
  [ -f "$f" ] || continue
  uri=$(awk -v w="$want" '/^URIs:/ { for (i = 2; i <= NF; i++) if ($i ~ ("/" w "/?$")) { print $i; exit } }' "$f")
  [ -n "$uri" ] && break
done
if [ -z "$uri" ]; then
  uri=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
    awk -v w="$want" '$1 == "deb" || $1 == "deb-src" {
      for (i = 2; i <= NF; i++) if ($i ~ ("^(https?|file)://.*/" w "/?$")) { print $i; exit } }')
fi
if [ -z "$uri" ]; then
  echo "debian-mirror.sh: no Debian archive (.../$want) in /etc/apt/sources.list{,.d}" >&2
  exit 1
fi
echo "${uri%/}"
