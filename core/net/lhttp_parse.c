/*
 * lhttp_parse.c - turning received bytes into requests: the llhttp
 * callbacks, the limits they enforce, and the request table (lhttp_impl.h).
 */
#include <string.h>
#include <strings.h>

#include "lhttp_impl.h"
#include "lua/lobserve.h"

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
  p->expect = p->continued = p->have_tr = false;
  p->t_head = p->t_body = 0;
  p->url = (span){0, 0};
  p->nh = p->nhead = 0;
  p->body_len = p->body_off = 0;
  p->body_total = 0;
  p->body_stream = p->body_open = false;
  return 0;
}

/* Every span of the head (and of the trailers) goes through here: neither
 * may outgrow its limit, however slowly it comes. Returns the span's end
 * offset. */
static int head_span(hparser *p, const char *at, size_t len, size_t *end) {
  size_t off = (size_t)(at - p->in);
  *end = off + len;
  if (p->head_done) { /* a trailer field */
    if (!p->have_tr) {
      p->have_tr = true;
      p->tr_start = off;
    }
    return *end - p->tr_start > p->cfg->max_head ? refuse(p, 431) : 0;
  }
  if (!p->have_start) {
    p->have_start = true;
    p->start = off;
  }
  p->head_end = *end;
  if (*end - p->start > p->cfg->max_head) return refuse(p, 431);
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
    if (p->nh >= p->cfg->max_headers) return refuse(p, 431);
    if (p->nh == p->hcap) {
      p->hcap = p->hcap ? p->hcap * 2 : 16;
      p->h = ty__xrealloc(p->h, p->hcap * sizeof *p->h);
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

/* A field name is a token up to its colon: whitespace before the colon is
 * a 400 (RFC 9112 5.1; strict llhttp refuses it already, this holds
 * whatever llhttp's mode). */
static int on_header_field_complete(llhttp_t *ll) {
  hparser *p = of(ll);
  p->field_open = false;
  span n = p->h[p->nh - 1].name;
  char last = n.len ? p->in[n.off + n.len - 1] : ' ';
  return last == ' ' || last == '\t' ? refuse(p, 400) : 0;
}

static int on_header_value(llhttp_t *ll, const char *at, size_t len) {
  hparser *p = of(ll);
  size_t end;
  if (head_span(p, at, len, &end)) return HPE_USER;
  hdr *h = &p->h[p->nh - 1];
  /* obs-fold (a value continued on the next line): llhttp goes on with
   * the value past the CR LF, so its next piece does not start where the
   * last one ended. RFC 9112 5.2 lets a server refuse it (400); it must
   * never reach the handler as a CR LF inside the value. */
  if ((p->value_open && (size_t)(at - p->in) != h->value.off + h->value.len) ||
      memchr(at, '\r', len) || memchr(at, '\n', len))
    return refuse(p, 400);
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

/* At the end of a head: whether its body is streamed (req:read,
 * lhttp_body.c); then the request goes out now. */
bool lt_http_body_begin(hparser *p) {
  llhttp_t *ll = &p->ll;
  double over = p->cfg->stream_over;
  if (over < 0 || ll->upgrade) return false;
  bool chunked = (ll->flags & F_CHUNKED) != 0;
  bool sized = (ll->flags & F_CONTENT_LENGTH) != 0;
  if (!chunked && !(sized && (double)ll->content_length > over)) return false;
  p->body_stream = p->body_open = true;
  /* The request goes out now, as on_message_complete would send it. */
  p->ready = true;
  p->t_ready = lt_ticks();
  p->method = ll->method;
  p->minor = ll->http_minor;
  p->upgrade = false;
  p->keepalive = llhttp_should_keep_alive(ll);
  return true;
}

static int on_headers_complete(llhttp_t *ll) {
  hparser *p = of(ll);
  p->head_done = true;
  if (ll->http_major != 1) {
    p->status = 505;
    return -1;
  }
  if ((ll->flags & F_CONTENT_LENGTH) && ll->content_length > p->cfg->max_body) {
    p->status = 413; /* before the body is sent at all */
    return -1;
  }
  int hosts = 0;
  for (uint32_t i = 0; i < p->nh; i++) {
    if (span_is(p, p->h[i].name, "expect") &&
        span_is(p, p->h[i].value, "100-continue"))
      p->expect = true;
    hosts += span_is(p, p->h[i].name, "host");
  }
  if (hosts > 1) { /* RFC 9112 3.2: a request with two Hosts is a 400 */
    p->status = 400;
    return -1;
  }
  p->nhead = p->nh; /* the fields after these are trailers */
  return lt_http_body_begin(p) ? HPE_PAUSED : 0;
}

static int on_body(llhttp_t *ll, const char *at, size_t len) {
  hparser *p = of(ll);
  p->body_total += len;
  if (p->body_total > p->cfg->max_body) return refuse(p, 413);
  lt_http_reserve(&p->body, &p->body_cap, p->body_len, len);
  memcpy(p->body + p->body_len, at, len);
  p->body_len += len;
  return 0;
}

/* Pauses: one request at a time comes out of the bytes received. */
static int on_message_complete(llhttp_t *ll) {
  hparser *p = of(ll);
  if (p->body_stream) { /* handed out at its head already */
    p->body_open = p->in_msg = false;
    return HPE_PAUSED;
  }
  p->ready = true;
  p->t_ready = lt_ticks(); /* the latency histogram's start (lhttp_stats.c) */
  p->in_msg = false;
  p->method = ll->method;
  p->minor = ll->http_minor;
  /* Upgrade (with Connection: upgrade) or CONNECT: the bytes after this
   * request are another protocol's; it is the last one parsed here. */
  p->upgrade = ll->upgrade;
  p->keepalive = llhttp_should_keep_alive(ll) && !p->upgrade;
  return HPE_PAUSED;
}

const llhttp_settings_t lt_http_settings = {
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

/* Moves the spans at or past `from` back by d bytes. */
static void shift_spans(hparser *p, size_t from, size_t d) {
  if (p->url.off >= from) p->url.off -= (uint32_t)d;
  for (uint32_t i = 0; i < p->nh; i++) {
    if (p->h[i].name.off >= from) p->h[i].name.off -= (uint32_t)d;
    if (p->h[i].value.off >= from) p->h[i].value.off -= (uint32_t)d;
  }
}

/* Removes in[from..to): bytes no span refers to. */
static void cut(hparser *p, size_t from, size_t to) {
  size_t d = to - from;
  if (!d) return;
  memmove(p->in + from, p->in + to, p->in_len - to);
  p->in_len -= d;
  p->parsed -= d;
  shift_spans(p, to, d);
}

/* Drops what no span refers to any more, then appends data: the messages
 * before the one in progress, and in it the body's bytes (between the
 * head and the trailers). */
void lt_http_take(hparser *p, const char *data, size_t len) {
  if (p->in_msg && p->head_done) {
    size_t to = p->have_tr ? p->tr_start : p->parsed;
    if (to > p->head_end) {
      cut(p, p->head_end, to);
      if (p->have_tr) p->tr_start = p->head_end;
    }
  }
  size_t keep = p->parsed;
  if (p->in_msg && p->have_start && p->start < keep) keep = p->start;
  if (keep) {
    cut(p, 0, keep);
    if (p->have_start) p->start -= keep;
    if (p->have_start) p->head_end -= keep;
    if (p->have_tr) p->tr_start -= keep;
  }
  lt_http_reserve(&p->in, &p->in_cap, p->in_len, len);
  memcpy(p->in + p->in_len, data, len);
  p->in_len += len;
}

/* Parses received bytes up to the next complete message. */
int lt_http_advance(hparser *p) {
  while (!p->ready && p->parsed < p->in_len) {
    const char *from = p->in + p->parsed;
    llhttp_errno_t e = llhttp_execute(&p->ll, from, p->in_len - p->parsed);
    if (e == HPE_OK) {
      p->parsed = p->in_len;
    } else if (e == HPE_PAUSED) {
      /* A message ended (on_message_complete). After an upgrade nothing
       * is parsed any more: the connection closes or is taken over. */
      p->parsed = (size_t)(llhttp_get_error_pos(&p->ll) - p->in);
      llhttp_resume(&p->ll);
    } else {
      if (!p->status) p->status = 400;
      return ADV_ERR;
    }
  }
  if (p->ready) return ADV_MSG;
  /* Bytes between spans (whitespace) count against the head (and the
   * trailers) too. */
  size_t from = p->head_done ? p->tr_start : p->start;
  if (p->in_msg && (p->head_done ? p->have_tr : p->have_start) &&
      p->parsed - from > p->cfg->max_head) {
    p->status = 431;
    return ADV_ERR;
  }
  return ADV_NEED;
}

/* Seconds the next read may wait: the idle wait between requests, else
 * what is left of the head's or the body's deadline. -1: no limit. */
static double shorter(double a, double b) {
  if (a < 0) return b;
  return b < 0 || a < b ? a : b;
}

double lt_http_next_timeout(hparser *p) {
  const hcfg *cfg = p->cfg;
  double busy = cfg->pressure ? cfg->busy_tmo : -1;
  if (!p->in_msg) return shorter(cfg->idle_tmo, busy);
  double now = lt_http_now(), *t0 = p->head_done ? &p->t_body : &p->t_head;
  double lim = p->head_done ? cfg->body_tmo : shorter(cfg->head_tmo, busy);
  if (lim < 0) return -1;
  if (*t0 == 0) *t0 = now;
  double left = *t0 + lim - now;
  return left > 0 ? left : 0;
}

/* ---- the request table ---------------------------------------------------------- */

static char *scratch(hparser *p, size_t n) {
  if (p->scratch_cap < n) {
    p->scratch_cap = n < 256 ? 256 : n;
    p->scratch = ty__xrealloc(p->scratch, p->scratch_cap);
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
  while (v.len &&
         (p->in[v.off + v.len - 1] == ' ' || p->in[v.off + v.len - 1] == '\t'))
    v.len--;
  return v;
}

static bool same_name(const hparser *p, span a, span b) {
  return a.len == b.len &&
         strncasecmp(p->in + a.off, p->in + b.off, a.len) == 0;
}

/* Pushes the fields h[from..to) as a headers table: lower-case names,
 * repeated fields joined with ", " ("; " for cookie), and the metatable
 * that lower-cases lookups. */
static void push_headers(lua_State *L, hparser *p, uint32_t from, uint32_t to) {
  lua_createtable(L, 0, (int)(to - from));
  for (uint32_t i = from; i < to; i++) {
    span n = p->h[i].name, v = trim(p, p->h[i].value);
    bool dup = false;
    for (uint32_t j = from; j < i && !dup; j++)
      dup = same_name(p, n, p->h[j].name);
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
const char *const lt_http_uv_strings[UV_METHODS - UV_METHOD] = {
    "method", "path", "query", "version",  "headers", "body",
    "status", "1.1",  "1.0",   "trailers", "upgrade"};

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

void lt_http_push_request(lua_State *L, hparser *p) {
  /* Room for the Lua side's fields too (remote_addr, remote_port, scheme,
   * read, _begin: lua/tycho/http.lua): no rehash per request. */
  lua_createtable(L, 0, 12);
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
  push_headers(L, p, 0, p->nhead);
  lua_rawset(L, -3);
  if (p->nh > p->nhead) {
    key(L, UV_TRAILERS);
    push_headers(L, p, p->nhead, p->nh);
    lua_rawset(L, -3);
  }
  if (p->upgrade) {
    key(L, UV_UPGRADE);
    lua_pushboolean(L, 1);
    lua_rawset(L, -3);
  }
  if (p->body_stream) return; /* req:read (lhttp_body.c) */
  key(L, UV_BODY);
  lua_pushlstring(L, p->body ? p->body : "", p->body_len);
  lua_rawset(L, -3);
}
