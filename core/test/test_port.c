/*
 * test_port.c - the port (ty.h): the mesh endpoint of a thread that is not a
 * worker. The test's main thread plays the cluster gateway: C actors on the
 * workers send numbered messages to pids of another node, the "gateway"
 * takes them (checking each sender's order), and hands each back to a local
 * receiver through the port's rings (keeping its own overflow lists when a
 * ring is full, as core/cluster does), which checks the order again. Small
 * rings make both directions fill up; the gateway parks on the port's
 * eventfd, so the park protocol is exercised under TSan too.
 */
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <unistd.h>

#include "sched/ty.h"
#include "test.h"

#define NODE 5
#define PEER 7
#define SENDERS 6

typedef struct pact {
  int role; /* 0 sender, 1 receiver */
  int index;
  long n, next;
} pact;

static _Atomic long g_received, g_errors, g_undeliverable;

static ty_pid remote_pid(unsigned node, uint32_t slot) {
  return ((ty_pid)node << (TY_PID_SLOT_BITS + TY_PID_GEN_BITS)) |
         ((ty_pid)1 << TY_PID_SLOT_BITS) | slot;
}

static int send_step(ty_actor *a, pact *p) {
  (void)a;
  ty_runtime *rt = ty_worker_runtime(ty_worker_current());
  for (int k = 0; k < 64 && p->next < p->n; k++) {
    ty_msg *m = ty_msg_new(sizeof(long));
    memcpy(m->data, &p->next, sizeof(long));
    m->to = remote_pid(PEER, (uint32_t)p->index);
    if (ty_send(rt, m)) {
      ty_msg_free(m);
      atomic_fetch_add(&g_errors, 1);
      return TY_DONE;
    }
    p->next++;
    if (ty_send_blocked(a)) return TY_YIELD; /* resumed when there is room */
  }
  return p->next < p->n ? TY_YIELD : TY_DONE;
}

static int recv_step(ty_actor *a, pact *p) {
  ty_msg *m;
  while ((m = ty_mbox_pop(a))) {
    long v;
    memcpy(&v, m->data, sizeof v);
    if (v != p->next) atomic_fetch_add(&g_errors, 1);
    p->next = v + 1;
    ty_msg_free(m);
    atomic_fetch_add(&g_received, 1);
  }
  if (p->next == p->n) return TY_DONE;
  ty_actor_wait(a, -1, 0);
  return TY_WAIT;
}

static int p_resume(ty_actor *a, void *ud) {
  (void)ud;
  pact *p = a->user;
  return p->role ? recv_step(a, p) : send_step(a, p);
}

static void p_destroy(ty_actor *a, ty_worker *w, void *ud) {
  (void)w;
  (void)ud;
  free(a->user);
}

static void p_undeliverable(ty_msg *m, ty_worker *w, void *ud) {
  (void)m;
  (void)w;
  (void)ud;
  atomic_fetch_add(&g_undeliverable, 1);
}

static const ty_actor_ops p_ops = {.resume = p_resume,
                                   .destroy = p_destroy,
                                   .undeliverable = p_undeliverable};

static ty_pid spawn_p(ty_runtime *rt, int role, int index, long n) {
  pact *p = calloc(1, sizeof *p);
  p->role = role;
  p->index = index;
  p->n = n;
  ty_pid pid = 0;
  if (ty_spawn(rt, p, &pid)) return 0;
  return pid;
}

/* The gateway's side: per-worker overflow lists, in order. */
typedef struct gw {
  ty_runtime *rt;
  ty_msg *head[TY_MAX_WORKERS], *tail[TY_MAX_WORKERS];
} gw;

static void gw_put(gw *g, ty_msg *m) {
  unsigned w = ty_port_route(g->rt, m);
  if (w == TY_PORT_DONE) return;
  if (!g->head[w] && ty_port_push(g->rt, w, m)) return;
  m->node.next = NULL;
  if (g->tail[w]) g->tail[w]->node.next = &m->node;
  else g->head[w] = m;
  g->tail[w] = m;
}

static bool gw_flush(gw *g) {
  bool left = false;
  for (unsigned w = 0; w < ty_runtime_workers(g->rt); w++) {
    while (g->head[w] && ty_port_push(g->rt, w, g->head[w])) {
      g->head[w] = (ty_msg *)g->head[w]->node.next;
      if (!g->head[w]) g->tail[w] = NULL;
    }
    left |= g->head[w] != NULL;
  }
  ty_port_publish(g->rt);
  return left;
}

TEST_IMPL(port_stress) {
  long n = test_scaled(20000, 1000);
  ty_config cfg;
  ty_config_init(&cfg);
  cfg.workers = 3;
  cfg.mesh_ring = 16;
  cfg.node = NODE;
  cfg.port = true;
  ty_runtime *rt;
  CHECK_EQ(ty_runtime_new(&cfg, &p_ops, NULL, &rt), 0);
  ty_runtime_start(rt);
  gw g = {.rt = rt};
  ty_pid recv[SENDERS];
  long expect[SENDERS] = {0};
  for (int i = 0; i < SENDERS; i++) {
    recv[i] = spawn_p(rt, 1, i, n);
    CHECK(recv[i] && ty_pid_node(recv[i]) == NODE);
    CHECK(!ty_pid_remote(rt, recv[i]));
  }
  /* No peer is live yet: a send to it fails at once. */
  CHECK(ty_pid_remote(rt, remote_pid(PEER, 1)));
  CHECK(!ty_pid_alive(rt, remote_pid(PEER, 1)));
  ty_msg *probe = ty_msg_new(0);
  probe->to = remote_pid(PEER, 1);
  CHECK_EQ(ty_send(rt, probe), -ESRCH);
  ty_msg_free(probe);
  ty_node_set_live(rt, PEER, true);
  CHECK(ty_pid_alive(rt, remote_pid(PEER, 1)));
  for (int i = 0; i < SENDERS; i++) CHECK(spawn_p(rt, 0, i, n));

  long taken = 0, total = n * SENDERS;
  uint64_t end = ty__now_ns() + 120 * 1000000000ull;
  ty_msg *batch[64];
  while (atomic_load(&g_received) < total && ty__now_ns() < end) {
    size_t got = 0;
    for (unsigned w = 0; w <= 3 && got < 64; w++) /* the 3 workers, the inbox */
      got += ty_port_take(rt, w, batch + got, 64 - got);
    for (size_t k = 0; k < got; k++) {
      ty_msg *m = batch[k];
      uint32_t slot = (uint32_t)(m->to & (TY_PID_MAX_SLOTS - 1));
      long v;
      memcpy(&v, m->data, sizeof v);
      CHECK(slot < SENDERS && ty_pid_node(m->to) == PEER);
      CHECK(ty_pid_node(m->from) == NODE);
      CHECK_EQ(v, expect[slot]); /* each sender's order */
      expect[slot]++;
      m->to = recv[slot];
      m->from = remote_pid(PEER, slot);
      gw_put(&g, m);
      taken++;
    }
    bool left = gw_flush(&g);
    if (!got && !left) {
      if (ty_port_park(rt)) {
        struct pollfd pfd = {.fd = ty_port_fd(rt), .events = POLLIN};
        poll(&pfd, 1, 5);
      }
      ty_port_unpark(rt);
    }
  }
  CHECK_EQ(taken, total);
  CHECK_EQ(atomic_load(&g_received), total);
  CHECK_EQ(atomic_load(&g_errors), 0);

  /* A message for a pid that ended is reported on some worker. */
  ty_msg *late = ty_msg_new(sizeof(long));
  late->to = recv[0];
  late->from = remote_pid(PEER, 0);
  while (ty_pid_alive(rt, recv[0])) usleep(100);
  gw_put(&g, late);
  while (gw_flush(&g)) usleep(100);
  for (int i = 0; i < 2000 && !atomic_load(&g_undeliverable); i++) usleep(1000);
  CHECK_EQ(atomic_load(&g_undeliverable), 1);
  ty_runtime_stop(rt);
  ty_runtime_free(rt);
  return 0;
}

/* What workers sent to the port and nobody took is freed at stop (ASan
 * checks it), and a runtime without a port refuses pids of other nodes. */
TEST_IMPL(port_leftovers) {
  ty_config cfg;
  ty_config_init(&cfg);
  cfg.workers = 2;
  cfg.node = NODE;
  cfg.port = true;
  ty_runtime *rt;
  CHECK_EQ(ty_runtime_new(&cfg, &p_ops, NULL, &rt), 0);
  ty_runtime_start(rt);
  ty_node_set_live(rt, PEER, true);
  for (int i = 0; i < 4; i++) CHECK(spawn_p(rt, 0, i, 100));
  for (int i = 0; i < 10; i++) { /* and from a thread that is no worker */
    ty_msg *m = ty_msg_new(8);
    m->to = remote_pid(PEER, 1);
    CHECK_EQ(ty_send(rt, m), 0);
  }
  usleep(50000);
  ty_runtime_stop(rt);
  ty_runtime_free(rt);

  ty_config_init(&cfg);
  cfg.workers = 1;
  CHECK_EQ(ty_runtime_new(&cfg, &p_ops, NULL, &rt), 0);
  ty_msg *m = ty_msg_new(0);
  m->to = remote_pid(PEER, 1);
  CHECK_EQ(ty_send(rt, m), -ESRCH);
  CHECK_EQ(ty_port_send(rt, m), -ESRCH);
  ty_msg_free(m);
  ty_runtime_free(rt);
  return 0;
}
