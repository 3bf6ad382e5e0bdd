/*
 * codec_dec.c - decoding messages (codec.h), and releasing the handles of a
 * message that will never be decoded.
 */
#include "codec_impl.h"

/* ---- decode -------------------------------------------------------------- */

typedef struct dec {
  lua_State *L;
  const uint8_t *p, *start, *end;
  char *err;
  size_t errlen;
} dec;

static int dec_fail(dec *d, const char *what, const uint8_t *at) {
  if (d->err && d->errlen > 0)
    snprintf(d->err, d->errlen, "malformed message: %s at byte %zu", what,
             (size_t)(at - d->start));
  return -1;
}

static inline size_t dec_left(const dec *d) { return (size_t)(d->end - d->p); }

/* LEB128, at most 64 bits; longer or overflowing encodings are malformed. */
static int dec_varint(dec *d, size_t *out) {
  const uint8_t *at = d->p;
  uint64_t v = 0;
  for (unsigned shift = 0; shift < 64; shift += 7) {
    if (d->p == d->end) return dec_fail(d, "truncated length", at);
    uint64_t c = *d->p++;
    if (shift == 63 && c > 1) break;
    v |= (c & 0x7f) << shift;
    if (!(c & 0x80)) {
#if SIZE_MAX < UINT64_MAX
      if (v > SIZE_MAX) break;
#endif
      *out = (size_t)v;
      return 0;
    }
  }
  return dec_fail(d, "bad length", at);
}

static int dec_lstr(dec *d, size_t len, const uint8_t *at) {
  if (len > dec_left(d)) return dec_fail(d, "truncated string", at);
  lua_pushlstring(d->L, (const char *)d->p, len);
  d->p += len;
  return 0;
}

static int dec_value(dec *d, int depth);

/* Tables cannot hold nil or NaN keys; lua_rawset would raise on them. */
static bool bad_key(lua_State *L) {
  int t = lua_type(L, -1);
  return t == LUA_TNIL || (t == LUA_TNUMBER && isnan(lua_tonumber(L, -1)));
}

static int dec_body(dec *d, int t, int depth, size_t narr, size_t nhash) {
  lua_State *L = d->L;
  for (size_t i = 1; i <= narr; i++) {
    if (dec_value(d, depth + 1) < 0) return -1;
    if (lua_type(L, -1) == LUA_TNIL) lua_pop(L, 1);
    else lua_rawseti(L, t, (int)i);
  }
  for (size_t i = 0; i < nhash; i++) {
    const uint8_t *at = d->p;
    if (dec_value(d, depth + 1) < 0) return -1;
    if (bad_key(L)) return dec_fail(d, "nil or NaN table key", at);
    /* Encode never writes one (a key must be a plain value). */
    if (lua_type(L, -1) == LUA_TLIGHTUSERDATA)
      return dec_fail(d, "null table key", at);
    if (dec_value(d, depth + 1) < 0) return -1;
    if (lua_type(L, -1) == LUA_TNIL) lua_pop(L, 2);
    else lua_rawset(L, t);
  }
  return 0;
}

static int dec_table(dec *d, int depth, const uint8_t *at) {
  size_t narr, nhash;
  if (depth >= LT_CODEC_MAX_DEPTH)
    return dec_fail(d, "tables nested deeper than " DEPTH_STR " levels", at);
  if (dec_varint(d, &narr) < 0) return -1;
  if (dec_left(d) < 4) return dec_fail(d, "truncated table", at);
  nhash = get_u32(d->p);
  d->p += 4;
  /* A value takes at least a byte, a pair two: counts beyond what is left
   * are lies, and must not reach lua_createtable as huge preallocations. */
  if (narr > LJ_ASIZE_MAX || nhash > NHASH_MAX || narr > dec_left(d) ||
      nhash > (dec_left(d) - narr) / 2)
    return dec_fail(d, "bad table size", at);
  if (!lua_checkstack(d->L, 3))
    return dec_fail(d, "too deep for the Lua stack", at);
  lua_createtable(d->L, (int)narr,
                  (int)(nhash < LJ_HASH_HINT_MAX ? nhash : LJ_HASH_HINT_MAX));
  return dec_body(d, lua_gettop(d->L), depth, narr, nhash);
}

/* Without hooks the tag does not exist, as for every other reader. */
static int dec_handle(dec *d, const uint8_t *at) {
  const lt_codec_hooks *h = lt_codec_hooks_get();
  if (!h) return dec_fail(d, "bad tag", at);
  if (dec_left(d) < 8) return dec_fail(d, "truncated handle", at);
  uint64_t token = get_u32(d->p) | (uint64_t)get_u32(d->p + 4) << 32;
  d->p += 8;
  if (!lua_checkstack(d->L, 4) || h->decode(d->L, token) < 0)
    return dec_fail(d, "unknown handle", at);
  return 0;
}

static int dec_value(dec *d, int depth) {
  lua_State *L = d->L;
  const uint8_t *at = d->p;
  size_t len;
  if (d->p == d->end) return dec_fail(d, "truncated value", at);
  unsigned tag = *d->p++;
  if (tag >= TAG_FIXINT) {
    lua_pushnumber(L, (lua_Number)(tag - TAG_FIXINT));
    return 0;
  }
  if (tag >= TAG_SHORTSTR) return dec_lstr(d, tag - TAG_SHORTSTR, at);
  switch (tag) {
  case TAG_NIL: lua_pushnil(L); return 0;
  case TAG_FALSE:
  case TAG_TRUE: lua_pushboolean(L, tag == TAG_TRUE); return 0;
  case TAG_INT32:
    if (dec_left(d) < 4) return dec_fail(d, "truncated number", at);
    lua_pushnumber(L, (lua_Number)(int32_t)get_u32(d->p));
    d->p += 4;
    return 0;
  case TAG_DOUBLE:
    if (dec_left(d) < 8) return dec_fail(d, "truncated number", at);
    lua_pushnumber(L, get_f64(d->p));
    d->p += 8;
    return 0;
  case TAG_STR:
    if (dec_varint(d, &len) < 0) return -1;
    return dec_lstr(d, len, at);
  case TAG_TABLE: return dec_table(d, depth, at);
  case TAG_HANDLE: return dec_handle(d, at);
  case TAG_NULL: lua_pushlightuserdata(L, NULL); return 0;
  default: return dec_fail(d, "bad tag", at);
  }
}

int lt_codec_decode(lua_State *L, const char *data, size_t len, char *err,
                    size_t errlen) {
  int top = lua_gettop(L), n = 0;
  if (err && errlen > 0) err[0] = '\0';
  if (len == 0) return 0;
  dec d = {L,
           (const uint8_t *)data,
           (const uint8_t *)data,
           (const uint8_t *)data + len,
           err,
           errlen};
  while (d.p < d.end) {
    /* Every value needs a slot; a C function may hold LUAI_MAXCSTACK. */
    if (!lua_checkstack(L, 1)) {
      lua_settop(L, top);
      return fail_msg(err, errlen, "message has too many values");
    }
    if (dec_value(&d, 0) < 0) {
      lua_settop(L, top);
      return -1;
    }
    n++;
  }
  return n;
}

/* ---- release: the handles of a message nobody will decode ----------------- */

/* Skips one value at d->p, calling drop (if any) for each handle inside and
 * counting them; -1 on malformed input (release then stops: what was found
 * is dropped). */
static int skip_value(dec *d, void (*drop)(uint64_t), size_t *handles,
                      int depth) {
  size_t len, narr, nhash;
  if (d->p == d->end || depth > LT_CODEC_MAX_DEPTH) return -1;
  unsigned tag = *d->p++;
  if (tag >= TAG_FIXINT) return 0;
  if (tag >= TAG_SHORTSTR) len = tag - TAG_SHORTSTR;
  else if (tag == TAG_STR) {
    if (dec_varint(d, &len) < 0) return -1;
  } else if (tag <= TAG_TRUE || tag == TAG_NULL) return 0;
  else if (tag == TAG_INT32 || tag == TAG_DOUBLE)
    len = tag == TAG_INT32 ? 4 : 8;
  else if (tag == TAG_HANDLE) {
    if (dec_left(d) < 8) return -1;
    if (drop) drop(get_u32(d->p) | (uint64_t)get_u32(d->p + 4) << 32);
    (*handles)++;
    len = 8;
  } else if (tag == TAG_TABLE) {
    if (dec_varint(d, &narr) < 0 || dec_left(d) < 4) return -1;
    nhash = get_u32(d->p);
    d->p += 4;
    if (narr > dec_left(d) || nhash > dec_left(d)) return -1;
    for (size_t i = 0; i < narr + 2 * nhash; i++)
      if (skip_value(d, drop, handles, depth + 1) < 0) return -1;
    return 0;
  } else return -1;
  if (len > dec_left(d)) return -1;
  d->p += len;
  return 0;
}

static size_t walk_handles(const char *data, size_t len,
                           void (*drop)(uint64_t)) {
  size_t handles = 0;
  if (!len || !memchr(data, TAG_HANDLE, len)) return 0;
  dec d = {NULL,
           (const uint8_t *)data,
           (const uint8_t *)data,
           (const uint8_t *)data + len,
           NULL,
           0};
  while (d.p < d.end)
    if (skip_value(&d, drop, &handles, 0) < 0) break;
  return handles;
}

void lt_codec_release(const char *data, size_t len) {
  const lt_codec_hooks *h = lt_codec_hooks_get();
  if (h && h->drop) walk_handles(data, len, h->drop);
}

bool lt_codec_has_handles(const char *data, size_t len) {
  return walk_handles(data, len, NULL) > 0;
}
