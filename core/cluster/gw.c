/*
 * gw.c - the gateway: one thread per node that is the port of the mesh
 * (ty.h) and owns the data connection to NATS (docs/cluster.md, "The
 * gateway").
 *
 * nats.c runs on our loop through natsOptions_SetEventLoop: the connection's
 * socket sits in the gateway's epoll set with the port's eventfd, and the
 * socket is read and written only here, in ProcessReadEvent and
 * ProcessWriteEvent. Subscriptions are synchronous and drained right after
 * each read (a read parses whole messages onto their lists). nats.c's own
 * threads (its ping timer, its reconnect thread) only call the four adapter
 * functions below, which touch the epoll set under evl_mu; no callback of
 * ours runs anywhere else. With SendAsap a publish appends to nats.c's
 * buffer and arms EPOLLOUT; the loop writes once per turn.
 *
 * A turn: wait (parked, with the port's protocol) -> socket events -> drain
 * the subscriptions into the workers' rings -> take what the workers sent
 * and publish it (while nats.c holds less than OUT_MAX unsent) -> write ->
 * every 25 ms the liveness checks.
 */
#include <errno.h>
#include <sched.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "base/alloc.h"
#include "gw.h"

lc_gw *lc_g;

#define TAG_NATS 1
#define TAG_PORT 2
#define OUT_MAX (1 << 20) /* unsent bytes in nats.c's buffer we allow */
#define TAKE_BATCH 256

/* ---- the event-loop adapter -------------------------------------------- */

static void evl_apply(lc_gw *g) {
  if (g->evl_fd < 0) return;
  struct epoll_event ev = {.events = (g->evl_rd ? EPOLLIN : 0) |
                                     (g->evl_wr ? EPOLLOUT : 0),
                           .data.u32 = TAG_NATS};
  if (epoll_ctl(g->epfd, EPOLL_CTL_MOD, g->evl_fd, &ev) < 0 && errno == ENOENT)
    epoll_ctl(g->epfd, EPOLL_CTL_ADD, g->evl_fd, &ev);
}

/* On our thread inside Connect, or on nats.c's reconnect thread. */
static natsStatus evl_attach(void **ud, void *loop, natsConnection *nc,
                             natsSock sock) {
  (void)nc;
  lc_gw *g = loop;
  pthread_mutex_lock(&g->evl_mu);
  g->evl_fd = sock;
  g->evl_rd = true;
  g->evl_wr = false;
  struct epoll_event ev = {.events = EPOLLIN, .data.u32 = TAG_NATS};
  if (epoll_ctl(g->epfd, EPOLL_CTL_ADD, sock, &ev) < 0 && errno == EEXIST)
    epoll_ctl(g->epfd, EPOLL_CTL_MOD, sock, &ev);
  pthread_mutex_unlock(&g->evl_mu);
  *ud = g;
  return NATS_OK;
}

/* read(false) comes only from a disconnect, before nats.c closes the fd:
 * the one place to take it out of the set. Never delete by a remembered
 * number later, it may be another connection's by then. */
static natsStatus evl_read(void *ud, bool add) {
  lc_gw *g = ud;
  pthread_mutex_lock(&g->evl_mu);
  g->evl_rd = add;
  if (!add && g->evl_fd >= 0) {
    epoll_ctl(g->epfd, EPOLL_CTL_DEL, g->evl_fd, NULL);
    g->evl_fd = -1;
    g->evl_wr = false;
  } else {
    evl_apply(g);
  }
  pthread_mutex_unlock(&g->evl_mu);
  return NATS_OK;
}

static natsStatus evl_write(void *ud, bool add) { /* any thread */
  lc_gw *g = ud;
  pthread_mutex_lock(&g->evl_mu);
  g->evl_wr = add;
  evl_apply(g);
  pthread_mutex_unlock(&g->evl_mu);
  return NATS_OK;
}

static natsStatus evl_detach(void *ud) { /* closed for good */
  lc_gw *g = ud;
  pthread_mutex_lock(&g->evl_mu);
  g->evl_fd = -1;
  g->evl_rd = g->evl_wr = false;
  pthread_mutex_unlock(&g->evl_mu);
  return NATS_OK;
}

/* ---- publishing -------------------------------------------------------- */

bool lc_gw_publish(lc_gw *g, const char *subject, const void *data, int len) {
  natsStatus s = N(natsConnection_Publish)(g->nc, subject, data, len);
  if (s == NATS_OK) return true;
  return false;
}

/* ---- the subscriptions -------------------------------------------------- */

/* Pops exactly what is pending (an empty NextMsg formats an error text);
 * returns how many. */
static int drain(lc_gw *g, natsSubscription *sub, int what, uint64_t svc) {
  int pm = 0, pb = 0;
  if (N(natsSubscription_GetPending)(sub, &pm, &pb) != NATS_OK) return 0;
  for (int i = 0; i < pm; i++) {
    natsMsg *m;
    natsStatus s = N(natsSubscription_NextMsg)(&m, sub, 0);
    if (s == NATS_SLOW_CONSUMER) { /* it dropped some: GetDropped counts */
      lc_count(&lc_sh.slow_consumers, 1);
      continue;
    }
    if (s != NATS_OK) break;
    const char *d = N(natsMsg_GetData)(m);
    size_t n = (size_t)N(natsMsg_GetDataLength)(m);
    if (what == 0) lc_route_in(g, d, n, svc);
    else if (what == 1) lc_peers_on_beat(g, d, n, lc_now_ns());
    else lc_route_in(g, d, n, 0); /* announcements are frames too */
    N(natsMsg_Destroy)(m);
  }
  return pm;
}

static void on_beat(void *g, const char *data, size_t len, uint64_t at) {
  lc_peers_on_beat(g, data, len, at);
}

/* Heartbeats (from their own connection: gw_beat.c), then announcements,
 * then messages, then goodbyes: an announcement goes out before what its
 * node's members send once joined, and a goodbye after everything its node
 * sent; one read may hold them all, and the view must be up to date before
 * an actor acts on a message. */
static bool drain_all(lc_gw *g) {
  g->beats_ns = lc_now_ns();
  lc_beat_take(on_beat, g);
  drain(g, g->ann, 2, 0);
  int got = drain(g, g->data, 0, 0);
  for (size_t i = 0; i < g->nsubs; i++)
    if (g->subs[i].sub) got += drain(g, g->subs[i].sub, 0, g->subs[i].id);
  drain(g, g->byes, 1, 0);
  return got > 0;
}

/* ---- the loop ----------------------------------------------------------- */

/* Sends what a full window kept back from worker w, in order; false while
 * some is still kept (then w's ring is left alone: its senders wait). */
static bool send_held(lc_gw *g, unsigned w) {
  ty_msg *m;
  while ((m = g->held_head[w])) {
    ty_msg *next = (ty_msg *)m->node.next;
    if (!lc_route_out(g, m)) return false;
    g->held_head[w] = next;
    if (!next) g->held_tail[w] = NULL;
  }
  return true;
}

static void hold(lc_gw *g, unsigned w, ty_msg **batch, size_t n) {
  for (size_t i = 0; i < n; i++) {
    batch[i]->node.next = NULL;
    if (g->held_tail[w]) g->held_tail[w]->node.next = &batch[i]->node;
    else g->held_head[w] = batch[i];
    g->held_tail[w] = batch[i];
  }
}

/* Takes what the workers sent (and the threads that are not workers) while
 * nats.c has room for it, each worker's ring in order. */
static bool pump_out(lc_gw *g) {
  ty_msg *batch[TAKE_BATCH];
  unsigned n = ty_runtime_workers(g->rt);
  bool any = false;
  for (unsigned w = 0; w <= n; w++) {
    if (!send_held(g, w)) continue;
    for (int round = 0; round < 16; round++) {
      if (N(natsConnection_Buffered)(g->nc) > OUT_MAX) goto out;
      size_t got = ty_port_take(g->rt, w, batch, TAKE_BATCH), i = 0;
      any |= got > 0;
      while (i < got && lc_route_out(g, batch[i])) i++;
      if (i < got) {
        hold(g, w, batch + i, got - i);
        break;
      }
      if (got < TAKE_BATCH) break;
    }
  }
out:
  lc_route_flush(g);
  return any;
}

/* nats.c takes a write of nothing (send() returning 0) for a closed
 * connection and reconnects: write only when something waits. */
static void write_out(lc_gw *g) {
  if (N(natsConnection_Buffered)(g->nc) > 0)
    N(natsConnection_ProcessWriteEvent)(g->nc);
}

/* After traffic the loop keeps looking for SPIN_NS before it sleeps: an
 * answer that comes back within that time then costs no wake-up (a call's
 * round trip crosses four of them: two gateways, each way). It yields the
 * CPU between looks, so that it does not keep a worker off its core. */
#define SPIN_NS 50000

static void wait_events(lc_gw *g, bool busy, uint64_t now) {
  uint64_t next = g->next_tick;
  int timeout = next > now ? (int)((next - now + 999999) / 1000000) : 0;
  if (busy) {
    timeout = 0;
  } else if (now - g->active_ns < SPIN_NS) {
    timeout = 0;
    sched_yield();
  } else if (g->ov_bytes && timeout > 1) {
    timeout = 1; /* rings may have room */
  }
  if (timeout && !ty_port_park(g->rt)) timeout = 0;
  struct epoll_event ev[16];
  int n = epoll_wait(g->epfd, ev, 16, timeout);
  if (timeout) ty_port_unpark(g->rt);
  for (int i = 0; i < n; i++) {
    if (ev[i].data.u32 != TAG_NATS) continue; /* the port's eventfd */
    if (ev[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP))
      N(natsConnection_ProcessReadEvent)(g->nc);
    if (ev[i].events & EPOLLOUT) write_out(g);
  }
}

static void turn(lc_gw *g, bool *busy) {
  uint64_t now = lc_now_ns();
  wait_events(g, *busy, now);
  bool in = drain_all(g);
  bool out = pump_out(g);
  bool left = lc_deliver_flush(g);
  if (g->nacks) lc_route_acks(g, lc_now_ns());
  /* Write now rather than after another epoll round: the socket is
   * non-blocking and nats.c keeps what does not fit. */
  if (out) write_out(g);
  *busy = out && !left;
  now = lc_now_ns();
  if (in || out) g->active_ns = now;
  lc_peers_beat(g, false); /* what the heartbeat thread says next */
  if (now >= g->next_tick) {
    lc_peers_tick(g, now);
    lc_calls_tick(g, now);
    lc_svc_tick(g);
    g->next_tick = now + LC_TICK_NS;
  }
  if (now >= g->next_sweep) {
    lc_watch_sweep(g);
    g->next_sweep = now + 1000 * 1000000ull;
  }
}

static void *gw_main(void *arg) {
  lc_gw *g = arg;
  ty__alloc_thread_init();
  bool busy = false;
  /* seq_cst: pairs with the store in lc_gw_stop (a plain flag would do; the
   * loop wakes on the port's eventfd, which stop writes after it). */
  while (!atomic_load(&g->stop)) turn(g, &busy);
  ty__alloc_thread_exit();
  return NULL;
}

/* ---- start and stop ---------------------------------------------------- */

static int fail(char *err, size_t errlen, const char *what, natsStatus s) {
  snprintf(err, errlen, "%s: %s", what, N(natsStatus_GetText)(s));
  return -1;
}

static natsStatus connect_nats(lc_gw *g, const char *url) {
  natsOptions *o;
  natsStatus s = N(natsOptions_Create)(&o);
  if (s != NATS_OK) return s;
  char name[160];
  snprintf(name, sizeof name, "%s.%s", lc_sh.cluster, lc_sh.name);
  if ((s = lc_nats_set_urls(o, url)) == NATS_OK &&
      (s = N(natsOptions_SetName)(o, name)) == NATS_OK &&
      (s = N(natsOptions_SetTimeout)(o, 2000)) == NATS_OK &&
      (s = N(natsOptions_SetEventLoop)(o, g, evl_attach, evl_read, evl_write,
                                       evl_detach)) == NATS_OK &&
      /* Without it the loop waits for nats.c's flusher: 1 ms per hop. */
      (s = N(natsOptions_SetSendAsap)(o, true)) == NATS_OK &&
      (s = N(natsOptions_SetIOBufSize)(o, 256 * 1024)) == NATS_OK &&
      (s = N(natsOptions_SetMaxReconnect)(o, -1)) == NATS_OK &&
      (s = N(natsOptions_SetReconnectWait)(o, 50)) == NATS_OK &&
      /* Servers in the order given: the first is this node's own. */
      (s = N(natsOptions_SetNoRandomize)(o, true)) == NATS_OK &&
      (s = N(natsOptions_SetReconnectJitter)(o, 0, 0)) == NATS_OK &&
      /* Publishing while cut off fails at once (a drop we count, a call we
       * answer) instead of going out late after the reconnect. */
      (s = N(natsOptions_SetReconnectBufSize)(o, 64)) == NATS_OK &&
      (s = N(natsOptions_SetPingInterval)(o, 2000)) == NATS_OK &&
      (s = N(natsOptions_SetMaxPingsOut)(o, 3)) == NATS_OK)
    s = N(natsConnection_Connect)(&g->nc, o);
  N(natsOptions_Destroy)(o);
  return s;
}

static natsStatus subscribe(lc_gw *g, natsSubscription **sub,
                            const char *subject) {
  natsStatus s = N(natsConnection_SubscribeSync)(sub, g->nc, subject);
  /* We drain after every read: nats.c's own limits would only drop. */
  if (s == NATS_OK) s = N(natsSubscription_SetPendingLimits)(*sub, -1, -1);
  return s;
}

int lc_gw_connect(const char *url, char *err, size_t errlen) {
  lc_gw *g = ty__xcalloc(1, sizeof *g);
  pthread_mutex_init(&g->evl_mu, NULL);
  g->evl_fd = -1;
  g->epfd = epoll_create1(EPOLL_CLOEXEC);
  g->backlog = lc_set.backlog ? lc_set.backlog : 64u << 20;
  ty__buf_init(&g->scratch);
  snprintf(g->prefix, sizeof g->prefix, "tycho.%s.", lc_sh.cluster);
  snprintf(g->self_subj, sizeof g->self_subj, "%sn.%s", g->prefix, lc_sh.name);
  lc_g = g;
  natsStatus s = g->epfd < 0 ? NATS_SYS_ERROR : connect_nats(g, url);
  if (s != NATS_OK) {
    fail(err, errlen, "cannot connect the gateway to NATS", s);
    lc_gw_stop();
    return -1;
  }
  char subj[200];
  snprintf(subj, sizeof subj, "%sbye.*", g->prefix);
  if ((s = subscribe(g, &g->data, g->self_subj)) != NATS_OK ||
      (s = subscribe(g, &g->byes, subj)) != NATS_OK ||
      (snprintf(subj, sizeof subj, "%sann", g->prefix),
       s = subscribe(g, &g->ann, subj)) != NATS_OK ||
      (s = N(natsStatistics_Create)(&g->stats)) != NATS_OK) {
    fail(err, errlen, "cannot subscribe", s);
    lc_gw_stop();
    return -1;
  }
  g->max_payload = (int)N(natsConnection_GetMaxPayload)(g->nc);
  if (lc_beat_connect(url, g->prefix, err, errlen)) {
    lc_gw_stop();
    return -1;
  }
  return 0;
}

void lc_gw_start(ty_runtime *rt) {
  lc_gw *g = lc_g;
  g->rt = rt;
  struct epoll_event ev = {.events = EPOLLIN, .data.u32 = TAG_PORT};
  epoll_ctl(g->epfd, EPOLL_CTL_ADD, ty_port_fd(rt), &ev);
  uint64_t now = lc_now_ns();
  g->next_tick = now + LC_TICK_NS;
  g->next_sweep = now + 1000 * 1000000ull;
  lc_nodes_publish(g);
  /* Our service list (none yet) before our first beat: the nodes that hear
   * that beat then count us up without asking for it (gw_peers.c). */
  lc_announce(g);
  lc_peers_beat(g, false);
  lc_beat_start(); /* its first beat at once: others may wait for us */
  if (pthread_create(&g->thread, NULL, gw_main, g))
    ty__die("cannot create the cluster gateway thread");
}

/* After the thread stopped, on the caller's: what is still queued leaves,
 * the others hear a goodbye, and a marker sent to ourselves comes back
 * (everything before it reached the server) or 1 s passes. */
static void finish(lc_gw *g) {
  pump_out(g);
  lc_peers_beat(g, true);
  uint64_t mark = ++g->marks;
  lc_send_ctl(g, NULL, LC_W_BARRIER, lc_node_pid(lc_sh.id), 0, mark, NULL, 0);
  lc_route_flush(g);
  uint64_t end = lc_now_ns() + 1000 * 1000000ull;
  bool busy = true;
  while (g->mark_seen < mark && lc_now_ns() < end &&
         N(natsConnection_Status)(g->nc) == NATS_CONN_STATUS_CONNECTED) {
    turn(g, &busy);
    busy = false;
  }
}

void lc_gw_stop(void) {
  lc_gw *g = lc_g;
  if (!g) return;
  if (g->rt && g->thread) {
    /* seq_cst: see gw_main. The eventfd write wakes a parked loop. */
    atomic_store(&g->stop, true);
    uint64_t one = 1;
    ssize_t r = write(ty_port_fd(g->rt), &one, sizeof one);
    (void)r;
    pthread_join(g->thread, NULL);
    lc_beat_stop(); /* no beat after the goodbye */
    if (g->nc) finish(g);
  }
  lc_beat_stop();
  if (g->nc) {
    N(natsConnection_Close)(g->nc);
    N(natsConnection_Destroy)(g->nc);
  }
  /* Subscriptions are freed after their connection: nats.c would write an
   * UNSUB into a connection that is gone otherwise. */
  natsSubscription *subs[3] = {g->data, g->byes, g->ann};
  for (int i = 0; i < 3; i++)
    if (subs[i]) N(natsSubscription_Destroy)(subs[i]);
  lc_subs_free(g);
  if (g->stats) N(natsStatistics_Destroy)(g->stats);
  for (unsigned w = 0; w <= TY_MAX_WORKERS; w++) {
    ty_msg **lists[2] = {w < TY_MAX_WORKERS ? &g->ov_head[w] : NULL,
                         &g->held_head[w]};
    for (int k = 0; k < 2; k++) {
      while (lists[k] && *lists[k]) {
        ty_msg *m = *lists[k];
        *lists[k] = (ty_msg *)m->node.next;
        ty_msg_free(m);
      }
    }
  }
  for (unsigned w = 0; w < TY_MAX_WORKERS; w++) free(g->inring[w].sz);
  lc_peers_free(g);
  lc_map_free(&g->calls);
  free(g->nodewatch);
  free(g->waiters);
  ty__buf_free(&g->scratch);
  if (g->epfd >= 0) close(g->epfd);
  pthread_mutex_destroy(&g->evl_mu);
  free(g);
  lc_g = NULL;
}
