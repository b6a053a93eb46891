"""What both middlewares answer when a request is refused: 429 with ``Retry-After``
(whole seconds, rounded up, as HTTP requires), ``Retry-After-Ms`` from the same number,
and a short JSON body with the reason and the explanation."""

import json


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
