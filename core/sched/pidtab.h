/*
 * pidtab.h - the table that turns a pid into "where does it live".
 *
 * One entry per slot, in chunks allocated on first use (so the table costs
 * memory only for slots ever used). An entry's `word` packs
 *   gen (17 bits) << 32 | state (8) << 24 | home (16) << 8 | full (1) << 1 |
 *   lock (1)
 * and is the only thing other threads read: a sender checks the generation
 * and the state, then routes to `home`. `actor` is read only by the home
 * worker, after it has seen home == itself in `word` (acquire).
 *
 * A spawn request's entry is PENDING: senders append to `pending` under the
 * lock bit; the worker that starts it flips PENDING -> LIVE with one CAS that
 * requires the lock clear, then takes the pending list, so every message sent
 * before the flip is delivered ahead of every message sent after it.
 *
 * Slots come from the spawning worker's free list, then the shared free list
 * (batches move between them), then a bump counter. Any thread may reuse a
 * FREE slot: its generation was bumped when it was freed, so stale pids keep
 * failing, and the free list's lock orders the free before the reuse.
 *
 * The table holds this node's actors only: a pid whose node field is not
 * `node` (another node's, see ty.h) is never found here.
 */
#ifndef TY_PIDTAB_H
#define TY_PIDTAB_H

#include <pthread.h>

#include "ty.h"

enum {
  TY__S_FREE = 0,
  TY__S_PENDING = 1, /* spawn request, not started */
  TY__S_LIVE = 2,    /* started, home valid */
};

#define TY__PT_CHUNK_BITS 16
#define TY__PT_CHUNK (1u << TY__PT_CHUNK_BITS)
#define TY__PT_CHUNKS (TY_PID_MAX_SLOTS / TY__PT_CHUNK)

typedef struct ty__pident {
  _Atomic uint64_t word;
  _Atomic(ty_msg *) pending; /* LIFO under the lock bit; reversed at start */
  _Atomic uint32_t npending; /* its length (for ty_send_limited) */
  _Atomic uint32_t kpending; /* its bytes in KiB, rounded up (the same) */
  _Atomic(ty_actor *) actor; /* set by the home worker before LIVE */
} ty__pident;

typedef struct ty__pidtab {
  _Atomic(ty__pident *) chunks[TY__PT_CHUNKS];
  uint64_t node_bits; /* this node's id, in place (set before any thread) */
  /* Bumped by any spawning thread (relaxed RMW: only uniqueness matters). */
  alignas(TY_PAD) _Atomic uint32_t next;
  /* Free slots shared by every thread: workers keep a local list and trade
   * batches with this one, so a slot freed on one worker serves spawns on
   * another and the table never runs out while few actors live. */
  alignas(TY_PAD) pthread_mutex_t free_lock;
  uint32_t *gfree; /* guarded by free_lock */
  size_t ngfree, capgfree;
} ty__pidtab;

/* Moves n slots into the shared free list. */
void ty__pidtab_give(ty__pidtab *t, const uint32_t *slots, size_t n);
/* Takes up to max slots from the shared free list; returns how many. */
size_t ty__pidtab_take(ty__pidtab *t, uint32_t *out, size_t max);

static inline uint32_t ty__pid_slot(ty_pid p) {
  return (uint32_t)(p & (TY_PID_MAX_SLOTS - 1));
}
static inline uint32_t ty__pid_gen(ty_pid p) {
  return (uint32_t)(p >> TY_PID_SLOT_BITS) & ((1u << TY_PID_GEN_BITS) - 1);
}
static inline ty_pid ty__pid_make(uint64_t node_bits, uint32_t slot,
                                  uint32_t gen) {
  return node_bits | ((ty_pid)gen << TY_PID_SLOT_BITS) | slot;
}
static inline uint64_t ty__pid_node_bits(unsigned node) {
  return (uint64_t)node << (TY_PID_SLOT_BITS + TY_PID_GEN_BITS);
}

static inline uint32_t ty__w_gen(uint64_t w) { return (uint32_t)(w >> 32); }
static inline unsigned ty__w_state(uint64_t w) { return (w >> 24) & 0xff; }
static inline unsigned ty__w_home(uint64_t w) { return (w >> 8) & 0xffff; }
static inline bool ty__w_locked(uint64_t w) { return w & 1; }
/* Bit 1 of a LIVE entry: its mailbox is full (set and cleared by the home
 * worker only; a hint for senders on other workers, see ty_send_limited). */
#define TY__W_FULL 2u
static inline bool ty__w_full(uint64_t w) { return w & TY__W_FULL; }
static inline uint64_t ty__w_make(uint32_t gen, unsigned state, unsigned home) {
  return ((uint64_t)gen << 32) | ((uint64_t)state << 24) |
         ((uint64_t)home << 8);
}

void ty__pidtab_init(ty__pidtab *t, unsigned node);
void ty__pidtab_destroy(ty__pidtab *t);

/* The entry of slot, or NULL if its chunk was never allocated. */
static inline ty__pident *ty__pidtab_get(ty__pidtab *t, uint32_t slot) {
  /* acquire: pairs with the release CAS that published the chunk, so its
   * zeroed contents are visible. */
  ty__pident *c = atomic_load_explicit(&t->chunks[slot >> TY__PT_CHUNK_BITS],
                                       memory_order_acquire);
  return c ? &c[slot & (TY__PT_CHUNK - 1)] : NULL;
}

/* Takes a fresh slot from the bump counter (allocating its chunk); returns
 * its entry and sets *slot, or NULL when the table is full (or memory for
 * its chunk ran out). */
ty__pident *ty__pidtab_bump(ty__pidtab *t, uint32_t *slot);

/* Pid of an entry that the caller just took (FREE), now made PENDING. */
ty_pid ty__pidtab_claim(ty__pidtab *t, ty__pident *e, uint32_t slot);

/* Looks pid up for a sender. Returns the entry's word if the pid is this
 * node's and the generation matches, or 0 (no such actor). */
uint64_t ty__pidtab_lookup(ty__pidtab *t, ty_pid pid, ty__pident **ent);

#endif
