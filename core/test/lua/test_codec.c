/*
 * test_codec.c - tests of the message codec (core/lua/codec.c), built by
 * make as build/tycho-lua-tests (it links LuaJIT; the core's tests do not)
 * and run by make test, make asan and make tsan.
 *
 * Prints "N passed, N failed", then the speed of encode+decode and copy (not
 * asserted; TY_CODEC_NOBENCH=1 skips it), and exits non-zero on failure.
 * Every test gets a fresh Lua state and an empty buffer.
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "../test.h"
#include "base/common.h"
#include "lua/codec.h"

static lua_State *L;
static ty__buf B;
static char err[512];
static uint64_t rng = 0x9E3779B97F4A7C15ull;

/* ---- helpers ------------------------------------------------------------- */

/* Runs Lua code, leaving its results on the stack; returns how many. */
static int run_lua(const char *code) {
  int top = lua_gettop(L);
  if (luaL_loadstring(L, code) || lua_pcall(L, 0, LUA_MULTRET, 0)) {
    fprintf(stderr, "lua error: %s\n", lua_tostring(L, -1));
    exit(2);
  }
  return lua_gettop(L) - top;
}

static unsigned rnd(unsigned n) {
  return (unsigned)(ty__rand_next(&rng) >> 32) % n;
}

static bool deq(int a, int b, int depth);

/* NaN equals NaN and -0.0 differs from 0.0: the codec must keep both. */
static bool num_eq(lua_Number x, lua_Number y) {
  if (isnan(x) || isnan(y)) return isnan(x) && isnan(y);
  return x == y && !signbit(x) == !signbit(y);
}

static int count_keys(int t) {
  int n = 0;
  lua_pushnil(L);
  while (lua_next(L, t)) {
    lua_pop(L, 1);
    n++;
  }
  return n;
}

/* Copied table keys are new tables, so they are matched by content. */
static bool find_table_key(int b, int k, int v, int depth) {
  lua_pushnil(L);
  while (lua_next(L, b)) {
    int bv = lua_gettop(L);
    if (lua_type(L, bv - 1) == LUA_TTABLE && deq(k, bv - 1, depth + 1) &&
        deq(v, bv, depth + 1)) {
      lua_pop(L, 2);
      return true;
    }
    lua_pop(L, 1);
  }
  return false;
}

static bool tab_eq(int a, int b, int depth) {
  bool ok = true;
  if (depth > 2 * TY_CODEC_MAX_DEPTH) return false;
  if (count_keys(a) != count_keys(b)) return false;
  lua_pushnil(L);
  while (ok && lua_next(L, a)) {
    int v = lua_gettop(L), k = v - 1;
    if (lua_type(L, k) == LUA_TTABLE) {
      ok = find_table_key(b, k, v, depth);
    } else {
      lua_pushvalue(L, k);
      lua_rawget(L, b);
      ok = deq(v, v + 1, depth + 1);
      lua_pop(L, 1);
    }
    lua_pop(L, 1);
  }
  if (!ok) lua_pop(L, 1); /* the key lua_next did not get to pop */
  return ok;
}

/* Deep equality of the values at absolute indices a and b. */
static bool deq(int a, int b, int depth) {
  int t = lua_type(L, a);
  if (t != lua_type(L, b)) return false;
  switch (t) {
  case LUA_TNIL: return true;
  case LUA_TBOOLEAN: return lua_toboolean(L, a) == lua_toboolean(L, b);
  case LUA_TNUMBER: return num_eq(lua_tonumber(L, a), lua_tonumber(L, b));
  case LUA_TTABLE: return tab_eq(a, b, depth);
  default: return lua_rawequal(L, a, b);
  }
}

static bool list_eq(int a, int b, int n) {
  for (int i = 0; i < n; i++)
    if (!deq(a + i, b + i, 0)) return false;
  return true;
}

/* Encodes+decodes and copies the n values at first, checks both against the
 * originals and against each other; leaves the stack as it was. */
static int check_roundtrip(int first, int n) {
  int top = lua_gettop(L);
  size_t start = B.len;
  CHECK_EQ(ty__codec_encode(L, first, n, &B, SIZE_MAX, err, sizeof(err)), 0);
  CHECK_EQ(lua_gettop(L), top);
  CHECK_EQ(ty__codec_decode(L, B.data + start, B.len - start, err, sizeof(err)),
           n);
  CHECK(list_eq(first, top + 1, n));
  CHECK_EQ(ty__codec_copy(L, first, n, SIZE_MAX, err, sizeof(err)), n);
  CHECK_EQ(lua_gettop(L), top + 2 * n);
  CHECK(list_eq(first, top + n + 1, n));
  CHECK(list_eq(top + 1, top + n + 1, n));
  lua_settop(L, top);
  return 0;
}

/* Both encode and copy fail with exactly `want`, leaving the stack and the
 * buffer (pre-filled, to see that nothing is appended) as they were. */
static int check_error(int first, int n, const char *want) {
  int top = lua_gettop(L);
  ty__buf_reset(&B);
  lua_pushliteral(L, "prefix");
  CHECK_EQ(ty__codec_encode(L, -1, 1, &B, SIZE_MAX, err, sizeof(err)), 0);
  lua_pop(L, 1);
  size_t len = B.len;
  CHECK_EQ(ty__codec_encode(L, first, n, &B, SIZE_MAX, err, sizeof(err)), -1);
  if (strcmp(err, want) != 0) {
    fprintf(stderr, "encode error:\n  got  %s\n  want %s\n", err, want);
    return 1;
  }
  CHECK_EQ(B.len, len);
  CHECK_EQ(lua_gettop(L), top);
  CHECK_EQ(ty__codec_copy(L, first, n, SIZE_MAX, err, sizeof(err)), -1);
  if (strcmp(err, want) != 0) {
    fprintf(stderr, "copy error:\n  got  %s\n  want %s\n", err, want);
    return 1;
  }
  CHECK_EQ(lua_gettop(L), top);
  return 0;
}

/* Decoding arbitrary bytes: -1 with a message and nothing pushed, or values
 * that encode again. The bytes sit in an exact-size heap block so that ASan
 * sees any read past the end. */
static int check_decode_safe(const char *data, size_t len) {
  int top = lua_gettop(L);
  char *copy = malloc(len ? len : 1);
  memcpy(copy, data, len);
  int n = ty__codec_decode(L, copy, len, err, sizeof(err));
  free(copy);
  if (n < 0) {
    CHECK_EQ(lua_gettop(L), top);
    CHECK(err[0] != '\0');
    return 0;
  }
  CHECK_EQ(lua_gettop(L), top + n);
  ty__buf b;
  ty__buf_init(&b);
  int rc = ty__codec_encode(L, top + 1, n, &b, SIZE_MAX, err, sizeof(err));
  ty__buf_free(&b);
  CHECK_EQ(rc, 0);
  lua_settop(L, top);
  return 0;
}

static int check_corruptions(const char *data, size_t len) {
  char *m = malloc(len ? len : 1);
  for (size_t i = 0; i <= len; i++) {
    /* every prefix when small, a sample otherwise (quadratic cost) */
    size_t cut = len <= 4096 ? i : rnd((unsigned)len + 1);
    if (len > 4096 && i >= 300) break;
    if (check_decode_safe(data, cut)) return free(m), 1;
  }
  for (int i = 0; len > 0 && i < 300; i++) {
    memcpy(m, data, len);
    for (unsigned j = 0, flips = 1 + (i % 3 == 0 ? rnd(4) : 0); j < flips;
         j++) {
      size_t at = rnd((unsigned)len);
      m[at] = (char)(i & 1 ? rnd(256) : (unsigned char)m[at] ^ (1u << rnd(8)));
    }
    if (check_decode_safe(m, len)) return free(m), 1;
  }
  free(m);
  return 0;
}

/* ---- random values ------------------------------------------------------- */

static void gen_value(int depth, bool allow_nil);

static void gen_number(bool as_key) {
  static const double special[] = {0.0,
                                   -0.0,
                                   1e308,
                                   -1e308,
                                   5e-324,
                                   0.1,
                                   2147483647.0,
                                   2147483648.0,
                                   -2147483648.0,
                                   -2147483649.0,
                                   9007199254740993.0};
  double d;
  uint64_t u;
  switch (rnd(6)) {
  case 0:
  case 1: d = (double)rnd(400) - 100; break;
  case 2: d = (double)(int32_t)(uint32_t)ty__rand_next(&rng); break;
  case 3:
    u = ty__rand_next(&rng);
    memcpy(&d, &u, sizeof(d));
    break;
  case 4: d = rnd(2) ? (rnd(2) ? INFINITY : -INFINITY) : NAN; break;
  default: d = special[rnd(ty__countof(special))]; break;
  }
  if (as_key && isnan(d)) d = 0.25; /* not a valid key */
  lua_pushnumber(L, d);
}

static void gen_string(void) {
  char s[600];
  size_t len = rnd(10) == 0 ? rnd(sizeof(s)) : rnd(20);
  for (size_t i = 0; i < len; i++) s[i] = (char)(rnd(4) == 0 ? 0 : rnd(256));
  lua_pushlstring(L, s, len);
}

static void gen_table(int depth) {
  lua_newtable(L);
  int t = lua_gettop(L);
  for (unsigned i = 1, n = rnd(9); i <= n; i++) {
    gen_value(depth + 1, true);
    if (lua_isnil(L, -1)) lua_pop(L, 1);
    else lua_rawseti(L, t, (int)i);
  }
  for (unsigned i = 0, n = rnd(7); i < n; i++) {
    unsigned r = rnd(8);
    if (r == 0) lua_pushboolean(L, rnd(2));
    else if (r < 3) gen_number(true);
    else if (r == 7 && depth < 4) gen_table(depth + 1);
    else gen_string();
    gen_value(depth + 1, false);
    lua_rawset(L, t);
  }
}

/* Tables thin out with depth so that a structure stays around a few KB. */
static void gen_value(int depth, bool allow_nil) {
  unsigned r = rnd(10);
  if (r < 3 && depth < 6 && rnd((unsigned)depth + 1) == 0) gen_table(depth);
  else if (r == 3 && rnd(3) == 0) lua_pushlightuserdata(L, NULL); /* null */
  else if (r == 3) allow_nil ? lua_pushnil(L) : lua_pushboolean(L, 0);
  else if (r == 4) lua_pushboolean(L, rnd(2));
  else if (r < 7) gen_number(false);
  else gen_string();
}

/* ---- tests --------------------------------------------------------------- */

TEST_IMPL(codec_scalars) {
  static const struct {
    const char *lua;
    size_t size;
  } cases[] = {
      {"return nil", 1},
      {"return true", 1},
      {"return false", 1},
      {"return 0", 1},
      {"return 127", 1},
      {"return 128", 5},
      {"return -1", 5},
      {"return 2147483647", 5},
      {"return -2147483648", 5},
      {"return 2147483648", 9},
      {"return -2147483649", 9},
      {"return 1.5", 9},
      {"return 0/-1", 9}, /* -0.0 */
      {"return 0/0", 9},
      {"return 1/0", 9},
      {"return -1/0", 9},
      {"return 1e308", 9},
      {"return -2^53", 9},
      {"return 2^53 + 2", 9},
      {"return 5e-324", 9},
      {"return 2.2250738585072014e-308", 9},
      {"return ''", 1},
      {"return 'a'", 2},
      {"return ('x'):rep(63)", 64},
      {"return ('x'):rep(64)", 66},
      {"return ('\\0'):rep(300)", 303},
      {"return ('ab\\0'):rep(100000)", 300004},
  };
  for (size_t i = 0; i < ty__countof(cases); i++) {
    ty__buf_reset(&B);
    CHECK_EQ(run_lua(cases[i].lua), 1);
    CHECK_EQ(ty__codec_encode(L, 1, 1, &B, SIZE_MAX, err, sizeof(err)), 0);
    if (B.len != cases[i].size)
      fprintf(stderr, "%s: %zu bytes\n", cases[i].lua, B.len);
    CHECK_EQ(B.len, cases[i].size);
    CHECK(check_roundtrip(1, 1) == 0);
    lua_settop(L, 0);
  }
  /* The sign of zero survives (num_eq also checks it, this checks the
   * premise that Lua gave us a negative zero in the first place). */
  run_lua("return 0/-1");
  CHECK(signbit(lua_tonumber(L, 1)));
  ty__buf_reset(&B);
  CHECK_EQ(ty__codec_encode(L, 1, 1, &B, SIZE_MAX, err, sizeof(err)), 0);
  CHECK_EQ(ty__codec_decode(L, B.data, B.len, err, sizeof(err)), 1);
  CHECK(signbit(lua_tonumber(L, 2)) && lua_tonumber(L, 2) == 0);
  return 0;
}

TEST_IMPL(codec_binary_strings) {
  char all[256], big[1 << 16];
  for (int i = 0; i < 256; i++) all[i] = (char)i;
  for (size_t i = 0; i < sizeof(big); i++) big[i] = (char)rnd(3);
  lua_pushlstring(L, all, sizeof(all));
  lua_pushlstring(L, "\0\0a\0", 4);
  lua_pushlstring(L, big, sizeof(big));
  run_lua("return {['\\0k\\0'] = '\\0v\\0', ['\\255'] = {'\\0'}}");
  CHECK(check_roundtrip(1, 4) == 0);
  CHECK_EQ(ty__codec_decode(L, B.data, B.len, err, sizeof(err)), 4);
  size_t len;
  const char *s = lua_tolstring(L, 5, &len);
  CHECK(len == 256 && memcmp(s, all, 256) == 0);
  s = lua_tolstring(L, 7, &len);
  CHECK(len == sizeof(big) && memcmp(s, big, len) == 0);
  return 0;
}

TEST_IMPL(codec_nils) {
  run_lua("return 1, nil, 3");
  CHECK(check_roundtrip(1, 3) == 0);
  ty__buf_reset(&B);
  CHECK_EQ(ty__codec_encode(L, 1, 3, &B, SIZE_MAX, err, sizeof(err)), 0);
  CHECK_EQ(ty__codec_decode(L, B.data, B.len, err, sizeof(err)), 3);
  CHECK(lua_isnil(L, 5) && lua_tonumber(L, 6) == 3);
  lua_settop(L, 0);
  run_lua("return nil, nil");
  CHECK(check_roundtrip(1, 2) == 0);
  lua_settop(L, 0);
  /* No values: no bytes, and no bytes decode to no values. */
  ty__buf_reset(&B);
  CHECK_EQ(ty__codec_encode(L, 1, 0, &B, SIZE_MAX, err, sizeof(err)), 0);
  CHECK_EQ(B.len, 0);
  CHECK_EQ(ty__codec_decode(L, NULL, 0, err, sizeof(err)), 0);
  CHECK_EQ(ty__codec_copy(L, 1, 0, SIZE_MAX, err, sizeof(err)), 0);
  /* Holes in arrays. */
  run_lua("return {1, nil, 3}, {nil, nil, 'x'}, {n = 3, nil, false}");
  CHECK(check_roundtrip(1, 3) == 0);
  ty__buf_reset(&B);
  CHECK_EQ(ty__codec_encode(L, 1, 1, &B, SIZE_MAX, err, sizeof(err)), 0);
  CHECK_EQ(ty__codec_decode(L, B.data, B.len, err, sizeof(err)), 1);
  lua_rawgeti(L, -1, 3);
  CHECK(lua_tonumber(L, -1) == 3);
  lua_rawgeti(L, -2, 2);
  CHECK(lua_isnil(L, -1));
  return 0;
}

TEST_IMPL(codec_tables) {
  run_lua("local t = {1, 2, 3, x = {y = {z = 'deep'}}, [true] = false,"
          "  [1.5] = 'f', [-3] = 'neg', [0] = 'zero', [2^40] = 'big',"
          "  ['with space'] = 1, [{1, 2}] = 'table key', [{k = {}}] = {},"
          "  [1/0] = 'inf', [-1/0] = -1/0, nan = 0/0, nz = 0/-1}"
          "local arr, rec = {}, {}"
          "for i = 1, 10000 do arr[i] = i * 1.5; rec['k' .. i] = i end "
          "local mixed = {} for i = 1, 100 do mixed[i] = i; mixed[-i] = i end "
          "local back = {} for i = 50, 1, -1 do back[i] = i end "
          "local sparse = {} sparse[1] = 1 sparse[2] = 2 sparse[4] = 4 "
          "sparse[1000] = 1000 "
          "return t, {}, arr, rec, mixed, back, sparse,"
          "  setmetatable({a = 1}, {__index = function() return 1 end})");
  CHECK(check_roundtrip(1, 8) == 0);
  /* Metatables are not copied. */
  ty__buf_reset(&B);
  CHECK_EQ(ty__codec_encode(L, 8, 1, &B, SIZE_MAX, err, sizeof(err)), 0);
  CHECK_EQ(ty__codec_decode(L, B.data, B.len, err, sizeof(err)), 1);
  CHECK_EQ(ty__codec_copy(L, 8, 1, SIZE_MAX, err, sizeof(err)), 1);
  CHECK(!lua_getmetatable(L, -1) && !lua_getmetatable(L, -2));
  /* Array order is kept: the copy of `back` has a real sequence. */
  lua_settop(L, 8);
  CHECK_EQ(ty__codec_copy(L, 6, 1, SIZE_MAX, err, sizeof(err)), 1);
  CHECK_EQ(lua_objlen(L, -1), 50);
  return 0;
}

/* A table nested `levels` deep: {{...{}...}} */
static void push_nested(int levels) {
  lua_newtable(L);
  for (int i = 1; i < levels; i++) {
    lua_createtable(L, 1, 0);
    lua_insert(L, -2);
    lua_rawseti(L, -2, 1);
  }
}

TEST_IMPL(codec_depth) {
  char want[512];
  push_nested(TY_CODEC_MAX_DEPTH);
  CHECK(check_roundtrip(1, 1) == 0);
  lua_settop(L, 0);
  /* One more level fails, in a value and in a key. */
  push_nested(TY_CODEC_MAX_DEPTH + 1);
  ty__buf_reset(&B);
  CHECK_EQ(ty__codec_encode(L, 1, 1, &B, SIZE_MAX, err, sizeof(err)), -1);
  CHECK(strncmp(err,
                "cannot copy tables nested deeper than 100 levels (argument "
                "1, at [1][1][1]",
                70) == 0);
  CHECK(strstr(err, "...") != NULL); /* the 100-step path is cut */
  strcpy(want, err);
  CHECK(check_error(1, 1, want) == 0);
  lua_settop(L, 0);
  lua_newtable(L);
  push_nested(TY_CODEC_MAX_DEPTH);
  lua_pushboolean(L, 1);
  lua_rawset(L, 1);
  ty__buf_reset(&B);
  CHECK_EQ(ty__codec_encode(L, 1, 1, &B, SIZE_MAX, err, sizeof(err)), -1);
  CHECK(strncmp(err,
                "cannot copy tables nested deeper than 100 levels "
                "(argument 1, at <key>[1][1]",
                74) == 0);
  lua_settop(L, 0);
  /* Decode: 100 nested headers are fine, 101 are malformed. */
  static const char hdr[] = {0x06, 0x01, 0, 0, 0, 0};
  char bytes[6 * (TY_CODEC_MAX_DEPTH + 1) + 1];
  for (int i = 0; i <= TY_CODEC_MAX_DEPTH; i++) memcpy(bytes + 6 * i, hdr, 6);
  bytes[6 * (TY_CODEC_MAX_DEPTH + 1)] = 0x00;
  CHECK_EQ(ty__codec_decode(L, bytes + 6, sizeof(bytes) - 6, err, sizeof(err)),
           1);
  lua_settop(L, 0);
  CHECK_EQ(ty__codec_decode(L, bytes, sizeof(bytes), err, sizeof(err)), -1);
  CHECK(strstr(err, "deeper than 100") != NULL);
  CHECK_EQ(lua_gettop(L), 0);
  return 0;
}

TEST_IMPL(codec_errors) {
  run_lua("return 1, {handlers = {{}, {}, {cb = function() end}}}");
  CHECK(check_error(1, 2,
                    "cannot copy a function (argument 2, at "
                    ".handlers[3].cb)") == 0);
  lua_settop(L, 0);
  run_lua("return coroutine.create(function() end)");
  CHECK(check_error(1, 1, "cannot copy a coroutine (argument 1)") == 0);
  lua_settop(L, 0);
  lua_newuserdata(L, 16);
  CHECK(check_error(1, 1, "cannot copy a userdata (argument 1)") == 0);
  lua_settop(L, 0);
  lua_pushlightuserdata(L, &B);
  CHECK(check_error(1, 1, "cannot copy a light userdata (argument 1)") == 0);
  lua_settop(L, 0);
  run_lua("return 1, 2, {c = require('ffi').new('int[1]')}");
  CHECK(check_error(1, 3, "cannot copy a cdata (argument 3, at .c)") == 0);
  lua_settop(L, 0);
  run_lua("local t = {} t.self = t return t");
  CHECK(check_error(1, 1, "cannot copy a cycle (argument 1, at .self)") == 0);
  lua_settop(L, 0);
  run_lua("local a = {b = {c = {}}} a.b.c[2] = a.b return a");
  CHECK(check_error(1, 1, "cannot copy a cycle (argument 1, at .b.c[2])") == 0);
  lua_settop(L, 0);
  run_lua("local t = {} t[t] = 1 return t");
  CHECK(check_error(1, 1, "cannot copy a cycle (argument 1, at <key>)") == 0);
  lua_settop(L, 0);
  run_lua("return {x = {[print] = 1}}");
  CHECK(check_error(1, 1,
                    "cannot copy a function used as a table key "
                    "(argument 1, at .x)") == 0);
  lua_settop(L, 0);
  run_lua("return {['a b'] = {[2.5] = {[true] = {[{}] = {f = print}}}}}");
  CHECK(check_error(1, 1,
                    "cannot copy a function (argument 1, at "
                    "[\"a b\"][2.5][true][{table}].f)") == 0);
  lua_settop(L, 0);
  run_lua("return 'ok', {k = {[{f = print}] = 1}}");
  CHECK(check_error(1, 2,
                    "cannot copy a function (argument 2, at "
                    ".k<key>.f)") == 0);
  lua_settop(L, 0);
  /* "argument" is the stack index, so it matches a C function's arguments
   * and works with relative indices too. */
  run_lua("return 'pid', 'x', print");
  CHECK(check_error(-2, 2, "cannot copy a function (argument 3)") == 0);
  return 0;
}

/* JSON's null (the NULL light userdata of lua-cjson and OpenResty) travels
 * as one byte and comes back as the same value; other light userdata, and
 * null as a table key, are refused. */
TEST_IMPL(codec_null) {
  lua_settop(L, 0);
  lua_pushlightuserdata(L, NULL);
  ty__buf_reset(&B);
  CHECK_EQ(ty__codec_encode(L, 1, 1, &B, SIZE_MAX, err, sizeof(err)), 0);
  CHECK_EQ(B.len, 1);
  CHECK_EQ((unsigned char)B.data[0], 0x08);
  CHECK_EQ(ty__codec_decode(L, B.data, B.len, err, sizeof(err)), 1);
  CHECK(lua_type(L, 2) == LUA_TLIGHTUSERDATA && lua_touserdata(L, 2) == NULL);
  CHECK(lua_rawequal(L, 1, 2));
  lua_settop(L, 0);
  /* In arrays (where nil would be a hole), in hash values, nested. */
  lua_pushlightuserdata(L, NULL);
  lua_setglobal(L, "null");
  run_lua("return {1, null, 3, {x = null, y = {null, null}}}, null, 'z'");
  CHECK(check_roundtrip(1, 3) == 0);
  ty__buf_reset(&B);
  CHECK_EQ(ty__codec_encode(L, 1, 3, &B, SIZE_MAX, err, sizeof(err)), 0);
  CHECK_EQ(ty__codec_decode(L, B.data, B.len, err, sizeof(err)), 3);
  CHECK_EQ(lua_objlen(L, 4), 4); /* no hole where the null is */
  lua_rawgeti(L, 4, 2);
  CHECK(lua_type(L, -1) == LUA_TLIGHTUSERDATA && !lua_touserdata(L, -1));
  CHECK(lua_type(L, 5) == LUA_TLIGHTUSERDATA && !lua_touserdata(L, 5));
  lua_settop(L, 0);
  CHECK(run_lua("return {[null] = 1}") == 1);
  CHECK(check_error(1, 1,
                    "cannot copy a light userdata used as a table key "
                    "(argument 1)") == 0);
  lua_settop(L, 0);
  lua_pushlightuserdata(L, &B);
  CHECK(check_error(1, 1, "cannot copy a light userdata (argument 1)") == 0);
  lua_settop(L, 0);
  /* Decoding the tag inside a table, and skipping it in release. */
  static const char bytes[] = "\x06\x02\x00\x00\x00\x00\x08\x81";
  CHECK_EQ(ty__codec_decode(L, bytes, sizeof(bytes) - 1, err, sizeof(err)), 1);
  lua_rawgeti(L, 1, 1);
  CHECK(lua_type(L, -1) == LUA_TLIGHTUSERDATA && !lua_touserdata(L, -1));
  ty__codec_release(bytes, sizeof(bytes) - 1);
  return 0;
}

TEST_IMPL(codec_size_limit) {
  char want[512];
  run_lua("return {('x'):rep(1000)}");
  ty__buf_reset(&B);
  CHECK_EQ(ty__codec_encode(L, 1, 1, &B, SIZE_MAX, err, sizeof(err)), 0);
  size_t size = B.len;
  /* The limit counts this encoding only, not what the buffer held. */
  CHECK_EQ(ty__codec_encode(L, 1, 1, &B, size, err, sizeof(err)), 0);
  CHECK_EQ(B.len, 2 * size);
  CHECK_EQ(ty__codec_copy(L, 1, 1, size, err, sizeof(err)), 1);
  lua_settop(L, 1);
  CHECK_EQ(ty__codec_encode(L, 1, 1, &B, size - 1, err, sizeof(err)), -1);
  CHECK_EQ(B.len, 2 * size);
  snprintf(want, sizeof(want),
           "message of %zu+ bytes exceeds the limit of %zu bytes; raise it "
           "with tycho.config{max_message=...}",
           size, size - 1);
  CHECK(strcmp(err, want) == 0);
  CHECK_EQ(ty__codec_copy(L, 1, 1, size - 1, err, sizeof(err)), -1);
  CHECK(strcmp(err, want) == 0);
  CHECK_EQ(lua_gettop(L), 1);
  lua_settop(L, 0);
  /* Fail early: a big message stops near the limit instead of being built
   * whole (the buffer stays small, the reported size near the limit). */
  run_lua("local t = {} for i = 1, 200000 do t[i] = {i, 'v' .. i} end "
          "return t");
  ty__buf_free(&B);
  CHECK_EQ(ty__codec_encode(L, 1, 1, &B, 1000, err, sizeof(err)), -1);
  CHECK(B.cap <= 4096);
  size_t n = 0;
  CHECK(sscanf(err, "message of %zu+ bytes", &n) == 1);
  CHECK(n > 1000 && n < 1100);
  char enc_err[512];
  strcpy(enc_err, err);
  CHECK_EQ(ty__codec_copy(L, 1, 1, 1000, err, sizeof(err)), -1);
  CHECK(strcmp(err, enc_err) == 0);
  /* A limit of 0 admits only the empty message. */
  CHECK_EQ(ty__codec_encode(L, 1, 0, &B, 0, err, sizeof(err)), 0);
  lua_pushnil(L);
  CHECK_EQ(ty__codec_encode(L, 2, 1, &B, 0, err, sizeof(err)), -1);
  return 0;
}

TEST_IMPL(codec_shared_subtable) {
  /* Shared but not cyclic: each reference becomes its own copy. */
  run_lua("local s = {1, 2} return {a = s, b = s}, s");
  CHECK(check_roundtrip(1, 2) == 0);
  ty__buf_reset(&B);
  CHECK_EQ(ty__codec_encode(L, 1, 2, &B, SIZE_MAX, err, sizeof(err)), 0);
  CHECK_EQ(ty__codec_decode(L, B.data, B.len, err, sizeof(err)), 2);
  CHECK_EQ(ty__codec_copy(L, 1, 2, SIZE_MAX, err, sizeof(err)), 2);
  for (int t = 3; t <= 5; t += 2) {
    lua_getfield(L, t, "a");
    lua_getfield(L, t, "b");
    CHECK(lua_istable(L, -1) && !lua_rawequal(L, -1, -2));
    CHECK(deq(lua_gettop(L) - 1, lua_gettop(L), 0));
    CHECK(!lua_rawequal(L, -1, t + 1) && !lua_rawequal(L, -1, 2));
    lua_pushnumber(L, 99);
    lua_rawseti(L, -3, 1); /* changing one copy leaves the other alone */
    lua_rawgeti(L, -1, 1);
    CHECK(lua_tonumber(L, -1) == 1);
    lua_pop(L, 3);
  }
  return 0;
}

TEST_IMPL(codec_random) {
  for (int i = 0; i < 100; i++) {
    int n = 1 + (int)rnd(4);
    for (int j = 0; j < n; j++) {
      if (j == 0) gen_table(0);
      else gen_value(0, true);
    }
    ty__buf_reset(&B);
    CHECK(check_roundtrip(1, n) == 0);
    lua_settop(L, 0);
  }
  return 0;
}

TEST_IMPL(codec_corrupt) {
  for (int i = 0; i < 100; i++) {
    gen_table(0);
    if (i % 10 == 0) push_nested(TY_CODEC_MAX_DEPTH);
    ty__buf_reset(&B);
    CHECK_EQ(ty__codec_encode(L, 1, lua_gettop(L), &B, SIZE_MAX, err,
                              sizeof(err)),
             0);
    lua_settop(L, 0);
    CHECK(check_corruptions(B.data, B.len) == 0);
  }
  /* Pure noise. */
  char noise[256];
  for (int i = 0; i < 2000; i++) {
    size_t len = rnd(sizeof(noise));
    for (size_t j = 0; j < len; j++) noise[j] = (char)rnd(256);
    CHECK(check_decode_safe(noise, len) == 0);
  }
  return 0;
}

static int expect_malformed(const char *bytes, size_t len, const char *what) {
  lua_settop(L, 0);
  CHECK_EQ(ty__codec_decode(L, bytes, len, err, sizeof(err)), -1);
  CHECK_EQ(lua_gettop(L), 0);
  if (!strstr(err, what)) {
    fprintf(stderr, "decode error: got %s, want %s\n", err, what);
    return 1;
  }
  return 0;
}

#define MALFORMED(lit, what) expect_malformed(lit, sizeof(lit) - 1, what)

TEST_IMPL(codec_decode_errors) {
  CHECK(MALFORMED("\x07", "bad tag at byte 0") == 0);
  CHECK(MALFORMED("\x01\x3f", "bad tag at byte 1") == 0);
  CHECK(MALFORMED("\x04\x01\x02\x03", "truncated number") == 0);
  CHECK(MALFORMED("\x03\x01", "truncated number") == 0);
  CHECK(MALFORMED("\x05\x10"
                  "abc",
                  "truncated string") == 0);
  CHECK(MALFORMED("\x45"
                  "abc",
                  "truncated string") == 0);
  CHECK(MALFORMED("\x05\x80\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01",
                  "bad length") == 0);
  CHECK(MALFORMED("\x05\xff\xff\xff\xff\xff\xff\xff\xff\xff\x7f",
                  "bad length") == 0);
  CHECK(MALFORMED("\x06\x80", "truncated length") == 0);
  CHECK(MALFORMED("\x06\x00\x01\x00", "truncated table") == 0);
  CHECK(MALFORMED("\x06\xff\xff\xff\xff\x0f\x00\x00\x00\x00",
                  "bad table size") == 0);
  CHECK(MALFORMED("\x06\x00\xff\xff\xff\xff\x01\x01", "bad table size") == 0);
  /* Counts the remaining bytes cannot hold, below LuaJIT's limits too. */
  CHECK(MALFORMED("\x06\x80\x80\x40\x00\x00\x00\x00\x01", "bad table size") ==
        0);
  CHECK(MALFORMED("\x06\x00\x00\x00\x01\x00\x01\x01", "bad table size") == 0);
  CHECK(MALFORMED("\x06\x02\x01\x00\x00\x00\x01\x01", "bad table size") == 0);
  CHECK(MALFORMED("\x06\x02\x00\x00\x00\x00\x41"
                  "a",
                  "truncated value") == 0);
  CHECK(MALFORMED("\x06\x00\x01\x00\x00\x00\x00\x01",
                  "nil or NaN table key at byte 6") == 0);
  CHECK(MALFORMED("\x06\x00\x01\x00\x00\x00\x08\x01", "null table key") == 0);
  CHECK(MALFORMED("\x06\x00\x01\x00\x00\x00\x04\x00\x00\x00\x00\x00\x00\xf8"
                  "\x7f\x01",
                  "nil or NaN table key") == 0);
  /* Well-formed edge cases: a nil value in the hash section is dropped. */
  lua_settop(L, 0);
  static const char ok[] = "\x06\x00\x01\x00\x00\x00\x81\x00";
  CHECK_EQ(ty__codec_decode(L, ok, sizeof(ok) - 1, err, sizeof(err)), 1);
  CHECK_EQ(count_keys(1), 0);
  return 0;
}

TEST_IMPL(codec_append_and_concat) {
  run_lua("return 1, 'a', {x = 1}");
  ty__buf_reset(&B);
  CHECK_EQ(ty__codec_encode(L, 1, 2, &B, SIZE_MAX, err, sizeof(err)), 0);
  CHECK_EQ(ty__codec_encode(L, 3, 1, &B, SIZE_MAX, err, sizeof(err)), 0);
  CHECK_EQ(ty__codec_decode(L, B.data, B.len, err, sizeof(err)), 3);
  CHECK(list_eq(1, 4, 3));
  size_t cap = B.cap;
  ty__buf_reset(&B);
  CHECK(B.len == 0 && B.cap == cap);
  /* Growth is geometric: a large message takes few reallocations. */
  run_lua("return ('z'):rep(1000000)");
  CHECK_EQ(ty__codec_encode(L, -1, 1, &B, SIZE_MAX, err, sizeof(err)), 0);
  CHECK(B.cap >= B.len && B.cap < 4 * B.len);
  return 0;
}

TEST_IMPL(codec_many_values) {
  static char nils[20000];
  /* A C function may hold LUAI_MAXCSTACK (8000) slots; past that, decode
   * refuses instead of raising a stack overflow. */
  CHECK_EQ(ty__codec_decode(L, nils, 1000, err, sizeof(err)), 1000);
  lua_settop(L, 0);
  CHECK_EQ(ty__codec_decode(L, nils, sizeof(nils), err, sizeof(err)), -1);
  CHECK(strstr(err, "too many values") != NULL);
  CHECK_EQ(lua_gettop(L), 0);
  return 0;
}

/* ---- speed (printed, not asserted) --------------------------------------- */

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* One timed loop of `what` (0 encode, 1 decode, 2 both, 3 copy) over the n
 * values at 1..n; returns ns per iteration. */
static double bench_loop(int what, int n, long iters) {
  double t0 = now_ns();
  for (long i = 0; i < iters; i++) {
    if (what != 1) {
      if (what == 3) {
        ty__codec_copy(L, 1, n, SIZE_MAX, err, sizeof(err));
        lua_settop(L, n);
        continue;
      }
      ty__buf_reset(&B);
      ty__codec_encode(L, 1, n, &B, SIZE_MAX, err, sizeof(err));
    }
    if (what != 0) {
      ty__codec_decode(L, B.data, B.len, err, sizeof(err));
      lua_settop(L, n);
    }
  }
  return (now_ns() - t0) / (double)iters;
}

static void bench(const char *name, const char *code) {
  long iters = test_scaled(1000000, 20000);
  int n = run_lua(code);
  bench_loop(2, n, iters / 10); /* warm up (and fill B for decode) */
  double enc = bench_loop(0, n, iters), dec = bench_loop(1, n, iters);
  double both = bench_loop(2, n, iters), copy = bench_loop(3, n, iters);
  printf("bench %-16s %3zu bytes  encode+decode %6.1f ns  (encode %.1f, "
         "decode %.1f)  copy %6.1f ns\n",
         name, B.len, both, enc, dec, copy);
  lua_settop(L, 0);
}

/* ---- runner -------------------------------------------------------------- */

#define CODEC_TESTS(X)                                                         \
  X(codec_scalars)                                                             \
  X(codec_binary_strings)                                                      \
  X(codec_nils)                                                                \
  X(codec_tables)                                                              \
  X(codec_depth)                                                               \
  X(codec_errors)                                                              \
  X(codec_size_limit)                                                          \
  X(codec_shared_subtable)                                                     \
  X(codec_random)                                                              \
  X(codec_corrupt)                                                             \
  X(codec_decode_errors)                                                       \
  X(codec_append_and_concat)                                                   \
  X(codec_many_values)                                                         \
  X(codec_null)

#define ENTRY(name) {#name, test_##name},
static const struct {
  const char *name;
  int (*fn)(void);
} tests[] = {CODEC_TESTS(ENTRY)};

static lua_State *new_state(void) {
  lua_State *s = luaL_newstate();
  if (!s) {
    fprintf(stderr, "cannot create a Lua state\n");
    exit(2);
  }
  luaL_openlibs(s);
  return s;
}

int main(int argc, char **argv) {
  int passed = 0, failed = 0;
  setvbuf(stdout, NULL, _IOLBF, 0); /* keep results and CHECK output in order */
  for (size_t i = 0; i < ty__countof(tests); i++) {
    if (argc > 1 && strcmp(argv[1], tests[i].name) != 0) continue;
    L = new_state();
    ty__buf_init(&B);
    int rc = tests[i].fn();
    lua_close(L);
    ty__buf_free(&B);
    printf("%s %s\n", rc == 0 ? "ok  " : "FAIL", tests[i].name);
    rc == 0 ? passed++ : failed++;
  }
  printf("%d passed, %d failed\n", passed, failed);
  if (failed == 0 && argc == 1 && !getenv("TY_CODEC_NOBENCH")) {
    L = new_state();
    ty__buf_init(&B);
    bench("2 small integers", "return 1, 2");
    bench("4-field table",
          "return {id = 42, name = 'alice', ok = true, score = 3.5}");
    lua_close(L);
    ty__buf_free(&B);
  }
  return failed ? 1 : 0;
}
