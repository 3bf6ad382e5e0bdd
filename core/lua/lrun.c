/*
 * lrun.c - tycho.config and tycho.run: the settings, and a run from start to
 * stop (the runtime is created, the main actor spawned, its outcome awaited,
 * the runtime stopped and freed).
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <time.h>

#include "base/alloc.h"
#include "base/log.h"
#include "io/io.h"
#include "lapi.h"
#include "lcompose.h"
#include "lfn.h"
#include "lmem.h"
#include "lmetrics.h"
#include "lnames.h"
#include "lpool.h"
#include "lrandom.h"
#include "lrun.h"
#include "lshared.h"
#include "lstate.h"

/* ---- config and run ----------------------------------------------------- */

static lua_Number check_count(lua_State *L, const char *k, lua_Number max) {
  lua_Number v = luaL_checknumber(L, -1);
  if (!(v >= 1 && v <= max) || floor(v) != v)
    luaL_error(L, "tycho.config: %s must be an integer from 1 to %.0f", k, max);
  return v;
}

static size_t check_bytes(lua_State *L, const char *k, size_t min) {
  lua_Number v = luaL_checknumber(L, -1);
  if (!(v >= (lua_Number)min && v <= 9007199254740992.0) || floor(v) != v)
    luaL_error(L,
               "tycho.config: %s must be a number of bytes, at least %d "
               "(or false for the default)",
               k, (int)min);
  return (size_t)v;
}

/* max_mailbox (messages), max_mailbox_bytes, mailbox_warn (messages),
 * max_memory and actor_memory (bytes; false: the default, none): the value
 * on top of L. False for another key. */
static bool config_mailbox(lua_State *L, const char *k) {
  bool off = lua_type(L, -1) == LUA_TBOOLEAN && !lua_toboolean(L, -1);
  if (strcmp(k, "max_memory") == 0)
    lt_ctx_get()->max_memory = off ? 0 : check_bytes(L, k, 4 << 20);
  else if (strcmp(k, "actor_memory") == 0)
    lt_ctx_get()->actor_memory = off ? 0 : check_bytes(L, k, 64 << 10);
  else if (strcmp(k, "max_mailbox") == 0)
    lt_ctx_get()->max_mailbox = (uint32_t)check_count(L, k, 4294967295.0);
  else if (strcmp(k, "max_mailbox_bytes") == 0)
    lt_ctx_get()->max_mailbox_bytes =
        (uint64_t)check_count(L, k, 9007199254740992.0);
  else if (strcmp(k, "mailbox_warn") == 0)
    lt_ctx_get()->mailbox_warn = (uint32_t)check_count(L, k, 4294967295.0);
  else return false;
  return true;
}

static int l_config(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  if (lt_ctx_get()->rt)
    return luaL_error(L, "tycho.config: the runtime is running; configure it "
                         "before tycho.run");
  lua_pushnil(L);
  while (lua_next(L, 1)) {
    const char *k = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : "?";
    if (strcmp(k, "workers") == 0) {
      lua_Number v = luaL_checknumber(L, -1);
      if (v < 1 || v > TY_MAX_WORKERS || floor(v) != v)
        return luaL_error(L,
                          "tycho.config: workers must be an integer "
                          "between 1 and %d",
                          TY_MAX_WORKERS);
      lt_ctx_get()->workers = (unsigned)v;
    } else if (strcmp(k, "call_timeout") == 0) {
      lua_Number v = luaL_checknumber(L, -1);
      if (!(v > 0))
        return luaL_error(L, "tycho.config: call_timeout must be > 0");
      lt_ctx_get()->call_timeout = v;
    } else if (strcmp(k, "max_message") == 0) {
      lua_Number v = luaL_checknumber(L, -1);
      if (!(v >= 64))
        return luaL_error(L, "tycho.config: max_message must be >= 64 "
                             "bytes");
      lt_ctx_get()->max_message = (size_t)v;
    } else if (strcmp(k, "max_slice") == 0) {
      lua_Number v = luaL_checknumber(L, -1);
      if (!(v >= 0.01 || v == 0))
        return luaL_error(L, "tycho.config: max_slice must be >= 0.01 "
                             "seconds (or 0: no watchdog)");
      lt_ctx_get()->max_slice = v;
    } else if (strcmp(k, "stop_timeout") == 0) {
      lua_Number v = luaL_checknumber(L, -1);
      if (!(v >= 0))
        return luaL_error(L, "tycho.config: stop_timeout must be >= 0");
      lt_ctx_get()->stop_timeout = v;
    } else if (strcmp(k, "shutdown_timeout") == 0) {
      lua_Number v = luaL_checknumber(L, -1);
      if (!(v >= 0))
        return luaL_error(L, "tycho.config: shutdown_timeout must be >= 0");
      lt_ctx_get()->shutdown_timeout = v;
    } else if (config_mailbox(L, k)) {
    } else if (strcmp(k, "io") == 0) {
      int io = ty__io_kind_parse(luaL_checkstring(L, -1));
      if (io < 0)
        return luaL_error(L, "tycho.config: io must be \"uring\", \"epoll\" or "
                             "\"auto\"");
      lt_ctx_get()->io = io;
    } else if (strcmp(k, "debug") == 0) {
      lt_ctx_get()->debug = lua_toboolean(L, -1);
    } else if (strcmp(k, "log_level") == 0) {
      int lv = ty__log_level_parse(luaL_checkstring(L, -1));
      if (lv < 0)
        return luaL_error(L, "tycho.config: log_level must be \"debug\", "
                             "\"info\", \"warn\", \"error\" or \"off\"");
      ty__log_set(lv, ty__log_json());
    } else if (strcmp(k, "log_format") == 0) {
      const char *f = luaL_checkstring(L, -1);
      if (strcmp(f, "text") && strcmp(f, "json"))
        return luaL_error(L, "tycho.config: log_format must be \"text\" or "
                             "\"json\"");
      ty__log_set(ty__log_level(), strcmp(f, "json") == 0);
    } else if (!lt_pool_config_field(L, k, -1) &&
               !lt_random_config_field(L, k, -1) &&
               !(lt_ctx_get()->cluster &&
                 lt_ctx_get()->cluster->config_field(L, k, -1))) {
      return luaL_error(L,
                        "tycho.config: unknown option '%s' (known: workers, "
                        "io, call_timeout, max_message, max_slice, "
                        "stop_timeout, shutdown_timeout, debug, max_memory, "
                        "actor_memory, max_mailbox, max_mailbox_bytes, "
                        "mailbox_warn, "
                        "log_level, log_format, pool_max, pool_queue, "
                        "pool_idle, seed, node, nats, cluster, "
                        "cluster_backlog)",
                        k);
    }
    lua_pop(L, 1);
  }
  return 0;
}

/* The main actor's outcome, handed from its worker to the tycho.run caller;
 * finished: the run may end (main is done, and a graceful stop under way
 * has ended). */
static struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool done, ok, finished;
  char *data;
  size_t len;
} g_main = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0, 0, 0};

/* The graceful stop (README, "Graceful stop"): begun by tycho.shutdown or
 * the launcher's first signal, done when lua/tycho/shutdown.lua reports.
 * Under g_main.mu. */
static struct {
  bool begun, done, failed, main_shutdown;
  uint64_t at_ns;
} g_stop;

static volatile sig_atomic_t g_interrupted;
/* The runtime whose worker 0 the caller of tycho.run serves (run_here), or
 * NULL: main's end lets that thread go. Under g_main.mu. */
static ty_runtime *g_here;

static void main_store(bool ok, const char *data, size_t len) {
  g_main.done = true;
  g_main.ok = ok;
  g_main.data = ty__xmalloc(len + 1);
  if (len) memcpy(g_main.data, data, len); /* data may be NULL */
  g_main.data[len] = 0;
  g_main.len = len;
}

static void main_finish(void) {
  g_main.finished = true;
  if (g_here) ty_worker_leave(g_here, 0);
  pthread_cond_signal(&g_main.cv);
}

/* While a graceful stop is under way, main's end does not end the run: the
 * actors asked to stop get their shutdown_timeout. */
void lt_main_done(bool ok, const char *data, size_t len) {
  pthread_mutex_lock(&g_main.mu);
  /* Main linked to a supervisor that the stop ended goes with "shutdown":
   * no failure (the run returns nil, "shutdown": lt_stop_done). */
  if (!ok && g_stop.begun && len == 8 && data &&
      memcmp(data, "shutdown", 8) == 0)
    g_stop.main_shutdown = true; /* and its "stopped" when freed */
  if (!g_main.done && !g_stop.main_shutdown) main_store(ok, data, len);
  if (!g_stop.begun || g_stop.done) main_finish();
  pthread_mutex_unlock(&g_main.mu);
}

void lt_stop_done(bool ok, const char *data, size_t len) {
  pthread_mutex_lock(&g_main.mu);
  if (g_stop.begun && !g_stop.done) {
    g_stop.done = true;
    g_stop.failed = !ok;
    if (!g_main.done) main_store(true, data, len);
    main_finish();
  }
  pthread_mutex_unlock(&g_main.mu);
}

bool lt_stop_failed(void) { return g_stop.failed; }

static unsigned env_workers(lua_State *L) {
  if (lt_ctx_get()->workers) return lt_ctx_get()->workers;
  const char *e = getenv("TYCHO_WORKERS");
  if (!e || !*e) return 0;
  char *end;
  long v = strtol(e, &end, 10);
  if (*end || v < 1 || v > TY_MAX_WORKERS)
    luaL_error(L,
               "TYCHO_WORKERS must be an integer between 1 and %d, not "
               "'%s'",
               TY_MAX_WORKERS, e);
  return (unsigned)v;
}

/* tycho.config{io=} or the launcher's --io, else TYCHO_IO, else auto. An
 * io_uring asked for but not usable here is refused now, not in a worker. */
static int io_kind(lua_State *L) {
  int kind = lt_ctx_get()->io;
  const char *env = getenv("TYCHO_IO");
  if (kind < 0 && env && *env) {
    kind = ty__io_kind_parse(env);
    if (kind < 0)
      luaL_error(L, "TYCHO_IO must be uring, epoll or auto, not '%s'", env);
  }
  if (kind < 0) kind = TY_IO_AUTO;
  if (kind == TY_IO_URING && !ty__io_available(TY_IO_URING))
    luaL_error(L, "tycho.run: the io_uring backend was asked for but cannot "
                  "be used here (kernel too old, or io_uring disabled)");
  return kind;
}

static volatile sig_atomic_t g_hangup;
static double g_last_reload; /* epoch seconds: the start, then each reload */

/* The launcher's helper actor (lua/tycho/launch.lua), spawned by module
 * name with (op, arg): "observe" serves tycho.observe at arg; "reload"
 * reloads the modules whose files changed after arg (epoch seconds). */
static void spawn_launch(lua_State *L, const char *op, const char *arg) {
  int top = lua_gettop(L);
  lua_pushstring(L, op);
  lua_pushstring(L, arg);
  lt_actor *h = lt_spawn_request_fn(L, lt_fn_module("tycho.launch", 12),
                                    LT_FN_MODULE, top + 1, "run");
  lua_settop(L, top);
  if (h && ty_spawn(lt_ctx_get()->rt, h, NULL)) lt_actor_free(h);
}

static double epoch_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void hangup(lua_State *L) {
  char since[64];
  snprintf(since, sizeof since, "%.3f", g_last_reload);
  g_last_reload = epoch_now();
  spawn_launch(L, "reload", since);
}

/* Begins the graceful stop (once per run): spawns its coordinator,
 * lua/tycho/shutdown.lua, through the launcher's helper. */
static bool stop_begin(lua_State *L) {
  pthread_mutex_lock(&g_main.mu);
  bool first = !g_stop.begun && !g_main.finished;
  if (first) {
    g_stop.begun = true;
    g_stop.at_ns = ty__now_ns();
  }
  pthread_mutex_unlock(&g_main.mu);
  if (!first) return false;
  char t[32];
  snprintf(t, sizeof t, "%.17g", lt_ctx_get()->shutdown_timeout);
  spawn_launch(L, "shutdown", t);
  return true;
}

/* A coordinator that cannot run (its worker loops) must not hold the
 * launcher: 2 s past shutdown_timeout the stop ends as failed. */
static void stop_overdue(void) {
  if (!g_stop.begun || g_stop.done) return;
  double past = (double)(ty__now_ns() - g_stop.at_ns) * 1e-9;
  if (past < lt_ctx_get()->shutdown_timeout + 2) return;
  g_stop.done = g_stop.failed = true;
  if (!g_main.done) {
    static const char why[] = "shutdown: the graceful stop did not end";
    main_store(false, why, sizeof why - 1);
  }
  main_finish();
}

static void wait_main(lua_State *L) {
  pthread_mutex_lock(&g_main.mu);
  while (!g_main.finished) {
    if (g_hangup || g_interrupted) {
      bool hup = g_hangup, intr = g_interrupted;
      g_hangup = g_interrupted = 0;
      pthread_mutex_unlock(&g_main.mu);
      if (hup) hangup(L);
      if (intr) stop_begin(L);
      pthread_mutex_lock(&g_main.mu);
      continue;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 50 * 1000000;
    if (ts.tv_nsec >= 1000000000) {
      ts.tv_sec++;
      ts.tv_nsec -= 1000000000;
    }
    pthread_cond_timedwait(&g_main.cv, &g_main.mu, &ts);
    stop_overdue();
  }
  pthread_mutex_unlock(&g_main.mu);
}

/* The runtime's configuration; raises on a bad TYCHO_WORKERS, so it comes
 * before anything is allocated. */
static void run_config(lua_State *L, ty_config *cfg) {
  ty_config_init(cfg);
  cfg->workers = env_workers(L);
  cfg->io = io_kind(L);
  cfg->max_slice_ns = (uint64_t)(lt_ctx_get()->max_slice * 1e9);
  cfg->stop_timeout_ns = (uint64_t)(lt_ctx_get()->stop_timeout * 1e9);
  if (lt_ctx_get()->max_mailbox) cfg->mbox_max = lt_ctx_get()->max_mailbox;
  if (lt_ctx_get()->max_mailbox_bytes)
    cfg->mbox_max_bytes = lt_ctx_get()->max_mailbox_bytes;
  if (lt_ctx_get()->mailbox_warn) cfg->mbox_warn = lt_ctx_get()->mailbox_warn;
  ty__log_start(); /* now, while memory is plenty (log.h) */
  lt_ctx_get()->run_max_memory = lt_ctx_get()->max_memory
                                     ? lt_ctx_get()->max_memory
                                     : lt_mem_default_max();
  lt_mem_start(lt_ctx_get()->run_max_memory, lt_ctx_get()->actor_memory);
}

/* Stops the runtime within stop_timeout (the pool's jobs included), and
 * says what was left running. */
static void stop_runtime(ty_runtime *rt) {
  /* The pool's jobs get a little less than the workers: a worker that
   * closes its state waits for them (lpool.c) and must exit in time. */
  double t = lt_ctx_get()->stop_timeout, margin = t / 4 < 0.25 ? t / 4 : 0.25;
  lt_ctx_get()->stop_deadline_ns =
      ty__now_ns() + (uint64_t)((t - margin) * 1e9);
  int left = ty_runtime_stop(rt);
  lt_pool_shutdown(); /* if no worker state did it (all abandoned) */
  left += lt_pool_left();
  lt_ctx_get()->stop_deadline_ns = 0;
  lt_ctx_get()->left_behind += left;
  if (left)
    ty__logf(TY_LOG_WARN, -1, 0,
             "stop: %d thread(s) still running code that does not return "
             "were left behind (see README, Guarantees and limits)",
             left);
}

/* join in a pcall: its errors unwind to join_cluster. */
static int join_protected(lua_State *L) {
  ty_config *cfg = lua_touserdata(L, 1);
  lua_pushboolean(L, lt_ctx_get()->cluster->join(L, cfg));
  return 1;
}

/* Joins the cluster when one is configured (raising as join does); the
 * spawn request is freed first if it raises. */
static bool join_cluster(lua_State *L, ty_config *cfg, lt_actor *la) {
  if (!lt_ctx_get()->cluster) return false;
  lua_pushcfunction(L, join_protected);
  lua_pushlightuserdata(L, cfg);
  if (lua_pcall(L, 1, 1, 0)) {
    lt_actor_free(la);
    return lua_error(L);
  }
  bool joined = lua_toboolean(L, -1);
  lua_pop(L, 1);
  return joined;
}

/* Creates the runtime of a run (joining the cluster first when there is
 * one); NULL with la freed, after raising, when it cannot. */
static ty_runtime *run_begin(lua_State *L, ty_config *cfg, lt_actor *la,
                             bool *clustered) {
  lt_publish_paths(L); /* the caller's paths, for the workers */
  *clustered = join_cluster(L, cfg, la);
  ty_runtime *rt;
  lt_ctx *ctx = lt_ctx_get();
  ctx->life = &lt_life_all; /* no worker runs yet: they read these from now */
  ctx->main_done = lt_main_done;
  if (ty_runtime_new(cfg, &lt_actor_ops_all, ctx, &rt)) {
    if (*clustered) lt_ctx_get()->cluster->stop();
    lt_actor_free(la);
    luaL_error(L, "tycho.run: cannot create the runtime");
    return NULL;
  }
  /* g_interrupted is not cleared here: a signal that came while the
   * launcher was starting must still stop this run. */
  g_main.done = g_main.finished = false;
  memset(&g_stop, 0, sizeof g_stop);
  lt_ctx_get()->rt = rt;
  lt_graves_open(ty_runtime_workers(rt));
  la->is_main = true;
  if (*clustered) lt_ctx_get()->cluster->start(rt);
  return rt;
}

/* Main has ended: stops and frees the runtime, returns main's results or
 * raises its error. */
static int run_end(lua_State *L, ty_runtime *rt, bool clustered) {
  if (clustered) lt_ctx_get()->cluster->stop();
  stop_runtime(rt);
  pthread_mutex_lock(&g_main.mu);
  g_here = NULL;
  pthread_mutex_unlock(&g_main.mu);
  lt_ctx_get()->rt = NULL;
  ty_runtime_free(rt);
  if (lt_ctx_get()->cluster && lt_ctx_get()->cluster->run_end)
    lt_ctx_get()->cluster->run_end();
  lt_fn_clear();
  lt_graves_close();
  lt_names_clear();
  lt_shared_run_end();
  lt_metrics_run_end();
  ty__log_flush(2000); /* what the run logged is out before run returns */
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
  int n = lt_codec_decode(L, data, len, err, sizeof err);
  free(data);
  if (n < 0) return luaL_error(L, "tycho.run: bad results: %s", err);
  return n;
}

/* The launcher's run: the workers are threads of their own, this thread
 * waits for main (and for the launcher's signals). */
static int run_main(lua_State *L, ty_config *cfg, lt_actor *la) {
  bool clustered;
  ty_runtime *rt = run_begin(L, cfg, la, &clustered);
  ty_runtime_start(rt);
  ty_spawn(rt, la, NULL);
  g_last_reload = epoch_now();
  if (lt_ctx_get()->observe) spawn_launch(L, "observe", lt_ctx_get()->observe);
  wait_main(L);
  return run_end(L, rt, clustered);
}

/* tycho.run from Lua, Tokio's block_on: the calling thread serves as
 * worker 0 until main ends, L as that worker's state (borrowed, given back
 * at the stop: lstate.c), and main starts there, pinned, so it may use
 * upvalues and sees the caller's globals (README, Running). */
static int run_here(lua_State *L, ty_config *cfg, lt_actor *la) {
  bool clustered;
  ty_runtime *rt = run_begin(L, cfg, la, &clustered);
  if (la->fn_kind == LT_FN_HERE) {
    lua_pushvalue(L, 1);
    la->fn_ref = luaL_ref(L, LUA_REGISTRYINDEX); /* start_actor takes it */
  }
  pthread_mutex_lock(&g_main.mu);
  g_here = rt;
  pthread_mutex_unlock(&g_main.mu);
  if (ty_runtime_start_here(rt, 0)) ty__die("tycho.run: cannot start");
  if (ty_spawn_at(rt, 0, la, NULL)) { /* a fresh runtime: cannot be full */
    lt_main_done(false, "tycho.run: cannot spawn main", 28);
    lt_actor_free(la);
  }
  lt_state_borrow(L);
  ty_worker_run_here(rt, 0); /* until main ends (lt_main_done) */
  return run_end(L, rt, clustered);
}

static void check_can_run(lua_State *L) {
  if (ty_worker_current())
    luaL_error(L, "tycho.run: already inside the runtime (use tycho.spawn)");
  if (lt_ctx_get()->rt)
    luaL_error(L, "tycho.run: the runtime is already running");
}

/* Where main was defined, for reports (a spawned function's blob says it:
 * lt_fn_origin). */
static void set_origin(lua_State *L, lt_actor *la) {
  lua_Debug ar;
  char buf[192];
  lua_pushvalue(L, 1);
  if (!lua_getinfo(L, ">S", &ar)) return;
  snprintf(buf, sizeof buf, "%s:%d", ar.short_src, ar.linedefined);
  lt_rare_get(la)->origin = strdup(buf);
}

static int l_run(lua_State *L) {
  check_can_run(L);
  if (lua_isnoneornil(L, 1))
    return luaL_error(L, "tycho.run: bad argument #1 (expected the main "
                         "function or a module name)");
  int t = lua_type(L, 1);
  if (t != LUA_TFUNCTION && t != LUA_TSTRING)
    return luaL_error(L,
                      "tycho.run: bad argument #1 (expected a function or "
                      "a module name, got %s)",
                      luaL_typename(L, 1));
  ty_config cfg;
  run_config(L, &cfg);
  /* A module name is required in the state as a spawn's would be; a
   * function is main itself (its arguments are copied all the same). */
  lt_actor *la = t == LUA_TFUNCTION
                     ? lt_spawn_request_fn(L, NULL, LT_FN_HERE, 2, "run")
                     : lt_spawn_request(L, 1, 2, "run");
  if (!la) return luaL_error(L, "tycho.run: out of memory");
  if (t == LUA_TFUNCTION) set_origin(L, la);
  return run_here(L, &cfg, la);
}

/* _run_file(path, args...): the launcher's main actor is a script file. */
static int l_run_file(lua_State *L) {
  check_can_run(L);
  luaL_checkstring(L, 1);
  ty_config cfg;
  run_config(L, &cfg);
  lt_actor *la = lt_actor_new();
  if (!la) return luaL_error(L, "tycho: out of memory");
  la->fn_kind = LT_FN_FILE;
  ty__buf b;
  ty__buf_init(&b);
  char err[256];
  if (lt_codec_encode(L, 1, lua_gettop(L), &b, SIZE_MAX, err, sizeof err)) {
    ty__buf_free(&b);
    lt_actor_free(la);
    return luaL_error(L, "tycho: %s", err);
  }
  char *args = ty__alloc(b.len);
  memcpy(args, b.data, b.len);
  lt_actor_set_spawn(la, args, b.len);
  ty__buf_free(&b);
  lt_rare_get(la)->origin = strdup(lua_tostring(L, 1));
  return run_main(L, &cfg, la);
}

/* _interrupt(): ask a running tycho.run to stop (signal-safe core). */
void lt_interrupt(void) { g_interrupted = 1; }

void lt_hangup(void) { g_hangup = 1; }

/* shutdown(): begins the graceful stop; true, or false when one is already
 * under way. */
static int l_shutdown(lua_State *L) {
  lt_current(L, "shutdown");
  lua_pushboolean(L, stop_begin(L));
  return 1;
}

/* _stopping() -> whether a graceful stop is under way (a server that
 * closes then drains: lua/tycho/http.lua). */
static int l_stopping(lua_State *L) {
  pthread_mutex_lock(&g_main.mu);
  bool on = g_stop.begun && !g_stop.done;
  pthread_mutex_unlock(&g_main.mu);
  lua_pushboolean(L, on);
  return 1;
}

/* _shutdown_done(ok): the coordinator's report; the run ends. tycho.run
 * returns nil, "shutdown" unless main ended first. */
static int l_shutdown_done(lua_State *L) {
  bool ok = lua_toboolean(L, 1);
  lua_settop(L, 0);
  lua_pushnil(L);
  lua_pushliteral(L, "shutdown");
  ty__buf b;
  ty__buf_init(&b);
  char err[64];
  if (lt_codec_encode(L, 1, 2, &b, SIZE_MAX, err, sizeof err))
    return luaL_error(L, "tycho: %s", err);
  lt_stop_done(ok, (const char *)b.data, b.len);
  ty__buf_free(&b);
  return 0;
}

static int l_running(lua_State *L) {
  lua_pushboolean(L, lt_ctx_get()->rt != NULL);
  return 1;
}

/* _spawn_at(worker, f, ...): spawn on a given worker (1-based), never
 * stolen. For tests that need a known placement; not part of the API. */
static int l_spawn_at(lua_State *L) {
  lt_current(L, "_spawn_at");
  lua_Number w = luaL_checknumber(L, 1);
  unsigned n = ty_runtime_workers(lt_ctx_get()->rt);
  if (w < 1 || w > n || floor(w) != w)
    return luaL_error(L, "tycho._spawn_at: worker must be 1..%d", (int)n);
  lt_actor *la = lt_spawn_request(L, 2, 3, "_spawn_at");
  if (!la) return lt_push_fail(L, "nomem");
  ty_pid pid;
  int err = ty_spawn_at(lt_ctx_get()->rt, (unsigned)w - 1, la, &pid);
  if (err == -EHOSTDOWN) { /* declared stuck: spawn elsewhere, or later */
    if (la->spawn) lt_codec_release(la->spawn, la->spawn_len);
    lt_actor_free(la);
    return lt_push_fail(L, "stuck");
  }
  if (err) {
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

static const luaL_Reg funcs[] = {{"config", l_config},
                                 {"run", l_run},
                                 {"running", l_running},
                                 {"shutdown", l_shutdown},
                                 {"_shutdown_done", l_shutdown_done},
                                 {"_stopping", l_stopping},
                                 {"_run_file", l_run_file},
                                 {"_spawn_at", l_spawn_at},
                                 {"_worker", l_worker},
                                 {NULL, NULL}};

/* TYCHO_DEBUG, TYCHO_LOG and TYCHO_LOG_FORMAT, read once per process
 * (config{} and the launcher's flags come later and win). */
static void log_from_env(void) {
  const char *dbg = getenv("TYCHO_DEBUG");
  if (dbg && *dbg && strcmp(dbg, "0") != 0) lt_ctx_get()->debug = true;
  int lv = ty__log_level_parse(getenv("TYCHO_LOG"));
  const char *f = getenv("TYCHO_LOG_FORMAT");
  bool json = f ? strcmp(f, "json") == 0 : ty__log_json();
  ty__log_set(lv >= 0 ? lv : ty__log_level(), json);
}

static void open_once(void) {
  log_from_env();
  lt_on_state_exit(lt_shared_thread_end);
}

void lt_open_run(lua_State *L) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, open_once);
  luaL_register(L, NULL, funcs);
}
