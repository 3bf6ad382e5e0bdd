/*
 * lobserve.h - observing a running node (lobserve.c; tracing is ltrace.h):
 * what the actors cost (resumes, CPU ticks), per-worker snapshots for
 * tycho.processes, tracebacks. docs/architecture.md, "Observing a running
 * node".
 */
#ifndef TY_LOBSERVE_H
#define TY_LOBSERVE_H

#include <stdatomic.h>
#include <stdint.h>

#include "lactor.h"
#include "ltick.h"
#include "ltrace.h"

uint64_t lt_ticks_ns(uint64_t ticks);

/* Adds the observer's functions (_obs_*, _trace_set) to the table on top
 * of L. */
void lt_open_observe(lua_State *L);

#endif
