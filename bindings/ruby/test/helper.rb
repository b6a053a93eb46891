# frozen_string_literal: true

require "minitest/autorun"
require "timeout"
require "fairshm"
require "fairshm/rack"

module FairshmTest
  @n = 0
  def self.next_name
    @n += 1
    "fairshm-test-rb-#{Process.pid}-#{@n}"
  end

  # A segment name unique to the test, and a table of one pool, removed afterwards.
  def setup
    @name = FairshmTest.next_name
    @table = Fairshm::Table.create(@name, { "pools" => [{ "name" => "requests", "capacity" => 4 }] })
  end

  def teardown
    @table&.close
    begin
      Fairshm::Table.unlink(@name)
    rescue Fairshm::NotFound
      nil
    end
  end

  def in_use
    @table.stats["pools"][0]["in_use"]
  end

  def fill(n = 4)
    Array.new(n) { @table.try_acquire("requests", "acme") }
  end

  # Waits for a child with a deadline; kills it if the deadline passes.
  def wait_child(pid, timeout = 30)
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + timeout
    loop do
      got, status = Process.waitpid2(pid, Process::WNOHANG)
      return status if got
      if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
        Process.kill(:KILL, pid)
        Process.waitpid(pid)
        flunk "child #{pid} did not finish in #{timeout} s"
      end
      sleep 0.02
    end
  end
end
