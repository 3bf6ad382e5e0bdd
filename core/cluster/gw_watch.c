/*
 * gw_watch.c - monitors, links and calls that cross nodes, and what a lost
 * connection tells them (docs/cluster.md, "Failure").
 *
 * A monitor or a link lives on the watched actor's side (lexit.c tells its
 * watchers when it ends), so if that actor's node goes away nobody would
 * tell them. The gateway sees every monitor, link and call cross the wire
 * and keeps them per node: a monitor (local watcher, remote target) from
 * the MONITOR signal until its DOWN comes back; a link (local, remote) from
 * the LINK signal (either way) until an UNLINK or EXIT crosses; a call
 * (local caller, its ref) until its reply comes back. When the connection
 * to a node is lost (it went down, or messages to or from it were lost),
 * the gateway answers for it: DOWN "noconnection" to the monitors, an EXIT
 * "noconnection" to the links, "noconnection" to the callers. A service
 * call does not know its node until the node that took it acks it; one
 * still unacked 200 ms after a node went down is answered too.
 */
#include <string.h>

#include "gw.h"

#define SUSPECT_MS 200

static lc_key watch_key(int kind, ty_pid local, ty_pid remote) {
  return (lc_key){local | (uint64_t)kind << 60, remote};
}

void lc_watch_add(lc_peer *p, int kind, ty_pid local, ty_pid remote) {
  bool fresh;
  lc_map_put(&p->watches, watch_key(kind, local, remote), &fresh);
}

void lc_watch_del(lc_peer *p, int kind, ty_pid local, ty_pid remote) {
  lc_map_del(&p->watches, watch_key(kind, local, remote));
}

/* ---- messages the gateway makes up -------------------------------------- */

void lc_send_local(lc_gw *g, ty_pid to, ty_pid from, uint32_t kind,
                   uint64_t ref, uint64_t aux, const void *data, size_t len) {
  if (!to || ty_pid_remote(g->rt, to)) return;
  ty_msg *m = ty_msg_new(len);
  if (len) memcpy(m->data, data, len);
  m->to = to;
  m->from = from ? from : lc_node_pid(lc_sh.id);
  m->kind = kind;
  m->ref = ref;
  m->aux = aux;
  lc_deliver(g, m);
}

void lc_send_values(lc_gw *g, ty_pid to, ty_pid from, const char *tag,
                    const double *num, const char *s1, const char *s2) {
  ty__buf *b = &g->scratch;
  ty__buf_reset(b);
  int err = lt_codec_put_string(b, tag, strlen(tag));
  if (num) err |= lt_codec_put_number(b, *num);
  if (s1) err |= lt_codec_put_string(b, s1, strlen(s1));
  if (s2) err |= lt_codec_put_string(b, s2, strlen(s2));
  if (err) ty__die("out of memory");
  lc_send_local(g, to, from, LT_MSG, 0, num ? LT_AUX_DOWN : 0, b->data, b->len);
}

/* ---- calls --------------------------------------------------------------- */

/* calls: (caller, 0) -> v1 = ref, v2 = node | suspect deadline (ms) << 16.
 * An actor waits for one call at a time, so a caller's new call replaces
 * its old entry. */

void lc_call_start(lc_gw *g, ty_pid caller, uint64_t ref, unsigned node) {
  bool fresh;
  lc_slot *s = lc_map_put(&g->calls, (lc_key){caller, 0}, &fresh);
  s->v1 = ref;
  s->v2 = node;
}

void lc_call_ack(lc_gw *g, ty_pid caller, uint64_t ref, unsigned node) {
  lc_slot *s = lc_map_get(&g->calls, (lc_key){caller, 0});
  if (s && s->v1 == ref) s->v2 = node;
}

void lc_call_end(lc_gw *g, ty_pid caller, uint64_t ref) {
  lc_slot *s = lc_map_get(&g->calls, (lc_key){caller, 0});
  if (s && s->v1 == ref) lc_map_del_slot(&g->calls, s);
}

static void fail_call(lc_gw *g, ty_pid caller, uint64_t ref) {
  lc_send_local(g, caller, 0, LT_REPLY_ERR, ref, 0, "noconnection", 12);
}

/* Collects the keys of the entries that match, then acts on each (a map
 * must not change under an iteration). */
typedef bool (*call_pred)(const lc_slot *s, uint64_t arg);

static void fail_calls(lc_gw *g, call_pred pred, uint64_t arg) {
  lc_key *keys = NULL;
  uint64_t *refs = NULL;
  size_t n = 0, cap = 0, capr = 0;
  for (size_t i = 0; i < g->calls.cap; i++) {
    lc_slot *s = &g->calls.s[i];
    if (!s->used || !pred(s, arg)) continue;
    ty__grow(&keys, &cap, n + 1, sizeof *keys, 16);
    ty__grow(&refs, &capr, n + 1, sizeof *refs, 16);
    keys[n] = s->k;
    refs[n++] = s->v1;
  }
  for (size_t i = 0; i < n; i++) {
    lc_map_del(&g->calls, keys[i]);
    fail_call(g, keys[i].a, refs[i]);
  }
  free(keys);
  free(refs);
}

static bool to_node(const lc_slot *s, uint64_t node) {
  return (s->v2 & 0xffff) == node;
}

static bool suspect_due(const lc_slot *s, uint64_t now_ms) {
  uint64_t due = s->v2 >> 16;
  return (s->v2 & 0xffff) == 0 && due && due <= now_ms;
}

void lc_calls_tick(lc_gw *g, uint64_t now) {
  if (!g->calls.n) return;
  fail_calls(g, suspect_due, now / 1000000);
}

/* ---- a lost connection --------------------------------------------------- */

void lc_watch_lost(lc_gw *g, lc_peer *p, bool node_down) {
  /* Acknowledgements may be lost too: the window starts afresh. */
  lc_window_reset(p);
  lc_map old = p->watches; /* answered now, forgotten */
  p->watches = (lc_map){0};
  lc_slot *s = old.s;
  for (size_t i = 0; i < old.cap; i++) {
    if (!s[i].used) continue;
    ty_pid local = s[i].k.a & (((uint64_t)1 << 60) - 1);
    ty_pid remote = s[i].k.b;
    if (s[i].k.a >> 60 == LC_WATCH_MONITOR) {
      double pid = (double)remote;
      lc_send_values(g, local, remote, "DOWN", &pid, "noconnection", NULL);
    } else {
      lc_send_local(g, local, remote, LT_SIG_EXIT, 0, 0, "noconnection", 12);
    }
  }
  lc_map_free(&old);
  fail_calls(g, to_node, p->id);
  if (!node_down) return;
  /* Service calls not acked yet may have gone to that node. */
  uint64_t due = lc_now_ns() / 1000000 + SUSPECT_MS;
  for (size_t i = 0; i < g->calls.cap; i++) {
    lc_slot *c = &g->calls.s[i];
    if (c->used && (c->v2 & 0xffff) == 0 && !(c->v2 >> 16)) c->v2 = due << 16;
  }
}

/* ---- what dead local actors left behind --------------------------------- */

static bool caller_dead(const lc_slot *s, uint64_t arg) {
  (void)arg;
  return !ty_pid_alive(lc_g->rt, s->k.a);
}

void lc_watch_sweep(lc_gw *g) {
  /* Calls of callers that ended: nobody to answer. */
  lc_key *keys = NULL;
  size_t n = 0, cap = 0;
  for (size_t i = 0; i < g->calls.cap; i++)
    if (g->calls.s[i].used && caller_dead(&g->calls.s[i], 0)) {
      ty__grow(&keys, &cap, n + 1, sizeof *keys, 16);
      keys[n++] = g->calls.s[i].k;
    }
  for (size_t i = 0; i < n; i++) lc_map_del(&g->calls, keys[i]);
  /* Monitors and links of local actors that ended. */
  for (unsigned id = 1; id < TY_MAX_NODES; id++) {
    lc_peer *p = g->peers[id];
    if (!p || !p->watches.n) continue;
    n = 0;
    for (size_t i = 0; i < p->watches.cap; i++) {
      lc_slot *s = &p->watches.s[i];
      if (!s->used) continue;
      ty_pid local = s->k.a & (((uint64_t)1 << 60) - 1);
      if (ty_pid_alive(g->rt, local)) continue;
      ty__grow(&keys, &cap, n + 1, sizeof *keys, 16);
      keys[n++] = s->k;
    }
    for (size_t i = 0; i < n; i++) lc_map_del(&p->watches, keys[i]);
  }
  free(keys);
  /* Node monitors of actors that ended. */
  size_t k = 0;
  for (size_t i = 0; i < g->nnodewatch; i++)
    if (ty_pid_alive(g->rt, g->nodewatch[i].pid))
      g->nodewatch[k++] = g->nodewatch[i];
  g->nnodewatch = k;
}
