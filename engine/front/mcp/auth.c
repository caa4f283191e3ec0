/*
** auth.c: the authenticator of `tidepool mcp --http` (auth.h, which says how it reads
** the config and checks a token), on OpenSSL's libcrypto.
*/
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <jansson.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/param_build.h>
#include <openssl/pem.h>

#include "auth.h"

#define TOKEN_MAX (16 * 1024)     /* bytes of a bearer token (a JWT's whole compact form) */
#define KEYFILE_MAX (1 << 20)     /* bytes of a JWKS or PEM file */
#define SECRET_MAX (64 * 1024)    /* bytes of a secret read from a file */
#define STATIC_MIN 16             /* characters of a static token, at least */
#define HS_MIN 32                 /* bytes of an HS256 secret, at least (RFC 7518 3.2) */
#define RSA_MIN_BITS 2048
#define LEEWAY_DEFAULT 60
#define LEEWAY_MAX 600
#define SHOWN 60                  /* characters of a token's value shown in a message */
#define WELL_KNOWN "/.well-known/oauth-protected-resource"

enum { RS256 = 1, ES256 = 2, HS256 = 4 };
enum { KEY_RSA, KEY_EC, KEY_OCT };

static const struct { const char *name; int alg, kind; } algs[] = {
  { "RS256", RS256, KEY_RSA }, { "ES256", ES256, KEY_EC }, { "HS256", HS256, KEY_OCT },
};
static const char *const kind_names[] = { "an RSA key", "an EC P-256 key", "a shared secret" };

typedef struct tp__mcp_key {
  char *kid;                /* NULL: none (a PEM file, a secret, a JWK without kid) */
  char *from;               /* where it came from, for messages ("keys.json") */
  int kind;                 /* KEY_* */
  int alg;                  /* a JWK's "alg", which it is then limited to; 0: any of its kind */
  EVP_PKEY *pkey;           /* KEY_RSA, KEY_EC */
  unsigned char *secret;    /* KEY_OCT */
  size_t secret_len;
  char *unusable;           /* not NULL: why a JWK of a kind we know cannot be used */
} key;

typedef struct tp__mcp_stoken {
  unsigned char hash[32];   /* SHA-256 of the token */
  char *principal, *scopes;
} stoken;

struct tp__mcp_auth {
  char *resource, *metadata_url, *metadata_path;
  json_t *servers, *scopes_supported;  /* arrays of strings, or NULL */
  char *required;                      /* required_scopes, space-separated ("" none) */
  stoken *tokens;
  size_t ntokens;
  int jwt;                             /* a "jwt" section is there */
  char *issuer, *audience, *principal_claim, *scope_claim;
  unsigned algs;                       /* RS256 | ES256 | HS256 allowed */
  key *keys;
  size_t nkeys;
  int64_t leeway;
};

/* ---- small helpers ---------------------------------------------------------------- */

static void fail (char *err, size_t errlen, const char *fmt, ...)
  __attribute__((format(printf, 3, 4)));
static void fail (char *err, size_t errlen, const char *fmt, ...) {
  if (err == NULL || errlen == 0) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
}

static void say (tp__mcp_auth_result *r, int status, const char *error, const char *fmt, ...)
  __attribute__((format(printf, 4, 5)));
static void say (tp__mcp_auth_result *r, int status, const char *error, const char *fmt, ...) {
  r->status = status;
  snprintf(r->error, sizeof r->error, "%s", error);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(r->description, sizeof r->description, fmt, ap);
  va_end(ap);
}

/* A value from a token or a request, fit for a message and a header: printable ASCII
** but for '"' and '\' (RFC 6750's error_description), others as '?', at most SHOWN
** characters then "...". buf holds SHOWN + 4. */
static const char *shown (const char *s, size_t n, char *buf) {
  size_t o = 0;
  for (size_t i = 0; i < n && o < SHOWN; i++) {
    unsigned char c = (unsigned char)s[i];
    buf[o++] = c >= 0x20 && c < 0x7f && c != '"' && c != '\\' ? (char)c : '?';
  }
  if (n > SHOWN) { memcpy(buf + o, "...", 3); o += 3; }
  buf[o] = '\0';
  return buf;
}
#define SHOWN_BUF (SHOWN + 4)

/* RFC 6749's scope-token: %x21 / %x23-5B / %x5D-7E, at least one. */
static int scope_token (const char *s, size_t n) {
  if (n == 0) return 0;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c < 0x21 || c > 0x7e || c == '"' || c == '\\') return 0;
  }
  return 1;
}

/* The policy splits a list of scopes at spaces and commas (tp_run_set_principal): a
** scope with a comma would reach it as two others. */
static int has_comma (const char *s, size_t n) {
  return memchr(s, ',', n) != NULL;
}

/* Does the space-separated list have the scope s (n bytes)? */
static int has_scope (const char *list, const char *s, size_t n) {
  for (const char *p = list; *p; ) {
    while (*p == ' ') p++;
    size_t k = strcspn(p, " ");
    if (k == n && k && memcmp(p, s, n) == 0) return 1;
    p += k;
  }
  return 0;
}

/* Appends scope s (n bytes) to the list buf (len bytes) unless there; 0, or -1 when it
** does not fit. */
static int add_scope (char *buf, size_t len, const char *s, size_t n) {
  if (has_scope(buf, s, n)) return 0;
  size_t o = strlen(buf);
  if (o + (o ? 1 : 0) + n + 1 > len) return -1;
  if (o) buf[o++] = ' ';
  memcpy(buf + o, s, n);
  buf[o + n] = '\0';
  return 0;
}

/* SHA-256 of n bytes. */
static int sha256 (const void *p, size_t n, unsigned char out[32]) {
  unsigned int len = 0;
  return EVP_Digest(p, n, out, &len, EVP_sha256(), NULL) == 1 && len == 32 ? 0 : -1;
}

/* Strict base64url (RFC 7515 section 2: no padding, no whitespace, unused bits zero).
** out has room for n * 3 / 4 + 1 bytes. The length decoded, or -1. */
static long b64url_decode (const char *s, size_t n, unsigned char *out) {
  if (n % 4 == 1) return -1;
  size_t o = 0;
  uint32_t acc = 0;
  int bits = 0;
  for (size_t i = 0; i < n; i++) {
    int c = (unsigned char)s[i], v;
    if (c >= 'A' && c <= 'Z') v = c - 'A';
    else if (c >= 'a' && c <= 'z') v = c - 'a' + 26;
    else if (c >= '0' && c <= '9') v = c - '0' + 52;
    else if (c == '-') v = 62;
    else if (c == '_') v = 63;
    else return -1;
    acc = (acc << 6) | (uint32_t)v;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out[o++] = (unsigned char)(acc >> bits);
      acc &= (1u << bits) - 1;
    }
  }
  if (acc != 0) return -1;  /* the last character's unused bits */
  return (long)o;
}

/* A time for a message: "2026-11-23T04:00:00Z", or the number when it is no date. */
static const char *when (int64_t t, char *buf, size_t len) {
  struct tm tm;
  time_t tt = (time_t)t;
  if (t < 0 || t > 253402300799LL || gmtime_r(&tt, &tm) == NULL)
    snprintf(buf, len, "%" PRId64 " (seconds since 1970)", t);
  else strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

/* A span for a message: "30 s", "5 min", "3 h", "2 days". */
static const char *span (int64_t s, char *buf, size_t len) {
  if (s < 120) snprintf(buf, len, "%" PRId64 " s", s);
  else if (s < 7200) snprintf(buf, len, "%" PRId64 " min", s / 60);
  else if (s < 172800) snprintf(buf, len, "%" PRId64 " h", s / 3600);
  else snprintf(buf, len, "%" PRId64 " days", s / 86400);
  return buf;
}

/* ---- reading the section ------------------------------------------------------------ */

/* The text of the file path (relative to dir), at most max bytes; NULL with err set. */
static char *slurp (const char *dir, const char *path, size_t max, size_t *len,
                    const char *where, char *err, size_t errlen) {
  char *full = NULL;
  if (path[0] == '/' || dir == NULL) full = strdup(path);
  else if (asprintf(&full, "%s/%s", dir, path) < 0) full = NULL;
  if (full == NULL) {
    fail(err, errlen, "config: %s: out of memory", where);
    return NULL;
  }
  FILE *f = fopen(full, "rb");
  if (f == NULL) {
    fail(err, errlen, "config: %s: cannot read %s: %s%s", where, full, strerror(errno),
         path[0] == '/' ? "" : " (relative paths start at the config file's folder)");
    free(full);
    return NULL;
  }
  char *buf = malloc(max + 1);
  size_t n = buf ? fread(buf, 1, max + 1, f) : 0;
  int bad = buf == NULL || ferror(f);
  fclose(f);
  if (bad || n > max) {
    if (buf == NULL) fail(err, errlen, "config: %s: out of memory", where);
    else if (n > max) fail(err, errlen, "config: %s: %s is larger than %zu bytes", where, full,
                           max);
    else fail(err, errlen, "config: %s: cannot read %s", where, full);
    free(buf);
    free(full);
    return NULL;
  }
  free(full);
  buf[n] = '\0';
  *len = n;
  return buf;
}

/* A secret: "env:NAME" (the variable), "file:PATH" (the file, relative to dir, its
** trailing whitespace cut) or the text itself (for local use: a secret in the config
** file is only as safe as the file). NULL with err set. */
static char *secret_of (const char *v, const char *dir, const char *where, size_t *len,
                        char *err, size_t errlen) {
  char *s;
  size_t n;
  if (strncmp(v, "env:", 4) == 0) {
    const char *e = getenv(v + 4);
    if (e == NULL || e[0] == '\0') {
      fail(err, errlen, "config: %s: the environment variable %s is not set (or is empty)",
           where, v + 4);
      return NULL;
    }
    s = strdup(e);
  }
  else if (strncmp(v, "file:", 5) == 0) {
    if ((s = slurp(dir, v + 5, SECRET_MAX, &n, where, err, errlen)) == NULL) return NULL;
  }
  else s = strdup(v);
  if (s == NULL) {
    fail(err, errlen, "config: %s: out of memory", where);
    return NULL;
  }
  n = strlen(s);
  while (n && (s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == ' ' || s[n - 1] == '\t'))
    s[--n] = '\0';
  *len = n;
  return s;
}

/* The strings of array v joined by spaces into buf, each a scope-token; -1 with err. */
static int scope_list (const json_t *v, const char *where, char *buf, size_t len,
                       char *err, size_t errlen) {
  buf[0] = '\0';
  if (v == NULL) return 0;
  if (!json_is_array(v)) {
    fail(err, errlen, "config: %s: expected an array of scopes, e.g. [\"tools.read\"]", where);
    return -1;
  }
  size_t i;
  const json_t *it;
  json_array_foreach(v, i, it) {
    const char *s = json_string_value(it);
    if (s == NULL || !scope_token(s, json_string_length(it)) || has_comma(s, strlen(s))) {
      fail(err, errlen, "config: %s/%zu: a scope is a non-empty string of printable ASCII "
           "without spaces, commas or quotes", where, i);
      return -1;
    }
    if (add_scope(buf, len, s, strlen(s)) != 0) {
      fail(err, errlen, "config: %s: the scopes take more than %zu bytes", where, len - 1);
      return -1;
    }
  }
  return 0;
}

/* A string member, or NULL; -1 with err when it is there but not a non-empty string. */
static int str_member (const json_t *o, const char *name, const char *where,
                       const char **out, char *err, size_t errlen) {
  const json_t *v = json_object_get(o, name);
  *out = NULL;
  if (v == NULL) return 0;
  if (!json_is_string(v) || json_string_length(v) == 0 ||
      strlen(json_string_value(v)) != json_string_length(v)) {
    fail(err, errlen, "config: %s/%s: expected a non-empty string", where, name);
    return -1;
  }
  *out = json_string_value(v);
  return 0;
}

/* Checks the members of o against the names allowed (NULL-terminated). */
static int known_members (const json_t *o, const char *const *names, const char *where,
                          char *err, size_t errlen) {
  const char *k;
  const json_t *v;
  json_object_foreach((json_t *)o, k, v) {
    size_t i = 0;
    while (names[i] && strcmp(names[i], k) != 0) i++;
    if (names[i] == NULL) {
      char b[SHOWN_BUF], list[300] = "";
      for (size_t j = 0; names[j]; j++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", j ? ", " : "", names[j]);
      fail(err, errlen, "config: %s: unknown field \"%s\"; the fields are: %s", where,
           shown(k, strlen(k), b), list);
      return -1;
    }
  }
  return 0;
}

/* The resource's metadata URL and path (RFC 9728 section 3.1). -1 with err. */
static int resource_urls (tp__mcp_auth *a, char *err, size_t errlen) {
  const char *r = a->resource, *rest;
  if (strncmp(r, "https://", 8) == 0) rest = r + 8;
  else if (strncmp(r, "http://", 7) == 0) rest = r + 7;
  else {
    fail(err, errlen, "config: /auth/resource: \"%s\" is not an http(s) URL; it is the "
         "server's canonical URL, e.g. \"https://mcp.example.com/mcp\"", r);
    return -1;
  }
  size_t host = strcspn(rest, "/");
  if (host == 0 || memchr(rest, '@', host) || strpbrk(r, "?# \t\r\n\"\\")) {
    fail(err, errlen, "config: /auth/resource: \"%s\" must be scheme://host[:port][/path] "
         "without user, query, fragment, spaces or quotes (RFC 8707)", r);
    return -1;
  }
  const char *path = rest + host;
  if (strcmp(path, "/") == 0) path = "";
  if (asprintf(&a->metadata_path, "%s%s", WELL_KNOWN, path) < 0) a->metadata_path = NULL;
  if (a->metadata_path == NULL ||
      asprintf(&a->metadata_url, "%.*s%s", (int)(rest + host - r), r, a->metadata_path) < 0) {
    a->metadata_url = NULL;
    fail(err, errlen, "config: /auth: out of memory");
    return -1;
  }
  return 0;
}

/* A URL list (authorization_servers) copied, or NULL; -1 with err. */
static int url_list (const json_t *v, const char *where, json_t **out, char *err, size_t errlen) {
  *out = NULL;
  if (v == NULL) return 0;
  size_t i;
  const json_t *it;
  if (!json_is_array(v)) {
    fail(err, errlen, "config: %s: expected an array of URLs, e.g. [\"https://auth.example.com\"]",
         where);
    return -1;
  }
  json_array_foreach(v, i, it) {
    const char *s = json_string_value(it);
    if (s == NULL || (strncmp(s, "https://", 8) != 0 && strncmp(s, "http://", 7) != 0)) {
      fail(err, errlen, "config: %s/%zu: expected an http(s) URL (the issuer's identifier)", where,
           i);
      return -1;
    }
  }
  if ((*out = json_deep_copy(v)) == NULL) {
    fail(err, errlen, "config: %s: out of memory", where);
    return -1;
  }
  return 0;
}

static int read_tokens (tp__mcp_auth *a, const json_t *list, const char *dir, char *err,
                        size_t errlen) {
  if (list == NULL) return 0;
  if (!json_is_array(list)) {
    fail(err, errlen, "config: /auth/tokens: expected an array of {\"token\", \"principal\", "
         "\"scopes\"}");
    return -1;
  }
  a->tokens = calloc(json_array_size(list) + 1, sizeof *a->tokens);
  if (a->tokens == NULL) {
    fail(err, errlen, "config: /auth/tokens: out of memory");
    return -1;
  }
  static const char *const names[] = { "token", "principal", "scopes", "description", NULL };
  size_t i;
  const json_t *t;
  json_array_foreach(list, i, t) {
    char where[64];
    snprintf(where, sizeof where, "/auth/tokens/%zu", i);
    if (!json_is_object(t)) {
      fail(err, errlen, "config: %s: expected {\"token\": \"env:NAME\", \"principal\": \"alice\", "
           "\"scopes\": [...]}", where);
      return -1;
    }
    if (known_members(t, names, where, err, errlen) != 0) return -1;
    const char *tv, *pv;
    if (str_member(t, "token", where, &tv, err, errlen) != 0 ||
        str_member(t, "principal", where, &pv, err, errlen) != 0)
      return -1;
    if (tv == NULL || pv == NULL) {
      fail(err, errlen, "config: %s: missing \"%s\" (a token needs \"token\" and \"principal\")",
           where, tv == NULL ? "token" : "principal");
      return -1;
    }
    if (strlen(pv) > 255) {
      fail(err, errlen, "config: %s/principal: longer than 255 bytes", where);
      return -1;
    }
    char scopes[1024];
    strcat(where, "/scopes");
    if (scope_list(json_object_get(t, "scopes"), where, scopes, sizeof scopes, err, errlen) != 0)
      return -1;
    where[strlen(where) - 7] = '\0';
    strcat(where, "/token");
    size_t n;
    char *secret = secret_of(tv, dir, where, &n, err, errlen);
    if (secret == NULL) return -1;
    size_t ok = strspn(secret, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                               "0123456789-._~+/");
    while (secret[ok] == '=') ok++;
    int bad = n < STATIC_MIN ? 1 : ok != n ? 2 : 0;
    stoken *st = &a->tokens[a->ntokens];
    if (!bad && sha256(secret, n, st->hash) != 0) bad = 3;
    OPENSSL_cleanse(secret, n);
    free(secret);
    if (bad) {
      if (bad == 1) fail(err, errlen, "config: %s: a token needs at least %d characters "
                         "(make one with: openssl rand -hex 32)", where, STATIC_MIN);
      else if (bad == 2) fail(err, errlen, "config: %s: a token is sent as \"Bearer <token>\": "
                              "letters, digits and -._~+/ (then = only)", where);
      else fail(err, errlen, "config: %s: cannot hash the token", where);
      return -1;
    }
    for (size_t j = 0; j < a->ntokens; j++)
      if (memcmp(a->tokens[j].hash, st->hash, 32) == 0) {
        fail(err, errlen, "config: %s: the same token as /auth/tokens/%zu", where, j);
        return -1;
      }
    st->principal = strdup(pv);
    st->scopes = strdup(scopes);
    a->ntokens++;  /* freed with the others from here */
    if (st->principal == NULL || st->scopes == NULL) {
      fail(err, errlen, "config: %s: out of memory", where);
      return -1;
    }
  }
  return 0;
}

/* ---- keys --------------------------------------------------------------------------- */

static key *new_key (tp__mcp_auth *a, int kind, const char *kid, const char *from) {
  key *nk = realloc(a->keys, (a->nkeys + 1) * sizeof *nk);
  if (nk == NULL) return NULL;
  a->keys = nk;
  key *k = &nk[a->nkeys];
  memset(k, 0, sizeof *k);
  k->kind = kind;
  k->kid = kid ? strdup(kid) : NULL;
  k->from = strdup(from);
  if ((kid && k->kid == NULL) || k->from == NULL) {
    free(k->kid);
    free(k->from);
    return NULL;
  }
  a->nkeys++;
  return k;
}

/* Why pkey cannot verify as kind (NULL: it can). */
static const char *key_problem (EVP_PKEY *pkey, int *kind, char *buf, size_t len) {
  if (EVP_PKEY_is_a(pkey, "RSA")) {
    *kind = KEY_RSA;
    int bits = EVP_PKEY_get_bits(pkey);
    if (bits < RSA_MIN_BITS) {
      snprintf(buf, len, "an RSA key of %d bits (RS256 needs %d or more)", bits, RSA_MIN_BITS);
      return buf;
    }
    return NULL;
  }
  if (EVP_PKEY_is_a(pkey, "EC")) {
    *kind = KEY_EC;
    char group[64] = "";
    size_t glen = 0;
    if (EVP_PKEY_get_utf8_string_param(pkey, OSSL_PKEY_PARAM_GROUP_NAME, group, sizeof group,
                                       &glen) != 1 || strcmp(group, "prime256v1") != 0) {
      snprintf(buf, len, "an EC key on curve %s (ES256 needs P-256)", group[0] ? group : "?");
      return buf;
    }
    return NULL;
  }
  snprintf(buf, len, "a %s key (RS256 needs RSA, ES256 EC P-256)", EVP_PKEY_get0_type_name(pkey));
  return buf;
}

/* A key from the PEM file path (a public key, "BEGIN PUBLIC KEY"). */
static int read_pem (tp__mcp_auth *a, const char *path, const char *dir, char *err, size_t errlen) {
  size_t n;
  char *text = slurp(dir, path, KEYFILE_MAX, &n, "/auth/jwt/key_file", err, errlen);
  if (text == NULL) return -1;
  BIO *bio = BIO_new_mem_buf(text, (int)n);
  EVP_PKEY *pkey = bio ? PEM_read_bio_PUBKEY(bio, NULL, NULL, NULL) : NULL;
  BIO_free(bio);
  free(text);
  ERR_clear_error();
  if (pkey == NULL) {
    fail(err, errlen, "config: /auth/jwt/key_file: %s holds no public key in PEM "
         "(-----BEGIN PUBLIC KEY-----; openssl pkey -pubout makes one)", path);
    return -1;
  }
  char why[128];
  int kind = KEY_RSA;
  const char *bad = key_problem(pkey, &kind, why, sizeof why);
  key *k = bad ? NULL : new_key(a, kind, NULL, path);
  if (k == NULL) {
    EVP_PKEY_free(pkey);
    if (bad) fail(err, errlen, "config: /auth/jwt/key_file: %s holds %s", path, bad);
    else fail(err, errlen, "config: /auth/jwt/key_file: out of memory");
    return -1;
  }
  k->pkey = pkey;
  return 0;
}

/* The bytes of a JWK's base64url member, or NULL (*why said). */
static unsigned char *jwk_bytes (const json_t *jwk, const char *name, size_t *len,
                                 const char **why) {
  const json_t *v = json_object_get(jwk, name);
  const char *s = json_string_value(v);
  if (s == NULL) { *why = "a member is missing or not a string"; return NULL; }
  size_t n = json_string_length(v);
  unsigned char *out = malloc(n * 3 / 4 + 1);
  if (out == NULL) { *why = "out of memory"; return NULL; }
  long got = b64url_decode(s, n, out);
  if (got <= 0) {
    free(out);
    *why = "a member is not base64url (RFC 7515: no padding)";
    return NULL;
  }
  *len = (size_t)got;
  return out;
}

/* An EVP_PKEY from a JWK of kty RSA or EC, or NULL with *why. */
static EVP_PKEY *jwk_pkey (const json_t *jwk, int kind, const char **why) {
  OSSL_PARAM_BLD *bld = OSSL_PARAM_BLD_new();
  OSSL_PARAM *params = NULL;
  EVP_PKEY_CTX *ctx = NULL, *check = NULL;
  EVP_PKEY *pkey = NULL;
  BIGNUM *bn_n = NULL, *bn_e = NULL;
  unsigned char *x = NULL, *y = NULL, pub[65];
  size_t xl = 0, yl = 0;
  if (bld == NULL) { *why = "out of memory"; goto done; }
  if (kind == KEY_RSA) {
    if ((x = jwk_bytes(jwk, "n", &xl, why)) == NULL || (y = jwk_bytes(jwk, "e", &yl, why)) == NULL)
      goto done;
    bn_n = BN_bin2bn(x, (int)xl, NULL);
    bn_e = BN_bin2bn(y, (int)yl, NULL);
    if (bn_n == NULL || bn_e == NULL ||
        !OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_N, bn_n) ||
        !OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_E, bn_e)) {
      *why = "out of memory";
      goto done;
    }
  }
  else {
    const char *crv = json_string_value(json_object_get(jwk, "crv"));
    if (crv == NULL || strcmp(crv, "P-256") != 0) {
      *why = "an EC key must have crv P-256 (ES256)";
      goto done;
    }
    if ((x = jwk_bytes(jwk, "x", &xl, why)) == NULL || (y = jwk_bytes(jwk, "y", &yl, why)) == NULL)
      goto done;
    if (xl != 32 || yl != 32) {
      *why = "x and y of a P-256 key are 32 bytes each";
      goto done;
    }
    pub[0] = 4;
    memcpy(pub + 1, x, 32);
    memcpy(pub + 33, y, 32);
    if (!OSSL_PARAM_BLD_push_utf8_string(bld, OSSL_PKEY_PARAM_GROUP_NAME, "prime256v1", 0) ||
        !OSSL_PARAM_BLD_push_octet_string(bld, OSSL_PKEY_PARAM_PUB_KEY, pub, sizeof pub)) {
      *why = "out of memory";
      goto done;
    }
  }
  if ((params = OSSL_PARAM_BLD_to_param(bld)) == NULL ||
      (ctx = EVP_PKEY_CTX_new_from_name(NULL, kind == KEY_RSA ? "RSA" : "EC", NULL)) == NULL ||
      EVP_PKEY_fromdata_init(ctx) != 1) {
    *why = "out of memory";
    goto done;
  }
  if (EVP_PKEY_fromdata(ctx, &pkey, EVP_PKEY_PUBLIC_KEY, params) != 1 || pkey == NULL) {
    *why = kind == KEY_RSA ? "OpenSSL refuses n and e" : "x and y are not a point of P-256";
    goto done;
  }
  if ((check = EVP_PKEY_CTX_new_from_pkey(NULL, pkey, NULL)) == NULL ||
      EVP_PKEY_public_check(check) != 1) {
    *why = kind == KEY_RSA ? "n and e are not a valid RSA public key"
                           : "x and y are not a point of P-256";
    EVP_PKEY_free(pkey);
    pkey = NULL;
  }
done:
  EVP_PKEY_CTX_free(check);
  EVP_PKEY_CTX_free(ctx);
  OSSL_PARAM_free(params);
  OSSL_PARAM_BLD_free(bld);
  BN_free(bn_n);
  BN_free(bn_e);
  free(x);
  free(y);
  ERR_clear_error();
  return pkey;
}

/* The keys of the JWKS file path. A key of a kind we do not use (OKP, "use": "enc", an
** alg other than RS256, ES256, HS256) is skipped; one of our kinds that cannot be used
** is kept with the reason, which a token naming its kid is then told. */
static int read_jwks (tp__mcp_auth *a, const char *path, const char *dir, char *err,
                      size_t errlen) {
  const char *where = "/auth/jwt/jwks_file";
  size_t n;
  char *text = slurp(dir, path, KEYFILE_MAX, &n, where, err, errlen);
  if (text == NULL) return -1;
  json_error_t je;
  json_t *doc = json_loadb(text, n, JSON_REJECT_DUPLICATES, &je);
  free(text);
  const json_t *keys = json_object_get(doc, "keys");
  if (!json_is_array(keys)) {
    if (doc == NULL) fail(err, errlen, "config: %s: %s is not JSON: %s at line %d", where, path,
                          je.text, je.line);
    else fail(err, errlen, "config: %s: %s is not a JWKS: expected {\"keys\": [...]}", where, path);
    json_decref(doc);
    return -1;
  }
  size_t i, usable = 0;
  const json_t *jwk;
  int rc = 0;
  char reasons[400] = "";
  json_array_foreach(keys, i, jwk) {
    const char *kty = json_string_value(json_object_get(jwk, "kty"));
    const char *use = json_string_value(json_object_get(jwk, "use"));
    const char *alg = json_string_value(json_object_get(jwk, "alg"));
    const json_t *kidv = json_object_get(jwk, "kid");
    const char *kid = json_string_value(kidv);
    int kind = kty == NULL ? -1 : strcmp(kty, "RSA") == 0 ? KEY_RSA : strcmp(kty, "EC") == 0
               ? KEY_EC : strcmp(kty, "oct") == 0 ? KEY_OCT : -1;
    int kalg = 0;
    if (alg) {
      for (size_t j = 0; j < sizeof algs / sizeof algs[0]; j++)
        if (strcmp(alg, algs[j].name) == 0 && algs[j].kind == kind) kalg = algs[j].alg;
      if (kalg == 0) kind = -1;  /* RS384, PS256, ...: not ours */
    }
    if (kind < 0 || (use && strcmp(use, "sig") != 0)) continue;
    if (kidv && (kid == NULL || strlen(kid) != json_string_length(kidv))) {
      fail(err, errlen, "config: %s: %s: key %zu has a kid that is not a string", where, path, i);
      rc = -1;
      break;
    }
    const char *why = NULL;
    char whybuf[128];
    EVP_PKEY *pkey = NULL;
    unsigned char *secret = NULL;
    size_t slen = 0;
    if (kind == KEY_OCT) {
      secret = jwk_bytes(jwk, "k", &slen, &why);
      if (secret && slen < HS_MIN) {
        snprintf(whybuf, sizeof whybuf, "a secret of %zu bytes (HS256 needs %d or more)", slen,
                 HS_MIN);
        why = whybuf;
      }
    }
    else if ((pkey = jwk_pkey(jwk, kind, &why)) != NULL) {
      int k2;
      why = key_problem(pkey, &k2, whybuf, sizeof whybuf);
    }
    if (why && strcmp(why, "out of memory") == 0) {
      fail(err, errlen, "config: %s: out of memory", where);
      EVP_PKEY_free(pkey);
      free(secret);
      rc = -1;
      break;
    }
    key *k = new_key(a, kind, kid, path);
    if (k == NULL) {
      fail(err, errlen, "config: %s: out of memory", where);
      EVP_PKEY_free(pkey);
      free(secret);
      rc = -1;
      break;
    }
    k->alg = kalg;
    if (why) {
      EVP_PKEY_free(pkey);
      if (secret) OPENSSL_cleanse(secret, slen);
      free(secret);
      k->unusable = strdup(why);
      if (k->unusable == NULL) {
        fail(err, errlen, "config: %s: out of memory", where);
        rc = -1;
        break;
      }
      char b[SHOWN_BUF];
      size_t o = strlen(reasons);
      snprintf(reasons + o, sizeof reasons - o, "; key %zu (kid %s): %s", i,
               kid ? shown(kid, strlen(kid), b) : "none", why);
      continue;
    }
    k->pkey = pkey;
    k->secret = secret;
    k->secret_len = slen;
    usable++;
  }
  json_decref(doc);
  if (rc == 0 && usable == 0) {
    fail(err, errlen, "config: %s: %s has no key tidepool can use (RSA of %d bits or more, "
         "EC P-256, oct of %d bytes or more, \"use\": \"sig\")%s", where, path, RSA_MIN_BITS,
         HS_MIN, reasons);
    rc = -1;
  }
  return rc;
}

static int read_jwt (tp__mcp_auth *a, const json_t *j, const char *dir, char *err, size_t errlen) {
  const char *where = "/auth/jwt";
  static const char *const names[] = {
    "issuer", "audience", "algorithms", "jwks_file", "key_file", "secret", "leeway_s",
    "principal_claim", "scope_claim", "description", NULL };
  if (!json_is_object(j)) {
    fail(err, errlen, "config: %s: expected an object, e.g. {\"issuer\": "
         "\"https://auth.example.com\", \"jwks_file\": \"keys.json\"}", where);
    return -1;
  }
  if (known_members(j, names, where, err, errlen) != 0) return -1;
  const char *iss, *aud, *jwks, *pem, *secret, *pclaim, *sclaim;
  if (str_member(j, "issuer", where, &iss, err, errlen) ||
      str_member(j, "audience", where, &aud, err, errlen) ||
      str_member(j, "jwks_file", where, &jwks, err, errlen) ||
      str_member(j, "key_file", where, &pem, err, errlen) ||
      str_member(j, "secret", where, &secret, err, errlen) ||
      str_member(j, "principal_claim", where, &pclaim, err, errlen) ||
      str_member(j, "scope_claim", where, &sclaim, err, errlen))
    return -1;
  if (iss == NULL) {
    fail(err, errlen, "config: %s: missing \"issuer\" (the iss every token must carry, e.g. "
         "\"https://auth.example.com\")", where);
    return -1;
  }
  if (!jwks && !pem && !secret) {
    fail(err, errlen, "config: %s: no key: give \"jwks_file\" (a JWKS), \"key_file\" (a PEM "
         "public key) or \"secret\" (HS256, \"env:NAME\")", where);
    return -1;
  }
  const json_t *lw = json_object_get(j, "leeway_s");
  a->leeway = LEEWAY_DEFAULT;
  if (lw) {
    if (!json_is_integer(lw) || json_integer_value(lw) < 0 || json_integer_value(lw) > LEEWAY_MAX) {
      fail(err, errlen, "config: %s/leeway_s: expected whole seconds from 0 to %d (default %d)",
           where, LEEWAY_MAX, LEEWAY_DEFAULT);
      return -1;
    }
    a->leeway = json_integer_value(lw);
  }
  a->issuer = strdup(iss);
  a->audience = strdup(aud ? aud : a->resource);
  a->principal_claim = strdup(pclaim ? pclaim : "sub");
  a->scope_claim = strdup(sclaim ? sclaim : "scope");
  if (!a->issuer || !a->audience || !a->principal_claim || !a->scope_claim) {
    fail(err, errlen, "config: %s: out of memory", where);
    return -1;
  }
  if (jwks && read_jwks(a, jwks, dir, err, errlen) != 0) return -1;
  if (pem && read_pem(a, pem, dir, err, errlen) != 0) return -1;
  if (secret) {
    size_t n;
    char *s = secret_of(secret, dir, "/auth/jwt/secret", &n, err, errlen);
    if (s == NULL) return -1;
    if (n < HS_MIN) {
      OPENSSL_cleanse(s, n);
      free(s);
      fail(err, errlen, "config: /auth/jwt/secret: %zu bytes; HS256 needs a secret of %d bytes "
           "or more (openssl rand -hex 32)", n, HS_MIN);
      return -1;
    }
    key *k = new_key(a, KEY_OCT, NULL, "secret");
    if (k == NULL) {
      OPENSSL_cleanse(s, n);
      free(s);
      fail(err, errlen, "config: /auth/jwt/secret: out of memory");
      return -1;
    }
    k->secret = (unsigned char *)s;
    k->secret_len = n;
  }
  unsigned have = 0;
  for (size_t i = 0; i < a->nkeys; i++)
    if (!a->keys[i].unusable)
      have |= a->keys[i].kind == KEY_RSA ? RS256 : a->keys[i].kind == KEY_EC ? ES256 : HS256;
  const json_t *al = json_object_get(j, "algorithms");
  if (al == NULL) a->algs = have;
  else {
    size_t i;
    const json_t *it;
    if (!json_is_array(al) || json_array_size(al) == 0) {
      fail(err, errlen,
           "config: %s/algorithms: expected a non-empty array, e.g. [\"RS256\", \"ES256\"]", where);
      return -1;
    }
    json_array_foreach(al, i, it) {
      const char *s = json_string_value(it);
      size_t k = 0;
      while (k < sizeof algs / sizeof algs[0] && (s == NULL || strcmp(s, algs[k].name) != 0)) k++;
      if (k == sizeof algs / sizeof algs[0]) {
        fail(err, errlen, "config: %s/algorithms/%zu: expected \"RS256\", \"ES256\" or \"HS256\"%s",
             where, i, s && strcmp(s, "none") == 0 ? " (unsigned tokens are never accepted)" : "");
        return -1;
      }
      if (!(have & algs[k].alg)) {
        fail(err, errlen, "config: %s/algorithms/%zu: %s, but no key for it (%s needs %s)", where,
             i, s, s, kind_names[algs[k].kind]);
        return -1;
      }
      a->algs |= (unsigned)algs[k].alg;
    }
  }
  a->jwt = 1;
  return 0;
}

tp__mcp_auth *tp__mcp_auth_new (const json_t *section, const char *dir, char *err, size_t errlen) {
  if (err && errlen) err[0] = '\0';
  if (section == NULL) return NULL;
  if (!json_is_object(section)) {
    fail(err, errlen, "config: /auth: expected an object, e.g. {\"resource\": "
         "\"https://mcp.example.com/mcp\", \"tokens\": [...]}");
    return NULL;
  }
  static const char *const names[] = {
    "resource", "authorization_servers", "scopes_supported", "required_scopes", "tokens",
    "jwt", "description", NULL };
  tp__mcp_auth *a = calloc(1, sizeof *a);
  if (a == NULL) {
    fail(err, errlen, "config: /auth: out of memory");
    return NULL;
  }
  const char *res;
  char scopes[1024];
  if (known_members(section, names, "/auth", err, errlen) != 0 ||
      str_member(section, "resource", "/auth", &res, err, errlen) != 0)
    goto bad;
  if (res == NULL) {
    fail(err, errlen, "config: /auth: missing \"resource\" (the server's canonical URL, which "
         "tokens must name as their audience, e.g. \"https://mcp.example.com/mcp\")");
    goto bad;
  }
  if ((a->resource = strdup(res)) == NULL) {
    fail(err, errlen, "config: /auth: out of memory");
    goto bad;
  }
  if (resource_urls(a, err, errlen) != 0 ||
      url_list(json_object_get(section, "authorization_servers"), "/auth/authorization_servers",
               &a->servers, err, errlen) != 0 ||
      scope_list(json_object_get(section, "scopes_supported"), "/auth/scopes_supported", scopes,
                 sizeof scopes, err, errlen) != 0)
    goto bad;
  if (json_object_get(section, "scopes_supported") &&
      (a->scopes_supported = json_deep_copy(json_object_get(section,
                                                            "scopes_supported"))) == NULL) {
    fail(err, errlen, "config: /auth: out of memory");
    goto bad;
  }
  if (scope_list(json_object_get(section, "required_scopes"), "/auth/required_scopes", scopes,
                 sizeof scopes, err, errlen) != 0)
    goto bad;
  if ((a->required = strdup(scopes)) == NULL) {
    fail(err, errlen, "config: /auth: out of memory");
    goto bad;
  }
  if (read_tokens(a, json_object_get(section, "tokens"), dir, err, errlen) != 0) goto bad;
  if (json_object_get(section, "jwt") &&
      read_jwt(a, json_object_get(section, "jwt"), dir, err, errlen) != 0)
    goto bad;
  if (a->ntokens == 0 && !a->jwt) {
    fail(err, errlen, "config: /auth: no credential would be accepted: give \"tokens\" "
         "(static bearer tokens) or \"jwt\" (tokens of an authorization server)");
    goto bad;
  }
  return a;
bad:
  tp__mcp_auth_free(a);
  return NULL;
}

void tp__mcp_auth_free (tp__mcp_auth *a) {
  if (a == NULL) return;
  for (size_t i = 0; i < a->ntokens; i++) {
    free(a->tokens[i].principal);
    free(a->tokens[i].scopes);
  }
  free(a->tokens);
  for (size_t i = 0; i < a->nkeys; i++) {
    key *k = &a->keys[i];
    free(k->kid);
    free(k->from);
    free(k->unusable);
    EVP_PKEY_free(k->pkey);
    if (k->secret) OPENSSL_cleanse(k->secret, k->secret_len);
    free(k->secret);
  }
  free(a->keys);
  free(a->resource);
  free(a->metadata_url);
  free(a->metadata_path);
  json_decref(a->servers);
  json_decref(a->scopes_supported);
  free(a->required);
  free(a->issuer);
  free(a->audience);
  free(a->principal_claim);
  free(a->scope_claim);
  free(a);
}

/* ---- signatures --------------------------------------------------------------------- */

static int verify_pkey (EVP_PKEY *pkey, const unsigned char *msg, size_t n,
                        const unsigned char *sig, size_t slen) {
  EVP_MD_CTX *c = EVP_MD_CTX_new();
  int ok = c && EVP_DigestVerifyInit(c, NULL, EVP_sha256(), NULL, pkey) == 1 &&
           EVP_DigestVerify(c, sig, slen, msg, n) == 1;
  EVP_MD_CTX_free(c);
  ERR_clear_error();
  return ok;
}

/* ES256: JOSE's signature is r || s, 32 bytes each (RFC 7518 section 3.4); OpenSSL
** verifies DER's ECDSA-Sig-Value. */
static int verify_es256 (EVP_PKEY *pkey, const unsigned char *msg, size_t n,
                         const unsigned char *sig, size_t slen) {
  if (slen != 64) return 0;
  ECDSA_SIG *es = ECDSA_SIG_new();
  BIGNUM *r = BN_bin2bn(sig, 32, NULL), *s = BN_bin2bn(sig + 32, 32, NULL);
  unsigned char *der = NULL;
  int dlen = -1;
  if (es && r && s && ECDSA_SIG_set0(es, r, s) == 1) {
    r = s = NULL;  /* es owns them */
    dlen = i2d_ECDSA_SIG(es, &der);
  }
  BN_free(r);
  BN_free(s);
  ECDSA_SIG_free(es);
  int ok = dlen > 0 && verify_pkey(pkey, msg, n, der, (size_t)dlen);
  OPENSSL_free(der);
  ERR_clear_error();
  return ok;
}

static int verify_hs256 (const key *k, const unsigned char *msg, size_t n,
                         const unsigned char *sig, size_t slen) {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int mlen = 0;
  if (HMAC(EVP_sha256(), k->secret, (int)k->secret_len, msg, n, mac, &mlen) == NULL ||
      mlen != 32) {
    ERR_clear_error();
    return 0;
  }
  return slen == 32 && CRYPTO_memcmp(mac, sig, 32) == 0;
}

/* ---- checking a request ------------------------------------------------------------- */

/* Finds the key for alg and kid and checks the signature. 0, or -1 with r said. */
static int check_signature (const tp__mcp_auth *a, int alg, const char *algname, const char *kid,
                            const unsigned char *msg, size_t n, const unsigned char *sig,
                            size_t slen, tp__mcp_auth_result *r) {
  int kind = alg == RS256 ? KEY_RSA : alg == ES256 ? KEY_EC : KEY_OCT;
  char b[SHOWN_BUF];
  int named = 0;  /* keys with the token's kid */
  if (kid)
    for (size_t i = 0; i < a->nkeys; i++)
      if (a->keys[i].kid && strcmp(a->keys[i].kid, kid) == 0) named++;
  const key *mismatch = NULL, *unusable = NULL;
  int tried = 0, fallback = kid && !named;
  for (size_t i = 0; i < a->nkeys; i++) {
    const key *k = &a->keys[i];
    /* a token's kid picks the keys with that kid; keys without kid (a PEM file, a
    ** secret) serve any token when no key has its kid */
    if (named ? !(k->kid && strcmp(k->kid, kid) == 0) : kid && k->kid) continue;
    if (k->kind != kind || (k->alg && k->alg != alg)) {
      if (!fallback) mismatch = k;
      continue;
    }
    if (k->unusable) { unusable = k; continue; }
    tried++;
    int ok = alg == RS256 ? verify_pkey(k->pkey, msg, n, sig, slen)
           : alg == ES256 ? verify_es256(k->pkey, msg, n, sig, slen)
           : verify_hs256(k, msg, n, sig, slen);
    if (ok) return 0;
  }
  if (tried) {
    if (kid) say(r, 401, "invalid_token", "bad signature: the token does not verify with key %s "
                 "(%s); it was altered or signed by another key", shown(kid, strlen(kid), b),
                 algname);
    else say(r, 401, "invalid_token", "bad signature: the token does not verify with any %s "
             "key of the config; it was altered or signed by another key", algname);
    return -1;
  }
  if (unusable) {
    say(r, 401, "invalid_token", "key %s of %s cannot be used: %s",
        unusable->kid ? shown(unusable->kid, strlen(unusable->kid), b) : "(no kid)",
        unusable->from, unusable->unusable);
    return -1;
  }
  if (mismatch) {
    char b2[SHOWN_BUF];
    const char *what = mismatch->alg && mismatch->kind == kind ? "is limited to another alg"
                     : mismatch->kind == KEY_RSA ? "is an RSA key"
                     : mismatch->kind == KEY_EC ? "is an EC key" : "is a shared secret";
    say(r, 401, "invalid_token", "alg %s does not fit key %s, which %s", algname,
        mismatch->kid ? shown(mismatch->kid, strlen(mismatch->kid), b2) : "(no kid)", what);
    return -1;
  }
  if (kid) {
    char list[120] = "";
    for (size_t i = 0; i < a->nkeys; i++)
      if (a->keys[i].kid && strlen(list) + strlen(a->keys[i].kid) + 3 < sizeof list)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", list[0] ? ", " : "",
                 shown(a->keys[i].kid, strlen(a->keys[i].kid), b));
    say(r, 401, "invalid_token", "no key with kid %s (the keys: %s); the issuer may have "
        "rotated its keys: update the JWKS file", shown(kid, strlen(kid), b),
        list[0] ? list : "none with a kid");
  }
  else say(r, 401, "invalid_token", "no %s key in the config for a token without kid", algname);
  return -1;
}

/* A NumericDate claim: 1 with *t, 0 absent, -1 not a number. */
static int date_claim (const json_t *payload, const char *name, int64_t *t) {
  const json_t *v = json_object_get(payload, name);
  if (v == NULL) return 0;
  if (json_is_integer(v)) { *t = json_integer_value(v); return 1; }
  if (json_is_real(v)) {
    double d = json_real_value(v);
    if (!isfinite(d) || d > 9.2e18 || d < -9.2e18) return -1;
    *t = (int64_t)floor(d);
    return 1;
  }
  return -1;
}

/* Decodes part n (header or payload) of a token into a JSON object. NULL with r said. */
static json_t *json_part (const char *s, size_t n, const char *what, tp__mcp_auth_result *r) {
  unsigned char *buf = malloc(n * 3 / 4 + 1);
  if (buf == NULL) { say(r, 401, "invalid_token", "out of memory"); return NULL; }
  long len = b64url_decode(s, n, buf);
  if (len <= 0) {
    free(buf);
    say(r, 401, "invalid_token", "malformed JWT: its %s is not base64url (RFC 7515: A-Z a-z "
        "0-9 - _, no padding)", what);
    return NULL;
  }
  json_error_t je;
  json_t *v = json_loadb((const char *)buf, (size_t)len, JSON_REJECT_DUPLICATES, &je);
  free(buf);
  if (!json_is_object(v)) {
    char b[SHOWN_BUF];
    if (v == NULL) say(r, 401, "invalid_token", "malformed JWT: its %s is not JSON: %s", what,
                       shown(je.text, strlen(je.text), b));
    else say(r, 401, "invalid_token", "malformed JWT: its %s is not a JSON object", what);
    json_decref(v);
    return NULL;
  }
  return v;
}

/* The claims of a verified payload: iss, aud, exp, nbf, iat, principal, scopes. A scope
** with a comma is left out: the policy would read it as two scopes the issuer never
** granted. */
static int check_claims (const tp__mcp_auth *a, const json_t *p, int64_t now,
                         tp__mcp_auth_result *r) {
  char b[SHOWN_BUF], b2[SHOWN_BUF], t1[64], t2[32];
  const json_t *iss = json_object_get(p, "iss");
  if (!json_is_string(iss)) {
    say(r, 401, "invalid_token", "the token has no iss claim; this server takes tokens of %s",
        shown(a->issuer, strlen(a->issuer), b));
    return -1;
  }
  if (json_string_length(iss) != strlen(a->issuer) ||
      memcmp(json_string_value(iss), a->issuer, strlen(a->issuer)) != 0) {
    say(r, 401, "invalid_token", "the issuer is %s, this server takes tokens of %s",
        shown(json_string_value(iss), json_string_length(iss), b),
        shown(a->issuer, strlen(a->issuer), b2));
    return -1;
  }
  const json_t *aud = json_object_get(p, "aud");
  int found = 0;
  if (json_is_string(aud)) found = strcmp(json_string_value(aud), a->audience) == 0 &&
                                   json_string_length(aud) == strlen(a->audience);
  else if (json_is_array(aud)) {
    size_t i;
    const json_t *it;
    json_array_foreach(aud, i, it)
      if (json_is_string(it) && json_string_length(it) == strlen(a->audience) &&
          strcmp(json_string_value(it), a->audience) == 0) found = 1;
  }
  if (!found) {
    if (aud == NULL) say(r, 401, "invalid_token", "the token has no aud claim; this server is %s",
                         shown(a->audience, strlen(a->audience), b));
    else if (json_is_string(aud)) say(r, 401, "invalid_token",
                                      "the audience is %s, this server is %s",
                                      shown(json_string_value(aud), json_string_length(aud), b),
                                      shown(a->audience, strlen(a->audience), b2));
    else if (json_is_array(aud) && json_is_string(json_array_get(aud, 0)))
      say(r, 401, "invalid_token", "the audience is %s%s, this server is %s",
          shown(json_string_value(json_array_get(aud, 0)),
                json_string_length(json_array_get(aud, 0)), b),
          json_array_size(aud) > 1 ? " and others" : "",
          shown(a->audience, strlen(a->audience), b2));
    else say(r, 401, "invalid_token", "the aud claim is not a string or array of strings; this "
             "server is %s", shown(a->audience, strlen(a->audience), b));
    return -1;
  }
  int64_t exp, nbf, iat;
  int he = date_claim(p, "exp", &exp), hn = date_claim(p, "nbf", &nbf);
  int hi = date_claim(p, "iat", &iat);
  if (he < 0 || hn < 0 || hi < 0) {
    say(r, 401, "invalid_token", "the %s claim is not a number of seconds since 1970 (NumericDate)",
        he < 0 ? "exp" : hn < 0 ? "nbf" : "iat");
    return -1;
  }
  if (he == 0) {
    say(r, 401, "invalid_token", "the token has no exp claim; this server takes only tokens "
        "that expire");
    return -1;
  }
  if (now - a->leeway >= exp) {
    say(r, 401, "invalid_token", "the token expired at %s (%s ago); get a new one",
        when(exp, t1, sizeof t1), span(now - exp, t2, sizeof t2));
    return -1;
  }
  if (hn && now + a->leeway < nbf) {
    say(r, 401, "invalid_token", "the token is not valid before %s (in %s); check the clocks",
        when(nbf, t1, sizeof t1), span(nbf - now, t2, sizeof t2));
    return -1;
  }
  if (hi && now + a->leeway < iat) {
    say(r, 401, "invalid_token", "the token was issued in the future, at %s (in %s); check "
        "the clocks", when(iat, t1, sizeof t1), span(iat - now, t2, sizeof t2));
    return -1;
  }
  const json_t *who = json_object_get(p, a->principal_claim);
  const char *w = json_string_value(who);
  size_t wl = w ? json_string_length(who) : 0;
  int ctl = 0;
  for (size_t i = 0; i < wl; i++) ctl |= (unsigned char)w[i] < 0x20 || w[i] == 0x7f;
  if (w == NULL || wl == 0 || wl >= sizeof r->principal || ctl) {
    say(r, 401, "invalid_token", "the %s claim (the caller) is %s",
        shown(a->principal_claim, strlen(a->principal_claim), b),
        w == NULL ? "missing or not a string" : wl == 0 ? "empty"
        : ctl ? "not printable" : "longer than 255 bytes");
    return -1;
  }
  memcpy(r->principal, w, wl + 1);
  const json_t *sc = json_object_get(p, a->scope_claim);
  const char *scname = a->scope_claim;
  if (sc == NULL && strcmp(a->scope_claim, "scope") == 0) {
    sc = json_object_get(p, "scp");
    scname = "scp";
  }
  r->scopes[0] = '\0';
  int bad = 0;
  if (json_is_string(sc)) {
    const char *s = json_string_value(sc);
    if (strlen(s) != json_string_length(sc)) bad = 1;
    for (const char *q = s; !bad && *q; ) {
      while (*q == ' ') q++;
      size_t k = strcspn(q, " ");
      if (k && !scope_token(q, k)) bad = 1;
      else if (k && !has_comma(q, k) && add_scope(r->scopes, sizeof r->scopes, q, k) != 0) bad = 1;
      q += k;
    }
  }
  else if (json_is_array(sc)) {
    size_t i;
    const json_t *it;
    json_array_foreach(sc, i, it) {
      const char *s = json_string_value(it);
      size_t k = s ? json_string_length(it) : 0;
      if (s == NULL || !scope_token(s, k)) bad = 1;
      else if (!has_comma(s, k) && add_scope(r->scopes, sizeof r->scopes, s, k) != 0) bad = 1;
    }
  }
  else if (sc) bad = 1;
  if (bad) {
    r->principal[0] = r->scopes[0] = '\0';
    say(r, 401, "invalid_token", "the %s claim is not scopes (a string of scopes separated by "
        "spaces, or an array of them, printable ASCII, %zu bytes at most)",
        shown(scname, strlen(scname), b), sizeof r->scopes - 1);
    return -1;
  }
  return 0;
}

/* Checks a JWT (len bytes); 0 with r's principal and scopes, or -1 with r said. */
static int check_jwt (const tp__mcp_auth *a, const char *tok, size_t len, int64_t now,
                      tp__mcp_auth_result *r) {
  const char *d1 = memchr(tok, '.', len);
  const char *d2 = d1 ? memchr(d1 + 1, '.', len - (size_t)(d1 + 1 - tok)) : NULL;
  if (d2 == NULL || memchr(d2 + 1, '.', len - (size_t)(d2 + 1 - tok))) {
    size_t dots = 0;
    for (size_t i = 0; i < len; i++) dots += tok[i] == '.';
    say(r, 401, "invalid_token", dots == 4 ? "the token is encrypted (JWE); this server takes "
        "signed JWTs (JWS) only" : "malformed JWT: expected three base64url parts separated by "
        "dots (header.payload.signature)");
    return -1;
  }
  json_t *h = json_part(tok, (size_t)(d1 - tok), "header", r);
  if (h == NULL) return -1;
  char b[SHOWN_BUF];
  int rc = -1;
  json_t *p = NULL;
  unsigned char *sig = NULL;
  const json_t *algv = json_object_get(h, "alg"), *kidv = json_object_get(h, "kid");
  const char *alg = json_string_value(algv), *typ = json_string_value(json_object_get(h, "typ"));
  const char *cty = json_string_value(json_object_get(h, "cty"));
  int ai = -1;
  for (size_t i = 0; alg && i < sizeof algs / sizeof algs[0]; i++)
    if (strcmp(alg, algs[i].name) == 0 && json_string_length(algv) == 5) ai = (int)i;
  if (alg == NULL) {
    say(r, 401, "invalid_token", "the JWT header has no alg");
    goto done;
  }
  if (strcasecmp(alg, "none") == 0) {
    say(r, 401, "invalid_token", "alg none (an unsigned token) is never accepted");
    goto done;
  }
  if (ai < 0 || !(a->algs & (unsigned)algs[ai].alg)) {
    char list[32] = "";
    for (size_t i = 0; i < sizeof algs / sizeof algs[0]; i++)
      if (a->algs & (unsigned)algs[i].alg)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", list[0] ? ", " : "",
                 algs[i].name);
    say(r, 401, "invalid_token", "alg %s is not accepted here (accepted: %s)",
        shown(alg, json_string_length(algv), b), list);
    goto done;
  }
  if (json_object_get(h, "crit")) {
    say(r, 401, "invalid_token", "the JWT header has crit (extensions this server does not "
        "know, RFC 7515 section 4.1.11)");
    goto done;
  }
  if ((cty && strcasecmp(cty, "JWT") == 0) || json_object_get(h, "enc")) {
    say(r, 401, "invalid_token", "nested or encrypted JWTs are not accepted");
    goto done;
  }
  if (json_object_get(h, "typ") && (typ == NULL ||
      (strcasecmp(typ, "JWT") != 0 && strcasecmp(typ, "at+jwt") != 0 &&
       strcasecmp(typ, "application/at+jwt") != 0 && strcasecmp(typ, "application/jwt") != 0))) {
    say(r, 401, "invalid_token", "typ %s is not a JWT (expected JWT or at+jwt)",
        typ ? shown(typ, strlen(typ), b) : "(not a string)");
    goto done;
  }
  if (kidv && (!json_is_string(kidv) ||
               strlen(json_string_value(kidv)) != json_string_length(kidv))) {
    say(r, 401, "invalid_token", "the JWT header's kid is not a string");
    goto done;
  }
  size_t slen_b64 = len - (size_t)(d2 + 1 - tok);
  if (slen_b64 == 0) {
    say(r, 401, "invalid_token", "the token has no signature");
    goto done;
  }
  if ((sig = malloc(slen_b64 * 3 / 4 + 1)) == NULL) {
    say(r, 401, "invalid_token", "out of memory");
    goto done;
  }
  long slen = b64url_decode(d2 + 1, slen_b64, sig);
  if (slen <= 0) {
    say(r, 401, "invalid_token", "malformed JWT: its signature is not base64url (RFC 7515: "
        "A-Z a-z 0-9 - _, no padding)");
    goto done;
  }
  if (check_signature(a, algs[ai].alg, algs[ai].name, json_string_value(kidv),
                      (const unsigned char *)tok, (size_t)(d2 - tok), sig, (size_t)slen, r) != 0)
    goto done;
  if ((p = json_part(d1 + 1, (size_t)(d2 - d1 - 1), "payload", r)) == NULL) goto done;
  rc = check_claims(a, p, now, r);
done:
  free(sig);
  json_decref(h);
  json_decref(p);
  return rc;
}

/* tp__mcp_auth_check, and tp__mcp_auth_check_scope when config is 0: the scopes needed
** are then required's alone, not the config's required_scopes as well. */
static int check (tp__mcp_auth *a, const char *authorization, const char *required, int config,
                  int64_t now, tp__mcp_auth_result *out) {
  memset(out, 0, sizeof *out);
  out->status = 200;
  if (a == NULL) return 200;
  /* what this request needs: the config's scopes (unless not config) and the caller's */
  for (int pass = !config; pass < 2; pass++) {  /* a list too long is cut (both are read) */
    const char *list = pass == 0 ? a->required : required ? required : "";
    for (const char *q = list; *q; ) {
      while (*q == ' ') q++;
      size_t k = strcspn(q, " ");
      if (k) (void)add_scope(out->needed, sizeof out->needed, q, k);
      q += k;
    }
  }
  if (authorization == NULL || authorization[0] == '\0') {
    say(out, 401, "", "no credential: send the header Authorization: Bearer <token>");
    return 401;
  }
  const char *s = authorization;
  while (*s == ' ' || *s == '\t') s++;
  if (strncasecmp(s, "Bearer", 6) != 0 || (s[6] != ' ' && s[6] != '\t' && s[6] != '\0')) {
    char b[SHOWN_BUF];
    size_t n = strcspn(s, " \t");
    say(out, 401, "invalid_request", "the Authorization header's scheme is %s; this server "
        "takes Authorization: Bearer <token>", n ? shown(s, n > 20 ? 20 : n, b) : "empty");
    return 401;
  }
  s += 6;
  while (*s == ' ' || *s == '\t') s++;
  size_t n = strlen(s);
  while (n && (s[n - 1] == ' ' || s[n - 1] == '\t')) n--;
  if (n > TOKEN_MAX) {
    say(out, 401, "invalid_token", "the token is %zu bytes, more than this server takes "
        "(%d)", n, TOKEN_MAX);
    return 401;
  }
  size_t ok = strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~+/");
  while (ok < n && s[ok] == '=') ok++;
  if (n == 0 || ok != n) {
    say(out, 401, "invalid_request", n == 0 ? "Authorization: Bearer without a token"
        : "the bearer token has a character RFC 6750 does not allow (letters, digits, -._~+/ "
        "then =)");
    return 401;
  }
  /* static tokens: every one compared, in constant time, whatever matched before */
  size_t hit = (size_t)-1;
  if (a->ntokens) {
    unsigned char h[32];
    if (sha256(s, n, h) != 0) {
      say(out, 401, "invalid_token", "out of memory");
      return 401;
    }
    for (size_t i = 0; i < a->ntokens; i++)
      if (CRYPTO_memcmp(h, a->tokens[i].hash, 32) == 0) hit = i;
  }
  if (hit != (size_t)-1) {
    snprintf(out->principal, sizeof out->principal, "%s", a->tokens[hit].principal);
    snprintf(out->scopes, sizeof out->scopes, "%s", a->tokens[hit].scopes);
  }
  else if (a->jwt && memchr(s, '.', n)) {
    if (check_jwt(a, s, n, now, out) != 0) {
      out->principal[0] = out->scopes[0] = '\0';
      return out->status;
    }
  }
  else {
    say(out, 401, "invalid_token", a->jwt ? "unknown token: not one of the config's tokens, "
        "and not a JWT" : "unknown token: not one of the config's tokens");
    return 401;
  }
  /* scopes: every one of required_scopes (unless not config) and required */
  char missing[200] = "";
  int nmiss = 0;
  for (int pass = !config; pass < 2; pass++) {
    const char *list = pass == 0 ? a->required : required ? required : "";
    for (const char *q = list; *q; ) {
      while (*q == ' ') q++;
      size_t k = strcspn(q, " ");
      if (k && !has_scope(out->scopes, q, k) && !has_scope(missing, q, k)) {
        nmiss++;
        add_scope(missing, sizeof missing, q, k);
      }
      q += k;
    }
  }
  if (nmiss) {
    char b[SHOWN_BUF];
    say(out, 403, "insufficient_scope", "%s lacks the scope%s %s (it has: %s)",
        shown(out->principal, strlen(out->principal), b), nmiss > 1 ? "s" : "", missing,
        out->scopes[0] ? out->scopes : "none");
    return 403;
  }
  out->status = 200;
  out->error[0] = out->description[0] = out->needed[0] = '\0';
  return 200;
}

int tp__mcp_auth_check (tp__mcp_auth *a, const char *authorization, const char *required,
                        int64_t now, tp__mcp_auth_result *out) {
  return check(a, authorization, required, 1, now, out);
}

int tp__mcp_auth_check_scope (tp__mcp_auth *a, const char *authorization, const char *scope,
                              int64_t now, tp__mcp_auth_result *out) {
  return check(a, authorization, scope, 0, now, out);
}

/* ---- resource server (RFC 9728, RFC 6750) ---------------------------------------------- */

char *tp__mcp_auth_resource_metadata (const tp__mcp_auth *a) {
  json_t *o = json_object(), *m = json_array();
  int bad = o == NULL || m == NULL;
  if (!bad && a) {
    bad |= json_object_set_new(o, "resource", json_string(a->resource)) != 0;
    if (a->servers) bad |= json_object_set(o, "authorization_servers", a->servers) != 0;
    if (a->scopes_supported) bad |= json_object_set(o, "scopes_supported",
                                                    a->scopes_supported) != 0;
  }
  bad |= m == NULL || json_array_append_new(m, json_string("header")) != 0;
  if (!bad) {
    bad |= json_object_set_new(o, "bearer_methods_supported", m) != 0;
    m = NULL;
  }
  char *text = bad ? NULL : json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
  json_decref(m);
  json_decref(o);
  return text;
}

/* Appends s to the quoted-string being built, cleaned (shown's rules, no cut). */
static size_t quoted (char *out, size_t o, const char *s) {
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    out[o++] = c >= 0x20 && c < 0x7f && c != '"' && c != '\\' ? (char)c : '?';
  }
  return o;
}

char *tp__mcp_auth_challenge (const tp__mcp_auth *a, const tp__mcp_auth_result *r) {
  const char *url = a ? a->metadata_url : "";
  size_t len = 64 + strlen(url) + sizeof r->error + sizeof r->description + sizeof r->needed;
  char *out = malloc(len);
  if (out == NULL) return NULL;
  size_t o = (size_t)snprintf(out, len, "Bearer resource_metadata=\"");
  o = quoted(out, o, url);
  out[o++] = '"';
  if (r && r->error[0]) {
    o += (size_t)snprintf(out + o, len - o, ", error=\"");
    o = quoted(out, o, r->error);
    out[o++] = '"';
    if (r->description[0]) {
      o += (size_t)snprintf(out + o, len - o, ", error_description=\"");
      o = quoted(out, o, r->description);
      out[o++] = '"';
    }
  }
  if (r && r->needed[0]) {
    o += (size_t)snprintf(out + o, len - o, ", scope=\"");
    o = quoted(out, o, r->needed);
    out[o++] = '"';
  }
  out[o] = '\0';
  return out;
}

const char *tp__mcp_auth_resource (const tp__mcp_auth *a) {
  return a ? a->resource : NULL;
}

const char *tp__mcp_auth_metadata_path (const tp__mcp_auth *a) {
  return a ? a->metadata_path : NULL;
}
