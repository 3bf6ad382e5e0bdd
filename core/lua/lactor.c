/*
 * lactor.c - the life of a Lua actor: what it keeps (links, monitors, calls
 * owed, forks), its start on a worker and every resume. Its end and the
 * signals that cause it are in lexit.c.
 *
 * Blocking API functions (recv, call, sleep) are C functions that record what
 * the actor waits for, arm the core's wait and `return lua_yield(L, 0)`.
 * When the core resumes the actor, lt_resume pushes the outcome (the message's
 * values, or nil + "timeout") as lua_resume arguments: they become the
 * results of the C function that yielded.
 */
#include <errno.h>
#include <string.h>

#include "base/alloc.h"
#include "base/log.h"
#include "lactor.h"
#include "lco.h"
#include "lguard.h"
#include "lpreload.h"
#include "lstate.h"
#include "ltick.h"

#define MAX_OWED 1024 /* unanswered calls remembered per actor */

/* ---- small containers --------------------------------------------------- */

void lt_pids_add(lt_pids *p, ty_pid pid) {
  for (uint32_t i = 0; i < p->n; i++)
    if (p->v[i] == pid) return;
  if (p->n == p->cap) {
    size_t cap = p->cap;
    ty__grow(&p->v, &cap, (size_t)p->n + 1, sizeof *p->v, 2);
    p->cap = (uint32_t)cap;
  }
  p->v[p->n++] = pid;
}

bool lt_pids_remove(lt_pids *p, ty_pid pid) {
  for (uint32_t i = 0; i < p->n; i++) {
    if (p->v[i] == pid) {
      p->v[i] = p->v[--p->n];
      return true;
    }
  }
  return false;
}

void lt_owed_push(lt_actor *la, ty_pid to, uint64_t ref) {
  if (la->nowed == MAX_OWED) { /* the oldest caller times out instead */
    memmove(la->owed, la->owed + 1, (MAX_OWED - 1) * sizeof *la->owed);
    la->nowed--;
  }
  if (la->nowed == la->capowed) {
    size_t cap = la->capowed;
    /* One first: most actors answer one call at a time (24 bytes, not 48). */
    ty__grow(&la->owed, &cap, (size_t)la->nowed + 1, sizeof *la->owed, 1);
    la->capowed = (uint16_t)cap;
  }
  la->owed[la->nowed++] = (lt_owed){to, ref, false};
}

int lt_owed_last(const lt_actor *la) {
  for (uint32_t i = la->nowed; i-- > 0;)
    if (!la->owed[i].delegated) return (int)i;
  return -1;
}

bool lt_owed_remove(lt_actor *la, ty_pid to, uint64_t ref) {
  for (uint32_t i = la->nowed; i-- > 0;) {
    if (la->owed[i].to == to && la->owed[i].ref == ref) {
      memmove(la->owed + i, la->owed + i + 1,
              (la->nowed - i - 1) * sizeof *la->owed);
      la->nowed--;
      return true;
    }
  }
  return false;
}

/* What an actor costs outside the Lua heap, for max_memory. */
#define ACTOR_BYTES ((int64_t)(sizeof(lt_actor) + sizeof(ty_actor)))

lt_actor *lt_actor_new(void) {
  lt_actor *la = ty__try_alloc(sizeof *la);
  if (!la) return NULL;
  memset(la, 0, sizeof *la);
  la->co_ref = LUA_NOREF;
  la->fn_ref = LUA_NOREF;
  la->srv_fn = la->srv_state = LUA_NOREF;
  lt_mem_add(ACTOR_BYTES);
  return la;
}

void lt_actor_set_spawn(lt_actor *la, char *args, size_t len) {
  la->spawn = args;
  la->spawn_len = (uint32_t)len;
  lt_mem_add((int64_t)len);
}

static void drop_spawn(lt_actor *la) {
  ty__free(la->spawn, la->spawn_len);
  lt_mem_add(-(int64_t)la->spawn_len);
  la->spawn = NULL;
  la->spawn_len = 0;
}

lt_rare *lt_rare_new(lt_actor *la) {
  lt_rare *r = ty__alloc(sizeof *r);
  memset(r, 0, sizeof *r);
  r->srv_err = LUA_NOREF;
  lt_mem_add((int64_t)sizeof *r);
  /* The watchdog reads la->rare (links, monitors) under this lock from its
   * own thread (lpreempt.c); before la runs on a worker nobody else sees it. */
  ty_worker *w = ty_worker_current();
  if (w) ty_worker_lock(w);
  la->rare = r;
  if (w) ty_worker_unlock(w);
  return r;
}

static void free_rare(lt_rare *r) {
  if (!r) return;
  free(r->links.v);
  free(r->monitors.v);
  free(r->exit_reason);
  free(r->origin);
  lt_mem_add(-(int64_t)sizeof *r);
  ty__free(r, sizeof *r);
}

void lt_actor_free(lt_actor *la) {
  if (la->inflight) ty_msg_free(la->inflight);
  lt_mem_add(-ACTOR_BYTES);
  lt_mem_charge_end(&la->charge);
  drop_spawn(la);
  free(la->owed);
  free_rare(la->rare);
  ty__free(la, sizeof *la);
}

/* ---- forks -------------------------------------------------------------- */

void lt_fork_attach(lt_actor *parent, lt_actor *fork) {
  lt_rare *fr = lt_rare_get(fork), *pr = lt_rare_get(parent);
  fr->parent_la = parent;
  fr->fork_prev = NULL;
  fr->fork_next = pr->forks;
  if (pr->forks) pr->forks->rare->fork_prev = fork;
  pr->forks = fork;
}

void lt_fork_detach(lt_actor *fork) {
  lt_rare *fr = fork->rare; /* a fork with a parent has both records */
  lt_actor *p = fr ? fr->parent_la : NULL;
  if (!p) return;
  if (fr->fork_prev) fr->fork_prev->rare->fork_next = fr->fork_next;
  else p->rare->forks = fr->fork_next;
  if (fr->fork_next) fr->fork_next->rare->fork_prev = fr->fork_prev;
  fr->parent_la = fr->fork_next = fr->fork_prev = NULL;
}

/* The actor is ending: its forks must not point at it any more. Returns the
 * list, so that the caller can also signal them. */
lt_actor *lt_forks_orphan(lt_actor *la) {
  if (!la->rare) return NULL;
  lt_actor *f = la->rare->forks;
  la->rare->forks = NULL;
  for (lt_actor *g = f; g; g = g->rare->fork_next) g->rare->parent_la = NULL;
  return f;
}

lt_actor *lt_family_find(lt_actor *la, ty_pid pid) {
  lt_actor *top = lt_rare_rd(la)->parent_la ? la->rare->parent_la : la;
  if (top->pid == pid) return top;
  for (lt_actor *f = lt_rare_rd(top)->forks; f; f = f->rare->fork_next)
    if (f->pid == pid) return f;
  return NULL;
}

/* ---- resources --------------------------------------------------------- */

void lt_res_add(lt_actor *la, lt_res *r) {
  lt_rare *ra = lt_rare_get(la);
  r->prev = NULL;
  r->next = ra->resources;
  if (ra->resources) ra->resources->prev = r;
  ra->resources = r;
}

void lt_res_remove(lt_actor *la, lt_res *r) {
  if (r->prev) r->prev->next = r->next;
  else if (la->rare && la->rare->resources == r) la->rare->resources = r->next;
  if (r->next) r->next->prev = r->prev;
  r->next = r->prev = NULL;
}

/* ---- start -------------------------------------------------------------- */

/* Pushes the function and arguments of a fork (LT_FN_REF) on co. The table
 * keeps its count in `n`: arguments may be nil. Returns nargs. */
static int push_fork_function(lua_State *L, lt_actor *la, lua_State *co) {
  lua_rawgeti(L, LUA_REGISTRYINDEX, la->fn_ref);
  luaL_unref(L, LUA_REGISTRYINDEX, la->fn_ref);
  la->fn_ref = LUA_NOREF;
  lua_getfield(L, -1, "n");
  int n = (int)lua_tointeger(L, -1);
  lua_pop(L, 1);
  lua_xmove(L, co, 1);
  luaL_checkstack(co, n + 2, "too many arguments");
  for (int i = 1; i <= n; i++) lua_rawgeti(co, 1, i);
  lua_remove(co, 1);
  return n - 1;
}

/* Creates the coroutine and pushes function + arguments. Returns nargs, or
 * -1 with an error message on co's stack. */
static int start_actor(lt_actor *la) {
  lt_worker *lw = lt_worker_get();
  lua_State *L = lw->L;
  lt_preload_sync(L);  /* before the function: its modules may need them */
  lt_co_start(lw, la); /* a pooled one saves lua_newthread and luaL_ref */
  lua_State *co = la->co;
  if (la->fn_kind == LT_FN_REF) return push_fork_function(L, la, co);
  char err[256];
  if (la->fn_kind != LT_FN_FILE) {
    if (la->fn_kind == LT_FN_HERE) { /* the state is the caller's (lrun.c) */
      lua_rawgeti(L, LUA_REGISTRYINDEX, la->fn_ref);
      luaL_unref(L, LUA_REGISTRYINDEX, la->fn_ref);
      la->fn_ref = LUA_NOREF;
      lua_xmove(L, co, 1);
    } else if (lt_fn_push(co, la->fn, ty_worker_id(ty_worker_current()))) {
      return -1;
    }
    int n = la->spawn_len
                ? lt_codec_decode(co, la->spawn, la->spawn_len, err, sizeof err)
                : 0;
    drop_spawn(la); /* no longer needed: keep actors small */
    if (n < 0) {
      lua_pushfstring(co, "tycho.spawn: bad spawn request (%s)", err);
      return -1;
    }
    return n;
  }
  int n = lt_codec_decode(co, la->spawn, la->spawn_len, err, sizeof err);
  if (n < 1 || luaL_loadfile(co, lua_tostring(co, 1))) {
    if (n < 1) lua_pushfstring(co, "tycho: bad main request (%s)", err);
    return -1;
  }
  lua_replace(co, 1);
  return n - 1;
}

/* ---- resuming ----------------------------------------------------------- */

/* Waits again for what la->wait describes, keeping the original deadline. */
static int rewait(ty_actor *a, lt_actor *la, uint64_t ref) {
  int64_t left = -1;
  if (la->deadline_ns) {
    uint64_t now = ty_runtime_now_ns(lt_ctx_get()->rt); /* virtual time too */
    left = la->deadline_ns > now ? (int64_t)(la->deadline_ns - now) : 0;
  }
  ty_actor_wait(a, left, ref);
  return -1;
}

static int push_timeout(lua_State *co) {
  lua_pushnil(co);
  lua_pushliteral(co, "timeout");
  return 2;
}

/* The next ordinary message for recv; a call is remembered as owed until it
 * is answered. */
static int wake_recv(lua_State *L, ty_actor *a, lt_actor *la) {
  ty_msg *m = lt_take_msg(a);
  if (!m) {
    if (ty_actor_timed_out(a)) return push_timeout(L);
    return rewait(a, la, 0);
  }
  if (m->kind == LT_CALL) lt_owed_push(la, m->from, m->ref);
  ty_pid from = m->from;
  int n = lt_decode_msg(L, la, m);
  if (ty__unlikely(la->trace & LT_TR_RECV))
    lt_worker_get()->life->trace_in(L, la, from, n);
  return n;
}

/* The reply waits in the actor's awaited slot (ty.h), not in the mailbox:
 * O(1) whatever the backlog. */
static int wake_call(lua_State *L, ty_actor *a, lt_actor *la) {
  ty_msg *m = ty_actor_take_awaited(a);
  if (m && m->ref == la->call_ref &&
      (m->kind == LT_REPLY || m->kind == LT_REPLY_ERR)) {
    if (m->kind == LT_REPLY) return lt_decode_msg(L, la, m);
    la->inflight = m;
    lua_pushnil(L);
    lua_pushlstring(L, m->data, m->len);
    la->inflight = NULL;
    ty_msg_free(m);
    return 2;
  }
  if (m) { /* carries the ref but is no reply: cannot be */
    lt_msg_release(m);
    ty_msg_free(m);
  }
  if (ty_actor_timed_out(a)) return push_timeout(L);
  return rewait(a, la, la->call_ref);
}

/* Pushes the results of the API function that yielded on L (the actor's
 * coroutine); -1: keep waiting. */
static int wake_args(lua_State *L, ty_actor *a, lt_actor *la) {
  switch (la->wait) {
  case LT_W_RECV: return wake_recv(L, a, la);
  case LT_W_CALL: return wake_call(L, a, la);
  case LT_W_SLEEP:
    if (!ty_actor_timed_out(a)) return rewait(a, la, UINT64_MAX);
    return 0;
  case LT_W_YIELD: lua_pushboolean(L, 1); return 1;
  case LT_W_FULL:
    lua_pushnil(L);
    lua_pushliteral(L, "full");
    return 2;
  case LT_W_EXT: return la->rare->ext_wake(L, a, la, ty_actor_timed_out(a));
  }
  return 0;
}

/* The coroutine yielded: what the worker should do with the actor. */
static int after_yield(ty_actor *a, lt_actor *la) {
  if (la->wait == LT_W_NONE) {
    /* coroutine.yield() straight from the actor: treat it as a yield. */
    lua_settop(la->co, 0);
    la->wait = LT_W_YIELD;
  }
  if (la->wait == LT_W_YIELD || la->wait == LT_W_FULL) return TY_YIELD;
  /* A signal that arrived while it ran (one it sent itself, or one queued
   * before its start) would not end this wait: run again to handle it; the
   * wait is then re-armed with its deadline (wake_args). */
  if (a->mbox.signals) return TY_YIELD;
  return TY_WAIT;
}

enum { RUN_WAIT = -1, RUN_START_FAILED = -2 };

/* Starts or wakes the coroutine and runs it: lua_resume's status, or
 * RUN_WAIT (nothing to run yet), RUN_START_FAILED (message on co). The
 * results of the call that yielded are pushed straight onto the suspended
 * coroutine: the collector may step there, but the __gc metamethods of
 * scripts only queue (lguard.c), so no script code runs on a suspended
 * coroutine. */
static int run(ty_actor *a, lt_actor *la, lt_worker *lw) {
  int nargs;
  if (!a->started) {
    la->pid = a->pid;
    la->flag = ty_worker_flag(ty_worker_current());
    nargs = start_actor(la);
    if (nargs < 0) return RUN_START_FAILED;
  } else if (la->wait == LT_W_SERVE) {
    nargs = lw->life->serve_wake(a, la);
    if (nargs < 0) return RUN_WAIT;
  } else {
    nargs = wake_args(la->co, a, la);
    if (nargs < 0) return RUN_WAIT;
  }
  la->wait = LT_W_NONE;
  la->deadline_ns = 0;
  if (la->rare) {
    la->rare->ext_wake = NULL;
    la->rare->ext_cancel = NULL;
  }
  lw->in_lua = true; /* allocations may fail for a runaway (lstate.c) */
  int st = lua_resume(la->co, nargs);
  lw->in_lua = false;
  return st;
}

/* What the actor allocates while it starts and runs is charged to it
 * (lmem.h); what the runtime does after (reports, notices) is not. */
__attribute__((always_inline)) static inline int resume_actor(ty_actor *a,
                                                              lt_worker *lw) {
  lt_actor *la = a->user;
  /* Package paths published since this worker last ran an actor (one
   * relaxed load when nothing changed). */
  lt_sync_paths(lw->L, &lw->paths_version);
  /* Signals first, even before the start: a kill sent to a spawn request
   * must not let it run. */
  if (a->mbox.signals) {
    ty_msg *kill = lw->life->process_signals(a, la);
    if (kill) {
      int r = lw->life->end_by_signal(a, la, kill);
      ty_msg_free(kill);
      return r;
    }
  }
  if (ty__unlikely(la->frozen)) return TY_YIELD; /* until its kill comes */
  lt_charge *c = lt_charge_of(la);
  lt_mem_charge(&lw->heap, c);
  int st = run(a, la, lw);
  lt_mem_charge(&lw->heap, NULL);
  if (st == RUN_WAIT) return TY_WAIT;
  /* relaxed: the watchdog's word (lpreempt.c); set means look closer. A
   * runaway stopped by failing allocations is the watchdog's, not a
   * memory death. */
  if (st != RUN_START_FAILED &&
      ty__unlikely(atomic_load_explicit(lw->flag, memory_order_relaxed) ||
                   la->preempted)) {
    int r = lw->life->after_preempt(a, la, st);
    if (r >= 0) return r;
  }
  lt_mem_after_run(lw->L, &lw->heap, c);
  lt_gc_after_run(lw->L);
  if (c->doomed || st == LUA_ERRMEM) return lw->life->memory_death(a, la);
  if (st == RUN_START_FAILED) return lw->life->on_error(a, la);
  if (lt_rare_rd(la)->exit_reason) return lw->life->exited(a, la);
  if (st == LUA_YIELD) return after_yield(a, la);
  if (st == 0 && la->srv_fn != LUA_NOREF) return lw->life->serve_idle(a, la);
  if (st == 0) {
    la->co_returned = true;
    return lw->life->on_return(a, la);
  }
  return lw->life->on_error(a, la);
}

/* A supervisor starts its children one by one: each child's first run (up
 * to its first wait, or its end) is over before the next one is spawned.
 * The child tells it with an ack message once that run returns (la is
 * still valid: the worker destroys an ended actor after this); `ended`
 * says the actor ended in that run, so the supervisor waits for its EXIT
 * to learn whether it failed to start (lua/tycho/supervisor.lua). */
static void send_start_ack(lt_actor *la, ty_pid pid, bool ended) {
  lua_State *L = lt_worker_get()->L;
  ty_pid to = la->rare->ack_to;
  la->rare->ack_to = 0;
  lua_pushliteral(L, "tycho.supervisor:ack");
  lua_pushnumber(L, (lua_Number)pid);
  lua_pushboolean(L, ended);
  lt_send_values(L, 3, to);
}

static int resume_counted(ty_actor *a, lt_worker *lw) {
  lt_actor *la = a->user;
  bool first = !a->started;
  la->resumes++;
  int r = resume_actor(a, lw);
  if (first && lt_rare_rd(la)->ack_to) send_start_ack(la, a->pid, r == TY_DONE);
  return r;
}

/* One resume in LT_SAMPLE is timed (lobserve.h): CPU time per actor and
 * per worker; it counts LT_SAMPLE times. Out of line, so that the usual
 * resume stays as short as it was. */
__attribute__((noinline, cold)) static int resume_timed(ty_actor *a,
                                                        lt_worker *lw) {
  lt_actor *la = a->user;
  lw->sample_left = lt_sample_gap(&lw->sample_rng);
  uint64_t t0 = lt_ticks();
  int r = resume_counted(a, lw);
  uint64_t dt = (lt_ticks() - t0) * LT_SAMPLE;
  la->ticks += dt; /* la lives until the worker destroys it, after this */
  /* relaxed: one writer (this worker); readers want a recent figure. */
  atomic_store_explicit(lw->busy,
                        atomic_load_explicit(lw->busy, memory_order_relaxed) +
                            dt,
                        memory_order_relaxed);
  return r;
}

int lt_resume(ty_actor *a, void *ud) {
  (void)ud;
  lt_worker *lw = lt_worker_get();
  if (ty__unlikely(--lw->sample_left == 0)) return resume_timed(a, lw);
  return resume_counted(a, lw);
}

/* ---- the worker's loop, protected ------------------------------------------ */

typedef struct loop_job {
  ty_worker *w;
  void (*loop)(ty_worker *w, void *arg);
} loop_job;

static int loop_protected(lua_State *L) {
  loop_job *j = lua_touserdata(L, 1);
  j->loop(j->w, NULL);
  return 0;
}

/* The actors' own errors stop at lua_resume; the runtime's Lua work around
 * it (starting a coroutine, decoding messages onto it, reporting an end)
 * allocates, so it can run out of memory or meet an error from a __gc
 * metamethod the collector runs (lguard.c makes that rare). Unprotected,
 * such an error would end the process. So the whole loop runs inside one
 * lua_cpcall, which costs a resume nothing; an error caught there ends the
 * actor being resumed (lt_runtime_error) and the loop starts again. */
void lt_worker_run(ty_worker *w, void (*loop)(ty_worker *w, void *arg),
                   void *ud) {
  (void)ud;
  lt_worker *lw = ty_worker_data(w);
  loop_job j = {w, loop};
  for (;;) {
    int st = lua_cpcall(lw->L, loop_protected, &j);
    if (st == 0) return;
    lt_mem_charge(&lw->heap, NULL);
    lw->in_lua = false;
    ty_actor *a = ty_actor_current();
    if (a) {
      lt_actor *la = a->user;
      if (!a->started && lt_rare_rd(la)->ack_to)
        send_start_ack(la, a->pid, true); /* the error ends it */
      ty_worker_resume_failed(w, lw->life->runtime_error(a, la, lw->L, st));
    } else {
      ty__logf(TY_LOG_ERROR, (int)ty_worker_id(w) + 1, 0,
               "error outside every actor: %s",
               lua_type(lw->L, -1) == LUA_TSTRING ? lua_tostring(lw->L, -1)
                                                  : "(no message)");
      lua_pop(lw->L, 1); /* not settop: a borrowed L has its caller's frame */
    }
  }
}
