"""WSGI middleware: a permit per request, held until the response is fully sent.

    from fairshm.wsgi import FairshmMiddleware
    app = FairshmMiddleware(app, table, pool="requests",
                            tenant=lambda environ: environ.get("HTTP_X_TENANT"))

``tenant`` maps a request to its tenant's name; ``None`` lets the request through
unlimited. A refused request gets 429 with ``Retry-After``; one whose tenant name the
table cannot take (empty, too long, a NUL byte) gets 400; one that finds this process
with no lease slot left (``LeaseTableFull``: as many requests in flight as the config's
``leases_per_process``) gets 503 with ``Retry-After: 1``, as does one whose process
finds no process slot (``ProcessTableFull``); one of a new tenant that the tenant
directory has no room for (``TenantTableFull``) gets 503 with no ``Retry-After``. The
first of each kind logs a warning on the ``fairshm`` logger. A ``pool`` the table does not
have raises ``UnknownPool`` here, when the middleware is built, and ``units`` more than it
can ever hold ``UnitsExceedCapacity``. Behind a front proxy that
stamps ``X-Request-Start``, each request's wait in the server's queue is passed to the
table (``Table.note_queue``): a queue there makes an over-share tenant's hints longer. The permit is released when
the server closes the response (``close()``, which PEP 3333 requires even of a streamed
body), or at once if the application raises; then, given ``work``, the units of work the
request did are charged to its tenant (see ``Permits``).
"""

from ._http import ANSWERED, Permits


class FairshmMiddleware(Permits):
    """``FairshmMiddleware(app, table, pool, tenant, units=1, hold_ms=0, queue_header=True,
    work=None)``."""

    def __call__(self, environ, start_response):
        name = self.tenant(environ)
        try:
            lease = self.acquire(name, environ.get("HTTP_X_REQUEST_START"))
        except ANSWERED as e:
            code, phrase, headers, body = self.answer(e)
            start_response("%d %s" % (code, phrase), headers)
            return [body]
        if lease is None:
            return self.app(environ, start_response)
        finish = self.finisher(lease, name, environ)
        try:
            body = self.app(environ, start_response)
        except BaseException:
            finish()
            raise
        return _ReleasingBody(body, finish)


class _ReleasingBody:
    """The application's body, ending the permit (``finish``) when the server closes it."""

    def __init__(self, body, finish):
        self._body = body
        self._finish = finish

    def __iter__(self):
        return iter(self._body)

    def close(self):
        try:
            close = getattr(self._body, "close", None)
            if close is not None:
                close()
        finally:
            finish, self._finish = self._finish, None
            if finish is not None:
                finish()
