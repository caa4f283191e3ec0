/*
** test_numfmt.c: the shortest round-trip text of a double (engine/lib/numfmt.c) is,
** byte for byte, what printf's "%.Pg" writes at the least precision P (1..17) whose
** text strtod reads back to the same double: for random bit patterns of every exponent,
** subnormals, powers of two and ten, integers held as floats, 1e21 and above, -0,
** 0.1 + 0.2, the extremes. Also the JSON form (".0" for integral values) and the public
** tp_number_text.
*/
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tidepool.h"
#include "numfmt.h"
#include "tp_test.h"

/* The reference: the least P whose "%.Pg" reads back. */
static void reference (double d, char *out, size_t cap) {
  for (int p = 1; p <= 17; p++) {
    snprintf(out, cap, "%.*g", p, d);
    if (strtod(out, NULL) == d || isnan(d)) return;
  }
}

static int mismatches;

static void check_one (double d) {
  char want[64], got[TP_NUMFMT_MAX];
  reference(d, want, sizeof want);
  size_t n = tp__fmt_double(d, got);
  if (n != strlen(got) || strcmp(got, want) != 0) {
    if (mismatches++ < 10) TP_FAIL_AT("%a: got %s, want %s", d, got, want);
  }
  else if (!isnan(d) && strtod(got, NULL) != d) {
    if (mismatches++ < 10) TP_FAIL_AT("%a: %s does not read back", d, got);
  }
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next_u64 (void) {  /* xorshift64* */
  rng ^= rng >> 12; rng ^= rng << 25; rng ^= rng >> 27;
  return rng * 2685821657736338717ull;
}

static double from_bits (uint64_t b) { double d; memcpy(&d, &b, sizeof d); return d; }

TEST(random_bit_patterns_match_the_printf_reference) {
  mismatches = 0;
  for (int i = 0; i < 200000; i++) {
    double d = from_bits(next_u64());
    if (!isfinite(d)) continue;
    check_one(d);
  }
  CHECK_INT(mismatches, 0);
}

/* The values an envelope holds most: few decimals (times in ms, prices), and doubles of
** ordinary size with all their digits. */
TEST(ordinary_values_match_the_printf_reference) {
  mismatches = 0;
  for (int i = 0; i < 200000; i++) {
    uint64_t r = next_u64();
    double d = (double)(r % 100000000) / pow(10, (double)((r >> 40) % 12));
    check_one(d);
    check_one(from_bits(next_u64() % (0x4340000000000000ull - 0x3c00000000000000ull) +
                        0x3c00000000000000ull));  /* 2^-63 .. 2^53 */
  }
  CHECK_INT(mismatches, 0);
}

TEST(values_near_every_exponent_match_the_printf_reference) {
  mismatches = 0;
  for (int e = 0; e < 2047; e++)           /* each binary exponent: its ends and a middle */
    for (int k = 0; k < 6; k++) {
      uint64_t frac = k == 0 ? 0 : k == 1 ? 1 : k == 2 ? (1ull << 52) - 1
                    : next_u64() & ((1ull << 52) - 1);
      check_one(from_bits(((uint64_t)e << 52) | frac));
      check_one(-from_bits(((uint64_t)e << 52) | frac));
    }
  for (int e = -325; e <= 308; e++) {      /* powers of ten and their neighbours */
    double d = strtod("1e0", NULL) * pow(10, e);
    check_one(d);
    check_one(nextafter(d, 0));
    check_one(nextafter(d, INFINITY));
  }
  for (int64_t i = -100000; i <= 100000; i += 7) check_one((double)i);
  for (int i = 0; i < 64; i++) check_one(ldexp(1, i) + 1);
  CHECK_INT(mismatches, 0);
}

TEST(edge_cases_read_as_printf_writes_them) {
  static const double cases[] = { 0.0, -0.0, 0.1, 1e22, 123456789012345680000.0, DBL_MIN,
    DBL_MAX, 1.5, 100, 1e16, 9007199254740993.0, INFINITY, -INFINITY, -2.5, DBL_TRUE_MIN };
  char got[TP_NUMFMT_MAX], want[64];
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    tp__fmt_double(cases[i], got);
    reference(cases[i], want, sizeof want);
    CHECK_STR(got, want);
  }
  tp__fmt_double(0.1 + 0.2, got);
  CHECK_STR(got, "0.30000000000000004");
  tp__fmt_double(4.828032, got);
  CHECK_STR(got, "4.828032");
  tp__fmt_double(1e21, got);
  CHECK_STR(got, "1e+21");
  tp__fmt_double(-0.0, got);
  CHECK_STR(got, "-0");
  tp__fmt_double(5e-324, got);
  CHECK_STR(got, "5e-324");
  tp__fmt_double(0.0001, got);
  CHECK_STR(got, "0.0001");
  tp__fmt_double(0.00001, got);
  CHECK_STR(got, "1e-05");
}

TEST(json_reals_always_read_as_reals) {
  char got[TP_NUMFMT_MAX];
  struct { double d; const char *text; } cases[] = {
    { 3, "3.0" }, { -0.0, "-0.0" }, { 0, "0.0" }, { 1e15, "1000000000000000.0" },
    { 9007199254740992.0, "9007199254740992.0" }, { 1e17, "1e+17" }, { 1e21, "1e+21" },
    { 0.5, "0.5" }, { 4.828032, "4.828032" }, { -1.25e-7, "-1.25e-07" },
    { 0.1 + 0.2, "0.30000000000000004" }, { NAN, "null" },
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    size_t n = tp__fmt_json_real(cases[i].d, got);
    CHECK_INT(n, strlen(cases[i].text));
    CHECK_STR(got, cases[i].text);
  }
}

TEST(tp_number_text_cuts_to_the_buffer_and_says_the_length) {
  char buf[8];
  CHECK_INT(tp_number_text(0.1 + 0.2, buf, sizeof buf), 19);
  CHECK_STR(buf, "0.30000");
  CHECK_INT(tp_number_text(4.828032, buf, sizeof buf), 8);
  CHECK_STR(buf, "4.82803");
  char big[32];
  CHECK_INT(tp_number_text(4.828032, big, sizeof big), 8);
  CHECK_STR(big, "4.828032");
  CHECK_INT(tp_number_text(1, NULL, 0), 1);
}

/* The envelope's times (thousandths written from their digits) are the text the general
** way writes for the same double: every n below 300000, random ones up to 2^51, the powers
** of two and ten, and past 2^51 (the general way itself). */
static int milli_mismatches;
static void check_milli (uint64_t n) {
  char want[TP_NUMFMT_MAX], got[TP_NUMFMT_MAX];
  size_t wn = tp__fmt_json_real((double)n / 1e3, want), gn = tp__fmt_json_milli(n, got);
  if (wn != gn || strcmp(want, got) != 0) {
    if (milli_mismatches++ < 10)
      TP_FAIL_AT("%llu: got %s, want %s", (unsigned long long)n, got, want);
  }
}

TEST(thousandths_are_written_as_the_general_way_writes_them) {
  milli_mismatches = 0;
  for (uint64_t n = 0; n < 300000; n++) check_milli(n);
  for (int i = 0; i < 200000; i++) check_milli(next_u64() >> (13 + i % 40));
  for (int e = 0; e < 64; e++) {
    check_milli(1ull << e);
    check_milli((1ull << e) - 1);
    check_milli((1ull << e) + 1);
  }
  for (uint64_t p = 1; p < 10000000000000000000ull; p *= 10) {
    check_milli(p);
    check_milli(p - 1);
    check_milli(p + 1);
  }
  check_milli(UINT64_MAX);
  CHECK_INT(milli_mismatches, 0);
  char buf[TP_NUMFMT_MAX];
  CHECK_INT(tp__fmt_json_milli(12, buf), 5);
  CHECK_STR(buf, "0.012");
  tp__fmt_json_milli(50000, buf);
  CHECK_STR(buf, "50.0");
  tp__fmt_json_milli(1500, buf);
  CHECK_STR(buf, "1.5");
}

int main (void) {
  RUN(random_bit_patterns_match_the_printf_reference);
  RUN(ordinary_values_match_the_printf_reference);
  RUN(values_near_every_exponent_match_the_printf_reference);
  RUN(edge_cases_read_as_printf_writes_them);
  RUN(json_reals_always_read_as_reals);
  RUN(tp_number_text_cuts_to_the_buffer_and_says_the_length);
  RUN(thousandths_are_written_as_the_general_way_writes_them);
  return tp_test_end();
}
