"""Forked workers, as under a pre-fork server: a table opened before fork works in
every worker with no hook, the pool bound holds, and a killed worker's permits return."""

import mmap
import os
import select
import signal
import struct
import textwrap
import time

import fairshm
from conftest import run_script, wait_child

CAP = 3
WORKERS = 6


def test_forked_workers_never_exceed_the_pool(name):
    table = fairshm.Table.create(name, {"pools": [{"name": "requests", "capacity": CAP}]})
    # Shared counters: holding now, most at once, grants. Only one worker touches them
    # at a time: each holds a permit, so `holding` counts permits; a lock keeps the
    # read-modify-write of the counters whole.
    shared = mmap.mmap(-1, 64)
    lock_r, lock_w = os.pipe()
    os.write(lock_w, b"x")
    pids = []
    for i in range(WORKERS):
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                signal.alarm(30)
                tenant = "acme" if i % 2 else "globex"
                for _ in range(300):
                    try:
                        lease = table.try_acquire("requests", tenant, hold_ms=1)
                    except fairshm.Refused:
                        continue
                    os.read(lock_r, 1)
                    holding, most, grants = struct.unpack_from("qqq", shared, 0)
                    holding += 1
                    struct.pack_into("qqq", shared, 0, holding, max(most, holding), grants + 1)
                    os.write(lock_w, b"x")
                    time.sleep(0.0002)
                    os.read(lock_r, 1)
                    holding, most, grants = struct.unpack_from("qqq", shared, 0)
                    struct.pack_into("qqq", shared, 0, holding - 1, most, grants)
                    os.write(lock_w, b"x")
                    lease.release()
            except BaseException:
                code = 1
            os._exit(code)
        pids.append(pid)
    for pid in pids:
        status = wait_child(pid)
        assert os.waitstatus_to_exitcode(status) == 0
    holding, most, grants = struct.unpack_from("qqq", shared, 0)
    assert holding == 0 and grants > 0
    assert 1 <= most <= CAP, "at most %d held at once, saw %d" % (CAP, most)
    assert table.stats()["pools"][0]["in_use"] == 0
    table.close()


def test_a_killed_worker_gives_its_permits_back(name):
    table = fairshm.Table.create(name, {"pools": [{"name": "requests", "capacity": CAP}]})
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            table.try_acquire("requests", "acme")
            table.try_acquire("requests", "acme")
            os.write(w, b"held")
            time.sleep(60)
        finally:
            os._exit(0)
    os.close(w)  # so that a child that dies early gives EOF, not a wait
    try:
        table.register()  # a peer, as the other workers of a server are
        ready, _, _ = select.select([r], [], [], 30)
        assert ready and os.read(r, 4) == b"held", "the child took its permits"
        assert table.stats()["pools"][0]["in_use"] == 2
    finally:
        os.kill(pid, signal.SIGKILL)  # killed and reaped even if a check failed
        wait_child(pid)
    # Nobody blocks and nobody reaps by hand: our anchor notices the death.
    deadline = time.monotonic() + 5
    while table.stats()["pools"][0]["in_use"] != 0:
        assert time.monotonic() < deadline, "the killed worker's permits came back"
        time.sleep(0.01)
    table.close()


def test_a_child_forked_while_a_thread_waits_closes_its_table_at_once(name):
    # The child inherits the handle's count of calls in flight, with the parent's
    # waiting thread counted in, but not that thread: its close must not wait for it.
    # In a child process of the test, which forks from a thread-holding process.
    script = textwrap.dedent(
        """
        import os, sys, threading, time
        from ctypes import byref, c_uint64
        import fairshm
        from fairshm import _lib
        t = fairshm.Table.create(sys.argv[1], {"pools": [{"name": "requests", "capacity": 1}]})
        held = t.try_acquire("requests", "acme")
        p, g, h = t.pool("requests"), t.tenant("globex"), t._h
        def waiter():  # one call of 3 s, in flight when the fork comes
            lease, refusal = c_uint64(), _lib.Refusal()
            _lib.lib.fairshm_acquire(h, p, g, 1, 0, 3000, 0, None, byref(lease), byref(refusal))
        th = threading.Thread(target=waiter)
        th.start()
        time.sleep(0.3)
        pid = os.fork()
        if pid == 0:
            t0 = time.monotonic()
            t.close()
            os.write(1, b"child closed in %d ms\\n" % ((time.monotonic() - t0) * 1000))
            os._exit(0)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            got, status = os.waitpid(pid, os.WNOHANG)
            if got:
                print("child status", status, flush=True)
                break
            time.sleep(0.01)
        else:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            print("child hung", flush=True)
        th.join()
        held.release()
        t.close()
        """
    )
    rc, out, err = run_script(script, name)
    assert rc == 0, "the test process ended with %d: %s" % (rc, err[-500:])
    assert "child status 0" in out, out
    closed_ms = int(out.split("child closed in ")[1].split()[0])
    assert closed_ms < 1000, "the child waited %d ms for its parent's call" % closed_ms
