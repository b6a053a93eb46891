"""What the server tests (`test_crash.py`, `test_asgi.py`, and `run.py`) share: a server started on a
fresh segment in a session of its own, with deadlines on every wait, and requests to it.
"""

import http.client
import itertools
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

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


def get(port, path="/", tenant=None, full=False):
    """The status of a GET of `path` (as tenant `tenant`); with `full`, the status,
    the headers (a dict, names in lower case) and the body."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        c.request("GET", path, headers={"X-Tenant": tenant} if tenant else {})
        r = c.getresponse()
        body = r.read()
        if full:
            return r.status, {k.lower(): v for k, v in r.getheaders()}, body
        return r.status
    finally:
        c.close()


def stop_session(proc):
    """Stops a server started in a session of its own (`start_new_session`), and every
    process of it: SIGTERM, then SIGKILL after 20 s."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def dead(pid):
    """Whether process `pid` is gone (a server's master reaps its killed workers at
    once, so a zombie does not linger)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


class Server:
    """A server in a session of its own, on a fresh segment, with a deadline to start;
    stopped (and the segment removed) by `stop`."""

    def __init__(self, cmd, pool, tmp_path, **env_more):
        self.segment = "fairshm-e2e-srv-%d-%d" % (os.getpid(), next(_n))
        self.port = free_port()
        env = dict(os.environ, FAIRSHM_E2E_SEGMENT=self.segment, E2E_POOL=str(pool), **env_more)
        self.log_path = tmp_path / ("server-%s.log" % self.segment)
        self.log = open(self.log_path, "w")
        # ADDR and PORT in `cmd` stand for where the server is to listen.
        argv = [a.replace("ADDR", "127.0.0.1:%d" % self.port).replace("PORT", str(self.port))
                for a in cmd]
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
        stop_session(self.proc)
        self.log.close()
        if getattr(self, "table", None) is not None:
            self.table.close()
        try:
            fairshm.Table.unlink(self.segment)
        except fairshm.NotFound:
            pass
