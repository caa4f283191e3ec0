/*
** mail.h: the only channel between the protocol thread and the workers (mail.c): a
** mailbox is a mutex-guarded list of messages and an eventfd that wakes the receiving
** loop. Not installed, not API.
*/
#ifndef tidepool_mcp_mail_h
#define tidepool_mcp_mail_h

#include "state.h"

int tp__mcp_mail_box_init(mailbox *mb, uv_loop_t *loop, void (*cb)(void *data), void *data);
void tp__mcp_mail_box_close(mailbox *mb);
void tp__mcp_mail_box_destroy(mailbox *mb);
void tp__mcp_mail_post(mailbox *mb, mail *m);
mail *tp__mcp_mail_take_all(mailbox *mb);
int tp__mcp_mail_box_empty(mailbox *mb);
mail *tp__mcp_mail_new(int kind);
void tp__mcp_mail_free(mail *m);
json_t *tp__mcp_mail_notification(const char *method, json_t *params);
void tp__mcp_mail_line(job *q, json_t *j);
void tp__mcp_mail_line_now(job *q, json_t *j);
void tp__mcp_mail_text_now(job *q, char *text, size_t len);
void tp__mcp_mail_log(worker *w, int level, const char *fmt, ...)
  __attribute__((format(printf, 3, 4)));

#endif
