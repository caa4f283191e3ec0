/*
** auth.h: who calls `tidepool mcp --http`, from the config's "auth" section (auth.c, on
** OpenSSL's libcrypto). Not installed, not API.
**
** Two kinds of credential, both sent as "Authorization: Bearer <token>":
**   static tokens (local use): each names its principal and scopes;
**   JWTs (RS256, ES256, HS256) whose issuer, audience (the server's canonical URL),
**   expiry (and not-before) and scopes are checked, with keys from a PEM file, a JWKS
**   file, or a shared secret (HS256).
** As a resource server (RFC 9728) it makes the document of
** /.well-known/oauth-protected-resource and the WWW-Authenticate header of 401 and 403
** answers. A token is never passed on: nothing here keeps it past tp__mcp_auth_check.
**
** The config's "auth" section is read once, by tp__mcp_auth_new: static tokens are kept as
** their SHA-256 (compared in constant time, every one of them, so the time of a check
** says nothing about which token came close), keys are built into EVP_PKEYs (JWKS: RSA
** from n and e, EC P-256 from x and y, through EVP_PKEY_fromdata), secrets are read from
** the environment or a file. After that the object is read only: tp__mcp_auth_check may run
** on several threads at once.
**
** A JWT is taken apart strictly, in this order, each step with its own 401 description:
** size (16 KiB), three base64url parts (no padding, no stray bits), the header (a JSON
** object without duplicate keys; alg allowed and never "none"; no crit, no nested JWT;
** kid naming a key of the alg's type), the signature (RS256: PKCS#1 v1.5 with SHA-256 and
** a key of 2048 bits or more; ES256: JOSE's r||s over P-256, turned into DER; HS256: HMAC
** compared in constant time, secrets of 32 bytes or more), then the claims (iss, aud, exp
** required, nbf and iat with leeway, principal, scopes). Nothing is read from the payload
** before its signature holds.
*/
#ifndef tidepool_auth_h
#define tidepool_auth_h

#include <stddef.h>
#include <stdint.h>

struct json_t;
typedef struct tp__mcp_auth tp__mcp_auth;

typedef struct tp__mcp_auth_result {
  int status;              /* 200: let in; 401: no or bad credential; 403: not enough */
  char principal[256];     /* the caller (a static token's "principal", a JWT's "sub") */
  char scopes[1024];       /* its scopes, separated by spaces (tp_run_set_principal's form) */
  char error[32];          /* RFC 6750: "invalid_request", "invalid_token",
                           ** "insufficient_scope"; "" when status is 200 */
  char description[256];   /* for a person: what was wrong ("token expired 30 s ago") */
  char needed[1024];       /* 401 and 403: the scopes the request needs (required_scopes
                           ** and required), the challenge's scope=; "" when none */
} tp__mcp_auth_result;

/* An authenticator for the "auth" section (NULL: none, every caller let in as no one);
** paths in it are relative to dir (the config file's folder). NULL with err filled when
** the section is wrong or a key file cannot be read. */
tp__mcp_auth *tp__mcp_auth_new(const struct json_t *section, const char *dir, char *err,
                      size_t errlen);
void tp__mcp_auth_free(tp__mcp_auth *a);

/* Checks the value of an Authorization header (NULL when absent) at now (seconds since
** the epoch), needing every scope of the config's required_scopes and of required
** (spaces between; NULL or "": none). Fills out; returns out->status. */
int tp__mcp_auth_check(tp__mcp_auth *a, const char *authorization, const char *required,
                       int64_t now, tp__mcp_auth_result *out);
/* The same, needing the scopes of scope alone: the config's required_scopes are for the
** MCP endpoint, not for /metrics ("metrics") or the operator page ("operator"). */
int tp__mcp_auth_check_scope(tp__mcp_auth *a, const char *authorization, const char *scope,
                             int64_t now, tp__mcp_auth_result *out);

/* The JSON text of /.well-known/oauth-protected-resource (resource, authorization_servers,
** scopes_supported, bearer_methods_supported); free it. NULL when out of memory. */
char *tp__mcp_auth_resource_metadata(const tp__mcp_auth *a);

/* The WWW-Authenticate header value for a 401 or 403 result (Bearer
** resource_metadata="...", error, error_description, scope); free it. */
char *tp__mcp_auth_challenge(const tp__mcp_auth *a, const tp__mcp_auth_result *r);

/* The path the document is served at: "/.well-known/oauth-protected-resource" with the
** path of "resource" after it (RFC 9728 section 3.1: "/.well-known/oauth-protected-resource/mcp"
** for "https://mcp.example.com/mcp"); the challenge's resource_metadata is the resource's
** origin and this path. Borrowed. */
const char *tp__mcp_auth_metadata_path(const tp__mcp_auth *a);

/* The canonical URL of the server (the audience JWTs must name), from the section's
** "resource"; borrowed. */
const char *tp__mcp_auth_resource(const tp__mcp_auth *a);

#endif
