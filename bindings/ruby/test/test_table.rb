# frozen_string_literal: true

require_relative "helper"
require "tmpdir"

class TestTable < Minitest::Test
  include FairshmTest

  # A master that sets its tenants' rates at boot (before it forks), or an admin script,
  # claims tenant names: it registers, but as no worker of a per_worker pool.
  def test_setting_rates_makes_no_worker_until_the_process_acquires
    name = FairshmTest.next_name
    t = Fairshm::Table.create(name, { "pools" => [{ "name" => "db", "per_worker" => { "quota" => 1.0 } }] })
    t.set_rates("acme", requests_per_s: 5)
    t.charge("globex", 0)
    st = t.stats
    assert_equal 0, st["pools"][0]["per_worker"]["workers"]
    assert_equal [true], st["processes"].map { |p| p["tool"] }
    t.try_acquire("db", "acme").release
    st = t.stats
    assert_equal [1, 1], [st["pools"][0]["per_worker"]["workers"], st["pools"][0]["capacity"]]
    assert_equal [false], st["processes"].map { |p| p["tool"] }, "a worker now, in the same slot"
  ensure
    t&.close
    Fairshm::Table.unlink(name) if t
  end

  def test_grant_release_and_refusal_facts
    a = @table.try_acquire("requests", "acme", hold_ms: 5)
    b = @table.try_acquire("requests", "acme", units: 3)
    r = assert_raises(Fairshm::Refused) { @table.try_acquire("requests", "acme") }
    assert_equal "over_share", r.reason
    assert_equal [4, 4, 4, 1, 1], [r.in_use, r.held, r.capacity, r.floor, r.units]
    assert_operator r.retry_after_ms, :>=, 1
    assert_equal 4.0, r.share # alone: the whole pool
    assert_includes r.explanation, '"acme"'
    assert_equal "over_share", r.to_h[:reason]
    a.release
    b.release
    assert_equal 0, in_use
  end

  def test_a_table_and_a_lease_say_what_they_are
    lease = @table.try_acquire("requests", "acme")
    assert_equal format("#<Fairshm::Lease %#x of table %p>", lease.id, @table.name), lease.inspect
    assert_equal "#<Fairshm::Table #{@table.name.inspect} open>", @table.inspect
    lease.release
    @table.close
    assert_equal "#<Fairshm::Table #{@table.name.inspect} closed>", @table.inspect
  end

  def test_a_lease_says_what_it_holds
    lease = @table.try_acquire("requests", "acme", units: 2, hold_ms: 5)
    assert_equal ["requests", "acme", 2], [lease.pool, lease.tenant, lease.units]
    lease.release
    lease = @table.acquire("requests", "globex", timeout: 1)
    assert_equal ["requests", "globex", 1], [lease.pool, lease.tenant, lease.units]
    lease.release
    lease = @table.attempt(:requests, :acme, units: 3)
    assert_equal ["requests", "acme", 3], [lease.pool, lease.tenant, lease.units]
    lease.release
  end

  # A refusal's hash, asked for first (it was built from facts unpacked only once a fact
  # was read), and a refusal and an error through Marshal, as the parallel gem sends
  # back what a forked worker raised: the copy needs no table.
  def test_a_fresh_refusal_has_its_hash_and_survives_marshal
    fill
    r = assert_raises(Fairshm::Refused) { @table.try_acquire("requests", "acme") }
    h = r.to_h
    assert_equal ["over_share", 4, 4, "acme"], [h[:reason], h[:in_use], h[:held], h[:tenant]]
    copy = Marshal.load(Marshal.dump(r))
    @table.close
    assert_instance_of Fairshm::Refused, copy
    assert_equal [r.reason, r.code, r.retry_after_ms, "requests", "acme"],
                 [copy.reason, copy.code, copy.retry_after_ms, copy.pool, copy.tenant]
    assert_equal [4, 4, 4, 1, 1, 4.0], [copy.in_use, copy.held, copy.capacity, copy.floor, copy.units, copy.share]
    assert_equal r.explanation, copy.explanation
    assert_equal r.message, copy.message
    assert_equal h, copy.to_h
    assert_equal r.backtrace, copy.backtrace
    e = assert_raises(Fairshm::NotFound) { Fairshm::Table.open("#{@name}-none") }
    e2 = Marshal.load(Marshal.dump(e))
    assert_equal [Fairshm::NotFound, e.code, "not_found", e.message], [e2.class, e2.code, e2.kind, e2.message]
  end

  # A table dropped without #close is closed when collected, as in Python: each kept
  # its mapping and its anchor thread until the process ended (200 tables, 200 threads).
  def test_a_table_dropped_without_close_is_closed_when_collected
    threads = -> { Dir["/proc/self/task/*"].size }
    before = threads.call
    open_and_drop = -> { 20.times { Fairshm::Table.open(@name).try_acquire("requests", "acme").release } }
    open_and_drop.call
    GC.start
    left = threads.call - before
    assert_operator left, :<, 10, "#{left} anchor threads of dropped tables still running"
    assert_equal 0, in_use
  end

  # The race where the Refused reads the handle, another thread closes the table, and
  # the explanation's call then finds it closed: the numbers, not an error out of
  # #message. Played here by a close in between, where that thread's would come: the
  # table says it is open to the check, and closes as its handle is read for the call.
  def test_a_refusal_explained_just_after_another_thread_closed_the_table
    fill
    r = @table.attempt("requests", "globex")
    table = @table
    table.define_singleton_method(:handle) do
      h = @handle
      close
      h
    end
    assert_match(/\Apool_full: .*"globex".*closed/, r.message)
  end

  # A copy would share the native pointer: closed (or freed) through one, used through
  # the other. Refused, naming what to do instead; the original stays usable.
  def test_a_table_or_a_cancel_is_not_copied_with_its_native_handle
    c = Fairshm::Cancel.new
    [[@table, "open the table by its name"], [c, "make a new one"]].each do |obj, instead|
      [->(o) { o.dup }, ->(o) { o.clone }, ->(o) { Marshal.dump(o) }].each do |copy|
        e = assert_raises(TypeError) { copy.call(obj) }
        assert_match(/cannot be (copied|marshaled): it holds this process's native handle/, e.message)
        assert_includes e.message, instead
      end
    end
    lease = @table.try_acquire("requests", "acme")
    assert_raises(TypeError) { Marshal.dump(lease) } # it names its table
    lease.release
    c.cancel
    assert_equal 0, in_use
  end

  # A timeout that is no number was a comparison's ArgumentError, a cancel that is no
  # Cancel a NoMethodError, and a lease id of -1 or 1.5 reached the library as
  # 4294967295/4294967295 or lease 1.
  def test_arguments_of_the_wrong_type_are_refused_naming_them
    e = assert_raises(TypeError) { @table.acquire("requests", "acme", timeout: "1") }
    assert_includes e.message, 'timeout must be a number of seconds or nil, not "1"'
    e = assert_raises(TypeError) { @table.acquire("requests", "acme", timeout: 0.01, cancel: 5) }
    assert_includes e.message, "cancel must be a Fairshm::Cancel or nil, not 5"
    [-1, 1.5, "x", nil].each do |id|
      e = assert_raises(ArgumentError) { @table.release(id) }
      assert_includes e.message, "lease_id must be an integer from 0 to"
    end
    assert_equal 0, in_use
    @table.acquire("requests", "acme", timeout: Rational(1, 100)).release # any number of seconds
  end

  # `attempt` returns what `try_acquire` raises, with the same facts (the two a 429
  # needs read directly, the rest unpacked when first asked for).
  def test_attempt_returns_the_refusal_instead_of_raising_it
    a = @table.attempt("requests", "acme", units: 4)
    assert_instance_of Fairshm::Lease, a
    r = @table.attempt("requests", "acme")
    assert_instance_of Fairshm::Refused, r
    assert_nil r.backtrace, "a returned refusal was never raised"
    raised = assert_raises(Fairshm::Refused) { @table.try_acquire("requests", "acme") }
    assert_equal [raised.reason, raised.code], [r.reason, r.code]
    assert_equal [r.code, r.retry_after_ms], [r.facts[:reason], r.facts[:retry_after_ms]]
    assert_equal [4, 4, 4, 1], [r.in_use, r.held, r.capacity, r.units]
    assert_operator r.retry_after_ms, :>=, 1
    assert_raises(Fairshm::UnknownPool) { @table.attempt("nope", "acme") }
    a.release
    assert_equal 0, in_use
  end

  def test_rates_refuse_before_the_pool_and_debt_is_charged
    assert_equal [0, 0], @table.rates("acme")
    @table.set_rates("acme", requests_per_s: 2)
    assert_equal [2, 0], @table.rates("acme")
    2.times { @table.try_acquire("requests", "acme").release }
    r = assert_raises(Fairshm::Refused) { @table.try_acquire("requests", "acme") }
    assert_equal ["rate_limited", 0], [r.reason, r.in_use]
    assert_includes 400..500, r.retry_after_ms
    assert_includes r.explanation, "request rate of 2 per second"
    assert_equal [2, 2], [r.rate_per_s, r.to_h[:rate_per_s]]
    refute r.to_h.key?(:reserved)
    node = @table.stats["tenants"].find { |t| t["name"] == "acme" }
    assert_equal 1, node["rates"]["rate_limited"]
    @table.set_rates("acme", work_units_per_s: 100)
    assert_includes 1400..1500, @table.charge("acme", 250)
    r = assert_raises(Fairshm::Refused) { @table.try_acquire("requests", "acme") }
    assert_equal ["work_debt", 100], [r.reason, r.rate_per_s]
    assert_includes r.explanation, "rate of 100 units per second"
    @table.set_rates("globex", work_units_per_s: 1000)
    assert_equal 2000, @table.charge("globex", 3000, now_ms: 10_000_000)
  end

  def test_permit_with_a_block_releases_however_the_block_ends
    @table.permit("requests", "acme", units: 2) { assert_equal 2, in_use }
    assert_equal 0, in_use
    assert_raises(RuntimeError) { @table.permit("requests", "acme") { raise "boom" } }
    assert_equal 0, in_use
  end

  # An early release in the block: its end releases nothing more and raises nothing,
  # so an exception of the block's own is the one that propagates.
  def test_a_lease_released_in_its_block_is_not_released_again_when_it_ends
    @table.permit("requests", "acme") { |l| l.release }
    assert_equal 0, in_use
    e = assert_raises(RuntimeError) do
      @table.permit("requests", "acme") do |l|
        l.release
        raise "the block's own"
      end
    end
    assert_equal "the block's own", e.message
    # A second release in the block still says so.
    assert_raises(Fairshm::AlreadyReleased) { @table.permit("requests", "acme") { |l| 2.times { l.release } } }
    assert_equal 0, in_use
  end

  # A block given to try_acquire or acquire holds the lease for the block (it was
  # ignored, and the lease stayed held), as guaranteed pools' acquire does.
  def test_try_acquire_and_acquire_with_a_block_release_when_it_ends
    assert_equal :done, @table.try_acquire("requests", "acme", units: 2) { |l|
      assert_kind_of Fairshm::Lease, l
      assert_equal 2, in_use
      :done
    }
    assert_equal 0, in_use
    assert_equal 7, @table.acquire("requests", "acme", timeout: 1) { assert_equal 1, in_use; 7 }
    assert_equal 0, in_use
    assert_raises(RuntimeError) { @table.acquire("requests", "acme", timeout: 1) { raise "boom" } }
    assert_equal 0, in_use
    lease = @table.try_acquire("requests", "acme")
    assert_equal 1, in_use
    lease.release
    e = assert_raises(ArgumentError) { @table.permit("requests", "acme") }
    assert_match(/needs a block/, e.message)
    assert_equal 0, in_use
  end

  # A tenant's directory slot is kept for the segment's life: a request for more than
  # its pool can ever hold (a fixed pool's capacity; a per_worker pool's tickets with a
  # worker in every process slot) raises before its new name claims one, through a try
  # and a wait alike. What more live workers would grant claims the name.
  def test_a_request_that_can_never_be_granted_claims_no_tenant_slot
    cfg = { "max_processes" => 4, "pools" => [{ "name" => "requests", "capacity" => 4 },
                                              { "name" => "db", "per_worker" => { "quota" => 1.0, "min_tickets" => 0 } }] }
    name = FairshmTest.next_name
    t = Fairshm::Table.create(name, cfg)
    slots = -> { t.stats["tables"]["tenants"]["used"] }
    %w[requests db].each do |pool|
      assert_raises(Fairshm::UnitsExceedCapacity) { t.try_acquire(pool, "newcomer", units: 5) }
      assert_raises(Fairshm::UnitsExceedCapacity) { t.acquire(pool, "newcomer", units: 5, timeout: 0.01) }
    end
    assert_equal 0, slots.call
    e = assert_raises(Fairshm::UnitsExceedCapacity) { t.try_acquire("db", "newcomer", units: 4) }
    assert_match(/once more workers have registered/, e.message)
    assert_equal 1, slots.call
  ensure
    t&.close
    Fairshm::Table.unlink(name) if t
  end

  def test_errors_are_typed_and_named
    lease = @table.try_acquire("requests", "acme")
    lease.release
    e = assert_raises(Fairshm::AlreadyReleased) { lease.release }
    assert_equal ["already_released", -19], [e.kind, e.code]
    e = assert_raises(Fairshm::UnknownPool) { @table.try_acquire("nope", "acme") }
    assert_includes e.message, "requests"
    e = assert_raises(Fairshm::UnitsExceedCapacity) { @table.try_acquire("requests", "acme", units: 5) }
    assert_equal "units_exceed_capacity", e.kind
    assert_raises(Fairshm::InvalidRequest) { @table.try_acquire("requests", "acme", units: 0) }
    assert_raises(Fairshm::InvalidTenant) { @table.try_acquire("requests", "") }
    assert_raises(Fairshm::AlreadyExists) { Fairshm::Table.create(@name, { "pools" => [{ "name" => "r", "capacity" => 1 }] }) }
    assert_raises(Fairshm::NotFound) { Fairshm::Table.open("#{@name}-missing") }
    e = assert_raises(Fairshm::InvalidConfig) do
      Fairshm::Table.create("#{@name}-bad", { "pools" => [{ "name" => "r", "capacity" => 0 }] })
    end
    assert_includes e.message, "capacity"
    assert_raises(TypeError) { Fairshm::Table.create("#{@name}-bad", 42) }
    # A per_worker quota out of (0, 1] says which side; a NaN one is named before JSON.
    [[0, "0 or less"], [-0.5, "0 or less"], [1.5, "above 1"], [Float::NAN, "NaN"],
     [Float::INFINITY, "infinite"]].each do |quota, why|
      cfg = { "pools" => [{ "name" => "db", "per_worker" => { "quota" => quota, "min_tickets" => 1 } }] }
      e = assert_raises(Fairshm::InvalidConfig) { Fairshm::Table.create("#{@name}-bad", cfg) }
      assert_includes e.message, "quota"
      assert_includes e.message, why
    end
  end

  # Fiddle would pass -1 as 4294967295: refused before the call, naming the argument.
  def test_out_of_range_integers_are_refused_not_wrapped
    [{ units: -1 }, { units: 2**32 + 1 }, { hold_ms: -5 }, { hold_ms: 2**64 }, { units: 1.5 }].each do |kw|
      e = assert_raises(ArgumentError) { @table.try_acquire("requests", "acme", **kw) }
      assert_includes e.message, kw.keys.first.to_s
      assert_raises(ArgumentError) { @table.acquire("requests", "acme", timeout: 0.01, **kw) }
    end
    assert_equal 0, in_use, "nothing was granted"
    # Units run from 1 (0 is the library's InvalidRequest); other numbers from 0.
    e = assert_raises(ArgumentError) { @table.try_acquire("requests", "acme", units: -1) }
    assert_includes e.message, "units must be an integer from 1 to 4294967295, not -1"
    e = assert_raises(ArgumentError) { @table.try_acquire("requests", "acme", hold_ms: -5) }
    assert_includes e.message, "hold_ms must be an integer from 0 to"
    assert_raises(ArgumentError) { @table.set_rates("acme", requests_per_s: -1) }
    assert_raises(ArgumentError) { @table.charge("acme", -3) }
  end

  # A Refused raised out of a block that closes its table still has a message.
  def test_a_refusal_outliving_its_table_still_explains_itself
    name = FairshmTest.next_name
    t = Fairshm::Table.create(name, { "pools" => [{ "name" => "requests", "capacity" => 1 }] })
    lease = t.try_acquire("requests", "acme")
    early = assert_raises(Fairshm::Refused) { t.try_acquire("requests", "acme") }
    explained = early.explanation
    late = assert_raises(Fairshm::Refused) { t.try_acquire("requests", "globex") }
    lease.release
    t.close
    assert_predicate t, :closed?
    assert_equal explained, early.explanation, "kept as it was first made"
    assert_includes explained, "acme"
    msg = late.message
    assert msg.start_with?("pool_full: "), msg
    %w[globex requests closed].each { |w| assert_includes msg, w }
    assert_includes msg, "in use 1 of 1"
  ensure
    Fairshm::Table.unlink(name)
  end

  def test_a_rate_refusal_outliving_its_table_states_its_rate
    name = FairshmTest.next_name
    t = Fairshm::Table.create(name, { "pools" => [{ "name" => "requests", "capacity" => 4 }] })
    t.set_rates("acme", work_units_per_s: 100)
    t.charge("acme", 300)
    r = assert_raises(Fairshm::Refused) { t.try_acquire("requests", "acme") }
    t.close
    assert r.message.start_with?("work_debt: "), r.message
    assert_includes r.message, "its work rate: 100 per second"
    refute_includes r.message, "in use"
  ensure
    Fairshm::Table.unlink(name)
  end

  # "a\0b" would reach the library as tenant "a".
  def test_names_a_c_string_cannot_carry_are_refused_not_cut
    e = assert_raises(Fairshm::Error) { @table.try_acquire("requests", "acme\0evil") }
    assert_equal "invalid_tenant", e.kind
    assert_includes e.message, "NUL"
    assert_raises(Fairshm::UnknownPool) { @table.try_acquire("requests\0", "acme") }
    e = assert_raises(Fairshm::Error) { Fairshm::Table.open("#{@name}\0x") }
    assert_equal "invalid_name", e.kind
    assert_raises(TypeError) { @table.try_acquire("requests", nil) }
    assert_equal [], @table.stats["tenants"], "nothing was claimed"
    @table.permit("requests", :acme) { assert_equal 1, in_use }
  end

  # A name is text: one in another encoding is the same tenant as its UTF-8 spelling
  # (it reached the library as its raw bytes, which are not UTF-8, and was refused),
  # and bytes that are not UTF-8 are a bad name of their kind (they were an
  # invalid_request, which the Rack middleware answered with a 500).
  def test_names_are_utf8_text
    latin1 = "caf\xE9".dup.force_encoding(Encoding::ISO_8859_1)
    utf16 = "café".encode(Encoding::UTF_16LE)
    @table.permit("requests", latin1) do
      @table.permit("requests", utf16) do
        tenants = @table.stats["tenants"].map { |t| t["name"] }
        assert_equal ["café"], tenants, "one tenant, named in UTF-8"
        assert_equal 2, in_use
      end
    end
    assert_equal 0, in_use
    # Raw bytes (what Rack servers give header values as) are UTF-8 or refused as a bad
    # tenant name; so is a String with no UTF-8 spelling.
    @table.permit("requests", "caf\xC3\xA9".b) { assert_equal 1, in_use }
    ["caf\xE9".b, "caf\xE9".dup.force_encoding(Encoding::UTF_8),
     "caf\xFF".dup.force_encoding(Encoding::Shift_JIS)].each do |bad|
      e = assert_raises(Fairshm::Error) { @table.try_acquire("requests", bad) }
      assert_equal "invalid_tenant", e.kind, bad.inspect
      assert_includes e.message, "UTF-8"
    end
    e = assert_raises(Fairshm::UnknownPool) { @table.try_acquire("requests\xFF".b, "acme") }
    assert_includes e.message, "UTF-8"
    e = assert_raises(Fairshm::Error) { Fairshm::Table.open("#{@name}\xFF".b) }
    assert_equal "invalid_name", e.kind
    assert_equal ["café"], @table.stats["tenants"].map { |t| t["name"] }
  end

  def test_timeouts_infinite_nan_and_a_closed_table
    @table.acquire("requests", "acme", timeout: Float::INFINITY).release
    assert_raises(ArgumentError) { @table.acquire("requests", "acme", timeout: Float::NAN) }
    t = Fairshm::Table.open(@name)
    t.close
    e = assert_raises(Fairshm::InvalidRequest) { t.try_acquire("requests", "acme") }
    assert_includes e.message, "closed"
    assert_equal "invalid_request", e.kind
    assert_includes assert_raises(Fairshm::Error) { t.stats }.message, "closed"
  end

  def test_rates_are_read_without_claiming_a_tenant_and_by_an_observer
    assert_equal [0, 0], @table.rates("newcomer")
    assert_equal [], @table.stats["tenants"], "reading claimed nothing"
    @table.set_rates("acme", requests_per_s: 5, work_units_per_s: 7)
    obs = Fairshm::Table.observer(@name)
    begin
      assert_equal [5, 7], obs.rates("acme")
      assert_equal [0, 0], obs.rates("newcomer")
      assert_raises(Fairshm::InvalidTenant) { obs.rates("") }
    ensure
      obs.close
    end
    assert_equal ["acme"], @table.stats["tenants"].map { |t| t["name"] }
  end

  # A String that is no file and can be no path is the config's own text.
  def test_config_as_its_json_or_toml_text
    name = FairshmTest.next_name
    t = Fairshm::Table.create(name, ' {"pools": [{"name": "flights", "capacity": 7}]}')
    assert_equal 7, t.stats["pools"][0]["capacity"]
    t2 = Fairshm::Table.open(name, "[[pools]]\nname = \"flights\"\ncapacity = 7\n")
    assert_equal "flights", t2.stats["pools"][0]["name"]
    t2.close
    assert_raises(Fairshm::ConfigMismatch) do
      Fairshm::Table.open(name, '{"pools": [{"name": "flights", "capacity": 8}]}')
    end
    e = assert_raises(ArgumentError) { Fairshm::Table.open(name, "{\"pools\": []}\0") }
    assert_includes e.message, "NUL"
    Dir.mktmpdir do |dir|
      e = assert_raises(Fairshm::InvalidConfig) { Fairshm::Table.open(name, File.join(dir, "missing.toml")) }
      assert_includes e.message, "cannot read config file"
      odd = File.join(dir, "{odd}.json")
      File.write(odd, '{"pools": [{"name": "flights", "capacity": 7}]}')
      Fairshm::Table.open(name, odd).close
    end
    t.close
  ensure
    Fairshm::Table.unlink(name)
  end

  def test_stats_and_observer
    obs = Fairshm::Table.observer(@name)
    @table.permit("requests", "acme") do
      assert_equal 1, obs.stats["pools"][0]["in_use"]
      assert_equal ["acme"], obs.stats["tenants"].map { |t| t["name"] }
    end
    e = assert_raises(Fairshm::ReadOnly) { obs.try_acquire("requests", "acme") }
    assert_equal "read_only", e.kind
    obs.close
  end
  def test_every_code_of_the_header_has_its_own_exception_class
    header = File.read(File.expand_path("../../../include/fairshm.h", __dir__))
    codes = header.scan(/#define FAIRSHM_E_(\w+) (-\d+)/).to_h { |n, c| [Integer(c), n] }
    codes.delete(-99) # a panic caught at the boundary: the base class
    assert_equal 28, codes.size
    codes.each do |code, macro|
      cls = Fairshm::ERRORS.fetch(code)
      kind = Fairshm::Native.code_name(code)
      assert_equal macro.downcase, kind
      want = kind.split("_").map(&:capitalize).join
      assert_equal(want == "Io" ? "IoError" : want, cls.name.split("::").last, code)
      assert_operator cls, :<, Fairshm::Error
    end
    assert_equal codes.size, Fairshm::ERRORS.values.uniq.size, "one class a code"
  end

  def test_full_tables_raise_their_own_class
    name = FairshmTest.next_name
    t = Fairshm::Table.create(name, { "pools" => [{ "name" => "requests", "capacity" => 8 }],
                                      "max_tenants" => 2, "leases_per_process" => 2 })
    begin
      t.try_acquire("requests", "a").release
      t.try_acquire("requests", "b").release
      e = assert_raises(Fairshm::TenantTableFull) { t.try_acquire("requests", "c") }
      assert_equal(-14, e.code)
      assert_includes e.message, '"c"'
      held = [t.try_acquire("requests", "a"), t.try_acquire("requests", "a")]
      assert_equal(-15, assert_raises(Fairshm::LeaseTableFull) { t.try_acquire("requests", "a") }.code)
      held.each(&:release)
    ensure
      t.close
      Fairshm::Table.unlink(name)
    end
  end

  # now_ms: on try_acquire, release and stats, as Rust's _at calls: a recorded sequence
  # of calls replays to the same decisions, and a tenant that left stops counting
  # exactly when its window (1 s) ends. A lease acquired at an explicit time releases at
  # that time when its block ends.
  def test_explicit_now_replays_seed_000s_rule_to_the_window_boundary
    name = FairshmTest.next_name
    trace = lambda do
      t = Fairshm::Table.create(name, { "pools" => [{ "name" => "requests", "capacity" => 4 }] })
      begin
        seen = []
        acme = t.try_acquire("requests", "acme", units: 3, now_ms: 0)
        globex = t.try_acquire("requests", "globex", now_ms: 100)
        [200, 1299].each do |now|
          r = assert_raises(Fairshm::Refused) { t.try_acquire("requests", "acme", now_ms: now) }
          seen << [now, r.reason, r.share, r.active_weight, r.in_use]
          globex.release(now_ms: 300) if now == 200 # globex counts until 1300
        end
        active = [1299, 1300].to_h do |now|
          [now, t.stats(now_ms: now)["pools"][0]["tenants"].to_h { |x| [x["name"], x["active"]] }]
        end
        t.try_acquire("requests", "acme", now_ms: 1300) do |late|
          seen << [1300, "granted", late.units, t.stats(now_ms: 1300)["pools"][0]["in_use"]]
        end
        # Released when its block ended, at the time it was acquired at.
        last = t.stats(now_ms: 1300)["pools"][0]["tenants"].to_h { |x| [x["name"], x["last_active_ms"]] }
        seen << ["released at", last["acme"]]
        acme.release(now_ms: 1400)
        left = t.stats(now_ms: 1400)["pools"][0]
        [seen, active, left["in_use"], left["tenants"].map { |x| x["held"] }]
      ensure
        t.close
        Fairshm::Table.unlink(name)
      end
    end
    got = trace.call
    seen, active, in_use, held = got
    assert_equal [
      [200, "over_share", 2.0, 2, 4], # acme holds 3 of its share of 2; the pool is full
      [1299, "over_share", 2.0, 2, 3], # globex left at 300 and still counts
      [1300, "granted", 1, 4], # its window ended: acme alone has the pool
      ["released at", 1300]
    ], seen
    assert_equal({ 1299 => { "acme" => true, "globex" => true }, 1300 => { "acme" => true, "globex" => false } },
                 active)
    assert_equal [0, [0, 0]], [in_use, held]
    assert_equal got, trace.call, "the same calls replay to the same decisions"
  end

  def test_explicit_now_is_checked_and_does_not_go_with_a_queue_wait
    e = assert_raises(ArgumentError) { @table.try_acquire("requests", "acme", queued_us: 10, now_ms: 5) }
    assert_match(/queued_us/, e.message)
    assert_raises(ArgumentError) { @table.try_acquire("requests", "acme", now_ms: -1) }
    assert_raises(ArgumentError) { @table.stats(now_ms: 1.5) }
    lease = @table.try_acquire("requests", "acme", now_ms: 0)
    e = assert_raises(ArgumentError) { @table.release(lease.id, now_ms: 2**64 - 1) } # FAIRSHM_NOW
    assert_match(/now_ms/, e.message)
    lease.release(now_ms: 0)
    assert_equal 0, @table.stats(now_ms: 0)["pools"][0]["in_use"]
    assert_raises(Fairshm::AlreadyReleased) { @table.release(lease.id, now_ms: 1) }
  end
end
