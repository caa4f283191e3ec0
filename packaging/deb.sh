#!/bin/sh
# Builds tidepool's Debian packages (`make deb`) and checks them with lintian, split the
# Debian way:
#   $BUILD/tidepool_<version>-<rev>_<arch>.deb         the command, tidepool-confine (the
#       helper that confines proc.run's commands), the built-in tools, the man page, the
#       Lua 5.4 module (in the multiarch directory, where Debian's lua5.4 looks) and the
#       systemd unit (packaging/tidepool.service, installed disabled)
#   $BUILD/libtidepool0_<version>-<rev>_<arch>.deb     libtidepool.so.0
#   $BUILD/libtidepool-dev_<version>-<rev>_<arch>.deb  tidepool.h, tidepool_server.h, tidepool.pc,
#       libtidepool.a and the libtidepool.so link; it depends on libtidepool0 and on the
#       -dev packages of the libraries tidepool.pc lists for --static
# `make install` goes into a staging tree with Debian's paths, stripped as policy asks,
# and every file of it into one of the packages (the build stops on a file no package
# takes). Each package's Depends is computed: dpkg-shlibdeps over every ELF file it ships
# (tidepool-confine included, which needs libseccomp2), and for libtidepool-dev the
# packages holding the libraries of tidepool.pc's Libs.private. The build stops if
# lintian reports an error; its warnings are printed.
#   BUILD    the build directory (default build)
#   MAKE     make (default make)
#   LINTIAN  0 skips lintian (default 1)
set -eu
BUILD=${BUILD:-build}
MAKE=${MAKE:-make}
LINTIAN=${LINTIAN:-1}
here=$(cd "$(dirname "$0")" && pwd)
deb=$here/debian
PACKAGES="tidepool libtidepool0 libtidepool-dev"

# The version: the Makefile's, and the changelog's newest entry must be for it.
upstream=$($MAKE -s --no-print-directory print-version)
full=$(sed -n '1s/^tidepool (\([^)]*\)).*/\1/p' "$deb/changelog")
case $full in
  "$upstream"-*) ;;
  *) echo "deb.sh: packaging/debian/changelog's newest entry is $full, not $upstream-N:" \
       "add an entry for $upstream" >&2; exit 1 ;;
esac
arch=$(dpkg-architecture -qDEB_HOST_ARCH)
ma=$(dpkg-architecture -qDEB_HOST_MULTIARCH)

# The layout dpkg-shlibdeps expects: debian/control, and each package's tree beside it.
rm -rf "$BUILD/deb"
mkdir -p "$BUILD/deb/debian"
top=$(cd "$BUILD/deb" && pwd)
{ printf 'Source: tidepool\n'
  for p in $PACKAGES; do printf '\nPackage: %s\nArchitecture: any\n' "$p"; done
} >"$top/debian/control"
stage=$top/stage
$MAKE -s --no-print-directory install BUILD="$BUILD" DESTDIR="$stage" PREFIX=/usr \
  LIBDIR="/usr/lib/$ma" LUACMOD="/usr/lib/$ma/lua/5.4" MANDIR=/usr/share/man
install -D -m 644 "$here/tidepool.service" "$stage/lib/systemd/system/tidepool.service"

# Policy 10.1 and 10.2: binaries and shared objects stripped of debug information, shared
# objects not executable; the static library keeps its symbols.
strip --remove-section=.comment --remove-section=.note "$stage/usr/bin/tidepool" \
  "$stage/usr/libexec/tidepool/tidepool-confine"
for so in "$stage/usr/lib/$ma/libtidepool.so.$upstream" "$stage/usr/lib/$ma/lua/5.4/tidepool.so"; do
  strip --remove-section=.comment --remove-section=.note --strip-unneeded "$so"
  chmod 644 "$so"
done
strip --strip-debug --remove-section=.comment "$stage/usr/lib/$ma/libtidepool.a"
gzip -9n "$stage/usr/share/man/man1/tidepool.1"

# Every staged path into its package (paths relative to the staging root).
take() {  # $1 package, then paths
  p=$1; shift
  for f in "$@"; do
    [ -e "$stage/$f" ] || [ -L "$stage/$f" ] ||
      { echo "deb.sh: make install did not install $f" >&2; exit 1; }
    mkdir -p "$top/debian/$p/$(dirname "$f")"
    mv "$stage/$f" "$top/debian/$p/$f"
  done
}
take tidepool usr/bin/tidepool usr/libexec/tidepool usr/share/tidepool usr/share/man \
  "usr/lib/$ma/lua" lib/systemd/system/tidepool.service
take libtidepool0 "usr/lib/$ma/libtidepool.so.$upstream" "usr/lib/$ma/libtidepool.so.0"
take libtidepool-dev usr/include/tidepool.h usr/include/tidepool_server.h "usr/lib/$ma/libtidepool.so" \
  "usr/lib/$ma/libtidepool.a" "usr/lib/$ma/pkgconfig/tidepool.pc"
left=$(find "$stage" ! -type d)
if [ -n "$left" ]; then
  echo "deb.sh: make install installed files no package takes (add them to a take line):" >&2
  echo "$left" >&2; exit 1
fi

# The packages of the libraries tidepool.pc lists for --static (-lX: libX.so), but libc's.
dev_depends() {
  for l in $(sed -n 's/^Libs.private://p' "$top/debian/libtidepool-dev/usr/lib/$ma/pkgconfig/tidepool.pc"); do
    case $l in -l*) ;; *) continue ;; esac
    so=$(${CC:-cc} -print-file-name="lib${l#-l}.so")
    # libc's -lrt, -ldl, -lpthread are archives only (glibc 2.34 and later)
    [ "$so" = "lib${l#-l}.so" ] && so=$(${CC:-cc} -print-file-name="lib${l#-l}.a")
    [ "$so" = "lib${l#-l}.a" ] && { echo "deb.sh: no lib${l#-l}.so for $l" >&2; exit 1; }
    so=$(realpath -s "$so")
    pkg=$(dpkg-query -S "$so" 2>/dev/null || dpkg-query -S "${so#/usr}" 2>/dev/null) ||
      { echo "deb.sh: no package holds $so (for $l in tidepool.pc)" >&2; exit 1; }
    echo "${pkg%%:*}"
  done | sort -u | grep -vx -e libc6-dev -e libc-dev || true
}

# Depends: what the ELF files of a package need, from the shlibs and symbols files of
# the packages that hold those libraries (dpkg-shlibdeps finds each package's tree by the
# debian/<package>/ of the files' paths; -l: libtidepool's own directory).
shlibs_depends() {  # $1 package
  files=$(cd "$top" && find "debian/$1" -type f \( -perm -u+x -o -name '*.so*' \) \
    -exec sh -c 'head -c 4 "$1" | grep -q ELF' _ {} \; -print | sort)
  [ -n "$files" ] || return 0
  # shellcheck disable=SC2086
  (cd "$top" && dpkg-shlibdeps -O -l"debian/libtidepool0/usr/lib/$ma" -p"$1" $files) |
    sed -n "s/^$1:Depends=//p"
}

for p in $PACKAGES; do
  root=$top/debian/$p
  doc=$root/usr/share/doc/$p
  install -d "$doc" "$root/usr/share/lintian/overrides" "$root/DEBIAN"
  install -m 644 "$deb/copyright" "$doc/copyright"
  gzip -9n <"$deb/changelog" >"$doc/changelog.Debian.gz"
  chmod 644 "$doc/changelog.Debian.gz"
  sed "s/@PACKAGE@/$p/" "$deb/lintian-overrides" >"$root/usr/share/lintian/overrides/$p"
  chmod 644 "$root/usr/share/lintian/overrides/$p"
done

# libcurl is opened with dlopen on a run's first HTTP request (engine/lib/curl_dl.c), so no
# ELF file names it and dpkg-shlibdeps cannot see it: its package, by the name the build
# machine's shlibs give soname libcurl.so.4 (libcurl4, trixie's libcurl4t64), from 7.80
# (the functions curl_dl.c looks up), is added to both packages that run the engine.
curl_pkg=$(cat /var/lib/dpkg/info/*.shlibs 2>/dev/null | awk '$1 == "libcurl" && $2 == "4" { print $3; exit }')
[ -n "$curl_pkg" ] || { echo "deb.sh: no package gives libcurl.so.4 (shlibs): install libcurl" >&2; exit 1; }
with_curl() { case $1 in *"$curl_pkg "*) echo "$1" ;; *) echo "$1, $curl_pkg (>= 7.80.0)" ;; esac; }

tp_depends=$(with_curl "$(shlibs_depends tidepool)")
case $tp_depends in *libseccomp2*) ;; *)
  echo "deb.sh: tidepool's Depends lacks libseccomp2 (tidepool-confine): $tp_depends" >&2; exit 1 ;;
esac
lib_depends=$(with_curl "$(shlibs_depends libtidepool0)")
dev_depends="libtidepool0 (= $full)"
for d in $(dev_depends); do dev_depends="$dev_depends, $d"; done

for p in $PACKAGES; do
  root=$top/debian/$p
  case $p in
    tidepool) depends=$tp_depends ;;
    libtidepool0) depends=$lib_depends
      sed -e "s/@UPSTREAM@/$upstream/" "$deb/shlibs.in" >"$root/DEBIAN/shlibs"
      install -m 644 "$deb/triggers" "$root/DEBIAN/triggers" ;;
    libtidepool-dev) depends=$dev_depends ;;
  esac
  [ -n "$depends" ] || { echo "deb.sh: no dependencies found for $p" >&2; exit 1; }
  size=$(du -sk --apparent-size "$root" --exclude=DEBIAN | cut -f1)
  awk -v p="$p" 'BEGIN { RS = ""; ORS = "\n" } $0 ~ ("^Package: " p "\n") { print }' \
    "$deb/control.in" |
    sed -e "s/@VERSION@/$full/" -e "s/@ARCH@/$arch/" -e "s/@SIZE@/$size/" \
        -e "s/@DEPENDS@/$depends/" >"$root/DEBIAN/control"
  (cd "$root" && find . -path ./DEBIAN -prune -o -type f -print0 | sed -z 's|^\./||' |
    sort -z | xargs -0 md5sum) >"$root/DEBIAN/md5sums"
  chmod 644 "$root/DEBIAN/"*
  find "$root" -type d -exec chmod 755 {} +
  out=$BUILD/${p}_${full}_$arch.deb
  dpkg-deb --root-owner-group -Zxz --build "$root" "$out" >/dev/null
  echo "deb.sh: $out"
done

[ "$LINTIAN" = 0 ] && exit 0
command -v lintian >/dev/null 2>&1 ||
  { echo "deb.sh: lintian is not installed (sh scripts/deps.sh deb)" >&2; exit 1; }
# lintian's exit status follows --fail-on; as root it also warns that it should not run
# as root, which is left out.
rc=0
# shellcheck disable=SC2046
lintian --fail-on error --tag-display-limit 0 \
  $(for p in $PACKAGES; do echo "$BUILD/${p}_${full}_$arch.deb"; done) >"$top/lintian.txt" 2>&1 || rc=$?
grep -v 'running with root privileges is not recommended' "$top/lintian.txt" || true
[ "$rc" -eq 0 ] || { echo "deb.sh: lintian reports errors" >&2; exit 1; }
echo "deb.sh: lintian: no errors"
