/*
 * lhttp.h - the C half of tycho.http: an llhttp parser per
 * connection that turns received bytes into request tables, a response
 * serializer, and the process-wide connection gauges of servers.
 */
#ifndef TY_LHTTP_H
#define TY_LHTTP_H

#include "lua/lapi.h"

/* Adds the table `_http` (the functions lua/tycho/http.lua builds on) to
 * the tycho.core table on top of L. */
void lt_open_http(lua_State *L);

#endif
