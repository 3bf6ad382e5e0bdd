/*
 * lwait.c - waits for Lua drivers of foreign protocol libraries (tycho.pg,
 * lua/tycho/pg.lua, drives libpq through the FFI; libpq owns its socket):
 *
 *   core._fdwait(fd, events [, timeout]) -> revents | nil, "timeout" | nil, err
 *       waits until fd is ready (events: 1 readable, 4 writable, as poll(2))
 *       in the worker's io_uring or epoll set; the worker runs other actors.
 *   core._fdcancel(fd): ends this worker's waits on fd (nil, "cancelled").
 *   core._waiter() -> w    w:wait([timeout]) -> true | nil, "timeout"
 *       w:wake(): the waiting actor (or its next wait) returns true.
 *       A wake that finds nobody waiting is kept for the next wait.
 *   core._lease() -> l     l:dead() -> bool    l:release()
 *       a resource of the calling actor: dead() turns true once that actor
 *       ended without releasing it (a pool's connection it held is then in
 *       an unknown state and must be closed).
 *
 * All three live on the worker that made them (a pool is per worker): they
 * are plain memory, no atomics. A wait and a waiter are reference counted
 * (the userdata, a busy op, a waiting actor); a lease is its userdata, which
 * leaves its actor's resources when collected.
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>

#include "base/list.h"
#include "lua/lapi.h"
#include "lua/lpgstat.h"
#include "lwait.h"

#define LT_WAITER_MT "tycho.waiter"
#define LT_LEASE_MT "tycho.lease"

/* ---- _fdwait -------------------------------------------------------------- */

typedef struct lt_fdw {
  ty__io_op op;
  struct lt_fdw *next, *prev; /* this worker's busy waits (_fdcancel) */
  ty__io *io;
  ty_actor *waiter;
  int res; /* revents or -errno, once done */
  bool done;
  int refs; /* the busy op + the waiting actor */
} lt_fdw;

/* The waits whose op is busy on this worker's thread: _fdcancel finds them
 * by descriptor (a library about to close its socket). */
static _Thread_local lt_fdw *tls_busy;

static void fdw_unref(lt_fdw *f) {
  if (--f->refs == 0) free(f);
}

static void on_poll(ty__io_op *op, int res, const char *data) {
  (void)data;
  lt_fdw *f = op->ud;
  TY_LIST_UNLINK(&tls_busy, f, next, prev);
  f->res = res;
  f->done = true;
  if (f->waiter) ty_actor_wake(f->waiter);
  fdw_unref(f);
}

static int fdw_wake(lua_State *co, ty_actor *a, lt_actor *la, bool timed_out) {
  lt_fdw *f = lt_rare_get(la)->ext_ctx;
  int n;
  if (f->done && f->res >= 0) {
    lua_pushinteger(co, f->res);
    n = 1;
  } else if (f->done) {
    n = lt_push_fail(co, f->res == -ECANCELED ? "cancelled"
                                              : lt_net_errtok(f->res));
  } else if (!timed_out && !f->done) {
    return lt_net_rewait(a, la);
  } else {
    ty__io_cancel(f->io, &f->op);
    n = lt_push_fail(co, "timeout");
  }
  f->waiter = NULL;
  lt_rare_get(la)->ext_cancel = NULL;
  fdw_unref(f);
  return n;
}

/* The actor ended (or was killed) while waiting. */
static void fdw_cancel(ty_actor *a, lt_actor *la) {
  (void)a;
  lt_fdw *f = lt_rare_get(la)->ext_ctx;
  f->waiter = NULL;
  ty__io_cancel(f->io, &f->op);
  fdw_unref(f);
}

static int l_fdwait(lua_State *L) {
  int fd = (int)luaL_checkinteger(L, 1);
  unsigned events = (unsigned)luaL_checkinteger(L, 2);
  int64_t tmo = lt_net_timeout(L, 3, -1, "fdwait");
  ty_actor *a = lt_net_actor(L, "fdwait");
  if (fd < 0 || !(events & (POLLIN | POLLOUT)))
    return luaL_error(L, "fdwait: a descriptor and POLLIN/POLLOUT wanted");
  if (tmo == 0) return lt_push_fail(L, "timeout");
  lt_fdw *f = calloc(1, sizeof *f);
  if (!f) return lt_push_fail(L, "nomem");
  f->io = ty_worker_io(ty_worker_current());
  f->op.cb = on_poll;
  f->op.ud = f;
  int err = ty__io_poll(f->io, &f->op, fd, events);
  if (err) {
    free(f);
    return lt_push_fail(L, lt_net_errtok(err));
  }
  f->refs = 2;
  f->waiter = a;
  f->next = tls_busy;
  if (tls_busy) tls_busy->prev = f;
  tls_busy = f;
  lt_rare_get(a->user)->ext_cancel = fdw_cancel;
  return lt_yield_ext(L, "fdwait", fdw_wake, f, tmo);
}

/* core._fdcancel(fd): ends every wait on fd of this worker (the waiters get
 * nil, "cancelled"). After it, the descriptor may be closed: no epoll
 * record keeps an op on it. */
static int l_fdcancel(lua_State *L) {
  int fd = (int)luaL_checkinteger(L, 1);
  ty_worker *w = ty_worker_current();
  if (!w) return 0; /* not a worker's thread: no waits here */
  ty__io *io = ty_worker_io(w);
  for (lt_fdw *f = tls_busy; f; f = f->next)
    if (f->op.fd == fd) ty__io_cancel(io, &f->op);
  return 0;
}

/* ---- _waiter -------------------------------------------------------------- */

typedef struct lt_waiter {
  ty_actor *actor; /* waiting now */
  bool signalled;
  int refs; /* the userdata + a waiting actor */
} lt_waiter;

static void waiter_unref(lt_waiter *w) {
  if (--w->refs == 0) free(w);
}

static lt_waiter *check_waiter(lua_State *L) {
  lt_waiter **p = luaL_checkudata(L, 1, LT_WAITER_MT);
  return *p;
}

static int waiter_wake_fn(lua_State *co, ty_actor *a, lt_actor *la,
                          bool timed_out) {
  lt_waiter *w = lt_rare_get(la)->ext_ctx;
  int n;
  if (w->signalled) {
    w->signalled = false;
    lua_pushboolean(co, 1);
    n = 1;
  } else if (!timed_out) {
    return lt_net_rewait(a, la);
  } else {
    n = lt_push_fail(co, "timeout");
  }
  w->actor = NULL;
  lt_rare_get(la)->ext_cancel = NULL;
  waiter_unref(w);
  return n;
}

static void waiter_cancel(ty_actor *a, lt_actor *la) {
  (void)a;
  lt_waiter *w = lt_rare_get(la)->ext_ctx;
  w->actor = NULL;
  waiter_unref(w);
}

static int l_waiter_wait(lua_State *L) {
  lt_waiter *w = check_waiter(L);
  int64_t tmo = lt_net_timeout(L, 2, -1, "waiter:wait");
  ty_actor *a = lt_net_actor(L, "waiter:wait");
  if (w->signalled) {
    w->signalled = false;
    lua_pushboolean(L, 1);
    return 1;
  }
  if (w->actor) return luaL_error(L, "waiter:wait: another actor waits");
  if (tmo == 0) return lt_push_fail(L, "timeout");
  w->actor = a;
  w->refs++;
  lt_rare_get(a->user)->ext_cancel = waiter_cancel;
  return lt_yield_ext(L, "waiter:wait", waiter_wake_fn, w, tmo);
}

static int l_waiter_wake(lua_State *L) {
  lt_waiter *w = check_waiter(L);
  w->signalled = true;
  if (w->actor) ty_actor_wake(w->actor);
  lua_pushboolean(L, w->actor != NULL);
  return 1;
}

static int l_waiter_gc(lua_State *L) {
  lt_waiter **p = lua_touserdata(L, 1);
  if (*p) waiter_unref(*p);
  *p = NULL;
  return 0;
}

static int l_waiter_tostring(lua_State *L) {
  lua_pushliteral(L, "waiter");
  return 1;
}

static const luaL_Reg waiter_methods[] = {{"wait", l_waiter_wait},
                                          {"wake", l_waiter_wake},
                                          {NULL, NULL}};

static int l_waiter(lua_State *L) {
  lt_waiter **p = lua_newuserdata(L, sizeof *p);
  *p = NULL;
  /* the metatable (and so __gc) first: building it can raise, and then the
   * memory below would have no owner */
  lt_net_metatable(L, LT_WAITER_MT, waiter_methods, l_waiter_gc,
                   l_waiter_tostring);
  lua_setmetatable(L, -2);
  *p = calloc(1, sizeof **p);
  if (!*p) return luaL_error(L, "waiter: out of memory");
  (*p)->refs = 1;
  return 1;
}

/* ---- _lease --------------------------------------------------------------- */

typedef struct lt_lease {
  lt_res res; /* first, for the cast back */
  lt_actor *owner;
  bool dead;
} lt_lease;

static void lease_res_close(lt_res *r) {
  lt_lease *l = (lt_lease *)r;
  l->owner = NULL;
  l->dead = true;
}

static void lease_release(lt_lease *l) {
  if (l->owner) lt_res_remove(l->owner, &l->res);
  l->owner = NULL;
}

static int l_lease_dead(lua_State *L) {
  lt_lease *l = luaL_checkudata(L, 1, LT_LEASE_MT);
  lua_pushboolean(L, l->dead);
  return 1;
}

static int l_lease_release(lua_State *L) {
  lease_release(luaL_checkudata(L, 1, LT_LEASE_MT));
  return 0;
}

static int l_lease_gc(lua_State *L) {
  lease_release(lua_touserdata(L, 1));
  return 0;
}

static int l_lease_tostring(lua_State *L) {
  lua_pushliteral(L, "lease");
  return 1;
}

static const luaL_Reg lease_methods[] = {{"dead", l_lease_dead},
                                         {"release", l_lease_release},
                                         {NULL, NULL}};

static int l_lease(lua_State *L) {
  ty_actor *a = lt_net_actor(L, "lease");
  lt_lease *l = lua_newuserdata(L, sizeof *l);
  l->res.close = lease_res_close;
  l->owner = NULL;
  l->dead = false;
  /* the metatable (and so __gc) before the actor links it: building it can
   * raise, and a linked lease without __gc would stay in the actor's list
   * after its memory is collected */
  lt_net_metatable(L, LT_LEASE_MT, lease_methods, l_lease_gc, l_lease_tostring);
  lua_setmetatable(L, -2);
  l->owner = a->user;
  lt_res_add(l->owner, &l->res);
  return 1;
}

/* A libpq notice processor that drops what it gets: libpq's default prints
 * to stderr, e.g. the server's "terminating connection" to an idle
 * connection, which the pool finds closed anyway. A C function, so that
 * libpq never calls back into Lua (core._quiet_notice hands its address to
 * lua/tycho/pg_lib.lua). */
static void quiet_notice(void *arg, const char *msg) {
  (void)arg;
  (void)msg;
}

void lt_open_wait(lua_State *L) {
  union {
    void (*fn)(void *, const char *);
    void *p;
  } u = {.fn = quiet_notice};
  lua_pushlightuserdata(L, u.p);
  lua_setfield(L, -2, "_quiet_notice");
  lua_pushcfunction(L, lt_pg_count);
  lua_setfield(L, -2, "_pg_count");
  lua_pushcfunction(L, lt_pg_names);
  lua_setfield(L, -2, "_pg_names");
  lua_pushcfunction(L, l_fdwait);
  lua_setfield(L, -2, "_fdwait");
  lua_pushcfunction(L, l_fdcancel);
  lua_setfield(L, -2, "_fdcancel");
  lua_pushcfunction(L, l_waiter);
  lua_setfield(L, -2, "_waiter");
  lua_pushcfunction(L, l_lease);
  lua_setfield(L, -2, "_lease");
}
