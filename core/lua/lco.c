/*
 * lco.c - the coroutines of actors, in the life floor of core/lua: each
 * worker keeps the coroutines that returned (lt_worker.copool) for the next
 * actor or server message (lserve.c), and counts those alive.
 */
#include <stdatomic.h>

#include "lco.h"

/* Actor coroutines alive per worker: written by that worker only (plain
 * load + store), read by tycho.stats on any thread; relaxed is enough for a
 * gauge that orders nothing else. */
static _Atomic int64_t co_live[TY_MAX_WORKERS];

static inline void co_add(lt_worker *lw, int delta) {
  _Atomic int64_t *c = &co_live[lw->id];
  atomic_store_explicit(c,
                        atomic_load_explicit(c, memory_order_relaxed) + delta,
                        memory_order_relaxed);
}

void lt_co_count(int delta) {
  lt_worker *lw = lt_worker_get();
  if (lw && lw->w) co_add(lw, delta);
}

int64_t lt_co_live(unsigned workers) {
  int64_t n = 0;
  for (unsigned i = 0; i < workers && i < TY_MAX_WORKERS; i++)
    n += atomic_load_explicit(&co_live[i], memory_order_relaxed);
  return n;
}

void lt_co_take(lt_worker *lw, lt_actor *la) {
  if (lw->ncopool) {
    lw->ncopool--;
    la->co = lw->copool[lw->ncopool].co;
    la->co_ref = lw->copool[lw->ncopool].ref;
  } else {
    la->co = lua_newthread(lw->L);
    la->co_ref = luaL_ref(lw->L, LUA_REGISTRYINDEX);
  }
  co_add(lw, 1);
}

void lt_co_give_back(lt_worker *lw, lt_actor *la) {
  lua_settop(la->co, 0);
  if (lw->ncopool < LT_COPOOL) {
    /* The next user must not inherit this one's setfenv(0, t): the thread's
     * globals go back to the worker's. */
    lua_rawgeti(lw->L, LUA_REGISTRYINDEX, la->co_ref);
    lua_pushvalue(lw->L, LUA_GLOBALSINDEX);
    lua_setfenv(lw->L, -2);
    lua_pop(lw->L, 1);
    lw->copool[lw->ncopool].co = la->co;
    lw->copool[lw->ncopool].ref = la->co_ref;
    lw->ncopool++;
  } else {
    luaL_unref(lw->L, LUA_REGISTRYINDEX, la->co_ref);
  }
  la->co = NULL;
  la->co_ref = LUA_NOREF;
  co_add(lw, -1);
}

/* Actors' coroutines share the pool: a coroutine that returned (status 0,
 * its stack emptied) resumes anew with a function pushed, as a handler's
 * does. The spawn benchmark spent a quarter of its CPU in lua_newthread
 * and luaL_ref (bench/results-alloc.md). */
void lt_co_start(lt_worker *lw, lt_actor *la) {
  if (lw->w) {
    lt_co_take(lw, la);
    return;
  }
  la->co = lua_newthread(lw->L);
  la->co_ref = luaL_ref(lw->L, LUA_REGISTRYINDEX);
}

void lt_co_end(lt_worker *lw, lt_actor *la) {
  if (la->co_returned && la->co && lw->w && lt_worker_get() == lw &&
      lua_status(la->co) == 0) {
    lt_co_give_back(lw, la);
    return;
  }
  luaL_unref(lw->L, LUA_REGISTRYINDEX, la->co_ref);
  la->co_ref = LUA_NOREF;
  lt_co_count(-1);
}

void lt_serve_drop(lua_State *L, lt_actor *la) {
  luaL_unref(L, LUA_REGISTRYINDEX, la->srv_fn);
  luaL_unref(L, LUA_REGISTRYINDEX, la->srv_state);
  luaL_unref(L, LUA_REGISTRYINDEX, lt_rare_rd(la)->srv_err); /* NOREF: no-op */
  la->srv_fn = la->srv_state = LUA_NOREF;
  if (la->rare) la->rare->srv_err = LUA_NOREF;
}
