/*
 * lchild.c - what tycho.supervisor (lua/tycho/supervisor.lua) needs from the
 * core: a spawn that links and names the child before it can run, a
 * function as a number that a child spec can carry in a message, and an
 * exit signal with a reason.
 *
 *   _spawn_child({name=, supervised=, ack=}, f | module | fn_id, args...)
 *       -> pid | nil, "taken"
 *       ack: the child sends ("tycho.supervisor:ack", pid, ended) to the
 *       caller once its first run is over (it waited, yielded or ended:
 *       ended is true then)
 *   _fn_id(f) -> number        _exit_signal(pid, reason) -> true | nil, err
 *
 * A child spawned with a plain tycho.spawn then registered and linked would
 * race its own start: on another worker it may run, call its name or crash
 * before the next line of its parent. Here the link is in both actors'
 * link sets and the name in the table before the request is placed
 * (ty_spawn_hook), so none of that can happen first.
 */
#include <errno.h>
#include <string.h>

#include "lapi.h"
#include "lchild.h"
#include "lnames.h"

static int register_name(ty_pid pid, void *ctx) {
  return lt_names_register(ctx, pid) ? -EEXIST : 0;
}

/* The request for f at index 2: a function, a module name, or an id. */
static lt_actor *child_request(lua_State *L) {
  if (lua_type(L, 2) != LUA_TNUMBER) return lt_spawn_request(L, 2, 3, "spawn");
  lt_fn *fn = lt_fn_by_id(lua_tonumber(L, 2));
  if (!fn) luaL_error(L, "tycho.supervisor: unknown function id");
  return lt_spawn_request_fn(L, fn, lt_fn_kind(fn), 3, "spawn");
}

static int l_spawn_child(lua_State *L) {
  lt_cur c = lt_current(L, "supervisor");
  const char *name = NULL;
  bool supervised = false, ack = false;
  if (lua_istable(L, 1)) {
    lua_getfield(L, 1, "supervised");
    supervised = lua_toboolean(L, -1);
    lua_getfield(L, 1, "ack");
    ack = lua_toboolean(L, -1);
    lua_pop(L, 2);
    lua_getfield(L, 1, "name");
    name = lua_tostring(L, -1); /* stays on the stack: anchored */
    lua_replace(L, 1);
  }
  if (name && !*name) return luaL_error(L, "tycho.supervisor: empty name");
  lt_actor *top = lt_rare_rd(c.la)->parent_la ? c.la->rare->parent_la : c.la;
  lt_actor *la = child_request(L);
  if (!la) return lt_push_fail(L, "nomem");
  la->supervised = supervised;
  if (ack) lt_rare_get(la)->ack_to = top->pid;
  lt_pids_add(&lt_rare_get(la)->links, top->pid); /* linked before it exists */
  ty_pid pid;
  int r = ty_spawn_hook(lt_ctx_get()->rt, la, &pid, name ? register_name : NULL,
                        (void *)name);
  if (r) {
    if (la->spawn) lt_codec_release(la->spawn, la->spawn_len);
    lt_actor_free(la);
    if (r == -EEXIST) return lt_push_fail(L, "taken");
    if (r == -ENOMEM) return lt_push_fail(L, "nomem");
    return luaL_error(L, "tycho.supervisor: the actor table is full");
  }
  lt_pids_add(&lt_rare_get(top)->links, pid);
  lua_pushnumber(L, (lua_Number)pid);
  return 1;
}

static int l_fn_id(lua_State *L) {
  lt_current(L, "supervisor");
  luaL_checktype(L, 1, LUA_TFUNCTION);
  lua_pushnumber(L, lt_fn_id(lt_fn_of(L, 1, "supervisor")));
  return 1;
}

/* An exit signal from the caller: the receiver acts on it only if it is
 * linked to the caller (it ends with the reason unless it traps exits; a
 * trapping one gets ("EXIT", caller, reason)). */
static int l_exit_signal(lua_State *L) {
  lt_cur c = lt_current(L, "supervisor");
  ty_pid to = lt_check_dest(L, 1, "supervisor");
  size_t len;
  const char *reason = luaL_checklstring(L, 2, &len);
  if (!to || lt_send_raw_from(lt_self_pid(c), to, LT_SIG_EXIT, 0, reason, len))
    return lt_push_fail(L, "noproc");
  lua_pushboolean(L, 1);
  return 1;
}

static const luaL_Reg funcs[] = {{"_spawn_child", l_spawn_child},
                                 {"_fn_id", l_fn_id},
                                 {"_exit_signal", l_exit_signal},
                                 {NULL, NULL}};

void lt_open_child(lua_State *L) { luaL_register(L, NULL, funcs); }
