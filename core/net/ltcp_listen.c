/*
 * ltcp_listen.c - a tycho.tcp listener: one socket shared by every actor
 * that holds a copy, a multishot accept on each worker where an actor
 * accepts, and the hand-over of each connection to the longest waiter
 * (ltcp.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <string.h>
#include <unistd.h>

#include "base/list.h"
#include "base/log.h"
#include "ltls.h"
#include "lua/lapi.h"
#include "lua/lrun.h"

/* Every listener, for the watchdog (lst_on_stuck). */
static pthread_mutex_t g_lst_mu = PTHREAD_MUTEX_INITIALIZER;
static lt_listener *g_lst; /* guarded by g_lst_mu */

void lt_lst_ref(lt_listener *l) {
  /* relaxed: the caller holds a reference already. */
  atomic_fetch_add_explicit(&l->refs, 1, memory_order_relaxed);
}

/* Closes what was accepted and never taken (under mu, or unshared). */
static void q_drain(lt_listener *l) {
  while (l->qn) {
    close(l->q[l->qh].fd);
    l->qh = (l->qh + 1) % l->qcap;
    l->qn--;
  }
}

/* No op is busy and nobody waits (each holds a reference): any thread. */
static void lst_destroy(lt_listener *l) {
  pthread_mutex_lock(&g_lst_mu);
  TY_LIST_UNLINK(&g_lst, l, gnext, gprev);
  pthread_mutex_unlock(&g_lst_mu);
  q_drain(l);
  free(l->q);
  close(l->fd);
  SSL_CTX_free(l->tls); /* sessions of accepted connections keep theirs */
  free(l->shed);
  pthread_mutex_destroy(&l->mu);
  free(l);
}

void lt_lst_unref(lt_listener *l) {
  /* acq_rel: the last holder sees every other thread's writes first. */
  if (atomic_fetch_sub_explicit(&l->refs, 1, memory_order_acq_rel) == 1)
    lst_destroy(l);
}

static bool lst_closed(lt_listener *l) {
  /* acquire: pairs with the release store in lst_close. */
  return atomic_load_explicit(&l->closed, memory_order_acquire);
}

/* Queued connections are dealt to the accepting workers in turn: the
 * worker whose ring took a burst would otherwise take it all (its acceptor
 * loops back to the queue while the others are still being woken), and
 * with keep-alive clients that imbalance lasts as long as the connections
 * (bench/results-http.md: half the throughput in some runs). An entry no
 * one took for LT_QUEUE_KEEP_NS goes to any taker (take_now), so none is
 * stranded on a worker that stopped accepting. Under mu. */
static void q_push(lt_listener *l, int fd) {
  if (l->qn == l->qcap) {
    unsigned cap = l->qcap ? l->qcap * 2 : ACCEPT_QUEUE;
    lt_qent *q = ty__xmalloc(cap * sizeof *q);
    for (unsigned k = 0; k < l->qn; k++) q[k] = l->q[(l->qh + k) % l->qcap];
    free(l->q);
    l->q = q;
    l->qh = 0;
    l->qcap = cap;
  }
  unsigned w = 0;
  for (unsigned k = 0; k < l->n; k++) {
    w = (l->rr + k) % l->n;
    /* relaxed: a hint; a wrong one costs LT_QUEUE_KEEP_NS at most. */
    if (atomic_load_explicit(&l->slots[w].used, memory_order_relaxed)) break;
  }
  l->rr = w + 1;
  l->q[(l->qh + l->qn++) % l->qcap] =
      (lt_qent){.fd = fd, .worker = w, .at = ty__now_ns()};
}

/* Takes entry k of the queue out (under mu). */
static int q_take(lt_listener *l, unsigned k) {
  int fd = l->q[(l->qh + k) % l->qcap].fd;
  for (; k > 0; k--)
    l->q[(l->qh + k) % l->qcap] = l->q[(l->qh + k - 1) % l->qcap];
  l->qh = (l->qh + 1) % l->qcap;
  l->qn--;
  return fd;
}

static void waiter_link(lt_listener *l, lt_waiter *w) {
  TY_LIST_APPEND(&l->wh, &l->wt, w, next, prev);
  w->listed = true;
}

static void waiter_unlink(lt_listener *l, lt_waiter *w) {
  if (!w->listed) return;
  TY_LIST_UNLINK_TAIL(&l->wh, &l->wt, w, next, prev);
  w->listed = false;
}

/* Handed a connection, until its actor takes it (a stuck worker's never
 * will: lst_on_stuck hands it on). Under mu. */
static void handed_link(lt_listener *l, lt_waiter *w) {
  TY_LIST_PUSH(&l->handed, w, hnext, hprev);
  w->handed = true;
}

static void handed_unlink(lt_listener *l, lt_waiter *w) {
  if (!w->handed) return;
  TY_LIST_UNLINK(&l->handed, w, hnext, hprev);
  w->handed = false;
}

/* Wakes an actor waiting in an I/O call: directly on its own worker; from
 * another worker with a nudge, a message that matches the LT_W_EXT wait
 * (ref UINT64_MAX) and that recv drops should it come late. */
static void wake_any(ty_actor *a, ty_pid pid, unsigned worker) {
  ty_worker *me = ty_worker_current(); /* NULL: the watchdog */
  if (me && worker == ty_worker_id(me)) {
    ty_actor_wake(a);
    return;
  }
  ty_msg *m = ty_msg_new(0);
  m->to = pid;
  m->kind = LT_NUDGE;
  m->ref = UINT64_MAX;
  if (ty_send(lt_ctx_get()->rt, m)) ty_msg_free(m);
}

/* Wakes every waiter (under mu); they find out why themselves. */
static void wake_all(lt_listener *l) {
  for (lt_waiter *w = l->wh; w; w = w->next) wake_any(w->a, w->pid, w->worker);
}

/* A new connection goes to the actor that has waited longest, on whatever
 * worker, or to the queue. Returns the queue's length. */
static unsigned hand(lt_listener *l, int fd) {
  pthread_mutex_lock(&l->mu);
  if (l->nofile_since) lt_nofile_clear(l); /* accepts work again */
  lt_waiter *w = l->wh;
  if (lst_closed(l)) {
    close(fd);
  } else if (w) {
    waiter_unlink(l, w);
    w->fd = fd;
    handed_link(l, w);
    wake_any(w->a, w->pid, w->worker);
  } else {
    q_push(l, fd);
  }
  unsigned qn = l->qn;
  pthread_mutex_unlock(&l->mu);
  return qn;
}

static void slot_arm(lt_lslot *s);

static void on_accept(ty__io_op *op, int res, const char *data) {
  (void)data;
  lt_lslot *s = op->ud;
  lt_listener *l = s->l;
  /* Nobody takes them: leave the rest in the kernel's backlog. */
  if (res >= 0 && hand(l, res) >= ACCEPT_QUEUE && ty__io_op_armed(op))
    ty__io_cancel(ty_worker_io(ty_worker_current()), op);
  if (ty__io_op_busy(op)) return;
  /* acquire: pairs with the release in lst_swap; the new socket is set. */
  bool swapped =
      s->gen != atomic_load_explicit(&l->gen, memory_order_acquire) ||
      atomic_load_explicit(&l->swapping, memory_order_acquire);
  if (res == -ECANCELED || (res < 0 && swapped)) {
    /* A pause ended (takers that drained the queue meanwhile found the op
     * busy and could not re-arm it: do it for them), or the socket was
     * replaced under us: accept on the new one. */
    slot_arm(s);
  } else if (res < 0 && !lst_closed(l)) {
    lt_nofile_hit(l, res); /* out of descriptors: back off (ltcp_nofile.c) */
    pthread_mutex_lock(&l->mu);
    l->err = res; /* EMFILE and friends: the next accept reports it */
    wake_all(l);
    pthread_mutex_unlock(&l->mu);
  }
  lt_lst_unref(l); /* the op's reference */
}

/* Arms this worker's accept if it should run and does not. */
static void slot_arm(lt_lslot *s) {
  lt_listener *l = s->l;
  if (ty__io_op_busy(&s->op) || lst_closed(l)) return;
  pthread_mutex_lock(&l->mu);
  /* (a back-off: its waiters arm it when it ends, wait_until) */
  bool full = l->qn >= ACCEPT_QUEUE / 2 || lt_nofile_until(l);
  pthread_mutex_unlock(&l->mu);
  if (full) return;
  ty__io *io = ty_worker_io(ty_worker_current());
  /* acquire: as in on_accept. */
  s->gen = atomic_load_explicit(&l->gen, memory_order_acquire);
  int err = ty__io_accept(io, &s->op, l->fd);
  if (!err) {
    lt_lst_ref(l);
    /* relaxed: hints for the watchdog, which swaps at worst needlessly. */
    atomic_store_explicit(&s->uring, ty__io_kind(io) == TY_IO_URING,
                          memory_order_relaxed);
    atomic_store_explicit(&s->used, true, memory_order_relaxed);
    return;
  }
  pthread_mutex_lock(&l->mu);
  l->err = err;
  pthread_mutex_unlock(&l->mu);
}

static lst_ud *check_lst_ud(lua_State *L) {
  return luaL_checkudata(L, 1, LT_LISTENER_MT);
}

void lt_lst_push(lua_State *L, lt_listener *l, bool owner) {
  lst_ud *u = lua_newuserdata(L, sizeof *u);
  u->l = l;
  u->owner = owner;
  lt_lst_metatable(L);
  lua_getfield(L, LUA_REGISTRYINDEX, LT_LISTENER_MT);
  lua_setmetatable(L, -2);
}

/* Closes the listener for every actor (on its creator's worker): waiters
 * wake and hear "closed"; the shutdown ends the accept op of every worker
 * (on that worker), and each op's end lets go of its reference. */
static void lst_close(lt_listener *l) {
  if (!l->owner) return; /* closed already */
  lt_res_remove(l->owner, &l->res);
  l->owner = NULL;
  pthread_mutex_lock(&l->mu);
  /* release: readers outside the mutex (acquire) see the queue drained. */
  atomic_store_explicit(&l->closed, true, memory_order_release);
  q_drain(l);
  wake_all(l);
  pthread_mutex_unlock(&l->mu);
  shutdown(l->fd, SHUT_RD);
  lt_lst_unref(l); /* the owner's reference */
}

static void lst_res_close(lt_res *r) {
  lst_close((lt_listener *)((char *)r - offsetof(lt_listener, res)));
}

static int opt_int_field(lua_State *L, const char *k, int def, int lo, int hi) {
  lua_getfield(L, 1, k);
  int v = def;
  if (!lua_isnil(L, -1)) {
    lua_Number n = luaL_checknumber(L, -1);
    if (!(n >= lo && n <= hi) || n != (lua_Number)(int)n)
      luaL_error(L, "tycho.tcp.listen: %s must be an integer from %d to %d", k,
                 lo, hi);
    v = (int)n;
  }
  lua_pop(L, 1);
  return v;
}

/* A listening socket on ss (whose port it then holds); fd or -errno. */
static int listen_socket(struct sockaddr_storage *ss, socklen_t len,
                         int backlog) {
  int fd = socket(ss->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -errno;
  int one = 1;
  socklen_t sl = sizeof *ss;
  if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) ||
      bind(fd, (struct sockaddr *)ss, len) || listen(fd, backlog) ||
      getsockname(fd, (struct sockaddr *)ss, &sl)) {
    int err = -errno;
    close(fd);
    return err;
  }
  return fd;
}

/* ---- a worker declared stuck (the watchdog thread) ----------------------
 *
 * Its acceptors will never take what is handed to them, and with io_uring
 * its armed accept keeps the socket's wake-ups: accept polls are exclusive,
 * and its task work never runs, so no other worker would see a connection
 * again. Another thread cannot cancel that op (SINGLE_ISSUER), so the
 * socket itself is replaced: the backlog is accepted here and handed out,
 * the old socket is shut down (its pending accepts end, and the stuck
 * one's holds a dead socket), and a new one bound to the same address
 * takes its descriptor (dup3). The other workers' accepts end with an error
 * across the swap and are armed again on the new socket. epoll needs none
 * of this: its readiness is not exclusive.
 */

/* A listening socket like l's, on its address; -errno on failure. */
static int relisten(lt_listener *l) {
  int fd =
      socket(l->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -errno;
  int one = 1, v6only = 0;
  socklen_t len = sizeof v6only;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (l->addr.ss_family == AF_INET6 &&
      getsockopt(l->fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, &len) == 0)
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, sizeof v6only);
  socklen_t alen = l->addr.ss_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                                 : sizeof(struct sockaddr_in);
  if (bind(fd, (struct sockaddr *)&l->addr, alen) || listen(fd, l->backlog)) {
    int err = -errno;
    close(fd);
    return err;
  }
  return fd;
}

static void drain_backlog(lt_listener *l) {
  int fd;
  while ((fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0)
    hand(l, fd);
}

static void lst_swap(lt_listener *l) {
  /* release (both): on_accept's acquire sees the flag, then the new gen. */
  atomic_store_explicit(&l->swapping, true, memory_order_release);
  drain_backlog(l);
  shutdown(l->fd, SHUT_RD);
  drain_backlog(l); /* what came in between (a shut-down socket answers
                     * EINVAL once its queue is empty) */
  int fd = relisten(l);
  if (fd >= 0) {
    dup3(fd, l->fd, O_CLOEXEC);
    close(fd);
  } else {
    ty__logf(TY_LOG_ERROR, -1, 0,
             "tcp listener: cannot listen again after a stuck worker: %s",
             strerror(-fd));
    pthread_mutex_lock(&l->mu);
    l->err = fd; /* the acceptors hear why */
    wake_all(l);
    pthread_mutex_unlock(&l->mu);
  }
  atomic_fetch_add_explicit(&l->gen, 1, memory_order_release);
  atomic_store_explicit(&l->swapping, false, memory_order_release);
}

static void lst_on_stuck(unsigned worker) {
  pthread_mutex_lock(&g_lst_mu);
  for (lt_listener *l = g_lst; l; l = l->gnext) {
    if (worker >= l->n || lst_closed(l)) continue;
    int fds[64];
    unsigned nfd = 0;
    pthread_mutex_lock(&l->mu);
    for (lt_waiter *w = l->wh, *next; w; w = next) {
      next = w->next;
      if (w->worker == worker) waiter_unlink(l, w); /* its worker frees it */
    }
    for (lt_waiter *w = l->handed, *next; w && nfd < 64; w = next) {
      next = w->hnext;
      if (w->worker != worker) continue;
      handed_unlink(l, w);
      fds[nfd++] = w->fd;
      w->fd = -1;
    }
    pthread_mutex_unlock(&l->mu);
    for (unsigned k = 0; k < nfd; k++) hand(l, fds[k]);
    lt_lslot *s = &l->slots[worker];
    /* relaxed: hints (see slot_arm). */
    if (atomic_load_explicit(&s->used, memory_order_relaxed) &&
        atomic_load_explicit(&s->uring, memory_order_relaxed))
      lst_swap(l);
  }
  pthread_mutex_unlock(&g_lst_mu);
}

/* The `tls` option: a server context, NULL for none; pushes nil, err and
 * sets *failed when the files cannot be loaded. */
static SSL_CTX *listen_tls(lua_State *L, bool *failed) {
  lua_getfield(L, 1, "tls");
  SSL_CTX *ctx = NULL;
  *failed = false;
  if (!lua_isnil(L, -1) && !(lua_isboolean(L, -1) && !lua_toboolean(L, -1))) {
    char err[256];
    ctx = lt_tls_server_opts(L, lua_gettop(L), "tcp.listen", err, sizeof err);
    if (!ctx) {
      lua_pop(L, 1);
      *failed = true;
      lt_push_fail(L, err);
      return NULL;
    }
  }
  lua_pop(L, 1);
  return ctx;
}

/* tycho.tcp.listen{host=, port=, backlog=, tls = {cert=, key=, alpn=}} ->
 * listener | nil, err */
int lt_tcp_listen(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  ty_actor *a = ty_actor_current();
  if (!a || !lt_ctx_get()->rt)
    return luaL_error(L, "tycho.tcp.listen must be called from inside an "
                         "actor (start one with tycho.run)");
  lua_getfield(L, 1, "port");
  if (lua_isnil(L, -1))
    return luaL_error(L, "tycho.tcp.listen: port is required (0 picks a "
                         "free one)");
  lua_pop(L, 1);
  int port = opt_int_field(L, "port", 0, 0, 65535);
  int backlog = opt_int_field(L, "backlog", DEFAULT_BACKLOG, 1, 65535);
  lua_getfield(L, 1, "host");
  const char *host = lua_isnil(L, -1) ? NULL : luaL_checkstring(L, -1);
  struct sockaddr_storage ss;
  socklen_t len;
  if (lt_net_addr(host, port, &ss, &len)) return lt_push_fail(L, "badhost");
  lua_pop(L, 1);
  bool tls_failed;
  SSL_CTX *tls = listen_tls(L, &tls_failed);
  if (tls_failed) return 2;
  int fd = listen_socket(&ss, len, backlog);
  if (fd < 0) {
    SSL_CTX_free(tls);
    return lt_push_fail(L, lt_net_errtok(fd));
  }
  unsigned n = ty_runtime_workers(lt_ctx_get()->rt);
  lt_listener *l = ty__xcalloc(1, sizeof *l + n * sizeof(lt_lslot));
  atomic_init(&l->refs, 2); /* the userdata, the owner */
  atomic_init(&l->closed, false);
  pthread_mutex_init(&l->mu, NULL);
  l->fd = fd;
  l->addr = ss;
  l->tls = tls;
  l->n = n;
  l->backlog = backlog;
  atomic_init(&l->gen, 0);
  atomic_init(&l->swapping, false);
  lt_on_stuck(lst_on_stuck);
  lt_nofile_reserve();
  pthread_mutex_lock(&g_lst_mu);
  l->gnext = g_lst;
  if (g_lst) g_lst->gprev = l;
  g_lst = l;
  pthread_mutex_unlock(&g_lst_mu);
  for (unsigned i = 0; i < n; i++) {
    l->slots[i].l = l;
    l->slots[i].op.cb = on_accept;
    l->slots[i].op.ud = &l->slots[i];
  }
  l->owner = a->user;
  l->res.close = lst_res_close;
  lt_res_add(l->owner, &l->res);
  lt_lst_push(L, l, true);
  return 1;
}

/* TAKE_LATER: only other workers' entries are queued (q_push). */
enum { TAKE_NONE = 0, TAKE_FD, TAKE_CLOSED, TAKE_ERR, TAKE_LATER };

/* Under mu: what an accept on worker `me` gets without waiting (any:
 * whichever worker an entry is meant for). */
static int take_now(lt_listener *l, unsigned me, bool any, int *fd, int *err) {
  if (lst_closed(l)) return TAKE_CLOSED;
  uint64_t now = l->qn ? ty__now_ns() : 0;
  for (unsigned k = 0; k < l->qn; k++) {
    const lt_qent *e = &l->q[(l->qh + k) % l->qcap];
    if (any || e->worker == me || now - e->at >= LT_QUEUE_KEEP_NS) {
      *fd = q_take(l, k);
      return TAKE_FD;
    }
  }
  if (l->err) {
    *err = l->err;
    l->err = 0;
    return TAKE_ERR;
  }
  return l->qn ? TAKE_LATER : TAKE_NONE;
}

/* A connection of the caller for an accepted fd (TLS: its session waits
 * for the client's first bytes; reads and writes wait for the handshake). */
static int push_conn(lua_State *L, lt_listener *l, int fd, ty_actor *a) {
  lt_net_nodelay(fd);
  lt_conn *c = lt_conn_new(fd, a->user);
  if (l->tls && lt_tls_attach_server(c, l->tls)) {
    c->refs++;
    lt_conn_close(c);
    lt_conn_unref(c);
    return lt_push_fail(L, "nomem");
  }
  lt_conn_push(L, c);
  return 1;
}

/* Pushes what take_now found (TAKE_FD: a connection of the caller). */
static int push_take(lua_State *L, lt_listener *l, int r, int fd, int err,
                     ty_actor *a) {
  switch (r) {
  case TAKE_FD: return push_conn(L, l, fd, a);
  case TAKE_CLOSED: return lt_push_fail(L, "closed");
  case TAKE_ERR: return lt_push_fail(L, lt_net_errtok(err));
  default: return lt_push_fail(L, "timeout");
  }
}

/* Removes the nudges that woke this actor (one per hand-over). */
static void drop_nudges(ty_actor *a) {
  ty_msg *prev = NULL, *m = ty_mbox_first(a);
  while (m) {
    ty_msg *next = ty_mbox_next(m);
    if (m->kind == LT_NUDGE) {
      ty_mbox_remove(a, prev, m);
      ty_msg_free(m);
    } else {
      prev = m;
    }
    m = next;
  }
}

/* The deadline of a wait in accept: its own, or the end of a back-off
 * (ltcp_nofile.c) when sooner: the waiter then arms the accept again. */
static uint64_t wait_until(lt_listener *l, uint64_t until) {
  pthread_mutex_lock(&l->mu);
  uint64_t r = lt_nofile_until(l);
  pthread_mutex_unlock(&l->mu);
  return r && r < until ? r : until;
}

static int accept_wake(lua_State *co, ty_actor *a, lt_actor *la,
                       bool timed_out) {
  lt_waiter *w = lt_rare_get(la)->ext_ctx;
  lt_listener *l = w->l;
  int fd = -1, err = 0, r = TAKE_FD;
  /* A timeout may be the short one of l_accept (TAKE_LATER): then the
   * entries meant for others had their time, and any is taken. */
  bool expired = timed_out && ty_runtime_now_ns(lt_ctx_get()->rt) >= w->until;
  drop_nudges(a);
  pthread_mutex_lock(&l->mu);
  handed_unlink(l, w);
  if (w->fd >= 0) fd = w->fd; /* handed over, even if closed since */
  else r = take_now(l, w->worker, timed_out, &fd, &err);
  if ((r == TAKE_NONE || r == TAKE_LATER) && !expired) {
    if (!w->listed) waiter_link(l, w); /* woken for an error someone took */
    pthread_mutex_unlock(&l->mu);
    slot_arm(&l->slots[w->worker]);
    if (timed_out) {
      uint64_t d = wait_until(l, w->until);
      la->deadline_ns = d == UINT64_MAX ? 0 : d;
    }
    return lt_net_rewait(a, la);
  }
  waiter_unlink(l, w);
  pthread_mutex_unlock(&l->mu);
  free(w);
  lt_rare_get(la)->ext_cancel = NULL;
  int n = push_take(co, l, r, fd, err, a);
  lt_lst_unref(l);
  return n;
}

/* The waiting actor dies: a connection already handed to it goes on. */
static void accept_cancel(ty_actor *a, lt_actor *la) {
  (void)a;
  lt_waiter *w = lt_rare_get(la)->ext_ctx;
  lt_listener *l = w->l;
  pthread_mutex_lock(&l->mu);
  waiter_unlink(l, w);
  handed_unlink(l, w);
  int fd = w->fd;
  pthread_mutex_unlock(&l->mu);
  free(w);
  if (fd >= 0) hand(l, fd);
  lt_lst_unref(l);
}

/* listener:accept([timeout]) -> conn | nil, err */
static int l_accept(lua_State *L) {
  lst_ud *u = check_lst_ud(L);
  int64_t tmo = lt_net_timeout(L, 2, -1, "tcp accept");
  ty_actor *a = lt_net_actor(L, "tcp accept");
  lt_listener *l = u->l;
  if (!l) return lt_push_fail(L, "closed");
  unsigned me = ty_worker_id(ty_worker_current());
  int fd = -1, err = 0;
  lt_waiter *w = NULL;
  pthread_mutex_lock(&l->mu);
  /* Virtual time (specs) would hold the short wait below until advanced. */
  bool any = tmo == 0 || ty_runtime_is_virtual(lt_ctx_get()->rt);
  int r = take_now(l, me, any, &fd, &err);
  int64_t wait = tmo;
  if (r == TAKE_LATER && (tmo < 0 || tmo > LT_QUEUE_KEEP_NS))
    wait = LT_QUEUE_KEEP_NS; /* then anything queued is ours */
  uint64_t back = lt_nofile_until(l), now = ty_runtime_now_ns(lt_ctx_get()->rt);
  if (back && (wait < 0 || now + (uint64_t)wait > back)) /* then arm it */
    wait = back > now ? (int64_t)(back - now) : 1;
  if ((r == TAKE_NONE || r == TAKE_LATER) && tmo != 0) {
    w = ty__xcalloc(1, sizeof *w);
    w->fd = -1;
    w->until = tmo < 0 ? UINT64_MAX
                       : ty_runtime_now_ns(lt_ctx_get()->rt) + (uint64_t)tmo;
    w->a = a;
    w->pid = a->pid;
    w->worker = me;
    w->l = l;
    waiter_link(l, w);
  }
  pthread_mutex_unlock(&l->mu);
  /* This worker accepts too from now on (after the take: it arms only
   * while the queue is short). */
  slot_arm(&l->slots[me]);
  if (!w) return push_take(L, l, r, fd, err, a);
  lt_lst_ref(l);
  lt_actor *la = a->user;
  lt_rare_get(la)->ext_cancel = accept_cancel;
  return lt_yield_ext(L, "tcp accept", accept_wake, w, wait);
}

/* listener:close(): the creator's copy closes it for every actor; any
 * other copy only lets go of it. */
static int l_lst_close(lua_State *L) {
  lst_ud *u = check_lst_ud(L);
  lt_listener *l = u->l;
  u->l = NULL;
  if (l) {
    if (u->owner) lst_close(l);
    lt_lst_unref(l);
  }
  lua_pushboolean(L, 1);
  return 1;
}

static int l_lst_getsockname(lua_State *L) {
  lst_ud *u = check_lst_ud(L);
  if (!u->l) return lt_push_fail(L, "closed");
  return lt_net_push_addr(L, &u->l->addr);
}

static int l_lst_gc(lua_State *L) {
  lst_ud *u = lua_touserdata(L, 1);
  if (u->l) lt_lst_unref(u->l); /* the listener lives on while its owner does */
  u->l = NULL;
  return 0;
}

static int l_lst_tostring(lua_State *L) {
  lst_ud *u = lua_touserdata(L, 1);
  if (!u->l) {
    lua_pushliteral(L, "tcp listener (closed)");
    return 1;
  }
  lt_net_push_addr(L, &u->l->addr);
  lua_pushfstring(L, "tcp listener (%s:%d)", lua_tostring(L, -2),
                  (int)lua_tointeger(L, -1));
  return 1;
}

static const luaL_Reg lst_methods[] = {{"accept", l_accept},
                                       {"close", l_lst_close},
                                       {"getsockname", l_lst_getsockname},
                                       {"_shed", lt_lst_l_shed},
                                       {NULL, NULL}};

void lt_lst_metatable(lua_State *L) {
  lt_net_metatable(L, LT_LISTENER_MT, lst_methods, l_lst_gc, l_lst_tostring);
  lua_pop(L, 1);
}
