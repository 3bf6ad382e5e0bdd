/*
 * lngx.c - the C half of tycho.ngx (lua/tycho/ngx.lua): the helpers of
 * OpenResty's `ngx` table that drivers use, with lua-nginx-module's
 * behaviour.
 *
 *   md5(s) -> hex ; md5_bin(s) -> 16 bytes ; sha1_bin(s) -> 20 bytes
 *   encode_base64(s [, no_padding]) ; decode_base64(s) -> s | nil
 *   escape_uri(s [, type]) (type 2, the default: everything but
 *   A-Z a-z 0-9 - . _ ~ ! * ' ( ); type 0: a URI, whose / = & ... stay)
 *   unescape_uri(s) (%XX and + as a space; a malformed % stays)
 *   now() -> epoch seconds (float) ; log(level, ...)
 *
 * Digests come from OpenSSL's libcrypto. Like lua-nginx-module, nil is ""
 * and a number its string for the string arguments of the escapes and
 * encode_base64.
 */
#include <openssl/evp.h>
#include <string.h>
#include <time.h>

#include "base/log.h"
#include "lngx.h"
#include "lua/lapi.h"

/* ---- digests ---------------------------------------------------------------- */

static const char *str_arg(lua_State *L, int idx, size_t *len,
                           const char *fname) {
  if (lua_isnil(L, idx)) {
    *len = 0;
    return "";
  }
  if (lua_type(L, idx) != LUA_TSTRING && lua_type(L, idx) != LUA_TNUMBER)
    luaL_error(L, "ngx.%s: bad argument #1 (string expected, got %s)", fname,
               luaL_typename(L, idx));
  return lua_tolstring(L, idx, len);
}

static int digest(lua_State *L, const EVP_MD *md, const char *fname, bool hex) {
  size_t len;
  const char *s = str_arg(L, 1, &len, fname);
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  if (!EVP_Digest(s, len, out, &n, md, NULL))
    return luaL_error(L, "ngx.%s: the digest failed (OpenSSL)", fname);
  if (!hex) {
    lua_pushlstring(L, (const char *)out, n);
    return 1;
  }
  static const char digits[] = "0123456789abcdef";
  char h[2 * EVP_MAX_MD_SIZE];
  for (unsigned i = 0; i < n; i++) {
    h[2 * i] = digits[out[i] >> 4];
    h[2 * i + 1] = digits[out[i] & 15];
  }
  lua_pushlstring(L, h, 2 * (size_t)n);
  return 1;
}

static int l_md5(lua_State *L) { return digest(L, EVP_md5(), "md5", true); }
static int l_md5_bin(lua_State *L) {
  return digest(L, EVP_md5(), "md5_bin", false);
}
static int l_sha1_bin(lua_State *L) {
  return digest(L, EVP_sha1(), "sha1_bin", false);
}

/* ---- base64 ----------------------------------------------------------------- */

static const char b64[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static int l_encode_base64(lua_State *L) {
  size_t len;
  const unsigned char *s =
      (const unsigned char *)str_arg(L, 1, &len, "encode_base64");
  bool pad = !lua_toboolean(L, 2);
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  size_t i = 0;
  for (; i + 3 <= len; i += 3) {
    unsigned v = (unsigned)s[i] << 16 | (unsigned)s[i + 1] << 8 | s[i + 2];
    char q[4] = {b64[v >> 18], b64[(v >> 12) & 63], b64[(v >> 6) & 63],
                 b64[v & 63]};
    luaL_addlstring(&b, q, 4);
  }
  if (i < len) {
    unsigned v = (unsigned)s[i] << 16;
    if (i + 1 < len) v |= (unsigned)s[i + 1] << 8;
    char q[4] = {b64[v >> 18], b64[(v >> 12) & 63],
                 i + 1 < len ? b64[(v >> 6) & 63] : '=', '='};
    size_t n = i + 1 < len ? 3 : 2;
    luaL_addlstring(&b, q, pad ? 4 : n);
  }
  luaL_pushresult(&b);
  return 1;
}

static int b64_value(unsigned char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

/* Padding is optional; anything else outside the alphabet, or a length that
 * no encoding has (4k+1), is an error: nil. */
static int l_decode_base64(lua_State *L) {
  if (lua_type(L, 1) != LUA_TSTRING && lua_type(L, 1) != LUA_TNUMBER)
    return luaL_error(L, "ngx.decode_base64: string argument only");
  size_t len;
  const unsigned char *s = (const unsigned char *)lua_tolstring(L, 1, &len);
  while (len && s[len - 1] == '=') len--;
  if (len % 4 == 1) {
    lua_pushnil(L);
    return 1;
  }
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  unsigned acc = 0;
  int bits = 0;
  for (size_t i = 0; i < len; i++) {
    int v = b64_value(s[i]);
    if (v < 0) {
      lua_pushnil(L);
      return 1;
    }
    acc = acc << 6 | (unsigned)v;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      luaL_addchar(&b, (char)((acc >> bits) & 0xff));
    }
  }
  luaL_pushresult(&b);
  return 1;
}

/* ---- URI escapes ------------------------------------------------------------ */

/* Bit set: the character is escaped. lua-nginx-module's tables. */
static const uint32_t esc_uri[8] = {
    0xffffffff, 0x80000029, 0x00000000, 0x80000000,
    0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}; /* " # % ? ctl 8bit */
static const uint32_t esc_component[8] = {
    0xffffffff, 0xfc00987d, 0x78000001, 0xb8000001, 0xffffffff,
    0xffffffff, 0xffffffff, 0xffffffff}; /* but A-Za-z0-9-._~!*'() */

static int l_escape_uri(lua_State *L) {
  size_t len;
  const unsigned char *s =
      (const unsigned char *)str_arg(L, 1, &len, "escape_uri");
  int type = (int)luaL_optinteger(L, 2, 2);
  if (type != 0 && type != 2)
    return luaL_error(L,
                      "ngx.escape_uri: type must be 0 (URI) or 2 "
                      "(component), not %d",
                      type);
  const uint32_t *t = type == 0 ? esc_uri : esc_component;
  static const char hex[] = "0123456789ABCDEF";
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  for (size_t i = 0; i < len; i++) {
    unsigned char c = s[i];
    if (t[c >> 5] & (1u << (c & 31))) {
      char e[3] = {'%', hex[c >> 4], hex[c & 15]};
      luaL_addlstring(&b, e, 3);
    } else {
      luaL_addchar(&b, (char)c);
    }
  }
  luaL_pushresult(&b);
  return 1;
}

static int hexval(unsigned char c) {
  if (c >= '0' && c <= '9') return c - '0';
  c |= 0x20;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

static int l_unescape_uri(lua_State *L) {
  size_t len;
  const unsigned char *s =
      (const unsigned char *)str_arg(L, 1, &len, "unescape_uri");
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  for (size_t i = 0; i < len; i++) {
    int hi, lo;
    if (s[i] == '+') {
      luaL_addchar(&b, ' ');
    } else if (s[i] == '%' && i + 2 < len && (hi = hexval(s[i + 1])) >= 0 &&
               (lo = hexval(s[i + 2])) >= 0) {
      luaL_addchar(&b, (char)(hi << 4 | lo));
      i += 2;
    } else {
      luaL_addchar(&b, (char)s[i]);
    }
  }
  luaL_pushresult(&b);
  return 1;
}

/* ---- time and log ----------------------------------------------------------- */

static int l_now(lua_State *L) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  lua_pushnumber(L, (lua_Number)ts.tv_sec + (lua_Number)ts.tv_nsec / 1e9);
  return 1;
}

/* ngx.log's levels (ngx.STDERR .. ngx.DEBUG) on the event log's. */
static int log_level_of(lua_Integer ngx_level) {
  if (ngx_level <= 4) return TY_LOG_ERROR; /* STDERR EMERG ALERT CRIT ERR */
  if (ngx_level == 5) return TY_LOG_WARN;
  if (ngx_level <= 7) return TY_LOG_INFO; /* NOTICE INFO */
  return TY_LOG_DEBUG;
}

/* log(level, ...): the arguments joined (nil, booleans and ngx.null
 * spelled out; a table needs __tostring) as one event of the log. */
static int l_log(lua_State *L) {
  lua_Integer lv = luaL_checkinteger(L, 1);
  if (lv < 0 || lv > 8)
    return luaL_error(L,
                      "ngx.log: bad log level %d (use ngx.STDERR .. "
                      "ngx.DEBUG)",
                      (int)lv);
  int level = log_level_of(lv);
  if (!ty__log_enabled(level)) return 0;
  int n = lua_gettop(L);
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  for (int i = 2; i <= n; i++) {
    switch (lua_type(L, i)) {
    case LUA_TNIL: luaL_addstring(&b, "nil"); break;
    case LUA_TBOOLEAN:
      luaL_addstring(&b, lua_toboolean(L, i) ? "true" : "false");
      break;
    case LUA_TLIGHTUSERDATA:
      if (!lua_touserdata(L, i)) {
        luaL_addstring(&b, "null");
        break;
      }
      /* fall through */
    case LUA_TTABLE:
    case LUA_TUSERDATA:
      if (!luaL_callmeta(L, i, "__tostring"))
        return luaL_error(L,
                          "ngx.log: bad argument #%d (a %s without "
                          "__tostring)",
                          i, luaL_typename(L, i));
      luaL_addvalue(&b);
      break;
    default:
      if (lua_type(L, i) != LUA_TSTRING && lua_type(L, i) != LUA_TNUMBER)
        return luaL_error(L, "ngx.log: bad argument #%d (a %s)", i,
                          luaL_typename(L, i));
      lua_pushvalue(L, i);
      luaL_addvalue(&b);
    }
  }
  luaL_pushresult(&b);
  size_t len;
  const char *msg = lua_tolstring(L, -1, &len);
  ty_worker *w = ty_worker_current();
  ty_actor *a = ty_actor_current();
  ty__logev e;
  ty__log_begin(&e, level, w ? (int)ty_worker_id(w) + 1 : -1, a ? a->pid : 0,
                msg, len);
  ty__log_end(&e);
  return 0;
}

static const luaL_Reg ngx_funcs[] = {{"md5", l_md5},
                                     {"md5_bin", l_md5_bin},
                                     {"sha1_bin", l_sha1_bin},
                                     {"encode_base64", l_encode_base64},
                                     {"decode_base64", l_decode_base64},
                                     {"escape_uri", l_escape_uri},
                                     {"unescape_uri", l_unescape_uri},
                                     {"now", l_now},
                                     {"log", l_log},
                                     {NULL, NULL}};

void lt_open_ngx(lua_State *L) {
  lua_newtable(L);
  luaL_register(L, NULL, ngx_funcs);
  lt_ngx_re_register(L);
  lt_ngx_util_register(L);
  lua_setfield(L, -2, "_ngx");
}
