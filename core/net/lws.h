/*
 * lws.h - the WebSocket (RFC 6455) frame codec under lua/tycho/websocket.lua:
 * frame headers parsed and built, payloads masked, UTF-8 checked, the
 * handshake's accept key. Pure functions over buffers, so that
 * fuzz/websocket_frame.c can drive them without sockets.
 */
#ifndef TY_LWS_H
#define TY_LWS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lua/lapi.h"

/* One frame header as lt_ws_parse found it. */
typedef struct lt_ws_frame {
  bool fin;
  bool masked;
  uint8_t opcode;
  uint8_t key[4];
  size_t head;     /* bytes of the header (the payload starts there) */
  uint64_t length; /* payload bytes */
} lt_ws_frame;

/* Parses the header at p[0..n): its size (> 0) when the whole frame
 * (header and payload) is in the buffer, 0 when more bytes are needed, or
 * minus the close code to answer: -1002 (reserved bits, unknown opcode, a
 * fragmented or long control frame, a mask the peer's role forbids, or
 * lacks: need_mask is true on a server, false on a client), -1009 (a
 * payload over max_payload). */
int lt_ws_parse(const uint8_t *p, size_t n, bool need_mask,
                uint64_t max_payload, lt_ws_frame *f);

/* dst[i] = src[i] ^ key[(i + offset) % 4]; dst may be src. */
void lt_ws_mask(uint8_t *dst, const uint8_t *src, size_t n,
                const uint8_t key[4], size_t offset);

/* Writes the header of a frame (at most 14 bytes) to out; its size. */
size_t lt_ws_header(uint8_t *out, bool fin, uint8_t opcode, uint64_t length,
                    const uint8_t *key);

/* Is s[0..n) valid UTF-8 (RFC 3629: no overlongs, no surrogates, nothing
 * above U+10FFFF)? */
bool lt_ws_utf8(const uint8_t *s, size_t n);

/* Adds the table `_ws` to the tycho.core table on top of L. */
void lt_open_ws(lua_State *L);

#endif
