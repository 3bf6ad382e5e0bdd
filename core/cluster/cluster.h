/*
 * cluster.h - what the files of the cluster layer share (docs/cluster.md is
 * the design; this is the map):
 *
 *   lcluster.c   the Lua API (node, nodes, monitor_node, join, register_global
 *                ...), the settings, and the hooks the binding calls (lrun.h)
 *   ctl.c        the control connection and its thread: claiming the node
 *                name and id at start, global names (JetStream KV)
 *   gw.c         the gateway thread: the data connection on our own epoll,
 *                the loop, its park protocol with the port, start and stop
 *   gw_route.c   the wire format; messages between the port and NATS
 *   gw_beat.c    the heartbeat connection and its thread
 *   gw_peers.c   other nodes: heartbeats, liveness, NODEUP/NODEDOWN, rtt
 *   gw_watch.c   monitors, links and calls that cross nodes, and what a lost
 *                connection tells them
 *   svc.c        services: local members, the cluster's view of the others
 *   lcmap.c      a small hash map (pid pairs -> two words)
 *
 * Threads: workers run the Lua API and only send to the port (ty_port_send)
 * or queue KV jobs for the control thread; the gateway thread owns the data
 * connection and everything in lc_gw; the control thread owns the control
 * connection. What more than one of them touches is in lc_shared, under its
 * mutex or as relaxed counters.
 */
#ifndef LC_CLUSTER_H
#define LC_CLUSTER_H

#include <pthread.h>

#include "base/buf.h"
#include "lua/lactor.h"
#include "natsapi.h"
#include "sched/ty.h"

/* ---- settings (lcluster.c) ---------------------------------------------- */

typedef struct lc_settings {
  char *node, *nats, *cluster; /* NULL: not set (then the environment) */
  size_t backlog;              /* bytes held for workers that lag (0: 64 MiB) */
} lc_settings;

extern lc_settings lc_set;

/* ---- requests from workers to the gateway (ty_msg.kind, to = 0) ---------- */

enum {
  LC_REQ_MONITOR_NODE = 0x80, /* data: node name */
  LC_REQ_DEMONITOR_NODE,      /* data: node name */
  LC_REQ_JOIN,                /* aux: service id; ref: reply when reachable */
  LC_REQ_LEAVE,               /* aux: service id (its last member left) */
};

/* ---- a small hash map (lcmap.c) ------------------------------------------ */

typedef struct lc_key {
  uint64_t a, b;
} lc_key;

typedef struct lc_slot {
  lc_key k;
  uint64_t v1, v2;
  bool used;
} lc_slot;

typedef struct lc_map {
  lc_slot *s;
  size_t cap, n; /* cap: a power of two, or 0 */
} lc_map;

lc_slot *lc_map_get(lc_map *m, lc_key k);
/* The slot of k, added (values zeroed) if missing; *fresh says which. */
lc_slot *lc_map_put(lc_map *m, lc_key k, bool *fresh);
bool lc_map_del(lc_map *m, lc_key k);
/* Deletes a slot the caller holds (entries may move: do not delete while
 * iterating; collect the keys first). */
void lc_map_del_slot(lc_map *m, lc_slot *s);
void lc_map_free(lc_map *m);

/* ---- what workers, the gateway and the control thread share ------------- */

typedef struct lc_shared {
  char name[72];    /* this node */
  char cluster[72]; /* the cluster */
  unsigned id;      /* this incarnation's node id (pids carry it) */
  uint64_t nonce;   /* random: tells incarnations of one name apart */
  ty_runtime *rt;   /* set by start, before any worker runs */
  pthread_mutex_t mu;
  /* Guarded by mu: the live nodes (names, this one first) and their round
   * trip times, for tycho.nodes() and tycho.stats(). */
  char **nodes;
  double *rtt;
  size_t nnodes, capnodes;
  /* Counters: written by the gateway, read by tycho.stats (relaxed: each is
   * exact at some instant, and nothing else depends on them). */
  _Atomic uint64_t msgs_in, msgs_out, bytes_in, bytes_out, drops, reconnects,
      slow_consumers, lost, full;
} lc_shared;

extern lc_shared lc_sh;

static inline void lc_count(_Atomic uint64_t *c, uint64_t n) {
  /* relaxed: a statistic (see lc_shared). */
  atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

/* ---- services (svc.c): local members and the view of other nodes -------- */

/* The id of a service name (interned for the process; 0 when `create` is
 * false and the name is unknown). */
uint64_t lc_svc_id(const char *name, bool create);
/* Its name (valid for the process's life). */
const char *lc_svc_name(uint64_t id);
/* Adds / removes a local member; true when the service just got its first
 * local member / lost its last one. */
bool lc_svc_add(uint64_t id, ty_pid pid);
bool lc_svc_remove(uint64_t id, ty_pid pid);
/* An ending actor leaves every service; returns the ids of those that lost
 * their last member (at most max of them). */
size_t lc_svc_drop_pid(ty_pid pid, uint64_t *emptied, size_t max);
/* A live local member (round robin, never `exclude`), or 0. */
ty_pid lc_svc_local(uint64_t id, ty_pid exclude);
/* The ids of the services with local members now; returns how many (at
 * most max). */
size_t lc_svc_local_ids(uint64_t *out, size_t max);
/* The view of other nodes: `node` serves exactly these services now. */
void lc_svc_set_node(unsigned node, const uint64_t *ids, size_t n);
/* Does a node other than this one serve it? */
bool lc_svc_remote(uint64_t id);
void lc_svc_reset(void); /* at the end of every run */

/* ---- global names (ctl.c) ----------------------------------------------- */

typedef enum {
  LC_KV_REGISTER, /* name, pid -> true | "taken" */
  LC_KV_WHEREIS,  /* name -> pid | nil */
  LC_KV_RELEASE,  /* name, pid: its owner ended (no reply) */
  LC_KV_VERIFY,   /* after a cut-off: are our names still ours? (no reply;
                     the losers get ("NAME_LOST", name, winner_pid)) */
} lc_kv_op;

/* Queues a job for the control thread; its answer goes to `caller` as a
 * reply with `ref`, unless lc_now_ns() is past `deadline` (0: none) by the
 * time the thread gets to it: the caller has stopped waiting then, and the
 * job is skipped. -ESHUTDOWN once the run is stopping. */
int lc_kv_submit(lc_kv_op op, const char *name, ty_pid pid, ty_pid caller,
                 uint64_t ref, uint64_t deadline);
/* An ending actor gives up its global names (cheap when it had none). */
void lc_kv_drop_pid(ty_pid pid);

/* Connects the control connection and claims this node's name and an id;
 * fills lc_sh.id. 0, or -1 with the reason in err. */
int lc_ctl_join(const char *url, char *err, size_t errlen);
/* gw_beat.c: does a node beat under `subject` (tycho.<cluster>.hb.<name>,
 * or hb.* for all) within 600 ms, longer than the silence that makes a node
 * down? Collects the ids it hears into ids[] (when given). */
bool lc_beats_heard(natsConnection *nc, const char *subject, unsigned *ids,
                    size_t *nids);
/* Starts the control thread (after the runtime exists). */
void lc_ctl_start(void);
/* Gives the names and the node name back and closes (after the gateway
 * stopped). Idempotent. */
void lc_ctl_stop(void);

/* ---- the gateway (gw*.c) ------------------------------------------------ */

/* Creates the gateway and connects its data connection (before the runtime
 * exists). 0, or -1 with the reason in err. */
int lc_gw_connect(const char *url, char *err, size_t errlen);
/* Starts its thread once the runtime exists. */
void lc_gw_start(ty_runtime *rt);
/* The largest codec payload a frame can carry to another node. */
size_t lc_gw_max_message(void);
/* Sends what is queued, says goodbye to the other nodes, stops the thread
 * and closes (before the runtime stops). Idempotent. */
void lc_gw_stop(void);

/* ---- small helpers (lcluster.c) ----------------------------------------- */

/* A message holding the codec values in b. */
ty_msg *lc_msg_of(const ty__buf *b, ty_pid to, ty_pid from, uint32_t kind,
                  uint64_t ref);
/* The pid that stands for a node itself (slot 0, generation 0). */
static inline ty_pid lc_node_pid(unsigned id) {
  return (ty_pid)id << (TY_PID_SLOT_BITS + TY_PID_GEN_BITS);
}
/* Is s a good node, cluster or service name (letters, digits, '_', '-';
 * with dots between such tokens when `dots`)? */
bool lc_token_ok(const char *s, bool dots);
uint64_t lc_now_ns(void);

#endif
