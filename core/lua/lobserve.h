/*
 * lobserve.h - observing a running node (lobserve.c, ltrace.c): what the
 * actors cost (resumes, CPU ticks), per-worker snapshots for
 * tycho.processes, tracebacks, and tracing. docs/architecture.md,
 * "Observing a running node".
 */
#ifndef TY_LOBSERVE_H
#define TY_LOBSERVE_H

#include <stdatomic.h>
#include <stdint.h>

#include "lactor.h"

/* A cheap clock for the CPU time of resumes: the TSC where there is one
 * (a few ns, no system call), else the monotonic clock. lt_ticks_ns turns
 * a number of ticks into nanoseconds. */
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
static inline uint64_t lt_ticks(void) { return __rdtsc(); }
#else
static inline uint64_t lt_ticks(void) { return ty__now_ns(); }
#endif
uint64_t lt_ticks_ns(uint64_t ticks);

/* CPU time is sampled: reading the clock twice per resume would cost a
 * ping-pong several percent. One resume in LT_SAMPLE on average is timed
 * and counts LT_SAMPLE times; the gaps between timed resumes are random
 * (1 .. 2 LT_SAMPLE - 1), so that no pattern of resumes (two actors taking
 * turns) always escapes it. Over many resumes the sums converge; an actor
 * with few long resumes has a rough figure. */
#define LT_SAMPLE 32u
static inline uint32_t lt_sample_gap(uint32_t *rng) {
  uint32_t x = *rng; /* xorshift32 */
  x ^= x << 13;
  x ^= x >> 17;
  x ^= x << 5;
  *rng = x;
  return 1 + x % (2 * LT_SAMPLE - 1);
}

/* Worker i's ticks spent in resumes, written by worker i only (any thread
 * reads it). */
_Atomic uint64_t *lt_busy_slot(unsigned i);

/* What tycho.trace follows: bits of lt_actor.trace. */
enum {
  LT_TR_SEND = 1,
  LT_TR_RECV = 2,
  LT_TR_CALL = 4,
  LT_TR_SPAWN = 8,
  LT_TR_EXIT = 16,
};

/* Trace events of a traced actor (la->trace has the bit; the caller tested
 * it). Out: a send or call to `to` (or a spawn of `to`) with the values at
 * L[first..first+n). In: a message from `from`, values on top of L (n). */
/* Cold: the hot paths that call them keep their code and registers for
 * the untraced case. */
__attribute__((cold)) void lt_trace_out(lua_State *L, lt_actor *la, int ev,
                                        ty_pid to, int first, int n);
__attribute__((cold)) void lt_trace_in(lua_State *L, lt_actor *la, ty_pid from,
                                       int n);
__attribute__((cold)) void lt_trace_exit(lt_actor *la, const char *reason,
                                         size_t len);

/* Adds the observer's functions (_obs_*, _trace_set) to the table on top
 * of L. */
void lt_open_observe(lua_State *L);

#endif
