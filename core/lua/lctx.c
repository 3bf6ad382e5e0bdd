/*
 * lctx.c - the context floor's objects (lctx.h): the process's settings,
 * with tycho.config's defaults, and the records every floor reads.
 */
#include "lctx.h"

lt_ctx lt__ctx = {.io = -1,
                  .call_timeout = 5.0,
                  .max_message = 64u << 20,
                  .max_slice = 1.0,
                  .stop_timeout = 5.0,
                  .shutdown_timeout = 10.0};

_Thread_local lt_worker *lt_tls_worker;

const lt_rare lt_rare_none = {.srv_err = LUA_NOREF};
