/*
 * ltcp.c - tycho.tcp: connections and listeners on the worker's backend.
 *
 * A connection (lt_conn) lives on one worker at a time: its ops are armed
 * on that worker's ty__io and only that worker touches it, so it needs no
 * atomics. It is reference counted (the Lua userdata, each busy op, each
 * waiting actor) and freed when the last one goes; closing it cancels its
 * ops and closes the descriptor once they have ended. Its owner (an actor)
 * lists it among its resources, so an actor that dies closes what it owns.
 *
 * Reading: a multishot recv is armed at the first read and stays armed;
 * what arrives is appended to the connection's buffer (the backend's buffer
 * goes straight back), and a waiting reader is woken only once its request
 * (n bytes, a line, everything) can be answered. Above READ_HIGH buffered
 * bytes that nobody asked for yet, the recv is cancelled, and armed again
 * when a read drains the buffer: a slow reader pushes back on the peer.
 *
 * Writing: one send() straight from the Lua string; what the kernel did not
 * take is copied to the connection and sent by a backend op while the
 * writer waits. The worker never blocks.
 *
 * Moving: a connection inside a message (or spawn arguments) travels as a
 * token of the transit table (lnet.c). Once the sender's encode succeeds
 * the connection leaves its worker: its recv is settled, the backend
 * forgets the descriptor and the sender's userdata goes empty (reads then
 * say "closed"). The receiver's decode adopts it on its own worker. A
 * listener is shared instead: every copy refers to the same listener.
 *
 * Listening: a listener is one socket, shared by every actor that holds a
 * copy. Each worker on which an actor accepts keeps a multishot accept
 * armed on it; each accepted descriptor goes to the actor that has waited
 * longest, on whatever worker (a nudge message wakes it there), or to a
 * queue when nobody waits. So connections spread over the acceptors of
 * every worker in turn, whichever worker's ring the kernel woke (it wakes
 * only one: io_uring's accept polls are exclusive), and none is stranded
 * on a worker where nobody accepts (as with one SO_REUSEPORT socket per
 * worker, where the kernel picks the socket by hash). Only the creator
 * closes the listener for everyone (close(), or its death): waiters hear
 * "closed" and a shutdown ends each worker's accept op on its worker.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "ltcp.h"

#define DEFAULT_TIMEOUT_NS (60 * (int64_t)1000000000)
#define READ_HIGH (256 * 1024) /* buffered bytes that pause the recv */
#define ACCEPT_QUEUE 64        /* accepted, untaken: pause accepting */
#define DEFAULT_BACKLOG 511
#define LT_EOF 1 /* rerr: the peer closed its side */

enum { RM_COUNT = 0, RM_LINE, RM_ALL, RM_SOME };

/* ---- connections: the C object ----------------------------------------- */

typedef struct lt_conn {
  lt_res res; /* in the owner's resources: first, for the cast back */
  int fd;
  int refs;         /* userdata + busy ops + waiting actors */
  ty_worker *w;     /* home worker; NULL in transit */
  ty__io *io;
  lt_actor *owner;  /* whose resources list it */
  ty__io_op rop, wop;
  char *rb;         /* received, not read yet: rb[r0..r1) */
  size_t r0, r1, rcap, scan; /* scan: "*l" looked for '\n' up to here */
  int rerr;         /* 0, LT_EOF or -errno: after the buffered bytes */
  ty_actor *reader, *writer;
  uint8_t rmode;
  size_t rwant;
  char *wb;         /* unsent bytes of the current write: wb[woff..wlen) */
  size_t woff, wlen, wcap, wdirect; /* wdirect: sent before the op */
  int werr;         /* sticky: a failed (or timed out) write */
  int cres;         /* connect's result */
  bool connecting, closed;
  bool moving;      /* leaving this worker: no re-arming */
  int64_t t_connect, t_send, t_read;
} lt_conn;

typedef struct conn_ud {
  lt_conn *c; /* NULL: closed here, or moved to another actor */
} conn_ud;

static void conn_unref(lt_conn *c) {
  if (--c->refs > 0) return;
  ty__assert(c->closed && c->fd < 0);
  free(c->rb);
  free(c->wb);
  free(c);
}

/* Closes the descriptor once closed and no op is busy any more. */
static void conn_try_release(lt_conn *c) {
  if (!c->closed || c->fd < 0) return;
  if (ty__io_op_busy(&c->rop) || ty__io_op_busy(&c->wop)) return;
  if (c->io) ty__io_close(c->io, c->fd);
  else close(c->fd);
  c->fd = -1;
}

static void conn_op_done(lt_conn *c) {
  conn_try_release(c);
  conn_unref(c);
}

/* Closes c (idempotent): waiters wake and hear "closed", ops are cancelled,
 * the owner forgets it. The memory goes with the last reference. */
static void conn_close(lt_conn *c) {
  if (c->closed) return;
  c->closed = true;
  if (c->owner) lt_res_remove(c->owner, &c->res);
  c->owner = NULL;
  if (c->reader) ty_actor_wake(c->reader);
  if (c->writer) ty_actor_wake(c->writer);
  if (c->io) {
    ty__io_cancel(c->io, &c->rop);
    ty__io_cancel(c->io, &c->wop);
  }
  conn_try_release(c);
}

static void conn_res_close(lt_res *r) { conn_close((lt_conn *)r); }

static void on_recv(ty__io_op *op, int res, const char *data);
static void on_write(ty__io_op *op, int res, const char *data);

/* A connection on the calling worker, owned by `owner` (may be NULL). */
static lt_conn *conn_new(int fd, lt_actor *owner) {
  lt_conn *c = ty__xcalloc(1, sizeof *c);
  c->fd = fd;
  c->w = ty_worker_current();
  c->io = ty_worker_io(c->w);
  c->rop.cb = on_recv;
  c->wop.cb = on_write;
  c->rop.ud = c->wop.ud = c;
  c->res.close = conn_res_close;
  c->t_connect = c->t_send = c->t_read = DEFAULT_TIMEOUT_NS;
  c->owner = owner;
  if (owner) lt_res_add(owner, &c->res);
  return c;
}

/* ---- connections: reading ---------------------------------------------- */

static size_t avail(const lt_conn *c) { return c->r1 - c->r0; }

/* The first '\n' buffered, or NULL; what was searched is not searched
 * again (`scan`), so a long line costs one pass. */
static char *find_nl(lt_conn *c) {
  if (c->scan < c->r0) c->scan = c->r0;
  if (c->scan >= c->r1) return NULL;
  char *nl = memchr(c->rb + c->scan, '\n', c->r1 - c->scan);
  if (!nl) c->scan = c->r1;
  return nl;
}

/* Can the waiting reader's request be answered now? */
static bool read_ready(lt_conn *c) {
  if (c->closed || c->rerr) return true;
  switch (c->rmode) {
  case RM_COUNT:
    return avail(c) >= c->rwant;
  case RM_SOME:
    return avail(c) > 0;
  case RM_LINE:
    return find_nl(c) != NULL;
  default:
    return false; /* "*a" ends only with the stream */
  }
}

/* Room for n more bytes at r1: slide the unread bytes down or grow. */
static void rb_reserve(lt_conn *c, size_t n) {
  if (c->rcap - c->r1 >= n) return;
  size_t used = avail(c);
  if (c->r0 && c->rcap - used >= n && used < c->rcap / 2) {
    memmove(c->rb, c->rb + c->r0, used);
  } else {
    size_t cap = c->rcap ? c->rcap : 4096;
    while (cap - used < n) cap *= 2;
    char *nb = ty__xmalloc(cap);
    if (used) memcpy(nb, c->rb + c->r0, used);
    free(c->rb);
    c->rb = nb;
    c->rcap = cap;
  }
  c->scan -= c->scan >= c->r0 ? c->r0 : c->scan;
  c->r1 = used;
  c->r0 = 0;
}

/* Does a waiting reader need more than the buffer holds? Then keep the
 * recv going whatever the buffer's size. */
static bool reader_hungry(const lt_conn *c) {
  if (!c->reader) return false;
  if (c->rmode == RM_COUNT) return avail(c) < c->rwant;
  return c->rmode != RM_SOME || avail(c) == 0;
}

static bool want_recv(const lt_conn *c) {
  return !c->closed && !c->rerr && !c->moving && c->io &&
         (avail(c) < READ_HIGH || reader_hungry(c));
}

/* Arms the recv if the connection should be reading and is not. */
static void ensure_recv(lt_conn *c) {
  if (ty__io_op_busy(&c->rop) || !want_recv(c)) return;
  int err = ty__io_recv(c->io, &c->rop, c->fd);
  if (err) c->rerr = err;
  else c->refs++;
}

static void on_recv(ty__io_op *op, int res, const char *data) {
  lt_conn *c = op->ud;
  bool final = !ty__io_op_busy(op);
  if (res > 0 && !c->closed) {
    rb_reserve(c, (size_t)res);
    memcpy(c->rb + c->r1, data, (size_t)res);
    c->r1 += (size_t)res;
  } else if (res == 0) {
    c->rerr = LT_EOF;
  } else if (res < 0 && res != -ECANCELED) {
    c->rerr = res;
  }
  if (c->reader && read_ready(c)) ty_actor_wake(c->reader);
  if (!final) {
    /* Nobody asked for this much yet: let the peer wait. */
    if (avail(c) >= READ_HIGH && !reader_hungry(c)) ty__io_cancel(c->io, op);
    return;
  }
  if (res == -ECANCELED) ensure_recv(c); /* paused, but wanted again since */
  conn_op_done(c);
}

/* Pushes the consumed bytes rb[r0..r0+n) and drops them from the buffer. */
static void take(lua_State *L, lt_conn *c, size_t n, size_t skip) {
  lua_pushlstring(L, c->rb ? c->rb + c->r0 : "", n); /* no buffer yet: "" */
  c->r0 += n + skip;
  if (c->r0 == c->r1) c->r0 = c->r1 = c->scan = 0;
}

/* nil, token, partial (everything buffered); returns 3 (read_some: 2,
 * it never has a partial). */
static int read_fail(lua_State *L, lt_conn *c, const char *token) {
  lua_pushnil(L);
  lua_pushstring(L, token);
  if (c->rmode == RM_SOME) return 2;
  if (c->closed) lua_pushliteral(L, "");
  else take(L, c, avail(c), 0);
  return 3;
}

static const char *rerr_token(const lt_conn *c) {
  if (c->closed || c->rerr == LT_EOF) return "closed";
  return lt_net_errtok(c->rerr);
}

/* Answers a read from the buffer if it can: pushes the results and
 * returns their count, or returns -1 (more bytes needed). */
static int read_now(lua_State *L, lt_conn *c, int mode, size_t want) {
  if (c->closed) return read_fail(L, c, "closed");
  if (mode == RM_COUNT && avail(c) >= want) {
    take(L, c, want, 0);
    return 1;
  }
  if (mode == RM_SOME && avail(c)) {
    take(L, c, avail(c) < want ? avail(c) : want, 0);
    return 1;
  }
  if (mode == RM_LINE) {
    char *nl = find_nl(c); /* lines buffered before an end come first */
    if (nl) {
      size_t n = (size_t)(nl - (c->rb + c->r0));
      size_t cr = n && nl[-1] == '\r';
      take(L, c, n - cr, 1 + cr);
      return 1;
    }
  }
  if (mode == RM_ALL && c->rerr == LT_EOF) {
    take(L, c, avail(c), 0);
    return 1;
  }
  if (c->rerr) return read_fail(L, c, rerr_token(c));
  return -1;
}

/* After a read took bytes: the recv may resume (it pauses when full). */
static int read_done(lt_conn *c, int n) {
  ensure_recv(c);
  return n;
}

static int read_wake(lua_State *co, ty_actor *a, lt_actor *la, bool timed_out) {
  lt_conn *c = la->ext_ctx;
  int n = read_now(co, c, c->rmode, c->rwant);
  if (n < 0 && !timed_out) return lt_net_rewait(a, la);
  c->reader = NULL;
  la->ext_cancel = NULL;
  if (n < 0) n = read_fail(co, c, "timeout");
  else read_done(c, n);
  conn_unref(c);
  return n;
}

static void read_cancel(ty_actor *a, lt_actor *la) {
  (void)a;
  lt_conn *c = la->ext_ctx;
  c->reader = NULL;
  conn_unref(c);
}

/* ---- connections: writing and connecting ------------------------------- */

static void wake_writer(lt_conn *c) {
  if (c->writer) ty_actor_wake(c->writer);
}

static void on_write(ty__io_op *op, int res, const char *data) {
  (void)data;
  lt_conn *c = op->ud;
  if (c->connecting) {
    c->connecting = false;
    c->cres = res;
  } else if (res > 0) {
    c->woff += (size_t)res;
    if (c->woff < c->wlen && !c->closed && !c->werr) {
      int err =
          ty__io_send(c->io, op, c->fd, c->wb + c->woff, c->wlen - c->woff);
      if (!err) return; /* the op's reference carries over */
      c->werr = err;
    }
  } else if (!c->werr) {
    c->werr = res ? res : -EPIPE;
  }
  wake_writer(c);
  conn_op_done(c);
}

static size_t sent_total(const lt_conn *c) { return c->wdirect + c->woff; }

static int write_fail(lua_State *L, lt_conn *c, const char *token) {
  lua_pushnil(L);
  lua_pushstring(L, token);
  lua_pushnumber(L, (lua_Number)sent_total(c));
  return 3;
}

static int write_wake(lua_State *co, ty_actor *a, lt_actor *la,
                      bool timed_out) {
  lt_conn *c = la->ext_ctx;
  int n;
  if (c->closed) {
    n = write_fail(co, c, "closed");
  } else if (c->werr) {
    n = write_fail(co, c, lt_net_errtok(c->werr));
  } else if (c->woff >= c->wlen && !ty__io_op_busy(&c->wop)) {
    lua_pushboolean(co, 1);
    n = 1;
  } else if (!timed_out) {
    return lt_net_rewait(a, la);
  } else {
    /* The stream is cut mid-message: later writes fail too. */
    c->werr = -ETIMEDOUT;
    ty__io_cancel(c->io, &c->wop);
    n = write_fail(co, c, "timeout");
  }
  c->writer = NULL;
  la->ext_cancel = NULL;
  conn_unref(c);
  return n;
}

static void write_cancel(ty_actor *a, lt_actor *la) {
  (void)a;
  lt_conn *c = la->ext_ctx;
  c->writer = NULL;
  conn_unref(c);
}

/* ---- connections: Lua methods ------------------------------------------ */

static void push_conn(lua_State *L, lt_conn *c) {
  conn_ud *u = lua_newuserdata(L, sizeof *u);
  u->c = c;
  if (c) c->refs++;
  lt_tcp_metatables(L);
  lua_getfield(L, LUA_REGISTRYINDEX, LT_CONN_MT);
  lua_setmetatable(L, -2);
}

static conn_ud *check_conn_ud(lua_State *L) {
  return luaL_checkudata(L, 1, LT_CONN_MT);
}

/* The open connection at 1, or NULL (closed or moved). */
static lt_conn *check_conn(lua_State *L) {
  conn_ud *u = check_conn_ud(L);
  if (u->c && u->c->closed) return NULL;
  return u->c;
}

static int parse_pattern(lua_State *L, int idx, size_t *want) {
  if (lua_isnoneornil(L, idx)) return RM_LINE;
  if (lua_type(L, idx) == LUA_TNUMBER) {
    lua_Number n = lua_tonumber(L, idx);
    if (!(n >= 0) || n != (lua_Number)(size_t)n)
      luaL_error(L, "tycho.tcp: read wants a byte count >= 0, \"*l\" or "
                 "\"*a\"");
    *want = (size_t)n;
    return RM_COUNT;
  }
  const char *p = luaL_checkstring(L, idx);
  if (*p == '*') p++;
  if (*p == 'l') return RM_LINE;
  if (*p == 'a') return RM_ALL;
  luaL_error(L, "tycho.tcp: unknown read pattern '%s' (use a byte count, "
             "\"*l\" or \"*a\")", lua_tostring(L, idx));
  return 0;
}

/* conn:read(n | "*l" | "*a" [, timeout]) -> data | nil, err, partial */
static int l_read(lua_State *L) {
  lt_conn *c = check_conn(L);
  size_t want = 0;
  int mode = parse_pattern(L, 2, &want);
  if (!c) return read_fail(L, &(lt_conn){.closed = true}, "closed");
  ty_actor *a = lt_net_actor(L, "tcp read");
  int64_t tmo = lt_net_timeout(L, 3, c->t_read, "tcp read");
  if (c->reader) return lt_net_fail(L, "busy");
  c->rmode = (uint8_t)mode;
  c->rwant = want;
  int n = read_now(L, c, mode, want);
  if (n >= 0) return read_done(c, n);
  if (tmo == 0) { /* a poll: nothing yet, but start receiving */
    ensure_recv(c);
    return read_fail(L, c, "timeout");
  }
  c->reader = a; /* first: a hungry reader keeps the recv going */
  ensure_recv(c);
  if (c->rerr) { /* the recv could not be armed: answer now */
    c->reader = NULL;
    return read_now(L, c, mode, want);
  }
  lt_actor *la = a->user;
  c->refs++;
  la->ext_cancel = read_cancel;
  return lt_yield_ext(L, "tcp read", read_wake, c, tmo);
}

/* conn:read_some(max [, timeout]) -> 1..max bytes, as soon as any have
 * arrived | nil, err */
static int l_read_some(lua_State *L) {
  lt_conn *c = check_conn(L);
  lua_Number max = luaL_checknumber(L, 2);
  if (!(max >= 1) || max != (lua_Number)(size_t)max)
    return luaL_error(L, "tycho.tcp: read_some wants a byte count >= 1");
  if (!c) return lt_net_fail(L, "closed");
  ty_actor *a = lt_net_actor(L, "tcp read_some");
  int64_t tmo = lt_net_timeout(L, 3, c->t_read, "tcp read_some");
  if (c->reader) return lt_net_fail(L, "busy");
  c->rmode = RM_SOME;
  c->rwant = (size_t)max;
  int n = read_now(L, c, RM_SOME, c->rwant);
  if (n >= 0) return read_done(c, n);
  if (tmo == 0) {
    ensure_recv(c);
    return lt_net_fail(L, "timeout");
  }
  c->reader = a;
  ensure_recv(c);
  if (c->rerr) {
    c->reader = NULL;
    return read_now(L, c, RM_SOME, c->rwant);
  }
  lt_actor *la = a->user;
  c->refs++;
  la->ext_cancel = read_cancel;
  return lt_yield_ext(L, "tcp read_some", read_wake, c, tmo);
}

/* Gathers the write's arguments: one string is used in place, several are
 * joined into the connection's buffer. */
static const char *write_data(lua_State *L, lt_conn *c, size_t *len) {
  int top = lua_gettop(L);
  if (top == 2) return luaL_checklstring(L, 2, len);
  size_t total = 0;
  for (int i = 2; i <= top; i++) {
    size_t n;
    luaL_checklstring(L, i, &n);
    total += n;
  }
  if (c->wcap < total) {
    free(c->wb);
    c->wcap = total;
    c->wb = ty__xmalloc(total);
  }
  for (int i = 2, off = 0; i <= top; i++) {
    size_t n;
    const char *s = lua_tolstring(L, i, &n);
    memcpy(c->wb + off, s, n);
    off += (int)n;
  }
  *len = total;
  return c->wb;
}

/* Copies data[from..len) for the send op, unless it is already there. */
static void stage(lt_conn *c, const char *data, size_t from, size_t len) {
  if (data == c->wb) {
    memmove(c->wb, c->wb + from, len - from);
  } else {
    if (c->wcap < len - from) {
      free(c->wb);
      c->wcap = len - from;
      c->wb = ty__xmalloc(c->wcap);
    }
    memcpy(c->wb, data + from, len - from);
  }
  c->woff = 0;
  c->wlen = len - from;
  c->wdirect = from;
}

/* conn:write(data, ...) -> true | nil, err, bytes_sent */
static int l_write(lua_State *L) {
  lt_conn *c = check_conn(L);
  if (!c) return lt_net_fail(L, "closed");
  ty_actor *a = lt_net_actor(L, "tcp write");
  if (c->writer) return lt_net_fail(L, "busy");
  c->woff = c->wlen = c->wdirect = 0;
  /* Before write_data: a cancelled send may still read the buffer. */
  if (c->werr) return write_fail(L, c, lt_net_errtok(c->werr));
  size_t len;
  const char *data = write_data(L, c, &len);
  ssize_t n;
  do n = send(c->fd, data, len, MSG_NOSIGNAL | MSG_DONTWAIT);
  while (n < 0 && errno == EINTR);
  if (n == (ssize_t)len) {
    lua_pushboolean(L, 1);
    return 1;
  }
  if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
    c->werr = -errno;
    return write_fail(L, c, lt_net_errtok(c->werr));
  }
  stage(c, data, n > 0 ? (size_t)n : 0, len);
  int err = ty__io_send(c->io, &c->wop, c->fd, c->wb, c->wlen);
  if (err) {
    c->werr = err;
    return write_fail(L, c, lt_net_errtok(err));
  }
  lt_actor *la = a->user;
  c->refs += 2; /* the op, the waiter */
  c->writer = a;
  la->ext_cancel = write_cancel;
  return lt_yield_ext(L, "tcp write", write_wake, c, c->t_send);
}

static int l_close(lua_State *L) {
  conn_ud *u = check_conn_ud(L);
  lt_conn *c = u->c;
  u->c = NULL;
  if (c) {
    conn_close(c);
    conn_unref(c);
  }
  lua_pushboolean(L, 1);
  return 1;
}

static int64_t opt_setting(lua_State *L, int idx, int64_t cur) {
  if (lua_isnoneornil(L, idx)) return cur;
  return lt_net_timeout(L, idx, cur, "tcp settimeouts");
}

/* conn:settimeouts(connect, send, read): seconds; nil keeps a value, a
 * negative number means no timeout. */
static int l_settimeouts(lua_State *L) {
  lt_conn *c = check_conn(L);
  if (!c) return lt_net_fail(L, "closed");
  c->t_connect = opt_setting(L, 2, c->t_connect);
  c->t_send = opt_setting(L, 3, c->t_send);
  c->t_read = opt_setting(L, 4, c->t_read);
  lua_pushboolean(L, 1);
  return 1;
}

static int sock_name(lua_State *L, bool peer) {
  lt_conn *c = check_conn(L);
  if (!c) return lt_net_fail(L, "closed");
  struct sockaddr_storage ss;
  socklen_t len = sizeof ss;
  int r = peer ? getpeername(c->fd, (struct sockaddr *)&ss, &len)
               : getsockname(c->fd, (struct sockaddr *)&ss, &len);
  if (r) return lt_net_fail(L, lt_net_errtok(errno));
  return lt_net_push_addr(L, &ss);
}

static int l_getpeername(lua_State *L) { return sock_name(L, true); }
static int l_getsockname(lua_State *L) { return sock_name(L, false); }

static int l_conn_gc(lua_State *L) {
  conn_ud *u = lua_touserdata(L, 1);
  lt_conn *c = u->c;
  u->c = NULL;
  if (c) {
    conn_close(c); /* unreachable: nobody can use it any more */
    conn_unref(c);
  }
  return 0;
}

static int l_conn_tostring(lua_State *L) {
  conn_ud *u = lua_touserdata(L, 1);
  if (u->c && !u->c->closed)
    lua_pushfstring(L, "tcp connection (fd %d)", u->c->fd);
  else lua_pushliteral(L, "tcp connection (closed)");
  return 1;
}

static const luaL_Reg conn_methods[] = {
    {"read", l_read},
    {"read_some", l_read_some},
    {"write", l_write},
    {"close", l_close},
    {"settimeouts", l_settimeouts},
    {"getpeername", l_getpeername},
    {"getsockname", l_getsockname},
    {NULL, NULL}};

/* ---- connect ----------------------------------------------------------- */

static void set_nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static int connect_wake(lua_State *co, ty_actor *a, lt_actor *la,
                        bool timed_out) {
  lt_conn *c = la->ext_ctx;
  if (c->connecting && !c->closed && !timed_out) return lt_net_rewait(a, la);
  int n;
  c->writer = NULL;
  la->ext_cancel = NULL;
  if (c->closed) {
    n = lt_net_fail(co, "closed");
  } else if (c->connecting) {
    n = lt_net_fail(co, "timeout");
    conn_close(c);
  } else if (c->cres < 0) {
    n = lt_net_fail(co, lt_net_errtok(c->cres));
    conn_close(c);
  } else {
    set_nodelay(c->fd);
    push_conn(co, c);
    n = 1;
  }
  conn_unref(c);
  return n;
}

static void connect_cancel(ty_actor *a, lt_actor *la) {
  (void)a;
  lt_conn *c = la->ext_ctx;
  c->writer = NULL;
  conn_unref(c);
}

static int check_port(lua_State *L, int idx, const char *fname) {
  lua_Number p = luaL_checknumber(L, idx);
  if (!(p >= 0 && p <= 65535) || p != (lua_Number)(int)p)
    luaL_error(L, "tycho.tcp.%s: the port must be an integer from 0 to 65535",
               fname);
  return (int)p;
}

/* tycho.tcp.connect(host, port [, timeout]) -> conn | nil, err */
static int l_connect(lua_State *L) {
  const char *host = luaL_checkstring(L, 1);
  int port = check_port(L, 2, "connect");
  int64_t tmo = lt_net_timeout(L, 3, DEFAULT_TIMEOUT_NS, "tcp.connect");
  ty_actor *a = lt_net_actor(L, "tcp.connect");
  struct sockaddr_storage ss;
  socklen_t len;
  if (lt_net_addr(host, port, &ss, &len)) return lt_net_fail(L, "badhost");
  int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return lt_net_fail(L, lt_net_errtok(errno));
  lt_actor *la = a->user;
  lt_conn *c = conn_new(fd, la);
  c->connecting = true;
  c->refs++; /* the waiter (below) or this function */
  int err = ty__io_connect(c->io, &c->wop, fd, (struct sockaddr *)&ss, len);
  if (err) {
    c->connecting = false;
    conn_close(c);
    conn_unref(c);
    return lt_net_fail(L, lt_net_errtok(err));
  }
  c->refs++; /* the op */
  c->writer = a;
  la->ext_cancel = connect_cancel;
  return lt_yield_ext(L, "tcp.connect", connect_wake, c, tmo);
}

/* ---- listeners --------------------------------------------------------- */

typedef struct lt_listener lt_listener;

/* An actor waiting in accept. Listed (under the listener's mutex) until a
 * connection is handed to it or it stops waiting; only its own worker
 * frees it. */
typedef struct lt_waiter {
  struct lt_waiter *next, *prev;
  bool listed;  /* under mu */
  int fd;       /* handed over (under mu); -1: nothing yet */
  ty_actor *a;  /* for its own worker */
  ty_pid pid;   /* for the others: they nudge it */
  unsigned worker;
  lt_listener *l;
} lt_waiter;

/* One worker's accept op: only that worker touches it. */
typedef struct lt_lslot {
  lt_listener *l;
  ty__io_op op; /* multishot accept; busy holds a listener reference */
} lt_lslot;

struct lt_listener {
  _Atomic int refs;    /* userdata, transit entries, busy ops, waiters, owner */
  _Atomic bool closed; /* set once by the creator, under mu */
  int fd;              /* open until the last reference goes */
  struct sockaddr_storage addr; /* bound (the port resolved) */
  lt_res res;          /* in the creator's resources */
  lt_actor *owner;     /* the creator, until it closes it (its worker only) */
  pthread_mutex_t mu;  /* guards q, err and the waiters */
  int *q;              /* accepted, nobody waiting: q[qh..qh+qn) mod qcap */
  unsigned qh, qn, qcap;
  int err;             /* an accept op failed: told to the next taker */
  lt_waiter *wh, *wt;  /* oldest first */
  unsigned n;
  lt_lslot slots[];    /* one per worker */
};

typedef struct lst_ud {
  lt_listener *l; /* NULL: closed (by this copy) */
  bool owner;     /* the creator's userdata: close() closes for everyone */
} lst_ud;

static void lst_ref(lt_listener *l) {
  /* relaxed: the caller holds a reference already. */
  atomic_fetch_add_explicit(&l->refs, 1, memory_order_relaxed);
}

/* Closes what was accepted and never taken (under mu, or unshared). */
static void q_drain(lt_listener *l) {
  while (l->qn) {
    close(l->q[l->qh]);
    l->qh = (l->qh + 1) % l->qcap;
    l->qn--;
  }
}

/* No op is busy and nobody waits (each holds a reference): any thread. */
static void lst_destroy(lt_listener *l) {
  q_drain(l);
  free(l->q);
  close(l->fd);
  pthread_mutex_destroy(&l->mu);
  free(l);
}

static void lst_unref(lt_listener *l) {
  /* acq_rel: the last holder sees every other thread's writes first. */
  if (atomic_fetch_sub_explicit(&l->refs, 1, memory_order_acq_rel) == 1)
    lst_destroy(l);
}

static bool lst_closed(lt_listener *l) {
  /* acquire: pairs with the release store in lst_close. */
  return atomic_load_explicit(&l->closed, memory_order_acquire);
}

static void q_push(lt_listener *l, int fd) {
  if (l->qn == l->qcap) {
    unsigned cap = l->qcap ? l->qcap * 2 : ACCEPT_QUEUE;
    int *q = ty__xmalloc(cap * sizeof *q);
    for (unsigned k = 0; k < l->qn; k++) q[k] = l->q[(l->qh + k) % l->qcap];
    free(l->q);
    l->q = q;
    l->qh = 0;
    l->qcap = cap;
  }
  l->q[(l->qh + l->qn++) % l->qcap] = fd;
}

static void waiter_link(lt_listener *l, lt_waiter *w) {
  w->next = NULL;
  w->prev = l->wt;
  if (l->wt) l->wt->next = w;
  else l->wh = w;
  l->wt = w;
  w->listed = true;
}

static void waiter_unlink(lt_listener *l, lt_waiter *w) {
  if (!w->listed) return;
  if (w->prev) w->prev->next = w->next;
  else l->wh = w->next;
  if (w->next) w->next->prev = w->prev;
  else l->wt = w->prev;
  w->listed = false;
}

/* Wakes an actor waiting in an I/O call: directly on its own worker; from
 * another worker with a nudge, a message that matches the LT_W_EXT wait
 * (ref UINT64_MAX) and that recv drops should it come late. */
static void wake_any(ty_actor *a, ty_pid pid, unsigned worker) {
  if (worker == ty_worker_id(ty_worker_current())) {
    ty_actor_wake(a);
    return;
  }
  ty_msg *m = ty_msg_new(0);
  m->to = pid;
  m->kind = LT_NUDGE;
  m->ref = UINT64_MAX;
  if (ty_send(lt_g.rt, m)) ty_msg_free(m);
}

/* Wakes every waiter (under mu); they find out why themselves. */
static void wake_all(lt_listener *l) {
  for (lt_waiter *w = l->wh; w; w = w->next) wake_any(w->a, w->pid, w->worker);
}

/* A new connection goes to the actor that has waited longest, on whatever
 * worker, or to the queue. Returns the queue's length. */
static unsigned hand(lt_listener *l, int fd) {
  pthread_mutex_lock(&l->mu);
  lt_waiter *w = l->wh;
  if (lst_closed(l)) {
    close(fd);
  } else if (w) {
    waiter_unlink(l, w);
    w->fd = fd;
    wake_any(w->a, w->pid, w->worker);
  } else {
    q_push(l, fd);
  }
  unsigned qn = l->qn;
  pthread_mutex_unlock(&l->mu);
  return qn;
}

static void slot_arm(lt_lslot *s);

static void on_accept(ty__io_op *op, int res, const char *data) {
  (void)data;
  lt_lslot *s = op->ud;
  lt_listener *l = s->l;
  /* Nobody takes them: leave the rest in the kernel's backlog. */
  if (res >= 0 && hand(l, res) >= ACCEPT_QUEUE && ty__io_op_armed(op))
    ty__io_cancel(ty_worker_io(ty_worker_current()), op);
  if (ty__io_op_busy(op)) return;
  if (res == -ECANCELED) {
    /* A pause ended. Takers that drained the queue meanwhile found the op
     * busy and could not re-arm it: do it for them. */
    slot_arm(s);
  } else if (res < 0 && !lst_closed(l)) {
    pthread_mutex_lock(&l->mu);
    l->err = res; /* EMFILE and friends: the next accept reports it */
    wake_all(l);
    pthread_mutex_unlock(&l->mu);
  }
  lst_unref(l); /* the op's reference */
}

/* Arms this worker's accept if it should run and does not. */
static void slot_arm(lt_lslot *s) {
  lt_listener *l = s->l;
  if (ty__io_op_busy(&s->op) || lst_closed(l)) return;
  pthread_mutex_lock(&l->mu);
  bool full = l->qn >= ACCEPT_QUEUE / 2;
  pthread_mutex_unlock(&l->mu);
  if (full) return;
  int err = ty__io_accept(ty_worker_io(ty_worker_current()), &s->op, l->fd);
  if (!err) {
    lst_ref(l);
    return;
  }
  pthread_mutex_lock(&l->mu);
  l->err = err;
  pthread_mutex_unlock(&l->mu);
}

static lst_ud *check_lst_ud(lua_State *L) {
  return luaL_checkudata(L, 1, LT_LISTENER_MT);
}

static void push_listener(lua_State *L, lt_listener *l, bool owner) {
  lst_ud *u = lua_newuserdata(L, sizeof *u);
  u->l = l;
  u->owner = owner;
  lt_tcp_metatables(L);
  lua_getfield(L, LUA_REGISTRYINDEX, LT_LISTENER_MT);
  lua_setmetatable(L, -2);
}

/* Closes the listener for every actor (on its creator's worker): waiters
 * wake and hear "closed"; the shutdown ends the accept op of every worker
 * (on that worker), and each op's end lets go of its reference. */
static void lst_close(lt_listener *l) {
  if (!l->owner) return; /* closed already */
  lt_res_remove(l->owner, &l->res);
  l->owner = NULL;
  pthread_mutex_lock(&l->mu);
  /* release: readers outside the mutex (acquire) see the queue drained. */
  atomic_store_explicit(&l->closed, true, memory_order_release);
  q_drain(l);
  wake_all(l);
  pthread_mutex_unlock(&l->mu);
  shutdown(l->fd, SHUT_RD);
  lst_unref(l); /* the owner's reference */
}

static void lst_res_close(lt_res *r) {
  lst_close((lt_listener *)((char *)r - offsetof(lt_listener, res)));
}

static int opt_int_field(lua_State *L, const char *k, int def, int lo, int hi) {
  lua_getfield(L, 1, k);
  int v = def;
  if (!lua_isnil(L, -1)) {
    lua_Number n = luaL_checknumber(L, -1);
    if (!(n >= lo && n <= hi) || n != (lua_Number)(int)n)
      luaL_error(L, "tycho.tcp.listen: %s must be an integer from %d to %d", k,
                 lo, hi);
    v = (int)n;
  }
  lua_pop(L, 1);
  return v;
}

/* A listening socket on ss (whose port it then holds); fd or -errno. */
static int listen_socket(struct sockaddr_storage *ss, socklen_t len,
                         int backlog) {
  int fd = socket(ss->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -errno;
  int one = 1;
  socklen_t sl = sizeof *ss;
  if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) ||
      bind(fd, (struct sockaddr *)ss, len) || listen(fd, backlog) ||
      getsockname(fd, (struct sockaddr *)ss, &sl)) {
    int err = -errno;
    close(fd);
    return err;
  }
  return fd;
}

/* tycho.tcp.listen{host=, port=, backlog=} -> listener | nil, err */
static int l_listen(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  ty_actor *a = ty_actor_current();
  if (!a || !lt_g.rt)
    return luaL_error(L, "tycho.tcp.listen must be called from inside an "
                      "actor (start one with tycho.run)");
  lua_getfield(L, 1, "port");
  if (lua_isnil(L, -1))
    return luaL_error(L, "tycho.tcp.listen: port is required (0 picks a "
                      "free one)");
  lua_pop(L, 1);
  int port = opt_int_field(L, "port", 0, 0, 65535);
  int backlog = opt_int_field(L, "backlog", DEFAULT_BACKLOG, 1, 65535);
  lua_getfield(L, 1, "host");
  const char *host = lua_isnil(L, -1) ? NULL : luaL_checkstring(L, -1);
  struct sockaddr_storage ss;
  socklen_t len;
  if (lt_net_addr(host, port, &ss, &len)) return lt_net_fail(L, "badhost");
  lua_pop(L, 1);
  int fd = listen_socket(&ss, len, backlog);
  if (fd < 0) return lt_net_fail(L, lt_net_errtok(fd));
  unsigned n = ty_runtime_workers(lt_g.rt);
  lt_listener *l = ty__xcalloc(1, sizeof *l + n * sizeof(lt_lslot));
  atomic_init(&l->refs, 2); /* the userdata, the owner */
  atomic_init(&l->closed, false);
  pthread_mutex_init(&l->mu, NULL);
  l->fd = fd;
  l->addr = ss;
  l->n = n;
  for (unsigned i = 0; i < n; i++) {
    l->slots[i].l = l;
    l->slots[i].op.cb = on_accept;
    l->slots[i].op.ud = &l->slots[i];
  }
  l->owner = a->user;
  l->res.close = lst_res_close;
  lt_res_add(l->owner, &l->res);
  push_listener(L, l, true);
  return 1;
}

enum { TAKE_NONE = 0, TAKE_FD, TAKE_CLOSED, TAKE_ERR };

/* Under mu: what an accept gets without waiting. */
static int take_now(lt_listener *l, int *fd, int *err) {
  if (lst_closed(l)) return TAKE_CLOSED;
  if (l->qn) {
    *fd = l->q[l->qh];
    l->qh = (l->qh + 1) % l->qcap;
    l->qn--;
    return TAKE_FD;
  }
  if (l->err) {
    *err = l->err;
    l->err = 0;
    return TAKE_ERR;
  }
  return TAKE_NONE;
}

/* Pushes what take_now found (TAKE_FD: a connection of the caller). */
static int push_take(lua_State *L, int r, int fd, int err, ty_actor *a) {
  switch (r) {
  case TAKE_FD:
    set_nodelay(fd);
    push_conn(L, conn_new(fd, a->user));
    return 1;
  case TAKE_CLOSED:
    return lt_net_fail(L, "closed");
  case TAKE_ERR:
    return lt_net_fail(L, lt_net_errtok(err));
  default:
    return lt_net_fail(L, "timeout");
  }
}

/* Removes the nudges that woke this actor (one per hand-over). */
static void drop_nudges(ty_actor *a) {
  ty_msg *prev = NULL, *m = ty_mbox_first(a);
  while (m) {
    ty_msg *next = ty_mbox_next(m);
    if (m->kind == LT_NUDGE) {
      ty_mbox_remove(a, prev, m);
      ty_msg_free(m);
    } else {
      prev = m;
    }
    m = next;
  }
}

static int accept_wake(lua_State *co, ty_actor *a, lt_actor *la,
                       bool timed_out) {
  lt_waiter *w = la->ext_ctx;
  lt_listener *l = w->l;
  int fd = -1, err = 0, r = TAKE_FD;
  drop_nudges(a);
  pthread_mutex_lock(&l->mu);
  if (w->fd >= 0) fd = w->fd; /* handed over, even if closed since */
  else r = take_now(l, &fd, &err);
  if (r == TAKE_NONE && !timed_out) {
    if (!w->listed) waiter_link(l, w); /* woken for an error someone took */
    pthread_mutex_unlock(&l->mu);
    slot_arm(&l->slots[w->worker]);
    return lt_net_rewait(a, la);
  }
  waiter_unlink(l, w);
  pthread_mutex_unlock(&l->mu);
  free(w);
  la->ext_cancel = NULL;
  int n = push_take(co, r, fd, err, a);
  lst_unref(l);
  return n;
}

/* The waiting actor dies: a connection already handed to it goes on. */
static void accept_cancel(ty_actor *a, lt_actor *la) {
  (void)a;
  lt_waiter *w = la->ext_ctx;
  lt_listener *l = w->l;
  pthread_mutex_lock(&l->mu);
  waiter_unlink(l, w);
  int fd = w->fd;
  pthread_mutex_unlock(&l->mu);
  free(w);
  if (fd >= 0) hand(l, fd);
  lst_unref(l);
}

/* listener:accept([timeout]) -> conn | nil, err */
static int l_accept(lua_State *L) {
  lst_ud *u = check_lst_ud(L);
  int64_t tmo = lt_net_timeout(L, 2, -1, "tcp accept");
  ty_actor *a = lt_net_actor(L, "tcp accept");
  lt_listener *l = u->l;
  if (!l) return lt_net_fail(L, "closed");
  unsigned me = ty_worker_id(ty_worker_current());
  int fd = -1, err = 0;
  lt_waiter *w = NULL;
  pthread_mutex_lock(&l->mu);
  int r = take_now(l, &fd, &err);
  if (r == TAKE_NONE && tmo != 0) {
    w = ty__xcalloc(1, sizeof *w);
    w->fd = -1;
    w->a = a;
    w->pid = a->pid;
    w->worker = me;
    w->l = l;
    waiter_link(l, w);
  }
  pthread_mutex_unlock(&l->mu);
  /* This worker accepts too from now on (after the take: it arms only
   * while the queue is short). */
  slot_arm(&l->slots[me]);
  if (!w) return push_take(L, r, fd, err, a);
  lst_ref(l);
  lt_actor *la = a->user;
  la->ext_cancel = accept_cancel;
  return lt_yield_ext(L, "tcp accept", accept_wake, w, tmo);
}

/* listener:close(): the creator's copy closes it for every actor; any
 * other copy only lets go of it. */
static int l_lst_close(lua_State *L) {
  lst_ud *u = check_lst_ud(L);
  lt_listener *l = u->l;
  u->l = NULL;
  if (l) {
    if (u->owner) lst_close(l);
    lst_unref(l);
  }
  lua_pushboolean(L, 1);
  return 1;
}

static int l_lst_getsockname(lua_State *L) {
  lst_ud *u = check_lst_ud(L);
  if (!u->l) return lt_net_fail(L, "closed");
  return lt_net_push_addr(L, &u->l->addr);
}

static int l_lst_gc(lua_State *L) {
  lst_ud *u = lua_touserdata(L, 1);
  if (u->l) lst_unref(u->l); /* the listener lives on while its owner does */
  u->l = NULL;
  return 0;
}

static int l_lst_tostring(lua_State *L) {
  lst_ud *u = lua_touserdata(L, 1);
  if (!u->l) {
    lua_pushliteral(L, "tcp listener (closed)");
    return 1;
  }
  lt_net_push_addr(L, &u->l->addr);
  lua_pushfstring(L, "tcp listener (%s:%d)", lua_tostring(L, -2),
                  (int)lua_tointeger(L, -1));
  return 1;
}

static const luaL_Reg lst_methods[] = {
    {"accept", l_accept},
    {"close", l_lst_close},
    {"getsockname", l_lst_getsockname},
    {NULL, NULL}};

/* ---- handles in messages ----------------------------------------------- */

/* What the current encode took: moved or shared once it succeeds. */
typedef struct pending {
  uint64_t token;
  int kind;
  void *ud; /* conn_ud or lst_ud */
} pending;

static _Thread_local pending *t_pend;
static _Thread_local size_t t_npend, t_cappend;

static int udata_kind(lua_State *L, int idx) {
  if (!lua_getmetatable(L, idx)) return 0;
  int kind = 0;
  lua_getfield(L, LUA_REGISTRYINDEX, LT_CONN_MT);
  if (lua_rawequal(L, -1, -2)) kind = LT_H_CONN;
  lua_pop(L, 1);
  lua_getfield(L, LUA_REGISTRYINDEX, LT_LISTENER_MT);
  if (!kind && lua_rawequal(L, -1, -2)) kind = LT_H_LISTENER;
  lua_pop(L, 2);
  return kind;
}

static int hook_fail(char *err, size_t errlen, const char *msg) {
  snprintf(err, errlen, "%s", msg);
  return -1;
}

/* Why c cannot travel now, or NULL. */
static const char *conn_stuck(const lt_conn *c, void *ud) {
  if (!c || c->closed) return "cannot send a closed tcp connection";
  if (c->reader || c->writer || c->connecting || ty__io_op_busy(&c->wop))
    return "cannot send a tcp connection while an actor reads or writes it";
  for (size_t i = 0; i < t_npend; i++)
    if (t_pend[i].ud == ud)
      return "cannot send the same tcp connection twice in one message";
  return NULL;
}

int lt_tcp_encode(lua_State *L, int idx, uint64_t *token, char *err,
                  size_t errlen) {
  int kind = udata_kind(L, idx);
  if (!kind) return 1;
  void *ud = lua_touserdata(L, idx);
  if (kind == LT_H_CONN) {
    const char *why = conn_stuck(((conn_ud *)ud)->c, ud);
    if (why) return hook_fail(err, errlen, why);
  } else if (!((lst_ud *)ud)->l) {
    return hook_fail(err, errlen, "cannot send a closed tcp listener");
  }
  if (t_npend == t_cappend) {
    t_cappend = t_cappend ? t_cappend * 2 : 8;
    t_pend = realloc(t_pend, t_cappend * sizeof *t_pend);
    if (!t_pend) ty__die("out of memory");
  }
  *token = lt_transit_token();
  t_pend[t_npend++] = (pending){*token, kind, ud};
  return 0;
}

/* The connection leaves this worker: nothing here refers to it after. */
static void conn_detach(conn_ud *u) {
  lt_conn *c = u->c;
  u->c = NULL; /* its reference now belongs to the transit entry */
  c->moving = true;
  if (c->io) {
    ty__io_settle(c->io, &c->rop);
    ty__io_forget(c->io, c->fd);
  }
  if (c->owner) lt_res_remove(c->owner, &c->res);
  c->owner = NULL;
  c->w = NULL;
  c->io = NULL;
}

void lt_tcp_encoded(lua_State *L, bool ok) {
  (void)L;
  for (size_t i = 0; ok && i < t_npend; i++) {
    pending *p = &t_pend[i];
    if (p->kind == LT_H_CONN) {
      lt_conn *c = ((conn_ud *)p->ud)->c;
      conn_detach(p->ud);
      lt_transit_put(p->token, LT_H_CONN, c);
    } else {
      lt_listener *l = ((lst_ud *)p->ud)->l;
      lst_ref(l); /* the copy's */
      lt_transit_put(p->token, LT_H_LISTENER, l);
    }
  }
  t_npend = 0;
}

/* A connection arrives: its receiver on this worker owns it. */
static void conn_adopt(lua_State *L, lt_conn *c) {
  ty_worker *w = ty_worker_current();
  ty_actor *a = ty_actor_current();
  if (!w || !a) { /* outside every actor (tycho.run's results): closed */
    c->closed = true;
    conn_try_release(c);
    conn_unref(c);
    push_conn(L, NULL);
    return;
  }
  c->w = w;
  c->io = ty_worker_io(w);
  c->moving = false;
  c->owner = a->user;
  lt_res_add(c->owner, &c->res);
  push_conn(L, c);
  c->refs--; /* the transit entry's reference became the userdata's */
}

_Thread_local bool lt_tcp_discarding;

int lt_tcp_decode(lua_State *L, uint64_t token) {
  int kind;
  void *p = lt_transit_take(token, &kind);
  if (p && lt_tcp_discarding) {
    lt_tcp_drop(kind, p);
    lua_pushnil(L);
    return 0;
  }
  if (!p && !ty_worker_current()) { /* swept with its runtime */
    lua_pushnil(L);
    return 0;
  }
  if (!p) return -1;
  if (kind == LT_H_CONN) {
    conn_adopt(L, p);
  } else {
    push_listener(L, p, false); /* takes the entry's reference */
  }
  return 0;
}

void lt_tcp_drop(int kind, void *p) {
  if (kind == LT_H_LISTENER) {
    lst_unref(p);
    return;
  }
  lt_conn *c = p;
  c->closed = true;
  conn_try_release(c);
  conn_unref(c);
}

/* ---- module ------------------------------------------------------------ */

void lt_tcp_metatables(lua_State *L) {
  lt_net_metatable(L, LT_CONN_MT, conn_methods, l_conn_gc, l_conn_tostring);
  lua_pop(L, 1);
  lt_net_metatable(L, LT_LISTENER_MT, lst_methods, l_lst_gc, l_lst_tostring);
  lua_pop(L, 1);
}

/* tycho.tcp.backend() -> "io_uring" | "epoll" (this worker's), or nil. */
static int l_backend(lua_State *L) {
  ty_worker *w = ty_worker_current();
  if (!w || !ty_worker_io(w)) return 0;
  lua_pushstring(L, ty__io_name(ty_worker_io(w)));
  return 1;
}

static const luaL_Reg tcp_funcs[] = {
    {"listen", l_listen},
    {"connect", l_connect},
    {"backend", l_backend},
    {NULL, NULL}};

void lt_tcp_push(lua_State *L) {
  lua_newtable(L);
  luaL_register(L, NULL, tcp_funcs);
}
