/*
 * lnames.c - registered names (tycho.register / tycho.whereis), one table for
 * the whole process so that a name resolves on every worker.
 *
 * A mutex around a chained hash table: names are looked up on sends by name,
 * which are rarer than sends by pid, and a lookup holds the lock for a hash
 * and a string compare.
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "ltycho.h"

#define BUCKETS 1024

typedef struct name_ent {
  struct name_ent *next;
  ty_pid pid;
  char name[];
} name_ent;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static name_ent *buckets[BUCKETS]; /* guarded by lock */

static uint32_t hash(const char *s) {
  uint32_t h = 2166136261u; /* FNV-1a */
  while (*s) h = (h ^ (uint8_t)*s++) * 16777619u;
  return h % BUCKETS;
}

static name_ent **find(const char *name) {
  name_ent **p = &buckets[hash(name)];
  while (*p && strcmp((*p)->name, name) != 0) p = &(*p)->next;
  return p;
}

int lt_names_register(const char *name, ty_pid pid) {
  int r = 0;
  pthread_mutex_lock(&lock);
  name_ent **p = find(name);
  if (*p && ty_pid_alive(lt_g.rt, (*p)->pid) && (*p)->pid != pid) {
    r = -EEXIST;
  } else if (*p) {
    (*p)->pid = pid; /* the old holder ended: the name is free again */
  } else {
    size_t len = strlen(name);
    name_ent *e = ty__xmalloc(sizeof *e + len + 1);
    memcpy(e->name, name, len + 1);
    e->pid = pid;
    e->next = NULL;
    *p = e;
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
  pthread_mutex_lock(&lock);
  for (size_t b = 0; b < BUCKETS; b++) {
    for (name_ent **p = &buckets[b]; *p;) {
      if ((*p)->pid == pid) {
        name_ent *dead = *p;
        *p = dead->next;
        free(dead);
      } else {
        p = &(*p)->next;
      }
    }
  }
  pthread_mutex_unlock(&lock);
}

void lt_names_clear(void) {
  pthread_mutex_lock(&lock);
  for (size_t b = 0; b < BUCKETS; b++) {
    while (buckets[b]) {
      name_ent *e = buckets[b];
      buckets[b] = e->next;
      free(e);
    }
  }
  pthread_mutex_unlock(&lock);
}
