import asyncio
import json

import pytest

import fairshm
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
        sent = []

        async def send(msg):
            sent.append(msg)

        async def receive():
            return {"type": "http.request"}

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
