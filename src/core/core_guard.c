/*
 * core_guard.c - reading a mapped file that may shrink while it is read.
 *
 * DESIGN
 * A file mapped with core_file_map can be truncated or rewritten in place by another
 * process while we read it: `cp new.mar model_store/x.mar` while the server loads x.
 * Touching a page past the file's new end raises SIGBUS, whose default action would
 * kill the whole server. core_guard_run runs a reader with a recovery point of its
 * thread's: a SIGBUS raised while the reader runs jumps back there, and the caller
 * reports that the file changed.
 *
 * The handler is installed while at least one guarded reader runs (the first one in
 * installs it, the last one out puts back what was there), so that whatever else sets
 * SIGBUS handlers at other times (a test framework, a sanitizer) keeps them. A SIGBUS
 * on a thread that is not in a guarded reader goes to the handler that was there
 * before, or gets the default action (the process dies, as it would without us).
 *
 * A reader must leave nothing behind that a jump out of its middle would break: no
 * lock held, no malloc'd state, only memory its caller frees anyway (an arena). The
 * readers here are protobuf-c unpacking into the loader's arena and a CRC pass.
 * Entering and leaving take a mutex: guards are for loading, not for hot paths.
 */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stddef.h>

#include "core/core.h"

static _Thread_local sigjmp_buf *recover;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int readers;            /* [lock] guarded readers running */
static struct sigaction saved; /* [lock] the SIGBUS action before the first of them */

static void on_sigbus(int sig, siginfo_t *info, void *context) {
  if (recover) siglongjmp(*recover, 1);
  if ((saved.sa_flags & SA_SIGINFO) && saved.sa_sigaction) {
    saved.sa_sigaction(sig, info, context);
  } else if (saved.sa_handler != SIG_DFL && saved.sa_handler != SIG_IGN) {
    saved.sa_handler(sig);
  } else {
    signal(SIGBUS, SIG_DFL); /* returning faults again, now unhandled */
  }
}

bool core_guard_run(void (*reader)(void *arg), void *arg) {
  pthread_mutex_lock(&lock);
  if (readers++ == 0) {
    struct sigaction sa = {.sa_sigaction = on_sigbus, .sa_flags = SA_SIGINFO};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, &saved);
  }
  pthread_mutex_unlock(&lock);
  sigjmp_buf here, *outer = recover; /* guards nest */
  volatile bool completed = false;
  if (sigsetjmp(here, 1) == 0) { /* 1: a jump back restores the signal mask */
    recover = &here;
    reader(arg);
    completed = true;
  }
  recover = outer;
  pthread_mutex_lock(&lock);
  if (--readers == 0) sigaction(SIGBUS, &saved, NULL);
  pthread_mutex_unlock(&lock);
  return completed;
}
