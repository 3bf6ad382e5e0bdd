/*
 * wake.c - waking a parked worker and the hints senders and placement read
 * (a worker declared stuck takes no new actors), with nothing above them:
 * the floor that deliver.c, route.c and the port wake through
 * (scripts/floors/sched.txt; the park protocol is park.c's and
 * docs/architecture.md's, "Parking").
 */
#include <unistd.h>

#include "worker.h"

void ty__notify_parked(ty_runtime *rt) {
  TY_CHAOS();
  /* seq_cst fence: the caller just pushed stealable work (a store); the idle
   * state read that follows is the load half of the park protocol. */
  atomic_thread_fence(memory_order_seq_cst);
  int id = ty__idle_to_notify(&rt->idle);
  if (id >= 0) ty__worker_unpark(&rt->workers[id]);
}

void ty__park_notify(_Atomic uint32_t *park, int wake_fd) {
  /* relaxed: the caller issued a seq_cst fence after publishing its work;
   * the CAS lets exactly one waker pay for the eventfd write. */
  uint32_t st = atomic_load_explicit(park, memory_order_relaxed);
  if (st != TY__PARKED) return;
  TY_CHAOS();
  if (!atomic_compare_exchange_strong_explicit(park, &st, TY__NOTIFIED,
                                               memory_order_relaxed,
                                               memory_order_relaxed))
    return;
  uint64_t one = 1;
  ssize_t r = write(wake_fd, &one, sizeof one);
  (void)r; /* EAGAIN means the counter is already non-zero: still awake-able */
}

void ty__worker_unpark(ty_worker *w) { ty__park_notify(&w->park, w->wake_fd); }

bool ty_worker_is_stuck(ty_runtime *rt, unsigned i) {
  /* relaxed: a hint for placement and stats. */
  return i < rt->n &&
         atomic_load_explicit(&rt->workers[i].wd.route, memory_order_relaxed);
}
