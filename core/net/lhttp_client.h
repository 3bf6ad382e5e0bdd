/*
 * lhttp_client.h - the HTTP client's response parser (lhttp_client.c):
 * plain C over llhttp, so that a fuzz target can drive it without Lua.
 */
#ifndef TY_LHTTP_CLIENT_H
#define TY_LHTTP_CLIENT_H

#include <llhttp.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/common.h"

#define RESP_MAX_HEADERS 256

/* lt_hresp_feed's answers (and hresp.err). */
enum { RESP_NEED = 0, RESP_DONE, RESP_TOOLARGE, RESP_BAD, RESP_CLOSED };

/* A header: name and value as offsets into hb. */
typedef struct rhdr {
  uint32_t noff, nlen, voff, vlen;
} rhdr;

typedef struct hresp {
  llhttp_t ll;
  uint64_t max_body;
  uint32_t max_head;
  bool head_req; /* the request was HEAD: no body follows */
  /* The response being parsed: the head's pieces are copied into hb. */
  char *hb;
  size_t hb_len, hb_cap;
  rhdr *h;
  size_t hcap;
  uint32_t nh;
  bool field_open, value_open;
  char *body;
  size_t body_len, body_cap;
  /* Once done: */
  bool done, keepalive;
  int status, err;
  uint8_t minor;
  size_t extra; /* bytes of the last feed after the response's end */
} hresp;

void lt_hresp_init(hresp *r, uint64_t max_body, uint32_t max_head,
                   bool head_req);
void lt_hresp_free(hresp *r);
/* Parses data (NULL: end of file). RESP_NEED, RESP_DONE (the response is
 * in r), or an error, which sticks. */
int lt_hresp_feed(hresp *r, const char *data, size_t len);

#endif
