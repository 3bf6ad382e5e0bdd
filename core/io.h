/*
 * io.h - the per-worker I/O backend contract (in the spirit of Redis ae.c:
 * one small interface, interchangeable implementations).
 *
 * Each worker owns one ty__io. The worker parks inside ty__io_wait (with its
 * next timer as the timeout) and is woken through its eventfd, which the
 * backend keeps armed (a read in the io_uring, or a registration in epoll).
 * Completions run their callbacks on the worker's thread, inside
 * ty__io_wait; a callback typically stores a result and calls
 * ty_actor_wake() on the actor that started the operation.
 */
#ifndef TY_IO_H
#define TY_IO_H

#include "ty.h"

typedef struct ty__io ty__io;

enum { TY_IO_AUTO = 0, TY_IO_URING = 1, TY_IO_EPOLL = 2 };

/* Creates the backend for worker w, which is woken through wake_fd.
 * kind TY_IO_AUTO picks io_uring when the kernel allows it (TYCHO_IO=epoll
 * in the environment forces epoll). Returns 0 or a negative errno. */
int ty__io_new(ty_worker *w, int wake_fd, int kind, ty__io **out);
void ty__io_free(ty__io *io);

/* Submits what is queued, then waits up to timeout_ns (-1: until woken; 0:
 * do not block) for completions or a wake, and runs the completions'
 * callbacks. Returns how many completions ran. With io_uring and
 * DEFER_TASKRUN this is also what makes the kernel post completions, so the
 * worker calls it with timeout 0 every `budget` polls. */
int ty__io_wait(ty__io *io, int64_t timeout_ns);

/* "io_uring" or "epoll". */
const char *ty__io_name(const ty__io *io);

#endif
