"""Residents (an ``evict`` pool) through the C ABI: a full pool evicts the idlest
resident instead of refusing, never one in a call; the victim learns of it; with
nothing evictable a blocking acquire fails ``too_many_residents`` after the pool's wait."""
import threading
import time

import pytest

import fairshm


def residents(name, cap, wait_ms=1000):
    return fairshm.Table.create(name, {"pools": [
        {"name": "residents", "capacity": cap, "evict": True, "evict_wait_ms": wait_ms}]})


def called(lease, at):
    """Sets the resident's last call to ``at`` (explicit ms, older than the clock's)."""
    lease.begin_call(now_ms=at)
    lease.end_call(now_ms=at)
    return lease


def test_an_over_share_spawn_puts_its_own_idlest_to_sleep(name):
    t = residents(name, 4)
    a = [called(t.try_acquire("residents", "a"), at) for at in (1, 2, 3)]
    b = called(t.try_acquire("residents", "b"), 0)  # the idlest of all, but not a's
    new = t.try_acquire("residents", "a")
    assert [x.revoked for x in a] == [True, False, False]
    assert not b.revoked and not new.revoked
    with pytest.raises(fairshm.Revoked) as e:
        a[0].begin_call()
    assert e.value.kind == "revoked" and "put the object to sleep" in str(e.value)
    pool = t.stats()["pools"][0]
    assert pool["in_use"] == 4
    assert (pool["residents"]["revoked"], pool["residents"]["evictions"]) == (1, 1)
    a[0].release()
    assert t.stats()["pools"][0]["in_use"] == 4
    t.close()


def test_a_resident_in_a_call_is_kept_and_the_wait_ends_in_too_many_residents(name):
    t = residents(name, 2, wait_ms=200)
    a = [t.try_acquire("residents", "a") for _ in range(2)]
    for x in a:
        x.begin_call()
    start = time.monotonic()
    with pytest.raises(fairshm.Refused) as e:
        t.acquire("residents", "b", timeout=5)
    waited = time.monotonic() - start
    assert e.value.reason == "too_many_residents", str(e.value)
    assert 0.19 <= waited < 2.0, waited  # the wait is counted in whole ms
    assert "in a call" in e.value.explanation
    # The whole eviction wait, as the seed says it: nothing became evictable in it.
    assert e.value.waited_ms >= 190, e.value.waited_ms
    assert "nothing became evictable in %d ms" % e.value.waited_ms in e.value.explanation
    assert not any(x.revoked for x in a)
    with pytest.raises(fairshm.Refused) as e:
        t.try_acquire("residents", "b")
    assert e.value.reason == "too_many_residents"
    t.close()


def test_the_victim_is_woken_and_a_call_block_protects(name):
    t = residents(name, 1)
    a = t.try_acquire("residents", "a")
    with a.call():
        with pytest.raises(fairshm.Refused):
            t.try_acquire("residents", "b")
    assert not a.wait_revoked(0.02)
    got = {}

    def waiter():
        start = time.monotonic()
        got["revoked"] = a.wait_revoked(10)
        got["after"] = time.monotonic() - start

    th = threading.Thread(target=waiter)
    th.start()
    time.sleep(0.05)
    b = t.try_acquire("residents", "b")
    th.join(15)
    assert got["revoked"] and got["after"] < 5
    a.release()
    b.release()
    assert t.stats()["pools"][0]["in_use"] == 0
    with pytest.raises(fairshm.NotResident):
        t2 = fairshm.Table.create(name + "-plain", {"pools": [{"name": "requests", "capacity": 1}]})
        try:
            t2.try_acquire("requests", "a").begin_call()
        finally:
            t2.close()
            fairshm.Table.unlink(name + "-plain")
    t.close()


def test_a_wait_for_a_revocation_never_ends_before_its_timeout(name):
    t = residents(name, 2)
    try:
        lease = t.try_acquire("residents", "acme")
        for timeout in (0.013, 0.05, 0.101):
            t0 = time.monotonic()
            assert lease.wait_revoked(timeout) is False
            waited = time.monotonic() - t0
            assert waited >= timeout, (timeout, waited)
        lease.release()
    finally:
        t.close()
