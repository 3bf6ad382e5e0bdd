/*
 * pool.c - the blocking pool (see pool.h for the contract).
 *
 * One mutex guards everything that decides where a job goes: the FIFO, the
 * idle list and the thread count. Each thread waits on a condition variable
 * of its own, so a submit wakes exactly the thread it handed the job to (no
 * thundering herd, no spurious "was it for me?" accounting as in Tokio's
 * num_notify), and the idle list is LIFO so that the longest-idle threads
 * are the ones that time out.
 *
 * Threads are joinable, never detached: the pool may live in a shared
 * object that is unloaded after it is freed, so no thread may still be
 * running its code by then. A retiring thread joins the threads that retired
 * before it (the "zombies") and leaves itself on the list for the next one;
 * shutdown joins whatever is left. So at most a handful of finished threads
 * wait to be joined at any time, and none outlives ty_pool_shutdown.
 *
 * The stats are atomics written under the mutex and read without it.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <time.h>

#include "base/list.h"
#include "pool.h"

typedef struct pool_thread {
  struct pool_thread *next, *prev; /* idle list, or zombie list (next) */
  ty_pool *pool;
  struct pool_thread *anext, *aprev; /* every live thread (under mu) */
  pthread_t tid;
  bool detached;     /* left behind by a shutdown (under mu) */
  pthread_cond_t cv; /* the thread's own: a job was handed over, or stop */
  ty_pool_job *job;  /* handed over by a submit (under the lock) */
} pool_thread;

struct ty_pool {
  ty_pool_config cfg;
  pthread_mutex_t mu;
  pthread_cond_t done_cv; /* shutdown waits here for nthreads == 0 */

  /* ---- guarded by mu ---- */
  ty__node *head, *tail; /* the FIFO of jobs waiting for a thread */
  uint32_t qlen;
  pool_thread *idle;    /* most recently idle first */
  pool_thread *zombies; /* retired, not joined yet */
  unsigned nthreads;    /* alive and not retiring: counts toward max */
  unsigned nidle;
  bool stopping;
  bool left;          /* a shutdown left running threads behind */
  unsigned nleft;     /* of those, still alive */
  bool freed;         /* ty_pool_free ran: the last of them frees the pool */
  pool_thread *alive; /* every thread not retired yet */

  /* ---- stats: written under mu, read by anyone without it ---- */
  _Atomic uint64_t s_threads, s_idle, s_queued, s_completed, s_rejected;
};

static _Thread_local ty_pool *tl_pool; /* the pool this thread serves */
static _Thread_local void *tl_state;   /* the binding's per-thread state */

/* ---- small helpers ------------------------------------------------------ */

void ty_pool_config_init(ty_pool_config *c) {
  memset(c, 0, sizeof *c);
  c->max_threads = 512;
  c->queue_cap = 4096;
  c->keep_alive_ns = 10ull * 1000000000ull;
}

void *ty_pool_state(void) { return tl_state; }
void ty_pool_set_state(void *state) { tl_state = state; }
bool ty_pool_on_thread(void) { return tl_pool != NULL; }

/* relaxed: every writer holds mu, which orders the writes among themselves;
 * a reader without mu only wants a recent value of each counter, not a
 * snapshot consistent across counters, so no ordering with other memory is
 * needed. */
static void stat_set(_Atomic uint64_t *a, uint64_t v) {
  atomic_store_explicit(a, v, memory_order_relaxed);
}
static uint64_t stat_get(_Atomic uint64_t *a) {
  return atomic_load_explicit(a, memory_order_relaxed);
}

/* Caller holds mu. */
static void publish(ty_pool *p) {
  stat_set(&p->s_threads, p->nthreads);
  stat_set(&p->s_idle, p->nidle);
  stat_set(&p->s_queued, p->qlen);
}

static struct timespec deadline_after(uint64_t ns) {
  const uint64_t cap = 100ull * 365 * 86400 * 1000000000ull; /* no overflow */
  if (ns > cap) ns = cap;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  uint64_t nsec = (uint64_t)ts.tv_nsec + ns % 1000000000ull;
  ts.tv_sec += (time_t)(ns / 1000000000ull + nsec / 1000000000ull);
  ts.tv_nsec = (long)(nsec % 1000000000ull);
  return ts;
}

/* Condition variables time out on the monotonic clock: a wall-clock jump
 * must not retire every thread at once, nor keep them forever. */
static void cond_init_monotonic(pthread_cond_t *cv) {
  pthread_condattr_t a;
  pthread_condattr_init(&a);
  pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
  if (pthread_cond_init(cv, &a)) ty__die("pthread_cond_init");
  pthread_condattr_destroy(&a);
}

/* ---- the FIFO and the idle list (caller holds mu) ----------------------- */

static void queue_push(ty_pool *p, ty_pool_job *j) {
  j->node.next = NULL;
  if (p->tail) p->tail->next = &j->node;
  else p->head = &j->node;
  p->tail = &j->node;
  p->qlen++;
}

static ty_pool_job *queue_pop(ty_pool *p) {
  ty__node *n = p->head;
  if (!n) return NULL;
  p->head = n->next;
  if (!p->head) p->tail = NULL;
  p->qlen--;
  return (ty_pool_job *)n; /* node is the job's first member */
}

static void idle_push(ty_pool *p, pool_thread *t) {
  TY_LIST_PUSH(&p->idle, t, next, prev);
  p->nidle++;
}

static void idle_remove(ty_pool *p, pool_thread *t) {
  TY_LIST_UNLINK(&p->idle, t, next, prev);
  t->next = t->prev = NULL;
  p->nidle--;
}

/* ---- a pool thread ------------------------------------------------------ */

/* Waits (idle) for a handed-over job; NULL after keep_alive or at stop. */
static ty_pool_job *idle_wait(ty_pool *p, pool_thread *t) {
  idle_push(p, t);
  publish(p);
  struct timespec dl = deadline_after(p->cfg.keep_alive_ns);
  int rc = 0;
  while (!t->job && !p->stopping && rc != ETIMEDOUT)
    rc = pthread_cond_timedwait(&t->cv, &p->mu, &dl);
  ty_pool_job *j = t->job;
  if (j) { /* the submitter already took t off the idle list */
    t->job = NULL;
    return j;
  }
  idle_remove(p, t);
  return NULL;
}

/* The next job for a thread that just finished one; caller holds mu. A
 * queued job comes first, so the FIFO drains before anyone idles. */
static ty_pool_job *next_job(ty_pool *p, pool_thread *t) {
  if (p->stopping) return NULL;
  ty_pool_job *j = queue_pop(p);
  return j ? j : idle_wait(p, t);
}

static void join_chain(pool_thread *z) {
  while (z) {
    pool_thread *next = z->next;
    pthread_join(z->tid, NULL);
    pthread_cond_destroy(&z->cv);
    free(z);
    z = next;
  }
}

/* Leaves the pool: no longer counted (so a submit may start a replacement at
 * once), on the zombie list for someone to join. Caller holds mu, released
 * here; then the binding's state is closed on this thread. */
static void pool_destroy(ty_pool *p);

static void alive_remove(ty_pool *p, pool_thread *t) {
  TY_LIST_UNLINK(&p->alive, t, anext, aprev);
}

static void retire(ty_pool *p, pool_thread *t) {
  alive_remove(p, t);
  if (t->detached) { /* nobody joins us, and the pool may be ours to free */
    bool last = --p->nleft == 0 && p->freed;
    void (*hook)(void *, void *) = p->cfg.thread_exit;
    void *ud = p->cfg.ud;
    pthread_mutex_unlock(&p->mu);
    if (tl_state && hook) hook(tl_state, ud);
    tl_state = NULL;
    pthread_cond_destroy(&t->cv);
    free(t);
    if (last) pool_destroy(p);
    return;
  }
  p->nthreads--;
  pool_thread *older = p->zombies;
  t->next = NULL;
  p->zombies = t;
  if (p->nthreads == 0) pthread_cond_broadcast(&p->done_cv);
  publish(p);
  void (*hook)(void *, void *) = p->cfg.thread_exit;
  void *ud = p->cfg.ud;
  pthread_mutex_unlock(&p->mu);
  if (tl_state && hook) hook(tl_state, ud);
  tl_state = NULL;
  join_chain(older);
}

static void *thread_main(void *arg) {
  pool_thread *t = arg;
  ty_pool *p = t->pool;
  tl_pool = p;
  /* Written before pthread_create, which orders it before this read. */
  ty_pool_job *j = t->job;
  t->job = NULL;
  for (;;) {
    j->run(j);
    TY_CHAOS(); /* submitters and the retiring timer run meanwhile */
    pthread_mutex_lock(&p->mu);
    stat_set(&p->s_completed, stat_get(&p->s_completed) + 1);
    j = next_job(p, t);
    if (!j) break;
    publish(p);
    pthread_mutex_unlock(&p->mu);
  }
  retire(p, t); /* unlocks */
  tl_pool = NULL;
  return NULL;
}

/* Starts a thread whose first job is j. Caller holds mu. Signals are
 * blocked in pool threads: a job's blocking system call should not be
 * interrupted, and a process signal belongs to the main thread. */
static int spawn_locked(ty_pool *p, ty_pool_job *j) {
  pool_thread *t = calloc(1, sizeof *t);
  if (!t) return -ENOMEM;
  cond_init_monotonic(&t->cv);
  t->pool = p;
  t->job = j;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  if (p->cfg.stack_size) pthread_attr_setstacksize(&attr, p->cfg.stack_size);
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int rc = pthread_create(&t->tid, &attr, thread_main, t);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  pthread_attr_destroy(&attr);
  if (rc) {
    pthread_cond_destroy(&t->cv);
    free(t);
    return -rc;
  }
  p->nthreads++;
  TY_LIST_PUSH(&p->alive, t, anext, aprev);
  return 0;
}

/* ---- the API ------------------------------------------------------------ */

int ty_pool_new(const ty_pool_config *c, ty_pool **out) {
  ty_pool_config cfg;
  if (c) cfg = *c;
  else ty_pool_config_init(&cfg);
  if (cfg.max_threads == 0) return -EINVAL;
  ty_pool *p = calloc(1, sizeof *p);
  if (!p) return -ENOMEM;
  p->cfg = cfg;
  if (pthread_mutex_init(&p->mu, NULL)) ty__die("pthread_mutex_init");
  cond_init_monotonic(&p->done_cv);
  /* relaxed: nobody else can see p before ty_pool_new returns. */
  atomic_init(&p->s_threads, 0);
  atomic_init(&p->s_idle, 0);
  atomic_init(&p->s_queued, 0);
  atomic_init(&p->s_completed, 0);
  atomic_init(&p->s_rejected, 0);
  *out = p;
  return 0;
}

/* Where a submitted job goes; caller holds mu. */
static int place(ty_pool *p, ty_pool_job *j) {
  if (p->stopping) return -ESHUTDOWN;
  if (p->idle) { /* the most recently idle thread: its caches are warm */
    pool_thread *t = p->idle;
    idle_remove(p, t);
    t->job = j;
    pthread_cond_signal(&t->cv);
    return 0;
  }
  int rc = 0;
  if (p->nthreads < p->cfg.max_threads) {
    rc = spawn_locked(p, j);
    if (rc == 0) return 0;
    if (p->nthreads == 0) return rc; /* nobody would ever drain the FIFO */
  }
  if (p->qlen < p->cfg.queue_cap) {
    queue_push(p, j);
    return 0;
  }
  stat_set(&p->s_rejected, stat_get(&p->s_rejected) + 1);
  return -EAGAIN;
}

int ty_pool_submit(ty_pool *p, ty_pool_job *j) {
  TY_CHAOS();
  pthread_mutex_lock(&p->mu);
  int rc = place(p, j);
  publish(p);
  pthread_mutex_unlock(&p->mu);
  return rc;
}

static void cancel_chain(ty__node *n) {
  while (n) {
    ty__node *next = n->next;
    ty_pool_job *j = (ty_pool_job *)n;
    if (j->cancel) j->cancel(j);
    n = next;
  }
}

int ty_pool_shutdown_until(ty_pool *p, uint64_t deadline_ns) {
  ty__assert(tl_pool != p);
  pthread_mutex_lock(&p->mu);
  if (p->left) {
    pthread_mutex_unlock(&p->mu);
    return 0;
  }
  p->stopping = true;
  ty__node *queued = p->head;
  p->head = p->tail = NULL;
  p->qlen = 0;
  for (pool_thread *t = p->idle; t; t = t->next) pthread_cond_signal(&t->cv);
  publish(p);
  pthread_mutex_unlock(&p->mu);
  cancel_chain(queued); /* outside the lock: a callback may do anything */
  pthread_mutex_lock(&p->mu);
  struct timespec dl = deadline_after(
      deadline_ns > ty__now_ns() ? deadline_ns - ty__now_ns() : 0);
  int rc = 0;
  while (p->nthreads && rc != ETIMEDOUT)
    rc = pthread_cond_timedwait(&p->done_cv, &p->mu, &dl);
  int left = 0;
  if (p->nthreads) { /* jobs that do not end: leave their threads */
    left = (int)p->nthreads;
    for (pool_thread *t = p->alive; t; t = t->anext) {
      t->detached = true;
      pthread_detach(t->tid);
    }
    p->left = true;
    p->nleft = p->nthreads;
    p->nthreads = 0;
    publish(p);
  }
  pool_thread *z = p->zombies;
  p->zombies = NULL;
  pthread_mutex_unlock(&p->mu);
  join_chain(z);
  return left;
}

void ty_pool_shutdown(ty_pool *p) { ty_pool_shutdown_until(p, UINT64_MAX); }

static void pool_destroy(ty_pool *p) {
  pthread_cond_destroy(&p->done_cv);
  pthread_mutex_destroy(&p->mu);
  free(p);
}

void ty_pool_free(ty_pool *p) {
  if (!p) return;
  ty_pool_shutdown(p);
  pthread_mutex_lock(&p->mu);
  bool theirs = p->nleft > 0; /* the last detached thread frees it */
  p->freed = true;
  pthread_mutex_unlock(&p->mu);
  if (!theirs) pool_destroy(p);
}

bool ty_pool_reply_begin(void) {
  ty_pool *p = tl_pool;
  if (!p) return true;
  pthread_mutex_lock(&p->mu);
  if (!p->left) return true;
  pthread_mutex_unlock(&p->mu);
  return false;
}

void ty_pool_reply_end(void) {
  if (tl_pool) pthread_mutex_unlock(&tl_pool->mu);
}

void ty_pool_stats_get(ty_pool *p, ty_pool_stats *out) {
  out->threads = stat_get(&p->s_threads);
  out->idle = stat_get(&p->s_idle);
  out->queued = stat_get(&p->s_queued);
  out->completed = stat_get(&p->s_completed);
  out->rejected = stat_get(&p->s_rejected);
}
