/*
 * idle.h - which workers are parked and which are searching for work
 * (Tokio's idle.rs).
 *
 * One word packs (unparked << 16) | searching. At most half the workers search
 * at once, so that a burst of new work does not wake everybody into a stampede
 * on the same queues. Whoever makes stealable work (a spawn request on a
 * spawn queue or the inject queue) calls ty__idle_to_notify(): it picks a
 * sleeper only when nobody is searching (a searcher will find the work) and
 * somebody is parked. The woken worker starts out searching. A searcher that
 * finds work and was the last searcher wakes another, so work keeps spreading.
 *
 * The word is read and written with seq_cst: a producer's "push work; read
 * idle state" and a parker's "update idle state; re-read the queues" are each
 * a store followed by a load, which acquire/release alone does not order.
 */
#ifndef TY_IDLE_H
#define TY_IDLE_H

#include <pthread.h>

#include "base/common.h"

typedef struct ty__idle {
  alignas(TY_PAD) _Atomic uint32_t state;
  alignas(TY_PAD) pthread_mutex_t lock;
  unsigned n;
  unsigned nsleepers; /* guarded by lock */
  unsigned *sleepers; /* guarded by lock: parked worker ids, a stack */
  bool *parked;       /* guarded by lock: is worker i in sleepers? */
} ty__idle;

void ty__idle_init(ty__idle *s, unsigned n);
void ty__idle_destroy(ty__idle *s);

/* May the caller start searching (steal)? If yes, it now counts as one. */
bool ty__idle_try_search(ty__idle *s);
/* The caller stops searching; returns true if it was the last searcher. */
bool ty__idle_end_search(ty__idle *s);
/* A worker to wake for new stealable work, or -1 (counted as unparked and
 * searching from now on). */
int ty__idle_to_notify(ty__idle *s);
/* The caller (worker id, searching or not) is about to park. Returns true if
 * no worker is searching any more, so the caller must re-check every
 * stealable queue before sleeping (a notifier may have counted on a searcher
 * that is gone). */
bool ty__idle_park(ty__idle *s, unsigned id, bool searching);
/* The caller woke up (for whatever reason). Returns true if a notifier picked
 * it, in which case it counts as searching. */
bool ty__idle_unpark(ty__idle *s, unsigned id);

static inline unsigned ty__idle_searching(uint32_t st) { return st & 0xffff; }
static inline unsigned ty__idle_unparked(uint32_t st) { return st >> 16; }

#endif
