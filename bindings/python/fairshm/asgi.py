"""ASGI middleware: a permit per HTTP request, held until the application has sent the
whole response (or failed).

    from fairshm.asgi import FairshmASGIMiddleware
    app = FairshmASGIMiddleware(app, table, pool="requests",
                                tenant=lambda scope: dict(scope["headers"]).get(b"x-tenant", b"").decode() or None)

``tenant`` maps a request's scope to its tenant's name; ``None`` lets it through. A
refused request gets 429 with ``Retry-After``; one whose tenant name the table cannot
take gets 400. An async server serves many requests at once in one process, and each
holds one of the process's ``leases_per_process`` lease slots (default 64): raise it to
the server's concurrency limit (uvicorn's ``--limit-concurrency``); a request that
finds none left gets 503 with ``Retry-After: 1`` (the first such logs a warning on the
``fairshm`` logger). Other scopes (lifespan, websocket) pass
through untouched. ``X-Request-Start`` and ``work`` are as in the WSGI middleware.
"""

from ._http import ANSWERED, Permits


class FairshmASGIMiddleware(Permits):
    """``FairshmASGIMiddleware(app, table, pool, tenant, units=1, hold_ms=0, queue_header=True,
    work=None)``."""

    async def __call__(self, scope, receive, send):
        if scope.get("type") != "http":
            return await self.app(scope, receive, send)
        stamp = None
        if self.queue_header:
            stamp = next((v for k, v in scope.get("headers", ()) if k.lower() == b"x-request-start"), None)
        name = self.tenant(scope)
        try:
            lease = self.acquire(name, stamp)
        except ANSWERED as e:
            status, _, headers, body = self.answer(e)
            await send(
                {
                    "type": "http.response.start",
                    "status": status,
                    "headers": [(k.lower().encode(), v.encode()) for k, v in headers],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        if lease is None:
            return await self.app(scope, receive, send)
        finish = self.finisher(lease, name, scope)
        try:
            await self.app(scope, receive, send)
        finally:
            finish()
