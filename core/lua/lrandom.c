/*
 * lrandom.c - randomness: tycho.random_bytes(n) (getrandom(2)), and the
 * seeding of math.random in every Lua state of the runtime.
 *
 * Every state seeds math.random from getrandom when it starts (a worker's,
 * a pool thread's, and the caller's when it first loads tycho.core), so
 * sequences differ between workers and between runs: the same sequence on
 * every worker gave a service the same "random" link codes on each.
 * tycho.config{seed = n} makes them repeatable instead (each worker's seed
 * is n mixed with its number, so workers still differ); seed = false goes
 * back to getrandom.
 */
#include <errno.h>
#include <lauxlib.h>
#include <stdint.h>
#include <string.h>
#include <sys/random.h>

#include "lrandom.h"

/* Set by tycho.config before a run (its threads are created after). */
static bool g_fixed;
static uint64_t g_seed;

static int fill(void *p, size_t n) {
  for (size_t got = 0; got < n;) {
    ssize_t r = getrandom((char *)p + got, n - got, 0);
    if (r < 0) {
      if (errno == EINTR) continue;
      return -errno;
    }
    got += (size_t)r;
  }
  return 0;
}

static uint64_t mix(uint64_t x) { /* splitmix64's finalizer */
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

static int seed_protected(lua_State *L) {
  double s = *(double *)lua_touserdata(L, 1);
  lua_getglobal(L, "math");
  if (!lua_istable(L, -1)) return 0;
  lua_getfield(L, -1, "randomseed");
  if (!lua_isfunction(L, -1)) return 0;
  lua_pushnumber(L, s);
  lua_call(L, 1, 0);
  return 0;
}

void lt_random_seed_state(lua_State *L, unsigned which, bool only_fixed) {
  if (only_fixed && !g_fixed) return;
  uint64_t x;
  if (g_fixed) x = mix(g_seed ^ mix(which));
  else if (fill(&x, sizeof x)) x = mix((uint64_t)(uintptr_t)L ^ which);
  /* 53 bits: a double holds them exactly */
  double s = (double)(x >> 11);
  if (lua_cpcall(L, seed_protected, &s)) lua_pop(L, 1); /* no math: no harm */
}

bool lt_random_config_field(lua_State *L, const char *k, int idx) {
  if (strcmp(k, "seed") != 0) return false;
  if (lua_type(L, idx) == LUA_TBOOLEAN && !lua_toboolean(L, idx)) {
    g_fixed = false;
  } else {
    if (lua_type(L, idx) != LUA_TNUMBER)
      luaL_error(L, "tycho.config: seed must be a number (or false: random)");
    double d = lua_tonumber(L, idx);
    uint64_t bits;
    memcpy(&bits, &d, sizeof bits);
    g_fixed = true;
    g_seed = bits;
  }
  lt_random_seed_state(L, 0, false); /* the caller's state, at once */
  return true;
}

/* random_bytes(n) -> a string of n bytes from getrandom */
static int l_random_bytes(lua_State *L) {
  lua_Number n = luaL_checknumber(L, 1);
  if (!(n >= 0) || n > 1 << 30 || n != (lua_Number)(size_t)n)
    return luaL_error(L, "tycho.random_bytes: n must be an integer from 0 "
                         "to 2^30");
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  for (size_t left = (size_t)n; left;) {
    size_t k = left < LUAL_BUFFERSIZE ? left : LUAL_BUFFERSIZE;
    char *p = luaL_prepbuffer(&b);
    int rc = fill(p, k);
    if (rc) return luaL_error(L, "tycho.random_bytes: %s", strerror(-rc));
    luaL_addsize(&b, k);
    left -= k;
  }
  luaL_pushresult(&b);
  return 1;
}

static const luaL_Reg funcs[] = {{"random_bytes", l_random_bytes},
                                 {NULL, NULL}};

void lt_open_random(lua_State *L) { luaL_register(L, NULL, funcs); }
