/*
 * shtab_store.h - the store behind every write of the shared table
 * (shtab.c), for the lists (shtab_list.c). Internal to core/store.
 */
#ifndef TY_SHTAB_STORE_H
#define TY_SHTAB_STORE_H

#include "shtab.h"

#define KEEP_TTL 8 /* mode bit: keep the entry's expiry (cas, lists) */
#define DELETE 16  /* mode bit: remove the entry (v is ignored) */

/* The store behind set/add/replace/cas/lists (mode: shtab.h's bits, and
 * the two above). expect: store only when the live value equals it (then
 * 1 for a match, 0 for none). Otherwise 0, TY_SHTAB_EVICTED, or -EEXIST,
 * -ENOENT, -ENOMEM. */
int ty__shtab_store(ty_shtab *t, const char *k, size_t klen, const ty_shval *v,
                    uint64_t ttl, int mode, ty_shnow now,
                    const ty_shval *expect);

#endif
