/*
 * alloc.c - small-block allocation for actors and messages (see alloc.h).
 *
 * Two builds (the Makefile's ALLOC): mimalloc, whose per-thread heaps take a
 * block freed by another thread back through a lock-free list of its page;
 * or the system's malloc under per-worker remote-free lists (below), which do
 * the same for our small classes. bench/results-alloc.md has the figures.
 */
#include "alloc.h"

#ifdef TY_MIMALLOC
#include <mimalloc.h>

/*
 * A small front cache per worker thread over mimalloc, for the classes that
 * messages and actors fall in: a message sent and taken on one worker is
 * freed where the next one is allocated, and a pop from a thread-local list
 * costs a few loads where mi_malloc + mi_free through the shared library's
 * PLT cost ~10 ns per message (docs/performance.md, "Allocation"; the C
 * ring's CPU per hop fell ~12%). A block freed by a thread other than its
 * allocator stays a mimalloc block: freeing it later from here is mimalloc's
 * ordinary remote free. Threads without ty__alloc_thread_init go straight
 * to mimalloc.
 */
#define FRONT_MAX 192 /* classes cached: up to this many bytes */
#define FRONT_CLASSES (FRONT_MAX / 16 + 1)
#define FRONT_KEEP 128 /* blocks kept per class */

typedef struct front_block {
  struct front_block *next;
} front_block;

typedef struct front {
  front_block *list[FRONT_CLASSES];
  uint32_t count[FRONT_CLASSES];
} front;

/* initial-exec: one word of static TLS, read without __tls_get_addr in
 * core.so (mimalloc's own TLS is initial-exec too). */
static _Thread_local front *tls_front
    __attribute__((tls_model("initial-exec")));

void ty__alloc_thread_init(void) {
  if (!tls_front) tls_front = mi_zalloc(sizeof(front));
}

void ty__alloc_thread_exit(void) {
  front *f = tls_front;
  if (!f) return;
  tls_front = NULL;
  for (size_t k = 0; k < FRONT_CLASSES; k++) {
    for (front_block *b = f->list[k], *n; b; b = n) {
      n = b->next;
      mi_free(b);
    }
  }
  mi_free(f);
}

void *ty__try_alloc(size_t size) {
  size_t real = ty__alloc_size(size);
  front *f = tls_front;
  if (f && real <= FRONT_MAX) {
    size_t k = real / 16;
    front_block *b = f->list[k];
    if (b) {
      f->list[k] = b->next;
      f->count[k]--;
      return b;
    }
  }
  return mi_malloc(real);
}

void ty__free(void *p, size_t size) {
  if (!p) return;
  size_t real = ty__alloc_size(size);
  front *f = tls_front;
  if (f && real <= FRONT_MAX && real >= sizeof(front_block)) {
    size_t k = real / 16;
    if (f->count[k] < FRONT_KEEP) {
      front_block *b = p;
      b->next = f->list[k];
      f->list[k] = b;
      f->count[k]++;
      return;
    }
  }
  mi_free(p);
}

#else
#include <pthread.h>

/*
 * Every block starts with a header naming the cache of the worker that took
 * it from malloc (NULL: a thread without a cache, or a large block). Freed by
 * its owner, a block goes on the owner's local list; freed by any other
 * thread, it is pushed on the owner's remote list of its class (a lock-free
 * stack: many pushers, and only the owner takes, all at once, so no ABA). The
 * owner takes the remote list when its local one is empty. Blocks thus go
 * home in one-way flows (spawned on A, ended on B) and malloc sees no
 * cross-thread free. A worker that exits closes its remote lists (CLOSED:
 * later pushers free to malloc) and leaves its cache for the next thread.
 */
#define CLASSES (TY__ALLOC_MAX / 16 + 1)
#define HDR 16 /* keeps the 16-byte alignment of malloc */
#define CLOSED ((free_block *)1)

typedef struct free_block {
  struct free_block *next;
} free_block;

typedef struct cache {
  _Atomic(free_block *) remote[CLASSES];
  free_block *local[CLASSES];
  uint32_t count[CLASSES];
  struct cache *next_dead;
} cache;

typedef struct header {
  cache *owner;
  uint64_t pad;
} header;

static _Thread_local cache *tls_cache;
static pthread_mutex_t dead_lock = PTHREAD_MUTEX_INITIALIZER;
static cache *dead; /* caches of exited threads, reused; never freed */

void ty__alloc_thread_init(void) {
  if (tls_cache) return;
  pthread_mutex_lock(&dead_lock);
  cache *c = dead;
  if (c) dead = c->next_dead;
  pthread_mutex_unlock(&dead_lock);
  if (!c) c = ty__xcalloc(1, sizeof(cache));
  for (size_t k = 0; k < CLASSES; k++)
    /* relaxed: nothing is published with NULL; blocks pushed from now on
     * are taken with acquire by this thread (ty__try_alloc). */
    atomic_store_explicit(&c->remote[k], NULL, memory_order_relaxed);
  tls_cache = c;
}

static void free_list(free_block *b) {
  while (b) {
    free_block *n = b->next;
    free((char *)b - HDR);
    b = n;
  }
}

void ty__alloc_thread_exit(void) {
  cache *c = tls_cache;
  if (!c) return;
  tls_cache = NULL;
  for (size_t k = 0; k < CLASSES; k++) {
    /* acquire: the pushed blocks' next links were released by their push. */
    free_list(
        atomic_exchange_explicit(&c->remote[k], CLOSED, memory_order_acquire));
    free_list(c->local[k]);
    c->local[k] = NULL;
    c->count[k] = 0;
  }
  pthread_mutex_lock(&dead_lock);
  c->next_dead = dead;
  dead = c;
  pthread_mutex_unlock(&dead_lock);
}

void *ty__try_alloc(size_t size) {
  size_t real = ty__alloc_size(size);
  cache *c = tls_cache;
  if (c && real <= TY__ALLOC_MAX) {
    size_t k = real / 16;
    free_block *b = c->local[k];
    /* relaxed peek: a NULL seen late only sends this call to malloc. */
    if (!b && atomic_load_explicit(&c->remote[k], memory_order_relaxed)) {
      /* acquire: pairs with the pushers' release, so the links read below
       * are theirs. Only this thread takes, so the list is ours alone. */
      b = atomic_exchange_explicit(&c->remote[k], NULL, memory_order_acquire);
      c->count[k] = 0; /* remote blocks are not counted (see ty__free) */
    }
    if (b) {
      c->local[k] = b->next;
      if (c->count[k]) c->count[k]--;
      return b;
    }
  }
  header *h =
      malloc(HDR + (real < sizeof(free_block) ? sizeof(free_block) : real));
  if (!h) return NULL;
  h->owner = c && real <= TY__ALLOC_MAX ? c : NULL;
  return (char *)h + HDR;
}

static void push_remote(cache *o, size_t k, free_block *b) {
  /* relaxed: the value is only the CAS's expectation; a stale CLOSED sends
   * the block to malloc, which is always right. */
  free_block *head = atomic_load_explicit(&o->remote[k], memory_order_relaxed);
  do {
    if (head == CLOSED) {
      free((char *)b - HDR);
      return;
    }
    b->next = head;
    /* release: publishes b->next (and the block) to the owner's acquire
     * exchange; relaxed on failure, which only reloads head. */
  } while (!atomic_compare_exchange_weak_explicit(&o->remote[k], &head, b,
                                                  memory_order_release,
                                                  memory_order_relaxed));
}

void ty__free(void *p, size_t size) {
  if (!p) return;
  size_t real = ty__alloc_size(size);
  header *h = (header *)((char *)p - HDR);
  cache *o = h->owner, *c = tls_cache;
  if (!o || real > TY__ALLOC_MAX) {
    free(h);
    return;
  }
  size_t k = real / 16;
  if (o != c) {
    push_remote(o, k, p);
    return;
  }
  if (c->count[k] >= TY__ALLOC_KEEP) {
    free(h);
    return;
  }
  free_block *b = p;
  b->next = c->local[k];
  c->local[k] = b;
  c->count[k]++;
}
#endif

void *ty__alloc(size_t size) {
  void *p = ty__try_alloc(size);
  if (ty__unlikely(!p)) ty__die("out of memory");
  return p;
}
