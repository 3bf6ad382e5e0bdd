/*
 * lctx.h - the context floor of core/lua (docs/architecture.md, "The
 * floors of core/lua"): the settings of the process and its running
 * runtime, the worker record and the actor records. Records only: no
 * behaviour lives here, so that every floor above can include it.
 *
 * The context is one object (lctx.c): tycho.config writes it before any
 * runtime exists, and tycho.run hands its address to the runtime as the
 * actor ops' ud, so each worker keeps it (lt_worker.ctx). Code on a worker
 * reaches it through its worker; code that runs elsewhere (the launcher,
 * tycho.config, the watchdog, the cluster's threads) through lt_ctx_get.
 */
#ifndef TY_LCTX_H
#define TY_LCTX_H

#include <lauxlib.h>
#include <lua.h>
#include <stdatomic.h>

#include "base/buf.h"
#include "sched/ty.h"

typedef struct lt_fn lt_fn; /* lfn.h */

/*
 * What the cluster layer (core/cluster, above this one) plugs into the
 * binding: tycho.config's cluster options, tycho.run's start and stop, the
 * end of every actor, {service = name} destinations and tycho.stats. Set once
 * by the module opener (core/cmd) before any run.
 */
typedef struct lt_cluster_hooks {
  /* tycho.config: handles `key` (value at idx) and returns true, or false
   * for a key that is not the cluster's. Raises on a bad value. */
  bool (*config_field)(lua_State *L, const char *key, int idx);
  /* tycho.run, before the runtime exists: false when this run is not in a
   * cluster; else it has joined (cfg->node and cfg->port are set), or it
   * raised with what went wrong (nothing is left behind then). */
  bool (*join)(lua_State *L, ty_config *cfg);
  void (*start)(ty_runtime *rt); /* the runtime exists, workers not started */
  void (*stop)(void);            /* before ty_runtime_stop (or after a join
                                  * whose runtime could not be created) */
  void (*run_end)(void);         /* after every run, in a cluster or not */
  /* Every actor's end, on its worker (cheap when pid held nothing). */
  void (*actor_exit)(ty_pid pid);
  /* {service = name} at idx, for send and call: 1 and *pid for a member on
   * this node (never `exclude`), 2 and *svc when one on another node will
   * answer (send it with ty_port_send, to = 0 and aux = *svc), 0 when the
   * service has no member, -1 for a table that is not {service = name}. */
  int (*service_pick)(lua_State *L, int idx, ty_pid exclude, ty_pid *pid,
                      uint64_t *svc, const char *fname);
  /* tycho.stats: pushes the `cluster` table, or nothing (returns 0). */
  int (*stats)(lua_State *L);
} lt_cluster_hooks;

/* Process-wide settings (tycho.config) and the running runtime. */
typedef struct lt_ctx {
  ty_runtime *rt;
  unsigned workers; /* 0: TYCHO_WORKERS, else one per CPU */
  int io;           /* TY_IO_* (-1: not set: TYCHO_IO, else auto) */
  double call_timeout;
  size_t max_message;
  double max_slice;          /* seconds a resume may run (0: no watchdog) */
  double stop_timeout;       /* seconds a stop waits for workers, the pool */
  double shutdown_timeout;   /* seconds a graceful stop waits for actors */
  uint64_t stop_deadline_ns; /* of the stop under way (ty__now_ns) */
  bool debug; /* config{debug = true} or TYCHO_DEBUG=1: extra checks */
  uint32_t max_mailbox, mailbox_warn; /* messages (0: the core's default) */
  uint64_t max_mailbox_bytes;         /* 0: the core's default */
  size_t max_memory;                  /* 0: lt_mem_default_max() */
  size_t actor_memory;                /* 0: no per-actor budget */
  size_t run_max_memory;              /* the budget of the running tycho.run */
  char *path, *cpath; /* package.path/cpath handed to worker states */
  int argc;
  char **argv;
  lua_CFunction opener; /* luaopen_tycho_core of this copy of the core */
  int left_behind; /* threads a stop left running (stuck code, hung jobs) */
  const lt_cluster_hooks *cluster; /* NULL: no cluster layer */
  /* The largest message another node can take (0: no limit): set by the
   * cluster's start from NATS's max_payload. */
  _Atomic size_t remote_max;
  /* The launcher's --observe address (host:port), or NULL. */
  const char *observe;
  /* Set by tycho.run (lrun.c, the floor above all) before the runtime
   * starts, read by the floors below it: the resume loop's upcalls
   * (lactor.h) and the end of the main actor (lexit.c, lpreempt.c). */
  const struct lt_life_ops *life;
  void (*main_done)(bool ok, const char *data, size_t len);
} lt_ctx;

/* The process's context (lctx.c). */
extern lt_ctx lt__ctx;
static inline lt_ctx *lt_ctx_get(void) { return &lt__ctx; }

/* What an allocation is charged to: an actor (lt_actor.charge) or a
 * blocking job. */
/* The actors an actor spawned, while they live (a spawn bomb's actors each
 * hold little, so only what they hold together blames their spawner):
 * LT_SPAWN_COST each, counted from the spawn to the child's end, on any
 * thread. Shared by the spawner and each live child; the last one frees
 * it. Once the spawner is doomed, so is each of them that grows while the
 * process is over budget (the ones it spawned last start after it ended,
 * and would take the budget's headroom from innocent actors). */
typedef struct lt_brood {
  _Atomic int64_t bytes;
  _Atomic uint32_t refs;
  _Atomic bool doomed;
} lt_brood;
/* What one idle actor costs, about (bench/RESULTS.md: 941 B). */
#define LT_SPAWN_COST ((int64_t)1024)

typedef struct lt_charge {
  int64_t mem;        /* net bytes allocated while it ran (an estimate) */
  int64_t recent;     /* the same since the state's last collection cycle */
  size_t burst;       /* bytes allocated in the current run */
  uint32_t epoch;     /* the cycle `recent` counts in */
  bool doomed;        /* refused once: every later growth is refused too */
  bool spawn_refused; /* its last spawn was refused (nomem) */
  lt_brood *brood;    /* the actors it spawned (NULL: none yet) */
  lt_brood *brood_of; /* its spawner's brood, which it counts in */
} lt_charge;

typedef struct lt_heap {
  lua_Alloc f; /* LuaJIT's allocator, wrapped */
  void *ud;
  size_t used;         /* bytes the state holds (exact) */
  size_t last_gc_used; /* used after the last collection forced here */
  lt_charge *cur;      /* charged now (NULL: the runtime's own work) */
  _Atomic size_t *pub; /* where `used` is published now and then, or NULL */
  uint32_t epoch;      /* collection cycles seen ending (see lt_mem_watch) */
  size_t base;         /* a borrowed state's size when attached: not counted */
  bool lent;           /* cur is lent (lt_mem_lend): never refuse, doom */
} lt_heap;

/* Message kinds (ty_msg.kind). */
enum {
  LT_MSG = 0,       /* tycho.send */
  LT_CALL = 1,      /* tycho.call: ref set, reply expected */
  LT_REPLY = 2,     /* answer to a call (values) */
  LT_REPLY_ERR = 3, /* the call failed: payload is the error token */
  /* 0xF0: LT_NUDGE (ltcp.h), wakes an acceptor; recv drops it. Kinds below
   * TY_MSG_SIGNAL that recv does not know are dropped, never returned. */
  LT_SIG_EXIT = TY_MSG_SIGNAL, /* a linked actor ended: payload = reason */
  LT_SIG_KILL,                 /* tycho.kill: payload = reason */
  LT_SIG_LINK,                 /* from links itself to the receiver */
  LT_SIG_UNLINK,
  LT_SIG_MONITOR, /* from monitors the receiver */
  /* core._fork_cancel: ends a fork as if it had returned; ref = the
   * sender's actor, which must be the fork's own (lproc.c) */
  LT_SIG_CANCEL,
};

/* Flags in ty_msg.aux. */
enum {
  /* An LT_MSG that is a ("DOWN", pid, reason) of a monitor, sent from the
   * pid that ended: the cluster gateway forgets the monitor when it passes. */
  LT_AUX_DOWN = 1,
  /* Set by the cluster gateway on a message whose receiver was gone when it
   * arrived from another node: a call to it answers "noproc", as a send to
   * a dead local pid does, not "dead". */
  LT_AUX_NOPROC = 2,
};

/* ty_msg.mark of a direct message (ldirect.c): between actors of one
 * worker, its payload names Lua values kept in the worker's state, not
 * encoded bytes. */
#define LT_MARK_DIRECT 1u

/* What a suspended actor waits for. */
/* LT_W_FULL: yielded after a send refused by a full mailbox, so that the
 * receiver may drain it; resumes with nil, "full". */
enum {
  LT_W_NONE = 0,
  LT_W_RECV,
  LT_W_CALL,
  LT_W_SLEEP,
  LT_W_YIELD,
  LT_W_EXT,
  LT_W_FULL,
  LT_W_SERVE /* a tycho.server between messages: no coroutine (lserve.c) */
};

typedef struct lt_actor lt_actor;

/* A wait owned by another module (I/O): after a wake or the timeout, ext_wake
 * pushes the results of the yielded function on co and returns how many, or
 * re-arms its wait (ty_actor_wait) and returns -1 to keep waiting. It may
 * also run with nothing completed and timed_out false (a signal such as a
 * monitor or link woke the actor): that case must re-arm, keeping the
 * deadline (la->deadline_ns). */
typedef int (*lt_ext_wake_fn)(lua_State *co, ty_actor *a, lt_actor *la,
                              bool timed_out);

/* Something an actor owns (a socket): closed when the actor ends, on its
 * worker. Kept in a list on the actor. */
typedef struct lt_res {
  struct lt_res *next, *prev;
  void (*close)(struct lt_res *r);
} lt_res;

/* A call received and not answered yet. `delegated`: handed to a
 * tycho.response() function, so tycho.reply no longer answers it. */
typedef struct lt_owed {
  ty_pid to;
  uint64_t ref;
  bool delegated;
} lt_owed;

typedef struct lt_pids {
  ty_pid *v;
  uint32_t n, cap;
} lt_pids;

/* What few actors use (forks, links, monitors, tycho.exit, I/O waits,
 * sockets, tracing, supervision): kept out of line, allocated the first time
 * something is written (lt_rare_get), so that an idle actor's record stays
 * small (docs/architecture.md, "Memory per actor"). Read it with
 * lt_rare_rd: an actor without one reads zeros. */
typedef struct lt_rare {
  char *origin;  /* forks and main scripts: where their function is */
  ty_pid ack_to; /* told when the first run is over (supervisor) */
  /* Forks live on their actor's worker, so plain pointers are safe there:
   * a fork points at its actor while the actor lives (the actor clears it
   * when it ends), and the actor lists its forks. */
  lt_actor *parent_la;
  lt_actor *forks, *fork_next, *fork_prev;
  lt_pids links, monitors;
  char *exit_reason; /* set by tycho.exit: the actor is ending */
  size_t exit_len;
  lt_ext_wake_fn ext_wake;                       /* LT_W_EXT */
  void (*ext_cancel)(ty_actor *a, lt_actor *la); /* ends a pending ext op */
  void *ext_ctx;
  lt_res *resources; /* owned, closed at the end */
  ty_pid trace_to;   /* the tracer of tycho.trace (0: the log) */
  /* A server handler's error, reported to dispatch at the next run
   * (lserve.c); LUA_NOREF for none. */
  int srv_err;
} lt_rare;

/* Hot fields only (an idle actor costs this record): what every resume,
 * wait, send and call touches. The rest is in lt_rare. */
struct lt_actor {
  lua_State *co;
  lt_fn *fn;  /* LT_FN_BYTECODE / LT_FN_MODULE: the shared function */
  int co_ref; /* anchors co in the registry (LUA_NOREF before start) */
  uint8_t fn_kind;
  uint8_t wait;
  bool trap_exit;
  bool is_main;
  bool end_actor;  /* a fork called tycho.exit: its actor ends too */
  bool supervised; /* a supervisor's child: its supervisor stops it */
  bool finished;   /* its end was reported (monitors, links, callers) */
  /* What tycho.trace follows (LT_TR_* bits of lobserve.h, 0: nothing):
   * tested by every send, recv, call and spawn, so it sits here, in the
   * record's first line (it fills padding). */
  uint8_t trace;
  bool srv_call; /* a server's handler runs for a call (lserve.c) */
  /* The watchdog (lpreempt.c): the kind of stop the hook applied in this
   * resume, and `frozen`: stopped for a kill, it never runs Lua again and
   * waits for that kill. */
  uint8_t preempted;
  bool frozen;
  bool co_returned; /* its coroutine returned: it may be pooled (lserve.c) */
  char *spawn;      /* encoded args (LT_FN_FILE: path, args) until the start */
  uint32_t spawn_len;
  int fn_ref; /* LT_FN_REF: registry ref of a table {n=, f, args...};
               * LT_FN_HERE: of the function (args in spawn) */
  uint64_t call_ref;
  ty_pid call_to;       /* callee of the call waited for (0: not an actor) */
  uint64_t deadline_ns; /* of the current wait, 0 for none */
  /* The watchdog's flag word of the worker (set at the start). */
  const _Atomic uint32_t *flag;
  ty_pid pid;              /* this actor's (or fork's) own pid, once known */
  ty_pid parent;           /* a fork's actor (0 for actors) */
  lt_owed *owed;           /* calls received and not answered yet (a stack) */
  uint16_t nowed, capowed; /* at most MAX_OWED (lactor.c) */
  uint32_t resumes;        /* (lobserve.h) */
  ty_msg *inflight; /* a message taken from the mailbox and not yet decoded:
                      * freed by whoever catches a failure of the decode */
  lt_charge charge; /* memory charged to the actor (a fork's goes to its
                      * actor's: lt_charge_of) */
  /* Observation (lobserve.h): the sampled ticks of its resumes. */
  uint64_t ticks;
  /* A tycho.server (lserve.c): registry refs of its dispatch function and
   * its state (LUA_NOREF for other actors). Between messages it has no
   * coroutine: co is NULL and wait is LT_W_SERVE. */
  int srv_fn, srv_state;
  lt_rare *rare; /* NULL until something rare is written */
};

extern const lt_rare lt_rare_none;
/* For reading: zeros when la has no rare record. */
static inline const lt_rare *lt_rare_rd(const lt_actor *la) {
  return la->rare ? la->rare : &lt_rare_none;
}

/* The charge of la's family: the actor's own (forks share it). */
static inline lt_charge *lt_charge_of(lt_actor *la) {
  lt_actor *p = la->rare ? la->rare->parent_la : NULL;
  return p ? &p->charge : &la->charge;
}

/* What tycho.trace follows: bits of lt_actor.trace. */
enum {
  LT_TR_SEND = 1,
  LT_TR_RECV = 2,
  LT_TR_CALL = 4,
  LT_TR_SPAWN = 8,
  LT_TR_EXIT = 16,
};

#define LT_COPOOL 64 /* returned coroutines kept per worker (lserve.c) */

typedef struct lt_worker {
  lua_State *L;
  ty_worker *w;
  /* The context (the runtime's ud, given at the worker's start) and its
   * upcalls, kept here so that a resume reaches them in one load. */
  lt_ctx *ctx;
  const struct lt_life_ops *life;
  /* The watchdog (lpreempt.c): its flag word (ty_worker_flag), and the
   * resume whose allocations fail (0: none; set under the watchdog lock)
   * while the worker runs Lua code (in_lua, the owner's). */
  const _Atomic uint32_t *flag;
  _Atomic uint64_t deny;
  bool in_lua;
  char where[192];   /* where the last preempted code was */
  ty__buf buf;       /* the encode buffer of this worker's sends */
  int fncache_ref;   /* registry: bytecode string -> function */
  int dumpcache_ref; /* registry, weak keys: function -> bytecode */
  uint64_t next_ref;
  uint64_t paths_version; /* of the package paths this state has */
  lt_heap heap; /* the accounting of its memory (lmem.h), under lt_alloc */
  /* L is the caller's of tycho.run (lt_state_borrow), given back at exit
   * with what the run changed in it undone: its hook, its collector's
   * pause, its package paths (and its allocator, in heap). */
  bool borrowed;
  lua_Hook hook;
  int hook_mask, hook_count, gc_pause;
  char *path, *cpath;     /* its package paths (the run may publish others) */
  _Atomic uint64_t *busy; /* ticks spent in resumes (lobserve.h) */
  uint32_t sample_left;   /* resumes until the next timed one (lobserve.h) */
  uint32_t sample_rng;
  /* Coroutines that returned, kept for the next message of a tycho.server
   * (lserve.c): the thread and its registry ref. */
  struct {
    lua_State *co;
    int ref;
  } copool[LT_COPOOL];
  int ncopool;
  unsigned id; /* the worker's index (ty_worker_id) */
  /* The coroutine on whose stack the values of direct messages wait
   * (ldirect.c) until their receivers take them, its registry ref, and
   * its free slots below the top. */
  lua_State *holder;
  int direct_ref;
  uint32_t direct_live; /* slots in use (tycho.core._direct_count) */
  int *free_slots;
  uint32_t nfree, capfree;
} lt_worker;

/* The calling worker's, or NULL outside the workers. */
extern _Thread_local lt_worker *lt_tls_worker;
static inline lt_worker *lt_worker_get(void) { return lt_tls_worker; }

#endif
