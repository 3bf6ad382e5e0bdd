/*
 * ldirect.h - direct messages (ldirect.c), in the messages floor: between
 * actors of one worker, values copied in place rather than encoded.
 */
#ifndef TY_LDIRECT_H
#define TY_LDIRECT_H

#include "codec.h"
#include "lctx.h"

/* Creates the coroutine that holds the worker's direct values (*holder);
 * returns its registry ref. */
int lt_direct_store(lua_State *L, lua_State **holder);
/* A message carrying copies of the n values at L[first..] for `to`, when
 * `to` is an actor of this worker: the copy has the codec's semantics and
 * is charged to the receiver. NULL when it cannot go direct (another
 * worker or node, a value the copy refuses, memory): the caller then
 * encodes, which gives the codec's error or moves the handles. */
ty_msg *lt_direct_copy(lua_State *L, ty_pid to, int first, int n);
/* Strings at least this long are shared rather than copied twice. */
#define LT_DIRECT_STR_MIN 256
/* lt_direct_copy when it is worth it: scalars and short strings encode and
 * decode in less time than a slot costs (bench/results-direct.md), so only
 * tables and long strings go direct. Inline: the usual message is a few
 * scalars, and this is on the path of every send, call and reply. */
static inline ty_msg *lt_direct_new(lua_State *L, ty_pid to, int first, int n) {
  for (int i = first; i < first + n; i++) {
    int t = lua_type(L, i);
    if (t == LUA_TTABLE ||
        (t == LUA_TSTRING && lua_objlen(L, i) >= LT_DIRECT_STR_MIN))
      return lt_direct_copy(L, to, first, n);
  }
  return NULL;
}
/* Pushes a direct message's values onto L and returns how many; the
 * message no longer holds them. */
int lt_direct_push(lua_State *L, ty_msg *m);
static inline bool lt_msg_direct(const ty_msg *m) {
  return m->mark == LT_MARK_DIRECT;
}
/* Pushes m's values onto L (decoded, or handed over: ldirect.c) and
 * returns how many, or -1 with err for a malformed encoding. */
static inline int lt_msg_values(lua_State *L, ty_msg *m, char *err,
                                size_t errlen) {
  if (lt_msg_direct(m)) return lt_direct_push(L, m);
  return lt_codec_decode(L, m->data, m->len, err, errlen);
}
/* Direct messages whose values wait on this worker (specs look). */
int lt_direct_count(void);
/* A message that will never be read: its direct values, or the handles in
 * its encoding, are let go (on its worker, for a direct one). */
void lt_msg_release(ty_msg *m);

#endif
