#!/bin/sh
# Builds the Debian package of tidepool (`make deb`) and checks it with lintian:
#   $BUILD/tidepool_<version>-<rev>_<arch>.deb
# `make install` into a staging tree with Debian's paths (the libraries and the Lua module
# in the multiarch directory, where Debian's lua5.4 looks for C modules), stripped as
# policy asks, plus the files of packaging/debian/: control (Depends computed by
# dpkg-shlibdeps from the binaries' NEEDED entries), copyright, changelog, shlibs and an
# ldconfig trigger. The build stops if lintian reports an error; its warnings are printed.
# Two warnings remain, both because one package holds what Debian would split in four
# (tidepool, libtidepool0, libtidepool-dev, lua-tidepool): package-name-doesnt-match-sonames
# and link-to-shared-library-in-wrong-package (the libtidepool.so link for -ltidepool).
#   BUILD    the build directory (default build)
#   MAKE     make (default make)
#   LINTIAN  0 skips lintian (default 1)
set -eu
BUILD=${BUILD:-build}
MAKE=${MAKE:-make}
LINTIAN=${LINTIAN:-1}
here=$(cd "$(dirname "$0")" && pwd)
deb=$here/debian

# The version: the Makefile's, and the changelog's newest entry must be for it.
upstream=$($MAKE -s --no-print-directory print-version)
full=$(sed -n '1s/^tidepool (\([^)]*\)).*/\1/p' "$deb/changelog")
case $full in
  "$upstream"-*) ;;
  *) echo "deb.sh: packaging/debian/changelog's newest entry is $full, not $upstream-N:" \
       "add an entry for $upstream" >&2; exit 1 ;;
esac
arch=$(dpkg-architecture -qDEB_HOST_ARCH)
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH)

# The layout dpkg-shlibdeps expects: debian/control, and the package's tree beside it.
rm -rf "$BUILD/deb"
mkdir -p "$BUILD/deb/debian/tidepool"
printf 'Source: tidepool\n\nPackage: tidepool\nArchitecture: any\n' >"$BUILD/deb/debian/control"
root=$(cd "$BUILD/deb/debian/tidepool" && pwd)
$MAKE -s --no-print-directory install BUILD="$BUILD" DESTDIR="$root" PREFIX=/usr \
  LIBDIR="/usr/lib/$multiarch" LUACMOD="/usr/lib/$multiarch/lua/5.4" MANDIR=/usr/share/man

# Policy 10.1 and 10.2: binaries and shared objects stripped of debug information, shared
# objects not executable; the static library keeps its symbols.
strip --remove-section=.comment --remove-section=.note "$root/usr/bin/tidepool" \
  "$root/usr/libexec/tidepool/tidepool-confine"
for so in "$root/usr/lib/$multiarch/libtidepool.so.$upstream" \
          "$root/usr/lib/$multiarch/lua/5.4/tidepool.so"; do
  strip --remove-section=.comment --remove-section=.note --strip-unneeded "$so"
  chmod 644 "$so"
done
strip --strip-debug --remove-section=.comment "$root/usr/lib/$multiarch/libtidepool.a"
gzip -9n "$root/usr/share/man/man1/tidepool.1"

doc=$root/usr/share/doc/tidepool
install -d "$doc"
install -m 644 "$deb/copyright" "$doc/copyright"
gzip -9n <"$deb/changelog" >"$doc/changelog.Debian.gz"
chmod 644 "$doc/changelog.Debian.gz"
install -d "$root/usr/share/lintian/overrides"
install -m 644 "$deb/lintian-overrides" "$root/usr/share/lintian/overrides/tidepool"

# Depends: what the binaries need, from the shlibs and symbols files of the packages
# that hold those libraries (dpkg-shlibdeps finds the package's tree by its DEBIAN/).
mkdir -p "$root/DEBIAN"
lib=debian/tidepool/usr/lib/$multiarch
depends=$(cd "$BUILD/deb" && dpkg-shlibdeps -O -l"$lib" debian/tidepool/usr/bin/tidepool \
  "$lib/libtidepool.so.$upstream" "$lib/lua/5.4/tidepool.so" | sed -n 's/^shlibs:Depends=//p')
[ -n "$depends" ] || { echo "deb.sh: dpkg-shlibdeps found no dependencies" >&2; exit 1; }

size=$(du -sk --apparent-size "$root/usr" | cut -f1)
sed -e "s/@VERSION@/$full/" -e "s/@ARCH@/$arch/" -e "s/@SIZE@/$size/" \
    -e "s/@DEPENDS@/$depends/" "$deb/control.in" >"$root/DEBIAN/control"
sed -e "s/@UPSTREAM@/$upstream/" "$deb/shlibs.in" >"$root/DEBIAN/shlibs"
install -m 644 "$deb/triggers" "$root/DEBIAN/triggers"
(cd "$root" && find usr -type f -print0 | sort -z | xargs -0 md5sum) >"$root/DEBIAN/md5sums"
chmod 644 "$root/DEBIAN/control" "$root/DEBIAN/shlibs" "$root/DEBIAN/md5sums"
find "$root" -type d -exec chmod 755 {} +

out=$BUILD/tidepool_${full}_$arch.deb
dpkg-deb --root-owner-group -Zxz --build "$root" "$out" >/dev/null
echo "deb.sh: $out"

[ "$LINTIAN" = 0 ] && exit 0
command -v lintian >/dev/null 2>&1 ||
  { echo "deb.sh: lintian is not installed (sh scripts/deps.sh deb)" >&2; exit 1; }
# lintian's exit status follows --fail-on; as root it also warns that it should not run
# as root, which is left out.
rc=0
lintian --fail-on error --tag-display-limit 0 "$out" >"$BUILD/deb/lintian.txt" 2>&1 || rc=$?
grep -v 'running with root privileges is not recommended' "$BUILD/deb/lintian.txt" || true
[ "$rc" -eq 0 ] || { echo "deb.sh: lintian reports errors for $out" >&2; exit 1; }
echo "deb.sh: lintian: no errors"
