/*
 * module.h - the tycho.core module's opener (module.c).
 */
#ifndef TY_MODULE_H
#define TY_MODULE_H

#include <lua.h>

int luaopen_tycho_core(lua_State *L);

#endif
