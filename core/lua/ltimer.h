/*
 * ltimer.h - tycho.send_after, interval and now (ltimer.c), API floor.
 */
#ifndef TY_LTIMER_H
#define TY_LTIMER_H

#include "lactor.h"

/* ty_actor_ops.timer_due: resolves a timer's name (ty_msg.aux) to a pid. */
int lt_timer_due(ty_msg *m, ty_worker *w, void *ud);

/* Adds send_after, interval and their kin to the table on top of L. */
void lt_open_timer(lua_State *L);
/* tycho.now(): seconds, virtual under tycho.test.clock. */
double lt_now_s(void);

#endif
