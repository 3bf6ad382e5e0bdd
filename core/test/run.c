/*
 * run.c - runs every test of list.h (or those named on the command line), each
 * in a child process under a time limit, and prints "N passed, N failed".
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "list.h"
#include "test.h"

#define DECLARE(name, secs) TEST_IMPL(name);
TY_TEST_LIST(DECLARE)

typedef struct {
  const char *name;
  int (*fn)(void);
  int timeout;
} test_entry;

#define ENTRY(name, secs) {#name, test_##name, secs},
static const test_entry tests[] = {TY_TEST_LIST(ENTRY)};

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Runs one test in a child; returns 0 on pass. */
static int run_one(const test_entry *t) {
  double t0 = now_s();
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    alarm((unsigned)t->timeout * (getenv("TY_TEST_SLOW") ? 4 : 1));
    _exit(t->fn() == 0 ? 0 : 1);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  int ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  if (ok) {
    printf("ok   %-28s %.2fs\n", t->name, now_s() - t0);
  } else if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM) {
    printf("FAIL %-28s timed out after %ds\n", t->name, t->timeout);
  } else if (WIFSIGNALED(status)) {
    printf("FAIL %-28s signal %d\n", t->name, WTERMSIG(status));
  } else {
    printf("FAIL %-28s exit %d\n", t->name, WEXITSTATUS(status));
  }
  return ok ? 0 : 1;
}

int main(int argc, char **argv) {
  int passed = 0, failed = 0;
  size_t n = sizeof(tests) / sizeof(tests[0]);
  for (size_t i = 0; i < n; i++) {
    if (argc > 1) {
      int wanted = 0;
      for (int a = 1; a < argc; a++)
        wanted |= strstr(tests[i].name, argv[a]) == tests[i].name;
      if (!wanted) continue;
    }
    if (run_one(&tests[i]) == 0) passed++;
    else failed++;
  }
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
