/*
 * log.c - the event log (log.h): formatting into a caller's buffer, a
 * bounded byte queue, and a writer thread that drains it to stderr.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "fence.h"
#include "log.h"

#define QUEUE_BYTES (8u << 20) /* events waiting for the writer */

/* relaxed: settings read on every event; a change may show a little late. */
static _Atomic int g_level = TY_LOG_INFO;
static _Atomic bool g_json;
static _Atomic int g_fd = 2;
/* relaxed: a counter. */
static _Atomic uint64_t g_dropped;

/* The queue: q[head..tail) mod QUEUE_BYTES, guarded by mu. */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t more = PTHREAD_COND_INITIALIZER;  /* writer waits */
static pthread_cond_t empty = PTHREAD_COND_INITIALIZER; /* flush waits */
static char *q;
static size_t head, tail; /* monotonic byte counts */
static bool writing;      /* the writer holds bytes not yet written */
static pthread_once_t once = PTHREAD_ONCE_INIT;

static const char *const names[] = {"DEBUG", "INFO", "WARN", "ERROR"};

int ty__log_level_parse(const char *s) {
  if (!s) return -1;
  if (!strcmp(s, "debug")) return TY_LOG_DEBUG;
  if (!strcmp(s, "info")) return TY_LOG_INFO;
  if (!strcmp(s, "warn") || !strcmp(s, "warning")) return TY_LOG_WARN;
  if (!strcmp(s, "error")) return TY_LOG_ERROR;
  if (!strcmp(s, "off")) return TY_LOG_OFF;
  return -1;
}

const char *ty__log_level_name(int level) {
  return level >= 0 && level < TY_LOG_OFF ? names[level] : "OFF";
}

void ty__log_set(int level, bool json) {
  atomic_store_explicit(&g_level, level, memory_order_relaxed);
  atomic_store_explicit(&g_json, json, memory_order_relaxed);
}

int ty__log_level(void) {
  return atomic_load_explicit(&g_level, memory_order_relaxed);
}

bool ty__log_json(void) {
  return atomic_load_explicit(&g_json, memory_order_relaxed);
}

void ty__log_set_fd(int fd) {
  atomic_store_explicit(&g_fd, fd, memory_order_relaxed);
}

uint64_t ty__log_dropped(void) {
  return atomic_load_explicit(&g_dropped, memory_order_relaxed);
}

/* ---- the writer --------------------------------------------------------- */

static void write_all(const char *p, size_t n) {
  int fd = atomic_load_explicit(&g_fd, memory_order_relaxed);
  while (n) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return; /* stderr gone: the events are lost, not retried */
    p += w;
    n -= (size_t)w;
  }
}

static void *writer(void *arg) {
  (void)arg;
  static char out[64 * 1024];
  pthread_mutex_lock(&mu);
  for (;;) {
    while (head == tail) {
      writing = false;
      pthread_cond_broadcast(&empty);
      pthread_cond_wait(&more, &mu);
    }
    size_t n = tail - head, at = head % QUEUE_BYTES;
    if (n > sizeof out) n = sizeof out;
    if (n > QUEUE_BYTES - at) n = QUEUE_BYTES - at;
    memcpy(out, q + at, n);
    head += n;
    writing = true;
    pthread_mutex_unlock(&mu); /* the slow part runs unlocked */
    write_all(out, n);
    pthread_mutex_lock(&mu);
  }
  return NULL;
}

static void start(void) {
  /* The writer thread outlives every runtime and runs this object's code:
   * a host that unloads the module (lua_close of the state that required
   * it) must not unmap it under the thread. */
  ty__pin_code();
  q = ty__xmalloc(QUEUE_BYTES);
  pthread_t t;
  pthread_attr_t a;
  pthread_attr_init(&a);
  pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
  if (pthread_create(&t, &a, writer, NULL)) ty__die("cannot start the log");
  pthread_attr_destroy(&a);
}

void ty__log_start(void) { pthread_once(&once, start); }

static void enqueue(const char *line, size_t n) {
  pthread_once(&once, start);
  pthread_mutex_lock(&mu);
  if (QUEUE_BYTES - (tail - head) < n) {
    pthread_mutex_unlock(&mu);
    atomic_fetch_add_explicit(&g_dropped, 1, memory_order_relaxed);
    return;
  }
  size_t at = tail % QUEUE_BYTES, first = QUEUE_BYTES - at;
  if (first > n) first = n;
  memcpy(q + at, line, first);
  memcpy(q, line + first, n - first);
  tail += n;
  pthread_cond_signal(&more);
  pthread_mutex_unlock(&mu);
}

void ty__log_flush(int timeout_ms) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += timeout_ms / 1000;
  ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000;
  if (ts.tv_nsec >= 1000000000) {
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000;
  }
  pthread_mutex_lock(&mu);
  while ((head != tail || writing) &&
         pthread_cond_timedwait(&empty, &mu, &ts) == 0) {
  }
  pthread_mutex_unlock(&mu);
}

/* ---- formatting ----------------------------------------------------------- */

static void put(ty__logev *e, const char *s, size_t n) {
  size_t room = sizeof e->buf - 1 - e->len; /* keep one byte for '\n' */
  if (n > room) n = room;
  memcpy(e->buf + e->len, s, n);
  e->len += n;
}

static void putc_(ty__logev *e, char c) { put(e, &c, 1); }

/* Escapes s for a JSON string or a quoted text value. */
static void put_escaped(ty__logev *e, const char *s, size_t n) {
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    char tmp[8];
    if (c == '"' || c == '\\') {
      tmp[0] = '\\', tmp[1] = (char)c;
      put(e, tmp, 2);
    } else if (c == '\n') {
      put(e, "\\n", 2);
    } else if (c == '\t') {
      put(e, "\\t", 2);
    } else if (c == '\r') {
      put(e, "\\r", 2);
    } else if (c < 0x20 || c == 0x7f) {
      snprintf(tmp, sizeof tmp, "\\u%04x", c);
      put(e, tmp, 6);
    } else {
      putc_(e, (char)c);
    }
  }
}

static bool needs_quotes(const char *s, size_t n) {
  if (!n) return true;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c <= ' ' || c == '"' || c == '=' || c == 0x7f) return true;
  }
  return false;
}

static void put_time(ty__logev *e) {
  struct timespec ts;
  struct tm tm;
  char b[40];
  clock_gettime(CLOCK_REALTIME, &ts);
  gmtime_r(&ts.tv_sec, &tm);
  int n = snprintf(b, sizeof b, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ",
                   tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
                   tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000);
  put(e, b, (size_t)n);
}

void ty__log_begin(ty__logev *e, int level, int worker, uint64_t pid,
                   const char *msg, size_t msglen) {
  char b[64];
  e->level = level;
  e->json = ty__log_json();
  e->len = 0;
  if (e->json) {
    put(e, "{\"time\":\"", 9);
    put_time(e);
    int n =
        snprintf(b, sizeof b, "\",\"level\":\"%s\"", ty__log_level_name(level));
    put(e, b, (size_t)n);
    if (worker >= 0) {
      n = snprintf(b, sizeof b, ",\"worker\":%d", worker);
      put(e, b, (size_t)n);
    }
    if (pid) {
      n = snprintf(b, sizeof b, ",\"pid\":%llu", (unsigned long long)pid);
      put(e, b, (size_t)n);
    }
    put(e, ",\"msg\":\"", 8);
    put_escaped(e, msg, msglen);
    putc_(e, '"');
    return;
  }
  put_time(e);
  int n = snprintf(b, sizeof b, " %s", ty__log_level_name(level));
  put(e, b, (size_t)n);
  if (worker >= 0) n = snprintf(b, sizeof b, " w%d", worker);
  else n = snprintf(b, sizeof b, " -");
  put(e, b, (size_t)n);
  if (pid) n = snprintf(b, sizeof b, " %llu ", (unsigned long long)pid);
  else n = snprintf(b, sizeof b, " - ");
  put(e, b, (size_t)n);
  if (needs_quotes(msg, msglen)) {
    /* A message is plain words: only control characters are escaped, so
     * that an event stays on one line. */
    for (size_t i = 0; i < msglen; i++) {
      unsigned char c = (unsigned char)msg[i];
      if (c < 0x20 || c == 0x7f) put_escaped(e, msg + i, 1);
      else putc_(e, (char)c);
    }
  } else {
    put(e, msg, msglen);
  }
}

static void put_key(ty__logev *e, const char *key) {
  if (e->json) {
    put(e, ",\"", 2);
    put_escaped(e, key, strlen(key));
    put(e, "\":", 2);
  } else {
    putc_(e, ' ');
    put(e, key, strlen(key));
    putc_(e, '=');
  }
}

void ty__log_str(ty__logev *e, const char *key, const char *v, size_t vlen) {
  put_key(e, key);
  if (!e->json && !needs_quotes(v, vlen)) {
    put(e, v, vlen);
    return;
  }
  putc_(e, '"');
  put_escaped(e, v, vlen);
  putc_(e, '"');
}

void ty__log_num(ty__logev *e, const char *key, double v) {
  char b[32];
  int n;
  if (v == floor(v) && fabs(v) < 9007199254740992.0)
    n = snprintf(b, sizeof b, "%.0f", v);
  else if (isfinite(v)) n = snprintf(b, sizeof b, "%.17g", v);
  else n = snprintf(b, sizeof b, e->json ? "null" : "%g", v);
  put_key(e, key);
  put(e, b, (size_t)n);
}

void ty__log_bool(ty__logev *e, const char *key, bool v) {
  put_key(e, key);
  if (v) put(e, "true", 4);
  else put(e, "false", 5);
}

void ty__log_null(ty__logev *e, const char *key) {
  put_key(e, key);
  put(e, "null", 4);
}

void ty__log_end(ty__logev *e) {
  if (e->json) {
    if (e->len == sizeof e->buf - 1) e->len -= 2; /* cut: close it anyway */
    putc_(e, '}');
  }
  e->buf[e->len++] = '\n';
  enqueue(e->buf, e->len);
}

void ty__logf(int level, int worker, uint64_t pid, const char *fmt, ...) {
  if (!ty__log_enabled(level)) return;
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if ((size_t)n >= sizeof msg) n = (int)sizeof msg - 1;
  ty__logev e;
  ty__log_begin(&e, level, worker, pid, msg, (size_t)n);
  ty__log_end(&e);
}
