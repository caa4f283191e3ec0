#!/bin/sh
# examples/reach/run.sh: runs script.lua with config.json. Starts the example's HTTP API
# (api.mjs, 127.0.0.1:18787), makes work/ a git repository with a few commits and
# NOTES.md the first time, and stops the API at the end. Needs node and npx (the MCP
# servers come from npm through npx), git and curl; TIDEPOOL names the tidepool to use,
# and further arguments go to tidepool run (--json, say).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
tidepool=${TIDEPOOL:-$here/../../build/tidepool}
work=$here/work
if [ ! -d "$work/.git" ]; then
  mkdir -p "$work"
  git -C "$work" init -q
  printf '# Notes\nOwner: Ada\n' > "$work/NOTES.md"
  git -C "$work" add NOTES.md
  git -C "$work" -c user.name=ex -c user.email=ex@example.com commit -qm "Add the notes"
  git -C "$work" -c user.name=ex -c user.email=ex@example.com commit -q --allow-empty \
    -m "Fix the crash on an empty config file (#1)"
  git -C "$work" -c user.name=ex -c user.email=ex@example.com commit -q --allow-empty \
    -m "Tidy the README"
fi
node "$here/api.mjs" > /dev/null &
api=$!
trap 'kill $api 2>/dev/null' EXIT
i=0
while ! curl -s -o /dev/null http://127.0.0.1:18787/issues && [ $i -lt 100 ]; do
  sleep 0.1; i=$((i + 1))
done
"$tidepool" run --config "$here/config.json" "$@" "$here/script.lua"
