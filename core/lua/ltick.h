/*
 * ltick.h - the clock of resumes' CPU time and its sampling (header only,
 * values floor of core/lua): the resume loop (lactor.c) times one resume
 * in LT_SAMPLE, the observer (lobserve.c) converts the ticks.
 */
#ifndef TY_LTICK_H
#define TY_LTICK_H

#include <stdint.h>

#include "base/common.h"

/* A cheap clock for the CPU time of resumes: the TSC where there is one
 * (a few ns, no system call), else the monotonic clock. lt_ticks_ns turns
 * a number of ticks into nanoseconds. */
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
static inline uint64_t lt_ticks(void) { return __rdtsc(); }
#else
static inline uint64_t lt_ticks(void) { return ty__now_ns(); }
#endif
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

#endif
