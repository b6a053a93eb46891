"""Guaranteed pools (seed 001) through the C ABI: the demand-signal trace, refusals
with their facts and explanation, statistics, and two forked processes sharing one."""

import os

import pytest

import fairshm
from conftest import wait_child

CONFIG = {
    "guaranteed": [{
        "name": "tokens", "ceiling": 100, "fairness_unit": "cost",
        "reclaim_horizon_ms": 100, "idle_after_ms": 150,
        "tenants": {"a": 1, "b": 1},
    }],
    "max_processes": 8,
}


# Tenants a, b and c share 90 evenly, with a horizon of 5 s and an idleness of 20 s: a
# waiter asks again on its own only every 10 s, and a tenant that acted does not lend
# for 20 s.
THREE_EVEN = {"guaranteed": [{
    "name": "tokens", "ceiling": 90, "fairness_unit": "cost",
    "reclaim_horizon_ms": 5000, "idle_after_ms": 20_000,
    "tenants": {"a": 1, "b": 1, "c": 1},
}]}


@pytest.fixture
def tokens(name):
    t = fairshm.Table.create(name, CONFIG)
    yield t.guaranteed("tokens")
    t.close()


def returner_refused(tokens):
    """Seed 001's trace at its own times: at t=0 b holds its own 50 and borrows a's 50
    for 100 ms; a comes back at t=10 and is refused. Returns the loan and the refusal."""
    tokens.acquire("b", 50, 10_000, now_ms=0)
    loan = tokens.acquire("b", 50, 100, now_ms=0)
    with pytest.raises(fairshm.GuaranteedRefused) as r:
        tokens.acquire("a", 50, 50, now_ms=10)
    return loan, r.value


def test_seed_001s_list_of_tenants_configures_the_pool_and_errors_name_their_key(name):
    """Tenants as seed 001 writes them (a list of {id, weight}) give the pool the map
    gives; a wrong value is named by its key, not only by a column of the one-line
    JSON the dict is sent as; a tenant named twice is an error, not the last weight."""
    listed = dict(CONFIG, guaranteed=[dict(CONFIG["guaranteed"][0],
                                           tenants=[{"id": "b", "weight": 1},
                                                    {"id": "a", "weight": 1}])])
    t = fairshm.Table.create(name, listed)
    try:
        # The same config as the map's: opening with it checks every key.
        fairshm.Table.open(name, CONFIG).close()
        assert [x["name"] for x in t.guaranteed("tokens").stats(now_ms=0)["stats"]["tenants"]] == ["a", "b"]
    finally:
        t.close()
    bad = dict(CONFIG, guaranteed=[dict(CONFIG["guaranteed"][0], ceiling="100")])
    with pytest.raises(fairshm.InvalidConfig, match=r"JSON: guaranteed\[0\]\.ceiling: invalid type"):
        fairshm.Table.create(name + "-bad", bad)
    twice = dict(CONFIG, guaranteed=[dict(CONFIG["guaranteed"][0],
                                          tenants=[{"id": "a", "weight": 1},
                                                   {"id": "a", "weight": 2}])])
    with pytest.raises(fairshm.InvalidConfig, match='tenant "a" is named twice'):
        fairshm.Table.create(name + "-bad", twice)


def test_a_guaranteed_lease_says_what_it_is(tokens):
    lease = tokens.acquire("a", 10, 100, now_ms=0)
    assert repr(lease) == "<fairshm.GuaranteedLease %#x of pool 'tokens'>" % lease.id
    assert lease.id >> 63 == 1, "the guaranteed tag"
    lease.release(now_ms=1)


def test_the_returner_is_served_within_the_horizon(tokens):
    loan, r = returner_refused(tokens)
    assert (r.reason, r.retry_after_ms, r.retry_after_header) == ("guarantee_on_loan", 90, 1)
    assert r.blocking == [loan.id]
    # Named as seed 001 names them (blockingLeases: ['b2']), and as the explanation does.
    assert (loan.tenant, loan.name, r.blocking_leases) == ("b", "b#2", ["b#2"])
    assert (r.guarantee, r.own_free, r.lent) == (50, 0, 50)
    assert 'Tenant "a" asked for 50 cost units' in r.explanation and "b#2" in r.explanation
    loan.release(now_ms=100)
    with pytest.raises(fairshm.GuaranteedRefused):
        tokens.acquire("b", 50, 100, now_ms=100)  # a is waiting: no renewal
    tokens.acquire("a", 50, 50, now_ms=100)  # a is served at t=100
    s = tokens.stats(now_ms=100)
    assert s["stats"]["now_ms"] == 100, "explicit times, 0 included, not the library's clock"
    a = s["stats"]["tenants"][0]
    assert (a["name"], a["worst_reclaim_ms"], a["deficit_unit_ms"]) == ("a", 90, 90 * 50)
    # A time before the pool's clock counts as that clock; None is the library's.
    assert tokens.stats(now_ms=0)["stats"]["now_ms"] == 100
    assert tokens.stats()["stats"]["now_ms"] > 100
    assert s["fairness_report"]["unit"] == "cost"
    assert [p["target"] for p in s["plan"]] == [50, 50]
    assert tokens.fairness_report(now_ms=100) == s["fairness_report"]
    assert tokens.plan(now_ms=100) == s["plan"]


def test_a_lease_released_in_its_block_keeps_its_explicit_time(tokens):
    # Released in the block at an explicit time, the lease is not released again on
    # leaving it, so the pool's clock stays at the trace's time.
    with tokens.acquire("a", 10, 10, now_ms=5) as lease:
        lease.release(now_ms=20)
    assert tokens.stats(now_ms=0)["stats"]["now_ms"] == 20
    with pytest.raises(ValueError, match="the block's own"):
        with tokens.acquire("a", 10, 10, now_ms=20) as lease:
            lease.release(now_ms=30)
            raise ValueError("the block's own")
    assert tokens.stats(now_ms=0)["stats"]["now_ms"] == 30
    assert tokens.stats(now_ms=30)["stats"]["in_use"] == 0


def test_errors_are_typed(tokens):
    lease = tokens.acquire("a", 10, 10, now_ms=5)
    lease.release(now_ms=6)
    with pytest.raises(fairshm.AlreadyReleased):
        tokens.release(lease.id, now_ms=7)
    with pytest.raises(fairshm.AlreadyReleased):  # as a fair-share Lease: never silent
        lease.release(now_ms=7)
    with tokens.acquire("a", 10, 10, now_ms=7) as held:
        assert tokens.stats(now_ms=7)["stats"]["in_use"] == 10
    assert tokens.stats(now_ms=7)["stats"]["in_use"] == 0, "released by the with block"
    with pytest.raises(fairshm.AlreadyReleased):
        held.release(now_ms=8)
    with pytest.raises(fairshm.Error) as e:
        tokens.acquire("zed", 1, 1, now_ms=7)
    assert e.value.kind == "invalid_tenant"
    with pytest.raises(fairshm.GuaranteedRefused) as r:
        tokens.acquire("b", 60, 1000, now_ms=8)  # a is active: nothing to borrow... for 1000 ms
    assert r.value.reason == "hold_exceeds_reclaim_horizon"
    with pytest.raises(fairshm.UnknownPool):
        tokens._table.guaranteed("nope")
    with pytest.raises(ValueError) as e:
        tokens.release(-1, now_ms=9)  # ctypes would pass it as 2**64 - 1
    assert "lease_id must be an integer from 0 to" in str(e.value)
    with pytest.raises(TypeError):
        tokens.release(1.5, now_ms=9)
    with pytest.raises(ValueError) as e:  # 2**64 - 1 is FAIRSHM_NOW, which None says
        tokens.acquire("a", 1, 1, now_ms=2**64 - 1)
    assert "now_ms must be an integer from 0 to" in str(e.value)
    with pytest.raises(ValueError) as e:  # costs run from 1, as the library's error says
        tokens.acquire("a", -1, 1, now_ms=9)
    assert "cost must be an integer from 1 to" in str(e.value)
    with pytest.raises(fairshm.InvalidRequest, match="cost must be at least 1"):
        tokens.acquire("a", 0, 1, now_ms=9)


def fork_worker(work):
    """Forks a worker that runs ``work(ready)`` (``ready()`` tells this process that
    its setup is done) and exits 0 if it returns, 1 if it raises; returns the worker's
    pid once it is ready."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(r)
            work(lambda: os.write(w, b"x"))
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    assert os.read(r, 1) == b"x"
    os.close(r)
    return pid


def test_a_forked_worker_shares_the_pool_and_its_death_returns_its_lease(name, tokens):
    def worker(ready):
        t = fairshm.Table.open(name)
        t.guaranteed("tokens").acquire("b", 50, 10_000, now_ms=1)
        ready()
        os.kill(os.getpid(), 9)

    st = wait_child(fork_worker(worker))
    assert os.WIFSIGNALED(st) and os.WTERMSIG(st) == 9
    # The dead worker's lease comes back (its peers' anchors, or this reap).
    import time
    deadline = time.monotonic() + 10
    while tokens.stats()["stats"]["in_use"] and time.monotonic() < deadline:
        tokens._table.reap_dead()
        time.sleep(0.01)
    assert tokens.stats()["stats"]["in_use"] == 0
    tokens.acquire("b", 50, 10, now_ms=2)


def test_a_refusal_pickles_with_its_facts(tokens):
    import pickle

    loan, r0 = returner_refused(tokens)
    r = pickle.loads(pickle.dumps(r0))
    assert type(r) is fairshm.GuaranteedRefused
    assert (r.reason, r.retry_after_ms, r.blocking, r.pool, r.tenant) == (
        "guarantee_on_loan", 90, [loan.id], "tokens", "a")
    assert r.blocking_leases == r0.blocking_leases == ["b#2"]
    assert (r.guarantee, r.own_free, r.lent) == (50, 0, 50)
    assert r.explanation == r0.explanation and str(r) == str(r0)


def test_a_refusal_held_by_many_leases_is_explained_whole(tokens):
    # 50 loans of 1 hold a's guarantee, the later ones due sooner. The explanation names
    # the five due first and counts the rest, whole however many there are (it was cut
    # at 1,023 bytes, in the middle of the list, before it said what to do); `blocking`
    # has the first 8 ids, and `n_blocking` and `why_len` count all of them.
    tokens.acquire("b", 50, 10_000, now_ms=0)
    loans = [tokens.acquire("b", 1, 100 - i, now_ms=0) for i in range(50)]
    with pytest.raises(fairshm.GuaranteedRefused) as e:
        tokens.acquire("a", 50, 50, now_ms=10)
    r = e.value
    assert r.reason == "guarantee_on_loan" and r.retry_after_ms == 90  # all 50 are needed
    assert r.blocking == [loan.id for loan in reversed(loans)][:8]
    assert r.n_blocking == 50
    assert r.blocking_leases == [loan.name for loan in reversed(loans)][:8]
    assert r.blocking_leases[0] == "b#51"
    assert r.explanation.endswith("so that loans come back sooner."), r.explanation
    assert "in 50 leases, the earliest due first: b#51 (1 cost unit, due in 41 ms)" in r.explanation
    assert "and 45 more due no sooner" in r.explanation
    assert r._facts.why_len == len(r.explanation.encode())


def test_a_short_why_buffer_is_cut_between_characters(name):
    # Through the C ABI itself: a buffer too short for the explanation gets a cut one,
    # NUL-terminated and still UTF-8 (the tenant's name is two bytes a character), and
    # the refusal says how long the whole one is.
    from ctypes import byref, c_uint64, create_string_buffer

    from fairshm._lib import GuaranteedRefusal, lib

    cfg = dict(CONFIG, guaranteed=[dict(CONFIG["guaranteed"][0], tenants={"ééé": 1, "b": 1})])
    t = fairshm.Table.create(name, cfg)
    try:
        g = t.guaranteed("tokens")
        g.acquire("b", 50, 10_000, now_ms=0)
        g.acquire("b", 50, 100, now_ms=0)
        with pytest.raises(fairshm.GuaranteedRefused) as e:
            g.acquire("ééé", 50, 50, now_ms=10)
        whole = e.value.explanation.encode()
        assert whole.startswith('Tenant "ééé" asked'.encode())
        for size in range(8, 16):  # 'Tenant "' is 8 bytes, then 2 a character
            why, facts, lease = create_string_buffer(size), GuaranteedRefusal(), c_uint64()
            rc = lib.fairshm_guaranteed_acquire(t._h, g._id, g._tenant("ééé"), 50, 50, 10,
                                                byref(lease), byref(facts), why, size)
            assert rc == 1 and facts.why_len == len(whole)
            cut = why.value
            assert whole.startswith(cut) and cut.decode("utf-8") is not None, (size, cut)
            assert len(cut) in (size - 1, size - 2), (size, cut)
    finally:
        t.close()


def test_threads_sharing_a_pool_each_read_their_own_refusal(name):
    # The C call runs without the GIL: with one explanation buffer per pool, a thread
    # read another thread's refusal (about 3% of them, in this loop) as its own.
    import threading

    cfg = dict(CONFIG, guaranteed=[dict(CONFIG["guaranteed"][0], tenants={"a": 1, "b": 1, "c": 2})])
    t = fairshm.Table.create(name, cfg)
    try:
        g = t.guaranteed("tokens")
        for tenant, cost in (("a", 25), ("b", 25), ("c", 50)):
            g.acquire(tenant, cost, 10**9, now_ms=0)
        wrong, refused = [], []

        def ask(tenant):
            for _ in range(3000):
                try:
                    g.acquire(tenant, 10, 10, now_ms=1)
                except fairshm.GuaranteedRefused as r:
                    refused.append(1)
                    if not r.explanation.startswith('Tenant "%s" asked' % tenant):
                        wrong.append((tenant, r.explanation[:30]))

        threads = [threading.Thread(target=ask, args=(x,)) for x in "abc"]
        for th in threads:
            th.start()
        for th in threads:
            th.join(60)
        assert not any(th.is_alive() for th in threads)
        assert len(refused) == 9000 and wrong == [], wrong[:3]
    finally:
        t.close()


def test_each_release_names_the_other_policys_leases(name):
    # A guaranteed lease's id passed to the table's release (or the other way round)
    # was refused as "not held by this process" or "guaranteed pool handle 2816":
    # true of the wrong reading of the id, and no help. Each release now tells.
    cfg = dict(CONFIG, pools=[{"name": "requests", "capacity": 4}])
    t = fairshm.Table.create(name, cfg)
    try:
        g = t.guaranteed("tokens")
        gl = g.acquire("a", 1, 1, now_ms=0)
        fl = t.try_acquire("requests", "x")
        with pytest.raises(fairshm.InvalidRequest) as e:
            t.release(gl.id)
        assert "is a guaranteed pool's lease: release it through its guaranteed pool" in str(e.value)
        with pytest.raises(fairshm.InvalidRequest) as e:
            g.release(fl.id, now_ms=1)
        assert "is not a guaranteed pool's lease" in str(e.value)
        assert [x["id"] for x in g.stats(now_ms=1)["stats"]["leases"]] == [gl.id]
        gl.release(now_ms=1)  # both still held, and each releases through its own
        fl.release()
        assert t.stats()["pools"][0]["in_use"] == 0 and g.stats(now_ms=1)["stats"]["in_use"] == 0
    finally:
        t.close()


def test_acquire_timeout_waits_for_the_loan_and_keeps_asking(name):
    # As the Rust API's acquire_timeout, on the library's clock: the waiter asks again
    # at each retry-after (and at least every half idle_after), so b cannot re-borrow
    # a's units while a waits, and a refusal that waiting cannot end comes at once.
    import threading
    import time

    cfg = dict(CONFIG, guaranteed=[dict(CONFIG["guaranteed"][0], idle_after_ms=1000)])
    t = fairshm.Table.create(name, cfg)
    try:
        g = t.guaranteed("tokens")
        g.acquire("b", 50, 100_000)
        loan = g.acquire("b", 50, 100)
        t0 = time.monotonic()
        with pytest.raises(fairshm.GuaranteedRefused) as e:
            g.acquire_timeout("a", 50, 50, 0.03)
        assert e.value.reason == "guarantee_on_loan" and time.monotonic() - t0 >= 0.03
        renewed = []

        def lender_back():
            time.sleep(0.06)
            loan.release()
            try:
                g.acquire("b", 50, 100)
                renewed.append(True)
            except fairshm.GuaranteedRefused:
                renewed.append(False)

        th = threading.Thread(target=lender_back)
        th.start()
        got = g.acquire_timeout("a", 50, 50, 10)
        th.join(10)
        assert isinstance(got, fairshm.GuaranteedLease) and renewed == [False]
        assert time.monotonic() - t0 < 5
        t1 = time.monotonic()
        with pytest.raises(fairshm.GuaranteedRefused) as e:
            g.acquire_timeout("b", 60, 1000, 10)  # more than b's 50 for 1000 ms: never
        assert e.value.reason == "hold_exceeds_reclaim_horizon" and time.monotonic() - t1 < 1
        # Timeouts as the fair-share acquire takes them. None waits for ever, seen here
        # where no wait can hang: a refusal that waiting cannot end comes at once.
        t3 = time.monotonic()
        with pytest.raises(fairshm.GuaranteedRefused) as e:
            g.acquire_timeout("b", 60, 1000, None)
        assert e.value.reason == "hold_exceeds_reclaim_horizon" and time.monotonic() - t3 < 1
        with pytest.raises(ValueError, match="NaN"):
            g.acquire_timeout("a", 1, 1, float("nan"))
        for bad in ("1", object()):
            with pytest.raises(TypeError, match="timeout"):
                g.acquire_timeout("a", 1, 1, bad)
        t2 = time.monotonic()
        with pytest.raises(fairshm.GuaranteedRefused):
            g.acquire_timeout("a", 1, 1, -1)  # a negative timeout asks once
        assert time.monotonic() - t2 < 1
    finally:
        t.close()


def test_a_release_in_another_process_wakes_acquire_timeout_before_its_retry_after(name):
    # b's loan of a's half is declared for 4 s, so a's retry-after is about 4 s; the
    # loan's holder, a forked worker, gives it back after 0.3 s, and the release wakes
    # a's acquire_timeout, which asks again at once instead of at the retry-after.
    import time

    cfg = dict(CONFIG, guaranteed=[dict(CONFIG["guaranteed"][0], reclaim_horizon_ms=5000,
                                        idle_after_ms=20_000)])
    t = fairshm.Table.create(name, cfg)
    try:
        g = t.guaranteed("tokens")

        def holder(ready):
            gc = fairshm.Table.open(name).guaranteed("tokens")
            gc.acquire("b", 50, 60_000)
            loan = gc.acquire("b", 50, 4000)
            ready()
            time.sleep(0.3)
            loan.release()

        pid = fork_worker(holder)
        t0 = time.monotonic()
        lease = g.acquire_timeout("a", 50, 50, 30)
        waited = time.monotonic() - t0
        assert isinstance(lease, fairshm.GuaranteedLease)
        assert 0.2 < waited < 1.5, waited
        # One refusal, then the grant: it did not poll meanwhile.
        assert g.stats()["stats"]["tenants"][0]["refusals"] == 1
        assert os.WEXITSTATUS(wait_child(pid)) == 0
        lease.release()
    finally:
        t.close()


def test_a_cancel_from_another_thread_ends_acquire_timeout_at_once(name):
    # a's retry-after is the loan's declared end, about 4 s away, and its timeout 30 s
    # (a finite one: a broken cancel fails the test instead of hanging it): a Cancel
    # fired from another thread after 0.3 s ends the wait with the refusal.
    import threading
    import time

    cfg = dict(CONFIG, guaranteed=[dict(CONFIG["guaranteed"][0], reclaim_horizon_ms=5000,
                                        idle_after_ms=20_000)])
    with fairshm.Table.create(name, cfg) as t:
        g = t.guaranteed("tokens")
        own = g.acquire("b", 50, 60_000)
        loan = g.acquire("b", 50, 4000)
        cancel = fairshm.Cancel()
        assert not cancel.is_cancelled()
        timer = threading.Timer(0.3, cancel.cancel)
        timer.start()
        t0 = time.monotonic()
        with pytest.raises(fairshm.GuaranteedRefused) as e:
            g.acquire_timeout("a", 50, 50, 30, cancel=cancel)
        waited = time.monotonic() - t0
        timer.join()
        assert 0.2 < waited < 1.5, waited
        assert e.value.reason == "guarantee_on_loan"
        assert e.value.blocking_leases == [loan.name]
        assert cancel.is_cancelled()
        # Fired already: the first ask still goes through, refused or granted.
        with pytest.raises(fairshm.GuaranteedRefused):
            g.acquire_timeout("a", 50, 50, 30, cancel=cancel)
        loan.release()
        g.acquire_timeout("a", 50, 50, 30, cancel=cancel).release()
        cancel.reset()
        assert not cancel.is_cancelled()
        with pytest.raises(TypeError, match="cancel"):
            g.acquire_timeout("a", 50, 50, 1, cancel=object())
        own.release()


def test_acquire_timeout_sleeps_through_releases_that_cannot_serve_it(name):
    # c's waiter needs to borrow, and nobody can lend (a holds, b is active): forty
    # releases of b's own leases, 5 ms apart, give c nothing and do not wake it, in
    # any of its 100 ms slices (it asked 41 times before); the release of c's own
    # lease wakes it and serves it.
    import threading
    import time

    with fairshm.Table.create(name, THREE_EVEN) as t:
        g = t.guaranteed("tokens")
        a = g.acquire("a", 30, 60_000)
        c_own = g.acquire("c", 30, 60_000)
        g.acquire("b", 10, 1000).release()  # b is active: not lendable for 20 s

        def refusals():
            tenants = g.stats()["stats"]["tenants"]
            return next(x for x in tenants if x["name"] == "c")["refusals"]

        got = []
        waiter = threading.Thread(target=lambda: got.append(
            (g.acquire_timeout("c", 10, 100, 30), time.monotonic())))
        waiter.start()
        deadline = time.monotonic() + 30
        while refusals() < 1:
            assert time.monotonic() < deadline, "the waiter never asked"
            time.sleep(0.001)
        for _ in range(40):
            g.acquire("b", 10, 1000).release()
            time.sleep(0.005)
        time.sleep(0.2)
        asked = refusals()
        assert asked == 1, f"c's waiter asked {asked} times for 40 releases that gave c nothing"
        assert waiter.is_alive()
        released = time.monotonic()
        c_own.release()
        waiter.join(30)
        assert not waiter.is_alive()
        lease, back = got[0]
        assert back - released < 1.0, back - released
        lease.release()
        a.release()


class BehindA:
    """A's whole guarantee held in three leases of 10 (b and c have acted, so they
    lend nothing for 20 s), and the sleeps' slices made longer than a test, so that
    each waiter stays where it queued (a new slice queues again, behind the others)."""

    def __init__(self, t, monkeypatch):
        from fairshm import _lib
        monkeypatch.setattr(_lib, "WAIT_SLICE_MS", 20_000)
        self.g = t.guaranteed("tokens")
        for other in ("b", "c"):
            self.g.acquire(other, 1, 1000).release()
        self.held = [self.g.acquire("a", 10, 60_000) for _ in range(3)]

    def refusals(self):
        tenants = self.g.stats()["stats"]["tenants"]
        return next(x for x in tenants if x["name"] == "a")["refusals"]

    def asleep(self, n):
        """Waits until a has been refused n times, then a while more (its last waiter
        sleeps at once after its refusal)."""
        import time
        deadline = time.monotonic() + 30
        while self.refusals() < n:
            assert time.monotonic() < deadline, "a waiter never asked"
            time.sleep(0.001)
        assert self.refusals() == n
        time.sleep(0.15)

    def release_behind(self, first):
        """Starts `first` (a thread's target: a's waiter that queues first), then a
        waiter of a for 10 behind it, and releases one of a's leases once both sleep.
        Returns the second waiter's lease and how long after the release it had it."""
        import threading
        import time
        got = {}
        threading.Thread(target=first).start()
        self.asleep(1)
        small = threading.Thread(target=lambda: got.update(
            small=(self.g.acquire_timeout("a", 10, 100, 30), time.monotonic())))
        small.start()
        self.asleep(2)
        released = time.monotonic()
        self.held.pop().release()
        small.join(30)
        assert not small.is_alive()
        lease, back = got["small"]
        return lease, back - released


def test_a_refused_waiter_passes_the_wake_to_one_that_fits(name, monkeypatch):
    # A release wakes one waiter, the one that slept first (a's, for 20); refused, its
    # next ask, through this binding's loop, passes the wake on to the waiter behind it
    # (a's, for 10), which is served at once, not at its own next ask 10 s away.
    import threading

    with fairshm.Table.create(name, THREE_EVEN) as t:
        a = BehindA(t, monkeypatch)
        g = a.g
        got = {}
        big_done = threading.Event()

        def big():
            got.update(big=g.acquire_timeout("a", 20, 100, 30))
            big_done.set()

        lease, took = a.release_behind(big)
        assert took < 1.0, took
        assert a.refusals() == 3, "the big waiter asked once more, for the wake it passed on"
        assert not big_done.is_set()
        lease.release()
        a.held.pop().release()  # 20 free: the big waiter's turn
        assert big_done.wait(30)
        got["big"].release()
        for lease in a.held:
            lease.release()


def test_a_wait_ended_between_its_wake_and_its_ask_passes_the_wake_on(name, monkeypatch):
    # The waiter a release wakes (a's, for 20) ends its wait before its next ask (an
    # exception there, as a Ctrl-C between the calls would raise): the wait's end
    # passes the wake on, and the waiter behind it (a's, for 10) is served at once, not
    # at its own next ask 10 s away.
    import queue

    with fairshm.Table.create(name, THREE_EVEN) as t:
        a = BehindA(t, monkeypatch)
        gb = t.guaranteed("tokens")  # the first waiter's, whose second ask is cut off
        asks = []
        real = gb.acquire

        def cut_off(*args, **kwargs):
            asks.append(args)
            if len(asks) == 2:
                raise RuntimeError("interrupted before its ask")
            return real(*args, **kwargs)

        gb.acquire = cut_off
        ended = queue.Queue()

        def first():
            try:
                gb.acquire_timeout("a", 20, 100, 30)
            except RuntimeError as e:
                ended.put(str(e))

        lease, took = a.release_behind(first)
        assert ended.get(timeout=30) == "interrupted before its ask"
        assert took < 1.0, took
        assert a.refusals() == 2, "the first waiter never asked again"
        lease.release()
        for lease in a.held:
            lease.release()


def test_blocking_leases_are_named_by_their_borrowers_whatever_the_tenants_order(name):
    # Tenants listed out of alphabetical order, each borrowing from another: the name
    # of a blocking lease is its borrower's (the refusal carries the borrower's handle).
    cfg = {"guaranteed": [{
        "name": "tokens", "ceiling": 90, "fairness_unit": "cost",
        "reclaim_horizon_ms": 100, "idle_after_ms": 150,
        "tenants": {"zed": 1, "amy": 1, "kim": 1},
    }]}
    with fairshm.Table.create(name, cfg) as t:
        g = t.guaranteed("tokens")
        own = g.acquire("kim", 30, 10_000, now_ms=0)
        loan = g.acquire("kim", 30, 100, now_ms=0)  # from zed or amy, whoever lends
        with pytest.raises(fairshm.GuaranteedRefused) as e:
            for who in ("zed", "amy"):
                g.acquire(who, 30, 50, now_ms=10)
        r = e.value
        assert r.reason == "guarantee_on_loan", r.explanation
        assert r.blocking_leases == ["kim#2"] == [loan.name], r.blocking_leases
        assert "kim#2" in r.explanation
        loan.release(now_ms=20)
        own.release(now_ms=20)
