/*
 * module.c - luaopen_tycho_core, the `tycho.core` module: the functions of
 * every binding folder in one table (core/lua: actors and messages, run and
 * config, the blocking pool; core/net: tcp, udp, http and the ngx helpers;
 * core/cluster: nodes, global names, services). It sits above them all
 * so that no folder below needs to know the others (docs/architecture.md).
 */
#include <dlfcn.h>
#include <lauxlib.h>
#include <lua.h>

#include "cluster/lcluster.h"
#include "lua/lapi.h"
#include "lua/lchild.h"
#include "lua/lglobals.h"
#include "lua/llog.h"
#include "lua/lmetrics.h"
#include "lua/lobserve.h"
#include "lua/lpool.h"
#include "lua/lpreload.h"
#include "lua/lproc.h"
#include "lua/lrandom.h"
#include "lua/lrun.h"
#include "lua/lserve.h"
#include "lua/lshared.h"
#include "lua/ltimer.h"
#include "module.h"
#include "net/lhttp.h"
#include "net/lnet.h"
#include "net/lngx.h"
#include "net/ludp.h"
#include "net/lwait.h"
#include "net/lws.h"

/* Keeps this shared object loaded for the life of the process. Threads of
 * the core outlive the Lua state that loaded it (the log writer, idle pool
 * threads); when LuaJIT closes that state it dlcloses its C modules, and a
 * thread left running in unmapped code crashes the exit ("The futex facility
 * returned an unexpected error code", found by make asan-spec). */
static void pin_module(void) {
  Dl_info info;
  if (dladdr((void *)pin_module, &info) && info.dli_fname)
    dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
}

int luaopen_tycho_core(lua_State *L) {
  /* This copy of the core answers require "tycho.core" in the worker and
   * pool states too (lt_set_paths). */
  if (!lt_ctx_get()->opener) {
    lt_ctx_get()->opener = luaopen_tycho_core;
    pin_module();
    lt_random_seed_state(L, 0, false); /* the caller's state */
  }
  lua_newtable(L);
  lt_open_api(L);
  lt_open_proc(L);
  lt_open_run(L);
  lt_open_pool(L);
  lt_open_child(L);
  lt_open_globals(L);
  lt_open_timer(L);
  lt_open_log(L);
  lt_open_serve(L);
  lt_open_preload(L);
  lt_open_observe(L);
  lt_open_shared(L);
  lt_open_random(L);
  lt_open_metrics(L);
  lt_open_net(L);
  lt_open_udp(L);
  lt_open_wait(L);
  lt_open_ngx(L);
  lt_open_http(L);
  lt_open_ws(L);
  lc_open_cluster(L);
  lua_pushliteral(L, TYCHO_VERSION);
  lua_setfield(L, -2, "version");
  return 1;
}
