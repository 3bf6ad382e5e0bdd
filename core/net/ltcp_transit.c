/*
 * ltcp_transit.c - connections and listeners inside messages: the codec
 * hooks. A connection moves (it leaves the sender's worker once the encode
 * succeeded, and the receiver's decode adopts it); a listener is shared.
 * Inside a message a handle travels as a token of the transit table; the
 * table is emptied when the last worker state that loaded the module
 * closes, so a handle whose message was never read does not outlive its
 * runtime.
 */
#include <pthread.h>
#include <string.h>

#include "ltls.h"
#include "lua/lapi.h"

/* What the current encode took: moved or shared once it succeeds. The list
 * lives only for one encode (tcp_encoded frees it): a thread-local array
 * kept between encodes would outlive the worker's thread. */
typedef struct pending {
  uint64_t token;
  int kind;
  void *ud; /* conn_ud or lst_ud */
} pending;

static _Thread_local pending *t_pend;
static _Thread_local size_t t_npend, t_cappend;

static int udata_kind(lua_State *L, int idx) {
  if (!lua_getmetatable(L, idx)) return 0;
  int kind = 0;
  lua_getfield(L, LUA_REGISTRYINDEX, LT_CONN_MT);
  if (lua_rawequal(L, -1, -2)) kind = LT_H_CONN;
  lua_pop(L, 1);
  lua_getfield(L, LUA_REGISTRYINDEX, LT_LISTENER_MT);
  if (!kind && lua_rawequal(L, -1, -2)) kind = LT_H_LISTENER;
  lua_pop(L, 2);
  return kind;
}

static int hook_fail(char *err, size_t errlen, const char *msg) {
  snprintf(err, errlen, "%s", msg);
  return -1;
}

/* Why c cannot travel now, or NULL. */
static const char *conn_stuck(const lt_conn *c, void *ud) {
  if (!c || c->closed) return "cannot send a closed tcp connection";
  if (c->reader || c->writer || c->connecting || ty__io_op_busy(&c->wop) ||
      !lt_tls_idle(c))
    return "cannot send a tcp connection while an actor reads or writes it";
  for (size_t i = 0; i < t_npend; i++)
    if (t_pend[i].ud == ud)
      return "cannot send the same tcp connection twice in one message";
  return NULL;
}

static int tcp_encode(lua_State *L, int idx, int to, uint64_t *token, char *err,
                      size_t errlen) {
  int kind = udata_kind(L, idx);
  if (!kind) return 1;
  if (to == LT_CODEC_TO_STORE)
    return hook_fail(err, errlen,
                     kind == LT_H_CONN
                         ? "cannot store a tcp connection in a shared table"
                         : "cannot store a tcp listener in a shared table");
  if (to == LT_CODEC_TO_NODE)
    return hook_fail(err, errlen,
                     kind == LT_H_CONN
                         ? "cannot send a tcp connection to another node"
                         : "cannot send a tcp listener to another node");
  void *ud = lua_touserdata(L, idx);
  if (kind == LT_H_CONN) {
    lt_conn *c = ((conn_ud *)ud)->c;
    /* Write-behind bytes still going out: let them, and the new owner
     * writes as conn:write always does. */
    if (c && !c->closed && lt_conn_settle_behind(c)) lt_conn_behind(c, false);
    const char *why = conn_stuck(c, ud);
    if (why) return hook_fail(err, errlen, why);
  } else if (!((lst_ud *)ud)->l) {
    return hook_fail(err, errlen, "cannot send a closed tcp listener");
  }
  if (t_npend == t_cappend) {
    size_t cap = t_cappend ? t_cappend * 2 : 8;
    pending *p = realloc(t_pend, cap * sizeof *t_pend);
    if (!p) return hook_fail(err, errlen, "out of memory");
    t_pend = p;
    t_cappend = cap;
  }
  *token = lt_transit_token();
  t_pend[t_npend++] = (pending){*token, kind, ud};
  return 0;
}

/* The connection leaves this worker: nothing here refers to it after. */
static void conn_detach(conn_ud *u) {
  lt_conn *c = u->c;
  u->c = NULL; /* its reference now belongs to the transit entry */
  c->moving = true;
  if (c->io) {
    ty__io_settle(c->io, &c->rop);
    ty__io_forget(c->io, c->fd);
  }
  if (c->owner) lt_res_remove(c->owner, &c->res);
  c->owner = NULL;
  c->w = NULL;
  c->io = NULL;
}

static void tcp_encoded(lua_State *L, bool ok) {
  (void)L;
  for (size_t i = 0; ok && i < t_npend; i++) {
    pending *p = &t_pend[i];
    if (p->kind == LT_H_CONN) {
      lt_conn *c = ((conn_ud *)p->ud)->c;
      conn_detach(p->ud);
      lt_transit_put(p->token, LT_H_CONN, c);
    } else {
      lt_listener *l = ((lst_ud *)p->ud)->l;
      lt_lst_ref(l); /* the copy's */
      lt_transit_put(p->token, LT_H_LISTENER, l);
    }
  }
  free(t_pend);
  t_pend = NULL;
  t_npend = t_cappend = 0;
}

/* A connection arrives: its receiver on this worker owns it. */
static void conn_adopt(lua_State *L, lt_conn *c) {
  ty_worker *w = ty_worker_current();
  ty_actor *a = ty_actor_current();
  if (!w || !a) { /* outside every actor (tycho.run's results): closed */
    c->closed = true;
    lt_conn_try_release(c);
    lt_conn_unref(c);
    lt_conn_push(L, NULL);
    return;
  }
  c->w = w;
  c->io = ty_worker_io(w);
  c->moving = false;
  c->owner = a->user;
  lt_res_add(c->owner, &c->res);
  lt_conn_push(L, c);
  c->refs--; /* the transit entry's reference became the userdata's */
}

static int tcp_decode(lua_State *L, uint64_t token) {
  int kind;
  void *p = lt_transit_take(token, &kind);
  if (!p && !ty_worker_current()) { /* swept with its runtime */
    lua_pushnil(L);
    return 0;
  }
  if (!p) return -1;
  if (kind == LT_H_CONN) {
    conn_adopt(L, p);
  } else {
    lt_lst_push(L, p, false); /* takes the entry's reference */
  }
  return 0;
}

void lt_tcp_drop(int kind, void *p) {
  if (kind == LT_H_LISTENER) {
    lt_lst_unref(p);
    return;
  }
  lt_conn *c = p;
  c->closed = true;
  lt_conn_try_release(c);
  lt_conn_unref(c);
}

/* A message with this handle will never be decoded. */
static void tcp_release(uint64_t token) {
  int kind;
  void *p = lt_transit_take(token, &kind);
  if (p) lt_tcp_drop(kind, p);
}

const lt_codec_hooks lt_tcp_hooks = {.encode = tcp_encode,
                                     .decode = tcp_decode,
                                     .done = tcp_encoded,
                                     .drop = tcp_release};

/* ---- the transit table ------------------------------------------------- */

#define TR_BUCKETS 1024

typedef struct tr_entry {
  uint64_t token;
  int kind;
  void *p;
  struct tr_entry *next;
} tr_entry;

static pthread_mutex_t g_tr_mu = PTHREAD_MUTEX_INITIALIZER;
static tr_entry *g_tr[TR_BUCKETS];
/* relaxed: only uniqueness matters; the mutex orders the entries. */
static _Atomic uint64_t g_tr_next = 1;

uint64_t lt_transit_token(void) {
  return atomic_fetch_add_explicit(&g_tr_next, 1, memory_order_relaxed);
}

void lt_transit_put(uint64_t token, int kind, void *p) {
  tr_entry *e = ty__xmalloc(sizeof *e);
  e->token = token;
  e->kind = kind;
  e->p = p;
  pthread_mutex_lock(&g_tr_mu);
  e->next = g_tr[token % TR_BUCKETS];
  g_tr[token % TR_BUCKETS] = e;
  pthread_mutex_unlock(&g_tr_mu);
}

void *lt_transit_take(uint64_t token, int *kind) {
  void *p = NULL;
  pthread_mutex_lock(&g_tr_mu);
  for (tr_entry **pp = &g_tr[token % TR_BUCKETS]; *pp; pp = &(*pp)->next) {
    tr_entry *e = *pp;
    if (e->token != token) continue;
    *pp = e->next;
    *kind = e->kind;
    p = e->p;
    free(e);
    break;
  }
  pthread_mutex_unlock(&g_tr_mu);
  return p;
}

/* Drops every handle still in transit: its message was never decoded. */
static void transit_sweep(void) {
  tr_entry *all = NULL;
  pthread_mutex_lock(&g_tr_mu);
  for (int i = 0; i < TR_BUCKETS; i++) {
    while (g_tr[i]) {
      tr_entry *e = g_tr[i];
      g_tr[i] = e->next;
      e->next = all;
      all = e;
    }
  }
  pthread_mutex_unlock(&g_tr_mu);
  while (all) {
    tr_entry *e = all;
    all = e->next;
    lt_tcp_drop(e->kind, e->p);
    free(e);
  }
}

/* Worker states that loaded tycho.core's net fields (lnet_open.c); the
 * last to close sweeps. */
static _Atomic int g_states;

static int sentinel_gc(lua_State *L) {
  (void)L;
  /* acq_rel: the last closer sees every other state's transit puts. */
  if (atomic_fetch_sub_explicit(&g_states, 1, memory_order_acq_rel) == 1)
    transit_sweep();
  return 0;
}

void lt_transit_count_state(lua_State *L) {
  static const char key = 0;
  lua_pushlightuserdata(L, (void *)&key);
  lua_rawget(L, LUA_REGISTRYINDEX);
  bool seen = !lua_isnil(L, -1);
  lua_pop(L, 1);
  if (seen) return;
  lua_pushlightuserdata(L, (void *)&key);
  lua_newuserdata(L, 1);
  lua_createtable(L, 0, 1);
  lua_pushcfunction(L, sentinel_gc);
  lua_setfield(L, -2, "__gc");
  lua_setmetatable(L, -2);
  lua_rawset(L, LUA_REGISTRYINDEX);
  /* relaxed: the count only has to reach zero after the last close. */
  atomic_fetch_add_explicit(&g_states, 1, memory_order_relaxed);
}
