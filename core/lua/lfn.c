/*
 * lfn.c - functions on their way to other workers.
 *
 * A spawned function travels as bytecode plus the map of its module
 * upvalues (push_upvalue_modules below), a module as its name.
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
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/common.h"
#include "codec.h"
#include "lctx.h"
#include "lfn.h"

#define BUCKETS 256

/* A module's source, as pinned for spawns by name (see lt_fn_pin_source). */
typedef struct lt_src {
  char *code, *chunk; /* the file's bytes; "@path" */
  size_t len;
} lt_src;

struct lt_fn {
  struct lt_fn *next; /* hash chain, guarded by table_lock */
  /* 1 once the spawners looked for the module's source; src (guarded by
   * src_lock) holds it, or nothing when it is not a Lua file. */
  _Atomic int pinned;
  lt_src src;
  uint64_t hash;
  uint32_t len;
  uint32_t id;              /* index + 1 in by_id (lt_fn_id) */
  uint8_t kind;             /* LT_FN_BYTECODE or LT_FN_MODULE */
  int wref[TY_MAX_WORKERS]; /* worker i: registry ref of the function, 0 */
  char bytes[];
};

static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t src_lock = PTHREAD_MUTEX_INITIALIZER;
static lt_fn *table[BUCKETS]; /* guarded by table_lock */
/* Every blob by its id, so that a function can travel inside a message as a
 * number (a supervisor's child specs) and be checked on arrival. */
static lt_fn **by_id; /* guarded by table_lock */
static size_t nby_id, capby_id;

static uint64_t hash_bytes(const char *p, size_t n, uint8_t kind) {
  uint64_t h = 1469598103934665603ull ^ kind; /* FNV-1a, 64 bits */
  for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)p[i]) * 1099511628211ull;
  return h;
}

static lt_fn *lt_fn_intern(int kind, const char *bytes, size_t len) {
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
    ty__grow(&by_id, &capby_id, nby_id + 1, sizeof *by_id, 64);
    by_id[nby_id++] = f;
    f->id = (uint32_t)nby_id;
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
      free(f->src.code);
      free(f->src.chunk);
      free(f);
    }
  }
  nby_id = 0;
  pthread_mutex_unlock(&table_lock);
}

uint32_t lt_fn_id(const lt_fn *f) { return f->id; }
int lt_fn_kind(const lt_fn *f) { return f->kind; }

lt_fn *lt_fn_by_id(double id) {
  lt_fn *f = NULL;
  pthread_mutex_lock(&table_lock);
  if (id >= 1 && id <= (double)nby_id && id == (double)(size_t)id)
    f = by_id[(size_t)id - 1];
  pthread_mutex_unlock(&table_lock);
  return f;
}

/* ---- the sending side ---------------------------------------------------- */

static int dump_writer(lua_State *L, const void *p, size_t sz, void *ud) {
  (void)L;
  if (ty__buf_append(ud, p, sz)) ty__die("out of memory");
  return 0;
}

/* The name under which package.loaded holds v, pushed; or nothing (0).
 * Only tables, functions and userdata count: a module that returned a
 * number or `true` must not turn an upvalue holding that value into it. */
static int push_module_name(lua_State *L, int vidx) {
  int t = lua_type(L, vidx);
  if (t != LUA_TTABLE && t != LUA_TFUNCTION && t != LUA_TUSERDATA) return 0;
  lua_getglobal(L, "package");
  lua_getfield(L, -1, "loaded");
  lua_pushnil(L);
  while (lua_next(L, -2)) {
    if (lua_type(L, -2) == LUA_TSTRING && lua_rawequal(L, -1, vidx)) {
      lua_pop(L, 1);
      lua_replace(L, -3); /* name where package was */
      lua_pop(L, 1);
      return 1;
    }
    lua_pop(L, 1);
  }
  lua_pop(L, 2);
  return 0;
}

/*
 * Functions move between Lua states as bytecode, which loses upvalues. An
 * upvalue that holds a module (a value of package.loaded, like the usual
 * `local tycho = require "tycho"`) is re-required on the other side, and one
 * that holds the function itself (a recursive `local function`) is bound to
 * the loaded copy; any other upvalue is refused. Pushes a table
 * {[i] = module name or true (itself)} or nil.
 */
static void push_upvalue_modules(lua_State *L, int idx, const char *fname) {
  if (lua_iscfunction(L, idx))
    luaL_error(L,
               "tycho.%s: cannot move a C function to another actor; wrap "
               "it in a Lua function or use a module name",
               fname);
  lua_Debug ar;
  lua_pushvalue(L, idx);
  lua_getinfo(L, ">u", &ar);
  if (ar.nups == 0) {
    lua_pushnil(L);
    return;
  }
  lua_createtable(L, ar.nups, 0);
  int map = lua_gettop(L);
  luaL_Buffer b;
  int bad = 0;
  for (int i = 1; i <= ar.nups; i++) {
    const char *name = lua_getupvalue(L, idx, i);
    if (lua_rawequal(L, -1, idx)) {
      lua_pushboolean(L, 1);
      lua_rawseti(L, map, i);
      lua_pop(L, 1);
      continue;
    }
    if (push_module_name(L, lua_gettop(L))) {
      lua_rawseti(L, map, i);
      lua_pop(L, 1);
      continue;
    }
    lua_pop(L, 1);
    if (bad++ == 0) luaL_buffinit(L, &b);
    else luaL_addstring(&b, ", ");
    luaL_addstring(&b, name && *name ? name : "?");
  }
  if (!bad) return;
  luaL_pushresult(&b);
  luaL_error(L,
             "tycho.%s: the function uses upvalue(s) (%s); an actor "
             "shares nothing, so pass that data as arguments to tycho.%s "
             "(upvalues holding modules from require, or the function "
             "itself, are fine)",
             fname, lua_tostring(L, -1), fname);
}

/* Encodes (bytecode, upvalue map) of the function at idx into out: 0, or
 * -1 with err. Raises (through push_upvalue_modules) for functions that
 * cannot travel. */
static int encode_payload(lua_State *L, int idx, const char *fname,
                          ty__buf *out, char *err, size_t errlen) {
  int top = lua_gettop(L);
  push_upvalue_modules(L, idx, fname);
  lt_check_globals(L, idx, fname);
  ty__buf b;
  ty__buf_init(&b);
  lua_pushvalue(L, idx);
  lua_dump(L, dump_writer, &b);
  lua_pop(L, 1);
  lua_pushlstring(L, b.data, b.len);
  ty__buf_free(&b);
  lua_insert(L, -2); /* bytecode, map */
  int r = lt_codec_encode(L, top + 1, 2, out, SIZE_MAX, err, errlen);
  lua_settop(L, top);
  return r;
}

void lt_fn_payload(lua_State *L, int idx, const char *fname, ty__buf *out) {
  char err[256];
  if (idx < 0) idx = lua_gettop(L) + idx + 1;
  if (encode_payload(L, idx, fname, out, err, sizeof err))
    luaL_error(L, "tycho.%s: %s", fname, err);
}

/* A worker remembers the blob of each function object it spawned (weak
 * keys), so a function is checked and dumped once per worker and run; its
 * upvalues are checked then, not at every spawn. */
lt_fn *lt_fn_of(lua_State *L, int idx, const char *fname) {
  lt_worker *lw = lt_worker_get();
  if (lw) {
    lua_rawgeti(L, LUA_REGISTRYINDEX, lw->dumpcache_ref);
    lua_pushvalue(L, idx);
    lua_rawget(L, -2);
    lt_fn *f = lua_touserdata(L, -1);
    lua_pop(L, 2);
    if (f) return f;
  }
  ty__buf b;
  ty__buf_init(&b);
  char err[256];
  if (encode_payload(L, idx, fname, &b, err, sizeof err)) {
    ty__buf_free(&b);
    luaL_error(L, "tycho.%s: %s", fname, err);
  }
  lt_fn *f = lt_fn_intern(LT_FN_BYTECODE, b.data, b.len);
  ty__buf_free(&b);
  if (lw) {
    lua_rawgeti(L, LUA_REGISTRYINDEX, lw->dumpcache_ref);
    lua_pushvalue(L, idx);
    lua_pushlightuserdata(L, f);
    lua_rawset(L, -3);
    lua_pop(L, 1);
  }
  return f;
}

lt_fn *lt_fn_module(const char *name, size_t len) {
  return lt_fn_intern(LT_FN_MODULE, name, len);
}

void lt_fn_set_source(lt_fn *f, const char *code, size_t len,
                      const char *chunk) {
  char *c = malloc(len ? len : 1), *ch = strdup(chunk);
  if (!c || !ch) {
    free(c);
    free(ch);
    return; /* the workers require the file, as before */
  }
  memcpy(c, code, len);
  pthread_mutex_lock(&src_lock);
  free(f->src.code);
  free(f->src.chunk);
  f->src = (lt_src){.code = c, .chunk = ch, .len = len};
  pthread_mutex_unlock(&src_lock);
  /* release: after the source, for lt_fn_pin_source's acquire load. */
  atomic_store_explicit(&f->pinned, 1, memory_order_release);
}

/* Reads the file at path; NULL when it cannot. */
static char *read_file(const char *path, size_t *len) {
  FILE *fp = fopen(path, "rb");
  if (!fp) return NULL;
  ty__buf b;
  ty__buf_init(&b);
  char chunk[8192];
  size_t n;
  bool ok = true;
  while (ok && (n = fread(chunk, 1, sizeof chunk, fp)))
    ok = !ty__buf_append(&b, chunk, n);
  ok = ok && !ferror(fp);
  fclose(fp);
  if (!ok) {
    ty__buf_free(&b);
    return NULL;
  }
  *len = b.len;
  return (char *)b.data; /* the caller frees it */
}

void lt_fn_pin_source(lua_State *L, lt_fn *f) {
  /* acquire: pairs with lt_fn_set_source's release. */
  if (atomic_load_explicit(&f->pinned, memory_order_acquire)) return;
  int top = lua_gettop(L);
  lua_getglobal(L, "package");
  if (!lua_istable(L, -1)) goto out;
  lua_getfield(L, top + 1, "preload");
  if (lua_istable(L, -1)) {
    lua_getfield(L, -1, f->bytes);
    if (!lua_isnil(L, -1)) goto done; /* require takes the preload */
  }
  lua_settop(L, top + 1);
  lua_getfield(L, top + 1, "searchpath");
  if (!lua_isfunction(L, -1)) goto out;
  lua_pushlstring(L, f->bytes, f->len);
  lua_getfield(L, top + 1, "path");
  if (lua_pcall(L, 2, 1, 0) || !lua_isstring(L, -1)) goto done; /* C, ... */
  size_t len = 0;
  char *code = read_file(lua_tostring(L, -1), &len);
  if (!code) goto out; /* try again at the next spawn */
  lua_pushliteral(L, "@");
  lua_insert(L, -2);
  lua_concat(L, 2);
  lt_fn_set_source(f, code, len, lua_tostring(L, -1));
  free(code);
  goto out;
done:
  /* relaxed: nothing is published with it (no source). */
  atomic_store_explicit(&f->pinned, 1, memory_order_relaxed);
out:
  lua_settop(L, top);
}

/* ---- the receiving side -------------------------------------------------- */

int lt_fn_bind(lua_State *L, int fn, int map) {
  if (lua_isnil(L, map)) return 0;
  lua_pushnil(L);
  while (lua_next(L, map)) {
    int i = (int)lua_tointeger(L, -2);
    if (lua_type(L, -1) == LUA_TBOOLEAN) {
      lua_pop(L, 1);
      lua_pushvalue(L, fn);
    } else {
      lua_getglobal(L, "require");
      lua_insert(L, -2);
      if (lua_pcall(L, 1, 1, 0)) {
        lua_replace(L, -2); /* the error where the key was */
        return -1;
      }
    }
    if (!lua_setupvalue(L, fn, i)) lua_pop(L, 1);
  }
  return 0;
}

/* A module may return a table (or userdata) with a __call metamethod: the
 * actor calls it (tycho.supervisor is such a table: its functions, and the
 * supervisor's own body when spawned by name). */
static bool callable_object(lua_State *co) {
  int t = lua_type(co, -1);
  if (t != LUA_TTABLE && t != LUA_TUSERDATA) return false;
  if (!luaL_getmetafield(co, -1, "__call")) return false;
  lua_pop(co, 1);
  return true;
}

/* Replaces the object on top with a Lua function calling it: a coroutine
 * needs a function, and a C one could not yield. */
static int wrap_callable(lua_State *co) {
  static const char src[] = "local o = ... return function(...) return "
                            "o(...) end";
  if (luaL_loadbuffer(co, src, sizeof src - 1, "=tycho.spawn")) return -1;
  lua_insert(co, -2);
  return lua_pcall(co, 1, 1, 0) ? -1 : 0;
}

/* A copy of f's pinned source (malloc'd: loading it may raise nothing
 * while src_lock is held), or false. */
static bool src_copy(lt_fn *f, lt_src *out) {
  memset(out, 0, sizeof *out);
  pthread_mutex_lock(&src_lock);
  if (f->src.code) {
    out->code = malloc(f->src.len ? f->src.len : 1);
    out->chunk = strdup(f->src.chunk);
    if (out->code && out->chunk) {
      memcpy(out->code, f->src.code, f->src.len);
      out->len = f->src.len;
    }
  }
  pthread_mutex_unlock(&src_lock);
  if (out->code && out->chunk) return true;
  free(out->code);
  free(out->chunk);
  return false;
}

/* Pushes module f's value on co as require would, but from the source the
 * spawner pinned (not the file as it is now) when this state has not
 * loaded it yet; 0, or -1 with the error pushed. */
static int require_pinned(lua_State *co, lt_fn *f) {
  lua_getglobal(co, "package");
  lua_getfield(co, -1, "loaded");
  lua_remove(co, -2);
  lua_getfield(co, -1, f->bytes);
  lt_src src;
  if (!lua_isnil(co, -1) || !src_copy(f, &src)) {
    lua_pop(co, 2);
    lua_getglobal(co, "require");
    lua_pushlstring(co, f->bytes, f->len);
    return lua_pcall(co, 1, 1, 0) ? -1 : 0;
  }
  lua_pop(co, 1); /* package.loaded stays below */
  int r = luaL_loadbuffer(co, src.code, src.len, src.chunk);
  free(src.code);
  free(src.chunk);
  if (r) goto fail;
  lua_pushlstring(co, f->bytes, f->len);
  if (lua_pcall(co, 1, 1, 0)) goto fail;
  if (lua_isnil(co, -1)) {
    lua_pop(co, 1);
    lua_pushboolean(co, 1);
  }
  lua_pushvalue(co, -1);
  lua_setfield(co, -3, f->bytes); /* package.loaded[name], as require */
  lua_remove(co, -2);
  return 0;
fail:
  lua_remove(co, -2);
  return -1;
}

/* Loads the function of blob f on co (first use on this worker). */
static int load_function(lua_State *co, lt_fn *f) {
  if (f->kind == LT_FN_MODULE) {
    if (require_pinned(co, f)) return -1;
    if (callable_object(co)) return wrap_callable(co);
    if (!lua_isfunction(co, -1)) {
      const char *got = luaL_typename(co, -1);
      lua_pushfstring(co,
                      "tycho.spawn: module '%s' returned %s, not the "
                      "actor's function",
                      f->bytes, got);
      return -1;
    }
    return 0;
  }
  char err[256];
  int top = lua_gettop(co);
  if (lt_codec_decode(co, f->bytes, f->len, err, sizeof err) != 2) {
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
  int r = lt_fn_bind(co, top + 3, top + 2); /* stack: bytecode, map, fn */
  lua_replace(co, top + 1); /* fn (or the error) where the bytecode was */
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

void lt_fn_forget(lua_State *L, lt_fn *f, unsigned worker) {
  if (!f || !f->wref[worker]) return;
  luaL_unref(L, LUA_REGISTRYINDEX, f->wref[worker]);
  f->wref[worker] = 0;
}

/* ---- where a function comes from (for the watchdog's log) ---------------- */

static bool uleb(const uint8_t **p, const uint8_t *end, uint64_t *v) {
  *v = 0;
  for (unsigned sh = 0; *p < end && sh < 64; sh += 7) {
    uint8_t b = *(*p)++;
    *v |= (uint64_t)(b & 0x7f) << sh;
    if (!(b & 0x80)) return true;
  }
  return false;
}

/* The chunk name and first line of the bytecode at p (LuaJIT's dump
 * format: header, chunk name unless stripped, then the prototypes, the
 * function's own last). Reads only bytes; any thread. */
static void bc_origin(const uint8_t *p, const uint8_t *end, char *buf,
                      size_t n) {
  uint64_t flags, len, firstline = 0;
  if (end - p < 4 || p[0] != 0x1b || p[1] != 'L' || p[2] != 'J') return;
  p += 4;
  if (!uleb(&p, end, &flags) || (flags & 2)) return; /* stripped */
  if (!uleb(&p, end, &len) || len > (uint64_t)(end - p)) return;
  const char *name = (const char *)p;
  int nlen = (int)len;
  p += len;
  while (uleb(&p, end, &len) && len && len <= (uint64_t)(end - p)) {
    const uint8_t *q = p + 4, *pend = p + len;
    uint64_t v, dbg;
    if (uleb(&q, pend, &v) && uleb(&q, pend, &v) && uleb(&q, pend, &v) &&
        uleb(&q, pend, &dbg) && dbg && !uleb(&q, pend, &firstline))
      firstline = 0;
    p = pend;
  }
  if (nlen && (*name == '@' || *name == '=')) name++, nlen--;
  snprintf(buf, n, "%.*s:%llu", nlen, name, (unsigned long long)firstline);
}

const char *lt_fn_name(const lt_fn *f, size_t *len) {
  if (f->kind != LT_FN_MODULE) return NULL;
  *len = f->len;
  return f->bytes;
}

void lt_fn_origin(const lt_fn *f, char *buf, size_t n) {
  if (n) *buf = 0;
  if (f->kind == LT_FN_MODULE) {
    snprintf(buf, n, "module %.*s", (int)f->len, f->bytes);
    return;
  }
  /* The payload starts with the bytecode as a codec string. */
  const uint8_t *p = (const uint8_t *)f->bytes, *end = p + f->len;
  uint64_t len;
  if (p == end) return;
  if ((*p & 0xc0) == 0x40) {
    len = *p++ & 0x3f;
  } else if (*p++ != 0x05 || !uleb(&p, end, &len)) {
    return;
  }
  if (len <= (uint64_t)(end - p)) bc_origin(p, p + len, buf, n);
}
