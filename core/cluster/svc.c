/*
 * svc.c - services (tycho.join / tycho.leave, {service = name} destinations):
 * the local members of each service and which other nodes serve it.
 *
 * Workers read this table on every call to a service and change it on join,
 * leave and the end of a member; the gateway changes the view of the other
 * nodes as their announcements arrive. One mutex guards it all: a lookup is
 * a short scan of the names and a round-robin step. Service names are
 * interned for the life of the process (an id is a small number that
 * messages to the port carry in ty_msg.aux).
 */
#include <string.h>

#include "cluster.h"

typedef struct svc {
  char *name;
  ty_pid *members; /* local members, in join order */
  size_t n, cap, rr;
  uint8_t nodes[TY_MAX_NODES / 8]; /* other nodes that serve it */
  unsigned nremote;
} svc;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static svc **svcs; /* guarded by mu; id = index + 1 */
static size_t nsvcs, capsvcs;
/* Memberships in all (relaxed: a zero lets ending actors skip the lock; a
 * stale zero can only come from a join racing the joiner's own end, which
 * it cannot, as both run on the joiner's worker). */
static _Atomic size_t memberships;

uint64_t lc_svc_id(const char *name, bool create) {
  pthread_mutex_lock(&mu);
  uint64_t id = 0;
  for (size_t i = 0; i < nsvcs && !id; i++)
    if (strcmp(svcs[i]->name, name) == 0) id = i + 1;
  if (!id && create) {
    ty__grow(&svcs, &capsvcs, nsvcs + 1, sizeof *svcs, 8);
    svc *s = ty__xcalloc(1, sizeof *s);
    s->name = strdup(name);
    svcs[nsvcs++] = s;
    id = nsvcs;
  }
  pthread_mutex_unlock(&mu);
  return id;
}

const char *lc_svc_name(uint64_t id) {
  pthread_mutex_lock(&mu);
  const char *name = id && id <= nsvcs ? svcs[id - 1]->name : NULL;
  pthread_mutex_unlock(&mu);
  return name;
}

static svc *get(uint64_t id) { return id && id <= nsvcs ? svcs[id - 1] : NULL; }

static size_t count(void) {
  return atomic_load_explicit(&memberships, memory_order_relaxed);
}

static void set_count(size_t n) {
  atomic_store_explicit(&memberships, n, memory_order_relaxed);
}

bool lc_svc_add(uint64_t id, ty_pid pid) {
  pthread_mutex_lock(&mu);
  svc *s = get(id);
  bool first = false;
  if (s) {
    bool dup = false;
    for (size_t i = 0; i < s->n && !dup; i++) dup = s->members[i] == pid;
    if (!dup) {
      ty__grow(&s->members, &s->cap, s->n + 1, sizeof *s->members, 4);
      s->members[s->n++] = pid;
      first = s->n == 1;
      set_count(count() + 1);
    }
  }
  pthread_mutex_unlock(&mu);
  return first;
}

/* Under mu. */
static bool remove_locked(svc *s, ty_pid pid) {
  for (size_t i = 0; i < s->n; i++) {
    if (s->members[i] != pid) continue;
    memmove(s->members + i, s->members + i + 1,
            (s->n - i - 1) * sizeof *s->members);
    s->n--;
    set_count(count() - 1);
    return s->n == 0;
  }
  return false;
}

bool lc_svc_remove(uint64_t id, ty_pid pid) {
  pthread_mutex_lock(&mu);
  svc *s = get(id);
  bool last = s && remove_locked(s, pid);
  pthread_mutex_unlock(&mu);
  return last;
}

size_t lc_svc_drop_pid(ty_pid pid, uint64_t *emptied, size_t max) {
  if (!count()) return 0;
  size_t ne = 0;
  pthread_mutex_lock(&mu);
  for (size_t i = 0; i < nsvcs; i++)
    if (remove_locked(svcs[i], pid) && ne < max) emptied[ne++] = i + 1;
  pthread_mutex_unlock(&mu);
  return ne;
}

ty_pid lc_svc_local(uint64_t id, ty_pid exclude) {
  pthread_mutex_lock(&mu);
  svc *s = get(id);
  ty_pid pick = 0;
  for (size_t k = 0; s && k < s->n && !pick; k++) {
    ty_pid p = s->members[s->rr++ % s->n];
    if (p != exclude) pick = p;
  }
  pthread_mutex_unlock(&mu);
  return pick;
}

size_t lc_svc_local_ids(uint64_t *out, size_t max) {
  size_t n = 0;
  pthread_mutex_lock(&mu);
  for (size_t i = 0; i < nsvcs && n < max; i++)
    if (svcs[i]->n) out[n++] = i + 1;
  pthread_mutex_unlock(&mu);
  return n;
}

void lc_svc_set_node(unsigned node, const uint64_t *ids, size_t n) {
  if (node >= TY_MAX_NODES) return;
  uint8_t bit = (uint8_t)(1u << (node % 8));
  pthread_mutex_lock(&mu);
  for (size_t i = 0; i < nsvcs; i++) {
    svc *s = svcs[i];
    bool want = false;
    for (size_t k = 0; k < n && !want; k++) want = ids[k] == i + 1;
    bool has = s->nodes[node / 8] & bit;
    if (want && !has) {
      s->nodes[node / 8] |= bit;
      s->nremote++;
    } else if (!want && has) {
      s->nodes[node / 8] &= (uint8_t)~bit;
      s->nremote--;
    }
  }
  pthread_mutex_unlock(&mu);
}

bool lc_svc_remote(uint64_t id) {
  pthread_mutex_lock(&mu);
  svc *s = get(id);
  bool any = s && s->nremote > 0;
  pthread_mutex_unlock(&mu);
  return any;
}

void lc_svc_reset(void) {
  pthread_mutex_lock(&mu);
  for (size_t i = 0; i < nsvcs; i++) {
    svc *s = svcs[i];
    s->n = s->rr = 0;
    memset(s->nodes, 0, sizeof s->nodes);
    s->nremote = 0;
  }
  set_count(0);
  pthread_mutex_unlock(&mu);
}
