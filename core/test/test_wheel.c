/*
 * test_wheel.c - the per-worker timing wheel (timer.c).
 *
 * The wheel is single-threaded, so these tests are plain sequential checks:
 * exact results for hand-picked deadlines (every level boundary, the horizon,
 * overdue inserts) and a randomised run against a simple model.
 */
#include <string.h>

#include "sched/timer.h"
#include "test.h"

#define MS_HOUR (3600ull * 1000)

static uint64_t pow64(unsigned k) { return (uint64_t)1 << (6 * k); }

static size_t chain_len(const ty__timer *t) {
  size_t n = 0;
  for (; t; t = t->next) n++;
  return n;
}

/* 0 if the chain is disarmed, ordered by deadline and all due by `now`. */
static int chain_ok(const ty__timer *t, uint64_t now) {
  for (; t; t = t->next) {
    CHECK(!ty__timer_armed(t));
    CHECK(t->deadline <= now);
    CHECK(t->next == NULL || t->deadline <= t->next->deadline);
  }
  return 0;
}

static bool wheel_empty(const ty__wheel *w) {
  for (int l = 0; l < TY__WHEEL_LEVELS; l++)
    if (w->occupied[l] != 0) return false;
  return w->count == 0;
}

TEST_IMPL(wheel_basic) {
  ty__wheel w;
  ty__timer t[8];
  memset(t, 0, sizeof(t));
  ty__wheel_init(&w, 1000);
  CHECK(ty__wheel_next_deadline(&w) == UINT64_MAX);
  CHECK(ty__wheel_poll(&w, 1000) == NULL);

  ty__wheel_insert(&w, &t[0], 1005);
  ty__wheel_insert(&w, &t[1], 1003);
  ty__wheel_insert(&w, &t[2], 1003);
  ty__wheel_insert(&w, &t[3], 1010);
  CHECK_EQ(w.count, 4);
  CHECK(ty__timer_armed(&t[1]));
  CHECK_EQ(ty__wheel_next_deadline(&w), 1003);
  CHECK(ty__wheel_poll(&w, 1002) == NULL);

  /* Same-ms timers come together, in either order. */
  ty__timer *f = ty__wheel_poll(&w, 1003);
  CHECK_EQ(chain_len(f), 2);
  CHECK((f == &t[1] && f->next == &t[2]) || (f == &t[2] && f->next == &t[1]));
  CHECK(chain_ok(f, 1003) == 0);
  CHECK_EQ(w.count, 2);
  CHECK_EQ(ty__wheel_next_deadline(&w), 1005);

  /* One poll can fire several slots, earliest first. */
  f = ty__wheel_poll(&w, 1010);
  CHECK(f == &t[0] && f->next == &t[3] && t[3].next == NULL);
  CHECK(wheel_empty(&w));
  CHECK(ty__wheel_next_deadline(&w) == UINT64_MAX);

  /* Already due (now, or in the past): fires at the very next poll, even one
   * at the same now, sorted; next_deadline reports the overdue one. */
  ty__wheel_insert(&w, &t[4], 1010);
  ty__wheel_insert(&w, &t[5], 500);
  ty__wheel_insert(&w, &t[6], 0);
  ty__wheel_insert(&w, &t[7], 1011);
  CHECK_EQ(ty__wheel_next_deadline(&w), 0);
  f = ty__wheel_poll(&w, 1010);
  CHECK(f == &t[6] && t[6].next == &t[5] && t[5].next == &t[4]);
  CHECK(t[4].next == NULL);
  CHECK_EQ(ty__wheel_next_deadline(&w), 1011);

  /* A clock behind the wheel fires nothing and does not rewind it. */
  CHECK(ty__wheel_poll(&w, 900) == NULL);
  CHECK_EQ(w.elapsed, 1010);
  f = ty__wheel_poll(&w, 1011);
  CHECK(f == &t[7] && f->next == NULL);

  /* Inserted in reverse, fired in order across levels 0..2. */
  ty__timer r[64];
  memset(r, 0, sizeof(r));
  for (int i = 63; i >= 0; i--)
    ty__wheel_insert(&w, &r[i], 1011 + 97 * (uint64_t)i);
  f = ty__wheel_poll(&w, 1011 + 97 * 63);
  CHECK_EQ(chain_len(f), 64);
  for (int i = 0; i < 64; i++, f = f->next) CHECK(f == &r[i]);
  CHECK(wheel_empty(&w));
  return 0;
}

/* A deadline `level` digits from now on a wheel at 0 lands in that level. */
static uint64_t deadline_in_level(unsigned level) {
  return level == 0 ? 5 : 3 * pow64(level) + 5;
}

TEST_IMPL(wheel_cancel) {
  ty__wheel w;
  ty__timer t[TY__WHEEL_LEVELS], u[3], v;
  memset(t, 0, sizeof(t));
  memset(u, 0, sizeof(u));
  memset(&v, 0, sizeof(v));

  /* Cancel from each level leaves nothing behind. */
  ty__wheel_init(&w, 0);
  for (unsigned l = 0; l < TY__WHEEL_LEVELS; l++) {
    ty__wheel_insert(&w, &t[l], deadline_in_level(l));
    CHECK_EQ(t[l].level, l);
  }
  for (unsigned l = 0; l < TY__WHEEL_LEVELS; l++) {
    ty__wheel_cancel(&w, &t[l]);
    CHECK(!ty__timer_armed(&t[l]));
    CHECK_EQ(w.count, TY__WHEEL_LEVELS - 1 - l);
    CHECK_EQ(w.occupied[l], 0);
  }
  CHECK(wheel_empty(&w));
  CHECK(ty__wheel_next_deadline(&w) == UINT64_MAX);
  CHECK(ty__wheel_poll(&w, pow64(6)) == NULL);

  /* Cancel head, middle or tail of a shared slot; the rest still fire. */
  for (int victim = 0; victim < 3; victim++) {
    for (int i = 0; i < 3; i++) ty__wheel_insert(&w, &u[i], w.elapsed + 7);
    ty__wheel_cancel(&w, &u[victim]);
    ty__timer *f = ty__wheel_poll(&w, w.elapsed + 7);
    CHECK_EQ(chain_len(f), 2);
    for (; f; f = f->next) CHECK(f != &u[victim]);
    CHECK(wheel_empty(&w));
  }

  /* Cancel twice, and cancel after fire, are no-ops; the latter must not
   * break the fired chain the caller is walking. */
  uint64_t now = w.elapsed;
  ty__wheel_insert(&w, &v, now + 100);
  ty__wheel_cancel(&w, &v);
  ty__wheel_cancel(&w, &v);
  CHECK(wheel_empty(&w));
  ty__wheel_insert(&w, &u[0], now + 1);
  ty__wheel_insert(&w, &u[1], now + 2);
  ty__timer *f = ty__wheel_poll(&w, now + 2);
  CHECK(f == &u[0]);
  ty__wheel_cancel(&w, &u[0]);
  CHECK(u[0].next == &u[1]);
  CHECK(wheel_empty(&w));

  /* Re-insert after cancel fires at the new deadline only. */
  now = w.elapsed;
  ty__wheel_insert(&w, &v, now + 10);
  ty__wheel_cancel(&w, &v);
  ty__wheel_insert(&w, &v, now + 5000);
  CHECK_EQ(v.level, 2);
  CHECK(ty__wheel_poll(&w, now + 4999) == NULL);
  f = ty__wheel_poll(&w, now + 5000);
  CHECK(f == &v && f->next == NULL);

  /* Cancel after a cascade moved the timer down a level. */
  ty__wheel_init(&w, 0);
  ty__wheel_insert(&w, &v, 2 * pow64(2) + 3 * 64 + 1); /* level 2 */
  CHECK_EQ(v.level, 2);
  CHECK(ty__wheel_poll(&w, 2 * pow64(2)) == NULL);
  CHECK_EQ(v.level, 1);
  CHECK(ty__wheel_poll(&w, 2 * pow64(2) + 3 * 64) == NULL);
  CHECK_EQ(v.level, 0);
  ty__wheel_cancel(&w, &v);
  CHECK(wheel_empty(&w));
  CHECK(ty__wheel_poll(&w, 3 * pow64(2)) == NULL);

  /* Cancel from the top level once parked past the horizon. */
  ty__wheel_insert(&w, &v, UINT64_MAX);
  CHECK_EQ(v.level, TY__WHEEL_LEVELS - 1);
  ty__wheel_cancel(&w, &v);
  CHECK(wheel_empty(&w));
  return 0;
}

/*
 * Drives the wheel like a worker: sleep until next_deadline, poll, repeat.
 * Since next_deadline is a lower bound, every timer must fire at exactly its
 * deadline, and the number of wake-ups stays small however far apart they are.
 */
static int drive(ty__wheel *w, size_t expect, size_t max_wakes) {
  size_t fired = 0, wakes = 0;
  uint64_t last = 0;
  while (w->count > 0) {
    uint64_t nd = ty__wheel_next_deadline(w);
    CHECK(nd != UINT64_MAX);
    CHECK(nd >= w->elapsed);
    CHECK(++wakes <= max_wakes);
    ty__timer *f = ty__wheel_poll(w, nd);
    CHECK(chain_ok(f, nd) == 0);
    for (; f; f = f->next, fired++) {
      CHECK_EQ(f->deadline, nd); /* neither early nor late */
      CHECK(f->deadline >= last);
      last = f->deadline;
    }
  }
  CHECK_EQ(fired, expect);
  CHECK(ty__wheel_next_deadline(w) == UINT64_MAX);
  return 0;
}

/* Timers at, just before and just after every digit boundary after base. */
static size_t insert_boundaries(ty__wheel *w, ty__timer *t, uint64_t base) {
  size_t n = 0;
  for (unsigned k = 1; k <= 6; k++) {
    uint64_t b = pow64(k);
    uint64_t ds[] = {b - 1,
                     b,
                     b + 1,
                     base + b - 1,
                     base + b,
                     base + b + 1,
                     (base | (b - 1)) + 1}; /* next aligned boundary */
    for (size_t i = 0; i < ty__countof(ds); i++) {
      if (ds[i] <= base) continue;
      ty__wheel_insert(w, &t[n++], ds[i]);
    }
  }
  return n;
}

TEST_IMPL(wheel_levels) {
  static ty__timer t[64];
  ty__wheel w;
  const uint64_t bases[] = {0,
                            1,
                            62,
                            63,
                            64,
                            4095,
                            12345,
                            pow64(3) - 3,
                            pow64(5) - 1,
                            ((uint64_t)1 << 35) + 7,
                            pow64(6) - 2,
                            0xfedcba987ull};

  /* Boundaries of every level, from aligned and unaligned clocks. */
  for (size_t i = 0; i < ty__countof(bases); i++) {
    memset(t, 0, sizeof(t));
    ty__wheel_init(&w, bases[i]);
    size_t n = insert_boundaries(&w, t, bases[i]);
    CHECK(n > 0 && n <= ty__countof(t));
    CHECK_EQ(w.count, n);
    for (size_t j = 0; j < n; j++)
      CHECK(ty__wheel_next_deadline(&w) <= t[j].deadline);
    CHECK(drive(&w, n, 8 * n) == 0);
  }

  /* 3 ms from a level-3 boundary the timer sits in level 3, yet fires on
   * time: the slot starts at the boundary. */
  memset(t, 0, sizeof(t));
  ty__wheel_init(&w, pow64(3) - 3);
  ty__wheel_insert(&w, &t[0], pow64(3));
  ty__wheel_insert(&w, &t[1], pow64(3) + 1);
  CHECK_EQ(t[0].level, 3);
  CHECK_EQ(ty__wheel_next_deadline(&w), pow64(3));
  CHECK(ty__wheel_poll(&w, pow64(3) - 1) == NULL);
  ty__timer *f = ty__wheel_poll(&w, pow64(3));
  CHECK(f == &t[0] && f->next == NULL);
  CHECK_EQ(ty__wheel_next_deadline(&w), pow64(3) + 1);
  f = ty__wheel_poll(&w, pow64(3) + 1);
  CHECK(f == &t[1] && f->next == NULL);

  /* Beyond the horizon: filed in the top level, not fired early, exact when
   * driven, and a handful of wake-ups per 2^30 ms on the way. */
  const uint64_t base = 777;
  memset(t, 0, sizeof(t));
  ty__wheel_init(&w, base);
  ty__wheel_insert(&w, &t[0], base + ((uint64_t)1 << 37));
  ty__wheel_insert(&w, &t[1], base + ((uint64_t)1 << 40) + 3);
  CHECK_EQ(t[0].level, TY__WHEEL_LEVELS - 1);
  CHECK_EQ(t[1].level, TY__WHEEL_LEVELS - 1);
  CHECK(ty__wheel_next_deadline(&w) > base + ((uint64_t)1 << 35));
  CHECK(ty__wheel_poll(&w, base + ((uint64_t)1 << 36)) == NULL);
  CHECK(ty__wheel_poll(&w, base + ((uint64_t)1 << 37) - 1) == NULL);
  CHECK(ty__timer_armed(&t[0]));
  CHECK(drive(&w, 2, 4 * 1024) == 0);

  /* Big jumps: hours in one poll, deadlines spread over every level. A
   * ms-by-ms walk would not finish within the test's time limit. */
  memset(t, 0, sizeof(t));
  ty__wheel_init(&w, base);
  size_t n = 0;
  for (unsigned k = 0; k <= 6; k++) {
    ty__wheel_insert(&w, &t[n++], base + pow64(k) + k);
    ty__wheel_insert(&w, &t[n++], base + 3 * pow64(k) / 2);
  }
  ty__wheel_insert(&w, &t[n++], UINT64_MAX); /* never due */
  size_t due = 0;
  for (size_t j = 0; j < n; j++) due += t[j].deadline <= base + 3 * MS_HOUR;
  f = ty__wheel_poll(&w, base + 3 * MS_HOUR);
  CHECK_EQ(chain_len(f), due);
  CHECK(chain_ok(f, base + 3 * MS_HOUR) == 0);
  CHECK_EQ(w.count, n - due);
  for (size_t j = 0; j < n; j++)
    CHECK(ty__timer_armed(&t[j]) == (t[j].deadline > base + 3 * MS_HOUR));
  f = ty__wheel_poll(&w, base + ((uint64_t)1 << 44));
  CHECK_EQ(chain_len(f), n - due - 1);
  CHECK(chain_ok(f, base + ((uint64_t)1 << 44)) == 0);
  CHECK_EQ(w.count, 1);
  CHECK(ty__timer_armed(&t[n - 1]));
  /* The parked one's lower bound stays within a horizon of now. */
  uint64_t nd = ty__wheel_next_deadline(&w);
  CHECK(nd > w.elapsed && nd - w.elapsed <= ((uint64_t)1 << 36));
  ty__wheel_cancel(&w, &t[n - 1]);
  CHECK(wheel_empty(&w));
  return 0;
}

/* --- stress: a lazy min-heap of armed deadlines serves as the model --- */

typedef struct {
  uint64_t deadline;
  uint32_t id;
} heap_entry;

typedef struct {
  heap_entry *a;
  size_t n, cap;
} min_heap;

static bool entry_less(heap_entry x, heap_entry y) {
  return x.deadline < y.deadline;
}

static void heap_push(min_heap *h, heap_entry e) {
  if (h->n == h->cap) {
    h->cap = h->cap ? 2 * h->cap : 1024;
    h->a = realloc(h->a, h->cap * sizeof(*h->a));
    if (!h->a) abort();
  }
  size_t i = h->n++;
  while (i > 0 && entry_less(e, h->a[(i - 1) / 2])) {
    h->a[i] = h->a[(i - 1) / 2];
    i = (i - 1) / 2;
  }
  h->a[i] = e;
}

static void heap_pop(min_heap *h) {
  heap_entry e = h->a[--h->n];
  size_t i = 0;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= h->n) break;
    if (c + 1 < h->n && entry_less(h->a[c + 1], h->a[c])) c++;
    if (!entry_less(h->a[c], e)) break;
    h->a[i] = h->a[c];
    i = c;
  }
  if (h->n > 0) h->a[i] = e;
}

enum { T_IDLE, T_ARMED, T_CANCELLED, T_FIRED };

typedef struct {
  ty__wheel w;
  ty__timer *t;
  uint8_t *state;
  uint32_t *armed_at; /* polls done when the timer was (last) armed */
  min_heap heap;
  uint64_t rng, now, prev_poll_now, last_fired;
  uint32_t polls;
  long n, armed, fired, cancelled, rearmed;
  long by_level[TY__WHEEL_LEVELS]; /* arms, by the level first filed in */
} stress;

static uint64_t rnd(stress *s, uint64_t bound) {
  return ty__rand_next(&s->rng) % bound;
}

/* Earliest armed deadline, dropping entries of timers since fired, cancelled
 * or re-armed elsewhere. */
static uint64_t model_min(stress *s) {
  while (s->heap.n > 0) {
    heap_entry e = s->heap.a[0];
    bool live = s->state[e.id] == T_ARMED && s->t[e.id].deadline == e.deadline;
    if (live) return e.deadline;
    heap_pop(&s->heap);
  }
  return UINT64_MAX;
}

static void stress_arm(stress *s, uint32_t id) {
  uint64_t d = s->now + rnd(s, 70001); /* 0..70 s ahead, 0 = due now */
  ty__wheel_insert(&s->w, &s->t[id], d);
  s->state[id] = T_ARMED;
  s->armed_at[id] = s->polls;
  s->armed++;
  s->by_level[s->t[id].level]++;
  heap_push(&s->heap, (heap_entry){d, id});
}

/* Cancels a random timer: disarms an armed one, is a no-op on the others;
 * now and then re-arms a cancelled one. */
static int stress_cancel(stress *s, uint32_t inserted) {
  uint32_t id = (uint32_t)rnd(s, inserted);
  uint8_t before = s->state[id];
  ty__wheel_cancel(&s->w, &s->t[id]);
  CHECK(!ty__timer_armed(&s->t[id]));
  if (before == T_ARMED) {
    s->state[id] = T_CANCELLED;
    s->armed--;
    s->cancelled++;
  } else if (before == T_CANCELLED && rnd(s, 4) == 0) {
    stress_arm(s, id);
    s->cancelled--;
    s->rearmed++;
  }
  return 0;
}

static int stress_poll(stress *s) {
  ty__timer *f = ty__wheel_poll(&s->w, s->now);
  for (; f; f = f->next) {
    uint32_t id = (uint32_t)(f - s->t);
    CHECK(f >= s->t && id < (uint32_t)s->n); /* one of ours */
    CHECK_EQ(s->state[id], T_ARMED); /* exactly once, never a cancelled one */
    CHECK(!ty__timer_armed(f));
    CHECK(f->deadline <= s->now); /* never early */
    /* Armed before the previous poll: that poll must have been too early. */
    if (s->armed_at[id] < s->polls) CHECK(f->deadline > s->prev_poll_now);
    CHECK(f->deadline >= s->last_fired); /* overall deadline order */
    s->last_fired = f->deadline;
    s->state[id] = T_FIRED;
    s->armed--;
    s->fired++;
  }
  s->polls++;
  s->prev_poll_now = s->now;
  CHECK(model_min(s) > s->now); /* nothing left behind: never late */
  CHECK_EQ(s->w.count, s->armed);
  return 0;
}

/* Mostly ms steps, some tens of ms, rarely seconds. */
static uint64_t stress_step(stress *s) {
  uint64_t r = rnd(s, 100);
  if (r < 70) return rnd(s, 3);
  if (r < 98) return rnd(s, 101);
  return rnd(s, 3001);
}

TEST_IMPL(wheel_stress) {
  long n = test_scaled(100000, 5000);
  stress s;
  memset(&s, 0, sizeof(s));
  s.n = n;
  s.t = calloc((size_t)n, sizeof(*s.t));
  s.state = calloc((size_t)n, 1);
  s.armed_at = calloc((size_t)n, sizeof(*s.armed_at));
  CHECK(s.t && s.state && s.armed_at);
  s.rng = 0x9e3779b97f4a7c15ull;
  s.now = ((uint64_t)1 << 32) - 77777; /* crosses a level-5 boundary */
  ty__wheel_init(&s.w, s.now);

  uint32_t inserted = 0;
  while (inserted < (uint32_t)n || s.armed > 0) {
    for (uint64_t k = rnd(&s, 32); k > 0 && inserted < (uint32_t)n; k--)
      stress_arm(&s, inserted++);
    /* Only while inserting: re-arms would otherwise keep the drain going. */
    for (uint64_t k = rnd(&s, 8); k > 0 && inserted < (uint32_t)n; k--)
      CHECK(stress_cancel(&s, inserted) == 0);
    uint64_t nd = ty__wheel_next_deadline(&s.w), min = model_min(&s);
    CHECK(nd <= min); /* never later than the earliest armed deadline */
    CHECK(s.armed > 0 ? nd >= s.prev_poll_now : nd == UINT64_MAX);
    s.now += stress_step(&s);
    CHECK(stress_poll(&s) == 0);
  }

  CHECK_EQ(s.fired + s.cancelled, n);
  CHECK(s.cancelled > n / 100 && s.rearmed > 0);
  /* 70 s reaches level 2; the start clock near 2^32 adds level 5. */
  CHECK(s.by_level[0] > 0 && s.by_level[1] > 0 && s.by_level[2] > 0);
  CHECK(s.by_level[5] > 0);
  for (long i = 0; i < n; i++)
    CHECK(s.state[i] == T_FIRED || s.state[i] == T_CANCELLED);
  CHECK(wheel_empty(&s.w));
  CHECK(ty__wheel_poll(&s.w, UINT64_MAX) == NULL);
  free(s.t);
  free(s.state);
  free(s.armed_at);
  free(s.heap.a);
  return 0;
}

/* ns deadlines on tick wheels (deliver.c, mtimer.c, park.c): filed with
 * ty__tick_up, polled with ty__tick_down, parked for next * TY__TICK_NS.
 * Never early, late by less than a tick, and exact for whole ms (virtual
 * time advances by whole ms from a whole ms: runtime.c). */
TEST_IMPL(wheel_ticks) {
  CHECK_EQ(1000000 % TY__TICK_NS, 0);
  uint64_t rng = 12345;
  for (int i = 0; i < 100000; i++) {
    uint64_t now = ty__rand_next(&rng) % (1ull << 50);
    uint64_t d = ty__rand_next(&rng) % 2000000000ull; /* 0..2 s */
    if (i % 4 == 0) d -= d % 1000000;                 /* whole ms */
    if (i % 8 == 0) now -= now % 1000000;
    uint64_t at = now + d;
    CHECK(ty__tick_up(at) * TY__TICK_NS >= at);
    CHECK(ty__tick_up(at) * TY__TICK_NS < at + TY__TICK_NS);
    CHECK(ty__tick_down(at) * TY__TICK_NS <= at);
    CHECK(ty__tick_down(at) * TY__TICK_NS + TY__TICK_NS > at);
    if (at % 1000000 == 0) CHECK_EQ(ty__tick_up(at), ty__tick_down(at));

    ty__wheel w;
    ty__timer t;
    memset(&t, 0, sizeof t);
    ty__wheel_init(&w, ty__tick_down(now));
    ty__wheel_insert(&w, &t, ty__tick_up(at));
    /* What park.c sleeps until: a slot's start (a cascade, nothing fires)
     * at most once per level, then at the deadline's tick. */
    uint64_t park_at = ty__wheel_next_deadline(&w) * TY__TICK_NS;
    for (int l = 0; park_at < at && l < TY__WHEEL_LEVELS; l++) {
      CHECK(ty__wheel_poll(&w, ty__tick_down(park_at)) == NULL);
      park_at = ty__wheel_next_deadline(&w) * TY__TICK_NS;
    }
    CHECK(park_at >= at && park_at < at + TY__TICK_NS);
    if (d > 0) CHECK(ty__wheel_poll(&w, ty__tick_down(at - 1)) == NULL);
    CHECK(ty__wheel_poll(&w, ty__tick_down(park_at)) == &t);
    CHECK(!ty__timer_armed(&t));
    CHECK(wheel_empty(&w));
  }
  return 0;
}
