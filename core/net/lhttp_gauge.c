/*
 * lhttp_gauge.c - per-server connection gauges: process-wide counters that
 * cap a server's open connections over every worker (and, optionally, per
 * client address). A connection holds a slot as a resource of the actor
 * (fork) serving it, so the slot comes back however it ends. And
 * reclaiming slots: the connections of one acceptor (one worker), ranked by
 * how readily they give their slot up.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "base/list.h"
#include "lhttp_impl.h"
#include "ltcp.h"
#include "lua/lapi.h"

/* ---- gauges ---------------------------------------------------------------------- */

/* Open connections of one client address (per_ip gauges): a chained hash
 * table, the address's text as key. */
typedef struct ipnode {
  struct ipnode *next;
  int count;
  char key[48]; /* INET6_ADDRSTRLEN and a bit */
} ipnode;

/* A gauge is named by an id (index | generation << 20) that any worker can
 * hold: a stale id (freed gauge) finds a newer generation and is ignored. */
typedef struct gauge {
  uint32_t gen;
  int count, max;
  int per_ip; /* connections per client address; 0: no limit */
  bool live;
  ipnode **ips; /* per_ip: nips entries in ipcap buckets */
  uint32_t nips, ipcap;
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

/* ---- per-address counts (under g_mu) --------------------------------------------- */

static uint32_t ip_hash(const char *k) {
  uint32_t h = 2166136261u; /* FNV-1a */
  for (; *k; k++) h = (h ^ (unsigned char)*k) * 16777619u;
  return h;
}

static ipnode **ip_slot(gauge *g, const char *k) {
  ipnode **s = &g->ips[ip_hash(k) & (g->ipcap - 1)];
  while (*s && strcmp((*s)->key, k) != 0) s = &(*s)->next;
  return s;
}

static void ip_grow(gauge *g) {
  uint32_t cap = g->ipcap ? g->ipcap * 2 : 64;
  ipnode **old = g->ips, **nt = ty__xcalloc(cap, sizeof *nt);
  for (uint32_t i = 0; i < g->ipcap; i++) {
    for (ipnode *n = old[i], *next; n; n = next) {
      next = n->next;
      ipnode **s = &nt[ip_hash(n->key) & (cap - 1)];
      n->next = *s;
      *s = n;
    }
  }
  free(old);
  g->ips = nt;
  g->ipcap = cap;
}

/* Takes one connection of address k: false when it has per_ip already. */
static bool ip_enter(gauge *g, const char *k) {
  if (g->nips >= g->ipcap) ip_grow(g);
  ipnode **s = ip_slot(g, k);
  if (!*s) {
    *s = ty__xcalloc(1, sizeof **s);
    snprintf((*s)->key, sizeof(*s)->key, "%s", k);
    g->nips++;
  }
  if ((*s)->count >= g->per_ip) return false;
  (*s)->count++;
  return true;
}

static void ip_leave(gauge *g, const char *k) {
  if (!g->ipcap) return;
  ipnode **s = ip_slot(g, k), *n = *s;
  if (!n || --n->count > 0) return;
  *s = n->next;
  free(n);
  g->nips--;
}

static void ip_free_all(gauge *g) {
  for (uint32_t i = 0; i < g->ipcap; i++) {
    for (ipnode *n = g->ips[i], *next; n; n = next) {
      next = n->next;
      free(n);
    }
  }
  free(g->ips);
  g->ips = NULL;
  g->nips = g->ipcap = 0;
}

/* Under g_mu: frees a gauge's slot in the table. */
static void gauge_end(gauge *g) {
  g->live = false;
  ip_free_all(g);
}

typedef struct gauge_res {
  lt_res res; /* first: the cast back */
  double id;
  bool owner;  /* the gauge itself (else one slot of it) */
  char ip[48]; /* the slot's client address ("" : not counted) */
} gauge_res;

static void gauge_res_close(lt_res *r) {
  gauge_res *g = (gauge_res *)r;
  pthread_mutex_lock(&g_mu);
  gauge *ga = gauge_find(g->id);
  if (ga && g->owner) {
    gauge_end(ga);
  } else if (ga) {
    ga->count--;
    if (g->ip[0]) ip_leave(ga, g->ip);
  }
  pthread_mutex_unlock(&g_mu);
  free(g);
}

static lt_actor *current_la(lua_State *L, const char *fname) {
  ty_actor *a = ty_actor_current();
  if (!a)
    luaL_error(L, "tycho.http.%s must be called from inside an actor", fname);
  return a->user;
}

static void hold(lt_actor *la, double id, bool owner, const char *ip) {
  gauge_res *g = ty__xcalloc(1, sizeof *g);
  g->res.close = gauge_res_close;
  g->id = id;
  g->owner = owner;
  if (ip) snprintf(g->ip, sizeof g->ip, "%s", ip);
  lt_res_add(la, &g->res);
}

/* gauge_new(max [, per_ip]) -> id: lives while the calling actor does. */
int lt_http_gauge_new(lua_State *L) {
  int max = (int)luaL_checkinteger(L, 1);
  int per_ip = (int)luaL_optinteger(L, 2, 0);
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
    g_tab[i] = (gauge){0};
  }
  gauge *ga = &g_tab[i];
  ga->gen++;
  ga->count = 0;
  ga->max = max;
  ga->per_ip = per_ip > 0 ? per_ip : 0;
  ga->live = true;
  double id = (double)(((uint64_t)ga->gen << GAUGE_BITS) | i);
  pthread_mutex_unlock(&g_mu);
  hold(la, id, true, NULL);
  lua_pushnumber(L, id);
  return 1;
}

/* gauge_enter(id [, ip]) -> true, open | false, "full" | false, "ip": a
 * slot held by the calling actor (a connection's fork) until it ends;
 * "ip": the client address ip has per_ip connections already. A freed
 * gauge admits everyone. */
int lt_http_gauge_enter(lua_State *L) {
  double id = luaL_checknumber(L, 1);
  char key[48], *ip = NULL; /* a node's key holds as much */
  if (!lua_isnoneornil(L, 2)) {
    snprintf(key, sizeof key, "%s", luaL_checkstring(L, 2));
    ip = key;
  }
  lt_actor *la = current_la(L, "gauge_enter");
  pthread_mutex_lock(&g_mu);
  gauge *ga = gauge_find(id);
  const char *why = ga && ga->count >= ga->max ? "full" : NULL;
  if (!ga || !ga->per_ip) ip = NULL; /* not counted */
  if (!why && ip && !ip_enter(ga, ip)) why = "ip";
  int open = ga && !why ? ++ga->count : 0;
  pthread_mutex_unlock(&g_mu);
  if (why) {
    lua_pushboolean(L, 0);
    lua_pushstring(L, why);
    return 2;
  }
  if (ga) hold(la, id, false, ip);
  lua_pushboolean(L, 1);
  lua_pushinteger(L, open);
  return 2;
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
  if (ga) gauge_end(ga);
  pthread_mutex_unlock(&g_mu);
  return 0;
}

/* ---- reclaiming slots -------------------------------------------------------------- */

/* Only the acceptor's worker touches its cfg and parsers: no lock. */
void lt_http_list(hparser *p) { TY_LIST_PUSH(&p->cfg->conns, p, next, prev); }

void lt_http_unlist(hparser *p) {
  if (!p->conn) return;
  TY_LIST_UNLINK(&p->cfg->conns, p, next, prev);
  p->prev = p->next = NULL;
  p->conn = NULL;
}

enum { R_BUSY, R_WAIT, R_IDLE, R_LINGER };

/* An idle keep-alive connection goes before one that has waited up to this
 * much longer for its request (seconds). */
#define IDLE_FIRST 1.0

/* How readily p's connection gives its slot up: the class, and how long it
 * has waited for its next request (seconds). Busy: a request being
 * answered, a body coming, a response going out, a connection taken over.
 * Idle: served already, waiting for another request (keep-alive). Wait:
 * no complete request yet (a new connection, a head in progress): a client
 * sends its head at once, so the longer the wait, the likelier it is an
 * idle or slow (slowloris) client. */
static int rank(const hparser *p, double now, double *age) {
  lt_conn *c = p->conn ? p->conn->c : NULL;
  *age = 0;
  if (!c || c->closed || c->writer || p->taken || p->ready) return R_BUSY;
  if (p->closing) return R_LINGER; /* answered; draining the client */
  if (p->in_msg && p->head_done) return R_BUSY;
  *age = now - p->t_idle;
  return !p->in_msg && p->served ? R_IDLE : R_WAIT;
}

/* The order of reclaiming: lingering connections, then by wait, idle ones
 * IDLE_FIRST s ahead; < 0: busy, never. */
static double score(const hparser *p, double now, int *cls) {
  double age;
  *cls = rank(p, now, &age);
  switch (*cls) {
  case R_LINGER: return 1e12;
  case R_IDLE: return age + IDLE_FIRST;
  case R_WAIT: return age;
  default: return -1;
  }
}

/* hc.reclaim(cfg [, min_wait]): closes the connection that gives its slot
 * up most readily; one still waiting for its request is passed over until
 * it has waited min_wait seconds (default 0). Out of descriptors, a
 * connection accepted a moment ago has its request on the way: closing it
 * would reset a client that did nothing wrong, and accept the next one
 * only to close it in turn (lua/tycho/http.lua, fd_short). */
int lt_http_reclaim(lua_State *L) {
  hcfg *cfg = luaL_checkudata(L, 1, CONFIG_MT);
  double min_wait = luaL_optnumber(L, 2, 0);
  double now = lt_http_now(), best = -1;
  hparser *v = NULL;
  for (hparser *p = cfg->conns; p; p = p->next) {
    int cls;
    double s = score(p, now, &cls);
    if (cls == R_WAIT && s < min_wait) continue;
    if (s > best) {
      v = p;
      best = s;
    }
  }
  if (v) lt_conn_close(v->conn->c); /* its reader hears "closed" */
  lua_pushboolean(L, v != NULL);
  return 1;
}

int lt_http_sweep(lua_State *L) {
  hcfg *cfg = luaL_checkudata(L, 1, CONFIG_MT);
  double lim = luaL_checknumber(L, 2), now = lt_http_now(), age;
  int n = 0;
  for (hparser *p = cfg->conns; p; p = p->next) {
    int r = rank(p, now, &age);
    if (r == R_LINGER || (r != R_BUSY && age > lim)) {
      lt_conn_close(p->conn->c); /* p stays listed until its fork ends */
      n++;
    }
  }
  lua_pushinteger(L, n);
  return 1;
}
