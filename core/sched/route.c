/*
 * route.c - where spawns and messages go: a new actor's pid and its placement
 * (P2C), and a message's way to its receiver's worker (its own worker, a mesh
 * ring, or the inbox of a worker when sent from outside the runtime).
 * docs/architecture.md, "The life of a message".
 */
#include <errno.h>
#include <string.h>

#include "worker.h"

/* ---- spawn ------------------------------------------------------------- */

/* From a thread outside the runtime: through the home worker's inbox. */
static void send_node_from_thread(ty_runtime *rt, unsigned home, ty__node *n) {
  ty_worker *to = &rt->workers[home];
  ty__inject_push(&to->inbox, n);
  TY_CHAOS();
  /* seq_cst fence: push (store) then read the park state (load). */
  atomic_thread_fence(memory_order_seq_cst);
  ty__worker_unpark(to);
}

#define SLOT_BATCH 256

static ty__pident *take_slot(ty_runtime *rt, ty_worker *w, uint32_t *slot) {
  if (w && !w->nfree && w->capfree >= SLOT_BATCH)
    w->nfree = ty__pidtab_take(&rt->pids, w->free_slots, SLOT_BATCH);
  if (w && w->nfree) {
    *slot = w->free_slots[--w->nfree];
    return ty__pidtab_get(&rt->pids, *slot);
  }
  if (!w && ty__pidtab_take(&rt->pids, slot, 1))
    return ty__pidtab_get(&rt->pids, *slot);
  return ty__pidtab_bump(&rt->pids, slot);
}

/* The calling thread's worker in rt, or NULL. */
static ty_worker *worker_of(ty_runtime *rt) {
  ty_worker *w = ty_worker_current();
  return w && w->rt == rt ? w : NULL;
}

/* A new spawn request with a fresh pid, not placed yet; NULL with *err
 * -ENOMEM (out of memory) or -EAGAIN (the pid table is full). */
static ty_actor *new_request(ty_runtime *rt, ty_worker *w, void *user,
                             ty_pid *out, int *err) {
  ty_actor *a = ty__actor_alloc();
  if (!a) {
    *err = -ENOMEM;
    return NULL;
  }
  uint32_t slot;
  ty__pident *e = take_slot(rt, w, &slot);
  if (!e) {
    ty__actor_free(a);
    *err = -EAGAIN;
    return NULL;
  }
  a->type = TY__T_ACTOR;
  a->user = user;
  a->pid = ty__pidtab_claim(&rt->pids, e, slot);
  if (out) *out = a->pid;
  return a;
}

/* Free pid slots a worker keeps before it shares them (see pidtab.h). */
#define LOCAL_FREE_MAX 4096

void ty__free_pid(ty_runtime *rt, ty_worker *w, ty_pid pid) {
  uint32_t slot = ty__pid_slot(pid);
  ty__pident *e = ty__pidtab_get(&rt->pids, slot);
  uint32_t gen = (ty__pid_gen(pid) + 1) & ((1u << TY_PID_GEN_BITS) - 1);
  /* relaxed: only the home worker reads `actor`, and it is us (or nobody:
   * a request abandoned before its placement). */
  atomic_store_explicit(&e->actor, NULL, memory_order_relaxed);
  TY_CHAOS();
  /* release: a sender that sees the new generation sees nothing stale. */
  atomic_store_explicit(&e->word, ty__w_make(gen ? gen : 1, TY__S_FREE, 0),
                        memory_order_release);
  if (!w) {
    ty__pidtab_give(&rt->pids, &slot, 1);
    return;
  }
  if (w->nfree == LOCAL_FREE_MAX) { /* share the older half */
    ty__pidtab_give(&rt->pids, w->free_slots, LOCAL_FREE_MAX / 2);
    memmove(w->free_slots, w->free_slots + LOCAL_FREE_MAX / 2,
            LOCAL_FREE_MAX / 2 * sizeof(uint32_t));
    w->nfree = LOCAL_FREE_MAX / 2;
  }
  w->free_slots[w->nfree++] = slot;
}

void ty__free_slot(ty_worker *w, ty_actor *a) {
  ty__free_pid(w->rt, w, a->pid);
}

/* ---- placement (P2C) --------------------------------------------------- */

static uint64_t peer_load(ty_worker *w, unsigned i) {
  if (i == w->id) {
    return w->ready_len + ty__spawnq_len(&w->spawnq) + (w->lifo ? 1 : 0);
  }
  /* relaxed: a hint written by its owner; staleness only costs balance.
   * What we sent it and it has not taken yet counts too. */
  return atomic_load_explicit(&w->rt->workers[i].load, memory_order_relaxed) +
         ty__mesh_staged(&w->rt->mesh, w->id, i) +
         ty__mesh_backlog(&w->rt->mesh, w->id, i);
}

/*
 * Two random choices, with a bias toward home: an actor is pinned where it
 * starts, and a child talks to its parent more often than not, so a remote
 * worker wins only when it is lighter by more than PLACE_BIAS. Messages
 * between workers cost a cache-line transfer at best and a sleep/wake at
 * worst (and a whole time slice when the machine is oversubscribed), which a
 * balanced but scattered placement pays on every message; a biased one pays
 * only for the imbalance that stealing cannot fix.
 */
#define PLACE_BIAS 32

/* A worker declared stuck takes no new actors (watchdog.c). */
static bool skip(ty_worker *w, unsigned i) {
  return i != w->id && ty_worker_is_stuck(w->rt, i);
}

static unsigned p2c_choose(ty_worker *w) {
  unsigned n = w->rt->n;
  uint64_t r = ty__rand_next(&w->rng);
  unsigned i = (unsigned)(r % n), j = (unsigned)((r >> 32) % n);
  if (skip(w, i)) i = w->id;
  if (skip(w, j)) j = w->id;
  uint64_t li = peer_load(w, i), lj = peer_load(w, j);
  unsigned best = li <= lj ? i : j;
  uint64_t lbest = li <= lj ? li : lj;
  if (best == w->id) return best;
  return peer_load(w, w->id) <= lbest + PLACE_BIAS ? w->id : best;
}

/*
 * P2C in blocks: one choice serves the next PLACE_BLOCK spawns of the same
 * actor run. Actors spawned together usually talk together (a ring, a pool
 * and its clients); placing each on its own coin flip scatters them so that
 * every other message crosses cores, while blocks keep neighbours together
 * and still spread a burst evenly. Stealing (which takes contiguous halves)
 * evens out what is left.
 */
#define PLACE_BLOCK 32

static void place(ty_worker *w, ty_actor *a) {
  if (w->place_left == 0) {
    w->place_to = w->rt->n > 1 ? p2c_choose(w) : w->id;
    w->place_left = PLACE_BLOCK;
  }
  w->place_left--;
  unsigned to = skip(w, w->place_to) ? w->id : w->place_to;
  TY__STAT_ADD(w, spawns_placed, 1);
  /* A spawn request has no order to keep: if its ring is full it stays. */
  if (to != w->id && !w->peers[to].overflow.head &&
      ty__mesh_push(&w->rt->mesh, w->id, to, &a->node)) {
    TY__STAT_ADD(w, spawns_remote, 1);
    TY__STAT_ADD(w, mesh_sent, 1);
    /* Publish now: the spawner's run may be long, and the target idle. */
    ty__mesh_publish(&w->rt->mesh, w->id, to);
    /* seq_cst fence: publish (store) before reading its park state. */
    atomic_thread_fence(memory_order_seq_cst);
    ty__worker_unpark(&w->rt->workers[to]);
    return;
  }
  ty__spawnq_push(&w->spawnq, &a->node, &w->rt->inject);
  ty__notify_parked(w->rt);
}

int ty_spawn(ty_runtime *rt, void *user, ty_pid *out) {
  return ty_spawn_hook(rt, user, out, NULL, NULL);
}

int ty_spawn_hook(ty_runtime *rt, void *user, ty_pid *out,
                  int (*before)(ty_pid pid, void *ctx), void *ctx) {
  ty_worker *w = worker_of(rt);
  ty_pid pid;
  int err;
  ty_actor *a = new_request(rt, w, user, &pid, &err);
  if (!a) return err;
  int r = before ? before(pid, ctx) : 0;
  if (r) {
    /* Nobody knows the pid (before did not publish it): no sender can hold
     * its entry's lock or have queued on it, so it is freed at once. */
    ty__assert(!atomic_load_explicit(
        &ty__pidtab_get(&rt->pids, ty__pid_slot(pid))->pending,
        memory_order_relaxed));
    ty__free_pid(rt, w, pid);
    ty__actor_free(a);
    return r;
  }
  if (out) *out = pid;
  if (w) {
    place(w, a);
  } else {
    ty__inject_push(&rt->inject, &a->node);
    ty__notify_parked(rt);
  }
  return 0;
}

int ty_spawn_at(ty_runtime *rt, unsigned worker, void *user, ty_pid *out) {
  if (worker >= rt->n) return -EINVAL;
  if (ty_worker_is_stuck(rt, worker)) return -EHOSTDOWN;
  ty_worker *w = worker_of(rt);
  int err;
  ty_actor *a = new_request(rt, w, user, out, &err);
  if (!a) return err;
  a->pinned = true;
  if (w && w->id == worker) {
    ty__ready_push(w, a);
  } else if (w) {
    ty__worker_mesh_push(w, worker, &a->node);
  } else {
    send_node_from_thread(rt, worker, &a->node);
  }
  return 0;
}

/* ---- messages ---------------------------------------------------------- */

/* The receiver has not started: queue on its entry under the lock bit.
 * Returns 1 when queued, 0 to try again (*word reloaded), -ENOBUFS when a
 * limited send finds `limit` messages or `kbytes` KiB waiting already (the
 * mailbox's limits: a sender that runs before its receiver starts must not
 * queue more than the started mailbox would take). */
static int send_pending(ty__pident *e, ty_msg *m, uint64_t *word,
                        uint32_t limit, uint64_t kbytes) {
  uint64_t w = *word;
  if (ty__w_locked(w)) {
    ty__cpu_relax();
    *word = atomic_load_explicit(&e->word, memory_order_acquire);
    return 0;
  }
  /* acquire: see the list as the previous lock holder left it. */
  if (!atomic_compare_exchange_weak_explicit(&e->word, word, w | 1,
                                             memory_order_acquire,
                                             memory_order_acquire))
    return 0;
  TY_CHAOS(); /* the starter spins on the lock bit meanwhile */
  /* relaxed: guarded by the lock bit. */
  uint32_t n = atomic_load_explicit(&e->npending, memory_order_relaxed);
  uint32_t k = atomic_load_explicit(&e->kpending, memory_order_relaxed);
  bool room = n < limit && k < kbytes;
  if (room) {
    uint64_t kb = (sizeof *m + m->cap + m->held + 1023) / 1024;
    m->node.next =
        (ty__node *)atomic_load_explicit(&e->pending, memory_order_relaxed);
    atomic_store_explicit(&e->pending, m, memory_order_relaxed);
    atomic_store_explicit(&e->npending, n + 1, memory_order_relaxed);
    atomic_store_explicit(&e->kpending,
                          k + kb > UINT32_MAX ? UINT32_MAX : (uint32_t)(k + kb),
                          memory_order_relaxed);
  }
  /* release: the starter's acquire CAS sees the list. */
  atomic_store_explicit(&e->word, w, memory_order_release);
  return room ? 1 : -ENOBUFS;
}

/* To the port: a worker stages m in its ring to the port (a full ring keeps
 * it on the overflow list and makes the sender wait, as between workers);
 * any other thread goes through the port's inbox. */
static void send_to_port(ty_runtime *rt, ty_worker *w, ty_msg *m) {
  if (!w) {
    ty__inject_push(&rt->port->inbox, &m->node);
    /* seq_cst fence: push (store) then read the port's park state (load). */
    atomic_thread_fence(memory_order_seq_cst);
    ty__port_wake(rt);
  } else if (!ty__worker_mesh_push(w, rt->n, &m->node)) {
    ty__worker_note_blocked(w, rt->n);
  }
}

int ty_port_send(ty_runtime *rt, ty_msg *m) {
  if (!rt->port) return -ESRCH;
  ty_worker *w = worker_of(rt);
  if (w && w->current) m->from = m->from ? m->from : w->current->pid;
  send_to_port(rt, w, m);
  return 0;
}

static int refused(ty_worker *w) {
  if (w) TY__STAT_ADD(w, sends_full, 1);
  return -ENOBUFS;
}

static int send_msg(ty_runtime *rt, ty_msg *m, bool limited) {
  ty_worker *w = worker_of(rt);
  if (ty_pid_node(m->to) != rt->cfg.node) { /* another node's actor */
    if (!ty_node_live(rt, ty_pid_node(m->to))) return -ESRCH;
    return ty_port_send(rt, m);
  }
  ty__pident *e;
  uint64_t word = ty__pidtab_lookup(&rt->pids, m->to, &e);
  if (!word) return -ESRCH;
  if (w && w->current) m->from = m->from ? m->from : w->current->pid;
  for (;;) {
    if (ty__w_gen(word) != ty__pid_gen(m->to) ||
        ty__w_state(word) == TY__S_FREE)
      return -ESRCH;
    if (ty__w_state(word) == TY__S_PENDING) {
      int r = limited ? send_pending(e, m, &word, rt->cfg.mbox_max,
                                     rt->cfg.mbox_max_bytes / 1024)
                      : send_pending(e, m, &word, UINT32_MAX, UINT64_MAX);
      if (r == 0) continue;
      return r > 0 ? 0 : refused(w);
    }
    if (limited && ty__w_full(word)) return refused(w);
    unsigned home = ty__w_home(word);
    if (!w) {
      send_node_from_thread(rt, home, &m->node);
    } else if (home == w->id) {
      /* LIVE with home w (we are w): the actor pointer is ours, stored
       * before the acquire-loaded word said LIVE (start_actor); relaxed. */
      ty__deliver_to(w, atomic_load_explicit(&e->actor, memory_order_relaxed),
                     m, w->current != NULL);
    } else if (!ty__worker_mesh_push(w, home, &m->node)) {
      ty__worker_note_blocked(w, home);
    }
    return 0;
  }
}

int ty_send(ty_runtime *rt, ty_msg *m) { return send_msg(rt, m, false); }

int ty_send_limited(ty_runtime *rt, ty_msg *m) { return send_msg(rt, m, true); }

bool ty_pid_alive(ty_runtime *rt, ty_pid pid) {
  if (pid && ty_pid_node(pid) != rt->cfg.node)
    return ty_node_live(rt, ty_pid_node(pid));
  ty__pident *e;
  return ty__pidtab_lookup(&rt->pids, pid, &e) != 0;
}

ty_actor *ty_actor_local(ty_pid pid) {
  ty_worker *w = ty_worker_current();
  ty__pident *e;
  if (!w) return NULL;
  uint64_t word = ty__pidtab_lookup(&w->rt->pids, pid, &e);
  if (!word || ty__w_state(word) != TY__S_LIVE || ty__w_home(word) != w->id)
    return NULL;
  /* relaxed: we are its home worker, which stored the pointer. */
  return atomic_load_explicit(&e->actor, memory_order_relaxed);
}
