/*
 * lapi.c - the messaging half of the Lua API: spawn, self, send, recv, call,
 * reply and response, and the helpers every API function shares (lapi.h).
 *
 * Every function looks up the running actor through the core's thread-local
 * worker; blocking ones record what they wait for and yield (lactor.c).
 * Misuse raises an error that says what to do; expected failures return nil
 * plus a short token ("timeout", "noproc", "dead").
 */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "base/alloc.h"
#include "lapi.h"
#include "lmem.h"
#include "lnames.h"
#include "lpreempt.h"
#include "lstate.h"
#include "ltrace.h"

/* ---- the running actor -------------------------------------------------- */

lt_cur lt_current(lua_State *L, const char *fname) {
  ty_actor *a = ty_actor_current();
  if (!a || !lt_ctx_get()->rt)
    luaL_error(L,
               "tycho.%s must be called from inside an actor "
               "(start one with tycho.run)",
               fname);
  lt_actor *la = a->user;
  /* relaxed: the watchdog's word (lpreempt.c); set means look closer. */
  if (ty__unlikely(la->flag &&
                   atomic_load_explicit(la->flag, memory_order_relaxed)))
    lt_preempt_guard(L, a, la);
  return (lt_cur){a, la};
}

/* Blocking calls must come from the actor's own coroutine: a yield from a
 * coroutine the script made would go to that coroutine's resumer instead. */
lt_cur lt_current_blocking(lua_State *L, const char *fname) {
  lt_cur c = lt_current(L, fname);
  if (L != c.la->co)
    luaL_error(L,
               "tycho.%s blocks, so it must be called from the actor's "
               "own coroutine (or a tycho.fork), not from a coroutine "
               "created by the script",
               fname);
  return c;
}

ty_pid lt_self_pid(lt_cur c) { return c.la->parent ? c.la->parent : c.a->pid; }

/* ---- argument helpers --------------------------------------------------- */

static bool is_pid_number(lua_Number v) {
  return v >= 0 && v < 9007199254740992.0 && floor(v) == v;
}

/* A pid or a registered name; 0 when the name is unknown. */
ty_pid lt_check_dest(lua_State *L, int idx, const char *fname) {
  int t = lua_type(L, idx);
  if (t == LUA_TNUMBER) {
    lua_Number v = lua_tonumber(L, idx);
    if (!is_pid_number(v)) luaL_error(L, "tycho.%s: %f is not a pid", fname, v);
    return (ty_pid)v;
  }
  if (t == LUA_TSTRING) return lt_names_lookup(lua_tostring(L, idx));
  luaL_error(L,
             "tycho.%s: bad argument #%d (expected a pid or a registered "
             "name, got %s)",
             fname, idx, luaL_typename(L, idx));
  return 0;
}

/* Seconds -> nanoseconds; nil -> -1 (no timeout). */
int64_t lt_opt_timeout(lua_State *L, int idx, const char *fname) {
  if (lua_isnoneornil(L, idx)) return -1;
  if (lua_type(L, idx) != LUA_TNUMBER)
    luaL_error(L,
               "tycho.%s: bad timeout (expected seconds as a number, got "
               "%s)",
               fname, luaL_typename(L, idx));
  lua_Number s = lua_tonumber(L, idx);
  if (!(s >= 0)) luaL_error(L, "tycho.%s: timeout must be >= 0", fname);
  if (s > 1e9) s = 1e9;
  return (int64_t)(s * 1e9);
}

int lt_push_fail(lua_State *L, const char *token) {
  lua_pushnil(L);
  lua_pushstring(L, token);
  return 2;
}

lt_actor *lt_spawn_request_fn(lua_State *L, lt_fn *fn, int kind, int first,
                              const char *fname) {
  lt_note_paths(L);
  int top = lua_gettop(L);
  char *args = NULL;
  size_t len = 0;
  if (top >= first) {
    lt_worker *lw = lt_worker_get();
    ty__buf local, *b = lw ? &lw->buf : &local;
    if (lw) ty__buf_reset(b);
    else ty__buf_init(b);
    char err[256];
    if (lt_codec_encode(L, first, top - first + 1, b, lt_ctx_get()->max_message,
                        err, sizeof err)) {
      if (!lw) ty__buf_free(b);
      luaL_error(L, "tycho.%s: %s", fname, err);
    }
    len = b->len;
    args = ty__try_alloc(len);
    if (args) memcpy(args, b->data, len);
    if (!lw) ty__buf_free(b);
    if (!args) return NULL;
  }
  lt_actor *la = lt_actor_new();
  if (!la) {
    if (args) lt_codec_release(args, len);
    ty__free(args, len);
    return NULL;
  }
  la->fn_kind = (uint8_t)kind;
  la->fn = fn;
  lt_actor_set_spawn(la, args, len);
  /* An actor spawns it: it counts in what that actor holds (lmem.h). */
  lt_worker *lw = lt_worker_get();
  if (lw && lw->heap.cur) lt_mem_brood_join(lw->heap.cur, &la->charge);
  return la;
}

lt_actor *lt_spawn_request(lua_State *L, int fidx, int first,
                           const char *fname) {
  int t = lua_type(L, fidx);
  if (t != LUA_TSTRING && t != LUA_TFUNCTION)
    luaL_error(L,
               "tycho.%s: bad argument #1 (expected a function or a module "
               "name, got %s)",
               fname, luaL_typename(L, fidx));
  if (t == LUA_TSTRING && lua_objlen(L, fidx) == 0)
    luaL_error(L, "tycho.%s: empty module name", fname);
  lt_fn *fn;
  if (t == LUA_TSTRING) {
    size_t n;
    const char *name = lua_tolstring(L, fidx, &n);
    fn = lt_fn_module(name, n);
    lt_fn_pin_source(L, fn);
  } else {
    fn = lt_fn_of(L, fidx, fname);
  }
  return lt_spawn_request_fn(L, fn,
                             t == LUA_TSTRING ? LT_FN_MODULE : LT_FN_BYTECODE,
                             first, fname);
}

/* ---- spawn, self, send -------------------------------------------------- */

/* Over max_memory, no new actor: nil, "nomem"; a spawner that holds an
 * eighth of the budget with its live actors (a spawn bomb) ends with
 * "memory" instead (lmem.h). */
static int l_spawn(lua_State *L) {
  lt_cur c = lt_current(L, "spawn");
  if (lt_mem_over()) {
    if (lt_mem_spawn_blames(lt_charge_of(c.la)))
      return luaL_error(L, "not enough memory"); /* doomed: "memory" */
    return lt_push_fail(L, "nomem");
  }
  lt_actor *la = lt_spawn_request(L, 1, 2, "spawn");
  if (!la) return lt_push_fail(L, "nomem");
  ty_pid pid;
  int rc = ty_spawn(lt_ctx_get()->rt, la, &pid);
  if (rc) {
    if (la->spawn) lt_codec_release(la->spawn, la->spawn_len);
    lt_actor_free(la);
    if (rc == -ENOMEM) return lt_push_fail(L, "nomem");
    return luaL_error(L, "tycho.spawn: the actor table is full");
  }
  if (ty__unlikely(c.la->trace & LT_TR_SPAWN))
    lt_trace_out(L, c.la, LT_TR_SPAWN, pid, 1, 1);
  lua_pushnumber(L, (lua_Number)pid);
  return 1;
}

static int l_self(lua_State *L) {
  lt_cur c = lt_current(L, "self");
  lua_pushnumber(L, (lua_Number)lt_self_pid(c));
  return 1;
}

/* After a send that found its ring full: wait for room, then return true. */
static int maybe_block(lua_State *L, lt_cur c) {
  if (!ty_send_blocked(c.a) || L != c.la->co) {
    lua_pushboolean(L, 1);
    return 1;
  }
  c.la->wait = LT_W_YIELD;
  return lua_yield(L, 0);
}

/* Where send and call go: a pid (or a registered name), or a member of a
 * service ({service = name}): one on this node (pid), else one on another
 * node that the cluster picks (svc). Both zero: nobody. */
typedef struct dest {
  ty_pid pid;
  uint64_t svc;
} dest;

static dest check_dest(lua_State *L, int idx, ty_pid exclude,
                       const char *fname) {
  dest d = {0, 0};
  if (lua_type(L, idx) == LUA_TTABLE && lt_ctx_get()->cluster &&
      lt_ctx_get()->cluster->service_pick &&
      lt_ctx_get()->cluster->service_pick(L, idx, exclude, &d.pid, &d.svc,
                                          fname) >= 0)
    return d;
  d.pid = lt_check_dest(L, idx, fname);
  return d;
}

/* The message carrying the values for d, by the one send path (lsend.c):
 * refusing what cannot leave this process (a tcp connection) when d is on
 * another node. Raises when they cannot be copied; NULL when memory runs
 * out. */
static ty_msg *msg_for(lua_State *L, dest d, int first, int n,
                       const char *fname) {
  ty_msg *m;
  char err[256];
  if (lt_msg_make(L, d.pid, d.svc != 0, first, n, &m, err, sizeof err))
    luaL_error(L, "tycho.%s: %s", fname, err);
  return m;
}

static int send_to(dest d, ty_msg *m) {
  if (d.svc) {
    m->to = 0;
    m->aux = d.svc;
    return ty_port_send(lt_ctx_get()->rt, m);
  }
  m->to = d.pid;
  return ty_send_limited(lt_ctx_get()->rt, m);
}

/* A send refused: "noproc", or "full" after a yield (from the actor's own
 * coroutine), so that a sender retrying in a loop lets the receiver, or the
 * other actors of its worker, run. */
static int send_failed(lua_State *L, lt_cur c, ty_msg *m, int rc) {
  lt_msg_release(m);
  ty_msg_free(m);
  if (rc != -ENOBUFS) return lt_push_fail(L, "noproc");
  if (L != c.la->co) return lt_push_fail(L, "full");
  c.la->wait = LT_W_FULL;
  return lua_yield(L, 0);
}

static int l_send(lua_State *L) {
  lt_cur c = lt_current(L, "send");
  dest d = check_dest(L, 1, 0, "send");
  if (!d.pid && !d.svc) return lt_push_fail(L, "noproc");
  ty_msg *m = msg_for(L, d, 2, lua_gettop(L) - 1, "send");
  if (!m) return lt_push_fail(L, "nomem");
  m->kind = LT_MSG;
  /* Traced before it leaves: the event precedes anything it causes. */
  if (ty__unlikely(c.la->trace & LT_TR_SEND))
    lt_trace_out(L, c.la, LT_TR_SEND, d.pid, 2, lua_gettop(L) - 1);
  int rc = send_to(d, m);
  if (rc) return send_failed(L, c, m, rc);
  return maybe_block(L, c);
}

/* ---- recv, call, reply -------------------------------------------------- */

void lt_wait_for(lt_cur c, int what, int64_t timeout_ns, uint64_t ref) {
  c.la->wait = (uint8_t)what;
  /* One look at the clock per wait (a call waits with its timeout). */
  c.la->deadline_ns = ty_actor_wait(c.a, timeout_ns, ref);
}

static int l_recv(lua_State *L) {
  int64_t timeout = lt_opt_timeout(L, 1, "recv");
  lt_cur c = lt_current_blocking(L, "recv");
  ty_msg *m = lt_take_msg(c.a);
  if (m) {
    if (m->kind == LT_CALL) lt_owed_push(c.la, m->from, m->ref);
    lua_settop(L, 0);
    char err[256];
    c.la->inflight = m; /* freed at the actor's end if the decode raises */
    int n = lt_msg_values(L, m, err, sizeof err);
    c.la->inflight = NULL;
    if (ty__unlikely(c.la->trace & LT_TR_RECV) && n >= 0)
      lt_trace_in(L, c.la, m->from, n);
    ty_msg_free(m);
    if (n < 0) return luaL_error(L, "tycho.recv: bad message: %s", err);
    return n;
  }
  if (timeout == 0) return lt_push_fail(L, "timeout");
  lt_wait_for(c, LT_W_RECV, timeout, 0);
  return lua_yield(L, 0);
}

static int do_call(lua_State *L, int64_t timeout, int di, const char *fname) {
  lt_cur c = lt_current_blocking(L, fname);
  dest d = check_dest(L, di, c.a->pid, fname);
  if (!d.pid && !d.svc) return lt_push_fail(L, "noproc");
  /* A fork may call its actor (whose own coroutine answers), but no
   * coroutine can answer while it waits. */
  if (d.pid == c.a->pid)
    return luaL_error(L,
                      "tycho.%s: an actor cannot call itself (it would "
                      "wait for its own reply)",
                      fname);
  int n = lua_gettop(L) - di;
  ty_msg *m = msg_for(L, d, di + 1, n, fname);
  if (!m) return lt_push_fail(L, "nomem");
  lt_worker *lw = lt_worker_get();
  m->kind = LT_CALL;
  m->ref = lw->next_ref++;
  uint64_t ref = m->ref;
  if (ty__unlikely(c.la->trace & LT_TR_CALL))
    lt_trace_out(L, c.la, LT_TR_CALL, d.pid, di + 1, lua_gettop(L) - di);
  int rc = send_to(d, m);
  if (rc) return send_failed(L, c, m, rc);
  c.la->call_ref = ref;
  c.la->call_to = d.pid; /* 0 for a service: its member is not known */
  lt_wait_for(c, LT_W_CALL, timeout, ref);
  return lua_yield(L, 0);
}

int lt_yield_reply(lua_State *L, const char *fname, uint64_t ref,
                   int64_t timeout_ns) {
  lt_cur c = lt_current_blocking(L, fname);
  c.la->call_ref = ref;
  c.la->call_to = 0;
  lt_wait_for(c, LT_W_CALL, timeout_ns, ref);
  return lua_yield(L, 0);
}

int lt_yield_ext(lua_State *L, const char *fname, lt_ext_wake_fn wake,
                 void *ctx, int64_t timeout_ns) {
  /* The context first: the check below may end the actor (a kill or the
   * runtime's stop met at this API call), and its destroy then hands the
   * context to an ext_cancel the caller set already (lexit.c). */
  ty_actor *a = ty_actor_current();
  if (a) {
    lt_actor *la = a->user;
    lt_rare *r = lt_rare_get(la);
    r->ext_wake = wake;
    r->ext_ctx = ctx;
  }
  lt_cur c = lt_current_blocking(L, fname);
  lt_wait_for(c, LT_W_EXT, timeout_ns, UINT64_MAX);
  return lua_yield(L, 0);
}

static int l_call(lua_State *L) {
  return do_call(L, (int64_t)(lt_ctx_get()->call_timeout * 1e9), 1, "call");
}

static int l_call_timeout(lua_State *L) {
  if (lua_type(L, 1) != LUA_TNUMBER)
    return luaL_error(L,
                      "tycho.call_timeout: bad argument #1 (expected "
                      "seconds, got %s)",
                      luaL_typename(L, 1));
  return do_call(L, lt_opt_timeout(L, 1, "call_timeout"), 2, "call_timeout");
}

/* Answers the most recent call received that is still unanswered and was
 * not handed to tycho.response(). The entry goes only once the reply is
 * sent: if the values cannot be copied the error leaves the call owed, so
 * the caller still gets "dead" should the actor then end. */
static int l_reply(lua_State *L) {
  lt_cur c = lt_current(L, "reply");
  int i = lt_owed_last(c.la);
  if (i < 0 && c.la->parent)
    return luaL_error(L, "tycho.reply: no call is waiting for an answer in "
                         "this fork (to answer the actor's call from a fork, "
                         "take tycho.response() before forking)");
  if (i < 0)
    return luaL_error(L, "tycho.reply: no call is waiting for an answer (reply "
                         "answers the last call received with tycho.recv)");
  lt_owed o = c.la->owed[i];
  int r = lt_send_reply(L, o.to, o.ref, 1, lua_gettop(L), "reply");
  if (r != LT_REPLY_LOST) lt_owed_remove(c.la, o.to, o.ref);
  if (r) return lt_push_fail(L, "nomem");
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
  lt_cur c = lt_current(L, "response");
  lt_actor *owner = lt_family_find(c.la, an->owner);
  if (!owner)
    return luaL_error(L,
                      "tycho.response: this function answers a call made "
                      "to actor %.0f; call it from that actor",
                      (double)an->owner);
  bool owed = false;
  for (uint32_t i = 0; i < owner->nowed && !owed; i++)
    owed = owner->owed[i].to == an->to && owner->owed[i].ref == an->ref;
  if (!owed)
    return luaL_error(L, "tycho.response: this call was answered already");
  int r = lt_send_reply(L, an->to, an->ref, 1, lua_gettop(L), "response");
  if (r != LT_REPLY_LOST) lt_owed_remove(owner, an->to, an->ref);
  if (r) return lt_push_fail(L, "nomem");
  lua_pushboolean(L, 1);
  return 1;
}

/* The call being handled, answered later: it stays owed (the caller gets
 * "dead" if the actor ends first) but tycho.reply no longer answers it. */
static int l_response(lua_State *L) {
  lt_cur c = lt_current(L, "response");
  int i = lt_owed_last(c.la);
  if (i < 0)
    return luaL_error(L, "tycho.response: no call is waiting for an answer");
  c.la->owed[i].delegated = true;
  answer_t *an = lua_newuserdata(L, sizeof *an);
  *an = (answer_t){c.la->pid, c.la->owed[i].to, c.la->owed[i].ref};
  lua_pushcclosure(L, l_answer, 1);
  return 1;
}

/* tycho.core._direct_count(): direct messages (ldirect.c) whose values
 * wait on this worker; for specs. */
static int l_direct_count(lua_State *L) {
  lua_pushinteger(L, lt_direct_count());
  return 1;
}

static const luaL_Reg funcs[] = {{"spawn", l_spawn},
                                 {"self", l_self},
                                 {"send", l_send},
                                 {"recv", l_recv},
                                 {"call", l_call},
                                 {"call_timeout", l_call_timeout},
                                 {"reply", l_reply},
                                 {"response", l_response},
                                 {"_direct_count", l_direct_count},
                                 {NULL, NULL}};

void lt_open_api(lua_State *L) { luaL_register(L, NULL, funcs); }
