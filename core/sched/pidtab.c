/*
 * pidtab.c - pid -> location table (see pidtab.h).
 */
#include "pidtab.h"

#include <string.h>

void ty__pidtab_init(ty__pidtab *t, unsigned node) {
  memset(t, 0, sizeof *t);
  t->node_bits = ty__pid_node_bits(node);
  pthread_mutex_init(&t->free_lock, NULL);
}

void ty__pidtab_give(ty__pidtab *t, const uint32_t *slots, size_t n) {
  pthread_mutex_lock(&t->free_lock);
  ty__grow(&t->gfree, &t->capgfree, t->ngfree + n, sizeof *t->gfree, 1024);
  memcpy(t->gfree + t->ngfree, slots, n * sizeof *slots);
  t->ngfree += n;
  pthread_mutex_unlock(&t->free_lock);
}

size_t ty__pidtab_take(ty__pidtab *t, uint32_t *out, size_t max) {
  pthread_mutex_lock(&t->free_lock);
  size_t n = t->ngfree < max ? t->ngfree : max;
  t->ngfree -= n;
  if (n) memcpy(out, t->gfree + t->ngfree, n * sizeof *out);
  pthread_mutex_unlock(&t->free_lock);
  return n;
}

void ty__pidtab_destroy(ty__pidtab *t) {
  pthread_mutex_destroy(&t->free_lock);
  free(t->gfree);
  for (size_t i = 0; i < TY__PT_CHUNKS; i++) {
    /* relaxed: called after every thread that used the table was joined. */
    free(atomic_load_explicit(&t->chunks[i], memory_order_relaxed));
  }
}

static ty__pident *chunk_for(ty__pidtab *t, uint32_t slot) {
  _Atomic(ty__pident *) *cp = &t->chunks[slot >> TY__PT_CHUNK_BITS];
  /* acquire: see the zeroed chunk another thread published. */
  ty__pident *c = atomic_load_explicit(cp, memory_order_acquire);
  if (c) return c;
  ty__pident *fresh = calloc(TY__PT_CHUNK, sizeof *fresh);
  if (!fresh) return NULL; /* out of memory: this slot is never used */
  TY_CHAOS(); /* another thread allocates the same chunk meanwhile */
  /* acq_rel: release publishes our zeroed chunk; acquire (on failure) sees
   * the winner's. The loser frees its copy. */
  if (atomic_compare_exchange_strong_explicit(cp, &c, fresh,
                                              memory_order_acq_rel,
                                              memory_order_acquire))
    return fresh;
  free(fresh);
  return c;
}

ty__pident *ty__pidtab_bump(ty__pidtab *t, uint32_t *slot) {
  /* relaxed: the counter only hands out distinct numbers; the entry itself
   * is published through `word`. A CAS, not an add, so that a full table
   * stays full instead of wrapping around to live slots. */
  uint32_t s = atomic_load_explicit(&t->next, memory_order_relaxed);
  do {
    if (s >= TY_PID_MAX_SLOTS) return NULL;
    TY_CHAOS();
  } while (!atomic_compare_exchange_weak_explicit(&t->next, &s, s + 1,
                                                  memory_order_relaxed,
                                                  memory_order_relaxed));
  *slot = s;
  ty__pident *c = chunk_for(t, s);
  return c ? &c[s & (TY__PT_CHUNK - 1)] : NULL;
}

ty_pid ty__pidtab_claim(ty__pidtab *t, ty__pident *e, uint32_t slot) {
  /* relaxed: the slot is ours alone (fresh from the bump counter, or from our
   * own free list, which only we touch). */
  uint64_t w = atomic_load_explicit(&e->word, memory_order_relaxed);
  uint32_t gen = ty__w_gen(w);
  if (gen == 0) gen = 1;
  atomic_store_explicit(&e->pending, NULL, memory_order_relaxed);
  atomic_store_explicit(&e->npending, 0, memory_order_relaxed);
  atomic_store_explicit(&e->kpending, 0, memory_order_relaxed);
  atomic_store_explicit(&e->actor, NULL, memory_order_relaxed);
  /* release: a sender that acquires this word sees the cleared fields. */
  atomic_store_explicit(&e->word, ty__w_make(gen, TY__S_PENDING, 0),
                        memory_order_release);
  return ty__pid_make(t->node_bits, slot, gen);
}

uint64_t ty__pidtab_lookup(ty__pidtab *t, ty_pid pid, ty__pident **ent) {
  if (pid == 0 || (pid & ~(ty_pid)0 << (TY_PID_SLOT_BITS + TY_PID_GEN_BITS)) !=
                      t->node_bits)
    return 0;
  ty__pident *e = ty__pidtab_get(t, ty__pid_slot(pid));
  if (!e) return 0;
  /* acquire: pairs with the release store that made the entry PENDING or
   * LIVE, so `home` and (for the home worker) `actor` are valid. */
  uint64_t w = atomic_load_explicit(&e->word, memory_order_acquire);
  if (ty__w_gen(w) != ty__pid_gen(pid) || ty__w_state(w) == TY__S_FREE)
    return 0;
  *ent = e;
  return w;
}
