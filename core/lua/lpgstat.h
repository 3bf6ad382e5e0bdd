/*
 * lpgstat.h - tycho.pg's pool figures (lpgstat.c).
 */
#ifndef TY_LPGSTAT_H
#define TY_LPGSTAT_H

#include <lua.h>

/* core._pg_count(i, delta): adds delta to figure i (1-based). */
int lt_pg_count(lua_State *L);
/* core._pg_names() -> the figures' names, in order. */
int lt_pg_names(lua_State *L);
/* Pushes the figures as a table (tycho.stats().pg). */
void lt_pg_stats_push(lua_State *L);

#endif
