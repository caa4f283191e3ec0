/*
** test_auth.c: the HTTP front end's authenticator (engine/front/mcp/auth.c): static tokens,
** JWTs (RS256, ES256, HS256) with keys from a JWKS, a PEM file or a secret, every rule
** of the token's header and claims with its exact status, error and description, the
** RFC 9728 document and the WWW-Authenticate challenge.
**
** Keys are made when the test starts (RSA 2048 and 1024, two P-256), JWTs are signed by
** the small signer below (the test's own, so that a token can carry anything), key files
** go to a temporary folder.
*/
#include <pthread.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <jansson.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/pem.h>
#include <openssl/rsa.h>

#include "mcp/auth.h"
#include "tidepool.h"
#include "tp_test.h"

#define NOW 1800000000LL  /* 2027-01-15T08:00:00Z */
#define RESOURCE "https://mcp.example.com/mcp"
#define ISSUER "https://auth.example.com"
#define SECRET "0123456789abcdef0123456789abcdef-hs256"
#define META "https://mcp.example.com/.well-known/oauth-protected-resource/mcp"

static EVP_PKEY *rsa1, *rsa2, *rsa_small, *ec1;
static char dir[64];

/* ---- the test's signer ------------------------------------------------------------- */

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

static char *b64s (const char *s) { return b64url((const unsigned char *)s, strlen(s)); }

/* header.payload signed with alg by pkey (RS256, ES256) or secret (HS256); alg "none"
** and "XX" give an empty signature and the bytes "sig" */
static char *jwt_raw (const char *alg, EVP_PKEY *pkey, const char *secret, const char *header,
                      const char *payload) {
  char *h = b64s(header), *p = b64s(payload), *input = NULL, *sig = NULL, *out = NULL;
  if (asprintf(&input, "%s.%s", h, p) < 0) abort();
  unsigned char buf[1024];
  size_t len = 0;
  if (strcmp(alg, "HS256") == 0) {
    unsigned int l = 0;
    HMAC(EVP_sha256(), secret, (int)strlen(secret), (unsigned char *)input, strlen(input), buf, &l);
    len = l;
  }
  else if (strcmp(alg, "RS256") == 0 || strcmp(alg, "ES256") == 0) {
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    len = sizeof buf;
    if (EVP_DigestSignInit(c, NULL, EVP_sha256(), NULL, pkey) != 1 ||
        EVP_DigestSign(c, buf, &len, (unsigned char *)input, strlen(input)) != 1) abort();
    EVP_MD_CTX_free(c);
    if (strcmp(alg, "ES256") == 0) {  /* DER to JOSE's r || s */
      const unsigned char *q = buf;
      ECDSA_SIG *es = d2i_ECDSA_SIG(NULL, &q, (long)len);
      BN_bn2binpad(ECDSA_SIG_get0_r(es), buf, 32);
      BN_bn2binpad(ECDSA_SIG_get0_s(es), buf + 32, 32);
      ECDSA_SIG_free(es);
      len = 64;
    }
  }
  else if (strcmp(alg, "XX") == 0) { memcpy(buf, "sig", 3); len = 3; }
  sig = b64url(buf, len);
  if (asprintf(&out, "%s.%s", input, sig) < 0) abort();
  free(h); free(p); free(input); free(sig);
  return out;
}

/* A JWT with the usual header ({"alg", "typ": "JWT", "kid"}) for claims. */
static char *jwt (const char *alg, EVP_PKEY *pkey, const char *kid, const char *claims) {
  char header[200];
  if (kid) snprintf(header, sizeof header, "{\"alg\":\"%s\",\"typ\":\"JWT\",\"kid\":\"%s\"}", alg, kid);
  else snprintf(header, sizeof header, "{\"alg\":\"%s\",\"typ\":\"JWT\"}", alg);
  return jwt_raw(alg, pkey, SECRET, header, claims);
}

/* Claims with iss, aud, sub alice, exp in an hour, and more (",\"x\":1" or ""). */
static char *claims (const char *more) {
  static char buf[2048];
  snprintf(buf, sizeof buf, "{\"iss\":\"" ISSUER "\",\"aud\":\"" RESOURCE "\",\"sub\":\"alice\","
           "\"exp\":%lld,\"iat\":%lld,\"scope\":\"tools.read tools.call\"%s}", NOW + 3600, NOW - 10, more);
  return buf;
}

/* ---- keys and files ------------------------------------------------------------------ */

static char *bn_b64 (EVP_PKEY *k, const char *name, int pad) {
  BIGNUM *bn = NULL;
  if (EVP_PKEY_get_bn_param(k, name, &bn) != 1) abort();
  unsigned char buf[600];
  int n = pad ? BN_bn2binpad(bn, buf, pad) : BN_bn2bin(bn, buf);
  BN_free(bn);
  return b64url(buf, (size_t)n);
}

static char *jwk (EVP_PKEY *k, const char *kid, const char *extra) {
  char *out = NULL;
  if (EVP_PKEY_is_a(k, "RSA")) {
    char *n = bn_b64(k, OSSL_PKEY_PARAM_RSA_N, 0), *e = bn_b64(k, OSSL_PKEY_PARAM_RSA_E, 0);
    if (asprintf(&out, "{\"kty\":\"RSA\",\"kid\":\"%s\",\"use\":\"sig\",\"n\":\"%s\",\"e\":\"%s\"%s}",
                 kid, n, e, extra) < 0) abort();
    free(n); free(e);
  }
  else {
    char *x = bn_b64(k, OSSL_PKEY_PARAM_EC_PUB_X, 32), *y = bn_b64(k, OSSL_PKEY_PARAM_EC_PUB_Y, 32);
    if (asprintf(&out, "{\"kty\":\"EC\",\"kid\":\"%s\",\"crv\":\"P-256\",\"x\":\"%s\",\"y\":\"%s\"%s}",
                 kid, x, y, extra) < 0) abort();
    free(x); free(y);
  }
  return out;
}

static void write_file (const char *name, const char *text) {
  char path[128];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "w");
  fputs(text, f);
  fclose(f);
}

static void write_pem (const char *name, EVP_PKEY *k) {
  char path[128];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "w");
  PEM_write_PUBKEY(f, k);
  fclose(f);
}

static void setup (void) {
  rsa1 = EVP_RSA_gen(2048);
  rsa2 = EVP_RSA_gen(2048);
  rsa_small = EVP_RSA_gen(1024);
  ec1 = EVP_EC_gen("P-256");
  if (!rsa1 || !rsa2 || !rsa_small || !ec1) abort();
  snprintf(dir, sizeof dir, "/tmp/tp-auth-XXXXXX");
  if (mkdtemp(dir) == NULL) abort();
  char *a = jwk(rsa1, "rsa1", ""), *b = jwk(ec1, "ec1", ""), *c = jwk(rsa_small, "small", ""),
       *d = jwk(rsa2, "rsa2", ",\"alg\":\"RS256\"");
  char *text = NULL;
  /* two kids, a small key kept with its reason, and keys that are not ours: skipped */
  if (asprintf(&text, "{\"keys\":[%s,%s,%s,{\"kty\":\"OKP\",\"crv\":\"Ed25519\",\"x\":\"AA\"},"
               "{\"kty\":\"RSA\",\"kid\":\"enc\",\"use\":\"enc\",\"n\":\"AQAB\",\"e\":\"AQAB\"}]}",
               a, b, c) < 0) abort();
  write_file("keys.json", text);
  free(text);
  if (asprintf(&text, "{\"keys\":[%s]}", c) < 0) abort();
  write_file("small.json", text);
  free(text);
  if (asprintf(&text, "{\"keys\":[%s,%s]}", a, d) < 0) abort();
  write_file("rsa2.json", text);
  free(text);
  free(a); free(b); free(c); free(d);
  write_pem("rsa1.pem", rsa1);
  write_pem("ec1.pem", ec1);
  write_pem("small.pem", rsa_small);
  write_file("token.txt", "file-token-0123456789abcdef\n");
  write_file("secret.txt", SECRET "\n");
}

static void teardown (void) {
  const char *files[] = { "keys.json", "small.json", "rsa2.json", "rsa1.pem", "ec1.pem",
                          "small.pem", "token.txt", "secret.txt" };
  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, files[i]);
    unlink(path);
  }
  rmdir(dir);
  EVP_PKEY_free(rsa1); EVP_PKEY_free(rsa2); EVP_PKEY_free(rsa_small); EVP_PKEY_free(ec1);
}

/* An authenticator from the section's text; NULL with err. */
static tp__mcp_auth *make (const char *text, char *err, size_t errlen) {
  json_error_t je;
  json_t *sec = json_loads(text, 0, &je);
  if (sec == NULL) { printf("#   bad test JSON: %s\n", je.text); abort(); }
  tp__mcp_auth *a = tp__mcp_auth_new(sec, dir, err, errlen);
  json_decref(sec);
  return a;
}

/* The usual section: two static tokens, a JWKS with two kids, the HS256 secret. */
#define STD "{\"resource\": \"" RESOURCE "\", \"authorization_servers\": [\"" ISSUER "\"]," \
  "\"scopes_supported\": [\"tools.read\", \"tools.call\", \"tools.admin\"]," \
  "\"required_scopes\": [\"tools.read\"]," \
  "\"tokens\": [{\"token\": \"alice-token-0123456789\", \"principal\": \"alice\", " \
  "\"scopes\": [\"tools.read\", \"tools.call\"]}, {\"token\": \"file:token.txt\", " \
  "\"principal\": \"bob\", \"scopes\": [\"tools.read\"]}]," \
  "\"jwt\": {\"issuer\": \"" ISSUER "\", \"jwks_file\": \"keys.json\", \"secret\": \"" SECRET "\"}}"

static tp__mcp_auth *std_auth (void) {
  char err[512];
  tp__mcp_auth *a = make(STD, err, sizeof err);
  if (a == NULL) printf("#   %s\n", err);
  return a;
}

/* Checks "Bearer <tok>" against a, needing required. */
static int check_tok (tp__mcp_auth *a, const char *tok, const char *required, tp__mcp_auth_result *r) {
  char *h = NULL;
  if (asprintf(&h, "Bearer %s", tok) < 0) abort();
  int st = tp__mcp_auth_check(a, h, required, NOW, r);
  free(h);
  return st;
}

/* The token's check: status, error and description exactly. */
#define CHECK_RESULT(r, st, err, desc) do { \
    CHECK_INT((r).status, st); CHECK_STR((r).error, err); CHECK_STR((r).description, desc); \
  } while (0)

/* ---- no authenticator, static tokens ------------------------------------------------- */

TEST(no_auth_section_lets_every_caller_in_as_no_one) {
  char err[200] = "x";
  CHECK(tp__mcp_auth_new(NULL, dir, err, sizeof err) == NULL);
  CHECK_STR(err, "");
  tp__mcp_auth_result r;
  CHECK_INT(tp__mcp_auth_check(NULL, "Bearer whatever", "tools.admin", NOW, &r), 200);
  CHECK_STR(r.principal, "");
  CHECK_STR(r.scopes, "");
  CHECK_STR(r.error, "");
}

TEST(static_token_gives_its_principal_and_scopes) {
  tp__mcp_auth *a = std_auth();
  tp__mcp_auth_result r;
  CHECK_INT(check_tok(a, "alice-token-0123456789", "tools.call", &r), 200);
  CHECK_RESULT(r, 200, "", "");
  CHECK_STR(r.principal, "alice");
  CHECK_STR(r.scopes, "tools.read tools.call");
  CHECK_STR(r.needed, "");
  /* the scheme is case-insensitive, blanks around the token are allowed */
  CHECK_INT(tp__mcp_auth_check(a, "bearer   alice-token-0123456789  ", NULL, NOW, &r), 200);
  CHECK_STR(r.principal, "alice");
  tp__mcp_auth_free(a);
}

TEST(static_token_from_a_file_and_from_the_environment) {
  tp__mcp_auth *a = std_auth();
  tp__mcp_auth_result r;
  CHECK_INT(check_tok(a, "file-token-0123456789abcdef", NULL, &r), 200);
  CHECK_STR(r.principal, "bob");
  CHECK_STR(r.scopes, "tools.read");
  tp__mcp_auth_free(a);
  setenv("TP_TEST_TOKEN", "env-token-0123456789abcdef", 1);
  char err[300];
  a = make("{\"resource\": \"" RESOURCE "\", \"tokens\": [{\"token\": \"env:TP_TEST_TOKEN\", "
           "\"principal\": \"carol\"}]}", err, sizeof err);
  CHECK(a != NULL);
  CHECK_INT(check_tok(a, "env-token-0123456789abcdef", NULL, &r), 200);
  CHECK_STR(r.principal, "carol");
  CHECK_STR(r.scopes, "");
  tp__mcp_auth_free(a);
  unsetenv("TP_TEST_TOKEN");
  a = make("{\"resource\": \"" RESOURCE "\", \"tokens\": [{\"token\": \"env:TP_TEST_TOKEN\", "
           "\"principal\": \"carol\"}]}", err, sizeof err);
  CHECK(a == NULL);
  CHECK_STR(err, "config: /auth/tokens/0/token: the environment variable TP_TEST_TOKEN is not "
            "set (or is empty)");
}

TEST(unknown_static_token_is_401_invalid_token) {
  tp__mcp_auth *a = std_auth();
  tp__mcp_auth_result r;
  CHECK_INT(check_tok(a, "alice-token-0123456780", NULL, &r), 401);
  CHECK_RESULT(r, 401, "invalid_token", "unknown token: not one of the config's tokens, and not a JWT");
  CHECK_STR(r.principal, "");
  char *c = tp__mcp_auth_challenge(a, &r);
  CHECK_STR(c, "Bearer resource_metadata=\"" META "\", error=\"invalid_token\", "
            "error_description=\"unknown token: not one of the config's tokens, and not a JWT\", "
            "scope=\"tools.read\"");
  free(c);
  tp__mcp_auth_free(a);
}

TEST(missing_header_is_401_without_error_code) {
  tp__mcp_auth *a = std_auth();
  tp__mcp_auth_result r;
  CHECK_INT(tp__mcp_auth_check(a, NULL, "tools.call", NOW, &r), 401);
  CHECK_RESULT(r, 401, "", "no credential: send the header Authorization: Bearer <token>");
  CHECK_STR(r.needed, "tools.read tools.call");
  char *c = tp__mcp_auth_challenge(a, &r);
  /* RFC 6750 section 3.1: no error code when the request had no credential */
  CHECK_STR(c, "Bearer resource_metadata=\"" META "\", scope=\"tools.read tools.call\"");
  free(c);
  CHECK_INT(tp__mcp_auth_check(a, "", NULL, NOW, &r), 401);
  CHECK_STR(r.error, "");
  tp__mcp_auth_free(a);
}

TEST(other_schemes_and_bad_headers_are_401_invalid_request) {
  tp__mcp_auth *a = std_auth();
  tp__mcp_auth_result r;
  tp__mcp_auth_check(a, "Basic YWxpY2U6cHc=", NULL, NOW, &r);
  CHECK_RESULT(r, 401, "invalid_request", "the Authorization header's scheme is Basic; this "
               "server takes Authorization: Bearer <token>");
  tp__mcp_auth_check(a, "Bearer", NULL, NOW, &r);
  CHECK_RESULT(r, 401, "invalid_request", "Authorization: Bearer without a token");
  tp__mcp_auth_check(a, "Bearertoken-0123456789", NULL, NOW, &r);
  CHECK_RESULT(r, 401, "invalid_request", "the Authorization header's scheme is "
               "Bearertoken-01234567; this server takes Authorization: Bearer <token>");
  tp__mcp_auth_check(a, "Bearer   ", NULL, NOW, &r);
  CHECK_RESULT(r, 401, "invalid_request", "Authorization: Bearer without a token");
  tp__mcp_auth_check(a, "Bearer two tokens", NULL, NOW, &r);
  CHECK_RESULT(r, 401, "invalid_request", "the bearer token has a character RFC 6750 does not "
               "allow (letters, digits, -._~+/ then =)");
  tp__mcp_auth_check(a, "Bearer a\"b", NULL, NOW, &r);
  CHECK_STR(r.error, "invalid_request");
  tp__mcp_auth_free(a);
}

TEST(insufficient_scope_is_403_naming_the_missing_scope) {
  tp__mcp_auth *a = std_auth();
  tp__mcp_auth_result r;
  CHECK_INT(check_tok(a, "file-token-0123456789abcdef", "tools.call", &r), 403);
  CHECK_RESULT(r, 403, "insufficient_scope", "bob lacks the scope tools.call (it has: tools.read)");
  CHECK_STR(r.principal, "bob");
  char *c = tp__mcp_auth_challenge(a, &r);
  CHECK_STR(c, "Bearer resource_metadata=\"" META "\", error=\"insufficient_scope\", "
            "error_description=\"bob lacks the scope tools.call (it has: tools.read)\", "
            "scope=\"tools.read tools.call\"");
  free(c);
  CHECK_INT(check_tok(a, "file-token-0123456789abcdef", "tools.call tools.admin", &r), 403);
  CHECK_STR(r.description, "bob lacks the scopes tools.call tools.admin (it has: tools.read)");
  tp__mcp_auth_free(a);
}

TEST(required_scopes_of_the_config_apply_to_every_call) {
  char err[300];
  tp__mcp_auth *a = make("{\"resource\": \"" RESOURCE "\", \"required_scopes\": [\"mcp\"], "
                    "\"tokens\": [{\"token\": \"dave-token-0123456789\", \"principal\": \"dave\"}]}",
                    err, sizeof err);
  tp__mcp_auth_result r;
  CHECK_INT(check_tok(a, "dave-token-0123456789", NULL, &r), 403);
  CHECK_RESULT(r, 403, "insufficient_scope", "dave lacks the scope mcp (it has: none)");
  tp__mcp_auth_free(a);
}

/* /metrics and the operator page need their own scope, not the MCP endpoint's
** required_scopes: tp__mcp_auth_check_scope. */
TEST(a_scope_check_of_its_own_ignores_required_scopes) {
  char err[300];
  tp__mcp_auth *a = make("{\"resource\": \"" RESOURCE "\", \"required_scopes\": [\"mcp\"], "
                    "\"tokens\": [{\"token\": \"prom-token-0123456789\", \"principal\": \"prom\", "
                    "\"scopes\": [\"metrics\"]}]}", err, sizeof err);
  CHECK(a != NULL);
  if (a == NULL) return;
  tp__mcp_auth_result r;
  CHECK_INT(tp__mcp_auth_check_scope(a, "Bearer prom-token-0123456789", "metrics", NOW, &r), 200);
  CHECK_STR(r.principal, "prom");
  CHECK_INT(tp__mcp_auth_check_scope(a, "Bearer prom-token-0123456789", "operator", NOW, &r), 403);
  CHECK_RESULT(r, 403, "insufficient_scope", "prom lacks the scope operator (it has: metrics)");
  CHECK_INT(tp__mcp_auth_check(a, "Bearer prom-token-0123456789", "metrics", NOW, &r), 403);
  CHECK_RESULT(r, 403, "insufficient_scope", "prom lacks the scope mcp (it has: metrics)");
  CHECK_INT(tp__mcp_auth_check_scope(a, NULL, "metrics", NOW, &r), 401);
  tp__mcp_auth_free(a);
}

TEST(static_token_rules_of_the_config) {
  char err[300];
  CHECK(make("{\"resource\": \"" RESOURCE "\", \"tokens\": [{\"token\": \"short\", "
             "\"principal\": \"x\"}]}", err, sizeof err) == NULL);
  CHECK_STR(err, "config: /auth/tokens/0/token: a token needs at least 16 characters (make one "
            "with: openssl rand -hex 32)");
  CHECK(make("{\"resource\": \"" RESOURCE "\", \"tokens\": [{\"token\": \"a token with spaces!!\", "
             "\"principal\": \"x\"}]}", err, sizeof err) == NULL);
  CHECK_STR(err, "config: /auth/tokens/0/token: a token is sent as \"Bearer <token>\": letters, "
            "digits and -._~+/ (then = only)");
  CHECK(make("{\"resource\": \"" RESOURCE "\", \"tokens\": [{\"token\": \"same-token-0123456789\", "
             "\"principal\": \"x\"}, {\"token\": \"same-token-0123456789\", \"principal\": \"y\"}]}",
             err, sizeof err) == NULL);
  CHECK_STR(err, "config: /auth/tokens/1/token: the same token as /auth/tokens/0");
  CHECK(make("{\"resource\": \"" RESOURCE "\", \"tokens\": [{\"token\": \"same-token-0123456789\"}]}",
             err, sizeof err) == NULL);
  CHECK_STR(err, "config: /auth/tokens/0: missing \"principal\" (a token needs \"token\" and \"principal\")");
  CHECK(make("{\"resource\": \"" RESOURCE "\", \"tokens\": [{\"token\": \"same-token-0123456789\", "
             "\"principal\": \"x\", \"scopes\": [\"a b\"]}]}", err, sizeof err) == NULL);
  CHECK_STR(err, "config: /auth/tokens/0/scopes/0: a scope is a non-empty string of printable "
            "ASCII without spaces, commas or quotes");
  CHECK(make("{\"resource\": \"" RESOURCE "\", \"required_scopes\": [\"a,b\"], \"tokens\": "
             "[{\"token\": \"same-token-0123456789\", \"principal\": \"x\"}]}", err, sizeof err) == NULL);
  CHECK_STR(err, "config: /auth/required_scopes/0: a scope is a non-empty string of printable "
            "ASCII without spaces, commas or quotes");
  CHECK(make("{\"resource\": \"" RESOURCE "\", \"tokens\": [{\"token\": \"file:nope.txt\", "
             "\"principal\": \"x\"}]}", err, sizeof err) == NULL);
  char want[300];
  snprintf(want, sizeof want, "config: /auth/tokens/0/token: cannot read %s/nope.txt: No such "
           "file or directory (relative paths start at the config file's folder)", dir);
  CHECK_STR(err, want);
}

TEST(section_rules_of_the_config) {
  char err[400];
  CHECK(make("{\"tokens\": []}", err, sizeof err) == NULL);
  CHECK_STR(err, "config: /auth: missing \"resource\" (the server's canonical URL, which tokens "
            "must name as their audience, e.g. \"https://mcp.example.com/mcp\")");
  CHECK(make("{\"resource\": \"mcp.example.com\"}", err, sizeof err) == NULL);
  CHECK_STR(err, "config: /auth/resource: \"mcp.example.com\" is not an http(s) URL; it is the "
            "server's canonical URL, e.g. \"https://mcp.example.com/mcp\"");
  CHECK(make("{\"resource\": \"https://mcp.example.com/mcp#x\"}", err, sizeof err) == NULL);
  CHECK_STR(err, "config: /auth/resource: \"https://mcp.example.com/mcp#x\" must be "
            "scheme://host[:port][/path] without user, query, fragment, spaces or quotes (RFC 8707)");
  CHECK(make("{\"resource\": \"" RESOURCE "\"}", err, sizeof err) == NULL);
  CHECK_STR(err, "config: /auth: no credential would be accepted: give \"tokens\" (static bearer "
            "tokens) or \"jwt\" (tokens of an authorization server)");
  CHECK(make("{\"resource\": \"" RESOURCE "\", \"token\": []}", err, sizeof err) == NULL);
  CHECK_STR(err, "config: /auth: unknown field \"token\"; the fields are: resource, "
            "authorization_servers, scopes_supported, required_scopes, tokens, jwt, description");
  CHECK(make("{\"resource\": \"" RESOURCE "\", \"jwt\": {\"issuer\": \"" ISSUER "\"}}", err, sizeof err) == NULL);
  CHECK_STR(err, "config: /auth/jwt: no key: give \"jwks_file\" (a JWKS), \"key_file\" (a PEM "
            "public key) or \"secret\" (HS256, \"env:NAME\")");
  CHECK(make("{\"resource\": \"" RESOURCE "\", \"jwt\": {\"jwks_file\": \"keys.json\"}}", err, sizeof err) == NULL);
  CHECK_STR(err, "config: /auth/jwt: missing \"issuer\" (the iss every token must carry, e.g. "
            "\"https://auth.example.com\")");
  CHECK(make("{\"resource\": \"" RESOURCE "\", \"jwt\": {\"issuer\": \"" ISSUER "\", "
             "\"jwks_file\": \"keys.json\", \"algorithms\": [\"none\"]}}", err, sizeof err) == NULL);
  CHECK_STR(err, "config: /auth/jwt/algorithms/0: expected \"RS256\", \"ES256\" or \"HS256\" "
            "(unsigned tokens are never accepted)");
  CHECK(make("{\"resource\": \"" RESOURCE "\", \"jwt\": {\"issuer\": \"" ISSUER "\", "
             "\"jwks_file\": \"keys.json\", \"algorithms\": [\"HS256\"]}}", err, sizeof err) == NULL);
  CHECK_STR(err, "config: /auth/jwt/algorithms/0: HS256, but no key for it (HS256 needs a shared secret)");
  CHECK(make("{\"resource\": \"" RESOURCE "\", \"jwt\": {\"issuer\": \"" ISSUER "\", "
             "\"jwks_file\": \"keys.json\", \"leeway_s\": 3600}}", err, sizeof err) == NULL);
  CHECK_STR(err, "config: /auth/jwt/leeway_s: expected whole seconds from 0 to 600 (default 60)");
}

/* ---- JWTs: keys and signatures ------------------------------------------------------- */

TEST(hs256_token_gives_sub_and_scope) {
  tp__mcp_auth *a = std_auth();
  tp__mcp_auth_result r;
  char *t = jwt("HS256", NULL, NULL, claims(""));
  CHECK_INT(check_tok(a, t, "tools.call", &r), 200);
  CHECK_RESULT(r, 200, "", "");
  CHECK_STR(r.principal, "alice");
  CHECK_STR(r.scopes, "tools.read tools.call");
  free(t);
  tp__mcp_auth_free(a);
}

TEST(hs256_with_another_secret_is_a_bad_signature) {
  tp__mcp_auth *a = std_auth();
  tp__mcp_auth_result r;
  char *t = jwt_raw("HS256", NULL, "another-secret-0123456789abcdef-0123",
                    "{\"alg\":\"HS256\"}", claims(""));
  CHECK_INT(check_tok(a, t, NULL, &r), 401);
  CHECK_RESULT(r, 401, "invalid_token", "bad signature: the token does not verify with any HS256 "
               "key of the config; it was altered or signed by another key");
  CHECK_STR(r.principal, "");
  CHECK_STR(r.scopes, "");
  free(t);
  tp__mcp_auth_free(a);
}

TEST(hs256_secret_shorter_than_32_bytes_is_refused) {
  char err[300];
  CHECK(make("{\"resource\": \"" RESOURCE "\", \"jwt\": {\"issuer\": \"" ISSUER "\", "
             "\"secret\": \"0123456789abcdef0123456789abcde\"}}", err, sizeof err) == NULL);
  CHECK_STR(err, "config: /auth/jwt/secret: 31 bytes; HS256 needs a secret of 32 bytes or more "
            "(openssl rand -hex 32)");
  tp__mcp_auth *a = make("{\"resource\": \"" RESOURCE "\", \"jwt\": {\"issuer\": \"" ISSUER "\", "
                    "\"secret\": \"file:secret.txt\"}}", err, sizeof err);
  CHECK(a != NULL);
  tp__mcp_auth_result r;
  char *t = jwt("HS256", NULL, NULL, claims(""));
  CHECK_INT(check_tok(a, t, NULL, &r), 200);
  free(t);
  tp__mcp_auth_free(a);
}

TEST(rs256_and_es256_tokens_pick_their_key_by_kid) {
  tp__mcp_auth *a = std_auth();
  tp__mcp_auth_result r;
  char *t = jwt("RS256", rsa1, "rsa1", claims(""));
  CHECK_INT(check_tok(a, t, NULL, &r), 200);
  CHECK_STR(r.principal, "alice");
  free(t);
  t = jwt("ES256", ec1, "ec1", claims(""));
  CHECK_INT(check_tok(a, t, NULL, &r), 200);
  CHECK_STR(r.principal, "alice");
  free(t);
  /* a token signed by another RSA key under kid rsa1 */
  t = jwt("RS256", rsa2, "rsa1", claims(""));
  CHECK_INT(check_tok(a, t, NULL, &r), 401);
  CHECK_RESULT(r, 401, "invalid_token", "bad signature: the token does not verify with key rsa1 "
               "(RS256); it was altered or signed by another key");
  free(t);
  /* without kid, every key of the alg's type is tried */
  t = jwt("ES256", ec1, NULL, claims(""));
  CHECK_INT(check_tok(a, t, NULL, &r), 200);
  free(t);
  tp__mcp_auth_free(a);
}

TEST(kid_not_in_the_jwks_is_401_naming_the_keys) {
  tp__mcp_auth *a = std_auth();
  tp__mcp_auth_result r;
  char *t = jwt("RS256", rsa1, "rotated", claims(""));
  CHECK_INT(check_tok(a, t, NULL, &r), 401);
  CHECK_RESULT(r, 401, "invalid_token", "no key with kid rotated (the keys: rsa1, ec1, small); "
               "the issuer may have rotated its keys: update the JWKS file");
  free(t);
  tp__mcp_auth_free(a);
}

TEST(alg_that_does_not_fit_the_key_type_is_refused) {
  tp__mcp_auth *a = std_auth();
  tp__mcp_auth_result r;
  char *t = jwt("ES256", ec1, "rsa1", claims(""));
  CHECK_INT(check_tok(a, t, NULL, &r), 401);
  CHECK_RESULT(r, 401, "invalid_token", "alg ES256 does not fit key rsa1, which is an RSA key");
  free(t);
  /* the classic confusion: HS256 with the RSA public key's PEM as the secret */
  FILE *f = fopen("/dev/null", "r");
  fclose(f);
  char path[128], pem[4096];
  snprintf(path, sizeof path, "%s/rsa1.pem", dir);
  f = fopen(path, "r");
  size_t n = fread(pem, 1, sizeof pem - 1, f);
  fclose(f);
  pem[n] = '\0';
  t = jwt_raw("HS256", NULL, pem, "{\"alg\":\"HS256\",\"kid\":\"rsa1\"}", claims(""));
  CHECK_INT(check_tok(a, t, NULL, &r), 401);
  CHECK_RESULT(r, 401, "invalid_token", "alg HS256 does not fit key rsa1, which is an RSA key");
  free(t);
  tp__mcp_auth_free(a);
  /* a JWK's alg limits it */
  char err[300];
  a = make("{\"resource\": \"" RESOURCE "\", \"jwt\": {\"issuer\": \"" ISSUER "\", "
           "\"jwks_file\": \"rsa2.json\"}}", err, sizeof err);
  t = jwt("RS256", rsa2, "rsa2", claims(""));
  CHECK_INT(check_tok(a, t, NULL, &r), 200);
  free(t);
  tp__mcp_auth_free(a);
}

TEST(rsa_key_under_2048_bits_is_refused) {
  tp__mcp_auth *a = std_auth();
  tp__mcp_auth_result r;
  char *t = jwt("RS256", rsa_small, "small", claims(""));
  CHECK_INT(check_tok(a, t, NULL, &r), 401);
  CHECK_RESULT(r, 401, "invalid_token", "key small of keys.json cannot be used: an RSA key of "
               "1024 bits (RS256 needs 2048 or more)");
  free(t);
  tp__mcp_auth_free(a);
  char err[400];
  CHECK(make("{\"resource\": \"" RESOURCE "\", \"jwt\": {\"issuer\": \"" ISSUER "\", "
             "\"jwks_file\": \"small.json\"}}", err, sizeof err) == NULL);
  CHECK_STR(err, "config: /auth/jwt/jwks_file: small.json has no key tidepool can use (RSA of "
            "2048 bits or more, EC P-256, oct of 32 bytes or more, \"use\": \"sig\"); key 0 (kid "
            "small): an RSA key of 1024 bits (RS256 needs 2048 or more)");
  CHECK(make("{\"resource\": \"" RESOURCE "\", \"jwt\": {\"issuer\": \"" ISSUER "\", "
             "\"key_file\": \"small.pem\"}}", err, sizeof err) == NULL);
  CHECK_STR(err, "config: /auth/jwt/key_file: small.pem holds an RSA key of 1024 bits (RS256 "
            "needs 2048 or more)");
}

TEST(jwks_keys_that_are_not_keys_are_kept_with_their_reason) {
  char *good = jwk(ec1, "ec1", ""), *text = NULL;
  const char *x = "AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE";  /* 32 bytes of 1: off the curve */
  if (asprintf(&text, "{\"keys\":[%s,{\"kty\":\"EC\",\"kid\":\"offcurve\",\"crv\":\"P-256\","
               "\"x\":\"%s\",\"y\":\"%s\"},{\"kty\":\"RSA\",\"kid\":\"nob64\",\"n\":\"a+b/\","
               "\"e\":\"AQAB\"},{\"kty\":\"EC\",\"kid\":\"p384\",\"crv\":\"P-384\",\"x\":\"AA\","
               "\"y\":\"AA\"}]}", good, x, x) < 0) abort();
  write_file("bad.json", text);
  free(text);
  free(good);
  char err[300];
  tp__mcp_auth *a = make("{\"resource\": \"" RESOURCE "\", \"jwt\": {\"issuer\": \"" ISSUER "\", "
                    "\"jwks_file\": \"bad.json\", \"algorithms\": [\"ES256\", \"RS256\"]}}", err, sizeof err);
  CHECK(a == NULL);
  CHECK_STR(err, "config: /auth/jwt/algorithms/1: RS256, but no key for it (RS256 needs an RSA key)");
  a = make("{\"resource\": \"" RESOURCE "\", \"jwt\": {\"issuer\": \"" ISSUER "\", "
           "\"jwks_file\": \"bad.json\"}}", err, sizeof err);
  CHECK(a != NULL);
  tp__mcp_auth_result r;
  char *t = jwt("ES256", ec1, "offcurve", claims(""));
  CHECK_INT(check_tok(a, t, NULL, &r), 401);
  CHECK_RESULT(r, 401, "invalid_token", "key offcurve of bad.json cannot be used: x and y are "
               "not a point of P-256");
  free(t);
  t = jwt("ES256", ec1, "p384", claims(""));
  CHECK_INT(check_tok(a, t, NULL, &r), 401);
  CHECK_RESULT(r, 401, "invalid_token", "key p384 of bad.json cannot be used: an EC key must "
               "have crv P-256 (ES256)");
  free(t);
  t = jwt("ES256", ec1, "ec1", claims(""));
  CHECK_INT(check_tok(a, t, NULL, &r), 200);
  free(t);
  tp__mcp_auth_free(a);
  char path[128];
  snprintf(path, sizeof path, "%s/bad.json", dir);
  unlink(path);
}

TEST(pem_key_file_verifies_tokens_with_or_without_kid) {
  char err[300];
  tp__mcp_auth *a = make("{\"resource\": \"" RESOURCE "\", \"jwt\": {\"issuer\": \"" ISSUER "\", "
                    "\"key_file\": \"ec1.pem\"}}", err, sizeof err);
  CHECK(a != NULL);
  tp__mcp_auth_result r;
  char *t = jwt("ES256", ec1, NULL, claims(""));
  CHECK_INT(check_tok(a, t, NULL, &r), 200);
  free(t);
  t = jwt("ES256", ec1, "some-kid", claims(""));
  CHECK_INT(check_tok(a, t, NULL, &r), 200);
  free(t);
  /* only ES256 is accepted: its only key is EC */
  t = jwt("RS256", rsa1, NULL, claims(""));
  CHECK_INT(check_tok(a, t, NULL, &r), 401);
  CHECK_RESULT(r, 401, "invalid_token", "alg RS256 is not accepted here (accepted: ES256)");
  free(t);
  tp__mcp_auth_free(a);
  a = make("{\"resource\": \"" RESOURCE "\", \"jwt\": {\"issuer\": \"" ISSUER "\", "
           "\"key_file\": \"rsa1.pem\"}}", err, sizeof err);
  t = jwt("RS256", rsa1, NULL, claims(""));
  CHECK_INT(check_tok(a, t, NULL, &r), 200);
  free(t);
  tp__mcp_auth_free(a);
  CHECK(make("{\"resource\": \"" RESOURCE "\", \"jwt\": {\"issuer\": \"" ISSUER "\", "
             "\"key_file\": \"keys.json\"}}", err, sizeof err) == NULL);
  CHECK_STR(err, "config: /auth/jwt/key_file: keys.json holds no public key in PEM (-----BEGIN "
            "PUBLIC KEY-----; openssl pkey -pubout makes one)");
}

TEST(es256_signature_must_be_jose_r_and_s) {
  tp__mcp_auth *a = std_auth();
  tp__mcp_auth_result r;
  /* a DER signature where JOSE's 64 bytes belong */
  char *h = b64s("{\"alg\":\"ES256\",\"kid\":\"ec1\"}"), *p = b64s(claims("")), *input = NULL;
  if (asprintf(&input, "%s.%s", h, p) < 0) abort();
  unsigned char der[128];
  size_t dlen = sizeof der;
  EVP_MD_CTX *c = EVP_MD_CTX_new();
  EVP_DigestSignInit(c, NULL, EVP_sha256(), NULL, ec1);
  EVP_DigestSign(c, der, &dlen, (unsigned char *)input, strlen(input));
  EVP_MD_CTX_free(c);
  char *s = b64url(der, dlen), *t = NULL;
  if (asprintf(&t, "%s.%s", input, s) < 0) abort();
  CHECK_INT(check_tok(a, t, NULL, &r), 401);
  CHECK_RESULT(r, 401, "invalid_token", "bad signature: the token does not verify with key ec1 "
               "(ES256); it was altered or signed by another key");
  free(h); free(p); free(input); free(s); free(t);
  tp__mcp_auth_free(a);
}

TEST(tampered_payload_is_a_bad_signature) {
  tp__mcp_auth *a = std_auth();
  tp__mcp_auth_result r;
  char *t = jwt("RS256", rsa1, "rsa1", claims(""));
  char *other = jwt("RS256", rsa1, "rsa1", "{\"sub\":\"mallory\"}");
  /* other's payload under t's signature */
  char *d1 = strchr(t, '.'), *d2 = strchr(d1 + 1, '.');
  char *o1 = strchr(other, '.'), *o2 = strchr(o1 + 1, '.');
  char *forged = NULL;
  if (asprintf(&forged, "%.*s%.*s%s", (int)(d1 - t), t, (int)(o2 - o1), o1, d2) < 0) abort();
  CHECK_INT(check_tok(a, forged, NULL, &r), 401);
  CHECK_RESULT(r, 401, "invalid_token", "bad signature: the token does not verify with key rsa1 "
               "(RS256); it was altered or signed by another key");
  free(t); free(other); free(forged);
  tp__mcp_auth_free(a);
}

/* ---- JWTs: the header ------------------------------------------------------------------ */

TEST(alg_none_is_never_accepted) {
  tp__mcp_auth *a = std_auth();
  tp__mcp_auth_result r;
  char *t = jwt_raw("none", NULL, NULL, "{\"alg\":\"none\"}", claims(""));
  CHECK_INT(check_tok(a, t, NULL, &r), 401);
  CHECK_RESULT(r, 401, "invalid_token", "alg none (an unsigned token) is never accepted");
  free(t);
  t = jwt_raw("XX", NULL, NULL, "{\"alg\":\"nOnE\"}", claims(""));
  CHECK_INT(check_tok(a, t, NULL, &r), 401);
  CHECK_STR(r.description, "alg none (an unsigned token) is never accepted");
  free(t);
  tp__mcp_auth_free(a);
}

TEST(alg_outside_the_allowed_list_is_refused) {
  char err[300];
  tp__mcp_auth *a = make("{\"resource\": \"" RESOURCE "\", \"jwt\": {\"issuer\": \"" ISSUER "\", "
                    "\"jwks_file\": \"keys.json\", \"secret\": \"" SECRET "\", "
                    "\"algorithms\": [\"RS256\"]}}", err, sizeof err);
  tp__mcp_auth_result r;
  char *t = jwt("HS256", NULL, NULL, claims(""));
  CHECK_INT(check_tok(a, t, NULL, &r), 401);
  CHECK_RESULT(r, 401, "invalid_token", "alg HS256 is not accepted here (accepted: RS256)");
  free(t);
  t = jwt_raw("XX", NULL, NULL, "{\"alg\":\"PS256\"}", claims(""));
  CHECK_INT(check_tok(a, t, NULL, &r), 401);
  CHECK_RESULT(r, 401, "invalid_token", "alg PS256 is not accepted here (accepted: RS256)");
  free(t);
  tp__mcp_auth_free(a);
}

TEST(crit_and_nested_headers_are_refused) {
  tp__mcp_auth *a = std_auth();
  tp__mcp_auth_result r;
  char *t = jwt_raw("HS256", NULL, SECRET, "{\"alg\":\"HS256\",\"crit\":[\"exp\"],\"exp\":1}", claims(""));
  CHECK_INT(check_tok(a, t, NULL, &r), 401);
  CHECK_RESULT(r, 401, "invalid_token", "the JWT header has crit (extensions this server does "
               "not know, RFC 7515 section 4.1.11)");
  free(t);
  t = jwt_raw("HS256", NULL, SECRET, "{\"alg\":\"HS256\",\"cty\":\"JWT\"}", claims(""));
  CHECK_INT(check_tok(a, t, NULL, &r), 401);
  CHECK_RESULT(r, 401, "invalid_token", "nested or encrypted JWTs are not accepted");
  free(t);
  t = jwt_raw("HS256", NULL, SECRET, "{\"alg\":\"HS256\",\"typ\":\"dpop+jwt\"}", claims(""));
  CHECK_INT(check_tok(a, t, NULL, &r), 401);
  CHECK_RESULT(r, 401, "invalid_token", "typ dpop+jwt is not a JWT (expected JWT or at+jwt)");
  free(t);
  t = jwt_raw("HS256", NULL, SECRET, "{\"alg\":\"HS256\",\"typ\":\"at+jwt\"}", claims(""));
  CHECK_INT(check_tok(a, t, NULL, &r), 200);
  free(t);
  CHECK_INT(check_tok(a, "aGVhZGVy.cGF5bG9hZA.a2V5.aXY.dGFn", NULL, &r), 401);
  CHECK_RESULT(r, 401, "invalid_token", "the token is encrypted (JWE); this server takes signed "
               "JWTs (JWS) only");
  tp__mcp_auth_free(a);
}

TEST(malformed_tokens_say_which_part_is_wrong) {
  tp__mcp_auth *a = std_auth();
  tp__mcp_auth_result r;
  CHECK_INT(check_tok(a, "abc.def", NULL, &r), 401);
  CHECK_RESULT(r, 401, "invalid_token", "malformed JWT: expected three base64url parts separated "
               "by dots (header.payload.signature)");
  /* "eyJ" is '{"' but "eyK" leaves a stray bit: not strict base64url */
  char *h = b64s("{\"alg\":\"HS256\"}");
  char *p = b64s(claims(""));
  char *t = NULL;
  if (asprintf(&t, "%s.%s.AAAA", "eyJhbGciOiJIUzI1NiJ9x", p) < 0) abort();
  CHECK_INT(check_tok(a, t, NULL, &r), 401);
  CHECK_RESULT(r, 401, "invalid_token", "malformed JWT: its header is not base64url (RFC 7515: "
               "A-Z a-z 0-9 - _, no padding)");
  free(t);
  if (asprintf(&t, "%s.%s.AB", h, p) < 0) abort();  /* "AB": the B's low bits are set */
  CHECK_INT(check_tok(a, t, NULL, &r), 401);
  CHECK_RESULT(r, 401, "invalid_token", "malformed JWT: its signature is not base64url (RFC 7515: "
               "A-Z a-z 0-9 - _, no padding)");
  free(t);
  if (asprintf(&t, "%s.%s.", h, p) < 0) abort();
  CHECK_INT(check_tok(a, t, NULL, &r), 401);
  CHECK_RESULT(r, 401, "invalid_token", "the token has no signature");
  free(t);
  char *bad = b64s("{\"alg\":\"HS256\",}");
  if (asprintf(&t, "%s.%s.AAAA", bad, p) < 0) abort();
  CHECK_INT(check_tok(a, t, NULL, &r), 401);
  CHECK_HAS(r.description, "malformed JWT: its header is not JSON: ");
  free(t);
  free(bad);
  bad = b64s("[\"HS256\"]");
  if (asprintf(&t, "%s.%s.AAAA", bad, p) < 0) abort();
  CHECK_INT(check_tok(a, t, NULL, &r), 401);
  CHECK_RESULT(r, 401, "invalid_token", "malformed JWT: its header is not a JSON object");
  free(t);
  free(bad);
  /* duplicate keys: which "sub" counts is not left to chance */
  t = jwt("HS256", NULL, NULL, "{\"sub\":\"alice\",\"sub\":\"root\"}");
  CHECK_INT(check_tok(a, t, NULL, &r), 401);
  CHECK_HAS(r.description, "malformed JWT: its payload is not JSON: duplicate object key");
  free(t);
  free(h);
  free(p);
  tp__mcp_auth_free(a);
}

TEST(tokens_over_16_kib_are_refused_unread) {
  tp__mcp_auth *a = std_auth();
  tp__mcp_auth_result r;
  char *big = malloc(20001);
  memset(big, 'a', 20000);
  big[20000] = '\0';
  big[10] = big[20] = '.';
  CHECK_INT(check_tok(a, big, NULL, &r), 401);
  CHECK_RESULT(r, 401, "invalid_token", "the token is 20000 bytes, more than this server takes (16384)");
  free(big);
  tp__mcp_auth_free(a);
}

/* ---- JWTs: the claims ------------------------------------------------------------------ */

/* The HS256 token of these claims, checked by an authenticator of the secret alone. */
static void claims_case (const char *claimset, int status, const char *desc) {
  char err[300];
  tp__mcp_auth *a = make("{\"resource\": \"" RESOURCE "\", \"jwt\": {\"issuer\": \"" ISSUER "\", "
                    "\"secret\": \"" SECRET "\"}}", err, sizeof err);
  tp__mcp_auth_result r;
  char *t = jwt("HS256", NULL, NULL, claimset);
  CHECK_INT(check_tok(a, t, NULL, &r), status);
  CHECK_STR(r.error, status == 200 ? "" : "invalid_token");
  CHECK_STR(r.description, desc);
  if (status != 200) CHECK_STR(r.principal, "");
  free(t);
  tp__mcp_auth_free(a);
}

#define AUD "\"aud\":\"" RESOURCE "\""
#define ISS "\"iss\":\"" ISSUER "\""

TEST(issuer_must_be_the_configured_one) {
  claims_case("{\"iss\":\"https://evil.example.com\"," AUD ",\"sub\":\"a\",\"exp\":1800003600}", 401,
              "the issuer is https://evil.example.com, this server takes tokens of https://auth.example.com");
  claims_case("{" AUD ",\"sub\":\"a\",\"exp\":1800003600}", 401,
              "the token has no iss claim; this server takes tokens of https://auth.example.com");
}

TEST(audience_must_name_this_server) {
  claims_case("{" ISS ",\"aud\":\"https://other.example.com/mcp\",\"sub\":\"a\",\"exp\":1800003600}",
              401, "the audience is https://other.example.com/mcp, this server is " RESOURCE);
  claims_case("{" ISS ",\"aud\":[\"https://a.example.com\",\"https://b.example.com\"],\"sub\":\"a\","
              "\"exp\":1800003600}", 401,
              "the audience is https://a.example.com and others, this server is " RESOURCE);
  claims_case("{" ISS ",\"sub\":\"a\",\"exp\":1800003600}", 401,
              "the token has no aud claim; this server is " RESOURCE);
  claims_case("{" ISS ",\"aud\":[\"https://a.example.com\",\"" RESOURCE "\"],\"sub\":\"a\","
              "\"exp\":1800003600}", 200, "");
  char err[300];  /* jwt.audience replaces the resource */
  tp__mcp_auth *a = make("{\"resource\": \"" RESOURCE "\", \"jwt\": {\"issuer\": \"" ISSUER "\", "
                    "\"secret\": \"" SECRET "\", \"audience\": \"api://tidepool\"}}", err, sizeof err);
  tp__mcp_auth_result r;
  char *t = jwt("HS256", NULL, NULL, claims(""));
  CHECK_INT(check_tok(a, t, NULL, &r), 401);
  CHECK_STR(r.description, "the audience is " RESOURCE ", this server is api://tidepool");
  free(t);
  tp__mcp_auth_free(a);
}

TEST(expiry_is_required_and_honoured_with_leeway) {
  claims_case("{" ISS "," AUD ",\"sub\":\"a\"}", 401,
              "the token has no exp claim; this server takes only tokens that expire");
  claims_case("{" ISS "," AUD ",\"sub\":\"a\",\"exp\":1799999910}", 401,
              "the token expired at 2027-01-15T07:58:30Z (90 s ago); get a new one");
  claims_case("{" ISS "," AUD ",\"sub\":\"a\",\"exp\":1799990000}", 401,
              "the token expired at 2027-01-15T05:13:20Z (2 h ago); get a new one");
  claims_case("{" ISS "," AUD ",\"sub\":\"a\",\"exp\":1799999970}", 200, "");  /* 30 s: leeway */
  claims_case("{" ISS "," AUD ",\"sub\":\"a\",\"exp\":\"1800003600\"}", 401,
              "the exp claim is not a number of seconds since 1970 (NumericDate)");
  claims_case("{" ISS "," AUD ",\"sub\":\"a\",\"exp\":1800003600.5}", 200, "");
}

TEST(not_before_and_issued_at_are_honoured_with_leeway) {
  claims_case("{" ISS "," AUD ",\"sub\":\"a\",\"exp\":1800003600,\"nbf\":1800000100}", 401,
              "the token is not valid before 2027-01-15T08:01:40Z (in 100 s); check the clocks");
  claims_case("{" ISS "," AUD ",\"sub\":\"a\",\"exp\":1800003600,\"nbf\":1800000050}", 200, "");
  claims_case("{" ISS "," AUD ",\"sub\":\"a\",\"exp\":1800003600,\"iat\":1800000600}", 401,
              "the token was issued in the future, at 2027-01-15T08:10:00Z (in 10 min); check the clocks");
  claims_case("{" ISS "," AUD ",\"sub\":\"a\",\"exp\":1800003600,\"iat\":1800000030}", 200, "");
}

TEST(principal_claim_is_required) {
  claims_case("{" ISS "," AUD ",\"exp\":1800003600}", 401,
              "the sub claim (the caller) is missing or not a string");
  claims_case("{" ISS "," AUD ",\"sub\":\"\",\"exp\":1800003600}", 401,
              "the sub claim (the caller) is empty");
  claims_case("{" ISS "," AUD ",\"sub\":\"a\\nb\",\"exp\":1800003600}", 401,
              "the sub claim (the caller) is not printable");
  char err[300];  /* principal_claim names another */
  tp__mcp_auth *a = make("{\"resource\": \"" RESOURCE "\", \"jwt\": {\"issuer\": \"" ISSUER "\", "
                    "\"secret\": \"" SECRET "\", \"principal_claim\": \"email\"}}", err, sizeof err);
  tp__mcp_auth_result r;
  char *t = jwt("HS256", NULL, NULL, claims(",\"email\":\"alice@example.com\""));
  CHECK_INT(check_tok(a, t, NULL, &r), 200);
  CHECK_STR(r.principal, "alice@example.com");
  free(t);
  tp__mcp_auth_free(a);
}

TEST(scopes_from_scope_string_or_scp_array) {
  tp__mcp_auth *a = std_auth();
  tp__mcp_auth_result r;
  char *t = jwt("HS256", NULL, NULL, "{" ISS "," AUD ",\"sub\":\"a\",\"exp\":1800003600,"
                "\"scp\":[\"tools.read\",\"tools.admin\"]}");
  CHECK_INT(check_tok(a, t, "tools.admin", &r), 200);
  CHECK_STR(r.scopes, "tools.read tools.admin");
  free(t);
  t = jwt("HS256", NULL, NULL, "{" ISS "," AUD ",\"sub\":\"a\",\"exp\":1800003600,"
          "\"scope\":\"  tools.read   tools.read tools.call \"}");
  CHECK_INT(check_tok(a, t, NULL, &r), 200);
  CHECK_STR(r.scopes, "tools.read tools.call");
  free(t);
  /* the policy splits scopes at commas too: "tools.read,admin" would grant admin there */
  t = jwt("HS256", NULL, NULL, "{" ISS "," AUD ",\"sub\":\"a\",\"exp\":1800003600,"
          "\"scope\":\"tools.read tools.read,admin\",\"scp\":[\"x\"]}");
  CHECK_INT(check_tok(a, t, NULL, &r), 200);
  CHECK_STR(r.scopes, "tools.read");
  free(t);
  t = jwt("HS256", NULL, NULL, "{" ISS "," AUD ",\"sub\":\"a\",\"exp\":1800003600,"
          "\"scp\":[\"tools.read\",\"x,admin\"]}");
  CHECK_INT(check_tok(a, t, NULL, &r), 200);
  CHECK_STR(r.scopes, "tools.read");
  free(t);
  t = jwt("HS256", NULL, NULL, "{" ISS "," AUD ",\"sub\":\"a\",\"exp\":1800003600,\"scope\":\"tools.call\"}");
  CHECK_INT(check_tok(a, t, "tools.call", &r), 403);
  CHECK_RESULT(r, 403, "insufficient_scope", "a lacks the scope tools.read (it has: tools.call)");
  free(t);
  tp__mcp_auth_free(a);
  claims_case("{" ISS "," AUD ",\"sub\":\"a\",\"exp\":1800003600,\"scope\":42}", 401,
              "the scope claim is not scopes (a string of scopes separated by spaces, or an array "
              "of them, printable ASCII, 1023 bytes at most)");
  claims_case("{" ISS "," AUD ",\"sub\":\"a\",\"exp\":1800003600,\"scp\":[\"a\",\"b c\"]}", 401,
              "the scp claim is not scopes (a string of scopes separated by spaces, or an array "
              "of them, printable ASCII, 1023 bytes at most)");
}

/* ---- threads ------------------------------------------------------------------------- */

typedef struct worker { tp__mcp_auth *a; char *tokens[4]; int wrong; } worker;

static void *check_many (void *arg) {
  worker *w = arg;
  static const int want[4] = { 200, 200, 200, 401 };
  for (int i = 0; i < 200; i++) {
    tp__mcp_auth_result r;
    int k = i % 4;
    if (check_tok(w->a, w->tokens[k], NULL, &r) != want[k] ||
        strcmp(r.principal, k == 3 ? "" : "alice") != 0)
      w->wrong++;
  }
  return NULL;
}

TEST(one_authenticator_serves_several_threads_at_once) {
  tp__mcp_auth *a = std_auth();
  char *t[4] = { jwt("RS256", rsa1, "rsa1", claims("")), jwt("ES256", ec1, "ec1", claims("")),
                 jwt("HS256", NULL, NULL, claims("")), jwt("RS256", rsa2, "rsa1", claims("")) };
  worker w[4];
  pthread_t th[4];
  for (int i = 0; i < 4; i++) {
    w[i] = (worker){ a, { t[i % 3], t[(i + 1) % 3], t[(i + 2) % 3], t[3] }, 0 };  /* bad last */
    CHECK_INT(pthread_create(&th[i], NULL, check_many, &w[i]), 0);
  }
  for (int i = 0; i < 4; i++) {
    pthread_join(th[i], NULL);
    CHECK_INT(w[i].wrong, 0);
  }
  for (int i = 0; i < 4; i++) free(t[i]);
  tp__mcp_auth_free(a);
}

/* ---- the resource server's documents ----------------------------------------------------- */

TEST(resource_metadata_document_is_rfc_9728) {
  tp__mcp_auth *a = std_auth();
  char *m = tp__mcp_auth_resource_metadata(a);
  CHECK_STR(m, "{\"resource\":\"" RESOURCE "\",\"authorization_servers\":[\"" ISSUER "\"],"
            "\"scopes_supported\":[\"tools.read\",\"tools.call\",\"tools.admin\"],"
            "\"bearer_methods_supported\":[\"header\"]}");
  free(m);
  CHECK_STR(tp__mcp_auth_resource(a), RESOURCE);
  CHECK_STR(tp__mcp_auth_metadata_path(a), "/.well-known/oauth-protected-resource/mcp");
  tp__mcp_auth_free(a);
  char err[300];
  a = make("{\"resource\": \"http://127.0.0.1:8080\", \"tokens\": [{\"token\": "
           "\"local-token-0123456789\", \"principal\": \"me\"}]}", err, sizeof err);
  m = tp__mcp_auth_resource_metadata(a);
  CHECK_STR(m, "{\"resource\":\"http://127.0.0.1:8080\",\"bearer_methods_supported\":[\"header\"]}");
  free(m);
  CHECK_STR(tp__mcp_auth_metadata_path(a), "/.well-known/oauth-protected-resource");
  tp__mcp_auth_result r;
  tp__mcp_auth_check(a, NULL, NULL, NOW, &r);
  char *c = tp__mcp_auth_challenge(a, &r);
  CHECK_STR(c, "Bearer resource_metadata=\"http://127.0.0.1:8080/.well-known/oauth-protected-resource\"");
  free(c);
  tp__mcp_auth_free(a);
}

TEST(challenge_never_carries_quotes_or_control_characters) {
  tp__mcp_auth *a = std_auth();
  tp__mcp_auth_result r;
  char *t = jwt("HS256", NULL, NULL, "{\"iss\":\"x\\\"y\\\\z\\u0001\"," AUD ",\"sub\":\"a\",\"exp\":1800003600}");
  CHECK_INT(check_tok(a, t, NULL, &r), 401);
  CHECK_STR(r.description, "the issuer is x?y?z?, this server takes tokens of " ISSUER);
  char *c = tp__mcp_auth_challenge(a, &r);
  CHECK_STR(c, "Bearer resource_metadata=\"" META "\", error=\"invalid_token\", "
            "error_description=\"the issuer is x?y?z?, this server takes tokens of " ISSUER "\", "
            "scope=\"tools.read\"");
  free(c);
  free(t);
  tp__mcp_auth_free(a);
}

TEST(config_check_knows_the_auth_section) {
  char err[2000];
  const char *good = "{\"auth\": " STD "}";
  CHECK_INT(tp_config_check(good, strlen(good), dir, err, sizeof err), TP_OK);
  CHECK_STR(err, "");
  const char *bad = "{\"auth\": {\"resource\": \"ftp://x\", \"jwt\": {\"issuer\": \"i\", "
                    "\"leeway\": 3}}}";
  CHECK_INT(tp_config_check(bad, strlen(bad), dir, err, sizeof err), TP_EINVAL);
  CHECK_STR(err, "config: /auth/jwt: missing \"jwks_file\" (no key: give \"jwks_file\" (a JWKS), "
            "\"key_file\" (a PEM public key) or \"secret\" (HS256, \"env:NAME\"))\n"
            "config: /auth/jwt/leeway: unknown field \"leeway\" (did you mean \"leeway_s\"?); the "
            "fields are: issuer, audience, algorithms, jwks_file, key_file, secret, leeway_s, "
            "principal_claim, scope_claim, description\n"
            "config: /auth/resource: expected a string matching /^https?://[^/?#@\\s\"]+(/[^?#\\s\"]*)?$/, "
            "got \"ftp://x\"; for example \"resource\": \"https://mcp.example.com/mcp\"");
  const char *scopes = "{\"auth\": {\"resource\": \"" RESOURCE "\", \"scopes_supported\": "
                       "[\"e+f-g\", \"a,b\"], \"tokens\": []}}";
  CHECK_INT(tp_config_check(scopes, strlen(scopes), dir, err, sizeof err), TP_EINVAL);
  CHECK_STR(err, "config: /auth/scopes_supported/1: expected a string matching "
            "/^[!#-+\\--\\[\\]-~]+$/, got \"a,b\"");
  const char *none = "{\"auth\": {\"resource\": \"" RESOURCE "\"}}";
  CHECK_INT(tp_config_check(none, strlen(none), dir, err, sizeof err), TP_EINVAL);
  CHECK_STR(err, "config: /auth: missing \"tokens\" (no credential would be accepted: give "
            "\"tokens\" (static bearer tokens) or \"jwt\" (tokens of an authorization server))");
}

int main (int argc, char **argv) {
  tp_test_args(argc, argv);
  setup();
  RUN(no_auth_section_lets_every_caller_in_as_no_one);
  RUN(static_token_gives_its_principal_and_scopes);
  RUN(static_token_from_a_file_and_from_the_environment);
  RUN(unknown_static_token_is_401_invalid_token);
  RUN(missing_header_is_401_without_error_code);
  RUN(other_schemes_and_bad_headers_are_401_invalid_request);
  RUN(insufficient_scope_is_403_naming_the_missing_scope);
  RUN(required_scopes_of_the_config_apply_to_every_call);
  RUN(a_scope_check_of_its_own_ignores_required_scopes);
  RUN(static_token_rules_of_the_config);
  RUN(section_rules_of_the_config);
  RUN(hs256_token_gives_sub_and_scope);
  RUN(hs256_with_another_secret_is_a_bad_signature);
  RUN(hs256_secret_shorter_than_32_bytes_is_refused);
  RUN(rs256_and_es256_tokens_pick_their_key_by_kid);
  RUN(kid_not_in_the_jwks_is_401_naming_the_keys);
  RUN(alg_that_does_not_fit_the_key_type_is_refused);
  RUN(rsa_key_under_2048_bits_is_refused);
  RUN(jwks_keys_that_are_not_keys_are_kept_with_their_reason);
  RUN(pem_key_file_verifies_tokens_with_or_without_kid);
  RUN(es256_signature_must_be_jose_r_and_s);
  RUN(tampered_payload_is_a_bad_signature);
  RUN(alg_none_is_never_accepted);
  RUN(alg_outside_the_allowed_list_is_refused);
  RUN(crit_and_nested_headers_are_refused);
  RUN(malformed_tokens_say_which_part_is_wrong);
  RUN(tokens_over_16_kib_are_refused_unread);
  RUN(issuer_must_be_the_configured_one);
  RUN(audience_must_name_this_server);
  RUN(expiry_is_required_and_honoured_with_leeway);
  RUN(not_before_and_issued_at_are_honoured_with_leeway);
  RUN(principal_claim_is_required);
  RUN(scopes_from_scope_string_or_scp_array);
  RUN(one_authenticator_serves_several_threads_at_once);
  RUN(resource_metadata_document_is_rfc_9728);
  RUN(challenge_never_carries_quotes_or_control_characters);
  RUN(config_check_knows_the_auth_section);
  teardown();
  return tp_test_end();
}
