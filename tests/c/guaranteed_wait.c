/* A guaranteed pool's blocking acquire through the C ABI, as a C program uses it
 * (fairshm_guaranteed_acquire_wait): served as soon as another thread gives the loan
 * back, long before the retry-after it was given; ended at once by a cancel token
 * fired from another thread or from a signal handler, and by its timeout, each with
 * the last refusal written as fairshm_guaranteed_acquire writes it; and bad arguments
 * as typed errors. A sleep as a tenant's waiter (fairshm_guaranteed_sleep_as) sleeps
 * through a release that gives its tenant nothing, which wakes a sleep that says
 * nobody.
 *
 * Usage: guaranteed_wait SEGMENT_NAME. Exit 0 when every check holds; each failure is
 * printed. Every wait has a deadline (alarm). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "fairshm.h"
#include "on_signal.h"

static int failures = 0;

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* After 200 ms: releases the loan (`lease` set) or fires the token (`cancel` set). */
struct later {
  fairshm_table *t;
  uint64_t lease;
  fairshm_cancel *cancel;
  double at;
};

static void *act_later(void *arg) {
  struct later *l = arg;
  sleep_ms(200);
  l->at = now_ms();
  if (l->cancel)
    fairshm_cancel_fire(l->cancel);
  else
    fairshm_guaranteed_release(l->t, l->lease, FAIRSHM_NOW);
  return NULL;
}

/* After 200 ms: releases `*lease` (b's own 50) and takes it again (into `*lease`), a
 * release that gives nothing back to a. */
struct churn {
  fairshm_table *t;
  uint32_t pool, tenant;
  uint64_t *lease;
  double at;
};

static void *churn_later(void *arg) {
  struct churn *c = arg;
  fairshm_guaranteed_refusal r;
  sleep_ms(200);
  c->at = now_ms();
  fairshm_guaranteed_release(c->t, *c->lease, FAIRSHM_NOW);
  fairshm_guaranteed_acquire(c->t, c->pool, c->tenant, 50, 60000, FAIRSHM_NOW, c->lease, &r,
                             NULL, 0);
  return NULL;
}

/* a's ask for 10 more, refused; then a sleep of up to `timeout_ms`, as a waiter of a
 * (fairshm_guaranteed_sleep_as) or of nobody said (fairshm_guaranteed_sleep), while
 * another thread acts at 200 ms. Returns how long the sleep took, in ms. */
static uint32_t last_woken_v;
static uint32_t *last_woken = &last_woken_v;

static double sleep_while(fairshm_table *t, uint32_t pool, uint32_t a, int as_a,
                          uint64_t timeout_ms, void *(*act)(void *), void *arg) {
  uint32_t seen = 0, woken = 9;
  uint64_t none, cookie = 0;
  fairshm_guaranteed_refusal r;
  CHECK(fairshm_guaranteed_wake_seen(t, pool, &seen) == FAIRSHM_OK, "wake_seen");
  CHECK(fairshm_guaranteed_wake_seen_as(t, pool, a, &cookie) == FAIRSHM_OK &&
            (uint32_t)cookie == seen,
        "wake_seen_as: %llx", (unsigned long long)cookie);
  CHECK(fairshm_guaranteed_acquire(t, pool, a, 10, 50, FAIRSHM_NOW, &none, &r, NULL, 0) ==
            FAIRSHM_REFUSED,
        "a's ask for 10 more is refused");
  pthread_t th;
  pthread_create(&th, NULL, act, arg);
  double start = now_ms();
  int rc = as_a ? fairshm_guaranteed_sleep_as(t, pool, a, 50, &cookie, timeout_ms, NULL, &woken)
                : fairshm_guaranteed_sleep(t, pool, seen, timeout_ms, NULL, &woken);
  double took = now_ms() - start;
  pthread_join(th, NULL);
  CHECK(rc == FAIRSHM_OK, "the sleep: rc %d", rc);
  /* Woken (1) by a release for it; else (0) at the timeout, with the cookie moved on
   * past the releases it slept through. */
  if (as_a && woken == 0) {
    uint32_t now = 0;
    fairshm_guaranteed_wake_seen(t, pool, &now);
    CHECK((uint32_t)cookie == now && now != seen, "the cookie moved on: %u -> %u (word %u)",
          seen, (uint32_t)cookie, now);
  }
  *last_woken = woken;
  return took;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: guaranteed_wait SEGMENT_NAME\n");
    return 2;
  }
  alarm(60);
  /* a and b share 100 evenly; loans may last 5 s, and quiet for 20 s is idle, so a's
   * own asks come every 10 s at most: only a wake or a cancel ends its wait sooner. */
  const char *config =
      "{\"guaranteed\": [{\"name\": \"tokens\", \"ceiling\": 100, \"fairness_unit\": "
      "\"cost\", \"reclaim_horizon_ms\": 5000, \"idle_after_ms\": 20000, "
      "\"tenants\": {\"a\": 1, \"b\": 1}}]}";
  fairshm_table *t = NULL;
  int rc = fairshm_open(argv[1], FAIRSHM_CREATE, config, FAIRSHM_CONFIG_JSON, 0, &t);
  if (rc != FAIRSHM_OK) {
    fprintf(stderr, "open: %d %s\n", rc, fairshm_last_error());
    return 1;
  }
  uint32_t pool, a, b;
  CHECK(fairshm_guaranteed_pool(t, "tokens", &pool) == FAIRSHM_OK, "pool");
  CHECK(fairshm_guaranteed_tenant(t, pool, "a", &a) == FAIRSHM_OK, "tenant a");
  CHECK(fairshm_guaranteed_tenant(t, pool, "b", &b) == FAIRSHM_OK, "tenant b");
  uint64_t own, loan, got = 0;
  fairshm_guaranteed_refusal r;
  char why[FAIRSHM_GUARANTEED_WHY_MAX];
  /* Bad handles: the error names the first bad argument, the pool before the tenant. */
  CHECK(fairshm_guaranteed_acquire(t, 9, 70000, 50, 50, FAIRSHM_NOW, &own, &r, NULL, 0) ==
                FAIRSHM_E_INVALID_REQUEST &&
            strstr(fairshm_last_error(), "guaranteed pool handle 9") != NULL,
        "a bad pool handle named before a bad tenant handle (%s)", fairshm_last_error());
  CHECK(fairshm_guaranteed_acquire(t, pool, 70000, 50, 50, FAIRSHM_NOW, &own, &r, NULL, 0) ==
                FAIRSHM_E_INVALID_REQUEST &&
            strstr(fairshm_last_error(), "tenant handle 70000") != NULL,
        "a bad tenant handle (%s)", fairshm_last_error());
  CHECK(fairshm_guaranteed_acquire(t, 9, a, 50, 50, FAIRSHM_NOW, NULL, &r, NULL, 0) ==
                FAIRSHM_E_INVALID_REQUEST &&
            strstr(fairshm_last_error(), "guaranteed pool handle 9") != NULL,
        "a bad pool handle named before a null lease pointer (%s)", fairshm_last_error());
  CHECK(fairshm_guaranteed_acquire(t, pool, b, 50, 60000, FAIRSHM_NOW, &own, &r, NULL, 0) ==
            FAIRSHM_OK,
        "b's own 50");
  CHECK(fairshm_guaranteed_acquire(t, pool, b, 50, 4000, FAIRSHM_NOW, &loan, &r, NULL, 0) ==
            FAIRSHM_OK,
        "b borrows a's 50 for 4 s");

  /* Served when the loan comes back, not at its retry-after of about 4 s. */
  struct later rel = {t, loan, NULL, 0};
  pthread_t th;
  pthread_create(&th, NULL, act_later, &rel);
  double start = now_ms();
  rc = fairshm_guaranteed_acquire_wait(t, pool, a, 50, 50, 10000, NULL, &got, &r, why,
                                       sizeof why);
  double back = now_ms();
  pthread_join(th, NULL);
  CHECK(rc == FAIRSHM_OK, "a is served: rc %d reason %u (%s)", rc, r.reason, why);
  CHECK(back >= rel.at && back - rel.at < 1000 && back - start < 2000,
        "served %.0f ms after the release", back - rel.at);

  /* Now the pool is full, and a asks beyond its guarantee: b lends nothing while it
   * holds. A cancel ends the 10 s wait with the last refusal. */
  struct later can = {t, 0, fairshm_cancel_new(), 0};
  pthread_create(&th, NULL, act_later, &can);
  uint64_t none = 77;
  memset(why, 0, sizeof why);
  start = now_ms();
  rc = fairshm_guaranteed_acquire_wait(t, pool, a, 10, 50, 10000, can.cancel, &none, &r, why,
                                       sizeof why);
  back = now_ms();
  pthread_join(th, NULL);
  CHECK(rc == FAIRSHM_REFUSED && r.reason == 9 && none == 77,
        "cancelled: rc %d reason %u", rc, r.reason);
  CHECK(back >= can.at && back - can.at < 1000, "ended %.0f ms after the cancel",
        back - can.at);
  CHECK(r.why_len == strlen(why) && strstr(why, "Tenant \"a\" asked for 10") != NULL,
        "the explanation: %s", why);
  CHECK(fairshm_cancel_fired(can.cancel), "the token says it fired");
  fairshm_cancel_free(can.cancel);

  /* The timeout ends it too, no earlier. */
  start = now_ms();
  rc = fairshm_guaranteed_acquire_wait(t, pool, a, 10, 50, 150, NULL, &none, &r, NULL, 0);
  back = now_ms();
  CHECK(rc == FAIRSHM_REFUSED && r.reason == 9, "timed out: rc %d reason %u", rc, r.reason);
  CHECK(back - start >= 149 && back - start < 2000, "waited %.0f ms of 150", back - start);

  /* A signal handler of the waiting thread ends the wait by firing its token. */
  CHECK(fire_on_sigusr1(fairshm_cancel_new()) == 0, "sigaction");
  struct signal_later later = {pthread_self(), 200};
  pthread_create(&th, NULL, signal_later, &later);
  start = now_ms();
  rc = fairshm_guaranteed_acquire_wait(t, pool, a, 10, 50, 10000, on_signal, &none, &r, NULL, 0);
  back = now_ms();
  pthread_join(th, NULL);
  CHECK(rc == FAIRSHM_REFUSED && r.reason == 9 && none == 77,
        "fired by a signal handler: rc %d reason %u", rc, r.reason);
  CHECK(back - start >= 150 && back - start < 5000,
        "ended %.0f ms after the ask (the signal at 200 ms)", back - start);
  signal(SIGUSR1, SIG_DFL);
  fairshm_cancel_free(on_signal);

  /* Bad arguments: typed errors that name them. */
  CHECK(fairshm_guaranteed_acquire_wait(t, pool, a, 10, 50, 0, NULL, NULL, &r, NULL, 0) ==
            FAIRSHM_E_INVALID_REQUEST,
        "a null lease pointer");
  CHECK(strstr(fairshm_last_error(), "lease") != NULL, "names it: %s", fairshm_last_error());
  CHECK(fairshm_guaranteed_acquire_wait(t, pool, 70000, 10, 50, 0, NULL, &none, &r, NULL, 0) ==
            FAIRSHM_E_INVALID_REQUEST,
        "a tenant handle out of range");
  CHECK(fairshm_guaranteed_acquire_wait(NULL, pool, a, 10, 50, 0, NULL, &none, &r, NULL, 0) !=
            FAIRSHM_OK,
        "a null table");
  CHECK(fairshm_guaranteed_acquire_wait(t, 9, a, 10, 50, 0, NULL, &none, &r, NULL, 0) ==
            FAIRSHM_E_INVALID_REQUEST,
        "a pool handle out of range");
  CHECK(strstr(fairshm_last_error(), "handle 9") != NULL, "names it: %s", fairshm_last_error());

  /* A sleep as a's waiter sleeps through a release of b's that gives a nothing (it
   * returns at its timeout, units having come back to the pool); a sleep that says
   * nobody is woken by it; and a's own release wakes a's waiter at once. */
  struct churn ch = {t, pool, b, &own, 0};
  double took = sleep_while(t, pool, a, 1, 800, churn_later, &ch);
  CHECK(took >= 790 && took < 2000 && *last_woken == 0,
        "slept %.0f ms of 800 through b's release (woken %u)", took, *last_woken);
  took = sleep_while(t, pool, a, 0, 800, churn_later, &ch);
  CHECK(took >= 150 && took < 700 && *last_woken == 1,
        "woken by b's release after %.0f ms (woken %u)", took, *last_woken);
  struct later mine = {t, got, NULL, 0};
  took = sleep_while(t, pool, a, 1, 5000, act_later, &mine);
  CHECK(took >= 150 && took < 1200 && *last_woken == 1,
        "woken by a's own release after %.0f ms (woken %u)", took, *last_woken);
  uint64_t cookie = 0;
  CHECK(fairshm_guaranteed_sleep_as(t, pool, 7, 50, &cookie, 0, NULL, NULL) ==
            FAIRSHM_E_INVALID_REQUEST,
        "a tenant handle out of range");
  CHECK(strstr(fairshm_last_error(), "tenant handle 7") != NULL, "names it: %s",
        fairshm_last_error());
  CHECK(fairshm_guaranteed_wake_seen_as(t, pool, 7, &cookie) == FAIRSHM_E_INVALID_REQUEST,
        "a tenant handle out of range, before the ask");
  CHECK(fairshm_guaranteed_sleep_as(t, pool, a, 50, NULL, 0, NULL, NULL) ==
            FAIRSHM_E_INVALID_REQUEST,
        "a null cookie");
  /* The end of a wait owes nothing here (its asks came after its wakes); a pool handle
   * out of range and a null table are errors. */
  CHECK(fairshm_guaranteed_wait_end(t, pool) == FAIRSHM_OK, "a wait's end: %s",
        fairshm_last_error());
  CHECK(fairshm_guaranteed_wait_end(t, 9) == FAIRSHM_E_INVALID_REQUEST, "pool handle 9");
  CHECK(fairshm_guaranteed_wait_end(NULL, pool) != FAIRSHM_OK, "a null table");
  CHECK(fairshm_guaranteed_acquire(t, pool, a, 50, 50, FAIRSHM_NOW, &got, &r, NULL, 0) ==
            FAIRSHM_OK,
        "a's 50 again");

  CHECK(fairshm_guaranteed_release(t, got, FAIRSHM_NOW) == FAIRSHM_OK, "a's release");
  CHECK(fairshm_guaranteed_release(t, own, FAIRSHM_NOW) == FAIRSHM_OK, "b's release");
  fairshm_close(t);
  if (failures) fprintf(stderr, "%d checks failed\n", failures);
  return failures ? 1 : 0;
}
