"""The ASGI middleware under a real ASGI server: uvicorn (Debian's), one process serving
many requests at once (`asgi_app.py`: each `/slow` request awaits 3 s). Each
request holds its permit across its awaits, until its response is sent:

- on a pool of 2, three concurrent requests of one tenant: two are served together and
  the third, asked while they hold the pool, gets 429 with Retry-After;
- with 2 lease slots a process on a pool of 8 (`leases_per_process`), a third
  concurrent request finds the process with none left: 503 with Retry-After: 1, not
  a 500; the next request, once the two are done, is served.

    python -m pytest -q e2e/test_asgi.py
"""

import json
import sys
import threading

import pytest

from harness import Server, get, until


def uvicorn(tmp_path, pool, **env):
    pytest.importorskip("uvicorn", reason="uvicorn is not installed (scripts/test-all installs Debian's)")
    return Server([sys.executable, "-m", "uvicorn", "--host", "127.0.0.1", "--port", "PORT",
                   "--log-level", "warning", "asgi_app:app"], pool, tmp_path, **env)


def concurrently(port, n, tenant):
    """Starts `n` slow requests of `tenant` on threads; returns the threads and the list
    their answers land in."""
    answers = []

    def one():
        answers.append(get(port, "/slow", tenant, full=True))

    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
    return threads, answers


def test_uvicorn_holds_each_permit_across_awaits_and_answers_429(tmp_path):
    s = uvicorn(tmp_path, 2, E2E_SLOW_S="3")
    try:
        threads, answers = concurrently(s.port, 2, "acme")
        until("both slow requests hold their permits", lambda: s.in_use() == 2, 10)
        status, headers, body = get(s.port, "/slow", "acme", full=True)
        assert status == 429
        assert int(headers["retry-after"]) >= 1 and int(headers["retry-after-ms"]) >= 1
        assert json.loads(body)["reason"] in ("over_share", "pool_full")
        for t in threads:
            t.join(30)
        assert [a[0] for a in answers] == [200, 200]
        until("the permits are released", lambda: s.in_use() == 0, 5)
    finally:
        s.stop()


def test_uvicorn_answers_503_when_its_process_has_no_lease_slot_left(tmp_path):
    s = uvicorn(tmp_path, 8, E2E_SLOW_S="3", E2E_LEASES="2")
    try:
        threads, answers = concurrently(s.port, 2, "acme")
        until("both slow requests hold their permits", lambda: s.in_use() == 2, 10)
        status, headers, body = get(s.port, "/slow", "globex", full=True)
        assert status == 503
        assert headers["retry-after"] == "1"
        doc = json.loads(body)
        assert doc["error"] == "lease_table_full" and "leases_per_process" in doc["explanation"]
        for t in threads:
            t.join(30)
        assert [a[0] for a in answers] == [200, 200]
        until("the permits are released", lambda: s.in_use() == 0, 5)
        assert get(s.port, "/", "globex") == 200
        assert "no lease slot left" in s.text(), "the first 503 logs a warning"
    finally:
        s.stop()
