/*
 * ltcp_write.c - a tycho.tcp connection's sending side: conn:write, the
 * send op, what a TLS session has to send, conn:shutdown (ltcp.h).
 *
 * Plain TCP: one send() straight from the Lua string; what the kernel did
 * not take is copied to wb and sent by the op while the writer waits.
 * TLS: the plaintext is sealed into the session's write BIO; lt_conn_pump
 * moves the ciphertext to wb and sends it the same way, and is also what
 * sends the session's own output (handshake flights, alerts), from
 * whatever callback produced it. A TLS writer waits until everything
 * queued is out.
 */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>

#include "ltls.h"
#include "lua/lapi.h"

static void wake_writer(lt_conn *c) {
  if (c->writer) ty_actor_wake(c->writer);
}

/* TLS: once wb is sent, what the session has to send moves into it.
 * True when wb holds bytes to send. */
static bool refill(lt_conn *c) {
  if (c->woff < c->wlen) return true;
  size_t n = lt_tls_pending(c);
  if (!n) return false;
  if (c->wcap < n) {
    free(c->wb);
    c->wcap = n;
    c->wb = ty__xmalloc(n);
  }
  c->woff = c->wdirect = 0;
  c->wlen = lt_tls_output(c, c->wb, n);
  return c->wlen > 0;
}

bool lt_conn_flushed(const lt_conn *c) {
  return !ty__io_op_busy(&c->wop) && c->woff >= c->wlen && lt_tls_idle(c);
}

/* A shutdown("send") that waited for the queued bytes (TLS) happens. */
static void maybe_shut(lt_conn *c) {
  if (!c->shut_wr || c->closed || !lt_conn_flushed(c)) return;
  c->shut_wr = false;
  shutdown(c->fd, SHUT_WR);
}

/* A failed TLS session still sends its alert (that is how the peer learns
 * why); any other write error stops the stream. */
static bool can_send(const lt_conn *c) {
  return !c->closed && (!c->werr || c->werr == LT_ETLS) && c->io;
}

void lt_conn_pump(lt_conn *c) {
  if (!can_send(c) || ty__io_op_busy(&c->wop)) return;
  while (refill(c)) {
    ssize_t n;
    do
      n = send(c->fd, c->wb + c->woff, c->wlen - c->woff,
               MSG_NOSIGNAL | MSG_DONTWAIT);
    while (n < 0 && errno == EINTR);
    if (n > 0) {
      c->woff += (size_t)n;
      continue;
    }
    int err = n < 0 && errno != EAGAIN && errno != EWOULDBLOCK
                  ? -errno
                  : ty__io_send(c->io, &c->wop, c->fd, c->wb + c->woff,
                                c->wlen - c->woff);
    if (!err) {
      c->refs++; /* the op */
      return;
    }
    if (!c->werr) c->werr = err;
    wake_writer(c);
    return;
  }
  maybe_shut(c);
}

/* At close: a close_notify, sent if the socket takes it at once. */
void lt_conn_flush_now(lt_conn *c) {
  if (!c->tls || !can_send(c) || ty__io_op_busy(&c->wop)) return;
  lt_tls_close_notify(c);
  if (refill(c))
    (void)!send(c->fd, c->wb + c->woff, c->wlen - c->woff,
                MSG_NOSIGNAL | MSG_DONTWAIT);
  c->woff = c->wlen = 0;
}

/* A send failed (err) or could not be armed. With write-behind nobody
 * waits for it: ending the stream both ways wakes the reader (end of
 * file), so the connection closes instead of waiting for a next request. */
static void send_failed(lt_conn *c, int err) {
  if (!c->werr) c->werr = err;
  if (c->behind && !c->closed && err != -ECANCELED) shutdown(c->fd, SHUT_RDWR);
}

void lt_conn_on_write(ty__io_op *op, int res, const char *data) {
  (void)data;
  lt_conn *c = op->ud;
  free(c->wold); /* the op that read it has ended */
  c->wold = NULL;
  if (c->connecting) {
    c->connecting = false;
    c->cres = res;
  } else if (res > 0) {
    c->woff += (size_t)res;
    if (can_send(c) && refill(c)) {
      int err =
          ty__io_send(c->io, op, c->fd, c->wb + c->woff, c->wlen - c->woff);
      if (!err) return; /* the op's reference carries over */
      send_failed(c, err);
    }
  } else {
    send_failed(c, res ? res : -EPIPE);
  }
  maybe_shut(c);
  wake_writer(c);
  lt_conn_try_release(c);
  lt_conn_unref(c);
}

/* Bytes of this write the kernel took (TLS: 0, they are not plaintext). */
static size_t sent_total(const lt_conn *c) {
  return c->tls ? 0 : c->wdirect + c->woff;
}

static int write_fail(lua_State *L, lt_conn *c, const char *token) {
  lua_pushnil(L);
  lua_pushstring(L, token);
  lua_pushnumber(L, (lua_Number)sent_total(c));
  return 3;
}

static int write_wake(lua_State *co, ty_actor *a, lt_actor *la,
                      bool timed_out) {
  lt_conn *c = lt_rare_get(la)->ext_ctx;
  int n;
  if (c->closed) {
    n = write_fail(co, c, "closed");
  } else if (c->werr) {
    n = write_fail(co, c, lt_conn_errtok(c, c->werr));
  } else if (lt_conn_flushed(c)) {
    lua_pushboolean(co, 1);
    n = 1;
  } else if (c->tls && !lt_tls_done(c) && c->rerr) {
    /* Held back for a handshake that cannot end any more. */
    n = write_fail(co, c, lt_conn_errtok(c, c->rerr));
  } else if (!timed_out) {
    return lt_net_rewait(a, la);
  } else {
    /* The stream is cut mid-message: later writes fail too. */
    c->werr = -ETIMEDOUT;
    ty__io_cancel(c->io, &c->wop);
    n = write_fail(co, c, "timeout");
  }
  c->writer = NULL;
  lt_rare_get(la)->ext_cancel = NULL;
  lt_conn_unref(c);
  return n;
}

static void write_cancel(ty_actor *a, lt_actor *la) {
  (void)a;
  lt_conn *c = lt_rare_get(la)->ext_ctx;
  c->writer = NULL;
  lt_conn_unref(c);
}

static int wait_write(lua_State *L, lt_conn *c, ty_actor *a) {
  lt_actor *la = a->user;
  c->refs++; /* the waiter */
  c->writer = a;
  lt_rare_get(la)->ext_cancel = write_cancel;
  return lt_yield_ext(L, "tcp write", write_wake, c, c->t_send);
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

/* TLS: seal (the session copies), then send what it made. */
static int tls_write(lua_State *L, lt_conn *c, ty_actor *a) {
  if (c->werr) return write_fail(L, c, lt_conn_errtok(c, c->werr));
  int top = lua_gettop(L);
  for (int i = 2; i <= top; i++) luaL_checklstring(L, i, NULL);
  if (top > 2) lua_concat(L, top - 1);
  size_t len;
  const char *data = lua_tolstring(L, 2, &len);
  if (lt_tls_seal(c, data, len))
    return write_fail(L, c, lt_conn_errtok(c, c->werr));
  lt_conn_want_input(c); /* a handshake still to come needs the peer */
  lt_conn_pump(c);
  if (c->werr) return write_fail(L, c, lt_conn_errtok(c, c->werr));
  if (lt_conn_flushed(c)) {
    lua_pushboolean(L, 1);
    return 1;
  }
  return wait_write(L, c, a);
}

/* ---- write-behind ------------------------------------------------------
 * With c->behind (io_uring, plain TCP: tycho.http turns it on), a write
 * copies its bytes to wb behind the send op and returns true at once; the
 * op's submission goes out with the worker's next io_uring_enter, which
 * also waits for the next request, so a response costs no system call of
 * its own, and the peer the send wakes runs while this worker waits
 * instead of preempting it mid-turn (bench/results-http.md).
 * - Order: one send op at a time; bytes written while it is busy are
 *   appended to wb and go out when it ends (lt_conn_on_write re-arms it).
 *   A plain write that finds the op busy queues the same way, then waits.
 * - Memory: past WB_HIGH queued bytes a write waits until all is out (the
 *   send timeout applies): a peer that does not read holds at most
 *   WB_HIGH plus one write per connection.
 * - Errors: a failed send makes later writes fail (werr) and ends the
 *   stream (send_failed), so the reader wakes and the connection closes.
 * - Close: conn:close submits what is queued first (a send on a socket
 *   with room completes inside the submit); shutdown("send") waits for the
 *   queued bytes (shut_wr, as TLS does); a connection that moves to
 *   another actor first lets its queued bytes out (lt_conn_settle_behind).
 */
#define WB_HIGH (256 * 1024)

bool lt_conn_behind(lt_conn *c, bool on) {
  c->behind = on && !c->tls && c->io && ty__io_kind(c->io) == TY_IO_URING;
  return c->behind;
}

/* Room for n more bytes at wb + wlen. The bytes a busy op reads never
 * move: a larger buffer takes a copy of wb[woff..wlen) and the old one
 * stays (wold) until the op ends; a buffer in between is nobody's. */
static void behind_room(lt_conn *c, size_t n) {
  bool busy = ty__io_op_busy(&c->wop);
  size_t left = c->wlen - c->woff;
  if (!busy && c->woff) {
    memmove(c->wb, c->wb + c->woff, left);
    c->woff = 0;
    c->wlen = left;
  }
  if (c->wcap - c->wlen >= n) return;
  size_t cap = 2 * (left + n) < 4096 ? 4096 : 2 * (left + n);
  char *nb = ty__xmalloc(cap);
  if (left) memcpy(nb, c->wb + c->woff, left);
  if (busy && !c->wold) c->wold = c->wb;
  else free(c->wb);
  c->wb = nb;
  c->wcap = cap;
  c->woff = 0;
  c->wlen = left;
}

/* nil, token, 0: the bytes of an earlier write failed, none of this one
 * went out. */
static int behind_fail(lua_State *L, int err) {
  lua_pushnil(L);
  lua_pushstring(L, lt_net_errtok(err));
  lua_pushnumber(L, 0);
  return 3;
}

/* A write with write-behind on, or while queued bytes are still going out. */
static int write_behind(lua_State *L, lt_conn *c, ty_actor *a) {
  int top = lua_gettop(L);
  for (int i = 2; i <= top; i++) luaL_checklstring(L, i, NULL);
  for (int i = 2; i <= top; i++) {
    size_t n;
    const char *s = lua_tolstring(L, i, &n);
    behind_room(c, n);
    memcpy(c->wb + c->wlen, s, n);
    c->wlen += n;
  }
  c->wdirect = 0;
  if (!ty__io_op_busy(&c->wop) && c->woff < c->wlen) {
    int err =
        ty__io_send(c->io, &c->wop, c->fd, c->wb + c->woff, c->wlen - c->woff);
    if (err) {
      c->werr = err;
      c->woff = c->wlen = 0;
      return behind_fail(L, err);
    }
    c->refs++; /* the op */
  }
  if (c->behind && c->wlen - c->woff <= WB_HIGH) {
    lua_pushboolean(L, 1);
    return 1;
  }
  return wait_write(L, c, a);
}

bool lt_conn_settle_behind(lt_conn *c) {
  if (c->writer || c->connecting) return !ty__io_op_busy(&c->wop);
  /* A few turns: a send the socket has room for ends in the first. */
  for (int i = 0; i < 4 && ty__io_op_busy(&c->wop); i++) ty__io_wait(c->io, 0);
  return !ty__io_op_busy(&c->wop);
}

/* conn:write(data, ...) -> true | nil, err, bytes_sent */
int lt_conn_l_write(lua_State *L) {
  lt_conn *c = lt_conn_check(L);
  if (!c) return lt_push_fail(L, "closed");
  ty_actor *a = lt_net_actor(L, "tcp write");
  luaL_checklstring(L, 2, NULL);
  if (c->writer) return lt_push_fail(L, "busy");
  if (c->tls) return tls_write(L, c, a);
  if (c->behind || ty__io_op_busy(&c->wop)) {
    if (c->werr) return behind_fail(L, c->werr);
    return write_behind(L, c, a);
  }
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
  c->refs++; /* the op */
  return wait_write(L, c, a);
}

/* conn:shutdown([how]): "send" (the default) ends the sending side, so the
 * peer sees the end while we still read; "receive" or "both" likewise.
 * TLS: a close_notify goes first, and the socket's sending side ends once
 * it (and anything queued before it) is out. */
int lt_conn_l_shutdown(lua_State *L) {
  lt_conn *c = lt_conn_check(L);
  if (!c) return lt_push_fail(L, "closed");
  const char *how = luaL_optstring(L, 2, "send");
  int h = strcmp(how, "send") == 0      ? SHUT_WR
          : strcmp(how, "receive") == 0 ? SHUT_RD
          : strcmp(how, "both") == 0    ? SHUT_RDWR
                                        : -1;
  if (h < 0)
    return luaL_error(L,
                      "tcp shutdown: how must be \"send\", \"receive\" "
                      "or \"both\", not '%s'",
                      how);
  if (h != SHUT_RD && (c->tls || !lt_conn_flushed(c))) {
    if (c->tls) {
      lt_tls_close_notify(c);
      lt_conn_pump(c);
    }
    if (!lt_conn_flushed(c)) {
      c->shut_wr = true;
      h = h == SHUT_RDWR ? SHUT_RD : -1;
    }
  }
  if (h >= 0 && shutdown(c->fd, h) != 0)
    return lt_push_fail(L, lt_net_errtok(errno));
  lua_pushboolean(L, 1);
  return 1;
}
