/*
 * lhttp_impl.h - what the files of tycho.http's C half share:
 *
 *   lhttp_parse.c    llhttp callbacks, limits, the request table
 *   lhttp_respond.c  serializing responses (and the error responses)
 *   lhttp.c          the functions lua/tycho/http.lua calls, configuration
 *   lhttp_gauge.c    per-server connection gauges
 *   lhttp_client.c   the client's response parser (lhttp_client.h)
 *
 *
 * Why the split: the connection loop stays in Lua, so a handler may block
 * (tycho.sleep, tycho.call) like any actor code; what costs per request -
 * parsing, building the request table, formatting the response - is C, and
 * each step is one call from Lua:
 *
 *   out, req, tmo = feed(p, bytes)       after each conn:read_some
 *   out, req, tmo, err = respond(p, ok, res, body)   after each handler
 *
 * `req` is the next request table (nil: more bytes needed, false: the
 * connection must close once `out` is written), `out` what to write now in
 * one conn:write (nil: nothing yet), `tmo` the read timeout in seconds for
 * the next read (the idle, header or body deadline, whichever applies).
 *
 * Parsing: one llhttp parser per connection, fed from a buffer holding the
 * received bytes of the message being parsed; its method, URL and header
 * spans are offsets into that buffer, so a message split over many reads is
 * copied only once, into its table. The parser pauses after each complete
 * message: pipelined requests come out one at a time, and their responses
 * gather in one output buffer that goes out when no complete request is
 * left in the received bytes (or the buffer grows past FLUSH_AT).
 *
 * Limits: the request line plus headers (431), the header count (431), the
 * body (413, before reading it when Content-Length says so), HTTP versions
 * other than 1.x (505), anything llhttp refuses (400). Each answers with a
 * response that closes the connection.
 *
 * Gauges: process-wide counters, one per server, that cap its open
 * connections over every worker. A connection holds a slot as a resource
 * of the actor (fork) serving it, so the slot comes back however it ends.
 *
 */
#ifndef TY_LHTTP_IMPL_H
#define TY_LHTTP_IMPL_H

#include <llhttp.h>

#include "lhttp.h"

#define PARSER_MT "tycho.http.parser"
#define CONFIG_MT "tycho.http.config"
#define FLUSH_AT (64 * 1024) /* pipelined responses written at this size */
#define MAX_TEXT 80          /* server / default_type values */

typedef struct span {
  uint32_t off, len;
} span;

typedef struct hdr {
  span name, value;
} hdr;

/* Limits and fixed header lines of a server (tycho.http options). */
typedef struct hcfg {
  uint32_t max_head; /* request line + headers, bytes */
  uint32_t max_headers;
  uint64_t max_body;
  double idle_tmo, head_tmo, body_tmo; /* seconds; < 0: none */
  char server[MAX_TEXT + 16];          /* "Server: tycho\r\n" or "" */
  char ctype[MAX_TEXT + 24];           /* "Content-Type: ...\r\n" or "" */
  uint8_t server_len, ctype_len;
} hcfg;

typedef struct hparser {
  llhttp_t ll;
  hcfg cfg;
  /* Received bytes: in[0..parsed) went through llhttp; only those of the
   * message in progress are kept (from `start`). */
  char *in;
  size_t in_len, in_cap, parsed;
  /* The message in progress (or complete: `ready`). */
  bool in_msg, head_done, ready, have_start, field_open, value_open;
  bool expect, continued;
  size_t start;
  double t_head, t_body; /* when its head / body began (0: not yet noted) */
  span url;
  hdr *h;
  uint32_t nh, hcap;
  char *body;
  size_t body_len, body_cap;
  int status; /* the error response a limit asked for (431, 413, 505) */
  uint8_t method, minor;
  bool keepalive;
  /* Responses not written yet. */
  char *out;
  size_t out_len, out_cap;
  bool closing;  /* the last response closes the connection */
  char *scratch; /* lower-cased header names */
  size_t scratch_cap;
} hparser;

/* Upvalues of every function of the _http table (lt_open_http). */
enum {
  UV_HDR_MT = 1,
  UV_METHOD,
  UV_PATH,
  UV_QUERY,
  UV_VERSION,
  UV_HEADERS,
  UV_BODY,
  UV_STATUS,
  UV_V11,
  UV_V10,
  UV_METHODS,
  UV_COUNT = UV_METHODS
};
extern const char *const lt_http_uv_strings[UV_METHODS - UV_METHOD];
#define UV(i) lua_upvalueindex(i)

static inline double lt_http_now(void) { return (double)ty__now_ns() * 1e-9; }

/* Makes room for n more bytes at buf[len]. */
static inline void lt_http_reserve(char **buf, size_t *cap, size_t len,
                                   size_t n) {
  ty__grow(buf, cap, len + n, 1, 1024);
}

/* ---- lhttp_parse.c ------------------------------------------------------- */

extern const llhttp_settings_t lt_http_settings;
enum { ADV_NEED, ADV_MSG, ADV_ERR };
/* Drops what no span refers to any more, then appends data. */
void lt_http_take(hparser *p, const char *data, size_t len);
/* Parses received bytes up to the next complete message: ADV_*. */
int lt_http_advance(hparser *p);
/* Seconds the next read may wait (-1: no limit). */
double lt_http_next_timeout(hparser *p);
/* Pushes the request table of the complete message (in a function of the
 * _http table: it uses the upvalues). */
void lt_http_push_request(lua_State *L, hparser *p);

/* ---- lhttp_respond.c ----------------------------------------------------- */

void lt_http_out(hparser *p, const char *s, size_t n);
#define OUT_LIT(p, s) lt_http_out((p), (s), sizeof(s) - 1)
/* "Date: ...\r\n" of this second. */
const char *lt_http_date_line(size_t *len);
/* Why the header line k: v cannot be sent (CR, LF, bad name), or NULL. */
const char *lt_http_check_header(const char *k, size_t kl, const char *v,
                                 size_t vl);
/* A complete response without a body of the handler's (errors, 100). */
void lt_http_put_simple(hparser *p, int status, bool keep);
/* The handler's response res (at ri; body at bi): NULL, or why it is not
 * one (nothing written then). */
const char *lt_http_put_response(lua_State *L, hparser *p, int ri, int bi);

/* ---- lhttp_client.c ------------------------------------------------------ */

int lt_http_rparser(lua_State *L);
int lt_http_rfeed(lua_State *L);

/* ---- lhttp_gauge.c ------------------------------------------------------- */

int lt_http_gauge_new(lua_State *L);
int lt_http_gauge_enter(lua_State *L);
int lt_http_gauge_count(lua_State *L);
int lt_http_gauge_free(lua_State *L);

#endif
