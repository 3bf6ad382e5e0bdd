/*
 * lhttp.c - the functions lua/tycho/http.lua calls (the `_http` table of
 * tycho.core) and a server's configuration (lhttp_impl.h tells the whole
 * story).
 */
#include <math.h>
#include <string.h>

#include "lhttp_impl.h"
#include "ltcp.h"

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
  /* The refused request's method is not known (p->method is still the
   * last request's: after a HEAD the error would lose its body). */
  if (r == ADV_ERR) {
    p->method = HTTP_GET;
    lt_http_put_error(L, p, p->status, false);
  }
  if (r == ADV_NEED && p->expect && !p->continued && p->head_done) {
    p->continued = true; /* the client waits for this before the body */
    OUT_LIT(p, "HTTP/1.1 100 Continue\r\n\r\n");
  }
  if (r == ADV_MSG) {
    if (p->out_len >= FLUSH_AT) push_out(L, p);
    else lua_pushnil(L);
    lt_http_push_request(L, p);
    return 2;
  }
  push_out(L, p);
  if (r == ADV_ERR) {
    lua_pushboolean(L, 0);
    return 2;
  }
  lua_pushnil(L);
  lua_pushnumber(L, lt_http_next_timeout(p));
  return 3;
}

/* feed(p, bytes) -> out, req|nil|false, tmo */
static int l_feed(lua_State *L) {
  hparser *p = check_parser(L);
  size_t len;
  const char *data = luaL_checklstring(L, 2, &len);
  if (p->closing || p->ready)
    return luaL_error(L, "tycho.http: feed after the end or before respond");
  lt_http_take(p, data, len);
  return step(L, p, lt_http_advance(p));
}

/* respond(p, ok, res, body) -> out, req|nil|false, tmo, err: answers the
 * request feed or respond returned; a handler failure (ok false) or an
 * answer that is not a response gives a 500 (err says why, to log). */
static int l_respond(lua_State *L) {
  hparser *p = check_parser(L);
  if (!p->ready) return luaL_error(L, "tycho.http: respond without a request");
  p->ready = false;
  /* A streamed body not read to its end: the connection closes after
   * this response (lhttp_body.c). */
  if (p->body_open || (p->body_stream && p->status)) p->keepalive = false;
  size_t mark = p->out_len;
  const char *err = NULL;
  if (!lua_toboolean(L, 2)) {
    lt_http_put_error(L, p, 500, p->keepalive);
  } else if ((err = lt_http_put_response(L, p, 3, 4)) != NULL) {
    p->out_len = mark; /* nothing half-written */
    p->closing = p->streaming = false;
    lt_http_put_error(L, p, 500, p->keepalive);
  }
  lt_http_count(p);
  int n;
  if (p->streaming) { /* the head now; stream_end after the chunks */
    push_out(L, p);
    lua_pushnil(L);
    lua_pushnil(L);
    lua_pushnil(L);
    lua_pushboolean(L, 1);
    return 5;
  }
  if (p->closing) {
    push_out(L, p);
    lua_pushboolean(L, 0);
    n = 2;
  } else {
    p->t_idle = lt_http_now();
    p->served = true;
    n = step(L, p, lt_http_advance(p));
  }
  if (!err) return n;
  for (; n < 3; n++) lua_pushnil(L);
  lua_pushstring(L, err);
  return 4;
}

/* stream_end(p, ok) -> out, req|nil|false, tmo: the streamed body of the
 * last response ended (ok: its function returned; else the connection
 * must close, the body cut short). Goes on as respond does. */
static int l_stream_end(lua_State *L) {
  hparser *p = check_parser(L);
  if (!p->streaming) return luaL_error(L, "tycho.http: no body streaming");
  p->streaming = false;
  if (!lua_toboolean(L, 2)) p->closing = true;
  else if (p->chunked) OUT_LIT(p, "0\r\n\r\n");
  if (p->closing) {
    push_out(L, p);
    lua_pushboolean(L, 0);
    return 2;
  }
  p->t_idle = lt_http_now();
  p->served = true;
  return step(L, p, lt_http_advance(p));
}

/* chunked(p) -> whether the body streaming now goes in chunks. */
static int l_chunked(lua_State *L) {
  lua_pushboolean(L, check_parser(L)->chunked);
  return 1;
}

/* last(p): the response to the request at hand closes the connection
 * (Connection: close): a server draining for a graceful stop. */
static int l_last(lua_State *L) {
  check_parser(L)->keepalive = false;
  return 0;
}

/* takeover(p, conn) -> out | nil: the handler of an upgrade request took
 * the connection. Nothing more is parsed; out holds the responses to the
 * requests before it (to write first), and the bytes received after the
 * request go back into conn's buffer, for the new protocol to read. */
static int l_takeover(lua_State *L) {
  hparser *p = check_parser(L);
  lt_conn *c = lt_conn_test(L, 2);
  if (!p->ready || !p->upgrade)
    return luaL_error(L, "tycho.http: takeover without an upgrade request");
  p->ready = false;
  p->closing = p->taken = true;
  /* The new protocol's writes wait for the kernel, as conn:write's do. */
  if (c) lt_conn_behind(c, false);
  if (c && p->in_len > p->parsed)
    lt_conn_unread(c, p->in + p->parsed, p->in_len - p->parsed);
  p->parsed = p->in_len;
  push_out(L, p);
  return 1;
}

/* behind(conn [, on]): the server's responses are written behind
 * (ltcp_write.c): conn:write queues them on the send op and returns
 * (io_uring only). on false: writes wait again (a file sent after). */
static int l_behind(lua_State *L) {
  lt_conn *c = lt_conn_test(L, 1);
  bool on = lua_isnoneornil(L, 2) || lua_toboolean(L, 2);
  lua_pushboolean(L, c && lt_conn_behind(c, on));
  return 1;
}

/* timeout(p) -> seconds the next read may wait (-1: no limit). */
static int l_timeout(lua_State *L) {
  lua_pushnumber(L, lt_http_next_timeout(check_parser(L)));
  return 1;
}

/* pressure(cfg, on): most connection slots are taken (on) or not; heads
 * and idle waits then get busy_timeout at most. */
static int l_pressure(lua_State *L) {
  hcfg *cfg = luaL_checkudata(L, 1, CONFIG_MT);
  cfg->pressure = lua_toboolean(L, 2);
  return 0;
}

/* expired(p) -> out | nil: a read timed out; a request cut short gets a
 * 408, an idle connection just closes. */
static int l_expired(lua_State *L) {
  hparser *p = check_parser(L);
  if (!p->in_msg) return 0;
  p->keepalive = false;
  p->minor = 1;
  p->method = HTTP_GET;
  lt_http_put_error(L, p, 408, false);
  push_out(L, p);
  return 1;
}

/* reject(cfg, status) -> a complete response that closes the connection
 * (503 when a server is at its connection limit). */
static int l_reject(lua_State *L) {
  hcfg *cfg = luaL_checkudata(L, 1, CONFIG_MT);
  int status = (int)luaL_checkinteger(L, 2);
  hparser p = {.cfg = cfg, .minor = 1, .method = HTTP_GET};
  lt_http_put_error(L, &p, status, false);
  lua_pushlstring(L, p.out, p.out_len);
  free(p.out);
  return 1;
}

static int l_parser_gc(lua_State *L) {
  hparser *p = lua_touserdata(L, 1);
  lt_http_unlist(p);
  free(p->in);
  free(p->h);
  free(p->body);
  free(p->out);
  free(p->scratch);
  p->in = p->body = p->out = p->scratch = NULL;
  p->h = NULL;
  return 0;
}

/* parser(cfg [, conn]) -> a parser for one connection; it reads cfg
 * (limits and pressure) through a pointer, and keeps cfg and conn alive in
 * its environment. With conn, the connection is listed for reclaiming
 * slots until done(p) or the parser's end. */
static int l_parser(lua_State *L) {
  hcfg *cfg = luaL_checkudata(L, 1, CONFIG_MT);
  struct conn_ud *conn =
      lua_isnoneornil(L, 2) ? NULL : luaL_checkudata(L, 2, LT_CONN_MT);
  hparser *p = lua_newuserdata(L, sizeof *p);
  memset(p, 0, sizeof *p);
  p->cfg = cfg;
  p->conn = conn;
  p->t_idle = lt_http_now();
  llhttp_init(&p->ll, HTTP_REQUEST, &lt_http_settings);
  p->ll.data = p;
  luaL_getmetatable(L, PARSER_MT);
  lua_setmetatable(L, -2);
  lua_createtable(L, 2, 0);
  lua_pushvalue(L, 1);
  lua_rawseti(L, -2, 1);
  if (conn) {
    lua_pushvalue(L, 2);
    lua_rawseti(L, -2, 2);
  }
  lua_setfenv(L, -2);
  if (conn) lt_http_list(p);
  return 1;
}

/* buffered(p) -> bytes the parser holds (for specs). */
static int l_buffered(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)check_parser(L)->in_len);
  return 1;
}

/* done(p): the connection ended; it is no longer listed. */
static int l_done(lua_State *L) {
  lt_http_unlist(check_parser(L));
  return 0;
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
      luaL_error(L,
                 "tycho.http: %s must be a number of seconds > 0 (or -1 "
                 "for none)",
                 k);
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
    if (vl > MAX_TEXT || lt_http_check_header("x", 1, v, vl))
      luaL_error(L,
                 "tycho.http: %s must be at most %d characters, without "
                 "CR or LF",
                 k, MAX_TEXT);
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
  c.max_head =
      (uint32_t)opt_num(L, "max_header_size", 32768, 64, 1 << 26, true);
  c.max_headers = (uint32_t)opt_num(L, "max_headers", 100, 1, 1 << 20, true);
  c.max_body = (uint64_t)opt_num(L, "max_body_size", 1 << 20, 0, 1e15, true);
  c.head_tmo = opt_timeout(L, "header_timeout", 60);
  c.body_tmo = opt_timeout(L, "body_timeout", 60);
  c.idle_tmo = opt_timeout(L, "idle_timeout", 75);
  c.busy_tmo = opt_timeout(L, "busy_timeout", 5);
  c.server_len =
      opt_line(L, "server", "tycho", "Server", c.server, sizeof c.server);
  c.ctype_len = opt_line(L, "default_type", "text/plain", "Content-Type",
                         c.ctype, sizeof c.ctype);
  c.stream_over = opt_num(L, "stream_body_over", -1, -1, 1e15, true);
  c.errors_ref = LUA_NOREF;
  lua_getfield(L, 1, "errors");
  if (lua_isfunction(L, -1)) c.errors_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  else if (!lua_isnil(L, -1) &&
           !(lua_isboolean(L, -1) && !lua_toboolean(L, -1)))
    return luaL_error(L,
                      "tycho.http: errors must be a function(status, reason)");
  else lua_pop(L, 1);
  hcfg *u = lua_newuserdata(L, sizeof *u);
  *u = c;
  luaL_getmetatable(L, CONFIG_MT);
  lua_setmetatable(L, -2);
  return 1;
}

static int l_config_gc(lua_State *L) {
  hcfg *cfg = lua_touserdata(L, 1);
  luaL_unref(L, LUA_REGISTRYINDEX, cfg->errors_ref);
  cfg->errors_ref = LUA_NOREF;
  return 0;
}

/* date() -> the Date header value now (for specs). */
static int l_date(lua_State *L) {
  size_t n;
  const char *d = lt_http_date_line(&n);
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

/* ---- module ---------------------------------------------------------------------- */

void lt_open_http(lua_State *L) {
  luaL_newmetatable(L, PARSER_MT);
  lua_pushcfunction(L, l_parser_gc);
  lua_setfield(L, -2, "__gc");
  lua_pop(L, 1);
  luaL_newmetatable(L, CONFIG_MT);
  lua_pushcfunction(L, l_config_gc);
  lua_setfield(L, -2, "__gc");
  lua_pop(L, 1);
  static const luaL_Reg funcs[] = {{"config", l_config},
                                   {"parser", l_parser},
                                   {"done", l_done},
                                   {"buffered", l_buffered},
                                   {"feed", l_feed},
                                   {"respond", l_respond},
                                   {"last", l_last},
                                   {"stream_end", l_stream_end},
                                   {"chunked", l_chunked},
                                   {"expired", l_expired},
                                   {"takeover", l_takeover},
                                   {"behind", l_behind},
                                   {"timeout", l_timeout},
                                   {"reclaim", lt_http_reclaim},
                                   {"sweep", lt_http_sweep},
                                   {"pressure", l_pressure},
                                   {"reject", l_reject},
                                   {"date", l_date},
                                   {"stats", lt_http_stats},
                                   {"gauge_new", lt_http_gauge_new},
                                   {"gauge_enter", lt_http_gauge_enter},
                                   {"gauge_count", lt_http_gauge_count},
                                   {"gauge_free", lt_http_gauge_free},
                                   {"rparser", lt_http_rparser},
                                   {"rfeed", lt_http_rfeed},
                                   {NULL, NULL}};
  lua_newtable(L);
  /* The upvalues of every function (UV_*). */
  lua_createtable(L, 0, 1);
  lua_pushcfunction(L, l_headers_index);
  lua_setfield(L, -2, "__index");
  for (size_t i = 0; i < UV_METHODS - UV_METHOD; i++)
    lua_pushstring(L, lt_http_uv_strings[i]);
  lua_createtable(L, 64, 0); /* method names */
  luaL_openlib(L, NULL, funcs, UV_COUNT);
  lt_open_http_file(L);
  lt_open_http_body(L);
  lua_setfield(L, -2, "_http");
}
