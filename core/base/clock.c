/*
 * clock.c - the monotonic clock.
 */
#include <time.h>

#include "common.h"

uint64_t ty__now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
