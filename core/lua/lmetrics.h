/*
 * lmetrics.h - tycho.metrics' C half (lmetrics.c).
 */
#ifndef TY_LMETRICS_H
#define TY_LMETRICS_H

#include <lua.h>

void lt_open_metrics(lua_State *L);
/* The run has ended (lrun.c): its metrics are forgotten. */
void lt_metrics_run_end(void);

#endif
