"""fairshm for Python: node-wide pools of permits, shared fairly among tenants by the
forked worker processes of one server, in one lock-free shared-memory segment.

    import fairshm
    table = fairshm.Table.open_or_create("myapp", {"pools": [{"name": "requests", "capacity": 64}]})
    try:
        with table.permit("requests", "acme", hold_ms=50):
            ...  # serve the request
    except fairshm.Refused as r:
        ...  # answer 429, Retry-After: r.retry_after_header

A table opened before ``fork`` (gunicorn ``preload_app``) works in every worker; a
worker that dies gives its permits back.
"""

import contextlib
import json
import os
import threading
import time
from ctypes import byref, c_uint32, c_uint64, c_void_p, create_string_buffer, memmove, sizeof

from . import _lib
from ._errors import (  # the subclass of Error for each code, exported from here
    _REASONS, _U32, _U64, AlreadyExists, AlreadyReleased, BadFile, BadMagic, ConfigMismatch,
    Corrupt, Error, ForeignPidNamespace, InvalidConfig, InvalidName, InvalidRequest, InvalidTenant,
    IoError, LeaseTableFull, NotFound, NotOwner, NotReady, NotResident, PoolLeasesFull,
    ProcessTableFull, ReadOnly, Revoked, TenantBusy, TenantTableFull, Truncated, UnitsExceedCapacity,
    UnknownPool, VersionMismatch, WrongOwner, _c_name, _check, _check_request, _deadline, _left_ms, _now, _raise,
    _ReleasedOnExit, _take_json,
)
from ._lib import lib
from .guaranteed import Guaranteed, GuaranteedLease, GuaranteedRefused

__all__ = [
    "Table", "Lease", "Refused", "Error", "Cancel", "Guaranteed", "GuaranteedLease", "GuaranteedRefused",
    # The subclass of Error for each code (`_ERRORS`; a test keeps the two lists alike).
    "InvalidName", "InvalidConfig", "NotFound", "AlreadyExists", "Truncated", "BadMagic",
    "VersionMismatch", "NotReady", "WrongOwner", "ConfigMismatch", "Corrupt", "UnknownPool",
    "InvalidTenant", "TenantTableFull", "LeaseTableFull", "ProcessTableFull", "InvalidRequest",
    "UnitsExceedCapacity", "AlreadyReleased", "NotOwner", "IoError", "ReadOnly", "TenantBusy",
    "BadFile", "PoolLeasesFull", "Revoked", "NotResident", "ForeignPidNamespace",
]
__version__ = "0.1.0"

#: How long one slice of a blocking acquire lasts, in ms: between slices Python runs
#: its signal handlers, so Ctrl-C interrupts a wait within this bound.
WAIT_SLICE_MS = _lib.WAIT_SLICE_MS



class Refused(Exception):
    """An acquire not granted. ``reason`` is ``pool_full``, ``over_share``,
    ``timed_out``, ``cancelled``, ``rate_limited``, ``work_debt`` or
    ``too_many_residents``; ``retry_after_ms`` when to come back; the numbers the rule
    decided on are attributes; ``explanation`` says it in words."""

    def __init__(self, table, facts, pool, tenant):
        self._table = table
        self._facts = facts
        self.code = facts.reason
        self.reason = _REASONS.get(facts.reason, "unknown")
        self.retry_after_ms = facts.retry_after_ms
        self.pool = pool
        self.tenant = tenant
        super().__init__(self.reason)

    def __getattr__(self, name):
        # The numbers behind the refusal: units, in_use, held, capacity, floor, weight,
        # active_weight, short_units, waited_ms; and the estimate behind the retry-after:
        # queued (the tenant's refused requests with turns ahead), interval_us, and how
        # far the server's queue stretched the hint: queue_stretch_pct (100: not
        # at all) and server_queue_us (see Table.note_queue); for rate_limited and
        # work_debt, rate_per_s: the refusing rate, as set (else 0).
        facts = self.__dict__.get("_facts")
        if facts is not None and name in _FACT_NAMES:
            return getattr(facts, name)
        raise AttributeError(name)

    @property
    def retry_after(self):
        """Seconds to wait, as a float."""
        return self.retry_after_ms / 1000.0

    @property
    def retry_after_header(self):
        """The HTTP ``Retry-After`` value: whole seconds, rounded up, at least 1."""
        return max(1, -(-self.retry_after_ms // 1000))

    @property
    def share(self):
        """``share(t)`` of the tenant when the rule refused it (the library's formula)."""
        return lib.fairshm_share(byref(self._facts))

    @property
    def explanation(self):
        """The library's explanation, made when first asked for. A refusal that
        outlives its table (closed since) is explained from its numbers alone."""
        text = self.__dict__.get("_explanation")
        if text is None:
            text = self.__dict__["_explanation"] = self._explain()
        return text

    def _explain(self):
        h = getattr(self._table, "_h", None)
        if not h:
            return self._numbers_only()
        buf = create_string_buffer(512)
        n = lib.fairshm_explain(h, byref(self._facts), buf, 512)
        if n < 0:
            if not getattr(self._table, "_h", None):
                return self._numbers_only()  # closed by another thread since the check
            _raise(n)
        if n >= 512:
            buf = create_string_buffer(n + 1)
            lib.fairshm_explain(h, byref(self._facts), buf, n + 1)
        return buf.value.decode()

    def _numbers_only(self):
        f = self._facts
        if f.rate_per_s:  # refused by the tenant's rates: no pool was read
            facts = "its %s rate: %d per second" % (
                "work" if _REASONS.get(f.rule) == "work_debt" else "request", f.rate_per_s)
        else:
            facts = "in use %d of %d, the tenant holds %d" % (f.in_use, f.capacity, f.held)
        return ("tenant %r asked for %d unit(s) of pool %r: %s (%s); retry after %d ms. "
                "The table was closed before this refusal was explained, so only its "
                "numbers are known."
                % (self.tenant, f.units, self.pool, self.reason, facts, self.retry_after_ms))

    def as_dict(self):
        d = {name: getattr(self._facts, name) for name in _FACT_NAMES}
        d.update(reason=self.reason, code=self.code, retry_after_ms=self.retry_after_ms,
                 pool=self.pool, tenant=self.tenant, explanation=self.explanation)
        return d

    def __str__(self):
        return "%s: %s" % (self.reason, self.explanation)

    def __reduce__(self):
        # Pickled (a multiprocessing worker's refusal) as its numbers and its
        # explanation, made now while the table may still be open; unpickled, it has
        # no table, and everything but the table is as it was.
        return (_unpickle_refused, (type(self), bytes(self._facts), self.pool, self.tenant,
                                    self.explanation))


def _unpickle_refused(cls, facts, pool, tenant, explanation):
    r = cls(None, _lib.Refusal.from_buffer_copy(facts), pool, tenant)
    r.__dict__["_explanation"] = explanation
    return r


_FACT_NAMES = ("units", "in_use", "held", "capacity", "floor", "weight", "active_weight",
               "short_units", "waited_ms", "queued", "interval_us", "queue_stretch_pct",
               "server_queue_us", "rate_per_s")


def _not_copied(obj, instead):
    """What pickling or copying a handle of this process's raises: a copy would hold
    the same native pointer, used after one of the two freed it (or, in another
    process, never valid)."""
    return TypeError("a fairshm.%s cannot be pickled or copied: it holds this process's "
                     "native handle; %s" % (type(obj).__name__, instead))


class Cancel:
    """Ends blocking acquires early, from another thread: ``acquire(cancel=c)`` then
    raises ``Refused`` with reason ``cancelled`` (a guaranteed pool's
    ``acquire_timeout(..., cancel=c)`` its last ``GuaranteedRefused``). It stays fired
    until ``reset()``."""

    def __init__(self):
        self._p = lib.fairshm_cancel_new()

    def cancel(self):
        lib.fairshm_cancel_fire(self._p)

    def reset(self):
        lib.fairshm_cancel_reset(self._p)

    def is_cancelled(self):
        """Whether ``cancel()`` was called since the token was made or reset."""
        return bool(lib.fairshm_cancel_fired(self._p))

    @staticmethod
    def _ptr_of(cancel):
        """The native token of ``cancel`` (``None``: no token) for a blocking call;
        ``TypeError`` for anything but a ``Cancel``."""
        if cancel is None:
            return None
        if not isinstance(cancel, Cancel):
            raise TypeError("cancel must be a fairshm.Cancel or None, not %s" % type(cancel).__name__)
        return cancel._p

    def __del__(self):
        p, self._p = getattr(self, "_p", None), None
        if p:
            lib.fairshm_cancel_free(p)

    def __reduce__(self):
        raise _not_copied(self, "make a new one where it is needed")


class Lease(_ReleasedOnExit):
    """A granted permit. Release it with ``release()`` or by leaving its ``with``
    block (which releases nothing if ``release()`` did already, in the block); a lease
    released twice raises ``AlreadyReleased``. ``id`` is the C ABI's
    lease id (``Table.release(id)`` releases it too); ``pool``, ``tenant`` and
    ``units`` say what it holds (the names as the acquire was given them)."""

    __slots__ = ("table", "id", "pool", "tenant", "units", "_at")

    def __init__(self, table, lease_id, pool=None, tenant=None, units=None, at=None):
        self.table = table
        self.id = lease_id
        self.pool = pool
        self.tenant = tenant
        self.units = units
        self._at = at  # the explicit now_ms it was acquired at, if any

    def release(self, now_ms=None):
        """Releases the lease at ``now_ms``: ``None`` for the time it was acquired at
        when that was an explicit ``now_ms`` (so a replayed trace never mixes in the
        real clock, as Rust's guard does when dropped), else the library's clock."""
        if now_ms is None:
            now_ms = self._at
        if now_ms is None:
            rc = _release(self.table._h, self.id)
        else:
            rc = lib.fairshm_release_at(self.table._h, self.id, _now(now_ms))
        if rc:
            self.table._fail(rc)

    def __repr__(self):
        return "<fairshm.Lease %#x of table %r>" % (self.id, self.table.name)

    # Residents (a lease of an ``evict`` pool).
    def begin_call(self, now_ms=None):
        """Starts a call: while one is in progress the resident is never revoked.
        Raises ``Revoked`` once it was: put the object to sleep and release.
        ``now_ms``: ``None`` for the library's clock, else an explicit time."""
        rc = lib.fairshm_begin_call(self.table._h, self.id, _now(now_ms))
        if rc:
            self.table._fail(rc)

    def end_call(self, now_ms=None):
        """Ends a call; once the last ends, the resident is evictable again."""
        rc = lib.fairshm_end_call(self.table._h, self.id, _now(now_ms))
        if rc:
            self.table._fail(rc)

    @contextlib.contextmanager
    def call(self):
        """``with lease.call():`` begins a call and ends it when the block exits."""
        self.begin_call()
        try:
            yield self
        finally:
            self.end_call()

    @property
    def revoked(self):
        """Whether this resident was revoked (its permit passed to another)."""
        out = c_uint32()
        rc = lib.fairshm_resident_status(self.table._h, self.id, byref(out))
        if rc:
            self.table._fail(rc)
        return out.value == 2

    def wait_revoked(self, timeout):
        """Waits up to ``timeout`` seconds for a revocation (woken at once by it);
        returns whether it came. Releases the GIL; Ctrl-C interrupts it."""
        deadline = _deadline(timeout)
        out = c_uint32()
        while True:
            left = WAIT_SLICE_MS if deadline is None else _left_ms(deadline)
            rc = lib.fairshm_wait_revoked(self.table._h, self.id, min(left, WAIT_SLICE_MS), byref(out))
            if rc:
                self.table._fail(rc)
            if out.value or (deadline is not None and left <= WAIT_SLICE_MS):
                return bool(out.value)


_try_acquire = lib.fairshm_try_acquire
_try_acquire_queued = lib.fairshm_try_acquire_queued
_try_acquire_at = lib.fairshm_try_acquire_at
_acquire = lib.fairshm_acquire
_release = lib.fairshm_release
# The try-acquire's fast path: the defaults' own int objects, and the bare allocation
# a `Lease` is built with there.
_ONE, _ZERO = 1, 0
_new_object = object.__new__


class _Out(threading.local):
    """Each thread's out-parameters (a lease id, a refusal) and their pointers."""

    def __init__(self):
        lease, refusal = c_uint64(), _lib.Refusal()
        self.bufs = (lease, refusal, byref(lease), byref(refusal))


_out = _Out()


def _config_args(config):
    if config is None:
        return None, _lib.CONFIG_NONE
    if isinstance(config, dict):
        try:
            # NaN and the infinities are no JSON (Python would write them anyway, and
            # the library could then only say where its parse stopped).
            text = json.dumps(config, allow_nan=False)
        except ValueError as e:
            raise InvalidConfig(_lib.E_INVALID_CONFIG,
                                "invalid config: %s: a NaN or infinite number (a quota?)" % e) from None
        return text.encode(), _lib.CONFIG_JSON
    if isinstance(config, (str, os.PathLike)):
        path = os.fsencode(config)
        if b"\x00" in path:
            raise ValueError("config %r contains a NUL byte" % (config,))
        if isinstance(config, str) and not os.path.exists(config):
            # Not a file: the config's own text, when it can be nothing else (no path
            # starts with "{" or holds a line break): JSON, or TOML.
            if config.lstrip().startswith("{"):
                return config.encode(), _lib.CONFIG_JSON
            if "\n" in config:
                return config.encode(), _lib.CONFIG_TOML
        return path, _lib.CONFIG_FILE
    raise TypeError("config is a dict, a file's path, the config's JSON or TOML text, or None")


class Table:
    """An open table (a mapped segment). Open it once per process, or once in the
    master before forking: it works in every forked worker."""

    def __init__(self, name, how, config=None, mode=0):
        cfg, kind = _config_args(config)
        h = c_void_p()
        rc = lib.fairshm_open(_c_name(name, "segment", _lib.E_INVALID_NAME), how, cfg, kind, mode, byref(h))
        if rc:
            _raise(rc)
        self._h = h.value
        self.name = name
        self._pools = {}
        self._tenants = {}
        self._evict_waits = {}

    @classmethod
    def create(cls, name, config=None, mode=0):
        """Creates the segment ``name``; ``config`` a dict or a file's path (TOML if
        it ends in ``.toml``, JSON if in ``.json``, else by its text); ``mode`` its
        file mode (0: 0600)."""
        return cls(name, _lib.CREATE, config, mode)

    @classmethod
    def open(cls, name, config=None):
        """Opens an existing segment, checking its config against ``config`` if given."""
        return cls(name, _lib.OPEN, config)

    @classmethod
    def open_or_create(cls, name, config=None):
        return cls(name, _lib.OPEN_OR_CREATE, config)

    @classmethod
    def observer(cls, name):
        """Opens read-only: never registers, changes nothing."""
        return cls(name, _lib.OBSERVER)

    @staticmethod
    def unlink(name):
        rc = lib.fairshm_unlink(_c_name(name, "segment", _lib.E_INVALID_NAME))
        if rc:
            _raise(rc)

    def _fail(self, rc):
        """Raises the error of code ``rc``; on a closed table, says that instead of the
        C ABI's "argument `table` is null"."""
        if not getattr(self, "_h", None):
            raise InvalidRequest(_lib.E_INVALID_REQUEST, "table %r is closed: open it again to use it" % (self.name,))
        _raise(rc)

    def close(self):
        h, self._h = getattr(self, "_h", None), None
        if h:
            lib.fairshm_close(h)

    def __reduce__(self):
        raise _not_copied(self, "open the table by its name where it is needed")

    def __repr__(self):
        return "<fairshm.Table %r %s>" % (self.name, "open" if getattr(self, "_h", None) else "closed")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        self.close()

    def pool(self, name):
        """The pool's handle (resolved once, then cached)."""
        p = self._pools.get(name)
        if p is None:
            p = self._pools[name] = self._resolve(lib.fairshm_pool, name, "pool", _lib.E_UNKNOWN_POOL)
        return p

    def tenant(self, name):
        """The tenant's handle (claimed on first use, then cached)."""
        t = self._tenants.get(name)
        if t is None:
            t = self._tenants[name] = self._resolve(lib.fairshm_tenant, name, "tenant", _lib.E_INVALID_TENANT)
        return t

    def _handles(self, pool, tenant, units):
        """The handles of a request's names. A tenant name new to this table is
        resolved (claiming its directory slot, kept for the segment's life) only for a
        request that can be granted some day: 0 units, or more than the pool can ever
        hold, raise first and claim nothing."""
        p = self.pool(pool)
        t = self._tenants.get(tenant)
        if t is None:
            self._check_units(p, units)
            t = self.tenant(tenant)
        return p, t

    def check_units(self, pool, units):
        """Raises what an acquire of ``units`` from ``pool`` would raise because the
        table's config can never grant it: ``UnitsExceedCapacity`` for more than a fixed
        pool holds, or than a ``per_worker`` pool holds with a worker in every process
        slot; ``InvalidRequest`` for 0 (``UnknownPool`` for a pool the table does not
        have). Claims and registers nothing; returns None for a request that can be
        granted some day. The middlewares call it when they are built."""
        _check_request(units, 0)
        self._check_units(self.pool(pool), units)

    def _check_units(self, p, units):
        rc = lib.fairshm_check_units(self._h, p, units)
        if rc:
            self._fail(rc)

    def _resolve(self, fn, name, what, code):
        out = c_uint32()
        rc = fn(self._h, _c_name(name, what, code), byref(out))
        if rc:
            self._fail(rc)
        return out.value

    def register(self):
        """Registers this process as a worker now (per_worker pools count it)."""
        rc = lib.fairshm_register(self._h)
        if rc < 0:
            self._fail(rc)
        return rc

    def try_acquire(self, pool, tenant, units=1, hold_ms=0, queued_us=None, now_ms=None):
        """A lease, or ``Refused`` at once. ``units`` and ``hold_ms`` are integers from 0
        (``ValueError`` otherwise: ctypes would wrap them; ``TypeError`` for a float, a
        str or None). ``queued_us``: how long the
        request waited in the server's own queue, when known (see ``note_queue``); an
        over-share refusal's ``retry_after_ms`` is then stretched by it at once.
        ``now_ms``: ``None`` for the library's clock, else an explicit time in ms (0
        included), so that a recorded sequence of calls replays to the same decisions;
        the lease then releases at that time unless given another. A wait measured on
        the real clock (``queued_us``) does not go with it (``ValueError``)."""
        if now_ms is not None:
            if queued_us is not None:
                raise ValueError(
                    "queued_us is a wait measured on the real clock; it does not go with an "
                    "explicit now_ms (note it with note_queue, on the library's clock)"
                )
            now = _now(now_ms)
        # The default request (1 unit, no hold) is known good: `is` holds only for
        # the very int objects of the defaults (a bool 1 or another int type takes the
        # checks), and skipping them is about a twentieth of a pair.
        if units is not _ONE or hold_ms is not _ZERO:
            if not (type(units) is int and type(hold_ms) is int
                    and 0 <= units <= 0xFFFFFFFF and 0 <= hold_ms <= 0xFFFFFFFFFFFFFFFF):
                _check_request(units, hold_ms)  # other integer types pass; the rest raises
        try:
            p = self._pools[pool]
            t = self._tenants[tenant]
        except KeyError:
            p, t = self._handles(pool, tenant, units)
        lease, refusal, lref, rref = _out.bufs
        if queued_us is None:
            if now_ms is None:
                rc = _try_acquire(self._h, p, t, units, hold_ms, lref, rref)
            else:
                rc = _try_acquire_at(self._h, p, t, units, hold_ms, now, lref, rref)
        else:
            _check("queued_us", queued_us, _U64)
            rc = _try_acquire_queued(self._h, p, t, units, hold_ms, queued_us, lref, rref)
        if rc == 0:
            # What `Lease(...)` builds, without a class call and `__init__`'s frame
            # (another twentieth of a pair).
            granted = _new_object(Lease)
            granted.table = self
            granted.id = lease.value
            granted.pool = pool
            granted.tenant = tenant
            granted.units = units
            granted._at = now_ms
            return granted
        if rc == 1:
            raise Refused(self, _copy(refusal), pool, tenant)
        self._fail(rc)

    def note_queue(self, pool, queued_us):
        """Notes that a request for ``pool`` waited ``queued_us`` microseconds in the
        server's own queue (from the front proxy's ``X-Request-Start`` to the app):
        while such waits show a queue, a tenant over its share is told to come
        back later, so that its retries stay out of that queue. The middlewares call it
        for every request that carries the header."""
        _check("queued_us", queued_us, _U64)
        try:
            p = self._pools[pool]
        except KeyError:
            p = self.pool(pool)
        rc = lib.fairshm_note_queue(self._h, p, queued_us)
        if rc:
            self._fail(rc)

    def acquire(self, pool, tenant, units=1, hold_ms=0, timeout=None, cancel=None):
        """A lease, waiting up to ``timeout`` seconds (None or infinity: for ever) for room;
        ``Refused`` (``timed_out`` or ``cancelled``) if none came, or ``rate_limited`` /
        ``work_debt`` as soon as the tenant's next token is known to come after the
        deadline. The GIL is released while waiting, and Ctrl-C (``KeyboardInterrupt``)
        interrupts the wait."""
        _check_request(units, hold_ms)
        p, t = self._handles(pool, tenant, units)
        lease, refusal, lref, rref = _out.bufs
        c = Cancel._ptr_of(cancel)
        # Read before the deadline is set, so that the wait it reports (from here to the
        # refusal) is never shorter than the timeout that ended it.
        start = time.monotonic()
        deadline = _deadline(timeout)
        evict_wait = self._evict_wait(p)
        if evict_wait:
            # An evict pool waits at most its eviction wait for an evictable resident.
            cap = time.monotonic() + evict_wait / 1000.0
            deadline = cap if deadline is None else min(deadline, cap)
        hopeless = False
        # Every call after the first continues the wait: the request's refusal was
        # counted by the first (one request, however many slices), and once a call has
        # passed the tenant's rates (its rule was the pool's) the request has its token.
        continued = 0
        while True:
            left = WAIT_SLICE_MS if deadline is None else _left_ms(deadline)
            last = hopeless or (deadline is not None and left <= WAIT_SLICE_MS)
            rc = _acquire(self._h, p, t, units, hold_ms, min(left, WAIT_SLICE_MS),
                          (0 if last else _lib.WAIT_SLICE) | continued, c, lref, rref)
            continued = _lib.WAIT_CONTINUED | (continued & _lib.WAIT_RATED)
            if rc == 0:
                return Lease(self, lease.value, pool, tenant, units)
            if rc == 1:
                if refusal.rule not in (5, 6):
                    continued |= _lib.WAIT_RATED
                if hopeless and refusal.reason not in (4, 5, 6) and _left_ms(deadline) > 0:
                    hopeless = False  # its rates changed meanwhile: wait on
                    continue
                if last or refusal.reason == 4:
                    facts = _copy(refusal)
                    # The library measured its own slice; the wait was every slice.
                    facts.waited_ms = max(facts.waited_ms, int((time.monotonic() - start) * 1000))
                    raise Refused(self, facts, pool, tenant)
                # Refused by the tenant's rates, with the next token after the deadline:
                # the last call, which says so at once (a slice waits out its end).
                hopeless = (refusal.rule in (5, 6) and deadline is not None
                            and refusal.retry_after_ms > _left_ms(deadline))
                continue  # a slice ended: signal handlers ran (Ctrl-C raises here)
            self._fail(rc)

    def _evict_wait(self, p):
        """Pool handle ``p``'s eviction wait in ms (0: the pool refuses), cached."""
        w = self._evict_waits.get(p)
        if w is None:
            out = c_uint32()
            rc = lib.fairshm_evict_wait_ms(self._h, p, byref(out))
            if rc:
                self._fail(rc)
            w = self._evict_waits[p] = out.value
        return w

    def permit(self, pool, tenant, units=1, hold_ms=0, timeout=None):
        """A lease for a ``with`` block: ``try_acquire`` without ``timeout``, else
        ``acquire``. Raises ``Refused``."""
        if timeout is None:
            return self.try_acquire(pool, tenant, units, hold_ms)
        return self.acquire(pool, tenant, units, hold_ms, timeout)

    def release(self, lease_id, now_ms=None):
        """Releases a lease by its id, at ``now_ms`` (``None``: the library's clock)."""
        _check("lease_id", lease_id, _U64)
        if now_ms is None:
            rc = _release(self._h, lease_id)
        else:
            rc = lib.fairshm_release_at(self._h, lease_id, _now(now_ms))
        if rc:
            self._fail(rc)

    def stats(self, now_ms=None):
        """The whole table as a dict (pools, tenants, leases, processes), with activity
        judged at ``now_ms`` (``None``: read now, on the library's clock)."""
        if not self._h:
            self._fail(_lib.E_INVALID_REQUEST)
        if now_ms is None:
            return _take_json(lib.fairshm_stats_json(self._h), -17)
        return _take_json(lib.fairshm_stats_json_at(self._h, _now(now_ms)), -17)

    def reap_dead(self):
        """Returns the permits of dead processes now; the number reaped."""
        rc = lib.fairshm_reap_dead(self._h)
        if rc < 0:
            self._fail(rc)
        return rc

    def set_sweep_ms(self, ms):
        _check("ms", ms, _U64)
        lib.fairshm_set_sweep_ms(self._h, ms)

    def set_rates(self, tenant, requests_per_s=0, work_units_per_s=0):
        """Sets ``tenant``'s rates (0: unbounded), for every process at once: over
        its request rate an acquire raises ``Refused`` (``rate_limited``), in work
        debt ``work_debt``, before any pool is touched."""
        _check("requests_per_s", requests_per_s, _U32)
        _check("work_units_per_s", work_units_per_s, _U32)
        rc = lib.fairshm_set_rates(self._h, self.tenant(tenant), requests_per_s, work_units_per_s)
        if rc:
            self._fail(rc)

    def rates(self, tenant):
        """``(requests_per_s, work_units_per_s)`` of ``tenant``; 0 is unbounded, as are
        the rates of a tenant not seen yet. Claims nothing (an observer reads them too)."""
        t = self._tenants.get(tenant)
        if t is None:
            out = c_uint32()
            rc = lib.fairshm_find_tenant(self._h, _c_name(tenant, "tenant", _lib.E_INVALID_TENANT), byref(out))
            if rc == _lib.ABSENT:
                return 0, 0
            if rc:
                self._fail(rc)
            t = self._tenants[tenant] = out.value
        r, w = c_uint32(), c_uint32()
        rc = lib.fairshm_rates(self._h, t, byref(r), byref(w))
        if rc:
            self._fail(rc)
        return r.value, w.value

    def guaranteed(self, name):
        """A guaranteed pool (seed 001) of this table, by name."""
        return Guaranteed(self, name)

    def charge(self, tenant, units, now_ms=None):
        """Charges ``units`` of work done for ``tenant`` (after the work). Returns the
        ms until it is out of the debt this leaves (0: none). ``now_ms``: ``None`` for
        the library's clock, else an explicit time."""
        _check("units", units, _U64)
        now = _now(now_ms)
        debt = c_uint64()
        rc = lib.fairshm_charge(self._h, self.tenant(tenant), units, now, byref(debt))
        if rc:
            self._fail(rc)
        return debt.value


_REFUSAL_SIZE = sizeof(_lib.Refusal)


def _copy(r):
    c = _lib.Refusal()
    memmove(byref(c), byref(r), _REFUSAL_SIZE)
    return c
