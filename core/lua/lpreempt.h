/*
 * lpreempt.h - the watchdog's side in the binding (lpreempt.c), in the
 * floor above life: the resume loop reaches it through lt_life_ops.
 */
#ifndef TY_LPREEMPT_H
#define TY_LPREEMPT_H

#include "lactor.h"

/* ty_actor_ops.interrupt, .stuck and .peer_stuck. */
void lt_interrupt_op(ty_worker *w, int kind, uint64_t seq, void *ud);
/* ty_actor_ops.kill_as: a fork's kills are its actor's. */
ty_pid lt_kill_as_op(ty_actor *a, void *ud);
void lt_stuck_op(ty_worker *w, ty_actor *running, ty_actor **dead, size_t n,
                 void *ud);
void lt_peer_stuck_op(ty_worker *w, void *ud);
/* After lua_resume, when the watchdog's flag was set or the hook fired:
 * what the worker does with the actor (TY_*), or -1 for the usual. */
int lt_after_preempt(ty_actor *a, lt_actor *la, int status);
/* An API call made while the watchdog wants the running code stopped:
 * raises (the running code cannot be yielded from here). */
void lt_preempt_guard(lua_State *L, ty_actor *a, lt_actor *la);
/* Where la's function comes from ("file.lua:12"), into buf. */
void lt_origin(const lt_actor *la, char *buf, size_t n);
/* Called on the watchdog thread for each worker declared stuck (the net
 * layer moves accepts off it). At most 4, registered once. */
void lt_on_stuck(void (*fn)(unsigned worker));

#endif
