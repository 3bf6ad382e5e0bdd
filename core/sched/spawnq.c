/*
 * spawnq.c - the per-worker spawn queue: a bounded lock-free ring that only
 * its owner pushes to and pops from, and from which other workers steal half
 * at a time (the design of Tokio's multi-thread local queue).
 *
 * Positions are free-running u32; a slot is position & mask. `tail` is the
 * next position the owner writes. `head` packs two positions:
 *   real  - the next position to hand out (by pop or by a steal);
 *   steal - the first position a stealer is still copying out; equal to real
 *           when no steal is in progress.
 * The owner may write a slot only when tail - steal < cap, so it never
 * overwrites a slot that a stealer has claimed but not copied yet.
 *
 * Ordering, in one place (each atomic repeats the part it relies on):
 *  - tail is release-stored by the owner after writing slots and
 *    acquire-loaded by stealers before reading them;
 *  - every write of head that moves `real` forward (pop, overflow) is a
 *    release, so a stealer that acquires that head also sees a tail at least
 *    as new as real (tail - real never underflows);
 *  - a stealer finishes with a release CAS that moves `steal` up to real; the
 *    owner acquire-loads head before writing slots, so the stealer's copies
 *    happen before the slots are reused. Later RMWs on head by anyone (pops,
 *    claims) continue that release sequence, so the owner still synchronizes
 *    with it when the value it loads was written by one of those.
 * Slots themselves are plain pointers: with the above, every slot read is
 * ordered after the write it reads and before the next write to that slot.
 */
#include "spawnq.h"

static inline uint32_t spawnq__steal(uint64_t h) { return (uint32_t)(h >> 32); }

static inline uint32_t spawnq__real(uint64_t h) { return (uint32_t)h; }

static inline uint64_t spawnq__pack(uint32_t steal, uint32_t real) {
  return ((uint64_t)steal << 32) | real;
}

static inline ty__node **spawnq__slot(ty__spawnq *q, uint32_t pos) {
  return &q->slots[pos & q->mask];
}

void ty__spawnq_init(ty__spawnq *q, uint32_t cap) {
  ty__assert(cap >= 2 && cap <= TY__SPAWNQ_CAP && (cap & (cap - 1)) == 0);
  q->mask = cap - 1;
  /* relaxed (all): q is not shared until init returns; whoever hands it to
   * other threads does so through a synchronizing operation. */
  atomic_store_explicit(&q->head, 0, memory_order_relaxed);
  atomic_store_explicit(&q->tail, 0, memory_order_relaxed);
  for (uint32_t i = 0; i < TY__SPAWNQ_CAP; i++) q->slots[i] = NULL;
}

/* Owner: writes n at position t and makes it visible to stealers. */
static void spawnq__publish(ty__spawnq *q, uint32_t t, ty__node *n) {
  *spawnq__slot(q, t) = n;
  TY_CHAOS();
  /* release: a stealer that acquires this tail sees the slot written. */
  atomic_store_explicit(&q->tail, t + 1, memory_order_release);
}

/*
 * Owner, ring full and no steal in progress (h is steal == real == t - cap).
 * Moves the second half of the ring plus n to inject as one batch and keeps
 * the first half (the oldest nodes) local (tokio #8029: nodes that came from
 * inject sit in the first half, so they never bounce back there).
 *
 * One CAS claims the whole ring, which leaves it empty for a moment. The
 * first half needs no copying: positions [t, t + half) map to the same slots
 * as [t - cap, t - cap + half), which still hold it, so moving tail
 * republishes it. Returns false if a stealer moved head first.
 */
static bool spawnq__overflow(ty__spawnq *q, uint64_t h, uint32_t t, ty__node *n,
                             ty__inject *inject) {
  uint32_t cap = q->mask + 1;
  uint32_t half = cap / 2;
  uint32_t real = spawnq__real(h);

  ty__assert(spawnq__steal(h) == real && t - real == cap);
  /* release: a stealer that acquires the new head (real == t) must also see
   * tail == t, not an older tail below real. relaxed on failure: we retry
   * from a fresh acquire load in push. */
  if (!atomic_compare_exchange_strong_explicit(&q->head, &h, spawnq__pack(t, t),
                                               memory_order_release,
                                               memory_order_relaxed))
    return false;
  TY_CHAOS(); /* the ring looks empty to stealers until tail moves */

  /* The claim made every slot ours: chain the second half, in order, then n. */
  ty__node *first = NULL;
  ty__node *prev = NULL;
  for (uint32_t pos = real + half; pos != t; pos++) {
    ty__node *it = *spawnq__slot(q, pos); /* we wrote it */
    if (prev != NULL) prev->next = it;
    else first = it;
    prev = it;
  }
  prev->next = n;

  /* release: republishes the first half to stealers (see above). */
  atomic_store_explicit(&q->tail, t + half, memory_order_release);
  ty__inject_push_batch(inject, first, n, half + 1);
  return true;
}

void ty__spawnq_push(ty__spawnq *q, ty__node *n, ty__inject *inject) {
  uint32_t cap = q->mask + 1;

  for (;;) {
    /* acquire: pairs with a stealer's release CAS that moved `steal`, so its
     * copies out of the slots happen before we overwrite them. */
    uint64_t h = atomic_load_explicit(&q->head, memory_order_acquire);
    /* relaxed: only this thread writes tail. */
    uint32_t t = atomic_load_explicit(&q->tail, memory_order_relaxed);
    uint32_t steal = spawnq__steal(h);
    TY_CHAOS();

    if (t - steal < cap) {
      spawnq__publish(q, t, n);
      return;
    }
    if (steal != spawnq__real(h)) {
      /* A stealer is about to free half the ring; don't wait for it. */
      ty__inject_push(inject, n);
      return;
    }
    if (spawnq__overflow(q, h, t, n, inject)) return;
  }
}

ty__node *ty__spawnq_pop(ty__spawnq *q) {
  /* relaxed: only a starting value for the CAS, which checks it. */
  uint64_t h = atomic_load_explicit(&q->head, memory_order_relaxed);

  for (;;) {
    uint32_t steal = spawnq__steal(h);
    uint32_t real = spawnq__real(h);
    /* relaxed: only this thread writes tail. */
    uint32_t t = atomic_load_explicit(&q->tail, memory_order_relaxed);

    if (real == t) return NULL;
    TY_CHAOS();
    /* With no steal in progress, steal follows real. */
    uint64_t next = steal == real ? spawnq__pack(real + 1, real + 1)
                                  : spawnq__pack(steal, real + 1);
    /* release: a stealer that acquires this head must see a tail >= real + 1
     * (our earlier tail store). relaxed on failure: h only seeds the retry;
     * we read no data that another thread published. */
    if (atomic_compare_exchange_weak_explicit(&q->head, &h, next,
                                              memory_order_release,
                                              memory_order_relaxed)) {
      return *spawnq__slot(q, real); /* we wrote it; the CAS made it ours */
    }
  }
}

/*
 * Stealer: claims up to `max` nodes of v (half of what it holds, rounded up)
 * by moving `real` forward while leaving `steal` behind, which keeps other
 * stealers out and the owner off those slots. Returns how many; *claimed
 * receives the new head.
 */
static uint32_t spawnq__claim(ty__spawnq *v, uint32_t max, uint64_t *claimed) {
  uint32_t cap = v->mask + 1;
  /* acquire: pairs with the owner's release on head (pop, overflow), so the
   * tail we load next is at least `real`. */
  uint64_t h = atomic_load_explicit(&v->head, memory_order_acquire);

  for (;;) {
    uint32_t steal = spawnq__steal(h);
    uint32_t real = spawnq__real(h);
    if (steal != real) return 0; /* another stealer is copying */

    /* acquire: pairs with the owner's release store, so the slots below
     * this tail are visible. */
    uint32_t t = atomic_load_explicit(&v->tail, memory_order_acquire);
    uint32_t avail = t - real;
    if (avail > cap) {
      /* The owner popped and pushed since we read head: read it again.
       * acquire: as for the first load. */
      h = atomic_load_explicit(&v->head, memory_order_acquire);
      continue;
    }
    uint32_t n = avail - avail / 2;
    if (n > max) n = max;
    if (n == 0) return 0;

    uint64_t next = spawnq__pack(steal, real + n);
    TY_CHAOS();
    /* acquire (both): on failure h is a new head we act on, and the tail we
     * load for it must be at least its real (as for the first load); on
     * success h is unchanged, so the first acquire already covers it. */
    if (atomic_compare_exchange_weak_explicit(&v->head, &h, next,
                                              memory_order_acquire,
                                              memory_order_acquire)) {
      *claimed = next;
      return n;
    }
  }
}

/* Stealer: copying is done; let `steal` catch up with `real`. */
static void spawnq__unclaim(ty__spawnq *v, uint64_t h) {
  for (;;) {
    uint32_t real = spawnq__real(h);
    ty__assert(spawnq__steal(h) != real);
    /* release: our slot reads happen before the owner, which acquires head
     * before writing slots, reuses them. relaxed on failure: the owner popped
     * (moved real); we only recompute from the new value. */
    if (atomic_compare_exchange_weak_explicit(&v->head, &h,
                                              spawnq__pack(real, real),
                                              memory_order_release,
                                              memory_order_relaxed))
      return;
  }
}

/* Owner of dst: free slots, or 0 when dst is over half full. */
static uint32_t spawnq__room(ty__spawnq *dst, uint32_t dst_tail) {
  uint32_t cap = dst->mask + 1;
  /* acquire: pairs with the release CAS of whoever last stole from dst, so
   * its copies are done before we overwrite the slots it read. */
  uint64_t h = atomic_load_explicit(&dst->head, memory_order_acquire);
  uint32_t used = dst_tail - spawnq__steal(h);

  return used > cap / 2 ? 0 : cap - used;
}

ty__node *ty__spawnq_steal_into(ty__spawnq *victim, ty__spawnq *dst) {
  ty__assert(victim != dst);
  /* relaxed: the caller owns dst, so only this thread writes its tail. */
  uint32_t dst_tail = atomic_load_explicit(&dst->tail, memory_order_relaxed);
  uint32_t room = spawnq__room(dst, dst_tail);
  if (room == 0) return NULL;

  uint64_t claimed;
  uint32_t n = spawnq__claim(victim, room, &claimed);
  if (n == 0) return NULL;

  /* Our claim is [first, first + n): steal is still at its start. */
  uint32_t first = spawnq__steal(claimed);
  /* The victim's slots were published by its tail, which claim acquired;
   * ours are published by the release store of dst->tail below. */
  for (uint32_t i = 0; i + 1 < n; i++)
    *spawnq__slot(dst, dst_tail + i) = *spawnq__slot(victim, first + i);
  /* The newest one goes to the caller, not to dst. */
  ty__node *ret = *spawnq__slot(victim, first + n - 1);
  TY_CHAOS(); /* the owner meets a steal in progress meanwhile */
  spawnq__unclaim(victim, claimed);

  if (n > 1) {
    /* release: a stealer of dst that acquires this tail sees the copies. */
    atomic_store_explicit(&dst->tail, dst_tail + n - 1, memory_order_release);
  }
  return ret;
}
