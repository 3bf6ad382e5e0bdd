/*
 * alloc.h - small blocks for messages and actors.
 *
 * Messages are allocated on the sender's worker and freed on the receiver's,
 * and actors are allocated where they are spawned and freed where they end.
 * glibc malloc serves such cross-thread frees by locking the allocating
 * thread's arena, and profiles showed a quarter of the spawn benchmark in
 * that lock. So these blocks come from mimalloc (its thread-local heaps take
 * remote frees through lock-free lists) or, in builds without it (sanitizer
 * builds, machines without libmimalloc-dev), from per-worker caches whose
 * blocks go back to the worker that allocated them (alloc.c). Blocks from
 * ty__alloc are freed with ty__free only, by any thread.
 */
#ifndef TY_ALLOC_H
#define TY_ALLOC_H

#include "common.h"

#define TY__ALLOC_MAX 512   /* larger blocks go straight to malloc */
#define TY__ALLOC_KEEP 4096 /* own frees kept per class per worker */

/* Turns the calling thread's cache on (workers, at start) or off and empty
 * (at exit). */
void ty__alloc_thread_init(void);
void ty__alloc_thread_exit(void);

/* A block of at least `size` bytes; its usable size is ty__alloc_size(size).
 * Never fails (dies when out of memory). */
void *ty__alloc(size_t size);
/* The same, or NULL when memory runs out (paths a script can reach). */
void *ty__try_alloc(size_t size);
/* Frees p, allocated with ty__alloc(size) (any thread). */
void ty__free(void *p, size_t size);

/* The size a block of `size` bytes really has (its class), so that callers
 * can use the slack. */
static inline size_t ty__alloc_size(size_t size) {
  return size <= TY__ALLOC_MAX ? (size + 15) & ~(size_t)15 : size;
}

#endif
