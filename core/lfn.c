/*
 * lfn.c - functions on their way to other workers.
 *
 * A spawned function travels as bytecode plus the map of its module
 * upvalues (see push_upvalue_modules in ltycho.c), a module as its name.
 * Both are interned here once per run as an lt_fn blob that every spawn
 * request of that function shares, and each worker remembers the function
 * it loaded from a blob in wref[its id]. So spawning the same function again
 * costs neither a dump, nor a load, nor a string, nor a require: the
 * starting worker takes the function from its registry.
 *
 * The table is guarded by a mutex (taken once per spawn of a function not
 * yet seen by the spawning worker, which then caches the blob pointer). A
 * blob's wref[i] is written and read only by worker i. Blobs live until the
 * runtime stops (lt_fn_clear), when the worker states that held the refs are
 * closed: their number is bounded by the program's distinct functions.
 */
#include <pthread.h>
#include <string.h>

#include "ltycho.h"

#define BUCKETS 256

struct lt_fn {
  struct lt_fn *next; /* hash chain, guarded by table_lock */
  uint64_t hash;
  uint32_t len;
  uint8_t kind;             /* LT_FN_BYTECODE or LT_FN_MODULE */
  int wref[TY_MAX_WORKERS]; /* worker i: registry ref of the function, 0 */
  char bytes[];
};

static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static lt_fn *table[BUCKETS]; /* guarded by table_lock */

static uint64_t hash_bytes(const char *p, size_t n, uint8_t kind) {
  uint64_t h = 1469598103934665603ull ^ kind; /* FNV-1a, 64 bits */
  for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)p[i]) * 1099511628211ull;
  return h;
}

lt_fn *lt_fn_intern(int kind, const char *bytes, size_t len) {
  uint64_t h = hash_bytes(bytes, len, (uint8_t)kind);
  pthread_mutex_lock(&table_lock);
  lt_fn **p = &table[h % BUCKETS];
  for (; *p; p = &(*p)->next) {
    lt_fn *f = *p;
    if (f->hash == h && f->kind == kind && f->len == len &&
        memcmp(f->bytes, bytes, len) == 0)
      break;
  }
  if (!*p) {
    lt_fn *f = ty__xcalloc(1, sizeof *f + len + 1); /* NUL-terminated */
    f->hash = h;
    f->len = (uint32_t)len;
    f->kind = (uint8_t)kind;
    memcpy(f->bytes, bytes, len);
    *p = f;
  }
  lt_fn *f = *p;
  pthread_mutex_unlock(&table_lock);
  return f;
}

void lt_fn_clear(void) {
  pthread_mutex_lock(&table_lock);
  for (size_t b = 0; b < BUCKETS; b++) {
    while (table[b]) {
      lt_fn *f = table[b];
      table[b] = f->next;
      free(f);
    }
  }
  pthread_mutex_unlock(&table_lock);
}

/* co's top holds the loaded function, below it the upvalue map (or nil):
 * binds upvalue i to require(name), or to the function itself for `true`.
 * Leaves the function on top; returns 0, or -1 with an error on top. */
static int bind_upvalues(lua_State *co) {
  int map = lua_gettop(co) - 1, fn = map + 1;
  if (lua_isnil(co, map)) return 0;
  lua_pushnil(co);
  while (lua_next(co, map)) {
    int i = (int)lua_tointeger(co, -2);
    if (lua_type(co, -1) == LUA_TBOOLEAN) {
      lua_pop(co, 1);
      lua_pushvalue(co, fn);
    } else {
      lua_getglobal(co, "require");
      lua_insert(co, -2);
      if (lua_pcall(co, 1, 1, 0)) {
        lua_insert(co, map); /* the error below the map: caller cleans up */
        lua_settop(co, map);
        return -1;
      }
    }
    lua_setupvalue(co, fn, i);
  }
  return 0;
}

/* Loads the function of blob f on co (first use on this worker). */
static int load_function(lua_State *co, lt_fn *f) {
  if (f->kind == LT_FN_MODULE) {
    lua_getglobal(co, "require");
    lua_pushlstring(co, f->bytes, f->len);
    if (lua_pcall(co, 1, 1, 0)) return -1;
    if (!lua_isfunction(co, -1)) {
      const char *got = luaL_typename(co, -1);
      lua_pushfstring(co, "tycho.spawn: module '%s' returned %s, not the "
                      "actor's function", f->bytes, got);
      return -1;
    }
    return 0;
  }
  char err[256];
  int top = lua_gettop(co);
  if (ty__codec_decode(co, f->bytes, f->len, err, sizeof err) != 2) {
    lua_settop(co, top);
    lua_pushfstring(co, "tycho.spawn: bad function payload (%s)", err);
    return -1;
  }
  size_t len;
  const char *bc = lua_tolstring(co, -2, &len);
  if (luaL_loadbuffer(co, bc, len, "=spawned")) {
    lua_replace(co, top + 1);
    lua_settop(co, top + 1);
    return -1;
  }
  int r = bind_upvalues(co); /* stack: bytecode, map, fn */
  lua_replace(co, top + 1);  /* fn (or the error) where the bytecode was */
  lua_settop(co, top + 1);
  return r;
}

int lt_fn_push(lua_State *co, lt_fn *f, unsigned worker) {
  if (f->wref[worker]) {
    lua_rawgeti(co, LUA_REGISTRYINDEX, f->wref[worker]);
    return 0;
  }
  if (load_function(co, f)) return -1;
  lua_pushvalue(co, -1);
  f->wref[worker] = luaL_ref(co, LUA_REGISTRYINDEX);
  return 0;
}
