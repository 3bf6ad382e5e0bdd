/*
 * lactor.h - a Lua actor: a coroutine in its worker's Lua state, plus what
 * the binding keeps about it (links, monitors, calls owed, forks, resources
 * it owns). lactor.c starts and resumes it; lexit.c ends it.
 */
#ifndef TY_LACTOR_H
#define TY_LACTOR_H

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "codec.h"
#include "lfn.h"
#include "lmem.h"
#include "sched/ty.h"

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

/* la's rare record, allocated (zeroed) on first use; on la's worker, or
 * before la is visible to anyone else. Not with the worker's watchdog lock
 * held: lt_rare_new takes it, since the watchdog reads links and monitors
 * (lpreempt.c). */
lt_rare *lt_rare_new(lt_actor *la);
static inline lt_rare *lt_rare_get(lt_actor *la) {
  return la->rare ? la->rare : lt_rare_new(la);
}
/* For reading: zeros when la has no rare record. */
extern const lt_rare lt_rare_none;
static inline const lt_rare *lt_rare_rd(const lt_actor *la) {
  return la->rare ? la->rare : &lt_rare_none;
}

/* The charge of la's family: the actor's own (forks share it). */
static inline lt_charge *lt_charge_of(lt_actor *la) {
  lt_actor *p = la->rare ? la->rare->parent_la : NULL;
  return p ? &p->charge : &la->charge;
}

/* ---- lactor.c ----------------------------------------------------------- */

extern const ty_actor_ops lt_ops;
lt_actor *lt_actor_new(void); /* NULL when memory runs out */
/* Gives la its encoded spawn arguments (ty__alloc'd; la frees them). */
void lt_actor_set_spawn(lt_actor *la, char *args, size_t len);
void lt_actor_free(lt_actor *la);
void lt_pids_add(lt_pids *p, ty_pid pid);
bool lt_pids_remove(lt_pids *p, ty_pid pid);
void lt_owed_push(lt_actor *la, ty_pid to, uint64_t ref);
bool lt_owed_remove(lt_actor *la, ty_pid to, uint64_t ref);
/* Index of the most recent call that tycho.reply may answer, or -1. */
int lt_owed_last(const lt_actor *la);
/* Sends a reply (values at L[first..first+n)) or an error token. Raises
 * (fname in the message) when the values cannot be copied. Returns 0 (sent,
 * or its caller is gone), or LT_REPLY_NOMEM / LT_REPLY_LOST when memory
 * for it ran out (lactor.c, reply_nomem). */
enum { LT_REPLY_NOMEM = 1, LT_REPLY_LOST = 2 };
/* A worker's encoding buffer gives back what one big message grew it to
 * (past LT_BUF_KEEP): memory max_memory does not count, kept per worker
 * for the process's life otherwise (README, "Memory budgets"). */
#define LT_BUF_KEEP (1u << 20)
void lt_buf_trim(ty__buf *b);
int lt_send_reply(lua_State *L, ty_pid to, uint64_t ref, int first, int n,
                  const char *fname);
void lt_send_reply_err(ty_pid to, uint64_t ref, const char *token);
/* Sends a message whose payload is raw bytes. */
int lt_send_raw(ty_pid to, uint32_t kind, uint64_t ref, const void *data,
                size_t len);
/* The same with an explicit sender (a signal sent on behalf of another pid:
 * the dead actor an undeliverable link came back from). */
int lt_send_raw_from(ty_pid from, ty_pid to, uint32_t kind, uint64_t ref,
                     const void *data, size_t len);
/* Encodes the n values on top of L's stack, pops them and sends them as an
 * ordinary message (nothing is sent when they cannot be copied). */
void lt_send_values(lua_State *L, int n, ty_pid to);
/* Sends ("DOWN", target, reason) to the monitor `watcher`, from target. */
void lt_send_down(ty_pid watcher, ty_pid target, const char *reason,
                  size_t len);
/* The actor of the family (an actor and its forks) of la whose pid is pid,
 * or NULL. */
lt_actor *lt_family_find(lt_actor *la, ty_pid pid);
/* Adds a new fork to the actor it belongs to. */
void lt_fork_attach(lt_actor *parent, lt_actor *fork);
void lt_fork_detach(lt_actor *fork);
/* The actor is ending: its forks no longer point at it. Returns the list. */
lt_actor *lt_forks_orphan(lt_actor *la);
/* Takes the first ordinary message (send or call) out of a's mailbox,
 * leaving signals in place and dropping late replies; NULL if none. */
ty_msg *lt_take_msg(ty_actor *a);
/* Decodes m onto L and frees it (la->inflight covers a decode that
 * raises); returns the count of values pushed. */
int lt_decode_msg(lua_State *L, lt_actor *la, ty_msg *m);
/* Resources an actor owns (lt_res_remove is safe to call twice). */
void lt_res_add(lt_actor *la, lt_res *r);
void lt_res_remove(lt_actor *la, lt_res *r);

/* ---- ldirect.c ---------------------------------------------------------- */

/* Creates the coroutine that holds the worker's direct values (*holder);
 * returns its registry ref. */
int lt_direct_store(lua_State *L, lua_State **holder);
/* A message carrying copies of the n values at L[first..] for `to`, when
 * `to` is an actor of this worker: the copy has the codec's semantics and
 * is charged to the receiver. NULL when it cannot go direct (another
 * worker or node, a value the copy refuses, memory): the caller then
 * encodes, which gives the codec's error or moves the handles. */
ty_msg *lt_direct_copy(lua_State *L, ty_pid to, int first, int n);
/* Strings at least this long are shared rather than copied twice. */
#define LT_DIRECT_STR_MIN 256
/* lt_direct_copy when it is worth it: scalars and short strings encode and
 * decode in less time than a slot costs (bench/results-direct.md), so only
 * tables and long strings go direct. Inline: the usual message is a few
 * scalars, and this is on the path of every send, call and reply. */
static inline ty_msg *lt_direct_new(lua_State *L, ty_pid to, int first, int n) {
  for (int i = first; i < first + n; i++) {
    int t = lua_type(L, i);
    if (t == LUA_TTABLE ||
        (t == LUA_TSTRING && lua_objlen(L, i) >= LT_DIRECT_STR_MIN))
      return lt_direct_copy(L, to, first, n);
  }
  return NULL;
}
/* Pushes a direct message's values onto L and returns how many; the
 * message no longer holds them. */
int lt_direct_push(lua_State *L, ty_msg *m);
static inline bool lt_msg_direct(const ty_msg *m) {
  return m->mark == LT_MARK_DIRECT;
}
/* Pushes m's values onto L (decoded, or handed over: ldirect.c) and
 * returns how many, or -1 with err for a malformed encoding. */
static inline int lt_msg_values(lua_State *L, ty_msg *m, char *err,
                                size_t errlen) {
  if (lt_msg_direct(m)) return lt_direct_push(L, m);
  return ty__codec_decode(L, m->data, m->len, err, errlen);
}
/* Direct messages whose values wait on this worker (specs look). */
int lt_direct_count(void);
/* A message that will never be read: its direct values, or the handles in
 * its encoding, are let go (on its worker, for a direct one). */
void lt_msg_release(ty_msg *m);

/* ---- lserve.c ----------------------------------------------------------- */

/* A server's coroutine returned (the actor function after tycho.core._serve,
 * or a handler): keeps what the handler returned, gives the coroutine back
 * to the worker's pool and waits for the next message (TY_WAIT / TY_YIELD). */
int lt_serve_idle(ty_actor *a, lt_actor *la);
/* A message may have come for an idle server: takes a coroutine and pushes
 * dispatch, state, is_call and the message's values; returns nargs, or -1
 * (nothing to run: the wait is re-armed). */
int lt_serve_wake(ty_actor *a, lt_actor *la);
/* A new actor coroutine (start) / an actor's coroutine is dropped (end):
 * counted per worker for tycho.stats().coroutines. */
void lt_co_count(int delta);
struct lt_worker;
/* An actor's coroutine at its start: from the worker's pool of returned
 * coroutines, else a new one (la->co, la->co_ref; counted). */
void lt_co_start(struct lt_worker *lw, lt_actor *la);
/* At an actor's destruction: a coroutine that returned goes back to the
 * pool (on its own worker), any other is unreferenced (uncounted). */
void lt_co_end(struct lt_worker *lw, lt_actor *la);
/* Drops la's server refs (at its destruction, on its worker). */
void lt_serve_drop(lua_State *L, lt_actor *la);

/* ---- lpreempt.c --------------------------------------------------------- */

/* ty_actor_ops.interrupt, .stuck and .peer_stuck. */
void lt_interrupt_op(ty_worker *w, int kind, uint64_t seq, void *ud);
void lt_stuck_op(ty_worker *w, ty_actor *running, ty_actor **dead, size_t n,
                 void *ud);
void lt_peer_stuck_op(ty_worker *w, void *ud);
/* After lua_resume, when the watchdog's flag was set or the hook fired:
 * what the worker does with the actor (TY_*), or -1 for the usual. */
int lt_after_preempt(ty_actor *a, lt_actor *la, int status);
/* An API call made while the watchdog wants the running code stopped:
 * raises (the running code cannot be yielded from here). */
void lt_preempt_guard(lua_State *L, ty_actor *a, lt_actor *la);
/* Where la's function comes from ("file.lua:12"), into buf. */
void lt_origin(const lt_actor *la, char *buf, size_t n);
/* Called on the watchdog thread for each worker declared stuck (the net
 * layer moves accepts off it). At most 4, registered once. */
void lt_on_stuck(void (*fn)(unsigned worker));

/* ---- lexit.c ------------------------------------------------------------ */

/* Pushes tostring(value at idx) and returns it; a __tostring metamethod runs
 * protected, and one that fails, yields or returns no string gives a fixed
 * text ("(error object is a table value; its __tostring failed)"). Raises
 * only when memory runs out. */
const char *lt_error_text(lua_State *L, int idx);
/* The runtime's own Lua work for actor a failed (an error from a __gc
 * metamethod, or out of memory; the error value is on top of L, status is
 * lua_pcall's): the actor ends, unless its end was already reported. */
int lt_runtime_error(ty_actor *a, lt_actor *la, lua_State *L, int status);
/* An allocation charged to la's family was refused (lmem.h): it ends with
 * reason "memory", whatever its coroutine did with the error. */
int lt_memory_death(ty_actor *a, lt_actor *la);

/* Ends the running actor: records the reason in la->exit_reason and raises
 * an error ("tycho.exit: reason"). A pcall may catch it, but the actor
 * still ends, at its next wait or its return. */
int lt_exit_now(lua_State *L, lt_actor *la, const char *reason, size_t len);
/* What lt_resume returns when the coroutine returned, failed, or called
 * tycho.exit; and when a signal ends it from outside (TY_DONE). */
int lt_on_return(ty_actor *a, lt_actor *la);
int lt_on_error(ty_actor *a, lt_actor *la);
int lt_exited(ty_actor *a, lt_actor *la);
int lt_die_now(ty_actor *a, lt_actor *la, const char *reason, size_t len);
/* A signal ends the actor: a kill (lt_die_now) or a fork's cancel. */
int lt_end_by_signal(ty_actor *a, lt_actor *la, ty_msg *m);
/* Handles every signal in the mailbox; returns a message that kills the
 * actor (the caller frees it), or NULL. */
ty_msg *lt_process_signals(ty_actor *a, lt_actor *la);
/* ty_actor_ops.destroy and .undeliverable. */
void lt_destroy(ty_actor *a, ty_worker *w, void *ud);
void lt_undeliverable(ty_msg *m, ty_worker *w, void *ud);

/* ---- ltimer.c ----------------------------------------------------------- */

/* ty_actor_ops.timer_due: resolves a timer's name (ty_msg.aux) to a pid. */
int lt_timer_due(ty_msg *m, ty_worker *w, void *ud);

#endif
