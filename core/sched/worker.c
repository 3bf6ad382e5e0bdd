/*
 * worker.c - the worker thread and its loop.
 *
 * Each turn: drain the incoming mesh rings, then take the next actor from the
 * LIFO slot (at most max_lifo_polls in a row), the ready queue, the spawn
 * queue, the inject queue (first, every gq_interval ticks), or steal; with
 * nothing to do, spin a little and park (park.c). Every `budget` polls the
 * worker also fires its timers, drains its inbox and polls I/O even when work
 * remains. The worker threads are started and stopped here too.
 *
 * Everything here runs on the worker's own thread except ty_runtime_start and
 * ty_runtime_stop, and ty_worker_leave (any thread). A worker can also be
 * served by the thread that started the runtime (ty_worker_run_here, Tokio's
 * block_on): that thread then is the worker's own until the stop ends it.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <string.h>
#include <time.h>

#include "base/alloc.h"
#include "base/fence.h"
#include "io/io.h"
#include "worker.h"

#define INJECT_BATCH 128

unsigned ty_worker_id(const ty_worker *w) { return w->id; }
ty_runtime *ty_worker_runtime(const ty_worker *w) { return w->rt; }
void ty_worker_set_data(ty_worker *w, void *data) { w->data = data; }
struct ty__io *ty_worker_io(const ty_worker *w) {
  return w->io;
}
void *ty_worker_data(const ty_worker *w) { return w->data; }

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
    TY_CHAOS(); /* a sender takes the lock bit meanwhile */
    /* acq_rel: acquire sees the pending list of every sender that held the
     * lock before; release publishes home and actor to later senders. */
    if (atomic_compare_exchange_weak_explicit(&e->word, &old, live,
                                              memory_order_acq_rel,
                                              memory_order_relaxed))
      break;
  }
  TY_CHAOS(); /* senders see LIVE and go to the mailbox meanwhile */
  /* relaxed: ordered by the CAS above; no sender touches it after LIVE. */
  ty_msg *m = atomic_exchange_explicit(&e->pending, NULL, memory_order_relaxed);
  atomic_store_explicit(&e->npending, 0, memory_order_relaxed);
  atomic_store_explicit(&e->kpending, 0, memory_order_relaxed);
  ty_msg *rev = NULL;
  while (m) { /* pending is newest first */
    ty_msg *next = (ty_msg *)m->node.next;
    m->node.next = (ty__node *)rev;
    rev = m;
    m = next;
  }
  while (rev) {
    ty_msg *next = (ty_msg *)rev->node.next;
    ty__mbox_append(w, a, rev);
    rev = next;
  }
  w->live++;
  TY__STAT_ADD(w, actors, 1);
}

/* Ends a started actor: its pid dies first, so later sends fail at once; then
 * what is left in its mailbox is reported undeliverable. */
static void finish_actor(ty_worker *w, ty_actor *a) {
  ty_runtime *rt = w->rt;
  ty__wait_timer_cancel(w, a);
  ty__free_slot(w, a);
  ty__mtimer_drop_owned(w, a); /* its timers end with it */
  ty_msg *m;
  if ((m = ty_actor_take_awaited(a))) ty__undeliverable(w, m);
  while ((m = ty_mbox_pop(a))) ty__undeliverable(w, m);
  rt->ops.destroy(a, w, rt->ud);
  ty__actor_free(a);
  w->live--;
  TY__STAT_ADD(w, actors, (uint64_t)-1);
}

/* The tail of a run: the actor goes back to a queue, waits or ends. */
static void after_run(ty_worker *w, ty_actor *a, int r) {
  w->current = NULL;
  a->started = true;
  TY__STAT_ADD(w, polls, 1);
  bool blocked = a->flags & TY__AF_SEND_BLOCKED;
  a->flags &= ~(TY__AF_SEND_BLOCKED | TY__AF_SEND_YIELD);
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
      ty__ready_push(w, a);
    }
  } else if (r == TY_YIELD) {
    ty__ready_push(w, a);
  } else if (ty__unlikely(a->flags & TY__AF_WAIT_NOMEM)) {
    a->flags = (uint8_t)((a->flags & ~TY__AF_WAIT_NOMEM) | TY__AF_TIMED_OUT);
    ty__ready_push(w, a);
  } else {
    a->state = TY__A_WAITING;
  }
  /* Most runs stage nothing for another worker: no call then. */
  if (w->dirty_mask || w->port_dirty) ty__publish_all(w);
}

/* What follows a resume that returned r, or one that the binding's
 * protection interrupted (ty_worker_resume_failed). */
static void after_resume(ty_worker *w, ty_actor *a, int r) {
  uint64_t seq = 2 * w->resumes + 1; /* the resume's, stored by run_actor */
  /* release: as in run_actor. Then the hot half of the watchdog's Dekker
   * pair: "left the resume" is stored before the flag is loaded, with only
   * a compiler barrier between (the watchdog runs ty__heavy_fence). */
  atomic_store_explicit(&w->wd.seq, seq + 1, memory_order_release);
  w->resumes++;
  atomic_signal_fence(memory_order_seq_cst);
  /* relaxed: see above; a set flag is acted on under the watchdog lock. */
  if (ty__unlikely(atomic_load_explicit(&w->wd.flag, memory_order_relaxed))) {
    r = ty__wd_after_resume(w, a, r);
    if (r == TY__GONE) { /* a and every other actor here are destroyed */
      w->current = NULL;
      ty__publish_all(w);
      return;
    }
  }
  after_run(w, a, r);
}

static void run_actor(ty_worker *w, ty_actor *a) {
  ty_runtime *rt = w->rt;
  if (!a->started) start_actor(w, a);
  a->state = TY__A_RUNNING;
  w->current = a;
  w->place_left = 0;  /* placement blocks never span two runs */
  ty__update_load(w); /* counts the running actor: a long run looks busy */
  uint64_t seq = 2 * w->resumes + 1;
  ty_pid as = a->pid;
  if (ty__unlikely(a->pinned) && rt->ops.kill_as)
    as = rt->ops.kill_as(a, rt->ud);
  /* release (both): each keeps the even seq that ended the last resume
   * before it, so that a killer who reads these pids and then seq again
   * sees the change (ty_interrupt_pid); published by the release store of
   * seq below. */
  atomic_store_explicit(&w->wd.running_as, as, memory_order_release);
  atomic_store_explicit(&w->wd.running, a->pid, memory_order_release);
  /* release: the watchdog's acquire load of this value sees w->current and
   * all this worker did before the resume (watchdog.c). */
  atomic_store_explicit(&w->wd.seq, seq, memory_order_release);
  after_resume(w, a, rt->ops.resume(a, rt->ud));
}

void ty_worker_resume_failed(ty_worker *w, int r) {
  if (w->current) after_resume(w, w->current, r);
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
    ty__ready_push(w, a); /* fairness: the slot had its turns */
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
  if ((a = ty__ready_pop(w))) return a;
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

/* ---- the loop ---------------------------------------------------------- */

static void worker_loop(ty_worker *w, void *arg) {
  (void)arg;
  ty_runtime *rt = w->rt;
  uint32_t budget = rt->cfg.budget;
  /* A stop (or a leave) is also noticed after the park fence; a late look
   * here costs at most one more actor run. */
  while (!ty__worker_exiting(w)) {
    if (w->batch_polls >= budget) ty__maintenance(w);
    ty__drain_mesh(w);
    ty__drain_inbox(w);
    if (w->overflowing) ty__flush_overflow(w);
    ty_actor *a = next_local(w);
    if (!a) a = steal(w);
    if (!a) {
      if (!ty__spin_for_work(w)) ty__park(w);
      continue;
    }
    ty__end_search(w);
    run_actor(w, a);
    w->tick++;
    w->batch_polls++;
    if ((w->tick & 15) == 0) ty__update_load(w);
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

/* The first half of a worker's life, on its thread: thread-locals, timers,
 * its I/O backend, the binding's worker_init. */
static void worker_begin(ty_worker *w) {
  ty_runtime *rt = w->rt;
  ty__tls_worker = w;
  ty__wd_thread_begin(w);
  ty__alloc_thread_init();
  ty__wheel_init(&w->wheel, ty__tick_down(ty_runtime_now_ns(rt)));
  w->batch_start_ns = ty_runtime_now_ns(rt);
  if (rt->cfg.pin && !w->here) pin_to_cpu(w); /* a borrowed thread stays */
  if (ty__io_new(w->wake_fd, rt->cfg.io, &w->io))
    ty__die("cannot create the worker's I/O backend");
  if (rt->ops.worker_init) rt->ops.worker_init(w, rt->ud);
}

static void worker_run(ty_worker *w) {
  ty_runtime *rt = w->rt;
  if (rt->ops.run) rt->ops.run(w, worker_loop, rt->ud);
  else worker_loop(w, NULL);
}

/* The last half, once the loop returned for the stop: every actor of the
 * worker is destroyed, then the binding's worker_exit. */
static void worker_end(ty_worker *w) {
  ty_runtime *rt = w->rt;
  ty__tls_worker = w;
  if (w->lifo) ty__ready_push(w, w->lifo);
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
  for (unsigned i = 0; i < rt->mesh.n; i++)
    w->peers[i].blocked.head = w->peers[i].blocked.tail = NULL;
  destroy_started(w);
  ty__mtimer_free_table(w); /* every owner is gone, with its timers */
  if (rt->ops.worker_exit) rt->ops.worker_exit(w, rt->ud);
  ty__io_free(w->io);
  w->io = NULL;
  ty__alloc_thread_exit();
  ty__tls_worker = NULL;
}

static void *worker_main(void *arg) {
  ty_worker *w = arg;
  worker_begin(w);
  worker_run(w);
  worker_end(w);
  return NULL;
}

/* ---- starting and stopping the threads --------------------------------- */

static int start(ty_runtime *rt, int here) {
  if (rt->started) return -EALREADY;
  if (here >= (int)rt->n || ty__tls_worker) return -EINVAL;
  rt->started = true;
  for (unsigned i = 0; i < rt->n; i++) {
    ty_worker *w = &rt->workers[i];
    if ((int)i == here) {
      /* Its CPU clock is the watchdog's measure of this thread (stuck). */
      w->here = true;
      w->thread = pthread_self();
      continue;
    }
    if (pthread_create(&w->thread, NULL, worker_main, w))
      ty__die("cannot create a worker thread");
  }
  ty__wd_start(rt);
  return 0;
}

int ty_runtime_start(ty_runtime *rt) { return start(rt, -1); }

int ty_runtime_start_here(ty_runtime *rt, unsigned id) {
  return start(rt, (int)id);
}

int ty_worker_run_here(ty_runtime *rt, unsigned id) {
  if (id >= rt->n) return -EINVAL;
  ty_worker *w = &rt->workers[id];
  if (!rt->started || !w->here || w->here_begun ||
      !pthread_equal(w->thread, pthread_self()))
    return -EINVAL;
  w->here_begun = true;
  worker_begin(w);
  worker_run(w);
  /* The thread is the caller's again until the stop ends the worker
   * (worker_end, in ty_runtime_stop). */
  ty__tls_worker = NULL;
  return 0;
}

void ty_worker_leave(ty_runtime *rt, unsigned id) {
  ty_worker *w = &rt->workers[id];
  /* seq_cst, then the fence: as the stop's store (the worker stores PARKED,
   * fences and reads `leave` again before it sleeps). */
  atomic_store(&w->leave, 1);
  atomic_thread_fence(memory_order_seq_cst);
  ty__worker_unpark(w);
}

/* Waits for every worker until the stop's deadline; a worker declared
 * stuck is not waited for. Returns how many were abandoned. */
static int join_all(ty_runtime *rt) {
  uint64_t deadline = ty__now_ns() + rt->cfg.stop_timeout_ns;
  bool *done = ty__xcalloc(rt->n, sizeof *done);
  unsigned left = rt->n;
  int abandoned = 0;
  for (unsigned i = 0; i < rt->n; i++) { /* not a thread of ours */
    if (rt->workers[i].here) {
      done[i] = true;
      left--;
    }
  }
  while (left) {
    for (unsigned i = 0; i < rt->n; i++) {
      if (done[i]) continue;
      ty_worker *w = &rt->workers[i];
      if (pthread_tryjoin_np(w->thread, NULL) == 0) {
        done[i] = true;
        left--;
      } else if (ty__wd_is_stuck(w) || ty__now_ns() >= deadline) {
        ty__wd_abandon(w);
        done[i] = true;
        left--;
        abandoned++;
      }
    }
    if (left) {
      struct timespec ts = {0, 2 * 1000000};
      nanosleep(&ts, NULL);
    }
  }
  free(done);
  return abandoned;
}

int ty_runtime_stop(ty_runtime *rt) {
  if (!rt->started) return 0;
  /* seq_cst: a worker stores PARKED, fences and then reads `stopping`; we
   * store it and then read their park state. */
  atomic_store(&rt->stopping, 1);
  /* seq_cst, as `stopping` and for the same pairing: the loops read only
   * their worker's `leave` (ty__worker_exiting). */
  for (unsigned i = 0; i < rt->n; i++) atomic_store(&rt->workers[i].leave, 1);
  atomic_thread_fence(memory_order_seq_cst);
  ty__wd_stop_requests(rt);
  for (unsigned i = 0; i < rt->n; i++) ty__worker_unpark(&rt->workers[i]);
  /* A worker served by this thread (ty_worker_run_here) ends here, while
   * the others end on theirs. */
  for (unsigned i = 0; i < rt->n; i++) {
    ty_worker *w = &rt->workers[i];
    if (w->here && w->here_begun) worker_end(w);
  }
  int abandoned = join_all(rt);
  ty__wd_stop(rt);
  rt->started = false;
  if (abandoned) {
    /* A thread still runs code of this runtime: keep all of it. */
    rt->abandoned = true;
    ty__pin_code();
    return abandoned;
  }
  ty__runtime_drain(rt);
  return 0;
}
