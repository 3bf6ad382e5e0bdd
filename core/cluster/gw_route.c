/*
 * gw_route.c - the wire, and the gateway's traffic with the port.
 *
 * A NATS message between gateways is a frame: a prefix ("TY", version 1,
 * the length of the sender's node name, the sender's node id as u32, the
 * name), then records, each a 48-byte little-endian header and the
 * message's codec bytes (docs/cluster.md, "Wire"):
 *
 *   u32 len  u32 kind  u64 to  u64 from  u64 ref  u64 aux  u64 seq
 *
 * The records of one turn for one node go out in one frame: nats.c and the
 * server then pay per frame, not per actor message. `seq` numbers every
 * record a gateway sends to one node (0 for services and announcements),
 * so that the receiver sees a gap where messages were lost, counts it and
 * treats it as a lost connection (gw_watch.c).
 *
 * Out: the port hands over messages for other nodes' pids, for services
 * (to = 0, aux = the service id) and requests for the gateway itself. In:
 * records go to local pids through the port's rings; when a ring is full
 * they wait in a per-worker list, bounded in bytes (lc_gw.backlog); past
 * it they are dropped and counted (a call is answered "busy").
 */
#include <endian.h>
#include <string.h>

#include "gw.h"

#define HDR 48
#define PREFIX_FIXED 8
#define PREFIX (PREFIX_FIXED + strlen(lc_sh.name)) /* of our own frames */
#define FRAME_MAX (64 * 1024) /* below malloc's mmap threshold, on both sides */

typedef struct rec {
  uint32_t len, kind;
  uint64_t to, from, ref, aux, seq;
  const char *data;
} rec;

static void put64(char *p, uint64_t v) {
  v = htole64(v);
  memcpy(p, &v, 8);
}

static uint64_t get64(const char *p) {
  uint64_t v;
  memcpy(&v, p, 8);
  return le64toh(v);
}

static void put32(char *p, uint32_t v) {
  v = htole32(v);
  memcpy(p, &v, 4);
}

static uint32_t get32(const char *p) {
  uint32_t v;
  memcpy(&v, p, 4);
  return le32toh(v);
}

/* The prefix names the sender, so that a node that has not heard our
 * heartbeat yet can still answer us. */
static void frame_start(ty__buf *b) {
  if (b->len) return;
  char fixed[PREFIX_FIXED] = {'T', 'Y', 1, (char)strlen(lc_sh.name)};
  put32(fixed + 4, lc_sh.id);
  if (ty__buf_append(b, fixed, PREFIX_FIXED) ||
      ty__buf_append(b, lc_sh.name, strlen(lc_sh.name)))
    ty__die("out of memory");
}

static void put_rec(ty__buf *b, const rec *r) {
  frame_start(b);
  if (ty__buf_reserve(b, HDR + r->len)) ty__die("out of memory");
  char *p = b->data + b->len;
  put32(p, r->len);
  put32(p + 4, r->kind);
  put64(p + 8, r->to);
  put64(p + 16, r->from);
  put64(p + 24, r->ref);
  put64(p + 32, r->aux);
  put64(p + 40, r->seq);
  if (r->len) memcpy(p + HDR, r->data, r->len);
  b->len += HDR + r->len;
}

void lc_put_record(ty__buf *b, uint32_t kind, ty_pid to, ty_pid from,
                   uint64_t ref, uint64_t aux, const void *data, size_t len) {
  rec r = {(uint32_t)len, kind, to, from, ref, aux, 0, data};
  put_rec(b, &r);
}

/* ---- a message that cannot reach its node ------------------------------- */

/* What the sender would have heard had the node been there to answer: a
 * call fails with `token`, a monitor fires, a link breaks; anything else
 * is dropped without its sender knowing, so it is counted. */
static void bounce(lc_gw *g, uint32_t kind, ty_pid to, ty_pid from,
                   uint64_t ref, const char *token) {
  if (lc_gateway_kind(kind)) return;      /* our own */
  if (ty_pid_remote(g->rt, from)) return; /* not one of ours */
  size_t tl = strlen(token);
  switch (kind) {
  case LT_CALL:
    lc_send_local(g, from, to, LT_REPLY_ERR, ref, 0, token, tl);
    break;
  case LT_SIG_MONITOR: {
    double pid = (double)to;
    lc_send_values(g, from, to, "DOWN", &pid, token, NULL);
    break;
  }
  case LT_SIG_LINK:
    lc_send_local(g, from, to, LT_SIG_EXIT, 0, 0, token, tl);
    break;
  default: lc_count(&lc_sh.drops, 1);
  }
}

/* Every record of a frame that could not be published. */
static void bounce_frame(lc_gw *g, const ty__buf *b) {
  for (size_t off = PREFIX; off + HDR <= b->len;) {
    const char *p = b->data + off;
    uint32_t len = get32(p);
    bounce(g, get32(p + 4), get64(p + 8), get64(p + 16), get64(p + 24),
           "noconnection");
    off += HDR + len;
  }
}

static bool publish_frame(lc_gw *g, const char *subject, ty__buf *b,
                          uint32_t records) {
  if (!b->len) return true;
  bool ok = lc_gw_publish(g, subject, b->data, (int)b->len);
  if (ok) {
    lc_count(&lc_sh.msgs_out, records);
    lc_count(&lc_sh.bytes_out, b->len);
  } else {
    bounce_frame(g, b);
  }
  ty__buf_reset(b);
  return ok;
}

/* The byte window: a mark per frame with numbered records; an ack of
 * number n releases the bytes of every frame up to it. */
static void mark_frame(lc_peer *p) {
  if (p->mhead > 1024 && p->mhead > p->mn) { /* compact */
    memmove(p->marks, p->marks + p->mhead, p->mn * sizeof *p->marks);
    p->mhead = 0;
  }
  ty__grow(&p->marks, &p->mcap, p->mhead + p->mn + 1, sizeof *p->marks, 64);
  p->marks[p->mhead + p->mn++] = (struct lc_mark){p->seq_out, p->bytes_out};
}

static void window_ack(lc_peer *p, uint64_t seq) {
  while (p->mn && p->marks[p->mhead].seq <= seq) {
    p->bytes_acked = p->marks[p->mhead].bytes;
    p->mhead++;
    p->mn--;
  }
}

void lc_window_reset(lc_peer *p) {
  p->acked = p->seq_out;
  p->bytes_acked = p->bytes_out;
  p->mhead = p->mn = 0;
  p->full_ns = 0;
}

static void flush_peer(lc_gw *g, lc_peer *p) {
  /* A frame that could not go out holds the newest numbers: take them
   * back, so that the receiver sees no gap for what we counted here. */
  if (!publish_frame(g, p->subject, &p->out, p->out_n)) {
    p->seq_out -= p->out_seq;
    p->bytes_out -= p->out_bytes;
  } else if (p->out_seq) {
    mark_frame(p);
  }
  p->out_n = p->out_seq = 0;
  p->out_bytes = 0;
}

/* Queues r for p (in order with everything else for p this turn). */
static void to_peer(lc_gw *g, lc_peer *p, rec *r) {
  size_t max = g->max_payload < FRAME_MAX ? (size_t)g->max_payload : FRAME_MAX;
  if (PREFIX + HDR + (size_t)r->len > (size_t)g->max_payload) {
    bounce(g, r->kind, r->to, r->from, r->ref, "noconnection");
    return;
  }
  if (p->out.len + HDR + r->len > max) flush_peer(g, p);
  /* Actors' messages are numbered; the gateways' own are best effort. */
  bool ours = lc_gateway_kind(r->kind);
  r->seq = ours ? 0 : ++p->seq_out;
  put_rec(&p->out, r);
  p->out_n++;
  p->out_seq += !ours;
  if (!ours) {
    p->bytes_out += HDR + r->len;
    p->out_bytes += HDR + r->len;
  }
}

size_t lc_gw_max_message(void) {
  long room = (long)lc_g->max_payload - (long)PREFIX - HDR;
  return room > 0 ? (size_t)room : 1;
}

void lc_route_flush(lc_gw *g) {
  for (unsigned i = 1; i < TY_MAX_NODES; i++)
    if (g->peers[i] && g->peers[i]->out.len) flush_peer(g, g->peers[i]);
}

void lc_send_ctl(lc_gw *g, lc_peer *p, uint32_t kind, ty_pid to, uint64_t ref,
                 uint64_t aux, const void *data, size_t len) {
  rec r = {(uint32_t)len, kind, to, lc_node_pid(lc_sh.id), ref, aux, 0, data};
  if (p) {
    to_peer(g, p, &r);
    return;
  }
  ty__buf *b = &g->scratch; /* to ourselves, at once */
  ty__buf_reset(b);
  put_rec(b, &r);
  publish_frame(g, g->self_subj, b, 1);
}

/* An error reply to a caller on any node. */
static void reply_err(lc_gw *g, ty_pid caller, uint64_t ref,
                      const char *token) {
  if (!ty_pid_remote(g->rt, caller)) {
    lc_send_local(g, caller, 0, LT_REPLY_ERR, ref, 0, token, strlen(token));
    return;
  }
  lc_peer *p = g->peers[ty_pid_node(caller)];
  if (p) lc_send_ctl(g, p, LT_REPLY_ERR, caller, ref, 0, token, strlen(token));
}

/* ---- out: from the port ------------------------------------------------- */

/* What crossing the wire means for monitors, links and calls. */
static void note_out(lc_gw *g, lc_peer *p, const ty_msg *m) {
  switch (m->kind) {
  case LT_CALL: lc_call_start(g, m->from, m->ref, p->id); break;
  case LT_SIG_MONITOR: lc_watch_add(p, LC_WATCH_MONITOR, m->from, m->to); break;
  case LT_SIG_LINK: lc_watch_add(p, LC_WATCH_LINK, m->from, m->to); break;
  case LT_SIG_UNLINK:
  case LT_SIG_EXIT: lc_watch_del(p, LC_WATCH_LINK, m->from, m->to); break;
  }
}

static void service_out(lc_gw *g, ty_msg *m) {
  const char *name = lc_svc_name(m->aux);
  if (!name) return;
  char subject[256];
  snprintf(subject, sizeof subject, "%ssvc.%s", g->prefix, name);
  if (m->kind == LT_CALL) lc_call_start(g, m->from, m->ref, 0);
  rec r = {m->len, m->kind, 0, m->from, m->ref, 0, 0, m->data};
  ty__buf *b = &g->scratch;
  ty__buf_reset(b);
  put_rec(b, &r);
  publish_frame(g, subject, b, 1);
}

static bool window_full(lc_peer *p) {
  if (p->seq_out - p->acked < LC_WINDOW &&
      p->bytes_out - p->bytes_acked < LC_WINDOW_BYTES)
    return false;
  if (!p->full_ns) p->full_ns = lc_now_ns();
  return true;
}

bool lc_route_out(lc_gw *g, ty_msg *m) {
  if (!m->from) m->from = lc_node_pid(lc_sh.id);
  if (m->to == 0) {
    if (m->kind >= LC_REQ_MONITOR_NODE && m->kind <= LC_REQ_LEAVE)
      lc_request(g, m);
    else if (m->aux) service_out(g, m);
    ty_msg_free(m);
    return true;
  }
  unsigned node = ty_pid_node(m->to);
  lc_peer *p = g->peers[node];
  if (!p || !ty_node_live(g->rt, node)) {
    bounce(g, m->kind, m->to, m->from, m->ref, "noconnection");
  } else if (window_full(p)) {
    return false;
  } else {
    note_out(g, p, m);
    rec r = {m->len, m->kind, m->to, m->from, m->ref, m->aux, 0, m->data};
    to_peer(g, p, &r);
  }
  ty_msg_free(m);
  return true;
}

void lc_route_acks(lc_gw *g, uint64_t now) {
  if (g->ov_bytes > g->backlog / 4) return; /* lagging: the senders wait */
  size_t k = 0;
  for (size_t i = 0; i < g->nacks; i++) {
    lc_peer *p = g->peers[g->acks[i]];
    if (!p) continue;
    uint64_t last = p->seq_in - 1;
    if (last - p->ack_sent >= LC_WINDOW / 8 ||
        p->bytes_in_ack >= LC_WINDOW_BYTES / 8 || now - p->ack_ns > LC_ACK_NS) {
      lc_send_ctl(g, p, LC_W_ACK, lc_node_pid(p->id), 0, last, NULL, 0);
      p->ack_sent = last;
      p->ack_ns = now;
      p->ack_due = false;
      p->bytes_in_ack = 0;
    } else {
      g->acks[k++] = g->acks[i]; /* later, in a bigger batch */
    }
  }
  g->nacks = k;
}

/* ---- in: toward the workers -------------------------------------------- */

/* The receiver's mailbox limit holds for what other nodes send, as for a
 * limited send here (ty_send_limited): an actor's message or call from
 * another node to a mailbox at its limit is refused, checked as it enters
 * a worker's ring. A call is answered "full"; a message (whose send
 * returned true long ago) is dropped and counted in `full` and `drops`.
 * Replies, signals, DOWN notices and what the gateway makes up pass. */
static bool refused_full(lc_gw *g, ty_msg *m) {
  bool ordinary =
      m->kind == LT_CALL || (m->kind == LT_MSG && !(m->aux & LT_AUX_DOWN));
  if (!ordinary || !ty_pid_remote(g->rt, m->from) ||
      !ty_port_full(g->rt, m->to))
    return false;
  lc_count(&lc_sh.full, 1);
  if (m->kind == LT_CALL) reply_err(g, m->from, m->ref, "full");
  else lc_count(&lc_sh.drops, 1);
  ty_msg_free(m);
  return true;
}

/* Pushes m into worker w's ring unless the ring is full or holds
 * LC_RING_BYTES of messages already (one message always goes: a larger
 * one must not wait forever). */
static bool ring_push(lc_gw *g, unsigned w, ty_msg *m) {
  struct lc_inring *r = &g->inring[w];
  if (!r->sz) {
    r->cap = ty_port_ring_cap(g->rt);
    r->sz = ty__xcalloc(r->cap, sizeof *r->sz);
  }
  for (uint32_t t = ty_port_taken(g->rt, w); r->taken != t; r->taken++)
    r->bytes -= r->sz[r->taken & (r->cap - 1)];
  uint32_t size = (uint32_t)(sizeof *m + m->len);
  if (r->bytes && r->bytes + size > LC_RING_BYTES) return false;
  if (!ty_port_push(g->rt, w, m)) return false;
  r->sz[r->pushed++ & (r->cap - 1)] = size;
  r->bytes += size;
  return true;
}

void lc_deliver(lc_gw *g, ty_msg *m) {
  unsigned w = ty_port_route(g->rt, m);
  if (w == TY_PORT_DONE) return;
  if (!g->ov_head[w] && (refused_full(g, m) || ring_push(g, w, m))) return;
  size_t size = sizeof *m + m->len;
  if (g->ov_bytes + size > g->backlog) {
    /* The workers are behind by more than the backlog: the message is
     * lost, and says so. */
    lc_count(&lc_sh.drops, 1);
    lc_count(&lc_sh.slow_consumers, 1);
    if (m->kind == LT_CALL) reply_err(g, m->from, m->ref, "busy");
    ty_msg_free(m);
    return;
  }
  m->node.next = NULL;
  if (g->ov_tail[w]) g->ov_tail[w]->node.next = &m->node;
  else g->ov_head[w] = m;
  g->ov_tail[w] = m;
  g->ov_bytes += size;
}

bool lc_deliver_flush(lc_gw *g) {
  bool left = false;
  unsigned n = ty_runtime_workers(g->rt);
  for (unsigned w = 0; w < n; w++) {
    ty_msg *m;
    while ((m = g->ov_head[w])) {
      ty_msg *next = (ty_msg *)m->node.next;
      size_t size = sizeof *m + m->len;
      if (!refused_full(g, m) && !ring_push(g, w, m)) break;
      /* m is in the ring, or refused and freed */
      g->ov_head[w] = next;
      if (!next) g->ov_tail[w] = NULL;
      g->ov_bytes -= size;
    }
    left |= g->ov_head[w] != NULL;
  }
  ty_port_publish(g->rt);
  return left;
}

/* What arriving means for monitors, links and calls. False: the message is
 * stale (a DOWN for a monitor that a lost connection already fired). */
static bool note_in(lc_gw *g, lc_peer *p, const rec *r) {
  switch (r->kind) {
  case LT_REPLY:
  case LT_REPLY_ERR: lc_call_end(g, r->to, r->ref); break;
  case LT_SIG_LINK: lc_watch_add(p, LC_WATCH_LINK, r->to, r->from); break;
  case LT_SIG_UNLINK:
  case LT_SIG_EXIT: lc_watch_del(p, LC_WATCH_LINK, r->to, r->from); break;
  case LT_MSG:
    if (r->aux & LT_AUX_DOWN) {
      lc_slot *s = lc_map_get(&p->watches,
                              (lc_key){r->to | (uint64_t)LC_WATCH_MONITOR << 60,
                                       r->from});
      if (!s) return false;
      lc_map_del_slot(&p->watches, s);
    }
    break;
  }
  return true;
}

/* A record for a gateway, not an actor. */
static void gateway_rec(lc_gw *g, lc_peer *p, const rec *r) {
  switch (r->kind) {
  case LC_W_SVC_ACK: lc_call_ack(g, r->to, r->ref, p->id); break;
  case LC_W_PING:
    lc_send_ctl(g, p, LC_W_PONG, r->from, 0, r->aux, NULL, 0);
    break;
  case LC_W_PONG: {
    double rtt = (double)(lc_now_ns() - r->aux) * 1e-9;
    p->rtt = p->rtt ? 0.7 * p->rtt + 0.3 * rtt : rtt;
    break;
  }
  case LC_W_SVC_REQ: lc_announce_to(g, p); break;
  case LC_W_SVC_LIST:
    lc_peers_on_svc_list(g, p, (uint32_t)r->aux, r->data, r->len);
    break;
  case LC_W_ACK:
    if (r->aux > p->acked && r->aux <= p->seq_out) {
      p->acked = r->aux;
      window_ack(p, r->aux);
      p->full_ns = 0;
    }
    break;
  }
}

/* A service call or message that found no member here (the last one left
 * while it travelled) goes back to the service's subject, counting the
 * times it was passed on: by then our UNSUB is ahead of it (gw_svc.c), so
 * the server gives it to another node that serves it (which may have lost
 * its last member meanwhile too, when members come and go fast: then it
 * goes on again, up to LC_SVC_HOPS times). False when no other node serves
 * it or it went round too often. */
static bool pass_on(lc_gw *g, const rec *r, uint64_t svc) {
  if (r->aux >= LC_SVC_HOPS || !lc_svc_remote(svc)) return false;
  if (r->kind != LT_CALL && r->kind != LT_MSG) return false;
  const char *name = lc_svc_name(svc);
  char subject[256];
  snprintf(subject, sizeof subject, "%ssvc.%s", g->prefix, name);
  rec fwd = *r;
  fwd.to = 0;
  fwd.seq = 0;
  fwd.aux = r->aux + 1;
  ty__buf *b = &g->scratch;
  ty__buf_reset(b);
  put_rec(b, &fwd);
  return publish_frame(g, subject, b, 1);
}

/* A service call or message: to a local member, else passed on, else back
 * as "noproc". The acknowledgement goes to the caller's node (the frame may
 * come from a node that passed the call on). */
static bool to_member(lc_gw *g, rec *r, uint64_t svc) {
  r->to = lc_svc_local(svc, 0);
  if (r->to) {
    lc_peer *cp =
        ty_pid_remote(g->rt, r->from) ? g->peers[ty_pid_node(r->from)] : NULL;
    if (r->kind == LT_CALL && cp)
      lc_send_ctl(g, cp, LC_W_SVC_ACK, r->from, r->ref, 0, NULL, 0);
    else if (r->kind == LT_CALL) /* our own caller: its reply stays here */
      lc_call_end(g, r->from, r->ref);
    r->aux = 0;
    return true;
  }
  if (pass_on(g, r, svc)) return false;
  if (r->kind == LT_CALL) reply_err(g, r->from, r->ref, "noproc");
  else lc_count(&lc_sh.drops, 1);
  return false;
}

/* Sequence check for records sent to this node: a gap is lost messages. */
static void check_seq(lc_gw *g, lc_peer *p, uint64_t seq, uint32_t len) {
  if (!seq) return;
  p->bytes_in_ack += HDR + len;
  if (p->seq_in && seq > p->seq_in) {
    lc_count(&lc_sh.lost, seq - p->seq_in);
    lc_count(&lc_sh.drops, seq - p->seq_in);
    lc_watch_lost(g, p, false);
  }
  if (seq >= p->seq_in) p->seq_in = seq + 1;
  if (!p->ack_due) {
    p->ack_due = true;
    g->acks[g->nacks++] = p->id;
  }
}

/* A record from this node itself: a barrier coming back, or a service call
 * the queue group gave back to us (a draining subscription still takes
 * what the server sent before our UNSUB). */
static void own_record(lc_gw *g, rec *r, uint64_t svc) {
  if (r->kind == LC_W_BARRIER) {
    lc_barrier_back(g, r->aux);
    return;
  }
  if (!svc || !to_member(g, r, svc)) return;
  ty_msg *m = ty_msg_new(r->len);
  if (r->len) memcpy(m->data, r->data, r->len);
  m->kind = r->kind;
  m->to = r->to;
  m->from = r->from;
  m->ref = r->ref;
  lc_deliver(g, m);
}

static void record_in(lc_gw *g, lc_peer *p, rec *r, uint64_t svc) {
  if (!p) {
    own_record(g, r, svc);
    return;
  }
  check_seq(g, p, r->seq, r->len);
  if (lc_gateway_kind(r->kind)) {
    gateway_rec(g, p, r);
    return;
  }
  if (svc && !to_member(g, r, svc)) return;
  if (ty_pid_remote(g->rt, r->to) || !note_in(g, p, r)) return;
  ty_msg *m = ty_msg_new(r->len);
  if (r->len) memcpy(m->data, r->data, r->len);
  m->kind = r->kind;
  m->to = r->to;
  m->from = r->from;
  m->ref = r->ref;
  m->aux = r->aux;
  if (!ty_pid_alive(g->rt, m->to)) m->aux |= LT_AUX_NOPROC;
  lc_deliver(g, m);
}

void lc_route_in(lc_gw *g, const char *data, size_t len, uint64_t svc) {
  size_t nl = len >= PREFIX_FIXED ? (uint8_t)data[3] : 0;
  if (len < PREFIX_FIXED + nl || memcmp(data, "TY\1", 3) != 0) {
    lc_count(&lc_sh.drops, 1); /* not ours: counted, never delivered */
    return;
  }
  lc_count(&lc_sh.bytes_in, len);
  unsigned node = get32(data + 4);
  lc_peer *p = NULL;
  if (node != lc_sh.id) {
    if (!(p = lc_peer_of(g, node))) return;
    p->data_ns = lc_now_ns(); /* a sign of life (gw_peers.c, the tick) */
    if (!p->name[0]) lc_peer_named(g, p, data + PREFIX_FIXED, nl);
  }
  for (size_t off = PREFIX_FIXED + nl; off + HDR <= len;) {
    const char *h = data + off;
    rec r = {get32(h),      get32(h + 4),  get64(h + 8),  get64(h + 16),
             get64(h + 24), get64(h + 32), get64(h + 40), h + HDR};
    if (r.len > len - off - HDR) break; /* truncated */
    off += HDR + r.len;
    lc_count(&lc_sh.msgs_in, 1);
    record_in(g, p, &r, svc);
  }
}
