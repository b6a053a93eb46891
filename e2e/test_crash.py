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

import http.client
import itertools
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import fairshm

HERE = Path(__file__).resolve().parent
_n = itertools.count()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def until(what, check, seconds):
    """Polls `check` every 20 ms until it returns something true, which is returned;
    fails the test naming `what` after `seconds`."""
    deadline = time.monotonic() + seconds
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError("%s: not within %.0f s" % (what, seconds))
        time.sleep(0.02)


def get(port, path="/", tenant=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        c.request("GET", path, headers={"X-Tenant": tenant} if tenant else {})
        r = c.getresponse()
        r.read()
        return r.status
    finally:
        c.close()


def dead(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


class Server:
    """A server in a session of its own, on a fresh segment, with a deadline to start;
    stopped (and the segment removed) by `stop`."""

    def __init__(self, cmd, pool, tmp_path):
        self.segment = "fairshm-e2e-crash-%d-%d" % (os.getpid(), next(_n))
        self.port = free_port()
        env = dict(os.environ, FAIRSHM_E2E_SEGMENT=self.segment, E2E_POOL=str(pool))
        self.log_path = tmp_path / ("server-%s.log" % self.segment)
        self.log = open(self.log_path, "w")
        argv = [a.replace("ADDR", "127.0.0.1:%d" % self.port) for a in cmd]
        self.proc = subprocess.Popen(argv, env=env, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True, cwd=HERE)
        self.hung = []
        try:
            until("the server answers", self._ready, 60)
            self.table = fairshm.Table.observer(self.segment)
        except BaseException:
            self.stop()
            raise

    def _ready(self):
        if self.proc.poll() is not None:
            raise AssertionError("the server exited (%s):\n%s" % (self.proc.returncode, self.text()))
        try:
            return get(self.port) == 200  # no tenant: passes through, registers nothing
        except OSError:
            return False

    def text(self):
        self.log.flush()
        return self.log_path.read_text()

    def hang(self, tenant):
        """Sends a request that hangs; returns the pid of the worker that holds its
        permit (from the table)."""
        s = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        s.sendall(("GET /hang HTTP/1.1\r\nHost: x\r\nX-Tenant: %s\r\n\r\n" % tenant).encode())
        self.hung.append(s)

        def holder():
            st = self.table.stats()
            slots = [l["process_slot"] for l in st["leases"] if l["tenant"] == tenant]
            pids = [p["pid"] for p in st["processes"] if p["slot"] in slots]
            return pids[0] if pids else None

        return until("the hanging request holds its permit", holder, 20)

    def in_use(self):
        return self.table.stats()["pools"][0]["in_use"]

    def stop(self):
        for s in self.hung:
            s.close()
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()
        if getattr(self, "table", None) is not None:
            self.table.close()
        try:
            fairshm.Table.unlink(self.segment)
        except fairshm.NotFound:
            pass


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
