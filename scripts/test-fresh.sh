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
# FRESH=full, to npm's registry; the root uses this machine's resolver and trusts the
# certificate authorities it adds in /usr/local/share/ca-certificates. mmdebstrap is installed when missing (deps.sh fresh).
# mmdebstrap and the root run in mount and PID namespaces of their own (unshare): what
# they mount (/proc, /sys, /dev) goes with the mount namespace, and what they leave
# running (a server a failed test left) is killed with the PID namespace; the trap
# unmounts what may still be mounted under the root and removes it, on every path.
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
set -- "deb $mirror bookworm main" "deb $mirror bookworm-updates main"
[ -n "$security" ] && set -- "$@" "deb $security bookworm-security main"

root=
cleanup() {
  rc=$?
  set +e
  [ -n "$root" ] && rm -f "$root.times"
  if [ -n "$root" ] && [ -d "$root" ]; then
    # The namespace took its mounts with it; this is for a root left mounted otherwise.
    awk -v r="$root" '$2 == r || index($2, r "/") == 1 { print $2 }' /proc/mounts | sort -r |
      while read -r m; do umount -l "$m"; done
    if [ "${FRESH_KEEP:-0}" = 1 ]; then echo "test-fresh: the root is kept in $root"
    else rm -rf --one-file-system "$root"; fi
  fi
  exit "$rc"
}
ns_pid=
# A signal to this script ends the namespaces at once (unshare --kill-child: its child,
# their first process, is killed with it, and every process of the PID namespace then).
stop() { [ -n "$ns_pid" ] && kill -KILL "$ns_pid" 2>/dev/null; exit "$1"; }
trap cleanup EXIT
trap 'stop 130' INT
trap 'stop 143' TERM HUP
root=$(mktemp -d "${FRESH_DIR:-/var/tmp}/tidepool-fresh.XXXXXX")
chmod 755 "$root"

# In the namespaces: mmdebstrap, then the mounts, then the commands as a new user's root
# shell would run them. The times of the steps go to $times.
steps='make run'
[ "$FRESH" = full ] && steps='make run && echo "test-fresh: make run took $(($(date +%s) - t)) s" && t=$(date +%s) && make test'
times=$root.times
rc=0
t0=$(date +%s)
unshare --mount --pid --fork --kill-child --propagation private sh -eu -c '
  root=$1; steps=$2; src=$3; head=$4; times=$5; shift 5
  t0=$(date +%s)
  echo "test-fresh: mmdebstrap bookworm into $root from: $*"
  mmdebstrap --quiet --mode=root --variant=minbase --include=make,git,ca-certificates \
    bookworm "$root" "$@"
  echo "root $(($(date +%s) - t0))" >"$times"
  echo "test-fresh: root made in $(($(date +%s) - t0)) s"
  # Package installs in a chroot must not start services (the Debian convention for
  # chroots: policy-rc.d refuses); tests start their own servers on free ports.
  printf "#!/bin/sh\nexit 101\n" >"$root/usr/sbin/policy-rc.d"
  chmod 755 "$root/usr/sbin/policy-rc.d"
  cp /etc/resolv.conf "$root/etc/resolv.conf"
  # The certificate authorities this machine adds locally (a site proxy that inspects
  # TLS, say) are trusted in the root too, as its resolver is used: npm reaches its
  # registry from the root as from the machine.
  if ls /usr/local/share/ca-certificates/*.crt >/dev/null 2>&1; then
    cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
    chroot "$root" update-ca-certificates >/dev/null 2>&1
  fi
  git clone -q --no-hardlinks "$src" "$root/root/tidepool"
  git -C "$root/root/tidepool" checkout -q "$head"
  # As CI lays it: the JSON Schema Test Suite of shared/ beside the clone (the schema
  # tests read ../shared/json-schema-test-suite), when this checkout has it.
  if [ -d "$src/../shared/json-schema-test-suite" ]; then
    mkdir -p "$root/root/shared"
    cp -r "$src/../shared/json-schema-test-suite" "$root/root/shared/"
  fi
  mount -t proc proc "$root/proc"
  mount -t sysfs sysfs "$root/sys"
  mount --rbind /dev "$root/dev"
  exec chroot "$root" /usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM=dumb \
    NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    sh -c "cd /root/tidepool && t=\$(date +%s) && $steps"
' fresh "$root" "$steps" "$src" "$head" "$times" "$@" &
ns_pid=$!
wait "$ns_pid" || rc=$?
ns_pid=
t2=$(date +%s)
made=$(sed -n 's/^root //p' "$times" 2>/dev/null)
rm -f "$times"
if [ "$rc" -eq 0 ]; then
  echo "test-fresh: ok: FRESH=$FRESH passed in a fresh bookworm root ($head);" \
    "root ${made:-?} s, then $((t2 - t0 - ${made:-0})) s; $((t2 - t0)) s in all"
else
  echo "test-fresh: FAILED (exit $rc) after $((t2 - t0)) s: FRESH=$FRESH in a fresh bookworm root ($head)" >&2
fi
exit "$rc"
