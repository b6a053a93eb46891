"""Real pre-fork servers kill a stuck worker, and its permit comes back.

A pre-fork server kills a worker whose request runs past its timeout: Unicorn (Debian's
6.0, `e2e/unicorn.rb`: `timeout 3`) with SIGKILL, so the worker takes no further step
and only fairshm's death detection can return its permit; gunicorn's sync workers
(`--timeout 2`) with SIGABRT, which gunicorn turns into `SystemExit` inside the
application, so the WSGI middleware releases on the way out. Each test opens the
table in the server's master before fork (preload), sends one request that hangs
(`/hang`, the apps `crash.ru` and `crash_app.py`), and waits, with a deadline, for the
server to kill the worker that took it:

- Unicorn, with another worker registered (it served a request meanwhile): the permit
  is back within 2 s of the kill with no request sent after it (the live worker's
  anchor reaps its dead peer);
- Unicorn, the dead worker the only process that ever registered, on a pool of one:
  the next request is served (200), not refused (the acquire reaps first);
- gunicorn: the permit is back when the worker is gone, and the next request is served.

Puma's `worker_timeout` is for a worker that stops answering its master's checks, not
for a slow request (another thread of the worker answers them), so Puma's worker is
killed here the way the kernel's OOM killer kills one: SIGKILL from outside.

- Puma, two workers of three threads each: the worker holding the most of four hanging
  requests' permits (two or more: one per thread) is SIGKILLed; every one of its
  permits is back within 2 s, the other worker's are untouched, and the worker Puma
  forks in its place serves.

    python -m pytest -q e2e/test_crash.py
"""

import os
import shutil
import signal
import sys
import time

import pytest

from harness import HERE, Server, dead, get, until


def unicorn(pool, tmp_path):
    if shutil.which("unicorn") is None:
        pytest.skip("unicorn is not installed (scripts/test-all installs Debian's)")
    return Server(["unicorn", "-c", str(HERE / "unicorn.rb"), "-l", "ADDR", str(HERE / "crash.ru")],
                  pool, tmp_path)


def test_unicorn_kills_a_stuck_worker_and_its_live_peer_returns_the_permit(tmp_path):
    s = unicorn(2, tmp_path)
    try:
        stuck = s.hang("stuck")
        # The other worker serves a request meanwhile (the stuck one accepts nothing),
        # and so registers: a live peer.
        assert get(s.port, tenant="acme") == 200
        assert len(s.table.stats()["processes"]) == 2
        until("unicorn kills the stuck worker (timeout 3)", lambda: dead(stuck), 30)
        killed_at = time.monotonic()
        until("the dead worker's permit is back, with no request sent",
              lambda: s.in_use() == 0, 2)
        assert time.monotonic() - killed_at < 2
        assert "killing" in s.text(), "unicorn's log says it killed the worker"
        assert get(s.port, tenant="stuck") == 200
        until("the request's permit is released", lambda: s.in_use() == 0, 5)
    finally:
        s.stop()


def test_unicorn_serves_the_next_request_after_its_only_holder_is_killed(tmp_path):
    s = unicorn(1, tmp_path)
    try:
        stuck = s.hang("stuck")
        assert len(s.table.stats()["processes"]) == 1
        until("unicorn kills the stuck worker (timeout 3)", lambda: dead(stuck), 30)
        # Nobody else registered: the next acquire reaps the dead holder before it
        # decides, so the pool of one serves it.
        assert get(s.port, tenant="acme") == 200
        # Released when the server closes the body, just after it sent the response.
        until("the request's permit is released", lambda: s.in_use() == 0, 5)
    finally:
        s.stop()


def test_puma_worker_killed_with_permits_in_several_threads_returns_them_all(tmp_path):
    if shutil.which("puma") is None:
        pytest.skip("puma is not installed (scripts/test-all installs Debian's)")
    s = Server(["puma", "--workers", "2", "--threads", "3:3", "--preload", "--bind", "tcp://ADDR",
                "--environment", "production", "--config", str(HERE / "puma.rb"),
                str(HERE / "crash.ru")], 4, tmp_path)
    try:
        holders = [s.hang("stuck-%d" % k) for k in range(4)]
        assert s.in_use() == 4
        victim = max(set(holders), key=holders.count)
        mine = holders.count(victim)
        assert mine >= 2, holders  # four requests on two workers
        os.kill(victim, signal.SIGKILL)
        until("puma's master reaps the killed worker", lambda: dead(victim), 10)
        killed_at = time.monotonic()
        until("every permit of the killed worker is back, with no request sent",
              lambda: s.in_use() == 4 - mine, 2)
        assert time.monotonic() - killed_at < 2
        st = s.table.stats()
        assert victim not in [p["pid"] for p in st["processes"]], st["processes"]
        assert len(st["leases"]) == 4 - mine, st["leases"]
        # The worker forked in its place serves (the pool has room again).
        until("a request is served after the kill", lambda: get(s.port, tenant="acme") == 200, 30)
    finally:
        # Puma's SIGTERM would wait for the hanging requests: kill its workers first
        # (their master reaps them; those it forks in their place are idle).
        for pid in children(s.proc.pid):
            os.kill(pid, signal.SIGKILL)
        s.stop()


def children(pid):
    """The pids of process `pid`'s children, from /proc."""
    out = []
    for d in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open("/proc/%s/stat" % d) as f:
                stat = f.read()
        except (OSError, ValueError):
            continue
        # The ppid is the second field after the command's closing parenthesis.
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            out.append(int(d))
    return out


def test_gunicorn_aborts_a_stuck_worker_and_the_middleware_releases(tmp_path):
    s = Server([sys.executable, "-m", "gunicorn", "--workers", "2", "--timeout", "2", "--preload",
                "--bind", "ADDR", "--log-level", "warning", "crash_app:app"], 1, tmp_path)
    try:
        stuck = s.hang("stuck")
        until("gunicorn aborts the stuck worker (--timeout 2)", lambda: dead(stuck), 30)
        until("the aborted worker's permit is back", lambda: s.in_use() == 0, 2)
        assert get(s.port, tenant="acme") == 200
        until("the request's permit is released", lambda: s.in_use() == 0, 5)
    finally:
        s.stop()
