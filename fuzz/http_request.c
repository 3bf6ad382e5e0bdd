/*
 * http_request.c - libFuzzer target for tycho.http's request path without
 * sockets: llhttp, lhttp_parse.c, the request table and the responses, driven
 * through the same `_http` functions lua/tycho/http.lua calls (feed, respond,
 * takeover, expired).
 *
 * Input: byte 0 picks the limits (bit 0: small ones, so that 431 and 413
 * are reached) and byte 1 seeds the splits and the answers; the rest is what
 * a client sends. It is parsed twice: A in one piece, each request answered
 * "ok"; B in pieces of random sizes, each request answered at random (a
 * response, a handler error, a non-response, a takeover of an upgrade).
 * Besides not crashing (ASan, UBSan), the requests both runs get must be the
 * same, in the same order (the splits must not change what is parsed), no
 * header value may hold CR or LF, every output must be responses, and the
 * parser may hold no more than its limits allow.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "net/lhttp.h"

#define REQUIRE(cond)                                                          \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "fuzz http_request: %s failed (line %d)\n", #cond,       \
              __LINE__);                                                       \
      abort();                                                                 \
    }                                                                          \
  } while (0)

#define MAX_REQS 64
#define SMALL_HEAD 256

static lua_State *L;
static int http_ref; /* the _http table */

typedef struct run {
  char *reqs[MAX_REQS]; /* each request, serialized */
  int n;
  int status; /* the error response that ended it (0: none) */
  bool closed, all_in;
} run;

static uint32_t rnd(uint32_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 17;
  *s ^= *s << 5;
  return *s;
}

/* Pushes _http[name]. */
static void fn(const char *name) {
  lua_rawgeti(L, LUA_REGISTRYINDEX, http_ref);
  lua_getfield(L, -1, name);
  lua_remove(L, -2);
}

/* Appends the fields of the table at idx, sorted, to buf. */
static void put_fields(luaL_Buffer *b, int idx) {
  lua_getglobal(L, "__fields");
  lua_pushvalue(L, idx);
  lua_call(L, 1, 1);
  luaL_addvalue(b);
}

/* The request table at ri, serialized. */
static char *serialize(int ri) {
  static const char *const keys[] = {"method",  "path", "query",
                                     "version", "body", "upgrade"};
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
    lua_getfield(L, ri, keys[i]);
    lua_pushfstring(L, "%s=", keys[i]);
    luaL_addvalue(&b);
    if (lua_type(L, -1) == LUA_TSTRING) {
      luaL_addvalue(&b);
    } else {
      luaL_addstring(&b, lua_toboolean(L, -1) ? "true" : "nil");
      lua_pop(L, 1);
    }
    luaL_addchar(&b, '\n');
  }
  lua_getfield(L, ri, "headers");
  REQUIRE(lua_istable(L, -1));
  int h = lua_gettop(L);
  put_fields(&b, h);
  lua_pop(L, 1);
  lua_getfield(L, ri, "trailers");
  if (lua_istable(L, -1)) {
    int t = lua_gettop(L);
    put_fields(&b, t);
  }
  lua_pop(L, 1);
  luaL_pushresult(&b);
  char *s = strdup(lua_tostring(L, -1));
  lua_pop(L, 1);
  return s;
}

static void check_out(int idx) {
  if (lua_isnil(L, idx)) return;
  size_t n;
  const char *s = lua_tolstring(L, idx, &n);
  REQUIRE(s && n >= 12 && memcmp(s, "HTTP/1.1 ", 9) == 0);
}

static int status_of(int idx) {
  const char *s = lua_tostring(L, idx);
  return s ? atoi(s + 9) : 0;
}

/* Answers the request at top-1 (req) as B does, or "ok" (plain). Returns
 * the number of results pushed by respond (out, req, ...), or 0 after a
 * takeover (the connection is the handler's). */
static int answer(bool plain, uint32_t *seed, int p, int req) {
  uint32_t pick = plain ? 0 : rnd(seed) % 6;
  lua_getfield(L, req, "upgrade");
  bool upgrade = lua_toboolean(L, -1);
  lua_pop(L, 1);
  if (pick == 5 && upgrade) {
    fn("takeover");
    lua_pushvalue(L, p);
    lua_call(L, 1, 1);
    check_out(-1);
    lua_pop(L, 1);
    return 0;
  }
  int top = lua_gettop(L);
  fn("respond");
  lua_pushvalue(L, p);
  switch (pick) {
  case 1: /* a handler error */
    lua_pushboolean(L, 0);
    lua_pushliteral(L, "boom");
    break;
  case 2: /* a table with headers, one closing the connection */
    lua_pushboolean(L, 1);
    lua_createtable(L, 0, 3);
    lua_pushinteger(L, 200 + (int)(rnd(seed) % 400));
    lua_setfield(L, -2, "status");
    lua_createtable(L, 0, 2);
    lua_pushliteral(L, "v");
    lua_setfield(L, -2, "X-A");
    if (rnd(seed) % 4 == 0) {
      lua_pushliteral(L, "close");
      lua_setfield(L, -2, "Connection");
    }
    lua_setfield(L, -2, "headers");
    lua_pushliteral(L, "body");
    lua_setfield(L, -2, "body");
    break;
  case 3: /* not a response */
    lua_pushboolean(L, 1);
    lua_pushcfunction(L, luaopen_base);
    break;
  case 4: /* status, body */
    lua_pushboolean(L, 1);
    lua_pushinteger(L, 204);
    lua_pushliteral(L, "x");
    break;
  default:
    lua_pushboolean(L, 1);
    lua_pushliteral(L, "ok");
    break;
  }
  lua_call(L, lua_gettop(L) - top - 1, LUA_MULTRET);
  return lua_gettop(L) - top;
}

/* Feeds data in pieces (piece 0: all at once). */
static void drive(run *r, int cfg, const char *data, size_t len, bool plain,
                  uint32_t seed, size_t max_head) {
  fn("parser");
  lua_pushvalue(L, cfg);
  lua_call(L, 1, 1);
  int p = lua_gettop(L);
  size_t pos = 0, most_piece = 0;
  while (pos < len && !r->closed) {
    size_t piece = plain ? len - pos : 1 + rnd(&seed) % 64;
    if (piece > len - pos) piece = len - pos;
    if (piece > most_piece) most_piece = piece;
    int top = lua_gettop(L);
    fn("feed");
    lua_pushvalue(L, p);
    lua_pushlstring(L, data + pos, piece);
    lua_call(L, 2, LUA_MULTRET);
    pos += piece;
    int from_feed = 1; /* an error here is the parser's */
    for (;;) {
      check_out(top + 1);
      int kind = lua_type(L, top + 2);
      if (kind == LUA_TBOOLEAN) { /* false: the connection ends */
        if (from_feed && !lua_isnil(L, top + 1)) r->status = status_of(top + 1);
        r->closed = true;
        break;
      }
      if (kind != LUA_TTABLE) break; /* more bytes needed */
      int req = top + 2;
      if (r->n < MAX_REQS) r->reqs[r->n++] = serialize(req);
      int got = answer(plain, &seed, p, req);
      if (!got) {
        r->closed = true; /* taken over */
        break;
      }
      /* respond's results (out, req, ...) replace the previous ones; each
       * slot written was read already. */
      int first = lua_gettop(L) - got + 1;
      for (int i = 0; i < got; i++) {
        lua_pushvalue(L, first + i);
        lua_replace(L, top + 1 + i);
      }
      lua_settop(L, top + got);
      from_feed = 0;
    }
    lua_settop(L, top);
    /* Only the head, the trailers and what one feed brought stay. */
    fn("buffered");
    lua_pushvalue(L, p);
    lua_call(L, 1, 1);
    REQUIRE((size_t)lua_tointeger(L, -1) <= 2 * max_head + 2 * most_piece + 64);
    lua_pop(L, 1);
  }
  r->all_in = pos >= len && !r->closed;
  if (r->all_in) { /* a read timeout now */
    fn("expired");
    lua_pushvalue(L, p);
    lua_call(L, 1, 1);
    check_out(-1);
    lua_pop(L, 1);
  }
  lua_settop(L, p - 1);
}

static void init(void) {
  L = luaL_newstate();
  REQUIRE(L);
  luaL_openlibs(L);
  lua_newtable(L);
  lt_open_http(L);
  lua_getfield(L, -1, "_http");
  http_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  lua_pop(L, 1);
  /* Fields of a headers table, sorted: "name: value" lines; no CR or LF in
   * a value, names lower-case tokens. */
  REQUIRE(luaL_dostring(
              L,
              "function __fields(t) local k = {} "
              "for n, v in pairs(t) do "
              "  assert(not v:find('[\\r\\n]'), 'CR or LF in a value') "
              "  assert(n == n:lower() and not n:find('[%s:]'), 'bad name') "
              "  k[#k + 1] = n .. ': ' .. v end "
              "table.sort(k) return table.concat(k, '\\n') .. '\\n' end") == 0);
}

static void free_run(run *r) {
  for (int i = 0; i < r->n; i++) free(r->reqs[i]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!L) init();
  if (size < 2) return 0;
  bool small = data[0] & 1;
  uint32_t seed = 0x9e3779b9u ^ data[1] ^ ((uint32_t)size << 8);
  const char *s = (const char *)data + 2;
  size_t n = size - 2;

  fn("config");
  lua_createtable(L, 0, 3);
  if (small) {
    lua_pushinteger(L, SMALL_HEAD);
    lua_setfield(L, -2, "max_header_size");
    lua_pushinteger(L, 8);
    lua_setfield(L, -2, "max_headers");
    lua_pushinteger(L, 64);
    lua_setfield(L, -2, "max_body_size");
  }
  lua_call(L, 1, 1);
  int cfg = lua_gettop(L);
  size_t max_head = small ? SMALL_HEAD : 32768;

  run a = {0}, b = {0};
  drive(&a, cfg, s, n, true, seed, max_head);
  drive(&b, cfg, s, n, false, seed, max_head);
  int k = a.n < b.n ? a.n : b.n;
  for (int i = 0; i < k; i++) {
    if (strcmp(a.reqs[i], b.reqs[i]) != 0) {
      fprintf(stderr, "request %d differs:\n--- whole\n%s--- split\n%s", i,
              a.reqs[i], b.reqs[i]);
      abort();
    }
  }
  /* Both read everything: the same requests. Both refused the same
   * request: the same status, but for 431 (the bytes between a head's
   * fields are counted when more are needed, so a split may meet the limit
   * first). */
  if (a.all_in && b.all_in) REQUIRE(a.n == b.n);
  if (a.status && b.status && a.n == b.n && a.status != 431 && b.status != 431)
    REQUIRE(a.status == b.status);
  free_run(&a);
  free_run(&b);
  lua_settop(L, 0);
  /* Parsers free their buffers in __gc: collect now, so LeakSanitizer does
   * not take memory held by the (unscanned) Lua heap for a leak. */
  lua_gc(L, LUA_GCCOLLECT, 0);
  return 0;
}
