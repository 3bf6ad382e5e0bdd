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

#include "alloc.h"
#include "ltycho.h"

#define MAX_OWED 1024 /* unanswered calls remembered per actor */

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
  la->owed[la->nowed++] = (lt_owed){to, ref, false};
}

int lt_owed_last(const lt_actor *la) {
  for (uint32_t i = la->nowed; i-- > 0;)
    if (!la->owed[i].delegated) return (int)i;
  return -1;
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
  lt_actor *la = ty__alloc(sizeof *la);
  memset(la, 0, sizeof *la);
  la->co_ref = LUA_NOREF;
  la->fn_ref = LUA_NOREF;
  return la;
}

void lt_actor_free(lt_actor *la) {
  ty__free(la->spawn, la->spawn_len);
  free(la->links.v);
  free(la->monitors.v);
  free(la->owed);
  free(la->exit_reason);
  ty__free(la, sizeof *la);
}

/* ---- forks -------------------------------------------------------------- */

void lt_fork_attach(lt_actor *parent, lt_actor *fork) {
  fork->parent_la = parent;
  fork->fork_prev = NULL;
  fork->fork_next = parent->forks;
  if (parent->forks) parent->forks->fork_prev = fork;
  parent->forks = fork;
}

static void fork_detach(lt_actor *fork) {
  lt_actor *p = fork->parent_la;
  if (!p) return;
  if (fork->fork_prev) fork->fork_prev->fork_next = fork->fork_next;
  else p->forks = fork->fork_next;
  if (fork->fork_next) fork->fork_next->fork_prev = fork->fork_prev;
  fork->parent_la = fork->fork_next = fork->fork_prev = NULL;
}

/* The actor is ending: its forks must not point at it any more. Returns the
 * list, so that the caller can also signal them. */
static lt_actor *forks_orphan(lt_actor *la) {
  lt_actor *f = la->forks;
  la->forks = NULL;
  for (lt_actor *g = f; g; g = g->fork_next) g->parent_la = NULL;
  return f;
}

lt_actor *lt_family_find(lt_actor *la, ty_pid pid) {
  lt_actor *top = la->parent_la ? la->parent_la : la;
  if (top->pid == pid) return top;
  for (lt_actor *f = top->forks; f; f = f->fork_next)
    if (f->pid == pid) return f;
  return NULL;
}

/* ---- sending from C ----------------------------------------------------- */

int lt_send_raw_from(ty_pid from, ty_pid to, uint32_t kind, uint64_t ref,
                     const void *data, size_t len) {
  ty_msg *m = ty_msg_new(len);
  if (len) memcpy(m->data, data, len);
  m->to = to;
  m->from = from; /* 0: ty_send fills in the running actor */
  m->kind = kind;
  m->ref = ref;
  int r = ty_send(lt_g.rt, m);
  if (r) ty_msg_free(m);
  return r;
}

int lt_send_raw(ty_pid to, uint32_t kind, uint64_t ref, const void *data,
                size_t len) {
  return lt_send_raw_from(0, to, kind, ref, data, len);
}

int lt_send_reply(lua_State *L, ty_pid to, uint64_t ref, int first, int n,
                  const char *fname) {
  lt_worker *lw = lt_worker_get();
  char err[256];
  ty__buf_reset(&lw->buf);
  if (ty__codec_encode(L, first, n, &lw->buf, lt_g.max_message, err,
                       sizeof err))
    return luaL_error(L, "tycho.%s: %s", fname, err);
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

void lt_set_paths(lua_State *L) {
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
  lua_pushcfunction(L, lt_g.opener ? lt_g.opener : luaopen_tycho_core);
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
  lt_set_paths(lw->L);
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

/* Pushes the function and arguments of a fork (LT_FN_REF) on co. The table
 * keeps its count in `n`: arguments may be nil. Returns nargs. */
static int push_fork_function(lua_State *L, lt_actor *la, lua_State *co) {
  lua_rawgeti(L, LUA_REGISTRYINDEX, la->fn_ref);
  luaL_unref(L, LUA_REGISTRYINDEX, la->fn_ref);
  la->fn_ref = LUA_NOREF;
  lua_getfield(L, -1, "n");
  int n = (int)lua_tointeger(L, -1);
  lua_pop(L, 1);
  lua_xmove(L, co, 1);
  luaL_checkstack(co, n + 2, "too many arguments");
  for (int i = 1; i <= n; i++) lua_rawgeti(co, 1, i);
  lua_remove(co, 1);
  return n - 1;
}

/* Creates the coroutine and pushes function + arguments. Returns nargs, or
 * -1 with an error message on co's stack. */
static int start_actor(lt_actor *la) {
  lt_worker *lw = lt_worker_get();
  lua_State *L = lw->L;
  lua_State *co = lua_newthread(L);
  la->co = co;
  la->co_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  if (la->fn_kind == LT_FN_REF) return push_fork_function(L, la, co);
  char err[256];
  if (la->fn_kind != LT_FN_FILE) {
    if (lt_fn_push(co, la->fn, ty_worker_id(ty_worker_current()))) return -1;
    int n = la->spawn_len
                ? ty__codec_decode(co, la->spawn, la->spawn_len, err, sizeof err)
                : 0;
    ty__free(la->spawn, la->spawn_len); /* no longer needed: keep actors small */
    la->spawn = NULL;
    la->spawn_len = 0;
    if (n < 0) {
      lua_pushfstring(co, "tycho.spawn: bad spawn request (%s)", err);
      return -1;
    }
    return n;
  }
  int n = ty__codec_decode(co, la->spawn, la->spawn_len, err, sizeof err);
  if (n < 1 || luaL_loadfile(co, lua_tostring(co, 1))) {
    if (n < 1) lua_pushfstring(co, "tycho: bad main request (%s)", err);
    return -1;
  }
  lua_replace(co, 1);
  return n - 1;
}

/* ---- the end of an actor ------------------------------------------------ */

/* Tells monitors, links, forks, owed callers and the name table. */
static void notify_exit(ty_actor *a, lt_actor *la, const char *reason,
                        size_t rlen) {
  lua_State *L = lt_worker_get()->L;
  lt_grave_add(ty_worker_id(ty_worker_current()), a->pid, reason, rlen);
  for (uint32_t i = 0; i < la->monitors.n; i++) {
    lua_pushliteral(L, "DOWN");
    lua_pushnumber(L, (lua_Number)a->pid);
    lua_pushlstring(L, reason, rlen);
    send_values(L, 3, la->monitors.v[i]);
  }
  for (uint32_t i = 0; i < la->links.n; i++)
    lt_send_raw(la->links.v[i], LT_SIG_EXIT, 0, reason, rlen);
  for (lt_actor *f = forks_orphan(la); f; f = f->fork_next)
    lt_send_raw(f->pid, LT_SIG_KILL, 0, reason, rlen);
  for (uint32_t i = 0; i < la->nowed; i++)
    lt_send_reply_err(la->owed[i].to, la->owed[i].ref, "dead");
  la->nowed = 0;
  lt_names_drop_pid(a->pid);
}

static void finish(ty_actor *a, lt_actor *la, bool ok, const char *reason,
                   size_t rlen) {
  lt_actor *parent = la->parent_la;
  if (parent) {
    fork_detach(la);
    /* A fork is part of its actor: its failure, or its tycho.exit, ends
     * the actor (which then ends its other forks). */
    if (!ok || la->end_actor)
      lt_send_raw(parent->pid, LT_SIG_KILL, 0, reason, rlen);
  }
  notify_exit(a, la, reason, rlen);
}

/* The error value at the top of co as a string: tostring() through a
 * __tostring metamethod when there is one. */
static const char *error_text(lua_State *co) {
  const char *m = lua_tostring(co, -1);
  if (m) return m;
  if (luaL_callmeta(co, -1, "__tostring") && lua_isstring(co, -1))
    return lua_tostring(co, -1);
  return lua_pushfstring(co, "(error object is a %s value)",
                         luaL_typename(co, -1));
}

static void report_error(ty_actor *a, lua_State *co, const char **msg,
                         size_t *len) {
  lua_State *L = lt_worker_get()->L;
  const char *m = error_text(co);
  luaL_traceback(L, co, m, 0);
  lua_xmove(L, co, 1);
  *msg = lua_tolstring(co, -1, len);
  lt_actor *la = a->user;
  /* The main actor's error goes to the caller of tycho.run instead. */
  if (la->is_main) return;
  if (la->parent)
    fprintf(stderr, "tycho: actor %.0f (fork %.0f) failed: %s\n",
            (double)la->parent, (double)a->pid, *msg);
  else
    fprintf(stderr, "tycho: actor %.0f failed: %s\n", (double)a->pid, *msg);
}

/* The coroutine returned: main actors hand their results to tycho.run (the
 * launcher's script has no caller to take them). */
static int on_return(ty_actor *a, lt_actor *la) {
  if (la->is_main && la->fn_kind == LT_FN_FILE) {
    lt_main_done(true, "", 0);
  } else if (la->is_main) {
    lt_worker *lw = lt_worker_get();
    char err[256];
    int n = lua_gettop(la->co);
    ty__buf_reset(&lw->buf);
    if (ty__codec_encode(la->co, 1, n, &lw->buf, SIZE_MAX, err, sizeof err)) {
      char msg[300];
      snprintf(msg, sizeof msg, "tycho.run: cannot return the results: %s",
               err);
      lt_main_done(false, msg, strlen(msg));
    } else {
      lt_main_done(true, lw->buf.data, lw->buf.len);
    }
  }
  finish(a, la, true, "normal", 6);
  return TY_DONE;
}

/* A main actor that ended without returning: tycho.exit() (or a "normal"
 * kill) returns nothing from tycho.run; any other reason is raised there. */
static void main_ended(lt_actor *la, bool normal, const char *reason,
                       size_t len) {
  if (!la->is_main) return;
  if (normal) lt_main_done(true, "", 0);
  else lt_main_done(false, reason, len);
}

/* The actor called tycho.exit (or linked to something gone): it ends with
 * that reason, also when a pcall caught the error exit raised and the actor
 * went on until its next wait or its return. */
static int exited(ty_actor *a, lt_actor *la) {
  const char *msg = la->exit_reason;
  size_t len = la->exit_len;
  bool normal = len == 6 && memcmp(msg, "normal", 6) == 0;
  main_ended(la, normal, msg, len);
  finish(a, la, normal, msg, len);
  return TY_DONE;
}

static int on_error(ty_actor *a, lt_actor *la) {
  if (la->exit_reason) return exited(a, la);
  const char *msg;
  size_t len;
  report_error(a, la->co, &msg, &len);
  main_ended(la, false, msg, len);
  finish(a, la, false, msg, len);
  return TY_DONE;
}

int lt_exit_now(lua_State *L, lt_actor *la, const char *reason, size_t len) {
  if (!la->exit_reason) { /* a second exit (after a pcall) keeps the first */
    la->exit_reason = ty__xmalloc(len + 1);
    memcpy(la->exit_reason, reason, len);
    la->exit_reason[len] = 0;
    la->exit_len = len;
  }
  lua_pushfstring(L, "tycho.exit: %s", la->exit_reason);
  return lua_error(L);
}

/* Ends an actor from outside its coroutine (kill, linked exit), suspended
 * or not started yet. */
static int die_now(ty_actor *a, lt_actor *la, const char *reason, size_t len) {
  main_ended(la, len == 6 && memcmp(reason, "normal", 6) == 0, reason, len);
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

ty_msg *lt_take_msg(ty_actor *a) {
  ty_msg *prev = NULL, *m = ty_mbox_first(a);
  while (m) {
    ty_msg *next = ty_mbox_next(m);
    if (m->kind == LT_MSG || m->kind == LT_CALL) {
      ty_mbox_remove(a, prev, m);
      return m;
    }
    if (m->kind >= TY_MSG_SIGNAL) {
      prev = m; /* left for process_signals */
    } else {
      ty_mbox_remove(a, prev, m); /* a reply that came after its call ended */
      ty_msg_free(m);
    }
    m = next;
  }
  return NULL;
}

/* Waits again for what la->wait describes, keeping the original deadline. */
static int rewait(ty_actor *a, lt_actor *la, uint64_t ref) {
  int64_t left = -1;
  if (la->deadline_ns) {
    uint64_t now = ty__now_ns();
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

/* The next ordinary message for recv; a call is remembered as owed until it
 * is answered. */
static int wake_recv(ty_actor *a, lt_actor *la) {
  ty_msg *m = lt_take_msg(a);
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

/* The coroutine yielded: what the worker should do with the actor. */
static int after_yield(ty_actor *a, lt_actor *la) {
  if (la->wait == LT_W_NONE) {
    /* coroutine.yield() straight from the actor: treat it as a yield. */
    lua_settop(la->co, 0);
    la->wait = LT_W_YIELD;
  }
  if (la->wait == LT_W_YIELD) return TY_YIELD;
  /* A signal that arrived while it ran (one it sent itself, or one queued
   * before its start) would not end this wait: run again to handle it; the
   * wait is then re-armed with its deadline (wake_args). */
  if (a->mbox.signals) return TY_YIELD;
  return TY_WAIT;
}

static int lt_resume(ty_actor *a, void *ud) {
  (void)ud;
  lt_actor *la = a->user;
  /* Signals first, even before the start: a kill sent to a spawn request
   * must not let it run. */
  if (a->mbox.signals) {
    ty_msg *kill = process_signals(a, la);
    if (kill) {
      int r = die_now(a, la, kill->data, kill->len);
      ty_msg_free(kill);
      return r;
    }
  }
  int nargs;
  if (!a->started) {
    la->pid = a->pid;
    nargs = start_actor(la);
    if (nargs < 0) return on_error(a, la);
  } else {
    nargs = wake_args(a, la);
    if (nargs < 0) return TY_WAIT;
  }
  la->wait = LT_W_NONE;
  la->deadline_ns = 0;
  la->ext_wake = NULL;
  la->ext_cancel = NULL;
  int st = lua_resume(la->co, nargs);
  if (la->exit_reason) return exited(a, la);
  if (st == LUA_YIELD) return after_yield(a, la);
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
  /* At a stop, actors are destroyed without finish(): keep the fork
   * pointers of the survivors valid. */
  fork_detach(la);
  forks_orphan(la);
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
 * waiting for its timeout; a link or monitor gets the reason the actor ended
 * with (as if it had been seen in time), or "noproc". The link's exit signal
 * must come from the pid that was linked, or the linker would not recognise
 * it. */
static void lt_undeliverable(ty_msg *m, ty_worker *w, void *ud) {
  (void)ud;
  if (!w) return;
  if (m->kind == LT_MSG || m->kind == LT_CALL || m->kind == LT_REPLY) {
    /* Connections inside close now, not when the runtime stops. */
    lt_net_discard(((lt_worker *)ty_worker_data(w))->L, m->data, m->len);
  }
  if (!m->from) return;
  if (m->kind == LT_CALL) {
    lt_send_reply_err(m->from, m->ref, "dead");
    return;
  }
  if (m->kind != LT_SIG_LINK && m->kind != LT_SIG_MONITOR) return;
  size_t len = 6;
  char *found = lt_grave_find(m->to, &len);
  const char *reason = found ? found : "noproc";
  if (m->kind == LT_SIG_LINK) {
    lt_send_raw_from(m->to, m->from, LT_SIG_EXIT, 0, reason, len);
  } else {
    lua_State *L = ((lt_worker *)ty_worker_data(w))->L;
    lua_pushliteral(L, "DOWN");
    lua_pushnumber(L, (lua_Number)m->to);
    lua_pushlstring(L, reason, len);
    send_values(L, 3, m->from);
  }
  free(found);
}

const ty_actor_ops lt_ops = {
    .worker_init = lt_worker_init,
    .worker_exit = lt_worker_exit,
    .resume = lt_resume,
    .destroy = lt_destroy,
    .undeliverable = lt_undeliverable,
};
