/*
 * runtime.c - the runtime's memory: its configuration, creating it and its
 * workers' structures, virtual time, counters, and freeing what is left once
 * every worker thread has exited (actor and message records: record.c). Threads are started and
 * stopped in worker.c; spawns and sends are routed in route.c.
 */
#include <errno.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "base/alloc.h"
#include "runtime.h"
#include "worker.h"

void ty_config_init(ty_config *c) {
  memset(c, 0, sizeof *c);
  c->mesh_ring = TY__MESH_RING_CAP;
  c->spawnq_cap = TY__SPAWNQ_CAP;
  c->budget = 64;
  c->max_lifo_polls = 3;
  c->gq_interval_seed = 61;
  c->spin_ns = 50000;
  c->max_slice_ns = 1000000000ull;
  c->stop_timeout_ns = 5000000000ull;
  c->mbox_max = TY_MBOX_MAX;
  c->mbox_max_bytes = TY_MBOX_MAX_BYTES;
  c->mbox_warn = TY_MBOX_WARN;
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
  if (c->workers > TY_MAX_WORKERS || c->node >= TY_MAX_NODES) return -EINVAL;
  if (!pow2(c->mesh_ring) || !pow2(c->spawnq_cap) ||
      c->spawnq_cap > TY__SPAWNQ_CAP || c->budget == 0)
    return -EINVAL;
  if (c->mbox_max == 0 || c->mbox_max_bytes == 0) return -EINVAL;
  if (c->gq_interval_seed < 2) c->gq_interval_seed = 2;
  if (c->gq_interval_seed > 127) c->gq_interval_seed = 127;
  return 0;
}

static int init_worker(ty_runtime *rt, ty_worker *w, unsigned id) {
  memset(w, 0, sizeof *w);
  w->rt = rt;
  w->id = id;
  w->mbox_half_bytes = rt->cfg.mbox_max_bytes / 2;
  w->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (w->wake_fd < 0) return -errno;
  w->gq_interval = rt->cfg.gq_interval_seed;
  w->rng = 0x9E3779B97F4A7C15ull * (id + 1) ^ ty__now_ns();
  if (!w->rng) w->rng = 1;
  w->peers = ty__xcalloc(rt->mesh.n, sizeof *w->peers);
  w->free_slots = ty__xcalloc(4096, sizeof *w->free_slots);
  w->capfree = 4096;
  ty__spawnq_init(&w->spawnq, rt->cfg.spawnq_cap);
  ty__inject_init(&w->inbox);
  atomic_init(&w->park, TY__RUNNING);
  atomic_init(&w->leave, 0);
  atomic_init(&w->load, 0);
  ty__wd_init(w);
  return 0;
}

int ty_runtime_new(const ty_config *cfg, const ty_actor_ops *ops, void *ud,
                   ty_runtime **out) {
  ty_config c;
  if (cfg) c = *cfg;
  else ty_config_init(&c);
  int err = check_config(&c);
  if (err) return err;
  if (!ops || !ops->resume || !ops->destroy) return -EINVAL;
  ty_runtime *rt =
      aligned_alloc(TY_PAD, (sizeof *rt + TY_PAD - 1) / TY_PAD * TY_PAD);
  if (!rt) return -ENOMEM;
  memset(rt, 0, sizeof *rt);
  rt->cfg = c;
  rt->ops = *ops;
  rt->ud = ud;
  rt->n = c.workers;
  rt->t0_ns = ty__now_ns();
  ty__pidtab_init(&rt->pids, c.node);
  ty__inject_init(&rt->inject);
  ty__idle_init(&rt->idle, rt->n);
  /* The port, when there is one, is the mesh's last endpoint. */
  if ((err = ty__mesh_init(&rt->mesh, rt->n + (c.port ? 1 : 0), c.mesh_ring)))
    goto fail_mesh;
  if (c.port && (err = ty__port_new(rt))) goto fail_port;
  rt->workers = aligned_alloc(TY_PAD, rt->n * sizeof(ty_worker));
  if (!rt->workers) {
    err = -ENOMEM;
    goto fail_workers;
  }
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
  ty__port_free(rt);
fail_port:
  ty__mesh_destroy(&rt->mesh);
fail_mesh:
  ty__idle_destroy(&rt->idle);
  ty__inject_destroy(&rt->inject);
  ty__pidtab_destroy(&rt->pids);
  free(rt);
  return err;
}

unsigned ty_runtime_workers(const ty_runtime *rt) { return rt->n; }
void *ty_runtime_userdata(const ty_runtime *rt) { return rt->ud; }
void ty_runtime_virtual(ty_runtime *rt) {
  if (ty_runtime_is_virtual(rt)) return;
  /* release: vnow is published before the flag that makes workers read it;
   * seq_cst on the flag is not needed: a worker that still reads the real
   * clock once more reads a time just before vnow. */
  /* On a whole ms: timers are filed in ticks that divide 1 ms, rounded up
   * (timer.h), so that a timer of whole ms falls due exactly when that much
   * time is advanced. */
  uint64_t now = ty__now_ns() - rt->t0_ns;
  atomic_store_explicit(&rt->vnow, (now / 1000000 + 1) * 1000000,
                        memory_order_release);
  atomic_store_explicit(&rt->virt, true, memory_order_release);
}

uint64_t ty_runtime_advance(ty_runtime *rt, uint64_t ns) {
  /* acq_rel: one advancing thread at a time in practice; the RMW keeps two
   * from losing a step. Release pairs with the workers' acquire load. */
  uint64_t to =
      atomic_fetch_add_explicit(&rt->vnow, ns, memory_order_acq_rel) + ns;
  /* Parked workers wake now (the others re-check within a ms: park.c). */
  atomic_thread_fence(memory_order_seq_cst);
  for (unsigned i = 0; i < rt->n; i++) ty__worker_unpark(&rt->workers[i]);
  return to;
}

bool ty_runtime_fired(const ty_runtime *rt, uint64_t ns) {
  for (unsigned i = 0; i < rt->n; i++)
    /* acquire: pairs with the owner's release after it fired its timers:
     * the messages they sent are published before. */
    if (atomic_load_explicit(&rt->workers[i].fired_ns, memory_order_acquire) <
        ns)
      return false;
  return true;
}

void ty_worker_stats_get(ty_runtime *rt, unsigned i, ty_worker_stats *o) {
  ty__stats *s = &rt->workers[i].stats;
  /* relaxed: counters, each read on its own. */
#define GET(f) o->f = atomic_load_explicit(&s->f, memory_order_relaxed)
  GET(polls);
  GET(lifo_hits);
  GET(steals);
  GET(stolen);
  GET(parks);
  GET(unparks);
  GET(mesh_sent);
  GET(mesh_received);
  GET(inject_pops);
  GET(spawns_placed);
  GET(spawns_remote);
  GET(actors);
  GET(preempts);
  GET(mailbox);
  GET(mailbox_bytes);
  GET(mailbox_hwm);
  GET(sends_full);
  GET(delivered);
#undef GET
  /* relaxed: the P2C load hint (ready queue, LIFO, spawn queue, running). */
  o->run_queue =
      atomic_load_explicit(&rt->workers[i].load, memory_order_relaxed);
  o->stuck = ty_worker_is_stuck(rt, i);
}

uint64_t ty_runtime_mailbox_bytes(ty_runtime *rt) {
  uint64_t sum = 0;
  /* relaxed: counters; a sum of hints. A worker's count can only be read
   * as a moment of its own history, so the sum is never negative. */
  for (unsigned i = 0; i < rt->n; i++)
    sum += atomic_load_explicit(&rt->workers[i].stats.mailbox_bytes,
                                memory_order_relaxed);
  return sum;
}

/* ---- leftovers ---------------------------------------------------------- */

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
void ty__runtime_drain(ty_runtime *rt) {
  ty__node *n;
  for (unsigned i = 0; i < rt->n; i++) {
    ty_worker *w = &rt->workers[i];
    while ((n = ty__spawnq_pop(&w->spawnq)))
      free_chain(rt, (n->next = NULL, n));
    for (unsigned from = 0; from < rt->mesh.n; from++) {
      if (from == i) continue;
      ty__node *buf[64];
      size_t got;
      while ((got = ty__mesh_drain(&rt->mesh, i, from, buf, 64)))
        for (size_t k = 0; k < got; k++)
          free_chain(rt, (buf[k]->next = NULL, buf[k]));
      /* entries staged but never published */
      ty__mesh_publish(&rt->mesh, from, i);
      while ((got = ty__mesh_drain(&rt->mesh, i, from, buf, 64)))
        for (size_t k = 0; k < got; k++)
          free_chain(rt, (buf[k]->next = NULL, buf[k]));
      free_chain(rt, w->peers[from].overflow.head);
      w->peers[from].overflow.head = w->peers[from].overflow.tail = NULL;
    }
    ty__inject_pop_n(&w->inbox, SIZE_MAX, &n);
    free_chain(rt, n);
  }
  if (rt->port) { /* what workers sent the port and it never took */
    ty__node *buf[64];
    size_t got;
    for (unsigned from = 0; from < rt->n; from++) {
      ty__mesh_publish(&rt->mesh, from, rt->n);
      while ((got = ty__mesh_drain(&rt->mesh, rt->n, from, buf, 64)))
        for (size_t k = 0; k < got; k++)
          free_chain(rt, (buf[k]->next = NULL, buf[k]));
      ty__peer *p = &rt->workers[from].peers[rt->n];
      free_chain(rt, p->overflow.head);
      p->overflow.head = p->overflow.tail = NULL;
    }
    ty__inject_pop_n(&rt->port->inbox, SIZE_MAX, &n);
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
    ty_msg *m =
        atomic_exchange_explicit(&e->pending, NULL, memory_order_relaxed);
    free_chain(rt, m ? &m->node : NULL);
  }
}

/* Runtimes whose stop abandoned a worker: kept (and reachable, for leak
 * checkers) for the life of the process, since that worker's thread may
 * still touch them. */
static pthread_mutex_t g_kept_mu = PTHREAD_MUTEX_INITIALIZER;
static ty_runtime *g_kept[64];
static unsigned g_nkept;

void ty_runtime_free(ty_runtime *rt) {
  if (!rt) return;
  ty__assert(!rt->started); /* ty_runtime_stop first */
  if (rt->abandoned) {
    pthread_mutex_lock(&g_kept_mu);
    if (g_nkept < 64) g_kept[g_nkept++] = rt;
    pthread_mutex_unlock(&g_kept_mu);
    return;
  }
  ty__runtime_drain(rt); /* idempotent: a stop drained already */
  for (unsigned i = 0; i < rt->n; i++) {
    ty_worker *w = &rt->workers[i];
    close(w->wake_fd);
    free(w->peers);
    free(w->free_slots);
    ty__inject_destroy(&w->inbox);
    ty__wd_destroy(w);
  }
  free(rt->workers);
  ty__port_free(rt);
  ty__mesh_destroy(&rt->mesh);
  ty__idle_destroy(&rt->idle);
  ty__inject_destroy(&rt->inject);
  ty__pidtab_destroy(&rt->pids);
  free(rt);
}
