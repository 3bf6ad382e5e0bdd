/*
 * llog.c - the C half of tycho.log (lua/tycho/log.lua): one event on the
 * process's event log (core/base/log.h), with the caller's worker and pid.
 *
 *   _log(level, msg [, fields]) ; _log_level() -> "info" ...
 *
 * Fields are written in the order of their sorted keys, so that one event
 * always reads the same; strings, numbers and booleans as they are, JSON's
 * null as null, anything else through tostring. Writing never blocks: the
 * line is copied into the log's queue (or dropped and counted when it is
 * full, see tycho.stats().log_dropped).
 */
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "lapi.h"
#include "llog.h"

#define MAX_FIELDS 64

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The string form of the value on top (replacing it): tostring(). */
static const char *as_text(lua_State *L, size_t *len) {
  if (lua_type(L, -1) != LUA_TSTRING && lua_type(L, -1) != LUA_TNUMBER) {
    lua_getglobal(L, "tostring");
    lua_insert(L, -2);
    lua_call(L, 1, 1);
  }
  const char *s = lua_tolstring(L, -1, len);
  if (!s) s = "?", *len = 1;
  return s;
}

static void add_field(lua_State *L, ty__logev *e, const char *key) {
  switch (lua_type(L, -1)) {
  case LUA_TNUMBER: ty__log_num(e, key, lua_tonumber(L, -1)); break;
  case LUA_TBOOLEAN: ty__log_bool(e, key, lua_toboolean(L, -1)); break;
  case LUA_TLIGHTUSERDATA:
    if (!lua_touserdata(L, -1)) { /* tycho.json.null */
      ty__log_null(e, key);
      break;
    }
    /* fall through */
  default: {
    size_t len;
    const char *s = as_text(L, &len);
    ty__log_str(e, key, s, len);
  }
  }
}

/* Appends the fields of the table at idx, keys sorted. */
static void add_fields(lua_State *L, ty__logev *e, int idx) {
  const char *keys[MAX_FIELDS];
  int n = 0;
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    lua_pop(L, 1);
    if (lua_type(L, -1) != LUA_TSTRING) continue; /* named fields only */
    keys[n++] = lua_tostring(L, -1); /* alive: the table holds it */
    if (n == MAX_FIELDS) {
      lua_pop(L, 1);
      break;
    }
  }
  qsort(keys, (size_t)n, sizeof *keys, cmp_str);
  for (int i = 0; i < n; i++) {
    lua_getfield(L, idx, keys[i]);
    add_field(L, e, keys[i]);
    lua_pop(L, 1);
  }
}

static int l_log(lua_State *L) {
  int level = (int)luaL_checkinteger(L, 1);
  if (level < TY_LOG_DEBUG || level > TY_LOG_ERROR)
    return luaL_error(L, "tycho.log: bad level");
  if (!ty__log_enabled(level)) return 0;
  if (!lua_isnoneornil(L, 3) && !lua_istable(L, 3))
    return luaL_error(L, "tycho.log: fields must be a table, got %s",
                      luaL_typename(L, 3));
  lua_settop(L, 3);
  lua_pushvalue(L, 2);
  size_t mlen;
  const char *msg = as_text(L, &mlen);
  ty_worker *w = ty_worker_current();
  ty_actor *a = ty_actor_current();
  ty_pid pid = 0;
  if (a && lt_ctx_get()->rt) {
    lt_actor *la = a->user;
    pid = la->parent ? la->parent : a->pid;
  }
  ty__logev e;
  ty__log_begin(&e, level, w ? (int)ty_worker_id(w) + 1 : -1, pid, msg, mlen);
  if (lua_istable(L, 3)) add_fields(L, &e, 3);
  ty__log_end(&e);
  return 0;
}

static int l_log_level(lua_State *L) {
  const char *n = ty__log_level_name(ty__log_level());
  char low[8];
  size_t i = 0;
  for (; n[i] && i < sizeof low - 1; i++) low[i] = (char)(n[i] | 0x20);
  low[i] = 0;
  lua_pushstring(L, low);
  return 1;
}

static const luaL_Reg funcs[] = {{"_log", l_log},
                                 {"_log_level", l_log_level},
                                 {NULL, NULL}};

void lt_open_log(lua_State *L) { luaL_register(L, NULL, funcs); }
