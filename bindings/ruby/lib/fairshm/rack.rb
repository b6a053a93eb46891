# frozen_string_literal: true

require "json"
require_relative "../fairshm"

module Fairshm
  # Rack middleware: a permit per request, held until the server closes the response
  # body (so a streamed body keeps it while it streams), or released at once if the
  # application raises. A refused request gets 429 with Retry-After (whole seconds,
  # rounded up), Retry-After-Ms from the same number, and a short JSON body.
  #
  #   use Fairshm::RackMiddleware, table: TABLE, pool: "requests",
  #       tenant: ->(env) { env["HTTP_X_TENANT"] }
  #
  # +tenant+ maps a request's env to its tenant's name; nil lets it through unlimited.
  class RackMiddleware
    def initialize(app, table:, pool:, tenant:, units: 1, hold_ms: 0)
      # A wrong number is a configuration error, found at start-up, not per request.
      Fairshm.check_request(units, hold_ms)
      @app = app
      @table = table
      @pool = pool
      @tenant = tenant
      @units = units
      @hold_ms = hold_ms
    end

    def call(env)
      name = @tenant.call(env)
      return @app.call(env) if name.nil?

      lease = @table.attempt(@pool, name, units: @units, hold_ms: @hold_ms)
      # Returned, not raised: no backtrace is captured for a 429.
      return RackMiddleware.refused(lease) if lease.is_a?(Refused)

      begin
        status, headers, body = @app.call(env)
      rescue Exception # rubocop:disable Lint/RescueException
        lease.release
        raise
      end
      [status, headers, ReleasingBody.new(body, lease)]
    end

    def self.refused(refused)
      ms = refused.retry_after_ms
      body = JSON.generate(error: "too_many_requests", reason: refused.reason,
                           retry_after_ms: ms, explanation: refused.explanation)
      # Lower-case names: what Rack 3 requires of a response, and what Rack 2 accepts.
      [429, { "content-type" => "application/json", "content-length" => body.bytesize.to_s,
              "retry-after" => [1, (ms + 999) / 1000].max.to_s, "retry-after-ms" => ms.to_s }, [body]]
    end

    # The application's body, releasing the lease when the server closes it.
    class ReleasingBody
      def initialize(body, lease)
        @body = body
        @lease = lease
      end

      def each(&block)
        @body.each(&block)
      end

      def close
        @body.close if @body.respond_to?(:close)
      ensure
        lease = @lease
        @lease = nil
        lease&.release
      end
    end
  end
end
