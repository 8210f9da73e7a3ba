#!/usr/bin/env bash
# Builds the Debian and RPM packages into target/packages, with the man page generated from
# the CLI (`msgx man`): the .deb with cargo-deb (installed from crates.io if missing), the .rpm
# with rpmbuild and packaging/rpm/msgx.spec (package `rpm` on Debian).
#
#   packaging/build.sh [PROFILE]    release (default), or dev to package the binary CI tested
#   packaging/build.sh --tree DIR --binary FILE --out DIR
#                                   packages an already built binary with the packaging files of
#                                   another tree (the previous release, for the upgrade check):
#                                   that tree's Cargo.toml, spec, units and configuration
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
# Without optimisation (#66): the .deb's compression is C code (xz) either way, so it packages
# as fast, and it compiles in half the time (48 CPU-s instead of 93 on this machine): on a fresh
# CI machine the compile was the longest part of the package check.
command -v cargo-deb >/dev/null || cargo install --debug --locked cargo-deb
# A checked package (dev, or another tree's for the upgrade check) is compressed fast: the same
# files, a 5.5 MB .deb in 2 s instead of 4.8 MB in 12 s. A release is compressed as cargo-deb does.
fast=--fast
if [ "${1:-}" = --tree ]; then
  [ $# -eq 6 ] && [ "$3" = --binary ] && [ "$5" = --out ] || {
    echo "usage: packaging/build.sh --tree DIR --binary FILE --out DIR" >&2
    exit 2
  }
  tree=$(cd "$2" && pwd) bin=$4 out=$(mkdir -p "$6" && cd "$6" && pwd)
else
  profile=${1:-release}
  tree=$repo out=$repo/target/packages
  if [ "$profile" = release ]; then
    fast=
    cargo build --release --locked
    bin=target/release/msgx
  else
    # The binary the tests ran: built as the test build builds it (its targets resolve the
    # dev-dependencies' features too), so after tests/run.sh it is fresh, not compiled again
    # (#66: 21 s on a cold CI run).
    cargo build --locked --profile "$profile" --lib --bins --tests
    bin=target/debug/msgx
  fi
fi
# The packages' asset paths name target/release under the tree (its Cargo.toml); any other
# binary is staged there, stripped, so that the package holds exactly the binary that was tested.
if [ "$(realpath -m "$bin")" != "$(realpath -m "$tree/target/release/msgx")" ]; then
  mkdir -p "$tree/target/release"
  strip -o "$tree/target/release/msgx" "$bin"
fi
cd "$tree"
mkdir -p target/man "$out"
rm -f "$out"/msgx*.deb "$out"/msgx*.rpm
target/release/msgx man > target/man/msgx.1
gzip -9 -n -f target/man/msgx.1
# The tree's own target directory: cargo-deb finds target/release there, not in a shared one.
env -u CARGO_TARGET_DIR cargo deb --no-build --no-strip $fast --output "$out/"
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
rm -rf target/rpmbuild
rpmbuild -bb --quiet --define "_topdir $tree/target/rpmbuild" --define "src $tree" \
  --define "version $version" packaging/rpm/msgx.spec
cp target/rpmbuild/RPMS/*/msgx-*.rpm "$out/"
ls -l "$out"
