/*
** fuzz_auth.c: the HTTP authenticator (engine/front/mcp/auth.c) on hostile Authorization
** headers, against an authenticator with static tokens, a JWKS of two keys (RSA 2048 and
** P-256, made at start) and an HS256 secret.
**
** The input's first byte picks what the rest is:
** - even: the Authorization header itself (any bytes up to a NUL);
** - odd: a JWT's header and payload JSON texts, split at the first newline, signed for
**   real (bits 1-2: RS256 by the JWKS's key, ES256 by its key, HS256 by the secret, or
**   the bytes "sig"), so that inputs get past the signature into the claims.
** Asserted, for every input:
** - the status is 200, 401 or 403; 200 has a principal, the required scopes, and no
**   error or description; 401 has no principal or scopes and its error is "",
**   invalid_request or invalid_token; 403 keeps the caller and says insufficient_scope;
**   both have a description;
** - the challenge starts with Bearer resource_metadata="...", and holds printable ASCII
**   only, with no quote inside a value;
** - the same header checked again gives the same result (nothing depends on state).
*/
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rsa.h>

#include "mcp/auth.h"
#include "fuzz.h"

#define NOW 1800000000LL
#define SECRET "0123456789abcdef0123456789abcdef-fuzz"

static tp__mcp_auth *auth;
static EVP_PKEY *rsa, *ec;

static char *b64url (const unsigned char *p, size_t n) {
  const char *abc = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  char *out = malloc(n * 4 / 3 + 4), *o = out;
  uint32_t acc = 0;
  int bits = 0;
  for (size_t i = 0; i < n; i++) {
    acc = (acc << 8) | p[i];
    bits += 8;
    while (bits >= 6) { bits -= 6; *o++ = abc[(acc >> bits) & 63]; }
  }
  if (bits) *o++ = abc[(acc << (6 - bits)) & 63];
  *o = '\0';
  return out;
}

static char *bn_b64 (EVP_PKEY *k, const char *name, int pad) {
  BIGNUM *bn = NULL;
  if (EVP_PKEY_get_bn_param(k, name, &bn) != 1) abort();
  unsigned char buf[600];
  int n = pad ? BN_bn2binpad(bn, buf, pad) : BN_bn2bin(bn, buf);
  BN_free(bn);
  return b64url(buf, (size_t)n);
}

int LLVMFuzzerInitialize (int *argc, char ***argv) {
  rsa = EVP_RSA_gen(2048);
  ec = EVP_EC_gen("P-256");
  char dir[] = "/tmp/tp-fuzz-auth-XXXXXX";
  if (!rsa || !ec || mkdtemp(dir) == NULL) abort();
  char *n = bn_b64(rsa, OSSL_PKEY_PARAM_RSA_N, 0), *e = bn_b64(rsa, OSSL_PKEY_PARAM_RSA_E, 0);
  char *x = bn_b64(ec, OSSL_PKEY_PARAM_EC_PUB_X, 32), *y = bn_b64(ec, OSSL_PKEY_PARAM_EC_PUB_Y, 32);
  char path[128];
  snprintf(path, sizeof path, "%s/keys.json", dir);
  FILE *f = fopen(path, "w");
  fprintf(f, "{\"keys\":[{\"kty\":\"RSA\",\"kid\":\"r\",\"n\":\"%s\",\"e\":\"%s\"},"
          "{\"kty\":\"EC\",\"kid\":\"e\",\"crv\":\"P-256\",\"x\":\"%s\",\"y\":\"%s\"}]}", n, e, x, y);
  fclose(f);
  free(n); free(e); free(x); free(y);
  json_t *sec = json_loads(
    "{\"resource\": \"https://mcp.example.com/mcp\", \"required_scopes\": [\"mcp\"],"
    " \"authorization_servers\": [\"https://auth.example.com\"],"
    " \"tokens\": [{\"token\": \"alice-token-0123456789\", \"principal\": \"alice\","
    "   \"scopes\": [\"mcp\", \"tools.call\"]}],"
    " \"jwt\": {\"issuer\": \"https://auth.example.com\", \"jwks_file\": \"keys.json\","
    "   \"secret\": \"" SECRET "\"}}", 0, NULL);
  char err[512];
  auth = tp__mcp_auth_new(sec, dir, err, sizeof err);
  json_decref(sec);
  unlink(path);
  rmdir(dir);
  if (auth == NULL) { fprintf(stderr, "fuzz_auth: %s\n", err); abort(); }
  return 0;
}

/* "Bearer " and a JWT of header and payload signed by mode's alg. */
static char *signed_header (int mode, const char *h, size_t hn, const char *p, size_t pn) {
  char *hb = b64url((const unsigned char *)h, hn), *pb = b64url((const unsigned char *)p, pn);
  char *input = NULL, *out = NULL;
  if (asprintf(&input, "%s.%s", hb, pb) < 0) abort();
  unsigned char sig[600];
  size_t slen = 3;
  memcpy(sig, "sig", 3);
  if (mode == 0 || mode == 1) {
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    slen = sizeof sig;
    if (EVP_DigestSignInit(c, NULL, EVP_sha256(), NULL, mode == 0 ? rsa : ec) != 1 ||
        EVP_DigestSign(c, sig, &slen, (unsigned char *)input, strlen(input)) != 1) abort();
    EVP_MD_CTX_free(c);
    if (mode == 1) {
      const unsigned char *q = sig;
      ECDSA_SIG *es = d2i_ECDSA_SIG(NULL, &q, (long)slen);
      BN_bn2binpad(ECDSA_SIG_get0_r(es), sig, 32);
      BN_bn2binpad(ECDSA_SIG_get0_s(es), sig + 32, 32);
      ECDSA_SIG_free(es);
      slen = 64;
    }
  }
  else if (mode == 2) {
    unsigned int l = 0;
    HMAC(EVP_sha256(), SECRET, (int)strlen(SECRET), (unsigned char *)input, strlen(input), sig, &l);
    slen = l;
  }
  char *sb = b64url(sig, slen);
  if (asprintf(&out, "Bearer %s.%s", input, sb) < 0) abort();
  free(hb); free(pb); free(input); free(sb);
  return out;
}

static void check_one (const char *header, const char *required) {
  tp__mcp_auth_result r, r2;
  int st = tp__mcp_auth_check(auth, header, required, NOW, &r);
  FUZZ_CHECK(st == r.status, "returned %d, status %d", st, r.status);
  FUZZ_CHECK(st == 200 || st == 401 || st == 403, "status %d", st);
  if (st == 200) {
    FUZZ_CHECK(r.principal[0] && !r.error[0] && !r.description[0] && !r.needed[0],
               "200 with principal '%s' error '%s' description '%s'", r.principal, r.error,
               r.description);
    char padded[1100];
    snprintf(padded, sizeof padded, " %s ", r.scopes);
    FUZZ_CHECK(strstr(padded, " mcp ") && (!required || strstr(padded, " tools.call ")),
               "200 without a required scope: '%s'", r.scopes);
  }
  else {
    FUZZ_CHECK(r.description[0], "%d without a description", st);
    if (st == 401) {
      FUZZ_CHECK(!r.principal[0] && !r.scopes[0], "401 with principal '%s'", r.principal);
      FUZZ_CHECK(!strcmp(r.error, "") || !strcmp(r.error, "invalid_request") ||
                 !strcmp(r.error, "invalid_token"), "401 with error '%s'", r.error);
    }
    else FUZZ_CHECK(!strcmp(r.error, "insufficient_scope") && r.principal[0],
                    "403 with error '%s'", r.error);
    char *c = tp__mcp_auth_challenge(auth, &r);
    FUZZ_CHECK(c != NULL, "no challenge");
    FUZZ_CHECK(strncmp(c, "Bearer resource_metadata=\"https://mcp.example.com/.well-known/"
                       "oauth-protected-resource/mcp\"", 79) == 0, "challenge %s", c);
    int quotes = 0;
    for (const char *q = c; *q; q++) {
      FUZZ_CHECK(*q >= 0x20 && *q < 0x7f && *q != '\\', "byte %d in the challenge %s", *q, c);
      quotes += *q == '"';
    }
    FUZZ_CHECK(quotes % 2 == 0, "unbalanced quotes in %s", c);
    free(c);
  }
  tp__mcp_auth_check(auth, header, required, NOW, &r2);
  FUZZ_CHECK(memcmp(&r, &r2, sizeof r) == 0, "two checks differ: %s / %s", r.description,
             r2.description);
}

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size) {
  if (size == 0) return 0;
  int mode = data[0];
  const char *rest = (const char *)data + 1;
  size_t n = size - 1;
  char *header;
  if (!(mode & 1)) {
    header = strndup(rest, n);
  }
  else {
    const char *nl = memchr(rest, '\n', n);
    size_t hn = nl ? (size_t)(nl - rest) : n;
    header = signed_header((mode >> 1) & 3, rest, hn, nl ? nl + 1 : rest + n,
                           nl ? n - hn - 1 : 0);
  }
  check_one(header, (mode & 8) ? "tools.call" : NULL);
  free(header);
  return 0;
}
