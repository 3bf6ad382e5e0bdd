/*
 * lhttp_gauge.c - per-server connection gauges: process-wide counters that
 * cap a server's open connections over every worker. A connection holds a
 * slot as a resource of the actor (fork) serving it, so the slot comes back
 * however it ends.
 */
#include <math.h>
#include <pthread.h>

#include "lhttp_impl.h"
#include "lua/lapi.h"

/* ---- gauges ---------------------------------------------------------------------- */

/* A gauge is named by an id (index | generation << 20) that any worker can
 * hold: a stale id (freed gauge) finds a newer generation and is ignored. */
typedef struct gauge {
  uint32_t gen;
  int count, max;
  bool live;
} gauge;

#define GAUGE_BITS 20

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static gauge *g_tab;
static uint32_t g_n;

/* Under g_mu: the live gauge named id, or NULL. */
static gauge *gauge_find(double id) {
  if (!(id >= 0) || id != floor(id)) return NULL;
  uint64_t v = (uint64_t)id;
  uint32_t i = (uint32_t)(v & ((1u << GAUGE_BITS) - 1));
  if (i >= g_n || !g_tab[i].live || g_tab[i].gen != (uint32_t)(v >> GAUGE_BITS))
    return NULL;
  return &g_tab[i];
}

typedef struct gauge_res {
  lt_res res; /* first: the cast back */
  double id;
  bool owner; /* the gauge itself (else one slot of it) */
} gauge_res;

static void gauge_res_close(lt_res *r) {
  gauge_res *g = (gauge_res *)r;
  pthread_mutex_lock(&g_mu);
  gauge *ga = gauge_find(g->id);
  if (ga && g->owner) ga->live = false;
  else if (ga) ga->count--;
  pthread_mutex_unlock(&g_mu);
  free(g);
}

static lt_actor *current_la(lua_State *L, const char *fname) {
  ty_actor *a = ty_actor_current();
  if (!a)
    luaL_error(L, "tycho.http.%s must be called from inside an actor", fname);
  return a->user;
}

static void hold(lt_actor *la, double id, bool owner) {
  gauge_res *g = ty__xcalloc(1, sizeof *g);
  g->res.close = gauge_res_close;
  g->id = id;
  g->owner = owner;
  lt_res_add(la, &g->res);
}

/* gauge_new(max) -> id: lives while the calling actor does. */
int lt_http_gauge_new(lua_State *L) {
  int max = (int)luaL_checkinteger(L, 1);
  lt_actor *la = current_la(L, "gauge_new");
  pthread_mutex_lock(&g_mu);
  uint32_t i = 0;
  while (i < g_n && g_tab[i].live) i++;
  if (i == g_n) {
    if (g_n >= (1u << GAUGE_BITS)) {
      pthread_mutex_unlock(&g_mu);
      return luaL_error(L, "tycho.http: too many servers");
    }
    g_tab = ty__xrealloc(g_tab, ++g_n * sizeof *g_tab);
    g_tab[i].gen = 0;
  }
  gauge *ga = &g_tab[i];
  ga->gen++;
  ga->count = 0;
  ga->max = max;
  ga->live = true;
  double id = (double)(((uint64_t)ga->gen << GAUGE_BITS) | i);
  pthread_mutex_unlock(&g_mu);
  hold(la, id, true);
  lua_pushnumber(L, id);
  return 1;
}

/* gauge_enter(id) -> true | false (full): a slot held by the calling actor
 * (a connection's fork) until it ends. A freed gauge admits everyone. */
int lt_http_gauge_enter(lua_State *L) {
  double id = luaL_checknumber(L, 1);
  lt_actor *la = current_la(L, "gauge_enter");
  pthread_mutex_lock(&g_mu);
  gauge *ga = gauge_find(id);
  bool ok = !ga || ga->count < ga->max;
  if (ga && ok) ga->count++;
  pthread_mutex_unlock(&g_mu);
  if (ga && ok) hold(la, id, false);
  lua_pushboolean(L, ok);
  return 1;
}

/* gauge_count(id) -> open slots, or nil once freed. */
int lt_http_gauge_count(lua_State *L) {
  double id = luaL_checknumber(L, 1);
  pthread_mutex_lock(&g_mu);
  gauge *ga = gauge_find(id);
  int n = ga ? ga->count : -1;
  pthread_mutex_unlock(&g_mu);
  if (n < 0) return 0;
  lua_pushinteger(L, n);
  return 1;
}

/* gauge_free(id): before its owner ends (a server closed). */
int lt_http_gauge_free(lua_State *L) {
  double id = luaL_checknumber(L, 1);
  pthread_mutex_lock(&g_mu);
  gauge *ga = gauge_find(id);
  if (ga) ga->live = false;
  pthread_mutex_unlock(&g_mu);
  return 0;
}
