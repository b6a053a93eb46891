# frozen_string_literal: true

# The end-to-end Rack app: 5 ms of work per request (E2E_WORK_MS), behind fairshm's
# middleware when FAIRSHM_E2E_SEGMENT names a segment. With Puma's --preload the table
# is opened once in the master, before fork.
#
# Outermost, every response (200 or 429) says when its request reached the app:
# `X-Entered-Ns`, CLOCK_MONOTONIC in ns, which the load client (same host, same clock)
# subtracts from when it sent the attempt: the time it waited in the server's queue.
work_ms = Integer(ENV.fetch("E2E_WORK_MS", "5"))
base = lambda do |_env|
  sleep(work_ms / 1000.0)
  [200, { "Content-Type" => "text/plain", "Content-Length" => "2" }, ["ok"]]
end

# The stamp of when a request reached the app (see above).
class Stamp
  def initialize(app)
    @app = app
  end

  def call(env)
    entered = Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond).to_s
    status, headers, body = @app.call(env)
    [status, headers.merge("X-Entered-Ns" => entered), body]
  end
end
use Stamp

segment = ENV["FAIRSHM_E2E_SEGMENT"]
if segment && !segment.empty?
  require "fairshm"
  require "fairshm/rack"
  pool = { "name" => "requests", "capacity" => Integer(ENV.fetch("E2E_POOL")) }
  pool["floor_percent"] = Integer(ENV["E2E_FLOOR_PERCENT"]) if ENV["E2E_FLOOR_PERCENT"]
  table = Fairshm::Table.open_or_create(segment, { "pools" => [pool] })
  use Fairshm::RackMiddleware, table: table, pool: "requests", tenant: ->(env) { env["HTTP_X_TENANT"] },
                               hold_ms: work_ms
end
run base
