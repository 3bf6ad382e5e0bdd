/*
 * io.h - the per-worker I/O backend contract (in the spirit of Redis ae.c:
 * one small interface, interchangeable implementations).
 *
 * Each worker owns one ty__io: an io_uring (io_uring.c) or an epoll set
 * (io_epoll.c), picked once at ty__io_new. The worker parks inside
 * ty__io_wait (with its next timer as the timeout) and is woken through its
 * eventfd, which the backend keeps armed (a read in the ring, a registration
 * in the epoll set).
 *
 * Operations. The caller owns a ty__io_op (usually inside its connection
 * object), sets op->cb and op->ud, and arms it with one of the functions
 * below on a non-blocking socket. Completions run op->cb on the worker's
 * thread, from inside ty__io_wait or ty__io_settle, never from inside the
 * function that armed or cancelled the op. A callback typically stores the
 * result and calls ty_actor_wake() on the actor that waits for it; it may
 * arm, cancel or re-arm any op, its own included.
 *
 * Lifetime: an op is busy from the call that arms it until its *final*
 * callback. Accept and recv are multishot: their callbacks keep coming with
 * the op still armed (ty__io_op_armed() is true inside the callback) until
 * an error, end of file, or a cancel ends them; send, connect, recvmsg and
 * sendmsg call back once. During the final callback the op is already idle,
 * so the callback may re-arm it or free it. The op's memory (and a send's
 * buffer, a recvmsg's or sendmsg's header) must stay valid while it is busy;
 * ty__io_cancel does not shorten that.
 *
 * Results are what the system call would return: a count or a descriptor,
 * or a negative errno. -ECANCELED means the op was cancelled.
 *
 * Every function here must be called on the thread that created the
 * backend (io_uring's SINGLE_ISSUER and the epoll state are single-threaded).
 */
#ifndef TY_IO_H
#define TY_IO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "base/common.h"

typedef struct ty__io ty__io;
typedef struct ty__io_op ty__io_op;

enum { TY_IO_AUTO = 0, TY_IO_URING = 1, TY_IO_EPOLL = 2 };

/* Op kinds and states (backend-private, but visible for the inline helpers). */
enum {
  TY__IO_ACCEPT = 1,
  TY__IO_RECV,
  TY__IO_SEND,
  TY__IO_CONNECT,
  TY__IO_RECVMSG, /* one datagram in */
  TY__IO_SENDMSG, /* one datagram out */
  TY__IO_WAKE,    /* io_uring: the eventfd read */
  TY__IO_POLL     /* readiness of a descriptor someone else reads */
};
enum { TY__IO_IDLE = 0, TY__IO_ARMED, TY__IO_CANCELLING };

/*
 * A completion callback. res: see above. data: for recv, the res bytes
 * received; they are valid only until the callback returns (the backend
 * reuses the buffer). NULL for the other kinds.
 */
typedef void (*ty__io_cb)(ty__io_op *op, int res, const char *data);

struct ty__io_op {
  ty__io_cb cb; /* set by the caller before arming */
  void *ud;     /* the caller's */
  /* ---- private to the backend: zero it once, then leave it alone ---- */
  ty__io_op *next; /* pending list (epoll; io_uring re-arms) */
  int fd;
  uint8_t kind;  /* TY__IO_* */
  uint8_t state; /* TY__IO_IDLE / ARMED / CANCELLING */
  uint8_t flags; /* backend bookkeeping */
  int res;       /* a result waiting for delivery (epoll) */
  union {
    const char *buf;    /* send: the bytes */
    struct msghdr *msg; /* recvmsg / sendmsg: the caller's header */
  };
  size_t len;
  struct sockaddr_storage addr; /* connect: the peer */
  socklen_t addrlen;
};

/* Knobs, mostly for tests. Zero fields take the defaults. */
typedef struct ty__io_opts {
  unsigned entries;  /* io_uring submission queue size (default 1024) */
  unsigned nbufs;    /* provided receive buffers, a power of 2 (1024) */
  unsigned buf_size; /* bytes per receive buffer (4096; epoll reads this much
                        per call, times 16) */
} ty__io_opts;

/* Counters of one backend (tests read them; tycho.stats could). */
typedef struct ty__io_stats {
  uint64_t enters;      /* system calls that submit or wait */
  uint64_t completions; /* callbacks run */
  uint64_t rearms;      /* multishot ops the backend re-armed by itself */
  uint64_t enobufs;     /* recv completions that found no buffer (io_uring) */
  uint64_t wakes;       /* eventfd wakes seen */
} ty__io_stats;

/*
 * ty__io_new - create the I/O backend of a worker.
 *
 * wake_fd is the eventfd the worker's unparkers write; the backend watches
 * it, and ty__io_wait returns once it becomes readable.
 * kind: TY_IO_URING or TY_IO_EPOLL force a backend; TY_IO_AUTO takes
 * io_uring when the kernel offers what this backend needs (kernel 6.0+:
 * multishot receive, provided buffer rings), epoll when not. (Settings such
 * as TYCHO_IO are the caller's business: the backend reads no environment.)
 * io_uring is set up with SINGLE_ISSUER, DEFER_TASKRUN and COOP_TASKRUN,
 * each kept if the kernel accepts it (they are probed one at a time).
 * Must run on the thread that will use the backend.
 * Returns 0 and sets *out, or a negative errno (io_uring forced but
 * unavailable: -ENOSYS, or the setup error).
 */
int ty__io_new(int wake_fd, int kind, ty__io **out);

/* ty__io_new with knobs (opts may be NULL). */
int ty__io_new_ex(int wake_fd, int kind, const ty__io_opts *opts, ty__io **out);

/*
 * ty__io_free - destroy a backend.
 *
 * Every op still busy is cancelled and its final callback runs (with
 * -ECANCELED, or its real result if it finished first) before the backend
 * goes away, so callers can release what their ops hold. Descriptors are
 * not closed: they belong to the callers.
 */
void ty__io_free(ty__io *io);

/*
 * ty__io_wait - submit, wait, and run completions.
 *
 * Submits what is queued, then waits up to timeout_ns (-1: until woken; 0:
 * do not block) for a completion or a write to the wake eventfd, and runs
 * the callbacks of every completion that arrived. Returns how many
 * callbacks ran. With io_uring and DEFER_TASKRUN the kernel posts
 * completions only while the owner is inside io_uring_enter, so the worker
 * calls this with timeout 0 every `budget` polls; with timeout 0 it enters
 * the kernel (GETEVENTS) whenever an op is busy or a submission is queued.
 * A wait may return early (a signal, a spurious wake); callers loop.
 */
int ty__io_wait(ty__io *io, int64_t timeout_ns);

/*
 * ty__io_submit - hand what is queued to the kernel now, without waiting and
 * without running callbacks (those still come from ty__io_wait). io_uring:
 * one io_uring_enter when submission entries are queued (a send on a socket
 * with room completes inside it); epoll: nothing to do. For a caller that
 * wants queued work (a write-behind send) out before something else, e.g.
 * closing the socket.
 */
void ty__io_submit(ty__io *io);

/*
 * ty__io_accept - accept connections on a listening socket, multishot.
 *
 * Each accepted connection calls back with its descriptor (non-blocking,
 * close-on-exec), the op still armed. The op ends on an error (EMFILE,
 * ENFILE, ENOMEM, the socket shut down: EINVAL) or a cancel. Returns 0, or
 * -EBUSY if op is busy, or another negative errno (nothing armed then).
 */
int ty__io_accept(ty__io *io, ty__io_op *op, int fd);

/*
 * ty__io_recv - receive from a stream socket, multishot.
 *
 * Each arrival calls back with (bytes, data), the op still armed. With
 * io_uring the data lands in a buffer of the ring's provided-buffer ring; a
 * burst that finds the buffer ring empty (-ENOBUFS), or a completion that
 * comes without IORING_CQE_F_MORE while the socket is fine, is re-armed by
 * the backend without a callback, so the caller sees one long-lived op. It
 * ends with res 0 at end of file, a negative errno on error, or
 * -ECANCELED. Returns 0, -EBUSY, or a negative errno.
 */
int ty__io_recv(ty__io *io, ty__io_op *op, int fd);

/*
 * ty__io_send - send up to len bytes of buf, once.
 *
 * Calls back once with the bytes the kernel took (possibly fewer than len:
 * arm it again for the rest) or a negative errno; it waits for room in the
 * socket buffer without blocking the worker. buf must stay valid until the
 * callback. SIGPIPE is never raised (MSG_NOSIGNAL). Returns 0, -EBUSY, or
 * a negative errno.
 */
int ty__io_send(ty__io *io, ty__io_op *op, int fd, const void *buf, size_t len);

/*
 * ty__io_connect - connect a non-blocking stream socket to sa.
 *
 * Calls back once with 0 when connected, or a negative errno
 * (-ECONNREFUSED, -ENETUNREACH, ...). The address is copied. Returns 0,
 * -EBUSY, -EINVAL (address too long), or a negative errno.
 */
int ty__io_connect(ty__io *io, ty__io_op *op, int fd, const struct sockaddr *sa,
                   socklen_t len);

/*
 * ty__io_recvmsg - receive one datagram, once.
 *
 * For datagram sockets (UDP): calls back once with recvmsg's result, the
 * datagram's length (MSG_TRUNC set in msg->msg_flags when it was longer
 * than msg's buffers, which then hold its head), or a negative errno. The
 * sender's address lands in msg->msg_name (msg_namelen updated). It waits
 * for a datagram without blocking the worker. msg, its name, iovecs and
 * buffers belong to the caller and must stay valid until the callback; the
 * data parameter of the callback is NULL (the bytes are in msg's buffers).
 * A cancel that loses the race to an arrival delivers that datagram (its
 * length), so a caller that cancels must still look at the result. Returns
 * 0, -EBUSY, or a negative errno.
 */
int ty__io_recvmsg(ty__io *io, ty__io_op *op, int fd, struct msghdr *msg);

/*
 * ty__io_sendmsg - send one datagram, once.
 *
 * Calls back once with sendmsg's result (the datagram's length) or a
 * negative errno (-EMSGSIZE for one the protocol cannot carry); it waits
 * for room in the socket buffer without blocking the worker. msg and what
 * it points at must stay valid until the callback. SIGPIPE is never raised.
 * Returns 0, -EBUSY, or a negative errno.
 */
int ty__io_sendmsg(ty__io *io, ty__io_op *op, int fd, struct msghdr *msg);

/*
 * ty__io_poll - wait until fd is ready, once.
 *
 * For a descriptor that a library reads and writes itself (libpq: the
 * binding only learns when to call it again). events: POLLIN and/or
 * POLLOUT. Calls back once with the poll(2) revents (POLLIN, POLLOUT,
 * POLLERR, POLLHUP) or a negative errno. The readiness is checked when the
 * op runs, never taken from an older edge: a library that drained the
 * socket since does not get a spurious wake. Returns 0, -EBUSY (epoll: an
 * op already waits in that direction), or a negative errno.
 */
int ty__io_poll(ty__io *io, ty__io_op *op, int fd, unsigned events);

/*
 * ty__io_cancel - ask a busy op to end.
 *
 * Returns at once; the final callback comes later, from ty__io_wait, with
 * -ECANCELED or the result the op reached first (a multishot op may also
 * deliver completions that were already under way). A no-op on an idle op
 * or one already being cancelled.
 */
void ty__io_cancel(ty__io *io, ty__io_op *op);

/*
 * ty__io_settle - cancel op and wait until its final callback has run.
 *
 * Runs any other completions that arrive meanwhile, so it must not be
 * called from inside a callback. For handing a socket to another worker:
 * after settle (of every op on it) and ty__io_forget, nothing of this
 * backend refers to the socket.
 */
void ty__io_settle(ty__io *io, ty__io_op *op);

/*
 * ty__io_forget - drop what the backend keeps about fd (its epoll
 * registration), without closing it. No op may be busy on fd.
 */
void ty__io_forget(ty__io *io, int fd);

/* ty__io_close - ty__io_forget, then close(fd). Returns close's 0 or -errno. */
int ty__io_close(ty__io *io, int fd);

/* Is op busy (armed or being cancelled)? */
static inline bool ty__io_op_busy(const ty__io_op *op) {
  return op->state != TY__IO_IDLE;
}

/* Is op armed (busy and not being cancelled)? Inside a multishot callback:
 * will more callbacks come? */
static inline bool ty__io_op_armed(const ty__io_op *op) {
  return op->state == TY__IO_ARMED;
}

/* "io_uring" or "epoll". */
const char *ty__io_name(const ty__io *io);

/* TY_IO_URING or TY_IO_EPOLL. */
int ty__io_kind(const ty__io *io);

/* Copies the backend's counters into *out. */
void ty__io_stats_get(const ty__io *io, ty__io_stats *out);

/*
 * ty__io_available - can a backend of this kind be created here?
 * TY_IO_EPOLL: always. TY_IO_URING: the kernel and its settings (seccomp,
 * kernel.io_uring_disabled) allow an io_uring with what the backend needs.
 * TY_IO_AUTO: what TY_IO_AUTO would pick (TY_IO_URING or TY_IO_EPOLL).
 * The probe runs once per process.
 */
int ty__io_available(int kind);

/* Parses "uring", "epoll" or "auto" (NULL: auto). Returns TY_IO_* or -1. */
int ty__io_kind_parse(const char *s);

#endif
