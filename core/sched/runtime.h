/*
 * runtime.h - the runtime and worker structures (internal to the core).
 * Their fields are grouped by the thread that writes them. The functions of
 * the worker (worker.c, deliver.c, park.c) are declared in worker.h.
 */
#ifndef TY_RUNTIME_H
#define TY_RUNTIME_H

#include <pthread.h>

#include "idle.h"
#include "inject.h"
#include "mesh.h"
#include "mtimer.h"
#include "pidtab.h"
#include "spawnq.h"
#include "timer.h"
#include "ty.h"

/* Actor states, worker-private. */
enum {
  TY__A_UNSTARTED = 0,
  TY__A_QUEUED, /* in the ready queue or the LIFO slot */
  TY__A_RUNNING,
  TY__A_WAITING, /* for a message or its timer */
  TY__A_BLOCKED, /* for room in a full mesh ring */
};

enum {
  TY__AF_TIMED_OUT = 1, /* the timer ended the last wait */
  TY__AF_SEND_BLOCKED = 2,
  TY__AF_SEND_YIELD = 4, /* filled a long mailbox on its own worker */
  /* Its wait timer could not be allocated (out of memory): the wait ends
   * at once, timed out, rather than never (after_run in worker.c). */
  TY__AF_WAIT_NOMEM = 8,
};

/* ty__wd_after_resume: the worker came back from being stuck and destroyed
 * the actor it was running (and every other). */
#define TY__GONE 3

/* Park states (ty_worker.park). */
enum { TY__RUNNING = 0, TY__PARKED = 1, TY__NOTIFIED = 2 };

typedef struct ty__list {
  ty__node *head, *tail;
} ty__list;

static inline void ty__list_push(ty__list *l, ty__node *n) {
  n->next = NULL;
  if (l->tail) l->tail->next = n;
  else l->head = n;
  l->tail = n;
}
static inline ty__node *ty__list_pop(ty__list *l) {
  ty__node *n = l->head;
  if (n) {
    l->head = n->next;
    if (!l->head) l->tail = NULL;
  }
  return n;
}

/* Counters: written only by the owner with relaxed load+store (no RMW cost),
 * read by anyone with relaxed loads. */
typedef struct ty__stats {
  _Atomic uint64_t polls, lifo_hits, steals, stolen, parks, unparks, mesh_sent,
      mesh_received, inject_pops, spawns_placed, spawns_remote, actors,
      preempts, mailbox, mailbox_bytes, mailbox_hwm, sends_full, delivered;
} ty__stats;

#define TY__STAT_ADD(w, field, n)                                              \
  atomic_store_explicit(&(w)->stats.field,                                     \
                        atomic_load_explicit(&(w)->stats.field,                \
                                             memory_order_relaxed) +           \
                            (n),                                               \
                        memory_order_relaxed)

/* Per (this worker -> peer) state for the mesh: what did not fit in the ring
 * yet (kept in order) and the actors waiting for it to drain. */
typedef struct ty__peer {
  ty__list overflow;
  ty__list blocked; /* actors that sent into the overflow */
} ty__peer;

/* Watchdog states of a worker (ty__wd.state, under ty__wd.mu). */
enum { TY__WD_OK = 0, TY__WD_STUCK, TY__WD_ABANDONED };
/* Bits of ty__wd.flag. */
enum { TY__WDF_REQ = 1, TY__WDF_CLAIM = 2, TY__WDF_STUCK = 4 };

/*
 * What the watchdog knows of a worker (watchdog.c; docs/architecture.md,
 * "Runaway actors"). The owner publishes `seq` around each resume; the
 * watchdog samples it and, when a resume lasts too long, posts a request
 * (flag REQ) and, later, claims the worker (flag CLAIM) and declares it
 * stuck. Everything but seq, flag and route is guarded by mu.
 */
typedef struct ty__wd {
  /* Owner-written: 2k+1 while it runs its k-th resume, 2k+2 after it. */
  alignas(TY_PAD) _Atomic uint64_t seq;
  /* Owner-written (release) before seq turns odd: that resume's actor and
   * the pid its kills answer to as well (a fork's actor:
   * ty_actor_ops.kill_as; else the same). ty_interrupt_pid
   * interrupts a worker only for the actor it runs. */
  _Atomic ty_pid running;
  _Atomic ty_pid running_as;
  /* Written under mu by others, read by the owner after each resume. */
  alignas(TY_PAD) _Atomic uint32_t flag;
  _Atomic uint32_t route; /* 1 while stuck: placement skips the worker */
  pthread_mutex_t mu;
  int state;        /* TY__WD_* */
  int req_kind;     /* TY_PREEMPT_* of the standing request, or 0 */
  uint64_t req_seq; /* the resume it is meant for */
  ty_pid req_pid;   /* a kill's target */
  ty_actor **dead;  /* declared dead while stuck: the owner destroys them */
  size_t ndead, capdead;
  uint64_t stuck_since_ns;
  /* The watchdog thread's own: what it saw at its last look. */
  uint64_t seen_seq, seen_ns, seen_cpu, asked_ns, asked_cpu;
  bool asked; /* a slice request was posted for seen_seq (at asked_ns) */
  /* The worker's thread id (for its /proc state), set at its start. */
  _Atomic int tid;
  /* The last declaration was of a thread blocked in a C call (under mu). */
  bool blocked;
  /* The watchdog's own, for the resume seen_seq: looks at its thread state
   * from one slice on, and whether one of them found it awake. */
  uint32_t naps;
  bool woke;
} ty__wd;

struct ty_worker {
  /* ---- rarely changed ---- */
  ty_runtime *rt;
  unsigned id;
  pthread_t thread;
  /* Served by the thread that called ty_runtime_start_here, inside
   * ty_worker_run_here (Tokio's block_on), not by a thread of its own. */
  bool here;
  bool here_begun; /* ty_worker_run_here set it up: the stop ends it */
  int wake_fd;     /* eventfd: unparkers write, the parked owner waits on it */
  void *data;      /* the binding's per-worker data */
  struct ty__io *io; /* the worker's I/O backend (owner only) */
  /* cfg.mbox_max_bytes / 2, where a mailbox's warning starts: the one
   * bytes compare of an append (deliver.c, mbox_append). */
  uint64_t mbox_half_bytes;

  /* ---- written by the owner only ---- */
  alignas(TY_PAD) ty_actor *lifo;
  ty_actor *current;
  uint32_t lifo_polls;
  uint32_t gq_interval;
  uint64_t tick;
  uint32_t queue_turns; /* picks that got past the LIFO slot */
  uint64_t rng;
  ty__list ready;
  size_t ready_len;
  ty__peer *peers;      /* [mesh.n]: every worker, then the port */
  uint64_t dirty_mask;  /* workers with staged mesh entries (n <= 64) */
  bool port_dirty;      /* entries staged for the port */
  unsigned overflowing; /* peers with a non-empty overflow list */
  ty__wheel wheel;
  ty__tslots tslots; /* message timers (mtimer.c) */
  uint64_t batch_start_ns;
  uint32_t batch_polls;
  double poll_ewma_ns;
  bool searching;
  uint32_t spin_off;    /* idle turns left that park without spinning */
  unsigned place_to;    /* P2C choice for the current block */
  uint32_t place_left;  /* spawns left in the block */
  uint32_t *free_slots; /* pid slots this worker may reuse */
  size_t nfree, capfree;
  size_t live;         /* started actors on this worker */
  uint64_t resumes;    /* resumes run (its wd.seq is 2 * resumes [+ 1]) */
  uint32_t seen_stuck; /* rt->stuck_epoch last handled */

  ty__spawnq spawnq;

  /* ---- written by other threads ---- */
  alignas(TY_PAD) _Atomic uint32_t park; /* TY__RUNNING / PARKED / NOTIFIED */
  /* Set once by ty_worker_leave (seq_cst store, as `stopping`): the loop of
   * a worker served by its caller's thread returns. The stop sets it on
   * every worker along with `stopping` (ty__worker_exiting reads only it). */
  _Atomic int leave;
  alignas(TY_PAD) _Atomic uint64_t load; /* owner-written P2C load */
  alignas(TY_PAD) ty__inject inbox;      /* messages from non-worker threads */
  ty__stats stats;
  ty__wd wd;
  /* Virtual time (ty_runtime_advance): the runtime time up to which this
   * worker has fired its timers. Owner-written with a release store, read
   * by the advancing thread with acquire. */
  _Atomic uint64_t fired_ns;
};

/*
 * The port (ty.h): the mesh endpoint of the cluster gateway's thread. Its
 * index in the mesh is rt->n, after the workers. The park fields work as a
 * worker's (park.c); `live` is written by the port and read by senders.
 */
typedef struct ty__port {
  /* ---- written by the port's thread only ---- */
  uint64_t dirty_mask; /* workers with entries staged by the port */
  int wake_fd;
  /* ---- written by other threads ---- */
  alignas(TY_PAD) _Atomic uint32_t park; /* TY__RUNNING / PARKED / NOTIFIED */
  alignas(TY_PAD) ty__inject inbox;      /* from threads that are not workers */
  /* Node liveness (relaxed bytes: a send that raced a change is caught by
   * the port, which answers for a node that went away). */
  alignas(TY_PAD) _Atomic uint8_t live[TY_MAX_NODES];
} ty__port;

struct ty_runtime {
  ty_config cfg;
  ty_actor_ops ops;
  void *ud;
  unsigned n;
  uint64_t t0_ns;
  /* Virtual time for specs (ty_runtime_virtual): when `virt` is set, the
   * runtime's time is vnow, moved only by ty_runtime_advance. */
  _Atomic bool virt;
  _Atomic uint64_t vnow;
  ty_worker *workers; /* [n], each cache-aligned */
  ty__mesh mesh;
  ty__inject inject;
  ty__idle idle;
  ty__pidtab pids;
  ty__port *port; /* NULL without cfg.port */
  /* Set once by stop (seq_cst store; workers poll it relaxed and re-read it
   * after their park fence). */
  alignas(TY_PAD) _Atomic int stopping;
  bool started;
  bool abandoned; /* a stop left a worker running: the memory is kept */
  /* Bumped (release) each time a worker is declared stuck; workers look
   * (relaxed) during maintenance and then tell their waiting actors. */
  _Atomic uint32_t stuck_epoch;
  /* The watchdog thread. */
  pthread_t wd_thread;
  pthread_mutex_t wd_mu;
  pthread_cond_t wd_cv;
  bool wd_running, wd_quit; /* under wd_mu */
};

/* runtime.c */
ty_actor *ty__actor_alloc(void); /* NULL when memory runs out */
/* worker.c: an ended actor's pid slot dies (new generation) and goes to
 * w's free list. */
void ty__free_slot(ty_worker *w, ty_actor *a);
void ty__actor_free(ty_actor *a);
/* Frees everything still queued anywhere (spawn queues, rings, overflow
 * lists, inboxes, messages parked on unstarted pids): once every worker
 * thread has exited. Idempotent. */
void ty__runtime_drain(ty_runtime *rt);

/* watchdog.c */
void ty__wd_init(ty_worker *w);
void ty__wd_destroy(ty_worker *w);
/* On w's thread, at its start: lets the watchdog read its thread state. */
void ty__wd_thread_begin(ty_worker *w);
/* Starts / stops the watchdog thread (no-op without max_slice). */
void ty__wd_start(ty_runtime *rt);
void ty__wd_stop(ty_runtime *rt);
/* Asks every worker in a resume to stop it (the runtime stops). */
void ty__wd_stop_requests(ty_runtime *rt);
/* On the owner, after a resume, when its flag was set: returns r, or
 * TY__GONE when the worker came back from being stuck (a is destroyed). */
int ty__wd_after_resume(ty_worker *w, ty_actor *a, int r);
/* At stop: abandons w (declared stuck, or not exited in time). */
void ty__wd_abandon(ty_worker *w);
bool ty__wd_is_stuck(ty_worker *w);
/* Puts an unstarted, pinned request that cannot run on its worker back
 * elsewhere or cancels it; for the watchdog and a revived worker. */
void ty__wd_cancel_request(ty_runtime *rt, ty_actor *a);
/* port.c */
int ty__port_new(ty_runtime *rt);
void ty__port_free(ty_runtime *rt);
/* Any thread: wakes the port if it is parked (after a seq_cst fence). */
void ty__port_wake(ty_runtime *rt);

#endif
