# frozen_string_literal: true

# The Rack app of `test_crash.py`: 200 at once, except /hang, which sleeps (E2E_HANG_S,
# default 120 s) so that the server's timeout kills its worker; behind fairshm's
# middleware on the segment FAIRSHM_E2E_SEGMENT with a pool of E2E_POOL permits, opened
# when the app is loaded (with preload_app, in the master before fork).
require "fairshm"
require "fairshm/rack"

hang_s = Float(ENV.fetch("E2E_HANG_S", "120"))
table = Fairshm::Table.open_or_create(ENV.fetch("FAIRSHM_E2E_SEGMENT"),
                                      { "pools" => [{ "name" => "requests",
                                                      "capacity" => Integer(ENV.fetch("E2E_POOL")) }] })
use Fairshm::RackMiddleware, table: table, pool: "requests", tenant: ->(env) { env["HTTP_X_TENANT"] }
run(lambda do |env|
  sleep(hang_s) if env["PATH_INFO"] == "/hang"
  [200, { "content-type" => "text/plain", "content-length" => "2" }, ["ok"]]
end)
