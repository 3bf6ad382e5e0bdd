/*
 * test_io.h - what the I/O backend tests (test_io*.c) share: a backend
 * driven from the test thread, a pump that runs it until a condition holds,
 * and BOTH(fn), which makes fn a test of each backend.
 */
#ifndef TY_TEST_IO_H
#define TY_TEST_IO_H

#include <stdbool.h>
#include <stdio.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "base/common.h"
#include "io/io.h"
#include "test.h"

/* A test of io_uring on a machine without it passes with a note. */
static inline bool skip(int kind) {
  if (kind != TY_IO_URING || ty__io_available(TY_IO_URING)) return false;
  fprintf(stderr, "skipped: io_uring is not available here\n");
  return true;
}

static inline double now_ms(void) { return ty__now_ns() / 1e6; }

/* Runs the backend until cond holds or ms pass; evaluates to cond. */
#define PUMP(io, cond, ms)                                                     \
  ({                                                                           \
    double end_ = now_ms() + (ms);                                             \
    while (!(cond) && now_ms() < end_) ty__io_wait((io), 5000000);             \
    (cond);                                                                    \
  })

typedef struct harness {
  ty__io *io;
  int efd;
} harness;

static inline int open_io(harness *h, int kind, const ty__io_opts *o) {
  h->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (h->efd < 0) return -1;
  int err = ty__io_new_ex(h->efd, kind, o, &h->io);
  if (err) return err;
  return ty__io_kind(h->io) == kind ? 0 : -1;
}

static inline void close_io(harness *h) {
  ty__io_free(h->io);
  close(h->efd);
}

#define BOTH(fn)                                                               \
  TEST_IMPL(fn##_uring) { return skip(TY_IO_URING) ? 0 : fn(TY_IO_URING); }    \
  TEST_IMPL(fn##_epoll) { return fn(TY_IO_EPOLL); }

#endif
