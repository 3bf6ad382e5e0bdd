/*
 * lglobals.c - debug mode's check of spawned functions (tycho.config{debug =
 * true} or TYCHO_DEBUG=1): a function that reads a global which a worker's
 * fresh Lua state lacks raises at the spawn, naming the global.
 *
 * Globals are per worker (each worker has its own Lua state), so a global
 * that the spawner set is nil where the actor lands, or is another value:
 * a bug that depends on placement. The check reads the function's bytecode
 * (jit.util: every GGET of a constant name, in nested functions too), drops
 * the names the function tree itself assigns (GSET) and those a fresh
 * worker state has (the standard libraries, and `arg` under the launcher).
 * It runs once per function per state (lt_fn_of caches the result), and
 * only in debug mode. tycho.http checks its handler the same way
 * (_check_globals, lua/tycho/http_handler.lua): it runs on every worker.
 */
#include <pthread.h>
#include <string.h>

#include <lualib.h>

#include "base/common.h"
#include "lctx.h"
#include "lfn.h"
#include "lglobals.h"

/* Returns the first global read and not defined, or nil: check(f, fresh). */
static const char checker_src[] =
    "local fresh = ...\n"
    "local ju, vm = require 'jit.util', require 'jit.vmdef'\n"
    "local band, shr = bit.band, bit.rshift\n"
    "local GGET, GSET\n"
    "for op = 0, #vm.bcnames / 6 - 1 do\n"
    "  local name = vm.bcnames:sub(op * 6 + 1, op * 6 + 6):gsub(' ', '')\n"
    "  if name == 'GGET' then GGET = op elseif name == 'GSET' then GSET = op "
    "end\n"
    "end\n"
    "local function walk(p, reads, writes)\n"
    "  local info = ju.funcinfo(p)\n"
    "  for pc = 1, info.bytecodes or 0 do\n"
    "    local ins = ju.funcbc(p, pc)\n"
    "    if not ins then break end\n"
    "    local op = band(ins, 0xff)\n"
    "    if op == GGET or op == GSET then\n"
    "      local name = ju.funck(p, -shr(ins, 16) - 1)\n"
    "      if op == GGET then reads[#reads + 1] = name else writes[name] = "
    "true end\n"
    "    end\n"
    "  end\n"
    "  for i = -1, -(info.gcconsts or 0), -1 do\n"
    "    local k = ju.funck(p, i)\n"
    "    if type(k) == 'proto' then walk(k, reads, writes) end\n"
    "  end\n"
    "end\n"
    "return function(f)\n"
    "  local reads, writes = {}, {}\n"
    "  walk(f, reads, writes)\n"
    "  for _, name in ipairs(reads) do\n"
    "    if not fresh[name] and not writes[name] then return name end\n"
    "  end\n"
    "end\n";

/* The globals of a fresh worker state (lstate.c opens the standard
 * libraries; the launcher adds `arg`), computed once. */
static pthread_once_t fresh_once = PTHREAD_ONCE_INIT;
static char **fresh_names;
static size_t nfresh;

static void collect_fresh(void) {
  lua_State *F = luaL_newstate();
  if (!F) return;
  luaL_openlibs(F);
  size_t cap = 0;
  lua_pushnil(F);
  while (lua_next(F, LUA_GLOBALSINDEX)) {
    lua_pop(F, 1);
    if (lua_type(F, -1) != LUA_TSTRING) continue;
    ty__grow(&fresh_names, &cap, nfresh + 1, sizeof *fresh_names, 64);
    fresh_names[nfresh++] = strdup(lua_tostring(F, -1));
  }
  lua_close(F);
}

static char checker_key;

/* Pushes this state's checker (compiled once per state). */
static void push_checker(lua_State *L) {
  lua_pushlightuserdata(L, &checker_key);
  lua_rawget(L, LUA_REGISTRYINDEX);
  if (!lua_isnil(L, -1)) return;
  lua_pop(L, 1);
  pthread_once(&fresh_once, collect_fresh);
  if (luaL_loadbuffer(L, checker_src, sizeof checker_src - 1, "=tycho.debug"))
    lua_error(L);
  lua_createtable(L, 0, (int)nfresh + 1);
  for (size_t i = 0; i < nfresh; i++) {
    lua_pushboolean(L, 1);
    lua_setfield(L, -2, fresh_names[i]);
  }
  if (lt_ctx_get()->argv) {
    lua_pushboolean(L, 1);
    lua_setfield(L, -2, "arg");
  }
  lua_call(L, 1, 1);
  lua_pushlightuserdata(L, &checker_key);
  lua_pushvalue(L, -2);
  lua_rawset(L, LUA_REGISTRYINDEX);
}

void lt_check_globals(lua_State *L, int idx, const char *fname) {
  if (!lt_ctx_get()->debug) return;
  push_checker(L);
  lua_pushvalue(L, idx);
  lua_call(L, 1, 1);
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    return;
  }
  luaL_error(L,
             "tycho.%s: the function reads the global '%s', which a "
             "worker's fresh Lua state does not have (globals are per "
             "worker: pass the value as an argument, or require it inside "
             "the function) [debug mode]",
             fname, lua_tostring(L, -1));
}

/* _check_globals(f, what): raises (in debug mode) as a spawn of f would,
 * naming `what` ("http.serve"); nothing otherwise. */
static int l_check_globals(lua_State *L) {
  luaL_checktype(L, 1, LUA_TFUNCTION);
  lt_check_globals(L, 1, luaL_checkstring(L, 2));
  return 0;
}

static const luaL_Reg funcs[] = {{"_check_globals", l_check_globals},
                                 {NULL, NULL}};

void lt_open_globals(lua_State *L) { luaL_register(L, NULL, funcs); }
