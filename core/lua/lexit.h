/*
 * lexit.h - the end of an actor (lexit.c), in the floor above life: the
 * resume loop reaches it through lt_life_ops (lactor.h).
 */
#ifndef TY_LEXIT_H
#define TY_LEXIT_H

#include "lactor.h"
#include "lguard.h"

/* The runtime's own Lua work for actor a failed (an error from a __gc
 * metamethod, or out of memory; the error value is on top of L, status is
 * lua_pcall's): the actor ends, unless its end was already reported. */
int lt_runtime_error(ty_actor *a, lt_actor *la, lua_State *L, int status);
/* An allocation charged to la's family was refused (lmem.h): it ends with
 * reason "memory", whatever its coroutine did with the error. */
int lt_memory_death(ty_actor *a, lt_actor *la);

/* Ends the running actor: records the reason in la->exit_reason and raises
 * an error ("tycho.exit: reason"). A pcall may catch it, but the actor
 * still ends, at its next wait or its return. */
int lt_exit_now(lua_State *L, lt_actor *la, const char *reason, size_t len);
/* What lt_resume returns when the coroutine returned, failed, or called
 * tycho.exit; and when a signal ends it from outside (TY_DONE). */
int lt_on_return(ty_actor *a, lt_actor *la);
int lt_on_error(ty_actor *a, lt_actor *la);
int lt_exited(ty_actor *a, lt_actor *la);
int lt_die_now(ty_actor *a, lt_actor *la, const char *reason, size_t len);
/* A signal ends the actor: a kill (lt_die_now) or a fork's cancel. */
int lt_end_by_signal(ty_actor *a, lt_actor *la, ty_msg *m);
/* Handles every signal in the mailbox; returns a message that kills the
 * actor (the caller frees it), or NULL. */
ty_msg *lt_process_signals(ty_actor *a, lt_actor *la);
/* ty_actor_ops.destroy and .undeliverable. */
void lt_destroy(ty_actor *a, ty_worker *w, void *ud);
void lt_undeliverable(ty_msg *m, ty_worker *w, void *ud);

#endif
