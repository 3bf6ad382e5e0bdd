/*
 * lchild.h - supervisors' spawns (lchild.c), API floor.
 */
#ifndef TY_LCHILD_H
#define TY_LCHILD_H

#include <lua.h>

/* Adds its functions to the table on top of L (core/cmd/module.c). */
void lt_open_child(lua_State *L);

#endif
