/*
 * lhttp_respond.c - serializing responses: the handler's, and the ones the
 * server answers itself (errors, 100 Continue).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "lhttp_impl.h"

/* ---- output ---------------------------------------------------------------- */

void lt_http_out(hparser *p, const char *s, size_t n) {
  lt_http_reserve(&p->out, &p->out_cap, p->out_len, n);
  memcpy(p->out + p->out_len, s, n);
  p->out_len += n;
}

static void out_uint(hparser *p, uint64_t v) {
  char b[24];
  int i = (int)sizeof b;
  do b[--i] = (char)('0' + v % 10);
  while ((v /= 10) != 0);
  lt_http_out(p, b + i, sizeof b - (size_t)i);
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
  default:
    return status < 300   ? "OK"
           : status < 400 ? "Redirect"
           : status < 500 ? "Client Error"
                          : "Server Error";
  }
}

/* "Date: ...\r\n", formatted once per second per thread (no locale: the
 * day and month names are HTTP's, not strftime's). */
const char *lt_http_date_line(size_t *len) {
  static _Thread_local time_t t_sec = -1;
  static _Thread_local char t_line[48];
  static _Thread_local size_t t_len;
  static const char days[7][4] = {"Sun", "Mon", "Tue", "Wed",
                                  "Thu", "Fri", "Sat"};
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

/* ---- responses ------------------------------------------------------------------ */

static bool body_allowed(int status) {
  return status >= 200 && status != 204 && status != 304;
}

/* Status line, Server, Date: what every response starts with. */
static void put_head(hparser *p, int status) {
  p->resp_status = status;
  OUT_LIT(p, "HTTP/1.1 ");
  out_uint(p, (uint64_t)status);
  lt_http_out(p, " ", 1);
  const char *r = reason_phrase(status);
  lt_http_out(p, r, strlen(r));
  OUT_LIT(p, "\r\n");
}

/* ctype: the default Content-Type, which only a response with a body gets
 * (a bodiless redirect carries no type). */
static void put_std(hparser *p, bool server, bool date, bool ctype,
                    int status) {
  if (server) lt_http_out(p, p->cfg->server, p->cfg->server_len);
  if (date) {
    size_t n;
    const char *d = lt_http_date_line(&n);
    lt_http_out(p, d, n);
  }
  if (ctype && body_allowed(status))
    lt_http_out(p, p->cfg->ctype, p->cfg->ctype_len);
}

/* Content-Length, Connection, the blank line and the body. A streamed body
 * (p->streaming) goes chunked on HTTP/1.1, until the close on HTTP/1.0;
 * its chunks follow (lua/tycho/http.lua). */
static void put_tail(hparser *p, int status, const char *body, size_t blen) {
  p->chunked = false;
  if (p->streaming && p->flen < 0) {
    p->chunked = p->minor;
    if (p->minor) OUT_LIT(p, "Transfer-Encoding: chunked\r\n");
    else p->closing = true;
  } else if (p->streaming) {
    OUT_LIT(p, "Content-Length: ");
    out_uint(p, (uint64_t)p->flen);
    OUT_LIT(p, "\r\n");
  } else if (body_allowed(status)) {
    OUT_LIT(p, "Content-Length: ");
    out_uint(p, blen);
    OUT_LIT(p, "\r\n");
  }
  if (p->closing) OUT_LIT(p, "Connection: close\r\n");
  else if (!p->minor) OUT_LIT(p, "Connection: keep-alive\r\n");
  OUT_LIT(p, "\r\n");
  if (body_allowed(status) && p->method != HTTP_HEAD)
    lt_http_out(p, body, blen);
}

/* A response of ours (an error, a limit): plain text, and the connection
 * ends after it unless keep is set (a handler error leaves it usable). */
void lt_http_put_simple(hparser *p, int status, bool keep) {
  if (!keep) p->closing = true;
  put_head(p, status);
  put_std(p, p->cfg->server_len > 0, true, false, status);
  OUT_LIT(p, "Content-Type: text/plain\r\n");
  char body[64];
  int n = snprintf(body, sizeof body, "%s\n", reason_phrase(status));
  put_tail(p, status, body, (size_t)n);
}

/* Token characters of RFC 9110 (header names). */
static bool is_tchar(unsigned char c) {
  static const uint64_t map[4] = {/* 0-63: ! # $ % & ' * + - . 0-9 */
                                  0x03ff6cfa00000000ull,
                                  /* 64-127: A-Z ^ _ ` a-z | ~ */
                                  0x57ffffffc7fffffeull, 0, 0};
  return (map[c >> 6] >> (c & 63)) & 1;
}

const char *lt_http_check_header(const char *k, size_t kl, const char *v,
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
  const char *err = lt_http_check_header(k, kl, v, vl);
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
  lt_http_out(p, k, kl);
  OUT_LIT(p, ": ");
  lt_http_out(p, v, vl);
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
const char *lt_http_put_response(lua_State *L, hparser *p, int ri, int bi) {
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
  case LUA_TNUMBER: err = get_status(L, ri, &status); break;
  case LUA_TSTRING: bi = ri; break;
  case LUA_TNIL:
    return "the handler returned nothing (return {status=, headers=, body=}, "
           "or status, body)";
  case LUA_TFUNCTION:
    return "the handler returned a function, which only answers an upgrade "
           "request (req.upgrade)";
  default:
    return "the handler returned a value that is not a response (return "
           "{status=, headers=, body=}, or status, body)";
  }
  if (err) return err;
  int bt = lua_type(L, bi);
  p->flen = -1;
  bool file = bt == LUA_TUSERDATA && lt_http_file_len(L, bi, &p->flen);
  if (bt != LUA_TNIL && bt != LUA_TNONE && bt != LUA_TSTRING &&
      bt != LUA_TNUMBER && bt != LUA_TFUNCTION && !file)
    return "body must be a string or a function (streamed)";
  /* A function streams the body (chunked), a file goes after the head;
   * HEAD, 204 and 304 get the same head and neither. */
  p->streaming = (bt == LUA_TFUNCTION || file) && body_allowed(status);
  if (bt == LUA_TFUNCTION || file) bt = LUA_TNIL;
  size_t blen = 0;
  const char *body =
      bt == LUA_TNIL || bt == LUA_TNONE ? "" : lua_tolstring(L, bi, &blen);
  if (!p->keepalive) p->closing = true;
  put_head(p, status);
  int seen = 0;
  err = hi ? put_headers(L, p, hi, &seen) : NULL;
  if (err) return err;
  put_std(p, !(seen & H_SERVER) && p->cfg->server_len, !(seen & H_DATE),
          !(seen & H_CTYPE) && p->cfg->ctype_len && (blen || p->streaming),
          status);
  put_tail(p, status, body, blen);
  if (p->method == HTTP_HEAD) p->streaming = false; /* the head only */
  lua_settop(L, top);
  return NULL;
}

/* The server's own answer (an error, a limit) through the errors hook of
 * tycho.http.serve: errors(status, reason) -> res, serialized as a
 * handler's response would be (with status as its status; the connection
 * ends after it unless keep). The hook runs inside this C call,
 * so it cannot yield; one that fails, yields or returns no response (or a
 * streamed body) leaves the plain answer. */
void lt_http_put_error(lua_State *L, hparser *p, int status, bool keep) {
  if (p->cfg->errors_ref == LUA_NOREF) {
    lt_http_put_simple(p, status, keep);
    return;
  }
  int top = lua_gettop(L);
  size_t mark = p->out_len;
  bool ka = p->keepalive;
  lua_pushnil(L); /* the body slot of a `status` answer */
  lua_rawgeti(L, LUA_REGISTRYINDEX, p->cfg->errors_ref);
  lua_pushinteger(L, status);
  lua_pushstring(L, reason_phrase(status));
  const char *err = "the errors hook failed";
  if (lua_pcall(L, 2, 1, 0) == 0) {
    err = NULL;
    if (lua_istable(L, -1)) { /* the status stays ours (web.json says 200) */
      lua_pushvalue(L, UV(UV_STATUS));
      lua_pushinteger(L, status);
      lua_rawset(L, -3);
    } else if (lua_isnumber(L, -1)) {
      err = "a status alone";
    }
    if (!keep) p->keepalive = false;
    if (!err && lua_type(L, -1) == LUA_TSTRING) { /* a body: status, body */
      lua_pushinteger(L, status);
      err = lt_http_put_response(L, p, top + 3, top + 2);
    } else if (!err) {
      err = lt_http_put_response(L, p, top + 2, top + 1);
    }
    if (!err && p->streaming) err = "a streamed body";
  }
  lua_settop(L, top);
  if (err) {
    p->out_len = mark;
    p->keepalive = ka;
    p->streaming = false;
    p->closing = false;
    lt_http_put_simple(p, status, keep);
  }
}
