/*
 * http_response.c - libFuzzer target for the HTTP client's response parser
 * (core/net/lhttp_client.c, lt_hresp_*): arbitrary bytes, cut into pieces
 * the way reads would cut them, then end of file. Besides not crashing
 * (ASan, UBSan), the parser must keep its promises: a response it calls
 * done has a status of 3 digits, headers that lie inside the copied head,
 * a body within max_body, a head within max_head, and "extra" bytes that
 * were really left over; an error sticks.
 *
 * Input: byte 0 picks the request kind (bit 0: HEAD), the body limit (bits
 * 1-2) and the head limit (bits 3-4), byte 1 the piece size (1..256); the
 * rest is the stream. Built and run by `make fuzz` (fuzz/README.md).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net/lhttp_client.h"

#define REQUIRE(cond)                                                          \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "http_response: %s failed (line %d)\n", #cond,           \
              __LINE__);                                                       \
      abort();                                                                 \
    }                                                                          \
  } while (0)

static void check_done(const hresp *r, size_t piece) {
  REQUIRE(r->status >= 100 && r->status <= 999);
  REQUIRE(r->hb_len <= r->max_head);
  REQUIRE(r->body_len <= r->max_body);
  REQUIRE(r->extra <= piece);
  REQUIRE(r->nh <= RESP_MAX_HEADERS);
  for (uint32_t i = 0; i < r->nh; i++) {
    const rhdr *h = &r->h[i];
    REQUIRE((size_t)h->noff + h->nlen <= r->hb_len);
    REQUIRE(h->vlen == 0 || (size_t)h->voff + h->vlen <= r->hb_len);
  }
  if (r->head_req) REQUIRE(r->body_len == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2) return 0;
  static const uint64_t bodies[] = {0, 16, 4096, 1 << 20};
  static const uint32_t heads[] = {64, 256, 4096, 65536};
  uint8_t flags = data[0];
  size_t step = (size_t)data[1] + 1;
  data += 2;
  size -= 2;
  hresp r;
  lt_hresp_init(&r, bodies[(flags >> 1) & 3], heads[(flags >> 3) & 3],
                flags & 1);
  int st = RESP_NEED;
  size_t off = 0, piece = 0;
  while (off < size && st == RESP_NEED) {
    piece = size - off < step ? size - off : step;
    st = lt_hresp_feed(&r, (const char *)data + off, piece);
    off += piece;
  }
  if (st == RESP_NEED) {
    st = lt_hresp_feed(&r, NULL, 0);
    piece = 0;
  }
  REQUIRE(st >= RESP_NEED && st <= RESP_CLOSED);
  if (st == RESP_DONE) {
    check_done(&r, piece);
    REQUIRE(lt_hresp_feed(&r, "x", 1) == RESP_DONE); /* done stays done */
  } else {
    REQUIRE(st != RESP_NEED);                        /* EOF decides */
    REQUIRE(lt_hresp_feed(&r, "HTTP/1.1", 8) == st); /* errors stick */
  }
  lt_hresp_free(&r);
  return 0;
}
