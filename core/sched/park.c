/*
 * park.c - an idle worker: the search for stealable work ends, it spins a
 * little, then parks in its I/O wait until woken (waking is wake.c's); and
 * the maintenance a worker does every `budget` polls and around parking (docs/architecture.md,
 * "Parking"; the protocol is model-checked in scripts/park.pml).
 */
#include <sched.h>
#include <unistd.h>

#include "io/io.h"
#include "worker.h"

#define OVERFLOW_PARK_NS 100000 /* re-try a full ring this often when idle */
#define VIRTUAL_PARK_NS 1000000 /* under virtual time: look at it this often */

void ty__end_search(ty_worker *w) {
  if (!w->searching) return;
  w->searching = false;
  /* The last searcher found work: there may be more, so wake another. */
  if (ty__idle_end_search(&w->rt->idle)) ty__notify_parked(w->rt);
}

/* ---- maintenance ------------------------------------------------------- */

#define GQ_TARGET_NS 200000.0 /* Tokio: aim to check inject every 200 us */

/* Tokio's self-tuning: check the inject queue about every 200 us of polling,
 * measured as an EWMA of the time per poll. */
static void tune_interval(ty_worker *w, uint64_t now_ns) {
  if (w->batch_polls) {
    double per = (double)(now_ns - w->batch_start_ns) / w->batch_polls;
    w->poll_ewma_ns = w->poll_ewma_ns ? 0.1 * per + 0.9 * w->poll_ewma_ns : per;
    double iv = GQ_TARGET_NS / (w->poll_ewma_ns > 1 ? w->poll_ewma_ns : 1);
    w->gq_interval = iv < 2 ? 2 : iv > 127 ? 127 : (uint32_t)iv;
  }
  w->batch_start_ns = now_ns;
  w->batch_polls = 0;
}

/* Timers, the inbox and I/O: run every `budget` polls and around parking,
 * so that they are served even while work remains. */
void ty__maintenance(ty_worker *w) {
  ty_runtime *rt = w->rt;
  /* acquire: pairs with the watchdog's release bump; the pids it freed are
   * then seen dead. */
  uint32_t epoch = atomic_load_explicit(&rt->stuck_epoch, memory_order_acquire);
  if (ty__unlikely(epoch != w->seen_stuck)) {
    w->seen_stuck = epoch;
    if (rt->ops.peer_stuck) rt->ops.peer_stuck(w, rt->ud);
  }
  uint64_t now = ty_runtime_now_ns(w->rt);
  tune_interval(w, now);
  ty__io_wait(w->io, 0);
  ty__fire_timers(w, now);
  /* release: the timers' messages are staged before this is seen
   * (ty_runtime_fired); publish_all follows in fire_timers. */
  atomic_store_explicit(&w->fired_ns, now, memory_order_release);
  ty__drain_inbox(w);
  ty__update_load(w);
}

/* ---- parking ----------------------------------------------------------- */

static bool has_work(ty_worker *w, bool last_searcher) {
  ty_runtime *rt = w->rt;
  if (w->ready.head || w->lifo || ty__spawnq_len(&w->spawnq) ||
      ty__inject_len(&w->inbox) || ty__inject_len(&rt->inject) ||
      ty__mesh_has_incoming(&rt->mesh, w->id))
    return true;
  /* relaxed: ordered after our park store by the caller's seq_cst fence. */
  if (ty__worker_exiting(w)) return true;
  if (last_searcher) {
    for (unsigned i = 0; i < rt->n; i++)
      if (i != w->id && ty__spawnq_len(&rt->workers[i].spawnq) > 1)
        return true; /* what steal() would take (it leaves a lone one) */
  }
  return false;
}

static int64_t park_timeout(ty_worker *w) {
  uint64_t next = ty__wheel_next_deadline(&w->wheel);
  int64_t t = -1;
  if (next != UINT64_MAX) {
    uint64_t now = ty_runtime_now_ns(w->rt);
    uint64_t at = next * TY__TICK_NS;
    t = at > now ? (int64_t)(at - now) : 0;
  }
  if (w->overflowing && (t < 0 || t > OVERFLOW_PARK_NS)) t = OVERFLOW_PARK_NS;
  /* Virtual time moves only by ty_runtime_advance, which may miss a worker
   * on its way to park: look again every ms (a mode for specs only). */
  if (ty_runtime_is_virtual(w->rt)) t = VIRTUAL_PARK_NS;
  return t;
}

/*
 * PARKED -> fence -> re-check -> sleep. A producer publishes, fences, then
 * reads our state; we store PARKED, fence, then read its queue: with both
 * fences seq_cst, at least one side sees the other's store, so either we find
 * the work or it finds us parked and writes the eventfd.
 */
void ty__park(ty_worker *w) {
  ty_runtime *rt = w->rt;
  ty__maintenance(w);
  ty__publish_all(w); /* after maintenance, which may have sent something */
  if (w->ready.head) return;
  int64_t timeout = park_timeout(w);
  if (timeout == 0) return;
  /* seq_cst: the store half of the protocol above. Stored before we join
   * the sleepers, so a notifier that picks us sees PARKED. */
  atomic_store(&w->park, TY__PARKED);
  TY_CHAOS();
  bool last = ty__idle_park(&rt->idle, w->id, w->searching);
  w->searching = false;
  atomic_thread_fence(memory_order_seq_cst);
  TY_CHAOS(); /* a producer publishes between our fence and the re-check */
  if (!has_work(w, last)) {
    TY__STAT_ADD(w, parks, 1);
    ty__io_wait(w->io, timeout);
  }
  TY_CHAOS();
  /* seq_cst: pairs with the wakers' CAS; NOTIFIED means the eventfd was (or
   * is about to be) written. */
  if (atomic_exchange(&w->park, TY__RUNNING) == TY__NOTIFIED) {
    uint64_t v;
    ssize_t r = read(w->wake_fd, &v, sizeof v);
    (void)r; /* EAGAIN: the write is still coming; a later park eats it */
    TY__STAT_ADD(w, unparks, 1);
  }
  if (ty__idle_unpark(&rt->idle, w->id)) w->searching = true;
  ty__maintenance(w);
}

/* ---- spinning ---------------------------------------------------------- */

/* Work that a spinning worker would pick up: cheap loads only. Stealable
 * work counts once the spinner may search (steal); it tries to become a
 * searcher when it sees some. */
static bool work_visible(ty_worker *w) {
  ty_runtime *rt = w->rt;
  if (ty__mesh_has_incoming(&rt->mesh, w->id) || ty__inject_len(&w->inbox) ||
      ty__inject_len(&rt->inject))
    return true;
  for (unsigned i = 0; i < rt->n; i++) {
    if (i == w->id || ty__spawnq_len(&rt->workers[i].spawnq) < 2) continue;
    if (w->searching) return true;
    if (ty__idle_try_search(&rt->idle)) {
      w->searching = true;
      return true;
    }
    return false;
  }
  return false;
}

/* How long to spin: spin_ns, cut short at the worker's next timer (the spin
 * does not fire timers, so a timer due meanwhile would wait for its end).
 * Not skipped when a timer is near: a worker that parked instead lost the
 * spin's cheap cross-worker wake (blocking_spec's ping-pong under a pool
 * load fell to 81%). */
static uint64_t spin_budget(ty_worker *w, uint64_t spin) {
  uint64_t next = ty__wheel_next_deadline(&w->wheel);
  if (next == UINT64_MAX) return spin;
  uint64_t now = ty_runtime_now_ns(w->rt), at = next * TY__TICK_NS;
  if (at <= now) return 0;
  return at - now < spin ? at - now : spin;
}
/*
 * Before parking, an idle worker watches for work for up to spin_ns (I/O is
 * not polled: measured with wrk, polling it here tripled p99): a message
 * from another core then costs a cache-line transfer (~0.2 us) instead of a
 * sleep and an eventfd wake (~10-20 us). Only loads: a
 * spinner that sees stealable work must first become a searcher (at most
 * half the workers search) before the loop lets it steal. Every 256 turns
 * the spinner yields the CPU, so that on an oversubscribed machine it does
 * not keep a busy worker off its core. The spin ends when the worker's next
 * timer falls due (spin_budget), so that it fires on time.
 */
/* A yield that came back this late went behind other runnable threads: the
 * machine has more of them than cores. Spinning then costs the worker a
 * time slice behind them each time it yields (a message to it waits for
 * that, ~ms: the Lua ring under two CPU hogs fell from 4M to 55k hops/s),
 * while a parked worker that is woken goes first. So the next idle turns
 * park at once. */
#define TY__SPIN_PREEMPTED_NS 200000u
#define TY__SPIN_OFF_TURNS 1024u

bool ty__spin_for_work(ty_worker *w) {
  uint64_t spin = w->rt->cfg.spin_ns;
  /* Sends queued behind this turn's writes (write-behind) leave now, not
   * after the spin: the worker has nothing else to do meanwhile. */
  ty__io_submit(w->io);
  if (w->spin_off) { /* the machine is oversubscribed (below) */
    w->spin_off--;
    return false;
  }
  if (w->rt->n == 1 || !(spin = spin_budget(w, spin))) return false;
  ty__publish_all(w);
  uint64_t until = ty__now_ns() + spin;
  for (unsigned i = 1;; i++) {
    if (work_visible(w)) return true;
    /* a hint; the park path re-reads it after its fence. */
    if (ty__worker_exiting(w)) return false;
    if ((i & 31) == 0 && ty__now_ns() > until) return false;
    if ((i & 255) == 0) {
      uint64_t t0 = ty__now_ns();
      sched_yield();
      if (ty__now_ns() - t0 > TY__SPIN_PREEMPTED_NS) {
        w->spin_off = TY__SPIN_OFF_TURNS;
        return false;
      }
    } else {
      ty__cpu_relax();
    }
  }
}
