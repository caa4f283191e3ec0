/*
** reply.h: the protocol thread's writing (reply.c): responses, errors, notifications and
** logs, to the transport; a batch's responses, gathered. Not installed, not API.
*/
#ifndef tidepool_mcp_reply_h
#define tidepool_mcp_reply_h

#include "state.h"

void tp__mcp_reply_write(server *s, const char *text, size_t len);
json_t *tp__mcp_reply_error_msg(json_t *id, int code, const char *text);
void tp__mcp_reply_batch_add(batch *b, json_t *msg);
void tp__mcp_reply_msg(server *s, batch *b, json_t *msg);
json_t *tp__mcp_reply_id(json_t *id);
void tp__mcp_reply_result(server *s, batch *b, json_t *id, json_t *result);
void tp__mcp_reply_error(server *s, batch *b, json_t *id, int code, const char *fmt, ...)
  __attribute__((format(printf, 5, 6)));
void tp__mcp_reply_notify(server *s, const char *method, json_t *params);
void tp__mcp_reply_log_text(server *s, int level, const char *text);
void tp__mcp_reply_log_from(server *s, int level, const char *logger, const char *text);
void tp__mcp_reply_log(server *s, int level, const char *fmt, ...)
  __attribute__((format(printf, 3, 4)));

#endif
