"""End-to-end fairness under real pre-fork servers: gunicorn (sync workers, WSGI
middleware) and Puma in cluster mode (Rack middleware), both from Debian's packages,
each opening the table in the master before fork (--preload).

Two tenants: a heavy one with many connections and a light one with two, each request
5 ms of work, pool = the server's concurrency, its floor the light tenant's two
permits (on pools this small the library's default floor, 5% at least 1, is one permit:
the `polite-f1` phase runs with it). Puma runs with `e2e/puma.rb` (`queue_requests
false`: a worker accepts only what a thread of it can serve now), limiter or not.
The load client is `loadgen` (see examples/loadgen/): `polite` connections wait the
Retry-After they are given, `eager` ones retry at once (as wrk or hey), `fifo` ones
pause their whole tenant for it and keep its requests in one queue. Per server,
the phases are:

  solo       light alone (its p99 alone), limiter on
  fifo       heavy + light, clients that honour Retry-After as a pause of the whole
             tenant, with one first-in-first-out queue per tenant (loadgen's `fifo`);
             before `polite`, whose retries leave the server's queue stretch raised
  polite     heavy + light, clients that honour Retry-After, each connection its own
  eager      heavy + light, clients that retry at once
  heavy      heavy alone (it must get the whole pool)
  polite-f1  as polite, on a table with the default floor (a server of its own)
  nolimit    heavy + light with no limiter (the baseline)

Prints per phase and tenant: requests, 200s, 429s, p50 and p99, the mean hint, the
share of requests served at the first attempt and the p99 of attempts per request,
the p50 and p99 of an attempt's wait in the server's queue (from its send to the app,
before any middleware: see `X-Entered-Ns` in the apps), the light tenant's p99 next to
its p99 alone, and how often the heavy tenant held each
number of permits, and where the heavy tenant's mean latency went (by Little's law:
the share of its requests served at their first attempt, and what the others averaged);
then each target, PASS or not. With --check it exits
non-zero when an enforced one is missed:
  - polite and polite-f1: the heavy tenant gets 429s; the light tenant's p99 ratio is
    under its ratio with eager clients and without a limiter (a guard that the hints
    work; the target is 1.5), and in the polite phase at most 2.5, under every server;
  - heavy alone: the pool's in-use reaches its capacity; nothing is held at the end;
  - polite and polite-f1, where the heavy tenant's mean hint is 100 ms or more: in no
    10 ms do more of its retries fall due than the largest of a quarter of its
    connections, 8 times its average per 10 ms and its turnover (the most of its
    requests served within any 10 ms); a retry is due at its 429's answer plus the
    hint. So the hints are spread over its turns, not piled on one instant (read from
    loadgen's LOADGEN_TRACE, which also gives when they were sent, printed);
  - fifo (the client issue 9 describes: it waits a hint "before that tenant's next
    request"), issue 14's three targets: the light p99 ratio <= 1.5; the heavy tenant
    keeps >= 90% of the throughput its share allows, and its p99 is within 2x of the
    ideal queueing delay (connections x hold / permits).
When only the timed guards (the light tenant's, the retry bursts and fifo's targets)
fail, the server is measured once more, whole, and the last measurement is judged;
every one is printed (and in --json). Each phase's steal is printed too: the CPU time
the hypervisor took while the phase ran (/proc/stat). A third is taken when every timed
guard the second measurement failed comes from a phase with 3% or more of it, or when
no timed guard failed in both (a regression fails the same guard every time). Every
measurement beyond a server's first must fit in the run's budget (`--budget`, 600 s).
When the last one's failed guards all come from such phases, they are reported as
SKIP, not judged: on a host that stops the servers' CPUs, their latencies are the
host's.
Reported, not enforced (see the README): issue 14's targets with polite clients, whose
heavy p99 seed 000's rule puts out of reach.

    python e2e/run.py [--servers gunicorn,puma-4x1,puma-2x2,puma-4x4] [--seconds 10] [--check]
"""

import argparse
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import fairshm
from harness import free_port, stop_session
from hoststat import cpu_ticks, steal_pct

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
WORK_MS = 5
HEAVY = 64
LIGHT = 2

# The phases of a measurement, in the order they are printed.
PHASES = ("solo", "polite", "fifo", "eager", "heavy", "polite-f1", "nolimit-solo", "nolimit")
# A phase during which the hypervisor took this much of the machine's CPU time (steal,
# /proc/stat) or more: a timed guard it failed may be the host's (see `main`).
STEAL_LIMIT_PCT = 3.0
# Measurements of one server at most.
MAX_MEASUREMENTS = 3
# A measurement beyond a server's first is taken only if it and the first of every
# server still to come fit in this many seconds of the end-to-end run (each predicted
# to take as long as the one just made): CI's 30 minutes hold about 15 before this step
# on the slowest host of the class (878 s, 2026-12-03) and under 2 after it.
BUDGET_S = 600

SERVERS = {
    # name: (workers, threads per worker)
    "gunicorn": (4, 1),
    "puma-4x1": (4, 1),
    "puma-2x2": (2, 2),
    "puma-4x4": (4, 4),
}


def pool_of(kind):
    """The pool of server `kind`: its concurrency."""
    workers, threads = SERVERS[kind]
    return workers * threads


def light_floor_percent(pool):
    """The floor_percent that gives a pool of `pool` a floor of LIGHT permits."""
    return -(-LIGHT * 100 // pool)


class Server:
    def __init__(self, kind, segment, log_dir, floor_percent=None, tag=""):
        workers, threads = SERVERS[kind]
        self.pool = pool_of(kind)
        self.port = free_port()
        env = dict(os.environ, E2E_WORK_MS=str(WORK_MS), E2E_POOL=str(self.pool))
        env.pop("E2E_FLOOR_PERCENT", None)
        if floor_percent is not None:
            env["E2E_FLOOR_PERCENT"] = str(floor_percent)
        if segment:
            env["FAIRSHM_E2E_SEGMENT"] = segment
        else:
            env.pop("FAIRSHM_E2E_SEGMENT", None)
        addr = "127.0.0.1:%d" % self.port
        if kind == "gunicorn":
            cmd = [sys.executable, "-m", "gunicorn", "--workers", str(workers), "--preload",
                   "--bind", addr, "--backlog", "2048", "--log-level", "warning",
                   "--chdir", str(HERE), "wsgi_app:app"]
        else:
            cmd = ["puma", "--workers", str(workers), "--threads", "%d:%d" % (threads, threads),
                   "--preload", "--bind", "tcp://" + addr, "--environment", "production",
                   "--quiet", "--config", str(HERE / "puma.rb"), str(HERE / "config.ru")]
        name = "%s-%s%s.log" % (kind, "fairshm" if segment else "nolimit", tag)
        self.log = open(log_dir / name, "w")
        self.proc = subprocess.Popen(cmd, env=env, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        self.addr = addr
        self._wait_ready()

    def _wait_ready(self):
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("server exited with %s; see %s" % (self.proc.returncode, self.log.name))
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                    s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                    if s.recv(64).startswith(b"HTTP/1.1 200"):
                        time.sleep(1.0)  # every worker up
                        return
            except OSError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError("server did not answer in 60 s")

    def stop(self):
        stop_session(self.proc)
        self.log.close()


class Sampler(threading.Thread):
    """Reads the table as an observer every 10 ms (lightly: it shares the 2 cores with the
    servers): the most in use, and how often
    the heavy tenant held each number of permits, and the stretch the server's queue
    put on over-share turns (see `Table.note_queue`)."""

    def __init__(self, segment):
        super().__init__(daemon=True)
        self.table = fairshm.Table.observer(segment)
        self.stop_flag = threading.Event()
        self.max_in_use = 0
        self.heavy_held = {}
        self.stretch = []

    def run(self):
        while not self.stop_flag.is_set():
            pool = self.table.stats()["pools"][0]
            self.max_in_use = max(self.max_in_use, pool["in_use"])
            self.stretch.append(pool["queue_stretch_pct"])
            held = sum(t["held"] for t in pool["tenants"] if t["name"] == "heavy")
            self.heavy_held[held] = self.heavy_held.get(held, 0) + 1
            time.sleep(0.01)

    def finish(self):
        self.stop_flag.set()
        self.join()
        self.table.close()
        return self.max_in_use


BURST_MS = 10


def retry_bursts(trace):
    """Per tenant, (the most retries due within any BURST_MS, the most sent within any
    BURST_MS, all its retries, the most of its requests served (200s answered) within any
    BURST_MS), from loadgen's trace (`LOADGEN_TRACE`: TENANT TRY STATUS
    SENT_US LATENCY_US HINT_MS QUEUE_US ANSWERED_US). A retry (an attempt after a 429) is
    sent at SENT_US; it was due at its 429's ANSWERED_US plus the hint, which is what the
    library decided: a client thread the host stalls sends several at once when it
    wakes, however spread their hints were (seen under Puma 4x4 on a 2-vCPU host: 22 and
    24 sent within 10 ms with every phase's steal under 1%). Hints spread over a
    tenant's turns keep the most near the average; hints that all point at one instant
    send the tenant's waiting clients back together, and another tenant's request then
    queues in the server behind all of them."""
    sent, due, served, last = {}, {}, {}, {}
    for line in trace.splitlines():
        f = line.split()
        if len(f) != 8 or not f[1].isdigit():
            continue
        tenant, at = f[0], int(f[3])
        last[tenant] = max(last.get(tenant, 0), at)
        if int(f[1]) > 1:
            sent.setdefault(tenant, []).append(at)
        if f[2] == "429":
            due.setdefault(tenant, []).append(int(f[7]) + 1000 * int(f[5]))
        elif f[2] == "200":
            served.setdefault(tenant, []).append(int(f[7]))
    def most(times):
        times.sort()
        lo, best = 0, 0
        for hi, t in enumerate(times):
            while t - times[lo] >= BURST_MS * 1000:
                lo += 1
            best = max(best, hi - lo + 1)
        return best
    # A 429 whose retry fell due after the tenant's last attempt was never retried.
    return {t: (most([d for d in due.get(t, []) if d <= last[t]]), most(times), len(times),
                most(served.get(t, [])))
            for t, times in sent.items()}


def retries_per_burst(d, seconds):
    """A tenant's average retries per BURST_MS over a phase of `seconds`."""
    return d["retries"] * BURST_MS / 1000.0 / seconds


def load(loadgen, addr, seconds, specs, trace=False):
    env = dict(os.environ)
    env.pop("LOADGEN_TRACE", None)
    if trace:
        env["LOADGEN_TRACE"] = "1"
    ticks0 = cpu_ticks()
    out = subprocess.run([str(loadgen), addr, str(seconds)] + specs, capture_output=True, text=True,
                         timeout=seconds + 120, env=env)
    ticks1 = cpu_ticks()
    if out.returncode != 0:
        raise RuntimeError("loadgen failed: %s" % out.stderr[-2000:])
    res = {d["tenant"]: d for d in map(json.loads, out.stdout.split("\n")[:-1])}
    for d in res.values():
        d["steal_pct"] = steal_pct(ticks0, ticks1)
    if trace:
        bursts = retry_bursts(out.stderr)
        for tenant, d in res.items():
            (d["retry_burst"], d["retry_burst_sent"], d["retries"],
             d["served_burst"]) = bursts.get(tenant, (0, 0, 0, 0))
    return res


def pool_stats(segment):
    """The segment's pool as an observer reads it (its `in_use`, its `floor`, ...)."""
    stats = fairshm.Table.observer(segment)
    try:
        return stats.stats()["pools"][0]
    finally:
        stats.close()


def drop_segment(segment):
    try:
        fairshm.Table.unlink(segment)
    except fairshm.NotFound:
        pass


def two_tenant_phase(loadgen, addr, seconds, segment, mode="polite"):
    """The heavy and the light tenant at once, both with `mode` clients, traced (for the
    burst guard) and sampled (the permits the heavy tenant holds, the queue stretch)."""
    sampler = Sampler(segment)
    sampler.start()
    res = load(loadgen, addr, seconds, ["heavy:%d:%s" % (HEAVY, mode), "light:%d:%s" % (LIGHT, mode)],
               trace=True)
    sampler.finish()
    res["heavy"]["held_samples"] = sampler.heavy_held
    res["heavy"]["stretch_samples"] = sampler.stretch
    return res


def run_server(kind, seconds, loadgen, log_dir):
    segment = "fairshm-e2e-%s-%d" % (kind, os.getpid())
    results = {}
    pool = pool_of(kind)
    srv = Server(kind, segment, log_dir, light_floor_percent(pool))
    try:
        results["solo"] = load(loadgen, srv.addr, seconds, ["light:%d:polite" % LIGHT])
        time.sleep(2)  # the activity window forgets the tenant
        results["fifo"] = two_tenant_phase(loadgen, srv.addr, seconds, segment, "fifo")
        time.sleep(2)
        results["polite"] = two_tenant_phase(loadgen, srv.addr, seconds, segment)
        time.sleep(2)
        results["eager"] = load(loadgen, srv.addr, seconds,
                                ["heavy:%d:eager" % HEAVY, "light:%d:eager" % LIGHT])
        time.sleep(2)
        sampler = Sampler(segment)
        sampler.start()
        results["heavy"] = load(loadgen, srv.addr, seconds, ["heavy:%d:polite" % HEAVY])
        results["heavy"]["heavy"]["max_in_use"] = sampler.finish()
        end = pool_stats(segment)
        leftover, floors = end["in_use"], {"polite": end["floor"]}
    finally:
        srv.stop()
        drop_segment(segment)
    srv = Server(kind, segment, log_dir, None, "-f1")
    try:
        results["polite-f1"] = two_tenant_phase(loadgen, srv.addr, seconds, segment)
        end = pool_stats(segment)
        leftover += end["in_use"]
        floors["polite-f1"] = end["floor"]
    finally:
        srv.stop()
        drop_segment(segment)
    srv = Server(kind, None, log_dir)
    try:
        results["nolimit-solo"] = load(loadgen, srv.addr, seconds, ["light:%d:eager" % LIGHT])
        time.sleep(1)
        results["nolimit"] = load(loadgen, srv.addr, seconds,
                                  ["heavy:%d:eager" % HEAVY, "light:%d:eager" % LIGHT])
    finally:
        srv.stop()
    return pool, results, leftover, floors


def heavy_share(d, seconds, pool, floor, per_permit):
    """The permits the rule lets the heavy tenant hold beside the light one in phase
    results `d`, and its ideal queueing delay (ms): HEAVY x hold / those permits.

    Seed 000: at or past its share (POOL / 2 of two tenants, at least the floor) it is
    admitted only while the pool's in-use is under POOL - FLOOR, the light tenant's
    permits included; under its share, up to its share. So it may hold max(share, POOL -
    FLOOR - the light tenant's busy permits). (Until 2026-12-02 this counted POOL -
    max(FLOOR, light's): 14 permits under Puma 4x4, which the rule allows only while
    the light tenant holds none, so a light tenant served at once cost the heavy one
    the target. On the 4-permit pools both give 2.) `per_permit` is the throughput of
    one permit, from the heavy tenant's run alone (the whole pool busy)."""
    light_busy = d["light"]["ok"] / seconds / per_permit if per_permit else 0
    allowed = max(max(floor, pool / 2.0), pool - floor - light_busy)
    hold_ms = 1000.0 / per_permit if per_permit else 0
    return allowed, (HEAVY * hold_ms / allowed if allowed > 0 else 0)


def heavy_targets(phase, d, seconds, pool, floor, per_permit, solo, enforced=False):
    """Issue 14's targets for phase results `d`: the heavy tenant keeps 90% of the
    throughput its share allows, and its p99 is within 2x of its ideal queueing delay;
    with `solo`, also the light tenant's p99 within 1.5x of it. `enforced`: --check
    fails on a miss (else they are reported only)."""
    out = []
    if solo:
        ratio = d["light"]["p99_ms"] / solo
        out.append(("%s: light p99 with heavy present / alone = %.2f (target <= 1.5)" % (phase, ratio),
                    ratio <= 1.5, enforced))
    allowed, ideal = heavy_share(d, seconds, pool, floor, per_permit)
    got = d["heavy"]["ok"] / seconds
    out.append(("%s: heavy throughput %.0f/s >= 90%% of its share's %.0f/s (%.1f permits: in use "
                "under %d - %d, less the light tenant's busy ones)"
                % (phase, got, allowed * per_permit, allowed, pool, floor),
                got >= 0.9 * allowed * per_permit, enforced))
    hp99 = d["heavy"]["p99_ms"]
    out.append(("%s: heavy p99 %.0f ms <= 2 x the ideal queueing delay (%.0f ms) = %.0f ms (with %d "
                "requests unserved at the end, at their wait so far)"
                % (phase, hp99, ideal, 2 * ideal, d["heavy"].get("unfinished", 0)),
                hp99 <= 2 * ideal, enforced))
    return out


def report(kind, pool, seconds, results, leftover, floors):
    floor = floors["polite"]
    solo = results["solo"]["light"]["p99_ms"]
    print("\n== %s: pool %d (floor %d; polite-f1: %d), %d heavy + %d light connections, %d ms work, "
          "%g s per phase" % (kind, pool, floor, floors["polite-f1"], HEAVY, LIGHT, WORK_MS, seconds))
    print("%-13s %-6s %8s %7s %7s %9s %8s %8s %9s %8s %6s %13s %10s" % (
        "phase", "tenant", "requests", "200s", "429s", "200/s", "p50 ms", "p99 ms", "hint ms",
        "1st try", "tries", "queue p50/99", "light p99"))
    for phase in PHASES:
        base = results["nolimit-solo"]["light"]["p99_ms"] if phase.startswith("nolimit") else solo
        for name, d in sorted(results[phase].items()):
            ratio = "%.2fx" % (d["p99_ms"] / base) if name == "light" and base else ""
            queue = "%.2f/%.2f" % (d["queue_p50_ms"], d["queue_p99_ms"])
            print("%-13s %-6s %8d %7d %7d %9.1f %8.2f %8.2f %9.1f %7.0f%% %6d %13s %10s" % (
                phase, name, d["attempts"], d["ok"], d["refused"], d["ok"] / seconds, d["p50_ms"],
                d["p99_ms"], d["mean_hint_ms"], 100.0 * d["served_first_try"] / max(1, d["ok"]),
                d["tries_p99"], queue, ratio))
    for phase in ("polite", "fifo", "polite-f1"):
        h = results[phase]["heavy"]
        print("%s: the most retries of the heavy tenant due within %d ms: %d (%d sent; %.1f on "
              "average)" % (phase, BURST_MS, h["retry_burst"], h["retry_burst_sent"],
                            retries_per_burst(h, seconds)))
        samples = results[phase]["heavy"]["held_samples"]
        total = max(1, sum(samples.values()))
        print("%s: the heavy tenant held %s of the time (sampled every 10 ms)" % (phase, ", ".join(
            "%d permits %.1f%%" % (k, 100.0 * v / total) for k, v in sorted(samples.items()))))
        st = sorted(results[phase]["heavy"]["stretch_samples"]) or [100]
        # The pool's stretch applies only to a tenant with other refused requests out
        # (`server_queue::others_out`): with fifo clients the mean hint says whether it did.
        print("%s: the server's queue stretch (over-share hints of a tenant with other refused "
              "requests out) stood at %.2fx at the median, "
              "%.2fx at p90, %.2fx at most (sampled every 10 ms)" % (
                  phase, st[len(st) // 2] / 100.0, st[len(st) * 9 // 10] / 100.0, st[-1] / 100.0))
    # A phase during which the hypervisor ran something else for STEAL_LIMIT_PCT of the
    # CPU time or more says nothing about latency (see `main`).
    steal = {ph: max(d.get("steal_pct", 0.0) for d in results[ph].values()) for ph in PHASES}
    disturbed = [ph for ph in PHASES if steal[ph] >= STEAL_LIMIT_PCT]
    print("%s: CPU time the host took (steal) by phase: %s%s" % (
        kind, ", ".join("%s %.1f%%" % (ph, steal[ph]) for ph in PHASES),
        "; over %g%% in %s" % (STEAL_LIMIT_PCT, ", ".join(disturbed)) if disturbed else ""))
    # (what, met, enforced): --check fails on an enforced one that is not met. The
    # targets still open (see the README) are printed as TARGET, not enforced.
    checks = []
    pol = results["polite"]
    light_ratio = pol["light"]["p99_ms"] / solo
    nolimit_ratio = results["nolimit"]["light"]["p99_ms"] / results["nolimit-solo"]["light"]["p99_ms"]
    checks.append(("polite: light p99 with heavy present / alone = %.2f (target <= 1.5)" % light_ratio,
                   light_ratio <= 1.5, False))
    eager_ratio = results["eager"]["light"]["p99_ms"] / solo
    # Enforced under every server. Under Puma 4x4 it was reported only until the
    # server's queue stretched the heavy tenant's hints by the mean wait of a window
    # (8da9805): before, its retries filled Puma's queue and the light tenant waited
    # there (4.3x to 4.4x, no limiter 3.6x); since, 1.09x to 1.55x in sixteen runs.
    f1 = results["polite-f1"]
    f1_ratio = f1["light"]["p99_ms"] / solo
    # The two guards below measure time on a shared host: the only enforced checks that
    # one far-out phase can fail (see `main`, which then measures the server once more).
    first_timed = len(checks)
    checks.append(("polite: light p99 ratio %.2f <= 2.5, under the %.2f with eager clients "
                   "and the %.2f without a limiter" % (light_ratio, eager_ratio, nolimit_ratio),
                   light_ratio <= 2.5 and light_ratio < eager_ratio and light_ratio < nolimit_ratio,
                   True))
    # At the default floor the guard is that the hints help; its ratio (1.5x to 1.9x on
    # these hosts, once 2.51x in a CI run whose heavy tenant's p50 went from 11 to 95 ms:
    # a stalled host) is printed, not bounded.
    checks.append(("polite-f1: light p99 ratio %.2f under the %.2f with eager clients "
                   "and the %.2f without a limiter" % (f1_ratio, eager_ratio, nolimit_ratio),
                   f1_ratio < eager_ratio and f1_ratio < nolimit_ratio, True))
    # Hints spread over the heavy tenant's turns: no 10 ms holds more than 8 times its
    # average retries per 10 ms (a bound of at least a quarter of its connections). Under the
    # 4-permit servers the average is about 3.6 and the most 5 to 8; when every
    # over-share hint was cut to the next scan of the active set, 62 to 64, a burst once a
    # second that the light tenant queued behind (1.54x and 1.84x under gunicorn against
    # 1.21x and 1.32x after the fix). Judged only where the hints are long beside the
    # 10 ms (a mean of 100 ms or more): under Puma 4x4 they were 1 to 3 ms before the
    # server's queue stretched them, so a retry followed its answer at once and the
    # bursts were the server's, answering in batches (at most 31 to 48 against an
    # average of 9 to 17); stretched, 78 to 330 ms, the most 7 to 8 in 10 ms. Counted
    # when the retries fell due (each 429's answer plus its hint: the library's doing),
    # not when they were sent, which adds the load client's own stalls (`retry_bursts`).
    # Nor is the bound under the tenant's turnover: the most of its requests served
    # within any 10 ms of the phase. `retry` hands out its turns one turnover interval
    # apart, so retries due at that rate are the hints working, not a pile; a pile on
    # one instant brings back every waiting connection (50 or more of the 64). The CI
    # runs and traces behind this: docs/fairness-through-servers.md.
    for phase, d in (("polite", pol), ("polite-f1", f1)):
        h = d["heavy"]
        burst, hint = h["retry_burst"], h["mean_hint_ms"]
        turnover = h["served_burst"]
        bound = max(HEAVY // 4, int(8 * retries_per_burst(h, seconds)), turnover)
        judged = hint >= 10 * BURST_MS
        checks.append(("%s: heavy's retries due within any %d ms: %d <= %d, the largest of a quarter "
                       "of its connections, 8x their average and its turnover (%d served within "
                       "%d ms) (hints "
                       "spread, not piled on one instant)%s" % (
                           phase, BURST_MS, burst, bound, turnover, BURST_MS,
                           "" if judged else "; not judged: mean hint %.1f ms < %d ms" % (hint, 10 * BURST_MS)),
                       burst <= bound or not judged, True))
    timed = checks[first_timed:]
    # The phases each timed guard's figures come from: the light ratios compare with the
    # solo, eager and no-limiter phases; fifo's targets with solo's p99 and the heavy
    # phase's throughput per permit.
    ratio_phases = ("solo", "eager", "nolimit-solo", "nolimit")
    guard_phases = [("polite",) + ratio_phases, ("polite-f1",) + ratio_phases,
                    ("polite",), ("polite-f1",)]
    for phase, d in (("polite", pol), ("polite-f1", f1)):
        checks.append(("%s: heavy refused with Retry-After while light is present: %d 429s"
                       % (phase, d["heavy"]["refused"]), d["heavy"]["refused"] > 0, True))
    most = results["heavy"]["heavy"]["max_in_use"]
    checks.append(("heavy alone holds the whole pool: max in use %d of %d" % (most, pool), most == pool, True))
    # Issue 14's three targets, with either client (see `heavy_share`); the light
    # tenant's 1.5x with polite clients is the first check above. Enforced for the
    # client issue 9 describes, which waits a hint "before that tenant's next request"
    # (`fifo`: the whole tenant pauses), as timed guards (a miss measures the server
    # once more, see `main`); reported for `polite`, whose heavy p99 seed 000 puts out
    # of reach (see the README).
    per_permit = results["heavy"]["heavy"]["ok"] / seconds / pool
    checks += heavy_targets("polite", pol, seconds, pool, floor, per_permit, None)
    fifo = heavy_targets("fifo", results["fifo"], seconds, pool, floor, per_permit, solo, True)
    checks += fifo
    timed += fifo
    # (heavy_targets: the light ratio, then the heavy tenant's throughput and p99, whose
    # share and ideal come from the heavy phase's throughput per permit.)
    guard_phases += [("fifo", "solo"), ("fifo", "heavy"), ("fifo", "heavy")]
    assert len(guard_phases) == len(timed)
    _, ideal = heavy_share(pol, seconds, pool, floor, per_permit)
    # Why the p99 target above is missed (see the README): by Little's law the heavy
    # tenant's closed loops wait HEAVY / throughput on average, which is the ideal
    # itself; the requests served at their first attempt (about its p50) take little
    # of it, so the others carry the rest of it.
    h = pol["heavy"]
    if h["ok"] and h["served_first_try"] < h["ok"]:
        f = h["served_first_try"] / float(h["ok"])
        mean = HEAVY * seconds * 1000.0 / h["ok"]
        print("polite: heavy served %.0f%% of its requests at their first attempt (p50 %.1f ms); its "
              "mean latency by Little's law %.0f ms (the ideal %.0f), so the others averaged about "
              "%.0f ms" % (100 * f, h["p50_ms"], mean, ideal, (mean - f * h["p50_ms"]) / (1 - f)))
    checks.append(("nothing held after the runs: in use %d" % leftover, leftover == 0, True))
    unstamped = sum(d["ok"] + d["refused"] - d["stamped"] for r in results.values() for d in r.values())
    checks.append(("every answer says when it reached the app (X-Entered-Ns): %d did not" % unstamped,
                   unstamped == 0, True))
    for text, ok, enforced in checks:
        tag = "PASS" if ok else ("FAIL" if enforced else "MISS")
        print("%s %s%s" % (tag, text, "" if enforced else " [target, not enforced]"))
    passed = lambda cs: all(ok for _, ok, enforced in cs if enforced)
    # The disturbed phases behind the failed timed guards, when every one of them has
    # one (else none: a guard failed on an undisturbed host).
    behind = [[ph for ph in phases if ph in disturbed]
              for (_, ok, _), phases in zip(timed, guard_phases) if not ok]
    excused = sorted(set(sum(behind, []))) if behind and all(behind) else []
    failed = [i for i, (_, ok, _) in enumerate(timed) if not ok]
    return passed(checks), passed(c for c in checks if c not in timed), checks, excused, failed


def again(n, ok, untimed_ok, disturbed, every):
    """Whether a server measured `n` times is measured once more (the budget aside).

    Only when the last measurement failed timed guards alone (the light tenant's, a
    retry burst, fifo's targets): on these shared 2-core hosts one phase in many lands
    far out, while a real regression of the hints fails every measurement. The second
    is always taken. A third (up to MAX_MEASUREMENTS) when the phases behind the last
    failures were `disturbed` (the hypervisor took STEAL_LIMIT_PCT of the CPU time or
    more), or when no timed guard failed in `every` measurement so far: a regression
    fails the same guard each time, where a host slowed in ways steal does not show
    fails one here and another there. The runs behind this: the README's "Fairness
    through real servers" and docs/fairness-through-servers.md."""
    if ok or not untimed_ok:
        return False
    return n == 1 or ((bool(disturbed) or not every) and n < MAX_MEASUREMENTS)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--servers", default="gunicorn,puma-4x1,puma-2x2,puma-4x4")
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--loadgen", default=str(ROOT / "target" / "release" / "examples" / "loadgen"))
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--budget", type=float, default=BUDGET_S,
                    help="seconds of the whole run beyond which no server is measured again "
                         "(default %(default)s)")
    a = ap.parse_args()
    if not Path(a.loadgen).is_file():
        sys.exit("no load client at %s: cargo build --release --features internals --example loadgen"
                 % a.loadgen)
    log_dir = Path(os.environ.get("E2E_LOG_DIR", "/tmp/fairshm-e2e"))
    log_dir.mkdir(parents=True, exist_ok=True)
    ok_all = True
    everything = {}
    def measure(kind):
        """Runs and reports server `kind`: (enforced checks passed, those but the timed
        ones passed, the disturbed phases behind every failed timed guard (none if one
        failed undisturbed, see `report`), the measurement as --json keeps it)."""
        pool, results, leftover, floors = run_server(kind, a.seconds, a.loadgen, log_dir)
        ok, untimed_ok, checks, disturbed, failed = report(kind, pool, a.seconds, results,
                                                            leftover, floors)
        return ok, untimed_ok, disturbed, failed, {"pool": pool, "floors": floors,
                                                   "results": results,
                                                   "checks": [list(c) for c in checks],
                                                   "disturbed": disturbed}

    started = time.monotonic()
    skipped = []
    kinds = a.servers.split(",")

    def fits(kind, took, after):
        """Whether one more measurement of `kind` (predicted to take `took` s, as its last
        did) and the first of each of the `after` servers after it fit in the budget."""
        gone, more = time.monotonic() - started, took * (1 + after)
        if gone + more <= a.budget:
            return True
        print("\n%s: no more measurements: %.0f s of the end-to-end run's %d s are gone, "
              "and one more with the %d servers after it would take about %.0f s"
              % (kind, gone, a.budget, after, more))
        return False

    for i, kind in enumerate(kinds):
        began = time.monotonic()
        ok, untimed_ok, disturbed, failed, everything[kind] = measure(kind)
        took = time.monotonic() - began
        n = 1
        # The timed guards that failed in every measurement so far.
        every = set(failed)
        # Only timed guards failed: measured again, whole (see `again`); every
        # measurement is printed and kept, and the last is judged.
        while again(n, ok, untimed_ok, disturbed, every) and fits(kind, took, len(kinds) - i - 1):
            why = (" with the host taking CPU time in %s" % ", ".join(disturbed) if disturbed
                   else ", none of them in every measurement" if n > 1 else "")
            print("\n%s: a timed guard failed%s: measuring %s once more" % (kind, why, kind))
            n += 1
            began = time.monotonic()
            ok, untimed_ok, disturbed, failed, everything[kind]["again%d" % n] = measure(kind)
            every &= set(failed)
            took = time.monotonic() - began
        if untimed_ok and not ok and disturbed:
            # Every measurement failed a timed guard, and the last one ran on a host
            # that took its CPU time away: its latencies are the host's, not the
            # library's. Said so, not passed.
            print("\nSKIP %s: its timed guards are not judged: the host took %g%% of the CPU "
                  "time or more in %s of the last of %d measurements (see above)"
                  % (kind, STEAL_LIMIT_PCT, ", ".join(disturbed), n))
            skipped.append(kind)
            ok = True
        ok_all &= ok
    if skipped:
        print("\nSKIPPED the timed guards of %s: a host taking CPU time (steal)" % ", ".join(skipped))
    if a.json:
        Path(a.json).write_text(json.dumps(everything, indent=1))
    if a.check and not ok_all:
        sys.exit(1)


if __name__ == "__main__":
    main()
