/*
** digest.c: SHA-256 as hex (digest.h).
*/
#include <openssl/evp.h>

#include "digest.h"

void tp__sha256_hex (const char *s, size_t len, char out[65]) {
  static const char hex[] = "0123456789abcdef";
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  if (!EVP_Digest(s, len, md, &n, EVP_sha256(), NULL) || n != 32) n = 0;
  for (unsigned i = 0; i < 32; i++) {
    out[2 * i] = n ? hex[md[i] >> 4] : '0';
    out[2 * i + 1] = n ? hex[md[i] & 15] : '0';
  }
  out[64] = '\0';
}
