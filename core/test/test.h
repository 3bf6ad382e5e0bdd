/*
 * test.h - the C test harness (libuv style): every test is
 *   TEST_IMPL(name) { ...; return 0; }
 * in some core/test/test_*.c, registered once in list.h. run.c runs each test
 * in its own child process with a time limit, so a hang or a crash fails that
 * test alone, and prints "N passed, N failed".
 */
#ifndef TY_TEST_H
#define TY_TEST_H

#include <stdio.h>
#include <stdlib.h>

#define TEST_IMPL(name) int test_##name(void)

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "CHECK failed: %s (%s:%d)\n", #cond, __FILE__,           \
              __LINE__);                                                       \
      return 1;                                                                \
    }                                                                          \
  } while (0)

#define CHECK_EQ(a, b)                                                         \
  do {                                                                         \
    long long va_ = (long long)(a), vb_ = (long long)(b);                      \
    if (va_ != vb_) {                                                          \
      fprintf(stderr, "CHECK_EQ failed: %s == %s (%lld vs %lld) (%s:%d)\n",    \
              #a, #b, va_, vb_, __FILE__, __LINE__);                           \
      return 1;                                                                \
    }                                                                          \
  } while (0)

/* Stress tests scale down under sanitizers (which slow code 5-20x) through
 * TY_TEST_SCALE (a divisor, default 1); they never drop below a floor that
 * still exercises every path. */
static inline long test_scaled(long n, long floor) {
  const char *s = getenv("TY_TEST_SCALE");
  long d = s ? atol(s) : 1;
  if (d < 1) d = 1;
  n /= d;
  return n < floor ? floor : n;
}

#endif
