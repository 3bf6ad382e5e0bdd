/*
 * lpool.c - tycho.blocking and tycho.resolve: work that blocks runs on the
 * blocking pool (pool.c), so the calling actor waits and its worker does not.
 *
 *   tycho.blocking(f, ...) -> f's results | nil, err
 *     f is a function without upvalues (modules from require are fine, as for
 *     tycho.spawn) or a "module.function" name. It runs on a pool thread, in
 *     a LuaJIT state that thread owns (created on its first job, reused until
 *     the thread retires). Arguments and results are copied with the message
 *     codec. An error in f comes back as nil + the message with a traceback;
 *     a full pool as nil, "busy"; a pool shut down by the runtime's stop as
 *     nil, "stopped".
 *   tycho.resolve(host [, family]) -> address | nil, err    (getaddrinfo)
 *   tycho.pool_config{max=, queue=, idle=}   (before tycho.run)
 *   tycho.pool_stats() -> {threads=, idle=, queued=, completed=, rejected=}
 *
 * The way back: a pool thread sends the outcome as an LT_REPLY / LT_REPLY_ERR
 * message with the caller's ref, through ty_send, which from a thread that is
 * no worker pushes it on the caller's worker inbox and wakes that worker if
 * it is parked. The caller waits exactly as tycho.call does (lt_yield_reply).
 *
 * Lifetime: one pool per tycho.run, created by the first job and shut down
 * when the runtime stops. No hook in run_main and no atexit: every worker
 * state that loads tycho.core gets a sentinel userdata whose __gc shuts the
 * pool down. Worker states are closed by the workers themselves inside
 * ty_runtime_stop, before the runtime is freed, and the state of the worker
 * whose actor created the pool is one of them. So by the time the runtime is
 * freed no pool thread exists that could still send to it, and by the time
 * the host closes the Lua state that loaded core.so, no pool thread runs its
 * code. (An actor that submits after a sentinel fired, while the stop is in
 * progress, starts a new pool that its own worker's sentinel shuts down.)
 */
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netdb.h>
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>

#include "base/fence.h"
#include "lapi.h"
#include "lctx.h"
#include "lfn.h"
#include "lguard.h"
#include "lmem.h"
#include "lpool.h"
#include "lrandom.h"
#include "lstate.h"
#include "pool/pool.h"

/* ---- settings (tycho.pool_config; read when a pool is created) ---------- */

static struct {
  unsigned max;
  uint32_t queue;
  double idle; /* seconds */
} g_cfg = {512, 4096, 10.0};

/* ---- the pool of this run ----------------------------------------------- */

/* Readers (submit, stats) share it; creation and shutdown take it alone.
 * Writers first, so that a stop is not starved by a stream of submits. */
static pthread_rwlock_t g_lock =
    PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP;
static ty_pool *g_pool; /* guarded by g_lock */

static void thread_exit(void *state, void *ud);

static void create_pool(void) {
  pthread_rwlock_wrlock(&g_lock);
  if (!g_pool) {
    ty_pool_config c;
    ty_pool_config_init(&c);
    c.max_threads = g_cfg.max;
    c.queue_cap = g_cfg.queue;
    c.keep_alive_ns = (uint64_t)(g_cfg.idle * 1e9);
    c.thread_exit = thread_exit;
    if (ty_pool_new(&c, &g_pool)) g_pool = NULL;
  }
  pthread_rwlock_unlock(&g_lock);
}

/* 0, -EAGAIN (busy) or -ESHUTDOWN; the pool owns j only on 0. */
static int submit(ty_pool_job *j) {
  pthread_rwlock_rdlock(&g_lock);
  if (!g_pool) {
    pthread_rwlock_unlock(&g_lock);
    create_pool();
    pthread_rwlock_rdlock(&g_lock);
  }
  int rc = g_pool ? ty_pool_submit(g_pool, j) : -ESHUTDOWN;
  pthread_rwlock_unlock(&g_lock);
  return rc;
}

static int g_left; /* threads left behind by shutdowns (lt_pool_left) */

int lt_pool_left(void) {
  pthread_rwlock_wrlock(&g_lock);
  int n = g_left;
  g_left = 0;
  pthread_rwlock_unlock(&g_lock);
  return n;
}

int lt_pool_shutdown(void) {
  pthread_rwlock_wrlock(&g_lock);
  ty_pool *p = g_pool;
  g_pool = NULL;
  pthread_rwlock_unlock(&g_lock);
  if (!p) return 0;
  /* Outside the lock: it waits for running jobs, until the stop's
   * deadline (a job that never returns must not hold the stop). */
  uint64_t dl = lt_ctx_get()->stop_deadline_ns ? lt_ctx_get()->stop_deadline_ns
                                               : UINT64_MAX;
  int left = ty_pool_shutdown_until(p, dl);
  ty_pool_free(p);
  if (left) ty__pin_code(); /* their code must stay mapped */
  pthread_rwlock_wrlock(&g_lock);
  g_left += left;
  pthread_rwlock_unlock(&g_lock);
  return left;
}

/* ---- jobs --------------------------------------------------------------- */

enum { LP_BYTECODE, LP_MODULE, LP_RESOLVE };

typedef struct lp_job {
  ty_pool_job base;
  ty_runtime *rt; /* alive while the pool is: see the lifetime note */
  ty_pid to;
  uint64_t ref;
  int kind;
  int family;    /* LP_RESOLVE */
  bool answered; /* the reply went out */
  size_t len;
  char data[]; /* LP_RESOLVE: the host name, NUL-terminated; else encoded
                * (function or name, upvalue module map, args...) */
} lp_job;

static void job_run(ty_pool_job *pj);

/* Nobody waits any more (the runtime is stopping): just free it. */
static void job_cancel(ty_pool_job *pj) { free(pj); }

static lp_job *job_new(int kind, ty_pid to, uint64_t ref, const void *data,
                       size_t len) {
  lp_job *j = ty__xmalloc(sizeof *j + len + 1);
  memset(j, 0, sizeof *j);
  j->base.run = job_run;
  j->base.cancel = job_cancel;
  j->rt = lt_ctx_get()->rt;
  j->to = to;
  j->ref = ref;
  j->kind = kind;
  j->len = len;
  memcpy(j->data, data, len);
  j->data[len] = 0;
  return j;
}

/* Sends the outcome to the caller; a caller that ended meanwhile is fine.
 * A job that outlived its run's stop (its thread was left behind) has no
 * runtime to send to any more: the pool says so, under its lock. */
static void send_reply(lp_job *j, uint32_t kind, const void *data, size_t len) {
  if (!ty_pool_reply_begin()) return;
  ty_msg *m = ty_msg_new(len);
  if (len) memcpy(m->data, data, len);
  m->to = j->to;
  m->kind = kind;
  m->ref = j->ref;
  if (ty_send(j->rt, m)) ty_msg_free(m);
  ty_pool_reply_end();
}

static void send_error(lp_job *j, const char *msg) {
  send_reply(j, LT_REPLY_ERR, msg, strlen(msg));
}

/* ---- the Lua state of a pool thread ------------------------------------- */

typedef struct lp_thread {
  lua_State *L;
  lt_heap heap;     /* its allocator: the running job is charged */
  lt_charge charge; /* the running job's */
  int fncache_ref;  /* bytecode -> loaded function (weak values) */
  int resolver_ref; /* "module.function" -> function */
  ty__buf buf;
  uint64_t paths_version; /* of the package paths this state has */
} lp_thread;

/* Finds the function a "module.function" name means: field `function` of
 * require("module"), or else a module that returns a function (as for
 * tycho.spawn). Errors from loading a module propagate as they are. */
static const char resolver_src[] =
    "local name = ...\n"
    "local function missing(err, mod)\n"
    "  return tostring(err):find(\"module '\" .. mod .. \"' not found\", 1, "
    "true)\n"
    "end\n"
    "local mod, field = name:match('^(.+)%.([^.]+)$')\n"
    "local why = 'not a module.function name'\n"
    "if mod then\n"
    "  local ok, m = pcall(require, mod)\n"
    "  if ok and type(m) == 'table' and type(m[field]) == 'function' then\n"
    "    return m[field]\n"
    "  end\n"
    "  if not ok and not missing(m, mod) then error(m, 0) end\n"
    "  why = ok and (\"module '\" .. mod .. \"' has no function '\" .. field "
    ".. \"'\")\n"
    "    or (\"no module '\" .. mod .. \"'\")\n"
    "end\n"
    "local ok, f = pcall(require, name)\n"
    "if ok and type(f) == 'function' then return f end\n"
    "if not ok and not missing(f, name) then error(f, 0) end\n"
    "error(\"tycho.blocking: cannot find the function '\" .. name .. \"' (\" "
    "..\n"
    "  why .. \", and no module '\" .. name .. \"' that returns a function)\", "
    "0)\n";

static int new_ref_table(lua_State *L, const char *mode) {
  lua_newtable(L);
  lua_createtable(L, 0, 1);
  lua_pushstring(L, mode);
  lua_setfield(L, -2, "__mode");
  lua_setmetatable(L, -2);
  return luaL_ref(L, LUA_REGISTRYINDEX);
}

/* Under lua_cpcall: the libraries, the workers' package paths and this
 * copy of the core (f may use the tycho module; its actor functions say
 * they need an actor), the caches. */
static int open_state(lua_State *L) {
  lp_thread *t = lua_touserdata(L, 1);
  luaL_openlibs(L);
  if (lt_guard_gc(L) || lt_mem_watch(L, &t->heap)) return lua_error(L);
  lt_random_seed_state(L, 1000 + (unsigned)(uintptr_t)t % 997, false);
  /* The workers' package paths and this copy of the core: f may use the
   * tycho module; its actor functions say they need an actor. */
  lt_set_paths(L, &t->paths_version);
  t->fncache_ref = new_ref_table(L, "v");
  if (luaL_loadbuffer(L, resolver_src, sizeof resolver_src - 1,
                      "=tycho.blocking"))
    return lua_error(L);
  t->resolver_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  return 0;
}

static void close_state(lp_thread *t) {
  lt_gc_final(t->L);
  lt_mem_detach(t->L, &t->heap);
  lua_close(t->L);
  lt_mem_flush();
  ty__buf_free(&t->buf);
  free(t);
}

/* The calling pool thread's state, made on its first job; NULL when memory
 * runs out (the job then fails). */
static lp_thread *thread_state(void) {
  lp_thread *t = ty_pool_state();
  if (t) return t;
  t = calloc(1, sizeof *t);
  if (!t) return NULL;
  t->L = luaL_newstate();
  if (!t->L) {
    free(t);
    return NULL;
  }
  lt_mem_attach(t->L, &t->heap);
  ty__buf_init(&t->buf);
  if (lua_cpcall(t->L, open_state, t)) {
    close_state(t);
    return NULL;
  }
  ty_pool_set_state(t);
  return t;
}

/* The pool calls this on a retiring thread: its state goes with it. */
static void thread_exit(void *state, void *ud) {
  (void)ud;
  close_state(state);
}

/* ---- running a job on a pool thread ------------------------------------- */

/* Replaces the bytecode at index 1 with its function (cached). */
static void load_bytecode(lua_State *L, lp_thread *t) {
  lua_rawgeti(L, LUA_REGISTRYINDEX, t->fncache_ref);
  lua_pushvalue(L, 1);
  lua_rawget(L, -2);
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    size_t len;
    const char *s = lua_tolstring(L, 1, &len);
    if (luaL_loadbuffer(L, s, len, "=blocking")) lua_error(L);
    lua_pushvalue(L, 1);
    lua_pushvalue(L, -2);
    lua_rawset(L, -4);
  }
  lua_replace(L, 1);
  lua_pop(L, 1);
}

/* Replaces the name at index 1 with the function it names. */
static void find_named(lua_State *L, lp_thread *t) {
  lua_rawgeti(L, LUA_REGISTRYINDEX, t->resolver_ref);
  lua_pushvalue(L, 1);
  lua_call(L, 1, 1);
  lua_replace(L, 1);
}

/* lua_pcall'ed with the job as light userdata: decodes the request and
 * leaves f and its arguments on the stack. */
static int prepare(lua_State *L) {
  lp_job *j = lua_touserdata(L, 1);
  lp_thread *t = ty_pool_state();
  lua_settop(L, 0);
  lt_sync_paths(L, &t->paths_version); /* published by the submitter */
  char err[256] = "no function";
  int n = lt_codec_decode(L, j->data, j->len, err, sizeof err);
  if (n < 2) return luaL_error(L, "tycho.blocking: bad request (%s)", err);
  if (j->kind == LP_BYTECODE) load_bytecode(L, t);
  else find_named(L, t);
  if (lt_fn_bind(L, 1, 2)) lua_error(L);
  lua_remove(L, 2);
  return n - 1;
}

/* The message handler: the error with a traceback of where it happened
 * (lt_error_text: a failing __tostring gives a fixed text). */
static int traceback(lua_State *L) {
  luaL_traceback(L, L, lt_error_text(L, 1), 1);
  return 1;
}

/* Encodes the results at L[first..top] and sends them. */
static void reply_values(lp_job *j, lp_thread *t, int first) {
  lua_State *L = t->L;
  char err[256];
  ty__buf_reset(&t->buf);
  if (lt_codec_encode(L, first, lua_gettop(L) - first + 1, &t->buf,
                      lt_ctx_get()->max_message, err, sizeof err)) {
    char msg[320];
    snprintf(msg, sizeof msg, "tycho.blocking: cannot return the results: %s",
             err);
    send_error(j, msg);
    return;
  }
  send_reply(j, LT_REPLY, t->buf.data, t->buf.len);
}

static void send_lua_error(lp_job *j, lua_State *L, int status) {
  const char *msg = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
  if (status == LUA_ERRMEM) msg = "nomem";
  send_error(j, msg ? msg : "tycho.blocking: error without a message");
  j->answered = true;
}

/* Under lua_cpcall: finding f fails without a traceback (it would only
 * show this file's C frames); f itself fails with one. */
static int call_protected(lua_State *L) {
  lp_job *j = lua_touserdata(L, 1);
  lp_thread *t = ty_pool_state();
  lua_settop(L, 0);
  lua_pushcfunction(L, traceback);
  lua_pushcfunction(L, prepare);
  lua_pushlightuserdata(L, j);
  int st = lua_pcall(L, 1, LUA_MULTRET, 0);
  if (!st) st = lua_pcall(L, lua_gettop(L) - 2, LUA_MULTRET, 1);
  if (st) {
    send_lua_error(j, L, st);
  } else {
    lua_remove(L, 1); /* results from 1: codec errors name "argument N" */
    reply_values(j, t, 1);
    j->answered = true;
  }
  return 0;
}

/* Under lua_cpcall, after a job: a job that ended for its memory gives it
 * back now; the queued __gc metamethods run. */
static int after_job(lua_State *L) {
  lp_thread *t = lua_touserdata(L, 1);
  if (t->charge.doomed) lua_gc(L, LUA_GCCOLLECT, 0);
  else lt_mem_after_run(L, &t->heap, NULL);
  lt_gc_after_run(L);
  return 0;
}

/* The thread's own Lua work around f (pushing, collecting the garbage of
 * earlier jobs, whose __gc metamethods may fail) runs protected too: the
 * job then fails, the thread goes on. */
static void run_call(lp_job *j, lp_thread *t) {
  lua_State *L = t->L;
  lua_settop(L, 0);
  memset(&t->charge, 0, sizeof t->charge);
  lt_mem_charge(&t->heap, &t->charge);
  int st = lua_cpcall(L, call_protected, j);
  lt_mem_charge(&t->heap, NULL);
  if (t->charge.doomed && !j->answered) {
    send_error(j, "nomem");
    j->answered = true;
  }
  if (st && !j->answered) send_lua_error(j, L, st);
  lua_settop(L, 0);
  lua_cpcall(L, after_job, t);
}

/* getaddrinfo; replies with the first address as a string. */
static void run_resolve(lp_job *j, lp_thread *t) {
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = j->family;
  hints.ai_socktype = SOCK_STREAM;
  int rc = getaddrinfo(j->data, NULL, &hints, &res);
  if (rc || !res) {
    send_error(j, rc ? gai_strerror(rc) : "no address");
    return;
  }
  char addr[INET6_ADDRSTRLEN] = "";
  const void *src =
      res->ai_family == AF_INET6
          ? (const void *)&((struct sockaddr_in6 *)res->ai_addr)->sin6_addr
          : (const void *)&((struct sockaddr_in *)res->ai_addr)->sin_addr;
  inet_ntop(res->ai_family, src, addr, sizeof addr);
  freeaddrinfo(res);
  ty__buf_reset(&t->buf); /* encoded in C: no Lua work to fail here */
  if (lt_codec_put_string(&t->buf, addr, strlen(addr))) {
    send_error(j, "memory");
    return;
  }
  send_reply(j, LT_REPLY, t->buf.data, t->buf.len);
}

static void job_run(ty_pool_job *pj) {
  lp_job *j = (lp_job *)pj;
  lp_thread *t = thread_state();
  if (!t) send_error(j, "nomem");
  else if (j->kind == LP_RESOLVE) run_resolve(j, t);
  else run_call(j, t);
  free(j);
}

/* ---- the Lua API (on workers) ------------------------------------------- */

/* The calling actor, checked the way lt_yield_reply will check it, before
 * any job is submitted. */
static ty_actor *caller(lua_State *L, const char *fname) {
  ty_actor *a = ty_actor_current();
  if (!a || !lt_ctx_get()->rt)
    luaL_error(L,
               "tycho.%s must be called from inside an actor (start one "
               "with tycho.run)%s",
               fname,
               ty_pool_on_thread() ? "; this is a blocking pool thread, "
                                     "which runs outside every actor"
                                   : "");
  if (((lt_actor *)a->user)->co != L)
    luaL_error(L,
               "tycho.%s blocks, so it must be called from the actor's "
               "own coroutine (or a tycho.fork), not from a coroutine "
               "created by the script",
               fname);
  return a;
}

static int push_fail(lua_State *L, int rc) {
  lua_pushnil(L);
  lua_pushstring(L, rc == -ESHUTDOWN ? "stopped" : "busy");
  return 2;
}

/* Encodes (f or its name, upvalue map, args...) into the worker's buffer. */
static ty__buf *encode_request(lua_State *L, int top) {
  lt_note_paths(L);
  ty__buf *b = &lt_worker_get()->buf;
  ty__buf_reset(b);
  char err[256];
  if (lua_type(L, 1) == LUA_TFUNCTION) {
    lt_fn_payload(L, 1, "blocking", b);
  } else {
    lua_pushvalue(L, 1);
    lua_pushnil(L);
    lt_codec_encode(L, top + 1, 2, b, SIZE_MAX, err, sizeof err);
    lua_settop(L, top);
  }
  if (top >= 2 && lt_codec_encode(L, 2, top - 1, b, lt_ctx_get()->max_message,
                                  err, sizeof err))
    luaL_error(L, "tycho.blocking: %s", err);
  return b;
}

static int l_blocking(lua_State *L) {
  int t = lua_type(L, 1);
  if (t != LUA_TFUNCTION && t != LUA_TSTRING)
    return luaL_error(L,
                      "tycho.blocking: bad argument #1 (expected a "
                      "function or a \"module.function\" name, got %s)",
                      luaL_typename(L, 1));
  if (t == LUA_TSTRING && lua_objlen(L, 1) == 0)
    return luaL_error(L, "tycho.blocking: empty function name");
  ty_actor *a = caller(L, "blocking");
  ty__buf *b = encode_request(L, lua_gettop(L));
  uint64_t ref = lt_new_ref();
  lp_job *j = job_new(t == LUA_TFUNCTION ? LP_BYTECODE : LP_MODULE, a->pid, ref,
                      b->data, b->len);
  int rc = submit(&j->base);
  if (rc) {
    free(j);
    return push_fail(L, rc);
  }
  return lt_yield_reply(L, "blocking", ref, -1);
}

int lt_pool_resolve_start(ty_pid to, uint64_t ref, const char *host,
                          int family) {
  lp_job *j = job_new(LP_RESOLVE, to, ref, host, strlen(host));
  j->family = family;
  int rc = submit(&j->base);
  if (rc) free(j);
  return rc;
}

static int check_family(lua_State *L, int idx) {
  const char *f = luaL_optstring(L, idx, "any");
  if (strcmp(f, "any") == 0) return AF_UNSPEC;
  if (strcmp(f, "inet") == 0) return AF_INET;
  if (strcmp(f, "inet6") == 0) return AF_INET6;
  return luaL_error(L,
                    "tycho.resolve: family must be \"inet\", \"inet6\" or "
                    "\"any\", not '%s'",
                    f);
}

/* A numeric address of the wanted family needs no resolver. */
static bool is_numeric(const char *host, int family) {
  unsigned char buf[sizeof(struct in6_addr)];
  if (family != AF_INET6 && inet_pton(AF_INET, host, buf) == 1) return true;
  return family != AF_INET && inet_pton(AF_INET6, host, buf) == 1;
}

static int l_resolve(lua_State *L) {
  const char *host = luaL_checkstring(L, 1);
  int family = check_family(L, 2);
  ty_actor *a = caller(L, "resolve");
  if (!*host) return luaL_error(L, "tycho.resolve: empty host name");
  if (is_numeric(host, family)) {
    lua_pushvalue(L, 1);
    return 1;
  }
  uint64_t ref = lt_new_ref();
  int rc = lt_pool_resolve_start(a->pid, ref, host, family);
  if (rc) return push_fail(L, rc);
  return lt_yield_reply(L, "resolve", ref, -1);
}

/* ---- configuration and stats -------------------------------------------- */

static lua_Number check_int(lua_State *L, int idx, const char *name,
                            lua_Number lo, lua_Number hi) {
  lua_Number v = luaL_checknumber(L, idx);
  if (v < lo || v > hi || floor(v) != v)
    luaL_error(L, "tycho.config: %s must be an integer between %.0f and %.0f",
               name, lo, hi);
  return v;
}

bool lt_pool_config_field(lua_State *L, const char *key, int idx) {
  if (strcmp(key, "pool_max") == 0) {
    g_cfg.max = (unsigned)check_int(L, idx, key, 1, 65536);
  } else if (strcmp(key, "pool_queue") == 0) {
    g_cfg.queue = (uint32_t)check_int(L, idx, key, 0, 1 << 30);
  } else if (strcmp(key, "pool_idle") == 0) {
    lua_Number v = luaL_checknumber(L, idx);
    if (!(v > 0 && v <= 1e9))
      luaL_error(L, "tycho.config: pool_idle must be > 0 seconds");
    g_cfg.idle = v;
  } else {
    return false;
  }
  return true;
}

static void push_config(lua_State *L) {
  lua_createtable(L, 0, 3);
  lua_pushnumber(L, g_cfg.max);
  lua_setfield(L, -2, "max");
  lua_pushnumber(L, g_cfg.queue);
  lua_setfield(L, -2, "queue");
  lua_pushnumber(L, g_cfg.idle);
  lua_setfield(L, -2, "idle");
}

/* tycho.pool_config{max=, queue=, idle=}: before tycho.run (a running pool
 * keeps its settings). With no argument: the current settings. */
static int l_pool_config(lua_State *L) {
  if (lua_isnoneornil(L, 1)) {
    push_config(L);
    return 1;
  }
  luaL_checktype(L, 1, LUA_TTABLE);
  if (lt_ctx_get()->rt)
    return luaL_error(L, "tycho.pool_config: the runtime is running; "
                         "configure the pool before tycho.run");
  lua_pushnil(L);
  while (lua_next(L, 1)) {
    const char *k = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : "?";
    char key[32];
    snprintf(key, sizeof key, "pool_%s", k);
    if (strlen(k) > 8 || !lt_pool_config_field(L, key, lua_gettop(L)))
      return luaL_error(L,
                        "tycho.pool_config: unknown option '%s' (known: "
                        "max, queue, idle)",
                        k);
    lua_pop(L, 1);
  }
  return 0;
}

void lt_pool_stats_push(lua_State *L) {
  ty_pool_stats s = {0};
  pthread_rwlock_rdlock(&g_lock);
  if (g_pool) ty_pool_stats_get(g_pool, &s);
  pthread_rwlock_unlock(&g_lock);
  lua_createtable(L, 0, 5);
#define SET(f)                                                                 \
  lua_pushnumber(L, (lua_Number)s.f);                                          \
  lua_setfield(L, -2, #f);
  SET(threads) SET(idle) SET(queued) SET(completed) SET(rejected)
#undef SET
}

static int l_pool_stats(lua_State *L) {
  lt_pool_stats_push(L);
  return 1;
}

/* ---- the sentinel: shuts the pool down when a worker's state closes ----- */

#define SENTINEL_KEY "tycho.pool.sentinel"

static int sentinel_gc(lua_State *L) {
  (void)L;
  lt_pool_shutdown();
  return 0;
}

/* Only worker states get one (see the lifetime note at the top); it lives
 * in the registry, so it is collected only when the state closes. */
static void add_sentinel(lua_State *L) {
  /* Not in the borrowed state of tycho.run's caller: it is never closed,
   * and the run's end shuts the pool down anyway (lrun.c). */
  if (!ty_worker_current() || lt_worker_get()->borrowed) return;
  lua_getfield(L, LUA_REGISTRYINDEX, SENTINEL_KEY);
  bool have = !lua_isnil(L, -1);
  lua_pop(L, 1);
  if (have) return;
  lua_newuserdata(L, 1);
  lua_createtable(L, 0, 1);
  lua_pushcfunction(L, sentinel_gc);
  lua_setfield(L, -2, "__gc");
  lua_setmetatable(L, -2);
  lua_setfield(L, LUA_REGISTRYINDEX, SENTINEL_KEY);
}

void lt_open_pool(lua_State *L) {
  static const luaL_Reg funcs[] = {{"blocking", l_blocking},
                                   {"resolve", l_resolve},
                                   {"pool_config", l_pool_config},
                                   {"pool_stats", l_pool_stats},
                                   {NULL, NULL}};
  luaL_register(L, NULL, funcs);
  add_sentinel(L);
}
