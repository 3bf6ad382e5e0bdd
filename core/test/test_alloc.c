/*
 * test_alloc.c - the small-block allocator (core/base/alloc.c): blocks freed
 * by another thread go home to their owner, and many threads allocating,
 * handing blocks over, freeing them and exiting lose or tear none (run under
 * `make tsan` for the remote-free lists' memory orders).
 */
#include <pthread.h>
#include <string.h>

#include "base/alloc.h"
#include "test.h"

static void *free_it(void *p) {
  ty__free(p, 48);
  return NULL;
}

/* A block that another thread frees is the next one its owner gets (the
 * remote-free lists; mimalloc builds only check the round trip). */
TEST_IMPL(alloc_remote_home) {
  ty__alloc_thread_init();
  void *p = ty__alloc(48);
  memset(p, 0xab, 48);
  pthread_t t;
  CHECK_EQ(pthread_create(&t, NULL, free_it, p), 0);
  pthread_join(t, NULL);
  void *q = ty__alloc(48);
#ifndef TY_MIMALLOC
  CHECK(q == p);
#endif
  ty__free(q, 48);
  ty__alloc_thread_exit();
  return 0;
}

/* Batches of blocks pass through one queue between THREADS threads; each
 * block carries its size and a pattern that the freeing thread checks. Every
 * thread exits and comes back (a fresh cache or a reused one) every few
 * rounds while blocks it allocated are still in others' hands. */
#define THREADS 4
#define BATCH 64
#define QCAP 64

typedef struct {
  unsigned char *b[BATCH];
  unsigned seed;
} batch;

static struct {
  pthread_mutex_t lock;
  batch q[QCAP];
  int head, len;
  long rounds;
} g = {.lock = PTHREAD_MUTEX_INITIALIZER};

static _Atomic long g_checked, g_bad;

static size_t size_of(unsigned r) { return 1 + r % 600; } /* some > MAX */

static void fill(batch *bt, unsigned seed) {
  bt->seed = seed;
  for (int i = 0; i < BATCH; i++) {
    size_t n = size_of(seed + i);
    unsigned char *p = ty__alloc(n);
    p[0] = (unsigned char)(n & 0xff);
    memset(p + 1, (int)((n >> 8) + 1), n - 1);
    bt->b[i] = p;
  }
}

static void drain(batch *bt) {
  for (int i = 0; i < BATCH; i++) {
    size_t n = size_of(bt->seed + i);
    unsigned char *p = bt->b[i];
    long bad = p[0] != (unsigned char)(n & 0xff);
    for (size_t j = 1; j < n; j++) bad |= p[j] != (unsigned char)((n >> 8) + 1);
    /* relaxed: counters read after every thread is joined. */
    atomic_fetch_add_explicit(&g_bad, bad, memory_order_relaxed);
    ty__free(p, n);
  }
  atomic_fetch_add_explicit(&g_checked, BATCH, memory_order_relaxed);
}

static void *churn(void *arg) {
  unsigned seed = (unsigned)(size_t)arg * 7919u;
  ty__alloc_thread_init();
  for (long r = 0; r < g.rounds; r++) {
    batch mine, theirs = {0};
    bool got = false;
    fill(&mine, seed + (unsigned)r);
    pthread_mutex_lock(&g.lock);
    if (g.len == QCAP) { /* full: take one first */
      theirs = g.q[g.head];
      g.head = (g.head + 1) % QCAP;
      g.len--;
      got = true;
    }
    g.q[(g.head + g.len) % QCAP] = mine;
    g.len++;
    if (!got && g.len > QCAP / 2) {
      theirs = g.q[g.head];
      g.head = (g.head + 1) % QCAP;
      g.len--;
      got = true;
    }
    pthread_mutex_unlock(&g.lock);
    if (got) drain(&theirs);
    if (r % 97 == 96) { /* exit and come back with blocks in flight */
      ty__alloc_thread_exit();
      ty__alloc_thread_init();
    }
  }
  ty__alloc_thread_exit();
  return NULL;
}

TEST_IMPL(alloc_stress) {
  g.rounds = test_scaled(20000, 500);
  pthread_t th[THREADS];
  for (size_t i = 0; i < THREADS; i++)
    CHECK_EQ(pthread_create(&th[i], NULL, churn, (void *)i), 0);
  for (size_t i = 0; i < THREADS; i++) pthread_join(th[i], NULL);
  /* what is left is freed by this thread, which has no cache */
  while (g.len) {
    drain(&g.q[g.head]);
    g.head = (g.head + 1) % QCAP;
    g.len--;
  }
  /* seq_cst loads after the joins, which ordered every thread's adds. */
  CHECK_EQ(atomic_load(&g_bad), 0);
  CHECK_EQ(atomic_load(&g_checked), THREADS * g.rounds * BATCH);
  return 0;
}
