# frozen_string_literal: true

# The end-to-end Rack app: 5 ms of work per request (E2E_WORK_MS), behind fairshm's
# middleware when FAIRSHM_E2E_SEGMENT names a segment. With Puma's --preload the table
# is opened once in the master, before fork.
work_ms = Integer(ENV.fetch("E2E_WORK_MS", "5"))
base = lambda do |_env|
  sleep(work_ms / 1000.0)
  [200, { "Content-Type" => "text/plain", "Content-Length" => "2" }, ["ok"]]
end

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
