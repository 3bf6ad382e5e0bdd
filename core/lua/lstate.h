/*
 * lstate.h - the Lua state of a worker (lstate.c).
 */
#ifndef TY_LSTATE_H
#define TY_LSTATE_H

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "base/buf.h"
#include "lctx.h"
#include "lmem.h"
#include "sched/ty.h"

/* Worker i's ticks spent in resumes, written by worker i only (any thread
 * reads it: lobserve.c). */
_Atomic uint64_t *lt_busy_slot(unsigned i);
/* The bytes of worker i's Lua state, as of its last run (any thread). */
size_t lt_heap_used(unsigned i);
/* Worker w publishes its heap's size (after a run). */
void lt_heap_publish(ty_worker *w, const lt_heap *h);

/* A fresh call reference, unique per worker. */
uint64_t lt_new_ref(void);
/* Gives a new state (worker or pool) the published package paths, noting
 * their version in *applied (may be NULL), and makes require "tycho.core"
 * answer with this copy of the core. */
void lt_set_paths(lua_State *L, uint64_t *applied);
/* Applies the published package paths to L if they are newer than
 * *applied (before an actor starts, before a pool job runs). */
void lt_sync_paths(lua_State *L, uint64_t *applied);
/* Publishes L's package.path/cpath to every worker when they changed since
 * L last did (lstate.c); every spawn request calls it. */
void lt_note_paths(lua_State *L);
/* The same, whether they changed or not (the start of a run). */
void lt_publish_paths(lua_State *L);
/* The next lt_state_init on this thread borrows L instead of creating a
 * state (tycho.run: the calling thread serves as worker 0, lrun.c). */
void lt_state_borrow(lua_State *L);
/* fn runs on a worker's thread when its borrowed state is given back,
 * before anything else of the state's exit (at most 4 functions; the same
 * one is registered once): for what belongs to the worker and would
 * otherwise live on in that state (net: detached connections). */
void lt_on_give_back(void (*fn)(void));
/* fn runs on a worker's thread as its state closes or is given back, last
 * (at most 4, registered once): what a module above keeps per thread
 * (shared tables' copy buffers: lrun.c registers lt_shared_thread_end). */
void lt_on_state_exit(void (*fn)(void));
/* ty_actor_ops.worker_init and .worker_exit: open and close the state (a
 * borrowed one is set up for the run, then given back, never closed). */
void lt_state_init(ty_worker *w, void *ud);
void lt_state_exit(ty_worker *w, void *ud);

#endif
