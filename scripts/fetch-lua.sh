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

# A source fetched before holds every file; the patches below are applied to what is
# there (each once), so a new patch reaches an existing checkout without a download.
if [ ! -f "$DEST/src/lstrlib.c" ] || [ ! -f "$DEST/src/lvm.c" ]; then
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
rm -rf "$work"
fi

# Our patch: every step of the pattern matcher calls tp_pattern_step (a static inline
# in engine/core/lua_patch.h, a no-op in states that are not sandboxes). Each edit is checked
# so a changed source fails loudly instead of silently running unbounded.
s=$DEST/src/lstrlib.c
grep -q tp_pattern_step "$s" || sed -i \
  -e 's/^  if (l_unlikely(ms->matchdepth-- == 0))$/  tp_pattern_step(ms->L);\n&/' \
  -e 's/^    int c = uchar(\*s);$/    int c = (tp_pattern_step(ms->L), uchar(*s));/' \
  -e 's/^    while (++s < ms->src_end) {$/    while (++s < ms->src_end \&\& (tp_pattern_step(ms->L), 1)) {/' \
  "$s"
n=$(grep -c 'tp_pattern_step(ms->L)' "$s")
if [ "$n" != 3 ]; then
  echo "fetch-lua.sh: patching lstrlib.c failed ($n of 3 edits applied)" >&2
  exit 1
fi
# The VM's own patch: every backward jump and every entry into a Lua function calls
# tp_vm_tick (lua_patch.h; one test in states that are not sandboxes), where a sandbox
# whose time slice ends soon reads the clock, so a short step ends on time without a
# count hook (which makes Lua trap on every instruction). A tick only sets the hook
# that ends the slice, as the interrupt signal does, before the VM looks at its trap.
v=$DEST/src/lvm.c
grep -q tp_vm_tick "$v" || sed -i \
  -e 's/^#define dojump(ci,i,e)\t{ pc += GETARG_sJ(i) + e; updatetrap(ci); }$/#define dojump(ci,i,e)\t{ int sj_ = GETARG_sJ(i) + e; if (sj_ < 0) tp_vm_tick(L); pc += sj_; updatetrap(ci); }/' \
  -e 's|pc -= GETARG_Bx(i);  /\* jump back \*/$|{ pc -= GETARG_Bx(i); tp_vm_tick(L); }  /* jump back */|' \
  -e 's/^  trap = L->hookmask;$/  tp_vm_tick(L);\n&/' \
  "$v"
n=$(grep -c 'tp_vm_tick(L)' "$v")
if [ "$n" != 5 ]; then
  echo "fetch-lua.sh: patching lvm.c failed ($n of 5 edits applied)" >&2
  exit 1
fi
# Debian's patch 0002 puts its module folders (/usr/share/lua/5.4, /usr/lib/<triplet>/lua/5.4)
# on the default paths, through a header its own build generates; so does this one.
triplet=$(gcc -print-multiarch 2>/dev/null || dpkg-architecture -qDEB_HOST_MULTIARCH)
printf '#define DEB_HOST_MULTIARCH "%s"\n' "$triplet" > "$DEST/src/lua5.4-deb-multiarch.h"
touch "$DEST/.tidepool-patched"
