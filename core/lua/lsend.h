/*
 * lsend.h - the messages floor of core/lua (lsend.c): the one path from
 * values to a message, the runtime's own sends, taking and decoding.
 */
#ifndef TY_LSEND_H
#define TY_LSEND_H

#include "ldirect.h"

/* The one path by which an actor's values become a message: the n values
 * at L[first..] for `to`. Copied in place (ldirect.c) for an actor of this
 * worker when that pays, else encoded with the codec's limits (max_message).
 * `remote`: the message leaves this node whatever `to` says (a service
 * member on another node: to = 0); else a pid of another node makes it
 * remote. A remote encode refuses what cannot leave the process (the
 * codec's hooks: tcp connections) and what is larger than the other node
 * takes (remote_max). Returns 0 and *out (NULL when memory ran out), or -1
 * with err. Never raises (short of running out of memory). */
int lt_msg_make(lua_State *L, ty_pid to, bool remote, int first, int n,
                ty_msg **out, char *err, size_t errlen);
/* lt_msg_make for no receiver in particular (to = 0, not remote): raises
 * "tycho.<fname>: ..." when the values cannot be copied; NULL when memory
 * runs out. */
ty_msg *lt_encode_msg(lua_State *L, int first, int n, const char *fname);

/* Sends a reply (values at L[first..first+n)) or an error token. Raises
 * (fname in the message) when the values cannot be copied. Returns 0 (sent,
 * or its caller is gone), or LT_REPLY_NOMEM / LT_REPLY_LOST when memory
 * for it ran out (lsend.c, reply_nomem). */
enum { LT_REPLY_NOMEM = 1, LT_REPLY_LOST = 2 };
/* A worker's encoding buffer gives back what one big message grew it to
 * (past LT_BUF_KEEP): memory max_memory does not count, kept per worker
 * for the process's life otherwise (README, "Memory budgets"). */
#define LT_BUF_KEEP (1u << 20)
void lt_buf_trim(ty__buf *b);
int lt_send_reply(lua_State *L, ty_pid to, uint64_t ref, int first, int n,
                  const char *fname);
void lt_send_reply_err(ty_pid to, uint64_t ref, const char *token);
/* Sends a message whose payload is raw bytes. */
int lt_send_raw(ty_pid to, uint32_t kind, uint64_t ref, const void *data,
                size_t len);
/* The same with an explicit sender (a signal sent on behalf of another pid:
 * the dead actor an undeliverable link came back from). */
int lt_send_raw_from(ty_pid from, ty_pid to, uint32_t kind, uint64_t ref,
                     const void *data, size_t len);
/* Encodes the n values on top of L's stack, pops them and sends them as an
 * ordinary message (nothing is sent when they cannot be copied). */
void lt_send_values(lua_State *L, int n, ty_pid to);
/* Sends ("DOWN", target, reason) to the monitor `watcher`, from target. */
void lt_send_down(ty_pid watcher, ty_pid target, const char *reason,
                  size_t len);
/* Takes the first ordinary message (send or call) out of a's mailbox,
 * leaving signals in place and dropping late replies; NULL if none. */
ty_msg *lt_take_msg(ty_actor *a);
/* Decodes m onto L and frees it (la->inflight covers a decode that
 * raises); returns the count of values pushed. */
int lt_decode_msg(lua_State *L, lt_actor *la, ty_msg *m);

#endif
