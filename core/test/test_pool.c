/*
 * test_pool.c - the blocking pool: saturation, the bounded queue, idle
 * retirement, no deadlock with one thread, shutdown with queued jobs, and a
 * stress of submits racing retirements (for tsan).
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <string.h>
#include <time.h>

#include "pool/pool.h"
#include "test.h"

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
  }
}

static double now_s(void) { return ty__now_ns() * 1e-9; }

/* Polls cond for up to ms milliseconds, then checks it. */
#define WAIT_FOR(cond, ms)                                                     \
  do {                                                                         \
    for (long i_ = 0; i_ < (ms) && !(cond); i_++) sleep_ms(1);                 \
    CHECK(cond);                                                               \
  } while (0)

static ty_pool_stats stats(ty_pool *p) {
  ty_pool_stats s;
  ty_pool_stats_get(p, &s);
  return s;
}

/* A gate jobs wait on, opened once by the test. */
typedef struct gate {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool open;
} gate;

static void gate_init(gate *g) {
  pthread_mutex_init(&g->mu, NULL);
  pthread_cond_init(&g->cv, NULL);
  g->open = false;
}

static void gate_wait(gate *g) {
  pthread_mutex_lock(&g->mu);
  while (!g->open) pthread_cond_wait(&g->cv, &g->mu);
  pthread_mutex_unlock(&g->mu);
}

static void gate_open(gate *g) {
  pthread_mutex_lock(&g->mu);
  g->open = true;
  pthread_cond_broadcast(&g->cv);
  pthread_mutex_unlock(&g->mu);
}

static void gate_destroy(gate *g) {
  pthread_mutex_destroy(&g->mu);
  pthread_cond_destroy(&g->cv);
}

/* A test job: optionally sleeps or waits on a gate, tracks how many run at
 * once, counts runs and cancels. Counters are seq_cst: the tests are not
 * about their cost. */
typedef struct tjob {
  ty_pool_job base;
  long sleep_ms;
  gate *gate;
  ty_pool *resubmit; /* submit a copy of itself from the pool thread */
  long chain;        /* ... this many more times */
} tjob;

static atomic_long g_ran, g_cancelled, g_running, g_peak;

static void tjob_cancel(ty_pool_job *j) {
  atomic_fetch_add(&g_cancelled, 1);
  free(j);
}

static void tjob_run(ty_pool_job *j);

static tjob *tjob_new(long ms, gate *g) {
  tjob *t = ty__xcalloc(1, sizeof *t);
  t->base.run = tjob_run;
  t->base.cancel = tjob_cancel;
  t->sleep_ms = ms;
  t->gate = g;
  return t;
}

static void note_running(long delta) {
  long now = atomic_fetch_add(&g_running, delta) + delta;
  long peak = atomic_load(&g_peak);
  while (now > peak && !atomic_compare_exchange_weak(&g_peak, &peak, now)) {
  }
}

static void tjob_run(ty_pool_job *j) {
  tjob *t = (tjob *)j;
  note_running(1);
  if (t->gate) gate_wait(t->gate);
  if (t->sleep_ms) sleep_ms(t->sleep_ms);
  if (t->resubmit && t->chain > 0) {
    tjob *next = tjob_new(0, NULL);
    next->resubmit = t->resubmit;
    next->chain = t->chain - 1;
    if (ty_pool_submit(t->resubmit, &next->base)) free(next);
  }
  note_running(-1);
  atomic_fetch_add(&g_ran, 1);
  free(t);
}

static void reset_counters(void) {
  atomic_store(&g_ran, 0);
  atomic_store(&g_cancelled, 0);
  atomic_store(&g_running, 0);
  atomic_store(&g_peak, 0);
}

static ty_pool *new_pool(unsigned max, uint32_t queue, uint64_t keep_ms) {
  ty_pool_config c;
  ty_pool_config_init(&c);
  c.max_threads = max;
  c.queue_cap = queue;
  c.keep_alive_ns = keep_ms * 1000000ull;
  ty_pool *p = NULL;
  if (ty_pool_new(&c, &p)) return NULL;
  return p;
}

/* 4 threads at most: 16 jobs of 50 ms take 4 rounds; never more than 4 run
 * at once, and each thread is reused rather than a new one started. */
TEST_IMPL(pool_saturation) {
  reset_counters();
  ty_pool *p = new_pool(4, 100, 10000);
  CHECK(p != NULL);
  double t0 = now_s();
  for (int i = 0; i < 16; i++)
    CHECK_EQ(ty_pool_submit(p, &tjob_new(50, NULL)->base), 0);
  CHECK(stats(p).threads == 4);
  CHECK(stats(p).queued == 12);
  WAIT_FOR(atomic_load(&g_ran) == 16, 5000);
  double dt = now_s() - t0;
  CHECK(dt >= 0.19);
  CHECK(dt < 2.0);
  CHECK_EQ(atomic_load(&g_peak), 4);
  WAIT_FOR(stats(p).idle == 4, 1000);
  ty_pool_stats s = stats(p);
  CHECK_EQ(s.threads, 4);
  CHECK_EQ(s.queued, 0);
  CHECK_EQ(s.completed, 16);
  CHECK_EQ(s.rejected, 0);
  /* Idle threads are reused: no fifth thread appears. */
  for (int i = 0; i < 4; i++)
    CHECK_EQ(ty_pool_submit(p, &tjob_new(0, NULL)->base), 0);
  WAIT_FOR(stats(p).completed == 20, 2000);
  CHECK_EQ(stats(p).threads, 4);
  ty_pool_free(p);
  return 0;
}

/* One thread, room for two: the fourth job is refused, nothing is lost. */
TEST_IMPL(pool_queue_full) {
  reset_counters();
  gate g;
  gate_init(&g);
  ty_pool *p = new_pool(1, 2, 10000);
  CHECK(p != NULL);
  CHECK_EQ(ty_pool_submit(p, &tjob_new(0, &g)->base), 0);
  CHECK_EQ(ty_pool_submit(p, &tjob_new(0, NULL)->base), 0);
  CHECK_EQ(ty_pool_submit(p, &tjob_new(0, NULL)->base), 0);
  tjob *extra = tjob_new(0, NULL);
  CHECK_EQ(ty_pool_submit(p, &extra->base), -EAGAIN);
  ty_pool_stats s = stats(p);
  CHECK_EQ(s.threads, 1);
  CHECK_EQ(s.queued, 2);
  CHECK_EQ(s.rejected, 1);
  gate_open(&g);
  WAIT_FOR(atomic_load(&g_ran) == 3, 5000);
  /* Room again once the queue drained. */
  CHECK_EQ(ty_pool_submit(p, &extra->base), 0);
  WAIT_FOR(atomic_load(&g_ran) == 4, 5000);
  WAIT_FOR(stats(p).completed == 4, 1000); /* counted just after run */
  ty_pool_free(p);
  gate_destroy(&g);
  return 0;
}

/* queue_cap 0: work goes only to threads, never waits. */
TEST_IMPL(pool_queue_zero) {
  reset_counters();
  gate g;
  gate_init(&g);
  ty_pool *p = new_pool(2, 0, 10000);
  CHECK(p != NULL);
  CHECK_EQ(ty_pool_submit(p, &tjob_new(0, &g)->base), 0);
  CHECK_EQ(ty_pool_submit(p, &tjob_new(0, &g)->base), 0);
  tjob *extra = tjob_new(0, NULL);
  CHECK_EQ(ty_pool_submit(p, &extra->base), -EAGAIN);
  free(extra);
  gate_open(&g);
  WAIT_FOR(atomic_load(&g_ran) == 2, 5000);
  ty_pool_free(p);
  gate_destroy(&g);
  return 0;
}

/* Per-thread state: set by jobs, handed to thread_exit on the retiring
 * thread itself. */
static atomic_long g_exits;
static _Thread_local long tl_marker;

static void state_job_run(ty_pool_job *j) {
  if (!ty_pool_state()) {
    long *s = ty__xmalloc(sizeof *s);
    *s = (long)(intptr_t)&tl_marker; /* which thread made it */
    ty_pool_set_state(s);
  }
  tjob_run(j);
}

static void state_exit(void *state, void *ud) {
  if (ud != (void *)&g_exits) abort();
  if (*(long *)state != (long)(intptr_t)&tl_marker) abort(); /* wrong thread */
  free(state);
  atomic_fetch_add(&g_exits, 1);
}

static int submit_state_jobs(ty_pool *p, int n, gate *g) {
  for (int i = 0; i < n; i++) {
    tjob *t = tjob_new(0, g);
    t->base.run = state_job_run;
    if (ty_pool_submit(p, &t->base)) return -1;
  }
  return 0;
}

/* Threads idle for keep_alive retire; the pool then starts new ones. */
TEST_IMPL(pool_retire) {
  reset_counters();
  atomic_store(&g_exits, 0);
  ty_pool_config c;
  ty_pool_config_init(&c);
  c.max_threads = 4;
  c.keep_alive_ns = 50 * 1000000ull;
  c.thread_exit = state_exit;
  c.ud = &g_exits;
  ty_pool *p;
  CHECK_EQ(ty_pool_new(&c, &p), 0);
  CHECK(!ty_pool_on_thread());
  gate g;
  gate_init(&g);
  CHECK_EQ(submit_state_jobs(p, 4, &g), 0);
  CHECK_EQ(stats(p).threads, 4);
  gate_open(&g);
  WAIT_FOR(atomic_load(&g_ran) == 4, 5000);
  WAIT_FOR(stats(p).threads == 0, 3000);
  WAIT_FOR(atomic_load(&g_exits) == 4, 1000);
  CHECK_EQ(stats(p).idle, 0);
  /* A retired pool serves again. */
  CHECK_EQ(submit_state_jobs(p, 2, NULL), 0);
  WAIT_FOR(atomic_load(&g_ran) == 6, 5000);
  ty_pool_free(p); /* the new threads' states are handed over too */
  long exits = atomic_load(&g_exits);
  CHECK(exits == 5 || exits == 6); /* one or two threads served the two */
  gate_destroy(&g);
  return 0;
}

/* Submitting threads for the many-producer tests. */
typedef struct producer {
  ty_pool *p;
  long n;
  long refused;
  pthread_t tid;
} producer;

static void *produce(void *arg) {
  producer *pr = arg;
  for (long i = 0; i < pr->n; i++) {
    tjob *t = tjob_new(0, NULL);
    int rc;
    while ((rc = ty_pool_submit(pr->p, &t->base)) == -EAGAIN) {
      pr->refused++;
      sched_yield();
    }
    if (rc) abort();
  }
  return NULL;
}

/* One thread and far more work than it: everything runs, including jobs
 * that submit further jobs from the pool thread itself (a job never waits
 * for another job, so a pool smaller than the work cannot deadlock). */
TEST_IMPL(pool_one_thread) {
  reset_counters();
  long per = test_scaled(20000, 500), chain = test_scaled(2000, 100);
  ty_pool *p = new_pool(1, 64, 10000);
  CHECK(p != NULL);
  producer pr[4];
  for (int i = 0; i < 4; i++) {
    pr[i] = (producer){.p = p, .n = per};
    CHECK_EQ(pthread_create(&pr[i].tid, NULL, produce, &pr[i]), 0);
  }
  tjob *first = tjob_new(0, NULL);
  first->resubmit = p;
  first->chain = chain;
  while (ty_pool_submit(p, &first->base) == -EAGAIN) sched_yield();
  for (int i = 0; i < 4; i++) pthread_join(pr[i].tid, NULL);
  WAIT_FOR(atomic_load(&g_ran) >= 4 * per + 1, 60000);
  /* The chain may lose links to a full queue (the job frees them); it must
   * still have ended, with the pool idle. */
  WAIT_FOR(stats(p).idle == 1 && stats(p).queued == 0, 5000);
  CHECK_EQ(stats(p).threads, 1);
  CHECK_EQ(atomic_load(&g_peak), 1);
  CHECK_EQ((long)stats(p).completed, atomic_load(&g_ran));
  ty_pool_free(p);
  return 0;
}

/* Shutdown with work queued: the running jobs finish, the queued ones are
 * cancelled (each exactly once), every thread is joined, nothing leaks
 * (asan), and later submits are refused. */
TEST_IMPL(pool_shutdown_queued) {
  reset_counters();
  ty_pool *p = new_pool(2, 100, 10000);
  CHECK(p != NULL);
  for (int i = 0; i < 50; i++)
    CHECK_EQ(ty_pool_submit(p, &tjob_new(30, NULL)->base), 0);
  WAIT_FOR(atomic_load(&g_running) == 2, 2000);
  double t0 = now_s();
  ty_pool_shutdown(p);
  CHECK(now_s() - t0 < 1.0); /* did not run the queue */
  CHECK_EQ(atomic_load(&g_running), 0);
  CHECK_EQ(atomic_load(&g_ran) + atomic_load(&g_cancelled), 50);
  CHECK(atomic_load(&g_cancelled) >= 44);
  ty_pool_stats s = stats(p);
  CHECK_EQ(s.threads, 0);
  CHECK_EQ(s.idle, 0);
  CHECK_EQ(s.queued, 0);
  tjob *late = tjob_new(0, NULL);
  CHECK_EQ(ty_pool_submit(p, &late->base), -ESHUTDOWN);
  free(late);
  ty_pool_shutdown(p); /* idempotent */
  ty_pool_free(p);
  /* An idle pool and a never-used pool shut down at once too. */
  p = new_pool(3, 10, 10000);
  CHECK_EQ(ty_pool_submit(p, &tjob_new(0, NULL)->base), 0);
  WAIT_FOR(stats(p).idle == 1, 2000);
  t0 = now_s();
  ty_pool_free(p);
  CHECK(now_s() - t0 < 1.0);
  ty_pool_free(new_pool(1, 0, 10000));
  CHECK(new_pool(0, 10, 10) == NULL);
  return 0;
}

/* Submits race retirements: a 1 ms keep-alive makes threads retire and
 * restart all the time while producers submit in bursts. */
TEST_IMPL(pool_stress) {
  reset_counters();
  long rounds = test_scaled(200, 20), burst = 50;
  ty_pool *p = new_pool(8, 16, 1) /* 1 ms keep-alive */;
  CHECK(p != NULL);
  long submitted = 0, refused = 0;
  for (long r = 0; r < rounds; r++) {
    producer pr[3];
    for (int i = 0; i < 3; i++) {
      pr[i] = (producer){.p = p, .n = burst};
      CHECK_EQ(pthread_create(&pr[i].tid, NULL, produce, &pr[i]), 0);
    }
    for (int i = 0; i < 3; i++) {
      pthread_join(pr[i].tid, NULL);
      refused += pr[i].refused;
    }
    submitted += 3 * burst;
    if (r % 7 == 0) sleep_ms(2); /* let every thread retire */
  }
  WAIT_FOR(atomic_load(&g_ran) == submitted, 60000);
  CHECK(atomic_load(&g_peak) <= 8);
  CHECK_EQ((long)stats(p).rejected, refused);
  WAIT_FOR(stats(p).threads == 0, 5000);
  ty_pool_free(p);
  return 0;
}
