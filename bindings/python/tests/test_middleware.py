import asyncio
import json

import pytest

import fairshm
from conftest import run_script
from fairshm.asgi import FairshmASGIMiddleware
from fairshm.wsgi import FairshmMiddleware


def in_use(table):
    return table.stats()["pools"][0]["in_use"]


class StartResponse:
    def __call__(self, status, headers, exc_info=None):
        self.status = status
        self.headers = dict(headers)


def wsgi_app(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"hello"]


def tenant_of(environ):
    return environ.get("HTTP_X_TENANT")


def asgi_channel(first=None):
    """A fake ASGI server's side of one connection: the list of the messages the app
    sends, its ``send``, and a ``receive`` that hands it ``first`` (default: an HTTP
    request)."""
    sent = []

    async def send(msg):
        sent.append(msg)

    async def receive():
        return first or {"type": "http.request"}

    return sent, send, receive


def test_wsgi_holds_the_permit_until_close_and_answers_429(table):
    mw = FairshmMiddleware(wsgi_app, table, "requests", tenant_of)
    bodies = []
    for _ in range(4):
        sr = StartResponse()
        bodies.append(mw({"HTTP_X_TENANT": "acme"}, sr))
        assert sr.status == "200 OK"
    assert in_use(table) == 4
    sr = StartResponse()
    body = b"".join(mw({"HTTP_X_TENANT": "acme"}, sr))
    assert sr.status.startswith("429")
    ms = int(sr.headers["Retry-After-Ms"])
    assert ms >= 1
    assert int(sr.headers["Retry-After"]) == max(1, -(-ms // 1000))
    doc = json.loads(body)
    assert doc["reason"] == "over_share" and doc["retry_after_ms"] == ms
    assert "acme" in doc["explanation"]
    for b in bodies:
        assert b"".join(b) == b"hello"
        b.close()
    assert in_use(table) == 0


def test_wsgi_streaming_body_releases_on_close_only(table):
    closed = []

    class Stream:
        def __iter__(self):
            yield b"a"
            yield b"b"

        def close(self):
            closed.append(True)

    def app(environ, start_response):
        start_response("200 OK", [])
        return Stream()

    mw = FairshmMiddleware(app, table, "requests", tenant_of)
    body = mw({"HTTP_X_TENANT": "acme"}, StartResponse())
    assert list(body) == [b"a", b"b"]
    assert in_use(table) == 1, "still held: the server has not closed the body"
    body.close()
    assert closed == [True] and in_use(table) == 0


def test_wsgi_releases_when_the_app_raises_and_passes_untenanted(table):
    def boom(environ, start_response):
        raise RuntimeError("boom")

    mw = FairshmMiddleware(boom, table, "requests", tenant_of)
    with pytest.raises(RuntimeError):
        mw({"HTTP_X_TENANT": "acme"}, StartResponse())
    assert in_use(table) == 0
    plain = FairshmMiddleware(wsgi_app, table, "requests", tenant_of)
    sr = StartResponse()
    assert list(plain({}, sr)) == [b"hello"] and in_use(table) == 0


def test_asgi_holds_until_the_response_is_sent_and_answers_429(table):
    seen_in_use = []

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        seen_in_use.append(in_use(table))
        await send({"type": "http.response.body", "body": b"ok"})

    def tenant(scope):
        return dict(scope["headers"]).get(b"x-tenant", b"").decode() or None

    mw = FairshmASGIMiddleware(app, table, "requests", tenant)

    async def run():
        held = [table.try_acquire("requests", "acme") for _ in range(3)]
        sent, send, receive = asgi_channel()

        scope = {"type": "http", "headers": [(b"x-tenant", b"acme")]}
        await mw(scope, receive, send)
        assert sent[0]["status"] == 200 and seen_in_use == [4]
        assert in_use(table) == 3
        held.append(table.try_acquire("requests", "acme"))
        sent.clear()
        await mw(scope, receive, send)
        assert sent[0]["status"] == 429
        headers = dict(sent[0]["headers"])
        assert int(headers[b"retry-after"]) >= 1 and int(headers[b"retry-after-ms"]) >= 1
        assert json.loads(sent[1]["body"])["reason"] == "over_share"
        for lease in held:
            lease.release()

    asyncio.run(run())
    assert in_use(table) == 0


def test_a_middleware_with_a_wrong_number_fails_at_start_up(table):
    for mw in (FairshmMiddleware, FairshmASGIMiddleware):
        with pytest.raises(ValueError):
            mw(None, table, pool="requests", tenant=lambda _: "acme", units=-1)
        with pytest.raises(ValueError):
            mw(None, table, pool="requests", tenant=lambda _: "acme", hold_ms=-1)


def test_a_middleware_for_a_pool_the_table_lacks_fails_at_start_up(table):
    # Not a 500 on every request: the pool is resolved when the middleware is built.
    for mw in (FairshmMiddleware, FairshmASGIMiddleware):
        with pytest.raises(fairshm.UnknownPool) as e:
            mw(None, table, pool="request", tenant=lambda _: "acme")
        assert '"request"' in str(e.value) and "requests" in str(e.value)
    assert in_use(table) == 0


def test_a_middleware_asking_more_than_its_pool_can_hold_fails_at_start_up(table):
    # Not a 500 on every request: the units are checked against the pool when the
    # middleware is built (the table's pool "requests" holds 4), claiming nothing.
    for mw in (FairshmMiddleware, FairshmASGIMiddleware):
        with pytest.raises(fairshm.UnitsExceedCapacity) as e:
            mw(None, table, pool="requests", tenant=lambda _: "acme", units=5)
        assert "5 units" in str(e.value) and "never" in str(e.value)
        mw(None, table, pool="requests", tenant=lambda _: "acme", units=4)
    assert table.stats()["tables"]["tenants"]["used"] == 0
    assert in_use(table) == 0


def test_check_units_says_what_an_acquire_would_never_be_granted(table):
    assert table.check_units("requests", 4) is None
    with pytest.raises(fairshm.UnitsExceedCapacity):
        table.check_units("requests", 5)
    with pytest.raises(fairshm.InvalidRequest):
        table.check_units("requests", 0)
    with pytest.raises(fairshm.UnknownPool):
        table.check_units("nope", 1)
    assert table.stats()["tables"]["tenants"]["used"] == 0


def test_both_wsgi_answers_pass_the_pep_3333_validator(table):
    # wsgiref's validator checks start_response, the headers, the body and its close
    # (its warnings made errors here).
    import warnings
    from wsgiref.util import setup_testing_defaults
    from wsgiref.validate import WSGIWarning, validator

    warnings.simplefilter("error", WSGIWarning)

    app = validator(FairshmMiddleware(validator(wsgi_app), table, "requests", tenant_of))

    def call():
        environ = {"HTTP_X_TENANT": "acme", "QUERY_STRING": ""}
        setup_testing_defaults(environ)
        sr = StartResponse()
        return sr, app(environ, sr)

    held = [call()[1] for _ in range(4)]
    sr, body = call()
    assert sr.status.startswith("429") and int(sr.headers["Retry-After"]) >= 1
    assert json.loads(b"".join(body))["reason"] == "over_share"
    body.close()
    for b in held:
        assert b"".join(b) == b"hello"
        b.close()
    assert in_use(table) == 0


def test_queued_us_reads_the_stamps_front_proxies_send():
    from fairshm._http import queued_us

    now = 1_700_000_000_000_000  # µs
    for stamp in ("t=1699999999.970", "1699999999.970", b"t=1699999999.97",
                  "t=1699999999970", "t=1699999999970000", " t=1699999999970 "):
        assert abs(queued_us(stamp, now) - 30_000) <= 1, stamp
    assert queued_us("t=1700000001.5", now) == 0  # a proxy's clock ahead of ours
    for bad in (None, "", "t=", "soon", "t=0", "-5", "nan", "inf", "t=1600000000"):
        assert queued_us(bad, now) is None, bad


def test_wsgi_passes_the_server_queue_and_a_long_wait_stretches_the_hint(table):
    import time

    def stamp(ms_ago):
        return "t=%.6f" % (time.time() - ms_ago / 1000.0)

    mw = FairshmMiddleware(wsgi_app, table, "requests", tenant_of)
    bodies = [mw({"HTTP_X_TENANT": "acme", "HTTP_X_REQUEST_START": stamp(0)}, StartResponse())
              for _ in range(4)]
    # Over its share, refused: a first refusal's own wait stretches nothing (no refused
    # request of its tenant is waiting, so its tenant's retries are not what it waited
    # behind)...
    sr = StartResponse()
    doc = json.loads(b"".join(mw({"HTTP_X_TENANT": "acme", "HTTP_X_REQUEST_START": stamp(30)}, sr)))
    assert sr.status.startswith("429") and "server's queue" not in doc["explanation"], doc
    # ...and with a backlog of refused requests (two more turns promised), a request that
    # waited 30 ms in the server's queue has its hint stretched 8x (1 + its wait in whole
    # ms, at most 8 at once), and said so.
    for _ in range(2):
        with pytest.raises(fairshm.Refused):
            table.try_acquire("requests", "acme")
    sr = StartResponse()
    doc = json.loads(b"".join(mw({"HTTP_X_TENANT": "acme", "HTTP_X_REQUEST_START": stamp(30)}, sr)))
    assert sr.status.startswith("429")
    assert "server's queue" in doc["explanation"] and "8.00x" in doc["explanation"], doc
    with pytest.raises(fairshm.Refused) as r:
        table.try_acquire("requests", "acme", queued_us=30_000)
    assert r.value.queue_stretch_pct == 800 and r.value.server_queue_us >= 29_000
    # Without the header, or with its reading turned off, nothing is stretched.
    for m, env in ((mw, {"HTTP_X_TENANT": "acme"}),
                   (FairshmMiddleware(wsgi_app, table, "requests", tenant_of, queue_header=False),
                    {"HTTP_X_TENANT": "acme", "HTTP_X_REQUEST_START": stamp(30)})):
        sr = StartResponse()
        doc = json.loads(b"".join(m(env, sr)))
        assert sr.status.startswith("429") and "server's queue" not in doc["explanation"], doc
    with pytest.raises(ValueError):
        table.note_queue("requests", -1)
    table.note_queue("requests", 500)
    for b in bodies:
        b.close()
    assert in_use(table) == 0


# The tenant's name comes from the request: one the table cannot take is the request's
# fault (400, saying why), not a 500 with a traceback; nothing is claimed or held.
BAD_NAMES = ["", "t" * 49, "acme\x00evil"]


def test_wsgi_answers_400_to_a_tenant_name_the_table_cannot_take(table):
    mw = FairshmMiddleware(wsgi_app, table, "requests", tenant_of)
    for name in BAD_NAMES:
        sr = StartResponse()
        body = b"".join(mw({"HTTP_X_TENANT": name}, sr))
        assert sr.status == "400 Bad Request", name
        doc = json.loads(body)
        assert doc["error"] == "invalid_tenant" and "invalid tenant name" in doc["explanation"]
        assert int(sr.headers["Content-Length"]) == len(body)
    assert in_use(table) == 0 and table.stats()["tenants"] == []


def test_asgi_answers_400_to_a_tenant_name_the_table_cannot_take(table):
    async def app(scope, receive, send):
        raise AssertionError("a request with a bad tenant name reached the app")

    mw = FairshmASGIMiddleware(app, table, "requests", lambda scope: scope["tenant"])

    async def run():
        for name in BAD_NAMES:
            sent, send, _ = asgi_channel()

            await mw({"type": "http", "headers": [], "tenant": name}, None, send)
            assert sent[0]["status"] == 400, name
            assert json.loads(sent[1]["body"])["error"] == "invalid_tenant"

    asyncio.run(run())
    assert in_use(table) == 0 and table.stats()["tenants"] == []


# A process holds at most `leases_per_process` leases: an async server (or a worker of
# many threads) with more requests in flight finds none left. That bound is the
# server's and lasts until one of its requests ends: 503 with Retry-After, not a 500.
def assert_table_full(sr, body, error, key, retry_after):
    """A middleware's answer to a full table: 503, ``Retry-After`` as given (``None``:
    absent), a JSON body naming the ``error`` and, in its explanation, the config ``key``."""
    assert sr.status == "503 Service Unavailable"
    assert sr.headers.get("Retry-After") == retry_after
    assert int(sr.headers["Content-Length"]) == len(body)
    doc = json.loads(body)
    assert doc["error"] == error
    assert key in doc["explanation"]


def small_lease_table(name):
    return fairshm.Table.create(
        name, {"pools": [{"name": "requests", "capacity": 8}], "leases_per_process": 2}
    )


def test_wsgi_answers_503_when_this_process_has_no_lease_slot_left(name, caplog):
    t = small_lease_table(name)
    try:
        mw = FairshmMiddleware(wsgi_app, t, "requests", tenant_of)
        bodies = [mw({"HTTP_X_TENANT": "acme"}, StartResponse()) for _ in range(2)]
        with caplog.at_level("WARNING", logger="fairshm"):
            for _ in range(2):
                sr = StartResponse()
                body = b"".join(mw({"HTTP_X_TENANT": "globex"}, sr))
                assert_table_full(sr, body, "lease_table_full", "leases_per_process", "1")
        warned = [r for r in caplog.records if r.name == "fairshm"]
        assert len(warned) == 1 and "leases_per_process" in warned[0].getMessage()
        assert in_use(t) == 2
        # The operator's view of it: this process has taken both of its lease slots.
        assert t.stats()["tables"]["leases_in_one_process"] == {"used": 2, "size": 2}
        bodies.pop().close()
        sr = StartResponse()
        body = mw({"HTTP_X_TENANT": "globex"}, sr)
        assert sr.status == "200 OK" and in_use(t) == 2
        body.close()
        bodies.pop().close()
        assert in_use(t) == 0
    finally:
        t.close()


def test_asgi_answers_503_when_this_process_has_no_lease_slot_left(name):
    t = small_lease_table(name)
    gate = asyncio.Event()

    async def app(scope, receive, send):
        await gate.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    mw = FairshmASGIMiddleware(app, t, "requests", lambda scope: scope["tenant"])

    async def request(tenant):
        sent, send, _ = asgi_channel()

        await mw({"type": "http", "headers": [], "tenant": tenant}, None, send)
        return sent

    async def run():
        slow = [asyncio.ensure_future(request("acme")) for _ in range(2)]
        while in_use(t) < 2:
            await asyncio.sleep(0.001)
        sent = await request("globex")
        assert sent[0]["status"] == 503
        assert dict(sent[0]["headers"])[b"retry-after"] == b"1"
        assert json.loads(sent[1]["body"])["error"] == "lease_table_full"
        gate.set()
        for s in await asyncio.gather(*slow):
            assert s[0]["status"] == 200
        assert (await request("globex"))[0]["status"] == 200

    try:
        asyncio.run(asyncio.wait_for(run(), 30))
        assert in_use(t) == 0
    finally:
        t.close()


# The segment's other full tables are the server's bound too: 503 with a JSON body
# naming the key, not a 500 with a traceback for every request they turn away.
def test_a_new_tenant_that_the_directory_has_no_room_for_gets_503(name, caplog):
    t = fairshm.Table.create(name, {"pools": [{"name": "requests", "capacity": 8}],
                                    "max_tenants": 2})
    try:
        mw = FairshmMiddleware(wsgi_app, t, "requests", tenant_of)
        def serve(who):
            sr = StartResponse()
            body = mw({"HTTP_X_TENANT": who}, sr)
            data = b"".join(body)
            if hasattr(body, "close"):
                body.close()  # what a server does: the permit is released then
            return sr, data

        for who in ("acme", "globex"):
            assert serve(who)[0].status == "200 OK"
        with caplog.at_level("WARNING", logger="fairshm"):
            for _ in range(2):
                sr, body = serve("initech")
                # It lasts for the segment's life: no Retry-After to promise.
                assert_table_full(sr, body, "tenant_table_full", "max_tenants", None)
        warned = [r for r in caplog.records if r.name == "fairshm"]
        assert len(warned) == 1 and "max_tenants" in warned[0].getMessage()
        # The tenants it has are served as before.
        assert serve("acme")[0].status == "200 OK" and in_use(t) == 0

        async def app(scope, receive, send):
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"ok"})

        amw = FairshmASGIMiddleware(app, t, "requests", lambda scope: scope["tenant"])
        sent, send, receive = asgi_channel()
        asyncio.run(amw({"type": "http", "headers": [], "tenant": "initech"}, receive, send))
        assert sent[0]["status"] == 503
        assert b"retry-after" not in dict(sent[0]["headers"])
        assert json.loads(sent[1]["body"])["error"] == "tenant_table_full"
    finally:
        t.close()


def test_a_worker_that_the_process_table_has_no_room_for_answers_503(name):
    t = fairshm.Table.create(name, {"pools": [{"name": "requests", "capacity": 8}],
                                    "max_processes": 1})
    try:
        t.register()  # the one process slot: this process's
        script = (
            "import json, sys, fairshm\n"
            "from fairshm.wsgi import FairshmMiddleware\n"
            "t = fairshm.Table.open(sys.argv[1])\n"
            "got = {}\n"
            "def start(status, headers, exc_info=None):\n"
            "    got.update(status=status, headers=dict(headers))\n"
            "app = lambda environ, sr: (sr('200 OK', []), [b'ok'])[1]\n"
            "mw = FairshmMiddleware(app, t, 'requests', lambda e: 'acme')\n"
            "body = b''.join(mw({}, start))\n"
            "print(json.dumps([got['status'], got['headers'].get('Retry-After'),\n"
            "                  json.loads(body)]))\n"
            "t.close()\n"
        )
        rc, out, err = run_script(script, name)
        assert rc == 0, err
        status, retry, doc = json.loads(out)
        assert status == "503 Service Unavailable" and retry == "1"
        assert doc["error"] == "process_table_full"
        assert "max_processes" in doc["explanation"]
        assert "fairshm middleware answers 503" in err  # the warning, logged once
    finally:
        t.close()


def test_wsgi_answers_429_over_the_rate_and_in_debt_before_the_app_runs(table):
    # Seed 000: over the rate a request answers 429 before any work is done; a tenant
    # whose work ran past its work rate is refused until its bucket refills.
    calls = []

    def app(environ, start_response):
        calls.append(1)
        return wsgi_app(environ, start_response)

    mw = FairshmMiddleware(app, table, "requests", tenant_of)
    table.set_rates("acme", requests_per_s=1)
    sr = StartResponse()
    mw({"HTTP_X_TENANT": "acme"}, sr).close()
    assert sr.status == "200 OK" and calls == [1]
    sr = StartResponse()
    body = b"".join(mw({"HTTP_X_TENANT": "acme"}, sr))
    assert sr.status.startswith("429") and calls == [1], "the app never ran"
    ms = int(sr.headers["Retry-After-Ms"])
    assert 1 <= ms <= 1000 and sr.headers["Retry-After"] == "1"
    doc = json.loads(body)
    assert doc["reason"] == "rate_limited" and doc["retry_after_ms"] == ms
    assert in_use(table) == 0, "a rate refusal touches no pool"
    # Another tenant is not limited by acme's rate.
    sr = StartResponse()
    mw({"HTTP_X_TENANT": "globex"}, sr).close()
    assert sr.status == "200 OK"
    # Work debt: 5 s past the burst of a 1,000-units-a-second rate.
    table.set_rates("globex", work_units_per_s=1000)
    assert table.charge("globex", 6000) > 4000
    sr = StartResponse()
    body = b"".join(mw({"HTTP_X_TENANT": "globex"}, sr))
    assert sr.status.startswith("429") and calls == [1, 1]
    ms = int(sr.headers["Retry-After-Ms"])
    assert 4000 < ms <= 5000, ms
    assert int(sr.headers["Retry-After"]) == -(-ms // 1000)
    assert json.loads(body)["reason"] == "work_debt"


def test_asgi_answers_429_over_the_rate_before_the_app_runs(table):
    calls = []

    async def app(scope, receive, send):
        calls.append(1)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    mw = FairshmASGIMiddleware(app, table, "requests",
                               lambda scope: dict(scope["headers"]).get(b"x-tenant", b"").decode())
    table.set_rates("acme", requests_per_s=1)

    async def run():
        sent, send, receive = asgi_channel()

        scope = {"type": "http", "headers": [(b"x-tenant", b"acme")]}
        await mw(scope, receive, send)
        assert sent[0]["status"] == 200
        sent.clear()
        await mw(scope, receive, send)
        assert sent[0]["status"] == 429 and calls == [1]
        headers = dict(sent[0]["headers"])
        assert headers[b"retry-after"] == b"1" and 1 <= int(headers[b"retry-after-ms"]) <= 1000
        assert json.loads(sent[1]["body"])["reason"] == "rate_limited"

    asyncio.run(run())
    assert in_use(table) == 0


def test_wsgi_charges_the_work_a_request_did_once_its_permit_is_released(table):
    seen = []

    def work(environ, seconds):
        seen.append((environ["HTTP_X_TENANT"], seconds, in_use(table)))
        return 5000

    def boom(environ, start_response):
        raise RuntimeError("boom")

    table.set_rates("acme", work_units_per_s=1000)
    mw = FairshmMiddleware(wsgi_app, table, "requests", tenant_of, work=work)
    sr = StartResponse()
    body = mw({"HTTP_X_TENANT": "acme"}, sr)
    assert sr.status == "200 OK" and seen == [], "charged after the work, not before"
    body.close()
    (who, seconds, held), = seen
    assert who == "acme" and 0 <= seconds < 10 and held == 0, seen
    # 5,000 units at 1,000 a second, past a burst of one second's worth: in debt.
    sr = StartResponse()
    doc = json.loads(b"".join(mw({"HTTP_X_TENANT": "acme"}, sr)))
    assert sr.status.startswith("429") and doc["reason"] == "work_debt"
    assert 3000 < doc["retry_after_ms"] <= 4000, doc
    # A request whose app raises did its work too; an untenanted one is not charged.
    table.set_rates("globex", work_units_per_s=1000)
    with pytest.raises(RuntimeError):
        FairshmMiddleware(boom, table, "requests", tenant_of, work=work)({"HTTP_X_TENANT": "globex"},
                                                                        StartResponse())
    assert b"".join(mw({}, StartResponse())) == b"hello"
    assert [w for w, _, _ in seen] == ["acme", "globex"] and in_use(table) == 0
    assert table.charge("globex", 0) > 3000
    with pytest.raises(TypeError, match="work must be"):
        FairshmMiddleware(wsgi_app, table, "requests", tenant_of, work=5)


def test_asgi_charges_the_work_a_request_did_once_its_permit_is_released(table):
    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    seen = []

    def work(scope, seconds):
        seen.append(in_use(table))
        return 5000

    table.set_rates("acme", work_units_per_s=1000)
    mw = FairshmASGIMiddleware(app, table, "requests", lambda scope: "acme", work=work)

    async def run():
        sent, send, receive = asgi_channel()

        await mw({"type": "http", "headers": []}, receive, send)
        assert sent[0]["status"] == 200 and seen == [0]
        sent.clear()
        await mw({"type": "http", "headers": []}, receive, send)
        assert sent[0]["status"] == 429
        assert json.loads(sent[1]["body"])["reason"] == "work_debt"

    asyncio.run(run())


def test_asgi_holds_a_permit_for_a_websockets_life_and_turns_one_away_when_refused(name):
    # Seed 000: a connection holds its permit for its life. A websocket is one.
    table = fairshm.Table.create(name, {"pools": [{"name": "connections", "capacity": 1}]})
    try:
        closing = None

        async def app(scope, receive, send):
            assert (await receive())["type"] == "websocket.connect"
            await send({"type": "websocket.accept"})
            held.append(table.stats()["pools"][0]["in_use"])
            await closing.wait()

        held = []
        mw = FairshmASGIMiddleware(app, table, "connections", lambda scope: "acme",
                                   scopes=("http", "websocket"))

        async def run():
            nonlocal closing
            closing = asyncio.Event()

            def socket(extensions):
                sent, send, receive = asgi_channel({"type": "websocket.connect"})

                scope = {"type": "websocket", "headers": [], "extensions": extensions}
                return sent, mw(scope, receive, send)

            first_sent, first = socket({})
            task = asyncio.ensure_future(first)
            while not held:
                await asyncio.sleep(0.001)
            assert held == [1] and first_sent[0]["type"] == "websocket.accept"
            # A second connection, no room: closed before it is accepted, code 1013.
            sent, second = socket({})
            await second
            assert sent == [{"type": "websocket.close", "code": 1013,
                             "reason": sent[0]["reason"]}], sent
            assert sent[0]["reason"].startswith("fairshm: over_share, retry after ")
            assert len(sent[0]["reason"].encode()) <= 123
            # With the server's websocket.http.response extension: the 429 itself.
            sent, third = socket({"websocket.http.response": {}})
            await third
            assert sent[0]["type"] == "websocket.http.response.start" and sent[0]["status"] == 429
            assert dict(sent[0]["headers"])[b"retry-after"] == b"1"
            assert sent[1]["type"] == "websocket.http.response.body"
            assert json.loads(sent[1]["body"])["reason"] == "over_share"
            assert table.stats()["pools"][0]["in_use"] == 1
            closing.set()
            await task

        asyncio.run(run())
        assert table.stats()["pools"][0]["in_use"] == 0, "released when the websocket ended"
        # Websockets pass through untouched unless asked for; a wrong scope fails at once.
        passed = []

        async def plain(scope, receive, send):
            passed.append(scope["type"])

        untouched = FairshmASGIMiddleware(plain, table, "connections", lambda scope: "acme")
        asyncio.run(untouched({"type": "websocket", "headers": []}, None, None))
        assert passed == ["websocket"] and table.stats()["pools"][0]["grants"] == 1
        with pytest.raises(ValueError, match="one of http, websocket"):
            FairshmASGIMiddleware(plain, table, "connections", lambda scope: "acme", scopes=("lifespan",))
        with pytest.raises(TypeError, match="sequence"):
            FairshmASGIMiddleware(plain, table, "connections", lambda scope: "acme", scopes="websocket")
    finally:
        table.close()
