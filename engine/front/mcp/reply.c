/*
** reply.c: what the protocol thread writes (see reply.h): every line goes out through the
** transport's emit, a batch's responses are gathered, logs go to standard error and, at
** the client's level, as notifications/message.
*/
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "tidepool.h"
#include "state.h"
#include "mail.h"
#include "reply.h"

/* Every line the server writes goes through here. Lines are built under LINE_OUT_MAX
** upstream; one that is not is a bug, never sent (the client would drop the stream). */
void tp__mcp_reply_write (server *s, const char *text, size_t len) {
  if (len >= LINE_OUT_MAX) {
    fprintf(stderr, "tidepool mcp: internal error: a %zu-byte message was not sent (over "
            "the %u MiB line limit)\n", len, LINE_OUT_MAX >> 20);
    return;
  }
  /* over HTTP, to the request a message belongs to (none: dropped) */
  s->t.emit(s->t.ud, s->origin, text, len, !s->noting);
}

json_t *tp__mcp_reply_error_msg (json_t *id, int code, const char *text) {
  json_t *m = json_string(text);
  if (m == NULL) m = json_string("error (message not valid UTF-8)");
  return json_pack("{s:s, s:o, s:{s:i, s:o}}", "jsonrpc", "2.0",
                   "id", id ? json_deep_copy(id) : json_null(), "error", "code", code,
                   "message", m);
}

/* Adds a response to batch b (stolen), within the batch's share of the line. */
void tp__mcp_reply_batch_add (batch *b, json_t *msg) {
  size_t n;
  char *text = tp_json_text(msg, &n);
  free(text);
  if (text != NULL && b->bytes + n + 1 < LINE_OUT_MAX - 4096) {
    b->bytes += n + 1;
    json_array_append_new(b->responses, msg);
    return;
  }
  json_t *id = json_object_get(msg, "id");
  json_t *err = tp__mcp_reply_error_msg(id, -32603,
                                        "the responses of this batch would pass the 10 MiB a "
                          "message may have: send this request on its own line");
  json_decref(msg);
  char *t = tp_json_text(err, &n);
  free(t);
  b->bytes += n + 1;
  json_array_append_new(b->responses, err);
}

/* Sends msg (stolen): into the batch b, or as a line of its own. */
void tp__mcp_reply_msg (server *s, batch *b, json_t *msg) {
  if (msg == NULL) return;
  if (b != NULL) { tp__mcp_reply_batch_add(b, msg); return; }
  size_t len;
  char *text = tp_json_text(msg, &len);
  if (text != NULL && len >= LINE_OUT_MAX) {  /* a tools/list of huge exposed schemas */
    free(text);
    char why[200];
    snprintf(why, sizeof why, "the response would be %zu bytes, over the %u MiB a message "
             "may have", len, LINE_OUT_MAX >> 20);
    json_t *id = json_object_get(msg, "id");
    json_t *err = tp__mcp_reply_error_msg(json_is_null(id) ? NULL : id, -32603, why);
    json_decref(msg);
    msg = err;
    text = tp_json_text(msg, &len);
  }
  json_decref(msg);
  if (text == NULL) {
    fprintf(stderr, "tidepool mcp: out of memory writing a message\n");
    return;
  }
  tp__mcp_reply_write(s, text, len);
  free(text);
}

json_t *tp__mcp_reply_id (json_t *id) { return id ? json_deep_copy(id) : json_null(); }

void tp__mcp_reply_result (server *s, batch *b, json_t *id, json_t *result) {
  tp__mcp_reply_msg(s, b, json_pack("{s:s, s:o, s:o}", "jsonrpc", "2.0", "id", tp__mcp_reply_id(id),
                           "result", result ? result : json_object()));
}

void tp__mcp_reply_error (server *s, batch *b, json_t *id, int code, const char *fmt, ...) {
  char text[600];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  tp__mcp_reply_msg(s, b, tp__mcp_reply_error_msg(id, code, text));
}


void tp__mcp_reply_notify (server *s, const char *method, json_t *params) {
  s->noting++;
  tp__mcp_reply_msg(s, NULL, tp__mcp_mail_notification(method, params));
  s->noting--;
}

/* Warnings logged before the client initialized (the plugins refused at startup) are kept,
** up to EARLY_MAX, and sent once it has: a client learns of every refused plugin. */
#define EARLY_MAX 100
void tp__mcp_reply_log_text (server *s, int level, const char *text) {
  tp__mcp_reply_log_from(s, level, NULL, text);
}

/* A message of logger (NULL: "tidepool", the server itself; else a worker engine's source:
** "plugin", "host", "http", "upstream"), to standard error and to the client. */
void tp__mcp_reply_log_from (server *s, int level, const char *logger, const char *text) {
  if (logger == NULL) logger = "tidepool";
  if (!s->quiet && (level >= L_INFO || level >= s->level))
    fprintf(stderr, "tidepool mcp: %s: %s%s%s\n", levels[level],
            strcmp(logger, "tidepool") ? logger : "",
            strcmp(logger, "tidepool") ? ": " : "", text);
  if (!s->initialized && level >= L_WARNING) {
    if (s->early == NULL) s->early = json_array();
    if (json_array_size(s->early) < EARLY_MAX)
      json_array_append_new(s->early, json_pack("{s:i, s:s, s:s}", "level", level, "text", text,
                                                "logger", logger));
  }
  if (!s->initialized || level < s->level) return;
  json_t *data = json_string(text);
  if (data == NULL) return;
  tp__mcp_reply_notify(s, "notifications/message",
         json_pack("{s:s, s:s, s:o}", "level", levels[level], "logger", logger, "data", data));
}

void tp__mcp_reply_log (server *s, int level, const char *fmt, ...) {
  char text[1000];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  tp__mcp_reply_log_text(s, level, text);
}
