/*
 * common.h - small helpers shared by every file of the core.
 *
 * Conventions (libuv-like): public names start with ty_, internal ones with
 * ty__; functions that can fail return 0 or a negative errno (-ENOMEM,
 * -EAGAIN ...). A -1 in the core is not an error code but a documented
 * "none": a parser's unknown word (ty__log_level_parse, ty__io_kind_parse),
 * no worker to wake (ty__idle_to_notify), an infinite timeout. The binding
 * (core/lua, net, cluster) has its own rule: docs/architecture.md, "Layers".
 * Every atomic access names its memory order and carries a comment on why that
 * order is enough.
 */
#ifndef TY_COMMON_H
#define TY_COMMON_H

#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define TY_CACHELINE 64
/* Two lines: adjacent-line prefetchers pull pairs, so 128 keeps writers apart. */
#define TY_PAD 128

#define ty__likely(x) __builtin_expect(!!(x), 1)
#define ty__unlikely(x) __builtin_expect(!!(x), 0)
#define ty__countof(a) (sizeof(a) / sizeof((a)[0]))

/* Invariant checks that cost nothing in release builds (NDEBUG). */
#ifndef NDEBUG
#define ty__assert(cond)                                                       \
  do {                                                                         \
    if (ty__unlikely(!(cond))) {                                               \
      fprintf(stderr, "tycho: assertion failed: %s (%s:%d)\n", #cond,          \
              __FILE__, __LINE__);                                             \
      abort();                                                                 \
    }                                                                          \
  } while (0)
#else
#define ty__assert(cond) ((void)0)
#endif

/* Unrecoverable: out of memory in a place that cannot report it. */
#define ty__die(msg)                                                           \
  do {                                                                         \
    fprintf(stderr, "tycho: fatal: %s (%s:%d)\n", msg, __FILE__, __LINE__);    \
    abort();                                                                   \
  } while (0)

/*
 * The intrusive link every queued thing starts with: spawn requests (actors
 * that have not started), messages and completions. One link suffices because
 * a node sits in at most one queue at a time.
 */
typedef struct ty__node {
  struct ty__node *next;
} ty__node;

static inline void *ty__xmalloc(size_t n) {
  void *p = malloc(n);
  if (ty__unlikely(!p)) ty__die("out of memory");
  return p;
}

static inline void *ty__xcalloc(size_t n, size_t size) {
  void *p = calloc(n, size);
  if (ty__unlikely(!p)) ty__die("out of memory");
  return p;
}

static inline void *ty__xrealloc(void *p, size_t n) {
  p = realloc(p, n);
  if (ty__unlikely(!p && n)) ty__die("out of memory");
  return p;
}

/* Makes the array *pv (of `elem`-byte items, room for *cap) hold at least
 * `need` items, doubling from `first`. */
static inline void ty__grow(void *pv, size_t *cap, size_t need, size_t elem,
                            size_t first) {
  if (need <= *cap) return;
  size_t c = *cap ? *cap : first;
  while (c < need) c *= 2;
  void **p = (void **)pv;
  *p = ty__xrealloc(*p, c * elem);
  *cap = c;
}

/* Monotonic clock in nanoseconds. */
uint64_t ty__now_ns(void);

/*
 * Chaos points: a chaos build (make chaos, -DTY_CHAOS_BUILD) yields or sleeps at
 * random at TY_CHAOS(), placed at the scheduler's atomic operations and park
 * points, so that its stress tests meet the interleavings a quiet machine
 * seldom shows (base/chaos.c; TY_CHAOS=yield,sleep in per mille). Other
 * builds compile TY_CHAOS() to nothing.
 */
#ifdef TY_CHAOS_BUILD
void ty__chaos(void);
#define TY_CHAOS() ty__chaos()
#else
#define TY_CHAOS() ((void)0)
#endif

/* Pause inside a spin loop (keeps the sibling hyperthread and the bus calm). */
static inline void ty__cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

/* xorshift64* step: cheap per-thread randomness for P2C and victim choice. */
static inline uint64_t ty__rand_next(uint64_t *state) {
  uint64_t x = *state;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  *state = x;
  return x * 0x2545F4914F6CDD1DULL;
}

#endif
