/*
** mcp_durable.c: see mcp_durable.h.
*/
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/sha.h>

#include "mcp_durable.h"

void tp__dur_policy_hash (const char *config, size_t len, char *out) {
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

json_t *tp__dur_limits_json (const tp_limits *l) {
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

int tp__dur_limits_read (const json_t *j, tp_limits *l) {
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
