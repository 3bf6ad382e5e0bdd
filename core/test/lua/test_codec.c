/*
 * test_codec.c - tests of the message codec (core/lua/codec.c), built by
 * make as build/tycho-lua-tests (it links LuaJIT; the core's tests do not)
 * and run by make test, make asan and make tsan. This file is the harness:
 * the helpers (codec_test.h), the speed loop and the runner; the tests are
 * in test_codec_cases.c.
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
#include "codec_test.h"
#include "lua/codec.h"

/* The runner gives each test these fresh (main, below). */
lua_State *L;
ty__buf B;
/* Scratch for the codec's messages, read only by the function whose call
 * wrote it (test_codec_cases.c has its own). */
static char err[512];
static uint64_t rng = 0x9E3779B97F4A7C15ull;

/* ---- helpers ------------------------------------------------------------- */

/* Runs Lua code, leaving its results on the stack; returns how many. */
int run_lua(const char *code) {
  int top = lua_gettop(L);
  if (luaL_loadstring(L, code) || lua_pcall(L, 0, LUA_MULTRET, 0)) {
    fprintf(stderr, "lua error: %s\n", lua_tostring(L, -1));
    exit(2);
  }
  return lua_gettop(L) - top;
}

unsigned rnd(unsigned n) { return (unsigned)(ty__rand_next(&rng) >> 32) % n; }

/* NaN equals NaN and -0.0 differs from 0.0: the codec must keep both. */
bool num_eq(lua_Number x, lua_Number y) {
  if (isnan(x) || isnan(y)) return isnan(x) && isnan(y);
  return x == y && !signbit(x) == !signbit(y);
}

int count_keys(int t) {
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
  if (depth > 2 * LT_CODEC_MAX_DEPTH) return false;
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
bool deq(int a, int b, int depth) {
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

bool list_eq(int a, int b, int n) {
  for (int i = 0; i < n; i++)
    if (!deq(a + i, b + i, 0)) return false;
  return true;
}

/* Encodes+decodes and copies the n values at first, checks both against the
 * originals and against each other; leaves the stack as it was. */
int check_roundtrip(int first, int n) {
  int top = lua_gettop(L);
  size_t start = B.len;
  CHECK_EQ(lt_codec_encode(L, first, n, &B, SIZE_MAX, err, sizeof(err)), 0);
  CHECK_EQ(lua_gettop(L), top);
  CHECK_EQ(lt_codec_decode(L, B.data + start, B.len - start, err, sizeof(err)),
           n);
  CHECK(list_eq(first, top + 1, n));
  CHECK_EQ(lt_codec_copy(L, first, n, SIZE_MAX, err, sizeof(err)), n);
  CHECK_EQ(lua_gettop(L), top + 2 * n);
  CHECK(list_eq(first, top + n + 1, n));
  CHECK(list_eq(top + 1, top + n + 1, n));
  lua_settop(L, top);
  return 0;
}

/* Both encode and copy fail with exactly `want`, leaving the stack and the
 * buffer (pre-filled, to see that nothing is appended) as they were. */
int check_error(int first, int n, const char *want) {
  int top = lua_gettop(L);
  ty__buf_reset(&B);
  lua_pushliteral(L, "prefix");
  CHECK_EQ(lt_codec_encode(L, -1, 1, &B, SIZE_MAX, err, sizeof(err)), 0);
  lua_pop(L, 1);
  size_t len = B.len;
  CHECK_EQ(lt_codec_encode(L, first, n, &B, SIZE_MAX, err, sizeof(err)), -1);
  if (strcmp(err, want) != 0) {
    fprintf(stderr, "encode error:\n  got  %s\n  want %s\n", err, want);
    return 1;
  }
  CHECK_EQ(B.len, len);
  CHECK_EQ(lua_gettop(L), top);
  CHECK_EQ(lt_codec_copy(L, first, n, SIZE_MAX, err, sizeof(err)), -1);
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
int check_decode_safe(const char *data, size_t len) {
  int top = lua_gettop(L);
  char *copy = malloc(len ? len : 1);
  memcpy(copy, data, len);
  int n = lt_codec_decode(L, copy, len, err, sizeof(err));
  free(copy);
  if (n < 0) {
    CHECK_EQ(lua_gettop(L), top);
    CHECK(err[0] != '\0');
    return 0;
  }
  CHECK_EQ(lua_gettop(L), top + n);
  ty__buf b;
  ty__buf_init(&b);
  int rc = lt_codec_encode(L, top + 1, n, &b, SIZE_MAX, err, sizeof(err));
  ty__buf_free(&b);
  CHECK_EQ(rc, 0);
  lua_settop(L, top);
  return 0;
}

int check_corruptions(const char *data, size_t len) {
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

void gen_table(int depth) {
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
void gen_value(int depth, bool allow_nil) {
  unsigned r = rnd(10);
  if (r < 3 && depth < 6 && rnd((unsigned)depth + 1) == 0) gen_table(depth);
  else if (r == 3 && rnd(3) == 0) lua_pushlightuserdata(L, NULL); /* null */
  else if (r == 3) allow_nil ? lua_pushnil(L) : lua_pushboolean(L, 0);
  else if (r == 4) lua_pushboolean(L, rnd(2));
  else if (r < 7) gen_number(false);
  else gen_string();
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
        lt_codec_copy(L, 1, n, SIZE_MAX, err, sizeof(err));
        lua_settop(L, n);
        continue;
      }
      ty__buf_reset(&B);
      lt_codec_encode(L, 1, n, &B, SIZE_MAX, err, sizeof(err));
    }
    if (what != 0) {
      lt_codec_decode(L, B.data, B.len, err, sizeof(err));
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

/* The tests themselves are in test_codec_cases.c. */
#define DECLARE(name) TEST_IMPL(name);
CODEC_TESTS(DECLARE)

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
