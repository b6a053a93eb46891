# frozen_string_literal: true

require_relative "helper"
require "rack"

# The README's Ruby blocks work as written: the config.ru through Rack::Builder (as
# Puma loads it), the other as a script.
class TestReadme < Minitest::Test
  README = File.expand_path("../../../README.md", __dir__)

  def teardown
    Fairshm::Table.unlink("myapp-fairshm")
  rescue Fairshm::NotFound
    nil
  end

  def test_the_readme_ruby_blocks_run
    blocks = File.read(README).scan(/```ruby\n(.*?)```/m).flatten
    assert_equal 2, blocks.size, "a config.ru and a script"
    app = Rack::Builder.new_from_string(blocks[0], "config.ru")
    status, _, body = app.call("HTTP_X_TENANT" => "acme")
    assert_equal 200, status
    body.close
    out, = capture_io { Object.new.instance_eval(blocks[1], "README.md") }
    assert_match(/^0$/, out)
  end
end
