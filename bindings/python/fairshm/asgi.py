"""ASGI middleware: a permit per HTTP request, held until the application has sent the
whole response (or failed), and, if asked, a permit per websocket for its life.

    from fairshm.asgi import FairshmASGIMiddleware
    app = FairshmASGIMiddleware(app, table, pool="requests",
                                tenant=lambda scope: dict(scope["headers"]).get(b"x-tenant", b"").decode() or None)

``tenant`` maps a request's scope to its tenant's name; ``None`` lets it through. A
refused request gets 429 with ``Retry-After``; one whose tenant name the table cannot
take gets 400. An async server serves many requests at once in one process, and each
holds one of the process's ``leases_per_process`` lease slots (default 64): raise it to
the server's concurrency limit (uvicorn's ``--limit-concurrency``); a request that
finds none left gets 503 with ``Retry-After: 1`` (the first such logs a warning on the
``fairshm`` logger), and a full process table or tenant directory is answered as in the
WSGI middleware. Lifespan scopes pass through untouched, and websockets unless
``scopes`` names them (see the class).
``X-Request-Start`` and ``work`` are as in the WSGI middleware.
"""

from ._http import ANSWERED, Permits


# The scope types a middleware can hold a permit for.
SCOPES = ("http", "websocket")
# RFC 6455's close code for a refusal: "Try Again Later".
TRY_AGAIN_LATER = 1013


class FairshmASGIMiddleware(Permits):
    """``FairshmASGIMiddleware(app, table, pool, tenant, units=1, hold_ms=0, queue_header=True,
    work=None, scopes=("http",))``.

    ``scopes`` says which connections hold a permit: ``"http"`` (each request, for its
    life), ``"websocket"`` (each websocket, for its life: seed 000's connection, say on
    a ``connections`` pool), or both. A refused websocket is turned away before it is
    accepted: with the server's ``websocket.http.response`` extension, by the same 429,
    400 or 503 response as a request; else by ``websocket.close`` with code 1013 (Try
    Again Later) and a reason naming the refusal, which the server sends as HTTP 403."""

    def __init__(self, app, table, pool, tenant, units=1, hold_ms=0, queue_header=True, work=None,
                 scopes=("http",)):
        super().__init__(app, table, pool, tenant, units, hold_ms, queue_header, work)
        if isinstance(scopes, str):
            raise TypeError("scopes must be a sequence of scope types, such as (%r,)" % scopes)
        bad = [x for x in scopes if x not in SCOPES]
        if bad or not scopes:
            raise ValueError("scopes %r: each must be one of %s" % (tuple(scopes), ", ".join(SCOPES)))
        self.scopes = frozenset(scopes)

    async def __call__(self, scope, receive, send):
        kind = scope.get("type")
        if kind not in self.scopes:
            return await self.app(scope, receive, send)
        stamp = None
        if self.queue_header:
            stamp = next((v for k, v in scope.get("headers", ()) if k.lower() == b"x-request-start"), None)
        name = self.tenant(scope)
        try:
            lease = self.acquire(name, stamp)
        except ANSWERED as e:
            status, _, headers, body = self.answer(e)
            if kind == "websocket" and "websocket.http.response" not in scope.get("extensions", {}):
                await send({"type": "websocket.close", "code": TRY_AGAIN_LATER, "reason": _close_reason(e)})
                return
            prefix = "websocket.http" if kind == "websocket" else "http"
            await send(
                {
                    "type": prefix + ".response.start",
                    "status": status,
                    "headers": [(k.lower().encode(), v.encode()) for k, v in headers],
                }
            )
            await send({"type": prefix + ".response.body", "body": body})
            return
        if lease is None:
            return await self.app(scope, receive, send)
        finish = self.finisher(lease, name, scope)
        try:
            await self.app(scope, receive, send)
        finally:
            finish()


def _close_reason(error):
    """A websocket close's reason for a refusal (at most 123 bytes, as RFC 6455 allows):
    the refusal's reason and retry-after, or the error's kind."""
    ms = getattr(error, "retry_after_ms", None)
    if ms is not None:
        return "fairshm: %s, retry after %d ms" % (error.reason, ms)
    return ("fairshm: %s" % getattr(error, "kind", type(error).__name__))[:123]
