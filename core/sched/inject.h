/*
 * inject.h - the global injection queue (and any other many-producer queue).
 *
 * A mutex around an intrusive singly linked list of ty__node, plus an atomic
 * length so that the hot path can see "empty" without taking the lock (Tokio's
 * inject/shared.rs). Not lock-free: it is touched only every
 * global_queue_interval ticks, when a worker runs dry, on spawn-queue overflow
 * and by threads that are not workers.
 *
 * The runtime uses one instance for spawns from outside the workers and for
 * spawn-queue overflow, and one per worker for messages and completions sent by
 * threads that are not workers.
 */
#ifndef TY_INJECT_H
#define TY_INJECT_H

#include <pthread.h>

#include "base/common.h"

typedef struct ty__inject {
  pthread_mutex_t lock;
  ty__node *head; /* guarded by lock */
  ty__node *tail; /* guarded by lock */
  /* Written under the lock, read without it as a hint. */
  _Atomic size_t len;
} ty__inject;

void ty__inject_init(ty__inject *q);
/* Frees nothing: the caller drains what is left first. */
void ty__inject_destroy(ty__inject *q);

/* Appends one node (FIFO). Any thread. */
void ty__inject_push(ty__inject *q, ty__node *n);

/*
 * Appends the chain first..last (linked through ->next, n nodes) in one lock
 * acquisition, keeping its order. last->next need not be NULL (it is set);
 * n == 0 does nothing. Any thread.
 */
void ty__inject_push_batch(ty__inject *q, ty__node *first, ty__node *last,
                           size_t n);

/*
 * Removes up to max nodes from the front in one lock acquisition. Returns how
 * many were taken; *first receives the chain (NULL-terminated, in FIFO order;
 * NULL when none). Returns 0 without locking when the queue looks empty: that
 * check is a relaxed load, so a caller that must not miss a concurrent push
 * (a worker about to park) issues a seq_cst fence first, pairing with one
 * the pusher issues after pushing and before reading the parker's state.
 */
size_t ty__inject_pop_n(ty__inject *q, size_t max, ty__node **first);

/* Approximate length: exact when no push or pop runs concurrently. */
static inline size_t ty__inject_len(ty__inject *q) {
  /* relaxed: a hint only; a caller that acts on it takes the lock. */
  return atomic_load_explicit(&q->len, memory_order_relaxed);
}

#endif
