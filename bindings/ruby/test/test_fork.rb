# frozen_string_literal: true

require_relative "helper"

# Forked workers, as under Puma's cluster mode: a table opened before fork works in
# every worker, the pool bound holds, and a killed worker's permits come back.
class TestFork < Minitest::Test
  include FairshmTest

  def test_forked_workers_never_exceed_the_pool
    rd, wr = IO.pipe
    pids = Array.new(6) do |i|
      fork do
        rd.close
        most = 0
        grants = 0
        300.times do
          lease = @table.try_acquire("requests", i.even? ? "acme" : "globex", hold_ms: 1)
          now = @table.stats["pools"][0]["in_use"]
          most = now if now > most
          grants += 1
          lease.release
        rescue Fairshm::Refused
          next
        end
        wr.write([most, grants].pack("LL"))
        exit!(0)
      end
    end
    wr.close
    pids.each { |pid| assert wait_child(pid).success? }
    results = rd.read.unpack("L*").each_slice(2).to_a
    assert_equal 6, results.size
    assert(results.all? { |most, _| most <= 4 }, "in use never above 4: #{results}")
    assert(results.any? { |most, _| most >= 2 }, "workers held permits at once: #{results}")
    assert_operator results.sum { |_, g| g }, :>, 0
    assert_equal 0, in_use
  end

  def test_a_killed_worker_gives_its_permits_back
    rd, wr = IO.pipe
    pid = fork do
      @table.try_acquire("requests", "acme")
      @table.try_acquire("requests", "acme")
      wr.write("held")
      sleep 60
      exit!(0)
    end
    wr.close # so that a child that dies early gives EOF, not a wait
    begin
      @table.register # a peer, as the other workers of a server are
      assert IO.select([rd], nil, nil, 30), "the child took its permits in 30 s"
      assert_equal "held", rd.read(4)
      assert_equal 2, in_use
    ensure
      Process.kill(:KILL, pid) # killed and reaped even if a check failed
      wait_child(pid)
    end
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 5
    until in_use.zero?
      flunk "the killed worker's permits did not come back" if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
      sleep 0.01
    end
  end
end
