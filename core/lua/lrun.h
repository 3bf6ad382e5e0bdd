/*
 * lrun.h - tycho.config and tycho.run (lrun.c): the process-wide settings
 * and the runtime of the running tycho.run.
 */
#ifndef TY_LRUN_H
#define TY_LRUN_H

#include <lauxlib.h>
#include <lua.h>

#include "sched/ty.h"

/* Process-wide settings (tycho.config) and the running runtime. */
typedef struct lt_global {
  ty_runtime *rt;
  unsigned workers; /* 0: TYCHO_WORKERS, else one per CPU */
  int io;           /* TY_IO_* (-1: not set: TYCHO_IO, else auto) */
  double call_timeout;
  size_t max_message;
  double max_slice;          /* seconds a resume may run (0: no watchdog) */
  double stop_timeout;       /* seconds a stop waits for workers, the pool */
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
} lt_global;

extern lt_global lt_g;

/* The main actor's outcome, for tycho.run (any thread, once). */
void lt_main_done(bool ok, const char *data, size_t len);
/* Asks a running tycho.run to stop (async-signal-safe). */
void lt_interrupt(void);
/* Adds config, run, running, stats and the launcher's _run_file to the
 * table on top of L. */
void lt_open_run(lua_State *L);

#endif
