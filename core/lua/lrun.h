/*
 * lrun.h - tycho.config and tycho.run (lrun.c): the process-wide settings
 * and the runtime of the running tycho.run.
 */
#ifndef TY_LRUN_H
#define TY_LRUN_H

#include <lauxlib.h>
#include <lua.h>

#include "sched/ty.h"

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
typedef struct lt_global {
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
} lt_global;

extern lt_global lt_g;

/* The main actor's outcome, for tycho.run (any thread, once). */
void lt_main_done(bool ok, const char *data, size_t len);
/* Asks a running tycho.run to stop (async-signal-safe). */
void lt_interrupt(void);
/* Whether the graceful stop of the last run left actors running (or did
 * not end): the launcher then exits 1. */
bool lt_stop_failed(void);
/* SIGHUP under the launcher: a running tycho.run reloads the modules whose
 * files changed since (lua/tycho/launch.lua; async-signal-safe). */
void lt_hangup(void);
/* Adds config, run, running, stats and the launcher's _run_file to the
 * table on top of L. */
void lt_open_run(lua_State *L);

#endif
