/*
 * test_io.c - the I/O backends (io.h), each test run once per backend.
 *
 * Most tests drive a backend directly from the test thread (no workers):
 * they arm ops on real sockets on 127.0.0.1 and pump ty__io_wait until the
 * callbacks say what they expect. The io_runtime tests run the backends
 * inside real workers, with C actors that park in the backend and are woken
 * by completions and by the eventfd.
 *
 * A test of io_uring on a machine without it passes with a "skipped" note.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "io/io.h"
#include "sched/ty.h"
#include "test.h"
#include "test_io.h"

/* ---- helpers ----------------------------------------------------------- */

static int tcp_socket(void) {
  return socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
}

static struct sockaddr_in loopback(int port) {
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_port = htons((uint16_t)port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

/* A listening socket on 127.0.0.1 at an ephemeral port. */
static int listen_any(int *port) {
  int fd = tcp_socket();
  struct sockaddr_in a = loopback(0);
  socklen_t len = sizeof a;
  if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) || listen(fd, 1024) ||
      getsockname(fd, (struct sockaddr *)&a, &len))
    return -1;
  *port = ntohs(a.sin_port);
  return fd;
}

/* What an op saw: every callback, the data, the accepted descriptors. */
typedef struct rec {
  ty__io_op op;
  int calls, finals, final_res;
  bool ended;
  char *data;
  size_t len, cap;
  int fds[256];
  int nfds;
  bool accepting;
  ty__io *cancel_io; /* set: the callback cancels its own op */
} rec;

static void rec_cb(ty__io_op *op, int res, const char *data) {
  rec *r = op->ud;
  r->calls++;
  if (r->accepting && res >= 0) r->fds[r->nfds++] = res;
  if (data && res > 0) {
    if (r->len + (size_t)res > r->cap) {
      r->cap = (r->len + (size_t)res) * 2;
      r->data = realloc(r->data, r->cap);
    }
    memcpy(r->data + r->len, data, (size_t)res);
    r->len += (size_t)res;
  }
  if (!ty__io_op_busy(op)) {
    r->ended = true;
    r->finals++;
    r->final_res = res;
  } else if (r->cancel_io && ty__io_op_armed(op)) {
    ty__io_cancel(r->cancel_io, op);
  }
}

static rec *rec_new(void) {
  rec *r = calloc(1, sizeof *r);
  r->op.cb = rec_cb;
  r->op.ud = r;
  return r;
}

static void rec_free(rec *r) {
  free(r->data);
  free(r);
}

/* Connects n clients to port through the backend; fills cfd[]. */
static int connect_n(harness *h, int port, int n, int *cfd) {
  rec **c = calloc((size_t)n, sizeof *c);
  struct sockaddr_in a = loopback(port);
  for (int i = 0; i < n; i++) {
    c[i] = rec_new();
    cfd[i] = tcp_socket();
    CHECK_EQ(ty__io_connect(h->io, &c[i]->op, cfd[i], (struct sockaddr *)&a,
                            sizeof a),
             0);
  }
  int ok = 0;
  for (int i = 0; i < n; i++) {
    if (PUMP(h->io, c[i]->ended, 5000) && c[i]->final_res == 0) ok++;
    rec_free(c[i]);
  }
  free(c);
  return ok == n ? 0 : 1;
}

/* ---- waking and timeouts ----------------------------------------------- */

typedef struct waker {
  int fd;
  int delay_us;
  _Atomic int written;
} waker;

static void *waker_main(void *p) {
  waker *k = p;
  if (k->delay_us) usleep((useconds_t)k->delay_us);
  /* seq_cst: the test thread reads the flag after its wait returns. */
  atomic_store(&k->written, 1);
  uint64_t one = 1;
  ssize_t r = write(k->fd, &one, sizeof one);
  (void)r;
  return NULL;
}

/* Parks with no timeout while another thread writes the eventfd, as an
 * unparker does; the wait must return once the write lands. */
static int wake_once(harness *h, int delay_us) {
  waker k = {.fd = h->efd, .delay_us = delay_us};
  pthread_t t;
  pthread_create(&t, NULL, waker_main, &k);
  while (!atomic_load(&k.written)) ty__io_wait(h->io, -1);
  pthread_join(t, NULL);
  /* The written flag precedes the write: wait for the write itself. */
  ty__io_stats st;
  ty__io_stats_get(h->io, &st);
  uint64_t v;
  if (read(h->efd, &v, sizeof v) < 0) CHECK(errno == EAGAIN);
  return 0;
}

static int io_wake(int kind) {
  harness h;
  CHECK_EQ(open_io(&h, kind, NULL), 0);
  double t0 = now_ms();
  CHECK_EQ(ty__io_wait(h.io, 0), 0);
  CHECK(now_ms() - t0 < 1000); /* 0: at once (loaded machine) */
  t0 = now_ms();
  CHECK_EQ(ty__io_wait(h.io, 30000000), 0);
  double took = now_ms() - t0;
  CHECK(took >= 29.5 && took < 1000);
  t0 = now_ms();
  CHECK_EQ(wake_once(&h, 50000), 0);
  took = now_ms() - t0;
  CHECK(took >= 45 && took < 5000);
  for (int i = 0; i < 200; i++) CHECK_EQ(wake_once(&h, rand() % 2000), 0);
  /* A write before the wait begins must not be slept through. */
  uint64_t one = 1;
  CHECK_EQ(write(h.efd, &one, sizeof one), (ssize_t)sizeof one);
  t0 = now_ms();
  while (now_ms() - t0 < 3000) {
    ty__io_wait(h.io, 2000000000);
    ty__io_stats st;
    ty__io_stats_get(h.io, &st);
    uint64_t v;
    if (read(h.efd, &v, sizeof v) == (ssize_t)sizeof v || st.wakes) break;
  }
  CHECK(now_ms() - t0 < 1000);
  close_io(&h);
  return 0;
}
BOTH(io_wake)

/* ---- accept, connect, recv, send --------------------------------------- */

static int io_tcp(int kind) {
  harness h;
  CHECK_EQ(open_io(&h, kind, NULL), 0);
  int port, lfd = listen_any(&port);
  CHECK(lfd >= 0);
  rec *acc = rec_new();
  acc->accepting = true;
  CHECK_EQ(ty__io_accept(h.io, &acc->op, lfd), 0);
  CHECK_EQ(ty__io_accept(h.io, &acc->op, lfd), -EBUSY);
  enum { N = 8 };
  int cfd[N];
  CHECK_EQ(connect_n(&h, port, N, cfd), 0);
  CHECK(PUMP(h.io, acc->nfds == N, 5000));
  CHECK(ty__io_op_armed(&acc->op));
  /* Server side echoes what its recv gets; clients send then read back. */
  rec *srv[N], *cli[N], *snd[N];
  char msg[N][64];
  for (int i = 0; i < N; i++) {
    srv[i] = rec_new();
    cli[i] = rec_new();
    snd[i] = rec_new();
    CHECK_EQ(ty__io_recv(h.io, &srv[i]->op, acc->fds[i]), 0);
    CHECK_EQ(ty__io_recv(h.io, &cli[i]->op, cfd[i]), 0);
    snprintf(msg[i], sizeof msg[i], "hello from client %d", i);
    CHECK_EQ(ty__io_send(h.io, &snd[i]->op, cfd[i], msg[i], strlen(msg[i])), 0);
  }
  for (int i = 0; i < N; i++) {
    size_t want = strlen(msg[i]);
    CHECK(PUMP(h.io, srv[i]->len == want, 5000));
    CHECK(snd[i]->ended && snd[i]->final_res == (int)want);
    snd[i]->ended = false;
    CHECK_EQ(ty__io_send(h.io, &snd[i]->op, acc->fds[i], srv[i]->data, want),
             0);
  }
  for (int i = 0; i < N; i++) {
    size_t want = strlen(msg[i]);
    CHECK(PUMP(h.io, cli[i]->len == want, 5000));
    CHECK(memcmp(cli[i]->data, msg[i], want) == 0);
    CHECK(ty__io_op_armed(&cli[i]->op));
  }
  /* A client's close is the server's end of file: a final res 0. */
  for (int i = 0; i < N; i++) {
    ty__io_settle(h.io, &cli[i]->op);
    CHECK(cli[i]->ended && cli[i]->finals == 1);
    CHECK_EQ(ty__io_close(h.io, cfd[i]), 0);
    CHECK(PUMP(h.io, srv[i]->ended, 5000));
    CHECK_EQ(srv[i]->final_res, 0);
    CHECK_EQ(ty__io_close(h.io, acc->fds[i]), 0);
    rec_free(srv[i]);
    rec_free(cli[i]);
    rec_free(snd[i]);
  }
  /* Data and the end of file, both there before the recv is armed: the
   * end must still come (epoll: one edge announced both). */
  int late_c;
  CHECK_EQ(connect_n(&h, port, 1, &late_c), 0);
  CHECK(PUMP(h.io, acc->nfds == N + 1, 5000));
  CHECK_EQ(send(late_c, "bye", 3, 0), 3);
  close(late_c);
  usleep(20000);
  rec *late = rec_new();
  CHECK_EQ(ty__io_recv(h.io, &late->op, acc->fds[N]), 0);
  CHECK(PUMP(h.io, late->ended, 5000));
  CHECK(late->len == 3 && memcmp(late->data, "bye", 3) == 0);
  CHECK_EQ(late->final_res, 0);
  ty__io_close(h.io, acc->fds[N]);
  rec_free(late);
  /* Nobody listens on a closed listener's port any more. */
  ty__io_settle(h.io, &acc->op);
  CHECK_EQ(ty__io_close(h.io, lfd), 0);
  rec *c = rec_new();
  int fd = tcp_socket();
  struct sockaddr_in a = loopback(port);
  CHECK_EQ(ty__io_connect(h.io, &c->op, fd, (struct sockaddr *)&a, sizeof a),
           0);
  CHECK(PUMP(h.io, c->ended, 5000));
  CHECK_EQ(c->final_res, -ECONNREFUSED);
  ty__io_close(h.io, fd);
  rec_free(c);
  rec_free(acc);
  close_io(&h);
  return 0;
}
BOTH(io_tcp)

/* ---- a send larger than every buffer on the way ------------------------ */

static int io_bigsend(int kind) {
  harness h;
  CHECK_EQ(open_io(&h, kind, NULL), 0);
  int port, lfd = listen_any(&port);
  int cfd;
  CHECK_EQ(connect_n(&h, port, 1, &cfd), 0);
  int sfd = -1;
  for (int i = 0; i < 500 && sfd < 0; i++) {
    sfd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (sfd < 0) usleep(1000);
  }
  CHECK(sfd >= 0);
  size_t total = 8u << 20;
  char *out = malloc(total);
  for (size_t i = 0; i < total; i++) out[i] = (char)(i * 7 + (i >> 13));
  rec *snd = rec_new(), *rcv = rec_new();
  size_t off = 0;
  int sends = 0;
  CHECK_EQ(ty__io_send(h.io, &snd->op, cfd, out, total), 0);
  CHECK_EQ(ty__io_recv(h.io, &rcv->op, sfd), 0);
  while (off < total) {
    CHECK(PUMP(h.io, snd->ended, 10000));
    CHECK(snd->final_res > 0);
    off += (size_t)snd->final_res;
    sends++;
    snd->ended = false;
    if (off < total)
      CHECK_EQ(ty__io_send(h.io, &snd->op, cfd, out + off, total - off), 0);
  }
  CHECK(PUMP(h.io, rcv->len == total, 10000));
  CHECK(memcmp(rcv->data, out, total) == 0);
  CHECK(sends >= 1);
  ty__io_settle(h.io, &rcv->op);
  ty__io_close(h.io, sfd);
  ty__io_close(h.io, cfd);
  close(lfd);
  free(out);
  rec_free(snd);
  rec_free(rcv);
  close_io(&h);
  return 0;
}
BOTH(io_bigsend)

/* ---- receive buffers running dry --------------------------------------- */

/* Two 64-byte buffers for 16 connections that each send 16 KiB at once: the
 * buffer ring runs dry again and again (-ENOBUFS), the backend re-arms, and
 * every byte still arrives in order. */
static int io_enobufs(int kind) {
  harness h;
  ty__io_opts o = {.nbufs = 2, .buf_size = 64};
  CHECK_EQ(open_io(&h, kind, &o), 0);
  int port, lfd = listen_any(&port);
  rec *acc = rec_new();
  acc->accepting = true;
  CHECK_EQ(ty__io_accept(h.io, &acc->op, lfd), 0);
  enum { N = 16, SIZE = 16384 };
  int cfd[N];
  CHECK_EQ(connect_n(&h, port, N, cfd), 0);
  CHECK(PUMP(h.io, acc->nfds == N, 5000));
  rec *r[N];
  for (int i = 0; i < N; i++) {
    r[i] = rec_new();
    CHECK_EQ(ty__io_recv(h.io, &r[i]->op, acc->fds[i]), 0);
  }
  static char buf[N][SIZE];
  for (int i = 0; i < N; i++) {
    for (int j = 0; j < SIZE; j++)
      buf[i][j] = (char)(i * 31 + j * 17 + (j >> 8));
    CHECK_EQ(send(cfd[i], buf[i], SIZE, 0), SIZE);
  }
  for (int i = 0; i < N; i++) {
    CHECK(PUMP(h.io, r[i]->len == SIZE, 10000));
    CHECK(memcmp(r[i]->data, buf[i], SIZE) == 0);
    CHECK(ty__io_op_armed(&r[i]->op));
    CHECK_EQ(r[i]->finals, 0);
  }
  ty__io_stats st;
  ty__io_stats_get(h.io, &st);
  if (kind == TY_IO_URING) CHECK(st.enobufs > 0 && st.rearms >= st.enobufs);
  for (int i = 0; i < N; i++) {
    ty__io_settle(h.io, &r[i]->op);
    ty__io_close(h.io, acc->fds[i]);
    close(cfd[i]);
    rec_free(r[i]);
  }
  ty__io_settle(h.io, &acc->op);
  close(lfd);
  rec_free(acc);
  close_io(&h);
  return 0;
}
BOTH(io_enobufs)

/* ---- cancelling -------------------------------------------------------- */

static int io_cancel(int kind) {
  harness h;
  CHECK_EQ(open_io(&h, kind, NULL), 0);
  int port, lfd = listen_any(&port);
  rec *acc = rec_new();
  acc->accepting = true;
  /* An accept with nobody connecting. */
  CHECK_EQ(ty__io_accept(h.io, &acc->op, lfd), 0);
  ty__io_wait(h.io, 0);
  ty__io_cancel(h.io, &acc->op);
  CHECK(ty__io_op_busy(&acc->op) && !ty__io_op_armed(&acc->op));
  ty__io_cancel(h.io, &acc->op); /* twice: a no-op */
  CHECK(PUMP(h.io, acc->ended, 5000));
  CHECK_EQ(acc->final_res, -ECANCELED);
  CHECK_EQ(acc->finals, 1);
  /* Cancelled before it ever reached the kernel. */
  acc->ended = false;
  CHECK_EQ(ty__io_accept(h.io, &acc->op, lfd), 0);
  ty__io_cancel(h.io, &acc->op);
  CHECK(PUMP(h.io, acc->ended, 5000));
  CHECK_EQ(acc->finals, 2);
  /* Re-armed after a cancel, it works again. */
  acc->ended = false;
  CHECK_EQ(ty__io_accept(h.io, &acc->op, lfd), 0);
  int cfd;
  CHECK_EQ(connect_n(&h, port, 1, &cfd), 0);
  CHECK(PUMP(h.io, acc->nfds == 1, 5000));
  int sfd = acc->fds[0];
  /* A recv with nothing to read; settle returns with it ended. */
  rec *rcv = rec_new();
  CHECK_EQ(ty__io_recv(h.io, &rcv->op, sfd), 0);
  ty__io_wait(h.io, 0);
  ty__io_settle(h.io, &rcv->op);
  CHECK(rcv->ended && rcv->final_res == -ECANCELED && rcv->finals == 1);
  /* A callback that cancels its own op: data first, then the end. */
  rec *self = rec_new();
  self->cancel_io = h.io;
  CHECK_EQ(ty__io_recv(h.io, &self->op, sfd), 0);
  CHECK_EQ(send(cfd, "ping", 4, 0), 4);
  CHECK(PUMP(h.io, self->ended, 5000));
  CHECK(self->len == 4 && memcmp(self->data, "ping", 4) == 0);
  CHECK_EQ(self->finals, 1);
  CHECK_EQ(self->final_res, -ECANCELED);
  rec_free(self);
  /* A send that cannot finish: fill the socket, then cancel the rest. */
  int small = 4096;
  setsockopt(cfd, SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
  setsockopt(sfd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
  static char junk[1 << 16];
  while (send(cfd, junk, sizeof junk, MSG_DONTWAIT) > 0) {
  }
  rec *snd = rec_new();
  /* The peer's window may still open a little: send until one sticks. */
  for (int tries = 0;; tries++) {
    CHECK(tries < 100);
    snd->ended = false;
    CHECK_EQ(ty__io_send(h.io, &snd->op, cfd, junk, sizeof junk), 0);
    ty__io_wait(h.io, 10000000);
    if (!snd->ended) break;
    CHECK(snd->final_res > 0);
  }
  ty__io_cancel(h.io, &snd->op);
  CHECK(PUMP(h.io, snd->ended, 5000));
  CHECK_EQ(snd->final_res, -ECANCELED);
  /* Freeing the backend ends what is still busy, with callbacks. */
  rec *late = rec_new();
  CHECK_EQ(ty__io_recv(h.io, &late->op, sfd), 0);
  ty__io_wait(h.io, 0);
  close_io(&h);
  CHECK(late->ended && late->finals == 1 && late->final_res == -ECANCELED);
  CHECK(acc->ended && acc->final_res == -ECANCELED);
  close(sfd);
  close(cfd);
  close(lfd);
  rec_free(acc);
  rec_free(rcv);
  rec_free(snd);
  rec_free(late);
  return 0;
}
BOTH(io_cancel)

/* ---- inside a runtime: C actors parked in the backend ------------------ */

/*
 * A server actor on worker 0 accepts; each connection gets an echo actor
 * (alternating workers); client actors connect, send a pattern, read it
 * back and check it. Every wait is ty_actor_wait(-1) ended by a completion
 * callback's ty_actor_wake, so a lost eventfd wake or a stalled
 * DEFER_TASKRUN ring hangs the test.
 */
enum { RT_CLIENTS = 64, RT_PAYLOAD = 65536 };

typedef struct iact iact;
typedef int (*istep)(ty_actor *a, iact *c);
struct iact {
  istep step;
  ty_actor *self;
  ty__io *io;
  int id, fd, lfd;
  ty__io_op rop, wop, aop;
  char *in;
  size_t inlen, incap;
  char *out;
  size_t outlen, sent;
  bool started, eof, connected;
  int err;
  int q[RT_CLIENTS];
  int qlen, accepted;
};

static _Atomic int g_port, g_clients_done, g_echo_done, g_failures;

static iact *iact_new(istep step, int id) {
  iact *c = calloc(1, sizeof *c);
  c->step = step;
  c->id = id;
  c->fd = c->lfd = -1;
  c->rop.ud = c->wop.ud = c->aop.ud = c;
  return c;
}

static void wake_owner(iact *c) { ty_actor_wake(c->self); }

static void on_accept(ty__io_op *op, int res, const char *data) {
  (void)data;
  iact *c = op->ud;
  if (res >= 0) c->q[c->qlen++] = res;
  else if (res != -ECANCELED) c->err = res;
  wake_owner(c);
}

static void on_recv(ty__io_op *op, int res, const char *data) {
  iact *c = op->ud;
  if (res > 0) {
    if (c->inlen + (size_t)res > c->incap) {
      c->incap = (c->inlen + (size_t)res) * 2;
      c->in = realloc(c->in, c->incap);
    }
    memcpy(c->in + c->inlen, data, (size_t)res);
    c->inlen += (size_t)res;
  } else if (res == 0) {
    c->eof = true;
  } else if (res != -ECANCELED) {
    c->err = res;
  }
  wake_owner(c);
}

/* Sends out[sent..outlen), re-arming itself until all is gone. */
static void on_send(ty__io_op *op, int res, const char *data) {
  (void)data;
  iact *c = op->ud;
  if (res < 0) {
    c->err = res;
  } else {
    c->sent += (size_t)res;
    if (c->sent < c->outlen &&
        !ty__io_send(c->io, op, c->fd, c->out + c->sent, c->outlen - c->sent))
      return;
  }
  wake_owner(c);
}

static void on_connect(ty__io_op *op, int res, const char *data) {
  (void)data;
  iact *c = op->ud;
  if (res) c->err = res;
  else c->connected = true;
  wake_owner(c);
}

static int wait_more(ty_actor *a) {
  ty_actor_wait(a, -1, 0);
  return TY_WAIT;
}

static int fail(iact *c, const char *what) {
  fprintf(stderr, "actor %d: %s (%s)\n", c->id, what, strerror(-c->err));
  atomic_fetch_add(&g_failures, 1);
  return TY_DONE;
}

static int step_echo(ty_actor *a, iact *c) {
  if (!c->started) {
    c->started = true;
    c->rop.cb = on_recv;
    c->wop.cb = on_send;
    if (ty__io_recv(c->io, &c->rop, c->fd)) return fail(c, "recv");
  }
  if (c->err) return fail(c, "echo");
  if (c->inlen && !ty__io_op_busy(&c->wop)) {
    free(c->out);
    c->out = c->in; /* hand the bytes over to the send side */
    c->outlen = c->inlen;
    c->sent = 0;
    c->in = NULL;
    c->inlen = c->incap = 0;
    if (ty__io_send(c->io, &c->wop, c->fd, c->out, c->outlen))
      return fail(c, "send");
  }
  if (c->eof && !c->inlen && !ty__io_op_busy(&c->wop)) {
    atomic_fetch_add(&g_echo_done, 1);
    return TY_DONE;
  }
  return wait_more(a);
}

static int step_server(ty_actor *a, iact *c) {
  ty_runtime *rt = ty_worker_runtime(ty_worker_current());
  if (!c->started) {
    int port;
    c->started = true;
    c->lfd = listen_any(&port);
    c->aop.cb = on_accept;
    if (c->lfd < 0 || ty__io_accept(c->io, &c->aop, c->lfd))
      return fail(c, "listen");
    atomic_store(&g_port, port); /* seq_cst: the test thread polls it */
  }
  if (c->err) return fail(c, "accept");
  while (c->qlen) {
    iact *e = iact_new(step_echo, c->accepted);
    e->fd = c->q[--c->qlen];
    ty_spawn_at(rt, (unsigned)(c->accepted++ % 2), e, NULL);
  }
  if (c->accepted == RT_CLIENTS) return TY_DONE;
  return wait_more(a);
}

static int client_check(iact *c) {
  for (size_t i = 0; i < RT_PAYLOAD; i++)
    if (c->in[i] != c->out[i]) return fail(c, "wrong byte");
  atomic_fetch_add(&g_clients_done, 1);
  return TY_DONE;
}

static int step_client(ty_actor *a, iact *c) {
  if (!c->started) {
    c->started = true;
    c->fd = tcp_socket();
    struct sockaddr_in sa = loopback(atomic_load(&g_port));
    c->wop.cb = on_connect;
    if (ty__io_connect(c->io, &c->wop, c->fd, (struct sockaddr *)&sa,
                       sizeof sa))
      return fail(c, "connect");
    return wait_more(a);
  }
  if (c->err) return fail(c, "client");
  if (c->connected && !c->out) {
    c->outlen = RT_PAYLOAD;
    c->out = malloc(RT_PAYLOAD);
    for (size_t i = 0; i < RT_PAYLOAD; i++)
      c->out[i] = (char)(c->id * 13 + i * 7);
    c->rop.cb = on_recv;
    c->wop.cb = on_send;
    if (ty__io_recv(c->io, &c->rop, c->fd) ||
        ty__io_send(c->io, &c->wop, c->fd, c->out, c->outlen))
      return fail(c, "client arm");
  }
  if (c->inlen >= RT_PAYLOAD) return client_check(c);
  return wait_more(a);
}

static int i_resume(ty_actor *a, void *ud) {
  (void)ud;
  iact *c = a->user;
  c->self = a;
  c->io = ty_worker_io(ty_worker_current());
  return c->step(a, c);
}

/* On the home worker: no op may outlive its actor. */
static void i_destroy(ty_actor *a, ty_worker *w, void *ud) {
  (void)ud;
  iact *c = a->user;
  if (w && c->io) {
    ty__io_settle(c->io, &c->rop);
    ty__io_settle(c->io, &c->wop);
    ty__io_settle(c->io, &c->aop);
  }
  if (c->fd >= 0) ty__io_close(c->io, c->fd);
  if (c->lfd >= 0) ty__io_close(c->io, c->lfd);
  for (int i = 0; i < c->qlen; i++) close(c->q[i]);
  free(c->in);
  free(c->out);
  free(c);
}

static const ty_actor_ops i_ops = {.resume = i_resume, .destroy = i_destroy};

static int io_runtime(int kind) {
  ty_config cfg;
  ty_config_init(&cfg);
  cfg.workers = 2;
  cfg.io = kind;
  ty_runtime *rt;
  CHECK_EQ(ty_runtime_new(&cfg, &i_ops, NULL, &rt), 0);
  ty_runtime_start(rt);
  CHECK_EQ(ty_spawn_at(rt, 0, iact_new(step_server, -1), NULL), 0);
  double end = now_ms() + 5000;
  while (!atomic_load(&g_port) && now_ms() < end) usleep(1000);
  CHECK(atomic_load(&g_port));
  for (int i = 0; i < RT_CLIENTS; i++)
    CHECK_EQ(ty_spawn_at(rt, (unsigned)(i % 2), iact_new(step_client, i), NULL),
             0);
  end = now_ms() + 20000;
  while ((atomic_load(&g_clients_done) < RT_CLIENTS ||
          atomic_load(&g_echo_done) < RT_CLIENTS) &&
         !atomic_load(&g_failures) && now_ms() < end)
    usleep(1000);
  ty_worker_stats st;
  ty_worker_stats_get(rt, 0, &st);
  ty_runtime_stop(rt);
  ty_runtime_free(rt);
  CHECK_EQ(atomic_load(&g_failures), 0);
  CHECK_EQ(atomic_load(&g_clients_done), RT_CLIENTS);
  CHECK_EQ(atomic_load(&g_echo_done), RT_CLIENTS);
  CHECK(st.parks > 0); /* the workers did sleep in the backend */
  return 0;
}
BOTH(io_runtime)
