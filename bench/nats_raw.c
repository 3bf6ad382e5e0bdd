/*
 * nats_raw.c - the baseline for the cluster benchmarks: nats.c alone, a
 * publisher process and a subscriber process on one nats-server, 16-byte
 * messages (bench/cluster.sh runs it in the same sitting as
 * cluster_msgs).
 *
 *   nats_raw sub URL N    counts N messages on bench.raw; prints RESULT
 *                         msgs/s from the first message to the last
 *   nats_raw pub URL N    publishes N messages on bench.raw, then flushes
 *   nats_raw echo URL     answers every message on bench.rtt (to its reply
 *                         subject) until killed
 *   nats_raw rtt URL N    N sequential requests to bench.rtt, each with its
 *                         own reply inbox read by a sync subscription;
 *                         prints RESULT round trips/s and p50/p99
 *
 * Plain nats.c: its own reader and flusher threads, a sync subscription
 * with no pending limits (nothing is dropped), SendAsap off on the
 * publisher (nats.c's buffering at its best for throughput) and on for
 * the round trips (else nats.c's flusher adds about 1 ms a hop).
 */
#include <nats/nats.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void check(natsStatus s, const char *what) {
  if (s == NATS_OK) return;
  fprintf(stderr, "nats_raw: %s: %s\n", what, natsStatus_GetText(s));
  exit(1);
}

static int sub(natsConnection *nc, long n) {
  natsSubscription *sub;
  check(natsConnection_SubscribeSync(&sub, nc, "bench.raw"), "subscribe");
  check(natsSubscription_SetPendingLimits(sub, -1, -1), "limits");
  check(natsConnection_Flush(nc), "flush");
  printf("READY\n");
  fflush(stdout);
  double t0 = 0;
  for (long i = 0; i < n; i++) {
    natsMsg *m;
    check(natsSubscription_NextMsg(&m, sub, 60000), "next");
    if (i == 0) t0 = now();
    natsMsg_Destroy(m);
  }
  double dt = now() - t0;
  int64_t dropped = 0;
  natsSubscription_GetDropped(sub, &dropped);
  printf("RESULT %.0f msgs/s\n", (n - 1) / dt);
  printf("DETAIL wall_s=%.3f dropped=%lld\n", dt, (long long)dropped);
  printf("NOTE nats.c pub -> sub, 16-byte messages, %ld of them\n", n);
  natsSubscription_Destroy(sub);
  return 0;
}

static int pub(natsConnection *nc, long n) {
  char data[16];
  memset(data, 'x', sizeof data);
  for (long i = 0; i < n; i++)
    check(natsConnection_Publish(nc, "bench.raw", data, sizeof data),
          "publish");
  check(natsConnection_FlushTimeout(nc, 60000), "flush");
  return 0;
}

static int echo(natsConnection *nc) {
  natsSubscription *sub;
  check(natsConnection_SubscribeSync(&sub, nc, "bench.rtt"), "subscribe");
  check(natsConnection_Flush(nc), "flush");
  printf("READY\n");
  fflush(stdout);
  for (;;) {
    natsMsg *m;
    if (natsSubscription_NextMsg(&m, sub, 60000) != NATS_OK) break;
    natsConnection_Publish(nc, natsMsg_GetReply(m), natsMsg_GetData(m),
                           natsMsg_GetDataLength(m));
    natsMsg_Destroy(m);
  }
  return 0;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static int rtt(natsConnection *nc, long n) {
  natsSubscription *sub;
  char inbox[64];
  snprintf(inbox, sizeof inbox, "bench.inbox.%d", (int)getpid());
  check(natsConnection_SubscribeSync(&sub, nc, inbox), "subscribe");
  check(natsConnection_Flush(nc), "flush");
  double *lat = malloc(n * sizeof *lat), t0 = now();
  char data[16] = "0123456789abcde";
  for (long i = 0; i < n; i++) {
    double s = now();
    natsMsg *m;
    check(natsConnection_PublishRequest(nc, "bench.rtt", inbox, data, 16),
          "request");
    check(natsSubscription_NextMsg(&m, sub, 10000), "reply");
    natsMsg_Destroy(m);
    lat[i] = now() - s;
  }
  double dt = now() - t0;
  qsort(lat, n, sizeof *lat, cmp);
  printf("RESULT %.0f roundtrips/s\n", n / dt);
  printf("DETAIL p50_us=%.0f p99_us=%.0f\n", lat[n / 2] * 1e6,
         lat[(long)(n * 0.99)] * 1e6);
  printf("NOTE nats.c request -> echo process -> reply, sequential, %ld\n", n);
  free(lat);
  natsSubscription_Destroy(sub);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: nats_raw sub|pub|rtt URL N | nats_raw echo URL\n");
    return 2;
  }
  natsOptions *o;
  check(natsOptions_Create(&o), "options");
  check(natsOptions_SetURL(o, argv[2]), "url");
  bool rt = strcmp(argv[1], "echo") == 0 || strcmp(argv[1], "rtt") == 0;
  check(natsOptions_SetSendAsap(o, rt), "send asap");
  natsConnection *nc;
  check(natsConnection_Connect(&nc, o), "connect");
  natsOptions_Destroy(o);
  long n = argc > 3 ? atol(argv[3]) : 0;
  int rc = strcmp(argv[1], "sub") == 0   ? sub(nc, n)
           : strcmp(argv[1], "pub") == 0 ? pub(nc, n)
           : strcmp(argv[1], "rtt") == 0 ? rtt(nc, n)
                                         : echo(nc);
  natsConnection_Destroy(nc);
  return rc;
}
