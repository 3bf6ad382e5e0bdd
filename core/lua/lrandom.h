/*
 * lrandom.h - tycho.random_bytes and math.random's seeds (lrandom.c).
 */
#ifndef TY_LRANDOM_H
#define TY_LRANDOM_H

#include <stdbool.h>

#include <lua.h>

void lt_open_random(lua_State *L);
/* Seeds L's math.random: from getrandom, or from tycho.config's seed
 * mixed with `which` (a worker's number, ...). only_fixed: only when a
 * seed is configured (a borrowed state keeps what its owner chose). */
void lt_random_seed_state(lua_State *L, unsigned which, bool only_fixed);
/* tycho.config's `seed` field: true when k is it (raises on a bad value). */
bool lt_random_config_field(lua_State *L, const char *k, int idx);

#endif
