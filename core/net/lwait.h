/*
 * lwait.h - waits for Lua drivers of foreign protocol libraries (lwait.c):
 * a descriptor's readiness in the worker's reactor, a wake-up between
 * actors of one worker, and a lease that notices its actor's death.
 */
#ifndef TY_LWAIT_H
#define TY_LWAIT_H

#include "lnet.h"

/* Adds _fdwait, _fdcancel, _waiter, _lease, _quiet_notice, _pg_count and
 * _pg_names to the table on top of L. */
void lt_open_wait(lua_State *L);

#endif
