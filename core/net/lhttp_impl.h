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
 * RFC 9112: llhttp is compiled in its strict mode (the Makefile), so lines
 * end in CR LF only, chunk data must end in CR LF, a field name ends at its
 * colon (`X-A : b` is refused) and a request target is ASCII; on top of it
 * a field value holding CR or LF (obs-fold: a line folded onto the next)
 * and a second Host field are refused. Each is a 400. Trailer fields of a
 * chunked body go to req.trailers, never among the head's fields (a client
 * cannot add headers after a proxy checked them). While a body comes, its
 * bytes leave the received buffer (only the head's spans and the trailers
 * stay), so chunk framing costs no memory. An Upgrade (or CONNECT) request
 * is the last one parsed on its connection: what follows it belongs to
 * another protocol; takeover() hands it, with the connection, to the
 * handler's function, or the connection closes after the response.
 *
 * Pressure: when most of a server's connection slots are taken, the
 * acceptor sets cfg->pressure and heads and idle waits get busy_tmo at most
 * (lua/tycho/http.lua reclaims slots; rank() says which connection to close
 * first).
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

/* Limits and fixed header lines of a server (tycho.http options). One per
 * acceptor (so per worker); its parsers point at it. */
struct hparser;
struct conn_ud;

typedef struct hcfg {
  uint32_t max_head; /* request line + headers, bytes (trailers: as much) */
  uint32_t max_headers;
  uint64_t max_body;
  double idle_tmo, head_tmo, body_tmo; /* seconds; < 0: none */
  double busy_tmo; /* heads and idle waits under pressure; < 0: none */
  bool pressure;   /* most slots are taken: busy_tmo applies (pressure()) */
  struct hparser *conns;      /* the parsers of this acceptor's connections */
  char server[MAX_TEXT + 16]; /* "Server: tycho\r\n" or "" */
  char ctype[MAX_TEXT + 24];  /* "Content-Type: ...\r\n" or "" */
  uint8_t server_len, ctype_len;
  int errors_ref;     /* the errors hook (registry), or LUA_NOREF */
  double stream_over; /* bodies longer (or chunked) are streamed; < 0: never */
} hcfg;

typedef struct hparser {
  llhttp_t ll;
  hcfg *cfg; /* kept alive by the parser's environment */
  /* Its connection (kept alive by the environment too; NULL for parsers
   * without one), listed in cfg->conns for reclaiming slots. */
  struct conn_ud *conn;
  struct hparser *prev, *next;
  bool taken;  /* the handler took the connection over */
  bool served; /* a response went out */
  /* Received bytes: in[0..parsed) went through llhttp; only those of the
   * message in progress are kept (from `start`). */
  char *in;
  size_t in_len, in_cap, parsed;
  /* The message in progress (or complete: `ready`). */
  bool in_msg, head_done, ready, have_start, field_open, value_open;
  bool expect, continued, have_tr;
  size_t start, head_end; /* the head's first byte, the end of its spans */
  size_t tr_start;        /* the trailers' first byte (have_tr) */
  double t_head, t_body;  /* when its head / body began (0: not yet noted) */
  double t_idle;          /* when the wait for the next request began */
  span url;
  hdr *h; /* h[0..nhead): the head's fields, h[nhead..nh): the trailers */
  uint32_t nh, nhead, hcap;
  char *body;
  size_t body_len, body_cap;
  uint64_t body_total; /* the body's bytes so far (max_body) */
  /* A streamed body (cfg->stream_over): the request went out at the end of
   * its head; body[body_off..body_len) waits for req:read (lhttp_body.c). */
  bool body_stream, body_open;
  size_t body_off;
  int status; /* the error response a limit asked for (431, 413, 505) */
  uint8_t method, minor;
  bool keepalive, upgrade; /* upgrade: the connection leaves HTTP after it */
  /* Responses not written yet. */
  char *out;
  size_t out_len, out_cap;
  bool closing;   /* the last response closes the connection */
  bool streaming; /* the body is a function or a file: it follows the head */
  bool chunked;   /* ... in chunks (a function's, HTTP/1.1) */
  double flen;    /* ... a file's length */
  char *scratch;  /* lower-cased header names */
  size_t scratch_cap;
  /* For tycho.observe's figures (lhttp_stats.c): when the request was
   * complete (lt_ticks), the status of the last response put. */
  uint64_t t_ready;
  int resp_status;
} hparser;

/* lhttp_stats.c: counts the response just put for p's request (status, and
 * its latency when p->t_ready is set), in this worker's figures; and
 * stats() -> this worker's figures | nil (the _http table). */
void lt_http_count(hparser *p);
int lt_http_stats(lua_State *L);

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
  UV_TRAILERS,
  UV_UPGRADE,
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
/* At the end of a head: whether its body is streamed (then the request
 * goes out now; *pause set). The stream itself is lhttp_body.c. */
bool lt_http_body_begin(hparser *p);
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
/* The server's own answer `status` through the errors hook, if any. */
void lt_http_put_error(lua_State *L, hparser *p, int status, bool keep);
/* The handler's response res (at ri; body at bi): NULL, or why it is not
 * one (nothing written then). */
const char *lt_http_put_response(lua_State *L, hparser *p, int ri, int bi);

/* ---- lhttp_body.c -------------------------------------------------------- */

void lt_open_http_body(lua_State *L);

/* ---- lhttp_file.c -------------------------------------------------------- */

/* Whether idx is a file (a body of static routes); *len its part's size. */
bool lt_http_file_len(lua_State *L, int idx, double *len);
void lt_open_http_file(lua_State *L);

/* ---- lhttp_client.c ------------------------------------------------------ */

int lt_http_rparser(lua_State *L);
int lt_http_rfeed(lua_State *L);

/* ---- lhttp_gauge.c ------------------------------------------------------- */

int lt_http_gauge_new(lua_State *L);
int lt_http_gauge_enter(lua_State *L);
int lt_http_gauge_count(lua_State *L);
int lt_http_gauge_free(lua_State *L);
/* reclaim(cfg) -> true | false: closes the connection of cfg's acceptor
 * that gives its slot up most readily (lingering, then the one that has
 * waited longest for a request, keep-alive ones first; never one being
 * answered). */
int lt_http_reclaim(lua_State *L);
/* sweep(cfg, seconds) -> n: closes the lingering connections and those
 * idle or in a head for longer than seconds (under pressure). */
int lt_http_sweep(lua_State *L);
/* Lists p in p->cfg->conns / takes it out (idempotent). */
void lt_http_list(hparser *p);
void lt_http_unlist(hparser *p);

#endif
