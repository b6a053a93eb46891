"""An acquire+release pair through the binding next to two no-op calls through the same
ctypes mechanism (the same signatures), in one run. Prints ns per pair and the ratio.

    python bench.py [--pairs N] [--rounds N] [--json] [--against DIR]

``--against DIR`` also times the pair through another copy of the binding (DIR holds
its ``fairshm`` package, say an earlier commit's ``bindings/python``; it calls the
library this one loads), in the same process and rounds: a change to the binding shows
there even when the host's speed moves more than it from one run to the next.
"""

import argparse
import importlib.util
import json
import os
import sys
import time
from ctypes import byref, c_uint64

import fairshm
from fairshm import _lib


def load_other(directory):
    """The ``fairshm`` package under ``directory``, imported as ``fairshm_against``."""
    pkg = os.path.join(directory, "fairshm")
    init = os.path.join(pkg, "__init__.py")
    if not os.path.isfile(init):
        raise SystemExit("--against: no fairshm package in %s (no %s)" % (directory, init))
    spec = importlib.util.spec_from_file_location(
        "fairshm_against", init, submodule_search_locations=[pkg])
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--against", metavar="DIR")
    a = ap.parse_args()
    other = load_other(a.against) if a.against else None
    name = "fairshm-bench-py-%d" % os.getpid()
    table = fairshm.Table.create(name, {"pools": [{"name": "requests", "capacity": 1000}]})
    other_table = None
    try:
        if other:
            other_table = other.Table.open(name)
        pool, tenant = table.pool("requests"), table.tenant("acme")
        nop_a, nop_r = _lib.lib.fairshm_nop_acquire, _lib.lib.fairshm_nop_release
        h = table._h
        lease = c_uint64()
        lref = byref(lease)
        refusal = _lib.Refusal()
        rref = byref(refusal)

        def nops(n):
            t0 = time.perf_counter_ns()
            for _ in range(n):
                nop_a(h, pool, tenant, 1, 0, lref, rref)
                nop_r(h, lease.value)
            return (time.perf_counter_ns() - t0) / n

        def pairs_of(t):
            def pairs(n):
                acq = t.try_acquire
                t0 = time.perf_counter_ns()
                for _ in range(n):
                    acq("requests", "acme").release()
                return (time.perf_counter_ns() - t0) / n

            return pairs

        runs = {"pair": pairs_of(table), "nops": nops}
        if other:
            runs["against"] = pairs_of(other_table)
        times = {k: [] for k in runs}
        for f in runs.values():
            f(10_000)
        for _ in range(a.rounds):  # interleaved, so drift hits all alike
            for k, f in runs.items():
                times[k].append(f(a.pairs))
        med = {k: sorted(v)[len(v) // 2] for k, v in times.items()}
        pm, qm = med["pair"], med["nops"]
        out = {"pair_ns": round(pm, 1), "two_nops_ns": round(qm, 1), "ratio": round(pm / qm, 2)}
        if other:
            out["against_ns"] = round(med["against"], 1)
            out["against_ratio"] = round(med["against"] / qm, 2)
        if a.json:
            print(json.dumps(out))
        else:
            print("python: acquire+release pair %.0f ns, two no-op calls %.0f ns, ratio %.2f"
                  % (pm, qm, pm / qm))
            if other:
                print("python: the pair through %s %.0f ns, ratio %.2f"
                      % (a.against, med["against"], med["against"] / qm))
    finally:
        if other_table:
            other_table.close()
        table.close()
        fairshm.Table.unlink(name)


if __name__ == "__main__":
    main()
