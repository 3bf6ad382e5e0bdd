/*
 * lcmap.c - a small hash map from a pair of words to two words, owned by
 * one thread: open addressing with linear probing, deletion by backward
 * shift (no tombstones), grown at 3/4 full. The gateway keeps its monitors,
 * links and calls across nodes in it, the services their members.
 */
#include <string.h>

#include "cluster.h"

static size_t hash(lc_key k) {
  uint64_t h = k.a * 0x9E3779B97F4A7C15ull ^ (k.b + 0x632BE59BD9B4E019ull);
  h ^= h >> 29;
  h *= 0xBF58476D1CE4E5B9ull;
  return (size_t)(h ^ (h >> 32));
}

static bool same(lc_key x, lc_key y) { return x.a == y.a && x.b == y.b; }

lc_slot *lc_map_get(lc_map *m, lc_key k) {
  if (!m->n) return NULL;
  size_t mask = m->cap - 1;
  for (size_t i = hash(k) & mask;; i = (i + 1) & mask) {
    if (!m->s[i].used) return NULL;
    if (same(m->s[i].k, k)) return &m->s[i];
  }
}

static void grow(lc_map *m) {
  lc_slot *old = m->s;
  size_t oldcap = m->cap;
  m->cap = oldcap ? oldcap * 2 : 16;
  m->s = ty__xcalloc(m->cap, sizeof *m->s);
  m->n = 0;
  for (size_t i = 0; i < oldcap; i++) {
    if (!old[i].used) continue;
    bool fresh;
    lc_slot *s = lc_map_put(m, old[i].k, &fresh);
    s->v1 = old[i].v1;
    s->v2 = old[i].v2;
  }
  free(old);
}

lc_slot *lc_map_put(lc_map *m, lc_key k, bool *fresh) {
  if ((m->n + 1) * 4 > m->cap * 3) grow(m);
  size_t mask = m->cap - 1;
  for (size_t i = hash(k) & mask;; i = (i + 1) & mask) {
    lc_slot *s = &m->s[i];
    if (s->used && same(s->k, k)) {
      *fresh = false;
      return s;
    }
    if (!s->used) {
      *s = (lc_slot){k, 0, 0, true};
      m->n++;
      *fresh = true;
      return s;
    }
  }
}

void lc_map_del_slot(lc_map *m, lc_slot *s) {
  size_t mask = m->cap - 1, i = (size_t)(s - m->s);
  /* Backward shift: move later entries of the probe run into the hole when
   * their home position allows it, so that lookups never meet a gap. */
  for (size_t j = (i + 1) & mask; m->s[j].used; j = (j + 1) & mask) {
    size_t home = hash(m->s[j].k) & mask;
    bool movable = i <= j ? (home <= i || home > j) : (home <= i && home > j);
    if (movable) {
      m->s[i] = m->s[j];
      i = j;
    }
  }
  m->s[i].used = false;
  m->n--;
}

bool lc_map_del(lc_map *m, lc_key k) {
  lc_slot *s = lc_map_get(m, k);
  if (!s) return false;
  lc_map_del_slot(m, s);
  return true;
}

void lc_map_free(lc_map *m) {
  free(m->s);
  memset(m, 0, sizeof *m);
}
