/*
 * lpreempt.c - runaway Lua code (docs/architecture.md, "Runaway actors"):
 * the watchdog's interrupt op (a count hook, and allocations that fail),
 * what a stopped resume becomes (the actor ends "runaway", or waits for its
 * kill), the report of a worker declared stuck, and the callers that waited
 * on its actors.
 *
 * How code is stopped: the hook runs before each interpreted instruction
 * while armed. On the actor's own coroutine it yields (LuaJIT can yield
 * from a count hook, and no pcall catches a yield); in a coroutine the
 * script made it raises instead, and the next instruction of the actor's
 * coroutine yields. Compiled code never runs the hook (Debian's LuaJIT has
 * no LUAJIT_ENABLE_CHECKHOOK), but an allocation there fails (lstate.c)
 * and an API call raises (lt_preempt_guard), which leave the trace. A
 * compiled loop that does neither cannot be stopped: its worker is then
 * declared stuck (core/sched/watchdog.c) and reported here.
 */
#include <string.h>

#include "base/log.h"
#include "lactor.h"
#include "lexit.h"
#include "lnames.h"
#include "lpreempt.h"
#include "lsend.h"
#include "lstate.h"

static const char *kind_reason(int kind) {
  switch (kind) {
  case TY_PREEMPT_SLICE: return "runaway";
  case TY_PREEMPT_KILL: return "killed";
  case TY_PREEMPT_STOP: return "stopped";
  default: return "stuck";
  }
}

/* ---- the hook ------------------------------------------------------------ */

static void hook(lua_State *L, lua_Debug *ar) {
  ty_worker *w = ty_worker_current();
  ty_actor *a = ty_actor_current();
  if (!w || !a) return;
  lt_actor *la = a->user;
  ty_pid pid = 0;
  int kind = ty_preempt(w, false, &pid);
  if (!kind) return; /* stale: ty_preempt dropped it and the hook */
  if (kind == TY_PREEMPT_KILL && la->pid != pid && la->parent != pid) {
    ty_preempt(w, true, NULL); /* the target is not the one running */
    return;
  }
  if (!la->preempted) {
    lt_worker *lw = ty_worker_data(w);
    if (lua_getinfo(L, "Sl", ar))
      snprintf(lw->where, sizeof lw->where, "%s:%d", ar->short_src,
               ar->currentline);
  }
  la->preempted = (uint8_t)kind;
  /* Cannot yield across a C call (a sort comparator, a gsub callback):
   * LuaJIT raises instead, and the hook comes back at the next one. */
  if (L == la->co) lua_yield(L, 0);
  luaL_error(L, "tycho: %s code stopped", kind_reason(kind));
}

void lt_interrupt_op(ty_worker *w, int kind, uint64_t seq, void *ud) {
  (void)ud;
  lt_worker *lw = ty_worker_data(w);
  if (!lw) return;
  /* A kill must not make the allocations of whatever else runs fail. */
  bool deny = kind && kind != TY_PREEMPT_KILL;
  /* relaxed: the owner's allocator compares it with the resume it runs. */
  atomic_store_explicit(&lw->deny, deny ? seq : 0, memory_order_relaxed);
  /* From another thread, as LuaJIT's own profiler does; calls are
   * serialized by the watchdog lock, which the caller holds. */
  if (kind) lua_sethook(lw->L, hook, LUA_MASKCOUNT, 1);
  else lua_sethook(lw->L, NULL, 0, 0);
}

ty_pid lt_kill_as_op(ty_actor *a, void *ud) {
  (void)ud;
  const lt_actor *la = a->user;
  return la && la->parent ? la->parent : a->pid;
}

void lt_preempt_guard(lua_State *L, ty_actor *a, lt_actor *la) {
  ty_pid pid = 0;
  int kind = ty_preempt(ty_worker_current(), false, &pid);
  if (!kind || (kind == TY_PREEMPT_KILL && la->pid != pid && la->parent != pid))
    return;
  (void)a;
  if (!la->preempted) {
    lt_worker *lw = ty_worker_data(ty_worker_current());
    lua_Debug ar;
    if (lua_getstack(L, 1, &ar) && lua_getinfo(L, "Sl", &ar))
      snprintf(lw->where, sizeof lw->where, "%s:%d", ar.short_src,
               ar.currentline);
  }
  la->preempted = (uint8_t)kind;
  luaL_error(L, "tycho: %s code stopped", kind_reason(kind));
}

/* ---- after the resume ----------------------------------------------------- */

void lt_origin(const lt_actor *la, char *buf, size_t n) {
  if (lt_rare_rd(la)->origin) snprintf(buf, n, "%s", la->rare->origin);
  else if (la->fn) lt_fn_origin(la->fn, buf, n);
  else snprintf(buf, n, "?");
}

static void log_runaway(ty_actor *a, lt_actor *la, lt_worker *lw) {
  if (!ty__log_enabled(TY_LOG_WARN)) return;
  char from[192];
  lt_origin(la, from, sizeof from);
  ty__logev e;
  ty__log_begin(&e, TY_LOG_WARN, (int)ty_worker_id(lw->w) + 1,
                la->parent ? la->parent : a->pid, "runaway", 7);
  if (la->parent) ty__log_num(&e, "fork", (double)a->pid);
  ty__log_str(&e, "at", lw->where, strlen(lw->where));
  ty__log_str(&e, "started", from, strlen(from));
  ty__log_str(&e, "reason", "ran longer than max_slice", 25);
  ty__log_end(&e);
}

int lt_after_preempt(ty_actor *a, lt_actor *la, int status) {
  lt_worker *lw = ty_worker_data(ty_worker_current());
  ty_pid pid = 0;
  int kind = ty_preempt(lw->w, true, &pid);
  int fired = la->preempted;
  la->preempted = 0;
  if (kind == TY_PREEMPT_KILL && la->pid != pid && la->parent != pid) kind = 0;
  if (!kind) kind = fired;
  /* Not stopped: it returned or waited on its own before anything fired. */
  if (!kind || (!fired && status <= LUA_YIELD)) return -1;
  switch (kind) {
  case TY_PREEMPT_SLICE:
    if (!fired) snprintf(lw->where, sizeof lw->where, "compiled code");
    log_runaway(a, la, lw);
    return lt_die_now(a, la, "runaway", 7);
  case TY_PREEMPT_KILL:
    la->frozen = true; /* its kill is on the way: lt_resume waits for it */
    return TY_YIELD;
  default: /* stopping, or stuck: the worker destroys it */ return TY_YIELD;
  }
}

/* ---- a stuck worker ----------------------------------------------------- */

static void (*g_stuck_hooks[4])(unsigned worker);

void lt_on_stuck(void (*fn)(unsigned worker)) {
  for (unsigned i = 0; i < 4; i++) {
    if (g_stuck_hooks[i] == fn) return;
    if (!g_stuck_hooks[i]) {
      g_stuck_hooks[i] = fn;
      return;
    }
  }
}

static void log_stuck(ty_worker *w, ty_actor *running, size_t n) {
  if (!ty__log_enabled(TY_LOG_ERROR)) return;
  lt_actor *la = running ? running->user : NULL;
  char from[192] = "?";
  if (la) lt_origin(la, from, sizeof from);
  ty_pid pid = !la ? 0 : la->parent ? la->parent : running->pid;
  ty__logev e;
  ty__log_begin(&e, TY_LOG_ERROR, (int)ty_worker_id(w) + 1, pid, "stuck", 5);
  if (la && la->parent) ty__log_num(&e, "fork", (double)running->pid);
  ty__log_str(&e, "started", from, strlen(from));
  ty__log_num(&e, "actors", (double)n);
  static const char why[] = "code that cannot be interrupted (a compiled "
                            "loop) ran two slices; its worker's actors are "
                            "reported dead";
  static const char blocked[] = "blocked in a C call (a read, a write to a "
                                "full pipe, a poll, os.execute) for three "
                                "slices; its worker's actors are reported "
                                "dead";
  if (ty_worker_blocked(w))
    ty__log_str(&e, "reason", blocked, sizeof blocked - 1);
  else ty__log_str(&e, "reason", why, sizeof why - 1);
  ty__log_end(&e);
}

/* Tells a dead actor's monitors and links, frees its names, records why.
 * On the watchdog thread: C only, no Lua state. */
static void report_dead(unsigned wid, ty_actor *a, ty__buf *b) {
  lt_actor *la = a->user;
  const lt_rare *r = lt_rare_rd(la); /* published under w's lock, held */
  static const char reason[] = "stuck";
  size_t rlen = sizeof reason - 1;
  lt_names_drop_pid(a->pid); /* first, as in lexit.c: a restart finds it free */
  lt_grave_add(wid, a->pid, reason, rlen);
  ty__buf_reset(b);
  if (!lt_codec_put_string(b, "DOWN", 4) &&
      !lt_codec_put_number(b, (double)a->pid) &&
      !lt_codec_put_string(b, reason, rlen)) {
    for (uint32_t i = 0; i < r->monitors.n; i++)
      lt_send_raw_from(a->pid, r->monitors.v[i], LT_MSG, 0, b->data, b->len);
  }
  for (uint32_t i = 0; i < r->links.n; i++)
    lt_send_raw_from(a->pid, r->links.v[i], LT_SIG_EXIT, 0, reason, rlen);
  if (la->is_main) lt_ctx_get()->main_done(false, reason, rlen);
}

void lt_stuck_op(ty_worker *w, ty_actor *running, ty_actor **dead, size_t n,
                 void *ud) {
  (void)ud;
  unsigned wid = ty_worker_id(w);
  log_stuck(w, running, n);
  ty__buf b;
  ty__buf_init(&b);
  for (size_t i = 0; i < n; i++) report_dead(wid, dead[i], &b);
  ty__buf_free(&b);
  for (unsigned i = 0; i < 4 && g_stuck_hooks[i]; i++) g_stuck_hooks[i](wid);
}

/* Callers waiting on an actor that is gone now get "dead" (its worker can
 * no longer answer for it). */
static void wake_caller(ty_actor *a, void *ud) {
  (void)ud;
  lt_actor *la = a->user;
  if (la->wait != LT_W_CALL || !la->call_to) return;
  if (ty_pid_alive(lt_ctx_get()->rt, la->call_to)) return;
  lt_send_raw_from(la->call_to, a->pid, LT_REPLY_ERR, la->call_ref, "dead", 4);
}

void lt_peer_stuck_op(ty_worker *w, void *ud) {
  (void)ud;
  ty_worker_each_actor(w, wake_caller, NULL);
}
