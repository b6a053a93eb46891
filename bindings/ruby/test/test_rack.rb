# frozen_string_literal: true

require_relative "helper"

class TestRack < Minitest::Test
  include FairshmTest

  def app
    Fairshm::RackMiddleware.new(->(_env) { [200, { "Content-Type" => "text/plain" }, ["ok"]] },
                                table: @table, pool: "requests", tenant: ->(env) { env["HTTP_X_TENANT"] })
  end

  def test_queued_us_reads_the_stamps_front_proxies_send
    now = 1_700_000_000_000_000
    ["t=1699999999.970", "1699999999.970", "t=1699999999970", "t=1699999999970000",
     " t=1699999999970 "].each do |stamp|
      assert_in_delta 30_000, Fairshm::RackMiddleware.queued_us(stamp, now), 1, stamp
    end
    assert_equal 0, Fairshm::RackMiddleware.queued_us("t=1700000001.5", now)
    [nil, "", "t=", "soon", "t=0", "-5", "NaN", "Infinity", "t=1600000000"].each do |bad|
      assert_nil Fairshm::RackMiddleware.queued_us(bad, now), bad.inspect
    end
  end

  def test_a_long_wait_in_the_server_queue_stretches_an_over_share_hint
    stamp = ->(ms_ago) { format("t=%.6f", Time.now.to_f - ms_ago / 1000.0) }
    mw = app
    bodies = Array.new(4) { mw.call("HTTP_X_TENANT" => "acme", "HTTP_X_REQUEST_START" => stamp.call(0))[2] }
    # A first refusal's own wait stretches nothing: no refused request of its tenant is
    # waiting, so its tenant's retries are not what it waited behind...
    status, _, body = mw.call("HTTP_X_TENANT" => "acme", "HTTP_X_REQUEST_START" => stamp.call(30))
    assert_equal 429, status
    refute_includes JSON.parse(body.join)["explanation"], "server's queue"
    # ...with a backlog of refused requests (two more turns promised), it stretches 8x.
    2.times { assert_kind_of Fairshm::Refused, @table.attempt("requests", "acme") }
    status, _, body = mw.call("HTTP_X_TENANT" => "acme", "HTTP_X_REQUEST_START" => stamp.call(30))
    assert_equal 429, status
    why = JSON.parse(body.join)["explanation"]
    assert_includes why, "server's queue"
    assert_includes why, "8.00x"
    got = @table.attempt("requests", "acme", queued_us: 30_000)
    assert_equal 800, got.queue_stretch_pct
    assert_operator got.server_queue_us, :>=, 29_000
    off = Fairshm::RackMiddleware.new(->(_env) { [200, {}, ["ok"]] }, table: @table, pool: "requests",
                                                                     tenant: ->(_env) { "acme" }, queue_header: false)
    [[mw, { "HTTP_X_TENANT" => "acme" }], [off, { "HTTP_X_REQUEST_START" => stamp.call(30) }]].each do |m, env|
      status, _, body = m.call(env)
      assert_equal 429, status
      refute_includes JSON.parse(body.join)["explanation"], "server's queue"
    end
    assert_raises(ArgumentError) { @table.note_queue("requests", -1) }
    @table.note_queue("requests", 500)
    bodies.each(&:close)
    assert_equal 0, in_use
  end

  def test_the_body_answers_as_the_apps_body_does
    # An array: to_ary hands it over and releases the permit (Rack 3: it closes).
    _, _, body = app.call("HTTP_X_TENANT" => "acme")
    assert_equal 1, in_use
    assert_respond_to body, :each
    assert_respond_to body, :to_ary
    refute_respond_to body, :call
    refute_respond_to body, :to_path
    assert_equal ["ok"], body.to_ary
    assert_equal 0, in_use
    body.close # the server's close after it releases nothing twice
    assert_equal 0, in_use

    # A Rack 3 streaming body: call and no each; the server's close releases.
    streaming = Object.new
    streaming.define_singleton_method(:call) { |stream| stream << "a" << "b" }
    streamed = []
    _, _, body = middleware_for(streaming).call({})
    assert_respond_to body, :call
    refute_respond_to body, :each
    refute_respond_to body, :to_ary
    body.call(streamed)
    assert_equal %w[a b], streamed
    assert_equal 1, in_use
    body.close
    assert_equal 0, in_use

    # A file: to_path is the file's, each and close too; a method it lacks is an error.
    file = Struct.new(:path, :closed) do
      def each
        yield "x"
      end

      def to_path
        path
      end

      def close
        self.closed = true
      end
    end.new("/srv/file")
    _, _, body = middleware_for(file).call({})
    assert_equal "/srv/file", body.to_path
    chunks = []
    body.each { |c| chunks << c }
    assert_equal ["x"], chunks
    assert_raises(NoMethodError) { body.nonesuch }
    refute_respond_to body, :to_str
    body.close
    assert file.closed
    assert_equal 0, in_use
  end

  def middleware_for(body)
    Fairshm::RackMiddleware.new(->(_env) { [200, {}, body] }, table: @table, pool: "requests",
                                                              tenant: ->(_env) { "acme" })
  end

  def test_holds_until_close_and_answers_429_with_retry_after
    mw = app
    bodies = Array.new(4) do
      status, _, body = mw.call("HTTP_X_TENANT" => "acme")
      assert_equal 200, status
      body
    end
    assert_equal 4, in_use
    status, headers, body = mw.call("HTTP_X_TENANT" => "acme")
    assert_equal 429, status
    ms = Integer(headers["retry-after-ms"])
    assert_operator ms, :>=, 1
    assert_equal [1, (ms + 999) / 1000].max, Integer(headers["retry-after"])
    doc = JSON.parse(body.join)
    assert_equal "over_share", doc["reason"]
    assert_includes doc["explanation"], "acme"
    bodies.each do |b|
      chunks = []
      b.each { |c| chunks << c }
      assert_equal ["ok"], chunks
      b.close
    end
    assert_equal 0, in_use
  end

  def test_releases_when_the_app_raises_and_passes_untenanted
    boom = Fairshm::RackMiddleware.new(->(_env) { raise "boom" }, table: @table, pool: "requests",
                                                                  tenant: ->(_env) { "acme" })
    assert_raises(RuntimeError) { boom.call({}) }
    assert_equal 0, in_use
    status, = app.call({})
    assert_equal 200, status
    assert_equal 0, in_use
  end

  def test_a_middleware_with_a_wrong_number_fails_at_start_up
    ok = ->(_env) { [200, {}, ["ok"]] }
    assert_raises(ArgumentError) do
      Fairshm::RackMiddleware.new(ok, table: @table, pool: "requests", tenant: ->(_env) { "acme" }, units: -1)
    end
    assert_raises(ArgumentError) do
      Fairshm::RackMiddleware.new(ok, table: @table, pool: "requests", tenant: ->(_env) { "acme" }, hold_ms: -1)
    end
  end

  # Not a 500 on every request: the pool is resolved when the middleware is built.
  def test_a_middleware_for_a_pool_the_table_lacks_fails_at_start_up
    ok = ->(_env) { [200, {}, ["ok"]] }
    e = assert_raises(Fairshm::UnknownPool) do
      Fairshm::RackMiddleware.new(ok, table: @table, pool: "request", tenant: ->(_env) { "acme" })
    end
    assert_includes e.message, '"request"'
    assert_includes e.message, "requests"
  end

  # Not a 500 on every request: the units are checked against the pool when the
  # middleware is built (the table's pool "requests" holds 4), claiming nothing.
  def test_a_middleware_asking_more_than_its_pool_can_hold_fails_at_start_up
    ok = ->(_env) { [200, {}, ["ok"]] }
    e = assert_raises(Fairshm::UnitsExceedCapacity) do
      Fairshm::RackMiddleware.new(ok, table: @table, pool: "requests", tenant: ->(_env) { "acme" }, units: 5)
    end
    assert_includes e.message, "5 units"
    Fairshm::RackMiddleware.new(ok, table: @table, pool: "requests", tenant: ->(_env) { "acme" }, units: 4)
    assert_nil @table.check_units("requests", 4)
    assert_raises(Fairshm::InvalidRequest) { @table.check_units("requests", 0) }
    assert_raises(Fairshm::UnknownPool) { @table.check_units("nope", 1) }
    assert_equal 0, @table.stats["tables"]["tenants"]["used"]
  end

  # The tenant's name comes from the request: one the table cannot take is the
  # request's fault (400, saying why), not a 500; nothing is claimed or held.
  def test_answers_400_to_a_tenant_name_the_table_cannot_take
    mw = app
    ["", "t" * 49, "acme\0evil", "caf\xE9".b, "caf\xFF".dup.force_encoding(Encoding::Shift_JIS)].each do |name|
      status, headers, body = mw.call("HTTP_X_TENANT" => name)
      assert_equal 400, status, name.inspect
      doc = JSON.parse(body.join)
      assert_equal "invalid_tenant", doc["error"]
      assert_includes doc["explanation"], "invalid tenant name"
      assert_equal body.join.bytesize, Integer(headers["content-length"])
    end
    assert_equal 0, in_use
    assert_equal [], @table.stats["tenants"]
  end

  # Its answers, a 200 held until close, a 429 and a 400, pass Rack::Lint.
  def test_both_answers_pass_rack_lint
    require "rack"
    require "rack/lint"
    require "rack/mock"
    inner = Fairshm::RackMiddleware.new(->(_env) { [200, { "content-type" => "text/plain" }, ["ok"]] },
                                        table: @table, pool: "requests", tenant: ->(env) { env["HTTP_X_TENANT"] })
    lint = Rack::Lint.new(inner)
    held = Array.new(4) do
      status, _, body = lint.call(Rack::MockRequest.env_for("/", "HTTP_X_TENANT" => "acme"))
      assert_equal 200, status
      body
    end
    status, headers, body = lint.call(Rack::MockRequest.env_for("/", "HTTP_X_TENANT" => "acme"))
    assert_equal 429, status
    assert_operator Integer(headers["retry-after"]), :>=, 1
    body.each { |_| nil }
    body.close
    status, _, body = lint.call(Rack::MockRequest.env_for("/", "HTTP_X_TENANT" => "t" * 49))
    assert_equal 400, status
    body.each { |_| nil }
    body.close
    held.each do |b|
      b.each { |_| nil }
      b.close
    end
    assert_equal 0, in_use
  end

  # A process holds at most leases_per_process leases: a worker of many threads with
  # more requests in flight finds none left. That bound is the server's and lasts until
  # one of its requests ends: 503 with Retry-After (warned once), not a 500.
  # Seed 000: over the rate a request answers 429 before any work is done; a tenant whose
  # work ran past its work rate is refused until its bucket refills.
  def test_answers_429_over_the_rate_and_in_debt_before_the_app_runs
    calls = 0
    mw = Fairshm::RackMiddleware.new(lambda { |_env|
      calls += 1
      [200, { "content-type" => "text/plain" }, ["ok"]]
    }, table: @table, pool: "requests", tenant: ->(env) { env["HTTP_X_TENANT"] })
    @table.set_rates("acme", requests_per_s: 1)
    status, _, body = mw.call("HTTP_X_TENANT" => "acme")
    body.close
    assert_equal [200, 1], [status, calls]
    status, headers, body = mw.call("HTTP_X_TENANT" => "acme")
    assert_equal [429, 1], [status, calls], "the app never ran"
    ms = Integer(headers["retry-after-ms"])
    assert_includes 1..1000, ms
    assert_equal "1", headers["retry-after"]
    doc = JSON.parse(body.join)
    assert_equal ["rate_limited", ms], doc.values_at("reason", "retry_after_ms")
    assert_equal 0, in_use, "a rate refusal touches no pool"
    status, _, body = mw.call("HTTP_X_TENANT" => "globex")
    body.close
    assert_equal 200, status, "another tenant is not limited by acme's rate"
    # Work debt: 5 s past the burst of a 1,000-units-a-second rate.
    @table.set_rates("globex", work_units_per_s: 1000)
    assert_operator @table.charge("globex", 6000), :>, 4000
    status, headers, body = mw.call("HTTP_X_TENANT" => "globex")
    assert_equal [429, 2], [status, calls]
    ms = Integer(headers["retry-after-ms"])
    assert_includes 4001..5000, ms
    assert_equal ((ms + 999) / 1000).to_s, headers["retry-after"]
    assert_equal "work_debt", JSON.parse(body.join)["reason"]
  end

  def test_charges_the_work_a_request_did_once_its_permit_is_released
    seen = []
    work = lambda do |env, seconds|
      seen << [env["HTTP_X_TENANT"], seconds, in_use]
      5000
    end
    @table.set_rates("acme", work_units_per_s: 1000)
    mw = Fairshm::RackMiddleware.new(->(_env) { [200, {}, ["ok"]] }, table: @table, pool: "requests",
                                                                  tenant: ->(env) { env["HTTP_X_TENANT"] }, work: work)
    status, _, body = mw.call("HTTP_X_TENANT" => "acme")
    assert_equal [200, []], [status, seen], "charged after the work, not before"
    body.close
    who, seconds, held = seen.fetch(0)
    assert_equal ["acme", 0], [who, held]
    assert_includes 0...10, seconds
    # 5,000 units at 1,000 a second, past a burst of one second's worth: in debt.
    status, _, body = mw.call("HTTP_X_TENANT" => "acme")
    doc = JSON.parse(body.join)
    assert_equal [429, "work_debt"], [status, doc["reason"]]
    assert_includes 3001..4000, doc["retry_after_ms"]
    # A request whose app raises did its work too; an untenanted one is not charged.
    @table.set_rates("globex", work_units_per_s: 1000)
    boom = Fairshm::RackMiddleware.new(->(_env) { raise "boom" }, table: @table, pool: "requests",
                                                               tenant: ->(env) { env["HTTP_X_TENANT"] }, work: work)
    assert_raises(RuntimeError) { boom.call("HTTP_X_TENANT" => "globex") }
    assert_equal 200, mw.call({})[0]
    assert_equal %w[acme globex], seen.map(&:first)
    assert_equal 0, in_use
    assert_operator @table.charge("globex", 0), :>, 3000
    err = assert_raises(TypeError) do
      Fairshm::RackMiddleware.new(->(_env) {}, table: @table, pool: "requests", tenant: ->(_env) {}, work: 5)
    end
    assert_includes err.message, "work must be"
  end

  def test_answers_503_when_this_process_has_no_lease_slot_left
    lint = frozen_lint({ "pools" => [{ "name" => "requests", "capacity" => 8 }], "leases_per_process" => 2 })
    env = -> { Rack::MockRequest.env_for("/", "HTTP_X_TENANT" => "globex") }
    held = Array.new(2) { lint.call(Rack::MockRequest.env_for("/", "HTTP_X_TENANT" => "acme"))[2] }
    answers = nil
    _, err = capture_io { answers = Array.new(2) { serve(lint, "globex") } }
    answers.each { |answer| assert_table_full(answer, "lease_table_full", "leases_per_process", "1") }
    assert_equal 1, err.scan("no lease slot left").size, err
    assert_equal 2, in_use
    finish = lambda do |b|
      b.each { |_| nil }
      b.close
    end
    finish.call(held.pop)
    status, _, body = lint.call(env.call)
    assert_equal 200, status
    body.each { |_| nil }
    body.close
    held.each(&finish)
    assert_equal 0, in_use
  end

  # A request of tenant +who+ through +app+, its body read and closed as a server does:
  # its status, headers and body text.
  def serve(app, who)
    status, headers, body = app.call(Rack::MockRequest.env_for("/", "HTTP_X_TENANT" => who))
    text = +""
    body.each { |c| text << c }
    body.close
    [status, headers, text]
  end

  # The middleware over a table made anew with +config+, frozen as
  # Rack::Builder#freeze_app leaves every middleware (its first 503 once raised
  # FrozenError: it noted its warning in an instance variable), under Rack::Lint.
  def frozen_lint(config)
    require "rack"
    require "rack/lint"
    require "rack/mock"
    recreate(config)
    Rack::Lint.new(app.freeze)
  end

  # A middleware's answer to a full table: 503, Retry-After as given (nil: absent), a
  # JSON body naming the +error+ and, in its explanation, the config +key+.
  def assert_table_full(answer, error, key, retry_after)
    status, headers, text = answer
    assert_equal 503, status
    if retry_after
      assert_equal retry_after, headers["retry-after"]
    else
      refute headers.key?("retry-after")
    end
    assert_equal text.bytesize, Integer(headers["content-length"])
    doc = JSON.parse(text)
    assert_equal error, doc["error"]
    assert_includes doc["explanation"], key
  end

  def recreate(config)
    @table.close
    Fairshm::Table.unlink(@name)
    @table = Fairshm::Table.create(@name, config)
  end

  # The segment's other full tables are the server's bound too: 503 with a JSON body
  # naming the key, not a 500 for every request they turn away.
  def test_a_new_tenant_that_the_directory_has_no_room_for_gets_503
    lint = frozen_lint({ "pools" => [{ "name" => "requests", "capacity" => 8 }], "max_tenants" => 2 })
    %w[acme globex].each { |who| assert_equal 200, serve(lint, who)[0] }
    answers = nil
    _, err = capture_io { answers = Array.new(2) { serve(lint, "initech") } }
    # It lasts for the segment's life: no Retry-After to promise.
    answers.each { |answer| assert_table_full(answer, "tenant_table_full", "max_tenants", nil) }
    assert_equal 1, err.scan("tenant directory is full").size, err
    assert_equal 200, serve(lint, "acme")[0]
    assert_equal 0, in_use
  end

  def test_a_worker_that_the_process_table_has_no_room_for_answers_503
    recreate({ "pools" => [{ "name" => "requests", "capacity" => 8 }], "max_processes" => 1 })
    @table.register # the one process slot: this process's
    reader, writer = IO.pipe
    pid = fork do
      reader.close
      $stderr.reopen(writer)
      t = Fairshm::Table.open(@name)
      mw = Fairshm::RackMiddleware.new(->(_env) { [200, {}, ["ok"]] }, table: t, pool: "requests",
                                                                        tenant: ->(_env) { "acme" })
      status, headers, body = mw.call({})
      writer.puts JSON.generate([status, headers["retry-after"], JSON.parse(body.join)])
      writer.close
      exit!(0)
    end
    writer.close
    assert wait_child(pid).success?
    lines = reader.read.lines
    reader.close
    status, retry_after, doc = JSON.parse(lines.last)
    assert_equal [503, "1", "process_table_full"], [status, retry_after, doc["error"]]
    assert_includes doc["explanation"], "max_processes"
    assert(lines.any? { |l| l.include?("fairshm middleware answers 503") }, lines.inspect)
  end
end
