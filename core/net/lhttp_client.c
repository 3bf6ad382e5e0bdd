/*
 * lhttp_client.c - the HTTP client's response parser (llhttp in response
 * mode) and its two Lua functions (lua/tycho/http_client.lua calls them):
 *
 *   rp = rparser(max_body, max_head, head_request)
 *   res, keep = rfeed(rp, bytes)   after each read; nil: more bytes needed
 *   res, keep = rfeed(rp, nil)     at end of file (a body that ends there)
 *
 * `res` is {status=, version=, headers=, body=} once a whole response is
 * in (1xx interim responses are skipped), or false, err: "toolarge" (head
 * or body over its limit), "badresponse" (not HTTP), "closed" (the stream
 * ended mid-response). `keep`: the connection may carry another request
 * (the server did not ask to close and sent nothing after the response).
 *
 * Unlike the server's parser, this one copies each piece of the head as it
 * comes (the bytes are a Lua string that lives only during the call), so
 * it keeps no received buffer; lt_hresp_* is plain C, for the fuzz target
 * (fuzz/http_response.c).
 */
#include <string.h>

#include "lhttp_client.h"
#include "lhttp_impl.h"

#define RPARSER_MT "tycho.http.rparser"

static hresp *of(llhttp_t *ll) { return ll->data; }

static int refuse(hresp *r, int err) {
  r->err = err;
  return HPE_USER;
}

/* Copies a piece of the head; the head may not outgrow its limit. */
static int head_bytes(hresp *r, const char *at, size_t len, uint32_t *off) {
  if (r->hb_len + len > r->max_head) return refuse(r, RESP_TOOLARGE);
  *off = (uint32_t)r->hb_len;
  if (!len) return 0; /* hb may still be NULL: no pointer arithmetic on it */
  ty__grow(&r->hb, &r->hb_cap, r->hb_len + len, 1, 512);
  memcpy(r->hb + r->hb_len, at, len);
  r->hb_len += len;
  return 0;
}

static void reset_message(hresp *r) {
  r->hb_len = 0;
  r->nh = 0;
  r->body_len = 0;
  r->field_open = r->value_open = false;
}

static int on_message_begin(llhttp_t *ll) {
  reset_message(of(ll));
  return 0;
}

static int on_status(llhttp_t *ll, const char *at, size_t len) {
  uint32_t off;
  return head_bytes(of(ll), at, len, &off); /* counted, not kept */
}

static int on_header_field(llhttp_t *ll, const char *at, size_t len) {
  hresp *r = of(ll);
  uint32_t off;
  if (head_bytes(r, at, len, &off)) return HPE_USER;
  if (!r->field_open) {
    if (r->nh >= RESP_MAX_HEADERS) return refuse(r, RESP_TOOLARGE);
    ty__grow(&r->h, &r->hcap, r->nh + 1, sizeof *r->h, 16);
    r->h[r->nh++] = (rhdr){off, 0, 0, 0};
    r->field_open = true;
    r->value_open = false;
  }
  r->h[r->nh - 1].nlen += (uint32_t)len; /* pieces are contiguous in hb */
  return 0;
}

static int on_header_field_complete(llhttp_t *ll) {
  of(ll)->field_open = false;
  return 0;
}

static int on_header_value(llhttp_t *ll, const char *at, size_t len) {
  hresp *r = of(ll);
  uint32_t off;
  if (head_bytes(r, at, len, &off)) return HPE_USER;
  rhdr *h = &r->h[r->nh - 1];
  if (!r->value_open) {
    h->voff = off;
    r->value_open = true;
  }
  h->vlen += (uint32_t)len;
  return 0;
}

static int on_header_value_complete(llhttp_t *ll) {
  of(ll)->value_open = false;
  return 0;
}

static int on_headers_complete(llhttp_t *ll) {
  hresp *r = of(ll);
  /* llhttp takes a status of fewer than 3 digits ("HTTP/1.1 1 OK"). */
  if (ll->http_major != 1 || ll->status_code < 100 || ll->status_code > 999)
    return refuse(r, RESP_BAD);
  if ((ll->flags & F_CONTENT_LENGTH) && ll->content_length > r->max_body)
    return refuse(r, RESP_TOOLARGE);
  /* A response to HEAD has no body, whatever its Content-Length says; nor
   * has a 1xx (RFC 9110 15.2; after a 101 the stream is another protocol). */
  return r->head_req || ll->status_code / 100 == 1 ? 1 : 0;
}

static int on_body(llhttp_t *ll, const char *at, size_t len) {
  hresp *r = of(ll);
  if (r->body_len + len > r->max_body) return refuse(r, RESP_TOOLARGE);
  ty__grow(&r->body, &r->body_cap, r->body_len + len, 1, 1024);
  memcpy(r->body + r->body_len, at, len);
  r->body_len += len;
  return 0;
}

/* 1xx: an interim response, skipped. Else the response is in: pause, so
 * that what follows it (if anything) is not parsed. */
static int on_message_complete(llhttp_t *ll) {
  hresp *r = of(ll);
  int st = ll->status_code;
  if (st / 100 == 1 && st != 101) return 0;
  r->done = true;
  r->status = st;
  r->minor = ll->http_minor;
  r->keepalive = llhttp_should_keep_alive(ll) && st != 101;
  return HPE_PAUSED;
}

static const llhttp_settings_t settings = {
    .on_message_begin = on_message_begin,
    .on_status = on_status,
    .on_header_field = on_header_field,
    .on_header_field_complete = on_header_field_complete,
    .on_header_value = on_header_value,
    .on_header_value_complete = on_header_value_complete,
    .on_headers_complete = on_headers_complete,
    .on_body = on_body,
    .on_message_complete = on_message_complete,
};

void lt_hresp_init(hresp *r, uint64_t max_body, uint32_t max_head,
                   bool head_req) {
  memset(r, 0, sizeof *r);
  llhttp_init(&r->ll, HTTP_RESPONSE, &settings);
  r->ll.data = r;
  r->max_body = max_body;
  r->max_head = max_head;
  r->head_req = head_req;
}

void lt_hresp_free(hresp *r) {
  free(r->hb);
  free(r->h);
  free(r->body);
  r->hb = r->body = NULL;
  r->h = NULL;
  r->hb_len = r->hb_cap = r->hcap = r->body_len = r->body_cap = 0;
  r->nh = 0;
}

int lt_hresp_feed(hresp *r, const char *data, size_t len) {
  if (r->done) return RESP_DONE;
  if (r->err) return r->err;
  llhttp_errno_t e;
  if (data) {
    e = llhttp_execute(&r->ll, data, len);
  } else {
    e = llhttp_finish(&r->ll);
    if (e == HPE_OK && !r->done) r->err = RESP_CLOSED;
  }
  if (e == HPE_PAUSED || e == HPE_PAUSED_UPGRADE || r->done) {
    const char *pos = llhttp_get_error_pos(&r->ll);
    r->extra = data && pos ? len - (size_t)(pos - data) : 0;
    r->done = true;
    return RESP_DONE;
  }
  if (e == HPE_OK) return r->err ? r->err : RESP_NEED;
  if (!r->err) r->err = e == HPE_INVALID_EOF_STATE ? RESP_CLOSED : RESP_BAD;
  return r->err;
}

/* ---- Lua ------------------------------------------------------------------------- */

static hresp *check_rp(lua_State *L) {
  return luaL_checkudata(L, 1, RPARSER_MT);
}

static int l_rparser_gc(lua_State *L) {
  lt_hresp_free(check_rp(L));
  return 0;
}

/* rparser(max_body, max_head, head_request) */
int lt_http_rparser(lua_State *L) {
  lua_Number mb = luaL_checknumber(L, 1), mh = luaL_checknumber(L, 2);
  if (!(mb >= 0) || !(mh >= 64) || mh > 1 << 26)
    return luaL_error(L, "tycho.http: bad response limits");
  hresp *r = lua_newuserdata(L, sizeof *r);
  lt_hresp_init(r, mb > 1e15 ? (uint64_t)1e15 : (uint64_t)mb, (uint32_t)mh,
                lua_toboolean(L, 3));
  if (luaL_newmetatable(L, RPARSER_MT)) {
    lua_pushcfunction(L, l_rparser_gc);
    lua_setfield(L, -2, "__gc");
  }
  lua_setmetatable(L, -2);
  return 1;
}

static void lower(char *s, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (s[i] >= 'A' && s[i] <= 'Z') s[i] = (char)(s[i] + 32);
}

/* The headers table: lower-case names, repeated ones joined with ", ",
 * values without their trailing blanks; lookups ignore case. */
static void push_headers(lua_State *L, hresp *r) {
  lua_createtable(L, 0, (int)r->nh);
  for (uint32_t i = 0; i < r->nh; i++) {
    rhdr *h = &r->h[i];
    char *name = r->hb + h->noff, *v = r->hb + h->voff;
    uint32_t vl = h->vlen;
    while (vl && (v[vl - 1] == ' ' || v[vl - 1] == '\t')) vl--;
    lower(name, h->nlen);
    lua_pushlstring(L, name, h->nlen);
    lua_pushvalue(L, -1);
    lua_rawget(L, -3);
    if (lua_isnil(L, -1)) {
      lua_pop(L, 1);
      lua_pushlstring(L, v, vl);
    } else {
      lua_pushliteral(L, ", ");
      lua_pushlstring(L, v, vl);
      lua_concat(L, 3);
    }
    lua_rawset(L, -3);
  }
  lua_pushvalue(L, UV(UV_HDR_MT));
  lua_setmetatable(L, -2);
}

static void push_response(lua_State *L, hresp *r) {
  lua_createtable(L, 0, 4);
  lua_pushvalue(L, UV(UV_STATUS));
  lua_pushinteger(L, r->status);
  lua_rawset(L, -3);
  lua_pushvalue(L, UV(UV_VERSION));
  lua_pushvalue(L, UV(r->minor ? UV_V11 : UV_V10));
  lua_rawset(L, -3);
  lua_pushvalue(L, UV(UV_HEADERS));
  push_headers(L, r);
  lua_rawset(L, -3);
  lua_pushvalue(L, UV(UV_BODY));
  lua_pushlstring(L, r->body ? r->body : "", r->body_len);
  lua_rawset(L, -3);
}

/* rfeed(rp, bytes | nil) -> res, keep | nil | false, err */
int lt_http_rfeed(lua_State *L) {
  hresp *r = check_rp(L);
  if (r->done)
    return luaL_error(L, "tycho.http: the response is parsed already");
  size_t len = 0;
  const char *data = lua_isnil(L, 2) ? NULL : luaL_checklstring(L, 2, &len);
  switch (lt_hresp_feed(r, data, len)) {
  case RESP_NEED: return 0;
  case RESP_DONE:
    push_response(L, r);
    lua_pushboolean(L, r->keepalive && r->extra == 0);
    lt_hresp_free(r); /* its tables are built; the rest goes with it */
    return 2;
  case RESP_TOOLARGE:
    lua_pushboolean(L, 0);
    lua_pushliteral(L, "toolarge");
    return 2;
  case RESP_CLOSED:
    lua_pushboolean(L, 0);
    lua_pushliteral(L, "closed");
    return 2;
  default:
    lua_pushboolean(L, 0);
    lua_pushliteral(L, "badresponse");
    return 2;
  }
}
