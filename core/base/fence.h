/*
 * fence.h - two process-level helpers for the watchdog (docs/architecture.md,
 * "Runaway actors"):
 *
 *  - ty__heavy_fence: the slow half of an asymmetric fence. A thread on a
 *    hot path pairs a store with a later load using only a compiler barrier
 *    (atomic_signal_fence); a rare thread that stores, calls this, then
 *    loads, is ordered against it as if both had issued a full fence
 *    (Linux membarrier, PRIVATE_EXPEDITED: every running thread of the
 *    process executes a memory barrier before it returns). This is the
 *    pattern of liburcu and folly's asymmetric_thread_fence_heavy.
 *  - ty__pin_code: keeps the object that holds this code mapped for the
 *    rest of the process (a thread left running code of a shared object
 *    that the host would otherwise unload at exit).
 */
#ifndef TY_FENCE_H
#define TY_FENCE_H

/* Registers the process for ty__heavy_fence (idempotent, any thread). */
void ty__heavy_fence_init(void);
/* A full barrier on every thread of the process, ordered after the
 * caller's earlier stores and before its later loads. */
void ty__heavy_fence(void);
/* Makes the shared object holding this code permanent (RTLD_NODELETE);
 * a no-op in a static executable. */
void ty__pin_code(void);

#endif
