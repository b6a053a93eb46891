"""What both middlewares share: the 429 they answer a refused request with
(``Retry-After`` in whole seconds, rounded up, as HTTP requires, ``Retry-After-Ms`` from
the same number, and a short JSON body with the reason and the explanation), and how
they read the front proxy's ``X-Request-Start``."""

import json
import logging
import math
import time

from . import (InvalidTenant, LeaseTableFull, ProcessTableFull, Refused, TenantTableFull,
               _check_request)

# What a middleware answers itself, instead of raising: a refusal (429), a tenant
# name the table cannot take (400), and a full table of the segment's (503): no lease
# slot left in this process, no process slot for it, no directory slot for a new
# tenant's name.
ANSWERED = (Refused, InvalidTenant, LeaseTableFull, ProcessTableFull, TenantTableFull)

# Each full table's 503 (its body names the error's ``kind``): its Retry-After (None:
# waiting does not help), and what the warning logged for the first one says.
FULL = {
    LeaseTableFull: ("1", "this process has no lease slot left"),
    ProcessTableFull: ("1", "the segment has no process slot for this process"),
    TenantTableFull: (None, "the segment's tenant directory is full"),
}

# A wait longer than this is not a queue but a wrong stamp (or clocks far apart).
MAX_QUEUED_US = 60_000_000


def queued_us(value, now_us=None):
    """How long a request waited in the server's queue, in microseconds, from the value
    of its ``X-Request-Start`` header (str or bytes; ``now_us``: the wall clock in
    microseconds, default now), or ``None`` when the value is not a stamp. Takes the
    forms front proxies send, with or without ``t=``: seconds with a fraction (nginx's
    ``t=${msec}``) and whole seconds, milliseconds (Heroku) or microseconds (Apache's
    ``%t``), told apart by their size. A stamp ahead of the clock (a proxy whose clock
    runs ahead) waited 0; one more than a minute behind is not a stamp."""
    if value is None:
        return None
    if isinstance(value, bytes):
        value = value.decode("latin-1")
    v = value.strip()
    if v.startswith("t="):
        v = v[2:]
    try:
        x = float(v)
    except ValueError:
        return None
    if not math.isfinite(x) or x <= 0:
        return None
    start = x if x > 1e15 else x * 1e3 if x > 1e12 else x * 1e6
    now = time.time_ns() // 1000 if now_us is None else now_us
    waited = now - start
    if waited > MAX_QUEUED_US:
        return None
    return max(0, int(waited))


def invalid_tenant_response(error):
    """The 400 for a request whose tenant name the table cannot take (empty, too long,
    a NUL byte, not text): the name comes from the request, so the request is at fault,
    not the server, and each such request would otherwise be a 500 with a traceback."""
    body = json.dumps({"error": "invalid_tenant", "explanation": str(error)}).encode()
    headers = [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
    return headers, body


def _full(error):
    """``FULL``'s entry for ``error``, an instance of one of its keys."""
    return next(v for k, v in FULL.items() if isinstance(error, k))


def table_full_response(error):
    """The 503 for a request that a full table of the segment turns away, not a 500 with
    a traceback: the bound is this server's, not the tenant's. ``LeaseTableFull``: as
    many of this process's requests in flight as ``leases_per_process`` (which an async
    server or a many-threaded worker reaches first), for as long as one of them takes
    to end, hence ``Retry-After: 1``; ``ProcessTableFull``: no process slot for this
    worker (another worker may serve a retry); ``TenantTableFull``: no directory slot
    for a new tenant's name, for the segment's life, so no Retry-After."""
    retry, _ = _full(error)
    body = json.dumps({"error": error.kind, "explanation": str(error)}).encode()
    headers = [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
    if retry is not None:
        headers.append(("Retry-After", retry))
    return headers, body


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
    the units and declared hold of each request's permit, whether to read the front
    proxy's ``X-Request-Start`` (``queue_header``; leave it on only behind a proxy that
    sets the header itself, as nginx's ``proxy_set_header`` does), and ``work``: None,
    or a function of the request (environ or scope) and the seconds it held its permit
    that returns the work units it did, charged to its tenant (``Table.charge``) once
    the permit is released, so that a tenant past its work rate is refused
    ``work_debt`` (for example ``work=lambda request, s: int(s * 1000)``: a unit for
    each ms of handling)."""

    def __init__(self, app, table, pool, tenant, units=1, hold_ms=0, queue_header=True, work=None):
        self.app = app
        self.table = table
        self.pool = pool
        self.tenant = tenant
        # A wrong number or pool is a configuration error, found at start-up, not as a
        # 500 on every request: the pool is resolved now (``UnknownPool``, naming the
        # table's pools, for a name it does not have), and the units checked against it
        # (``UnitsExceedCapacity`` for more than it can ever hold).
        _check_request(units, hold_ms)
        table.check_units(pool, units)
        if work is not None and not callable(work):
            raise TypeError("work must be a function of (request, seconds) or None, not %s"
                            % type(work).__name__)
        self.units = units
        self.hold_ms = hold_ms
        self.queue_header = queue_header
        self.work = work
        self._warned = set()

    def finisher(self, lease, name, request):
        """What ends a request's permit, called once: it releases ``lease``, then
        charges tenant ``name`` the units of work ``work`` says the request did."""
        if self.work is None:
            return lease.release
        started = time.monotonic()

        def finish():
            lease.release()
            units = self.work(request, time.monotonic() - started)
            if units:
                self.table.charge(name, units)

        return finish

    def answer(self, error):
        """The status (code and reason phrase), headers and body that answer a request
        whose acquire raised ``error``, one of ``ANSWERED``. The first 503 of each full
        table logs a warning naming the config key to raise, since every such 503 is a
        request this server turned away for want of room in its segment."""
        if isinstance(error, Refused):
            return (429, "Too Many Requests", *refusal_response(error))
        if isinstance(error, InvalidTenant):
            return (400, "Bad Request", *invalid_tenant_response(error))
        _, why = _full(error)
        if error.kind not in self._warned:
            self._warned.add(error.kind)
            logging.getLogger("fairshm").warning(
                "fairshm middleware answers 503 while %s: %s", why, error
            )
        return (503, "Service Unavailable", *table_full_response(error))

    def waited(self, stamp):
        """The request's wait in the server's queue, µs, from its ``X-Request-Start``
        value ``stamp`` (None: no header), or None when not known or not read."""
        if self.queue_header and stamp is not None:
            return queued_us(stamp)
        return None

    def acquire(self, name, stamp):
        """The request's lease (``Refused`` if refused), for tenant ``name`` (None: not
        limited, and no lease), passing its wait in the server's queue on."""
        q = self.waited(stamp)
        if name is None:
            if q is not None:
                self.table.note_queue(self.pool, q)
            return None
        return self.table.try_acquire(self.pool, name, self.units, self.hold_ms, queued_us=q)
