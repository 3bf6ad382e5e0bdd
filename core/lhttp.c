/*
 * lhttp.c - the C half of tycho.http: request parsing (llhttp), response
 * serialization, connection gauges. lua/tycho/http.lua drives it.
 *
 * Why the split: the connection loop stays in Lua, so a handler may block
 * (tycho.sleep, tycho.call) like any actor code; what costs per request -
 * parsing, building the request table, formatting the response - is C, and
 * each step is one call from Lua:
 *
 *   out, req, tmo = feed(p, bytes)       after each conn:read_some
 *   out, req, tmo, err = respond(p, ok, res, body)   after each handler
 *
 * `req` is the next request table (nil: more bytes needed, false: the
 * connection must close once `out` is written), `out` what to write now in
 * one conn:write (nil: nothing yet), `tmo` the read timeout in seconds for
 * the next read (the idle, header or body deadline, whichever applies).
 *
 * Parsing: one llhttp parser per connection, fed from a buffer holding the
 * received bytes of the message being parsed; its method, URL and header
 * spans are offsets into that buffer, so a message split over many reads is
 * copied only once, into its table. The parser pauses after each complete
 * message: pipelined requests come out one at a time, and their responses
 * gather in one output buffer that goes out when no complete request is
 * left in the received bytes (or the buffer grows past FLUSH_AT).
 *
 * Limits: the request line plus headers (431), the header count (431), the
 * body (413, before reading it when Content-Length says so), HTTP versions
 * other than 1.x (505), anything llhttp refuses (400). Each answers with a
 * response that closes the connection.
 *
 * Gauges: process-wide counters, one per server, that cap its open
 * connections over every worker. A connection holds a slot as a resource
 * of the actor (fork) serving it, so the slot comes back however it ends.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>

#include <llhttp.h>

#include "lhttp.h"

#define PARSER_MT "tycho.http.parser"
#define CONFIG_MT "tycho.http.config"
#define FLUSH_AT (64 * 1024) /* pipelined responses written at this size */
#define MAX_TEXT 80          /* server / default_type values */

typedef struct span {
  uint32_t off, len;
} span;

typedef struct hdr {
  span name, value;
} hdr;

/* Limits and fixed header lines of a server (tycho.http options). */
typedef struct hcfg {
  uint32_t max_head;    /* request line + headers, bytes */
  uint32_t max_headers;
  uint64_t max_body;
  double idle_tmo, head_tmo, body_tmo; /* seconds; < 0: none */
  char server[MAX_TEXT + 16];          /* "Server: tycho\r\n" or "" */
  char ctype[MAX_TEXT + 24];           /* "Content-Type: ...\r\n" or "" */
  uint8_t server_len, ctype_len;
} hcfg;

typedef struct hparser {
  llhttp_t ll;
  hcfg cfg;
  /* Received bytes: in[0..parsed) went through llhttp; only those of the
   * message in progress are kept (from `start`). */
  char *in;
  size_t in_len, in_cap, parsed;
  /* The message in progress (or complete: `ready`). */
  bool in_msg, head_done, ready, have_start, field_open, value_open;
  bool expect, continued;
  size_t start;
  double t_head, t_body; /* when its head / body began (0: not yet noted) */
  span url;
  hdr *h;
  uint32_t nh, hcap;
  char *body;
  size_t body_len, body_cap;
  int status; /* the error response a limit asked for (431, 413, 505) */
  uint8_t method, minor;
  bool keepalive;
  /* Responses not written yet. */
  char *out;
  size_t out_len, out_cap;
  bool closing; /* the last response closes the connection */
  char *scratch; /* lower-cased header names */
  size_t scratch_cap;
} hparser;

/* ---- small helpers ---------------------------------------------------------- */

static double mono_now(void) { return (double)ty__now_ns() * 1e-9; }

static void *xrealloc(void *p, size_t n) {
  p = realloc(p, n);
  if (!p) ty__die("out of memory");
  return p;
}

/* Makes room for n more bytes at buf[*len]. */
static void reserve(char **buf, size_t *cap, size_t len, size_t n) {
  if (*cap - len >= n) return;
  size_t c = *cap ? *cap : 1024;
  while (c - len < n) c *= 2;
  *buf = xrealloc(*buf, c);
  *cap = c;
}

static void out_put(hparser *p, const char *s, size_t n) {
  reserve(&p->out, &p->out_cap, p->out_len, n);
  memcpy(p->out + p->out_len, s, n);
  p->out_len += n;
}

#define OUT_LIT(p, s) out_put((p), (s), sizeof(s) - 1)

static void out_uint(hparser *p, uint64_t v) {
  char b[24];
  int i = (int)sizeof b;
  do b[--i] = (char)('0' + v % 10);
  while ((v /= 10) != 0);
  out_put(p, b + i, sizeof b - (size_t)i);
}

static const char *reason_phrase(int status) {
  switch (status) {
  case 200: return "OK";
  case 201: return "Created";
  case 202: return "Accepted";
  case 203: return "Non-Authoritative Information";
  case 204: return "No Content";
  case 205: return "Reset Content";
  case 206: return "Partial Content";
  case 300: return "Multiple Choices";
  case 301: return "Moved Permanently";
  case 302: return "Found";
  case 303: return "See Other";
  case 304: return "Not Modified";
  case 307: return "Temporary Redirect";
  case 308: return "Permanent Redirect";
  case 400: return "Bad Request";
  case 401: return "Unauthorized";
  case 402: return "Payment Required";
  case 403: return "Forbidden";
  case 404: return "Not Found";
  case 405: return "Method Not Allowed";
  case 406: return "Not Acceptable";
  case 408: return "Request Timeout";
  case 409: return "Conflict";
  case 410: return "Gone";
  case 411: return "Length Required";
  case 412: return "Precondition Failed";
  case 413: return "Payload Too Large";
  case 414: return "URI Too Long";
  case 415: return "Unsupported Media Type";
  case 416: return "Range Not Satisfiable";
  case 417: return "Expectation Failed";
  case 418: return "I'm a teapot";
  case 422: return "Unprocessable Entity";
  case 425: return "Too Early";
  case 426: return "Upgrade Required";
  case 428: return "Precondition Required";
  case 429: return "Too Many Requests";
  case 431: return "Request Header Fields Too Large";
  case 451: return "Unavailable For Legal Reasons";
  case 500: return "Internal Server Error";
  case 501: return "Not Implemented";
  case 502: return "Bad Gateway";
  case 503: return "Service Unavailable";
  case 504: return "Gateway Timeout";
  case 505: return "HTTP Version Not Supported";
  default: return status < 300 ? "OK" : status < 400 ? "Redirect"
                : status < 500 ? "Client Error" : "Server Error";
  }
}

/* "Date: ...\r\n", formatted once per second per thread (no locale: the
 * day and month names are HTTP's, not strftime's). */
static const char *date_line(size_t *len) {
  static _Thread_local time_t t_sec = -1;
  static _Thread_local char t_line[48];
  static _Thread_local size_t t_len;
  static const char days[7][4] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
  static const char months[12][4] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                     "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME_COARSE, &ts);
  if (ts.tv_sec != t_sec) {
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    int n = snprintf(t_line, sizeof t_line,
                     "Date: %s, %02d %s %04d %02d:%02d:%02d GMT\r\n",
                     days[tm.tm_wday], tm.tm_mday, months[tm.tm_mon],
                     tm.tm_year + 1900, tm.tm_hour, tm.tm_min, tm.tm_sec);
    t_len = (size_t)n;
    t_sec = ts.tv_sec;
  }
  *len = t_len;
  return t_line;
}

/* ---- llhttp callbacks ---------------------------------------------------------- */

static hparser *of(llhttp_t *ll) { return ll->data; }

/* A limit was hit: llhttp stops with an error; `status` says which. */
static int refuse(hparser *p, int status) {
  p->status = status;
  return HPE_USER;
}

static int on_message_begin(llhttp_t *ll) {
  hparser *p = of(ll);
  p->in_msg = true;
  p->head_done = p->have_start = p->field_open = p->value_open = false;
  p->expect = p->continued = false;
  p->t_head = p->t_body = 0;
  p->url = (span){0, 0};
  p->nh = 0;
  p->body_len = 0;
  return 0;
}

/* Every span of the head goes through here: the head may not outgrow its
 * limit, however slowly it comes. Returns the span's end offset. */
static int head_span(hparser *p, const char *at, size_t len, size_t *end) {
  size_t off = (size_t)(at - p->in);
  if (!p->have_start) {
    p->have_start = true;
    p->start = off;
  }
  *end = off + len;
  if (*end - p->start > p->cfg.max_head) return refuse(p, 431);
  return 0;
}

static int on_method(llhttp_t *ll, const char *at, size_t len) {
  size_t end;
  return head_span(of(ll), at, len, &end);
}

static int on_url(llhttp_t *ll, const char *at, size_t len) {
  hparser *p = of(ll);
  size_t end;
  if (head_span(p, at, len, &end)) return HPE_USER;
  if (!p->url.len) p->url.off = (uint32_t)(at - p->in);
  p->url.len = (uint32_t)(end - p->url.off);
  return 0;
}

static int on_version(llhttp_t *ll, const char *at, size_t len) {
  size_t end;
  return head_span(of(ll), at, len, &end);
}

static int on_header_field(llhttp_t *ll, const char *at, size_t len) {
  hparser *p = of(ll);
  size_t end;
  if (head_span(p, at, len, &end)) return HPE_USER;
  if (!p->field_open) { /* a new header */
    if (p->nh >= p->cfg.max_headers) return refuse(p, 431);
    if (p->nh == p->hcap) {
      p->hcap = p->hcap ? p->hcap * 2 : 16;
      p->h = xrealloc(p->h, p->hcap * sizeof *p->h);
    }
    hdr *h = &p->h[p->nh++];
    h->name.off = (uint32_t)(at - p->in);
    h->value = (span){0, 0};
    p->field_open = true;
    p->value_open = false;
  }
  hdr *h = &p->h[p->nh - 1];
  h->name.len = (uint32_t)(end - h->name.off);
  return 0;
}

static int on_header_field_complete(llhttp_t *ll) {
  of(ll)->field_open = false;
  return 0;
}

static int on_header_value(llhttp_t *ll, const char *at, size_t len) {
  hparser *p = of(ll);
  size_t end;
  if (head_span(p, at, len, &end)) return HPE_USER;
  hdr *h = &p->h[p->nh - 1];
  if (!p->value_open) {
    h->value.off = (uint32_t)(at - p->in);
    p->value_open = true;
  }
  h->value.len = (uint32_t)(end - h->value.off);
  return 0;
}

static int on_header_value_complete(llhttp_t *ll) {
  of(ll)->value_open = false;
  return 0;
}

static bool span_is(const hparser *p, span s, const char *lit) {
  size_t n = strlen(lit);
  return s.len == n && strncasecmp(p->in + s.off, lit, n) == 0;
}

static int on_headers_complete(llhttp_t *ll) {
  hparser *p = of(ll);
  p->head_done = true;
  if (ll->http_major != 1) {
    p->status = 505;
    return -1;
  }
  if ((ll->flags & F_CONTENT_LENGTH) && ll->content_length > p->cfg.max_body) {
    p->status = 413; /* before the body is sent at all */
    return -1;
  }
  for (uint32_t i = 0; i < p->nh; i++)
    if (span_is(p, p->h[i].name, "expect") &&
        span_is(p, p->h[i].value, "100-continue"))
      p->expect = true;
  return 0;
}

static int on_body(llhttp_t *ll, const char *at, size_t len) {
  hparser *p = of(ll);
  if (p->body_len + len > p->cfg.max_body) return refuse(p, 413);
  reserve(&p->body, &p->body_cap, p->body_len, len);
  memcpy(p->body + p->body_len, at, len);
  p->body_len += len;
  return 0;
}

/* Pauses: one request at a time comes out of the bytes received. */
static int on_message_complete(llhttp_t *ll) {
  hparser *p = of(ll);
  p->ready = true;
  p->in_msg = false;
  p->method = ll->method;
  p->minor = ll->http_minor;
  p->keepalive = llhttp_should_keep_alive(ll) && ll->method != HTTP_CONNECT;
  return HPE_PAUSED;
}

static const llhttp_settings_t settings = {
    .on_message_begin = on_message_begin,
    .on_method = on_method,
    .on_url = on_url,
    .on_version = on_version,
    .on_header_field = on_header_field,
    .on_header_field_complete = on_header_field_complete,
    .on_header_value = on_header_value,
    .on_header_value_complete = on_header_value_complete,
    .on_headers_complete = on_headers_complete,
    .on_body = on_body,
    .on_message_complete = on_message_complete,
};

/* ---- parsing ------------------------------------------------------------------ */

enum { ADV_NEED, ADV_MSG, ADV_ERR };

/* Drops what no span refers to any more, then appends data. */
static void take_bytes(hparser *p, const char *data, size_t len) {
  size_t keep = p->parsed;
  if (p->in_msg && p->have_start && p->start < keep) keep = p->start;
  if (keep) {
    memmove(p->in, p->in + keep, p->in_len - keep);
    p->in_len -= keep;
    p->parsed -= keep;
    if (p->have_start) p->start -= keep;
    p->url.off -= p->url.len ? (uint32_t)keep : 0;
    for (uint32_t i = 0; i < p->nh; i++) {
      p->h[i].name.off -= (uint32_t)keep;
      if (p->h[i].value.len) p->h[i].value.off -= (uint32_t)keep;
    }
  }
  reserve(&p->in, &p->in_cap, p->in_len, len);
  memcpy(p->in + p->in_len, data, len);
  p->in_len += len;
}

/* Parses received bytes up to the next complete message. */
static int advance(hparser *p) {
  while (!p->ready && p->parsed < p->in_len) {
    const char *from = p->in + p->parsed;
    llhttp_errno_t e = llhttp_execute(&p->ll, from, p->in_len - p->parsed);
    if (e == HPE_OK) {
      p->parsed = p->in_len;
    } else if (e == HPE_PAUSED || e == HPE_PAUSED_UPGRADE) {
      /* We do not switch protocols: after an Upgrade request, HTTP goes
       * on (CONNECT closes instead, see on_message_complete). */
      p->parsed = (size_t)(llhttp_get_error_pos(&p->ll) - p->in);
      if (e == HPE_PAUSED) llhttp_resume(&p->ll);
      else llhttp_resume_after_upgrade(&p->ll);
    } else {
      if (!p->status) p->status = 400;
      return ADV_ERR;
    }
  }
  if (p->ready) return ADV_MSG;
  /* Bytes between spans (whitespace) count against the head too. */
  if (p->in_msg && !p->head_done && p->have_start &&
      p->parsed - p->start > p->cfg.max_head) {
    p->status = 431;
    return ADV_ERR;
  }
  return ADV_NEED;
}

/* Seconds the next read may wait: the idle wait between requests, else
 * what is left of the head's or the body's deadline. -1: no limit. */
static double next_timeout(hparser *p) {
  if (!p->in_msg) return p->cfg.idle_tmo;
  double now = mono_now(), *t0 = p->head_done ? &p->t_body : &p->t_head;
  double lim = p->head_done ? p->cfg.body_tmo : p->cfg.head_tmo;
  if (lim < 0) return -1;
  if (*t0 == 0) *t0 = now;
  double left = *t0 + lim - now;
  return left > 0 ? left : 0;
}

/* ---- the request table ---------------------------------------------------------- */

static char *scratch(hparser *p, size_t n) {
  if (p->scratch_cap < n) {
    p->scratch_cap = n < 256 ? 256 : n;
    p->scratch = xrealloc(p->scratch, p->scratch_cap);
  }
  return p->scratch;
}

static void push_lower(lua_State *L, hparser *p, const char *s, size_t n) {
  char *b = scratch(p, n);
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    b[i] = (char)(c >= 'A' && c <= 'Z' ? c + 32 : c);
  }
  lua_pushlstring(L, b, n);
}

/* Header values lose their trailing blanks (llhttp drops the leading). */
static span trim(const hparser *p, span v) {
  while (v.len && (p->in[v.off + v.len - 1] == ' ' ||
                   p->in[v.off + v.len - 1] == '\t'))
    v.len--;
  return v;
}

static bool same_name(const hparser *p, span a, span b) {
  return a.len == b.len && strncasecmp(p->in + a.off, p->in + b.off, a.len) == 0;
}

/* Pushes the headers table: lower-case names, repeated headers joined with
 * ", " ("; " for cookie), and the metatable that lower-cases lookups. */
static void push_headers(lua_State *L, hparser *p) {
  lua_createtable(L, 0, (int)p->nh);
  for (uint32_t i = 0; i < p->nh; i++) {
    span n = p->h[i].name, v = trim(p, p->h[i].value);
    bool dup = false;
    for (uint32_t j = 0; j < i && !dup; j++) dup = same_name(p, n, p->h[j].name);
    push_lower(L, p, p->in + n.off, n.len);
    if (dup) {
      lua_pushvalue(L, -1);
      lua_rawget(L, -3);
      if (span_is(p, n, "cookie")) lua_pushliteral(L, "; ");
      else lua_pushliteral(L, ", ");
      lua_pushlstring(L, p->in + v.off, v.len);
      lua_concat(L, 3);
    } else {
      lua_pushlstring(L, p->in + v.off, v.len);
    }
    lua_rawset(L, -3);
  }
  lua_pushvalue(L, lua_upvalueindex(1)); /* UV_HDR_MT */
  lua_setmetatable(L, -2);
}

/* The C functions' upvalues: the headers metatable, then the strings the
 * request and response tables use as keys and values, interned once (a
 * lua_setfield would hash its key on every call). */
enum {
  UV_HDR_MT = 1, UV_METHOD, UV_PATH, UV_QUERY, UV_VERSION, UV_HEADERS, UV_BODY,
  UV_STATUS, UV_V11, UV_V10, UV_METHODS, UV_COUNT = UV_METHODS
};
static const char *const uv_strings[] = {"method", "path", "query", "version",
                                         "headers", "body", "status", "1.1",
                                         "1.0"};

#define UV(i) lua_upvalueindex(i)

/* Pushes the interned key; the caller pushes its value and calls
 * lua_rawset(L, -3) (no lua_insert on the way). */
static void key(lua_State *L, int k) { lua_pushvalue(L, UV(k)); }

/* Pushes the method's name: one interned string per method (upvalue
 * table, filled on first use). */
static void push_method(lua_State *L, uint8_t m) {
  lua_rawgeti(L, UV(UV_METHODS), m);
  if (!lua_isnil(L, -1)) return;
  lua_pop(L, 1);
  lua_pushstring(L, llhttp_method_name((llhttp_method_t)m));
  lua_pushvalue(L, -1);
  lua_rawseti(L, UV(UV_METHODS), m);
}

static void push_request(lua_State *L, hparser *p) {
  lua_createtable(L, 0, 6);
  key(L, UV_METHOD);
  push_method(L, p->method);
  lua_rawset(L, -3);
  const char *u = p->in + p->url.off;
  const char *q = memchr(u, '?', p->url.len);
  key(L, UV_PATH);
  lua_pushlstring(L, u, q ? (size_t)(q - u) : p->url.len);
  lua_rawset(L, -3);
  if (q) {
    key(L, UV_QUERY);
    lua_pushlstring(L, q + 1, p->url.len - (size_t)(q + 1 - u));
    lua_rawset(L, -3);
  }
  key(L, UV_VERSION);
  lua_pushvalue(L, UV(p->minor ? UV_V11 : UV_V10));
  lua_rawset(L, -3);
  key(L, UV_HEADERS);
  push_headers(L, p);
  lua_rawset(L, -3);
  key(L, UV_BODY);
  lua_pushlstring(L, p->body ? p->body : "", p->body_len);
  lua_rawset(L, -3);
}

/* ---- responses ------------------------------------------------------------------ */

static bool body_allowed(int status) {
  return status >= 200 && status != 204 && status != 304;
}

/* Status line, Server, Date: what every response starts with. */
static void put_head(hparser *p, int status) {
  OUT_LIT(p, "HTTP/1.1 ");
  out_uint(p, (uint64_t)status);
  out_put(p, " ", 1);
  const char *r = reason_phrase(status);
  out_put(p, r, strlen(r));
  OUT_LIT(p, "\r\n");
}

static void put_std(hparser *p, bool server, bool date, bool ctype, int status) {
  if (server) out_put(p, p->cfg.server, p->cfg.server_len);
  if (date) {
    size_t n;
    const char *d = date_line(&n);
    out_put(p, d, n);
  }
  if (ctype && body_allowed(status)) out_put(p, p->cfg.ctype, p->cfg.ctype_len);
}

/* Content-Length, Connection, the blank line and the body. */
static void put_tail(hparser *p, int status, const char *body, size_t blen) {
  if (body_allowed(status)) {
    OUT_LIT(p, "Content-Length: ");
    out_uint(p, blen);
    OUT_LIT(p, "\r\n");
  }
  if (p->closing) OUT_LIT(p, "Connection: close\r\n");
  else if (!p->minor) OUT_LIT(p, "Connection: keep-alive\r\n");
  OUT_LIT(p, "\r\n");
  if (body_allowed(status) && p->method != HTTP_HEAD) out_put(p, body, blen);
}

/* A response of ours (an error, a limit): plain text, and the connection
 * ends after it unless keep is set (a handler error leaves it usable). */
static void put_simple(hparser *p, int status, bool keep) {
  if (!keep) p->closing = true;
  put_head(p, status);
  put_std(p, p->cfg.server_len > 0, true, false, status);
  OUT_LIT(p, "Content-Type: text/plain\r\n");
  char body[64];
  int n = snprintf(body, sizeof body, "%s\n", reason_phrase(status));
  put_tail(p, status, body, (size_t)n);
}

/* Token characters of RFC 9110 (header names). */
static bool is_tchar(unsigned char c) {
  static const uint64_t map[4] = {
      /* 0-63: ! # $ % & ' * + - . 0-9 */
      0x03ff6cfa00000000ull,
      /* 64-127: A-Z ^ _ ` a-z | ~ */
      0x57ffffffc7fffffeull, 0, 0};
  return (map[c >> 6] >> (c & 63)) & 1;
}

static const char *check_header(const char *k, size_t kl, const char *v,
                                size_t vl) {
  if (!kl) return "empty header name";
  for (size_t i = 0; i < kl; i++)
    if (!is_tchar((unsigned char)k[i])) return "bad character in a header name";
  for (size_t i = 0; i < vl; i++)
    if (v[i] == '\r' || v[i] == '\n' || v[i] == '\0')
      return "CR, LF or NUL in a header value";
  return NULL;
}

enum { H_SERVER = 1, H_DATE = 2, H_CTYPE = 4 };

static bool name_is(const char *k, size_t kl, const char *lit) {
  size_t n = strlen(lit);
  return kl == n && strncasecmp(k, lit, n) == 0;
}

/* One user header line; returns an error message or NULL. Framing headers
 * are ours: Content-Length and Transfer-Encoding are dropped, Connection:
 * close ends the connection after the response. */
static const char *put_header(hparser *p, const char *k, size_t kl,
                              const char *v, size_t vl, int *seen) {
  const char *err = check_header(k, kl, v, vl);
  if (err) return err;
  if (name_is(k, kl, "content-length") || name_is(k, kl, "transfer-encoding"))
    return NULL;
  if (name_is(k, kl, "connection")) {
    if (vl == 5 && strncasecmp(v, "close", 5) == 0) p->closing = true;
    return NULL;
  }
  if (name_is(k, kl, "server")) *seen |= H_SERVER;
  else if (name_is(k, kl, "date")) *seen |= H_DATE;
  else if (name_is(k, kl, "content-type")) *seen |= H_CTYPE;
  out_put(p, k, kl);
  OUT_LIT(p, ": ");
  out_put(p, v, vl);
  OUT_LIT(p, "\r\n");
  return NULL;
}

/* The headers table at idx: name -> string | number | array of those. */
static const char *put_headers(lua_State *L, hparser *p, int idx, int *seen) {
  if (lua_isnil(L, idx)) return NULL;
  if (!lua_istable(L, idx)) return "headers must be a table";
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    if (lua_type(L, -2) != LUA_TSTRING) {
      lua_pop(L, 2);
      return "header names must be strings";
    }
    size_t kl, vl;
    const char *k = lua_tolstring(L, -2, &kl), *err = NULL;
    int t = lua_type(L, -1);
    if (t == LUA_TSTRING || t == LUA_TNUMBER) {
      const char *v = lua_tolstring(L, -1, &vl);
      err = put_header(p, k, kl, v, vl, seen);
    } else if (t == LUA_TTABLE) { /* repeated: Set-Cookie */
      int n = (int)lua_objlen(L, -1);
      for (int i = 1; i <= n && !err; i++) {
        lua_rawgeti(L, -1, i);
        const char *v = lua_tolstring(L, -1, &vl);
        err = v ? put_header(p, k, kl, v, vl, seen)
                : "header values must be strings or numbers";
        lua_pop(L, 1);
      }
    } else {
      err = "header values must be strings, numbers or arrays of those";
    }
    lua_pop(L, 1);
    if (err) {
      lua_pop(L, 1);
      return err;
    }
  }
  return NULL;
}

/* The status at idx (nil: 200) into *status; an error message or NULL. */
static const char *get_status(lua_State *L, int idx, int *status) {
  int t = lua_type(L, idx);
  if (t == LUA_TNIL) return NULL;
  if (t != LUA_TNUMBER) return "status must be a number";
  lua_Number s = lua_tonumber(L, idx);
  if (!(s >= 200 && s <= 599) || s != floor(s))
    return "status must be an integer from 200 to 599";
  *status = (int)s;
  return NULL;
}

/* The handler's answer: {status=, headers=, body=}, or status [, body], or
 * a body string. Returns an error message (nothing written) or NULL. */
static const char *put_response(lua_State *L, hparser *p, int ri, int bi) {
  int status = 200, hi = 0, top = lua_gettop(L);
  const char *err = NULL;
  switch (lua_type(L, ri)) {
  case LUA_TTABLE:
    lua_pushvalue(L, UV(UV_STATUS));
    lua_rawget(L, ri);
    lua_pushvalue(L, UV(UV_HEADERS));
    lua_rawget(L, ri);
    lua_pushvalue(L, UV(UV_BODY));
    lua_rawget(L, ri);
    hi = top + 2;
    bi = top + 3;
    err = get_status(L, top + 1, &status);
    break;
  case LUA_TNUMBER:
    err = get_status(L, ri, &status);
    break;
  case LUA_TSTRING:
    bi = ri;
    break;
  case LUA_TNIL:
    return "the handler returned nothing (return {status=, headers=, body=}, "
           "or status, body)";
  default:
    return "the handler returned a value that is not a response (return "
           "{status=, headers=, body=}, or status, body)";
  }
  if (err) return err;
  int bt = lua_type(L, bi);
  if (bt != LUA_TNIL && bt != LUA_TNONE && bt != LUA_TSTRING && bt != LUA_TNUMBER)
    return "body must be a string";
  size_t blen = 0;
  const char *body = bt == LUA_TNIL || bt == LUA_TNONE ? "" : lua_tolstring(L, bi, &blen);
  if (!p->keepalive) p->closing = true;
  put_head(p, status);
  int seen = 0;
  err = hi ? put_headers(L, p, hi, &seen) : NULL;
  if (err) return err;
  put_std(p, !(seen & H_SERVER) && p->cfg.server_len, !(seen & H_DATE),
          !(seen & H_CTYPE) && p->cfg.ctype_len, status);
  put_tail(p, status, body, blen);
  lua_settop(L, top);
  return NULL;
}

/* ---- the Lua functions ------------------------------------------------------------ */

static hparser *check_parser(lua_State *L) {
  return luaL_checkudata(L, 1, PARSER_MT);
}

/* Pushes out (or nil when empty) and empties it. */
static void push_out(lua_State *L, hparser *p) {
  if (!p->out_len) {
    lua_pushnil(L);
    return;
  }
  lua_pushlstring(L, p->out, p->out_len);
  p->out_len = 0;
}

/* The common end of feed and respond: out, req|nil|false, tmo. */
static int step(lua_State *L, hparser *p, int r) {
  if (r == ADV_ERR) put_simple(p, p->status, false);
  if (r == ADV_NEED && p->expect && !p->continued && p->head_done) {
    p->continued = true; /* the client waits for this before the body */
    OUT_LIT(p, "HTTP/1.1 100 Continue\r\n\r\n");
  }
  if (r == ADV_MSG) {
    if (p->out_len >= FLUSH_AT) push_out(L, p);
    else lua_pushnil(L);
    push_request(L, p);
    return 2;
  }
  push_out(L, p);
  if (r == ADV_ERR) {
    lua_pushboolean(L, 0);
    return 2;
  }
  lua_pushnil(L);
  lua_pushnumber(L, next_timeout(p));
  return 3;
}

/* feed(p, bytes) -> out, req|nil|false, tmo */
static int l_feed(lua_State *L) {
  hparser *p = check_parser(L);
  size_t len;
  const char *data = luaL_checklstring(L, 2, &len);
  if (p->closing || p->ready)
    return luaL_error(L, "tycho.http: feed after the end or before respond");
  take_bytes(p, data, len);
  return step(L, p, advance(p));
}

/* respond(p, ok, res, body) -> out, req|nil|false, tmo, err: answers the
 * request feed or respond returned; a handler failure (ok false) or an
 * answer that is not a response gives a 500 (err says why, to log). */
static int l_respond(lua_State *L) {
  hparser *p = check_parser(L);
  if (!p->ready) return luaL_error(L, "tycho.http: respond without a request");
  p->ready = false;
  size_t mark = p->out_len;
  const char *err = NULL;
  if (!lua_toboolean(L, 2)) {
    put_simple(p, 500, p->keepalive);
  } else if ((err = put_response(L, p, 3, 4)) != NULL) {
    p->out_len = mark; /* nothing half-written */
    p->closing = false;
    put_simple(p, 500, p->keepalive);
  }
  int n;
  if (p->closing) {
    push_out(L, p);
    lua_pushboolean(L, 0);
    n = 2;
  } else {
    n = step(L, p, advance(p));
  }
  if (!err) return n;
  for (; n < 3; n++) lua_pushnil(L);
  lua_pushstring(L, err);
  return 4;
}

/* expired(p) -> out | nil: a read timed out; a request cut short gets a
 * 408, an idle connection just closes. */
static int l_expired(lua_State *L) {
  hparser *p = check_parser(L);
  if (!p->in_msg) return 0;
  p->keepalive = false;
  p->minor = 1;
  p->method = HTTP_GET;
  put_simple(p, 408, false);
  push_out(L, p);
  return 1;
}

/* reject(cfg, status) -> a complete response that closes the connection
 * (503 when a server is at its connection limit). */
static int l_reject(lua_State *L) {
  hcfg *cfg = luaL_checkudata(L, 1, CONFIG_MT);
  int status = (int)luaL_checkinteger(L, 2);
  hparser p = {.cfg = *cfg, .minor = 1, .method = HTTP_GET};
  put_simple(&p, status, false);
  lua_pushlstring(L, p.out, p.out_len);
  free(p.out);
  return 1;
}

static int l_parser_gc(lua_State *L) {
  hparser *p = lua_touserdata(L, 1);
  free(p->in);
  free(p->h);
  free(p->body);
  free(p->out);
  free(p->scratch);
  p->in = p->body = p->out = p->scratch = NULL;
  p->h = NULL;
  return 0;
}

/* parser(cfg) -> a parser for one connection. */
static int l_parser(lua_State *L) {
  hcfg *cfg = luaL_checkudata(L, 1, CONFIG_MT);
  hparser *p = lua_newuserdata(L, sizeof *p);
  memset(p, 0, sizeof *p);
  p->cfg = *cfg;
  llhttp_init(&p->ll, HTTP_REQUEST, &settings);
  p->ll.data = p;
  luaL_getmetatable(L, PARSER_MT);
  lua_setmetatable(L, -2);
  return 1;
}

/* ---- configuration --------------------------------------------------------------- */

static double opt_num(lua_State *L, const char *k, double def, double lo,
                      double hi, bool integer) {
  lua_getfield(L, 1, k);
  double v = def;
  if (!lua_isnil(L, -1)) {
    if (lua_type(L, -1) != LUA_TNUMBER)
      luaL_error(L, "tycho.http: %s must be a number", k);
    v = lua_tonumber(L, -1);
    if (!(v >= lo && v <= hi) || (integer && v != floor(v)))
      luaL_error(L, "tycho.http: %s must be %s from %.0f to %.0f", k,
                 integer ? "an integer" : "a number", lo, hi);
  }
  lua_pop(L, 1);
  return v;
}

/* A timeout option: seconds > 0; a negative number or math.huge: none. */
static double opt_timeout(lua_State *L, const char *k, double def) {
  lua_getfield(L, 1, k);
  double v = def;
  if (!lua_isnil(L, -1)) {
    v = lua_tonumber(L, -1);
    if (lua_type(L, -1) != LUA_TNUMBER || v == 0 || v != v)
      luaL_error(L, "tycho.http: %s must be a number of seconds > 0 (or -1 "
                 "for none)", k);
    if (v < 0 || v == HUGE_VAL) v = -1;
  }
  lua_pop(L, 1);
  return v;
}

/* A text option written as a header line; false leaves the line out. */
static uint8_t opt_line(lua_State *L, const char *k, const char *def,
                        const char *name, char *dst, size_t cap) {
  lua_getfield(L, 1, k);
  const char *v = def;
  if (lua_type(L, -1) == LUA_TBOOLEAN && !lua_toboolean(L, -1)) v = NULL;
  else if (!lua_isnil(L, -1) && lua_type(L, -1) != LUA_TSTRING)
    luaL_error(L, "tycho.http: %s must be a string or false", k);
  else if (!lua_isnil(L, -1)) v = lua_tostring(L, -1);
  uint8_t n = 0;
  if (v) {
    size_t vl = strlen(v);
    if (vl > MAX_TEXT || check_header("x", 1, v, vl))
      luaL_error(L, "tycho.http: %s must be at most %d characters, without "
                 "CR or LF", k, MAX_TEXT);
    n = (uint8_t)snprintf(dst, cap, "%s: %s\r\n", name, v);
  }
  lua_pop(L, 1);
  return n;
}

/* config(opts) -> cfg: validates the limits of tycho.http options. */
static int l_config(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  hcfg c;
  memset(&c, 0, sizeof c);
  c.max_head = (uint32_t)opt_num(L, "max_header_size", 32768, 64, 1 << 26, true);
  c.max_headers = (uint32_t)opt_num(L, "max_headers", 100, 1, 1 << 20, true);
  c.max_body = (uint64_t)opt_num(L, "max_body_size", 1 << 20, 0, 1e15, true);
  c.head_tmo = opt_timeout(L, "header_timeout", 60);
  c.body_tmo = opt_timeout(L, "body_timeout", 60);
  c.idle_tmo = opt_timeout(L, "idle_timeout", 75);
  c.server_len = opt_line(L, "server", "tycho", "Server", c.server, sizeof c.server);
  c.ctype_len = opt_line(L, "default_type", "text/plain", "Content-Type",
                         c.ctype, sizeof c.ctype);
  hcfg *u = lua_newuserdata(L, sizeof *u);
  *u = c;
  luaL_getmetatable(L, CONFIG_MT);
  lua_setmetatable(L, -2);
  return 1;
}

/* shutdown_send(fd) -> true | nil: ends the sending side of a connection
 * whose response closed it, so that the client sees the end while the
 * server drains what it still sends (lingering close). A stand-in until
 * tycho.tcp connections have a shutdown method. */
static int l_shutdown_send(lua_State *L) {
  int fd = (int)luaL_checkinteger(L, 1);
  if (shutdown(fd, SHUT_WR) != 0) return 0;
  lua_pushboolean(L, 1);
  return 1;
}

/* date() -> the Date header value now (for specs). */
static int l_date(lua_State *L) {
  size_t n;
  const char *d = date_line(&n);
  lua_pushlstring(L, d + 6, n - 8);
  return 1;
}

/* __index of headers tables: names are stored lower-case. */
static int l_headers_index(lua_State *L) {
  size_t n;
  if (lua_type(L, 2) != LUA_TSTRING) return 0;
  const char *k = lua_tolstring(L, 2, &n);
  char small[64], *b = n <= sizeof small ? small : ty__xmalloc(n);
  bool changed = false;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)k[i];
    changed |= c >= 'A' && c <= 'Z';
    b[i] = (char)(c >= 'A' && c <= 'Z' ? c + 32 : c);
  }
  if (changed) {
    lua_pushlstring(L, b, n);
    lua_rawget(L, 1);
  }
  if (b != small) free(b);
  return changed ? 1 : 0;
}

/* ---- gauges ---------------------------------------------------------------------- */

/* A gauge is named by an id (index | generation << 20) that any worker can
 * hold: a stale id (freed gauge) finds a newer generation and is ignored. */
typedef struct gauge {
  uint32_t gen;
  int count, max;
  bool live;
} gauge;

#define GAUGE_BITS 20

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static gauge *g_tab;
static uint32_t g_n;

/* Under g_mu: the live gauge named id, or NULL. */
static gauge *gauge_find(double id) {
  if (!(id >= 0) || id != floor(id)) return NULL;
  uint64_t v = (uint64_t)id;
  uint32_t i = (uint32_t)(v & ((1u << GAUGE_BITS) - 1));
  if (i >= g_n || !g_tab[i].live || g_tab[i].gen != (uint32_t)(v >> GAUGE_BITS))
    return NULL;
  return &g_tab[i];
}

typedef struct gauge_res {
  lt_res res; /* first: the cast back */
  double id;
  bool owner; /* the gauge itself (else one slot of it) */
} gauge_res;

static void gauge_res_close(lt_res *r) {
  gauge_res *g = (gauge_res *)r;
  pthread_mutex_lock(&g_mu);
  gauge *ga = gauge_find(g->id);
  if (ga && g->owner) ga->live = false;
  else if (ga) ga->count--;
  pthread_mutex_unlock(&g_mu);
  free(g);
}

static lt_actor *current_la(lua_State *L, const char *fname) {
  ty_actor *a = ty_actor_current();
  if (!a) luaL_error(L, "tycho.http.%s must be called from inside an actor", fname);
  return a->user;
}

static void hold(lt_actor *la, double id, bool owner) {
  gauge_res *g = ty__xcalloc(1, sizeof *g);
  g->res.close = gauge_res_close;
  g->id = id;
  g->owner = owner;
  lt_res_add(la, &g->res);
}

/* gauge_new(max) -> id: lives while the calling actor does. */
static int l_gauge_new(lua_State *L) {
  int max = (int)luaL_checkinteger(L, 1);
  lt_actor *la = current_la(L, "gauge_new");
  pthread_mutex_lock(&g_mu);
  uint32_t i = 0;
  while (i < g_n && g_tab[i].live) i++;
  if (i == g_n) {
    if (g_n >= (1u << GAUGE_BITS)) {
      pthread_mutex_unlock(&g_mu);
      return luaL_error(L, "tycho.http: too many servers");
    }
    g_tab = xrealloc(g_tab, ++g_n * sizeof *g_tab);
    g_tab[i].gen = 0;
  }
  gauge *ga = &g_tab[i];
  ga->gen++;
  ga->count = 0;
  ga->max = max;
  ga->live = true;
  double id = (double)(((uint64_t)ga->gen << GAUGE_BITS) | i);
  pthread_mutex_unlock(&g_mu);
  hold(la, id, true);
  lua_pushnumber(L, id);
  return 1;
}

/* gauge_enter(id) -> true | false (full): a slot held by the calling actor
 * (a connection's fork) until it ends. A freed gauge admits everyone. */
static int l_gauge_enter(lua_State *L) {
  double id = luaL_checknumber(L, 1);
  lt_actor *la = current_la(L, "gauge_enter");
  pthread_mutex_lock(&g_mu);
  gauge *ga = gauge_find(id);
  bool ok = !ga || ga->count < ga->max;
  if (ga && ok) ga->count++;
  pthread_mutex_unlock(&g_mu);
  if (ga && ok) hold(la, id, false);
  lua_pushboolean(L, ok);
  return 1;
}

/* gauge_count(id) -> open slots, or nil once freed. */
static int l_gauge_count(lua_State *L) {
  double id = luaL_checknumber(L, 1);
  pthread_mutex_lock(&g_mu);
  gauge *ga = gauge_find(id);
  int n = ga ? ga->count : -1;
  pthread_mutex_unlock(&g_mu);
  if (n < 0) return 0;
  lua_pushinteger(L, n);
  return 1;
}

/* gauge_free(id): before its owner ends (a server closed). */
static int l_gauge_free(lua_State *L) {
  double id = luaL_checknumber(L, 1);
  pthread_mutex_lock(&g_mu);
  gauge *ga = gauge_find(id);
  if (ga) ga->live = false;
  pthread_mutex_unlock(&g_mu);
  return 0;
}

/* ---- module ---------------------------------------------------------------------- */

void lt_open_http(lua_State *L) {
  luaL_newmetatable(L, PARSER_MT);
  lua_pushcfunction(L, l_parser_gc);
  lua_setfield(L, -2, "__gc");
  lua_pop(L, 1);
  luaL_newmetatable(L, CONFIG_MT);
  lua_pop(L, 1);
  static const luaL_Reg funcs[] = {
      {"config", l_config},           {"parser", l_parser},
      {"feed", l_feed},               {"respond", l_respond},
      {"expired", l_expired},         {"reject", l_reject},
      {"date", l_date},               {"shutdown_send", l_shutdown_send},
      {"gauge_new", l_gauge_new},
      {"gauge_enter", l_gauge_enter}, {"gauge_count", l_gauge_count},
      {"gauge_free", l_gauge_free},   {NULL, NULL}};
  lua_newtable(L);
  /* The upvalues of every function (UV_*). */
  lua_createtable(L, 0, 1);
  lua_pushcfunction(L, l_headers_index);
  lua_setfield(L, -2, "__index");
  for (size_t i = 0; i < sizeof uv_strings / sizeof *uv_strings; i++)
    lua_pushstring(L, uv_strings[i]);
  lua_createtable(L, 64, 0); /* method names */
  luaL_openlib(L, NULL, funcs, UV_COUNT);
  lua_setfield(L, -2, "_http");
}
