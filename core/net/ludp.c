/*
 * ludp.c - tycho.udp: datagram sockets.
 *
 *   local u = tycho.udp.bind{host = "127.0.0.1", port = 0}
 *   u:sendto(data, host, port)     -> true | nil, err
 *   u:recvfrom([timeout])          -> data, host, port | nil, err
 *   u:getsockname()                -> host, port
 *   u:close()
 *
 * A socket lives on the worker of the actor that bound it, which owns it
 * (it closes when that actor ends) and is the only one to use it; it does
 * not travel in messages. One datagram is one recvfrom: boundaries are
 * kept, and the receive buffer (64 KiB) holds the largest UDP datagram
 * whole.
 *
 * Receiving: recvfrom first tries recvmsg at once (a datagram may already
 * wait); when nothing is there it arms a one-shot recvmsg op (io.h) into
 * the socket's buffer and waits. A timeout cancels the op; if a datagram won
 * the race with the cancel it stays in the buffer for the next recvfrom, so
 * a timeout never loses one.
 *
 * Sending: sendto sends at once; when the socket buffer is full it copies
 * the datagram and waits for a sendmsg op to take it.
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "lua/lapi.h"
#include "ludp.h"

#define LT_UDP_MT "tycho.udp"
#define RBUF_SIZE 65536 /* > the largest datagram (65507 IPv4, 65527 IPv6) */
#define DEFAULT_TIMEOUT_NS (60 * (int64_t)1000000000)

typedef struct lt_udp {
  lt_res res; /* in the owner's resources: first, for the cast back */
  int fd;
  int refs; /* userdata + busy ops + a waiting actor */
  ty_worker *w;
  ty__io *io;
  lt_actor *owner;
  ty__io_op rop, wop;
  struct msghdr rmsg, wmsg;
  struct iovec riov, wiov;
  struct sockaddr_storage raddr, waddr;
  char *rbuf; /* RBUF_SIZE bytes, from the first recvfrom */
  char *wbuf; /* a datagram the kernel could not take at once */
  size_t wcap;
  int rlen;   /* >= 0: a datagram of rlen bytes waits in rbuf */
  int rerr;   /* a receive error for the next recvfrom */
  int wres;   /* the sendmsg op's result, once it ended */
  bool wdone; /* ... and it has ended */
  ty_actor *reader, *writer;
  bool closed;
  int64_t t_read, t_send;
} lt_udp;

typedef struct udp_ud {
  lt_udp *u; /* NULL: closed */
} udp_ud;

/* ---- life ---------------------------------------------------------------- */

static void udp_unref(lt_udp *u) {
  if (--u->refs > 0) return;
  ty__assert(u->closed && u->fd < 0);
  free(u->rbuf);
  free(u->wbuf);
  free(u);
}

/* Closes the descriptor once closed and no op is busy any more. */
static void udp_try_release(lt_udp *u) {
  if (!u->closed || u->fd < 0) return;
  if (ty__io_op_busy(&u->rop) || ty__io_op_busy(&u->wop)) return;
  ty__io_close(u->io, u->fd);
  u->fd = -1;
}

static void udp_close(lt_udp *u) {
  if (u->closed) return;
  u->closed = true;
  if (u->owner) lt_res_remove(u->owner, &u->res);
  u->owner = NULL;
  if (u->reader) ty_actor_wake(u->reader);
  if (u->writer) ty_actor_wake(u->writer);
  ty__io_cancel(u->io, &u->rop);
  ty__io_cancel(u->io, &u->wop);
  udp_try_release(u);
}

static void udp_res_close(lt_res *r) { udp_close((lt_udp *)r); }

static void set_msg(struct msghdr *m, struct iovec *iov,
                    struct sockaddr_storage *sa, socklen_t salen, void *buf,
                    size_t len) {
  memset(m, 0, sizeof *m);
  iov->iov_base = buf;
  iov->iov_len = len;
  m->msg_name = sa;
  m->msg_namelen = salen;
  m->msg_iov = iov;
  m->msg_iovlen = 1;
}

/* ---- receiving ------------------------------------------------------------ */

static void on_recv(ty__io_op *op, int res, const char *data) {
  (void)data;
  lt_udp *u = op->ud;
  if (res >= 0) u->rlen = res; /* kept even when a cancel lost the race */
  else if (res != -ECANCELED) u->rerr = res;
  if (u->reader) ty_actor_wake(u->reader);
  udp_try_release(u);
  udp_unref(u);
}

static int arm_recv(lt_udp *u) {
  set_msg(&u->rmsg, &u->riov, &u->raddr, sizeof u->raddr, u->rbuf, RBUF_SIZE);
  int err = ty__io_recvmsg(u->io, &u->rop, u->fd, &u->rmsg);
  if (!err) u->refs++;
  return err;
}

/* Pushes data, host, port of the waiting datagram (3), or nil, err (2) for
 * a pending error; -1 when there is neither. */
static int take_datagram(lua_State *L, lt_udp *u) {
  if (u->rlen >= 0) {
    lua_pushlstring(L, u->rbuf, (size_t)u->rlen);
    u->rlen = -1;
    lt_net_push_addr(L, &u->raddr);
    return 3;
  }
  if (u->rerr) {
    int err = u->rerr;
    u->rerr = 0; /* an error belongs to one datagram (ICMP) */
    return lt_push_fail(L, lt_net_errtok(err));
  }
  return -1;
}

/* Without waiting: a datagram that is already there. Returns as
 * take_datagram; -1 also when the socket is empty. */
static int recv_now(lua_State *L, lt_udp *u) {
  int n = take_datagram(L, u);
  if (n >= 0 || ty__io_op_busy(&u->rop)) return n;
  set_msg(&u->rmsg, &u->riov, &u->raddr, sizeof u->raddr, u->rbuf, RBUF_SIZE);
  ssize_t got;
  do got = recvmsg(u->fd, &u->rmsg, MSG_DONTWAIT);
  while (got < 0 && errno == EINTR);
  if (got >= 0) u->rlen = (int)got;
  else if (errno != EAGAIN && errno != EWOULDBLOCK) u->rerr = -errno;
  return take_datagram(L, u);
}

static int recv_wake(lua_State *co, ty_actor *a, lt_actor *la, bool timed_out) {
  lt_udp *u = lt_rare_get(la)->ext_ctx;
  int n = u->closed ? lt_push_fail(co, "closed") : take_datagram(co, u);
  if (n < 0 && !timed_out) {
    /* A cancel left over from an earlier timeout ended with nothing: this
     * wait needs an op of its own. */
    int err = ty__io_op_busy(&u->rop) ? 0 : arm_recv(u);
    if (!err) return lt_net_rewait(a, la);
    n = lt_push_fail(co, lt_net_errtok(err));
  }
  if (n < 0) {
    ty__io_cancel(u->io, &u->rop); /* a late datagram stays for next time */
    n = lt_push_fail(co, "timeout");
  }
  u->reader = NULL;
  lt_rare_get(la)->ext_cancel = NULL;
  udp_unref(u);
  return n;
}

static void recv_cancel(ty_actor *a, lt_actor *la) {
  (void)a;
  lt_udp *u = lt_rare_get(la)->ext_ctx;
  u->reader = NULL;
  ty__io_cancel(u->io, &u->rop);
  udp_unref(u);
}

/* ---- sending ---------------------------------------------------------------- */

static void on_send(ty__io_op *op, int res, const char *data) {
  (void)data;
  lt_udp *u = op->ud;
  u->wres = res;
  u->wdone = true;
  if (u->writer) ty_actor_wake(u->writer);
  udp_try_release(u);
  udp_unref(u);
}

static const char *send_errtok(int err) {
  return err == -EMSGSIZE || err == EMSGSIZE ? "toolarge" : lt_net_errtok(err);
}

static int send_wake(lua_State *co, ty_actor *a, lt_actor *la, bool timed_out) {
  lt_udp *u = lt_rare_get(la)->ext_ctx;
  int n;
  if (u->closed) {
    n = lt_push_fail(co, "closed");
  } else if (u->wdone) {
    if (u->wres >= 0) lua_pushboolean(co, 1);
    n = u->wres >= 0 ? 1 : lt_push_fail(co, send_errtok(u->wres));
  } else if (!timed_out) {
    return lt_net_rewait(a, la);
  } else {
    ty__io_cancel(u->io, &u->wop);
    n = lt_push_fail(co, "timeout");
  }
  u->writer = NULL;
  lt_rare_get(la)->ext_cancel = NULL;
  udp_unref(u);
  return n;
}

static void send_cancel(ty_actor *a, lt_actor *la) {
  (void)a;
  lt_udp *u = lt_rare_get(la)->ext_ctx;
  u->writer = NULL;
  ty__io_cancel(u->io, &u->wop);
  udp_unref(u);
}

/* ---- Lua methods -------------------------------------------------------- */

static udp_ud *check_ud(lua_State *L) {
  return luaL_checkudata(L, 1, LT_UDP_MT);
}

/* The open socket at 1, or NULL. */
static lt_udp *check_udp(lua_State *L, const char *fname) {
  lt_udp *u = check_ud(L)->u;
  if (u && u->w != ty_worker_current())
    luaL_error(L,
               "tycho.udp: %s: the socket belongs to an actor on another "
               "worker (use it from the actor that bound it)",
               fname);
  return u && !u->closed ? u : NULL;
}

static int port_arg(lua_State *L, int idx, const char *fname) {
  lua_Number p = luaL_checknumber(L, idx);
  if (!(p >= 0 && p <= 65535) || p != (lua_Number)(int)p)
    luaL_error(L, "tycho.udp: %s: the port must be an integer from 0 to 65535",
               fname);
  return (int)p;
}

/* u:sendto(data, host, port) -> true | nil, err */
static int l_sendto(lua_State *L) {
  lt_udp *u = check_udp(L, "sendto");
  size_t len;
  const char *data = luaL_checklstring(L, 2, &len);
  const char *host = luaL_checkstring(L, 3);
  int port = port_arg(L, 4, "sendto");
  if (!u) return lt_push_fail(L, "closed");
  ty_actor *a = lt_net_actor(L, "udp sendto");
  if (u->writer) return lt_push_fail(L, "busy");
  socklen_t salen;
  if (lt_net_addr(host, port, &u->waddr, &salen))
    return lt_push_fail(L, "badhost");
  ssize_t n;
  do
    n = sendto(u->fd, data, len, MSG_DONTWAIT | MSG_NOSIGNAL,
               (struct sockaddr *)&u->waddr, salen);
  while (n < 0 && errno == EINTR);
  if (n >= 0) {
    lua_pushboolean(L, 1);
    return 1;
  }
  if (errno != EAGAIN && errno != EWOULDBLOCK && errno != ENOBUFS)
    return lt_push_fail(L, send_errtok(errno));
  if (u->wcap < len) { /* the socket is full: the op sends a copy */
    free(u->wbuf);
    u->wcap = len;
    u->wbuf = ty__xmalloc(len ? len : 1);
  }
  memcpy(u->wbuf, data, len);
  set_msg(&u->wmsg, &u->wiov, &u->waddr, salen, u->wbuf, len);
  u->wdone = false;
  int err = ty__io_sendmsg(u->io, &u->wop, u->fd, &u->wmsg);
  if (err) return lt_push_fail(L, send_errtok(err));
  u->refs += 2; /* the op, the waiter */
  u->writer = a;
  lt_actor *la = a->user;
  lt_rare_get(la)->ext_cancel = send_cancel;
  return lt_yield_ext(L, "udp sendto", send_wake, u, u->t_send);
}

/* u:recvfrom([timeout]) -> data, host, port | nil, err */
static int l_recvfrom(lua_State *L) {
  lt_udp *u = check_udp(L, "recvfrom");
  if (!u) return lt_push_fail(L, "closed");
  ty_actor *a = lt_net_actor(L, "udp recvfrom");
  int64_t tmo = lt_net_timeout(L, 2, u->t_read, "udp recvfrom");
  if (u->reader) return lt_push_fail(L, "busy");
  if (!u->rbuf) u->rbuf = ty__xmalloc(RBUF_SIZE);
  int n = recv_now(L, u);
  if (n >= 0) return n;
  if (tmo == 0) return lt_push_fail(L, "timeout");
  if (!ty__io_op_busy(&u->rop)) { /* busy: a cancel is under way */
    int err = arm_recv(u);
    if (err) return lt_push_fail(L, lt_net_errtok(err));
  }
  u->refs++; /* the waiter */
  u->reader = a;
  lt_actor *la = a->user;
  lt_rare_get(la)->ext_cancel = recv_cancel;
  return lt_yield_ext(L, "udp recvfrom", recv_wake, u, tmo);
}

static int l_getsockname(lua_State *L) {
  lt_udp *u = check_udp(L, "getsockname");
  if (!u) return lt_push_fail(L, "closed");
  struct sockaddr_storage ss;
  socklen_t len = sizeof ss;
  if (getsockname(u->fd, (struct sockaddr *)&ss, &len))
    return lt_push_fail(L, lt_net_errtok(errno));
  return lt_net_push_addr(L, &ss);
}

static int opt_timeout(lua_State *L, int idx, int64_t *cur) {
  if (!lua_isnoneornil(L, idx))
    *cur = lt_net_timeout(L, idx, *cur, "udp settimeouts");
  return 0;
}

/* u:settimeouts(send, read): seconds; nil keeps a value, negative: none. */
static int l_settimeouts(lua_State *L) {
  lt_udp *u = check_udp(L, "settimeouts");
  if (!u) return lt_push_fail(L, "closed");
  opt_timeout(L, 2, &u->t_send);
  opt_timeout(L, 3, &u->t_read);
  lua_pushboolean(L, 1);
  return 1;
}

static void drop_ud(udp_ud *d) {
  lt_udp *u = d->u;
  d->u = NULL;
  if (!u) return;
  udp_close(u);
  udp_unref(u);
}

static int l_close(lua_State *L) {
  udp_ud *d = check_ud(L);
  if (d->u && d->u->w != ty_worker_current())
    return luaL_error(L, "tycho.udp: close: the socket belongs to an actor "
                         "on another worker");
  drop_ud(d);
  lua_pushboolean(L, 1);
  return 1;
}

/* Collected: on its worker's state, since the userdata never leaves it. */
static int l_gc(lua_State *L) {
  drop_ud(lua_touserdata(L, 1));
  return 0;
}

static int l_tostring(lua_State *L) {
  udp_ud *d = lua_touserdata(L, 1);
  if (d->u && !d->u->closed) lua_pushfstring(L, "udp socket (fd %d)", d->u->fd);
  else lua_pushliteral(L, "udp socket (closed)");
  return 1;
}

static const luaL_Reg udp_methods[] = {{"sendto", l_sendto},
                                       {"recvfrom", l_recvfrom},
                                       {"getsockname", l_getsockname},
                                       {"settimeouts", l_settimeouts},
                                       {"close", l_close},
                                       {NULL, NULL}};

/* ---- tycho.udp.bind ------------------------------------------------------- */

static const char *opt_host(lua_State *L) {
  lua_getfield(L, 1, "host");
  const char *host = lua_isnil(L, -1) ? NULL : lua_tostring(L, -1);
  if (!lua_isnil(L, -1) && !host)
    luaL_error(L, "tycho.udp.bind: host must be a string");
  lua_pop(L, 1); /* the string stays in the options table */
  return host;
}

static int opt_port(lua_State *L) {
  lua_getfield(L, 1, "port");
  int port = lua_isnil(L, -1) ? 0 : port_arg(L, -1, "bind");
  lua_pop(L, 1);
  return port;
}

/* tycho.udp.bind{host=, port=} -> socket | nil, err. No host: every
 * address; no port (or 0): one the kernel picks. */
static int l_bind(lua_State *L) {
  if (lua_isnoneornil(L, 1)) {
    lua_settop(L, 0);
    lua_newtable(L);
  }
  luaL_checktype(L, 1, LUA_TTABLE);
  const char *host = opt_host(L);
  int port = opt_port(L);
  ty_actor *a = lt_net_actor(L, "udp.bind");
  struct sockaddr_storage ss;
  socklen_t len;
  if (lt_net_addr(host, port, &ss, &len)) return lt_push_fail(L, "badhost");
  int fd = socket(ss.ss_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return lt_push_fail(L, lt_net_errtok(errno));
  if (bind(fd, (struct sockaddr *)&ss, len)) {
    int err = errno;
    close(fd);
    return lt_push_fail(L, lt_net_errtok(err));
  }
  lt_udp *u = ty__xcalloc(1, sizeof *u);
  u->fd = fd;
  u->w = ty_worker_current();
  u->io = ty_worker_io(u->w);
  u->rop.cb = on_recv;
  u->wop.cb = on_send;
  u->rop.ud = u->wop.ud = u;
  u->rlen = -1;
  u->t_read = u->t_send = DEFAULT_TIMEOUT_NS;
  u->res.close = udp_res_close;
  u->owner = a->user;
  lt_res_add(u->owner, &u->res);
  udp_ud *d = lua_newuserdata(L, sizeof *d);
  d->u = u;
  u->refs = 1;
  lt_net_metatable(L, LT_UDP_MT, udp_methods, l_gc, l_tostring);
  lua_setmetatable(L, -2);
  return 1;
}

void lt_open_udp(lua_State *L) {
  lua_createtable(L, 0, 1);
  lua_pushcfunction(L, l_bind);
  lua_setfield(L, -2, "bind");
  lua_setfield(L, -2, "udp");
}
