/*
 * lhttp_body.c - request bodies read piece by piece (req:read, lua/tycho/
 * http_stream.lua), so a large upload never sits in memory whole.
 *
 * With serve{stream_body_over = n}, a request whose Content-Length passes
 * n, or whose body is chunked, goes to the handler at the end of its head
 * (llhttp pauses in on_headers_complete), without req.body. Its body then
 * comes only as the handler reads: each read takes from the bytes parsed
 * so far (p->body[body_off..body_len)), and when none are left the
 * connection is read once more and those bytes parsed, so at most one read
 * (64 KiB) waits in memory. max_body_size and body_timeout still hold. A
 * handler that answers before the body ended closes the connection after
 * its response (lingering: the client may still be sending).
 *
 *   body_take(p, n) -> bytes | nil, "more" [, out] | nil, "done"
 *                      | nil, "toolarge" | nil, "badbody"
 *       out: a 100 Continue to write before reading (Expect)
 *   body_feed(p, bytes): parses received bytes of the body
 * The same body_take reads a body read whole (p->body) too.
 */
#include <string.h>

#include "lhttp_impl.h"
#include "lua/lobserve.h"

static hparser *check_parser(lua_State *L) {
  return luaL_checkudata(L, 1, PARSER_MT);
}

static int fail(lua_State *L, const char *tok) {
  lua_pushnil(L);
  lua_pushstring(L, tok);
  return 2;
}

static void body_parse(hparser *p);

static int l_body_take(lua_State *L) {
  hparser *p = check_parser(L);
  lua_Number want = luaL_checknumber(L, 2);
  if (p->body_len == p->body_off) body_parse(p); /* bytes received before */
  size_t avail = p->body_len - p->body_off;
  if (avail) {
    size_t n = want >= (lua_Number)avail ? avail : want < 1 ? 1 : (size_t)want;
    lua_pushlstring(L, p->body + p->body_off, n);
    p->body_off += n;
    if (p->body_stream && p->body_off == p->body_len)
      p->body_off = p->body_len = 0; /* the buffer is used again */
    return 1;
  }
  if (p->body_stream && p->status && p->body_open)
    return fail(L, p->status == 413 ? "toolarge" : "badbody");
  if (!p->body_open) return fail(L, "done");
  lua_pushnil(L);
  lua_pushliteral(L, "more");
  if (p->expect && !p->continued) {
    p->continued = true; /* the client waits for this before the body */
    lua_pushliteral(L, "HTTP/1.1 100 Continue\r\n\r\n");
    return 3;
  }
  return 2;
}

/* Parses the received bytes of the body not parsed yet. */
static void body_parse(hparser *p) {
  while (p->body_open && !p->status && p->parsed < p->in_len) {
    const char *from = p->in + p->parsed;
    llhttp_errno_t e = llhttp_execute(&p->ll, from, p->in_len - p->parsed);
    if (e == HPE_OK) {
      p->parsed = p->in_len;
    } else if (e == HPE_PAUSED) { /* the body ended (on_message_complete) */
      p->parsed = (size_t)(llhttp_get_error_pos(&p->ll) - p->in);
      llhttp_resume(&p->ll);
    } else {
      if (!p->status) p->status = 400;
      p->keepalive = false; /* the parser cannot go on */
    }
  }
}

static int l_body_feed(lua_State *L) {
  hparser *p = check_parser(L);
  size_t len;
  const char *data = luaL_checklstring(L, 2, &len);
  if (!p->body_open || p->status) return 0;
  lt_http_take(p, data, len);
  body_parse(p);
  return 0;
}

void lt_open_http_body(lua_State *L) {
  static const luaL_Reg funcs[] = {{"body_take", l_body_take},
                                   {"body_feed", l_body_feed},
                                   {NULL, NULL}};
  luaL_register(L, NULL, funcs); /* into the table on top (_http) */
}
