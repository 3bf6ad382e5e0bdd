/*
 * chaos.c - the chaos points of a chaos build (common.h, make chaos): at each
 * TY_CHAOS(), with the per-mille rates of TY_CHAOS=yield,sleep (default
 * 50,2), the thread calls sched_yield() or sleeps 1-100 us. Other builds
 * compile nothing here.
 */
#include "common.h"

#ifdef TY_CHAOS_BUILD
#include <pthread.h>
#include <sched.h>
#include <time.h>

static unsigned g_yield = 50, g_sleep = 2; /* per mille */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void read_rates(void) {
  const char *s = getenv("TY_CHAOS");
  unsigned y, z;
  if (s && sscanf(s, "%u,%u", &y, &z) == 2 && y + z <= 1000) {
    g_yield = y;
    g_sleep = z;
  }
}

void ty__chaos(void) {
  static _Thread_local uint64_t t_state;
  if (ty__unlikely(!t_state)) {
    pthread_once(&g_once, read_rates);
    t_state = ty__now_ns() ^ ((uint64_t)(uintptr_t)&t_state << 16) ^ 1;
  }
  uint64_t r = ty__rand_next(&t_state);
  unsigned x = (unsigned)(r % 1000);
  if (x < g_yield) {
    sched_yield();
  } else if (x < g_yield + g_sleep) {
    struct timespec ts = {0, (long)(1000 + (r >> 32) % 99000)};
    nanosleep(&ts, NULL);
  }
}
#else
typedef int ty__chaos_unused; /* an empty translation unit is not ISO C */
#endif
