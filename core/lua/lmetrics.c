/*
 * lmetrics.c - tycho.metrics' C half: the registry of application metrics
 * and their values, read at scrape into /metrics (lua/tycho/metrics.lua has
 * the API; DESIGN.md §7, "Metrics").
 *
 * Values live in slots (doubles). A counter's or a histogram's slots are
 * per Lua state: each state that uses metrics owns a shard (pages of
 * slots) that only its own thread writes, with plain stores from compiled
 * Lua (an FFI pointer: the hot path is one load and one store, no atomic,
 * no shared cache line). A scrape sums a slot over every shard. A gauge's
 * slot is one for the process: set is a plain store (the last write wins,
 * as it would on one thread), inc/dec an atomic add.
 *
 * Slots are 8-byte aligned doubles: a plain store of one is single-copy
 * atomic on the machines tycho runs on (x86-64, aarch64), so a scrape
 * reads a value some write left, never a torn one; it reads them relaxed.
 *
 * The registry is per run, like a node's life (lt_metrics_run_end): slot
 * numbers keep growing across runs, so a handle kept from an earlier run
 * writes where no series of this one reads (metrics.lua re-declares its
 * metrics when it sees the generation move).
 */
#include <lauxlib.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/common.h"
#include "lmetrics.h"

#define PAGE_SLOTS 4096
#define NPAGES 1024 /* 4M slots */
#define MAX_LABELS 16
#define MAX_BUCKETS 64

typedef struct shard {
  struct shard *next;
  /* Written under g_mu (release: the zeroed page before its pointer),
   * read by scrapes (acquire) and by the owner's ptr lookups. */
  _Atomic(double *) pages[NPAGES];
  bool in_use; /* under g_mu */
} shard;

typedef struct series {
  struct series *next;
  uint32_t slot;
  char *key; /* the label values, each followed by a NUL */
  size_t keylen;
} series;

typedef struct metric {
  struct metric *next;
  char *name, *help;
  int type; /* 0 counter, 1 gauge, 2 histogram */
  int nlabels, nbounds;
  char *labels[MAX_LABELS];
  double bounds[MAX_BUCKETS];
  int max_series, nseries;
  uint32_t id;
  series *first, *last;
} metric;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static metric *g_metrics, *g_metrics_last; /* under g_mu */
static uint32_t g_nmetrics;                /* under g_mu */
static uint32_t g_next_slot;               /* under g_mu, never reset */
static shard *g_shards;                    /* under g_mu */
static shard g_gauges;                     /* the gauges' slots */
/* The run's generation, read through an FFI pointer by every metric use
 * (metrics.lua). Written at a run's end, when no actor runs; the next
 * run's threads are created after it. */
static volatile uint32_t g_gen = 1;

static const char *TYPES[] = {"counter", "gauge", "histogram"};

static void free_metric(metric *m) {
  for (series *s = m->first, *nx; s; s = nx) {
    nx = s->next;
    free(s->key);
    free(s);
  }
  for (int i = 0; i < m->nlabels; i++) free(m->labels[i]);
  free(m->name);
  free(m->help);
  free(m);
}

void lt_metrics_run_end(void) {
  pthread_mutex_lock(&g_mu);
  for (metric *m = g_metrics, *nx; m; m = nx) {
    nx = m->next;
    free_metric(m);
  }
  g_metrics = g_metrics_last = NULL;
  g_nmetrics = 0;
  g_gen++;
  pthread_mutex_unlock(&g_mu);
}

/* Under g_mu: the page of slot in s, allocated when missing. */
static double *slot_ptr(shard *s, uint32_t slot) {
  uint32_t pg = slot / PAGE_SLOTS;
  double *p = atomic_load_explicit(&s->pages[pg], memory_order_acquire);
  if (!p) {
    p = calloc(PAGE_SLOTS, sizeof *p);
    if (!p) return NULL;
    atomic_store_explicit(&s->pages[pg], p, memory_order_release);
  }
  return p + slot % PAGE_SLOTS;
}

static double read_slot(shard *s, uint32_t slot) {
  double *p =
      atomic_load_explicit(&s->pages[slot / PAGE_SLOTS], memory_order_acquire);
  if (!p) return 0;
  uint64_t bits = __atomic_load_n((uint64_t *)(p + slot % PAGE_SLOTS),
                                  __ATOMIC_RELAXED); /* see the top */
  double d;
  memcpy(&d, &bits, sizeof d);
  return d;
}

/* ---- declaring ------------------------------------------------------------ */

static metric *find_metric(const char *name) {
  for (metric *m = g_metrics; m; m = m->next)
    if (strcmp(m->name, name) == 0) return m;
  return NULL;
}

static bool same_shape(const metric *m, int type, int nl, char **labels, int nb,
                       const double *bounds) {
  if (m->type != type || m->nlabels != nl || m->nbounds != nb) return false;
  for (int i = 0; i < nl; i++)
    if (strcmp(m->labels[i], labels[i])) return false;
  for (int i = 0; i < nb; i++)
    if (m->bounds[i] != bounds[i]) return false;
  return true;
}

/* _metrics_declare(name, type, {labels}, {bounds} | nil, max_series, help)
 * -> id, gen. Names were checked by metrics.lua; this checks that a name
 * declared again has the same type, labels and buckets. */
static int l_declare(lua_State *L) {
  const char *name = luaL_checkstring(L, 1);
  int type = (int)luaL_checkinteger(L, 2);
  luaL_checktype(L, 3, LUA_TTABLE);
  int nl = (int)lua_objlen(L, 3), nb = 0;
  if (nl > MAX_LABELS)
    return luaL_error(L, "tycho.metrics: %s: more than %d labels", name,
                      MAX_LABELS);
  char *labels[MAX_LABELS];
  double bounds[MAX_BUCKETS];
  for (int i = 0; i < nl; i++) {
    lua_rawgeti(L, 3, i + 1);
    labels[i] = (char *)luaL_checkstring(L, -1);
    lua_pop(L, 1);
  }
  if (lua_istable(L, 4)) {
    nb = (int)lua_objlen(L, 4);
    if (nb > MAX_BUCKETS)
      return luaL_error(L, "tycho.metrics: %s: more than %d buckets", name,
                        MAX_BUCKETS);
    for (int i = 0; i < nb; i++) {
      lua_rawgeti(L, 4, i + 1);
      bounds[i] = luaL_checknumber(L, -1);
      lua_pop(L, 1);
    }
  }
  int max_series = (int)luaL_checkinteger(L, 5);
  const char *help = luaL_optstring(L, 6, NULL);
  pthread_mutex_lock(&g_mu);
  metric *m = find_metric(name);
  if (m) {
    bool same = same_shape(m, type, nl, labels, nb, bounds);
    uint32_t id = m->id;
    int was = m->type;
    pthread_mutex_unlock(&g_mu);
    if (!same)
      return luaL_error(L,
                        "tycho.metrics: %s is declared already (a %s) with "
                        "other labels, type or buckets",
                        name, TYPES[was]);
    lua_pushnumber(L, id);
    lua_pushnumber(L, g_gen);
    return 2;
  }
  m = calloc(1, sizeof *m);
  if (!m || !(m->name = strdup(name)) || (help && !(m->help = strdup(help)))) {
    if (m) free(m->name);
    free(m);
    pthread_mutex_unlock(&g_mu);
    return luaL_error(L, "tycho.metrics: out of memory");
  }
  m->type = type;
  m->nlabels = nl;
  m->nbounds = nb;
  m->max_series = max_series;
  for (int i = 0; i < nl; i++) m->labels[i] = strdup(labels[i]);
  memcpy(m->bounds, bounds, sizeof(double) * (size_t)nb);
  m->id = ++g_nmetrics;
  if (g_metrics_last) g_metrics_last->next = m;
  else g_metrics = m;
  g_metrics_last = m;
  pthread_mutex_unlock(&g_mu);
  lua_pushnumber(L, m->id);
  lua_pushnumber(L, g_gen);
  return 2;
}

static metric *by_id(uint32_t id) {
  for (metric *m = g_metrics; m; m = m->next)
    if (m->id == id) return m;
  return NULL;
}

static int slots_of(const metric *m) {
  return m->type == 2 ? m->nbounds + 2 : 1; /* buckets, +Inf, sum */
}

/* _metrics_series(id, gen, key) -> first slot. key: the label values,
 * each followed by a NUL. Raises past the metric's cardinality limit. */
static int l_series(lua_State *L) {
  uint32_t id = (uint32_t)luaL_checknumber(L, 1);
  uint32_t gen = (uint32_t)luaL_checknumber(L, 2);
  size_t klen;
  const char *key = luaL_checklstring(L, 3, &klen);
  pthread_mutex_lock(&g_mu);
  metric *m = gen == g_gen ? by_id(id) : NULL;
  if (!m) {
    pthread_mutex_unlock(&g_mu);
    return luaL_error(L, "tycho.metrics: a metric of an earlier run");
  }
  series *s = m->first;
  while (s && (s->keylen != klen || memcmp(s->key, key, klen))) s = s->next;
  if (!s) {
    int n = slots_of(m);
    if (m->nseries >= m->max_series) {
      int max = m->max_series;
      char name[256];
      snprintf(name, sizeof name, "%s", m->name);
      pthread_mutex_unlock(&g_mu);
      return luaL_error(L,
                        "tycho.metrics: %s: more than %d label sets "
                        "(the cardinality limit: a label takes unbounded "
                        "values? else raise it with {max_series = n})",
                        name, max);
    }
    if (g_next_slot + (uint32_t)n > (uint32_t)PAGE_SLOTS * NPAGES ||
        !(s = calloc(1, sizeof *s)) || !(s->key = malloc(klen + 1))) {
      free(s);
      pthread_mutex_unlock(&g_mu);
      return luaL_error(L, "tycho.metrics: out of slots or memory");
    }
    /* a histogram's slots stay on one page */
    if (g_next_slot / PAGE_SLOTS !=
        (g_next_slot + (uint32_t)n - 1) / PAGE_SLOTS)
      g_next_slot = (g_next_slot / PAGE_SLOTS + 1) * PAGE_SLOTS;
    memcpy(s->key, key, klen);
    s->keylen = klen;
    s->slot = g_next_slot;
    g_next_slot += (uint32_t)n;
    if (m->type == 1 && !slot_ptr(&g_gauges, s->slot)) {
      free(s->key);
      free(s);
      pthread_mutex_unlock(&g_mu);
      return luaL_error(L, "tycho.metrics: out of memory");
    }
    if (m->last) m->last->next = s;
    else m->first = s;
    m->last = s;
    m->nseries++;
  }
  uint32_t slot = s->slot;
  pthread_mutex_unlock(&g_mu);
  lua_pushnumber(L, slot);
  return 1;
}

/* ---- shards and pointers ---------------------------------------------------- */

/* _metrics_shard() -> shard (lightuserdata), guard (its __gc gives the
 * shard back: a pool thread's state ends; the values stay, and the next
 * state that takes the shard adds to them). */
static int l_shard_gc(lua_State *L) {
  shard **p = lua_touserdata(L, 1);
  if (p && *p) {
    pthread_mutex_lock(&g_mu);
    (*p)->in_use = false;
    pthread_mutex_unlock(&g_mu);
    *p = NULL;
  }
  return 0;
}

static int l_shard(lua_State *L) {
  shard **p = lua_newuserdata(L, sizeof *p);
  *p = NULL;
  lua_newtable(L);
  lua_pushcfunction(L, l_shard_gc);
  lua_setfield(L, -2, "__gc");
  lua_setmetatable(L, -2);
  pthread_mutex_lock(&g_mu);
  shard *s = g_shards;
  while (s && s->in_use) s = s->next;
  if (!s && (s = calloc(1, sizeof *s))) {
    s->next = g_shards;
    g_shards = s;
  }
  if (s) s->in_use = true;
  pthread_mutex_unlock(&g_mu);
  if (!s) return luaL_error(L, "tycho.metrics: out of memory");
  *p = s;
  lua_pushlightuserdata(L, s);
  lua_insert(L, -2);
  return 2;
}

/* _metrics_ptr(shard | nil, slot) -> pointer to the slot (lightuserdata);
 * nil: the gauges'. */
static int l_ptr(lua_State *L) {
  shard *s = lua_isnoneornil(L, 1) ? &g_gauges : lua_touserdata(L, 1);
  uint32_t slot = (uint32_t)luaL_checknumber(L, 2);
  if (!s || slot >= (uint32_t)PAGE_SLOTS * NPAGES)
    return luaL_error(L, "tycho.metrics: bad slot");
  pthread_mutex_lock(&g_mu);
  double *p = slot_ptr(s, slot);
  pthread_mutex_unlock(&g_mu);
  if (!p) return luaL_error(L, "tycho.metrics: out of memory");
  lua_pushlightuserdata(L, p);
  return 1;
}

/* _metrics_gauge_add(ptr, n): an atomic add to a gauge's slot */
static int l_gauge_add(lua_State *L) {
  uint64_t *p = lua_touserdata(L, 1);
  double n = luaL_checknumber(L, 2);
  if (!p) return luaL_error(L, "tycho.metrics: bad gauge");
  uint64_t old = __atomic_load_n(p, __ATOMIC_RELAXED), nw;
  do {
    double d;
    memcpy(&d, &old, sizeof d);
    d += n;
    memcpy(&nw, &d, sizeof nw);
    /* relaxed: the slot is a value on its own, nothing is published
     * through it */
  } while (!__atomic_compare_exchange_n(p, &old, nw, true, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED));
  return 0;
}

static int l_gen_ptr(lua_State *L) {
  lua_pushlightuserdata(L, (void *)&g_gen);
  return 1;
}

/* ---- the text ------------------------------------------------------------------ */

static double sum_slot(uint32_t slot) {
  double v = 0;
  for (shard *s = g_shards; s; s = s->next) v += read_slot(s, slot);
  return v;
}

/* The text is built in a malloc'ed buffer under g_mu (a Lua buffer could
 * raise there and leave the lock held); out of memory, it stops growing
 * and the scrape fails after the unlock. */
typedef struct out {
  ty__buf b;
  bool oom;
} out;

static void add(out *o, const char *s, size_t n) {
  if (!o->oom && ty__buf_append(&o->b, s, n)) o->oom = true;
}
static void adds(out *o, const char *s) { add(o, s, strlen(s)); }

/* The shortest of %.15g..%.17g that reads back as v. */
static void fmt_num(char *tmp, size_t n, double v) {
  if (v != v) snprintf(tmp, n, "NaN");
  else if (isinf(v)) snprintf(tmp, n, v > 0 ? "+Inf" : "-Inf");
  else if (v == floor(v) && fabs(v) < 9007199254740992.0)
    snprintf(tmp, n, "%.0f", v);
  else
    for (int p = 15; p <= 17; p++) {
      snprintf(tmp, n, "%.*g", p, v);
      if (strtod(tmp, NULL) == v) break;
    }
}

static void put_num(out *o, double v) {
  char tmp[64];
  fmt_num(tmp, sizeof tmp, v);
  adds(o, tmp);
}

static void put_escaped(out *o, const char *s) {
  for (; *s; s++) {
    if (*s == '\\') adds(o, "\\\\");
    else if (*s == '"') adds(o, "\\\"");
    else if (*s == '\n') adds(o, "\\n");
    else add(o, s, 1);
  }
}

/* {labels[,le="x"]} */
static void put_labels(out *o, const metric *m, const series *s,
                       const char *le) {
  if (!m->nlabels && !le) return;
  adds(o, "{");
  const char *v = s->key;
  for (int i = 0; i < m->nlabels; i++) {
    if (i) adds(o, ",");
    adds(o, m->labels[i]);
    adds(o, "=\"");
    put_escaped(o, v);
    adds(o, "\"");
    v += strlen(v) + 1;
  }
  if (le) {
    adds(o, m->nlabels ? ",le=\"" : "le=\"");
    adds(o, le);
    adds(o, "\"");
  }
  adds(o, "}");
}

static void put_sample(out *o, const metric *m, const series *s,
                       const char *suffix, const char *le, double v) {
  adds(o, m->name);
  if (suffix) adds(o, suffix);
  put_labels(o, m, s, le);
  adds(o, " ");
  put_num(o, v);
  adds(o, "\n");
}

static void put_histogram(out *o, const metric *m, const series *s) {
  double acc = 0;
  char le[64];
  for (int i = 0; i <= m->nbounds; i++) {
    acc += sum_slot(s->slot + (uint32_t)i);
    if (i < m->nbounds) fmt_num(le, sizeof le, m->bounds[i]);
    else snprintf(le, sizeof le, "+Inf");
    put_sample(o, m, s, "_bucket", le, acc);
  }
  put_sample(o, m, s, "_sum", NULL,
             sum_slot(s->slot + (uint32_t)m->nbounds + 1));
  put_sample(o, m, s, "_count", NULL, acc);
}

/* _metrics_text() -> the application's metrics, Prometheus text format */
static int l_text(lua_State *L) {
  out o = {.oom = false};
  ty__buf_init(&o.b);
  pthread_mutex_lock(&g_mu);
  for (metric *m = g_metrics; m; m = m->next) {
    adds(&o, "# HELP ");
    adds(&o, m->name);
    adds(&o, " ");
    adds(&o, m->help ? m->help : m->name);
    adds(&o, "\n# TYPE ");
    adds(&o, m->name);
    adds(&o, " ");
    adds(&o, TYPES[m->type]);
    adds(&o, "\n");
    for (series *s = m->first; s; s = s->next) {
      if (m->type == 2) put_histogram(&o, m, s);
      else
        put_sample(&o, m, s, NULL, NULL,
                   m->type == 1 ? read_slot(&g_gauges, s->slot)
                                : sum_slot(s->slot));
    }
  }
  pthread_mutex_unlock(&g_mu);
  if (o.oom) {
    ty__buf_free(&o.b);
    return luaL_error(L, "tycho.metrics: out of memory");
  }
  lua_pushlstring(L, o.b.data ? o.b.data : "", o.b.len);
  ty__buf_free(&o.b);
  return 1;
}

static const luaL_Reg funcs[] = {
    {"_metrics_declare", l_declare},     {"_metrics_series", l_series},
    {"_metrics_shard", l_shard},         {"_metrics_ptr", l_ptr},
    {"_metrics_gauge_add", l_gauge_add}, {"_metrics_gen_ptr", l_gen_ptr},
    {"_metrics_text", l_text},           {NULL, NULL}};

void lt_open_metrics(lua_State *L) { luaL_register(L, NULL, funcs); }
