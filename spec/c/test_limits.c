/*
** test_limits.c: the limits table (engine/core/limits.c) and its parser. Every tp_limits
** member has exactly one entry; tp_limits_init gives each entry's default; the names the
** front ends use are unique; the one parser of sizes, counts and durations refuses
** overflow, negative values and what strtod/strtoull alone would take (" 1", "+1",
** "inf", "0x10"); the verdicts' messages and hints are the ones scripts have always seen,
** byte for byte; tp_strerror names every status code.
*/
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "tidepool.h"
#include "sandbox.h"
#include "limits_table.h"
#include "tp_test.h"

/* The members of tp_limits, in order, as the header declares them. A member added to
** tp_limits and not here leaves a gap that the test below refuses (see its comment). */
#define M(m) { #m, offsetof(tp_limits, m), sizeof(((tp_limits *)0)->m) }
static const struct { const char *name; size_t offset, size; } members[] = {
  M(memory), M(instructions), M(cpu_us), M(wall_us), M(output), M(source), M(result),
  M(tool_calls), M(tool_calls_per_tool), M(tool_in_flight), M(tool_bytes),
  M(tool_timeout_us), M(fs_bytes),
};
#define NMEMBERS (sizeof members / sizeof members[0])

/* The table lists each member once, in the struct's order, and nothing else; between
** two entries there is at most alignment padding (less than the next member's size), and
** the last ends where the struct's own padding starts, so a member missing from both
** this list and the table shows up as a hole. */
TEST(every_tp_limits_member_has_exactly_one_table_entry) {
  CHECK_INT(tp__limits_count, NMEMBERS);
  size_t end = 0;
  for (size_t i = 0; i < tp__limits_count && i < NMEMBERS; i++) {
    const tp__limit *li = &tp__limits[i];
    CHECK_STR(li->field, members[i].name);
    CHECK_INT(li->offset, members[i].offset);
    CHECK_INT(li->size, members[i].size);
    CHECK(li->offset >= end);
    CHECK(li->offset - end < li->size);
    CHECK(tp__limit_field(li->offset) == li);
    end = li->offset + li->size;
  }
  /* After the last limit (and its padding) only the reserved tail, zeroed by init. */
  CHECK_INT(offsetof(tp_limits, reserved_) - end < 8, 1);
  CHECK_INT(sizeof(tp_limits), offsetof(tp_limits, reserved_) + 8 * sizeof(uint64_t));
  tp_limits l;
  memset(&l, 0xff, sizeof l);
  tp_limits_init(&l);
  for (size_t i = 0; i < 8; i++) CHECK_INT(l.reserved_[i], 0);
}

/* The public view (tp_limit_at) is the table, entry for entry. */
TEST(the_public_entries_are_the_tables) {
  CHECK_INT(tp_limit_count(), tp__limits_count);
  for (size_t i = 0; i < tp__limits_count; i++) {
    const tp_limit_info *li = tp_limit_at(i);
    const tp__limit *t = &tp__limits[i];
    CHECK(li != NULL);
    if (li == NULL) return;
    CHECK_STR(li->field, t->field);
    CHECK_INT(li->unit, t->unit);
    CHECK_INT(li->def, t->def);
    CHECK_INT(li->max, tp__limit_max(t));
    CHECK_STR(li->flag, t->flag);
    CHECK_STR(li->mcp, t->mcp);
    CHECK_STR(li->option, t->option);
    CHECK_STR(li->help, t->help);
    CHECK_STR(li->code, t->code);
    CHECK_STR(li->message, t->message);
    CHECK_STR(li->hint, t->hint);
  }
  CHECK(tp_limit_at(tp__limits_count) == NULL);
  CHECK(tp_limit_at((size_t)-1) == NULL);
}

/* tp_limit_find takes any of an entry's four names, so no name may belong to two
** entries, of whatever kind. */
TEST(flags_mcp_options_and_lua_options_are_unique_and_found_by_name) {
  size_t n = tp_limit_count();
  for (size_t i = 0; i < n; i++) {
    const tp_limit_info *li = tp_limit_at(i);
    CHECK(li->flag && strncmp(li->flag, "--", 2) == 0);
    CHECK(li->mcp == NULL || strncmp(li->mcp, "--", 2) == 0);
    CHECK(li->option && li->option[0] != '-');
    CHECK(li->help && li->help[0]);
    CHECK(tp_limit_find(li->field) == li);
    CHECK(tp_limit_find(li->flag) == li);
    CHECK(li->mcp == NULL || tp_limit_find(li->mcp) == li);
    CHECK(tp_limit_find(li->option) == li);
    const char *mine[] = { li->field, li->flag, li->mcp, li->option };
    for (size_t j = 0; j < i; j++) {
      const tp_limit_info *o = tp_limit_at(j);
      const char *theirs[] = { o->field, o->flag, o->mcp, o->option };
      for (size_t a = 0; a < 4; a++)
        for (size_t b = 0; b < 4; b++)
          if (mine[a] && theirs[b] && strcmp(mine[a], theirs[b]) == 0)
            TP_FAIL_AT("'%s' names both %s and %s", mine[a], li->field, o->field);
    }
  }
  CHECK(tp_limit_find("--bogus") == NULL);
  CHECK(tp_limit_find("bogus") == NULL);
  CHECK(tp_limit_find("") == NULL);
  CHECK(tp_limit_find(NULL) == NULL);
  CHECK_STR(tp_limit_find("--timeout")->field, "wall_us");
  CHECK_STR(tp_limit_find("max_output")->field, "output");
  CHECK_STR(tp_limit_find("--fs-quota")->field, "fs_bytes");
}

/* Every entry that stops a run has a code and a hint; one that words its own message
** has a verdict. */
TEST(every_verdict_entry_has_a_code_and_a_hint) {
  for (size_t i = 0; i < tp__limits_count; i++) {
    const tp__limit *li = &tp__limits[i];
    if (li->kill != TP_KILL_NONE) {
      CHECK(li->code != NULL && strncmp(li->code, "limit.", 6) == 0);
      CHECK(li->hint != NULL);
    }
    if (li->message) CHECK(li->kill != TP_KILL_NONE);
  }
}

TEST(limits_init_sets_every_member_to_its_table_default) {
  tp_limits l;
  memset(&l, 0xA5, sizeof l);
  tp_limits_init(&l);
  for (size_t i = 0; i < tp__limits_count; i++)
    CHECK_INT(tp__limit_get(&l, &tp__limits[i]), tp__limits[i].def);
  CHECK_INT(l.memory, 64u << 20);
  CHECK_INT(l.wall_us, 10000000);
  CHECK_INT(l.tool_calls, 1000);
  CHECK_INT(l.tool_in_flight, 32);
  CHECK_INT(l.tool_timeout_us, 30000000);
  CHECK_INT(l.fs_bytes, 64u << 20);
}

TEST(limit_set_writes_only_its_own_member) {
  for (size_t i = 0; i < tp__limits_count; i++) {
    tp_limits l;
    tp_limits_init(&l);
    tp__limit_set(&l, &tp__limits[i], 7);
    for (size_t j = 0; j < tp__limits_count; j++)
      CHECK_INT(tp__limit_get(&l, &tp__limits[j]), i == j ? 7 : tp__limits[j].def);
  }
}

static void parses (tp__unit unit, const char *text, uint64_t max, int rc, uint64_t want) {
  uint64_t v = 12345;
  int got = tp__parse_value(unit, text, max, &v);
  if (got != rc) TP_FAIL_AT("'%s': rc %d, expected %d", text, got, rc);
  else if (rc == 0 && v != want)
    TP_FAIL_AT("'%s': %llu, expected %llu", text, (unsigned long long)v, (unsigned long long)want);
  else if (rc != 0 && v != 12345) TP_FAIL_AT("'%s': *out written on an error", text);
}

#define B TP__UNIT_BYTES
#define C TP__UNIT_COUNT
#define D TP__UNIT_DURATION
#define BAD TP__PARSE_BAD
#define NEG TP__PARSE_NEGATIVE
#define RANGE TP__PARSE_RANGE

TEST(sizes_parse_with_suffixes) {
  parses(B, "0", UINT64_MAX, 0, 0);
  parses(B, "100", UINT64_MAX, 0, 100);
  parses(B, "512K", UINT64_MAX, 0, 512u << 10);
  parses(B, "64M", UINT64_MAX, 0, 64u << 20);
  parses(B, "64m", UINT64_MAX, 0, 64u << 20);
  parses(B, "1G", UINT64_MAX, 0, 1u << 30);
  parses(B, "1MiB", UINT64_MAX, 0, 1u << 20);
  parses(B, "1MB", UINT64_MAX, 0, 1u << 20);
  parses(B, "18446744073709551615", UINT64_MAX, 0, UINT64_MAX);
}

TEST(a_size_that_overflows_is_a_range_error_not_a_wrapped_value) {
  parses(B, "99999999999999999999G", UINT64_MAX, RANGE, 0);
  parses(B, "18446744073709551616", UINT64_MAX, RANGE, 0);
  parses(B, "17179869184G", UINT64_MAX, RANGE, 0);      /* 2^34 GiB = 2^64 */
  parses(B, "17179869183G", UINT64_MAX, 0, 17179869183ull << 30);
  parses(B, "4G", UINT32_MAX, RANGE, 0);                /* a 4-byte member */
}

TEST(a_negative_or_malformed_size_is_refused) {
  parses(B, "-1", UINT64_MAX, NEG, 0);
  parses(B, "-0", UINT64_MAX, NEG, 0);
  parses(B, "12Q", UINT64_MAX, BAD, 0);
  parses(B, "", UINT64_MAX, BAD, 0);
  parses(B, " 1", UINT64_MAX, BAD, 0);
  parses(B, "+1", UINT64_MAX, BAD, 0);
  parses(B, "1 M", UINT64_MAX, BAD, 0);
  parses(B, "1B", UINT64_MAX, BAD, 0);
  parses(B, "1T", UINT64_MAX, BAD, 0);
  parses(B, "0x10", UINT64_MAX, BAD, 0);
  parses(B, "1.5M", UINT64_MAX, BAD, 0);
  parses(B, "M", UINT64_MAX, BAD, 0);
  uint64_t v;
  CHECK_INT(tp__parse_value(B, NULL, UINT64_MAX, &v), BAD);
}

TEST(counts_are_whole_numbers_within_their_member) {
  parses(C, "0", UINT32_MAX, 0, 0);
  parses(C, "4294967295", UINT32_MAX, 0, UINT32_MAX);
  parses(C, "4294967296", UINT32_MAX, RANGE, 0);
  parses(C, "99999999999999999999", UINT64_MAX, RANGE, 0);
  parses(C, "-5", UINT64_MAX, NEG, 0);
  parses(C, "1e3", UINT64_MAX, BAD, 0);
  parses(C, "1K", UINT64_MAX, BAD, 0);
  parses(C, "0x10", UINT64_MAX, BAD, 0);
  parses(C, "", UINT64_MAX, BAD, 0);
}

TEST(durations_parse_with_units) {
  parses(D, "500ms", TP__DURATION_MAX, 0, 500000);
  parses(D, "2s", TP__DURATION_MAX, 0, 2000000);
  parses(D, "1.5s", TP__DURATION_MAX, 0, 1500000);
  parses(D, ".5s", TP__DURATION_MAX, 0, 500000);
  parses(D, "5.", TP__DURATION_MAX, 0, 5000000);
  parses(D, "3", TP__DURATION_MAX, 0, 3000000);
  parses(D, "1m", TP__DURATION_MAX, 0, 60000000);
  parses(D, "1min", TP__DURATION_MAX, 0, 60000000);
  parses(D, "250us", TP__DURATION_MAX, 0, 250);
  parses(D, "1e3ms", TP__DURATION_MAX, 0, 1000000);
  parses(D, "4.35s", TP__DURATION_MAX, 0, 4350000);     /* rounded, not truncated */
  parses(D, "1e-400s", TP__DURATION_MAX, 0, 0);
  parses(D, "1000000000s", TP__DURATION_MAX, 0, TP__DURATION_MAX);
}

TEST(a_duration_that_overflows_is_a_range_error_not_a_wrapped_value) {
  parses(D, "1e400s", TP__DURATION_MAX, RANGE, 0);
  parses(D, "1e400", TP__DURATION_MAX, RANGE, 0);
  parses(D, "1000000001s", TP__DURATION_MAX, RANGE, 0);
  parses(D, "99999999999999999999999m", TP__DURATION_MAX, RANGE, 0);
  parses(D, "5000s", UINT32_MAX, RANGE, 0);             /* 5e9 us in a 4-byte member */
}

TEST(a_negative_or_malformed_duration_is_refused) {
  parses(D, "-1", TP__DURATION_MAX, NEG, 0);
  parses(D, "-.5s", TP__DURATION_MAX, NEG, 0);
  parses(D, "soon", TP__DURATION_MAX, BAD, 0);
  parses(D, "inf", TP__DURATION_MAX, BAD, 0);
  parses(D, "nan", TP__DURATION_MAX, BAD, 0);
  parses(D, "infinity", TP__DURATION_MAX, BAD, 0);
  parses(D, "0x10", TP__DURATION_MAX, BAD, 0);
  parses(D, " 1s", TP__DURATION_MAX, BAD, 0);
  parses(D, "+1s", TP__DURATION_MAX, BAD, 0);
  parses(D, "1h", TP__DURATION_MAX, BAD, 0);
  parses(D, "e5", TP__DURATION_MAX, BAD, 0);
  parses(D, ".", TP__DURATION_MAX, BAD, 0);
  parses(D, "", TP__DURATION_MAX, BAD, 0);
  parses(D, "1e", TP__DURATION_MAX, BAD, 0);
}

TEST(seconds_as_numbers_are_checked_like_text) {
  uint64_t v = 0;
  CHECK_INT(tp__parse_seconds(0.5, TP__DURATION_MAX, &v), 0);
  CHECK_INT(v, 500000);
  CHECK_INT(tp__parse_seconds(-1, TP__DURATION_MAX, &v), NEG);
  CHECK_INT(tp__parse_seconds(NAN, TP__DURATION_MAX, &v), BAD);
  CHECK_INT(tp__parse_seconds(INFINITY, TP__DURATION_MAX, &v), RANGE);
  CHECK_INT(tp__parse_seconds(1e300, TP__DURATION_MAX, &v), RANGE);
  CHECK_INT(tp__parse_seconds(1e9, TP__DURATION_MAX, &v), 0);
  CHECK_INT(v, TP__DURATION_MAX);
}

/* Sets name to text through the public API: TP_EINVAL with exactly want as the message,
** and the limits untouched. */
static void refuses (const char *name, const char *text, const char *want) {
  tp_limits l, before;
  tp_limits_init(&l);
  before = l;
  char err[256] = "";
  int rc = tp_limits_set(&l, name, text, err, sizeof err);
  if (rc != TP_EINVAL) TP_FAIL_AT("%s '%s': rc %d, expected TP_EINVAL", name, text, rc);
  if (strcmp(err, want) != 0)
    TP_FAIL_AT("%s '%s': \"%s\", expected \"%s\"", name, text, err, want);
  if (memcmp(&l, &before, sizeof l) != 0) TP_FAIL_AT("%s '%s': limits changed", name, text);
}

TEST(parse_errors_say_what_is_wrong_and_what_is_expected) {
  refuses("--memory", "12Q", "bad size '12Q' (use bytes or a suffix: 512K, 64M, 1G)");
  refuses("--memory", "99999999999999999999G", "bad size '99999999999999999999G' (too "
          "large: at most 18446744073709551615 bytes)");
  refuses("memory", "-1", "bad size '-1' (it cannot be negative; 0 means no limit)");
  refuses("--instructions", "-5",
          "bad instruction count '-5' (it cannot be negative; 0 means no limit)");
  refuses("--tool-calls", "4294967296", "bad count '4294967296' (too large: at most "
          "4294967295)");
  refuses("tool_calls", "many", "bad count 'many' (use a whole number)");
  refuses("--timeout", "soon", "bad duration 'soon' (use 500ms, 2s, 1m)");
  refuses("timeout", "1e400s", "bad duration '1e400s' (too large: at most 1000000000 s)");
  refuses("--bogus", "1", "unknown limit '--bogus'");
}

TEST(limits_set_by_any_name_writes_the_parsed_value) {
  tp_limits l;
  tp_limits_init(&l);
  char err[256] = "";
  CHECK_INT(tp_limits_set(&l, "--memory", "8M", err, sizeof err), TP_OK);
  CHECK_INT(l.memory, 8u << 20);
  CHECK_INT(tp_limits_set(&l, "timeout", "1.5s", err, sizeof err), TP_OK);
  CHECK_INT(l.wall_us, 1500000);
  CHECK_INT(tp_limits_set(&l, "tool_calls_per_tool", "7", err, sizeof err), TP_OK);
  CHECK_INT(l.tool_calls_per_tool, 7);
  CHECK_INT(tp_limits_get(&l, tp_limit_find("--tool-calls-per-tool")), 7);
  CHECK_STR(err, "");
}

/* What help texts show of each limit: its line and its default as an option takes it
** (the line as `tidepool run --help` lays it out: spec/limit_options_spec.lua). */
TEST(help_texts_come_from_the_table_with_the_default) {
  char def[32];
  const tp_limit_info *mem = tp_limit_find("--memory");
  CHECK_STR(mem->help, "memory of the script's Lua state");
  tp_format_value(mem->unit, mem->def, def, sizeof def);
  CHECK_STR(def, "64M");
  const tp_limit_info *ins = tp_limit_find("--instructions");
  tp_format_value(ins->unit, ins->def, def, sizeof def);
  CHECK_STR(def, "none");
  const tp_limit_info *tmo = tp_limit_find("--tool-timeout");
  CHECK_STR(tmo->help, "a call's deadline (the tool's, if shorter)");
  tp_format_value(tmo->unit, tmo->def, def, sizeof def);
  CHECK_STR(def, "30s");
}

/* The words of each verdict, as scripts and specs have read them since before the table. */
TEST(verdict_messages_and_hints_are_unchanged) {
  tp_limits l;
  tp_limits_init(&l);
  l.instructions = 5000;
  l.cpu_us = 500000;
  l.output = 200;
  tp_sandbox *sb = tp__sandbox_create(&l);
  CHECK(sb != NULL);
  if (sb == NULL) return;
  static const struct { tp_kill why; const char *code, *msg, *hint; } v[] = {
    { TP_KILL_MEMORY, "limit.memory", "the script used more than its memory limit of 64 MiB",
      "Keep less data alive at once: process items in a loop instead of collecting them "
      "all, and avoid building huge strings or tables." },
    { TP_KILL_INSTRUCTIONS, "limit.instructions",
      "the script ran more than its limit of 5000 instructions",
      "Look for a loop that never ends, or do less work in one run (fewer items, a "
      "cheaper method)." },
    { TP_KILL_CPU, "limit.cpu", "the script used more than its CPU time limit of 500 ms",
      "Look for a loop that never ends, or do less work in one run (fewer items, a "
      "cheaper method)." },
    { TP_KILL_TIME, "limit.time", "the script ran longer than its time limit of 10 s",
      "Look for a loop that never ends, or do less work in one run (fewer items, a "
      "cheaper method)." },
    { TP_KILL_OUTPUT, "limit.output",
      "the script printed more than its output limit of 200 bytes",
      "Print less: return the data as the script's result, or print a summary instead of "
      "every item." },
    { TP_KILL_CANCELLED, "cancelled", "the run was cancelled by the host",
      "The host stopped the run; run it again if needed." },
    { TP_KILL_TOOL_CALLS, "limit.tool_calls",
      "the script made more tool calls than its limit allows",
      "Make fewer tool calls: use a tool that returns many items at once, or stop the loop "
      "earlier." },
    { TP_KILL_RESULT, "limit.result",
      "the script's result is larger than its result limit of 4 MiB",
      "Return less: a summary, the first items, or only the fields that are needed." },
  };
  char msg[256];
  for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
    CHECK_STR(tp__kill_code(v[i].why), v[i].code);
    tp__kill_message(sb, v[i].why, msg, sizeof msg);
    CHECK_STR(msg, v[i].msg);
    CHECK_STR(tp__kill_hint(v[i].why), v[i].hint);
  }
  CHECK_STR(tp__kill_code(TP_KILL_NONE), "runtime");
  CHECK(tp__kill_hint(TP_KILL_NONE) == NULL);
  /* a note replaces the words of the verdicts that take one, and only theirs */
  snprintf(sb->kill_note, sizeof sb->kill_note, "a note");
  tp__kill_message(sb, TP_KILL_MEMORY, msg, sizeof msg);
  CHECK_STR(msg, "a note");
  tp__kill_message(sb, TP_KILL_TIME, msg, sizeof msg);
  CHECK_STR(msg, "the script ran longer than its time limit of 10 s");
  tp__sandbox_destroy(sb);
}

TEST(strerror_names_every_status_code) {
  CHECK_STR(tp_strerror(TP_OK), "success (or, from tp_run_step, the run has finished)");
  CHECK_STR(tp_strerror(TP_YIELD), "the step's budget ran out; step again");
  CHECK_STR(tp_strerror(TP_WAIT), "the script waits on pending requests");
  CHECK_STR(tp_strerror(TP_EINVAL), "invalid argument");
  CHECK_STR(tp_strerror(TP_ENOMEM), "out of memory");
  CHECK_STR(tp_strerror(TP_ESTATE), "the call does not fit the object's state");
  CHECK_STR(tp_strerror(-999), "unknown status");
  CHECK_STR(tp_strerror(1000), "unknown status");
}

/* Each row of TP_ERRNO_MAP: its code, its name as written in C, its text. */
#define ROW(n, t) { TP_##n, "TP_" #n, t },
static const struct { int code; const char *name; const char *text; } status_rows[] = {
  TP_ERRNO_MAP(ROW)
};
#undef ROW

TEST(err_name_gives_each_status_code_its_own_c_name) {
  CHECK_STR(tp_err_name(TP_OK), "TP_OK");
  CHECK_STR(tp_err_name(TP_DONE), "TP_OK");
  CHECK_STR(tp_err_name(TP_YIELD), "TP_YIELD");
  CHECK_STR(tp_err_name(TP_WAIT), "TP_WAIT");
  CHECK_STR(tp_err_name(TP_EINVAL), "TP_EINVAL");
  CHECK_STR(tp_err_name(TP_ENOMEM), "TP_ENOMEM");
  CHECK_STR(tp_err_name(TP_ESTATE), "TP_ESTATE");
  CHECK_STR(tp_err_name(-999), "TP_UNKNOWN");
  CHECK_STR(tp_err_name(1000), "TP_UNKNOWN");
  size_t n = sizeof status_rows / sizeof status_rows[0];
  CHECK_INT((long long)n, 6);
  for (size_t i = 0; i < n; i++) {
    CHECK_STR(tp_err_name(status_rows[i].code), status_rows[i].name);
    CHECK_STR(tp_strerror(status_rows[i].code), status_rows[i].text);
    for (size_t j = i + 1; j < n; j++) {
      CHECK(status_rows[i].code != status_rows[j].code);
      CHECK(strcmp(status_rows[i].name, status_rows[j].name) != 0);
      CHECK(strcmp(status_rows[i].text, status_rows[j].text) != 0);
    }
  }
}

int main (int argc, char **argv) {
  tp_test_args(argc, argv);
  RUN(every_tp_limits_member_has_exactly_one_table_entry);
  RUN(the_public_entries_are_the_tables);
  RUN(flags_mcp_options_and_lua_options_are_unique_and_found_by_name);
  RUN(every_verdict_entry_has_a_code_and_a_hint);
  RUN(limits_init_sets_every_member_to_its_table_default);
  RUN(limit_set_writes_only_its_own_member);
  RUN(sizes_parse_with_suffixes);
  RUN(a_size_that_overflows_is_a_range_error_not_a_wrapped_value);
  RUN(a_negative_or_malformed_size_is_refused);
  RUN(counts_are_whole_numbers_within_their_member);
  RUN(durations_parse_with_units);
  RUN(a_duration_that_overflows_is_a_range_error_not_a_wrapped_value);
  RUN(a_negative_or_malformed_duration_is_refused);
  RUN(seconds_as_numbers_are_checked_like_text);
  RUN(parse_errors_say_what_is_wrong_and_what_is_expected);
  RUN(limits_set_by_any_name_writes_the_parsed_value);
  RUN(help_texts_come_from_the_table_with_the_default);
  RUN(verdict_messages_and_hints_are_unchanged);
  RUN(strerror_names_every_status_code);
  RUN(err_name_gives_each_status_code_its_own_c_name);
  return tp_test_end();
}
