/*
 * worker.h - what the files of a worker share (internal to the core).
 * Bottom first, each calling only the ones before it (scripts/floors/
 * sched.txt; the data structures pidtab, inject, mesh, spawnq, timer and
 * idle sit below them all):
 *
 *   record.c    the calling thread's worker and actor, message and actor
 *               blocks, the runtime's clock
 *   wake.c      waking a parked worker; port.c beside it
 *   deliver.c   ready queue and LIFO slot, mesh staging, mailboxes, waits
 *   route.c     spawns and sends from any thread, pids given back
 *   mtimer.c    message timers and firing the worker's wheel
 *   park.c      maintenance, searching, spinning, parking
 *   watchdog.c, runtime.c, worker.c: the watchdog, the runtime's memory,
 *               the thread and its loop
 *
 * Everything here runs on the worker's own thread unless it says otherwise.
 */
#ifndef TY_WORKER_H
#define TY_WORKER_H

#include "runtime.h"

/* ---- record.c ----------------------------------------------------------- */

/* The calling thread's worker (ty_worker_current, inlined for the core). */
extern _Thread_local ty_worker *ty__tls_worker;

/* ---- worker.c ----------------------------------------------------------- */

/* Should w's loop end: the runtime stops, or the thread that serves w in
 * ty_worker_run_here is asked to leave? The stop sets every worker's
 * `leave` too, so that the turn reads one word of the worker's own.
 * relaxed: a hint polled each turn; the park path reads it again after its
 * seq_cst fence (park.c), and its writers store seq_cst and fence before
 * they unpark. */
static inline bool ty__worker_exiting(ty_worker *w) {
  return atomic_load_explicit(&w->leave, memory_order_relaxed);
}

/* ---- deliver.c ---------------------------------------------------------- */

/* Takes a's wait timer off the wheel if it is on it. */
static inline void ty__wait_timer_cancel(ty_worker *w, ty_actor *a) {
  if (a->timer && a->timer->t.armed) ty__wheel_cancel(&w->wheel, &a->timer->t);
}

void ty__ready_push(ty_worker *w, ty_actor *a);
ty_actor *ty__ready_pop(ty_worker *w);
/* Publishes the worker's P2C load (ready + spawn queue + LIFO + running). */
static inline void ty__update_load(ty_worker *w) {
  uint64_t load = w->ready_len + ty__spawnq_len(&w->spawnq) +
                  (w->lifo ? 1 : 0) + (w->current ? 1 : 0);
  /* relaxed: a placement hint; only the owner writes it. Skip unchanged
   * values so that readers' copies of the line stay valid. */
  if (atomic_load_explicit(&w->load, memory_order_relaxed) != load)
    atomic_store_explicit(&w->load, load, memory_order_relaxed);
}
/* Stages n for peer `to` (or its overflow list when the ring is full, in
 * which case it returns false). */
bool ty__worker_mesh_push(ty_worker *w, unsigned to, ty__node *n);
/* Publishes every ring with staged entries and wakes the parked receivers. */
void ty__publish_all(ty_worker *w);
/* Moves what fits of the overflow lists into their rings, in order. */
void ty__flush_overflow(ty_worker *w);
/* Takes what the incoming rings / the inbox hold. */
bool ty__drain_mesh(ty_worker *w);
void ty__drain_inbox(ty_worker *w);
/* Appends m to a's mailbox (a lives on w), keeping its counters. */
void ty__mbox_append(ty_worker *w, ty_actor *a, ty_msg *m);
/* m is addressed to an actor whose home is w (or to a stale pid). A local
 * send from a running actor wakes the receiver into the LIFO slot. */
void ty__worker_deliver(ty_worker *w, ty_msg *m, bool from_running);
/* The same for a sender that looked the pid up already: a is live and its
 * home is w (one pid lookup per local send instead of two). */
void ty__deliver_to(ty_worker *w, ty_actor *a, ty_msg *m, bool from_running);
/* m reached no live actor: ops->undeliverable, then it is freed. */
void ty__undeliverable(ty_worker *w, ty_msg *m);
/* The running actor's last send went into an overflow list. */
void ty__worker_note_blocked(ty_worker *w, unsigned to);
/* ---- mtimer.c ----------------------------------------------------------- */

/* Fires the timers due by now_ns (wait timers and message timers); true if
 * any fired. */
bool ty__fire_timers(ty_worker *w, uint64_t now_ns);
/* A message timer fell due at now_ns: sends its message, re-arms or frees. */
void ty__mtimer_fire(ty_worker *w, ty__timer *t, uint64_t now_ns);
/* The owner ends: its timers go, their messages undelivered. */
void ty__mtimer_drop_owned(ty_worker *w, ty_actor *a);
/* Frees the worker's timer table (after every timer went). */
void ty__mtimer_free_table(ty_worker *w);

/* ---- route.c: pids ----------------------------------------------------- */

/* The slot of pid is free again (its generation bumped); w (the calling
 * worker, whose free list takes it) may be NULL. ty__free_slot (runtime.h, route.c)
 * is this for a worker's own actor. */
void ty__free_pid(ty_runtime *rt, ty_worker *w, ty_pid pid);

/* ---- wake.c ------------------------------------------------------------- */

/* Any thread: wakes w if it is parked (after the caller's seq_cst fence). */
void ty__worker_unpark(ty_worker *w);
/* Wakes whoever parks on park (PARKED -> NOTIFIED, once) by its eventfd:
 * the waking half of park.c's protocol, for a worker or the port. */
void ty__park_notify(_Atomic uint32_t *park, int wake_fd);
/* Any thread: after pushing stealable work, wakes a parked worker if no
 * worker is searching. */
void ty__notify_parked(ty_runtime *rt);

/* ---- park.c ------------------------------------------------------------- */

/* Timers, inbox and I/O: every `budget` polls and around parking. */
void ty__maintenance(
    ty_worker *
        w); /* The worker found work: it stops searching (and may wake another). */
void ty__end_search(ty_worker *w);
/* Watches for work for up to spin_ns; true when some is visible. */
bool ty__spin_for_work(ty_worker *w);
/* Parks until woken, the next timer, or an I/O completion. */
void ty__park(ty_worker *w);

#endif
