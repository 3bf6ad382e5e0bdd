/*
 * lguard.c - __gc metamethods of scripts run later, protected.
 *
 * The collector runs a __gc metamethod wherever it happens to step: in any
 * actor of the worker that allocates at that moment, in the runtime's own
 * work, on a suspended coroutine while the runtime pushes a message onto
 * it, or when a compiled trace exits to drive the collector. A script's
 * finalizer that raises or yields there fails an unrelated actor at best;
 * with LuaJIT 2.1 of Debian 12 it can also corrupt the suspended coroutine
 * or crash the unwinder (LuaJIT later stopped rethrowing finalizer errors
 * for the same reason).
 *
 * So every state of the runtime wraps the functions through which a script
 * sets a finalizer (newproxy, debug.setmetatable, ffi.gc, ffi.metatype):
 * the finalizer the collector calls is a C function that only queues the
 * script's function with its object (which keeps the object alive a little
 * longer), and the worker runs the queue after the actor's run (the pool
 * thread after its job), each call under pcall, errors logged. A __gc put
 * on a metatable with rawset, or replaced after it was first set, is not
 * seen; the finalizers of objects still alive when the runtime stops do not
 * run.
 */
#include "lguard.h"
#include "base/log.h"
#include "lctx.h"
#include "lmem.h"

#define QUEUE_KEY "tycho.gc_queue"

_Thread_local unsigned lt_gc_queued;

static const char guard_src[] =
    "local defer = ...\n"
    "local type, rawget, rawset = type, rawget, rawset\n"
    "local getmetatable, setmetatable = getmetatable, setmetatable\n"
    "local function guard(f)\n"
    "  if f == nil or f == false then return f end\n"
    "  return defer(f)\n"
    "end\n"
    "local function guard_field(mt)\n"
    "  local gc = rawget(mt, '__gc')\n"
    "  if gc then rawset(mt, '__gc', guard(gc)) end\n"
    "end\n"
    /* the first __gc stored in a watched metatable is guarded */
    "local watch = {__newindex = function(mt, k, v)\n"
    "  if k == '__gc' then v = guard(v) end\n"
    "  rawset(mt, k, v)\n"
    "end}\n"
    "local function watched(mt)\n"
    "  guard_field(mt)\n"
    "  if getmetatable(mt) == nil then setmetatable(mt, watch) end\n"
    "end\n"
    "local newproxy0 = newproxy\n"
    "newproxy = function(x)\n"
    "  local u = newproxy0(x)\n"
    "  if x == true then watched(getmetatable(u)) end\n"
    "  return u\n"
    "end\n"
    "local setmt0 = debug.setmetatable\n"
    "debug.setmetatable = function(o, mt)\n"
    "  if type(o) == 'userdata' and type(mt) == 'table' then watched(mt) end\n"
    "  return setmt0(o, mt)\n"
    "end\n"
    "local ok, ffi = pcall(require, 'ffi')\n"
    "if ok then\n"
    "  local gc0, metatype0 = ffi.gc, ffi.metatype\n"
    "  ffi.gc = function(cd, f) return gc0(cd, guard(f)) end\n"
    "  ffi.metatype = function(ct, mt)\n"
    "    if type(mt) == 'table' then guard_field(mt) end\n"
    "    return metatype0(ct, mt)\n"
    "  end\n"
    "end\n";

/* The finalizer the collector calls: queues (f, object). It allocates
 * nothing for an actor (the charge is paused) and raises only when the
 * system is out of memory. In a borrowed state given back (no queue any
 * more), it calls f at once, protected, as plain Lua would. */
static int queued(lua_State *L) {
  lua_getfield(L, LUA_REGISTRYINDEX, QUEUE_KEY);
  if (!lua_istable(L, -1)) {
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_pushvalue(L, 1);
    lua_pcall(L, 1, 0, 0);
    return 0;
  }
  lua_pop(L, 1);
  lt_paused c = lt_mem_pause();
  lua_getfield(L, LUA_REGISTRYINDEX, QUEUE_KEY);
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_rawseti(L, -2, (int)++lt_gc_queued);
  lua_pushvalue(L, 1);
  lua_rawseti(L, -2, (int)++lt_gc_queued);
  lt_mem_resume(c);
  return 0;
}

static int defer(lua_State *L) {
  lua_settop(L, 1);
  lua_pushcclosure(L, queued, 1);
  return 1;
}

static int install(lua_State *L) {
  lua_newtable(L);
  lua_setfield(L, LUA_REGISTRYINDEX, QUEUE_KEY);
  if (luaL_loadbuffer(L, guard_src, sizeof guard_src - 1, "=tycho.guard"))
    return lua_error(L);
  lua_pushcfunction(L, defer);
  lua_call(L, 1, 0);
  return 0;
}

int lt_guard_gc(lua_State *L) {
  lt_gc_queued = 0;
  return lua_cpcall(L, install, NULL);
}

/* ---- a borrowed state (the caller of tycho.run, lstate.c) ---------------
 *
 * The guard goes in for the run (the actors of worker 0 run in that state
 * as in any other) and comes out after: each wrapped function is put back
 * unless the script replaced the wrapper meanwhile. Finalizers set during
 * the run through a wrapper stay guarded, but with the queue gone `queued`
 * calls them at once (under pcall). */

#define SAVED_KEY "tycho.gc_saved"

static const char snap_src[] =
    "local ok, ffi = pcall(require, 'ffi')\n"
    "if not ok or type(ffi) ~= 'table' then ffi = nil end\n"
    "local dbg = type(debug) == 'table' and debug or nil\n"
    "return {newproxy, dbg and dbg.setmetatable, ffi and ffi.gc,\n"
    "  ffi and ffi.metatype}\n";

static const char restore_src[] =
    "local before, after, now = ...\n"
    "after = after or now -- the install failed: everything back\n"
    "local ok, ffi = pcall(require, 'ffi')\n"
    "if not ok or type(ffi) ~= 'table' then ffi = nil end\n"
    "local dbg = type(debug) == 'table' and debug or nil\n"
    "if now[1] == after[1] then newproxy = before[1] end\n"
    "if dbg and now[2] == after[2] then dbg.setmetatable = before[2] end\n"
    "if ffi and now[3] == after[3] then ffi.gc = before[3] end\n"
    "if ffi and now[4] == after[4] then ffi.metatype = before[4] end\n";

static void snapshot(lua_State *L) {
  if (luaL_loadbuffer(L, snap_src, sizeof snap_src - 1, "=tycho.guard"))
    lua_error(L);
  lua_call(L, 0, 1);
}

/* The originals are saved before the install, which may fail half way
 * (a state without `debug`): then they all come back at the give back. */
static int borrow(lua_State *L) {
  lua_createtable(L, 2, 0);
  snapshot(L);
  lua_rawseti(L, -2, 1);
  lua_pushvalue(L, -1);
  lua_setfield(L, LUA_REGISTRYINDEX, SAVED_KEY);
  lua_pushcfunction(L, install);
  lua_call(L, 0, 0);
  snapshot(L);
  lua_rawseti(L, -2, 2);
  return 0;
}

int lt_guard_borrow(lua_State *L) {
  lt_gc_queued = 0;
  return lua_cpcall(L, borrow, NULL);
}

static int give_back(lua_State *L) {
  /* First: whatever fails below, finalizers no longer queue. */
  lua_pushnil(L);
  lua_setfield(L, LUA_REGISTRYINDEX, QUEUE_KEY);
  lua_getfield(L, LUA_REGISTRYINDEX, SAVED_KEY);
  if (!lua_istable(L, -1)) return 0; /* the borrow failed: nothing saved */
  lua_pushnil(L);
  lua_setfield(L, LUA_REGISTRYINDEX, SAVED_KEY);
  if (luaL_loadbuffer(L, restore_src, sizeof restore_src - 1, "=tycho.guard"))
    return lua_error(L);
  lua_rawgeti(L, -2, 1);
  lua_rawgeti(L, -3, 2);
  snapshot(L);
  lua_call(L, 3, 0);
  return 0;
}

int lt_guard_give_back(lua_State *L) {
  lt_gc_queued = 0;
  return lua_cpcall(L, give_back, NULL);
}

static int final_sweep(lua_State *L) {
  lua_gc(L, LUA_GCCOLLECT, 0);
  lt_gc_run_queue(L);
  return 0;
}

void lt_gc_final(lua_State *L) { lua_cpcall(L, final_sweep, NULL); }

void lt_gc_run_queue(lua_State *L) {
  lua_getfield(L, LUA_REGISTRYINDEX, QUEUE_KEY);
  int q = lua_gettop(L);
  unsigned n = lt_gc_queued;
  lt_gc_queued = 0; /* a finalizer may queue more: a fresh queue for them */
  lua_newtable(L);
  lua_setfield(L, LUA_REGISTRYINDEX, QUEUE_KEY);
  for (unsigned i = 1; i + 1 <= n; i += 2) {
    lua_rawgeti(L, q, (int)i);
    lua_rawgeti(L, q, (int)i + 1);
    if (lua_pcall(L, 1, 0, 0)) {
      ty_worker *w = ty_worker_current();
      ty__logf(TY_LOG_ERROR, w ? (int)ty_worker_id(w) + 1 : -1, 0,
               "a __gc metamethod failed: %s", lt_error_text(L, -1));
      lua_pop(L, 2);
    }
  }
  lua_settop(L, q - 1);
}

/* ---- error texts -------------------------------------------------------- */

static int tostring_meta(lua_State *L) {
  if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING)
    return 1;
  return 0;
}

const char *lt_error_text(lua_State *L, int idx) {
  if (idx < 0 && idx > LUA_REGISTRYINDEX) idx = lua_gettop(L) + idx + 1;
  int t = lua_type(L, idx);
  if (t == LUA_TSTRING || t == LUA_TNUMBER) {
    lua_pushvalue(L, idx);
    return lua_tostring(L, -1);
  }
  if (luaL_getmetafield(L, idx, "__tostring")) {
    lua_pop(L, 1);
    lua_pushcfunction(L, tostring_meta);
    lua_pushvalue(L, idx);
    if (lua_pcall(L, 1, 1, 0) == 0 && lua_type(L, -1) == LUA_TSTRING)
      return lua_tostring(L, -1);
    lua_pop(L, 1);
    return lua_pushfstring(L,
                           "(error object is a %s value; its __tostring "
                           "failed)",
                           luaL_typename(L, idx));
  }
  return lua_pushfstring(L, "(error object is a %s value)",
                         luaL_typename(L, idx));
}
