/*
 * llog.h - tycho.log's C half (llog.c), API floor.
 */
#ifndef TY_LLOG_H
#define TY_LLOG_H

#include <lua.h>

/* Adds its functions to the table on top of L (core/cmd/module.c). */
void lt_open_log(lua_State *L);

#endif
