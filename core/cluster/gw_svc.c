/*
 * gw_svc.c - services on the gateway's side, and the requests workers send
 * it (docs/cluster.md, "Services").
 *
 * A node serves a service while it has local members: the gateway holds a
 * queue subscription on tycho.<cluster>.svc.<name> (queue group: the same
 * name), so that NATS gives each message to exactly one serving node, whose
 * gateway hands it to one of its members. The subscription drains when the
 * last member leaves (unsubscribe, below): what was already on its way is
 * passed on to another serving node, not lost. Which nodes serve what is
 * announced on tycho.<cluster>.ann each time the set changes, and
 * heartbeats carry its version so that a missed announcement is asked for
 * again.
 *
 * tycho.join returns once a marker published after the subscription and
 * the announcement has come back from the server (a barrier): by then the
 * server knows the subscription, and every node that hears anything from
 * this one afterwards has heard the announcement first.
 */
#include <string.h>

#include "gw.h"

#define DRAIN_MS 5000 /* a drain whose PING/PONG never came: given up */

/* The live subscription of a service (not one that drains). */
static lc_sub *find_sub(lc_gw *g, uint64_t id) {
  for (size_t i = 0; i < g->nsubs; i++)
    if (g->subs[i].id == id && !g->subs[i].draining) return &g->subs[i];
  return NULL;
}

/* Our services, one name per line. */
static void list_names(lc_gw *g, ty__buf *b) {
  ty__buf_reset(b);
  for (size_t i = 0; i < g->nsubs; i++) {
    const char *name = lc_svc_name(g->subs[i].id);
    if (!name || g->subs[i].draining) continue;
    if (ty__buf_append(b, name, strlen(name)) || ty__buf_append(b, "\n", 1))
      ty__die("out of memory");
  }
}

void lc_announce(lc_gw *g) {
  g->svc_ver++;
  ty__buf names, frame;
  ty__buf_init(&names);
  ty__buf_init(&frame);
  list_names(g, &names);
  lc_put_record(&frame, LC_W_SVC_LIST, 0, lc_node_pid(lc_sh.id), 0, g->svc_ver,
                names.data, names.len);
  char subject[200];
  snprintf(subject, sizeof subject, "%sann", g->prefix);
  if (!lc_gw_publish(g, subject, frame.data, (int)frame.len))
    lc_count(&lc_sh.drops, 1); /* the next heartbeat makes them ask */
  ty__buf_free(&frame);
  ty__buf_free(&names);
}

void lc_announce_to(lc_gw *g, lc_peer *p) {
  ty__buf names;
  ty__buf_init(&names);
  list_names(g, &names);
  lc_send_ctl(g, p, LC_W_SVC_LIST, lc_node_pid(p->id), 0, g->svc_ver,
              names.data, names.len);
  ty__buf_free(&names);
}

/* ---- join and leave ----------------------------------------------------- */

static bool subscribe(lc_gw *g, uint64_t id) {
  const char *name = lc_svc_name(id);
  char subject[256];
  snprintf(subject, sizeof subject, "%ssvc.%s", g->prefix, name);
  natsSubscription *sub;
  natsStatus s =
      N(natsConnection_QueueSubscribeSync)(&sub, g->nc, subject, subject);
  if (s != NATS_OK) return false;
  N(natsSubscription_SetPendingLimits)(sub, -1, -1);
  ty__grow(&g->subs, &g->capsubs, g->nsubs + 1, sizeof *g->subs, 4);
  g->subs[g->nsubs++] = (lc_sub){id, sub, false};
  return true;
}

static void join(lc_gw *g, ty_msg *m) {
  lc_sub *sub = find_sub(g, m->aux);
  if (sub) {
    /* served already */
  } else if (!subscribe(g, m->aux)) {
    lc_send_local(g, m->from, 0, LT_REPLY_ERR, m->ref, 0, "noconnection", 12);
    return;
  } else {
    lc_announce(g);
  }
  ty__grow(&g->waiters, &g->capwaiters, g->nwaiters + 1, sizeof *g->waiters, 4);
  g->waiters[g->nwaiters++] = (struct lc_waiter){m->from, m->ref, ++g->marks};
  lc_send_ctl(g, NULL, LC_W_BARRIER, lc_node_pid(lc_sh.id), 0, g->marks, NULL,
              0);
}

void lc_barrier_back(lc_gw *g, uint64_t mark) {
  if (mark > g->mark_seen) g->mark_seen = mark;
  size_t k = 0;
  static const char yes = 0x02; /* the codec's true */
  for (size_t i = 0; i < g->nwaiters; i++) {
    struct lc_waiter *w = &g->waiters[i];
    if (w->mark <= g->mark_seen)
      lc_send_local(g, w->pid, 0, LT_REPLY, w->ref, 0, &yes, 1);
    else g->waiters[k++] = *w;
  }
  g->nwaiters = k;
}

/* The last local member left: the server must stop choosing this node at
 * once (a queue group picks any subscriber, and a node without members
 * could only answer "noproc"). The subscription drains (nats.c): its UNSUB
 * goes out, and the subscription keeps taking what the server sent before
 * it read the UNSUB, until a PING/PONG round shows nothing more can come;
 * the gateway reads it as any other (gw.c, drain_all) and passes what it
 * gets on to another node that serves the service (gw_route.c, pass_on:
 * published after the UNSUB, so the server does not choose us again). The
 * announcement tells the others at once. lc_svc_tick frees it once done. */
static void unsubscribe(lc_gw *g, lc_sub *s) {
  s->draining = true;
  if (N(natsSubscription_DrainTimeout)(s->sub, DRAIN_MS) != NATS_OK)
    N(natsSubscription_Unsubscribe)(s->sub); /* cut off: nothing comes */
  lc_announce(g);
}

void lc_svc_tick(lc_gw *g) {
  for (size_t i = 0; i < g->nsubs;) {
    lc_sub *s = &g->subs[i];
    int pm = 0, pb = 0;
    if (s->draining && !N(natsSubscription_IsValid)(s->sub) &&
        (N(natsSubscription_GetPending)(s->sub, &pm, &pb) != NATS_OK ||
         pm == 0)) {
      N(natsSubscription_Destroy)(s->sub);
      g->subs[i] = g->subs[--g->nsubs];
      continue;
    }
    i++;
  }
}

void lc_subs_free(lc_gw *g) {
  for (size_t i = 0; i < g->nsubs; i++)
    if (g->subs[i].sub) N(natsSubscription_Destroy)(g->subs[i].sub);
  free(g->subs);
  g->subs = NULL;
  g->nsubs = g->capsubs = 0;
}

/* ---- requests from workers ---------------------------------------------- */

void lc_request(lc_gw *g, ty_msg *m) {
  char name[80];
  size_t len = m->len < sizeof name - 1 ? m->len : sizeof name - 1;
  memcpy(name, m->data, len);
  name[len] = 0;
  switch (m->kind) {
  case LC_REQ_MONITOR_NODE: lc_node_monitor(g, m->from, name, true); break;
  case LC_REQ_DEMONITOR_NODE: lc_node_monitor(g, m->from, name, false); break;
  case LC_REQ_JOIN: join(g, m); break;
  case LC_REQ_LEAVE: {
    /* A member that joined meanwhile (on another worker) keeps it. */
    lc_sub *sub = find_sub(g, m->aux);
    if (sub && !lc_svc_local(m->aux, 0)) unsubscribe(g, sub);
    break;
  }
  }
}
