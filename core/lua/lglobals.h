/*
 * lglobals.h - debug mode's check of globals (lglobals.c), API floor.
 */
#ifndef TY_LGLOBALS_H
#define TY_LGLOBALS_H

#include <lua.h>

/* Adds its functions to the table on top of L (core/cmd/module.c). */
void lt_open_globals(lua_State *L);

#endif
