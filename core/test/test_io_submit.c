/*
 * test_io_submit.c - ty__io_submit (io.h), once per backend: on io_uring a
 * queued send reaches the peer inside the submit, before any wait (what
 * write-behind's close relies on, core/net/ltcp_write.c); the callback
 * still comes only from ty__io_wait; a submit with nothing queued makes no
 * system call; on epoll it does nothing and the send goes on as before.
 */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "io/io.h"
#include "test.h"
#include "test_io.h"

typedef struct sent {
  ty__io_op op;
  int calls, res;
} sent;

static void sent_cb(ty__io_op *op, int res, const char *data) {
  (void)data;
  sent *s = op->ud;
  s->calls++;
  s->res = res;
}

static int io_submit_send(int kind) {
  harness h;
  CHECK_EQ(open_io(&h, kind, NULL), 0);
  int sv[2];
  CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0,
                      sv),
           0);
  ty__io_stats st0, st1;
  ty__io_stats_get(h.io, &st0);
  ty__io_submit(h.io); /* nothing queued */
  ty__io_stats_get(h.io, &st1);
  CHECK_EQ(st1.enters, st0.enters);
  sent s = {.op = {.cb = sent_cb}};
  s.op.ud = &s;
  CHECK_EQ(ty__io_send(h.io, &s.op, sv[0], "hello", 5), 0);
  ty__io_submit(h.io);
  CHECK_EQ(s.calls, 0); /* callbacks only from ty__io_wait */
  char buf[16];
  ssize_t n = recv(sv[1], buf, sizeof buf, MSG_DONTWAIT);
  if (kind == TY_IO_URING) {
    CHECK_EQ(n, 5); /* the send ran inside the submit */
    CHECK(memcmp(buf, "hello", 5) == 0);
  }
  CHECK(PUMP(h.io, s.calls == 1, 5000));
  CHECK_EQ(s.res, 5);
  if (n < 0) { /* epoll may send from the wait */
    CHECK_EQ(recv(sv[1], buf, sizeof buf, MSG_DONTWAIT), 5);
    CHECK(memcmp(buf, "hello", 5) == 0);
  }
  CHECK(!ty__io_op_busy(&s.op));
  close(sv[0]);
  close(sv[1]);
  close_io(&h);
  return 0;
}
BOTH(io_submit_send)
