/*
 * runtime.c - creating, starting and stopping the runtime; spawn and send.
 */
#include <errno.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "alloc.h"
#include "runtime.h"


void ty__worker_note_blocked(ty_worker *w, unsigned to);
static void send_node_from_thread(ty_runtime *rt, unsigned home, ty__node *n);

void ty_config_init(ty_config *c) {
  memset(c, 0, sizeof *c);
  c->mesh_ring = TY__MESH_RING_CAP;
  c->spawnq_cap = TY__SPAWNQ_CAP;
  c->budget = 64;
  c->max_lifo_polls = 3;
  c->gq_interval_seed = 61;
  c->spin_ns = 50000;
  const char *pin = getenv("TYCHO_PIN");
  c->pin = pin && *pin == '1';
}

static unsigned cpu_count(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (unsigned)n : 1;
}

static bool pow2(uint32_t v) { return v >= 2 && (v & (v - 1)) == 0; }

static int check_config(ty_config *c) {
  if (c->workers == 0) c->workers = cpu_count();
  if (c->workers > TY_MAX_WORKERS) return -EINVAL;
  if (!pow2(c->mesh_ring) || !pow2(c->spawnq_cap) ||
      c->spawnq_cap > TY__SPAWNQ_CAP || c->budget == 0)
    return -EINVAL;
  if (c->gq_interval_seed < 2) c->gq_interval_seed = 2;
  if (c->gq_interval_seed > 127) c->gq_interval_seed = 127;
  return 0;
}

static int init_worker(ty_runtime *rt, ty_worker *w, unsigned id) {
  memset(w, 0, sizeof *w);
  w->rt = rt;
  w->id = id;
  w->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (w->wake_fd < 0) return -errno;
  w->gq_interval = rt->cfg.gq_interval_seed;
  w->rng = 0x9E3779B97F4A7C15ull * (id + 1) ^ ty__now_ns();
  if (!w->rng) w->rng = 1;
  w->peers = ty__xcalloc(rt->n, sizeof *w->peers);
  w->free_slots = ty__xcalloc(4096, sizeof *w->free_slots);
  w->capfree = 4096;
  ty__spawnq_init(&w->spawnq, rt->cfg.spawnq_cap);
  ty__inject_init(&w->inbox);
  atomic_init(&w->park, TY__RUNNING);
  atomic_init(&w->load, 0);
  return 0;
}

int ty_runtime_new(const ty_config *cfg, const ty_actor_ops *ops, void *ud,
                   ty_runtime **out) {
  ty_config c;
  if (cfg) c = *cfg; else ty_config_init(&c);
  int err = check_config(&c);
  if (err) return err;
  if (!ops || !ops->resume || !ops->destroy) return -EINVAL;
  ty_runtime *rt = aligned_alloc(TY_PAD, (sizeof *rt + TY_PAD - 1) / TY_PAD * TY_PAD);
  if (!rt) return -ENOMEM;
  memset(rt, 0, sizeof *rt);
  rt->cfg = c;
  rt->ops = *ops;
  rt->ud = ud;
  rt->n = c.workers;
  rt->t0_ns = ty__now_ns();
  ty__pidtab_init(&rt->pids);
  ty__inject_init(&rt->inject);
  ty__idle_init(&rt->idle, rt->n);
  if ((err = ty__mesh_init(&rt->mesh, rt->n, c.mesh_ring))) goto fail_mesh;
  rt->workers = aligned_alloc(TY_PAD, rt->n * sizeof(ty_worker));
  if (!rt->workers) { err = -ENOMEM; goto fail_workers; }
  for (unsigned i = 0; i < rt->n; i++) {
    if ((err = init_worker(rt, &rt->workers[i], i))) goto fail_worker;
  }
  *out = rt;
  return 0;
fail_worker:
  for (unsigned i = 0; i < rt->n; i++) {
    if (rt->workers[i].wake_fd > 0) close(rt->workers[i].wake_fd);
    free(rt->workers[i].peers);
  }
  free(rt->workers);
fail_workers:
  ty__mesh_destroy(&rt->mesh);
fail_mesh:
  ty__idle_destroy(&rt->idle);
  ty__inject_destroy(&rt->inject);
  ty__pidtab_destroy(&rt->pids);
  free(rt);
  return err;
}

int ty_runtime_start(ty_runtime *rt) {
  if (rt->started) return -EALREADY;
  rt->started = true;
  for (unsigned i = 0; i < rt->n; i++) {
    int err = pthread_create(&rt->workers[i].thread, NULL, ty__worker_main,
                             &rt->workers[i]);
    if (err) ty__die("cannot create a worker thread");
  }
  return 0;
}

unsigned ty_runtime_workers(const ty_runtime *rt) { return rt->n; }
void *ty_runtime_userdata(const ty_runtime *rt) { return rt->ud; }
uint64_t ty_runtime_now_ns(const ty_runtime *rt) {
  return ty__now_ns() - rt->t0_ns;
}

/* ---- spawn ------------------------------------------------------------- */

void ty__notify_parked(ty_runtime *rt) {
  /* seq_cst fence: the caller just pushed stealable work (a store); the idle
   * state read that follows is the load half of the park protocol. */
  atomic_thread_fence(memory_order_seq_cst);
  int id = ty__idle_to_notify(&rt->idle);
  if (id >= 0) ty__worker_unpark(&rt->workers[id]);
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

/* A new spawn request with a fresh pid, not placed yet; NULL when the pid
 * table is full. */
static ty_actor *new_request(ty_runtime *rt, ty_worker *w, void *user,
                             ty_pid *out) {
  uint32_t slot;
  ty__pident *e = take_slot(rt, w, &slot);
  if (!e) return NULL;
  ty_actor *a = ty__actor_alloc();
  a->type = TY__T_ACTOR;
  a->user = user;
  a->pid = ty__pidtab_claim(e, slot);
  if (out) *out = a->pid;
  return a;
}

int ty_spawn(ty_runtime *rt, void *user, ty_pid *out) {
  ty_worker *w = worker_of(rt);
  ty_actor *a = new_request(rt, w, user, out);
  if (!a) return -EAGAIN;
  if (w) {
    ty__worker_place(w, a);
  } else {
    ty__inject_push(&rt->inject, &a->node);
    ty__notify_parked(rt);
  }
  return 0;
}

int ty_spawn_at(ty_runtime *rt, unsigned worker, void *user, ty_pid *out) {
  if (worker >= rt->n) return -EINVAL;
  ty_worker *w = worker_of(rt);
  ty_actor *a = new_request(rt, w, user, out);
  if (!a) return -EAGAIN;
  a->pinned = true;
  if (w && w->id == worker) {
    ty__worker_ready(w, a);
  } else if (w) {
    ty__worker_mesh_push(w, worker, &a->node);
  } else {
    send_node_from_thread(rt, worker, &a->node);
  }
  return 0;
}

/* ---- messages ---------------------------------------------------------- */

ty_msg *ty_msg_new(size_t len) {
  size_t size = ty__alloc_size(sizeof(ty_msg) + len);
  ty_msg *m = ty__alloc(size);
  memset(m, 0, sizeof *m);
  m->type = TY__T_MSG;
  m->len = (uint32_t)len;
  m->cap = (uint32_t)(size - sizeof(ty_msg));
  return m;
}

void ty_msg_free(ty_msg *m) { ty__free(m, sizeof(ty_msg) + m->cap); }

ty_actor *ty__actor_alloc(void) {
  ty_actor *a = ty__alloc(sizeof *a);
  memset(a, 0, sizeof *a);
  return a;
}

void ty__actor_free(ty_actor *a) { ty__free(a, sizeof *a); }

/* The receiver has not started: queue on its entry under the lock bit. */
static bool send_pending(ty__pident *e, ty_msg *m, uint64_t *word) {
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
  m->node.next = (ty__node *)atomic_load_explicit(&e->pending,
                                                  memory_order_relaxed);
  atomic_store_explicit(&e->pending, m, memory_order_relaxed);
  /* release: the starter's acquire CAS sees the list. */
  atomic_store_explicit(&e->word, w, memory_order_release);
  return true;
}

static void send_node_from_thread(ty_runtime *rt, unsigned home, ty__node *n) {
  ty_worker *to = &rt->workers[home];
  ty__inject_push(&to->inbox, n);
  /* seq_cst fence: push (store) then read the park state (load). */
  atomic_thread_fence(memory_order_seq_cst);
  ty__worker_unpark(to);
}

int ty_send(ty_runtime *rt, ty_msg *m) {
  ty__pident *e;
  uint64_t word = ty__pidtab_lookup(&rt->pids, m->to, &e);
  if (!word) return -ESRCH;
  ty_worker *w = worker_of(rt);
  if (w && w->current) m->from = m->from ? m->from : w->current->pid;
  for (;;) {
    if (ty__w_gen(word) != ty__pid_gen(m->to) ||
        ty__w_state(word) == TY__S_FREE)
      return -ESRCH;
    if (ty__w_state(word) == TY__S_PENDING) {
      if (send_pending(e, m, &word)) return 0;
      continue;
    }
    unsigned home = ty__w_home(word);
    if (!w) {
      send_node_from_thread(rt, home, &m->node);
    } else if (home == w->id) {
      ty__worker_deliver(w, m, w->current != NULL);
    } else if (!ty__worker_mesh_push(w, home, &m->node)) {
      ty__worker_note_blocked(w, home);
    }
    return 0;
  }
}

bool ty_pid_alive(ty_runtime *rt, ty_pid pid) {
  ty__pident *e;
  return ty__pidtab_lookup(&rt->pids, pid, &e) != 0;
}

void ty_worker_stats_get(ty_runtime *rt, unsigned i, ty_worker_stats *o) {
  ty__stats *s = &rt->workers[i].stats;
  /* relaxed: counters, each read on its own. */
#define GET(f) o->f = atomic_load_explicit(&s->f, memory_order_relaxed)
  GET(polls); GET(lifo_hits); GET(steals); GET(stolen); GET(parks);
  GET(unparks); GET(mesh_sent); GET(mesh_received); GET(inject_pops);
  GET(spawns_placed); GET(spawns_remote); GET(actors);
#undef GET
}

/* ---- stop -------------------------------------------------------------- */

static void free_chain(ty_runtime *rt, ty__node *n) {
  while (n) {
    ty__node *next = n->next;
    if (((ty_actor *)n)->type == TY__T_ACTOR) {
      ty_actor *a = (ty_actor *)n;
      rt->ops.destroy(a, NULL, rt->ud);
      ty__actor_free(a);
    } else {
      ty_msg_free((ty_msg *)n);
    }
    n = next;
  }
}

/* After every worker has exited: free what is still queued anywhere. */
static void drain_leftovers(ty_runtime *rt) {
  ty__node *n;
  for (unsigned i = 0; i < rt->n; i++) {
    ty_worker *w = &rt->workers[i];
    while ((n = ty__spawnq_pop(&w->spawnq))) free_chain(rt, (n->next = NULL, n));
    for (unsigned from = 0; from < rt->n; from++) {
      if (from == i) continue;
      ty__node *buf[64];
      size_t got;
      while ((got = ty__mesh_drain(&rt->mesh, i, from, buf, 64)))
        for (size_t k = 0; k < got; k++) free_chain(rt, (buf[k]->next = NULL, buf[k]));
      /* entries staged but never published */
      ty__mesh_publish(&rt->mesh, from, i);
      while ((got = ty__mesh_drain(&rt->mesh, i, from, buf, 64)))
        for (size_t k = 0; k < got; k++) free_chain(rt, (buf[k]->next = NULL, buf[k]));
      free_chain(rt, w->peers[from].overflow.head);
      w->peers[from].overflow.head = w->peers[from].overflow.tail = NULL;
    }
    ty__inject_pop_n(&w->inbox, SIZE_MAX, &n);
    free_chain(rt, n);
  }
  ty__inject_pop_n(&rt->inject, SIZE_MAX, &n);
  free_chain(rt, n);
  /* Messages parked on spawn requests that never started. */
  uint32_t top = atomic_load_explicit(&rt->pids.next, memory_order_relaxed);
  if (top > TY_PID_MAX_SLOTS) top = TY_PID_MAX_SLOTS;
  for (uint32_t s = 0; s < top; s++) {
    ty__pident *e = ty__pidtab_get(&rt->pids, s);
    if (!e) continue;
    /* relaxed: every other thread has been joined. */
    ty_msg *m = atomic_exchange_explicit(&e->pending, NULL, memory_order_relaxed);
    free_chain(rt, m ? &m->node : NULL);
  }
}

void ty_runtime_stop(ty_runtime *rt) {
  if (!rt->started) return;
  /* seq_cst: a worker stores PARKED, fences and then reads `stopping`; we
   * store it and then read their park state. */
  atomic_store(&rt->stopping, 1);
  atomic_thread_fence(memory_order_seq_cst);
  for (unsigned i = 0; i < rt->n; i++) ty__worker_unpark(&rt->workers[i]);
  for (unsigned i = 0; i < rt->n; i++) pthread_join(rt->workers[i].thread, NULL);
  rt->started = false;
  drain_leftovers(rt);
}

void ty_runtime_free(ty_runtime *rt) {
  if (!rt) return;
  if (rt->started) ty_runtime_stop(rt);
  else drain_leftovers(rt);
  for (unsigned i = 0; i < rt->n; i++) {
    ty_worker *w = &rt->workers[i];
    close(w->wake_fd);
    free(w->peers);
    free(w->free_slots);
    ty__inject_destroy(&w->inbox);
  }
  free(rt->workers);
  ty__mesh_destroy(&rt->mesh);
  ty__idle_destroy(&rt->idle);
  ty__inject_destroy(&rt->inject);
  ty__pidtab_destroy(&rt->pids);
  free(rt);
}
