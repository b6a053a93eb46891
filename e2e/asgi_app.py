"""The ASGI app of `test_asgi.py`, under uvicorn: 200 after E2E_SLOW_S seconds of
awaiting (asyncio.sleep: one process serves many such requests at once), and a
websocket accepted and kept open until its client goes; behind
fairshm's ASGI middleware on the segment FAIRSHM_E2E_SEGMENT, with a pool of E2E_POOL
permits and E2E_LEASES lease slots a process, opened at import, holding a permit for
each request and each websocket."""

import asyncio
import os

import fairshm
from fairshm.asgi import FairshmASGIMiddleware

SLOW_S = float(os.environ.get("E2E_SLOW_S", "1"))


async def base(scope, receive, send):
    if scope["type"] == "websocket":
        # Accepted, then open until the client goes.
        while (await receive())["type"] != "websocket.disconnect":
            await send({"type": "websocket.accept"})
        return
    if scope["type"] != "http":
        return
    if scope["path"] == "/slow":
        await asyncio.sleep(SLOW_S)
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/plain"), (b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


def tenant(scope):
    return dict(scope["headers"]).get(b"x-tenant", b"").decode() or None


table = fairshm.Table.open_or_create(
    os.environ["FAIRSHM_E2E_SEGMENT"],
    {"pools": [{"name": "requests", "capacity": int(os.environ["E2E_POOL"])}],
     "leases_per_process": int(os.environ.get("E2E_LEASES", "64"))},
)
app = FairshmASGIMiddleware(base, table, "requests", tenant, scopes=("http", "websocket"))
