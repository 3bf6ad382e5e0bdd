/*
 * lapi.h - what the Lua API functions share (lapi.c: spawn and messages;
 * lproc.c: time, forks, names, links, monitors, exits; and the network and
 * pool glue, which block the same way).
 */
#ifndef TY_LAPI_H
#define TY_LAPI_H

#include "lactor.h"
#include "lexit.h"
#include "lpreempt.h"
#include "lsend.h"
#include "ltrace.h"

/* The running actor (or fork) of a C API function. */
typedef struct lt_cur {
  ty_actor *a;
  lt_actor *la;
} lt_cur;

/* Raises "must be called from inside an actor" outside one. */
lt_cur lt_current(lua_State *L, const char *fname);
/* The same, for functions that block: the caller must be the actor's own
 * coroutine (a yield from a coroutine the script made would go to that
 * coroutine's resumer). */
lt_cur lt_current_blocking(lua_State *L, const char *fname);
/* This actor's pid (a fork answers with its actor's). */
ty_pid lt_self_pid(lt_cur c);
/* A pid or a registered name at idx; 0 when the name is unknown. Raises on
 * anything else. */
ty_pid lt_check_dest(lua_State *L, int idx, const char *fname);
/* Seconds -> nanoseconds; nil -> -1 (no timeout). Raises on bad values. */
int64_t lt_opt_timeout(lua_State *L, int idx, const char *fname);
/* Pushes nil, token; returns 2. */
int lt_push_fail(lua_State *L, const char *token);
/* Records what the actor waits for and arms the core's wait. */
void lt_wait_for(lt_cur c, int what, int64_t timeout_ns, uint64_t ref);
/* A spawn request for the function (or module name) at fidx with the
 * arguments at first..top, copied now; NULL when memory runs out. */
lt_actor *lt_spawn_request(lua_State *L, int fidx, int first,
                           const char *fname);
/* The same for a blob found already (kind LT_FN_BYTECODE or LT_FN_MODULE);
 * NULL when memory runs out. */
lt_actor *lt_spawn_request_fn(lua_State *L, lt_fn *fn, int kind, int first,
                              const char *fname);
/* From a C API function: yield until a reply (LT_REPLY / LT_REPLY_ERR) with
 * `ref` arrives or timeout_ns passes (-1: never); the function's results are
 * then the reply's values, or nil + error token ("timeout" on timeout). */
int lt_yield_reply(lua_State *L, const char *fname, uint64_t ref,
                   int64_t timeout_ns);
/* From a C API function: yield in an LT_W_EXT wait. (The caller sets
 * la->ext_cancel itself, after the call returns the yield.) */
int lt_yield_ext(lua_State *L, const char *fname, lt_ext_wake_fn wake,
                 void *ctx, int64_t timeout_ns);

/* Adds spawn, send, recv, call... to the table on top of L. */
void lt_open_api(lua_State *L);
#endif
