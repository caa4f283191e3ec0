#!/bin/sh
# Writes OUT (the Makefile's $(BUILD)/config.mk): everything the build reads of the
# installed system, the flags of the libraries and the paths of Debian's static archives.
# The Makefile reads no system at parse time: it includes this file, which a rule makes
# after scripts/deps.sh has installed the packages, and GNU make then restarts with it.
#   CC=cc PKGS='jansson libuv ...' sh scripts/config.sh build/config.mk
# A library pkg-config cannot find, or an archive the compiler cannot find, stops it with
# the package that brings it; nothing is written then.
set -eu
out=${1:?usage: config.sh OUT}
CC=${CC:-cc}
PKGS=${PKGS:?PKGS: the pkg-config names of the libraries}
problems=

# Each check runs in this shell (not in a $(...)), so that it can add to $problems.
for p in $PKGS lua5.4; do
  pkg-config --exists "$p" 2>/dev/null || problems="$problems pkg-config finds no '$p';"
done
find_archive() {  # $1 the file name, $2 the Debian package that holds it; sets $found
  found=$($CC -print-file-name="$1")
  # the compiler answers the bare name when it finds no such file
  if [ "$found" = "$1" ] || [ ! -f "$found" ]; then
    problems="$problems $CC finds no $1 (package $2);"
  fi
}
find_archive liblua5.4-luv.a lua-luv-dev; luv_a=$found
find_archive liblua5.4-lpeg.a lua-lpeg-dev; lpeg_a=$found
find_archive liblua5.4.a liblua5.4-dev; deb_lua_a=$found

if [ -n "$problems" ]; then
  echo "config.sh: the build cannot find what it needs:$problems" | tr ';' '\n' >&2
  echo "config.sh: sh scripts/deps.sh installs every package the build needs" >&2
  exit 1
fi

# shellcheck disable=SC2086
pkg_cflags=$(pkg-config --cflags $PKGS)
# shellcheck disable=SC2086
pkg_libs=$(pkg-config --libs $PKGS)
seccomp_cflags=$(pkg-config --cflags libseccomp)
seccomp_libs=$(pkg-config --libs libseccomp)
deb_lua_cflags=$(pkg-config --cflags lua5.4)
deb_lua_libs=$(pkg-config --libs lua5.4)

mkdir -p "$(dirname "$out")"
cat >"$out.tmp" <<EOF
# Written by scripts/config.sh (CC=$CC) after scripts/deps.sh; make clean removes it.
PKG_CFLAGS     = $pkg_cflags
PKG_LIBS       = $pkg_libs
SECCOMP_CFLAGS = $seccomp_cflags
SECCOMP_LIBS   = $seccomp_libs
LUV_STATIC     = $luv_a $lpeg_a
DEB_LUA_CFLAGS = $deb_lua_cflags
DEB_LUA_LIBS   = $deb_lua_libs
DEB_LUA_A      = $deb_lua_a
EOF
mv "$out.tmp" "$out"
