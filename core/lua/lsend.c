/*
 * lsend.c - the messages floor of core/lua (docs/architecture.md, "The
 * floors of core/lua"): the one path by which values become a message
 * (lt_msg_make: copied in place for an actor of this worker, else
 * encoded, refusing what cannot leave the node when it goes to another),
 * the sends the runtime makes from C (replies, signals, notices), and the
 * taking and decoding of what arrives.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "lsend.h"

/* ---- the one path ------------------------------------------------------- */

/* Over remote_max (set by the cluster from NATS's max_payload): the text
 * of the refusal, into err. */
static bool too_big(size_t len, char *err, size_t errlen) {
  /* relaxed: written once by the cluster's start, before workers run. */
  size_t max =
      atomic_load_explicit(&lt_ctx_get()->remote_max, memory_order_relaxed);
  if (!max || len <= max) return false;
  snprintf(err, errlen,
           "message of %zu bytes is too big to cross nodes: NATS carries at "
           "most %zu (max_payload in nats-server's configuration)",
           len, max);
  return true;
}

/* The usual message, a few scalars (a number, a short string: ping-pong's
 * and the ring's), encoded straight into it: no walk, no worker buffer
 * (docs/performance.md, the Lua call/reply table, row "codec"). Bytes as
 * the codec writes them, so every receiver decodes them alike. */
#define SMALL_MSG 128

int lt_msg_make(lua_State *L, ty_pid to, bool remote, int first, int n,
                ty_msg **out, char *err, size_t errlen) {
  lt_worker *lw = lt_worker_get();
  remote = remote || (to && ty_pid_remote(lw->ctx->rt, to));
  if (!remote) {
    char small[SMALL_MSG];
    int len = lt_codec_encode_small(L, first, n, small, sizeof small);
    if (len >= 0 && (size_t)len <= lw->ctx->max_message) {
      ty_msg *m = ty_msg_try_new((size_t)len);
      if (m && len) memcpy(m->data, small, (size_t)len);
      *out = m;
      return 0;
    }
    ty_msg *m = to ? lt_direct_new(L, to, first, n) : NULL; /* this worker's */
    if (m) {
      *out = m;
      return 0;
    }
  }
  ty__buf_reset(&lw->buf);
  int r = lt_codec_encode_to(L, first, n, &lw->buf, lw->ctx->max_message,
                             remote ? LT_CODEC_TO_NODE : LT_CODEC_TO_HERE, err,
                             errlen);
  if (r || (remote && too_big(lw->buf.len, err, errlen))) {
    return -1;
  }
  ty_msg *m = ty_msg_try_new(lw->buf.len);
  if (m && lw->buf.len) /* else data may be NULL */
    memcpy(m->data, lw->buf.data, lw->buf.len);
  lt_buf_trim(&lw->buf);
  *out = m;
  return 0;
}

ty_msg *lt_encode_msg(lua_State *L, int first, int n, const char *fname) {
  ty_msg *m;
  char err[256];
  if (lt_msg_make(L, 0, false, first, n, &m, err, sizeof err))
    luaL_error(L, "tycho.%s: %s", fname, err);
  return m;
}

/* ---- sending from C ----------------------------------------------------- */

int lt_send_raw_from(ty_pid from, ty_pid to, uint32_t kind, uint64_t ref,
                     const void *data, size_t len) {
  ty_msg *m = ty_msg_try_new(len);
  if (!m) return -ENOMEM; /* a notice or reply lost: its receiver times out */
  if (len) memcpy(m->data, data, len);
  m->to = to;
  m->from = from; /* 0: ty_send fills in the running actor */
  m->kind = kind;
  m->ref = ref;
  int r = ty_send(lt_ctx_get()->rt, m);
  if (r) ty_msg_free(m);
  return r;
}

int lt_send_raw(ty_pid to, uint32_t kind, uint64_t ref, const void *data,
                size_t len) {
  return lt_send_raw_from(0, to, kind, ref, data, len);
}

void lt_buf_trim(ty__buf *b) {
  if (b->cap <= LT_BUF_KEEP) return;
  ty__buf_free(b);
  ty__buf_init(b);
}

/* A reply that cannot be allocated (max_memory, ulimit -v) reaches its
 * caller as nil, "nomem", a message of a few bytes, rather than leaving it
 * to its timeout: LT_REPLY_NOMEM (the call answered), or LT_REPLY_LOST when
 * not even that could be allocated (the call stays owed: the caller gets
 * "dead" when the actor ends). */
static int reply_nomem(ty_pid to, uint64_t ref) {
  int r = lt_send_raw(to, LT_REPLY_ERR, ref, "nomem", 5);
  return r == -ENOMEM ? LT_REPLY_LOST : LT_REPLY_NOMEM;
}

int lt_send_reply(lua_State *L, ty_pid to, uint64_t ref, int first, int n,
                  const char *fname) {
  ty_msg *m;
  char err[256];
  if (lt_msg_make(L, to, false, first, n, &m, err, sizeof err)) {
    if (strstr(err, "out of memory")) return reply_nomem(to, ref);
    return luaL_error(L, "tycho.%s: %s", fname, err);
  }
  if (!m) return reply_nomem(to, ref);
  m->to = to;
  m->kind = LT_REPLY;
  m->ref = ref;
  if (ty_send(lt_worker_get()->ctx->rt,
              m)) { /* it ended meanwhile: it times out */
    if (lt_msg_direct(m)) lt_msg_release(m);
    ty_msg_free(m);
  }
  return 0;
}

void lt_send_reply_err(ty_pid to, uint64_t ref, const char *token) {
  lt_send_raw(to, LT_REPLY_ERR, ref, token, strlen(token));
}

void lt_send_values(lua_State *L, int n, ty_pid to) {
  lt_worker *lw = lt_worker_get();
  char err[256];
  ty__buf_reset(&lw->buf);
  if (lt_codec_encode(L, lua_gettop(L) - n + 1, n, &lw->buf, SIZE_MAX, err,
                      sizeof err) == 0)
    lt_send_raw(to, LT_MSG, 0, lw->buf.data, lw->buf.len);
  lua_pop(L, n);
}

void lt_send_down(ty_pid watcher, ty_pid target, const char *reason,
                  size_t len) {
  ty__buf b;
  ty__buf_init(&b);
  if (lt_codec_put_string(&b, "DOWN", 4) == 0 &&
      lt_codec_put_number(&b, (double)target) == 0 &&
      lt_codec_put_string(&b, reason, len) == 0) {
    ty_msg *m = ty_msg_try_new(b.len);
    if (!m) goto out; /* out of memory: the watcher is not told */
    memcpy(m->data, b.data, b.len);
    m->to = watcher;
    m->from = target;
    m->kind = LT_MSG;
    m->aux = LT_AUX_DOWN;
    if (ty_send(lt_ctx_get()->rt, m)) ty_msg_free(m);
  }
out:
  ty__buf_free(&b);
}

/* ---- receiving ---------------------------------------------------------- */

/* A reply that came after its call ended: dropped (out of line: rare, and
 * lt_take_msg is on every recv's path). */
__attribute__((noinline, cold)) static void drop_late(ty_actor *a, ty_msg *prev,
                                                      ty_msg *m) {
  ty_mbox_remove(a, prev, m);
  lt_msg_release(m);
  ty_msg_free(m);
}

ty_msg *lt_take_msg(ty_actor *a) {
  ty_msg *prev = NULL, *m = ty_mbox_first(a);
  while (m) {
    ty_msg *next = ty_mbox_next(m);
    if (m->kind == LT_MSG || m->kind == LT_CALL) {
      ty_mbox_remove(a, prev, m);
      return m;
    }
    if (m->kind >= TY_MSG_SIGNAL) {
      prev = m; /* left for process_signals */
    } else {
      drop_late(a, prev, m);
    }
    m = next;
  }
  return NULL;
}

static int decode_into(lua_State *co, ty_msg *m) {
  char err[256];
  int n = lt_msg_values(co, m, err, sizeof err);
  if (n < 0) {
    lua_pushnil(co);
    lua_pushfstring(co, "bad message: %s", err);
    n = 2;
  }
  return n;
}

/* Decodes m onto L and frees it. A decode can raise (out of memory, or a
 * __gc metamethod run by the collector): la->inflight lets whoever catches
 * that free m. */
int lt_decode_msg(lua_State *L, lt_actor *la, ty_msg *m) {
  la->inflight = m;
  int n = decode_into(L, m);
  la->inflight = NULL;
  ty_msg_free(m);
  return n;
}
