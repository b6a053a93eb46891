"""Guaranteed pools (seed 001) through the C ABI: fixed, weighted tenants, each
guaranteed its part of the ceiling, idle parts lent for at most the reclaim horizon."""

import threading
import time
from ctypes import byref, c_uint32, c_uint64, create_string_buffer, sizeof

from . import _lib
from ._errors import (
    _REASONS, _U64, _c_name, _check, _deadline, _now, _ReleasedOnExit, _take_json,
)
from ._lib import lib


class GuaranteedRefused(Exception):
    """An acquire of a guaranteed pool (seed 001) not granted. ``reason`` is
    ``hold_exceeds_reclaim_horizon``, ``guarantee_on_loan`` or ``guarantee_exhausted``;
    ``retry_after_ms`` is ``None`` when no time can be promised (a blocking lease has
    overrun); ``blocking`` lists the ids of the leases holding the tenant's guarantee on
    loan, the earliest due first, at most 8 of them (``n_blocking`` counts them all),
    and ``blocking_leases`` their names (``"b#2"``: the borrower and the lease's number,
    as the explanation and the stats name them); ``explanation`` says who asked for what, what blocks it and the ways out."""

    def __init__(self, facts, explanation, pool, tenant, blocking_leases=()):
        self._facts = facts
        self.code = facts.reason
        self.reason = _REASONS.get(facts.reason, "unknown")
        self.retry_after_ms = facts.retry_after_ms if facts.has_retry_after else None
        self.blocking = [facts.blocking[i] for i in range(min(facts.n_blocking, 8))]
        self.blocking_leases = list(blocking_leases)
        self.explanation = explanation
        self.pool = pool
        self.tenant = tenant
        super().__init__(self.reason)

    def __getattr__(self, name):
        # The numbers behind the refusal: units, guarantee, own_free, lent, need,
        # lendable, seq, n_blocking.
        facts = self.__dict__.get("_facts")
        if facts is not None and name in ("units", "guarantee", "own_free", "lent", "need",
                                          "lendable", "seq", "n_blocking"):
            return getattr(facts, name)
        raise AttributeError(name)

    @property
    def retry_after_header(self):
        """The HTTP ``Retry-After`` value (whole seconds, rounded up, at least 1), or
        ``None`` when no time can be promised."""
        if self.retry_after_ms is None:
            return None
        return max(1, -(-self.retry_after_ms // 1000))

    def __str__(self):
        return "%s: %s" % (self.reason, self.explanation)

    def __reduce__(self):
        # Pickled (a multiprocessing worker's refusal) as its numbers and its words.
        return (_unpickle_guaranteed_refused, (type(self), bytes(self._facts), self.explanation,
                                               self.pool, self.tenant, self.blocking_leases))


def _unpickle_guaranteed_refused(cls, facts, explanation, pool, tenant, blocking_leases=()):
    return cls(_lib.GuaranteedRefusal.from_buffer_copy(facts), explanation, pool, tenant,
               blocking_leases)


def _lease_name(tenant, lease_id):
    """A guaranteed lease's name: its tenant and its number (the id's low 32 bits)."""
    return "%s#%d" % (tenant, lease_id & 0xFFFFFFFF)


class GuaranteedLease(_ReleasedOnExit):
    """A lease of a guaranteed pool. Release it with ``release(now_ms)``, or use
    ``with``, which releases at the library's clock unless ``release(now_ms)`` did in
    the block (so a trace at explicit times keeps them). A lease released twice raises
    ``AlreadyReleased``, as a fair-share ``Lease`` does. ``id`` is its number for the C
    ABI, ``tenant`` its tenant, and ``name`` what refusals, explanations and the stats
    call it (``"b#2"``)."""

    __slots__ = ("_pool", "id", "tenant")

    def __init__(self, pool, lease_id, tenant):
        self._pool = pool
        self.id = lease_id
        self.tenant = tenant

    @property
    def name(self):
        return _lease_name(self.tenant, self.id)

    def release(self, now_ms=None):
        self._pool.release(self.id, now_ms)

    def __repr__(self):
        return "<fairshm.GuaranteedLease %#x of pool %r>" % (self.id, self._pool.name)



class _Why(threading.local):
    """Each thread's buffer for a refusal's explanation: threads that share a pool each
    read their own refusal's words (the C call runs without the GIL, so a buffer of the
    pool's own was overwritten by another thread's refusal before it was read)."""

    def __init__(self):
        self.buf = create_string_buffer(_lib.G_WHY_MAX)


_why = _Why()


class Guaranteed:
    """A guaranteed pool (seed 001) of a table: fixed, weighted tenants, each guaranteed
    its part of the ceiling, idle parts lent for at most the reclaim horizon. Every call
    takes ``now_ms``: an explicit time in ms (0 included: seed 001's traces start at
    t = 0), or ``None``, the default, for the library's clock."""

    def __init__(self, table, name):
        self._table = table
        self.name = name
        out = c_uint32()
        rc = lib.fairshm_guaranteed_pool(table._h, _c_name(name, "pool", _lib.E_UNKNOWN_POOL), byref(out))
        if rc:
            self._table._fail(rc)
        self._id = out.value
        self._tenants = {}
        self._names = None
        self._keep_asking_ms = None

    def _tenant(self, name):
        t = self._tenants.get(name)
        if t is None:
            out = c_uint32()
            rc = lib.fairshm_guaranteed_tenant(self._table._h, self._id, _c_name(name, "tenant", _lib.E_INVALID_TENANT),
                                               byref(out))
            if rc:
                self._table._fail(rc)
            t = self._tenants[name] = out.value
        return t

    def _tenant_name(self, handle):
        """The name of the tenant of handle ``handle`` (the stats list the tenants in
        handle order, and they are fixed for the segment's life)."""
        if self._names is None:
            # A time before the pool's clock reads at its clock: nothing moves.
            self._names = [t["name"] for t in self.stats(0)["stats"]["tenants"]]
        return self._names[handle] if handle < len(self._names) else "?"

    def acquire(self, tenant, cost, hold_ms, now_ms=None):
        """A ``GuaranteedLease``, or ``GuaranteedRefused``."""
        _check("cost", cost, _U64, lo=1)  # 0 goes on to the library, which says why
        _check("hold_ms", hold_ms, _U64)
        now = _now(now_ms)
        lease = c_uint64()
        facts = _lib.GuaranteedRefusal()
        why = _why.buf
        rc = lib.fairshm_guaranteed_acquire(self._table._h, self._id, self._tenant(tenant), cost,
                                            hold_ms, now, byref(lease), byref(facts),
                                            why, sizeof(why))
        if rc == _lib.OK:
            return GuaranteedLease(self, lease.value, tenant)
        if rc == _lib.REFUSED:
            names = [_lease_name(self._tenant_name(facts.blocking_tenant[i]), facts.blocking[i])
                     for i in range(min(facts.n_blocking, len(facts.blocking)))]
            raise GuaranteedRefused(facts, why.value.decode("utf-8", "replace"),
                                    self.name, tenant, names)
        self._table._fail(rc)

    def acquire_timeout(self, tenant, cost, hold_ms, timeout, cancel=None):
        """``acquire`` on the library's clock, asked again until granted or ``timeout``
        seconds have passed (``None``: for ever): as soon as units come back to the
        pool (a release, or the reap of a dead holder, wakes its waiters in every
        process), else at each refusal's retry-after, and at least every half
        ``idle_after_ms``, so that the tenant's demand (which lapses ``idle_after_ms``
        after its last ask) stays signalled and its guarantee frozen while it waits. Raises the last
        ``GuaranteedRefused`` when the time is up, and at once for a refusal that
        waiting cannot end (``hold_exceeds_reclaim_horizon`` with no retry-after).
        Sleeps between asks with the GIL released, in slices (Ctrl-C interrupts
        them). A ``fairshm.Cancel`` fired from another thread ends the wait at once with
        the last ``GuaranteedRefused``, as the deadline does; fired before the call, it
        still lets the first ask through."""
        # As the fair-share acquire's: None or infinity waits for ever, a negative
        # timeout asks once, NaN raises ValueError and a non-number TypeError.
        deadline = _deadline(timeout)
        from . import Cancel  # here: the package imports this module first
        c = Cancel._ptr_of(cancel)
        if deadline is None:
            deadline = float("inf")
        if self._keep_asking_ms is None:
            # A time before the pool's clock reads at its clock: nothing moves.
            self._keep_asking_ms = max(1, self.stats(0)["stats"]["idle_after_ms"] // 2)
        seen, woken = c_uint64(), c_uint32()
        handle = self._tenant(tenant)
        try:
            while True:
                # The pool's wake word (and the count of releases for this tenant's waiters)
                # before the ask: a release after it that may serve it ends the sleep.
                rc = lib.fairshm_guaranteed_wake_seen_as(self._table._h, self._id, handle,
                                                         byref(seen))
                if rc:
                    self._table._fail(rc)
                try:
                    return self.acquire(tenant, cost, hold_ms)
                except GuaranteedRefused as r:
                    left = deadline - time.monotonic()
                    hopeless = r.reason == "hold_exceeds_reclaim_horizon" and r.retry_after_ms is None
                    if left <= 0 or hopeless or (cancel is not None and cancel.is_cancelled()):
                        raise
                    keep = self._keep_asking_ms
                    wait = min(max(r.retry_after_ms if r.retry_after_ms is not None else keep, 1), keep)
                    until = time.monotonic() + min(wait / 1000.0, left)
                    while True:
                        ms = max(0, min(_lib.WAIT_SLICE_MS, int((until - time.monotonic()) * 1000) + 1))
                        # As tenant's waiter: a release that cannot serve it does not wake
                        # it, and `seen` moves past it for the next slice.
                        rc = lib.fairshm_guaranteed_sleep_as(self._table._h, self._id, handle,
                                                             hold_ms, byref(seen), ms, c,
                                                             byref(woken))
                        if rc:
                            self._table._fail(rc)
                        if woken.value or time.monotonic() >= until:
                            break
                        if cancel is not None and cancel.is_cancelled():
                            break  # one more ask: a grant is kept, a refusal raised
        finally:
            # A release wakes one waiter, which passes the wake on with its next ask;
            # a wait that ends without it (an exception between the calls) passes it
            # here. Nothing if none is owed. Its code is not raised: that would replace
            # the exception in flight, and a wait's end has nothing else to report.
            if self._table._h:
                lib.fairshm_guaranteed_wait_end(self._table._h, self._id)

    def release(self, lease_id, now_ms=None):
        _check("lease_id", lease_id, _U64)
        rc = lib.fairshm_guaranteed_release(self._table._h, lease_id, _now(now_ms))
        if rc:
            self._table._fail(rc)

    def stats(self, now_ms=None):
        """``{"stats": ..., "fairness_report": ..., "plan": [...]}`` at ``now_ms``
        (``None``: the library's clock; a time before the pool's own clock, the latest
        ``now`` it was given, counts as that clock)."""
        now = _now(now_ms)
        if not self._table._h:
            self._table._fail(-11)
        return _take_json(lib.fairshm_guaranteed_stats_json(self._table._h, self._id, now), -11)

    def fairness_report(self, now_ms=None):
        """The fairness report of ``stats(now_ms)``: cost, request and weight shares side
        by side per tenant, the skew and ``units_disagree``."""
        return self.stats(now_ms)["fairness_report"]

    def plan(self, now_ms=None):
        """The plan of ``stats(now_ms)``: the weighted max-min allocation for current
        demand (progressive filling), per tenant with its demand, target and drift."""
        return self.stats(now_ms)["plan"]


for _c in (GuaranteedRefused, GuaranteedLease, Guaranteed):
    _c.__module__ = "fairshm"
del _c
