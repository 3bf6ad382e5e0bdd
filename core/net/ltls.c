/*
 * ltls.c - TLS contexts and a connection's TLS session on memory BIOs
 * (ltls.h tells the whole story).
 */
#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/x509v3.h>
#include <pthread.h>
#include <string.h>

#include "ltls.h"

#define READ_CHUNK 16384 /* plaintext taken from the session per SSL_read */

struct lt_tls {
  SSL *ssl;
  BIO *rbio, *wbio; /* owned by ssl */
  bool failed, notified, begun;
  char *pend; /* plaintext written before the handshake ended */
  size_t pend_len, pend_cap;
  char reason[160]; /* "tls: ..." once failed */
};

/* ---- errors ------------------------------------------------------------------ */

/* "tls: <what>: <OpenSSL's reason>" from the thread's error queue, which it
 * empties (each worker shares one queue among its connections). */
static void queue_reason(char *err, size_t errlen, const char *what) {
  unsigned long e = ERR_peek_last_error();
  const char *r = e ? ERR_reason_error_string(e) : NULL;
  if (what) snprintf(err, errlen, "tls: %s: %s", what, r ? r : "error");
  else snprintf(err, errlen, "tls: %s", r ? r : "handshake failed");
  ERR_clear_error();
}

/* ---- contexts ----------------------------------------------------------------- */

static char *dupstr(const char *s) {
  size_t n = strlen(s) + 1;
  return memcpy(ty__xmalloc(n), s, n);
}

/* Client contexts, one per (CA file, verify) pair seen, kept for the life
 * of the process: a handful, and building one reads the CA file. */
typedef struct cctx {
  struct cctx *next;
  char *ca; /* NULL: the system store */
  bool verify;
  SSL_CTX *ctx;
} cctx;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static cctx *g_cctx;       /* under g_mu */
static char *g_default_ca; /* under g_mu */

static void common_setup(SSL_CTX *ctx) {
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  /* Idle connections give their record buffers back (nginx does too). */
  SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
  SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION);
}

static SSL_CTX *client_ctx_new(const char *ca, bool verify, char *err,
                               size_t errlen) {
  SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
  if (!ctx) {
    queue_reason(err, errlen, "cannot create a context");
    return NULL;
  }
  common_setup(ctx);
  if (verify) {
    int ok = ca ? SSL_CTX_load_verify_locations(ctx, ca, NULL)
                : SSL_CTX_set_default_verify_paths(ctx);
    if (!ok) {
      char what[LT_TLS_NAME + 32];
      snprintf(what, sizeof what, "cannot load the CA file %s",
               ca ? ca : "(system)");
      queue_reason(err, errlen, what);
      SSL_CTX_free(ctx);
      return NULL;
    }
  }
  SSL_CTX_set_verify(ctx, verify ? SSL_VERIFY_PEER : SSL_VERIFY_NONE, NULL);
  return ctx;
}

static bool same_ca(const char *a, const char *b) {
  return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

SSL_CTX *lt_tls_client_ctx(const char *ca, bool verify, char *err,
                           size_t errlen) {
  pthread_mutex_lock(&g_mu);
  if (!ca) ca = g_default_ca;
  if (!verify) ca = NULL; /* no chain check: the CA does not matter */
  SSL_CTX *ctx = NULL;
  for (cctx *e = g_cctx; e && !ctx; e = e->next)
    if (e->verify == verify && same_ca(e->ca, ca)) ctx = e->ctx;
  if (!ctx) {
    /* Built under the mutex: a first use per CA file, and two workers
     * asking at once get the same context. */
    ctx = client_ctx_new(ca, verify, err, errlen);
    if (ctx) {
      cctx *e = ty__xcalloc(1, sizeof *e);
      e->ca = ca ? dupstr(ca) : NULL;
      e->verify = verify;
      e->ctx = ctx;
      e->next = g_cctx;
      g_cctx = e;
    }
  }
  pthread_mutex_unlock(&g_mu);
  return ctx;
}

void lt_tls_set_default_ca(const char *ca) {
  pthread_mutex_lock(&g_mu);
  free(g_default_ca);
  g_default_ca = ca ? dupstr(ca) : NULL;
  pthread_mutex_unlock(&g_mu);
}

char *lt_tls_default_ca(void) {
  pthread_mutex_lock(&g_mu);
  char *ca = g_default_ca ? dupstr(g_default_ca) : NULL;
  pthread_mutex_unlock(&g_mu);
  return ca;
}

/* A server context's ALPN list lives as long as the context (sessions of
 * accepted connections may outlive the listener): in its ex_data. */
typedef struct alpn_list {
  size_t len;
  unsigned char v[LT_TLS_ALPN];
} alpn_list;

static int g_alpn_idx = -1;
static pthread_once_t g_alpn_once = PTHREAD_ONCE_INIT;

static void alpn_free(void *parent, void *ptr, CRYPTO_EX_DATA *ad, int idx,
                      long argl, void *argp) {
  (void)parent, (void)ad, (void)idx, (void)argl, (void)argp;
  free(ptr);
}

static void alpn_index(void) {
  g_alpn_idx = SSL_CTX_get_ex_new_index(0, NULL, NULL, NULL, alpn_free);
}

/* The server picks the first of its protocols the client offers; none in
 * common: no ALPN in the answer (the client decides). */
static int alpn_select(SSL *ssl, const unsigned char **out,
                       unsigned char *outlen, const unsigned char *in,
                       unsigned int inlen, void *arg) {
  (void)arg;
  alpn_list *a = SSL_CTX_get_ex_data(SSL_get_SSL_CTX(ssl), g_alpn_idx);
  unsigned char *o;
  if (!a || SSL_select_next_proto(&o, outlen, a->v, (unsigned)a->len, in,
                                  inlen) != OPENSSL_NPN_NEGOTIATED)
    return SSL_TLSEXT_ERR_NOACK;
  *out = o;
  return SSL_TLSEXT_ERR_OK;
}

SSL_CTX *lt_tls_server_ctx(const char *cert, const char *key,
                           const unsigned char *alpn, size_t alpn_len,
                           char *err, size_t errlen) {
  char what[LT_TLS_NAME + 32];
  SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
  if (!ctx) {
    queue_reason(err, errlen, "cannot create a context");
    return NULL;
  }
  common_setup(ctx);
  SSL_CTX_set_options(ctx, SSL_OP_CIPHER_SERVER_PREFERENCE);
  if (SSL_CTX_use_certificate_chain_file(ctx, cert) != 1) {
    snprintf(what, sizeof what, "cannot load the certificate %s", cert);
    goto fail;
  }
  if (SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1) {
    snprintf(what, sizeof what, "cannot load the key %s", key);
    goto fail;
  }
  if (SSL_CTX_check_private_key(ctx) != 1) {
    snprintf(what, sizeof what, "the key %s does not match the certificate",
             key);
    goto fail;
  }
  static const unsigned char sid[] = "tycho";
  SSL_CTX_set_session_id_context(ctx, sid, sizeof sid - 1);
  if (alpn_len) {
    pthread_once(&g_alpn_once, alpn_index);
    alpn_list *a = ty__xcalloc(1, sizeof *a);
    a->len = alpn_len;
    memcpy(a->v, alpn, alpn_len);
    SSL_CTX_set_ex_data(ctx, g_alpn_idx, a);
    SSL_CTX_set_alpn_select_cb(ctx, alpn_select, NULL);
  }
  return ctx;
fail:
  queue_reason(err, errlen, what);
  SSL_CTX_free(ctx);
  return NULL;
}

/* ---- a session ---------------------------------------------------------------- */

static lt_tls *session_new(lt_conn *c, SSL_CTX *ctx) {
  SSL *ssl = SSL_new(ctx);
  if (!ssl) return NULL;
  lt_tls *t = ty__xcalloc(1, sizeof *t);
  t->ssl = ssl;
  t->rbio = BIO_new(BIO_s_mem());
  t->wbio = BIO_new(BIO_s_mem());
  if (!t->rbio || !t->wbio) {
    BIO_free(t->rbio);
    BIO_free(t->wbio);
    SSL_free(ssl);
    free(t);
    return NULL;
  }
  /* An empty read BIO means "wait for more", not end of file. */
  BIO_set_mem_eof_return(t->rbio, -1);
  SSL_set_bio(ssl, t->rbio, t->wbio);
  c->tls = t;
  return t;
}

void lt_tls_free(lt_tls *t) {
  if (!t) return;
  SSL_free(t->ssl);
  free(t->pend);
  free(t);
}

static bool is_ip(const char *s) {
  unsigned char buf[16];
  return inet_pton(AF_INET, s, buf) == 1 || inet_pton(AF_INET6, s, buf) == 1;
}

int lt_tls_attach_client(lt_conn *c, const lt_tls_client *cfg, char *err,
                         size_t errlen) {
  ERR_clear_error();
  lt_tls *t = session_new(c, cfg->ctx);
  if (!t) {
    queue_reason(err, errlen, "cannot create a session");
    return -1;
  }
  SSL_set_connect_state(t->ssl);
  const char *name = cfg->name;
  bool ok = true;
  /* SNI carries host names only (RFC 6066), never an address. */
  if (*name && !is_ip(name)) ok = SSL_set_tlsext_host_name(t->ssl, name) == 1;
  if (ok && cfg->verify && *name) {
    /* An address is matched against the IP SANs, a name against the DNS
     * ones (and the CN, as OpenSSL does without SANs). */
    ok = is_ip(name)
             ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(t->ssl), name) == 1
             : SSL_set1_host(t->ssl, name) == 1;
  }
  if (ok && cfg->alpn_len)
    ok = SSL_set_alpn_protos(t->ssl, cfg->alpn, (unsigned)cfg->alpn_len) == 0;
  if (!ok) {
    queue_reason(err, errlen, "bad server name");
    c->tls = NULL;
    lt_tls_free(t);
    return -1;
  }
  return 0;
}

int lt_tls_attach_server(lt_conn *c, SSL_CTX *ctx) {
  ERR_clear_error();
  lt_tls *t = session_new(c, ctx);
  if (!t) {
    ERR_clear_error();
    return -1;
  }
  SSL_set_accept_state(t->ssl);
  t->begun = true;
  return 0;
}

/* The session failed: its reason, and every later read and write fails. */
static void fail(lt_conn *c) {
  lt_tls *t = c->tls;
  unsigned long e = ERR_peek_last_error();
  long v = SSL_get_verify_result(t->ssl);
  if (ERR_GET_REASON(e) == SSL_R_CERTIFICATE_VERIFY_FAILED && v != X509_V_OK)
    snprintf(t->reason, sizeof t->reason, "tls: %s",
             X509_verify_cert_error_string(v));
  else queue_reason(t->reason, sizeof t->reason, NULL);
  ERR_clear_error();
  t->failed = true;
  if (!c->rerr || c->rerr == LT_EOF) c->rerr = LT_ETLS;
  if (!c->werr) c->werr = LT_ETLS;
}

/* The handshake ended (well or not): whoever waits on it hears it. */
static void hs_ended(lt_conn *c) {
  if (c->writer) ty_actor_wake(c->writer);
}

static int seal_now(lt_conn *c, const char *data, size_t n) {
  lt_tls *t = c->tls;
  ERR_clear_error();
  while (n) {
    size_t w = 0;
    if (SSL_write_ex(t->ssl, data, n, &w) != 1) {
      fail(c);
      return LT_ETLS;
    }
    data += w;
    n -= w;
  }
  return 0;
}

/* One handshake step; true once it has ended well. */
static bool handshake(lt_conn *c) {
  lt_tls *t = c->tls;
  if (SSL_is_init_finished(t->ssl)) return true;
  ERR_clear_error();
  int r = SSL_do_handshake(t->ssl);
  if (r != 1) {
    int e = SSL_get_error(t->ssl, r);
    if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE) {
      fail(c);
      hs_ended(c);
    }
    return false;
  }
  if (t->pend_len) { /* writes that came first go out now, in order */
    seal_now(c, t->pend, t->pend_len);
    t->pend_len = 0;
  }
  hs_ended(c);
  return true;
}

/* Plaintext the session holds goes to the read buffer. */
static void open_records(lt_conn *c) {
  lt_tls *t = c->tls;
  ERR_clear_error();
  for (;;) {
    char *p = lt_conn_rb_space(c, READ_CHUNK);
    size_t n = 0;
    if (SSL_read_ex(t->ssl, p, READ_CHUNK, &n) == 1) {
      c->r1 += n;
      continue;
    }
    int e = SSL_get_error(t->ssl, 0);
    if (e == SSL_ERROR_ZERO_RETURN) { /* close_notify: the end */
      if (!c->rerr) c->rerr = LT_EOF;
    } else if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE) {
      fail(c);
    }
    return;
  }
}

bool lt_tls_begin(lt_conn *c) {
  lt_tls *t = c->tls;
  if (t->begun) return false;
  t->begun = true;
  handshake(c);
  return true;
}

bool lt_tls_input(lt_conn *c, const char *data, size_t n) {
  lt_tls *t = c->tls;
  if (t->failed) return false;
  if (n && BIO_write(t->rbio, data, (int)n) != (int)n) {
    snprintf(t->reason, sizeof t->reason, "tls: out of memory");
    t->failed = true;
    c->rerr = c->werr = LT_ETLS;
    hs_ended(c);
    return false;
  }
  if (t->begun && handshake(c)) open_records(c);
  return true; /* handshake flights, alerts, key updates to send */
}

int lt_tls_seal(lt_conn *c, const char *data, size_t n) {
  lt_tls *t = c->tls;
  if (t->failed) return LT_ETLS;
  if (!SSL_is_init_finished(t->ssl)) {
    ty__grow(&t->pend, &t->pend_cap, t->pend_len + n, 1, 1024);
    memcpy(t->pend + t->pend_len, data, n);
    t->pend_len += n;
    return 0;
  }
  return seal_now(c, data, n);
}

size_t lt_tls_pending(const lt_conn *c) {
  return c->tls ? BIO_ctrl_pending(c->tls->wbio) : 0;
}

size_t lt_tls_output(lt_conn *c, char *buf, size_t cap) {
  int n = BIO_read(c->tls->wbio, buf, cap > INT32_MAX ? INT32_MAX : (int)cap);
  return n > 0 ? (size_t)n : 0;
}

bool lt_tls_done(const lt_conn *c) {
  return c->tls && !c->tls->failed && SSL_is_init_finished(c->tls->ssl);
}

bool lt_tls_idle(const lt_conn *c) {
  return !c->tls || (!c->tls->pend_len && !lt_tls_pending(c));
}

void lt_tls_close_notify(lt_conn *c) {
  lt_tls *t = c->tls;
  if (!t || t->failed || t->notified || !SSL_is_init_finished(t->ssl)) return;
  t->notified = true;
  ERR_clear_error();
  SSL_shutdown(t->ssl); /* 0: sent, not answered; we do not wait for it */
  ERR_clear_error();
}

const char *lt_tls_reason(const lt_conn *c) {
  return c->tls && c->tls->failed ? c->tls->reason : "tls: failed";
}

SSL *lt_tls_ssl(const lt_conn *c) { return c->tls ? c->tls->ssl : NULL; }

int lt_tls_wait_result(lua_State *co, lt_conn *c, bool timed_out) {
  const char *tok;
  if (c->closed) tok = "closed";
  else if (lt_tls_done(c)) return 0;
  else if (c->tls->failed) tok = c->tls->reason;
  else if (c->rerr == LT_EOF) tok = "closed";
  else if (c->rerr || c->werr)
    tok = lt_conn_errtok(c, c->rerr ? c->rerr : c->werr);
  else if (timed_out) tok = "timeout";
  else return -1;
  lua_pushnil(co);
  lua_pushstring(co, tok);
  return 2;
}

/* (Declared with the connection, ltcp.h: the token of any error of c.) */
const char *lt_conn_errtok(const lt_conn *c, int err) {
  if (err == LT_ETLS) return lt_tls_reason(c);
  return lt_net_errtok(err);
}
