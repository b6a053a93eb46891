# frozen_string_literal: true

require_relative "helper"

class TestBlocking < Minitest::Test
  include FairshmTest

  def test_acquire_times_out_and_counts_one_timeout
    held = fill
    t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    r = assert_raises(Fairshm::Refused) { @table.acquire("requests", "acme", timeout: 0.3) }
    waited = Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0
    assert_equal "timed_out", r.reason
    assert_operator waited, :>=, 0.25
    assert_operator waited, :<, 2
    # The whole wait, not the last slice's (the library waits in slices of 50 ms).
    assert_operator r.waited_ms, :>=, 250
    assert_operator r.waited_ms, :<=, waited * 1000 + 1
    assert_includes r.explanation, "timed out after #{r.waited_ms} ms"
    tenants = @table.stats["pools"][0]["tenants"]
    assert_equal 1, tenants.sum { |t| t["refusals"].to_h.fetch("timed_out", 0) }
    # The request's refusal by the rule once, not once a slice: it is one request.
    acme = tenants.find { |t| t["name"] == "acme" }
    assert_equal 1, acme["refusals"].to_h.reject { |k, _| k == "timed_out" }.values.sum, acme["refusals"].inspect
    assert_equal [1, 0], acme.values_at("hints", "early_returns")
    held.each(&:release)
  end

  # One request a second, and a wait of 350 ms (seven slices of 50 ms) on a full pool:
  # one request, so one token, taken at its first call. Before, each slice's first try
  # took another and was refused by the tenant's own rate, and the wait, put to sleep
  # until the next token, was served a second late.
  def test_a_wait_for_room_takes_one_token_across_its_slices
    @table.set_rates("light", requests_per_s: 1)
    held = fill
    freer = Thread.new do
      sleep 0.35
      held[0].release
    end
    begin
      @table.acquire("requests", "light", timeout: 20).release
    ensure
      freer.join
    end
    stats = @table.stats
    light = stats["tenants"].find { |t| t["name"] == "light" }
    assert_equal 0, light["rates"]["rate_limited"], light.inspect
    assert_equal 0, light["rates"]["request_tokens"], light.inspect
    mine = stats["pools"][0]["tenants"].find { |t| t["name"] == "light" }
    assert_equal [["pool_full", 1]], mine["refusals"]
    held[1..].each(&:release)
  end

  # The wait goes in slices of whole ms; the last one is rounded up, so the wait ends
  # at its timeout or after it (rounded down, 50 ms was over after 49).
  def test_a_wait_never_ends_before_its_timeout
    held = fill
    [0.013, 0.05, 0.101, 0.2345].each do |timeout|
      t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      r = assert_raises(Fairshm::Refused) { @table.acquire("requests", "acme", timeout: timeout) }
      waited = Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0
      assert_equal "timed_out", r.reason
      assert_operator waited, :>=, timeout
      assert_operator r.waited_ms, :>=, (timeout * 1000).to_i
    end
    held.each(&:release)
  end

  # 100 s in work debt, asking with a 20 s timeout: no token comes in time, so the wait
  # ends (after at most one slice) with the debt's own refusal, not timed_out.
  def test_a_wait_for_a_token_past_its_deadline_is_refused_at_once
    @table.set_rates("acme", work_units_per_s: 1000)
    @table.try_acquire("requests", "acme").release
    assert_operator @table.charge("acme", 101_000), :>, 99_000
    t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    r = assert_raises(Fairshm::Refused) { @table.acquire("requests", "acme", timeout: 20) }
    assert_operator Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0, :<, 10
    assert_equal "work_debt", r.reason, r.explanation
    assert_operator r.retry_after_ms, :>, 20_000
    refute_includes r.explanation, "timed out"
    # A token within the timeout but past a slice is waited for, across slices.
    @table.set_rates("acme", requests_per_s: 4)
    loop do
      @table.try_acquire("requests", "acme").release
    rescue Fairshm::Refused => e
      assert_equal "rate_limited", e.reason
      break
    end
    @table.set_rates("acme", requests_per_s: 2) # the next token, 500 ms away at most
    @table.acquire("requests", "acme", timeout: 5).release
  end

  def test_a_release_wakes_a_waiter_and_other_threads_run_meanwhile
    held = fill
    ticks = 0
    ticker = Thread.new { loop { ticks += 1; sleep 0.001 } }
    releaser = Thread.new { sleep 0.2; held.pop.release }
    lease = @table.acquire("requests", "acme", timeout: 10)
    ticker.kill
    releaser.join
    assert_operator ticks, :>, 20, "other threads ran while acquire waited (the GVL was free)"
    lease.release
    held.each(&:release)
  end

  def test_timeout_timeout_and_thread_raise_interrupt_a_wait
    held = fill
    t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    assert_raises(Timeout::Error) { Timeout.timeout(0.2) { @table.acquire("requests", "acme", timeout: 30) } }
    assert_operator Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0, :<, 2
    waiter = Thread.new do
      @table.acquire("requests", "acme", timeout: 30)
      :granted
    rescue Interrupt
      :interrupted
    end
    sleep 0.1
    waiter.raise(Interrupt)
    assert_equal :interrupted, waiter.join(5)&.value
    held.each(&:release)
  end

  def test_cancel_from_another_thread
    held = fill
    cancel = Fairshm::Cancel.new
    Thread.new { sleep 0.1; cancel.cancel }
    r = assert_raises(Fairshm::Refused) { @table.acquire("requests", "acme", timeout: 30, cancel: cancel) }
    assert_equal "cancelled", r.reason
    held.each(&:release)
  end

  def test_threads_each_hold_their_own_lease
    leases = Array.new(4) { |i| Thread.new { @table.try_acquire("requests", "t#{i % 2}") } }.map(&:value)
    assert_equal 4, leases.map(&:id).uniq.size
    assert_equal 4, in_use
    leases.each(&:release)
    assert_equal 0, in_use
  end

  # The close waits for the waiter's call (a slice of at most WAIT_SLICE_MS) instead of
  # unmapping the table under it, which crashed the process; the waiter is then told
  # the table is closed. In a forked child, so that a crash fails the test.
  def test_closing_the_table_while_another_thread_waits_on_it
    name = "#{@name}-close"
    r, w = IO.pipe
    pid = fork do
      r.close
      t = Fairshm::Table.create(name, { "pools" => [{ "name" => "requests", "capacity" => 1 }] })
      held = t.try_acquire("requests", "acme")
      got = nil
      th = Thread.new do
        t.acquire("requests", "globex", timeout: 10)
        got = "granted"
      rescue Fairshm::Error => e
        got = "#{e.kind}: #{e.message}"
      end
      sleep 0.3
      t.close
      th.join(10)
      w.puts(got || "still waiting")
      begin
        held.release
      rescue Fairshm::Error => e
        w.puts("release: #{e.kind}")
      end
      w.close
      Fairshm::Table.unlink(name)
      exit!(0)
    end
    w.close
    status = wait_child(pid)
    out = r.read.lines.map(&:chomp)
    r.close
    assert status.success?, "the child ended with #{status.inspect}"
    assert_match(/\Ainvalid_request: .*is closed/, out[0])
    assert_equal "release: invalid_request", out[1]
  ensure
    begin
      Fairshm::Table.unlink(name)
    rescue Fairshm::NotFound
      nil
    end
  end
end
