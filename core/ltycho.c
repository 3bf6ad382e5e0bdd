/*
 * ltycho.c - the `tycho.core` Lua module: the API of DESIGN.md section 3.
 *
 * Every function looks up the running actor through the core's thread-local
 * worker; blocking ones record what they wait for and yield (see lactor.c).
 * Misuse raises an error that says what to do; expected failures return
 * nil plus a short token ("timeout", "noproc", "dead", "taken").
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <time.h>

#include "io.h"
#include "alloc.h"
#include "lhttp.h"
#include "lpool.h"
#include "ltycho.h"

lt_global lt_g = {.call_timeout = 5.0, .max_message = 64u << 20};

#define DEFAULT_MAX_MESSAGE (64u << 20)

/* ---- the running actor -------------------------------------------------- */

typedef struct cur_t {
  ty_actor *a;
  lt_actor *la;
} cur_t;

static cur_t current(lua_State *L, const char *fname) {
  ty_actor *a = ty_actor_current();
  if (!a || !lt_g.rt)
    luaL_error(L, "tycho.%s must be called from inside an actor "
               "(start one with tycho.run)", fname);
  return (cur_t){a, a->user};
}

/* Blocking calls must come from the actor's own coroutine: a yield from a
 * coroutine the script made would go to that coroutine's resumer instead. */
static cur_t current_blocking(lua_State *L, const char *fname) {
  cur_t c = current(L, fname);
  if (L != c.la->co)
    luaL_error(L, "tycho.%s blocks, so it must be called from the actor's "
               "own coroutine (or a tycho.fork), not from a coroutine "
               "created by the script", fname);
  return c;
}

static ty_pid self_pid(cur_t c) {
  return c.la->parent ? c.la->parent : c.a->pid;
}

/* ---- argument helpers --------------------------------------------------- */

static bool is_pid_number(lua_Number v) {
  return v >= 0 && v < 9007199254740992.0 && floor(v) == v;
}

/* A pid or a registered name; 0 when the name is unknown. */
static ty_pid check_dest(lua_State *L, int idx, const char *fname) {
  int t = lua_type(L, idx);
  if (t == LUA_TNUMBER) {
    lua_Number v = lua_tonumber(L, idx);
    if (!is_pid_number(v))
      luaL_error(L, "tycho.%s: %f is not a pid", fname, v);
    return (ty_pid)v;
  }
  if (t == LUA_TSTRING) return lt_names_lookup(lua_tostring(L, idx));
  luaL_error(L, "tycho.%s: bad argument #%d (expected a pid or a registered "
             "name, got %s)", fname, idx, luaL_typename(L, idx));
  return 0;
}

/* Seconds -> nanoseconds; nil -> -1 (no timeout). */
static int64_t opt_timeout(lua_State *L, int idx, const char *fname) {
  if (lua_isnoneornil(L, idx)) return -1;
  if (lua_type(L, idx) != LUA_TNUMBER)
    luaL_error(L, "tycho.%s: bad timeout (expected seconds as a number, got "
               "%s)", fname, luaL_typename(L, idx));
  lua_Number s = lua_tonumber(L, idx);
  if (!(s >= 0)) luaL_error(L, "tycho.%s: timeout must be >= 0", fname);
  if (s > 1e9) s = 1e9;
  return (int64_t)(s * 1e9);
}

static ty_msg *encode_msg(lua_State *L, int first, int n, const char *fname) {
  lt_worker *lw = lt_worker_get();
  char err[256];
  ty__buf_reset(&lw->buf);
  if (ty__codec_encode(L, first, n, &lw->buf, lt_g.max_message, err,
                       sizeof err))
    luaL_error(L, "tycho.%s: %s", fname, err);
  ty_msg *m = ty_msg_new(lw->buf.len);
  if (lw->buf.len) /* else data may be NULL */
    memcpy(m->data, lw->buf.data, lw->buf.len);
  return m;
}

static int push_fail(lua_State *L, const char *token) {
  lua_pushnil(L);
  lua_pushstring(L, token);
  return 2;
}

/* ---- functions as spawn payloads ---------------------------------------- */

static int dump_writer(lua_State *L, const void *p, size_t sz, void *ud) {
  (void)L;
  ty__buf *b = ud;
  if (b->len + sz > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + sz) cap *= 2;
    b->data = realloc(b->data, cap);
    if (!b->data) ty__die("out of memory");
    b->cap = cap;
  }
  memcpy(b->data + b->len, p, sz);
  b->len += sz;
  return 0;
}

/* The name under which package.loaded holds v, pushed; or nothing (0).
 * Only tables, functions and userdata count: a module that returned a
 * number or `true` must not turn an upvalue holding that value into it. */
static int push_module_name(lua_State *L, int vidx) {
  int t = lua_type(L, vidx);
  if (t != LUA_TTABLE && t != LUA_TFUNCTION && t != LUA_TUSERDATA) return 0;
  lua_getglobal(L, "package");
  lua_getfield(L, -1, "loaded");
  lua_pushnil(L);
  while (lua_next(L, -2)) {
    if (lua_type(L, -2) == LUA_TSTRING && lua_rawequal(L, -1, vidx)) {
      lua_pop(L, 1);
      lua_replace(L, -3); /* name where package was */
      lua_pop(L, 1);
      return 1;
    }
    lua_pop(L, 1);
  }
  lua_pop(L, 2);
  return 0;
}

/*
 * Functions move between Lua states as bytecode, which loses upvalues. An
 * upvalue that holds a module (a value of package.loaded, like the usual
 * `local tycho = require "tycho"`) is re-required on the other side, and one
 * that holds the function itself (a recursive `local function`) is bound to
 * the loaded copy; any other upvalue is refused. Pushes a table
 * {[i] = module name or true (itself)} or nil.
 */
static void push_upvalue_modules(lua_State *L, int idx, const char *fname) {
  if (lua_iscfunction(L, idx))
    luaL_error(L, "tycho.%s: cannot move a C function to another actor; wrap "
               "it in a Lua function or use a module name", fname);
  lua_Debug ar;
  lua_pushvalue(L, idx);
  lua_getinfo(L, ">u", &ar);
  if (ar.nups == 0) {
    lua_pushnil(L);
    return;
  }
  lua_createtable(L, ar.nups, 0);
  int map = lua_gettop(L);
  luaL_Buffer b;
  int bad = 0;
  for (int i = 1; i <= ar.nups; i++) {
    const char *name = lua_getupvalue(L, idx, i);
    if (lua_rawequal(L, -1, idx)) {
      lua_pushboolean(L, 1);
      lua_rawseti(L, map, i);
      lua_pop(L, 1);
      continue;
    }
    if (push_module_name(L, lua_gettop(L))) {
      lua_rawseti(L, map, i);
      lua_pop(L, 1);
      continue;
    }
    lua_pop(L, 1);
    if (bad++ == 0) luaL_buffinit(L, &b);
    else luaL_addstring(&b, ", ");
    luaL_addstring(&b, name && *name ? name : "?");
  }
  if (!bad) return;
  luaL_pushresult(&b);
  luaL_error(L, "tycho.%s: the function uses upvalue(s) (%s); an actor "
             "shares nothing, so pass that data as arguments to tycho.%s "
             "(upvalues holding modules from require, or the function "
             "itself, are fine)", fname,
             lua_tostring(L, -1), fname);
}

/* Pushes the bytecode of the function at idx. */
static void push_bytecode(lua_State *L, int idx) {
  ty__buf b;
  ty__buf_init(&b);
  lua_pushvalue(L, idx);
  lua_dump(L, dump_writer, &b);
  lua_pop(L, 1);
  lua_pushlstring(L, b.data, b.len);
  ty__buf_free(&b);
}

/* The blob of the function at idx: (bytecode, upvalue map) encoded and
 * interned (lfn.c). A worker remembers the blob of each function object it
 * spawned (weak keys), so a function is checked and dumped once per worker
 * and run; its upvalues are checked then, not at every spawn. */
static lt_fn *function_blob(lua_State *L, int idx, const char *fname) {
  lt_worker *lw = lt_worker_get();
  if (lw) {
    lua_rawgeti(L, LUA_REGISTRYINDEX, lw->dumpcache_ref);
    lua_pushvalue(L, idx);
    lua_rawget(L, -2);
    lt_fn *f = lua_touserdata(L, -1);
    lua_pop(L, 2);
    if (f) return f;
  }
  int top = lua_gettop(L);
  push_upvalue_modules(L, idx, fname);
  push_bytecode(L, idx);
  lua_insert(L, -2); /* bytecode, map */
  ty__buf b;
  ty__buf_init(&b);
  char err[256];
  int r = ty__codec_encode(L, top + 1, 2, &b, SIZE_MAX, err, sizeof err);
  lua_settop(L, top);
  if (r) {
    ty__buf_free(&b);
    luaL_error(L, "tycho.%s: %s", fname, err);
  }
  lt_fn *f = lt_fn_intern(LT_FN_BYTECODE, b.data, b.len);
  ty__buf_free(&b);
  if (lw) {
    lua_rawgeti(L, LUA_REGISTRYINDEX, lw->dumpcache_ref);
    lua_pushvalue(L, idx);
    lua_pushlightuserdata(L, f);
    lua_rawset(L, -3);
    lua_pop(L, 1);
  }
  return f;
}

/* Builds an lt_actor that will run the function (or module) at fidx with
 * the arguments at first..top, copied now. */
static lt_actor *spawn_request(lua_State *L, int fidx, int first,
                               const char *fname) {
  int t = lua_type(L, fidx);
  if (t != LUA_TSTRING && t != LUA_TFUNCTION)
    luaL_error(L, "tycho.%s: bad argument #1 (expected a function or a module "
               "name, got %s)", fname, luaL_typename(L, fidx));
  if (t == LUA_TSTRING && lua_objlen(L, fidx) == 0)
    luaL_error(L, "tycho.%s: empty module name", fname);
  lt_fn *fn;
  if (t == LUA_TSTRING) {
    size_t n;
    const char *name = lua_tolstring(L, fidx, &n);
    fn = lt_fn_intern(LT_FN_MODULE, name, n);
  } else {
    fn = function_blob(L, fidx, fname);
  }
  int top = lua_gettop(L);
  char *args = NULL;
  size_t len = 0;
  if (top >= first) {
    lt_worker *lw = lt_worker_get();
    ty__buf local, *b = lw ? &lw->buf : &local;
    if (lw) ty__buf_reset(b); else ty__buf_init(b);
    char err[256];
    if (ty__codec_encode(L, first, top - first + 1, b, lt_g.max_message, err,
                         sizeof err)) {
      if (!lw) ty__buf_free(b);
      luaL_error(L, "tycho.%s: %s", fname, err);
    }
    len = b->len;
    args = ty__alloc(len);
    memcpy(args, b->data, len);
    if (!lw) ty__buf_free(b);
  }
  lt_actor *la = lt_actor_new();
  la->fn_kind = t == LUA_TSTRING ? LT_FN_MODULE : LT_FN_BYTECODE;
  la->fn = fn;
  la->spawn = args;
  la->spawn_len = (uint32_t)len;
  return la;
}

/* ---- spawn, self, send -------------------------------------------------- */

static int l_spawn(lua_State *L) {
  current(L, "spawn");
  lt_actor *la = spawn_request(L, 1, 2, "spawn");
  ty_pid pid;
  if (ty_spawn(lt_g.rt, la, &pid)) {
    if (la->spawn) lt_net_discard(L, la->spawn, la->spawn_len);
    lt_actor_free(la);
    return luaL_error(L, "tycho.spawn: the actor table is full");
  }
  lua_pushnumber(L, (lua_Number)pid);
  return 1;
}

static int l_self(lua_State *L) {
  cur_t c = current(L, "self");
  lua_pushnumber(L, (lua_Number)self_pid(c));
  return 1;
}

/* After a send that found its ring full: wait for room, then return true. */
static int maybe_block(lua_State *L, cur_t c) {
  if (!ty_send_blocked(c.a) || L != c.la->co) {
    lua_pushboolean(L, 1);
    return 1;
  }
  c.la->wait = LT_W_YIELD;
  return lua_yield(L, 0);
}

static int l_send(lua_State *L) {
  cur_t c = current(L, "send");
  ty_pid to = check_dest(L, 1, "send");
  if (!to) return push_fail(L, "noproc");
  ty_msg *m = encode_msg(L, 2, lua_gettop(L) - 1, "send");
  m->to = to;
  m->kind = LT_MSG;
  if (ty_send(lt_g.rt, m)) {
    lt_net_discard(L, m->data, m->len);
    ty_msg_free(m);
    return push_fail(L, "noproc");
  }
  return maybe_block(L, c);
}

/* ---- recv, call, reply -------------------------------------------------- */

static void wait_for(cur_t c, int what, int64_t timeout_ns, uint64_t ref) {
  c.la->wait = (uint8_t)what;
  c.la->deadline_ns = timeout_ns >= 0 ? ty__now_ns() + timeout_ns : 0;
  ty_actor_wait(c.a, timeout_ns, ref);
}

static int l_recv(lua_State *L) {
  int64_t timeout = opt_timeout(L, 1, "recv");
  cur_t c = current_blocking(L, "recv");
  ty_msg *m = lt_take_msg(c.a);
  if (m) {
    if (m->kind == LT_CALL) lt_owed_push(c.la, m->from, m->ref);
    lua_settop(L, 0);
    char err[256];
    int n = ty__codec_decode(L, m->data, m->len, err, sizeof err);
    ty_msg_free(m);
    if (n < 0) return luaL_error(L, "tycho.recv: bad message: %s", err);
    return n;
  }
  if (timeout == 0) return push_fail(L, "timeout");
  wait_for(c, LT_W_RECV, timeout, 0);
  return lua_yield(L, 0);
}

static int do_call(lua_State *L, int64_t timeout, int di, const char *fname) {
  cur_t c = current_blocking(L, fname);
  ty_pid to = check_dest(L, di, fname);
  if (!to) return push_fail(L, "noproc");
  /* A fork may call its actor (whose own coroutine answers), but no
   * coroutine can answer while it waits. */
  if (to == c.a->pid)
    return luaL_error(L, "tycho.%s: an actor cannot call itself (it would "
                      "wait for its own reply)", fname);
  ty_msg *m = encode_msg(L, di + 1, lua_gettop(L) - di, fname);
  lt_worker *lw = lt_worker_get();
  m->to = to;
  m->kind = LT_CALL;
  m->ref = lw->next_ref++;
  uint64_t ref = m->ref;
  if (ty_send(lt_g.rt, m)) {
    lt_net_discard(L, m->data, m->len);
    ty_msg_free(m);
    return push_fail(L, "noproc");
  }
  c.la->call_ref = ref;
  wait_for(c, LT_W_CALL, timeout, ref);
  return lua_yield(L, 0);
}

uint64_t lt_new_ref(void) { return lt_worker_get()->next_ref++; }

int lt_yield_reply(lua_State *L, const char *fname, uint64_t ref,
                   int64_t timeout_ns) {
  cur_t c = current_blocking(L, fname);
  c.la->call_ref = ref;
  wait_for(c, LT_W_CALL, timeout_ns, ref);
  return lua_yield(L, 0);
}

int lt_yield_ext(lua_State *L, const char *fname, lt_ext_wake_fn wake,
                 void *ctx, int64_t timeout_ns) {
  cur_t c = current_blocking(L, fname);
  c.la->ext_wake = wake;
  c.la->ext_ctx = ctx;
  wait_for(c, LT_W_EXT, timeout_ns, UINT64_MAX);
  return lua_yield(L, 0);
}

void lt_res_add(lt_actor *la, lt_res *r) {
  r->prev = NULL;
  r->next = la->resources;
  if (la->resources) la->resources->prev = r;
  la->resources = r;
}

void lt_res_remove(lt_actor *la, lt_res *r) {
  if (r->prev) r->prev->next = r->next;
  else if (la->resources == r) la->resources = r->next;
  if (r->next) r->next->prev = r->prev;
  r->next = r->prev = NULL;
}

static int l_call(lua_State *L) {
  return do_call(L, (int64_t)(lt_g.call_timeout * 1e9), 1, "call");
}

static int l_call_timeout(lua_State *L) {
  if (lua_type(L, 1) != LUA_TNUMBER)
    return luaL_error(L, "tycho.call_timeout: bad argument #1 (expected "
                      "seconds, got %s)", luaL_typename(L, 1));
  return do_call(L, opt_timeout(L, 1, "call_timeout"), 2, "call_timeout");
}

/* Answers the most recent call received that is still unanswered and was
 * not handed to tycho.response(). The entry goes only once the reply is
 * sent: if the values cannot be copied the error leaves the call owed, so
 * the caller still gets "dead" should the actor then end. */
static int l_reply(lua_State *L) {
  cur_t c = current(L, "reply");
  int i = lt_owed_last(c.la);
  if (i < 0 && c.la->parent)
    return luaL_error(L, "tycho.reply: no call is waiting for an answer in "
                      "this fork (to answer the actor's call from a fork, "
                      "take tycho.response() before forking)");
  if (i < 0)
    return luaL_error(L, "tycho.reply: no call is waiting for an answer (reply "
                      "answers the last call received with tycho.recv)");
  lt_owed o = c.la->owed[i];
  lt_send_reply(L, o.to, o.ref, 1, lua_gettop(L), "reply");
  lt_owed_remove(c.la, o.to, o.ref);
  lua_pushboolean(L, 1);
  return 1;
}

/* What a tycho.response() function answers: the call (to, ref) received by
 * the actor or fork `owner`. */
typedef struct answer_t {
  ty_pid owner, to;
  uint64_t ref;
} answer_t;

static int l_answer(lua_State *L) {
  answer_t *an = lua_touserdata(L, lua_upvalueindex(1));
  cur_t c = current(L, "response");
  lt_actor *owner = lt_family_find(c.la, an->owner);
  if (!owner)
    return luaL_error(L, "tycho.response: this function answers a call made "
                      "to actor %.0f; call it from that actor",
                      (double)an->owner);
  bool owed = false;
  for (uint32_t i = 0; i < owner->nowed && !owed; i++)
    owed = owner->owed[i].to == an->to && owner->owed[i].ref == an->ref;
  if (!owed)
    return luaL_error(L, "tycho.response: this call was answered already");
  lt_send_reply(L, an->to, an->ref, 1, lua_gettop(L), "response");
  lt_owed_remove(owner, an->to, an->ref);
  lua_pushboolean(L, 1);
  return 1;
}

/* The call being handled, answered later: it stays owed (the caller gets
 * "dead" if the actor ends first) but tycho.reply no longer answers it. */
static int l_response(lua_State *L) {
  cur_t c = current(L, "response");
  int i = lt_owed_last(c.la);
  if (i < 0)
    return luaL_error(L, "tycho.response: no call is waiting for an answer");
  c.la->owed[i].delegated = true;
  answer_t *an = lua_newuserdata(L, sizeof *an);
  *an = (answer_t){c.la->pid, c.la->owed[i].to, c.la->owed[i].ref};
  lua_pushcclosure(L, l_answer, 1);
  return 1;
}

/* ---- time --------------------------------------------------------------- */

static int l_sleep(lua_State *L) {
  if (lua_type(L, 1) != LUA_TNUMBER)
    return luaL_error(L, "tycho.sleep: bad argument #1 (expected seconds, got "
                      "%s)", luaL_typename(L, 1));
  int64_t ns = opt_timeout(L, 1, "sleep");
  cur_t c = current_blocking(L, "sleep");
  wait_for(c, LT_W_SLEEP, ns, UINT64_MAX);
  return lua_yield(L, 0);
}

static int l_yield(lua_State *L) {
  cur_t c = current_blocking(L, "yield");
  c.la->wait = LT_W_YIELD;
  return lua_yield(L, 0);
}

static int l_now(lua_State *L) {
  lua_pushnumber(L, ty__now_ns() * 1e-9);
  return 1;
}

/* ---- fork --------------------------------------------------------------- */

/* A fork runs f(...) as another coroutine of the same actor, on its worker
 * (same Lua state: upvalues and arguments are shared, not copied). */
static int l_fork(lua_State *L) {
  cur_t c = current(L, "fork");
  if (lua_type(L, 1) != LUA_TFUNCTION)
    return luaL_error(L, "tycho.fork: bad argument #1 (expected a function, "
                      "got %s)", luaL_typename(L, 1));
  int n = lua_gettop(L);
  lua_createtable(L, n, 1);
  for (int i = 1; i <= n; i++) {
    lua_pushvalue(L, i);
    lua_rawseti(L, -2, i);
  }
  lua_pushinteger(L, n); /* arguments may be nil: keep the count */
  lua_setfield(L, -2, "n");
  lt_worker *lw = lt_worker_get();
  lua_xmove(L, lw->L, 1);
  lt_actor *la = lt_actor_new();
  la->fn_kind = LT_FN_REF;
  la->fn_ref = luaL_ref(lw->L, LUA_REGISTRYINDEX);
  la->parent = self_pid(c);
  ty_pid pid;
  if (ty_spawn_at(lt_g.rt, ty_worker_id(ty_worker_current()), la, &pid)) {
    luaL_unref(lw->L, LUA_REGISTRYINDEX, la->fn_ref);
    lt_actor_free(la);
    return luaL_error(L, "tycho.fork: the actor table is full");
  }
  la->pid = pid;
  lt_fork_attach(c.la->parent_la ? c.la->parent_la : c.la, la);
  lua_pushnumber(L, (lua_Number)pid);
  return 1;
}

/* ---- names -------------------------------------------------------------- */

static int l_register(lua_State *L) {
  cur_t c = current(L, "register");
  const char *name = luaL_checkstring(L, 1);
  if (!*name) return luaL_error(L, "tycho.register: empty name");
  ty_pid pid = lua_isnoneornil(L, 2) ? self_pid(c)
                                     : check_dest(L, 2, "register");
  if (!pid || !ty_pid_alive(lt_g.rt, pid)) return push_fail(L, "noproc");
  if (lt_names_register(name, pid)) return push_fail(L, "taken");
  lua_pushboolean(L, 1);
  return 1;
}

static int l_whereis(lua_State *L) {
  const char *name = luaL_checkstring(L, 1);
  ty_pid pid = lt_g.rt ? lt_names_lookup(name) : 0;
  if (pid && ty_pid_alive(lt_g.rt, pid)) lua_pushnumber(L, (lua_Number)pid);
  else lua_pushnil(L);
  return 1;
}

/* ---- links, monitors, exits --------------------------------------------- */

/* Why `to` is not alive: the reason it ended with when that is still known
 * (it may have ended an instant after its spawn), else "noproc". Pushed. */
static const char *push_gone_reason(lua_State *L, ty_pid to, size_t *len) {
  char *found = to ? lt_grave_find(to, len) : NULL;
  if (found) {
    lua_pushlstring(L, found, *len);
    free(found);
  } else {
    lua_pushliteral(L, "noproc");
  }
  return lua_tolstring(L, -1, len);
}

/* Sends (tag, who, reason) to the running actor: what a monitor or link
 * of a pid that is gone answers. `who` is the pid, or the argument as given
 * when it named nothing. */
static void self_gone(lua_State *L, cur_t c, const char *tag, ty_pid to,
                      int reason_idx, const char *fname) {
  lua_pushstring(L, tag);
  if (to) lua_pushnumber(L, (lua_Number)to);
  else lua_pushvalue(L, 1);
  lua_pushvalue(L, reason_idx);
  ty_msg *m = encode_msg(L, lua_gettop(L) - 2, 3, fname);
  lua_pop(L, 3);
  m->to = c.a->pid;
  if (ty_send(lt_g.rt, m)) ty_msg_free(m);
}

static int l_monitor(lua_State *L) {
  cur_t c = current(L, "monitor");
  ty_pid to = check_dest(L, 1, "monitor");
  if (!to || lt_send_raw(to, LT_SIG_MONITOR, 0, NULL, 0)) {
    size_t len;
    push_gone_reason(L, to, &len);
    self_gone(L, c, "DOWN", to, lua_gettop(L), "monitor");
  }
  lua_pushboolean(L, 1);
  return 1;
}

/* A link to a pid that is gone acts as if the link had been made in time:
 * its end reason (or "noproc", Erlang's rule for linking to nothing) ends
 * the caller unless it is "normal" or the caller traps exits. */
static int link_gone(lua_State *L, cur_t c, ty_pid to) {
  size_t len;
  const char *reason = push_gone_reason(L, to, &len);
  bool normal = len == 6 && memcmp(reason, "normal", 6) == 0;
  if (c.la->trap_exit) self_gone(L, c, "EXIT", to, lua_gettop(L), "link");
  else if (!normal) return lt_exit_now(L, c.la, reason, len);
  lua_pushboolean(L, 1);
  return 1;
}

static int l_link(lua_State *L) {
  cur_t c = current(L, "link");
  ty_pid to = check_dest(L, 1, "link");
  if (!to || (to != c.a->pid && lt_send_raw(to, LT_SIG_LINK, 0, NULL, 0)))
    return link_gone(L, c, to);
  if (to != c.a->pid) lt_pids_add(&c.la->links, to);
  lua_pushboolean(L, 1);
  return 1;
}

static int l_unlink(lua_State *L) {
  cur_t c = current(L, "unlink");
  ty_pid to = check_dest(L, 1, "unlink");
  if (to && lt_pids_remove(&c.la->links, to))
    lt_send_raw(to, LT_SIG_UNLINK, 0, NULL, 0);
  lua_pushboolean(L, 1);
  return 1;
}

static int l_trap_exit(lua_State *L) {
  cur_t c = current(L, "trap_exit");
  bool old = c.la->trap_exit;
  c.la->trap_exit = lua_toboolean(L, 1);
  lua_pushboolean(L, old);
  return 1;
}

static const char *opt_reason(lua_State *L, int idx, const char *def,
                              size_t *len, const char *fname) {
  if (lua_isnoneornil(L, idx)) {
    *len = strlen(def);
    return def;
  }
  if (lua_type(L, idx) != LUA_TSTRING)
    luaL_error(L, "tycho.%s: the reason must be a string, got %s", fname,
               luaL_typename(L, idx));
  return lua_tolstring(L, idx, len);
}

/* tycho.exit ends the actor, also when a fork calls it. */
static int l_exit(lua_State *L) {
  cur_t c = current(L, "exit");
  size_t len;
  const char *reason = opt_reason(L, 1, "normal", &len, "exit");
  c.la->end_actor = c.la->parent != 0;
  return lt_exit_now(L, c.la, reason, len);
}

static int l_kill(lua_State *L) {
  cur_t c = current(L, "kill");
  ty_pid to = check_dest(L, 1, "kill");
  size_t len;
  const char *reason = opt_reason(L, 2, "killed", &len, "kill");
  if (to && (to == self_pid(c) || to == c.a->pid)) {
    c.la->end_actor = c.la->parent != 0 && to == self_pid(c);
    return lt_exit_now(L, c.la, reason, len);
  }
  if (!to || lt_send_raw(to, LT_SIG_KILL, 0, reason, len))
    return push_fail(L, "noproc");
  lua_pushboolean(L, 1);
  return 1;
}

/* ---- stats -------------------------------------------------------------- */

#define STAT_FIELDS(X)                                                         \
  X(polls) X(lifo_hits) X(steals) X(stolen) X(parks) X(unparks) X(mesh_sent)   \
  X(mesh_received) X(inject_pops) X(spawns_placed) X(spawns_remote) X(actors)

static int l_stats(lua_State *L) {
  if (!lt_g.rt) return luaL_error(L, "tycho.stats: the runtime is not running");
  unsigned n = ty_runtime_workers(lt_g.rt);
  ty_worker_stats total = {0};
  lua_createtable(L, (int)n, 16);
  for (unsigned i = 0; i < n; i++) {
    ty_worker_stats s;
    ty_worker_stats_get(lt_g.rt, i, &s);
    lua_createtable(L, 0, 12);
#define SET(f)                                                                 \
  lua_pushnumber(L, (lua_Number)s.f);                                          \
  lua_setfield(L, -2, #f);                                                     \
  total.f += s.f;
    STAT_FIELDS(SET)
#undef SET
    lua_rawseti(L, -2, (int)i + 1);
  }
#define SETT(f)                                                                \
  lua_pushnumber(L, (lua_Number)total.f);                                      \
  lua_setfield(L, -2, #f);
  STAT_FIELDS(SETT)
#undef SETT
  lua_pushnumber(L, n);
  lua_setfield(L, -2, "workers");
  lt_pool_stats_push(L);
  lua_setfield(L, -2, "pool");
  return 1;
}

/* ---- config and run ----------------------------------------------------- */

static int l_config(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  if (lt_g.rt)
    return luaL_error(L, "tycho.config: the runtime is running; configure it "
                      "before tycho.run");
  lua_pushnil(L);
  while (lua_next(L, 1)) {
    const char *k = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : "?";
    if (strcmp(k, "workers") == 0) {
      lua_Number v = luaL_checknumber(L, -1);
      if (v < 1 || v > 64 || floor(v) != v)
        return luaL_error(L, "tycho.config: workers must be an integer "
                          "between 1 and 64");
      lt_g.workers = (unsigned)v;
    } else if (strcmp(k, "call_timeout") == 0) {
      lua_Number v = luaL_checknumber(L, -1);
      if (!(v > 0))
        return luaL_error(L, "tycho.config: call_timeout must be > 0");
      lt_g.call_timeout = v;
    } else if (strcmp(k, "max_message") == 0) {
      lua_Number v = luaL_checknumber(L, -1);
      if (!(v >= 64))
        return luaL_error(L, "tycho.config: max_message must be >= 64 "
                          "bytes");
      lt_g.max_message = (size_t)v;
    } else if (strcmp(k, "io") == 0) {
      const char *io = luaL_checkstring(L, -1);
      if (strcmp(io, "uring") && strcmp(io, "epoll") && strcmp(io, "auto"))
        return luaL_error(L, "tycho.config: io must be \"uring\", \"epoll\" or "
                          "\"auto\"");
      free(lt_g.io);
      lt_g.io = strdup(io);
    } else if (!lt_pool_config_field(L, k, -1)) {
      return luaL_error(L, "tycho.config: unknown option '%s' (known: workers, "
                        "io, call_timeout, max_message, pool_max, pool_queue, "
                        "pool_idle)", k);
    }
    lua_pop(L, 1);
  }
  return 0;
}

/* The main actor's outcome, handed from its worker to the tycho.run caller. */
static struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool done, ok;
  char *data;
  size_t len;
} g_main = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0, 0};

static volatile sig_atomic_t g_interrupted;

void lt_main_done(bool ok, const char *data, size_t len) {
  pthread_mutex_lock(&g_main.mu);
  if (!g_main.done) {
    g_main.done = true;
    g_main.ok = ok;
    g_main.data = ty__xmalloc(len + 1);
    if (len) memcpy(g_main.data, data, len); /* data may be NULL */
    g_main.data[len] = 0;
    g_main.len = len;
    pthread_cond_signal(&g_main.cv);
  }
  pthread_mutex_unlock(&g_main.mu);
}

static void capture_paths(lua_State *L) {
  lua_getglobal(L, "package");
  lua_getfield(L, -1, "path");
  free(lt_g.path);
  lt_g.path = strdup(luaL_optstring(L, -1, ""));
  lua_getfield(L, -2, "cpath");
  free(lt_g.cpath);
  lt_g.cpath = strdup(luaL_optstring(L, -1, ""));
  lua_pop(L, 3);
}

static unsigned env_workers(lua_State *L) {
  if (lt_g.workers) return lt_g.workers;
  const char *e = getenv("TYCHO_WORKERS");
  if (!e || !*e) return 0;
  char *end;
  long v = strtol(e, &end, 10);
  if (*end || v < 1 || v > 64)
    luaL_error(L, "TYCHO_WORKERS must be an integer between 1 and 64, not "
               "'%s'", e);
  return (unsigned)v;
}

/* tycho.config{io=} / --io: the core reads TYCHO_IO itself for "auto". */
static int io_kind(void) {
  if (!lt_g.io) return TY_IO_AUTO;
  if (strcmp(lt_g.io, "uring") == 0) return TY_IO_URING;
  if (strcmp(lt_g.io, "epoll") == 0) return TY_IO_EPOLL;
  return TY_IO_AUTO;
}

static void wait_main(void) {
  pthread_mutex_lock(&g_main.mu);
  while (!g_main.done) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 50 * 1000000;
    if (ts.tv_nsec >= 1000000000) { ts.tv_sec++; ts.tv_nsec -= 1000000000; }
    pthread_cond_timedwait(&g_main.cv, &g_main.mu, &ts);
    if (g_interrupted && !g_main.done) {
      g_interrupted = 0;
      g_main.done = true;
      g_main.ok = false;
      g_main.data = strdup("interrupted");
      g_main.len = strlen(g_main.data);
    }
  }
  pthread_mutex_unlock(&g_main.mu);
}

/* The runtime's configuration; raises on a bad TYCHO_WORKERS, so it comes
 * before anything is allocated. */
static void run_config(lua_State *L, ty_config *cfg) {
  ty_config_init(cfg);
  cfg->workers = env_workers(L);
  cfg->io = io_kind();
}

/* Starts a runtime, runs la as the main actor, stops, returns its results. */
static int run_main(lua_State *L, const ty_config *cfg, lt_actor *la) {
  capture_paths(L);
  if (!lt_g.opener) lt_g.opener = luaopen_tycho_core;
  ty_runtime *rt;
  if (ty_runtime_new(cfg, &lt_ops, NULL, &rt)) {
    lt_actor_free(la);
    return luaL_error(L, "tycho.run: cannot create the runtime");
  }
  /* g_interrupted is not cleared here: a signal that came while the
   * launcher was starting must still stop this run. */
  g_main.done = false;
  lt_g.rt = rt;
  lt_graves_open(ty_runtime_workers(rt));
  la->is_main = true;
  ty_runtime_start(rt);
  ty_spawn(rt, la, NULL);
  wait_main();
  ty_runtime_stop(rt);
  lt_g.rt = NULL;
  ty_runtime_free(rt);
  lt_fn_clear();
  lt_graves_close();
  lt_names_clear();
  bool ok = g_main.ok;
  char *data = g_main.data;
  size_t len = g_main.len;
  g_main.data = NULL;
  lua_settop(L, 0);
  if (!ok) {
    lua_pushlstring(L, data, len);
    free(data);
    return lua_error(L);
  }
  char err[256];
  int n = ty__codec_decode(L, data, len, err, sizeof err);
  free(data);
  if (n < 0) return luaL_error(L, "tycho.run: bad results: %s", err);
  return n;
}

static void check_can_run(lua_State *L) {
  if (ty_worker_current())
    luaL_error(L, "tycho.run: already inside the runtime (use tycho.spawn)");
  if (lt_g.rt) luaL_error(L, "tycho.run: the runtime is already running");
}

static int l_run(lua_State *L) {
  check_can_run(L);
  if (lua_isnoneornil(L, 1))
    return luaL_error(L, "tycho.run: bad argument #1 (expected the main "
                      "function or a module name)");
  ty_config cfg;
  run_config(L, &cfg);
  lt_actor *la = spawn_request(L, 1, 2, "run");
  return run_main(L, &cfg, la);
}

/* _run_file(path, args...): the launcher's main actor is a script file. */
static int l_run_file(lua_State *L) {
  check_can_run(L);
  luaL_checkstring(L, 1);
  ty_config cfg;
  run_config(L, &cfg);
  lt_actor *la = lt_actor_new();
  la->fn_kind = LT_FN_FILE;
  ty__buf b;
  ty__buf_init(&b);
  char err[256];
  if (ty__codec_encode(L, 1, lua_gettop(L), &b, SIZE_MAX, err, sizeof err)) {
    ty__buf_free(&b);
    lt_actor_free(la);
    return luaL_error(L, "tycho: %s", err);
  }
  la->spawn = ty__alloc(b.len);
  memcpy(la->spawn, b.data, b.len);
  la->spawn_len = (uint32_t)b.len;
  ty__buf_free(&b);
  return run_main(L, &cfg, la);
}

/* _interrupt(): ask a running tycho.run to stop (signal-safe core). */
void lt_interrupt(void) { g_interrupted = 1; }

static int l_running(lua_State *L) {
  lua_pushboolean(L, lt_g.rt != NULL);
  return 1;
}

/* _spawn_at(worker, f, ...): spawn on a given worker (1-based), never
 * stolen. For tests that need a known placement; not part of the API. */
static int l_spawn_at(lua_State *L) {
  current(L, "_spawn_at");
  lua_Number w = luaL_checknumber(L, 1);
  unsigned n = ty_runtime_workers(lt_g.rt);
  if (w < 1 || w > n || floor(w) != w)
    return luaL_error(L, "tycho._spawn_at: worker must be 1..%d", (int)n);
  lt_actor *la = spawn_request(L, 2, 3, "_spawn_at");
  ty_pid pid;
  if (ty_spawn_at(lt_g.rt, (unsigned)w - 1, la, &pid)) {
    lt_actor_free(la);
    return luaL_error(L, "tycho._spawn_at: the actor table is full");
  }
  lua_pushnumber(L, (lua_Number)pid);
  return 1;
}

/* _worker(): the worker (1-based) running the caller, or nil. */
static int l_worker(lua_State *L) {
  ty_worker *w = ty_worker_current();
  if (w) lua_pushinteger(L, (lua_Integer)ty_worker_id(w) + 1);
  else lua_pushnil(L);
  return 1;
}

static const luaL_Reg funcs[] = {
    {"config", l_config},       {"run", l_run},
    {"spawn", l_spawn},         {"self", l_self},
    {"send", l_send},           {"recv", l_recv},
    {"call", l_call},           {"call_timeout", l_call_timeout},
    {"reply", l_reply},         {"response", l_response},
    {"sleep", l_sleep},         {"now", l_now},
    {"yield", l_yield},         {"fork", l_fork},
    {"register", l_register},   {"whereis", l_whereis},
    {"monitor", l_monitor},     {"link", l_link},
    {"unlink", l_unlink},       {"trap_exit", l_trap_exit},
    {"exit", l_exit},           {"kill", l_kill},
    {"stats", l_stats},         {"running", l_running},
    {"_run_file", l_run_file},  {"_spawn_at", l_spawn_at},
    {"_worker", l_worker},      {NULL, NULL}};

int luaopen_tycho_core(lua_State *L) {
  if (!lt_g.opener) lt_g.opener = luaopen_tycho_core;
  lua_newtable(L);
  luaL_register(L, NULL, funcs);
  lua_pushliteral(L, TYCHO_VERSION);
  lua_setfield(L, -2, "version");
  lt_open_net(L);
  lt_open_pool(L);
  lt_open_http(L); /* lhttp.c: tycho.core._http, for lua/tycho/http.lua */
  return 1;
}

/* ---- for lpool.c (tycho.blocking) ---------------------------------------- */

/* Appends to out the encoding of (bytecode, upvalue module map) for the
 * function at idx: the same payload a spawned function travels as, built by
 * the same static helpers, with the same errors (C functions, upvalues that
 * are not modules) raised under tycho.<fname>. Returns 0. */
int lt_push_function_payload(lua_State *L, int idx, const char *fname,
                             ty__buf *out) {
  int top = lua_gettop(L);
  if (idx < 0) idx = top + idx + 1;
  push_upvalue_modules(L, idx, fname);
  push_bytecode(L, idx);
  lua_insert(L, -2); /* bytecode, map */
  char err[256];
  int r = ty__codec_encode(L, top + 1, 2, out, SIZE_MAX, err, sizeof err);
  lua_settop(L, top);
  if (r) return luaL_error(L, "tycho.%s: %s", fname, err);
  return 0;
}
