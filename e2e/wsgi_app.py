"""The end-to-end WSGI app: 5 ms of work per request (E2E_WORK_MS), behind fairshm's
middleware when FAIRSHM_E2E_SEGMENT names a segment. The table is opened at import,
so with gunicorn's --preload it is opened once in the master, before fork.

Outermost, every response (200 or 429) says when its request reached the app:
`X-Entered-Ns`, CLOCK_MONOTONIC in ns, which the load client (same host, same clock)
subtracts from when it sent the attempt: the time it waited in the server's queue."""

import os
import time

WORK_MS = int(os.environ.get("E2E_WORK_MS", "5"))


def base(environ, start_response):
    time.sleep(WORK_MS / 1000.0)
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "2")])
    return [b"ok"]


app = base
_segment = os.environ.get("FAIRSHM_E2E_SEGMENT")
if _segment:
    import fairshm
    from fairshm.wsgi import FairshmMiddleware

    pool = {"name": "requests", "capacity": int(os.environ["E2E_POOL"])}
    if os.environ.get("E2E_FLOOR_PERCENT"):
        pool["floor_percent"] = int(os.environ["E2E_FLOOR_PERCENT"])
    table = fairshm.Table.open_or_create(_segment, {"pools": [pool]})
    app = FairshmMiddleware(
        base, table, "requests", lambda environ: environ.get("HTTP_X_TENANT"), hold_ms=WORK_MS
    )


def stamped(inner):
    def app(environ, start_response):
        entered = str(time.clock_gettime_ns(time.CLOCK_MONOTONIC))

        def stamp(status, headers, exc_info=None):
            return start_response(status, headers + [("X-Entered-Ns", entered)], exc_info)

        return inner(environ, stamp)

    return app


app = stamped(app)
