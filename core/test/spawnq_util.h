/*
 * spawnq_util.h - what the spawn queue tests (test_spawnq.c,
 * test_spawnq_chain.c) share: a numbered node, a queue started at any index
 * (so that the u32 wrap is crossed), and pushing and draining by id.
 */
#ifndef TY_TEST_SPAWNQ_UTIL_H
#define TY_TEST_SPAWNQ_UTIL_H

#include <stdint.h>
#include <time.h>

#include "sched/spawnq.h"

typedef struct {
  ty__node node; /* first: a ty__node * is an item * */
  long id;
  uint64_t stamp; /* written just before a push, checked by whoever runs it */
} item;

static inline double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline long id_of(ty__node *n) {
  return n == NULL ? -1 : ((item *)n)->id;
}

/* Test only: an empty queue whose indices start at `start`. */
static inline void spawnq_at(ty__spawnq *q, uint32_t cap, uint32_t start) {
  ty__spawnq_init(q, cap);
  atomic_store(&q->head, ((uint64_t)start << 32) | start);
  atomic_store(&q->tail, start);
}

static inline void push_id(ty__spawnq *q, item *items, long id,
                           ty__inject *inj) {
  items[id].id = id;
  items[id].node.next = (ty__node *)0x1; /* nobody may trust a stale link */
  ty__spawnq_push(q, &items[id].node, inj);
}

/* Pops the inject queue into ids[]; returns how many, or -1 if it holds more
 * than max or a chain is malformed. */
static inline long drain_inject(ty__inject *inj, long *ids, long max) {
  long n = 0;
  ty__node *first;
  size_t got;
  while ((got = ty__inject_pop_n(inj, 16, &first)) > 0) {
    size_t k = 0;
    for (ty__node *it = first; it != NULL; it = it->next, k++) {
      if (n == max) return -1;
      ids[n++] = id_of(it);
    }
    if (k != got) return -1;
  }
  return n;
}

#endif
