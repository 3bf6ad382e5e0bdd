/*
 * lserve.c - the C half of tycho.server (lua/tycho/server.lua): a server
 * holds no coroutine while it waits for its next message.
 *
 * An actor is a coroutine (lactor.c). A server's actor function calls
 * tycho.core._serve(dispatch, state) once init is done and returns: instead
 * of ending the actor, lt_resume keeps the two values in the registry, gives
 * the returned coroutine to the worker's pool and waits (LT_W_SERVE). What
 * an idle server costs is then its lt_actor, its ty_actor, two registry
 * slots and its state. A message takes a coroutine from the pool (LuaJIT
 * resumes a coroutine whose function returned: it starts the function on
 * its stack) and runs dispatch(state, is_call, values...) there. A handler
 * that blocks (call, sleep, sockets) keeps that coroutine until it returns
 * its handler's pcall results: when the handler succeeded, its values
 * answer the call here, in C (cheaper than a tycho.reply and a check in
 * Lua). A code change replaces dispatch and state with _serve_set. When it
 * failed, the error goes back to dispatch at the next run, as
 * dispatch(state, nil, err): terminate runs and the coroutine fails, ending
 * the actor as any actor's error does (that coroutine is not pooled).
 */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "lapi.h"
#include "lco.h"
#include "lexit.h"
#include "lserve.h"
#include "lstate.h"

/* Answers the call the handler ran for with co[2..top]; false when the
 * values cannot be copied (the reason is in err). */
static bool send_reply(lt_actor *la, lua_State *co, char *err, size_t errlen) {
  int i = lt_owed_last(la);
  if (i < 0) return true; /* answered already (tycho.reply in the handler) */
  lt_owed o = la->owed[i];
  lt_owed_remove(la, o.to, o.ref);
  ty_msg *m;
  if (lt_msg_make(co, o.to, false, 2, lua_gettop(co) - 1, &m, err, errlen)) {
    lt_send_reply_err(o.to, o.ref, "dead");
    return false;
  }
  if (!m) return true; /* out of memory: the caller times out */
  m->to = o.to;
  m->kind = LT_REPLY;
  m->ref = o.ref;
  if (ty_send(lt_worker_get()->ctx->rt, m)) {
    if (lt_msg_direct(m)) lt_msg_release(m);
    ty_msg_free(m);
  }
  return true;
}

int lt_serve_idle(ty_actor *a, lt_actor *la) {
  lt_worker *lw = lt_worker_get();
  lua_State *co = la->co;
  /* dispatch returns ok, values | err (the actor function after _serve
   * returns nothing). */
  bool failed = false;
  if (lua_gettop(co) >= 1 && lua_type(co, 1) == LUA_TBOOLEAN) {
    failed = !lua_toboolean(co, 1);
    bool call = la->srv_call;
    la->srv_call = false;
    if (failed) { /* kept for dispatch; the call stays owed ("dead") */
      lua_settop(co, 2);
      if (lua_isnil(co, 2)) {
        lua_pop(co, 1);
        lua_pushliteral(co, "nil");
      }
      lt_rare *r = lt_rare_get(la);
      r->srv_err = luaL_ref(co, LUA_REGISTRYINDEX);
    } else if (call) {
      char err[256];
      if (!send_reply(la, co, err, sizeof err)) {
        char reason[300];
        snprintf(reason, sizeof reason,
                 "tycho.server: the reply cannot be copied: %s", err);
        return lt_die_now(a, la, reason, strlen(reason));
      }
    }
  }
  lt_co_give_back(lw, la);
  la->wait = LT_W_SERVE;
  /* A message that came while the handler ran would not wake it again. */
  if (failed || a->mbox.len) return TY_YIELD;
  ty_actor_wait(a, -1, 0);
  return TY_WAIT;
}

/* A handler failed: dispatch(state, nil, err) runs terminate and fails. */
static int wake_failed(lt_actor *la) {
  lt_co_take(lt_worker_get(), la);
  lua_State *co = la->co;
  lua_rawgeti(co, LUA_REGISTRYINDEX, la->srv_fn);
  lua_rawgeti(co, LUA_REGISTRYINDEX, la->srv_state);
  lua_pushnil(co);
  lua_rawgeti(co, LUA_REGISTRYINDEX, la->rare->srv_err);
  luaL_unref(co, LUA_REGISTRYINDEX, la->rare->srv_err);
  la->rare->srv_err = LUA_NOREF;
  return 3;
}

int lt_serve_wake(ty_actor *a, lt_actor *la) {
  if (lt_rare_rd(la)->srv_err != LUA_NOREF) return wake_failed(la);
  ty_msg *m = lt_take_msg(a);
  if (!m) {
    ty_actor_wait(a, -1, 0);
    return -1;
  }
  lt_co_take(lt_worker_get(), la);
  lua_State *co = la->co;
  lua_rawgeti(co, LUA_REGISTRYINDEX, la->srv_fn);
  lua_rawgeti(co, LUA_REGISTRYINDEX, la->srv_state);
  lua_pushboolean(co, m->kind == LT_CALL);
  la->srv_call = m->kind == LT_CALL;
  if (la->srv_call) lt_owed_push(la, m->from, m->ref);
  return 2 + lt_decode_msg(co, la, m);
}

/* tycho.core._serve(dispatch, state) -> module name | nil: the running
 * actor becomes a server once its function returns (server.lua). */
static int l_serve(lua_State *L) {
  lt_cur c = lt_current_blocking(L, "server");
  if (c.la->parent) return luaL_error(L, "tycho.server: not in a fork");
  if (c.la->srv_fn != LUA_NOREF)
    return luaL_error(L, "tycho.server: this actor is a server already");
  luaL_checktype(L, 1, LUA_TFUNCTION);
  if (lua_isnoneornil(L, 2))
    return luaL_error(L, "tycho.server: the state cannot be nil");
  lua_settop(L, 2);
  c.la->srv_state = luaL_ref(L, LUA_REGISTRYINDEX);
  c.la->srv_fn = luaL_ref(L, LUA_REGISTRYINDEX);
  size_t len;
  const char *name = c.la->fn_kind == LT_FN_MODULE && c.la->fn
                         ? lt_fn_name(c.la->fn, &len)
                         : NULL;
  if (name) lua_pushlstring(L, name, len);
  else lua_pushnil(L);
  return 1;
}

/* tycho.core._serve_set(dispatch, state): a code change (server.lua). */
static int l_serve_set(lua_State *L) {
  lt_cur c = lt_current(L, "server");
  if (c.la->srv_fn == LUA_NOREF)
    return luaL_error(L, "tycho.server: this actor is not a server");
  luaL_checktype(L, 1, LUA_TFUNCTION);
  if (lua_isnoneornil(L, 2))
    return luaL_error(L, "tycho.server: the state cannot be nil");
  lua_settop(L, 2);
  lua_rawseti(L, LUA_REGISTRYINDEX, c.la->srv_state);
  lua_rawseti(L, LUA_REGISTRYINDEX, c.la->srv_fn);
  return 0;
}

static const luaL_Reg funcs[] = {{"_serve", l_serve},
                                 {"_serve_set", l_serve_set},
                                 {NULL, NULL}};

void lt_open_serve(lua_State *L) { luaL_register(L, NULL, funcs); }
