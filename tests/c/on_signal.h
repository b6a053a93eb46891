/* The C test programs' signal: a SIGUSR1 handler that fires a cancel token
 * (`fairshm_cancel_fire` is async-signal-safe), and a thread that sends the signal to
 * another thread later: how a C server's SIGTERM ends its workers' waits. */
#ifndef FAIRSHM_TEST_ON_SIGNAL_H
#define FAIRSHM_TEST_ON_SIGNAL_H

#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <time.h>

#include "fairshm.h"

/* The token the handler fires. */
static fairshm_cancel *on_signal;

static void fire_on_signal(int sig) {
  (void)sig;
  fairshm_cancel_fire(on_signal);
}

/* Makes SIGUSR1 fire `c` (with SA_RESTART: the kernel restarts an interrupted sleep,
 * which must then find the token's word changed). 0, or -1 from sigaction. */
static int fire_on_sigusr1(fairshm_cancel *c) {
  on_signal = c;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = fire_on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  return sigaction(SIGUSR1, &sa, NULL);
}

/* What `signal_later` does: after `ms`, SIGUSR1 to thread `to`. */
struct signal_later {
  pthread_t to;
  long ms;
};

static void *signal_later(void *arg) {
  struct signal_later *s = arg;
  struct timespec ts = {s->ms / 1000, (s->ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
  pthread_kill(s->to, SIGUSR1);
  return NULL;
}

#endif
