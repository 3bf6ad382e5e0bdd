/*
 * io_impl.h - what the two backends share with io.c (internal to them).
 *
 * A backend's struct starts with a ty__io header whose vtable io.c calls
 * through; the op functions of io.h are thin wrappers. One indirect call per
 * operation is noise next to the system call behind it.
 */
#ifndef TY_IO_IMPL_H
#define TY_IO_IMPL_H

#include "io.h"

typedef struct ty__io_vt {
  const char *name;
  int (*wait)(ty__io *io, int64_t timeout_ns);
  void (*submit)(ty__io *io); /* NULL: nothing to submit (epoll) */
  int (*accept)(ty__io *io, ty__io_op *op, int fd);
  int (*recv)(ty__io *io, ty__io_op *op, int fd);
  int (*send)(ty__io *io, ty__io_op *op, int fd, const void *buf, size_t len);
  int (*connect)(ty__io *io, ty__io_op *op, int fd);
  int (*recvmsg)(ty__io *io, ty__io_op *op, int fd, struct msghdr *msg);
  int (*sendmsg)(ty__io *io, ty__io_op *op, int fd, struct msghdr *msg);
  int (*poll)(ty__io *io, ty__io_op *op, int fd, unsigned events);
  void (*cancel)(ty__io *io, ty__io_op *op);
  void (*settle)(ty__io *io, ty__io_op *op);
  void (*forget)(ty__io *io, int fd);
  void (*free)(ty__io *io);
} ty__io_vt;

struct ty__io {
  const ty__io_vt *vt;
  int kind;
  ty__io_stats st; /* owner thread only */
};

/* Defaults of ty__io_opts. */
#define TY__IO_ENTRIES 1024
#define TY__IO_NBUFS 1024
#define TY__IO_BUF_SIZE 4096

/* io_uring.c: 0 or a negative errno. */
int ty__io_uring_new(int wake_fd, const ty__io_opts *o, ty__io **out);
/* Does this kernel give io_uring.c what it needs? Probed once. */
bool ty__io_uring_usable(void);
/* io_epoll.c */
int ty__io_epoll_new(int wake_fd, const ty__io_opts *o, ty__io **out);

/* Marks op busy with the given kind on fd (shared by both backends). */
static inline void ty__io_op_start(ty__io_op *op, int kind, int fd) {
  op->kind = (uint8_t)kind;
  op->fd = fd;
  op->state = TY__IO_ARMED;
  op->flags = 0;
  op->next = NULL;
}

#endif
