/*
 * test_spawnq_chain.c - the spawn queue under threads: stealing in a chain
 * (A into B, B into C) and an owner racing several stealers, every node run
 * exactly once. FIFO order, overflow and plain stealing are in
 * test_spawnq.c.
 */
#include <pthread.h>
#include <sched.h>
#include <string.h>
#include <time.h>

#include "sched/spawnq.h"
#include "spawnq_util.h"
#include "test.h"

#define STAMP 0x5EEDF00DCAFEULL

/* ---- spawnq_chained_steal ---------------------------------------------- */

/* Shared state of the threaded tests: every node must be run exactly once. */
typedef struct {
  item *items;
  long n;
  _Atomic unsigned char *seen;
  ty__inject inj;
  _Atomic long done;   /* nodes run (flushed from per-thread counts) */
  _Atomic int bad;     /* set on a duplicate, a bad stamp or a bad id */
  _Atomic long steals; /* successful steals, by kind (see users) */
  _Atomic long chained;
  _Atomic long injected;
  int work; /* steps of fake work per node */
} pool;

static void pool_init(pool *p, long n, int work) {
  p->n = n;
  p->work = work;
  p->items = calloc((size_t)n, sizeof(item));
  p->seen = calloc((size_t)n, 1);
  if (p->items == NULL || p->seen == NULL) ty__die("out of memory");
  for (long i = 0; i < n; i++) p->items[i].id = i;
  ty__inject_init(&p->inj);
  atomic_init(&p->done, 0);
  atomic_init(&p->bad, 0);
  atomic_init(&p->steals, 0);
  atomic_init(&p->chained, 0);
  atomic_init(&p->injected, 0);
}

static void pool_free(pool *p) {
  ty__inject_destroy(&p->inj);
  free(p->items);
  free((void *)p->seen);
}

static int pool_finished(pool *p) {
  /* relaxed: a stop condition; pthread_join orders the final checks. */
  return atomic_load_explicit(&p->done, memory_order_relaxed) >= p->n;
}

static void pool_fail(pool *p) {
  atomic_store(&p->bad, 1);
  atomic_store(&p->done, p->n); /* stop everyone */
}

/* Owner side of a push: stamp the item, then publish it. */
static void pool_push(pool *p, ty__spawnq *q, long id) {
  item *it = &p->items[id];
  it->stamp = STAMP ^ (uint64_t)id;
  it->node.next = (ty__node *)0x1;
  ty__spawnq_push(q, &it->node, &p->inj);
}

/* "Runs" a node: checks it arrived intact and was not run before, then
 * burns p->work steps so that queues have time to fill and be stolen from. */
static void pool_run(pool *p, ty__node *n, long *local) {
  item *it = (item *)n;
  long id = it->id;
  if (id < 0 || id >= p->n || it->stamp != (STAMP ^ (uint64_t)id)) {
    pool_fail(p);
    return;
  }
  /* relaxed: a per-node count; the join orders the final scan. */
  if (atomic_fetch_add_explicit(&p->seen[id], 1, memory_order_relaxed) != 0)
    pool_fail(p);
  uint64_t x = (uint64_t)id;
  for (int i = 0; i < p->work; i++) {
    x = x * 6364136223846793005ULL + 1;
    __asm__ __volatile__("" : "+r"(x)); /* keep the loop */
  }
  if (++*local == 256) {
    atomic_fetch_add_explicit(&p->done, *local, memory_order_relaxed);
    *local = 0;
  }
}

/* Nodes pushed but not yet counted as run (approximate: counts lag). */
static long pool_in_flight(pool *p, long pushed) {
  return pushed - atomic_load_explicit(&p->done, memory_order_relaxed);
}

static void pool_flush(pool *p, long *local) {
  if (*local == 0) return;
  atomic_fetch_add_explicit(&p->done, *local, memory_order_relaxed);
  *local = 0;
}

/* Takes a few nodes from inject: runs one, queues the rest in q (whose owner
 * the caller is, and which is empty: they fit). Returns false if inject
 * looked empty. */
static bool pool_from_inject(pool *p, ty__spawnq *q, long *local) {
  ty__node *first;
  size_t got = ty__inject_pop_n(&p->inj, q->mask / 2 + 2, &first);
  if (got == 0) return false;
  atomic_fetch_add_explicit(&p->injected, (long)got, memory_order_relaxed);
  ty__node *rest = first->next;
  pool_run(p, first, local);
  while (rest != NULL) {
    ty__node *n = rest;
    rest = rest->next;
    ty__spawnq_push(q, n, &p->inj);
  }
  return true;
}

/* Waits until every node has run, failing the pool if none runs for `secs`:
 * a lost node must fail the test, not hang it until the harness kills it. */
static void pool_watch(pool *p, double secs) {
  long last = -1;
  double since = now_s();
  while (!pool_finished(p)) {
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
    long done = atomic_load(&p->done);
    if (done != last) {
      last = done;
      since = now_s();
    } else if (now_s() - since > secs) {
      fprintf(stderr, "stalled: %ld of %ld nodes ran\n", done, p->n);
      pool_fail(p);
    }
  }
}

static int pool_check(pool *p) {
  CHECK_EQ(atomic_load(&p->bad), 0);
  CHECK_EQ(atomic_load(&p->done), p->n);
  for (long i = 0; i < p->n; i++) CHECK_EQ(atomic_load(&p->seen[i]), 1);
  CHECK_EQ(ty__inject_len(&p->inj), 0);
  return 0;
}

typedef struct {
  pool *p;
  ty__spawnq *own;
  ty__spawnq *from;     /* steals from here */
  _Atomic long *steals; /* where successful steals are counted */
  int pushes;           /* the owner of A also produces */
  int uses_inject;
} chain_arg;

static void *chain_thread(void *v) {
  chain_arg *a = v;
  pool *p = a->p;
  long local = 0, next = 0;
  uint64_t rng = (uint64_t)(uintptr_t)a | 1;
  int idle = 0;

  while (!pool_finished(p)) {
    if (a->pushes && next < p->n && pool_in_flight(p, next) < 1024) {
      long burst = 1 + (long)(ty__rand_next(&rng) % 3);
      for (long i = 0; i < burst && next < p->n; i++)
        pool_push(p, a->own, next++);
    }
    ty__node *n = ty__spawnq_pop(a->own);
    if (n == NULL && a->from != NULL) {
      n = ty__spawnq_steal_into(a->from, a->own);
      if (n != NULL) atomic_fetch_add(a->steals, 1);
    }
    if (n != NULL) {
      pool_run(p, n, &local);
      idle = 0;
    } else if (a->uses_inject && pool_from_inject(p, a->own, &local)) {
      idle = 0;
    } else {
      /* Spin a little before yielding: C must catch B's queue non-empty. */
      pool_flush(p, &local);
      if (++idle % 64 == 0) sched_yield();
    }
  }
  pool_flush(p, &local);
  return NULL;
}

/* A stolen into B, B stolen into C, one step at a time. */
static int chained_sequential(void) {
  static item items[8];
  static ty__spawnq a, b, c;
  ty__inject inj;

  ty__inject_init(&inj);
  spawnq_at(&a, 4, UINT32_MAX);
  spawnq_at(&b, 4, 0);
  spawnq_at(&c, 4, UINT32_MAX - 1);
  for (long i = 0; i < 4; i++) push_id(&a, items, i, &inj);

  CHECK_EQ(id_of(ty__spawnq_steal_into(&a, &b)), 1); /* b: [0] */
  CHECK_EQ(id_of(ty__spawnq_steal_into(&b, &c)), 0); /* c: [] */
  CHECK_EQ(ty__spawnq_len(&b), 0);
  CHECK_EQ(ty__spawnq_len(&c), 0);
  CHECK_EQ(id_of(ty__spawnq_steal_into(&a, &b)), 2); /* a: [3] */
  push_id(&a, items, 4, &inj);
  push_id(&a, items, 5, &inj);
  push_id(&a, items, 6, &inj);
  CHECK_EQ(id_of(ty__spawnq_steal_into(&a, &b)), 4); /* b: [3] */
  CHECK_EQ(id_of(ty__spawnq_steal_into(&a, &c)), 5); /* c: [] */
  push_id(&b, items, 7, &inj);                       /* b: [3 7] */
  CHECK_EQ(id_of(ty__spawnq_steal_into(&b, &c)), 3); /* c: [] */
  CHECK_EQ(id_of(ty__spawnq_steal_into(&b, &c)), 7);
  CHECK_EQ(id_of(ty__spawnq_pop(&a)), 6);
  CHECK(ty__spawnq_pop(&a) == NULL);
  CHECK(ty__spawnq_pop(&b) == NULL);
  CHECK(ty__spawnq_pop(&c) == NULL);
  CHECK_EQ(ty__inject_len(&inj), 0);
  ty__inject_destroy(&inj);
  return 0;
}

/*
 * Rounds in which B's queue is at once the destination of B's steal from A
 * and the victim of C's steal, while A's owner pops and overflows: B's room
 * check then sees C's steal in progress. Every node is accounted for each
 * round; across rounds both kinds of steal must have happened.
 *
 * B and C live across rounds and meet A's owner at a barrier; short bounded
 * waits line the racers up (on a loaded machine one would otherwise finish
 * before the other starts) without ever blocking a round for long.
 */
typedef struct {
  ty__spawnq *victim;
  ty__spawnq *own;
  pthread_barrier_t *barrier;
  _Atomic int stealing;  /* set right before the steal attempts */
  _Atomic int *wait_for; /* if set: briefly wait for it before popping */
  _Atomic int *quit;
  int tries; /* steal attempts before giving up */
  long steals;
  int ngot;
  long got[32];
} round_arg;

static void spin_work(int steps) {
  uint64_t x = (uint64_t)steps;
  for (int i = 0; i < steps; i++) {
    x = x * 6364136223846793005ULL + 1;
    __asm__ __volatile__("" : "+r"(x)); /* keep the loop */
  }
}

/* Waits for *flag up to about 50 us; the round goes on either way. */
static void wait_briefly(_Atomic int *flag) {
  for (int i = 0; i < 2000 && !atomic_load(flag); i++) ty__cpu_relax();
}

static void round_turn(round_arg *a) {
  ty__node *n = NULL;
  atomic_store(&a->stealing, 1);
  for (int t = 0; t < a->tries && n == NULL; t++)
    n = ty__spawnq_steal_into(a->victim, a->own);
  a->steals += n != NULL;
  if (a->wait_for != NULL) wait_briefly(a->wait_for);
  if (n == NULL) n = ty__spawnq_pop(a->own); /* B still has its own two */
  for (; n != NULL; n = ty__spawnq_pop(a->own)) {
    a->got[a->ngot++] = id_of(n);
    spin_work(20);
  }
}

static void *round_thread(void *v) {
  round_arg *a = v;
  for (;;) {
    pthread_barrier_wait(a->barrier); /* round set up */
    if (atomic_load(a->quit)) return NULL;
    round_turn(a);
    pthread_barrier_wait(a->barrier); /* round done */
  }
}

/* A's side of one round, between the two barriers. */
static void round_owner(ty__spawnq *qa, round_arg *b, item *items,
                        ty__inject *inj, int seen[32]) {
  int popped = 0;
  wait_briefly(&b->stealing);
  for (ty__node *n; (n = ty__spawnq_pop(qa)) != NULL;) {
    seen[id_of(n)]++;
    spin_work(20);
    if (++popped == 2) /* three more: overflow if nothing was stolen */
      for (long i = 8; i < 11; i++) push_id(qa, items, i, inj);
  }
}

static int chained_round(ty__spawnq *qa, round_arg *b, round_arg *c,
                         ty__inject *inj, long round) {
  static item items[32];
  int seen[32] = {0};
  long ids[32];

  spawnq_at(qa, 8, UINT32_MAX - (uint32_t)(round % 16));
  spawnq_at(b->own, 4, (uint32_t)round);
  spawnq_at(c->own, 4, UINT32_MAX - 1);
  for (long i = 0; i < 8; i++) push_id(qa, items, i, inj);
  push_id(b->own, items, 20, inj); /* so that C has work even if B is late */
  push_id(b->own, items, 21, inj);
  b->ngot = c->ngot = 0;
  atomic_store(&b->stealing, 0);
  atomic_store(&c->stealing, 0);

  pthread_barrier_wait(b->barrier);
  round_owner(qa, b, items, inj, seen);
  pthread_barrier_wait(b->barrier);

  for (int k = 0; k < b->ngot; k++) seen[b->got[k]]++;
  for (int k = 0; k < c->ngot; k++) seen[c->got[k]]++;
  long m = drain_inject(inj, ids, 32);
  CHECK(m >= 0);
  for (long k = 0; k < m; k++) seen[ids[k]]++;
  for (int i = 0; i < 32; i++)
    CHECK_EQ(seen[i], i < 11 || i == 20 || i == 21 ? 1 : 0);
  return 0;
}

/* Runs the rounds; *ab and *bc count successful steals A->B and B->C. */
static int chained_rounds(long rounds, long *ab, long *bc) {
  static ty__spawnq qa, qb, qc;
  static round_arg b, c;
  static pthread_barrier_t barrier;
  _Atomic int quit = 0;
  pthread_t tb, tc;
  ty__inject inj;
  int rc = 0;

  ty__inject_init(&inj);
  CHECK_EQ(pthread_barrier_init(&barrier, NULL, 3), 0);
  b = (round_arg){.victim = &qa,
                  .own = &qb,
                  .barrier = &barrier,
                  .wait_for = &c.stealing,
                  .quit = &quit,
                  .tries = 1};
  c = (round_arg){.victim = &qb,
                  .own = &qc,
                  .barrier = &barrier,
                  .wait_for = NULL,
                  .quit = &quit,
                  .tries = 50};
  CHECK_EQ(pthread_create(&tb, NULL, round_thread, &b), 0);
  CHECK_EQ(pthread_create(&tc, NULL, round_thread, &c), 0);
  for (long r = 0; r < rounds && rc == 0; r++)
    rc = chained_round(&qa, &b, &c, &inj, r);
  if (rc != 0) return rc; /* the threads are stuck at the barrier: exit */
  atomic_store(&quit, 1);
  pthread_barrier_wait(&barrier);
  pthread_join(tb, NULL);
  pthread_join(tc, NULL);
  pthread_barrier_destroy(&barrier);
  ty__inject_destroy(&inj);
  *ab = b.steals;
  *bc = c.steals;
  return 0;
}

/* The same shape, continuously: A produces, B steals from A, C only from B. */
static int chained_continuous(void) {
  static ty__spawnq qa, qb, qc;
  pool p;
  pthread_t th[3];

  pool_init(&p, test_scaled(100000, 10000), 400);
  spawnq_at(&qa, 8, UINT32_MAX - 100);
  spawnq_at(&qb, 4, 0);
  spawnq_at(&qc, 4, UINT32_MAX - 3);
  chain_arg args[3] = {
      /* A: produces, runs its own, drains inject. */
      {&p, &qa, NULL, NULL, 1, 1},
      /* B: steals from A, drains inject. */
      {&p, &qb, &qa, &p.steals, 0, 1},
      /* C: steals only from B. */
      {&p, &qc, &qb, &p.chained, 0, 0},
  };
  for (int i = 0; i < 3; i++)
    CHECK_EQ(pthread_create(&th[i], NULL, chain_thread, &args[i]), 0);
  pool_watch(&p, 4);
  for (int i = 0; i < 3; i++) pthread_join(th[i], NULL);

  int rc = pool_check(&p);
  if (getenv("TY_TEST_VERBOSE"))
    fprintf(stderr, "chained: n=%ld A->B %ld B->C %ld via inject %ld\n", p.n,
            atomic_load(&p.steals), atomic_load(&p.chained),
            atomic_load(&p.injected));
  pool_free(&p);
  return rc;
}

TEST_IMPL(spawnq_chained_steal) {
  long ab = 0, bc = 0;
  long rounds = test_scaled(2000, 200);

  CHECK_EQ(chained_sequential(), 0);

  double t0 = now_s();
  CHECK_EQ(chained_rounds(rounds, &ab, &bc), 0);
  if (getenv("TY_TEST_VERBOSE"))
    fprintf(stderr, "chained rounds: %ld A->B %ld B->C %ld (%.2fs)\n", rounds,
            ab, bc, now_s() - t0);
  CHECK(ab > 0);
  CHECK(bc > 0);

  t0 = now_s();
  CHECK_EQ(chained_continuous(), 0);
  if (getenv("TY_TEST_VERBOSE"))
    fprintf(stderr, "chained continuous: %.2fs\n", now_s() - t0);
  return 0;
}

/* ---- spawnq_stress ----------------------------------------------------- */

enum { THIEVES = 4 };

typedef struct {
  pool *p;
  ty__spawnq *owner_q;
  ty__spawnq *thief_q[THIEVES];
  uint32_t cap;
} stress_t;

typedef struct {
  stress_t *st;
  int index; /* -1: the owner */
} stress_arg;

/* Anything to do for the owner of q? Runs it and returns true. */
static bool stress_step(stress_t *st, ty__spawnq *q, int self, uint64_t *rng,
                        long *local) {
  pool *p = st->p;
  ty__node *n = ty__spawnq_pop(q);

  if (n == NULL && q != st->owner_q) {
    n = ty__spawnq_steal_into(st->owner_q, q);
    if (n != NULL)
      atomic_fetch_add_explicit(&p->steals, 1, memory_order_relaxed);
  }
  if (n == NULL) {
    int victim = (int)(ty__rand_next(rng) % THIEVES);
    if (victim != self) {
      n = ty__spawnq_steal_into(st->thief_q[victim], q);
      if (n != NULL)
        atomic_fetch_add_explicit(&p->chained, 1, memory_order_relaxed);
    }
  }
  if (n != NULL) {
    pool_run(p, n, local);
    return true;
  }
  return pool_from_inject(p, q, local);
}

static void *stress_owner(void *v) {
  stress_arg *a = v;
  stress_t *st = a->st;
  pool *p = st->p;
  uint64_t rng = 0x243F6A8885A308D3ULL;
  long local = 0, next = 0;

  /* Bursts up to twice the ring: overflow is routine, not an accident. */
  while (next < p->n && !pool_finished(p)) {
    long burst = 1 + (long)(ty__rand_next(&rng) % (2 * st->cap));
    if (pool_in_flight(p, next) > 16 * (long)st->cap + 2048) burst = 0;
    long before = next;
    for (long i = 0; i < burst && next < p->n; i++)
      pool_push(p, st->owner_q, next++);
    if (before / 16384 != next / 16384) {
      /* Now and then leave our queue to the thieves alone, so that stealing
       * from it is sure to happen however the threads get scheduled. */
      while (ty__spawnq_len(st->owner_q) > 0 && !pool_finished(p))
        sched_yield();
    }
    long pops = (long)(ty__rand_next(&rng) % (burst / 2 + 2));
    for (long i = 0; i < pops; i++) {
      ty__node *n = ty__spawnq_pop(st->owner_q);
      if (n == NULL) break;
      pool_run(p, n, &local);
    }
  }
  /* Then help: own queue, the thieves' queues, inject. */
  while (!pool_finished(p)) {
    if (!stress_step(st, st->owner_q, -1, &rng, &local)) {
      pool_flush(p, &local);
      sched_yield();
    }
  }
  pool_flush(p, &local);
  return NULL;
}

static void *stress_thief(void *v) {
  stress_arg *a = v;
  stress_t *st = a->st;
  pool *p = st->p;
  uint64_t rng = 0x13198A2E03707344ULL * (uint64_t)(a->index + 1);
  ty__spawnq *q = st->thief_q[a->index];
  long local = 0;

  while (!pool_finished(p)) {
    if (!stress_step(st, q, a->index, &rng, &local)) {
      pool_flush(p, &local);
      sched_yield();
    }
  }
  pool_flush(p, &local);
  return NULL;
}

static ty__spawnq *spawnq_new(uint32_t cap, uint32_t start) {
  ty__spawnq *q = aligned_alloc(alignof(ty__spawnq), sizeof(ty__spawnq));
  if (q == NULL) ty__die("out of memory");
  spawnq_at(q, cap, start);
  return q;
}

static int stress_run(long n, uint32_t cap) {
  pool p;
  stress_t st;
  stress_arg args[THIEVES + 1];
  pthread_t th[THIEVES + 1];

  pool_init(&p, n, 20);
  st.p = &p;
  st.cap = cap;
  st.owner_q = spawnq_new(cap, UINT32_MAX - 5000); /* crosses the wrap */
  for (int i = 0; i < THIEVES; i++)
    st.thief_q[i] = spawnq_new(cap, (uint32_t)i * 0x40000000u);
  for (int i = 0; i <= THIEVES; i++) {
    args[i].st = &st;
    args[i].index = i - 1;
    CHECK_EQ(pthread_create(&th[i], NULL, i == 0 ? stress_owner : stress_thief,
                            &args[i]),
             0);
  }
  pool_watch(&p, 10);
  for (int i = 0; i <= THIEVES; i++) pthread_join(th[i], NULL);

  int rc = pool_check(&p);
  if (getenv("TY_TEST_VERBOSE"))
    fprintf(stderr, "stress cap %u: n=%ld steals %ld chained %ld inject %ld\n",
            cap, n, atomic_load(&p.steals), atomic_load(&p.chained),
            atomic_load(&p.injected));
  CHECK_EQ(rc, 0);
  /* Each path must have been taken, or the test proved little. */
  CHECK(atomic_load(&p.steals) > 0);
  CHECK(atomic_load(&p.injected) > 0);
  CHECK_EQ(ty__spawnq_len(st.owner_q), 0);
  for (int i = 0; i < THIEVES; i++) {
    CHECK_EQ(ty__spawnq_len(st.thief_q[i]), 0);
    free(st.thief_q[i]);
  }
  free(st.owner_q);
  pool_free(&p);
  return 0;
}

TEST_IMPL(spawnq_stress) {
  long total = test_scaled(10000000, 100000);
  long small = total / 5; /* a tiny ring: overflow and steal collide often */

  CHECK_EQ(stress_run(total - small, TY__SPAWNQ_CAP), 0);
  CHECK_EQ(stress_run(small, 4), 0);
  return 0;
}
