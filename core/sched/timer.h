/*
 * timer.h - a hierarchical timing wheel, one per worker (actors are pinned, so
 * a wheel is touched only by its worker and needs no lock).
 *
 * 6 levels x 64 slots of one tick (TY__TICK_NS, 250 us): a level L slot
 * covers 64^L ticks; the horizon is 2^36 ticks (about 199 days; at least
 * 2^36 - 2^30 ticks from any point in time).
 * Later deadlines are clamped to it for filing only: such a timer keeps its
 * real deadline, waits in the top level and is filed again each time the wheel
 * comes round, so it too never fires early. Each level has a 64-bit occupancy
 * bitmap, so finding the next non-empty slot is a rotate and a count of
 * trailing zeros (Tokio runtime/time/wheel). Insert and cancel are O(1)
 * (doubly linked slot lists); entries in higher levels cascade down as the
 * wheel turns. Timers never fire early: a deadline is in whole ticks (callers
 * round up, ty__tick_up) and fires at the first poll whose `now` (rounded
 * down, ty__tick_down) is >= it.
 *
 * Why 250 us and not 1 ms: rounding a deadline up to the tick makes a timer
 * late by half a tick on average (0.5 ms at 1 ms, measured by
 * bench/lua/timers.lua), and the worker parks until the tick with ns
 * precision (park.c), so the tick is what a sleep is late by. A finer tick
 * costs a wake-up per occupied tick for timers spread over time
 * (bench/lua/timers.lua: 20-25k context switches at 100 us, about 10k at
 * 250 us, 2.9k at 1 ms; bench/results-timers.md) and makes the cascades
 * bigger: at 250 us a second is 4000 ticks, within level 1 (64 ticks a
 * slot), so timers of up to a second cascade once, a slot of 16 ms at a
 * time; at 100 us they sat in level 2 and a slot of 410 ms cascaded in one
 * burst. The tick divides 1 ms, so virtual time (runtime.c, on whole ms)
 * still fires a timer of whole ms exactly when that much time is advanced.
 */
#ifndef TY_TIMER_H
#define TY_TIMER_H

#include "base/common.h"

#define TY__WHEEL_LEVELS 6
#define TY__WHEEL_SLOTS 64
#define TY__TICK_NS 250000ull /* one wheel tick: must divide 1 ms */

/* A deadline in ns as the first tick at or after it: never early. */
static inline uint64_t ty__tick_up(uint64_t ns) {
  return ns / TY__TICK_NS + (ns % TY__TICK_NS != 0);
}

/* The tick a time in ns lies in (for polling: a tick is due once begun). */
static inline uint64_t ty__tick_down(uint64_t ns) { return ns / TY__TICK_NS; }

/* Zero a timer before its first insert (`armed` must start false). */
typedef struct ty__timer {
  struct ty__timer *next, *prev; /* slot list; `next` also chains fired ones */
  uint64_t deadline;             /* ticks on the wheel's clock */
  uint8_t level, slot;
  bool armed;
  uint8_t kind; /* the owner's: what the timer is embedded in (the wheel
                   never reads it) */
} ty__timer;

/* An actor's wait timer (ty_actor.timer): the wheel's record and its actor. */
typedef struct ty__wtimer {
  ty__timer t; /* kind TY__TIMER_WAIT */
  struct ty_actor *actor;
} ty__wtimer;

typedef struct ty__wheel {
  uint64_t elapsed; /* the tick the wheel has advanced to */
  uint64_t occupied[TY__WHEEL_LEVELS];
  ty__timer *slots[TY__WHEEL_LEVELS][TY__WHEEL_SLOTS];
  size_t count; /* armed timers */
} ty__wheel;

void ty__wheel_init(ty__wheel *w, uint64_t now_tick);

/* Arms t (which must not be armed) for deadline (a tick). A deadline at or
 * before the wheel's time fires at the next poll. */
void ty__wheel_insert(ty__wheel *w, ty__timer *t, uint64_t deadline);

/* Disarms t if armed; no-op otherwise (so a fired timer's ->next, which may
 * still chain a poll's result, is left alone). */
void ty__wheel_cancel(ty__wheel *w, ty__timer *t);

/* Advances to tick `now` and returns every timer whose deadline <= now,
 * disarmed, chained through ->next in deadline order (ties in insert order
 * are not promised). NULL if none. A `now` behind the wheel's time is taken
 * as the wheel's time. Costs one step per occupied slot passed, not per
 * tick. */
ty__timer *ty__wheel_poll(ty__wheel *w, uint64_t now);

/* Earliest deadline (a tick) of an armed timer (a lower bound is allowed: never later
 * than the true one), or UINT64_MAX when none is armed. Exact when that timer
 * is in level 0; otherwise the start of its slot, so a worker sleeping until
 * then may wake early once per cascade, polls, and asks again. */
uint64_t ty__wheel_next_deadline(const ty__wheel *w);

static inline bool ty__timer_armed(const ty__timer *t) { return t->armed; }

#endif
