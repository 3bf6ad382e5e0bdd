/*
 * wsload.c - the WebSocket echo load client of bench/ws.sh: C connections
 * to ws://127.0.0.1:PORT/PATH, each sending a SIZE-byte masked text message
 * and waiting for its echo before the next (one in flight per connection),
 * for SECONDS after a one-second warm-up, on one epoll thread. The same
 * client drives tycho and OpenResty, so their figures compare.
 *
 *   wsload PORT [PATH] [CONNS=64] [SIZE=64] [SECONDS=5]
 *
 * Prints "RESULT <messages/s> msg/s" and "DETAIL conns= size= errors= total="
 * (total: the echoes of the whole run, warm-up included).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAXC 4096

typedef struct {
  int fd;
  int upgraded;
  size_t have; /* bytes of the current answer read */
  char buf[8192];
} conn;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static char frame[256];
static size_t frame_len, echo_len;

static int send_all(int fd, const char *p, size_t n) {
  while (n) {
    ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
    if (k < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    p += k;
    n -= (size_t)k;
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: wsload PORT [PATH] [CONNS] [SIZE] [SECONDS]\n");
    return 2;
  }
  int port = atoi(argv[1]);
  const char *path = argc > 2 ? argv[2] : "/";
  int nconn = argc > 3 ? atoi(argv[3]) : 64;
  int size = argc > 4 ? atoi(argv[4]) : 64;
  double seconds = argc > 5 ? atof(argv[5]) : 5;
  if (nconn < 1 || nconn > MAXC || size < 1 || size > 125) return 2;
  /* a masked text frame of size bytes; the echo is unmasked: 2 + size */
  uint8_t key[4] = {0x12, 0x34, 0x56, 0x78};
  frame[0] = (char)0x81;
  frame[1] = (char)(0x80 | size);
  memcpy(frame + 2, key, 4);
  for (int i = 0; i < size; i++)
    frame[6 + i] = (char)(('a' + i % 26) ^ key[i & 3]);
  frame_len = 6 + (size_t)size;
  echo_len = 2 + (size_t)size;

  char req[512];
  int reqlen = snprintf(
      req, sizeof req,
      "GET %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nUpgrade: websocket\r\n"
      "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
      "Sec-WebSocket-Version: 13\r\n\r\n",
      path, port);
  int ep = epoll_create1(0);
  conn *cs = calloc((size_t)nconn, sizeof *cs);
  struct sockaddr_in sa = {.sin_family = AF_INET,
                           .sin_port = htons((uint16_t)port)};
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  for (int i = 0; i < nconn; i++) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
      perror("wsload: connect");
      return 1;
    }
    cs[i].fd = fd;
    if (send_all(fd, req, (size_t)reqlen)) return 1;
    struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)i};
    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
  }
  long long count = 0, errors = 0, warm_count = 0;
  double t0 = now(), start = t0 + 1, end = start + seconds;
  int measuring = 0;
  struct epoll_event evs[256];
  while (1) {
    double t = now();
    if (!measuring && t >= start) {
      measuring = 1;
      warm_count = count;
    }
    if (t >= end) break;
    int n = epoll_wait(ep, evs, 256, 100);
    for (int k = 0; k < n; k++) {
      conn *c = &cs[evs[k].data.u32];
      ssize_t r = recv(c->fd, c->buf + c->have, sizeof c->buf - c->have, 0);
      if (r <= 0) {
        if (r < 0 && errno == EINTR) continue;
        errors++;
        epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
        continue;
      }
      c->have += (size_t)r;
      if (!c->upgraded) {
        char *end_of_head = memmem(c->buf, c->have, "\r\n\r\n", 4);
        if (!end_of_head) continue;
        if (strncmp(c->buf, "HTTP/1.1 101", 12) != 0) {
          fprintf(stderr, "wsload: no 101: %.60s\n", c->buf);
          return 1;
        }
        size_t head = (size_t)(end_of_head + 4 - c->buf);
        memmove(c->buf, c->buf + head, c->have - head);
        c->have -= head;
        c->upgraded = 1;
        if (send_all(c->fd, frame, frame_len)) errors++;
        continue;
      }
      while (c->have >= echo_len) {
        if ((uint8_t)c->buf[0] != 0x81 ||
            (uint8_t)c->buf[1] != (uint8_t)(echo_len - 2)) {
          fprintf(stderr, "wsload: unexpected frame %02x %02x\n",
                  (uint8_t)c->buf[0], (uint8_t)c->buf[1]);
          return 1;
        }
        memmove(c->buf, c->buf + echo_len, c->have - echo_len);
        c->have -= echo_len;
        count++;
        if (send_all(c->fd, frame, frame_len)) errors++;
      }
    }
  }
  double rate = (double)(count - warm_count) / seconds;
  printf("RESULT %.0f msg/s\n", rate);
  printf("DETAIL conns=%d size=%d errors=%lld total=%lld\n", nconn, size,
         errors, count);
  return 0;
}
