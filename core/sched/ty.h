/*
 * ty.h - the public interface of the tycho scheduler core.
 *
 * The core runs actors on N worker threads and knows nothing of Lua: an actor
 * is a `ty_actor` whose behaviour comes from one table of operations
 * (`ty_actor_ops`) given when the runtime is created. The Lua binding
 * (core/lua) and the C tests and benchmarks plug in through that same table.
 *
 * Lifecycle of an actor:
 *   ty_spawn()      creates a *spawn request*: it has a pid at once, but no
 *                   worker yet. P2C places it on a worker's spawn queue, from
 *                   where idle workers may steal it. Messages sent to it wait.
 *   first run       the worker that takes it becomes its home for life and
 *                   calls ops->resume with a->started == false.
 *   ops->resume()   runs it until it waits (TY_WAIT), yields (TY_YIELD) or
 *                   ends (TY_DONE); it is always called on the home worker.
 *   ops->destroy()  after TY_DONE, at shutdown, or for a request that never
 *                   started (then on any thread, with no worker).
 *
 * Messages (ty_msg) are byte payloads with a small header. A mailbox is
 * touched only by its actor's worker: sends from other workers travel through
 * the mesh of SPSC rings, sends from other threads through the worker's inbox.
 * Order is kept per sender -> receiver pair; nothing is dropped between live
 * actors. A full ring makes the *sender* wait (ty_send_blocked), never drops.
 *
 * Errors are negative errno values.
 */
#ifndef TY_H
#define TY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/common.h"
#include "timer.h"

/*
 * A pid names an actor for life: (node << 43) | (gen << 26) | slot. It fits
 * in 53 bits so that Lua can hold it as a plain number; a slot reused by a
 * later actor has another generation, so a stale pid never reaches it. The
 * node is 0 in a runtime outside any cluster; in a cluster it is the id this
 * incarnation of the node got when it joined (docs/cluster.md), so a pid
 * names its node, and a pid of a node that restarted names nothing alive.
 */
typedef uint64_t ty_pid;
#define TY_PID_SLOT_BITS 26
#define TY_PID_GEN_BITS 17
#define TY_PID_NODE_BITS 10
#define TY_PID_MAX_SLOTS (1u << TY_PID_SLOT_BITS)
#define TY_MAX_NODES (1u << TY_PID_NODE_BITS) /* ids 1 .. TY_MAX_NODES - 1 */
#define TY_MAX_WORKERS 64

/* The node a pid names (0 outside a cluster). */
static inline unsigned ty_pid_node(ty_pid p) {
  return (unsigned)(p >> (TY_PID_SLOT_BITS + TY_PID_GEN_BITS)) &
         (TY_MAX_NODES - 1);
}

typedef struct ty_runtime ty_runtime;
typedef struct ty_worker ty_worker;
typedef struct ty_actor ty_actor;
typedef struct ty_msg ty_msg;

/* What a resume tells the worker. */
enum {
  TY_WAIT = 0,  /* waiting for a message or its timer (see ty_actor_wait) */
  TY_YIELD = 1, /* runnable again: back of the ready queue */
  TY_DONE = 2   /* finished: the worker frees its pid and destroys it */
};

/* Node types, so that one queue or ring can carry both. */
enum { TY__T_ACTOR = 1, TY__T_MSG = 2 };

/*
 * Message kinds below TY_MSG_SIGNAL are ordinary; kinds at or above it are
 * signals (exit, down, kill ...), which wake an actor whatever it waits for.
 */
#define TY_MSG_SIGNAL 0x100u

struct ty_msg {
  ty__node node;
  uint32_t type; /* TY__T_MSG */
  uint32_t kind; /* binding-defined; see TY_MSG_SIGNAL */
  ty_pid to;
  ty_pid from;
  uint64_t ref; /* call correlation (0: none) */
  uint64_t aux; /* binding-defined */
  uint32_t len; /* payload bytes in data[] */
  uint32_t cap; /* allocated payload bytes */
  /* Bytes the binding keeps elsewhere for this message (a message between
   * actors of one worker holds Lua values, not bytes: their encoded size),
   * counted in its receiver's mailbox bytes like payload. 0 by default. */
  uint32_t held;
  /* Binding-defined, for a message that never leaves its worker (unlike
   * aux, nothing that builds a message from another carries it over: 0 on
   * every message that crossed a ring, a node or a timer). */
  uint32_t mark;
  char data[];
};

/* A waiting actor's mailbox: singly linked FIFO, touched only by its worker.
 * `bytes` counts what the queued messages occupy (header and payload);
 * `hwm` is the longest the mailbox has been. */
typedef struct ty_mailbox {
  ty_msg *head;
  ty_msg *tail;
  uint32_t len;
  uint32_t signals; /* how many have kind >= TY_MSG_SIGNAL */
  uint64_t bytes;
  uint32_t hwm;
  bool warned; /* passed the warning mark (logged once per crossing) */
  bool full;   /* at its limit: limited sends are refused (ty_send_limited) */
} ty_mailbox;

struct ty_actor {
  ty__node node; /* ready queue, spawn queue, inject, mesh */
  uint32_t type; /* TY__T_ACTOR */
  uint16_t home; /* worker index, valid once started */
  uint8_t state; /* TY__A_* (worker-private) */
  uint8_t flags; /* TY__AF_* (worker-private) */
  ty_pid pid;
  uint64_t wait_ref; /* while waiting: wake only for this ref (0: any) */
  /* The message whose ref is wait_ref (a call's reply) when it arrives: kept
   * out of the mailbox, so that finding it costs nothing whatever the
   * backlog (ty_actor_take_awaited). */
  ty_msg *awaited;
  ty_mailbox mbox;
  /* The wait timer, out of line: allocated at the first timed wait and kept
   * until the actor ends, so that an actor that never waits with a timeout
   * (an idle one parked in recv) does not carry it (32 bytes). */
  struct ty__wtimer *timer;
  struct ty__mtimer *timers; /* message timers it owns (ty_timer_send) */
  void *user;                /* the binding's data */
  bool started;
  bool pinned;           /* placed by ty_spawn_at: never on a spawn queue */
  uint16_t blocked_peer; /* worker whose full ring the last send hit */
  /* The mailbox length at which an append must look at the marks again
   * (a new high-water mark, the warning, the limit): their minimum, kept
   * by the home worker so that an append compares once (deliver.c). In the
   * tail padding of this struct, not in ty_mailbox: it costs no byte. */
  uint32_t mbox_mark;
};

typedef struct ty_actor_ops {
  /* Called once on each worker thread before it runs anything, and once
   * when it exits; either may be NULL. The binding creates a Lua state. */
  void (*worker_init)(ty_worker *w, void *ud);
  void (*worker_exit)(ty_worker *w, void *ud);
  /* Runs the actor on its home worker; returns TY_WAIT, TY_YIELD, TY_DONE. */
  int (*resume)(ty_actor *a, void *ud);
  /* Frees a->user. w is NULL when called for a request that never started
   * (on whichever thread cleans it up). */
  void (*destroy)(ty_actor *a, ty_worker *w, void *ud);
  /* A message reached no live actor (ended or stale pid), on the worker that
   * found out (or NULL). May send a reply; must not free m. May be NULL. */
  void (*undeliverable)(ty_msg *m, ty_worker *w, void *ud);

  /* ---- the watchdog (docs/architecture.md, "Runaway actors"); optional */
  /* Asks the code running on w to stop at its next chance (kind: a
   * TY_PREEMPT_*; seq: the resume it is meant for, see ty_worker_seq), or
   * with kind 0 to stop asking. Called with w's watchdog lock held, from
   * any thread (the watchdog, a killer, w itself). */
  void (*interrupt)(ty_worker *w, int kind, uint64_t seq, void *ud);
  /* The pid whose kill must stop a's code while it runs, when it is not
   * a's own (a fork's: its actor's). Called on the home worker before each
   * resume of an actor placed by ty_spawn_at (forks are); may be NULL. */
  ty_pid (*kill_as)(ty_actor *a, void *ud);
  /* On the watchdog thread: w was declared stuck while running `running`.
   * dead[0..n) are its started actors (running among them): their pids are
   * dead already; tell their monitors and links, free their names. w's
   * watchdog lock is held; w's thread may still run `running`'s code. The
   * actors are destroyed later by w itself, if it ever comes back. */
  void (*stuck)(ty_worker *w, ty_actor *running, ty_actor **dead, size_t n,
                void *ud);
  /* On every other worker's thread, soon after a worker was declared
   * stuck: actors waiting on one of its (now dead) actors learn it here. */
  void (*peer_stuck)(ty_worker *w, void *ud);
  /* A message timer is due (ty_timer_send): m is this firing's message,
   * from the timer's owner. Return 0 to send it to m->to (the binding may
   * set m->to now: a name resolved at delivery), or nonzero to drop it
   * (it then meets undeliverable). May be NULL: m goes to m->to as is. */
  int (*timer_due)(ty_msg *m, ty_worker *w, void *ud);
  /* Runs the worker's loop: calls loop(w, NULL), which returns when the
   * runtime stops. May be NULL (the loop is called directly). The binding
   * runs the loop inside its error protection; when that catches an error
   * unwinding out of a resume, it ends the actor and calls
   * ty_worker_resume_failed, then the loop again. */
  void (*run)(ty_worker *w, void (*loop)(ty_worker *w, void *arg), void *ud);
} ty_actor_ops;

/* Why running code is asked to stop (ty_actor_ops.interrupt). */
enum {
  TY_PREEMPT_NONE = 0,
  TY_PREEMPT_SLICE = 1, /* ran longer than max_slice: end it ("runaway") */
  TY_PREEMPT_KILL = 2,  /* a kill for the actor (or its actor) in ty_preempt */
  TY_PREEMPT_STOP = 3,  /* the runtime is stopping */
  TY_PREEMPT_STUCK = 4  /* its worker was declared stuck meanwhile */
};

typedef struct ty_config {
  unsigned workers;          /* 0: one per CPU */
  uint32_t mesh_ring;        /* entries per SPSC ring (power of two) */
  uint32_t spawnq_cap;       /* spawn queue slots (power of two, <= 256) */
  uint32_t budget;           /* polls between timer/I/O maintenance */
  uint32_t max_lifo_polls;   /* LIFO polls in a row */
  uint32_t gq_interval_seed; /* first global queue interval */
  int io;                    /* TY_IO_AUTO, TY_IO_URING or TY_IO_EPOLL */
  uint64_t spin_ns;          /* how long an idle worker looks before parking */
  bool pin;                  /* pin worker i to CPU i (TYCHO_PIN=1) */
  uint64_t max_slice_ns;     /* longest resume before the watchdog steps in
                              * (0: no watchdog) */
  uint64_t stop_timeout_ns;  /* how long a stop waits for a worker */
  unsigned node;             /* this node's id in its cluster, 0: none */
  bool port;                 /* a port for the cluster gateway (below) */
  /* Mailbox limits, for ty_send_limited: messages and bytes; and the length
   * at which a mailbox is logged as long (once per crossing). */
  uint32_t mbox_max;
  uint64_t mbox_max_bytes;
  uint32_t mbox_warn;
} ty_config;

/* Fills *c with the defaults (workers 0, ring 1024, spawnq 256, budget 64,
 * LIFO 3, interval 61, spin 50 us, slice 1 s, stop timeout 5 s; mailboxes:
 * TY_MBOX_MAX messages, TY_MBOX_MAX_BYTES bytes, warning at TY_MBOX_WARN
 * messages). */
#define TY_MBOX_MAX 1000000u
#define TY_MBOX_MAX_BYTES ((uint64_t)256 << 20)
#define TY_MBOX_WARN 10000u
void ty_config_init(ty_config *c);

/* Creates a runtime (threads not started). ud is passed to every op. */
int ty_runtime_new(const ty_config *c, const ty_actor_ops *ops, void *ud,
                   ty_runtime **out);
/* Starts the worker threads. */
int ty_runtime_start(ty_runtime *rt);
/*
 * Tokio's block_on: starts the runtime with the calling thread serving as
 * worker `id` (the others get threads of their own, as in ty_runtime_start).
 * The thread then runs that worker inside ty_worker_run_here: ops->worker_init
 * and the worker's loop (ops->run) on this thread, until ty_worker_leave.
 * The worker's actors stay alive (not served) until ty_runtime_stop, which
 * must be called from this same thread: it ends the worker there (its
 * actors destroyed, ops->worker_exit) while the other workers end on
 * theirs. A worker served so is never abandoned by a stop; if its code
 * never returns, neither does ty_worker_run_here. -EINVAL from a worker
 * thread, for a bad id, or when not started so.
 */
int ty_runtime_start_here(ty_runtime *rt, unsigned id);
int ty_worker_run_here(ty_runtime *rt, unsigned id);
/* Makes the loop of worker `id` return after the run it is in (it is woken
 * if parked): for the worker a ty_worker_run_here serves. Any thread,
 * idempotent. */
void ty_worker_leave(ty_runtime *rt, unsigned id);
/* Stops: running code is asked to stop (ops->interrupt), every worker
 * stops at its actor's next yield, destroys its actors and exits; then
 * everything still queued is freed. A worker declared stuck, or one that has
 * not exited within stop_timeout_ns, is abandoned: its thread is detached
 * (it blocks for good if its code ever returns), and the runtime's memory is
 * then kept for the life of the process. Returns how many workers were
 * abandoned. Callable from any thread that is not a worker (after
 * ty_runtime_start_here: from that thread, once ty_worker_run_here
 * returned). */
int ty_runtime_stop(ty_runtime *rt);
/* Frees a stopped (or never started) runtime. */
void ty_runtime_free(ty_runtime *rt);

unsigned ty_runtime_workers(const ty_runtime *rt);
void *ty_runtime_userdata(const ty_runtime *rt);
/* Monotonic nanoseconds since the runtime was created. */
uint64_t ty_runtime_now_ns(const ty_runtime *rt);
/* Virtual time, for specs (tycho.test.clock): from now on the runtime's time
 * stands still but for ty_runtime_advance(ns), which moves it and wakes the
 * workers; each fires what fell due (an interval every instant it missed,
 * in order) at its next maintenance. ty_runtime_fired(ns): every worker
 * has fired its timers up to ns. */
void ty_runtime_virtual(ty_runtime *rt);
bool ty_runtime_is_virtual(const ty_runtime *rt);
uint64_t ty_runtime_advance(ty_runtime *rt, uint64_t ns);
bool ty_runtime_fired(const ty_runtime *rt, uint64_t ns);

/*
 * Creates an actor with binding data `user` and places it (P2C from a worker,
 * the inject queue from any other thread). *out gets its pid. Any thread.
 * -EAGAIN when the pid table is full, -ENOMEM when memory runs out.
 */
int ty_spawn(ty_runtime *rt, void *user, ty_pid *out);

/*
 * Creates an actor that starts on `worker` and is never stolen (forks, and
 * tests that need a known placement). -EHOSTDOWN when that worker has been
 * declared stuck. Any thread.
 */
int ty_spawn_at(ty_runtime *rt, unsigned worker, void *user, ty_pid *out);

/*
 * ty_spawn with a step between the pid and the placement: before(pid, ctx)
 * runs once the pid exists and before the request is placed, so before the
 * actor can run anywhere (a name registered there is in place before the
 * actor's first instruction, whichever worker takes it). A nonzero return
 * abandons the request: its pid is freed without ever having lived, destroy
 * is not called (the caller keeps `user`), and that value is returned.
 * before must not hand the pid to anyone when it fails. Any thread.
 */
int ty_spawn_hook(ty_runtime *rt, void *user, ty_pid *out,
                  int (*before)(ty_pid pid, void *ctx), void *ctx);

/* Allocates a message with room for `len` payload bytes (m->len = len);
 * dies when memory runs out. ty_msg_try_new answers NULL instead. */
ty_msg *ty_msg_new(size_t len);
ty_msg *ty_msg_try_new(size_t len);
void ty_msg_free(ty_msg *m);

/*
 * Sends m to m->to. On success the runtime owns m. Returns -ESRCH when the
 * pid names no live actor that the sender can see (the caller still owns m):
 * also a pid of another node when the runtime has no port or that node is
 * not live (ty_node_set_live). A message may still reach nobody if the actor
 * ends while it travels: then ops->undeliverable sees it. Any thread.
 */
int ty_send(ty_runtime *rt, ty_msg *m);

/*
 * ty_send for messages a receiver may refuse (ordinary sends and calls, not
 * replies or signals): -ENOBUFS when the receiver's mailbox is at its limit
 * (ty_config.mbox_max / mbox_max_bytes; the caller still owns m). The
 * receiver's worker flags a full mailbox in the pid table, so a sender on
 * another worker sees the flag a little late: messages already travelling
 * (at most a ring's worth per pair of workers, plus one per sender blocked
 * on a full ring) still land past the limit. Messages to an actor that has
 * not started yet are not limited.
 */
int ty_send_limited(ty_runtime *rt, ty_msg *m);

/* True when the last send from this actor found its ring full, or filled
 * the long mailbox of an actor of its own worker: the actor should return
 * TY_YIELD now; the worker resumes it once the ring has room (or at once,
 * behind the receiver). */
bool ty_send_blocked(const ty_actor *a);

/* From ops->run, after an error unwound out of ops->resume: finish the
 * interrupted run of the current actor as if resume had returned r. */
void ty_worker_resume_failed(ty_worker *w, int r);

/* The worker running the calling thread, or NULL. */
ty_worker *ty_worker_current(void);
unsigned ty_worker_id(const ty_worker *w);
ty_runtime *ty_worker_runtime(const ty_worker *w);
/* The actor being resumed on this thread, or NULL. */
ty_actor *ty_actor_current(void);
/* The worker's I/O backend (see io.h); only on the worker's own thread. */
struct ty__io *ty_worker_io(const ty_worker *w);
/* Per-worker pointer for the binding (its lua_State). */
void ty_worker_set_data(ty_worker *w, void *data);
void *ty_worker_data(const ty_worker *w);

/* Is pid alive (not ended)? A hint when the actor is on another worker; for
 * a pid of another node: is that node live? */
bool ty_pid_alive(ty_runtime *rt, ty_pid pid);
/* The actor of pid if it lives on the calling worker, else NULL. */
ty_actor *ty_actor_local(ty_pid pid);

/*
 * Message timers, on the calling worker's wheel. `owner` (an actor of this
 * worker, usually the running one) owns the timer: it is cancelled when the
 * owner ends. The timer sends m (m->to, kind, ref and payload as given;
 * m->from is set to the owner) first after first_ns, then, when period_ns
 * is not 0, at first_ns + k * period_ns for k = 1, 2 ... from the start:
 * a fixed rate. After a stall it fires once and skips the instants it
 * missed (no burst). Each firing sends a copy of m; the timer owns m.
 * Returns the timer's id (> 0, below 2^53), or -EPERM when not called on
 * the owner's worker (m is then still the caller's).
 */
int64_t ty_timer_send(ty_actor *owner, ty_msg *m, uint64_t first_ns,
                      uint64_t period_ns);
/* Cancels timer `id` if it is pending and owned by `owner` (on the calling
 * worker): true then; false for one that fired (once) or was cancelled,
 * belongs to another actor, or was started on another worker. */
bool ty_timer_cancel(ty_actor *owner, uint64_t id);
/* Pending message timers of the calling worker. */
size_t ty_timer_count(void);
/* Does pid name an actor of another node? */
bool ty_pid_remote(const ty_runtime *rt, ty_pid pid);

/* Mailbox access for the actor's own resume. */
static inline ty_msg *ty_mbox_first(ty_actor *a) { return a->mbox.head; }
static inline ty_msg *ty_mbox_next(ty_msg *m) { return (ty_msg *)m->node.next; }
/* Removes m, whose predecessor is prev (NULL when m is first). */
void ty_mbox_remove(ty_actor *a, ty_msg *prev, ty_msg *m);
static inline ty_msg *ty_mbox_pop(ty_actor *a) {
  ty_msg *m = a->mbox.head;
  if (m) ty_mbox_remove(a, NULL, m);
  return m;
}

/*
 * Before returning TY_WAIT: wake when a message arrives (only one whose ref
 * is `ref`, or a signal, when ref != 0), or after timeout_ns (< 0: never).
 * Call with timeout_ns >= 0 and no message wanted to sleep. Returns the
 * deadline on the runtime's clock (ty_runtime_now_ns), 0 for none, so that
 * a caller that keeps it needs no second look at the clock.
 */
uint64_t ty_actor_wait(ty_actor *a, int64_t timeout_ns, uint64_t ref);
/* Makes a waiting actor runnable (an I/O completion, say). Only on the
 * actor's home worker; a no-op if it is not waiting. */
void ty_actor_wake(ty_actor *a);

/* After a resume that followed ty_actor_wait: did the timer end the wait? */
bool ty_actor_timed_out(const ty_actor *a);

/* The message whose ref is the current wait ref, if it has arrived (the
 * caller owns it), else NULL. While an actor waits for a ref, the message
 * carrying it skips the mailbox and waits here instead, so that finding a
 * call's reply costs the same whatever the backlog. Refs 0 (any message)
 * and TY_REF_WAKE are not kept apart. */
ty_msg *ty_actor_take_awaited(ty_actor *a);
/* A wait ref for waits that only signals, the timer or a message sent with
 * this very ref end (a nudge); such a message stays in the mailbox. */
#define TY_REF_WAKE UINT64_MAX

/* Per-worker counters, readable from any thread while it runs. `preempts`:
 * resumes the watchdog asked to stop; `stuck`: 1 while declared stuck;
 * mailbox: messages queued in the mailboxes of the worker's actors now;
 * mailbox_bytes: their size; mailbox_hwm: the longest mailbox the worker has
 * seen; sends_full: sends from this worker refused by a full mailbox;
 * delivered: messages handed to the worker's actors (tycho top's msgs/s);
 * run_queue: actors ready or running there now (its placement load). */
typedef struct ty_worker_stats {
  uint64_t polls, lifo_hits, steals, stolen, parks, unparks, mesh_sent,
      mesh_received, inject_pops, spawns_placed, spawns_remote, actors,
      preempts, stuck, mailbox, mailbox_bytes, mailbox_hwm, sends_full,
      delivered, run_queue;
} ty_worker_stats;

/* ---- the watchdog (watchdog.c) ----------------------------------------- */

/* The word that is non-zero while the watchdog wants w's attention: read it
 * (relaxed) after each resume of Lua code and in API calls; only then call
 * the functions below. */
const _Atomic uint32_t *ty_worker_flag(const ty_worker *w);
/* On w's thread: the resume being run (odd) or the last one (even). */
uint64_t ty_worker_seq(const ty_worker *w);
/* On w's thread, during a resume: does a request stand for it? Returns its
 * TY_PREEMPT_* kind (for a kill, *pid is the target); a stale request is
 * dropped (and interrupt(0) called). take: also consume it. */
int ty_preempt(ty_worker *w, bool take, ty_pid *pid);
/* Asks the worker running pid (if it runs it now) to stop it: a kill. Any
 * thread; a no-op when pid is not running on another worker. */
void ty_interrupt_pid(ty_runtime *rt, ty_pid pid);
/* w's watchdog lock: the binding guards what the watchdog reads of w's
 * actors (their monitors and links) with it. */
void ty_worker_lock(ty_worker *w);
void ty_worker_unlock(ty_worker *w);
/* Has worker i been declared stuck? Any thread (a hint). */
bool ty_worker_is_stuck(ty_runtime *rt, unsigned i);
/* Was w, declared stuck, blocked in a C call (sleeping in the kernel: a
 * read, a write to a full pipe, a poll) rather than running code? For the
 * stuck op's report. */
bool ty_worker_blocked(ty_worker *w);
/* On w's thread: calls fn for each started actor whose home is w. */
void ty_worker_each_actor(ty_worker *w, void (*fn)(ty_actor *a, void *ud),
                          void *ud);
void ty_worker_stats_get(ty_runtime *rt, unsigned worker, ty_worker_stats *out);
/* CPU time of worker i's thread so far (0 when it cannot be read): its
 * busy share (tycho top). Any thread, while the runtime runs. */
uint64_t ty_worker_cpu_ns(ty_runtime *rt, unsigned i);
/* Bytes queued in every mailbox now (the sum of the workers' mailbox_bytes;
 * each term may lag by its worker's last message). Any thread. */
uint64_t ty_runtime_mailbox_bytes(ty_runtime *rt);

/*
 * The port: one more endpoint of the mesh, for a thread that is not a worker
 * (the cluster gateway, core/cluster). A runtime created with cfg.port has
 * SPSC rings from every worker to the port and back, used exactly like the
 * rings between workers (docs/architecture.md, "The life of a message"):
 * ty_send puts a message for a pid of another node into the sender's ring to
 * the port (a full ring makes the sender wait), and the port hands messages
 * for local pids to their home workers through its rings. Everything below
 * is for the port's own thread unless it says otherwise.
 */

/* The port's eventfd: readable after a worker published for a parked port. */
int ty_port_fd(ty_runtime *rt);
/* The park protocol (as a worker's): marks the port parked and returns
 * true if it may sleep (nothing arrived meanwhile); call ty_port_unpark
 * after the sleep, or at once when this returns false. */
bool ty_port_park(ty_runtime *rt);
void ty_port_unpark(ty_runtime *rt);
/* Takes up to max messages, in order, that worker `from` sent to the port
 * (from == ty_runtime_workers(rt): those sent by threads that are not
 * workers). The caller chooses the order of the workers, and may leave a
 * worker's ring alone (its senders then wait, as for any full ring). */
size_t ty_port_take(ty_runtime *rt, unsigned from, ty_msg **out, size_t max);
/*
 * Where m (for a local pid) goes: TY_PORT_DONE when it was handed over
 * already (a spawn request not started yet takes it), else the worker whose
 * ring must carry it (its home; for a dead pid some worker, whose
 * ops->undeliverable then sees it).
 */
#define TY_PORT_DONE (~0u)
unsigned ty_port_route(ty_runtime *rt, ty_msg *m);
/* Is the mailbox of local pid at its limit (the flag its home worker keeps,
 * which ty_send_limited reads)? The port refuses ordinary messages from
 * other nodes to it, as a limited send would. Any thread; a hint. */
bool ty_port_full(ty_runtime *rt, ty_pid pid);
/* Stages m in the ring to `worker`; false (m not taken) when it is full. The
 * caller keeps per-worker order: nothing newer for that worker goes first. */
bool ty_port_push(ty_runtime *rt, unsigned worker, ty_msg *m);
/* How many messages `worker` has taken from the port's ring so far (modulo
 * 2^32), and the ring's capacity: with the count of its own pushes, the
 * port knows what is still in the ring. Port thread only. */
uint32_t ty_port_taken(ty_runtime *rt, unsigned worker);
uint32_t ty_port_ring_cap(const ty_runtime *rt);
/* Publishes what was pushed and wakes the workers that sleep. */
void ty_port_publish(ty_runtime *rt);
/* Node liveness, written by the port and read by every sender: a send to a
 * pid of a node that is not live fails at once (-ESRCH). Any thread. */
void ty_node_set_live(ty_runtime *rt, unsigned node, bool live);
bool ty_node_live(const ty_runtime *rt, unsigned node);
/* From any thread: sends m to the port itself, whatever m->to says (a
 * request for the gateway). -ESRCH without a port. */
int ty_port_send(ty_runtime *rt, ty_msg *m);

#endif
