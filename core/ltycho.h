/*
 * ltycho.h - the Lua binding: one LuaJIT state per worker, an actor is a
 * coroutine in it. Shared between ltycho.c (the API functions), lactor.c
 * (the actor lifecycle: start, resume, exit signals) and lnames.c.
 */
#ifndef TY_LTYCHO_H
#define TY_LTYCHO_H

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "codec.h"
#include "ty.h"

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
  LT_SIG_MONITOR,              /* from monitors the receiver */
};

/* How an actor was given its function. */
enum { LT_FN_BYTECODE = 0, LT_FN_MODULE, LT_FN_FILE, LT_FN_REF };

/* What a suspended actor waits for. */
enum { LT_W_NONE = 0, LT_W_RECV, LT_W_CALL, LT_W_SLEEP, LT_W_YIELD, LT_W_EXT };

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

typedef struct lt_fn lt_fn;

struct lt_actor {
  lua_State *co;
  lt_fn *fn;       /* LT_FN_BYTECODE / LT_FN_MODULE: the shared function */
  int co_ref;  /* anchors co in the registry (LUA_NOREF before start) */
  uint8_t fn_kind;
  uint8_t wait;
  bool trap_exit;
  bool is_main;
  bool end_actor;  /* a fork called tycho.exit: its actor ends too */
  char *spawn;     /* encoded args (LT_FN_FILE: path, args) until the start */
  uint32_t spawn_len;
  int fn_ref;      /* LT_FN_REF: registry ref of a table {n=, f, args...} */
  uint64_t call_ref;
  uint64_t deadline_ns; /* of the current wait, 0 for none */
  ty_pid pid;           /* this actor's (or fork's) own pid, once known */
  ty_pid parent;        /* a fork's actor (0 for actors) */
  /* Forks live on their actor's worker, so plain pointers are safe there:
   * a fork points at its actor while the actor lives (the actor clears it
   * when it ends), and the actor lists its forks. */
  lt_actor *parent_la;
  lt_actor *forks, *fork_next, *fork_prev;
  lt_pids links, monitors;
  lt_owed *owed;        /* calls received and not answered yet (a stack) */
  uint32_t nowed, capowed;
  char *exit_reason;    /* set by tycho.exit: the actor is ending */
  size_t exit_len;
  lt_ext_wake_fn ext_wake; /* LT_W_EXT */
  void (*ext_cancel)(ty_actor *a, lt_actor *la); /* ends a pending ext op */
  void *ext_ctx;
  lt_res *resources;    /* owned, closed at the end */
};

typedef struct lt_worker {
  lua_State *L;
  ty__buf buf;
  int fncache_ref; /* registry: bytecode string -> function */
  int dumpcache_ref; /* registry, weak keys: function -> bytecode */
  uint64_t next_ref;
} lt_worker;

/* Process-wide settings (tycho.config) and the running runtime. */
typedef struct lt_global {
  ty_runtime *rt;
  unsigned workers;
  char *io;           /* "uring", "epoll", "auto" or NULL (TYCHO_IO, auto) */
  double call_timeout;
  size_t max_message;
  char *path, *cpath; /* package.path/cpath handed to worker states */
  int argc;
  char **argv;
  lua_CFunction opener; /* luaopen_tycho_core of this copy of the core */
} lt_global;

extern lt_global lt_g;

/* lactor.c */
/* Gives L the package paths captured by tycho.run and makes require
 * "tycho.core" answer with this copy of the core (worker and pool states). */
void lt_set_paths(lua_State *L);
extern const ty_actor_ops lt_ops;
lt_actor *lt_actor_new(void);
void lt_actor_free(lt_actor *la);
/* Ends the running actor: records the reason in la->exit_reason and raises
 * an error ("tycho.exit: reason"). A pcall may catch it, but the actor
 * still ends, at its next wait or its return. */
int lt_exit_now(lua_State *L, lt_actor *la, const char *reason, size_t len);
void lt_pids_add(lt_pids *p, ty_pid pid);
bool lt_pids_remove(lt_pids *p, ty_pid pid);
void lt_owed_push(lt_actor *la, ty_pid to, uint64_t ref);
bool lt_owed_remove(lt_actor *la, ty_pid to, uint64_t ref);
/* Index of the most recent call that tycho.reply may answer, or -1. */
int lt_owed_last(const lt_actor *la);
/* Sends a reply (values at L[first..first+n)) or an error token. Raises
 * (fname in the message) when the values cannot be copied. */
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
/* The actor of the family (an actor and its forks) of la whose pid is pid,
 * or NULL. */
lt_actor *lt_family_find(lt_actor *la, ty_pid pid);
/* Adds a new fork to the actor it belongs to. */
void lt_fork_attach(lt_actor *parent, lt_actor *fork);
/* Takes the first ordinary message (send or call) out of a's mailbox,
 * leaving signals in place and dropping late replies; NULL if none. */
ty_msg *lt_take_msg(ty_actor *a);
/* The main actor's outcome, for tycho.run. */
void lt_main_done(bool ok, const char *data, size_t len);

/* lfn.c: functions interned for spawning (see lfn.c). */
lt_fn *lt_fn_intern(int kind, const char *bytes, size_t len);
/* Pushes blob f's function on co, loading it on first use on `worker`;
 * returns 0, or -1 with an error message pushed. */
int lt_fn_push(lua_State *co, lt_fn *f, unsigned worker);
/* Frees every blob: after the runtime stopped. */
void lt_fn_clear(void);

/* lnames.c: the process-wide name table. */
int lt_names_register(const char *name, ty_pid pid); /* 0 / -EEXIST */
ty_pid lt_names_lookup(const char *name);
/* Forgets every name of pid (cheap when pid has none). */
void lt_names_drop_pid(ty_pid pid);
void lt_names_clear(void);
/* lnames.c: the reasons of recent deaths, per worker (for tycho.run). */
void lt_graves_open(unsigned workers);
void lt_graves_close(void);
/* On the actor's home worker, as it ends. */
void lt_grave_add(unsigned worker, ty_pid pid, const char *reason, size_t len);
/* A malloc'd copy of the reason pid ended with, or NULL (unknown, or
 * forgotten: then the answer is "noproc"). */
char *lt_grave_find(ty_pid pid, size_t *len);

/* ltycho.c */
lt_worker *lt_worker_get(void);
/* A fresh call reference, unique per worker. */
uint64_t lt_new_ref(void);
/* From a C API function: yield until a reply (LT_REPLY / LT_REPLY_ERR) with
 * `ref` arrives or timeout_ns passes (-1: never); the function's results are
 * then the reply's values, or nil + error token ("timeout" on timeout). */
int lt_yield_reply(lua_State *L, const char *fname, uint64_t ref,
                   int64_t timeout_ns);
/* From a C API function: yield in an LT_W_EXT wait. */
int lt_yield_ext(lua_State *L, const char *fname, lt_ext_wake_fn wake,
                 void *ctx, int64_t timeout_ns);
/* (The caller of lt_yield_ext sets la->ext_cancel itself, after the call
 * returns the yield; lt_res_remove must stay safe to call twice.) */
void lt_res_add(lt_actor *la, lt_res *r);
void lt_res_remove(lt_actor *la, lt_res *r);
/* Appends the encoded (bytecode, upvalue module map) of the function at idx
 * to out, as for tycho.spawn; raises tycho.<fname> errors. For lpool.c. */
int lt_push_function_payload(lua_State *L, int idx, const char *fname,
                             ty__buf *out);

/* lnet.c: releases the connections inside an encoded payload that will never
 * be decoded (its message reached nobody), so they close at once. */
void lt_net_discard(lua_State *L, const char *data, size_t len);

/* Sub-modules: each adds its fields to the tycho.core table on top of L. */
void lt_open_net(lua_State *L);  /* lnet.c: tcp, http support */
void lt_open_pool(lua_State *L); /* lpool.c: the blocking pool */
int luaopen_tycho_core(lua_State *L);

#endif
