"""Tests of e2e/run.py's pure pieces: what its burst guard counts from loadgen's trace, and
when it measures a server again.

    python -m pytest -q e2e/test_run.py
"""
import run


def line(tenant, tries, status, sent_us, hint_ms=0, answered_us=None):
    """One line of loadgen's trace (TENANT TRY STATUS SENT_US LATENCY_US HINT_MS QUEUE_US
    ANSWERED_US); latency and queue are not read by the burst count."""
    answered = sent_us + 6000 if answered_us is None else answered_us
    return "%s %d %d %d %d %d %d %d" % (tenant, tries, status, sent_us, 6000, hint_ms, 100, answered)


def trace(lines):
    return "\n".join(lines) + "\n"


def test_hints_that_point_at_one_instant_are_a_burst_however_they_are_sent():
    # 32 refusals answered 30 ms apart, each told to come back at t = 2 s: their retries
    # fall due together. The client happened to send them spread out (say, late).
    lines = []
    for k in range(32):
        answered = k * 30_000
        lines.append(line("heavy", 1, 429, answered - 6000, (2_000_000 - answered) // 1000, answered))
        lines.append(line("heavy", 2, 200, 2_000_000 + k * 20_000))
    due, sent, retries, _ = run.retry_bursts(trace(lines))["heavy"]
    assert (due, retries) == (32, 32)
    assert sent == 1


def test_a_stalled_client_sends_a_burst_that_the_hints_did_not_ask_for():
    # Hints spread the retries' due times 30 ms apart; the client's threads woke late,
    # all within 10 ms: counted as sent, not as due.
    lines = []
    for k in range(32):
        answered = k * 1000
        lines.append(line("heavy", 1, 429, answered - 6000, 100 + 30 * k, answered))
        lines.append(line("heavy", 2, 200, 2_000_000 + k * 100))
    due, sent, retries, _ = run.retry_bursts(trace(lines))["heavy"]
    assert (sent, retries) == (32, 32)
    assert due == 1


def test_a_refusal_whose_retry_fell_due_after_the_run_is_not_counted():
    lines = [line("heavy", 1, 429, 0, 5, 1000), line("heavy", 2, 200, 6000)]
    # Three more refusals due at 50 ms, after the tenant's last attempt (sent at 6 ms).
    lines += [line("heavy", 1, 429, 2000, 48, 2000 + k) for k in range(3)]
    due, sent, retries, _ = run.retry_bursts(trace(lines))["heavy"]
    assert (due, sent, retries) == (1, 1, 1)


def test_first_attempts_and_other_tenants_are_not_retries_of_this_one():
    lines = [line("light", 1, 200, k * 1000) for k in range(50)]
    lines += [line("heavy", 1, 200, k * 1000) for k in range(50)]
    lines += [line("heavy", 1, 429, 60_000, 1, 61_000), line("heavy", 2, 200, 62_000)]
    bursts = run.retry_bursts(trace(lines))
    assert bursts["heavy"][:3] == (1, 1, 1)
    assert "light" not in bursts


def test_lines_of_another_shape_are_skipped():
    # The trace before ANSWERED_US was added (7 fields), and stray text.
    text = "heavy 2 200 1000 6000 0 100\nthread panicked at ...\n"
    assert run.retry_bursts(text) == {}


def test_a_server_is_measured_again_only_for_timed_guards():
    # Passed, or failed an untimed guard (a regression, whatever the host): no more.
    assert not run.again(1, True, True, [], set())
    assert not run.again(1, False, False, ["fifo"], {0})
    # A timed guard failed: once more, whatever it was.
    assert run.again(1, False, True, [], {3})


def test_a_third_measurement_needs_a_disturbed_host_or_guards_that_changed():
    # The same guard failed twice on an undisturbed host: that is the verdict.
    assert not run.again(2, False, True, [], {3})
    # Steal in the phases behind the failures, or no guard failed in both: once more.
    assert run.again(2, False, True, ["polite-f1"], {3})
    assert run.again(2, False, True, [], set())
    # Never more than MAX_MEASUREMENTS.
    assert not run.again(run.MAX_MEASUREMENTS, False, True, ["fifo"], set())


def test_the_turnover_is_the_most_requests_served_within_10_ms():
    # 200s answered 1 ms apart for 30 ms, then 5 ms apart, and the retry's at 2 ms: 11
    # within 10 ms at most.
    lines = [line("heavy", 1, 200, k * 1000, 0, k * 1000) for k in range(30)]
    lines += [line("heavy", 1, 200, 0, 0, 30_000 + k * 5000) for k in range(1, 20)]
    lines += [line("heavy", 1, 429, 0, 1, 500), line("heavy", 2, 200, 2000, 0, 2000)]
    assert run.retry_bursts(trace(lines))["heavy"][3] == 11
