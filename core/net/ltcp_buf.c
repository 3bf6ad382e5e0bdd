/*
 * ltcp_buf.c - a tycho.tcp connection's read buffer: rb[r0..r1) holds the
 * received bytes not read yet. Below the TLS session (ltls.c), which opens
 * records into it, and the reading side (ltcp_conn.c); it calls no other
 * file of core/net (scripts/floors/net.txt).
 */
#include <string.h>

#include "ltcp.h"

/* Room for n more bytes at r1: slide the unread bytes down or grow. */
static void rb_reserve(lt_conn *c, size_t n) {
  if (c->rb && c->rcap - c->r1 >= n) return;
  size_t used = lt_conn_avail(c);
  if (c->r0 && c->rcap - used >= n && used < c->rcap / 2) {
    memmove(c->rb, c->rb + c->r0, used);
  } else {
    size_t cap = c->rcap ? c->rcap : 4096;
    while (cap - used < n) cap *= 2;
    char *nb = ty__xmalloc(cap);
    if (used) memcpy(nb, c->rb + c->r0, used);
    free(c->rb);
    c->rb = nb;
    c->rcap = cap;
  }
  c->scan -= c->scan >= c->r0 ? c->r0 : c->scan;
  c->r1 = used;
  c->r0 = 0;
}

char *lt_conn_rb_space(lt_conn *c, size_t n) {
  rb_reserve(c, n);
  return c->rb + c->r1;
}
