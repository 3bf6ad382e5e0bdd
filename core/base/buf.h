/*
 * buf.h - a growable byte buffer (geometric growth), for messages being
 * encoded, function dumps and anything else built a piece at a time.
 */
#ifndef TY_BUF_H
#define TY_BUF_H

#include <stddef.h>

typedef struct ty__buf {
  char *data;
  size_t len, cap;
} ty__buf;

void ty__buf_init(ty__buf *b);
void ty__buf_free(ty__buf *b);
/* Empties b but keeps its memory for the next use. */
void ty__buf_reset(ty__buf *b);
/* Makes room for `need` more bytes: 0, or -ENOMEM when memory runs out (b
 * is unchanged then; the caller reports it). */
int ty__buf_reserve(ty__buf *b, size_t need);
/* Appends n bytes: 0 or -ENOMEM as ty__buf_reserve. */
int ty__buf_append(ty__buf *b, const void *p, size_t n);

#endif
