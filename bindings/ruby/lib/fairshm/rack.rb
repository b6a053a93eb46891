# frozen_string_literal: true

require "json"
require_relative "../fairshm"

module Fairshm
  # Rack middleware: a permit per request, held until the server closes the response
  # body (so a streamed body keeps it while it streams), or released at once if the
  # application raises. A refused request gets 429 with Retry-After (whole seconds,
  # rounded up), Retry-After-Ms from the same number, and a short JSON body; one whose
  # tenant name the table cannot take gets 400; one that finds this process with no
  # lease slot left (LeaseTableFull) gets 503 with Retry-After: 1, as does one whose
  # process finds no process slot (ProcessTableFull), and one of a new tenant that the
  # tenant directory has no room for (TenantTableFull) gets 503 with no Retry-After (it
  # lasts for the segment's life). A +pool+ the table does not have raises UnknownPool
  # when the middleware is built, and +units+ more than it can ever hold
  # UnitsExceedCapacity.
  #
  #   use Fairshm::RackMiddleware, table: TABLE, pool: "requests",
  #       tenant: ->(env) { env["HTTP_X_TENANT"] }
  #
  # +tenant+ maps a request's env to its tenant's name; nil lets it through unlimited.
  # Behind a front proxy that stamps X-Request-Start (nginx:
  # proxy_set_header X-Request-Start "t=${msec}";), each request's wait in the
  # server's queue is passed to the table (Table#note_queue): a queue there makes
  # an over-share tenant's hints longer. +queue_header: false+ ignores the header
  # (leave it on only behind a proxy that sets it itself).
  #
  # +work+: nil, or a callable of the request's env and the seconds it held its permit
  # that returns the units of work the request did; they are charged to its tenant
  # (Table#charge) once the permit is released, so that a tenant past its work rate is
  # refused work_debt (work: ->(_env, s) { (s * 1000).to_i }: a unit a ms of handling).
  class RackMiddleware
    # A wait longer than this is not a queue but a wrong stamp (or clocks far apart).
    MAX_QUEUED_US = 60_000_000

    def initialize(app, table:, pool:, tenant:, units: 1, hold_ms: 0, queue_header: true, work: nil)
      # A wrong number or pool is a configuration error, found at start-up, not as a
      # 500 on every request: the pool is resolved now (UnknownPool, naming the table's
      # pools, for a name it does not have), and the units checked against it
      # (UnitsExceedCapacity for more than it can ever hold).
      Fairshm.check_request(units, hold_ms)
      table.check_units(pool, units)
      unless work.nil? || work.respond_to?(:call)
        raise TypeError, "work must be a callable of (env, seconds) or nil, not #{work.inspect}"
      end

      @work = work
      @app = app
      @table = table
      @pool = pool
      @tenant = tenant
      @units = units
      @hold_ms = hold_ms
      @queue_header = queue_header
      @warned = {} # the full tables warned of
    end

    def call(env)
      name = @tenant.call(env)
      stamp = env["HTTP_X_REQUEST_START"] if @queue_header
      q = stamp ? RackMiddleware.queued_us(stamp) : nil
      if name.nil?
        @table.note_queue(@pool, q) if q
        return @app.call(env)
      end

      begin
        lease = @table.attempt(@pool, name, units: @units, hold_ms: @hold_ms, queued_us: q)
      rescue InvalidTenant => e
        return RackMiddleware.invalid_tenant(e)
      rescue LeaseTableFull, ProcessTableFull, TenantTableFull => e
        return table_full(e)
      end
      # Returned, not raised: no backtrace is captured for a 429.
      return RackMiddleware.refused(lease) if lease.is_a?(Refused)

      finish = finisher(lease, name, env)
      begin
        status, headers, body = @app.call(env)
      rescue Exception # rubocop:disable Lint/RescueException
        finish.call
        raise
      end
      [status, headers, ReleasingBody.new(body, finish)]
    end

    # What ends a request's permit, called once: it releases +lease+, then charges
    # tenant +name+ the units of work +work+ says the request did.
    def finisher(lease, name, env)
      return lease.method(:release) unless @work

      started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      lambda do
        lease.release
        units = @work.call(env, Process.clock_gettime(Process::CLOCK_MONOTONIC) - started)
        @table.charge(name, units) if units&.positive?
      end
    end

    # How long a request waited in the server's queue, in microseconds, from the value
    # of its X-Request-Start header (+now_us+: the wall clock in microseconds), or nil
    # when the value is not a stamp. Takes the forms front proxies send, with or
    # without "t=": seconds with a fraction (nginx's t=${msec}) and whole seconds,
    # milliseconds (Heroku) or microseconds (Apache's %t), told apart by their size. A
    # stamp ahead of the clock waited 0; one more than a minute behind is not a stamp.
    def self.queued_us(value, now_us = Process.clock_gettime(Process::CLOCK_REALTIME, :microsecond))
      v = value.to_s.strip
      v = v[2..] if v.start_with?("t=")
      x = Float(v, exception: false)
      return nil if x.nil? || !x.finite? || x <= 0

      start = if x > 1e15 then x
              elsif x > 1e12 then x * 1e3
              else x * 1e6
              end
      waited = now_us - start
      return nil if waited > MAX_QUEUED_US

      [waited.to_i, 0].max
    end

    # The 400 for a request whose tenant name the table cannot take (empty, too long, a
    # NUL byte, no UTF-8 spelling): the name comes from the request, so the request is
    # at fault, not the server, and each such request would otherwise be a 500.
    def self.invalid_tenant(error)
      body = JSON.generate(error: "invalid_tenant", explanation: error.message)
      [400, { "content-type" => "application/json", "content-length" => body.bytesize.to_s }, [body]]
    end

    # Each full table's 503 (its body names the error's kind): its Retry-After (nil:
    # waiting does not help), and what the warning for the first one says.
    FULL = {
      LeaseTableFull => ["1", "this process has no lease slot left"],
      ProcessTableFull => ["1", "the segment has no process slot for this process"],
      TenantTableFull => [nil, "the segment's tenant directory is full"]
    }.freeze

    # The 503 for a request that a full table of the segment turns away, not a 500: the
    # bound is this server's, not the tenant's. LeaseTableFull: as many of this
    # process's requests in flight as the config's leases_per_process (which a worker of
    # many threads reaches first), for as long as one of them takes to end, hence
    # Retry-After: 1; ProcessTableFull: no process slot for this worker (another worker
    # may serve a retry); TenantTableFull: no directory slot for a new tenant's name,
    # for the segment's life, so no Retry-After. The first of each kind warns
    # (Kernel#warn), naming the config key to raise.
    def table_full(error)
      retry_after, why = FULL.find { |kind, _| error.is_a?(kind) }.last
      unless @warned[error.kind]
        @warned[error.kind] = true
        warn "fairshm middleware answers 503 while #{why}: #{error.message}"
      end
      body = JSON.generate(error: error.kind, explanation: error.message)
      headers = { "content-type" => "application/json", "content-length" => body.bytesize.to_s }
      headers["retry-after"] = retry_after if retry_after
      [503, headers, [body]]
    end

    def self.refused(refused)
      ms = refused.retry_after_ms
      body = JSON.generate(error: "too_many_requests", reason: refused.reason,
                           retry_after_ms: ms, explanation: refused.explanation)
      # Lower-case names: what Rack 3 requires of a response, and what Rack 2 accepts.
      [429, { "content-type" => "application/json", "content-length" => body.bytesize.to_s,
              "retry-after" => [1, (ms + 999) / 1000].max.to_s, "retry-after-ms" => ms.to_s }, [body]]
    end

    # The application's body, ending the permit (+finish+) when the server closes it. Every
    # other call is the body's own, and it answers to what the body answers to: +each+
    # (an enumerable body), +call+ (a Rack 3 streaming body, which has no +each+),
    # +to_path+ (a file the server may send itself) and +to_ary+. A body that answers
    # +to_ary+ closes when it is called (Rack 3's SPEC), since a middleware that calls
    # it replaces the body and never closes it: the lease is released then.
    class ReleasingBody
      def initialize(body, finish)
        @body = body
        @finish = finish
      end

      def close
        @body.close if @body.respond_to?(:close)
      ensure
        finish = @finish
        @finish = nil
        finish&.call
      end

      def respond_to_missing?(name, include_all = false)
        # Never a String: a body that is one is not a Rack body to wrap.
        name != :to_str && @body.respond_to?(name, include_all)
      end

      def method_missing(name, *args, **kwargs, &block)
        return super unless @body.respond_to?(name)
        return @body.public_send(name, *args, **kwargs, &block) unless name == :to_ary

        begin
          @body.to_ary
        ensure
          close
        end
      end
    end
  end
end
