/*
 * lpgstat.c - tycho.pg's pool figures, summed over every worker's pools
 * (lua/tycho/pg_pool.lua counts through core._pg_count); tycho.stats().pg
 * and /metrics show them.
 */
#include <lauxlib.h>
#include <stdatomic.h>
#include <stdint.h>

#include "lpgstat.h"

static const char *const pg_names[] = {"pools",     "size",          "open",
                                       "idle",      "waiting",       "acquired",
                                       "waits",     "timeouts",      "reaped",
                                       "discarded", "connect_errors"};
#define PG_N (sizeof pg_names / sizeof *pg_names)
/* Relaxed: each is a figure on its own, read for display; nothing else is
 * published through them. */
static _Atomic int64_t pg_figures[PG_N];

/* core._pg_count(i, delta): figure i (1-based, in pg_names' order). */
int lt_pg_count(lua_State *L) {
  lua_Integer i = luaL_checkinteger(L, 1);
  lua_Integer d = luaL_checkinteger(L, 2);
  luaL_argcheck(L, i >= 1 && i <= (lua_Integer)PG_N, 1, "no such figure");
  atomic_fetch_add_explicit(&pg_figures[i - 1], (int64_t)d,
                            memory_order_relaxed);
  return 0;
}

/* core._pg_names() -> { "pools", "size", ... } */
int lt_pg_names(lua_State *L) {
  lua_createtable(L, (int)PG_N, 0);
  for (size_t i = 0; i < PG_N; i++) {
    lua_pushstring(L, pg_names[i]);
    lua_rawseti(L, -2, (int)i + 1);
  }
  return 1;
}

void lt_pg_stats_push(lua_State *L) {
  lua_createtable(L, 0, (int)PG_N);
  for (size_t i = 0; i < PG_N; i++) {
    lua_pushnumber(L, (lua_Number)atomic_load_explicit(&pg_figures[i],
                                                       memory_order_relaxed));
    lua_setfield(L, -2, pg_names[i]);
  }
}
