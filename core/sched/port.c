/*
 * port.c - the port (ty.h): the mesh endpoint of a thread that is not a
 * worker, the cluster gateway. Its rings are the mesh's last row and column
 * (index rt->n); the workers' side of them is the ordinary mesh code
 * (deliver.c, route.c), this file is the port's side: taking what workers
 * sent, handing messages to home workers, its park protocol, and the table
 * of live nodes that senders consult.
 */
#include <errno.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "worker.h"

int ty__port_new(ty_runtime *rt) {
  ty__port *p =
      aligned_alloc(TY_PAD, (sizeof *p + TY_PAD - 1) / TY_PAD * TY_PAD);
  if (!p) return -ENOMEM;
  memset(p, 0, sizeof *p);
  p->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (p->wake_fd < 0) {
    int err = -errno;
    free(p);
    return err;
  }
  atomic_init(&p->park, TY__RUNNING);
  ty__inject_init(&p->inbox);
  rt->port = p;
  return 0;
}

void ty__port_free(ty_runtime *rt) {
  ty__port *p = rt->port;
  if (!p) return;
  close(p->wake_fd);
  ty__inject_destroy(&p->inbox);
  free(p);
  rt->port = NULL;
}

int ty_port_fd(ty_runtime *rt) { return rt->port->wake_fd; }

/* ---- waking and parking (the protocol of park.c, for the port) --------- */

void ty__port_wake(ty_runtime *rt) {
  /* the port parks as a worker does: one waker pays for the eventfd write */
  ty__park_notify(&rt->port->park, rt->port->wake_fd);
}

bool ty_port_park(ty_runtime *rt) {
  ty__port *p = rt->port;
  /* seq_cst store, then a full fence before re-reading the rings: pairs with
   * the publisher's fence between its tail store and its park-state load
   * (docs/architecture.md, "Parking"). */
  atomic_store(&p->park, TY__PARKED);
  atomic_thread_fence(memory_order_seq_cst);
  return !ty__mesh_has_incoming(&rt->mesh, rt->n) && !ty__inject_len(&p->inbox);
}

void ty_port_unpark(ty_runtime *rt) {
  ty__port *p = rt->port;
  /* seq_cst: pairs with the wakers' CAS; NOTIFIED means the eventfd was (or
   * is about to be) written: eat it so the next sleep is not cut short. */
  if (atomic_exchange(&p->park, TY__RUNNING) == TY__NOTIFIED) {
    uint64_t v;
    ssize_t r = read(p->wake_fd, &v, sizeof v);
    (void)r; /* EAGAIN: the write is still coming; a later wait eats it */
  }
}

/* ---- from the workers -------------------------------------------------- */

size_t ty_port_take(ty_runtime *rt, unsigned from, ty_msg **out, size_t max) {
  if (from < rt->n)
    return ty__mesh_drain(&rt->mesh, rt->n, from, (ty__node **)out, max);
  ty__node *n;
  size_t k = ty__inject_pop_n(&rt->port->inbox, max, &n), got = 0;
  for (; got < k && n; n = n->next) out[got++] = (ty_msg *)n;
  return got;
}

/* ---- to the workers ---------------------------------------------------- */

/* Queues m on a spawn request that has not started, under its lock bit (as
 * route.c does for a sender); false when the entry changed meanwhile. */
static bool put_pending(ty__pident *e, ty_msg *m, uint64_t *word) {
  uint64_t w = *word;
  if (ty__w_locked(w)) {
    ty__cpu_relax();
    *word = atomic_load_explicit(&e->word, memory_order_acquire);
    return false;
  }
  /* acquire: see the list as the previous lock holder left it. */
  if (!atomic_compare_exchange_weak_explicit(&e->word, word, w | 1,
                                             memory_order_acquire,
                                             memory_order_acquire))
    return false;
  /* relaxed: guarded by the lock bit. */
  m->node.next =
      (ty__node *)atomic_load_explicit(&e->pending, memory_order_relaxed);
  atomic_store_explicit(&e->pending, m, memory_order_relaxed);
  /* release: the starter's acquire CAS sees the list. */
  atomic_store_explicit(&e->word, w, memory_order_release);
  return true;
}

unsigned ty_port_route(ty_runtime *rt, ty_msg *m) {
  ty__pident *e;
  uint64_t word = ty__pidtab_lookup(&rt->pids, m->to, &e);
  for (;;) {
    if (!word || ty__w_gen(word) != ty__pid_gen(m->to) ||
        ty__w_state(word) == TY__S_FREE)
      /* Dead: some worker reports it (its undeliverable op answers a call
       * with "dead", a monitor with DOWN). */
      return ty__pid_slot(m->to) % rt->n;
    if (ty__w_state(word) == TY__S_LIVE) return ty__w_home(word);
    if (put_pending(e, m, &word)) return TY_PORT_DONE;
  }
}

bool ty_port_full(ty_runtime *rt, ty_pid pid) {
  ty__pident *e;
  uint64_t word = ty__pidtab_lookup(&rt->pids, pid, &e);
  return word && ty__w_full(word); /* the lookup checked the generation */
}

bool ty_port_push(ty_runtime *rt, unsigned worker, ty_msg *m) {
  if (!ty__mesh_push(&rt->mesh, rt->n, worker, &m->node)) return false;
  rt->port->dirty_mask |= 1ull << worker;
  return true;
}

uint32_t ty_port_taken(ty_runtime *rt, unsigned worker) {
  ty__ring *r = ty__mesh_ring(&rt->mesh, rt->n, worker);
  /* relaxed: only a count; the port reads no slot by it (a stale value
   * makes it think more is in the ring, which only holds it back). */
  return atomic_load_explicit(&r->head, memory_order_relaxed);
}

uint32_t ty_port_ring_cap(const ty_runtime *rt) { return rt->cfg.mesh_ring; }

void ty_port_publish(ty_runtime *rt) {
  ty__port *p = rt->port;
  uint64_t mask = p->dirty_mask, woke = 0;
  p->dirty_mask = 0;
  for (uint64_t b = mask; b; b &= b - 1) {
    unsigned to = (unsigned)__builtin_ctzll(b);
    if (ty__mesh_publish(&rt->mesh, rt->n, to)) woke |= 1ull << to;
  }
  if (!woke) return;
  /* seq_cst fence: the tail stores above before the park-state loads
   * (the protocol of ty__publish_all). */
  atomic_thread_fence(memory_order_seq_cst);
  for (uint64_t b = woke; b; b &= b - 1)
    ty__worker_unpark(&rt->workers[__builtin_ctzll(b)]);
}

/* ---- nodes ------------------------------------------------------------- */

void ty_node_set_live(ty_runtime *rt, unsigned node, bool live) {
  if (!rt->port || node >= TY_MAX_NODES) return;
  /* relaxed: senders read it as a hint; the port itself answers for what
   * was sent to a node that went away (see the struct's comment). */
  atomic_store_explicit(&rt->port->live[node], live, memory_order_relaxed);
}

bool ty_node_live(const ty_runtime *rt, unsigned node) {
  if (!rt->port || node >= TY_MAX_NODES) return false;
  /* relaxed: a hint (see ty_node_set_live). */
  return atomic_load_explicit(&rt->port->live[node], memory_order_relaxed);
}

bool ty_pid_remote(const ty_runtime *rt, ty_pid pid) {
  return ty_pid_node(pid) != rt->cfg.node;
}
