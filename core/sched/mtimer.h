/*
 * mtimer.h - message timers (ty_timer_send): a message sent later, once or
 * at a fixed rate, from the owner's worker wheel (internal to the core).
 *
 * A timer lives on the worker of the actor that owns it, like the actor's
 * own wait timer: only that worker touches it, so nothing here is shared.
 * Its id names a slot of the worker's table and that slot's generation, so
 * a stale id (the timer fired or was cancelled) is refused in O(1):
 *   id = ((gen << TY__TSLOT_BITS | slot) << 6) | worker
 * (53 bits at most: a Lua number holds it exactly).
 */
#ifndef TY_MTIMER_H
#define TY_MTIMER_H

#include "timer.h"

#define TY__TSLOT_BITS 24 /* timers pending at once, per worker: 16M */
#define TY__TGEN_BITS 23

enum { TY__TIMER_WAIT = 0, TY__TIMER_MSG = 1 }; /* ty__timer.kind */

typedef struct ty_msg ty_msg;
typedef struct ty_actor ty_actor;

typedef struct ty__mtimer {
  ty__timer t;                    /* kind TY__TIMER_MSG */
  struct ty__mtimer *next, *prev; /* the owner's timers */
  ty_actor *owner;
  ty_msg *msg;        /* each firing sends a copy (the last: itself) */
  uint64_t id;        /* 0 once it no longer holds its slot */
  uint64_t base_ns;   /* the first firing, on the runtime's clock */
  uint64_t period_ns; /* 0: once */
  uint64_t k;         /* firings counted from base: the next is k */
} ty__mtimer;

/* A worker's table of pending timers: slot -> timer, with a generation per
 * slot and a stack of free slots. */
typedef struct ty__tslots {
  ty__mtimer **v;
  uint32_t *gen;
  uint32_t *free;
  uint32_t n, cap, nfree;
} ty__tslots;

#endif
