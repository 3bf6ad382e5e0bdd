/*
 * lpool.h - the Lua side of the blocking pool (lpool.c): what the rest of
 * the binding calls. tycho.blocking, tycho.resolve, tycho.pool_config and
 * tycho.pool_stats themselves are added by lt_open_pool.
 */
#ifndef TY_LPOOL_H
#define TY_LPOOL_H

#include <stdbool.h>

#include <lua.h>

#include "sched/ty.h"

/* For tycho.config: handles the option `key` (pool_max, pool_queue,
 * pool_idle) with its value at idx and returns true, or returns false for a
 * key that is not a pool option. Raises on a bad value. */
bool lt_pool_config_field(lua_State *L, const char *key, int idx);

/* Pushes {threads=, idle=, queued=, completed=, rejected=} of the running
 * pool (all 0 when none runs). Any thread. */
void lt_pool_stats_push(lua_State *L);

/* Shuts the pool down (cancels queued jobs, waits for running ones, joins
 * every thread). Idempotent: the pool shuts itself down when the runtime's
 * workers close their Lua states (lpool.c); run_main calls it too, for a
 * stop that abandoned every worker. Not from a worker mid-resume nor a pool
 * thread; before ty_runtime_free. */
/* Shuts the run's pool down, waiting for running jobs until the stop's
 * deadline (lt_ctx.stop_deadline_ns; none outside a stop): threads whose job
 * has not returned by then are left to it (pool.h). Returns how many. */
int lt_pool_shutdown(void);
/* How many pool threads shutdowns left behind since the last call. */
int lt_pool_left(void);

/*
 * Starts resolving `host` on the pool; the answer comes to actor `to` as a
 * message carrying `ref`: LT_REPLY with one string (the first address,
 * "1.2.3.4" or "::1") or LT_REPLY_ERR with the resolver's message. family:
 * AF_UNSPEC, AF_INET or AF_INET6. Returns 0, -EAGAIN (pool busy) or
 * -ESHUTDOWN. For a C API function that then waits with lt_yield_reply
 * (tycho.tcp.connect on a host name).
 */
int lt_pool_resolve_start(ty_pid to, uint64_t ref, const char *host,
                          int family);

/* Adds blocking, resolve, pool_config and pool_stats to the table on top
 * of L. */
void lt_open_pool(lua_State *L);

#endif
