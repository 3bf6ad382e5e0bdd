/*
 * io.c - the backend-independent part of io.h: choosing a backend, and the
 * wrappers that dispatch to it.
 */
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <unistd.h>

#include "io_impl.h"

int ty__io_kind_parse(const char *s) {
  if (!s || !*s || strcmp(s, "auto") == 0) return TY_IO_AUTO;
  if (strcmp(s, "uring") == 0 || strcmp(s, "io_uring") == 0) return TY_IO_URING;
  if (strcmp(s, "epoll") == 0) return TY_IO_EPOLL;
  return -1;
}

/* AUTO becomes the best backend available. */
static int resolve(int kind) {
  if (kind != TY_IO_AUTO) return kind;
  return ty__io_uring_usable() ? TY_IO_URING : TY_IO_EPOLL;
}

int ty__io_available(int kind) {
  switch (kind) {
  case TY_IO_EPOLL: return 1;
  case TY_IO_URING: return ty__io_uring_usable();
  default: return resolve(TY_IO_AUTO);
  }
}

int ty__io_new_ex(int wake_fd, int kind, const ty__io_opts *opts,
                  ty__io **out) {
  ty__io_opts o = {TY__IO_ENTRIES, TY__IO_NBUFS, TY__IO_BUF_SIZE};
  if (opts && opts->entries) o.entries = opts->entries;
  if (opts && opts->nbufs) o.nbufs = opts->nbufs;
  if (opts && opts->buf_size) o.buf_size = opts->buf_size;
  bool forced = kind != TY_IO_AUTO;
  kind = resolve(kind);
  if (kind == TY_IO_EPOLL) return ty__io_epoll_new(wake_fd, &o, out);
  if (kind != TY_IO_URING) return -EINVAL;
  int err = -ENOSYS;
  if (ty__io_uring_usable()) err = ty__io_uring_new(wake_fd, &o, out);
  if (err == 0) return 0;
  if (forced) return err;
  return ty__io_epoll_new(wake_fd, &o, out); /* AUTO: a late refusal */
}

int ty__io_new(int wake_fd, int kind, ty__io **out) {
  return ty__io_new_ex(wake_fd, kind, NULL, out);
}

void ty__io_free(ty__io *io) {
  if (io) io->vt->free(io);
}

int ty__io_wait(ty__io *io, int64_t timeout_ns) {
  return io->vt->wait(io, timeout_ns);
}

void ty__io_submit(ty__io *io) {
  if (io->vt->submit) io->vt->submit(io);
}

int ty__io_accept(ty__io *io, ty__io_op *op, int fd) {
  if (ty__io_op_busy(op)) return -EBUSY;
  return io->vt->accept(io, op, fd);
}

int ty__io_recv(ty__io *io, ty__io_op *op, int fd) {
  if (ty__io_op_busy(op)) return -EBUSY;
  return io->vt->recv(io, op, fd);
}

int ty__io_send(ty__io *io, ty__io_op *op, int fd, const void *buf,
                size_t len) {
  if (ty__io_op_busy(op)) return -EBUSY;
  return io->vt->send(io, op, fd, buf, len);
}

int ty__io_connect(ty__io *io, ty__io_op *op, int fd, const struct sockaddr *sa,
                   socklen_t len) {
  if (ty__io_op_busy(op)) return -EBUSY;
  if (len > sizeof op->addr) return -EINVAL;
  memcpy(&op->addr, sa, len);
  op->addrlen = len;
  return io->vt->connect(io, op, fd);
}

int ty__io_recvmsg(ty__io *io, ty__io_op *op, int fd, struct msghdr *msg) {
  if (ty__io_op_busy(op)) return -EBUSY;
  return io->vt->recvmsg(io, op, fd, msg);
}

int ty__io_sendmsg(ty__io *io, ty__io_op *op, int fd, struct msghdr *msg) {
  if (ty__io_op_busy(op)) return -EBUSY;
  return io->vt->sendmsg(io, op, fd, msg);
}

int ty__io_poll(ty__io *io, ty__io_op *op, int fd, unsigned events) {
  if (ty__io_op_busy(op)) return -EBUSY;
  events &= POLLIN | POLLOUT;
  if (!events) return -EINVAL;
  return io->vt->poll(io, op, fd, events);
}

void ty__io_cancel(ty__io *io, ty__io_op *op) {
  if (op->state == TY__IO_ARMED) io->vt->cancel(io, op);
}

void ty__io_settle(ty__io *io, ty__io_op *op) {
  if (ty__io_op_busy(op)) io->vt->settle(io, op);
}

void ty__io_forget(ty__io *io, int fd) { io->vt->forget(io, fd); }

int ty__io_close(ty__io *io, int fd) {
  if (io) io->vt->forget(io, fd);
  return close(fd) == 0 ? 0 : -errno;
}

const char *ty__io_name(const ty__io *io) { return io->vt->name; }
int ty__io_kind(const ty__io *io) { return io->kind; }

void ty__io_stats_get(const ty__io *io, ty__io_stats *out) { *out = io->st; }
