/*
** http.c: HTTP for plugins and scripts, on libcurl's multi-socket interface driven by the
** engine's libuv loop (one multi handle per engine, made on first use, closed by
** tp_engine_destroy through tp__http_close), under the egress policy of the config's
** "http" section.
**
** The Lua API, in the host state only: local http = require("tidepool.http")
**
**   local req = http.request(opts, on_done)
**     opts.url         "http://..." or "https://..." (required; no other scheme)
**     opts.method      "GET" (default), "POST", "PUT", "PATCH", "DELETE", "HEAD", ...
**     opts.headers     { ["Name"] = "value", ... } (no CR, LF or NUL in them)
**     opts.body        string, sent as is (307/308 redirects send it again)
**     opts.timeout_ms  the whole request's time cap, redirects included (default: the
**                      config's http.timeout_ms, else 30000); 0 means none (trusted only)
**     opts.max_bytes   the most body bytes kept (or streamed): past it the transfer stops
**                      and the result says truncated = true (default: http.max_bytes, else
**                      10 MiB; with on_data and no max_bytes: no cap)
**     opts.on_data     function(chunk): the body as it comes, chunk by chunk (the result's
**                      body is then ""); chunks of a redirect's body are not given
**     opts.on_headers  function(status, headers): the final response's status and headers
**                      (as in the result) as soon as they have come, before its first
**                      chunk: a stream (text/event-stream) can be told from a JSON body
**     opts.trusted     true: skip the egress policy (allow, allow_private, inject), for
**                      endpoints the config itself names (an upstream MCP server's url).
**                      ctx.http and the http.fetch tool never set it.
**   on_done(result, nil) or on_done(nil, err), called once, always later (never from
**   inside http.request), and never after req:cancel():
**     result = { status = 200, headers = { ["content-type"] = "...", ... } (names in
**                lower case, repeated headers joined with ", "), body = "...",
**                truncated = false, url = "the final URL, after redirects" }
**     err    = { code = "tool.failed" | "tool.timeout" | "tool.denied", message = "..." }
**   req:cancel()       stops the request; on_done is not called. req:close() is the same
**                      and req:is_closing() is true once it finished or was cancelled, so
**                      ctx.track(req) cancels it when the call ends.
**   http.check_config() -> true | nil, message: the "http" section compiles (inject's
**                      env: variables are read here); tools/http.lua calls it at load.
**   Bad arguments (opts not a table, no url, a header that is not a string) raise.
**
** Egress policy (not for trusted requests): the URL's host must match an http.allow
** entry (a host glob, fnmatch(3) without case, or {host, methods}); every redirect is
** followed here, one hop at a time (at most 10), and its target checked again; the
** address a connection goes to is checked when the socket is opened (after DNS, so a
** public name resolving to a private address is caught) and again before each request
** (a reused connection): loopback, private, CGNAT, link-local, unique-local, multicast,
** unspecified and reserved addresses (IPv4-mapped, -compatible and NAT64 forms
** included) are refused unless an http.allow_private CIDR holds them. http.inject adds
** headers to requests whose host matches (replacing a script's header of that name);
** their values never leave this file. Proxies from the environment are not used.
**
** No Lua runs inside a libcurl callback: those only fill buffers and flags. After each
** curl_multi_socket_action, pump() hands data and outcomes to Lua; a request cancelled
** meanwhile is freed when pump() is done with it.
*/
#include <arpa/inet.h>
#include <ctype.h>
#include <fnmatch.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <jansson.h>
#include <uv.h>

#include "util.h"
#include "curl_dl.h"
#include "lauxlib.h"

#include "engine.h"
#include "host.h"
#include "trace.h"

#define REQ_META "tidepool.http.request"
#define MAX_HOPS 10
#define DEFAULT_TIMEOUT_MS 30000
#define DEFAULT_MAX_BYTES ((int64_t)10 << 20)
#define HEADERS_CAP (256u << 10)  /* response header bytes kept, at most */
#define NO_CAP INT64_MAX

/* ---- the policy, compiled from the config's "http" section ---------------------------- */

typedef struct cidr { int v6; unsigned char a[16]; int bits; } cidr;
typedef struct injected { const char *glob, *name; char *value; } injected;

typedef struct policy {
  json_t *section;         /* the section compiled (a reference), or NULL: none given */
  int compiled;            /* compile() ran for section */
  char *error;             /* what is wrong with the section, or NULL */
  const json_t *allow;     /* the array (in section) */
  cidr *priv;
  size_t npriv;
  injected *inj;
  size_t ninj;
  int64_t timeout_ms, max_bytes;
  const char *ca_file;
  struct curl_slist *resolve;
} policy;

/* ---- requests and the engine's multi handle -------------------------------------------- */

typedef struct buf { char *p; size_t len, cap; } buf;

typedef struct tp_http tp_http;

typedef struct req_box { struct req *r; } req_box;  /* the Lua handle */

typedef struct req {
  tp_http *hs;
  struct req *prev, *next;   /* in hs->reqs */
  CURL *easy;                /* while a hop is in the multi handle */
  struct curl_slist *hdrs;
  req_box *box;              /* the Lua handle, until collected */
  int ref_done, ref_data, ref_heads; /* on_done, on_data, on_headers in H's registry */
  int heads_done;            /* 1: the final response's headers are in; 2: told */
  char *method, *url, *first_url;
  char **hnames, **hvalues;  /* the caller's headers */
  size_t nh;
  char *body;
  size_t body_len;
  int trusted, hops;
  uint64_t deadline_ms;      /* uv_hrtime()/1e6 based; 0: none */
  int64_t timeout_ms, max_bytes, received;
  buf data;                  /* the body kept, or the chunks not yet given to on_data */
  buf heads;                 /* the response's header lines */
  long status;               /* of the last status line seen */
  int has_location, truncated, headers_over;
  int finished;              /* 1: outcome ready for on_done; 2: given or cancelled */
  int paused;                /* on_body paused the transfer: on_data has not taken enough */
  int dead;                  /* cancelled or delivered: freed when pump() is done */
  const char *code;          /* outcome: NULL for success, else a tool.* code */
  char msg[768];
  char denied[512];          /* set by the address check inside curl */
  char errbuf[CURL_ERROR_SIZE];
  char traceparent[TP__TRACEPARENT_LEN + 1]; /* opts.traceparent: sent on, and the parent
                             ** of the request's span; "" when none */
  uint64_t start_ns;
} req;

typedef struct sock_ctx { uv_poll_t poll; curl_socket_t fd; tp_http *hs; } sock_ctx;

struct tp_http {
  tp_engine *e;
  CURLM *multi;
  uv_timer_t *timer;         /* curl's timeout */
  uv_async_t *nudge;         /* pump() soon, from the loop's I/O phase (see on_nudge) */
  req *reqs;                 /* every request not yet freed */
  int pumping;
  policy pol;
};

static tp_http closed_state;  /* e->http once tp__http_close ran */

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc = CURLE_FAILED_INIT;
static int curl_async_dns;  /* libcurl resolves names off the loop's thread */
static void curl_init (void) {
  curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
  const curl_version_info_data *v = curl_version_info(CURLVERSION_NOW);
  curl_async_dns = v != NULL && (v->features & CURL_VERSION_ASYNCHDNS) != 0;
}

/* ---- small helpers --------------------------------------------------------------------- */

static uint64_t now_ms (void) { return uv_hrtime() / 1000000u; }

static int buf_add (buf *b, const char *p, size_t n) {
  if (n == 0) return 0;
  if (n > SIZE_MAX - b->len || tp__grow(&b->p, &b->cap, b->len + n, 1, 1024) != 0) return -1;
  memcpy(b->p + b->len, p, n);
  b->len += n;
  return 0;
}

static void buf_free (buf *b) { free(b->p); b->p = NULL; b->len = b->cap = 0; }

static void set_outcome (req *r, const char *code, const char *fmt, ...)
  __attribute__((format(printf, 3, 4)));
static void set_outcome (req *r, const char *code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(r->msg, sizeof r->msg, fmt, ap);
  va_end(ap);
  r->code = code;
}

/* ---- addresses ------------------------------------------------------------------------- */

static int parse_cidr (const char *s, cidr *c) {
  char tmp[64];
  const char *slash = strchr(s, '/');
  size_t n = slash ? (size_t)(slash - s) : strlen(s);
  if (n == 0 || n >= sizeof tmp) return -1;
  memcpy(tmp, s, n);
  tmp[n] = '\0';
  memset(c, 0, sizeof *c);
  if (inet_pton(AF_INET, tmp, c->a) == 1) c->v6 = 0;
  else if (inet_pton(AF_INET6, tmp, c->a) == 1) c->v6 = 1;
  else return -1;
  int max = c->v6 ? 128 : 32;
  if (slash) {
    char *end;
    long bits = strtol(slash + 1, &end, 10);
    if (slash[1] == '\0' || *end != '\0' || bits < 0 || bits > max) return -1;
    c->bits = (int)bits;
  } else {
    c->bits = max;
  }
  return 0;
}

static int in_prefix (const unsigned char *a, const unsigned char *net, int bits) {
  int full = bits / 8, rest = bits % 8;
  if (memcmp(a, net, (size_t)full) != 0) return 0;
  if (rest == 0) return 1;
  unsigned char mask = (unsigned char)(0xff << (8 - rest));
  return (a[full] & mask) == (net[full] & mask);
}

static int in_cidrs (const policy *p, int v6, const unsigned char *a) {
  for (size_t i = 0; i < p->npriv; i++)
    if (p->priv[i].v6 == v6 && in_prefix(a, p->priv[i].a, p->priv[i].bits)) return 1;
  return 0;
}

/* What kind of non-public IPv4 address a is, or NULL for a public one. */
static const char *v4_kind (const unsigned char *a) {
  if (a[0] == 0) return "an unspecified (0.0.0.0/8)";
  if (a[0] == 127) return "a loopback";
  if (a[0] == 10 || (a[0] == 172 && (a[1] & 0xf0) == 16) || (a[0] == 192 && a[1] == 168))
    return "a private";
  if (a[0] == 100 && (a[1] & 0xc0) == 64) return "a carrier-grade NAT (100.64.0.0/10)";
  if (a[0] == 169 && a[1] == 254) return "a link-local";
  if (a[0] == 192 && a[1] == 0 && a[2] == 0) return "a reserved (192.0.0.0/24)";
  if (a[0] == 198 && (a[1] & 0xfe) == 18) return "a reserved (198.18.0.0/15)";
  if (a[0] >= 224 && a[0] < 240) return "a multicast";
  if (a[0] >= 240) return "a reserved (240.0.0.0/4)";
  return NULL;
}

/* The verdict on an address curl is about to use: 0 allowed, or 1 with *kind set. */
static int addr_refused (const policy *p, int v6, const unsigned char *a, const char **kind) {
  if (!v6) {
    *kind = v4_kind(a);
    return *kind != NULL && !in_cidrs(p, 0, a);
  }
  static const unsigned char mapped[12] = { 0,0,0,0,0,0,0,0,0,0,0xff,0xff };
  static const unsigned char nat64[12] = { 0,0x64,0xff,0x9b,0,0,0,0,0,0,0,0 };
  static const unsigned char zero[16] = { 0 };
  const unsigned char *v4 = NULL;
  if (memcmp(a, mapped, 12) == 0 || memcmp(a, nat64, 12) == 0) v4 = a + 12;
  else if (memcmp(a, zero, 12) == 0 && memcmp(a, zero, 16) != 0 &&
           !(memcmp(a, zero, 15) == 0 && a[15] == 1)) v4 = a + 12;  /* ::a.b.c.d */
  if (v4) {
    const char *k = v4_kind(v4);
    if (k == NULL || in_cidrs(p, 1, a) || in_cidrs(p, 0, v4)) { *kind = NULL; return 0; }
    *kind = k;
    return 1;
  }
  if (memcmp(a, zero, 16) == 0) *kind = "an unspecified (::)";
  else if (memcmp(a, zero, 15) == 0 && a[15] == 1) *kind = "a loopback";
  else if ((a[0] & 0xfe) == 0xfc) *kind = "a unique-local (fc00::/7)";
  else if (a[0] == 0xfe && (a[1] & 0xc0) == 0x80) *kind = "a link-local";
  else if (a[0] == 0xfe && (a[1] & 0xc0) == 0xc0) *kind = "a site-local (fec0::/10)";
  else if (a[0] == 0xff) *kind = "a multicast";
  else *kind = NULL;
  return *kind != NULL && !in_cidrs(p, 1, a);
}

/* Checks the address text of a connection for r; 0 or -1 with r->denied set. */
static int check_addr (req *r, int v6, const unsigned char *a) {
  const char *kind;
  if (r->trusted || !addr_refused(&r->hs->pol, v6, a, &kind)) return 0;
  char text[INET6_ADDRSTRLEN];
  inet_ntop(v6 ? AF_INET6 : AF_INET, a, text, sizeof text);
  CURLU *u = curl_url();
  char *host = NULL;
  if (u && curl_url_set(u, CURLUPART_URL, r->url, 0) == CURLUE_OK)
    curl_url_get(u, CURLUPART_HOST, &host, 0);
  snprintf(r->denied, sizeof r->denied, "%s resolved to %s, %s address; add it to "
           "http.allow_private to allow it", host ? host : r->url, text, kind);
  curl_free(host);
  curl_url_cleanup(u);
  return -1;
}

static curl_socket_t open_socket (void *ud, curlsocktype purpose,
                                  struct curl_sockaddr *sa) {
  req *r = ud;
  (void)purpose;
  const struct sockaddr *s = &sa->addr;
  if (s->sa_family == AF_INET) {
    struct sockaddr_in in4;
    memcpy(&in4, s, sizeof in4);
    if (check_addr(r, 0, (const unsigned char *)&in4.sin_addr) != 0) return CURL_SOCKET_BAD;
  } else if (s->sa_family == AF_INET6) {
    struct sockaddr_in6 in6;
    memcpy(&in6, s, sizeof in6);
    if (check_addr(r, 1, in6.sin6_addr.s6_addr) != 0) return CURL_SOCKET_BAD;
  } else if (!r->trusted) {
    snprintf(r->denied, sizeof r->denied, "%s: only IPv4 and IPv6 connections are allowed",
             r->url);
    return CURL_SOCKET_BAD;
  }
  return socket(sa->family, sa->socktype | SOCK_CLOEXEC, sa->protocol);
}

/* Before each request, on a new or a reused connection. */
static int prereq (void *ud, char *ip, char *local_ip, int port, int local_port) {
  req *r = ud;
  (void)local_ip; (void)port; (void)local_port;
  if (r->trusted) return CURL_PREREQFUNC_OK;
  unsigned char a[16];
  int v6 = strchr(ip, ':') != NULL;
  if (inet_pton(v6 ? AF_INET6 : AF_INET, ip, a) != 1) {
    snprintf(r->denied, sizeof r->denied, "%s: the connection's address (%s) cannot be "
             "checked", r->url, ip);
    return CURL_PREREQFUNC_ABORT;
  }
  return check_addr(r, v6, a) == 0 ? CURL_PREREQFUNC_OK : CURL_PREREQFUNC_ABORT;
}

/* ---- compiling the policy -------------------------------------------------------------- */

static void policy_clear (policy *p) {
  for (size_t i = 0; i < p->ninj; i++) free(p->inj[i].value);
  free(p->inj);
  free(p->priv);
  free(p->error);
  curl_slist_free_all(p->resolve);
  json_decref(p->section);
  memset(p, 0, sizeof *p);
}

static int fail_cfg (policy *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail_cfg (policy *p, const char *fmt, ...) {
  char m[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(m, sizeof m, fmt, ap);
  va_end(ap);
  free(p->error);
  p->error = strdup(m);
  return -1;
}

static int is_token (const char *s) {
  if (*s == '\0') return 0;
  for (; *s; s++)
    if (!isalnum((unsigned char)*s) && !strchr("!#$%&'*+-.^_`|~", *s)) return 0;
  return 1;
}

static int compile (policy *p, const json_t *sec) {
  static const char *const fields[] = { "allow", "allow_private", "inject", "timeout_ms",
                                        "max_bytes", "ca_file", "resolve", NULL };
  p->timeout_ms = DEFAULT_TIMEOUT_MS;
  p->max_bytes = DEFAULT_MAX_BYTES;
  if (sec == NULL) return 0;
  if (!json_is_object(sec)) return fail_cfg(p, "/http: expected an object");
  const char *key;
  json_t *v;
  json_object_foreach((json_t *)sec, key, v) {
    int known = 0;
    for (const char *const *f = fields; *f; f++) known |= strcmp(*f, key) == 0;
    if (!known)
      return fail_cfg(p, "/http: unknown field '%s' (the fields are allow, "
                      "allow_private, inject, timeout_ms, max_bytes)", key);
  }
  if ((v = json_object_get(sec, "allow")) != NULL) {
    if (!json_is_array(v)) return fail_cfg(p, "/http/allow: expected an array");
    size_t i;
    json_t *a;
    json_array_foreach(v, i, a) {
      const json_t *h = json_is_object(a) ? json_object_get(a, "host") : a;
      if (!json_is_string(h) || json_string_length(h) == 0)
        return fail_cfg(p, "/http/allow/%zu: expected a host glob (\"api.x.com\", "
                        "\"*.x.com\") or {\"host\": ..., \"methods\": [\"GET\"]}", i);
      const json_t *ms = json_is_object(a) ? json_object_get(a, "methods") : NULL;
      if (ms != NULL) {
        size_t j;
        json_t *m;
        if (!json_is_array(ms)) return fail_cfg(p, "/http/allow/%zu/methods: "
                                                "expected an array of method names", i);
        json_array_foreach(ms, j, m)
          if (!json_is_string(m) || !is_token(json_string_value(m)))
            return fail_cfg(p, "/http/allow/%zu/methods/%zu: expected a method "
                            "name such as \"GET\"", i, j);
      }
    }
    p->allow = v;
  }
  if ((v = json_object_get(sec, "allow_private")) != NULL) {
    if (!json_is_array(v)) return fail_cfg(p, "/http/allow_private: expected an "
                                           "array of CIDRs such as \"10.0.0.0/8\"");
    p->priv = calloc(json_array_size(v) + 1, sizeof *p->priv);
    if (p->priv == NULL) return fail_cfg(p, "/http: out of memory");
    size_t i;
    json_t *a;
    json_array_foreach(v, i, a) {
      if (!json_is_string(a) || parse_cidr(json_string_value(a), &p->priv[i]) != 0)
        return fail_cfg(p, "/http/allow_private/%zu: expected a CIDR such as "
                        "\"10.0.0.0/8\" or \"::1/128\"", i);
      p->npriv++;
    }
  }
  if ((v = json_object_get(sec, "inject")) != NULL) {
    if (!json_is_object(v)) return fail_cfg(p, "/http/inject: expected an object "
                                            "{\"host glob\": {\"Header\": \"env:NAME\"}}");
    size_t n = 0;
    const char *host;
    json_t *hs;
    json_object_foreach(v, host, hs) {
      if (!json_is_object(hs)) return fail_cfg(p, "/http/inject/%s: expected an "
                                               "object of headers", host);
      n += json_object_size(hs);
    }
    p->inj = calloc(n + 1, sizeof *p->inj);
    if (p->inj == NULL) return fail_cfg(p, "/http: out of memory");
    json_object_foreach(v, host, hs) {
      const char *name;
      json_t *val;
      json_object_foreach(hs, name, val) {
        const char *s = json_string_value(val);
        if (!is_token(name) || s == NULL)
          return fail_cfg(p, "/http/inject/%s: expected header names mapped "
                          "to strings (\"env:NAME\" reads the environment)", host);
        if (strncmp(s, "env:", 4) == 0) {
          s = getenv(s + 4);
          if (s == NULL)
            return fail_cfg(p, "/http/inject/%s/%s: the environment variable %s is not "
                            "set", host, name, json_string_value(val) + 4);
        }
        if (strpbrk(s, "\r\n") != NULL)
          return fail_cfg(p, "/http/inject/%s/%s: the value has a line "
                          "break", host, name);
        injected *in = &p->inj[p->ninj];
        in->glob = host;
        in->name = name;
        if ((in->value = strdup(s)) == NULL) return fail_cfg(p, "/http: out of memory");
        p->ninj++;
      }
    }
  }
  if ((v = json_object_get(sec, "timeout_ms")) != NULL) {
    if (!json_is_number(v) || json_number_value(v) < 1)
      return fail_cfg(p, "/http/timeout_ms: expected a number of milliseconds >= 1");
    p->timeout_ms = (int64_t)json_number_value(v);
  }
  if ((v = json_object_get(sec, "max_bytes")) != NULL) {
    if (!json_is_integer(v) || json_integer_value(v) < 0)
      return fail_cfg(p, "/http/max_bytes: expected an integer >= 0");
    p->max_bytes = json_integer_value(v);
  }
  if ((v = json_object_get(sec, "ca_file")) != NULL) {
    if (!json_is_string(v)) return fail_cfg(p, "/http/ca_file: expected a file path");
    p->ca_file = json_string_value(v);
  }
  if ((v = json_object_get(sec, "resolve")) != NULL) {
    size_t i;
    json_t *a;
    if (!json_is_array(v)) return fail_cfg(p, "/http/resolve: expected an array of "
                                           "\"host:port:address\"");
    json_array_foreach(v, i, a) {
      struct curl_slist *l = json_is_string(a) ?
        curl_slist_append(p->resolve, json_string_value(a)) : NULL;
      if (l == NULL) return fail_cfg(p, "/http/resolve/%zu: expected "
                                     "\"host:port:address\"", i);
      p->resolve = l;
    }
  }
  return 0;
}

/* Brings hs->pol up to the engine's current "http" section; 0, or -1 (pol.error). */
static int policy_sync (tp_http *hs) {
  const json_t *sec = tp__config_section(hs->e, "http");
  policy *p = &hs->pol;
  if (p->compiled && p->section == sec) return p->error ? -1 : 0;
  policy_clear(p);
  p->section = json_incref((json_t *)sec);
  p->compiled = 1;
  if (compile(p, sec) != 0) {
    char *keep = p->error;
    json_t *s = p->section;
    p->error = NULL;
    p->section = NULL;
    policy_clear(p);
    p->section = s;
    p->compiled = 1;
    p->error = keep;
    p->timeout_ms = DEFAULT_TIMEOUT_MS;  /* what trusted requests still get */
    p->max_bytes = DEFAULT_MAX_BYTES;
    return -1;
  }
  return 0;
}

/* ---- the policy's decisions ------------------------------------------------------------ */

static int host_match (const char *glob, const char *host) {
  return fnmatch(glob, host, FNM_CASEFOLD) == 0;
}

/* scheme and host of url, lower case, host without brackets; 0, or -1 with why set. */
static int url_parts (const char *url, char *scheme, size_t slen, char *host, size_t hlen,
                      long *port, char *why, size_t wlen) {
  CURLU *u = curl_url();
  if (u == NULL) { snprintf(why, wlen, "out of memory"); return -1; }
  char *s = NULL, *h = NULL, *p = NULL;
  int rc = -1;
  CURLUcode uc = curl_url_set(u, CURLUPART_URL, url, CURLU_NON_SUPPORT_SCHEME);
  if (uc != CURLUE_OK) {
    snprintf(why, wlen, "'%s' is not a valid URL (%s); expected http://host/path or "
             "https://host/path", url, curl_url_strerror(uc));
  } else if (curl_url_get(u, CURLUPART_SCHEME, &s, 0) != CURLUE_OK ||
             curl_url_get(u, CURLUPART_HOST, &h, 0) != CURLUE_OK || h[0] == '\0') {
    snprintf(why, wlen, "'%s' has no host; expected http://host/path", url);
  } else {
    snprintf(scheme, slen, "%s", s);
    size_t n = strlen(h);
    if (n >= 2 && h[0] == '[' && h[n - 1] == ']') snprintf(host, hlen, "%.*s", (int)n - 2, h + 1);
    else snprintf(host, hlen, "%s", h);
    for (char *c = scheme; *c; c++) *c = (char)tolower((unsigned char)*c);
    for (char *c = host; *c; c++) *c = (char)tolower((unsigned char)*c);
    *port = 0;
    if (curl_url_get(u, CURLUPART_PORT, &p, CURLU_DEFAULT_PORT) == CURLUE_OK && p)
      *port = strtol(p, NULL, 10);
    rc = 0;
  }
  curl_free(s);
  curl_free(h);
  curl_free(p);
  curl_url_cleanup(u);
  return rc;
}

/* Is scheme (lower case) refused? 1 with the outcome set, else 0. */
static int scheme_refused (req *r, const char *url, const char *scheme) {
  if (strcmp(scheme, "http") == 0 || strcmp(scheme, "https") == 0) return 0;
  set_outcome(r, "tool.denied", "%s %s: only http:// and https:// URLs are allowed, not "
              "%s://", r->method, url, scheme);
  return 1;
}

/* May r send its method to url? 0, or -1 with the outcome set. */
static int allowed (req *r, const char *url, const char *host, const char *scheme) {
  if (scheme_refused(r, url, scheme)) return -1;
  if (r->trusted) return 0;
  const policy *p = &r->hs->pol;
  int host_seen = 0;
  char methods[256] = "";
  size_t i;
  json_t *a;
  if (p->allow) json_array_foreach(p->allow, i, a) {
    const json_t *h = json_is_object(a) ? json_object_get(a, "host") : a;
    if (!host_match(json_string_value(h), host)) continue;
    const json_t *ms = json_is_object(a) ? json_object_get(a, "methods") : NULL;
    if (ms == NULL) return 0;
    host_seen = 1;
    size_t j;
    json_t *m;
    json_array_foreach(ms, j, m) {
      const char *name = json_string_value(m);
      if (strcasecmp(name, r->method) == 0) return 0;
      size_t len = strlen(methods);
      snprintf(methods + len, sizeof methods - len, "%s%s", len ? ", " : "", name);
    }
  }
  if (host_seen)
    set_outcome(r, "tool.denied", "%s %s: http.allow allows %s only for %s, not %s",
                r->method, url, host, methods, r->method);
  else if (p->section == NULL)
    set_outcome(r, "tool.denied", "%s %s: no http.allow entry matches %s (the config has "
                "no \"http\" section, so no host is allowed)", r->method, url, host);
  else
    set_outcome(r, "tool.denied", "%s %s: no http.allow entry matches %s", r->method, url,
                host);
  return -1;
}

/* ---- the multi handle on the loop -------------------------------------------------------- */

static int pump (tp_http *hs);

static void free_poll (uv_handle_t *h) { free(h->data); }

static void on_poll (uv_poll_t *h, int status, int events) {
  sock_ctx *sc = h->data;
  tp_http *hs = sc->hs;
  int flags = 0;
  if (status < 0) flags = CURL_CSELECT_ERR;
  if (events & UV_READABLE) flags |= CURL_CSELECT_IN;
  if (events & UV_WRITABLE) flags |= CURL_CSELECT_OUT;
  int running;
  curl_multi_socket_action(hs->multi, sc->fd, flags, &running);
  pump(hs);
}

static int on_socket (CURL *easy, curl_socket_t fd, int what, void *ud, void *sockp) {
  tp_http *hs = ud;
  sock_ctx *sc = sockp;
  (void)easy;
  if (what == CURL_POLL_REMOVE) {
    if (sc) {
      uv_poll_stop(&sc->poll);
      uv_close((uv_handle_t *)&sc->poll, free_poll);
      curl_multi_assign(hs->multi, fd, NULL);
    }
    return 0;
  }
  if (sc == NULL) {
    sc = calloc(1, sizeof *sc);
    if (sc == NULL) return -1;
    if (uv_poll_init_socket(hs->e->loop, &sc->poll, fd) != 0) { free(sc); return -1; }
    sc->fd = fd;
    sc->hs = hs;
    sc->poll.data = sc;
    curl_multi_assign(hs->multi, fd, sc);
  }
  int ev = (what == CURL_POLL_IN ? UV_READABLE : what == CURL_POLL_OUT ? UV_WRITABLE
            : UV_READABLE | UV_WRITABLE);
  return uv_poll_start(&sc->poll, ev, on_poll) == 0 ? 0 : -1;
}

/* A call completed by a timer that fires before the loop polls (a due timer at the start
** of uv_run) would leave a uv_run(UV_RUN_ONCE) blocked in the poll that follows, until
** some later event: the driver waits on the loop that way. So outcomes are delivered
** from an async handle's callback (the poll's phase), or followed by a nudge. */
static void nudge (tp_http *hs) {
  uv_ref((uv_handle_t *)hs->nudge);
  uv_async_send(hs->nudge);
}

static void on_timeout (uv_timer_t *t) {
  tp_http *hs = t->data;
  int running;
  curl_multi_socket_action(hs->multi, CURL_SOCKET_TIMEOUT, 0, &running);
  if (pump(hs)) nudge(hs);
}

static int on_timer (CURLM *multi, long ms, void *ud) {
  tp_http *hs = ud;
  (void)multi;
  if (ms < 0) uv_timer_stop(hs->timer);
  else uv_timer_start(hs->timer, on_timeout, (uint64_t)ms, 0);
  return 0;
}

static void on_nudge (uv_async_t *a) {
  uv_unref((uv_handle_t *)a);  /* kept alive only while a nudge is pending */
  pump(a->data);
}

static tp_http *http_state (tp_engine *e, char *why, size_t wlen) {
  if (e->http == &closed_state) { snprintf(why, wlen, "the engine is closing"); return NULL; }
  if (e->http) return e->http;
  char lw[400];
  if (tp__curl_load(lw, sizeof lw) != 0) {  /* libcurl is opened on the first request */
    snprintf(why, wlen, "http.unavailable: %.*s", (int)(wlen > 40 ? wlen - 40 : 0), lw);
    return NULL;
  }
  pthread_once(&curl_once, curl_init);
  if (curl_init_rc != CURLE_OK) {
    snprintf(why, wlen, "libcurl cannot start: %s", curl_easy_strerror(curl_init_rc));
    return NULL;
  }
  if (!curl_async_dns) {  /* a blocking resolver would stall every run of the engine */
    snprintf(why, wlen, "this libcurl resolves host names synchronously (built without "
             "the threaded resolver or c-ares): HTTP is off");
    return NULL;
  }
  tp_http *hs = calloc(1, sizeof *hs);
  if (hs == NULL) { snprintf(why, wlen, "out of memory"); return NULL; }
  hs->e = e;
  hs->timer = malloc(sizeof *hs->timer);
  hs->nudge = malloc(sizeof *hs->nudge);
  hs->multi = curl_multi_init();
  if (hs->timer == NULL || hs->nudge == NULL || hs->multi == NULL ||
      uv_async_init(e->loop, hs->nudge, on_nudge) != 0) {
    free(hs->timer);
    free(hs->nudge);
    if (hs->multi) curl_multi_cleanup(hs->multi);
    free(hs);
    snprintf(why, wlen, "out of memory");
    return NULL;
  }
  uv_timer_init(e->loop, hs->timer);
  uv_unref((uv_handle_t *)hs->nudge);
  hs->timer->data = hs->nudge->data = hs;
  curl_multi_setopt(hs->multi, CURLMOPT_SOCKETFUNCTION, on_socket);
  curl_multi_setopt(hs->multi, CURLMOPT_SOCKETDATA, hs);
  curl_multi_setopt(hs->multi, CURLMOPT_TIMERFUNCTION, on_timer);
  curl_multi_setopt(hs->multi, CURLMOPT_TIMERDATA, hs);
  e->http = hs;
  return hs;
}

/* ---- one hop of a request ------------------------------------------------------------- */

static int is_redirect (long s) {
  return s == 301 || s == 302 || s == 303 || s == 307 || s == 308;
}

/* A streamed body (on_data) is held here at most this long before on_data takes it: past
** it the transfer pauses until pump() has handed it over (one socket action may read
** megabytes from a fast server; 32 of them at once reached 261 MB before on_data, and the
** run's budget, saw any). */
#define STREAM_HELD (256u << 10)

static size_t on_body (char *p, size_t size, size_t n, void *ud) {
  req *r = ud;
  size_t len = size * n;
  if (is_redirect(r->status) && r->has_location) return len;  /* followed: body dropped */
  if (r->ref_data != LUA_NOREF && r->data.len > 0 && r->data.len + len > STREAM_HELD) {
    r->paused = 1;
    return CURL_WRITEFUNC_PAUSE;  /* curl keeps this chunk and gives it again */
  }
  size_t keep = len;
  if (r->max_bytes != NO_CAP && r->received + (int64_t)len > r->max_bytes) {
    keep = (size_t)(r->max_bytes - r->received);
    r->truncated = 1;
  }
  if (buf_add(&r->data, p, keep) != 0) {
    set_outcome(r, "tool.failed", "%s %s: out of memory for the response body", r->method,
                r->url);
    return 0;
  }
  r->received += (int64_t)keep;
  return r->truncated ? 0 : len;
}

static size_t on_header (char *p, size_t size, size_t n, void *ud) {
  req *r = ud;
  size_t len = size * n;
  if (len >= 5 && memcmp(p, "HTTP/", 5) == 0) {  /* a new response (1xx, then the real one) */
    r->heads.len = 0;
    r->has_location = 0;
    const char *sp = memchr(p, ' ', len);
    r->status = sp ? strtol(sp + 1, NULL, 10) : 0;
    return len;
  }
  if (len >= 9 && strncasecmp(p, "location:", 9) == 0) r->has_location = 1;
  if ((len == 2 && p[0] == '\r') || (len == 1 && p[0] == '\n')) {  /* end of headers */
    if (r->status >= 200 && !(is_redirect(r->status) && r->has_location) && !r->heads_done)
      r->heads_done = 1;
    return len;
  }
  if (r->heads.len + len > HEADERS_CAP) { r->headers_over = 1; return 0; }
  if (buf_add(&r->heads, p, len) != 0) return 0;
  return len;
}

static int same_origin (const char *a, const char *b) {
  char sa[16], sb[16], ha[256], hb[256], why[8];
  long pa, pb;
  if (url_parts(a, sa, sizeof sa, ha, sizeof ha, &pa, why, sizeof why) != 0 ||
      url_parts(b, sb, sizeof sb, hb, sizeof hb, &pb, why, sizeof why) != 0) return 0;
  return strcmp(sa, sb) == 0 && strcmp(ha, hb) == 0 && pa == pb;
}

/* Sets up and starts r's next hop (r->url, r->method); 0, or -1 with the outcome set. */
static int start_hop (req *r) {
  tp_http *hs = r->hs;
  char scheme[32], host[256];
  long port;
  const char *sep = strstr(r->url, "://");
  size_t slen = sep ? (size_t)(sep - r->url) : 0;
  if (slen > 0 && slen < sizeof scheme) {  /* the scheme first: file:/// has no host */
    for (size_t i = 0; i < slen; i++) scheme[i] = (char)tolower((unsigned char)r->url[i]);
    scheme[slen] = '\0';
    if (scheme_refused(r, r->url, scheme)) return -1;
  }
  if (url_parts(r->url, scheme, sizeof scheme, host, sizeof host, &port, r->msg,
                sizeof r->msg) != 0) {
    r->code = "tool.failed";
    return -1;
  }
  if (allowed(r, r->url, host, scheme) != 0) return -1;
  int64_t left = 0;
  if (r->deadline_ms) {
    uint64_t now = now_ms();
    if (now >= r->deadline_ms) {
      set_outcome(r, "tool.timeout", "%s %s: no answer within %lld ms (timeout_ms)",
                  r->method, r->url, (long long)r->timeout_ms);
      return -1;
    }
    left = (int64_t)(r->deadline_ms - now);
  }
  if (r->easy == NULL && (r->easy = curl_easy_init()) == NULL) {
    set_outcome(r, "tool.failed", "%s %s: out of memory", r->method, r->url);
    return -1;
  }
  CURL *c = r->easy;
  curl_easy_reset(c);
  curl_slist_free_all(r->hdrs);
  r->hdrs = NULL;
  /* the caller's headers, less those inject replaces, less credentials on a hop to
  ** another origin; then inject's */
  int cross = r->hops > 0 && !same_origin(r->first_url, r->url);
  const policy *p = &hs->pol;
  for (size_t i = 0; i < r->nh; i++) {
    const char *name = r->hnames[i];
    int drop = cross && (strcasecmp(name, "authorization") == 0 ||
                         strcasecmp(name, "cookie") == 0 ||
                         strcasecmp(name, "proxy-authorization") == 0);
    if (!r->trusted)
      for (size_t k = 0; k < p->ninj && !drop; k++)
        drop = host_match(p->inj[k].glob, host) && strcasecmp(p->inj[k].name, name) == 0;
    if (drop) continue;
    char line[8192];
    if (r->hvalues[i][0] == '\0') snprintf(line, sizeof line, "%s;", name);
    else snprintf(line, sizeof line, "%s: %s", name, r->hvalues[i]);
    struct curl_slist *l = curl_slist_append(r->hdrs, line);
    if (l == NULL) goto nomem;
    r->hdrs = l;
  }
  if (r->traceparent[0]) {  /* the call's span, unless the caller set one of its own */
    int own = 0;
    for (size_t i = 0; i < r->nh && !own; i++) own = strcasecmp(r->hnames[i], "traceparent") == 0;
    char line[TP__TRACEPARENT_LEN + 16];
    snprintf(line, sizeof line, "traceparent: %s", r->traceparent);
    struct curl_slist *l = own ? r->hdrs : curl_slist_append(r->hdrs, line);
    if (l == NULL) goto nomem;
    r->hdrs = l;
  }
  if (!r->trusted)
    for (size_t k = 0; k < p->ninj; k++) {
      if (!host_match(p->inj[k].glob, host)) continue;
      size_t n = strlen(p->inj[k].name) + strlen(p->inj[k].value) + 3;
      char *line = malloc(n);
      if (line == NULL) goto nomem;
      snprintf(line, n, "%s: %s", p->inj[k].name, p->inj[k].value);
      struct curl_slist *l = curl_slist_append(r->hdrs, line);
      memset(line, 0, n);
      free(line);
      if (l == NULL) goto nomem;
      r->hdrs = l;
    }
  curl_easy_setopt(c, CURLOPT_URL, r->url);
  curl_easy_setopt(c, CURLOPT_PRIVATE, r);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(c, CURLOPT_PROXY, "");
  curl_easy_setopt(c, CURLOPT_ACCEPT_ENCODING, "");
  curl_easy_setopt(c, CURLOPT_USERAGENT, "tidepool/" TP_VERSION);
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, r->errbuf);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, r);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, r);
  curl_easy_setopt(c, CURLOPT_OPENSOCKETFUNCTION, open_socket);
  curl_easy_setopt(c, CURLOPT_OPENSOCKETDATA, r);
  curl_easy_setopt(c, CURLOPT_PREREQFUNCTION, prereq);
  curl_easy_setopt(c, CURLOPT_PREREQDATA, r);
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, r->hdrs);
  if (left > 0) curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)left);
  if (p->ca_file) curl_easy_setopt(c, CURLOPT_CAINFO, p->ca_file);
  if (p->resolve) curl_easy_setopt(c, CURLOPT_RESOLVE, p->resolve);
  if (strcmp(r->method, "GET") == 0 && r->body == NULL) {
    curl_easy_setopt(c, CURLOPT_HTTPGET, 1L);
  } else if (strcmp(r->method, "HEAD") == 0) {
    curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
  } else {
    if (strcmp(r->method, "POST") != 0 || r->body == NULL)
      curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, r->method);
    if (r->body) {
      curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)r->body_len);
      curl_easy_setopt(c, CURLOPT_POSTFIELDS, r->body);
    }
  }
  r->status = 0;
  r->has_location = 0;
  r->errbuf[0] = '\0';
  r->denied[0] = '\0';
  r->heads.len = 0;
  if (curl_multi_add_handle(hs->multi, c) != CURLM_OK) goto nomem;
  return 0;
nomem:
  set_outcome(r, "tool.failed", "%s %s: out of memory", r->method, r->url);
  return -1;
}

/* Leaves the multi handle (never from inside a curl callback). */
static void stop_hop (req *r) {
  if (r->easy) {
    curl_multi_remove_handle(r->hs->multi, r->easy);
    curl_easy_cleanup(r->easy);
    r->easy = NULL;
  }
}

/* A hop ended with curl's result rc: finishes r, or starts its next hop. */
static void hop_done (req *r, CURLcode rc) {
  long status = 0;
  curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &status);
  if (r->code) {  /* set by a callback (out of memory) */
  } else if (r->denied[0]) {
    set_outcome(r, "tool.denied", "%s %s: %s", r->method, r->url, r->denied);
  } else if (rc == CURLE_OPERATION_TIMEDOUT) {
    set_outcome(r, "tool.timeout", "%s %s: no answer within %lld ms (timeout_ms)",
                r->method, r->url, (long long)r->timeout_ms);
  } else if (r->headers_over) {
    set_outcome(r, "tool.failed", "%s %s: the response's headers exceed %u KiB", r->method,
                r->url, HEADERS_CAP >> 10);
  } else if (rc == CURLE_WRITE_ERROR && r->truncated) {
    r->status = status;
  } else if (rc != CURLE_OK) {
    set_outcome(r, "tool.failed", "%s %s: %s%s%s", r->method, r->url, curl_easy_strerror(rc),
                r->errbuf[0] ? ": " : "", r->errbuf);
  } else {
    r->status = status;
    char *loc = NULL;
    if (is_redirect(status) && r->has_location &&
        curl_easy_getinfo(r->easy, CURLINFO_REDIRECT_URL, &loc) == CURLE_OK && loc) {
      if (r->hops >= MAX_HOPS) {
        set_outcome(r, "tool.failed", "%s %s: more than %d redirects", r->method,
                    r->first_url, MAX_HOPS);
      } else {
        char *next = strdup(loc), *from = r->url;
        if (next == NULL) {
          set_outcome(r, "tool.failed", "%s %s: out of memory", r->method, r->url);
        } else {
          stop_hop(r);
          r->url = next;
          r->hops++;
          if (status == 303 || ((status == 301 || status == 302) &&
                                strcmp(r->method, "POST") == 0)) {
            if (strcmp(r->method, "HEAD") != 0) {
              char *get = strdup("GET");
              if (get) { free(r->method); r->method = get; }
            }
            free(r->body);
            r->body = NULL;
            r->body_len = 0;
          }
          r->data.len = 0;
          r->received = 0;
          if (start_hop(r) == 0) { free(from); return; }
          if (r->code && strcmp(r->code, "tool.denied") == 0) {
            /* "METHOD url: why" of the hop -> the first URL, where it went, and why */
            char m[sizeof r->msg];
            size_t skip = strlen(r->method) + strlen(r->url) + 3;
            snprintf(m, sizeof m, "%s", strlen(r->msg) > skip ? r->msg + skip : r->msg);
            set_outcome(r, "tool.denied", "%s %s: its redirect to %s is refused: %s",
                        r->method, r->first_url, r->url, m);
          }
          free(from);
        }
      }
    }
  }
  stop_hop(r);
  r->finished = 1;
}

/* ---- Lua ------------------------------------------------------------------------------- */

static void free_req (req *r) {
  stop_hop(r);
  for (size_t i = 0; i < r->nh; i++) { free(r->hnames[i]); free(r->hvalues[i]); }
  free(r->hnames);
  free(r->hvalues);
  curl_slist_free_all(r->hdrs);
  free(r->method);
  free(r->url);
  free(r->first_url);
  free(r->body);
  buf_free(&r->data);
  buf_free(&r->heads);
  free(r);
}

/* Ends r for Lua: no callback of it runs any more. Freed now, or by pump() when running. */
static void retire (req *r, lua_State *H) {
  if (r->dead) return;
  r->dead = 1;
  stop_hop(r);
  if (r->box) { r->box->r = NULL; r->box = NULL; }
  if (H) {
    luaL_unref(H, LUA_REGISTRYINDEX, r->ref_done);
    luaL_unref(H, LUA_REGISTRYINDEX, r->ref_data);
    luaL_unref(H, LUA_REGISTRYINDEX, r->ref_heads);
  }
  r->ref_done = r->ref_data = r->ref_heads = LUA_NOREF;
  if (r->hs->pumping) return;
  if (r->prev) r->prev->next = r->next;
  else r->hs->reqs = r->next;
  if (r->next) r->next->prev = r->prev;
  free_req(r);
}

static void push_headers (lua_State *H, const buf *b) {
  lua_newtable(H);
  size_t i = 0;
  while (i < b->len) {
    const char *line = b->p + i;
    const char *nl = memchr(line, '\n', b->len - i);
    size_t n = nl ? (size_t)(nl - line) : b->len - i;
    i += n + 1;
    while (n > 0 && (line[n - 1] == '\r' || line[n - 1] == '\n')) n--;
    const char *colon = memchr(line, ':', n);
    if (colon == NULL || colon == line) continue;
    luaL_Buffer name;
    luaL_buffinit(H, &name);
    for (const char *c = line; c < colon; c++) luaL_addchar(&name, (char)tolower((unsigned char)*c));
    luaL_pushresult(&name);
    const char *v = colon + 1, *end = line + n;
    while (v < end && (*v == ' ' || *v == '\t')) v++;
    lua_pushvalue(H, -1);
    if (lua_rawget(H, -3) == LUA_TSTRING) {
      lua_pushliteral(H, ", ");
      lua_pushlstring(H, v, (size_t)(end - v));
      lua_concat(H, 3);
    } else {
      lua_pop(H, 1);
      lua_pushlstring(H, v, (size_t)(end - v));
    }
    lua_rawset(H, -3);
  }
}

/* deliver_p(r, what): pushes on_data and its chunk, or on_done and the outcome, and calls
** it through the host's callback runner (an error goes to the call owning the function). */
static int deliver_p (lua_State *H) {
  req *r = lua_touserdata(H, 1);
  int data = (int)lua_tointeger(H, 2);
  lua_settop(H, 0);
  if (data == 2) {
    lua_rawgeti(H, LUA_REGISTRYINDEX, r->ref_heads);
    lua_pushinteger(H, r->status);
    push_headers(H, &r->heads);
    tp__host_callback(H, 2);
    return 0;
  }
  if (data) {
    lua_rawgeti(H, LUA_REGISTRYINDEX, r->ref_data);
    lua_pushlstring(H, r->data.p ? r->data.p : "", r->data.len);
    r->data.len = 0;
    tp__host_callback(H, 1);
    return 0;
  }
  if (r->traceparent[0]) {  /* the request's span, under the call's: no path, no query */
    char scheme[16], host[256], why[64];
    long port = 0;
    json_t *a = json_object();
    if (a && url_parts(r->url, scheme, sizeof scheme, host, sizeof host, &port, why,
                       sizeof why) == 0) {
      json_object_set_new(a, "server.address", json_string(host));
      if (port > 0) json_object_set_new(a, "server.port", json_integer(port));
    }
    if (a) {
      json_object_set_new(a, "http.request.method", json_string(r->method));
      if (r->code == NULL) json_object_set_new(a, "http.response.status_code",
                                               json_integer(r->status));
    }
    char name[64];
    snprintf(name, sizeof name, "HTTP %.40s", r->method);
    tp__trace_child(r->hs->e, r->traceparent, name, 3, r->start_ns,
                    r->code == NULL && r->status < 400, r->code, a);
    json_decref(a);
    r->traceparent[0] = '\0';
  }
  lua_rawgeti(H, LUA_REGISTRYINDEX, r->ref_done);
  if (r->code == NULL) {
    lua_createtable(H, 0, 5);
    lua_pushinteger(H, r->status);
    lua_setfield(H, -2, "status");
    push_headers(H, &r->heads);
    lua_setfield(H, -2, "headers");
    if (r->ref_data != LUA_NOREF) lua_pushliteral(H, "");
    else lua_pushlstring(H, r->data.p ? r->data.p : "", r->data.len);
    lua_setfield(H, -2, "body");
    lua_pushboolean(H, r->truncated);
    lua_setfield(H, -2, "truncated");
    lua_pushstring(H, r->url);
    lua_setfield(H, -2, "url");
    lua_pushnil(H);
  } else {
    lua_pushnil(H);
    lua_createtable(H, 0, 2);
    lua_pushstring(H, r->code);
    lua_setfield(H, -2, "code");
    lua_pushstring(H, r->msg);
    lua_setfield(H, -2, "message");
  }
  buf_free(&r->data);
  buf_free(&r->heads);
  tp__host_callback(H, 2);
  return 0;
}

static void deliver (lua_State *H, req *r, int data) {
  int top = lua_gettop(H);
  lua_pushcfunction(H, deliver_p);
  lua_pushlightuserdata(H, r);
  lua_pushinteger(H, data);
  if (lua_pcall(H, 2, 0, 0) != LUA_OK)
    tp__engine_log(r->hs ? r->hs->e : NULL, TP_LOG_ERROR, "http", "tidepool: http: cannot deliver a response: %s",
                   lua_tostring(H, -1) ? lua_tostring(H, -1) : "?");
  lua_settop(H, top);
}

/* Hands what the transfers brought to Lua: finished hops first (a redirect starts the
** next), then each request's pending chunks and outcome. Lua may start or cancel requests
** meanwhile; none is freed until the outermost pump() is done. Returns 1 when an outcome
** was given. */
static int pump (tp_http *hs) {
  lua_State *H = hs->e->H;
  int told = 0;
  hs->pumping++;
  CURLMsg *m;
  int left;
  while ((m = curl_multi_info_read(hs->multi, &left)) != NULL) {
    if (m->msg != CURLMSG_DONE) continue;
    req *r = NULL;
    curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&r);
    CURLcode rc = m->data.result;
    if (r && !r->dead && r->easy == m->easy_handle) hop_done(r, rc);
  }
  for (int again = 1; again && H; ) {
    again = 0;
    for (req *r = hs->reqs; r; r = r->next) {
      if (r->dead) continue;
      if (r->ref_heads != LUA_NOREF && r->heads_done == 1) {
        r->heads_done = 2;
        deliver(H, r, 2);
        again = 1;
        break;
      }
      if (r->ref_data != LUA_NOREF && r->data.len > 0 && (r->finished || r->easy)) {
        deliver(H, r, 1);
        if (!r->dead && r->paused && r->easy && r->data.len == 0) {
          r->paused = 0;
          curl_easy_pause(r->easy, CURLPAUSE_CONT);  /* may call on_body at once */
        }
        again = 1;
        break;
      }
      if (r->finished == 1) {
        r->finished = 2;
        told = 1;
        deliver(H, r, 0);
        retire(r, H);
        again = 1;
        break;
      }
    }
  }
  if (--hs->pumping == 0)
    for (req *r = hs->reqs, *next; r; r = next) {
      next = r->next;
      if (!r->dead) continue;
      if (r->prev) r->prev->next = r->next;
      else hs->reqs = r->next;
      if (r->next) r->next->prev = r->prev;
      free_req(r);
    }
  return told;
}

static tp_engine *engine_of (lua_State *H) {
  return lua_touserdata(H, lua_upvalueindex(1));
}

/* opts' field k as an integer >= 0, or def when absent; raises on another type. */
static int64_t opt_int (lua_State *H, const char *k, int64_t def) {
  int t = lua_getfield(H, 1, k);
  int64_t v = def;
  if (t != LUA_TNIL) {
    int isint;
    lua_Integer n = lua_tointegerx(H, -1, &isint);
    if (!isint || n < 0) luaL_error(H, "http.request: opts.%s must be an integer >= 0", k);
    v = n;
  }
  lua_pop(H, 1);
  return v;
}

/* http.request(opts, on_done) -> handle */
static int l_request (lua_State *H) {
  tp_engine *e = engine_of(H);
  luaL_checktype(H, 1, LUA_TTABLE);
  luaL_checktype(H, 2, LUA_TFUNCTION);
  lua_settop(H, 2);
  char why[256];
  tp_http *hs = http_state(e, why, sizeof why);
  if (hs == NULL) return luaL_error(H, "http.request: %s", why);
  /* read every option before allocating */
  size_t ulen;
  if (lua_getfield(H, 1, "url") != LUA_TSTRING)
    return luaL_error(H, "http.request: opts.url must be a string (\"https://host/path\")");
  if (strlen(lua_tolstring(H, -1, &ulen)) != ulen)
    return luaL_error(H, "http.request: opts.url has a NUL byte");
  lua_pop(H, 1);
  int t = lua_getfield(H, 1, "method");
  if (t != LUA_TNIL && t != LUA_TSTRING)
    return luaL_error(H, "http.request: opts.method must be a string such as \"GET\"");
  if (t == LUA_TSTRING && !is_token(lua_tostring(H, -1)))
    return luaL_error(H, "http.request: opts.method '%s' is not a method name",
                      lua_tostring(H, -1));
  lua_pop(H, 1);
  t = lua_getfield(H, 1, "body");
  if (t != LUA_TNIL && t != LUA_TSTRING)
    return luaL_error(H, "http.request: opts.body must be a string");
  lua_pop(H, 1);
  t = lua_getfield(H, 1, "on_data");
  if (t != LUA_TNIL && t != LUA_TFUNCTION)
    return luaL_error(H, "http.request: opts.on_data must be a function(chunk)");
  int has_data = t == LUA_TFUNCTION;
  lua_pop(H, 1);
  t = lua_getfield(H, 1, "on_headers");
  if (t != LUA_TNIL && t != LUA_TFUNCTION)
    return luaL_error(H, "http.request: opts.on_headers must be a function(status, headers)");
  int has_heads = t == LUA_TFUNCTION;
  lua_pop(H, 1);
  t = lua_getfield(H, 1, "headers");
  if (t != LUA_TNIL && t != LUA_TTABLE)
    return luaL_error(H, "http.request: opts.headers must be a table {[\"Name\"] = \"value\"}");
  size_t nh = 0;
  if (t == LUA_TTABLE) {
    lua_pushnil(H);
    while (lua_next(H, -2)) {
      size_t kl, vl;
      const char *k = lua_type(H, -2) == LUA_TSTRING ? lua_tolstring(H, -2, &kl) : NULL;
      const char *v = lua_type(H, -1) == LUA_TSTRING ? lua_tolstring(H, -1, &vl) : NULL;
      if (k == NULL || v == NULL || strlen(k) != kl || !is_token(k))
        return luaL_error(H, "http.request: opts.headers must map header names to string "
                          "values");
      if (strlen(v) != vl || strpbrk(v, "\r\n") || kl + vl > 8000)
        return luaL_error(H, "http.request: header '%s': its value has a line break or a NUL "
                          "byte, or is longer than 8000 bytes", k);
      if (++nh > 200) return luaL_error(H, "http.request: more than 200 headers");
      lua_pop(H, 1);
    }
  }
  lua_pop(H, 1);
  lua_getfield(H, 1, "trusted");
  int trusted = lua_toboolean(H, -1);
  lua_pop(H, 1);
  char traceparent[TP__TRACEPARENT_LEN + 1] = "";
  if (lua_getfield(H, 1, "traceparent") == LUA_TSTRING &&
      lua_rawlen(H, -1) == TP__TRACEPARENT_LEN)
    memcpy(traceparent, lua_tostring(H, -1), sizeof traceparent);
  for (size_t i = 0; traceparent[i]; i++)  /* hex digits and dashes only: a header value */
    if (!isxdigit((unsigned char)traceparent[i]) && traceparent[i] != '-') traceparent[0] = '\0';
  lua_pop(H, 1);
  int64_t tmo = opt_int(H, "timeout_ms", -1), maxb = opt_int(H, "max_bytes", -1);

  req_box *box = lua_newuserdatauv(H, sizeof *box, 0);  /* 3 */
  box->r = NULL;
  luaL_setmetatable(H, REQ_META);
  req *r = calloc(1, sizeof *r);
  if (r == NULL) return luaL_error(H, "not enough memory");
  r->hs = hs;
  r->ref_done = r->ref_data = r->ref_heads = LUA_NOREF;
  r->trusted = trusted;
  memcpy(r->traceparent, traceparent, sizeof traceparent);
  r->start_ns = tp__now_ns();
  /* linked at once, so a raise below leaves nothing behind: retire() frees it */
  r->next = hs->reqs;
  if (hs->reqs) hs->reqs->prev = r;
  hs->reqs = r;
  r->box = box;
  box->r = r;
  size_t len;
  lua_getfield(H, 1, "url");
  const char *s = lua_tolstring(H, -1, &len);
  r->url = malloc(len + 1);
  r->first_url = malloc(len + 1);
  if (r->url) memcpy(r->url, s, len + 1);
  if (r->first_url) memcpy(r->first_url, s, len + 1);
  lua_pop(H, 1);
  if (lua_getfield(H, 1, "method") == LUA_TSTRING) {
    s = lua_tolstring(H, -1, &len);
    r->method = malloc(len + 1);
    if (r->method) for (size_t i = 0; i <= len; i++) r->method[i] = (char)toupper((unsigned char)s[i]);
  } else {
    r->method = strdup("GET");
  }
  lua_pop(H, 1);
  int body_lost = 0;
  if (lua_getfield(H, 1, "body") == LUA_TSTRING) {
    s = lua_tolstring(H, -1, &len);
    r->body = malloc(len + 1);
    if (r->body) { memcpy(r->body, s, len); r->body_len = len; }
    body_lost = r->body == NULL;
  }
  lua_pop(H, 1);
  if (r->url == NULL || r->first_url == NULL || r->method == NULL || body_lost) {
    retire(r, H);
    return luaL_error(H, "not enough memory");
  }
  if (nh) {
    r->hnames = calloc(nh, sizeof *r->hnames);
    r->hvalues = calloc(nh, sizeof *r->hvalues);
    if (r->hnames == NULL || r->hvalues == NULL) { retire(r, H); return luaL_error(H, "not enough memory"); }
    lua_getfield(H, 1, "headers");
    lua_pushnil(H);
    while (lua_next(H, -2) && r->nh < nh) {
      size_t kl, vl;
      const char *k = lua_tolstring(H, -2, &kl), *v = lua_tolstring(H, -1, &vl);
      r->hnames[r->nh] = malloc(kl + 1);
      r->hvalues[r->nh] = malloc(vl + 1);
      r->nh++;
      if (r->hnames[r->nh - 1] == NULL || r->hvalues[r->nh - 1] == NULL) {
        retire(r, H);
        return luaL_error(H, "not enough memory");
      }
      memcpy(r->hnames[r->nh - 1], k, kl + 1);
      memcpy(r->hvalues[r->nh - 1], v, vl + 1);
      lua_pop(H, 1);
    }
    lua_settop(H, 3);
  }
  lua_pushvalue(H, 2);
  r->ref_done = luaL_ref(H, LUA_REGISTRYINDEX);
  if (has_data) {
    lua_getfield(H, 1, "on_data");
    r->ref_data = luaL_ref(H, LUA_REGISTRYINDEX);
  }
  if (has_heads) {
    lua_getfield(H, 1, "on_headers");
    r->ref_heads = luaL_ref(H, LUA_REGISTRYINDEX);
  }

  if (policy_sync(hs) != 0 && !trusted) {
    set_outcome(r, "tool.failed", "%s %s: %s", r->method, r->url, hs->pol.error);
  } else {
    const policy *p = &hs->pol;
    if (tmo < 0) tmo = p->timeout_ms;
    else if (!trusted && (tmo == 0 || tmo > p->timeout_ms)) tmo = p->timeout_ms;
    if (maxb < 0) maxb = has_data && trusted ? NO_CAP : p->max_bytes;
    else if (!trusted && maxb > p->max_bytes) maxb = p->max_bytes;
    r->timeout_ms = tmo;
    r->max_bytes = maxb;
    r->deadline_ms = tmo > 0 ? now_ms() + (uint64_t)tmo : 0;
    start_hop(r);
  }
  if (r->code) {  /* known before any I/O: told on the next turn of the loop */
    r->finished = 1;
    nudge(hs);
  }
  return 1;
}

static int l_cancel (lua_State *H) {
  req_box *box = luaL_checkudata(H, 1, REQ_META);
  if (box->r) retire(box->r, H);
  return 0;
}

static int l_is_closing (lua_State *H) {
  req_box *box = luaL_checkudata(H, 1, REQ_META);
  lua_pushboolean(H, box->r == NULL);
  return 1;
}

/* The handle is collected: the request goes on (its callbacks are referenced). */
static int l_gc (lua_State *H) {
  req_box *box = luaL_checkudata(H, 1, REQ_META);
  if (box->r) box->r->box = NULL;
  box->r = NULL;
  return 0;
}

static int l_check_config (lua_State *H) {
  char why[256];
  tp_http *hs = http_state(engine_of(H), why, sizeof why);
  if (hs == NULL) { lua_pushnil(H); lua_pushstring(H, why); return 2; }
  if (policy_sync(hs) != 0) { lua_pushnil(H); lua_pushstring(H, hs->pol.error); return 2; }
  lua_pushboolean(H, 1);
  return 1;
}

int tp__http_open (lua_State *H) {
  void *e = lua_touserdata(H, lua_upvalueindex(1));
  if (luaL_newmetatable(H, REQ_META)) {
    static const luaL_Reg m[] = { { "cancel", l_cancel }, { "close", l_cancel },
                                  { "is_closing", l_is_closing }, { NULL, NULL } };
    luaL_newlib(H, m);
    lua_setfield(H, -2, "__index");
    lua_pushcfunction(H, l_gc);
    lua_setfield(H, -2, "__gc");
    lua_pushliteral(H, "tidepool.http.request");
    lua_setfield(H, -2, "__metatable");
  }
  lua_pop(H, 1);
  lua_createtable(H, 0, 2);
  lua_pushlightuserdata(H, e);
  lua_pushcclosure(H, l_request, 1);
  lua_setfield(H, -2, "request");
  lua_pushlightuserdata(H, e);
  lua_pushcclosure(H, l_check_config, 1);
  lua_setfield(H, -2, "check_config");
  return 1;
}

/* ---- teardown -------------------------------------------------------------------------- */

static void free_handle (uv_handle_t *h) { free(h); }

void tp__http_close (tp_engine *e) {
  tp_http *hs = e->http;
  if (hs == &closed_state) return;
  e->http = &closed_state;
  if (hs == NULL) return;
  while (hs->reqs) {
    req *r = hs->reqs;
    hs->pumping = 0;
    retire(r, e->H);  /* frees it and unlinks it */
    if (hs->reqs == r) {  /* was dead already */
      hs->reqs = r->next;
      if (r->next) r->next->prev = NULL;
      free_req(r);
    }
  }
  curl_multi_cleanup(hs->multi);  /* closes its connections: their poll handles close */
  uv_close((uv_handle_t *)hs->timer, free_handle);
  uv_close((uv_handle_t *)hs->nudge, free_handle);
  policy_clear(&hs->pol);
  free(hs);
}
