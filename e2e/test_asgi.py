"""The ASGI middleware under a real ASGI server: uvicorn (Debian's), one process serving
many requests at once (`asgi_app.py`: each `/slow` request awaits 3 s). Each
request holds its permit across its awaits, until its response is sent:

- on a pool of 2, three concurrent requests of one tenant: two are served together and
  the third, asked while they hold the pool, gets 429 with Retry-After;
- with 2 lease slots a process on a pool of 8 (`leases_per_process`), a third
  concurrent request finds the process with none left: 503 with Retry-After: 1, not
  a 500; the next request, once the two are done, is served;
- on a pool of 1, a websocket holds the permit for as long as it is open: a second one
  is turned away before it is accepted (403: uvicorn closes a refused handshake so),
  and once the first closes, the permit is back and a third is accepted.

    python -m pytest -q e2e/test_asgi.py
"""

import base64
import json
import os
import socket
import struct
import sys
import threading

import pytest

from harness import Server, get, until


def uvicorn(tmp_path, pool, **env):
    pytest.importorskip("uvicorn", reason="uvicorn is not installed (scripts/test-all installs Debian's)")
    pytest.importorskip("wsproto", reason="wsproto (uvicorn's websockets) is not installed")
    return Server([sys.executable, "-m", "uvicorn", "--host", "127.0.0.1", "--port", "PORT",
                   "--ws", "wsproto", "--log-level", "warning", "asgi_app:app"], pool, tmp_path, **env)


def websocket(port, tenant):
    """Opens a websocket as `tenant` (a bare handshake); returns the socket and the
    status of the server's answer (101: accepted)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(("GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\nX-Tenant: %s\r\n\r\n"
               % (base64.b64encode(os.urandom(16)).decode(), tenant)).encode())
    head = b""
    while b"\r\n" not in head:
        got = s.recv(1024)
        if not got:
            break
        head += got
    return s, int(head.split(b" ", 2)[1])


def close_websocket(s):
    """Closes an accepted websocket as a client does: a close frame (code 1000, masked,
    as a client's frames must be), then the socket. (Debian's uvicorn 0.17 tells the
    app nothing of a connection that ends without one.)"""
    payload = struct.pack("!H", 1000)
    mask = os.urandom(4)
    s.sendall(bytes([0x88, 0x80 | len(payload)]) + mask
              + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))
    s.close()


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


def test_uvicorn_holds_a_permit_for_each_open_websocket(tmp_path):
    s = uvicorn(tmp_path, 1)
    try:
        first, status = websocket(s.port, "acme")
        assert status == 101
        until("the open websocket holds the permit", lambda: s.in_use() == 1, 10)
        second, status = websocket(s.port, "acme")
        second.close()
        assert status == 403, "refused before it is accepted"
        assert s.in_use() == 1
        close_websocket(first)
        until("the closed websocket's permit is back", lambda: s.in_use() == 0, 10)
        third, status = websocket(s.port, "acme")
        close_websocket(third)
        assert status == 101
    finally:
        s.stop()
