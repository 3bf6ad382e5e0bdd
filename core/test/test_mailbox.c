/*
 * test_mailbox.c - mailbox limits (ty_send_limited, the full flag in the pid
 * table, counts on spawn requests) and the awaited slot, with C actors on
 * real worker threads.
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "sched/ty.h"
#include "test.h"

typedef struct mb_actor mb_actor;
typedef int (*mb_step)(ty_actor *a, mb_actor *m);
struct mb_actor {
  mb_step step;
  int id;
  long sent, refused, seen;
  long *expect; /* receiver: next sequence per sender */
};

enum { SENDERS = 6, RECEIVERS = 3, LIMIT = 64 };

static _Atomic long g_done, g_errors, g_refused;
static ty_pid g_rx[RECEIVERS];
static long g_per_pair;
static ty_runtime *g_rt;

static int mb_resume(ty_actor *a, void *ud) {
  (void)ud;
  mb_actor *m = a->user;
  return m->step(a, m);
}

static void mb_destroy(ty_actor *a, ty_worker *w, void *ud) {
  (void)w;
  (void)ud;
  mb_actor *m = a->user;
  free(m->expect);
  free(m);
}

static const ty_actor_ops mb_ops = {.resume = mb_resume, .destroy = mb_destroy};

static mb_actor *new_actor(mb_step step, int id) {
  mb_actor *m = calloc(1, sizeof *m);
  m->step = step;
  m->id = id;
  return m;
}

static ty_runtime *start(unsigned workers) {
  ty__log_set(TY_LOG_OFF, false); /* "mailbox full" lines are expected */
  ty_config cfg;
  ty_config_init(&cfg);
  cfg.workers = workers;
  cfg.mesh_ring = 8; /* small rings: senders block on them too */
  cfg.mbox_max = LIMIT;
  cfg.mbox_warn = 1u << 30; /* no log lines */
  ty_runtime *rt;
  if (ty_runtime_new(&cfg, &mb_ops, NULL, &rt)) return NULL;
  ty_runtime_start(rt);
  return rt;
}

/* Takes a few messages per run (a slow reader), checking each sender's
 * order; ends when every sender's sequence arrived whole. */
static int step_rx(ty_actor *a, mb_actor *m) {
  if (!m->expect) { /* first, 20 ms without reading: the mailbox fills */
    m->expect = calloc(SENDERS, sizeof(long));
    ty_actor_wait(a, 20000000, TY_REF_WAKE);
    return TY_WAIT;
  }
  ty_msg *msg;
  for (int k = 0; k < 3 && (msg = ty_mbox_pop(a)); k++) {
    long v;
    memcpy(&v, msg->data, sizeof v);
    long s = msg->kind;
    ty_msg_free(msg);
    if (s < 0 || s >= SENDERS || m->expect[s] != v) {
      fprintf(stderr, "receiver %d: from %ld got %ld, expected %ld\n", m->id, s,
              v, s >= 0 && s < SENDERS ? m->expect[s] : -1);
      atomic_fetch_add(&g_errors, 1);
    } else {
      m->expect[s]++;
    }
    if (++m->seen == SENDERS * g_per_pair) {
      /* in flight past the flag: a ring (8) per peer worker, and one per
       * sender blocked on a full ring */
      if (a->mbox.hwm > LIMIT + 4 * 8 + SENDERS) {
        fprintf(stderr, "receiver %d: mailbox reached %u\n", m->id,
                a->mbox.hwm);
        atomic_fetch_add(&g_errors, 1);
      }
      atomic_fetch_add(&g_done, 1);
      return TY_DONE;
    }
  }
  if (a->mbox.len) return TY_YIELD;
  ty_actor_wait(a, -1, 0);
  return TY_WAIT;
}

/* Sends its sequence to every receiver, interleaved; a refused message is
 * sent again after a yield, so each arrives exactly once and in order. */
static int step_tx(ty_actor *a, mb_actor *m) {
  long total = g_per_pair * RECEIVERS;
  while (m->sent < total) {
    long seq = m->sent / RECEIVERS;
    ty_msg *msg = ty_msg_new(sizeof seq);
    memcpy(msg->data, &seq, sizeof seq);
    msg->to = g_rx[m->sent % RECEIVERS];
    msg->kind = (uint32_t)m->id;
    int r = ty_send_limited(g_rt, msg);
    if (r == -ENOBUFS) {
      ty_msg_free(msg);
      m->refused++;
      return TY_YIELD;
    }
    if (r) {
      ty_msg_free(msg);
      atomic_fetch_add(&g_errors, 1);
    }
    m->sent++;
    if (ty_send_blocked(a)) return TY_YIELD;
  }
  atomic_fetch_add(&g_refused, m->refused);
  atomic_fetch_add(&g_done, 1);
  return TY_DONE;
}

static bool wait_done(long target, double seconds) {
  uint64_t end = ty__now_ns() + (uint64_t)(seconds * 1e9);
  while (atomic_load(&g_done) < target) {
    if (ty__now_ns() > end) return false;
    usleep(200);
  }
  return true;
}

/* Senders on every worker flood slow receivers (some on their own worker,
 * the others across rings), starting before the receivers do (their
 * messages wait on spawn requests, which count too): sends are refused,
 * nothing is lost, duplicated or reordered, and no mailbox grows past the
 * limit by more than what can be in flight. */
TEST_IMPL(rt_mailbox_limit_stress) {
  atomic_store(&g_done, 0);
  atomic_store(&g_errors, 0);
  atomic_store(&g_refused, 0);
  g_per_pair = test_scaled(20000, 500);
  ty_runtime *rt = start(4);
  CHECK(rt);
  g_rt = rt;
  /* receivers first get pids (spawn requests) but are placed last */
  mb_actor *rxs[RECEIVERS];
  for (int i = 0; i < RECEIVERS; i++) rxs[i] = new_actor(step_rx, i);
  for (int i = 0; i < RECEIVERS; i++)
    CHECK(ty_spawn_at(rt, (unsigned)i % 4, rxs[i], &g_rx[i]) == 0);
  for (int i = 0; i < SENDERS; i++)
    CHECK(ty_spawn_at(rt, (unsigned)i % 4, new_actor(step_tx, i), NULL) == 0);
  CHECK(wait_done(SENDERS + RECEIVERS, 240));
  uint64_t refused = 0;
  for (unsigned i = 0; i < 4; i++) {
    ty_worker_stats s;
    ty_worker_stats_get(rt, i, &s);
    refused += s.sends_full;
    CHECK_EQ(s.mailbox, 0);
    CHECK_EQ(s.mailbox_bytes, 0);
  }
  ty_runtime_stop(rt);
  ty_runtime_free(rt);
  CHECK_EQ(atomic_load(&g_errors), 0);
  CHECK(atomic_load(&g_refused) > 0);
  CHECK_EQ(refused, atomic_load(&g_refused));
  return 0;
}

/* ---- the awaited slot --------------------------------------------------- */

enum { BACKLOG = 1000, REF = 77 };

/* Queues a backlog to itself, asks the echo for a reply carrying REF, and
 * waits for that ref: the reply must come through the slot, the backlog
 * stay whole and in order. */
static int step_caller(ty_actor *a, mb_actor *m) {
  if (m->seen == 0) {
    for (long i = 0; i < BACKLOG; i++) {
      ty_msg *msg = ty_msg_new(sizeof i);
      memcpy(msg->data, &i, sizeof i);
      msg->to = a->pid;
      if (ty_send(g_rt, msg)) atomic_fetch_add(&g_errors, 1);
    }
    ty_msg *q = ty_msg_new(0);
    q->to = g_rx[0];
    q->ref = REF;
    if (ty_send(g_rt, q)) atomic_fetch_add(&g_errors, 1);
    m->seen = 1;
    ty_actor_wait(a, -1, REF);
    return TY_WAIT;
  }
  ty_msg *reply = ty_actor_take_awaited(a);
  if (!reply) { /* woken by nothing else: a wait for a ref wakes for it */
    atomic_fetch_add(&g_errors, 1);
    ty_actor_wait(a, -1, REF);
    return TY_WAIT;
  }
  if (reply->ref != REF) atomic_fetch_add(&g_errors, 1);
  ty_msg_free(reply);
  if (a->mbox.len != BACKLOG) atomic_fetch_add(&g_errors, 1);
  ty_msg *msg;
  for (long i = 0; (msg = ty_mbox_pop(a)); i++) {
    long v;
    memcpy(&v, msg->data, sizeof v);
    if (v != i || msg->ref) atomic_fetch_add(&g_errors, 1);
    ty_msg_free(msg);
  }
  atomic_fetch_add(&g_done, 1);
  return TY_DONE;
}

static int step_echo(ty_actor *a, mb_actor *m) {
  (void)m;
  ty_msg *q;
  while ((q = ty_mbox_pop(a))) {
    ty_msg *r = ty_msg_new(0);
    r->to = q->from;
    r->ref = q->ref;
    if (ty_send(g_rt, r)) atomic_fetch_add(&g_errors, 1);
    ty_msg_free(q);
  }
  ty_actor_wait(a, -1, 0);
  return TY_WAIT;
}

TEST_IMPL(rt_awaited_reply) {
  atomic_store(&g_done, 0);
  atomic_store(&g_errors, 0);
  ty_runtime *rt = start(2);
  CHECK(rt);
  g_rt = rt;
  for (unsigned w = 0; w < 2; w++) { /* echo on the same and another worker */
    CHECK(ty_spawn_at(rt, 1, new_actor(step_echo, 0), &g_rx[0]) == 0);
    CHECK(ty_spawn_at(rt, w, new_actor(step_caller, 0), NULL) == 0);
    CHECK(wait_done(w + 1, 30));
  }
  ty_runtime_stop(rt);
  ty_runtime_free(rt);
  CHECK_EQ(atomic_load(&g_errors), 0);
  return 0;
}
