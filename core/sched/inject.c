/*
 * inject.c - the global injection queue: a mutex around an intrusive FIFO
 * list, plus an atomic length that lets the hot path see "empty" without
 * taking the lock.
 *
 * The lock orders every access to head, tail and the nodes' links, so the
 * atomic len needs no ordering of its own: it is only ever a hint.
 */
#include "inject.h"

void ty__inject_init(ty__inject *q) {
  if (pthread_mutex_init(&q->lock, NULL) != 0) ty__die("pthread_mutex_init");
  q->head = NULL;
  q->tail = NULL;
  /* relaxed: nobody else can see q before init returns. */
  atomic_store_explicit(&q->len, 0, memory_order_relaxed);
}

void ty__inject_destroy(ty__inject *q) { pthread_mutex_destroy(&q->lock); }

void ty__inject_push(ty__inject *q, ty__node *n) {
  ty__inject_push_batch(q, n, n, 1);
}

void ty__inject_push_batch(ty__inject *q, ty__node *first, ty__node *last,
                           size_t n) {
  if (n == 0) return;
  ty__assert(first != NULL && last != NULL);
  /* Terminate the chain ourselves: the caller's last->next may be stale. */
  last->next = NULL;

  TY_CHAOS();
  pthread_mutex_lock(&q->lock);
  if (q->tail != NULL) q->tail->next = first;
  else q->head = first;
  q->tail = last;
  /* relaxed (both): len is only written under the lock, which orders the
   * writers; readers outside the lock treat it as a hint. */
  size_t len = atomic_load_explicit(&q->len, memory_order_relaxed);
  atomic_store_explicit(&q->len, len + n, memory_order_relaxed);
  pthread_mutex_unlock(&q->lock);
}

/* Unlinks up to max nodes from the front. Caller holds the lock. */
static size_t inject__take(ty__inject *q, size_t max, ty__node **first) {
  ty__node *head = q->head;
  ty__node *last = NULL;
  size_t taken = 0;

  for (ty__node *it = head; it != NULL && taken < max; it = it->next) {
    last = it;
    taken++;
  }
  if (taken == 0) {
    *first = NULL;
    return 0;
  }
  q->head = last->next;
  if (q->head == NULL) q->tail = NULL;
  last->next = NULL;
  *first = head;
  return taken;
}

size_t ty__inject_pop_n(ty__inject *q, size_t max, ty__node **first) {
  *first = NULL;
  /* relaxed: an empty-looking queue is allowed to miss a concurrent push (a
   * caller that must not miss one, e.g. before parking, fences first); a
   * non-empty one is re-checked under the lock. */
  if (max == 0 || atomic_load_explicit(&q->len, memory_order_relaxed) == 0)
    return 0;

  TY_CHAOS();
  pthread_mutex_lock(&q->lock);
  size_t taken = inject__take(q, max, first);
  /* relaxed (both): written only under the lock; see push_batch. */
  size_t len = atomic_load_explicit(&q->len, memory_order_relaxed);
  ty__assert(len >= taken);
  atomic_store_explicit(&q->len, len - taken, memory_order_relaxed);
  pthread_mutex_unlock(&q->lock);
  return taken;
}
