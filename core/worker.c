/*
 * worker.c - the worker loop.
 *
 * Each turn: drain the incoming mesh rings, then take the next actor from the
 * LIFO slot (at most max_lifo_polls in a row), the ready queue, the spawn
 * queue, the inject queue (first, every gq_interval ticks), or steal; with
 * nothing to do, park. Every `budget` polls the worker also fires its timers,
 * drains its inbox and polls I/O even when work remains.
 *
 * Everything here runs on the worker's own thread except ty__worker_unpark.
 */
#include <errno.h>
#include <sched.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "alloc.h"
#include "io.h"
#include "runtime.h"

#define MESH_BATCH 64    /* entries taken from one ring per turn */
#define PUBLISH_BATCH 16 /* staged entries that force a publish */
#define INJECT_BATCH 128
#define OVERFLOW_PARK_NS 100000 /* re-try a full ring this often when idle */
#define GQ_TARGET_NS 200000.0   /* Tokio: aim to check inject every 200 us */

static _Thread_local ty_worker *tls_worker;

ty_worker *ty_worker_current(void) { return tls_worker; }
ty_actor *ty_actor_current(void) {
  return tls_worker ? tls_worker->current : NULL;
}
unsigned ty_worker_id(const ty_worker *w) { return w->id; }
ty_runtime *ty_worker_runtime(const ty_worker *w) { return w->rt; }
void ty_worker_set_data(ty_worker *w, void *data) { w->data = data; }
struct ty__io *ty_worker_io(const ty_worker *w) { return w->io; }
void *ty_worker_data(const ty_worker *w) { return w->data; }

static ty_actor *actor_of_timer(ty__timer *t) {
  return (ty_actor *)((char *)t - offsetof(ty_actor, timer));
}

/* ---- queues ------------------------------------------------------------ */

static void ready_push(ty_worker *w, ty_actor *a) {
  a->state = TY__A_QUEUED;
  ty__list_push(&w->ready, &a->node);
  w->ready_len++;
}

static ty_actor *ready_pop(ty_worker *w) {
  ty__node *n = ty__list_pop(&w->ready);
  if (n) w->ready_len--;
  return (ty_actor *)n;
}

/* A local send from the running actor puts the receiver in the LIFO slot, so
 * that it runs next while its message is hot in cache. Pushing there wakes
 * nobody: this worker is awake and will run it. */
static void make_ready(ty_worker *w, ty_actor *a, bool lifo) {
  if (a->timer.armed) ty__wheel_cancel(&w->wheel, &a->timer);
  if (!lifo) {
    ready_push(w, a);
    return;
  }
  if (w->lifo) ready_push(w, w->lifo);
  a->state = TY__A_QUEUED;
  w->lifo = a;
}

static void update_load(ty_worker *w) {
  uint64_t load = w->ready_len + ty__spawnq_len(&w->spawnq) +
                  (w->lifo ? 1 : 0) + (w->current ? 1 : 0);
  /* relaxed: a placement hint; only the owner writes it. Skip unchanged
   * values so that readers' copies of the line stay valid. */
  if (atomic_load_explicit(&w->load, memory_order_relaxed) != load)
    atomic_store_explicit(&w->load, load, memory_order_relaxed);
}

/* ---- mesh -------------------------------------------------------------- */

static void mark_dirty(ty_worker *w, unsigned to) {
  w->dirty_mask |= 1ull << to;
  if (ty__mesh_staged(&w->rt->mesh, w->id, to) >= PUBLISH_BATCH) {
    ty__mesh_publish(&w->rt->mesh, w->id, to);
    /* seq_cst fence: our tail store must be ordered before the load of the
     * peer's park state (a store then a load; see the design brief). */
    atomic_thread_fence(memory_order_seq_cst);
    ty__worker_unpark(&w->rt->workers[to]);
  }
}

/* Publishes every ring with staged entries, then wakes each receiver that is
 * parked. */
static void publish_all(ty_worker *w) {
  uint64_t mask = w->dirty_mask;
  if (!mask) return;
  w->dirty_mask = 0;
  uint64_t woke = 0;
  for (uint64_t m = mask; m; m &= m - 1) {
    unsigned to = (unsigned)__builtin_ctzll(m);
    if (ty__mesh_publish(&w->rt->mesh, w->id, to)) woke |= 1ull << to;
  }
  /* seq_cst fence: orders the tail stores above before the park-state loads
   * in ty__worker_unpark; the parker stores PARKED, fences, then re-reads the
   * rings, so one of us sees the other. */
  atomic_thread_fence(memory_order_seq_cst);
  for (uint64_t m = woke; m; m &= m - 1)
    ty__worker_unpark(&w->rt->workers[__builtin_ctzll(m)]);
}

bool ty__worker_mesh_push(ty_worker *w, unsigned to, ty__node *n) {
  ty__peer *p = &w->peers[to];
  if (!p->overflow.head && ty__mesh_push(&w->rt->mesh, w->id, to, n)) {
    TY__STAT_ADD(w, mesh_sent, 1);
    mark_dirty(w, to);
    return true;
  }
  if (!p->overflow.head) w->overflowing++;
  ty__list_push(&p->overflow, n);
  return false;
}

/* Moves what fits of each overflow list into its ring, in order; releases
 * the senders of a list that emptied. */
static void flush_overflow(ty_worker *w) {
  for (unsigned to = 0; to < w->rt->n; to++) {
    ty__peer *p = &w->peers[to];
    if (!p->overflow.head) continue;
    while (p->overflow.head &&
           ty__mesh_push(&w->rt->mesh, w->id, to, p->overflow.head)) {
      ty__list_pop(&p->overflow);
      TY__STAT_ADD(w, mesh_sent, 1);
      w->dirty_mask |= 1ull << to;
    }
    if (p->overflow.head) continue;
    w->overflowing--;
    ty__node *n;
    while ((n = ty__list_pop(&p->blocked))) ready_push(w, (ty_actor *)n);
  }
  publish_all(w);
}

void ty__worker_ready(ty_worker *w, ty_actor *a) { ready_push(w, a); }

static void deliver_spawn(ty_worker *w, ty_actor *a) {
  if (a->pinned) {
    ready_push(w, a);
    return;
  }
  ty__spawnq_push(&w->spawnq, &a->node, &w->rt->inject);
}

static void deliver_node(ty_worker *w, ty__node *n) {
  if (((ty_actor *)n)->type == TY__T_ACTOR) {
    deliver_spawn(w, (ty_actor *)n);
  } else {
    ty__worker_deliver(w, (ty_msg *)n, false);
  }
}

static bool drain_mesh(ty_worker *w) {
  ty_runtime *rt = w->rt;
  ty__node *buf[MESH_BATCH];
  size_t total = 0;
  for (unsigned from = 0; from < rt->n; from++) {
    if (from == w->id) continue;
    size_t got = ty__mesh_drain(&rt->mesh, w->id, from, buf, MESH_BATCH);
    for (size_t i = 0; i < got; i++) deliver_node(w, buf[i]);
    total += got;
  }
  if (total) TY__STAT_ADD(w, mesh_received, total);
  return total != 0;
}

static void drain_inbox(ty_worker *w) {
  if (!ty__inject_len(&w->inbox)) return;
  ty__node *n;
  ty__inject_pop_n(&w->inbox, SIZE_MAX, &n);
  while (n) {
    ty__node *next = n->next;
    deliver_node(w, n);
    n = next;
  }
}

/* ---- delivery ---------------------------------------------------------- */

static void mbox_append(ty_actor *a, ty_msg *m) {
  m->node.next = NULL;
  if (a->mbox.tail) a->mbox.tail->node.next = &m->node;
  else a->mbox.head = m;
  a->mbox.tail = m;
  a->mbox.len++;
  a->mbox.signals += m->kind >= TY_MSG_SIGNAL;
}

void ty_mbox_remove(ty_actor *a, ty_msg *prev, ty_msg *m) {
  ty__assert(prev ? ty_mbox_next(prev) == m : a->mbox.head == m);
  ty_msg *next = ty_mbox_next(m);
  if (prev) prev->node.next = (ty__node *)next;
  else a->mbox.head = next;
  if (a->mbox.tail == m) a->mbox.tail = prev;
  a->mbox.len--;
  a->mbox.signals -= m->kind >= TY_MSG_SIGNAL;
  m->node.next = NULL;
}

static bool wakes(const ty_actor *a, const ty_msg *m) {
  return a->state == TY__A_WAITING &&
         (a->wait_ref == 0 || m->ref == a->wait_ref || m->kind >= TY_MSG_SIGNAL);
}

static void undeliverable(ty_worker *w, ty_msg *m) {
  ty_runtime *rt = w ? w->rt : NULL;
  if (rt && rt->ops.undeliverable) rt->ops.undeliverable(m, w, rt->ud);
  ty_msg_free(m);
}

/* m is addressed to an actor whose home is w (or to a stale pid). */
void ty__worker_deliver(ty_worker *w, ty_msg *m, bool from_running) {
  ty__pident *e;
  uint64_t word = ty__pidtab_lookup(&w->rt->pids, m->to, &e);
  if (!word || ty__w_state(word) != TY__S_LIVE) {
    undeliverable(w, m);
    return;
  }
  ty__assert(ty__w_home(word) == w->id);
  /* relaxed: we are the home worker and stored this pointer ourselves. */
  ty_actor *a = atomic_load_explicit(&e->actor, memory_order_relaxed);
  mbox_append(a, m);
  if (wakes(a, m)) make_ready(w, a, from_running);
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

static unsigned p2c_choose(ty_worker *w) {
  unsigned n = w->rt->n;
  uint64_t r = ty__rand_next(&w->rng);
  unsigned i = (unsigned)(r % n), j = (unsigned)((r >> 32) % n);
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

void ty__worker_place(ty_worker *w, ty_actor *a) {
  if (w->place_left == 0) {
    w->place_to = w->rt->n > 1 ? p2c_choose(w) : w->id;
    w->place_left = PLACE_BLOCK;
  }
  w->place_left--;
  unsigned to = w->place_to;
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

/* ---- running ----------------------------------------------------------- */

/* The first run: this worker becomes the actor's home (see pidtab.h). */
static void start_actor(ty_worker *w, ty_actor *a) {
  ty__pident *e = ty__pidtab_get(&w->rt->pids, ty__pid_slot(a->pid));
  a->home = (uint16_t)w->id;
  /* relaxed: published by the release half of the CAS below. */
  atomic_store_explicit(&e->actor, a, memory_order_relaxed);
  uint64_t old = atomic_load_explicit(&e->word, memory_order_relaxed);
  for (unsigned spins = 1;; spins++) {
    if (ty__w_locked(old)) {
      /* The holder may be a preempted thread: do not burn our slice. */
      if (spins % 64 == 0) sched_yield();
      else ty__cpu_relax();
      old = atomic_load_explicit(&e->word, memory_order_relaxed);
      continue;
    }
    uint64_t live = ty__w_make(ty__w_gen(old), TY__S_LIVE, w->id);
    /* acq_rel: acquire sees the pending list of every sender that held the
     * lock before; release publishes home and actor to later senders. */
    if (atomic_compare_exchange_weak_explicit(&e->word, &old, live,
                                              memory_order_acq_rel,
                                              memory_order_relaxed))
      break;
  }
  /* relaxed: ordered by the CAS above; no sender touches it after LIVE. */
  ty_msg *m = atomic_exchange_explicit(&e->pending, NULL, memory_order_relaxed);
  ty_msg *rev = NULL;
  while (m) { /* pending is newest first */
    ty_msg *next = (ty_msg *)m->node.next;
    m->node.next = (ty__node *)rev;
    rev = m;
    m = next;
  }
  while (rev) {
    ty_msg *next = (ty_msg *)rev->node.next;
    mbox_append(a, rev);
    rev = next;
  }
  w->live++;
  TY__STAT_ADD(w, actors, 1);
}

/* Free pid slots a worker keeps before it shares them (see pidtab.h). */
#define LOCAL_FREE_MAX 4096

static void free_slot(ty_worker *w, ty_actor *a) {
  uint32_t slot = ty__pid_slot(a->pid);
  ty__pident *e = ty__pidtab_get(&w->rt->pids, slot);
  uint32_t gen = (ty__pid_gen(a->pid) + 1) & ((1u << TY_PID_GEN_BITS) - 1);
  /* relaxed: only the home worker reads `actor`, and it is us. */
  atomic_store_explicit(&e->actor, NULL, memory_order_relaxed);
  /* release: a sender that sees the new generation sees nothing stale. */
  atomic_store_explicit(&e->word, ty__w_make(gen ? gen : 1, TY__S_FREE, 0),
                        memory_order_release);
  if (w->nfree == LOCAL_FREE_MAX) { /* share the older half */
    ty__pidtab_give(&w->rt->pids, w->free_slots, LOCAL_FREE_MAX / 2);
    memmove(w->free_slots, w->free_slots + LOCAL_FREE_MAX / 2,
            LOCAL_FREE_MAX / 2 * sizeof(uint32_t));
    w->nfree = LOCAL_FREE_MAX / 2;
  }
  w->free_slots[w->nfree++] = slot;
}

/* Ends a started actor: its pid dies first, so later sends fail at once; then
 * what is left in its mailbox is reported undeliverable. */
static void finish_actor(ty_worker *w, ty_actor *a) {
  ty_runtime *rt = w->rt;
  if (a->timer.armed) ty__wheel_cancel(&w->wheel, &a->timer);
  free_slot(w, a);
  ty_msg *m;
  while ((m = ty_mbox_pop(a))) undeliverable(w, m);
  rt->ops.destroy(a, w, rt->ud);
  ty__actor_free(a);
  w->live--;
  TY__STAT_ADD(w, actors, (uint64_t)-1);
}

static void run_actor(ty_worker *w, ty_actor *a) {
  ty_runtime *rt = w->rt;
  if (!a->started) start_actor(w, a);
  a->state = TY__A_RUNNING;
  w->current = a;
  w->place_left = 0; /* placement blocks never span two runs */
  update_load(w);    /* counts the running actor: a long run looks busy */
  int r = rt->ops.resume(a, rt->ud);
  w->current = NULL;
  a->started = true;
  TY__STAT_ADD(w, polls, 1);
  bool blocked = a->flags & TY__AF_SEND_BLOCKED;
  a->flags &= ~TY__AF_SEND_BLOCKED;
  if (r == TY_DONE) {
    finish_actor(w, a);
  } else if (blocked && r == TY_YIELD) {
    /* It yielded for room: resume it when that overflow list empties. (An
     * actor that waits instead keeps its place: the list keeps the order.) */
    ty__peer *p = &w->peers[a->blocked_peer];
    if (p->overflow.head) {
      a->state = TY__A_BLOCKED;
      ty__list_push(&p->blocked, &a->node);
    } else {
      ready_push(w, a);
    }
  } else if (r == TY_YIELD) {
    ready_push(w, a);
  } else {
    a->state = TY__A_WAITING;
  }
  publish_all(w);
}

void ty_actor_wake(ty_actor *a) {
  ty_worker *w = tls_worker;
  ty__assert(w && a->home == w->id);
  if (a->state == TY__A_WAITING) make_ready(w, a, false);
}

bool ty_send_blocked(const ty_actor *a) {
  return a->flags & TY__AF_SEND_BLOCKED;
}

/* Called by ty_send for a message that went into an overflow list. */
void ty__worker_note_blocked(ty_worker *w, unsigned to) {
  ty_actor *a = w->current;
  if (!a) return;
  a->flags |= TY__AF_SEND_BLOCKED;
  a->blocked_peer = (uint16_t)to;
}

/* ---- timers ------------------------------------------------------------ */

void ty_actor_wait(ty_actor *a, int64_t timeout_ns, uint64_t ref) {
  ty_worker *w = tls_worker;
  a->wait_ref = ref;
  a->flags &= ~TY__AF_TIMED_OUT;
  if (a->timer.armed) ty__wheel_cancel(&w->wheel, &a->timer);
  if (timeout_ns < 0) return;
  if (timeout_ns > (int64_t)1 << 60) timeout_ns = (int64_t)1 << 60;
  uint64_t at = ty_runtime_now_ns(w->rt) + (uint64_t)timeout_ns;
  /* Round up: a timer never fires before its time. */
  ty__wheel_insert(&w->wheel, &a->timer, (at + 999999) / 1000000);
}

bool ty_actor_timed_out(const ty_actor *a) {
  return a->flags & TY__AF_TIMED_OUT;
}

static bool fire_timers(ty_worker *w, uint64_t now_ns) {
  ty__timer *t = ty__wheel_poll(&w->wheel, now_ns / 1000000);
  bool any = t != NULL;
  while (t) {
    ty__timer *next = t->next;
    ty_actor *a = actor_of_timer(t);
    if (a->state == TY__A_WAITING) {
      a->flags |= TY__AF_TIMED_OUT;
      ready_push(w, a);
    }
    t = next;
  }
  return any;
}

/* Tokio's self-tuning: check the inject queue about every 200 us of polling,
 * measured as an EWMA of the time per poll. */
static void tune_interval(ty_worker *w, uint64_t now_ns) {
  if (w->batch_polls) {
    double per = (double)(now_ns - w->batch_start_ns) / w->batch_polls;
    w->poll_ewma_ns = w->poll_ewma_ns ? 0.1 * per + 0.9 * w->poll_ewma_ns : per;
    double iv = GQ_TARGET_NS / (w->poll_ewma_ns > 1 ? w->poll_ewma_ns : 1);
    w->gq_interval = iv < 2 ? 2 : iv > 127 ? 127 : (uint32_t)iv;
  }
  w->batch_start_ns = now_ns;
  w->batch_polls = 0;
}

/* Timers, the inbox and (later) I/O: run every `budget` polls and before
 * parking, so that they are served even while work remains. */
static void maintenance(ty_worker *w) {
  uint64_t now = ty_runtime_now_ns(w->rt);
  tune_interval(w, now);
  ty__io_wait(w->io, 0);
  fire_timers(w, now);
  drain_inbox(w);
  update_load(w);
}

/* ---- finding work ------------------------------------------------------ */

/* Takes a batch from the inject queue: one to run, the rest onto the spawn
 * queue (Tokio: min(len / workers + 1, room, 128)). */
static ty_actor *pop_inject(ty_worker *w) {
  ty_runtime *rt = w->rt;
  size_t len = ty__inject_len(&rt->inject);
  if (!len) return NULL;
  size_t room = w->spawnq.mask + 1 - ty__spawnq_len(&w->spawnq);
  size_t want = len / rt->n + 1;
  if (want > room + 1) want = room + 1;
  if (want > INJECT_BATCH) want = INJECT_BATCH;
  ty__node *n;
  size_t got = ty__inject_pop_n(&rt->inject, want, &n);
  if (!got) return NULL;
  TY__STAT_ADD(w, inject_pops, got);
  ty__node *first = n;
  n = n->next;
  while (n) {
    ty__node *next = n->next;
    ty__spawnq_push(&w->spawnq, n, &rt->inject);
    n = next;
  }
  return (ty_actor *)first;
}

static ty_actor *next_local(ty_worker *w) {
  if (w->lifo) {
    ty_actor *a = w->lifo;
    w->lifo = NULL;
    if (w->lifo_polls < w->rt->cfg.max_lifo_polls) {
      w->lifo_polls++;
      TY__STAT_ADD(w, lifo_hits, 1);
      return a;
    }
    ready_push(w, a); /* fairness: the slot had its turns */
  }
  w->lifo_polls = 0;
  ty_actor *a;
  if (w->tick % w->gq_interval == 0 && (a = pop_inject(w))) return a;
  /* Spawn requests get a turn too: a ready queue that never empties (actors
   * yielding, a pair passing messages through the LIFO slot) must not keep
   * new actors from starting. Counted in turns that reach the queues, which
   * every (max_lifo_polls + 1)th poll does at least. */
  if ((++w->queue_turns & 7) == 0 &&
      (a = (ty_actor *)ty__spawnq_pop(&w->spawnq)))
    return a;
  if ((a = ready_pop(w))) return a;
  if ((a = (ty_actor *)ty__spawnq_pop(&w->spawnq))) return a;
  return pop_inject(w);
}

static ty_actor *steal(ty_worker *w) {
  ty_runtime *rt = w->rt;
  if (!w->searching) {
    if (!ty__idle_try_search(&rt->idle)) return NULL;
    w->searching = true;
  }
  unsigned start = (unsigned)(ty__rand_next(&w->rng) % rt->n);
  for (unsigned k = 0; k < rt->n; k++) {
    unsigned v = (start + k) % rt->n;
    if (v == w->id) continue;
    /* A lone request stays with its owner, which is running and will start
     * it soon: it is usually a child its parent is about to talk to, and a
     * stolen actor stays on the thief for life. */
    if (ty__spawnq_len(&rt->workers[v].spawnq) < 2) continue;
    uint32_t before = ty__spawnq_len(&w->spawnq);
    ty__node *n = ty__spawnq_steal_into(&rt->workers[v].spawnq, &w->spawnq);
    if (n) {
      TY__STAT_ADD(w, steals, 1);
      TY__STAT_ADD(w, stolen, ty__spawnq_len(&w->spawnq) - before + 1);
      return (ty_actor *)n;
    }
  }
  return pop_inject(w);
}

static void end_search(ty_worker *w) {
  if (!w->searching) return;
  w->searching = false;
  /* The last searcher found work: there may be more, so wake another. */
  if (ty__idle_end_search(&w->rt->idle)) ty__notify_parked(w->rt);
}

/* ---- parking ----------------------------------------------------------- */

void ty__worker_unpark(ty_worker *w) {
  /* relaxed: the caller issued a seq_cst fence after publishing its work;
   * the CAS lets exactly one waker pay for the eventfd write. */
  uint32_t st = atomic_load_explicit(&w->park, memory_order_relaxed);
  if (st != TY__PARKED) return;
  if (!atomic_compare_exchange_strong_explicit(&w->park, &st, TY__NOTIFIED,
                                               memory_order_relaxed,
                                               memory_order_relaxed))
    return;
  uint64_t one = 1;
  ssize_t r = write(w->wake_fd, &one, sizeof one);
  (void)r; /* EAGAIN means the counter is already non-zero: still awake-able */
}

static bool has_work(ty_worker *w, bool last_searcher) {
  ty_runtime *rt = w->rt;
  if (w->ready.head || w->lifo || ty__spawnq_len(&w->spawnq) ||
      ty__inject_len(&w->inbox) || ty__inject_len(&rt->inject) ||
      ty__mesh_has_incoming(&rt->mesh, w->id))
    return true;
  /* relaxed: ordered after our park store by the caller's seq_cst fence. */
  if (atomic_load_explicit(&rt->stopping, memory_order_relaxed)) return true;
  if (last_searcher) {
    for (unsigned i = 0; i < rt->n; i++)
      if (i != w->id && ty__spawnq_len(&rt->workers[i].spawnq) > 1)
        return true; /* what steal() would take (it leaves a lone one) */
  }
  return false;
}

static int64_t park_timeout(ty_worker *w) {
  uint64_t next = ty__wheel_next_deadline(&w->wheel);
  int64_t t = -1;
  if (next != UINT64_MAX) {
    uint64_t now = ty_runtime_now_ns(w->rt);
    uint64_t at = next * 1000000;
    t = at > now ? (int64_t)(at - now) : 0;
  }
  if (w->overflowing && (t < 0 || t > OVERFLOW_PARK_NS)) t = OVERFLOW_PARK_NS;
  return t;
}

/*
 * PARKED -> fence -> re-check -> sleep. A producer publishes, fences, then
 * reads our state; we store PARKED, fence, then read its queue: with both
 * fences seq_cst, at least one side sees the other's store, so either we find
 * the work or it finds us parked and writes the eventfd.
 */
static void park(ty_worker *w) {
  ty_runtime *rt = w->rt;
  maintenance(w);
  publish_all(w); /* after maintenance, which may have sent something */
  if (w->ready.head) return;
  int64_t timeout = park_timeout(w);
  if (timeout == 0) return;
  /* seq_cst: the store half of the protocol above. Stored before we join
   * the sleepers, so a notifier that picks us sees PARKED. */
  atomic_store(&w->park, TY__PARKED);
  bool last = ty__idle_park(&rt->idle, w->id, w->searching);
  w->searching = false;
  atomic_thread_fence(memory_order_seq_cst);
  if (!has_work(w, last)) {
    TY__STAT_ADD(w, parks, 1);
    ty__io_wait(w->io, timeout);
  }
  /* seq_cst: pairs with the wakers' CAS; NOTIFIED means the eventfd was (or
   * is about to be) written. */
  if (atomic_exchange(&w->park, TY__RUNNING) == TY__NOTIFIED) {
    uint64_t v;
    ssize_t r = read(w->wake_fd, &v, sizeof v);
    (void)r; /* EAGAIN: the write is still coming; a later park eats it */
    TY__STAT_ADD(w, unparks, 1);
  }
  if (ty__idle_unpark(&rt->idle, w->id)) w->searching = true;
  maintenance(w);
}

/* ---- spinning ---------------------------------------------------------- */

/* Work that a spinning worker would pick up: cheap loads only. Stealable
 * work counts once the spinner may search (steal); it tries to become a
 * searcher when it sees some. */
static bool work_visible(ty_worker *w) {
  ty_runtime *rt = w->rt;
  if (ty__mesh_has_incoming(&rt->mesh, w->id) || ty__inject_len(&w->inbox) ||
      ty__inject_len(&rt->inject))
    return true;
  for (unsigned i = 0; i < rt->n; i++) {
    if (i == w->id || ty__spawnq_len(&rt->workers[i].spawnq) < 2) continue;
    if (w->searching) return true;
    if (ty__idle_try_search(&rt->idle)) {
      w->searching = true;
      return true;
    }
    return false;
  }
  return false;
}

/*
 * Before parking, an idle worker watches for work for up to spin_ns (I/O is
 * not polled: measured with wrk, polling it here tripled p99): a message from another core then costs a cache-line transfer
 * (~0.2 us) instead of a sleep and an eventfd wake (~10-20 us). Only loads: a
 * spinner that sees stealable work must first become a searcher (at most
 * half the workers search) before the loop lets it steal. Every 256 turns
 * the spinner yields the CPU, so that on an oversubscribed machine it does
 * not keep a busy worker off its core.
 */
static bool spin_for_work(ty_worker *w) {
  uint64_t spin = w->rt->cfg.spin_ns;
  if (!spin || w->rt->n == 1) return false;
  publish_all(w);
  uint64_t until = ty__now_ns() + spin;
  for (unsigned i = 1;; i++) {
    if (work_visible(w)) return true;
    /* relaxed: a hint; the park path re-reads it after its fence. */
    if (atomic_load_explicit(&w->rt->stopping, memory_order_relaxed))
      return false;
    if ((i & 31) == 0 && ty__now_ns() > until) return false;
    if ((i & 255) == 0) sched_yield();
    else ty__cpu_relax();
  }
}

/* ---- the loop ---------------------------------------------------------- */

static void worker_loop(ty_worker *w) {
  ty_runtime *rt = w->rt;
  uint32_t budget = rt->cfg.budget;
  /* relaxed: a stop is also noticed after the park fence; a late look here
   * costs at most one more actor run. */
  while (!atomic_load_explicit(&rt->stopping, memory_order_relaxed)) {
    if (w->batch_polls >= budget) maintenance(w);
    drain_mesh(w);
    drain_inbox(w);
    if (w->overflowing) flush_overflow(w);
    ty_actor *a = next_local(w);
    if (!a) a = steal(w);
    if (!a) {
      if (!spin_for_work(w)) park(w);
      continue;
    }
    end_search(w);
    run_actor(w, a);
    w->tick++;
    w->batch_polls++;
    if ((w->tick & 15) == 0) update_load(w);
  }
}

/* At stop, on the worker's thread (the binding's state is still open):
 * destroy every actor started here. */
static void destroy_started(ty_worker *w) {
  ty_runtime *rt = w->rt;
  /* relaxed: every spawning thread is a worker that is stopping or a
   * non-worker the caller of stop has finished with. */
  uint32_t top = atomic_load_explicit(&rt->pids.next, memory_order_relaxed);
  if (top > TY_PID_MAX_SLOTS) top = TY_PID_MAX_SLOTS;
  for (uint32_t s = 0; s < top && w->live; s++) {
    ty__pident *e = ty__pidtab_get(&rt->pids, s);
    if (!e) continue;
    /* acquire: see the home worker's actor pointer (we are that worker). */
    uint64_t word = atomic_load_explicit(&e->word, memory_order_acquire);
    if (ty__w_state(word) != TY__S_LIVE || ty__w_home(word) != w->id) continue;
    finish_actor(w, atomic_load_explicit(&e->actor, memory_order_relaxed));
  }
}

/* Keeps worker i on CPU i (mod the CPUs this process may use): an actor
 * cannot move, so a worker the kernel migrates or stacks on a busy CPU
 * stalls every actor it holds. */
static void pin_to_cpu(ty_worker *w) {
  cpu_set_t allowed, one;
  if (sched_getaffinity(0, sizeof allowed, &allowed)) return;
  int n = CPU_COUNT(&allowed), k = (int)(w->id % (unsigned)(n ? n : 1));
  for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
    if (!CPU_ISSET(cpu, &allowed) || k--) continue;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    pthread_setaffinity_np(pthread_self(), sizeof one, &one);
    return;
  }
}

void *ty__worker_main(void *arg) {
  ty_worker *w = arg;
  ty_runtime *rt = w->rt;
  tls_worker = w;
  ty__alloc_thread_init();
  ty__wheel_init(&w->wheel, ty_runtime_now_ns(rt) / 1000000);
  w->batch_start_ns = ty_runtime_now_ns(rt);
  if (rt->cfg.pin) pin_to_cpu(w);
  if (ty__io_new(w, w->wake_fd, rt->cfg.io, &w->io))
    ty__die("cannot create the worker's I/O backend");
  if (rt->ops.worker_init) rt->ops.worker_init(w, rt->ud);
  worker_loop(w);
  if (w->lifo) ready_push(w, w->lifo);
  w->lifo = NULL;
  /* Pinned spawn requests wait in the ready queue without a LIVE slot. */
  ty__node *n;
  while ((n = ty__list_pop(&w->ready))) {
    ty_actor *a = (ty_actor *)n;
    if (!a->started) {
      rt->ops.destroy(a, NULL, rt->ud);
      ty__actor_free(a);
    }
  }
  w->ready_len = 0;
  for (unsigned i = 0; i < rt->n; i++) w->peers[i].blocked.head = w->peers[i].blocked.tail = NULL;
  destroy_started(w);
  if (rt->ops.worker_exit) rt->ops.worker_exit(w, rt->ud);
  ty__io_free(w->io);
  w->io = NULL;
  ty__alloc_thread_exit();
  tls_worker = NULL;
  return NULL;
}
