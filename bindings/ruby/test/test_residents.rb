# frozen_string_literal: true

require_relative "helper"

# Residents (an evict pool) through the C ABI: eviction of the idlest resident instead
# of a refusal, never one in a call; the victim learns of it; too_many_residents after
# the pool's wait when nothing is evictable.
class TestResidents < Minitest::Test
  include FairshmTest

  def setup
    @name = FairshmTest.next_name
    @table = Fairshm::Table.create(@name, { "pools" => [{ "name" => "residents", "capacity" => 3,
                                                          "evict" => true, "evict_wait_ms" => 200 }] })
  end

  def called(lease, at)
    lease.begin_call(now_ms: at)
    lease.end_call(now_ms: at)
    lease
  end

  def test_an_under_share_spawn_takes_the_idlest_of_the_furthest_over_share
    a = [1, 2].map { |at| called(@table.try_acquire("residents", "a"), at) }
    b = called(@table.try_acquire("residents", "b"), 0)
    c = @table.try_acquire("residents", "c")
    assert_equal [true, false], a.map(&:revoked?)
    refute b.revoked?
    refute c.revoked?
    assert_raises(Fairshm::Revoked) { a[0].begin_call }
    pool = @table.stats["pools"][0]
    assert_equal [3, 1], [pool["in_use"], pool["residents"]["evictions"]]
    a[0].release
    assert_equal 3, in_use
  end

  def test_busy_residents_end_the_wait_in_too_many_residents
    busy = Array.new(3) { @table.try_acquire("residents", "a") }
    busy.each(&:begin_call)
    t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    r = assert_raises(Fairshm::Refused) { @table.acquire("residents", "b", timeout: 5) }
    waited = Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0
    assert_equal "too_many_residents", r.reason
    assert waited >= 0.19 && waited < 2.0, "waited #{waited}" # counted in whole ms
    refute busy.any?(&:revoked?)
    busy[0].call { assert_raises(Fairshm::Refused) { @table.try_acquire("residents", "b") } }
  end

  def test_the_victim_is_woken
    fill = Array.new(3) { @table.try_acquire("residents", "a") }
    woke = nil
    th = Thread.new { woke = fill.map { |l| l }.first.wait_revoked(10) }
    called(fill[0], 1)
    sleep 0.05
    @table.try_acquire("residents", "b")
    th.join(15)
    assert woke
    assert_raises(Fairshm::NotResident) { fill[1].end_call }
  end

  def test_a_wait_for_a_revocation_never_ends_before_its_timeout
    lease = @table.try_acquire("residents", "acme")
    [0.013, 0.05, 0.101].each do |timeout|
      t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      refute lease.wait_revoked(timeout)
      assert_operator Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0, :>=, timeout
    end
    lease.release
  end
end
