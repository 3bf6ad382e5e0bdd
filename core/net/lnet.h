/*
 * lnet.h - what the network bindings share (lnet.c): error tokens,
 * addresses, timeouts, metatables; and the opener of the net fields.
 */
#ifndef TY_LNET_H
#define TY_LNET_H

#include <sys/socket.h>

#include "io/io.h"
#include "lua/lactor.h"

/* The stable token for an errno (either sign): "timeout", "refused",
 * "reset", "closed", "unreachable", "addrinuse", ... */
const char *lt_net_errtok(int err);
/* Fills ss from a host ("localhost", "*", numeric IPv4 or IPv6; NULL: the
 * wildcard) and a port. Returns 0 or -1 (not a host this version resolves). */
int lt_net_addr(const char *host, int port, struct sockaddr_storage *ss,
                socklen_t *len);
/* Pushes the numeric host and the port of sa; returns 2. */
int lt_net_push_addr(lua_State *L, const struct sockaddr_storage *sa);
/* Timeout argument in seconds: nil -> def; a negative number or math.huge
 * -> -1 (none). Returns nanoseconds. */
int64_t lt_net_timeout(lua_State *L, int idx, int64_t def, const char *fname);
/* The running actor, which must be calling from its own coroutine (the one
 * that may yield). Raises otherwise. */
ty_actor *lt_net_actor(lua_State *L, const char *fname);
/* Re-arms the running wait of a woken actor with what is left of its
 * deadline (for an LT_W_EXT wake function that keeps waiting). */
int lt_net_rewait(ty_actor *a, lt_actor *la);
/* Turns Nagle off on a connected socket. */
void lt_net_nodelay(int fd);
/* Creates the metatable `name` in L if missing (methods from `methods`,
 * __gc), and leaves it on the stack. */
void lt_net_metatable(lua_State *L, const char *name, const luaL_Reg *methods,
                      lua_CFunction gc, lua_CFunction tostring);

/* Adds tcp (and the private _set_nofile, _io_available) to the table on top
 * of L (lnet_open.c). */
void lt_open_net(lua_State *L);

#endif
