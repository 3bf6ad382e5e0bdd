/*
 * lmem.h - memory budgets (lmem.c): every Lua state of the runtime (one per
 * worker, one per pool thread) allocates through an accounting wrapper of
 * LuaJIT's own allocator, so the process knows what it holds and charges
 * each allocation to the actor (or blocking job) running at the time.
 *
 * What the budgets measure (docs/architecture.md, "Memory"):
 *   max_memory    the Lua heaps of every worker and pool state, plus the
 *                 messages queued in mailboxes, plus the C records of live
 *                 actors and spawn requests (and their arguments);
 *   actor_memory  what an actor allocated while it (or one of its forks)
 *                 ran, minus what was freed while it ran. A shared state has
 *                 no owner per object, so this is an estimate: the garbage
 *                 the collector frees while another actor runs is not
 *                 credited back.
 * Over a budget, the allocations charged to the actor that caused it fail:
 * LuaJIT raises "not enough memory" in it and the actor ends with reason
 * "memory" (lexit.c), however it handles the error. The runtime's own work
 * is never refused.
 */
#ifndef TY_LMEM_H
#define TY_LMEM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <lua.h>

#include "lctx.h"

/* Puts the accounting wrapper around L's allocator. A state whose own
 * wrapper goes around it (a worker's: lstate.c) calls lt_mem_alloc. */
void lt_mem_attach(lua_State *L, lt_heap *h);
void *lt_mem_alloc(lt_heap *h, void *p, size_t osize, size_t nsize);
/* The bytes of h's state that count (for a borrowed state: what it grew
 * by since it was attached), as tycho.stats shows them. */
static inline size_t lt_heap_counted(const lt_heap *h) {
  return h->used > h->base ? h->used - h->base : 0;
}
/* lt_mem_attach for a state the runtime borrows (the caller of tycho.run):
 * only what it grows by while attached counts in the process total. */
void lt_mem_attach_borrowed(lua_State *L, lt_heap *h);
/* Gives L its own allocator back: before lua_close, which must see it. */
void lt_mem_detach(lua_State *L, lt_heap *h);
/* Lets the worker see L's collection cycles end (a garbage table in a
 * weak one; looked at after runs under pressure, counted in h->epoch);
 * after luaL_openlibs. 0 or a lua_cpcall status. */
int lt_mem_watch(lua_State *L, lt_heap *h);
/* Removes what lt_mem_watch put into L (a borrowed state given back). */
void lt_mem_unwatch(lua_State *L);

/* From now on, L's allocations are charged to c (NULL: to nobody). */
static inline void lt_mem_charge(lt_heap *h, lt_charge *c) {
  if (c) c->burst = 0;
  h->cur = c;
  h->lent = false;
}

/* A copy made for another actor of this worker while the running one sends
 * it (ldirect.c): what it allocates is charged to the receiver's c, and
 * never refused on the spot (the sender must not fail for the receiver's
 * budget): growth that would have been refused dooms c instead, so that
 * the receiver ends ("memory") at its next run, as the decode this copy
 * replaces would have made it. lt_mem_lend_end gives `was` back. */
static inline lt_charge *lt_mem_lend(lt_heap *h, lt_charge *c) {
  lt_charge *was = h->cur;
  h->cur = c;
  h->lent = true;
  return was;
}
static inline void lt_mem_lend_end(lt_heap *h, lt_charge *was) {
  h->cur = was;
  h->lent = false;
}

/* The calling thread's state runs the runtime's own work in the middle of
 * a run (a finalizer the runtime installed): its allocations are charged
 * to nobody and never refused, neither for a budget nor for a runaway the
 * watchdog is stopping (a failure inside a collection step would be
 * rethrown from wherever the collector runs, a trace exit included, which
 * LuaJIT cannot unwind). lt_mem_resume restores. */
typedef struct lt_paused {
  lt_charge *charge;
  bool in_lua;
} lt_paused;
lt_paused lt_mem_pause(void);
void lt_mem_resume(lt_paused p);

/* A spawn by the actor charged to spawner: child counts in its brood from
 * now on (not when the brood cannot be allocated). lt_mem_charge_end when
 * the child's actor is freed, and the spawner's. */
void lt_mem_brood_join(lt_charge *spawner, lt_charge *child);
void lt_mem_charge_end(lt_charge *c);
/* A spawn while over max_memory: refused (nil, "nomem"). True when the
 * spawner is doomed instead and ends with "memory": it spawns again after a
 * refusal, while it holds an eighth of the budget with its live actors (a
 * bomb that ignores "nomem" would spin on spawn for ever while its actors
 * hold the budget; one that stops at "nomem" is not to blame). */
bool lt_mem_spawn_blames(lt_charge *c);

/* Does c hold a large share of the budget (1/32: worth a full collection
 * when it ends)? */
bool lt_mem_held_much(const lt_charge *c);

/* Bytes outside the Lua heaps that the budget counts (actor records, spawn
 * arguments): + when allocated, - when freed, on any thread. */
void lt_mem_add(int64_t bytes);
/* Everything counted now (a sum of per-thread counts that may lag by
 * 64 KiB each). */
int64_t lt_mem_total(void);
/* Does it exceed max_memory? As this thread last saw it: a thread looks
 * again each time its own count moved by 64 KiB. */
bool lt_mem_over(void);

/* At a safe point of the worker (after a run of the actor charged to c, or
 * NULL): under pressure, a full collection, at most once per max_memory/16
 * of growth; or, when c holds an eighth of the budget, c is doomed instead
 * (lmem.c, to_blame: collecting the heap it fills could outlast two
 * slices). */
extern _Thread_local bool lt_mem_pressure; /* this thread's view */
void lt_mem_relieve(lua_State *L, lt_heap *h, lt_charge *c);
static inline void lt_mem_after_run(lua_State *L, lt_heap *h, lt_charge *c) {
  if (lt_mem_pressure) lt_mem_relieve(L, h, c);
}
/* A full collection, protected (a failing __gc cannot escape). */
void lt_mem_collect(lua_State *L);

/* The default max_memory: 3/4 of the memory this process may use (the
 * smallest of physical memory and the cgroup's memory.max), and at most
 * half of RLIMIT_AS. */
size_t lt_mem_default_max(void);
/* A run starts: counts from zero, with these budgets (actor 0: none). */
void lt_mem_start(size_t max_memory, size_t actor_memory);
/* The calling thread's pending count goes into the total (thread exit). */
void lt_mem_flush(void);

#endif
