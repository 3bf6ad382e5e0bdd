/*
 * test_inject.c - the global injection queue: FIFO order, batches, and many
 * producers against many consumers.
 */
#include <pthread.h>
#include <sched.h>
#include <string.h>

#include "sched/inject.h"
#include "test.h"

typedef struct {
  ty__node node; /* first: a ty__node * is an item * */
  long id;
} item;

static long id_of(ty__node *n) { return ((item *)n)->id; }

/* Walks a popped chain: checks it holds exactly `count` nodes, ends in NULL
 * and carries ids expect, expect + 1, ... Returns the next expected id, or -1
 * on a mismatch. */
static long check_chain(ty__node *first, size_t count, long expect) {
  size_t seen = 0;
  for (ty__node *it = first; it != NULL; it = it->next) {
    if (seen == count || id_of(it) != expect) return -1;
    seen++;
    expect++;
  }
  return seen == count ? expect : -1;
}

TEST_IMPL(inject_fifo) {
  enum { N = 1000 };
  static item items[N];
  ty__inject q;
  ty__node *first = (ty__node *)0x1;

  ty__inject_init(&q);
  CHECK_EQ(ty__inject_len(&q), 0);
  CHECK_EQ(ty__inject_pop_n(&q, 8, &first), 0);
  CHECK(first == NULL);

  for (long i = 0; i < N; i++) {
    items[i].id = i;
    items[i].node.next = (ty__node *)0x1; /* push must not trust it */
    ty__inject_push(&q, &items[i].node);
  }
  CHECK_EQ(ty__inject_len(&q), N);
  CHECK_EQ(ty__inject_pop_n(&q, 0, &first), 0);
  CHECK(first == NULL);
  CHECK_EQ(ty__inject_len(&q), N);

  /* Odd chunk sizes so that the last pop is short. */
  long expect = 0;
  while (expect < N) {
    size_t want = 7;
    size_t got = ty__inject_pop_n(&q, want, &first);
    size_t left = (size_t)(N - expect);
    CHECK_EQ(got, left < want ? left : want);
    expect = check_chain(first, got, expect);
    CHECK(expect >= 0);
    CHECK_EQ(ty__inject_len(&q), N - expect);
  }
  CHECK_EQ(ty__inject_pop_n(&q, 8, &first), 0);
  CHECK(first == NULL);

  /* Interleaved: the queue must come back to a sane state after emptying. */
  for (long i = 0; i < 3; i++) ty__inject_push(&q, &items[i].node);
  CHECK_EQ(ty__inject_pop_n(&q, 2, &first), 2);
  CHECK_EQ(check_chain(first, 2, 0), 2);
  for (long i = 3; i < 5; i++) ty__inject_push(&q, &items[i].node);
  CHECK_EQ(ty__inject_pop_n(&q, 100, &first), 3);
  CHECK_EQ(check_chain(first, 3, 2), 5);
  CHECK_EQ(ty__inject_len(&q), 0);
  ty__inject_push(&q, &items[5].node);
  CHECK_EQ(ty__inject_pop_n(&q, 1, &first), 1);
  CHECK_EQ(check_chain(first, 1, 5), 6);

  ty__inject_destroy(&q);
  return 0;
}

/* Links items[from..to) into a chain with a garbage tail link. */
static void link_range(item *items, long from, long to) {
  for (long i = from; i < to; i++) {
    items[i].id = i;
    items[i].node.next = i + 1 < to ? &items[i + 1].node : (ty__node *)0x1;
  }
}

TEST_IMPL(inject_batch) {
  enum { N = 64 };
  static item items[N];
  ty__inject q;
  ty__node *first;

  ty__inject_init(&q);
  link_range(items, 0, N);

  /* An empty batch changes nothing. */
  ty__inject_push_batch(&q, NULL, NULL, 0);
  CHECK_EQ(ty__inject_len(&q), 0);

  ty__inject_push_batch(&q, &items[0].node, &items[9].node, 10);
  CHECK_EQ(ty__inject_len(&q), 10);
  items[10].node.next = (ty__node *)0x1;
  ty__inject_push(&q, &items[10].node);
  link_range(items, 11, 40);
  ty__inject_push_batch(&q, &items[11].node, &items[39].node, 29);
  CHECK_EQ(ty__inject_len(&q), 40);

  /* One pop in the middle of a batch, one across batch boundaries. */
  CHECK_EQ(ty__inject_pop_n(&q, 5, &first), 5);
  CHECK_EQ(check_chain(first, 5, 0), 5);
  CHECK_EQ(ty__inject_pop_n(&q, 20, &first), 20);
  CHECK_EQ(check_chain(first, 20, 5), 25);

  /* A batch appended behind what is left keeps both orders. */
  link_range(items, 40, N);
  ty__inject_push_batch(&q, &items[40].node, &items[N - 1].node, N - 40);
  CHECK_EQ(ty__inject_len(&q), N - 25);
  CHECK_EQ(ty__inject_pop_n(&q, 1000, &first), N - 25);
  CHECK_EQ(check_chain(first, N - 25, 25), N);
  CHECK_EQ(ty__inject_len(&q), 0);

  /* A batch into an emptied queue. */
  link_range(items, 0, 3);
  ty__inject_push_batch(&q, &items[0].node, &items[2].node, 3);
  CHECK_EQ(ty__inject_pop_n(&q, 3, &first), 3);
  CHECK_EQ(check_chain(first, 3, 0), 3);
  CHECK_EQ(ty__inject_pop_n(&q, 3, &first), 0);

  ty__inject_destroy(&q);
  return 0;
}

/* ---- stress: P producers, C consumers ---------------------------------- */

enum { PRODUCERS = 3, CONSUMERS = 3 };

typedef struct {
  ty__inject q;
  item *items; /* producer p owns ids [p * per, (p + 1) * per) */
  long per;
  _Atomic unsigned char *seen;
  _Atomic long consumed;
  _Atomic int bad;
  _Atomic int produced; /* set once every producer has been joined */
} inject_stress_t;

typedef struct {
  inject_stress_t *st;
  int index;
} inject_arg;

static void *inject_producer(void *p) {
  inject_arg *a = p;
  inject_stress_t *st = a->st;
  uint64_t rng = 0x9E3779B97F4A7C15ULL * (uint64_t)(a->index + 1);
  long base = a->index * st->per;
  long i = 0;

  while (i < st->per) {
    long n = 1 + (long)(ty__rand_next(&rng) % 32);
    if (n > st->per - i) n = st->per - i;
    item *it = &st->items[base + i];
    for (long k = 0; k < n; k++) {
      it[k].id = base + i + k;
      it[k].node.next = k + 1 < n ? &it[k + 1].node : NULL;
    }
    if (n == 1) ty__inject_push(&st->q, &it[0].node);
    else ty__inject_push_batch(&st->q, &it[0].node, &it[n - 1].node, (size_t)n);
    i += n;
  }
  return NULL;
}

/* Checks one popped chain: its length, and that each producer's ids keep
 * rising (the queue is FIFO and one consumer's pops are ordered by the lock). */
static int consume_chain(inject_stress_t *st, ty__node *first, size_t got,
                         long last[PRODUCERS]) {
  size_t n = 0;
  for (ty__node *it = first; it != NULL; it = it->next) {
    long id = id_of(it);
    if (id < 0 || id >= PRODUCERS * st->per) return -1;
    long p = id / st->per;
    if (id <= last[p]) return -1;
    last[p] = id;
    /* relaxed: only the count matters; the join orders the final scan. */
    if (atomic_fetch_add_explicit(&st->seen[id], 1, memory_order_relaxed))
      return -1;
    n++;
  }
  return n == got ? 0 : -1;
}

static void *inject_consumer(void *p) {
  inject_arg *a = p;
  inject_stress_t *st = a->st;
  uint64_t rng = 0xD1B54A32D192ED03ULL * (uint64_t)(a->index + 1);
  long last[PRODUCERS];
  long total = PRODUCERS * st->per;

  for (int i = 0; i < PRODUCERS; i++) last[i] = -1;
  /* relaxed: a stop condition; the join orders the results. */
  while (atomic_load_explicit(&st->consumed, memory_order_relaxed) < total) {
    ty__node *first;
    size_t max = 1 + ty__rand_next(&rng) % 64;
    /* seq_cst: read before the pop, so that "all pushed" plus an empty pop
     * really means empty (a lost node ends the test instead of hanging it). */
    int produced = atomic_load(&st->produced);
    size_t got = ty__inject_pop_n(&st->q, max, &first);
    if (got == 0) {
      if (produced) break;
      sched_yield();
      continue;
    }
    if (got > max || consume_chain(st, first, got, last) != 0) {
      atomic_store_explicit(&st->bad, 1, memory_order_relaxed);
      /* relaxed: just stop everyone. */
      atomic_store_explicit(&st->consumed, total, memory_order_relaxed);
      break;
    }
    atomic_fetch_add_explicit(&st->consumed, (long)got, memory_order_relaxed);
  }
  return NULL;
}

TEST_IMPL(inject_stress) {
  inject_stress_t st;
  pthread_t th[PRODUCERS + CONSUMERS];
  inject_arg args[PRODUCERS + CONSUMERS];

  st.per = test_scaled(1000000, 20000);
  long total = PRODUCERS * st.per;
  st.items = calloc((size_t)total, sizeof(item));
  st.seen = calloc((size_t)total, 1);
  CHECK(st.items != NULL && st.seen != NULL);
  atomic_init(&st.consumed, 0);
  atomic_init(&st.bad, 0);
  atomic_init(&st.produced, 0);
  ty__inject_init(&st.q);

  for (int i = 0; i < PRODUCERS + CONSUMERS; i++) {
    args[i].st = &st;
    args[i].index = i < PRODUCERS ? i : i - PRODUCERS;
    void *(*fn)(void *) = i < PRODUCERS ? inject_producer : inject_consumer;
    CHECK_EQ(pthread_create(&th[i], NULL, fn, &args[i]), 0);
  }
  for (int i = 0; i < PRODUCERS; i++) pthread_join(th[i], NULL);
  atomic_store(&st.produced, 1);
  for (int i = PRODUCERS; i < PRODUCERS + CONSUMERS; i++)
    pthread_join(th[i], NULL);

  CHECK_EQ(atomic_load(&st.bad), 0);
  CHECK_EQ(atomic_load(&st.consumed), total);
  for (long i = 0; i < total; i++) CHECK_EQ(atomic_load(&st.seen[i]), 1);
  CHECK_EQ(ty__inject_len(&st.q), 0);
  ty__node *first;
  CHECK_EQ(ty__inject_pop_n(&st.q, 1, &first), 0);

  ty__inject_destroy(&st.q);
  free(st.items);
  free((void *)st.seen);
  return 0;
}
