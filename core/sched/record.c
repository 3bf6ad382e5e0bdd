/*
 * record.c - the bottom floor of the scheduler's own code (scripts/floors/
 * sched.txt): the records every other file uses and that call nothing above
 * them: the calling thread's worker and actor, message and actor blocks, and
 * the runtime's clock.
 */
#include <string.h>

#include "base/alloc.h"
#include "worker.h"

_Thread_local ty_worker *ty__tls_worker;

ty_worker *ty_worker_current(void) { return ty__tls_worker; }
ty_actor *ty_actor_current(void) {
  return ty__tls_worker ? ty__tls_worker->current : NULL;
}

uint64_t ty_runtime_now_ns(const ty_runtime *rt) {
  /* relaxed: the flag is set once, before any advance; acquire on vnow
   * pairs with the advancing thread's release (a worker that sees the new
   * time sees it whole). */
  if (atomic_load_explicit(&rt->virt, memory_order_relaxed))
    return atomic_load_explicit(&rt->vnow, memory_order_acquire);
  return ty__now_ns() - rt->t0_ns;
}

bool ty_runtime_is_virtual(const ty_runtime *rt) {
  /* relaxed: a mode flag; the times themselves are ordered through vnow. */
  return atomic_load_explicit(&rt->virt, memory_order_relaxed);
}

/* ---- actors and messages ------------------------------------------------ */

ty_msg *ty_msg_try_new(size_t len) {
  if (len > UINT32_MAX - sizeof(ty_msg) - 16) return NULL;
  size_t size = ty__alloc_size(sizeof(ty_msg) + len);
  ty_msg *m = ty__try_alloc(size);
  if (!m) return NULL;
  memset(m, 0, sizeof *m);
  m->type = TY__T_MSG;
  m->len = (uint32_t)len;
  m->cap = (uint32_t)(size - sizeof(ty_msg));
  return m;
}

ty_msg *ty_msg_new(size_t len) {
  ty_msg *m = ty_msg_try_new(len);
  if (ty__unlikely(!m)) ty__die("out of memory");
  return m;
}

void ty_msg_free(ty_msg *m) { ty__free(m, sizeof(ty_msg) + m->cap); }

ty_actor *ty__actor_alloc(void) {
  ty_actor *a = ty__try_alloc(sizeof *a);
  if (a) memset(a, 0, sizeof *a);
  return a;
}

void ty__actor_free(ty_actor *a) {
  if (a->timer) ty__free(a->timer, sizeof *a->timer);
  ty__free(a, sizeof *a);
}
