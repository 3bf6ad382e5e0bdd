/*
 * mesh.c - setup and the cold queries of the N x N SPSC mesh. The hot paths
 * (push, publish, drain) are static inline in mesh.h: each is a handful of
 * instructions, and a call would cost about as much as the operation.
 */
#include <errno.h>
#include <string.h>

#include "mesh.h"

/* Rounds n up to a multiple of TY_PAD, so that one ring's slots never share
 * a line (or an adjacent-line prefetch pair) with another ring's. */
static size_t pad_up(size_t n) {
  return (n + TY_PAD - 1) & ~(size_t)(TY_PAD - 1);
}

int ty__mesh_init(ty__mesh *m, unsigned n, uint32_t cap) {
  memset(m, 0, sizeof(*m));
  /* Power of two so that masking works; <= 2^30 so that tail - head in u32
   * arithmetic tells "full" (cap) from "empty" (0) across wraparound and
   * backlog can read a signed difference. */
  if (n == 0 || cap < 2 || (cap & (cap - 1)) != 0 || cap > (1u << 30))
    return -EINVAL;

  size_t rings = (size_t)n * n;
  size_t stride = pad_up((size_t)cap * sizeof(ty__node *));
  if (rings / n != n || rings > SIZE_MAX / sizeof(ty__ring) ||
      (rings - n) > SIZE_MAX / stride)
    return -ENOMEM;

  /* aligned_alloc wants a size that is a multiple of the alignment:
   * sizeof(ty__ring) is, since its members are TY_PAD-aligned. */
  m->rings = aligned_alloc(TY_PAD, rings * sizeof(ty__ring));
  if (!m->rings) return -ENOMEM;
  /* The diagonal gets no slots (push asserts from != to; nothing else reads
   * a slot of an empty ring). Slots need no zeroing: a slot is read only
   * after a push wrote it. n == 1 means no slots at all. */
  if (n > 1) {
    m->slab = aligned_alloc(TY_PAD, (rings - n) * stride);
    if (!m->slab) {
      free(m->rings);
      m->rings = NULL;
      return -ENOMEM;
    }
  }
  memset(m->rings, 0, rings * sizeof(ty__ring));

  char *p = m->slab;
  for (unsigned from = 0; from < n; from++) {
    for (unsigned to = 0; to < n; to++) {
      ty__ring *r = &m->rings[(size_t)from * n + to];
      r->mask = cap - 1;
      /* Indices start at 0 on both sides (memset); plain stores are enough
       * because the workers start after init returns. */
      if (from == to) continue;
      r->slots = (ty__node **)(void *)p;
      p += stride;
    }
  }
  m->n = n;
  return 0;
}

void ty__mesh_destroy(ty__mesh *m) {
  free(m->slab);
  free(m->rings);
  memset(m, 0, sizeof(*m));
}

bool ty__mesh_has_incoming(ty__mesh *m, unsigned to) {
  ty__assert(to < m->n);
  for (unsigned from = 0; from < m->n; from++) {
    if (from == to) continue;
    ty__ring *r = &m->rings[(size_t)from * m->n + to];
    /* relaxed, both: this is a question, not a consumption; the caller that
     * acts on "empty" (park) has issued a seq_cst fence before calling, which
     * pairs with the producer's fence after publish, and the caller that acts
     * on "non-empty" drains, whose acquire of tail orders the slot reads.
     * tail_cache is not used: it is the consumer's private field, and other
     * threads may call this as a hint. */
    uint32_t h = atomic_load_explicit(&r->head, memory_order_relaxed);
    uint32_t t = atomic_load_explicit(&r->tail, memory_order_relaxed);
    if (t != h) return true;
  }
  return false;
}

uint32_t ty__mesh_backlog(ty__mesh *m, unsigned from, unsigned to) {
  ty__ring *r = ty__mesh_ring(m, from, to);
  /* relaxed, both: a load hint, and the two sides are exact for their own
   * index. A third thread may pair a stale tail with a newer head (d wraps
   * "negative") or a stale head with a newer tail (d above cap): clamp into
   * [0, cap] rather than pay for a consistent snapshot. */
  uint32_t t = atomic_load_explicit(&r->tail, memory_order_relaxed);
  uint32_t h = atomic_load_explicit(&r->head, memory_order_relaxed);
  uint32_t d = t - h;
  if ((int32_t)d < 0) return 0;
  return d > r->mask ? r->mask + 1 : d;
}
