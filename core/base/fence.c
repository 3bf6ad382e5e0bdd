/*
 * fence.c - the asymmetric fence and code pinning (fence.h).
 */
#include <dlfcn.h>
#include <linux/membarrier.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "fence.h"

static int g_cmd; /* the membarrier command that works here, or 0 */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static int membarrier(int cmd) {
  return (int)syscall(SYS_membarrier, cmd, 0, 0);
}

static void init_once(void) {
  if (membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0)
    g_cmd = MEMBARRIER_CMD_PRIVATE_EXPEDITED;
  else if (membarrier(MEMBARRIER_CMD_QUERY) > 0)
    g_cmd = MEMBARRIER_CMD_GLOBAL; /* slower (an RCU grace period) */
}

void ty__heavy_fence_init(void) { pthread_once(&g_once, init_once); }

void ty__heavy_fence(void) {
  ty__heavy_fence_init();
  /* seq_cst: our earlier stores before the barrier, our later loads after. */
  atomic_thread_fence(memory_order_seq_cst);
  if (g_cmd && membarrier(g_cmd) == 0) {
    atomic_thread_fence(memory_order_seq_cst);
    return;
  }
  /* No membarrier (kernel < 4.14 or seccomp): every other thread has
   * passed through a context switch or an interrupt (each a full barrier)
   * within a scheduler tick, by far; the callers wait a slice anyway. */
  struct timespec ts = {0, 20 * 1000000};
  nanosleep(&ts, NULL);
  atomic_thread_fence(memory_order_seq_cst);
}

void ty__pin_code(void) {
  Dl_info info;
  if (!dladdr((void *)ty__pin_code, &info) || !info.dli_fname) return;
  /* NOLOAD: only the object already mapped; NODELETE sticks to it. */
  dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
}
