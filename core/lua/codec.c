/*
 * codec.c - the message codec (see codec.h for the contract and the wire
 * format).
 *
 * Encode and copy walk the value the same way (the same order, the same
 * checks, the same byte accounting), so a same-worker copy fails exactly
 * where and how encode would. Neither allocates per value: encode appends to
 * one growable buffer, copy builds tables directly. Tables on the path being
 * walked sit in a fixed array (depth <= 100), which is what cycle detection
 * scans; there is deliberately no "seen" set, so a sub-table referenced twice
 * without a cycle is simply walked, and copied, twice.
 *
 * The paths in error messages come from the Lua stack: while a pair is being
 * walked its key is still on the stack (lua_next), so a path segment is just
 * a stack index or an array index, and the path is rendered only on failure.
 */
#include <stdarg.h>

#include "codec_impl.h"

/* ---- sizes: the one definition encode writes and copy accounts ---------- */

/* Bytes for d: 1 (fixint), 5 (int32) or 9 (double). Integer-valued doubles
 * in int32 range are stored as integers, except -0.0 whose sign an integer
 * would lose; NaN fails both range comparisons. */
static inline size_t num_size(lua_Number d, int32_t *iv) {
  if (d >= -2147483648.0 && d <= 2147483647.0) {
    int32_t i = (int32_t)d;
    if ((lua_Number)i == d && !(i == 0 && signbit(d))) {
      *iv = i;
      return i >= 0 && i <= FIXINT_MAX ? 1 : 5;
    }
  }
  return 9;
}

static inline size_t str_size(size_t len) {
  return len <= SHORTSTR_MAX ? 1 + len : 1 + varint_size(len) + len;
}

/* Tag, varint narr, u32 nhash: nhash is only known after the walk, so it has
 * a fixed width and is patched in place. */
static inline size_t table_hdr_size(size_t narr) {
  return 1 + varint_size(narr) + 4;
}

/* The array section is 1..#t, holes included (they travel as nils). A border
 * beyond LuaJIT's largest array part can only come from a sparse table, whose
 * keys then all go through the hash section instead. */
static size_t array_len(lua_State *L, int idx) {
  size_t n = lua_objlen(L, idx);
  return n <= LJ_ASIZE_MAX ? n : 0;
}

/* Whether the number key d was already sent in the array section. */
static inline bool in_array(lua_Number d, size_t narr) {
  return d >= 1 && d <= (lua_Number)narr && (lua_Number)(size_t)d == d;
}

/* ---- the walk shared by encode and copy: path, checks, errors ----------- */

enum { SEG_INDEX = 0, SEG_IN_KEY = -1 }; /* otherwise: stack index of key */

typedef struct seg {
  int key;
  size_t index;
} seg;

typedef struct walk {
  lua_State *L;
  int arg;    /* stack index of the top-level value being walked */
  size_t max; /* byte limit of the encoding */
  char *err;
  size_t errlen;
  const void *open[LT_CODEC_MAX_DEPTH]; /* tables on the current path */
  seg path[LT_CODEC_MAX_DEPTH];         /* path[d]: step to depth d + 1 */
} walk;

typedef struct sbuf {
  char *p;
  size_t left;
  bool full;
} sbuf;

static void sb_add(sbuf *s, const char *fmt, ...) {
  va_list ap;
  if (s->full) return;
  va_start(ap, fmt);
  int n = vsnprintf(s->p, s->left, fmt, ap);
  va_end(ap);
  if (n < 0 || (size_t)n >= s->left) {
    s->full = true;
    return;
  }
  s->p += n;
  s->left -= (size_t)n;
}

static bool is_ident(const char *s, size_t len) {
  if (len == 0 || len > 40 || (s[0] >= '0' && s[0] <= '9')) return false;
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)s[i];
    if (!(c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
          (c >= '0' && c <= '9')))
      return false;
  }
  return true;
}

/* ["..."] with escapes, cut after 24 bytes: enough to recognise a key. */
static void sb_quoted(sbuf *s, const char *str, size_t len) {
  sb_add(s, "[\"");
  for (size_t i = 0; i < len && i < 24; i++) {
    unsigned char c = (unsigned char)str[i];
    if (c == '"' || c == '\\') sb_add(s, "\\%c", c);
    else if (c >= 0x20 && c < 0x7f) sb_add(s, "%c", c);
    else sb_add(s, "\\x%02x", c);
  }
  sb_add(s, len > 24 ? "...\"]" : "\"]");
}

static void sb_key(sbuf *s, lua_State *L, int k) {
  size_t len;
  const char *str;
  switch (lua_type(L, k)) {
  case LUA_TSTRING:
    str = lua_tolstring(L, k, &len);
    if (is_ident(str, len)) sb_add(s, ".%s", str);
    else sb_quoted(s, str, len);
    break;
  case LUA_TNUMBER: sb_add(s, "[%.14g]", lua_tonumber(L, k)); break;
  case LUA_TBOOLEAN:
    sb_add(s, lua_toboolean(L, k) ? "[true]" : "[false]");
    break;
  default: /* a table key: only its existence can be named */
    sb_add(s, "[{table}]");
    break;
  }
}

/* Renders path[0..depth) like ".handlers[3].cb"; "<key>" steps into a table
 * used as a key. A path too long for the buffer ends in "...". */
static void render_path(walk *w, int depth, char *out, size_t cap) {
  sbuf s = {out, cap, false};
  out[0] = '\0';
  for (int d = 0; d < depth && !s.full; d++) {
    const seg *g = &w->path[d];
    if (g->key == SEG_INDEX) sb_add(&s, "[%zu]", g->index);
    else if (g->key == SEG_IN_KEY) sb_add(&s, "<key>");
    else sb_key(&s, w->L, g->key);
  }
  if (s.full) memcpy(out + cap - 4, "...", 4);
}

static int walk_fail(walk *w, int depth, const char *what) {
  char path[PATH_MAX_CHARS];
  if (!w->err || w->errlen == 0) return -1;
  render_path(w, depth, path, sizeof(path));
  snprintf(w->err, w->errlen, "%s (argument %d%s%s)", what, w->arg,
           depth > 0 ? ", at " : "", path);
  return -1;
}

static const char *type_name(lua_State *L, int t) {
  if (t == LUA_TTHREAD) return "coroutine";
  if (t == LUA_TLIGHTUSERDATA) return "light userdata";
  return lua_typename(L, t); /* "function", "userdata", LuaJIT's "cdata" */
}

static int walk_fail_type(walk *w, int idx, int depth, bool as_key) {
  char what[80];
  snprintf(what, sizeof(what), "cannot copy a %s%s",
           type_name(w->L, lua_type(w->L, idx)),
           as_key ? " used as a table key" : "");
  return walk_fail(w, depth, what);
}

static int walk_fail_size(walk *w, size_t size) {
  if (w->err && w->errlen > 0)
    snprintf(w->err, w->errlen,
             "message of %zu+ bytes exceeds the limit of %zu bytes; raise it "
             "with tycho.config{max_message=...}",
             size, w->max);
  return -1;
}

/* Checks a table at `depth` before walking into it: not already on the path
 * (a cycle), not too deep, room on the Lua stack. */
static int walk_enter(walk *w, int idx, int depth) {
  const void *t = lua_topointer(w->L, idx);
  for (int d = 0; d < depth; d++)
    if (w->open[d] == t) return walk_fail(w, depth, "cannot copy a cycle");
  if (depth >= LT_CODEC_MAX_DEPTH)
    return walk_fail(w, depth,
                     "cannot copy tables nested deeper than " DEPTH_STR
                     " levels");
  if (!lua_checkstack(w->L, SLOTS_PER_TABLE))
    return walk_fail(w, depth, "cannot copy: the Lua stack is full");
  w->open[depth] = t;
  return 0;
}

static void walk_init(walk *w, lua_State *L, size_t max, char *err,
                      size_t errlen) {
  w->L = L;
  w->arg = 0;
  w->max = max;
  w->err = err;
  w->errlen = errlen;
  if (err && errlen > 0) err[0] = '\0';
}

/* Positive stack index of `first`, which may be relative (negative). */
static int abs_index(lua_State *L, int first) {
  return first < 0 && first > LUA_REGISTRYINDEX ? lua_gettop(L) + first + 1
                                                : first;
}

/* ---- encode -------------------------------------------------------------- */

typedef struct enc {
  walk w;
  ty__buf *b;
  size_t start; /* buf->len when the encode began */
  size_t lim;   /* min(cap, start + max): one compare per write */
  int handles;  /* userdata the hooks took; they hear how the encode ends */
  int to;       /* LT_CODEC_TO_*: where the encoding goes (for the hooks) */
} enc;

/* ---- handles: userdata that travel as tokens (see codec.h) ---------------- */

/* acquire/release: the hooks struct is fully built before it is published;
 * every state of the process installs the same one. */
static _Atomic(const lt_codec_hooks *) g_hooks;

void lt_codec_set_hooks(const lt_codec_hooks *h) {
  atomic_store_explicit(&g_hooks, h, memory_order_release);
}

const lt_codec_hooks *lt_codec_hooks_get(void) {
  return atomic_load_explicit(&g_hooks, memory_order_acquire);
}

static inline uint8_t *enc_put(enc *e, size_t need);

/* A userdata: 0 written as a handle, 1 not a handle, -1 failed. */
static int enc_handle(enc *e, int idx, int depth) {
  const lt_codec_hooks *h = lt_codec_hooks_get();
  uint64_t token;
  char msg[160];
  if (!h) return 1;
  msg[0] = 0;
  int r = h->encode(e->w.L, idx, e->to, &token, msg, sizeof msg);
  if (r > 0) return 1;
  if (r < 0) return walk_fail(&e->w, depth, msg);
  e->handles++;
  uint8_t *p = enc_put(e, 9);
  if (!p) return -1;
  *p = TAG_HANDLE;
  put_u32(p + 1, (uint32_t)token);
  put_u32(p + 5, (uint32_t)(token >> 32));
  return 0;
}

static void enc_set_lim(enc *e) {
  size_t end = e->w.max > SIZE_MAX - e->start ? SIZE_MAX : e->start + e->w.max;
  e->lim = e->b->cap < end ? e->b->cap : end;
}

/* Slow path of enc_put: over the limit (fail) or out of capacity (grow). */
static int enc_reserve(enc *e, size_t need) {
  size_t used = e->b->len - e->start;
  if (need > e->w.max - used)
    return walk_fail_size(&e->w,
                          need > SIZE_MAX - used ? SIZE_MAX : used + need);
  if (ty__buf_reserve(e->b, need) < 0)
    return fail_msg(e->w.err, e->w.errlen, "cannot copy: out of memory");
  enc_set_lim(e);
  return 0;
}

/* Claims `need` bytes of output and returns where to write them. Every write
 * claims exactly what it writes, so the size limit is exact and copy's
 * accounting matches byte for byte. */
static inline uint8_t *enc_put(enc *e, size_t need) {
  if (ty__unlikely(need > e->lim - e->b->len) && enc_reserve(e, need) < 0)
    return NULL;
  uint8_t *p = (uint8_t *)e->b->data + e->b->len;
  e->b->len += need;
  return p;
}

/* Values are dispatched on a type their caller already read: each Lua API
 * call costs a few ns, and a walk makes several per value. */
static int enc_value(enc *e, int idx, int type, int depth);

/* Writes d's n = num_size(d, &i) bytes at p. */
static inline void put_number(uint8_t *p, lua_Number d, size_t n, int32_t i) {
  if (n == 1) {
    *p = (uint8_t)(TAG_FIXINT | i);
  } else if (n == 5) {
    *p = TAG_INT32;
    put_u32(p + 1, (uint32_t)i);
  } else {
    *p = TAG_DOUBLE;
    put_f64(p + 1, d);
  }
}

static int enc_number(enc *e, lua_Number d) {
  int32_t i = 0;
  size_t n = num_size(d, &i);
  uint8_t *p = enc_put(e, n);
  if (!p) return -1;
  put_number(p, d, n, i);
  return 0;
}

/* Writes the str_size(len) bytes of string s at p; returns their end. */
static inline uint8_t *put_string(uint8_t *p, const char *s, size_t len) {
  if (len <= SHORTSTR_MAX) {
    *p++ = (uint8_t)(TAG_SHORTSTR | len);
  } else {
    *p++ = TAG_STR;
    p = put_varint(p, len);
  }
  memcpy(p, s, len);
  return p + len;
}

static int enc_string(enc *e, int idx) {
  size_t len;
  const char *s = lua_tolstring(e->w.L, idx, &len);
  uint8_t *p = enc_put(e, str_size(len));
  if (!p) return -1;
  put_string(p, s, len);
  return 0;
}

/* Values built in C, for threads without a Lua state (codec.h). */
int lt_codec_put_number(ty__buf *b, double d) {
  int32_t i = 0;
  size_t n = num_size(d, &i);
  if (ty__buf_reserve(b, n)) return -1;
  put_number((uint8_t *)b->data + b->len, d, n, i);
  b->len += n;
  return 0;
}

int lt_codec_put_string(ty__buf *b, const char *s, size_t len) {
  size_t n = str_size(len);
  if (ty__buf_reserve(b, n)) return -1;
  put_string((uint8_t *)b->data + b->len, s, len);
  b->len += n;
  return 0;
}

/* The key at k of the table at `depth`: 1 if written, 0 if it is an index
 * the array section already sent, -1 on error. A key is never nil; a table
 * key is walked like a value, one level deeper. */
static int enc_key(enc *e, int k, int depth, size_t narr) {
  lua_State *L = e->w.L;
  int t = lua_type(L, k);
  if (t == LUA_TNUMBER) {
    lua_Number d = lua_tonumber(L, k);
    if (in_array(d, narr)) return 0;
    return enc_number(e, d) < 0 ? -1 : 1;
  }
  if (t == LUA_TTABLE) e->w.path[depth].key = SEG_IN_KEY;
  else if (t != LUA_TBOOLEAN && t != LUA_TSTRING)
    return walk_fail_type(&e->w, k, depth, true);
  return enc_value(e, k, t, depth + 1) < 0 ? -1 : 1;
}

static int enc_array(enc *e, int idx, int depth, size_t narr) {
  lua_State *L = e->w.L;
  int v = lua_gettop(L) + 1;
  seg *g = &e->w.path[depth];
  for (size_t i = 1; i <= narr; i++) {
    lua_rawgeti(L, idx, (int)i);
    g->key = SEG_INDEX;
    g->index = i;
    if (enc_value(e, v, lua_type(L, v), depth + 1) < 0) return -1;
    lua_pop(L, 1);
  }
  return 0;
}

/* Returns the number of pairs written, or -1. */
static long enc_hash(enc *e, int idx, int depth, size_t narr) {
  lua_State *L = e->w.L;
  int k = lua_gettop(L) + 1;
  long n = 0;
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    int r = enc_key(e, k, depth, narr);
    if (r < 0) return -1;
    if (r > 0) {
      e->w.path[depth].key = k;
      if (enc_value(e, k + 1, lua_type(L, k + 1), depth + 1) < 0) return -1;
      n++;
    }
    lua_pop(L, 1);
  }
  return n;
}

static int enc_table(enc *e, int idx, int depth) {
  if (walk_enter(&e->w, idx, depth) < 0) return -1;
  size_t narr = array_len(e->w.L, idx);
  uint8_t *p = enc_put(e, table_hdr_size(narr));
  if (!p) return -1;
  *p++ = TAG_TABLE;
  p = put_varint(p, narr);
  /* An offset, not a pointer: the buffer may move while the body grows. */
  size_t at = (size_t)(p - (uint8_t *)e->b->data);
  if (enc_array(e, idx, depth, narr) < 0) return -1;
  long nhash = enc_hash(e, idx, depth, narr);
  if (nhash < 0) return -1;
  put_u32((uint8_t *)e->b->data + at, (uint32_t)nhash);
  return 0;
}

static int enc_value(enc *e, int idx, int type, int depth) {
  lua_State *L = e->w.L;
  uint8_t *p;
  switch (type) {
  case LUA_TNIL:
    if (!(p = enc_put(e, 1))) return -1;
    *p = TAG_NIL;
    return 0;
  case LUA_TBOOLEAN:
    if (!(p = enc_put(e, 1))) return -1;
    *p = lua_toboolean(L, idx) ? TAG_TRUE : TAG_FALSE;
    return 0;
  case LUA_TNUMBER: return enc_number(e, lua_tonumber(L, idx));
  case LUA_TSTRING: return enc_string(e, idx);
  case LUA_TTABLE: return enc_table(e, idx, depth);
  case LUA_TUSERDATA: {
    int r = enc_handle(e, idx, depth);
    if (r <= 0) return r;
    return walk_fail_type(&e->w, idx, depth, false);
  }
  case LUA_TLIGHTUSERDATA:
    if (!is_null_sentinel(L, idx))
      return walk_fail_type(&e->w, idx, depth, false);
    if (!(p = enc_put(e, 1))) return -1;
    *p = TAG_NULL;
    return 0;
  default: return walk_fail_type(&e->w, idx, depth, false);
  }
}

int lt_codec_encode(lua_State *L, int first, int n, ty__buf *buf,
                    size_t max_bytes, char *err, size_t errlen) {
  return lt_codec_encode_to(L, first, n, buf, max_bytes, LT_CODEC_TO_HERE, err,
                            errlen);
}

int lt_codec_encode_to(lua_State *L, int first, int n, ty__buf *buf,
                       size_t max_bytes, int to, char *err, size_t errlen) {
  enc e;
  e.to = to;
  int top = lua_gettop(L);
  first = abs_index(L, first);
  walk_init(&e.w, L, max_bytes, err, errlen);
  e.b = buf;
  e.start = buf->len;
  e.handles = 0;
  enc_set_lim(&e);
  for (int i = 0; i < n; i++) {
    e.w.arg = first + i;
    if (enc_value(&e, first + i, lua_type(L, first + i), 0) < 0) {
      lua_settop(L, top);
      buf->len = e.start;
      if (e.handles) lt_codec_hooks_get()->done(L, false);
      return -1;
    }
  }
  if (e.handles) lt_codec_hooks_get()->done(L, true);
  return 0;
}

/* Scalars only, straight into the caller's bytes (codec.h): the same bytes
 * enc_value writes, without the walk's setup (error context, buffer, size
 * limit, hooks), which costs more than encoding a number does. */
int lt_codec_encode_small(lua_State *L, int first, int n, char *out,
                          size_t cap) {
  uint8_t *p = (uint8_t *)out, *end = p + cap;
  first = abs_index(L, first);
  for (int idx = first; idx < first + n; idx++) {
    int t = lua_type(L, idx);
    if (t == LUA_TNUMBER) {
      lua_Number d = lua_tonumber(L, idx);
      int32_t i = 0;
      size_t k = num_size(d, &i);
      if ((size_t)(end - p) < k) return -1;
      put_number(p, d, k, i);
      p += k;
    } else if (t == LUA_TSTRING) {
      size_t len;
      const char *s = lua_tolstring(L, idx, &len);
      if (len > SHORTSTR_MAX || (size_t)(end - p) < str_size(len)) return -1;
      p = put_string(p, s, len);
    } else if ((t == LUA_TNIL || t == LUA_TBOOLEAN) && p < end) {
      *p++ = t == LUA_TNIL           ? TAG_NIL
             : lua_toboolean(L, idx) ? TAG_TRUE
                                     : TAG_FALSE;
    } else {
      return -1;
    }
  }
  return (int)(p - (uint8_t *)out);
}

/* ---- copy: encode's walk, building tables instead of bytes --------------- */

typedef struct cp {
  walk w;
  size_t size; /* bytes the encoding would have so far */
} cp;

/* Mirrors enc_put's limit check and its error. */
static inline int cp_account(cp *c, size_t need) {
  if (ty__unlikely(need > c->w.max - c->size))
    return walk_fail_size(&c->w, need > SIZE_MAX - c->size ? SIZE_MAX
                                                           : c->size + need);
  c->size += need;
  return 0;
}

static int cp_table(cp *c, int src, int depth);

/* Accounts for the scalar at idx as encode would write it. */
static int cp_scalar(cp *c, int idx, int type, int depth) {
  int32_t i;
  size_t need;
  switch (type) {
  case LUA_TNIL:
  case LUA_TBOOLEAN: need = 1; break;
  case LUA_TNUMBER: need = num_size(lua_tonumber(c->w.L, idx), &i); break;
  case LUA_TSTRING: need = str_size(lua_objlen(c->w.L, idx)); break;
  case LUA_TLIGHTUSERDATA:
    if (!is_null_sentinel(c->w.L, idx))
      return walk_fail_type(&c->w, idx, depth, false);
    need = 1;
    break;
  default: return walk_fail_type(&c->w, idx, depth, false);
  }
  return cp_account(c, need);
}

/* Pushes a copy of the value at idx (strings are immutable: shared). */
static int cp_push(cp *c, int idx, int type, int depth) {
  if (type == LUA_TTABLE) return cp_table(c, idx, depth);
  if (cp_scalar(c, idx, type, depth) < 0) return -1;
  lua_pushvalue(c->w.L, idx);
  return 0;
}

/* enc_key's twin: 1 with the key's copy pushed, 0 (array index), -1. */
static int cp_key(cp *c, int k, int depth, size_t narr) {
  lua_State *L = c->w.L;
  int t = lua_type(L, k);
  if (t == LUA_TNUMBER) {
    int32_t i;
    lua_Number d = lua_tonumber(L, k);
    if (in_array(d, narr)) return 0;
    if (cp_account(c, num_size(d, &i)) < 0) return -1;
    lua_pushvalue(L, k);
    return 1;
  }
  if (t == LUA_TTABLE) c->w.path[depth].key = SEG_IN_KEY;
  else if (t != LUA_TBOOLEAN && t != LUA_TSTRING)
    return walk_fail_type(&c->w, k, depth, true);
  return cp_push(c, k, t, depth + 1) < 0 ? -1 : 1;
}

static int cp_array(cp *c, int src, int t, int depth, size_t narr) {
  lua_State *L = c->w.L;
  seg *g = &c->w.path[depth];
  for (size_t i = 1; i <= narr; i++) {
    lua_rawgeti(L, src, (int)i);
    int vt = lua_type(L, t + 1);
    g->key = SEG_INDEX;
    g->index = i;
    if (vt == LUA_TTABLE) {
      if (cp_table(c, t + 1, depth + 1) < 0) return -1;
      lua_replace(L, t + 1);
    } else if (cp_scalar(c, t + 1, vt, depth + 1) < 0) {
      return -1;
    }
    /* The fetched scalar is its own copy; holes stay holes. */
    if (vt == LUA_TNIL) lua_pop(L, 1);
    else lua_rawseti(L, t, (int)i);
  }
  return 0;
}

static int cp_hash(cp *c, int src, int t, int depth, size_t narr) {
  lua_State *L = c->w.L;
  int k = t + 1;
  lua_pushnil(L);
  while (lua_next(L, src)) {
    int r = cp_key(c, k, depth, narr);
    if (r < 0) return -1;
    if (r > 0) {
      c->w.path[depth].key = k;
      if (cp_push(c, k + 1, lua_type(L, k + 1), depth + 1) < 0) return -1;
      lua_rawset(L, t);
    }
    lua_pop(L, 1);
  }
  return 0;
}

static int cp_table(cp *c, int src, int depth) {
  lua_State *L = c->w.L;
  if (walk_enter(&c->w, src, depth) < 0) return -1;
  size_t narr = array_len(L, src);
  if (cp_account(c, table_hdr_size(narr)) < 0) return -1;
  /* No hash size hint: counting first costs a second lua_next pass, about
   * what the rehashes it saves cost (measured on records of 4..64 keys). */
  lua_createtable(L, (int)narr, 0);
  int t = lua_gettop(L);
  if (cp_array(c, src, t, depth, narr) < 0) return -1;
  return cp_hash(c, src, t, depth, narr);
}

int lt_codec_copy(lua_State *L, int first, int n, size_t max_bytes, char *err,
                  size_t errlen) {
  size_t bytes;
  return lt_codec_copy_sized(L, first, n, max_bytes, &bytes, err, errlen);
}

int lt_codec_copy_sized(lua_State *L, int first, int n, size_t max_bytes,
                        size_t *bytes, char *err, size_t errlen) {
  cp c;
  int top = lua_gettop(L);
  first = abs_index(L, first);
  walk_init(&c.w, L, max_bytes, err, errlen);
  c.size = 0;
  for (int i = 0; i < n; i++) {
    c.w.arg = first + i;
    if (!lua_checkstack(L, 1)) {
      lua_settop(L, top);
      return fail_msg(err, errlen, "message has too many values");
    }
    if (cp_push(&c, first + i, lua_type(L, first + i), 0) < 0) {
      lua_settop(L, top);
      return -1;
    }
  }
  *bytes = c.size;
  return n < 0 ? 0 : n;
}

/* ---- values written without a Lua state (more in the encoder above) ---- */

int lt_codec_put_bool(ty__buf *b, bool v) {
  uint8_t t = v ? TAG_TRUE : TAG_FALSE;
  return ty__buf_append(b, &t, 1);
}

int lt_codec_put_nil(ty__buf *b) {
  uint8_t t = TAG_NIL;
  return ty__buf_append(b, &t, 1);
}
