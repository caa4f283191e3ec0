#!/bin/sh
# The description a model reads, tidepool against Cloudflare's codemode, for the 13 tool
# schemas of spec/fixtures/describe/tools13.json. Prints, as "name: value unit" lines:
#   describe_tokens_tidepool, describe_tokens_cloudflare   word-piece tokens
#                              (bench/describe/tokens.lua, the same counter for both)
#   describe_tokens_ratio      tidepool / Cloudflare (target <= 0.75)
#   describe_tokens_o200k_*    the same with the o200k tokenizer itself (gpt-tokenizer),
#                              when npm could install it
#   describe_compact_chars     the compact description of the 13 tools, in characters
#   describe_builtin_chars     run_lua's description as tidepool mcp sends it (--describe
#                              auto) with the built-in tools, in characters, and its form
#   describe_56_chars          the same for the 56 tools of four common MCP servers
#                              (bench/describe/servers.lua); both must be <= 2048
# Cloudflare's side is @cloudflare/codemode from the npm registry, installed into
# build/cf the first time, run by node (bench/describe/cloudflare.mjs).
BUILD=${BUILD:-build}
LUA="$BUILD/lua/lua"
FIXTURE=spec/fixtures/describe/tools13.json
OUT="$BUILD/bench-describe"
CF_VERSION=0.5.6
export LUA_PATH="./?.lua;./?/init.lua;;"
mkdir -p "$OUT"
"$LUA" bench/describe/describe.lua write "$FIXTURE" "$OUT" || exit 1
set -- $("$LUA" bench/describe/describe.lua count "$OUT/compact.txt")
echo "describe_compact_chars: $2 chars"
"$BUILD/tidepool" describe --describe auto | "$LUA" -e '
  print(("describe_builtin_chars: %d chars"):format(require("lua.describe").text_len(io.read("a"))))'
set -- $("$LUA" bench/describe/describe.lua servers)
echo "describe_56_chars: $1 chars ($2)"
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "describe_tokens_ratio: not measured (node and npm are needed for Cloudflare's side)"
  exit 0
fi
CF_DIR="$BUILD/cf"
if [ ! -d "$CF_DIR/node_modules/@cloudflare/codemode" ]; then
  mkdir -p "$CF_DIR"
  [ -f "$CF_DIR/package.json" ] || echo '{"name":"tp-bench-cf","private":true}' >"$CF_DIR/package.json"
  (cd "$CF_DIR" && npm install --no-audit --no-fund --silent \
    "@cloudflare/codemode@$CF_VERSION" gpt-tokenizer@3 >/dev/null 2>&1)
fi
if ! CF_DIR="$CF_DIR" node bench/describe/cloudflare.mjs "$FIXTURE" >"$OUT/cloudflare.txt" 2>"$OUT/cloudflare.err"; then
  echo "describe_tokens_ratio: not measured (Cloudflare's codemode did not run: $(head -n 1 "$OUT/cloudflare.err"))"
  exit 1
fi
set -- $("$LUA" bench/describe/describe.lua count "$OUT/full.txt" "$OUT/cloudflare.txt")
tp=$1; cf=$3
echo "describe_tokens_tidepool: $tp tokens"
echo "describe_tokens_cloudflare: $cf tokens"
awk -v a="$tp" -v b="$cf" 'BEGIN { printf "describe_tokens_ratio: %.3f x\n", a / b }'
if o=$(CF_DIR="$CF_DIR" node bench/describe/cloudflare.mjs --o200k "$OUT/full.txt" "$OUT/cloudflare.txt" 2>/dev/null); then
  set -- $o
  echo "describe_tokens_o200k_tidepool: $1 tokens"
  echo "describe_tokens_o200k_cloudflare: $2 tokens"
  awk -v a="$1" -v b="$2" 'BEGIN { printf "describe_tokens_o200k_ratio: %.3f x\n", a / b }'
fi
