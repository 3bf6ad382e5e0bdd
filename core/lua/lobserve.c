/*
 * lobserve.c - observing a running node: each worker takes a snapshot of
 * its own actors (tycho.processes), where an actor waits (a traceback of
 * its coroutine), the ticks of CPU time its resumes took.
 *
 * Nothing here stops a worker: the Lua half (lua/tycho/observe.lua) spawns
 * a short agent pinned on each worker (tycho._spawn_at); the agent runs at
 * that worker's next turn like any actor, walks its worker's actors
 * (ty_worker_each_actor: only that worker touches them) into one binary
 * string, and answers the caller, who turns the strings into tables.
 * docs/architecture.md, "Observing a running node".
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "io/io.h"
#include "lapi.h"
#include "lnames.h"
#include "lobserve.h"
#include "lpreempt.h"
#include "lstate.h"

/* ---- ticks ------------------------------------------------------------- */

/* The first reading of both clocks: the ratio since then converts ticks
 * (exact enough after a few milliseconds, and better the longer it runs).
 * The ratio is kept and worked out again every 2^30 ticks (a third of a
 * second at 3 GHz), so a conversion seldom reads the clock. */
static _Atomic uint64_t base_ticks, base_ns, ratio_bits, ratio_at;

#if defined(__x86_64__) || defined(__i386__)
static double refresh_ratio(uint64_t now_t) {
  uint64_t now_ns = ty__now_ns();
  /* relaxed: independent figures; a race between two refreshers only
   * moves the base or the ratio a little. */
  uint64_t bt = atomic_load_explicit(&base_ticks, memory_order_relaxed);
  uint64_t bn = atomic_load_explicit(&base_ns, memory_order_relaxed);
  if (!bt) {
    atomic_store_explicit(&base_ticks, now_t, memory_order_relaxed);
    atomic_store_explicit(&base_ns, now_ns, memory_order_relaxed);
    return 1.0 / 3; /* no ratio yet: a common TSC rate (3 GHz) */
  }
  if (now_ns - bn < 1000000 || now_t <= bt) return 1.0 / 3;
  double r = (double)(now_ns - bn) / (double)(now_t - bt);
  uint64_t bits;
  memcpy(&bits, &r, sizeof bits);
  atomic_store_explicit(&ratio_bits, bits, memory_order_relaxed);
  atomic_store_explicit(&ratio_at, now_t, memory_order_relaxed);
  return r;
}
#endif

uint64_t lt_ticks_ns(uint64_t ticks) {
#if defined(__x86_64__) || defined(__i386__)
  uint64_t now_t = lt_ticks();
  /* relaxed: see refresh_ratio. */
  uint64_t at = atomic_load_explicit(&ratio_at, memory_order_relaxed);
  double r;
  if (!at || now_t - at > (1ull << 30)) {
    r = refresh_ratio(now_t);
  } else {
    uint64_t bits = atomic_load_explicit(&ratio_bits, memory_order_relaxed);
    memcpy(&r, &bits, sizeof r);
  }
  return (uint64_t)((double)ticks * r);
#else
  return ticks;
#endif
}

/* ---- a worker's snapshot ------------------------------------------------ */

enum { ST_RUNNING, ST_WAITING, ST_CALL, ST_IO, ST_POOL };
static const char *const status_name[] = {"running", "waiting", "call", "io",
                                          "pool"};

static int status_of(const lt_actor *la) {
  switch (la->wait) {
  case LT_W_RECV:
  case LT_W_SERVE: /* an idle tycho.server: waits for its next message */
  case LT_W_SLEEP: return ST_WAITING;
  case LT_W_CALL: return la->call_to ? ST_CALL : ST_POOL; /* pool: no pid */
  case LT_W_EXT: return ST_IO;
  default: return ST_RUNNING;
  }
}

/* One actor in a snapshot (strings are indexes into its string table,
 * 0: none). */
typedef struct obs_rec {
  uint64_t pid, parent, ticks;
  int64_t mem; /* < 0: not measured (a fork: its actor's charge) */
  uint32_t resumes, mbox, origin, name;
  uint32_t status, pad;
} obs_rec;

typedef struct obs_head {
  uint32_t n, nstr, worker, pad;
} obs_head;

/* The origins (pointer-keyed, so each distinct function is described
 * once) and names, as a string table. */
typedef struct snap {
  ty_actor *self;
  obs_rec *recs;
  size_t n, cap;
  const void **keys; /* open addressing: origin keys */
  uint32_t *ids;
  size_t kcap, nkeys;
  ty__buf strs;
  uint32_t nstr;
  bool failed;
} snap;

static uint32_t add_str(snap *s, const char *p, size_t len) {
  if (len > 255) len = 255;
  uint8_t l = (uint8_t)len;
  if (ty__buf_append(&s->strs, &l, 1) || ty__buf_append(&s->strs, p, len)) {
    s->failed = true;
    return 0;
  }
  return ++s->nstr;
}

static uint32_t origin_id(snap *s, const lt_actor *la) {
  const void *key = lt_rare_rd(la)->origin ? (const void *)la->rare->origin
                                           : (const void *)la->fn;
  if (!key || s->nkeys * 2 >= s->kcap) return 0; /* full: no more origins */
  size_t i = ((uintptr_t)key >> 4) * 0x9E3779B97F4A7C15ull & (s->kcap - 1);
  while (s->keys[i] && s->keys[i] != key) i = (i + 1) & (s->kcap - 1);
  if (s->keys[i]) return s->ids[i];
  char buf[192];
  lt_origin(la, buf, sizeof buf);
  s->keys[i] = key;
  s->nkeys++;
  s->ids[i] = add_str(s, buf, strlen(buf));
  return s->ids[i];
}

static void take(ty_actor *a, void *ud) {
  snap *s = ud;
  if (a == s->self || s->failed) return;
  if (s->n == s->cap) {
    size_t cap = s->cap ? s->cap * 2 : 1024;
    obs_rec *r = realloc(s->recs, cap * sizeof *r);
    if (!r) {
      s->failed = true;
      return;
    }
    s->recs = r;
    s->cap = cap;
  }
  lt_actor *la = a->user;
  obs_rec *r = &s->recs[s->n++];
  memset(r, 0, sizeof *r);
  r->pid = a->pid;
  r->parent = la->parent;
  r->ticks = la->ticks;
  r->mem = la->parent ? -1 : (la->charge.mem > 0 ? la->charge.mem : 0);
  r->resumes = la->resumes;
  r->mbox = a->mbox.len;
  r->status = (uint32_t)status_of(la);
  r->origin = origin_id(s, la);
  char name[128];
  size_t nl = lt_names_of(a->pid, name, sizeof name);
  if (nl) r->name = add_str(s, name, nl);
}

/* _obs_snapshot() -> string: this worker's actors but the caller, as
 * obs_head, obs_rec[n], then n strings (a length byte, the bytes). */
static int l_snapshot(lua_State *L) {
  lt_cur c = lt_current(L, "processes");
  ty_worker *w = ty_worker_current();
  ty_worker_stats st;
  ty_worker_stats_get(lt_ctx_get()->rt, ty_worker_id(w), &st);
  snap s = {.self = c.a};
  s.cap = st.actors + 64;
  s.recs = malloc(s.cap * sizeof *s.recs);
  if (!s.recs) s.cap = 0;
  s.kcap = 1024;
  while (s.kcap < 4 * (st.actors + 16)) s.kcap *= 2;
  s.keys = calloc(s.kcap, sizeof *s.keys);
  s.ids = calloc(s.kcap, sizeof *s.ids);
  if (s.keys && s.ids) ty_worker_each_actor(w, take, &s);
  else s.failed = true;
  free(s.keys);
  free(s.ids);
  if (s.failed) {
    free(s.recs);
    ty__buf_free(&s.strs);
    return lt_push_fail(L, "nomem");
  }
  obs_head h = {(uint32_t)s.n, s.nstr, ty_worker_id(w), 0};
  ty__buf out = {0};
  bool ok = !ty__buf_append(&out, &h, sizeof h) &&
            !ty__buf_append(&out, s.recs, s.n * sizeof *s.recs) &&
            !ty__buf_append(&out, s.strs.data, s.strs.len);
  free(s.recs);
  ty__buf_free(&s.strs);
  if (ok) lua_pushlstring(L, out.data, out.len);
  ty__buf_free(&out);
  return ok ? 1 : lt_push_fail(L, "nomem");
}

/* _obs_tick_ns() -> nanoseconds per tick (the caller converts the ticks
 * of snapshots: lua/tycho/observe.lua reads them with the FFI). */
static int l_tick_ns(lua_State *L) {
  lua_pushnumber(L, (lua_Number)lt_ticks_ns(1000000000) / 1e9);
  return 1;
}

/* ---- one actor, on its own worker ----------------------------------------- */

/* _obs_traceback(pid) -> status, traceback | nil (not an actor of this
 * worker). */
static int l_traceback(lua_State *L) {
  ty_pid pid = (ty_pid)luaL_checknumber(L, 1);
  lt_current(L, "processes");
  ty_actor *a = ty_actor_local(pid);
  if (!a || !a->started || a == ty_actor_current()) return 0;
  lt_actor *la = a->user;
  lua_pushstring(L, status_name[status_of(la)]);
  if (la->co) luaL_traceback(L, la->co, NULL, 0);
  else lua_pushliteral(L, "");
  return 2;
}

/* _trace_set(pid, bits, tracer) -> true | nil (not an actor of this
 * worker). */
static int l_trace_set(lua_State *L) {
  ty_pid pid = (ty_pid)luaL_checknumber(L, 1);
  int bits = (int)luaL_checkinteger(L, 2);
  ty_pid to = (ty_pid)luaL_optnumber(L, 3, 0);
  lt_current(L, "trace");
  ty_actor *a = ty_actor_local(pid);
  if (!a || !a->started) return 0;
  lt_actor *la = a->user;
  la->trace = (uint8_t)bits;
  if (to || la->rare) lt_rare_get(la)->trace_to = to;
  lua_pushboolean(L, 1);
  return 1;
}

/* _obs_busy() -> {ns, ...}, {ns, ...}: each worker's time in resumes
 * (sampled) and its thread's CPU time, since its start. */
static int l_busy(lua_State *L) {
  unsigned n = lt_ctx_get()->rt ? ty_runtime_workers(lt_ctx_get()->rt) : 0;
  lua_createtable(L, (int)n, 0);
  lua_createtable(L, (int)n, 0);
  for (unsigned i = 0; i < n; i++) {
    /* relaxed: a recent figure is all a reader wants. */
    uint64_t t = atomic_load_explicit(lt_busy_slot(i), memory_order_relaxed);
    lua_pushnumber(L, (lua_Number)lt_ticks_ns(t));
    lua_rawseti(L, -3, (int)i + 1);
    lua_pushnumber(L, (lua_Number)ty_worker_cpu_ns(lt_ctx_get()->rt, i));
    lua_rawseti(L, -2, (int)i + 1);
  }
  return 2;
}

/* _obs_forget(module): this worker's spawns of `module` by name load it
 * again (tycho.reload). */
static int l_forget(lua_State *L) {
  size_t len;
  const char *name = luaL_checklstring(L, 1, &len);
  ty_worker *w = ty_worker_current();
  if (w) lt_fn_forget(L, lt_fn_module(name, len), ty_worker_id(w));
  return 0;
}

/* _obs_source(module, code, chunkname): spawns of `module` by name load
 * this source from now on where the module is not loaded yet
 * (tycho.reload, after every worker installed it: lfn.h). */
static int l_source(lua_State *L) {
  size_t len, clen;
  const char *name = luaL_checklstring(L, 1, &len);
  const char *code = luaL_checklstring(L, 2, &clen);
  const char *chunk = luaL_checkstring(L, 3);
  lt_fn_set_source(lt_fn_module(name, len), code, clen, chunk);
  return 0;
}

/* _obs_io() -> {enters=, completions=, rearms=, enobufs=, wakes=}: this
 * worker's I/O backend counters (owner-only fields: the agent runs here). */
static int l_io(lua_State *L) {
  ty_worker *w = ty_worker_current();
  if (!w) return 0;
  ty__io_stats st;
  ty__io_stats_get(ty_worker_io(w), &st);
  const struct {
    const char *name;
    uint64_t v;
  } f[] = {{"enters", st.enters},
           {"completions", st.completions},
           {"rearms", st.rearms},
           {"enobufs", st.enobufs},
           {"wakes", st.wakes}};
  lua_createtable(L, 0, 5);
  for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
    lua_pushnumber(L, (lua_Number)f[i].v);
    lua_setfield(L, -2, f[i].name);
  }
  return 1;
}

/* _obs_mtime(path) -> seconds since the epoch of its last change | nil
 * (SIGHUP reloads the modules whose files changed: lua/tycho/launch.lua). */
static int l_mtime(lua_State *L) {
  struct stat st;
  if (stat(luaL_checkstring(L, 1), &st)) return 0;
  lua_pushnumber(L, (lua_Number)st.st_mtim.tv_sec + st.st_mtim.tv_nsec * 1e-9);
  return 1;
}

/* _obs_alive(pid) -> bool: a live actor (or a spawn not started yet). */
static int l_alive(lua_State *L) {
  ty_pid pid = (ty_pid)luaL_checknumber(L, 1);
  lua_pushboolean(L, lt_ctx_get()->rt && ty_pid_alive(lt_ctx_get()->rt, pid));
  return 1;
}

/* ---- the graceful stop (lua/tycho/shutdown.lua) -------------------------- */

/* _obs_trapping() -> {pid, name|false, ...}: this worker's actors, but the
 * caller, that trap exits and are not a supervisor's children: those a
 * graceful stop asks to stop. */
typedef struct trapping {
  lua_State *L;
  ty_actor *self;
  int n;
} trapping;

static void take_trapping(ty_actor *a, void *ud) {
  trapping *t = ud;
  lt_actor *la = a->user;
  if (a == t->self || !la || !la->trap_exit || la->supervised || la->parent)
    return;
  lua_pushnumber(t->L, (lua_Number)a->pid);
  lua_rawseti(t->L, -2, ++t->n);
  char name[128];
  size_t nl = lt_names_of(a->pid, name, sizeof name);
  if (nl) lua_pushlstring(t->L, name, nl);
  else lua_pushboolean(t->L, 0);
  lua_rawseti(t->L, -2, ++t->n);
}

static int l_trapping(lua_State *L) {
  lt_cur c = lt_current(L, "shutdown");
  lua_newtable(L);
  trapping t = {L, c.a, 0};
  ty_worker_each_actor(ty_worker_current(), take_trapping, &t);
  return 1;
}

/* The servers a graceful stop drains first (lua/tycho/http.lua registers
 * each server's supervising fork): a short list under a mutex, touched
 * only when a server starts or ends. */
#define STOP_HOOKS 256
static pthread_mutex_t g_hooks_mu = PTHREAD_MUTEX_INITIALIZER;
static ty_pid g_hooks[STOP_HOOKS];
static int g_nhooks;

/* _stop_hook(pid, on): adds (on) or removes pid; false when full. */
static int l_stop_hook(lua_State *L) {
  ty_pid pid = (ty_pid)luaL_checknumber(L, 1);
  bool on = lua_toboolean(L, 2), ok = true;
  pthread_mutex_lock(&g_hooks_mu);
  for (int i = 0; i < g_nhooks; i++) /* pid, and servers that died */
    if (g_hooks[i] == pid ||
        !(lt_ctx_get()->rt && ty_pid_alive(lt_ctx_get()->rt, g_hooks[i])))
      g_hooks[i--] = g_hooks[--g_nhooks];
  if (on) ok = g_nhooks < STOP_HOOKS;
  if (on && ok) g_hooks[g_nhooks++] = pid;
  pthread_mutex_unlock(&g_hooks_mu);
  lua_pushboolean(L, ok);
  return 1;
}

/* _stop_hooks() -> {pid, ...} */
static int l_stop_hooks(lua_State *L) {
  lua_newtable(L);
  pthread_mutex_lock(&g_hooks_mu);
  for (int i = 0; i < g_nhooks; i++) {
    lua_pushnumber(L, (lua_Number)g_hooks[i]);
    lua_rawseti(L, -2, i + 1);
  }
  pthread_mutex_unlock(&g_hooks_mu);
  return 1;
}

static const luaL_Reg funcs[] = {{"_obs_snapshot", l_snapshot},
                                 {"_obs_tick_ns", l_tick_ns},
                                 {"_obs_traceback", l_traceback},
                                 {"_obs_busy", l_busy},
                                 {"_obs_forget", l_forget},
                                 {"_obs_source", l_source},
                                 {"_trace_set", l_trace_set},
                                 {"_obs_mtime", l_mtime},
                                 {"_obs_io", l_io},
                                 {"_obs_alive", l_alive},
                                 {"_obs_trapping", l_trapping},
                                 {"_stop_hook", l_stop_hook},
                                 {"_stop_hooks", l_stop_hooks},
                                 {NULL, NULL}};

void lt_open_observe(lua_State *L) { luaL_register(L, NULL, funcs); }
