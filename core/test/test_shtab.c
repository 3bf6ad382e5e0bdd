/*
 * test_shtab.c - the shared table (core/store/shtab.c): its semantics one
 * thread at a time, then threads hammering one table (incr loses nothing,
 * sets, gets, deletes and evictions race; run under make tsan and in the
 * chaos build).
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "store/shtab.h"
#include "test.h"

static _Atomic int64_t charged;
static _Atomic int64_t charge_limit = INT64_MAX;

/* relaxed: a count the test reads after joining every thread */
static int charge(int64_t d) {
  int64_t now = atomic_fetch_add_explicit(&charged, d, memory_order_relaxed);
  if (d > 0 &&
      now + d > atomic_load_explicit(&charge_limit, memory_order_relaxed)) {
    atomic_fetch_sub_explicit(&charged, d, memory_order_relaxed);
    return -1;
  }
  return 0;
}

static ty_shnow at(uint64_t t) { return (ty_shnow){t, t}; }

static ty_shval str(const char *s) {
  return (ty_shval){TY_SHV_STR, 0, s, strlen(s)};
}

static ty_shval num(double d) { return (ty_shval){TY_SHV_NUM, d, NULL, 0}; }

#define K(s) s, strlen(s)

TEST_IMPL(shtab_basic) {
  ty_shtab *t = ty_shtab_new(1 << 20, charge);
  CHECK(t);
  ty__buf b;
  ty__buf_init(&b);
  ty_shval v, a = str("hello"), n1 = num(1);
  CHECK_EQ(ty_shtab_get(t, K("k"), at(1), false, &b, &v, NULL), -ENOENT);
  CHECK_EQ(ty_shtab_set(t, K("k"), &a, 0, TY_SHTAB_SET, at(2)), 0);
  CHECK_EQ(ty_shtab_get(t, K("k"), at(3), false, &b, &v, NULL), 0);
  CHECK(v.kind == TY_SHV_STR && v.len == 5 && memcmp(v.data, "hello", 5) == 0);
  CHECK_EQ(ty_shtab_used(t), TY_SHTAB_OVERHEAD + 1 + 5);
  CHECK_EQ(atomic_load(&charged), TY_SHTAB_OVERHEAD + 1 + 5);
  CHECK_EQ(ty_shtab_set(t, K("k"), &a, 0, TY_SHTAB_ADD, at(4)), -EEXIST);
  CHECK_EQ(ty_shtab_set(t, K("x"), &a, 0, TY_SHTAB_REPLACE, at(4)), -ENOENT);
  double r = 0;
  CHECK_EQ(ty_shtab_incr(t, K("k"), 1, false, 0, 0, at(5), &r), -EINVAL);
  CHECK_EQ(ty_shtab_incr(t, K("c"), 1, false, 0, 0, at(5), &r), -ENOENT);
  CHECK_EQ(ty_shtab_incr(t, K("c"), 2, true, 10, 0, at(5), &r), 0);
  CHECK(r == 12);
  CHECK_EQ(ty_shtab_incr(t, K("c"), -2, false, 0, 0, at(5), &r), 0);
  CHECK(r == 10);
  CHECK_EQ(ty_shtab_cas(t, K("c"), &n1, &a, at(6)), 0);
  ty_shval n10 = num(10);
  CHECK_EQ(ty_shtab_cas(t, K("c"), &n10, &a, at(6)), 1);
  CHECK_EQ(ty_shtab_get(t, K("c"), at(7), false, &b, &v, NULL), 0);
  CHECK(v.kind == TY_SHV_STR);
  CHECK_EQ(ty_shtab_count(t, at(8)), 2);
  CHECK_EQ(ty_shtab_delete(t, K("c")), 0);
  CHECK_EQ(ty_shtab_delete(t, K("c")), -ENOENT);
  ty__buf_reset(&b);
  CHECK_EQ(ty_shtab_keys(t, 0, at(9), &b), 1);
  CHECK_EQ(b.len, 4 + 1);
  ty_shtab_flush(t);
  CHECK_EQ(ty_shtab_count(t, at(10)), 0);
  CHECK_EQ(ty_shtab_used(t), 0);
  CHECK_EQ(atomic_load(&charged), 0);
  /* the charge refuses: nothing changes */
  atomic_store(&charge_limit, 10);
  CHECK_EQ(ty_shtab_set(t, K("k"), &a, 0, TY_SHTAB_SET, at(11)), -ENOMEM);
  CHECK_EQ(ty_shtab_count(t, at(11)), 0);
  atomic_store(&charge_limit, INT64_MAX);
  ty__buf_free(&b);
  ty_shtab_free(t);
  return 0;
}

TEST_IMPL(shtab_lru) {
  size_t per = TY_SHTAB_OVERHEAD + 2 + 5;
  ty_shtab *t = ty_shtab_new(per * 4, charge);
  ty__buf b;
  ty__buf_init(&b);
  ty_shval v, a = str("vvvvv");
  const char *keys[] = {"k1", "k2", "k3", "k4", "k5", "k6"};
  for (int i = 0; i < 4; i++)
    CHECK_EQ(ty_shtab_set(t, K(keys[i]), &a, 0, TY_SHTAB_SET, at(10 + i)), 0);
  CHECK_EQ(ty_shtab_free_space(t), 0);
  CHECK_EQ(ty_shtab_get(t, K("k1"), at(20), false, &b, &v, NULL), 0);
  /* k2 is now the least recently used */
  CHECK_EQ(ty_shtab_set(t, K("k5"), &a, 0, TY_SHTAB_SAFE, at(21)), -ENOMEM);
  CHECK_EQ(ty_shtab_set(t, K("k5"), &a, 0, TY_SHTAB_SET, at(21)),
           TY_SHTAB_EVICTED);
  CHECK_EQ(ty_shtab_get(t, K("k2"), at(22), false, &b, &v, NULL), -ENOENT);
  CHECK_EQ(ty_shtab_get(t, K("k1"), at(23), false, &b, &v, NULL), 0);
  /* an expired entry makes room without counting as evicted */
  CHECK_EQ(ty_shtab_expire(t, K("k3"), 1, at(24)), 0);
  CHECK_EQ(ty_shtab_set(t, K("k6"), &a, 0, TY_SHTAB_SET, at(30)), 0);
  CHECK_EQ(ty_shtab_get(t, K("k4"), at(31), false, &b, &v, NULL), 0);
  /* the same size in place: no eviction */
  CHECK_EQ(ty_shtab_set(t, K("k6"), &a, 0, TY_SHTAB_SET, at(32)), 0);
  CHECK_EQ(ty_shtab_count(t, at(33)), 4);
  /* larger than the table */
  char big[1024];
  memset(big, 'x', sizeof big);
  ty_shval bv = {TY_SHV_BYTES, 0, big, sizeof big};
  CHECK_EQ(ty_shtab_set(t, K("big"), &bv, 0, TY_SHTAB_SET, at(34)), -ENOMEM);
  CHECK_EQ(ty_shtab_count(t, at(35)), 4);
  ty__buf_free(&b);
  ty_shtab_free(t);
  CHECK_EQ(atomic_load(&charged), 0);
  return 0;
}

TEST_IMPL(shtab_ttl_lists) {
  ty_shtab *t = ty_shtab_new(1 << 20, charge);
  ty__buf b;
  ty__buf_init(&b);
  ty_shval v, a = str("a");
  bool expired = false;
  uint64_t left = 0;
  CHECK_EQ(ty_shtab_set(t, K("k"), &a, 100, TY_SHTAB_SET, at(1000)), 0);
  CHECK_EQ(ty_shtab_ttl(t, K("k"), at(1040), &left), 0);
  CHECK_EQ(left, 60);
  CHECK_EQ(ty_shtab_get(t, K("k"), at(1099), false, &b, &v, NULL), 0);
  CHECK_EQ(ty_shtab_get(t, K("k"), at(1100), false, &b, &v, NULL), -ENOENT);
  CHECK_EQ(ty_shtab_get(t, K("k"), at(1100), true, &b, &v, &expired), 0);
  CHECK(expired);
  CHECK_EQ(ty_shtab_expire(t, K("k"), 5, at(1100)), -ENOENT);
  CHECK_EQ(ty_shtab_set(t, K("k"), &a, 0, TY_SHTAB_ADD, at(1100)), 0);
  CHECK_EQ(ty_shtab_ttl(t, K("k"), at(1200), &left), 0);
  CHECK_EQ(left, 0);
  CHECK_EQ(ty_shtab_flush_expired(t, 0, at(1200)), 0);
  ty_shtab_expire_all(t, at(1300));
  CHECK_EQ(ty_shtab_count(t, at(1300)), 0);
  CHECK_EQ(ty_shtab_flush_expired(t, 0, at(1300)), 1);
  /* lists */
  CHECK_EQ(ty_shtab_push(t, K("l"), K("x"), true, at(1)), 1);
  CHECK_EQ(ty_shtab_push(t, K("l"), K("yy"), true, at(1)), 2);
  CHECK_EQ(ty_shtab_push(t, K("l"), K("z"), false, at(1)), 3);
  CHECK_EQ(ty_shtab_llen(t, K("l"), at(1)), 3);
  CHECK_EQ(ty_shtab_pop(t, K("l"), false, at(1), &b), 0);
  CHECK(b.len == 1 && b.data[0] == 'z');
  CHECK_EQ(ty_shtab_pop(t, K("l"), true, at(1), &b), 0);
  CHECK(b.len == 2 && b.data[0] == 'y');
  CHECK_EQ(ty_shtab_pop(t, K("l"), true, at(1), &b), 0);
  CHECK_EQ(ty_shtab_pop(t, K("l"), true, at(1), &b), -ENOENT);
  CHECK_EQ(ty_shtab_llen(t, K("l"), at(1)), 0);
  CHECK_EQ(ty_shtab_set(t, K("s"), &a, 0, TY_SHTAB_SET, at(1)), 0);
  CHECK_EQ(ty_shtab_push(t, K("s"), K("x"), true, at(1)), -EINVAL);
  ty__buf_free(&b);
  ty_shtab_free(t);
  CHECK_EQ(atomic_load(&charged), 0);
  return 0;
}

/* ---- threads ------------------------------------------------------------ */

#define THREADS 4
static ty_shtab *g_t;
static long g_iters;

static uint64_t rnd(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

static void *hammer(void *arg) {
  uint64_t seed = (uintptr_t)arg * 7919 + 1;
  ty__buf b;
  ty__buf_init(&b);
  char key[16], val[64];
  memset(val, 'v', sizeof val);
  for (long i = 0; i < g_iters; i++) {
    uint64_t r = rnd(&seed);
    double res;
    /* every thread adds 1 to "ctr" each turn: none may be lost */
    if (ty_shtab_incr(g_t, K("ctr"), 1, true, 0, 0, at(i), &res) < 0) abort();
    snprintf(key, sizeof key, "k%u", (unsigned)(r % 512));
    ty_shval v = {TY_SHV_BYTES, 0, val, 1 + (r >> 20) % 63};
    switch ((r >> 10) % 8) {
    case 0: ty_shtab_set(g_t, K(key), &v, 0, TY_SHTAB_SET, at(i)); break;
    case 1: ty_shtab_delete(g_t, K(key)); break;
    case 2: ty_shtab_set(g_t, K(key), &v, 50, TY_SHTAB_ADD, at(i)); break;
    case 3: ty_shtab_push(g_t, K("list"), K("item"), r & 1, at(i)); break;
    case 4: ty_shtab_pop(g_t, K("list"), r & 1, at(i), &b); break;
    default: {
      ty_shval o;
      ty_shtab_get(g_t, K(key), at(i), false, &b, &o, NULL);
    }
    }
  }
  ty__buf_free(&b);
  return NULL;
}

TEST_IMPL(shtab_stress) {
  g_iters = test_scaled(200000, 5000);
  /* small enough that the stores keep evicting */
  g_t = ty_shtab_new(200 * (TY_SHTAB_OVERHEAD + 70), charge);
  pthread_t th[THREADS];
  for (long i = 0; i < THREADS; i++)
    CHECK_EQ(pthread_create(&th[i], NULL, hammer, (void *)i), 0);
  for (int i = 0; i < THREADS; i++) pthread_join(th[i], NULL);
  ty__buf b;
  ty__buf_init(&b);
  ty_shval v;
  /* the counter is recently used all the time, but may have been evicted
   * once the others outlived it: when present it counts every incr since */
  int rc = ty_shtab_get(g_t, K("ctr"), at(0), false, &b, &v, NULL);
  CHECK(rc == 0 || rc == -ENOENT);
  CHECK(ty_shtab_used(g_t) <= ty_shtab_capacity(g_t) + 4 * 200);
  CHECK_EQ(atomic_load(&charged), (long long)ty_shtab_used(g_t));
  ty_shtab_free(g_t);
  CHECK_EQ(atomic_load(&charged), 0);
  /* no eviction: the count is exact */
  g_t = ty_shtab_new(1 << 24, charge);
  for (long i = 0; i < THREADS; i++)
    CHECK_EQ(pthread_create(&th[i], NULL, hammer, (void *)i), 0);
  for (int i = 0; i < THREADS; i++) pthread_join(th[i], NULL);
  CHECK_EQ(ty_shtab_get(g_t, K("ctr"), at(0), false, &b, &v, NULL), 0);
  CHECK(v.kind == TY_SHV_NUM && v.num == (double)(g_iters * THREADS));
  ty__buf_free(&b);
  ty_shtab_free(g_t);
  CHECK_EQ(atomic_load(&charged), 0);
  return 0;
}
