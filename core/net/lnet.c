/*
 * lnet.c - the network half of tycho.core: what tycho.tcp (ltcp.c) and the
 * HTTP server build on.
 *
 *  - error tokens: an errno becomes a short stable word ("timeout",
 *    "refused", "reset", "closed", ...), the `err` of `nil, err`;
 *  - host and timeout arguments, the running actor, waits, metatables.
 * It is the bottom floor of core/net (scripts/floors/net.txt): it calls no
 * other file of the folder. The transit table is in ltcp_transit.c, the
 * module's fields (tcp, tls, _set_nofile) in lnet_open.c.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>

#include "lnet.h"
#include "lua/lapi.h"
#include "lua/lrun.h"

/* ---- error tokens ------------------------------------------------------ */

/* Anything not listed: the errno's name, lower case, without the E. */
static const char *errno_word(int e) {
  static _Thread_local char buf[32];
  const char *name = strerrorname_np(e);
  if (!name) return "error";
  size_t i = 0;
  for (name += name[0] == 'E'; name[i] && i < sizeof buf - 1; i++)
    buf[i] = (char)(name[i] >= 'A' && name[i] <= 'Z' ? name[i] + 32 : name[i]);
  buf[i] = 0;
  return buf;
}

const char *lt_net_errtok(int err) {
  int e = err < 0 ? -err : err;
  switch (e) {
  case ETIMEDOUT:
  case ETIME: return "timeout";
  case ECONNREFUSED: return "refused";
  case ECONNRESET: return "reset";
  case EPIPE:
  case ESHUTDOWN:
  case ENOTCONN:
  case EBADF:
  case ECANCELED: return "closed";
  case ECONNABORTED: return "aborted";
  case ENETUNREACH:
  case EHOSTUNREACH:
  case ENETDOWN:
  case EHOSTDOWN: return "unreachable";
  case EADDRINUSE: return "addrinuse";
  case EADDRNOTAVAIL: return "addrnotavail";
  case EACCES:
  case EPERM: return "denied";
  case EMFILE:
  case ENFILE: return "nofile";
  case ENOMEM:
  case ENOBUFS: return "nomem";
  case EAFNOSUPPORT: return "nosupport";
  default: return errno_word(e);
  }
}

/* ---- arguments --------------------------------------------------------- */

int lt_net_addr(const char *host, int port, struct sockaddr_storage *ss,
                socklen_t *len) {
  memset(ss, 0, sizeof *ss);
  struct sockaddr_in *v4 = (struct sockaddr_in *)ss;
  struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)ss;
  if (!host || strcmp(host, "*") == 0) host = "0.0.0.0";
  if (strcmp(host, "localhost") == 0) host = "127.0.0.1";
  if (inet_pton(AF_INET, host, &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons((uint16_t)port);
    *len = sizeof *v4;
    return 0;
  }
  char buf[INET6_ADDRSTRLEN + 2];
  size_t n = strlen(host);
  if (n >= 2 && host[0] == '[' && host[n - 1] == ']' && n - 2 < sizeof buf) {
    memcpy(buf, host + 1, n - 2); /* [::1] */
    buf[n - 2] = 0;
    host = buf;
  }
  if (inet_pton(AF_INET6, host, &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons((uint16_t)port);
    *len = sizeof *v6;
    return 0;
  }
  return -1;
}

int lt_net_push_addr(lua_State *L, const struct sockaddr_storage *sa) {
  char buf[INET6_ADDRSTRLEN];
  int port = 0;
  if (sa->ss_family == AF_INET) {
    const struct sockaddr_in *v4 = (const struct sockaddr_in *)sa;
    inet_ntop(AF_INET, &v4->sin_addr, buf, sizeof buf);
    port = ntohs(v4->sin_port);
  } else if (sa->ss_family == AF_INET6) {
    const struct sockaddr_in6 *v6 = (const struct sockaddr_in6 *)sa;
    inet_ntop(AF_INET6, &v6->sin6_addr, buf, sizeof buf);
    port = ntohs(v6->sin6_port);
  } else {
    return lt_push_fail(L, "nosupport");
  }
  lua_pushstring(L, buf);
  lua_pushinteger(L, port);
  return 2;
}

int64_t lt_net_timeout(lua_State *L, int idx, int64_t def, const char *fname) {
  if (lua_isnoneornil(L, idx)) return def;
  if (lua_type(L, idx) != LUA_TNUMBER)
    luaL_error(L,
               "tycho.%s: bad timeout (expected seconds as a number, got "
               "%s)",
               fname, luaL_typename(L, idx));
  lua_Number s = lua_tonumber(L, idx);
  if (s != s) luaL_error(L, "tycho.%s: the timeout is NaN", fname);
  if (s < 0 || s > 1e9) return -1; /* negative or huge: no timeout */
  return (int64_t)(s * 1e9);
}

ty_actor *lt_net_actor(lua_State *L, const char *fname) {
  return lt_current_blocking(L, fname).a;
}

int lt_net_rewait(ty_actor *a, lt_actor *la) {
  int64_t left = -1;
  if (la->deadline_ns) {
    uint64_t now =
        ty_runtime_now_ns(lt_ctx_get()->rt); /* as lt_wait_for set it */
    left = la->deadline_ns > now ? (int64_t)(la->deadline_ns - now) : 0;
  }
  ty_actor_wait(a, left, UINT64_MAX);
  return -1;
}

void lt_net_metatable(lua_State *L, const char *name, const luaL_Reg *methods,
                      lua_CFunction gc, lua_CFunction tostring) {
  if (!luaL_newmetatable(L, name)) return;
  lua_newtable(L);
  luaL_register(L, NULL, methods);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, gc);
  lua_setfield(L, -2, "__gc");
  lua_pushcfunction(L, tostring);
  lua_setfield(L, -2, "__tostring");
  lua_pushboolean(L, 0); /* getmetatable() shows nothing to scripts */
  lua_setfield(L, -2, "__metatable");
}

/* Small writes go out at once (Nagle off): requests and replies. */
void lt_net_nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}
