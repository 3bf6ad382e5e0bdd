/*
 * idle.c - parked/searching bookkeeping (see idle.h).
 */
#include "idle.h"

#define UNPARKED_ONE (1u << 16)

void ty__idle_init(ty__idle *s, unsigned n) {
  s->n = n;
  atomic_init(&s->state, n * UNPARKED_ONE);
  pthread_mutex_init(&s->lock, NULL);
  s->nsleepers = 0;
  s->sleepers = ty__xcalloc(n, sizeof *s->sleepers);
  s->parked = ty__xcalloc(n, sizeof *s->parked);
}

void ty__idle_destroy(ty__idle *s) {
  pthread_mutex_destroy(&s->lock);
  free(s->sleepers);
  free(s->parked);
}

bool ty__idle_try_search(ty__idle *s) {
  /* seq_cst throughout: see idle.h. */
  uint32_t st = atomic_load(&s->state);
  for (;;) {
    if (2 * ty__idle_searching(st) >= s->n) return false;
    TY_CHAOS();
    if (atomic_compare_exchange_weak(&s->state, &st, st + 1)) return true;
  }
}

bool ty__idle_end_search(ty__idle *s) {
  uint32_t prev = atomic_fetch_sub(&s->state, 1); /* seq_cst: idle.h */
  ty__assert(ty__idle_searching(prev) > 0);
  return ty__idle_searching(prev) == 1;
}

int ty__idle_to_notify(ty__idle *s) {
  /* seq_cst: this load follows the caller's push of new work (idle.h). */
  uint32_t st = atomic_load(&s->state);
  if (ty__idle_searching(st) != 0 || ty__idle_unparked(st) >= s->n) return -1;
  TY_CHAOS();
  int id = -1;
  pthread_mutex_lock(&s->lock);
  st = atomic_load(&s->state);
  if (ty__idle_searching(st) == 0 && s->nsleepers > 0) {
    id = (int)s->sleepers[--s->nsleepers];
    s->parked[id] = false;
    atomic_fetch_add(&s->state, UNPARKED_ONE + 1); /* seq_cst: idle.h */
  }
  pthread_mutex_unlock(&s->lock);
  return id;
}

bool ty__idle_park(ty__idle *s, unsigned id, bool searching) {
  pthread_mutex_lock(&s->lock);
  uint32_t prev =
      atomic_fetch_sub(&s->state, UNPARKED_ONE + (searching ? 1 : 0));
  ty__assert(!s->parked[id]);
  s->parked[id] = true;
  s->sleepers[s->nsleepers++] = id;
  pthread_mutex_unlock(&s->lock);
  /* Nobody searches any more: a notifier that pushed stealable work just
   * before may have seen us searching and woken nobody. */
  return ty__idle_searching(prev) - (searching ? 1 : 0) == 0;
}

bool ty__idle_unpark(ty__idle *s, unsigned id) {
  bool picked;
  pthread_mutex_lock(&s->lock);
  picked = !s->parked[id];
  if (!picked) {
    /* Woken by a directed wake (mesh, inbox, timer): leave the stack. */
    s->parked[id] = false;
    for (unsigned i = 0; i < s->nsleepers; i++) {
      if (s->sleepers[i] == id) {
        s->sleepers[i] = s->sleepers[--s->nsleepers];
        break;
      }
    }
    atomic_fetch_add(&s->state, UNPARKED_ONE); /* seq_cst: idle.h */
  }
  pthread_mutex_unlock(&s->lock);
  return picked;
}
