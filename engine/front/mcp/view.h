/*
** view.h: what a model reads of a run: the envelope made into a model view (ok, result or
** error, logs, calls counted by tool, failed calls), and the tools/call response lines
** around it, cut to a size. Pure functions of their arguments (view.c). Not installed,
** not API.
*/
#ifndef tidepool_mcp_view_h
#define tidepool_mcp_view_h

#include <stddef.h>

#include <jansson.h>

/* A request id, as JSON text, is at most this long: it is echoed back. */
#define TP__MCP_VIEW_ID_MAX 1024

/* A growing text buffer; oom is set (and nothing more appended) when out of memory. */
typedef struct tp__mcp_view_buf { char *p; size_t len, cap; int oom; } tp__mcp_view_buf;
void tp__mcp_view_put(tp__mcp_view_buf *b, const char *s, size_t n);
void tp__mcp_view_str(tp__mcp_view_buf *b, const char *s);

/* An envelope's text as a tree, or NULL. */
json_t *tp__mcp_view_parse(const char *env, size_t len);
/* The model view of envelope env (a tree): ok, result or error, logs, "calls" (how many
** calls of each tool), "failed_calls" when any; no call records or stats. New reference;
** NULL when out of memory. */
json_t *tp__mcp_view_json(const json_t *env);
/* The same out of an envelope's text, as compact JSON text (the caller's to free); NULL
** when env is not an envelope or out of memory. */
char *tp__mcp_view_model(const char *env, size_t len, size_t *outlen);

/* The tools/call response around view text env and _meta text meta (may be NULL); NULL
** when out of memory or when it would not be shorter than max. */
char *tp__mcp_view_wrap(const json_t *id, const char *env, size_t len, int ok,
                        const char *meta, size_t max, size_t *outlen);
/* The last resort: ok, the error code and a note; a few KiB. */
char *tp__mcp_view_minimal(const json_t *id, int ok, const char *code, size_t *outlen);
/* The tools/call response of a run_lua call out of envelope env: the model view (with
** sess_info as its "session" field) as structuredContent and text, the calls record and
** stats in _meta, shorter than max bytes (cut by stages past it). Caller frees. */
char *tp__mcp_view_call(const json_t *id, const char *env, size_t len, int ok,
                        const json_t *sess_info, size_t max, size_t *outlen);
/* The response of a call refused before any script ran, with error code and msg. */
char *tp__mcp_view_refusal(const json_t *id, const char *code, const char *msg,
                           const json_t *sess_info, size_t max, size_t *outlen);
/* The response of exposed tool tool (MCP name mcp_name, called with args): its result
** itself, or its failure for the model that called it. */
char *tp__mcp_view_exposed(const json_t *id, const char *env, size_t len, int ok,
                           const char *tool, const char *mcp_name, json_t *args,
                           size_t max, size_t *outlen);

#endif
