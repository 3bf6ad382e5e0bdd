/*
 * test_runtime.c - the scheduler end to end, with actors written in C.
 *
 * A C actor is a struct with a step function; the runtime's resume op calls
 * it. These tests run real worker threads (more than the 2 cores when asked:
 * they must pass oversubscribed).
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "sched/ty.h"
#include "test.h"

typedef struct cact cact;
typedef int (*step_fn)(ty_actor *a, cact *c);
struct cact {
  step_fn step;
  long n;    /* workload-specific */
  long seen; /* workload-specific */
  ty_pid peer;
  long *expect; /* per-sender next sequence (fifo test) */
  int nsenders;
  void *arg;
};

static _Atomic long g_destroyed, g_done, g_undeliverable, g_errors;

static int c_resume(ty_actor *a, void *ud) {
  (void)ud;
  cact *c = a->user;
  return c->step(a, c);
}

static void c_destroy(ty_actor *a, ty_worker *w, void *ud) {
  (void)w;
  (void)ud;
  cact *c = a->user;
  free(c->expect);
  free(c);
  atomic_fetch_add(&g_destroyed, 1);
}

static void c_undeliverable(ty_msg *m, ty_worker *w, void *ud) {
  (void)m;
  (void)w;
  (void)ud;
  atomic_fetch_add(&g_undeliverable, 1);
}

static const ty_actor_ops c_ops = {.resume = c_resume,
                                   .destroy = c_destroy,
                                   .undeliverable = c_undeliverable};

static void reset_counters(void) {
  atomic_store(&g_destroyed, 0);
  atomic_store(&g_done, 0);
  atomic_store(&g_undeliverable, 0);
  atomic_store(&g_errors, 0);
}

static ty_runtime *start_rt_spin(unsigned workers, uint32_t ring,
                                 uint64_t spin_ns) {
  ty_config cfg;
  ty_config_init(&cfg);
  cfg.workers = workers;
  cfg.spin_ns = spin_ns;
  if (ring) cfg.mesh_ring = ring;
  ty_runtime *rt;
  if (ty_runtime_new(&cfg, &c_ops, NULL, &rt)) return NULL;
  ty_runtime_start(rt);
  return rt;
}

static ty_runtime *start_rt(unsigned workers, uint32_t ring) {
  ty_config cfg;
  ty_config_init(&cfg);
  return start_rt_spin(workers, ring, cfg.spin_ns);
}

static cact *new_cact(step_fn step, long n) {
  cact *c = calloc(1, sizeof *c);
  c->step = step;
  c->n = n;
  return c;
}

static ty_pid spawn_c(ty_runtime *rt, step_fn step, long n) {
  ty_pid pid = 0;
  if (ty_spawn(rt, new_cact(step, n), &pid)) return 0;
  return pid;
}

static bool wait_done(long target, double seconds) {
  uint64_t end = ty__now_ns() + (uint64_t)(seconds * 1e9);
  while (atomic_load(&g_done) < target) {
    if (ty__now_ns() > end) return false;
    usleep(200);
  }
  return true;
}

static int send_long(ty_runtime *rt, ty_pid to, long v, uint32_t kind) {
  ty_msg *m = ty_msg_new(sizeof v);
  memcpy(m->data, &v, sizeof v);
  m->to = to;
  m->kind = kind;
  int r = ty_send(rt, m);
  if (r) ty_msg_free(m);
  return r;
}

static long msg_long(ty_msg *m) {
  long v;
  memcpy(&v, m->data, sizeof v);
  return v;
}

static ty_runtime *self_rt(void) {
  return ty_worker_runtime(ty_worker_current());
}

/* ---- start / stop ------------------------------------------------------ */

TEST_IMPL(rt_start_stop) {
  for (int i = 0; i < 20; i++) {
    ty_runtime *rt = start_rt(1 + i % 4, 0);
    CHECK(rt);
    if (i % 2) usleep(1000);
    ty_runtime_stop(rt);
    ty_runtime_free(rt);
  }
  return 0;
}

/* ---- spawn ------------------------------------------------------------- */

static int step_finish(ty_actor *a, cact *c) {
  (void)a;
  (void)c;
  atomic_fetch_add(&g_done, 1);
  return TY_DONE;
}

static int step_spawner(ty_actor *a, cact *c) {
  (void)a;
  ty_runtime *rt = self_rt();
  for (long i = 0; i < c->n; i++) CHECK(spawn_c(rt, step_finish, 0));
  return TY_DONE;
}

TEST_IMPL(rt_spawn) {
  reset_counters();
  long n = test_scaled(200000, 5000);
  ty_runtime *rt = start_rt(2, 0);
  CHECK(spawn_c(rt, step_spawner, n));
  CHECK(wait_done(n, 60));
  ty_runtime_stop(rt);
  ty_worker_stats_get(rt, 0, &(ty_worker_stats){0});
  ty_runtime_free(rt);
  CHECK_EQ(atomic_load(&g_destroyed), n + 1);
  return 0;
}

/* Spawns from threads that are not workers go through the inject queue. */
static void *external_spawner(void *arg) {
  ty_runtime *rt = arg;
  for (int i = 0; i < 20000; i++) spawn_c(rt, step_finish, 0);
  return NULL;
}

TEST_IMPL(rt_spawn_external) {
  reset_counters();
  ty_runtime *rt = start_rt(3, 0);
  pthread_t t[3];
  for (int i = 0; i < 3; i++) pthread_create(&t[i], NULL, external_spawner, rt);
  for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
  CHECK(wait_done(60000, 60));
  ty_worker_stats s;
  uint64_t pops = 0;
  for (unsigned i = 0; i < 3; i++) {
    ty_worker_stats_get(rt, i, &s);
    pops += s.inject_pops;
  }
  ty_runtime_stop(rt);
  ty_runtime_free(rt);
  CHECK(pops > 0);
  CHECK_EQ(atomic_load(&g_destroyed), 60000);
  return 0;
}

/* ---- messages ---------------------------------------------------------- */

/* The echo side: answers each message with its value, ends on 0. */
static int step_pong(ty_actor *a, cact *c) {
  (void)c;
  ty_msg *m;
  while ((m = ty_mbox_pop(a))) {
    long v = msg_long(m);
    ty_pid from = m->from;
    ty_msg_free(m);
    if (send_long(self_rt(), from, v, 0)) atomic_fetch_add(&g_errors, 1);
    if (v == 0) return TY_DONE;
  }
  ty_actor_wait(a, -1, 0);
  return TY_WAIT;
}

static int step_ping(ty_actor *a, cact *c) {
  ty_runtime *rt = self_rt();
  if (!c->peer) {
    c->peer = c->arg ? *(ty_pid *)c->arg : spawn_c(rt, step_pong, 0);
    c->seen = c->n;
    send_long(rt, c->peer, c->seen, 0);
  }
  ty_msg *m;
  while ((m = ty_mbox_pop(a))) {
    long v = msg_long(m);
    ty_msg_free(m);
    if (v != c->seen) atomic_fetch_add(&g_errors, 1);
    if (v == 0) {
      atomic_fetch_add(&g_done, 1);
      return TY_DONE;
    }
    send_long(rt, c->peer, --c->seen, 0);
  }
  ty_actor_wait(a, -1, 0);
  return TY_WAIT;
}

TEST_IMPL(rt_pingpong) {
  reset_counters();
  ty_runtime *rt = start_rt(2, 0);
  for (int i = 0; i < 4; i++)
    CHECK(spawn_c(rt, step_ping, test_scaled(100000, 2000)));
  CHECK(wait_done(4, 60));
  ty_runtime_stop(rt);
  ty_runtime_free(rt);
  CHECK_EQ(atomic_load(&g_errors), 0);
  CHECK_EQ(atomic_load(&g_destroyed), 8);
  return 0;
}

/* ---- the calling thread as worker 0 (block_on) --------------------------- */

static pthread_t g_caller;
static _Atomic long g_on_caller;

/* On worker 0: spawns c->n finishing actors and a ping-pong pair, waits for
 * the pair, then lets the caller's thread go. */
static int step_here_main(ty_actor *a, cact *c) {
  ty_runtime *rt = self_rt();
  if (pthread_equal(pthread_self(), g_caller) &&
      ty_worker_id(ty_worker_current()) == 0)
    atomic_fetch_add(&g_on_caller, 1);
  if (!c->peer) {
    for (long i = 0; i < c->n; i++) CHECK(spawn_c(rt, step_finish, 0));
    c->peer = spawn_c(rt, step_ping, 1000);
    CHECK(spawn_c(rt, step_pong, 0)); /* left waiting: the stop ends it */
  }
  if (atomic_load(&g_done) < c->n + 1) {
    ty_actor_wait(a, 1000000, 0); /* 1 ms */
    return TY_WAIT;
  }
  ty_worker_leave(rt, 0);
  return TY_DONE;
}

TEST_IMPL(rt_run_here) {
  g_caller = pthread_self();
  for (unsigned workers = 1; workers <= 4; workers++) {
    reset_counters();
    atomic_store(&g_on_caller, 0);
    ty_config cfg;
    ty_config_init(&cfg);
    cfg.workers = workers;
    ty_runtime *rt;
    CHECK(ty_runtime_new(&cfg, &c_ops, NULL, &rt) == 0);
    CHECK(ty_worker_run_here(rt, 0) == -EINVAL); /* not started so */
    CHECK(ty_runtime_start_here(rt, 0) == 0);
    long n = 500;
    CHECK(ty_spawn_at(rt, 0, new_cact(step_here_main, n), &(ty_pid){0}) == 0);
    CHECK(ty_worker_run_here(rt, 0) == 0);
    CHECK(ty_worker_current() == NULL); /* the caller's thread again */
    CHECK(atomic_load(&g_done) >= n + 1);
    CHECK(atomic_load(&g_on_caller) >= 1);
    ty_runtime_stop(rt);
    ty_runtime_free(rt);
    /* main, n finishers, ping, the pong that answered and the idle one */
    CHECK_EQ(atomic_load(&g_destroyed), n + 4);
    CHECK_EQ(atomic_load(&g_errors), 0);
  }
  return 0;
}

/*
 * Park/unpark: two actors pinned to different workers bounce a counter, so
 * each hop wakes a parked worker (spinning is off, so that every idle
 * moment parks). Runs until the workers together were woken `target` times;
 * a lost wakeup hangs and the harness times the test out.
 */
TEST_IMPL(rt_park_stress) {
  reset_counters();
  long target = test_scaled(1000000, 20000);
  ty_runtime *rt = start_rt_spin(2, 0, 0);
  uint64_t unparks = 0;
  while (unparks < (uint64_t)target) {
    atomic_store(&g_done, 0);
    ty_pid pong;
    CHECK(ty_spawn_at(rt, 1, new_cact(step_pong, 0), &pong) == 0);
    cact *ping = new_cact(step_ping, 20000);
    ping->arg = &pong;
    CHECK(ty_spawn_at(rt, 0, ping, NULL) == 0);
    CHECK(wait_done(1, 120));
    unparks = 0;
    for (unsigned i = 0; i < 2; i++) {
      ty_worker_stats s;
      ty_worker_stats_get(rt, i, &s);
      unparks += s.unparks;
    }
  }
  ty_runtime_stop(rt);
  ty_runtime_free(rt);
  CHECK_EQ(atomic_load(&g_errors), 0);
  return 0;
}

/* ---- per-pair FIFO under backpressure ---------------------------------- */

typedef struct fifo_cfg {
  int senders, receivers;
  long per_pair;
  ty_pid *rx;
} fifo_cfg;

static int step_fifo_rx(ty_actor *a, cact *c) {
  fifo_cfg *f = c->arg;
  if (!c->expect) c->expect = calloc((size_t)f->senders, sizeof(long));
  ty_msg *m;
  while ((m = ty_mbox_pop(a))) {
    long v = msg_long(m);
    long s = m->kind;
    ty_msg_free(m);
    if (s < 0 || s >= f->senders || c->expect[s] != v)
      atomic_fetch_add(&g_errors, 1);
    else c->expect[s]++;
    if (++c->seen == f->senders * f->per_pair) {
      atomic_fetch_add(&g_done, 1);
      return TY_DONE;
    }
  }
  ty_actor_wait(a, -1, 0);
  return TY_WAIT;
}

/* Sends its sequence to every receiver, interleaved, yielding when a ring is
 * full (backpressure) and now and then anyway. */
static int step_fifo_tx(ty_actor *a, cact *c) {
  fifo_cfg *f = c->arg;
  ty_runtime *rt = self_rt();
  long total = f->per_pair * f->receivers;
  while (c->seen < total) {
    long seq = c->seen / f->receivers;
    int r = (int)(c->seen % f->receivers);
    if (send_long(rt, f->rx[r], seq, (uint32_t)c->n))
      atomic_fetch_add(&g_errors, 1);
    c->seen++;
    if (ty_send_blocked(a) || c->seen % 97 == 0) return TY_YIELD;
  }
  atomic_fetch_add(&g_done, 1);
  return TY_DONE;
}

TEST_IMPL(rt_fifo_stress) {
  reset_counters();
  fifo_cfg f = {.senders = 8,
                .receivers = 8,
                .per_pair = test_scaled(40000, 1000)};
  ty_pid rx[8];
  f.rx = rx;
  ty_runtime *rt = start_rt(4, 8); /* tiny rings: full all the time */
  for (int i = 0; i < f.receivers; i++) {
    cact *c = new_cact(step_fifo_rx, i);
    c->arg = &f;
    CHECK(ty_spawn_at(rt, (unsigned)i % 4, c, &rx[i]) == 0);
  }
  for (int i = 0; i < f.senders; i++) {
    cact *c = new_cact(step_fifo_tx, i);
    c->arg = &f;
    CHECK(ty_spawn_at(rt, (unsigned)(i + 1) % 4, c, NULL) == 0);
  }
  CHECK(wait_done(f.senders + f.receivers, 240));
  uint64_t sent = 0;
  for (unsigned i = 0; i < 4; i++) {
    ty_worker_stats s;
    ty_worker_stats_get(rt, i, &s);
    sent += s.mesh_sent;
  }
  ty_runtime_stop(rt);
  ty_runtime_free(rt);
  CHECK_EQ(atomic_load(&g_errors), 0);
  CHECK(sent > 0);
  return 0;
}

/* Messages sent to a spawn request before it starts wait for it, in order. */
static int step_collect(ty_actor *a, cact *c) {
  ty_msg *m;
  while ((m = ty_mbox_pop(a))) {
    if (msg_long(m) != c->seen) atomic_fetch_add(&g_errors, 1);
    c->seen++;
    ty_msg_free(m);
  }
  if (c->seen == c->n) {
    atomic_fetch_add(&g_done, 1);
    return TY_DONE;
  }
  ty_actor_wait(a, -1, 0);
  return TY_WAIT;
}

TEST_IMPL(rt_pending_messages) {
  reset_counters();
  ty_config cfg;
  ty_config_init(&cfg);
  cfg.workers = 2;
  ty_runtime *rt;
  CHECK(ty_runtime_new(&cfg, &c_ops, NULL, &rt) == 0);
  ty_pid pid;
  CHECK(ty_spawn(rt, new_cact(step_collect, 1000), &pid) == 0);
  for (long i = 0; i < 500; i++) CHECK(send_long(rt, pid, i, 0) == 0);
  ty_runtime_start(rt); /* the rest race with its start */
  for (long i = 500; i < 1000; i++) CHECK(send_long(rt, pid, i, 0) == 0);
  CHECK(wait_done(1, 30));
  ty_runtime_stop(rt);
  ty_runtime_free(rt);
  CHECK_EQ(atomic_load(&g_errors), 0);
  return 0;
}

/* A stale pid is refused; a message that was in flight when its receiver
 * ended is reported, never delivered to the slot's next occupant. */
TEST_IMPL(rt_dead_pid) {
  reset_counters();
  ty_runtime *rt = start_rt(2, 0);
  ty_pid pid = spawn_c(rt, step_finish, 0);
  CHECK(pid);
  CHECK(wait_done(1, 10));
  while (ty_pid_alive(rt, pid)) usleep(100);
  CHECK_EQ(send_long(rt, pid, 1, 0), -ESRCH);
  CHECK_EQ(send_long(rt, 0, 1, 0), -ESRCH);
  CHECK_EQ(send_long(rt, ((ty_pid)77 << TY_PID_SLOT_BITS) | 12345, 1, 0),
           -ESRCH);
  ty_runtime_stop(rt);
  ty_runtime_free(rt);
  return 0;
}

/* ---- timers ------------------------------------------------------------ */

static _Atomic long g_early, g_late_max_us;

static int step_sleeper(ty_actor *a, cact *c) {
  ty_runtime *rt = self_rt();
  if (!c->seen) {
    c->seen = 1;
    c->arg = (void *)(uintptr_t)ty_runtime_now_ns(rt);
    ty_actor_wait(a, c->n * 1000000, UINT64_MAX);
    return TY_WAIT;
  }
  if (!ty_actor_timed_out(a)) atomic_fetch_add(&g_errors, 1);
  uint64_t start = (uintptr_t)c->arg;
  int64_t late = (int64_t)(ty_runtime_now_ns(rt) - start) - c->n * 1000000;
  if (late < 0) atomic_fetch_add(&g_early, 1);
  long us = (long)(late / 1000);
  long cur = atomic_load(&g_late_max_us);
  while (us > cur && !atomic_compare_exchange_weak(&g_late_max_us, &cur, us)) {
  }
  atomic_fetch_add(&g_done, 1);
  return TY_DONE;
}

TEST_IMPL(rt_timers) {
  reset_counters();
  long n = test_scaled(20000, 2000);
  ty_runtime *rt = start_rt(2, 0);
  uint32_t x = 2463534242u;
  for (long i = 0; i < n; i++) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    CHECK(spawn_c(rt, step_sleeper, x % 300));
  }
  CHECK(wait_done(n, 60));
  ty_runtime_stop(rt);
  ty_runtime_free(rt);
  CHECK_EQ(atomic_load(&g_early), 0);
  CHECK_EQ(atomic_load(&g_errors), 0);
  return 0;
}

/* ---- shutdown ---------------------------------------------------------- */

static int step_spin(ty_actor *a, cact *c) {
  (void)a;
  c->seen++;
  return TY_YIELD;
}

static int step_wait_forever(ty_actor *a, cact *c) {
  (void)c;
  ty_actor_wait(a, -1, 0);
  return TY_WAIT;
}

TEST_IMPL(rt_stop_with_actors) {
  reset_counters();
  ty_runtime *rt = start_rt(3, 0);
  for (int i = 0; i < 100; i++) spawn_c(rt, step_spin, 0);
  for (int i = 0; i < 1000; i++) spawn_c(rt, step_wait_forever, 0);
  ty_pid sleeper = spawn_c(rt, step_wait_forever, 0);
  for (int i = 0; i < 100; i++) send_long(rt, sleeper, i, 0);
  usleep(50000);
  ty_runtime_stop(rt);
  ty_runtime_free(rt);
  CHECK_EQ(atomic_load(&g_destroyed), 1101);
  return 0;
}
