/*
** numfmt.c: shortest round-trip text of a double (numfmt.h), exact, in integers.
**
** d = m x 2^e exactly. The doubles that read back as d are those within its rounding
** interval: from the midpoint with its predecessor to the midpoint with its successor,
** ends included when m is even (reading rounds ties to even). Scaled by 4, the three
** values are integers times 2^(e-2): 4m, 4m+2 and 4m-2 (4m-1 at a power of two, where
** the gap below is half the gap above). Each is written out exactly in decimal, as a big
** integer in base 10^9: for e-2 >= 0 the integer itself, else the integer times
** 5^(2-e), whose decimal digits are those of the value with the point 2-e places from
** the right. Then for P = 1, 2, ... the value's digits are rounded to P significant
** digits, half to even, as printf rounds the exact value; the first P whose rounding
** lies within the interval is the answer. A double needs at most 17.
*/
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "numfmt.h"

#define LIMBS 100           /* 5^1076 x 2^55 has 770 digits: 86 limbs of 9 */
#define BASE 1000000000u

typedef struct big { uint32_t d[LIMBS]; int n; } big;  /* little-endian limbs */

static void big_mul_small (big *b, uint32_t k) {  /* k < 2^32; limb x k + carry < 2^63 */
  uint64_t carry = 0;
  for (int i = 0; i < b->n; i++) {
    uint64_t t = (uint64_t)b->d[i] * k + carry;
    b->d[i] = (uint32_t)(t % BASE);
    carry = t / BASE;
  }
  while (carry) {
    b->d[b->n++] = (uint32_t)(carry % BASE);
    carry /= BASE;
  }
}

/* r = a x v, v < 10^18 */
static void big_mul_u64 (big *r, const big *a, uint64_t v) {
  uint32_t v0 = (uint32_t)(v % BASE), v1 = (uint32_t)(v / BASE);
  memset(r->d, 0, sizeof(uint32_t) * (size_t)(a->n + 3));
  for (int i = 0; i < a->n; i++) {
    uint64_t t = (uint64_t)a->d[i] * v0 + r->d[i];
    r->d[i] = (uint32_t)(t % BASE);
    uint64_t carry = t / BASE;
    t = (uint64_t)a->d[i] * v1 + r->d[i + 1] + carry;
    r->d[i + 1] = (uint32_t)(t % BASE);
    carry = t / BASE;
    for (int j = i + 2; carry; j++) {
      t = r->d[j] + carry;
      r->d[j] = (uint32_t)(t % BASE);
      carry = t / BASE;
    }
  }
  r->n = a->n + 3;
  while (r->n > 1 && r->d[r->n - 1] == 0) r->n--;
}

/* r = a + s x b (s = 1 or 2), or a - s x b (sign < 0; a is the larger) */
static void big_addsub (big *r, const big *a, const big *b, int s, int sign) {
  int64_t carry = 0;
  int n = a->n > b->n ? a->n : b->n;
  for (int i = 0; i < n; i++) {
    int64_t t = (int64_t)(i < a->n ? a->d[i] : 0) + carry +
                sign * s * (int64_t)(i < b->n ? b->d[i] : 0);
    carry = 0;
    while (t < 0) { t += BASE; carry--; }
    while (t >= (int64_t)BASE) { t -= BASE; carry++; }
    r->d[i] = (uint32_t)t;
  }
  r->n = n;
  if (carry > 0) r->d[r->n++] = (uint32_t)carry;
  while (r->n > 1 && r->d[r->n - 1] == 0) r->n--;
}

/* A decimal value: digits (no leading zero) and the place of the point: value =
** 0.digits x 10^point. */
typedef struct dec { char s[LIMBS * 9 + 1]; int len, point; } dec;

static void big_to_dec (const big *b, int frac, dec *o) {  /* value = b / 10^frac */
  char *p = o->s;
  int i = b->n - 1;
  uint32_t top = b->d[i];
  char tmp[10];
  int k = 0;
  do { tmp[k++] = (char)('0' + top % 10); top /= 10; } while (top);
  while (k) *p++ = tmp[--k];
  for (i--; i >= 0; i--) {
    uint32_t v = b->d[i];
    for (int j = 8; j >= 0; j--) { p[j] = (char)('0' + v % 10); v /= 10; }
    p += 9;
  }
  o->len = (int)(p - o->s);
  o->point = o->len - frac;
  while (o->len > 1 && o->s[o->len - 1] == '0') o->len--;  /* trailing zeros say nothing */
}

/* -1, 0, 1 as x < y, x == y, x > y (both positive) */
static int dec_cmp (const char *xs, int xlen, int xpoint, const dec *y) {
  if (xpoint != y->point) return xpoint < y->point ? -1 : 1;
  int n = xlen > y->len ? xlen : y->len;
  for (int i = 0; i < n; i++) {
    char a = i < xlen ? xs[i] : '0', b = i < y->len ? y->s[i] : '0';
    if (a != b) return a < b ? -1 : 1;
  }
  return 0;
}

/*
** The quick way, for a d that is not an integer and below 2^53: for k = 0, 1, ... 22 the
** integers s near d x 10^k (the product is inexact, so s - 1, s and s + 1, all below 2^53)
** are exact doubles, as is 10^k, and s / 10^k, rounded once, is the double that the
** text s x 10^-k reads back as. The first k at which one of them reads back to d gives
** the fewest digits (an integer, with fewer digits, would read back as itself, not d);
** the rounding of d's exact value to those digits is one of the three, so when only one
** reads back it is the answer. When none does by 10^22, or two do, the exact way
** decides. 0 when it cannot tell.
*/
static int quick (double d, char digits[17], int *exp10) {
  static const double p10[23] = { 1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10,
    1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22 };
  if (!(d < 9007199254740992.0) || d == floor(d)) return 0;
  for (int k = 0; k <= 22; k++) {
    double s = nearbyint(d * p10[k]);
    if (s + 1 >= 9007199254740992.0) return 0;
    int hit = 0;
    double found = 0;
    for (double t = s - 1; t <= s + 1; t++)
      if (t > 0 && t / p10[k] == d) { hit++; found = t; }
    if (hit == 0) continue;
    if (hit > 1) return 0;
    uint64_t u = (uint64_t)found;
    char tmp[20];
    int n = 0;
    while (u) { tmp[n++] = (char)('0' + u % 10); u /= 10; }
    *exp10 = n - 1 - k;
    int z = 0;
    while (z < n - 1 && tmp[z] == '0') z++;  /* trailing zeros of s */
    int len = n - z;
    if (len > 17) return 0;
    for (int i = 0; i < len; i++) digits[i] = tmp[n - 1 - i];
    return len;
  }
  return 0;
}

int tp__dtoa_shortest (double d, char digits[17], int *exp10) {
  int q = quick(d, digits, exp10);
  if (q) return q;
  uint64_t bits;
  memcpy(&bits, &d, sizeof bits);
  uint64_t frac = bits & ((1ull << 52) - 1);
  int ebits = (int)((bits >> 52) & 0x7ff);
  uint64_t m = ebits ? frac | (1ull << 52) : frac;
  int e = ebits ? ebits - 1075 : -1074;
  int lower_closer = frac == 0 && ebits > 1;
  /* scale: values are N x 2^(e-2); B = 2^(e-2) or 5^(2-e) */
  int E = e - 2, fracdigits = 0;
  big B, V, H, L;  /* about 4 KiB of stack, in the slow way only */
  B.d[0] = 1; B.n = 1;
  if (E >= 0) {
    int k = E;
    while (k >= 29) { big_mul_small(&B, 1u << 29); k -= 29; }
    if (k) big_mul_small(&B, 1u << k);
  }
  else {
    int k = -E;
    fracdigits = k;
    while (k >= 13) { big_mul_small(&B, 1220703125u); k -= 13; }  /* 5^13 */
    static const uint32_t p5[13] = { 1, 5, 25, 125, 625, 3125, 15625, 78125, 390625,
                                     1953125, 9765625, 48828125, 244140625 };
    if (k) big_mul_small(&B, p5[k]);
  }
  big_mul_u64(&V, &B, 4 * m);
  big_addsub(&H, &V, &B, 2, 1);
  big_addsub(&L, &V, &B, lower_closer ? 1 : 2, -1);
  dec v, h, l;
  big_to_dec(&V, fracdigits, &v);
  big_to_dec(&H, fracdigits, &h);
  big_to_dec(&L, fracdigits, &l);
  int inclusive = (m & 1) == 0;
  char c[18];
  for (int P = 1; P <= 17; P++) {
    /* v rounded to P digits, half to even */
    int point = v.point, n = P < v.len ? P : v.len;
    memcpy(c, v.s, (size_t)n);
    int up = 0;
    if (P < v.len) {
      char next = v.s[P];
      if (next > '5') up = 1;
      else if (next == '5') up = P + 1 < v.len || ((c[P - 1] - '0') & 1);  /* len: no trailing 0 */
    }
    if (up) {
      int i = n - 1;
      while (i >= 0 && c[i] == '9') c[i--] = '0';
      if (i >= 0) c[i]++;
      else { memmove(c + 1, c, (size_t)n); c[0] = '1'; point++; }  /* 99.9 -> 100 */
    }
    while (n > 1 && c[n - 1] == '0') n--;
    int lo = dec_cmp(c, n, point, &l), hi = dec_cmp(c, n, point, &h);
    if ((lo > 0 || (lo == 0 && inclusive)) && (hi < 0 || (hi == 0 && inclusive))) {
      memcpy(digits, c, (size_t)n);
      *exp10 = point - 1;
      return n;
    }
  }
  /* not reached: 17 digits always read back; the value's own 17 as a last resort */
  int n = v.len < 17 ? v.len : 17;
  memcpy(digits, v.s, (size_t)n);
  *exp10 = v.point - 1;
  return n;
}

size_t tp__fmt_double (double d, char *buf) {
  char *p = buf;
  if (isnan(d)) { memcpy(buf, signbit(d) ? "-nan" : "nan", 5); return strlen(buf); }
  if (signbit(d)) { *p++ = '-'; d = -d; }
  if (isinf(d)) { memcpy(p, "inf", 4); return (size_t)(p - buf) + 3; }
  if (d == 0) { *p++ = '0'; *p = '\0'; return (size_t)(p - buf); }
  char dg[17];
  int x, n = tp__dtoa_shortest(d, dg, &x);
  if (x < -4 || x >= n) {  /* %e style: d.ddde+XX */
    *p++ = dg[0];
    if (n > 1) { *p++ = '.'; memcpy(p, dg + 1, (size_t)n - 1); p += n - 1; }
    *p++ = 'e';
    *p++ = x < 0 ? '-' : '+';
    int ax = x < 0 ? -x : x;
    if (ax >= 100) *p++ = (char)('0' + ax / 100);
    *p++ = (char)('0' + ax / 10 % 10);
    *p++ = (char)('0' + ax % 10);
  }
  else if (x < 0) {  /* 0.000ddd */
    *p++ = '0';
    *p++ = '.';
    for (int i = -1; i > x; i--) *p++ = '0';
    memcpy(p, dg, (size_t)n);
    p += n;
  }
  else {  /* ddd.ddd */
    memcpy(p, dg, (size_t)x + 1);
    p += x + 1;
    if (n > x + 1) {
      *p++ = '.';
      memcpy(p, dg + x + 1, (size_t)(n - x - 1));
      p += n - x - 1;
    }
  }
  *p = '\0';
  return (size_t)(p - buf);
}

size_t tp__fmt_json_real (double d, char *buf) {
  if (!isfinite(d)) { memcpy(buf, "null", 5); return 4; }
  if (d == floor(d) && fabs(d) < 9007199254740992.0) {  /* integral: its digits, ".0" */
    char tmp[20], *p = buf;
    uint64_t u = (uint64_t)fabs(d);
    int k = 0;
    do { tmp[k++] = (char)('0' + u % 10); u /= 10; } while (u);
    if (signbit(d)) *p++ = '-';
    while (k) *p++ = tmp[--k];
    memcpy(p, ".0", 3);
    return (size_t)(p - buf) + 2;
  }
  size_t n = tp__fmt_double(d, buf);
  if (memchr(buf, '.', n) == NULL && memchr(buf, 'e', n) == NULL) {
    memcpy(buf + n, ".0", 3);
    n += 2;
  }
  return n;
}

size_t tp__fmt_json_milli (uint64_t n, char *buf) {
  if (n >= (1ull << 51)) return tp__fmt_json_real((double)n / 1e3, buf);
  char tmp[20], *p = buf;
  uint64_t u = n / 1000;
  unsigned f = (unsigned)(n % 1000);
  int k = 0;
  do { tmp[k++] = (char)('0' + u % 10); u /= 10; } while (u);
  while (k) *p++ = tmp[--k];
  *p++ = '.';
  *p++ = (char)('0' + f / 100);
  if (f % 100) {  /* no trailing zeros: "0.5", "0.25", "0.125"; "3.0" when whole */
    *p++ = (char)('0' + f / 10 % 10);
    if (f % 10) *p++ = (char)('0' + f % 10);
  }
  *p = '\0';
  return (size_t)(p - buf);
}
