/*
 * gw.h - the gateway's state and what its files share (gw.c: thread, loop,
 * connection; gw_route.c: the wire; gw_peers.c: other nodes; gw_watch.c:
 * monitors, links and calls across nodes). Everything here belongs to the
 * gateway thread, except the event-loop adapter's fields under evl_mu,
 * which nats.c's own threads touch too (docs/cluster.md, "Threads").
 */
#ifndef LC_GW_H
#define LC_GW_H

#include "cluster.h"

#define LC_BEAT_NS (100 * 1000000ull)       /* heartbeat period */
#define LC_DOWN_NS (500 * 1000000ull)       /* silence that makes a node down */
#define LC_CUTOFF_NS (3000 * 1000000ull)    /* our own outage that downs all */
#define LC_GRACE_NS (1000 * 1000000ull)     /* after our reconnect */
#define LC_ECHO_NS (300 * 1000000ull)       /* our own beat back within */
#define LC_DEAF_GRACE_NS (300 * 1000000ull) /* ... after it was not */
#define LC_DEAF_CUT_NS (2000 * 1000000ull) /* not back for this long: cut off */
#define LC_PING_NS (1000 * 1000000ull)     /* rtt probe period per node */
#define LC_PROBE_NS (250 * 1000000ull) /* beats this late: probe over data */
#define LC_TICK_NS (25 * 1000000ull)   /* liveness checks */

/* Wire kinds that the gateways exchange among themselves (never actors'). */
enum {
  LC_W_SVC_ACK = 0x90, /* a node took a service call: to = caller, ref */
  LC_W_PING,           /* data: u64 send time */
  LC_W_PONG,           /* data: the ping's time, echoed */
  LC_W_BARRIER,        /* to ourselves: everything before it left */
  LC_W_SVC_REQ,        /* send me your service list */
  LC_W_SVC_LIST,       /* aux: version; data: names, '\n' after each */
  LC_W_ACK,            /* aux: the last numbered record handed on (credit) */
};

/* aux of a service record (to = 0): how often nodes without members passed
 * it on (gw_route.c, pass_on), at most this often. */
#define LC_SVC_HOPS 8u

/* A record for the gateways themselves, never an actor's. */
static inline bool lc_gateway_kind(uint32_t kind) {
  return kind >= LC_W_SVC_ACK && kind <= LC_W_ACK;
}

/* Flow control between two nodes: a node sends at most LC_WINDOW numbered
 * records that the other has not acknowledged; the other acknowledges
 * those it handed to its workers while its backlog is low, so that a node
 * that cannot keep up slows its senders down (their rings to the port
 * fill, as between workers) instead of dropping what they send. */
/* Bytes of messages from other nodes in the ring to one worker: a mailbox
 * limit is checked as a message enters the ring (gw_route.c), so what the
 * ring holds then lands past the limit; this keeps that small. */
#define LC_RING_BYTES (1u << 20)

#define LC_WINDOW 65536
/* ... and at most this many bytes of them: 65,536 messages of 16 KiB would
 * be a gigabyte in flight, which the server holds for a receiver that cannot
 * read that fast until it cuts it off as a slow consumer. */
#define LC_WINDOW_BYTES (4u << 20)
#define LC_ACK_NS (10 * 1000000ull) /* an acknowledgement at least this often */
#define LC_STALL_NS (2000 * 1000000ull) /* a full window with no ack: reset */

/* Another node (one incarnation: ids are never reused by a restart). */
typedef struct lc_peer {
  unsigned id;
  char name[72];
  char subject[200]; /* its data subject */
  uint64_t nonce;
  bool up;        /* NODEUP sent (and not NODEDOWN since) */
  bool beating;   /* a heartbeat came since it was (re)discovered */
  bool svc_known; /* its service list matches svc_ver */
  bool has_list;  /* a service list came (version list_ver) */
  uint32_t list_ver;
  uint32_t epoch;       /* its reconnections, from its heartbeats */
  uint32_t svc_ver;     /* from its heartbeats */
  uint64_t last_ns;     /* last heartbeat (or first contact) */
  uint64_t data_ns;     /* last frame from it on the data connection */
  uint64_t probe_ns;    /* next probe while its beats are late */
  uint64_t seq_out;     /* messages sent to it */
  uint64_t acked;       /* ... of which it acknowledged up to here */
  uint64_t full_ns;     /* when the window to it last filled (0: not full) */
  uint64_t bytes_out;   /* bytes of the numbered records sent to it */
  uint64_t bytes_acked; /* ... of which it acknowledged up to here */
  struct lc_mark {      /* per frame sent: its last number, bytes_out then */
    uint64_t seq, bytes;
  } * marks;
  size_t mhead, mn, mcap; /* marks[mhead .. mhead + mn): not acknowledged */
  uint64_t bytes_in_ack;  /* bytes of numbered records since our last ack */
  uint64_t seq_in;        /* next expected from it (0: none seen yet) */
  uint64_t ack_sent;      /* the last acknowledgement we sent it */
  uint64_t ack_ns;        /* ... at that time */
  bool ack_due;           /* on lc_gw.acks: it sent numbered records since */
  uint64_t ping_ns;       /* next rtt probe */
  uint64_t req_ns;        /* when we last asked for its service list */
  uint64_t ann_ns;        /* when we last sent it ours unasked */
  double rtt;             /* seconds, 0 until measured */
  ty__buf out;            /* the frame being filled for it this turn */
  uint32_t out_n;         /* records in out */
  uint32_t out_seq;       /* ... of them numbered (actors' messages) */
  uint64_t out_bytes;     /* ... their bytes */
  lc_map watches;         /* (local | kind << 60, remote) -> - */
} lc_peer;

/* A service this node subscribes to. */
typedef struct lc_sub {
  uint64_t id;
  natsSubscription *sub;
  bool draining; /* its last member left (gw_svc.c, unsubscribe) */
} lc_sub;

typedef struct lc_gw {
  ty_runtime *rt;
  natsConnection *nc;
  natsSubscription *data, *byes, *ann;
  natsStatistics *stats;
  pthread_t thread;
  _Atomic bool stop; /* seq_cst store by stop; the loop polls it */
  int epfd;
  /* The event-loop adapter: nats.c calls it from its threads too. */
  pthread_mutex_t evl_mu;
  int evl_fd;
  bool evl_rd, evl_wr;
  char prefix[96]; /* "tycho.<cluster>." */
  char self_subj[200];
  /* Peers by node id. */
  lc_peer *peers[TY_MAX_NODES];
  /* Local services subscribed to. */
  lc_sub *subs;
  size_t nsubs, capsubs;
  uint32_t svc_ver;
  /* Node monitors: (pid, node name) pairs. */
  struct lc_nodewatch {
    ty_pid pid;
    char name[72];
  } * nodewatch;
  size_t nnodewatch, capnodewatch;
  /* Calls in flight to other nodes: (caller, 0) -> (ref, node | flags). */
  lc_map calls;
  /* From the workers: what a full window left taken but not sent, per
   * worker (the last entry: threads that are not workers). */
  ty_msg *held_head[TY_MAX_WORKERS + 1], *held_tail[TY_MAX_WORKERS + 1];
  /* Peers with acknowledgements to send. */
  unsigned acks[TY_MAX_NODES];
  size_t nacks;
  /* Toward the workers: what their full rings could not take yet. */
  ty_msg *ov_head[TY_MAX_WORKERS], *ov_tail[TY_MAX_WORKERS];
  size_t ov_bytes, backlog;
  /* ... and what is in their rings: the size of each message pushed and
   * not taken yet (gw_route.c, ring_push), at most LC_RING_BYTES. */
  struct lc_inring {
    uint32_t *sz; /* by push number, modulo cap */
    uint32_t cap, pushed, taken;
    uint64_t bytes;
  } inring[TY_MAX_WORKERS];
  /* Join requests waiting for the barrier: (caller, ref) pairs. */
  struct lc_waiter {
    ty_pid pid;
    uint64_t ref, mark;
  } * waiters;
  size_t nwaiters, capwaiters;
  uint64_t marks;     /* barriers sent */
  uint64_t mark_seen; /* the last one back */
  /* Our own connection. */
  uint32_t epoch;       /* reconnections so far */
  uint64_t down_since;  /* 0: connected */
  bool cut_off;         /* down long enough that every node is down */
  uint64_t grace_until; /* after a reconnect: no silence verdicts */
  uint64_t beat_rec;    /* reconnections of the heartbeat connection seen */
  bool deaf;            /* our own beats did not come back (gw_beat.c) */
  bool deaf_cut;        /* ... for LC_DEAF_CUT_NS: every node is down */
  uint64_t deaf_ns;     /* our last beat back before we went deaf */
  uint64_t next_tick, next_sweep;
  uint64_t beats_ns;  /* when the last turn took the heartbeats queued */
  uint64_t active_ns; /* the last turn that moved messages */
  int max_payload;
  ty__buf scratch;
} lc_gw;

extern lc_gw *lc_g;

/* gw.c */
/* Publishes on subject; counts a failure as a drop and returns false. */
bool lc_gw_publish(lc_gw *g, const char *subject, const void *data, int len);

/* gw_route.c */
/* Appends a record (seq 0) to the frame in b, starting it if b is empty. */
void lc_put_record(ty__buf *b, uint32_t kind, ty_pid to, ty_pid from,
                   uint64_t ref, uint64_t aux, const void *data, size_t len);
/* Messages workers sent to the port: to other nodes, services, requests.
 * False when m's node has a full window: m is not taken (hold it). */
bool lc_route_out(lc_gw *g, ty_msg *m);
/* Acknowledges what other nodes sent, while the backlog is low. */
void lc_route_acks(lc_gw *g, uint64_t now);
/* Publishes the frames filled this turn. */
void lc_route_flush(lc_gw *g);
/* A NATS message on our data subject (svc = 0) or a service's. */
void lc_route_in(lc_gw *g, const char *data, size_t len, uint64_t svc);
/* Hands m to its local receiver (bounded backlog when rings are full). */
void lc_deliver(lc_gw *g, ty_msg *m);
/* Moves the backlog into the rings that have room; true if some is left. */
bool lc_deliver_flush(lc_gw *g);
/* A wire message from the gateway itself to a node. */
void lc_send_ctl(lc_gw *g, lc_peer *p, uint32_t kind, ty_pid to, uint64_t ref,
                 uint64_t aux, const void *data, size_t len);
/* Requests from workers (LC_REQ_*). */
void lc_request(lc_gw *g, ty_msg *m);

/* gw_route.c: the window to p starts afresh (acknowledgements were lost). */
void lc_window_reset(lc_peer *p);

/* gw_beat.c: heartbeats on their own connection and thread. */
#define LC_BEAT_MAX 100 /* bytes of a heartbeat at most */
int lc_beat_connect(const char *url, const char *prefix, char *err,
                    size_t errlen);
void lc_beat_start(void);
void lc_beat_stop(void); /* idempotent */
/* What our next beats say (the gateway's epoch and service version). */
void lc_beat_set(uint32_t epoch, uint32_t svc_ver);
/* Hands every beat that arrived since to fn, with its arrival time;
 * returns how many. */
typedef void (*lc_beat_fn)(void *ctx, const char *data, size_t len,
                           uint64_t at);
size_t lc_beat_take(lc_beat_fn fn, void *ctx);
/* Can we judge silence: is the heartbeat connection up, and did our own
 * beat come back within LC_ECHO_NS? *reconnects: its reconnections. */
bool lc_beat_hearing(uint64_t *reconnects, uint64_t now);
/* When our own beat last came back from the server. */
uint64_t lc_beat_echo_ns(void);

/* gw_peers.c */
/* A heartbeat's bytes into buf (LC_BEAT_MAX); returns its length. */
/* flags: LC_BEAT_BYE, the goodbye; LC_BEAT_HELLO, a node's first beats
 * (gw_beat.c: the others answer with a beat at once). */
#define LC_BEAT_BYE 1u
#define LC_BEAT_HELLO 2u
int lc_beat_encode(char *buf, uint32_t epoch, uint32_t svc_ver, uint32_t flags);
/* A heartbeat's fields, as lc_beat_decode reads them (name: not
 * terminated, name_len bytes). */
typedef struct lc_beat {
  uint32_t id, epoch, svc_ver, flags;
  uint64_t nonce;
  const char *name;
  size_t name_len;
} lc_beat;
/* False when data is not a heartbeat. */
bool lc_beat_decode(const char *data, size_t len, lc_beat *b);
lc_peer *lc_peer_of(lc_gw *g, unsigned id); /* a stub on first contact */
/* A stub learns its name (from a frame's prefix or a heartbeat). */
void lc_peer_named(lc_gw *g, lc_peer *p, const char *name, size_t len);
/* What our heartbeats say now; with bye, the goodbye (on the data
 * connection, after everything this node sent). */
void lc_peers_beat(lc_gw *g, bool bye);
/* A heartbeat (or goodbye) of another node that arrived at `at`. */
void lc_peers_on_beat(lc_gw *g, const char *data, size_t len, uint64_t at);
void lc_peers_on_svc_list(lc_gw *g, lc_peer *p, uint32_t ver, const char *data,
                          size_t len);
/* Every tick: silences, our own connection, rtt probes. */
void lc_peers_tick(lc_gw *g, uint64_t now);
void lc_peer_down(lc_gw *g, lc_peer *p);
void lc_nodes_publish(lc_gw *g); /* the snapshot tycho.nodes() reads */
void lc_node_monitor(lc_gw *g, ty_pid pid, const char *name, bool on);
void lc_peers_free(lc_gw *g);

/* gw_svc.c */
void lc_announce(lc_gw *g);                /* our services, to every node */
void lc_announce_to(lc_gw *g, lc_peer *p); /* ... to one that asked */
void lc_barrier_back(lc_gw *g, uint64_t mark);
void lc_svc_tick(lc_gw *g); /* frees the subscriptions that drained */
void lc_subs_free(lc_gw *g);

/* gw_watch.c */
enum { LC_WATCH_MONITOR = 1, LC_WATCH_LINK = 2 };
void lc_watch_add(lc_peer *p, int kind, ty_pid local, ty_pid remote);
void lc_watch_del(lc_peer *p, int kind, ty_pid local, ty_pid remote);
void lc_call_start(lc_gw *g, ty_pid caller, uint64_t ref, unsigned node);
void lc_call_ack(lc_gw *g, ty_pid caller, uint64_t ref, unsigned node);
void lc_call_end(lc_gw *g, ty_pid caller, uint64_t ref);
/* The connection to p was lost (it went down, or messages may be lost):
 * monitors get DOWN, links EXIT, callers "noconnection". */
void lc_watch_lost(lc_gw *g, lc_peer *p, bool node_down);
/* Service calls not yet taken by any node when a node went down. */
void lc_calls_tick(lc_gw *g, uint64_t now);
/* Forgets what dead local actors left behind. */
void lc_watch_sweep(lc_gw *g);
/* A message for a local actor that the gateway makes up. */
void lc_send_local(lc_gw *g, ty_pid to, ty_pid from, uint32_t kind,
                   uint64_t ref, uint64_t aux, const void *data, size_t len);
/* (tag [, num] [, s1] [, s2]) as codec values to a local actor: ("DOWN",
 * pid, reason), ("NODEUP", name), ("NODEDOWN", name, reason). */
void lc_send_values(lc_gw *g, ty_pid to, ty_pid from, const char *tag,
                    const double *num, const char *s1, const char *s2);

#endif
