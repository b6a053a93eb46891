import json
import os

import pytest

import fairshm


def test_grant_release_and_refusal_facts(table):
    a = table.try_acquire("requests", "acme", hold_ms=5)
    b = table.try_acquire("requests", "acme", units=3)
    with pytest.raises(fairshm.Refused) as e:
        table.try_acquire("requests", "acme")
    r = e.value
    assert r.reason == "over_share" and r.code == 2
    assert (r.in_use, r.held, r.capacity, r.floor, r.units) == (4, 4, 4, 1, 1)
    assert r.retry_after_ms >= 1 and r.retry_after_header >= 1
    assert r.pool == "requests" and r.tenant == "acme"
    assert r.share == 4.0  # alone: the whole pool
    assert '"acme"' in r.explanation and "retry after" in r.explanation
    assert "its turn is expected in" in r.explanation and r.queued == 0 and r.interval_us > 0
    d = r.as_dict()
    assert d["reason"] == "over_share" and d["held"] == 4
    a.release()
    b.release()
    assert table.stats()["pools"][0]["in_use"] == 0


def test_a_table_and_a_lease_say_what_they_are(table):
    lease = table.try_acquire("requests", "acme")
    assert repr(lease) == "<fairshm.Lease %#x of table %r>" % (lease.id, table.name)
    assert repr(table) == "<fairshm.Table %r open>" % table.name
    lease.release()
    table.close()
    assert repr(table) == "<fairshm.Table %r closed>" % table.name


def test_a_lease_says_what_it_holds(table):
    lease = table.try_acquire("requests", "acme", units=2, hold_ms=5)
    assert (lease.pool, lease.tenant, lease.units) == ("requests", "acme", 2)
    lease.release()
    lease = table.acquire("requests", "globex", timeout=1)
    assert (lease.pool, lease.tenant, lease.units) == ("requests", "globex", 1)
    lease.release()


def test_the_default_requests_lease_is_built_as_the_constructor_builds_it(table):
    # `try_acquire` builds the lease of a default request without `Lease.__init__`
    # (its fast path): every slot the constructor sets must be set there too.
    lease = table.try_acquire("requests", "acme")
    built = fairshm.Lease(table, lease.id, "requests", "acme", 1, None)
    for slot in fairshm.Lease.__slots__:
        assert getattr(lease, slot) == getattr(built, slot), slot
    lease.release()
    with pytest.raises(fairshm.AlreadyReleased):
        built.release()


def test_permit_releases_on_leaving_the_block(table):
    with table.permit("requests", "acme", units=2, hold_ms=10) as lease:
        assert table.stats()["pools"][0]["in_use"] == 2
        assert lease.id > 0
    assert table.stats()["pools"][0]["in_use"] == 0


def test_a_lease_released_in_its_block_is_not_released_again_on_leaving_it(table):
    # An early release in the block: leaving it releases nothing more and raises
    # nothing, so an exception of the block's own is the one that propagates.
    with table.permit("requests", "acme") as lease:
        lease.release()
        assert table.stats()["pools"][0]["in_use"] == 0
    with pytest.raises(ValueError, match="the block's own"):
        with table.permit("requests", "acme") as lease:
            lease.release()
            raise ValueError("the block's own")
    with pytest.raises(fairshm.AlreadyReleased):  # a second release of its own still says so
        lease.release()
    assert table.stats()["pools"][0]["in_use"] == 0


def test_a_request_that_can_never_be_granted_claims_no_tenant_slot(name):
    # A tenant's directory slot is kept for the segment's life: a request for more than
    # its pool can ever hold (a fixed pool's capacity; a per_worker pool's tickets with
    # a worker in every process slot) raises before its new name claims one, through a
    # try and a wait alike. What more live workers would grant claims the name.
    cfg = {"max_processes": 4, "pools": [{"name": "requests", "capacity": 4},
                                         {"name": "db", "per_worker": {"quota": 1.0, "min_tickets": 0}}]}
    with fairshm.Table.create(name, cfg) as t:
        def slots():
            return t.stats()["tables"]["tenants"]["used"]
        for pool in ("requests", "db"):
            with pytest.raises(fairshm.UnitsExceedCapacity):
                t.try_acquire(pool, "newcomer", units=5)
            with pytest.raises(fairshm.UnitsExceedCapacity):
                t.acquire(pool, "newcomer", units=5, timeout=0.01)
        assert slots() == 0
        with pytest.raises(fairshm.UnitsExceedCapacity) as e:
            t.try_acquire("db", "newcomer", units=4)
        assert "once more workers have registered" in str(e.value)
        assert slots() == 1


def test_errors_are_typed_and_named(table, name):
    lease = table.try_acquire("requests", "acme")
    lease.release()
    with pytest.raises(fairshm.AlreadyReleased) as e:
        lease.release()
    assert e.value.kind == "already_released" and e.value.code == -19
    with pytest.raises(fairshm.UnknownPool) as e:
        table.try_acquire("nope", "acme")
    assert "requests" in str(e.value)
    with pytest.raises(fairshm.UnitsExceedCapacity) as e:
        table.try_acquire("requests", "acme", units=5)
    assert e.value.kind == "units_exceed_capacity"
    with pytest.raises(fairshm.InvalidRequest) as e:
        table.try_acquire("requests", "acme", units=0)
    assert e.value.kind == "invalid_request"
    with pytest.raises(fairshm.InvalidTenant):
        table.try_acquire("requests", "")
    with pytest.raises(fairshm.AlreadyExists):
        fairshm.Table.create(name, {"pools": [{"name": "requests", "capacity": 4}]})
    with pytest.raises(fairshm.NotFound):
        fairshm.Table.open(name + "-missing")
    with pytest.raises(fairshm.InvalidConfig) as e:
        fairshm.Table.create(name + "-bad", {"pools": [{"name": "requests", "capacity": 0}]})
    assert "capacity" in str(e.value)
    with pytest.raises(fairshm.InvalidConfig):
        fairshm.Table.create(name + "-bad", {"pools": [], "bogus": 1})
    with pytest.raises(TypeError):
        fairshm.Table.create(name + "-bad", 42)
    # A per_worker quota out of (0, 1] says which side; a NaN one is named before JSON.
    for quota, why in [(0, "0 or less"), (-0.5, "0 or less"), (1.5, "above 1"),
                       (float("nan"), "NaN"), (float("inf"), "infinite")]:
        cfg = {"pools": [{"name": "db", "per_worker": {"quota": quota, "min_tickets": 1}}]}
        with pytest.raises(fairshm.InvalidConfig) as e:
            fairshm.Table.create(name + "-bad", cfg)
        assert "quota" in str(e.value) and why in str(e.value), (quota, str(e.value))
    tiny = fairshm.Table.create(name + "-tiny", {"pools": [
        {"name": "db", "per_worker": {"quota": 1e-7, "min_tickets": 0}}]})
    try:
        tiny.register()
        pool = tiny.stats()["pools"][0]
        assert pool["capacity"] == 1  # ceil(1e-7 * 1 worker)
        assert pool["per_worker"] == {"quota": 1e-7, "min_tickets": 0, "workers": 1, "tickets": 1}
    finally:
        tiny.close()
        fairshm.Table.unlink(name + "-tiny")


def test_config_from_toml_and_json_files(tmp_path, name):
    toml = tmp_path / "fairshm.toml"
    toml.write_text('[[pools]]\nname = "flights"\ncapacity = 7\n[weights]\nacme = 3\n')
    t = fairshm.Table.create(name, str(toml))
    assert t.stats()["pools"][0]["capacity"] == 7
    t.close()
    js = tmp_path / "fairshm.json"
    js.write_text(json.dumps({"pools": [{"name": "flights", "capacity": 7}], "weights": {"acme": 3}}))
    t2 = fairshm.Table.open(name, js)  # the same config: opens
    assert t2.stats()["pools"][0]["name"] == "flights"
    t2.close()
    js.write_text(json.dumps({"pools": [{"name": "flights", "capacity": 8}]}))
    with pytest.raises(fairshm.Error) as e:
        fairshm.Table.open(name, js)
    assert e.value.kind == "config_mismatch"


def test_config_as_its_json_or_toml_text(tmp_path, name):
    # A str that is no file and can be no path is the config's own text.
    t = fairshm.Table.create(name, ' {"pools": [{"name": "flights", "capacity": 7}]}')
    assert t.stats()["pools"][0]["capacity"] == 7
    t2 = fairshm.Table.open(name, '[[pools]]\nname = "flights"\ncapacity = 7\n')
    assert t2.stats()["pools"][0]["name"] == "flights"
    t2.close()
    with pytest.raises(fairshm.ConfigMismatch):
        fairshm.Table.open(name, '{"pools": [{"name": "flights", "capacity": 8}]}')
    t.close()
    with pytest.raises(ValueError, match="NUL"):
        fairshm.Table.open(name, '{"pools": []}\x00')
    # A name that is no file and no config text is still a missing file.
    with pytest.raises(fairshm.InvalidConfig, match="cannot read config file"):
        fairshm.Table.open(name, str(tmp_path / "missing.toml"))
    # An existing file is read, whatever its name looks like.
    odd = tmp_path / "{odd}.json"
    odd.write_text(json.dumps({"pools": [{"name": "flights", "capacity": 7}]}))
    fairshm.Table.open(name, str(odd)).close()


def test_open_or_create_and_observer(name):
    cfg = {"pools": [{"name": "requests", "capacity": 2}]}
    a = fairshm.Table.open_or_create(name, cfg)
    b = fairshm.Table.open_or_create(name, cfg)
    lease = a.try_acquire("requests", "acme")
    obs = fairshm.Table.observer(name)
    assert obs.stats()["pools"][0]["in_use"] == 1
    with pytest.raises(fairshm.Error) as e:
        obs.try_acquire("requests", "acme")
    assert e.value.kind == "read_only"
    lease.release()
    assert b.stats()["pools"][0]["in_use"] == 0
    for t in (a, b, obs):
        t.close()


def test_rates_are_read_without_claiming_a_tenant_and_by_an_observer(table, name):
    assert table.rates("newcomer") == (0, 0)
    assert table.stats()["tenants"] == [], "reading claimed nothing"
    table.set_rates("acme", 5, 7)
    obs = fairshm.Table.observer(name)
    try:
        assert obs.rates("acme") == (5, 7)
        assert obs.rates("newcomer") == (0, 0)
        with pytest.raises(fairshm.InvalidTenant):
            obs.rates("")
    finally:
        obs.close()
    assert [t["name"] for t in table.stats()["tenants"]] == ["acme"]


def test_stats_is_a_dict_with_tenants(table):
    with table.permit("requests", "acme"):
        s = table.stats()
    assert isinstance(s, dict)
    assert [t["name"] for t in s["tenants"]] == ["acme"]
    assert s["pools"][0]["name"] == "requests"


def test_rates_refuse_before_the_pool_and_debt_is_charged(table):
    assert table.rates("acme") == (0, 0)
    table.set_rates("acme", requests_per_s=2)
    assert table.rates("acme") == (2, 0)
    for _ in range(2):
        table.try_acquire("requests", "acme").release()
    with pytest.raises(fairshm.Refused) as e:
        table.try_acquire("requests", "acme")
    r = e.value
    assert r.reason == "rate_limited" and r.code == 5
    assert r.in_use == 0 and 400 <= r.retry_after_ms <= 500
    assert "request rate of 2 per second" in r.explanation
    assert r.rate_per_s == 2 and r.as_dict()["rate_per_s"] == 2
    assert r.as_dict()["reason"] == "rate_limited"
    node = [t for t in table.stats()["tenants"] if t["name"] == "acme"][0]
    assert node["rates"]["rate_limited"] == 1
    # Work: 100 units a second; 250 charged leave 1.5 s of debt.
    table.set_rates("acme", work_units_per_s=100)
    assert 1400 <= table.charge("acme", 250) <= 1500
    with pytest.raises(fairshm.Refused) as e:
        table.try_acquire("requests", "acme")
    assert e.value.reason == "work_debt" and e.value.code == 6
    assert e.value.rate_per_s == 100
    assert "rate of 100 units per second" in e.value.explanation
    # Explicit now: exact to the millisecond.
    table.set_rates("globex", work_units_per_s=1000)
    assert table.charge("globex", 3000, now_ms=10_000_000) == 2000
    with pytest.raises(fairshm.Error):
        table.set_rates("", requests_per_s=1)


def test_out_of_range_integers_are_refused_not_wrapped(table):
    # ctypes would pass -1 as 4294967295, and 2**32 + 1 units as 1.
    for kw in ({"units": -1}, {"units": 2**32 + 1}, {"hold_ms": -5}, {"hold_ms": 2**64}):
        with pytest.raises(ValueError) as e:
            table.try_acquire("requests", "acme", **kw)
        assert next(iter(kw)) in str(e.value)
        with pytest.raises(ValueError):
            table.acquire("requests", "acme", timeout=0.01, **kw)
    assert table.stats()["pools"][0]["in_use"] == 0  # nothing was granted
    # Units run from 1 (0 is the library's InvalidRequest); other numbers from 0.
    with pytest.raises(ValueError) as e:
        table.try_acquire("requests", "acme", units=-1)
    assert "units must be an integer from 1 to 4294967295, not -1" in str(e.value)
    with pytest.raises(ValueError) as e:
        table.try_acquire("requests", "acme", hold_ms=-5)
    assert "hold_ms must be an integer from 0 to" in str(e.value)
    with pytest.raises(ValueError):
        table.set_rates("acme", requests_per_s=-1)
    with pytest.raises(ValueError):
        table.charge("acme", -3)


def test_arguments_of_the_wrong_type_are_refused_naming_them(table):
    # ctypes said "argument 4: TypeError: wrong type" for a float, and a comparison's
    # TypeError for None or a str; a wrong cancel was an AttributeError.
    for kw, said in (({"units": 1.5}, "units must be an integer, not float"),
                     ({"units": "2"}, "units must be an integer, not str"),
                     ({"hold_ms": None}, "hold_ms must be an integer, not NoneType")):
        with pytest.raises(TypeError) as e:
            table.try_acquire("requests", "acme", **kw)
        assert said in str(e.value)
    with pytest.raises(TypeError) as e:
        table.acquire("requests", "acme", timeout="1")
    assert "timeout must be a number of seconds or None, not str" in str(e.value)
    with pytest.raises(TypeError) as e:
        table.acquire("requests", "acme", timeout=0.01, cancel=5)
    assert "cancel must be a fairshm.Cancel or None, not int" in str(e.value)
    with pytest.raises(ValueError) as e:
        table.release(-1)  # ctypes would pass it as 2**64 - 1
    assert "lease_id must be an integer from 0 to" in str(e.value)
    assert table.stats()["pools"][0]["in_use"] == 0  # nothing was granted
    lease = table.try_acquire("requests", "acme", units=True, hold_ms=2**3)  # any integer type
    assert table.stats()["pools"][0]["in_use"] == 1
    lease.release()


def test_a_refusal_outliving_its_table_still_explains_itself(name):
    # A Refused raised out of a block that closes its table is printed after the close.
    t = fairshm.Table.create(name, {"pools": [{"name": "requests", "capacity": 1}]})
    lease = t.try_acquire("requests", "acme")
    with pytest.raises(fairshm.Refused) as early:
        t.try_acquire("requests", "acme")
    explained = early.value.explanation
    with pytest.raises(fairshm.Refused) as late:
        t.try_acquire("requests", "globex")
    lease.release()
    t.close()
    assert early.value.explanation == explained  # kept as it was first made
    assert "acme" in explained
    text = str(late.value)
    assert text.startswith("pool_full: ")
    assert "globex" in text and "requests" in text and "closed" in text
    assert "in use 1 of 1" in text


def test_a_rate_refusal_outliving_its_table_states_its_rate(name):
    t = fairshm.Table.create(name, {"pools": [{"name": "requests", "capacity": 4}]})
    t.set_rates("acme", requests_per_s=3)
    for _ in range(3):
        t.try_acquire("requests", "acme").release()
    with pytest.raises(fairshm.Refused) as e:
        t.try_acquire("requests", "acme")
    t.close()
    text = str(e.value)
    assert text.startswith("rate_limited: ") and "closed" in text
    assert "its request rate: 3 per second" in text and "in use" not in text


def test_a_refusal_explained_just_after_another_thread_closed_the_table(name):
    # The race where the Refused reads the handle, another thread closes the table, and
    # the explanation's call then finds it closed: the numbers, not an error out of
    # str(). Played here by a close in between, where that thread's would come.
    from fairshm import _lib

    t = fairshm.Table.create(name, {"pools": [{"name": "requests", "capacity": 1}]})
    lease = t.try_acquire("requests", "acme")
    with pytest.raises(fairshm.Refused) as r:
        t.try_acquire("requests", "globex")
    lease.release()
    explain = _lib.lib.fairshm_explain

    def closed_first(*args):
        t.close()
        return explain(*args)

    _lib.lib.fairshm_explain = closed_first
    try:
        text = str(r.value)
    finally:
        _lib.lib.fairshm_explain = explain
    assert text.startswith("pool_full: ") and "globex" in text and "closed" in text


def test_names_a_c_string_cannot_carry_are_refused_not_cut(table, name):
    # "a\x00b" would reach the library as tenant "a".
    with pytest.raises(fairshm.Error) as e:
        table.try_acquire("requests", "acme\x00evil")
    assert e.value.kind == "invalid_tenant" and "NUL" in str(e.value)
    with pytest.raises(fairshm.UnknownPool):
        table.try_acquire("requests\x00", "acme")
    with pytest.raises(fairshm.Error) as e:
        fairshm.Table.open(name + "\x00x")
    assert e.value.kind == "invalid_name"
    with pytest.raises(TypeError):
        table.try_acquire("requests", None)
    assert table.stats()["tenants"] == []  # nothing was claimed


def test_a_name_with_no_utf8_spelling_is_a_bad_name_of_its_kind(table, name):
    # A lone surrogate (what os.fsdecode or "surrogateescape" leaves of bytes that are
    # not UTF-8) was a UnicodeEncodeError, which no fairshm handler catches.
    bad = b"caf\xe9".decode("utf-8", "surrogateescape")
    with pytest.raises(fairshm.InvalidTenant) as e:
        table.try_acquire("requests", bad)
    assert "not UTF-8" in str(e.value)
    with pytest.raises(fairshm.UnknownPool):
        table.try_acquire("requests" + bad, "acme")
    with pytest.raises(fairshm.Error) as e:
        fairshm.Table.open(name + bad)
    assert e.value.kind == "invalid_name"
    assert table.stats()["tenants"] == []


def test_timeouts_infinite_nan_and_a_closed_table(table, name):
    lease = table.acquire("requests", "acme", timeout=float("inf"))  # room: at once
    lease.release()
    with pytest.raises(ValueError):
        table.acquire("requests", "acme", timeout=float("nan"))
    t = fairshm.Table.open(name)
    t.close()
    with pytest.raises(fairshm.Error) as e:
        t.try_acquire("requests", "acme")
    assert "closed" in str(e.value) and e.value.kind == "invalid_request"
    with pytest.raises(fairshm.Error) as e:
        t.stats()
    assert "closed" in str(e.value)


def test_every_code_of_the_header_has_its_own_exception_class():
    import re
    from pathlib import Path

    header = Path(__file__).resolve().parents[3] / "include" / "fairshm.h"
    codes = {int(c): n for n, c in re.findall(r"#define FAIRSHM_E_(\w+) (-\d+)", header.read_text())}
    codes.pop(-99)  # a panic caught at the boundary: the base class
    assert len(codes) == 28
    seen = set()
    for code, macro in codes.items():
        cls = fairshm._errors._ERRORS[code]
        kind = fairshm._lib.code_name(code)
        assert kind == macro.lower()
        want = "".join(w.title() for w in kind.split("_"))
        assert cls.__name__ == ("IoError" if want == "Io" else want), (code, cls)
        assert issubclass(cls, fairshm.Error) and getattr(fairshm, cls.__name__) is cls
        assert cls.__name__ in fairshm.__all__
        seen.add(cls)
    assert len(seen) == len(codes)  # one class a code


def test_full_tables_raise_their_own_class(name):
    t = fairshm.Table.create(name, {"pools": [{"name": "requests", "capacity": 8}],
                                    "max_tenants": 2, "leases_per_process": 2})
    try:
        t.try_acquire("requests", "a").release()
        t.try_acquire("requests", "b").release()
        with pytest.raises(fairshm.TenantTableFull) as e:
            t.try_acquire("requests", "c")
        assert e.value.code == -14 and '"c"' in str(e.value)
        held = [t.try_acquire("requests", "a"), t.try_acquire("requests", "a")]
        with pytest.raises(fairshm.LeaseTableFull) as e:
            t.try_acquire("requests", "a")
        assert e.value.code == -15
        for lease in held:
            lease.release()
    finally:
        t.close()
    with pytest.raises(fairshm.InvalidRequest) as e:
        t.try_acquire("requests", "a")
    assert "closed" in str(e.value)


def test_errors_and_refusals_survive_pickling(table):
    # What multiprocessing and concurrent.futures do to an exception a worker raises.
    import pickle

    with pytest.raises(fairshm.NotFound) as nf:
        fairshm.Table.open("fairshm-test-py-no-such-table-%d" % os.getpid())
    e = pickle.loads(pickle.dumps(nf.value))
    assert type(e) is fairshm.NotFound and isinstance(e, fairshm.Error)
    assert (e.code, e.kind, str(e)) == (nf.value.code, "not_found", str(nf.value))

    held = table.try_acquire("requests", "acme", units=4)
    with pytest.raises(fairshm.Refused) as ref:
        table.try_acquire("requests", "acme")
    r0 = ref.value
    r = pickle.loads(pickle.dumps(r0))
    held.release()
    table.close()  # the copy needs no table: its explanation came with it
    assert type(r) is fairshm.Refused
    assert (r.reason, r.code, r.retry_after_ms, r.pool, r.tenant) == (
        r0.reason, r0.code, r0.retry_after_ms, "requests", "acme")
    assert (r.in_use, r.held, r.capacity, r.floor, r.units, r.share) == (4, 4, 4, 1, 1, 4.0)
    assert r.explanation == r0.explanation and '"acme"' in r.explanation
    assert r.as_dict() == r0.as_dict()


def test_a_table_or_a_cancel_is_not_copied_with_its_native_handle(table):
    # A copy would share the pointer: closed (or freed) through one, used through the
    # other. Refused, naming what to do instead; the original stays usable.
    import copy
    import pickle

    c = fairshm.Cancel()
    for obj, instead in ((table, "open the table by its name"), (c, "make a new one")):
        for dup in (pickle.dumps, copy.copy, copy.deepcopy):
            with pytest.raises(TypeError) as e:
                dup(obj)
            assert "cannot be pickled or copied" in str(e.value) and instead in str(e.value)
    lease = table.try_acquire("requests", "acme")
    with pytest.raises(TypeError):
        pickle.dumps(lease)  # it names its table
    lease.release()
    c.cancel()
    assert table.stats()["pools"][0]["in_use"] == 0


def test_setting_rates_makes_no_worker_until_the_process_acquires(name):
    # A master that sets its tenants' rates at boot (before it forks), or an admin
    # script, claims tenant names: it registers, but as no worker of a per_worker pool.
    t = fairshm.Table.create(name, {"pools": [{"name": "db", "per_worker": {"quota": 1.0}}]})
    try:
        t.set_rates("acme", requests_per_s=5)
        t.charge("globex", 0)
        st = t.stats()
        assert st["pools"][0]["per_worker"]["workers"] == 0, st["pools"][0]
        assert [p["tool"] for p in st["processes"]] == [True], st["processes"]
        t.try_acquire("db", "acme").release()
        st = t.stats()
        assert st["pools"][0]["per_worker"]["workers"] == 1 and st["pools"][0]["capacity"] == 1
        assert [p["tool"] for p in st["processes"]] == [False], "a worker now, in the same slot"
    finally:
        t.close()


def test_a_dropped_lease_is_held_until_its_table_closes(name):
    """The garbage collector does not release a Lease (its id alone may release it
    later); closing its table gives back what the table's leases hold."""
    import gc
    t = fairshm.Table.create(name, {"pools": [{"name": "requests", "capacity": 4}]})
    kept = t.try_acquire("requests", "acme")
    lid = t.try_acquire("requests", "acme").id  # the object dropped at once
    gc.collect()
    assert t.stats()["pools"][0]["in_use"] == 2
    t.release(lid)
    assert t.stats()["pools"][0]["in_use"] == 1
    t.try_acquire("requests", "acme")
    gc.collect()
    observer = fairshm.Table.observer(name)
    try:
        assert observer.stats()["pools"][0]["in_use"] == 2
        t.close()
        assert observer.stats()["pools"][0]["in_use"] == 0
    finally:
        observer.close()
    with pytest.raises(fairshm.InvalidRequest, match="closed"):
        kept.release()


def test_explicit_now_replays_seed_000s_rule_to_the_window_boundary(name):
    """``now_ms`` on ``try_acquire``, ``release`` and ``stats``, as Rust's ``_at`` calls:
    a recorded sequence of calls replays to the same decisions, and a tenant that left
    stops counting exactly when its window (1 s) ends. A lease acquired at an explicit
    time releases at that time when its ``with`` block ends."""

    def trace():
        t = fairshm.Table.create(name, {"pools": [{"name": "requests", "capacity": 4}]})
        try:
            seen = []
            acme = t.try_acquire("requests", "acme", units=3, now_ms=0)
            globex = t.try_acquire("requests", "globex", now_ms=100)
            for now in (200, 1299):
                with pytest.raises(fairshm.Refused) as e:
                    t.try_acquire("requests", "acme", now_ms=now)
                r = e.value
                seen.append((now, r.reason, r.share, r.active_weight, r.in_use))
                if now == 200:
                    globex.release(now_ms=300)  # globex counts until 1300
            active = {
                now: {x["name"]: x["active"] for x in t.stats(now_ms=now)["pools"][0]["tenants"]}
                for now in (1299, 1300)
            }
            with t.try_acquire("requests", "acme", now_ms=1300) as late:
                seen.append((1300, "granted", late.units, t.stats(now_ms=1300)["pools"][0]["in_use"]))
            # Released when its block ended, at the time it was acquired at.
            last = {x["name"]: x["last_active_ms"] for x in t.stats(now_ms=1300)["pools"][0]["tenants"]}
            seen.append(("released at", last["acme"]))
            acme.release(now_ms=1400)
            left = t.stats(now_ms=1400)["pools"][0]
            return seen, active, left["in_use"], [x["held"] for x in left["tenants"]]
        finally:
            t.close()
            fairshm.Table.unlink(name)

    seen, active, in_use, held = trace()
    assert seen == [
        (200, "over_share", 2.0, 2, 4),  # acme holds 3 of its share of 2; the pool is full
        (1299, "over_share", 2.0, 2, 3),  # globex left at 300 and still counts
        (1300, "granted", 1, 4),  # its window ended: acme alone has the pool
        ("released at", 1300),
    ]
    assert active == {1299: {"acme": True, "globex": True}, 1300: {"acme": True, "globex": False}}
    assert (in_use, held) == (0, [0, 0])
    assert trace() == (seen, active, in_use, held), "the same calls replay to the same decisions"


def test_explicit_now_is_checked_and_does_not_go_with_a_queue_wait(table):
    with pytest.raises(ValueError, match="queued_us"):
        table.try_acquire("requests", "acme", queued_us=10, now_ms=5)
    with pytest.raises(ValueError, match="now_ms"):
        table.try_acquire("requests", "acme", now_ms=-1)
    with pytest.raises(TypeError, match="now_ms"):
        table.stats(now_ms=1.5)
    lease = table.try_acquire("requests", "acme", now_ms=0)
    with pytest.raises(ValueError, match="now_ms"):
        table.release(lease.id, now_ms=2**64 - 1)  # FAIRSHM_NOW, which no explicit time is
    lease.release(now_ms=0)
    assert table.stats(now_ms=0)["pools"][0]["in_use"] == 0
    with pytest.raises(fairshm.AlreadyReleased):
        table.release(lease.id, now_ms=1)
