/*
 * watchdog.c - runaway actors and stuck workers (docs/architecture.md,
 * "Runaway actors").
 *
 * One thread per runtime samples each worker's `wd.seq`, which the worker
 * stores (release, no fence) before and after each resume. A resume that
 * lasts max_slice gets a request (TY_PREEMPT_SLICE): the binding's
 * `interrupt` op makes the running code stop at its next chance (a hook,
 * an allocation, an API call). If it is still running after two slices it
 * cannot be interrupted: the watchdog claims the worker, declares it stuck,
 * reports its actors dead (`stuck` op), frees their pids, and from then on
 * drains what reaches the worker (spawn requests go elsewhere, messages are
 * undeliverable). If its code ever returns, the worker destroys those
 * actors and comes back empty; at a stop it is abandoned instead.
 *
 * The claim is a Dekker pair without a fence on the hot path: the worker
 * stores "left the resume" and then loads the flag, separated only by a
 * compiler barrier; the watchdog stores the flag, runs ty__heavy_fence
 * (membarrier: a barrier on every thread) and then loads seq. One of the two
 * sees the other: either the worker sees the claim and waits on `mu`, or
 * the watchdog sees it left and withdraws.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/fence.h"
#include "worker.h"

/* ---- small things ------------------------------------------------------ */

void ty__wd_init(ty_worker *w) {
  pthread_mutex_init(&w->wd.mu, NULL);
  atomic_init(&w->wd.seq, 0);
  atomic_init(&w->wd.flag, 0);
  atomic_init(&w->wd.route, 0);
}

void ty__wd_destroy(ty_worker *w) {
  pthread_mutex_destroy(&w->wd.mu);
  free(w->wd.dead);
  w->wd.dead = NULL;
}

void ty__wd_thread_begin(ty_worker *w) {
  /* relaxed: read only to name a /proc file; a stale 0 means "unknown". */
  atomic_store_explicit(&w->wd.tid, (int)gettid(), memory_order_relaxed);
}

bool ty_worker_blocked(ty_worker *w) { return w->wd.blocked; }

const _Atomic uint32_t *ty_worker_flag(const ty_worker *w) {
  return &w->wd.flag;
}

uint64_t ty_worker_seq(const ty_worker *w) {
  /* relaxed: the owner reads its own stores. */
  return atomic_load_explicit(&w->wd.seq, memory_order_relaxed);
}

void ty_worker_lock(ty_worker *w) { pthread_mutex_lock(&w->wd.mu); }
void ty_worker_unlock(ty_worker *w) { pthread_mutex_unlock(&w->wd.mu); }

bool ty__wd_is_stuck(ty_worker *w) {
  pthread_mutex_lock(&w->wd.mu);
  bool stuck = w->wd.state != TY__WD_OK;
  pthread_mutex_unlock(&w->wd.mu);
  return stuck;
}

/* relaxed RMWs on the flag: every writer holds mu; the owner reads it
 * relaxed and then takes mu before acting on it. */
static void flag_set(ty_worker *w, uint32_t bits) {
  atomic_fetch_or_explicit(&w->wd.flag, bits, memory_order_relaxed);
}
static void flag_clear(ty_worker *w, uint32_t bits) {
  atomic_fetch_and_explicit(&w->wd.flag, ~bits, memory_order_relaxed);
}

/* ---- requests (under mu) ----------------------------------------------- */

static int prio(int kind) {
  static const int p[] = {0, 2, 1, 3, 4}; /* none slice kill stop stuck */
  return p[kind];
}

/* Posts a request for resume seq unless a stronger one stands for it. */
static void post(ty_worker *w, int kind, uint64_t seq, ty_pid pid) {
  ty__wd *d = &w->wd;
  if (d->req_kind && d->req_seq == seq && prio(d->req_kind) >= prio(kind))
    return;
  d->req_kind = kind;
  d->req_seq = seq;
  d->req_pid = pid;
  flag_set(w, TY__WDF_REQ);
  if (w->rt->ops.interrupt) w->rt->ops.interrupt(w, kind, seq, w->rt->ud);
}

static void drop_req(ty_worker *w) {
  if (!w->wd.req_kind) return;
  w->wd.req_kind = 0;
  flag_clear(w, TY__WDF_REQ);
  if (w->rt->ops.interrupt) w->rt->ops.interrupt(w, 0, 0, w->rt->ud);
}

int ty_preempt(ty_worker *w, bool take, ty_pid *pid) {
  ty__wd *d = &w->wd;
  pthread_mutex_lock(&d->mu);
  uint64_t cur = ty_worker_seq(w);
  int kind = 0;
  if (d->state != TY__WD_OK) {
    kind = TY_PREEMPT_STUCK; /* until the code is out: the owner cleans up */
  } else if (d->req_kind && d->req_seq == cur && (cur & 1)) {
    kind = d->req_kind;
    if (pid) *pid = d->req_pid;
    if (take) drop_req(w);
  } else {
    drop_req(w); /* meant for a resume that ended */
  }
  pthread_mutex_unlock(&d->mu);
  return kind;
}

static ty_worker *worker_in(ty_runtime *rt) {
  ty_worker *w = ty_worker_current();
  return w && w->rt == rt ? w : NULL;
}

/* Is the resume w runs now (*s, odd) one whose kills answer to pid (its
 * actor is pid, or a fork of pid)? The pids and s are read as of one
 * resume. A few tries: a worker that changes resumes each time we look
 * runs nothing long enough to need an interrupt. */
static bool runs_for(ty_worker *w, ty_pid pid, uint64_t *s) {
  for (int i = 0; i < 16; i++) {
    /* acquire: as the watchdog's sampling; the pids of resume s (stored
     * before s) are visible after it. */
    *s = atomic_load_explicit(&w->wd.seq, memory_order_acquire);
    if (!(*s & 1)) return false;
    /* acquire (both): a pid of a later resume brings the even seq that
     * ended s with it (its store is a release after that one), so the
     * reload below sees s has changed. */
    ty_pid a = atomic_load_explicit(&w->wd.running, memory_order_acquire);
    ty_pid as = atomic_load_explicit(&w->wd.running_as, memory_order_acquire);
    /* relaxed: ordered after the acquire loads above. */
    if (atomic_load_explicit(&w->wd.seq, memory_order_relaxed) == *s)
      return a == pid || as == pid;
  }
  return false;
}

/* A kill interrupts the target's worker only while the target itself (or
 * a fork of it) runs there: the interrupt changes the hook of the worker's
 * Lua state from this thread, which races with that worker's JIT
 * (docs/architecture.md, "Runaway actors"). A target that is not running is
 * ended by the kill signal before it runs again. */
void ty_interrupt_pid(ty_runtime *rt, ty_pid pid) {
  ty__pident *e;
  uint64_t word = ty__pidtab_lookup(&rt->pids, pid, &e);
  if (!word || ty__w_state(word) != TY__S_LIVE || !rt->ops.interrupt) return;
  ty_worker *me = worker_in(rt), *w = &rt->workers[ty__w_home(word)];
  if (me == w) return;         /* it is not running: we are */
  if (me) ty__publish_all(me); /* the kill signal on its way first */
  pthread_mutex_lock(&w->wd.mu);
  uint64_t s;
  if (runs_for(w, pid, &s) && w->wd.state == TY__WD_OK)
    post(w, TY_PREEMPT_KILL, s, pid);
  pthread_mutex_unlock(&w->wd.mu);
}

void ty__wd_stop_requests(ty_runtime *rt) {
  for (unsigned i = 0; i < rt->n; i++) {
    ty_worker *w = &rt->workers[i];
    pthread_mutex_lock(&w->wd.mu);
    uint64_t s = atomic_load_explicit(&w->wd.seq, memory_order_acquire);
    if ((s & 1) && w->wd.state == TY__WD_OK) post(w, TY_PREEMPT_STOP, s, 0);
    pthread_mutex_unlock(&w->wd.mu);
  }
}

/* ---- moving work off a stuck worker (under mu, state STUCK) ------------- */

void ty__wd_cancel_request(ty_runtime *rt, ty_actor *a) {
  ty__pident *e = ty__pidtab_get(&rt->pids, ty__pid_slot(a->pid));
  uint64_t old = atomic_load_explicit(&e->word, memory_order_relaxed);
  for (;;) {
    if (ty__w_state(old) != TY__S_PENDING ||
        ty__w_gen(old) != ty__pid_gen(a->pid))
      break; /* cancelled already */
    if (ty__w_locked(old)) {
      ty__cpu_relax();
      old = atomic_load_explicit(&e->word, memory_order_relaxed);
      continue;
    }
    uint32_t gen = (ty__pid_gen(a->pid) + 1) & ((1u << TY_PID_GEN_BITS) - 1);
    /* acq_rel: acquire the pending list of the last sender that held the
     * lock; release the FREE state (senders then fail at once). */
    if (atomic_compare_exchange_weak_explicit(
            &e->word, &old, ty__w_make(gen ? gen : 1, TY__S_FREE, 0),
            memory_order_acq_rel, memory_order_relaxed))
      break;
  }
  /* relaxed: ordered by the CAS; no sender appends to a FREE entry. */
  ty_msg *m = atomic_exchange_explicit(&e->pending, NULL, memory_order_relaxed);
  while (m) {
    ty_msg *next = (ty_msg *)m->node.next;
    if (rt->ops.undeliverable) rt->ops.undeliverable(m, NULL, rt->ud);
    ty_msg_free(m);
    m = next;
  }
  rt->ops.destroy(a, NULL, rt->ud);
  ty__actor_free(a);
}

static void route_node(ty_worker *w, ty__node *n, bool *moved) {
  ty_runtime *rt = w->rt;
  n->next = NULL;
  if (((ty_actor *)n)->type != TY__T_ACTOR) {
    ty_msg *m = (ty_msg *)n;
    if (rt->ops.undeliverable) rt->ops.undeliverable(m, w, rt->ud);
    ty_msg_free(m);
  } else if (((ty_actor *)n)->pinned) {
    ty__wd_cancel_request(rt, (ty_actor *)n);
  } else {
    ty__inject_push(&rt->inject, n); /* any other worker starts it */
    *moved = true;
  }
}

/* The watchdog is the consumer of the worker's incoming rings and inbox
 * while it is stuck (its own thread is held in its resume, and its code
 * never drains them); its spawn queue is stolen as any thief would. */
static void move_work(ty_worker *w) {
  ty_runtime *rt = w->rt;
  bool moved = false;
  ty__spawnq tmp;
  ty__spawnq_init(&tmp, rt->cfg.spawnq_cap);
  ty__node *n;
  while ((n = ty__spawnq_steal_into(&w->spawnq, &tmp))) {
    route_node(w, n, &moved);
    while ((n = ty__spawnq_pop(&tmp))) route_node(w, n, &moved);
  }
  ty__node *buf[64];
  for (unsigned from = 0; from < rt->mesh.n; from++) { /* the port's too */
    if (from == w->id) continue;
    size_t got;
    while ((got = ty__mesh_drain(&rt->mesh, w->id, from, buf, 64)))
      for (size_t k = 0; k < got; k++) route_node(w, buf[k], &moved);
  }
  ty__inject_pop_n(&w->inbox, SIZE_MAX, &n);
  while (n) {
    ty__node *next = n->next;
    route_node(w, n, &moved);
    n = next;
  }
  if (moved) ty__notify_parked(rt);
}

/* ---- declaring a worker stuck ------------------------------------------ */

static void add_dead(ty__wd *d, ty_actor *a) {
  if (d->ndead == d->capdead)
    ty__grow(&d->dead, &d->capdead, d->ndead + 1, sizeof *d->dead, 64);
  d->dead[d->ndead++] = a;
}

/* Every started actor of w dies now: its pid turns FREE (a new generation),
 * so sends to it fail at once; w destroys it if it comes back. */
static void kill_pids(ty_worker *w) {
  ty_runtime *rt = w->rt;
  /* relaxed: a slot beyond a stale top was spawned after the claim and
   * cannot have started on w. */
  uint32_t top = atomic_load_explicit(&rt->pids.next, memory_order_relaxed);
  if (top > TY_PID_MAX_SLOTS) top = TY_PID_MAX_SLOTS;
  for (uint32_t s = 0; s < top; s++) {
    ty__pident *e = ty__pidtab_get(&rt->pids, s);
    if (!e) continue;
    /* acquire: pairs with the owner's CAS to LIVE, which published actor. */
    uint64_t word = atomic_load_explicit(&e->word, memory_order_acquire);
    if (ty__w_state(word) != TY__S_LIVE || ty__w_home(word) != w->id) continue;
    ty_actor *a = atomic_load_explicit(&e->actor, memory_order_relaxed);
    uint32_t gen = (ty__w_gen(word) + 1) & ((1u << TY_PID_GEN_BITS) - 1);
    /* release: as free_slot (worker.c). Only w writes a LIVE entry of its
     * own, and w is held in its resume. */
    atomic_store_explicit(&e->word, ty__w_make(gen ? gen : 1, TY__S_FREE, 0),
                          memory_order_release);
    add_dead(&w->wd, a);
  }
}

static void declare(ty_worker *w, uint64_t seq, uint64_t now, bool blocked) {
  ty_runtime *rt = w->rt;
  ty__wd *d = &w->wd;
  bool declared = false;
  pthread_mutex_lock(&d->mu);
  if (d->state != TY__WD_OK) goto out;
  d->blocked = blocked;
  flag_set(w, TY__WDF_CLAIM);
  ty__heavy_fence(); /* the Dekker pair: see the top of this file */
  /* acquire: what the owner did before this resume is visible. */
  if (atomic_load_explicit(&d->seq, memory_order_acquire) != seq) {
    flag_clear(w, TY__WDF_CLAIM); /* it left the resume in time */
    goto out;
  }
  d->state = TY__WD_STUCK;
  d->stuck_since_ns = now;
  /* relaxed: a placement hint; correctness comes from the dead pids. */
  atomic_store_explicit(&d->route, 1, memory_order_relaxed);
  flag_set(w, TY__WDF_STUCK);
  post(w, TY_PREEMPT_STUCK, seq, 0);
  ty_actor *running = w->current; /* set before seq: see run_actor */
  size_t first = d->ndead;
  kill_pids(w);
  if (rt->ops.stuck)
    rt->ops.stuck(w, running, d->dead + first, d->ndead - first, rt->ud);
  move_work(w);
  declared = true;
out:
  pthread_mutex_unlock(&d->mu);
  if (!declared) return;
  /* release: other workers that see the new epoch see the dead pids. */
  atomic_fetch_add_explicit(&rt->stuck_epoch, 1, memory_order_release);
  atomic_thread_fence(memory_order_seq_cst); /* the store, then park loads */
  for (unsigned i = 0; i < rt->n; i++)
    if (i != w->id) ty__worker_unpark(&rt->workers[i]);
}

/* CPU time of w's thread, or the wall clock where it cannot be read. */
static uint64_t cpu_ns(ty_worker *w, uint64_t now) {
  clockid_t id;
  struct timespec ts;
  if (pthread_getcpuclockid(w->thread, &id) || clock_gettime(id, &ts))
    return now;
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t ty_worker_cpu_ns(ty_runtime *rt, unsigned i) {
  return cpu_ns(&rt->workers[i], 0);
}

/* How long the resume has run, as the slice counts it before asking it to
 * stop: the worker thread's CPU time (so that an overloaded machine does
 * not turn a busy actor into a runaway: a second of work that the machine
 * stretches over ten is still a second of work), but at least a sixteenth
 * of the wall time (so that one starved of CPU is still asked, within
 * sixteen slices). A quarter was too much: at a load of 22 on two cores a
 * thread gets a twelfth of a CPU, and two actors that had done a fraction
 * of a second of work in their first resume were ended as runaways. */
static uint64_t ran_for(ty_worker *w, uint64_t now) {
  uint64_t cpu = cpu_ns(w, now) - w->wd.seen_cpu, wall = now - w->wd.seen_ns;
  return cpu > wall / 16 ? cpu : wall / 16;
}

/* Is w's thread asleep in the kernel (state S or D in /proc: a read or a
 * write that waits, a poll, a lock)? False when it cannot be told (no
 * /proc, no fd left): the CPU-time rules below still hold then. */
static bool sleeping(ty_worker *w) {
  /* relaxed: see ty__wd_thread_begin. */
  int tid = atomic_load_explicit(&w->wd.tid, memory_order_relaxed);
  if (tid <= 0) return false;
  char path[64], buf[256];
  snprintf(path, sizeof path, "/proc/self/task/%d/stat", tid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return false;
  buf[n] = 0;
  const char *p = strrchr(buf, ')'); /* the name may hold anything */
  return p && p[1] == ' ' && (p[2] == 'S' || p[2] == 'D');
}

/* Slices of wall time a resume may spend blocked in a C call (asleep in
 * the kernel, using almost no CPU) before its worker is declared stuck:
 * such a thread is not starved (that one is runnable) and no interrupt
 * reaches it until the call returns, which may be never (io.read on a
 * terminal, a write to a pipe nobody reads). Its actors' callers get
 * "dead" instead of a timeout, and a stop does not wait for it. */
#define TY__WD_BLOCKED_SLICES 3

/* Is the resume w runs blocked in a C call? Its thread was found asleep at
 * every look from its first slice on (a thread the machine starves is
 * runnable at most looks, and may be caught asleep at one: a lock, a page
 * fault), at least 8 looks, three slices have passed and it had less than
 * half a slice of CPU. */
static bool blocked(ty_worker *w, uint64_t now, uint64_t slice, uint64_t tick) {
  ty__wd *d = &w->wd;
  uint64_t wall = now - d->seen_ns;
  if (d->woke || wall + tick < slice) return false;
  if (!sleeping(w)) {
    d->woke = true;
    return false;
  }
  d->naps++;
  return wall + tick >= TY__WD_BLOCKED_SLICES * slice && d->naps >= 8 &&
         cpu_ns(w, now) - d->seen_cpu < slice / 2;
}

/* One look at one worker. */
static void check(ty_worker *w, uint64_t now, uint64_t slice, uint64_t tick) {
  ty__wd *d = &w->wd;
  /* relaxed: set by this thread. */
  if (atomic_load_explicit(&d->route, memory_order_relaxed)) {
    pthread_mutex_lock(&d->mu);
    if (d->state == TY__WD_STUCK) move_work(w);
    pthread_mutex_unlock(&d->mu);
    return;
  }
  /* acquire: pairs with the owner's release stores of seq (w->current and
   * what it did before the resume are then visible, see declare). */
  uint64_t s = atomic_load_explicit(&d->seq, memory_order_acquire);
  if (!(s & 1) || s != d->seen_seq) {
    d->seen_seq = s;
    d->seen_ns = now;
    d->naps = 0;
    d->woke = false;
    if (s & 1) d->seen_cpu = cpu_ns(w, now);
    d->asked = false;
    return;
  }
  if (blocked(w, now, slice, tick)) {
    declare(w, s, now, true);
    return;
  }
  uint64_t ran = ran_for(w, now); /* at most one tick short of the truth */
  if (ran >= slice && !d->asked) {
    d->asked = true;
    d->asked_ns = now;
    d->asked_cpu = cpu_ns(w, now);
    pthread_mutex_lock(&d->mu);
    if (d->state == TY__WD_OK) {
      post(w, TY_PREEMPT_SLICE, s, 0);
      /* relaxed: a counter; only this thread writes it. */
      atomic_fetch_add_explicit(&w->stats.preempts, 1, memory_order_relaxed);
    }
    pthread_mutex_unlock(&d->mu);
  }
  /* Stuck: two slices of wall time, and since the request the thread had
   * half a slice of CPU to act on it. A thread the machine starves of CPU
   * cannot answer, and is not stuck for that: it gets four slices of wall
   * time since the request before it is declared stuck anyway. */
  if (!d->asked) return;
  uint64_t wall = now - d->seen_ns, since = now - d->asked_ns;
  bool tried = cpu_ns(w, now) - d->asked_cpu >= slice / 2;
  if ((tried && wall + 2 * tick >= 2 * slice && since >= slice / 4) ||
      since + tick >= 4 * slice)
    declare(w, s, now, false);
}

static void *wd_main(void *arg) {
  ty_runtime *rt = arg;
  uint64_t slice = rt->cfg.max_slice_ns;
  uint64_t tick = slice / 20;
  if (tick < 1000000) tick = 1000000;
  if (tick > 50000000) tick = 50000000;
  pthread_mutex_lock(&rt->wd_mu);
  while (!rt->wd_quit) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t at = (uint64_t)ts.tv_nsec + tick;
    ts.tv_sec += (time_t)(at / 1000000000);
    ts.tv_nsec = (long)(at % 1000000000);
    pthread_cond_timedwait(&rt->wd_cv, &rt->wd_mu, &ts);
    if (rt->wd_quit) break;
    pthread_mutex_unlock(&rt->wd_mu);
    uint64_t now = ty__now_ns();
    for (unsigned i = 0; i < rt->n; i++)
      check(&rt->workers[i], now, slice, tick);
    pthread_mutex_lock(&rt->wd_mu);
  }
  pthread_mutex_unlock(&rt->wd_mu);
  return NULL;
}

void ty__wd_start(ty_runtime *rt) {
  if (!rt->cfg.max_slice_ns) return;
  ty__heavy_fence_init();
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&rt->wd_cv, &ca);
  pthread_condattr_destroy(&ca);
  pthread_mutex_init(&rt->wd_mu, NULL);
  rt->wd_quit = false;
  if (pthread_create(&rt->wd_thread, NULL, wd_main, rt))
    ty__die("cannot create the watchdog thread");
  rt->wd_running = true;
}

void ty__wd_stop(ty_runtime *rt) {
  if (!rt->wd_running) return;
  pthread_mutex_lock(&rt->wd_mu);
  rt->wd_quit = true;
  pthread_cond_signal(&rt->wd_cv);
  pthread_mutex_unlock(&rt->wd_mu);
  pthread_join(rt->wd_thread, NULL);
  pthread_cond_destroy(&rt->wd_cv);
  pthread_mutex_destroy(&rt->wd_mu);
  rt->wd_running = false;
}

/* ---- the owner's side -------------------------------------------------- */

/* Takes what is queued on w for running (all of it belongs to dead actors
 * or to pinned requests that can no longer run here). */
static void clear_queues(ty_worker *w, ty__list *unstarted) {
  ty_runtime *rt = w->rt;
  if (w->lifo) ty__ready_push(w, w->lifo);
  w->lifo = NULL;
  ty__node *n;
  while ((n = ty__list_pop(&w->ready))) {
    ty_actor *a = (ty_actor *)n;
    ty__pident *e = ty__pidtab_get(&rt->pids, ty__pid_slot(a->pid));
    /* relaxed: only this thread and the watchdog (under mu) cancel. */
    uint64_t word = atomic_load_explicit(&e->word, memory_order_relaxed);
    if (!a->started && ty__w_state(word) == TY__S_PENDING)
      ty__list_push(unstarted, n);
  }
  w->ready_len = 0;
  for (unsigned i = 0; i < rt->n; i++)
    w->peers[i].blocked.head = w->peers[i].blocked.tail = NULL;
}

/* Back from being stuck: destroy the actors declared dead (in two passes:
 * one's destruction may wake another, which must still exist), cancel the
 * pinned requests that waited here, and take work again. Under mu. */
static void revive(ty_worker *w) {
  ty_runtime *rt = w->rt;
  ty__wd *d = &w->wd;
  ty__list unstarted = {0};
  clear_queues(w, &unstarted);
  for (size_t i = 0; i < d->ndead; i++) {
    ty_actor *a = d->dead[i];
    ty__wait_timer_cancel(w, a);
    ty__mtimer_drop_owned(w, a); /* its message timers end with it */
    a->state = TY__A_RUNNING;    /* wakes are no-ops from now on */
  }
  for (size_t i = 0; i < d->ndead; i++) {
    ty_actor *a = d->dead[i];
    ty_msg *m;
    while ((m = ty_mbox_pop(a))) ty__undeliverable(w, m);
    rt->ops.destroy(a, w, rt->ud);
  }
  for (size_t i = 0; i < d->ndead; i++) {
    ty__free_slot(w, d->dead[i]); /* FREE already: now reusable here */
    ty__actor_free(d->dead[i]);
  }
  w->live -= d->ndead < w->live ? d->ndead : w->live;
  TY__STAT_ADD(w, actors, 0 - (uint64_t)d->ndead);
  d->ndead = 0;
  ty__node *n;
  while ((n = ty__list_pop(&unstarted)))
    ty__wd_cancel_request(rt, (ty_actor *)n);
  d->state = TY__WD_OK;
  drop_req(w);
  flag_clear(w, TY__WDF_CLAIM | TY__WDF_STUCK);
  /* relaxed: a placement hint. */
  atomic_store_explicit(&d->route, 0, memory_order_relaxed);
  ty__update_load(w);
}

int ty__wd_after_resume(ty_worker *w, ty_actor *a, int r) {
  (void)a;
  ty__wd *d = &w->wd;
  pthread_mutex_lock(&d->mu);
  if (d->state == TY__WD_ABANDONED) {
    pthread_mutex_unlock(&d->mu);
    for (;;) pause(); /* the runtime is gone: keep out of its memory */
  }
  if (d->state == TY__WD_STUCK) {
    revive(w);
    pthread_mutex_unlock(&d->mu);
    return TY__GONE;
  }
  if (d->req_kind && d->req_seq != ty_worker_seq(w)) drop_req(w);
  pthread_mutex_unlock(&d->mu);
  return r;
}

void ty__wd_abandon(ty_worker *w) {
  pthread_mutex_lock(&w->wd.mu);
  w->wd.state = TY__WD_ABANDONED;
  flag_set(w, TY__WDF_STUCK);
  uint64_t s = atomic_load_explicit(&w->wd.seq, memory_order_acquire);
  post(w, TY_PREEMPT_STUCK, s, 0);
  pthread_mutex_unlock(&w->wd.mu);
  pthread_detach(w->thread);
}

/* ---- walking a worker's actors ------------------------------------------ */

void ty_worker_each_actor(ty_worker *w, void (*fn)(ty_actor *a, void *ud),
                          void *ud) {
  ty_runtime *rt = w->rt;
  uint32_t top = atomic_load_explicit(&rt->pids.next, memory_order_relaxed);
  if (top > TY_PID_MAX_SLOTS) top = TY_PID_MAX_SLOTS;
  for (uint32_t s = 0; s < top; s++) {
    ty__pident *e = ty__pidtab_get(&rt->pids, s);
    if (!e) continue;
    /* acquire: as destroy_started (worker.c); we are the home worker. */
    uint64_t word = atomic_load_explicit(&e->word, memory_order_acquire);
    if (ty__w_state(word) != TY__S_LIVE || ty__w_home(word) != w->id) continue;
    fn(atomic_load_explicit(&e->actor, memory_order_relaxed), ud);
  }
}
