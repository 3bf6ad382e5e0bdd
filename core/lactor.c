/*
 * lactor.c - the life of a Lua actor: its start on a worker, every resume,
 * the signals it handles (links, monitors, kills) and its end.
 *
 * Blocking API functions (recv, call, sleep) are C functions that record what
 * the actor waits for, arm the core's wait and `return lua_yield(L, 0)`.
 * When the core resumes the actor, lt_resume pushes the outcome (the message's
 * values, or nil + "timeout") as lua_resume arguments: they become the
 * results of the C function that yielded.
 */
#include <errno.h>
#include <string.h>

#include "ltycho.h"

#define MAX_OWED 1024 /* unanswered calls remembered per actor */

static char exit_sentinel; /* its address marks tycho.exit / kill unwinds */

/* ---- small containers --------------------------------------------------- */

void lt_pids_add(lt_pids *p, ty_pid pid) {
  for (uint32_t i = 0; i < p->n; i++)
    if (p->v[i] == pid) return;
  if (p->n == p->cap) {
    p->cap = p->cap ? p->cap * 2 : 2;
    p->v = realloc(p->v, p->cap * sizeof *p->v);
    if (!p->v) ty__die("out of memory");
  }
  p->v[p->n++] = pid;
}

bool lt_pids_remove(lt_pids *p, ty_pid pid) {
  for (uint32_t i = 0; i < p->n; i++) {
    if (p->v[i] == pid) {
      p->v[i] = p->v[--p->n];
      return true;
    }
  }
  return false;
}

void lt_owed_push(lt_actor *la, ty_pid to, uint64_t ref) {
  if (la->nowed == MAX_OWED) { /* the oldest caller times out instead */
    memmove(la->owed, la->owed + 1, (MAX_OWED - 1) * sizeof *la->owed);
    la->nowed--;
  }
  if (la->nowed == la->capowed) {
    la->capowed = la->capowed ? la->capowed * 2 : 2;
    la->owed = realloc(la->owed, la->capowed * sizeof *la->owed);
    if (!la->owed) ty__die("out of memory");
  }
  la->owed[la->nowed++] = (lt_owed){to, ref};
}

bool lt_owed_remove(lt_actor *la, ty_pid to, uint64_t ref) {
  for (uint32_t i = la->nowed; i-- > 0;) {
    if (la->owed[i].to == to && la->owed[i].ref == ref) {
      memmove(la->owed + i, la->owed + i + 1,
              (la->nowed - i - 1) * sizeof *la->owed);
      la->nowed--;
      return true;
    }
  }
  return false;
}

lt_actor *lt_actor_new(void) {
  lt_actor *la = ty__xcalloc(1, sizeof *la);
  la->co_ref = LUA_NOREF;
  la->fn_ref = LUA_NOREF;
  return la;
}

void lt_actor_free(lt_actor *la) {
  free(la->spawn);
  free(la->links.v);
  free(la->monitors.v);
  free(la->forks.v);
  free(la->owed);
  free(la->exit_reason);
  free(la);
}

/* ---- sending from C ----------------------------------------------------- */

int lt_send_raw(ty_pid to, uint32_t kind, uint64_t ref, const void *data,
                size_t len) {
  ty_msg *m = ty_msg_new(len);
  if (len) memcpy(m->data, data, len);
  m->to = to;
  m->kind = kind;
  m->ref = ref;
  int r = ty_send(lt_g.rt, m);
  if (r) ty_msg_free(m);
  return r;
}

int lt_send_reply(lua_State *L, ty_pid to, uint64_t ref, int first, int n) {
  lt_worker *lw = lt_worker_get();
  char err[256];
  ty__buf_reset(&lw->buf);
  if (ty__codec_encode(L, first, n, &lw->buf, lt_g.max_message, err,
                       sizeof err))
    return luaL_error(L, "tycho.reply: %s", err);
  lt_send_raw(to, LT_REPLY, ref, lw->buf.data, lw->buf.len);
  return 0;
}

void lt_send_reply_err(ty_pid to, uint64_t ref, const char *token) {
  lt_send_raw(to, LT_REPLY_ERR, ref, token, strlen(token));
}

/* Encodes the values on top of L's stack (n of them), pops them, sends. */
static void send_values(lua_State *L, int n, ty_pid to) {
  lt_worker *lw = lt_worker_get();
  char err[256];
  ty__buf_reset(&lw->buf);
  if (ty__codec_encode(L, lua_gettop(L) - n + 1, n, &lw->buf, SIZE_MAX, err,
                       sizeof err) == 0)
    lt_send_raw(to, LT_MSG, 0, lw->buf.data, lw->buf.len);
  lua_pop(L, n);
}

/* ---- the worker's Lua state --------------------------------------------- */

lt_worker *lt_worker_get(void) {
  ty_worker *w = ty_worker_current();
  return w ? ty_worker_data(w) : NULL;
}

static void set_paths(lua_State *L) {
  lua_getglobal(L, "package");
  if (lt_g.path) {
    lua_pushstring(L, lt_g.path);
    lua_setfield(L, -2, "path");
  }
  if (lt_g.cpath) {
    lua_pushstring(L, lt_g.cpath);
    lua_setfield(L, -2, "cpath");
  }
  /* This copy of the core answers require "tycho.core" in every state, so
   * the workers and the caller of tycho.run share one runtime. */
  lua_getfield(L, -1, "preload");
  lua_pushcfunction(L, lt_g.opener);
  lua_setfield(L, -2, "tycho.core");
  lua_pop(L, 2);
}

static void set_arg(lua_State *L) {
  if (!lt_g.argv) return;
  lua_createtable(L, lt_g.argc, 1);
  for (int i = 0; i < lt_g.argc; i++) {
    lua_pushstring(L, lt_g.argv[i]);
    lua_rawseti(L, -2, i);
  }
  lua_setglobal(L, "arg");
}

static int new_weak_table(lua_State *L, const char *mode) {
  lua_newtable(L);
  if (mode) {
    lua_createtable(L, 0, 1);
    lua_pushstring(L, mode);
    lua_setfield(L, -2, "__mode");
    lua_setmetatable(L, -2);
  }
  return luaL_ref(L, LUA_REGISTRYINDEX);
}

static void lt_worker_init(ty_worker *w, void *ud) {
  (void)ud;
  lt_worker *lw = ty__xcalloc(1, sizeof *lw);
  lw->L = luaL_newstate();
  if (!lw->L) ty__die("cannot create a Lua state");
  luaL_openlibs(lw->L);
  set_paths(lw->L);
  set_arg(lw->L);
  ty__buf_init(&lw->buf);
  lw->fncache_ref = new_weak_table(lw->L, NULL);
  lw->dumpcache_ref = new_weak_table(lw->L, "k");
  lw->next_ref = ((uint64_t)ty_worker_id(w) << 48) + 1;
  ty_worker_set_data(w, lw);
}

static void lt_worker_exit(ty_worker *w, void *ud) {
  (void)ud;
  lt_worker *lw = ty_worker_data(w);
  lua_close(lw->L);
  ty__buf_free(&lw->buf);
  free(lw);
  ty_worker_set_data(w, NULL);
}

/* ---- start -------------------------------------------------------------- */

/* Replaces the string at the bottom of co's stack (bytecode, module name or
 * file name) with the actor's function. Returns 0 or pushes an error. */
static int resolve_function(lt_worker *lw, lt_actor *la, lua_State *co) {
  lua_State *L = lw->L;
  size_t len;
  const char *s = lua_tolstring(co, 1, &len);
  if (la->fn_kind == LT_FN_BYTECODE) {
    lua_rawgeti(L, LUA_REGISTRYINDEX, lw->fncache_ref);
    lua_pushvalue(co, 1);
    lua_xmove(co, L, 1);
    lua_rawget(L, -2);
    if (lua_isnil(L, -1)) {
      lua_pop(L, 1);
      if (luaL_loadbuffer(L, s, len, "=spawned")) {
        lua_xmove(L, co, 1);
        lua_pop(L, 1);
        return -1;
      }
      lua_pushvalue(co, 1);
      lua_xmove(co, L, 1);
      lua_pushvalue(L, -2);
      lua_rawset(L, -4);
    }
    lua_xmove(L, co, 1);
    lua_pop(L, 1);
  } else if (la->fn_kind == LT_FN_MODULE) {
    lua_getglobal(co, "require");
    lua_pushvalue(co, 1);
    if (lua_pcall(co, 1, 1, 0)) return -1;
    if (!lua_isfunction(co, -1)) {
      const char *got = luaL_typename(co, -1);
      lua_pushfstring(co, "tycho.spawn: module '%s' returned %s, not the "
                      "actor's function", s, got);
      return -1;
    }
  }
  lua_replace(co, 1);
  return 0;
}

/* co holds function, {[i] = module name} or nil, args: sets upvalue i of the
 * function to require(name) (see push_upvalue_modules in ltycho.c). */
static int bind_upvalue_modules(lua_State *co) {
  if (lua_isnil(co, 2)) return 0;
  lua_pushnil(co);
  while (lua_next(co, 2)) {
    int i = (int)lua_tointeger(co, -2);
    lua_getglobal(co, "require");
    lua_insert(co, -2);
    if (lua_pcall(co, 1, 1, 0)) {
      lua_replace(co, 1);
      lua_settop(co, 1);
      return -1;
    }
    lua_setupvalue(co, 1, i);
  }
  return 0;
}

/* Creates the coroutine and pushes function + arguments. Returns nargs, or
 * -1 with an error message on co's stack. */
static int start_actor(ty_actor *a, lt_actor *la) {
  lt_worker *lw = lt_worker_get();
  lua_State *L = lw->L;
  lua_State *co = lua_newthread(L);
  la->co = co;
  la->co_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  (void)a;
  if (la->fn_kind == LT_FN_REF) {
    lua_rawgeti(L, LUA_REGISTRYINDEX, la->fn_ref);
    luaL_unref(L, LUA_REGISTRYINDEX, la->fn_ref);
    la->fn_ref = LUA_NOREF;
    int n = (int)lua_objlen(L, -1);
    lua_xmove(L, co, 1);
    luaL_checkstack(co, n + 2, "too many arguments");
    for (int i = 1; i <= n; i++) lua_rawgeti(co, 1, i);
    lua_remove(co, 1);
    return n - 1;
  }
  char err[256];
  int n = ty__codec_decode(co, la->spawn, la->spawn_len, err, sizeof err);
  free(la->spawn);
  la->spawn = NULL;
  if (la->fn_kind == LT_FN_FILE) {
    if (n < 1 || luaL_loadfile(co, lua_tostring(co, 1))) {
      if (n < 1) lua_pushfstring(co, "tycho: bad main request (%s)", err);
      return -1;
    }
    lua_replace(co, 1);
    return n - 1;
  }
  if (n < 2) {
    lua_pushfstring(co, "tycho.spawn: bad spawn request (%s)", err);
    return -1;
  }
  if (resolve_function(lw, la, co)) return -1;
  if (bind_upvalue_modules(co)) return -1;
  lua_remove(co, 2);
  return n - 2;
}

/* ---- the end of an actor ------------------------------------------------ */

/* Tells monitors, links, forks, owed callers and the name table. */
static void notify_exit(ty_actor *a, lt_actor *la, const char *reason,
                        size_t rlen) {
  lua_State *L = lt_worker_get()->L;
  for (uint32_t i = 0; i < la->monitors.n; i++) {
    lua_pushliteral(L, "DOWN");
    lua_pushnumber(L, (lua_Number)a->pid);
    lua_pushlstring(L, reason, rlen);
    send_values(L, 3, la->monitors.v[i]);
  }
  for (uint32_t i = 0; i < la->links.n; i++)
    lt_send_raw(la->links.v[i], LT_SIG_EXIT, 0, reason, rlen);
  for (uint32_t i = 0; i < la->forks.n; i++)
    lt_send_raw(la->forks.v[i], LT_SIG_KILL, 0, reason, rlen);
  for (uint32_t i = 0; i < la->nowed; i++)
    lt_send_reply_err(la->owed[i].to, la->owed[i].ref, "dead");
  la->nowed = 0;
  if (la->registered) lt_names_drop_pid(a->pid);
}

static void finish(ty_actor *a, lt_actor *la, bool ok, const char *reason,
                   size_t rlen) {
  if (la->parent && !ok) {
    /* A fork is part of its actor: its failure ends the actor. */
    lt_send_raw(la->parent, LT_SIG_KILL, 0, reason, rlen);
  }
  notify_exit(a, la, reason, rlen);
}

static void report_error(ty_actor *a, lua_State *co, const char **msg,
                         size_t *len) {
  lua_State *L = lt_worker_get()->L;
  const char *m = lua_tostring(co, -1);
  if (!m) m = lua_pushfstring(co, "(error object is a %s value)",
                             luaL_typename(co, -1));
  luaL_traceback(L, co, m, 0);
  lua_xmove(L, co, 1);
  *msg = lua_tolstring(co, -1, len);
  /* The main actor's error goes to the caller of tycho.run instead. */
  if (!((lt_actor *)a->user)->is_main)
    fprintf(stderr, "tycho: actor %.0f failed: %s\n", (double)a->pid, *msg);
}

/* The coroutine returned: main actors hand their results to tycho.run. */
static int on_return(ty_actor *a, lt_actor *la) {
  if (la->is_main) {
    lt_worker *lw = lt_worker_get();
    char err[256];
    int n = lua_gettop(la->co);
    ty__buf_reset(&lw->buf);
    if (ty__codec_encode(la->co, 1, n, &lw->buf, SIZE_MAX, err, sizeof err)) {
      char msg[300];
      snprintf(msg, sizeof msg, "tycho.run: cannot return the results: %s", err);
      lt_main_done(false, msg, strlen(msg));
    } else {
      lt_main_done(true, lw->buf.data, lw->buf.len);
    }
  }
  finish(a, la, true, "normal", 6);
  return TY_DONE;
}

static int on_error(ty_actor *a, lt_actor *la) {
  lua_State *co = la->co;
  const char *msg;
  size_t len;
  bool exited = lua_touserdata(co, -1) == &exit_sentinel;
  if (exited) {
    msg = la->exit_reason ? la->exit_reason : "normal";
    len = strlen(msg);
  } else {
    report_error(a, co, &msg, &len);
  }
  bool normal = exited && strcmp(msg, "normal") == 0;
  if (la->is_main) lt_main_done(normal, msg, len);
  finish(a, la, normal, msg, len);
  return TY_DONE;
}

int lt_exit_now(lua_State *L, lt_actor *la, const char *reason, size_t len) {
  free(la->exit_reason);
  la->exit_reason = ty__xmalloc(len + 1);
  memcpy(la->exit_reason, reason, len);
  la->exit_reason[len] = 0;
  lua_pushlightuserdata(L, &exit_sentinel);
  return lua_error(L);
}

/* Ends a suspended actor from outside its coroutine (kill, linked exit). */
static int die_now(ty_actor *a, lt_actor *la, const char *reason, size_t len) {
  if (la->is_main) lt_main_done(false, reason, len);
  finish(a, la, false, reason, len);
  return TY_DONE;
}

/* ---- signals ------------------------------------------------------------ */

static void trapped_exit(ty_actor *a, ty_msg *m) {
  lua_State *L = lt_worker_get()->L;
  lua_pushliteral(L, "EXIT");
  lua_pushnumber(L, (lua_Number)m->from);
  lua_pushlstring(L, m->data, m->len);
  send_values(L, 3, a->pid);
}

/* Handles one signal; returns true if the actor must die (reason in m). */
static bool handle_signal(ty_actor *a, lt_actor *la, ty_msg *m) {
  switch (m->kind) {
  case LT_SIG_LINK:
    lt_pids_add(&la->links, m->from);
    return false;
  case LT_SIG_UNLINK:
    lt_pids_remove(&la->links, m->from);
    return false;
  case LT_SIG_MONITOR:
    lt_pids_add(&la->monitors, m->from);
    return false;
  case LT_SIG_KILL:
    return true;
  case LT_SIG_EXIT: {
    if (!lt_pids_remove(&la->links, m->from)) return false; /* unlinked */
    bool normal = m->len == 6 && memcmp(m->data, "normal", 6) == 0;
    if (la->trap_exit) trapped_exit(a, m);
    return !la->trap_exit && !normal;
  }
  }
  return false;
}

/* Processes every signal in the mailbox. Returns a message that kills the
 * actor (the caller frees it), or NULL. */
static ty_msg *process_signals(ty_actor *a, lt_actor *la) {
  ty_msg *prev = NULL, *m = ty_mbox_first(a);
  while (m && a->mbox.signals) {
    ty_msg *next = ty_mbox_next(m);
    if (m->kind >= TY_MSG_SIGNAL) {
      ty_mbox_remove(a, prev, m);
      if (handle_signal(a, la, m)) return m;
      ty_msg_free(m);
    } else {
      prev = m;
    }
    m = next;
  }
  return NULL;
}

/* ---- resuming ----------------------------------------------------------- */

static uint64_t now_ns(void) { return ty__now_ns(); }

/* Waits again for what la->wait describes, keeping the original deadline. */
static int rewait(ty_actor *a, lt_actor *la, uint64_t ref) {
  int64_t left = -1;
  if (la->deadline_ns) {
    uint64_t now = now_ns();
    left = la->deadline_ns > now ? (int64_t)(la->deadline_ns - now) : 0;
  }
  ty_actor_wait(a, left, ref);
  return -1;
}

static int push_timeout(lua_State *co) {
  lua_pushnil(co);
  lua_pushliteral(co, "timeout");
  return 2;
}

static int decode_into(lua_State *co, ty_msg *m) {
  char err[256];
  int n = ty__codec_decode(co, m->data, m->len, err, sizeof err);
  if (n < 0) {
    lua_pushnil(co);
    lua_pushfstring(co, "bad message: %s", err);
    n = 2;
  }
  return n;
}

/* The next ordinary message for recv: stale replies are dropped on the way;
 * a call is remembered as owed until it is answered. */
static int wake_recv(ty_actor *a, lt_actor *la) {
  ty_msg *m;
  while ((m = ty_mbox_pop(a))) {
    if (m->kind == LT_MSG || m->kind == LT_CALL) break;
    ty_msg_free(m); /* a reply that came after its call timed out */
  }
  if (!m) {
    if (ty_actor_timed_out(a)) return push_timeout(la->co);
    return rewait(a, la, 0);
  }
  if (m->kind == LT_CALL) lt_owed_push(la, m->from, m->ref);
  int n = decode_into(la->co, m);
  ty_msg_free(m);
  return n;
}

static int wake_call(ty_actor *a, lt_actor *la) {
  ty_msg *prev = NULL;
  for (ty_msg *m = ty_mbox_first(a); m; prev = m, m = ty_mbox_next(m)) {
    if (m->ref != la->call_ref ||
        (m->kind != LT_REPLY && m->kind != LT_REPLY_ERR))
      continue;
    ty_mbox_remove(a, prev, m);
    int n;
    if (m->kind == LT_REPLY) {
      n = decode_into(la->co, m);
    } else {
      lua_pushnil(la->co);
      lua_pushlstring(la->co, m->data, m->len);
      n = 2;
    }
    ty_msg_free(m);
    return n;
  }
  if (ty_actor_timed_out(a)) return push_timeout(la->co);
  return rewait(a, la, la->call_ref);
}

/* Pushes the results of the API function that yielded; -1: keep waiting. */
static int wake_args(ty_actor *a, lt_actor *la) {
  switch (la->wait) {
  case LT_W_RECV:
    return wake_recv(a, la);
  case LT_W_CALL:
    return wake_call(a, la);
  case LT_W_SLEEP:
    if (!ty_actor_timed_out(a)) return rewait(a, la, UINT64_MAX);
    return 0;
  case LT_W_YIELD:
    lua_pushboolean(la->co, 1);
    return 1;
  case LT_W_EXT:
    return la->ext_wake(la->co, a, la, ty_actor_timed_out(a));
  }
  return 0;
}

static int lt_resume(ty_actor *a, void *ud) {
  (void)ud;
  lt_actor *la = a->user;
  int nargs;
  if (!a->started) {
    nargs = start_actor(a, la);
    if (nargs < 0) return on_error(a, la);
  } else {
    if (a->mbox.signals) {
      ty_msg *kill = process_signals(a, la);
      if (kill) {
        int r = die_now(a, la, kill->data, kill->len);
        ty_msg_free(kill);
        return r;
      }
    }
    nargs = wake_args(a, la);
    if (nargs < 0) return TY_WAIT;
  }
  la->wait = LT_W_NONE;
  la->deadline_ns = 0;
  la->ext_wake = NULL;
  la->ext_cancel = NULL;
  int st = lua_resume(la->co, nargs);
  if (st == LUA_YIELD) {
    if (la->wait == LT_W_NONE) {
      /* coroutine.yield() straight from the actor: treat it as a yield. */
      lua_settop(la->co, 0);
      la->wait = LT_W_YIELD;
    }
    return la->wait == LT_W_YIELD ? TY_YIELD : TY_WAIT;
  }
  if (st == 0) return on_return(a, la);
  return on_error(a, la);
}

static void lt_destroy(ty_actor *a, ty_worker *w, void *ud) {
  (void)ud;
  lt_actor *la = a->user;
  if (w && la->wait == LT_W_EXT && la->ext_cancel) la->ext_cancel(a, la);
  while (w && la->resources) {
    lt_res *r = la->resources;
    lt_res_remove(la, r);
    r->close(r);
  }
  if (w && la->co_ref != LUA_NOREF) {
    lt_worker *lw = ty_worker_data(w);
    luaL_unref(lw->L, LUA_REGISTRYINDEX, la->co_ref);
  }
  if (w && la->fn_ref != LUA_NOREF) {
    lt_worker *lw = ty_worker_data(w);
    luaL_unref(lw->L, LUA_REGISTRYINDEX, la->fn_ref);
  }
  if (la->is_main) lt_main_done(false, "stopped", 7);
  lt_actor_free(la);
}

/* A message found no live receiver: a caller learns at once instead of
 * waiting for its timeout; a link or monitor gets the "noproc" answer. */
static void lt_undeliverable(ty_msg *m, ty_worker *w, void *ud) {
  (void)ud;
  if (!w || !m->from) return;
  switch (m->kind) {
  case LT_CALL:
    lt_send_reply_err(m->from, m->ref, "dead");
    break;
  case LT_SIG_LINK:
    lt_send_raw(m->from, LT_SIG_EXIT, 0, "noproc", 6);
    break;
  case LT_SIG_MONITOR: {
    lua_State *L = ((lt_worker *)ty_worker_data(w))->L;
    lua_pushliteral(L, "DOWN");
    lua_pushnumber(L, (lua_Number)m->to);
    lua_pushliteral(L, "noproc");
    send_values(L, 3, m->from);
    break;
  }
  }
}

const ty_actor_ops lt_ops = {
    .worker_init = lt_worker_init,
    .worker_exit = lt_worker_exit,
    .resume = lt_resume,
    .destroy = lt_destroy,
    .undeliverable = lt_undeliverable,
};
