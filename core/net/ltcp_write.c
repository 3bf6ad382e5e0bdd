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

void lt_conn_on_write(ty__io_op *op, int res, const char *data) {
  (void)data;
  lt_conn *c = op->ud;
  if (c->connecting) {
    c->connecting = false;
    c->cres = res;
  } else if (res > 0) {
    c->woff += (size_t)res;
    if (can_send(c) && refill(c)) {
      int err =
          ty__io_send(c->io, op, c->fd, c->wb + c->woff, c->wlen - c->woff);
      if (!err) return; /* the op's reference carries over */
      if (!c->werr) c->werr = err;
    }
  } else if (!c->werr) {
    c->werr = res ? res : -EPIPE;
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

/* conn:write(data, ...) -> true | nil, err, bytes_sent */
int lt_conn_l_write(lua_State *L) {
  lt_conn *c = lt_conn_check(L);
  if (!c) return lt_push_fail(L, "closed");
  ty_actor *a = lt_net_actor(L, "tcp write");
  luaL_checklstring(L, 2, NULL);
  if (c->writer) return lt_push_fail(L, "busy");
  if (c->tls) return tls_write(L, c, a);
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
  if (c->tls && h != SHUT_RD) {
    lt_tls_close_notify(c);
    lt_conn_pump(c);
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
