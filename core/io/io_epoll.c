/*
 * io_epoll.c - the epoll backend of io.h: the same completion contract
 * built on readiness (think Redis ae_epoll.c, with Tokio's readiness bits).
 *
 * - Sockets are registered edge-triggered for IN | OUT | RDHUP once, at the
 *   first op armed on them; a per-descriptor record keeps the ready bits
 *   the edges reported and the op waiting in each direction (accept, recv
 *   or recvmsg reads; send, connect or sendmsg writes). A bit is cleared
 *   only when a system call says EAGAIN (or a short read drained the
 *   socket), so no edge is ever lost.
 * - An op that can make progress sits on the `run` list; ty__io_wait runs
 *   the list (the system call, then the callback), waits in epoll_wait
 *   (timeout 0 while the list is not empty), and runs the list again.
 *   Cancels and results found at arm time (connect) also travel through the
 *   list, so callbacks only run from ty__io_wait / ty__io_settle / free.
 * - Each pass runs only the ops that were on the list when it began; a recv
 *   that filled its buffer or an accept that hit its batch goes back on the
 *   list for the next pass, so one busy socket cannot starve the others.
 * - Every arm does EPOLL_CTL_ADD and takes EEXIST as "already registered":
 *   a descriptor closed elsewhere and reused by a new socket is registered
 *   afresh instead of trusting a stale record.
 * - The wake eventfd is registered level-triggered and drained here when it
 *   fires (the worker reads it too; whoever is first wins).
 */
#include <errno.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include "io_impl.h"

#define MAX_EVENTS 256
#define ACCEPT_BATCH 32 /* accepts per op per pass */
#define SCRATCH_MULT 16 /* recv reads up to buf_size * this per call */

/* Ready bits. R_HUP sticks: the peer closed or the socket failed, so a
 * short read no longer proves the socket drained (the end is still to be
 * read, and no new edge will announce it). */
enum { R_IN = 1, R_OUT = 2, R_HUP = 4 };

enum { F_QUEUED = 1, F_RESULT = 2 }; /* op->flags */

typedef struct fdrec {
  ty__io_op *rd, *wr; /* accept/recv/recvmsg, send/connect/sendmsg */
  uint8_t ready;
} fdrec;

typedef struct epoll_io {
  ty__io base;
  int epfd, wake_fd;
  fdrec *fds;
  int nfds;
  ty__io_op *run_head, *run_tail;
  char *scratch;
  size_t scratch_len;
  unsigned busy;
  bool closing;
} epoll_io;

/* ---- records and the run list ------------------------------------------ */

static fdrec *rec_of(epoll_io *e, int fd) {
  if (fd >= e->nfds) {
    size_t cap = (size_t)e->nfds;
    ty__grow(&e->fds, &cap, (size_t)fd + 1, sizeof *e->fds, 256);
    memset(e->fds + e->nfds, 0, (cap - (size_t)e->nfds) * sizeof *e->fds);
    e->nfds = (int)cap;
  }
  return &e->fds[fd];
}

static void enqueue(epoll_io *e, ty__io_op *op) {
  if (op->flags & F_QUEUED) return;
  op->flags |= F_QUEUED;
  op->next = NULL;
  if (e->run_tail) e->run_tail->next = op;
  else e->run_head = op;
  e->run_tail = op;
}

/* Stores a final result to deliver from the run list. */
static void post(epoll_io *e, ty__io_op *op, int res) {
  op->res = res;
  op->flags |= F_RESULT;
  enqueue(e, op);
}

static bool reads_kind(int kind) {
  return kind == TY__IO_ACCEPT || kind == TY__IO_RECV || kind == TY__IO_RECVMSG;
}

static bool reads(const ty__io_op *op) { return reads_kind(op->kind); }

/* Detaches op from its descriptor's record. */
static void unhook(epoll_io *e, ty__io_op *op) {
  if (op->fd < 0 || op->fd >= e->nfds) return;
  fdrec *r = &e->fds[op->fd];
  if (r->rd == op) r->rd = NULL;
  if (r->wr == op) r->wr = NULL;
}

static void finish(epoll_io *e, ty__io_op *op, int res, const char *data) {
  unhook(e, op);
  op->state = TY__IO_IDLE;
  e->busy--;
  e->base.st.completions++;
  op->cb(op, res, data);
}

/* ---- attempts: the system call behind each kind ------------------------ */

static void clear_ready(epoll_io *e, int fd, uint8_t bit) {
  e->fds[fd].ready &= (uint8_t)~bit;
}

static void try_accept(epoll_io *e, ty__io_op *op) {
  for (int i = 0; i < ACCEPT_BATCH; i++) {
    int fd = accept4(op->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      e->base.st.completions++;
      op->cb(op, fd, NULL);
      if (op->state != TY__IO_ARMED) return; /* cancelled from the callback */
      continue;
    }
    int err = errno;
    if (err == EAGAIN || err == EWOULDBLOCK) {
      clear_ready(e, op->fd, R_IN);
      return;
    }
    /* The connection died in the queue: io_uring skips these too. */
    if (err == ECONNABORTED || err == EINTR || err == EPROTO) continue;
    finish(e, op, -err, NULL);
    return;
  }
  enqueue(e, op); /* more may wait: next pass */
}

static void try_recv(epoll_io *e, ty__io_op *op) {
  ssize_t n = recv(op->fd, e->scratch, e->scratch_len, 0);
  if (n > 0) {
    /* A short read emptied the socket; new data brings a new edge. */
    bool hup = e->fds[op->fd].ready & R_HUP;
    if ((size_t)n < e->scratch_len && !hup) clear_ready(e, op->fd, R_IN);
    e->base.st.completions++;
    op->cb(op, (int)n, e->scratch);
    if (((size_t)n == e->scratch_len || hup) && op->state == TY__IO_ARMED)
      enqueue(e, op);
    return;
  }
  if (n == 0) {
    finish(e, op, 0, NULL);
    return;
  }
  int err = errno;
  if (err == EAGAIN || err == EWOULDBLOCK) clear_ready(e, op->fd, R_IN);
  else if (err == EINTR) enqueue(e, op);
  else finish(e, op, -err, NULL);
}

static void try_send(epoll_io *e, ty__io_op *op) {
  ssize_t n = send(op->fd, op->buf, op->len, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (n >= 0) {
    finish(e, op, (int)(n > INT32_MAX ? INT32_MAX : n), NULL);
    return;
  }
  int err = errno;
  if (err == EAGAIN || err == EWOULDBLOCK) clear_ready(e, op->fd, R_OUT);
  else if (err == EINTR) enqueue(e, op);
  else finish(e, op, -err, NULL);
}

/* One datagram each way: the call either completes the op or, on EAGAIN,
 * waits for the next edge in its direction. */
static void try_msg(epoll_io *e, ty__io_op *op) {
  bool in = op->kind == TY__IO_RECVMSG;
  ssize_t n = in ? recvmsg(op->fd, op->msg, MSG_DONTWAIT)
                 : sendmsg(op->fd, op->msg, MSG_DONTWAIT | MSG_NOSIGNAL);
  if (n >= 0) {
    finish(e, op, (int)(n > INT32_MAX ? INT32_MAX : n), NULL);
    return;
  }
  int err = errno;
  if (err == EAGAIN || err == EWOULDBLOCK)
    clear_ready(e, op->fd, in ? R_IN : R_OUT);
  else if (err == EINTR) enqueue(e, op);
  else finish(e, op, -err, NULL);
}

/* Writable after connect(): SO_ERROR tells the outcome, unless the edge was
 * stale and the handshake still runs (getpeername: ENOTCONN). */
static void try_connect(epoll_io *e, ty__io_op *op) {
  int err = 0;
  socklen_t len = sizeof err;
  if (getsockopt(op->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0) err = errno;
  if (!err) {
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (getpeername(op->fd, (struct sockaddr *)&ss, &sl) < 0) {
      if (errno == ENOTCONN) {
        clear_ready(e, op->fd, R_OUT);
        return;
      }
      err = errno;
    }
  }
  finish(e, op, -err, NULL);
}

/* A poll op asks the kernel (poll(2), no wait) instead of trusting the
 * ready bits: its library reads and writes the socket itself, so an edge we
 * saw may be long consumed. Not ready: the bits go, and the next edge
 * queues the op again. */
static void try_poll(epoll_io *e, ty__io_op *op) {
  struct pollfd p = {.fd = op->fd, .events = (short)op->len};
  int n = poll(&p, 1, 0);
  if (n > 0) {
    finish(e, op, p.revents, NULL);
    return;
  }
  if (n == 0) {
    if (op->len & POLLIN) clear_ready(e, op->fd, R_IN);
    if (op->len & POLLOUT) clear_ready(e, op->fd, R_OUT);
    return;
  }
  if (errno == EINTR) enqueue(e, op);
  else finish(e, op, -errno, NULL);
}

static void run_one(epoll_io *e, ty__io_op *op) {
  op->flags &= (uint8_t)~F_QUEUED;
  if (op->flags & F_RESULT) {
    op->flags &= (uint8_t)~F_RESULT;
    finish(e, op, op->res, NULL);
    return;
  }
  if (op->state != TY__IO_ARMED) return;
  switch (op->kind) {
  case TY__IO_ACCEPT: try_accept(e, op); break;
  case TY__IO_RECV: try_recv(e, op); break;
  case TY__IO_SEND: try_send(e, op); break;
  case TY__IO_CONNECT: try_connect(e, op); break;
  case TY__IO_RECVMSG:
  case TY__IO_SENDMSG: try_msg(e, op); break;
  case TY__IO_POLL: try_poll(e, op); break;
  }
}

/* One pass over the ops queued when it starts. Returns how many ran. */
static int run_list(epoll_io *e) {
  ty__io_op *op = e->run_head;
  int n = 0;
  e->run_head = e->run_tail = NULL;
  while (op) {
    ty__io_op *next = op->next;
    op->next = NULL;
    run_one(e, op);
    n++;
    op = next;
  }
  return n;
}

/* ---- waiting ----------------------------------------------------------- */

static void drain_wake(epoll_io *e) {
  uint64_t v;
  if (read(e->wake_fd, &v, sizeof v) == (ssize_t)sizeof v) e->base.st.wakes++;
}

static void on_event(epoll_io *e, const struct epoll_event *ev) {
  int fd = ev->data.fd;
  if (fd == e->wake_fd) {
    drain_wake(e);
    return;
  }
  if (fd < 0 || fd >= e->nfds) return;
  fdrec *r = &e->fds[fd];
  uint32_t m = ev->events;
  if (m & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) r->ready |= R_IN;
  if (m & (EPOLLOUT | EPOLLHUP | EPOLLERR)) r->ready |= R_OUT;
  if (m & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) r->ready |= R_HUP;
  if (r->rd && (r->ready & R_IN)) enqueue(e, r->rd);
  if (r->wr && (r->ready & R_OUT)) enqueue(e, r->wr);
}

static int ms_of(int64_t ns) {
  if (ns < 0) return -1;
  int64_t ms = (ns + 999999) / 1000000; /* never wake before the timer */
  return ms > INT32_MAX ? INT32_MAX : (int)ms;
}

/* epoll_wait takes whole ms, rounded up: a timer tick of 250 us (timer.h)
 * would be late by up to 1 ms. epoll_pwait2 (Linux 5.11) takes ns; an older
 * kernel says ENOSYS once and we fall back to ms. */
static int wait_events(epoll_io *e, struct epoll_event *evs, int64_t ns) {
  static _Atomic bool no_pwait2; /* relaxed: a hint; a racer retries once */
  if (ns > 0 && !atomic_load_explicit(&no_pwait2, memory_order_relaxed)) {
    struct timespec ts = {.tv_sec = ns / 1000000000,
                          .tv_nsec = ns % 1000000000};
    int got = epoll_pwait2(e->epfd, evs, MAX_EVENTS, &ts, NULL);
    if (got >= 0 || errno != ENOSYS) return got;
    atomic_store_explicit(&no_pwait2, true, memory_order_relaxed);
  }
  return epoll_wait(e->epfd, evs, MAX_EVENTS, ns == 0 ? 0 : ms_of(ns));
}

static int e_wait(ty__io *io, int64_t timeout_ns) {
  epoll_io *e = (epoll_io *)io;
  int n = run_list(e);
  int64_t tmo = timeout_ns == 0 || n || e->run_head ? 0 : timeout_ns;
  /* Nothing armed and nothing to wait for: skip the system call. */
  if (tmo == 0 && !e->busy) return n;
  struct epoll_event evs[MAX_EVENTS];
  int got = wait_events(e, evs, tmo);
  e->base.st.enters++;
  for (int i = 0; i < got; i++) on_event(e, &evs[i]);
  return n + run_list(e);
}

/* ---- operations -------------------------------------------------------- */

static int watch(epoll_io *e, int fd) {
  struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET,
                           .data.fd = fd};
  fdrec *r = rec_of(e, fd);
  if (epoll_ctl(e->epfd, EPOLL_CTL_ADD, fd, &ev) == 0) {
    r->ready = 0; /* a new registration: the ADD reports the current state */
    return 0;
  }
  return errno == EEXIST ? 0 : -errno;
}

/* Hooks op to fd's record, direction by kind; queues it if already ready. */
static int arm(epoll_io *e, ty__io_op *op, int kind, int fd) {
  if (e->closing) return -ESHUTDOWN;
  if (fd < 0) return -EBADF;
  int err = watch(e, fd);
  if (err) return err;
  fdrec *r = &e->fds[fd];
  ty__io_op **slot = reads_kind(kind) ? &r->rd : &r->wr;
  if (*slot) return -EBUSY; /* one op per direction */
  ty__io_op_start(op, kind, fd);
  *slot = op;
  e->busy++;
  if (r->ready & (reads(op) ? R_IN : R_OUT)) enqueue(e, op);
  return 0;
}

static int e_accept(ty__io *io, ty__io_op *op, int fd) {
  return arm((epoll_io *)io, op, TY__IO_ACCEPT, fd);
}

static int e_recv(ty__io *io, ty__io_op *op, int fd) {
  return arm((epoll_io *)io, op, TY__IO_RECV, fd);
}

static int e_send(ty__io *io, ty__io_op *op, int fd, const void *buf,
                  size_t len) {
  op->buf = buf;
  op->len = len;
  return arm((epoll_io *)io, op, TY__IO_SEND, fd);
}

static int e_recvmsg(ty__io *io, ty__io_op *op, int fd, struct msghdr *msg) {
  op->msg = msg;
  return arm((epoll_io *)io, op, TY__IO_RECVMSG, fd);
}

static int e_sendmsg(ty__io *io, ty__io_op *op, int fd, struct msghdr *msg) {
  op->msg = msg;
  return arm((epoll_io *)io, op, TY__IO_SENDMSG, fd);
}

/* connect() runs now; its outcome (or the writable edge that ends the
 * handshake) is delivered from the run list. */
static int e_connect(ty__io *io, ty__io_op *op, int fd) {
  epoll_io *e = (epoll_io *)io;
  int rc = connect(fd, (struct sockaddr *)&op->addr, op->addrlen);
  int err = rc == 0 ? 0 : errno;
  if (err && err != EINPROGRESS) return -err;
  rc = arm(e, op, TY__IO_CONNECT, fd);
  if (rc) return rc;
  e->fds[fd].ready &= (uint8_t)~R_OUT; /* only an edge after now counts */
  if (!err) post(e, op, 0);
  return 0;
}

/* Hooked in each direction it waits for; it runs at once (try_poll asks
 * the kernel), then on the edges. */
static int e_poll(ty__io *io, ty__io_op *op, int fd, unsigned events) {
  epoll_io *e = (epoll_io *)io;
  if (e->closing) return -ESHUTDOWN;
  if (fd < 0) return -EBADF;
  int err = watch(e, fd);
  if (err) return err;
  fdrec *r = &e->fds[fd];
  if (((events & POLLIN) && r->rd) || ((events & POLLOUT) && r->wr))
    return -EBUSY;
  ty__io_op_start(op, TY__IO_POLL, fd);
  op->len = events;
  if (events & POLLIN) r->rd = op;
  if (events & POLLOUT) r->wr = op;
  e->busy++;
  enqueue(e, op);
  return 0;
}

static void e_cancel(ty__io *io, ty__io_op *op) {
  epoll_io *e = (epoll_io *)io;
  unhook(e, op);
  op->state = TY__IO_CANCELLING;
  post(e, op, -ECANCELED);
}

static void e_settle(ty__io *io, ty__io_op *op) {
  epoll_io *e = (epoll_io *)io;
  ty__io_cancel(io, op);
  while (ty__io_op_busy(op)) run_list(e);
}

static void e_forget(ty__io *io, int fd) {
  epoll_io *e = (epoll_io *)io;
  if (fd < 0 || fd >= e->nfds) return;
  ty__assert(!e->fds[fd].rd && !e->fds[fd].wr);
  epoll_ctl(e->epfd, EPOLL_CTL_DEL, fd, NULL); /* ENOENT: never watched */
  e->fds[fd].ready = 0;
}

static void e_free(ty__io *io) {
  epoll_io *e = (epoll_io *)io;
  for (int fd = 0; fd < e->nfds; fd++) {
    fdrec *r = &e->fds[fd];
    if (r->rd) e_cancel(io, r->rd);
    if (r->wr) e_cancel(io, r->wr);
  }
  e->closing = true;
  while (e->run_head) run_list(e);
  close(e->epfd);
  free(e->fds);
  free(e->scratch);
  free(e);
}

static const ty__io_vt epoll_vt = {
    .name = "epoll",
    .wait = e_wait,
    .accept = e_accept,
    .recv = e_recv,
    .send = e_send,
    .connect = e_connect,
    .recvmsg = e_recvmsg,
    .sendmsg = e_sendmsg,
    .poll = e_poll,
    .cancel = e_cancel,
    .settle = e_settle,
    .forget = e_forget,
    .free = e_free,
};

int ty__io_epoll_new(int wake_fd, const ty__io_opts *o, ty__io **out) {
  epoll_io *e = ty__xcalloc(1, sizeof *e);
  e->epfd = epoll_create1(EPOLL_CLOEXEC);
  if (e->epfd < 0) {
    int err = -errno;
    free(e);
    return err;
  }
  struct epoll_event ev = {.events = EPOLLIN, .data.fd = wake_fd};
  if (wake_fd >= 0 && epoll_ctl(e->epfd, EPOLL_CTL_ADD, wake_fd, &ev) < 0) {
    int err = -errno;
    close(e->epfd);
    free(e);
    return err;
  }
  e->base.vt = &epoll_vt;
  e->base.kind = TY_IO_EPOLL;
  e->wake_fd = wake_fd;
  e->scratch_len = (size_t)o->buf_size * SCRATCH_MULT;
  e->scratch = ty__xmalloc(e->scratch_len);
  *out = &e->base;
  return 0;
}
