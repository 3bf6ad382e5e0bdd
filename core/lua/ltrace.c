/*
 * ltrace.c - tycho.trace: the events of a traced actor (send, recv, call,
 * spawn, exit) as log lines or as messages to a tracer actor.
 *
 * Free when off: the API functions test one byte of the actor record
 * (lt_actor.trace) and call here only when its bit is set; tycho.trace
 * sets it on the actor's own worker (lua/tycho/observe.lua).
 * docs/architecture.md, "Observing a running node".
 */
#include <string.h>

#include "base/log.h"
#include "lsend.h"
#include "lstate.h"
#include "ltrace.h"

static const char *event_name(int ev) {
  switch (ev) {
  case LT_TR_SEND: return "send";
  case LT_TR_RECV: return "recv";
  case LT_TR_CALL: return "call";
  case LT_TR_SPAWN: return "spawn";
  default: return "exit";
  }
}

/* A short text of the values L[first..first+n): strings, numbers and
 * booleans as they are, anything else as its type; at most 4 values. */
static size_t summary(lua_State *L, int first, int n, char *buf, size_t cap) {
  size_t len = 0;
  for (int i = 0; i < n && i < 4 && len + 2 < cap; i++) {
    int idx = first + i;
    size_t l;
    const char *s;
    char num[32];
    switch (lua_type(L, idx)) {
    case LUA_TSTRING: s = lua_tolstring(L, idx, &l); break;
    case LUA_TNUMBER:
      l = (size_t)snprintf(num, sizeof num, "%.14g", lua_tonumber(L, idx));
      s = num;
      break;
    case LUA_TBOOLEAN:
      s = lua_toboolean(L, idx) ? "true" : "false";
      l = strlen(s);
      break;
    default: s = lua_typename(L, lua_type(L, idx)); l = strlen(s);
    }
    if (i) buf[len++] = ' ';
    if (l > cap - len - 1) l = cap - len - 1;
    memcpy(buf + len, s, l);
    len += l;
  }
  buf[len] = 0;
  return len;
}

static void emit(lt_actor *la, int ev, ty_pid peer, const char *what,
                 size_t wlen) {
  ty_pid self = la->parent ? la->parent : la->pid;
  if (lt_rare_rd(la)->trace_to) {
    lua_State *L = lt_worker_get()->L;
    lua_pushliteral(L, "trace");
    lua_pushnumber(L, (lua_Number)self);
    lua_pushstring(L, event_name(ev));
    lua_pushnumber(L, ty__now_ns() * 1e-9);
    if (peer) lua_pushnumber(L, (lua_Number)peer);
    else lua_pushnil(L);
    lua_pushlstring(L, what, wlen);
    lt_send_values(L, 6, la->rare->trace_to);
    return;
  }
  ty__logev e;
  ty_worker *w = ty_worker_current();
  ty__log_begin(&e, TY_LOG_INFO, w ? (int)ty_worker_id(w) + 1 : -1, self,
                "trace", 5);
  const char *name = event_name(ev);
  ty__log_str(&e, "event", name, strlen(name));
  if (peer)
    ty__log_num(&e,
                ev == LT_TR_RECV    ? "from"
                : ev == LT_TR_SPAWN ? "pid"
                                    : "to",
                (double)peer);
  ty__log_str(&e, ev == LT_TR_EXIT ? "reason" : "msg", what, wlen);
  ty__log_end(&e);
}

void lt_trace_out(lua_State *L, lt_actor *la, int ev, ty_pid to, int first,
                  int n) {
  char buf[256];
  size_t len = summary(L, first, n, buf, sizeof buf);
  emit(la, ev, to, buf, len);
}

void lt_trace_in(lua_State *L, lt_actor *la, ty_pid from, int n) {
  char buf[256];
  size_t len = summary(L, lua_gettop(L) - n + 1, n, buf, sizeof buf);
  emit(la, LT_TR_RECV, from, buf, len);
}

void lt_trace_exit(lt_actor *la, const char *reason, size_t len) {
  emit(la, LT_TR_EXIT, 0, reason ? reason : "normal", reason ? len : 6);
}
