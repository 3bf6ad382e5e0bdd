/*
 * lstate.h - the Lua state of a worker (lstate.c).
 */
#ifndef TY_LSTATE_H
#define TY_LSTATE_H

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "base/buf.h"
#include "lmem.h"
#include "sched/ty.h"

#define LT_COPOOL 64 /* returned coroutines kept per worker (lserve.c) */

typedef struct lt_worker {
  lua_State *L;
  ty_worker *w;
  /* The watchdog (lpreempt.c): its flag word (ty_worker_flag), and the
   * resume whose allocations fail (0: none; set under the watchdog lock)
   * while the worker runs Lua code (in_lua, the owner's). */
  const _Atomic uint32_t *flag;
  _Atomic uint64_t deny;
  bool in_lua;
  char where[192];   /* where the last preempted code was */
  ty__buf buf;       /* the encode buffer of this worker's sends */
  int fncache_ref;   /* registry: bytecode string -> function */
  int dumpcache_ref; /* registry, weak keys: function -> bytecode */
  uint64_t next_ref;
  uint64_t paths_version; /* of the package paths this state has */
  lt_heap heap; /* the accounting of its memory (lmem.h), under lt_alloc */
  /* L is the caller's of tycho.run (lt_state_borrow), given back at exit
   * with what the run changed in it undone: its hook, its collector's
   * pause, its package paths (and its allocator, in heap). */
  bool borrowed;
  lua_Hook hook;
  int hook_mask, hook_count, gc_pause;
  char *path, *cpath;     /* its package paths (the run may publish others) */
  _Atomic uint64_t *busy; /* ticks spent in resumes (lobserve.h) */
  uint32_t sample_left;   /* resumes until the next timed one (lobserve.h) */
  uint32_t sample_rng;
  /* Coroutines that returned, kept for the next message of a tycho.server
   * (lserve.c): the thread and its registry ref. */
  struct {
    lua_State *co;
    int ref;
  } copool[LT_COPOOL];
  int ncopool;
  unsigned id; /* the worker's index (ty_worker_id) */
  /* The coroutine on whose stack the values of direct messages wait
   * (ldirect.c) until their receivers take them, its registry ref, and
   * its free slots below the top. */
  lua_State *holder;
  int direct_ref;
  uint32_t direct_live; /* slots in use (tycho.core._direct_count) */
  int *free_slots;
  uint32_t nfree, capfree;
} lt_worker;

/* The bytes of worker i's Lua state, as of its last run (any thread). */
size_t lt_heap_used(unsigned i);
/* Worker w publishes its heap's size (after a run). */
void lt_heap_publish(ty_worker *w, const lt_heap *h);

/* The calling worker's, or NULL outside the workers. */
extern _Thread_local lt_worker *lt_tls_worker;
static inline lt_worker *lt_worker_get(void) { return lt_tls_worker; }
/* A fresh call reference, unique per worker. */
uint64_t lt_new_ref(void);
/* Gives a new state (worker or pool) the published package paths, noting
 * their version in *applied (may be NULL), and makes require "tycho.core"
 * answer with this copy of the core. */
void lt_set_paths(lua_State *L, uint64_t *applied);
/* Applies the published package paths to L if they are newer than
 * *applied (before an actor starts, before a pool job runs). */
void lt_sync_paths(lua_State *L, uint64_t *applied);
/* lt_note_paths (declared in lapi.h) publishes a state's paths. */
/* The next lt_state_init on this thread borrows L instead of creating a
 * state (tycho.run: the calling thread serves as worker 0, lrun.c). */
void lt_state_borrow(lua_State *L);
/* fn runs on a worker's thread when its borrowed state is given back,
 * before anything else of the state's exit (at most 4 functions; the same
 * one is registered once): for what belongs to the worker and would
 * otherwise live on in that state (net: detached connections). */
void lt_on_give_back(void (*fn)(void));
/* ty_actor_ops.worker_init and .worker_exit: open and close the state (a
 * borrowed one is set up for the run, then given back, never closed). */
void lt_state_init(ty_worker *w, void *ud);
void lt_state_exit(ty_worker *w, void *ud);

#endif
