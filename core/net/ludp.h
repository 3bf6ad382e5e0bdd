/*
 * ludp.h - tycho.udp (ludp.c): datagram sockets on the worker's I/O backend.
 */
#ifndef TY_LUDP_H
#define TY_LUDP_H

#include "lnet.h"

/* Adds the udp table (bind) to the table on top of L. */
void lt_open_udp(lua_State *L);

#endif
