/*
 * lexit.c - the end of a Lua actor: what its monitors, links, forks and
 * waiting callers are told, the signals that end it (kill, a linked exit),
 * its destruction, and messages that reached no live actor.
 */
#include <string.h>

#include "base/alloc.h"
#include "base/log.h"
#include "lactor.h"
#include "lco.h"
#include "ldirect.h"
#include "lexit.h"
#include "lguard.h"
#include "lmem.h"
#include "lnames.h"
#include "lsend.h"
#include "lstate.h"
#include "ltrace.h"

/* ---- the end of an actor ------------------------------------------------ */

/* Sends (tag, pid, reason) as an ordinary message, encoded in C: telling
 * others about an end touches no Lua state, so nothing there can fail. */
static void send_notice(ty_pid to, const char *tag, ty_pid pid,
                        const char *reason, size_t rlen) {
  ty__buf *b = &lt_worker_get()->buf;
  ty__buf_reset(b);
  if (lt_codec_put_string(b, tag, strlen(tag)) ||
      lt_codec_put_number(b, (double)pid) ||
      lt_codec_put_string(b, reason, rlen))
    return; /* out of memory: nothing sensible to send */
  lt_send_raw(to, LT_MSG, 0, b->data, b->len);
}

/* Tells monitors, links, forks, owed callers and the name table. */
static void notify_exit(ty_actor *a, lt_actor *la, const char *reason,
                        size_t rlen) {
  /* Names go first: whoever hears of the end (a supervisor restarting the
   * actor under the same name) finds the name free. */
  lt_names_drop_pid(a->pid);
  if (lt_ctx_get()->cluster && lt_ctx_get()->cluster->actor_exit)
    lt_ctx_get()->cluster->actor_exit(a->pid);
  lt_grave_add(ty_worker_id(ty_worker_current()), a->pid, reason, rlen);
  const lt_rare *r = lt_rare_rd(la);
  for (uint32_t i = 0; i < r->monitors.n; i++)
    lt_send_down(r->monitors.v[i], a->pid, reason, rlen);
  for (uint32_t i = 0; i < r->links.n; i++)
    lt_send_raw(r->links.v[i], LT_SIG_EXIT, 0, reason, rlen);
  for (lt_actor *f = lt_forks_orphan(la); f; f = f->rare->fork_next)
    lt_send_raw(f->pid, LT_SIG_KILL, 0, reason, rlen);
  for (uint32_t i = 0; i < la->nowed; i++)
    lt_send_reply_err(la->owed[i].to, la->owed[i].ref, "dead");
  la->nowed = 0;
}

static void finish(ty_actor *a, lt_actor *la, bool ok, const char *reason,
                   size_t rlen) {
  la->finished = true;
  if (ty__unlikely(la->trace & LT_TR_EXIT)) lt_trace_exit(la, reason, rlen);
  lt_actor *parent = lt_rare_rd(la)->parent_la;
  if (parent) {
    lt_fork_detach(la);
    /* A fork is part of its actor: its failure, or its tycho.exit, ends
     * the actor (which then ends its other forks). */
    if (!ok || la->end_actor)
      lt_send_raw(parent->pid, LT_SIG_KILL, 0, reason, rlen);
  }
  notify_exit(a, la, reason, rlen);
}

/* ---- error reports ------------------------------------------------------ */

/* Under lua_pcall on the worker's state: [co, error value] -> the text
 * of the error with co's traceback. */
static int build_report(lua_State *L) {
  lua_State *co = lua_tothread(L, 1);
  luaL_traceback(L, co, lt_error_text(L, 2), 0);
  return 1;
}

/* Leaves the report on top of co (whose error value it replaces). Raises
 * only when memory runs out twice (the caller's protection handles it). */
static void report_error(ty_actor *a, lua_State *co, const char **msg,
                         size_t *len) {
  lua_State *L = lt_worker_get()->L;
  lt_actor *la = a->user;
  lua_pushcfunction(L, build_report);
  lua_rawgeti(L, LUA_REGISTRYINDEX, la->co_ref);
  lua_xmove(co, L, 1);
  if (lua_pcall(L, 2, 1, 0)) {
    lua_pop(L, 1); /* out of memory in the traceback: try it shorter */
    lua_pushcfunction(L, build_report);
    lua_rawgeti(L, LUA_REGISTRYINDEX, la->co_ref);
    lua_pushliteral(L, "(the error could not be reported: out of memory)");
    if (lua_pcall(L, 2, 1, 0)) lua_error(L);
  }
  lua_xmove(L, co, 1);
  *msg = lua_tolstring(co, -1, len);
  /* The main actor's error goes to the caller of tycho.run instead. */
  if (la->is_main) return;
  if (!ty__log_enabled(TY_LOG_ERROR)) return;
  ty__logev e;
  ty__log_begin(&e, TY_LOG_ERROR, (int)ty_worker_id(ty_worker_current()) + 1,
                la->parent ? la->parent : a->pid, "crash", 5);
  if (la->parent) ty__log_num(&e, "fork", (double)a->pid);
  ty__log_str(&e, "reason", *msg, *len);
  ty__log_end(&e);
}

/* The coroutine returned: main actors hand their results to tycho.run (the
 * launcher's script has no caller to take them). */
int lt_on_return(ty_actor *a, lt_actor *la) {
  if (la->is_main && la->fn_kind == LT_FN_FILE) {
    lt_ctx_get()->main_done(true, "", 0);
  } else if (la->is_main) {
    lt_worker *lw = lt_worker_get();
    char err[256];
    int n = lua_gettop(la->co);
    ty__buf_reset(&lw->buf);
    if (lt_codec_encode(la->co, 1, n, &lw->buf, SIZE_MAX, err, sizeof err)) {
      char msg[300];
      snprintf(msg, sizeof msg, "tycho.run: cannot return the results: %s",
               err);
      lt_ctx_get()->main_done(false, msg, strlen(msg));
    } else {
      lt_ctx_get()->main_done(true, lw->buf.data, lw->buf.len);
    }
  }
  finish(a, la, true, "normal", 6);
  return TY_DONE;
}

/* A main actor that ended without returning: tycho.exit() (or a "normal"
 * kill) returns nothing from tycho.run; any other reason is raised there. */
static void main_ended(lt_actor *la, bool normal, const char *reason,
                       size_t len) {
  if (!la->is_main) return;
  if (normal) lt_ctx_get()->main_done(true, "", 0);
  else lt_ctx_get()->main_done(false, reason, len);
}

/* The actor called tycho.exit (or linked to something gone): it ends with
 * that reason, also when a pcall caught the error exit raised and the actor
 * went on until its next wait or its return. */
int lt_exited(ty_actor *a, lt_actor *la) {
  const char *msg = la->rare->exit_reason;
  size_t len = la->rare->exit_len;
  bool normal = len == 6 && memcmp(msg, "normal", 6) == 0;
  main_ended(la, normal, msg, len);
  finish(a, la, normal, msg, len);
  return TY_DONE;
}

int lt_on_error(ty_actor *a, lt_actor *la) {
  if (lt_rare_rd(la)->exit_reason) return lt_exited(a, la);
  const char *msg;
  size_t len;
  report_error(a, la->co, &msg, &len);
  main_ended(la, false, msg, len);
  finish(a, la, false, msg, len);
  return TY_DONE;
}

int lt_exit_now(lua_State *L, lt_actor *la, const char *reason, size_t len) {
  lt_rare *r = lt_rare_get(la);
  if (!r->exit_reason) { /* a second exit (after a pcall) keeps the first */
    r->exit_reason = ty__xmalloc(len + 1);
    memcpy(r->exit_reason, reason, len);
    r->exit_reason[len] = 0;
    r->exit_len = len;
  }
  lua_pushfstring(L, "tycho.exit: %s", r->exit_reason);
  return lua_error(L);
}

/* Ends an actor from outside its coroutine (kill, linked exit), suspended
 * or not started yet. */
int lt_die_now(ty_actor *a, lt_actor *la, const char *reason, size_t len) {
  main_ended(la, len == 6 && memcmp(reason, "normal", 6) == 0, reason, len);
  finish(a, la, false, reason, len);
  return TY_DONE;
}

/* A fork cancelled by its own actor ends quietly, as if it had returned:
 * its actor goes on (ngx.thread.kill, lua/tycho/ngx_thread.lua). */
int lt_end_by_signal(ty_actor *a, lt_actor *la, ty_msg *m) {
  if (m->kind != LT_SIG_CANCEL) return lt_die_now(a, la, m->data, m->len);
  finish(a, la, true, "normal", 6);
  return TY_DONE;
}

int lt_memory_death(ty_actor *a, lt_actor *la) {
  if (ty__log_enabled(TY_LOG_ERROR)) {
    ty__logev e;
    ty__log_begin(&e, TY_LOG_ERROR, (int)ty_worker_id(ty_worker_current()) + 1,
                  la->parent ? la->parent : a->pid, "ended: memory", 13);
    ty__log_num(&e, "charged", (double)lt_charge_of(la)->mem);
    ty__log_num(&e, "process", (double)lt_mem_total());
    ty__log_end(&e);
  }
  return lt_die_now(a, la, "memory", 6);
}

/* ---- signals ------------------------------------------------------------ */

static void trapped_exit(ty_actor *a, ty_msg *m) {
  send_notice(a->pid, "EXIT", m->from, m->data, m->len);
}

/* Handles one signal; returns true if the actor must die (reason in m). */
/* Links and monitors change under the worker's watchdog lock: the watchdog
 * reads them when it reports a stuck worker's actors (lpreempt.c). */
static void set_add(lt_pids *p, ty_pid pid) {
  ty_worker *w = ty_worker_current();
  ty_worker_lock(w);
  lt_pids_add(p, pid);
  ty_worker_unlock(w);
}

static bool set_remove(lt_pids *p, ty_pid pid) {
  ty_worker *w = ty_worker_current();
  ty_worker_lock(w);
  bool had = lt_pids_remove(p, pid);
  ty_worker_unlock(w);
  return had;
}

static bool handle_signal(ty_actor *a, lt_actor *la, ty_msg *m) {
  switch (m->kind) {
  case LT_SIG_LINK: set_add(&lt_rare_get(la)->links, m->from); return false;
  case LT_SIG_UNLINK:
    if (la->rare) set_remove(&la->rare->links, m->from);
    return false;
  case LT_SIG_MONITOR:
    set_add(&lt_rare_get(la)->monitors, m->from);
    return false;
  case LT_SIG_KILL: return true;
  case LT_SIG_CANCEL: /* only a fork, only from its own actor */
    return la->parent != 0 && m->ref == la->parent;
  case LT_SIG_EXIT: {
    if (!la->rare || !set_remove(&la->rare->links, m->from))
      return false; /* unlinked */
    bool normal = m->len == 6 && memcmp(m->data, "normal", 6) == 0;
    if (la->trap_exit) trapped_exit(a, m);
    return !la->trap_exit && !normal;
  }
  }
  return false;
}

/* Processes every signal in the mailbox. Returns a message that kills the
 * actor (the caller frees it), or NULL. */
ty_msg *lt_process_signals(ty_actor *a, lt_actor *la) {
  ty_msg *prev = NULL, *m = ty_mbox_first(a);
  while (m && a->mbox.signals) {
    ty_msg *next = ty_mbox_next(m);
    if (m->kind >= TY_MSG_SIGNAL) {
      ty_mbox_remove(a, prev, m);
      if (handle_signal(a, la, m)) return m;
      ty_msg_free(m);
    } else {
      prev = m;
    }
    m = next;
  }
  return NULL;
}

void lt_destroy(ty_actor *a, ty_worker *w, void *ud) {
  (void)ud;
  lt_actor *la = a->user;
  /* A pending ext op (ext_cancel is cleared when its wake function or the
   * next resume takes it) holds a reference of its own: drop it whatever
   * the wait says (at a stop the actor can be found between setting it and
   * its wait; shutdown_spec). */
  if (w && lt_rare_rd(la)->ext_cancel) la->rare->ext_cancel(a, la);
  while (w && lt_rare_rd(la)->resources) {
    lt_res *r = la->rare->resources;
    lt_res_remove(la, r);
    r->close(r);
  }
  /* At a stop, actors are destroyed without finish(): keep the fork
   * pointers of the survivors valid. */
  lt_fork_detach(la);
  lt_forks_orphan(la);
  if (w && la->co_ref != LUA_NOREF) lt_co_end(ty_worker_data(w), la);
  if (w && la->srv_fn != LUA_NOREF)
    lt_serve_drop(((lt_worker *)ty_worker_data(w))->L, la);
  if (w && la->fn_ref != LUA_NOREF) {
    lt_worker *lw = ty_worker_data(w);
    luaL_unref(lw->L, LUA_REGISTRYINDEX, la->fn_ref);
  }
  /* An actor ended for its memory: give that memory back now, when it held
   * much of it (a spawn bomb's actors end by the thousand, each holding a
   * little: a full collection each would hold their worker for minutes). */
  if (w && la->charge.doomed && lt_mem_held_much(&la->charge)) {
    lt_worker *lw = ty_worker_data(w);
    lt_mem_collect(lw->L);
    lt_heap_publish(w, &lw->heap);
  }
  if (la->is_main) lt_ctx_get()->main_done(false, "stopped", 7);
  /* Handles (connections, listeners) in a request that never started, or
   * in a message whose decoding raised, would never be taken: close them
   * (a handle taken already is not taken twice: ltcp_transit.c). */
  if (la->spawn) lt_codec_release(la->spawn, la->spawn_len);
  if (la->inflight) lt_msg_release(la->inflight);
  lt_actor_free(la);
}

/* A message found no live receiver: a caller learns at once instead of
 * waiting for its timeout; a link or monitor gets the reason the actor ended
 * with (as if it had been seen in time), or "noproc". The link's exit signal
 * must come from the pid that was linked, or the linker would not recognise
 * it. */
void lt_undeliverable(ty_msg *m, ty_worker *w, void *ud) {
  (void)ud;
  (void)w; /* any thread: the watchdog drains a stuck worker's messages */
  if (m->kind == LT_MSG || m->kind == LT_CALL || m->kind == LT_REPLY) {
    /* Connections inside close now, not when the runtime stops. */
    lt_msg_release(m);
  }
  if (!m->from) return;
  if (m->kind == LT_CALL) {
    lt_send_reply_err(m->from, m->ref,
                      m->aux & LT_AUX_NOPROC ? "noproc" : "dead");
    return;
  }
  if (m->kind != LT_SIG_LINK && m->kind != LT_SIG_MONITOR) return;
  size_t len = 6;
  char *found = lt_grave_find(m->to, &len);
  const char *reason = found ? found : "noproc";
  if (m->kind == LT_SIG_LINK) {
    lt_send_raw_from(m->to, m->from, LT_SIG_EXIT, 0, reason, len);
  } else {
    lt_send_down(m->from, m->to, reason, len);
  }
  free(found);
}

/* ---- errors of the runtime's own Lua work -------------------------------- */

int lt_runtime_error(ty_actor *a, lt_actor *la, lua_State *L, int status) {
  char reason[300];
  if (status == LUA_ERRMEM) {
    snprintf(reason, sizeof reason, "memory");
  } else if (lua_type(L, -1) == LUA_TSTRING) {
    snprintf(reason, sizeof reason,
             "tycho: error outside the actor's code (a __gc metamethod that "
             "failed?): %s",
             lua_tostring(L, -1));
  } else { /* raised on the actor's coroutine: the value stayed there */
    snprintf(reason, sizeof reason,
             "tycho: error outside the actor's code (a __gc metamethod that "
             "failed?)");
  }
  lua_pop(L, 1);
  if (la->inflight) { /* a message being decoded when it failed */
    if (lt_msg_direct(la->inflight)) lt_msg_release(la->inflight);
    ty_msg_free(la->inflight);
    la->inflight = NULL;
  }
  if (la->finished) return TY_DONE;
  ty__logf(TY_LOG_ERROR, (int)ty_worker_id(ty_worker_current()) + 1,
           la->parent ? la->parent : a->pid, "ended: %s", reason);
  return lt_die_now(a, la, reason, strlen(reason));
}
