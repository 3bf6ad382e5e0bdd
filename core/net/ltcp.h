/*
 * ltcp.h - tycho.tcp's connections and listeners, shared by its files:
 *
 *   ltcp_conn.c     a connection: reading, its Lua methods
 *   ltcp_write.c    a connection: writing (and what TLS has to send)
 *   ltcp_listen.c   a listener: accepts on every worker, hand-over
 *   ltcp_transit.c  connections and listeners inside messages
 *   ltcp.c          connect, and the tycho.tcp table
 *   ltls.c          TLS on a connection (ltls.h)
 *
 *
 * A connection (lt_conn) lives on one worker at a time: its ops are armed
 * on that worker's ty__io and only that worker touches it, so it needs no
 * atomics. It is reference counted (the Lua userdata, each busy op, each
 * waiting actor) and freed when the last one goes; closing it cancels its
 * ops and closes the descriptor once they have ended. Its owner (an actor)
 * lists it among its resources, so an actor that dies closes what it owns.
 *
 * Reading: a multishot recv is armed at the first read and stays armed;
 * what arrives is appended to the connection's buffer (the backend's buffer
 * goes straight back), and a waiting reader is woken only once its request
 * (n bytes, a line, everything) can be answered. Above READ_HIGH buffered
 * bytes that nobody asked for yet, the recv is cancelled, and armed again
 * when a read drains the buffer: a slow reader pushes back on the peer.
 *
 * Writing: one send() straight from the Lua string; what the kernel did not
 * take is copied to the connection and sent by a backend op while the
 * writer waits. The worker never blocks. Write-behind (io_uring only, turned
 * on per connection by tycho.http): a write copies its bytes behind the send
 * op and returns at once; the op's submission goes out with the worker's
 * next io_uring_enter, batched with everything else of that loop turn
 * (ltcp_write.c says how errors, ordering, backpressure and close work).
 *
 * TLS (ltls.h): a connection may carry an OpenSSL session working on
 * memory buffers. What arrives is ciphertext: it goes into the session,
 * and the plaintext it yields lands in the same read buffer, so reading is
 * the same code for both. Writes seal the plaintext into ciphertext that
 * goes out through the same send path (lt_conn_pump), together with what
 * the session writes on its own (handshake flights, alerts). The session
 * never touches the socket, so neither backend notices it.
 *
 * Moving: a connection inside a message (or spawn arguments) travels as a
 * token of the transit table (lnet.c). Once the sender's encode succeeds
 * the connection leaves its worker: its recv is settled, the backend
 * forgets the descriptor and the sender's userdata goes empty (reads then
 * say "closed"). The receiver's decode adopts it on its own worker. A
 * listener is shared instead: every copy refers to the same listener.
 *
 * Listening: a listener is one socket, shared by every actor that holds a
 * copy. Each worker on which an actor accepts keeps a multishot accept
 * armed on it; each accepted descriptor goes to the actor that has waited
 * longest, on whatever worker (a nudge message wakes it there), or to a
 * queue when nobody waits, dealt to the accepting workers in turn (another
 * worker's entry is taken only after LT_QUEUE_KEEP_NS). So connections spread over the acceptors of
 * every worker in turn, whichever worker's ring the kernel woke (it wakes
 * only one: io_uring's accept polls are exclusive), and none is stranded
 * on a worker where nobody accepts (as with one SO_REUSEPORT socket per
 * worker, where the kernel picks the socket by hash). Only the creator
 * closes the listener for everyone (close(), or its death): waiters hear
 * "closed" and a shutdown ends each worker's accept op on its worker.
 */
#ifndef TY_LTCP_H
#define TY_LTCP_H

#include <pthread.h>
#include <sys/socket.h>

#include "io/io.h"
#include "lnet.h"

#define LT_CONN_MT "tycho.tcp.conn"
#define LT_LISTENER_MT "tycho.tcp.listener"

/* A message kind (below the signals, unknown to lactor.c, which drops it
 * should recv meet it): wakes an actor waiting in an LT_W_EXT wait from
 * another worker; sent with ref UINT64_MAX, which that wait matches. */
#define LT_NUDGE 0xF0u

/* Kinds of handles that travel in messages. */
enum { LT_H_CONN = 1, LT_H_LISTENER = 2 };

#define DEFAULT_TIMEOUT_NS (60 * (int64_t)1000000000)
#define READ_HIGH (256 * 1024) /* buffered bytes that pause the recv */
#define ACCEPT_QUEUE 64        /* accepted, untaken: pause accepting */
#define DEFAULT_BACKLOG 511
#define LT_EOF 1 /* rerr: the peer closed its side */
/* rerr / werr: the TLS session failed (its reason: lt_tls_reason). Not an
 * errno value. */
#define LT_ETLS (-0x7001)

enum { RM_COUNT = 0, RM_LINE, RM_ALL, RM_SOME };

/* ---- connections (ltcp_conn.c) ------------------------------------------ */

typedef struct lt_tls lt_tls; /* ltls.c */

typedef struct lt_conn {
  lt_res res; /* in the owner's resources: first, for the cast back */
  int fd;
  int refs;     /* userdata + busy ops + waiting actors */
  ty_worker *w; /* home worker; NULL in transit */
  ty__io *io;
  lt_actor *owner; /* whose resources list it */
  ty__io_op rop, wop;
  char *rb;                  /* received, not read yet: rb[r0..r1) */
  size_t r0, r1, rcap, scan; /* scan: "*l" looked for '\n' up to here */
  int rerr;                  /* 0, LT_EOF or -errno: after the buffered bytes */
  ty_actor *reader, *writer;
  uint8_t rmode;
  size_t rwant;
  char *wb; /* unsent bytes of the current write: wb[woff..wlen) */
  size_t woff, wlen, wcap, wdirect; /* wdirect: sent before the op */
  int werr;                         /* sticky: a failed (or timed out) write */
  char *wold;  /* write-behind: the buffer the busy send still reads, kept
                 until the op ends (wb was regrown under it) */
  bool behind; /* write-behind: writes return once queued (ltcp_write.c) */
  int cres;    /* connect's result */
  bool connecting, closed;
  bool detached; /* in its worker's list of detached connections (res) */
  bool moving;   /* leaving this worker: no re-arming */
  bool shut_wr;  /* TLS: shutdown(SHUT_WR) once the queued bytes are out */
  int64_t t_connect, t_send, t_read;
  lt_tls *tls; /* NULL: plain TCP */
} lt_conn;

typedef struct conn_ud {
  lt_conn *c; /* NULL: closed here, or moved to another actor */
} conn_ud;

lt_conn *lt_conn_new(int fd, lt_actor *owner);
/* Closes c (idempotent): waiters wake and hear "closed", ops are cancelled,
 * the owner forgets it. The memory goes with the last reference
 * (ltcp_close.c). */
void lt_conn_close(lt_conn *c);
/* conn:_detach(), conn:_attach() (ltcp_close.c). */
int lt_conn_l_detach(lua_State *L);
int lt_conn_l_attach(lua_State *L);
void lt_conn_unref(lt_conn *c);
/* Closes the descriptor once closed and no op is busy any more. */
void lt_conn_try_release(lt_conn *c);
/* Pushes a userdata for c (NULL: a closed one). */
void lt_conn_push(lua_State *L, lt_conn *c);
void lt_conn_metatable(lua_State *L);
/* The open connection at stack index 1, or NULL (closed or moved); raises
 * when it is not a connection. */
lt_conn *lt_conn_check(lua_State *L);
/* The stable token for a read or write error of c (LT_ETLS: the reason;
 * ltls.c). */
const char *lt_conn_errtok(const lt_conn *c, int err);
/* Bytes received and not read yet. */
static inline size_t lt_conn_avail(const lt_conn *c) { return c->r1 - c->r0; }
/* Room for n more received bytes at rb + r1 (the caller adds to r1;
 * ltcp_buf.c). */
char *lt_conn_rb_space(lt_conn *c, size_t n);
/* Arms the recv if the connection should be reading and is not. */
void lt_conn_want_input(lt_conn *c);
/* Does a waiting reader need more than the buffer holds? Then the recv
 * goes on whatever the buffer's size. */
bool lt_conn_reader_hungry(const lt_conn *c);
/* Sends what is queued: wb[woff..wlen), then what the TLS session has to
 * send. Does nothing while the send op is busy (its end goes on). */
void lt_conn_pump(lt_conn *c);
/* Nothing queued and no send under way. */
bool lt_conn_flushed(const lt_conn *c);
/* TLS, at close: a close_notify, sent if the socket takes it at once. */
void lt_conn_flush_now(lt_conn *c);
/* The send op's callback (ltcp_write.c). */
void lt_conn_on_write(ty__io_op *op, int res, const char *data);
/* Turns write-behind on (io_uring, plain TCP only; false otherwise). */
bool lt_conn_behind(lt_conn *c, bool on);
/* Write-behind bytes still going out: tries (briefly) to finish them before
 * the connection leaves its worker. True when nothing is left in flight. */
bool lt_conn_settle_behind(lt_conn *c);
/* conn:write, conn:shutdown (ltcp_write.c). */
int lt_conn_l_write(lua_State *L);
int lt_conn_l_shutdown(lua_State *L);
/* The open connection at idx, or NULL (not one, closed or moved). */
lt_conn *lt_conn_test(lua_State *L, int idx);
/* Puts data back in front of c's unread bytes: the next read gets it
 * first (tycho.http hands a taken-over connection its early bytes). */
void lt_conn_unread(lt_conn *c, const char *data, size_t n);

/* ---- listeners (ltcp_listen.c) ------------------------------------------ */

typedef struct lt_listener lt_listener;

/* An actor waiting in accept. Listed (under the listener's mutex) until a
 * connection is handed to it or it stops waiting; only its own worker
 * frees it. */
typedef struct lt_waiter {
  struct lt_waiter *next, *prev;
  struct lt_waiter *hnext, *hprev; /* handed a connection, not taken yet */
  bool listed, handed;             /* under mu */
  int fd;                          /* handed over (under mu); -1: nothing yet */
  uint64_t until; /* the accept's own deadline (UINT64_MAX: none) */
  ty_actor *a;    /* for its own worker */
  ty_pid pid;     /* for the others: they nudge it */
  unsigned worker;
  lt_listener *l;
} lt_waiter;

/* One worker's accept op: only that worker touches it. */
typedef struct lt_lslot {
  lt_listener *l;
  ty__io_op op;       /* multishot accept; busy holds a listener reference */
  unsigned gen;       /* the listener's gen when the op was armed */
  _Atomic bool used;  /* an accept was armed here once (read by the watchdog) */
  _Atomic bool uring; /* ... on an io_uring */
} lt_lslot;

/* Accepted, not taken yet: meant for `worker`'s acceptor until `at` is
 * LT_QUEUE_KEEP_NS old (ltcp_listen.c, q_push). */
typedef struct lt_qent {
  int fd;
  unsigned worker;
  uint64_t at;
} lt_qent;
#define LT_QUEUE_KEEP_NS 1000000

struct lt_listener {
  _Atomic int refs;    /* userdata, transit entries, busy ops, waiters, owner */
  _Atomic bool closed; /* set once by the creator, under mu */
  int fd;              /* open until the last reference goes */
  struct sockaddr_storage addr; /* bound (the port resolved) */
  struct ssl_ctx_st *tls;       /* TLS listener: accepted connections use it */
  lt_res res;                   /* in the creator's resources */
  lt_actor *owner;    /* the creator, until it closes it (its worker only) */
  pthread_mutex_t mu; /* guards q, err and the waiters */
  lt_qent *q;         /* accepted, nobody waiting: q[qh..qh+qn) mod qcap */
  unsigned qh, qn, qcap, rr; /* rr: the worker the next one is meant for */
  int err;                   /* an accept op failed: told to the next taker */
  lt_waiter *wh, *wt;        /* oldest first */
  lt_waiter *handed;         /* waiters with a connection they have not taken */
  int backlog;
  /* Moving accepts off a stuck worker (ltcp_listen.c, lst_on_stuck): the
   * socket is replaced under the same descriptor; an accept op that ends
   * with an error across a replacement is armed again, not reported. */
  _Atomic unsigned gen;
  _Atomic bool swapping;
  struct lt_listener *gnext, *gprev; /* every listener (g_lst_mu) */
  /* Out of descriptors (ltcp_nofile.c), under mu: since when accepts fail
   * with EMFILE/ENFILE (0: they do not), the back-off before the next one
   * is armed (runtime ns), and the answer a shed connection gets. */
  uint64_t nofile_since, retry_at;
  uint32_t backoff_ns;
  bool nofile_told;
  char *shed;
  size_t shed_len;
  unsigned n;
  lt_lslot slots[]; /* one per worker */
};

typedef struct lst_ud {
  lt_listener *l; /* NULL: closed (by this copy) */
  bool owner;     /* the creator's userdata: close() closes for everyone */
} lst_ud;

void lt_lst_ref(lt_listener *l);
void lt_lst_unref(lt_listener *l);
/* Pushes a userdata for l, taking a reference; `owner`: the creator's. */
void lt_lst_push(lua_State *L, lt_listener *l, bool owner);
void lt_lst_metatable(lua_State *L);
/* tycho.tcp.listen{host=, port=, backlog=, tls=} -> listener | nil, err */
int lt_tcp_listen(lua_State *L);

/* ---- out of descriptors (ltcp_nofile.c) --------------------------------- */

/* Keeps one descriptor in reserve for the whole process (idempotent). */
void lt_nofile_reserve(void);
/* An accept op of l ended with res: true when it ran out of descriptors
 * (EMFILE/ENFILE), which is then dealt with (back-off, and shedding when
 * it lasts). */
bool lt_nofile_hit(lt_listener *l, int res);
/* Under mu: an accept worked; the back-off ends. */
void lt_nofile_clear(lt_listener *l);
/* Under mu: the runtime time before which no accept is armed, or 0. */
uint64_t lt_nofile_until(lt_listener *l);
/* listener:_shed(bytes): what a connection shed for want of descriptors
 * is sent before it is closed (an HTTP server's 503). */
int lt_lst_l_shed(lua_State *L);

/* ---- handles in messages (ltcp_transit.c) ------------------------------- */

/* The codec hooks (codec.h) for userdata with one of our metatables. */
extern const lt_codec_hooks lt_tcp_hooks;
/* Releases a handle whose message was never decoded. */
void lt_tcp_drop(int kind, void *p);
/* The transit table: handles inside encoded messages, keyed by token. A
 * token is taken while encoding; the handle is put under it once the whole
 * encode succeeded, and taken out by the decode on the receiving side. */
uint64_t lt_transit_token(void);
void lt_transit_put(uint64_t token, int kind, void *p);
/* The handle under token, removed from the table; NULL if none. */
void *lt_transit_take(uint64_t token, int *kind);
/* Counts L among the worker states that loaded the net fields (once per
 * state); when the last of them closes, the handles still in the transit
 * table are dropped. */
void lt_transit_count_state(lua_State *L);

/* ---- the module (ltcp.c) ------------------------------------------------ */

/* Pushes the tycho.tcp table. */
void lt_tcp_push(lua_State *L);

#endif
