/*
 * test_spawnq.c - the per-worker spawn queue: FIFO order, overflow into the
 * inject queue, and stealing. Chained stealing and an owner racing several
 * stealers are in test_spawnq_chain.c. Indices are started near UINT32_MAX
 * where it matters, so the u32 wrap is crossed.
 */
#include <pthread.h>
#include <sched.h>
#include <string.h>
#include <time.h>

#include "sched/spawnq.h"
#include "spawnq_util.h"
#include "test.h"

/* Test only: pretends a stealer has claimed `claimed` nodes and is copying. */
static void fake_steal_begin(ty__spawnq *q, uint32_t claimed) {
  uint64_t h = atomic_load(&q->head);
  uint32_t real = (uint32_t)h;
  atomic_store(&q->head, ((uint64_t)real << 32) | (uint32_t)(real + claimed));
}

/* Test only: the stealer is done (what its second CAS does). */
static void fake_steal_end(ty__spawnq *q) {
  uint32_t real = (uint32_t)atomic_load(&q->head);
  atomic_store(&q->head, ((uint64_t)real << 32) | real);
}

/* ---- spawnq_basic ------------------------------------------------------ */

static int basic_one(uint32_t cap, uint32_t start) {
  static item items[TY__SPAWNQ_CAP];
  static ty__spawnq q;
  ty__inject inj;

  ty__inject_init(&inj);
  spawnq_at(&q, cap, start);
  CHECK(ty__spawnq_pop(&q) == NULL);
  CHECK_EQ(ty__spawnq_len(&q), 0);

  for (long i = 0; i < (long)cap; i++) {
    push_id(&q, items, i, &inj);
    CHECK_EQ(ty__spawnq_len(&q), i + 1);
  }
  CHECK_EQ(ty__inject_len(&inj), 0); /* exactly full is not overflow */
  for (long i = 0; i < (long)cap; i++) {
    CHECK_EQ(id_of(ty__spawnq_pop(&q)), i);
    CHECK_EQ(ty__spawnq_len(&q), (long)cap - i - 1);
  }
  CHECK(ty__spawnq_pop(&q) == NULL);

  /* Many rounds of varying depth: positions go around the ring many times. */
  for (long round = 0; round < 1000; round++) {
    long depth = 1 + round % (long)cap;
    for (long i = 0; i < depth; i++) push_id(&q, items, i, &inj);
    for (long i = 0; i < depth; i++) CHECK_EQ(id_of(ty__spawnq_pop(&q)), i);
    CHECK(ty__spawnq_pop(&q) == NULL);
  }
  CHECK_EQ(ty__inject_len(&inj), 0);
  ty__inject_destroy(&inj);
  return 0;
}

TEST_IMPL(spawnq_basic) {
  static const uint32_t caps[] = {2, 4, 256};
  static const uint32_t starts[] = {0, UINT32_MAX - 2, UINT32_MAX - 200};
  for (size_t c = 0; c < ty__countof(caps); c++)
    for (size_t s = 0; s < ty__countof(starts); s++)
      CHECK_EQ(basic_one(caps[c], starts[s]), 0);
  return 0;
}

/* ---- spawnq_overflow --------------------------------------------------- */

/* A full ring of cap plus one push: the second half and the new node go to
 * inject, in order; the first half stays. */
static int overflow_once(uint32_t cap, uint32_t start) {
  static item items[TY__SPAWNQ_CAP + 1];
  static long ids[TY__SPAWNQ_CAP + 1];
  static ty__spawnq q;
  ty__inject inj;
  long half = cap / 2;

  ty__inject_init(&inj);
  spawnq_at(&q, cap, start);
  for (long i = 0; i <= (long)cap; i++) push_id(&q, items, i, &inj);

  CHECK_EQ(ty__inject_len(&inj), half + 1);
  CHECK_EQ(ty__spawnq_len(&q), half);
  CHECK_EQ(drain_inject(&inj, ids, half + 1), half + 1);
  for (long i = 0; i <= half; i++) CHECK_EQ(ids[i], half + i);
  for (long i = 0; i < half; i++) CHECK_EQ(id_of(ty__spawnq_pop(&q)), i);
  CHECK(ty__spawnq_pop(&q) == NULL);
  ty__inject_destroy(&inj);
  return 0;
}

/* With a steal in progress, only the new node goes to inject. */
static int overflow_during_steal(void) {
  static item items[8];
  static long ids[8];
  static ty__spawnq q;
  ty__inject inj;

  ty__inject_init(&inj);
  spawnq_at(&q, 4, UINT32_MAX - 1);
  for (long i = 0; i < 4; i++) push_id(&q, items, i, &inj);
  fake_steal_begin(&q, 1); /* node 0 is being copied out */
  push_id(&q, items, 4, &inj);
  CHECK_EQ(ty__inject_len(&inj), 1);
  CHECK_EQ(ty__spawnq_len(&q), 3);
  CHECK_EQ(id_of(ty__spawnq_pop(&q)), 1); /* pop works during a steal */
  push_id(&q, items, 5, &inj);            /* slot of 0 is not free yet */
  CHECK_EQ(ty__inject_len(&inj), 2);
  fake_steal_end(&q);
  push_id(&q, items, 6, &inj); /* now it fits */
  CHECK_EQ(ty__inject_len(&inj), 2);
  CHECK_EQ(id_of(ty__spawnq_pop(&q)), 2);
  CHECK_EQ(id_of(ty__spawnq_pop(&q)), 3);
  CHECK_EQ(id_of(ty__spawnq_pop(&q)), 6);
  CHECK(ty__spawnq_pop(&q) == NULL);
  CHECK_EQ(drain_inject(&inj, ids, 8), 2);
  CHECK_EQ(ids[0], 4);
  CHECK_EQ(ids[1], 5);
  ty__inject_destroy(&inj);
  return 0;
}

/* Long run with pops mixed in: nothing lost or duplicated, the local pops
 * and the inject queue each see ids in increasing order. */
static int overflow_long(uint32_t cap, uint32_t start) {
  enum { N = 20000 };
  static item items[N];
  static long ids[N];
  static unsigned char seen[N];
  static ty__spawnq q;
  ty__inject inj;
  uint64_t rng = 12345 + cap;
  long last_local = -1, pushed = 0;

  memset(seen, 0, sizeof(seen));
  ty__inject_init(&inj);
  spawnq_at(&q, cap, start);
  while (pushed < N) {
    long burst = 1 + (long)(ty__rand_next(&rng) % (3 * cap));
    for (long i = 0; i < burst && pushed < N; i++)
      push_id(&q, items, pushed++, &inj);
    long pops = (long)(ty__rand_next(&rng) % (burst / 2 + 1));
    for (long i = 0; i < pops; i++) {
      long id = id_of(ty__spawnq_pop(&q));
      if (id < 0) break;
      CHECK(id > last_local);
      last_local = id;
      seen[id]++;
    }
  }
  for (ty__node *n; (n = ty__spawnq_pop(&q)) != NULL;) {
    CHECK(id_of(n) > last_local);
    last_local = id_of(n);
    seen[last_local]++;
  }
  long n = drain_inject(&inj, ids, N);
  CHECK(n > 0);
  for (long i = 0; i < n; i++) {
    CHECK(i == 0 || ids[i] > ids[i - 1]);
    seen[ids[i]]++;
  }
  for (long i = 0; i < N; i++) CHECK_EQ(seen[i], 1);
  ty__inject_destroy(&inj);
  return 0;
}

TEST_IMPL(spawnq_overflow) {
  CHECK_EQ(overflow_once(2, 0), 0);
  CHECK_EQ(overflow_once(4, 0), 0);
  CHECK_EQ(overflow_once(4, UINT32_MAX - 1), 0);
  CHECK_EQ(overflow_once(256, 0), 0);
  CHECK_EQ(overflow_once(256, UINT32_MAX - 100), 0);
  CHECK_EQ(overflow_during_steal(), 0);
  CHECK_EQ(overflow_long(4, UINT32_MAX - 7), 0);
  CHECK_EQ(overflow_long(256, UINT32_MAX - 1000), 0);
  return 0;
}

/* ---- spawnq_steal ------------------------------------------------------ */

static int steal_sequential(uint32_t start) {
  static item items[512];
  static ty__spawnq v, d;
  ty__inject inj;

  ty__inject_init(&inj);
  spawnq_at(&v, 256, start);
  spawnq_at(&d, 256, start + 77);

  /* Empty victim. */
  CHECK(ty__spawnq_steal_into(&v, &d) == NULL);

  /* Half, rounded up; the last stolen one comes back, the rest are in d. */
  for (long i = 0; i < 10; i++) push_id(&v, items, i, &inj);
  CHECK_EQ(id_of(ty__spawnq_steal_into(&v, &d)), 4);
  CHECK_EQ(ty__spawnq_len(&v), 5);
  CHECK_EQ(ty__spawnq_len(&d), 4);
  for (long i = 0; i < 4; i++) CHECK_EQ(id_of(ty__spawnq_pop(&d)), i);
  CHECK(ty__spawnq_pop(&d) == NULL);

  /* Odd count rounds up: 5 -> 3; then 2 -> 1; then 1 -> 1. */
  CHECK_EQ(id_of(ty__spawnq_steal_into(&v, &d)), 7);
  CHECK_EQ(ty__spawnq_len(&d), 2);
  CHECK_EQ(id_of(ty__spawnq_steal_into(&v, &d)), 8);
  CHECK_EQ(ty__spawnq_len(&d), 2);
  CHECK_EQ(id_of(ty__spawnq_steal_into(&v, &d)), 9);
  CHECK(ty__spawnq_steal_into(&v, &d) == NULL);
  CHECK_EQ(ty__spawnq_len(&v), 0);
  CHECK_EQ(id_of(ty__spawnq_pop(&d)), 5);
  CHECK_EQ(id_of(ty__spawnq_pop(&d)), 6);
  CHECK(ty__spawnq_pop(&d) == NULL);

  /* A steal in progress on the victim keeps others out. */
  for (long i = 0; i < 6; i++) push_id(&v, items, i, &inj);
  fake_steal_begin(&v, 1);
  CHECK(ty__spawnq_steal_into(&v, &d) == NULL);
  fake_steal_end(&v);
  CHECK_EQ(id_of(ty__spawnq_steal_into(&v, &d)), 3); /* 5 left -> 3 */
  CHECK_EQ(id_of(ty__spawnq_pop(&d)), 1);
  CHECK_EQ(id_of(ty__spawnq_pop(&d)), 2);
  CHECK_EQ(id_of(ty__spawnq_pop(&v)), 4);
  CHECK_EQ(id_of(ty__spawnq_pop(&v)), 5);
  CHECK(ty__spawnq_pop(&v) == NULL);

  ty__inject_destroy(&inj);
  return 0;
}

/* dst capacity limits: over half full gives up; a small dst takes less. */
static int steal_dst_limits(void) {
  static item items[512];
  static ty__spawnq v, d;
  ty__inject inj;

  ty__inject_init(&inj);
  spawnq_at(&v, 256, 0);
  spawnq_at(&d, 8, UINT32_MAX - 3);
  for (long i = 0; i < 200; i++) push_id(&v, items, i, &inj);

  for (long i = 300; i < 305; i++) push_id(&d, items, i, &inj); /* 5 > 8/2 */
  CHECK(ty__spawnq_steal_into(&v, &d) == NULL);
  CHECK_EQ(ty__spawnq_len(&v), 200);
  CHECK_EQ(id_of(ty__spawnq_pop(&d)), 300); /* 4 == 8/2: may steal 4 */
  CHECK_EQ(id_of(ty__spawnq_steal_into(&v, &d)), 3);
  CHECK_EQ(ty__spawnq_len(&d), 7);
  CHECK_EQ(ty__spawnq_len(&v), 196);
  for (long i = 301; i < 305; i++) CHECK_EQ(id_of(ty__spawnq_pop(&d)), i);
  for (long i = 0; i < 3; i++) CHECK_EQ(id_of(ty__spawnq_pop(&d)), i);
  CHECK(ty__spawnq_pop(&d) == NULL);
  CHECK_EQ(ty__inject_len(&inj), 0);

  /* An empty cap-2 dst has room 2: one node lands there, one comes back. */
  spawnq_at(&d, 2, 0);
  CHECK_EQ(id_of(ty__spawnq_steal_into(&v, &d)), 5);
  CHECK_EQ(id_of(ty__spawnq_pop(&d)), 4);
  CHECK(ty__spawnq_pop(&d) == NULL);
  ty__inject_destroy(&inj);
  return 0;
}

/* loom's multi_stealer, repeated: an owner pops while two stealers steal.
 * The stealers live across rounds and meet the owner at a barrier. */
typedef struct {
  ty__spawnq *victim;
  ty__spawnq dst;
  pthread_barrier_t *barrier;
  _Atomic int *quit;
  long got[8];
  int ngot;
} stealer_arg;

static void *stealer_thread(void *p) {
  stealer_arg *a = p;
  for (;;) {
    pthread_barrier_wait(a->barrier); /* round set up */
    if (atomic_load(a->quit)) return NULL;
    ty__node *n = ty__spawnq_steal_into(a->victim, &a->dst);
    for (; n != NULL; n = ty__spawnq_pop(&a->dst)) a->got[a->ngot++] = id_of(n);
    pthread_barrier_wait(a->barrier); /* round done */
  }
}

/* One round: 6 pushed into a ring of 4 (3 overflow), then the race. */
static int steal_round(ty__spawnq *v, stealer_arg args[2], ty__inject *inj,
                       long r) {
  static item items[8];
  int seen[8] = {0};
  long ids[8];

  spawnq_at(v, 4, (uint32_t)(UINT32_MAX - (uint32_t)r % 8));
  for (long i = 0; i < 6; i++) push_id(v, items, i, inj);
  for (int t = 0; t < 2; t++) {
    args[t].ngot = 0;
    spawnq_at(&args[t].dst, 4, (uint32_t)r);
  }
  pthread_barrier_wait(args[0].barrier);
  for (ty__node *it; (it = ty__spawnq_pop(v)) != NULL;) seen[id_of(it)]++;
  pthread_barrier_wait(args[0].barrier);

  for (int t = 0; t < 2; t++)
    for (int k = 0; k < args[t].ngot; k++) seen[args[t].got[k]]++;
  long m = drain_inject(inj, ids, 8);
  CHECK_EQ(m, 3);
  for (long k = 0; k < m; k++) seen[ids[k]]++;
  for (int i = 0; i < 8; i++) CHECK_EQ(seen[i], i < 6 ? 1 : 0);
  return 0;
}

static int steal_threads(void) {
  static ty__spawnq v;
  static stealer_arg args[2];
  static pthread_barrier_t barrier;
  _Atomic int quit = 0;
  long rounds = test_scaled(2000, 200);
  pthread_t th[2];
  ty__inject inj;
  int rc = 0;

  ty__inject_init(&inj);
  CHECK_EQ(pthread_barrier_init(&barrier, NULL, 3), 0);
  for (int t = 0; t < 2; t++) {
    args[t].victim = &v;
    args[t].barrier = &barrier;
    args[t].quit = &quit;
    CHECK_EQ(pthread_create(&th[t], NULL, stealer_thread, &args[t]), 0);
  }
  for (long r = 0; r < rounds && rc == 0; r++)
    rc = steal_round(&v, args, &inj, r);
  if (rc != 0) return rc; /* the threads are stuck at the barrier: exit */
  atomic_store(&quit, 1);
  pthread_barrier_wait(&barrier);
  for (int t = 0; t < 2; t++) pthread_join(th[t], NULL);
  pthread_barrier_destroy(&barrier);
  ty__inject_destroy(&inj);
  return 0;
}

TEST_IMPL(spawnq_steal) {
  CHECK_EQ(steal_sequential(0), 0);
  CHECK_EQ(steal_sequential(UINT32_MAX - 4), 0);
  CHECK_EQ(steal_dst_limits(), 0);
  CHECK_EQ(steal_threads(), 0);
  return 0;
}
