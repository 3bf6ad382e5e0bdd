/*
 * lrun.h - tycho.config and tycho.run (lrun.c): the process-wide settings
 * and the runtime of the running tycho.run.
 */
#ifndef TY_LRUN_H
#define TY_LRUN_H

#include <lauxlib.h>
#include <lua.h>

#include "lctx.h"
#include "sched/ty.h"

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
