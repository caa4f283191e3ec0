#!/bin/sh
# The npm packages of the SDK tests, installed on first use into build/sdk-node/:
#   ai6/  ai@6, zod@4 and the SDK itself (file: link), for spec/sdk/ai_sdk.mjs on this
#         machine's Node; typescript and @types/node to check the SDK's types (both)
#   ai7/  ai@7, zod@4, the SDK, and Node 22 (ai 7 requires it): node-linux-<arch>@22, the
#         binary package that `npm install node@22` installs from its preinstall script
#         (npm runs no install scripts by default), used only when this machine's Node
#         is older than 22
#   node18/ Node 18 (node-linux-<arch>@18), where this machine's Node is not 18
# Like spec/mcp's packages, through the machine's npm configuration (its proxy and
# NODE_EXTRA_CA_CERTS for a proxy that inspects TLS). Prints the folder of each that is
# ready; exit 1 when one could not be installed.
set -u
BUILD=${BUILD:-build}
root=$(cd "$(dirname "$0")/../.." && pwd)
dir="$root/$BUILD/sdk-node"
case $(uname -m) in
  x86_64) arch=x64 ;; aarch64) arch=arm64 ;; armv7l) arch=armv7l ;; ppc64le) arch=ppc64le ;;
  s390x) arch=s390x ;; *) arch=$(uname -m) ;;
esac
status=0
install() {  # $1 folder, $2... packages
  d="$dir/$1"; shift
  mkdir -p "$d"
  [ -f "$d/.installed" ] && [ "$(cat "$d/.installed")" = "$*" ] && return 0
  printf '{"private": true, "dependencies": {}}\n' >"$d/package.json"
  if (cd "$d" && npm install --no-audit --no-fund --no-package-lock "$@" >"$d/npm.log" 2>&1); then
    echo "$*" >"$d/.installed"
  else
    tail -n 5 "$d/npm.log" >&2
    echo "spec/sdk/install.sh: npm install $* in $d failed (no network?)" >&2
    status=1
  fi
}
install ai6 ai@6 zod@4 "$root/sdk/node" typescript@5 @types/node@20
install ai7 ai@7 zod@4 "$root/sdk/node" "node-linux-$arch@22" typescript@5 @types/node@22
# Node 18 (bookworm's), the oldest the SDK supports: spec/sdk/node_sdk.mjs runs on it too
# when this machine's Node is another
[ "$(node -p 'process.versions.node.split(".")[0]')" = 18 ] || install node18 "node-linux-$arch@18"
exit $status
