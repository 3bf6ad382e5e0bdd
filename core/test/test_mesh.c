/*
 * test_mesh.c - the N x N SPSC mesh: order, visibility only after publish,
 * fullness and u32 wraparound, and a multi-thread stress in which every
 * ordered pair of threads streams a numbered sequence through small rings.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <string.h>
#include <time.h>

#include "sched/mesh.h"
#include "test.h"

typedef struct {
  ty__node node; /* first: a ty__node * is a msg * */
  uint32_t from;
  uint32_t seq;
} msg;

static msg *as_msg(ty__node *n) { return (msg *)(void *)n; }

/* Puts every index of ring (from, to) at `at`, as if it had carried `at`
 * entries. Single-threaded tests only. */
static void ring_set_indices(ty__mesh *m, unsigned from, unsigned to,
                             uint32_t at) {
  ty__ring *r = ty__mesh_ring(m, from, to);
  atomic_store(&r->tail, at);
  atomic_store(&r->head, at);
  r->staged = r->head_cache = r->tail_cache = at;
}

TEST_IMPL(mesh_basic) {
  ty__mesh m;
  msg a[8], b[4];
  ty__node *out[16];

  CHECK_EQ(ty__mesh_init(&m, 3, 8), 0);
  for (unsigned i = 0; i < 3; i++) CHECK(!ty__mesh_has_incoming(&m, i));
  CHECK_EQ(ty__mesh_drain(&m, 1, 0, out, 16), 0);
  CHECK(!ty__mesh_publish(&m, 0, 1)); /* nothing staged */

  /* Staged but unpublished: invisible to every query of the consumer. */
  for (uint32_t i = 0; i < 5; i++) CHECK(ty__mesh_push(&m, 0, 1, &a[i].node));
  CHECK_EQ(ty__mesh_staged(&m, 0, 1), 5);
  CHECK(!ty__mesh_has_incoming(&m, 1));
  CHECK_EQ(ty__mesh_backlog(&m, 0, 1), 0);
  CHECK_EQ(ty__mesh_drain(&m, 1, 0, out, 16), 0);

  /* A second producer into the same consumer, kept apart. */
  for (uint32_t i = 0; i < 3; i++) CHECK(ty__mesh_push(&m, 2, 1, &b[i].node));

  CHECK(ty__mesh_publish(&m, 0, 1));
  CHECK(!ty__mesh_publish(&m, 0, 1)); /* already published */
  CHECK_EQ(ty__mesh_staged(&m, 0, 1), 0);
  CHECK(ty__mesh_has_incoming(&m, 1));
  CHECK(!ty__mesh_has_incoming(&m, 0));
  CHECK(!ty__mesh_has_incoming(&m, 2));
  CHECK_EQ(ty__mesh_backlog(&m, 0, 1), 5);
  CHECK_EQ(ty__mesh_backlog(&m, 2, 1), 0); /* still staged */
  CHECK_EQ(ty__mesh_backlog(&m, 1, 0), 0);

  /* Later pushes stay invisible until their own publish. */
  for (uint32_t i = 5; i < 7; i++) CHECK(ty__mesh_push(&m, 0, 1, &a[i].node));

  CHECK_EQ(ty__mesh_drain(&m, 1, 0, out, 0), 0);
  CHECK_EQ(ty__mesh_drain(&m, 1, 0, out, 2), 2);
  CHECK(out[0] == &a[0].node);
  CHECK(out[1] == &a[1].node);
  CHECK_EQ(ty__mesh_backlog(&m, 0, 1), 3);
  CHECK_EQ(ty__mesh_drain(&m, 1, 0, out, 16), 3);
  CHECK(out[0] == &a[2].node);
  CHECK(out[1] == &a[3].node);
  CHECK(out[2] == &a[4].node);
  CHECK_EQ(ty__mesh_drain(&m, 1, 0, out, 16), 0); /* a[5], a[6] staged */
  CHECK_EQ(ty__mesh_backlog(&m, 0, 1), 0);
  CHECK(!ty__mesh_has_incoming(&m, 1)); /* ring 2 -> 1 is still staged */

  CHECK(ty__mesh_publish(&m, 2, 1));
  CHECK(ty__mesh_has_incoming(&m, 1));
  CHECK_EQ(ty__mesh_drain(&m, 1, 2, out, 16), 3);
  for (uint32_t i = 0; i < 3; i++) CHECK(out[i] == &b[i].node);

  CHECK(ty__mesh_publish(&m, 0, 1));
  CHECK_EQ(ty__mesh_drain(&m, 1, 0, out, 16), 2);
  CHECK(out[0] == &a[5].node);
  CHECK(out[1] == &a[6].node);

  for (unsigned i = 0; i < 3; i++) CHECK(!ty__mesh_has_incoming(&m, i));

  /* The diagonal is a valid, always empty ring for everything but push (a
   * shutdown sweep may drain every (from, to) pair). */
  CHECK_EQ(ty__mesh_drain(&m, 1, 1, out, 16), 0);
  CHECK(!ty__mesh_publish(&m, 1, 1));
  CHECK_EQ(ty__mesh_staged(&m, 1, 1), 0);
  CHECK_EQ(ty__mesh_backlog(&m, 1, 1), 0);
  ty__mesh_destroy(&m);

  /* Bad geometry is refused, not half-built. */
  CHECK_EQ(ty__mesh_init(&m, 0, 8), -EINVAL);
  CHECK_EQ(ty__mesh_init(&m, 2, 1), -EINVAL);
  CHECK_EQ(ty__mesh_init(&m, 2, 12), -EINVAL);
  CHECK_EQ(ty__mesh_init(&m, 2, 1u << 31), -EINVAL);

  /* One worker: no ring, nothing incoming. */
  CHECK_EQ(ty__mesh_init(&m, 1, 2), 0);
  CHECK(!ty__mesh_has_incoming(&m, 0));
  ty__mesh_destroy(&m);
  return 0;
}

/* Fills ring 0 -> 1 (cap 8) starting from index `start`, and streams 1000
 * entries through it in uneven pieces; checks fullness and order throughout. */
static int full_from(uint32_t start) {
  enum { CAP = 8, TOTAL = 1000 };
  ty__mesh m;
  static msg items[TOTAL];
  ty__node *out[CAP * 2];
  uint32_t sent = 0, got = 0;

  CHECK_EQ(ty__mesh_init(&m, 2, CAP), 0);
  ring_set_indices(&m, 0, 1, start);
  ring_set_indices(&m, 1, 0, start);

  /* Full while staged: the consumer sees none of it. */
  for (uint32_t i = 0; i < CAP; i++)
    CHECK(ty__mesh_push(&m, 0, 1, &items[sent++].node));
  CHECK(!ty__mesh_push(&m, 0, 1, &items[sent].node));
  CHECK_EQ(ty__mesh_staged(&m, 0, 1), CAP);
  CHECK_EQ(ty__mesh_drain(&m, 1, 0, out, CAP * 2), 0);
  CHECK(!ty__mesh_has_incoming(&m, 1));

  /* Full while published. */
  CHECK(ty__mesh_publish(&m, 0, 1));
  CHECK(!ty__mesh_push(&m, 0, 1, &items[sent].node));
  CHECK_EQ(ty__mesh_backlog(&m, 0, 1), CAP);

  /* Room again, exactly as much as was drained. */
  CHECK_EQ(ty__mesh_drain(&m, 1, 0, out, 3), 3);
  for (uint32_t i = 0; i < 3; i++) CHECK(out[i] == &items[got++].node);
  for (uint32_t i = 0; i < 3; i++)
    CHECK(ty__mesh_push(&m, 0, 1, &items[sent++].node));
  CHECK(!ty__mesh_push(&m, 0, 1, &items[sent].node));
  CHECK(ty__mesh_publish(&m, 0, 1));
  CHECK_EQ(ty__mesh_backlog(&m, 0, 1), CAP);

  /* Stream the rest in pieces of 1..CAP+1, crossing the index wrap when
   * start is near UINT32_MAX. */
  uint32_t k = 0;
  while (got < TOTAL) {
    uint32_t want = 1 + (k++ % (CAP + 1));
    for (uint32_t i = 0; i < want && sent < TOTAL; i++) {
      if (!ty__mesh_push(&m, 0, 1, &items[sent].node)) {
        /* Only ever because the ring is full of staged or published
         * entries. */
        CHECK_EQ(ty__mesh_backlog(&m, 0, 1) + ty__mesh_staged(&m, 0, 1), CAP);
        break;
      }
      sent++;
    }
    if (k % 3 != 0) ty__mesh_publish(&m, 0, 1); /* sometimes stay staged */
    size_t n = ty__mesh_drain(&m, 1, 0, out, 1 + k % (CAP * 2));
    for (size_t i = 0; i < n; i++) CHECK(out[i] == &items[got++].node);
    CHECK(got <= sent);
    if (n == 0 && ty__mesh_staged(&m, 0, 1) == 0) CHECK_EQ(got, sent);
  }
  CHECK_EQ(sent, TOTAL);
  CHECK(!ty__mesh_publish(&m, 0, 1));
  CHECK(!ty__mesh_has_incoming(&m, 1));
  CHECK_EQ(ty__mesh_backlog(&m, 0, 1), 0);
  /* The indices really went round: start + TOTAL, mod 2^32. */
  CHECK_EQ(atomic_load(&ty__mesh_ring(&m, 0, 1)->head),
           (uint32_t)(start + TOTAL));
  /* The other direction was not disturbed. */
  CHECK_EQ(atomic_load(&ty__mesh_ring(&m, 1, 0)->tail), start);
  ty__mesh_destroy(&m);
  return 0;
}

TEST_IMPL(mesh_full) {
  CHECK_EQ(full_from(0), 0);
  CHECK_EQ(full_from(UINT32_MAX - 5), 0);   /* wraps while filling */
  CHECK_EQ(full_from(UINT32_MAX - 500), 0); /* wraps while streaming */
  CHECK_EQ(full_from(UINT32_MAX), 0);
  CHECK_EQ(full_from((uint32_t)INT32_MAX - 3), 0); /* the sign bit flips */

  /* Capacity 2, the smallest. */
  ty__mesh m;
  msg x[3];
  ty__node *out[2];
  CHECK_EQ(ty__mesh_init(&m, 2, 2), 0);
  ring_set_indices(&m, 1, 0, UINT32_MAX);
  CHECK(ty__mesh_push(&m, 1, 0, &x[0].node));
  CHECK(ty__mesh_push(&m, 1, 0, &x[1].node));
  CHECK(!ty__mesh_push(&m, 1, 0, &x[2].node));
  CHECK(ty__mesh_publish(&m, 1, 0));
  CHECK_EQ(ty__mesh_drain(&m, 0, 1, out, 1), 1);
  CHECK(out[0] == &x[0].node);
  CHECK(ty__mesh_push(&m, 1, 0, &x[2].node));
  CHECK(ty__mesh_publish(&m, 1, 0));
  CHECK_EQ(ty__mesh_drain(&m, 0, 1, out, 2), 2);
  CHECK(out[0] == &x[1].node);
  CHECK(out[1] == &x[2].node);

  /* What a third thread's backlog may read: a stale tail behind a newer
   * head, or a stale head far behind a newer tail. Hints stay in [0, cap]. */
  ty__ring *r = ty__mesh_ring(&m, 0, 1);
  ring_set_indices(&m, 0, 1, UINT32_MAX - 1);
  atomic_store(&r->head, 1u); /* "ahead" of tail, across the wrap */
  CHECK_EQ(ty__mesh_backlog(&m, 0, 1), 0);
  atomic_store(&r->head, UINT32_MAX - 1);
  atomic_store(&r->tail, 5u); /* 7 ahead of head, cap is 2 */
  CHECK_EQ(ty__mesh_backlog(&m, 0, 1), 2);
  ty__mesh_destroy(&m);
  return 0;
}

/* --- stress ------------------------------------------------------------- */

enum { ST_THREADS = 4, ST_CAP = 8, ST_MAX_BATCH = 24, ST_MAX_OVERFLOW = 64 };

typedef struct {
  ty__mesh mesh;
  uint32_t per_pair;                 /* messages each thread sends each peer */
  msg *msgs[ST_THREADS][ST_THREADS]; /* [from][to], per_pair each */
  pthread_barrier_t start;
  _Atomic int failed; /* first failure stops everybody */
  uint64_t seed;
} stress;

typedef struct {
  stress *s;
  unsigned id;
  uint64_t rng;
  /* Sending side, per destination. */
  uint32_t next[ST_THREADS];     /* next sequence number to create */
  ty__node *ov_head[ST_THREADS]; /* overflow list: FIFO, older than any */
  ty__node *ov_tail[ST_THREADS]; /* entry the ring has not taken yet */
  uint32_t ov_len[ST_THREADS];
  /* Receiving side, per source. */
  uint32_t expect[ST_THREADS];
  /* Stats, for the suspicious. */
  uint64_t push_fails, publishes, yields;
  char err[160];
} worker;

#define ST_FAIL(w, ...)                                                        \
  do {                                                                         \
    snprintf((w)->err, sizeof((w)->err), __VA_ARGS__);                         \
    /* relaxed: only a stop flag; the message is read after join. */           \
    atomic_store_explicit(&(w)->s->failed, 1, memory_order_relaxed);           \
    return NULL;                                                               \
  } while (0)

static void ov_append(worker *w, unsigned to, ty__node *n) {
  n->next = NULL;
  if (w->ov_tail[to]) w->ov_tail[to]->next = n;
  else w->ov_head[to] = n;
  w->ov_tail[to] = n;
  w->ov_len[to]++;
}

/* Moves overflow entries into the ring, oldest first, until it is full.
 * Returns true if the overflow list is now empty. */
static bool ov_flush(worker *w, unsigned to) {
  ty__mesh *m = &w->s->mesh;
  while (w->ov_head[to]) {
    ty__node *n = w->ov_head[to];
    ty__node *next = n->next; /* read before the consumer may own n */
    if (!ty__mesh_push(m, w->id, to, n)) {
      w->push_fails++;
      return false;
    }
    w->ov_head[to] = next;
    if (!next) w->ov_tail[to] = NULL;
    w->ov_len[to]--;
  }
  return true;
}

/* One send turn toward `to`: flush the overflow, then create up to `batch`
 * new messages, pushing them or (behind any overflow) queueing them. The
 * publish is the caller's. Returns true if anything moved. */
static bool send_some(worker *w, unsigned to, uint32_t batch) {
  stress *s = w->s;
  bool moved = false;
  uint32_t before = w->ov_len[to];
  bool clear = ov_flush(w, to);
  moved = w->ov_len[to] != before;
  for (uint32_t i = 0; i < batch && w->next[to] < s->per_pair; i++) {
    if (!clear && w->ov_len[to] >= ST_MAX_OVERFLOW) break;
    msg *x = &s->msgs[w->id][to][w->next[to]];
    /* Written now, by the sender, so that only the mesh's release/acquire
     * can make it visible to the receiver. */
    x->from = w->id;
    x->seq = w->next[to]++;
    moved = true;
    if (clear && ty__mesh_push(&s->mesh, w->id, to, &x->node)) continue;
    if (clear) w->push_fails++;
    clear = false;
    ov_append(w, to, &x->node);
  }
  return moved;
}

static bool recv_some(worker *w, unsigned from, size_t max, bool *bad) {
  stress *s = w->s;
  ty__node *out[ST_MAX_BATCH];
  size_t n = ty__mesh_drain(&s->mesh, w->id, from, out, max);
  for (size_t i = 0; i < n; i++) {
    msg *x = as_msg(out[i]);
    uint32_t want = w->expect[from];
    if (x != &s->msgs[from][w->id][want] || x->from != from || x->seq != want) {
      snprintf(w->err, sizeof(w->err),
               "thread %u from %u: expected seq %u, got %p (from %u seq %u)",
               w->id, from, want, (void *)x, x->from, x->seq);
      *bad = true;
      return false;
    }
    w->expect[from] = want + 1;
  }
  return n > 0;
}

static void *stress_thread(void *arg) {
  worker *w = arg;
  stress *s = w->s;
  ty__mesh *m = &s->mesh;
  unsigned me = w->id;
  uint32_t unpublished = 0, publish_at = 1;

  pthread_barrier_wait(&s->start);
  for (;;) {
    /* relaxed: a stop flag only. */
    if (atomic_load_explicit(&s->failed, memory_order_relaxed)) return NULL;
    bool progress = false, done = true;

    /* Send a random batch to a random peer. */
    unsigned to = (unsigned)(ty__rand_next(&w->rng) % (ST_THREADS - 1));
    if (to >= me) to++;
    uint32_t batch = 1 + (uint32_t)(ty__rand_next(&w->rng) % ST_MAX_BATCH);
    progress |= send_some(w, to, batch);
    unpublished += batch;

    /* Publish every peer once enough was produced (a random threshold), the
     * way a worker flushes at a batch size or at the end of its poll. */
    if (unpublished >= publish_at) {
      for (unsigned d = 0; d < ST_THREADS; d++)
        if (d != me && ty__mesh_publish(m, me, d)) w->publishes++;
      unpublished = 0;
      publish_at = 1 + (uint32_t)(ty__rand_next(&w->rng) % (ST_CAP * 4));
    }

    /* Drain every peer by a random amount. */
    for (unsigned f = 0; f < ST_THREADS; f++) {
      if (f == me) continue;
      size_t max = 1 + ty__rand_next(&w->rng) % ST_MAX_BATCH;
      bool bad = false;
      progress |= recv_some(w, f, max, &bad);
      if (bad) {
        atomic_store_explicit(&s->failed, 1, memory_order_relaxed);
        return NULL;
      }
      if (w->expect[f] != s->per_pair) done = false;
    }

    /* A third party's view of a ring it does not own is a hint within
     * [0, cap]. */
    unsigned a = (unsigned)(ty__rand_next(&w->rng) % ST_THREADS);
    unsigned b = (unsigned)(ty__rand_next(&w->rng) % ST_THREADS);
    if (a != b && ty__mesh_backlog(m, a, b) > ST_CAP)
      ST_FAIL(w, "backlog(%u, %u) above capacity", a, b);

    for (unsigned d = 0; d < ST_THREADS; d++) {
      if (d == me) continue;
      if (w->next[d] != s->per_pair || w->ov_head[d] ||
          ty__mesh_staged(m, me, d) != 0)
        done = false;
    }
    if (done) return NULL;
    if (!progress) {
      /* Everything is full or empty: let the peers run (4 threads on 2
       * cores would otherwise burn whole time slices). Publish first, or
       * staged entries could wait on a peer that waits on us. */
      for (unsigned d = 0; d < ST_THREADS; d++)
        if (d != me) ty__mesh_publish(m, me, d);
      w->yields++;
      sched_yield();
    }
  }
}

TEST_IMPL(mesh_stress) {
  static stress s;
  static worker w[ST_THREADS];
  pthread_t th[ST_THREADS];
  long total = test_scaled(4000000, 100000);
  unsigned pairs = ST_THREADS * (ST_THREADS - 1);

  memset(&s, 0, sizeof(s));
  s.per_pair = (uint32_t)(total / pairs);
  s.seed = (uint64_t)time(NULL) * 0x9E3779B97F4A7C15ULL | 1;
  CHECK_EQ(ty__mesh_init(&s.mesh, ST_THREADS, ST_CAP), 0);
  for (unsigned f = 0; f < ST_THREADS; f++)
    for (unsigned t = 0; t < ST_THREADS; t++)
      if (f != t) {
        s.msgs[f][t] = calloc(s.per_pair, sizeof(msg));
        CHECK(s.msgs[f][t] != NULL);
      }
  CHECK_EQ(pthread_barrier_init(&s.start, NULL, ST_THREADS), 0);

  for (unsigned i = 0; i < ST_THREADS; i++) {
    memset(&w[i], 0, sizeof(w[i]));
    w[i].s = &s;
    w[i].id = i;
    w[i].rng = s.seed + i * 0x632BE59BD9B4E019ULL;
    if (w[i].rng == 0) w[i].rng = 1;
    CHECK_EQ(pthread_create(&th[i], NULL, stress_thread, &w[i]), 0);
  }
  for (unsigned i = 0; i < ST_THREADS; i++) pthread_join(th[i], NULL);

  int failed = 0;
  for (unsigned i = 0; i < ST_THREADS; i++) {
    if (w[i].err[0]) {
      fprintf(stderr, "mesh_stress (seed %llu): %s\n",
              (unsigned long long)s.seed, w[i].err);
      failed = 1;
    }
  }
  CHECK(!failed);
  CHECK(!atomic_load(&s.failed));

  uint64_t fails = 0, pubs = 0, yields = 0;
  for (unsigned i = 0; i < ST_THREADS; i++) {
    fails += w[i].push_fails;
    pubs += w[i].publishes;
    yields += w[i].yields;
    CHECK(!ty__mesh_has_incoming(&s.mesh, i));
    for (unsigned j = 0; j < ST_THREADS; j++) {
      if (i == j) continue;
      /* Every message sent, received once, in order. */
      CHECK_EQ(w[i].next[j], s.per_pair);
      CHECK_EQ(w[j].expect[i], s.per_pair);
      CHECK_EQ(ty__mesh_backlog(&s.mesh, i, j), 0);
      CHECK_EQ(ty__mesh_staged(&s.mesh, i, j), 0);
    }
  }
  /* The rings must really have filled, or the overflow path went untested. */
  CHECK(fails > 0);
  if (getenv("TY_TEST_VERBOSE"))
    fprintf(stderr,
            "mesh_stress: %u/pair, %llu push fails, %llu publishes, "
            "%llu yields\n",
            s.per_pair, (unsigned long long)fails, (unsigned long long)pubs,
            (unsigned long long)yields);

  pthread_barrier_destroy(&s.start);
  for (unsigned f = 0; f < ST_THREADS; f++)
    for (unsigned t = 0; t < ST_THREADS; t++) free(s.msgs[f][t]);
  ty__mesh_destroy(&s.mesh);
  return 0;
}
