/*
** view.c: what a model reads of a run (see view.h). Pure: functions of their arguments,
** called on the worker threads.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "tidepool.h"
#include "view.h"

/* Appends bytes to a growing buffer; -1 when out of memory. */
void tp__mcp_view_put (tp__mcp_view_buf *b, const char *s, size_t n) {
  if (b->oom) return;
  if (b->len + n + 1 > b->cap) {
    size_t ncap = (b->len + n + 1) * 2;
    char *np = realloc(b->p, ncap);
    if (np == NULL) { b->oom = 1; return; }
    b->p = np;
    b->cap = ncap;
  }
  memcpy(b->p + b->len, s, n);
  b->len += n;
  b->p[b->len] = '\0';
}
void tp__mcp_view_str (tp__mcp_view_buf *b, const char *s) { tp__mcp_view_put(b, s, strlen(s)); }
static void sb_json (tp__mcp_view_buf *b, const json_t *v) {
  size_t n;
  char *t = tp_json_text(v, &n);
  if (t == NULL) { b->oom = 1; return; }
  tp__mcp_view_put(b, t, n);
  free(t);
}
/* text as a JSON string (text is valid UTF-8: it came out of a JSON encoder) */
static void sb_quoted (tp__mcp_view_buf *b, const char *s, size_t n) {
  static const char hex[] = "0123456789abcdef";
  tp__mcp_view_put(b, "\"", 1);
  size_t run = 0;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c >= 0x20 && c != '"' && c != '\\') { run++; continue; }
    tp__mcp_view_put(b, s + i - run, run);
    run = 0;
    if (c == '"') tp__mcp_view_put(b, "\\\"", 2);
    else if (c == '\\') tp__mcp_view_put(b, "\\\\", 2);
    else if (c == '\n') tp__mcp_view_put(b, "\\n", 2);
    else {
      char u[6] = { '\\', 'u', '0', '0', hex[c >> 4], hex[c & 15] };
      tp__mcp_view_put(b, u, 6);
    }
  }
  tp__mcp_view_put(b, s + n - run, run);
  tp__mcp_view_put(b, "\"", 1);
}

/* A string holding the first `keep` bytes of text (cut at a UTF-8 boundary) and a marker. */
static json_t *cut_string (const char *text, size_t n, size_t keep, const char *what) {
  if (keep > n) keep = n;
  while (keep > 0 && ((unsigned char)text[keep] & 0xc0) == 0x80) keep--;
  char marker[200];
  snprintf(marker, sizeof marker, " ...[truncated by tidepool: %s is %zu bytes; this holds "
           "its first %zu]", what, n, keep);
  tp__mcp_view_buf b = { 0 };
  tp__mcp_view_put(&b, text, keep);
  tp__mcp_view_str(&b, marker);
  json_t *cut = b.oom ? NULL : json_stringn(b.p, b.len);
  free(b.p);
  return cut;
}

/* Cuts envelope j in place, one stage at a time (each keeps what the earlier ones cut):
** 1 cuts the result (orig_result, as JSON text) to a string of `keep` bytes and keeps the
** first logs of orig_logs within keep / 2 (stage 1 may be tried with smaller keeps); 2
** drops the result and the logs; 3 keeps the first calls and cuts the error's texts to
** what room allows, and keeps the first failed calls. ok, the error's code and the calls'
** counts by tool always stay; j.truncated
** says what went. Work: a few dumps of j, which is at most a run's envelope (itself capped
** by the run's result and output limits), on the worker thread. */
static void cut_envelope (json_t *j, int stage, size_t keep, size_t room, json_t *orig_result,
                          json_t *orig_logs) {
  json_t *note = json_object_get(j, "truncated");
  if (!json_is_object(note)) {
    note = json_object();
    json_object_set_new(j, "truncated", note);
    json_object_set_new(note, "message", json_string("The result was too large for one MCP "
      "message and was cut. Return less data: a summary, a count, or the first items."));
  }
  if (stage == 1) {
    if (orig_result != NULL) {
      size_t n;
      char *text = tp_json_text(orig_result, &n);
      if (text && n > keep) {
        json_t *cut = cut_string(text, n, keep, "the result as JSON");
        if (cut) {
          json_object_set_new(j, "result", cut);
          json_object_set_new(note, "result_bytes", json_integer((json_int_t)n));
        }
      }
      free(text);
    }
    if (json_is_array(orig_logs)) {
      size_t used = 0, i, nkeep = json_array_size(orig_logs);
      json_t *v;
      json_array_foreach(orig_logs, i, v) {
        used += json_string_length(v) * 2 + 4;
        if (used > keep / 2) { nkeep = i; break; }
      }
      size_t dropped = json_array_size(orig_logs) - nkeep;
      if (dropped > 0) {
        json_t *logs = json_array();
        for (i = 0; i < nkeep; i++) json_array_append(logs, json_array_get(orig_logs, i));
        char marker[200];
        snprintf(marker, sizeof marker, "...[truncated by tidepool: %zu more log lines left "
                 "out to fit the message size limit]", dropped);
        json_array_append_new(logs, json_string(marker));
        json_object_set_new(j, "logs", logs);
        json_object_set_new(note, "logs_dropped", json_integer((json_int_t)dropped));
      }
    }
  }
  else if (stage == 2) {
    json_t *logs = json_object_get(j, "logs");
    if (orig_result != NULL) {
      json_object_set_new(j, "result", json_null());
      json_object_set_new(note, "result_dropped", json_true());
    }
    if (json_is_array(logs) && json_array_size(orig_logs) > 0) {
      size_t n = json_array_size(orig_logs);
      json_object_set_new(note, "logs_dropped", json_integer((json_int_t)n));
      json_array_clear(logs);
      json_array_append_new(logs, json_string("...[truncated by tidepool: the logs were left "
                                              "out to fit the message size limit]"));
    }
  }
  else {
    json_t *err = json_object_get(j, "error");
    static const char *const texts[] = { "message", "source", "hint" };
    for (size_t k = 0; json_is_object(err) && k < 3; k++) {
      json_t *v = json_object_get(err, texts[k]);
      if (json_is_string(v) && json_string_length(v) > 4000) {
        json_t *cut = cut_string(json_string_value(v), json_string_length(v), 4000, texts[k]);
        if (cut) json_object_set_new(err, texts[k], cut);
      }
    }
    json_t *calls = json_object_get(j, "failed_calls");
    if (json_is_array(calls)) {
      size_t used = 0, i, nkeep = json_array_size(calls);
      json_t *v;
      json_array_foreach(calls, i, v) {
        size_t n = 1000;
        char *t = tp_json_text(v, &n);
        if (t == NULL) n = 1000;
        free(t);
        used += n * 2 + 4;
        if (used > room / 4) { nkeep = i; break; }
      }
      size_t dropped = json_array_size(calls) - nkeep;
      if (dropped > 0) {
        while (json_array_size(calls) > nkeep) json_array_remove(calls, json_array_size(calls) - 1);
        json_object_set_new(note, "failed_calls_dropped", json_integer((json_int_t)dropped));
      }
    }
  }
}

/* An envelope's text as a tree. The envelope is the engine's own output, whose size the
** run's limits bound (and may make larger than a request line may be). */
json_t *tp__mcp_view_parse (const char *env, size_t len) {
  return json_loadb(env, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
}

/* The result made for the model out of envelope env (the engine's): ok, result or error,
** logs, "calls": the number of calls by tool, and "failed_calls": each failed or refused
** call in full (tool, line, code, message; "times": n when the same failure came back n
** times, as in a loop), when any, but the one that ended the run, which is the error
** (its earlier repeats stay, "same_as_error" instead of the message) ("failed_unlisted":
** how many more failed past the envelope's listed calls). The calls record (ms, bytes, one record a
** call) and stats stay out: a model reads every byte of this, and they go to the result's
** _meta and the audit log instead. The session and truncated fields pass through. New
** reference; NULL when out of memory. */
json_t *tp__mcp_view_json (const json_t *env) {
  json_t *v = json_object(), *by = json_object(), *failed = json_array();
  if (v == NULL || by == NULL || failed == NULL) goto oom;
  static const char *const keep[] = { "ok", "result", "error", "warnings", "logs" };
  for (size_t k = 0; k < sizeof keep / sizeof keep[0]; k++) {
    json_t *x = json_object_get(env, keep[k]);
    if (x && json_object_set(v, keep[k], x) != 0) goto oom;
  }
  json_int_t unlisted = 0;
  size_t i;
  json_t *c;
  json_array_foreach(json_object_get(env, "calls"), i, c) {
    if (json_is_true(json_object_get(c, "summary"))) {  /* the calls past the listed ones */
      const char *name;
      json_t *n;
      json_object_foreach(json_object_get(c, "by_tool"), name, n) {
        json_int_t had = json_integer_value(json_object_get(by, name));
        json_object_set_new(by, name, json_integer(had + json_integer_value(n)));
      }
      json_int_t other = json_integer_value(json_object_get(c, "other"));
      if (other > 0) json_object_set_new(by, "(other tools)", json_integer(other));
      unlisted += json_integer_value(json_object_get(c, "failed"));
      continue;
    }
    const char *name = json_string_value(json_object_get(c, "tool"));
    if (name == NULL) continue;
    json_int_t had = json_integer_value(json_object_get(by, name));
    if (json_object_set_new(by, name, json_integer(had + 1)) != 0) goto oom;
    if (json_is_true(json_object_get(c, "ok"))) continue;
    json_t *f = json_pack("{s:s}", "tool", name);
    if (f == NULL) goto oom;
    json_t *line = json_object_get(c, "line"), *code = json_object_get(c, "error");
    json_t *msg = json_object_get(c, "message");
    if (line) json_object_set(f, "line", line);
    if (code) json_object_set(f, "code", code);
    if (msg) json_object_set(f, "message", msg);
    /* the same failure again (a loop): counted on its first entry, not repeated */
    size_t k;
    json_t *g, *same = NULL;
    json_array_foreach(failed, k, g) {
      static const char *const keys[] = { "tool", "line", "code", "message" };
      int eq = 1;
      for (size_t q = 0; q < 4 && eq; q++) {
        json_t *a = json_object_get(g, keys[q]), *b = json_object_get(f, keys[q]);
        eq = (a == NULL && b == NULL) || (a && b && json_equal(a, b));
      }
      if (eq) { same = g; break; }
    }
    if (same) {
      json_int_t times = json_integer_value(json_object_get(same, "times"));
      json_object_set_new(same, "times", json_integer(times ? times + 1 : 2));
      json_decref(f);
    }
    else if (json_array_append_new(failed, f) != 0) goto oom;
  }
  /* the call whose failure ended the run is the error already: listed once, there (a
  ** repeat of it, as in a loop, keeps its count here without the message again) */
  json_t *err = json_object_get(env, "error");
  if (json_is_object(err)) {
    size_t k;
    json_t *g;
    json_array_foreach(failed, k, g) {
      static const char *const keys[] = { "line", "code", "message" };
      int eq = 1;
      for (size_t q = 0; q < 3 && eq; q++) {
        json_t *a = json_object_get(g, keys[q]), *b = json_object_get(err, keys[q]);
        eq = a && b && json_equal(a, b);
      }
      json_t *etool = json_object_get(err, "tool");
      if (eq && etool && !json_equal(etool, json_object_get(g, "tool"))) eq = 0;
      if (!eq) continue;
      json_int_t times = json_integer_value(json_object_get(g, "times"));
      if (times <= 1) json_array_remove(failed, k);
      else {
        json_object_set_new(g, "times", json_integer(times - 1));
        json_object_del(g, "message");
        json_object_set_new(g, "same_as_error", json_true());
      }
      break;
    }
  }
  if (json_object_set_new(v, "calls", by) != 0) { by = NULL; goto oom; }
  by = NULL;
  if (json_array_size(failed) > 0) {
    if (json_object_set(v, "failed_calls", failed) != 0) goto oom;
  }
  json_decref(failed);
  failed = NULL;
  if (unlisted > 0) json_object_set_new(v, "failed_unlisted", json_integer(unlisted));
  static const char *const pass[] = { "session", "truncated" };
  for (size_t k = 0; k < sizeof pass / sizeof pass[0]; k++) {
    json_t *x = json_object_get(env, pass[k]);
    if (x) json_object_set(v, pass[k], x);
  }
  return v;
oom:
  json_decref(v);
  json_decref(by);
  json_decref(failed);
  return NULL;
}

char *tp__mcp_view_model (const char *env, size_t len, size_t *outlen) {
  json_t *j = json_loadb(env, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
  json_t *v = json_is_object(j) ? tp__mcp_view_json(j) : NULL;
  char *text = v ? tp_json_text(v, outlen) : NULL;
  json_decref(v);
  json_decref(j);
  return text;
}

/* The tools/call response around view text env (compact JSON) and _meta text meta (may be
** NULL). NULL when out of memory or when it would not be shorter than max. */
char *tp__mcp_view_wrap (const json_t *id, const char *env, size_t len, int ok,
                            const char *meta, size_t max, size_t *outlen) {
  tp__mcp_view_buf b = { 0 };
  tp__mcp_view_str(&b, "{\"id\":");
  sb_json(&b, id);
  tp__mcp_view_str(&b,
                   ",\"jsonrpc\":\"2.0\",\"result\":{\"content\":[{\"type\":\"text\",\"text\":");
  sb_quoted(&b, env, len);
  tp__mcp_view_str(&b, "}],\"isError\":");
  tp__mcp_view_str(&b, ok ? "false" : "true");
  tp__mcp_view_str(&b, ",\"structuredContent\":");
  tp__mcp_view_put(&b, env, len);
  if (meta) {
    tp__mcp_view_str(&b, ",\"_meta\":");
    tp__mcp_view_str(&b, meta);
  }
  tp__mcp_view_str(&b, "}}");
  if (b.oom || b.len >= max) { free(b.p); return NULL; }
  *outlen = b.len;
  return b.p;
}

/* The last resort: ok, the error code and a note (id is at most TP__MCP_VIEW_ID_MAX bytes of JSON):
** a few KiB. NULL only when even those cannot be allocated. */
char *tp__mcp_view_minimal (const json_t *id, int ok, const char *code, size_t *outlen) {
  char idtext[TP__MCP_VIEW_ID_MAX + 8], env[600], quoted[1400];
  char *t = id ? tp_json_text(id, NULL) : NULL;
  snprintf(idtext, sizeof idtext, "%s", t && strlen(t) < TP__MCP_VIEW_ID_MAX ? t : "null");
  free(t);
  int codeok = code != NULL && strlen(code) < 64 &&
               strspn(code, "abcdefghijklmnopqrstuvwxyz._") == strlen(code);
  snprintf(env, sizeof env, "{\"ok\":%s%s%s%s,\"calls\":{},\"truncated\":{\"message\":\"The "
           "result could not be sent: it was too large for one MCP message, or the server "
           "ran out of memory. The calls record was lost: check side effects before "
           "retrying. Return less data.\"}}", ok ? "true" : "false",
           ok || !codeok ? "" : ",\"error\":{\"code\":\"", ok || !codeok ? "" : code,
           ok || !codeok ? "" : "\",\"message\":\"the result was too large to send\"}");
  size_t q = 0;
  for (const char *p = env; *p && q + 3 < sizeof quoted; p++) {
    if (*p == '"' || *p == '\\') quoted[q++] = '\\';
    quoted[q++] = *p;
  }
  quoted[q] = '\0';
  size_t cap = strlen(idtext) + strlen(env) + strlen(quoted) + 200;
  char *out = malloc(cap);
  if (out == NULL) return NULL;
  int n = snprintf(out, cap, "{\"id\":%s,\"jsonrpc\":\"2.0\",\"result\":{\"content\":[{\"type\":"
                   "\"text\",\"text\":\"%s\"}],\"isError\":%s,\"structuredContent\":%s}}",
                   idtext, quoted, ok ? "false" : "true", env);
  *outlen = n > 0 && (size_t)n < cap ? (size_t)n : cap - 1;
  return out;
}

/* The tools/call response of a run_lua call out of envelope env (compact JSON): the model
** view (tp__mcp_view_json, plus the session field) as structuredContent and text, and the full
** calls record and stats in _meta ("tidepool/calls", "tidepool/stats": the client's, never
** the model's), shorter than max bytes. Past max, _meta goes first, then the view is cut
** by stages (cut_envelope); the response always says ok and the error's code. Caller
** frees; NULL only when not even the minimal response can be made. */
char *tp__mcp_view_call (const json_t *id, const char *env, size_t len, int ok,
                            const json_t *sess_info, size_t max, size_t *outlen) {
  char *out = NULL;
  json_t *j = tp__mcp_view_parse(env, len);
  json_t *view = json_is_object(j) ? tp__mcp_view_json(j) : NULL;
  const char *code = NULL;
  char codebuf[64] = "";
  if (view != NULL) {
    if (sess_info) json_object_set(view, "session", (json_t *)sess_info);
    const char *c = json_string_value(json_object_get(json_object_get(j, "error"), "code"));
    if (c) snprintf(codebuf, sizeof codebuf, "%s", c);
    json_t *meta = json_object();
    json_t *calls = json_object_get(j, "calls"), *stats = json_object_get(j, "stats");
    if (meta && calls) json_object_set(meta, "tidepool/calls", calls);
    if (meta && stats) json_object_set(meta, "tidepool/stats", stats);
    char *meta_text = meta ? tp_json_text(meta, NULL) : NULL;
    json_decref(meta);
    size_t n;
    char *text = tp_json_text(view, &n);
    if (text) {
      if (meta_text) out = tp__mcp_view_wrap(id, text, n, ok, meta_text, max, outlen);
      if (out == NULL) out = tp__mcp_view_wrap(id, text, n, ok, NULL, max, outlen);
    }
    free(text);
    free(meta_text);
    json_t *orig_result = json_incref(json_object_get(view, "result"));
    json_t *orig_logs = json_incref(json_object_get(view, "logs"));
    static const struct { int stage, div; } steps[] = { {1, 4}, {1, 16}, {1, 128}, {2, 1}, {3, 1} };
    for (size_t k = 0; k < sizeof steps / sizeof steps[0] && out == NULL; k++) {
      cut_envelope(view, steps[k].stage, max / (size_t)steps[k].div, max, orig_result, orig_logs);
      text = tp_json_text(view, &n);
      if (text) out = tp__mcp_view_wrap(id, text, n, ok, NULL, max, outlen);
      free(text);
    }
    json_decref(orig_result);
    json_decref(orig_logs);
    json_decref(view);
  }
  json_decref(j);
  if (*codebuf) code = codebuf;
  else if (!ok) code = "runtime";
  if (out == NULL) out = tp__mcp_view_minimal(id, ok, code, outlen);
  return out;
}

/* An envelope for a call refused before any script ran. */
static char *refusal_envelope (const char *code, const char *msg) {
  json_t *env = json_pack("{s:b, s:{s:s, s:s}, s:[], s:[]}", "ok", 0, "error", "code", code,
                          "message", msg, "logs", "calls");
  char *t = env ? tp_json_text(env, NULL) : NULL;
  json_decref(env);
  return t;
}

char *tp__mcp_view_refusal (const json_t *id, const char *code, const char *msg,
                               const json_t *sess_info, size_t max, size_t *outlen) {
  char *env = refusal_envelope(code, msg);
  if (env == NULL) return tp__mcp_view_minimal(id, 0, code, outlen);
  char *line = tp__mcp_view_call(id, env, strlen(env), 0, sess_info, max, outlen);
  free(env);
  return line;
}

/* s without prefix "tools.<tool>" (replaced by mcp_name) and without the suffix that points
** at tools.describe, neither of which an exposed tool's caller can use. */
static json_t *exposed_message (const char *msg, const char *tool, const char *mcp_name) {
  tp__mcp_view_buf b = { 0 };
  size_t tl = strlen(tool);
  if (strncmp(msg, "tools.", 6) == 0 && strncmp(msg + 6, tool, tl) == 0 &&
      (msg[6 + tl] == ':' || msg[6 + tl] == ' ')) {
    tp__mcp_view_str(&b, mcp_name);
    msg += 6 + tl;
  }
  char tail[300];
  snprintf(tail, sizeof tail, " (tools.describe(\"%s\") shows what it takes)", tool);
  size_t n = strlen(msg), tn = strlen(tail);
  if (n >= tn && strcmp(msg + n - tn, tail) == 0) n -= tn;
  tp__mcp_view_put(&b, msg, n);
  json_t *j = b.oom ? NULL : json_stringn(b.p, b.len);
  free(b.p);
  return j;
}

/* The failure of an exposed tool, for the model that called it: the tool's MCP name, the
** arguments it was given, and the error's code, message and hint, without the Lua that
** tidepool ran for it (its line, its source); the calls record goes to _meta. NULL when
** it cannot be made within max (the caller sends the cut model view instead). */
static char *exposed_failure (const json_t *id, const char *env, size_t len, const char *tool,
                              const char *mcp_name, json_t *args, size_t max, size_t *outlen) {
  json_t *j = tp__mcp_view_parse(env, len);
  json_t *err = json_object_get(j, "error");
  const char *code = json_string_value(json_object_get(err, "code"));
  const char *msg = json_string_value(json_object_get(err, "message"));
  if (code == NULL || msg == NULL) { json_decref(j); return NULL; }
  json_t *e = json_pack("{s:s, s:o}", "code", code, "message",
                        exposed_message(msg, tool, mcp_name));
  if (e && strcmp(code, "tool.invalid_input") == 0)
    json_object_set_new(e, "hint", json_string("Fix the arguments: the message gives the JSON "
      "path of the wrong value and what was expected; the tool's inputSchema (tools/list) "
      "shows what it takes."));
  else if (e && json_is_string(json_object_get(err, "hint")))
    json_object_set(e, "hint", json_object_get(err, "hint"));
  json_t *v = e ? json_pack("{s:b, s:s, s:O, s:o}", "ok", 0, "tool", mcp_name, "arguments",
                            args, "error", e) : NULL;
  json_t *meta = json_object();
  if (meta && json_object_get(j, "calls"))
    json_object_set(meta, "tidepool/calls", json_object_get(j, "calls"));
  if (meta && json_object_get(j, "stats"))
    json_object_set(meta, "tidepool/stats", json_object_get(j, "stats"));
  size_t n = 0;
  char *text = v ? tp_json_text(v, &n) : NULL;
  char *meta_text = meta ? tp_json_text(meta, NULL) : NULL;
  char *out = NULL;
  if (text && meta_text) out = tp__mcp_view_wrap(id, text, n, 0, meta_text, max, outlen);
  if (text && out == NULL) out = tp__mcp_view_wrap(id, text, n, 0, NULL, max, outlen);
  free(text);
  free(meta_text);
  json_decref(meta);
  json_decref(v);
  json_decref(j);
  return out;
}

/* The response of an exposed tool: the tool's result itself, or its failure
** (exposed_failure; the model view of the run when that cannot be made). */
char *tp__mcp_view_exposed (const json_t *id, const char *env, size_t len, int ok,
                            const char *tool, const char *mcp_name, json_t *args,
                            size_t max, size_t *outlen) {
  if (!ok) {
    char *out = exposed_failure(id, env, len, tool, mcp_name, args, max, outlen);
    return out ? out : tp__mcp_view_call(id, env, len, 0, NULL, max, outlen);
  }
  json_t *j = tp__mcp_view_parse(env, len);
  json_t *result = j ? json_object_get(j, "result") : NULL;
  if (result == NULL) { json_decref(j); return tp__mcp_view_call(id, env, len, 1, NULL, max,
                                                                 outlen); }
  size_t n;
  char *text = tp_json_text(result, &n);
  tp__mcp_view_buf b = { 0 };
  tp__mcp_view_str(&b, "{\"id\":");
  sb_json(&b, id);
  tp__mcp_view_str(&b,
                   ",\"jsonrpc\":\"2.0\",\"result\":{\"content\":[{\"type\":\"text\",\"text\":");
  if (text) sb_quoted(&b, text, n);
  else tp__mcp_view_str(&b, "\"\"");
  tp__mcp_view_str(&b, "}],\"isError\":false");
  if (json_is_object(result) && text) {
    tp__mcp_view_str(&b, ",\"structuredContent\":");
    tp__mcp_view_put(&b, text, n);
  }
  tp__mcp_view_str(&b, "}}");
  free(text);
  json_decref(j);
  if (b.oom || b.len >= max) {  /* the envelope, cut: an error (isError), since a cut
                                ** result cannot match the tool's outputSchema */
    free(b.p);
    return tp__mcp_view_call(id, env, len, 0, NULL, max, outlen);
  }
  *outlen = b.len;
  return b.p;
}

/* An exposed tool's error result (isError) carries no structuredContent: that would have
** to match the tool's outputSchema, which a failure does not, and MCP clients check it
** (the TypeScript SDK's callTool throws -32602 and the error never arrives). Its text
** block holds the same JSON. */
void tp__mcp_view_drop_structured (char **line, size_t *len) {
  json_t *j = tp_json_parse(*line, *len, NULL, 0);
  json_t *res = json_object_get(j, "result");
  if (json_is_true(json_object_get(res, "isError")) &&
      json_object_get(res, "structuredContent") != NULL) {
    json_object_del(res, "structuredContent");
    size_t n;
    char *t = tp_json_text(j, &n);
    if (t) {
      free(*line);
      *line = t;
      *len = n;
    }
  }
  json_decref(j);
}

const char *tp__mcp_view_bad_session_id (const json_t *sid, size_t max, char *buf,
                                         size_t len) {
  if (!json_is_string(sid))
    return "arguments.session must be a string (1 to 128 bytes), or left out";
  const unsigned char *p = (const unsigned char *)json_string_value(sid);
  size_t n = json_string_length(sid);
  if (n == 0) return "arguments.session must not be empty: pass a name such as \"main\", "
                     "or leave it out";
  if (n > max) {
    snprintf(buf, len, "arguments.session is %zu bytes long; a session id has at most %zu "
             "bytes: use a short name such as \"main\"", n, max);
    return buf;
  }
  for (size_t i = 0; i < n; i++)
    if (p[i] < 0x20 || p[i] == 0x7f) {
      snprintf(buf, len, "arguments.session holds a control character (byte 0x%02x at "
               "offset %zu); a session id may not contain NUL or control characters: use "
               "letters, digits and punctuation", p[i], i);
      return buf;
    }
  return NULL;
}
