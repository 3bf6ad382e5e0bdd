/*
 * mtimer.c - message timers (mtimer.h): ty_timer_send, ty_timer_cancel, and
 * what the worker does when one falls due; and firing the worker's wheel,
 * actors' wait timers included (ty__fire_timers: it sends, so it sits above
 * route.c, not in deliver.c).
 *
 * A timer sits on its worker's wheel like an actor's wait timer (ty__timer
 * kind TY__TIMER_MSG tells them apart when they fire), and in two lists:
 * its owner's (so that it goes when the owner ends) and the worker's slot
 * table (so that an id finds it). Everything runs on the owner's worker.
 */
#include <errno.h>
#include <string.h>

#include "base/alloc.h"
#include "base/list.h"
#include "worker.h"

#define SLOT_MASK ((1u << TY__TSLOT_BITS) - 1)
#define GEN_MASK ((1u << TY__TGEN_BITS) - 1)

static ty__mtimer *timer_of(ty__timer *t) {
  return (ty__mtimer *)((char *)t - offsetof(ty__mtimer, t));
}

static uint64_t make_id(unsigned worker, uint32_t slot, uint32_t gen) {
  return ((((uint64_t)gen << TY__TSLOT_BITS) | slot) << 6) | worker;
}

/* ---- the slot table ----------------------------------------------------- */

/* A slot for t; false when the table is full. */
static bool slot_take(ty_worker *w, ty__mtimer *t) {
  ty__tslots *s = &w->tslots;
  uint32_t slot;
  if (s->nfree) {
    slot = s->free[--s->nfree];
  } else {
    if (s->n > SLOT_MASK) return false;
    if (s->n == s->cap) {
      size_t cap = s->cap, cap2 = s->cap, cap3 = s->cap;
      ty__grow(&s->v, &cap, (size_t)s->n + 1, sizeof *s->v, 64);
      ty__grow(&s->gen, &cap2, (size_t)s->n + 1, sizeof *s->gen, 64);
      ty__grow(&s->free, &cap3, (size_t)s->n + 1, sizeof *s->free, 64);
      s->cap = (uint32_t)cap;
    }
    slot = s->n++;
    s->gen[slot] = 0;
  }
  uint32_t gen = (s->gen[slot] + 1) & GEN_MASK;
  s->gen[slot] = gen ? gen : 1; /* id 0 never names a timer */
  s->v[slot] = t;
  t->id = make_id(w->id, slot, s->gen[slot]);
  return true;
}

static void slot_release(ty_worker *w, ty__mtimer *t) {
  ty__tslots *s = &w->tslots;
  uint32_t slot = (uint32_t)(t->id >> 6) & SLOT_MASK;
  s->v[slot] = NULL;
  s->free[s->nfree++] = slot;
  t->id = 0;
}

static ty__mtimer *slot_find(ty_worker *w, uint64_t id) {
  ty__tslots *s = &w->tslots;
  uint32_t slot = (uint32_t)(id >> 6) & SLOT_MASK;
  if ((id & 63) != w->id || slot >= s->n) return NULL;
  ty__mtimer *t = s->v[slot];
  return t && t->id == id ? t : NULL;
}

void ty__mtimer_free_table(ty_worker *w) {
  free(w->tslots.v);
  free(w->tslots.gen);
  free(w->tslots.free);
  memset(&w->tslots, 0, sizeof w->tslots);
}

/* ---- arming and disarming ----------------------------------------------- */

static void arm(ty_worker *w, ty__mtimer *t) {
  uint64_t at = t->base_ns + t->k * t->period_ns;
  /* Round up: a timer never fires before its time. */
  ty__wheel_insert(&w->wheel, &t->t, ty__tick_up(at));
}

/* Out of the wheel, the owner's list and the table; frees it. The message
 * is the caller's to send or drop. */
static ty_msg *unlink_timer(ty_worker *w, ty__mtimer *t) {
  ty__wheel_cancel(&w->wheel, &t->t);
  ty_actor *a = t->owner;
  TY_LIST_UNLINK(&a->timers, t, next, prev);
  slot_release(w, t);
  ty_msg *m = t->msg;
  ty__free(t, sizeof *t);
  return m;
}

int64_t ty_timer_send(ty_actor *owner, ty_msg *m, uint64_t first_ns,
                      uint64_t period_ns) {
  ty_worker *w = ty_worker_current();
  if (!w || !owner || ty_actor_local(owner->pid) != owner) return -EPERM;
  ty__mtimer *t = ty__alloc(sizeof *t);
  memset(t, 0, sizeof *t);
  if (!slot_take(w, t)) {
    ty__free(t, sizeof *t);
    return -EAGAIN;
  }
  t->t.kind = TY__TIMER_MSG;
  t->owner = owner;
  t->msg = m;
  m->from = owner->pid;
  if (first_ns > (uint64_t)1 << 60) first_ns = (uint64_t)1 << 60;
  if (period_ns > (uint64_t)1 << 60) period_ns = (uint64_t)1 << 60;
  t->base_ns = ty_runtime_now_ns(w->rt) + first_ns;
  t->period_ns = period_ns;
  TY_LIST_PUSH(&owner->timers, t, next, prev);
  arm(w, t);
  return (int64_t)t->id;
}

bool ty_timer_cancel(ty_actor *owner, uint64_t id) {
  ty_worker *w = ty_worker_current();
  if (!w) return false;
  ty__mtimer *t = slot_find(w, id);
  if (!t || t->owner != owner) return false;
  ty__undeliverable(w, unlink_timer(w, t));
  return true;
}

size_t ty_timer_count(void) {
  ty_worker *w = ty_worker_current();
  return w ? w->tslots.n - w->tslots.nfree : 0;
}

void ty__mtimer_drop_owned(ty_worker *w, ty_actor *a) {
  while (a->timers) ty__undeliverable(w, unlink_timer(w, a->timers));
}

/* ---- firing ------------------------------------------------------------- */

static ty_msg *copy_msg(const ty_msg *src) {
  ty_msg *m = ty_msg_new(src->len);
  m->kind = src->kind;
  m->to = src->to;
  m->from = src->from;
  m->ref = src->ref;
  m->aux = src->aux;
  if (src->len) memcpy(m->data, src->data, src->len);
  return m;
}

static void deliver(ty_worker *w, ty_msg *m) {
  ty_runtime *rt = w->rt;
  if (rt->ops.timer_due && rt->ops.timer_due(m, w, rt->ud)) {
    ty__undeliverable(w, m);
    return;
  }
  if (ty_send(rt, m)) ty__undeliverable(w, m);
}

void ty__mtimer_fire(ty_worker *w, ty__timer *wt, uint64_t now_ns) {
  ty__mtimer *t = timer_of(wt);
  if (!t->period_ns) {
    deliver(w, unlink_timer(w, t));
    return;
  }
  /* Virtual time jumps (tycho.test.clock): a jump is no stall, so every
   * instant it passed fires, one by one (ty__fire_timers polls again). */
  if (ty_runtime_is_virtual(w->rt)) {
    t->k++;
    arm(w, t);
    deliver(w, copy_msg(t->msg));
    return;
  }
  /* Fixed rate: the next instant on the grid base + k * period after now;
   * the ones a stall made us miss are skipped, not fired in a burst. */
  uint64_t k = now_ns >= t->base_ns ? (now_ns - t->base_ns) / t->period_ns + 1
                                    : t->k + 1;
  t->k = k > t->k ? k : t->k + 1;
  arm(w, t);
  deliver(w, copy_msg(t->msg));
}

/* ---- the worker's wheel ------------------------------------------------ */

static ty_actor *actor_of_timer(ty__timer *t) {
  return ((ty__wtimer *)t)->actor;
}

bool ty__fire_timers(ty_worker *w, uint64_t now_ns) {
  ty__timer *t = ty__wheel_poll(&w->wheel, ty__tick_down(now_ns));
  bool any = t != NULL, sent = false;
  /* Under virtual time an interval is filed again at its next instant even
   * when that is due too (mtimer.c): poll until nothing is left. */
  bool again = ty_runtime_is_virtual(w->rt);
  for (;;) {
    if (!t && again && any)
      t = ty__wheel_poll(&w->wheel, ty__tick_down(now_ns));
    if (!t) break;
    ty__timer *next = t->next; /* before a message timer is filed again */
    if (t->kind == TY__TIMER_MSG) {
      ty__mtimer_fire(w, t, now_ns);
      sent = true;
      t = next;
      continue;
    }
    ty_actor *a = actor_of_timer(t);
    if (a->state == TY__A_WAITING) {
      a->flags |= TY__AF_TIMED_OUT;
      ty__ready_push(w, a);
    }
    t = next;
  }
  if (sent) ty__publish_all(w); /* no actor run follows to publish them */
  return any;
}
