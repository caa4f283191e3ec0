/*
** digest.h: SHA-256 as lower-case hex, on libcrypto (digest.c). The one hash of a call's
** arguments: the policy's decisions (args_sha256, the audit log) and the replay's call log
** (args_hash) name the same arguments with the same text.
*/
#ifndef tidepool_digest_h
#define tidepool_digest_h

#include <stddef.h>

/* out: the SHA-256 of s[0..len) as 64 hex digits and a NUL; 64 zeros if libcrypto fails. */
void tp__sha256_hex(const char *s, size_t len, char out[65]);
/* The same through EVP and this thread's kept context, the way taken without libcrypto's
** SHA-256 functions (tests compare the two). */
void tp__sha256_hex_evp(const char *s, size_t len, char out[65]);

#endif
