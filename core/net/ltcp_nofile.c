/*
 * ltcp_nofile.c - a listener out of file descriptors (EMFILE, ENFILE).
 *
 * The kernel keeps the connections it cannot hand over in the listening
 * socket's backlog, and the socket stays readable: accepting again at once
 * fails again at once (a busy loop), and waiting for a descriptor to free
 * leaves every new client hanging while idle ones hold them all. So:
 *  - the accept op is armed again only after a back-off (1 ms, doubling to
 *    64 ms; an accept that works ends it), and the acceptors hear "nofile"
 *    (an HTTP server then closes its connections that give their slot up
 *    most readily, lua/tycho/http.lua, fd_short);
 *  - when accepts have failed for SHED_AFTER_NS in a row (nothing freed a
 *    descriptor), the process's reserve descriptor is let go, and up to
 *    SHED_BATCH connections of the backlog are accepted, sent the
 *    listener's shed answer (an HTTP server's 503; TLS listeners: none) and
 *    closed; then the reserve is taken again. So a client is answered
 *    rather than left waiting, however long the shortage lasts.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/log.h"
#include "ltcp.h"
#include "lua/lapi.h"
#include "lua/lrun.h"

#define BACKOFF_MIN_NS 1000000u
#define BACKOFF_MAX_NS 64000000u
#define SHED_AFTER_NS 500000000ull
#define SHED_BATCH 64

/* One descriptor kept open so that, with every other one taken, a
 * connection can still be accepted to be answered. */
static pthread_mutex_t g_res_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_reserve = -1; /* guarded by g_res_mu */

void lt_nofile_reserve(void) {
  pthread_mutex_lock(&g_res_mu);
  if (g_reserve < 0) g_reserve = open("/dev/null", O_RDONLY | O_CLOEXEC);
  pthread_mutex_unlock(&g_res_mu);
}

static uint64_t now_ns(void) { return ty_runtime_now_ns(lt_ctx_get()->rt); }

void lt_nofile_clear(lt_listener *l) {
  l->nofile_since = l->retry_at = 0;
  l->backoff_ns = 0;
  l->nofile_told = false;
}

uint64_t lt_nofile_until(lt_listener *l) {
  if (!l->retry_at) return 0;
  if (now_ns() >= l->retry_at) {
    l->retry_at = 0;
    return 0;
  }
  return l->retry_at;
}

/* Answers and closes one connection nobody can serve: what the client
 * sent is read first (closing a socket with unread bytes resets it, and
 * the reset can destroy the answer before the client reads it). */
static void shed_one(int fd, const char *msg, size_t len) {
  char buf[4096];
  /* at most 64 KiB: a client that keeps sending must not hold the thread */
  for (int i = 0; i < 16 && recv(fd, buf, sizeof buf, MSG_DONTWAIT) > 0; i++) {
  }
  if (len) (void)!send(fd, msg, len, MSG_DONTWAIT | MSG_NOSIGNAL);
  shutdown(fd, SHUT_WR);
  close(fd);
}

/* Sheds up to SHED_BATCH connections of l's backlog; returns how many. */
static int shed_some(lt_listener *l) {
  pthread_mutex_lock(&l->mu);
  char *msg = NULL;
  size_t len = l->tls ? 0 : l->shed_len; /* no plain text to a TLS client */
  if (len) {
    msg = ty__xmalloc(len);
    memcpy(msg, l->shed, len);
  }
  pthread_mutex_unlock(&l->mu);
  int n = 0, fd;
  pthread_mutex_lock(&g_res_mu);
  if (g_reserve >= 0) close(g_reserve);
  g_reserve = -1;
  while (n < SHED_BATCH &&
         (fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
    shed_one(fd, msg, len);
    n++;
  }
  /* Another thread may take the descriptor meanwhile: then the next
   * shortage tries again. */
  g_reserve = open("/dev/null", O_RDONLY | O_CLOEXEC);
  pthread_mutex_unlock(&g_res_mu);
  free(msg);
  return n;
}

bool lt_nofile_hit(lt_listener *l, int res) {
  if (res != -EMFILE && res != -ENFILE) return false;
  bool shed, tell = false;
  pthread_mutex_lock(&l->mu);
  /* read under the lock: another thread's nofile_since, set with a later
   * clock read, would be past a `now` read before it (an unsigned
   * underflow below, shedding on the first shortage) */
  uint64_t now = now_ns();
  if (!l->nofile_since) l->nofile_since = now;
  l->backoff_ns = l->backoff_ns ? l->backoff_ns * 2 : BACKOFF_MIN_NS;
  if (l->backoff_ns > BACKOFF_MAX_NS) l->backoff_ns = BACKOFF_MAX_NS;
  /* Virtual time (specs) would hold the back-off until advanced. */
  l->retry_at =
      ty_runtime_is_virtual(lt_ctx_get()->rt) ? 0 : now + l->backoff_ns;
  shed = now > l->nofile_since && now - l->nofile_since >= SHED_AFTER_NS;
  if (shed && !l->nofile_told) tell = l->nofile_told = true;
  uint64_t since = l->nofile_since;
  pthread_mutex_unlock(&l->mu);
  if (tell)
    ty__logf(TY_LOG_WARN, -1, 0,
             "tcp listener: out of file descriptors for %.1f s: new "
             "connections are answered and closed until some free",
             (double)(now - since) * 1e-9);
  if (shed) shed_some(l);
  return true;
}

int lt_lst_l_shed(lua_State *L) {
  lst_ud *u = luaL_checkudata(L, 1, LT_LISTENER_MT);
  size_t len;
  const char *s = luaL_checklstring(L, 2, &len);
  lt_listener *l = u->l;
  if (!l) return lt_push_fail(L, "closed");
  char *copy = ty__xmalloc(len ? len : 1);
  memcpy(copy, s, len);
  pthread_mutex_lock(&l->mu);
  char *old = l->shed;
  l->shed = copy;
  l->shed_len = len;
  pthread_mutex_unlock(&l->mu);
  free(old); /* shed_some copies it under mu */
  lua_pushboolean(L, 1);
  return 1;
}
