/*
 * ltcp_close.c - closing a tycho.tcp connection, and the connections
 * detached from their owner (conn:_detach, conn:_attach). Above the send
 * side (a TLS close_notify goes out on the way), below the reading side
 * and starttls (scripts/floors/net.txt).
 */
#include "base/list.h"
#include "ltls.h"
#include "lua/lapi.h"
#include "lua/lstate.h"

/* The detached connections of this thread's worker (conn:_detach), linked
 * through their res: a borrowed state (the caller of tycho.run, lstate.c)
 * outlives its worker, so they are closed when it is given back, while
 * their worker's I/O still exists, instead of when the state closes. */
static _Thread_local lt_res *t_detached;

static void detached_add(lt_conn *c) {
  c->detached = true;
  TY_LIST_PUSH(&t_detached, &c->res, next, prev);
}

static void detached_remove(lt_conn *c) {
  if (!c->detached) return;
  c->detached = false;
  lt_res *r = &c->res;
  TY_LIST_UNLINK(&t_detached, r, next, prev);
  r->next = r->prev = NULL;
}

static void close_detached(void) {
  while (t_detached) lt_conn_close((lt_conn *)t_detached);
}

/* Closes c (idempotent): waiters wake and hear "closed", ops are cancelled,
 * the owner forgets it. The memory goes with the last reference. */
void lt_conn_close(lt_conn *c) {
  if (c->closed) return;
  lt_conn_flush_now(c); /* TLS: a close_notify on the way out */
  c->closed = true;
  detached_remove(c);
  if (c->owner) lt_res_remove(c->owner, &c->res);
  c->owner = NULL;
  if (c->reader) ty_actor_wake(c->reader);
  if (c->writer) ty_actor_wake(c->writer);
  if (c->io) {
    /* Write-behind bytes queued in the ring go out first: a send the
     * socket has room for ends inside the submit, before the cancel. */
    if (ty__io_op_busy(&c->wop) && !c->connecting) ty__io_submit(c->io);
    ty__io_cancel(c->io, &c->rop);
    ty__io_cancel(c->io, &c->wop);
  }
  lt_conn_try_release(c);
}

/* conn:_detach(): the connection leaves its owner (it is parked in a
 * worker's pool of idle connections: the HTTP client's, a cosocket's
 * setkeepalive) and lives on until closed or collected, whichever actor
 * ends. conn:_attach(): the running actor owns it again. Both on the
 * connection's worker, with nobody reading or writing it. */
int lt_conn_l_detach(lua_State *L) {
  lt_conn *c = lt_conn_check(L);
  if (!c) return lt_push_fail(L, "closed");
  if (c->reader || c->writer) return lt_push_fail(L, "busy");
  if (c->owner) lt_res_remove(c->owner, &c->res);
  c->owner = NULL;
  if (!c->detached) detached_add(c);
  lt_on_give_back(close_detached);
  lua_pushboolean(L, 1);
  return 1;
}

int lt_conn_l_attach(lua_State *L) {
  lt_conn *c = lt_conn_check(L);
  if (!c) return lt_push_fail(L, "closed");
  ty_actor *a = lt_net_actor(L, "tcp _attach");
  if (c->w != ty_worker_current())
    return luaL_error(L, "tcp _attach: the connection lives on another "
                         "worker");
  detached_remove(c);
  if (c->owner) lt_res_remove(c->owner, &c->res);
  c->owner = a->user;
  lt_res_add(c->owner, &c->res);
  lua_pushboolean(L, 1);
  return 1;
}
