import select
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import fairshm
from conftest import run_script


def fill(table, n=4):
    return [table.try_acquire("requests", "acme") for _ in range(n)]


def test_acquire_times_out_with_a_timed_out_refusal(table):
    held = fill(table)
    t0 = time.monotonic()
    with pytest.raises(fairshm.Refused) as e:
        table.acquire("requests", "acme", timeout=0.35)
    waited = time.monotonic() - t0
    assert e.value.reason == "timed_out"
    assert 0.3 <= waited < 2.0
    # The whole wait, not the last slice's (the library waits in slices of 100 ms).
    assert 300 <= e.value.waited_ms <= waited * 1000 + 1, e.value.waited_ms
    assert "timed out after %d ms" % e.value.waited_ms in e.value.explanation
    # Only the end of the whole wait is counted, not each slice's; and the request's
    # refusal by the rule once, not once a slice (a slice after the first continues
    # the wait): it is one request.
    pool = table.stats()["pools"][0]
    timed_out = sum(dict(t["refusals"]).get("timed_out", 0) for t in pool["tenants"])
    assert timed_out == 1, pool["tenants"]
    (acme,) = pool["tenants"]
    assert sum(n for k, n in acme["refusals"] if k != "timed_out") == 1, acme["refusals"]
    assert (acme["hints"], acme["early_returns"]) == (1, 0), acme
    for lease in held:
        lease.release()


def test_a_wait_for_room_takes_one_token_across_its_slices(table):
    # One request a second, and a wait of 350 ms (four slices of the library's) on a
    # full pool: one request, so one token, taken at its first call. Before, each
    # slice's first try took another and was refused by the tenant's own rate, and the
    # wait, put to sleep until the next token, was served a second late.
    table.set_rates("light", requests_per_s=1)
    held = fill(table)
    freed = threading.Timer(0.35, held[0].release)
    freed.start()
    try:
        table.acquire("requests", "light", timeout=20).release()
    finally:
        freed.join()
    (light,) = [t for t in table.stats()["tenants"] if t["name"] == "light"]
    assert light["rates"]["rate_limited"] == 0, light
    assert light["rates"]["request_tokens"] == 0, light
    (mine,) = [t for t in table.stats()["pools"][0]["tenants"] if t["name"] == "light"]
    assert mine["refusals"] == [["pool_full", 1]], mine
    for lease in held[1:]:
        lease.release()


def test_a_wait_never_ends_before_its_timeout(table):
    # The wait goes in slices of whole ms; the last one is rounded up, so the wait
    # ends at its timeout or after it (rounded down, 50 ms was over after 49).
    held = fill(table)
    for timeout in (0.013, 0.05, 0.101, 0.2345):
        t0 = time.monotonic()
        with pytest.raises(fairshm.Refused) as e:
            table.acquire("requests", "acme", timeout=timeout)
        waited = time.monotonic() - t0
        assert e.value.reason == "timed_out"
        assert waited >= timeout, (timeout, waited)
        assert e.value.waited_ms >= int(timeout * 1000), (timeout, e.value.waited_ms)
    for lease in held:
        lease.release()


def test_a_release_wakes_a_waiter_and_the_gil_is_free_meanwhile(table):
    held = fill(table)
    ticks = []
    stop = threading.Event()

    def ticker():
        while not stop.is_set():
            ticks.append(1)
            time.sleep(0.001)

    def releaser():
        time.sleep(0.2)
        held.pop().release()

    threads = [threading.Thread(target=ticker), threading.Thread(target=releaser)]
    for t in threads:
        t.start()
    t0 = time.monotonic()
    lease = table.acquire("requests", "acme", timeout=10)
    waited = time.monotonic() - t0
    stop.set()
    for t in threads:
        t.join()
    assert 0.15 <= waited < 5
    assert len(ticks) > 20, "other Python threads ran while acquire waited"
    lease.release()
    for lease in held:
        lease.release()


def test_cancel_from_another_thread(table):
    held = fill(table)
    cancel = fairshm.Cancel()
    threading.Timer(0.15, cancel.cancel).start()
    t0 = time.monotonic()
    with pytest.raises(fairshm.Refused) as e:
        table.acquire("requests", "acme", timeout=30, cancel=cancel)
    assert e.value.reason == "cancelled"
    assert time.monotonic() - t0 < 5
    for lease in held:
        lease.release()


def test_ctrl_c_interrupts_a_blocking_acquire(name):
    # Python turns SIGINT into KeyboardInterrupt only when it starts with SIGINT's
    # default action; a shell without job control starts a background job with SIGINT
    # ignored, and a test run from one would then wait out the timeout. The child puts
    # Python's own handler in place, so the test checks the binding, not its launcher.
    script = textwrap.dedent(
        """
        import signal, sys, time, fairshm
        signal.signal(signal.SIGINT, signal.default_int_handler)
        t = fairshm.Table.create(sys.argv[1], {"pools": [{"name": "requests", "capacity": 1}]})
        held = t.try_acquire("requests", "acme")
        print("waiting", flush=True)
        try:
            t.acquire("requests", "acme", timeout=60)
        except KeyboardInterrupt:
            print("interrupted", flush=True)
        """
    )
    p = subprocess.Popen([sys.executable, "-c", script, name], stdout=subprocess.PIPE, text=True)
    try:
        ready, _, _ = select.select([p.stdout], [], [], 30)
        assert ready and p.stdout.readline().strip() == "waiting"
        time.sleep(0.2)
        t0 = time.monotonic()
        p.send_signal(signal.SIGINT)
        out, _ = p.communicate(timeout=20)
        assert "interrupted" in out
        assert time.monotonic() - t0 < 2
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_closing_the_table_while_another_thread_waits_on_it(name):
    # The close waits for the waiter's call (a slice of at most WAIT_SLICE_MS) instead of
    # unmapping the table under it, which crashed the process (SIGSEGV); the waiter is
    # then told the table is closed. In a child process, so that a crash fails the test
    # rather than ending the run.
    script = textwrap.dedent(
        """
        import sys, threading, time, fairshm
        t = fairshm.Table.create(sys.argv[1], {"pools": [{"name": "requests", "capacity": 1}]})
        held = t.try_acquire("requests", "acme")
        got = []
        def waiter():
            try:
                t.acquire("requests", "globex", timeout=10)
                got.append("granted")
            except fairshm.Error as e:
                got.append(e.kind + ": " + str(e))
        th = threading.Thread(target=waiter)
        th.start()
        time.sleep(0.3)
        t.close()
        th.join(10)
        print(got[0] if got else "still waiting", flush=True)
        try:
            held.release()
        except fairshm.Error as e:
            print("release:", e.kind, flush=True)
        """
    )
    rc, out, err = run_script(script, name)
    assert rc == 0, "the child ended with %d: %s" % (rc, err[-500:])
    lines = out.splitlines()
    assert lines[0].startswith("invalid_request: ") and "is closed" in lines[0], out
    assert lines[1] == "release: invalid_request", out


def test_a_wait_for_a_token_past_its_deadline_is_refused_at_once(table):
    # 100 s in work debt, asking with a 20 s timeout: no token comes in time, so the
    # wait ends (after at most one slice) with the debt's own refusal, not timed_out.
    table.set_rates("acme", work_units_per_s=1000)
    table.try_acquire("requests", "acme").release()
    assert table.charge("acme", 101000) > 99000
    t0 = time.monotonic()
    with pytest.raises(fairshm.Refused) as e:
        table.acquire("requests", "acme", timeout=20)
    assert time.monotonic() - t0 < 10, "waited for a token 100 s away"
    assert e.value.reason == "work_debt", e.value.explanation
    assert e.value.retry_after_ms > 20000
    assert "timed out" not in e.value.explanation
    # A token within the timeout but past a slice is waited for, across slices.
    table.set_rates("acme", requests_per_s=4)
    while True:
        try:
            table.try_acquire("requests", "acme").release()
        except fairshm.Refused as r:
            assert r.reason == "rate_limited"
            break
    table.set_rates("acme", requests_per_s=2)  # the next token, 500 ms away at most
    table.acquire("requests", "acme", timeout=5).release()
