/* fairshm's C ABI, used as a C program would: a table created from JSON, workers
 * forked after the open, each acquiring and releasing while a shared counter checks
 * that no more than the pool's capacity are ever held at once; then the errors, an
 * explanation, statistics and a blocking acquire cancelled from another thread and
 * from a signal handler.
 *
 * Usage: pool_bound SEGMENT_NAME. Exit 0 when every check holds; each failure is
 * printed. Every wait has a deadline (alarm). */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "fairshm.h"
#include "on_signal.h"

#define CAPACITY 3
#define WORKERS 6
#define ROUNDS 2000

static int failures = 0;

struct shared {
  int holding;     /* permits held right now, by all workers */
  int most;        /* the most ever held at once */
  long grants;
  long refusals;
};

static int worker(fairshm_table *t, struct shared *sh, const char *tenant_name) {
  uint32_t pool, tenant;
  if (fairshm_pool(t, "requests", &pool) != FAIRSHM_OK) return 10;
  if (fairshm_tenant(t, tenant_name, &tenant) != FAIRSHM_OK) return 11;
  for (int i = 0; i < ROUNDS; i++) {
    uint64_t lease = 0;
    fairshm_refusal r;
    int rc = fairshm_try_acquire(t, pool, tenant, 1, 1, &lease, &r);
    if (rc == FAIRSHM_OK) {
      int now = __atomic_add_fetch(&sh->holding, 1, __ATOMIC_SEQ_CST);
      int most = __atomic_load_n(&sh->most, __ATOMIC_SEQ_CST);
      while (now > most &&
             !__atomic_compare_exchange_n(&sh->most, &most, now, 0, __ATOMIC_SEQ_CST,
                                          __ATOMIC_SEQ_CST)) {
      }
      __atomic_add_fetch(&sh->grants, 1, __ATOMIC_SEQ_CST);
      struct timespec ts = {0, 20000};
      nanosleep(&ts, NULL);
      __atomic_sub_fetch(&sh->holding, 1, __ATOMIC_SEQ_CST);
      if (fairshm_release(t, lease) != FAIRSHM_OK) return 12;
    } else if (rc == FAIRSHM_REFUSED) {
      if (r.retry_after_ms < 1 || (r.reason != 1 && r.reason != 2)) return 13;
      __atomic_add_fetch(&sh->refusals, 1, __ATOMIC_SEQ_CST);
    } else {
      fprintf(stderr, "worker: %s\n", fairshm_last_error());
      return 14;
    }
  }
  return 0;
}

struct waiter {
  fairshm_table *t;
  fairshm_cancel *cancel;
  uint32_t pool, tenant;
  int rc;
  fairshm_refusal r;
  double started; /* ms of CLOCK_MONOTONIC, just before the call (blocked_briefly) */
};

static void *blocked(void *arg) {
  struct waiter *w = arg;
  uint64_t lease;
  w->rc = fairshm_acquire(w->t, w->pool, w->tenant, 1, 0, 20000, 0, w->cancel, &lease, &w->r);
  return NULL;
}

static int about_to_wait;


static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* As `blocked`, for 400 ms, saying first that it is about to wait and when. */
static void *blocked_briefly(void *arg) {
  struct waiter *w = arg;
  uint64_t lease;
  w->started = now_ms();
  __atomic_store_n(&about_to_wait, 1, __ATOMIC_SEQ_CST);
  w->rc = fairshm_acquire(w->t, w->pool, w->tenant, 1, 0, 400, 0, NULL, &lease, &w->r);
  return NULL;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: pool_bound SEGMENT_NAME\n");
    return 2;
  }
  const char *name = argv[1];
  alarm(60);
  char config[256];
  snprintf(config, sizeof config,
           "{\"pools\": [{\"name\": \"requests\", \"capacity\": %d}]}", CAPACITY);
  fairshm_table *t = NULL;
  int rc = fairshm_open(name, FAIRSHM_CREATE, config, FAIRSHM_CONFIG_JSON, 0, &t);
  if (rc != FAIRSHM_OK) {
    fprintf(stderr, "open: %d %s\n", rc, fairshm_last_error());
    return 1;
  }

  /* Bad input: typed errors naming what was wrong. */
  CHECK(fairshm_open(NULL, FAIRSHM_OPEN, NULL, 0, 0, &t) == FAIRSHM_E_INVALID_REQUEST,
        "null name");
  CHECK(strstr(fairshm_last_error(), "name") != NULL, "the error names the argument: %s",
        fairshm_last_error());
  fairshm_table *bad = NULL;
  CHECK(fairshm_open(name, FAIRSHM_CREATE, "{\"pools\": []}", FAIRSHM_CONFIG_JSON, 0, &bad) ==
            FAIRSHM_E_INVALID_CONFIG,
        "an empty pool list is an invalid config (%s)", fairshm_last_error());
  CHECK(fairshm_open(name, FAIRSHM_CREATE, config, FAIRSHM_CONFIG_JSON, 0, &bad) ==
            FAIRSHM_E_ALREADY_EXISTS,
        "creating twice");
  uint32_t pool = 99, tenant = 99;
  CHECK(fairshm_pool(t, "nope", &pool) == FAIRSHM_E_UNKNOWN_POOL, "unknown pool");
  CHECK(strcmp(fairshm_code_name(FAIRSHM_E_UNKNOWN_POOL), "unknown_pool") == 0, "code name");
  /* A name that is not UTF-8 is a bad name of its kind, as the bindings refuse it. */
  CHECK(fairshm_pool(t, "requests\xff", &pool) == FAIRSHM_E_UNKNOWN_POOL, "pool not UTF-8");
  CHECK(fairshm_tenant(t, "caf\xe9", &tenant) == FAIRSHM_E_INVALID_TENANT && tenant == 99,
        "tenant not UTF-8 (%s)", fairshm_last_error());
  CHECK(strstr(fairshm_last_error(), "not UTF-8") != NULL, "says so: %s", fairshm_last_error());
  CHECK(fairshm_guaranteed_pool(t, "g\xff", &pool) == FAIRSHM_E_UNKNOWN_POOL,
        "guaranteed pool not UTF-8");
  CHECK(fairshm_open("seg\xff", FAIRSHM_OPEN, NULL, 0, 0, &bad) == FAIRSHM_E_INVALID_NAME,
        "segment name not UTF-8 (%s)", fairshm_last_error());
  CHECK(fairshm_unlink("seg\xff") == FAIRSHM_E_INVALID_NAME, "unlink of a name not UTF-8");
  CHECK(fairshm_pool(t, "requests", &pool) == FAIRSHM_OK && pool == 0, "pool handle");
  /* A request checked against the config, claiming nothing: what a binding asks before
     a new tenant name claims its slot. */
  CHECK(fairshm_check_units(t, pool, 1) == FAIRSHM_OK, "one unit can be granted");
  CHECK(fairshm_check_units(t, pool, CAPACITY) == FAIRSHM_OK, "the whole pool can be granted");
  CHECK(fairshm_check_units(t, pool, CAPACITY + 1) == FAIRSHM_E_UNITS_EXCEED_CAPACITY,
        "more than the pool holds (%s)", fairshm_last_error());
  CHECK(fairshm_check_units(t, pool, 0) == FAIRSHM_E_INVALID_REQUEST, "no units");
  CHECK(fairshm_check_units(t, 7, 1) == FAIRSHM_E_INVALID_REQUEST &&
            strstr(fairshm_last_error(), "pool handle 7") != NULL,
        "a pool handle of no pool (%s)", fairshm_last_error());
  CHECK(fairshm_check_units(NULL, pool, 1) == FAIRSHM_E_INVALID_REQUEST, "a null table");
  /* Looked up without a claim: absent before its first use, then the same handle. */
  uint32_t found = 77;
  CHECK(fairshm_find_tenant(t, "acme", &found) == FAIRSHM_ABSENT && found == 77,
        "no tenant acme yet, nothing written");
  CHECK(fairshm_find_tenant(t, "", &found) == FAIRSHM_E_INVALID_TENANT, "an empty name");
  CHECK(fairshm_tenant(t, "acme", &tenant) == FAIRSHM_OK, "tenant handle");
  CHECK(fairshm_find_tenant(t, "acme", &found) == FAIRSHM_OK && found == tenant,
        "found once claimed");
  uint64_t lease;
  CHECK(fairshm_try_acquire(t, 7, tenant, 1, 0, &lease, NULL) == FAIRSHM_E_INVALID_REQUEST,
        "a pool handle of no pool");
  CHECK(fairshm_try_acquire(t, pool, 4000, 1, 0, &lease, NULL) == FAIRSHM_E_INVALID_REQUEST,
        "a tenant handle of no tenant");
  /* Both handles bad: the error names the first argument that is, the pool. */
  CHECK(fairshm_try_acquire(t, 7, 4000, 1, 0, &lease, NULL) == FAIRSHM_E_INVALID_REQUEST &&
            strstr(fairshm_last_error(), "pool handle 7") != NULL,
        "a bad pool handle named before a bad tenant handle (%s)", fairshm_last_error());
  CHECK(fairshm_acquire(t, 7, 4000, 1, 0, 10, 0, NULL, &lease, NULL) ==
                FAIRSHM_E_INVALID_REQUEST &&
            strstr(fairshm_last_error(), "pool handle 7") != NULL,
        "a blocking acquire names the bad pool handle first (%s)", fairshm_last_error());
  CHECK(fairshm_acquire(t, 7, tenant, 1, 0, 10, 0, NULL, &lease, NULL) ==
            FAIRSHM_E_INVALID_REQUEST,
        "a blocking acquire with a pool handle of no pool");
  CHECK(fairshm_acquire(t, pool, tenant, 1, 0, 10, 8, NULL, &lease, NULL) ==
            FAIRSHM_E_INVALID_REQUEST,
        "a flag no FAIRSHM_WAIT_ name has");
  CHECK(fairshm_acquire(t, pool, tenant, 1, 0, 10,
                        FAIRSHM_WAIT_SLICE | FAIRSHM_WAIT_CONTINUED | FAIRSHM_WAIT_RATED, NULL,
                        &lease, NULL) == FAIRSHM_OK &&
            fairshm_release(t, lease) == FAIRSHM_OK,
        "a continued slice that passed its rates, with room");
  CHECK(fairshm_acquire(t, pool, tenant, 1, 0, 10, FAIRSHM_WAIT_SLICE | FAIRSHM_WAIT_CONTINUED,
                        NULL, &lease, NULL) == FAIRSHM_OK &&
            fairshm_release(t, lease) == FAIRSHM_OK,
        "a continued slice with room");
  CHECK(fairshm_try_acquire(t, pool, tenant, 1, 0, NULL, NULL) == FAIRSHM_E_INVALID_REQUEST,
        "a null lease pointer");
  CHECK(fairshm_try_acquire(NULL, pool, tenant, 1, 0, &lease, NULL) ==
            FAIRSHM_E_INVALID_REQUEST,
        "a null table");
  CHECK(fairshm_try_acquire(t, pool, tenant, 4, 0, &lease, NULL) ==
            FAIRSHM_E_UNITS_EXCEED_CAPACITY,
        "more units than the pool has");

  /* A refusal, explained into a buffer; a lease released twice. */
  uint64_t held[CAPACITY];
  for (int i = 0; i < CAPACITY; i++)
    CHECK(fairshm_try_acquire(t, pool, tenant, 1, 50, &held[i], NULL) == FAIRSHM_OK, "grant %d", i);
  fairshm_refusal r;
  memset(&r, 0, sizeof r);
  CHECK(fairshm_try_acquire(t, pool, tenant, 1, 50, &lease, &r) == FAIRSHM_REFUSED, "full");
  /* Alone, it holds its whole share (the pool): refused over_share. */
  CHECK(r.reason == 2 && r.rule == 2 && r.held == CAPACITY && r.in_use == CAPACITY && r.capacity == CAPACITY && r.retry_after_ms >= 1,
        "refusal facts: reason %u in_use %u", r.reason, r.in_use);
  CHECK(fairshm_share(&r) == (double)CAPACITY, "alone, its share is the pool: %f",
        fairshm_share(&r));
  char small[16];
  int64_t need = fairshm_explain(t, &r, small, sizeof small);
  CHECK(need > (int64_t)sizeof small && strlen(small) == sizeof small - 1, "explanation cut");
  char *text = malloc(need + 1);
  CHECK(fairshm_explain(t, &r, text, need + 1) == need, "explanation length");
  CHECK(strstr(text, "\"acme\"") && strstr(text, "\"requests\""), "explanation names: %s", text);
  /* A refusal that is not one (a reason no refusal has) is an error, and leaves the
   * buffer empty rather than holding the last explanation. */
  fairshm_refusal junk = r;
  junk.reason = 77;
  CHECK(fairshm_explain(t, &junk, text, need + 1) == FAIRSHM_E_INVALID_REQUEST && text[0] == 0,
        "a junk refusal: %s", fairshm_last_error());
  free(text);
  for (int i = 0; i < CAPACITY; i++) CHECK(fairshm_release(t, held[i]) == FAIRSHM_OK, "release");
  CHECK(fairshm_release(t, held[0]) == FAIRSHM_E_ALREADY_RELEASED, "released twice: %s",
        fairshm_last_error());

  /* Rates: one request a second for "slow", then refused before any pool; work debt. */
  uint32_t slow = 0, rq = 9, wk = 9;
  CHECK(fairshm_tenant(t, "slow", &slow) == FAIRSHM_OK, "tenant slow");
  CHECK(fairshm_set_rates(t, slow, 1, 0) == FAIRSHM_OK, "set rates");
  CHECK(fairshm_rates(t, slow, &rq, &wk) == FAIRSHM_OK && rq == 1 && wk == 0, "rates %u %u", rq, wk);
  CHECK(fairshm_try_acquire(t, pool, slow, 1, 0, &lease, NULL) == FAIRSHM_OK, "first token");
  CHECK(fairshm_release(t, lease) == FAIRSHM_OK, "release");
  CHECK(fairshm_try_acquire(t, pool, slow, 1, 0, &lease, &r) == FAIRSHM_REFUSED && r.reason == 5 &&
            r.in_use == 0 && r.retry_after_ms >= 900 && r.retry_after_ms <= 1000 && r.rate_per_s == 1,
        "rate_limited: reason %u retry %llu rate %u", r.reason, (unsigned long long)r.retry_after_ms,
        r.rate_per_s);
  CHECK(strcmp(fairshm_code_name(5), "rate_limited") == 0, "reason name");
  char rate_text[512];
  CHECK(fairshm_explain(t, &r, rate_text, sizeof rate_text) > 0 &&
            strstr(rate_text, "request rate of 1 per second"),
        "rate explanation: %s", rate_text);
  uint64_t debt = 0;
  CHECK(fairshm_set_rates(t, slow, 0, 100) == FAIRSHM_OK, "work rate");
  CHECK(fairshm_charge(t, slow, 300, FAIRSHM_NOW, &debt) == FAIRSHM_OK && debt >= 1900 && debt <= 2000,
        "debt %llu", (unsigned long long)debt);
  CHECK(fairshm_try_acquire(t, pool, slow, 1, 0, &lease, &r) == FAIRSHM_REFUSED && r.reason == 6 &&
            r.rate_per_s == 100,
        "work_debt: reason %u rate %u", r.reason, r.rate_per_s);
  CHECK(fairshm_set_rates(t, 4000, 1, 1) == FAIRSHM_E_INVALID_REQUEST, "bad tenant handle");

  /* A blocking acquire cancelled from another thread. */
  for (int i = 0; i < CAPACITY; i++) fairshm_try_acquire(t, pool, tenant, 1, 0, &held[i], NULL);
  struct waiter w = {t, fairshm_cancel_new(), pool, tenant, -1000, {0}, 0};
  CHECK(!fairshm_cancel_fired(w.cancel) && !fairshm_cancel_fired(NULL), "a new token is not fired");
  pthread_t th;
  pthread_create(&th, NULL, blocked, &w);
  struct timespec ts = {0, 100 * 1000 * 1000};
  nanosleep(&ts, NULL);
  fairshm_cancel_fire(w.cancel);
  pthread_join(th, NULL);
  CHECK(w.rc == FAIRSHM_REFUSED && w.r.reason == 4 && w.r.waited_ms >= 50,
        "cancelled: rc %d reason %u waited %llu", w.rc, w.r.reason,
        (unsigned long long)w.r.waited_ms);
  CHECK(fairshm_cancel_fired(w.cancel), "a fired token says so");
  fairshm_cancel_reset(w.cancel);
  CHECK(!fairshm_cancel_fired(w.cancel), "a reset token is not fired");
  fairshm_cancel_free(w.cancel);
  for (int i = 0; i < CAPACITY; i++) fairshm_release(t, held[i]);

  /* A signal handler ends a blocking acquire of its own thread by firing the token it
   * waits with: how a C server's SIGTERM stops a worker waiting for a permit. The pool
   * is full (this thread holds all of it), so only the token can end the wait. */
  uint64_t whole = 0;
  CHECK(fairshm_try_acquire(t, pool, tenant, CAPACITY, 0, &whole, NULL) == FAIRSHM_OK,
        "the whole pool");
  CHECK(fire_on_sigusr1(fairshm_cancel_new()) == 0, "sigaction");
  struct signal_later later = {pthread_self(), 150};
  pthread_create(&th, NULL, signal_later, &later);
  fairshm_refusal sr;
  uint64_t never = 0;
  double asked = now_ms();
  int src = fairshm_acquire(t, pool, tenant, 1, 0, 20000, 0, on_signal, &never, &sr);
  double back = now_ms() - asked;
  pthread_join(th, NULL);
  CHECK(src == FAIRSHM_REFUSED && sr.reason == 4, "fired by a signal handler: rc %d reason %u",
        src, sr.reason);
  CHECK(back >= 100 && back < 5000, "ended %.0f ms after the ask (the signal at 150 ms)", back);
  signal(SIGUSR1, SIG_DFL);
  fairshm_cancel_free(on_signal);
  CHECK(fairshm_release(t, whole) == FAIRSHM_OK, "release the whole pool");

  /* Workers forked after the open share the pool; it is never exceeded. */
  struct shared *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                           -1, 0);
  memset(sh, 0, sizeof *sh);
  pid_t kids[WORKERS];
  for (int i = 0; i < WORKERS; i++) {
    kids[i] = fork();
    if (kids[i] == 0) {
      alarm(30);
      _exit(worker(t, sh, i % 2 ? "acme" : "globex"));
    }
  }
  for (int i = 0; i < WORKERS; i++) {
    int status = 0;
    waitpid(kids[i], &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "worker %d status %#x", i, status);
  }
  CHECK(sh->most <= CAPACITY && sh->most >= 1, "most held at once %d, capacity %d", sh->most,
        CAPACITY);
  CHECK(sh->grants > 0, "grants %ld", sh->grants);
  printf("workers %d, grants %ld, refusals %ld, most held at once %d (capacity %d)\n", WORKERS,
         sh->grants, sh->refusals, sh->most, CAPACITY);

  char *stats = fairshm_stats_json(t);
  CHECK(stats && strstr(stats, "\"pools\""), "stats JSON");
  CHECK(stats && strstr(stats, "\"in_use\":0"), "nothing held at the end: %.200s", stats);
  fairshm_string_free(stats);

  /* A close while another thread waits in an acquire on the table: the close waits for
     that call to return (its 400 ms timeout) instead of unmapping under it; later calls
     and a second close are refused or ignored, not undefined. */
  for (int i = 0; i < CAPACITY; i++) fairshm_try_acquire(t, pool, tenant, 1, 0, &held[i], NULL);
  struct waiter c = {t, NULL, pool, tenant, -1000, {0}, 0};
  pthread_create(&th, NULL, blocked_briefly, &c);
  struct timespec poll = {0, 1000 * 1000};
  while (!__atomic_load_n(&about_to_wait, __ATOMIC_SEQ_CST)) nanosleep(&poll, NULL);
  struct timespec settle = {0, 100 * 1000 * 1000};
  nanosleep(&settle, NULL);
  double began = now_ms();
  fairshm_close(t);
  double ended = now_ms();
  pthread_join(th, NULL);
  if (c.rc == FAIRSHM_REFUSED) {
    /* The waiter's call timed out, so it returned at least 400 ms after it began: a
       close that waited for it ended no earlier (whatever the host's delays before the
       close began, which a fixed lower bound on the close's own time would count). */
    CHECK(c.r.reason == 3 && ended >= c.started + 400, "the close waited for the waiter's "
          "call: reason %u, close ended %.1f ms after the call began, took %.0f ms",
          c.r.reason, ended - c.started, ended - began);
  } else {
    /* Only on a host so loaded that the waiter entered after the close began. */
    CHECK(c.rc == FAIRSHM_E_INVALID_REQUEST, "the waiter, come late: rc %d", c.rc);
    printf("the waiter came after the close began (rc %d): its wait was not checked\n", c.rc);
  }
  CHECK(fairshm_try_acquire(t, pool, tenant, 1, 0, &lease, NULL) == FAIRSHM_E_INVALID_REQUEST &&
            strstr(fairshm_last_error(), "closed") != NULL,
        "a call after the close is refused: %s", fairshm_last_error());
  fairshm_close(t); /* a second close does nothing */
  CHECK(fairshm_unlink(name) == FAIRSHM_OK, "unlink");
  if (failures) fprintf(stderr, "%d checks failed\n", failures);
  return failures ? 1 : 0;
}
