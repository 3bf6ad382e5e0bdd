/*
 * mesh.h - one single-producer single-consumer ring per ordered pair of
 * workers (N x N; the diagonal is unused), carrying ty__node pointers:
 * cross-worker messages and spawn requests placed by P2C.
 *
 * Each ring keeps the producer's and the consumer's fields on separate cache
 * lines (and the producer's staging index apart from the tail it
 * publishes), and each side caches the other side's index so that the shared line
 * is read only when the cached copy says full (producer) or too few entries
 * (consumer). The producer stages entries and publishes them in a batch with
 * one release store (Seastar flushes at 16 or at the end of a poll); nothing
 * staged is visible to the consumer before ty__mesh_publish.
 *
 * A full ring never drops and never reorders: push reports it, and the caller
 * (the worker) keeps the node on a per-pair overflow list that it flushes,
 * in order, before any newer node for that pair.
 *
 * Indices are free-running u32 (masked on access), so "used" is always
 * tail - head in modular arithmetic, and a ring holds all cap entries (no
 * wasted slot). Slots are plain pointers: every slot write is ordered before
 * the consumer's read by the tail release/acquire pair, and every slot read
 * before the producer's next write to it by the head release/acquire pair, so
 * they need no atomics (and ThreadSanitizer checks exactly that protocol).
 *
 * Wake-ups are not the mesh's business: publish is only a release store. A
 * producer that may have to wake a parked consumer must issue a seq_cst fence
 * between ty__mesh_publish and reading the consumer's park state, pairing
 * with the fence the consumer issues before ty__mesh_has_incoming.
 */
#ifndef TY_MESH_H
#define TY_MESH_H

#include "base/common.h"

#define TY__MESH_RING_CAP 1024

typedef struct ty__ring {
  /* Producer-private: written by every push. Kept off the tail's line so
   * that a consumer polling tail does not pull this line away between
   * pushes (that would undo the batching). */
  alignas(TY_PAD) uint32_t staged; /* producer-private tail */
  uint32_t head_cache;             /* last head the producer saw */
  /* Producer-written, consumer-read: once per publish. */
  alignas(TY_PAD) _Atomic uint32_t tail; /* published tail (release) */
  /* Consumer's line: head is written by every drain that takes something,
   * and read by the producer only when its head_cache says full. */
  alignas(TY_PAD) _Atomic uint32_t head; /* consumed up to (release) */
  uint32_t tail_cache;                   /* last tail the consumer saw */
  /* Rarely changed: written by init only. */
  alignas(TY_PAD) uint32_t mask;
  ty__node **slots; /* NULL on the diagonal */
} ty__ring;

typedef struct ty__mesh {
  unsigned n;      /* workers */
  ty__ring *rings; /* n * n, ring (from, to) at from * n + to */
  void *slab;      /* every ring's slots, one allocation */
} ty__mesh;

/* n >= 1; cap: power of two, 2 <= cap <= 2^30. Returns 0, -EINVAL (bad n or
 * cap) or -ENOMEM. Must not run concurrently with anything else on m (threads
 * started after it returns see it through pthread_create's happens-before). */
int ty__mesh_init(ty__mesh *m, unsigned n, uint32_t cap);
/* Frees the rings, not the nodes still in them (the caller drains first). */
void ty__mesh_destroy(ty__mesh *m);

/* Any pair, the diagonal included: its ring has no slots and stays empty, so
 * drain, publish, staged and backlog on it are harmless no-ops. */
static inline ty__ring *ty__mesh_ring(ty__mesh *m, unsigned from, unsigned to) {
  ty__assert(from < m->n && to < m->n);
  return &m->rings[(size_t)from * m->n + to];
}

/* Producer `from` only (from != to). Stages n for `to`; false (nothing
 * staged) when full. */
static inline bool ty__mesh_push(ty__mesh *m, unsigned from, unsigned to,
                                 ty__node *n) {
  ty__assert(from != to);
  ty__ring *r = ty__mesh_ring(m, from, to);
  uint32_t t = r->staged;
  if (ty__unlikely(t - r->head_cache > r->mask)) {
    /* acquire: pairs with the consumer's release of head in drain, so its
     * reads of the slots it freed happen before we overwrite them. */
    r->head_cache = atomic_load_explicit(&r->head, memory_order_acquire);
    if (t - r->head_cache > r->mask) return false;
  }
  r->slots[t & r->mask] = n;
  r->staged = t + 1;
  return true;
}

/* Producer `from` only. Makes staged entries for `to` visible (release).
 * Returns true if anything was published. */
static inline bool ty__mesh_publish(ty__mesh *m, unsigned from, unsigned to) {
  ty__ring *r = ty__mesh_ring(m, from, to);
  uint32_t s = r->staged;
  /* relaxed: only this thread stores tail, so it reads its own last store. */
  if (s == atomic_load_explicit(&r->tail, memory_order_relaxed)) return false;
  TY_CHAOS();
  /* release: the slot writes of every staged push (and whatever the sender
   * wrote into the nodes) happen before the consumer's acquire of this tail. */
  atomic_store_explicit(&r->tail, s, memory_order_release);
  return true;
}

/* Entries staged for `to` and not yet published, seen by the producer. */
static inline uint32_t ty__mesh_staged(ty__mesh *m, unsigned from,
                                       unsigned to) {
  ty__ring *r = ty__mesh_ring(m, from, to);
  /* relaxed: the producer reads its own store. */
  return r->staged - atomic_load_explicit(&r->tail, memory_order_relaxed);
}

/* Consumer `to` only. Takes up to max published entries from `from`, in
 * order, into out[]; returns how many. */
static inline size_t ty__mesh_drain(ty__mesh *m, unsigned to, unsigned from,
                                    ty__node **out, size_t max) {
  ty__ring *r = ty__mesh_ring(m, from, to);
  /* relaxed: only this thread stores head, so it reads its own last store. */
  uint32_t h = atomic_load_explicit(&r->head, memory_order_relaxed);
  uint32_t avail = r->tail_cache - h;
  if (avail < max) {
    /* The cache cannot fill the batch: look at the producer's line once.
     * acquire: pairs with the release in publish, so the slots (and the
     * nodes' contents) up to that tail are visible to us. */
    r->tail_cache = atomic_load_explicit(&r->tail, memory_order_acquire);
    avail = r->tail_cache - h;
  }
  if (avail > max) avail = (uint32_t)max;
  for (uint32_t i = 0; i < avail; i++) out[i] = r->slots[(h + i) & r->mask];
  if (avail) {
    TY_CHAOS();
    /* release: our slot reads above happen before the producer's acquire of
     * this head, i.e. before it reuses those slots. */
    atomic_store_explicit(&r->head, h + avail, memory_order_release);
  }
  return avail;
}

/* Consumer `to` only (or a hint for others): is any incoming ring non-empty?
 * Used by the park protocol's re-check, after its full fence. */
bool ty__mesh_has_incoming(ty__mesh *m, unsigned to);

/* Published but not consumed entries from -> to (a hint for load; any
 * thread; never more than the capacity). */
uint32_t ty__mesh_backlog(ty__mesh *m, unsigned from, unsigned to);

#endif
