/*
** approve.c: the parts of approvals over MCP that need no server thread (see
** approve.h). The secret is 32 bytes (a file's SHA-256, or random); two keys are
** derived from it with HMAC-SHA256 under fixed labels, one for bindings and one for
** requestState, so neither use can stand for the other.
**
** A requestState is base64url (no padding) of a 12-byte random nonce, the AES-256-GCM
** ciphertext of {"v":1,"p":principal,"exp":unix seconds,"s":state} and its 16-byte tag,
** with the label as additional data. It is hostile input on the way back: its length is
** capped before decoding, and nothing of it is read before the tag checks.
*/
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

#include "tidepool.h"
#include "approve.h"

static unsigned char bind_key[32], seal_key[32];
static int have_secret;

#define STATE_MAX   (64u * 1024u)   /* a requestState's text */
#define ARGS_SHOWN  600             /* bytes of arguments an elicitation shows */
#define NOTE_MAX    2000

static const char bind_label[] = "tidepool approval binding v1";
static const char seal_label[] = "tidepool requestState v1";

static void derive (const unsigned char *secret, size_t n) {
  unsigned int len = 32;
  HMAC(EVP_sha256(), secret, (int)n, (const unsigned char *)bind_label, sizeof bind_label - 1,
       bind_key, &len);
  len = 32;
  HMAC(EVP_sha256(), secret, (int)n, (const unsigned char *)seal_label, sizeof seal_label - 1,
       seal_key, &len);
  have_secret = 1;
}

int tp__mcp_approve_secret_init (const char *file, char *why, size_t whylen) {
  unsigned char secret[32];
  if (file == NULL) {
    if (RAND_bytes(secret, sizeof secret) != 1) {
      snprintf(why, whylen, "no random bytes for the server secret");
      return -1;
    }
    derive(secret, sizeof secret);
    OPENSSL_cleanse(secret, sizeof secret);
    return 0;
  }
  int fd = open(file, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    snprintf(why, whylen, "--secret-file: cannot open %s: %s", file, strerror(errno));
    return -1;
  }
  unsigned char buf[4096];
  size_t n = 0;
  for (;;) {
    ssize_t r = read(fd, buf + n, sizeof buf - n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    n += (size_t)r;
    if (n == sizeof buf) break;
  }
  close(fd);
  while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r')) n--;  /* an editor's newline */
  if (n < 32) {
    snprintf(why, whylen, "--secret-file: %s holds %zu bytes; a secret needs at least 32 "
             "(for example: openssl rand -hex 32 > %s)", file, n, file);
    OPENSSL_cleanse(buf, sizeof buf);
    return -1;
  }
  SHA256(buf, n, secret);
  OPENSSL_cleanse(buf, sizeof buf);
  derive(secret, sizeof secret);
  OPENSSL_cleanse(secret, sizeof secret);
  return 0;
}

int tp__mcp_approve_parse_ttl (const char *text, uint64_t *us, char *why, size_t whylen) {
  size_t n = text ? strlen(text) : 0;
  if (n > 1 && n < 40 && text[n - 1] == 'h' && text[n - 2] >= '0' && text[n - 2] <= '9') {
    char num[48];
    memcpy(num, text, n - 1);
    num[n - 1] = '\0';
    uint64_t s;
    if (tp_parse_value(TP_UNIT_DURATION, num, 1000000000ull * 1000000u / 3600u, &s, NULL,
                       NULL, 0) == TP_OK) {
      *us = s * 3600u;
      return 0;
    }
  }
  else if (tp_parse_value(TP_UNIT_DURATION, text, 1000000000ull * 1000000u, us, NULL, NULL,
                          0) == TP_OK)
    return 0;
  snprintf(why, whylen, "--pause-ttl: bad duration '%s' (use 500ms, 30s, 10m or 24h)",
           text ? text : "");
  return -1;
}

void tp__mcp_approve_format_ttl (uint64_t us, char *buf, size_t len) {
  uint64_t hour = 3600ull * 1000000u;
  if (us >= hour && us % hour == 0) snprintf(buf, len, "%lluh", (unsigned long long)(us / hour));
  else tp_format_value(TP_UNIT_DURATION, us, buf, len);
}

static void hex (const unsigned char *p, size_t n, char *out) {
  static const char digits[] = "0123456789abcdef";
  for (size_t i = 0; i < n; i++) {
    out[2 * i] = digits[p[i] >> 4];
    out[2 * i + 1] = digits[p[i] & 15];
  }
  out[2 * n] = '\0';
}

void tp__mcp_approve_run_id (unsigned w, char *out) {
  unsigned char r[16];
  if (RAND_bytes(r, sizeof r) != 1) {  /* never expected; still unique within the process */
    static uint64_t n;
    uint64_t t = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    memcpy(r, &t, 8);
    n++;
    memcpy(r + 8, &n, 8);
  }
  char h[33];
  hex(r, sizeof r, h);
  snprintf(out, TP__MCP_APPROVE_RUN_ID_MAX, "%u-%s", w, h);
}

void tp__mcp_approve_binding (const char *run_id, uint64_t seq, const char *tool, const char *args,
                      const char *principal, char *out) {
  unsigned char ah[32], mac[32];
  char ahex[65];
  SHA256((const unsigned char *)args, strlen(args), ah);
  hex(ah, sizeof ah, ahex);
  if (principal == NULL) principal = "";
  size_t n = strlen(run_id) + strlen(tool) + strlen(principal) + 100;
  char *msg = malloc(n);
  if (msg == NULL) { out[0] = '\0'; return; }  /* matches nothing: given bindings are 64 */
  /* the local principal's message is the one of before principals: its paused runs stay
  ** resumable across an upgrade */
  int len = *principal
    ? snprintf(msg, n, "%s\n%llu\n%s\n%s\n%zu:%s", run_id, (unsigned long long)seq, tool,
               ahex, strlen(principal), principal)
    : snprintf(msg, n, "%s\n%llu\n%s\n%s", run_id, (unsigned long long)seq, tool, ahex);
  unsigned int ml = 32;
  HMAC(EVP_sha256(), bind_key, sizeof bind_key, (unsigned char *)msg, (size_t)len, mac, &ml);
  free(msg);
  hex(mac, sizeof mac, out);
}

int tp__mcp_approve_binding_eq (const char *want, const char *given, size_t given_len) {
  size_t n = strlen(want);
  if (n == 0 || given_len != n) return 0;
  return CRYPTO_memcmp(want, given, n) == 0;
}

int tp__mcp_approve_config_asks (const char *config, size_t len) {
  json_t *cfg = config ? tp_json_parse(config, len, NULL, 0) : NULL;
  json_t *rules = json_object_get(json_object_get(cfg, "policy"), "rules");
  size_t i;
  json_t *r;
  int asks = 0;
  json_array_foreach(rules, i, r) {
    const char *eff = json_string_value(json_object_get(r, "effect"));
    if (eff && strcmp(eff, "ask") == 0) asks = 1;
  }
  json_decref(cfg);
  return asks;
}

/* args (JSON text) cut to ARGS_SHOWN bytes at a UTF-8 boundary, with a marker. */
static void shown_args (const char *args, char *out, size_t outlen) {
  size_t n = strlen(args);
  if (n <= ARGS_SHOWN) { snprintf(out, outlen, "%s", args); return; }
  size_t keep = ARGS_SHOWN;
  while (keep > 0 && ((unsigned char)args[keep] & 0xc0) == 0x80) keep--;
  snprintf(out, outlen, "%.*s ... (%zu bytes in all)", (int)keep, args, n);
}

json_t *tp__mcp_approve_elicit_params (const char *tool, const char *args, const char *reason,
                               int with_mode) {
  char shown[ARGS_SHOWN + 64], msg[ARGS_SHOWN + 1200];
  shown_args(args, shown, sizeof shown);
  snprintf(msg, sizeof msg, "A script wants to call tools.%.200s with %s. Approve this call? "
           "(%.600s)", tool, shown, reason);
  json_t *m = json_string(msg);
  if (m == NULL) m = json_string("A script wants to call a tool that needs your approval.");
  json_t *p = json_pack(
    "{s:o, s:{s:s, s:{s:{s:s, s:s, s:s}, s:{s:s, s:s, s:s, s:i}}, s:[s]}}",
    "message", m, "requestedSchema", "type", "object", "properties",
    "approve", "type", "boolean", "title", "Approve", "description",
    "Run this call as the script made it",
    "note", "type", "string", "title", "Note", "description",
    "Optional: why, for the script (it reads it when you decline)", "maxLength", NOTE_MAX,
    "required", "approve");
  if (p && with_mode) json_object_set_new(p, "mode", json_string("form"));
  return p;
}

void tp__mcp_approve_elicit_answer (const json_t *result, const char *errmsg, int *approve,
                            char *note, size_t notelen) {
  *approve = 0;
  if (result == NULL) {
    snprintf(note, notelen, "the client could not ask a person (%.300s)",
             errmsg ? errmsg : "no answer");
    return;
  }
  const char *action = json_string_value(json_object_get(result, "action"));
  json_t *content = json_object_get(result, "content");
  const char *n = json_string_value(json_object_get(content, "note"));
  if (action && strcmp(action, "accept") == 0) {
    if (json_is_true(json_object_get(content, "approve"))) { *approve = 1; note[0] = '\0'; return; }
    if (n && *n) snprintf(note, notelen, "the person declined: %.*s", NOTE_MAX, n);
    else snprintf(note, notelen, "the person declined");
    return;
  }
  if (action && strcmp(action, "decline") == 0)
    snprintf(note, notelen, "the person declined to answer");
  else if (action && strcmp(action, "cancel") == 0)
    snprintf(note, notelen, "the person dismissed the question without answering");
  else snprintf(note, notelen, "the client's answer had no action (accept, decline or cancel)");
}

json_t *tp__mcp_approve_pending_entry (uint64_t seq, const char *tool, const char *args,
                               const char *reason, const char *binding) {
  json_t *a = tp_json_parse(args, strlen(args), NULL, 0);
  if (a == NULL) a = json_string(args);
  return json_pack("{s:I, s:s, s:o, s:s, s:s}", "seq", (json_int_t)seq, "tool", tool,
                   "args", a, "reason", reason, "binding", binding);
}

json_t *tp__mcp_approve_paused_view (const char *run_id, json_t *pending, json_t *calls,
                             const char *resume_tool, uint64_t ttl_us) {
  char msg[700], ttl[32];
  tp__mcp_approve_format_ttl(ttl_us, ttl, sizeof ttl);
  snprintf(msg, sizeof msg, "The run is paused: a policy rule asks a person to approve the "
           "calls in pending, and nothing of them has run. Ask the user, then call %s with "
           "{run, decisions: [{seq, approve, note, binding}]}, one decision a pending call, "
           "its seq and binding copied from pending. The run then goes on from where it "
           "stopped and %s returns its result (or pauses again). Undecided after %s, the run "
           "ends and its calls are denied.", resume_tool, resume_tool, ttl);
  return json_pack("{s:b, s:s, s:s, s:o, s:o, s:s}", "ok", 0, "status", "paused", "run",
                   run_id, "pending", pending, "calls", calls ? calls : json_object(),
                   "message", msg);
}

json_t *tp__mcp_approve_resume_tool (const char *name) {
  json_t *t = json_loads(
    "{\"title\":\"Resume a paused run\","
    "\"description\":\"Decides the calls a paused run waits on (a result with \\\"status\\\": "
    "\\\"paused\\\") and continues that run: returns its result, or \\\"paused\\\" again at "
    "the next call that needs a person. Approve only what the user approved; copy seq and "
    "binding from the paused result's pending list.\","
    "\"inputSchema\":{\"type\":\"object\",\"properties\":{"
      "\"run\":{\"type\":\"string\",\"description\":\"the paused result's run\"},"
      "\"decisions\":{\"type\":\"array\",\"minItems\":1,\"items\":{\"type\":\"object\","
        "\"properties\":{\"seq\":{\"type\":\"integer\"},\"approve\":{\"type\":\"boolean\"},"
        "\"note\":{\"type\":\"string\",\"description\":\"the person's words, for the script\"},"
        "\"binding\":{\"type\":\"string\"},\"tool\":{\"type\":\"string\"},"
        "\"args\":{\"type\":\"object\"}},"
        "\"required\":[\"seq\",\"approve\",\"binding\"]}}},"
    "\"required\":[\"run\",\"decisions\"]}}", 0, NULL);
  if (t) json_object_set_new(t, "name", json_string(name));
  return t;
}

/* ---- base64url ---------------------------------------------------------------------- */

static const char b64[] =
  "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

static char *b64_encode (const unsigned char *p, size_t n) {
  char *out = malloc(n / 3 * 4 + 5);
  if (out == NULL) return NULL;
  size_t o = 0, i = 0;
  for (; i + 2 < n; i += 3) {
    unsigned v = (unsigned)p[i] << 16 | (unsigned)p[i + 1] << 8 | p[i + 2];
    out[o++] = b64[v >> 18];
    out[o++] = b64[(v >> 12) & 63];
    out[o++] = b64[(v >> 6) & 63];
    out[o++] = b64[v & 63];
  }
  if (n - i == 1) {
    unsigned v = (unsigned)p[i] << 16;
    out[o++] = b64[v >> 18];
    out[o++] = b64[(v >> 12) & 63];
  }
  else if (n - i == 2) {
    unsigned v = (unsigned)p[i] << 16 | (unsigned)p[i + 1] << 8;
    out[o++] = b64[v >> 18];
    out[o++] = b64[(v >> 12) & 63];
    out[o++] = b64[(v >> 6) & 63];
  }
  out[o] = '\0';
  return out;
}

/* -1 when s is not base64url without padding. */
static long b64_decode (const char *s, size_t n, unsigned char *out) {
  size_t o = 0;
  unsigned v = 0;
  int bits = 0;
  if (n % 4 == 1) return -1;
  for (size_t i = 0; i < n; i++) {
    const char *d = memchr(b64, s[i], 64);
    if (d == NULL || s[i] == '\0') return -1;
    v = v << 6 | (unsigned)(d - b64);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out[o++] = (unsigned char)(v >> bits);
      v &= (1u << bits) - 1;
    }
  }
  if (v != 0) return -1;  /* the unused low bits of the last character must be 0 */
  return (long)o;
}

/* ---- requestState ------------------------------------------------------------------- */

char *tp__mcp_approve_seal (const json_t *state, const char *principal, uint64_t ttl_us) {
  json_t *box = json_pack("{s:i, s:s, s:I, s:O}", "v", 1, "p", principal ? principal : "",
                          "exp", (json_int_t)(time(NULL) + (time_t)(ttl_us / 1000000u) + 1),
                          "s", state);
  size_t n;
  char *plain = box ? tp_json_text(box, &n) : NULL;
  json_decref(box);
  if (plain == NULL) return NULL;
  unsigned char *buf = malloc(12 + n + 16);
  EVP_CIPHER_CTX *cx = EVP_CIPHER_CTX_new();
  char *out = NULL;
  int len = 0, fin = 0;
  if (buf && cx && RAND_bytes(buf, 12) == 1 &&
      EVP_EncryptInit_ex(cx, EVP_aes_256_gcm(), NULL, seal_key, buf) == 1 &&
      EVP_EncryptUpdate(cx, NULL, &len, (const unsigned char *)seal_label,
                        sizeof seal_label - 1) == 1 &&
      EVP_EncryptUpdate(cx, buf + 12, &len, (unsigned char *)plain, (int)n) == 1 &&
      EVP_EncryptFinal_ex(cx, buf + 12 + len, &fin) == 1 &&
      EVP_CIPHER_CTX_ctrl(cx, EVP_CTRL_GCM_GET_TAG, 16, buf + 12 + len + fin) == 1)
    out = b64_encode(buf, 12 + (size_t)len + (size_t)fin + 16);
  EVP_CIPHER_CTX_free(cx);
  free(buf);
  OPENSSL_cleanse(plain, n);
  free(plain);
  return out;
}

json_t *tp__mcp_approve_open (const char *text, size_t len, const char *principal, int *code,
                      char *why, size_t whylen) {
  *code = -32602;
  if (!have_secret) {
    snprintf(why, whylen, "this server keeps no requestState");
    return NULL;
  }
  if (len > STATE_MAX) {
    snprintf(why, whylen, "Invalid params: requestState is %zu bytes long; this server's are "
             "at most %u: send back the requestState of its input_required result unchanged",
             len, STATE_MAX);
    return NULL;
  }
  unsigned char *raw = malloc(len / 4 * 3 + 3);
  if (raw == NULL) { *code = -32603; snprintf(why, whylen, "out of memory"); return NULL; }
  long n = b64_decode(text, len, raw);
  if (n < 0) {
    free(raw);
    snprintf(why, whylen, "Invalid params: requestState is not base64url text: send back the "
             "requestState of the input_required result unchanged");
    return NULL;
  }
  if (n < 12 + 16 + 2) {
    free(raw);
    snprintf(why, whylen, "Invalid params: requestState is too short to be one this server "
             "sealed: send back the requestState of the input_required result unchanged");
    return NULL;
  }
  size_t clen = (size_t)n - 28;
  unsigned char *plain = malloc(clen + 1);
  EVP_CIPHER_CTX *cx = EVP_CIPHER_CTX_new();
  int l = 0, fin = 0, ok = plain && cx &&
    EVP_DecryptInit_ex(cx, EVP_aes_256_gcm(), NULL, seal_key, raw) == 1 &&
    EVP_DecryptUpdate(cx, NULL, &l, (const unsigned char *)seal_label,
                      sizeof seal_label - 1) == 1 &&
    EVP_DecryptUpdate(cx, plain, &l, raw + 12, (int)clen) == 1 &&
    EVP_CIPHER_CTX_ctrl(cx, EVP_CTRL_GCM_SET_TAG, 16, raw + 12 + clen) == 1 &&
    EVP_DecryptFinal_ex(cx, plain + l, &fin) == 1;
  EVP_CIPHER_CTX_free(cx);
  free(raw);
  if (!ok) {
    free(plain);
    snprintf(why, whylen, "Invalid params: requestState failed its integrity check: it was "
             "changed, or sealed by a server with another secret. Send back the requestState "
             "of the input_required result unchanged, or call the tool again without it");
    return NULL;
  }
  json_t *box = tp_json_parse((char *)plain, (size_t)(l + fin), NULL, 0);
  OPENSSL_cleanse(plain, clen);
  free(plain);
  const char *p = json_string_value(json_object_get(box, "p"));
  json_t *exp = json_object_get(box, "exp"), *st = json_object_get(box, "s");
  if (p == NULL || !json_is_integer(exp) || !json_is_object(st)) {
    json_decref(box);
    snprintf(why, whylen, "Invalid params: requestState is not one this server made");
    return NULL;
  }
  if (strcmp(p, principal ? principal : "") != 0) {
    json_decref(box);
    snprintf(why, whylen, "Invalid params: requestState was issued to another principal: "
             "only the caller it was issued to can answer it");
    return NULL;
  }
  if ((json_int_t)time(NULL) > json_integer_value(exp)) {
    json_decref(box);
    snprintf(why, whylen, "Invalid params: requestState has expired (the run waited longer "
             "than the server's --pause-ttl and was ended): call the tool again without it");
    return NULL;
  }
  json_t *state = json_incref(st);
  json_decref(box);
  return state;
}

/* ---- what binds a durable paused run: the policy and the limits it ran with --------- */

void tp__mcp_approve_policy_hash (const char *config, size_t len, char *out) {
  static const char digits[] = "0123456789abcdef";
  json_t *cfg = config ? tp_json_parse(config, len, NULL, 0) : NULL;
  json_t *pol = json_object_get(cfg, "policy");
  size_t n;
  char *text = pol ? tp_json_text(pol, &n) : NULL;
  unsigned char h[32];
  if (text) SHA256((const unsigned char *)text, n, h);
  else SHA256((const unsigned char *)"null", 4, h);
  free(text);
  json_decref(cfg);
  for (size_t i = 0; i < sizeof h; i++) {
    out[2 * i] = digits[h[i] >> 4];
    out[2 * i + 1] = digits[h[i] & 15];
  }
  out[64] = '\0';
}

json_t *tp__mcp_approve_limits_json (const tp_limits *l) {
  json_t *j = json_object();
  for (size_t i = 0; j && i < tp_limit_count(); i++) {
    const tp_limit_info *li = tp_limit_at(i);
    if (json_object_set_new(j, li->field, json_integer((json_int_t)tp_limits_get(l, li))) != 0) {
      json_decref(j);
      return NULL;
    }
  }
  return j;
}

int tp__mcp_approve_limits_read (const json_t *j, tp_limits *l) {
  for (size_t i = 0; i < tp_limit_count(); i++) {
    const tp_limit_info *li = tp_limit_at(i);
    json_t *v = json_object_get(j, li->field);
    if (v == NULL) continue;
    if (!json_is_integer(v) || json_integer_value(v) < 0) return -1;
    char text[40];
    snprintf(text, sizeof text, "%lld%s", (long long)json_integer_value(v),
             li->unit == TP_UNIT_DURATION ? "us" : "");
    if (tp_limits_set(l, li->field, text, NULL, 0) != TP_OK) return -1;
  }
  return 0;
}
