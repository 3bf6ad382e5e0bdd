/*
 * test_watchdog.c - the watchdog with C actors (docs/architecture.md,
 * "Runaway actors"): a resume over the slice gets a request; one that
 * ignores it gets its worker declared stuck (actors dead, placement
 * elsewhere) and revived when it returns; a stop abandons it within its
 * deadline; the pool leaves a never-returning job behind. Real threads.
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "pool/pool.h"
#include "sched/ty.h"
#include "test.h"

static _Atomic int g_kinds[2]; /* per worker: kind asked (0: none) */
static _Atomic long g_asks;    /* interrupt calls with a kind */
static _Atomic int g_release;  /* lets the stuck actor return */
static _Atomic int g_running;  /* the stuck actor started */
static _Atomic long g_done, g_destroyed, g_dead, g_peer;
static _Atomic int g_blocked; /* the last declaration was of a blocked one */

typedef int (*step_fn)(ty_actor *a);

static int w_resume(ty_actor *a, void *ud) {
  (void)ud;
  return ((step_fn)a->user)(a);
}
static void w_destroy(ty_actor *a, ty_worker *w, void *ud) {
  (void)a, (void)w, (void)ud;
  atomic_fetch_add(&g_destroyed, 1);
}
static void w_interrupt(ty_worker *w, int kind, uint64_t seq, void *ud) {
  (void)seq, (void)ud;
  if (kind) atomic_fetch_add(&g_asks, 1);
  atomic_store(&g_kinds[ty_worker_id(w) & 1], kind);
}
static void w_stuck(ty_worker *w, ty_actor *running, ty_actor **dead, size_t n,
                    void *ud) {
  (void)running, (void)dead, (void)ud;
  atomic_store(&g_blocked, ty_worker_blocked(w));
  atomic_fetch_add(&g_dead, (long)n);
}
static void w_peer(ty_worker *w, void *ud) {
  (void)w, (void)ud;
  atomic_fetch_add(&g_peer, 1);
}

static _Atomic ty_pid g_as; /* kills of the spinner answer to this pid */
static int step_spin(ty_actor *a);
/* A fork's kills are its actor's: here the spinner's are g_as's. */
static ty_pid w_kill_as(ty_actor *a, void *ud) {
  (void)ud;
  ty_pid as = atomic_load(&g_as);
  return a->user == (void *)step_spin && as ? as : a->pid;
}

static const ty_actor_ops ops = {.resume = w_resume,
                                 .destroy = w_destroy,
                                 .interrupt = w_interrupt,
                                 .kill_as = w_kill_as,
                                 .stuck = w_stuck,
                                 .peer_stuck = w_peer};

/* The request standing for the calling worker. */
static int kind_here(void) {
  return atomic_load_explicit(&g_kinds[ty_worker_id(ty_worker_current()) & 1],
                              memory_order_relaxed);
}

static void reset(void) {
  atomic_store(&g_kinds[0], 0);
  atomic_store(&g_kinds[1], 0);
  atomic_store(&g_asks, 0);
  atomic_store(&g_release, 0);
  atomic_store(&g_running, 0);
  atomic_store(&g_done, 0);
  atomic_store(&g_destroyed, 0);
  atomic_store(&g_dead, 0);
  atomic_store(&g_peer, 0);
  atomic_store(&g_blocked, 0);
  atomic_store(&g_as, 0);
}

static ty_runtime *start(unsigned workers, double slice, double stop) {
  ty_config c;
  ty_config_init(&c);
  c.workers = workers;
  c.max_slice_ns = (uint64_t)(slice * 1e9);
  c.stop_timeout_ns = (uint64_t)(stop * 1e9);
  ty_runtime *rt;
  if (ty_runtime_new(&c, &ops, NULL, &rt)) return NULL;
  ty_runtime_start(rt);
  return rt;
}

static bool wait_for(_Atomic long *v, long target, double seconds) {
  uint64_t end = ty__now_ns() + (uint64_t)(seconds * 1e9);
  while (atomic_load(v) < target)
    if (ty__now_ns() > end) return false;
    else usleep(200);
  return true;
}

/* Spins until asked to stop, as a hook would make Lua code do. */
static int step_coop(ty_actor *a) {
  (void)a;
  while (!kind_here()) ty__cpu_relax();
  atomic_fetch_add(&g_done, 1);
  return TY_DONE;
}

/* Ignores every request, like a compiled loop, until released. */
static int step_stuck(ty_actor *a) {
  (void)a;
  atomic_store(&g_running, 1);
  while (!atomic_load_explicit(&g_release, memory_order_relaxed))
    ty__cpu_relax();
  return TY_DONE;
}

static int step_finish(ty_actor *a) {
  (void)a;
  atomic_fetch_add(&g_done, 1);
  return TY_DONE;
}

static int step_wait(ty_actor *a) {
  ty_actor_wait(a, -1, 0);
  return TY_WAIT;
}

/* Many short resumes (yields) while the slice is tiny, and now and then
 * one that runs until it is asked to stop (then yields, as preempted code
 * would): requests for resumes that ended must be dropped, never applied
 * to the next one, and nobody is declared stuck. */
static int step_yields(ty_actor *a) {
  long *left = (long *)&a->wait_ref; /* a counter the core leaves alone */
  if (a->wait_ref == 0) *left = 200;
  if (--*left == 0) {
    atomic_fetch_add(&g_done, 1);
    return TY_DONE;
  }
  if (*left % 100 == 0) {
    /* Until asked: the watchdog counts CPU time, so on a loaded machine a
     * 0.1 s slice takes several times that in wall time (1 s: 10x). */
    uint64_t end = ty__now_ns() + 1000000000ull;
    while (!kind_here() && ty__now_ns() < end) ty__cpu_relax();
  }
  return TY_YIELD;
}

TEST_IMPL(wd_slice) {
  reset();
  ty_runtime *rt = start(2, 0.05, 5);
  CHECK(rt);
  ty_pid pid;
  CHECK_EQ(ty_spawn(rt, (void *)step_coop, &pid), 0);
  CHECK(wait_for(&g_done, 1, 5));
  CHECK(atomic_load(&g_asks) >= 1);
  ty_worker_stats s;
  ty_worker_stats_get(rt, 0, &s);
  ty_worker_stats t;
  ty_worker_stats_get(rt, 1, &t);
  CHECK(s.preempts + t.preempts >= 1);
  CHECK_EQ(ty_runtime_stop(rt), 0);
  ty_runtime_free(rt);
  return 0;
}

/* Sets g_running, then spins until asked to stop (as step_coop). */
static int step_spin(ty_actor *a) {
  (void)a;
  atomic_store(&g_running, 1);
  while (!kind_here()) ty__cpu_relax();
  atomic_fetch_add(&g_done, 1);
  return TY_DONE;
}

/* Spawns step_spin on worker 1 and waits until it runs: its pid, or 0. */
static ty_pid spin_started(ty_runtime *rt) {
  ty_pid pid;
  if (ty_spawn_at(rt, 1, (void *)step_spin, &pid)) return 0;
  uint64_t end = ty__now_ns() + 10000000000ull;
  while (!atomic_load(&g_running) && ty__now_ns() < end) usleep(200);
  return atomic_load(&g_running) ? pid : 0;
}

/* As step_wait, counting its first run in g_peer (unused in this test). */
static int step_wait_counted(ty_actor *a) {
  if (!a->wait_ref) atomic_fetch_add(&g_peer, 1);
  ty_actor_wait(a, -1, 1); /* sets wait_ref: counted once */
  return TY_WAIT;
}

/* Resumes as short as they come: yields until its count runs out. */
static int step_churn(ty_actor *a) {
  long *left = (long *)&a->wait_ref; /* a counter the core leaves alone */
  if (a->wait_ref == 0) *left = test_scaled(200000, 2000);
  if (--*left > 0) return TY_YIELD;
  atomic_fetch_add(&g_done, 1);
  return TY_DONE;
}

/* A kill interrupts the target's worker only while the target itself runs
 * there: the interrupt changes that worker's Lua hook from another thread,
 * which races with its JIT (watchdog.c, ty_interrupt_pid). The call is
 * synchronous, so the count is checked right after it. */
TEST_IMPL(wd_kill_interrupts_only_target) {
  reset();
  ty_runtime *rt = start(2, 60, 5); /* no slice request in this test */
  CHECK(rt);
  ty_pid waiter;
  CHECK_EQ(ty_spawn_at(rt, 1, (void *)step_wait, &waiter), 0);
  ty_pid spinner = spin_started(rt);
  CHECK(spinner);
  for (int i = 0; i < 100; i++) ty_interrupt_pid(rt, waiter);
  CHECK_EQ(atomic_load(&g_asks), 0); /* it waits: its worker is left alone */
  ty_interrupt_pid(rt, spinner);
  CHECK_EQ(atomic_load(&g_asks), 1);
  CHECK(wait_for(&g_done, 1, 10)); /* the request reached the spinner */
  CHECK_EQ(ty_runtime_stop(rt), 0);
  ty_runtime_free(rt);
  return 0;
}

/* A kill of the actor whose fork runs interrupts the fork (a kill of the
 * fork's own pid is the case above: kill_as answers the actor's own). */
TEST_IMPL(wd_kill_interrupts_fork) {
  reset();
  ty_runtime *rt = start(2, 60, 5); /* no slice request in this test */
  CHECK(rt);
  ty_pid parent, other;
  CHECK_EQ(ty_spawn_at(rt, 1, (void *)step_wait, &parent), 0);
  CHECK_EQ(ty_spawn_at(rt, 1, (void *)step_wait, &other), 0);
  atomic_store(&g_as, parent);
  CHECK(spin_started(rt));
  ty_interrupt_pid(rt, other);
  CHECK_EQ(atomic_load(&g_asks), 0); /* not the spinner's actor */
  ty_interrupt_pid(rt, parent);
  CHECK_EQ(atomic_load(&g_asks), 1);
  CHECK(wait_for(&g_done, 1, 10)); /* the request reached the spinner */
  CHECK_EQ(ty_runtime_stop(rt), 0);
  ty_runtime_free(rt);
  return 0;
}

/* Kills of a waiting actor while its worker changes resumes as fast as it
 * can (the seq and pids that ty_interrupt_pid reads as one resume change
 * under it): none is posted, and TSan (make tsan) sees the reads race
 * with nothing. */
TEST_IMPL(wd_kill_stress) {
  reset();
  ty_runtime *rt = start(2, 60, 5); /* no slice request in this test */
  CHECK(rt);
  ty_pid waiter, churn;
  CHECK_EQ(ty_spawn_at(rt, 1, (void *)step_wait_counted, &waiter), 0);
  CHECK(wait_for(&g_peer, 1, 10));
  /* One more actor of worker 1 has run: the waiter's resume is over. */
  CHECK_EQ(ty_spawn_at(rt, 1, (void *)step_finish, &churn), 0);
  CHECK(wait_for(&g_done, 1, 10));
  for (int i = 0; i < 4; i++)
    CHECK_EQ(ty_spawn_at(rt, 1, (void *)step_churn, &churn), 0);
  uint64_t end = ty__now_ns() + 60000000000ull;
  long kills = 0;
  while (atomic_load(&g_done) < 5 && ty__now_ns() < end) {
    ty_interrupt_pid(rt, waiter);
    kills++;
  }
  CHECK_EQ(atomic_load(&g_done), 5);
  CHECK(kills > 0);
  CHECK_EQ(atomic_load(&g_asks), 0);
  CHECK_EQ(ty_runtime_stop(rt), 0);
  ty_runtime_free(rt);
  return 0;
}

TEST_IMPL(wd_stale_requests) {
  reset();
  /* A slice long enough that a loaded machine still lets the actor see its
   * request within a quarter slice (else it would rightly be "stuck"). */
  ty_runtime *rt = start(2, 0.1, 5);
  CHECK(rt);
  long n = test_scaled(20, 6);
  for (long i = 0; i < n; i++) {
    ty_pid pid;
    CHECK_EQ(ty_spawn(rt, (void *)step_yields, &pid), 0);
  }
  CHECK(wait_for(&g_done, n, 120));
  CHECK(atomic_load(&g_asks) >= 1);
  CHECK_EQ(atomic_load(&g_dead), 0); /* nobody was declared stuck */
  CHECK_EQ(ty_runtime_stop(rt), 0);
  ty_runtime_free(rt);
  return 0;
}

TEST_IMPL(wd_stuck) {
  reset();
  ty_runtime *rt = start(2, 0.05, 5);
  CHECK(rt);
  ty_pid waiter, runner;
  CHECK_EQ(ty_spawn_at(rt, 1, (void *)step_wait, &waiter), 0);
  CHECK_EQ(ty_spawn_at(rt, 1, (void *)step_stuck, &runner), 0);
  uint64_t t0 = ty__now_ns();
  /* Declared after two slices of 50 ms (four when the machine starves the
   * thread of CPU) and a start: 5 s is room for a loaded machine, and a
   * worker never declared would hold the loop there. */
  while (!ty_worker_is_stuck(rt, 1)) {
    CHECK(ty__now_ns() - t0 < 5000000000ull);
    usleep(1000);
  }
  /* The watchdog marks the worker before it reports the dead (watchdog.c,
   * declare): the report may come a moment after the mark is seen. */
  CHECK(wait_for(&g_dead, 2, 2));
  CHECK_EQ(atomic_load(&g_dead), 2);
  CHECK(!ty_pid_alive(rt, waiter));
  CHECK(!ty_pid_alive(rt, runner));
  CHECK(wait_for(&g_peer, 1, 2));  /* worker 0 was told */
  CHECK(!atomic_load(&g_blocked)); /* it ran: a loop, not a C call */
  ty_pid p;
  CHECK_EQ(ty_spawn_at(rt, 1, (void *)step_finish, &p), -EHOSTDOWN);
  ty_msg *m = ty_msg_new(0);
  m->to = waiter;
  CHECK_EQ(ty_send(rt, m), -ESRCH);
  ty_msg_free(m);
  for (int i = 0; i < 50; i++)
    CHECK_EQ(ty_spawn(rt, (void *)step_finish, &p), 0);
  CHECK(wait_for(&g_done, 50, 5)); /* on worker 0 */
  /* The stuck code returns: the worker destroys its dead and comes back. */
  atomic_store(&g_release, 1);
  t0 = ty__now_ns();
  while (ty_worker_is_stuck(rt, 1)) {
    CHECK(ty__now_ns() - t0 < 3000000000ull);
    usleep(1000);
  }
  CHECK(wait_for(&g_destroyed, 52, 5));
  CHECK_EQ(ty_spawn_at(rt, 1, (void *)step_finish, &p), 0);
  CHECK(wait_for(&g_done, 51, 5));
  CHECK_EQ(ty_runtime_stop(rt), 0);
  ty_runtime_free(rt);
  return 0;
}

/* Blocks in read() on a pipe until the test writes to it: a C call that
 * waits in the kernel (io.read on a terminal, a full pipe), using no CPU. */
static int g_pipe[2];
static int step_blocked(ty_actor *a) {
  (void)a;
  char c;
  atomic_store(&g_running, 1);
  while (read(g_pipe[0], &c, 1) < 0 && errno == EINTR) {
  }
  return TY_DONE;
}

TEST_IMPL(wd_blocked) {
  reset();
  CHECK_EQ(pipe(g_pipe), 0);
  ty_runtime *rt = start(2, 0.05, 5);
  CHECK(rt);
  ty_pid waiter, reader;
  CHECK_EQ(ty_spawn_at(rt, 1, (void *)step_wait, &waiter), 0);
  CHECK_EQ(ty_spawn_at(rt, 1, (void *)step_blocked, &reader), 0);
  uint64_t t0 = ty__now_ns();
  while (!ty_worker_is_stuck(rt, 1)) {
    CHECK(ty__now_ns() - t0 < 3000000000ull); /* 60 slices */
    usleep(1000);
  }
  CHECK(wait_for(&g_dead, 2, 2));
  CHECK(atomic_load(&g_blocked));
  CHECK(!ty_pid_alive(rt, waiter));
  CHECK(!ty_pid_alive(rt, reader));
  CHECK_EQ(atomic_load(&g_asks), 1); /* asked once: declared blocked */
  /* The call returns: the worker comes back and takes work again. */
  CHECK_EQ(write(g_pipe[1], "x", 1), 1);
  t0 = ty__now_ns();
  while (ty_worker_is_stuck(rt, 1)) {
    CHECK(ty__now_ns() - t0 < 3000000000ull);
    usleep(1000);
  }
  ty_pid p;
  CHECK_EQ(ty_spawn_at(rt, 1, (void *)step_finish, &p), 0);
  CHECK(wait_for(&g_done, 1, 5));
  CHECK_EQ(ty_runtime_stop(rt), 0);
  ty_runtime_free(rt);
  close(g_pipe[0]);
  close(g_pipe[1]);
  return 0;
}

TEST_IMPL(wd_stop_abandons) {
  reset();
  ty_runtime *rt = start(2, 10, 0.2); /* no declaration: the deadline acts */
  CHECK(rt);
  ty_pid p;
  CHECK_EQ(ty_spawn_at(rt, 1, (void *)step_stuck, &p), 0);
  while (!atomic_load(&g_running)) usleep(1000);
  uint64_t t0 = ty__now_ns();
  CHECK_EQ(ty_runtime_stop(rt), 1);
  uint64_t took = ty__now_ns() - t0;
  CHECK(took < 2000000000ull); /* 10x the 0.2 s deadline: a loaded machine */
  CHECK(took >= 150000000ull);
  ty_runtime_free(rt);         /* kept for the thread: a no-op */
  atomic_store(&g_release, 1); /* its code returns: it must stay out */
  usleep(50000);
  return 0;
}

/* ---- the pool ------------------------------------------------------------ */

typedef struct hang_job {
  ty_pool_job base;
  _Atomic int *release, *replied, *ran;
} hang_job;

static void hang_run(ty_pool_job *j) {
  hang_job *h = (hang_job *)j;
  atomic_store(h->ran, 1);
  while (!atomic_load(h->release)) usleep(1000);
  if (ty_pool_reply_begin()) {
    atomic_store(h->replied, 1);
    ty_pool_reply_end();
  } else {
    atomic_store(h->replied, 2);
  }
  free(h);
}

TEST_IMPL(pool_abandons_hung_job) {
  static _Atomic int release, replied, ran;
  atomic_store(&release, 0);
  atomic_store(&replied, 0);
  atomic_store(&ran, 0);
  ty_pool *p;
  CHECK_EQ(ty_pool_new(NULL, &p), 0);
  hang_job *h = calloc(1, sizeof *h);
  h->base.run = hang_run;
  h->release = &release;
  h->replied = &replied;
  h->ran = &ran;
  CHECK_EQ(ty_pool_submit(p, &h->base), 0);
  while (!atomic_load(&ran)) usleep(1000);
  uint64_t t0 = ty__now_ns();
  CHECK_EQ(ty_pool_shutdown_until(p, t0 + 100000000ull), 1);
  CHECK(ty__now_ns() - t0 < 1000000000ull);
  ty_pool_free(p); /* the detached thread frees it */
  atomic_store(&release, 1);
  uint64_t end = ty__now_ns() + 2000000000ull;
  while (!atomic_load(&replied)) CHECK(ty__now_ns() < end);
  CHECK_EQ(atomic_load(&replied), 2); /* told its submitter is gone */
  usleep(20000);                      /* let it retire and free the pool */
  return 0;
}
