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

Puma is not here: its `worker_timeout` is for a worker that stops answering its
master's checks, not for a slow request (another thread of the worker answers them).

    python -m pytest -q e2e/test_crash.py
"""

import shutil
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
