/*
 * buf.c - the growable byte buffer (buf.h).
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"

void ty__buf_init(ty__buf *b) {
  b->data = NULL;
  b->len = b->cap = 0;
}

void ty__buf_free(ty__buf *b) {
  free(b->data);
  ty__buf_init(b);
}

void ty__buf_reset(ty__buf *b) { b->len = 0; }

int ty__buf_reserve(ty__buf *b, size_t need) {
  if (b->cap - b->len >= need) return 0;
  size_t cap = b->cap ? b->cap : 256;
  while (cap - b->len < need) {
    if (cap > SIZE_MAX / 2) {
      if (need > SIZE_MAX - b->len) return -ENOMEM;
      cap = b->len + need;
      break;
    }
    cap *= 2;
  }
  char *p = realloc(b->data, cap);
  if (!p) return -ENOMEM;
  b->data = p;
  b->cap = cap;
  return 0;
}

int ty__buf_append(ty__buf *b, const void *p, size_t n) {
  if (ty__buf_reserve(b, n)) return -ENOMEM;
  if (n) memcpy(b->data + b->len, p, n);
  b->len += n;
  return 0;
}
