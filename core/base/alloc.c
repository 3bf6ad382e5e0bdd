/*
 * alloc.c - per-worker small-block caches (see alloc.h).
 */
#include "alloc.h"

#define CLASSES (TY__ALLOC_MAX / 16 + 1)

typedef struct free_block {
  struct free_block *next;
} free_block;

typedef struct cache {
  free_block *head[CLASSES];
  uint32_t count[CLASSES];
} cache;

static _Thread_local cache *tls_cache;

void ty__alloc_thread_init(void) {
  if (!tls_cache) tls_cache = ty__xcalloc(1, sizeof(cache));
}

void ty__alloc_thread_exit(void) {
  cache *c = tls_cache;
  if (!c) return;
  tls_cache = NULL;
  for (size_t k = 0; k < CLASSES; k++) {
    while (c->head[k]) {
      free_block *b = c->head[k];
      c->head[k] = b->next;
      free(b);
    }
  }
  free(c);
}

void *ty__try_alloc(size_t size) {
  size_t real = ty__alloc_size(size);
  cache *c = tls_cache;
  if (c && real <= TY__ALLOC_MAX) {
    size_t k = real / 16;
    free_block *b = c->head[k];
    if (b) {
      c->head[k] = b->next;
      c->count[k]--;
      return b;
    }
  }
  return malloc(real < sizeof(free_block) ? sizeof(free_block) : real);
}

void *ty__alloc(size_t size) {
  void *p = ty__try_alloc(size);
  if (ty__unlikely(!p)) ty__die("out of memory");
  return p;
}

void ty__free(void *p, size_t size) {
  if (!p) return;
  size_t real = ty__alloc_size(size);
  cache *c = tls_cache;
  if (c && real <= TY__ALLOC_MAX && real >= sizeof(free_block)) {
    size_t k = real / 16;
    if (c->count[k] < TY__ALLOC_KEEP) {
      free_block *b = p;
      b->next = c->head[k];
      c->head[k] = b;
      c->count[k]++;
      return;
    }
  }
  free(p);
}
