/*
 * io_uring.c - the io_uring backend of io.h (liburing).
 *
 * One ring per worker, set up with SINGLE_ISSUER | DEFER_TASKRUN |
 * COOP_TASKRUN when the kernel takes them (each flag probed on its own,
 * once per process: a kernel that refuses one keeps the others). With
 * DEFER_TASKRUN the kernel runs completion work only when the owner enters
 * io_uring_enter with GETEVENTS, which is why ty__io_wait(io, 0) enters the
 * kernel whenever something is in flight instead of peeking at the CQ.
 *
 * - The wake eventfd has a read armed at all times; the worker parks in
 *   io_uring_enter (min_complete 1, the next timer as timeout) and an
 *   unparker's write completes that read.
 * - user_data is the ty__io_op pointer; 0 marks the results of cancel
 *   requests, which are ignored.
 * - Receives are multishot with a provided-buffer ring: a completion names
 *   its buffer, the callback reads it, and the buffer goes straight back to
 *   the ring. When a multishot request stops without IORING_CQE_F_MORE
 *   while the socket is fine (-ENOBUFS: the buffer ring ran dry, or a full
 *   CQ), the backend re-arms it without telling the caller.
 * - Ops that could not get a submission entry, that must be re-armed, or
 *   whose cancel could not be queued wait on the `pend` list, flushed at the
 *   start and the end of every wait (never from inside an arming call, so
 *   callbacks only ever run from ty__io_wait / ty__io_settle / free).
 */
#include <errno.h>
#include <liburing.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "io_impl.h"

#define BGID 0 /* the buffer group of the receive buffers */

/* op->flags */
enum {
  F_PEND_SUBMIT = 1, /* on the pend list: needs a submission entry */
  F_PEND_CANCEL = 2, /* on the pend list: its cancel needs one */
  F_POLL_FIRST = 4,  /* send(msg), recvmsg: the kernel said EAGAIN; poll
                        before trying again */
};

typedef struct uring_io {
  ty__io base;
  struct io_uring ring;
  int wake_fd;
  uint64_t wake_val; /* the armed eventfd read lands here */
  ty__io_op wake_op; /* TY__IO_WAKE */
  bool wake_poll;    /* the kernel refused the read: poll + read() */
  struct io_uring_buf_ring *br;
  size_t br_bytes;
  char *bufs; /* nbufs * buf_size bytes */
  unsigned nbufs, buf_size;
  ty__io_op *pend_head, *pend_tail;
  unsigned busy; /* caller ops between arm and final callback */
  bool closing;  /* ty__io_free is draining: no more re-arms */
  bool skip_cqe; /* IOSQE_CQE_SKIP_SUCCESS works */
} uring_io;

/* ---- probing ----------------------------------------------------------- */

static pthread_once_t g_probe_once = PTHREAD_ONCE_INIT;
static unsigned g_flags; /* setup flags the kernel accepted */
static bool g_usable;

static bool kernel_at_least(unsigned major, unsigned minor) {
  struct utsname u;
  unsigned a = 0, b = 0;
  if (uname(&u) || sscanf(u.release, "%u.%u", &a, &b) != 2) return false;
  return a > major || (a == major && b >= minor);
}

static int setup(struct io_uring *r, unsigned entries, unsigned flags) {
  struct io_uring_params p;
  memset(&p, 0, sizeof p);
  p.flags = flags | IORING_SETUP_CQSIZE;
  p.cq_entries = entries * 16;
  return io_uring_queue_init_params(entries, r, &p);
}

/* Can this ring register a provided-buffer ring (5.19+)? */
static bool probe_buf_ring(struct io_uring *r) {
  size_t bytes = 4096;
  void *mem = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                   MAP_ANONYMOUS | MAP_PRIVATE, -1, 0);
  if (mem == MAP_FAILED) return false;
  struct io_uring_buf_reg reg = {.ring_addr = (uintptr_t)mem,
                                 .ring_entries = 8,
                                 .bgid = BGID};
  bool ok = io_uring_register_buf_ring(r, &reg, 0) == 0;
  munmap(mem, bytes);
  return ok;
}

static bool flag_ok(unsigned flags) {
  struct io_uring r;
  if (setup(&r, 4, flags) < 0) return false;
  io_uring_queue_exit(&r);
  return true;
}

/* Multishot receive needs 6.0; then each wanted flag is tried alone (on top
 * of the ones already accepted), so one refusal drops only that flag. */
static void probe(void) {
  struct io_uring r;
  if (!kernel_at_least(6, 0) || setup(&r, 4, 0) < 0) return;
  bool bufs = probe_buf_ring(&r);
  io_uring_queue_exit(&r);
  if (!bufs) return;
  static const unsigned want[] = {
      IORING_SETUP_SUBMIT_ALL, IORING_SETUP_COOP_TASKRUN,
      IORING_SETUP_SINGLE_ISSUER,
      IORING_SETUP_DEFER_TASKRUN, /* needs SINGLE_ISSUER */
  };
  unsigned flags = 0;
  for (size_t i = 0; i < ty__countof(want); i++) {
    if (want[i] == IORING_SETUP_DEFER_TASKRUN &&
        !(flags & IORING_SETUP_SINGLE_ISSUER))
      continue;
    if (flag_ok(flags | want[i])) flags |= want[i];
  }
  g_flags = flags;
  g_usable = true;
}

bool ty__io_uring_usable(void) {
  pthread_once(&g_probe_once, probe);
  return g_usable;
}

/* ---- submission -------------------------------------------------------- */

static struct io_uring_sqe *try_sqe(uring_io *u) {
  struct io_uring_sqe *s = io_uring_get_sqe(&u->ring);
  if (s) return s;
  io_uring_submit(&u->ring); /* the SQ is full: hand it to the kernel */
  u->base.st.enters++;
  return io_uring_get_sqe(&u->ring);
}

static void pend(uring_io *u, ty__io_op *op, unsigned flag) {
  bool queued = op->flags & (F_PEND_SUBMIT | F_PEND_CANCEL);
  op->flags |= (uint8_t)flag;
  if (queued) return;
  op->next = NULL;
  if (u->pend_tail) u->pend_tail->next = op;
  else u->pend_head = op;
  u->pend_tail = op;
}

static void prep(uring_io *u, ty__io_op *op, struct io_uring_sqe *s) {
  switch (op->kind) {
  case TY__IO_ACCEPT:
    io_uring_prep_multishot_accept(s, op->fd, NULL, NULL,
                                   SOCK_NONBLOCK | SOCK_CLOEXEC);
    break;
  case TY__IO_RECV:
    io_uring_prep_recv_multishot(s, op->fd, NULL, 0, 0);
    s->flags |= IOSQE_BUFFER_SELECT;
    s->buf_group = BGID;
    break;
  case TY__IO_SEND:
    io_uring_prep_send(s, op->fd, op->buf, op->len, MSG_NOSIGNAL);
    if (op->flags & F_POLL_FIRST) s->ioprio |= IORING_RECVSEND_POLL_FIRST;
    break;
  case TY__IO_CONNECT:
    io_uring_prep_connect(s, op->fd, (struct sockaddr *)&op->addr, op->addrlen);
    break;
  case TY__IO_RECVMSG:
    io_uring_prep_recvmsg(s, op->fd, op->msg, 0);
    if (op->flags & F_POLL_FIRST) s->ioprio |= IORING_RECVSEND_POLL_FIRST;
    break;
  case TY__IO_SENDMSG:
    io_uring_prep_sendmsg(s, op->fd, op->msg, MSG_NOSIGNAL);
    if (op->flags & F_POLL_FIRST) s->ioprio |= IORING_RECVSEND_POLL_FIRST;
    break;
  case TY__IO_POLL: io_uring_prep_poll_add(s, op->fd, (unsigned)op->len); break;
  case TY__IO_WAKE:
    if (u->wake_poll) io_uring_prep_poll_add(s, u->wake_fd, POLLIN);
    else io_uring_prep_read(s, u->wake_fd, &u->wake_val, sizeof u->wake_val, 0);
    break;
  }
  io_uring_sqe_set_data(s, op);
}

/* Queues op's submission entry now, or on the pend list if the SQ is full. */
static void submit_op(uring_io *u, ty__io_op *op) {
  struct io_uring_sqe *s = try_sqe(u);
  if (s) prep(u, op, s);
  else pend(u, op, F_PEND_SUBMIT);
}

static void submit_cancel(uring_io *u, ty__io_op *op) {
  struct io_uring_sqe *s = try_sqe(u);
  if (!s) {
    pend(u, op, F_PEND_CANCEL);
    return;
  }
  io_uring_prep_cancel64(s, (uint64_t)(uintptr_t)op, 0);
  io_uring_sqe_set_data64(s, 0);
  if (u->skip_cqe) s->flags |= IOSQE_CQE_SKIP_SUCCESS;
}

static int arm(ty__io *io, ty__io_op *op, int kind, int fd) {
  uring_io *u = (uring_io *)io;
  if (u->closing) return -ESHUTDOWN;
  ty__io_op_start(op, kind, fd);
  u->busy++;
  submit_op(u, op);
  return 0;
}

/* ---- completion -------------------------------------------------------- */

/* Ends op and runs its final callback. */
static void finish(uring_io *u, ty__io_op *op, int res, const char *data) {
  op->state = TY__IO_IDLE;
  u->busy--;
  u->base.st.completions++;
  op->cb(op, res, data);
}

static void give_back(uring_io *u, unsigned bid) {
  io_uring_buf_ring_add(u->br, u->bufs + (size_t)bid * u->buf_size, u->buf_size,
                        (unsigned short)bid, (int)u->nbufs - 1, 0);
  io_uring_buf_ring_advance(u->br, 1);
}

static void wake_done(uring_io *u, int res) {
  if (res == -EAGAIN || res == -EINVAL) u->wake_poll = true;
  if (res > 0) u->base.st.wakes++;
  if (u->wake_poll && res > 0) { /* a poll result: clear the counter */
    uint64_t v;
    ssize_t r = read(u->wake_fd, &v, sizeof v);
    (void)r; /* EAGAIN: the worker read it first */
  }
  if (u->closing) {
    u->wake_op.state = TY__IO_IDLE;
    return;
  }
  submit_op(u, &u->wake_op);
}

/* Should a completion that came without F_MORE be re-armed by the backend
 * rather than end the op? (A multishot op that stopped while the socket is
 * fine; a one-shot op on a non-blocking socket that found it not ready.) */
static bool keep_armed(uring_io *u, ty__io_op *op, int res) {
  if (u->closing || op->state != TY__IO_ARMED) return false;
  if (op->kind == TY__IO_RECV) return res > 0 || res == -ENOBUFS;
  if (op->kind == TY__IO_ACCEPT) return res >= 0;
  return res == -EAGAIN &&
         (op->kind == TY__IO_SEND || op->kind == TY__IO_SENDMSG ||
          op->kind == TY__IO_RECVMSG);
}

static void on_cqe(uring_io *u, uint64_t data, int res, unsigned flags) {
  if (!data) return; /* a cancel request's own result */
  ty__io_op *op = (ty__io_op *)(uintptr_t)data;
  if (op->kind == TY__IO_WAKE) {
    wake_done(u, res);
    return;
  }
  int bid = -1;
  if (flags & IORING_CQE_F_BUFFER)
    bid = (int)(flags >> IORING_CQE_BUFFER_SHIFT);
  const char *buf = bid >= 0 ? u->bufs + (size_t)bid * u->buf_size : NULL;
  if (!(flags & IORING_CQE_F_MORE)) {
    if (!keep_armed(u, op, res)) {
      finish(u, op, res, buf);
      if (bid >= 0) give_back(u, (unsigned)bid);
      return;
    }
    u->base.st.rearms++;
    if (res == -EAGAIN) op->flags |= F_POLL_FIRST;
    pend(u, op, F_PEND_SUBMIT);
    if (res == -ENOBUFS) u->base.st.enobufs++;
    if (res < 0) return; /* nothing to deliver: the socket keeps its data */
  }
  u->base.st.completions++;
  op->cb(op, res, buf);
  if (bid >= 0) give_back(u, (unsigned)bid);
}

/* Copies the next CQE out and retires it before handling it, so a callback
 * may submit (or the handler re-enter) without confusing the iteration. */
static bool next_cqe(struct io_uring *r, struct io_uring_cqe *out) {
  unsigned head;
  struct io_uring_cqe *c;
  io_uring_for_each_cqe(r, head, c) {
    out->user_data = c->user_data;
    out->res = c->res;
    out->flags = c->flags;
    io_uring_cq_advance(r, 1);
    return true;
  }
  return false;
}

static int reap(uring_io *u) {
  int n = 0;
  struct io_uring_cqe c;
  while (next_cqe(&u->ring, &c)) {
    on_cqe(u, c.user_data, c.res, c.flags);
    n++;
  }
  return n;
}

/* Submits (or fails) what waits on the pend list. Returns the callbacks run. */
static int flush_pending(uring_io *u) {
  ty__io_op *op = u->pend_head;
  int n = 0;
  u->pend_head = u->pend_tail = NULL;
  while (op) {
    ty__io_op *next = op->next;
    unsigned f = op->flags;
    op->next = NULL;
    op->flags &= (uint8_t) ~(F_PEND_SUBMIT | F_PEND_CANCEL);
    if (f & F_PEND_SUBMIT) {
      if (op->state == TY__IO_CANCELLING || u->closing) {
        finish(u, op, -ECANCELED, NULL); /* it never reached the kernel */
        n++;
      } else {
        submit_op(u, op);
      }
    } else if (f & F_PEND_CANCEL) {
      submit_cancel(u, op);
    }
    op = next;
  }
  return n;
}

/* ---- waiting ----------------------------------------------------------- */

static void enter_wait(uring_io *u, int64_t timeout_ns) {
  struct __kernel_timespec ts, *tsp = NULL;
  if (timeout_ns > 0) {
    ts.tv_sec = timeout_ns / 1000000000;
    ts.tv_nsec = timeout_ns % 1000000000;
    tsp = &ts;
  }
  struct io_uring_cqe *cqe;
  /* -ETIME (the timer), -EINTR: the caller loops either way. */
  io_uring_submit_and_wait_timeout(&u->ring, &cqe, 1, tsp, NULL);
  u->base.st.enters++;
}

static int u_wait(ty__io *io, int64_t timeout_ns) {
  uring_io *u = (uring_io *)io;
  int n = flush_pending(u) + reap(u);
  if (timeout_ns != 0 && n == 0 && !u->pend_head) {
    enter_wait(u, timeout_ns);
  } else if (u->busy || io_uring_sq_ready(&u->ring)) {
    /* GETEVENTS even with nothing to submit: under DEFER_TASKRUN that is
     * what runs the completion work of everything in flight. */
    io_uring_submit_and_get_events(&u->ring);
    u->base.st.enters++;
  }
  n += reap(u);
  n += flush_pending(u);
  return n;
}

static void u_submit(ty__io *io) {
  uring_io *u = (uring_io *)io;
  if (!io_uring_sq_ready(&u->ring)) return;
  io_uring_submit(&u->ring);
  u->base.st.enters++;
}

/* ---- operations -------------------------------------------------------- */

static int u_accept(ty__io *io, ty__io_op *op, int fd) {
  return arm(io, op, TY__IO_ACCEPT, fd);
}

static int u_recv(ty__io *io, ty__io_op *op, int fd) {
  return arm(io, op, TY__IO_RECV, fd);
}

static int u_send(ty__io *io, ty__io_op *op, int fd, const void *buf,
                  size_t len) {
  op->buf = buf;
  op->len = len;
  return arm(io, op, TY__IO_SEND, fd);
}

static int u_connect(ty__io *io, ty__io_op *op, int fd) {
  return arm(io, op, TY__IO_CONNECT, fd);
}

static int u_recvmsg(ty__io *io, ty__io_op *op, int fd, struct msghdr *msg) {
  op->msg = msg;
  return arm(io, op, TY__IO_RECVMSG, fd);
}

static int u_sendmsg(ty__io *io, ty__io_op *op, int fd, struct msghdr *msg) {
  op->msg = msg;
  return arm(io, op, TY__IO_SENDMSG, fd);
}

/* One-shot POLL_ADD: the kernel checks the state when the request runs. */
static int u_poll(ty__io *io, ty__io_op *op, int fd, unsigned events) {
  op->len = events;
  return arm(io, op, TY__IO_POLL, fd);
}

static void u_cancel(ty__io *io, ty__io_op *op) {
  uring_io *u = (uring_io *)io;
  op->state = TY__IO_CANCELLING;
  /* Not in the kernel yet: flush_pending ends it without a request. */
  if (op->flags & F_PEND_SUBMIT) return;
  submit_cancel(u, op);
}

static void u_settle(ty__io *io, ty__io_op *op) {
  uring_io *u = (uring_io *)io;
  ty__io_cancel(io, op);
  for (;;) {
    flush_pending(u);
    reap(u);
    if (!ty__io_op_busy(op)) return;
    io_uring_submit_and_wait(&u->ring, 1);
    u->base.st.enters++;
  }
}

static void u_forget(ty__io *io, int fd) {
  (void)io; /* a ring keeps nothing per descriptor */
  (void)fd;
}

/* Cancels everything in flight and runs the final callbacks, with a bound
 * (5 s) in case the kernel never answers. A cancel (ANY: whatever
 * user_data; ALL: every match, not the first) goes out every 100 ms: the
 * ring may have had no room for the last one, or ops it flushed entered
 * after it. In between, short waits: with DEFER_TASKRUN a kernel runs a
 * few dozen completions per entry, so 10,000 connections at a stop need
 * many entries (tcp_spec). */
static void drain(uring_io *u) {
  u->closing = true;
  struct __kernel_timespec ts = {.tv_sec = 0, .tv_nsec = 1000000};
  for (int round = 0; round < 5000; round++) {
    flush_pending(u);
    reap(u);
    if (!u->busy && !ty__io_op_busy(&u->wake_op)) return;
    struct io_uring_sqe *s = round % 100 ? NULL : try_sqe(u);
    if (s) {
      io_uring_prep_cancel64(s, 0,
                             IORING_ASYNC_CANCEL_ANY | IORING_ASYNC_CANCEL_ALL);
      io_uring_sqe_set_data64(s, 0);
    }
    struct io_uring_cqe *cqe;
    io_uring_submit_and_wait_timeout(&u->ring, &cqe, 1, &ts, NULL);
  }
  fprintf(stderr, "tycho: io_uring: %u operation(s) did not end at close\n",
          u->busy);
}

static void u_free(ty__io *io) {
  uring_io *u = (uring_io *)io;
  drain(u);
  io_uring_queue_exit(&u->ring);
  if (u->br) munmap(u->br, u->br_bytes);
  free(u->bufs);
  free(u);
}

static const ty__io_vt uring_vt = {
    .name = "io_uring",
    .wait = u_wait,
    .submit = u_submit,
    .accept = u_accept,
    .recv = u_recv,
    .send = u_send,
    .connect = u_connect,
    .recvmsg = u_recvmsg,
    .sendmsg = u_sendmsg,
    .poll = u_poll,
    .cancel = u_cancel,
    .settle = u_settle,
    .forget = u_forget,
    .free = u_free,
};

/* ---- setup ------------------------------------------------------------- */

static int setup_bufs(uring_io *u, const ty__io_opts *o) {
  if (o->nbufs == 0 || (o->nbufs & (o->nbufs - 1)) || o->nbufs > 32768)
    return -EINVAL;
  u->nbufs = o->nbufs;
  u->buf_size = o->buf_size;
  u->br_bytes = u->nbufs * sizeof(struct io_uring_buf);
  void *mem = mmap(NULL, u->br_bytes, PROT_READ | PROT_WRITE,
                   MAP_ANONYMOUS | MAP_PRIVATE, -1, 0);
  if (mem == MAP_FAILED) return -errno;
  u->br = mem;
  io_uring_buf_ring_init(u->br);
  struct io_uring_buf_reg reg = {.ring_addr = (uintptr_t)mem,
                                 .ring_entries = u->nbufs,
                                 .bgid = BGID};
  int err = io_uring_register_buf_ring(&u->ring, &reg, 0);
  if (err) return err;
  u->bufs = ty__xmalloc((size_t)u->nbufs * u->buf_size);
  for (unsigned i = 0; i < u->nbufs; i++)
    io_uring_buf_ring_add(u->br, u->bufs + (size_t)i * u->buf_size, u->buf_size,
                          (unsigned short)i, (int)u->nbufs - 1, (int)i);
  io_uring_buf_ring_advance(u->br, (int)u->nbufs);
  return 0;
}

int ty__io_uring_new(int wake_fd, const ty__io_opts *o, ty__io **out) {
  uring_io *u = ty__xcalloc(1, sizeof *u);
  int err = setup(&u->ring, o->entries, g_flags);
  if (err < 0) {
    free(u);
    return err;
  }
  u->base.vt = &uring_vt;
  u->base.kind = TY_IO_URING;
  u->wake_fd = wake_fd;
  u->skip_cqe = u->ring.features & IORING_FEAT_CQE_SKIP;
  io_uring_register_ring_fd(&u->ring); /* cheaper enters; optional */
  if ((err = setup_bufs(u, o)) < 0) {
    io_uring_queue_exit(&u->ring);
    if (u->br) munmap(u->br, u->br_bytes);
    free(u->bufs);
    free(u);
    return err;
  }
  ty__io_op_start(&u->wake_op, TY__IO_WAKE, wake_fd);
  submit_op(u, &u->wake_op);
  io_uring_submit(&u->ring);
  *out = &u->base;
  return 0;
}
