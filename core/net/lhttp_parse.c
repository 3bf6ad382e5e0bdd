/*
 * lhttp_parse.c - turning received bytes into requests: the llhttp
 * callbacks, the limits they enforce, and the request table (lhttp_impl.h).
 */
#include <string.h>
#include <strings.h>

#include "lhttp_impl.h"

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
  lt_http_reserve(&p->body, &p->body_cap, p->body_len, len);
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

/* Drops what no span refers to any more, then appends data. */
void lt_http_take(hparser *p, const char *data, size_t len) {
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
double lt_http_next_timeout(hparser *p) {
  if (!p->in_msg) return p->cfg.idle_tmo;
  double now = lt_http_now(), *t0 = p->head_done ? &p->t_body : &p->t_head;
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

/* Pushes the headers table: lower-case names, repeated headers joined with
 * ", " ("; " for cookie), and the metatable that lower-cases lookups. */
static void push_headers(lua_State *L, hparser *p) {
  lua_createtable(L, 0, (int)p->nh);
  for (uint32_t i = 0; i < p->nh; i++) {
    span n = p->h[i].name, v = trim(p, p->h[i].value);
    bool dup = false;
    for (uint32_t j = 0; j < i && !dup; j++)
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
    "method", "path",   "query", "version", "headers",
    "body",   "status", "1.1",   "1.0"};

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
