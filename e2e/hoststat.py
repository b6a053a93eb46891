"""What the host did while something was measured, from /proc/stat: shared by the
end-to-end runner (`e2e/run.py`) and the speed targets' sitting (`scripts/targets`).
Standard library only."""


def cpu_ticks():
    """(stolen, all) CPU ticks of this machine so far, from /proc/stat: the time the
    hypervisor ran something else while a virtual CPU of ours wanted to run."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    # All: user .. steal, the first eight. The guest fields after them are already
    # counted in user and nice, so summing them too would count that time twice.
    return (ticks[7] if len(ticks) > 7 else 0), sum(ticks[:8])


def steal_pct(before, after):
    """The share of CPU time stolen between two `cpu_ticks()` readings, in percent."""
    return 100.0 * (after[0] - before[0]) / max(1, after[1] - before[1])
