/*
** http.c: `tidepool mcp --http ADDR:PORT`, MCP's Streamable HTTP transport (how it
** works: http.h).
*/
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <microhttpd.h>

#include "clock.h"
#include "tidepool.h"
#include "auth.h"
#include "http.h"
#include "era.h"
#include "ui_http.h"

#define ENDPOINT "/mcp"
#define SESSIONS_MAX 4096
#define SSE_PENDING_MAX (4u << 20)  /* unsent SSE bytes past which notifications are dropped */
#define SESSION_IDLE_NS (3600ull * 1000000000ull)  /* an HTTP session unused for an hour */
#define OVERFLOW_CONNS 64           /* connections past the limit, accepted to be refused */
#define OVERFLOW_IDLE_NS 1000000000ull  /* ... and shut down after this without a request */

/* the limits, in tp__mcp_http_opts' order (bit k of given) */
enum { O_BODY, O_HEADER, O_STREAMS, O_CONNS, O_IDLE, O_REQUEST, O_KEEPALIVE, O_GRACE, O_N };
static const struct {
  const char *flag, *key;  /* --http-... option, and the config's key */
  tp_unit unit;
  uint64_t def, max;
  const char *help;
} limits[O_N] = {
  { "--http-max-body", "max_body", TP_UNIT_BYTES, 4u << 20, 1u << 30,
    "a request body's size (413 past it)" },
  { "--http-max-header", "max_header", TP_UNIT_BYTES, 16u << 10, 1u << 20,
    "the request line and headers (431 past it)" },
  { "--http-max-streams", "max_streams_per_client", TP_UNIT_COUNT, 32, 100000,
    "tools/call requests of one client (a principal with auth, else an address) waiting "
    "for their response (429 past it)" },
  { "--http-max-connections", "max_connections", TP_UNIT_COUNT, 1000, 100000,
    "open connections, all clients together (503 past it)" },
  { "--http-idle-timeout", "idle_timeout", TP_UNIT_DURATION, 60000000u, 86400000000u,
    "close a connection silent this long" },
  { "--http-request-timeout", "request_timeout", TP_UNIT_DURATION, 10000000u, 3600000000u,
    "a connection must send a whole request within this time of opening or of its "
    "previous response (slow clients)" },
  { "--http-keepalive", "keepalive", TP_UNIT_DURATION, 15000000u, 3600000000u,
    "an SSE stream gets a comment line this often" },
  { "--http-shutdown-grace", "shutdown_grace", TP_UNIT_DURATION, 10000000u, 3600000000u,
    "on SIGTERM, how long requests in flight may finish before they are cancelled" },
};

/* ---- options --------------------------------------------------------------------- */

int tp__mcp_http_is_option (const char *name) {
  if (strcmp(name, "--http") == 0) return 1;
  for (int k = 0; k < O_N; k++)
    if (strcmp(name, limits[k].flag) == 0) return 1;
  return 0;
}

static uint64_t *opt_field (tp__mcp_http_opts *o, int k) {
  uint64_t *f[O_N] = { &o->max_body, &o->max_header, &o->max_streams, &o->max_connections,
                       &o->idle_us, &o->request_us, &o->keepalive_us, &o->grace_us };
  return f[k];
}

int tp__mcp_http_option (tp__mcp_http_opts *o, const char *name, const char *val, char *why,
                         size_t whylen) {
  if (strcmp(name, "--http") == 0) {
    if (*val == '\0') {
      snprintf(why, whylen, "--http needs an address: PORT or ADDR:PORT (127.0.0.1:8080)");
      return -1;
    }
    o->listen = val;
    return 0;
  }
  for (int k = 0; k < O_N; k++) {
    if (strcmp(name, limits[k].flag) != 0) continue;
    char err[200];
    if (tp_parse_value(limits[k].unit, val, limits[k].max, opt_field(o, k), NULL, err,
                       sizeof err) != TP_OK) {
      snprintf(why, whylen, "%s: %s", name, err);
      return -1;
    }
    o->given |= 1u << k;
    return 0;
  }
  snprintf(why, whylen, "unknown option '%s'", name);
  return -1;
}

void tp__mcp_http_help (FILE *f) {
  fputs("\nStreamable HTTP (instead of standard input and output):\n"
        "  --http ADDR:PORT     serve MCP at http://ADDR:PORT/mcp (PORT alone: 127.0.0.1;\n"
        "                       port 0 picks a free one, printed on standard error); the\n"
        "                       config's \"server\" section sets the same and the allowed\n"
        "                       hosts and origins\n"
        "  --ui                 serve the operator page at /ui: recent runs, their calls as a\n"
        "                       waterfall, paused runs with Approve and Deny, upstream servers,\n"
        "                       key metrics; with auth a token with the \"operator\" scope,\n"
        "                       without auth loopback clients only (off by default)\n", f);
  for (int k = 0; k < O_N; k++) {
    char def[32], left[64];
    tp_format_value(limits[k].unit, limits[k].def, def, sizeof def);
    snprintf(left, sizeof left, "  %s %s", limits[k].flag,
             limits[k].unit == TP_UNIT_BYTES ? "SIZE" : limits[k].unit == TP_UNIT_COUNT
             ? "N" : "DURATION");
    char text[400];
    snprintf(text, sizeof text, "%s (default %s)", limits[k].help, def);
    /* the option, then its text wrapped at 86 columns from column 23 */
    int col = fprintf(f, "%s", left);
    if (col > 22) { fputc('\n', f); col = 0; }
    const char *w = text;
    while (*w) {
      fprintf(f, "%*s", 23 - col, "");
      size_t room = 63, n = strlen(w);
      if (n > room) {
        n = room;
        while (n > 0 && w[n] != ' ') n--;
        if (n == 0) n = room;
      }
      fprintf(f, "%.*s\n", (int)n, w);
      w += n;
      while (*w == ' ') w++;
      col = 0;
    }
  }
}

static json_t *server_section (const char *config, size_t len) {
  if (config == NULL) return NULL;
  json_t *cfg = tp_json_parse(config, len, NULL, 0);
  json_t *sec = json_incref(json_object_get(cfg, "server"));
  json_decref(cfg);
  return sec;
}

int tp__mcp_http_wanted (const tp__mcp_http_opts *o, const char *config, size_t len) {
  if (o->listen) return 1;
  json_t *sec = server_section(config, len);
  int yes = json_is_string(json_object_get(sec, "http"));
  json_decref(sec);
  return yes;
}

static int parse_listen(const char *v, struct sockaddr_storage *sa, char *addr, size_t alen,
                        int *port, int *v6);

int tp__mcp_http_check (const tp__mcp_http_opts *o, const char *config, size_t len, char *why,
                        size_t whylen) {
  json_t *sec = o->listen ? NULL : server_section(config, len);
  const char *listen = o->listen ? o->listen : json_string_value(json_object_get(sec, "http"));
  struct sockaddr_storage sa;
  char addr[64];
  int port, v6, rc = 0;
  if (listen && parse_listen(listen, &sa, addr, sizeof addr, &port, &v6) != 0) {
    snprintf(why, whylen, "%s '%s': expected PORT (0 to 65535), ADDR:PORT or [ADDR6]:PORT "
             "with ADDR an IP address (127.0.0.1:8080)", o->listen ? "--http:" :
             "config: /server/http:", listen);
    rc = -1;
  }
  json_decref(sec);
  return rc;
}

/* ---- state ------------------------------------------------------------------------ */

typedef struct tp__mcp_hreq hreq;
typedef struct tp__mcp_conn conn;

typedef struct tp__mcp_hsess {
  struct tp__mcp_hsess *next;
  char id[33];
  char principal[256];        /* who made it: only they may use it */
  uint64_t used_ns;
} hsess;

struct tp__mcp_conn {                 /* one TCP connection (MHD's socket context) */
  conn *prev, *next;
  int fd;
  uint64_t since_ns;          /* opened, or its last response finished */
  int busy;                   /* a whole request came; its answer is under way */
  int over;                   /* opened past max_connections: its request gets 503 */
};

struct tp__mcp_http {
  tp__mcp_entries ent;      /* the server's entries */
  uv_loop_t *loop;
  struct MHD_Daemon *d;
  uv_poll_t poll;
  uv_timer_t timer, sweep, keepalive, grace;
  uv_signal_t sigint, sigterm;
  int handles;                /* uv handles still open (freed when 0 after close) */
  int serving, stopping, stopped, free_pending;
  int in_run;                 /* inside MHD_run: its callbacks must not run it again */
  uint64_t lim[O_N];
  char addr[64];              /* bound address, as text (no brackets) */
  int port, v6;
  char **hosts, **origins;    /* allowed; "*" in either allows all */
  size_t nhosts, norigins;
  char **proxies;             /* server.trusted_proxies: their X-Forwarded-For is believed */
  size_t nproxies;
  size_t nconns;
  tp__mcp_auth *auth;               /* the config's "auth" section, or NULL: no one checked */
  hsess *sessions;
  size_t nsessions;
  conn *conns;
  hreq *open;                 /* requests MHD has not completed */
  tp__mcp_ui_http *ui;         /* --ui: the operator page (ui_http.c), or NULL */
};

enum { R_RECEIVING, R_WAITING, R_ANSWERED };

struct tp__mcp_hreq {
  hreq *prev, *next;          /* h->open */
  tp__mcp_http *h;
  struct MHD_Connection *c;
  conn *cn;
  int refs;                   /* MHD's (until completed) and mcp.c's (hold .. release) */
  int held, mhd_done, suspended, gone;
  int state;
  int sse, era2026, counted, initialize, failed;
  char client[INET6_ADDRSTRLEN];   /* the peer's address, or the one a trusted proxy named */
  char rate_key[300];         /* whose max_streams this request counts against */
  json_t *id;                 /* the JSON-RPC request's id, or NULL */
  char principal[256];        /* who called, with auth; "" without */
  char scopes[1024];
  char sid[33];               /* its Mcp-Session-Id (2025 era), or "" */
  char traceparent[64];       /* its traceparent header (W3C trace context), or "" */
  char *body;
  size_t len, cap;
  int too_big;
  char *resp;                 /* the final response (JSON mode) */
  size_t resp_len;
  char *out;                  /* SSE bytes not yet sent */
  size_t out_len, out_off, out_cap;
  int ended;                  /* SSE: the response was queued: end after out */
  uv_poll_t *watch;           /* the socket, watched for a hang-up while suspended */
  int route;                  /* routes[route - 1] answers it once its body is in */
  char url[64];               /* its URL then (a longer one: "/?") */
  char method[16];            /* and its method (a longer one: "?") */
};

static void update_timer(tp__mcp_http *h);
static void timer_cb(uv_timer_t *t);

/* ---- responses --------------------------------------------------------------------- */

/* Responses by class (1xx..5xx) for /metrics; the protocol thread's only (MHD_run on its
** loop). A process serves one --http. */
static uint64_t status_classes[6];

static enum MHD_Result queue_text (struct MHD_Connection *c, unsigned status, const char *type,
                                   const char *text, size_t len, const char *hname,
                                   const char *hval) {
  if (status / 100 < 6) status_classes[status / 100]++;
  struct MHD_Response *r = MHD_create_response_from_buffer(len, (void *)text,
                                                           MHD_RESPMEM_MUST_COPY);
  if (r == NULL) return MHD_NO;
  if (type) MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
  if (hname) MHD_add_response_header(r, hname, hval);
  if (status == MHD_HTTP_METHOD_NOT_ALLOWED)
    MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "POST, DELETE");
  if (status == MHD_HTTP_SERVICE_UNAVAILABLE)  /* the slot goes to someone else */
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
  enum MHD_Result rc = MHD_queue_response(c, status, r);
  MHD_destroy_response(r);
  return rc;
}

/* A JSON-RPC error's text (free with tp_free; NULL when out of memory). */
static char *error_text (const json_t *id, int code, const char *msg, size_t *n) {
  json_t *m = json_string(msg);
  json_t *j = json_pack("{s:s, s:O, s:{s:i, s:o}}", "jsonrpc", "2.0", "id",
                        id ? id : json_null(), "error", "code", code, "message",
                        m ? m : json_string("error"));
  char *text = j ? tp_json_text(j, n) : NULL;
  json_decref(j);
  return text;
}

/* An HTTP error with a JSON-RPC error body (id: the request's, or null). */
static enum MHD_Result queue_error (struct MHD_Connection *c, unsigned status, const json_t *id,
                                    int code, const char *msg, const char *hname,
                                    const char *hval) {
  size_t n = 0;
  char *text = error_text(id, code, msg, &n);
  enum MHD_Result rc = queue_text(c, status, "application/json", text ? text : "", n, hname, hval);
  tp_free(text);
  return rc;
}

/* ---- requests' lives --------------------------------------------------------------- */

static void watch_closed (uv_handle_t *hd) { free(hd); }

static void unwatch (hreq *r) {
  if (r->watch == NULL) return;
  uv_poll_stop(r->watch);
  uv_close((uv_handle_t *)r->watch, watch_closed);
  r->watch = NULL;
}

static void hreq_unref (hreq *r) {
  if (--r->refs > 0) return;
  unwatch(r);
  json_decref(r->id);
  free(r->body);
  free(r->resp);
  free(r->out);
  free(r);
}

/* Lets MHD go on with a suspended connection: the response or more of the stream is
** there, or the client is gone. */
static void wake (hreq *r) {
  if (!r->suspended || r->mhd_done) return;
  unwatch(r);
  r->suspended = 0;
  MHD_resume_connection(r->c);
  /* in external polling MHD learns of it in its next MHD_run: at once (from the loop
  ** when we are inside one) */
  if (r->h->free_pending) return;
  if (r->h->in_run) uv_timer_start(&r->h->timer, timer_cb, 0, 0);
  else timer_cb(&r->h->timer);
}

static void stopped_check(tp__mcp_http *h);

/* The socket of a suspended connection hung up (MHD does not watch it then). In the
** 2026-07-28 era that cancels the run; in earlier ones the run goes on (a closed
** connection is not a cancellation there) and its response is dropped. */
static void hangup_cb (uv_poll_t *p, int status, int events) {
  (void)status; (void)events;
  hreq *r = p->data;
  r->gone = 1;
  if (r->era2026 && r->held) r->h->ent.cancel(r->h->ent.s, r);
  wake(r);
}

static void suspend (hreq *r) {
  if (r->suspended) return;
  MHD_suspend_connection(r->c);
  r->suspended = 1;
  if (r->cn == NULL || r->watch != NULL) return;
  r->watch = malloc(sizeof *r->watch);
  if (r->watch == NULL) return;
  if (uv_poll_init(r->h->loop, r->watch, r->cn->fd) != 0) {
    free(r->watch);
    r->watch = NULL;
    return;
  }
  r->watch->data = r;
  uv_poll_start(r->watch, UV_DISCONNECT, hangup_cb);
}

static void sse_put (hreq *r, const char *p, size_t n) {
  if (r->out_off > 0 && r->out_off == r->out_len) r->out_off = r->out_len = 0;
  if (r->out_len + n > r->out_cap) {
    size_t cap = (r->out_len + n) * 2;
    char *nb = realloc(r->out, cap);
    if (nb == NULL) { r->failed = 1; return; }
    r->out = nb;
    r->out_cap = cap;
  }
  memcpy(r->out + r->out_len, p, n);
  r->out_len += n;
}

static void http_emit (void *ud, void *origin, const char *text, size_t len, int final) {
  (void)ud;
  if (origin == NULL) return;  /* a line of no request (a log line): the operator's only */
  hreq *r = origin;
  if (r->mhd_done || r->gone || r->state == R_ANSWERED) return;
  if (r->sse && r->state == R_WAITING) {
    if (!final && r->out_len - r->out_off > SSE_PENDING_MAX) return;  /* a client not reading */
    sse_put(r, "event: message\ndata: ", 21);
    sse_put(r, text, len);
    sse_put(r, "\n\n", 2);
    if (final) { r->ended = 1; r->state = R_ANSWERED; }
    wake(r);
    return;
  }
  if (!final) return;  /* a JSON answer has no room for notifications */
  free(r->resp);
  r->resp = malloc(len + 1);
  if (r->resp) { memcpy(r->resp, text, len); r->resp[len] = '\0'; r->resp_len = len; }
  else r->failed = 1;
  r->state = R_ANSWERED;
  wake(r);
}

static int http_streams (void *origin) { return ((hreq *)origin)->sse; }

static const char *http_traceparent (void *origin) {
  hreq *r = origin;
  return r->traceparent[0] ? r->traceparent : NULL;
}

static int http_principal (void *origin, const char **principal, const char **scopes) {
  hreq *r = origin;
  if (r->principal[0] == '\0') return 0;
  *principal = r->principal;
  *scopes = r->scopes;
  return 1;
}

static void http_hold (void *origin) {
  hreq *r = origin;
  r->held = 1;
  r->refs++;
}

/* mcp.c is done with the request: answered, or cancelled without an answer (then a JSON
** request gets 503 and a stream ends). */
static void http_release (void *origin) {
  hreq *r = origin;
  r->held = 0;
  if (r->state != R_ANSWERED) {
    size_t n = 0;
    char *text = r->sse && !r->gone && !r->mhd_done
                 ? error_text(r->id, -32603, r->h->stopping ? "the server is stopping: the "
                              "request was cancelled" : "the request was cancelled", &n)
                 : NULL;
    if (text) {  /* the stream's last event */
      sse_put(r, "event: message\ndata: ", 21);
      sse_put(r, text, n);
      sse_put(r, "\n\n", 2);
    }
    tp_free(text);
    r->failed = 1;
    r->ended = 1;
    r->state = R_ANSWERED;
  }
  wake(r);
  tp__mcp_http *h = r->h;
  hreq_unref(r);
  stopped_check(h);
}

/* ---- sessions (2025-era clients) ------------------------------------------------------ */

static hsess *sess_find (tp__mcp_http *h, const char *id) {
  for (hsess *p = h->sessions; p; p = p->next)
    if (strcmp(p->id, id) == 0) return p;
  return NULL;
}

static void sess_drop (tp__mcp_http *h, hsess *hs) {
  for (hsess **p = &h->sessions; *p; p = &(*p)->next)
    if (*p == hs) { *p = hs->next; break; }
  h->nsessions--;
  free(hs);
}

/* A new session with an unguessable id (128 random bits), or NULL. The least recently
** used one goes when SESSIONS_MAX are open. */
static hsess *sess_new (tp__mcp_http *h) {
  unsigned char rnd[16];
  if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) return NULL;
  if (h->nsessions >= SESSIONS_MAX) {
    hsess *lru = h->sessions;
    for (hsess *p = h->sessions; p; p = p->next)
      if (p->used_ns < lru->used_ns) lru = p;
    sess_drop(h, lru);
  }
  hsess *hs = calloc(1, sizeof *hs);
  if (hs == NULL) return NULL;
  for (size_t i = 0; i < sizeof rnd; i++) snprintf(hs->id + 2 * i, 3, "%02x", rnd[i]);
  hs->used_ns = tp__mcp_mono_ns();
  hs->next = h->sessions;
  h->sessions = hs;
  h->nsessions++;
  return hs;
}

/* ---- guards -------------------------------------------------------------------------- */

static int listed (char **list, size_t n, const char *v, int host) {
  for (size_t i = 0; i < n; i++) {
    const char *e = list[i];
    if (strcmp(e, "*") == 0 || strcasecmp(e, v) == 0) return 1;
    if (!host) continue;
    /* a host entry without a port matches the host at any port */
    const char *close = e[0] == '[' ? strchr(e, ']') : NULL;
    int has_port = close ? close[1] == ':' : strchr(e, ':') != NULL;
    size_t el = strlen(e);
    if (!has_port && strncasecmp(e, v, el) == 0 && v[el] == ':') return 1;
  }
  return 0;
}

static const char *header (struct MHD_Connection *c, const char *name) {
  return MHD_lookup_connection_value(c, MHD_HEADER_KIND, name);
}

static int accepts (struct MHD_Connection *c, const char *type) {
  const char *a = header(c, MHD_HTTP_HEADER_ACCEPT);
  return a != NULL && strcasestr(a, type) != NULL;
}

static unsigned streams_of (tp__mcp_http *h, const char *key) {
  unsigned n = 0;
  for (hreq *r = h->open; r; r = r->next)
    n += r->counted && strcmp(r->rate_key, key) == 0;
  return n;
}

/* addr (text) is one of the trusted proxies: the same address, however written. */
static int trusted_proxy (const tp__mcp_http *h, const char *addr) {
  unsigned char a[16], b[16];
  int fa = strchr(addr, ':') ? AF_INET6 : AF_INET;
  if (inet_pton(fa, addr, a) != 1) return 0;
  for (size_t k = 0; k < h->nproxies; k++) {
    int fb = strchr(h->proxies[k], ':') ? AF_INET6 : AF_INET;
    if (fb == fa && inet_pton(fb, h->proxies[k], b) == 1 &&
        memcmp(a, b, fa == AF_INET ? 4 : 16) == 0)
      return 1;
  }
  return 0;
}

/* The client's address when the peer is a trusted proxy: X-Forwarded-For read from the
** right (each proxy appends the address it saw), past the trusted proxies, to the first
** address that is not one. An entry that is not an IP address ends the walk: the last
** address before it stands. */
static void forwarded_client (const tp__mcp_http *h, struct MHD_Connection *c, char *client,
                              size_t len) {
  if (h->nproxies == 0 || !trusted_proxy(h, client)) return;
  const char *xff = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Forwarded-For");
  if (xff == NULL) return;
  const char *end = xff + strlen(xff);
  while (end > xff) {
    const char *p = end;
    while (p > xff && p[-1] != ',') p--;
    const char *a = p, *z = end;
    while (a < z && (*a == ' ' || *a == '\t')) a++;
    while (z > a && (z[-1] == ' ' || z[-1] == '\t')) z--;
    char one[INET6_ADDRSTRLEN];
    unsigned char bin[16];
    size_t n = (size_t)(z - a);
    if (n == 0 || n >= sizeof one) return;
    memcpy(one, a, n);
    one[n] = '\0';
    if (inet_pton(strchr(one, ':') ? AF_INET6 : AF_INET, one, bin) != 1) return;
    snprintf(client, len, "%s", one);
    if (!trusted_proxy(h, one)) return;
    end = p > xff ? p - 1 : xff;
  }
}


/* ---- answering ---------------------------------------------------------------------- */

static ssize_t sse_reader (void *cls, uint64_t pos, char *buf, size_t max) {
  (void)pos;
  hreq *r = cls;
  if (r->gone) return MHD_CONTENT_READER_END_OF_STREAM;
  size_t avail = r->out_len - r->out_off;
  if (avail > 0) {
    size_t n = avail < max ? avail : max;
    memcpy(buf, r->out + r->out_off, n);
    r->out_off += n;
    return (ssize_t)n;
  }
  if (r->ended) return MHD_CONTENT_READER_END_OF_STREAM;
  suspend(r);  /* until emit or the keep-alive adds something */
  return 0;
}

static enum MHD_Result queue_stream (hreq *r) {
  struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384,
                                                                sse_reader, r, NULL);
  if (resp == NULL) return MHD_NO;
  MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
  MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
  MHD_add_response_header(resp, "X-Accel-Buffering", "no");
  enum MHD_Result rc = MHD_queue_response(r->c, MHD_HTTP_OK, resp);
  MHD_destroy_response(resp);
  status_classes[2]++;
  return rc;
}

/* The answer of a request whose response is in (or will never come: failed). */
static enum MHD_Result answer (tp__mcp_http *h, hreq *r) {
  if (r->failed || r->resp == NULL || r->gone)  /* gone: MHD finds out when it writes */
    return queue_error(r->c, MHD_HTTP_SERVICE_UNAVAILABLE, r->id, -32603, h->stopping
                       ? "the server is stopping: the request was cancelled"
                       : "the request was cancelled before its response", NULL, NULL);
  if (r->initialize && !r->era2026) {
    json_t *j = json_loadb(r->resp, r->resp_len, 0, NULL);
    int ok = json_object_get(j, "result") != NULL;
    json_decref(j);
    hsess *hs = ok ? sess_new(h) : NULL;
    if (hs) snprintf(hs->principal, sizeof hs->principal, "%s", r->principal);
    if (ok && hs == NULL)
      return queue_error(r->c, MHD_HTTP_INTERNAL_SERVER_ERROR, r->id, -32603,
                         "out of memory: no session could be made", NULL, NULL);
    if (hs)
      return queue_text(r->c, MHD_HTTP_OK, "application/json", r->resp, r->resp_len,
                        "Mcp-Session-Id", hs->id);
  }
  return queue_text(r->c, MHD_HTTP_OK, "application/json", r->resp, r->resp_len, NULL, NULL);
}

/* The 2026-07-28 header checks: Mcp-Method is the body's method, Mcp-Name its target's
** name. NULL, or what is wrong. */
static const char *mirror_headers (hreq *r, const char *method, json_t *params, char *buf,
                                   size_t len) {
  const char *mm = header(r->c, "Mcp-Method");
  if (mm == NULL) {
    snprintf(buf, len, "Bad Request: the Mcp-Method header is required in protocol version "
             "2026-07-28 (the body's method: %.100s)", method);
    return buf;
  }
  if (strcmp(mm, method) != 0) {
    snprintf(buf, len, "Bad Request: the Mcp-Method header (%.100s) does not match the "
             "body's method (%.100s)", mm, method);
    return buf;
  }
  const char *key = strcmp(method, "tools/call") == 0 || strcmp(method, "prompts/get") == 0
                    ? "name" : strcmp(method, "resources/read") == 0 ? "uri" : NULL;
  const char *name = key ? json_string_value(json_object_get(params, key)) : NULL;
  if (name == NULL) return NULL;
  const char *mn = header(r->c, "Mcp-Name");
  if (mn == NULL || strcmp(mn, name) != 0) {
    snprintf(buf, len, "Bad Request: the Mcp-Name header (%.100s) does not match the body's "
             "params.%s (%.100s)", mn ? mn : "missing", key, name);
    return buf;
  }
  return NULL;
}

/* notifications/cancelled of a 2025-era session: the request of that session with that
** id, if still running. */
static void cancel_by_id (tp__mcp_http *h, const char *sid, json_t *params) {
  json_t *rid = json_object_get(params, "requestId");
  for (hreq *r = h->open; r && rid; r = r->next)
    if (r->held && r->id && json_equal(r->id, rid) && strcmp(r->sid, sid) == 0) {
      h->ent.cancel(h->ent.s, r);
      return;
    }
}

/* A whole POST body is in: one message for mcp.c. */
static enum MHD_Result dispatch (tp__mcp_http *h, hreq *r) {
  struct MHD_Connection *c = r->c;
  char why[400];
  if (r->too_big) {
    snprintf(why, sizeof why, "Request Entity Too Large: the body is over the %llu bytes a "
             "message may have (server.max_body)", (unsigned long long)h->lim[O_BODY]);
    return queue_error(c, MHD_HTTP_CONTENT_TOO_LARGE, NULL, -32600, why, NULL, NULL);
  }
  if (h->stopping)
    return queue_error(c, MHD_HTTP_SERVICE_UNAVAILABLE, NULL, -32000, "the server is "
                       "stopping: send the request to another server", "Connection", "close");
  json_t *msg = tp_json_parse(r->body ? r->body : "", r->len, why, sizeof why);
  if (msg == NULL) {
    char m[500];
    snprintf(m, sizeof m, "Parse error: %s", why);
    return queue_error(c, MHD_HTTP_BAD_REQUEST, NULL, -32700, m, NULL, NULL);
  }
  enum MHD_Result rc;
  if (!json_is_object(msg)) {
    rc = queue_error(c, MHD_HTTP_BAD_REQUEST, NULL, -32600, json_is_array(msg)
                     ? "Invalid Request: JSON-RPC batches are not supported over HTTP: POST "
                       "one message at a time"
                     : "Invalid Request: a message must be a JSON object", NULL, NULL);
    goto out;
  }
  const char *ver = header(c, "MCP-Protocol-Version");
  if (ver) {
    if (!tp__mcp_era_known(ver)) {
      char list[200];
      tp__mcp_era_list(list, sizeof list);
      snprintf(why, sizeof why, "Bad Request: unsupported MCP-Protocol-Version '%.60s' "
               "(supported: %s)", ver, list);
      rc = queue_error(c, MHD_HTTP_BAD_REQUEST, NULL, -32600, why, NULL, NULL);
      goto out;
    }
    r->era2026 = strcmp(ver, TP_MCP_MODERN_VERSION) >= 0;
  }
  json_t *jm = json_object_get(msg, "method"), *id = json_object_get(msg, "id");
  json_t *params = json_object_get(msg, "params");
  const char *method = json_string_value(jm);
  if (r->era2026 && method) {
    const char *bad = mirror_headers(r, method, params, why, sizeof why);
    if (bad) {
      rc = queue_error(c, MHD_HTTP_BAD_REQUEST, id, -32020, bad, NULL, NULL);
      goto out;
    }
  }
  else if (!r->era2026 && !(method && strcmp(method, "initialize") == 0)) {
    const char *sid = header(c, "Mcp-Session-Id");
    hsess *hs = sid ? sess_find(h, sid) : NULL;
    if (hs && strcmp(hs->principal, r->principal) != 0) hs = NULL;  /* someone else's */
    if (sid == NULL) {
      rc = queue_error(c, MHD_HTTP_BAD_REQUEST, id, -32000, "Bad Request: the Mcp-Session-Id "
                       "header is required: send initialize first and then the session id "
                       "its response gave", NULL, NULL);
      goto out;
    }
    if (hs == NULL) {
      rc = queue_error(c, MHD_HTTP_NOT_FOUND, id, -32001, "Session not found: it ended or "
                       "never existed; send initialize again for a new session", NULL, NULL);
      goto out;
    }
    hs->used_ns = tp__mcp_mono_ns();
    snprintf(r->sid, sizeof r->sid, "%s", hs->id);
  }
  if (method == NULL || id == NULL) {  /* a notification or a response: 202 */
    if (method && strcmp(method, "notifications/cancelled") == 0) {
      if (r->sid[0]) cancel_by_id(h, r->sid, params);
    }
    else {
      h->ent.handle(h->ent.s, r, msg);
      if (r->resp) {  /* mcp.c refused it */
        rc = queue_text(c, MHD_HTTP_BAD_REQUEST, "application/json", r->resp, r->resp_len,
                        NULL, NULL);
        goto out;
      }
    }
    r->state = R_ANSWERED;
    rc = queue_text(c, MHD_HTTP_ACCEPTED, NULL, "", 0, NULL, NULL);
    goto out;
  }
  int call = method && strcmp(method, "tools/call") == 0;
  if (call && h->lim[O_STREAMS] && streams_of(h, r->rate_key) >= h->lim[O_STREAMS]) {
    snprintf(why, sizeof why, "Too Many Requests: this client (%.200s) has %llu requests waiting "
             "for their responses, the most it may have (server.max_streams_per_client): "
             "wait for one to finish", r->rate_key, (unsigned long long)h->lim[O_STREAMS]);
    rc = queue_error(c, MHD_HTTP_TOO_MANY_REQUESTS, id, -32000, why, "Retry-After", "1");
    goto out;
  }
  r->counted = call;
  r->id = json_incref(id);
  r->initialize = method && strcmp(method, "initialize") == 0;
  json_t *meta = json_object_get(params, "_meta");
  /* a stream carries progress, and the run's requests to the client: its caller tools'
  ** calls (docs/caller-tools.md) */
  r->sse = call && accepts(c, "text/event-stream") &&
           (json_object_get(meta, "progressToken") ||
            json_object_get(meta, "tidepool/callerTools"));
  r->state = R_WAITING;
  h->ent.handle(h->ent.s, r, msg);
  if (r->sse) rc = queue_stream(r);           /* what came so far, then the rest */
  else if (r->state == R_ANSWERED) rc = answer(h, r);
  else if (!r->held) {                        /* mcp.c made no response: cannot happen */
    r->failed = 1;
    r->state = R_ANSWERED;
    rc = answer(h, r);
  }
  else {
    suspend(r);                               /* until the response: emit wakes it */
    rc = MHD_YES;
  }
out:
  json_decref(msg);
  return rc;
}

/* ---- routes beside the MCP endpoint: one line each in routes[] ------------------------ */

/* The OAuth protected resource metadata (RFC 9728), with auth. */
static int oauth_match (tp__mcp_http *h, const char *url) {
  return h->auth && (strcmp(url, "/.well-known/oauth-protected-resource") == 0 ||
                     strcmp(url, "/.well-known/oauth-protected-resource" ENDPOINT) == 0 ||
                     strcmp(url, tp__mcp_auth_metadata_path(h->auth)) == 0);
}
static enum MHD_Result oauth_answer (tp__mcp_http *h, hreq *r) {
  char *doc = tp__mcp_auth_resource_metadata(h->auth);
  enum MHD_Result rc = doc ? queue_text(r->c, MHD_HTTP_OK, "application/json", doc, strlen(doc),
                                        NULL, NULL)
                           : queue_error(r->c, MHD_HTTP_INTERNAL_SERVER_ERROR, NULL, -32603,
                                         "out of memory", NULL, NULL);
  free(doc);
  return rc;
}

/* /metrics in Prometheus text: the workers' engines summed and the server's own series
** (the server's metrics entry), then HTTP responses by class. With auth a token with the
** "metrics" scope; without, a loopback client only (the address a trusted proxy names
** counts: a proxy on this host does not make its clients local). */
static int metrics_match (tp__mcp_http *h, const char *url) { return strcmp(url, "/metrics") == 0; }
static enum MHD_Result metrics_answer (tp__mcp_http *h, hreq *r) {
  struct MHD_Connection *c = r->c;
  char why[400];
  if (h->auth) {
    tp__mcp_auth_result ar;
    int st = tp__mcp_auth_check_scope(h->auth, header(c, MHD_HTTP_HEADER_AUTHORIZATION),
                                      "metrics", (int64_t)time(NULL), &ar);
    if (st != 200) {
      char *challenge = tp__mcp_auth_challenge(h->auth, &ar);
      snprintf(why, sizeof why, "%s: /metrics needs a token with the \"metrics\" scope: %s",
               st == 401 ? "Unauthorized" : "Forbidden",
               ar.description[0] ? ar.description : ar.error);
      enum MHD_Result rc = queue_error(c, st == 401 ? MHD_HTTP_UNAUTHORIZED : MHD_HTTP_FORBIDDEN,
                                       NULL, -32000, why,
                                       challenge ? MHD_HTTP_HEADER_WWW_AUTHENTICATE : NULL,
                                       challenge);
      free(challenge);
      return rc;
    }
  }
  else if (strcmp(r->client, "127.0.0.1") != 0 && strcmp(r->client, "::1") != 0 &&
           strncmp(r->client, "::ffff:127.", 11) != 0) {
    snprintf(why, sizeof why, "Forbidden: /metrics is served to loopback clients only when the "
             "server has no auth (this client: %.60s); configure auth and a token with the "
             "\"metrics\" scope", r->client);
    return queue_error(c, MHD_HTTP_FORBIDDEN, NULL, -32000, why, NULL, NULL);
  }
  size_t len = 0;
  char *text = h->ent.metrics ? h->ent.metrics(h->ent.s, &len) : NULL;
  char tail[600];
  int k = snprintf(tail, sizeof tail,
    "# HELP tidepool_http_responses_total HTTP responses by status class, this one excluded.\n"
    "# TYPE tidepool_http_responses_total counter\n"
    "tidepool_http_responses_total{class=\"2xx\"} %llu\n"
    "tidepool_http_responses_total{class=\"4xx\"} %llu\n"
    "tidepool_http_responses_total{class=\"5xx\"} %llu\n",
    (unsigned long long)status_classes[2], (unsigned long long)status_classes[4],
    (unsigned long long)status_classes[5]);
  char *all = text && k > 0 && (size_t)k < sizeof tail ? malloc(len + (size_t)k) : NULL;
  if (all == NULL) {
    free(text);
    return queue_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR, NULL, -32603, "out of memory", NULL,
                       NULL);
  }
  memcpy(all, text, len);
  memcpy(all + len, tail, (size_t)k);
  free(text);
  enum MHD_Result rc = queue_text(c, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8", all,
                                  len + (size_t)k, NULL, NULL);
  free(all);
  return rc;
}

/* The operator page (--ui; ui_http.c): who may see it and what it does are its own. */
static int ui_match (tp__mcp_http *h, const char *url) {
  return h->ui != NULL && tp__mcp_ui_http_match(url);
}
static enum MHD_Result ui_answer (tp__mcp_http *h, hreq *r) {
  tp__mcp_ui_req rq = { r->c, r->method, r->url, r->client, r->body, r->len, r->too_big };
  return tp__mcp_ui_http_answer(h->ui, &rq);
}

/* A request for method and a url that match answers it (the Host and Origin checks
** passed; no bearer token asked); with body, once its body is in (at most
** TP__MCP_UI_BODY_MAX bytes: a larger one is answered with too_big set). */
static const struct {
  const char *method;
  int (*match)(tp__mcp_http *h, const char *url);
  enum MHD_Result (*answer)(tp__mcp_http *h, hreq *r);
  int body;
} routes[] = {
  { "GET", oauth_match, oauth_answer, 0 },
  { "GET", metrics_match, metrics_answer, 0 },
  { "GET", ui_match, ui_answer, 0 },
  { "HEAD", ui_match, ui_answer, 0 },
  { "POST", ui_match, ui_answer, 1 },
};

/* The first call for a request (its headers are in): route and guard. MHD_YES with
** nothing queued to read the body (POST); else an answer is queued. */
static enum MHD_Result begin (tp__mcp_http *h, hreq *r, const char *url, const char *method) {
  struct MHD_Connection *c = r->c;
  char why[400];
  if (r->cn && r->cn->over) {
    snprintf(why, sizeof why, "Service Unavailable: the server has %llu connections open, "
             "the most it takes (server.max_connections): retry shortly",
             (unsigned long long)h->lim[O_CONNS]);
    return queue_error(c, MHD_HTTP_SERVICE_UNAVAILABLE, NULL, -32000, why, "Retry-After", "1");
  }
  const char *host = header(c, MHD_HTTP_HEADER_HOST), *origin = header(c, "Origin");
  if (host == NULL || !listed(h->hosts, h->nhosts, host, 1)) {
    snprintf(why, sizeof why, "Forbidden: Host '%.100s' is not one this server answers to "
             "(server.allowed_hosts)", host ? host : "");
    return queue_error(c, MHD_HTTP_FORBIDDEN, NULL, -32000, why, NULL, NULL);
  }
  if (origin && !listed(h->origins, h->norigins, origin, 0)) {
    snprintf(why, sizeof why, "Forbidden: Origin '%.100s' is not allowed "
             "(server.allowed_origins)", origin);
    return queue_error(c, MHD_HTTP_FORBIDDEN, NULL, -32000, why, NULL, NULL);
  }
  snprintf(r->url, sizeof r->url, "%s", strlen(url) < sizeof r->url ? url : "/?");
  snprintf(r->method, sizeof r->method, "%s", strlen(method) < sizeof r->method ? method : "?");
  for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
    if (strcmp(method, routes[i].method) == 0 && routes[i].match(h, url)) {
      if (!routes[i].body) return routes[i].answer(h, r);
      r->route = (int)i + 1;  /* the body first, unless it says it is too large */
      const char *cl = header(c, MHD_HTTP_HEADER_CONTENT_LENGTH);
      if (cl && strtoull(cl, NULL, 10) > TP__MCP_UI_BODY_MAX) {
        r->too_big = 1;
        return routes[i].answer(h, r);
      }
      return MHD_YES;
    }
  if (h->ui && tp__mcp_ui_http_match(url))  /* PUT, DELETE ...: its 405 */
    return ui_answer(h, r);
  if (strcmp(url, ENDPOINT) != 0) {
    snprintf(why, sizeof why, "Not Found: %.100s (the MCP endpoint is " ENDPOINT ")", url);
    return queue_error(c, MHD_HTTP_NOT_FOUND, NULL, -32000, why, NULL, NULL);
  }
  if (h->auth) {  /* who calls: the token stays here, only its principal and scopes go on */
    tp__mcp_auth_result ar;
    int st = tp__mcp_auth_check(h->auth, header(c, MHD_HTTP_HEADER_AUTHORIZATION), NULL,
                            (int64_t)time(NULL), &ar);
    if (st != 200) {
      char *challenge = tp__mcp_auth_challenge(h->auth, &ar);
      snprintf(why, sizeof why, "%s: %s", st == 401 ? "Unauthorized" : "Forbidden",
               ar.description[0] ? ar.description : ar.error);
      enum MHD_Result rc = queue_error(c, st == 401 ? MHD_HTTP_UNAUTHORIZED : MHD_HTTP_FORBIDDEN,
                                       NULL, -32000, why,
                                       challenge ? MHD_HTTP_HEADER_WWW_AUTHENTICATE : NULL,
                                       challenge);
      free(challenge);
      return rc;
    }
    snprintf(r->principal, sizeof r->principal, "%s", ar.principal);
    snprintf(r->scopes, sizeof r->scopes, "%s", ar.scopes);
  }
  const char *tph = header(c, "traceparent");  /* the run's parent when _meta has none */
  if (tph && strlen(tph) < sizeof r->traceparent) snprintf(r->traceparent, sizeof r->traceparent,
                                                           "%s", tph);
  if (r->principal[0]) snprintf(r->rate_key, sizeof r->rate_key, "principal %s", r->principal);
  else snprintf(r->rate_key, sizeof r->rate_key, "address %s", r->client);
  if (strcmp(method, "DELETE") == 0) {
    const char *ver = header(c, "MCP-Protocol-Version");
    const char *sid = header(c, "Mcp-Session-Id");
    hsess *hs = sid ? sess_find(h, sid) : NULL;
    if (hs && strcmp(hs->principal, r->principal) != 0) hs = NULL;  /* someone else's */
    if (ver && strcmp(ver, TP_MCP_MODERN_VERSION) >= 0)
      return queue_error(c, MHD_HTTP_METHOD_NOT_ALLOWED, NULL, -32000, "Method Not Allowed: "
                         "protocol version 2026-07-28 has no sessions to end", NULL, NULL);
    if (sid == NULL)
      return queue_error(c, MHD_HTTP_BAD_REQUEST, NULL, -32000, "Bad Request: DELETE ends "
                         "the session named by the Mcp-Session-Id header, which is missing",
                         NULL, NULL);
    if (hs == NULL)
      return queue_error(c, MHD_HTTP_NOT_FOUND, NULL, -32001, "Session not found: it ended "
                         "or never existed", NULL, NULL);
    for (hreq *q = h->open; q; q = q->next)  /* its runs stop */
      if (q->held && strcmp(q->sid, hs->id) == 0) h->ent.cancel(h->ent.s, q);
    sess_drop(h, hs);
    return queue_text(c, MHD_HTTP_OK, NULL, "", 0, NULL, NULL);
  }
  if (strcmp(method, "POST") != 0)
    return queue_error(c, MHD_HTTP_METHOD_NOT_ALLOWED, NULL, -32000, "Method Not Allowed: "
                       "POST one JSON-RPC message (this server opens no stream on GET)",
                       NULL, NULL);
  const char *cl = header(c, MHD_HTTP_HEADER_CONTENT_LENGTH);
  if (cl && h->lim[O_BODY] && strtoull(cl, NULL, 10) > h->lim[O_BODY]) {
    r->too_big = 1;
    return dispatch(h, r);
  }
  const char *ct = header(c, MHD_HTTP_HEADER_CONTENT_TYPE);
  if (ct == NULL || strncasecmp(ct, "application/json", 16) != 0)
    return queue_error(c, MHD_HTTP_UNSUPPORTED_MEDIA_TYPE, NULL, -32000, "Unsupported Media "
                       "Type: the body must be one JSON-RPC message, Content-Type: "
                       "application/json", NULL, NULL);
  if (!accepts(c, "application/json") && !accepts(c, "text/event-stream") &&
      !accepts(c, "*/*") && header(c, MHD_HTTP_HEADER_ACCEPT) != NULL)
    return queue_error(c, MHD_HTTP_NOT_ACCEPTABLE, NULL, -32000, "Not Acceptable: the "
                       "client must accept application/json and text/event-stream", NULL, NULL);
  return MHD_YES;
}

static enum MHD_Result on_request (void *cls, struct MHD_Connection *c, const char *url,
                                   const char *method, const char *version,
                                   const char *upload, size_t *upload_size, void **con_cls) {
  (void)version;
  tp__mcp_http *h = cls;
  hreq *r = *con_cls;
  if (r == NULL) {
    r = calloc(1, sizeof *r);
    if (r == NULL) return MHD_NO;
    r->h = h;
    r->c = c;
    r->refs = 1;
    const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    r->cn = ci ? ci->socket_context : NULL;
    ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (ci && ci->client_addr) {
      const struct sockaddr *sa = ci->client_addr;
      if (sa->sa_family == AF_INET6)
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr,
                  r->client, sizeof r->client);
      else if (sa->sa_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)(const void *)sa)->sin_addr,
                  r->client, sizeof r->client);
      forwarded_client(h, c, r->client, sizeof r->client);
    }
    r->next = h->open;
    if (h->open) h->open->prev = r;
    h->open = r;
    *con_cls = r;
    enum MHD_Result rc = begin(h, r, url, method);
    if (rc != MHD_YES || r->state != R_RECEIVING || r->too_big) r->state = R_ANSWERED;
    return rc;
  }
  if (r->state == R_RECEIVING) {
    if (*upload_size > 0) {
      size_t n = *upload_size;
      *upload_size = 0;
      if (r->too_big) return MHD_YES;
      uint64_t most = r->route ? TP__MCP_UI_BODY_MAX : h->lim[O_BODY];
      if (most && r->len + n > most) {
        r->too_big = 1;
        free(r->body);
        r->body = NULL;
        r->len = r->cap = 0;
        return MHD_YES;
      }
      if (r->len + n + 1 > r->cap) {
        size_t cap = r->cap ? r->cap : 4096;
        while (cap < r->len + n + 1) cap *= 2;
        char *nb = realloc(r->body, cap);
        if (nb == NULL) return MHD_NO;
        r->body = nb;
        r->cap = cap;
      }
      memcpy(r->body + r->len, upload, n);
      r->len += n;
      return MHD_YES;
    }
    if (r->cn) r->cn->busy = 1;  /* the whole request came in time */
    if (r->route) return routes[r->route - 1].answer(h, r);
    return dispatch(h, r);
  }
  if (*upload_size > 0) { *upload_size = 0; return MHD_YES; }  /* after an early answer */
  if (!r->sse && (r->state == R_ANSWERED || r->gone)) return answer(h, r);  /* resumed */
  return MHD_YES;
}

static void on_completed (void *cls, struct MHD_Connection *c, void **con_cls,
                          enum MHD_RequestTerminationCode toe) {
  (void)c;
  tp__mcp_http *h = cls;
  hreq *r = *con_cls;
  if (r == NULL) return;
  *con_cls = NULL;
  r->mhd_done = 1;
  r->suspended = 0;
  unwatch(r);
  if (r->prev) r->prev->next = r->next;
  else h->open = r->next;
  if (r->next) r->next->prev = r->prev;
  r->prev = r->next = NULL;
  r->counted = 0;
  if (r->cn) {
    r->cn->busy = 0;
    r->cn->since_ns = tp__mcp_mono_ns();
  }
  if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK) {
    r->gone = 1;
    if (r->era2026 && r->held) h->ent.cancel(h->ent.s, r);
  }
  hreq_unref(r);
  stopped_check(h);
}

static void on_connection (void *cls, struct MHD_Connection *c, void **socket_context,
                           enum MHD_ConnectionNotificationCode toe) {
  tp__mcp_http *h = cls;
  if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
    conn *cn = calloc(1, sizeof *cn);
    const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (cn == NULL || ci == NULL) { free(cn); return; }
    cn->fd = ci->connect_fd;
    cn->since_ns = tp__mcp_mono_ns();
    h->nconns++;
    cn->over = h->lim[O_CONNS] && h->nconns > h->lim[O_CONNS];
    cn->next = h->conns;
    if (h->conns) h->conns->prev = cn;
    h->conns = cn;
    *socket_context = cn;
    return;
  }
  conn *cn = *socket_context;
  if (cn == NULL) return;
  if (cn->prev) cn->prev->next = cn->next;
  else h->conns = cn->next;
  if (cn->next) cn->next->prev = cn->prev;
  h->nconns--;
  free(cn);
  *socket_context = NULL;
}

/* ---- the loop ------------------------------------------------------------------------ */

static void run_mhd (tp__mcp_http *h) {
  if (h->d == NULL || h->in_run) return;
  h->in_run = 1;
  MHD_run(h->d);
  h->in_run = 0;
  update_timer(h);
}

static void timer_cb (uv_timer_t *t) { run_mhd(t->data); }
static void poll_cb (uv_poll_t *p, int status, int events) {
  (void)status; (void)events;
  run_mhd(p->data);
}

static void update_timer (tp__mcp_http *h) {
  MHD_UNSIGNED_LONG_LONG ms;
  if (h->d == NULL || h->free_pending) return;
  if (MHD_get_timeout(h->d, &ms) == MHD_YES) uv_timer_start(&h->timer, timer_cb, ms, 0);
  else uv_timer_stop(&h->timer);
}

/* Connections that have not sent a whole request in time are shut down (MHD then sees
** the end of the stream and closes them); idle sessions are forgotten. */
static void sweep_cb (uv_timer_t *t) {
  tp__mcp_http *h = t->data;
  uint64_t now = tp__mcp_mono_ns(), limit = h->lim[O_REQUEST] * 1000u;
  for (conn *cn = h->conns; cn; cn = cn->next)
    if (!cn->busy && ((limit && now - cn->since_ns > limit) ||
                      (cn->over && now - cn->since_ns > OVERFLOW_IDLE_NS))) {
      shutdown(cn->fd, SHUT_RDWR);
      cn->since_ns = now;
    }
  for (hsess *p = h->sessions, *next; p; p = next) {
    next = p->next;
    if (now - p->used_ns > SESSION_IDLE_NS) sess_drop(h, p);
  }
}

static void keepalive_cb (uv_timer_t *t) {
  tp__mcp_http *h = t->data;
  for (hreq *r = h->open; r; r = r->next)
    if (r->sse && r->state == R_WAITING && !r->gone) {
      sse_put(r, ": keep-alive\n\n", 14);
      wake(r);
    }
}

/* Once stopping and no request is under way any more, the server stops. */
static void stopped_check (tp__mcp_http *h) {
  if (!h->stopping || h->stopped) return;
  for (hreq *r = h->open; r; r = r->next)
    if (r->state != R_RECEIVING || r->held) return;
  h->stopped = 1;
  h->ent.stop(h->ent.s);
}

static void grace_cb (uv_timer_t *t) {
  tp__mcp_http *h = t->data;
  if (h->stopping == 2) {  /* the cancelled ones did not finish either */
    h->stopped = 1;
    h->ent.stop(h->ent.s);
    return;
  }
  h->stopping = 2;
  for (hreq *r = h->open, *next; r; r = next) {
    next = r->next;
    if (r->held) h->ent.cancel(h->ent.s, r);
  }
  uv_timer_start(&h->grace, grace_cb, 2000, 0);
  stopped_check(h);
}

static void signal_cb (uv_signal_t *sg, int signum) {
  tp__mcp_http *h = sg->data;
  if (h->stopping) { grace_cb(&h->grace); return; }  /* a second signal: no more grace */
  h->stopping = 1;
  fprintf(stderr, "tidepool mcp: %s: stopping (no new connections; requests in flight have "
          "%.3g s to finish)\n", signum == SIGINT ? "SIGINT" : "SIGTERM",
          (double)h->lim[O_GRACE] / 1e6);
  MHD_socket ls = MHD_quiesce_daemon(h->d);
  if (ls != MHD_INVALID_SOCKET) close(ls);
  uv_timer_start(&h->grace, grace_cb, h->lim[O_GRACE] / 1000u, 0);
  stopped_check(h);
}

/* ---- life ---------------------------------------------------------------------------- */

/* "PORT", "ADDR:PORT", "[ADDR6]:PORT" (ADDR: an IP address or localhost) into sa. */
static int parse_listen (const char *v, struct sockaddr_storage *sa, char *addr, size_t alen,
                         int *port, int *v6) {
  char host[64] = "127.0.0.1";
  const char *ps = v;
  if (v[0] == '[') {
    const char *e = strchr(v, ']');
    if (e == NULL || e[1] != ':' || (size_t)(e - v - 1) >= sizeof host) return -1;
    memcpy(host, v + 1, (size_t)(e - v - 1));
    host[e - v - 1] = '\0';
    ps = e + 2;
  }
  else if (strchr(v, ':')) {
    const char *e = strrchr(v, ':');
    if ((size_t)(e - v) >= sizeof host || e == v) return -1;
    memcpy(host, v, (size_t)(e - v));
    host[e - v] = '\0';
    ps = e + 1;
  }
  char *end;
  unsigned long p = strtoul(ps, &end, 10);
  if (*ps == '\0' || *end != '\0' || p > 65535) return -1;
  if (strcmp(host, "localhost") == 0) strcpy(host, "127.0.0.1");
  memset(sa, 0, sizeof *sa);
  struct sockaddr_in *s4 = (struct sockaddr_in *)sa;
  struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)sa;
  if (inet_pton(AF_INET, host, &s4->sin_addr) == 1) {
    s4->sin_family = AF_INET;
    s4->sin_port = htons((uint16_t)p);
    *v6 = 0;
  }
  else if (inet_pton(AF_INET6, host, &s6->sin6_addr) == 1) {
    s6->sin6_family = AF_INET6;
    s6->sin6_port = htons((uint16_t)p);
    *v6 = 1;
  }
  else return -1;
  snprintf(addr, alen, "%s", host);
  *port = (int)p;
  return 0;
}

static int add_str (char ***list, size_t *n, const char *v) {
  char **nl = realloc(*list, (*n + 1) * sizeof *nl);
  if (nl == NULL) return -1;
  *list = nl;
  if ((nl[*n] = strdup(v)) == NULL) return -1;
  (*n)++;
  return 0;
}

/* The config's list key of section sec into list; -1 (said on stderr) when not a list
** of strings. */
static int config_list (json_t *sec, const char *key, char ***list, size_t *n) {
  json_t *a = json_object_get(sec, key), *v;
  size_t i;
  if (a == NULL) return 0;
  if (!json_is_array(a)) goto bad;
  json_array_foreach(a, i, v) {
    if (!json_is_string(v)) goto bad;
    if (add_str(list, n, json_string_value(v)) != 0) return -1;
  }
  return 0;
bad:
  fprintf(stderr, "tidepool mcp: config: /server/%s: expected a list of strings\n", key);
  return -1;
}

static void handle_closed (uv_handle_t *hd) {
  tp__mcp_http *h = hd->data;
  if (--h->handles == 0 && h->free_pending) free(h);
}

static void free_lists (tp__mcp_http *h) {
  for (size_t i = 0; i < h->nhosts; i++) free(h->hosts[i]);
  for (size_t i = 0; i < h->norigins; i++) free(h->origins[i]);
  for (size_t i = 0; i < h->nproxies; i++) free(h->proxies[i]);
  free(h->hosts);
  free(h->origins);
  free(h->proxies);
  while (h->sessions) sess_drop(h, h->sessions);
  tp__mcp_ui_http_free(h->ui);
  h->ui = NULL;
  tp__mcp_auth_free(h->auth);
  h->auth = NULL;
}

tp__mcp_http *tp__mcp_http_new (const tp__mcp_entries *ent, uv_loop_t *loop,
                                const tp__mcp_http_opts *o, const char *config,
                                size_t config_len, const char *config_dir) {
  tp__mcp_http *h = calloc(1, sizeof *h);
  json_t *sec = server_section(config, config_len);
  struct sockaddr_storage sa;
  if (h == NULL) { fprintf(stderr, "tidepool mcp: out of memory\n"); return NULL; }
  h->ent = *ent;
  h->loop = loop;
  for (int k = 0; k < O_N; k++) {
    h->lim[k] = limits[k].def;
    json_t *v = json_object_get(sec, limits[k].key);
    char text[64], err[200];
    const char *t = json_string_value(v);
    if (json_is_integer(v)) {
      snprintf(text, sizeof text, "%lld", (long long)json_integer_value(v));
      t = text;
    }
    else if (json_is_real(v)) {  /* seconds: 1.5 */
      snprintf(text, sizeof text, "%.6f", json_real_value(v));
      t = text;
    }
    if (v && (t == NULL || tp_parse_value(limits[k].unit, t, limits[k].max, &h->lim[k], NULL,
                                          err, sizeof err) != TP_OK)) {
      fprintf(stderr, "tidepool mcp: config: /server/%s: %s\n", limits[k].key,
              t ? err : "expected a number or a string");
      goto fail;
    }
    if (o->given & (1u << k)) h->lim[k] = *opt_field((tp__mcp_http_opts *)o, k);
  }
  const char *listen = o->listen ? o->listen : json_string_value(json_object_get(sec, "http"));
  if (listen == NULL || parse_listen(listen, &sa, h->addr, sizeof h->addr, &h->port, &h->v6)) {
    fprintf(stderr, "tidepool mcp: --http '%s': expected PORT, ADDR:PORT or [ADDR6]:PORT with "
            "ADDR an IP address (127.0.0.1:8080)\n", listen ? listen : "");
    goto fail;
  }
  if (config_list(sec, "allowed_hosts", &h->hosts, &h->nhosts) != 0 ||
      config_list(sec, "allowed_origins", &h->origins, &h->norigins) != 0 ||
      config_list(sec, "trusted_proxies", &h->proxies, &h->nproxies) != 0)
    goto fail;
  for (size_t k = 0; k < h->nproxies; k++) {
    unsigned char bin[16];
    const char *a = h->proxies[k];
    if (inet_pton(strchr(a, ':') ? AF_INET6 : AF_INET, a, bin) != 1) {
      fprintf(stderr, "tidepool mcp: config: /server/trusted_proxies/%zu: '%s' is not an IP "
              "address (127.0.0.1, ::1)\n", k, a);
      goto fail;
    }
  }
  json_t *cfg = config ? tp_json_parse(config, config_len, NULL, 0) : NULL;
  json_t *asec = json_object_get(cfg, "auth");
  if (asec) {
    char err[512];
    h->auth = tp__mcp_auth_new(asec, config_dir ? config_dir : ".", err, sizeof err);
    if (h->auth == NULL) fprintf(stderr, "tidepool mcp: config: /auth: %s\n", err);
  }
  json_decref(cfg);
  if (asec && h->auth == NULL) goto fail;
  if (o->ui && (h->ui = tp__mcp_ui_http_new(ent, h->auth, status_classes)) == NULL) goto oom;
  unsigned flags = MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
  if (h->v6) flags |= MHD_USE_IPv6;
  /* a connection's memory pool holds its request line and headers first (431 past it),
  ** and the buffer of its answer's headers */
  size_t pool = (size_t)h->lim[O_HEADER] + 4096;
  h->d = MHD_start_daemon(flags, (uint16_t)h->port, NULL, NULL, on_request, h,
                          MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
                          MHD_OPTION_CONNECTION_MEMORY_LIMIT, pool,
                          MHD_OPTION_CONNECTION_LIMIT, (unsigned)(h->lim[O_CONNS]
                                                       ? h->lim[O_CONNS] + OVERFLOW_CONNS : 0),
                          MHD_OPTION_CONNECTION_TIMEOUT,
                          (unsigned)((h->lim[O_IDLE] + 999999) / 1000000),
                          MHD_OPTION_NOTIFY_COMPLETED, on_completed, h,
                          MHD_OPTION_NOTIFY_CONNECTION, on_connection, h,
                          MHD_OPTION_END);
  if (h->d == NULL) {
    fprintf(stderr, "tidepool mcp: --http: cannot listen on %s (%s): is another server "
            "there?\n", listen, strerror(errno));
    goto fail;
  }
  const union MHD_DaemonInfo *di = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
  if (di) h->port = di->port;
  if (h->nhosts == 0) {  /* the localhost forms of the bound address */
    static const char *const local[] = { "127.0.0.1", "localhost", "[::1]" };
    char v[128];
    int any = strcmp(h->addr, "0.0.0.0") == 0 || strcmp(h->addr, "::") == 0;
    for (size_t k = 0; k < 3; k++) {
      snprintf(v, sizeof v, "%s:%d", local[k], h->port);
      if (add_str(&h->hosts, &h->nhosts, v) != 0) goto oom;
    }
    if (!any && strcmp(h->addr, "127.0.0.1") != 0 && strcmp(h->addr, "::1") != 0) {
      snprintf(v, sizeof v, h->v6 ? "[%s]:%d" : "%s:%d", h->addr, h->port);
      if (add_str(&h->hosts, &h->nhosts, v) != 0) goto oom;
    }
  }
  if (h->norigins == 0) {
    char v[200];
    for (size_t k = 0; k < h->nhosts; k++) {
      if (strcmp(h->hosts[k], "*") == 0) continue;
      snprintf(v, sizeof v, "http://%s", h->hosts[k]);
      if (add_str(&h->origins, &h->norigins, v) != 0) goto oom;
    }
  }
  const union MHD_DaemonInfo *ei = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_EPOLL_FD);
  if (ei == NULL || uv_poll_init(loop, &h->poll, ei->epoll_fd) != 0) {
    fprintf(stderr, "tidepool mcp: --http: cannot watch the server's epoll descriptor\n");
    goto fail;
  }
  h->handles++;
  h->poll.data = h;
  uv_timer_t *timers[] = { &h->timer, &h->sweep, &h->keepalive, &h->grace };
  for (size_t k = 0; k < 4; k++) {
    uv_timer_init(loop, timers[k]);
    timers[k]->data = h;
    h->handles++;
  }
  uv_signal_init(loop, &h->sigint);
  uv_signal_init(loop, &h->sigterm);
  h->sigint.data = h->sigterm.data = h;
  h->handles += 2;
  json_decref(sec);
  return h;
oom:
  fprintf(stderr, "tidepool mcp: out of memory\n");
fail:
  json_decref(sec);
  if (h->handles) {  /* cannot happen: nothing fails after the handles */
    h->free_pending = 1;
    return NULL;
  }
  if (h->d) MHD_stop_daemon(h->d);
  free_lists(h);
  free(h);
  return NULL;
}

static void http_serve (void *ud, size_t ntools, unsigned nworkers) {
  tp__mcp_http *h = ud;
  uv_poll_start(&h->poll, UV_READABLE, poll_cb);
  uint64_t every = h->lim[O_REQUEST] / 4000u;  /* ms */
  if (every < 20) every = 20;
  if (every > 1000) every = 1000;
  uv_timer_start(&h->sweep, sweep_cb, every, every);
  if (h->lim[O_KEEPALIVE])
    uv_timer_start(&h->keepalive, keepalive_cb, h->lim[O_KEEPALIVE] / 1000u,
                   h->lim[O_KEEPALIVE] / 1000u);
  uv_signal_start(&h->sigint, signal_cb, SIGINT);
  uv_signal_start(&h->sigterm, signal_cb, SIGTERM);
  h->serving = 1;
  fprintf(stderr, "tidepool mcp %s: serving on http://%s%s%s:%d" ENDPOINT " (%zu tools, %u "
          "worker%s)\n", tp_version(), h->v6 ? "[" : "", h->addr, h->v6 ? "]" : "", h->port,
          ntools, nworkers, nworkers == 1 ? "" : "s");
  run_mhd(h);
}

static void http_free (void *ud) {
  tp__mcp_http *h = ud;
  if (h == NULL) return;
  uv_poll_stop(&h->poll);  /* before MHD closes the descriptor */
  for (hreq *r = h->open; r; r = r->next) {  /* MHD must not stop with suspended ones */
    r->gone = 1;
    unwatch(r);
    if (r->suspended) {
      r->suspended = 0;
      MHD_resume_connection(r->c);
    }
  }
  h->free_pending = 1;
  MHD_stop_daemon(h->d);  /* completes every request (on_completed) */
  h->d = NULL;
  free_lists(h);
  uv_handle_t *hs[] = { (uv_handle_t *)&h->poll, (uv_handle_t *)&h->timer,
    (uv_handle_t *)&h->sweep, (uv_handle_t *)&h->keepalive, (uv_handle_t *)&h->grace,
    (uv_handle_t *)&h->sigint, (uv_handle_t *)&h->sigterm };
  for (size_t k = 0; k < sizeof hs / sizeof hs[0]; k++) {
    hs[k]->data = h;
    uv_close(hs[k], handle_closed);
  }
}

static void http_stop (void *ud) { (void)ud; }  /* connections are closed by http_free */

void tp__mcp_http_transport (tp__mcp_http *h, tp__mcp_transport *t) {
  memset(t, 0, sizeof *t);
  t->ud = h;
  t->emit = http_emit;
  t->hold = http_hold;
  t->release = http_release;
  t->principal = http_principal;
  t->traceparent = http_traceparent;
  t->streams = http_streams;
  t->serve = http_serve;
  t->stop = http_stop;
  t->free = http_free;
}
