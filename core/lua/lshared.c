/*
 * lshared.c - tycho.shared.table's C half: the Lua face of the shared table
 * (core/store/shtab.c), one per name and run, reached from every worker's
 * state without a message (lua/tycho/shared.lua; DESIGN.md §7).
 *
 * Values are copied as messages are: a number and a string go in as they
 * are (the common case costs no codec), anything else through the message
 * codec (codec.h), decoded after the table's lock is released. Entries are
 * charged to max_memory (lmem.h): a store past it is nil, "nomem".
 *
 * A table lives from its first table(name) in a run to the run's end
 * (lt_shared_run_end): the next run starts with none, as a new node would.
 * A handle kept past its run holds a table of its own, emptied.
 */
#include <errno.h>
#include <lauxlib.h>
#include <pthread.h>
#include <string.h>

#include "base/common.h"
#include "codec.h"
#include "lapi.h"
#include "lctx.h"
#include "lmem.h"
#include "lshared.h"
#include "ltimer.h"
#include "store/shtab.h"

#define SHARED_MT "tycho.shared.table"
#define DEFAULT_CAPACITY ((size_t)64 << 20)

typedef struct named {
  struct named *next;
  ty_shtab *t;
  /* handles plus one while listed. relaxed fetch_add to take a handle
   * (the registry lock orders it against the listing's drop); acq_rel on
   * the drop, so the last one sees every use before it frees */
  _Atomic long refs;
  size_t len; /* of name, which may hold a NUL */
  char name[];
} named;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static named *g_tables; /* under g_mu */
/* Runs ended: a state's cache of handles (shared.lua) holds only this
 * run's. relaxed: the run's end and the next run's start are ordered by
 * the threads' creation and join. */
static _Atomic unsigned g_gen;

/* Values copied in and out. A call that pushes from it onto the Lua stack
 * takes it first (buf_take): a push can run a GC step, whose finalizer may
 * use a shared table and so this buffer, while the call still reads it. */
static _Thread_local ty__buf t_buf;
static _Thread_local ty__buf t_buf2; /* cas's expected value */

void lt_shared_thread_end(void) {
  ty__buf_free(&t_buf);
  ty__buf_free(&t_buf2);
}

static void buf_take(ty__buf *b) {
  *b = t_buf;
  ty__buf_init(&t_buf);
}

/* Gives a taken buffer back, or frees it when a finalizer has made the
 * thread a new one meanwhile. */
static void buf_give(ty__buf *b) {
  if (!t_buf.cap) t_buf = *b;
  else ty__buf_free(b);
}

static int charge(int64_t d) {
  lt_mem_add(d);
  if (d > 0 && lt_mem_over()) {
    lt_mem_add(-d);
    return -1;
  }
  return 0;
}

static void unref(named *n) {
  if (atomic_fetch_sub_explicit(&n->refs, 1, memory_order_acq_rel) == 1) {
    ty_shtab_free(n->t);
    free(n);
  }
}

void lt_shared_run_end(void) {
  pthread_mutex_lock(&g_mu);
  named *n = g_tables;
  g_tables = NULL;
  atomic_fetch_add_explicit(&g_gen, 1, memory_order_relaxed);
  pthread_mutex_unlock(&g_mu);
  for (named *nx; n; n = nx) {
    nx = n->next;
    ty_shtab_flush(n->t); /* before the next run counts memory from zero */
    unref(n);
  }
}

/* ---- time ---------------------------------------------------------------- */

static ty_shnow now(void) {
  uint64_t real = ty__now_ns();
  ty_shnow n = {real, real};
  if (lt_ctx_get()->rt && ty_runtime_is_virtual(lt_ctx_get()->rt))
    n.ttl = (uint64_t)(lt_now_s() * 1e9); /* tycho.test.clock() */
  return n;
}

static uint64_t check_ttl(lua_State *L, int idx) {
  if (lua_isnoneornil(L, idx)) return 0;
  lua_Number s = luaL_checknumber(L, idx);
  if (!(s >= 0) || s > 1e9)
    luaL_error(L, "shared table: ttl must be >= 0 seconds, got %f", s);
  uint64_t ns = (uint64_t)(s * 1e9 + 0.5);
  return s > 0 && !ns ? 1 : ns;
}

/* ---- arguments ------------------------------------------------------------ */

static ty_shtab *check_tab(lua_State *L) {
  named **p = lua_touserdata(L, 1);
  if (!p || !lua_getmetatable(L, 1) ||
      !lua_rawequal(L, -1, lua_upvalueindex(1)))
    luaL_error(L, "shared table: call it as t:method(...)");
  lua_pop(L, 1);
  if (!*p) luaL_error(L, "shared table: used after it was collected");
  return (*p)->t;
}

static const char *check_key(lua_State *L, int idx, size_t *len) {
  int t = lua_type(L, idx);
  if (t != LUA_TSTRING && t != LUA_TNUMBER)
    luaL_error(L, "shared table: key must be a string, got %s",
               luaL_typename(L, idx));
  return lua_tolstring(L, idx, len);
}

/* Encodes the value at idx into b, or raises. A handle (a tcp connection
 * or listener) is refused: its transit hooks would move it out of its
 * owner into a value that nobody receives (ltcp_transit.c). */
static void encode_in(lua_State *L, int idx, ty_shtab *t, ty__buf *b) {
  char err[256];
  ty__buf_reset(b);
  int rc = lt_codec_encode_to(L, idx, 1, b, ty_shtab_capacity(t),
                              LT_CODEC_TO_STORE, err, sizeof err);
  if (rc) luaL_error(L, "shared table: %s", err);
}

/* The value at idx as the table stores it; raises when it cannot be
 * copied, as a send would. Numbers and strings need no codec. */
static ty_shval to_val_in(lua_State *L, int idx, ty_shtab *t, ty__buf *b) {
  ty_shval v = {TY_SHV_NUM, 0, NULL, 0};
  int ty = lua_type(L, idx);
  if (ty == LUA_TNUMBER) {
    v.num = lua_tonumber(L, idx);
  } else if (ty == LUA_TSTRING) {
    v.kind = TY_SHV_STR;
    v.data = lua_tolstring(L, idx, &v.len);
  } else {
    encode_in(L, idx, t, b);
    v.kind = TY_SHV_BYTES;
    v.data = b->data;
    v.len = b->len;
  }
  return v;
}

static ty_shval to_val(lua_State *L, int idx, ty_shtab *t) {
  return to_val_in(L, idx, t, &t_buf);
}

/* Pushes v, which points into b (taken), and gives b back. */
static int push_val(lua_State *L, const ty_shval *v, ty__buf *b) {
  char err[128];
  int n = 1;
  switch (v->kind) {
  case TY_SHV_NUM: lua_pushnumber(L, v->num); break;
  case TY_SHV_STR: lua_pushlstring(L, v->data, v->len); break;
  case TY_SHV_LIST:
    lua_pushnil(L);
    lua_pushliteral(L, "value is a list");
    n = 2;
    break;
  default:
    if (lt_codec_decode(L, v->data, v->len, err, sizeof err) != 1) n = -1;
  }
  buf_give(b);
  if (n < 0) return luaL_error(L, "shared table: a bad value: %s", err);
  return n;
}

static int fail(lua_State *L, int rc) {
  return lt_push_fail(L, rc == -ENOMEM   ? "nomem"
                         : rc == -EEXIST ? "exists"
                         : rc == -EINVAL ? "not a number"
                                         : "not found");
}

/* ---- methods --------------------------------------------------------------- */

static int do_store(lua_State *L, int mode) {
  ty_shtab *t = check_tab(L);
  size_t klen;
  const char *k = check_key(L, 2, &klen);
  uint64_t ttl = check_ttl(L, 4);
  if (lua_isnoneornil(L, 3) && !(mode & (TY_SHTAB_ADD | TY_SHTAB_REPLACE))) {
    ty_shtab_delete(t, k, klen); /* OpenResty's set(k, nil) */
    lua_pushboolean(L, 1);
    return 1;
  }
  ty_shval v = to_val(L, 3, t);
  int rc = ty_shtab_set(t, k, klen, &v, ttl, mode, now());
  if (rc < 0) return fail(L, rc);
  lua_pushboolean(L, 1);
  if (rc != TY_SHTAB_EVICTED) return 1;
  lua_pushliteral(L, "evicted");
  return 2;
}

static int l_set(lua_State *L) { return do_store(L, TY_SHTAB_SET); }
static int l_add(lua_State *L) { return do_store(L, TY_SHTAB_ADD); }
static int l_replace(lua_State *L) { return do_store(L, TY_SHTAB_REPLACE); }
/* _store(k, v, ttl, mode): tycho.ngx's safe_* (mode as shtab.h) */
static int l_store(lua_State *L) {
  int mode = (int)luaL_checkinteger(L, 5);
  lua_settop(L, 4);
  return do_store(L, mode & 7);
}

static int do_get(lua_State *L, bool stale) {
  ty_shtab *t = check_tab(L);
  size_t klen;
  const char *k = check_key(L, 2, &klen);
  ty_shval v;
  bool expired = false;
  ty__buf b;
  buf_take(&b);
  int rc = ty_shtab_get(t, k, klen, now(), stale, &b, &v, &expired);
  if (rc) buf_give(&b);
  if (rc == -ENOENT) {
    lua_pushnil(L);
    return 1;
  }
  if (rc) return fail(L, rc);
  int n = push_val(L, &v, &b);
  if (!stale || n != 1) return n;
  lua_pushboolean(L, expired);
  return 2;
}

static int l_get(lua_State *L) { return do_get(L, false); }
/* _get_stale(k) -> v, expired | nil */
static int l_get_stale(lua_State *L) { return do_get(L, true); }

/* incr(k, n [, init [, ttl]]) -> new | nil, err; _incr: new, evicted */
static int do_incr(lua_State *L, bool evicted_too) {
  ty_shtab *t = check_tab(L);
  size_t klen;
  const char *k = check_key(L, 2, &klen);
  lua_Number n = luaL_checknumber(L, 3);
  bool has_init = !lua_isnoneornil(L, 4);
  lua_Number init = has_init ? luaL_checknumber(L, 4) : 0;
  uint64_t ttl = check_ttl(L, 5);
  double res = 0;
  int rc = ty_shtab_incr(t, k, klen, n, has_init, init, ttl, now(), &res);
  if (rc < 0) return fail(L, rc);
  lua_pushnumber(L, res);
  if (!evicted_too) return 1;
  lua_pushboolean(L, rc == TY_SHTAB_EVICTED);
  return 2;
}

static int l_incr(lua_State *L) { return do_incr(L, false); }
static int l_incr2(lua_State *L) { return do_incr(L, true); }

static int l_cas(lua_State *L) {
  ty_shtab *t = check_tab(L);
  size_t klen;
  const char *k = check_key(L, 2, &klen);
  ty_shval old = to_val_in(L, 3, t, &t_buf2);
  ty_shval nv = to_val(L, 4, t);
  int rc = ty_shtab_cas(t, k, klen, &old, &nv, now());
  if (rc < 0) return fail(L, rc);
  lua_pushboolean(L, rc);
  return 1;
}

static int l_delete(lua_State *L) {
  ty_shtab *t = check_tab(L);
  size_t klen;
  const char *k = check_key(L, 2, &klen);
  lua_pushboolean(L, ty_shtab_delete(t, k, klen) == 0);
  return 1;
}

static int l_expire(lua_State *L) {
  ty_shtab *t = check_tab(L);
  size_t klen;
  const char *k = check_key(L, 2, &klen);
  uint64_t ttl = check_ttl(L, 3);
  int rc = ty_shtab_expire(t, k, klen, ttl, now());
  if (rc) return fail(L, rc);
  lua_pushboolean(L, 1);
  return 1;
}

static int l_ttl(lua_State *L) {
  ty_shtab *t = check_tab(L);
  size_t klen;
  const char *k = check_key(L, 2, &klen);
  uint64_t left;
  if (ty_shtab_ttl(t, k, klen, now(), &left)) {
    lua_pushnil(L);
    return 1;
  }
  lua_pushnumber(L, (lua_Number)left * 1e-9);
  return 1;
}

/* A count from Lua (already >= 0 or NaN) as a size_t; 0 is "all", and
 * anything past what a table holds is as good as all (a double past
 * SIZE_MAX does not convert). */
static size_t clamp_count(lua_Number n) {
  if (!(n > 0)) return 0;
  return n >= 1e15 ? (size_t)1e15 : (size_t)n;
}

static int l_keys(lua_State *L) {
  ty_shtab *t = check_tab(L);
  lua_Number max = luaL_optnumber(L, 2, 0);
  if (!(max >= 0)) return luaL_error(L, "shared table: keys: max must be >= 0");
  ty__buf b;
  buf_take(&b);
  ty__buf_reset(&b);
  long n = ty_shtab_keys(t, clamp_count(max), now(), &b);
  if (n < 0) {
    buf_give(&b);
    return fail(L, (int)n);
  }
  lua_createtable(L, (int)n, 0);
  size_t at = 0;
  for (long i = 1; i <= n; i++) {
    uint32_t l;
    memcpy(&l, b.data + at, 4);
    lua_pushlstring(L, b.data + at + 4, l);
    lua_rawseti(L, -2, (int)i);
    at += 4 + l;
  }
  buf_give(&b);
  return 1;
}

static int l_count(lua_State *L) {
  lua_pushnumber(L, (lua_Number)ty_shtab_count(check_tab(L), now()));
  return 1;
}

static int l_flush(lua_State *L) {
  ty_shtab_flush(check_tab(L));
  lua_pushboolean(L, 1);
  return 1;
}

static int l_flush_all(lua_State *L) {
  ty_shtab_expire_all(check_tab(L), now());
  return 0;
}

static int l_flush_expired(lua_State *L) {
  ty_shtab *t = check_tab(L);
  lua_Number max = luaL_optnumber(L, 2, 0);
  lua_pushnumber(L, (lua_Number)ty_shtab_flush_expired(t, clamp_count(max),
                                                       now()));
  return 1;
}

static int l_free_space(lua_State *L) {
  lua_pushnumber(L, (lua_Number)ty_shtab_free_space(check_tab(L)));
  return 1;
}

static int l_capacity(lua_State *L) {
  lua_pushnumber(L, (lua_Number)ty_shtab_capacity(check_tab(L)));
  return 1;
}

/* _push(k, v, left) -> length | nil, err (items go through the codec) */
static int l_push(lua_State *L) {
  ty_shtab *t = check_tab(L);
  size_t klen;
  const char *k = check_key(L, 2, &klen);
  encode_in(L, 3, t, &t_buf);
  long n = ty_shtab_push(t, k, klen, t_buf.data, t_buf.len, lua_toboolean(L, 4),
                         now());
  if (n == -EINVAL) return lt_push_fail(L, "value not a list");
  if (n < 0) return fail(L, (int)n);
  lua_pushnumber(L, (lua_Number)n);
  return 1;
}

/* _pop(k, left) -> v | nil [, err] */
static int l_pop(lua_State *L) {
  ty_shtab *t = check_tab(L);
  size_t klen;
  const char *k = check_key(L, 2, &klen);
  ty__buf b;
  buf_take(&b);
  int rc = ty_shtab_pop(t, k, klen, lua_toboolean(L, 3), now(), &b);
  if (rc) buf_give(&b);
  if (rc == -ENOENT) {
    lua_pushnil(L);
    return 1;
  }
  if (rc == -EINVAL) return lt_push_fail(L, "value not a list");
  if (rc) return fail(L, rc);
  ty_shval v = {TY_SHV_BYTES, 0, b.data, b.len};
  return push_val(L, &v, &b);
}

static int l_llen(lua_State *L) {
  ty_shtab *t = check_tab(L);
  size_t klen;
  const char *k = check_key(L, 2, &klen);
  long n = ty_shtab_llen(t, k, klen, now());
  if (n == -EINVAL) return lt_push_fail(L, "value not a list");
  lua_pushnumber(L, (lua_Number)n);
  return 1;
}

static int l_gc(lua_State *L) {
  named **p = lua_touserdata(L, 1);
  if (p && *p) unref(*p);
  if (p) *p = NULL;
  return 0;
}

static int l_tostring(lua_State *L) {
  named **p = lua_touserdata(L, 1);
  lua_pushfstring(L, "shared table: %s", p && *p ? (*p)->name : "?");
  return 1;
}

static int l_shared_ptr(lua_State *L);

static const luaL_Reg methods[] = {{"set", l_set},
                                   {"add", l_add},
                                   {"replace", l_replace},
                                   {"get", l_get},
                                   {"incr", l_incr},
                                   {"cas", l_cas},
                                   {"delete", l_delete},
                                   {"expire", l_expire},
                                   {"ttl", l_ttl},
                                   {"keys", l_keys},
                                   {"count", l_count},
                                   {"flush", l_flush},
                                   {"free_space", l_free_space},
                                   {"capacity", l_capacity},
                                   {"_store", l_store},
                                   {"_get_stale", l_get_stale},
                                   {"_incr", l_incr2},
                                   {"_flush_all", l_flush_all},
                                   {"_flush_expired", l_flush_expired},
                                   {"_push", l_push},
                                   {"_pop", l_pop},
                                   {"_llen", l_llen},
                                   {"_ptr", l_shared_ptr},
                                   {NULL, NULL}};

/* ---- the FFI fast path ------------------------------------------------------
 * shared.lua calls these through FFI function pointers (_shared_ffi) for
 * the common cases, a string key with a number or string value, so that a
 * get, set or incr in a compiled loop stays compiled (a Lua C function call
 * costs about 40 ns and ends the trace). Anything else takes the methods
 * above. They never raise: shared.lua checked the arguments. */

/* -> 0 absent, 1 number (*num), 2 string copied into dst (*num: its
 * length), 3 another kind (use the method), 4 a string longer than cap
 * (*num: its length). dst is the caller's (shared.lua's buffer): between
 * this copy and its ffi.string the caller allocates nothing, so no
 * finalizer can run and reuse it. */
static int ffi_get(named *n, const char *k, size_t klen, double *num, char *dst,
                   size_t cap) {
  ty_shval v;
  int rc = ty_shtab_get(n->t, k, klen, now(), false, &t_buf, &v, NULL);
  if (rc) return rc == -ENOENT ? 0 : 3;
  if (v.kind == TY_SHV_NUM) {
    *num = v.num;
    return 1;
  }
  if (v.kind != TY_SHV_STR) return 3;
  *num = (double)v.len;
  if (v.len > cap) return 4;
  memcpy(dst, v.data, v.len);
  return 2;
}

/* kind 1: num, 2: the string s; ttl in seconds (checked) -> 0, 1 (evicted),
 * or a negative errno */
static int ffi_set(named *n, const char *k, size_t klen, int kind, double num,
                   const char *s, size_t len, double ttl) {
  ty_shval v = {kind == 1 ? TY_SHV_NUM : TY_SHV_STR, num, s, len};
  uint64_t ns = (uint64_t)(ttl * 1e9 + 0.5);
  return ty_shtab_set(n->t, k, klen, &v, ttl > 0 && !ns ? 1 : ns, TY_SHTAB_SET,
                      now());
}

static int ffi_incr(named *n, const char *k, size_t klen, double by,
                    int has_init, double init, double ttl, double *res) {
  uint64_t ns = (uint64_t)(ttl * 1e9 + 0.5);
  return ty_shtab_incr(n->t, k, klen, by, has_init, init,
                       ttl > 0 && !ns ? 1 : ns, now(), res);
}

/* _shared_ffi() -> get, set, incr (lightuserdata function pointers) */
static int l_shared_ffi(lua_State *L) {
  lua_pushlightuserdata(L, (void *)(uintptr_t)ffi_get);
  lua_pushlightuserdata(L, (void *)(uintptr_t)ffi_set);
  lua_pushlightuserdata(L, (void *)(uintptr_t)ffi_incr);
  return 3;
}

/* _shared_ptr(t) -> the table's record (lightuserdata), for the FFI path;
 * valid while t is */
static int l_shared_ptr(lua_State *L) {
  check_tab(L);
  lua_pushlightuserdata(L, *(named **)lua_touserdata(L, 1));
  return 1;
}

/* ---- _shared_table(name [, capacity]) ------------------------------------ */

static named *lookup(const char *name, size_t len, size_t capacity) {
  pthread_mutex_lock(&g_mu);
  named *n = g_tables;
  while (n && (n->len != len || memcmp(n->name, name, len))) n = n->next;
  if (!n && (n = malloc(sizeof *n + len + 1))) {
    n->t = ty_shtab_new(capacity, charge);
    if (!n->t) {
      free(n);
      n = NULL;
    } else {
      memcpy(n->name, name, len);
      n->name[len] = 0;
      n->len = len;
      atomic_init(&n->refs, 1);
      n->next = g_tables;
      g_tables = n;
    }
  }
  /* relaxed: see refs */
  if (n) atomic_fetch_add_explicit(&n->refs, 1, memory_order_relaxed);
  pthread_mutex_unlock(&g_mu);
  return n;
}

static void push_meta(lua_State *L) {
  if (luaL_newmetatable(L, SHARED_MT)) {
    lua_newtable(L);
    for (const luaL_Reg *r = methods; r->name; r++) {
      lua_pushvalue(L, -2); /* the metatable, to check self by */
      lua_pushcclosure(L, r->func, 1);
      lua_setfield(L, -2, r->name);
    }
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, l_gc);
    lua_setfield(L, -2, "__gc");
    lua_pushcfunction(L, l_tostring);
    lua_setfield(L, -2, "__tostring");
    lua_pushliteral(L, "shared table");
    lua_setfield(L, -2, "__metatable");
  }
}

static int l_shared_table(lua_State *L) {
  size_t len;
  const char *name = luaL_checklstring(L, 1, &len);
  if (!len) return luaL_error(L, "tycho.shared.table: empty name");
  size_t capacity = DEFAULT_CAPACITY;
  if (!lua_isnoneornil(L, 2)) {
    lua_Number c = luaL_checknumber(L, 2);
    if (!(c >= 1024) || c > 1e15)
      return luaL_error(L, "tycho.shared.table: capacity must be at least "
                           "1024 bytes");
    capacity = (size_t)c;
  }
  named **p = lua_newuserdata(L, sizeof *p);
  *p = NULL;
  push_meta(L);
  lua_setmetatable(L, -2);
  *p = lookup(name, len, capacity);
  if (!*p) return luaL_error(L, "tycho.shared.table: out of memory");
  return 1;
}

static int l_shared_gen(lua_State *L) {
  lua_pushnumber(L, atomic_load_explicit(&g_gen, memory_order_relaxed));
  return 1;
}

static const luaL_Reg funcs[] = {{"_shared_table", l_shared_table},
                                 {"_shared_gen", l_shared_gen},
                                 {"_shared_ffi", l_shared_ffi},
                                 {NULL, NULL}};

void lt_open_shared(lua_State *L) { luaL_register(L, NULL, funcs); }
