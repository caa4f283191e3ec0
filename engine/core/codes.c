/*
** codes.c: the error codes of the envelope (tp_code_at), one table in the order the
** docs list them. A code is a stable string a script and a program compare against;
** what each means is said here once, and `tidepool --help`, the man page and the docs
** (spec/docs_spec.lua compares README's list) are written from this table. The limits'
** own codes come from the limits table as well (limits_table.h); spec/c/test_api.c
** checks that each of those is here.
*/
#include "tidepool.h"

static const tp_code_info codes[] = {
  { "syntax", "the script does not compile" },
  { "runtime", "the script raised an error it did not catch" },
  { "limit.instructions", "past --instructions" },
  { "limit.cpu", "past --cpu" },
  { "limit.time", "past --timeout" },
  { "limit.memory", "past --memory (the script's state, or the host's work for it)" },
  { "limit.output", "past --max-output" },
  { "limit.result", "past --max-result" },
  { "limit.source", "past --max-source" },
  { "limit.tool_calls", "past --tool-calls or --tool-calls-per-tool" },
  { "tool.unknown", "no tool has that name" },
  { "tool.invalid_input", "the arguments break the tool's input schema" },
  { "tool.invalid_output", "the tool's result breaks its output schema" },
  { "tool.failed", "the tool failed" },
  { "tool.timeout", "the tool did not answer within its timeout" },
  { "tool.denied", "the policy or an allowlist refuses the call: do not retry" },
  { "tool.unavailable", "the tool's server is down or restarting: retry later" },
  { "tool.rate_limited", "too many calls too fast: retry after retry_after_ms" },
  { "replay.divergence", "a resumed run no longer does what its log says" },
  { "session.moved", "another server of a cluster holds the session (named in the "
                     "message)" },
  { "cancelled", "the run was cancelled" },
};

size_t tp_code_count (void) {
  return sizeof codes / sizeof codes[0];
}

const tp_code_info *tp_code_at (size_t i) {
  return i < tp_code_count() ? &codes[i] : NULL;
}
