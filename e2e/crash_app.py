"""The WSGI app of `test_crash.py`: 200 at once, except `/hang`, which sleeps
(E2E_HANG_S, default 120 s) so that the server's timeout kills its worker; behind
fairshm's middleware on the segment FAIRSHM_E2E_SEGMENT with a pool of E2E_POOL
permits, opened at import (with gunicorn's --preload, in the master before fork)."""

import os
import time

import fairshm
from fairshm.wsgi import FairshmMiddleware

HANG_S = float(os.environ.get("E2E_HANG_S", "120"))


def base(environ, start_response):
    if environ.get("PATH_INFO") == "/hang":
        time.sleep(HANG_S)
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "2")])
    return [b"ok"]


table = fairshm.Table.open_or_create(
    os.environ["FAIRSHM_E2E_SEGMENT"],
    {"pools": [{"name": "requests", "capacity": int(os.environ["E2E_POOL"])}]},
)
app = FairshmMiddleware(base, table, "requests", lambda environ: environ.get("HTTP_X_TENANT"))
