/*
 * ltls.h - TLS on tycho.tcp connections (OpenSSL 3), shared by its files:
 *
 *   ltls.c       contexts (client ones cached, a server one per listener),
 *                a connection's session: handshake, sealing, opening
 *   ltls_lua.c   the Lua side: connect/listen options, conn:starttls,
 *                conn:tlsinfo, tycho.tls{}
 *
 * A session works on two memory BIOs: the connection's recv hands it what
 * arrived (lt_tls_input), and its output waits in the write BIO until the
 * connection's send path takes it (lt_tls_output, from lt_conn_pump).
 * OpenSSL never calls the socket, so a handshake is one more thing the
 * worker's I/O backend moves bytes for, and it never blocks the worker.
 *
 * The handshake runs from the callbacks: the client's first flight at
 * lt_tls_begin, each later step when bytes arrive. An actor that waits for
 * it (connect, starttls, or a write before it ends) waits as the
 * connection's writer and is woken when it ends; reads just wait for
 * plaintext, which comes once it has ended. A failure is sticky: reads and
 * writes then answer "tls: <reason>".
 */
#ifndef TY_LTLS_H
#define TY_LTLS_H

#include <openssl/ssl.h>

#include "ltcp.h"

#define LT_TLS_NAME 256 /* a host name to check, and its NUL */
#define LT_TLS_ALPN 64  /* ALPN list, wire format (length-prefixed names) */

/* What a client session checks and offers. */
typedef struct lt_tls_client {
  SSL_CTX *ctx;           /* lt_tls_client_ctx's (cached, never freed) */
  char name[LT_TLS_NAME]; /* checked against the certificate; "" none */
  bool verify;            /* false: no chain or name check at all */
  unsigned char alpn[LT_TLS_ALPN];
  size_t alpn_len;
} lt_tls_client;

/* ---- contexts (ltls.c) ----------------------------------------------------- */

/* The client context for a CA file (NULL: tycho.tls's default, else the
 * system store) and a verify setting, made once per process. NULL and a
 * "tls: ..." message in err when the CA file cannot be loaded. */
SSL_CTX *lt_tls_client_ctx(const char *ca, bool verify, char *err,
                           size_t errlen);
/* A server context from PEM files (cert may hold the chain) and an ALPN
 * list in wire format (len 0: no ALPN). NULL and "tls: ..." in err. */
SSL_CTX *lt_tls_server_ctx(const char *cert, const char *key,
                           const unsigned char *alpn, size_t alpn_len,
                           char *err, size_t errlen);
/* tycho.tls{ca=}: the CA file client sessions use when given none (NULL:
 * the system store). */
void lt_tls_set_default_ca(const char *ca);
/* The default CA file (a copy the caller frees), or NULL. */
char *lt_tls_default_ca(void);

/* ---- a connection's session (ltls.c) --------------------------------------- */

/* Gives c a client session (not started: lt_tls_begin). -1 and "tls: ..."
 * in err when OpenSSL refuses. */
int lt_tls_attach_client(lt_conn *c, const lt_tls_client *cfg, char *err,
                         size_t errlen);
/* Gives an accepted c a server session of ctx; it starts when the client's
 * first bytes arrive. */
int lt_tls_attach_server(lt_conn *c, SSL_CTX *ctx);
/* A client sends its first flight. True when it has begun now: the caller
 * then sends what the session produced (lt_conn_pump; the session sits
 * below the send path and never calls it, scripts/floors/net.txt). */
bool lt_tls_begin(lt_conn *c);
/* Ciphertext arrived: on with the handshake, then plaintext into rb. True
 * when the caller is to send what the session produced (lt_conn_pump). */
bool lt_tls_input(lt_conn *c, const char *data, size_t n);
/* Seals plaintext for sending (kept until the handshake ends if it has not
 * yet). 0, or LT_ETLS. */
int lt_tls_seal(lt_conn *c, const char *data, size_t n);
/* Ciphertext waiting to be sent (bytes). */
size_t lt_tls_pending(const lt_conn *c);
/* Moves up to cap bytes of it to buf; returns how many. */
size_t lt_tls_output(lt_conn *c, char *buf, size_t cap);
/* Has the handshake ended well? */
bool lt_tls_done(const lt_conn *c);
/* Is anything sealed or held back still unsent by the session? */
bool lt_tls_idle(const lt_conn *c);
/* Queues a close_notify (once, after a handshake that ended well). */
void lt_tls_close_notify(lt_conn *c);
/* "tls: <reason>" of a failed session. */
const char *lt_tls_reason(const lt_conn *c);
void lt_tls_free(lt_tls *t);
/* The session's SSL (conn:tlsinfo), or NULL. */
SSL *lt_tls_ssl(const lt_conn *c);
/* For a wait on the handshake: -1 (go on waiting), 0 (it ended well;
 * nothing pushed), or 2: `nil, err` pushed on co (failed, closed or timed
 * out; the caller closes c). */
int lt_tls_wait_result(lua_State *co, lt_conn *c, bool timed_out);

/* ---- Lua (ltls_lua.c) ------------------------------------------------------ */

/* Reads the client TLS options of tcp.connect's options table at idx
 * (tls=, sni=, verify=, ca=, alpn=; timeout= is the caller's); host: the
 * name to check when sni= is not given. Returns 1 (TLS wanted: *out set),
 * 0 (plain TCP) or -1 (err holds "tls: ..."). Raises on misuse. */
int lt_tls_client_opts(lua_State *L, int idx, const char *host,
                       const char *fname, lt_tls_client *out, char *err,
                       size_t errlen);
/* Reads a server `tls = {cert=, key=, alpn=}` table at idx: a context, or
 * NULL with "tls: ..." in err. Raises on misuse. */
SSL_CTX *lt_tls_server_opts(lua_State *L, int idx, const char *fname, char *err,
                            size_t errlen);
/* conn:starttls{...}, conn:tlsinfo() */
int lt_tls_l_starttls(lua_State *L);
int lt_tls_l_info(lua_State *L);
/* tycho.tls{ca=} */
int lt_tls_l_config(lua_State *L);

#endif
