/*
 * lstate.c - the Lua state of a worker: one LuaJIT state per worker thread,
 * created when the worker starts and closed when it exits. Every actor of
 * the worker is a coroutine in it (docs/architecture.md, "Threads").
 */
#include <string.h>

#include "lrun.h"
#include "lstate.h"

lt_worker *lt_worker_get(void) {
  ty_worker *w = ty_worker_current();
  return w ? ty_worker_data(w) : NULL;
}

void lt_set_paths(lua_State *L) {
  lua_getglobal(L, "package");
  if (lt_g.path) {
    lua_pushstring(L, lt_g.path);
    lua_setfield(L, -2, "path");
  }
  if (lt_g.cpath) {
    lua_pushstring(L, lt_g.cpath);
    lua_setfield(L, -2, "cpath");
  }
  /* This copy of the core answers require "tycho.core" in every state, so
   * the workers and the caller of tycho.run share one runtime. */
  lua_getfield(L, -1, "preload");
  lua_pushcfunction(L, lt_g.opener);
  lua_setfield(L, -2, "tycho.core");
  lua_pop(L, 2);
}

static void set_arg(lua_State *L) {
  if (!lt_g.argv) return;
  lua_createtable(L, lt_g.argc, 1);
  for (int i = 0; i < lt_g.argc; i++) {
    lua_pushstring(L, lt_g.argv[i]);
    lua_rawseti(L, -2, i);
  }
  lua_setglobal(L, "arg");
}

static int new_weak_table(lua_State *L, const char *mode) {
  lua_newtable(L);
  if (mode) {
    lua_createtable(L, 0, 1);
    lua_pushstring(L, mode);
    lua_setfield(L, -2, "__mode");
    lua_setmetatable(L, -2);
  }
  return luaL_ref(L, LUA_REGISTRYINDEX);
}

/* The worker state's allocator: the state's own, except that it fails for
 * code the watchdog asked to stop (lpreempt.c). That is how a loop that
 * allocates is stopped even inside compiled code, which never runs the
 * hook: the failed allocation raises "not enough memory" out of the trace
 * and the interpreter then meets the hook. */
static void *lt_alloc(void *ud, void *p, size_t osize, size_t nsize) {
  lt_worker *lw = ud;
  /* relaxed: set by the watchdog under its lock for one resume, which we
   * compare to the one running; a late look only delays the stop. */
  uint64_t deny = atomic_load_explicit(&lw->deny, memory_order_relaxed);
  if (ty__unlikely(deny) && nsize > osize && lw->in_lua &&
      deny == ty_worker_seq(lw->w))
    return NULL;
  return lw->alloc(lw->alloc_ud, p, osize, nsize);
}

void lt_state_init(ty_worker *w, void *ud) {
  (void)ud;
  lt_worker *lw = ty__xcalloc(1, sizeof *lw);
  lw->L = luaL_newstate();
  if (!lw->L) ty__die("cannot create a Lua state");
  lw->w = w;
  lw->flag = ty_worker_flag(w);
  atomic_init(&lw->deny, 0);
  lw->alloc = lua_getallocf(lw->L, &lw->alloc_ud);
  lua_setallocf(lw->L, lt_alloc, lw);
  luaL_openlibs(lw->L);
  lt_set_paths(lw->L);
  set_arg(lw->L);
  ty__buf_init(&lw->buf);
  lw->fncache_ref = new_weak_table(lw->L, NULL);
  lw->dumpcache_ref = new_weak_table(lw->L, "k");
  lw->next_ref = ((uint64_t)ty_worker_id(w) << 48) + 1;
  ty_worker_set_data(w, lw);
}

void lt_state_exit(ty_worker *w, void *ud) {
  (void)ud;
  lt_worker *lw = ty_worker_data(w);
  lua_close(lw->L);
  ty__buf_free(&lw->buf);
  free(lw);
  ty_worker_set_data(w, NULL);
}

uint64_t lt_new_ref(void) { return lt_worker_get()->next_ref++; }
