# frozen_string_literal: true

require_relative "helper"

class TestRack < Minitest::Test
  include FairshmTest

  def app
    Fairshm::RackMiddleware.new(->(_env) { [200, { "Content-Type" => "text/plain" }, ["ok"]] },
                                table: @table, pool: "requests", tenant: ->(env) { env["HTTP_X_TENANT"] })
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

  # Both answers, a 200 held until close and a 429, pass Rack::Lint.
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
    held.each do |b|
      b.each { |_| nil }
      b.close
    end
    assert_equal 0, in_use
  end
end
