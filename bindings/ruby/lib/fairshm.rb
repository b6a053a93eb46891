# frozen_string_literal: true

require "json"
require_relative "fairshm/native"
require_relative "fairshm/errors"

# fairshm for Ruby: node-wide pools of permits, shared fairly among tenants by the
# forked worker processes (and their threads) of one server, in one lock-free
# shared-memory segment.
#
#   table = Fairshm::Table.open_or_create("myapp", { pools: [{ name: "requests", capacity: 64 }] })
#   table.permit("requests", "acme", hold_ms: 50) { serve }
#   # raises Fairshm::Refused (reason, retry_after_ms, explanation) when refused
#
# A table opened before fork (Puma's preload_app!) works in every worker; a worker that
# dies gives its permits back.
module Fairshm
  VERSION = "0.1.0"

  # How long one slice of a blocking acquire lasts, in ms: between slices Ruby handles
  # interrupts (Thread#raise, Timeout.timeout), so they land within this bound.
  WAIT_SLICE_MS = 50

  # An acquire not granted: +reason+ (pool_full, over_share, timed_out, cancelled,
  # rate_limited, work_debt, too_many_residents), +retry_after_ms+, the numbers the rule
  # decided on, and the +explanation+.
  class Refused < StandardError
    attr_reader :reason, :code, :retry_after_ms, :pool, :tenant

    def initialize(table, bytes, pool, tenant)
      @table = table
      @bytes = bytes
      # The two fields a 429 needs, read directly (offsets of Native::REFUSAL_PACK); the
      # rest is unpacked when first asked for.
      @code = bytes.unpack1("L")
      @reason = REASONS.fetch(@code, "unknown")
      @retry_after_ms = bytes.unpack1("Q", offset: Native::REFUSAL_RETRY_AFTER_AT)
      @pool = pool
      @tenant = tenant
      super(@reason)
    end

    # The numbers the rule decided on, by field name (Native::REFUSAL_FIELDS).
    def facts
      @facts ||= Native::REFUSAL_FIELDS.zip(@bytes.unpack(Native::REFUSAL_PACK)).to_h.except(:reserved)
    end

    %i[units in_use held capacity floor weight short_units active_weight waited_ms queued
       interval_us queue_stretch_pct server_queue_us rate_per_s].each do |f|
      define_method(f) { facts[f] }
    end

    # Seconds, as a Float.
    def retry_after
      @retry_after_ms / 1000.0
    end

    # share(t) of the tenant when the rule refused it (the library's formula).
    def share
      Native::SHARE.call(Fiddle::Pointer.to_ptr(@bytes))
    end

    # The HTTP Retry-After value: whole seconds, rounded up, at least 1.
    def retry_after_header
      [1, (@retry_after_ms + 999) / 1000].max
    end

    # The library's explanation, made when first asked for. A refusal that outlives
    # its table (closed since) is explained from its numbers alone.
    def explanation
      @explanation ||= (@table.closed? ? numbers_only : explain)
    end

    def to_h
      facts.merge(reason: @reason, code: @code, pool: @pool, tenant: @tenant, explanation: explanation)
    end

    def message
      "#{@reason}: #{explanation}"
    end

    # Marshal (as the parallel gem sends back what a forked worker raised): the numbers,
    # the explanation (made now, while the table may still be open) and the backtrace;
    # not the table, whose handle means nothing in another process.
    # (_dump and _load: Marshal refuses an exception's marshal_load, a TypeError on Ruby 3.1.)
    def _dump(_level)
      Marshal.dump([@bytes, @pool, @tenant, explanation, backtrace])
    end

    def self._load(data)
      bytes, pool, tenant, explanation, trace = Marshal.load(data)
      new(nil, bytes, pool, tenant).tap do |r|
        r.instance_variable_set(:@explanation, explanation)
        r.set_backtrace(trace) if trace
      end
    end

    private

    def numbers_only
      shown = if rate_per_s.positive? # refused by the tenant's rates: no pool was read
                "its #{REASONS[facts[:rule]] == 'work_debt' ? 'work' : 'request'} rate: #{rate_per_s} per second"
              else
                "in use #{in_use} of #{capacity}, the tenant holds #{held}"
              end
      "tenant #{@tenant.inspect} asked for #{units} unit(s) of pool " \
        "#{@pool.inspect}: #{@reason} (#{shown}); retry after #{@retry_after_ms} ms. " \
        "The table was closed before this refusal was explained, so only its numbers " \
        "are known."
    end

    def explain
      src = Fiddle::Pointer.to_ptr(@bytes)
      buf = Fiddle::Pointer.malloc(512, Fiddle::RUBY_FREE)
      n = Native::EXPLAIN.call(@table.handle, src, buf, 512)
      if n.negative?
        # Closed by another thread since the check: the numbers, not an error out of
        # #message.
        return numbers_only if @table.closed?

        Fairshm.raise_code(n)
      end
      if n >= 512
        buf = Fiddle::Pointer.malloc(n + 1, Fiddle::RUBY_FREE)
        Native::EXPLAIN.call(@table.handle, src, buf, n + 1)
      end
      buf.to_s.force_encoding(Encoding::UTF_8)
    end
  end

  # For the objects that hold a native handle of this process (a Table, a Cancel): a
  # copy would share the pointer, used after one of the two freed it (or, marshaled to
  # another process, never valid). dup, clone and Marshal raise TypeError instead,
  # before anything is made: a copy Ruby made and initialize_copy then refused would
  # still carry the original's finalizer, and free its pointer a second time.
  module NotCopied
    def dup
      raise TypeError, "a #{self.class} cannot be copied: #{not_copied_because}"
    end

    def clone(**)
      dup
    end

    def _dump(_level)
      raise TypeError, "a #{self.class} cannot be marshaled: #{not_copied_because}"
    end

    private

    def not_copied_because
      "it holds this process's native handle; #{not_copied_instead}"
    end
  end

  # Ends blocking acquires early, from another thread: acquire(cancel: c) then raises
  # Refused with reason "cancelled" (a guaranteed pool's acquire_timeout(..., cancel: c)
  # its last GuaranteedRefused). It stays fired until #reset.
  class Cancel
    include NotCopied
    attr_reader :ptr

    def initialize
      @ptr = Native::CANCEL_NEW.call
      ObjectSpace.define_finalizer(self, Cancel.finalizer(@ptr.to_i))
    end

    def self.finalizer(addr)
      proc { Native::CANCEL_FREE.call(addr) }
    end

    def cancel
      Native::CANCEL_FIRE.call(@ptr)
    end

    def reset
      Native::CANCEL_RESET.call(@ptr)
    end

    # Whether #cancel was called since the token was made or reset.
    def cancelled?
      Native::CANCEL_FIRED.call(@ptr) != 0
    end

    # The native token of +cancel+ (nil: no token) for a blocking call; TypeError for
    # anything but a Cancel.
    def self.ptr_of(cancel)
      raise TypeError, "cancel must be a Fairshm::Cancel or nil, not #{cancel.inspect}" unless cancel.nil? || cancel.is_a?(Cancel)

      cancel&.ptr
    end

    private

    def not_copied_instead
      "make a new one where it is needed"
    end
  end

  # A granted permit; release it with #release (or use Table#permit with a block). A
  # lease released twice raises AlreadyReleased.
  # A granted permit: +id+ is the C ABI's lease id; +pool+, +tenant+ and +units+ say
  # what it holds (the names as Strings, a Symbol given to the acquire as its name).
  class Lease
    attr_reader :id, :table, :pool, :tenant, :units

    # +at+: the explicit now_ms it was acquired at, if any.
    def initialize(table, id, pool = nil, tenant = nil, units = nil, at = nil)
      @table = table
      @id = id
      @pool = pool
      @tenant = tenant
      @units = units
      @at = at
    end

    # Releases the lease at +now_ms+: nil for the time it was acquired at when that was
    # an explicit now_ms (so a replayed trace never mixes in the real clock, as Rust's
    # guard does when dropped), else the library's clock.
    def release(now_ms: nil)
      @table.release(@id, now_ms: now_ms.nil? ? @at : now_ms)
      nil
    end

    def inspect
      format("#<Fairshm::Lease %#x of table %p>", @id, @table.name)
    end

    # Residents (a lease of an evict pool): starts a call, during which it is never
    # revoked; raises Revoked once it was (put the object to sleep and release).
    # now_ms: nil for the library's clock, else an explicit time.
    def begin_call(now_ms: nil)
      rc = Native::BEGIN_CALL.call(@table.handle, @id, Fairshm.now_arg(now_ms))
      @table.raise_for(rc) unless rc.zero?
      nil
    end

    # Ends a call; once the last ends, the resident is evictable again.
    def end_call(now_ms: nil)
      rc = Native::END_CALL.call(@table.handle, @id, Fairshm.now_arg(now_ms))
      @table.raise_for(rc) unless rc.zero?
      nil
    end

    # Runs the block inside a call (begin_call, then end_call however it ends).
    def call
      begin_call
      begin
        yield self
      ensure
        end_call
      end
    end

    # Whether this resident was revoked (its permit passed to another).
    def revoked?
      out = Fiddle::Pointer.malloc(4, Fiddle::RUBY_FREE)
      rc = Native::RESIDENT_STATUS.call(@table.handle, @id, out)
      @table.raise_for(rc) unless rc.zero?
      out[0, 4].unpack1("L") == 2
    end

    # Waits up to +timeout+ seconds for a revocation (woken at once by it); whether it
    # came. Releases the GVL, in slices, so Thread#raise interrupts it.
    def wait_revoked(timeout)
      deadline = Fairshm.deadline(timeout)
      out = Fiddle::Pointer.malloc(4, Fiddle::RUBY_FREE)
      loop do
        left = deadline ? Fairshm.left_ms(deadline) : WAIT_SLICE_MS
        rc = Native::WAIT_REVOKED.call(@table.handle, @id, [left, WAIT_SLICE_MS].min, out)
        @table.raise_for(rc) unless rc.zero?
        got = out[0, 4].unpack1("L") == 1
        return got if got || (deadline && left <= WAIT_SLICE_MS)
      end
    end
  end

  # An open table (a mapped segment). Open it once per process, or once in the master
  # before forking: it works in every forked worker and in every thread.
  class Table
    include NotCopied
    attr_reader :name, :handle

    def self.create(name, config = nil, mode: 0)
      new(name, Native::CREATE, config, mode)
    end

    def self.open(name, config = nil)
      new(name, Native::OPEN_EXISTING, config)
    end

    def self.open_or_create(name, config = nil)
      new(name, Native::OPEN_OR_CREATE, config)
    end

    # Read-only: never registers, changes nothing.
    def self.observer(name)
      new(name, Native::OBSERVER, nil)
    end

    def self.unlink(name)
      rc = Native::UNLINK.call(Fairshm.c_name(name, "segment", Native::E_INVALID_NAME))
      Fairshm.raise_code(rc) unless rc.zero?
    end

    # +config+ as JSON. NaN and the infinities are no JSON: InvalidConfig, saying so.
    def self.config_json(config)
      JSON.generate(config)
    rescue JSON::GeneratorError => e
      raise InvalidConfig.new(Native::E_INVALID_CONFIG, "invalid config: #{e.message}: a NaN or infinite number (a quota?)")
    end

    # A String config: the config's JSON or TOML text, or a file's path (see +new+).
    def self.config_string(config)
      raise ArgumentError, "config #{config.inspect} contains a NUL byte" if config.include?("\0")

      unless File.exist?(config)
        return [config, Native::CONFIG_JSON] if config.lstrip.start_with?("{")
        return [config, Native::CONFIG_TOML] if config.include?("\n")
      end
      [config, Native::CONFIG_FILE]
    end

    # +config+: a Hash (sent as JSON), a file's path (TOML if it ends in .toml, JSON if
    # in .json, else by its text), the config's own text (JSON if it starts with "{",
    # TOML if it has a line break: no path does, and an existing file is taken as
    # one), or nil.
    def initialize(name, how, config = nil, mode = 0)
      text, kind = case config
                   when nil then [nil, Native::CONFIG_NONE]
                   when Hash then [Table.config_json(config), Native::CONFIG_JSON]
                   when String then Table.config_string(config)
                   else raise TypeError, "config is a Hash, a file's path, the config's JSON or TOML text, or nil"
                   end
      out = Fiddle::Pointer.malloc(Fiddle::SIZEOF_VOIDP, Fiddle::RUBY_FREE)
      rc = Native::OPEN.call(Fairshm.c_name(name, "segment", Native::E_INVALID_NAME), how, text, kind, mode, out)
      Fairshm.raise_code(rc) unless rc.zero?
      @handle = out[0, Fiddle::SIZEOF_VOIDP].unpack1("J")
      @name = name
      @pools = {}
      @tenants = {}
      # A table dropped without #close is closed when it is collected, as Python's
      # is: otherwise its mapping and its anchor thread stay until the process ends.
      @open = [@handle]
      ObjectSpace.define_finalizer(self, Table.closer(@open))
    end

    # The finalizer: closes the handle in +open+ unless #close did (it zeroes it).
    # Holds the box, never the table, which would keep the table alive.
    def self.closer(open)
      proc do
        h = open[0]
        open[0] = 0
        Native::CLOSE.call(h) unless h.zero?
      end
    end

    def close
      h = @handle
      @handle = 0
      @open[0] = 0
      Native::CLOSE.call(h) unless h.nil? || h.zero?
      nil
    end

    # Whether #close was called (every call on the table then raises).
    def closed?
      @handle.nil? || @handle.zero?
    end

    def inspect
      format("#<Fairshm::Table %p %s>", @name, closed? ? "closed" : "open")
    end

    # Raises the error of code +rc+ (for this table's calls and its leases'); on a
    # closed table, says that instead of the C ABI's "argument `table` is null".
    def raise_for(rc)
      raise InvalidRequest.new(Native::E_INVALID_REQUEST, "table #{@name.inspect} is closed: open it again to use it") if closed?

      Fairshm.raise_code(rc)
    end

    # The pool's handle (resolved once, then cached).
    def pool(name)
      @pools[name] ||= resolve(Native::POOL, Fairshm.c_name(name, "pool", Native::E_UNKNOWN_POOL))
    end

    # Pool handle +p+'s eviction wait in ms (0: the pool refuses), cached.
    def evict_wait_ms(p)
      @evict_waits ||= {}
      @evict_waits[p] ||= begin
        out = Fiddle::Pointer.malloc(4, Fiddle::RUBY_FREE)
        rc = Native::EVICT_WAIT_MS.call(@handle, p, out)
        raise_for(rc) unless rc.zero?
        out[0, 4].unpack1("L")
      end
    end

    # The tenant's handle (claimed on first use, then cached).
    def tenant(name)
      @tenants[name] ||= resolve(Native::TENANT, Fairshm.c_name(name, "tenant", Native::E_INVALID_TENANT))
    end

    # Raises what an acquire of +units+ from +pool_name+ would raise because the
    # table's config can never grant it: UnitsExceedCapacity for more than a fixed pool
    # holds, or than a per_worker pool holds with a worker in every process slot;
    # InvalidRequest for 0 (UnknownPool for a pool the table does not have). Claims and
    # registers nothing; returns nil for a request that can be granted some day. The
    # Rack middleware calls it when it is built.
    def check_units(pool_name, units)
      Fairshm.check_request(units, 0)
      check_units_of(pool(pool_name), units)
      nil
    end

    # Registers this process as a worker now (per_worker pools count it).
    def register
      rc = Native::REGISTER.call(@handle)
      raise_for(rc) if rc.negative?
      rc
    end

    # Notes that a request for +pool_name+ waited +queued_us+ microseconds in the
    # server's own queue (from the front proxy's X-Request-Start to the app): while
    # such waits show a queue, a tenant over its share is told to come back
    # later, so that its retries stay out of that queue. The Rack middleware calls it
    # for every request that carries the header.
    def note_queue(pool_name, queued_us)
      Fairshm.check_int("queued_us", queued_us, U64_MAX)
      p = @pools[pool_name] || pool(pool_name)
      rc = Native::NOTE_QUEUE.call(@handle, p, queued_us)
      raise_for(rc) unless rc.zero?
    end

    # A Lease, or raises Refused at once. With a block: yields the lease, releases it
    # when the block ends, however it ends, and returns the block's value. +now_ms+: nil
    # for the library's clock, else an explicit time in ms (0 included), so that a
    # recorded sequence of calls replays to the same decisions; the lease then releases
    # at that time unless given another. A wait measured on the real clock
    # (+queued_us+) does not go with it (ArgumentError).
    def try_acquire(pool_name, tenant_name, units: 1, hold_ms: 0, queued_us: nil, now_ms: nil, &block)
      got = attempt(pool_name, tenant_name, units: units, hold_ms: hold_ms, queued_us: queued_us,
                                            now_ms: now_ms)
      raise got if got.is_a?(Refused)

      block ? Fairshm.holding(got, &block) : got
    end

    # A Lease, or the Refused, returned instead of raised (errors still raise). For a
    # caller that answers refusals on its hot path, as the Rack middleware does: a
    # raised exception captures its backtrace, most of what a refusal costs in Ruby.
    # +queued_us+: how long the request waited in the server's own queue, when known
    # (see note_queue); an over-share refusal's retry_after_ms is then stretched by it.
    def attempt(pool_name, tenant_name, units: 1, hold_ms: 0, queued_us: nil, now_ms: nil)
      Fairshm.check_request(units, hold_ms)
      now = explicit_now(queued_us, now_ms)
      p = @pools[pool_name] || pool(pool_name)
      t = @tenants[tenant_name] || request_tenant(tenant_name, p, units)
      lease, refusal = Fairshm.buffers
      rc = if now
             Native::TRY_ACQUIRE_AT.call(@handle, p, t, units, hold_ms, now, lease, refusal)
           elsif queued_us.nil?
             Native::TRY_ACQUIRE.call(@handle, p, t, units, hold_ms, lease, refusal)
           else
             Fairshm.check_int("queued_us", queued_us, U64_MAX)
             Native::TRY_ACQUIRE_QUEUED.call(@handle, p, t, units, hold_ms, queued_us, lease, refusal)
           end
      if rc.zero?
        return Lease.new(self, lease[0, 8].unpack1("Q"), pool_name.to_s, tenant_name.to_s, units, now_ms)
      end

      refused_or_raise(rc, refusal, pool_name, tenant_name)
    end

    # A Lease, waiting up to +timeout+ seconds (nil: for ever) for room; raises Refused
    # (timed_out or cancelled) if none came, or (rate_limited, work_debt) as soon as the
    # tenant's next token is known to come after the deadline. The GVL is released while waiting;
    # Thread#raise and Timeout.timeout interrupt the wait. With a block, as try_acquire.
    def acquire(pool_name, tenant_name, units: 1, hold_ms: 0, timeout: nil, cancel: nil, &block)
      Fairshm.check_request(units, hold_ms)
      p = pool(pool_name)
      t = @tenants[tenant_name] || request_tenant(tenant_name, p, units)
      lease, refusal = Fairshm.buffers
      c = Cancel.ptr_of(cancel)
      # Read before the deadline is set, so that the wait it reports (from here to the
      # refusal) is never shorter than the timeout that ended it.
      start = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      deadline = Fairshm.deadline(timeout)
      wait = evict_wait_ms(p)
      if wait.positive?
        # An evict pool waits at most its eviction wait for an evictable resident.
        cap = Process.clock_gettime(Process::CLOCK_MONOTONIC) + wait / 1000.0
        deadline = deadline ? [deadline, cap].min : cap
      end
      hopeless = false
      # Every call after the first continues the wait: the request's refusal was
      # counted by the first (one request, however many slices), and once a call has
      # passed the tenant's rates (its rule was the pool's) the request has its token.
      continued = 0
      loop do
        left = deadline ? Fairshm.left_ms(deadline) : WAIT_SLICE_MS
        last = hopeless || (deadline && left <= WAIT_SLICE_MS)
        rc = Native::ACQUIRE.call(@handle, p, t, units, hold_ms, [left, WAIT_SLICE_MS].min,
                                  (last ? 0 : Native::WAIT_SLICE) | continued, c, lease, refusal)
        continued = Native::WAIT_CONTINUED | (continued & Native::WAIT_RATED)
        if rc.zero?
          got = Lease.new(self, lease[0, 8].unpack1("Q"), pool_name.to_s, tenant_name.to_s, units)
          return block ? Fairshm.holding(got, &block) : got
        end
        reason = refusal[0, 4].unpack1("L")
        continued |= Native::WAIT_RATED if rc == 1 && ![5, 6].include?(refusal[4, 4].unpack1("L"))
        if rc == 1 && hopeless && ![4, 5, 6].include?(reason) && Fairshm.left_ms(deadline).positive?
          hopeless = false # its rates changed meanwhile: wait on
          next
        end
        if rc == 1 && !last && reason != 4
          # A slice ended: interrupts land here. Refused by the tenant's rates, with the
          # next token after the deadline: the last call, which says so at once.
          rule = refusal[4, 4].unpack1("L")
          retry_ms = refusal[Native::REFUSAL_RETRY_AFTER_AT, 8].unpack1("Q")
          hopeless = [5, 6].include?(rule) && deadline && retry_ms > Fairshm.left_ms(deadline)
          next
        end

        if rc == 1
          # The library measured its own slice; the wait was every slice.
          waited = ((Process.clock_gettime(Process::CLOCK_MONOTONIC) - start) * 1000).to_i
          at = Native::REFUSAL_WAITED_AT
          refusal[at, 8] = [[refusal[at, 8].unpack1("Q"), waited].max].pack("Q")
        end
        raise refused_or_raise(rc, refusal, pool_name, tenant_name)
      end
    end

    # Runs the block holding a permit (try_acquire without +timeout+, else acquire),
    # and releases it when the block ends, however it ends. Raises Refused.
    def permit(pool_name, tenant_name, units: 1, hold_ms: 0, timeout: nil, &block)
      raise ArgumentError, "permit needs a block (try_acquire returns a lease)" unless block

      if timeout
        acquire(pool_name, tenant_name, units: units, hold_ms: hold_ms, timeout: timeout, &block)
      else
        try_acquire(pool_name, tenant_name, units: units, hold_ms: hold_ms, &block)
      end
    end

    # Releases a lease by its id, at +now_ms+ (nil: the library's clock).
    def release(lease_id, now_ms: nil)
      Fairshm.check_int("lease_id", lease_id, U64_MAX)
      rc = if now_ms.nil?
             Native::RELEASE.call(@handle, lease_id)
           else
             Native::RELEASE_AT.call(@handle, lease_id, Fairshm.now_arg(now_ms))
           end
      raise_for(rc) unless rc.zero?
    end

    # The whole table as a Hash (pools, tenants, leases, processes), with activity
    # judged at +now_ms+ (nil: read now, on the library's clock).
    def stats(now_ms: nil)
      raise_for(Native::E_INVALID_REQUEST) if closed?
      return Fairshm.take_json(Native::STATS_JSON.call(@handle), -17) if now_ms.nil?

      Fairshm.take_json(Native::STATS_JSON_AT.call(@handle, Fairshm.now_arg(now_ms)), -17)
    end

    # Returns the permits of dead processes now; the number reaped.
    def reap_dead
      rc = Native::REAP_DEAD.call(@handle)
      raise_for(rc) if rc.negative?
      rc
    end

    # Sets the tenant's rates (0: unbounded), for every process at once: over its
    # request rate an acquire raises Refused (rate_limited), in work debt work_debt,
    # before any pool is touched.
    def set_rates(tenant_name, requests_per_s: 0, work_units_per_s: 0)
      Fairshm.check_int("requests_per_s", requests_per_s, U32_MAX)
      Fairshm.check_int("work_units_per_s", work_units_per_s, U32_MAX)
      rc = Native::SET_RATES.call(@handle, tenant(tenant_name), requests_per_s, work_units_per_s)
      raise_for(rc) unless rc.zero?
    end

    # [requests_per_s, work_units_per_s] of the tenant; 0 is unbounded, as are the rates
    # of a tenant not seen yet. Claims nothing (an observer reads them too).
    def rates(tenant_name)
      t = @tenants[tenant_name]
      unless t
        found = Fiddle::Pointer.malloc(4, Fiddle::RUBY_FREE)
        rc = Native::FIND_TENANT.call(@handle, Fairshm.c_name(tenant_name, "tenant", Native::E_INVALID_TENANT),
                                      found)
        return [0, 0] if rc == Native::ABSENT

        raise_for(rc) unless rc.zero?
        t = @tenants[tenant_name] = found[0, 4].unpack1("L")
      end
      out = Fiddle::Pointer.malloc(8, Fiddle::RUBY_FREE)
      rc = Native::RATES.call(@handle, t, out, out + 4)
      raise_for(rc) unless rc.zero?
      out[0, 8].unpack("LL")
    end

    # A guaranteed pool (seed 001) of this table, by name.
    def guaranteed(name)
      Guaranteed.new(self, name)
    end

    # Charges units of work done for the tenant (after the work). Returns the ms until
    # it is out of the debt this leaves (0: none). now_ms: nil for the library's clock,
    # else an explicit time.
    def charge(tenant_name, units, now_ms: nil)
      Fairshm.check_int("units", units, U64_MAX)
      now = Fairshm.now_arg(now_ms)
      out = Fiddle::Pointer.malloc(8, Fiddle::RUBY_FREE)
      rc = Native::CHARGE.call(@handle, tenant(tenant_name), units, now, out)
      raise_for(rc) unless rc.zero?
      out[0, 8].unpack1("Q")
    end

    private

    # The C ABI's explicit now_ms of an acquire, or nil for the library's clock; a wait
    # measured on the real clock (+queued_us+) does not go with an explicit time.
    def explicit_now(queued_us, now_ms)
      return nil if now_ms.nil?
      unless queued_us.nil?
        raise ArgumentError, "queued_us is a wait measured on the real clock; it does not go with an " \
                             "explicit now_ms (note it with note_queue, on the library's clock)"
      end

      Fairshm.now_arg(now_ms)
    end

    # The handle of a request's tenant whose name this table has not resolved yet: it
    # is resolved (claiming its directory slot, kept for the segment's life) only for a
    # request that can be granted some day; more units than the pool can ever hold
    # raise first and claim nothing.
    def request_tenant(name, p, units)
      check_units_of(p, units)
      tenant(name)
    end

    def check_units_of(pool_handle, units)
      rc = Native::CHECK_UNITS.call(@handle, pool_handle, units)
      raise_for(rc) unless rc.zero?
    end

    def resolve(fn, name)
      out = Fiddle::Pointer.malloc(4, Fiddle::RUBY_FREE)
      rc = fn.call(@handle, name, out)
      raise_for(rc) unless rc.zero?
      out[0, 4].unpack1("L")
    end

    # For a nonzero +rc+: the Refused that the refusal buffer holds (a copy: the buffer
    # is reused), returned for the caller to return or raise; any other code raises.
    def refused_or_raise(rc, refusal, pool_name, tenant_name)
      return Refused.new(self, refusal[0, Native::REFUSAL_SIZE], pool_name, tenant_name) if rc == 1

      raise_for(rc)
    end

    def not_copied_instead
      "open the table by its name where it is needed"
    end
  end

  # Yields +lease+ and releases it when the block ends, however it ends; the block's
  # value. A block that released the lease itself (an early release) leaves nothing to
  # release, and the block's end raises nothing (so an exception of the block's own is
  # the one that propagates); a second release in the block raises AlreadyReleased.
  def self.holding(lease)
    yield lease
  ensure
    begin
      lease.release
    rescue AlreadyReleased
      nil # released in the block already: nothing is held
    end
  end

  # Each thread's (each fiber's) out-parameters: a lease id and a refusal.
  def self.buffers
    Thread.current[:fairshm_buffers] ||= [Fiddle::Pointer.malloc(8, Fiddle::RUBY_FREE),
                                          Fiddle::Pointer.malloc(Native::REFUSAL_SIZE, Fiddle::RUBY_FREE)]
  end
end

require_relative "fairshm/guaranteed"
