/*
 * codec_impl.h - what the codec's files share (internal to core/lua): the
 * wire tags, byte order, and the hooks (codec.h has the format).
 */
#ifndef TY_CODEC_IMPL_H
#define TY_CODEC_IMPL_H

#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "base/common.h"
#include "codec.h"

enum {
  TAG_NIL = 0x00,
  TAG_FALSE = 0x01,
  TAG_TRUE = 0x02,
  TAG_INT32 = 0x03,
  TAG_DOUBLE = 0x04,
  TAG_STR = 0x05,
  TAG_TABLE = 0x06,
  TAG_HANDLE = 0x07,   /* + u64 token: a userdata the hooks know (codec.h) */
  TAG_NULL = 0x08,     /* the NULL light userdata (cjson.null, ngx.null) */
  TAG_SHORTSTR = 0x40, /* + length 0..63 */
  TAG_FIXINT = 0x80    /* + value 0..127 */
};

#define SHORTSTR_MAX 63

/* The one light userdata a message may hold: NULL, which lua-cjson and
 * OpenResty use as JSON's null (codec.h). */
static inline bool is_null_sentinel(lua_State *L, int idx) {
  return lua_type(L, idx) == LUA_TLIGHTUSERDATA && !lua_touserdata(L, idx);
}
#define FIXINT_MAX 127

/* LuaJIT's table limits (lj_def.h: LJ_MAX_ASIZE, LJ_MAX_HBITS). Larger
 * lua_createtable hints raise "table overflow", which decode must never do. */
#define LJ_ASIZE_MAX (1u << 27)
#define LJ_HASH_HINT_MAX (1u << 25)
/* A decoded hash section may also hold what was the sender's array part. */
#define NHASH_MAX (1u << 28)

/* Each table walked needs at most this many free stack slots (copy: the new
 * table, the source key and value, the copied key and value). */
#define SLOTS_PER_TABLE 5

#define PATH_MAX_CHARS 160

#define STR_(x) #x
#define STR(x) STR_(x)
#define DEPTH_STR STR(LT_CODEC_MAX_DEPTH)

/* ---- byte order: little-endian on the wire, free on little-endian hosts -- */

static inline uint32_t le32(uint32_t x) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  return __builtin_bswap32(x);
#else
  return x;
#endif
}

static inline uint64_t le64(uint64_t x) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  return __builtin_bswap64(x);
#else
  return x;
#endif
}

static inline void put_u32(uint8_t *p, uint32_t v) {
  v = le32(v);
  memcpy(p, &v, 4);
}

static inline uint32_t get_u32(const uint8_t *p) {
  uint32_t v;
  memcpy(&v, p, 4);
  return le32(v);
}

/* Doubles travel as their bit pattern, so -0.0, inf and NaN survive. */
static inline void put_f64(uint8_t *p, lua_Number d) {
  uint64_t v;
  memcpy(&v, &d, 8);
  v = le64(v);
  memcpy(p, &v, 8);
}

static inline lua_Number get_f64(const uint8_t *p) {
  uint64_t v;
  lua_Number d;
  memcpy(&v, p, 8);
  v = le64(v);
  memcpy(&d, &v, 8);
  return d;
}

static inline size_t varint_size(size_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    n++;
  }
  return n;
}

static inline uint8_t *put_varint(uint8_t *p, size_t v) {
  while (v >= 0x80) {
    *p++ = (uint8_t)(v | 0x80);
    v >>= 7;
  }
  *p++ = (uint8_t)v;
  return p;
}

static inline int fail_msg(char *err, size_t errlen, const char *msg) {
  if (err && errlen > 0) snprintf(err, errlen, "%s", msg);
  return -1;
}

/* The installed hooks, or NULL (codec.c). */
const lt_codec_hooks *lt_codec_hooks_get(void);

#endif
