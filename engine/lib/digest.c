/*
** digest.c: SHA-256 as hex (digest.h). With libcrypto's SHA-256 functions (while the
** library has them: OpenSSL 3 deprecates them, OPENSSL_NO_DEPRECATED_3_0 drops them) a
** hash is a context on the stack: no dispatch through a provider, which was a third of
** hashing a call's arguments for the policy's decision callback. Without them each thread
** keeps one EVP digest context and the process one fetched SHA-256: a fresh context per
** hash, with its implicit fetch of the algorithm, cost more than hashing the arguments.
*/
#define OPENSSL_SUPPRESS_DEPRECATED  /* SHA256_Init and co, declared while they exist */
#include <pthread.h>
#include <string.h>

#include <openssl/evp.h>
#include <openssl/sha.h>

#include "digest.h"
#include "util.h"

#ifndef OPENSSL_NO_DEPRECATED_3_0
#define TP_SHA256_DIRECT 1
#else
#define TP_SHA256_DIRECT 0
#endif

static pthread_once_t once = PTHREAD_ONCE_INIT;
static pthread_key_t ctx_key;
static int key_ok;
static EVP_MD *sha256;  /* fetched once, kept for the process */

static void ctx_free (void *p) { EVP_MD_CTX_free(p); }

static void setup (void) {
  key_ok = pthread_key_create(&ctx_key, ctx_free) == 0;
  sha256 = EVP_MD_fetch(NULL, "SHA256", NULL);
}

/* This thread's context, made at its first hash; NULL when out of memory. */
static EVP_MD_CTX *thread_ctx (void) {
  pthread_once(&once, setup);
  if (!key_ok || sha256 == NULL) return NULL;
  EVP_MD_CTX *c = pthread_getspecific(ctx_key);
  if (c == NULL && (c = EVP_MD_CTX_new()) != NULL && pthread_setspecific(ctx_key, c) != 0) {
    EVP_MD_CTX_free(c);
    c = NULL;
  }
  return c;
}

/* The digest through EVP; 32, or 0 when libcrypto fails. */
static unsigned evp_sha256 (const char *s, size_t len, unsigned char *md) {
  unsigned int n = 0;
  EVP_MD_CTX *c = thread_ctx();
  if (c != NULL) {
    if (!EVP_DigestInit_ex(c, sha256, NULL) || !EVP_DigestUpdate(c, s, len) ||
        !EVP_DigestFinal_ex(c, md, &n))
      n = 0;
  }
  else if (!EVP_Digest(s, len, md, &n, EVP_sha256(), NULL))
    n = 0;
  return n;
}

void tp__sha256_hex (const char *s, size_t len, char out[65]) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
#if TP_SHA256_DIRECT
  SHA256_CTX x;
  if (SHA256_Init(&x) && SHA256_Update(&x, s, len) && SHA256_Final(md, &x)) n = 32;
  else n = evp_sha256(s, len, md);
#else
  n = evp_sha256(s, len, md);
#endif
  if (n != 32) memset(md, 0, 32);
  tp__hex(md, 32, out);
}

void tp__sha256_hex_evp (const char *s, size_t len, char out[65]) {
  unsigned char md[EVP_MAX_MD_SIZE];
  if (evp_sha256(s, len, md) != 32) memset(md, 0, 32);
  tp__hex(md, 32, out);
}
