/*
 * natsapi.c - loading libnats on demand (natsapi.h says why).
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "natsapi.h"

lc_nats_api lc_nats;

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static char g_err[256]; /* written once, under g_once */

static void load(void) {
  /* The runtime library's soname first (Debian: libnats3.4), then the
   * development link (libnats-dev), for other versions of the same API. */
  static const char *const names[] = {"libnats.so.3.4", "libnats.so"};
  void *h = NULL;
  for (size_t i = 0; i < sizeof names / sizeof *names && !h; i++)
    h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    snprintf(g_err, sizeof g_err,
             "cannot load libnats (install the Debian package libnats3.4, "
             "or libnats-dev): %s",
             dlerror());
    return;
  }
#define LC_NATS_SYM(f)                                                         \
  if (!g_err[0]) {                                                             \
    void *p = dlsym(h, #f);                                                    \
    if (!p)                                                                    \
      snprintf(g_err, sizeof g_err, "libnats has no %s (version 3.4 wanted)",  \
               #f);                                                            \
    else *(void **)&lc_nats.f = p;                                             \
  }
  LC_NATS_FUNCS(LC_NATS_SYM)
#undef LC_NATS_SYM
  /* The library stays loaded for the life of the process: nats.c keeps
   * threads of its own (timers, garbage collection) once it is used. */
}

natsStatus lc_nats_set_urls(natsOptions *o, const char *urls) {
  char buf[2048];
  const char *list[32];
  int n = 0;
  if (snprintf(buf, sizeof buf, "%s", urls) >= (int)sizeof buf)
    return NATS_INVALID_ARG;
  for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok && n < 32;
       tok = strtok_r(NULL, ",", &save)) {
    while (*tok == ' ') tok++;
    char *end = tok + strlen(tok);
    while (end > tok && end[-1] == ' ') *--end = 0;
    if (*tok) list[n++] = tok;
  }
  if (n == 0) return NATS_INVALID_ARG;
  if (n == 1) return N(natsOptions_SetURL)(o, list[0]);
  return N(natsOptions_SetServers)(o, list, n); /* it copies them */
}

int lc_nats_load(char *err, size_t errlen) {
  pthread_once(&g_once, load);
  if (!g_err[0]) return 0;
  snprintf(err, errlen, "%s", g_err);
  return -1;
}
