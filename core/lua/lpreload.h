/*
 * lpreload.h - modules every worker state loads (lpreload.c).
 */
#ifndef TY_LPRELOAD_H
#define TY_LPRELOAD_H

#include <lauxlib.h>
#include <lua.h>

/* Before an actor starts on this worker: requires, in L, the modules
 * published since this state last looked. */
void lt_preload_sync(lua_State *L);
/* Adds _everywhere to the table on top of L. */
void lt_open_preload(lua_State *L);

#endif
