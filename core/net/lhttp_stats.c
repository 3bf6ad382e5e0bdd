/*
 * lhttp_stats.c - what tycho.observe's /metrics shows of the HTTP servers:
 * responses by status and a latency histogram (from a request complete to
 * its response built), per worker.
 *
 * Each worker thread counts into its own figures (thread-local, no atomics);
 * tycho.observe reads them through an agent on each worker
 * (lua/tycho/observe_agent.lua), so only the owner ever touches them. The
 * clock is the TSC (lt_ticks): two reads per request.
 */
#include <pthread.h>
#include <stdlib.h>

#include "lhttp_impl.h"
#include "lua/lobserve.h"

/* Upper bounds of the buckets, in seconds (the last bucket is +Inf). */
static const double bounds[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                0.1,    0.25,  0.5,    1,     2.5,  5,     10};
#define NB (sizeof bounds / sizeof bounds[0])

typedef struct http_stats {
  uint64_t status[600]; /* by status code (100 .. 599) */
  uint64_t buckets[NB + 1];
  uint64_t count, ticks; /* requests timed, their ticks in all */
} http_stats;

static _Thread_local http_stats *tls_stats;

/* The figures go with their thread (a key's destructor frees them), not
 * with the process: workers end at every stop. */
static pthread_key_t stats_key;
static pthread_once_t stats_once = PTHREAD_ONCE_INIT;
static void make_key(void) { pthread_key_create(&stats_key, free); }

static http_stats *new_stats(void) {
  pthread_once(&stats_once, make_key);
  http_stats *s = calloc(1, sizeof *s);
  if (s && pthread_setspecific(stats_key, s)) {
    free(s);
    return NULL;
  }
  return tls_stats = s;
}

void lt_http_count(hparser *p) {
  http_stats *s = tls_stats;
  if (ty__unlikely(!s)) {
    s = new_stats();
    if (!s) return; /* figures are not worth failing a response for */
  }
  if (p->resp_status >= 100 && p->resp_status < 600)
    s->status[p->resp_status]++;
  if (!p->t_ready) return;
  uint64_t dt = lt_ticks() - p->t_ready;
  p->t_ready = 0;
  s->count++;
  s->ticks += dt;
  double sec = (double)lt_ticks_ns(dt) * 1e-9;
  size_t i = 0;
  while (i < NB && sec > bounds[i]) i++;
  s->buckets[i]++;
}

/* stats() -> {status = {["200"] = n, ...}, bounds = {...}, buckets = {n per
 * bucket, not cumulative, without +Inf}, sum = seconds, count = n} | nil. */
int lt_http_stats(lua_State *L) {
  http_stats *s = tls_stats;
  if (!s) return 0;
  lua_createtable(L, 0, 5);
  lua_newtable(L);
  for (int st = 100; st < 600; st++) {
    if (!s->status[st]) continue;
    lua_pushfstring(L, "%d", st);
    lua_pushnumber(L, (lua_Number)s->status[st]);
    lua_rawset(L, -3);
  }
  lua_setfield(L, -2, "status");
  lua_createtable(L, NB, 0);
  lua_createtable(L, NB, 0);
  for (size_t i = 0; i < NB; i++) {
    lua_pushnumber(L, bounds[i]);
    lua_rawseti(L, -3, (int)i + 1);
    lua_pushnumber(L, (lua_Number)s->buckets[i]);
    lua_rawseti(L, -2, (int)i + 1);
  }
  lua_setfield(L, -3, "buckets");
  lua_setfield(L, -2, "bounds");
  lua_pushnumber(L, (lua_Number)lt_ticks_ns(s->ticks) * 1e-9);
  lua_setfield(L, -2, "sum");
  lua_pushnumber(L, (lua_Number)s->count);
  lua_setfield(L, -2, "count");
  return 1;
}
