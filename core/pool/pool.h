/*
 * pool.h - the blocking pool: elastic OS threads for work that blocks (file
 * I/O, name resolution, a C library that sleeps), so that no worker stalls.
 * No Lua inside: a job is a C callback; the Lua binding (lpool.c) builds
 * tycho.blocking on top of it.
 *
 * Shape (Tokio's blocking/pool.rs, minus its unbounded queue, #4955):
 *   - a submit hands the job straight to an idle thread when there is one
 *     (the most recently idle: the others may then time out and retire);
 *   - otherwise it starts a new thread for it, up to max_threads;
 *   - otherwise the job waits in a bounded FIFO, which threads drain as they
 *     finish; a full FIFO refuses the job (-EAGAIN) instead of growing;
 *   - a thread idle for keep_alive_ns retires.
 * A job waits in the FIFO only while every thread is busy, and a busy thread
 * looks at the FIFO before it goes idle, so a pool smaller than the work is
 * slower, never stuck (no cap-equals-workers deadlock, Tokio #2802): a job
 * never waits for another job.
 *
 * Each pool thread has a slot for the binding's per-thread state (its Lua
 * state); when the thread retires or the pool shuts down, the thread itself
 * hands the slot to config.thread_exit.
 *
 * Errors are negative errno values.
 */
#ifndef TY_POOL_H
#define TY_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/common.h"

typedef struct ty_pool ty_pool;
typedef struct ty_pool_job ty_pool_job;

/* A unit of work. The caller embeds it in its own struct (intrusive: the
 * pool allocates nothing per job) and keeps it alive until one of the two
 * callbacks gets it; from then on the callback owns it. */
struct ty_pool_job {
  ty__node node;                  /* the FIFO link; the pool's */
  void (*run)(ty_pool_job *j);    /* on a pool thread */
  void (*cancel)(ty_pool_job *j); /* instead of run, for a job still queued
                                    * at shutdown; NULL: nothing to do */
};

typedef struct ty_pool_config {
  unsigned max_threads;   /* >= 1; default 512 */
  uint32_t queue_cap;     /* jobs that may wait for a thread; default 4096 */
  uint64_t keep_alive_ns; /* idle time before a thread retires; default 10 s */
  size_t stack_size;      /* per thread; 0: the system's default */
  /* On the retiring thread, when its state slot is not NULL; may be NULL. */
  void (*thread_exit)(void *state, void *ud);
  void *ud;
} ty_pool_config;

typedef struct ty_pool_stats {
  uint64_t threads;   /* alive (busy + idle) */
  uint64_t idle;      /* waiting for a job */
  uint64_t queued;    /* jobs waiting for a thread */
  uint64_t completed; /* jobs run to the end, since the pool was created */
  uint64_t rejected;  /* submits refused because the queue was full */
} ty_pool_stats;

void ty_pool_config_init(ty_pool_config *c);

/* Creates a pool with no threads yet. -EINVAL for max_threads == 0. */
int ty_pool_new(const ty_pool_config *c, ty_pool **out);

/*
 * Runs j on a pool thread, soon. Returns 0 (the pool owns j), -EAGAIN when
 * every thread is busy and the queue is full, -ESHUTDOWN after shutdown, or
 * the error of pthread_create when no thread at all could be started (the
 * caller keeps j in every error case). Any thread, pool threads included;
 * never waits for a job.
 */
int ty_pool_submit(ty_pool *p, ty_pool_job *j);

/*
 * Refuses new jobs, cancels the queued ones (their cancel callback, on the
 * calling thread), waits for the running ones to finish and joins every
 * thread. Idempotent. Not from a pool thread of p (it would wait for itself).
 */
void ty_pool_shutdown(ty_pool *p);
/*
 * The same, but waits for running jobs only until deadline_ns (monotonic,
 * ty__now_ns): threads still running a job then are detached and left to
 * finish it; the pool's memory goes with the last of them. Returns how many
 * were left. A detached thread's job must not touch what its submitter
 * frees after the shutdown: it asks ty_pool_reply_begin first.
 */
int ty_pool_shutdown_until(ty_pool *p, uint64_t deadline_ns);
/* Shuts down if needed, then frees p (or leaves it to its detached
 * threads). */
void ty_pool_free(ty_pool *p);
/* On a pool thread, before a job hands its result to its submitter: false
 * when the pool was shut down and left this thread behind (the submitter
 * is gone; drop the result). On true, call ty_pool_reply_end after. */
bool ty_pool_reply_begin(void);
void ty_pool_reply_end(void);

/* Counters, readable from any thread at any time without the lock. Each
 * field is exact at some instant, not all at the same one. */
void ty_pool_stats_get(ty_pool *p, ty_pool_stats *out);

/* The calling pool thread's state slot (NULL at first, and on any thread
 * that is not a pool thread). */
void *ty_pool_state(void);
/* Sets it; on a thread that is not a pool thread it is never handed to
 * thread_exit, so only pool threads should call this. */
void ty_pool_set_state(void *state);
/* True on a pool thread (of any pool). */
bool ty_pool_on_thread(void);

#endif
