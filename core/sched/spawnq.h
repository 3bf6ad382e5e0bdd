/*
 * spawnq.h - the per-worker spawn queue: spawn requests (actors that have not
 * started) that their owner runs and idle workers may steal.
 *
 * Tokio's lock-free local queue (runtime/scheduler/multi_thread/queue.rs):
 *  - a ring of `cap` slots (power of two, at most TY__SPAWNQ_CAP);
 *  - `head` packs two u32 indices, (steal << 32) | real, updated by CAS;
 *    steal != real means a stealer is copying and no other steal may start;
 *  - `tail` is a u32 written only by the owner;
 *  - indices are u32 and wrap; slots are index & mask, so a stalled stealer's
 *    CAS cannot succeed against a reused index (the u16 ABA of tokio #5041);
 *  - overflow (owner push into a full ring): one CAS on head claims the ring;
 *    its second (newer) half plus the new node go to the inject queue in one
 *    batch, in order (tokio #8029), and the first half, still in place, is
 *    republished by moving tail. If a steal is in progress, only the new node
 *    goes to inject.
 * Only the owner calls push and pop; any thread may call steal_into and len.
 * The struct is aligned to TY_PAD: allocate it with aligned_alloc or embed it.
 */
#ifndef TY_SPAWNQ_H
#define TY_SPAWNQ_H

#include "base/common.h"
#include "inject.h"

#define TY__SPAWNQ_CAP 256

typedef struct ty__spawnq {
  /* Written by the owner (pop) and by stealers (CAS). */
  alignas(TY_PAD) _Atomic uint64_t head;
  /* Written only by the owner; read by stealers. */
  alignas(TY_PAD) _Atomic uint32_t tail;
  /* Rarely changed. */
  alignas(TY_PAD) uint32_t mask;
  /* Slots are plain pointers: a stealer reads a slot only after its CAS has
   * claimed it, so every access is ordered by happens-before: the owner's
   * write before the reader's read by the tail release/acquire pair, the
   * reader's read before the owner's next write to it by the release CAS that
   * ends the steal and the owner's acquire load of head (ThreadSanitizer
   * checks exactly that protocol). */
  ty__node *slots[TY__SPAWNQ_CAP];
} ty__spawnq;

/* cap: power of two, 2..TY__SPAWNQ_CAP (small values are for tests). */
void ty__spawnq_init(ty__spawnq *q, uint32_t cap);

/* Owner only. Never fails: overflow goes to `inject`. */
void ty__spawnq_push(ty__spawnq *q, ty__node *n, ty__inject *inject);

/* Owner only. NULL when empty. */
ty__node *ty__spawnq_pop(ty__spawnq *q);

/*
 * Steals half of `victim` (rounded up) into `dst`, which must belong to the
 * calling thread and be empty enough: gives up when dst is over half full or
 * another steal on victim is in progress, and takes no more than dst has room
 * for (victim and dst may differ in capacity). Returns one stolen node (the
 * newest taken) for the caller to run now (it is not put in dst), or NULL.
 */
ty__node *ty__spawnq_steal_into(ty__spawnq *victim, ty__spawnq *dst);

/* Number of queued nodes; exact for the owner, a hint (at most cap) for
 * others. */
static inline uint32_t ty__spawnq_len(ty__spawnq *q) {
  uint32_t cap = q->mask + 1;
  /* acquire: pairs with the owner's release on head, so tail >= real below. */
  uint64_t h = atomic_load_explicit(&q->head, memory_order_acquire);
  /* relaxed: only counted, no slot read; coherence after the acquire above
   * already keeps it from being older than the tail that head implies. */
  uint32_t t = atomic_load_explicit(&q->tail, memory_order_relaxed);
  uint32_t len = t - (uint32_t)h; /* the low half of head: the real head */

  /* A non-owner may pair an old head with a much newer tail. */
  return len > cap ? cap : len;
}

#endif
