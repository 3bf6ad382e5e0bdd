/*
 * lpool.c - tycho.blocking (not written yet: the blocking pool issue adds it).
 */
#include "ltycho.h"

void lt_open_pool(lua_State *L) { (void)L; }
