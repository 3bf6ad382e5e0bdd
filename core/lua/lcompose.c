/*
 * lcompose.c - the composition of the binding, at the top of core/lua:
 * what the scheduler calls (ty_actor_ops) and what the resume loop calls
 * in the floors above its own (lt_life_ops). Composed here, so that no
 * floor below names a function of a floor above it (docs/architecture.md,
 * "The floors of core/lua"); tycho.run (lrun.c) hands both to the runtime.
 */
#include "lcompose.h"
#include "lexit.h"
#include "lpreempt.h"
#include "lserve.h"
#include "lstate.h"
#include "ltimer.h"
#include "ltrace.h"

const ty_actor_ops lt_actor_ops_all = {
    .worker_init = lt_state_init,
    .worker_exit = lt_state_exit,
    .resume = lt_resume,
    .destroy = lt_destroy,
    .undeliverable = lt_undeliverable,
    .interrupt = lt_interrupt_op,
    .kill_as = lt_kill_as_op,
    .stuck = lt_stuck_op,
    .peer_stuck = lt_peer_stuck_op,
    .timer_due = lt_timer_due,
    .run = lt_worker_run,
};

const lt_life_ops lt_life_all = {
    .process_signals = lt_process_signals,
    .end_by_signal = lt_end_by_signal,
    .on_return = lt_on_return,
    .on_error = lt_on_error,
    .exited = lt_exited,
    .memory_death = lt_memory_death,
    .runtime_error = lt_runtime_error,
    .serve_idle = lt_serve_idle,
    .serve_wake = lt_serve_wake,
    .after_preempt = lt_after_preempt,
    .trace_in = lt_trace_in,
};
