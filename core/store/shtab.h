/*
 * shtab.h - a shared table: string keys to values, read and written by
 * every thread at once (tycho.shared.table's store, core/lua/lshared.c).
 *
 * Plain C, no Lua: a value is a number, a string, a list of byte strings,
 * or bytes the caller encoded (the binding uses the message codec); the
 * table copies them in and out, never hands out a pointer into itself.
 *
 * Semantics (DESIGN.md §7, "Shared tables"):
 *  - `capacity` bounds the bytes of the entries (key + value + SHTAB_OVERHEAD
 *    each); when a store needs room, entries go in least-recently-used order
 *    across the whole table (a get is a use), expired ones first in that
 *    order; evicting a live entry makes the store return TY_SHTAB_EVICTED;
 *    a store never evicts the old value of its own key, and one that costs
 *    more than the capacity fails with -ENOMEM;
 *  - every entry's memory also passes the `charge` hook (the process's
 *    max_memory): refused, the store fails with -ENOMEM and changes nothing;
 *  - times are nanoseconds of the caller's clock (`now.ttl`, so a virtual
 *    clock works); `now.lru` orders uses (a real monotonic clock);
 *  - an expired entry reads as absent (get_stale still sees it until it is
 *    removed).
 * Concurrency: docs/architecture.md, "Shared tables" (sharded locks).
 */
#ifndef TY_SHTAB_H
#define TY_SHTAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"

/* Bytes an entry costs beyond its key and value (its header). */
#define TY_SHTAB_OVERHEAD 64

enum { TY_SHV_NUM = 1, TY_SHV_STR, TY_SHV_BYTES, TY_SHV_LIST };

/* A value: a number (num), or len bytes at data of the other kinds (a list
 * is held as items, each a u32 length then its bytes). */
typedef struct ty_shval {
  int kind;
  double num;
  const char *data;
  size_t len;
} ty_shval;

typedef struct ty_shnow {
  uint64_t ttl; /* the clock TTLs follow */
  uint64_t lru; /* a real monotonic clock: the order of uses */
} ty_shnow;

typedef struct ty_shtab ty_shtab;

/* Charges delta bytes (positive: about to allocate; negative: freed).
 * Returns 0, or -1 to refuse a positive one. */
typedef int (*ty_shtab_charge)(int64_t delta);

/* NULL when out of memory. */
ty_shtab *ty_shtab_new(size_t capacity, ty_shtab_charge charge);
/* Frees the table and everything in it (no other thread may use it). */
void ty_shtab_free(ty_shtab *t);

/* Store modes. */
enum {
  TY_SHTAB_SET = 0,
  TY_SHTAB_ADD = 1,     /* only when absent (or expired): else -EEXIST */
  TY_SHTAB_REPLACE = 2, /* only when present: else -ENOENT */
  TY_SHTAB_SAFE = 4     /* or'ed: never evict a live entry (-ENOMEM) */
};
#define TY_SHTAB_EVICTED 1

/* Stores v under key with ttl_ns (0: no expiry). 0, TY_SHTAB_EVICTED, or
 * -EEXIST / -ENOENT (modes), -ENOMEM (no room even after eviction, or the
 * charge refused). */
int ty_shtab_set(ty_shtab *t, const char *key, size_t klen, const ty_shval *v,
                 uint64_t ttl_ns, int mode, ty_shnow now);

/* Copies key's value into out (reset first; v->data points into out).
 * 0, or -ENOENT. stale: also an expired entry not yet removed, and then
 * *expired says which it was. *ttl_left gets the ns left (0: none). */
int ty_shtab_get(ty_shtab *t, const char *key, size_t klen, ty_shnow now,
                 bool stale, ty__buf *out, ty_shval *v, bool *expired);

/* Adds n to a number: 0 and *res, -ENOENT when absent and !has_init (else
 * it starts at init, with init_ttl_ns), -EINVAL when not a number,
 * -ENOMEM, or TY_SHTAB_EVICTED (created, evicting). */
int ty_shtab_incr(ty_shtab *t, const char *key, size_t klen, double n,
                  bool has_init, double init, uint64_t init_ttl_ns,
                  ty_shnow now, double *res);

/* Replaces old with new when the value equals old (same kind and bytes;
 * numbers by ==): 1, 0 when it differs or is absent, or -ENOMEM. */
int ty_shtab_cas(ty_shtab *t, const char *key, size_t klen, const ty_shval *old,
                 const ty_shval *new_, ty_shnow now);

/* 0 or -ENOENT. */
int ty_shtab_delete(ty_shtab *t, const char *key, size_t klen);
/* Sets the ttl of a live entry (0: none): 0 or -ENOENT. */
int ty_shtab_expire(ty_shtab *t, const char *key, size_t klen, uint64_t ttl_ns,
                    ty_shnow now);
/* The ns left: 0 and *left (0: no expiry), or -ENOENT. */
int ty_shtab_ttl(ty_shtab *t, const char *key, size_t klen, ty_shnow now,
                 uint64_t *left);

/* Lists: pushes item at the head (left) or tail; the new length, -EINVAL
 * when the value is not a list, -ENOMEM. */
long ty_shtab_push(ty_shtab *t, const char *key, size_t klen, const char *item,
                   size_t ilen, bool left, ty_shnow now);
/* Pops into out: 0, -ENOENT (absent or empty), -EINVAL (not a list). */
int ty_shtab_pop(ty_shtab *t, const char *key, size_t klen, bool left,
                 ty_shnow now, ty__buf *out);
/* The length, 0 when absent, -EINVAL when not a list. */
long ty_shtab_llen(ty_shtab *t, const char *key, size_t klen, ty_shnow now);

/* Appends up to max (0: all) live keys to out, each as a u32 length and its
 * bytes; returns how many. -ENOMEM when out cannot grow. */
long ty_shtab_keys(ty_shtab *t, size_t max, ty_shnow now, ty__buf *out);
/* Live entries. */
size_t ty_shtab_count(ty_shtab *t, ty_shnow now);
/* Removes every entry. */
void ty_shtab_flush(ty_shtab *t);
/* Makes every entry expired (OpenResty's flush_all). */
void ty_shtab_expire_all(ty_shtab *t, ty_shnow now);
/* Removes up to max (0: all) expired entries; how many. */
size_t ty_shtab_flush_expired(ty_shtab *t, size_t max, ty_shnow now);
size_t ty_shtab_capacity(const ty_shtab *t);
/* capacity minus the bytes held (0 when over). */
size_t ty_shtab_free_space(const ty_shtab *t);
/* The bytes held. */
size_t ty_shtab_used(const ty_shtab *t);

#endif
