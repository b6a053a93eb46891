# frozen_string_literal: true

require "fiddle"

module Fairshm
  # fairshm's C ABI through Fiddle (include/fairshm.h): the library and its functions.
  # Quick calls keep the GVL (releasing it costs more than the call); the blocking
  # acquire releases it, so other threads run while it waits.
  module Native
    def self.library_path
      env = ENV["FAIRSHM_LIB"]
      return env if env && !env.empty?

      [File.expand_path("libfairshm.so", __dir__),
       File.expand_path("../../../../target/release/libfairshm.so", __dir__)].find { |p| File.exist?(p) } or
        raise LoadError, "fairshm: libfairshm.so not found (gem install it, or set FAIRSHM_LIB)"
    end

    LIB = Fiddle.dlopen(library_path)

    # The error codes the binding raises itself (include/fairshm.h's FAIRSHM_E_*).
    E_INVALID_NAME = -1
    E_INVALID_CONFIG = -2
    E_UNKNOWN_POOL = -12
    E_INVALID_TENANT = -13
    E_INVALID_REQUEST = -17
    # fairshm_find_tenant: no tenant of that name yet (FAIRSHM_ABSENT).
    ABSENT = 1

    P = Fiddle::TYPE_VOIDP
    I32 = Fiddle::TYPE_INT32_T
    I64 = Fiddle::TYPE_INT64_T
    U32 = -Fiddle::TYPE_INT32_T
    U64 = -Fiddle::TYPE_INT64_T
    SZ = Fiddle::TYPE_SIZE_T
    VOID = Fiddle::TYPE_VOID

    def self.fn(name, args, ret, need_gvl: true)
      Fiddle::Function.new(LIB[name], args, ret, need_gvl: need_gvl)
    end

    OPEN = fn("fairshm_open", [P, U32, P, U32, U32, P], I32, need_gvl: false)
    CLOSE = fn("fairshm_close", [P], VOID)
    UNLINK = fn("fairshm_unlink", [P], I32)
    LAST_ERROR = fn("fairshm_last_error", [], P)
    CODE_NAME = fn("fairshm_code_name", [I32], P)
    STRING_FREE = fn("fairshm_string_free", [P], VOID)
    POOL = fn("fairshm_pool", [P, P, P], I32)
    TENANT = fn("fairshm_tenant", [P, P, P], I32)
    FIND_TENANT = fn("fairshm_find_tenant", [P, P, P], I32)
    REGISTER = fn("fairshm_register", [P], I32)
    CHECK_UNITS = fn("fairshm_check_units", [P, U32, U32], I32)
    TRY_ACQUIRE = fn("fairshm_try_acquire", [P, U32, U32, U32, U64, P, P], I32)
    ACQUIRE = fn("fairshm_acquire", [P, U32, U32, U32, U64, U64, U32, P, P, P], I32, need_gvl: false)
    RELEASE = fn("fairshm_release", [P, U64], I32)
    TRY_ACQUIRE_AT = fn("fairshm_try_acquire_at", [P, U32, U32, U32, U64, U64, P, P], I32)
    RELEASE_AT = fn("fairshm_release_at", [P, U64, U64], I32)
    NOTE_QUEUE = fn("fairshm_note_queue", [P, U32, U64], I32)
    TRY_ACQUIRE_QUEUED = fn("fairshm_try_acquire_queued", [P, U32, U32, U32, U64, U64, P, P], I32)
    BEGIN_CALL = fn("fairshm_begin_call", [P, U64, U64], I32)
    END_CALL = fn("fairshm_end_call", [P, U64, U64], I32)
    RESIDENT_STATUS = fn("fairshm_resident_status", [P, U64, P], I32)
    WAIT_REVOKED = fn("fairshm_wait_revoked", [P, U64, U64, P], I32, need_gvl: false)
    EVICT_WAIT_MS = fn("fairshm_evict_wait_ms", [P, U32, P], I32)
    EXPLAIN = fn("fairshm_explain", [P, P, P, SZ], I64)
    SHARE = fn("fairshm_share", [P], Fiddle::TYPE_DOUBLE)
    STATS_JSON = fn("fairshm_stats_json", [P], P)
    STATS_JSON_AT = fn("fairshm_stats_json_at", [P, U64], P)
    REAP_DEAD = fn("fairshm_reap_dead", [P], I32)
    SET_RATES = fn("fairshm_set_rates", [P, U32, U32, U32], I32)
    RATES = fn("fairshm_rates", [P, U32, P, P], I32)
    CHARGE = fn("fairshm_charge", [P, U32, U64, U64, P], I32)
    CANCEL_NEW = fn("fairshm_cancel_new", [], P)
    CANCEL_FIRE = fn("fairshm_cancel_fire", [P], VOID)
    CANCEL_RESET = fn("fairshm_cancel_reset", [P], VOID)
    # A C bool: one byte (unsigned char), 0 or 1.
    CANCEL_FIRED = fn("fairshm_cancel_fired", [P], -Fiddle::TYPE_CHAR)
    CANCEL_FREE = fn("fairshm_cancel_free", [P], VOID)
    NOP_ACQUIRE = fn("fairshm_nop_acquire", [P, U32, U32, U32, U64, P, P], I32)
    NOP_RELEASE = fn("fairshm_nop_release", [P, U64], I32)
    G_POOL = fn("fairshm_guaranteed_pool", [P, P, P], I32)
    G_TENANT = fn("fairshm_guaranteed_tenant", [P, U32, P, P], I32)
    G_ACQUIRE = fn("fairshm_guaranteed_acquire", [P, U32, U32, U64, U64, U64, P, P, P, SZ], I32)
    G_RELEASE = fn("fairshm_guaranteed_release", [P, U64, U64], I32)
    G_WAKE_SEEN_AS = fn("fairshm_guaranteed_wake_seen_as", [P, U32, U32, P], I32)
    G_SLEEP_AS = fn("fairshm_guaranteed_sleep_as", [P, U32, U32, U64, P, U64, P, P], I32, need_gvl: false)
    G_WAIT_END = fn("fairshm_guaranteed_wait_end", [P, U32], I32)
    G_STATS_JSON = fn("fairshm_guaranteed_stats_json", [P, U32, U64], P)

    # fairshm_guaranteed_refusal: reason, has_retry_after, then u64s, n_blocking,
    # why_len (the explanation's full length), and 8 blocking lease ids.
    G_REFUSAL_FIELDS = %i[reason has_retry_after retry_after_ms units guarantee own_free lent need
                          lendable seq n_blocking why_len].freeze
    G_REFUSAL_PACK = "LLQQQQQQQQLL"
    # The fields, then 8 blocking lease ids (u64) and their 8 borrowers (u32).
    G_REFUSAL_SIZE = 8 + 8 * 8 + 8 + 8 * 8 + 4 * 8
    # Bytes that always hold a guaranteed refusal's whole explanation
    # (FAIRSHM_GUARANTEED_WHY_MAX).
    G_WHY_SIZE = 4096

    OPEN_EXISTING = 0
    CREATE = 1
    OPEN_OR_CREATE = 2
    OBSERVER = 3
    CONFIG_NONE = 0
    CONFIG_JSON = 1
    CONFIG_TOML = 2
    CONFIG_FILE = 3
    WAIT_SLICE = 1
    WAIT_CONTINUED = 2
    WAIT_RATED = 4

    # fairshm_refusal: reason, rule, units, queued, retry_after_ms, in_use, held,
    # capacity, floor, weight, short_units, active_weight, waited_ms, pool, tenant,
    # interval_us, queue_stretch_pct, server_queue_us, rate_per_s, reserved.
    REFUSAL_SIZE = 96
    REFUSAL_PACK = "L4QL6QQL2QL4"
    # Byte offset of retry_after_ms in REFUSAL_PACK (after its four u32s); reason is at 0.
    REFUSAL_RETRY_AFTER_AT = 16
    # Byte offset of waited_ms (after retry_after_ms, six u32s and active_weight).
    REFUSAL_WAITED_AT = 56
    REFUSAL_FIELDS = %i[reason rule units queued retry_after_ms in_use held capacity floor weight
                        short_units active_weight waited_ms pool tenant interval_us
                        queue_stretch_pct server_queue_us rate_per_s reserved].freeze

    def self.last_error
      LAST_ERROR.call.to_s.force_encoding(Encoding::UTF_8)
    end

    def self.code_name(code)
      CODE_NAME.call(code).to_s
    end
  end
end
