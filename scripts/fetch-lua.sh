#!/bin/sh
# Fetch Lua's source from Debian's lua5.4 source package of the trixie suite into DEST,
# and patch its string library so that pattern matching can be stopped (see
# engine/core/lua_patch.h). Bookworm's liblua5.4 is never used: DESIGN.md section 7.
#
# The mirror comes from this machine's own apt configuration; apt runs against a
# private list and cache directory so the system's package state is untouched.
set -eu
DEST=${1:?usage: fetch-lua.sh DEST}
SUITE=${LUA_SUITE:-trixie}
VERSION=${LUA_DEB_VERSION:-5.4.7-1}

if [ -f "$DEST/src/lstrlib.c" ] && [ -f "$DEST/.tidepool-patched" ]; then
  exit 0
fi

mirror=$(sh "$(dirname "$0")/debian-mirror.sh")

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/cache/archives/partial"
echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror $SUITE main" > "$work/sources.list"
apt_opts="-o Dir::Etc::sourcelist=$work/sources.list -o Dir::Etc::sourceparts=- \
  -o Dir::State::Lists=$work/lists -o Dir::Cache=$work/cache \
  -o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache= -o APT::Sandbox::User=root"
echo "fetch-lua.sh: lua5.4 $VERSION from $SUITE" >&2
# shellcheck disable=SC2086
apt-get -q $apt_opts update >&2
# shellcheck disable=SC2086
(cd "$work" && apt-get -q $apt_opts source --download-only "lua5.4=$VERSION" >&2)
(cd "$work" && dpkg-source -x --no-check lua5.4_*.dsc lua >/dev/null)

rm -rf "$DEST"
mkdir -p "$DEST"
cp -R "$work/lua/src" "$DEST/src"
cp "$work/lua/debian/copyright" "$DEST/COPYRIGHT" 2>/dev/null || true

# Our patch: every step of the pattern matcher calls tp_pattern_step (a static inline
# in engine/core/lua_patch.h, a no-op in states that are not sandboxes). Each edit is checked
# so a changed source fails loudly instead of silently running unbounded.
s=$DEST/src/lstrlib.c
sed -i \
  -e 's/^  if (l_unlikely(ms->matchdepth-- == 0))$/  tp_pattern_step(ms->L);\n&/' \
  -e 's/^    int c = uchar(\*s);$/    int c = (tp_pattern_step(ms->L), uchar(*s));/' \
  -e 's/^    while (++s < ms->src_end) {$/    while (++s < ms->src_end \&\& (tp_pattern_step(ms->L), 1)) {/' \
  "$s"
n=$(grep -c 'tp_pattern_step(ms->L)' "$s")
if [ "$n" != 3 ]; then
  echo "fetch-lua.sh: patching lstrlib.c failed ($n of 3 edits applied)" >&2
  exit 1
fi
# Debian's patch 0002 puts its module folders (/usr/share/lua/5.4, /usr/lib/<triplet>/lua/5.4)
# on the default paths, through a header its own build generates; so does this one.
triplet=$(gcc -print-multiarch 2>/dev/null || dpkg-architecture -qDEB_HOST_MULTIARCH)
printf '#define DEB_HOST_MULTIARCH "%s"\n' "$triplet" > "$DEST/src/lua5.4-deb-multiarch.h"
touch "$DEST/.tidepool-patched"
