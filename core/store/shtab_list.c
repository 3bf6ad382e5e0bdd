/*
 * shtab_list.c - the shared table's lists (OpenResty's lpush ...), built
 * on the store of shtab.c (shtab_store.h).
 */
#include <errno.h>
#include <string.h>

#include "shtab.h"
#include "shtab_store.h"

/* ---- lists (OpenResty's lpush ...) -------------------------------------- */

/* A list's value is its items, each a u32 length then the bytes. A push or
 * a pop reads the list, builds the new one and stores it only if the list
 * is still what it read (as cas does), retrying otherwise: the shard lock
 * is never held across an allocation or an eviction. */

static int read_list(ty_shtab *t, const char *key, size_t klen, ty_shnow now,
                     ty__buf *cur, ty_shval *v) {
  int rc = ty_shtab_get(t, key, klen, now, false, cur, v, NULL);
  if (rc) return rc;
  return v->kind == TY_SHV_LIST ? 0 : -EINVAL;
}

static long items(const ty_shval *v) {
  long n = 0;
  for (size_t at = 0; at + 4 <= v->len; n++) {
    uint32_t l;
    memcpy(&l, v->data + at, 4);
    at += 4 + (size_t)l;
  }
  return n;
}

long ty_shtab_push(ty_shtab *t, const char *key, size_t klen, const char *item,
                   size_t ilen, bool left, ty_shnow now) {
  ty__buf cur, nb;
  ty__buf_init(&cur);
  ty__buf_init(&nb);
  uint32_t l = (uint32_t)ilen;
  long rc;
  if (ilen > UINT32_MAX) return -ENOMEM;
  for (;;) {
    ty_shval v;
    rc = read_list(t, key, klen, now, &cur, &v);
    if (rc == -EINVAL || rc == -ENOMEM) break;
    ty__buf_reset(&nb);
    if (!rc && !left && ty__buf_append(&nb, v.data, v.len)) goto nomem;
    if (ty__buf_append(&nb, &l, 4) || ty__buf_append(&nb, item, ilen))
      goto nomem;
    if (!rc && left && ty__buf_append(&nb, v.data, v.len)) goto nomem;
    ty_shval nv = {TY_SHV_LIST, 0, nb.data, nb.len};
    long len = rc ? 1 : items(&v) + 1;
    int s = rc ? ty__shtab_store(t, key, klen, &nv, 0, TY_SHTAB_ADD, now, NULL)
               : ty__shtab_store(t, key, klen, &nv, 0, KEEP_TTL, now, &v);
    if (s == -EEXIST || (!rc && s == 0)) continue; /* changed meanwhile */
    rc = s < 0 ? s : len;
    break;
  }
  ty__buf_free(&cur);
  ty__buf_free(&nb);
  return rc;
nomem:
  ty__buf_free(&cur);
  ty__buf_free(&nb);
  return -ENOMEM;
}

int ty_shtab_pop(ty_shtab *t, const char *key, size_t klen, bool left,
                 ty_shnow now, ty__buf *out) {
  ty__buf cur;
  ty__buf_init(&cur);
  int rc;
  for (;;) {
    ty_shval v;
    rc = read_list(t, key, klen, now, &cur, &v);
    if (rc) break;
    size_t at = 0, first = 0, last = 0;
    while (at + 4 <= v.len) { /* the last item starts at `last` */
      uint32_t l;
      memcpy(&l, v.data + at, 4);
      last = at;
      at += 4 + (size_t)l;
    }
    if (!v.len) {
      rc = -ENOENT;
      break;
    }
    size_t from = left ? first : last, ilen;
    uint32_t l;
    memcpy(&l, v.data + from, 4);
    ilen = l;
    ty_shval nv = {TY_SHV_LIST, 0, v.data, v.len - 4 - ilen};
    if (left) nv.data = v.data + 4 + ilen;
    int s = nv.len ? ty__shtab_store(t, key, klen, &nv, 0, KEEP_TTL, now, &v)
                   : ty__shtab_store(t, key, klen, NULL, 0, DELETE, now, &v);
    if (s == 0) continue; /* changed meanwhile */
    if (s < 0) {
      rc = s;
      break;
    }
    ty__buf_reset(out);
    rc = ty__buf_append(out, v.data + from + 4, ilen) ? -ENOMEM : 0;
    break;
  }
  ty__buf_free(&cur);
  return rc;
}

long ty_shtab_llen(ty_shtab *t, const char *key, size_t klen, ty_shnow now) {
  ty__buf cur;
  ty__buf_init(&cur);
  ty_shval v;
  int rc = read_list(t, key, klen, now, &cur, &v);
  long n = rc == -ENOENT ? 0 : rc ? rc : items(&v);
  ty__buf_free(&cur);
  return n;
}
