/*
 * test_io_poll.c - ty__io_poll (io.h), once per backend: a descriptor that
 * someone else reads (libpq's socket under tycho.pg). Not ready: no
 * callback; data arrives: POLLIN; writable at once: POLLOUT; a reader that
 * drained the socket meanwhile does not get a stale wake (epoll's edge was
 * seen, the data is gone); a cancel ends it with -ECANCELED; a read op and a
 * poll op for writing wait on one descriptor together.
 */
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "io/io.h"
#include "test.h"
#include "test_io.h"

typedef struct polled {
  ty__io_op op;
  int calls, res;
} polled;

static void polled_cb(ty__io_op *op, int res, const char *data) {
  (void)data;
  polled *p = op->ud;
  p->calls++;
  p->res = res;
}

static void polled_init(polled *p) {
  memset(p, 0, sizeof *p);
  p->op.cb = polled_cb;
  p->op.ud = p;
}

static int io_poll_ready(int kind) {
  harness h;
  CHECK_EQ(open_io(&h, kind, NULL), 0);
  int sv[2];
  CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0,
                      sv),
           0);
  polled in, out;
  polled_init(&in);
  polled_init(&out);
  /* Nothing to read: the op waits. */
  CHECK_EQ(ty__io_poll(h.io, &in.op, sv[0], POLLIN), 0);
  CHECK(!PUMP(h.io, in.calls > 0, 50));
  CHECK(ty__io_op_busy(&in.op));
  /* Writable at once, while the read side still waits. */
  CHECK_EQ(ty__io_poll(h.io, &out.op, sv[0], POLLOUT), 0);
  CHECK(PUMP(h.io, out.calls == 1, 5000));
  CHECK(out.res & POLLOUT);
  CHECK_EQ(in.calls, 0);
  /* Data arrives: POLLIN; the poll reads nothing itself. */
  CHECK_EQ(write(sv[1], "x", 1), 1);
  CHECK(PUMP(h.io, in.calls == 1, 5000));
  CHECK(in.res & POLLIN);
  CHECK(!ty__io_op_busy(&in.op));
  char c;
  CHECK_EQ(read(sv[0], &c, 1), 1);
  /* Drained by "the library": a new poll waits again, no stale wake. */
  CHECK_EQ(ty__io_poll(h.io, &in.op, sv[0], POLLIN), 0);
  CHECK(!PUMP(h.io, in.calls > 1, 50));
  /* A cancel ends it. */
  ty__io_cancel(h.io, &in.op);
  CHECK(PUMP(h.io, in.calls == 2, 5000));
  CHECK_EQ(in.res, -ECANCELED);
  /* The peer closes: readable (end of file). */
  CHECK_EQ(ty__io_poll(h.io, &in.op, sv[0], POLLIN | POLLOUT), 0);
  CHECK(PUMP(h.io, in.calls == 3, 5000)); /* writable at once */
  CHECK_EQ(ty__io_poll(h.io, &in.op, sv[0], POLLIN), 0);
  close(sv[1]);
  CHECK(PUMP(h.io, in.calls == 4, 5000));
  CHECK(in.res & (POLLIN | POLLHUP));
  CHECK_EQ(ty__io_poll(h.io, &in.op, -1, 0), -EINVAL);
  close(sv[0]);
  close_io(&h);
  return 0;
}
BOTH(io_poll_ready)
