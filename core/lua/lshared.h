/*
 * lshared.h - tycho.shared.table's C half (lshared.c) and the run's end,
 * which drops the run's tables.
 */
#ifndef TY_LSHARED_H
#define TY_LSHARED_H

#include <lua.h>

void lt_open_shared(lua_State *L);
/* The run has ended (lrun.c): its tables are emptied and forgotten. */
void lt_shared_run_end(void);
/* This thread's copy buffers go (a worker thread as it ends, lstate.c). */
void lt_shared_thread_end(void);

#endif
