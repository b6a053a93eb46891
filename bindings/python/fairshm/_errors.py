"""The C ABI's codes as Python sees them: one exception class per error code, the
refusal reasons' names, and the checks that refuse a bad argument before it reaches the
library (a name a C string cannot carry, an integer ctypes would wrap)."""

import json
import math
import numbers
import operator
import time
from ctypes import string_at

from . import _lib
from ._lib import lib

class Error(Exception):
    """Something wrong with the request or the table (not a refusal). ``code`` is the C
    ABI's (negative) code, ``kind`` its stable name."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code
        self.kind = _lib.code_name(code)

    def __reduce__(self):
        # Pickled (an exception a multiprocessing worker sends back) as the arguments
        # it was made with, which `Exception`'s default (its message alone) is not.
        return (type(self), (self.code, str(self)))


# One subclass per code of the C ABI, named as the Rust `Error` variant (`Io` is
# `IoError` here), so a caller can catch exactly what it can handle.
class InvalidName(Error):
    """A segment name that cannot be used (-1)."""


class InvalidConfig(Error):
    """A config that breaks a rule; the message names the field (-2)."""


class NotFound(Error):
    """No segment of that name (-3)."""


class AlreadyExists(Error):
    """A segment of that name exists already (-4)."""


class Truncated(Error):
    """The segment's file is shorter than its layout needs (-5)."""


class BadMagic(Error):
    """The file is not a fairshm segment (-6)."""


class VersionMismatch(Error):
    """A segment of another layout version: `shmtool clean` it before a new master (-7)."""


class NotReady(Error):
    """The segment's creator never finished making it (-8)."""


class WrongOwner(Error):
    """The segment belongs to another user (-9)."""


class ConfigMismatch(Error):
    """The segment was created with another config; the message says what differs (-10)."""


class Corrupt(Error):
    """Shared memory that breaks an invariant, named in the message (-11)."""


class UnknownPool(Error):
    """No pool of that name in this table (-12)."""


class InvalidTenant(Error):
    """A tenant name that cannot be used (empty, too long, a NUL byte) (-13)."""


class TenantTableFull(Error):
    """The tenant directory has no room for another tenant (-14)."""


class LeaseTableFull(Error):
    """All of this process's lease slots are in use (-15)."""


class ProcessTableFull(Error):
    """No process slot is free or reapable (-16)."""


class InvalidRequest(Error):
    """A request that makes no sense (0 units, a handle of another table) (-17)."""


class UnitsExceedCapacity(Error):
    """More units than the pool can ever hold (-18)."""


class AlreadyReleased(Error):
    """A lease released again (-19)."""


class NotOwner(Error):
    """A lease of another process (-20)."""


class IoError(Error):
    """A system call on the segment failed (-21)."""


class ReadOnly(Error):
    """A change asked of an observer's read-only open (-22)."""


class TenantBusy(Error):
    """A tenant slot still being written by a live process; retry (-23)."""


class BadFile(Error):
    """The segment's path is not a file fairshm may trust (-24)."""


class PoolLeasesFull(Error):
    """A guaranteed pool holds all the leases it can (-25)."""


class Revoked(Error):
    """A resident lease (of an ``evict`` pool) was revoked to make room: put the object
    to sleep and release the lease (-26)."""


class NotResident(Error):
    """A call on a lease of a pool that does not evict, or an end without a begin (-27)."""


class ForeignPidNamespace(Error):
    """The segment was made in another pid namespace; open it as an observer (-28)."""


_ERRORS = {-(i + 1): c for i, c in enumerate([
    InvalidName, InvalidConfig, NotFound, AlreadyExists, Truncated, BadMagic,
    VersionMismatch, NotReady, WrongOwner, ConfigMismatch, Corrupt, UnknownPool,
    InvalidTenant, TenantTableFull, LeaseTableFull, ProcessTableFull, InvalidRequest,
    UnitsExceedCapacity, AlreadyReleased, NotOwner, IoError, ReadOnly, TenantBusy,
    BadFile, PoolLeasesFull, Revoked, NotResident, ForeignPidNamespace])}


class _ReleasedOnExit:
    """A lease's ``with`` block: the lease is released when the block ends, unless the
    block released it already (an early release), and then the end raises nothing, so
    that an exception of the block's own is the one that propagates."""

    __slots__ = ()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        try:
            self.release()
        except AlreadyReleased:
            pass  # released in the block already: nothing is held
        return False


def _raise(code):
    raise _ERRORS.get(code, Error)(code, _lib.last_error())


def _c_name(name, what, code):
    """``name`` as the C ABI takes it (UTF-8, NUL-terminated). One that a C string
    cannot carry, or that has no UTF-8 spelling (a lone surrogate, as
    ``surrogateescape`` decoding leaves), is refused as the library refuses a bad name
    (error ``code``), never cut at its NUL: ``"a\\x00b"`` would otherwise be tenant
    ``"a"``."""
    if not isinstance(name, str):
        raise TypeError("a %s name is a str, not %s" % (what, type(name).__name__))
    if "\x00" in name:
        raise _bad_name(name, what, code, "contains a NUL byte")
    try:
        return name.encode()
    except UnicodeEncodeError:
        raise _bad_name(name, what, code, "not UTF-8") from None


def _bad_name(name, what, code, why):
    """The library's error ``code`` for a bad ``what`` name, saying ``why``."""
    return _ERRORS.get(code, Error)(code, "invalid %s name %r: %s" % (what, name, why))


def _deadline(timeout):
    """The monotonic instant a wait of ``timeout`` seconds ends: ``None`` (no end) for
    ``None`` or infinity; a negative timeout tries once; NaN is refused."""
    if timeout is None:
        return None
    if not isinstance(timeout, numbers.Real):
        raise TypeError("timeout must be a number of seconds or None, not %s" % type(timeout).__name__)
    if timeout == float("inf"):
        return None
    if timeout != timeout:
        raise ValueError("timeout is NaN")
    return time.monotonic() + max(0.0, timeout)


def _left_ms(deadline):
    """Whole ms from now to ``deadline`` (a monotonic instant), rounded up: a wait of
    that long ends at the deadline or after it, never before (rounded down, the last
    slice of a wait ended up to 1 ms early, and a wait of 50 ms was over after 49)."""
    return max(0, math.ceil((deadline - time.monotonic()) * 1000))


def _take_json(p, code):
    """Parses a JSON string the library returned and frees it; a null one raises with
    ``code`` and the library's last error."""
    if not p:
        _raise(code)
    try:
        return json.loads(string_at(p))
    finally:
        lib.fairshm_string_free(p)


_REASONS = {1: "pool_full", 2: "over_share", 3: "timed_out", 4: "cancelled",
            5: "rate_limited", 6: "work_debt", 7: "hold_exceeds_reclaim_horizon",
            8: "guarantee_on_loan", 9: "guarantee_exhausted", 10: "too_many_residents"}


_U32 = 0xFFFFFFFF
_U64 = 0xFFFFFFFFFFFFFFFF


def _out_of_range(name, value, hi, lo=0):
    """ctypes would wrap a negative or too large integer silently (-1 units would ask
    for 4294967295): refused here, naming the argument and its range (from ``lo``)."""
    return ValueError("%s must be an integer from %d to %d, not %r" % (name, lo, hi, value))


def _check(name, value, hi, lo=0):
    """Refuses what ctypes would pass wrapped or refuse without naming the argument: an
    integer out of ``[0, hi]`` (``ValueError``), or not an integer at all (``TypeError``:
    a float, a str, None). Any integer type is taken (``operator.index``)."""
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError("%s must be an integer, not %s" % (name, type(value).__name__)) from None
    if not 0 <= v <= hi:
        raise _out_of_range(name, value, hi, lo)


def _now(now_ms):
    """A ``now_ms`` argument for the C ABI: ``None`` is the library's clock
    (``FAIRSHM_NOW``), any other integer an explicit time in ms, 0 included (so a
    trace that starts at t = 0 replays as it does in Rust)."""
    if now_ms is None:
        return _lib.NOW
    _check("now_ms", now_ms, _U64 - 1)
    return now_ms


def _check_request(units, hold_ms):
    # Units run from 1, as the message says; 0 goes on to the library, whose typed
    # ``InvalidRequest`` says that 0 units were asked for.
    _check("units", units, _U32, lo=1)
    _check("hold_ms", hold_ms, _U64)


# Shown as ``fairshm.NotFound`` (where they are exported), not by this module's name.
for _c in (Error, *_ERRORS.values()):
    _c.__module__ = "fairshm"
del _c
