#!/bin/sh
# make test-fresh: the README's two commands on a fresh machine. Builds a minimal Debian
# bookworm root with mmdebstrap (minbase, plus make, git and ca-certificates: what a new
# user starts with), clones this checkout's committed HEAD into it, and runs `make run`
# there as root, which installs every package itself (scripts/deps.sh); with FRESH=full,
# then `make test`. Prints the time of each step.
#   make test-fresh                 make run in the fresh root
#   make test-fresh FRESH=full      make run, then make test
#   FRESH_KEEP=1                    keep the root afterwards (it is printed)
#   FRESH_DIR=/var/tmp              where the root is made (default /var/tmp; ~3 GB full)
# Needs root (mmdebstrap's root mode, chroot, mount), and network to the Debian archives
# this machine's apt uses (scripts/debian-mirror.sh: no mirror is written here) and, for
# FRESH=full, to npm's registry. mmdebstrap is installed when missing (deps.sh fresh).
# The root runs in its own mount and PID namespaces (unshare): whatever it mounts
# (/proc, /sys, /dev) goes with its mount namespace, and whatever it leaves running (a
# server a failed test left) is killed with its PID namespace; the trap unmounts what
# may still be mounted under the root and removes it, on every path.
# Not part of make test. Only committed work is tested: uncommitted changes are named.
set -eu
FRESH=${FRESH:-run}
case $FRESH in run|full) ;; *) echo "test-fresh: FRESH is run or full, not '$FRESH'" >&2; exit 2 ;; esac
if [ "$(id -u)" != 0 ]; then
  echo "test-fresh: needs root (mmdebstrap, chroot and mount): sudo make test-fresh" >&2
  exit 2
fi
src=$(git rev-parse --show-toplevel)
head=$(git -C "$src" rev-parse HEAD)
if [ -n "$(git -C "$src" status --porcelain --untracked-files=no)" ]; then
  echo "test-fresh: uncommitted changes are not tested (only HEAD, $head, is cloned)" >&2
fi
sh "$src/scripts/deps.sh" fresh
mirror=$(sh "$src/scripts/debian-mirror.sh")
security=$(sh "$src/scripts/debian-mirror.sh" security 2>/dev/null || true)

root=
cleanup() {
  rc=$?
  set +e
  if [ -n "$root" ] && [ -d "$root" ]; then
    # The namespace took its mounts with it; this is for a root left mounted otherwise.
    awk -v r="$root" '$2 == r || index($2, r "/") == 1 { print $2 }' /proc/mounts | sort -r |
      while read -r m; do umount -l "$m"; done
    if [ "${FRESH_KEEP:-0}" = 1 ]; then echo "test-fresh: the root is kept in $root"
    else rm -rf --one-file-system "$root"; fi
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM HUP
root=$(mktemp -d "${FRESH_DIR:-/var/tmp}/tidepool-fresh.XXXXXX")
chmod 755 "$root"

now() { date +%s; }
t0=$(now)
echo "test-fresh: mmdebstrap bookworm from $mirror into $root"
set -- "deb $mirror bookworm main" "deb $mirror bookworm-updates main"
[ -n "$security" ] && set -- "$@" "deb $security bookworm-security main"
mmdebstrap --quiet --mode=root --variant=minbase --include=make,git,ca-certificates \
  bookworm "$root" "$@"
t1=$(now)
echo "test-fresh: root made in $((t1 - t0)) s"

# A chroot's package installs must not start services (Debian's convention for chroots:
# policy-rc.d refuses); tests start their own servers on free ports.
printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
chmod 755 "$root/usr/sbin/policy-rc.d"
cp /etc/resolv.conf "$root/etc/resolv.conf"
git clone -q --no-hardlinks "$src" "$root/root/tidepool"
git -C "$root/root/tidepool" checkout -q "$head"

# In the namespaces: mounts, then the commands as a new user's root shell would run them.
steps='make run'
[ "$FRESH" = full ] && steps='make run && echo "test-fresh: make run took $(($(date +%s) - t))s" && t=$(date +%s) && make test'
rc=0
unshare --mount --pid --fork --propagation private sh -eu -c '
  root=$1; steps=$2
  mount -t proc proc "$root/proc"
  mount -t sysfs sysfs "$root/sys"
  mount --rbind /dev "$root/dev"
  exec chroot "$root" /usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM=dumb \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    sh -c "cd /root/tidepool && t=\$(date +%s) && $steps"
' fresh "$root" "$steps" || rc=$?
t2=$(now)
if [ "$rc" -eq 0 ]; then
  echo "test-fresh: ok: FRESH=$FRESH passed in a fresh bookworm root ($head);" \
    "root $((t1 - t0)) s, then $((t2 - t1)) s; $((t2 - t0)) s in all"
else
  echo "test-fresh: FAILED (exit $rc) after $((t2 - t0)) s: FRESH=$FRESH in a fresh bookworm root ($head)" >&2
fi
exit "$rc"
