"""An acquire+release pair through the binding next to two no-op calls through the same
ctypes mechanism (the same signatures), in one run. Prints ns per pair and the ratio.

    python bench.py [--pairs N] [--json]
"""

import argparse
import json
import os
import time
from ctypes import byref, c_uint64

import fairshm
from fairshm import _lib


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    name = "fairshm-bench-py-%d" % os.getpid()
    table = fairshm.Table.create(name, {"pools": [{"name": "requests", "capacity": 1000}]})
    try:
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

        def pairs(n):
            acq = table.try_acquire
            t0 = time.perf_counter_ns()
            for _ in range(n):
                acq("requests", "acme").release()
            return (time.perf_counter_ns() - t0) / n

        pairs(10_000), nops(10_000)
        p, q = [], []
        for _ in range(a.rounds):  # interleaved, so drift hits both
            p.append(pairs(a.pairs))
            q.append(nops(a.pairs))
        p.sort(), q.sort()
        pm, qm = p[len(p) // 2], q[len(q) // 2]
        out = {"pair_ns": round(pm, 1), "two_nops_ns": round(qm, 1), "ratio": round(pm / qm, 2)}
        if a.json:
            print(json.dumps(out))
        else:
            print("python: acquire+release pair %.0f ns, two no-op calls %.0f ns, ratio %.2f"
                  % (pm, qm, pm / qm))
    finally:
        table.close()
        fairshm.Table.unlink(name)


if __name__ == "__main__":
    main()
