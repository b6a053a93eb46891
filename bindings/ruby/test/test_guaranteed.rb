# frozen_string_literal: true

require_relative "helper"

# Guaranteed pools (seed 001) through the C ABI: the demand-signal trace, refusals with
# their facts and explanation, statistics, and typed errors.
class TestGuaranteed < Minitest::Test
  include FairshmTest

  CONFIG = {
    "guaranteed" => [{ "name" => "tokens", "ceiling" => 100, "fairness_unit" => "cost",
                       "reclaim_horizon_ms" => 100, "idle_after_ms" => 150,
                       "tenants" => { "a" => 1, "b" => 1 } }],
    "max_processes" => 8
  }.freeze

  def setup
    @name = FairshmTest.next_name
    @table = Fairshm::Table.create(@name, CONFIG)
    @g = @table.guaranteed("tokens")
  end

  # The pool anew, in the setup's name (the teardown removes it), with a horizon of 5 s
  # and an idleness of 20 s: a waiter's retry-after is its loan's declared end, and
  # only a wake or a cancel ends its wait sooner.
  def long_wait_pool
    @table.close
    Fairshm::Table.unlink(@name)
    g0 = CONFIG["guaranteed"][0].merge("reclaim_horizon_ms" => 5000, "idle_after_ms" => 20_000)
    @table = Fairshm::Table.create(@name, CONFIG.merge("guaranteed" => [g0]))
    @table.guaranteed("tokens")
  end

  # The pool anew, in the setup's name: 90 shared evenly by a, b and c, with a horizon
  # of 5 s and an idleness of 20 s (a waiter asks again on its own only every 10 s, and
  # a tenant that acted does not lend for 20 s).
  def three_even_pool
    @table.close
    Fairshm::Table.unlink(@name)
    g0 = CONFIG["guaranteed"][0].merge("ceiling" => 90, "reclaim_horizon_ms" => 5000,
                                       "idle_after_ms" => 20_000,
                                       "tenants" => { "a" => 1, "b" => 1, "c" => 1 })
    @table = Fairshm::Table.create(@name, CONFIG.merge("guaranteed" => [g0]))
    @table.guaranteed("tokens")
  end

  # Tenants as seed 001 writes them, a list of { id, weight } (symbol keys too), give
  # the pool the Hash gives; a wrong value is named by its key; a tenant named twice
  # (here "a" and :a, which JSON writes alike) is an error, not the last weight.
  def test_seed_001s_list_of_tenants_configures_the_pool_and_errors_name_their_key
    g0 = CONFIG["guaranteed"][0]
    listed = CONFIG.merge("guaranteed" => [g0.merge("tenants" => [{ id: "b", weight: 1 }, { id: "a", weight: 1 }])])
    other = "#{@name}-listed"
    t = Fairshm::Table.create(other, listed)
    begin
      Fairshm::Table.open(other, CONFIG).close
      assert_equal %w[a b], t.guaranteed("tokens").stats(now_ms: 0)["stats"]["tenants"].map { |x| x["name"] }
    ensure
      t.close
      Fairshm::Table.unlink(other)
    end
    e = assert_raises(Fairshm::InvalidConfig) do
      Fairshm::Table.create("#{@name}-bad", CONFIG.merge("guaranteed" => [g0.merge("ceiling" => "100")]))
    end
    assert_match(/JSON: guaranteed\[0\]\.ceiling: invalid type/, e.message)
    e = assert_raises(Fairshm::InvalidConfig) do
      Fairshm::Table.create("#{@name}-bad", CONFIG.merge("guaranteed" => [g0.merge("tenants" => { "a" => 1, a: 2 })]))
    end
    assert_includes e.message, 'tenant "a" is named twice'
  end

  # Seed 001's trace at its own times: t=0, 10 and 100.
  def test_the_returner_is_served_within_the_horizon
    @g.acquire("b", 50, 10_000, now_ms: 0)
    loan = @g.acquire("b", 50, 100, now_ms: 0)
    r = assert_raises(Fairshm::GuaranteedRefused) { @g.acquire("a", 50, 50, now_ms: 10) }
    assert_equal ["guarantee_on_loan", 90, 1], [r.reason, r.retry_after_ms, r.retry_after_header]
    assert_equal [loan], r.blocking
    # Named as seed 001 names them (blockingLeases: ['b2']), and as the explanation does.
    assert_equal ["b#2"], r.blocking_leases
    assert_equal [50, 0, 50], [r.facts[:guarantee], r.facts[:own_free], r.facts[:lent]]
    assert_includes r.explanation, 'Tenant "a" asked for 50 cost units'
    @g.release(loan, now_ms: 100)
    assert_raises(Fairshm::GuaranteedRefused) { @g.acquire("b", 50, 100, now_ms: 100) }
    @g.acquire("a", 50, 50, now_ms: 100)
    stats = @g.stats(now_ms: 100)["stats"]
    assert_equal 100, stats["now_ms"], "explicit times, 0 included, not the library's clock"
    a = stats["tenants"][0]
    assert_equal ["a", 90, 4500], [a["name"], a["worst_reclaim_ms"], a["deficit_unit_ms"]]
    all = @g.stats(now_ms: 100)
    assert_equal "cost", all["fairness_report"]["unit"]
    assert_equal [50, 50], all["plan"].map { |p| p["target"] }
    assert_equal all["fairness_report"], @g.fairness_report(now_ms: 100)
    assert_equal all["plan"], @g.plan(now_ms: 100)
    # A time before the pool's clock counts as that clock; nil is the library's.
    assert_equal 100, @g.stats(now_ms: 0)["stats"]["now_ms"]
    assert_operator @g.stats["stats"]["now_ms"], :>, 100
    e = assert_raises(ArgumentError) { @g.acquire("a", 1, 1, now_ms: Fairshm::NOW) }
    assert_includes e.message, "now_ms must be an integer from 0 to"
    # Costs run from 1, as the library's error says.
    e = assert_raises(ArgumentError) { @g.acquire("a", -1, 1, now_ms: 100) }
    assert_includes e.message, "cost must be an integer from 1 to"
    e = assert_raises(Fairshm::InvalidRequest) { @g.acquire("a", 0, 1, now_ms: 100) }
    assert_includes e.message, "cost must be at least 1"
  end

  def test_a_refusal_survives_marshal
    @g.acquire("b", 50, 10_000, now_ms: 1)
    loan = @g.acquire("b", 50, 100, now_ms: 1)
    r = assert_raises(Fairshm::GuaranteedRefused) { @g.acquire("a", 50, 50, now_ms: 11) }
    copy = Marshal.load(Marshal.dump(r))
    assert_equal [Fairshm::GuaranteedRefused, "guarantee_on_loan", 90, [loan], "tokens", "a"],
                 [copy.class, copy.reason, copy.retry_after_ms, copy.blocking, copy.pool, copy.tenant]
    assert_equal [r.facts, r.explanation, r.message], [copy.facts, copy.explanation, copy.message]
    assert_equal ["b#2"], copy.blocking_leases
  end

  # 50 loans of 1 hold a's guarantee, the later ones due sooner: the explanation names
  # the five due first and counts the rest, whole (it was cut at 1,023 bytes, before it
  # said what to do); +blocking+ has the first 8 ids, the facts count all of them.
  def test_a_refusal_held_by_many_leases_is_explained_whole
    @g.acquire("b", 50, 10_000, now_ms: 0)
    loans = Array.new(50) { |i| @g.acquire("b", 1, 100 - i, now_ms: 0) }
    r = assert_raises(Fairshm::GuaranteedRefused) { @g.acquire("a", 50, 50, now_ms: 10) }
    assert_equal ["guarantee_on_loan", 90], [r.reason, r.retry_after_ms]
    assert_equal loans.reverse.first(8), r.blocking
    assert_equal (44..51).map { |n| "b##{n}" }.reverse, r.blocking_leases
    assert_equal [50, r.explanation.bytesize], [r.facts[:n_blocking], r.facts[:why_len]]
    assert r.explanation.end_with?("so that loans come back sooner."), r.explanation
    assert_includes r.explanation, "in 50 leases, the earliest due first: b#51 (1 cost unit, due in 41 ms)"
    assert_includes r.explanation, "and 45 more due no sooner"
  end

  # b's loan of a's half is declared for 4 s, so a's retry-after is about 4 s; the
  # loan's holder, a forked worker, gives it back after 0.3 s, and the release wakes
  # a's acquire_timeout, which asks again at once instead of at the retry-after.
  def test_a_release_in_another_process_wakes_acquire_timeout_before_its_retry_after
    g = long_wait_pool
    name = @name
    r, w = IO.pipe
    pid = fork do
      code = 1
      begin
        r.close
        gc = Fairshm::Table.open(name).guaranteed("tokens")
        gc.acquire("b", 50, 60_000)
        loan = gc.acquire("b", 50, 4000)
        w.write("x")
        w.flush
        sleep 0.3
        gc.release(loan)
        code = 0
      ensure
        exit!(code)
      end
    end
    w.close
    assert_equal "x", r.read(1)
    r.close
    clock = -> { Process.clock_gettime(Process::CLOCK_MONOTONIC) }
    t0 = clock.call
    lease = g.acquire_timeout("a", 50, 50, 30)
    waited = clock.call - t0
    assert_kind_of Integer, lease
    assert_operator waited, :>, 0.2
    assert_operator waited, :<, 1.5
    # One refusal, then the grant: it did not poll meanwhile.
    assert_equal 1, g.stats["stats"]["tenants"][0]["refusals"]
    assert_equal 0, wait_child(pid).exitstatus
    g.release(lease)
  end

  # As the Rust API's acquire_timeout, on the library's clock: the waiter asks again
  # at each retry-after, so b cannot re-borrow a's units while a waits, and a refusal
  # that waiting cannot end comes at once.
  def test_acquire_timeout_waits_for_the_loan_and_keeps_asking
    @g.acquire("b", 50, 100_000)
    loan = @g.acquire("b", 50, 100)
    clock = -> { Process.clock_gettime(Process::CLOCK_MONOTONIC) }
    t0 = clock.call
    e = assert_raises(Fairshm::GuaranteedRefused) { @g.acquire_timeout("a", 50, 50, 0.03) }
    assert_equal "guarantee_on_loan", e.reason
    assert_operator clock.call - t0, :>=, 0.03
    renewed = nil
    lender = Thread.new do
      sleep 0.06
      @g.release(loan)
      renewed = begin
        @g.acquire("b", 50, 100)
        true
      rescue Fairshm::GuaranteedRefused
        false
      end
    end
    got = @g.acquire_timeout("a", 50, 50, 10)
    lender.join(10)
    assert_kind_of Integer, got
    assert_equal false, renewed, "a kept asking: b could not borrow its units again"
    assert_operator clock.call - t0, :<, 5
    t1 = clock.call
    e = assert_raises(Fairshm::GuaranteedRefused) { @g.acquire_timeout("b", 60, 1000, 10) }
    assert_equal "hold_exceeds_reclaim_horizon", e.reason
    assert_operator clock.call - t1, :<, 1
    # Timeouts as the fair-share acquire takes them. nil waits for ever, seen here where
    # no wait can hang: a refusal that waiting cannot end comes at once.
    t3 = clock.call
    e = assert_raises(Fairshm::GuaranteedRefused) { @g.acquire_timeout("b", 60, 1000, nil) }
    assert_equal "hold_exceeds_reclaim_horizon", e.reason
    assert_operator clock.call - t3, :<, 1
    assert_raises(ArgumentError) { @g.acquire_timeout("a", 1, 1, Float::NAN) }
    ["1", Object.new].each { |bad| assert_raises(TypeError) { @g.acquire_timeout("a", 1, 1, bad) } }
    t2 = clock.call
    assert_raises(Fairshm::GuaranteedRefused) { @g.acquire_timeout("a", 1, 1, -1) } # asks once
    assert_operator clock.call - t2, :<, 1
    @g.release(got)
    # With a block: held in it, released after it.
    @g.acquire_timeout("a", 10, 10, 1) { assert_equal 60, @g.stats["stats"]["in_use"] }
    assert_equal 50, @g.stats["stats"]["in_use"]
  end

  # a's retry-after is the loan's declared end, about 4 s away, and its timeout 30 s (a
  # finite one: a broken cancel fails the test instead of hanging it): a Cancel fired
  # from another thread after 0.3 s ends the wait with the refusal.
  def test_a_cancel_from_another_thread_ends_acquire_timeout_at_once
    g = long_wait_pool
    own = g.acquire("b", 50, 60_000)
    loan = g.acquire("b", 50, 4000)
    cancel = Fairshm::Cancel.new
    refute cancel.cancelled?
    canceller = Thread.new do
      sleep 0.3
      cancel.cancel
    end
    clock = -> { Process.clock_gettime(Process::CLOCK_MONOTONIC) }
    t0 = clock.call
    e = assert_raises(Fairshm::GuaranteedRefused) { g.acquire_timeout("a", 50, 50, 30, cancel: cancel) }
    waited = clock.call - t0
    canceller.join(10)
    assert_operator waited, :>, 0.2
    assert_operator waited, :<, 1.5
    assert_equal ["guarantee_on_loan", ["b#2"]], [e.reason, e.blocking_leases]
    assert cancel.cancelled?
    # Fired already: the first ask still goes through, refused or granted.
    assert_raises(Fairshm::GuaranteedRefused) { g.acquire_timeout("a", 50, 50, 30, cancel: cancel) }
    g.release(loan)
    g.release(g.acquire_timeout("a", 50, 50, 30, cancel: cancel))
    cancel.reset
    refute cancel.cancelled?
    assert_raises(TypeError) { g.acquire_timeout("a", 50, 50, 1, cancel: Object.new) }
    g.release(own)
  end

  # c's waiter needs to borrow, and nobody can lend (a holds, b is active): forty
  # releases of b's own leases, 5 ms apart, give c nothing and do not wake it, in any
  # of its 50 ms slices (it asked 41 times before); the release of c's own lease wakes
  # it and serves it at once.
  def test_acquire_timeout_sleeps_through_releases_that_cannot_serve_it
    g = three_even_pool
    a = g.acquire("a", 30, 60_000)
    c_own = g.acquire("c", 30, 60_000)
    g.release(g.acquire("b", 10, 1000)) # b is active: not lendable for 20 s
    refusals = -> { g.stats["stats"]["tenants"].find { |x| x["name"] == "c" }["refusals"] }
    clock = -> { Process.clock_gettime(Process::CLOCK_MONOTONIC) }
    waiter = Thread.new { [g.acquire_timeout("c", 10, 100, 30), clock.call] }
    deadline = clock.call + 30
    while refusals.call < 1
      assert_operator clock.call, :<, deadline, "the waiter never asked"
      sleep 0.001
    end
    40.times do
      g.release(g.acquire("b", 10, 1000))
      sleep 0.005
    end
    sleep 0.2
    asked = refusals.call
    assert_equal 1, asked, "c's waiter asked #{asked} times for 40 releases that gave c nothing"
    assert waiter.alive?
    released = clock.call
    g.release(c_own)
    lease, back = waiter.join(30)&.value
    assert_operator back - released, :<, 1.0
    g.release(lease)
    g.release(a)
  end

  # A's whole guarantee held in three leases of 10 (b and c have acted, so they lend
  # nothing for 20 s), and the sleeps' slices made longer than a test, so that each
  # waiter stays where it queued (a new slice queues again, behind the others): yields
  # the pool and the leases, and puts the slices back.
  def behind_a
    g = three_even_pool
    %w[b c].each { |other| g.release(g.acquire(other, 1, 1000)) }
    held = Array.new(3) { g.acquire("a", 10, 60_000) }
    slice = Fairshm::WAIT_SLICE_MS
    Fairshm.send(:remove_const, :WAIT_SLICE_MS)
    Fairshm.const_set(:WAIT_SLICE_MS, 20_000)
    yield g, held
  ensure
    if slice
      Fairshm.send(:remove_const, :WAIT_SLICE_MS)
      Fairshm.const_set(:WAIT_SLICE_MS, slice)
    end
  end

  def a_refusals(g)
    g.stats["stats"]["tenants"].find { |x| x["name"] == "a" }["refusals"]
  end

  def clock
    Process.clock_gettime(Process::CLOCK_MONOTONIC)
  end

  # Waits until a has been refused n times, then a while more (its last waiter sleeps
  # at once after its refusal).
  def a_asleep(g, n)
    deadline = clock + 30
    while a_refusals(g) < n
      assert_operator clock, :<, deadline, "a waiter never asked"
      sleep 0.001
    end
    assert_equal n, a_refusals(g)
    sleep 0.15
  end

  # Once the caller's waiter of a (started before) sleeps, starts a waiter of a for 10
  # behind it, and releases one of +held+ once both sleep. Returns the second waiter's
  # lease and how long after the release it had it.
  def release_behind(g, held)
    a_asleep(g, 1)
    small = Thread.new { [g.acquire_timeout("a", 10, 100, 30), clock] }
    a_asleep(g, 2)
    released = clock
    g.release(held.pop)
    lease, back = small.join(30)&.value
    [lease, back - released]
  end

  # A release wakes one waiter, the one that slept first (a's, for 20); refused, its
  # next ask, through this binding's loop, passes the wake on to the waiter behind it
  # (a's, for 10), which is served at once, not at its own next ask 10 s away.
  def test_a_refused_waiter_passes_the_wake_to_one_that_fits
    behind_a do |g, held|
      big = Thread.new { g.acquire_timeout("a", 20, 100, 30) }
      lease, took = release_behind(g, held)
      assert_operator took, :<, 1.0
      assert_equal 3, a_refusals(g), "the big waiter asked once more, for the wake it passed on"
      assert big.alive?
      g.release(lease)
      g.release(held.pop) # 20 free: the big waiter's turn
      g.release(big.join(30)&.value)
      held.each { |l| g.release(l) }
    end
  end

  # The waiter a release wakes (a's, for 20) ends its wait before its next ask (an
  # exception there, as Thread#raise between the calls would raise): the wait's end
  # passes the wake on, and the waiter behind it (a's, for 10) is served at once, not
  # at its own next ask 10 s away.
  def test_a_wait_ended_between_its_wake_and_its_ask_passes_the_wake_on
    behind_a do |g, held|
      gb = @table.guaranteed("tokens") # the first waiter's, whose second ask is cut off
      asks = 0
      gb.define_singleton_method(:acquire) do |*args, **kw|
        asks += 1
        raise "interrupted before its ask" if asks == 2

        super(*args, **kw)
      end
      first = Thread.new do
        gb.acquire_timeout("a", 20, 100, 30)
      rescue RuntimeError => e
        e.message
      end
      lease, took = release_behind(g, held)
      assert_equal "interrupted before its ask", first.join(30)&.value
      assert_operator took, :<, 1.0
      assert_equal 2, a_refusals(g), "the first waiter never asked again"
      g.release(lease)
      held.each { |l| g.release(l) }
    end
  end

  # Released in the block at an explicit time, the lease is not released again when
  # the block ends, so the pool's clock stays at the trace's time.
  def test_a_lease_released_in_its_block_keeps_its_explicit_time
    @g.acquire("a", 10, 10, now_ms: 5) { |id| @g.release(id, now_ms: 20) }
    assert_equal 20, @g.stats(now_ms: 0)["stats"]["now_ms"]
    e = assert_raises(RuntimeError) do
      @g.acquire("a", 10, 10, now_ms: 20) do |id|
        @g.release(id, now_ms: 30)
        raise "the block's own"
      end
    end
    assert_equal ["the block's own", 30], [e.message, @g.stats(now_ms: 0)["stats"]["now_ms"]]
    assert_equal 0, @g.stats(now_ms: 30)["stats"]["in_use"]
  end

  def test_errors_are_typed_and_a_block_releases
    id = @g.acquire("a", 10, 10, now_ms: 5) do |lease|
      # The stats name each lease by the id acquire gave, beside its number in the pool.
      assert_equal [[lease, 1, "a#1"]], @g.stats["stats"]["leases"].map { |l| [l["id"], l["lease"], l["name"]] }
      lease
    end
    assert_raises(Fairshm::AlreadyReleased) { @g.release(id, now_ms: 7) }
    e = assert_raises(Fairshm::Error) { @g.acquire("zed", 1, 1, now_ms: 7) }
    assert_equal "invalid_tenant", e.kind
    assert_raises(Fairshm::UnknownPool) { @table.guaranteed("nope") }
    assert_equal 0, @g.stats["stats"]["in_use"]
  end

  # Tenants listed out of alphabetical order: a blocking lease is named by its borrower
  # (the refusal carries the borrower's handle), whoever lent.
  def test_blocking_leases_are_named_by_their_borrowers_whatever_the_tenants_order
    @table.close
    Fairshm::Table.unlink(@name)
    cfg = { "guaranteed" => [{ "name" => "tokens", "ceiling" => 90, "fairness_unit" => "cost",
                               "reclaim_horizon_ms" => 100, "idle_after_ms" => 150,
                               "tenants" => { "zed" => 1, "amy" => 1, "kim" => 1 } }] }
    @table = Fairshm::Table.create(@name, cfg)
    g = @table.guaranteed("tokens")
    g.acquire("kim", 30, 10_000, now_ms: 0)
    loan = g.acquire("kim", 30, 100, now_ms: 0)
    r = assert_raises(Fairshm::GuaranteedRefused) { %w[zed amy].each { |who| g.acquire(who, 30, 50, now_ms: 10) } }
    assert_equal "guarantee_on_loan", r.reason, r.explanation
    assert_equal [loan], r.blocking
    assert_equal ["kim#2"], r.blocking_leases
    assert_includes r.explanation, "kim#2"
  end
end
