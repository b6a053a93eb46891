# frozen_string_literal: true

# An acquire+release pair through the binding next to two no-op calls through the same
# Fiddle mechanism (the same signatures and GVL handling), in one run.
#   ruby bench.rb [PAIRS] [--json]
require "json"
require "fairshm"

pairs = (ARGV.find { |a| a =~ /\A\d+\z/ } || 200_000).to_i
name = "fairshm-bench-rb-#{Process.pid}"
table = Fairshm::Table.create(name, { "pools" => [{ "name" => "requests", "capacity" => 1000 }] })
begin
  pool = table.pool("requests")
  tenant = table.tenant("acme")
  h = table.handle
  lease, refusal = Fairshm.buffers
  nop_a = Fairshm::Native::NOP_ACQUIRE
  nop_r = Fairshm::Native::NOP_RELEASE
  clock = -> { Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond) }
  nops = lambda do |n|
    t0 = clock.call
    n.times do
      nop_a.call(h, pool, tenant, 1, 0, lease, refusal)
      nop_r.call(h, lease[0, 8].unpack1("Q"))
    end
    (clock.call - t0).to_f / n
  end
  pair = lambda do |n|
    t0 = clock.call
    n.times { table.try_acquire("requests", "acme").release }
    (clock.call - t0).to_f / n
  end
  pair.call(10_000)
  nops.call(10_000)
  p_ns = []
  q_ns = []
  5.times do # interleaved, so drift hits both
    p_ns << pair.call(pairs)
    q_ns << nops.call(pairs)
  end
  pm = p_ns.sort[2]
  qm = q_ns.sort[2]
  if ARGV.include?("--json")
    puts JSON.generate(pair_ns: pm.round(1), two_nops_ns: qm.round(1), ratio: (pm / qm).round(2))
  else
    printf("ruby: acquire+release pair %.0f ns, two no-op calls %.0f ns, ratio %.2f\n", pm, qm, pm / qm)
  end
ensure
  table.close
  Fairshm::Table.unlink(name)
end
