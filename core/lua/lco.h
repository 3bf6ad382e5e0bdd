/*
 * lco.h - the coroutines of actors (lco.c), life floor.
 */
#ifndef TY_LCO_H
#define TY_LCO_H

#include "lctx.h"

/* A coroutine for la's next message: from the worker's pool, else a new
 * one (la->co, la->co_ref; counted). */
void lt_co_take(lt_worker *lw, lt_actor *la);
/* la's coroutine returned: into the pool (or freed when the pool is full). */
void lt_co_give_back(lt_worker *lw, lt_actor *la);
/* A new actor coroutine (start) / an actor's coroutine is dropped (end):
 * counted per worker for tycho.stats().coroutines. */
void lt_co_count(int delta);
/* An actor's coroutine at its start: from the worker's pool of returned
 * coroutines, else a new one (la->co, la->co_ref; counted). */
void lt_co_start(lt_worker *lw, lt_actor *la);
/* At an actor's destruction: a coroutine that returned goes back to the
 * pool (on its own worker), any other is unreferenced (uncounted). */
void lt_co_end(lt_worker *lw, lt_actor *la);
/* Drops la's server refs (at its destruction, on its worker). */
void lt_serve_drop(lua_State *L, lt_actor *la);

/* Actor coroutines alive on the first `workers` workers. */
int64_t lt_co_live(unsigned workers);

#endif
