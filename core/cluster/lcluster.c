/*
 * lcluster.c - the cluster's Lua API and its hooks into the binding
 * (lrun.h): settings (tycho.config{node=, nats=, cluster=}, TYCHO_NODE,
 * TYCHO_NATS, TYCHO_CLUSTER, the launcher's flags), joining at tycho.run,
 * and tycho.node, nodes, monitor_node, demonitor_node, register_global,
 * whereis_global, join, leave, {service = name} destinations and
 * tycho.stats().cluster (docs/cluster.md).
 *
 * Without a node name nothing of NATS is loaded: the functions answer for a
 * node alone (tycho.nodes() is empty, services have local members only) and
 * the global names raise.
 */
#include <errno.h>
#include <math.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "base/alloc.h"
#include "cluster.h"
#include "lcluster.h"
#include "lua/lapi.h"
#include "lua/lrun.h"
#include "lua/lstate.h"

lc_settings lc_set;
lc_shared lc_sh = {.mu = PTHREAD_MUTEX_INITIALIZER};
/* A clustered run is on: written by the caller of tycho.run, read by the
 * workers (relaxed: a worker that still sees true after stop sends to a
 * port nobody drains any more, which the runtime's stop frees). */
static _Atomic bool g_on;

static bool active(void) {
  return atomic_load_explicit(&g_on, memory_order_relaxed);
}

static void set_active(bool on) {
  atomic_store_explicit(&g_on, on, memory_order_relaxed);
}

/* ---- helpers ------------------------------------------------------------ */

uint64_t lc_now_ns(void) { return ty__now_ns(); }

bool lc_token_ok(const char *s, bool dots) {
  size_t n = strlen(s);
  if (n == 0 || n > 64 || s[0] == '.' || s[n - 1] == '.') return false;
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              (c >= '0' && c <= '9') || c == '_' || c == '-' ||
              (dots && c == '.' && s[i + 1] != '.');
    if (!ok) return false;
  }
  return true;
}

ty_msg *lc_msg_of(const ty__buf *b, ty_pid to, ty_pid from, uint32_t kind,
                  uint64_t ref) {
  ty_msg *m = ty_msg_new(b->len);
  if (b->len) memcpy(m->data, b->data, b->len);
  m->to = to;
  m->from = from;
  m->kind = kind;
  m->ref = ref;
  return m;
}

/* ---- settings ----------------------------------------------------------- */

static const char *check_option(const char *key, const char *v) {
  if (strcmp(key, "node") == 0 && !lc_token_ok(v, false))
    return "node must be 1 to 64 letters, digits, '_' or '-'";
  if (strcmp(key, "cluster") == 0 && !lc_token_ok(v, false))
    return "cluster must be 1 to 64 letters, digits, '_' or '-'";
  if (strcmp(key, "nats") == 0 && !*v) return "nats must be a URL";
  return NULL;
}

static void set_str(char **field, const char *v) {
  free(*field);
  *field = strdup(v);
}

const char *lc_set_option(const char *key, const char *value) {
  const char *bad = check_option(key, value);
  if (bad) return bad;
  if (strcmp(key, "node") == 0) set_str(&lc_set.node, value);
  else if (strcmp(key, "nats") == 0) set_str(&lc_set.nats, value);
  else if (strcmp(key, "cluster") == 0) set_str(&lc_set.cluster, value);
  else return "unknown cluster option";
  return NULL;
}

static bool config_field(lua_State *L, const char *key, int idx) {
  if (strcmp(key, "cluster_backlog") == 0) {
    lua_Number v = luaL_checknumber(L, idx);
    if (!(v >= 4096))
      luaL_error(L, "tycho.config: cluster_backlog must be >= 4096 bytes");
    lc_set.backlog = (size_t)v;
    return true;
  }
  if (strcmp(key, "node") && strcmp(key, "nats") && strcmp(key, "cluster"))
    return false;
  if (lua_type(L, idx) == LUA_TBOOLEAN && !lua_toboolean(L, idx)) {
    char **f = strcmp(key, "node") == 0   ? &lc_set.node
               : strcmp(key, "nats") == 0 ? &lc_set.nats
                                          : &lc_set.cluster;
    free(*f); /* false: back to the environment's (or none) */
    *f = NULL;
    return true;
  }
  const char *bad = lc_set_option(key, luaL_checkstring(L, idx));
  if (bad) luaL_error(L, "tycho.config: %s", bad);
  return true;
}

/* The setting, else the environment's, else def (NULL: unset). Raises on a
 * bad value from the environment. */
static const char *setting(lua_State *L, const char *v, const char *env,
                           const char *key, const char *def) {
  if (v) return v;
  const char *e = getenv(env);
  if (!e || !*e) return def;
  const char *bad = check_option(key, e);
  if (bad) luaL_error(L, "%s: %s", env, bad);
  return e;
}

/* ---- joining and leaving ------------------------------------------------- */

static bool join(lua_State *L, ty_config *cfg) {
  const char *node = setting(L, lc_set.node, "TYCHO_NODE", "node", NULL);
  const char *nats = setting(L, lc_set.nats, "TYCHO_NATS", "nats", NULL);
  const char *cluster =
      setting(L, lc_set.cluster, "TYCHO_CLUSTER", "cluster", "tycho");
  if (!node && !nats) return false;
  if (!node)
    luaL_error(L, "tycho.run: a NATS URL is set but no node name (set "
                  "tycho.config{node=...}, TYCHO_NODE or --node)");
  if (!nats) nats = "nats://127.0.0.1:4222";
  const char *backlog = getenv("TYCHO_CLUSTER_BACKLOG");
  if (!lc_set.backlog && backlog && atol(backlog) >= 4096)
    lc_set.backlog = (size_t)atol(backlog);
  char err[512];
  if (lc_nats_load(err, sizeof err)) luaL_error(L, "tycho.run: %s", err);
  snprintf(lc_sh.name, sizeof lc_sh.name, "%s", node);
  snprintf(lc_sh.cluster, sizeof lc_sh.cluster, "%s", cluster);
  if (getrandom(&lc_sh.nonce, sizeof lc_sh.nonce, 0) != sizeof lc_sh.nonce)
    lc_sh.nonce = ty__now_ns() ^ (uint64_t)getpid() << 32;
  lc_sh.rt = NULL;
  _Atomic uint64_t *counters[] = {
      &lc_sh.msgs_in,        &lc_sh.msgs_out, &lc_sh.bytes_in,
      &lc_sh.bytes_out,      &lc_sh.drops,    &lc_sh.reconnects,
      &lc_sh.slow_consumers, &lc_sh.lost,     &lc_sh.full};
  for (size_t i = 0; i < sizeof counters / sizeof *counters; i++)
    atomic_store_explicit(counters[i], 0, memory_order_relaxed); /* a run's */
  if (lc_ctl_join(nats, err, sizeof err)) luaL_error(L, "%s", err);
  if (lc_gw_connect(nats, err, sizeof err)) {
    lc_ctl_stop();
    luaL_error(L, "%s", err);
  }
  cfg->node = lc_sh.id;
  cfg->port = true;
  return true;
}

static void start(ty_runtime *rt) {
  lc_sh.rt = rt;
  /* relaxed: the workers start after this (pthread_create orders it). */
  atomic_store_explicit(&lt_ctx_get()->remote_max, lc_gw_max_message(),
                        memory_order_relaxed);
  set_active(true);
  lc_gw_start(rt);
  lc_ctl_start();
}

static void stop(void) {
  set_active(false); /* workers still run: they see a node alone now */
  /* relaxed: a limit checked at send; a stale one is harmless. */
  atomic_store_explicit(&lt_ctx_get()->remote_max, 0, memory_order_relaxed);
  lc_gw_stop();
  lc_ctl_stop();
}

/* After every run, in a cluster or not: members of services are pids of a
 * runtime that is gone. */
static void run_end(void) { lc_svc_reset(); }

/* A request to the gateway (to = 0). */
static void to_gateway(uint32_t kind, uint64_t aux, uint64_t ref,
                       const char *data, size_t len) {
  ty_msg *m = ty_msg_new(len);
  if (len) memcpy(m->data, data, len);
  m->kind = kind;
  m->aux = aux;
  m->ref = ref;
  if (ty_port_send(lt_ctx_get()->rt, m)) ty_msg_free(m);
}

static void actor_exit(ty_pid pid) {
  uint64_t emptied[16];
  size_t n = lc_svc_drop_pid(pid, emptied, 16);
  for (size_t i = 0; i < n && active(); i++)
    to_gateway(LC_REQ_LEAVE, emptied[i], 0, NULL, 0);
  lc_kv_drop_pid(pid);
}

/* ---- services ------------------------------------------------------------ */

static const char *service_name(lua_State *L, int idx, const char *fname) {
  if (lua_type(L, idx) != LUA_TSTRING)
    luaL_error(L, "tycho.%s: a service name is a string, got %s", fname,
               luaL_typename(L, idx));
  const char *name = lua_tostring(L, idx);
  if (!lc_token_ok(name, true))
    luaL_error(L,
               "tycho.%s: bad service name '%s' (1 to 64 letters, digits, "
               "'_', '-', and dots between them)",
               fname, name);
  return name;
}

/* A KV call waits at most call_timeout (tycho.config), then answers
 * nil, "timeout": a frozen or unreachable server must not hold the caller
 * for the whole outage. The job keeps the same deadline, past which the
 * control thread skips it (its caller has stopped waiting). */
static int64_t kv_wait_ns(void) {
  double s = lt_ctx_get()->call_timeout > 0 ? lt_ctx_get()->call_timeout : 5.0;
  return (int64_t)(s * 1e9);
}

static int service_pick(lua_State *L, int idx, ty_pid exclude, ty_pid *pid,
                        uint64_t *svc, const char *fname) {
  lua_getfield(L, idx, "service");
  if (lua_type(L, -1) != LUA_TSTRING) {
    lua_pop(L, 1);
    return -1;
  }
  const char *name = service_name(L, -1, fname);
  uint64_t id = lc_svc_id(name, false);
  lua_pop(L, 1);
  if (!id) return 0;
  /* A member on this node first: no network in the way. */
  if ((*pid = lc_svc_local(id, exclude))) return 1;
  if (active() && lc_svc_remote(id)) {
    *svc = id;
    return 2;
  }
  return 0;
}

static int l_join(lua_State *L) {
  lt_cur c = lt_current_blocking(L, "join");
  const char *name = service_name(L, 1, "join");
  uint64_t id = lc_svc_id(name, true);
  ty_pid self = lt_self_pid(c);
  lc_svc_add(id, self);
  if (!active()) {
    lua_pushboolean(L, 1);
    return 1;
  }
  uint64_t ref = lt_new_ref();
  to_gateway(LC_REQ_JOIN, id, ref, NULL, 0);
  /* At most call_timeout, as the KV calls: the member stays joined, and
   * other nodes reach it once the server answers again. */
  return lt_yield_reply(L, "join", ref, kv_wait_ns());
}

static int l_leave(lua_State *L) {
  lt_cur c = lt_current(L, "leave");
  const char *name = service_name(L, 1, "leave");
  uint64_t id = lc_svc_id(name, false);
  if (id && lc_svc_remove(id, lt_self_pid(c)) && active())
    to_gateway(LC_REQ_LEAVE, id, 0, NULL, 0);
  lua_pushboolean(L, 1);
  return 1;
}

/* ---- nodes ---------------------------------------------------------------- */

static int l_node(lua_State *L) {
  if (active()) lua_pushstring(L, lc_sh.name);
  else lua_pushnil(L);
  return 1;
}

static int l_nodes(lua_State *L) {
  lua_newtable(L);
  if (!active()) return 1;
  pthread_mutex_lock(&lc_sh.mu);
  for (size_t i = 0; i < lc_sh.nnodes; i++) {
    lua_pushstring(L, lc_sh.nodes[i]);
    lua_rawseti(L, -2, (int)i + 1);
  }
  pthread_mutex_unlock(&lc_sh.mu);
  return 1;
}

static int node_watch(lua_State *L, bool on, const char *fname) {
  lt_cur c = lt_current(L, fname);
  size_t len;
  const char *name = luaL_checklstring(L, 1, &len);
  if (active()) {
    to_gateway(on ? LC_REQ_MONITOR_NODE : LC_REQ_DEMONITOR_NODE, 0, 0, name,
               len);
    /* from is filled in by ty_port_send: the running actor (or fork). */
  } else if (on) { /* alone: no node is up but this one, which has no name */
    lua_pushliteral(L, "NODEDOWN");
    lua_pushvalue(L, 1);
    lua_pushliteral(L, "noconnection");
    lt_send_values(L, 3, lt_self_pid(c));
  }
  lua_pushboolean(L, 1);
  return 1;
}

static int l_monitor_node(lua_State *L) {
  return node_watch(L, true, "monitor_node");
}

static int l_demonitor_node(lua_State *L) {
  return node_watch(L, false, "demonitor_node");
}

/* ---- global names --------------------------------------------------------- */

static const char *global_name(lua_State *L, const char *fname) {
  size_t len;
  const char *name = luaL_checklstring(L, 1, &len);
  if (!len || len > 200 || strlen(name) != len)
    luaL_error(L, "tycho.%s: a global name is 1 to 200 bytes, no NUL", fname);
  if (!active())
    luaL_error(L,
               "tycho.%s: this node is not in a cluster (set "
               "tycho.config{node=, nats=}, TYCHO_NODE or --node)",
               fname);
  return name;
}

static int l_register_global(lua_State *L) {
  lt_cur c = lt_current_blocking(L, "register_global");
  const char *name = global_name(L, "register_global");
  ty_pid pid = lua_isnoneornil(L, 2) ? lt_self_pid(c)
                                     : lt_check_dest(L, 2, "register_global");
  if (pid && ty_pid_remote(lt_ctx_get()->rt, pid))
    return luaL_error(L, "tycho.register_global: the pid is an actor of "
                         "another node; register it there");
  if (!pid || !ty_pid_alive(lt_ctx_get()->rt, pid))
    return lt_push_fail(L, "noproc");
  uint64_t ref = lt_new_ref();
  int64_t wait = kv_wait_ns();
  if (lc_kv_submit(LC_KV_REGISTER, name, pid, lt_self_pid(c), ref,
                   lc_now_ns() + (uint64_t)wait))
    return lt_push_fail(L, "noconnection");
  return lt_yield_reply(L, "register_global", ref, wait);
}

static int l_whereis_global(lua_State *L) {
  lt_cur c = lt_current_blocking(L, "whereis_global");
  const char *name = global_name(L, "whereis_global");
  uint64_t ref = lt_new_ref();
  int64_t wait = kv_wait_ns();
  if (lc_kv_submit(LC_KV_WHEREIS, name, 0, lt_self_pid(c), ref,
                   lc_now_ns() + (uint64_t)wait))
    return lt_push_fail(L, "noconnection");
  return lt_yield_reply(L, "whereis_global", ref, wait);
}

/* ---- stats ----------------------------------------------------------------- */

static int stats(lua_State *L) {
  if (!active()) return 0;
  lua_createtable(L, 0, 12);
#define FIELD(f)                                                               \
  lua_pushnumber(L, (lua_Number)atomic_load_explicit(&lc_sh.f,                 \
                                                     memory_order_relaxed));   \
  lua_setfield(L, -2, #f);
  FIELD(msgs_in)
  FIELD(msgs_out)
  FIELD(bytes_in)
  FIELD(bytes_out)
  FIELD(drops)
  FIELD(reconnects)
  FIELD(slow_consumers)
  FIELD(lost)
  FIELD(full)
#undef FIELD
  lua_newtable(L);
  pthread_mutex_lock(&lc_sh.mu);
  size_t n = lc_sh.nnodes;
  for (size_t i = 0; i < n; i++) {
    if (strcmp(lc_sh.nodes[i], lc_sh.name) == 0) continue;
    lua_pushnumber(L, lc_sh.rtt[i]);
    lua_setfield(L, -2, lc_sh.nodes[i]);
  }
  pthread_mutex_unlock(&lc_sh.mu);
  lua_setfield(L, -2, "rtt");
  lua_pushnumber(L, (lua_Number)n);
  lua_setfield(L, -2, "nodes");
  lua_pushstring(L, lc_sh.name);
  lua_setfield(L, -2, "node");
  return 1;
}

/* ---- the module ------------------------------------------------------------ */

static const lt_cluster_hooks hooks = {
    .config_field = config_field,
    .join = join,
    .start = start,
    .stop = stop,
    .run_end = run_end,
    .actor_exit = actor_exit,
    .service_pick = service_pick,
    .stats = stats,
};

static const luaL_Reg funcs[] = {{"node", l_node},
                                 {"nodes", l_nodes},
                                 {"monitor_node", l_monitor_node},
                                 {"demonitor_node", l_demonitor_node},
                                 {"register_global", l_register_global},
                                 {"whereis_global", l_whereis_global},
                                 {"join", l_join},
                                 {"leave", l_leave},
                                 {NULL, NULL}};

void lc_open_cluster(lua_State *L) {
  lt_ctx_get()->cluster = &hooks;
  luaL_register(L, NULL, funcs);
}
