import itertools
import os

import pytest

import fairshm

_n = itertools.count()


@pytest.fixture
def name():
    """A segment name unique to this test, removed afterwards."""
    n = "fairshm-test-py-%d-%d" % (os.getpid(), next(_n))
    yield n
    try:
        fairshm.Table.unlink(n)
    except fairshm.NotFound:
        pass


@pytest.fixture
def table(name):
    t = fairshm.Table.create(name, {"pools": [{"name": "requests", "capacity": 4}]})
    yield t
    t.close()


def wait_child(pid, timeout=30.0):
    """Waits for a child with a deadline; kills it if the deadline passes."""
    import signal
    import time

    deadline = time.monotonic() + timeout
    while True:
        got, status = os.waitpid(pid, os.WNOHANG)
        if got:
            return status
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise AssertionError("child %d did not finish in %.0f s" % (pid, timeout))
        time.sleep(0.02)


def run_script(script, *args, timeout=30):
    """Runs ``script`` in a child Python with ``args``, with a deadline (killed at it);
    returns its exit status, standard output and standard error. A crash of the child
    (a negative status: the signal) fails the test that asserts on it, not the run."""
    import subprocess
    import sys

    p = subprocess.Popen([sys.executable, "-c", script, *args], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        out, err = p.communicate(timeout=timeout)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    return p.returncode, out, err
