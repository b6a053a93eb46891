# frozen_string_literal: true

require "json"

# The C ABI's codes as Ruby sees them: an exception class per error code, the refusal
# reasons' names, and the checks that refuse a bad argument before it reaches the
# library (a name a C string cannot carry, an integer Fiddle would wrap).
module Fairshm
  # Something wrong with the request or the table (not a refusal). +code+ is the C
  # ABI's (negative) code, +kind+ its stable name.
  class Error < StandardError
    attr_reader :code, :kind

    def initialize(code, message)
      super(message)
      @code = code
      @kind = Native.code_name(code)
    end
  end

  # One subclass per code of the C ABI, named as the Rust Error variant (Io is IoError
  # here), so a caller can rescue exactly what it can handle.
  class InvalidName < Error; end          # -1: a segment name that cannot be used
  class InvalidConfig < Error; end        # -2: a config that breaks a rule (the field is named)
  class NotFound < Error; end             # -3: no segment of that name
  class AlreadyExists < Error; end        # -4: a segment of that name exists already
  class Truncated < Error; end            # -5: the file is shorter than its layout needs
  class BadMagic < Error; end             # -6: not a fairshm segment
  class VersionMismatch < Error; end      # -7: another layout version: shmtool clean it
  class NotReady < Error; end             # -8: its creator never finished making it
  class WrongOwner < Error; end           # -9: the segment belongs to another user
  class ConfigMismatch < Error; end       # -10: created with another config (what differs is said)
  class Corrupt < Error; end              # -11: shared memory that breaks an invariant
  class UnknownPool < Error; end          # -12: no pool of that name in this table
  class InvalidTenant < Error; end        # -13: a tenant name that cannot be used
  class TenantTableFull < Error; end      # -14: no room in the tenant directory
  class LeaseTableFull < Error; end       # -15: all of this process's lease slots are in use
  class ProcessTableFull < Error; end     # -16: no process slot free or reapable
  class InvalidRequest < Error; end       # -17: 0 units, a closed table, ...
  class UnitsExceedCapacity < Error; end  # -18: more units than the pool can ever hold
  class AlreadyReleased < Error; end      # -19: a lease released again
  class NotOwner < Error; end             # -20: a lease of another process
  class IoError < Error; end              # -21: a system call on the segment failed
  class ReadOnly < Error; end             # -22: a change asked of an observer's open
  class TenantBusy < Error; end           # -23: a tenant slot still being written; retry
  class BadFile < Error; end              # -24: a path fairshm may not trust
  class PoolLeasesFull < Error; end       # -25: a guaranteed pool holds all the leases it can
  # -26: a resident lease (of an evict pool) was revoked to make room: put the object to
  # sleep and release the lease.
  class Revoked < Error; end
  # -27: a call on a lease of a pool that does not evict, or an end without a begin.
  class NotResident < Error; end
  class ForeignPidNamespace < Error; end  # -28: made in another pid namespace: observe it

  ERRORS = [InvalidName, InvalidConfig, NotFound, AlreadyExists, Truncated, BadMagic,
            VersionMismatch, NotReady, WrongOwner, ConfigMismatch, Corrupt, UnknownPool,
            InvalidTenant, TenantTableFull, LeaseTableFull, ProcessTableFull, InvalidRequest,
            UnitsExceedCapacity, AlreadyReleased, NotOwner, IoError, ReadOnly, TenantBusy,
            BadFile, PoolLeasesFull, Revoked, NotResident, ForeignPidNamespace]
           .each_with_index.to_h { |c, i| [-(i + 1), c] }.freeze
  REASONS = { 1 => "pool_full", 2 => "over_share", 3 => "timed_out", 4 => "cancelled",
              5 => "rate_limited", 6 => "work_debt", 7 => "hold_exceeds_reclaim_horizon",
              8 => "guarantee_on_loan", 9 => "guarantee_exhausted",
              10 => "too_many_residents" }.freeze

  def self.raise_code(code)
    raise ERRORS.fetch(code, Error).new(code, Native.last_error)
  end

  U32_MAX = 0xFFFF_FFFF
  U64_MAX = 0xFFFF_FFFF_FFFF_FFFF

  # A now_ms meaning the library's clock (FAIRSHM_NOW); every other value, 0
  # included, is an explicit time.
  NOW = U64_MAX

  # A now_ms argument for the C ABI: nil is the library's clock (NOW), any other
  # Integer an explicit time in ms, 0 included (so a trace that starts at t = 0
  # replays as it does in Rust).
  def self.now_arg(now_ms)
    return NOW if now_ms.nil?

    check_int("now_ms", now_ms, U64_MAX - 1)
    now_ms
  end

  # Raises ArgumentError unless +value+ is an Integer in 0..+max+, naming +name+ and its
  # range (from +least+): Fiddle would pass -1 as 4294967295 (and refuses a too large
  # one without naming it).
  def self.check_int(name, value, max, least: 0)
    return if value.is_a?(Integer) && value >= 0 && value <= max

    raise ArgumentError, "#{name} must be an integer from #{least} to #{max}, not #{value.inspect}"
  end

  # +name+ as the C ABI takes it (a NUL-terminated UTF-8 string; a Symbol is its name,
  # a String in another encoding its UTF-8 spelling, raw bytes are passed as they are).
  # One that a C string cannot carry, or that is not or has no UTF-8, is refused as the
  # library refuses a bad name (error +code+), never cut at its NUL: "a\0b" would
  # otherwise be tenant "a".
  def self.c_name(name, what, code)
    name = name.to_s if name.is_a?(Symbol)
    raise TypeError, "a #{what} name is a String, not #{name.inspect}" unless name.is_a?(String)
    name = utf8(name, what, code)
    bad_name(name, what, code, "contains a NUL byte") if name.include?("\0")
    name
  end

  # Raises the library's error +code+ for a bad +what+ name, saying +why+.
  def self.bad_name(name, what, code, why)
    raise ERRORS.fetch(code, Error).new(code, "invalid #{what} name #{name.inspect}: #{why}")
  end

  # Names reach the library as UTF-8 bytes: a String in another encoding is
  # transcoded; UTF-8, ASCII and binary strings (what Rack servers give header values
  # as) are passed as they are, if their bytes are UTF-8.
  def self.utf8(name, what, code)
    if [Encoding::UTF_8, Encoding::US_ASCII, Encoding::BINARY].include?(name.encoding)
      return name if name.dup.force_encoding(Encoding::UTF_8).valid_encoding?

      bad_name(name, what, code, "not UTF-8")
    end
    name.encode(Encoding::UTF_8)
  rescue EncodingError => e
    bad_name(name, what, code, "no UTF-8 spelling (#{e.message})")
  end

  # The monotonic instant a wait of +timeout+ seconds ends: nil (no end) for nil or
  # infinity; a negative timeout tries once; NaN is refused.
  def self.deadline(timeout)
    return nil if timeout.nil?
    raise TypeError, "timeout must be a number of seconds or nil, not #{timeout.inspect}" unless timeout.is_a?(Numeric)
    return nil if timeout == Float::INFINITY
    raise ArgumentError, "timeout is NaN" if timeout.respond_to?(:nan?) && timeout.nan?

    Process.clock_gettime(Process::CLOCK_MONOTONIC) + [timeout, 0].max
  end

  # Whole ms from now to +deadline+ (a monotonic instant), rounded up: a wait of that
  # long ends at the deadline or after it, never before (rounded down, the last slice
  # of a wait ended up to 1 ms early, and a wait of 50 ms was over after 49).
  def self.left_ms(deadline)
    [((deadline - Process.clock_gettime(Process::CLOCK_MONOTONIC)) * 1000).ceil, 0].max
  end

  def self.check_request(units, hold_ms)
    # Units run from 1, as the message says; 0 goes on to the library, whose typed
    # InvalidRequest says that 0 units were asked for.
    check_int("units", units, U32_MAX, least: 1)
    check_int("hold_ms", hold_ms, U64_MAX)
  end

  # Parses a JSON string the library returned and frees it; a null one raises with
  # +code+ and the library's last error.
  def self.take_json(ptr, code)
    Fairshm.raise_code(code) if ptr.null?

    begin
      JSON.parse(ptr.to_s)
    ensure
      Native::STRING_FREE.call(ptr)
    end
  end
end
