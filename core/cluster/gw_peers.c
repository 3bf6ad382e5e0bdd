/*
 * gw_peers.c - the other nodes: heartbeats, liveness, NODEUP / NODEDOWN,
 * round trips, and the list tycho.nodes() reads (docs/cluster.md,
 * "Liveness").
 *
 * Every node publishes a heartbeat every 100 ms on tycho.<cluster>.hb.
 * <name>, from its heartbeat connection (gw_beat.c): its id, its
 * incarnation's nonce, how often its data connection reconnected (its
 * epoch) and the version of its service list. A node is up once it beats
 * and its service list is known (so a node that tycho.nodes() lists can be
 * called at once); it is down after 500 ms of silence (by the arrival
 * times the heartbeat thread stamped) while we can hear, at once when
 * it says goodbye (on the data connection, after all it sent) or a new
 * incarnation of its name beats, and every node is down for us once we
 * have been cut off from NATS for 3 s. A change of a node's epoch means its connection dropped: what
 * was in flight may be lost, so its monitors, links and calls are answered
 * as after a lost connection, though the node stays up.
 */
#include <string.h>

#include "base/log.h"
#include "gw.h"

#define BEAT_MAGIC "TYHB"
#define BEAT_FIXED 28 /* magic, id, epoch, svc_ver, flags, nonce */
#define REQ_AGAIN_NS (200 * 1000000ull)

static void put32(char *p, uint32_t v) { memcpy(p, &v, 4); }
static uint32_t get32(const char *p) {
  uint32_t v;
  memcpy(&v, p, 4);
  return v;
}

/* ---- the list tycho.nodes() reads --------------------------------------- */

static int by_name(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

void lc_nodes_publish(lc_gw *g) {
  pthread_mutex_lock(&lc_sh.mu);
  for (size_t i = 0; i < lc_sh.nnodes; i++) free(lc_sh.nodes[i]);
  lc_sh.nnodes = 0;
  for (unsigned id = 0; id < TY_MAX_NODES; id++) {
    lc_peer *p = g->peers[id];
    if (id != lc_sh.id && !(p && p->up)) continue;
    size_t cap = lc_sh.capnodes;
    ty__grow(&lc_sh.nodes, &cap, lc_sh.nnodes + 1, sizeof *lc_sh.nodes, 8);
    lc_sh.rtt = ty__xrealloc(lc_sh.rtt, cap * sizeof *lc_sh.rtt);
    lc_sh.capnodes = cap;
    /* The rtt travels with its name through the sort: "name\0" + rtt. */
    const char *name = id == lc_sh.id ? lc_sh.name : p->name;
    size_t len = strlen(name);
    char *e = ty__xmalloc(len + 1 + sizeof(double));
    memcpy(e, name, len + 1);
    double rtt = id == lc_sh.id ? 0 : p->rtt;
    memcpy(e + len + 1, &rtt, sizeof rtt);
    lc_sh.nodes[lc_sh.nnodes++] = e;
  }
  qsort(lc_sh.nodes, lc_sh.nnodes, sizeof *lc_sh.nodes, by_name);
  for (size_t i = 0; i < lc_sh.nnodes; i++) {
    const char *e = lc_sh.nodes[i];
    memcpy(&lc_sh.rtt[i], e + strlen(e) + 1, sizeof(double));
  }
  pthread_mutex_unlock(&lc_sh.mu);
}

/* ---- node monitors ------------------------------------------------------ */

static bool node_up(lc_gw *g, const char *name) {
  if (strcmp(name, lc_sh.name) == 0) return true;
  for (unsigned id = 1; id < TY_MAX_NODES; id++)
    if (g->peers[id] && g->peers[id]->up &&
        strcmp(g->peers[id]->name, name) == 0)
      return true;
  return false;
}

static void tell_watchers(lc_gw *g, const char *name, bool up) {
  for (size_t i = 0; i < g->nnodewatch; i++) {
    if (strcmp(g->nodewatch[i].name, name) != 0) continue;
    if (up)
      lc_send_values(g, g->nodewatch[i].pid, 0, "NODEUP", NULL, name, NULL);
    else
      lc_send_values(g, g->nodewatch[i].pid, 0, "NODEDOWN", NULL, name,
                     "noconnection");
  }
}

void lc_node_monitor(lc_gw *g, ty_pid pid, const char *name, bool on) {
  size_t i = 0;
  while (i < g->nnodewatch && (g->nodewatch[i].pid != pid ||
                               strcmp(g->nodewatch[i].name, name) != 0))
    i++;
  if (!on) {
    if (i < g->nnodewatch) g->nodewatch[i] = g->nodewatch[--g->nnodewatch];
    return;
  }
  if (i == g->nnodewatch) {
    ty__grow(&g->nodewatch, &g->capnodewatch, g->nnodewatch + 1,
             sizeof *g->nodewatch, 8);
    g->nodewatch[i].pid = pid;
    snprintf(g->nodewatch[i].name, sizeof g->nodewatch[i].name, "%s", name);
    g->nnodewatch++;
  }
  if (!node_up(g, name))
    lc_send_values(g, pid, 0, "NODEDOWN", NULL, name, "noconnection");
}

/* ---- up and down -------------------------------------------------------- */

lc_peer *lc_peer_of(lc_gw *g, unsigned id) {
  if (!id || id >= TY_MAX_NODES || id == lc_sh.id) return NULL;
  lc_peer *p = g->peers[id];
  if (p) return p;
  /* First contact before any heartbeat (rare: a node's first beat goes out
   * before anything else): alive, nameless until it beats. */
  p = ty__xcalloc(1, sizeof *p);
  p->id = id;
  p->last_ns = lc_now_ns();
  ty__buf_init(&p->out);
  g->peers[id] = p;
  ty_node_set_live(g->rt, id, true);
  return p;
}

static void peer_up(lc_gw *g, lc_peer *p) {
  if (p->up) return;
  p->up = true;
  p->ping_ns = 0;
  lc_nodes_publish(g);
  tell_watchers(g, p->name, true);
}

void lc_peer_down(lc_gw *g, lc_peer *p) {
  if (!p->beating && !p->up && !ty_node_live(g->rt, p->id)) return;
  /* The node leaves tycho.nodes() before NODEDOWN is sent. */
  ty_node_set_live(g->rt, p->id, false);
  bool was_up = p->up;
  p->up = p->beating = p->svc_known = p->has_list = false;
  if (was_up) lc_nodes_publish(g);
  lc_svc_set_node(p->id, NULL, 0);
  lc_watch_lost(g, p, true);
  if (was_up) tell_watchers(g, p->name, false);
}

/* ---- heartbeats --------------------------------------------------------- */

int lc_beat_encode(char *buf, uint32_t epoch, uint32_t svc_ver,
                   uint32_t flags) {
  size_t len = strlen(lc_sh.name);
  if (len > LC_BEAT_MAX - BEAT_FIXED) len = LC_BEAT_MAX - BEAT_FIXED;
  memcpy(buf, BEAT_MAGIC, 4);
  put32(buf + 4, lc_sh.id);
  put32(buf + 8, epoch);
  put32(buf + 12, svc_ver);
  put32(buf + 16, flags);
  memcpy(buf + 20, &lc_sh.nonce, 8);
  memcpy(buf + BEAT_FIXED, lc_sh.name, len);
  return (int)(BEAT_FIXED + len);
}

void lc_peers_beat(lc_gw *g, bool bye) {
  if (!bye) {
    lc_beat_set(g->epoch, g->svc_ver);
    return;
  }
  char buf[LC_BEAT_MAX], subject[200];
  int len = lc_beat_encode(buf, g->epoch, g->svc_ver, LC_BEAT_BYE);
  snprintf(subject, sizeof subject, "%sbye.%s", g->prefix, lc_sh.name);
  lc_gw_publish(g, subject, buf, len);
}

/* An older incarnation of the same name is gone for good. */
static void replace_older(lc_gw *g, lc_peer *p) {
  for (unsigned id = 1; id < TY_MAX_NODES; id++) {
    lc_peer *o = g->peers[id];
    if (o && o != p && strcmp(o->name, p->name) == 0) lc_peer_down(g, o);
  }
}

void lc_peer_named(lc_gw *g, lc_peer *p, const char *name, size_t len) {
  if (len >= sizeof p->name) len = sizeof p->name - 1;
  memcpy(p->name, name, len);
  p->name[len] = 0;
  if (!lc_token_ok(p->name, false)) { /* not a node of ours */
    p->name[0] = 0;
    return;
  }
  snprintf(p->subject, sizeof p->subject, "%sn.%s", g->prefix, p->name);
  replace_older(g, p);
}

static lc_peer *beat_peer(lc_gw *g, unsigned id, const char *name, size_t len,
                          uint64_t nonce) {
  lc_peer *p = lc_peer_of(g, id);
  if (!p) return NULL;
  if (!p->name[0]) lc_peer_named(g, p, name, len);
  if (!p->nonce) p->nonce = nonce;
  return p;
}

bool lc_beat_decode(const char *data, size_t len, lc_beat *b) {
  if (len < BEAT_FIXED || memcmp(data, BEAT_MAGIC, 4) != 0) return false;
  b->id = get32(data + 4);
  b->epoch = get32(data + 8);
  b->svc_ver = get32(data + 12);
  b->flags = get32(data + 16);
  memcpy(&b->nonce, data + 20, 8);
  b->name = data + BEAT_FIXED;
  b->name_len = len - BEAT_FIXED;
  return true;
}

void lc_peers_on_beat(lc_gw *g, const char *data, size_t len, uint64_t at) {
  lc_beat b;
  if (!lc_beat_decode(data, len, &b)) return;
  unsigned id = b.id;
  uint32_t epoch = b.epoch, ver = b.svc_ver;
  if (id == lc_sh.id) return; /* our own */
  lc_peer *p = beat_peer(g, id, b.name, b.name_len, b.nonce);
  if (!p) return;
  if (b.flags & LC_BEAT_BYE) {
    lc_peer_down(g, p);
    return;
  }
  uint64_t now = lc_now_ns();
  if (at > p->last_ns) p->last_ns = at;
  if (!p->beating) {
    p->beating = true;
    p->epoch = epoch;
    ty_node_set_live(g->rt, id, true);
    /* It needs our service list to count us up: it comes unasked, a round
     * trip sooner (with our beat, gw_beat.c: newcomer); at most once per
     * REQ_AGAIN_NS (a peer flapping between bye and beats does not get a
     * list per flap; it can still ask). */
    if (p->subject[0] && now - p->ann_ns > REQ_AGAIN_NS) {
      p->ann_ns = now;
      lc_announce_to(g, p);
    }
  } else if (epoch != p->epoch) {
    /* It reconnected: what it sent or was sent meanwhile may be lost. */
    p->epoch = epoch;
    lc_watch_lost(g, p, false);
  }
  p->svc_ver = ver;
  p->svc_known = p->has_list && p->list_ver == ver;
  if (!p->svc_known) {
    if (now - p->req_ns > REQ_AGAIN_NS) {
      p->req_ns = now;
      lc_send_ctl(g, p, LC_W_SVC_REQ, lc_node_pid(id), 0, 0, NULL, 0);
    }
  }
  if (p->svc_known) peer_up(g, p);
}

void lc_peers_on_svc_list(lc_gw *g, lc_peer *p, uint32_t ver, const char *data,
                          size_t len) {
  /* A node's versions only grow (gw_svc.c, lc_announce): an older list than
   * the one we hold is stale. Its announcements (subject ann) and its
   * answers to our requests (our own subject) come in order on its one
   * connection, but a turn drains ann before data (gw.c, drain_all), so an
   * answer sent before an announcement could be applied after it. */
  if (p->has_list && (int32_t)(ver - p->list_ver) < 0) return;
  uint64_t ids[256];
  size_t n = 0;
  char name[256];
  for (size_t i = 0, start = 0; i < len; i++) {
    if (data[i] != '\n') continue;
    size_t l = i - start;
    if (l && l < sizeof name && n < 256) {
      memcpy(name, data + start, l);
      name[l] = 0;
      ids[n++] = lc_svc_id(name, true);
    }
    start = i + 1;
  }
  lc_svc_set_node(p->id, ids, n);
  p->has_list = true;
  p->list_ver = ver;
  if (p->beating && ver == p->svc_ver) {
    p->svc_known = true;
    peer_up(g, p);
  }
}

/* ---- every tick ---------------------------------------------------------- */

/* Our own connection: reconnections (each may have lost messages both
 * ways) and outages (3 s of one: every node is down for us). */
static void watch_self(lc_gw *g, uint64_t now, bool *connected) {
  uint64_t in, inb, out, outb, rec = 0;
  if (N(natsConnection_GetStats)(g->nc, g->stats) == NATS_OK)
    N(natsStatistics_GetCounts)(g->stats, &in, &inb, &out, &outb, &rec);
  *connected = N(natsConnection_Status)(g->nc) == NATS_CONN_STATUS_CONNECTED;
  if (rec != g->epoch) {
    lc_count(&lc_sh.reconnects, rec - g->epoch);
    g->epoch = (uint32_t)rec;
    g->grace_until = now + LC_GRACE_NS;
    for (unsigned id = 1; id < TY_MAX_NODES; id++)
      if (g->peers[id]) lc_watch_lost(g, g->peers[id], false);
    lc_peers_beat(g, false); /* our new epoch, in the next beat */
  }
  if (*connected) {
    /* Back from a cut-off: the others may have taken our global names
     * over meanwhile (ctl.c, do_verify). */
    if (g->cut_off) lc_kv_submit(LC_KV_VERIFY, "", 0, 0, 0, 0);
    g->down_since = 0;
    g->cut_off = false;
    return;
  }
  if (!g->down_since) g->down_since = now;
  if (!g->cut_off && now - g->down_since > LC_CUTOFF_NS) {
    g->cut_off = true;
    for (unsigned id = 1; id < TY_MAX_NODES; id++)
      if (g->peers[id]) lc_peer_down(g, g->peers[id]);
  }
}

static void on_beat(void *g, const char *data, size_t len, uint64_t at) {
  lc_peers_on_beat(g, data, len, at);
}

void lc_peers_tick(lc_gw *g, uint64_t now) {
  bool connected;
  /* Every beat stamped before `now` is in the queue by now (stamped and
   * queued under one lock): take them before judging. The turn's own take
   * (gw.c, drain_all) may be long past: a gateway thread kept off its CPU
   * between that take and this tick judged by stale stamps while the beats
   * that say otherwise waited in the queue (issue 18, item 3: "silent for
   * 0.73 s (beats taken 0.63 s ago)" under a flood on a loaded machine). */
  uint64_t away = now - g->beats_ns; /* for the log below */
  lc_beat_take(on_beat, g);
  g->beats_ns = now;
  watch_self(g, now, &connected);
  /* A silence while we cannot hear is ours, not theirs: the heartbeat
   * connection must be up (and have been for a while), and our own beats
   * must come back (gw_beat.c); once they do again, the beats that waited
   * behind ours get a moment to arrive. */
  uint64_t beat_rec;
  bool hearing = lc_beat_hearing(&beat_rec, now);
  if (beat_rec != g->beat_rec) {
    g->beat_rec = beat_rec;
    g->grace_until = now + LC_GRACE_NS;
  }
  uint64_t echo = lc_beat_echo_ns();
  if (!hearing) {
    if (!g->deaf) {
      ty__logf(TY_LOG_INFO, -1, 0,
               "cluster: our heartbeats do not come back: no verdicts");
      g->deaf_ns = echo;
    }
    g->deaf = true;
    /* Not back for long: the link to the server is cut (a partition: the
     * connection's status stays "connected" until its pings time out, far
     * later). We are cut off: every other node is down for us, as the
     * others see us down after their 500 ms of silence. */
    if (!g->deaf_cut && now > echo && now - echo > LC_DEAF_CUT_NS) {
      g->deaf_cut = true;
      ty__logf(TY_LOG_WARN, -1, 0,
               "cluster: our heartbeats have not come back for %.2f s: cut "
               "off, every node down",
               (double)(now - echo) * 1e-9);
      for (unsigned id = 1; id < TY_MAX_NODES; id++)
        if (g->peers[id]) lc_peer_down(g, g->peers[id]);
    }
  } else if (g->deaf) {
    ty__logf(TY_LOG_INFO, -1, 0,
             "cluster: our heartbeats come back again (%.2f s without)",
             (double)(now - g->deaf_ns) * 1e-9);
    if (g->deaf_cut) { /* healed: our names may have been taken over */
      g->deaf_cut = false;
      lc_kv_submit(LC_KV_VERIFY, "", 0, 0, 0, 0);
    }
    g->deaf = false;
    if (g->grace_until < now + LC_DEAF_GRACE_NS)
      g->grace_until = now + LC_DEAF_GRACE_NS;
  }
  bool judge = connected && hearing && now > g->grace_until;
  bool rtt_changed = false;
  for (unsigned id = 1; id < TY_MAX_NODES; id++) {
    lc_peer *p = g->peers[id];
    if (!p) continue;
    /* Any frame on the data connection is a sign of life too (as any
     * traffic is on an Erlang distribution connection): on this 2-CPU VM
     * one thread can stand still for 0.3-1.8 s (measured: our heartbeat
     * went out 0.48 s after the last; the server passed none of a node's
     * beats for 1.8 s while its own came back), so beats late by
     * LC_PROBE_NS are checked over the other path, the data connection,
     * with a probe whose answer is such a frame. Down takes silence on
     * both. (a beat stamped after `now` was taken too: last_ns may be past
     * it) */
    uint64_t alive = p->last_ns > p->data_ns ? p->last_ns : p->data_ns;
    if (judge && now > alive && now - alive > LC_DOWN_NS &&
        (p->beating || ty_node_live(g->rt, id))) {
      ty__logf(TY_LOG_WARN, -1, 0,
               "cluster: node %s silent for %.2f s (data %.2f s): down (the "
               "gateway took beats %.2f s before)",
               p->name, (double)(now - p->last_ns) * 1e-9,
               (double)(now - alive) * 1e-9, (double)away * 1e-9);
      lc_peer_down(g, p);
      continue;
    }
    if (judge && p->up && now > p->last_ns && now - p->last_ns > LC_PROBE_NS &&
        now >= p->probe_ns) {
      lc_send_ctl(g, p, LC_W_PING, lc_node_pid(id), 0, now, NULL, 0);
      p->probe_ns = now + LC_BEAT_NS;
    }
    if (p->full_ns && now - p->full_ns > LC_STALL_NS) {
      /* No acknowledgement for long: one was lost with what it answered
       * (say, a whole window while cut off). Start afresh. */
      lc_window_reset(p);
    }
    if (p->up && connected && now >= p->ping_ns) {
      lc_send_ctl(g, p, LC_W_PING, lc_node_pid(id), 0, now, NULL, 0);
      p->ping_ns = now + LC_PING_NS;
      rtt_changed = true;
    }
  }
  if (rtt_changed) lc_nodes_publish(g); /* the rtts of the last probes */
}

void lc_peers_free(lc_gw *g) {
  for (unsigned id = 0; id < TY_MAX_NODES; id++) {
    lc_peer *p = g->peers[id];
    if (!p) continue;
    ty__buf_free(&p->out);
    lc_map_free(&p->watches);
    free(p->marks);
    free(p);
    g->peers[id] = NULL;
  }
  pthread_mutex_lock(&lc_sh.mu);
  for (size_t i = 0; i < lc_sh.nnodes; i++) free(lc_sh.nodes[i]);
  free(lc_sh.nodes);
  free(lc_sh.rtt);
  lc_sh.nodes = NULL;
  lc_sh.rtt = NULL;
  lc_sh.nnodes = lc_sh.capnodes = 0;
  pthread_mutex_unlock(&lc_sh.mu);
}
