/*
 * timer.c - the hierarchical timing wheel of timer.h.
 *
 * Filing. A timer is filed under a `key` in ticks: its deadline, raised to the
 * wheel's time if already due, lowered to the horizon if too far (key_for).
 * Read ticks as base-64 digits; the timer goes to level L = the highest digit in
 * which key and `elapsed` differ, slot = digit L of key. So level L holds
 * exactly the timers that share elapsed's 64^(L+1) block but not its 64^L
 * block, and two orders come for free:
 *   - every timer of level L is due before every timer of level L+1, so the
 *     first non-empty level holds the earliest slot;
 *   - within a level, slots run forward from elapsed's own digit, so the next
 *     one is a rotate of the bitmap by that digit and a count of trailing
 *     zeros, and its start is elapsed's block advanced by that distance.
 * A level-0 slot holds a single tick; a higher slot starts at or before all of
 * its timers, which is why it is emptied (cascaded) the moment the wheel
 * reaches its start: each timer is filed again, now in a lower level.
 *
 * The horizon. Six digits cover 2^36 ticks, but elapsed sits somewhere inside
 * its top-level block, so a key 2^36 ahead would wrap onto elapsed's own top
 * digit. Keys are therefore capped at the end of the 63rd top-level slot after
 * elapsed's (at least 2^36 - 2^30 ticks ahead), and the top level is read as a
 * ring: slot distances there are taken mod 64. A capped timer keeps its real
 * deadline; when the wheel reaches its slot it is filed again, further on, so
 * it waits in the top level as long as needed and still never fires early.
 *
 * Slot lists are circular and doubly linked (head->prev is the tail) so that
 * insert appends in O(1) and cancel unlinks in O(1).
 */
#include "timer.h"

#define LEVEL_BITS 6
#define SLOT_MASK ((uint64_t)TY__WHEEL_SLOTS - 1)
#define TOP_LEVEL (TY__WHEEL_LEVELS - 1)
#define TOP_SLOT_TICKS ((uint64_t)1 << (LEVEL_BITS * TOP_LEVEL)) /* 2^30 */
#define TOP_SLOTS_AHEAD ((uint64_t)TY__WHEEL_SLOTS - 1)

#if TY__WHEEL_SLOTS != 64
#error "the occupancy bitmaps are uint64_t: one bit per slot"
#endif

/* Fired timers, collected in deadline order during one poll. */
typedef struct {
  ty__timer *head, *tail;
} fired_chain;

static unsigned digit(uint64_t tick, unsigned level) {
  return (unsigned)((tick >> (level * LEVEL_BITS)) & SLOT_MASK);
}

static uint64_t rotate_right(uint64_t x, unsigned n) {
  return (x >> n) | (x << ((64 - n) & 63)); /* n == 0 must not shift by 64 */
}

/* Highest differing digit; keys beyond the 6th digit share the top ring. */
static unsigned level_for(uint64_t elapsed, uint64_t key) {
  uint64_t diff = (elapsed ^ key) | SLOT_MASK; /* | 63: ilog2 of 0 is bad */
  unsigned level = (63u - (unsigned)__builtin_clzll(diff)) / LEVEL_BITS;
  return level < TOP_LEVEL ? level : TOP_LEVEL;
}

/* The tick a deadline is filed under (see "The horizon" above). */
static uint64_t key_for(uint64_t elapsed, uint64_t deadline) {
  uint64_t top_start = elapsed & ~(TOP_SLOT_TICKS - 1);
  uint64_t cap =
      top_start + TOP_SLOTS_AHEAD * TOP_SLOT_TICKS + (TOP_SLOT_TICKS - 1);
  if (cap < top_start) cap = UINT64_MAX;   /* clock near 2^64: saturate */
  if (deadline <= elapsed) return elapsed; /* due: the current level-0 slot */
  return deadline < cap ? deadline : cap;
}

static void slot_append(ty__timer **head, ty__timer *t) {
  ty__timer *h = *head;
  if (h == NULL) {
    t->next = t->prev = t;
    *head = t;
    return;
  }
  t->prev = h->prev;
  t->next = h;
  h->prev->next = t;
  h->prev = t;
}

static void slot_unlink(ty__timer **head, ty__timer *t) {
  if (t->next == t) {
    *head = NULL;
    return;
  }
  t->prev->next = t->next;
  t->next->prev = t->prev;
  if (*head == t) *head = t->next;
}

/* Files an armed timer relative to the wheel's current time. */
static void wheel_file(ty__wheel *w, ty__timer *t) {
  uint64_t key = key_for(w->elapsed, t->deadline);
  unsigned level = level_for(w->elapsed, key);
  unsigned slot = digit(key, level);
  t->level = (uint8_t)level;
  t->slot = (uint8_t)slot;
  slot_append(&w->slots[level][slot], t);
  w->occupied[level] |= (uint64_t)1 << slot;
}

/* Empties a slot and returns its timers as a NULL-terminated list. */
static ty__timer *slot_take(ty__wheel *w, unsigned level, unsigned slot) {
  ty__timer *head = w->slots[level][slot];
  w->slots[level][slot] = NULL;
  w->occupied[level] &= ~((uint64_t)1 << slot);
  head->prev->next = NULL; /* open the ring */
  return head;
}

/* The earliest occupied slot and the tick it starts at; false if empty. */
static bool next_slot(const ty__wheel *w, unsigned *level, uint64_t *start) {
  for (unsigned l = 0; l < TY__WHEEL_LEVELS; l++) {
    if (w->occupied[l] == 0) continue;
    unsigned shift = l * LEVEL_BITS;
    uint64_t here = w->elapsed >> shift;
    uint64_t dist = (uint64_t)__builtin_ctzll(
        rotate_right(w->occupied[l], (unsigned)(here & SLOT_MASK)));
    /* Only level 0 may hold elapsed's own slot: a higher slot is emptied as
     * soon as the wheel reaches it. */
    ty__assert(l == 0 || dist != 0);
    *level = l;
    *start = (here + dist) << shift;
    return true;
  }
  return false;
}

static bool sorted_by_deadline(const ty__timer *t) {
  for (; t && t->next; t = t->next)
    if (t->next->deadline < t->deadline) return false;
  return true;
}

static ty__timer *merge_by_deadline(ty__timer *a, ty__timer *b) {
  ty__timer head, *tail = &head;
  while (a && b) {
    ty__timer **min = b->deadline < a->deadline ? &b : &a; /* stable */
    tail->next = *min;
    tail = *min;
    *min = (*min)->next;
  }
  tail->next = a ? a : b;
  return head.next;
}

/* Merge sort; recursion depth is log2 of the list length. */
static ty__timer *sort_by_deadline(ty__timer *list) {
  if (list == NULL || list->next == NULL) return list;
  ty__timer *slow = list, *fast = list->next;
  while (fast && fast->next) {
    slow = slow->next;
    fast = fast->next->next;
  }
  ty__timer *back = slow->next;
  slow->next = NULL;
  return merge_by_deadline(sort_by_deadline(list), sort_by_deadline(back));
}

/* A level-0 slot is one tick, except the one at elapsed, which also takes timers
 * inserted when already due; only then does the batch need sorting. */
static void fire(ty__wheel *w, ty__timer *list, fired_chain *out) {
  if (!sorted_by_deadline(list)) list = sort_by_deadline(list);
  ty__timer *last = NULL;
  for (ty__timer *t = list; t; t = t->next) {
    ty__assert(t->deadline <= w->elapsed); /* never early */
    t->armed = false;
    t->prev = NULL;
    w->count--;
    last = t;
  }
  if (out->tail) out->tail->next = list;
  else out->head = list;
  out->tail = last;
}

static void cascade(ty__wheel *w, ty__timer *list) {
  while (list) {
    ty__timer *next = list->next; /* wheel_file rewrites the links */
    wheel_file(w, list);
    list = next;
  }
}

void ty__wheel_init(ty__wheel *w, uint64_t now_tick) {
  *w = (ty__wheel){.elapsed = now_tick};
}

void ty__wheel_insert(ty__wheel *w, ty__timer *t, uint64_t deadline) {
  ty__assert(!t->armed);
  t->deadline = deadline;
  t->armed = true;
  w->count++;
  wheel_file(w, t);
}

void ty__wheel_cancel(ty__wheel *w, ty__timer *t) {
  /* A fired timer may still be on the caller's chain: leave ->next alone. */
  if (!t->armed) return;
  ty__timer **head = &w->slots[t->level][t->slot];
  slot_unlink(head, t);
  if (*head == NULL) w->occupied[t->level] &= ~((uint64_t)1 << t->slot);
  t->next = t->prev = NULL;
  t->armed = false;
  w->count--;
}

ty__timer *ty__wheel_poll(ty__wheel *w, uint64_t now) {
  fired_chain out = {NULL, NULL};
  unsigned level;
  uint64_t start;
  if (now < w->elapsed) now = w->elapsed; /* the wheel never goes back */
  /* Jump slot to slot, not tick to tick: a poll after hours of sleep costs one
   * step per occupied slot (and per cascade), however far it goes. A timer
   * beyond the horizon adds one step per ~2^36 ticks jumped (it is re-filed). */
  while (next_slot(w, &level, &start) && start <= now) {
    w->elapsed = start;
    ty__timer *list = slot_take(w, level, digit(start, level));
    if (level == 0) fire(w, list, &out);
    else cascade(w, list);
  }
  /* Safe: every slot left starts after now, so each timer keeps its level
   * and slot relative to the new time. */
  w->elapsed = now;
  return out.head;
}

/* Exact for level 0, the slot's start (<= every deadline in it) above; the
 * slot at elapsed may hold overdue timers, whose earliest deadline counts. */
uint64_t ty__wheel_next_deadline(const ty__wheel *w) {
  unsigned level;
  uint64_t start;
  if (!next_slot(w, &level, &start)) return UINT64_MAX;
  if (level != 0 || start != w->elapsed) return start;
  const ty__timer *head = w->slots[0][digit(start, 0)];
  const ty__timer *t = head;
  do {
    if (t->deadline < start) start = t->deadline;
    t = t->next;
  } while (t != head);
  return start;
}
