/*
 * lnet.c - the network half of tycho.core: what tycho.tcp (ltcp.c) and the
 * HTTP server build on.
 *
 *  - error tokens: an errno becomes a short stable word ("timeout",
 *    "refused", "reset", "closed", ...), the `err` of `nil, err`;
 *  - host and timeout arguments;
 *  - handles in messages: a connection or listener inside a message travels
 *    as a token of the transit table (see codec.h); the table is emptied
 *    when the last worker state that loaded this module closes, so a handle
 *    whose message was never read does not outlive its runtime;
 *  - the module's fields: tcp, tls, _set_nofile.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <string.h>
#include <sys/resource.h>

#include "ltls.h"
#include "lua/codec.h"
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

/* ---- the transit table ------------------------------------------------- */

#define TR_BUCKETS 1024

typedef struct tr_entry {
  uint64_t token;
  int kind;
  void *p;
  struct tr_entry *next;
} tr_entry;

static pthread_mutex_t g_tr_mu = PTHREAD_MUTEX_INITIALIZER;
static tr_entry *g_tr[TR_BUCKETS];
/* relaxed: only uniqueness matters; the mutex orders the entries. */
static _Atomic uint64_t g_tr_next = 1;

uint64_t lt_transit_token(void) {
  return atomic_fetch_add_explicit(&g_tr_next, 1, memory_order_relaxed);
}

void lt_transit_put(uint64_t token, int kind, void *p) {
  tr_entry *e = ty__xmalloc(sizeof *e);
  e->token = token;
  e->kind = kind;
  e->p = p;
  pthread_mutex_lock(&g_tr_mu);
  e->next = g_tr[token % TR_BUCKETS];
  g_tr[token % TR_BUCKETS] = e;
  pthread_mutex_unlock(&g_tr_mu);
}

void *lt_transit_take(uint64_t token, int *kind) {
  void *p = NULL;
  pthread_mutex_lock(&g_tr_mu);
  for (tr_entry **pp = &g_tr[token % TR_BUCKETS]; *pp; pp = &(*pp)->next) {
    tr_entry *e = *pp;
    if (e->token != token) continue;
    *pp = e->next;
    *kind = e->kind;
    p = e->p;
    free(e);
    break;
  }
  pthread_mutex_unlock(&g_tr_mu);
  return p;
}

/* Drops every handle still in transit: its message was never decoded. */
static void transit_sweep(void) {
  tr_entry *all = NULL;
  pthread_mutex_lock(&g_tr_mu);
  for (int i = 0; i < TR_BUCKETS; i++) {
    while (g_tr[i]) {
      tr_entry *e = g_tr[i];
      g_tr[i] = e->next;
      e->next = all;
      all = e;
    }
  }
  pthread_mutex_unlock(&g_tr_mu);
  while (all) {
    tr_entry *e = all;
    all = e->next;
    lt_tcp_drop(e->kind, e->p);
    free(e);
  }
}

/* Worker states that loaded this module; the last to close sweeps. */
static _Atomic int g_states;

static int sentinel_gc(lua_State *L) {
  (void)L;
  /* acq_rel: the last closer sees every other state's transit puts. */
  if (atomic_fetch_sub_explicit(&g_states, 1, memory_order_acq_rel) == 1)
    transit_sweep();
  return 0;
}

static void count_state(lua_State *L) {
  static const char key = 0;
  lua_pushlightuserdata(L, (void *)&key);
  lua_rawget(L, LUA_REGISTRYINDEX);
  bool seen = !lua_isnil(L, -1);
  lua_pop(L, 1);
  if (seen) return;
  lua_pushlightuserdata(L, (void *)&key);
  lua_newuserdata(L, 1);
  lua_createtable(L, 0, 1);
  lua_pushcfunction(L, sentinel_gc);
  lua_setfield(L, -2, "__gc");
  lua_setmetatable(L, -2);
  lua_rawset(L, LUA_REGISTRYINDEX);
  /* relaxed: the count only has to reach zero after the last close. */
  atomic_fetch_add_explicit(&g_states, 1, memory_order_relaxed);
}

/* ---- module ------------------------------------------------------------ */

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
  if (ty_worker_current()) count_state(L);
}
