/*
 * test_io_udp.c - datagrams through the I/O backends (ty__io_recvmsg,
 * ty__io_sendmsg), each test run once per backend: boundaries kept up to
 * the largest UDP datagram, the sender's address, truncation reported,
 * oversized datagrams refused, cancels, and a stream of datagrams that all
 * arrive in order.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "io/io.h"
#include "test.h"
#include "test_io.h"

#define MAX_DGRAM 65507 /* IPv4: 65535 - 20 (IP) - 8 (UDP) */

/* A UDP socket bound to 127.0.0.1 at an ephemeral port. */
static int udp_any(struct sockaddr_in *a) {
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  memset(a, 0, sizeof *a);
  a->sin_family = AF_INET;
  a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof *a;
  if (fd < 0 || bind(fd, (struct sockaddr *)a, sizeof *a) ||
      getsockname(fd, (struct sockaddr *)a, &len))
    return -1;
  int big = 4 << 20; /* room for a burst (the kernel caps it) */
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
  return fd;
}

/* One direction of datagrams: an op, its header, a buffer, the result. */
typedef struct dgram {
  ty__io_op op;
  struct msghdr msg;
  struct iovec iov;
  struct sockaddr_in peer;
  char *buf;
  size_t cap;
  int res, calls;
  bool ended;
} dgram;

static void dgram_cb(ty__io_op *op, int res, const char *data) {
  dgram *d = op->ud;
  (void)data;
  d->calls++;
  d->res = res;
  d->ended = !ty__io_op_busy(op);
}

static dgram *dgram_new(size_t cap) {
  dgram *d = calloc(1, sizeof *d);
  d->op.cb = dgram_cb;
  d->op.ud = d;
  d->cap = cap;
  d->buf = malloc(cap ? cap : 1);
  return d;
}

static void dgram_free(dgram *d) {
  free(d->buf);
  free(d);
}

/* Arms a receive into d's whole buffer. */
static int arm_recv(harness *h, dgram *d, int fd) {
  memset(&d->msg, 0, sizeof d->msg);
  memset(&d->peer, 0, sizeof d->peer);
  d->iov = (struct iovec){d->buf, d->cap};
  d->msg.msg_name = &d->peer;
  d->msg.msg_namelen = sizeof d->peer;
  d->msg.msg_iov = &d->iov;
  d->msg.msg_iovlen = 1;
  d->ended = false;
  return ty__io_recvmsg(h->io, &d->op, fd, &d->msg);
}

/* Arms a send of d->buf[0..len) to `to`. */
static int arm_send(harness *h, dgram *d, int fd, size_t len,
                    struct sockaddr_in *to) {
  memset(&d->msg, 0, sizeof d->msg);
  d->peer = *to;
  d->iov = (struct iovec){d->buf, len};
  d->msg.msg_name = &d->peer;
  d->msg.msg_namelen = sizeof d->peer;
  d->msg.msg_iov = &d->iov;
  d->msg.msg_iovlen = 1;
  d->ended = false;
  return ty__io_sendmsg(h->io, &d->op, fd, &d->msg);
}

static void fill(char *p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) p[i] = (char)(seed * 31 + i * 7 + (i >> 8));
}

/* ---- boundaries, addresses, truncation, size limit, cancel -------------- */

static int io_udp(int kind) {
  harness h;
  CHECK_EQ(open_io(&h, kind, NULL), 0);
  struct sockaddr_in aa, ba;
  int a = udp_any(&aa), b = udp_any(&ba);
  CHECK(a >= 0 && b >= 0);
  dgram *rx = dgram_new(65536), *tx = dgram_new(65536);
  /* A receive armed before anything was sent completes on arrival, with
   * the sender's address. */
  CHECK_EQ(arm_recv(&h, rx, b), 0);
  CHECK_EQ(arm_recv(&h, rx, b), -EBUSY);
  CHECK(!PUMP(h.io, rx->ended, 30));
  static const size_t sizes[] = {0, 1, 100, 1472, 9000, 65000, MAX_DGRAM};
  for (size_t i = 0; i < ty__countof(sizes); i++) {
    size_t n = sizes[i];
    fill(tx->buf, n, (unsigned)i);
    if (i) CHECK_EQ(arm_recv(&h, rx, b), 0);
    CHECK_EQ(arm_send(&h, tx, a, n, &ba), 0);
    CHECK(PUMP(h.io, tx->ended && rx->ended, 5000));
    CHECK_EQ(tx->res, (int)n);
    CHECK_EQ(rx->res, (int)n); /* whole, and only that one */
    CHECK_EQ(rx->calls, 1);
    rx->calls = 0;
    CHECK(!(rx->msg.msg_flags & MSG_TRUNC));
    CHECK(memcmp(rx->buf, tx->buf, n) == 0);
    CHECK_EQ(rx->msg.msg_namelen, sizeof(struct sockaddr_in));
    CHECK_EQ(rx->peer.sin_port, aa.sin_port);
    CHECK_EQ(rx->peer.sin_addr.s_addr, htonl(INADDR_LOOPBACK));
  }
  /* Two datagrams queued before the receives: two receives, two wholes. */
  fill(tx->buf, 300, 9);
  CHECK_EQ(sendto(a, tx->buf, 200, 0, (struct sockaddr *)&ba, sizeof ba), 200);
  CHECK_EQ(sendto(a, tx->buf + 200, 100, 0, (struct sockaddr *)&ba, sizeof ba),
           100);
  usleep(10000);
  CHECK_EQ(arm_recv(&h, rx, b), 0);
  CHECK(PUMP(h.io, rx->ended, 5000));
  CHECK(rx->res == 200 && memcmp(rx->buf, tx->buf, 200) == 0);
  CHECK_EQ(arm_recv(&h, rx, b), 0);
  CHECK(PUMP(h.io, rx->ended, 5000));
  CHECK(rx->res == 100 && memcmp(rx->buf, tx->buf + 200, 100) == 0);
  /* A datagram longer than the buffer: its head, flagged MSG_TRUNC. */
  dgram *small = dgram_new(10);
  CHECK_EQ(arm_recv(&h, small, b), 0);
  CHECK_EQ(arm_send(&h, tx, a, 100, &ba), 0);
  CHECK(PUMP(h.io, small->ended, 5000));
  CHECK_EQ(small->res, 10);
  CHECK(small->msg.msg_flags & MSG_TRUNC);
  CHECK(memcmp(small->buf, tx->buf, 10) == 0);
  /* Larger than UDP over IPv4 carries: refused, nothing arrives. */
  free(tx->buf);
  tx->buf = malloc(MAX_DGRAM + 1);
  CHECK_EQ(arm_send(&h, tx, a, MAX_DGRAM + 1, &ba), 0);
  CHECK(PUMP(h.io, tx->ended, 5000));
  CHECK_EQ(tx->res, -EMSGSIZE);
  /* A receive that nothing answers ends with -ECANCELED when cancelled. */
  CHECK_EQ(arm_recv(&h, rx, b), 0);
  CHECK(!PUMP(h.io, rx->ended, 20));
  ty__io_cancel(h.io, &rx->op);
  CHECK(PUMP(h.io, rx->ended, 5000));
  CHECK_EQ(rx->res, -ECANCELED);
  /* ... and the socket still works afterwards. */
  CHECK_EQ(arm_recv(&h, rx, b), 0);
  CHECK_EQ(sendto(a, "x", 1, 0, (struct sockaddr *)&ba, sizeof ba), 1);
  CHECK(PUMP(h.io, rx->ended, 5000));
  CHECK_EQ(rx->res, 1);
  ty__io_close(h.io, a);
  ty__io_close(h.io, b);
  dgram_free(rx);
  dgram_free(tx);
  dgram_free(small);
  close_io(&h);
  return 0;
}
BOTH(io_udp)

/* ---- a stream: every datagram arrives, whole and in order --------------- */

enum { WINDOW = 32 };

static int io_udp_stream(int kind) {
  harness h;
  CHECK_EQ(open_io(&h, kind, NULL), 0);
  struct sockaddr_in aa, ba;
  int a = udp_any(&aa), b = udp_any(&ba);
  CHECK(a >= 0 && b >= 0);
  long n = test_scaled(20000, 2000);
  dgram *rx = dgram_new(65536), *tx = dgram_new(2048);
  long sent = 0, got = 0;
  CHECK_EQ(arm_recv(&h, rx, b), 0);
  double end = now_ms() + 20000;
  while (got < n && now_ms() < end) {
    /* Keep a window in flight: the receive buffer never overflows. */
    if (!ty__io_op_busy(&tx->op) && sent < n && sent - got < WINDOW) {
      size_t len = 8 + (size_t)(sent % 1000);
      memcpy(tx->buf, &sent, sizeof sent);
      fill(tx->buf + 8, len - 8, (unsigned)sent);
      CHECK_EQ(arm_send(&h, tx, a, len, &ba), 0);
      sent++;
    }
    ty__io_wait(h.io,
                ty__io_op_busy(&tx->op) || sent - got >= WINDOW ? 1000000 : 0);
    if (tx->ended) {
      CHECK(tx->res > 0);
      tx->ended = false;
    }
    if (rx->ended) {
      long seq;
      CHECK(rx->res >= 8);
      memcpy(&seq, rx->buf, sizeof seq);
      CHECK_EQ(seq, got); /* loopback keeps the order */
      CHECK_EQ(rx->res, 8 + seq % 1000);
      char want[1008];
      fill(want, (size_t)rx->res - 8, (unsigned)seq);
      CHECK(memcmp(rx->buf + 8, want, (size_t)rx->res - 8) == 0);
      got++;
      if (got < n) CHECK_EQ(arm_recv(&h, rx, b), 0);
    }
  }
  CHECK_EQ(got, n);
  ty__io_settle(h.io, &tx->op);
  ty__io_close(h.io, a);
  ty__io_close(h.io, b);
  dgram_free(rx);
  dgram_free(tx);
  close_io(&h);
  return 0;
}
BOTH(io_udp_stream)
