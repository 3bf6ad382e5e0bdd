/*
 * lactor.h - a Lua actor: a coroutine in its worker's Lua state, plus what
 * the binding keeps about it (links, monitors, calls owed, forks, resources
 * it owns), in the life floor of core/lua. lactor.c starts and resumes it;
 * lexit.c ends it.
 */
#ifndef TY_LACTOR_H
#define TY_LACTOR_H

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "codec.h"
#include "lctx.h"
#include "lfn.h"
#include "lmem.h"
#include "lsend.h"
#include "sched/ty.h"

/* What the resume loop (lactor.c, life floor) calls in the floors above
 * it, as the scheduler calls the binding through ty_actor_ops: filled by
 * tycho.run (lrun.c, the composition of the binding) into the context, and
 * kept by each worker (lt_worker.life). Each returns what lt_resume
 * returns (TY_*) unless said otherwise. */
typedef struct lt_life_ops {
  /* lexit.c: signals (a message that kills, or NULL), the kinds of end. */
  ty_msg *(*process_signals)(ty_actor *a, lt_actor *la);
  int (*end_by_signal)(ty_actor *a, lt_actor *la, ty_msg *m);
  int (*on_return)(ty_actor *a, lt_actor *la);
  int (*on_error)(ty_actor *a, lt_actor *la);
  int (*exited)(ty_actor *a, lt_actor *la);
  int (*memory_death)(ty_actor *a, lt_actor *la);
  int (*runtime_error)(ty_actor *a, lt_actor *la, lua_State *L, int status);
  /* lserve.c: a server between messages (wake: nargs, or -1). */
  int (*serve_idle)(ty_actor *a, lt_actor *la);
  int (*serve_wake)(ty_actor *a, lt_actor *la);
  /* lpreempt.c: after a resume the watchdog looked at (-1: the usual). */
  int (*after_preempt)(ty_actor *a, lt_actor *la, int status);
  /* ltrace.c: a traced actor received n values (on top of L) from `from`. */
  void (*trace_in)(lua_State *L, lt_actor *la, ty_pid from, int n);
} lt_life_ops;

/* la's rare record, allocated (zeroed) on first use; on la's worker, or
 * before la is visible to anyone else. Not with the worker's watchdog lock
 * held: lt_rare_new takes it, since the watchdog reads links and monitors
 * (lpreempt.c). */
lt_rare *lt_rare_new(lt_actor *la);
static inline lt_rare *lt_rare_get(lt_actor *la) {
  return la->rare ? la->rare : lt_rare_new(la);
}
/* ---- lactor.c ----------------------------------------------------------- */

/* ty_actor_ops.resume and .run (composed into the runtime's ops by
 * lrun.c). */
int lt_resume(ty_actor *a, void *ud);
void lt_worker_run(ty_worker *w, void (*loop)(ty_worker *w, void *arg),
                   void *ud);
lt_actor *lt_actor_new(void); /* NULL when memory runs out */
/* Gives la its encoded spawn arguments (ty__alloc'd; la frees them). */
void lt_actor_set_spawn(lt_actor *la, char *args, size_t len);
void lt_actor_free(lt_actor *la);
void lt_pids_add(lt_pids *p, ty_pid pid);
bool lt_pids_remove(lt_pids *p, ty_pid pid);
void lt_owed_push(lt_actor *la, ty_pid to, uint64_t ref);
bool lt_owed_remove(lt_actor *la, ty_pid to, uint64_t ref);
/* Index of the most recent call that tycho.reply may answer, or -1. */
int lt_owed_last(const lt_actor *la);
/* The actor of the family (an actor and its forks) of la whose pid is pid,
 * or NULL. */
lt_actor *lt_family_find(lt_actor *la, ty_pid pid);
/* Adds a new fork to the actor it belongs to. */
void lt_fork_attach(lt_actor *parent, lt_actor *fork);
void lt_fork_detach(lt_actor *fork);
/* The actor is ending: its forks no longer point at it. Returns the list. */
lt_actor *lt_forks_orphan(lt_actor *la);
/* Resources an actor owns (lt_res_remove is safe to call twice). */
void lt_res_add(lt_actor *la, lt_res *r);
void lt_res_remove(lt_actor *la, lt_res *r);

#endif
