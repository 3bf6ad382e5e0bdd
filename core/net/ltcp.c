/*
 * ltcp.c - tycho.tcp.connect and the tycho.tcp table.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>

#include "ltls.h"
#include "lua/lapi.h"

/* ---- connect ----------------------------------------------------------- */

/* TLS: connected, the handshake starts (and is waited for in the same
 * wait: the timeout covers both). */
static void connected_tls(lt_conn *c) {
  lt_net_nodelay(c->fd);
  if (lt_tls_begin(c)) lt_conn_pump(c);
  lt_conn_want_input(c);
}

static int connect_wake(lua_State *co, ty_actor *a, lt_actor *la,
                        bool timed_out) {
  lt_conn *c = lt_rare_get(la)->ext_ctx;
  if (c->connecting && !c->closed && !timed_out) return lt_net_rewait(a, la);
  int n = -1;
  if (!c->closed && !c->connecting && c->cres >= 0 && c->tls) {
    if (!lt_tls_done(c) && !ty__io_op_busy(&c->wop) && !c->werr)
      connected_tls(c); /* does nothing once begun */
    n = lt_tls_wait_result(co, c, timed_out);
    if (n < 0) return lt_net_rewait(a, la);
  }
  c->writer = NULL;
  lt_rare_get(la)->ext_cancel = NULL;
  if (n > 0) {
    lt_conn_close(c); /* the handshake failed: its `nil, err` is pushed */
  } else if (c->closed) {
    n = lt_push_fail(co, "closed");
  } else if (c->connecting) {
    n = lt_push_fail(co, "timeout");
    lt_conn_close(c);
  } else if (c->cres < 0) {
    n = lt_push_fail(co, lt_net_errtok(c->cres));
    lt_conn_close(c);
  } else {
    if (!c->tls) lt_net_nodelay(c->fd);
    lt_conn_push(co, c);
    n = 1;
  }
  lt_conn_unref(c);
  return n;
}

/* The connecting actor ends (killed, or the runtime stops) before it saw
 * the outcome. No userdata holds the connection yet, so the waiter's
 * reference may be the last one (the connect may have completed already):
 * close it before dropping that reference, or the memory would go with a
 * descriptor still open. */
static void connect_cancel(ty_actor *a, lt_actor *la) {
  (void)a;
  lt_conn *c = lt_rare_get(la)->ext_ctx;
  c->writer = NULL;
  lt_conn_close(c);
  lt_conn_unref(c);
}

static int check_port(lua_State *L, int idx, const char *fname) {
  lua_Number p = luaL_checknumber(L, idx);
  if (!(p >= 0 && p <= 65535) || p != (lua_Number)(int)p)
    luaL_error(L, "tycho.tcp.%s: the port must be an integer from 0 to 65535",
               fname);
  return (int)p;
}

/* The timeout: a number, or the `timeout` of an options table. */
static int64_t connect_timeout(lua_State *L) {
  if (lua_type(L, 3) != LUA_TTABLE)
    return lt_net_timeout(L, 3, DEFAULT_TIMEOUT_NS, "tcp.connect");
  lua_getfield(L, 3, "timeout");
  int64_t tmo = lt_net_timeout(L, -1, DEFAULT_TIMEOUT_NS, "tcp.connect");
  lua_pop(L, 1);
  return tmo;
}

/* tycho.tcp.connect(host, port [, timeout | opts [, name]]) -> conn |
 * nil, err. opts: {timeout=, tls=, sni=, verify=, ca=, alpn=} (ltls_lua.c);
 * name: the host name the address was resolved from (lua/tycho/init.lua),
 * checked against the certificate when sni= is not given. */
static int l_connect(lua_State *L) {
  const char *host = luaL_checkstring(L, 1);
  int port = check_port(L, 2, "connect");
  int64_t tmo = connect_timeout(L);
  const char *name = luaL_optstring(L, 4, host);
  ty_actor *a = lt_net_actor(L, "tcp.connect");
  lt_tls_client tls;
  char err[256];
  int want_tls =
      lt_tls_client_opts(L, 3, name, "tcp.connect", &tls, err, sizeof err);
  if (want_tls < 0) return lt_push_fail(L, err);
  struct sockaddr_storage ss;
  socklen_t len;
  if (lt_net_addr(host, port, &ss, &len)) return lt_push_fail(L, "badhost");
  int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return lt_push_fail(L, lt_net_errtok(errno));
  lt_actor *la = a->user;
  lt_conn *c = lt_conn_new(fd, la);
  c->refs++; /* the waiter (below) or this function */
  if (want_tls && lt_tls_attach_client(c, &tls, err, sizeof err)) {
    lt_conn_close(c);
    lt_conn_unref(c);
    return lt_push_fail(L, err);
  }
  c->connecting = true;
  int ierr = ty__io_connect(c->io, &c->wop, fd, (struct sockaddr *)&ss, len);
  if (ierr) {
    c->connecting = false;
    lt_conn_close(c);
    lt_conn_unref(c);
    return lt_push_fail(L, lt_net_errtok(ierr));
  }
  c->refs++; /* the op */
  c->writer = a;
  lt_rare_get(la)->ext_cancel = connect_cancel;
  return lt_yield_ext(L, "tcp.connect", connect_wake, c, tmo);
}

/* ---- the tycho.tcp table ------------------------------------------------ */

/* tycho.tcp.backend() -> "io_uring" | "epoll" (this worker's), or nil. */
static int l_backend(lua_State *L) {
  ty_worker *w = ty_worker_current();
  if (!w || !ty_worker_io(w)) return 0;
  lua_pushstring(L, ty__io_name(ty_worker_io(w)));
  return 1;
}

static const luaL_Reg tcp_funcs[] = {{"listen", lt_tcp_listen},
                                     {"connect", l_connect},
                                     {"backend", l_backend},
                                     {NULL, NULL}};

void lt_tcp_push(lua_State *L) {
  lt_conn_metatable(L);
  lt_lst_metatable(L);
  lua_newtable(L);
  luaL_register(L, NULL, tcp_funcs);
}
