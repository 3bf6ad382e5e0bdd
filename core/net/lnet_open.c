/*
 * lnet_open.c - the network half of tycho.core's fields: tcp (ltcp.c), tls
 * (ltls_lua.c), _set_nofile and _io_available; and the codec hooks through
 * which connections and listeners travel in messages (ltcp_transit.c). The
 * top floor of core/net's tcp (scripts/floors/net.txt): nothing below
 * calls it.
 */
#include <errno.h>
#include <sys/resource.h>

#include "ltls.h"
#include "lua/codec.h"
#include "lua/lapi.h"

/* _set_nofile(n): raises the soft RLIMIT_NOFILE to n (at most the hard
 * limit); returns the soft and hard limits now in force. */
static int l_set_nofile(lua_State *L) {
  lua_Number n = luaL_checknumber(L, 1);
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl))
    return lt_push_fail(L, lt_net_errtok(errno));
  rlim_t want = n < 0 ? 0 : (rlim_t)n;
  if (want > rl.rlim_max) want = rl.rlim_max;
  if (want > rl.rlim_cur) {
    rl.rlim_cur = want;
    if (setrlimit(RLIMIT_NOFILE, &rl))
      return lt_push_fail(L, lt_net_errtok(errno));
  }
  lua_pushnumber(L, (lua_Number)rl.rlim_cur);
  lua_pushnumber(L, (lua_Number)rl.rlim_max);
  return 2;
}

/* _io_available(kind): can this process use the backend ("uring",
 * "epoll"; "auto" answers with the backend auto would pick)? */
static int l_io_available(lua_State *L) {
  int kind = ty__io_kind_parse(luaL_optstring(L, 1, "auto"));
  if (kind < 0)
    return luaL_error(L, "_io_available: \"uring\", \"epoll\" or \"auto\"");
  int r = ty__io_available(kind);
  if (kind == TY_IO_AUTO)
    lua_pushstring(L, r == TY_IO_URING ? "uring" : "epoll");
  else lua_pushboolean(L, r);
  return 1;
}

void lt_open_net(lua_State *L) {
  lt_codec_set_hooks(&lt_tcp_hooks);
  lt_tcp_push(L);
  lua_setfield(L, -2, "tcp");
  lua_pushcfunction(L, lt_tls_l_config);
  lua_setfield(L, -2, "tls");
  lua_pushcfunction(L, l_set_nofile);
  lua_setfield(L, -2, "_set_nofile");
  lua_pushcfunction(L, l_io_available);
  lua_setfield(L, -2, "_io_available");
  if (ty_worker_current()) lt_transit_count_state(L);
}
