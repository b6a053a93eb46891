"""The C ABI through ctypes: the library, its structs and its functions' signatures.

ctypes releases the GIL around every call into the library (a ``CDLL``), so a blocking
acquire lets the process's other threads run."""

import ctypes
import os
from ctypes import POINTER, c_bool, c_char_p, c_double, c_int32, c_int64, c_size_t, c_uint32, c_uint64, c_void_p
from pathlib import Path


class Refusal(ctypes.Structure):
    """``fairshm_refusal`` of ``include/fairshm.h``."""

    _fields_ = [
        ("reason", c_uint32),
        ("rule", c_uint32),
        ("units", c_uint32),
        ("queued", c_uint32),
        ("retry_after_ms", c_uint64),
        ("in_use", c_uint32),
        ("held", c_uint32),
        ("capacity", c_uint32),
        ("floor", c_uint32),
        ("weight", c_uint32),
        ("short_units", c_uint32),
        ("active_weight", c_uint64),
        ("waited_ms", c_uint64),
        ("pool", c_uint32),
        ("tenant", c_uint32),
        ("interval_us", c_uint64),
        ("queue_stretch_pct", c_uint32),
        ("server_queue_us", c_uint32),
        ("rate_per_s", c_uint32),
        ("reserved", c_uint32),
    ]


class GuaranteedRefusal(ctypes.Structure):
    """``fairshm_guaranteed_refusal`` of ``include/fairshm.h``."""

    _fields_ = [
        ("reason", c_uint32),
        ("has_retry_after", c_uint32),
        ("retry_after_ms", c_uint64),
        ("units", c_uint64),
        ("guarantee", c_uint64),
        ("own_free", c_uint64),
        ("lent", c_uint64),
        ("need", c_uint64),
        ("lendable", c_uint64),
        ("seq", c_uint64),
        ("n_blocking", c_uint32),
        ("why_len", c_uint32),
        ("blocking", c_uint64 * 8),
        ("blocking_tenant", c_uint32 * 8),
    ]


OK = 0
REFUSED = 1
ABSENT = 1  # fairshm_find_tenant: no tenant of that name yet
E_PANIC = -99
# The error codes the binding raises itself (include/fairshm.h's FAIRSHM_E_*).
E_INVALID_NAME = -1
E_INVALID_CONFIG = -2
E_UNKNOWN_POOL = -12
E_INVALID_TENANT = -13
E_INVALID_REQUEST = -17
OPEN, CREATE, OPEN_OR_CREATE, OBSERVER = 0, 1, 2, 3
CONFIG_NONE, CONFIG_JSON, CONFIG_TOML, CONFIG_FILE = 0, 1, 2, 3
# A ``now_ms`` meaning the library's clock (FAIRSHM_NOW); every other value, 0
# included, is an explicit time.
NOW = 0xFFFFFFFFFFFFFFFF
# Bytes that always hold a guaranteed refusal's whole explanation
# (FAIRSHM_GUARANTEED_WHY_MAX).
G_WHY_MAX = 4096
WAIT_SLICE = 1
# How long one slice of a blocking wait lasts, in ms (``fairshm.WAIT_SLICE_MS``).
WAIT_SLICE_MS = 100
WAIT_CONTINUED = 2
WAIT_RATED = 4


def _find():
    env = os.environ.get("FAIRSHM_LIB")
    if env:
        return env
    here = Path(__file__).resolve().parent
    for p in (here / "libfairshm.so", here.parent.parent.parent / "target" / "release" / "libfairshm.so"):
        if p.exists():
            return str(p)
    raise ImportError(
        "fairshm: libfairshm.so not found (install the package with pip, or set FAIRSHM_LIB)"
    )


lib = ctypes.CDLL(_find())

_sigs = {
    "fairshm_open": (c_int32, [c_char_p, c_uint32, c_char_p, c_uint32, c_uint32, POINTER(c_void_p)]),
    "fairshm_close": (None, [c_void_p]),
    "fairshm_unlink": (c_int32, [c_char_p]),
    "fairshm_last_error": (c_char_p, []),
    "fairshm_code_name": (c_char_p, [c_int32]),
    "fairshm_string_free": (None, [c_void_p]),
    "fairshm_pool": (c_int32, [c_void_p, c_char_p, POINTER(c_uint32)]),
    "fairshm_tenant": (c_int32, [c_void_p, c_char_p, POINTER(c_uint32)]),
    "fairshm_find_tenant": (c_int32, [c_void_p, c_char_p, POINTER(c_uint32)]),
    "fairshm_register": (c_int32, [c_void_p]),
    "fairshm_check_units": (c_int32, [c_void_p, c_uint32, c_uint32]),
    "fairshm_try_acquire": (
        c_int32,
        [c_void_p, c_uint32, c_uint32, c_uint32, c_uint64, POINTER(c_uint64), POINTER(Refusal)],
    ),
    "fairshm_acquire": (
        c_int32,
        [
            c_void_p, c_uint32, c_uint32, c_uint32, c_uint64, c_uint64, c_uint32, c_void_p,
            POINTER(c_uint64), POINTER(Refusal),
        ],
    ),
    "fairshm_try_acquire_queued": (
        c_int32,
        [c_void_p, c_uint32, c_uint32, c_uint32, c_uint64, c_uint64, POINTER(c_uint64), POINTER(Refusal)],
    ),
    "fairshm_release": (c_int32, [c_void_p, c_uint64]),
    "fairshm_try_acquire_at": (
        c_int32,
        [c_void_p, c_uint32, c_uint32, c_uint32, c_uint64, c_uint64, POINTER(c_uint64), POINTER(Refusal)],
    ),
    "fairshm_release_at": (c_int32, [c_void_p, c_uint64, c_uint64]),
    "fairshm_stats_json_at": (c_void_p, [c_void_p, c_uint64]),
    "fairshm_note_queue": (c_int32, [c_void_p, c_uint32, c_uint64]),
    "fairshm_begin_call": (c_int32, [c_void_p, c_uint64, c_uint64]),
    "fairshm_end_call": (c_int32, [c_void_p, c_uint64, c_uint64]),
    "fairshm_resident_status": (c_int32, [c_void_p, c_uint64, POINTER(c_uint32)]),
    "fairshm_wait_revoked": (c_int32, [c_void_p, c_uint64, c_uint64, POINTER(c_uint32)]),
    "fairshm_evict_wait_ms": (c_int32, [c_void_p, c_uint32, POINTER(c_uint32)]),
    "fairshm_explain": (c_int64, [c_void_p, POINTER(Refusal), c_char_p, c_size_t]),
    "fairshm_share": (c_double, [POINTER(Refusal)]),
    "fairshm_stats_json": (c_void_p, [c_void_p]),
    "fairshm_reap_dead": (c_int32, [c_void_p]),
    "fairshm_set_sweep_ms": (c_int32, [c_void_p, c_uint64]),
    "fairshm_set_rates": (c_int32, [c_void_p, c_uint32, c_uint32, c_uint32]),
    "fairshm_rates": (c_int32, [c_void_p, c_uint32, POINTER(c_uint32), POINTER(c_uint32)]),
    "fairshm_charge": (c_int32, [c_void_p, c_uint32, c_uint64, c_uint64, POINTER(c_uint64)]),
    "fairshm_cancel_new": (c_void_p, []),
    "fairshm_cancel_fire": (None, [c_void_p]),
    "fairshm_cancel_reset": (None, [c_void_p]),
    "fairshm_cancel_fired": (c_bool, [c_void_p]),
    "fairshm_cancel_free": (None, [c_void_p]),
    "fairshm_nop_acquire": (
        c_int32,
        [c_void_p, c_uint32, c_uint32, c_uint32, c_uint64, POINTER(c_uint64), POINTER(Refusal)],
    ),
    "fairshm_nop_release": (c_int32, [c_void_p, c_uint64]),
    "fairshm_guaranteed_pool": (c_int32, [c_void_p, c_char_p, POINTER(c_uint32)]),
    "fairshm_guaranteed_tenant": (c_int32, [c_void_p, c_uint32, c_char_p, POINTER(c_uint32)]),
    "fairshm_guaranteed_acquire": (
        c_int32,
        [
            c_void_p, c_uint32, c_uint32, c_uint64, c_uint64, c_uint64,
            POINTER(c_uint64), POINTER(GuaranteedRefusal), c_char_p, c_size_t,
        ],
    ),
    "fairshm_guaranteed_release": (c_int32, [c_void_p, c_uint64, c_uint64]),
    "fairshm_guaranteed_wake_seen_as": (
        c_int32, [c_void_p, c_uint32, c_uint32, POINTER(c_uint64)]),
    "fairshm_guaranteed_sleep_as": (
        c_int32,
        [c_void_p, c_uint32, c_uint32, c_uint64, POINTER(c_uint64), c_uint64, c_void_p,
         POINTER(c_uint32)]),
    "fairshm_guaranteed_wait_end": (c_int32, [c_void_p, c_uint32]),
    "fairshm_guaranteed_stats_json": (c_void_p, [c_void_p, c_uint32, c_uint64]),
}
for _name, (_res, _args) in _sigs.items():
    _f = getattr(lib, _name)
    _f.restype = _res
    _f.argtypes = _args


def code_name(code):
    return lib.fairshm_code_name(code).decode()


def last_error():
    return lib.fairshm_last_error().decode("utf-8", "replace")
