/*
 * test_shtab_fix.c - the shared table's eviction and accounting edges
 * (core/store/shtab.c): a store never evicts the old copy of its own key
 * (a key cannot grow past the capacity, a push or a cas loses no data), a
 * store refused by the charge evicts nothing, and under racing stores the
 * table settles within its capacity (run under make tsan T=shtab).
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "store/shtab.h"
#include "test.h"

static _Atomic int64_t charged;
static _Atomic int64_t charge_limit = INT64_MAX;

/* seq_cst (the default): a test's counter, its cost does not matter */
static int charge(int64_t d) {
  int64_t now = atomic_fetch_add(&charged, d);
  if (d > 0 && now + d > atomic_load(&charge_limit)) {
    atomic_fetch_sub(&charged, d);
    return -1;
  }
  return 0;
}

static ty_shnow at(uint64_t t) { return (ty_shnow){t, t}; }
#define K(s) s, strlen(s)

/* 1. a key grown in steps smaller than the capacity evicts itself, then
 * stores more than the capacity */
TEST_IMPL(shtab_fix_grow) {
  static char big[8192];
  memset(big, 'x', sizeof big);
  ty_shtab *t = ty_shtab_new(1024, charge);
  ty_shval v = {TY_SHV_STR, 0, big, 900};
  CHECK_EQ(ty_shtab_set(t, K("k"), &v, 0, TY_SHTAB_SET, at(1)), 0);
  int rc = 0;
  for (size_t n = 1800; n <= 8000; n += 900) {
    v.len = n;
    rc = ty_shtab_set(t, K("k"), &v, 0, TY_SHTAB_SET, at(2));
  }
  CHECK_EQ(rc, -ENOMEM); /* 1800 fits, 2700 and more cannot */
  CHECK(ty_shtab_used(t) <= ty_shtab_capacity(t));
  ty__buf b;
  ty__buf_init(&b);
  CHECK_EQ(ty_shtab_get(t, K("k"), at(3), false, &b, &v, NULL), 0);
  CHECK_EQ(v.len, 900); /* the 900-byte value stays */
  ty__buf_free(&b);
  ty_shtab_free(t);
  return 0;
}

/* 2. a push that does not fit destroys the list and reports length 1 */
TEST_IMPL(shtab_fix_push) {
  char item[100];
  memset(item, 'i', sizeof item);
  ty_shtab *t = ty_shtab_new(1024, charge);
  long last = 0, rc = 0;
  for (int i = 0; i < 12; i++) {
    rc = ty_shtab_push(t, K("l"), item, sizeof item, false, at(1));
    if (rc < last) break;
    last = rc;
  }
  CHECK(rc == -ENOMEM || rc > last); /* the list is never replaced by [item] */
  ty_shtab_free(t);
  return 0;
}

/* 3. a store the charge (max_memory) refuses has already evicted */
TEST_IMPL(shtab_fix_refused) {
  size_t per = TY_SHTAB_OVERHEAD + 2 + 5;
  ty_shtab *t = ty_shtab_new(per * 4, charge);
  ty_shval a = {TY_SHV_STR, 0, "vvvvv", 5};
  const char *keys[] = {"k1", "k2", "k3", "k4", "k5"};
  for (int i = 0; i < 4; i++)
    CHECK_EQ(ty_shtab_set(t, K(keys[i]), &a, 0, TY_SHTAB_SET, at(10 + i)), 0);
  atomic_store(&charge_limit, atomic_load(&charged) - (int64_t)per);
  CHECK_EQ(ty_shtab_set(t, K("k5"), &a, 0, TY_SHTAB_SET, at(20)), -ENOMEM);
  size_t c = ty_shtab_count(t, at(21));
  atomic_store(&charge_limit, INT64_MAX);
  CHECK_EQ(c, 4); /* nothing evicted for a store that was refused */
  ty_shtab_free(t);
  return 0;
}

/* 4. cas growing the only entry evicts it: the cas says "differs" and the
 * key is gone */
TEST_IMPL(shtab_fix_cas) {
  static char big[2048];
  memset(big, 'x', sizeof big);
  ty_shtab *t = ty_shtab_new(1024, charge);
  ty_shval o = {TY_SHV_STR, 0, big, 500}, n = {TY_SHV_STR, 0, big, 600},
           j = {TY_SHV_STR, 0, big, 300};
  CHECK_EQ(ty_shtab_set(t, K("k"), &o, 0, TY_SHTAB_SET, at(1)), 0);
  CHECK_EQ(ty_shtab_set(t, K("j"), &j, 0, TY_SHTAB_SET, at(2)), 0);
  int rc = ty_shtab_cas(t, K("k"), &o, &n, at(3));
  ty__buf b;
  ty__buf_init(&b);
  ty_shval v;
  int g = ty_shtab_get(t, K("k"), at(4), false, &b, &v, NULL);
  CHECK(rc == 1 && g == 0); /* k stays (j goes), the cas matched */
  CHECK_EQ(v.len, 600);
  ty__buf_free(&b);
  ty_shtab_free(t);
  return 0;
}

/* 5. every operation at once; each value's bytes say which key and length
 * they were written for, so a torn or freed copy shows */
#define NT 4
static ty_shtab *g_t;
static long g_iters;
static _Atomic size_t g_max_used;
static _Atomic int g_bad;
static _Atomic int g_stop;

static uint64_t rnd(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

static void fill(char *p, unsigned key, size_t n) {
  for (size_t i = 0; i < n; i++) p[i] = (char)(key * 31 + n * 7 + i);
}

static void *worker(void *arg) {
  uint64_t seed = (uintptr_t)arg * 7919 + 11;
  ty__buf b;
  ty__buf_init(&b);
  static _Thread_local char val[600], exp_[600];
  char key[16];
  for (long i = 0; i < g_iters; i++) {
    uint64_t r = rnd(&seed);
    unsigned kn = (unsigned)(r % 256);
    snprintf(key, sizeof key, "k%u", kn);
    size_t len = 1 + (r >> 20) % 599;
    fill(val, kn, len);
    ty_shval v = {TY_SHV_BYTES, 0, val, len}, o;
    uint64_t now = (uint64_t)i * 10;
    switch ((r >> 12) % 16) {
    case 0:
    case 1: ty_shtab_set(g_t, K(key), &v, 0, TY_SHTAB_SET, at(now)); break;
    case 2: ty_shtab_set(g_t, K(key), &v, 30, TY_SHTAB_ADD, at(now)); break;
    case 3: ty_shtab_delete(g_t, K(key)); break;
    case 4: {
      double res;
      ty_shtab_incr(g_t, K("ctr"), 1, true, 0, 0, at(now), &res);
      break;
    }
    case 5:
      if ((r >> 40) % 64 == 0) ty_shtab_flush(g_t);
      break;
    case 6: ty_shtab_flush_expired(g_t, 5, at(now)); break;
    case 7:
      if ((r >> 40) % 64 == 0) ty_shtab_expire_all(g_t, at(now));
      break;
    case 8:
      ty__buf_reset(&b);
      ty_shtab_keys(g_t, 50, at(now), &b);
      break;
    case 9: ty_shtab_push(g_t, K("list"), val, 8, r & 1, at(now)); break;
    case 10: ty_shtab_pop(g_t, K("list"), r & 1, at(now), &b); break;
    case 11: {
      /* cas from whatever is there to v */
      if (ty_shtab_get(g_t, K(key), at(now), false, &b, &o, NULL) == 0 &&
          o.kind == TY_SHV_BYTES) {
        memcpy(exp_, o.data, o.len);
        ty_shval e = {TY_SHV_BYTES, 0, exp_, o.len};
        ty_shtab_cas(g_t, K(key), &e, &v, at(now));
      }
      break;
    }
    default: {
      bool expired;
      if (ty_shtab_get(g_t, K(key), at(now), (r & 3) == 0, &b, &o, &expired) ==
              0 &&
          o.kind == TY_SHV_BYTES) {
        fill(exp_, kn, o.len);
        if (memcmp(exp_, o.data, o.len)) atomic_store(&g_bad, 1);
      }
    }
    }
  }
  ty__buf_free(&b);
  return NULL;
}

static void *watcher(void *arg) {
  (void)arg;
  while (!atomic_load(&g_stop)) {
    size_t u = ty_shtab_used(g_t);
    if (u > atomic_load(&g_max_used)) atomic_store(&g_max_used, u);
  }
  return NULL;
}

TEST_IMPL(shtab_fix_stress) {
  g_iters = test_scaled(300000, 5000);
  size_t cap = 64 * 1024;
  g_t = ty_shtab_new(cap, charge);
  pthread_t th[NT], w;
  CHECK_EQ(pthread_create(&w, NULL, watcher, NULL), 0);
  for (long i = 0; i < NT; i++)
    CHECK_EQ(pthread_create(&th[i], NULL, worker, (void *)i), 0);
  for (int i = 0; i < NT; i++) pthread_join(th[i], NULL);
  atomic_store(&g_stop, 1);
  pthread_join(w, NULL);
  CHECK(!atomic_load(&g_bad));
  CHECK(ty_shtab_used(g_t) <= cap);
  CHECK_EQ(atomic_load(&charged), (long long)ty_shtab_used(g_t));
  ty_shtab_free(g_t);
  CHECK_EQ(atomic_load(&charged), 0);
  return 0;
}

/* 6. stores only, big entries: how far past the capacity the table goes */
static void *setter(void *arg) {
  uint64_t seed = (uintptr_t)arg * 104729 + 3;
  static _Thread_local char val[8000];
  char key[16];
  for (long i = 0; i < g_iters; i++) {
    uint64_t r = rnd(&seed);
    snprintf(key, sizeof key, "s%u", (unsigned)(r % 64));
    ty_shval v = {TY_SHV_BYTES, 0, val, 1000 + (r >> 20) % 7000};
    ty_shtab_set(g_t, K(key), &v, 0, TY_SHTAB_SET, at((uint64_t)i));
  }
  return NULL;
}

TEST_IMPL(shtab_fix_overshoot) {
  g_iters = test_scaled(200000, 5000);
  size_t cap = 16 * 1024;
  g_t = ty_shtab_new(cap, charge);
  atomic_store(&g_stop, 0);
  atomic_store(&g_max_used, 0);
  pthread_t th[NT], w;
  CHECK_EQ(pthread_create(&w, NULL, watcher, NULL), 0);
  for (long i = 0; i < NT; i++)
    CHECK_EQ(pthread_create(&th[i], NULL, setter, (void *)i), 0);
  for (int i = 0; i < NT; i++) pthread_join(th[i], NULL);
  atomic_store(&g_stop, 1);
  pthread_join(w, NULL);
  CHECK_EQ(atomic_load(&charged), (long long)ty_shtab_used(g_t));
  /* racing stores may pass it for a moment, but settle within it */
  CHECK(ty_shtab_used(g_t) <= cap);
  ty_shtab_free(g_t);
  return 0;
}
