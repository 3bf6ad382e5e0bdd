/*
 * ltcp_conn.c - a tycho.tcp connection: the C object, reading and the Lua
 * methods; the read buffer is ltcp_buf.c, references and re-arming
 * ltcp_life.c, writing ltcp_write.c, closing ltcp_close.c (ltcp.h tells
 * the whole story; their floors: scripts/floors/net.txt).
 */
#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <unistd.h>

#include "ltls.h"
#include "lua/lapi.h"
#include "lua/lstate.h"

static void conn_op_done(lt_conn *c) {
  lt_conn_try_release(c);
  lt_conn_unref(c);
}

static void conn_res_close(lt_res *r) { lt_conn_close((lt_conn *)r); }

static void on_recv(ty__io_op *op, int res, const char *data);

/* A connection on the calling worker, owned by `owner` (may be NULL). */
lt_conn *lt_conn_new(int fd, lt_actor *owner) {
  lt_conn *c = ty__xcalloc(1, sizeof *c);
  c->fd = fd;
  c->w = ty_worker_current();
  c->io = ty_worker_io(c->w);
  c->rop.cb = on_recv;
  c->wop.cb = lt_conn_on_write;
  c->rop.ud = c->wop.ud = c;
  c->res.close = conn_res_close;
  c->t_connect = c->t_send = c->t_read = DEFAULT_TIMEOUT_NS;
  c->owner = owner;
  if (owner) lt_res_add(owner, &c->res);
  return c;
}

/* ---- connections: reading ---------------------------------------------- */

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
  case RM_COUNT: return lt_conn_avail(c) >= c->rwant;
  case RM_SOME: return lt_conn_avail(c) > 0;
  case RM_LINE: return find_nl(c) != NULL;
  default: return false; /* "*a" ends only with the stream */
  }
}

static void on_recv(ty__io_op *op, int res, const char *data) {
  lt_conn *c = op->ud;
  bool final = !ty__io_op_busy(op);
  if (res > 0 && !c->closed) {
    if (c->tls) {
      if (lt_tls_input(c, data, (size_t)res)) lt_conn_pump(c);
    } else {
      memcpy(lt_conn_rb_space(c, (size_t)res), data, (size_t)res);
      c->r1 += (size_t)res;
    }
  } else if (res == 0) {
    if (!c->rerr) c->rerr = LT_EOF; /* a TLS failure before it stands */
  } else if (res < 0 && res != -ECANCELED && !c->rerr) {
    c->rerr = res;
  }
  if (c->reader && read_ready(c)) ty_actor_wake(c->reader);
  /* A handshake that cannot end any more: its waiter hears it. */
  if (c->tls && c->rerr && c->writer && !lt_tls_done(c))
    ty_actor_wake(c->writer);
  if (!final) {
    /* Nobody asked for this much yet: let the peer wait. */
    if (lt_conn_avail(c) >= READ_HIGH && !lt_conn_reader_hungry(c))
      ty__io_cancel(c->io, op);
    return;
  }
  if (res == -ECANCELED)
    lt_conn_want_input(c); /* paused, but wanted again since */
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
  else take(L, c, lt_conn_avail(c), 0);
  return 3;
}

static const char *rerr_token(const lt_conn *c) {
  if (c->closed || c->rerr == LT_EOF) return "closed";
  return lt_conn_errtok(c, c->rerr);
}

/* Answers a read from the buffer if it can: pushes the results and
 * returns their count, or returns -1 (more bytes needed). */
static int read_now(lua_State *L, lt_conn *c, int mode, size_t want) {
  if (c->closed) return read_fail(L, c, "closed");
  if (mode == RM_COUNT && lt_conn_avail(c) >= want) {
    take(L, c, want, 0);
    return 1;
  }
  if (mode == RM_SOME && lt_conn_avail(c)) {
    take(L, c, lt_conn_avail(c) < want ? lt_conn_avail(c) : want, 0);
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
    take(L, c, lt_conn_avail(c), 0);
    return 1;
  }
  if (c->rerr) return read_fail(L, c, rerr_token(c));
  return -1;
}

/* After a read took bytes: the recv may resume (it pauses when full). */
static int read_done(lt_conn *c, int n) {
  lt_conn_want_input(c);
  return n;
}

static int read_wake(lua_State *co, ty_actor *a, lt_actor *la, bool timed_out) {
  lt_conn *c = lt_rare_get(la)->ext_ctx;
  int n = read_now(co, c, c->rmode, c->rwant);
  if (n < 0 && !timed_out) return lt_net_rewait(a, la);
  c->reader = NULL;
  lt_rare_get(la)->ext_cancel = NULL;
  if (n < 0) n = read_fail(co, c, "timeout");
  else read_done(c, n);
  lt_conn_unref(c);
  return n;
}

static void read_cancel(ty_actor *a, lt_actor *la) {
  (void)a;
  lt_conn *c = lt_rare_get(la)->ext_ctx;
  c->reader = NULL;
  lt_conn_unref(c);
}

/* ---- connections: Lua methods ------------------------------------------ */

void lt_conn_push(lua_State *L, lt_conn *c) {
  conn_ud *u = lua_newuserdata(L, sizeof *u);
  u->c = c;
  if (c) c->refs++;
  lt_conn_metatable(L);
  lua_getfield(L, LUA_REGISTRYINDEX, LT_CONN_MT);
  lua_setmetatable(L, -2);
}

static conn_ud *check_conn_ud(lua_State *L) {
  return luaL_checkudata(L, 1, LT_CONN_MT);
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
  luaL_error(L,
             "tycho.tcp: unknown read pattern '%s' (use a byte count, "
             "\"*l\" or \"*a\")",
             lua_tostring(L, idx));
  return 0;
}

/* conn:read(n | "*l" | "*a" [, timeout]) -> data | nil, err, partial */
static int l_read(lua_State *L) {
  lt_conn *c = lt_conn_check(L);
  size_t want = 0;
  int mode = parse_pattern(L, 2, &want);
  if (!c) return read_fail(L, &(lt_conn){.closed = true}, "closed");
  ty_actor *a = lt_net_actor(L, "tcp read");
  int64_t tmo = lt_net_timeout(L, 3, c->t_read, "tcp read");
  if (c->reader) return lt_push_fail(L, "busy");
  c->rmode = (uint8_t)mode;
  c->rwant = want;
  int n = read_now(L, c, mode, want);
  if (n >= 0) return read_done(c, n);
  if (tmo == 0) { /* a poll: nothing yet, but start receiving */
    lt_conn_want_input(c);
    return read_fail(L, c, "timeout");
  }
  c->reader = a; /* first: a hungry reader keeps the recv going */
  lt_conn_want_input(c);
  if (c->rerr) { /* the recv could not be armed: answer now */
    c->reader = NULL;
    return read_now(L, c, mode, want);
  }
  lt_actor *la = a->user;
  c->refs++;
  lt_rare_get(la)->ext_cancel = read_cancel;
  return lt_yield_ext(L, "tcp read", read_wake, c, tmo);
}

/* conn:read_some(max [, timeout]) -> 1..max bytes, as soon as any have
 * arrived | nil, err */
static int l_read_some(lua_State *L) {
  lt_conn *c = lt_conn_check(L);
  lua_Number max = luaL_checknumber(L, 2);
  if (!(max >= 1) || max != (lua_Number)(size_t)max)
    return luaL_error(L, "tycho.tcp: read_some wants a byte count >= 1");
  if (!c) return lt_push_fail(L, "closed");
  ty_actor *a = lt_net_actor(L, "tcp read_some");
  int64_t tmo = lt_net_timeout(L, 3, c->t_read, "tcp read_some");
  if (c->reader) return lt_push_fail(L, "busy");
  c->rmode = RM_SOME;
  c->rwant = (size_t)max;
  int n = read_now(L, c, RM_SOME, c->rwant);
  if (n >= 0) return read_done(c, n);
  if (tmo == 0) {
    lt_conn_want_input(c);
    return lt_push_fail(L, "timeout");
  }
  c->reader = a;
  lt_conn_want_input(c);
  if (c->rerr) {
    c->reader = NULL;
    return read_now(L, c, RM_SOME, c->rwant);
  }
  lt_actor *la = a->user;
  c->refs++;
  lt_rare_get(la)->ext_cancel = read_cancel;
  return lt_yield_ext(L, "tcp read_some", read_wake, c, tmo);
}

static int l_close(lua_State *L) {
  conn_ud *u = check_conn_ud(L);
  lt_conn *c = u->c;
  u->c = NULL;
  if (c) {
    lt_conn_close(c);
    lt_conn_unref(c);
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
  lt_conn *c = lt_conn_check(L);
  if (!c) return lt_push_fail(L, "closed");
  c->t_connect = opt_setting(L, 2, c->t_connect);
  c->t_send = opt_setting(L, 3, c->t_send);
  c->t_read = opt_setting(L, 4, c->t_read);
  lua_pushboolean(L, 1);
  return 1;
}

static int sock_name(lua_State *L, bool peer) {
  lt_conn *c = lt_conn_check(L);
  if (!c) return lt_push_fail(L, "closed");
  struct sockaddr_storage ss;
  socklen_t len = sizeof ss;
  int r = peer ? getpeername(c->fd, (struct sockaddr *)&ss, &len)
               : getsockname(c->fd, (struct sockaddr *)&ss, &len);
  if (r) return lt_push_fail(L, lt_net_errtok(errno));
  return lt_net_push_addr(L, &ss);
}

static int l_getpeername(lua_State *L) { return sock_name(L, true); }
static int l_getsockname(lua_State *L) { return sock_name(L, false); }

static int l_conn_gc(lua_State *L) {
  conn_ud *u = lua_touserdata(L, 1);
  lt_conn *c = u->c;
  u->c = NULL;
  if (c) {
    lt_conn_close(c); /* unreachable: nobody can use it any more */
    lt_conn_unref(c);
  }
  return 0;
}

static int l_conn_tostring(lua_State *L) {
  conn_ud *u = lua_touserdata(L, 1);
  if (u->c && !u->c->closed)
    lua_pushfstring(L, "tcp connection (fd %d%s)", u->c->fd,
                    u->c->tls ? ", tls" : "");
  else lua_pushliteral(L, "tcp connection (closed)");
  return 1;
}

lt_conn *lt_conn_test(lua_State *L, int idx) {
  conn_ud *u = luaL_testudata(L, idx, LT_CONN_MT);
  return u && u->c && !u->c->closed ? u->c : NULL;
}

void lt_conn_unread(lt_conn *c, const char *data, size_t n) {
  if (!n) return;
  if (c->r0 < n) { /* room in front: a new buffer */
    size_t used = lt_conn_avail(c),
           cap = c->rcap > n + used ? c->rcap : n + used;
    char *nb = ty__xmalloc(cap);
    if (used) memcpy(nb + n, c->rb + c->r0, used);
    free(c->rb);
    c->rb = nb;
    c->rcap = cap;
    c->r0 = n;
    c->r1 = n + used;
  }
  c->r0 -= n;
  memcpy(c->rb + c->r0, data, n);
  c->scan = c->r0; /* no line searched in the new bytes yet */
}

static const luaL_Reg conn_methods[] = {{"read", l_read},
                                        {"read_some", l_read_some},
                                        {"write", lt_conn_l_write},
                                        {"shutdown", lt_conn_l_shutdown},
                                        {"close", l_close},
                                        {"settimeouts", l_settimeouts},
                                        {"getpeername", l_getpeername},
                                        {"getsockname", l_getsockname},
                                        {"starttls", lt_tls_l_starttls},
                                        {"tlsinfo", lt_tls_l_info},
                                        {"_detach", lt_conn_l_detach},
                                        {"_attach", lt_conn_l_attach},
                                        {NULL, NULL}};

void lt_conn_metatable(lua_State *L) {
  lt_net_metatable(L, LT_CONN_MT, conn_methods, l_conn_gc, l_conn_tostring);
  lua_pop(L, 1);
}
