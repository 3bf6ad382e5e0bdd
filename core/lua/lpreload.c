/*
 * lpreload.c - modules that every worker state loads: require "tycho.ngx"
 * in one actor must give the global `ngx` to the actors of every worker,
 * since the drivers written for OpenResty read it when they load.
 *
 * core._everywhere(name) publishes a module name (under `mu`, with a new
 * version). Before a worker starts an actor (or a fork), lt_preload_sync
 * compares the published version with the one its state last applied (a
 * relaxed load and a compare) and, when it changed, requires the names it
 * has not required yet. So the actor spawned after the call, and every
 * actor started after it on any worker, finds the module loaded; an actor
 * already running elsewhere sees it from its worker's next start on.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "lpreload.h"

#define MAX_MODULES 16

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static char *names[MAX_MODULES]; /* under mu; never freed (a few names) */
static int count;                /* under mu */
/* relaxed: a hint read before each start. The spawn request that follows a
 * publish reaches its worker through a queue or ring with release/acquire
 * ordering, so that worker sees the new version; the names are read under
 * mu. */
static _Atomic uint64_t version;
/* The version this worker thread's state applied (one state per worker
 * thread, and a new thread, so 0, for each run). */
static _Thread_local uint64_t applied;
static _Thread_local int done; /* names[0..done) are required here */

void lt_preload_sync(lua_State *L) {
  if (atomic_load_explicit(&version, memory_order_relaxed) == applied) return;
  char *todo[MAX_MODULES];
  int n = 0;
  pthread_mutex_lock(&mu);
  applied = atomic_load_explicit(&version, memory_order_relaxed);
  for (int i = done; i < count; i++) todo[n++] = names[i];
  done = count;
  pthread_mutex_unlock(&mu);
  for (int i = 0; i < n; i++) {
    lua_getglobal(L, "require");
    lua_pushstring(L, todo[i]);
    if (lua_pcall(L, 1, 0, 0)) {
      ty__logf(TY_LOG_ERROR, -1, 0, "preload of %s failed: %s", todo[i],
               lua_tostring(L, -1));
      lua_pop(L, 1);
    }
  }
}

/* _everywhere(name): every worker state requires `name` before it starts
 * its next actor. */
static int l_everywhere(lua_State *L) {
  const char *name = luaL_checkstring(L, 1);
  pthread_mutex_lock(&mu);
  bool known = false;
  for (int i = 0; i < count && !known; i++) known = !strcmp(names[i], name);
  if (!known && count == MAX_MODULES) {
    pthread_mutex_unlock(&mu);
    return luaL_error(L, "tycho._everywhere: at most %d modules", MAX_MODULES);
  }
  if (!known) {
    names[count++] = strdup(name);
    atomic_fetch_add_explicit(&version, 1, memory_order_relaxed);
  }
  pthread_mutex_unlock(&mu);
  return 0;
}

void lt_open_preload(lua_State *L) {
  lua_pushcfunction(L, l_everywhere);
  lua_setfield(L, -2, "_everywhere");
}
