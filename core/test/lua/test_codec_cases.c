/*
 * test_codec_cases.c - the message codec's tests (core/lua/codec.c): scalars,
 * strings, nils, tables, depth, errors, null, the size limit, shared
 * subtables, random values and corrupted bytes, malformed input. The
 * runner and the helpers are in test_codec.c (codec_test.h); every test
 * gets a fresh Lua state in L and an empty buffer in B.
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
#include "codec_test.h"
#include "lua/codec.h"

/* Scratch for the codec's messages, read only by the test that wrote it. */
static char err[512];

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
    CHECK_EQ(lt_codec_encode(L, 1, 1, &B, SIZE_MAX, err, sizeof(err)), 0);
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
  CHECK_EQ(lt_codec_encode(L, 1, 1, &B, SIZE_MAX, err, sizeof(err)), 0);
  CHECK_EQ(lt_codec_decode(L, B.data, B.len, err, sizeof(err)), 1);
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
  CHECK_EQ(lt_codec_decode(L, B.data, B.len, err, sizeof(err)), 4);
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
  CHECK_EQ(lt_codec_encode(L, 1, 3, &B, SIZE_MAX, err, sizeof(err)), 0);
  CHECK_EQ(lt_codec_decode(L, B.data, B.len, err, sizeof(err)), 3);
  CHECK(lua_isnil(L, 5) && lua_tonumber(L, 6) == 3);
  lua_settop(L, 0);
  run_lua("return nil, nil");
  CHECK(check_roundtrip(1, 2) == 0);
  lua_settop(L, 0);
  /* No values: no bytes, and no bytes decode to no values. */
  ty__buf_reset(&B);
  CHECK_EQ(lt_codec_encode(L, 1, 0, &B, SIZE_MAX, err, sizeof(err)), 0);
  CHECK_EQ(B.len, 0);
  CHECK_EQ(lt_codec_decode(L, NULL, 0, err, sizeof(err)), 0);
  CHECK_EQ(lt_codec_copy(L, 1, 0, SIZE_MAX, err, sizeof(err)), 0);
  /* Holes in arrays. */
  run_lua("return {1, nil, 3}, {nil, nil, 'x'}, {n = 3, nil, false}");
  CHECK(check_roundtrip(1, 3) == 0);
  ty__buf_reset(&B);
  CHECK_EQ(lt_codec_encode(L, 1, 1, &B, SIZE_MAX, err, sizeof(err)), 0);
  CHECK_EQ(lt_codec_decode(L, B.data, B.len, err, sizeof(err)), 1);
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
  CHECK_EQ(lt_codec_encode(L, 8, 1, &B, SIZE_MAX, err, sizeof(err)), 0);
  CHECK_EQ(lt_codec_decode(L, B.data, B.len, err, sizeof(err)), 1);
  CHECK_EQ(lt_codec_copy(L, 8, 1, SIZE_MAX, err, sizeof(err)), 1);
  CHECK(!lua_getmetatable(L, -1) && !lua_getmetatable(L, -2));
  /* Array order is kept: the copy of `back` has a real sequence. */
  lua_settop(L, 8);
  CHECK_EQ(lt_codec_copy(L, 6, 1, SIZE_MAX, err, sizeof(err)), 1);
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
  push_nested(LT_CODEC_MAX_DEPTH);
  CHECK(check_roundtrip(1, 1) == 0);
  lua_settop(L, 0);
  /* One more level fails, in a value and in a key. */
  push_nested(LT_CODEC_MAX_DEPTH + 1);
  ty__buf_reset(&B);
  CHECK_EQ(lt_codec_encode(L, 1, 1, &B, SIZE_MAX, err, sizeof(err)), -1);
  CHECK(strncmp(err,
                "cannot copy tables nested deeper than 100 levels (argument "
                "1, at [1][1][1]",
                70) == 0);
  CHECK(strstr(err, "...") != NULL); /* the 100-step path is cut */
  strcpy(want, err);
  CHECK(check_error(1, 1, want) == 0);
  lua_settop(L, 0);
  lua_newtable(L);
  push_nested(LT_CODEC_MAX_DEPTH);
  lua_pushboolean(L, 1);
  lua_rawset(L, 1);
  ty__buf_reset(&B);
  CHECK_EQ(lt_codec_encode(L, 1, 1, &B, SIZE_MAX, err, sizeof(err)), -1);
  CHECK(strncmp(err,
                "cannot copy tables nested deeper than 100 levels "
                "(argument 1, at <key>[1][1]",
                74) == 0);
  lua_settop(L, 0);
  /* Decode: 100 nested headers are fine, 101 are malformed. */
  static const char hdr[] = {0x06, 0x01, 0, 0, 0, 0};
  char bytes[6 * (LT_CODEC_MAX_DEPTH + 1) + 1];
  for (int i = 0; i <= LT_CODEC_MAX_DEPTH; i++) memcpy(bytes + 6 * i, hdr, 6);
  bytes[6 * (LT_CODEC_MAX_DEPTH + 1)] = 0x00;
  CHECK_EQ(lt_codec_decode(L, bytes + 6, sizeof(bytes) - 6, err, sizeof(err)),
           1);
  lua_settop(L, 0);
  CHECK_EQ(lt_codec_decode(L, bytes, sizeof(bytes), err, sizeof(err)), -1);
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
  CHECK_EQ(lt_codec_encode(L, 1, 1, &B, SIZE_MAX, err, sizeof(err)), 0);
  CHECK_EQ(B.len, 1);
  CHECK_EQ((unsigned char)B.data[0], 0x08);
  CHECK_EQ(lt_codec_decode(L, B.data, B.len, err, sizeof(err)), 1);
  CHECK(lua_type(L, 2) == LUA_TLIGHTUSERDATA && lua_touserdata(L, 2) == NULL);
  CHECK(lua_rawequal(L, 1, 2));
  lua_settop(L, 0);
  /* In arrays (where nil would be a hole), in hash values, nested. */
  lua_pushlightuserdata(L, NULL);
  lua_setglobal(L, "null");
  run_lua("return {1, null, 3, {x = null, y = {null, null}}}, null, 'z'");
  CHECK(check_roundtrip(1, 3) == 0);
  ty__buf_reset(&B);
  CHECK_EQ(lt_codec_encode(L, 1, 3, &B, SIZE_MAX, err, sizeof(err)), 0);
  CHECK_EQ(lt_codec_decode(L, B.data, B.len, err, sizeof(err)), 3);
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
  CHECK_EQ(lt_codec_decode(L, bytes, sizeof(bytes) - 1, err, sizeof(err)), 1);
  lua_rawgeti(L, 1, 1);
  CHECK(lua_type(L, -1) == LUA_TLIGHTUSERDATA && !lua_touserdata(L, -1));
  lt_codec_release(bytes, sizeof(bytes) - 1);
  return 0;
}

TEST_IMPL(codec_size_limit) {
  char want[512];
  run_lua("return {('x'):rep(1000)}");
  ty__buf_reset(&B);
  CHECK_EQ(lt_codec_encode(L, 1, 1, &B, SIZE_MAX, err, sizeof(err)), 0);
  size_t size = B.len;
  /* The limit counts this encoding only, not what the buffer held. */
  CHECK_EQ(lt_codec_encode(L, 1, 1, &B, size, err, sizeof(err)), 0);
  CHECK_EQ(B.len, 2 * size);
  CHECK_EQ(lt_codec_copy(L, 1, 1, size, err, sizeof(err)), 1);
  lua_settop(L, 1);
  CHECK_EQ(lt_codec_encode(L, 1, 1, &B, size - 1, err, sizeof(err)), -1);
  CHECK_EQ(B.len, 2 * size);
  snprintf(want, sizeof(want),
           "message of %zu+ bytes exceeds the limit of %zu bytes; raise it "
           "with tycho.config{max_message=...}",
           size, size - 1);
  CHECK(strcmp(err, want) == 0);
  CHECK_EQ(lt_codec_copy(L, 1, 1, size - 1, err, sizeof(err)), -1);
  CHECK(strcmp(err, want) == 0);
  CHECK_EQ(lua_gettop(L), 1);
  lua_settop(L, 0);
  /* Fail early: a big message stops near the limit instead of being built
   * whole (the buffer stays small, the reported size near the limit). */
  run_lua("local t = {} for i = 1, 200000 do t[i] = {i, 'v' .. i} end "
          "return t");
  ty__buf_free(&B);
  CHECK_EQ(lt_codec_encode(L, 1, 1, &B, 1000, err, sizeof(err)), -1);
  CHECK(B.cap <= 4096);
  size_t n = 0;
  CHECK(sscanf(err, "message of %zu+ bytes", &n) == 1);
  CHECK(n > 1000 && n < 1100);
  char enc_err[512];
  strcpy(enc_err, err);
  CHECK_EQ(lt_codec_copy(L, 1, 1, 1000, err, sizeof(err)), -1);
  CHECK(strcmp(err, enc_err) == 0);
  /* A limit of 0 admits only the empty message. */
  CHECK_EQ(lt_codec_encode(L, 1, 0, &B, 0, err, sizeof(err)), 0);
  lua_pushnil(L);
  CHECK_EQ(lt_codec_encode(L, 2, 1, &B, 0, err, sizeof(err)), -1);
  return 0;
}

TEST_IMPL(codec_shared_subtable) {
  /* Shared but not cyclic: each reference becomes its own copy. */
  run_lua("local s = {1, 2} return {a = s, b = s}, s");
  CHECK(check_roundtrip(1, 2) == 0);
  ty__buf_reset(&B);
  CHECK_EQ(lt_codec_encode(L, 1, 2, &B, SIZE_MAX, err, sizeof(err)), 0);
  CHECK_EQ(lt_codec_decode(L, B.data, B.len, err, sizeof(err)), 2);
  CHECK_EQ(lt_codec_copy(L, 1, 2, SIZE_MAX, err, sizeof(err)), 2);
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
    if (i % 10 == 0) push_nested(LT_CODEC_MAX_DEPTH);
    ty__buf_reset(&B);
    CHECK_EQ(lt_codec_encode(L, 1, lua_gettop(L), &B, SIZE_MAX, err,
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
  CHECK_EQ(lt_codec_decode(L, bytes, len, err, sizeof(err)), -1);
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
  CHECK_EQ(lt_codec_decode(L, ok, sizeof(ok) - 1, err, sizeof(err)), 1);
  CHECK_EQ(count_keys(1), 0);
  return 0;
}

TEST_IMPL(codec_append_and_concat) {
  run_lua("return 1, 'a', {x = 1}");
  ty__buf_reset(&B);
  CHECK_EQ(lt_codec_encode(L, 1, 2, &B, SIZE_MAX, err, sizeof(err)), 0);
  CHECK_EQ(lt_codec_encode(L, 3, 1, &B, SIZE_MAX, err, sizeof(err)), 0);
  CHECK_EQ(lt_codec_decode(L, B.data, B.len, err, sizeof(err)), 3);
  CHECK(list_eq(1, 4, 3));
  size_t cap = B.cap;
  ty__buf_reset(&B);
  CHECK(B.len == 0 && B.cap == cap);
  /* Growth is geometric: a large message takes few reallocations. */
  run_lua("return ('z'):rep(1000000)");
  CHECK_EQ(lt_codec_encode(L, -1, 1, &B, SIZE_MAX, err, sizeof(err)), 0);
  CHECK(B.cap >= B.len && B.cap < 4 * B.len);
  return 0;
}

TEST_IMPL(codec_many_values) {
  static char nils[20000];
  /* A C function may hold LUAI_MAXCSTACK (8000) slots; past that, decode
   * refuses instead of raising a stack overflow. */
  CHECK_EQ(lt_codec_decode(L, nils, 1000, err, sizeof(err)), 1000);
  lua_settop(L, 0);
  CHECK_EQ(lt_codec_decode(L, nils, sizeof(nils), err, sizeof(err)), -1);
  CHECK(strstr(err, "too many values") != NULL);
  CHECK_EQ(lua_gettop(L), 0);
  return 0;
}
