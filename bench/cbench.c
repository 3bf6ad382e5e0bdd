/*
 * cbench.c - the workload suite with actors written in C (no Lua): the
 * scheduler's own speed. Usage: cbench <workload>; prints the peers' format:
 *   RESULT <value> <unit>
 *   DETAIL key=value ...
 * bench/run.sh runs each several times and prints medians as
 *   tycho-c <workload>: <value> <unit>
 * Workloads are defined in docs/benchmarks.md: spawn pingpong ring skew
 * timers. Every workload runs inside a root actor, like the peers' suites.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "io/io.h"
#include "sched/ty.h"

#define SPAWN_N 100000
#define PINGPONG_N 1000000L
#define RING_N 1000
#define RING_HOPS 1000000L
#define SKEW_JOBS 10000
#define SKEW_K 600
#define TIMERS_N 100000
#define SEED 2463534242u

typedef struct cact cact;
typedef int (*step_fn)(ty_actor *a, cact *c);
struct cact {
  step_fn step;
  long i;
  long n;
  ty_pid peer;
  uint64_t t;
};

static ty_runtime *g_rt;
static _Atomic long g_left;
static _Atomic int g_finished;
static ty_pid g_root;

static int c_resume(ty_actor *a, void *ud) {
  (void)ud;
  cact *c = a->user;
  return c->step(a, c);
}
static void c_destroy(ty_actor *a, ty_worker *w, void *ud) {
  (void)w;
  (void)ud;
  free(a->user);
}
static const ty_actor_ops ops = {.resume = c_resume, .destroy = c_destroy};

static double now_s(void) { return ty__now_ns() * 1e-9; }
static double cpu_s(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + ru.ru_stime.tv_sec +
         ru.ru_stime.tv_usec * 1e-6;
}

static ty_pid spawn(step_fn f, long i, long n) {
  cact *c = calloc(1, sizeof *c);
  c->step = f;
  c->i = i;
  c->n = n;
  ty_pid pid;
  if (ty_spawn(g_rt, c, &pid)) abort();
  return pid;
}

static void send_long(ty_pid to, long v) {
  ty_msg *m = ty_msg_new(sizeof v);
  memcpy(m->data, &v, sizeof v);
  m->to = to;
  if (ty_send(g_rt, m)) abort();
}

static long recv_long(ty_actor *a, bool *got) {
  ty_msg *m = ty_mbox_pop(a);
  *got = m != NULL;
  if (!m) return 0;
  long v;
  memcpy(&v, m->data, sizeof v);
  ty_msg_free(m);
  return v;
}

static void done_one(void) {
  if (atomic_fetch_sub(&g_left, 1) == 1) send_long(g_root, 0);
}

static int wait_msg(ty_actor *a) {
  ty_actor_wait(a, -1, 0);
  return TY_WAIT;
}

static uint32_t xorshift32(uint32_t x) {
  x ^= x << 13;
  x ^= x >> 17;
  x ^= x << 5;
  return x;
}

/* ---- spawn ------------------------------------------------------------- */

static int spawn_child(ty_actor *a, cact *c) {
  (void)a;
  (void)c;
  done_one();
  return TY_DONE;
}

static int spawn_root(ty_actor *a, cact *c) {
  bool got;
  if (!c->t) {
    g_root = a->pid;
    atomic_store(&g_left, SPAWN_N);
    c->t = ty__now_ns();
    for (long i = 0; i < SPAWN_N; i++) spawn(spawn_child, i, 0);
    return wait_msg(a);
  }
  recv_long(a, &got);
  if (!got) return wait_msg(a);
  double dt = (ty__now_ns() - c->t) * 1e-9;
  printf("RESULT %.3f spawns/s\n", SPAWN_N / dt);
  printf("DETAIL wall_s=%.4f\n", dt);
  return TY_DONE;
}

/* ---- pingpong ---------------------------------------------------------- */

static int pong(ty_actor *a, cact *c) {
  bool got;
  for (;;) {
    long v = recv_long(a, &got);
    if (!got) return wait_msg(a);
    send_long(c->peer, v);
    if (v == 0) return TY_DONE;
  }
}

static int ping(ty_actor *a, cact *c) {
  bool got;
  if (!c->t) {
    cact *p = calloc(1, sizeof *p);
    p->step = pong;
    p->peer = a->pid;
    if (ty_spawn(g_rt, p, &c->peer)) abort();
    c->t = ty__now_ns();
    c->n = PINGPONG_N;
    send_long(c->peer, --c->n);
    return wait_msg(a);
  }
  for (;;) {
    long v = recv_long(a, &got);
    if (!got) return wait_msg(a);
    if (v == 0) break;
    send_long(c->peer, --c->n);
  }
  double dt = (ty__now_ns() - c->t) * 1e-9;
  printf("RESULT %.3f roundtrips/s\n", PINGPONG_N / dt);
  printf("DETAIL wall_s=%.4f\n", dt);
  return TY_DONE;
}

/* ---- ring -------------------------------------------------------------- */

static ty_pid g_ring[RING_N];

static int ring_node(ty_actor *a, cact *c) {
  bool got;
  for (;;) {
    long v = recv_long(a, &got);
    if (!got) return wait_msg(a);
    if (v < 0) return TY_DONE;
    if (v == 0) {
      send_long(g_root, 0);
      continue;
    }
    send_long(g_ring[(c->i + 1) % RING_N], v - 1);
  }
}

static int ring_root(ty_actor *a, cact *c) {
  bool got;
  if (!c->t) {
    g_root = a->pid;
    for (long i = 0; i < RING_N; i++) g_ring[i] = spawn(ring_node, i, 0);
    c->t = ty__now_ns();
    send_long(g_ring[0], RING_HOPS);
    return wait_msg(a);
  }
  recv_long(a, &got);
  if (!got) return wait_msg(a);
  double dt = (ty__now_ns() - c->t) * 1e-9;
  for (long i = 0; i < RING_N; i++) send_long(g_ring[i], -1);
  printf("RESULT %.3f hops/s\n", RING_HOPS / dt);
  printf("DETAIL wall_s=%.4f\n", dt);
  return TY_DONE;
}

/* ---- skew -------------------------------------------------------------- */

static _Atomic uint64_t g_sum;

static __attribute__((noinline)) uint32_t burn(long n, uint32_t x) {
  for (long i = 0; i < n; i++) x = xorshift32(x);
  __asm__ volatile("" : "+r"(x));
  return x;
}

static int skew_job(ty_actor *a, cact *c) {
  (void)a;
  uint32_t r = burn((c->i % 100) * SKEW_K, (uint32_t)(c->i + 1));
  atomic_fetch_add_explicit(&g_sum, r, memory_order_relaxed);
  done_one();
  return TY_DONE;
}

static int skew_root(ty_actor *a, cact *c) {
  bool got;
  if (!c->t) {
    uint64_t seq_sum = 0;
    double t0 = now_s();
    for (long i = 0; i < SKEW_JOBS; i++)
      seq_sum += burn((i % 100) * SKEW_K, (uint32_t)(i + 1));
    c->n = (long)((now_s() - t0) * 1e9);
    c->peer = seq_sum;
    g_root = a->pid;
    atomic_store(&g_left, SKEW_JOBS);
    c->t = ty__now_ns();
    for (long i = 0; i < SKEW_JOBS; i++) spawn(skew_job, i, 0);
    return wait_msg(a);
  }
  recv_long(a, &got);
  if (!got) return wait_msg(a);
  double wall = (ty__now_ns() - c->t) * 1e-9, seq = c->n * 1e-9;
  if (atomic_load(&g_sum) != c->peer) printf("NOTE checksum mismatch\n");
  printf("RESULT %.4f s\n", wall);
  printf("DETAIL ideal_s=%.4f seq_s=%.4f efficiency=%.1f%% checksum=%llu\n",
         seq / 2, seq, 100 * (seq / 2) / wall,
         (unsigned long long)atomic_load(&g_sum));
  return TY_DONE;
}

/* ---- timers ------------------------------------------------------------ */

static _Atomic uint64_t g_late_sum_ns, g_late_max_ns;

static int sleeper(ty_actor *a, cact *c) {
  if (!c->t) {
    c->t = ty_runtime_now_ns(g_rt);
    ty_actor_wait(a, c->n * 1000000, UINT64_MAX);
    return TY_WAIT;
  }
  uint64_t late = ty_runtime_now_ns(g_rt) - c->t - (uint64_t)c->n * 1000000;
  atomic_fetch_add_explicit(&g_late_sum_ns, late, memory_order_relaxed);
  uint64_t cur = atomic_load_explicit(&g_late_max_ns, memory_order_relaxed);
  while (late > cur &&
         !atomic_compare_exchange_weak(&g_late_max_ns, &cur, late)) {
  }
  done_one();
  return TY_DONE;
}

static int timers_root(ty_actor *a, cact *c) {
  bool got;
  if (!c->t) {
    g_root = a->pid;
    atomic_store(&g_left, TIMERS_N);
    c->t = ty__now_ns();
    uint32_t x = SEED;
    for (long i = 0; i < TIMERS_N; i++) {
      x = xorshift32(x);
      spawn(sleeper, i, x % 1000);
    }
    c->n = (long)(ty__now_ns() - c->t);
    return wait_msg(a);
  }
  recv_long(a, &got);
  if (!got) return wait_msg(a);
  double wall = (ty__now_ns() - c->t) * 1e-9;
  printf("RESULT %.4f s\n", wall);
  printf("DETAIL late_mean_ms=%.3f late_max_ms=%.3f spawn_phase_s=%.4f\n",
         atomic_load(&g_late_sum_ns) / 1e6 / TIMERS_N,
         atomic_load(&g_late_max_ns) / 1e6, c->n * 1e-9);
  return TY_DONE;
}

/* ---- main -------------------------------------------------------------- */

static step_fn g_main_step;
static int root(ty_actor *a, cact *c) {
  int r = g_main_step(a, c);
  if (r == TY_DONE) atomic_store(&g_finished, 1);
  return r;
}

int main(int argc, char **argv) {
  static const struct {
    const char *name;
    step_fn fn;
  } w[] = {{"spawn", spawn_root},
           {"pingpong", ping},
           {"ring", ring_root},
           {"skew", skew_root},
           {"timers", timers_root}};
  if (argc < 2) {
    fprintf(stderr, "usage: cbench spawn|pingpong|ring|skew|timers\n");
    return 2;
  }
  for (size_t i = 0; i < sizeof w / sizeof w[0]; i++) {
    if (strcmp(argv[1], w[i].name)) continue;
    ty_config cfg;
    ty_config_init(&cfg);
    const char *env = getenv("WORKERS");
    cfg.workers = env ? (unsigned)atoi(env) : 2;
    /* TYCHO_IO=epoll as for the launcher: valgrind (the instruction counts
     * of docs/performance.md) cannot follow a worker parked in io_uring. */
    const char *io = getenv("TYCHO_IO");
    if (io && (cfg.io = ty__io_kind_parse(io)) < 0) return 2;
    if (ty_runtime_new(&cfg, &ops, NULL, &g_rt)) return 1;
    g_main_step = w[i].fn;
    double c0 = cpu_s();
    ty_runtime_start(g_rt);
    cact *c = calloc(1, sizeof *c);
    c->step = root;
    ty_spawn(g_rt, c, NULL);
    while (!atomic_load(&g_finished)) usleep(1000);
    printf("DETAIL cpu_s=%.4f\n", cpu_s() - c0);
    for (unsigned k = 0; getenv("STATS") && k < cfg.workers; k++) {
      ty_worker_stats s;
      ty_worker_stats_get(g_rt, k, &s);
      printf("# worker %u: polls=%llu lifo=%llu steals=%llu stolen=%llu "
             "parks=%llu "
             "unparks=%llu mesh_sent=%llu mesh_recv=%llu inject=%llu "
             "placed=%llu remote=%llu\n",
             k, (unsigned long long)s.polls, (unsigned long long)s.lifo_hits,
             (unsigned long long)s.steals, (unsigned long long)s.stolen,
             (unsigned long long)s.parks, (unsigned long long)s.unparks,
             (unsigned long long)s.mesh_sent,
             (unsigned long long)s.mesh_received,
             (unsigned long long)s.inject_pops,
             (unsigned long long)s.spawns_placed,
             (unsigned long long)s.spawns_remote);
    }
    fflush(stdout);
    ty_runtime_stop(g_rt);
    ty_runtime_free(g_rt);
    return 0;
  }
  fprintf(stderr, "cbench: unknown workload %s\n", argv[1]);
  return 2;
}
