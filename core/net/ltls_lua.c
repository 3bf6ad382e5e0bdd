/*
 * ltls_lua.c - TLS seen from Lua: the options of tcp.connect and
 * tcp.listen, conn:starttls, conn:tlsinfo and tycho.tls{} (ltls.h).
 *
 *   tcp.connect(host, port, {timeout=, tls = true, sni=, verify = true,
 *                            ca=, alpn = {"http/1.1"}})
 *   tcp.listen{..., tls = {cert=, key=, alpn = {"http/1.1"}}}
 *   conn:starttls{sni=, verify=, ca=, alpn=, timeout=}    client side
 *   conn:starttls{cert=, key=, alpn=, timeout=}           server side
 *   conn:tlsinfo() -> {version=, cipher=, alpn=, server_name=, verified=,
 *                      reused=} | nil (plain TCP, or no handshake yet)
 *   tycho.tls{ca = path | false}   the CA file client sessions use when
 *                                  given none (false: the system store)
 */
#include <openssl/x509.h>
#include <string.h>

#include "ltls.h"
#include "lua/lapi.h"

/* ---- options ------------------------------------------------------------------ */

/* Raises on a key of the table at idx that is not in `known`. */
static void check_keys(lua_State *L, int idx, const char *const *known,
                       const char *fname) {
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    lua_pop(L, 1);
    bool ok = false;
    if (lua_type(L, -1) == LUA_TSTRING)
      for (int i = 0; known[i] && !ok; i++)
        ok = strcmp(known[i], lua_tostring(L, -1)) == 0;
    if (!ok)
      luaL_error(L, "tycho.%s: unknown option '%s'", fname,
                 lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1)
                                                : luaL_typename(L, -1));
  }
}

/* The option k from the table at `inner` (when > 0), else `outer`; pushed. */
static int opt_field(lua_State *L, int inner, int outer, const char *k) {
  if (inner > 0) {
    lua_getfield(L, inner, k);
    if (!lua_isnil(L, -1)) return lua_type(L, -1);
    lua_pop(L, 1);
  }
  if (outer > 0) lua_getfield(L, outer, k);
  else lua_pushnil(L);
  return lua_type(L, -1);
}

static const char *opt_string(lua_State *L, int inner, int outer, const char *k,
                              const char *fname) {
  int t = opt_field(L, inner, outer, k);
  const char *s = NULL;
  if (t == LUA_TSTRING) s = lua_tostring(L, -1);
  else if (t != LUA_TNIL)
    luaL_error(L, "tycho.%s: %s must be a string, not a %s", fname, k,
               lua_typename(L, t));
  lua_pop(L, 1); /* the table still holds it */
  return s;
}

/* ALPN names (a string or an array of strings) in wire format; 0: none. */
static size_t opt_alpn(lua_State *L, int inner, int outer, unsigned char *out,
                       const char *fname) {
  int t = opt_field(L, inner, outer, "alpn");
  size_t len = 0;
  if (t == LUA_TSTRING || t == LUA_TTABLE) {
    int n = t == LUA_TSTRING ? 1 : (int)lua_objlen(L, -1);
    for (int i = 1; i <= n; i++) {
      if (t == LUA_TTABLE) lua_rawgeti(L, -1, i);
      else lua_pushvalue(L, -1);
      size_t k;
      const char *s = lua_tolstring(L, -1, &k);
      if (!s || k == 0 || k > 255 || len + 1 + k > LT_TLS_ALPN)
        luaL_error(L,
                   "tycho.%s: alpn must be protocol names (strings, %d "
                   "bytes in all), e.g. {\"http/1.1\"}",
                   fname, LT_TLS_ALPN);
      out[len++] = (unsigned char)k;
      memcpy(out + len, s, k);
      len += k;
      lua_pop(L, 1);
    }
  } else if (t != LUA_TNIL) {
    luaL_error(L, "tycho.%s: alpn must be a string or an array of strings",
               fname);
  }
  lua_pop(L, 1);
  return len;
}

static const char *const CLIENT_KEYS[] = {"sni", "verify", "ca", "alpn", NULL};
static const char *const CONNECT_KEYS[] = {"timeout", "tls",  "sni", "verify",
                                           "ca",      "alpn", NULL};

/* The client options from the table `inner` (tls = {...}) or `outer`. */
static int client_cfg(lua_State *L, int inner, int outer, const char *host,
                      const char *fname, lt_tls_client *out, char *err,
                      size_t errlen) {
  memset(out, 0, sizeof *out);
  const char *sni = opt_string(L, inner, outer, "sni", fname);
  const char *ca = opt_string(L, inner, outer, "ca", fname);
  int t = opt_field(L, inner, outer, "verify");
  if (t != LUA_TNIL && t != LUA_TBOOLEAN)
    luaL_error(L, "tycho.%s: verify must be true or false", fname);
  out->verify = t == LUA_TNIL || lua_toboolean(L, -1);
  lua_pop(L, 1);
  out->alpn_len = opt_alpn(L, inner, outer, out->alpn, fname);
  const char *name = sni ? sni : host;
  if (name) {
    size_t n = strlen(name);
    if (n >= 2 && name[0] == '[' && name[n - 1] == ']') { /* [::1] */
      name++;
      n -= 2;
    }
    if (n >= sizeof out->name)
      luaL_error(L, "tycho.%s: the server name is too long", fname);
    memcpy(out->name, name, n);
    out->name[n] = 0;
  }
  out->ctx = lt_tls_client_ctx(ca, out->verify, err, errlen);
  return out->ctx ? 1 : -1;
}

int lt_tls_client_opts(lua_State *L, int idx, const char *host,
                       const char *fname, lt_tls_client *out, char *err,
                       size_t errlen) {
  if (lua_type(L, idx) != LUA_TTABLE) return 0;
  check_keys(L, idx, CONNECT_KEYS, fname);
  lua_getfield(L, idx, "tls");
  int t = lua_type(L, -1);
  int inner = 0;
  if (t == LUA_TTABLE) {
    inner = lua_gettop(L);
    check_keys(L, inner, CLIENT_KEYS, fname);
  } else if (t != LUA_TNIL && t != LUA_TBOOLEAN) {
    luaL_error(L, "tycho.%s: tls must be true, false or a table", fname);
  }
  if (t == LUA_TNIL || (t == LUA_TBOOLEAN && !lua_toboolean(L, -1))) {
    lua_pop(L, 1);
    return 0;
  }
  int r = client_cfg(L, inner, idx, host, fname, out, err, errlen);
  lua_pop(L, 1);
  return r;
}

static const char *const SERVER_KEYS[] = {"cert", "key", "alpn", NULL};

SSL_CTX *lt_tls_server_opts(lua_State *L, int idx, const char *fname, char *err,
                            size_t errlen) {
  if (lua_type(L, idx) != LUA_TTABLE)
    luaL_error(L, "tycho.%s: tls must be a table {cert=, key=}", fname);
  check_keys(L, idx, SERVER_KEYS, fname);
  const char *cert = opt_string(L, idx, 0, "cert", fname);
  const char *key = opt_string(L, idx, 0, "key", fname);
  if (!cert || !key)
    luaL_error(L, "tycho.%s: tls needs cert and key (paths of PEM files)",
               fname);
  unsigned char alpn[LT_TLS_ALPN];
  size_t alpn_len = opt_alpn(L, idx, 0, alpn, fname);
  return lt_tls_server_ctx(cert, key, alpn, alpn_len, err, errlen);
}

/* ---- conn:starttls ------------------------------------------------------------ */

static int hs_wake(lua_State *co, ty_actor *a, lt_actor *la, bool timed_out) {
  lt_conn *c = lt_rare_get(la)->ext_ctx;
  int n = lt_tls_wait_result(co, c, timed_out);
  if (n < 0) return lt_net_rewait(a, la);
  c->writer = NULL;
  lt_rare_get(la)->ext_cancel = NULL;
  if (n == 0) {
    lua_pushboolean(co, 1);
    n = 1;
  } else {
    lt_conn_close(c);
  }
  lt_conn_unref(c);
  return n;
}

static void hs_cancel(ty_actor *a, lt_actor *la) {
  (void)a;
  lt_conn *c = lt_rare_get(la)->ext_ctx;
  c->writer = NULL;
  lt_conn_unref(c);
}

static const char *const STARTTLS_KEYS[] = {"sni",     "verify", "ca",  "alpn",
                                            "timeout", "cert",   "key", NULL};

/* Gives c its session from the options at 2: 0, or pushes nil, err. */
static int starttls_attach(lua_State *L, lt_conn *c, bool server) {
  char err[256];
  if (server) {
    lua_newtable(L); /* the options a server session takes */
    for (int i = 0; SERVER_KEYS[i]; i++) {
      lua_getfield(L, 2, SERVER_KEYS[i]);
      lua_setfield(L, -2, SERVER_KEYS[i]);
    }
    SSL_CTX *ctx =
        lt_tls_server_opts(L, lua_gettop(L), "tcp starttls", err, sizeof err);
    lua_pop(L, 1);
    if (!ctx) return lt_push_fail(L, err);
    int r = lt_tls_attach_server(c, ctx);
    SSL_CTX_free(ctx); /* the session holds its own reference */
    return r ? lt_push_fail(L, "tls: cannot create a session") : 0;
  }
  lt_tls_client cfg;
  if (client_cfg(L, 0, 2, NULL, "tcp starttls", &cfg, err, sizeof err) < 0 ||
      lt_tls_attach_client(c, &cfg, err, sizeof err))
    return lt_push_fail(L, err);
  return 0;
}

/* conn:starttls([opts]) -> true | nil, err: TLS from here on, over a
 * connected socket (STARTTLS, a cosocket's sslhandshake). Bytes already
 * received and not read are the peer's first TLS bytes. The handshake has
 * opts.timeout (else the connect timeout); a failure closes c. */
int lt_tls_l_starttls(lua_State *L) {
  lt_conn *c = lt_conn_check(L);
  if (!lua_isnoneornil(L, 2)) luaL_checktype(L, 2, LUA_TTABLE);
  else {
    lua_settop(L, 1);
    lua_newtable(L);
  }
  check_keys(L, 2, STARTTLS_KEYS, "tcp starttls");
  lua_getfield(L, 2, "timeout");
  int64_t tmo = lt_net_timeout(L, -1, c ? c->t_connect : -1, "tcp starttls");
  lua_pop(L, 1);
  if (!c) return lt_push_fail(L, "closed");
  ty_actor *a = lt_net_actor(L, "tcp starttls");
  if (c->tls)
    return luaL_error(L, "tcp starttls: the connection speaks TLS already");
  if (c->reader || c->writer || !lt_conn_flushed(c))
    return lt_push_fail(L, "busy");
  if (c->werr) return lt_push_fail(L, lt_conn_errtok(c, c->werr));
  lua_getfield(L, 2, "cert");
  bool server = !lua_isnil(L, -1);
  lua_pop(L, 1);
  int r = starttls_attach(L, c, server);
  if (r) return r;
  /* What was received and not read: the first bytes of the peer's TLS. */
  size_t n = c->r1 - c->r0;
  char *early = NULL;
  if (n) {
    early = ty__xmalloc(n);
    memcpy(early, c->rb + c->r0, n);
    c->r0 = c->r1 = c->scan = 0;
  }
  if (lt_tls_begin(c)) lt_conn_pump(c);
  if (n && lt_tls_input(c, early, n)) lt_conn_pump(c);
  free(early);
  lt_conn_want_input(c);
  r = lt_tls_wait_result(L, c, false);
  if (r == 0) {
    lua_pushboolean(L, 1);
    return 1;
  }
  if (r > 0) {
    lt_conn_close(c);
    return r;
  }
  lt_actor *la = a->user;
  c->refs++;
  c->writer = a;
  lt_rare_get(la)->ext_cancel = hs_cancel;
  return lt_yield_ext(L, "tcp starttls", hs_wake, c, tmo);
}

/* ---- conn:tlsinfo, tycho.tls -------------------------------------------------- */

static void set_str(lua_State *L, const char *k, const char *v, size_t n) {
  if (!v) return;
  lua_pushlstring(L, v, n);
  lua_setfield(L, -2, k);
}

/* conn:tlsinfo() -> table | nil (plain TCP, or the handshake has not
 * ended well yet) */
int lt_tls_l_info(lua_State *L) {
  lt_conn *c = lt_conn_check(L);
  if (!c || !lt_tls_done(c)) return 0;
  SSL *ssl = lt_tls_ssl(c);
  lua_createtable(L, 0, 6);
  const char *v = SSL_get_version(ssl);
  set_str(L, "version", v, strlen(v));
  v = SSL_get_cipher_name(ssl);
  set_str(L, "cipher", v, v ? strlen(v) : 0);
  const unsigned char *p;
  unsigned int plen;
  SSL_get0_alpn_selected(ssl, &p, &plen);
  if (plen) set_str(L, "alpn", (const char *)p, plen);
  v = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
  set_str(L, "server_name", v, v ? strlen(v) : 0);
  lua_pushboolean(L, SSL_get_verify_mode(ssl) != SSL_VERIFY_NONE &&
                         SSL_get_verify_result(ssl) == X509_V_OK);
  lua_setfield(L, -2, "verified");
  lua_pushboolean(L, SSL_session_reused(ssl));
  lua_setfield(L, -2, "reused");
  return 1;
}

static const char *const CONFIG_KEYS[] = {"ca", NULL};

/* tycho.tls{ca = path | false} -> true | nil, "tls: ..." (the file is
 * loaded now, so a bad one is reported here) */
int lt_tls_l_config(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  check_keys(L, 1, CONFIG_KEYS, "tls");
  lua_getfield(L, 1, "ca");
  const char *ca = NULL;
  if (lua_type(L, -1) == LUA_TSTRING) ca = lua_tostring(L, -1);
  else if (!lua_isnil(L, -1) && lua_toboolean(L, -1))
    return luaL_error(L, "tycho.tls: ca must be a path or false");
  char err[256];
  if (ca && !lt_tls_client_ctx(ca, true, err, sizeof err))
    return lt_push_fail(L, err);
  lt_tls_set_default_ca(ca);
  lua_pushboolean(L, 1);
  return 1;
}
