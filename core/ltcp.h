/*
 * ltcp.h - what lnet.c (the network module: helpers, handles in messages)
 * and ltcp.c (tycho.tcp: connections and listeners) share.
 */
#ifndef TY_LTCP_H
#define TY_LTCP_H

#include <sys/socket.h>

#include "io.h"
#include "ltycho.h"

#define LT_CONN_MT "tycho.tcp.conn"
#define LT_LISTENER_MT "tycho.tcp.listener"

/* A message kind (below the signals, unknown to lactor.c, which drops it
 * should recv meet it): wakes an actor waiting in an LT_W_EXT wait from
 * another worker; sent with ref UINT64_MAX, which that wait matches. */
#define LT_NUDGE 0xF0u

/* Kinds of handles that travel in messages. */
enum { LT_H_CONN = 1, LT_H_LISTENER = 2 };

/* ---- lnet.c ------------------------------------------------------------- */

/* The stable token for an errno (either sign): "timeout", "refused",
 * "reset", "closed", "unreachable", "addrinuse", ... */
const char *lt_net_errtok(int err);
/* Pushes nil, token; returns 2. */
int lt_net_fail(lua_State *L, const char *token);
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
/* Creates the metatable `name` in L if missing (methods from `methods`,
 * __gc), and leaves it on the stack. */
void lt_net_metatable(lua_State *L, const char *name, const luaL_Reg *methods,
                      lua_CFunction gc, lua_CFunction tostring);

/* The transit table: handles inside encoded messages, keyed by token. A
 * token is taken while encoding; the handle is put under it once the whole
 * encode succeeded, and taken out by the decode on the receiving side. */
uint64_t lt_transit_token(void);
void lt_transit_put(uint64_t token, int kind, void *p);
/* The handle under token, removed from the table; NULL if none. */
void *lt_transit_take(uint64_t token, int *kind);

/* ---- ltcp.c -------------------------------------------------------------- */

/* Pushes the tycho.tcp table. */
void lt_tcp_push(lua_State *L);
/* Makes sure L has the connection and listener metatables. */
void lt_tcp_metatables(lua_State *L);
/* Codec hooks (see codec.h), for userdata with one of our metatables. */
int lt_tcp_encode(lua_State *L, int idx, uint64_t *token, char *err,
                  size_t errlen);
int lt_tcp_decode(lua_State *L, uint64_t token);
void lt_tcp_encoded(lua_State *L, bool ok);
/* Releases a handle whose message was never decoded (runtime stopped). */
void lt_tcp_drop(int kind, void *p);
/* While set (this thread), decoding a handle drops it and pushes nil. */
extern _Thread_local bool lt_tcp_discarding;

/*
 * lt_net_discard - release the handles inside an encoded payload that will
 * never be decoded (its message reached no live actor, or its send failed):
 * connections close at once instead of when the runtime stops. Decodes into
 * L (on a worker) and drops what it pushed; cheap without handles.
 */
void lt_net_discard(lua_State *L, const char *data, size_t len);

#endif
