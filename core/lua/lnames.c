/*
 * lnames.c - the binding's process-wide tables: registered names
 * (tycho.register / tycho.whereis) and the reasons of recent deaths.
 *
 * Names: one table for the whole process so that a name resolves on every
 * worker.
 * A mutex around a chained hash table: names are looked up on sends by name,
 * which are rarer than sends by pid, and a lookup holds the lock for a hash
 * and a string compare. Each entry is also chained by pid, so that an ending
 * actor drops its names without a scan (a name can be registered for another
 * actor, so its holder cannot know whether it has one). Ending actors check
 * an atomic count first and skip the lock while no name exists at all.
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "base/common.h"
#include "lctx.h"
#include "lnames.h"

#define BUCKETS 1024

/* ---- names -------------------------------------------------------------- */

typedef struct name_ent {
  struct name_ent *next;     /* in its name bucket */
  struct name_ent *pid_next; /* in its pid bucket */
  ty_pid pid;
  char name[];
} name_ent;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static name_ent *by_name[BUCKETS]; /* guarded by lock */
static name_ent *by_pid[BUCKETS];  /* guarded by lock */
/* Entries in the table. Written under the lock, read without it by ending
 * actors (relaxed: a stale zero only leaves behind the entry of a dead pid,
 * which every user already treats as no name: whereis checks liveness, a
 * send to it fails with "noproc", register takes it over). */
static _Atomic size_t count;

static uint32_t hash(const char *s) {
  uint32_t h = 2166136261u; /* FNV-1a */
  while (*s) h = (h ^ (uint8_t)*s++) * 16777619u;
  return h % BUCKETS;
}

static uint32_t pid_hash(ty_pid pid) {
  return (uint32_t)((pid * 0x9E3779B97F4A7C15ull) >> 40) % BUCKETS;
}

static name_ent **find(const char *name) {
  name_ent **p = &by_name[hash(name)];
  while (*p && strcmp((*p)->name, name) != 0) p = &(*p)->next;
  return p;
}

static void pid_link(name_ent *e) {
  name_ent **b = &by_pid[pid_hash(e->pid)];
  e->pid_next = *b;
  *b = e;
}

static void pid_unlink(name_ent *e) {
  name_ent **p = &by_pid[pid_hash(e->pid)];
  while (*p != e) p = &(*p)->pid_next;
  *p = e->pid_next;
}

static void set_count(size_t n) {
  atomic_store_explicit(&count, n, memory_order_relaxed);
}

static size_t get_count(void) {
  return atomic_load_explicit(&count, memory_order_relaxed);
}

int lt_names_register(const char *name, ty_pid pid) {
  int r = 0;
  pthread_mutex_lock(&lock);
  name_ent **p = find(name);
  if (*p && (*p)->pid != pid && ty_pid_alive(lt_ctx_get()->rt, (*p)->pid)) {
    r = -EEXIST;
  } else if (*p) {
    /* The old holder ended (its exit may not have dropped it yet): the name
     * is free again. */
    pid_unlink(*p);
    (*p)->pid = pid;
    pid_link(*p);
  } else {
    size_t len = strlen(name);
    name_ent *e = ty__xmalloc(sizeof *e + len + 1);
    memcpy(e->name, name, len + 1);
    e->pid = pid;
    e->next = NULL;
    *p = e;
    pid_link(e);
    set_count(get_count() + 1);
  }
  pthread_mutex_unlock(&lock);
  return r;
}

ty_pid lt_names_lookup(const char *name) {
  pthread_mutex_lock(&lock);
  name_ent *e = *find(name);
  ty_pid pid = e ? e->pid : 0;
  pthread_mutex_unlock(&lock);
  return pid;
}

void lt_names_drop_pid(ty_pid pid) {
  if (get_count() == 0) return;
  pthread_mutex_lock(&lock);
  for (name_ent **p = &by_pid[pid_hash(pid)]; *p;) {
    name_ent *e = *p;
    if (e->pid != pid) {
      p = &e->pid_next;
      continue;
    }
    *p = e->pid_next;
    name_ent **n = find(e->name);
    *n = e->next;
    free(e);
    set_count(get_count() - 1);
  }
  pthread_mutex_unlock(&lock);
}

size_t lt_names_of(ty_pid pid, char *buf, size_t n) {
  size_t len = 0;
  if (get_count() == 0 || n == 0) return 0;
  pthread_mutex_lock(&lock);
  for (name_ent *e = by_pid[pid_hash(pid)]; e; e = e->pid_next) {
    if (e->pid != pid) continue;
    len = strlen(e->name);
    if (len >= n) len = n - 1;
    memcpy(buf, e->name, len);
    break;
  }
  pthread_mutex_unlock(&lock);
  buf[len] = 0;
  return len;
}

void lt_names_clear(void) {
  pthread_mutex_lock(&lock);
  for (size_t b = 0; b < BUCKETS; b++) {
    while (by_name[b]) {
      name_ent *e = by_name[b];
      by_name[b] = e->next;
      free(e);
    }
    by_pid[b] = NULL;
  }
  set_count(0);
  pthread_mutex_unlock(&lock);
}

/* ---- atoms: names as numbers ---------------------------------------------
 *
 * A message timer addressed to a name resolves it when it fires (the name
 * may be held by another actor by then: a supervisor restarted it). The core
 * timer carries a number (ty_msg.aux), so each such name is interned once
 * here, for the life of the process, under the names' lock.
 */

#define ATOMS_MAX (1u << 20)

typedef struct atom {
  struct atom *next;
  uint32_t id;
  char name[];
} atom;

static atom *atom_buckets[BUCKETS]; /* guarded by lock */
static atom **atoms;                /* [id - 1], guarded by lock */
static size_t natoms, capatoms;

uint32_t lt_names_atom(const char *name) {
  uint32_t id = 0;
  pthread_mutex_lock(&lock);
  atom **p = &atom_buckets[hash(name)];
  while (*p && strcmp((*p)->name, name) != 0) p = &(*p)->next;
  if (*p) {
    id = (*p)->id;
  } else if (natoms < ATOMS_MAX) {
    size_t len = strlen(name);
    atom *a = ty__xmalloc(sizeof *a + len + 1);
    memcpy(a->name, name, len + 1);
    a->next = NULL;
    ty__grow(&atoms, &capatoms, natoms + 1, sizeof *atoms, 64);
    atoms[natoms++] = a;
    a->id = id = (uint32_t)natoms;
    *p = a;
  }
  pthread_mutex_unlock(&lock);
  return id;
}

ty_pid lt_names_lookup_atom(uint32_t id) {
  ty_pid pid = 0;
  pthread_mutex_lock(&lock);
  if (id >= 1 && id <= natoms) {
    name_ent *e = *find(atoms[id - 1]->name);
    pid = e ? e->pid : 0;
  }
  pthread_mutex_unlock(&lock);
  return pid;
}

/* ---- recent deaths -------------------------------------------------------
 *
 * A spawn request can be stolen and run to its end on another worker before
 * its spawner's next line calls tycho.monitor or tycho.link; the pid is then
 * dead and the answer would be "noproc". To give the real reason instead,
 * each worker remembers its last GRAVES exits (pid, reason) in a ring,
 * bounded in bytes too; a monitor or link that finds a pid dead looks there.
 * The owner writes its ring, anyone may read it: one mutex per worker, never
 * contended on the hot path (the owner, once per actor exit).
 */

#define GRAVES 1024
#define GRAVE_BYTES (1u << 20) /* reason bytes kept per worker */

typedef struct grave {
  ty_pid pid;
  char *reason; /* NULL: "normal", the common case, costs no allocation */
  uint32_t len;
} grave;

typedef struct graveyard {
  pthread_mutex_t mu;
  grave ring[GRAVES];
  uint32_t next; /* the oldest entry, overwritten next */
  size_t bytes;
} graveyard;

static graveyard *yards; /* [nyards], for the running runtime */
static unsigned nyards;

void lt_graves_open(unsigned workers) {
  yards = ty__xcalloc(workers, sizeof *yards);
  nyards = workers;
  for (unsigned i = 0; i < workers; i++) pthread_mutex_init(&yards[i].mu, NULL);
}

void lt_graves_close(void) {
  for (unsigned i = 0; i < nyards; i++) {
    for (unsigned k = 0; k < GRAVES; k++) free(yards[i].ring[k].reason);
    pthread_mutex_destroy(&yards[i].mu);
  }
  free(yards);
  yards = NULL;
  nyards = 0;
}

static void grave_clear(graveyard *y, grave *g) {
  y->bytes -= g->len;
  free(g->reason);
  *g = (grave){0, NULL, 0};
}

void lt_grave_add(unsigned worker, ty_pid pid, const char *reason, size_t len) {
  if (worker >= nyards) return;
  graveyard *y = &yards[worker];
  bool normal = len == 6 && memcmp(reason, "normal", 6) == 0;
  if (len > GRAVE_BYTES / 4) len = GRAVE_BYTES / 4; /* keep a few anyway */
  char *copy = NULL;
  if (!normal) {
    copy = ty__xmalloc(len + 1);
    memcpy(copy, reason, len);
    copy[len] = 0;
  }
  pthread_mutex_lock(&y->mu);
  grave_clear(y, &y->ring[y->next]);
  /* Over the byte budget: forget the oldest deaths. */
  for (uint32_t k = 1; !normal && y->bytes + len > GRAVE_BYTES && k < GRAVES;
       k++)
    grave_clear(y, &y->ring[(y->next + k) % GRAVES]);
  y->ring[y->next] = (grave){pid, copy, normal ? 0 : (uint32_t)len};
  y->bytes += normal ? 0 : len;
  y->next = (y->next + 1) % GRAVES;
  pthread_mutex_unlock(&y->mu);
}

char *lt_grave_find(ty_pid pid, size_t *len) {
  for (unsigned i = 0; i < nyards; i++) {
    graveyard *y = &yards[i];
    char *found = NULL;
    pthread_mutex_lock(&y->mu);
    for (unsigned k = 0; k < GRAVES && !found; k++) {
      grave *g = &y->ring[k];
      if (g->pid != pid) continue;
      *len = g->reason ? g->len : 6;
      found = ty__xmalloc(*len + 1);
      memcpy(found, g->reason ? g->reason : "normal", *len + 1);
    }
    pthread_mutex_unlock(&y->mu);
    if (found) return found;
  }
  return NULL;
}
