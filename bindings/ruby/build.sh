#!/bin/sh
# Builds the cdylib, puts it in the gem, builds the gem and installs it locally:
#   bindings/ruby/build.sh [--install]
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
cargo build --release --lib --manifest-path "$root/Cargo.toml"
cp "$target/release/libfairshm.so" "$here/lib/fairshm/libfairshm.so"
cd "$here"
gem build fairshm.gemspec
if [ "${1:-}" = "--install" ]; then
  gem install --local ./fairshm-0.1.0.gem
fi
