/*
 * lnet.c - tycho.tcp and the HTTP server's C half (not written yet: the
 * network I/O issue adds them).
 */
#include "ltycho.h"

void lt_open_net(lua_State *L) { (void)L; }
