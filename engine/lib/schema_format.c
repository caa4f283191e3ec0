/*
** schema_format.c: "format" checkers for the JSON Schema validator. Each checker takes
** a byte string (which may hold NUL) and says whether it is a valid value of the format,
** following the RFCs the 2020-12 specification names (RFC 3339 dates and times, RFC 5321
** mailboxes in their common ASCII form, RFC 1123 host names, RFC 3986 URIs, RFC 4122
** UUIDs, RFC 6901 JSON pointers).
*/
#include <ctype.h>
#include <string.h>
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "schema.h"

static int isdig (char c) { return c >= '0' && c <= '9'; }
static int ishex (char c) { return isdig(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
static int isalph (char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

/* n digits at s, as a number; -1 if any is not a digit */
static int digits (const char *s, size_t n) {
  int v = 0;
  for (size_t i = 0; i < n; i++) {
    if (!isdig(s[i])) return -1;
    v = v * 10 + (s[i] - '0');
  }
  return v;
}

static int leap (int y) { return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0; }

static int check_date (const char *s, size_t n) {
  static const int mdays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  if (n != 10 || s[4] != '-' || s[7] != '-') return 0;
  int y = digits(s, 4), m = digits(s + 5, 2), d = digits(s + 8, 2);
  if (y < 0 || m < 1 || m > 12 || d < 1) return 0;
  int max = mdays[m - 1] + (m == 2 && leap(y));
  return d <= max;
}

/* RFC 3339 full-time: HH:MM:SS[.frac](Z|+HH:MM|-HH:MM); a leap second only at 23:59:60 UTC */
static int check_time (const char *s, size_t n) {
  if (n < 9 || s[2] != ':' || s[5] != ':') return 0;
  int h = digits(s, 2), mi = digits(s + 3, 2), sec = digits(s + 6, 2);
  if (h < 0 || mi < 0 || sec < 0 || h > 23 || mi > 59 || sec > 60) return 0;
  size_t i = 8;
  if (i < n && s[i] == '.') {
    size_t j = ++i;
    while (i < n && isdig(s[i])) i++;
    if (i == j) return 0;
  }
  if (i >= n) return 0;
  int oh = 0, om = 0, sign = 0;
  if (s[i] == 'Z' || s[i] == 'z') {
    if (i + 1 != n) return 0;
  } else if (s[i] == '+' || s[i] == '-') {
    if (n - i != 6 || s[i + 3] != ':') return 0;
    sign = s[i] == '+' ? 1 : -1;
    oh = digits(s + i + 1, 2);
    om = digits(s + i + 4, 2);
    if (oh < 0 || om < 0 || oh > 23 || om > 59) return 0;
  } else {
    return 0;
  }
  if (sec == 60) {
    int utc = ((h * 60 + mi - sign * (oh * 60 + om)) % 1440 + 1440) % 1440;
    if (utc != 23 * 60 + 59) return 0;
  }
  return 1;
}

static int check_datetime (const char *s, size_t n) {
  if (n < 20 || (s[10] != 'T' && s[10] != 't')) return 0;
  return check_date(s, 10) && check_time(s + 11, n - 11);
}

static int check_ipv4 (const char *s, size_t n) {
  size_t i = 0;
  for (int part = 0; part < 4; part++) {
    if (part > 0) {
      if (i >= n || s[i] != '.') return 0;
      i++;
    }
    size_t j = i;
    int v = 0;
    while (i < n && isdig(s[i]) && i - j < 4) v = v * 10 + (s[i++] - '0');
    size_t len = i - j;
    if (len == 0 || len > 3 || v > 255 || (len > 1 && s[j] == '0')) return 0;
  }
  return i == n;
}

static int check_ipv6 (const char *s, size_t n) {
  size_t i = 0;
  int groups = 0, dbl = 0;
  if (n < 2) return 0;
  if (s[0] == ':') {
    if (s[1] != ':') return 0;
    dbl = 1;
    i = 2;
    if (i == n) return 1;
  }
  while (i < n) {
    size_t j = i;
    while (i < n && ishex(s[i]) && i - j < 5) i++;
    size_t len = i - j;
    if (i < n && s[i] == '.') {
      /* trailing dotted IPv4, worth two groups */
      if (!check_ipv4(s + j, n - j)) return 0;
      groups += 2;
      i = n;
      break;
    }
    if (len == 0 || len > 4) return 0;
    groups++;
    if (i == n) break;
    if (s[i] != ':') return 0;
    i++;
    if (i < n && s[i] == ':') {
      if (dbl) return 0;
      dbl = 1;
      i++;
      if (i == n) break;
    } else if (i == n) {
      return 0;
    }
  }
  return dbl ? groups <= 7 : groups == 8;
}

static int check_hostname (const char *s, size_t n) {
  if (n == 0 || n > 253) return 0;
  size_t i = 0;
  while (i < n) {
    size_t j = i;
    while (i < n && s[i] != '.') {
      if (!isalph(s[i]) && !isdig(s[i]) && s[i] != '-') return 0;
      i++;
    }
    size_t len = i - j;
    if (len == 0 || len > 63 || s[j] == '-' || s[i - 1] == '-') return 0;
    if (i < n) {
      i++;
      if (i == n) return 0;
    }
  }
  return 1;
}

static int check_email (const char *s, size_t n) {
  const char *at = NULL;
  for (size_t i = n; i > 0; i--)
    if (s[i - 1] == '@') { at = s + i - 1; break; }
  if (!at) return 0;
  size_t ln = (size_t)(at - s), dn = n - ln - 1;
  if (ln == 0 || ln > 64 || dn == 0) return 0;
  if (s[0] == '"') {
    if (ln < 2 || s[ln - 1] != '"') return 0;
    for (size_t i = 1; i + 1 < ln; i++) {
      unsigned char c = (unsigned char)s[i];
      if (c == '\\') { i++; continue; }
      if (c == '"' || c < 32 || c == 127) return 0;
    }
  } else {
    static const char *atext = "!#$%&'*+-/=?^_`{|}~";
    if (s[0] == '.' || s[ln - 1] == '.') return 0;
    for (size_t i = 0; i < ln; i++) {
      char c = s[i];
      if (c == '.') {
        if (s[i + 1] == '.') return 0;
      } else if (!isalph(c) && !isdig(c) && !strchr(atext, c)) {
        return 0;
      }
    }
  }
  const char *d = at + 1;
  if (d[0] == '[') {
    if (d[dn - 1] != ']') return 0;
    if (dn > 7 && strncmp(d + 1, "IPv6:", 5) == 0) return check_ipv6(d + 6, dn - 7);
    return check_ipv4(d + 1, dn - 2);
  }
  return check_hostname(d, dn);
}

static int check_uuid (const char *s, size_t n) {
  if (n != 36) return 0;
  for (size_t i = 0; i < n; i++) {
    if (i == 8 || i == 13 || i == 18 || i == 23) {
      if (s[i] != '-') return 0;
    } else if (!ishex(s[i])) {
      return 0;
    }
  }
  return 1;
}

/* RFC 3986 characters allowed outside percent-escapes in a URI reference */
static int uri_char (char c) {
  return isalph(c) || isdig(c) || (c && strchr("-._~:/?#[]@!$&'()*+,;=", c));
}

static int check_uri_chars (const char *s, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (s[i] == '%') {
      if (i + 2 >= n || !ishex(s[i + 1]) || !ishex(s[i + 2])) return 0;
      i += 2;
    } else if (!uri_char(s[i])) {
      return 0;
    }
  }
  return 1;
}

/* length of a leading scheme ("http"), 0 if none */
static size_t scheme_len (const char *s, size_t n) {
  if (n == 0 || !isalph(s[0])) return 0;
  size_t i = 1;
  while (i < n && (isalph(s[i]) || isdig(s[i]) || s[i] == '+' || s[i] == '-' || s[i] == '.')) i++;
  return i < n && s[i] == ':' ? i : 0;
}

static int check_uri_reference (const char *s, size_t n) {
  if (!check_uri_chars(s, n)) return 0;
  /* '[' and ']' only around an IP literal host: after a "//" that is the first '/'
  ** (found once: looking for it at every bracket was quadratic in the string) */
  const char *a = memchr(s, '/', n);
  for (size_t i = 0; i < n; i++) {
    if (s[i] == '[' || s[i] == ']') {
      if (!a || a + 1 >= s + n || a[1] != '/' || (size_t)(a - s) > i) return 0;
    }
  }
  return 1;
}

static int check_uri (const char *s, size_t n) {
  size_t sl = scheme_len(s, n);
  if (sl == 0) return 0;
  if (!check_uri_reference(s, n)) return 0;
  /* an authority's userinfo/host part may not hold a second '@' or bad port */
  if (n > sl + 2 && s[sl + 1] == '/' && s[sl + 2] == '/') {
    size_t i = sl + 3, j = i;
    while (i < n && s[i] != '/' && s[i] != '?' && s[i] != '#') i++;
    const char *auth = s + j;
    size_t alen = i - j;
    const char *colon = NULL;
    int in_lit = 0;
    for (size_t k = 0; k < alen; k++) {
      if (auth[k] == '@') colon = NULL;
      else if (auth[k] == '[') in_lit = 1;
      else if (auth[k] == ']') in_lit = 0;
      else if (auth[k] == ':' && !in_lit) colon = auth + k;
    }
    if (colon)
      for (const char *p = colon + 1; p < auth + alen; p++)
        if (!isdig(*p)) return 0;
  }
  return 1;
}

static int check_json_pointer (const char *s, size_t n) {
  if (n > 0 && s[0] != '/') return 0;
  for (size_t i = 0; i < n; i++)
    if (s[i] == '~' && (i + 1 >= n || (s[i + 1] != '0' && s[i + 1] != '1'))) return 0;
  return 1;
}

static int check_rel_json_pointer (const char *s, size_t n) {
  size_t i = 0;
  while (i < n && isdig(s[i])) i++;
  if (i == 0 || (i > 1 && s[0] == '0')) return 0;
  if (i == n) return 1;
  if (s[i] == '#') return i + 1 == n;
  return check_json_pointer(s + i, n - i);
}

/* ISO 8601 duration as RFC 3339 appendix A has it: P[nY][nM][nD][T[nH][nM][nS]] or PnW */
static int check_duration (const char *s, size_t n) {
  if (n < 2 || s[0] != 'P') return 0;
  static const char date_units[] = "YMD", time_units[] = "HMS";
  size_t i = 1;
  int any = 0, intime = 0, last = -1;
  while (i < n) {
    if (s[i] == 'T') {
      if (intime) return 0;
      intime = 1;
      last = -1;
      i++;
      if (i == n) return 0;
      continue;
    }
    size_t j = i;
    while (i < n && isdig(s[i])) i++;
    if (i == j || i == n) return 0;
    char u = s[i++];
    if (u == 'W') {
      if (any || intime || i != n || j != 1) return 0;
      return 1;
    }
    const char *units = intime ? time_units : date_units;
    const char *p = strchr(units, u);
    /* RFC 3339 appendix A: units run on without gaps (Y[M[D]], H[M[S]]) */
    if (!p || u == 0 || (int)(p - units) <= last || (last >= 0 && (int)(p - units) != last + 1)) return 0;
    last = (int)(p - units);
    any = 1;
  }
  return any;
}

/* PCRE2 compiles in one call, ~30 ns a byte here (4 MiB took 120 ms): a longer text is
** not taken for a regular expression, so the check stays under ~10 ms. */
#define REGEX_MAX 262144

static int check_regex (const char *s, size_t n) {
  if (n > REGEX_MAX) return 0;
  int code;
  PCRE2_SIZE off;
  pcre2_code *re = pcre2_compile((PCRE2_SPTR)s, n, PCRE2_UTF, &code, &off, NULL);
  if (!re) return 0;
  pcre2_code_free(re);
  return 1;
}

int tp__schema_format_check (const char *format, const char *s, size_t n) {
  static const struct { const char *name; int (*fn)(const char *, size_t); } checks[] = {
    {"date-time", check_datetime}, {"date", check_date}, {"time", check_time},
    {"email", check_email}, {"hostname", check_hostname},
    {"ipv4", check_ipv4}, {"ipv6", check_ipv6}, {"uri", check_uri},
    {"uri-reference", check_uri_reference}, {"uuid", check_uuid},
    {"json-pointer", check_json_pointer}, {"relative-json-pointer", check_rel_json_pointer},
    {"duration", check_duration}, {"regex", check_regex},
  };
  if (!format || !s) return -1;
  if (memchr(s, 0, n) && strcmp(format, "regex") != 0 && strcmp(format, "json-pointer") != 0) return 0;
  for (size_t i = 0; i < sizeof checks / sizeof checks[0]; i++)
    if (strcmp(format, checks[i].name) == 0) return checks[i].fn(s, n);
  return -1;
}
