/*
 * gw_beat.c - heartbeats on a connection and a thread of their own
 * (docs/cluster.md, "Liveness").
 *
 * On the data connection a heartbeat waited behind whatever data was ahead
 * of it: in the sender's buffer, in the server's queue toward a flooded
 * receiver, and in the receiving gateway's turn. A node flooded for a few
 * seconds was then declared dead though it was alive (issue 18, item 3).
 * Here the beats have their own plain nats.c connection (its own reader
 * and flusher threads) and one thread that publishes ours every period and
 * takes the others' as they come. It stamps each with the time it arrived
 * and hands it to the gateway through a small locked queue; the gateway
 * judges silence by those stamps (gw_peers.c), so a gateway busy with a
 * flood does not see silence that was not there.
 *
 * Silence is judged only while our own beats come back within LC_ECHO_NS:
 * when they do not, this process or the server is the one that stalls (a
 * machine short of CPU, say), and every other node would look silent.
 *
 * What a beat says that the gateway decides (the data connection's epoch,
 * the service list's version) is read from atomics the gateway writes. The
 * goodbye stays on the data connection (subject bye.<node>): it must come
 * after the last data the node sent.
 *
 * A node's beats of its first 250 ms say hello: every other node answers
 * the first of them with a beat of its own at once, so that the newcomer,
 * which counts a node up once it heard it beat, does not wait up to a
 * period for each (docs/cluster.md, "Growing"); one node id is greeted
 * at most once a second, whatever nonces it says hello with. The control connection
 * listens for beats here too while the node claims its name and id
 * (lc_beats_heard).
 */
#include <errno.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "gw.h"

#define BEAT_LISTEN_MS 600 /* > the 500 ms of silence that means "down" */
#define QUEUE_MAX 4096 /* beats held for the gateway (the oldest go first) */
#define GREET_GAP_NS (10 * 1000000ull) /* beats for newcomers: this far apart */
#define HELLO_NS (250 * 1000000ull)    /* our first beats say hello this long */
#define GREET_AGAIN_NS (1000 * 1000000ull) /* one node id greeted this often */

typedef struct beat_in {
  uint64_t at; /* lc_now_ns() when it arrived */
  uint32_t len;
  char data[LC_BEAT_MAX];
} beat_in;

static struct {
  natsConnection *nc;
  natsSubscription *sub;
  pthread_t thread;
  bool running;
  _Atomic bool stop; /* seq_cst: set by stop, polled by the thread */
  /* What our beats say: written by the gateway, read by the thread
   * (relaxed: each is a value on its own; a beat one period late with an
   * older one is what a slow network gives too). */
  _Atomic uint32_t epoch, svc_ver;
  /* Reconnections of this connection (relaxed: read by the gateway's tick
   * to judge no silence right after its own outage). */
  _Atomic uint64_t reconnects;
  _Atomic bool connected; /* relaxed: the same */
  /* When our own beat last came back (relaxed: the same). */
  _Atomic uint64_t echo_ns;
  pthread_mutex_t mu; /* the queue */
  beat_in *q;
  size_t head, n;
  char subject[200];
  uint64_t hello_until; /* this thread's alone */
  /* The incarnation (nonce) last heard beating under each node id: this
   * thread's alone. */
  uint64_t heard[TY_MAX_NODES];
  /* When each node id was last greeted: a peer that says hello under new
   * nonces without end gets one greeting per GREET_AGAIN_NS, not one per
   * nonce (this thread's alone). */
  uint64_t greeted[TY_MAX_NODES];
} B = {.mu = PTHREAD_MUTEX_INITIALIZER};

void lc_beat_set(uint32_t epoch, uint32_t svc_ver) {
  atomic_store_explicit(&B.epoch, epoch, memory_order_relaxed);
  atomic_store_explicit(&B.svc_ver, svc_ver, memory_order_relaxed);
}

static void publish_beat(uint64_t now) {
  char buf[LC_BEAT_MAX];
  int len =
      lc_beat_encode(buf, atomic_load_explicit(&B.epoch, memory_order_relaxed),
                     atomic_load_explicit(&B.svc_ver, memory_order_relaxed),
                     now < B.hello_until ? LC_BEAT_HELLO : 0);
  N(natsConnection_Publish)(B.nc, B.subject, buf, len);
}

/* Our own beat, back from the server: the server passes beats and this
 * thread runs (see lc_beat_hearing). */
static bool own_echo(const lc_beat *b) {
  return b->id == lc_sh.id && b->nonce == lc_sh.nonce;
}

/* A node that just joined (its first beats say hello) and that we have not
 * greeted yet: it counts another node up once it heard that node beat
 * (gw_peers.c), and our next beat is up to a period away. It subscribed to
 * the beats before it sent its first, so a beat of ours published now
 * reaches it. */
static bool newcomer(const lc_beat *b) {
  if (b->id >= TY_MAX_NODES || !(b->flags & LC_BEAT_HELLO) ||
      B.heard[b->id] == b->nonce)
    return false;
  B.heard[b->id] = b->nonce;
  uint64_t now = lc_now_ns();
  if (B.greeted[b->id] && now - B.greeted[b->id] < GREET_AGAIN_NS) return false;
  B.greeted[b->id] = now;
  return true;
}

/* Queues a beat for the gateway; true if a newcomer's (to greet). */
static bool queue_beat(const char *d, size_t len) {
  lc_beat hb;
  if (len > LC_BEAT_MAX || !lc_beat_decode(d, len, &hb)) return false;
  if (own_echo(&hb)) {
    atomic_store_explicit(&B.echo_ns, lc_now_ns(), memory_order_relaxed);
    return false;
  }
  pthread_mutex_lock(&B.mu);
  if (B.n == QUEUE_MAX) { /* the gateway is far behind: keep the newest */
    B.head = (B.head + 1) % QUEUE_MAX;
    B.n--;
  }
  beat_in *b = &B.q[(B.head + B.n++) % QUEUE_MAX];
  b->at = lc_now_ns();
  b->len = (uint32_t)len;
  memcpy(b->data, d, len);
  pthread_mutex_unlock(&B.mu);
  return newcomer(&hb);
}

/* The beats' threads (this one, and nats.c's reader of the heartbeat
 * connection, which inherits the nice value of the thread that connects)
 * run at a higher priority where the process may raise it: on a machine
 * short of CPU a beat then does not wait for a time slice behind the busy
 * threads (issue 18, item 3). Without the privilege they run as any
 * thread; the echo check (lc_beat_hearing) still keeps a starved observer
 * from judging. Returns the nice value to go back to. */
#define BEAT_NICE (-10)
static int raise_priority(void) {
  pid_t tid = gettid();
  errno = 0;
  int old = getpriority(PRIO_PROCESS, (id_t)tid);
  if (errno) old = 0;
  setpriority(PRIO_PROCESS, (id_t)tid, BEAT_NICE); /* may fail: fine */
  return old;
}

/* A greeting is a beat more, out of the schedule: moving the schedule to
 * it would bring every node's beats into one phase (all answer the same
 * newcomer), and a large cluster's beats would come in one burst. */
static void *beat_main(void *arg) {
  (void)arg;
  raise_priority();
  uint64_t next = lc_now_ns(), last = 0;
  uint64_t greet_at = 0, greeted = 0; /* greet_at: a greeting due (0: none) */
  B.hello_until = next + HELLO_NS;
  /* seq_cst: pairs with the store in lc_beat_stop. */
  while (!atomic_load(&B.stop)) {
    uint64_t now = lc_now_ns();
    if (now >= next) {
      /* A beat this late makes others judge us silent: say so (a thread
       * kept off the CPU, or blocked in the publish). */
      if (last && now - last > 3 * LC_BEAT_NS)
        ty__logf(TY_LOG_WARN, -1, 0,
                 "cluster: our heartbeat went out %.2f s after the last",
                 (double)(now - last) * 1e-9);
      last = now;
      publish_beat(now);
      next = now - next > LC_BEAT_NS ? now + LC_BEAT_NS : next + LC_BEAT_NS;
      greet_at = 0; /* this one greets */
    } else if (greet_at && now >= greet_at) {
      publish_beat(now);
      greeted = now;
      greet_at = 0;
    }
    natsConnStatus st = N(natsConnection_Status)(B.nc);
    atomic_store_explicit(&B.connected, st == NATS_CONN_STATUS_CONNECTED,
                          memory_order_relaxed);
    uint64_t wake = greet_at && greet_at < next ? greet_at : next;
    int64_t wait = wake > now ? (int64_t)((wake - now) / 1000000) + 1 : 1;
    natsMsg *m;
    natsStatus s = N(natsSubscription_NextMsg)(&m, B.sub, wait);
    if (s == NATS_OK) {
      /* A newcomer hears us at once, not up to a period later (one beat
       * more per newcomer, at most one per GREET_GAP_NS). */
      if (queue_beat(N(natsMsg_GetData)(m),
                     (size_t)N(natsMsg_GetDataLength)(m)) &&
          !greet_at) {
        greet_at = lc_now_ns();
        if (greeted && greet_at < greeted + GREET_GAP_NS)
          greet_at = greeted + GREET_GAP_NS;
      }
      N(natsMsg_Destroy)(m);
    } else if (s != NATS_TIMEOUT && s != NATS_SLOW_CONSUMER) {
      struct timespec ts = {0, 10 * 1000 * 1000}; /* closed: do not spin */
      nanosleep(&ts, NULL);
    }
  }
  return NULL;
}

static void reconnected(natsConnection *nc, void *closure) {
  (void)nc;
  (void)closure;
  /* relaxed: a count (see B) */
  atomic_fetch_add_explicit(&B.reconnects, 1, memory_order_relaxed);
}

static natsStatus connect_beats(const char *url) {
  natsOptions *o;
  natsStatus s = N(natsOptions_Create)(&o);
  if (s != NATS_OK) return s;
  char name[160];
  snprintf(name, sizeof name, "%s.%s.beat", lc_sh.cluster, lc_sh.name);
  if ((s = lc_nats_set_urls(o, url)) == NATS_OK &&
      (s = N(natsOptions_SetName)(o, name)) == NATS_OK &&
      (s = N(natsOptions_SetTimeout)(o, 2000)) == NATS_OK &&
      (s = N(natsOptions_SetSendAsap)(o, true)) == NATS_OK &&
      (s = N(natsOptions_SetMaxReconnect)(o, -1)) == NATS_OK &&
      (s = N(natsOptions_SetReconnectWait)(o, 50)) == NATS_OK &&
      /* Servers in the order given: the first is this node's own. */
      (s = N(natsOptions_SetNoRandomize)(o, true)) == NATS_OK &&
      (s = N(natsOptions_SetReconnectJitter)(o, 0, 0)) == NATS_OK &&
      /* A beat published while cut off is stale by the reconnect. */
      (s = N(natsOptions_SetReconnectBufSize)(o, 64)) == NATS_OK &&
      (s = N(natsOptions_SetReconnectedCB)(o, reconnected, NULL)) == NATS_OK &&
      (s = N(natsOptions_SetPingInterval)(o, 2000)) == NATS_OK &&
      (s = N(natsOptions_SetMaxPingsOut)(o, 3)) == NATS_OK)
    s = N(natsConnection_Connect)(&B.nc, o);
  N(natsOptions_Destroy)(o);
  return s;
}

int lc_beat_connect(const char *url, const char *prefix, char *err,
                    size_t errlen) {
  B.q = ty__xcalloc(QUEUE_MAX, sizeof *B.q);
  B.head = B.n = 0;
  memset(B.heard, 0, sizeof B.heard);
  memset(B.greeted, 0, sizeof B.greeted);
  atomic_store_explicit(&B.stop, false, memory_order_relaxed);
  atomic_store_explicit(&B.reconnects, 0, memory_order_relaxed);
  atomic_store_explicit(&B.connected, true, memory_order_relaxed);
  atomic_store_explicit(&B.echo_ns, lc_now_ns(), memory_order_relaxed);
  snprintf(B.subject, sizeof B.subject, "%shb.%s", prefix, lc_sh.name);
  char all[200];
  snprintf(all, sizeof all, "%shb.*", prefix);
  int nice_before = raise_priority(); /* nats.c's reader thread inherits it */
  natsStatus s = connect_beats(url);
  setpriority(PRIO_PROCESS, (id_t)gettid(), nice_before);
  if (s == NATS_OK) s = N(natsConnection_SubscribeSync)(&B.sub, B.nc, all);
  if (s == NATS_OK) s = N(natsSubscription_SetPendingLimits)(B.sub, -1, -1);
  if (s != NATS_OK) {
    snprintf(err, errlen, "cannot connect the heartbeats to NATS: %s",
             N(natsStatus_GetText)(s));
    lc_beat_stop();
    return -1;
  }
  return 0;
}

void lc_beat_start(void) {
  if (pthread_create(&B.thread, NULL, beat_main, NULL))
    ty__die("cannot create the cluster heartbeat thread");
  B.running = true;
}

size_t lc_beat_take(lc_beat_fn fn, void *ctx) {
  beat_in one;
  size_t n = 0;
  for (;;) {
    pthread_mutex_lock(&B.mu);
    bool got = B.n > 0;
    if (got) {
      one = B.q[B.head];
      B.head = (B.head + 1) % QUEUE_MAX;
      B.n--;
    }
    pthread_mutex_unlock(&B.mu);
    if (!got) return n;
    fn(ctx, one.data, one.len, one.at);
    n++;
  }
}

bool lc_beat_hearing(uint64_t *reconnects, uint64_t now) {
  *reconnects = atomic_load_explicit(&B.reconnects, memory_order_relaxed);
  uint64_t echo = atomic_load_explicit(&B.echo_ns, memory_order_relaxed);
  return atomic_load_explicit(&B.connected, memory_order_relaxed) &&
         (echo >= now || now - echo < LC_ECHO_NS);
}

uint64_t lc_beat_echo_ns(void) {
  return atomic_load_explicit(&B.echo_ns, memory_order_relaxed); /* see B */
}

void lc_beat_stop(void) {
  if (B.running) {
    /* seq_cst: see beat_main; it wakes within one period. */
    atomic_store(&B.stop, true);
    pthread_join(B.thread, NULL);
    B.running = false;
  }
  if (B.nc) {
    N(natsConnection_Close)(B.nc);
    N(natsConnection_Destroy)(B.nc);
  }
  if (B.sub) N(natsSubscription_Destroy)(B.sub);
  B.nc = NULL;
  B.sub = NULL;
  pthread_mutex_lock(&B.mu);
  free(B.q); /* the gateway's last turns (lc_gw_stop) find it empty */
  B.q = NULL;
  B.head = B.n = 0;
  pthread_mutex_unlock(&B.mu);
}

/* ---- listening (the control connection's, while it joins: ctl.c) ------- */

bool lc_beats_heard(natsConnection *nc, const char *subject, unsigned *ids,
                    size_t *nids) {
  natsSubscription *sub;
  if (N(natsConnection_SubscribeSync)(&sub, nc, subject) != NATS_OK)
    return false;
  bool heard = false;
  uint64_t end = lc_now_ns() + BEAT_LISTEN_MS * 1000000ull;
  for (uint64_t now; (now = lc_now_ns()) < end;) {
    natsMsg *m;
    int64_t left = (int64_t)((end - now) / 1000000) + 1;
    if (N(natsSubscription_NextMsg)(&m, sub, left) != NATS_OK) break;
    lc_beat b;
    if (lc_beat_decode(N(natsMsg_GetData)(m),
                       (size_t)N(natsMsg_GetDataLength)(m), &b) &&
        !(b.flags & LC_BEAT_BYE)) {
      heard = true;
      if (ids && *nids < TY_MAX_NODES) ids[(*nids)++] = b.id;
    }
    N(natsMsg_Destroy)(m);
    if (heard && !ids) break;
  }
  N(natsSubscription_Unsubscribe)(sub);
  N(natsSubscription_Destroy)(sub);
  return heard;
}
