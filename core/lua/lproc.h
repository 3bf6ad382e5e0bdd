/*
 * lproc.h - time, forks, names, links, monitors, exits (lproc.c), API floor.
 */
#ifndef TY_LPROC_H
#define TY_LPROC_H

#include <lua.h>

/* Adds its functions to the table on top of L (core/cmd/module.c). */
void lt_open_proc(lua_State *L);

#endif
