/*
 * io_poll.c - the minimal backend: no I/O operations yet, only the wake
 * eventfd, waited on with ppoll. Replaced by the io_uring and epoll backends.
 */
#include <errno.h>
#include <poll.h>
#include <time.h>

#include "io.h"

struct ty__io {
  int wake_fd;
};

int ty__io_new(ty_worker *w, int wake_fd, int kind, ty__io **out) {
  (void)w;
  (void)kind;
  ty__io *io = ty__xcalloc(1, sizeof *io);
  io->wake_fd = wake_fd;
  *out = io;
  return 0;
}

void ty__io_free(ty__io *io) { free(io); }

int ty__io_wait(ty__io *io, int64_t timeout_ns) {
  if (timeout_ns == 0) return 0;
  struct pollfd pfd = {.fd = io->wake_fd, .events = POLLIN};
  struct timespec ts, *tsp = NULL;
  if (timeout_ns > 0) {
    ts.tv_sec = timeout_ns / 1000000000;
    ts.tv_nsec = timeout_ns % 1000000000;
    tsp = &ts;
  }
  ppoll(&pfd, 1, tsp, NULL);
  return 0;
}

const char *ty__io_name(const ty__io *io) {
  (void)io;
  return "poll";
}
