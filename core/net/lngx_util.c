/*
 * lngx_util.c - more of tycho.ngx's C half (lua/tycho/ngx.lua): checksums,
 * HMAC, the worker's identity, and the nginx C helpers that lua-resty
 * libraries call through the FFI.
 *
 *   crc32_short(s), crc32_long(s) -> number (the same CRC-32 as nginx's;
 *       nginx picks a table per length, the result is the same)
 *   hmac_sha1(key, s) -> 20 bytes
 *   worker_id() -> 0-based worker index | nil outside a worker
 *   worker_count() -> workers of the run ; pid() -> getpid()
 *   export() -> true | nil, err: makes this module's own symbols and
 *       libcrypto's visible to ffi.C (see below)
 *
 * lua-resty-string declares `ngx_hex_dump` and `ngx_atoi`, and OpenSSL's
 * SHA1_Init ..., and calls them through ffi.C, which looks in the global
 * symbol scope. Inside the launcher (linked with -E) ours are there; a plain
 * `luajit` loads core.so with RTLD_LOCAL, so export() opens it again with
 * RTLD_GLOBAL (RTLD_NOLOAD: the same copy), and libcrypto likewise.
 */
#include <dlfcn.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "lngx.h"
#include "lua/lrun.h"

/* ---- the nginx helpers resty.string reaches through the FFI ------------- */

/* Declared here only: they are called from Lua, by name. */
unsigned char *ngx_hex_dump(unsigned char *dst, const unsigned char *src,
                            size_t len);
intptr_t ngx_atoi(const unsigned char *line, size_t n);

/* Writes 2*len lower-case hex digits at dst; returns dst's new end (nginx's
 * contract: no terminating NUL). */
__attribute__((used, visibility("default"))) unsigned char *
ngx_hex_dump(unsigned char *dst, const unsigned char *src, size_t len) {
  static const char hex[] = "0123456789abcdef";
  while (len--) {
    *dst++ = (unsigned char)hex[*src >> 4];
    *dst++ = (unsigned char)hex[*src++ & 0xf];
  }
  return dst;
}

/* nginx's ngx_atoi: decimal digits only, -1 on anything else (empty, a
 * sign, overflow). */
__attribute__((used, visibility("default"))) intptr_t
ngx_atoi(const unsigned char *line, size_t n) {
  if (n == 0) return -1;
  intptr_t v = 0;
  for (; n--; line++) {
    if (*line < '0' || *line > '9') return -1;
    int d = *line - '0';
    if (v > (INTPTR_MAX - d) / 10) return -1;
    v = v * 10 + d;
  }
  return v;
}

/* ---- checksums and HMAC ------------------------------------------------- */

static uint32_t crc_table[256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT; /* every worker opens us */

static void crc_init(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
    crc_table[i] = c;
  }
}

static int l_crc32(lua_State *L) {
  size_t len;
  const unsigned char *s = (const unsigned char *)luaL_checklstring(L, 1, &len);
  uint32_t c = 0xffffffffu;
  while (len--) c = crc_table[(c ^ *s++) & 0xff] ^ (c >> 8);
  lua_pushnumber(L, (lua_Number)(c ^ 0xffffffffu));
  return 1;
}

static int l_hmac_sha1(lua_State *L) {
  size_t klen, len;
  const char *key = luaL_checklstring(L, 1, &klen);
  const char *s = luaL_checklstring(L, 2, &len);
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  if (!HMAC(EVP_sha1(), key, (int)klen, (const unsigned char *)s, len, out, &n))
    return luaL_error(L, "ngx.hmac_sha1: HMAC failed (OpenSSL)");
  lua_pushlstring(L, (const char *)out, n);
  return 1;
}

/* ---- the worker's identity ---------------------------------------------- */

static int l_worker_id(lua_State *L) {
  ty_worker *w = ty_worker_current();
  if (!w) return 0;
  lua_pushinteger(L, (lua_Integer)ty_worker_id(w));
  return 1;
}

static int l_worker_count(lua_State *L) {
  lua_pushinteger(L, lt_ctx_get()->rt
                         ? (lua_Integer)ty_runtime_workers(lt_ctx_get()->rt)
                         : 0);
  return 1;
}

static int l_pid(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)getpid());
  return 1;
}

/* ---- symbols for ffi.C -------------------------------------------------- */

static int promote(const char *path) {
  void *h = dlopen(path, RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD);
  if (!h) h = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
  return h ? 0 : -1; /* kept open for the life of the process */
}

static int l_export(lua_State *L) {
  Dl_info self, crypto;
  if (!dladdr((void *)ngx_hex_dump, &self) || !self.dli_fname)
    return luaL_error(L, "ngx: cannot find core.so's path");
  if (promote(self.dli_fname))
    return lua_pushnil(L), lua_pushstring(L, dlerror()), 2;
  if (!dladdr((void *)EVP_sha1, &crypto) || !crypto.dli_fname ||
      promote(crypto.dli_fname))
    return lua_pushnil(L), lua_pushliteral(L, "ngx: libcrypto not found"), 2;
  lua_pushboolean(L, 1);
  return 1;
}

static const luaL_Reg util_funcs[] = {{"crc32", l_crc32},
                                      {"hmac_sha1", l_hmac_sha1},
                                      {"worker_id", l_worker_id},
                                      {"worker_count", l_worker_count},
                                      {"pid", l_pid},
                                      {"export", l_export},
                                      {NULL, NULL}};

void lt_ngx_util_register(lua_State *L) {
  pthread_once(&crc_once, crc_init);
  luaL_register(L, NULL, util_funcs);
}
