/*
 * lserve.h - the C half of tycho.server (lserve.c), in the API floor: the
 * resume loop reaches it through lt_life_ops.
 */
#ifndef TY_LSERVE_H
#define TY_LSERVE_H

#include "lactor.h"

/* A server's coroutine returned (the actor function after tycho.core._serve,
 * or a handler): keeps what the handler returned, gives the coroutine back
 * to the worker's pool and waits for the next message (TY_WAIT / TY_YIELD). */
int lt_serve_idle(ty_actor *a, lt_actor *la);
/* A message may have come for an idle server: takes a coroutine and pushes
 * dispatch, state, is_call and the message's values; returns nargs, or -1
 * (nothing to run: the wait is re-armed). */
int lt_serve_wake(ty_actor *a, lt_actor *la);
/* Adds _serve and _serve_set to the table on top of L. */
void lt_open_serve(lua_State *L);

#endif
