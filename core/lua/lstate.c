/*
 * lstate.c - the Lua state of a worker: one LuaJIT state per worker thread,
 * created when the worker starts and closed when it exits. Every actor of
 * the worker is a coroutine in it (docs/architecture.md, "Threads").
 */
#include <pthread.h>
#include <string.h>

#include "base/log.h"
#include "ldirect.h"
#include "lguard.h"
#include "lrandom.h"
#include "lstate.h"

/* relaxed: figures for tycho.stats, each written by its worker alone. */
static _Atomic size_t g_heap_used[TY_MAX_WORKERS];
/* Ticks each worker spent in resumes (lt_busy_slot); relaxed, for the same
 * reason. */
static _Atomic uint64_t g_busy[TY_MAX_WORKERS];

_Atomic uint64_t *lt_busy_slot(unsigned i) { return &g_busy[i]; }

/* ---- package paths ---------------------------------------------------------
 *
 * package.path and package.cpath are per state, but a script sets them once
 * (in its main actor, often after the runtime started) and expects require
 * to find its modules wherever an actor lands. So each spawn request (and
 * each tycho.blocking job) first compares the spawner's paths with the ones
 * it last published (lt_note_paths: two field reads and two pointer
 * compares, strings being interned); when they changed, it publishes them
 * under paths_mu with a new version. A worker applies a newer version
 * before it starts an actor (lt_sync_paths), so the spawned actor, and
 * every actor started after it on any worker, sees them.
 */

static pthread_mutex_t paths_mu = PTHREAD_MUTEX_INITIALIZER;
/* relaxed: a hint read before each actor start. The spawn request that
 * follows a publish reaches its worker through a queue or ring with
 * release/acquire, so that worker sees the new version; the strings
 * themselves are read under paths_mu. */
static _Atomic uint64_t paths_version = 1;
static char seen_key; /* registry[&seen_key] = {path, cpath} last published */

static void set_field_str(lua_State *L, const char *k, const char *v) {
  if (!v) return;
  lua_pushstring(L, v);
  lua_setfield(L, -2, k);
}

/* Remembers, in L, the paths now in package (on top), as published. */
static void remember_paths(lua_State *L) {
  lua_pushlightuserdata(L, &seen_key);
  lua_createtable(L, 2, 0);
  lua_getfield(L, -3, "path");
  lua_rawseti(L, -2, 1);
  lua_getfield(L, -3, "cpath");
  lua_rawseti(L, -2, 2);
  lua_rawset(L, LUA_REGISTRYINDEX);
}

static void note_paths(lua_State *L, bool force) {
  lua_getfield(L, LUA_GLOBALSINDEX, "package");
  if (!lua_istable(L, -1)) {
    lua_pop(L, 1);
    return;
  }
  lua_getfield(L, -1, "path");
  lua_getfield(L, -2, "cpath");
  lua_pushlightuserdata(L, &seen_key);
  lua_rawget(L, LUA_REGISTRYINDEX);
  bool same = false;
  if (!force && lua_istable(L, -1)) {
    lua_rawgeti(L, -1, 1);
    lua_rawgeti(L, -2, 2);
    same = lua_rawequal(L, -1, -4) && lua_rawequal(L, -2, -5);
    lua_pop(L, 2);
  }
  if (!same && lua_isstring(L, -3) && lua_isstring(L, -2)) {
    pthread_mutex_lock(&paths_mu);
    free(lt_ctx_get()->path);
    free(lt_ctx_get()->cpath);
    lt_ctx_get()->path = strdup(lua_tostring(L, -3));
    lt_ctx_get()->cpath = strdup(lua_tostring(L, -2));
    atomic_fetch_add_explicit(&paths_version, 1, memory_order_relaxed);
    pthread_mutex_unlock(&paths_mu);
    lua_pop(L, 3);
    remember_paths(L);
    lua_pop(L, 1);
    return;
  }
  lua_pop(L, 4);
}

void lt_note_paths(lua_State *L) { note_paths(L, false); }

/* tycho.run: a new run starts from its caller's paths, whatever an actor
 * of the previous run published. */
void lt_publish_paths(lua_State *L) { note_paths(L, true); }

/* Gives package (on top of L) the published paths. */
static void apply_paths(lua_State *L, uint64_t *applied) {
  pthread_mutex_lock(&paths_mu);
  set_field_str(L, "path", lt_ctx_get()->path);
  set_field_str(L, "cpath", lt_ctx_get()->cpath);
  if (applied)
    *applied = atomic_load_explicit(&paths_version, memory_order_relaxed);
  pthread_mutex_unlock(&paths_mu);
  remember_paths(L); /* what it got is not news to publish back */
}

void lt_sync_paths(lua_State *L, uint64_t *applied) {
  if (atomic_load_explicit(&paths_version, memory_order_relaxed) == *applied)
    return;
  lua_getfield(L, LUA_GLOBALSINDEX, "package");
  if (lua_istable(L, -1)) apply_paths(L, applied);
  lua_pop(L, 1);
}

void lt_set_paths(lua_State *L, uint64_t *applied) {
  lua_getglobal(L, "package");
  apply_paths(L, applied);
  /* This copy of the core answers require "tycho.core" in every state, so
   * the workers and the caller of tycho.run share one runtime. */
  lua_getfield(L, -1, "preload");
  lua_pushcfunction(L, lt_ctx_get()->opener);
  lua_setfield(L, -2, "tycho.core");
  lua_pop(L, 2);
}

static void set_arg(lua_State *L) {
  if (!lt_ctx_get()->argv) return;
  lua_createtable(L, lt_ctx_get()->argc, 1);
  for (int i = 0; i < lt_ctx_get()->argc; i++) {
    lua_pushstring(L, lt_ctx_get()->argv[i]);
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
  return lt_mem_alloc(&lw->heap, p, osize, nsize);
}

static _Thread_local lua_State *t_borrow;

void lt_state_borrow(lua_State *L) { t_borrow = L; }

/* The caller's state for the run: what is changed in it is saved first.
 * It has its libraries, paths and `arg` already; the runtime adds its
 * allocator, the guard of finalizers (lguard.c) and its registry slots. */
static void borrow_state(lt_worker *lw) {
  lua_State *L = lw->L;
  lw->borrowed = true;
  lw->hook = lua_gethook(L);
  lw->hook_mask = lua_gethookmask(L);
  lw->hook_count = lua_gethookcount(L);
  lw->gc_pause = lua_gc(L, LUA_GCSETPAUSE, 200);
  lua_gc(L, LUA_GCSETPAUSE, lw->gc_pause);
  lua_getglobal(L, "package");
  if (lua_istable(L, -1)) {
    lua_getfield(L, -1, "path");
    lua_getfield(L, -2, "cpath");
    if (lua_isstring(L, -2)) lw->path = strdup(lua_tostring(L, -2));
    if (lua_isstring(L, -1)) lw->cpath = strdup(lua_tostring(L, -1));
    lua_pop(L, 2);
  }
  lua_pop(L, 1);
  lt_mem_attach_borrowed(L, &lw->heap);
}

/* The caller's paths come back: each worker applies the paths actors
 * publish (lt_sync_paths), so those of the run would otherwise stay, and
 * the next run starts from its caller's (lt_publish_paths). */
static int restore_paths(lua_State *L) {
  lt_worker *lw = lua_touserdata(L, 1);
  lua_getglobal(L, "package");
  if (lua_istable(L, -1)) {
    set_field_str(L, "path", lw->path);
    set_field_str(L, "cpath", lw->cpath);
  }
  return 0;
}

/* Calls f() for each loaded module "tycho.*" that has a _give_back
 * function: the modules that keep per-worker state (connection pools, the
 * pid of a keeper) start over, since the state outlives its worker. */
static int modules_give_back(lua_State *L) {
  lua_getglobal(L, "package");
  if (!lua_istable(L, -1)) return 0;
  lua_getfield(L, -1, "loaded");
  if (!lua_istable(L, -1)) return 0;
  lua_pushnil(L);
  while (lua_next(L, -2)) {
    if (lua_type(L, -2) == LUA_TSTRING && lua_istable(L, -1) &&
        strncmp(lua_tostring(L, -2), "tycho.", 6) == 0) {
      lua_getfield(L, -1, "_give_back");
      if (!lua_isfunction(L, -1) || lua_pcall(L, 0, 0, 0))
        lua_pop(L, 1); /* not a function, or the error */
    }
    lua_pop(L, 1);
  }
  return 0;
}

/* Undoes borrow_state and what the runtime added since (after
 * lt_gc_final). */
static void give_back_state(lt_worker *lw) {
  lua_State *L = lw->L;
  /* Each step on its own: one that fails (out of memory) leaves its error
   * message, and the others still run. */
  if (lua_cpcall(L, modules_give_back, NULL)) lua_pop(L, 1);
  if (lt_guard_give_back(L)) lua_pop(L, 1);
  luaL_unref(L, LUA_REGISTRYINDEX, lw->fncache_ref);
  luaL_unref(L, LUA_REGISTRYINDEX, lw->dumpcache_ref);
  luaL_unref(L, LUA_REGISTRYINDEX, lw->direct_ref);
  lt_mem_unwatch(L);
  if (lua_cpcall(L, restore_paths, lw)) lua_pop(L, 1);
  free(lw->path);
  free(lw->cpath);
  lua_sethook(L, lw->hook, lw->hook_mask, lw->hook_count);
  lua_gc(L, LUA_GCSETPAUSE, lw->gc_pause);
}

/* The caller's state may lack what the guard wraps (a script can set
 * debug = nil) or be out of memory: the run goes on, unguarded, with a
 * warning, rather than end the process. */
static void guard_borrowed(lt_worker *lw) {
  lua_State *L = lw->L;
  if (lt_guard_borrow(L)) {
    ty__logf(TY_LOG_WARN, 1, 0,
             "tycho.run: the finalizers of the caller's state are not "
             "deferred during this run: %s",
             lua_isstring(L, -1) ? lua_tostring(L, -1) : "?");
    lua_pop(L, 1);
  }
  if (lt_mem_watch(L, &lw->heap)) lua_pop(L, 1); /* cycles unseen: no harm */
}

/* A worker's state keeps LuaJIT's own allocator, even in a mimalloc build:
 * on mimalloc it spent ~6% less CPU in the spawn benchmark, but mimalloc
 * keeps the address space a freed heap held, so after a memory bomb (an
 * actor that filled a `ulimit -v`) the other workers could no longer
 * allocate and a DOWN was lost (memory_spec's 700 MB test hung). */
#define NEW_STATE() luaL_newstate()

void lt_state_init(ty_worker *w, void *ud) {
  lt_worker *lw = ty__xcalloc(1, sizeof *lw);
  lw->ctx = ud; /* the context tycho.run gave the runtime (lrun.c) */
  lw->life = lw->ctx->life;
  lw->L = t_borrow ? t_borrow : NEW_STATE();
  if (!lw->L) ty__die("cannot create a Lua state");
  lw->w = w;
  lw->id = ty_worker_id(w);
  lw->flag = ty_worker_flag(w);
  atomic_init(&lw->deny, 0);
  if (t_borrow) borrow_state(lw);
  else lt_mem_attach(lw->L, &lw->heap);
  t_borrow = NULL;
  lw->heap.pub = &g_heap_used[ty_worker_id(w)];
  lw->busy = lt_busy_slot(ty_worker_id(w));
  lw->sample_left = 1;
  lw->sample_rng = 2463534242u + ty_worker_id(w);
  lua_setallocf(lw->L, lt_alloc, lw);
  if (lw->borrowed) {
    guard_borrowed(lw);
  } else {
    luaL_openlibs(lw->L);
    if (lt_guard_gc(lw->L) || lt_mem_watch(lw->L, &lw->heap))
      ty__die("cannot set up a Lua state");
  }
  lt_random_seed_state(lw->L, lw->id + 1, lw->borrowed);
  if (!lw->borrowed) {
    lt_set_paths(lw->L, &lw->paths_version);
    set_arg(lw->L);
  }
  ty__buf_init(&lw->buf);
  lw->fncache_ref = new_weak_table(lw->L, NULL);
  lw->dumpcache_ref = new_weak_table(lw->L, "k");
  lw->direct_ref = lt_direct_store(lw->L, &lw->holder);
  lw->next_ref = ((uint64_t)ty_worker_id(w) << 48) + 1;
  ty_worker_set_data(w, lw);
  lt_tls_worker = lw;
  lt_heap_publish(w, &lw->heap);
}

/* Written by the first detach of each kind (a worker thread) and read by
 * the exits: relaxed pointers, each set once to the same value, and a
 * registration seen late only matters for a state that has nothing of it. */
typedef _Atomic(void (*)(void)) hook_slot;
static hook_slot g_give_back[4], g_state_exit[4];

/* relaxed: the hooks are registered by the openers, before the runtime
 * that calls them starts its workers (thread creation orders them). */
static void hook_add(hook_slot *slots, void (*fn)(void)) {
  for (unsigned i = 0; i < 4; i++) {
    void (*f)(void) = atomic_load_explicit(&slots[i], memory_order_relaxed);
    if (f == fn) return;
    if (!f) {
      void (*none)(void) = NULL;
      if (atomic_compare_exchange_strong_explicit(&slots[i], &none, fn,
                                                  memory_order_relaxed,
                                                  memory_order_relaxed) ||
          none == fn)
        return;
    }
  }
}

static void hooks_run(hook_slot *slots) {
  for (unsigned i = 0; i < 4; i++) {
    void (*f)(void) = atomic_load_explicit(&slots[i], memory_order_relaxed);
    if (f) f();
  }
}

void lt_on_give_back(void (*fn)(void)) { hook_add(g_give_back, fn); }
void lt_on_state_exit(void (*fn)(void)) { hook_add(g_state_exit, fn); }

void lt_state_exit(ty_worker *w, void *ud) {
  (void)ud;
  lt_worker *lw = ty_worker_data(w);
  if (lw->borrowed) hooks_run(g_give_back);
  lt_gc_final(lw->L);
  /* The pooled coroutines of servers (lserve.c) go with a closed state;
   * a borrowed one keeps no registry slot of ours. */
  for (int i = 0; lw->borrowed && i < lw->ncopool; i++)
    luaL_unref(lw->L, LUA_REGISTRYINDEX, lw->copool[i].ref);
  lw->ncopool = 0;
  if (lw->borrowed) give_back_state(lw);
  /* A state that closes lets its modules close what they keep too (pooled
   * connections whose libraries allocate outside the Lua heap: libpq). */
  else if (lua_cpcall(lw->L, modules_give_back, NULL)) lua_pop(lw->L, 1);
  lt_mem_detach(lw->L, &lw->heap);
  if (!lw->borrowed) lua_close(lw->L);
  lt_mem_flush();
  lt_heap_publish(w, &lw->heap);
  ty__buf_free(&lw->buf);
  hooks_run(g_state_exit);
  free(lw->free_slots);
  free(lw);
  ty_worker_set_data(w, NULL);
  lt_tls_worker = NULL;
}

size_t lt_heap_used(unsigned i) {
  return atomic_load_explicit(&g_heap_used[i], memory_order_relaxed);
}

void lt_heap_publish(ty_worker *w, const lt_heap *h) {
  atomic_store_explicit(&g_heap_used[ty_worker_id(w)], lt_heap_counted(h),
                        memory_order_relaxed);
}

uint64_t lt_new_ref(void) { return lt_worker_get()->next_ref++; }
