/*
 * lws.c - the WebSocket frame codec (lws.h) and its Lua table `_ws`:
 *
 *   _ws.parse(buf, pos, need_mask, max_payload)
 *       -> fin, opcode, payload (unmasked), next_pos   a whole frame at pos
 *        | nil, need        need bytes from pos make the frame (0: unknown yet)
 *        | nil, -code       a protocol error: minus the close code to answer
 *   _ws.frame(opcode, payload, fin, mask) -> bytes    (mask: a fresh key)
 *   _ws.utf8(s) -> boolean        _ws.accept(key) -> Sec-WebSocket-Accept
 *
 * Parsing by position (no copy of the buffer per frame) and masking here,
 * eight bytes at a time, keep Lua out of the per-byte work.
 */
#include <lauxlib.h>
#include <lua.h>
#include <openssl/evp.h>
#include <string.h>
#include <sys/random.h>

#include "lws.h"

int lt_ws_parse(const uint8_t *p, size_t n, bool need_mask,
                uint64_t max_payload, lt_ws_frame *f) {
  if (n < 2) return 0;
  uint8_t b0 = p[0], b1 = p[1];
  f->fin = b0 & 0x80;
  f->opcode = b0 & 0x0f;
  f->masked = b1 & 0x80;
  if (b0 & 0x70) return -1002; /* no extension was negotiated */
  bool control = f->opcode & 0x8;
  if (f->opcode > 0xA || (f->opcode > 2 && f->opcode < 8)) return -1002;
  if (f->masked != need_mask) return -1002;
  uint64_t len = b1 & 0x7f;
  size_t head = 2;
  if (control && (!f->fin || len > 125)) return -1002;
  if (len == 126) {
    if (n < 4) return 0;
    len = (uint64_t)p[2] << 8 | p[3];
    head = 4;
  } else if (len == 127) {
    if (n < 10) return 0;
    len = 0;
    for (int i = 2; i < 10; i++) len = len << 8 | p[i];
    if (len >> 63) return -1002;
    head = 10;
  }
  if (len > max_payload) return -1009;
  if (f->masked) {
    if (n < head + 4) return 0;
    memcpy(f->key, p + head, 4);
    head += 4;
  }
  f->head = head;
  f->length = len;
  if (n - head < len) return 0;
  return (int)head;
}

void lt_ws_mask(uint8_t *dst, const uint8_t *src, size_t n,
                const uint8_t key[4], size_t offset) {
  uint8_t k[8];
  for (int i = 0; i < 8; i++) k[i] = key[(i + offset) & 3];
  uint64_t k8;
  memcpy(&k8, k, 8);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t v;
    memcpy(&v, src + i, 8);
    v ^= k8;
    memcpy(dst + i, &v, 8);
  }
  for (; i < n; i++) dst[i] = src[i] ^ k[i & 7];
}

size_t lt_ws_header(uint8_t *out, bool fin, uint8_t opcode, uint64_t length,
                    const uint8_t *key) {
  size_t h = 2;
  out[0] = (uint8_t)((fin ? 0x80 : 0) | (opcode & 0x0f));
  uint8_t m = key ? 0x80 : 0;
  if (length < 126) {
    out[1] = (uint8_t)(m | length);
  } else if (length <= 0xffff) {
    out[1] = m | 126;
    out[2] = (uint8_t)(length >> 8);
    out[3] = (uint8_t)length;
    h = 4;
  } else {
    out[1] = m | 127;
    for (int i = 0; i < 8; i++) out[2 + i] = (uint8_t)(length >> (56 - 8 * i));
    h = 10;
  }
  if (key) {
    memcpy(out + h, key, 4);
    h += 4;
  }
  return h;
}

bool lt_ws_utf8(const uint8_t *s, size_t n) {
  size_t i = 0;
  while (i < n) {
    /* ASCII runs, eight bytes at a time */
    while (i + 8 <= n) {
      uint64_t v;
      memcpy(&v, s + i, 8);
      if (v & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= n) break;
    uint8_t c = s[i];
    if (c < 0x80) {
      i++;
      continue;
    }
    size_t len;
    uint8_t lo = 0x80, hi = 0xbf; /* the range of the second byte */
    if (c >= 0xc2 && c <= 0xdf) len = 2;
    else if (c >= 0xe0 && c <= 0xef) {
      len = 3;
      if (c == 0xe0) lo = 0xa0;      /* overlong */
      else if (c == 0xed) hi = 0x9f; /* surrogates */
    } else if (c >= 0xf0 && c <= 0xf4) {
      len = 4;
      if (c == 0xf0) lo = 0x90;      /* overlong */
      else if (c == 0xf4) hi = 0x8f; /* above U+10FFFF */
    } else return false;
    if (n - i < len) return false;
    if (s[i + 1] < lo || s[i + 1] > hi) return false;
    for (size_t j = 2; j < len; j++)
      if ((s[i + j] & 0xc0) != 0x80) return false;
    i += len;
  }
  return true;
}

/* ---- Lua -------------------------------------------------------------------------- */

static int l_parse(lua_State *L) {
  size_t n;
  const uint8_t *buf = (const uint8_t *)luaL_checklstring(L, 1, &n);
  lua_Integer pos = luaL_checkinteger(L, 2);
  bool need_mask = lua_toboolean(L, 3);
  lua_Number max = luaL_checknumber(L, 4);
  if (pos < 1 || (size_t)pos > n + 1)
    return luaL_error(L, "_ws.parse: position %d outside the buffer", (int)pos);
  const uint8_t *p = buf + pos - 1;
  size_t left = n - (size_t)(pos - 1);
  lt_ws_frame f = {0};
  /* max_message = math.huge (or NaN) must not reach an undefined cast */
  uint64_t maxp = !(max >= 0)     ? 0
                  : max >= 0x1p63 ? UINT64_MAX >> 1
                                  : (uint64_t)max;
  int r = lt_ws_parse(p, left, need_mask, maxp, &f);
  if (r < 0) {
    lua_pushnil(L);
    lua_pushinteger(L, r);
    return 2;
  }
  if (r == 0) {
    lua_pushnil(L);
    /* The whole frame's size once its header is here: the caller gathers
     * that much before asking again (no quadratic re-joining). */
    lua_pushnumber(L, f.head ? (lua_Number)(f.head + f.length) : 0);
    return 2;
  }
  size_t len = (size_t)f.length;
  lua_pushboolean(L, f.fin);
  lua_pushinteger(L, f.opcode);
  if (f.masked && len) {
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    uint8_t *d = (uint8_t *)luaL_prepbuffer(&b);
    if (len <= LUAL_BUFFERSIZE) {
      lt_ws_mask(d, p + f.head, len, f.key, 0);
      luaL_addsize(&b, len);
    } else {
      for (size_t off = 0; off < len;) {
        size_t k = len - off < LUAL_BUFFERSIZE ? len - off : LUAL_BUFFERSIZE;
        d = (uint8_t *)luaL_prepbuffer(&b);
        lt_ws_mask(d, p + f.head + off, k, f.key, off);
        luaL_addsize(&b, k);
        off += k;
      }
    }
    luaL_pushresult(&b);
  } else {
    lua_pushlstring(L, (const char *)p + f.head, len);
  }
  lua_pushinteger(L, pos + (lua_Integer)(f.head + len));
  return 4;
}

/* Mask keys: RFC 6455 asks for unpredictable ones; a per-thread xorshift
 * seeded from getrandom is enough for that (they only stop proxies from
 * matching payloads), and costs no system call per frame. */
static _Thread_local uint64_t key_state;

static void mask_key(uint8_t key[4]) {
  if (!key_state) {
    if (getrandom(&key_state, sizeof key_state, 0) != sizeof key_state)
      key_state = (uint64_t)(uintptr_t)&key_state ^ 0x9e3779b97f4a7c15ull;
    key_state |= 1;
  }
  uint64_t x = key_state;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  key_state = x;
  uint32_t k = (uint32_t)(x >> 32);
  memcpy(key, &k, 4);
}

static int l_frame(lua_State *L) {
  lua_Integer op = luaL_checkinteger(L, 1);
  size_t n;
  const uint8_t *data = (const uint8_t *)luaL_optlstring(L, 2, "", &n);
  bool fin = lua_isnoneornil(L, 3) || lua_toboolean(L, 3);
  bool mask = lua_toboolean(L, 4);
  if (op < 0 || op > 15) return luaL_error(L, "_ws.frame: opcode %d", (int)op);
  uint8_t key[4], head[14];
  if (mask) mask_key(key);
  size_t h = lt_ws_header(head, fin, (uint8_t)op, n, mask ? key : NULL);
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  luaL_addlstring(&b, (const char *)head, h);
  if (!mask) {
    luaL_addlstring(&b, (const char *)data, n);
  } else {
    for (size_t off = 0; off < n;) {
      size_t k = n - off < LUAL_BUFFERSIZE ? n - off : LUAL_BUFFERSIZE;
      uint8_t *d = (uint8_t *)luaL_prepbuffer(&b);
      lt_ws_mask(d, data + off, k, key, off);
      luaL_addsize(&b, k);
      off += k;
    }
  }
  luaL_pushresult(&b);
  return 1;
}

static int l_utf8(lua_State *L) {
  size_t n;
  const uint8_t *s = (const uint8_t *)luaL_checklstring(L, 1, &n);
  lua_pushboolean(L, lt_ws_utf8(s, n));
  return 1;
}

static int l_accept(lua_State *L) {
  static const char guid[] = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
  size_t n;
  const char *key = luaL_checklstring(L, 1, &n);
  if (n > 256) return luaL_error(L, "_ws.accept: key too long");
  char in[256 + sizeof guid];
  memcpy(in, key, n);
  memcpy(in + n, guid, sizeof guid - 1);
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int mdlen = 0;
  if (!EVP_Digest(in, n + sizeof guid - 1, md, &mdlen, EVP_sha1(), NULL))
    return luaL_error(L, "_ws.accept: sha1 failed");
  unsigned char out[64];
  int k = EVP_EncodeBlock(out, md, (int)mdlen);
  lua_pushlstring(L, (const char *)out, (size_t)k);
  return 1;
}

void lt_open_ws(lua_State *L) {
  static const luaL_Reg funcs[] = {{"parse", l_parse},
                                   {"frame", l_frame},
                                   {"utf8", l_utf8},
                                   {"accept", l_accept},
                                   {NULL, NULL}};
  lua_newtable(L);
  luaL_register(L, NULL, funcs);
  lua_setfield(L, -2, "_ws");
}
