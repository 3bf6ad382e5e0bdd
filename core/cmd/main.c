/*
 * main.c - the `tycho` launcher: runs a Lua script as the main actor.
 *
 *   tycho [--workers N] [--io uring|epoll] [--node NAME --nats URL
 *         [--cluster NAME]] [--observe HOST:PORT] script.lua [args...]
 *   tycho top [HOST:PORT]     a live view of a node's tycho.observe endpoint
 *
 * It embeds LuaJIT and this copy of the core, and finds tycho's Lua modules
 * relative to its own location: <prefix>/share/lua/5.1 when installed as
 * <prefix>/bin/tycho, or the source tree's lua/ when run from build/bin.
 */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <lauxlib.h>
#include <luajit.h>
#include <lualib.h>

#include "base/log.h"
#include "cluster/lcluster.h"
#include "io/io.h"
#include "lua/lrun.h"
#include "module.h"

static volatile sig_atomic_t g_signal;
static struct timespec g_signal_at; /* when g_signal was first taken */

/* A duplicate delivery of the signal that began the stop: the same signal
 * within 1 s, unless a terminal sent it (README, "What counts as a second
 * signal"). GNU timeout sends SIGTERM to its child and again to its process
 * group, systemd to the main process and again to its cgroup, a shell's
 * `kill -- -PGID` reaches every process of the group: one request, delivered
 * twice microseconds apart. A key press on a terminal (si_code SI_KERNEL) is
 * always a person's new request. clock_gettime is async-signal-safe. */
static bool duplicate(int sig, const siginfo_t *si) {
  if (sig != g_signal || (si && si->si_code == SI_KERNEL)) return false;
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  long long ns = (now.tv_sec - g_signal_at.tv_sec) * 1000000000LL +
                 (now.tv_nsec - g_signal_at.tv_nsec);
  return ns < 1000000000LL;
}

/* The first SIGINT/SIGTERM begins the graceful stop (README, "Graceful
 * stop"): the launcher then exits 0, or 1 when actors asked to stop did not
 * end within --shutdown-timeout. A second one exits at once; a duplicate
 * delivery of the first is not a second one. */
static void on_signal(int sig, siginfo_t *si, void *uc) {
  (void)uc;
  if (g_signal) {
    if (duplicate(sig, si)) return;
    _exit(128 + sig); /* the stop has its deadline anyway */
  }
  clock_gettime(CLOCK_MONOTONIC, &g_signal_at);
  g_signal = sig;
  lt_interrupt();
}

/* SIGHUP: reload the modules whose files changed (lt_hangup). */
static void on_hangup(int sig) {
  (void)sig;
  lt_hangup();
}

/* SIGINT and SIGTERM begin the stop (each blocked while the other's handler
 * runs, so that g_signal and its time are set once), SIGHUP reloads,
 * SIGPIPE is ignored. SA_RESTART: the signal lands on any thread, a worker
 * too, where an actor's read of a pipe must not fail with EINTR for it. */
static void install_signals(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_signal;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaddset(&sa.sa_mask, SIGINT);
  sigaddset(&sa.sa_mask, SIGTERM);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_hangup;
  sa.sa_flags = SA_RESTART;
  sigaction(SIGHUP, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: tycho [options] script.lua [args...]\n"
          "       tycho top [host:port]\n"
          "Runs script.lua as the main actor of a tycho runtime; `top` shows\n"
          "a node's workers and busiest actors (its --observe endpoint).\n\n"
          "options:\n"
          "  --workers N     worker threads (default: one per CPU, or "
          "TYCHO_WORKERS)\n"
          "  --io KIND       I/O backend: uring or epoll (default: uring when "
          "available, or TYCHO_IO)\n"
          "  --log-level L   debug, info, warn, error or off (default: info, "
          "or TYCHO_LOG)\n"
          "  --log-format F  text or json (default: text, or "
          "TYCHO_LOG_FORMAT)\n"
          "  --max-slice S   seconds an actor may run without waiting before "
          "it is\n"
          "                  stopped (default 1; 0: never)\n"
          "  --stop-timeout S  seconds a stop waits for running code "
          "(default 5)\n"
          "  --shutdown-timeout S  seconds a graceful stop (SIGTERM) waits "
          "for actors (default 10)\n"
          "  --node NAME     join a cluster as this node (or TYCHO_NODE)\n"
          "  --nats URL      its NATS server(s) (default: "
          "nats://127.0.0.1:4222, or TYCHO_NATS)\n"
          "  --cluster NAME  the cluster (default: tycho, or "
          "TYCHO_CLUSTER)\n"
          "  --observe ADDR  serve /metrics and /processes at host:port "
          "(tycho.observe)\n"
          "  --observe-token T  ask for \"Authorization: Bearer T\" there (or "
          "TYCHO_OBSERVE_TOKEN)\n"
          "  --version       print the version and exit\n"
          "  --help          print this help and exit\n");
}

static bool file_exists(const char *p) { return access(p, R_OK) == 0; }

/* Prepends tycho's module directories to package.path / package.cpath. */
static void set_paths(lua_State *L) {
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return;
  exe[n] = 0;
  char *slash = strrchr(exe, '/');
  if (!slash) return;
  *slash = 0; /* exe is now the binary's directory */
  char probe[PATH_MAX + 64], path[3 * PATH_MAX + 256], cpath[PATH_MAX + 64];
  /* An installed tree first (a rock tree may sit inside a checkout), then
   * the source tree's lua/ when run as build/bin/tycho. */
  snprintf(probe, sizeof probe, "%s/../share/lua/5.1/tycho/init.lua", exe);
  bool installed = file_exists(probe);
  snprintf(probe, sizeof probe, "%s/../../lua/tycho/init.lua", exe);
  if (!installed && file_exists(probe)) {
    snprintf(path, sizeof path, "%s/../../lua/?.lua;%s/../../lua/?/init.lua;",
             exe, exe);
    snprintf(cpath, sizeof cpath, "%s/../lib/?.so;", exe);
  } else {
    snprintf(path, sizeof path,
             "%s/../share/lua/5.1/?.lua;%s/../share/lua/5.1/?/init.lua;", exe,
             exe);
    snprintf(cpath, sizeof cpath, "%s/../lib/lua/5.1/?.so;", exe);
  }
  lua_getglobal(L, "package");
  lua_getfield(L, -1, "path");
  lua_pushstring(L, path);
  lua_insert(L, -2);
  lua_concat(L, 2);
  lua_setfield(L, -2, "path");
  lua_getfield(L, -1, "cpath");
  lua_pushstring(L, cpath);
  lua_insert(L, -2);
  lua_concat(L, 2);
  lua_setfield(L, -2, "cpath");
  lua_getfield(L, -1, "preload");
  lua_pushcfunction(L, luaopen_tycho_core);
  lua_setfield(L, -2, "tycho.core");
  lua_pop(L, 2);
}

static int parse_workers(const char *s) {
  char *end;
  long v = strtol(s, &end, 10);
  if (!*s || *end || v < 1 || v > TY_MAX_WORKERS) {
    fprintf(stderr,
            "tycho: --workers wants an integer from 1 to %d, not "
            "'%s'\n",
            TY_MAX_WORKERS, s);
    exit(2);
  }
  return (int)v;
}

static int parse_io(const char *s) {
  int kind = ty__io_kind_parse(s);
  if (kind < 0) {
    fprintf(stderr, "tycho: --io wants uring, epoll or auto, not '%s'\n", s);
    exit(2);
  }
  return kind;
}

static int parse_level(const char *s) {
  int lv = ty__log_level_parse(s);
  if (lv < 0) {
    fprintf(stderr,
            "tycho: --log-level wants debug, info, warn, error or "
            "off, not '%s'\n",
            s);
    exit(2);
  }
  return lv;
}

static double parse_seconds(const char *opt, const char *s, double min) {
  char *end;
  double v = strtod(s, &end);
  if (!*s || *end || !(v >= min || v == 0)) {
    fprintf(stderr, "tycho: %s wants seconds (>= %g, or 0), not '%s'\n", opt,
            min, s);
    exit(2);
  }
  return v;
}

static void cluster_option(const char *key, const char *value) {
  const char *bad = lc_set_option(key, value);
  if (bad) {
    fprintf(stderr, "tycho: --%s: %s, not '%s'\n", key, bad, value);
    exit(2);
  }
}

static int parse_format(const char *s) {
  if (strcmp(s, "text") && strcmp(s, "json")) {
    fprintf(stderr, "tycho: --log-format wants text or json, not '%s'\n", s);
    exit(2);
  }
  return strcmp(s, "json") == 0;
}

/* Flushes stdout and stderr unless a thread left behind holds one of them:
 * fflush(NULL) would wait for its lock forever (an actor in io.read on
 * stdin, or writing to a pipe nobody reads, holds that stream's lock for
 * the whole call), and other streams are that thread's to flush. */
static void flush_std(void) {
  FILE *std[] = {stdout, stderr};
  for (size_t i = 0; i < 2; i++) {
    if (ftrylockfile(std[i])) continue;
    fflush_unlocked(std[i]);
    funlockfile(std[i]);
  }
}

int main(int argc, char **argv) {
  int i = 1, log_level = -1, log_json = -1;
  for (; i < argc && argv[i][0] == '-'; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--version")) {
      printf("tycho %s (%s)\n", TYCHO_VERSION, LUAJIT_VERSION);
      return 0;
    } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      return 0;
    } else if (!strcmp(a, "--workers") && i + 1 < argc) {
      lt_ctx_get()->workers = (unsigned)parse_workers(argv[++i]);
    } else if (!strncmp(a, "--workers=", 10)) {
      lt_ctx_get()->workers = (unsigned)parse_workers(a + 10);
    } else if (!strcmp(a, "--io") && i + 1 < argc) {
      lt_ctx_get()->io = parse_io(argv[++i]);
    } else if (!strncmp(a, "--io=", 5)) {
      lt_ctx_get()->io = parse_io(a + 5);
    } else if (!strcmp(a, "--log-level") && i + 1 < argc) {
      log_level = parse_level(argv[++i]);
    } else if (!strncmp(a, "--log-level=", 12)) {
      log_level = parse_level(a + 12);
    } else if (!strcmp(a, "--log-format") && i + 1 < argc) {
      log_json = parse_format(argv[++i]);
    } else if (!strncmp(a, "--log-format=", 13)) {
      log_json = parse_format(a + 13);
    } else if (!strcmp(a, "--max-slice") && i + 1 < argc) {
      lt_ctx_get()->max_slice = parse_seconds(a, argv[++i], 0.01);
    } else if (!strcmp(a, "--stop-timeout") && i + 1 < argc) {
      lt_ctx_get()->stop_timeout = parse_seconds(a, argv[++i], 0);
    } else if (!strcmp(a, "--shutdown-timeout") && i + 1 < argc) {
      lt_ctx_get()->shutdown_timeout = parse_seconds(a, argv[++i], 0);
    } else if ((!strcmp(a, "--node") || !strcmp(a, "--nats") ||
                !strcmp(a, "--cluster")) &&
               i + 1 < argc) {
      cluster_option(a + 2, argv[++i]);
    } else if (!strncmp(a, "--node=", 7) || !strncmp(a, "--nats=", 7)) {
      char key[8];
      memcpy(key, a + 2, 4);
      key[4] = 0;
      cluster_option(key, a + 7);
    } else if (!strncmp(a, "--cluster=", 10)) {
      cluster_option("cluster", a + 10);
    } else if (!strcmp(a, "--observe") && i + 1 < argc) {
      lt_ctx_get()->observe = argv[++i];
    } else if (!strncmp(a, "--observe=", 10)) {
      lt_ctx_get()->observe = a + 10;
    } else if (!strcmp(a, "--observe-token") && i + 1 < argc) {
      /* The launcher's helper reads it there (lua/tycho/launch.lua); no
       * thread runs yet, so setenv is safe. */
      setenv("TYCHO_OBSERVE_TOKEN", argv[++i], 1);
    } else if (!strncmp(a, "--observe-token=", 16)) {
      setenv("TYCHO_OBSERVE_TOKEN", a + 16, 1);
    } else if (!strcmp(a, "--")) {
      i++;
      break;
    } else {
      fprintf(stderr, "tycho: unknown option '%s'\n", a);
      usage(stderr);
      return 2;
    }
  }
  if (i >= argc) {
    usage(stderr);
    return 2;
  }
  lt_ctx_get()->argc = argc - i;
  lt_ctx_get()->argv = argv + i;
  lt_ctx_get()->opener = luaopen_tycho_core;

  install_signals();

  lua_State *L = luaL_newstate();
  luaL_openlibs(L);
  set_paths(L);
  lua_getglobal(L, "require");
  lua_pushliteral(L, "tycho.core");
  if (lua_pcall(L, 1, 1, 0)) {
    fprintf(stderr, "tycho: %s\n", lua_tostring(L, -1));
    return 1;
  }
  if (log_level >= 0 || log_json >= 0) /* over TYCHO_LOG, read at require */
    ty__log_set(log_level >= 0 ? log_level : ty__log_level(),
                log_json >= 0 ? log_json : ty__log_json());
  lua_getfield(L, -1, "_run_file");
  int first = i;
  if (!strcmp(argv[i], "top") && !file_exists(argv[i])) {
    /* `tycho top`: the script is lua/tycho/top.lua, found as a module. */
    lua_getglobal(L, "package");
    lua_getfield(L, -1, "searchpath");
    lua_pushliteral(L, "tycho.top");
    lua_getfield(L, -3, "path");
    lua_call(L, 2, 1);
    if (!lua_isstring(L, -1)) {
      fprintf(stderr, "tycho: top: lua/tycho/top.lua not found\n");
      return 1;
    }
    lua_remove(L, -2); /* package */
    first = i + 1;
  }
  for (int k = first; k < argc; k++) lua_pushstring(L, argv[k]);
  int status = 0;
  if (lua_pcall(L, argc - first + (first != i), 0, 0)) {
    fprintf(stderr, "tycho: %s\n", lua_tostring(L, -1));
    status = 1;
  } else if (lt_stop_failed()) {
    status = 1; /* the coordinator named the actors left on stderr */
  }
  lua_close(L);
  ty__log_flush(2000);
  if (lt_ctx_get()->left_behind) {
    /* A thread still runs code that never returns (README, "Runaway
     * actors"): exit without the atexit work (leak checkers would walk
     * memory that thread still owns). */
    flush_std();
    _exit(status);
  }
  return status;
}
