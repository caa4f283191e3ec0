/*
** era.c: the protocol eras of `tidepool mcp` (see era.h): which era a request is
** of, server/discover, the 2026-era result fields, and subscriptions/listen.
**
** Pure functions over JSON and the library's list of versions (tp_mcp_version): no loop, no thread,
** no I/O. server.c calls them on its protocol thread; an HTTP front end may call
** tp__mcp_era_of on its own.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tidepool_server.h"
#include "era.h"

/* The one list of the protocol versions is the library's (tp_mcp_version): initialize,
** the HTTP transport's MCP-Protocol-Version check and error.data.supported read it. */

/* The flags of version v (0 when v is NULL or unknown). */
static unsigned flags_of (const char *v) {
  unsigned f;
  const char *w;
  for (size_t i = 0; v && (w = tp_mcp_version(i, &f)) != NULL; i++)
    if (strcmp(v, w) == 0) return f;
  return 0;
}

json_t *tp__mcp_era_supported (void) {
  json_t *a = json_array();
  const char *w;
  for (size_t i = 0; a && (w = tp_mcp_version(i, NULL)) != NULL; i++)
    json_array_append_new(a, json_string(w));
  return a;
}

int tp__mcp_era_known (const char *v) {
  const char *w;
  for (size_t i = 0; v && (w = tp_mcp_version(i, NULL)) != NULL; i++)
    if (strcmp(v, w) == 0) return 1;
  return 0;
}

const char *tp__mcp_era_handshake (const char *want) {
  const char *use = NULL, *w;
  unsigned f;
  for (size_t i = 0; (w = tp_mcp_version(i, &f)) != NULL; i++) {
    if (f & TP_MCP_V_MODERN) continue;
    if (use == NULL) use = w;
    if (want && strcmp(want, w) == 0) return w;
  }
  return use;
}

int tp__mcp_era_batches (const char *v) { return (flags_of(v) & TP_MCP_V_BATCHES) != 0; }

int tp__mcp_era_elicit_mode (const char *v) {
  return (flags_of(v) & TP_MCP_V_ELICIT_MODE) != 0;
}

void tp__mcp_era_list (char *buf, size_t len) {
  size_t at = 0;
  const char *w;
  buf[0] = '\0';
  for (size_t i = 0; at < len && (w = tp_mcp_version(i, NULL)) != NULL; i++) {
    int n = snprintf(buf + at, len - at, "%s%s", i ? ", " : "", w);
    if (n < 0) break;
    at += (size_t)n;
  }
}

static int is_modern (const char *v) {
  return strcmp(v, TP_MCP_MODERN_VERSION) == 0;
}

static int is_supported (const char *v) { return tp__mcp_era_known(v); }

/* The methods that exist only in the 2026 era: without a version they cannot be served. */
static int modern_only (const char *method) {
  return strcmp(method, "server/discover") == 0 || strcmp(method, "subscriptions/listen") == 0;
}

/* -32022 with the supported list; requested when the request named a version (a string). */
static json_t *version_error (const char *message, const json_t *requested) {
  json_t *data = json_pack("{s:o}", "supported", tp__mcp_era_supported());
  if (data && json_is_string(requested)) json_object_set(data, "requested", (json_t *)requested);
  return data ? json_pack("{s:i, s:s, s:o}", "code", TP_MCP_UNSUPPORTED_VERSION, "message",
                          message, "data", data) : NULL;
}

int tp__mcp_era_of (const char *method, const json_t *params, tp__mcp_era_req *r,
                    json_t **error) {
  memset(r, 0, sizeof *r);
  *error = NULL;
  const json_t *meta = json_is_object(params) ? json_object_get(params, "_meta") : NULL;
  if (!json_is_object(meta)) meta = NULL;
  const json_t *v = meta ? json_object_get(meta, TP_MCP_META_VERSION) : NULL;
  const json_t *caps = meta ? json_object_get(meta, TP_MCP_META_CAPABILITIES) : NULL;
  const json_t *info = meta ? json_object_get(meta, TP_MCP_META_CLIENT_INFO) : NULL;
  if (v == NULL) {
    if (caps == NULL && info == NULL && !modern_only(method)) return 0;  /* the handshake's era */
    char msg[400];
    snprintf(msg, sizeof msg, "Unsupported protocol version: the request names none. A "
             "%s request carries its version in params._meta[\"" TP_MCP_META_VERSION "\"] "
             "(this server speaks " TP_MCP_MODERN_VERSION "; error.data.supported lists "
             "every version), or the client opens with initialize",
             modern_only(method) ? method : TP_MCP_MODERN_VERSION);
    *error = version_error(msg, NULL);
    return -1;
  }
  const char *ver = json_string_value(v);
  if (ver && !modern_only(method) && is_supported(ver) && !is_modern(ver))
    return 0;  /* a handshake-era version named per request: served as that era */
  if (ver == NULL || !is_modern(ver)) {
    char msg[300], shown[80] = "a non-string value";
    if (ver) snprintf(shown, sizeof shown, "\"%.60s\"", ver);
    snprintf(msg, sizeof msg, "Unsupported protocol version: %s. This server speaks "
             TP_MCP_MODERN_VERSION " per request, and the versions of error.data.supported "
             "(those before 2026 open with initialize)", shown);
    *error = version_error(msg, v);
    return -1;
  }
  if (!json_is_object(caps)) {
    char msg[300];
    snprintf(msg, sizeof msg, "Invalid params: params._meta[\"" TP_MCP_META_CAPABILITIES
             "\"] %s: every " TP_MCP_MODERN_VERSION " request carries the client's "
             "capabilities (an object, {} for none)", caps ? "must be an object" : "is missing");
    *error = json_pack("{s:i, s:s}", "code", -32602, "message", msg);
    return -1;
  }
  if (info != NULL && !json_is_object(info)) {
    *error = json_pack("{s:i, s:s}", "code", -32602, "message", "Invalid params: params._meta[\""
                       TP_MCP_META_CLIENT_INFO "\"] must be an object: {\"name\": ..., "
                       "\"version\": ...}, or left out");
    return -1;
  }
  r->version = TP_MCP_MODERN_VERSION;
  r->caps = caps;
  r->client_info = info;
  r->log_level = json_string_value(json_object_get(meta, TP_MCP_META_LOG_LEVEL));
  return 1;
}

void tp__mcp_era_instructions (char *buf, size_t len, const char *tool) {
  snprintf(buf, len, "Call the %s tool with one Lua script that calls the tools it needs "
           "(tools.name{...}) and returns only the data you need; its description lists the "
           "tools.", tool);
}

json_t *tp__mcp_era_capabilities (void) {
  return json_pack("{s:{s:b}, s:{}}", "tools", "listChanged", 1, "logging");
}

json_t *tp__mcp_era_server_info (void) {
  return json_pack("{s:s, s:s, s:s}", "name", "tidepool", "title",
                   "tidepool (code mode: sandboxed Lua)", "version", tp_version());
}

json_t *tp__mcp_era_result (json_t *result, int cacheable) {
  if (result == NULL) result = json_object();
  if (!json_is_object(result)) return result;
  json_object_set_new(result, "resultType", json_string("complete"));
  if (cacheable) {
    json_object_set_new(result, "ttlMs", json_integer(0));
    json_object_set_new(result, "cacheScope", json_string("private"));
  }
  json_t *meta = json_object_get(result, "_meta");
  if (meta == NULL) {
    meta = json_object();
    json_object_set_new(result, "_meta", meta);
  }
  if (json_is_object(meta) && json_object_get(meta, TP_MCP_META_SERVER_INFO) == NULL)
    json_object_set_new(meta, TP_MCP_META_SERVER_INFO, tp__mcp_era_server_info());
  return result;
}

json_t *tp__mcp_era_discover (const char *tool) {
  char instructions[300];
  tp__mcp_era_instructions(instructions, sizeof instructions, tool);
  /* serverInfo both where the specification's DiscoverResult has it and in _meta, where
  ** the TypeScript SDK 2.x reads it (spec PR #3002's ResultMetaObject) */
  json_t *r = json_pack("{s:o, s:o, s:o, s:s}", "supportedVersions", tp__mcp_era_supported(),
                        "capabilities", tp__mcp_era_capabilities(), "serverInfo",
                        tp__mcp_era_server_info(), "instructions", instructions);
  return r ? tp__mcp_era_result(r, 1) : NULL;
}

int tp__mcp_era_stamp (char **line, size_t *len) {
  /* The workers build {"id":<id>,"jsonrpc":"2.0","result":{...}}. Inside a JSON string
  ** every '"' is escaped, so `,"jsonrpc":"2.0","result":{` cannot occur in the id: its
  ** first occurrence is the result's start. */
  static const char mark[] = ",\"jsonrpc\":\"2.0\",\"result\":{";
  static const char add[] = "\"resultType\":\"complete\",";
  char *p = *line;
  if (p == NULL || *len < sizeof mark || strncmp(p, "{\"id\":", 6) != 0) return -1;
  char *at = memmem(p, *len, mark, sizeof mark - 1);
  if (at == NULL) return -1;
  size_t off = (size_t)(at - p) + sizeof mark - 1, n = sizeof add - 1;
  if (*len - off > 13 && memcmp(p + off, "\"resultType\"", 12) == 0)
    return 0;  /* typed already (an input_required result, say): kept */
  int empty = off < *len && p[off] == '}';  /* {} gets no comma */
  size_t k = n - (size_t)empty;
  char *np = realloc(p, *len + k + 1);
  if (np == NULL) return -1;
  memmove(np + off + k, np + off, *len - off);
  memcpy(np + off, add, k);
  *len += k;
  np[*len] = '\0';
  *line = np;
  return 0;
}

/* ---- subscriptions/listen ------------------------------------------------------------ */

typedef struct tp__mcp_sub {
  struct tp__mcp_sub *next;
  json_t *id;
  int tools;                /* notifications/tools/list_changed */
} sub;

struct tp__mcp_era_listen {
  sub *subs;
  size_t n;
};

#define LISTEN_MAX 64       /* open subscriptions of one client */

tp__mcp_era_listen *tp__mcp_era_listen_new (void) { return calloc(1, sizeof(tp__mcp_era_listen)); }

void tp__mcp_era_listen_free (tp__mcp_era_listen *l) {
  if (l == NULL) return;
  for (sub *p = l->subs, *next; p; p = next) {
    next = p->next;
    json_decref(p->id);
    free(p);
  }
  free(l);
}


static json_t *error_obj (int code, const char *msg) {
  return json_pack("{s:i, s:s}", "code", code, "message", msg);
}

json_t *tp__mcp_era_listen_open (tp__mcp_era_listen *l, const json_t *id, const json_t *params,
                             json_t **error) {
  *error = NULL;
  const json_t *filter = json_is_object(params) ? json_object_get(params, "notifications") : NULL;
  if (!json_is_object(filter)) {
    *error = error_obj(-32602, "Invalid params: subscriptions/listen needs params.notifications, "
                       "an object such as {\"toolsListChanged\": true}");
    return NULL;
  }
  const char *keys[] = { "toolsListChanged", "promptsListChanged", "resourcesListChanged" };
  for (size_t i = 0; i < 3; i++) {
    const json_t *b = json_object_get(filter, keys[i]);
    if (b != NULL && !json_is_boolean(b)) {
      char msg[200];
      snprintf(msg, sizeof msg, "Invalid params: params.notifications.%s must be true or "
               "false", keys[i]);
      *error = error_obj(-32602, msg);
      return NULL;
    }
  }
  const json_t *rs = json_object_get(filter, "resourceSubscriptions");
  if (rs != NULL && !json_is_array(rs)) {
    *error = error_obj(-32602, "Invalid params: params.notifications.resourceSubscriptions "
                       "must be an array of resource URIs");
    return NULL;
  }
  for (sub *p = l->subs; p; p = p->next)
    if (json_equal(p->id, (json_t *)id)) {
      *error = error_obj(-32602, "Invalid params: a subscription with this request id is open "
                         "already: use a new id, or cancel the open one first "
                         "(notifications/cancelled)");
      return NULL;
    }
  if (l->n >= LISTEN_MAX) {
    char msg[200];
    snprintf(msg, sizeof msg, "Invalid params: %d subscriptions are open already, the most a "
             "client may have: cancel one (notifications/cancelled) first", LISTEN_MAX);
    *error = error_obj(-32602, msg);
    return NULL;
  }
  sub *s = calloc(1, sizeof *s);
  /* the server has tools only: it honors toolsListChanged, and omits the rest */
  int tools = json_is_true(json_object_get(filter, "toolsListChanged"));
  json_t *honored = json_object();
  if (honored && tools) json_object_set_new(honored, "toolsListChanged", json_true());
  json_t *ack = honored ? json_pack("{s:s, s:s, s:{s:{s:O}, s:o}}", "jsonrpc", "2.0", "method",
                                    "notifications/subscriptions/acknowledged", "params",
                                    "_meta", TP_MCP_META_SUBSCRIPTION, id, "notifications",
                                    honored) : NULL;
  if (s == NULL || ack == NULL || (s->id = json_deep_copy(id)) == NULL) {
    free(s);
    json_decref(ack);
    *error = error_obj(-32603, "out of memory: the subscription was not opened");
    return NULL;
  }
  s->tools = tools;
  s->next = l->subs;
  l->subs = s;
  l->n++;
  return ack;
}

int tp__mcp_era_listen_cancel (tp__mcp_era_listen *l, const json_t *id) {
  if (l == NULL || id == NULL) return 0;
  for (sub **pp = &l->subs; *pp; pp = &(*pp)->next)
    if (json_equal((*pp)->id, (json_t *)id)) {
      sub *s = *pp;
      *pp = s->next;
      json_decref(s->id);
      free(s);
      l->n--;
      return 1;
    }
  return 0;
}

json_t *tp__mcp_era_listen_tools_changed (tp__mcp_era_listen *l) {
  json_t *out = json_array();
  for (sub *p = l ? l->subs : NULL; out && p; p = p->next)
    if (p->tools)
      json_array_append_new(out, json_pack("{s:s, s:s, s:{s:{s:O}}}", "jsonrpc", "2.0",
                            "method", "notifications/tools/list_changed", "params", "_meta",
                            TP_MCP_META_SUBSCRIPTION, p->id));
  return out;
}
