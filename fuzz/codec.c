/*
 * codec.c - libFuzzer target for the message decoder: arbitrary bytes
 * are decoded into a fresh lua_State. Besides not crashing (ASan, UBSan),
 * whatever decodes must be a proper message: it encodes again, decodes back
 * to deep-equal values, and copies to deep-equal values. A decode error must
 * leave the stack empty. Built and run by `make fuzz` (fuzz/README.md).
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <lauxlib.h>
#include <lua.h>

#include "lua/codec.h"

#define REQUIRE(cond)                                                          \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "fuzz_codec: %s failed (line %d)\n", #cond, __LINE__);   \
      abort();                                                                 \
    }                                                                          \
  } while (0)

static bool deq(lua_State *L, int a, int b, int depth);

static int count_keys(lua_State *L, int t) {
  int n = 0;
  lua_pushnil(L);
  while (lua_next(L, t)) {
    lua_pop(L, 1);
    n++;
  }
  return n;
}

/* Copied table keys are new tables, so they are matched by content. */
static bool find_table_key(lua_State *L, int b, int k, int v, int depth) {
  lua_pushnil(L);
  while (lua_next(L, b)) {
    int bv = lua_gettop(L);
    if (lua_type(L, bv - 1) == LUA_TTABLE && deq(L, k, bv - 1, depth + 1) &&
        deq(L, v, bv, depth + 1)) {
      lua_pop(L, 2);
      return true;
    }
    lua_pop(L, 1);
  }
  return false;
}

static bool tab_eq(lua_State *L, int a, int b, int depth) {
  bool ok = true;
  if (depth > 2 * LT_CODEC_MAX_DEPTH) return false;
  if (count_keys(L, a) != count_keys(L, b)) return false;
  lua_pushnil(L);
  while (ok && lua_next(L, a)) {
    int v = lua_gettop(L), k = v - 1;
    if (lua_type(L, k) == LUA_TTABLE) {
      ok = find_table_key(L, b, k, v, depth);
    } else {
      lua_pushvalue(L, k);
      lua_rawget(L, b);
      ok = deq(L, v, v + 1, depth + 1);
      lua_pop(L, 1);
    }
    lua_pop(L, 1);
  }
  if (!ok) lua_pop(L, 1); /* the key lua_next did not get to pop */
  return ok;
}

static bool deq(lua_State *L, int a, int b, int depth) {
  int t = lua_type(L, a);
  if (t != lua_type(L, b)) return false;
  if (t == LUA_TTABLE) return tab_eq(L, a, b, depth);
  if (t == LUA_TNUMBER) {
    lua_Number x = lua_tonumber(L, a), y = lua_tonumber(L, b);
    if (isnan(x) || isnan(y)) return isnan(x) && isnan(y);
    return x == y && !signbit(x) == !signbit(y);
  }
  return lua_rawequal(L, a, b) || t == LUA_TNIL;
}

/* Values at first..first+m-1 encode, decode back and copy to equal values
 * (three sets of m values on L's stack). */
static void check_chunk(lua_State *L, int first, int m) {
  char err[256];
  ty__buf b;
  int top = lua_gettop(L);
  ty__buf_init(&b);
  err[0] = 0;
  int rc = lt_codec_encode(L, first, m, &b, SIZE_MAX, err, sizeof(err));
  if (rc) fprintf(stderr, "fuzz_codec: encode: %s\n", err);
  REQUIRE(rc == 0);
  REQUIRE(lua_gettop(L) == top);
  rc = lt_codec_decode(L, b.data, b.len, err, sizeof(err));
  if (rc != m) fprintf(stderr, "fuzz_codec: decode again: %s\n", err);
  REQUIRE(rc == m);
  rc = lt_codec_copy(L, first, m, SIZE_MAX, err, sizeof(err));
  if (rc != m) fprintf(stderr, "fuzz_codec: copy: %s\n", err);
  REQUIRE(rc == m);
  for (int i = 0; i < m; i++) {
    REQUIRE(deq(L, first + i, top + 1 + i, 0));
    REQUIRE(deq(L, first + i, top + 1 + m + i, 0));
  }
  lua_settop(L, top);
  ty__buf_free(&b);
}

/* The n values on T (decode fills up to a C function's 8000 slots) are
 * checked in chunks of at most 1000, each moved to a fresh thread, whose
 * stack has room for the chunk's three sets. */
static void check_values(lua_State *L, lua_State *T, int n) {
  REQUIRE(lua_gettop(T) == n);
  while (n > 0) {
    int m = n < 1000 ? n : 1000;
    lua_State *C = lua_newthread(L);
    REQUIRE(lua_checkstack(C, 3 * m + 8));
    lua_xmove(T, C, m); /* the last m values of T */
    check_chunk(C, 1, m);
    lua_pop(L, 1);
    n -= m;
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char err[256];
  lua_State *L = luaL_newstate();
  REQUIRE(L != NULL);
  lua_State *T = lua_newthread(L);
  int n = lt_codec_decode(T, (const char *)data, size, err, sizeof(err));
  if (n < 0) REQUIRE(lua_gettop(T) == 0 && err[0] != '\0');
  else check_values(L, T, n);
  lua_close(L);
  return 0;
}
