/*
 * deliver.c - how work reaches a worker and its actors: the ready queue and
 * LIFO slot, the mesh rings seen from the sending side (staging, publishing,
 * overflow lists), draining the incoming rings and the inbox, mailboxes, and
 * actor waits and their timers.
 *
 * Everything here runs on the worker's own thread (docs/architecture.md,
 * "The life of a message").
 */
#include <string.h>

#include "base/alloc.h"
#include "base/log.h"
#include "worker.h"

#define MESH_BATCH 64    /* entries taken from one ring per turn */
#define PUBLISH_BATCH 16 /* staged entries that force a publish */
/* A send from an actor that leaves a mailbox of its own worker this long
 * makes the sender yield: the receiver runs next and drains it. */
#define SEND_YIELD_MARK 128

/* ---- queues ------------------------------------------------------------ */

void ty__ready_push(ty_worker *w, ty_actor *a) {
  a->state = TY__A_QUEUED;
  ty__list_push(&w->ready, &a->node);
  w->ready_len++;
}

ty_actor *ty__ready_pop(ty_worker *w) {
  ty__node *n = ty__list_pop(&w->ready);
  if (n) w->ready_len--;
  return (ty_actor *)n;
}

/* A local send from the running actor puts the receiver in the LIFO slot, so
 * that it runs next while its message is hot in cache. Pushing there wakes
 * nobody: this worker is awake and will run it. */
static void make_ready(ty_worker *w, ty_actor *a, bool lifo) {
  ty__wait_timer_cancel(w, a);
  if (!lifo) {
    ty__ready_push(w, a);
    return;
  }
  if (w->lifo) ty__ready_push(w, w->lifo);
  a->state = TY__A_QUEUED;
  w->lifo = a;
}

/* ---- mesh -------------------------------------------------------------- */

/* Endpoint `to` of the mesh is a worker, or the port (index rt->n). */
static void set_dirty(ty_worker *w, unsigned to) {
  if (to < w->rt->n) w->dirty_mask |= 1ull << to;
  else w->port_dirty = true;
}

static void wake_endpoint(ty_runtime *rt, unsigned to) {
  if (to < rt->n) ty__worker_unpark(&rt->workers[to]);
  else ty__port_wake(rt);
}

static void mark_dirty(ty_worker *w, unsigned to) {
  set_dirty(w, to);
  if (ty__mesh_staged(&w->rt->mesh, w->id, to) >= PUBLISH_BATCH) {
    ty__mesh_publish(&w->rt->mesh, w->id, to);
    TY_CHAOS();
    /* seq_cst fence: our tail store must be ordered before the load of the
     * peer's park state (a store then a load; docs/architecture.md,
     * "Parking"). */
    atomic_thread_fence(memory_order_seq_cst);
    wake_endpoint(w->rt, to);
  }
}

/* Publishes every ring with staged entries, then wakes each receiver that is
 * parked. */
void ty__publish_all(ty_worker *w) {
  uint64_t mask = w->dirty_mask;
  bool port = w->port_dirty;
  if (!mask && !port) return;
  w->dirty_mask = 0;
  w->port_dirty = false;
  uint64_t woke = 0;
  for (uint64_t m = mask; m; m &= m - 1) {
    unsigned to = (unsigned)__builtin_ctzll(m);
    if (ty__mesh_publish(&w->rt->mesh, w->id, to)) woke |= 1ull << to;
  }
  port = port && ty__mesh_publish(&w->rt->mesh, w->id, w->rt->n);
  TY_CHAOS();
  /* seq_cst fence: orders the tail stores above before the park-state loads
   * in ty__worker_unpark; the parker stores PARKED, fences, then re-reads the
   * rings, so one of us sees the other. */
  atomic_thread_fence(memory_order_seq_cst);
  for (uint64_t m = woke; m; m &= m - 1)
    ty__worker_unpark(&w->rt->workers[__builtin_ctzll(m)]);
  if (port) ty__port_wake(w->rt);
}

bool ty__worker_mesh_push(ty_worker *w, unsigned to, ty__node *n) {
  ty__peer *p = &w->peers[to];
  if (!p->overflow.head && ty__mesh_push(&w->rt->mesh, w->id, to, n)) {
    TY__STAT_ADD(w, mesh_sent, 1);
    mark_dirty(w, to);
    return true;
  }
  if (!p->overflow.head) w->overflowing++;
  ty__list_push(&p->overflow, n);
  return false;
}

/* Moves what fits of each overflow list into its ring, in order; releases
 * the senders of a list that emptied. */
void ty__flush_overflow(ty_worker *w) {
  for (unsigned to = 0; to < w->rt->mesh.n; to++) {
    ty__peer *p = &w->peers[to];
    if (!p->overflow.head) continue;
    while (p->overflow.head &&
           ty__mesh_push(&w->rt->mesh, w->id, to, p->overflow.head)) {
      ty__list_pop(&p->overflow);
      TY__STAT_ADD(w, mesh_sent, 1);
      set_dirty(w, to);
    }
    if (p->overflow.head) continue;
    w->overflowing--;
    ty__node *n;
    while ((n = ty__list_pop(&p->blocked))) ty__ready_push(w, (ty_actor *)n);
  }
  ty__publish_all(w);
}

static void deliver_spawn(ty_worker *w, ty_actor *a) {
  if (a->pinned) {
    ty__ready_push(w, a);
    return;
  }
  ty__spawnq_push(&w->spawnq, &a->node, &w->rt->inject);
}

static void deliver_node(ty_worker *w, ty__node *n) {
  if (((ty_actor *)n)->type == TY__T_ACTOR) {
    deliver_spawn(w, (ty_actor *)n);
  } else {
    ty__worker_deliver(w, (ty_msg *)n, false);
  }
}

/* Has the ring from -> to anything to take? As the first half of
 * ty__mesh_drain (the consumer's head and tail cache), without the copy. */
static inline bool mesh_ready(ty__mesh *m, unsigned to, unsigned from) {
  ty__ring *r = ty__mesh_ring(m, from, to);
  /* relaxed: only this thread stores head, so it reads its own last store. */
  uint32_t h = atomic_load_explicit(&r->head, memory_order_relaxed);
  if (r->tail_cache != h) return true;
  /* acquire: as in ty__mesh_drain, which reads the slots up to this tail
   * (pairs with the release in ty__mesh_publish). */
  r->tail_cache = atomic_load_explicit(&r->tail, memory_order_acquire);
  return r->tail_cache != h;
}

/* Drains the rings from `first` on (the ones before it were empty). Out of
 * line: its batch buffer and saved registers cost a turn that finds every
 * ring empty (the common case on one worker) some 15 instructions. */
static __attribute__((noinline)) bool drain_mesh_from(ty_worker *w,
                                                      unsigned first) {
  ty_runtime *rt = w->rt;
  ty__node *buf[MESH_BATCH];
  size_t total = 0;
  for (unsigned from = first; from < rt->mesh.n; from++) { /* the port too */
    if (from == w->id) continue;
    size_t got = ty__mesh_drain(&rt->mesh, w->id, from, buf, MESH_BATCH);
    for (size_t i = 0; i < got; i++) deliver_node(w, buf[i]);
    total += got;
  }
  if (total) TY__STAT_ADD(w, mesh_received, total);
  return total != 0;
}

bool ty__drain_mesh(ty_worker *w) {
  ty__mesh *m = &w->rt->mesh;
  for (unsigned from = 0; from < m->n; from++) { /* the port too */
    if (from != w->id && mesh_ready(m, w->id, from))
      return drain_mesh_from(w, from);
  }
  return false;
}

void ty__drain_inbox(ty_worker *w) {
  if (!ty__inject_len(&w->inbox)) return;
  ty__node *n;
  ty__inject_pop_n(&w->inbox, SIZE_MAX, &n);
  while (n) {
    ty__node *next = n->next;
    deliver_node(w, n);
    n = next;
  }
}

/* ---- mailboxes --------------------------------------------------------- */

static uint64_t msg_bytes(const ty_msg *m) {
  return sizeof *m + m->cap + m->held;
}

/* The full flag lives in the pid table, where senders on other workers look
 * (ty_send_limited). It is set when the mailbox reaches a limit and cleared
 * once it is back under 7/8 of both, so that a mailbox kept at its limit
 * does not rewrite a line every sender reads at each message. */
static void set_full(ty_worker *w, ty_actor *a, bool full) {
  a->mbox.full = full;
  ty__pident *e = ty__pidtab_get(&w->rt->pids, ty__pid_slot(a->pid));
  /* relaxed: a hint for senders; only this (home) worker writes the bit.
   * Read-modify-write: the watchdog may rewrite the word of a stuck
   * worker's actor meanwhile (its pid dies), and that must not be lost. */
  if (full)
    atomic_fetch_or_explicit(&e->word, TY__W_FULL, memory_order_relaxed);
  else
    atomic_fetch_and_explicit(&e->word, ~(uint64_t)TY__W_FULL,
                              memory_order_relaxed);
  TY_CHAOS(); /* senders on other workers read the word meanwhile */
}

static void log_mbox(ty_worker *w, ty_actor *a, const char *what) {
  if (!ty__log_enabled(TY_LOG_WARN)) return;
  ty__logev e;
  ty__log_begin(&e, TY_LOG_WARN, (int)w->id + 1, a->pid, what, strlen(what));
  ty__log_num(&e, "messages", a->mbox.len);
  ty__log_num(&e, "bytes", (double)a->mbox.bytes);
  ty__log_end(&e);
}

/* The next length at which an append calls mbox_grew: one past the
 * high-water mark, the warning mark while not warned, the limit while not
 * full (the limits are fixed once the runtime starts). */
static void set_mark(ty_actor *a, const ty_config *c) {
  const ty_mailbox *mb = &a->mbox;
  uint32_t mark = mb->hwm + 1 ? mb->hwm + 1 : mb->hwm;
  if (!mb->warned && c->mbox_warn < mark) mark = c->mbox_warn;
  if (!mb->full && c->mbox_max < mark) mark = c->mbox_max;
  a->mbox_mark = mark;
}

/* After an append that reached the actor's mark or half the bytes limit:
 * high-water marks, the warning, the full flag. */
static void mbox_grew(ty_worker *w, ty_actor *a) {
  ty_mailbox *mb = &a->mbox;
  const ty_config *c = &w->rt->cfg;
  if (mb->len > mb->hwm) {
    mb->hwm = mb->len;
    if (mb->len >
        atomic_load_explicit(&w->stats.mailbox_hwm, memory_order_relaxed))
      atomic_store_explicit(&w->stats.mailbox_hwm, mb->len,
                            memory_order_relaxed);
  }
  if (!mb->warned &&
      (mb->len >= c->mbox_warn || mb->bytes >= c->mbox_max_bytes / 2)) {
    mb->warned = true;
    log_mbox(w, a, "long mailbox");
  }
  if (!mb->full && (mb->len >= c->mbox_max || mb->bytes >= c->mbox_max_bytes)) {
    set_full(w, a, true);
    log_mbox(w, a, "mailbox full: sends to it fail");
  }
  set_mark(a, c);
}

static void mbox_shrank(ty_worker *w, ty_actor *a) {
  ty_mailbox *mb = &a->mbox;
  const ty_config *c = &w->rt->cfg;
  if (mb->warned && mb->len < c->mbox_warn / 2 &&
      mb->bytes < c->mbox_max_bytes / 4)
    mb->warned = false;
  if (mb->full && mb->len < c->mbox_max - c->mbox_max / 8 &&
      mb->bytes < c->mbox_max_bytes - c->mbox_max_bytes / 8)
    set_full(w, a, false);
  set_mark(a, c);
}

/* The append of every delivery, inlined there (issue 21's per-message
 * cost: docs/performance.md, "C ring hop, one worker"). One compare of the
 * length against the actor's mark and one of the bytes against half the
 * bytes limit (where the warning starts) stand for the four marks. */
static inline void mbox_append(ty_worker *w, ty_actor *a, ty_msg *m) {
  m->node.next = NULL;
  if (a->mbox.tail) a->mbox.tail->node.next = &m->node;
  else a->mbox.head = m;
  a->mbox.tail = m;
  a->mbox.len++;
  if (ty__unlikely(m->kind >= TY_MSG_SIGNAL)) a->mbox.signals++;
  uint64_t bytes = msg_bytes(m);
  a->mbox.bytes += bytes;
  TY__STAT_ADD(w, mailbox, 1);
  TY__STAT_ADD(w, mailbox_bytes, bytes);
  if (ty__unlikely(a->mbox.len >= a->mbox_mark ||
                   a->mbox.bytes >= w->mbox_half_bytes))
    mbox_grew(w, a);
}

void ty__mbox_append(ty_worker *w, ty_actor *a, ty_msg *m) {
  mbox_append(w, a, m);
}

void ty_mbox_remove(ty_actor *a, ty_msg *prev, ty_msg *m) {
  ty__assert(prev ? ty_mbox_next(prev) == m : a->mbox.head == m);
  ty_msg *next = ty_mbox_next(m);
  if (prev) prev->node.next = (ty__node *)next;
  else a->mbox.head = next;
  if (a->mbox.tail == m) a->mbox.tail = prev;
  a->mbox.len--;
  if (ty__unlikely(m->kind >= TY_MSG_SIGNAL)) a->mbox.signals--;
  uint64_t bytes = msg_bytes(m);
  a->mbox.bytes -= bytes;
  m->node.next = NULL;
  ty_worker *w = ty__tls_worker;
  TY__STAT_ADD(w, mailbox, (uint64_t)-1);
  TY__STAT_ADD(w, mailbox_bytes, (uint64_t)0 - bytes);
  if (ty__unlikely(a->mbox.warned || a->mbox.full)) mbox_shrank(w, a);
}

/* ---- delivery ---------------------------------------------------------- */

static bool wakes(const ty_actor *a, const ty_msg *m) {
  return a->state == TY__A_WAITING &&
         (a->wait_ref == 0 || m->ref == a->wait_ref ||
          m->kind >= TY_MSG_SIGNAL);
}

void ty__undeliverable(ty_worker *w, ty_msg *m) {
  ty_runtime *rt = w ? w->rt : NULL;
  if (rt && rt->ops.undeliverable) rt->ops.undeliverable(m, w, rt->ud);
  ty_msg_free(m);
}

/* m is addressed to an actor whose home is w (or to a stale pid). */
void ty__worker_deliver(ty_worker *w, ty_msg *m, bool from_running) {
  ty__pident *e;
  uint64_t word = ty__pidtab_lookup(&w->rt->pids, m->to, &e);
  if (!word || ty__w_state(word) != TY__S_LIVE) {
    ty__undeliverable(w, m);
    return;
  }
  ty__assert(ty__w_home(word) == w->id);
  /* relaxed: we are the home worker and stored this pointer ourselves. */
  ty__deliver_to(w, atomic_load_explicit(&e->actor, memory_order_relaxed), m,
                 from_running);
}

void ty__deliver_to(ty_worker *w, ty_actor *a, ty_msg *m, bool from_running) {
  TY__STAT_ADD(w, delivered, 1);
  if (m->ref && m->ref == a->wait_ref && a->wait_ref != TY_REF_WAKE &&
      m->kind < TY_MSG_SIGNAL && !a->awaited) {
    a->awaited = m; /* the reply a call waits for: no mailbox scan */
  } else {
    mbox_append(w, a, m);
    /* A flood from an actor of this worker: let the receiver drain it
     * (the sender yields; the receiver sits in the LIFO slot). */
    if (from_running && a->mbox.len >= SEND_YIELD_MARK)
      w->current->flags |= TY__AF_SEND_YIELD;
  }
  if (wakes(a, m)) make_ready(w, a, from_running);
}

ty_msg *ty_actor_take_awaited(ty_actor *a) {
  ty_msg *m = a->awaited;
  a->awaited = NULL;
  return m;
}

void ty_actor_wake(ty_actor *a) {
  ty_worker *w = ty_worker_current();
  ty__assert(w && a->home == w->id);
  if (a->state == TY__A_WAITING) make_ready(w, a, false);
}

bool ty_send_blocked(const ty_actor *a) {
  return a->flags & (TY__AF_SEND_BLOCKED | TY__AF_SEND_YIELD);
}

/* Called by ty_send for a message that went into an overflow list. */
void ty__worker_note_blocked(ty_worker *w, unsigned to) {
  ty_actor *a = w->current;
  if (!a) return;
  a->flags |= TY__AF_SEND_BLOCKED;
  a->blocked_peer = (uint16_t)to;
}

/* ---- timers ------------------------------------------------------------ */

uint64_t ty_actor_wait(ty_actor *a, int64_t timeout_ns, uint64_t ref) {
  ty_worker *w = ty_worker_current();
  if (a->awaited && a->awaited->ref != ref) { /* a reply nobody waits for */
    ty__undeliverable(w, a->awaited);
    a->awaited = NULL;
  }
  a->wait_ref = ref;
  a->flags &= ~(TY__AF_TIMED_OUT | TY__AF_WAIT_NOMEM);
  ty__wait_timer_cancel(w, a);
  if (timeout_ns < 0) return 0;
  if (timeout_ns > (int64_t)1 << 60) timeout_ns = (int64_t)1 << 60;
  if (ty__unlikely(!a->timer)) {
    a->timer = ty__try_alloc(sizeof *a->timer);
    if (!a->timer) { /* a script reaches this: no death, a timeout */
      a->flags |= TY__AF_WAIT_NOMEM;
      return ty_runtime_now_ns(w->rt);
    }
    memset(a->timer, 0, sizeof *a->timer);
    a->timer->t.kind = TY__TIMER_WAIT;
    a->timer->actor = a;
  }
  uint64_t at = ty_runtime_now_ns(w->rt) + (uint64_t)timeout_ns;
  /* Round up: a timer never fires before its time. */
  ty__wheel_insert(&w->wheel, &a->timer->t, ty__tick_up(at));
  return at;
}

bool ty_actor_timed_out(const ty_actor *a) {
  return a->flags & TY__AF_TIMED_OUT;
}
