/*
** ui_http.c: the operator page (see ui_http.h). Server-rendered HTML with one small
** script (/ui/app.js, which refreshes the page's live part) and one style sheet, both
** served from here: no build step, no CDN, works offline.
**
** Who may see it: with auth, an operator: a token with the "operator" scope, given once
** in the sign-in form (the token is checked and forgotten; the browser keeps only a
** random session id in an HttpOnly, SameSite=Strict cookie) or in an Authorization
** header; without auth, loopback clients only (the address a trusted proxy names counts,
** as for /metrics). Sessions live UI_SESSION_TTL_NS and at most UI_SESSIONS_MAX at once.
**
** What it may do: every POST (sign-in, Approve, Deny, sign-out) carries the session's
** CSRF token (128 random bits, compared in constant time) and an Origin header (which
** http.c has checked against the allowed origins); a post without either is 403. A
** decision goes to the server's ui_decide entry: resume_run's own path, audited with the
** operator as its principal.
**
** What it shows is escaped: every string a script, a tool, a model or a client wrote
** (tool names, arguments, reasons, principals, session ids, error codes) goes through
** put_esc. The Content-Security-Policy allows scripts and styles from this origin only
** (no inline script or style: the waterfall is SVG drawn with attributes).
*/
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <time.h>

#include <jansson.h>

#include "clock.h"
#include "tidepool.h"
#include "auth.h"
#include "view.h"
#include "audit_show.h"
#include "ui_http.h"

#define UI_SESSIONS_MAX 64
#define UI_SESSION_TTL_NS (8ull * 3600u * 1000000000u)
#define UI_COOKIE "tp_ui"
#define UI_FIELDS_MAX 16

static const char csp[] =
  "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "
  "form-action 'self'; frame-ancestors 'none'; base-uri 'none'; object-src 'none'";

typedef struct usess {
  int used, signed_in;
  char id[33], csrf[33];
  char principal[256];      /* the operator ("" without auth: a loopback client) */
  uint64_t born_ns;
} usess;

struct tp__mcp_ui_http {
  tp__mcp_entries ent;
  struct tp_auth *auth;
  uint64_t *classes;
  usess sess[UI_SESSIONS_MAX];
};

tp__mcp_ui_http *tp__mcp_ui_http_new (const tp__mcp_entries *ent, struct tp_auth *auth,
                                      uint64_t *classes) {
  tp__mcp_ui_http *u = calloc(1, sizeof *u);
  if (u == NULL) return NULL;
  u->ent = *ent;
  u->auth = auth;
  u->classes = classes;
  return u;
}

void tp__mcp_ui_http_free (tp__mcp_ui_http *u) { free(u); }

int tp__mcp_ui_http_match (const char *url) {
  return strcmp(url, "/ui") == 0 || strncmp(url, "/ui/", 4) == 0;
}

int tp__mcp_ui_http_wants_body (const char *method) { return strcmp(method, "POST") == 0; }

/* ---- sessions ------------------------------------------------------------------------ */

static int random_hex (char out[33]) {
  unsigned char rnd[16];
  if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) return -1;
  for (size_t i = 0; i < sizeof rnd; i++) snprintf(out + 2 * i, 3, "%02x", rnd[i]);
  return 0;
}

static int same_secret (const char *want, const char *given) {
  size_t n = strlen(want);
  if (given == NULL || strlen(given) != n) return 0;
  unsigned char d = 0;
  for (size_t i = 0; i < n; i++) d |= (unsigned char)(want[i] ^ given[i]);
  return d == 0;
}

static usess *sess_find (tp__mcp_ui_http *u, const char *id) {
  if (id == NULL || strlen(id) != 32) return NULL;
  uint64_t now = tp__mcp_mono_ns();
  for (size_t i = 0; i < UI_SESSIONS_MAX; i++) {
    usess *s = &u->sess[i];
    if (!s->used) continue;
    if (now - s->born_ns > UI_SESSION_TTL_NS) { s->used = 0; continue; }
    if (same_secret(s->id, id)) return s;
  }
  return NULL;
}

/* A new session, or NULL. When all are taken the oldest signed-out one goes (a sign-in
** form's), else the oldest: strangers asking for sign-in forms cannot push operators out. */
static usess *sess_new (tp__mcp_ui_http *u, int signed_in, const char *principal) {
  usess *s = NULL, *oldest = &u->sess[0];
  for (size_t i = 0; i < UI_SESSIONS_MAX; i++) {
    usess *x = &u->sess[i];
    if (!x->used) { s = x; break; }
    if (!x->signed_in && (s == NULL || x->born_ns < s->born_ns)) s = x;
    if (x->born_ns < oldest->born_ns) oldest = x;
  }
  if (s == NULL) s = oldest;
  memset(s, 0, sizeof *s);
  if (random_hex(s->id) != 0 || random_hex(s->csrf) != 0) return NULL;
  s->used = 1;
  s->signed_in = signed_in;
  snprintf(s->principal, sizeof s->principal, "%s", principal ? principal : "");
  s->born_ns = tp__mcp_mono_ns();
  return s;
}

/* ---- text ---------------------------------------------------------------------------- */

typedef tp__mcp_view_buf buf;

static void put (buf *b, const char *s) { tp__mcp_view_str(b, s); }

static void putf (buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void putf (buf *b, const char *fmt, ...) {
  char tmp[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  if (n > 0) tp__mcp_view_put(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

/* s as HTML text or an attribute's value: & < > " ' escaped, control characters but tab
** and newline shown as U+FFFD. */
static void put_esc (buf *b, const char *s) {
  if (s == NULL) return;
  for (const char *p = s; *p; p++) {
    switch (*p) {
      case '&': put(b, "&amp;"); break;
      case '<': put(b, "&lt;"); break;
      case '>': put(b, "&gt;"); break;
      case '"': put(b, "&quot;"); break;
      case '\'': put(b, "&#39;"); break;
      default:
        if ((unsigned char)*p < 0x20 && *p != '\n' && *p != '\t') put(b, "\xEF\xBF\xBD");
        else tp__mcp_view_put(b, p, 1);
    }
  }
}

static const char *jstr (const json_t *o, const char *k) {
  const char *v = json_string_value(json_object_get(o, k));
  return v ? v : "";
}

static double jnum (const json_t *o, const char *k) {
  return json_number_value(json_object_get(o, k));
}

/* The sum of the samples of metric name in Prometheus text whose labels hold label (NULL:
** any), or -1 when there is none. */
static double metric (const char *text, const char *name, const char *label) {
  double sum = -1;
  size_t n = strlen(name);
  for (const char *l = text; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : NULL) {
    if (strncmp(l, name, n) != 0 || (l[n] != ' ' && l[n] != '{')) continue;
    const char *end = strchr(l, '\n');
    if (end == NULL) end = l + strlen(l);
    if (label) {
      const char *close = memchr(l, '}', (size_t)(end - l));
      char labels[400];
      size_t ln = close ? (size_t)(close - l) : 0;
      if (ln >= sizeof labels) ln = sizeof labels - 1;
      memcpy(labels, l, ln);
      labels[ln] = '\0';
      if (strstr(labels, label) == NULL) continue;
    }
    const char *sp = end;
    while (sp > l && sp[-1] != ' ') sp--;
    double v = strtod(sp, NULL);
    sum = (sum < 0 ? 0 : sum) + v;
  }
  return sum;
}

/* ---- answers ------------------------------------------------------------------------- */

static enum MHD_Result reply (tp__mcp_ui_http *u, struct MHD_Connection *c, unsigned status,
                             const char *type, const char *body, size_t len,
                             const char *cookie, const char *location) {
  if (u->classes && status / 100 < 6) u->classes[status / 100]++;
  struct MHD_Response *r = MHD_create_response_from_buffer(len, (void *)body,
                                                           MHD_RESPMEM_MUST_COPY);
  if (r == NULL) return MHD_NO;
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
  MHD_add_response_header(r, "Content-Security-Policy", csp);
  MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
  MHD_add_response_header(r, "X-Frame-Options", "DENY");
  MHD_add_response_header(r, "Referrer-Policy", "same-origin");  /* no-referrer makes a form post's Origin "null" */
  MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
  if (cookie) MHD_add_response_header(r, MHD_HTTP_HEADER_SET_COOKIE, cookie);
  if (location) MHD_add_response_header(r, MHD_HTTP_HEADER_LOCATION, location);
  if (status == MHD_HTTP_METHOD_NOT_ALLOWED)
    MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, POST");
  enum MHD_Result rc = MHD_queue_response(c, status, r);
  MHD_destroy_response(r);
  return rc;
}

static void head (buf *b, const char *title) {
  put(b, "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
         "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
         "<title>");
  put_esc(b, title);
  put(b, "</title><link rel=\"stylesheet\" href=\"/ui/app.css\">"
         "<script src=\"/ui/app.js\" defer></script></head>\n<body>\n");
}

/* A page that says what went wrong (status 4xx or 5xx), with a way back. */
static enum MHD_Result problem (tp__mcp_ui_http *u, struct MHD_Connection *c, unsigned status,
                                const char *what, const char *why, const char *cookie) {
  buf b = { 0 };
  head(&b, what);
  put(&b, "<main class=\"problem\"><h1>");
  put_esc(&b, what);
  put(&b, "</h1><p id=\"why\">");
  put_esc(&b, why);
  put(&b, "</p><p><a href=\"/ui\">Back to the operator page</a></p></main></body></html>\n");
  enum MHD_Result rc = b.oom ? reply(u, c, 500, "text/plain; charset=utf-8", "out of memory", 13,
                                    NULL, NULL)
                             : reply(u, c, status, "text/html; charset=utf-8", b.p, b.len,
                                     cookie[0] ? cookie : NULL, NULL);
  free(b.p);
  return rc;
}

static void cookie_of (const usess *s, char *out, size_t len) {
  snprintf(out, len, UI_COOKIE "=%s; Path=/ui; HttpOnly; SameSite=Strict; Max-Age=%llu",
           s->id, (unsigned long long)(UI_SESSION_TTL_NS / 1000000000u));
}

static void csrf_field (buf *b, const usess *s) {
  put(b, "<input type=\"hidden\" name=\"csrf\" value=\"");
  put(b, s->csrf);  /* hex */
  put(b, "\">");
}

/* The sign-in form, in the browser's signed-out session s when it has one: a second look
** at the form (a reload, the page's own refresh, a refused token) keeps the session and
** its CSRF token, so a form shown earlier still posts. Else in a new one, whose cookie the
** answer sets. */
static enum MHD_Result signin_page (tp__mcp_ui_http *u, struct MHD_Connection *c, usess *s,
                                    unsigned status, const char *why) {
  char cookie[200];
  if (s == NULL || s->signed_in) {
    if ((s = sess_new(u, 0, NULL)) == NULL)
      return problem(u, c, 500, "Out of memory", "no session could be made", NULL);
    cookie_of(s, cookie, sizeof cookie);
  } else {
    cookie[0] = '\0';
  }
  buf b = { 0 };
  head(&b, "tidepool operator: sign in");
  put(&b, "<main class=\"signin\"><h1>tidepool operator page</h1>");
  if (why) {
    put(&b, "<p id=\"why\" class=\"bad\">");
    put_esc(&b, why);
    put(&b, "</p>");
  }
  put(&b, "<form method=\"post\" action=\"/ui/signin\">");
  csrf_field(&b, s);
  put(&b, "<label for=\"token\">Token with the <code>operator</code> scope</label>"
          "<input id=\"token\" name=\"token\" type=\"password\" autocomplete=\"off\" required>"
          "<button id=\"signin\" type=\"submit\">Sign in</button></form>"
          "<p class=\"note\">The token is checked once and not kept: the browser keeps a "
          "session cookie for 8 hours.</p></main></body></html>\n");
  enum MHD_Result rc = b.oom ? problem(u, c, 500, "Out of memory", "the page could not be made",
                                       NULL)
                             : reply(u, c, status, "text/html; charset=utf-8", b.p, b.len,
                                     cookie[0] ? cookie : NULL, NULL);
  free(b.p);
  return rc;
}

/* A counter of the metrics text m: absent lines are zeros (a series shows once counted). */
static double counter (const char *m, const char *name, const char *label) {
  double v = m ? metric(m, name, label) : -1;
  return m && v < 0 ? 0 : v;
}

static void figure (buf *b, const char *id, const char *label, double v) {
  putf(b, "<div class=\"fig\" id=\"fig-%s\"><dt>", id);
  put_esc(b, label);
  if (v < 0) put(b, "</dt><dd>&ndash;</dd></div>");
  else putf(b, "</dt><dd>%.0f</dd></div>", v);
}

static void figures (buf *b, const char *m, const json_t *st, const uint64_t *classes) {
  put(b, "<section id=\"figures\"><h2>At a glance</h2><dl>");
  double runs = counter(m, "tidepool_runs_total", NULL);
  double ok = counter(m, "tidepool_runs_total", "outcome=\"ok\"");
  figure(b, "runs", "runs", runs);
  figure(b, "failed", "runs failed", runs < 0 ? -1 : runs - ok);
  figure(b, "running", "running", jnum(st, "running"));
  figure(b, "waiting", "queued", jnum(st, "waiting"));
  figure(b, "paused", "paused", (double)json_array_size(json_object_get(st, "paused")));
  figure(b, "sessions", "sessions", jnum(st, "sessions"));
  figure(b, "calls", "tool calls", counter(m, "tidepool_tool_calls_total", NULL));
  figure(b, "denied", "calls denied", counter(m, "tidepool_tool_calls_total",
                                              "outcome=\"tool.denied\""));
  figure(b, "limits", "limits hit", counter(m, "tidepool_limits_hit_total", NULL));
  figure(b, "dropped", "spans dropped", counter(m, "tidepool_spans_dropped_total", NULL));
  figure(b, "http4xx", "HTTP 4xx", classes ? (double)classes[4] : -1);
  figure(b, "http5xx", "HTTP 5xx", classes ? (double)classes[5] : -1);
  put(b, "</dl></section>\n");
}

/* The series of upstream MCP servers in the metrics text (tidepool_upstream_*), one row
** each. */
static void upstreams (buf *b, const char *m) {
  put(b, "<section id=\"upstream\"><h2>Upstream servers</h2>");
  int any = 0;
  for (const char *l = m; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : NULL) {
    if (strncmp(l, "tidepool_upstream", 17) != 0) continue;
    const char *end = strchr(l, '\n');
    size_t n = end ? (size_t)(end - l) : strlen(l);
    char line[600];
    if (n >= sizeof line) continue;
    memcpy(line, l, n);
    line[n] = '\0';
    char *sp = strrchr(line, ' ');
    if (sp == NULL) continue;
    *sp = '\0';
    if (!any) put(b, "<table><thead><tr><th>series</th><th>value</th></tr></thead><tbody>");
    any = 1;
    put(b, "<tr><td><code>");
    put_esc(b, line);
    put(b, "</code></td><td>");
    put_esc(b, sp + 1);
    put(b, "</td></tr>");
  }
  if (any) put(b, "</tbody></table>");
  else put(b, "<p class=\"note\">No upstream MCP servers report here (the config's "
              "mcpServers).</p>");
  put(b, "</section>\n");
}

static void paused (buf *b, const json_t *st, const usess *s) {
  const json_t *ps = json_object_get(st, "paused");
  putf(b, "<section id=\"paused\"><h2>Waiting for a person (%zu)</h2>", json_array_size(ps));
  if (json_array_size(ps) == 0) {
    put(b, "<p class=\"note\">No run waits for a decision.</p></section>\n");
    return;
  }
  put(b, "<table><thead><tr><th>run</th><th>principal</th><th>session</th><th>call</th>"
         "<th>arguments</th><th>why it waits</th><th>decision</th></tr></thead><tbody>");
  size_t i, k;
  json_t *p, *c;
  json_array_foreach(ps, i, p) {
    const json_t *pend = json_object_get(p, "pending");
    json_array_foreach(pend, k, c) {
      int call = json_object_get(c, "kind") != NULL;  /* a caller tool's: the client runs it */
      long long seq = (long long)json_integer_value(json_object_get(c, call ? "id" : "seq"));
      putf(b, "<tr class=\"pending\" data-seq=\"%lld\"><td><code>", seq);
      put_esc(b, jstr(p, "run"));
      put(b, "</code></td><td>");
      put_esc(b, jstr(p, "principal")[0] ? jstr(p, "principal") : "(local)");
      put(b, "</td><td>");
      put_esc(b, jstr(p, "session"));
      putf(b, "</td><td>#%lld <code class=\"tool\">", seq);
      put_esc(b, jstr(c, "tool"));
      put(b, "</code></td><td><pre class=\"args\">");
      put_esc(b, jstr(c, "args"));
      put(b, "</pre></td><td class=\"reason\">");
      put_esc(b, call ? "a caller tool's call: the client answers it" : jstr(c, "reason"));
      put(b, "</td><td>");
      if (call || !json_is_true(json_object_get(p, "decidable"))) {
        put(b, "<span class=\"note\">decided by the client</span>");
      }
      else {
        put(b, "<form method=\"post\" action=\"/ui/decide\" class=\"decide\">");
        csrf_field(b, s);
        put(b, "<input type=\"hidden\" name=\"run\" value=\"");
        put_esc(b, jstr(p, "run"));
        putf(b, "\"><input type=\"hidden\" name=\"seq\" value=\"%lld\">"
                "<input name=\"note\" placeholder=\"note (optional)\" maxlength=\"500\">"
                "<button name=\"action\" value=\"approve\" class=\"approve\">Approve</button>"
                "<button name=\"action\" value=\"deny\" class=\"deny\">Deny</button></form>", seq);
      }
      put(b, "</td></tr>");
    }
  }
  put(b, "</tbody></table></section>\n");
}

static void outcome (buf *b, const json_t *r) {
  if (json_is_true(json_object_get(r, "ok"))) put(b, "<span class=\"ok\">ok</span>");
  else {
    put(b, "<span class=\"bad\">");
    put_esc(b, jstr(r, "code")[0] ? jstr(r, "code") : "error");
    put(b, "</span>");
  }
}

static void runs (buf *b, const json_t *st, long long sel) {
  const json_t *rs = json_object_get(st, "runs");
  put(b, "<section id=\"runs\"><h2>Recent runs</h2>");
  if (json_array_size(rs) == 0) {
    put(b, "<p class=\"note\">No run has finished yet.</p></section>\n");
    return;
  }
  put(b, "<table><thead><tr><th>#</th><th>finished</th><th>principal</th><th>session</th>"
         "<th>tool</th><th>outcome</th><th>ms</th><th>calls</th></tr></thead><tbody>");
  size_t i;
  json_t *r;
  json_array_foreach(rs, i, r) {
    long long serial = (long long)json_integer_value(json_object_get(r, "serial"));
    time_t t = (time_t)(json_integer_value(json_object_get(r, "finished")) / 1000);
    struct tm tm;
    char when[32] = "";
    if (gmtime_r(&t, &tm)) strftime(when, sizeof when, "%H:%M:%S", &tm);
    putf(b, "<tr class=\"run%s\" data-serial=\"%lld\"><td><a href=\"/ui?run=%lld#waterfall\">%lld</a>"
            "</td><td>%s</td><td>", serial == sel ? " selected" : "", serial, serial, serial, when);
    put_esc(b, jstr(r, "principal")[0] ? jstr(r, "principal") : "(local)");
    put(b, "</td><td>");
    put_esc(b, jstr(r, "session"));
    put(b, "</td><td><code>");
    put_esc(b, jstr(r, "tool"));
    put(b, "</code></td><td class=\"outcome\">");
    outcome(b, r);
    putf(b, "</td><td>%.1f</td><td class=\"ncalls\">%zu</td></tr>", jnum(r, "ms"),
         json_array_size(json_object_get(r, "calls")));
  }
  put(b, "</tbody></table></section>\n");
}

/* The runs the call journal shows with no end (tidepool audit show reads the same): after
** a crash, what each did, call by call; also the runs going on now. At most 20. */
static void unfinished (buf *b, const json_t *st) {
  const char *journal = jstr(st, "journal");
  if (!journal[0]) return;
  json_t *rs = tp__audit_unfinished(journal, 20);
  put(b, "<section id=\"journal\"><h2>No end recorded (the call journal)</h2>");
  if (json_array_size(rs) == 0) {
    put(b, "<p class=\"note\">Every run in the journal ended.</p></section>\n");
    json_decref(rs);
    return;
  }
  put(b, "<p class=\"note\">Runs still going on, or whose process died: a call in flight may "
         "or may not have had its effect.</p>");
  size_t i, k;
  json_t *r, *c;
  json_array_foreach(rs, i, r) {
    put(b, "<div class=\"died\"><p>run <code>");
    put_esc(b, jstr(r, "run"));
    put(b, "</code>, started ");
    put_esc(b, jstr(r, "started"));
    put(b, "</p><table><thead><tr><th>#</th><th>tool</th><th>line</th><th>state</th>"
           "</tr></thead><tbody>");
    json_array_foreach(json_object_get(r, "calls"), k, c) {
      const char *state = jstr(c, "state");
      putf(b, "<tr><td>%lld</td><td><code>",
           (long long)json_integer_value(json_object_get(c, "seq")));
      put_esc(b, jstr(c, "tool"));
      putf(b, "</code></td><td>%lld</td><td class=\"state\">",
           (long long)json_integer_value(json_object_get(c, "line")));
      put_esc(b, strcmp(state, "in flight") == 0 ? "in flight (no end recorded)" : state);
      if (jstr(c, "code")[0] && strcmp(state, "made") != 0) {
        put(b, " ");
        put_esc(b, jstr(c, "code"));
      }
      put(b, "</td></tr>");
    }
    put(b, "</tbody></table></div>");
  }
  put(b, "</section>\n");
  json_decref(rs);
}

/* Run r's calls as an SVG waterfall: a row a call, its bar from start to end, the part
** spent waiting for a person drawn over it; calls that overlap ran in parallel. */
static void waterfall (buf *b, const json_t *r) {
  put(b, "<section id=\"waterfall\"><h2>");
  if (r == NULL) {
    put(b, "Calls of a run</h2><p class=\"note\">Pick a run above.</p></section>\n");
    return;
  }
  putf(b, "Calls of run #%lld</h2><p>", (long long)json_integer_value(json_object_get(r, "serial")));
  put(b, "Outcome ");
  outcome(b, r);
  putf(b, ", %.1f ms.", jnum(r, "ms"));
  if (jstr(r, "run")[0]) {
    put(b, " Paused run id <code>");
    put_esc(b, jstr(r, "run"));
    put(b, "</code>.");
  }
  put(b, "</p>");
  const char *what = jstr(r, json_is_true(json_object_get(r, "ok")) ? "result" : "message");
  if (*what) {
    put(b, json_is_true(json_object_get(r, "ok")) ? "<p>Result:</p>" : "<p>Error:</p>");
    put(b, "<pre id=\"result\" class=\"args\">");
    put_esc(b, what);
    put(b, "</pre>");
  }
  const json_t *calls = json_object_get(r, "calls");
  size_t n = json_array_size(calls);
  if (n == 0) {
    put(b, "<p class=\"note\">The run made no tool calls.</p></section>\n");
    return;
  }
  double total = jnum(r, "ms");
  size_t i;
  json_t *c;
  json_array_foreach(calls, i, c) if (jnum(c, "end") > total) total = jnum(c, "end");
  if (total <= 0) total = 1;
  const int W = 900, L = 260, ROW = 22;
  double scale = (double)(W - L - 70) / total;
  putf(b, "<svg class=\"wf\" width=\"%d\" height=\"%zu\" viewBox=\"0 0 %d %zu\" role=\"img\" "
          "aria-label=\"calls of the run over time\">", W, n * ROW + 30, W, n * ROW + 30);
  putf(b, "<line x1=\"%d\" y1=\"0\" x2=\"%d\" y2=\"%zu\" class=\"axis\"/>", L, L, n * ROW + 8);
  json_array_foreach(calls, i, c) {
    double at = jnum(c, "at"), end = jnum(c, "end");
    double x = L + at * scale, w = (end - at) * scale;
    if (w < 2) w = 2;
    int y = (int)(i * ROW) + 4;
    int ok = json_is_true(json_object_get(c, "ok"));
    putf(b, "<g class=\"call %s\"><title>", ok ? "ok" : "bad");
    putf(b, "#%lld ", (long long)json_integer_value(json_object_get(c, "seq")));
    put_esc(b, jstr(c, "tool"));
    putf(b, ": %.3f ms to %.3f ms", at, end);
    if (!ok) { put(b, ", "); put_esc(b, jstr(c, "code")); }
    putf(b, "</title><text x=\"4\" y=\"%d\" class=\"label\">#%lld ", y + 13,
         (long long)json_integer_value(json_object_get(c, "seq")));
    put_esc(b, jstr(c, "tool"));
    if (!ok) { put(b, " ("); put_esc(b, jstr(c, "code")); put(b, ")"); }
    putf(b, "</text><rect x=\"%.1f\" y=\"%d\" width=\"%.1f\" height=\"16\" class=\"bar\"/>",
         x, y, w);
    if (json_object_get(c, "held_at")) {
      double ha = jnum(c, "held_at"), he = jnum(c, "held_end");
      double hw = (he - ha) * scale;
      if (hw < 2) hw = 2;
      putf(b, "<rect x=\"%.1f\" y=\"%d\" width=\"%.1f\" height=\"16\" class=\"held\">"
              "<title>waiting for a person: %.3f ms</title></rect>", L + ha * scale, y, hw,
           he - ha);
    }
    putf(b, "<text x=\"%.1f\" y=\"%d\" class=\"ms\">%.1f ms</text></g>", x + w + 4, y + 13,
         end - at);
  }
  putf(b, "<text x=\"%d\" y=\"%zu\" class=\"tick\">0</text><text x=\"%d\" y=\"%zu\" "
          "class=\"tick\">%.1f ms</text>", L, n * ROW + 24, W - 70, n * ROW + 24, total);
  put(b, "</svg><p class=\"legend\"><span class=\"key ok\"></span> call "
         "<span class=\"key bad\"></span> failed or refused "
         "<span class=\"key held\"></span> waiting for a person</p></section>\n");
}

static enum MHD_Result main_page (tp__mcp_ui_http *u, struct MHD_Connection *c, usess *s,
                                  const char *cookie) {
  json_t *st = u->ent.ui_state ? u->ent.ui_state(u->ent.s) : NULL;
  size_t mlen = 0;
  char *m = u->ent.metrics ? u->ent.metrics(u->ent.s, &mlen) : NULL;
  if (st == NULL) {
    free(m);
    return problem(u, c, 500, "Out of memory", "the page could not be made", NULL);
  }
  const char *runarg = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "run");
  const char *done = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "done");
  long long sel = runarg ? strtoll(runarg, NULL, 10) : 0;
  const json_t *selected = NULL, *r;
  size_t i;
  json_array_foreach(json_object_get(st, "runs"), i, r) {
    long long serial = (long long)json_integer_value(json_object_get(r, "serial"));
    if ((sel == 0 && i == 0) || serial == sel) { selected = r; sel = serial; }
  }
  buf b = { 0 };
  head(&b, "tidepool operator");
  put(&b, "<header><h1>tidepool operator</h1><span id=\"who\">signed in as ");
  put_esc(&b, s->principal[0] ? s->principal : "a local client (no auth)");
  put(&b, "</span>");
  if (u->auth) {
    put(&b, "<form method=\"post\" action=\"/ui/signout\">");
    csrf_field(&b, s);
    put(&b, "<button id=\"signout\">Sign out</button></form>");
  }
  put(&b, "</header>\n<main id=\"main\">");
  if (done && (strcmp(done, "approve") == 0 || strcmp(done, "deny") == 0))
    putf(&b, "<p id=\"flash\">%s: the run goes on.</p>", strcmp(done, "approve") == 0
         ? "Approved" : "Denied");
  figures(&b, m, st, u->classes);
  paused(&b, st, s);
  runs(&b, st, sel);
  waterfall(&b, selected);
  unfinished(&b, st);
  upstreams(&b, m);
  put(&b, "</main></body></html>\n");
  json_decref(st);
  free(m);
  enum MHD_Result rc = b.oom ? problem(u, c, 500, "Out of memory", "the page could not be made",
                                       NULL)
                             : reply(u, c, 200, "text/html; charset=utf-8", b.p, b.len, cookie,
                                    NULL);
  free(b.p);
  return rc;
}

/* ---- forms ----------------------------------------------------------------------------- */

typedef struct field { char *name, *value; } field;

static int unhex (int ch) {
  if (ch >= '0' && ch <= '9') return ch - '0';
  if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
  if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
  return -1;
}

/* Decodes [p, p + n) of a urlencoded form in place into out (NUL-terminated); -1 for a
** bad %-escape or a NUL byte. */
static int decode (const char *p, size_t n, char *out) {
  size_t o = 0;
  for (size_t i = 0; i < n; i++) {
    if (p[i] == '+') out[o++] = ' ';
    else if (p[i] == '%') {
      if (i + 2 >= n) return -1;  /* "%", "%4" at the end */
      int a = unhex((unsigned char)p[i + 1]), bb = unhex((unsigned char)p[i + 2]);
      if (a < 0 || bb < 0 || (a == 0 && bb == 0)) return -1;
      out[o++] = (char)(a * 16 + bb);
      i += 2;
    }
    else out[o++] = p[i];
  }
  out[o] = '\0';
  return 0;
}

/* The fields of a urlencoded body into f (at most UI_FIELDS_MAX; strings in store, which
** holds len * 2 + 2 bytes); their number, or -1 with why when it is not such a form. */
static int parse_form (const char *body, size_t len, field *f, char *store, char *why,
                       size_t whylen) {
  int n = 0;
  size_t i = 0, at = 0;
  while (i < len) {
    size_t j = i;
    while (j < len && body[j] != '&') j++;
    if (j > i) {
      if (n == UI_FIELDS_MAX) {
        snprintf(why, whylen, "the form has more than %d fields", UI_FIELDS_MAX);
        return -1;
      }
      const char *eq = memchr(body + i, '=', j - i);
      size_t kn = eq ? (size_t)(eq - (body + i)) : j - i;
      f[n].name = store + at;
      if (decode(body + i, kn, f[n].name) != 0) goto bad;
      at += strlen(f[n].name) + 1;
      f[n].value = store + at;
      if (decode(eq ? eq + 1 : body + j, eq ? (size_t)(body + j - eq - 1) : 0, f[n].value) != 0)
        goto bad;
      at += strlen(f[n].value) + 1;
      n++;
    }
    i = j + 1;
  }
  return n;
bad:
  snprintf(why, whylen, "field %d of the form has a bad %%-escape (or a NUL byte)", n + 1);
  return -1;
}

static const char *field_get (const field *f, int n, const char *name) {
  for (int i = 0; i < n; i++)
    if (strcmp(f[i].name, name) == 0) return f[i].value;
  return NULL;
}

static int valid_utf8 (const char *s) {
  json_t *j = json_string(s);  /* jansson checks UTF-8 */
  json_decref(j);
  return j != NULL;
}

/* ---- routing ---------------------------------------------------------------------------- */

static const char app_js[] =
  "'use strict';\n"
  "// tidepool's operator page: refresh the live part every 2 s (not while a note is\n"
  "// being typed, nor with ?refresh=0). The server escapes every text it renders.\n"
  "(function () {\n"
  "  if (new URLSearchParams(location.search).get('refresh') === '0') return;\n"
  "  if (!document.getElementById('main')) return;  // the sign-in form: nothing live\n"
  "  var typing = false;\n"
  "  document.addEventListener('focusin', function (e) { typing = e.target.tagName === 'INPUT'; });\n"
  "  document.addEventListener('focusout', function () { typing = false; });\n"
  "  setInterval(function () {\n"
  "    if (typing || document.hidden) return;\n"
  "    fetch(location.href, { credentials: 'same-origin' })\n"
  "      .then(function (r) { return r.ok ? r.text() : null; })\n"
  "      .then(function (html) {\n"
  "        if (!html) return;\n"
  "        var fresh = new DOMParser().parseFromString(html, 'text/html').getElementById('main');\n"
  "        var cur = document.getElementById('main');\n"
  "        if (fresh && cur) cur.replaceWith(document.adoptNode(fresh));\n"
  "      })\n"
  "      .catch(function () {});\n"
  "  }, 2000);\n"
  "})();\n";

static const char app_css[] =
  "body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#1d2733;background:#f6f7f9}\n"
  "header{display:flex;gap:1em;align-items:center;padding:.6em 1.2em;background:#16324f;color:#fff}\n"
  "header h1{font-size:1.1em;margin:0}header form{margin-left:auto}\n"
  "main{padding:0 1.2em 2em}section{background:#fff;border:1px solid #dde2e8;border-radius:6px;"
  "padding:.4em 1em 1em;margin-top:1em}\n"
  "h2{font-size:1em;margin:.6em 0}table{border-collapse:collapse;width:100%}\n"
  "th,td{text-align:left;padding:.3em .5em;border-bottom:1px solid #eef1f4;vertical-align:top}\n"
  "th{font-weight:600;color:#4a5a6a}pre.args{margin:0;max-width:32em;max-height:8em;overflow:auto;"
  "white-space:pre-wrap;word-break:break-all;background:#f3f5f8;padding:.3em}\n"
  "dl{display:flex;flex-wrap:wrap;gap:.6em;margin:0}.fig{border:1px solid #e3e7ec;border-radius:4px;"
  "padding:.3em .8em;min-width:7em}dt{color:#5b6b7b;font-size:.85em}dd{margin:0;font-size:1.4em}\n"
  ".ok{color:#17703a}.bad{color:#b3261e}.note{color:#6b7785}#flash{background:#e7f4ea;"
  "padding:.5em 1em;border-radius:4px}\n"
  "button{font:inherit;padding:.2em .8em;border-radius:4px;border:1px solid #8a97a5;background:#fff;"
  "cursor:pointer}button.approve{border-color:#17703a;color:#17703a}"
  "button.deny{border-color:#b3261e;color:#b3261e}\n"
  "form.decide{display:flex;gap:.3em;flex-wrap:wrap}form.decide input{width:10em}\n"
  "tr.selected{background:#eef4fb}svg.wf{max-width:100%;height:auto;font-size:12px}\n"
  "svg .bar{fill:#4f8fcf}svg .bad .bar{fill:#d9534f}svg .held{fill:#f0ad4e}"
  "svg .axis{stroke:#c5ccd4}svg .ms,svg .tick{fill:#6b7785}\n"
  ".key{display:inline-block;width:1em;height:.8em;margin:0 .3em 0 1em;background:#4f8fcf}"
  ".key.bad{background:#d9534f}.key.held{background:#f0ad4e}\n"
  ".signin,.problem{max-width:28em;margin:3em auto;background:#fff;padding:1em 2em;"
  "border:1px solid #dde2e8;border-radius:6px}.signin input{display:block;width:100%;"
  "margin:.5em 0 1em;padding:.4em;box-sizing:border-box}\n";

static int loopback (const char *a) {
  return strcmp(a, "127.0.0.1") == 0 || strcmp(a, "::1") == 0 ||
         strncmp(a, "::ffff:127.", 11) == 0 || strncmp(a, "127.", 4) == 0;
}

enum MHD_Result tp__mcp_ui_http_answer (tp__mcp_ui_http *u, const tp__mcp_ui_req *rq) {
  struct MHD_Connection *c = rq->c;
  const char *url = rq->url;
  int get = strcmp(rq->method, "GET") == 0 || strcmp(rq->method, "HEAD") == 0;
  int post = strcmp(rq->method, "POST") == 0;
  char why[500];
  if (get && strcmp(url, "/ui/app.js") == 0)
    return reply(u, c, 200, "text/javascript; charset=utf-8", app_js, sizeof app_js - 1, NULL, NULL);
  if (get && strcmp(url, "/ui/app.css") == 0)
    return reply(u, c, 200, "text/css; charset=utf-8", app_css, sizeof app_css - 1, NULL, NULL);
  if (!get && !post)
    return problem(u, c, 405, "Method Not Allowed", "the operator page takes GET and POST",
                   NULL);
  if (u->auth == NULL && !loopback(rq->client)) {
    snprintf(why, sizeof why, "the operator page is served to loopback clients only when the "
             "server has no auth (this client: %.60s); configure auth and sign in with a "
             "token that has the \"operator\" scope", rq->client);
    return problem(u, c, 403, "Forbidden", why, NULL);
  }
  usess *s = sess_find(u, MHD_lookup_connection_value(c, MHD_COOKIE_KIND, UI_COOKIE));
  if (get && strcmp(url, "/ui") != 0 && strcmp(url, "/ui/") != 0) {
    snprintf(why, sizeof why, "%.100s is not a page of the operator page (it is at /ui)", url);
    return problem(u, c, 404, "Not Found", why, NULL);
  }
  if (get) {
    char cookie[200];
    if (s && s->signed_in) return main_page(u, c, s, NULL);
    if (u->auth == NULL) {  /* a loopback client: no sign-in */
      if ((s = sess_new(u, 1, NULL)) == NULL)
        return problem(u, c, 500, "Out of memory", "no session could be made", NULL);
      cookie_of(s, cookie, sizeof cookie);
      return main_page(u, c, s, cookie);
    }
    const char *authz = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                    MHD_HTTP_HEADER_AUTHORIZATION);
    if (authz == NULL) return signin_page(u, c, s, 200, NULL);
    tp_auth_result ar;
    int st = tp__mcp_auth_check_scope(u->auth, authz, "operator", (int64_t)time(NULL), &ar);
    if (st != 200) {
      snprintf(why, sizeof why, "the operator page needs a token with the \"operator\" scope: %s",
               ar.description[0] ? ar.description : ar.error);
      return problem(u, c, st == 401 ? 401 : 403, st == 401 ? "Unauthorized" : "Forbidden",
                     why, NULL);
    }
    if ((s = sess_new(u, 1, ar.principal)) == NULL)
      return problem(u, c, 500, "Out of memory", "no session could be made", NULL);
    cookie_of(s, cookie, sizeof cookie);
    return main_page(u, c, s, cookie);
  }
  /* a POST: a whole form from this origin, with the session's CSRF token */
  if (rq->too_big) {
    snprintf(why, sizeof why, "the form is over the %u bytes a form of the operator page may "
             "have", (unsigned)TP__MCP_UI_BODY_MAX);
    return problem(u, c, 413, "Content Too Large", why, NULL);
  }
  const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
  if (ct == NULL || strncasecmp(ct, "application/x-www-form-urlencoded", 33) != 0)
    return problem(u, c, 415, "Unsupported Media Type", "the operator page takes forms: "
                   "Content-Type: application/x-www-form-urlencoded", NULL);
  if (MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin") == NULL)
    return problem(u, c, 403, "Forbidden", "a form post must carry an Origin header (browsers "
                   "send one): posts from elsewhere are refused", NULL);
  field f[UI_FIELDS_MAX];
  char *store = malloc(rq->len * 2 + 2);
  if (store == NULL) return problem(u, c, 500, "Out of memory", "the form was not read", NULL);
  int n = parse_form(rq->body ? rq->body : "", rq->len, f, store, why, sizeof why);
  enum MHD_Result rc;
  if (n < 0) { rc = problem(u, c, 400, "Bad Request", why, NULL); goto out; }
  const char *csrf = field_get(f, n, "csrf");
  if (s == NULL || csrf == NULL || !same_secret(s->csrf, csrf)) {
    rc = problem(u, c, 403, "Forbidden", s == NULL ? "no session: open the operator page "
                 "again (its cookie is missing or expired)" : "the form's CSRF token is "
                 "missing or wrong: open the operator page again and resend", NULL);
    goto out;
  }
  if (strcmp(url, "/ui/signin") == 0) {
    const char *token = field_get(f, n, "token");
    if (u->auth == NULL || s->signed_in) {
      rc = reply(u, c, 303, "text/plain; charset=utf-8", "", 0, NULL, "/ui");
      goto out;
    }
    if (token == NULL || *token == '\0' || strlen(token) > 8000) {
      rc = signin_page(u, c, s, 400, "Give the token (at most 8,000 characters).");
      goto out;
    }
    char *authz = malloc(strlen(token) + 8);
    tp_auth_result ar;
    int st = 500;
    if (authz) {
      snprintf(authz, strlen(token) + 8, "Bearer %s", token);
      st = tp__mcp_auth_check_scope(u->auth, authz, "operator", (int64_t)time(NULL), &ar);
      memset(authz, 0, strlen(authz));
      free(authz);
    }
    if (st != 200) {
      snprintf(why, sizeof why, "%s: %s", st == 403 ? "This token lacks the \"operator\" scope"
               : "The token was not accepted", st == 500 ? "out of memory"
               : ar.description[0] ? ar.description : ar.error);
      rc = signin_page(u, c, s, st == 403 ? 403 : 401, why);
      goto out;
    }
    s->used = 0;  /* a new id once signed in: a planted cookie stays signed out */
    usess *ns = sess_new(u, 1, ar.principal);
    if (ns == NULL) { rc = problem(u, c, 500, "Out of memory", "no session", NULL); goto out; }
    char cookie[200];
    cookie_of(ns, cookie, sizeof cookie);
    rc = reply(u, c, 303, "text/plain; charset=utf-8", "", 0, cookie, "/ui");
    goto out;
  }
  if (!s->signed_in) {
    rc = problem(u, c, 401, "Unauthorized", "sign in first", NULL);
    goto out;
  }
  if (strcmp(url, "/ui/signout") == 0) {
    s->used = 0;
    rc = reply(u, c, 303, "text/plain; charset=utf-8", "", 0,
              UI_COOKIE "=; Path=/ui; HttpOnly; SameSite=Strict; Max-Age=0", "/ui");
    goto out;
  }
  if (strcmp(url, "/ui/decide") != 0) {
    snprintf(why, sizeof why, "%.100s takes no form (decisions go to /ui/decide)", url);
    rc = problem(u, c, 404, "Not Found", why, NULL);
    goto out;
  }
  const char *run = field_get(f, n, "run"), *seq = field_get(f, n, "seq");
  const char *action = field_get(f, n, "action"), *note = field_get(f, n, "note");
  char *end = NULL;
  long long sq = seq ? strtoll(seq, &end, 10) : -1;
  if (run == NULL || *run == '\0' || strlen(run) > 64 || seq == NULL || end == seq ||
      *end != '\0' || sq < 1 || action == NULL ||
      (strcmp(action, "approve") != 0 && strcmp(action, "deny") != 0) ||
      (note && (strlen(note) > 500 || !valid_utf8(note)))) {
    rc = problem(u, c, 400, "Bad Request", "a decision is run (a paused run's id), seq (a "
                 "call's number), action (approve or deny) and an optional note (at most "
                 "500 bytes of UTF-8)", NULL);
    goto out;
  }
  int approve = strcmp(action, "approve") == 0;
  char who[300];
  if (s->principal[0]) snprintf(who, sizeof who, "%s", s->principal);
  else snprintf(who, sizeof who, "local:%.60s", rq->client);
  int st = u->ent.ui_decide ? u->ent.ui_decide(u->ent.s, run, sq, approve, note, who, why,
                                               sizeof why)
                            : (snprintf(why, sizeof why, "decisions are off"), 409);
  if (st != 0) {
    rc = problem(u, c, st, st == 404 ? "Not Found" : st == 409 ? "Conflict"
                 : "Internal Server Error", why, NULL);
    goto out;
  }
  rc = reply(u, c, 303, "text/plain; charset=utf-8", "", 0, NULL,
            approve ? "/ui?done=approve" : "/ui?done=deny");
out:
  free(store);
  return rc;
}
