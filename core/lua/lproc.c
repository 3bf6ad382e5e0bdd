/*
 * lproc.c - the process half of the Lua API: time, forks, names, monitors,
 * links, exits and kills, and the runtime's counters (tycho.stats).
 */
#include <math.h>
#include <string.h>

#include "base/log.h"
#include "lapi.h"
#include "lco.h"
#include "lexit.h"
#include "lmem.h"
#include "lnames.h"
#include "lpgstat.h"
#include "lpool.h"
#include "lproc.h"
#include "lstate.h"
#include "ltimer.h"

/* ---- time --------------------------------------------------------------- */

static int l_sleep(lua_State *L) {
  if (lua_type(L, 1) != LUA_TNUMBER)
    return luaL_error(L,
                      "tycho.sleep: bad argument #1 (expected seconds, got "
                      "%s)",
                      luaL_typename(L, 1));
  int64_t ns = lt_opt_timeout(L, 1, "sleep");
  lt_cur c = lt_current_blocking(L, "sleep");
  lt_wait_for(c, LT_W_SLEEP, ns, UINT64_MAX);
  return lua_yield(L, 0);
}

static int l_yield(lua_State *L) {
  lt_cur c = lt_current_blocking(L, "yield");
  c.la->wait = LT_W_YIELD;
  return lua_yield(L, 0);
}

static int l_now(lua_State *L) {
  lua_pushnumber(L, lt_now_s()); /* virtual under tycho.test.clock */
  return 1;
}

/* ---- fork --------------------------------------------------------------- */

/* A fork runs f(...) as another coroutine of the same actor, on its worker
 * (same Lua state: upvalues and arguments are shared, not copied). */
static int l_fork(lua_State *L) {
  lt_cur c = lt_current(L, "fork");
  if (lua_type(L, 1) != LUA_TFUNCTION)
    return luaL_error(L,
                      "tycho.fork: bad argument #1 (expected a function, "
                      "got %s)",
                      luaL_typename(L, 1));
  int n = lua_gettop(L);
  lua_createtable(L, n, 1);
  for (int i = 1; i <= n; i++) {
    lua_pushvalue(L, i);
    lua_rawseti(L, -2, i);
  }
  lua_pushinteger(L, n); /* arguments may be nil: keep the count */
  lua_setfield(L, -2, "n");
  lt_worker *lw = lt_worker_get();
  lua_xmove(L, lw->L, 1);
  lt_actor *la = lt_actor_new();
  if (!la) {
    lua_pop(lw->L, 1);
    return lt_push_fail(L, "nomem");
  }
  la->fn_kind = LT_FN_REF;
  la->fn_ref = luaL_ref(lw->L, LUA_REGISTRYINDEX);
  la->parent = lt_self_pid(c);
  lua_Debug ar;
  lua_pushvalue(L, 1);
  if (lua_getinfo(L, ">S", &ar)) {
    char buf[192];
    snprintf(buf, sizeof buf, "%s:%d", ar.short_src, ar.linedefined);
    lt_rare_get(la)->origin = strdup(buf);
  }
  ty_pid pid;
  if (ty_spawn_at(lt_ctx_get()->rt, ty_worker_id(ty_worker_current()), la,
                  &pid)) {
    luaL_unref(lw->L, LUA_REGISTRYINDEX, la->fn_ref);
    lt_actor_free(la);
    return luaL_error(L, "tycho.fork: the actor table is full");
  }
  la->pid = pid;
  lt_actor *top = lt_rare_rd(c.la)->parent_la;
  lt_fork_attach(top ? top : c.la, la);
  lua_pushnumber(L, (lua_Number)pid);
  return 1;
}

/* ---- names -------------------------------------------------------------- */

static int l_register(lua_State *L) {
  lt_cur c = lt_current(L, "register");
  const char *name = luaL_checkstring(L, 1);
  if (!*name) return luaL_error(L, "tycho.register: empty name");
  ty_pid pid =
      lua_isnoneornil(L, 2) ? lt_self_pid(c) : lt_check_dest(L, 2, "register");
  if (!pid || !ty_pid_alive(lt_ctx_get()->rt, pid))
    return lt_push_fail(L, "noproc");
  if (lt_names_register(name, pid)) return lt_push_fail(L, "taken");
  lua_pushboolean(L, 1);
  return 1;
}

static int l_whereis(lua_State *L) {
  const char *name = luaL_checkstring(L, 1);
  ty_pid pid = lt_ctx_get()->rt ? lt_names_lookup(name) : 0;
  if (pid && ty_pid_alive(lt_ctx_get()->rt, pid))
    lua_pushnumber(L, (lua_Number)pid);
  else lua_pushnil(L);
  return 1;
}

/* ---- links, monitors, exits --------------------------------------------- */

/* Why `to` is not alive: the reason it ended with when that is still known
 * (it may have ended an instant after its spawn), else "noproc". Pushed. */
static const char *push_gone_reason(lua_State *L, ty_pid to, size_t *len) {
  char *found = to ? lt_grave_find(to, len) : NULL;
  if (found) {
    lua_pushlstring(L, found, *len);
    free(found);
  } else {
    lua_pushliteral(L, "noproc");
  }
  return lua_tolstring(L, -1, len);
}

/* Sends (tag, who, reason) to the running actor: what a monitor or link
 * of a pid that is gone answers. `who` is the pid, or the argument as given
 * when it named nothing. */
static void self_gone(lua_State *L, lt_cur c, const char *tag, ty_pid to,
                      int reason_idx, const char *fname) {
  lua_pushstring(L, tag);
  if (to) lua_pushnumber(L, (lua_Number)to);
  else lua_pushvalue(L, 1);
  lua_pushvalue(L, reason_idx);
  ty_msg *m = lt_encode_msg(L, lua_gettop(L) - 2, 3, fname);
  lua_pop(L, 3);
  m->to = c.a->pid;
  if (ty_send(lt_ctx_get()->rt, m)) ty_msg_free(m);
}

static int l_monitor(lua_State *L) {
  lt_cur c = lt_current(L, "monitor");
  ty_pid to = lt_check_dest(L, 1, "monitor");
  if (!to || lt_send_raw(to, LT_SIG_MONITOR, 0, NULL, 0)) {
    size_t len;
    push_gone_reason(L, to, &len);
    self_gone(L, c, "DOWN", to, lua_gettop(L), "monitor");
  }
  lua_pushboolean(L, 1);
  return 1;
}

/* A link to a pid that is gone acts as if the link had been made in time:
 * its end reason (or "noproc", Erlang's rule for linking to nothing) ends
 * the caller unless it is "normal" or the caller traps exits. */
static int link_gone(lua_State *L, lt_cur c, ty_pid to) {
  size_t len;
  const char *reason = push_gone_reason(L, to, &len);
  bool normal = len == 6 && memcmp(reason, "normal", 6) == 0;
  if (c.la->trap_exit) self_gone(L, c, "EXIT", to, lua_gettop(L), "link");
  else if (!normal) return lt_exit_now(L, c.la, reason, len);
  lua_pushboolean(L, 1);
  return 1;
}

static int l_link(lua_State *L) {
  lt_cur c = lt_current(L, "link");
  ty_pid to = lt_check_dest(L, 1, "link");
  if (!to || (to != c.a->pid && lt_send_raw(to, LT_SIG_LINK, 0, NULL, 0)))
    return link_gone(L, c, to);
  if (to != c.a->pid) {
    lt_rare *r = lt_rare_get(c.la); /* takes the lock itself: not under it */
    ty_worker *w = ty_worker_current();
    ty_worker_lock(w); /* the watchdog may read links (lpreempt.c) */
    lt_pids_add(&r->links, to);
    ty_worker_unlock(w);
  }
  lua_pushboolean(L, 1);
  return 1;
}

static int l_unlink(lua_State *L) {
  lt_cur c = lt_current(L, "unlink");
  ty_pid to = lt_check_dest(L, 1, "unlink");
  ty_worker *w = ty_worker_current();
  ty_worker_lock(w); /* the watchdog may read links (lpreempt.c) */
  bool linked = to && c.la->rare && lt_pids_remove(&c.la->rare->links, to);
  ty_worker_unlock(w);
  if (linked) lt_send_raw(to, LT_SIG_UNLINK, 0, NULL, 0);
  lua_pushboolean(L, 1);
  return 1;
}

static int l_trap_exit(lua_State *L) {
  lt_cur c = lt_current(L, "trap_exit");
  bool old = c.la->trap_exit;
  c.la->trap_exit = lua_toboolean(L, 1);
  lua_pushboolean(L, old);
  return 1;
}

static const char *opt_reason(lua_State *L, int idx, const char *def,
                              size_t *len, const char *fname) {
  if (lua_isnoneornil(L, idx)) {
    *len = strlen(def);
    return def;
  }
  if (lua_type(L, idx) != LUA_TSTRING)
    luaL_error(L, "tycho.%s: the reason must be a string, got %s", fname,
               luaL_typename(L, idx));
  return lua_tolstring(L, idx, len);
}

/* tycho.exit ends the actor, also when a fork calls it. */
static int l_exit(lua_State *L) {
  lt_cur c = lt_current(L, "exit");
  size_t len;
  const char *reason = opt_reason(L, 1, "normal", &len, "exit");
  c.la->end_actor = c.la->parent != 0;
  return lt_exit_now(L, c.la, reason, len);
}

static int l_kill(lua_State *L) {
  lt_cur c = lt_current(L, "kill");
  ty_pid to = lt_check_dest(L, 1, "kill");
  size_t len;
  const char *reason = opt_reason(L, 2, "killed", &len, "kill");
  if (to && (to == lt_self_pid(c) || to == c.a->pid)) {
    c.la->end_actor = c.la->parent != 0 && to == lt_self_pid(c);
    return lt_exit_now(L, c.la, reason, len);
  }
  if (!to || lt_send_raw(to, LT_SIG_KILL, 0, reason, len))
    return lt_push_fail(L, "noproc");
  /* If it is running on another worker now, stop it there (lpreempt.c);
   * otherwise the signal ends it before it runs again. */
  ty_interrupt_pid(lt_ctx_get()->rt, to);
  lua_pushboolean(L, 1);
  return 1;
}

/* core._fork_cancel(pid): ends a fork of the caller's actor as if it had
 * returned, so that the actor goes on (a kill would end it: lexit.c
 * finish). ngx.thread.kill uses it. A pid that is not such a fork is left
 * alone (lexit.c handle_signal). */
static int l_fork_cancel(lua_State *L) {
  lt_cur c = lt_current(L, "_fork_cancel");
  ty_pid to = lt_check_dest(L, 1, "_fork_cancel");
  ty_pid root = lt_self_pid(c);
  if (to == c.a->pid)
    luaL_error(L, "_fork_cancel: a fork cannot cancel itself");
  if (!to || to == root || lt_send_raw(to, LT_SIG_CANCEL, root, NULL, 0))
    return lt_push_fail(L, "noproc");
  lua_pushboolean(L, 1);
  return 1;
}

/* ---- stats -------------------------------------------------------------- */

/* clang-format off */
#define STAT_FIELDS(X)                                                         \
  X(polls) X(lifo_hits) X(steals) X(stolen) X(parks) X(unparks)                \
  X(mesh_sent) X(mesh_received) X(inject_pops) X(spawns_placed)                \
  X(spawns_remote) X(actors) X(preempts) X(stuck) X(mailbox)               \
  X(mailbox_bytes) X(sends_full) X(delivered) X(run_queue)
/* clang-format on */

static int l_stats(lua_State *L) {
  if (!lt_ctx_get()->rt)
    return luaL_error(L, "tycho.stats: the runtime is not running");
  unsigned n = ty_runtime_workers(lt_ctx_get()->rt);
  ty_worker_stats total = {0};
  size_t lua_total = 0;
  lua_createtable(L, (int)n, 16);
  for (unsigned i = 0; i < n; i++) {
    ty_worker_stats s;
    ty_worker_stats_get(lt_ctx_get()->rt, i, &s);
    lua_createtable(L, 0, 12);
#define SET(f)                                                                 \
  lua_pushnumber(L, (lua_Number)s.f);                                          \
  lua_setfield(L, -2, #f);                                                     \
  total.f += s.f;
    STAT_FIELDS(SET)
#undef SET
    lua_pushnumber(L, (lua_Number)s.mailbox_hwm); /* a maximum, not a sum */
    lua_setfield(L, -2, "mailbox_hwm");
    lua_pushnumber(L, (lua_Number)lt_heap_used(i));
    lua_setfield(L, -2, "lua_memory");
    lua_total += lt_heap_used(i);
    if (s.mailbox_hwm > total.mailbox_hwm) total.mailbox_hwm = s.mailbox_hwm;
    lua_rawseti(L, -2, (int)i + 1);
  }
  lua_pushnumber(L, (lua_Number)total.mailbox_hwm);
  lua_setfield(L, -2, "mailbox_hwm");
  lua_pushnumber(L, (lua_Number)lua_total);
  lua_setfield(L, -2, "lua_memory");
  lua_pushnumber(L, (lua_Number)lt_mem_total());
  lua_setfield(L, -2, "memory");
  lua_pushnumber(L, (lua_Number)lt_ctx_get()->run_max_memory);
  lua_setfield(L, -2, "max_memory");
#define SETT(f)                                                                \
  lua_pushnumber(L, (lua_Number)total.f);                                      \
  lua_setfield(L, -2, #f);
  STAT_FIELDS(SETT)
#undef SETT
  lua_pushnumber(L, n);
  lua_setfield(L, -2, "workers");
  /* Coroutines held by actors: an idle tycho.server holds none. */
  lua_pushnumber(L, (lua_Number)lt_co_live(n));
  lua_setfield(L, -2, "coroutines");
  /* Log events dropped because the log's queue was full (process-wide). */
  lua_pushnumber(L, (lua_Number)ty__log_dropped());
  lua_setfield(L, -2, "log_dropped");
  lt_pool_stats_push(L);
  lua_setfield(L, -2, "pool");
  lt_pg_stats_push(L); /* tycho.pg's pools (lpgstat.c) */
  lua_setfield(L, -2, "pg");
  if (lt_ctx_get()->cluster && lt_ctx_get()->cluster->stats &&
      lt_ctx_get()->cluster->stats(L))
    lua_setfield(L, -2, "cluster");
  return 1;
}

static const luaL_Reg funcs[] = {{"sleep", l_sleep},
                                 {"now", l_now},
                                 {"yield", l_yield},
                                 {"fork", l_fork},
                                 {"register", l_register},
                                 {"whereis", l_whereis},
                                 {"monitor", l_monitor},
                                 {"link", l_link},
                                 {"unlink", l_unlink},
                                 {"trap_exit", l_trap_exit},
                                 {"exit", l_exit},
                                 {"kill", l_kill},
                                 {"stats", l_stats},
                                 {"_fork_cancel", l_fork_cancel},
                                 {NULL, NULL}};

void lt_open_proc(lua_State *L) { luaL_register(L, NULL, funcs); }
