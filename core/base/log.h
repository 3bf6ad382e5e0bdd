/*
 * log.h - the process's event log: one line per event on stderr, as text
 *
 *   2026-11-26T04:02:24.123Z INFO w1 <pid> stored key=a bytes=12
 *
 * or as JSON lines ({"time","level","worker","pid","msg", fields...}).
 *
 * Writing never blocks the caller on a slow stderr: an event is formatted
 * by the caller into a bounded queue (a short mutex-protected copy) and a
 * writer thread of the log drains it. Events keep the order in which their
 * writers queued them, so the lines of one actor stay in order. A full queue
 * drops the event and counts it (ty__log_dropped); it never stalls.
 */
#ifndef TY_LOG_H
#define TY_LOG_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum { TY_LOG_DEBUG = 0, TY_LOG_INFO, TY_LOG_WARN, TY_LOG_ERROR, TY_LOG_OFF };

/* Parses "debug", "info", "warn" (or "warning"), "error", "off": TY_LOG_*,
 * or -1. */
int ty__log_level_parse(const char *s);
const char *ty__log_level_name(int level);

/* Process-wide settings: the lowest level written, and the format. Any
 * thread, any time. */
void ty__log_set(int level, bool json);
int ty__log_level(void);
bool ty__log_json(void);
static inline bool ty__log_enabled(int level) {
  return level >= ty__log_level();
}

/*
 * An event being built: fields are appended in the current format (text:
 * " key=value", the value quoted when it holds spaces, quotes or control
 * characters; JSON: ,"key":value). Stack-allocated; long events are cut at
 * TY_LOG_LINE_MAX bytes.
 */
#define TY_LOG_LINE_MAX 4096
typedef struct ty__logev {
  int level;
  bool json;
  size_t len;
  char buf[TY_LOG_LINE_MAX];
} ty__logev;

/* Starts an event: time, level, worker (-1: none), pid (0: none), message. */
void ty__log_begin(ty__logev *e, int level, int worker, uint64_t pid,
                   const char *msg, size_t msglen);
void ty__log_str(ty__logev *e, const char *key, const char *v, size_t vlen);
void ty__log_num(ty__logev *e, const char *key, double v);
void ty__log_bool(ty__logev *e, const char *key, bool v);
void ty__log_null(ty__logev *e, const char *key); /* key=null / "key":null */
/* Queues the event (or drops it when the queue is full). */
void ty__log_end(ty__logev *e);

/* An event with a formatted message and no fields. */
void ty__logf(int level, int worker, uint64_t pid, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Starts the writer thread now rather than at the first event: a process
 * short of memory when it first logs (an actor that ran it out of memory)
 * could not start it then. Idempotent. */
void ty__log_start(void);

/* Events dropped because the queue was full, since the start. */
uint64_t ty__log_dropped(void);
/* Waits (up to timeout_ms) until every queued event is written: before the
 * process exits. */
void ty__log_flush(int timeout_ms);
/* Where lines go (default 2, stderr): for tests. */
void ty__log_set_fd(int fd);

#endif
