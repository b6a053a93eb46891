# frozen_string_literal: true

# Guaranteed pools (seed 001) through the C ABI.
module Fairshm
  # An acquire of a guaranteed pool not granted: +reason+ (hold_exceeds_reclaim_horizon,
  # guarantee_on_loan, guarantee_exhausted), +retry_after_ms+ (nil when no time can be
  # promised: a blocking lease has overrun), the +blocking+ lease ids (the earliest due
  # first, at most 8: +facts[:n_blocking]+ counts them all) and their names in
  # +blocking_leases+ ("b#2": the borrower and the lease's number, as the explanation
  # and the stats name them), the numbers (+facts+), and the +explanation+.
  class GuaranteedRefused < StandardError
    attr_reader :reason, :code, :retry_after_ms, :blocking, :blocking_leases, :facts, :explanation, :pool,
                :tenant

    # +tenant_names+: the pool's tenants in handle order, which names the borrowers.
    def initialize(bytes, explanation, pool, tenant, tenant_names = [])
      vals = bytes.unpack(Native::G_REFUSAL_PACK + "Q8L8")
      @facts = Native::G_REFUSAL_FIELDS.zip(vals).to_h
      @code = @facts[:reason]
      @reason = REASONS.fetch(@code, "unknown")
      @retry_after_ms = @facts[:has_retry_after] == 1 ? @facts[:retry_after_ms] : nil
      shown = [@facts[:n_blocking], 8].min
      @blocking = vals[Native::G_REFUSAL_FIELDS.size, shown]
      borrowers = vals[Native::G_REFUSAL_FIELDS.size + 8, shown]
      @blocking_leases = @blocking.zip(borrowers).map do |id, t|
        "#{tenant_names.fetch(t, '?')}##{id & 0xFFFF_FFFF}"
      end
      @explanation = explanation
      @pool = pool
      @tenant = tenant
      super("#{@reason}: #{explanation}")
    end

    # The HTTP Retry-After value (whole seconds, rounded up, at least 1), or nil.
    def retry_after_header
      @retry_after_ms && [1, -(-@retry_after_ms / 1000)].max
    end
  end

  # A guaranteed pool (seed 001): fixed, weighted tenants, each guaranteed its part of
  # the ceiling, idle parts lent for at most the reclaim horizon. Every call takes
  # +now_ms+: an explicit time in ms (0 included: seed 001's traces start at t = 0),
  # or nil, the default, for the library's clock.
  class Guaranteed
    attr_reader :name

    def initialize(table, name)
      @table = table
      @name = name
      @tenants = {}
      out = Fiddle::Pointer.malloc(4, Fiddle::RUBY_FREE)
      rc = Native::G_POOL.call(table.handle, Fairshm.c_name(name, "pool", Native::E_UNKNOWN_POOL), out)
      @table.raise_for(rc) unless rc.zero?
      @id = out[0, 4].unpack1("L")
    end

    # The lease id, or raises GuaranteedRefused. With a block: yields the lease id and
    # releases it afterwards (at the library's clock), unless the block released it (at
    # a time of its own: a trace at explicit times keeps them).
    def acquire(tenant_name, cost, hold_ms, now_ms: nil, &block)
      Fairshm.check_int("cost", cost, U64_MAX, least: 1) # 0 goes on to the library, which says why
      Fairshm.check_int("hold_ms", hold_ms, U64_MAX)
      now = Fairshm.now_arg(now_ms)
      lease = Fiddle::Pointer.malloc(8, Fiddle::RUBY_FREE)
      facts = Fiddle::Pointer.malloc(Native::G_REFUSAL_SIZE, Fiddle::RUBY_FREE)
      why = Fiddle::Pointer.malloc(Native::G_WHY_SIZE, Fiddle::RUBY_FREE)
      rc = Native::G_ACQUIRE.call(@table.handle, @id, tenant(tenant_name), cost, hold_ms, now,
                                  lease, facts, why, Native::G_WHY_SIZE)
      if rc == 1
        raise GuaranteedRefused.new(facts[0, Native::G_REFUSAL_SIZE], why.to_s.force_encoding("UTF-8"),
                                    @name, tenant_name, tenant_names)
      end
      @table.raise_for(rc) unless rc.zero?
      id = lease[0, 8].unpack1("Q")
      block ? held(id, &block) : id
    end

    # acquire on the library's clock, asked again until granted or +timeout+ seconds
    # have passed (nil: for ever): as soon as units come back to the pool (a release,
    # or the reap of a dead holder, wakes its waiters in every process), else at each
    # refusal's retry-after, and at least every half idle_after_ms, so that the
    # tenant's demand (which lapses idle_after_ms after its last ask) stays signalled
    # and its guarantee frozen while it waits. Raises the last
    # GuaranteedRefused when the time is up, and at once for a refusal that waiting
    # cannot end (hold_exceeds_reclaim_horizon with no retry-after). A Fairshm::Cancel
    # fired from another thread ends the wait at once with the last GuaranteedRefused,
    # as the deadline does; fired before the call, it still lets the first ask through.
    # With a block, as acquire.
    def acquire_timeout(tenant_name, cost, hold_ms, timeout, cancel: nil, &block)
      # As the fair-share acquire's: nil or infinity waits for ever, a negative timeout
      # asks once, NaN raises ArgumentError and a non-number TypeError.
      deadline = Fairshm.deadline(timeout) || Float::INFINITY
      Cancel.ptr_of(cancel) # a TypeError now for anything but a Cancel, not at the first sleep

      # A time before the pool's clock reads at its clock: nothing moves.
      @keep_asking_ms ||= [stats(now_ms: 0)["stats"]["idle_after_ms"] / 2, 1].max
      seen = Fiddle::Pointer.malloc(8, Fiddle::RUBY_FREE)
      woken = Fiddle::Pointer.malloc(4, Fiddle::RUBY_FREE)
      handle = tenant(tenant_name)
      id = begin
        begin
          # The pool's wake word (and the count of releases for this tenant's waiters)
          # before the ask: a release after it that may serve it ends the sleep.
          rc = Native::G_WAKE_SEEN_AS.call(@table.handle, @id, handle, seen)
          @table.raise_for(rc) unless rc.zero?
          acquire(tenant_name, cost, hold_ms)
        rescue GuaranteedRefused => e
          left = deadline - Process.clock_gettime(Process::CLOCK_MONOTONIC)
          raise if left <= 0 || (e.reason == "hold_exceeds_reclaim_horizon" && e.retry_after_ms.nil?)
          raise if cancel&.cancelled?

          wait = (e.retry_after_ms || @keep_asking_ms).clamp(1, @keep_asking_ms)
          sleep_until_freed(seen, woken, Process.clock_gettime(Process::CLOCK_MONOTONIC) + [wait / 1000.0, left].min,
                            cancel, handle, hold_ms)
          retry
        end
      ensure
        # A release wakes one waiter, which passes the wake on with its next ask; a wait
        # that ends without it (Thread#raise, Timeout, Ctrl-C between the calls) passes
        # it here. Nothing if none is owed. Its code is not raised: that would replace
        # the exception in flight, and a wait's end has nothing else to report.
        Native::G_WAIT_END.call(@table.handle, @id) unless @table.closed?
      end
      block ? held(id, &block) : id
    end

    # Sleeps until units come back to the pool (a release or a reap since `seen` was
    # read) that may serve a request of tenant handle `tenant` to hold for `hold_ms`
    # (a release that cannot does not wake it, and `seen` moves past it for the next
    # slice), until `wake_at` (monotonic seconds) or until `cancel` fires, in slices
    # without the GVL, so that Thread#raise, Timeout and Ctrl-C land between them.
    def sleep_until_freed(seen, woken, wake_at, cancel, tenant, hold_ms)
      loop do
        ms = ((wake_at - Process.clock_gettime(Process::CLOCK_MONOTONIC)) * 1000).ceil.clamp(0, WAIT_SLICE_MS)
        rc = Native::G_SLEEP_AS.call(@table.handle, @id, tenant, hold_ms, seen, ms, cancel&.ptr, woken)
        @table.raise_for(rc) unless rc.zero?
        return if woken[0, 4].unpack1("L") != 0 || Process.clock_gettime(Process::CLOCK_MONOTONIC) >= wake_at
        return if cancel&.cancelled? # one more ask: a grant is kept, a refusal raised
      end
    end
    private :sleep_until_freed

    # The pool's tenants in handle order (the stats list them so; they are fixed for
    # the segment's life).
    def tenant_names
      # A time before the pool's clock reads at its clock: nothing moves.
      @tenant_names ||= stats(now_ms: 0)["stats"]["tenants"].map { |t| t["name"] }
    end

    def release(lease_id, now_ms: nil)
      Fairshm.check_int("lease_id", lease_id, U64_MAX)
      rc = Native::G_RELEASE.call(@table.handle, lease_id, Fairshm.now_arg(now_ms))
      @table.raise_for(rc) unless rc.zero?
    end

    # {"stats" => ..., "fairness_report" => ..., "plan" => [...]} at now_ms (nil: the
    # library's clock; a time before the pool's own clock, the latest now it was
    # given, counts as that clock).
    def stats(now_ms: nil)
      now = Fairshm.now_arg(now_ms)
      @table.raise_for(-11) if @table.closed?
      Fairshm.take_json(Native::G_STATS_JSON.call(@table.handle, @id, now), -11)
    end

    # The fairness report of stats(now_ms:): cost, request and weight shares side by
    # side per tenant, the skew and units_disagree.
    def fairness_report(now_ms: nil)
      stats(now_ms: now_ms)["fairness_report"]
    end

    # The plan of stats(now_ms:): the weighted max-min allocation for current demand
    # (progressive filling), per tenant with its demand, target and drift.
    def plan(now_ms: nil)
      stats(now_ms: now_ms)["plan"]
    end

    private

    # Yields lease +id+ and releases it afterwards (at the library's clock), however
    # the block ends.
    def held(id)
      yield id
    ensure
      begin
        release(id)
      rescue AlreadyReleased
        nil # released in the block already (at its own time): nothing is held
      end
    end

    def tenant(name)
      @tenants[name] ||= begin
        out = Fiddle::Pointer.malloc(4, Fiddle::RUBY_FREE)
        rc = Native::G_TENANT.call(@table.handle, @id, Fairshm.c_name(name, "tenant", Native::E_INVALID_TENANT), out)
        @table.raise_for(rc) unless rc.zero?
        out[0, 4].unpack1("L")
      end
    end
  end
end
