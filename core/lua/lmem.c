/*
 * lmem.c - memory budgets: the accounting allocator of every Lua state, the
 * process-wide count, and who is refused when it runs over (lmem.h tells
 * what is measured; docs/architecture.md, "Memory", why).
 *
 * The count is one process-wide number fed by per-thread deltas: a thread
 * adds its allocations to its own delta and moves it into the shared total
 * once it reaches 64 KiB either way, so the hot path has no atomic and the
 * total lags by at most 64 KiB per thread. Each move also refreshes the
 * thread's view of "over budget", which is what the allocator looks at.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "lctx.h"
#include "lmem.h"

#define CHUNK ((int64_t)64 << 10)

/* relaxed: a sum of counts; nothing else is published through it. */
static _Atomic int64_t g_total;
/* Set by lt_mem_start before any worker or pool thread runs. */
static int64_t g_max = INT64_MAX;    /* max_memory */
static int64_t g_hard = INT64_MAX;   /* past it, every charged growth fails */
static int64_t g_victim = INT64_MAX; /* a charge this big is to blame */
static int64_t g_hold = INT64_MAX;   /* and one that holds this much */
static int64_t g_actor_max;          /* actor_memory, 0: none */

static _Thread_local int64_t t_delta; /* not yet in g_total */
static _Thread_local int64_t t_seen;  /* the total at the last move */
static _Thread_local bool t_over;     /* t_seen > max_memory */
_Thread_local bool lt_mem_pressure;   /* t_over, or the GC still tuned for it */
static _Thread_local lt_heap *t_heap; /* the heap of this thread's state */

lt_paused lt_mem_pause(void) {
  lt_paused p = {t_heap ? t_heap->cur : NULL, false};
  if (t_heap) t_heap->cur = NULL;
  lt_worker *lw = lt_worker_get();
  if (lw) {
    p.in_lua = lw->in_lua;
    lw->in_lua = false; /* lstate.c: the watchdog's refusals */
  }
  return p;
}

void lt_mem_resume(lt_paused p) {
  if (t_heap) t_heap->cur = p.charge;
  lt_worker *lw = lt_worker_get();
  if (lw) lw->in_lua = p.in_lua;
}

static int64_t queued_bytes(void) {
  ty_runtime *rt = lt_ctx_get()->rt;
  return rt ? (int64_t)ty_runtime_mailbox_bytes(rt) : 0;
}

static void refresh(void) {
  t_seen = atomic_load_explicit(&g_total, memory_order_relaxed) + t_delta +
           queued_bytes();
  bool was = t_over;
  t_over = t_seen > g_max;
  if (t_over) lt_mem_pressure = true;
  /* Pressure begins: what actors allocated before counts no more (see
   * to_blame; cycles are looked for only under pressure). */
  if (t_over && !was && t_heap) t_heap->epoch++;
}

/* Returns true when the delta moved into the total. */
static inline bool account(int64_t d) {
  t_delta += d;
  if (t_delta < CHUNK && t_delta > -CHUNK) return false;
  atomic_fetch_add_explicit(&g_total, t_delta, memory_order_relaxed);
  t_delta = 0;
  refresh();
  return true;
}

void lt_mem_flush(void) {
  atomic_fetch_add_explicit(&g_total, t_delta, memory_order_relaxed);
  t_delta = 0;
}

void lt_mem_add(int64_t bytes) { account(bytes); }

int64_t lt_mem_total(void) {
  refresh();
  return t_seen;
}

bool lt_mem_over(void) { return t_over; }

/* ---- broods ------------------------------------------------------------ */

void lt_mem_brood_join(lt_charge *spawner, lt_charge *child) {
  if (!spawner->brood) {
    lt_brood *b = malloc(sizeof *b);
    if (!b) return;
    atomic_init(&b->bytes, 0);
    atomic_init(&b->refs, 1); /* the spawner's */
    atomic_init(&b->doomed, false);
    spawner->brood = b;
  }
  spawner->spawn_refused = false;
  /* relaxed: a new reference from one that holds one (the spawner's). */
  atomic_fetch_add_explicit(&spawner->brood->refs, 1, memory_order_relaxed);
  /* relaxed: a count; nothing is published through it. */
  atomic_fetch_add_explicit(&spawner->brood->bytes, LT_SPAWN_COST,
                            memory_order_relaxed);
  child->brood_of = spawner->brood;
}

/* acq_rel: whoever drops the last reference frees the brood after every
 * other holder's last use of it. */
static void brood_release(lt_brood *b) {
  if (atomic_fetch_sub_explicit(&b->refs, 1, memory_order_acq_rel) == 1)
    free(b);
}

void lt_mem_charge_end(lt_charge *c) {
  if (c->brood_of) {
    /* relaxed: a count, as in lt_mem_brood_join. */
    atomic_fetch_sub_explicit(&c->brood_of->bytes, LT_SPAWN_COST,
                              memory_order_relaxed);
    brood_release(c->brood_of);
    c->brood_of = NULL;
  }
  if (c->brood) brood_release(c->brood);
  c->brood = NULL;
}

/* c is refused from now on; so are its brood's actors under pressure. */
static void doom(lt_charge *c) {
  c->doomed = true;
  /* relaxed: a flag each child looks at when it grows over budget; being
   * seen late only lets a child grow a little more. */
  if (c->brood)
    atomic_store_explicit(&c->brood->doomed, true, memory_order_relaxed);
}

/* Is c in the brood of a spawner that was doomed? */
static bool brood_doomed(const lt_charge *c) {
  /* relaxed: as in doom. */
  return c->brood_of &&
         atomic_load_explicit(&c->brood_of->doomed, memory_order_relaxed);
}

/* What c holds: what it allocated minus what it freed, and its brood. */
static int64_t held(const lt_charge *c) {
  /* relaxed: a count (lt_mem_brood_join). */
  return c->mem + (c->brood ? atomic_load_explicit(&c->brood->bytes,
                                                   memory_order_relaxed)
                            : 0);
}

bool lt_mem_held_much(const lt_charge *c) { return held(c) >= g_victim; }

bool lt_mem_spawn_blames(lt_charge *c) {
  if (!t_over) return false;
  if (c->spawn_refused && held(c) >= g_hold) doom(c);
  c->spawn_refused = true;
  return c->doomed;
}

/* Is c to blame for the process being over budget? When it allocated a
 * large share of it (1/32) in this run, or since the last collection cycle
 * of its worker's state: a bomb does, an innocent actor that allocates a
 * little at the wrong time does not. (Its lifetime count alone would not
 * do: the garbage of an actor that churns is mostly freed while others run,
 * so that count drifts up.) Or when it holds an eighth of the budget (that
 * lifetime count, allocated minus freed while it ran): a bomb of small
 * tables that yields often allocates little per run and per cycle, but
 * keeps all of it, and must end before its heap is so large that one
 * collector step (which no hook interrupts) outlasts two slices and its
 * worker is declared stuck, innocent actors with it. (A spawn bomb is
 * blamed at its spawns: lt_mem_spawn_blames.) */
static bool to_blame(const lt_heap *h, const lt_charge *c, size_t d) {
  int64_t recent = c->epoch == h->epoch ? c->recent : 0;
  return recent + (int64_t)d >= g_victim ||
         (int64_t)(c->burst + d) >= g_victim || c->mem >= g_hold ||
         brood_doomed(c) || t_seen > g_hard;
}

/* Should growth by d, charged to c, fail? An actor over actor_memory does;
 * over max_memory, the one to blame does, after a fresh look at the total;
 * past max_memory plus an eighth, everyone. Once refused, always refused:
 * the actor is ending. */
static bool refuse(const lt_heap *h, lt_charge *c, size_t d) {
  if (c->doomed) return true;
  if (g_actor_max && c->mem + (int64_t)d > g_actor_max) goto doom;
  if (!t_over || !to_blame(h, c, d)) return false;
  refresh();
  if (!t_over || !to_blame(h, c, d)) return false;
doom:
  doom(c);
  return true;
}

void *lt_mem_alloc(lt_heap *h, void *p, size_t osize, size_t nsize) {
  lt_charge *c = h->cur;
  if (c && nsize > osize && refuse(h, c, nsize - osize) && !h->lent)
    return NULL;
  void *q = h->f(h->ud, p, osize, nsize);
  if (!q && nsize) return NULL; /* the system is out: LuaJIT raises */
  int64_t d = (int64_t)nsize - (int64_t)osize;
  h->used += d;
  if (c) {
    if (c->epoch != h->epoch) {
      c->epoch = h->epoch;
      c->recent = 0;
    }
    c->mem += d;
    c->recent += d;
    if (d > 0) c->burst += (size_t)d;
  }
  /* relaxed: a figure for tycho.stats, written by this thread only. */
  if (account(d) && h->pub)
    atomic_store_explicit(h->pub, lt_heap_counted(h), memory_order_relaxed);
  return q;
}

static void *heap_alloc(void *ud, void *p, size_t osize, size_t nsize) {
  return lt_mem_alloc(ud, p, osize, nsize);
}

static void attach(lua_State *L, lt_heap *h, bool borrowed) {
  memset(h, 0, sizeof *h);
  h->f = lua_getallocf(L, &h->ud);
  h->used = (size_t)lua_gc(L, LUA_GCCOUNT, 0) * 1024 +
            (size_t)lua_gc(L, LUA_GCCOUNTB, 0);
  h->base = borrowed ? h->used : 0;
  account((int64_t)(h->used - h->base));
  lt_mem_flush(); /* a state is counted at once, not once 64 KiB later */
  lua_setallocf(L, heap_alloc, h);
  t_heap = h;
}

void lt_mem_attach(lua_State *L, lt_heap *h) { attach(L, h, false); }

/* What the caller's state held before the run is not the runtime's (it was
 * not counted when main ran on a state of its own either); what it frees of
 * that during the run makes the total dip a little, which detach undoes. */
void lt_mem_attach_borrowed(lua_State *L, lt_heap *h) { attach(L, h, true); }

/* ---- collection cycles ----------------------------------------------------
 * A table that only a weak table refers to is cleared from it by the first
 * collection cycle that ends after it was put there. Looking at the slot
 * after each run under pressure tells that a cycle ended (no finalizer: a
 * __gc runs inside the collector, wherever it steps, and with the
 * watchdog's hook changing under it from another thread). */

#define EPOCH_KEY "tycho.mem_epoch"

static int watch(lua_State *L) {
  lua_createtable(L, 1, 0);
  lua_createtable(L, 0, 1);
  lua_pushliteral(L, "v");
  lua_setfield(L, -2, "__mode");
  lua_setmetatable(L, -2);
  lua_newtable(L);
  lua_rawseti(L, -2, 1);
  lua_setfield(L, LUA_REGISTRYINDEX, EPOCH_KEY);
  return 0;
}

int lt_mem_watch(lua_State *L, lt_heap *h) {
  (void)h;
  return lua_cpcall(L, watch, NULL);
}

void lt_mem_unwatch(lua_State *L) {
  lua_pushnil(L);
  lua_setfield(L, LUA_REGISTRYINDEX, EPOCH_KEY);
}

/* A cycle ended since the last look: a new epoch, and a new garbage table. */
static void look_for_cycle(lua_State *L, lt_heap *h) {
  lua_getfield(L, LUA_REGISTRYINDEX, EPOCH_KEY);
  if (!lua_istable(L, -1)) {
    lua_pop(L, 1);
    return;
  }
  lua_rawgeti(L, -1, 1);
  if (lua_isnil(L, -1)) {
    h->epoch++;
    lua_newtable(L);
    lua_rawseti(L, -3, 1);
  }
  lua_pop(L, 2);
}

void lt_mem_detach(lua_State *L, lt_heap *h) {
  lua_setallocf(L, h->f, h->ud);
  account(-((int64_t)h->used - (int64_t)h->base));
  h->used = h->base = 0;
  if (t_heap == h) t_heap = NULL;
}

static int collect(lua_State *L) {
  lua_gc(L, LUA_GCCOLLECT, 0);
  return 0;
}

void lt_mem_collect(lua_State *L) { lua_cpcall(L, collect, NULL); }

/* Under pressure the collector works without pause (a new cycle as soon as
 * one ends), so that garbage does not count against the budget; and the
 * worker collects fully now and then, when its heap grew by 1/16 of the
 * budget since it last did. */
void lt_mem_relieve(lua_State *L, lt_heap *h, lt_charge *c) {
  static _Thread_local bool pressed;
  refresh();
  if (t_over != pressed) {
    pressed = t_over;
    lua_gc(L, LUA_GCSETPAUSE, pressed ? 100 : 200);
  }
  lt_mem_pressure = t_over || pressed;
  look_for_cycle(L, h);
  if (t_over && c && c->mem >= g_hold) {
    doom(c); /* it ends now; its worker then collects */
    return;
  }
  if (!t_over || h->used < h->last_gc_used + (size_t)(g_max / 16)) return;
  lua_gc(L, LUA_GCCOLLECT, 0);
  h->last_gc_used = h->used;
  refresh();
}

/* ---- budgets ------------------------------------------------------------ */

static uint64_t cgroup_limit(void) {
  FILE *f = fopen("/sys/fs/cgroup/memory.max", "r");
  if (!f) return UINT64_MAX;
  unsigned long long v = 0;
  int ok = fscanf(f, "%llu", &v) == 1;
  fclose(f);
  return ok && v ? (uint64_t)v : UINT64_MAX; /* "max": none */
}

size_t lt_mem_default_max(void) {
  long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
  uint64_t limit = pages > 0 && psz > 0 ? (uint64_t)pages * (uint64_t)psz
                                        : (uint64_t)4 << 30;
  uint64_t cg = cgroup_limit();
  if (cg < limit) limit = cg;
  uint64_t max = limit / 4 * 3;
  struct rlimit rl;
  if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
      rl.rlim_cur / 2 < max)
    max = rl.rlim_cur / 2;
  return max > SIZE_MAX ? SIZE_MAX : (size_t)max;
}

void lt_mem_start(size_t max_memory, size_t actor_memory) {
  atomic_store_explicit(&g_total, 0, memory_order_relaxed);
  t_delta = 0;
  g_max = max_memory > INT64_MAX / 2 ? INT64_MAX / 2 : (int64_t)max_memory;
  g_hard = g_max + g_max / 8;
  g_victim = g_max / 32;
  g_hold = g_max / 8;
  g_actor_max = actor_memory > INT64_MAX / 2 ? 0 : (int64_t)actor_memory;
  refresh();
}
