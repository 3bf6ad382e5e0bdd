/*
 * shtab.c - the shared table (shtab.h).
 *
 * 64 shards, each a mutex, a chained hash table and a list of its entries
 * from most to least recently used. A key lives in the shard its hash
 * picks; every operation on one key takes that shard's lock only, for the
 * time of a lookup and a copy (never an allocation of the caller's, never
 * a decode: lshared.c decodes from its own buffer after the unlock).
 *
 * Eviction is table-wide LRU: each shard publishes the use stamp of its
 * least recent entry, and a store that needs room removes the oldest of
 * those, one shard lock at a time (a store never holds two locks, so no
 * lock order exists to get wrong). Stamps come from a real clock, kept
 * increasing per shard; across shards they order uses as the clock does.
 * docs/architecture.md, "Shared tables", has the reasons.
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/random.h>

#include "base/common.h"
#include "base/list.h"
#include "shtab.h"
#include "shtab_store.h"

#define NSHARD 64
#define MIN_BUCKETS 16

typedef struct ent {
  struct ent *hnext;       /* hash chain */
  struct ent *prev, *next; /* use order: prev is more recent */
  uint64_t stamp;          /* last use (now.lru) */
  uint64_t expires;        /* now.ttl after which it reads as absent; 0 never */
  double num;              /* TY_SHV_NUM */
  uint32_t hash, klen;
  uint32_t vlen;
  uint8_t kind;
  char data[]; /* key, then value */
} ent;
_Static_assert(sizeof(ent) <= TY_SHTAB_OVERHEAD, "an entry's header");

typedef struct shard {
  pthread_mutex_t mu;
  ent **buckets;
  size_t nb, n;
  ent *head, *tail; /* most and least recently used */
  uint64_t last;    /* the last stamp given */
  /* The tail's stamp (UINT64_MAX: empty), read without the lock by stores
   * looking for the oldest entry. relaxed: a hint; the evictor takes the
   * lock and evicts whatever the tail is then. */
  _Atomic uint64_t oldest;
} shard;

struct ty_shtab {
  size_t capacity;
  uint64_t seed; /* the hash's (set once, before the table is shared) */
  ty_shtab_charge charge;
  /* Bytes of the entries. relaxed: a count; the entries themselves are
   * published by the shard locks. */
  _Atomic int64_t used;
  alignas(TY_PAD) struct {
    shard s;
    char pad[TY_PAD - sizeof(shard) % TY_PAD];
  } sh[NSHARD];
};

/* Seeded per table (getrandom, ty_shtab_new): keys chosen to collide in
 * one process do not collide in another, so a peer that picks the keys
 * cannot pile them into one chain. */
static uint64_t hash(const ty_shtab *t, const char *k, size_t n) {
  uint64_t h = (1469598103934665603ull ^ t->seed) ^ n;
  for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)k[i]) * 1099511628211ull;
  h ^= h >> 29;
  h *= 0xbf58476d1ce4e5b9ull;
  return h ^ (h >> 32);
}

static inline shard *shard_of(ty_shtab *t, uint64_t h) {
  return &t->sh[h >> 58].s;
}

static inline size_t cost_of(size_t klen, size_t vlen) {
  return TY_SHTAB_OVERHEAD + klen + vlen;
}

static inline size_t ent_cost(const ent *e) {
  return cost_of(e->klen, e->vlen);
}

static inline bool live(const ent *e, uint64_t now) {
  return !e->expires || e->expires > now;
}

ty_shtab *ty_shtab_new(size_t capacity, ty_shtab_charge charge) {
  ty_shtab *t = aligned_alloc(TY_PAD, sizeof *t);
  if (!t) return NULL;
  memset(t, 0, sizeof *t);
  t->capacity = capacity;
  t->charge = charge;
  if (getrandom(&t->seed, sizeof t->seed, GRND_NONBLOCK) != sizeof t->seed)
    t->seed = ty__now_ns() ^ (uint64_t)(uintptr_t)t;
  for (int i = 0; i < NSHARD; i++) {
    shard *s = &t->sh[i].s;
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    /* spins briefly before sleeping: the sections are a lookup and a copy */
    pthread_mutexattr_settype(&a, PTHREAD_MUTEX_ADAPTIVE_NP);
    pthread_mutex_init(&s->mu, &a);
    pthread_mutexattr_destroy(&a);
    atomic_store_explicit(&s->oldest, UINT64_MAX, memory_order_relaxed);
  }
  return t;
}

/* ---- one shard, under its lock ---------------------------------------- */

static ent *find(shard *s, uint32_t h, const char *k, size_t klen,
                 ent ***link) {
  if (!s->nb) return NULL;
  ent **p = &s->buckets[h & (s->nb - 1)];
  for (; *p; p = &(*p)->hnext) {
    ent *e = *p;
    if (e->hash == h && e->klen == klen && memcmp(e->data, k, klen) == 0) {
      if (link) *link = p;
      return e;
    }
  }
  return NULL;
}

static void publish_oldest(shard *s) {
  atomic_store_explicit(&s->oldest, s->tail ? s->tail->stamp : UINT64_MAX,
                        memory_order_relaxed);
}

static void lru_unlink(shard *s, ent *e) {
  TY_LIST_UNLINK_TAIL(&s->head, &s->tail, e, next, prev);
}

static void lru_push(shard *s, ent *e, uint64_t lru) {
  e->stamp = lru > s->last ? lru : s->last + 1;
  s->last = e->stamp;
  TY_LIST_PUSH(&s->head, e, next, prev);
  if (!s->tail) s->tail = e;
}

static void touch(shard *s, ent *e, uint64_t lru) {
  bool was_tail = s->tail == e;
  if (s->head != e) {
    lru_unlink(s, e);
    lru_push(s, e, lru);
  } else {
    e->stamp = lru > s->last ? lru : s->last + 1;
    s->last = e->stamp;
  }
  if (was_tail) publish_oldest(s); /* the tail or its stamp changed */
}

static int grow(shard *s) {
  size_t nb = s->nb ? s->nb * 2 : MIN_BUCKETS;
  ent **b = calloc(nb, sizeof *b);
  if (!b) return -ENOMEM;
  for (size_t i = 0; i < s->nb; i++) {
    for (ent *e = s->buckets[i], *nx; e; e = nx) {
      nx = e->hnext;
      e->hnext = b[e->hash & (nb - 1)];
      b[e->hash & (nb - 1)] = e;
    }
  }
  free(s->buckets);
  s->buckets = b;
  s->nb = nb;
  return 0;
}

/* Unlinks e (found through link); the caller frees it and uncharges. */
static void unlink_ent(ty_shtab *t, shard *s, ent *e, ent **link) {
  *link = e->hnext;
  lru_unlink(s, e);
  s->n--;
  publish_oldest(s);
  /* relaxed: see `used` */
  atomic_fetch_sub_explicit(&t->used, (int64_t)ent_cost(e),
                            memory_order_relaxed);
}

/* held: bytes make_room reserved for e, already counted in `used` */
static void link_ent(ty_shtab *t, shard *s, ent *e, uint64_t lru, size_t held) {
  if (s->n >= s->nb && grow(s) && !s->nb) ty__die("shtab: no buckets");
  size_t i = e->hash & (s->nb - 1);
  e->hnext = s->buckets[i];
  s->buckets[i] = e;
  lru_push(s, e, lru);
  s->n++;
  publish_oldest(s);
  atomic_fetch_add_explicit(&t->used, (int64_t)ent_cost(e) - (int64_t)held,
                            memory_order_relaxed); /* see `used` */
}

static void drop(ty_shtab *t, ent *e) {
  int64_t c = (int64_t)ent_cost(e);
  free(e);
  if (t->charge) t->charge(-c);
}

static bool same_value(const ent *e, const ty_shval *v) {
  if (e->kind != v->kind) return false;
  if (e->kind == TY_SHV_NUM) return e->num == v->num;
  return e->vlen == v->len && memcmp(e->data + e->klen, v->data, v->len) == 0;
}

/* ---- making room -------------------------------------------------------- */

/* Reserves `need` bytes in `used`, evicting in LRU order until they fit
 * within the capacity. 0 (the bytes stay reserved: the caller's link_ent
 * takes them over, or unreserve gives them back) or -ENOMEM (nothing
 * reserved); *evicted when a live entry went. The caller's own key (h, k)
 * is never evicted: its old value is what the store replaces, and losing
 * it would lose the data a cas or a list push is built on. */
static int make_room(ty_shtab *t, size_t need, bool safe, ty_shnow now,
                     bool *evicted, uint32_t h, const char *k, size_t klen) {
  if (need > t->capacity) return -ENOMEM;
  /* relaxed: `used` is a count; reserving with one read-modify-write
   * means two stores racing can never both take the same free bytes (the
   * entries themselves are published by the shard locks). */
  int64_t u =
      atomic_fetch_add_explicit(&t->used, (int64_t)need, memory_order_relaxed) +
      (int64_t)need;
  int skip = -1; /* the shard whose only candidate is the caller's key */
  for (int tries = 0; tries < 100000; tries++) {
    if (u <= (int64_t)t->capacity) return 0;
    int best = -1;
    uint64_t min = UINT64_MAX;
    for (int i = 0; i < NSHARD; i++) {
      uint64_t o =
          atomic_load_explicit(&t->sh[i].s.oldest, memory_order_relaxed);
      if (i != skip && o < min) min = o, best = i;
    }
    if (best < 0) break;
    shard *s = &t->sh[best].s;
    pthread_mutex_lock(&s->mu);
    ent *e = s->tail, **link = NULL;
    if (e && e->hash == h && e->klen == klen && memcmp(e->data, k, klen) == 0) {
      e = e->prev;
      if (!e) skip = best;
    }
    if (!e) {
      pthread_mutex_unlock(&s->mu);
      u = atomic_load_explicit(&t->used, memory_order_relaxed);
      continue;
    }
    bool was_live = live(e, now.ttl);
    if (was_live && safe) {
      pthread_mutex_unlock(&s->mu);
      break;
    }
    find(s, e->hash, e->data, e->klen, &link);
    unlink_ent(t, s, e, link);
    pthread_mutex_unlock(&s->mu);
    drop(t, e);
    if (was_live) *evicted = true;
    u = atomic_load_explicit(&t->used, memory_order_relaxed);
  }
  atomic_fetch_sub_explicit(&t->used, (int64_t)need,
                            memory_order_relaxed); /* see above */
  return -ENOMEM;
}

static void unreserve(ty_shtab *t, size_t held) {
  /* relaxed: see make_room */
  if (held)
    atomic_fetch_sub_explicit(&t->used, (int64_t)held, memory_order_relaxed);
}

/* ---- stores ------------------------------------------------------------ */

static ent *make_ent(ty_shtab *t, uint32_t h, const char *k, size_t klen,
                     const ty_shval *v) {
  size_t vlen = v->kind == TY_SHV_NUM ? 0 : v->len;
  if (klen > UINT32_MAX || vlen > UINT32_MAX) return NULL;
  if (t->charge && t->charge((int64_t)cost_of(klen, vlen))) return NULL;
  ent *e = malloc(sizeof *e + klen + vlen);
  if (!e) {
    if (t->charge) t->charge(-(int64_t)cost_of(klen, vlen));
    return NULL;
  }
  e->hash = h;
  e->klen = (uint32_t)klen;
  e->vlen = (uint32_t)vlen;
  e->kind = (uint8_t)v->kind;
  e->num = v->kind == TY_SHV_NUM ? v->num : 0;
  memcpy(e->data, k, klen);
  if (vlen) memcpy(e->data + klen, v->data, vlen);
  return e;
}

/* The store behind set/add/replace/cas/lists. expect: only when the live
 * value equals it (then 1 for a match, 0 for none). */
int ty__shtab_store(ty_shtab *t, const char *k, size_t klen, const ty_shval *v,
                    uint64_t ttl, int mode, ty_shnow now,
                    const ty_shval *expect) {
  uint64_t h64 = hash(t, k, klen);
  uint32_t h = (uint32_t)h64;
  shard *s = shard_of(t, h64);
  size_t vlen = v && v->kind != TY_SHV_NUM ? v->len : 0;
  size_t cost = cost_of(klen, vlen), old = 0;
  int ok = expect ? 1 : 0;
  uint64_t expires = ttl ? now.ttl + ttl : 0;

  /* In place when the size is the same: no allocation, no eviction. */
  pthread_mutex_lock(&s->mu);
  ent **link = NULL, *e = find(s, h, k, klen, &link);
  bool is_live = e && live(e, now.ttl);
  if ((mode & TY_SHTAB_ADD) && is_live) goto exists;
  if ((mode & TY_SHTAB_REPLACE) && !is_live) goto missing;
  if (expect && (!is_live || !same_value(e, expect))) goto differs;
  if (mode & DELETE) {
    if (!e) goto missing;
    unlink_ent(t, s, e, link);
    pthread_mutex_unlock(&s->mu);
    drop(t, e);
    return ok;
  }
  if (e && e->vlen == vlen &&
      (e->kind == TY_SHV_NUM) == (v->kind == TY_SHV_NUM)) {
    e->kind = (uint8_t)v->kind;
    e->num = v->kind == TY_SHV_NUM ? v->num : 0;
    if (vlen) memcpy(e->data + klen, v->data, vlen);
    if (!(mode & KEEP_TTL) || !is_live) e->expires = expires;
    touch(s, e, now.lru);
    pthread_mutex_unlock(&s->mu);
    return ok;
  }
  if (e) old = ent_cost(e);
  pthread_mutex_unlock(&s->mu);
  if (cost > t->capacity) return -ENOMEM;

  /* Charged (max_memory) before any eviction: a store refused there
   * evicts nothing. */
  ent *n = make_ent(t, h, k, klen, v);
  if (!n) return -ENOMEM;
  n->expires = expires;
  bool evicted = false, safe = mode & TY_SHTAB_SAFE;
  size_t held = cost > old ? cost - old : 0; /* reserved in `used` */
  if (held && make_room(t, held, safe, now, &evicted, h, k, klen)) {
    drop(t, n);
    return -ENOMEM;
  }

  for (;;) {
    pthread_mutex_lock(&s->mu);
    e = find(s, h, k, klen, &link);
    is_live = e && live(e, now.ttl);
    if ((mode & TY_SHTAB_ADD) && is_live) goto exists_n;
    if ((mode & TY_SHTAB_REPLACE) && !is_live) goto missing_n;
    if (expect && (!is_live || !same_value(e, expect))) goto differs_n;
    size_t cur = e ? ent_cost(e) : 0;
    if (cost > cur && cost - cur > held) {
      /* The old entry went or shrank since the first look (another
       * store or an eviction): reserve the difference, then look again. */
      pthread_mutex_unlock(&s->mu);
      size_t more = cost - cur - held;
      if (make_room(t, more, safe, now, &evicted, h, k, klen)) {
        unreserve(t, held);
        drop(t, n);
        return -ENOMEM;
      }
      held += more;
      continue;
    }
    if (e) {
      if ((mode & KEEP_TTL) && is_live) n->expires = e->expires;
      unlink_ent(t, s, e, link);
    }
    link_ent(t, s, n, now.lru, held);
    pthread_mutex_unlock(&s->mu);
    if (e) drop(t, e);
    return expect ? 1 : evicted ? TY_SHTAB_EVICTED : 0;
  }

exists_n:
  pthread_mutex_unlock(&s->mu);
  unreserve(t, held);
  drop(t, n);
  return -EEXIST;
missing_n:
  pthread_mutex_unlock(&s->mu);
  unreserve(t, held);
  drop(t, n);
  return -ENOENT;
differs_n:
  pthread_mutex_unlock(&s->mu);
  unreserve(t, held);
  drop(t, n);
  return 0;
exists:
  pthread_mutex_unlock(&s->mu);
  return -EEXIST;
missing:
  pthread_mutex_unlock(&s->mu);
  return -ENOENT;
differs:
  pthread_mutex_unlock(&s->mu);
  return 0;
}

int ty_shtab_set(ty_shtab *t, const char *key, size_t klen, const ty_shval *v,
                 uint64_t ttl_ns, int mode, ty_shnow now) {
  return ty__shtab_store(t, key, klen, v, ttl_ns, mode & 7, now, NULL);
}

int ty_shtab_cas(ty_shtab *t, const char *key, size_t klen, const ty_shval *old,
                 const ty_shval *new_, ty_shnow now) {
  return ty__shtab_store(t, key, klen, new_, 0, KEEP_TTL, now, old);
}

/* ---- reads and single-key updates --------------------------------------- */

static int copy_out(const ent *e, ty__buf *out, ty_shval *v) {
  v->kind = e->kind;
  v->num = e->num;
  v->len = e->vlen;
  v->data = "";
  ty__buf_reset(out);
  if (!e->vlen) return 0;
  if (ty__buf_append(out, e->data + e->klen, e->vlen)) return -ENOMEM;
  v->data = out->data;
  return 0;
}

int ty_shtab_get(ty_shtab *t, const char *key, size_t klen, ty_shnow now,
                 bool stale, ty__buf *out, ty_shval *v, bool *expired) {
  uint64_t h64 = hash(t, key, klen);
  shard *s = shard_of(t, h64);
  pthread_mutex_lock(&s->mu);
  ent *e = find(s, (uint32_t)h64, key, klen, NULL);
  bool is_live = e && live(e, now.ttl);
  if (!e || (!is_live && !stale)) {
    pthread_mutex_unlock(&s->mu);
    return -ENOENT;
  }
  if (is_live) touch(s, e, now.lru);
  int rc = copy_out(e, out, v);
  pthread_mutex_unlock(&s->mu);
  if (expired) *expired = !is_live;
  return rc;
}

int ty_shtab_incr(ty_shtab *t, const char *key, size_t klen, double n,
                  bool has_init, double init, uint64_t init_ttl_ns,
                  ty_shnow now, double *res) {
  uint64_t h64 = hash(t, key, klen);
  shard *s = shard_of(t, h64);
  for (;;) {
    pthread_mutex_lock(&s->mu);
    ent *e = find(s, (uint32_t)h64, key, klen, NULL);
    if (e && live(e, now.ttl)) {
      if (e->kind != TY_SHV_NUM) {
        pthread_mutex_unlock(&s->mu);
        return -EINVAL;
      }
      *res = e->num += n;
      touch(s, e, now.lru);
      pthread_mutex_unlock(&s->mu);
      return 0;
    }
    pthread_mutex_unlock(&s->mu);
    if (!has_init) return -ENOENT;
    ty_shval v = {TY_SHV_NUM, init + n, NULL, 0};
    int rc =
        ty__shtab_store(t, key, klen, &v, init_ttl_ns, TY_SHTAB_ADD, now, NULL);
    if (rc != -EEXIST) {
      if (rc >= 0) *res = init + n;
      return rc;
    }
  }
}

int ty_shtab_delete(ty_shtab *t, const char *key, size_t klen) {
  uint64_t h64 = hash(t, key, klen);
  shard *s = shard_of(t, h64);
  ent **link = NULL;
  pthread_mutex_lock(&s->mu);
  ent *e = find(s, (uint32_t)h64, key, klen, &link);
  if (e) unlink_ent(t, s, e, link);
  pthread_mutex_unlock(&s->mu);
  if (!e) return -ENOENT;
  drop(t, e);
  return 0;
}

int ty_shtab_expire(ty_shtab *t, const char *key, size_t klen, uint64_t ttl_ns,
                    ty_shnow now) {
  uint64_t h64 = hash(t, key, klen);
  shard *s = shard_of(t, h64);
  pthread_mutex_lock(&s->mu);
  ent *e = find(s, (uint32_t)h64, key, klen, NULL);
  int rc = e && live(e, now.ttl) ? 0 : -ENOENT;
  if (!rc) e->expires = ttl_ns ? now.ttl + ttl_ns : 0;
  pthread_mutex_unlock(&s->mu);
  return rc;
}

int ty_shtab_ttl(ty_shtab *t, const char *key, size_t klen, ty_shnow now,
                 uint64_t *left) {
  uint64_t h64 = hash(t, key, klen);
  shard *s = shard_of(t, h64);
  pthread_mutex_lock(&s->mu);
  ent *e = find(s, (uint32_t)h64, key, klen, NULL);
  int rc = e && live(e, now.ttl) ? 0 : -ENOENT;
  if (!rc) *left = e->expires ? e->expires - now.ttl : 0;
  pthread_mutex_unlock(&s->mu);
  return rc;
}

/* ---- whole table -------------------------------------------------------- */

long ty_shtab_keys(ty_shtab *t, size_t max, ty_shnow now, ty__buf *out) {
  long n = 0;
  for (int i = 0; i < NSHARD; i++) {
    shard *s = &t->sh[i].s;
    pthread_mutex_lock(&s->mu);
    for (ent *e = s->head; e && (!max || (size_t)n < max); e = e->next) {
      if (!live(e, now.ttl)) continue;
      uint32_t l = e->klen;
      if (ty__buf_append(out, &l, sizeof l) ||
          ty__buf_append(out, e->data, l)) {
        pthread_mutex_unlock(&s->mu);
        return -ENOMEM;
      }
      n++;
    }
    pthread_mutex_unlock(&s->mu);
  }
  return n;
}

size_t ty_shtab_count(ty_shtab *t, ty_shnow now) {
  size_t n = 0;
  for (int i = 0; i < NSHARD; i++) {
    shard *s = &t->sh[i].s;
    pthread_mutex_lock(&s->mu);
    for (ent *e = s->head; e; e = e->next) n += live(e, now.ttl);
    pthread_mutex_unlock(&s->mu);
  }
  return n;
}

/* Removes the entries `pick` selects from shard s, up to *budget (0: no
 * limit, else decremented); how many. */
static size_t sweep(ty_shtab *t, shard *s, bool only_expired, ty_shnow now,
                    size_t *budget) {
  ent *gone = NULL;
  size_t n = 0;
  pthread_mutex_lock(&s->mu);
  for (ent *e = s->tail, *pv; e; e = pv) {
    pv = e->prev;
    if (only_expired && live(e, now.ttl)) continue;
    ent **link = NULL;
    find(s, e->hash, e->data, e->klen, &link);
    unlink_ent(t, s, e, link);
    e->hnext = gone;
    gone = e;
    n++;
    if (budget && *budget && --*budget == 0) break;
  }
  pthread_mutex_unlock(&s->mu);
  for (ent *nx; gone; gone = nx) {
    nx = gone->hnext;
    drop(t, gone);
  }
  return n;
}

void ty_shtab_flush(ty_shtab *t) {
  ty_shnow now = {0, 0};
  for (int i = 0; i < NSHARD; i++) sweep(t, &t->sh[i].s, false, now, NULL);
}

void ty_shtab_expire_all(ty_shtab *t, ty_shnow now) {
  for (int i = 0; i < NSHARD; i++) {
    shard *s = &t->sh[i].s;
    pthread_mutex_lock(&s->mu);
    for (ent *e = s->head; e; e = e->next)
      e->expires = now.ttl ? now.ttl : 1; /* now.ttl >= expires: expired */
    pthread_mutex_unlock(&s->mu);
  }
}

size_t ty_shtab_flush_expired(ty_shtab *t, size_t max, ty_shnow now) {
  size_t n = 0, budget = max;
  for (int i = 0; i < NSHARD; i++) {
    n += sweep(t, &t->sh[i].s, true, now, max ? &budget : NULL);
    if (max && n >= max) break;
  }
  return n;
}

void ty_shtab_free(ty_shtab *t) {
  if (!t) return;
  ty_shtab_flush(t);
  for (int i = 0; i < NSHARD; i++) {
    free(t->sh[i].s.buckets);
    pthread_mutex_destroy(&t->sh[i].s.mu);
  }
  free(t);
}

size_t ty_shtab_capacity(const ty_shtab *t) { return t->capacity; }

size_t ty_shtab_used(const ty_shtab *t) {
  /* relaxed: see `used` */
  int64_t u = atomic_load_explicit(&t->used, memory_order_relaxed);
  return u > 0 ? (size_t)u : 0;
}

size_t ty_shtab_free_space(const ty_shtab *t) {
  size_t u = ty_shtab_used(t);
  return u >= t->capacity ? 0 : t->capacity - u;
}
