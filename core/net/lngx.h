/*
 * lngx.h - the C half of tycho.ngx: OpenResty's ngx helpers (lngx.c) and
 * ngx.re on PCRE2 (lngx_re.c).
 */
#ifndef TY_LNGX_H
#define TY_LNGX_H

#include "lua/lapi.h"

/* Adds _ngx (md5 ... log, and re) to the table on top of L. */
void lt_open_ngx(lua_State *L);
/* Adds re = {find, match, gsub, sub} to the table on top of L. */
void lt_ngx_re_register(lua_State *L);
/* Adds crc32, hmac_sha1, worker_id ... (lngx_util.c) to the table on top. */
void lt_ngx_util_register(lua_State *L);
/* Turns the error message on top into nil, msg (2) / nil, nil, msg (3). */
int lt_ngx_fail(lua_State *L);
int lt_ngx_fail3(lua_State *L);

#endif
