/*
 * websocket_frame.c - libFuzzer target for the WebSocket frame codec
 * (core/net/lws.c: lt_ws_parse, lt_ws_mask, lt_ws_header, lt_ws_utf8), the
 * part of tycho.websocket that reads what a peer sends.
 *
 * Input: byte 0 picks the role (bit 0: a server, which wants masked frames)
 * and the limit (bit 1: a 200-byte max_payload, so that 1009 is reached);
 * the rest is a stream of frames, parsed one after another until an error
 * or the end. Besides not crashing (ASan, UBSan), each frame must: lie
 * inside the input; be reported as incomplete (0) for every shorter prefix;
 * obey the rules the parser promises (no reserved bits, known opcodes,
 * control frames whole and short, the mask the role wants, the limit);
 * unmask and mask back to the same bytes; built again with lt_ws_header,
 * parse to the same frame. lt_ws_utf8 must agree with a plain decoder.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net/lws.h"

#define REQUIRE(cond)                                                          \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "fuzz websocket_frame: %s failed (line %d)\n", #cond,    \
              __LINE__);                                                       \
      abort();                                                                 \
    }                                                                          \
  } while (0)

/* A plain UTF-8 decoder (RFC 3629), to check lt_ws_utf8 against. */
static int ref_utf8(const uint8_t *s, size_t n) {
  size_t i = 0;
  while (i < n) {
    uint32_t c = s[i], cp;
    size_t len;
    if (c < 0x80) {
      i++;
      continue;
    }
    if ((c & 0xe0) == 0xc0) len = 2, cp = c & 0x1f;
    else if ((c & 0xf0) == 0xe0) len = 3, cp = c & 0x0f;
    else if ((c & 0xf8) == 0xf0) len = 4, cp = c & 0x07;
    else return 0;
    if (n - i < len) return 0;
    for (size_t j = 1; j < len; j++) {
      if ((s[i + j] & 0xc0) != 0x80) return 0;
      cp = cp << 6 | (s[i + j] & 0x3f);
    }
    static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
      return 0;
    i += len;
  }
  return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  int server = data[0] & 1;
  uint64_t max = (data[0] & 2) ? 200 : (uint64_t)1 << 24;
  const uint8_t *p = data + 1;
  size_t n = size - 1;
  REQUIRE(lt_ws_utf8(p, n) == ref_utf8(p, n));
  while (n > 0) {
    lt_ws_frame f;
    int r = lt_ws_parse(p, n, server, max, &f);
    if (r == 0) break;
    if (r < 0) {
      REQUIRE(r == -1002 || r == -1009);
      break;
    }
    size_t total = f.head + (size_t)f.length;
    REQUIRE((size_t)r == f.head && total <= n && f.length <= max);
    REQUIRE(!(p[0] & 0x70) && f.masked == server);
    REQUIRE(f.opcode <= 2 || (f.opcode >= 8 && f.opcode <= 10));
    if (f.opcode >= 8) REQUIRE(f.fin && f.length <= 125);
    for (size_t k = 0; k < total && k < 64; k++) {
      lt_ws_frame g;
      REQUIRE(lt_ws_parse(p, k, server, max, &g) == 0);
    }
    size_t len = (size_t)f.length;
    uint8_t *plain = malloc(len + 1), *again = malloc(len + 1);
    REQUIRE(plain && again);
    lt_ws_mask(plain, p + f.head, len, f.key, 0);
    if (!f.masked) memcpy(plain, p + f.head, len);
    REQUIRE(lt_ws_utf8(plain, len) == ref_utf8(plain, len));
    /* masked in two pieces (the offset) gives the same bytes */
    size_t half = len / 2;
    lt_ws_mask(again, plain, half, f.key, 0);
    lt_ws_mask(again + half, plain + half, len - half, f.key, half);
    if (f.masked) REQUIRE(memcmp(again, p + f.head, len) == 0);
    /* built again, it parses to the same frame */
    uint8_t *built = malloc(14 + len);
    REQUIRE(built);
    size_t h =
        lt_ws_header(built, f.fin, f.opcode, f.length, f.masked ? f.key : NULL);
    memcpy(built + h, f.masked ? again : plain, len);
    lt_ws_frame g;
    REQUIRE(lt_ws_parse(built, h + len, server, max, &g) == (int)h);
    REQUIRE(g.fin == f.fin && g.opcode == f.opcode && g.length == f.length &&
            g.masked == f.masked);
    REQUIRE(!f.masked || memcmp(g.key, f.key, 4) == 0);
    free(built);
    free(plain);
    free(again);
    p += total;
    n -= total;
  }
  return 0;
}
