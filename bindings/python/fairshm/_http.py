"""What both middlewares answer when a request is refused: 429 with ``Retry-After``
(whole seconds, rounded up, as HTTP requires), ``Retry-After-Ms`` from the same number,
and a short JSON body with the reason and the explanation."""

import json

from . import _check_request


def refusal_response(refused):
    ms = int(refused.retry_after_ms)
    body = json.dumps(
        {
            "error": "too_many_requests",
            "reason": refused.reason,
            "retry_after_ms": ms,
            "explanation": refused.explanation,
        }
    ).encode()
    headers = [
        ("Content-Type", "application/json"),
        ("Content-Length", str(len(body))),
        ("Retry-After", str(max(1, -(-ms // 1000)))),
        ("Retry-After-Ms", str(ms)),
    ]
    return headers, body


class Permits:
    """What both middlewares hold: the table, the pool, the request-to-tenant function,
    and the units and declared hold of each request's permit."""

    def __init__(self, app, table, pool, tenant, units=1, hold_ms=0):
        self.app = app
        self.table = table
        self.pool = pool
        self.tenant = tenant
        # A wrong number is a configuration error, found at start-up, not per request.
        _check_request(units, hold_ms)
        self.units = units
        self.hold_ms = hold_ms
