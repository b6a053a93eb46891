# frozen_string_literal: true

Gem::Specification.new do |s|
  s.name = "fairshm"
  s.version = "0.1.0"
  s.summary = "Fair sharing of node-wide permit pools among tenants across pre-forked workers"
  s.description = "Ruby binding (Fiddle) over fairshm's C ABI, with Rack middleware."
  s.authors = ["fairshm developers"]
  s.license = "MIT"
  s.required_ruby_version = ">= 2.7"
  # libfairshm.so is copied in by build.sh before `gem build`.
  s.files = Dir["lib/**/*.rb"] + Dir["lib/fairshm/libfairshm.so"]
  s.require_paths = ["lib"]
end
