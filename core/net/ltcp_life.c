/*
 * ltcp_life.c - a tycho.tcp connection's references and descriptor, the
 * re-arming of its recv, and the check of its Lua handle: what the send
 * side (ltcp_write.c), starttls (ltls_lua.c) and the reading side
 * (ltcp_conn.c) share, below all of them (scripts/floors/net.txt).
 */
#include <unistd.h>

#include "ltls.h"
#include "lua/lapi.h"

void lt_conn_unref(lt_conn *c) {
  if (--c->refs > 0) return;
  ty__assert(c->closed && c->fd < 0);
  lt_tls_free(c->tls);
  free(c->rb);
  free(c->wb);
  free(c->wold);
  free(c);
}

/* Closes the descriptor once closed and no op is busy any more. */
void lt_conn_try_release(lt_conn *c) {
  if (!c->closed || c->fd < 0) return;
  if (ty__io_op_busy(&c->rop) || ty__io_op_busy(&c->wop)) return;
  if (c->io) ty__io_close(c->io, c->fd);
  else close(c->fd);
  c->fd = -1;
}

/* Does a waiting reader need more than the buffer holds? Then keep the
 * recv going whatever the buffer's size. */
bool lt_conn_reader_hungry(const lt_conn *c) {
  if (!c->reader) return false;
  if (c->rmode == RM_COUNT) return lt_conn_avail(c) < c->rwant;
  return c->rmode != RM_SOME || lt_conn_avail(c) == 0;
}

static bool want_recv(const lt_conn *c) {
  return !c->closed && !c->rerr && !c->moving && c->io &&
         (lt_conn_avail(c) < READ_HIGH || lt_conn_reader_hungry(c));
}

/* Arms the recv if the connection should be reading and is not. */
static void ensure_recv(lt_conn *c) {
  if (ty__io_op_busy(&c->rop) || !want_recv(c)) return;
  int err = ty__io_recv(c->io, &c->rop, c->fd);
  if (err) c->rerr = err;
  else c->refs++;
}

void lt_conn_want_input(lt_conn *c) { ensure_recv(c); }

/* The open connection at 1, or NULL (closed or moved). */
lt_conn *lt_conn_check(lua_State *L) {
  conn_ud *u = luaL_checkudata(L, 1, LT_CONN_MT);
  if (u->c && u->c->closed) return NULL;
  return u->c;
}
