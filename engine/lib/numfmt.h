/* numfmt.h: the one way tidepool writes a double as text: the fewest significant digits
** that read back to the same double, laid out as printf's "%.Pg" would at that
** precision P (the shortest P of 1..17 for which "%.Pg" reads back), without printf and
** without the locale. Leaf (lib). */
#ifndef tidepool_numfmt_h
#define tidepool_numfmt_h

#include <stddef.h>
#include <stdint.h>

/* Room enough for any output of the functions below, with the NUL. */
#define TP_NUMFMT_MAX 32

/* The shortest digits of finite d > 0: writes P digits (1..17, no dot, the first not
** 0) to digits and returns P; *exp10 is the decimal exponent of the first digit (d is
** about d1.d2d3... x 10^exp10). They are what "%.Pe" prints, for the least P for which
** that text reads back to d. */
int tp__dtoa_shortest(double d, char digits[17], int *exp10);

/* d as "%.Pg" prints it at that least P ("0.1", "1e+21", "-0", "5e-324", "inf",
** "nan"). Returns the length; buf must hold TP_NUMFMT_MAX bytes. */
size_t tp__fmt_double(double d, char *buf);

/* d as a JSON real: an integral d below 2^53 in magnitude as its digits and ".0"
** ("3.0", "-0.0"), else tp__fmt_double's text with ".0" added when it has neither a dot
** nor an exponent. Not finite: "null" (JSON has no such number). */
size_t tp__fmt_json_real(double d, char *buf);

/* The same text as tp__fmt_json_real((double)n / 1e3), a count of thousandths (the
** envelope's times: milliseconds to the microsecond), written from n's digits: below
** 2^51 the decimal n/1000 itself is the shortest text that reads back to that double
** (two decimals with three places or fewer are 0.001 apart, more than the double's
** whole rounding interval), so no search is needed. */
size_t tp__fmt_json_milli(uint64_t n, char *buf);

#endif
