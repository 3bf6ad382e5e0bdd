/*
 * ltrace.h - tycho.trace's events (ltrace.c), in the floor above life: the
 * resume loop reaches lt_trace_in through lt_life_ops.
 */
#ifndef TY_LTRACE_H
#define TY_LTRACE_H

#include "lactor.h"

/* Trace events of a traced actor (la->trace has the bit; the caller tested
 * it). Out: a send or call to `to` (or a spawn of `to`) with the values at
 * L[first..first+n). In: a message from `from`, values on top of L (n). */
/* Cold: the hot paths that call them keep their code and registers for
 * the untraced case. */
__attribute__((cold)) void lt_trace_out(lua_State *L, lt_actor *la, int ev,
                                        ty_pid to, int first, int n);
__attribute__((cold)) void lt_trace_in(lua_State *L, lt_actor *la, ty_pid from,
                                       int n);
__attribute__((cold)) void lt_trace_exit(lt_actor *la, const char *reason,
                                         size_t len);

#endif
