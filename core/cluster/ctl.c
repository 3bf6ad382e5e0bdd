/*
 * ctl.c - the control connection: claiming this node's name and id when it
 * joins, and global names (docs/cluster.md, "Names").
 *
 * JetStream KV calls are request/reply and block, so they never run on the
 * gateway's loop: this connection is a plain nats.c one (its own reader
 * thread), used by the thread that calls tycho.run (the claim) and then by
 * one control thread that runs the jobs workers queue (register_global,
 * whereis_global, releasing the names of actors that ended) one after the
 * other and answers each as a reply message, as the blocking pool does.
 *
 * Buckets (file storage, one value per key):
 *   tycho_<cluster>_nodes   node.<name> -> nonce of the incarnation holding
 *                           the name ("" once released); next_id -> counter
 *   tycho_<cluster>_names   g.<hex of name> -> owner pid ("" once released)
 * A name is taken with Create (exactly one contender wins); one whose owner
 * is dead (its node down, or a local actor that ended) or released is taken
 * over with Update on the revision read (compare and set). Node ids come
 * from the counter, so a restarted node gets a new id and its old pids stay
 * dead; after 1023 joins they wrap around, skipping ids of live nodes.
 */
#include <errno.h>
#include <inttypes.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "cluster.h"

#define OP_WAIT_MS 2000
/* The join's requests wait TRY_MS during its first QUICK_MS (open_quick) */
#define TRY_MS 100
#define QUICK_MS 3000
#define JOIN_MS 10000
#define SWEEP_MS 250

typedef struct job {
  struct job *next;
  lc_kv_op op;
  ty_pid pid, caller;
  uint64_t ref, deadline; /* deadline: lc_now_ns() past it, skip (0: none) */
  char name[];
} job;

typedef struct owned { /* a global name a local actor holds */
  char *name;
  ty_pid pid;
  uint64_t rev;
} owned;

static struct {
  natsConnection *nc;
  jsCtx *js, *js_try;
  kvStore *nodes, *names;
  kvStore *claim; /* the nodes bucket with TRY_MS waits, for the join */
  uint64_t quick_end, join_end;
  uint64_t claim_rev, id_rev;
  char claim_key[96], id_key[32];
  pthread_t thread;
  bool running;
  pthread_mutex_t mu; /* the queue, `stop` and the owned names */
  pthread_cond_t cv;
  job *head, *tail;
  bool stop;
  owned *own;
  size_t nown, capown;
  _Atomic size_t nown_hint; /* relaxed: lets ending actors skip the lock */
} C = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

/* ---- connecting --------------------------------------------------------- */

static natsStatus connect_once(const char *url) {
  natsOptions *o;
  natsStatus s = N(natsOptions_Create)(&o);
  if (s != NATS_OK) return s;
  char name[160];
  snprintf(name, sizeof name, "%s.%s.ctl", lc_sh.cluster, lc_sh.name);
  if ((s = lc_nats_set_urls(o, url)) == NATS_OK &&
      (s = N(natsOptions_SetName)(o, name)) == NATS_OK &&
      (s = N(natsOptions_SetTimeout)(o, OP_WAIT_MS)) == NATS_OK &&
      (s = N(natsOptions_SetSendAsap)(o, true)) == NATS_OK &&
      (s = N(natsOptions_SetMaxReconnect)(o, -1)) == NATS_OK &&
      (s = N(natsOptions_SetReconnectWait)(o, 50)) == NATS_OK &&
      /* Servers in the order given: the first is this node's own. */
      (s = N(natsOptions_SetNoRandomize)(o, true)) == NATS_OK &&
      (s = N(natsOptions_SetReconnectJitter)(o, 0, 0)) == NATS_OK)
    s = N(natsConnection_Connect)(&C.nc, o);
  N(natsOptions_Destroy)(o);
  return s;
}

/* A node may start together with its server (a service manager starting
 * both, or a server still opening its port): the first connect is tried
 * for 2 s before the join fails. */
static natsStatus connect_ctl(const char *url) {
  natsStatus s = connect_once(url);
  for (int i = 0; i < 20 && s == NATS_NO_SERVER; i++) {
    struct timespec ts = {0, 100 * 1000 * 1000};
    nanosleep(&ts, NULL);
    s = connect_once(url);
  }
  return s;
}

/* Servers this connection knows (its URLs and those the server told of):
 * three or more make a NATS cluster, whose buckets get three replicas. */
static int known_servers(void) {
  char **urls = NULL;
  int n = 0;
  if (N(natsConnection_GetServers)(C.nc, &urls, &n) != NATS_OK) return 1;
  for (int i = 0; i < n; i++) free(urls[i]);
  free(urls);
  return n;
}

/* replicas: 3 on a NATS cluster (a bucket outlives the loss of a server;
 * JetStream's quorum decides every write), 1 on one server. */
static natsStatus bucket_in(kvStore **kv, jsCtx *js, const char *what,
                            int replicas) {
  char name[128];
  snprintf(name, sizeof name, "tycho_%s_%s", lc_sh.cluster, what);
  kvConfig kc;
  N(kvConfig_Init)(&kc);
  kc.Bucket = name;
  kc.History = 1;
  kc.Replicas = replicas;
  return N(js_CreateKeyValue)(kv, js, &kc);
}

/* Requests that wait TRY_MS, tried again while QUICK_MS last: a JetStream
 * request sent while its stream is being created (16 nodes starting at
 * once on a new cluster) may get no answer at all, and cost its whole wait
 * (measured: 2.0 s, OP_WAIT_MS, for 14 of 16 nodes, on their first KV write
 * or the bucket's creation), though the same request sent again a moment
 * later is answered at once. Leaves C.claim open (the nodes bucket, for the
 * claims) when it could. */
static void open_quick(int replicas) {
  jsOptions jo;
  N(jsOptions_Init)(&jo);
  jo.Wait = TRY_MS;
  natsStatus s = N(natsConnection_JetStream)(&C.js_try, C.nc, &jo);
  kvStore *names = NULL;
  for (uint64_t end = lc_now_ns() + QUICK_MS * 1000000ull, t0;
       s == NATS_OK && (t0 = lc_now_ns()) < end;) {
    s = C.claim ? NATS_OK : bucket_in(&C.claim, C.js_try, "nodes", replicas);
    if (s == NATS_OK && !names)
      s = bucket_in(&names, C.js_try, "names", replicas);
    if (s == NATS_OK) break;
    /* Tried again on errors too (a JetStream cluster still forming answers
     * some for a moment), but a quick "no" not at once. */
    uint64_t took = lc_now_ns() - t0;
    if (took < TRY_MS * 1000000ull)
      usleep((useconds_t)((TRY_MS * 1000000ull - took) / 1000));
    s = NATS_OK;
  }
  if (names) N(kvStore_Destroy)(names); /* later requests wait longer */
}

/* A JetStream cluster that has just elected its leader may time out the
 * first stream creations (and two nodes may race to create one): try a few
 * times before giving up. */
static natsStatus open_kv(void) {
  jsOptions jo;
  N(jsOptions_Init)(&jo);
  jo.Wait = OP_WAIT_MS;
  natsStatus s = N(natsConnection_JetStream)(&C.js, C.nc, &jo);
  if (s != NATS_OK) return s;
  int replicas = known_servers() >= 3 ? 3 : 1;
  open_quick(replicas); /* then the buckets exist: the loop is quick */
  /* On a cluster the last tries take one replica: a bucket made with one
   * by an older version (or servers without room) still opens. Not too
   * early: a JetStream cluster just formed, on a loaded machine, times out
   * its first stream creations for seconds, and a bucket of one replica
   * is lost with its server. */
  for (int tries = 0;; tries++) {
    int r = tries >= 10 ? 1 : replicas;
    s = C.nodes ? NATS_OK : bucket_in(&C.nodes, C.js, "nodes", r);
    if (s == NATS_OK && !C.names) s = bucket_in(&C.names, C.js, "names", r);
    if (s == NATS_OK || tries == 11) break;
    usleep(300 * 1000);
  }
  if (s == NATS_OK && !C.claim && C.js_try) /* exists now: once more */
    bucket_in(&C.claim, C.js_try, "nodes", replicas);
  return s;
}

/* ---- small KV helpers ---------------------------------------------------- */

/* The value of key (at most cap-1 bytes, NUL-terminated) and its revision;
 * NATS_NOT_FOUND when absent or deleted. */
static natsStatus kv_get(kvStore *kv, const char *key, char *val, size_t cap,
                         uint64_t *rev) {
  kvEntry *e;
  natsStatus s = N(kvStore_Get)(&e, kv, key);
  if (s != NATS_OK) return s;
  if (N(kvEntry_Operation)(e) != kvOp_Put) {
    *rev = N(kvEntry_Revision)(e);
    N(kvEntry_Destroy)(e);
    return NATS_NOT_FOUND;
  }
  size_t n = (size_t)N(kvEntry_ValueLen)(e);
  if (n >= cap) n = cap - 1;
  memcpy(val, N(kvEntry_Value)(e), n);
  val[n] = 0;
  *rev = N(kvEntry_Revision)(e);
  N(kvEntry_Destroy)(e);
  return NATS_OK;
}

/* ---- claiming the node's name and an id ---------------------------------- */

/* A request of the join without an answer is tried again until JOIN_MS.
 * A write may have been done all the same: the claims take a key that
 * holds their own nonce as theirs. */
static bool try_again(natsStatus s) {
  if (s != NATS_TIMEOUT && s != NATS_NO_RESPONDERS) return false;
  if (s == NATS_NO_RESPONDERS) usleep(TRY_MS * 1000 / 4); /* may be quick */
  return lc_now_ns() < C.join_end;
}

static kvStore *claim_kv(void) {
  return C.claim && lc_now_ns() < C.quick_end ? C.claim : C.nodes;
}

static int claim_name(char *err, size_t errlen) {
  char val[32], old[64];
  snprintf(val, sizeof val, "%016" PRIx64, lc_sh.nonce);
  snprintf(C.claim_key, sizeof C.claim_key, "node.%s", lc_sh.name);
  for (int tries = 0; tries < 3;) {
    natsStatus s = N(kvStore_Create)(&C.claim_rev, claim_kv(), C.claim_key, val,
                                     (int)strlen(val));
    if (s == NATS_OK) return 0;
    if (try_again(s)) continue;
    uint64_t rev = 0;
    s = kv_get(claim_kv(), C.claim_key, old, sizeof old, &rev);
    if (try_again(s)) continue;
    tries++;
    if (s == NATS_NOT_FOUND && !rev) continue;   /* gone meanwhile: Create */
    if (s == NATS_OK && strcmp(old, val) == 0) { /* ours, answer lost */
      C.claim_rev = rev;
      return 0;
    }
    if (s == NATS_OK && old[0]) {
      /* Held: by a live node unless nobody beats under that name. */
      char subject[200];
      snprintf(subject, sizeof subject, "tycho.%s.hb.%s", lc_sh.cluster,
               lc_sh.name);
      if (lc_beats_heard(C.nc, subject, NULL, NULL)) break;
    } else if (s != NATS_OK && s != NATS_NOT_FOUND) {
      snprintf(err, errlen, "cannot claim the node name: %s",
               N(natsStatus_GetText)(s));
      return -1;
    }
    if (N(kvStore_Update)(&C.claim_rev, claim_kv(), C.claim_key, val,
                          (int)strlen(val), rev) == NATS_OK)
      return 0;
  }
  snprintf(err, errlen, "node name \"%s\" is already live", lc_sh.name);
  return -1;
}

/* Takes id.<id> for our nonce: with Create (exactly one contender wins), or
 * over an incarnation that is not beating once the counter wrapped around
 * (compare and set). */
static bool claim_id_key(unsigned id, bool wrapped) {
  char nonce[32], old[64];
  snprintf(nonce, sizeof nonce, "%016" PRIx64, lc_sh.nonce);
  snprintf(C.id_key, sizeof C.id_key, "id.%u", id);
  for (;;) {
    C.id_rev = 0;
    natsStatus s = N(kvStore_Create)(&C.id_rev, claim_kv(), C.id_key, nonce,
                                     (int)strlen(nonce));
    if (s == NATS_OK) return true;
    if (try_again(s)) continue;
    uint64_t orev = 0;
    s = kv_get(claim_kv(), C.id_key, old, sizeof old, &orev);
    if (try_again(s)) continue;
    if (s == NATS_OK && strcmp(old, nonce) == 0) { /* ours, answer lost */
      C.id_rev = orev;
      return true;
    }
    if (!wrapped) return false; /* a twin: the next id */
    return (s == NATS_OK || s == NATS_NOT_FOUND) && orev &&
           N(kvStore_Update)(&C.id_rev, claim_kv(), C.id_key, nonce,
                             (int)strlen(nonce), orev) == NATS_OK;
  }
}

/* The next id from the counter (compare and set); once it wrapped around,
 * the ids of the nodes beating now are skipped. */
static int claim_id(char *err, size_t errlen) {
  unsigned live[TY_MAX_NODES];
  size_t nlive = 0;
  bool listened = false;
  for (unsigned tries = 0; tries < 4 * TY_MAX_NODES; tries++) {
    char val[32];
    uint64_t rev = 0, next = 0;
    natsStatus s = kv_get(claim_kv(), "next_id", val, sizeof val, &rev);
    if (try_again(s)) continue;
    if (s == NATS_OK) next = strtoull(val, NULL, 10);
    else if (s != NATS_NOT_FOUND) break;
    snprintf(val, sizeof val, "%" PRIu64, next + 1);
    /* (a write whose answer was lost skips an id: harmless) */
    s = rev ? N(kvStore_Update)(NULL, claim_kv(), "next_id", val,
                                (int)strlen(val), rev)
            : N(kvStore_Create)(NULL, claim_kv(), "next_id", val,
                                (int)strlen(val));
    if (s != NATS_OK) continue; /* another node won this round */
    unsigned id = (unsigned)(next % (TY_MAX_NODES - 1)) + 1;
    if (next >= TY_MAX_NODES - 1 && !listened) {
      char subject[200];
      snprintf(subject, sizeof subject, "tycho.%s.hb.*", lc_sh.cluster);
      lc_beats_heard(C.nc, subject, live, &nlive);
      listened = true;
    }
    bool taken = false;
    for (size_t i = 0; i < nlive && !taken; i++) taken = live[i] == id;
    if (taken) continue;
    /* The counter alone gave two joining nodes one id (16 nodes started at
     * once on three servers: "9" and "10" stored twice in next_id; each
     * pair of twins then saw neither the other nor most nodes). So the id
     * is claimed too. */
    if (!claim_id_key(id, next >= TY_MAX_NODES - 1)) continue;
    lc_sh.id = id;
    return 0;
  }
  snprintf(err, errlen, "cannot get a node id from NATS's KV");
  return -1;
}

static void close_try(void) { /* later requests wait longer */
  if (C.claim) N(kvStore_Destroy)(C.claim);
  if (C.js_try) N(jsCtx_Destroy)(C.js_try);
  C.claim = NULL;
  C.js_try = NULL;
}

static void close_ctl(void) {
  close_try();
  if (C.names) N(kvStore_Destroy)(C.names);
  if (C.nodes) N(kvStore_Destroy)(C.nodes);
  if (C.js) N(jsCtx_Destroy)(C.js);
  if (C.nc) {
    N(natsConnection_Close)(C.nc);
    N(natsConnection_Destroy)(C.nc);
  }
  C.names = C.nodes = NULL;
  C.js = NULL;
  C.nc = NULL;
}

int lc_ctl_join(const char *url, char *err, size_t errlen) {
  natsStatus s = connect_ctl(url);
  if (s != NATS_OK) {
    snprintf(err, errlen, "cannot connect to NATS at %s: %s", url,
             N(natsStatus_GetText)(s));
    close_ctl();
    return -1;
  }
  if ((s = open_kv()) != NATS_OK) {
    snprintf(err, errlen,
             "cannot open the cluster's KV buckets (is JetStream on? "
             "nats-server -js): %s",
             N(natsStatus_GetText)(s));
    close_ctl();
    return -1;
  }
  C.claim_rev = 0;
  C.quick_end = lc_now_ns() + QUICK_MS * 1000000ull;
  C.join_end = lc_now_ns() + JOIN_MS * 1000000ull;
  if (claim_name(err, errlen) || claim_id(err, errlen)) {
    close_ctl();
    return -1;
  }
  close_try();
  return 0;
}

/* ---- global names -------------------------------------------------------- */

static void hex_key(char *key, size_t cap, const char *name) {
  size_t k = (size_t)snprintf(key, cap, "g.");
  for (const unsigned char *p = (const unsigned char *)name; *p && k + 3 < cap;
       p++)
    k += (size_t)snprintf(key + k, cap - k, "%02x", *p);
}

static bool owner_alive(ty_pid pid) {
  return pid && lc_sh.rt && ty_pid_alive(lc_sh.rt, pid);
}

static void reply(ty_pid to, uint64_t ref, uint32_t kind, const void *data,
                  size_t len) {
  ty_msg *m = ty_msg_new(len);
  if (len) memcpy(m->data, data, len);
  m->to = to;
  m->kind = kind;
  m->ref = ref;
  m->from = lc_node_pid(lc_sh.id);
  if (!lc_sh.rt || ty_send(lc_sh.rt, m)) ty_msg_free(m);
}

static void reply_err(ty_pid to, uint64_t ref, const char *token) {
  reply(to, ref, LT_REPLY_ERR, token, strlen(token));
}

static void own_add(const char *name, ty_pid pid, uint64_t rev) {
  pthread_mutex_lock(&C.mu);
  size_t i = 0;
  while (i < C.nown && strcmp(C.own[i].name, name) != 0) i++;
  if (i == C.nown) {
    ty__grow(&C.own, &C.capown, C.nown + 1, sizeof *C.own, 8);
    C.own[C.nown++].name = strdup(name);
  }
  C.own[i].pid = pid;
  C.own[i].rev = rev;
  atomic_store_explicit(&C.nown_hint, C.nown, memory_order_relaxed);
  pthread_mutex_unlock(&C.mu);
}

/* The name goes back to free, unless someone took it over since. */
static void release(const char *name, ty_pid pid) {
  uint64_t rev = 0;
  pthread_mutex_lock(&C.mu);
  for (size_t i = 0; i < C.nown; i++) {
    if (strcmp(C.own[i].name, name) != 0 || C.own[i].pid != pid) continue;
    rev = C.own[i].rev;
    free(C.own[i].name);
    C.own[i] = C.own[--C.nown];
    break;
  }
  atomic_store_explicit(&C.nown_hint, C.nown, memory_order_relaxed);
  pthread_mutex_unlock(&C.mu);
  if (!rev) return;
  char key[600];
  hex_key(key, sizeof key, name);
  N(kvStore_Update)(NULL, C.names, key, "", 0, rev);
}

/* Its caller stopped waiting (lcluster.c: kv_wait_ns): nobody to answer. */
static bool expired(const job *j) {
  return j->deadline && lc_now_ns() > j->deadline;
}

static void do_register(job *j) {
  char key[600], val[32], old[32];
  hex_key(key, sizeof key, j->name);
  snprintf(val, sizeof val, "%" PRIu64, j->pid);
  for (int tries = 0; tries < 5 && !expired(j); tries++) {
    uint64_t rev = 0;
    natsStatus s = N(kvStore_Create)(&rev, C.names, key, val, (int)strlen(val));
    if (s != NATS_OK) {
      uint64_t seen = 0;
      s = kv_get(C.names, key, old, sizeof old, &seen);
      if (s == NATS_NOT_FOUND && !seen) continue;
      if (s != NATS_OK && s != NATS_NOT_FOUND) break;
      ty_pid holder = s == NATS_OK ? strtoull(old, NULL, 10) : 0;
      if (holder && holder != j->pid && owner_alive(holder)) {
        reply_err(j->caller, j->ref, "taken");
        return;
      }
      if (N(kvStore_Update)(&rev, C.names, key, val, (int)strlen(val), seen) !=
          NATS_OK)
        continue; /* someone else moved first: look again */
    }
    own_add(j->name, j->pid, rev);
    static const char yes = 0x02; /* the codec's true */
    reply(j->caller, j->ref, LT_REPLY, &yes, 1);
    return;
  }
  reply_err(j->caller, j->ref, "noconnection");
}

static void do_whereis(job *j) {
  char key[600], val[32];
  uint64_t rev;
  hex_key(key, sizeof key, j->name);
  natsStatus s = kv_get(C.names, key, val, sizeof val, &rev);
  if (s != NATS_OK && s != NATS_NOT_FOUND) {
    reply_err(j->caller, j->ref, "noconnection");
    return;
  }
  ty_pid pid = s == NATS_OK ? strtoull(val, NULL, 10) : 0;
  ty__buf b;
  ty__buf_init(&b);
  if (owner_alive(pid)) lt_codec_put_number(&b, (double)pid);
  else lt_codec_put_nil(&b);
  reply(j->caller, j->ref, LT_REPLY, b.data, b.len);
  ty__buf_free(&b);
}

/* ("NAME_LOST", name, winner) to the actor that held name. */
static void tell_lost(ty_pid to, const char *name, ty_pid winner) {
  ty__buf b;
  ty__buf_init(&b);
  int err = lt_codec_put_string(&b, "NAME_LOST", 9);
  err |= lt_codec_put_string(&b, name, strlen(name));
  err |=
      winner ? lt_codec_put_number(&b, (double)winner) : lt_codec_put_nil(&b);
  if (err) ty__die("out of memory");
  ty_msg *m = lc_msg_of(&b, to, lc_node_pid(lc_sh.id), LT_MSG, 0);
  if (!lc_sh.rt || ty_send(lc_sh.rt, m)) ty_msg_free(m);
  ty__buf_free(&b);
}

/* After this node was cut off (docs/cluster.md, "Partitions"): the others
 * saw it down and may have taken its names over (do_register: the owner's
 * node was down). The KV store, whose writes JetStream's quorum orders,
 * holds the one owner: a name whose value names another pid is lost, and
 * its local holder hears so; one that was released meanwhile is taken back
 * (compare and set on the revision read). */
static void do_verify(void) {
  for (size_t i = 0;; i++) {
    char name[512], key[600], val[32];
    ty_pid pid = 0;
    uint64_t rev = 0;
    pthread_mutex_lock(&C.mu);
    bool more = i < C.nown;
    if (more) {
      snprintf(name, sizeof name, "%s", C.own[i].name);
      pid = C.own[i].pid;
    }
    pthread_mutex_unlock(&C.mu);
    if (!more) return;
    hex_key(key, sizeof key, name);
    natsStatus s = kv_get(C.names, key, val, sizeof val, &rev);
    ty_pid holder = s == NATS_OK ? strtoull(val, NULL, 10) : 0;
    if (s != NATS_OK && s != NATS_NOT_FOUND) continue; /* cannot tell */
    if (holder == pid) continue;
    if (!holder) {
      char mine[32];
      snprintf(mine, sizeof mine, "%" PRIu64, pid);
      uint64_t nrev = 0;
      if (N(kvStore_Update)(&nrev, C.names, key, mine, (int)strlen(mine),
                            rev) == NATS_OK) {
        own_add(name, pid, nrev);
        continue;
      }
      if (kv_get(C.names, key, val, sizeof val, &rev) == NATS_OK)
        holder = strtoull(val, NULL, 10);
      if (holder == pid) continue;
    }
    pthread_mutex_lock(&C.mu); /* forgotten, not released: it is not ours */
    for (size_t k = 0; k < C.nown; k++)
      if (C.own[k].pid == pid && strcmp(C.own[k].name, name) == 0) {
        free(C.own[k].name);
        C.own[k] = C.own[--C.nown];
        break;
      }
    atomic_store_explicit(&C.nown_hint, C.nown, memory_order_relaxed);
    pthread_mutex_unlock(&C.mu);
    i--; /* the entry at i is another one now */
    ty__logf(TY_LOG_WARN, -1, 0, "cluster: global name %s lost to %" PRIu64,
             name, holder);
    tell_lost(pid, name, holder);
  }
}

/* Names of local actors that ended without the exit hook seeing them
 * (a register that completed as its actor was ending). */
static void sweep(void) {
  for (;;) {
    char *name = NULL;
    ty_pid pid = 0;
    pthread_mutex_lock(&C.mu);
    for (size_t i = 0; i < C.nown && !name; i++)
      if (!owner_alive(C.own[i].pid)) {
        name = strdup(C.own[i].name);
        pid = C.own[i].pid;
      }
    pthread_mutex_unlock(&C.mu);
    if (!name) return;
    release(name, pid);
    free(name);
  }
}

static void *ctl_main(void *arg) {
  (void)arg;
  pthread_mutex_lock(&C.mu);
  while (!C.stop) {
    job *j = C.head;
    if (!j) {
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      ts.tv_nsec += SWEEP_MS * 1000000L;
      if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
      }
      pthread_cond_timedwait(&C.cv, &C.mu, &ts);
      pthread_mutex_unlock(&C.mu);
      sweep();
      pthread_mutex_lock(&C.mu);
      continue;
    }
    C.head = j->next;
    if (!C.head) C.tail = NULL;
    pthread_mutex_unlock(&C.mu);
    /* A job whose caller stopped waiting is skipped: behind a frozen
     * server the queue must not grow into one long wait. */
    if (j->op == LC_KV_RELEASE) release(j->name, j->pid);
    else if (j->op == LC_KV_VERIFY) do_verify();
    else if (expired(j)) (void)0;
    else if (j->op == LC_KV_REGISTER) do_register(j);
    else do_whereis(j);
    free(j);
    pthread_mutex_lock(&C.mu);
  }
  pthread_mutex_unlock(&C.mu);
  return NULL;
}

int lc_kv_submit(lc_kv_op op, const char *name, ty_pid pid, ty_pid caller,
                 uint64_t ref, uint64_t deadline) {
  size_t len = strlen(name);
  job *j = ty__xmalloc(sizeof *j + len + 1);
  *j = (job){NULL, op, pid, caller, ref, deadline};
  memcpy(j->name, name, len + 1);
  pthread_mutex_lock(&C.mu);
  if (C.stop || !C.running) {
    pthread_mutex_unlock(&C.mu);
    free(j);
    return -ESHUTDOWN;
  }
  if (C.tail) C.tail->next = j;
  else C.head = j;
  C.tail = j;
  pthread_cond_signal(&C.cv);
  pthread_mutex_unlock(&C.mu);
  return 0;
}

void lc_kv_drop_pid(ty_pid pid) {
  if (!atomic_load_explicit(&C.nown_hint, memory_order_relaxed)) return;
  pthread_mutex_lock(&C.mu);
  char *names[8];
  size_t n = 0;
  for (size_t i = 0; i < C.nown && n < 8; i++)
    if (C.own[i].pid == pid) names[n++] = strdup(C.own[i].name);
  pthread_mutex_unlock(&C.mu);
  for (size_t i = 0; i < n; i++) {
    lc_kv_submit(LC_KV_RELEASE, names[i], pid, 0, 0, 0);
    free(names[i]);
  }
}

void lc_ctl_start(void) {
  pthread_mutex_lock(&C.mu);
  C.stop = false;
  C.running = true;
  pthread_mutex_unlock(&C.mu);
  if (pthread_create(&C.thread, NULL, ctl_main, NULL))
    ty__die("cannot create the cluster control thread");
}

void lc_ctl_stop(void) {
  pthread_mutex_lock(&C.mu);
  bool running = C.running;
  C.stop = true;
  C.running = false;
  pthread_cond_signal(&C.cv);
  pthread_mutex_unlock(&C.mu);
  if (running) pthread_join(C.thread, NULL);
  /* Jobs still queued: their callers hear that the cluster went away. */
  for (job *j = C.head, *next; j; j = next) {
    next = j->next;
    if (j->op != LC_KV_RELEASE && j->op != LC_KV_VERIFY)
      reply_err(j->caller, j->ref, "noconnection");
    free(j);
  }
  C.head = C.tail = NULL;
  if (C.nc) {
    /* Our names are free at once, not only once others see us gone. */
    while (C.nown) {
      char *name = strdup(C.own[0].name);
      release(name, C.own[0].pid);
      free(name);
    }
    if (C.claim_rev)
      N(kvStore_Update)(NULL, C.nodes, C.claim_key, "", 0, C.claim_rev);
    if (C.id_rev) N(kvStore_Update)(NULL, C.nodes, C.id_key, "", 0, C.id_rev);
  }
  C.claim_rev = C.id_rev = 0;
  close_ctl();
}
