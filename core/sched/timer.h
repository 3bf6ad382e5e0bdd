/*
 * timer.h - a hierarchical timing wheel, one per worker (actors are pinned, so
 * a wheel is touched only by its worker and needs no lock).
 *
 * 6 levels x 64 slots at 1 ms: level L slot covers 64^L ms; the horizon is
 * 2^36 ms (about 2.2 years; at least 2^36 - 2^30 ms from any point in time).
 * Later deadlines are clamped to it for filing only: such a timer keeps its
 * real deadline, waits in the top level and is filed again each time the wheel
 * comes round, so it too never fires early. Each level has a 64-bit occupancy
 * bitmap, so finding the next non-empty slot is a rotate and a count of
 * trailing zeros (Tokio runtime/time/wheel). Insert and cancel are O(1)
 * (doubly linked slot lists); entries in higher levels cascade down as the
 * wheel turns. Timers never fire early: a deadline is in whole milliseconds and
 * fires at the first poll whose `now` is >= it.
 */
#ifndef TY_TIMER_H
#define TY_TIMER_H

#include "base/common.h"

#define TY__WHEEL_LEVELS 6
#define TY__WHEEL_SLOTS 64

/* Zero a timer before its first insert (`armed` must start false). */
typedef struct ty__timer {
  struct ty__timer *next, *prev; /* slot list; `next` also chains fired ones */
  uint64_t deadline;             /* ms on the wheel's clock */
  uint8_t level, slot;
  bool armed;
  uint8_t kind; /* the owner's: what the timer is embedded in (the wheel
                   never reads it) */
} ty__timer;

typedef struct ty__wheel {
  uint64_t elapsed; /* ms the wheel has advanced to */
  uint64_t occupied[TY__WHEEL_LEVELS];
  ty__timer *slots[TY__WHEEL_LEVELS][TY__WHEEL_SLOTS];
  size_t count; /* armed timers */
} ty__wheel;

void ty__wheel_init(ty__wheel *w, uint64_t now_ms);

/* Arms t (which must not be armed) for deadline_ms. A deadline at or before
 * the wheel's time fires at the next poll. */
void ty__wheel_insert(ty__wheel *w, ty__timer *t, uint64_t deadline_ms);

/* Disarms t if armed; no-op otherwise (so a fired timer's ->next, which may
 * still chain a poll's result, is left alone). */
void ty__wheel_cancel(ty__wheel *w, ty__timer *t);

/* Advances to now_ms and returns every timer whose deadline <= now_ms,
 * disarmed, chained through ->next in deadline order (ties in insert order
 * are not promised). NULL if none. A now_ms behind the wheel's time is taken
 * as the wheel's time. Costs one step per occupied slot passed, not per ms. */
ty__timer *ty__wheel_poll(ty__wheel *w, uint64_t now_ms);

/* Earliest deadline of an armed timer (a lower bound is allowed: never later
 * than the true one), or UINT64_MAX when none is armed. Exact when that timer
 * is in level 0; otherwise the start of its slot, so a worker sleeping until
 * then may wake early once per cascade, polls, and asks again. */
uint64_t ty__wheel_next_deadline(const ty__wheel *w);

static inline bool ty__timer_armed(const ty__timer *t) { return t->armed; }

#endif
