#!/bin/sh
# Writes the man page tidepool(1): doc/tidepool.1.in with its lists filled in from the
# built command's own --help, so the page cannot drift from the code: the options, the
# limits (from the limits table, which also writes --help), the error codes (from the
# code table, tp_code_at) and the exit statuses (cli.c's table).
#   sh scripts/man.sh CLI IN OUT DATADIR
# @VERSION@ (the command's) and @DATADIR@ (where the built-in tools are installed) are
# replaced where they stand. Placeholders in IN, each alone on a line:
#   @RUN_OPTIONS@   the "options:" block of `tidepool --help`
#   @LIMITS@        its "limits (...):" block
#   @ERROR_CODES@   its "error codes ...:" block
#   @EXIT_STATUS@   its "exit status ...:" block
#   @MCP_OPTIONS@   the "options:" block of `tidepool mcp --help`
#   @HTTP_OPTIONS@  its "Streamable HTTP ...:" block
set -eu
cli=$1 in=$2 out=$3 datadir=$4
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$cli" --help >"$tmp/help"
"$cli" mcp --help >"$tmp/mcp"
version=$("$cli" --version | awk '{ print $2; exit }')

# block FILE HEADER-REGEX: the entries under the header, up to the next blank line, as
# roff: one .TP per entry (a line "  TERM [ARG]  text"), the term bold and its argument
# italic, continuation lines joined to the text. Backslashes are escaped, and a '-' in a
# term is \-.
block() {
  awk -v hdr="$2" '
    function flush() {
      if (opt == "") return
      n = split(opt, w, " ")
      flag = w[1]; gsub(/-/, "\\-", flag)
      line = "\\fB" flag "\\fR"
      if (n > 1) line = line " \\fI" w[2] "\\fR"
      print ".TP"; print line; print desc
      opt = ""; desc = ""
    }
    $0 ~ hdr { inblk = 1; next }
    inblk && /^$/ { flush(); exit }
    inblk {
      gsub(/\\/, "\\e")
      if ($0 ~ /^  [^ ]/) {
        flush()
        # the flag, then its argument if the next word is one (SIZE, DIR, N, ...)
        s = substr($0, 3)
        match(s, /^[^ ]+/); opt = substr(s, 1, RLENGTH); s = substr(s, RLENGTH + 1)
        if (match(s, /^ [A-Z][A-Z:]*( |$)/)) {
          opt = opt " " substr(s, 2, RLENGTH - 1); sub(/ $/, "", opt); s = substr(s, RLENGTH + 1)
        }
        sub(/^ +/, "", s); desc = s
      } else {
        sub(/^ +/, "")
        desc = (desc == "" ? $0 : desc " " $0)
      }
    }
    END { flush() }
  ' "$1"
}
block "$tmp/help" '^options:$' >"$tmp/run"
block "$tmp/help" '^limits \(' >"$tmp/limits"
block "$tmp/help" '^error codes' >"$tmp/codes"
block "$tmp/help" '^exit status' >"$tmp/exit"
block "$tmp/mcp" '^options:$' >"$tmp/mcpopts"
block "$tmp/mcp" '^Streamable HTTP' >"$tmp/http"
for f in run limits codes exit mcpopts http; do
  [ -s "$tmp/$f" ] || { echo "man.sh: no $f block in the --help text of $cli" >&2; exit 1; }
done

awk -v run="$tmp/run" -v lim="$tmp/limits" -v mcp="$tmp/mcpopts" -v version="$version" \
    -v codes="$tmp/codes" -v exits="$tmp/exit" -v http="$tmp/http" -v datadir="$datadir" '
  function cat(f,  l) { while ((getline l < f) > 0) print l; close(f) }
  $0 == "@RUN_OPTIONS@" { cat(run); next }
  $0 == "@LIMITS@" { cat(lim); next }
  $0 == "@ERROR_CODES@" { cat(codes); next }
  $0 == "@EXIT_STATUS@" { cat(exits); next }
  $0 == "@MCP_OPTIONS@" { cat(mcp); next }
  $0 == "@HTTP_OPTIONS@" { cat(http); next }
  { gsub(/@VERSION@/, version); gsub(/@DATADIR@/, datadir); print }
' "$in" >"$tmp/out"
if grep -n '@[A-Z_]*@' "$tmp/out" >&2; then echo "man.sh: placeholder left" >&2; exit 1; fi
mv "$tmp/out" "$out"
