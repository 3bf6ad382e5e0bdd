/*
 * ltimer.c - timers that send messages, on the worker's wheel (core
 * ty_timer_send):
 *
 *   tycho.send_after(seconds, dest, ...) -> t
 *   tycho.interval(seconds, dest, ...)   -> t   (fixed rate: k * seconds)
 *   tycho.cancel(t) -> true if it was pending, else false
 *
 * The message is copied when the timer starts (as tycho.send would) and
 * arrives from the actor that started the timer. The timer belongs to that
 * actor (a fork's timers to its actor): it ends with it, and only it can
 * cancel it. A name as dest is looked up when the timer fires, so a timer
 * to "store" reaches the store that holds the name then.
 */
#include <math.h>
#include <string.h>

#include "lapi.h"
#include "lnames.h"
#include "ltimer.h"

/* The owner of the caller's timers: the actor (a fork's is its actor). */
static ty_actor *owner_of(lt_cur c) {
  return c.la->parent ? ty_actor_local(c.la->parent) : c.a;
}

static int start_timer(lua_State *L, const char *fname, bool repeat) {
  lt_cur c = lt_current(L, fname);
  if (lua_type(L, 1) != LUA_TNUMBER)
    return luaL_error(L, "tycho.%s: bad argument #1 (expected seconds, got %s)",
                      fname, luaL_typename(L, 1));
  lua_Number s = lua_tonumber(L, 1);
  if (repeat ? !(s > 0) : !(s >= 0))
    return luaL_error(L, "tycho.%s: seconds must be %s", fname,
                      repeat ? "> 0" : ">= 0");
  if (s > 1e9) s = 1e9;
  ty_pid to = 0;
  uint32_t atom = 0;
  if (lua_type(L, 2) == LUA_TSTRING) {
    atom = lt_names_atom(lua_tostring(L, 2));
    if (!atom) return luaL_error(L, "tycho.%s: too many names", fname);
  } else {
    to = lt_check_dest(L, 2, fname);
  }
  ty_msg *m = lt_encode_msg(L, 3, lua_gettop(L) - 2, fname);
  m->kind = LT_MSG;
  m->to = to;
  m->aux = atom;
  if (repeat && lt_codec_has_handles(m->data, m->len)) {
    lt_codec_release(m->data, m->len);
    ty_msg_free(m);
    return luaL_error(L,
                      "tycho.%s: a connection can move only once, so it "
                      "cannot ride an interval (send it with tycho.send or "
                      "tycho.send_after)",
                      fname);
  }
  uint64_t ns = (uint64_t)(s * 1e9);
  int64_t id = ty_timer_send(owner_of(c), m, ns, repeat ? ns : 0);
  if (id < 0) {
    lt_codec_release(m->data, m->len);
    ty_msg_free(m);
    return luaL_error(L, "tycho.%s: too many timers on this worker", fname);
  }
  lua_pushnumber(L, (lua_Number)id);
  return 1;
}

static int l_send_after(lua_State *L) {
  return start_timer(L, "send_after", false);
}

static int l_interval(lua_State *L) { return start_timer(L, "interval", true); }

static int l_cancel(lua_State *L) {
  lt_cur c = lt_current(L, "cancel");
  if (lua_type(L, 1) != LUA_TNUMBER)
    return luaL_error(L,
                      "tycho.cancel: bad argument #1 (expected a timer from "
                      "send_after or interval, got %s)",
                      luaL_typename(L, 1));
  lua_Number v = lua_tonumber(L, 1);
  bool ok = v >= 1 && v < 9007199254740992.0 && floor(v) == v &&
            ty_timer_cancel(owner_of(c), (uint64_t)v);
  lua_pushboolean(L, ok);
  return 1;
}

/* ty_actor_ops.timer_due: a timer to a name finds its holder now. */
int lt_timer_due(ty_msg *m, ty_worker *w, void *ud) {
  (void)w;
  (void)ud;
  if (!m->aux) return 0;
  m->to = lt_names_lookup_atom((uint32_t)m->aux);
  return m->to ? 0 : -1;
}

/* ---- virtual time (tycho.test.clock, lua/tycho/test.lua) ----------------- */

/* tycho.now() under virtual time: the real time of the switch plus the
 * virtual time passed since. Written by the switching actor before the
 * runtime's flag (a release store) that readers check first. */
static uint64_t clock_real0, clock_virt0;

double lt_now_s(void) {
  ty_runtime *rt = lt_ctx_get()->rt;
  if (rt && ty_runtime_is_virtual(rt))
    return (double)(clock_real0 + (ty_runtime_now_ns(rt) - clock_virt0)) * 1e-9;
  return (double)ty__now_ns() * 1e-9;
}

static int l_clock_virtual(lua_State *L) {
  lt_current(L, "test.clock");
  if (!ty_runtime_is_virtual(lt_ctx_get()->rt)) {
    clock_real0 = ty__now_ns();
    clock_virt0 = ty_runtime_now_ns(lt_ctx_get()->rt);
    ty_runtime_virtual(lt_ctx_get()->rt);
  }
  return 0;
}

/* _clock_advance(seconds) -> the virtual time to wait for (ns, a number) */
static int l_clock_advance(lua_State *L) {
  lt_current(L, "test.clock");
  lua_Number s = luaL_checknumber(L, 1);
  if (!(s >= 0) || s > 1e9)
    return luaL_error(L, "clock:advance: seconds must be >= 0, got %f", s);
  if (!ty_runtime_is_virtual(lt_ctx_get()->rt))
    return luaL_error(L, "clock:advance: the runtime is not on virtual time");
  lua_pushnumber(L, (lua_Number)ty_runtime_advance(lt_ctx_get()->rt,
                                                   (uint64_t)(s * 1e9 + 0.5)));
  return 1;
}

/* _clock_fired(ns) -> true once every worker fired its timers up to ns */
static int l_clock_fired(lua_State *L) {
  lt_current(L, "test.clock");
  lua_Number v = luaL_checknumber(L, 1);
  lua_pushboolean(L, ty_runtime_fired(lt_ctx_get()->rt, (uint64_t)v));
  return 1;
}

static int l_clock_is_virtual(lua_State *L) {
  lua_pushboolean(L,
                  lt_ctx_get()->rt && ty_runtime_is_virtual(lt_ctx_get()->rt));
  return 1;
}

static int l_clock_real(lua_State *L) {
  lua_pushnumber(L, (lua_Number)ty__now_ns() * 1e-9);
  return 1;
}

static const luaL_Reg funcs[] = {{"send_after", l_send_after},
                                 {"interval", l_interval},
                                 {"cancel", l_cancel},
                                 {"_clock_virtual", l_clock_virtual},
                                 {"_clock_advance", l_clock_advance},
                                 {"_clock_fired", l_clock_fired},
                                 {"_clock_is_virtual", l_clock_is_virtual},
                                 {"_clock_real", l_clock_real},
                                 {NULL, NULL}};

void lt_open_timer(lua_State *L) { luaL_register(L, NULL, funcs); }
